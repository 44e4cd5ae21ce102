/*
 * protocol.c - GET, PUT (and its conditional and read-modify-write forms), DELETE and MIGRATE,
 * as Appendix A of Cassell's thesis specifies them, with the mechanisms of the Nessie paper's
 * section 4.3 (filter bits, local cache, previous versions, multiple reads, timeouts): this file
 * holds what the operations share (a call's state and its Step 0 timer, the key's positions and
 * filter bits, the counted fabric accesses, fetching an entry, orphans and their takeover, the
 * reverse pass, recycling, a call's end, the test hook); the operations themselves are in get.c
 * (GET, A.1.2), write.c (PUT and its forms, A.1.3; DELETE, A.1.5) and migrate.c (MIGRATE, A.1.4),
 * and protocol_int.h is what the four files share.
 *
 * What the appendix leaves open, and what these files decide (the first three: write.c):
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
 *     is read again to learn it (proto_ite_cas_resolve), and an entry that may be linked is
 *     never freed without quarantine.
 *   - Honest outcomes: once a write has published its entry, a fabric error makes it abandon
 *     the entry (write.c, abandon_mine) before it returns NESSIE_FABRIC_ERROR, so the failure is
 *     definite; only when it cannot even do that does it return NESSIE_TIMEOUT (unknown).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memory/memory.h"
#include "memory/flash.h"
#include "memory/hash.h"
#include "log.h"
#include "protocol.h"
#include "nessie_test.h"

/* --- small helpers ------------------------------------------------------------------------- */

/* The test hook (nessie.h): process-wide, because tests drive several contexts from one thread. */
nessie_hook_fn proto_test_hook;
void *proto_test_hook_user;

void nessie_set_test_hook(nessie_hook_fn fn, void *user)
{
    __atomic_store_n(&proto_test_hook_user, user, __ATOMIC_RELAXED);
    __atomic_store_n(&proto_test_hook, fn, __ATOMIC_RELEASE);
}

/* Operation numbers a context takes from its node at once: one atomic add per this many calls. */
#define OP_SEQ_BLOCK 65536

void proto_op_init(struct op *op, struct nessie_ctx *ctx, enum nessie_opkind kind,
                   const struct key_plan *kp)
{
    struct nessie_node *nd = ctx->node;
    memset(op, 0, sizeof(*op));
    op->ctx = ctx;
    op->node = nd;
    op->last_abort = -1;
    op->key = kp->key;
    op->klen = kp->klen;
    op->n = kp->n;
    op->no_insert = kp->no_insert;
    op->step = kp->step;
    memcpy(op->pos, kp->pos, sizeof(op->pos[0]) * op->n);
    op->filter = kp->filter;
    /* node | incarnation | operation number: unique across the cluster and across restarts,
     * so a retry recognizes its own entries and nobody else's. The numbers come in blocks from
     * the node (an id of the context's own number modulo 256 and a count of its calls made the
     * 257th context's calls the first one's: test_engine test_many_contexts_keep_their_writes);
     * 40 bits of them wrap after 2^40 calls of one incarnation. */
    if (ctx->op_seq == ctx->op_seq_end) {
        ctx->op_seq = __atomic_fetch_add(&nd->op_seq_next, OP_SEQ_BLOCK, __ATOMIC_RELAXED) + 1;
        ctx->op_seq_end = ctx->op_seq + OP_SEQ_BLOCK;
    }
    op->id = ((uint64_t)nd->cfg.self << 52) | ((nd->incarnation & 0xFFF) << 40) |
             (ctx->op_seq++ & ((1ULL << 40) - 1));
    uint64_t now = nessie_mono_ns(), end = now + nd->bound.budget_ns;
    /* A shipped call carried out here keeps the budget it started with (sd.c). */
    if (ctx->call_deadline_ns && ctx->call_deadline_ns < end)
        end = ctx->call_deadline_ns;
    ctx->call_deadline_ns = 0;
    op->deadline = end;
    op->spent = end <= now;
    ctx->kind = kind;
    CTR_ADD(OPC(ctx).ops, 1);
    op_traffic_mark(op);
}

void proto_replan(struct op *op, uint64_t step)
{
    op->step = step;
    op->pre_valid = false;
    if (!op->key)
        return; /* not a key's call (the mover's, the scrub's): it plans nothing */
    struct key_plan kp;
    key_plan_at(&kp, op->node, op->key, op->klen, step);
    op->n = kp.n;
    op->no_insert = kp.no_insert;
    memcpy(op->pos, kp.pos, sizeof(op->pos[0]) * op->n);
    CTR_ADD(op->ctx->ctr.replans, 1);
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

/* Polling a view lease that ran out: renewals come every MEMBERS_REFRESH_MS (100 ms), so a
 * millisecond costs a waiting call little and the daemon's CPU nothing that matters. */
#define VIEW_GATE_POLL_US 1000

bool proto_view_gate(struct op *op)
{
    bool waited = false;
    for (;;) {
        if (proto_view_current(op))
            return true;
        if (nessie_mono_ns() >= op->deadline)
            return false;
        if (!waited)
            CTR_ADD(op->ctx->ctr.view_waits, 1);
        waited = true;
        op->pre_valid = false; /* a read-ahead from before the wait is no use to the attempt */
        struct timespec ts = {0, VIEW_GATE_POLL_US * 1000L};
        nanosleep(&ts, NULL);
        op->attempt_start = nessie_mono_ns();
    }
}

/* --- fabric access, counted ------------------------------------------------------------------ */

/* CAS an ITE: returns NESSIE_OK and sets *ok when the swap happened. On NESSIE_FABRIC_ERROR
 * whether it ran is unknown (a lost completion): see proto_ite_cas_resolve. */
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
int proto_ite_cas_resolve(struct op *op, uint64_t pos, uint64_t expect, uint64_t swap, bool *ok,
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
int proto_dte_state_cas(struct op *op, uint64_t ite, uint64_t expect, uint64_t swap,
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
 * The flash item ite names (the flash tier, issue 31), as a committed DTE's view: read from this
 * node's log, whatever its key, into buffer b. Another node's is not readable here: a caller
 * that knows the key it looks for (klen > 0) ends NESSIE_ELSEWHERE with ctx->elsewhere set (its
 * call goes to that node), one that does not gets no match (the passes over the index handle
 * such entries before they fetch). A record that is gone (its page dropped or written again,
 * torn) or cannot be read (an I/O error) sets v->flash_gone: a miss, the entry to be taken
 * out.
 */
static int flash_fetch(struct op *op, uint64_t ite, int b, const void *key, uint32_t klen,
                       struct dte_view *v, bool *match)
{
    struct nessie_node *nd = op->node;
    if (ite_node(ite) != nd->cfg.self) {
        if (klen == 0)
            return NESSIE_OK;
        op->ctx->elsewhere = ite_node(ite);
        return NESSIE_ELSEWHERE;
    }
    if (!nd->flash) {
        v->flash_gone = true; /* the tier is off now: nothing of it can be read */
        return NESSIE_OK;
    }
    size_t cap = nd->class_size[nd->nclasses - 1] + FLASH_UNIT;
    unsigned char *buf = nessie_ctx_buf(op->ctx, b, cap);
    if (!buf)
        return NESSIE_NO_MEMORY;
    uint32_t kl = 0, vl = 0;
    struct flash_meta m;
    int rc = flash_read_rec(nd->flash, ite_flash_loc(ite), buf, cap, &kl, &vl, &m);
    if (rc != FLASH_OK) {
        /* Gone, or unreadable (an I/O error): a miss, and so the entry is taken out, as an
         * eviction: a miss while the entry stays would let a later read find the item again. */
        v->flash_gone = true;
        return NESSIE_OK;
    }
    /* An entry left naming a record since gone can, 64 lives of its page later, name another
     * key's record at the same place: a key with other filter bits than the entry's is not
     * the entry's (a caller that looks for its own key compares keys anyway). */
    if (klen == 0) {
        struct key_plan rp;
        key_plan_make(&rp, nd, buf, kl);
        if (rp.filter != ite_filter(ite)) {
            v->flash_gone = true;
            return NESSIE_OK;
        }
    }
    memset(&v->h, 0, sizeof(v->h));
    v->h.state = dte_state(0, DTE_BUSY | DTE_COMMITTED);
    v->h.kind = DTE_KIND_VALUE;
    v->h.key_len = (uint8_t)kl;
    v->h.value_len = vl;
    v->h.flags = m.flags;
    v->h.exptime = m.exptime;
    v->h.version = m.version;
    v->h.flags8 = m.flags8 & DTE_F_META;
    v->key = buf;
    v->value = buf + kl;
    *match = klen == 0 || (kl == klen && memcmp(buf, key, klen) == 0);
    return NESSIE_OK;
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
    v->stale = false;
    v->flash_gone = false;
    v->cached = NULL;
    if (ite_is_flash(ite) && !mship_lost(&nd->view, ite_node(ite)))
        return flash_fetch(op, ite, b, key, klen, v, match);
    if (cls >= nd->nclasses || ite_offset(ite) + nd->class_size[cls] > nd->cfg.data_bytes)
        return NESSIE_OK; /* not an entry this cluster could have written: no match */
    /* Its value was on a node lost from the view (issue 28): a lost value, which holds no key
     * for anyone; the entry is left for a write that needs its room (migrate.c). */
    if (mship_lost(&nd->view, ite_node(ite))) {
        CTR_ADD(OPC(ctx).lost_entries, 1);
        return NESSIE_OK;
    }
    uint32_t slot = nd->class_size[cls];
    bool local = ite_node(ite) == nd->cfg.self;
    uint64_t expiry = ite_read_ns + (uint64_t)nd->cfg.expiration_ms * 1000000ULL;

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
    if (node >= op->node->cfg.node_ids || fab_exec(op->ctx->ep, &wr) != FAB_OK)
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
    return owner_clock(op, ite, &now) && h->created_ns + op->node->bound.grace_ns < now;
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
 * Always undone. If the source is still linked, the item is there (the copy is a move that never
 * happened); if it was recycled, something else took it out (a DELETE or a write that ran before
 * the copy was linked), and committing the copy would bring a removed item back. A source out of
 * the index and not recycled may have been emptied by its migration, but nothing in its state
 * word says so: a recycle mark comes later where recycling runs in the background, a flash
 * source has no state word, and a node's evictor takes a source out of the index without a mark
 * when it demotes it to flash (then its page may be dropped: an eviction). Committing the copy
 * then brought evicted items back (nessie-stress flash, flash-compact: an eviction, then a cas on
 * the evicted version succeeded; test_engine test_orphan_copy_of_demoted_source_undone). So
 * that copy is undone too: the item may be lost, as to an eviction, and the checkers hear of an
 * eviction of unknown effect. A source whose value was on a node lost from the view (issue 28)
 * cannot be asked: its value is lost, as every value of that node's is. Sets *undo (always
 * true). Returns NESSIE_OK or NESSIE_FABRIC_ERROR.
 */
static int copy_undo(struct op *op, const struct dte_view *v, bool *undo)
{
    uint64_t src = v->h.prev_ite, st;
    *undo = true;
    if (ite_empty(src) || mship_lost(&op->node->view, ite_node(src)))
        return NESSIE_OK;
    int rc;
    uint64_t pos[NESSIE_PLAN_MAX];
    if (!ite_is_flash(src)) {
        if ((rc = dte_read_bytes(op, src, DTE_OFF_STATE, &st, sizeof(st))) != NESSIE_OK)
            return rc;
        if (dte_gen(st) != ite_gen(src) || !(st & DTE_BUSY) || (st & DTE_RECYCLED))
            return NESSIE_OK;
    }
    uint32_t n = nessie_key_plan_positions(op->node, v->key, v->h.key_len, pos);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t w;
        if ((rc = ite_read(op, pos[i], &w)) != NESSIE_OK)
            return rc;
        if (w == src)
            return NESSIE_OK;
    }
    if (nessie_evict_hook) {
        nessie_evict_hook(nessie_evict_hook_user, v->key, v->h.key_len, false, 0);
        nessie_evict_hook(nessie_evict_hook_user, v->key, v->h.key_len, true, NESSIE_TIMEOUT);
    }
    CTR_ADD(op->ctx->ctr.moves_undone, 1);
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
            rc = proto_dte_state_cas(op, ite, v->h.state, v->h.state | DTE_ABANDONED, &old);
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
    uint64_t state = v->h.state;
    if ((v->h.flags8 & DTE_F_ADD) && !(state & DTE_ABANDONED)) {
        /* An add whose writer did not finish: whether a live item of the key stands behind it
         * is what its step 4 would have found out. Committing it could report the add's value
         * over a live item; undoing it means the add had no effect, which its writer (gone, or
         * past the call bound) cannot have reported otherwise: abandoned, then undone below. */
        rc = proto_dte_state_cas(op, ite, state, state | DTE_ABANDONED, &old);
        if (rc != NESSIE_OK || old != state)
            return rc;
        state |= DTE_ABANDONED;
    }
    if (state & DTE_ABANDONED) {
        /* Its writer set its previous version to one it unlinked itself before abandoning it
         * (write.c, abandon_mine), so linking that again undoes exactly what the writer did. The
         * CAS names the abandoned entry's life. A previous version whose value was on a node
         * lost from the view is not linked again: it is lost, and an index entry naming a lost
         * node's data must never appear after the fence (a scrub clears them for good). */
        uint64_t back = (v->h.flags8 & DTE_F_COPY) ? 0 : v->h.prev_ite;
        if (!ite_empty(back) && mship_lost(&op->node->view, ite_node(back)))
            back = 0;
        /* A retire's values (model/retire.pml): a previous version naming the data of a node
         * being retired goes back as a committed copy in this node's data, since the relocation
         * may have passed this slot; the original, unlinked for good then, is recycled. */
        uint64_t copy = 0;
        if (!ite_empty(back) && proto_retiring_data(op->node, ite_node(back)) &&
            proto_retire_copy(op, back, &copy) != NESSIE_OK)
            copy = 0;
        rc = ite_cas(op, pos, ite, copy ? copy : back, &ok);
        if (rc == NESSIE_OK && ok) {
            nessie_recycle(ctx, ite);
            if (copy)
                nessie_recycle(ctx, back);
            CTR_ADD(ctx->ctr.takeovers, 1);
        } else if (copy && rc == NESSIE_OK) {
            proto_dte_free_unpublished(op, copy); /* the CAS did not run: never visible */
        }
        return rc;
    }
    rc = proto_dte_state_cas(op, ite, v->h.state, v->h.state | DTE_COMMITTED, &old);
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
int proto_reverse_pass(struct op *op, bool *changed)
{
    struct fab_wr wr[NESSIE_PLAN_MAX];
    uint64_t now[NESSIE_PLAN_MAX];
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
        struct fab_wc wc[NESSIE_PLAN_MAX];
        int k = fab_poll(op->ctx->ep, wc, NESSIE_PLAN_MAX);
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
void proto_recycle_all(struct op *op)
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
    if ((*status = proto_reverse_pass(op, &changed)) != NESSIE_OK)
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

/* A call timed out and its last attempt was aborted for outliving the expiration period: if
 * that is the fabric's pace and not a stall, every call will (the two-guest rxe test, qemu
 * without KVM: remote round trips of tens of ms, GETs timed out at a 100 ms period). The setting
 * that helps is the period: say so, once a minute at most. */
static void slow_attempt_log(struct op *op)
{
    static _Atomic uint64_t last_ns;
    if (nessie_every(&last_ns, NESSIE_SETTING_WARN_EVERY_NS))
        log_warn("protocol: a call timed out after %u ms, its last attempt aborted for outliving "
                 "the expiration period (%u ms); if the fabric's round trips take tens of ms "
                 "(emulated RDMA), raise cluster.expiration_ms",
                 op->node->cfg.op_timeout_ms, op->node->cfg.expiration_ms);
}

int proto_finish(struct op *op, int status)
{
    /* A call that ran out of time waiting for memory failed for lack of memory, unless an
     * attempt of it published an entry that a takeover may still commit, or lost track of one
     * (a takeover may have committed it already). */
    if (status == NESSIE_TIMEOUT && op->memory_wait && !op->mine && !op->lost) {
        status = NESSIE_NO_MEMORY;
        if (!op->node->cfg.no_evict)
            refused_log(op);
    }
    if (status == NESSIE_TIMEOUT && op->last_abort == NESSIE_ABORT_TIMEOUT)
        slow_attempt_log(op);
    if (status == NESSIE_ELSEWHERE)
        CTR_ADD(op->ctx->ctr.flash_shipped, 1);
    else
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
