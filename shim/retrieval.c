/*
 * retrieval.c - the retrieval calls: memcached_get and memcached_get_by_key; the multi-get
 * (memcached_mget, mget_by_key, mget_execute and mget_execute_by_key), whose hits wait in the
 * handle's side table (struct pending, common.h) until memcached_fetch, fetch_result or
 * fetch_execute hands them over; and the decryption of what is read when the handle encrypts.
 *
 * May call: common.h, the core (shim.h) and the channel (channel.h); no other family.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <libmemcached/memcached.h>

#include "channel.h"
#include "common.h"
#include "shim.h"

/* The cipher a value read through ptr is decrypted with: the library decrypts what the ascii
 * protocol brings, and hands over what the binary protocol brings as it came, sealed (measured
 * against memcached with libmemcached 1.1.4: tests/clients/capi_scenario.c). */
static hashkit_st *opener_of(memcached_st *ptr)
{
    return shim_binary_mode(ptr) ? NULL : shim_cipher_of(ptr);
}

/* Decrypt *value (len bytes, malloc'd, of handle ptr) in place: true with the plain value in a
 * malloc'd buffer, false if it cannot be decrypted (another key, or stored in plain by a handle
 * without one: the library's MEMCACHED_FAILURE) or memory ran out (*oom). Leaves empty values. */
static bool decrypt_value(memcached_st *ptr, void **value, size_t *len, bool *oom)
{
    hashkit_st *kit = opener_of(ptr);
    *oom = false;
    if (!kit || *len == 0)
        return true;
    hashkit_string_st *plain = REAL(hashkit_decrypt)(kit, *value, *len);
    if (!plain)
        return false;
    size_t n = REAL(hashkit_string_length)(plain);
    void *out = malloc(n + 1);
    if (out) {
        memcpy(out, REAL(hashkit_string_c_str)(plain), n);
        ((char *)out)[n] = '\0';
        free(*value);
        *value = out;
        *len = n;
    }
    REAL(hashkit_string_free)(plain);
    *oom = out == NULL;
    return out != NULL;
}

/* ---- get ------------------------------------------------------------------------------------- */

static char *serve_get(memcached_st *ptr, const char *key, size_t klen, size_t *vlen,
                       uint32_t *flags, memcached_return_t *error)
{
    shim_reconnect_due(ptr);
    memcached_return_t dummy;
    if (!error)
        error = &dummy;
    if (!ptr) {
        *error = MEMCACHED_INVALID_ARGUMENTS;
        return NULL;
    }
    char k[SHIM_KEY_MAX];
    size_t kl;
    if ((*error = shim_full_key(ptr, key, klen, k, &kl)) != MEMCACHED_SUCCESS)
        return NULL;
    shim_drain_writes(ptr);
    struct shim_ch *ch = shim_channel();
    if (!ch) {
        *error = MEMCACHED_CONNECTION_FAILURE;
        return NULL;
    }
    struct shim_value v;
    struct shim_alloc a = shim_handle_alloc(ptr);
    int rc = shim_ch_get(ch, k, kl, &a, &v);
    if (vlen)
        *vlen = 0;
    if (rc != WIRE_OK) {
        *error = rc == -ENOMEM ? MEMCACHED_MEMORY_ALLOCATION_FAILURE : shim_status(rc);
        return NULL;
    }
    if (opener_of(ptr) && v.len > 0) {
        /* Decrypted into the handle's memory, as the caller frees it with the handle's free. */
        hashkit_string_st *plain = REAL(hashkit_decrypt)(opener_of(ptr), v.data, v.len);
        shim_handle_release(ptr, v.data);
        if (!plain) {
            *error = MEMCACHED_FAILURE;
            return NULL;
        }
        v.len = REAL(hashkit_string_length)(plain);
        v.data = shim_dup_value(ptr, REAL(hashkit_string_c_str)(plain), v.len);
        REAL(hashkit_string_free)(plain);
        if (!v.data) {
            *error = MEMCACHED_MEMORY_ALLOCATION_FAILURE;
            return NULL;
        }
    }
    if (vlen)
        *vlen = v.len;
    if (flags)
        *flags = v.flags;
    *error = MEMCACHED_SUCCESS;
    if (v.len == 0) { /* empty: NULL with SUCCESS, as the library answers */
        shim_handle_release(ptr, v.data);
        return NULL;
    }
    return v.data;
}

char *memcached_get(memcached_st *ptr, const char *key, size_t key_length, size_t *value_length,
                    uint32_t *flags, memcached_return_t *error)
{
    if (!shim_serving() || !shim_key_ok(ptr, key, key_length)) {
        if (shim_refusing() && (shim_key_ok(ptr, key, key_length) ||
                                shim_key_refused_here(ptr, key, key_length))) {
            if (error)
                *error = MEMCACHED_CONNECTION_FAILURE;
            return NULL;
        }
        if (shim_serving() && shim_key_refused_here(ptr, key, key_length)) {
            if (error)
                *error = MEMCACHED_BAD_KEY_PROVIDED;
            return NULL;
        }
        return REAL(memcached_get)(ptr, key, key_length, value_length, flags, error);
    }
    return serve_get(ptr, key, key_length, value_length, flags, error);
}

char *memcached_get_by_key(memcached_st *ptr, const char *group_key, size_t group_key_length,
                           const char *key, size_t key_length, size_t *value_length,
                           uint32_t *flags, memcached_return_t *error)
{
    if (!shim_serving() || !shim_key_ok(ptr, key, key_length)) {
        if (shim_refusing() && (shim_key_ok(ptr, key, key_length) ||
                                shim_key_refused_here(ptr, key, key_length))) {
            if (error)
                *error = MEMCACHED_CONNECTION_FAILURE;
            return NULL;
        }
        if (shim_serving() && shim_key_refused_here(ptr, key, key_length)) {
            if (error)
                *error = MEMCACHED_BAD_KEY_PROVIDED;
            return NULL;
        }
        return REAL(memcached_get_by_key)(ptr, group_key, group_key_length, key, key_length,
                                          value_length, flags, error);
    }
    return serve_get(ptr, key, key_length, value_length, flags, error);
}

/* ---- multi-get: results held per handle until fetched ----------------------------------------- */

struct collect {
    memcached_st *ptr;
    struct pending *p;
    const char *const *keys; /* the caller's, without namespace */
    const size_t *klens;
    const size_t *asked;     /* asked[j]: the caller's index of the j-th key asked */
    bool oom;
};

static void on_hit(void *user, size_t index, struct shim_value *v)
{
    struct collect *c = user;
    struct pending *p = c->p;
    index = c->asked[index];
    struct pending_item *it = realloc(p->items, (p->n + 1) * sizeof(*it));
    if (!it) {
        free(v->data);
        c->oom = true;
        return;
    }
    p->items = it;
    it = &p->items[p->n++];
    memcpy(it->key, c->keys[index], c->klens[index]);
    it->key[c->klens[index]] = '\0';
    it->klen = c->klens[index];
    it->value = v->data;
    it->vlen = v->len;
    it->flags = v->flags;
    it->cas = v->version;
    bool oom;
    it->sealed = !decrypt_value(c->ptr, &it->value, &it->vlen, &oom) && !oom;
    c->oom |= oom;
    p->any_hit = true;
}

static memcached_return_t serve_mget(memcached_st *ptr, const char *const *keys,
                                     const size_t *klens, size_t n)
{
    if (!ptr || (n && (!keys || !klens)))
        return MEMCACHED_INVALID_ARGUMENTS;
    struct pending *p = shim_pending_of(ptr, true);
    if (!p)
        return MEMCACHED_MEMORY_ALLOCATION_FAILURE;
    shim_pending_clear(p);
    if (n == 0)
        return MEMCACHED_NOTFOUND;
    /* Every key is checked before anything is asked, as the library does. */
    size_t nsl = shim_ns_len(ptr);
    for (size_t i = 0; i < n; i++)
        if (!keys[i] || klens[i] == 0 || klens[i] + nsl > SHIM_KEY_MAX)
            return MEMCACHED_BAD_KEY_PROVIDED;
    shim_drain_writes(ptr);
    struct shim_ch *ch = shim_channel();
    if (!ch)
        return MEMCACHED_CONNECTION_FAILURE;
    char (*full)[SHIM_KEY_MAX] = malloc(n * SHIM_KEY_MAX);
    const void **kp = malloc(n * sizeof(*kp));
    size_t *kl = malloc(n * sizeof(*kl)), *asked = malloc(n * sizeof(*asked));
    memcached_return_t ret = MEMCACHED_SUCCESS;
    if (!full || !kp || !kl || !asked) {
        ret = MEMCACHED_MEMORY_ALLOCATION_FAILURE;
        goto out;
    }
    /* A key the ascii protocol cannot carry is a miss: memcached reads "get a b c" as three
     * keys, so a key with a space is keys that nobody stored (shim_key_refused_here). */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (shim_full_key(ptr, keys[i], klens[i], full[m], &kl[m]) != MEMCACHED_SUCCESS)
            continue;
        kp[m] = full[m];
        asked[m++] = i;
    }
    struct collect c = {.ptr = ptr, .p = p, .keys = keys, .klens = klens, .asked = asked};
    int rc = m ? shim_ch_mget(ch, kp, kl, m, on_hit, &c) : WIRE_OK;
    if (rc != WIRE_OK)
        ret = shim_status(rc);
    else if (c.oom)
        ret = MEMCACHED_MEMORY_ALLOCATION_FAILURE;
    p->active = true;
out:
    free(full);
    free(kp);
    free(kl);
    free(asked);
    return ret;
}

/* All keys acceptable (else the library refuses the call, with its message, as for one key),
 * and at least one (the library answers a multi-get of none with INVALID ARGUMENTS). Keys the
 * ascii protocol cannot carry are acceptable here: they are misses (serve_mget). */
static bool keys_ok(memcached_st *ptr, const char *const *keys, const size_t *klens, size_t n)
{
    if (!ptr || n == 0 || !keys || !klens || shim_no_servers(ptr))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!shim_key_ok(ptr, keys[i], klens[i]) &&
            !shim_key_refused_here(ptr, keys[i], klens[i]))
            return false;
    return true;
}

#define NOT_SERVED_KEYS(fn, ptr, keys, klens, n, ...)                           \
    do {                                                                        \
        if (shim_serving() && !keys_ok((ptr), (keys), (klens), (n)))            \
            return REAL(fn)(__VA_ARGS__);                                       \
        NOT_SERVED(fn, __VA_ARGS__);                                            \
    } while (0)

memcached_return_t memcached_mget(memcached_st *ptr, const char *const *keys,
                                  const size_t *key_length, size_t number_of_keys)
{
    NOT_SERVED_KEYS(memcached_mget, ptr, keys, key_length, number_of_keys, ptr, keys, key_length,
                    number_of_keys);
    NOT_SERVED(memcached_mget, ptr, keys, key_length, number_of_keys);
    return serve_mget(ptr, keys, key_length, number_of_keys);
}

memcached_return_t memcached_mget_by_key(memcached_st *ptr, const char *group_key,
                                         size_t group_key_length, const char *const *keys,
                                         const size_t *key_length, const size_t number_of_keys)
{
    NOT_SERVED_KEYS(memcached_mget_by_key, ptr, keys, key_length, number_of_keys, ptr, group_key,
                    group_key_length, keys, key_length, number_of_keys);
    NOT_SERVED(memcached_mget_by_key, ptr, group_key, group_key_length, keys, key_length,
               number_of_keys);
    return serve_mget(ptr, keys, key_length, number_of_keys);
}

/* The next fetched item of ptr's multi-get, or false at its end (*end_rc says how it ended). */
static bool pending_next(memcached_st *ptr, struct pending_item *out, memcached_return_t *end_rc)
{
    struct pending *p = shim_pending_of(ptr, false);
    if (!p || !p->active || p->next >= p->n) {
        /* END after at least one hit, NOTFOUND after none (PHP's getResultCode relies on it). */
        *end_rc = p && p->any_hit ? MEMCACHED_END : MEMCACHED_NOTFOUND;
        if (p)
            shim_pending_clear(p);
        return false;
    }
    *out = p->items[p->next++];
    return true;
}

static void fill_result(memcached_st *ptr, memcached_result_st *r, const struct pending_item *it)
{
    (void)ptr;
    REAL(memcached_result_reset)(r);
    REAL(memcached_result_set_value)(r, it->value, it->vlen);
    REAL(memcached_result_set_flags)(r, it->flags);
    memcpy(r->item_key, it->key, it->klen + 1);
    r->key_length = it->klen;
    r->item_cas = it->cas;
}

memcached_result_st *memcached_fetch_result(memcached_st *ptr, memcached_result_st *result,
                                            memcached_return_t *error)
{
    if (!shim_serving()) {
        if (shim_refusing()) {
            if (error)
                *error = MEMCACHED_CONNECTION_FAILURE;
            return NULL;
        }
        return REAL(memcached_fetch_result)(ptr, result, error);
    }
    memcached_return_t dummy;
    if (!error)
        error = &dummy;
    if (!ptr) {
        *error = MEMCACHED_INVALID_ARGUMENTS;
        return NULL;
    }
    struct pending_item it;
    if (!pending_next(ptr, &it, error)) {
        /* Measured: with a result of its own (NULL passed in) the library ends with NOTFOUND
         * even after hits; with the caller's, END after hits. */
        if (!result)
            *error = MEMCACHED_NOTFOUND;
        return NULL;
    }
    if (it.sealed) {
        free(it.value);
        *error = MEMCACHED_FAILURE; /* the library's answer when its decryption fails */
        return NULL;
    }
    memcached_result_st *r = result ? result : REAL(memcached_result_create)(ptr, NULL);
    if (!r) {
        free(it.value);
        *error = MEMCACHED_MEMORY_ALLOCATION_FAILURE;
        return NULL;
    }
    fill_result(ptr, r, &it);
    free(it.value);
    *error = MEMCACHED_SUCCESS;
    return r;
}

char *memcached_fetch(memcached_st *ptr, char *key, size_t *key_length, size_t *value_length,
                      uint32_t *flags, memcached_return_t *error)
{
    if (!shim_serving()) {
        if (shim_refusing()) {
            if (error)
                *error = MEMCACHED_CONNECTION_FAILURE;
            return NULL;
        }
        return REAL(memcached_fetch)(ptr, key, key_length, value_length, flags, error);
    }
    memcached_return_t dummy;
    if (!error)
        error = &dummy;
    struct pending_item it;
    bool got = ptr && pending_next(ptr, &it, error);
    if (!got || it.sealed) {
        if (!ptr) {
            *error = MEMCACHED_INVALID_ARGUMENTS;
        } else if (got) { /* the library's answer when its decryption fails */
            free(it.value);
            *error = MEMCACHED_FAILURE;
        }
        if (value_length)
            *value_length = 0;
        return NULL;
    }
    if (key)
        memcpy(key, it.key, it.klen + 1);
    if (key_length)
        *key_length = it.klen;
    if (value_length)
        *value_length = it.vlen;
    if (flags)
        *flags = it.flags;
    char *out = shim_dup_value(ptr, it.value, it.vlen);
    free(it.value);
    *error = out ? MEMCACHED_SUCCESS : MEMCACHED_MEMORY_ALLOCATION_FAILURE;
    return out;
}

static memcached_return_t serve_fetch_execute(memcached_st *ptr, memcached_execute_fn *callback,
                                              void *context, uint32_t ncb)
{
    if (!ptr)
        return MEMCACHED_INVALID_ARGUMENTS;
    memcached_result_st r;
    if (!REAL(memcached_result_create)(ptr, &r))
        return MEMCACHED_MEMORY_ALLOCATION_FAILURE;
    struct pending_item it;
    memcached_return_t end;
    size_t delivered = 0;
    while (pending_next(ptr, &it, &end)) {
        if (it.sealed) { /* the library's fetch loop ends at a value it cannot decrypt */
            free(it.value);
            REAL(memcached_result_free)(&r);
            return MEMCACHED_FAILURE;
        }
        fill_result(ptr, &r, &it);
        free(it.value);
        delivered++;
        for (uint32_t i = 0; i < ncb; i++)
            if (callback[i] && callback[i](ptr, &r, context) != MEMCACHED_SUCCESS)
                break; /* the library stops calling this item's callbacks likewise */
    }
    REAL(memcached_result_free)(&r);
    /* As the library: SUCCESS when it delivered something, NOTFOUND when there was nothing. */
    return delivered ? MEMCACHED_SUCCESS : MEMCACHED_NOTFOUND;
}

memcached_return_t memcached_fetch_execute(memcached_st *ptr, memcached_execute_fn *callback,
                                           void *context, uint32_t number_of_callbacks)
{
    NOT_SERVED(memcached_fetch_execute, ptr, callback, context, number_of_callbacks);
    return serve_fetch_execute(ptr, callback, context, number_of_callbacks);
}

memcached_return_t memcached_mget_execute(memcached_st *ptr, const char *const *keys,
                                          const size_t *key_length, const size_t number_of_keys,
                                          memcached_execute_fn *callback, void *context,
                                          const uint32_t number_of_callbacks)
{
    NOT_SERVED(memcached_mget_execute, ptr, keys, key_length, number_of_keys, callback, context,
               number_of_callbacks);
    if (!keys_ok(ptr, keys, key_length, number_of_keys)) /* the library's answer */
        return REAL(memcached_mget_execute)(ptr, keys, key_length, number_of_keys, callback,
                                            context, number_of_callbacks);
    /* The library only issues the multi-get here (binary protocol only); the callbacks run in a
     * later memcached_fetch_execute. */
    if (!shim_binary_mode(ptr))
        return MEMCACHED_NOT_SUPPORTED;
    return serve_mget(ptr, keys, key_length, number_of_keys);
}

memcached_return_t memcached_mget_execute_by_key(memcached_st *ptr, const char *group_key,
                                                 size_t group_key_length,
                                                 const char *const *keys,
                                                 const size_t *key_length,
                                                 size_t number_of_keys,
                                                 memcached_execute_fn *callback, void *context,
                                                 const uint32_t number_of_callbacks)
{
    NOT_SERVED(memcached_mget_execute_by_key, ptr, group_key, group_key_length, keys, key_length,
               number_of_keys, callback, context, number_of_callbacks);
    if (!keys_ok(ptr, keys, key_length, number_of_keys))
        return REAL(memcached_mget_execute_by_key)(ptr, group_key, group_key_length, keys,
                                                   key_length, number_of_keys, callback, context,
                                                   number_of_callbacks);
    if (!shim_binary_mode(ptr))
        return MEMCACHED_NOT_SUPPORTED;
    return serve_mget(ptr, keys, key_length, number_of_keys);
}
