/*
 * common.h - what the shim's API families share (common.c). The families are storage.c,
 * retrieval.c, keyop.c, arith.c, handle.c, stats.c and nb.c; each includes this header, the
 * interposition core's (shim.h) and the channel's (channel.h), and none includes another
 * family's. This module sits on the core (the real library, the serving decision, this thread's
 * channel), which sits on the channel: family -> common -> core -> channel, never back up.
 *
 * Each interposed function: if the process does not serve, forward to the real one (or fail,
 * strict); else check the key as libmemcached does (1..250 bytes with the namespace prefix, which
 * we add as the library would), run the request on this thread's channel, and map the outcome to
 * the memcached_return_t the real library gives against memcached in the handle's protocol mode.
 * Values returned to the caller are allocated with the handle's allocators, NUL-terminated.
 */
#ifndef NESSIE_SHIM_COMMON_H
#define NESSIE_SHIM_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <libmemcached/memcached.h>

#include "channel.h"
#include "shim.h"

/* ---- keys, behaviours, outcomes ----------------------------------------------------------------- */

/* namespace + key into out (KEY_MAX bytes); MEMCACHED_SUCCESS or BAD_KEY_PROVIDED. */
memcached_return_t shim_full_key(memcached_st *ptr, const char *key, size_t klen, char *out,
                                 size_t *outlen);
/* The length of the handle's namespace prefix (0 without one). */
SHIM_HIDDEN size_t shim_ns_len(memcached_st *ptr);
/* The key passes the library's own checks on a handle with servers: the shim may serve it. */
SHIM_HIDDEN bool shim_key_ok(memcached_st *ptr, const char *key, size_t klen);
/* A key the library would send but the ascii protocol cannot carry: the shim refuses it. */
SHIM_HIDDEN bool shim_key_refused_here(memcached_st *ptr, const char *key, size_t klen);
/* The handle has no servers: the library answers every call on it itself. */
SHIM_HIDDEN bool shim_no_servers(memcached_st *ptr);

/* MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, and MEMCACHED_BEHAVIOR_NOREPLY: the behaviours that change
 * what a served call answers. */
SHIM_HIDDEN bool shim_binary_mode(memcached_st *ptr);
SHIM_HIDDEN bool shim_noreply(memcached_st *ptr);
/* rc is the server's answer (which NOREPLY hides), not the library's refusal or a dead link. */
SHIM_HIDDEN bool shim_server_answer(memcached_return_t rc);

/* A wire outcome as the library reports it (negative: the channel failed, and is dropped). */
memcached_return_t shim_status(int wire_rc);
/* An expiration as memcached receives it in the handle's protocol (-1: already expired). */
SHIM_HIDDEN int64_t shim_exptime_of(memcached_st *ptr, time_t exp);

/* ---- the handle's allocators and cipher ------------------------------------------------------- */

/* The handle's allocators, for values read straight into the caller's memory. */
struct shim_alloc shim_handle_alloc(memcached_st *ptr);
/* Frees p (from shim_handle_alloc's alloc) with the handle user's free. */
SHIM_HIDDEN void shim_handle_release(void *user, void *p);
/* A copy of a value for the caller, through the handle's allocators, NUL-terminated. */
char *shim_dup_value(memcached_st *ptr, const void *v, size_t len);

/* The handle has an encoding key (memcached_set_encoding_key): its values are encrypted. */
bool shim_encrypted(memcached_st *ptr);
/* The handle's cipher when it has an encoding key, else NULL. */
SHIM_HIDDEN hashkit_st *shim_cipher_of(memcached_st *ptr);

/* ---- what the shim keeps per handle ----------------------------------------------------------- */

/* One hit of a multi-get, held until fetched (retrieval.c). */
struct pending_item {
    char key[SHIM_KEY_MAX + 1];
    size_t klen;
    void *value;
    size_t vlen;
    uint32_t flags;
    uint64_t cas;
    bool sealed; /* it could not be decrypted with the handle's key (MEMCACHED_FAILURE) */
};

struct queued_write; /* common.c's: a write queued while the handle buffers them */

/* Per handle: the hits of its last mget not fetched yet. A side table keyed by the handle's
 * address, since memcached_st cannot grow (its size is ABI); a mutex, since different threads
 * use different handles at the same time (one handle is never used by two at once). The
 * multi-get's fields are retrieval.c's; the queue and the quit mark are common.c's. */
struct pending {
    const memcached_st *ptr;
    struct pending_item *items;
    size_t n, next;
    bool any_hit, active;
    struct queued_write *q; /* writes queued while the handle buffers them, oldest first */
    size_t nq;
    bool quit;              /* memcached_quit since its last served call (shim_reconnect_due) */
    struct pending *chain;
};

/* The handle's entry, made if create is set. Returns NULL if absent (or out of memory). */
SHIM_HIDDEN struct pending *shim_pending_of(const memcached_st *ptr, bool create);
/* Forget the multi-get's hits not fetched. */
SHIM_HIDDEN void shim_pending_clear(struct pending *p);
/* memcached_free: the handle's entry goes, with its hits and its queued writes. */
SHIM_HIDDEN void shim_pending_drop(const memcached_st *ptr);

/* Buffered writes (MEMCACHED_BEHAVIOR_BUFFER_REQUESTS): the handle buffers them; queue one
 * (MEMCACHED_BUFFERED); send what ptr queued, before any other call of the handle is served. */
SHIM_HIDDEN bool shim_buffering(memcached_st *ptr);
SHIM_HIDDEN memcached_return_t shim_queue_write(memcached_st *ptr, bool del, const char *k,
                                                size_t kl, const void *value, size_t vlen,
                                                uint32_t flags, int64_t exptime);
void shim_drain_writes(memcached_st *ptr);

/* memcached_quit of ptr: its next served call tells the daemon of a new connection
 * (shim_reconnect_due, which every served call makes). */
SHIM_HIDDEN void shim_quit_mark(memcached_st *ptr);
SHIM_HIDDEN void shim_reconnect_due(memcached_st *ptr);

/* The instances of ptr's servers that have reported a version (memcached_version): remember
 * (on) or forget (!on) them all; whether one is remembered. */
SHIM_HIDDEN void shim_versioned_mark(memcached_st *ptr, bool on);
SHIM_HIDDEN bool shim_versioned_has(const memcached_instance_st *in);

/* ---- the routing every interposed function opens with ----------------------------------------- */

/* NOT_SERVED(fn, args...): the call is not Nessie's (the process does not serve, or the handle,
 * the first argument, has no servers): forward it to the real fn, or fail it (strict). Else go
 * on, after telling the daemon of a reconnection that is due. */
#define FIRST_ARG(a, ...) (a)
#define NOT_SERVED(fn, ...)                                                     \
    do {                                                                        \
        if (!shim_serving() || shim_no_servers(FIRST_ARG(__VA_ARGS__)))          \
            return shim_refusing() && !shim_no_servers(FIRST_ARG(__VA_ARGS__))   \
                       ? MEMCACHED_CONNECTION_FAILURE                           \
                       : REAL(fn)(__VA_ARGS__);                                 \
        shim_reconnect_due(FIRST_ARG(__VA_ARGS__));                             \
    } while (0)

/* NOT_SERVED_KEY(fn, ptr, key, klen, args...): as NOT_SERVED, and a key the shim may not serve
 * goes to the real fn, which refuses it with its own message (shim_key_ok says why), unless the
 * ascii protocol cannot carry it: the shim answers BAD_KEY_PROVIDED (shim_key_refused_here). */
#define NOT_SERVED_KEY(fn, ptr, key, klen, ...)                                 \
    do {                                                                        \
        if (shim_serving() && !shim_key_ok((ptr), (key), (klen)))               \
            return shim_key_refused_here((ptr), (key), (klen))                  \
                       ? MEMCACHED_BAD_KEY_PROVIDED                             \
                       : REAL(fn)(__VA_ARGS__);                                 \
        NOT_SERVED(fn, __VA_ARGS__);                                            \
    } while (0)

#endif
