/* fabric.c - backend-independent part of the fabric. See fabric.h for the contract. */
#include "fabric_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "membership/membership.h"

static const struct fab_backend_ops *backend_ops(enum fab_backend backend)
{
    switch (backend) {
    case FAB_BACKEND_SHM:
        return &fab_shm_ops;
    case FAB_BACKEND_VERBS:
        return &fab_verbs_ops;
    default:
        return NULL;
    }
}

const char *fab_strerror(int status)
{
    switch ((enum fab_status)status) {
    case FAB_OK: return "success";
    case FAB_ERR_INVAL: return "invalid argument";
    case FAB_ERR_NODE: return "unknown node";
    case FAB_ERR_REGION: return "unknown region";
    case FAB_ERR_RANGE: return "offset out of region bounds";
    case FAB_ERR_ALIGN: return "CAS target not 8-byte aligned";
    case FAB_ERR_AGAIN: return "endpoint queue full";
    case FAB_ERR_NOMEM: return "out of memory";
    case FAB_ERR_EXISTS: return "existing region does not match the configuration";
    case FAB_ERR_UNREACH: return "peer region unreachable";
    case FAB_ERR_SYS: return "system call failed";
    case FAB_ERR_NOTSUP: return "backend not available here (not built, or no RDMA device)";
    }
    return "unknown fabric status";
}

/* Cluster names become parts of shared-memory object names (and verbs service names): keep them
 * to characters that are safe in every such namespace. */
static bool cluster_name_ok(const char *name)
{
    if (!name)
        return false;
    size_t len = strlen(name);
    if (len == 0 || len > FAB_CLUSTER_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return true;
}

int fab_open(const struct fab_config *cfg, struct fab **out, bool *created)
{
    if (!cfg || !out)
        return FAB_ERR_INVAL;
    if (!cluster_name_ok(cfg->cluster)) {
        log_error("fabric: invalid cluster name (1..%d of [A-Za-z0-9_-])", FAB_CLUSTER_NAME_MAX);
        return FAB_ERR_INVAL;
    }
    if (cfg->nodes == 0 || cfg->nodes > FAB_MAX_NODES || cfg->self >= cfg->nodes) {
        log_error("fabric: node %u of %u nodes is not valid", cfg->self, cfg->nodes);
        return FAB_ERR_NODE;
    }
    for (int r = 0; r < FAB_REGION_COUNT; r++) {
        if (cfg->region_size[r] == 0 || cfg->region_size[r] % 8 != 0) {
            log_error("fabric: region %d size %llu must be a non-zero multiple of 8", r,
                      (unsigned long long)cfg->region_size[r]);
            return FAB_ERR_INVAL;
        }
    }
    const struct fab_backend_ops *ops = backend_ops(cfg->backend);
    if (!ops) {
        log_error("fabric: backend %d is not available in this build", (int)cfg->backend);
        return FAB_ERR_NOTSUP;
    }

    struct fab *fab = calloc(1, sizeof(*fab));
    if (!fab)
        return FAB_ERR_NOMEM;
    fab->ops = ops;
    fab->cfg = *cfg;
    strcpy(fab->cluster, cfg->cluster);
    fab->cfg.cluster = fab->cluster;

    bool made = false;
    int rc = ops->open(fab, &made);
    if (rc != FAB_OK) {
        free(fab);
        return rc;
    }
    if (created)
        *created = made;
    *out = fab;
    return FAB_OK;
}

void fab_close(struct fab *fab)
{
    if (!fab)
        return;
    fab->ops->close(fab);
    free(fab);
}

int fab_unlink(enum fab_backend backend, const char *cluster, uint32_t node)
{
    const struct fab_backend_ops *ops = backend_ops(backend);
    if (!ops)
        return FAB_ERR_NOTSUP;
    if (!cluster_name_ok(cluster))
        return FAB_ERR_INVAL;
    return ops->unlink(cluster, node);
}

void *fab_local_base(const struct fab *fab, enum fab_region region)
{
    return (unsigned)region < FAB_REGION_COUNT ? fab->local[region].base : NULL;
}

uint64_t fab_region_size(const struct fab *fab, enum fab_region region)
{
    return (unsigned)region < FAB_REGION_COUNT ? fab->cfg.region_size[region] : 0;
}

static bool local_range_ok(const struct fab *fab, enum fab_region region, uint64_t offset,
                           uint32_t len)
{
    if ((unsigned)region >= FAB_REGION_COUNT)
        return false;
    uint64_t size = fab->cfg.region_size[region];
    return offset <= size && len <= size - offset;
}

int fab_local_read(const struct fab *fab, enum fab_region region, uint64_t offset, void *dst,
                   uint32_t len)
{
    if (!local_range_ok(fab, region, offset, len))
        return FAB_ERR_RANGE;
    fab_copy_from_shared(dst, (const unsigned char *)fab->local[region].base + offset, len);
    return FAB_OK;
}

int fab_local_write(struct fab *fab, enum fab_region region, uint64_t offset, const void *src,
                    uint32_t len)
{
    if (!local_range_ok(fab, region, offset, len))
        return FAB_ERR_RANGE;
    fab_copy_to_shared((unsigned char *)fab->local[region].base + offset, src, len);
    return FAB_OK;
}

uint32_t fab_self(const struct fab *fab) { return fab->cfg.self; }
uint32_t fab_nodes(const struct fab *fab) { return fab->cfg.nodes; }

uint64_t fab_request_bound_ns(const struct fab *fab)
{
    return fab->ops->request_bound_ms * 1000000ULL;
}

int fab_ep_create(struct fab *fab, uint32_t depth, struct fab_ep **out)
{
    if (!fab || !out)
        return FAB_ERR_INVAL;
    struct fab_ep *ep = calloc(1, sizeof(*ep));
    if (!ep)
        return FAB_ERR_NOMEM;
    ep->fab = fab;
    ep->depth = depth ? depth : FAB_EP_DEPTH_DEFAULT;
    /* Room for fault injection's completions (at most depth outstanding): small, and allocated
     * here so that posting never fails for it. */
    ep->dropped = calloc(ep->depth, sizeof(*ep->dropped));
    ep->lost = calloc(ep->depth, sizeof(*ep->lost));
    if (!ep->dropped || !ep->lost) {
        free(ep->dropped);
        free(ep->lost);
        free(ep);
        return FAB_ERR_NOMEM;
    }
    int rc = fab->ops->ep_init(ep);
    if (rc != FAB_OK) {
        free(ep->dropped);
        free(ep->lost);
        free(ep);
        return rc;
    }
    *out = ep;
    return FAB_OK;
}

void fab_ep_destroy(struct fab_ep *ep)
{
    if (!ep)
        return;
    /* Background requests still in flight complete first: their sources are in ep. */
    struct fab_wc wc;
    while (ep->background)
        fab_poll(ep, &wc, 1);
    ep->fab->ops->ep_fini(ep);
    free(ep->dropped);
    free(ep->lost);
    free(ep);
}

void fab_set_fence(struct fab *fab, const struct mship_state *fence) { fab->fence = fence; }

bool fab_has_bells(const struct fab *fab) { return fab->ops->bell_ring != NULL; }

static bool bell_offset_ok(const struct fab *fab, enum fab_region region, uint64_t offset)
{
    return (unsigned)region < FAB_REGION_COUNT && offset % 8 == 0 &&
           offset + sizeof(struct fab_bell) <= fab->cfg.region_size[region];
}

void fab_bell_wait(struct fab *fab, enum fab_region region, uint64_t offset, uint64_t timeout_ns,
                   bool (*idle)(void *), void *arg)
{
    if (fab->ops->bell_wait && bell_offset_ok(fab, region, offset) && fab->local[region].base) {
        fab->ops->bell_wait(fab,
                            (struct fab_bell *)((unsigned char *)fab->local[region].base + offset),
                            timeout_ns, idle, arg);
        return;
    }
    struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
    nanosleep(&ts, NULL);
}

void fab_bell_ring(struct fab *fab, uint32_t node, enum fab_region region, uint64_t offset)
{
    if (!fab->ops->bell_ring || node >= fab->cfg.nodes || !bell_offset_ok(fab, region, offset) ||
        (fab->fence && mship_unreachable(fab->fence, node)))
        return;
    fab->ops->bell_ring(fab, node, region, offset);
}

void fab_set_fault(struct fab *fab, fab_fault_fn fn, void *user)
{
    /* Other threads may be posting meanwhile (tests install and remove faults under a running
     * SD server): the user pointer first, then the function with release, so a thread that sees
     * the new function (acquire) sees its user too. */
    __atomic_store_n(&fab->fault_user, user, __ATOMIC_RELAXED);
    __atomic_store_n(&fab->fault, fn, __ATOMIC_RELEASE);
}

uint64_t fab_ep_injected(const struct fab_ep *ep) { return ep->injected; }

/* Post a valid batch that fits the queue through the fault function: each request is judged,
 * dropped ones complete in error without running, the others are posted one by one (a lost
 * one is remembered so that its real completion is reported failed). */
static int post_faulty(struct fab_ep *ep, fab_fault_fn fn, const struct fab_wr *wrs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        enum fab_fault f = fn(__atomic_load_n(&ep->fab->fault_user, __ATOMIC_RELAXED), ep, &wrs[i]);
        struct fab_wc wc = {.wr_id = wrs[i].wr_id, .opcode = wrs[i].opcode,
                            .status = FAB_ERR_UNREACH};
        if (f != FAB_FAULT_NONE)
            ep->injected++;
        if (f == FAB_FAULT_DROP) {
            ep->dropped[ep->ndropped++] = wc; /* bounded: outstanding <= depth */
            continue;
        }
        if (f == FAB_FAULT_LOSE)
            ep->lost[ep->nlost++] = wc;
        ep->fab->ops->post(ep, &wrs[i], 1);
    }
    return FAB_OK;
}

/* Report the completions of lost requests as failed (one per remembered request). */
static void mark_lost(struct fab_ep *ep, struct fab_wc *wcs, int got)
{
    for (int i = 0; i < got && ep->nlost; i++)
        for (uint32_t j = 0; j < ep->nlost; j++)
            if (ep->lost[j].wr_id == wcs[i].wr_id && ep->lost[j].opcode == wcs[i].opcode) {
                wcs[i].status = FAB_ERR_UNREACH;
                ep->lost[j] = ep->lost[--ep->nlost];
                break;
            }
}

/* Judge one request against the cluster's geometry. Touches nothing. */
static int validate_wr(const struct fab *fab, const struct fab_wr *wr)
{
    switch (wr->opcode) {
    case FAB_OP_READ:
    case FAB_OP_WRITE:
    case FAB_OP_CAS:
        break;
    default:
        return FAB_ERR_INVAL;
    }
    if (wr->node >= fab->cfg.nodes)
        return FAB_ERR_NODE;
    if (fab->fence && mship_unreachable(fab->fence, wr->node))
        return FAB_ERR_UNREACH; /* out of the view (or about to be): its memory is not touched */
    if ((unsigned)wr->region >= FAB_REGION_COUNT)
        return FAB_ERR_REGION;
    if (!wr->local || wr->length == 0)
        return FAB_ERR_INVAL;
    if (wr->opcode == FAB_OP_CAS) {
        if (wr->length != 8)
            return FAB_ERR_INVAL;
        if (wr->offset % 8 != 0)
            return FAB_ERR_ALIGN;
    }
    uint64_t size = fab->cfg.region_size[wr->region];
    /* Written so that a huge offset cannot wrap around. */
    if (wr->offset > size || wr->length > size - wr->offset)
        return FAB_ERR_RANGE;
    return FAB_OK;
}

/* Malformed requests refused at post so far: file-static, one count for every endpoint of the
 * process, since each is a bug of its caller's (an index word naming no DTE, a bad offset)
 * that the log must show, and a loop of them must not flood it. */
static unsigned long refused_n;

/* Log a malformed request the fabric refused (its first ten, then one in a thousand). */
static void refused_log(const struct fab_wr *wr, int rc)
{
    unsigned long k = __atomic_fetch_add(&refused_n, 1, __ATOMIC_RELAXED);
    if (k < 10 || k % 1000 == 0)
        log_warn("fabric: refused a malformed request (%s: opcode %d, node %u, region %d, "
                 "offset %llu, length %u; %lu so far): a bug of its caller's",
                 fab_strerror(rc), wr->opcode, wr->node, wr->region,
                 (unsigned long long)wr->offset, wr->length, k + 1);
}

int fab_post(struct fab_ep *ep, const struct fab_wr *wrs, size_t n)
{
    if (!ep || (!wrs && n))
        return FAB_ERR_INVAL;
    if (n == 0)
        return FAB_OK;
    for (size_t i = 0; i < n; i++) {
        int rc = validate_wr(ep->fab, &wrs[i]);
        if (rc != FAB_OK) {
            ep->stats.errors++;
            if (rc != FAB_ERR_UNREACH) /* the fence's: a peer out of the view, no bug */
                refused_log(&wrs[i], rc);
            return rc;
        }
    }
    if (n > ep->depth - ep->outstanding)
        return FAB_ERR_AGAIN;
    ep->outstanding += (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        switch (wrs[i].opcode) {
        case FAB_OP_READ:
            ep->stats.reads++;
            ep->stats.bytes_read += wrs[i].length;
            break;
        case FAB_OP_WRITE:
            ep->stats.writes++;
            ep->stats.bytes_written += wrs[i].length;
            break;
        case FAB_OP_CAS:
            ep->stats.cas++;
            break;
        }
    }
    fab_fault_fn fault = __atomic_load_n(&ep->fab->fault, __ATOMIC_ACQUIRE);
    if (__builtin_expect(fault != NULL, 0))
        return post_faulty(ep, fault, wrs, n);
    ep->fab->ops->post(ep, wrs, n);
    return FAB_OK;
}

int fab_poll(struct fab_ep *ep, struct fab_wc *wcs, int max)
{
    if (!ep || !wcs || max <= 0)
        return 0;
    int got = 0;
    while (ep->ndropped && got < max)
        wcs[got++] = ep->dropped[--ep->ndropped];
    if (got < max) {
        int k = ep->fab->ops->poll(ep, wcs + got, max - got);
        if (ep->nlost)
            mark_lost(ep, wcs + got, k);
        got += k;
    }
    for (int i = 0; i < got; i++)
        if (wcs[i].status != FAB_OK)
            ep->stats.errors++;
    ep->outstanding -= (uint32_t)got;
    if (ep->background) {
        /* Background completions free their slot and go no further. */
        int kept = 0;
        for (int i = 0; i < got; i++) {
            if ((wcs[i].wr_id & ~(uint64_t)0xFF) == FAB_WR_ID_BG) {
                ep->bg_used &= ~(1u << (wcs[i].wr_id & 0xFF));
                ep->background--;
                continue;
            }
            wcs[kept++] = wcs[i];
        }
        got = kept;
    }
    return got;
}

uint32_t fab_ep_outstanding(const struct fab_ep *ep) { return ep->outstanding - ep->background; }

int fab_post_background(struct fab_ep *ep, const struct fab_wr *wr)
{
    if (!ep || !wr || wr->opcode != FAB_OP_WRITE || !wr->local || wr->length == 0 ||
        wr->length > sizeof(ep->bg_buf[0]))
        return FAB_ERR_INVAL;
    if (ep->bg_used == (1u << FAB_BG_SLOTS) - 1) {
        /* All slots in flight: reap what has completed. Only background completions can be
         * pending when the caller has nothing outstanding; otherwise leave them for its polls. */
        struct fab_wc wc;
        if (ep->outstanding == ep->background)
            fab_poll(ep, &wc, 1);
        if (ep->bg_used == (1u << FAB_BG_SLOTS) - 1)
            return FAB_ERR_AGAIN;
    }
    uint32_t slot = (uint32_t)__builtin_ctz(~ep->bg_used);
    struct fab_wr w = *wr;
    memcpy(&ep->bg_buf[slot], wr->local, wr->length);
    w.local = &ep->bg_buf[slot];
    w.wr_id = FAB_WR_ID_BG | slot;
    int rc = fab_post(ep, &w, 1);
    if (rc == FAB_OK) {
        ep->bg_used |= 1u << slot;
        ep->background++;
    }
    return rc;
}

const struct fab_ep_stats *fab_ep_stats(const struct fab_ep *ep) { return &ep->stats; }

int fab_exec(struct fab_ep *ep, const struct fab_wr *wr)
{
    if (!ep || ep->outstanding != ep->background)
        return FAB_ERR_INVAL;
    int rc = fab_post(ep, wr, 1);
    if (rc != FAB_OK)
        return rc;
    struct fab_wc wc;
    while (fab_poll(ep, &wc, 1) == 0)
        ;
    return wc.status;
}
