/*
 * channel.h - the client side of a reception channel (include/nessie/wire.h). The shim keeps one
 * per application thread; test tools use it directly. A channel is used by one thread at a time.
 *
 * Every call returns an enum wire_status (>= 0), or a negative errno when the daemon cannot be
 * reached or has gone away (-ECONNREFUSED, -ENOENT, -EPIPE...): the channel is then dead, and
 * shim_ch_close() is all that is left to do with it.
 */
#ifndef NESSIE_SHIM_CHANNEL_H
#define NESSIE_SHIM_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nessie/wire.h>

struct shim_ch;

/* Connect to the daemon at path and get a channel. Returns WIRE_OK and *out, a wire error the
 * daemon answered (WIRE_E_VERSION, WIRE_E_BUSY...), or -errno. */
int shim_ch_open(const char *path, struct shim_ch **out);
void shim_ch_close(struct shim_ch *ch);
uint32_t shim_ch_arena_bytes(const struct shim_ch *ch);
uint32_t shim_ch_max_item_size(const struct shim_ch *ch);

/* Where a value read is put: alloc(user, n) returns n bytes (the value and a NUL after it), or
 * NULL; release(user, p) frees what alloc returned. A NULL struct shim_alloc means malloc/free.
 * The shim passes the handle's allocators, so a value is copied once, from the channel's arena
 * straight into the memory the application frees. */
struct shim_alloc {
    void *(*alloc)(void *user, size_t n);
    void (*release)(void *user, void *p);
    void *user;
};

/* A value read, in memory from the struct shim_alloc given (NUL-terminated), with its flags and
 * version. */
struct shim_value {
    void *data;
    uint32_t len;
    uint32_t flags;
    uint64_t version;
};

int shim_ch_get(struct shim_ch *ch, const void *key, size_t klen, const struct shim_alloc *a,
                struct shim_value *out);
int shim_ch_store(struct shim_ch *ch, enum wire_store_mode mode, const void *key, size_t klen,
                  const void *value, size_t vlen, uint32_t flags, int64_t exptime, uint64_t cas,
                  uint64_t *version_out);
int shim_ch_delete(struct shim_ch *ch, const void *key, size_t klen);
int shim_ch_arith(struct shim_ch *ch, const void *key, size_t klen, int incr, uint64_t delta,
                  uint64_t *result);
int shim_ch_touch(struct shim_ch *ch, const void *key, size_t klen, int64_t exptime);
/* flush_all; exptime > 0: at that time (memcached's flush_all N). */
int shim_ch_flush(struct shim_ch *ch, int64_t exptime);

/* Multi-get: calls hit(user, index, value) for each key found (the value is malloc'd, the
 * callee's to free). Returns WIRE_OK, or the first error (the keys after it are not reported). */
typedef void (*shim_hit_fn)(void *user, size_t index, struct shim_value *v);
int shim_ch_mget(struct shim_ch *ch, const void *const *keys, const size_t *klens, size_t n,
                 shim_hit_fn hit, void *user);

/* Dump (wire.h "Dump"): calls key(user, key, klen) for each key the daemon's node holds, chunk
 * after chunk from cursor (0: the start), until the walk is done or key returns false (then it
 * stops there). The key is NUL-terminated, valid during the call only. part: the bytes of the
 * blocking slot's arena part each request uses at most (0: all of it; tests use small parts to
 * make the walk take many chunks). Returns WIRE_OK; WIRE_FABRIC_ERROR when the walk went to its
 * end but some chunk left out keys it could not judge; else the first error (the walk stops). */
typedef bool (*shim_key_fn)(void *user, const char *key, size_t klen);
int shim_ch_dump(struct shim_ch *ch, uint64_t cursor, uint32_t part, shim_key_fn key,
                 void *user);

/*
 * Asynchronous use: up to SHIM_CH_ASYNC requests in flight on the channel besides the blocking
 * calls, each in a slot of its own with its own part of the arena (wire.h step 3). A post copies
 * key and value into the channel (the caller's buffers are free at once) and returns a ticket in
 * *ticket; poll (1: done, *rep filled; 0: not yet) or wait (the reply's status, *rep filled)
 * for its reply, once (-EINVAL for a ticket already answered, or not posted); a get's value is then
 * taken with shim_ch_get_value (which may fetch the rest of a long value, through the blocking
 * slot's part of the arena: never call it inside a blocking call); shim_ch_release gives
 * the ticket back, whatever happened (every ticket must be released, once; one not answered yet
 * is waited for first, since its slot and arena part are the daemon's until then).
 * Posting returns -EBUSY when every async slot is taken, and -E2BIG when key and value do not fit
 * the slot's part (nothing posted in either case: the caller runs the call blocking instead).
 */
#define SHIM_CH_ASYNC 32
int shim_ch_post_store(struct shim_ch *ch, enum wire_store_mode mode, const void *key,
                       size_t klen, const void *value, size_t vlen, uint32_t flags,
                       int64_t exptime, int *ticket);
int shim_ch_post_get(struct shim_ch *ch, const void *key, size_t klen, int *ticket);
int shim_ch_poll(struct shim_ch *ch, int ticket, struct wire_rep *rep);
int shim_ch_wait(struct shim_ch *ch, int ticket, struct wire_rep *rep);
int shim_ch_get_value(struct shim_ch *ch, int ticket, const struct wire_rep *rep,
                      const struct shim_alloc *a, struct shim_value *out);
void shim_ch_release(struct shim_ch *ch, int ticket);
/* Async requests posted and not released. */
unsigned shim_ch_async_busy(const struct shim_ch *ch);

/* Tell the daemon that a handle of this thread reconnected (memcached_quit; WIRE_NOOP_RECONNECT):
 * it counts one connection more. Returns WIRE_OK or the channel's error. */
int shim_ch_reconnected(struct shim_ch *ch);

/* One raw request, as given (tests send malformed ones with it): req is copied into the blocking
 * slot as is (its arena_off and arena_len too), arena_data (arena_len bytes) into the arena at
 * its start. *rep receives the reply. */
int shim_ch_raw(struct shim_ch *ch, const struct wire_req *req, const void *arena_data,
                size_t arena_len, struct wire_rep *rep);
/* The channel's shared header, and a ring of its doorbell, for tests that write garbage into the
 * ring and make the worker look at it. */
struct wire_channel *shim_ch_header(struct shim_ch *ch);
void shim_ch_kick(struct shim_ch *ch);
/* Its descriptors, for tests that misbehave with them (truncate the region, hang up). */
int shim_ch_region_fd(const struct shim_ch *ch);
int shim_ch_socket_fd(const struct shim_ch *ch);

/* The daemon's stats text ("STAT name value\r\n"... "END\r\n"), malloc'd, NUL-terminated. */
int shim_stats(const char *path, char **text);

#endif
