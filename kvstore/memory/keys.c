/* keys.c - see keys.h. */
#include "keys.h"

#include <string.h>

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

/* No override: placement as the view has it. */
#define KEYS_NO_OVERRIDE UINT32_MAX

/* The ways positions of the key with this digest, drawn around every node that is not placed;
 * node ov (unless KEYS_NO_OVERRIDE) counts as placed or not by ov_placed, whatever the view says:
 * a change of membership works out its two placements that way. */
static void plan_positions(const struct nessie_node *nd, uint64_t digest, uint64_t *pos,
                           uint32_t ov, bool ov_placed)
{
    uint64_t total = (uint64_t)nd->cfg.node_ids * nd->cfg.index_slots;
    bool fence = mship_any_unplaced(&nd->view) || (ov != KEYS_NO_OVERRIDE && !ov_placed);
    for (uint32_t i = 0; i < nd->cfg.ways; i++) {
        uint32_t draws = 0;
        for (uint64_t draw = i;; draw += NESSIE_WAYS_MAX) {
            uint64_t p = hash_mix(digest + draw * KEYS_WAY_STEP) % total;
            bool dup = false;
            for (uint32_t j = 0; j < i; j++)
                dup = dup || pos[j] == p;
            uint32_t owner = (uint32_t)(p / nd->cfg.index_slots);
            bool placed = owner == ov ? ov_placed : mship_placed(&nd->view, owner);
            bool out = fence && !placed && ++draws < KEYS_DRAWS_MAX;
            if ((!dup || total <= i) && !out) {
                pos[i] = p;
                break;
            }
        }
    }
}

/* The ways positions of the placement in force before the change word `change` (0: none) is
 * committed: an added node not yet placed, a retired one still placed. */
static void plan_before(const struct nessie_node *nd, uint64_t digest, uint64_t *pos,
                        uint32_t change)
{
    if (!change)
        plan_positions(nd, digest, pos, KEYS_NO_OVERRIDE, false);
    else
        plan_positions(nd, digest, pos, mship_change_node(change),
                       mship_change_kind(change) != MSHIP_CHANGE_ADD);
}

/* The plan's positions: the placement's ways, or during a change (membership.h, "Changes") the
 * union T: the placement before, in way order, then what the placement after adds, with each
 * position's role and the phase's no-insert bits. Returns the count. */
static uint32_t plan_all(const struct nessie_node *nd, uint64_t digest, uint64_t step,
                         uint64_t *pos, uint8_t *role, uint32_t *no_insert)
{
    const uint32_t ways = nd->cfg.ways;
    uint32_t change = mship_step_change(step);
    *no_insert = 0;
    plan_before(nd, digest, pos, change);
    if (!change) {
        memset(role, KEY_STAY, ways);
        return ways;
    }
    uint64_t after[NESSIE_WAYS_MAX];
    plan_positions(nd, digest, after, mship_change_node(change),
                   mship_change_kind(change) == MSHIP_CHANGE_ADD);
    uint32_t n = ways;
    for (uint32_t i = 0; i < ways; i++) {
        role[i] = KEY_LEAVING;
        for (uint32_t j = 0; j < ways; j++)
            if (after[j] == pos[i])
                role[i] = KEY_STAY;
    }
    for (uint32_t j = 0; j < ways; j++) {
        bool known = false;
        for (uint32_t i = 0; i < ways; i++)
            known = known || pos[i] == after[j];
        if (!known) {
            pos[n] = after[j];
            role[n++] = KEY_ARRIVING;
        }
    }
    enum key_role shut = mship_change_phase(change) == MSHIP_PHASE_ANNOUNCE ? KEY_ARRIVING
                                                                            : KEY_LEAVING;
    for (uint32_t i = 0; i < n; i++)
        if (role[i] == shut)
            *no_insert |= 1u << i;
    return n;
}

static uint32_t plan_filter(const struct nessie_node *nd, uint64_t digest)
{
    if (nd->cfg.filter_bits == 0)
        return 0;
    return (uint32_t)(hash_mix(digest ^ NESSIE_FILTER_SEED) & ((1u << nd->cfg.filter_bits) - 1));
}

void key_plan_make(struct key_plan *p, const struct nessie_node *nd, const void *key, size_t klen)
{
    key_plan_at(p, nd, key, klen, mship_step(&nd->view));
}

void key_plan_at(struct key_plan *p, const struct nessie_node *nd, const void *key, size_t klen,
                 uint64_t step)
{
    uint64_t digest = hash_key(key, klen, NESSIE_HASH_SEED);
    p->key = key;
    p->klen = (uint32_t)klen;
    p->step = step;
    p->n = plan_all(nd, digest, step, p->pos, p->role, &p->no_insert);
    p->filter = plan_filter(nd, digest);
    /* During a change, pos[0] is the placement before's: shipped calls go where they went
     * until the change is committed; but never to a node a retire retires, which writes
     * nothing new (R1, model/retire.pml): its keys' calls go to the node of their first
     * position elsewhere (the union T has one: every position after the retire is). */
    p->home = (uint32_t)(p->pos[0] / nd->cfg.index_slots);
    uint32_t change = mship_step_change(step);
    if (change && mship_change_kind(change) == MSHIP_CHANGE_RETIRE &&
        p->home == mship_change_node(change))
        for (uint32_t i = 1; i < p->n; i++)
            if (p->pos[i] / nd->cfg.index_slots != p->home) {
                p->home = (uint32_t)(p->pos[i] / nd->cfg.index_slots);
                break;
            }
}

void nessie_key_positions(const struct nessie_node *nd, const void *key, size_t key_len,
                          uint64_t *pos)
{
    plan_before(nd, hash_key(key, key_len, NESSIE_HASH_SEED), pos, mship_change(&nd->view));
}

uint32_t nessie_key_plan_positions(const struct nessie_node *nd, const void *key, size_t key_len,
                                   uint64_t pos[NESSIE_PLAN_MAX])
{
    uint8_t role[NESSIE_PLAN_MAX];
    uint32_t no_insert;
    return plan_all(nd, hash_key(key, key_len, NESSIE_HASH_SEED), mship_step(&nd->view), pos,
                    role, &no_insert);
}

uint32_t nessie_key_filter(const struct nessie_node *nd, const void *key, size_t len)
{
    return plan_filter(nd, hash_key(key, len, NESSIE_HASH_SEED));
}
