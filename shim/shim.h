/*
 * shim.h - the interposition core of libdeception.so (deception.c): the real libmemcached, the
 * process's serving decision, and this thread's channel. Every other part of the shim sits on it
 * (the API families through common.h); it calls none of them: what rides on a channel besides
 * the blocking calls learns that the channel went through the channel watch below.
 */
#ifndef NESSIE_SHIM_SHIM_H
#define NESSIE_SHIM_SHIM_H

#include <stdbool.h>

#include "channel.h"

/* The longest key libmemcached sends, namespace prefix included: memcached's limit, the wire's. */
#define SHIM_KEY_MAX WIRE_KEY_MAX

/* The real library's function `name` (never ours), or NULL. */
void *shim_real(const char *name);

/* REAL(memcached_set) is the real memcached_set, typed; resolved once per call site. */
#define REAL(fn)                                                             \
    ({                                                                       \
        static __typeof__(&fn) real_##fn;                                    \
        __typeof__(&fn) f_ = __atomic_load_n(&real_##fn, __ATOMIC_ACQUIRE);  \
        if (!f_) {                                                           \
            f_ = (__typeof__(&fn))shim_real(#fn);                            \
            __atomic_store_n(&real_##fn, f_, __ATOMIC_RELEASE);              \
        }                                                                    \
        f_;                                                                  \
    })

/* A function the shim's files share that libdeception.so does not export: an exported name is
 * one the program and its libraries may bind to. */
#define SHIM_HIDDEN __attribute__((visibility("hidden")))

/* The process serves calls from Nessie (decided at the first call, never changed). */
bool shim_serving(void);
/* NESSIE_STRICT=1 and no daemon: calls fail with MEMCACHED_CONNECTION_FAILURE. */
bool shim_refusing(void);

/* The daemon's socket this process uses (valid once shim_serving() was called). */
const char *shim_socket_path(void);

/* This thread's channel (opened on first use in this thread, or in a forked child), or NULL if
 * the daemon cannot be reached now. */
struct shim_ch *shim_channel(void);
/* The channel returned an error from the transport (negative status): drop it. While the thread
 * holds its channel (shim_channel_hold), it is dropped when the hold ends instead. */
void shim_channel_failed(void);
/* Hold (true) or release (false) this thread's channel: a caller that keeps using the channel
 * across calls of the program's (memcached_dump's callbacks, which may make calls of their own
 * that fail) must not see it freed under it. Holds nest. */
void shim_channel_hold(bool hold);

/* What rides on a thread's channel besides the blocking calls (nb.c's operations in flight) is
 * told when the channel goes, through the functions its owner registers once, at load:
 * lost: the channel failed under this thread (shim_channel_failed): complete what is in flight
 * with MEMCACHED_CONNECTION_FAILURE; dropped: this thread exits, or is a forked child whose
 * channels were its parent's: forget what was in flight without touching it (the requests may be
 * gone with the thread). The core calls up only through this, so it includes no family's header. */
struct shim_channel_watch {
    void (*lost)(void);
    void (*dropped)(void);
};
SHIM_HIDDEN void shim_channel_watch(const struct shim_channel_watch *w);

#endif
