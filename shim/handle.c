/*
 * handle.c - the calls on a handle as a whole: memcached_flush (memcached's flush_all),
 * memcached_flush_buffers (the writes a buffering handle queued), memcached_quit and
 * memcached_free (the end of what the shim keeps for the handle), and the behaviours whose
 * setting quits the handle's connections (a reconnection, as memcached_quit).
 *
 * May call: common.h, the core (shim.h) and the channel (channel.h); no other family.
 */
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <libmemcached/memcached.h>

#include "channel.h"
#include "common.h"
#include "shim.h"

memcached_return_t memcached_flush(memcached_st *ptr, time_t expiration)
{
    NOT_SERVED(memcached_flush, ptr, expiration);
    if (!ptr)
        return MEMCACHED_INVALID_ARGUMENTS;
    shim_drain_writes(ptr);
    struct shim_ch *ch = shim_channel();
    if (!ch)
        return MEMCACHED_CONNECTION_FAILURE;
    /* expiration: memcached's flush_all N (seconds, or a unix time); 0 is at once. */
    return shim_status(shim_ch_flush(ch, (int64_t)expiration));
}

memcached_return_t memcached_flush_buffers(memcached_st *mem)
{
    NOT_SERVED(memcached_flush_buffers, mem);
    shim_drain_writes(mem); /* the queued writes; every other served call is complete already */
    return MEMCACHED_SUCCESS;
}

/* The library quits a handle's connections itself when it frees it: not a reconnection. */
static __thread bool freeing;

/* memcached_quit drops the handle's connections, and its next call takes a new one, which
 * memcached counts (total_connections): that call tells the daemon (shim_reconnect_due), so
 * quitting twice in a row counts one (shim_quit_mark). Queued writes go out first, as the library
 * writes them before its "quit". The library does the rest. */
void memcached_quit(memcached_st *ptr)
{
    if (ptr && shim_serving() && !shim_no_servers(ptr) && !freeing) {
        shim_drain_writes(ptr);
        shim_quit_mark(ptr);
    }
    void (*real)(memcached_st *) = REAL(memcached_quit);
    if (real)
        real(ptr);
}

void memcached_free(memcached_st *ptr)
{
    if (ptr && shim_serving())
        shim_drain_writes(ptr); /* the library writes queued commands out before it closes */
    if (ptr) {
        shim_pending_drop(ptr);
        shim_versioned_mark(ptr, false);
    }
    void (*real)(memcached_st *) = REAL(memcached_free);
    freeing = true;
    if (real)
        real(ptr);
    freeing = false;
}

/* Does setting this behaviour make the library quit the handle's connections? (Its send_quit in
 * memcached_behavior_set, libmemcached 1.1's behavior.cc: the transport's and the protocol's
 * settings, which an open connection cannot take on.) */
static bool quits_connections(memcached_behavior_t flag)
{
    switch (flag) {
    case MEMCACHED_BEHAVIOR_BINARY_PROTOCOL:
    case MEMCACHED_BEHAVIOR_NO_BLOCK:
    case MEMCACHED_BEHAVIOR_BUFFER_REQUESTS:
    case MEMCACHED_BEHAVIOR_USE_UDP:
    case MEMCACHED_BEHAVIOR_TCP_NODELAY:
    case MEMCACHED_BEHAVIOR_TCP_KEEPALIVE:
    case MEMCACHED_BEHAVIOR_SOCKET_SEND_SIZE:
    case MEMCACHED_BEHAVIOR_SOCKET_RECV_SIZE:
    case MEMCACHED_BEHAVIOR_TCP_KEEPIDLE:
        return true;
    default:
        return false;
    }
}

/* The setting is the library's. One that quits the handle's connections is a reconnection at
 * the handle's next call, which memcached counts (total_connections) as after memcached_quit:
 * php-memcached's getStats turns NO_BLOCK off and on around its stats call when BINARY is on,
 * and its stats_hang.phpt expects a second getStats to see one more connection then. */
memcached_return_t memcached_behavior_set(memcached_st *ptr, const memcached_behavior_t flag,
                                          uint64_t data)
{
    memcached_return_t (*real)(memcached_st *, memcached_behavior_t, uint64_t) =
        REAL(memcached_behavior_set);
    if (!real)
        return MEMCACHED_FAILURE;
    memcached_return_t rc = real(ptr, flag, data);
    if (rc == MEMCACHED_SUCCESS && ptr && quits_connections(flag) && shim_serving() &&
        !shim_no_servers(ptr) && !freeing)
        shim_quit_mark(ptr);
    return rc;
}
