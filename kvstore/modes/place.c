/*
 * place.c - where a value goes when its writer's node is full (issue 29): the cluster's memory,
 * wherever its clients run.
 *
 * A client-driven PUT writes its value into its own node's data table (the paper's decoupling),
 * so a node's clients could use only that node's memory. Here, a store whose node has no
 * unassigned page left, nor free slots of its size class to spare, is shipped to a peer that has
 * either (the server-driven path, sd.c: the
 * peer runs the whole store, client-driven, and writes the value into its own table); once no
 * node has spare pages, to the node whose recent eviction victims were read least recently, so
 * that what the cluster gives up for a new value is its coldest, not the coldest of the busiest
 * node. A node's own writes stay local while it has room: the fast path pays one relaxed load.
 *
 * Why shipping the store rather than lending blocks of a peer's region to allocate in
 * one-sidedly (FaRM, FUSEE): only the owner of a region allocates in it (DESIGN.md), and the
 * recycling argument rests on that (the owner's quarantine clock, its free lists, generations
 * bumped on its reuses, its evictor's exact-word CAS). A placed value is an ordinary entry of
 * the peer's, written by the peer through the protocol as any shipped write is, so everything
 * the protocol, the model and the fault injection establish for shipped writes holds for it
 * unchanged, as do the failover rules (a lost node loses what is placed on it). The price is a
 * round trip and a peer's server time per placed write, paid only by writers whose node is full.
 * Values larger than a ring slot are not shipped: they stay local (and evict there).
 *
 * The figures (data_hdr.room_spare_pages, room_classes, room_victim_ms) are published by each
 * owner (slab.c, evict.c) and read here with one READ per peer, at most once every
 * PLACE_REFRESH_NS per node, by whichever call finds them old.
 */
#include <stdlib.h>

#include "modes.h"
#include "memory/hash.h"

/* Tunables, with their reasons:
 * - PLACE_REFRESH_NS: peers' figures are read at most this often (one READ per peer): a page of
 *   64 KiB fills with 1 KiB values in tens of ms at full speed, so a figure 10 ms old places at
 *   most a few values on a node that has just filled (they evict there, as any write does);
 * - PLACE_MIN_SPARE: a peer with fewer spare pages counts as full: its last pages go to its own
 *   writers, whose writes would otherwise be shipped in turn;
 * - PLACE_COLDER_NUM/DEN: once every node is full, a value is shipped only to a node whose
 *   victims have been idle a quarter longer than this node's: a shipped write costs a round trip
 *   and a peer's server, and victims' ages are smoothed estimates (a hysteresis, too, so that
 *   two nodes of about equal victims do not trade writes back and forth). */
#define PLACE_REFRESH_NS 10000000ULL
#define PLACE_MIN_SPARE 2
#define PLACE_COLDER_NUM 5
#define PLACE_COLDER_DEN 4

/* What this node last read of each peer's room (its data_hdr figures), and when: written by the
 * one call that won the refresh, read by every call of the node (relaxed: a hint). */
struct place_state {
    _Atomic uint64_t read_ns;
    struct place_peer {
        _Atomic uint64_t spare, victim_ms, classes;
    } peer[];
};

int place_open(struct nessie_node *nd)
{
    nd->place = calloc(1, sizeof(*nd->place) + nd->cfg.node_ids * sizeof(struct place_peer));
    if (!nd->place)
        return NESSIE_NO_MEMORY;
    /* Until a first read: no room, and victims read "now" (never colder than ours). */
    for (uint32_t p = 0; p < nd->cfg.node_ids; p++)
        atomic_init(&nd->place->peer[p].victim_ms, UINT64_MAX);
    return NESSIE_OK;
}

void place_close(struct nessie_node *nd)
{
    free(nd->place);
    nd->place = NULL;
}

/* Read every reachable peer's room figures if the last read is PLACE_REFRESH_NS old (one
 * thread of the node at a time; the others use the figures as they are). A peer that cannot be
 * read counts as full with victims read just now (the hottest), so nothing is placed on it until
 * it can be read. */
static void place_refresh(struct nessie_ctx *ctx)
{
    struct nessie_node *nd = ctx->node;
    struct place_state *ps = nd->place;
    uint64_t now = nessie_mono_ns(), at = atomic_load_explicit(&ps->read_ns, memory_order_relaxed);
    if (now - at < PLACE_REFRESH_NS ||
        !atomic_compare_exchange_strong_explicit(&ps->read_ns, &at, now, memory_order_relaxed,
                                                 memory_order_relaxed))
        return;
    for (uint32_t p = 0; p < nd->cfg.node_ids; p++) {
        if (p == nd->cfg.self)
            continue;
        uint64_t fig[DATA_HDR_ROOM_BYTES / 8] = {0, 0, 0};
        struct fab_wr wr = {.opcode = FAB_OP_READ, .node = p, .region = FAB_REGION_DATA,
                            .offset = DATA_HDR_OFF_ROOM, .local = fig, .length = sizeof(fig)};
        if (mship_unreachable(&nd->view, p) || fab_exec(ctx->ep, &wr) != FAB_OK) {
            fig[0] = 0;          /* no spare page */
            fig[1] = UINT64_MAX; /* victims read "now": never colder than ours */
            fig[2] = 0;          /* no class with room */
        }
        atomic_store_explicit(&ps->peer[p].spare, fig[0], memory_order_relaxed);
        atomic_store_explicit(&ps->peer[p].victim_ms, fig[1], memory_order_relaxed);
        atomic_store_explicit(&ps->peer[p].classes, fig[2], memory_order_relaxed);
    }
}

/* How long ago (ms, realtime) a node's victims were last read; a full node that has not evicted
 * yet gives up items nobody displaced: as cold as can be. */
static uint64_t victim_age(uint64_t victim_ms, uint64_t now_ms)
{
    if (victim_ms == 0)
        return UINT64_MAX / PLACE_COLDER_NUM;
    return now_ms > victim_ms ? now_ms - victim_ms : 0;
}

/* Whether a store may be placed on peer p: a placed member (not an absent id, nor one retired
 * and still reachable: it serves nothing), reachable, not being added or retired (a node being
 * retired writes nothing new: R1), and its servers not shunned. */
static bool place_may(struct nessie_ctx *ctx, uint32_t p)
{
    const struct nessie_node *nd = ctx->node;
    return mship_placed(&nd->view, p) && !mship_unreachable(&nd->view, p) &&
           !mship_changing(&nd->view, p) && !sd_home_shunned(ctx, p);
}

uint32_t place_target(struct nessie_ctx *ctx, uint32_t key_len, size_t value_len)
{
    struct nessie_node *nd = ctx->node;
    const uint32_t self = nd->cfg.self;
    /* The fast path: this node has room. */
    if (nd->cfg.node_ids == 1 || __atomic_load_n(&nd->hdr->room_spare_pages, __ATOMIC_RELAXED) > 0)
        return self;
    int cls = slab_class_for(&nd->slab, dte_size(key_len, (uint32_t)value_len));
    if (cls < 0)
        return self; /* too big for any slot: the call says so itself */
    const uint64_t bit = 1ULL << cls;
    if (__atomic_load_n(&nd->hdr->room_classes, __ATOMIC_RELAXED) & bit)
        return self; /* its class has free slots to spare here */
    place_refresh(ctx);
    struct place_state *ps = nd->place;
    /* A peer with room: the most spare pages, or free slots of the class to spare (ties, such
     * as several peers with the class's room only, are split by where the scan starts). */
    uint32_t best = self;
    uint64_t best_score = 0;
    const uint32_t n = nd->cfg.node_ids, start = (uint32_t)(hash_xorshift(&ctx->rng) % n);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t p = (start + i) % n;
        uint64_t spare = atomic_load_explicit(&ps->peer[p].spare, memory_order_relaxed);
        bool room = spare >= PLACE_MIN_SPARE ||
                    (atomic_load_explicit(&ps->peer[p].classes, memory_order_relaxed) & bit);
        /* score: spare pages, plus one so that a class's room alone also counts */
        if (p != self && room && spare + 1 > best_score && place_may(ctx, p)) {
            best = p;
            best_score = spare + 1;
        }
    }
    if (best != self)
        return best;
    /* Every node is full: where the coldest items go. */
    uint64_t now_ms = nessie_real_ns() / 1000000ULL;
    uint64_t mine = victim_age(__atomic_load_n(&nd->hdr->room_victim_ms, __ATOMIC_RELAXED), now_ms);
    uint64_t best_age = mine / PLACE_COLDER_DEN * PLACE_COLDER_NUM;
    for (uint32_t p = 0; p < nd->cfg.node_ids; p++) {
        if (p == self || !place_may(ctx, p))
            continue;
        uint64_t age = victim_age(atomic_load_explicit(&ps->peer[p].victim_ms,
                                                       memory_order_relaxed), now_ms);
        if (age > best_age) {
            best = p;
            best_age = age;
        }
    }
    return best;
}
