/*
 * keys.h - where a key lives in the cluster: its N index positions, the filter bits its entries
 * carry, and its home node, worked out once per call into a plan (issue 27) that every step of
 * the call uses. Every node must work out the same plan for a key, so this is part of the
 * cluster's format (with hash.h): changing it re-homes every key.
 */
#ifndef NESSIE_KVSTORE_KEYS_H
#define NESSIE_KVSTORE_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include <nessie/nessie.h>

/* Seeds of the key's digest and of the filter bits drawn from it. */
#define NESSIE_HASH_SEED 0x6e65737369650000ULL
#define NESSIE_FILTER_SEED 0x66696c7465720000ULL

/* A key's places, from one hash of its bytes. The key itself is borrowed: the plan lives no
 * longer than the call whose key it names. */
struct key_plan {
    const unsigned char *key;
    uint32_t klen;
    uint32_t home;                 /* the node of pos[0]: where a shipped call runs */
    uint32_t filter;               /* the filter bits of its ITEs (paper 4.3.2) */
    uint64_t pos[NESSIE_WAYS_MAX]; /* global ITE positions I_1..I_n (node * index_slots + slot),
                                      all different */
};

/* Whether key is one a call may name: NESSIE_OK, or NESSIE_BAD_KEY (NULL, empty, or longer than
 * NESSIE_KEY_MAX, memcached's 250 bytes). */
static inline int key_check(const void *key, size_t klen)
{
    return (!key || klen == 0 || klen > NESSIE_KEY_MAX) ? NESSIE_BAD_KEY : NESSIE_OK;
}

/* Work out the plan of key (klen bytes, already checked by the caller) on nd's geometry. Never
 * fails; reads no memory but the key's. */
void key_plan_make(struct key_plan *p, const struct nessie_node *nd, const void *key, size_t klen);

/* The same figures one at a time, for what is not a call (the sweep, the dump, the evictor,
 * tests): each hashes the key once. */
void nessie_key_positions(const struct nessie_node *nd, const void *key, size_t key_len,
                          uint64_t *pos);
uint32_t nessie_key_filter(const struct nessie_node *nd, const void *key, size_t len);

#endif
