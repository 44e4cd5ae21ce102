/*
 * api.c - the engine's public calls on keys (nessie.h): each checks its arguments (bad input is
 * refused here and changes nothing), works out its key's plan once (memory/keys.h), and hands
 * the call to the dispatch (modes/dispatch.c), which decides who carries it out.
 */
#include "front.h"

/* The checks every call on one key starts with, and its plan: NESSIE_OK with *kp worked out, or
 * NESSIE_INVALID (no context) or NESSIE_BAD_KEY, having touched nothing. */
static int api_plan(struct nessie_ctx *ctx, const void *key, size_t key_len, struct key_plan *kp)
{
    if (!ctx)
        return NESSIE_INVALID;
    if (key_check(key, key_len) != NESSIE_OK)
        return NESSIE_BAD_KEY;
    /* This node lost from the view (issue 28): its peers no longer read its memory, so it must
     * not serve from it either; it is out until it rejoins. */
    if (mship_fenced(&ctx->node->view, ctx->node->cfg.self))
        return NESSIE_FABRIC_ERROR;
    key_plan_make(kp, ctx->node, key, key_len);
    return NESSIE_OK;
}

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
    int rc = api_plan(ctx, key, key_len, &kp);
    return rc != NESSIE_OK ? rc : mode_get(ctx, &kp, buf, cap, out);
}

int nessie_get_multi(struct nessie_ctx *ctx, size_t n, const void *const *keys,
                     const size_t *lens, nessie_multi_fn done, void *user)
{
    return nessie_get_multi_into(ctx, n, keys, lens, NULL, NULL, done, user);
}

int nessie_get_multi_into(struct nessie_ctx *ctx, size_t n, const void *const *keys,
                          const size_t *lens, void *const *bufs, const size_t *caps,
                          nessie_multi_fn done, void *user)
{
    if (!ctx || !done || (n && (!keys || !lens)) || (!bufs != !caps))
        return NESSIE_INVALID;
    if (mship_fenced(&ctx->node->view, ctx->node->cfg.self))
        return NESSIE_FABRIC_ERROR; /* out of the view: api_plan */
    /* Each key is checked and planned on its own: a bad one is answered through done. */
    return mode_get_multi(ctx, n, keys, lens, bufs, caps, done, user);
}

int nessie_store(struct nessie_ctx *ctx, enum nessie_store_mode mode, const void *key,
                 size_t key_len, const void *value, size_t value_len, uint32_t flags,
                 int64_t exptime, uint64_t cas, uint64_t *version_out)
{
    if ((unsigned)mode > NESSIE_PREPEND || (!value && value_len))
        return NESSIE_INVALID;
    struct key_plan kp;
    int rc = api_plan(ctx, key, key_len, &kp);
    if (rc != NESSIE_OK)
        return rc;
    if (mc_item_size((uint32_t)key_len, value_len, flags) > ctx->node->cfg.max_item_size)
        return NESSIE_TOO_BIG;
    return mode_store(ctx, &kp, mode, value, value_len, flags, exptime, cas, version_out);
}

int nessie_delete(struct nessie_ctx *ctx, const void *key, size_t key_len)
{
    struct key_plan kp;
    int rc = api_plan(ctx, key, key_len, &kp);
    return rc != NESSIE_OK ? rc : mode_delete(ctx, &kp);
}

int nessie_arith(struct nessie_ctx *ctx, const void *key, size_t key_len, bool incr,
                 uint64_t delta, uint64_t *result, uint64_t *version_out)
{
    struct key_plan kp;
    int rc = api_plan(ctx, key, key_len, &kp);
    return rc != NESSIE_OK ? rc : mode_arith(ctx, &kp, incr, delta, result, version_out);
}

int nessie_touch(struct nessie_ctx *ctx, const void *key, size_t key_len, int64_t exptime)
{
    struct key_plan kp;
    int rc = api_plan(ctx, key, key_len, &kp);
    return rc != NESSIE_OK ? rc : mode_touch(ctx, &kp, exptime);
}
