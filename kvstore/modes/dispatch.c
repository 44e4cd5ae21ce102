/*
 * dispatch.c - the one place a call's way is decided (issue 27): each public call comes here
 * with its key planned once (memory/keys.h), is shipped to its key's home node (sd.c) if its
 * context's mode says so and the home can take it, and otherwise, or when a shipped call comes
 * back to be run here, runs client-driven through the protocol room, which knows nothing of
 * modes. Mode auto asks the selector (sd.c) before the call and teaches it after.
 */
#include <time.h>

#include "modes.h"
#include "protocol/protocol.h"

/* Whether ctx ships this call (write or GET, value_len bytes of value) on kp: mode cd never,
 * hy its writes, sd all, auto what the selector picks (*ch then names what to teach it). */
static bool dispatch_ships(struct nessie_ctx *ctx, bool write, const struct key_plan *kp,
                           size_t value_len, struct sd_choice *ch)
{
    ch->est = NULL;
    switch (ctx->mode) {
    case NESSIE_MODE_CD:
        return false;
    case NESSIE_MODE_HY:
        if (!write)
            return false;
        break;
    case NESSIE_MODE_AUTO:
        if (sd_auto_choose(ctx, write, kp, value_len, ch) == NESSIE_MODE_CD)
            return false;
        break;
    case NESSIE_MODE_SD:
    default:
        break;
    }
    return sd_can_ship(ctx, kp, value_len);
}

/* Flash items (issue 31) are read only by their owner: a call that meets another node's, where
 * its key may be, ends NESSIE_ELSEWHERE with no effect and goes there, server-driven (the owner
 * runs it client-driven, as any shipped call, and reads the record itself). Hops it may make:
 * one, unless the key's entry is demoted again on a third node between hops, or its positions
 * hold flash items of two nodes (one of another key with the same filter bits), which each
 * send it to the other. Past them, or when the owner takes no shipped call (its servers
 * stalled, shunned, or it is unreachable), the call runs here once more taking such entries
 * out of the index as it meets them (ctx->flash_take): evictions, which a cache may make at
 * any time, rather than a call that fails. */
#define DISPATCH_FLASH_HOPS 3

/* Whether a call that ended *rc (after `hops` hops) goes on to ctx->elsewhere, payload bytes of
 * key and value; when it may not, and *rc is NESSIE_ELSEWHERE, sets ctx->flash_take and *rc to
 * -1 (run here, evicting what it cannot read). */
static bool dispatch_hop(struct nessie_ctx *ctx, unsigned hops, size_t payload, int *rc)
{
    const bool took = ctx->flash_take;
    ctx->flash_take = false;
    if (*rc != NESSIE_ELSEWHERE)
        return false;
    if (took) {
        *rc = NESSIE_FABRIC_ERROR; /* never: a run that takes such entries out goes past them */
        return false;
    }
    if (hops < DISPATCH_FLASH_HOPS && sd_can_ship_flash(ctx, ctx->elsewhere, payload))
        return true;
    ctx->flash_take = true;
    *rc = -1;
    return false;
}

int mode_get(struct nessie_ctx *ctx, const struct key_plan *kp, void *buf, size_t cap,
             struct nessie_item *out)
{
    struct sd_choice ch;
    int rc = -1;
    if (dispatch_ships(ctx, false, kp, 0, &ch))
        rc = sd_get(ctx, kp->home, kp, buf, cap, out);
    for (unsigned hops = 0;; hops++) {
        if (rc < 0) {
            rc = proto_get(ctx, kp, buf, cap, out);
            ctx->call_deadline_ns = 0; /* a withdrawn call's budget: consumed by its start */
        }
        if (dispatch_hop(ctx, hops, kp->klen, &rc))
            rc = sd_get(ctx, ctx->elsewhere, kp, buf, cap, out);
        else if (rc >= 0)
            break;
    }
    sd_auto_learn(ctx, &ch);
    return rc;
}

/* A multi-get run client-driven: its keys that met another node's flash item go there, one by
 * one, as single GETs (mode_get), from the batch's callback. */
struct multi_hop {
    struct nessie_ctx *ctx;
    const void *const *keys;
    const size_t *lens;
    void *const *bufs;
    const size_t *caps;
    nessie_multi_fn done;
    void *user;
};

static void multi_hop_done(void *user, size_t i, int rc, const struct nessie_item *it)
{
    struct multi_hop *mh = user;
    struct nessie_item again;
    if (rc == NESSIE_ELSEWHERE) {
        struct key_plan kp;
        key_plan_make(&kp, mh->ctx->node, mh->keys[i], mh->lens[i]);
        void *buf = mh->bufs ? mh->bufs[i] : NULL;
        rc = mode_get(mh->ctx, &kp, buf, buf ? mh->caps[i] : 0, &again);
        it = rc == NESSIE_OK ? &again : NULL;
    }
    mh->done(mh->user, i, rc, it);
}

int mode_get_multi(struct nessie_ctx *ctx, size_t n, const void *const *keys, const size_t *lens,
                   void *const *bufs, const size_t *caps, nessie_multi_fn done, void *user)
{
    if (ctx->mode != NESSIE_MODE_SD) {
        struct multi_hop mh = {.ctx = ctx, .keys = keys, .lens = lens, .bufs = bufs, .caps = caps,
                               .done = done, .user = user};
        return proto_get_multi(ctx, n, keys, lens, bufs, caps, multi_hop_done, &mh);
    }
    /* Server-driven: each key is shipped to its own home node (or read here if that is this
     * node), one after the other. */
    for (size_t i = 0; i < n; i++) {
        struct nessie_item it;
        int rc = key_check(keys[i], lens[i]);
        if (rc == NESSIE_OK) {
            struct key_plan kp;
            key_plan_make(&kp, ctx->node, keys[i], lens[i]);
            rc = mode_get(ctx, &kp, bufs ? bufs[i] : NULL, bufs && bufs[i] ? caps[i] : 0, &it);
        }
        done(user, i, rc, rc == NESSIE_OK ? &it : NULL);
    }
    return NESSIE_OK;
}

/* How long a write of a node being retired waits before it tries the next survivor, when the
 * one it tried sent it back (its servers busy past the take-up limit, or shunned). */
#define DISPATCH_ELSEWHERE_NAP_NS 1000000L

/* R1 (model/retire.pml): this node is being retired and writes no new DTE, so a write of its
 * own clients runs on a survivor: shipped there as a placed store is (sd.c runs any call it is
 * sent, client-driven), to the nodes of the key's positions that are not this one, in turn,
 * until one runs it or the call's budget is spent. Returns the call's status; never runs it
 * here: NESSIE_FABRIC_ERROR (no effect) if no survivor took it within the budget. */
static int dispatch_elsewhere(struct nessie_ctx *ctx, const struct key_plan *kp,
                              const struct sd_req *rq, const void *value, uint64_t *version_out,
                              uint64_t *num_out)
{
    struct nessie_node *nd = ctx->node;
    const uint64_t end = nessie_mono_ns() + nd->bound.budget_ns;
    for (uint32_t round = 0;; round++) {
        uint32_t cand[NESSIE_PLAN_MAX], n = 0;
        for (uint32_t i = 0; i < kp->n; i++) {
            uint32_t node = (uint32_t)(kp->pos[i] / nd->cfg.index_slots);
            bool seen = false;
            for (uint32_t j = 0; j < n; j++)
                seen = seen || cand[j] == node;
            if (!seen && node != nd->cfg.self && !mship_unreachable(&nd->view, node))
                cand[n++] = node;
        }
        if (n) {
            uint32_t to = cand[round % n];
            if (sd_can_ship_to(ctx, to, kp->klen + rq->value_len)) {
                int rc = sd_write(ctx, to, kp, rq, value, version_out, num_out);
                ctx->call_deadline_ns = 0;
                if (rc >= 0)
                    return rc;
            }
        }
        if (nessie_mono_ns() >= end)
            return NESSIE_FABRIC_ERROR;
        struct timespec ts = {0, DISPATCH_ELSEWHERE_NAP_NS};
        nanosleep(&ts, NULL);
    }
}

/* A write's way: shipped (rq names it, with value), else run here by `here`, the protocol's
 * call with its arguments; on a node being retired, run on a survivor (R1). */
#define DISPATCH_WRITE(ctx, kp, value_len, rq, value, version_out, num_out, here)       \
    do {                                                                                 \
        struct sd_choice ch_;                                                            \
        int rc_ = -1;                                                                    \
        if (mship_retiring_self(&(ctx)->node->view))                                     \
            return dispatch_elsewhere((ctx), (kp), (rq), (value), (version_out),         \
                                      (num_out));                                        \
        if (dispatch_ships((ctx), true, (kp), (value_len), &ch_))                        \
            rc_ = sd_write((ctx), (kp)->home, (kp), (rq), (value), (version_out),       \
                           (num_out));                                           \
        for (unsigned hops_ = 0;; hops_++) {                                             \
            if (rc_ < 0) {                                                               \
                rc_ = (here);                                                            \
                (ctx)->call_deadline_ns = 0; /* a withdrawn call's budget: consumed */   \
                /* begun before the retire was announced here, refused by R1 */          \
                if (rc_ == NESSIE_FABRIC_ERROR && mship_retiring_self(&(ctx)->node->view)) \
                    rc_ = dispatch_elsewhere((ctx), (kp), (rq), (value), (version_out),  \
                                             (num_out));                                 \
            }                                                                            \
            if (dispatch_hop((ctx), hops_, (kp)->klen + (value_len), &rc_))              \
                rc_ = sd_write((ctx), (ctx)->elsewhere, (kp), (rq), (value), (version_out), \
                               (num_out));                                               \
            else if (rc_ >= 0)                                                           \
                break;                                                                   \
        }                                                                                \
        sd_auto_learn((ctx), &ch_);                                                      \
        return rc_;                                                                      \
    } while (0)

/* A store's way is a write's, but one this node would run here may be placed on a peer for room
 * (place.c): shipped there as its home's store would be, and run here if it comes back. */
int mode_store(struct nessie_ctx *ctx, const struct key_plan *kp, enum nessie_store_mode mode,
               const void *value, size_t value_len, uint32_t flags, int64_t exptime,
               uint64_t cas, uint32_t meta, uint64_t *version_out)
{
    struct sd_req rq = {.op = SD_OP_STORE, .sub = (uint8_t)mode, .value_len = (uint32_t)value_len,
                        .flags = flags, .exptime = exptime, .arg = cas, .arg2 = meta};
    struct sd_choice ch;
    int rc = -1;
    if (mship_retiring_self(&ctx->node->view))
        return dispatch_elsewhere(ctx, kp, &rq, value, version_out, NULL);
    if (dispatch_ships(ctx, true, kp, value_len, &ch)) {
        rc = sd_write(ctx, kp->home, kp, &rq, value, version_out, NULL);
    } else {
        uint32_t to = place_target(ctx, kp->klen, value_len);
        if (to != ctx->node->cfg.self && sd_can_ship_to(ctx, to, kp->klen + value_len)) {
            ch.est = NULL; /* not the way mode auto chose: nothing to teach it */
            rq.sub |= SD_SUB_PLACED;
            rc = sd_write(ctx, to, kp, &rq, value, version_out, NULL);
            if (rc == NESSIE_OK) {
                CTR_ADD(ctx->ctr.placed, 1);
                CTR_ADD(ctx->ctr.placed_bytes, value_len);
            }
        }
    }
    for (unsigned hops = 0;; hops++) {
        if (rc < 0) {
            rc = proto_store(ctx, kp, mode, value, value_len, flags, exptime, cas, meta,
                             version_out);
            ctx->call_deadline_ns = 0; /* a withdrawn call's budget: consumed */
            /* begun before the retire was announced here, refused by R1: elsewhere */
            if (rc == NESSIE_FABRIC_ERROR && mship_retiring_self(&ctx->node->view))
                rc = dispatch_elsewhere(ctx, kp, &rq, value, version_out, NULL);
        }
        if (dispatch_hop(ctx, hops, kp->klen + value_len, &rc)) {
            rq.sub &= (uint8_t)~SD_SUB_PLACED; /* its key's entry is there: not a placement */
            rc = sd_write(ctx, ctx->elsewhere, kp, &rq, value, version_out, NULL);
        } else if (rc >= 0) {
            break;
        }
    }
    sd_auto_learn(ctx, &ch);
    return rc;
}

int mode_delete(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t cas)
{
    const struct sd_req rq = {.op = SD_OP_DELETE, .arg = cas};
    DISPATCH_WRITE(ctx, kp, 0, &rq, NULL, NULL, NULL, proto_delete(ctx, kp, cas));
}

int mode_arith(struct nessie_ctx *ctx, const struct key_plan *kp, bool incr, uint64_t delta,
               uint64_t cas, uint64_t *result, uint64_t *version_out)
{
    const struct sd_req rq = {.op = SD_OP_ARITH, .sub = incr, .arg = delta, .arg2 = cas};
    DISPATCH_WRITE(ctx, kp, 0, &rq, NULL, version_out, result,
                   proto_arith(ctx, kp, incr, delta, cas, result, version_out));
}

int mode_invalidate(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t cas,
                    bool set_exptime, int64_t exptime)
{
    const struct sd_req rq = {.op = SD_OP_DELETE,
                              .sub = SD_SUB_INVALIDATE | (set_exptime ? SD_SUB_EXPTIME : 0),
                              .arg = cas, .exptime = exptime};
    DISPATCH_WRITE(ctx, kp, 0, &rq, NULL, NULL, NULL,
                   proto_invalidate(ctx, kp, cas, set_exptime, exptime));
}

int mode_token(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t version)
{
    const struct sd_req rq = {.op = SD_OP_TOUCH, .sub = SD_SUB_TOKEN, .arg = version};
    DISPATCH_WRITE(ctx, kp, 0, &rq, NULL, NULL, NULL, proto_token(ctx, kp, version));
}

int mode_touch(struct nessie_ctx *ctx, const struct key_plan *kp, int64_t exptime)
{
    const struct sd_req rq = {.op = SD_OP_TOUCH, .exptime = exptime};
    DISPATCH_WRITE(ctx, kp, 0, &rq, NULL, NULL, NULL, proto_touch(ctx, kp, exptime));
}
