/*
 * nessie_test.h - the engine's back doors for its tests and for nessie-stress: hooks between
 * protocol steps, an eviction observer, a key's index positions, and a node's fabric. Not
 * installed and not part of the API (nessie/nessie.h); the library still exports these symbols
 * (they are nessie_-prefixed), so the tests can link the shared library too.
 */
#ifndef NESSIE_KVSTORE_NESSIE_TEST_H
#define NESSIE_KVSTORE_NESSIE_TEST_H

#include <nessie/nessie.h>

struct fab;

/* The fabric node runs on (kvstore/fabric.h): for fault injection and raw region access. */
struct fab *nessie_node_fabric(struct nessie_node *node);

/*
 * Test hooks: points between protocol steps where a test can run other operations (on other
 * contexts) to reproduce a conflict case of Appendix A deterministically. NULL (the default)
 * costs one predictable branch per point.
 */
enum nessie_hook_point {
    NESSIE_HOOK_GET_ITE_READ,        /* GET read I_i (arg: i) */
    NESSIE_HOOK_GET_BEFORE_REVERSE,  /* GET about to start its reverse pass */
    NESSIE_HOOK_PUT_BEFORE_CAS,      /* PUT chose I_cnd (arg: cnd), about to CAS it */
    NESSIE_HOOK_PUT_AFTER_CAS,       /* PUT's CAS on I_cnd succeeded (arg: cnd) */
    NESSIE_HOOK_PUT_BEFORE_REVERSE,  /* PUT finished step 4 */
    NESSIE_HOOK_PUT_BEFORE_COMMIT,   /* PUT passed its reverse pass, about to commit */
    NESSIE_HOOK_MIGRATE_START,       /* MIGRATE about to read its source (arg: depth) */
    NESSIE_HOOK_MIGRATE_BEFORE_DST,  /* MIGRATE wrote its copy, about to CAS I_dst */
    NESSIE_HOOK_MIGRATE_AFTER_DST,   /* MIGRATE's CAS on I_dst succeeded */
    NESSIE_HOOK_PROMOTE_BEFORE_CAS,  /* GET wrote a flash item's copy in memory, about to swing
                                        I_i (arg: i) to it (promotion, issue 31) */
};
typedef void (*nessie_hook_fn)(struct nessie_ctx *ctx, enum nessie_hook_point point,
                               uint32_t arg, void *user);
/* Install (or with NULL, remove) the hook for every context of this process. Not thread-safe
 * against running operations: set it before starting them. */
void nessie_set_test_hook(nessie_hook_fn fn, void *user);

/*
 * Eviction observer, for tests and nessie-stress: called on the evicting thread right before an
 * eviction (or reclamation) of key starts (done=false) and when it ends (done=true, status
 * NESSIE_OK: the key was removed; NESSIE_TIMEOUT: unknown; anything else: no effect), so a
 * checker can put the removal into the key's history as the DELETE it is. Process-wide; set it
 * before operations start.
 */
typedef void (*nessie_evict_hook_fn)(void *user, const void *key, size_t key_len, bool done,
                                     int status);
void nessie_set_evict_hook(nessie_evict_hook_fn fn, void *user);
/* The same for an eviction whose key is not known to the evicting node: another node's flash
 * item (issue 31) taken out of global index position pos, its entry's filter bits filter (a
 * checker counts it as a removal, of unknown effect, of each key those two could be). Called
 * once, after the CAS, with its status. */
typedef void (*nessie_evict_anon_fn)(void *user, uint64_t pos, uint32_t filter, int status,
                                     uint64_t call_ns);
void nessie_set_evict_anon_hook(nessie_evict_anon_fn fn, void *user);

/* The N positions of a key (global ITE slot numbers: node * index_slots + slot), for tests:
 * nessie_key_positions. */
#include "memory/keys.h"

#endif
