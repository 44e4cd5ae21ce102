/*
 * protocol.c - GET, PUT (and its conditional and read-modify-write forms), DELETE and MIGRATE,
 * as Appendix A of Cassell's thesis specifies them, with the mechanisms of the Nessie paper's
 * section 4.3 (filter bits, local cache, previous versions, multiple reads, timeouts).
 *
 * What the appendix leaves open, and what this file decides:
 *   - Conditional forms (add, replace, cas, append, prepend, incr, decr, touch) are PUTs whose
 *     candidate must be the ITE holding the key (or, for add, an empty one); the condition is
 *     judged on the DTE the candidate's CAS replaces, so it holds at the instant of that CAS.
 *     When the key is absent they end like a GET that misses: after a reverse pass.
 *   - DELETE of an absent key ends the same way (NOT_FOUND) instead of inserting a blank entry.
 *   - An attempt that aborts after its candidate CAS leaves its entry in place (as the appendix
 *     does); the retry of the same call adopts it (A.1.3 step 2.3) instead of writing another, so
 *     a call's value is published under one version only.
 *   - Orphans (an entry whose writer died or gave up between its CAS and its last step) are taken
 *     over once they are older than the grace period, on their owner's clock: the writer's last
 *     step and the takeover are the same CAS on the DTE's state word, so exactly one happens.
 *
 * Faults (issue 14; the appendix assumes none):
 *   - Every CAS names one life of a slot: ITE words and DTE state words carry the slot's
 *     generation (layout.h), so a thread stalled past the expiration period between its last
 *     check and its CAS fails instead of acting on a reused slot; recycle marks are such CASes.
 *   - A CAS whose completion reports an error may have run (RDMA loses completions): the entry
 *     is read again to learn it (ite_cas_resolve), and an entry that may be linked is never
 *     freed without quarantine.
 *   - Honest outcomes: once a write has published its entry, a fabric error makes it abandon
 *     the entry (abandon_mine) before it returns NESSIE_FABRIC_ERROR, so the failure is
 *     definite; only when it cannot even do that does it return NESSIE_TIMEOUT (unknown).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arith.h"
#include "engine_int.h"
#include "hash.h"
#include "log.h"
#include "protocol_int.h"

enum wmode {
    W_SET, W_ADD, W_REPLACE, W_CAS, W_APPEND, W_PREPEND, W_INCR, W_DECR, W_TOUCH, W_DELETE,
    W_EVICT, /* a DELETE by the evictor: only if the key's entry is still exactly the victim */
};

/* What a write call asks for and gets back. */
struct wreq {
    enum wmode mode;
    const void *val;
    uint32_t vlen;
    uint32_t flags;
    uint32_t exptime;
    uint64_t cas;
    uint64_t delta;
    uint64_t version_out;
    uint64_t num_out;
    uint64_t victim;  /* W_EVICT: the exact ITE word the key's first entry must hold */
};

/* --- small helpers ------------------------------------------------------------------------- */

/* The test hook (nessie.h): process-wide, because tests drive several contexts from one thread. */
nessie_hook_fn proto_test_hook;
void *proto_test_hook_user;

void nessie_set_test_hook(nessie_hook_fn fn, void *user)
{
    proto_test_hook = fn;
    proto_test_hook_user = user;
}

uint32_t nessie_key_filter(const struct nessie_node *nd, const void *key, size_t len)
{
    if (nd->cfg.filter_bits == 0)
        return 0;
    return (uint32_t)(hash_key(key, len, NESSIE_FILTER_SEED) & ((1u << nd->cfg.filter_bits) - 1));
}

void nessie_key_positions(const struct nessie_node *nd, const void *key, size_t key_len,
                          uint64_t *pos)
{
    uint64_t total = (uint64_t)nd->cfg.nodes * nd->cfg.index_slots;
    for (uint32_t i = 0; i < nd->cfg.ways; i++) {
        /* The N positions must differ (the protocol reads each once per pass); on a collision
         * the next seed is tried, deterministically, so every node agrees. */
        for (uint64_t seed = NESSIE_HASH_SEED + i;; seed += NESSIE_MAX_WAYS) {
            uint64_t p = hash_key(key, key_len, seed) % total;
            bool dup = false;
            for (uint32_t j = 0; j < i; j++)
                dup = dup || pos[j] == p;
            if (!dup || total <= i) {
                pos[i] = p;
                break;
            }
        }
    }
}

uint32_t nessie_key_home(const struct nessie_node *nd, const void *key, size_t key_len)
{
    /* The first position is the first seed's hash: it never collides with an earlier one, so
     * it is nessie_key_positions' pos[0] without the other ways' hashes. */
    uint64_t total = (uint64_t)nd->cfg.nodes * nd->cfg.index_slots;
    return (uint32_t)(hash_key(key, key_len, NESSIE_HASH_SEED) % total / nd->cfg.index_slots);
}

void proto_op_init(struct op *op, struct nessie_ctx *ctx, enum nessie_opkind kind,
                   const void *key, size_t klen)
{
    struct nessie_node *nd = ctx->node;
    memset(op, 0, sizeof(*op));
    op->ctx = ctx;
    op->node = nd;
    op->last_abort = -1;
    op->key = key;
    op->klen = (uint32_t)klen;
    op->n = nd->cfg.ways;
    nessie_key_positions(nd, key, klen, op->pos);
    op->filter = nessie_key_filter(nd, key, klen);
    /* node | incarnation | context | sequence: unique across the cluster and across restarts,
     * so a retry recognizes its own entries and nobody else's. */
    op->id = ((uint64_t)nd->cfg.self << 52) | ((nd->incarnation & 0xFFF) << 40) |
             ((uint64_t)(ctx->id & 0xFF) << 32) | ++ctx->op_seq;
    op->deadline = nessie_mono_ns() + (uint64_t)nd->cfg.op_timeout_ms * 1000000ULL;
    ctx->kind = kind;
    CTR_ADD(OPC(ctx).ops, 1);
    op_traffic_mark(op);
}

/* Exponential back-off with jitter (paper 4.3.2): 1 us doubling to 1 ms. Short waits yield
 * rather than sleep: a futex sleep costs ~60 us on these machines. */
void proto_backoff(struct op *op, unsigned attempt)
{
    struct nessie_ctx *ctx = op->ctx;
    unsigned shift = attempt < 10 ? attempt : 10;
    uint64_t us = 1 + hash_xorshift(&ctx->rng) % (1ULL << shift);
    if (us < 20) {
        sched_yield();
        return;
    }
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(us * 1000)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static bool rec_push(struct op *op, uint64_t ite)
{
    if (op->nrec == NESSIE_MAX_REC) {
        log_warn("protocol: recycle list of one call is full; an entry is left to the leak sweep");
        return false;
    }
    op->rec[op->nrec++] = ite;
    return true;
}

/* --- fabric access, counted ------------------------------------------------------------------ */

/* CAS an ITE: returns NESSIE_OK and sets *ok when the swap happened. On NESSIE_FABRIC_ERROR
 * whether it ran is unknown (a lost completion): see ite_cas_resolve. */
static int ite_cas(struct op *op, uint64_t pos, uint64_t expect, uint64_t swap, bool *ok)
{
    uint64_t old = 0;
    struct fab_wr wr = {.opcode = FAB_OP_CAS, .node = (uint32_t)ite_node_of_pos(op->node, pos),
                        .region = FAB_REGION_INDEX, .offset = ite_off_of_pos(op->node, pos),
                        .local = &old, .length = 8, .compare = expect, .swap = swap};
    CTR_ADD(OPC(op->ctx).cas, 1);
    int rc = fabric_status(fab_exec(op->ctx->ep, &wr));
    *ok = rc == NESSIE_OK && old == expect;
    if (rc == NESSIE_OK && !*ok)
        CTR_ADD(OPC(op->ctx).cas_failed, 1);
    return rc;
}

/*
 * ite_cas, and when its completion reports an error, learn whether it ran by reading the entry
 * again: it is taken to have run if the entry holds swap. A swap that ran and was overwritten
 * since counts as not run: what the caller unlinked is then somebody else's to recycle, or left
 * to the leak sweep, never recycled while linked. Returns NESSIE_OK and *ok (*clean: the CAS
 * itself completed), or NESSIE_FABRIC_ERROR when even the read fails (unknown).
 */
static int ite_cas_resolve(struct op *op, uint64_t pos, uint64_t expect, uint64_t swap, bool *ok,
                           bool *clean)
{
    int rc = ite_cas(op, pos, expect, swap, ok);
    *clean = rc == NESSIE_OK;
    if (rc == NESSIE_OK)
        return rc;
    uint64_t now;
    if (ite_read(op, pos, &now) != NESSIE_OK)
        return NESSIE_FABRIC_ERROR;
    *ok = now == swap;
    return NESSIE_OK;
}

/* CAS a DTE's state word (the writer's last step, a rollback, or a takeover). Sets *old. */
static int dte_state_cas(struct op *op, uint64_t ite, uint64_t expect, uint64_t swap,
                         uint64_t *old)
{
    CTR_ADD(OPC(op->ctx).dte_cas, 1);
    return nessie_state_cas(op->ctx->ep, ite, expect, swap, old);
}

/* Read bytes of a DTE: from this node's memory directly, or with a fabric READ. */
static int dte_read_bytes(struct op *op, uint64_t ite, uint64_t off, void *dst, uint32_t len)
{
    struct nessie_ctx *ctx = op->ctx;
    if (ite_node(ite) == op->node->cfg.self) {
        CTR_ADD(OPC(ctx).local_dte_reads, 1);
        return fabric_status(fab_local_read(op->node->fab, FAB_REGION_DATA, ite_offset(ite) + off,
                                            dst, len));
    }
    struct fab_wr wr = {.opcode = FAB_OP_READ, .node = ite_node(ite), .region = FAB_REGION_DATA,
                        .offset = ite_offset(ite) + off, .local = dst, .length = len};
    CTR_ADD(OPC(ctx).dte_reads, 1);
    CTR_ADD(OPC(ctx).bytes_read, len);
    return fabric_status(fab_exec(ctx->ep, &wr));
}

static bool view_sane(const struct nessie_node *nd, const struct dte_view *v, uint64_t slot)
{
    return v->h.key_len >= 1 && v->h.key_len <= NESSIE_KEY_MAX &&
           dte_size(v->h.key_len, v->h.value_len) <= slot &&
           (v->h.kind == DTE_KIND_VALUE || v->h.kind == DTE_KIND_TOMBSTONE) && nd;
}

static void view_parse(struct dte_view *v, const unsigned char *bytes, bool with_value)
{
    memcpy(&v->h, bytes, sizeof(v->h));
    v->key = bytes + DTE_HDR_SIZE;
    v->value = with_value ? bytes + DTE_HDR_SIZE + v->h.key_len : NULL;
}

/*
 * Fetch the DTE ite refers to into buffer b: from local memory, the cache, or remote memory
 * (A.1.2 step 2.3). klen: length of the key the caller looks for (0: any, read the header first).
 * want_value: the value is needed too. Sets *match when the DTE holds key (klen > 0) or is sane
 * (klen == 0). ite_read_ns: when ite was read (monotonic), from which a cache entry's validity is
 * counted (paper 4.3.1). Returns NESSIE_OK or NESSIE_FABRIC_ERROR / NESSIE_NO_MEMORY.
 */
int proto_dte_fetch(struct op *op, uint64_t ite, int b, const void *key, uint32_t klen,
                    bool want_value, uint64_t ite_read_ns, struct dte_view *v, bool *match)
{
    struct nessie_ctx *ctx = op->ctx;
    struct nessie_node *nd = op->node;
    uint32_t cls = ite_class(ite);
    *match = false;
    if (cls >= nd->nclasses || ite_offset(ite) + nd->class_size[cls] > nd->cfg.data_bytes)
        return NESSIE_OK; /* not an entry this cluster could have written: no match */
    uint32_t slot = nd->class_size[cls];
    bool local = ite_node(ite) == nd->cfg.self;
    uint64_t expiry = ite_read_ns + (uint64_t)nd->cfg.expiration_ms * 1000000ULL;
    v->stale = false;
    v->cached = NULL;

    if (!local && ctx->cache) {
        uint32_t len;
        const unsigned char *p = cache_get(ctx->cache, ite, nessie_mono_ns(), expiry, &len);
        if (p) {
            CTR_ADD(OPC(ctx).cache_hits, 1);
            view_parse(v, p, true);
            v->cached = (unsigned char *)p; /* the context's own memory */
            *match = klen == 0 || (v->h.key_len == klen && memcmp(v->key, key, klen) == 0);
            return NESSIE_OK;
        }
        CTR_ADD(OPC(ctx).cache_misses, 1);
    }

    /* Multiple reads (paper 4.3.2): a large entry is read as header+key first, and its value only
     * if the key matches and the entry is valid. A small one is read whole in one READ. */
    bool whole = want_value && klen > 0 && (nd->cfg.no_multi_read || slot <= nd->cfg.multi_read_bytes);
    uint32_t first = whole ? slot : DTE_HDR_SIZE + (klen ? klen : NESSIE_KEY_MAX);
    if (first > slot)
        first = slot;
    unsigned char *buf = nessie_ctx_buf(ctx, b, slot);
    if (!buf)
        return NESSIE_NO_MEMORY;
    int rc = dte_read_bytes(op, ite, 0, buf, first);
    if (rc != NESSIE_OK)
        return rc;
    view_parse(v, buf, false);
    /* Another life of the slot (or a free one): the ITE was read before the entry it named was
     * unlinked, recycled and its quarantine ended, so the caller's attempt has expired. */
    if (!(v->h.state & DTE_BUSY) || dte_gen(v->h.state) != ite_gen(ite)) {
        v->stale = true;
        return NESSIE_OK;
    }
    if (!view_sane(nd, v, slot))
        return NESSIE_OK;
    if (klen && (v->h.key_len != klen || memcmp(v->key, key, klen) != 0))
        return NESSIE_OK;
    *match = true;
    if (!want_value)
        return NESSIE_OK;
    uint32_t have = first - DTE_HDR_SIZE - v->h.key_len;
    if (first < DTE_HDR_SIZE + v->h.key_len)
        have = 0;
    /* The value straight where the caller wants it, one copy fewer (paper 4.3.2's second READ
     * of multiple reads, aimed at the caller's buffer), unless the entry is to be cached: the
     * cache must be filled from memory nobody else writes (the caller's buffer is a channel's
     * arena, which its client can scribble on meanwhile), so a cached entry is read here. */
    const bool cacheable = !local && ctx->cache && dte_readable(&v->h);
    if (op->dst && !cacheable && have == 0 && v->h.kind == DTE_KIND_VALUE &&
        v->h.value_len > 0 && v->h.value_len <= op->dst_cap) {
        rc = dte_read_bytes(op, ite, DTE_HDR_SIZE + v->h.key_len, op->dst, v->h.value_len);
        if (rc != NESSIE_OK)
            return rc;
        v->value = op->dst;
        return NESSIE_OK;
    }
    if (v->h.value_len > have && (v->h.kind == DTE_KIND_VALUE)) {
        uint32_t at = DTE_HDR_SIZE + v->h.key_len + have;
        rc = dte_read_bytes(op, ite, at, buf + at, v->h.value_len - have);
        if (rc != NESSIE_OK)
            return rc;
    }
    v->value = buf + DTE_HDR_SIZE + v->h.key_len;
    /* Only committed values are immutable, so only they may be cached (keyed by their ITE). */
    if (!local && ctx->cache && dte_readable(&v->h))
        cache_put(ctx->cache, ite, buf, (uint32_t)dte_size(v->h.key_len, v->h.value_len), expiry);
    return NESSIE_OK;
}

/*
 * The monotonic clock of the node that owns ite's entry (this node's own, read directly), as a
 * lower bound: the value it last published, plus the time we have seen that same value stand
 * (the owner's clock has advanced at least that much since, as clocks' rates agree; an owner
 * that died, or whose recycler stalled, still lets its entries age). Only durations of our own
 * clock are added to a value of its: values of two clocks are never compared. Returns false if
 * the clock cannot be read.
 */
static bool owner_clock(struct op *op, uint64_t ite, uint64_t *now)
{
    uint32_t node = ite_node(ite);
    if (node == op->node->cfg.self) {
        *now = nessie_mono_ns();
        return true;
    }
    uint64_t published;
    struct fab_wr wr = {.opcode = FAB_OP_READ, .node = node, .region = FAB_REGION_DATA,
                        .offset = DATA_HDR_OFF_CLOCK, .local = &published, .length = 8};
    CTR_ADD(OPC(op->ctx).dte_reads, 1);
    if (node >= op->node->cfg.nodes || fab_exec(op->ctx->ep, &wr) != FAB_OK)
        return false;
    struct nessie_clock_seen *seen = &op->ctx->clock_seen[node];
    uint64_t mine = nessie_mono_ns();
    if (seen->published != published || seen->first_seen == 0) {
        seen->published = published;
        seen->first_seen = mine;
    }
    *now = published + (mine - seen->first_seen);
    return true;
}

/* An uncommitted entry older than the grace period: its writer is gone or gave up. Its age is
 * judged on its owner's clock alone (created_ns is on it too), never against ours: the hosts'
 * clocks may differ by any amount. A published clock lags the owner's real one, which only makes
 * entries look younger. */
bool proto_is_orphan(struct op *op, uint64_t ite, const struct dte_hdr *h)
{
    uint64_t now;
    if (h->state & DTE_COMMITTED)
        return false;
    return owner_clock(op, ite, &now) && h->created_ns + op->node->grace_ns < now;
}

/*
 * Take over an orphan at position pos (ITE value ite, DTE view v): an entry whose writer has not
 * finished within the grace period, longer than any live operation may run. A VALUE is rolled
 * forward (committed, as its writer would have); a TOMBSTONE is committed and unlinked; an
 * ABANDONED entry (its writer died while taking it back out) is rolled back to its previous
 * version, as the writer was doing. The commit is a CAS on the state word
 * that the writer's own last step also CASes, so the two never both happen.
 */
/*
 * An orphaned migration's copy (v, uncommitted): is it the item now, or should it be undone?
 * It is the item only if its migration emptied the source: the source is out of the index and
 * still in its life, unrecycled. If the source is still linked, the item is there (the copy is a
 * move that never happened); if it was recycled, something else took it out (a DELETE or a write
 * that ran before the copy was linked), and committing the copy would bring a removed item back.
 * Sets *undo. Returns NESSIE_OK or NESSIE_FABRIC_ERROR.
 */
static int copy_undo(struct op *op, const struct dte_view *v, bool *undo)
{
    uint64_t src = v->h.prev_ite, st;
    *undo = true;
    if (ite_empty(src))
        return NESSIE_OK;
    int rc = dte_read_bytes(op, src, DTE_OFF_STATE, &st, sizeof(st));
    if (rc != NESSIE_OK)
        return rc;
    if (dte_gen(st) != ite_gen(src) || !(st & DTE_BUSY) || (st & DTE_RECYCLED))
        return NESSIE_OK;
    uint64_t pos[NESSIE_MAX_WAYS];
    nessie_key_positions(op->node, v->key, v->h.key_len, pos);
    for (uint32_t i = 0; i < op->n; i++) {
        uint64_t w;
        if ((rc = ite_read(op, pos[i], &w)) != NESSIE_OK)
            return rc;
        if (w == src)
            return NESSIE_OK;
    }
    *undo = false;
    return NESSIE_OK;
}

int proto_takeover(struct op *op, uint64_t pos, uint64_t ite, const struct dte_view *v)
{
    struct nessie_ctx *ctx = op->ctx;
    uint64_t old = 0;
    bool ok = false;
    int rc;
    if ((v->h.flags8 & DTE_F_COPY) && !(v->h.state & DTE_ABANDONED)) {
        bool undo;
        if ((rc = copy_undo(op, v, &undo)) != NESSIE_OK)
            return rc;
        if (undo) {
            /* Abandoned first (naming its life), so its migration can never commit it; then
             * its ITE is emptied, as the takeover of any abandoned copy does. */
            rc = dte_state_cas(op, ite, v->h.state, v->h.state | DTE_ABANDONED, &old);
            if (rc != NESSIE_OK || old != v->h.state)
                return rc;
            rc = ite_cas(op, pos, ite, 0, &ok);
            if (rc == NESSIE_OK && ok) {
                nessie_recycle(ctx, ite);
                CTR_ADD(ctx->ctr.takeovers, 1);
            }
            return rc;
        }
    }
    if (v->h.state & DTE_ABANDONED) {
        /* Its writer set its previous version to one it unlinked itself before abandoning it
         * (abandon_mine), so linking that again undoes exactly what the writer did. The CAS names
         * the abandoned entry's life. */
        rc = ite_cas(op, pos, ite, (v->h.flags8 & DTE_F_COPY) ? 0 : v->h.prev_ite, &ok);
        if (rc == NESSIE_OK && ok) {
            nessie_recycle(ctx, ite);
            CTR_ADD(ctx->ctr.takeovers, 1);
        }
        return rc;
    }
    rc = dte_state_cas(op, ite, v->h.state, v->h.state | DTE_COMMITTED, &old);
    if (rc != NESSIE_OK || old != v->h.state)
        return rc;
    CTR_ADD(ctx->ctr.takeovers, 1);
    log_debug("protocol: took over orphan entry %016llx (kind %u)", (unsigned long long)ite,
              v->h.kind);
    if (v->h.kind == DTE_KIND_TOMBSTONE) {
        rc = ite_cas(op, pos, ite, 0, &ok);
        if (rc == NESSIE_OK && ok)
            nessie_recycle(ctx, ite);
    }
    return rc;
}

/* Reverse pass (A.1.2 step 3, A.1.3 step 5): re-read I_{n-1}..I_1 and compare with what was
 * seen. Any order works (the thesis says so), so the reads go out in one batch. Returns NESSIE_OK
 * and *changed. */
static int reverse_pass(struct op *op, bool *changed)
{
    struct fab_wr wr[NESSIE_MAX_WAYS];
    uint64_t now[NESSIE_MAX_WAYS];
    uint32_t cnt = op->n - 1;
    *changed = false;
    for (uint32_t k = 0; k < cnt; k++) {
        uint32_t i = cnt - 1 - k; /* I_{n-1} first, as the thesis writes it */
        wr[k] = (struct fab_wr){.wr_id = i, .opcode = FAB_OP_READ,
                                .node = (uint32_t)ite_node_of_pos(op->node, op->pos[i]),
                                .region = FAB_REGION_INDEX,
                                .offset = ite_off_of_pos(op->node, op->pos[i]), .local = &now[i],
                                .length = 8};
    }
    if (cnt == 0)
        return NESSIE_OK;
    CTR_ADD(OPC(op->ctx).ite_reads, cnt);
    CTR_ADD(OPC(op->ctx).bytes_read, 8 * cnt);
    int rc = fab_post(op->ctx->ep, wr, cnt);
    if (rc != FAB_OK)
        return NESSIE_FABRIC_ERROR;
    uint32_t got = 0;
    int status = NESSIE_OK;
    while (got < cnt) {
        struct fab_wc wc[NESSIE_MAX_WAYS];
        int k = fab_poll(op->ctx->ep, wc, NESSIE_MAX_WAYS);
        for (int j = 0; j < k; j++)
            if (wc[j].status != FAB_OK)
                status = NESSIE_FABRIC_ERROR;
        got += (uint32_t)k;
    }
    if (status != NESSIE_OK)
        return status;
    for (uint32_t i = 0; i < cnt; i++)
        *changed = *changed || now[i] != op->seen[i];
    return NESSIE_OK;
}

/* Hand every DTE in I_rec to recycling (A.1.3 step 7). */
static void recycle_all(struct op *op)
{
    for (uint32_t i = 0; i < op->nrec; i++)
        nessie_recycle(op->ctx, op->rec[i]);
    op->nrec = 0;
}

/*
 * A.1.2 step 3: the forward pass met the key in none of I_1..I_n. Unless the reverse pass sees a
 * change (a migration may have moved the key behind the pass), the key is absent and the call
 * ends with `absent`.
 */
enum attempt proto_end_absent(struct op *op, int absent, int *status)
{
    bool changed;
    if ((*status = reverse_pass(op, &changed)) != NESSIE_OK)
        return A_DONE;
    if (changed) {
        count_abort(op, NESSIE_ABORT_REVERSE_PASS);
        return A_RETRY;
    }
    EXPIRED_RETRY(op);
    *status = absent;
    return A_DONE;
}

/* With eviction on, a write refused for lack of memory means the evictor could not make room
 * in time: worth an operator's attention, with what the class looked like and why the last
 * attempt retried; once a second at most (a stuck evictor refuses every write). */
static void refused_log(struct op *op)
{
    static const char *const why[NESSIE_ABORT_COUNT] = {
        "an entry in flight", "a lost CAS", "an index entry that changed", "a stall",
        "a failed migration", "no room"};
    static _Atomic uint64_t last_ns;
    if (!nessie_every(&last_ns, 1000000000ULL))
        return;
    uint64_t now = nessie_mono_ns();
    struct nessie_node *nd = op->node;
    uint64_t nfree = 0, pending = 0, items = 0, slots = 0, allocs = 0, failed = 0;
    int cls = op->want_cls;
    if (cls >= 0)
        slab_class_state(&nd->slab, (uint32_t)cls, &nfree, &pending, &items, &slots, &allocs,
                         &failed);
    log_warn("protocol: a write refused after waiting %llu ms for room although eviction is on; "
             "its last attempt ended on %s (size class %d: %llu slots, %llu free, %llu on their "
             "way back, %llu items)",
             (unsigned long long)((now - op->memory_wait_ns) / 1000000ULL),
             op->last_abort >= 0 ? why[op->last_abort] : "nothing", cls,
             (unsigned long long)slots, (unsigned long long)nfree, (unsigned long long)pending,
             (unsigned long long)items);
}

int proto_finish(struct op *op, int status)
{
    /* A call that ran out of time waiting for memory failed for lack of memory, unless an
     * attempt of it published an entry that a takeover may still commit. */
    if (status == NESSIE_TIMEOUT && op->memory_wait && !op->mine) {
        status = NESSIE_NO_MEMORY;
        if (!op->node->cfg.no_evict)
            refused_log(op);
    }
    CTR_ADD(OPC(op->ctx).outcomes[status], 1);
    const struct fab_ep_stats *st = fab_ep_stats(op->ctx->ep);
    nessie_count_traffic(op->ctx, st->reads + st->writes + st->cas - op->fab_ops0,
                         st->bytes_read + st->bytes_written - op->fab_bytes0);
    return status;
}

void nessie_count_traffic(struct nessie_ctx *ctx, uint64_t ops, uint64_t bytes)
{
    int ob = ops < NESSIE_HIST_OPS ? (int)ops : NESSIE_HIST_OPS - 1;
    int bb = bytes ? 64 - __builtin_clzll(bytes) : 0;
    if (bb >= NESSIE_HIST_BYTES)
        bb = NESSIE_HIST_BYTES - 1;
    if (ctx->serving) {
        CTR_ADD(ctx->ctr.sd_served_ops_hist[ctx->kind][ob], 1);
        CTR_ADD(ctx->ctr.sd_served_bytes_hist[ctx->kind][bb], 1);
    } else {
        CTR_ADD(OPC(ctx).ops_hist[ob], 1);
        CTR_ADD(OPC(ctx).bytes_hist[bb], 1);
    }
}

/* --- MIGRATE (A.1.4) ------------------------------------------------------------------------- */

static bool pos_in(uint64_t p, const uint64_t *set, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (set[i] == p)
            return true;
    return false;
}

/* Whether a new DTE of these sizes, which found no free entry, will find one once recycled entries
 * of its size class expire. */
static bool memory_pending(struct op *op, uint32_t key_len, uint32_t value_len)
{
    struct nessie_node *nd = op->node;
    int cls = slab_class_for(&nd->slab, dte_size(key_len, value_len));
    return cls >= 0 && slab_pending(&nd->slab, (uint32_t)cls);
}

/* A write that finds its node full evicts this many of its class's items on its own (the
 * background evictor normally keeps ahead), and may wait for their slots up to three expiration
 * periods plus this margin beyond its budget: one period for the slots' quarantine, the rest for
 * a page of another class to drain when its size class has no page (slab_drain). */
#define EVICT_INLINE 8
#define EVICT_WAIT_MARGIN_MS 500

/* A write found no room for a new entry of key_len + value_len bytes (its own, or a MIGRATE's
 * copy that makes room for it in the index). With eviction on: wake the evictor, and unless
 * slots are on their way back evict a few of the class's items now (or a page of another
 * class's); freed slots come back one expiration period after they are unlinked, so the call
 * waits, and may wait that long beyond its own budget: a SET is not refused for lack of memory
 * while eviction is on. With eviction off, the call waits only for replaced entries already
 * waiting out their period (writers are paced by recycling). Returns true if the caller should
 * retry (the wait is counted), false if the write fails for lack of memory. */
static bool memory_short(struct op *op, uint32_t key_len, uint32_t value_len)
{
    struct nessie_node *nd = op->node;
    int cls = slab_class_for(&nd->slab, dte_size(key_len, value_len));
    if (!nd->cfg.no_evict) {
        nessie_pressure(nd);
        if (cls >= 0 && !memory_pending(op, key_len, value_len))
            nessie_evict_class(op->ctx, (uint32_t)cls, EVICT_INLINE);
        if (!op->memory_wait)
            op->deadline += (3ULL * nd->cfg.expiration_ms + EVICT_WAIT_MARGIN_MS) * 1000000ULL;
    } else if (!memory_pending(op, key_len, value_len)) {
        return false;
    }
    if (!op->memory_wait) {
        op->memory_wait_ns = nessie_mono_ns();
        op->want_cls = cls;
    }
    op->memory_wait = true;
    count_abort(op, NESSIE_ABORT_MEMORY);
    return true;
}

/* Write a new DTE into this node's data region, created by `creator`. Returns NESSIE_OK and its
 * ITE, or NESSIE_TOO_BIG / NESSIE_NO_MEMORY. The entry is BUSY: invisible until an ITE points at
 * it, invalid until its writer commits it. */
static int dte_write_new(struct op *op, const struct dte_hdr *tmpl, uint64_t creator,
                         const void *key, const void *v1, uint32_t l1, const void *v2,
                         uint32_t l2, uint32_t filter, uint64_t *ite_out)
{
    struct nessie_node *nd = op->node;
    uint64_t size = dte_size(tmpl->key_len, l1 + l2);
    if (size > nd->cfg.max_item_size)
        return NESSIE_TOO_BIG;
    int want = slab_class_for(&nd->slab, size);
    uint64_t off;
    uint32_t cls;
    if (want < 0)
        return NESSIE_TOO_BIG;
    /* A value whose writer has waited a whole period for room goes before a page move. */
    enum slab_use use = tmpl->kind == DTE_KIND_TOMBSTONE ? SLAB_FOR_TOMBSTONE
                        : op->memory_wait && nessie_mono_ns() - op->memory_wait_ns >
                                                 (uint64_t)nd->cfg.expiration_ms * 1000000ULL
                            ? SLAB_FOR_LATE_VALUE
                            : SLAB_FOR_VALUE;
    if (slab_alloc(&nd->slab, (uint32_t)want, use, &off, &cls) != 0)
        return NESSIE_NO_MEMORY;
    /* A new life of the slot: its generation is one more than its last life's. */
    uint64_t last;
    fab_local_read(nd->fab, FAB_REGION_DATA, off + DTE_OFF_STATE, &last, sizeof(last));
    uint32_t gen = (dte_gen(last) + 1) & GEN_MASK;
    struct dte_hdr h = *tmpl;
    h.state = dte_state(gen, DTE_BUSY);
    h.quarantine_ms = 0;
    /* A new item starts at the initial read count, with its write as its last access, and
     * unfetched; a migration's copy keeps its source's hint (tmpl). */
    if (!(tmpl->flags8 & DTE_F_COPY))
        h.access = dte_acc_make(nessie_acc_tick(), NESSIE_ACC_INIT, false);
    h.value_len = l1 + l2;
    h.creator = creator;
    h.created_ns = nessie_mono_ns(); /* on this owner's clock, as is data_hdr.clock_ns */
    /* Body first, header last: the slot may still be read by a slow reader of its previous life
     * only until that life's expiry, which has passed (slab), so the order is for clarity. */
    fab_local_write(nd->fab, FAB_REGION_DATA, off + DTE_HDR_SIZE, key, h.key_len);
    if (l1)
        fab_local_write(nd->fab, FAB_REGION_DATA, off + DTE_HDR_SIZE + h.key_len, v1, l1);
    if (l2)
        fab_local_write(nd->fab, FAB_REGION_DATA, off + DTE_HDR_SIZE + h.key_len + l1, v2, l2);
    fab_local_write(nd->fab, FAB_REGION_DATA, off, &h, sizeof(h));
    *ite_out = ite_make(nd->cfg.self, cls, off, gen, filter);
    return NESSIE_OK;
}

static void dte_free_unpublished(struct op *op, uint64_t ite)
{
    slab_free_unpublished(&op->node->slab, ite_class(ite), ite_offset(ite));
}

/*
 * The writer's last step (A.1.3 step 6, A.1.4 step 8): BUSY -> COMMITTED on our own DTE, naming
 * its life. Sets *committed when the entry is committed: by us, or by a takeover that beat us to
 * it. *committed stays false only for an entry abandoned or recycled uncommitted, which cannot
 * happen (step 4 never clears an entry in progress, and only its writer abandons it). A lost
 * completion is resolved by reading the word (it is in this node's memory). Returns
 * NESSIE_FABRIC_ERROR if the CAS cannot be made, NESSIE_TIMEOUT if the slot is in another life
 * already: this call stalled past the grace period and the outcome is unknown (a takeover
 * committed it, most likely; the leak sweep may have taken an entry never linked).
 */
static int commit_own(struct op *op, uint64_t ite, bool *committed)
{
    uint64_t expect = dte_state(ite_gen(ite), DTE_BUSY);
    *committed = false;
    for (int tries = 0; tries < 8; tries++) {
        uint64_t old = 0;
        if (dte_state_cas(op, ite, expect, expect | DTE_COMMITTED, &old) != NESSIE_OK)
            fab_local_read(op->node->fab, FAB_REGION_DATA, ite_offset(ite) + DTE_OFF_STATE, &old,
                           sizeof(old));
        else if (old == expect) {
            *committed = true;
            return NESSIE_OK;
        }
        if (dte_gen(old) != ite_gen(ite) || !(old & DTE_BUSY))
            return NESSIE_TIMEOUT; /* another life already: unknown (model N5) */
        if (old & DTE_COMMITTED) {
            *committed = true; /* a takeover, or our own CAS whose completion was lost */
            return NESSIE_OK;
        }
        if (old & (DTE_ABANDONED | DTE_RECYCLED))
            return NESSIE_OK; /* cannot happen (see above): *committed stays false */
        expect = old;         /* unchanged: the CAS was dropped; try again */
    }
    return NESSIE_FABRIC_ERROR;
}

/*
 * MIGRATE the entry at global position src out of the way of key_pos (the N positions of the key
 * that needs room). depth counts recursion (A.1.4 step 4.2). Returns A_DONE with *status
 * NESSIE_OK (src is free, or holds the key now), A_RETRY on a concurrent operation, or A_DONE
 * with NESSIE_INDEX_FULL when the depth limit is reached.
 */
static enum attempt migrate(struct op *op, uint64_t src, const uint64_t *key_pos, unsigned depth,
                            int *status)
{
    struct nessie_ctx *ctx = op->ctx;
    struct nessie_node *nd = op->node;
    enum nessie_opkind saved = ctx->kind;
    enum attempt result = A_RETRY;
    if (depth > nd->cfg.migrate_depth) {
        *status = NESSIE_INDEX_FULL;
        return A_DONE;
    }
    ctx->kind = NESSIE_OPK_MIGRATE;
    CTR_ADD(OPC(ctx).ops, 1);

    /* Step 2: read the source. */
    HOOK(op, NESSIE_HOOK_MIGRATE_START, depth);
    uint64_t sv;
    uint64_t t = nessie_mono_ns();
    if ((*status = ite_read(op, src, &sv)) != NESSIE_OK) {
        result = A_DONE;
        goto out;
    }
    if (ite_empty(sv)) { /* Step 2.1: freed meanwhile */
        *status = NESSIE_OK;
        result = A_DONE;
        goto out;
    }
    struct dte_view v;
    bool match;
    if ((*status = proto_dte_fetch(op, sv, 1, NULL, 0, false, t, &v, &match)) != NESSIE_OK) {
        result = A_DONE;
        goto out;
    }
    if (!match) {
        count_abort(op, v.stale ? NESSIE_ABORT_TIMEOUT : NESSIE_ABORT_INVALID_DTE);
        goto out;
    }
    /* Step 2.3: the key that needs room got here meanwhile. */
    if (depth == 0 && v.h.key_len == op->klen && memcmp(v.key, op->key, op->klen) == 0) {
        *status = NESSIE_OK;
        result = A_DONE;
        goto out;
    }
    /* Step 2.4: never move an entry an operation is writing. */
    if (!dte_readable(&v.h)) {
        if (proto_is_orphan(op, sv, &v.h)) {
            *status = proto_takeover(op, src, sv, &v);
            result = *status == NESSIE_OK ? A_RETRY_NOW : A_DONE;
        } else {
            count_abort(op, NESSIE_ABORT_INVALID_DTE);
        }
        goto out;
    }
    /* Steps 3, 4: the source key's positions. The destination is one that is neither the source
     * nor one of the positions of the key that needs room; the thesis takes the first such, we
     * take the first empty one if there is one (the thesis allows any choice), which keeps
     * recursion, and so failure at the depth limit, rare. */
    uint64_t spos[NESSIE_MAX_WAYS];
    unsigned char skey[NESSIE_KEY_MAX];
    uint32_t sklen = v.h.key_len;
    memcpy(skey, v.key, sklen);
    nessie_key_positions(nd, skey, sklen, spos);
    uint64_t dst = UINT64_MAX, dv = 0;
    for (uint32_t i = 0; i < op->n; i++) {
        if (spos[i] == src || pos_in(spos[i], key_pos, op->n))
            continue;
        uint64_t w;
        if ((*status = ite_read(op, spos[i], &w)) != NESSIE_OK) {
            result = A_DONE;
            goto out;
        }
        if (dst == UINT64_MAX || (dv != 0 && w == 0)) {
            dst = spos[i];
            dv = w;
        }
        if (dv == 0)
            break;
    }
    if (dst == UINT64_MAX) {
        *status = NESSIE_INDEX_FULL;
        result = A_DONE;
        goto out;
    }
    if (!ite_empty(dv)) {
        /* Step 4.2: free the destination first, recursively. */
        enum nessie_opkind k = ctx->kind;
        enum attempt r = migrate(op, dst, spos, depth + 1, status);
        ctx->kind = k;
        if (r != A_DONE || *status != NESSIE_OK) {
            if (r == A_RETRY)
                count_abort(op, NESSIE_ABORT_MIGRATE);
            result = r;
            goto out;
        }
    }
    /* Step 5: a copy of the source, invalid. Its previous version is the source itself, so a GET
     * that meets the copy before the migration finishes reads the (same) value there. */
    struct dte_view full;
    if ((*status = proto_dte_fetch(op, sv, 1, skey, sklen, true, t, &full, &match)) != NESSIE_OK) {
        result = A_DONE;
        goto out;
    }
    if (!match || full.stale || !dte_readable(&full.h)) {
        count_abort(op, full.stale ? NESSIE_ABORT_TIMEOUT : NESSIE_ABORT_INVALID_DTE);
        goto out;
    }
    struct dte_hdr tmpl = full.h;
    tmpl.prev_ite = sv;
    tmpl.flags8 = DTE_F_COPY;
    uint64_t copy;
    /* The copy keeps its source's creator: it is that write's item, moved, and must never be
     * mistaken for an entry of the call that happens to migrate it. */
    *status = dte_write_new(op, &tmpl, full.h.creator, skey, full.value, full.h.value_len, NULL,
                            0, nessie_key_filter(nd, skey, sklen), &copy);
    /* No room for the copy: the write that needs the move waits for room as for its own entry
     * (it failed at once with NO_MEMORY, a SET refused on a cache with eviction on). An
     * eviction does not wait (it moves nothing: it never inserts). */
    if (*status == NESSIE_NO_MEMORY && saved != NESSIE_OPK_EVICT &&
        memory_short(op, sklen, full.h.value_len))
        goto out; /* result is A_RETRY */
    if (*status != NESSIE_OK) {
        result = A_DONE;
        goto out;
    }
    /* Step 6: point the (empty) destination at the copy. */
    HOOK(op, NESSIE_HOOK_MIGRATE_BEFORE_DST, 0);
    bool ok = false, clean;
    if (attempt_expired(op)) {
        dte_free_unpublished(op, copy);
        count_abort(op, NESSIE_ABORT_TIMEOUT);
        goto out;
    }
    *status = ite_cas_resolve(op, dst, 0, copy, &ok, &clean);
    if (*status != NESSIE_OK || !ok) {
        if (clean) {
            dte_free_unpublished(op, copy); /* never visible: free at once */
        } else {
            /* Perhaps linked (the outcome was lost and the entry could not be read again), or
             * linked and cleared since: abandon it, so that a takeover empties its ITE instead
             * of committing it, and let it through quarantine; if it is linked, whoever takes
             * it over recycles it once more, which a mark naming its life makes harmless. */
            uint64_t old;
            dte_state_cas(op, copy, dte_state(ite_gen(copy), DTE_BUSY),
                          dte_state(ite_gen(copy), DTE_BUSY | DTE_ABANDONED), &old);
            if (*status == NESSIE_OK)
                nessie_recycle(ctx, copy);
        }
        if (*status != NESSIE_OK) {
            result = A_DONE;
        } else {
            count_abort(op, NESSIE_ABORT_CAS_FAILED);
        }
        goto out;
    }
    HOOK(op, NESSIE_HOOK_MIGRATE_AFTER_DST, 0);
    /* Step 7: empty the source. If it changed, undo the destination (paper 4.3.1, "aborting
     * migration"): the copy was visible, so it is recycled, not freed. */
    *status = ite_cas_resolve(op, src, sv, 0, &ok, &clean);
    if (*status != NESSIE_OK) {
        /* Whether the source is empty is unknown: the copy stays as it is, uncommitted. A
         * takeover commits it after the grace period, which completes the move if the source
         * was emptied and otherwise leaves a second committed entry of the same item, which
         * the key's next write clears (A.1.3 step 4). The source stays: readers of the copy
         * read it as its previous version meanwhile. */
        result = A_DONE;
        goto out;
    }
    /* The CAS's answer was lost and the source reads empty. That says nothing of who emptied
     * it: this CAS, or a DELETE (or any write) of the key that replaced the source and unlinked
     * its own entry meanwhile, and committing the copy then brought a removed item back
     * (test_migration_source_cas_lost_after_delete). Left uncommitted for a takeover, the copy
     * would block the key for a grace period. Undone instead, as when the CAS fails: the key
     * is absent after, which is right if a DELETE emptied the source and is an eviction if
     * this CAS did (a cache may lose an item to a fault, as to memory; a removed one must never
     * come back). Reported as an eviction whose effect is unknown. */
    bool lost = *status == NESSIE_OK && ok && !clean;
    if (lost) {
        if (nessie_evict_hook)
            nessie_evict_hook(nessie_evict_hook_user, skey, sklen, false, 0);
        ok = false;
    }
    if (!ok) {
        bool cleared;
        uint64_t old;
        /* Abandon the copy first so no takeover can commit it once it is unlinked. */
        dte_state_cas(op, copy, dte_state(ite_gen(copy), DTE_BUSY),
                      dte_state(ite_gen(copy), DTE_BUSY | DTE_ABANDONED), &old);
        if (ite_cas_resolve(op, dst, copy, 0, &cleared, &clean) == NESSIE_OK && cleared)
            nessie_recycle(ctx, copy);
        if (lost) {
            /* Unlinked by this CAS or by the write that emptied the source, which recycles it
             * too: a second mark of the same life is harmless. */
            nessie_recycle(ctx, sv);
            CTR_ADD(ctx->ctr.moves_undone, 1);
            if (nessie_evict_hook)
                nessie_evict_hook(nessie_evict_hook_user, skey, sklen, true, NESSIE_TIMEOUT);
        }
        count_abort(op, NESSIE_ABORT_CAS_FAILED);
        goto out;
    }
    /* Step 8: the copy is valid. Step 9: the source's DTE is recycled. */
    bool committed;
    if ((*status = commit_own(op, copy, &committed)) != NESSIE_OK) {
        /* The source is out of the index, so the copy must be committed; a takeover does it
         * after the grace period. The source is its previous version until then (the leak
         * sweep recycles it after). */
        result = A_DONE;
        goto out;
    }
    nessie_recycle(ctx, sv);
    /* Counted here, when an entry has moved: attempts that abort show in the MIGRATE counters. */
    CTR_ADD(ctx->ctr.migrations, 1);
    if (depth > 0)
        CTR_ADD(ctx->ctr.recursive_migrations, 1);
    *status = NESSIE_OK;
    result = A_DONE;
out:
    ctx->kind = saved;
    return result;
}

/* --- PUT and its forms (A.1.3), DELETE (A.1.5) ---------------------------------------------- */

/* Modes whose candidate must hold the key: they need the current item. */
static bool needs_present(enum wmode m) { return m != W_SET && m != W_ADD; }
/* Modes that build the new value from the old one. */
static bool needs_old_value(enum wmode m)
{
    return m == W_APPEND || m == W_PREPEND || m == W_INCR || m == W_DECR || m == W_TOUCH;
}

static int absent_status(enum wmode m)
{
    switch (m) {
    case W_REPLACE:
    case W_APPEND:
    case W_PREPEND:
        return NESSIE_NOT_STORED;
    default:
        return NESSIE_NOT_FOUND;
    }
}

/*
 * Judge the condition on the item the candidate holds (live: present and neither expired nor
 * flushed) and build the new DTE's contents. Returns NESSIE_OK to go on, or the final status.
 */
static int build_new(struct op *op, struct wreq *w, const struct dte_view *old, bool live,
                     struct dte_hdr *h, const void **v1, uint32_t *l1, const void **v2,
                     uint32_t *l2)
{
    struct nessie_node *nd = op->node;
    memset(h, 0, sizeof(*h));
    h->key_len = (uint8_t)op->klen;
    h->kind = DTE_KIND_VALUE;
    h->flags = w->flags;
    h->exptime = w->exptime;
    *v1 = w->val;
    *l1 = w->vlen;
    *v2 = NULL;
    *l2 = 0;
    switch (w->mode) {
    case W_SET:
        break;
    case W_ADD:
        if (live)
            return NESSIE_NOT_STORED;
        break;
    case W_REPLACE:
        if (!live)
            return NESSIE_NOT_STORED;
        break;
    case W_CAS:
        if (!live)
            return NESSIE_NOT_FOUND;
        if (old->h.version != w->cas)
            return NESSIE_EXISTS;
        break;
    case W_APPEND:
    case W_PREPEND:
        if (!live)
            return NESSIE_NOT_STORED;
        h->flags = old->h.flags;
        h->exptime = old->h.exptime;
        if (w->mode == W_APPEND) {
            *v1 = old->value;
            *l1 = old->h.value_len;
            *v2 = w->val;
            *l2 = w->vlen;
        } else {
            *v2 = old->value;
            *l2 = old->h.value_len;
        }
        break;
    case W_INCR:
    case W_DECR: {
        if (!live)
            return NESSIE_NOT_FOUND;
        size_t cap = old->h.value_len > ARITH_MAX_DIGITS ? old->h.value_len : ARITH_MAX_DIGITS;
        char *out = (char *)nessie_ctx_buf(op->ctx, 2, cap);
        size_t outlen;
        if (!out)
            return NESSIE_NO_MEMORY;
        if (!arith_apply(old->value, old->h.value_len, w->mode == W_INCR, w->delta, out, cap,
                         &outlen, &w->num_out))
            return NESSIE_NON_NUMERIC;
        h->flags = old->h.flags;
        h->exptime = old->h.exptime;
        *v1 = out;
        *l1 = (uint32_t)outlen;
        break;
    }
    case W_TOUCH:
        if (!live)
            return NESSIE_NOT_FOUND;
        h->flags = old->h.flags;
        *v1 = old->value;
        *l1 = old->h.value_len;
        h->version = old->h.version; /* memcached's touch keeps the CAS token */
        return NESSIE_OK;
    case W_DELETE:
        if (!live)
            return NESSIE_NOT_FOUND;
        h->kind = DTE_KIND_TOMBSTONE;
        *v1 = NULL;
        *l1 = 0;
        break;
    case W_EVICT:
        /* Dead or alive (expired and flushed items are reclaimed this way too), but only the
         * victim the evictor chose: if the key was written or moved since, it stays. */
        h->kind = DTE_KIND_TOMBSTONE;
        *v1 = NULL;
        *l1 = 0;
        break;
    }
    h->version = nessie_version_next(nd);
    return NESSIE_OK;
}

/* A DTE with this call's creator id: the call's own earlier attempt. */
static bool is_mine(const struct op *op, const struct dte_view *v)
{
    return v->h.creator == op->id;
}

static void rec_remove(struct op *op, uint64_t ite)
{
    for (uint32_t i = 0; i < op->nrec; i++)
        if (op->rec[i] == ite) {
            op->rec[i] = op->rec[--op->nrec];
            return;
        }
}

/* Read our own DTE's header (always local). */
static void mine_hdr(struct op *op, uint64_t ite, struct dte_hdr *h)
{
    fab_local_read(op->node->fab, FAB_REGION_DATA, ite_offset(ite), h, sizeof(*h));
}

static bool rec_has(const struct op *op, uint64_t ite)
{
    for (uint32_t i = 0; i < op->nrec; i++)
        if (op->rec[i] == ite)
            return true;
    return false;
}

/*
 * Point our own entry e's previous version at prev, if e is still in the life we wrote it in,
 * uncommitted and not recycled (only then is the slot ours to write; a call stalled past the
 * grace period may find it committed by a takeover, replaced and reused since). Returns whether
 * it wrote. The window between the check and the write is a few instructions, not a step.
 */
static bool set_prev(struct op *op, uint64_t e, uint64_t prev)
{
    uint64_t st;
    fab_local_read(op->node->fab, FAB_REGION_DATA, ite_offset(e) + DTE_OFF_STATE, &st, sizeof(st));
    if (dte_gen(st) != ite_gen(e) || (st & (DTE_COMMITTED | DTE_RECYCLED)) || !(st & DTE_BUSY))
        return false;
    fab_local_write(op->node->fab, FAB_REGION_DATA,
                    ite_offset(e) + __builtin_offsetof(struct dte_hdr, prev_ite), &prev,
                    sizeof(prev));
    return true;
}

/* This call's entry is in another life already: it stalled past the grace period, and a
 * takeover committed the entry, which was replaced and recycled since; or it was never linked
 * and the leak sweep took it back. Whether the call took effect is unknown. What it unlinked is
 * left to the leak sweep (its previous version may be linked again). */
static int lost_track(struct op *op)
{
    op->mine = 0;
    op->nrec = 0;
    return NESSIE_TIMEOUT;
}

/*
 * Take this call's uncommitted entry back out of the index, so that the call has no effect:
 *   1. its previous version is made one that this call unlinked itself (the candidate's old
 *      entry, or a duplicate step 4 cleared): whoever links it again (this call, or a takeover
 *      of the abandoned entry) must not link an entry somebody else is recycling;
 *   2. abandon it: a CAS naming its life, after which no takeover can commit it, ever: from
 *      here on the call has no effect, whatever happens to the rest;
 *   3. link the previous version again in its place; if that cannot be done now, the takeover
 *      of the abandoned entry does it after the grace period.
 * Sets *done when the entry had been committed already (a takeover, or a lost completion of
 * our own commit): the call took effect then, with *version. Returns NESSIE_FABRIC_ERROR when
 * step 2 cannot be made (op->mine stays: the effect is unknown), NESSIE_TIMEOUT when the entry is
 * in another life already (lost_track). The previous version is never recycled by this call
 * once it has been offered for linking again: if step 3 fails, it may be linked by a takeover
 * and replaced since, somebody else's to recycle (model N3); the leak sweep takes it otherwise.
 */
static int abandon_mine(struct op *op, bool *done, uint64_t *version)
{
    uint64_t e = op->mine;
    *done = false;
    if (!e)
        return NESSIE_OK;
    struct dte_hdr h;
    mine_hdr(op, e, &h);
    if (dte_gen(h.state) != ite_gen(e) || !(h.state & DTE_BUSY))
        return lost_track(op);
    uint64_t back = !ite_empty(h.prev_ite) && rec_has(op, h.prev_ite) ? h.prev_ite
                                                                       : op->mine_replaced;
    /* Step 1: our own memory, published by the CAS below. */
    if (back != h.prev_ite && !(h.state & DTE_COMMITTED) && !set_prev(op, e, back))
        return lost_track(op);
    /* Step 2. */
    uint64_t expect = dte_state(ite_gen(e), DTE_BUSY), old = 0;
    bool abandoned = false;
    for (int tries = 0; tries < 8 && !abandoned; tries++) {
        if (dte_state_cas(op, e, expect, expect | DTE_ABANDONED, &old) != NESSIE_OK)
            fab_local_read(op->node->fab, FAB_REGION_DATA, ite_offset(e) + DTE_OFF_STATE, &old,
                           sizeof(old)); /* a lost completion: what is the word now? */
        else if (old == expect)
            old |= DTE_ABANDONED;
        if (dte_gen(old) != ite_gen(e) || !(old & DTE_BUSY))
            return lost_track(op); /* model N1 */
        if (old & DTE_COMMITTED) {
            /* Committed: by a takeover, or by our own commit whose completion was lost. */
            *done = true;
            *version = op->mine_version;
            op->mine = 0;
            return NESSIE_OK;
        }
        abandoned = (old & DTE_ABANDONED) != 0;
        expect = old; /* unchanged (the CAS was dropped), or RECYCLED added: abandon that */
    }
    if (!abandoned)
        return NESSIE_FABRIC_ERROR;
    /* Step 3. A CAS that did not run leaves e linked: try again, a few times. */
    bool ok = false, clean;
    uint64_t pos = op->pos[op->mine_pos], now = e;
    int rc = NESSIE_OK;
    for (int tries = 0; tries < 4 && rc == NESSIE_OK && !ok && now == e; tries++) {
        rc = ite_cas_resolve(op, pos, e, back, &ok, &clean);
        if (rc == NESSIE_OK && !ok && ite_read(op, pos, &now) != NESSIE_OK)
            rc = NESSIE_FABRIC_ERROR;
    }
    if (rc == NESSIE_OK && !ok && now == e)
        rc = NESSIE_FABRIC_ERROR; /* still linked: the takeover of the abandoned entry ends it */
    rec_remove(op, back); /* linked again, or offered to be: see above */
    /* Not linked where it was: never published, or linked again over, or unlinked by somebody
     * else (who recycles it too: a second mark of the same life is harmless, and nobody else
     * would if it never was published). Unknown: the takeover of the abandoned entry will. */
    if (rc == NESSIE_OK)
        nessie_recycle(op->ctx, e);
    op->mine = 0;
    return NESSIE_OK;
}

/* A duplicate made our entry's previous version (step 4) was not unlinked after all: point the
 * previous version back at the candidate's old entry, which we did unlink (model N7). */
static void unadopt_dup(struct op *op, uint64_t mine, uint64_t *dup)
{
    if (!*dup)
        return;
    if (set_prev(op, mine, op->mine_replaced))
        op->mine_prev_live = false;
    *dup = 0;
}

/* The call is finished (it took effect): recycle what it replaced. */
static enum attempt write_done(struct op *op, struct wreq *w, uint64_t version, int *status)
{
    w->version_out = version;
    op->mine = 0;
    recycle_all(op);
    *status = NESSIE_OK;
    return A_DONE;
}

static enum attempt write_attempt(struct op *op, struct wreq *w, int *status)
{
    struct nessie_node *nd = op->node;
    struct dte_view v;
    bool match, ok, done;
    int cand = -1;
    bool adopted = false, live = false;
    struct dte_view old = {0};
    uint64_t version;

    /* Step 2: forward pass for a candidate: the first entry holding the key, or the first empty
     * one if the mode allows an absent key. A call with an entry of its own still in the index
     * from an earlier attempt looks on for it, to adopt it (A.1.3 step 2.3). */
    for (uint32_t i = 0; i < op->n; i++) {
        if (attempt_expired(op)) {
            count_abort(op, NESSIE_ABORT_TIMEOUT);
            return A_RETRY;
        }
        uint64_t ite, t = nessie_mono_ns();
        if ((*status = ite_read(op, op->pos[i], &ite)) != NESSIE_OK)
            return A_DONE;
        op->seen[i] = ite;
        if (ite_empty(ite)) {
            if (!needs_present(w->mode) && !op->mine) { /* Step 2.1 */
                cand = (int)i;
                break;
            }
            continue;
        }
        if (ite_filter(ite) != op->filter) /* Step 2.2 */
            continue;
        if (ite == op->mine) { /* our earlier attempt's entry, still uncommitted: adopt it */
            cand = (int)i;
            adopted = true;
            break;
        }
        /* Step 2.3: the DTE without its value, unless the new value is built from it. */
        if ((*status = proto_dte_fetch(op, ite, 0, op->key, op->klen, needs_old_value(w->mode), t,
                                       &v, &match)) != NESSIE_OK)
            return A_DONE;
        if (v.stale) {
            count_abort(op, NESSIE_ABORT_TIMEOUT);
            return A_RETRY;
        }
        if (!match)
            continue;
        if (is_mine(op, &v) && (v.h.state & DTE_COMMITTED)) /* a takeover finished this call */
            return write_done(op, w, v.h.version, status);
        if (!(v.h.state & DTE_COMMITTED)) {
            if (proto_is_orphan(op, ite, &v.h)) {
                if ((*status = proto_takeover(op, op->pos[i], ite, &v)) != NESSIE_OK)
                    return A_DONE;
                return A_RETRY_NOW;
            }
            count_abort(op, NESSIE_ABORT_INVALID_DTE); /* in progress elsewhere */
            return A_RETRY;
        }
        if (op->mine) {
            /* The key is committed in front of our own entry (moved there meanwhile): our entry
             * would be hidden behind it. Take ours back out and start over. */
            if ((*status = abandon_mine(op, &done, &version)) != NESSIE_OK)
                return A_DONE;
            if (done)
                return write_done(op, w, version, status);
            return A_RETRY_NOW;
        }
        cand = (int)i;
        old = v;
        live = dte_readable(&v.h) && !nessie_item_dead(nd, &v.h);
        break;
    }

    if (cand < 0 && op->mine) {
        /* Our entry is gone from the index: a takeover committed it and it was replaced since
         * (the call took effect), or it was taken out uncommitted (it never took effect, and
         * nobody can link it again): try again. */
        struct dte_hdr h;
        mine_hdr(op, op->mine, &h);
        if (dte_gen(h.state) == ite_gen(op->mine) && (h.state & DTE_BUSY) &&
            (h.state & DTE_COMMITTED))
            return write_done(op, w, op->mine_version, status);
        op->mine = 0;
        return A_RETRY_NOW;
    }
    if (cand < 0 && needs_present(w->mode)) /* in none of I_1..I_n: as a GET miss ends */
        return proto_end_absent(op, absent_status(w->mode), status);
    if (cand < 0) {
        /* Step 2.4: every entry is taken by other keys: MIGRATE one away, then try again. The
         * thesis moves I_1; when that chain ends at the depth limit, I_2.. are tried too before
         * the index is declared full. */
        enum attempt r = A_DONE;
        for (uint32_t i = 0; i < op->n; i++) {
            r = migrate(op, op->pos[i], op->pos, 0, status);
            if (r == A_DONE && *status == NESSIE_OK)
                return A_RETRY_NOW;
            if (!(r == A_DONE && *status == NESSIE_INDEX_FULL))
                break;
        }
        if (r == A_RETRY)
            count_abort(op, NESSIE_ABORT_MIGRATE);
        return r;
    }

    uint64_t mine = op->mine;
    if (!adopted) {
        /* Step 3: the new DTE, in local memory, invalid, with the candidate's ITE as previous
         * version. The condition of a conditional form is judged here, on the item the
         * candidate holds; the CAS below makes sure it still holds it. */
        struct dte_hdr h;
        const void *v1, *v2;
        uint32_t l1, l2;
        EXPIRED_RETRY(op);
        if (w->mode == W_EVICT && op->seen[cand] != w->victim) {
            *status = NESSIE_NOT_FOUND; /* changed since the victim was chosen */
            return A_DONE;
        }
        int rc = build_new(op, w, &old, live, &h, &v1, &l1, &v2, &l2);
        if (rc != NESSIE_OK) {
            *status = rc;
            return A_DONE;
        }
        h.prev_ite = op->seen[cand];
        *status = dte_write_new(op, &h, op->id, op->key, v1, l1, v2, l2, op->filter, &mine);
        /* An eviction never waits for room for its tombstone: another victim, later, will do. */
        if (*status == NESSIE_NO_MEMORY && w->mode != W_EVICT &&
            memory_short(op, h.key_len, l1 + l2))
            return A_RETRY;
        if (*status != NESSIE_OK)
            return A_DONE;
        /* Step 3.1: swing the candidate to it. */
        HOOK(op, NESSIE_HOOK_PUT_BEFORE_CAS, cand);
        if (attempt_expired(op)) {
            dte_free_unpublished(op, mine);
            count_abort(op, NESSIE_ABORT_TIMEOUT);
            return A_RETRY;
        }
        bool clean;
        *status = ite_cas_resolve(op, op->pos[cand], op->seen[cand], mine, &ok, &clean);
        if (clean && !ok) {
            dte_free_unpublished(op, mine); /* never visible: free at once */
            count_abort(op, NESSIE_ABORT_CAS_FAILED);
            return A_RETRY;
        }
        /* Published, or perhaps (the CAS's outcome was lost): from here on the entry is the
         * call's to commit or to abandon (abandon_mine); it is never freed without quarantine. */
        op->mine = mine;
        op->mine_pos = (uint32_t)cand;
        op->mine_replaced = op->seen[cand];
        op->mine_prev_live = live;
        op->mine_version = h.version;
        if (*status != NESSIE_OK || !ok) {
            if (*status == NESSIE_OK)
                *status = NESSIE_FABRIC_ERROR; /* not linked now: run_write abandons it */
            return A_DONE;
        }
        /* Step 3.2: the replaced DTE is recycled once the call is done (it serves as the
         * previous version meanwhile). */
        if (!ite_empty(op->seen[cand]))
            rec_push(op, op->seen[cand]);
        op->seen[cand] = mine;
        HOOK(op, NESSIE_HOOK_PUT_AFTER_CAS, cand);
    }

    /* Step 4: clear duplicates of the key in I_{cnd+1}..I_n, in order. */
    uint64_t adopted_dup = 0; /* made our previous version, not yet unlinked */
    for (uint32_t j = (uint32_t)cand + 1; j < op->n; j++) {
        uint64_t ite, t = nessie_mono_ns();
        if ((*status = ite_read(op, op->pos[j], &ite)) != NESSIE_OK)
            return A_DONE;
        op->seen[j] = ite;
        if (ite_empty(ite) || ite_filter(ite) != op->filter)
            continue;
        if ((*status = proto_dte_fetch(op, ite, 0, op->key, op->klen, false, t, &v,
                                       &match)) != NESSIE_OK)
            return A_DONE;
        if (v.stale) {
            count_abort(op, NESSIE_ABORT_TIMEOUT);
            return A_RETRY;
        }
        if (!match)
            continue;
        bool dup_live = dte_readable(&v.h) && !nessie_item_dead(nd, &v.h);
        if (!(v.h.state & DTE_COMMITTED)) {
            /* An entry in progress behind ours (another write of the key, or a migration's
             * copy). The thesis's step 4.4 clears it, but its writer may then commit it without
             * knowing it is unlinked, and report success for a value nobody will read if this
             * call later abandons its own entry (a fabric error, or the key found committed in
             * front of it); for add it may also stand for a live item. So it is never cleared:
             * this call takes its own entry back out (holding it would block the other, which
             * meets ours first) and tries again once the other has finished, or takes it over
             * if its writer is gone. */
            if (proto_is_orphan(op, ite, &v.h)) {
                if ((*status = proto_takeover(op, op->pos[j], ite, &v)) != NESSIE_OK)
                    return A_DONE;
                return A_RETRY_NOW;
            }
            if ((*status = abandon_mine(op, &done, &version)) != NESSIE_OK)
                return A_DONE;
            if (done)
                return write_done(op, w, version, status);
            count_abort(op, NESSIE_ABORT_INVALID_DTE);
            return A_RETRY;
        }
        if (dup_live && w->mode == W_ADD) {
            /* add finds the key present after all: take our entry back out. */
            if ((*status = abandon_mine(op, &done, &version)) != NESSIE_OK)
                return A_DONE;
            if (done)
                return write_done(op, w, version, status);
            recycle_all(op);
            *status = NESSIE_NOT_STORED;
            return A_DONE;
        }
        if (dup_live && !op->mine_prev_live) {
            /* The duplicate is the value readers see (the candidate was empty or dead): make it
             * our entry's previous version before unlinking it, so that readers meeting our
             * entry, and a rollback of it, still find that value. */
            if (!set_prev(op, mine, ite)) {
                *status = lost_track(op);
                return A_DONE;
            }
            op->mine_prev_live = true;
            adopted_dup = ite;
        }
        /* Step 4.4 */
        if (attempt_expired(op)) {
            unadopt_dup(op, mine, &adopted_dup);
            count_abort(op, NESSIE_ABORT_TIMEOUT);
            return A_RETRY;
        }
        bool clean;
        if ((*status = ite_cas_resolve(op, op->pos[j], ite, 0, &ok, &clean)) != NESSIE_OK) {
            /* Whether the duplicate is still linked is unknown, and our entry names it: neither
             * abandoning (its restore could lose the duplicate, or link it twice) nor
             * recycling it is safe. Leave the entry for a takeover to commit (model N7). */
            *status = NESSIE_TIMEOUT;
            return A_DONE;
        }
        if (!ok) {
            unadopt_dup(op, mine, &adopted_dup);
            count_abort(op, NESSIE_ABORT_CAS_FAILED);
            return A_RETRY;
        }
        adopted_dup = 0;
        rec_push(op, ite);
        op->seen[j] = 0;
    }

    /* Step 5: reverse pass. */
    HOOK(op, NESSIE_HOOK_PUT_BEFORE_REVERSE, 0);
    bool changed;
    if ((*status = reverse_pass(op, &changed)) != NESSIE_OK)
        return A_DONE;
    if (changed) {
        count_abort(op, NESSIE_ABORT_REVERSE_PASS);
        return A_RETRY;
    }
    if (attempt_expired(op)) {
        count_abort(op, NESSIE_ABORT_TIMEOUT);
        return A_RETRY;
    }

    HOOK(op, NESSIE_HOOK_PUT_BEFORE_COMMIT, 0);
    /* Step 6: commit: the same CAS a takeover would make, so only one of them happens. PUT: the
     * entry becomes valid. DELETE (A.1.5 step 6): the tombstone is committed, then unlinked. */
    bool committed;
    if ((*status = commit_own(op, mine, &committed)) != NESSIE_OK) {
        if (*status == NESSIE_TIMEOUT)
            lost_track(op);
        return A_DONE;
    }
    if (!committed) {
        /* Only this call abandons its own entry, and it has not: cannot happen. Say so, and
         * report the outcome as what it is: unknown. */
        log_error("protocol: own entry %016llx could not be committed", (unsigned long long)mine);
        *status = NESSIE_TIMEOUT;
        op->mine = 0;
        return A_DONE;
    }
    op->mine = 0; /* committed: nothing to abandon any more, whatever happens below */
    if (w->mode == W_DELETE || w->mode == W_EVICT) {
        /* The DELETE took effect at its commit; unlinking the committed tombstone is
         * housekeeping (if it fails, the key's next write replaces it and recycles it). */
        bool clean;
        if (ite_cas_resolve(op, op->pos[cand], mine, 0, &ok, &clean) == NESSIE_OK && ok)
            rec_push(op, mine);
    }
    /* Step 7: recycle what the call replaced. */
    return write_done(op, w, op->mine_version, status);
}

/* After a write call's last attempt: settle what it leaves behind, and its outcome. */
static int write_end(struct op *op, struct wreq *w, int status)
{
    struct nessie_ctx *ctx = op->ctx;
    if (status != NESSIE_OK && status != NESSIE_TIMEOUT && op->mine) {
        /* A definite failure must have no effect, ever (nessie.h): take our published entry
         * back out, or report the effect unknown if even that cannot be made sure of. */
        bool done;
        uint64_t version;
        if (abandon_mine(op, &done, &version) != NESSIE_OK) {
            status = NESSIE_TIMEOUT;
        } else if (done) {
            w->version_out = version;
            status = NESSIE_OK;
        }
    }
    if (status != NESSIE_TIMEOUT) {
        /* A call that ends refused (exists, not stored, ...) after an earlier attempt of it
         * unlinked entries still owes their recycling: its own entry is out of the index by then
         * (adopted, rolled back, or cleared by another operation). */
        recycle_all(op);
    } else {
        /* Our published entry (if any) is left for a takeover to finish; the DTEs we already
         * unlinked can be recycled, except the one that entry names as its previous version
         * (readers use it until the entry is committed; the leak sweep finds it after). */
        uint64_t keep = 0;
        if (op->mine) {
            struct dte_hdr h;
            mine_hdr(op, op->mine, &h);
            keep = h.prev_ite;
        }
        for (uint32_t i = 0; i < op->nrec; i++)
            if (op->rec[i] != keep)
                nessie_recycle(ctx, op->rec[i]);
    }
    return proto_finish(op, status);
}

static int run_write(struct nessie_ctx *ctx, enum nessie_opkind kind, const void *key,
                     size_t klen, struct wreq *w)
{
    struct op op;
    proto_op_init(&op, ctx, kind, key, klen);
    int status = NESSIE_OK;
    RUN_ATTEMPTS(&op, write_attempt(&op, w, &status));
    return write_end(&op, w, status);
}

/* Attempts an eviction makes before it leaves a busy key alone: a victim that other operations
 * are writing is not worth waiting for, another one will do. */
#define EVICT_ATTEMPTS 3

nessie_evict_hook_fn nessie_evict_hook;
void *nessie_evict_hook_user;

void nessie_set_evict_hook(nessie_evict_hook_fn fn, void *user)
{
    nessie_evict_hook_user = user;
    nessie_evict_hook = fn;
}

int nessie_evict_entry(struct nessie_ctx *ctx, const void *key, size_t key_len, uint64_t ite)
{
    enum nessie_opkind saved = ctx->kind; /* a write that evicts on its own is under way */
    struct wreq w = {.mode = W_EVICT, .victim = ite};
    struct op op;
    if (nessie_evict_hook)
        nessie_evict_hook(nessie_evict_hook_user, key, key_len, false, 0);
    proto_op_init(&op, ctx, NESSIE_OPK_EVICT, key, key_len);
    int status = NESSIE_OK;
    for (unsigned attempt = 0;; attempt++) {
        op.attempt_start = nessie_mono_ns();
        CTR_ADD(OPC(ctx).attempts, 1);
        enum attempt a = write_attempt(&op, &w, &status);
        if (a == A_DONE)
            break;
        if (attempt + 1 >= EVICT_ATTEMPTS) {
            status = NESSIE_EXISTS; /* busy: no effect (write_end takes back what it published) */
            break;
        }
        if (a == A_RETRY)
            proto_backoff(&op, attempt);
    }
    status = write_end(&op, &w, status);
    ctx->kind = saved;
    if (nessie_evict_hook)
        nessie_evict_hook(nessie_evict_hook_user, key, key_len, true, status);
    return status;
}

int nessie_store(struct nessie_ctx *ctx, enum nessie_store_mode mode, const void *key,
                 size_t key_len, const void *value, size_t value_len, uint32_t flags,
                 int64_t exptime, uint64_t cas, uint64_t *version_out)
{
    static const enum wmode modes[] = {
        [NESSIE_SET] = W_SET, [NESSIE_ADD] = W_ADD, [NESSIE_REPLACE] = W_REPLACE,
        [NESSIE_CAS] = W_CAS, [NESSIE_APPEND] = W_APPEND, [NESSIE_PREPEND] = W_PREPEND,
    };
    if (!ctx || (unsigned)mode > NESSIE_PREPEND || (!value && value_len))
        return NESSIE_INVALID;
    if (check_key(key, key_len) != NESSIE_OK)
        return NESSIE_BAD_KEY;
    if (dte_size((uint32_t)key_len, 0) + value_len > ctx->node->cfg.max_item_size)
        return NESSIE_TOO_BIG;
    AUTO_RUN(ctx, true, key, key_len, value_len,
             nessie_store(ctx, mode, key, key_len, value, value_len, flags, exptime, cas,
                          version_out));
    uint32_t home;
    if (sd_route(ctx, true, key, key_len, value_len, &home)) {
        struct sd_req rq = {.op = SD_OP_STORE, .sub = (uint8_t)mode, .value_len = (uint32_t)value_len,
                            .flags = flags, .exptime = exptime, .arg = cas};
        return sd_write(ctx, home, &rq, key, key_len, value, version_out, NULL);
    }
    struct wreq w = {.mode = modes[mode], .val = value, .vlen = (uint32_t)value_len,
                     .flags = flags, .exptime = nessie_abs_exptime(exptime), .cas = cas};
    int rc = run_write(ctx, NESSIE_OPK_PUT, key, key_len, &w);
    if (rc == NESSIE_OK && version_out)
        *version_out = w.version_out;
    return rc;
}

int nessie_delete(struct nessie_ctx *ctx, const void *key, size_t key_len)
{
    if (!ctx)
        return NESSIE_INVALID;
    if (check_key(key, key_len) != NESSIE_OK)
        return NESSIE_BAD_KEY;
    AUTO_RUN(ctx, true, key, key_len, 0, nessie_delete(ctx, key, key_len));
    uint32_t home;
    if (sd_route(ctx, true, key, key_len, 0, &home)) {
        struct sd_req rq = {.op = SD_OP_DELETE};
        return sd_write(ctx, home, &rq, key, key_len, NULL, NULL, NULL);
    }
    struct wreq w = {.mode = W_DELETE};
    return run_write(ctx, NESSIE_OPK_DELETE, key, key_len, &w);
}

int nessie_arith(struct nessie_ctx *ctx, const void *key, size_t key_len, bool incr,
                 uint64_t delta, uint64_t *result, uint64_t *version_out)
{
    if (!ctx)
        return NESSIE_INVALID;
    if (check_key(key, key_len) != NESSIE_OK)
        return NESSIE_BAD_KEY;
    AUTO_RUN(ctx, true, key, key_len, 0,
             nessie_arith(ctx, key, key_len, incr, delta, result, version_out));
    uint32_t home;
    if (sd_route(ctx, true, key, key_len, 0, &home)) {
        struct sd_req rq = {.op = SD_OP_ARITH, .sub = incr, .arg = delta};
        return sd_write(ctx, home, &rq, key, key_len, NULL, version_out, result);
    }
    struct wreq w = {.mode = incr ? W_INCR : W_DECR, .delta = delta};
    int rc = run_write(ctx, NESSIE_OPK_PUT, key, key_len, &w);
    if (rc == NESSIE_OK) {
        if (result)
            *result = w.num_out;
        if (version_out)
            *version_out = w.version_out;
    }
    return rc;
}

int nessie_touch(struct nessie_ctx *ctx, const void *key, size_t key_len, int64_t exptime)
{
    if (!ctx)
        return NESSIE_INVALID;
    if (check_key(key, key_len) != NESSIE_OK)
        return NESSIE_BAD_KEY;
    AUTO_RUN(ctx, true, key, key_len, 0, nessie_touch(ctx, key, key_len, exptime));
    uint32_t home;
    if (sd_route(ctx, true, key, key_len, 0, &home)) {
        struct sd_req rq = {.op = SD_OP_TOUCH, .exptime = exptime};
        return sd_write(ctx, home, &rq, key, key_len, NULL, NULL, NULL);
    }
    struct wreq w = {.mode = W_TOUCH, .exptime = nessie_abs_exptime(exptime)};
    return run_write(ctx, NESSIE_OPK_PUT, key, key_len, &w);
}
