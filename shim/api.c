/*
 * api.c - the interposed libmemcached functions (see deception.c for the serving decision).
 *
 * Each function: if the process does not serve, forward to the real one (or fail, strict); else
 * check the key as libmemcached does (1..250 bytes with the namespace prefix, which we add as the
 * library would), run the request on this thread's channel, and map the outcome to the
 * memcached_return_t the real library gives against memcached in the handle's protocol mode.
 * Values returned to the caller are allocated with the handle's allocators, NUL-terminated.
 */
#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libmemcached/memcached.h>

#include "channel.h"
#include "shim.h"

/* ---- keys, modes, outcomes -------------------------------------------------------------------- */

static bool binary_mode(memcached_st *ptr)
{
    return REAL(memcached_behavior_get)(ptr, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL) != 0;
}

/*
 * Key bytes the ascii protocol cannot carry: a key is a token of a command line, so a space or a
 * control character splits or ends it. libmemcached sends such a key anyway unless
 * MEMCACHED_BEHAVIOR_VERIFY_KEY is set, and against memcached the call then fails with the
 * connection out of step (ERROR, UNKNOWN READ FAILURE, a SUCCESS with no value, the next calls
 * failing too), or an assertion aborts the program (a space or NUL; measured with Debian's
 * libmemcached 1.1.4 and memcached 1.6.18). The shim never stores such a key in ascii mode: it
 * answers BAD_KEY_PROVIDED, as the library does with VERIFY_KEY, which also refuses bytes past
 * 0x7e (isgraph). The binary protocol carries any byte, so memcached stores them all there.
 */
static bool ascii_unsafe(const char *key, size_t klen, bool verify)
{
    for (size_t i = 0; i < klen; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c <= 0x20 || c == 0x7f || (verify && c > 0x7e))
            return true;
    }
    return false;
}

static bool no_servers(memcached_st *ptr);

/* A key the shim refuses itself: one the library would send to the server, where it breaks
 * the connection (above). With VERIFY_KEY the library refuses these keys itself. */
static bool key_refused_here(memcached_st *ptr, const char *key, size_t klen)
{
    return ptr && key && klen > 0 && !no_servers(ptr) && !binary_mode(ptr) &&
           !REAL(memcached_behavior_get)(ptr, MEMCACHED_BEHAVIOR_VERIFY_KEY) &&
           ascii_unsafe(key, klen, false);
}

/* The key the server sees: namespace + key. Returns MEMCACHED_SUCCESS, or BAD_KEY_PROVIDED for
 * an empty key, one too long with its prefix, or (ascii) one the protocol cannot carry. */
memcached_return_t shim_full_key(memcached_st *ptr, const char *key, size_t klen, char *out,
                                   size_t *outlen)
{
    if (!key || klen == 0)
        return MEMCACHED_BAD_KEY_PROVIDED;
    if (!binary_mode(ptr) &&
        ascii_unsafe(key, klen, REAL(memcached_behavior_get)(ptr, MEMCACHED_BEHAVIOR_VERIFY_KEY)))
        return MEMCACHED_BAD_KEY_PROVIDED;
    memcached_return_t rc;
    const char *ns = REAL(memcached_callback_get)(ptr, MEMCACHED_CALLBACK_NAMESPACE, &rc);
    size_t nslen = ns ? strlen(ns) : 0;
    if (nslen + klen > SHIM_KEY_MAX)
        return MEMCACHED_BAD_KEY_PROVIDED;
    memcpy(out, ns, nslen);
    memcpy(out + nslen, key, klen);
    *outlen = nslen + klen;
    return MEMCACHED_SUCCESS;
}

static size_t ns_len(memcached_st *ptr)
{
    memcached_return_t rc;
    const char *ns = REAL(memcached_callback_get)(ptr, MEMCACHED_CALLBACK_NAMESPACE, &rc);
    return ns ? strlen(ns) : 0;
}

/* A channel error (negative) or a daemon-side failure. */
static memcached_return_t transport(int rc)
{
    if (rc < 0)
        shim_channel_failed();
    return MEMCACHED_CONNECTION_FAILURE;
}

memcached_return_t shim_status(int rc)
{
    switch (rc) {
    case WIRE_OK: return MEMCACHED_SUCCESS;
    case WIRE_NOT_FOUND: return MEMCACHED_NOTFOUND;
    case WIRE_NOT_STORED: return MEMCACHED_NOTSTORED;
    case WIRE_EXISTS: return MEMCACHED_DATA_EXISTS;
    case WIRE_NON_NUMERIC: return MEMCACHED_CLIENT_ERROR;
    case WIRE_TOO_BIG: return MEMCACHED_E2BIG;
    case WIRE_NO_MEMORY:
    case WIRE_INDEX_FULL: return MEMCACHED_SERVER_MEMORY_ALLOCATION_FAILURE;
    /* Unknown outcome: the call may have taken effect, or may still (nessie.h). A memcached
     * client reads MEMCACHED_TIMEOUT the same way. */
    case WIRE_TIMEOUT: return MEMCACHED_TIMEOUT;
    case WIRE_BAD_KEY: return MEMCACHED_BAD_KEY_PROVIDED;
    /* A node the call needed is unreachable, and the call had no effect: what libmemcached
     * answers for a server it did not send the request to, being in its retry timeout. */
    case WIRE_FABRIC_ERROR: return MEMCACHED_SERVER_TEMPORARILY_DISABLED;
    default: return transport(rc);
    }
}

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

/* An expiration as memcached receives it: the binary protocol carries 32 unsigned bits (so -1
 * arrives as a time in 2106); the ascii line is read as a 32-bit signed number, so anything that
 * does not fit (a negative time_t sent as unsigned, say) means "already expired". */
static int64_t exptime_of(memcached_st *ptr, time_t exp)
{
    if (binary_mode(ptr))
        return (int64_t)(uint32_t)exp;
    int64_t e = (int64_t)exp;
    if (e < 0 || e > INT32_MAX)
        return -1;
    return e;
}

/* MEMCACHED_BEHAVIOR_NOREPLY: the library sends writes with "noreply" (binary: their quiet
 * opcodes) and answers SUCCESS without waiting for the server, whatever the server would have
 * said (an incr's value then reads all ones); only its own refusals and a dead connection show.
 * Measured against memcached, libmemcached 1.1.4. */
static bool noreply(memcached_st *ptr)
{
    return REAL(memcached_behavior_get)(ptr, MEMCACHED_BEHAVIOR_NOREPLY) != 0;
}

/* Whether rc is the server's answer (which NOREPLY hides), not the library's own refusal or a
 * failure to talk to the server at all. */
static bool server_answer(memcached_return_t rc)
{
    return rc != MEMCACHED_INVALID_ARGUMENTS && rc != MEMCACHED_BAD_KEY_PROVIDED &&
           rc != MEMCACHED_CONNECTION_FAILURE && rc != MEMCACHED_MEMORY_ALLOCATION_FAILURE &&
           rc != MEMCACHED_NOT_SUPPORTED && rc != MEMCACHED_NO_SERVERS;
}

/* The handle's malloc and free, and their context. */
static void allocators(memcached_st *ptr, memcached_malloc_fn *m, memcached_free_fn *f,
                       void **ctx)
{
    memcached_realloc_fn r;
    memcached_calloc_fn c;
    REAL(memcached_get_memory_allocators)(ptr, m, f, &r, &c);
    *ctx = REAL(memcached_get_memory_allocators_context)(ptr);
}

/* The handle's allocators as a struct shim_alloc: a value read lands once, in their memory. */
static void *handle_alloc(void *user, size_t n)
{
    memcached_malloc_fn m;
    memcached_free_fn f;
    void *ctx;
    allocators(user, &m, &f, &ctx);
    return m(user, n, ctx);
}

static void handle_release(void *user, void *p)
{
    memcached_malloc_fn m;
    memcached_free_fn f;
    void *ctx;
    allocators(user, &m, &f, &ctx);
    f(user, p, ctx);
}

struct shim_alloc shim_handle_alloc(memcached_st *ptr)
{
    return (struct shim_alloc){.alloc = handle_alloc, .release = handle_release, .user = ptr};
}

char *shim_dup_value(memcached_st *ptr, const void *v, size_t len)
{
    char *out = handle_alloc(ptr, len + 1);
    if (!out)
        return NULL;
    if (len)
        memcpy(out, v, len);
    out[len] = '\0';
    return out;
}

/* A handle without servers: the library answers every call on it itself (NO SERVERS DEFINED),
 * before anything else and without talking to anyone, as it does against memcached. */
static bool no_servers(memcached_st *ptr)
{
    return ptr && REAL(memcached_server_count)(ptr) == 0;
}

static void reconnect_due(memcached_st *ptr);

#define FIRST_ARG(a, ...) (a)
#define NOT_SERVED(fn, ...)                                                     \
    do {                                                                        \
        if (!shim_serving() || no_servers(FIRST_ARG(__VA_ARGS__)))               \
            return shim_refusing() && !no_servers(FIRST_ARG(__VA_ARGS__))        \
                       ? MEMCACHED_CONNECTION_FAILURE                           \
                       : REAL(fn)(__VA_ARGS__);                                 \
        reconnect_due(FIRST_ARG(__VA_ARGS__));                                  \
    } while (0)

/* A key the library refuses is refused by the library itself: it checks keys before it talks to
 * any server, and records the error (memcached_last_error_message) in the handle, which only it
 * can do. So is any call on a handle without servers. A key the library would send but the ascii
 * protocol cannot carry is refused by the shim (key_refused_here). */
static bool key_ok(memcached_st *ptr, const char *key, size_t klen)
{
    char k[SHIM_KEY_MAX];
    size_t kl;
    return ptr && !no_servers(ptr) && shim_full_key(ptr, key, klen, k, &kl) == MEMCACHED_SUCCESS;
}

#define NOT_SERVED_KEY(fn, ptr, key, klen, ...)                                 \
    do {                                                                        \
        if (shim_serving() && !key_ok((ptr), (key), (klen)))                    \
            return key_refused_here((ptr), (key), (klen))                       \
                       ? MEMCACHED_BAD_KEY_PROVIDED                             \
                       : REAL(fn)(__VA_ARGS__);                                 \
        NOT_SERVED(fn, __VA_ARGS__);                                            \
    } while (0)

/* ---- storage ---------------------------------------------------------------------------------- */

/* Buffered writes (below): queue one, or send what the handle queued before it asks anything
 * else. */
static memcached_return_t queue_write(memcached_st *ptr, bool del, const char *k, size_t kl,
                                      const void *value, size_t vlen, uint32_t flags,
                                      int64_t exptime);
static void drain_writes(memcached_st *ptr);
static bool buffering(memcached_st *ptr);

/* ---- values at rest: memcached_set_encoding_key ------------------------------------------------ */

/* The handle's cipher when the application gave it an encoding key, else NULL. The library
 * encrypts a value before it leaves (set, add, replace, cas; append and prepend are refused) and
 * decrypts it as it arrives, with the handle's hashkit. The shim makes the same calls, so Nessie
 * holds the bytes a memcached would, never the plain value, and a handle with another key (or
 * none) reads what it would read from memcached. The kit is the handle's own: the library
 * itself encrypts through it, and a handle is used by one thread at a time. */
static hashkit_st *cipher_of(memcached_st *ptr)
{
    hashkit_st *kit = ptr ? (hashkit_st *)REAL(memcached_get_hashkit)(ptr) : NULL;
    return kit && kit->_key ? kit : NULL;
}

bool shim_encrypted(memcached_st *ptr) { return cipher_of(ptr) != NULL; }

/* The cipher a value read through ptr is decrypted with: the library decrypts what the ascii
 * protocol brings, and hands over what the binary protocol brings as it came, sealed (measured
 * against memcached with libmemcached 1.1.4: tests/clients/capi_scenario.c). */
static hashkit_st *opener_of(memcached_st *ptr)
{
    return binary_mode(ptr) ? NULL : cipher_of(ptr);
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
    hashkit_st *kit = cipher_of(ptr);
    if (kit && (mode == WIRE_APPEND || mode == WIRE_PREPEND))
        return MEMCACHED_NOT_SUPPORTED; /* the library's answer: ciphertexts do not concatenate */
    bool queue = mode == WIRE_SET && buffering(ptr);
    struct shim_ch *ch = NULL;
    if (!queue) {
        drain_writes(ptr);
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
        ret = queue_write(ptr, false, k, kl, value, vlen, flags, exptime_of(ptr, exp));
    } else {
        int w = shim_ch_store(ch, mode, k, kl, value ? value : "", vlen, flags,
                              exptime_of(ptr, exp), cas, NULL);
        ret = store_status(w, mode, binary_mode(ptr));
        if (noreply(ptr) && server_answer(ret))
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

/* ---- get ------------------------------------------------------------------------------------- */

static char *serve_get(memcached_st *ptr, const char *key, size_t klen, size_t *vlen,
                       uint32_t *flags, memcached_return_t *error)
{
    reconnect_due(ptr);
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
    drain_writes(ptr);
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
        handle_release(ptr, v.data);
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
        handle_release(ptr, v.data);
        return NULL;
    }
    return v.data;
}

char *memcached_get(memcached_st *ptr, const char *key, size_t key_length, size_t *value_length,
                    uint32_t *flags, memcached_return_t *error)
{
    if (!shim_serving() || !key_ok(ptr, key, key_length)) {
        if (shim_refusing() && (key_ok(ptr, key, key_length) ||
                                key_refused_here(ptr, key, key_length))) {
            if (error)
                *error = MEMCACHED_CONNECTION_FAILURE;
            return NULL;
        }
        if (shim_serving() && key_refused_here(ptr, key, key_length)) {
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
    if (!shim_serving() || !key_ok(ptr, key, key_length)) {
        if (shim_refusing() && (key_ok(ptr, key, key_length) ||
                                key_refused_here(ptr, key, key_length))) {
            if (error)
                *error = MEMCACHED_CONNECTION_FAILURE;
            return NULL;
        }
        if (shim_serving() && key_refused_here(ptr, key, key_length)) {
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

/* ---- buffered writes: MEMCACHED_BEHAVIOR_BUFFER_REQUESTS --------------------------------------- */

/* With the behaviour set, the library answers a SET or a DELETE with ACTION QUEUED and only
 * writes it out ahead of the handle's next other command, at memcached_flush_buffers, or at
 * memcached_free; meanwhile other handles do not see it (measured against memcached, both
 * protocols). The shim queues them per handle the same way, and drops their outcomes as the
 * library drops the replies. */
struct queued_write {
    bool del;
    char key[SHIM_KEY_MAX]; /* with the namespace */
    size_t kl;
    void *value;       /* sealed already if the handle encrypts */
    size_t vlen;
    uint32_t flags;
    int64_t exptime;
};

/* Writes queued by all handles: every served call checks it, one load while there are none. */
static _Atomic size_t queued_total;

struct pending_item {
    char key[SHIM_KEY_MAX + 1];
    size_t klen;
    void *value;
    size_t vlen;
    uint32_t flags;
    uint64_t cas;
    bool sealed; /* it could not be decrypted with the handle's key (MEMCACHED_FAILURE) */
};

/* Per handle: the hits of its last mget not fetched yet. A side table keyed by the handle's
 * address, since memcached_st cannot grow (its size is ABI); a mutex, since different threads
 * use different handles at the same time (one handle is never used by two at once). */
struct pending {
    const memcached_st *ptr;
    struct pending_item *items;
    size_t n, next;
    bool any_hit, active;
    struct queued_write *q; /* writes queued while the handle buffers them, oldest first */
    size_t nq;
    bool quit;              /* memcached_quit since its last served call (reconnect_due) */
    struct pending *chain;
};

#define PENDING_BUCKETS 256
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending *pending_tab[PENDING_BUCKETS];
/* Handles that quit and have not called since (pending.quit): while none has, a call checks
 * nothing more (reconnect_due). */
static unsigned quits_pending;

static size_t bucket_of(const memcached_st *ptr) { return ((uintptr_t)ptr >> 4) % PENDING_BUCKETS; }

static void pending_clear(struct pending *p)
{
    for (size_t i = p->next; i < p->n; i++)
        free(p->items[i].value);
    free(p->items);
    p->items = NULL;
    p->n = p->next = 0;
    p->any_hit = p->active = false;
}

/* The handle's entry, made if create is set. Returns NULL if absent (or out of memory). */
static struct pending *pending_of(const memcached_st *ptr, bool create)
{
    size_t b = bucket_of(ptr);
    pthread_mutex_lock(&pending_lock);
    struct pending *p = pending_tab[b];
    while (p && p->ptr != ptr)
        p = p->chain;
    if (!p && create && (p = calloc(1, sizeof(*p))) != NULL) {
        p->ptr = ptr;
        p->chain = pending_tab[b];
        pending_tab[b] = p;
    }
    pthread_mutex_unlock(&pending_lock);
    return p;
}

static void pending_drop(const memcached_st *ptr)
{
    size_t b = bucket_of(ptr);
    pthread_mutex_lock(&pending_lock);
    struct pending **pp = &pending_tab[b];
    while (*pp && (*pp)->ptr != ptr)
        pp = &(*pp)->chain;
    struct pending *p = *pp;
    if (p) {
        *pp = p->chain;
        if (p->quit)
            __atomic_fetch_sub(&quits_pending, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&pending_lock);
    if (p) {
        pending_clear(p);
        for (size_t i = 0; i < p->nq; i++)
            free(p->q[i].value);
        atomic_fetch_sub_explicit(&queued_total, p->nq, memory_order_relaxed);
        free(p->q);
        free(p);
    }
}

static bool buffering(memcached_st *ptr)
{
    return REAL(memcached_behavior_get)(ptr, MEMCACHED_BEHAVIOR_BUFFER_REQUESTS) != 0;
}

static memcached_return_t queue_write(memcached_st *ptr, bool del, const char *k, size_t kl,
                                      const void *value, size_t vlen, uint32_t flags,
                                      int64_t exptime)
{
    struct pending *p = pending_of(ptr, true);
    struct queued_write *q = p ? realloc(p->q, (p->nq + 1) * sizeof(*q)) : NULL;
    if (!q)
        return MEMCACHED_MEMORY_ALLOCATION_FAILURE;
    p->q = q;
    void *copy = vlen ? malloc(vlen) : NULL;
    if (vlen && !copy)
        return MEMCACHED_MEMORY_ALLOCATION_FAILURE;
    if (vlen)
        memcpy(copy, value, vlen);
    q[p->nq] = (struct queued_write){.del = del, .kl = kl, .value = copy, .vlen = vlen,
                                     .flags = flags, .exptime = exptime};
    memcpy(q[p->nq].key, k, kl);
    p->nq++;
    atomic_fetch_add_explicit(&queued_total, 1, memory_order_relaxed);
    return MEMCACHED_BUFFERED;
}

static void drain_writes(memcached_st *ptr)
{
    if (atomic_load_explicit(&queued_total, memory_order_relaxed) == 0 || !ptr)
        return;
    struct pending *p = pending_of(ptr, false);
    if (!p || p->nq == 0)
        return;
    struct shim_ch *ch = shim_channel();
    for (size_t i = 0; i < p->nq; i++) {
        struct queued_write *w = &p->q[i];
        if (ch && w->del)
            shim_ch_delete(ch, w->key, w->kl);
        else if (ch)
            shim_ch_store(ch, WIRE_SET, w->key, w->kl, w->value ? w->value : "", w->vlen,
                          w->flags, w->exptime, 0, NULL);
        free(w->value);
    }
    atomic_fetch_sub_explicit(&queued_total, p->nq, memory_order_relaxed);
    free(p->q);
    p->q = NULL;
    p->nq = 0;
}

void shim_drain_writes(memcached_st *ptr) { drain_writes(ptr); }

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
    struct pending *p = pending_of(ptr, true);
    if (!p)
        return MEMCACHED_MEMORY_ALLOCATION_FAILURE;
    pending_clear(p);
    if (n == 0)
        return MEMCACHED_NOTFOUND;
    /* Every key is checked before anything is asked, as the library does. */
    size_t nsl = ns_len(ptr);
    for (size_t i = 0; i < n; i++)
        if (!keys[i] || klens[i] == 0 || klens[i] + nsl > SHIM_KEY_MAX)
            return MEMCACHED_BAD_KEY_PROVIDED;
    drain_writes(ptr);
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
     * keys, so a key with a space is keys that nobody stored (key_refused_here). */
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
    if (!ptr || n == 0 || !keys || !klens || no_servers(ptr))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!key_ok(ptr, keys[i], klens[i]) && !key_refused_here(ptr, keys[i], klens[i]))
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
    struct pending *p = pending_of(ptr, false);
    if (!p || !p->active || p->next >= p->n) {
        /* END after at least one hit, NOTFOUND after none (PHP's getResultCode relies on it). */
        *end_rc = p && p->any_hit ? MEMCACHED_END : MEMCACHED_NOTFOUND;
        if (p)
            pending_clear(p);
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
    if (!binary_mode(ptr))
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
    if (!binary_mode(ptr))
        return MEMCACHED_NOT_SUPPORTED;
    return serve_mget(ptr, keys, key_length, number_of_keys);
}

/* ---- delete, exist, touch --------------------------------------------------------------------- */

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
    if (op == K_DELETE && buffering(ptr))
        return queue_write(ptr, true, k, kl, NULL, 0, 0, 0);
    drain_writes(ptr);
    struct shim_ch *ch = shim_channel();
    if (!ch)
        return MEMCACHED_CONNECTION_FAILURE;
    int w;
    if (op == K_DELETE) {
        w = shim_ch_delete(ch, k, kl);
    } else if (op == K_TOUCH) {
        w = shim_ch_touch(ch, k, kl, exptime_of(ptr, exp));
    } else {
        struct shim_value v;
        w = shim_ch_get(ch, k, kl, NULL, &v);
        if (w == WIRE_OK)
            free(v.data);
    }
    rc = shim_status(w);
    if (op != K_EXIST && noreply(ptr) && server_answer(rc))
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
    return shim_serving() && ptr && key && klen > 0 && klen + ns_len(ptr) > SHIM_KEY_MAX;
}

static memcached_return_t exist_long_key_status(memcached_st *ptr)
{
    return binary_mode(ptr) ? MEMCACHED_UNKNOWN_READ_FAILURE : MEMCACHED_CLIENT_ERROR;
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

/* ---- increment, decrement ----------------------------------------------------------------------- */

static memcached_return_t arith_reply(memcached_st *ptr, bool incr, const char *key, size_t klen,
                                      uint64_t delta, bool with_initial, uint64_t initial,
                                      time_t exp, uint64_t *value);

static memcached_return_t serve_arith(memcached_st *ptr, bool incr, const char *key, size_t klen,
                                      uint64_t delta, bool with_initial, uint64_t initial,
                                      time_t exp, uint64_t *value)
{
    memcached_return_t rc = arith_reply(ptr, incr, key, klen, delta, with_initial, initial, exp,
                                        value);
    if (ptr && noreply(ptr) && server_answer(rc)) {
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
    if (with_initial && !binary_mode(ptr)) {
        /* The library offers *_with_initial in binary mode only; in ascii it answers
         * INVALID_ARGUMENTS and sets the value to all ones (measured). */
        if (value)
            *value = UINT64_MAX;
        return MEMCACHED_INVALID_ARGUMENTS;
    }
    drain_writes(ptr);
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
        if (w == WIRE_NON_NUMERIC && binary_mode(ptr))
            return MEMCACHED_UNKNOWN_READ_FAILURE;
        if (w != WIRE_NOT_FOUND || !with_initial || (uint32_t)exp == MEMCACHED_EXPIRATION_NOT_ADD)
            return shim_status(w);
        /* Missing: create it with the initial value, unless someone else just did. */
        char num[24];
        int len = snprintf(num, sizeof(num), "%llu", (unsigned long long)initial);
        w = shim_ch_store(ch, WIRE_ADD, k, kl, num, (size_t)len, 0, exptime_of(ptr, exp), 0, NULL);
        if (w == WIRE_OK) {
            if (value)
                *value = initial;
            return MEMCACHED_SUCCESS;
        }
        if (w != WIRE_NOT_STORED)
            return shim_status(w);
    }
}

memcached_return_t memcached_increment(memcached_st *ptr, const char *key, size_t key_length,
                                       uint32_t offset, uint64_t *value)
{
    NOT_SERVED_KEY(memcached_increment, ptr, key, key_length, ptr, key, key_length, offset, value);
    return serve_arith(ptr, true, key, key_length, offset, false, 0, 0, value);
}

memcached_return_t memcached_decrement(memcached_st *ptr, const char *key, size_t key_length,
                                       uint32_t offset, uint64_t *value)
{
    NOT_SERVED_KEY(memcached_decrement, ptr, key, key_length, ptr, key, key_length, offset, value);
    return serve_arith(ptr, false, key, key_length, offset, false, 0, 0, value);
}

memcached_return_t memcached_increment_by_key(memcached_st *ptr, const char *group_key,
                                              size_t group_key_length, const char *key,
                                              size_t key_length, uint64_t offset,
                                              uint64_t *value)
{
    NOT_SERVED_KEY(memcached_increment_by_key, ptr, key, key_length, ptr, group_key, group_key_length, key, key_length,
               offset, value);
    return serve_arith(ptr, true, key, key_length, offset, false, 0, 0, value);
}

memcached_return_t memcached_decrement_by_key(memcached_st *ptr, const char *group_key,
                                              size_t group_key_length, const char *key,
                                              size_t key_length, uint64_t offset,
                                              uint64_t *value)
{
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

/* ---- flush, buffers, handle life -------------------------------------------------------------- */

memcached_return_t memcached_flush(memcached_st *ptr, time_t expiration)
{
    NOT_SERVED(memcached_flush, ptr, expiration);
    if (!ptr)
        return MEMCACHED_INVALID_ARGUMENTS;
    drain_writes(ptr);
    struct shim_ch *ch = shim_channel();
    if (!ch)
        return MEMCACHED_CONNECTION_FAILURE;
    /* expiration: memcached's flush_all N (seconds, or a unix time); 0 is at once. */
    return shim_status(shim_ch_flush(ch, (int64_t)expiration));
}

memcached_return_t memcached_flush_buffers(memcached_st *mem)
{
    NOT_SERVED(memcached_flush_buffers, mem);
    drain_writes(mem); /* the queued writes; every other served call is complete already */
    return MEMCACHED_SUCCESS;
}

static void versioned_mark(memcached_st *ptr, bool on);

/* A served call of ptr: its first since a memcached_quit is a new connection for the daemon's
 * total_connections. One relaxed load when no handle has quit. */
static void reconnect_due(memcached_st *ptr)
{
    if (!__atomic_load_n(&quits_pending, __ATOMIC_RELAXED) || !ptr)
        return;
    struct pending *p = pending_of(ptr, false);
    bool due = false;
    pthread_mutex_lock(&pending_lock);
    if (p && p->quit) {
        p->quit = false;
        __atomic_fetch_sub(&quits_pending, 1, __ATOMIC_RELAXED);
        due = true;
    }
    pthread_mutex_unlock(&pending_lock);
    struct shim_ch *ch = due ? shim_channel() : NULL;
    if (ch)
        shim_ch_reconnected(ch);
}

/* The library quits a handle's connections itself when it frees it: not a reconnection. */
static __thread bool freeing;

/* memcached_quit drops the handle's connections, and its next call takes a new one, which
 * memcached counts (total_connections): that call tells the daemon (reconnect_due), so quitting
 * twice in a row counts one. Queued writes go out first, as the library writes them before its
 * "quit". The library does the rest. */
void memcached_quit(memcached_st *ptr)
{
    if (ptr && shim_serving() && !no_servers(ptr) && !freeing) {
        drain_writes(ptr);
        struct pending *p = pending_of(ptr, true);
        pthread_mutex_lock(&pending_lock);
        if (p && !p->quit) {
            p->quit = true;
            __atomic_fetch_add(&quits_pending, 1, __ATOMIC_RELAXED);
        }
        pthread_mutex_unlock(&pending_lock);
    }
    void (*real)(memcached_st *) = REAL(memcached_quit);
    if (real)
        real(ptr);
}

void memcached_free(memcached_st *ptr)
{
    if (ptr && shim_serving())
        drain_writes(ptr); /* the library writes queued commands out before it closes */
    if (ptr) {
        pending_drop(ptr);
        versioned_mark(ptr, false);
    }
    void (*real)(memcached_st *) = REAL(memcached_free);
    freeing = true;
    if (real)
        real(ptr);
    freeing = false;
}

/* ---- statistics --------------------------------------------------------------------------------- */

/* memcstat's call: the daemon's stats ("STAT name value" lines, memcached's names first, then
 * Nessie's), reported as if they came from the handle's first server. Sub-commands ("slabs",
 * "items"...) are memcached's own: not supported. */
memcached_return_t memcached_stat_execute(memcached_st *memc, const char *args,
                                          memcached_stat_fn func, void *context)
{
    NOT_SERVED(memcached_stat_execute, memc, args, func, context);
    if (!memc || !func)
        return MEMCACHED_INVALID_ARGUMENTS;
    if (args && *args)
        return MEMCACHED_NOT_SUPPORTED;
    const memcached_instance_st *inst = REAL(memcached_server_instance_by_position)(memc, 0);
    if (!inst)
        return MEMCACHED_NO_SERVERS;
    drain_writes(memc);
    char *text;
    int rc = shim_stats(shim_socket_path(), &text);
    if (rc != WIRE_OK)
        return MEMCACHED_CONNECTION_FAILURE;
    memcached_return_t ret = MEMCACHED_SUCCESS;
    char *save = NULL;
    for (char *line = strtok_r(text, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        if (strncmp(line, "STAT ", 5) != 0)
            continue;
        char *name = line + 5;
        char *sp = strchr(name, ' ');
        if (!sp)
            continue;
        *sp = '\0';
        const char *value = sp + 1;
        if (func(inst, name, strlen(name), value, strlen(value), context) != MEMCACHED_SUCCESS) {
            ret = MEMCACHED_FAILURE;
            break;
        }
    }
    free(text);
    return ret;
}

/* One "STAT name value" of the daemon into st, as the library fills it from a server's answer:
 * memcached's names; Nessie's own have no field and are skipped. */
static void stat_set(memcached_stat_st *st, const char *name, const char *value)
{
    static const struct {
        const char *name;
        size_t off;
        bool wide; /* unsigned long long, else unsigned long */
    } fields[] = {
#define F(n, w) {#n, offsetof(memcached_stat_st, n), w}
        F(connection_structures, false), F(curr_connections, false), F(curr_items, false),
        F(pointer_size, false), F(threads, false), F(time, false), F(total_connections, false),
        F(total_items, false), F(uptime, false), F(bytes, true), F(bytes_read, true),
        F(bytes_written, true), F(cmd_get, true), F(cmd_set, true), F(evictions, true),
        F(get_hits, true), F(get_misses, true), F(limit_maxbytes, true),
#undef F
    };
    unsigned long long v = strtoull(value, NULL, 10);
    if (strcmp(name, "pid") == 0) {
        st->pid = (pid_t)v;
    } else if (strcmp(name, "version") == 0) {
        snprintf(st->version, sizeof(st->version), "%s", value);
    } else if (strcmp(name, "rusage_user") == 0 || strcmp(name, "rusage_system") == 0) {
        bool user = name[7] == 'u';
        const char *dot = strchr(value, '.');
        unsigned long us = dot ? strtoul(dot + 1, NULL, 10) : 0;
        *(user ? &st->rusage_user_seconds : &st->rusage_system_seconds) = (unsigned long)v;
        *(user ? &st->rusage_user_microseconds : &st->rusage_system_microseconds) = us;
    } else {
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
            if (strcmp(name, fields[i].name) != 0)
                continue;
            char *f = (char *)st + fields[i].off;
            if (fields[i].wide)
                *(unsigned long long *)(void *)f = v;
            else
                *(unsigned long *)(void *)f = (unsigned long)v;
            break;
        }
    }
}

/* pylibmc's get_stats() and the library's own stats array: one entry per server of the handle,
 * each holding the daemon's stats (every server of the handle is served by this Nessie node),
 * allocated with the handle's allocators so that memcached_stat_free frees it, read with the
 * library's memcached_stat_get_keys and memcached_stat_get_value. Sub-commands ("slabs",
 * "items"...) are memcached's own: NOT SUPPORTED. Without an answer from the daemon, every entry
 * keeps pid -1 and the call says SOME ERRORS, as the library does for servers that fail. */
memcached_stat_st *memcached_stat(memcached_st *ptr, char *args, memcached_return_t *error)
{
    memcached_return_t unused;
    if (!error)
        error = &unused;
    if (!shim_serving() || no_servers(ptr)) {
        if (shim_refusing() && !no_servers(ptr)) {
            *error = MEMCACHED_CONNECTION_FAILURE;
            return NULL;
        }
        return REAL(memcached_stat)(ptr, args, error);
    }
    reconnect_due(ptr);
    if (!ptr) {
        *error = MEMCACHED_INVALID_ARGUMENTS;
        return NULL;
    }
    if (args && *args) {
        *error = MEMCACHED_NOT_SUPPORTED;
        return NULL;
    }
    uint32_t n = REAL(memcached_server_count)(ptr);
    memcached_malloc_fn m;
    memcached_free_fn f;
    memcached_realloc_fn r;
    memcached_calloc_fn c;
    REAL(memcached_get_memory_allocators)(ptr, &m, &f, &r, &c);
    void *actx = REAL(memcached_get_memory_allocators_context)(ptr);
    memcached_stat_st *stats = c ? c(ptr, n, sizeof(*stats), actx) : NULL;
    if (!stats) {
        *error = MEMCACHED_MEMORY_ALLOCATION_FAILURE;
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        stats[i].pid = -1;
        stats[i].root = ptr;
    }
    drain_writes(ptr);
    char *text;
    if (shim_stats(shim_socket_path(), &text) != WIRE_OK) {
        *error = MEMCACHED_SOME_ERRORS;
        return stats;
    }
    char *save = NULL;
    for (char *line = strtok_r(text, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        if (strncmp(line, "STAT ", 5) != 0)
            continue;
        char *name = line + 5, *sp = strchr(name, ' ');
        if (!sp)
            continue;
        *sp = '\0';
        stat_set(&stats[0], name, sp + 1);
    }
    free(text);
    for (uint32_t i = 1; i < n; i++)
        stats[i] = stats[0];
    *error = MEMCACHED_SUCCESS;
    return stats;
}

/* ---- dump ------------------------------------------------------------------------------------ */

/* A dump's callbacks and what they answered. */
struct dump_call {
    memcached_st *ptr;
    memcached_dump_fn *fn;
    uint32_t nfn;
    void *context;
    bool failed; /* a callback answered an error (memcached_fatal) */
};

/* One key of the daemon's walk to the callbacks, as the library hands over each key memcached
 * lists: the key ends at its first byte that is not isgraph() (the library parses memcached's
 * "ITEM <key> [...]" line so; a key stored through the binary protocol may hold any byte), NUL
 * terminated; a callback that answers anything but SUCCESS ends this key's callbacks, and the
 * walk goes on. */
static bool dump_key(void *user, const char *key, size_t klen)
{
    struct dump_call *d = user;
    char k[SHIM_KEY_MAX + 1];
    size_t n = 0;
    while (n < klen && isgraph((unsigned char)key[n]))
        n++;
    memcpy(k, key, n);
    k[n] = '\0';
    for (uint32_t i = 0; i < d->nfn; i++) {
        if (!d->fn[i])
            continue;
        memcached_return_t rc = d->fn[i](d->ptr, k, n, d->context);
        if (rc != MEMCACHED_SUCCESS) {
            d->failed |= memcached_fatal(rc);
            break;
        }
    }
    return true;
}

/*
 * memcached_dump (memcdump): the keys of the items the daemon's node holds, which are the values
 * written through it (nessie_dump_local; memcached's dump likewise lists what each server holds,
 * and that node is the one server this process talks to), each once however many servers the
 * handle names. Outcomes and side effects are the library's against memcached:
 * - binary protocol: NOT SUPPORTED, answered here. The library answers so too without talking to
 *   anyone, but a served call is never left to code that could reach a server.
 * - ascii: the library asks the servers' versions first (memcached_version), so the handle's
 *   servers report theirs from then on (versioned_mark); then each key goes to the callbacks
 *   (dump_key), and the result is SUCCESS, or SOME ERRORS if a callback answered an error.
 * - keys are raw, as memcached lists them and the library reports them: with the namespace
 *   prefix they were stored under, whatever the handle's namespace (none is stripped, no key is
 *   filtered out).
 * A node the daemon could not reach to judge some items makes it SOME ERRORS, after every other
 * key was reported; a daemon without the dump (an older one: unknown op) makes it NOT SUPPORTED.
 * The library's error message for these (memcached_last_error_message) is not set: only the
 * library sets it.
 */
memcached_return_t memcached_dump(memcached_st *ptr, memcached_dump_fn *function, void *context,
                                  uint32_t number_of_callbacks)
{
    NOT_SERVED(memcached_dump, ptr, function, context, number_of_callbacks);
    if (!ptr)
        return MEMCACHED_INVALID_ARGUMENTS;
    if (binary_mode(ptr))
        return MEMCACHED_NOT_SUPPORTED;
    drain_writes(ptr);
    versioned_mark(ptr, true);
    struct shim_ch *ch = shim_channel();
    if (!ch)
        return MEMCACHED_CONNECTION_FAILURE;
    struct dump_call d = {.ptr = ptr, .fn = function, .context = context,
                          .nfn = function ? number_of_callbacks : 0};
    /* The callbacks may make calls on this channel; one that fails must not free it under us. */
    shim_channel_hold(true);
    int rc = shim_ch_dump(ch, 0, 0, dump_key, &d);
    shim_channel_hold(false);
    if (rc == WIRE_E_UNKNOWN_OP)
        return MEMCACHED_NOT_SUPPORTED;
    if (rc != WIRE_OK && rc != WIRE_FABRIC_ERROR)
        return shim_status(rc);
    return d.failed || rc == WIRE_FABRIC_ERROR ? MEMCACHED_SOME_ERRORS : MEMCACHED_SUCCESS;
}

/* The servers' versions: every server is Nessie, which is there (the daemon answered). The
 * library keeps a server's version numbers unknown (255) until memcached_version asks for them;
 * then memcached's are 1.6.18. So the shim remembers the instances of the handles it answered
 * memcached_version for (file static: the getters below are given an instance, not its handle)
 * and reports WIRE_COMPAT_* for them, unknown for the rest; `memcstat` and the stats calls give
 * the version string, WIRE_COMPAT_VERSION-nessie. At most VERSIONED_MAX instances are
 * remembered, the oldest forgotten first (they read as unknown again, as before the call). */
#define VERSIONED_MAX 256
static pthread_mutex_t versioned_lock = PTHREAD_MUTEX_INITIALIZER;
static const memcached_instance_st *versioned[VERSIONED_MAX];
static unsigned versioned_next;

/* Remember (on) or forget (!on) every instance of ptr's server list. */
static void versioned_mark(memcached_st *ptr, bool on)
{
    /* Most programs never ask: their memcached_free need not look (a relaxed read: a handle is
     * freed by the thread that used it, after its own memcached_version if any). */
    if (!on && __atomic_load_n(&versioned_next, __ATOMIC_RELAXED) == 0)
        return;
    uint32_t n = REAL(memcached_server_count)(ptr);
    pthread_mutex_lock(&versioned_lock);
    for (uint32_t i = 0; i < n; i++) {
        const memcached_instance_st *in = REAL(memcached_server_instance_by_position)(ptr, i);
        unsigned j;
        for (j = 0; j < VERSIONED_MAX && versioned[j] != in; j++)
            ;
        if (on && j == VERSIONED_MAX && in)
            versioned[__atomic_fetch_add(&versioned_next, 1, __ATOMIC_RELAXED) % VERSIONED_MAX] = in;
        else if (!on && j < VERSIONED_MAX)
            versioned[j] = NULL;
    }
    pthread_mutex_unlock(&versioned_lock);
}

static bool versioned_has(const memcached_instance_st *in)
{
    bool has = false;
    pthread_mutex_lock(&versioned_lock);
    for (unsigned j = 0; in && !has && j < VERSIONED_MAX; j++)
        has = versioned[j] == in;
    pthread_mutex_unlock(&versioned_lock);
    return has;
}

memcached_return_t memcached_version(memcached_st *ptr)
{
    NOT_SERVED(memcached_version, ptr);
    drain_writes(ptr);
    versioned_mark(ptr, true);
    return MEMCACHED_SUCCESS;
}

uint8_t memcached_server_major_version(const memcached_instance_st *in)
{
    return shim_serving() && versioned_has(in) ? WIRE_COMPAT_MAJOR
                                               : REAL(memcached_server_major_version)(in);
}

uint8_t memcached_server_minor_version(const memcached_instance_st *in)
{
    return shim_serving() && versioned_has(in) ? WIRE_COMPAT_MINOR
                                               : REAL(memcached_server_minor_version)(in);
}

uint8_t memcached_server_micro_version(const memcached_instance_st *in)
{
    return shim_serving() && versioned_has(in) ? WIRE_COMPAT_MICRO
                                               : REAL(memcached_server_micro_version)(in);
}
