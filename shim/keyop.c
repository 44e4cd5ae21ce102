/*
 * keyop.c - the calls on one key that carry no value: memcached_delete, memcached_exist and
 * memcached_touch, and their _by_key forms. One path serves the three (serve_key_op); a DELETE
 * is queued like a SET when the handle buffers writes.
 *
 * May call: common.h, the core (shim.h) and the channel (channel.h); no other family.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include <libmemcached/memcached.h>

#include "channel.h"
#include "common.h"
#include "shim.h"

enum key_op { K_DELETE, K_EXIST, K_TOUCH };

static memcached_return_t serve_key_op(memcached_st *ptr, enum key_op op, const char *key,
                                       size_t klen, time_t exp)
{
    if (!ptr)
        return MEMCACHED_INVALID_ARGUMENTS;
    char k[SHIM_KEY_MAX];
    size_t kl;
    memcached_return_t rc = shim_full_key(ptr, key, klen, k, &kl);
    if (rc != MEMCACHED_SUCCESS)
        return rc;
    if (op == K_DELETE && shim_buffering(ptr))
        return shim_queue_write(ptr, true, k, kl, NULL, 0, 0, 0);
    shim_drain_writes(ptr);
    struct shim_ch *ch = shim_channel();
    if (!ch)
        return MEMCACHED_CONNECTION_FAILURE;
    int w;
    if (op == K_DELETE) {
        w = shim_ch_delete(ch, k, kl);
    } else if (op == K_TOUCH) {
        w = shim_ch_touch(ch, k, kl, shim_exptime_of(ptr, exp));
    } else {
        struct shim_value v;
        w = shim_ch_get(ch, k, kl, NULL, &v);
        if (w == WIRE_OK)
            free(v.data);
    }
    rc = shim_status(w);
    if (op != K_EXIST && shim_noreply(ptr) && shim_server_answer(rc))
        rc = MEMCACHED_SUCCESS;
    return rc;
}

memcached_return_t memcached_delete(memcached_st *ptr, const char *key, size_t key_length,
                                    time_t expiration)
{
    NOT_SERVED_KEY(memcached_delete, ptr, key, key_length, ptr, key, key_length, expiration);
    return serve_key_op(ptr, K_DELETE, key, key_length, expiration);
}

memcached_return_t memcached_delete_by_key(memcached_st *ptr, const char *group_key,
                                           size_t group_key_length, const char *key,
                                           size_t key_length, time_t expiration)
{
    NOT_SERVED_KEY(memcached_delete_by_key, ptr, key, key_length, ptr, group_key,
                   group_key_length, key, key_length, expiration);
    return serve_key_op(ptr, K_DELETE, key, key_length, expiration);
}

/* The library does not check the key of exist: memcached rejects a long one, which it reports
 * as CLIENT_ERROR in ascii and (binary) as an unknown read failure. */
static bool exist_long_key(memcached_st *ptr, const char *key, size_t klen)
{
    return shim_serving() && ptr && key && klen > 0 && klen + shim_ns_len(ptr) > SHIM_KEY_MAX;
}

static memcached_return_t exist_long_key_status(memcached_st *ptr)
{
    return shim_binary_mode(ptr) ? MEMCACHED_UNKNOWN_READ_FAILURE : MEMCACHED_CLIENT_ERROR;
}

memcached_return_t memcached_exist(memcached_st *memc, const char *key, size_t key_length)
{
    if (exist_long_key(memc, key, key_length))
        return exist_long_key_status(memc);
    NOT_SERVED_KEY(memcached_exist, memc, key, key_length, memc, key, key_length);
    return serve_key_op(memc, K_EXIST, key, key_length, 0);
}

memcached_return_t memcached_exist_by_key(memcached_st *memc, const char *group_key,
                                          size_t group_key_length, const char *key,
                                          size_t key_length)
{
    if (exist_long_key(memc, key, key_length))
        return exist_long_key_status(memc);
    NOT_SERVED_KEY(memcached_exist_by_key, memc, key, key_length, memc, group_key,
                   group_key_length, key, key_length);
    return serve_key_op(memc, K_EXIST, key, key_length, 0);
}

memcached_return_t memcached_touch(memcached_st *ptr, const char *key, size_t key_length,
                                   time_t expiration)
{
    NOT_SERVED_KEY(memcached_touch, ptr, key, key_length, ptr, key, key_length, expiration);
    return serve_key_op(ptr, K_TOUCH, key, key_length, expiration);
}

memcached_return_t memcached_touch_by_key(memcached_st *ptr, const char *group_key,
                                          size_t group_key_length, const char *key,
                                          size_t key_length, time_t expiration)
{
    NOT_SERVED_KEY(memcached_touch_by_key, ptr, key, key_length, ptr, group_key,
                   group_key_length, key, key_length, expiration);
    return serve_key_op(ptr, K_TOUCH, key, key_length, expiration);
}
