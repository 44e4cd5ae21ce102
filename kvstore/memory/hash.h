/*
 * hash.h - the key hash behind cuckoo placement and filter bits. Every node must compute the
 * same positions for a key, so this function is part of the cluster's format: changing it
 * re-homes every key.
 */
#ifndef NESSIE_KVSTORE_HASH_H
#define NESSIE_KVSTORE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* 64-bit hash of key under seed (multiply-xorshift over 8-byte words, murmur-style finalizer). */
uint64_t hash_key(const void *key, size_t len, uint64_t seed);

/* MurmurHash3's 64-bit finalizer: a bijection that spreads every input bit over the output, to
 * draw several independent-looking values from one digest (keys.c). */
static inline uint64_t hash_mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* Marsaglia's xorshift64: the next pseudo-random number from state *x (never 0), for back-off
 * jitter, victim sampling and the access counter's coin. Not part of the cluster's format. */
static inline uint64_t hash_xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

#endif
