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

/* Positions a plan may hold: a key's ways, and during a change of membership (issue 30) as many
 * more, the positions the change gives it (the union of the placements before and after). */
#define NESSIE_PLAN_MAX (2 * NESSIE_WAYS_MAX)

/* What a change of membership does to one of a plan's positions. */
enum key_role {
    KEY_STAY = 0, /* the key's position before the change and after */
    KEY_LEAVING,  /* before only: its entry moves to the key's arriving position */
    KEY_ARRIVING, /* after only */
};

/* A key's places, from one hash of its bytes. The key itself is borrowed: the plan lives no
 * longer than the call whose key it names.
 *
 * During a change of membership (membership.h, "Changes") the plan is the union T of the
 * placements before and after: the positions before, in their way order, then those the change
 * adds, so every position a key can be at is read, and a reader meets a leaving entry before the
 * copy the mover makes of it at an arriving position. no_insert says which positions the change's
 * phase keeps from taking a new entry (an insert, or a MIGRATE's copy): the arriving ones while
 * it is announced (nodes on the placement before do not read them), the leaving ones while
 * entries move (the mover's pass over them must find everything that is there). */
struct key_plan {
    const unsigned char *key;
    uint32_t klen;
    uint32_t home;                  /* the node of pos[0]: where a shipped call runs */
    uint32_t filter;                /* the filter bits of its ITEs (paper 4.3.2) */
    uint32_t n;                     /* positions in pos: the ways, up to twice that in a change */
    uint32_t no_insert;             /* bit i: pos[i] takes no new entry (0 outside a change) */
    uint64_t step;                  /* the placement's step it was made at (mship_step) */
    uint8_t role[NESSIE_PLAN_MAX];  /* enum key_role of each position (all KEY_STAY outside) */
    uint64_t pos[NESSIE_PLAN_MAX];  /* global ITE positions I_1..I_n (node * index_slots + slot),
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
/* The same at a given step of placement (mship_step: one the caller read), not the current one:
 * what a call that finds the placement moved plans again with (protocol.h, RUN_ATTEMPTS). */
void key_plan_at(struct key_plan *p, const struct nessie_node *nd, const void *key, size_t klen,
                 uint64_t step);

/* The same figures one at a time, for what is not a call (the sweep, the dump, the evictor,
 * tests): each hashes the key once. nessie_key_positions fills the ways positions of the current
 * placement (the one before a change in progress); nessie_key_plan_positions fills every
 * position a key's entry may be at now (the plan's n, returned: the union T during a change). */
void nessie_key_positions(const struct nessie_node *nd, const void *key, size_t key_len,
                          uint64_t *pos);
uint32_t nessie_key_plan_positions(const struct nessie_node *nd, const void *key, size_t key_len,
                                   uint64_t pos[NESSIE_PLAN_MAX]);
uint32_t nessie_key_filter(const struct nessie_node *nd, const void *key, size_t len);

#endif
