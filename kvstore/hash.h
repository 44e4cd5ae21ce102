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

#endif
