/*
 * handle.c - the calls on a handle as a whole: memcached_flush (memcached's flush_all),
 * memcached_flush_buffers (the writes a buffering handle queued), memcached_quit and
 * memcached_free (the end of what the shim keeps for the handle).
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
