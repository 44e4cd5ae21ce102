/*
 * cache.h - the local cache of remote data table entries (paper 4.1.3, "cache consistency" in
 * 4.3.1): an LRU of DTE copies keyed by the ITE word that referred to them, one per worker
 * thread (no locks).
 *
 * Why keying by ITE is correct: an ITE word names one DTE, a new version of a key always gets a
 * new DTE (so a new ITE word), and a DTE is not reused within an expiration period of being
 * unlinked. A copy fetched through an ITE read at time t is therefore the truth about that ITE
 * until t + one period; each entry carries that expiry, and a hit through a fresh ITE read extends
 * it the same way. Only committed (immutable) DTEs are inserted, by the engine.
 */
#ifndef NESSIE_KVSTORE_CACHE_H
#define NESSIE_KVSTORE_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct nessie_cache;

struct cache_stats {
    uint64_t hits, misses, expired, evictions, inserts, too_big;
    uint64_t bytes, entries;
};

/* max_bytes: DTE bytes kept in all; max_entries: entry count bound. Either 0 gives a disabled
 * cache (every lookup misses, every insert is a no-op). Returns NULL on out of memory. */
struct nessie_cache *cache_create(size_t max_bytes, size_t max_entries);

/* Frees everything. NULL is a no-op. */
void cache_destroy(struct nessie_cache *c);

/*
 * Look up ite. An entry whose expiry is <= now_ns is evicted and reported as a miss. On a hit the
 * entry becomes most recently used, its expiry is raised to new_expiry_ns if that is later (never
 * lowered), *len is set, and the cached bytes are returned: valid until the next call on c.
 * Never allocates.
 */
const void *cache_get(struct nessie_cache *c, uint64_t ite, uint64_t now_ns,
                      uint64_t new_expiry_ns, uint32_t *len);

/*
 * Insert (or replace) a copy of data[0..len) under ite, expiring at expiry_ns, evicting least
 * recently used entries until it fits. An entry larger than max_bytes is not cached (too_big).
 * Returns 0, or -1 on out of memory, in which case the cache is as it was.
 */
int cache_put(struct nessie_cache *c, uint64_t ite, const void *data, uint32_t len,
              uint64_t expiry_ns);

/* Drop the entry for ite, if any. */
void cache_remove(struct nessie_cache *c, uint64_t ite);

/* Drop every entry (statistics other than bytes and entries are kept). */
void cache_clear(struct nessie_cache *c);

const struct cache_stats *cache_stats(const struct nessie_cache *c);

#endif
