/*
 * common.c - what the interposed API families share (common.h): the key as libmemcached checks
 * it, the behaviours that change a served call's answer, a wire outcome as memcached_return_t,
 * the handle's allocators and cipher, and what the shim keeps per handle beside libmemcached's
 * own state (the side table: a multi-get's hits until fetched, the writes a buffering handle
 * queued, a reconnection due after memcached_quit; and which servers have reported a version).
 *
 * May call: the interposition core (shim.h: the real library, the serving decision, this
 * thread's channel) and the channel (channel.h). No API family: they call this.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libmemcached/memcached.h>

#include "channel.h"
#include "common.h"
#include "shim.h"

/* ---- keys, modes, outcomes -------------------------------------------------------------------- */

bool shim_binary_mode(memcached_st *ptr)
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


/* A key the shim refuses itself: one the library would send to the server, where it breaks
 * the connection (above). With VERIFY_KEY the library refuses these keys itself. */
bool shim_key_refused_here(memcached_st *ptr, const char *key, size_t klen)
{
    return ptr && key && klen > 0 && !shim_no_servers(ptr) && !shim_binary_mode(ptr) &&
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
    if (!shim_binary_mode(ptr) &&
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

size_t shim_ns_len(memcached_st *ptr)
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

/* An expiration as memcached receives it: the binary protocol carries 32 unsigned bits (so -1
 * arrives as a time in 2106); the ascii line is read as a 32-bit signed number, so anything that
 * does not fit (a negative time_t sent as unsigned, say) means "already expired". */
int64_t shim_exptime_of(memcached_st *ptr, time_t exp)
{
    if (shim_binary_mode(ptr))
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
bool shim_noreply(memcached_st *ptr)
{
    return REAL(memcached_behavior_get)(ptr, MEMCACHED_BEHAVIOR_NOREPLY) != 0;
}

/* Whether rc is the server's answer (which NOREPLY hides), not the library's own refusal or a
 * failure to talk to the server at all. */
bool shim_server_answer(memcached_return_t rc)
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

void shim_handle_release(void *user, void *p)
{
    memcached_malloc_fn m;
    memcached_free_fn f;
    void *ctx;
    allocators(user, &m, &f, &ctx);
    f(user, p, ctx);
}

struct shim_alloc shim_handle_alloc(memcached_st *ptr)
{
    return (struct shim_alloc){.alloc = handle_alloc, .release = shim_handle_release, .user = ptr};
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
bool shim_no_servers(memcached_st *ptr)
{
    return ptr && REAL(memcached_server_count)(ptr) == 0;
}

/* A key the library refuses is refused by the library itself: it checks keys before it talks to
 * any server, and records the error (memcached_last_error_message) in the handle, which only it
 * can do. So is any call on a handle without servers. A key the library would send but the ascii
 * protocol cannot carry is refused by the shim (shim_key_refused_here). */
bool shim_key_ok(memcached_st *ptr, const char *key, size_t klen)
{
    char k[SHIM_KEY_MAX];
    size_t kl;
    return ptr && !shim_no_servers(ptr) &&
           shim_full_key(ptr, key, klen, k, &kl) == MEMCACHED_SUCCESS;
}

/* ---- values at rest: memcached_set_encoding_key ------------------------------------------------ */

/* The handle's cipher when the application gave it an encoding key, else NULL. The library
 * encrypts a value before it leaves (set, add, replace, cas; append and prepend are refused) and
 * decrypts it as it arrives, with the handle's hashkit. The shim makes the same calls, so Nessie
 * holds the bytes a memcached would, never the plain value, and a handle with another key (or
 * none) reads what it would read from memcached. The kit is the handle's own: the library
 * itself encrypts through it, and a handle is used by one thread at a time. */
hashkit_st *shim_cipher_of(memcached_st *ptr)
{
    hashkit_st *kit = ptr ? (hashkit_st *)REAL(memcached_get_hashkit)(ptr) : NULL;
    return kit && kit->_key ? kit : NULL;
}

bool shim_encrypted(memcached_st *ptr) { return shim_cipher_of(ptr) != NULL; }

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

/* ---- the side table: struct pending (common.h), one per handle -------------------------------- */

#define PENDING_BUCKETS 256
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending *pending_tab[PENDING_BUCKETS];
/* Handles that quit and have not called since (pending.quit): while none has, a call checks
 * nothing more (shim_reconnect_due). */
static unsigned quits_pending;

static size_t bucket_of(const memcached_st *ptr) { return ((uintptr_t)ptr >> 4) % PENDING_BUCKETS; }

void shim_pending_clear(struct pending *p)
{
    for (size_t i = p->next; i < p->n; i++)
        free(p->items[i].value);
    free(p->items);
    p->items = NULL;
    p->n = p->next = 0;
    p->any_hit = p->active = false;
}

/* The handle's entry, made if create is set. Returns NULL if absent (or out of memory). */
struct pending *shim_pending_of(const memcached_st *ptr, bool create)
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

void shim_pending_drop(const memcached_st *ptr)
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
        shim_pending_clear(p);
        for (size_t i = 0; i < p->nq; i++)
            free(p->q[i].value);
        atomic_fetch_sub_explicit(&queued_total, p->nq, memory_order_relaxed);
        free(p->q);
        free(p);
    }
}

/* ---- buffered writes: queued, and sent ahead of the handle's next call --------------------------- */

bool shim_buffering(memcached_st *ptr)
{
    return REAL(memcached_behavior_get)(ptr, MEMCACHED_BEHAVIOR_BUFFER_REQUESTS) != 0;
}

memcached_return_t shim_queue_write(memcached_st *ptr, bool del, const char *k, size_t kl,
                                    const void *value, size_t vlen, uint32_t flags,
                                    int64_t exptime)
{
    struct pending *p = shim_pending_of(ptr, true);
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
    struct pending *p = shim_pending_of(ptr, false);
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

/* ---- reconnections: memcached_quit ------------------------------------------------------------ */

/* memcached_quit drops the handle's connections (handle.c), and its next call takes a new one,
 * which memcached counts (total_connections): mark the handle, once however many times it quits
 * before that call. */
void shim_quit_mark(memcached_st *ptr)
{
    struct pending *p = shim_pending_of(ptr, true);
    pthread_mutex_lock(&pending_lock);
    if (p && !p->quit) {
        p->quit = true;
        __atomic_fetch_add(&quits_pending, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&pending_lock);
}

/* A served call of ptr: its first since a memcached_quit is a new connection for the daemon's
 * total_connections. One relaxed load when no handle has quit. */
void shim_reconnect_due(memcached_st *ptr)
{
    if (!__atomic_load_n(&quits_pending, __ATOMIC_RELAXED) || !ptr)
        return;
    struct pending *p = shim_pending_of(ptr, false);
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

/* ---- the servers' versions ---------------------------------------------------------------------- */

/* The servers' versions: every server is Nessie, which is there (the daemon answered). The
 * library keeps a server's version numbers unknown (255) until memcached_version asks for them;
 * then memcached's are 1.6.18. So the shim remembers the instances of the handles it answered
 * memcached_version for (file static: the getters in stats.c are given an instance, not its handle)
 * and reports WIRE_COMPAT_* for them, unknown for the rest; `memcstat` and the stats calls give
 * the version string, WIRE_COMPAT_VERSION-nessie. At most VERSIONED_MAX instances are
 * remembered, the oldest forgotten first (they read as unknown again, as before the call). */
#define VERSIONED_MAX 256
static pthread_mutex_t versioned_lock = PTHREAD_MUTEX_INITIALIZER;
static const memcached_instance_st *versioned[VERSIONED_MAX];
static unsigned versioned_next;

/* Remember (on) or forget (!on) every instance of ptr's server list. */
void shim_versioned_mark(memcached_st *ptr, bool on)
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

bool shim_versioned_has(const memcached_instance_st *in)
{
    bool has = false;
    pthread_mutex_lock(&versioned_lock);
    for (unsigned j = 0; in && !has && j < VERSIONED_MAX; j++)
        has = versioned[j] == in;
    pthread_mutex_unlock(&versioned_lock);
    return has;
}
