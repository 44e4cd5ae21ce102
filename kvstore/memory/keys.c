/* keys.c - see keys.h. */
#include "keys.h"

#include "hash.h"
#include "memory.h"

/* Way i's position is drawn from the digest by a finalizer over digest + i x this odd constant
 * (the golden ratio's), so the ways are as independent as the finalizer's outputs; a position
 * that collides with an earlier way's takes the next draw, deterministically, so every node
 * agrees (the protocol reads each position once per pass, so the N must differ).
 *
 * Placement from the view (issue 28): a draw that lands on a fenced node (membership.h) is
 * drawn again the same way, so a node lost from the view moves only the positions it held, each
 * to a live node, and every node with the same fence agrees where. A node that has not yet
 * installed the view still draws the lost node's position, but from its first read of that view
 * it touches nothing of the lost node (suspended), so its calls there fail and wait instead of
 * acting under the old placement (membership.h, "Acting on a view"). A fenced node that is
 * rejoining (a view readmitting it read) keeps its positions: calls that need them wait until
 * the view is acted on and the node is reachable (membership.h, "Rejoin").
 *
 * Node-id capacity (issue 30): positions are drawn over every id the cluster may ever have
 * (cfg.node_ids, fixed when it is made, like index_slots), and an id that is not a member
 * (absent) is drawn around as a fenced one is. So placement is a function of the set of placed
 * nodes alone: a node that joins takes exactly the draws that reach it before any other placed
 * node, about 1/(N+1) of the positions, and one that leaves gives up exactly its own, 1/N. At a
 * capacity equal to the node count, nothing is absent and the draws are the ones before
 * capacities existed (tests/unit/test_keys.c pins them). Each way costs about capacity/members
 * draws, so a capacity of a few times the node count is cheap and a far larger one is not. */
#define KEYS_WAY_STEP 0x9e3779b97f4a7c15ULL
/* Draws per way before a fenced position is kept anyway (its calls then fail at the fabric): only
 * a cluster with fewer live index slots than ways, or a broken hash, gets that far. */
#define KEYS_DRAWS_MAX 4096

static void plan_positions(const struct nessie_node *nd, uint64_t digest, uint64_t *pos)
{
    uint64_t total = (uint64_t)nd->cfg.node_ids * nd->cfg.index_slots;
    bool fence = mship_any_unplaced(&nd->view);
    for (uint32_t i = 0; i < nd->cfg.ways; i++) {
        uint32_t draws = 0;
        for (uint64_t draw = i;; draw += NESSIE_WAYS_MAX) {
            uint64_t p = hash_mix(digest + draw * KEYS_WAY_STEP) % total;
            bool dup = false;
            for (uint32_t j = 0; j < i; j++)
                dup = dup || pos[j] == p;
            uint32_t owner = (uint32_t)(p / nd->cfg.index_slots);
            bool out = fence && !mship_placed(&nd->view, owner) && ++draws < KEYS_DRAWS_MAX;
            if ((!dup || total <= i) && !out) {
                pos[i] = p;
                break;
            }
        }
    }
}

static uint32_t plan_filter(const struct nessie_node *nd, uint64_t digest)
{
    if (nd->cfg.filter_bits == 0)
        return 0;
    return (uint32_t)(hash_mix(digest ^ NESSIE_FILTER_SEED) & ((1u << nd->cfg.filter_bits) - 1));
}

void key_plan_make(struct key_plan *p, const struct nessie_node *nd, const void *key, size_t klen)
{
    uint64_t digest = hash_key(key, klen, NESSIE_HASH_SEED);
    p->key = key;
    p->klen = (uint32_t)klen;
    plan_positions(nd, digest, p->pos);
    p->filter = plan_filter(nd, digest);
    p->home = (uint32_t)(p->pos[0] / nd->cfg.index_slots);
}

void nessie_key_positions(const struct nessie_node *nd, const void *key, size_t key_len,
                          uint64_t *pos)
{
    plan_positions(nd, hash_key(key, key_len, NESSIE_HASH_SEED), pos);
}

uint32_t nessie_key_filter(const struct nessie_node *nd, const void *key, size_t len)
{
    return plan_filter(nd, hash_key(key, len, NESSIE_HASH_SEED));
}
