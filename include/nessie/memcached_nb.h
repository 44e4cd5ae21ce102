/*
 * memcached_nb.h - non-blocking extensions of the libmemcached API (Shankar et al., "High-
 * performance hybrid key-value store on modern clusters with RDMA interconnects and SSDs:
 * non-blocking extensions", Listing 1), served by libdeception.so.
 *
 * A program issues sets and gets without waiting for them, does other work, and completes them
 * with memcached_test (does not block) or memcached_wait (blocks). Up to NB_MAX_INFLIGHT
 * operations per thread are in flight at once, of them at most WIRE_STAGE_ITEMS - 1 gets (the
 * daemon keeps a channel's long values, waiting to be fetched, within that many items' room:
 * nessie/wire.h); issuing one more first completes the oldest (the oldest get, for a get).
 *
 * Buffers: the shim copies key and value into its channel when issuing (when the value fits the
 * channel's arena; a larger one is stored at once, before the call returns), so with Nessie the
 * i* and b* forms both let the caller reuse its buffers as soon as they return; the i* forms are
 * kept for programs written against the paper's API.
 *
 * Completion: req->complete becomes 1, req->rc holds the outcome (as the blocking call would have
 * returned it); for a get, req->value is the value (allocated with the handle's allocators, NULL
 * if none; the caller frees it), and the value_length and flags the get was given are filled.
 *
 * Without a reception (the shim's fallback), these run the blocking calls and complete at once.
 * A req must not be moved or reused until it is complete.
 */
#ifndef NESSIE_MEMCACHED_NB_H
#define NESSIE_MEMCACHED_NB_H

#include <libmemcached/memcached.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NB_MAX_INFLIGHT 32

typedef struct memcached_req {
    int complete;            /* 1 once the operation has completed */
    memcached_return_t rc;   /* its outcome, once complete */
    char *value;             /* get: the value, once complete (caller frees) */
    size_t value_length;     /* get: its length */
    uint32_t flags;          /* get: its flags */
    void *impl;              /* the shim's; do not touch */
} memcached_req;

/* Issue a set. flags points at the item's flags (NULL: 0). Returns MEMCACHED_SUCCESS once
 * issued (or completed), else the error (then req is complete with that rc). */
memcached_return_t memcached_iset(memcached_st *ptr, const char *key, size_t key_length,
                                  const char *value, size_t value_length, time_t expiration,
                                  uint32_t *flags, memcached_req *req);
memcached_return_t memcached_bset(memcached_st *ptr, const char *key, size_t key_length,
                                  const char *value, size_t value_length, time_t expiration,
                                  uint32_t *flags, memcached_req *req);

/* Issue a get. Returns NULL; *error is MEMCACHED_SUCCESS once issued (or completed), else the
 * error. value_length and flags (either may be NULL) are filled at completion, as are req->value,
 * req->value_length and req->flags. */
char *memcached_iget(memcached_st *ptr, const char *key, size_t key_length, size_t *value_length,
                     uint32_t *flags, memcached_req *req, memcached_return_t *error);
char *memcached_bget(memcached_st *ptr, const char *key, size_t key_length, size_t *value_length,
                     uint32_t *flags, memcached_req *req, memcached_return_t *error);

/* Complete req if its answer is there (never blocks); see req->complete. */
void memcached_test(memcached_st *ptr, memcached_req *req);
/* Complete req, blocking until it is. */
void memcached_wait(memcached_st *ptr, memcached_req *req);

#ifdef __cplusplus
}
#endif

#endif
