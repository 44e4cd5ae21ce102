/*
 * storage.c - the storage calls: memcached_set, add, replace, append, prepend and cas, and their
 * _by_key forms (the group key only picks a server, and every server is this node: ignored).
 * A value is sealed first when the handle encrypts, queued when it buffers writes (SET only, as
 * the library), and the outcome is memcached's in the handle's protocol.
 *
 * May call: common.h, the core (shim.h) and the channel (channel.h); no other family.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <libmemcached/memcached.h>

#include "channel.h"
#include "common.h"
#include "shim.h"

/* Storage outcomes: memcached's binary protocol answers add on a present key with "exists" and
 * replace on a missing one with "not found", where ascii says NOT_STORED to both. */
static memcached_return_t store_status(int rc, enum wire_store_mode m, bool binary)
{
    if (rc == WIRE_NOT_STORED && binary && m == WIRE_ADD)
        return MEMCACHED_DATA_EXISTS;
    if (rc == WIRE_NOT_STORED && binary && m == WIRE_REPLACE)
        return MEMCACHED_NOTFOUND;
    return shim_status(rc);
}

static memcached_return_t serve_store(memcached_st *ptr, enum wire_store_mode mode,
                                      const char *key, size_t klen, const char *value,
                                      size_t vlen, time_t exp, uint32_t flags, uint64_t cas)
{
    if (!ptr)
        return MEMCACHED_INVALID_ARGUMENTS;
    char k[SHIM_KEY_MAX];
    size_t kl;
    memcached_return_t rc = shim_full_key(ptr, key, klen, k, &kl);
    if (rc != MEMCACHED_SUCCESS)
        return rc;
    if (!value && vlen)
        return MEMCACHED_INVALID_ARGUMENTS;
    hashkit_st *kit = shim_cipher_of(ptr);
    if (kit && (mode == WIRE_APPEND || mode == WIRE_PREPEND))
        return MEMCACHED_NOT_SUPPORTED; /* the library's answer: ciphertexts do not concatenate */
    bool queue = mode == WIRE_SET && shim_buffering(ptr);
    struct shim_ch *ch = NULL;
    if (!queue) {
        shim_drain_writes(ptr);
        if (!(ch = shim_channel()))
            return MEMCACHED_CONNECTION_FAILURE;
    }
    hashkit_string_st *sealed = NULL;
    if (kit) {
        if (!(sealed = REAL(hashkit_encrypt)(kit, value ? value : "", vlen)))
            return MEMCACHED_FAILURE;
        value = REAL(hashkit_string_c_str)(sealed);
        vlen = REAL(hashkit_string_length)(sealed);
    }
    memcached_return_t ret;
    if (queue) {
        ret = shim_queue_write(ptr, false, k, kl, value, vlen, flags, shim_exptime_of(ptr, exp));
    } else {
        int w = shim_ch_store(ch, mode, k, kl, value ? value : "", vlen, flags,
                              shim_exptime_of(ptr, exp), cas, NULL);
        ret = store_status(w, mode, shim_binary_mode(ptr));
        if (shim_noreply(ptr) && shim_server_answer(ret))
            ret = MEMCACHED_SUCCESS;
    }
    if (sealed)
        REAL(hashkit_string_free)(sealed);
    return ret;
}

#define STORE_FN(name, mode)                                                                  \
    memcached_return_t name(memcached_st *ptr, const char *key, size_t key_length,            \
                            const char *value, size_t value_length, time_t expiration,        \
                            uint32_t flags)                                                   \
    {                                                                                         \
        NOT_SERVED_KEY(name, ptr, key, key_length, ptr, key, key_length, value, value_length, \
                       expiration, flags);                                                    \
        return serve_store(ptr, mode, key, key_length, value, value_length, expiration,       \
                           flags, 0);                                                         \
    }                                                                                         \
    memcached_return_t name##_by_key(memcached_st *ptr, const char *group_key,                \
                                     size_t group_key_length, const char *key,                \
                                     size_t key_length, const char *value,                    \
                                     size_t value_length, time_t expiration, uint32_t flags)  \
    {                                                                                         \
        NOT_SERVED_KEY(name##_by_key, ptr, key, key_length, ptr, group_key, group_key_length, \
                       key, key_length, value, value_length, expiration, flags);              \
        return serve_store(ptr, mode, key, key_length, value, value_length, expiration,       \
                           flags, 0);                                                         \
    }

STORE_FN(memcached_set, WIRE_SET)
STORE_FN(memcached_add, WIRE_ADD)
STORE_FN(memcached_replace, WIRE_REPLACE)
STORE_FN(memcached_append, WIRE_APPEND)
STORE_FN(memcached_prepend, WIRE_PREPEND)

memcached_return_t memcached_cas(memcached_st *ptr, const char *key, size_t key_length,
                                 const char *value, size_t value_length, time_t expiration,
                                 uint32_t flags, uint64_t cas)
{
    NOT_SERVED_KEY(memcached_cas, ptr, key, key_length, ptr, key, key_length, value, value_length,
                   expiration, flags, cas);
    return serve_store(ptr, WIRE_CAS, key, key_length, value, value_length, expiration, flags,
                       cas);
}

memcached_return_t memcached_cas_by_key(memcached_st *ptr, const char *group_key,
                                        size_t group_key_length, const char *key,
                                        size_t key_length, const char *value,
                                        size_t value_length, time_t expiration, uint32_t flags,
                                        uint64_t cas)
{
    NOT_SERVED_KEY(memcached_cas_by_key, ptr, key, key_length, ptr, group_key, group_key_length,
                   key, key_length, value, value_length, expiration, flags, cas);
    return serve_store(ptr, WIRE_CAS, key, key_length, value, value_length, expiration, flags,
                       cas);
}
