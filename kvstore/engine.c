/*
 * engine.c - the engine's lifecycle (nodes, contexts), counters, versions, flush and recycling.
 * The operations themselves are in protocol.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <glib.h>

#include "engine_int.h"
#include "log.h"

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
 * 1 MiB is memcached's item size limit; 1 s is the paper's expiration period; a migration
 * recursing deeper than 4 means the index is too full to be worth it. */
void nessie_config_defaults(struct nessie_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->backend = FAB_BACKEND_SHM;
    cfg->nodes = 1;
    cfg->ways = 3;
    cfg->filter_bits = 7;
    cfg->max_item_size = 1024 * 1024;
    cfg->expiration_ms = 1000;
    cfg->migrate_depth = 4;
    cfg->multi_read_bytes = 2048;
    cfg->cache_bytes = 4 * 1024 * 1024;
    cfg->cache_entries = 4096;
}

uint64_t nessie_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t nessie_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t nessie_flush_ns(struct nessie_node *node)
{
    return __atomic_load_n(&node->hdr->flush_ns, __ATOMIC_ACQUIRE);
}

uint64_t nessie_version_next(struct nessie_node *node)
{
    /* last_version lives in the region, so versions keep increasing across restarts. */
    uint64_t *lv = &node->hdr->last_version;
    uint64_t last = __atomic_load_n(lv, __ATOMIC_RELAXED), next;
    do {
        uint64_t t = VERSION_TIME(nessie_real_ns());
        uint64_t floor = VERSION_TIME(last) + 0x1000;
        uint64_t flush = VERSION_TIME(nessie_flush_ns(node)) + 0x1000;
        if (t < floor)
            t = floor;
        if (t < flush)
            t = flush;
        next = t | (node->cfg.self & 0xFFF);
    } while (!__atomic_compare_exchange_n(lv, &last, next, false, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return next;
}

static int check_config(const struct nessie_config *c)
{
    const char *why = NULL;
    if (!c->cluster)
        why = "no cluster name";
    else if (c->nodes == 0 || c->nodes > ITE_MAX_NODES || c->self >= c->nodes)
        why = "node id outside the cluster (or more than 4096 nodes)";
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
    if (why)
        log_error("engine: bad configuration: %s", why);
    return why ? NESSIE_INVALID : NESSIE_OK;
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
    if (nd->cfg.op_timeout_ms == 0)
        nd->cfg.op_timeout_ms = nd->cfg.expiration_ms;
    /* A takeover must never race a live writer: every call ends within op_timeout_ms, and every
     * view it acted on expires one period later. */
    nd->grace_ns = ((uint64_t)nd->cfg.op_timeout_ms + 2ULL * nd->cfg.expiration_ms) * 1000000ULL;

    struct fab_config fc = {
        .backend = cfg->backend,
        .cluster = cfg->cluster,
        .nodes = cfg->nodes,
        .self = cfg->self,
        .region_size = {[FAB_REGION_INDEX] = cfg->index_slots * 8,
                        [FAB_REGION_DATA] = cfg->data_bytes},
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
    nd->data = fab_local_base(nd->fab, FAB_REGION_DATA);
    nd->hdr = (struct data_hdr *)nd->data;
    if (slab_open(&nd->slab, nd->data, cfg->data_bytes, cfg->max_item_size, created) != 0) {
        fab_close(nd->fab);
        free(nd);
        return NESSIE_INVALID;
    }
    nd->nclasses = nd->slab.nclasses;
    for (uint32_t c = 0; c < nd->nclasses; c++)
        nd->class_size[c] = nd->slab.cls[c].slot_bytes;
    nd->incarnation = __atomic_add_fetch(&nd->hdr->incarnation, 1, __ATOMIC_RELAXED);
    pthread_mutex_init(&nd->stage_lock, NULL);
    pthread_mutex_init(&nd->ctx_lock, NULL);
    pthread_mutex_init(&nd->sweep_lock, NULL);
    log_debug("engine: node %u of %u %s (incarnation %llu, %u size classes)", cfg->self,
              cfg->nodes, created ? "created" : "re-attached",
              (unsigned long long)nd->incarnation, nd->nclasses);
    *out = nd;
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
    g_free(nd->sweep_prev);
    free(nd->stage);
    slab_close(&nd->slab);
    fab_close(nd->fab);
    free(nd);
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
    if (fab_ep_create(nd->fab, 0, &ctx->ep) != FAB_OK) {
        free(ctx);
        return NESSIE_NO_MEMORY;
    }
    if (!nd->cfg.no_cache && nd->cfg.cache_bytes && nd->cfg.cache_entries) {
        ctx->cache = cache_create(nd->cfg.cache_bytes, nd->cfg.cache_entries);
        if (!ctx->cache) {
            fab_ep_destroy(ctx->ep);
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
    *out = ctx;
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
    cache_destroy(ctx->cache);
    fab_ep_destroy(ctx->ep);
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
}

unsigned char *nessie_ctx_buf(struct nessie_ctx *ctx, int b, size_t len)
{
    if (ctx->cap[b] < len) {
        size_t cap = ctx->cap[b] ? ctx->cap[b] : 4096;
        while (cap < len)
            cap *= 2;
        unsigned char *p = realloc(ctx->buf[b], cap);
        if (!p)
            return NULL;
        ctx->buf[b] = p;
        ctx->cap[b] = cap;
    }
    return ctx->buf[b];
}

/* Mark a DTE recycled: the recycle bit and its expiry in one word (A.1.3 step 7). Its owner
 * returns it to a free list once the expiry has passed. */
static void mark_recycled(struct nessie_ctx *ctx, uint64_t ite)
{
    struct nessie_node *nd = ctx->node;
    /* Rounded up by a millisecond: the word holds whole milliseconds, and a slot reused even a
     * fraction of a period early breaks the guarantee caches and slow readers rely on. */
    uint64_t expiry_ms = nessie_real_ns() / 1000000ULL + nd->cfg.expiration_ms + 1;
    uint64_t word = DTE_RECYCLED | (expiry_ms & DTE_RECYCLE_MS_MASK);
    uint64_t off = ite_offset(ite) + DTE_OFF_RECYCLE;
    if (ite_node(ite) == nd->cfg.self) {
        fab_local_write(nd->fab, FAB_REGION_DATA, off, &word, sizeof(word));
    } else {
        struct fab_wr wr = {.opcode = FAB_OP_WRITE, .node = ite_node(ite),
                            .region = FAB_REGION_DATA, .offset = off, .local = &word, .length = 8};
        int rc = fab_exec(ctx->ep, &wr);
        if (rc != FAB_OK)
            log_warn("engine: cannot mark DTE %016llx recycled: %s", (unsigned long long)ite,
                     fab_strerror(rc));
    }
    CTR_ADD(ctx->ctr.marked, 1);
}

void nessie_recycle(struct nessie_ctx *ctx, uint64_t ite)
{
    struct nessie_node *nd = ctx->node;
    if (ite_empty(ite))
        return;
    if (nd->cfg.background_recycle) {
        pthread_mutex_lock(&nd->stage_lock);
        if (nd->nstage == nd->stage_cap) {
            size_t cap = nd->stage_cap ? nd->stage_cap * 2 : 1024;
            uint64_t *p = realloc(nd->stage, cap * sizeof(*p));
            if (p) {
                nd->stage = p;
                nd->stage_cap = cap;
            }
        }
        bool staged = nd->nstage < nd->stage_cap;
        if (staged)
            nd->stage[nd->nstage++] = ite;
        pthread_mutex_unlock(&nd->stage_lock);
        if (staged) {
            CTR_ADD(ctx->ctr.staged, 1);
            return;
        }
    }
    mark_recycled(ctx, ite);
}

size_t nessie_recycle_run(struct nessie_ctx *ctx, size_t scan_slots)
{
    struct nessie_node *nd = ctx->node;
    size_t done = 0;
    /* Take the whole staged batch under the lock, mark it outside (marks may be fabric WRITEs). */
    pthread_mutex_lock(&nd->stage_lock);
    uint64_t *batch = nd->stage;
    size_t n = nd->nstage;
    nd->stage = NULL;
    nd->nstage = nd->stage_cap = 0;
    pthread_mutex_unlock(&nd->stage_lock);
    for (size_t i = 0; i < n; i++)
        mark_recycled(ctx, batch[i]);
    free(batch);
    done += n;
    size_t freed = slab_scan(&nd->slab, scan_slots, nessie_real_ns() / 1000000ULL);
    CTR_ADD(ctx->ctr.freed, freed);
    return done + freed;
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
    }
    pthread_mutex_unlock(&nd->slab.lock);
    return nd->nclasses;
}

int nessie_flush(struct nessie_ctx *ctx)
{
    struct nessie_node *nd = ctx->node;
    /* The flush time must be at least every node's version clock, so that everything already
     * written anywhere is older than it; each node's later writes then get versions above it
     * (nessie_version_next reads the flush word of its own node). */
    uint64_t t = VERSION_TIME(nessie_real_ns());
    for (uint32_t n = 0; n < nd->cfg.nodes; n++) {
        uint64_t lv;
        struct fab_wr wr = {.opcode = FAB_OP_READ, .node = n, .region = FAB_REGION_DATA,
                            .offset = __builtin_offsetof(struct data_hdr, last_version),
                            .local = &lv, .length = 8};
        if (fab_exec(ctx->ep, &wr) != FAB_OK)
            return NESSIE_FABRIC_ERROR;
        if (VERSION_TIME(lv) + 0xFFF > t)
            t = VERSION_TIME(lv) + 0xFFF;
    }
    for (uint32_t n = 0; n < nd->cfg.nodes; n++) {
        uint64_t cur = 0;
        for (;;) {
            uint64_t old;
            struct fab_wr cas = {.opcode = FAB_OP_CAS, .node = n, .region = FAB_REGION_DATA,
                                 .offset = DATA_HDR_OFF_FLUSH, .local = &old, .length = 8,
                                 .compare = cur, .swap = t};
            if (fab_exec(ctx->ep, &cas) != FAB_OK)
                return NESSIE_FABRIC_ERROR;
            if (old == cur || old >= t)
                break;
            cur = old;
        }
    }
    return NESSIE_OK;
}

/* --- leak sweep ------------------------------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct sweep_scan {
    struct nessie_node *nd;
    GHashTable *referenced; /* offsets in this node's region that something still needs */
    GArray *candidates;     /* offsets that look leaked now */
    uint64_t now_ns;
};

static void sweep_slot(void *arg, uint32_t cls, uint64_t off)
{
    struct sweep_scan *sc = arg;
    struct dte_hdr h;
    (void)cls;
    fab_local_read(sc->nd->fab, FAB_REGION_DATA, off, &h, 32); /* state, recycle, prev, version */
    fab_local_read(sc->nd->fab, FAB_REGION_DATA, off + 40, &h.created_ns, 8);
    if (h.state == 0 && h.recycle == 0)
        return; /* free */
    if (h.recycle & DTE_RECYCLED)
        return; /* on its way back already */
    if (h.created_ns + sc->nd->grace_ns > sc->now_ns)
        return; /* may belong to an operation still running */
    if (g_hash_table_contains(sc->referenced, &off))
        return;
    g_array_append_val(sc->candidates, off);
}

/* Read every node's index; note which of this node's DTEs are referenced, directly or as the
 * previous version of an entry that is not committed yet (its readers still use it). */
static int sweep_references(struct nessie_ctx *ctx, GHashTable *referenced)
{
    struct nessie_node *nd = ctx->node;
    const size_t chunk = 8192; /* ITEs per READ */
    uint64_t *buf = malloc(chunk * 8);
    if (!buf)
        return -1;
    for (uint32_t n = 0; n < nd->cfg.nodes; n++) {
        for (uint64_t s0 = 0; s0 < nd->cfg.index_slots; s0 += chunk) {
            uint64_t cnt = nd->cfg.index_slots - s0 < chunk ? nd->cfg.index_slots - s0 : chunk;
            struct fab_wr wr = {.opcode = FAB_OP_READ, .node = n, .region = FAB_REGION_INDEX,
                                .offset = s0 * 8, .local = buf, .length = (uint32_t)(cnt * 8)};
            if (fab_exec(ctx->ep, &wr) != FAB_OK) {
                free(buf);
                return -1;
            }
            for (uint64_t i = 0; i < cnt; i++) {
                uint64_t ite = buf[i];
                if (ite_empty(ite) || ite_class(ite) >= nd->nclasses)
                    continue;
                if (ite_node(ite) == nd->cfg.self) {
                    uint64_t *off = g_new(uint64_t, 1);
                    *off = ite_offset(ite);
                    g_hash_table_add(referenced, off);
                }
                uint64_t hdr[3]; /* state, recycle, prev ITE */
                struct fab_wr rd = {.opcode = FAB_OP_READ, .node = ite_node(ite),
                                    .region = FAB_REGION_DATA, .offset = ite_offset(ite),
                                    .local = hdr, .length = sizeof(hdr)};
                if (fab_exec(ctx->ep, &rd) != FAB_OK) {
                    free(buf);
                    return -1;
                }
                if (!(hdr[0] & DTE_COMMITTED) && !ite_empty(hdr[2]) &&
                    ite_node(hdr[2]) == nd->cfg.self) {
                    uint64_t *off = g_new(uint64_t, 1);
                    *off = ite_offset(hdr[2]);
                    g_hash_table_add(referenced, off);
                }
            }
        }
    }
    free(buf);
    return 0;
}

long nessie_sweep_leaks(struct nessie_ctx *ctx)
{
    struct nessie_node *nd = ctx->node;
    uint64_t now = nessie_real_ns();
    pthread_mutex_lock(&nd->sweep_lock);
    if (nd->sweep_prev_ns && now - nd->sweep_prev_ns < nd->grace_ns) {
        pthread_mutex_unlock(&nd->sweep_lock);
        return 0; /* too soon to confirm anything */
    }
    GHashTable *referenced = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
    GArray *cand = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    long marked = 0;
    if (sweep_references(ctx, referenced) != 0) {
        marked = -1;
        goto out;
    }
    struct sweep_scan sc = {.nd = nd, .referenced = referenced, .candidates = cand, .now_ns = now};
    slab_for_each_slot(&nd->slab, sweep_slot, &sc);
    /* Confirm: leaked now, and already at the previous sweep, a grace period ago. */
    GArray *keep = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    for (guint i = 0; i < cand->len; i++) {
        uint64_t off = g_array_index(cand, uint64_t, i);
        if (nd->sweep_prev &&
            bsearch(&off, nd->sweep_prev, nd->nsweep_prev, sizeof(uint64_t), cmp_u64)) {
            uint64_t word = DTE_RECYCLED |
                            ((now / 1000000ULL + nd->cfg.expiration_ms + 1) & DTE_RECYCLE_MS_MASK);
            fab_local_write(nd->fab, FAB_REGION_DATA, off + DTE_OFF_RECYCLE, &word, 8);
            marked++;
        } else {
            g_array_append_val(keep, off);
        }
    }
    g_free(nd->sweep_prev);
    nd->nsweep_prev = keep->len;
    nd->sweep_prev = (uint64_t *)g_array_free(keep, FALSE); /* NULL when empty */
    if (nd->nsweep_prev)
        qsort(nd->sweep_prev, nd->nsweep_prev, sizeof(uint64_t), cmp_u64);
    nd->sweep_prev_ns = now;
    CTR_ADD(ctx->ctr.swept, (uint64_t)marked);
    if (marked)
        log_info("engine: node %u: recycled %ld leaked data table entries", nd->cfg.self, marked);
out:
    g_array_free(cand, TRUE);
    g_hash_table_destroy(referenced);
    pthread_mutex_unlock(&nd->sweep_lock);
    return marked;
}
