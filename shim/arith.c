/*
 * arith.c - the arithmetic calls: memcached_increment and memcached_decrement, their _by_key
 * forms, and the _with_initial forms (binary protocol only, as the library), which create a
 * missing key with its initial value.
 *
 * May call: common.h, the core (shim.h) and the channel (channel.h); no other family.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <libmemcached/memcached.h>

#include "channel.h"
#include "common.h"
#include "shim.h"

static memcached_return_t arith_reply(memcached_st *ptr, bool incr, const char *key, size_t klen,
                                      uint64_t delta, bool with_initial, uint64_t initial,
                                      time_t exp, uint64_t *value);

static memcached_return_t serve_arith(memcached_st *ptr, bool incr, const char *key, size_t klen,
                                      uint64_t delta, bool with_initial, uint64_t initial,
                                      time_t exp, uint64_t *value)
{
    memcached_return_t rc = arith_reply(ptr, incr, key, klen, delta, with_initial, initial, exp,
                                        value);
    if (ptr && shim_noreply(ptr) && shim_server_answer(rc)) {
        if (value)
            *value = UINT64_MAX;
        rc = MEMCACHED_SUCCESS;
    }
    return rc;
}

static memcached_return_t arith_reply(memcached_st *ptr, bool incr, const char *key, size_t klen,
                                      uint64_t delta, bool with_initial, uint64_t initial,
                                      time_t exp, uint64_t *value)
{
    if (!ptr)
        return MEMCACHED_INVALID_ARGUMENTS;
    char k[SHIM_KEY_MAX];
    size_t kl;
    memcached_return_t rc = shim_full_key(ptr, key, klen, k, &kl);
    if (rc != MEMCACHED_SUCCESS)
        return rc;
    if (with_initial && !shim_binary_mode(ptr)) {
        /* The library offers *_with_initial in binary mode only; in ascii it answers
         * INVALID_ARGUMENTS and sets the value to all ones (measured). */
        if (value)
            *value = UINT64_MAX;
        return MEMCACHED_INVALID_ARGUMENTS;
    }
    shim_drain_writes(ptr);
    struct shim_ch *ch = shim_channel();
    if (!ch)
        return MEMCACHED_CONNECTION_FAILURE;
    for (;;) {
        uint64_t r = 0;
        int w = shim_ch_arith(ch, k, kl, incr, delta, &r);
        if (w == WIRE_OK) {
            if (value)
                *value = r;
            return MEMCACHED_SUCCESS;
        }
        /* libmemcached reads memcached's binary "non-numeric value" answer as an unknown read
         * failure (measured against memcached 1.6.18); ascii gives CLIENT_ERROR. */
        if (w == WIRE_NON_NUMERIC && shim_binary_mode(ptr))
            return MEMCACHED_UNKNOWN_READ_FAILURE;
        if (w != WIRE_NOT_FOUND || !with_initial || (uint32_t)exp == MEMCACHED_EXPIRATION_NOT_ADD)
            return shim_status(w);
        /* Missing: create it with the initial value, unless someone else just did. */
        char num[24];
        int len = snprintf(num, sizeof(num), "%llu", (unsigned long long)initial);
        w = shim_ch_store(ch, WIRE_ADD, k, kl, num, (size_t)len, 0, shim_exptime_of(ptr, exp), 0,
                          NULL);
        if (w == WIRE_OK) {
            if (value)
                *value = initial;
            return MEMCACHED_SUCCESS;
        }
        if (w != WIRE_NOT_STORED)
            return shim_status(w);
    }
}

/*
 * A key with a NUL byte, sent in ascii: memcached's line ends at the NUL (it tokenizes with
 * strlen), so "incr <key> <delta>" loses its delta and memcached answers ERROR, which the library
 * returns as MEMCACHED_ERROR (pylibmc's SocketCreateError); the connection stays in step, one
 * line for one. The shim gives memcached's answer, not BAD_KEY_PROVIDED (measured with memcached
 * 1.6.18 and libmemcached 1.1.4; tests/clients/pylibmc_scenario.py, "incr NUL key").
 */
#define NUL_KEY_ERROR(ptr, key, klen)                                                            \
    do {                                                                                         \
        if (shim_serving() && (key) && (klen) > 0 && memchr((key), '\0', (klen)) &&             \
            shim_key_refused_here((ptr), (key), (klen)))                                         \
            return MEMCACHED_ERROR;                                                              \
    } while (0)

memcached_return_t memcached_increment(memcached_st *ptr, const char *key, size_t key_length,
                                       uint32_t offset, uint64_t *value)
{
    NUL_KEY_ERROR(ptr, key, key_length);
    NOT_SERVED_KEY(memcached_increment, ptr, key, key_length, ptr, key, key_length, offset, value);
    return serve_arith(ptr, true, key, key_length, offset, false, 0, 0, value);
}

memcached_return_t memcached_decrement(memcached_st *ptr, const char *key, size_t key_length,
                                       uint32_t offset, uint64_t *value)
{
    NUL_KEY_ERROR(ptr, key, key_length);
    NOT_SERVED_KEY(memcached_decrement, ptr, key, key_length, ptr, key, key_length, offset, value);
    return serve_arith(ptr, false, key, key_length, offset, false, 0, 0, value);
}

memcached_return_t memcached_increment_by_key(memcached_st *ptr, const char *group_key,
                                              size_t group_key_length, const char *key,
                                              size_t key_length, uint64_t offset,
                                              uint64_t *value)
{
    NUL_KEY_ERROR(ptr, key, key_length);
    NOT_SERVED_KEY(memcached_increment_by_key, ptr, key, key_length, ptr, group_key, group_key_length, key, key_length,
               offset, value);
    return serve_arith(ptr, true, key, key_length, offset, false, 0, 0, value);
}

memcached_return_t memcached_decrement_by_key(memcached_st *ptr, const char *group_key,
                                              size_t group_key_length, const char *key,
                                              size_t key_length, uint64_t offset,
                                              uint64_t *value)
{
    NUL_KEY_ERROR(ptr, key, key_length);
    NOT_SERVED_KEY(memcached_decrement_by_key, ptr, key, key_length, ptr, group_key, group_key_length, key, key_length,
               offset, value);
    return serve_arith(ptr, false, key, key_length, offset, false, 0, 0, value);
}

memcached_return_t memcached_increment_with_initial(memcached_st *ptr, const char *key,
                                                    size_t key_length, uint64_t offset,
                                                    uint64_t initial, time_t expiration,
                                                    uint64_t *value)
{
    NOT_SERVED_KEY(memcached_increment_with_initial, ptr, key, key_length, ptr, key, key_length, offset, initial,
               expiration, value);
    return serve_arith(ptr, true, key, key_length, offset, true, initial, expiration, value);
}

memcached_return_t memcached_decrement_with_initial(memcached_st *ptr, const char *key,
                                                    size_t key_length, uint64_t offset,
                                                    uint64_t initial, time_t expiration,
                                                    uint64_t *value)
{
    NOT_SERVED_KEY(memcached_decrement_with_initial, ptr, key, key_length, ptr, key, key_length, offset, initial,
               expiration, value);
    return serve_arith(ptr, false, key, key_length, offset, true, initial, expiration, value);
}

memcached_return_t memcached_increment_with_initial_by_key(
    memcached_st *ptr, const char *group_key, size_t group_key_length, const char *key,
    size_t key_length, uint64_t offset, uint64_t initial, time_t expiration, uint64_t *value)
{
    NOT_SERVED_KEY(memcached_increment_with_initial_by_key, ptr, key, key_length, ptr, group_key, group_key_length, key,
               key_length, offset, initial, expiration, value);
    return serve_arith(ptr, true, key, key_length, offset, true, initial, expiration, value);
}

memcached_return_t memcached_decrement_with_initial_by_key(
    memcached_st *ptr, const char *group_key, size_t group_key_length, const char *key,
    size_t key_length, uint64_t offset, uint64_t initial, time_t expiration, uint64_t *value)
{
    NOT_SERVED_KEY(memcached_decrement_with_initial_by_key, ptr, key, key_length, ptr, group_key, group_key_length, key,
               key_length, offset, initial, expiration, value);
    return serve_arith(ptr, false, key, key_length, offset, true, initial, expiration, value);
}
