/*
 * engine.c - the engine's lifecycle: configuration and its checks, the call bound derived from
 * it, nodes and contexts, counters, usage figures, and flush_all across the cluster. The calls
 * on keys are in api.c; versions, exptimes and recycling in the memory room.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <glib.h>

#include "log.h"
#include "front.h"
#include "memory/flash.h"

const char *nessie_strerror(int status)
{
    switch ((enum nessie_status)status) {
    case NESSIE_OK: return "ok";
    case NESSIE_NOT_FOUND: return "not found";
    case NESSIE_NOT_STORED: return "not stored";
    case NESSIE_EXISTS: return "exists (version mismatch)";
    case NESSIE_NON_NUMERIC: return "cannot increment or decrement non-numeric value";
    case NESSIE_TOO_BIG: return "item too big";
    case NESSIE_NO_MEMORY: return "out of memory in the data table";
    case NESSIE_INDEX_FULL: return "index full (no room even after migrating)";
    case NESSIE_TIMEOUT: return "timed out";
    case NESSIE_BAD_KEY: return "bad key (length must be 1..250)";
    case NESSIE_INVALID: return "invalid argument";
    case NESSIE_FABRIC_ERROR: return "fabric error (peer unreachable)";
    }
    return "unknown status";
}

/* Defaults, with their reasons: 3 ways and 7 filter bits are the paper's settings (section 6);
 * 1 MiB is memcached's item size limit; a migration recursing deeper than 4 means the index is
 * too full to be worth it. The expiration period is 100 ms, not the paper's 1 s: the paper
 * sizes it as spare slots / PUT rate (section 4.3.1), and a full node holds PUT rate x period
 * of memory out of use. At 1 s, a 64 MiB node (memcached's default memory) that writes 1 KiB
 * items keeps at most a quarter of its ~53k slots ready, so a full node takes at most ~13k
 * SETs/s (bench/eviction.sh measured 14.5k SETs/s on 3 nodes against memcached's 72k, ratio
 * fill_ops 0.20, and 0.55 in a shorter run); at 100 ms, 1.7-1.9x memcached. 100 ms is still
 * 10^4 times a GET over RDMA and 10 times a millisecond tail. A call's budget (op_timeout_ms 0)
 * is the longer of a second and one period: attempts that a stall pushes past a period start
 * again rather than fail the call. */
#define OP_TIMEOUT_MIN_DEFAULT_MS 1000
void nessie_config_defaults(struct nessie_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->backend = NESSIE_BACKEND_SHM;
    cfg->nodes = 1;
    cfg->ways = 3;
    cfg->filter_bits = 7;
    cfg->max_item_size = 1024 * 1024;
    cfg->expiration_ms = 100;
    cfg->migrate_depth = 4;
    cfg->multi_read_bytes = 2048;
    cfg->cache_bytes = 4 * 1024 * 1024;
    cfg->cache_entries = 4096;
    cfg->mode = NESSIE_MODE_CD;
    /* A ring slot per request a node has in flight to one home node: the daemon's workers (a
     * handful) each have one call at a time, and more slots only cost MSG region memory. */
    cfg->sd_slots = 4;
    cfg->flash_page_bytes = 1u << 20;
    cfg->flash_item_min = 512;
    cfg->flash_promote_ms = 10000;
}

static int check_config(const struct nessie_config *c)
{
    const char *why = NULL;
    if (!c->cluster)
        why = "no cluster name";
    else if (c->nodes == 0 || c->nodes > ITE_MAX_NODES ||
             c->self >= (c->node_ids ? c->node_ids : c->nodes))
        why = "node id outside the cluster (or more than 1024 nodes)";
    else if (c->node_ids &&
             (c->node_ids < c->nodes || c->node_ids > ITE_MAX_NODES ||
              c->node_ids > (uint64_t)c->nodes * NESSIE_NODE_IDS_PER_NODE_MAX))
        why = "node_ids must be 0 or nodes..64 x nodes, at most 1024";
    else if (c->ways < 2 || c->ways > NESSIE_MAX_WAYS)
        why = "ways must be 2..8";
    else if (c->filter_bits > ITE_FILTER_BITS_MAX)
        why = "filter bits must be 0..13";
    else if (c->index_slots < c->ways)
        why = "index slots too few";
    else if (c->data_bytes == 0 || c->data_bytes % 8 || c->data_bytes > ITE_MAX_DATA_BYTES)
        why = "data bytes must be a multiple of 8, at most 256 GiB";
    else if (c->max_item_size < dte_size(NESSIE_KEY_MAX, 1))
        why = "max item size too small for a 250-byte key";
    else if (c->expiration_ms == 0)
        why = "expiration period must be positive";
    else if (c->sd_slots == 0 || c->sd_slots > 64)
        why = "sd_slots must be 1..64";
    else if ((unsigned)c->mode > NESSIE_MODE_AUTO)
        why = "unknown mode";
    else if (c->view_wait_ms > 600000)
        why = "view_wait_ms must be at most 600000";
    else if (c->flash_path && strlen(c->flash_path) >= NESSIE_FLASH_PATH_MAX)
        why = "flash path too long";
    else if (c->flash_promote_ms > 3600000)
        why = "flash promote_ms must be at most 3600000 (an hour)";
    if (why) {
        log_error("engine: bad configuration: %s", why);
        return NESSIE_INVALID;
    }
    /* A flash directory that is not there is refused before any table is made; the log's
     * other checks (its sizes, the disk's room, a log of another page size) when it opens. */
    if (c->flash_path && c->flash_path[0]) {
        struct stat sb;
        const char *fwhy = stat(c->flash_path, &sb) != 0 ? strerror(errno)
                           : !S_ISDIR(sb.st_mode)        ? "not a directory"
                                                         : NULL;
        if (fwhy) {
            log_error("engine: bad configuration: [flash] path %s: %s", c->flash_path, fwhy);
            return NESSIE_INVALID;
        }
    }
    return NESSIE_OK;
}

/*
 * The call bound and the takeover grace (issue 26). The grace is what makes an orphan takeover
 * safe: the takeover finishes (or undoes) an entry on its writer's behalf, so it must never run
 * while that writer can still act. Hence the bound L on how long after its start a call can still
 * change anything, and a grace longer than L. The terms, each enforced where it is named:
 *   B  the budget: RUN_ATTEMPTS starts no attempt after start + B (op->deadline);
 *   W  a write that finds no room waits for eviction and quarantine (proto_memory_short): its
 *      deadline moves once by W = 3 E + EVICT_WAIT_MARGIN_MS (one period for freed slots'
 *      quarantine, the rest for a page of another class to drain), so attempts start before
 *      start + B + W at the latest;
 *   E  an attempt makes each CAS only after a Step 0 check that it began less than one period
 *      ago (attempt_expired), so the last attempt posts nothing after start + B + W + E; the
 *      clean-up after the last attempt (write_end: abandoning a published entry) checks the
 *      same limit (op_act_end) and reports TIMEOUT instead of acting past it;
 *   F  a request may still land that long after its post (fab_request_bound_ns: the NIC's
 *      retry limit on verbs; 0 on shm, where a request runs inside its post);
 * so every effect of a call lands before start + L, L = B + W + E + F, and an entry (created
 * after its call started) older than L on its owner's clock has no writer that can still act.
 * The grace adds one period of margin for the few instructions between each Step 0 check and
 * its CAS, which no check can close. A shipped call (sd.c) runs at its home node as a call of its
 * own, under the same bound from the moment a server takes it up, and a server takes up nothing
 * whose requester's budget has run out. A call that waits for a view (front/api.c, issue 28)
 * runs again as a new operation (a creator id of its own) once the view came: each run is
 * bounded by L, which is all the grace needs; the public call's life is at most view_wait_ms
 * plus L (nessie_node_call_bound_ms says so, for whoever times a call from outside).
 *
 * A thread that is descheduled for longer than the grace (a stall) is indistinguishable from a
 * dead one: its entry is taken over. Whatever it does when it runs again is a CAS naming one life
 * of a slot, so it cannot undo the takeover; it only learns that it lost track (its slot is in
 * another life), which it reports as NESSIE_TIMEOUT, never as a definite outcome.
 */
#define EVICT_WAIT_MARGIN_MS 500
static void bound_compute(const struct nessie_config *cfg, const struct fab *fab,
                          struct nessie_bound *b)
{
    const uint64_t ms = 1000000ULL;
    b->budget_ns = (uint64_t)cfg->op_timeout_ms * ms;
    b->period_ns = (uint64_t)cfg->expiration_ms * ms;
    b->memory_wait_ns = 3 * b->period_ns + EVICT_WAIT_MARGIN_MS * ms;
    b->fabric_ns = fab_request_bound_ns(fab);
    b->act_ns = b->budget_ns + b->memory_wait_ns + b->period_ns + b->fabric_ns;
    b->grace_ns = b->act_ns + b->period_ns;
}

uint64_t nessie_node_call_bound_ms(const struct nessie_node *node)
{
    return node->bound.act_ns / 1000000ULL +
           (node->cfg.view_wait_ms ? node->cfg.view_wait_ms + node->bound.fabric_ns / 1000000ULL
                                   : 0);
}

int nessie_node_open(const struct nessie_config *cfg, struct nessie_node **out)
{
    if (!cfg || !out || check_config(cfg) != NESSIE_OK)
        return NESSIE_INVALID;
    struct nessie_node *nd = calloc(1, sizeof(*nd));
    if (!nd)
        return NESSIE_NO_MEMORY;
    nd->cfg = *cfg;
    snprintf(nd->cluster, sizeof(nd->cluster), "%s", cfg->cluster);
    nd->cfg.cluster = nd->cluster;
    /* Kept in the node, as the cluster's name is; NULL when off, so a configuration copied
     * from a node (nessie_node_config) and used after it closed names no freed memory. */
    snprintf(nd->flash_path, sizeof(nd->flash_path), "%s", cfg->flash_path ? cfg->flash_path : "");
    nd->cfg.flash_path = nd->flash_path[0] ? nd->flash_path : NULL;
    if (nd->cfg.node_ids == 0)
        nd->cfg.node_ids = nd->cfg.nodes;
    if (nd->cfg.op_timeout_ms == 0)
        nd->cfg.op_timeout_ms = nd->cfg.expiration_ms > OP_TIMEOUT_MIN_DEFAULT_MS
                                    ? nd->cfg.expiration_ms
                                    : OP_TIMEOUT_MIN_DEFAULT_MS;

    struct fab_config fc = {
        .backend = (enum fab_backend)cfg->backend,
        .cluster = cfg->cluster,
        .nodes = nd->cfg.node_ids,
        .self = cfg->self,
        .region_size = {[FAB_REGION_INDEX] = cfg->index_slots * 8,
                        [FAB_REGION_DATA] = cfg->data_bytes,
                        [FAB_REGION_MSG] = msg_region_bytes(nd->cfg.node_ids, cfg->sd_slots,
                                                            cfg->max_item_size)},
        .addrs = cfg->addrs,
        .device = cfg->device,
    };
    bool created = false;
    int rc = fab_open(&fc, &nd->fab, &created);
    if (rc != FAB_OK) {
        log_error("engine: node %u: fabric: %s", cfg->self, fab_strerror(rc));
        free(nd);
        return rc == FAB_ERR_NOMEM ? NESSIE_NO_MEMORY : NESSIE_FABRIC_ERROR;
    }
    bound_compute(&nd->cfg, nd->fab, &nd->bound);
    nd->data = fab_local_base(nd->fab, FAB_REGION_DATA);
    nd->hdr = (struct data_hdr *)nd->data;
    /* Quarantine: one expiration period, plus the millisecond the scan's clock rounds away. */
    if (slab_open(&nd->slab, nd->data, cfg->data_bytes, cfg->max_item_size, created,
                  (uint64_t)cfg->expiration_ms + 1) != 0) {
        fab_close(nd->fab);
        free(nd);
        return NESSIE_INVALID;
    }
    /* A late WRITE (an access hint nobody waits for) lands within the fabric's request bound:
     * no page is divided anew before that (slab.h, page_freed_ms). */
    slab_set_late_ms(&nd->slab, (nd->bound.fabric_ns + 999999ULL) / 1000000ULL);
    nd->nclasses = nd->slab.nclasses;
    for (uint32_t c = 0; c < nd->nclasses; c++)
        nd->class_size[c] = nd->slab.cls[c].slot_bytes;
    nd->incarnation = __atomic_add_fetch(&nd->hdr->incarnation, 1, __ATOMIC_RELAXED);
    nessie_clock_publish(nd);
    pthread_mutex_init(&nd->stage_lock, NULL);
    pthread_mutex_init(&nd->ctx_lock, NULL);
    pthread_mutex_init(&nd->sweep_lock, NULL);
    pthread_mutex_init(&nd->evict_lock, NULL);
    pthread_mutex_init(&nd->evict_pool_lock, NULL);
    if (mship_init(&nd->view, nd->cfg.self) != NESSIE_OK) {
        log_error("engine: node %u: cannot make the view's lock", cfg->self);
        nd->view_ready = false;
        nessie_node_close(nd);
        return NESSIE_NO_MEMORY;
    }
    nd->view_ready = true;
    /* Ids from nodes on are absent; a node whose own id is one of them is joining (issue 30):
     * absent to itself too, it places nothing on itself and serves no call (mship_self_out)
     * until a change of membership adds it. */
    for (uint32_t id = nd->cfg.nodes; id < nd->cfg.node_ids; id++)
        mship_set_absent(&nd->view, id, true);
    fab_set_fence(nd->fab, &nd->view);
    if (sd_open(nd) != NESSIE_OK) {
        log_error("engine: node %u: out of memory for the request rings' state", cfg->self);
        nessie_node_close(nd);
        return NESSIE_NO_MEMORY;
    }
    if (place_open(nd) != NESSIE_OK) {
        log_error("engine: node %u: out of memory for the placement state", cfg->self);
        nessie_node_close(nd);
        return NESSIE_NO_MEMORY;
    }
    if (nd->flash_path[0]) {
        /* The log goes with the node's memory: recovered when the daemon re-attaches its
         * tables (a restart within its lease: their index entries still name its records),
         * emptied when the tables are new (a first start, or a node back after its removal). */
        struct flash_config flc = {.dir = nd->flash_path, .cluster = nd->cluster,
                                   .node = cfg->self, .bytes = cfg->flash_bytes,
                                   .page_bytes = cfg->flash_page_bytes, .fresh = created};
        char err[512];
        if (flash_open(&flc, &nd->flash, err, sizeof(err)) != 0) {
            log_error("engine: node %u: %s", cfg->self, err);
            nessie_node_close(nd);
            return NESSIE_INVALID;
        }
        struct flash_stats fs;
        flash_stats(nd->flash, &fs);
        log_info("engine: node %u: flash tier %s/%s.node%u.flash, %llu MiB in %llu pages of %u "
                 "KiB, %s; %llu records %s", cfg->self, nd->flash_path, nd->cluster, cfg->self,
                 (unsigned long long)(cfg->flash_bytes >> 20), (unsigned long long)fs.pages,
                 cfg->flash_page_bytes >> 10, fs.uring ? "io_uring" : "pread/pwrite",
                 (unsigned long long)fs.recovered, created ? "(new tables: emptied)" : "recovered");
    }
    log_debug("engine: node %u of %u %s (incarnation %llu, %u size classes)", cfg->self,
              cfg->nodes, created ? "created" : "re-attached",
              (unsigned long long)nd->incarnation, nd->nclasses);
    *out = nd;
    return NESSIE_OK;
}

int nessie_flash_stats(struct nessie_node *nd, struct nessie_flash_stats *out)
{
    if (!nd || !out || !nd->flash)
        return NESSIE_NOT_FOUND;
    struct flash_stats st;
    flash_stats(nd->flash, &st);
    *out = (struct nessie_flash_stats){
        .limit_bytes = nd->cfg.flash_bytes,
        .page_bytes = nd->cfg.flash_page_bytes,
        .pages_free = st.pages_free,
        .pages_used = st.pages - st.pages_free,
        .bytes_used = st.bytes_live,
        .bytes_fragmented = st.bytes_used - st.bytes_live,
        .objects_used = st.objects_live,
        .objects_written = st.objects_written,
        .objects_read = st.objects_read,
        .bytes_written = st.bytes_device,
        .bytes_appended = st.bytes_appended,
        .objects_rewritten = st.objects_rewritten,
        .bytes_rewritten = st.bytes_rewritten,
        .bytes_read = st.bytes_read,
        .page_reclaims = st.page_reclaims,
        .misses = st.misses,
        .crc_failures = st.crc_failures,
        .io_errors = st.io_errors,
        .recovered = st.recovered,
        .ram_bytes = st.ram_bytes,
        .uring = st.uring,
    };
    return NESSIE_OK;
}

void nessie_node_close(struct nessie_node *nd)
{
    if (!nd)
        return;
    if (nd->ctxs)
        log_warn("engine: node closed with contexts still open");
    pthread_mutex_destroy(&nd->ctx_lock);
    pthread_mutex_destroy(&nd->stage_lock);
    pthread_mutex_destroy(&nd->sweep_lock);
    pthread_mutex_destroy(&nd->evict_lock);
    pthread_mutex_destroy(&nd->evict_pool_lock);
    if (nd->view_ready)
        mship_destroy(&nd->view);
    free(nd->evict_pool);
    flash_close(nd->flash);
    place_close(nd);
    sd_close(nd);
    g_free(nd->sweep_prev);
    free(nd->stage);
    slab_close(&nd->slab);
    fab_close(nd->fab);
    free(nd);
}

_Static_assert((int)NESSIE_CHANGE_ADD == (int)MSHIP_CHANGE_ADD &&
                   (int)NESSIE_CHANGE_RETIRE == (int)MSHIP_CHANGE_RETIRE &&
                   (int)NESSIE_CHANGE_ANNOUNCE == (int)MSHIP_PHASE_ANNOUNCE &&
                   (int)NESSIE_CHANGE_MOVE == (int)MSHIP_PHASE_MOVE,
               "the public change enums are membership.h's");

int nessie_change_set(struct nessie_node *nd, uint32_t id, enum nessie_change_kind kind,
                      enum nessie_change_phase phase)
{
    if (!nd || id >= nd->cfg.node_ids ||
        (kind != NESSIE_CHANGE_ADD && kind != NESSIE_CHANGE_RETIRE))
        return NESSIE_INVALID;
    int rc = mship_change_set(&nd->view, id, (enum mship_change_kind)kind,
                              (enum mship_change_phase)phase);
    if (rc == NESSIE_OK)
        log_debug("engine: node %u: %s of node %u: %s", nd->cfg.self,
                  kind == NESSIE_CHANGE_ADD ? "add" : "retire", id,
                  phase == NESSIE_CHANGE_ANNOUNCE ? "announced" : "moving");
    return rc;
}

int nessie_change_commit(struct nessie_node *nd)
{
    if (!nd)
        return NESSIE_INVALID;
    int rc = mship_change_commit(&nd->view);
    if (rc == NESSIE_OK)
        log_debug("engine: node %u: change of membership committed", nd->cfg.self);
    return rc;
}

int nessie_change_get(const struct nessie_node *nd, uint32_t *id, enum nessie_change_kind *kind,
                      enum nessie_change_phase *phase)
{
    if (!nd || !id || !kind || !phase)
        return NESSIE_INVALID;
    uint32_t w = mship_change(&nd->view);
    if (!w)
        return NESSIE_NOT_FOUND;
    *id = mship_change_node(w);
    *kind = (enum nessie_change_kind)mship_change_kind(w);
    *phase = (enum nessie_change_phase)mship_change_phase(w);
    return NESSIE_OK;
}

int nessie_members_placed(struct nessie_node *nd, const bool *placed, uint32_t n)
{
    if (!nd || !placed || n != nd->cfg.node_ids || mship_change(&nd->view))
        return NESSIE_INVALID;
    uint32_t count = 0;
    for (uint32_t i = 0; i < n; i++)
        count += placed[i];
    if (count == 0)
        return NESSIE_INVALID;
    for (uint32_t i = 0; i < n; i++)
        if (mship_set_absent(&nd->view, i, !placed[i]) != NESSIE_OK)
            return NESSIE_INVALID; /* ids below the capacity are always valid: not reached */
    log_info("engine: node %u: %u placed member%s of %u ids%s", nd->cfg.self, count,
             count == 1 ? "" : "s", n, placed[nd->cfg.self] ? "" : " (this node joins)");
    return NESSIE_OK;
}

int nessie_view_install(struct nessie_node *nd, const struct nessie_view *view)
{
    if (!nd || !view)
        return NESSIE_INVALID;
    int rc = mship_install(&nd->view, view);
    if (rc == NESSIE_OK)
        log_debug("engine: node %u: view %llu installed (%u members)", nd->cfg.self,
                  (unsigned long long)view->epoch, view->nmembers);
    return rc;
}

int nessie_view_get(struct nessie_node *nd, struct nessie_view *out)
{
    if (!nd || !out)
        return NESSIE_INVALID;
    mship_get(&nd->view, out);
    return NESSIE_OK;
}

uint64_t nessie_view_epoch(const struct nessie_node *nd)
{
    return mship_epoch(&nd->view);
}

void nessie_view_renew(struct nessie_node *nd, uint64_t valid_until_ns)
{
    mship_renew(&nd->view, valid_until_ns);
}

int nessie_view_suspend(struct nessie_node *nd, uint32_t member)
{
    if (!nd || member >= NESSIE_NODES_MAX)
        return NESSIE_INVALID;
    mship_suspend(&nd->view, member);
    return NESSIE_OK;
}

int nessie_view_rejoin(struct nessie_node *nd, uint32_t member)
{
    if (!nd || member >= NESSIE_NODES_MAX)
        return NESSIE_INVALID;
    mship_rejoin(&nd->view, member);
    return NESSIE_OK;
}

uint32_t nessie_fence_changes(const struct nessie_node *nd)
{
    return atomic_load_explicit((_Atomic uint32_t *)&nd->view.fence_changes, memory_order_acquire);
}

uint64_t nessie_node_incarnation(const struct nessie_node *nd)
{
    return nd->incarnation;
}

int nessie_node_unlink(const struct nessie_config *cfg)
{
    if (!cfg || !cfg->cluster)
        return NESSIE_INVALID;
    int rc = fab_unlink((enum fab_backend)cfg->backend, cfg->cluster, cfg->self);
    if (rc == FAB_OK)
        return NESSIE_OK;
    if (rc == FAB_ERR_INVAL || rc == FAB_ERR_NOTSUP)
        return NESSIE_INVALID;
    log_error("engine: cannot remove node %u of cluster %s: %s", cfg->self, cfg->cluster,
              fab_strerror(rc));
    return NESSIE_FABRIC_ERROR;
}

uint64_t nessie_node_grace_ms(const struct nessie_node *node)
{
    return node->bound.grace_ns / 1000000ULL;
}

uint64_t nessie_node_request_bound_ms(const struct nessie_node *node)
{
    return (node->bound.fabric_ns + 999999ULL) / 1000000ULL;
}

const struct nessie_config *nessie_node_config(const struct nessie_node *node)
{
    return &node->cfg;
}

struct fab *nessie_node_fabric(struct nessie_node *node) { return node->fab; }

int nessie_ctx_create(struct nessie_node *nd, struct nessie_ctx **out)
{
    if (!nd || !out)
        return NESSIE_INVALID;
    struct nessie_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return NESSIE_NO_MEMORY;
    ctx->node = nd;
    ctx->clock_seen = calloc(nd->cfg.node_ids, sizeof(*ctx->clock_seen));
    if (!ctx->clock_seen || fab_ep_create(nd->fab, 0, &ctx->ep) != FAB_OK) {
        free(ctx->clock_seen);
        free(ctx);
        return NESSIE_NO_MEMORY;
    }
    if (!nd->cfg.no_cache && nd->cfg.cache_bytes && nd->cfg.cache_entries) {
        ctx->cache = cache_create(nd->cfg.cache_bytes, nd->cfg.cache_entries);
        if (!ctx->cache) {
            fab_ep_destroy(ctx->ep);
            free(ctx->clock_seen);
            free(ctx);
            return NESSIE_NO_MEMORY;
        }
    }
    pthread_mutex_lock(&nd->ctx_lock);
    ctx->id = nd->next_ctx_id++;
    ctx->next = nd->ctxs;
    nd->ctxs = ctx;
    pthread_mutex_unlock(&nd->ctx_lock);
    ctx->rng = nessie_mono_ns() ^ ((uint64_t)ctx->id << 32) ^ 0x9e3779b97f4a7c15ULL;
    ctx->mode = nd->cfg.mode;
    *out = ctx;
    return NESSIE_OK;
}

int nessie_ctx_set_sd_helper(struct nessie_ctx *ctx, struct nessie_ctx *helper)
{
    if (!ctx || (helper && (helper == ctx || helper->node != ctx->node || helper->sd_helper)))
        return NESSIE_INVALID;
    ctx->sd_helper = helper;
    return NESSIE_OK;
}

/* Add counters a into sum, reading a with relaxed atomics (its thread may be writing). */
static void counters_add(struct nessie_counters *sum, const struct nessie_counters *a)
{
    const uint64_t *src = (const uint64_t *)a;
    uint64_t *dst = (uint64_t *)sum;
    _Static_assert(sizeof(*a) % sizeof(uint64_t) == 0, "counters are all uint64_t");
    for (size_t i = 0; i < sizeof(*a) / sizeof(uint64_t); i++)
        dst[i] += __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

struct nessie_node *nessie_ctx_node(const struct nessie_ctx *ctx) { return ctx->node; }

void nessie_ctx_destroy(struct nessie_ctx *ctx)
{
    if (!ctx)
        return;
    struct nessie_node *nd = ctx->node;
    pthread_mutex_lock(&nd->ctx_lock);
    for (struct nessie_ctx **p = &nd->ctxs; *p; p = &(*p)->next)
        if (*p == ctx) {
            *p = ctx->next;
            break;
        }
    counters_add(&nd->retired, &ctx->ctr);
    pthread_mutex_unlock(&nd->ctx_lock);
    for (int b = 0; b < 3; b++)
        free(ctx->buf[b]);
    free(ctx->sd_buf[0]);
    free(ctx->sd_buf[1]);
    cache_destroy(ctx->cache);
    fab_ep_destroy(ctx->ep);
    free(ctx->clock_seen);
    free(ctx);
}

const struct nessie_counters *nessie_ctx_counters(const struct nessie_ctx *ctx)
{
    return &ctx->ctr;
}

void nessie_node_counters(struct nessie_node *nd, struct nessie_counters *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&nd->ctx_lock);
    counters_add(out, &nd->retired);
    for (struct nessie_ctx *c = nd->ctxs; c; c = c->next)
        counters_add(out, &c->ctr);
    pthread_mutex_unlock(&nd->ctx_lock);
    pthread_mutex_lock(&nd->slab.lock);
    out->scanned = nd->slab.scanned;
    pthread_mutex_unlock(&nd->slab.lock);
}

uint64_t nessie_index_used(struct nessie_node *nd)
{
    uint64_t buf[512], used = 0;
    for (uint64_t s = 0; s < nd->cfg.index_slots; s += 512) {
        uint64_t n = nd->cfg.index_slots - s < 512 ? nd->cfg.index_slots - s : 512;
        if (fab_local_read(nd->fab, FAB_REGION_INDEX, s * 8, buf, (uint32_t)(n * 8)) != FAB_OK)
            break;
        for (uint64_t i = 0; i < n; i++)
            used += buf[i] != 0;
    }
    return used;
}

uint32_t nessie_class_usage(struct nessie_node *nd, struct nessie_class_usage *out, uint32_t max)
{
    pthread_mutex_lock(&nd->slab.lock);
    for (uint32_t c = 0; c < nd->nclasses && c < max; c++) {
        out[c].slot_bytes = nd->slab.cls[c].slot_bytes;
        out[c].slots = nd->slab.cls[c].slots;
        out[c].free = nd->slab.cls[c].nfree;
        out[c].recycled = nd->slab.cls[c].recycled;
        out[c].peer_recycled = slab_peer_marks(&nd->slab.cls[c]);
        out[c].pages = nd->slab.cls[c].npages;
        out[c].slots_per_page = slab_slots_per_page(&nd->slab, c);
        out[c].used = nd->slab.cls[c].used;
        out[c].bytes = nd->slab.cls[c].bytes;
        out[c].failed = nd->slab.cls[c].failed;
    }
    pthread_mutex_unlock(&nd->slab.lock);
    return nd->nclasses;
}

int nessie_mem_limit(struct nessie_node *nd, uint64_t bytes)
{
    if (bytes > nd->cfg.data_bytes)
        return NESSIE_INVALID; /* the region is mapped once, at its configured size */
    return slab_set_limit(&nd->slab, bytes) ? NESSIE_OK : NESSIE_INVALID;
}

int nessie_class_of(struct nessie_node *nd, size_t key_len, size_t value_len)
{
    if (key_len > NESSIE_KEY_MAX || value_len > UINT32_MAX)
        return -1;
    return slab_class_for(&nd->slab, dte_size((uint32_t)key_len, (uint32_t)value_len));
}

/* See nessie_flush: how far ahead of real time an unreachable node's version clock may be. */
#define FLUSH_MARGIN_NS 1000000000ULL
/* See nessie_flush_delayed: clock skew between hosts (NTP keeps it to milliseconds) plus a
 * fabric round trip, with room to spare. */
#define FLUSH_FOLD_MARGIN_NS 50000000ULL

/* Raise node n's flush word to t (a CAS loop: it is never lowered, and concurrent flushes
 * leave the latest). Returns the fabric's status. */
static int flush_raise(struct nessie_ctx *ctx, uint32_t n, uint64_t t)
{
    uint64_t cur = 0;
    for (int tries = 0; tries < 64; tries++) {
        uint64_t old;
        struct fab_wr cas = {.opcode = FAB_OP_CAS, .node = n, .region = FAB_REGION_DATA,
                             .offset = DATA_HDR_OFF_FLUSH, .local = &old, .length = 8,
                             .compare = cur, .swap = t};
        int rc = fab_exec(ctx->ep, &cas);
        if (rc != FAB_OK)
            return rc;
        if (old == cur || old >= t)
            break;
        cur = old;
    }
    return FAB_OK;
}

/* Set node n's delayed flush time (0: none). Returns the fabric's status. */
static int flush_at_write(struct nessie_ctx *ctx, uint32_t n, uint64_t at)
{
    struct fab_wr wr = {.opcode = FAB_OP_WRITE, .node = n, .region = FAB_REGION_DATA,
                        .offset = DATA_HDR_OFF_FLUSH_AT, .local = &at, .length = 8};
    return fab_exec(ctx->ep, &wr);
}

/* The nodes a flush should reach: all but those a view fenced (issue 28), which never serve
 * again and whose memory is never touched, so missing them is nothing to warn about, and absent
 * ids (issue 30), which have no memory. */
static uint32_t engine_members(const struct nessie_node *nd)
{
    uint32_t n = nd->cfg.node_ids;
    for (uint32_t i = 0; i < nd->cfg.node_ids; i++)
        n -= mship_fenced(&nd->view, i) || mship_absent(&nd->view, i);
    return n;
}

int nessie_flush(struct nessie_ctx *ctx)
{
    struct nessie_node *nd = ctx->node;
    /* The flush time must be at least every node's version clock, so that everything already
     * written anywhere is older than it; each node's later writes then get versions above it
     * (nessie_version_next reads the flush word of its own node). A node that cannot be reached
     * is skipped: its clock is read again, and the flush learnt, when it comes back
     * (nessie_node_open), before it serves. */
    uint64_t t = VERSION_TIME(nessie_real_ns());
    bool reach[ITE_MAX_NODES];
    uint32_t reached = 0;
    for (uint32_t n = 0; n < nd->cfg.node_ids; n++) {
        uint64_t lv;
        struct fab_wr wr = {.opcode = FAB_OP_READ, .node = n, .region = FAB_REGION_DATA,
                            .offset = __builtin_offsetof(struct data_hdr, last_version),
                            .local = &lv, .length = 8};
        reach[n] = fab_exec(ctx->ep, &wr) == FAB_OK;
        if (!reach[n])
            continue;
        if (VERSION_TIME(lv) + 0xFFF > t)
            t = VERSION_TIME(lv) + 0xFFF;
    }
    /* A node that cannot be reached has a version clock we cannot read: its items may carry
     * versions a little ahead of real time (a clock is pushed past the time when one node
     * writes faster than its granule). FLUSH_MARGIN_NS covers that lead with room to spare; the
     * cost is CAS tokens that jump ahead by as much. */
    for (uint32_t n = 0; n < nd->cfg.node_ids; n++)
        if (!reach[n] && !mship_absent(&nd->view, n)) { /* an absent id has no clock */
            t = VERSION_TIME(t + FLUSH_MARGIN_NS);
            break;
        }
    for (uint32_t n = 0; n < nd->cfg.node_ids; n++) {
        if (reach[n] && flush_raise(ctx, n, t) != FAB_OK)
            reach[n] = false;
        reached += reach[n];
    }
    /* A delayed flush still pending is replaced by this one, as in memcached (the last
     * flush_all wins); one whose time has come is covered by this one (t is later). */
    for (uint32_t n = 0; n < nd->cfg.node_ids; n++)
        if (reach[n] && flush_at_write(ctx, n, 0) != FAB_OK) {
            reach[n] = false;
            reached--;
        }
    if (reached < engine_members(nd))
        log_warn("engine: flush_all reached %u of %u nodes; the others learn it when they return",
                 reached, engine_members(nd));
    /* Reaching no node at all (not even this one) did nothing: a definite failure. Otherwise
     * the flush has happened for every item a live node can serve. */
    return reached ? NESSIE_OK : NESSIE_FABRIC_ERROR;
}

int nessie_flush_delayed(struct nessie_ctx *ctx, int64_t exptime)
{
    struct nessie_node *nd = ctx->node;
    uint32_t when_s = nessie_abs_exptime(exptime);
    uint64_t now = nessie_real_ns();
    if (exptime <= 0 || (uint64_t)when_s * 1000000000ULL <= now)
        return nessie_flush(ctx);
    uint64_t at = (uint64_t)when_s * 1000000000ULL;
    uint32_t reached = 0;
    for (uint32_t n = 0; n < nd->cfg.node_ids; n++) {
        /* A delayed flush whose time has come on this node stays in effect: it moves into the
         * flush word (raised by CAS, never lowered) before the new time replaces it. */
        uint64_t old;
        struct fab_wr rd = {.opcode = FAB_OP_READ, .node = n, .region = FAB_REGION_DATA,
                            .offset = DATA_HDR_OFF_FLUSH_AT, .local = &old, .length = 8};
        if (fab_exec(ctx->ep, &rd) != FAB_OK)
            continue;
        bool ok = true;
        /* Judged now, not at the call's start (a slow node earlier in the loop), and with a
         * margin for node n's clock being ahead of ours and for the time until our write
         * lands: a pending flush that n already holds due, replaced, would bring its items
         * back. Within the margin, memcached's "the last flush_all replaces a pending one"
         * gives way: the old one takes effect a little early. */
        if (old && old <= nessie_real_ns() + FLUSH_FOLD_MARGIN_NS)
            ok = flush_raise(ctx, n, VERSION_TIME(old)) == FAB_OK;
        if (ok && flush_at_write(ctx, n, at) == FAB_OK)
            reached++;
    }
    if (reached < engine_members(nd))
        log_warn("engine: flush_all %lld reached %u of %u nodes; the others learn it when they "
                 "return", (long long)exptime, reached, engine_members(nd));
    return reached ? NESSIE_OK : NESSIE_FABRIC_ERROR;
}

void nessie_flush_catch_up(struct nessie_ctx *ctx)
{
    struct nessie_node *nd = ctx->node;
    uint64_t mine = nessie_flush_ns(nd);
    for (uint32_t n = 0; n < nd->cfg.node_ids; n++) {
        uint64_t f;
        struct fab_wr wr = {.opcode = FAB_OP_READ, .node = n, .region = FAB_REGION_DATA,
                            .offset = DATA_HDR_OFF_FLUSH, .local = &f, .length = 8};
        if (n != nd->cfg.self && fab_exec(ctx->ep, &wr) == FAB_OK && f > mine)
            mine = f;
    }
    /* Our own delayed flush, if due, stays in effect whatever the peers say (they may never
     * have learnt it): into the flush word too, as nessie_flush_delayed folds one. */
    uint64_t own = nessie_flush_at_due(nd, nessie_real_ns());
    if (own && VERSION_TIME(own) > mine)
        mine = VERSION_TIME(own);
    /* Only ever raised, by CAS, as nessie_flush does on every node. */
    uint64_t cur = nessie_flush_ns(nd);
    while (cur < mine &&
           !__atomic_compare_exchange_n(&nd->hdr->flush_ns, &cur, mine, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
        ;
    /* The delayed flush as the reachable peers know it (set, replaced or cancelled while this
     * node was away): the latest of theirs, not ours; ours only if none answers. */
    uint64_t at = 0;
    bool heard = false;
    for (uint32_t n = 0; n < nd->cfg.node_ids; n++) {
        uint64_t f;
        struct fab_wr wr = {.opcode = FAB_OP_READ, .node = n, .region = FAB_REGION_DATA,
                            .offset = DATA_HDR_OFF_FLUSH_AT, .local = &f, .length = 8};
        if (n == nd->cfg.self || fab_exec(ctx->ep, &wr) != FAB_OK)
            continue;
        heard = true;
        if (f > at)
            at = f;
    }
    if (heard)
        __atomic_store_n(&nd->hdr->flush_at_ns, at, __ATOMIC_RELEASE);
}
