/*
 * api.c - the engine's public calls on keys (nessie.h): each checks its arguments (bad input is
 * refused here and changes nothing), works out its key's plan once (memory/keys.h), and hands
 * the call to the dispatch (modes/dispatch.c), which decides who carries it out. With views, a
 * call that could not reach a node waits for the view that fences it and runs again (below).
 */
#include "front.h"

#include <stdlib.h>
#include <time.h>

/* The checks every call on one key starts with, and its plan: NESSIE_OK with *kp worked out, or
 * NESSIE_INVALID (no context) or NESSIE_BAD_KEY, having touched nothing. */
static int api_plan(struct nessie_ctx *ctx, const void *key, size_t key_len, struct key_plan *kp)
{
    if (!ctx)
        return NESSIE_INVALID;
    if (key_check(key, key_len) != NESSIE_OK)
        return NESSIE_BAD_KEY;
    /* This node lost from the view (issue 28): its peers no longer read its memory, so it must
     * not serve from it either; it is out until it rejoins. A joining node is out until a change
     * adds it (issue 30): its peers do not read it yet. */
    if (mship_self_out(&ctx->node->view))
        return NESSIE_FABRIC_ERROR;
    key_plan_make(kp, ctx->node, key, key_len);
    return NESSIE_OK;
}

/*
 * Waiting for a view (issue 28). A call that failed only because a node it needed could not be
 * reached (NESSIE_FABRIC_ERROR: it had no effect, nessie.h) is run again, planned anew, as soon
 * as a newer view is installed (one that fences the node has moved its positions to live nodes,
 * and reads its values as lost) or after a back-off (the node may answer again), until
 * cfg.view_wait_ms after its first failure (the detection time the daemon derives from its
 * lease: reception/members.c) plus the fabric's request bound (by which acting on a fencing
 * view is delayed: membership.h). Without views (view_wait_ms 0, static membership) no view will
 * come, and the error is the answer. A run that timed out is never repeated: its effect is
 * unknown.
 */
/* The back-off between runs while no view comes: doubling from 1 ms to this. */
#define API_WAIT_BACKOFF_MAX_MS 32

struct api_wait {
    uint64_t until_ns; /* 0 until the first failure */
    uint64_t epoch;    /* the view the last run failed under */
    unsigned tries;
};

/* Whether to run the call again after it returned rc; if so, waits first (see above). */
static bool api_wait_again(struct nessie_ctx *ctx, struct api_wait *w, int rc)
{
    struct nessie_node *nd = ctx->node;
    if (rc != NESSIE_FABRIC_ERROR || nd->cfg.view_wait_ms == 0 ||
        mship_self_out(&nd->view))
        return false;
    uint64_t now = nessie_mono_ns();
    if (w->until_ns == 0) {
        /* The fabric's bound on top: a fencing view is acted on that much later (membership.h). */
        w->until_ns = now + (uint64_t)nd->cfg.view_wait_ms * 1000000ULL + nd->bound.fabric_ns;
        CTR_ADD(ctx->ctr.view_waits, 1);
    } else if (now >= w->until_ns) {
        return false;
    }
    uint64_t epoch = mship_epoch(&nd->view);
    if (epoch == w->epoch) {
        uint64_t pause_ms = w->tries < 6 ? 1ULL << w->tries : API_WAIT_BACKOFF_MAX_MS;
        if (pause_ms > API_WAIT_BACKOFF_MAX_MS)
            pause_ms = API_WAIT_BACKOFF_MAX_MS;
        uint64_t pause = pause_ms * 1000000ULL;
        uint64_t end = now + pause < w->until_ns ? now + pause : w->until_ns;
        w->tries++;
        while (nessie_mono_ns() < end && mship_epoch(&nd->view) == epoch) {
            struct timespec ts = {0, 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    w->epoch = mship_epoch(&nd->view);
    return true;
}

/* A call's plan and run, again while api_wait_again says so. */
#define API_RUN(ctx, key, key_len, kp, run)                                     \
    do {                                                                        \
        struct api_wait w_ = {0};                                               \
        int rc_;                                                                \
        do {                                                                    \
            if ((rc_ = api_plan((ctx), (key), (key_len), &(kp))) != NESSIE_OK)  \
                return rc_;                                                     \
            if (w_.until_ns == 0)                                               \
                w_.epoch = mship_epoch(&(ctx)->node->view);                     \
            rc_ = (run);                                                        \
        } while (api_wait_again((ctx), &w_, rc_));                              \
        return rc_;                                                             \
    } while (0)

int nessie_get(struct nessie_ctx *ctx, const void *key, size_t key_len, struct nessie_item *out)
{
    return nessie_get_into(ctx, key, key_len, NULL, 0, out);
}

int nessie_get_into(struct nessie_ctx *ctx, const void *key, size_t key_len, void *buf,
                    size_t cap, struct nessie_item *out)
{
    if (!out || (cap && !buf))
        return NESSIE_INVALID;
    struct key_plan kp;
    API_RUN(ctx, key, key_len, kp, mode_get(ctx, &kp, buf, cap, out));
}

int nessie_get_multi(struct nessie_ctx *ctx, size_t n, const void *const *keys,
                     const size_t *lens, nessie_multi_fn done, void *user)
{
    return nessie_get_multi_into(ctx, n, keys, lens, NULL, NULL, done, user);
}

/* A multi-get's keys that could not reach a node, kept back from the caller's done to be read
 * again one by one, waiting for a view (api_wait_again). */
struct api_multi {
    nessie_multi_fn done;
    void *user;
    size_t *failed;
    size_t nfailed;
};

static void api_multi_done(void *arg, size_t i, int status, const struct nessie_item *it)
{
    struct api_multi *m = arg;
    if (status == NESSIE_FABRIC_ERROR && m->failed) {
        m->failed[m->nfailed++] = i;
        return;
    }
    m->done(m->user, i, status, it);
}

int nessie_get_multi_into(struct nessie_ctx *ctx, size_t n, const void *const *keys,
                          const size_t *lens, void *const *bufs, const size_t *caps,
                          nessie_multi_fn done, void *user)
{
    if (!ctx || !done || (n && (!keys || !lens)) || (!bufs != !caps))
        return NESSIE_INVALID;
    if (mship_self_out(&ctx->node->view))
        return NESSIE_FABRIC_ERROR; /* out of the view: api_plan */
    if (ctx->node->cfg.view_wait_ms == 0 || n == 0)
        /* Each key is checked and planned on its own: a bad one is answered through done. */
        return mode_get_multi(ctx, n, keys, lens, bufs, caps, done, user);
    /* The usual multi-get (the daemons' batches are at most 64 keys) keeps its list on the
     * stack: an allocation per get was a measurable part of a small get's cost. */
    size_t failed_stack[64];
    struct api_multi m = {.done = done, .user = user,
                          .failed = n <= 64 ? failed_stack : malloc(n * sizeof(size_t))};
    int rc = mode_get_multi(ctx, n, keys, lens, bufs, caps, m.failed ? api_multi_done : done,
                            m.failed ? (void *)&m : user);
    for (size_t j = 0; j < m.nfailed; j++) {
        size_t i = m.failed[j];
        struct nessie_item it;
        void *buf = bufs ? bufs[i] : NULL;
        int st = nessie_get_into(ctx, keys[i], lens[i], buf, buf ? caps[i] : 0, &it);
        done(user, i, st, st == NESSIE_OK ? &it : NULL);
    }
    if (m.failed != failed_stack)
        free(m.failed);
    return rc;
}

int nessie_store(struct nessie_ctx *ctx, enum nessie_store_mode mode, const void *key,
                 size_t key_len, const void *value, size_t value_len, uint32_t flags,
                 int64_t exptime, uint64_t cas, uint64_t *version_out)
{
    /* Only NESSIE_CAS reads cas here (nessie_store_meta's append and prepend compare one). */
    return nessie_store_meta(ctx, mode, key, key_len, value, value_len, flags, exptime,
                             mode == NESSIE_CAS ? cas : 0, 0, version_out);
}

int nessie_store_meta(struct nessie_ctx *ctx, enum nessie_store_mode mode, const void *key,
                      size_t key_len, const void *value, size_t value_len, uint32_t flags,
                      int64_t exptime, uint64_t cas, uint32_t meta, uint64_t *version_out)
{
    if ((unsigned)mode > NESSIE_PREPEND || (!value && value_len) || (meta & ~NESSIE_META_MASK) ||
        ((meta & NESSIE_META_STALE) && mode != NESSIE_CAS))
        return NESSIE_INVALID;
    struct key_plan kp;
    API_RUN(ctx, key, key_len, kp,
            mc_item_size((uint32_t)key_len, value_len, flags) > ctx->node->cfg.max_item_size
                ? NESSIE_TOO_BIG
                : mode_store(ctx, &kp, mode, value, value_len, flags, exptime, cas, meta,
                             version_out));
}

int nessie_invalidate(struct nessie_ctx *ctx, const void *key, size_t key_len, uint64_t cas,
                      bool set_exptime, int64_t exptime)
{
    struct key_plan kp;
    API_RUN(ctx, key, key_len, kp, mode_invalidate(ctx, &kp, cas, set_exptime, exptime));
}

int nessie_token_take(struct nessie_ctx *ctx, const void *key, size_t key_len, uint64_t version)
{
    if (version == 0)
        return NESSIE_INVALID; /* no item has version 0 */
    struct key_plan kp;
    API_RUN(ctx, key, key_len, kp, mode_token(ctx, &kp, version));
}

int nessie_delete(struct nessie_ctx *ctx, const void *key, size_t key_len)
{
    return nessie_delete_cas(ctx, key, key_len, 0);
}

int nessie_delete_cas(struct nessie_ctx *ctx, const void *key, size_t key_len, uint64_t cas)
{
    struct key_plan kp;
    API_RUN(ctx, key, key_len, kp, mode_delete(ctx, &kp, cas));
}

int nessie_arith(struct nessie_ctx *ctx, const void *key, size_t key_len, bool incr,
                 uint64_t delta, uint64_t *result, uint64_t *version_out)
{
    return nessie_arith_cas(ctx, key, key_len, incr, delta, 0, result, version_out);
}

int nessie_arith_cas(struct nessie_ctx *ctx, const void *key, size_t key_len, bool incr,
                     uint64_t delta, uint64_t cas, uint64_t *result, uint64_t *version_out)
{
    struct key_plan kp;
    API_RUN(ctx, key, key_len, kp, mode_arith(ctx, &kp, incr, delta, cas, result, version_out));
}

int nessie_touch(struct nessie_ctx *ctx, const void *key, size_t key_len, int64_t exptime)
{
    struct key_plan kp;
    API_RUN(ctx, key, key_len, kp, mode_touch(ctx, &kp, exptime));
}
