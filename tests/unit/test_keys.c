/*
 * test_keys.c - a key's plan (kvstore/memory/keys.c) is the cluster's format: every node must
 * draw the same positions, filter bits and home for a key, and a daemon of another build must
 * draw what the running ones do (keys.h: changing it re-homes every key). These golden vectors
 * pin the placement as it is, with all nodes placed and with one fenced (the failover redraw),
 * so that a change of the formula (issue 30's node-id capacity, a faster hash) shows here: the
 * checksums of 100,000 keys' plans at three configurations. Issue 30's node-id capacity is
 * checked here too: at a capacity equal to the node count it is the pinned placement, and an add
 * or a retire moves about 1/N of the positions, each to (or from) the node that changes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memory/memory.h"
#include "protocol/nessie_test.h"
#include <nessie/nessie.h>

#define KEYS 100000
/* Recorded from keys.c at 7b020ab (issue 28's placement); a change of one is a format change. */
#define GOLDEN_3x1024x3 0x9c3f260fa2f77b36ULL
#define GOLDEN_5x4096x4 0x38daad58c09c6a4eULL
#define GOLDEN_3x1024x3_FENCED_2 0x8ef5d7633c0d9e02ULL

/* FNV-1a over the 8 bytes of v, into *h. */
static void fnv(uint64_t *h, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        *h ^= (v >> (8 * i)) & 0xFF;
        *h *= 0x100000001b3ULL;
    }
}

static char node_name[64];

/* Open node 0 of a cluster of `nodes` members and node-id capacity node_ids (0: nodes), with
 * its own regions only (a plan needs no peer). Close it with close_node. */
static struct nessie_node *open_node(uint32_t nodes, uint32_t node_ids, uint64_t index_slots,
                                     uint32_t ways)
{
    static unsigned seq;
    snprintf(node_name, sizeof(node_name), "test-keys-%d-%u", (int)getpid(), seq++);
    struct nessie_config cfg;
    nessie_config_defaults(&cfg);
    cfg.cluster = node_name;
    cfg.nodes = nodes;
    cfg.node_ids = node_ids;
    cfg.self = 0;
    cfg.index_slots = index_slots;
    cfg.ways = ways;
    cfg.data_bytes = 1 << 20;
    cfg.max_item_size = 4096;
    struct nessie_node *nd;
    assert_int_equal(nessie_node_open(&cfg, &nd), NESSIE_OK);
    return nd;
}

static void close_node(struct nessie_node *nd)
{
    nessie_node_close(nd);
    fab_unlink(FAB_BACKEND_SHM, node_name, 0);
}

/* Open node 0 of a cluster of `nodes` (capacity node_ids), fence `fenced` (a node id, or -1) by
 * a view, and checksum the plans of KEYS keys: positions, filter bits, home. */
static uint64_t plans_checksum_at(uint32_t nodes, uint32_t node_ids, uint64_t index_slots,
                                  uint32_t ways, int fenced)
{
    struct nessie_node *nd = open_node(nodes, node_ids, index_slots, ways);
    if (fenced >= 0) {
        struct nessie_view *v = calloc(1, sizeof(*v));
        assert_non_null(v);
        v->epoch = 2;
        v->nmembers = nodes;
        for (uint32_t i = 0; i < nodes; i++)
            v->members[i] = (struct nessie_view_member){
                .node = i, .incarnation = i == 0 ? nessie_node_incarnation(nd) : 1,
                .state = (int)i == fenced ? NESSIE_MEMBER_GONE : NESSIE_MEMBER_LIVE};
        assert_int_equal(nessie_view_install(nd, v), NESSIE_OK);
        free(v);
    }
    uint64_t h = 0xcbf29ce484222325ULL;
    char k[32];
    for (int i = 0; i < KEYS; i++) {
        int len = snprintf(k, sizeof(k), "key:%08d", i);
        struct key_plan kp;
        key_plan_make(&kp, nd, k, (size_t)len);
        for (uint32_t w = 0; w < ways; w++) {
            fnv(&h, kp.pos[w]);
            if (fenced >= 0)
                assert_int_not_equal(kp.pos[w] / index_slots, (uint64_t)fenced);
        }
        fnv(&h, kp.filter);
        fnv(&h, kp.home);
    }
    close_node(nd);
    return h;
}

static uint64_t plans_checksum(uint32_t nodes, uint64_t index_slots, uint32_t ways, int fenced)
{
    return plans_checksum_at(nodes, 0, index_slots, ways, fenced);
}

/* The positions of KEYS keys (ways each, key-major) as node nd draws them; free() them. */
static uint64_t *plans_positions(struct nessie_node *nd, uint32_t ways)
{
    uint64_t *pos = calloc((size_t)KEYS * ways, sizeof(*pos));
    assert_non_null(pos);
    char k[32];
    for (int i = 0; i < KEYS; i++) {
        int len = snprintf(k, sizeof(k), "key:%08d", i);
        struct key_plan kp;
        key_plan_make(&kp, nd, k, (size_t)len);
        memcpy(&pos[(size_t)i * ways], kp.pos, ways * sizeof(*pos));
    }
    return pos;
}

/* Of the positions in a and b (KEYS keys' plans), how many differ, and of those how many moved
 * to a node other than `to` (or were on a node other than `from`, when from >= 0). */
struct moved {
    uint64_t moved, elsewhere;
};
static struct moved plans_moved(const uint64_t *a, const uint64_t *b, uint32_t ways,
                                uint64_t index_slots, int from, int to)
{
    struct moved m = {0, 0};
    for (size_t i = 0; i < (size_t)KEYS * ways; i++) {
        if (a[i] == b[i])
            continue;
        m.moved++;
        if ((to >= 0 && b[i] / index_slots != (uint64_t)to) ||
            (from >= 0 && a[i] / index_slots != (uint64_t)from))
            m.elsewhere++;
    }
    return m;
}

/* The checksum, printed when it differs so that an intended change of format can record it. */
static void expect_checksum(uint64_t got, uint64_t want, const char *what)
{
    if (got != want)
        fprintf(stderr, "%s: plans checksum 0x%016llx, pinned 0x%016llx\n", what,
                (unsigned long long)got, (unsigned long long)want);
    assert_true(got == want);
}

static void test_plans_are_pinned(void **state)
{
    (void)state;
    expect_checksum(plans_checksum(3, 1024, 3, -1), GOLDEN_3x1024x3, "3 nodes x 1024 slots, 3 ways");
    expect_checksum(plans_checksum(5, 4096, 4, -1), GOLDEN_5x4096x4, "5 nodes x 4096 slots, 4 ways");
}

/* With node 2 fenced, its positions are drawn again (on live nodes only), the others stay. */
static void test_plans_with_a_fence_are_pinned(void **state)
{
    (void)state;
    expect_checksum(plans_checksum(3, 1024, 3, 2), GOLDEN_3x1024x3_FENCED_2,
                    "3 nodes x 1024 slots, 3 ways, node 2 fenced");
}

/* Issue 30: a capacity equal to the node count is the placement before capacities existed. */
static void test_full_capacity_is_the_pinned_placement(void **state)
{
    (void)state;
    expect_checksum(plans_checksum_at(3, 3, 1024, 3, -1), GOLDEN_3x1024x3,
                    "3 nodes of capacity 3 x 1024 slots, 3 ways");
    expect_checksum(plans_checksum_at(3, 3, 1024, 3, 2), GOLDEN_3x1024x3_FENCED_2,
                    "3 nodes of capacity 3 x 1024 slots, 3 ways, node 2 fenced");
}

/* Ids past the members hold no position and are never a key's home; the ways stay distinct. */
static void test_absent_ids_hold_nothing(void **state)
{
    (void)state;
    const uint32_t ways = 4;
    const uint64_t slots = 1024;
    struct nessie_node *nd = open_node(3, 8, slots, ways);
    uint64_t per_node[8] = {0};
    char k[32];
    for (int i = 0; i < KEYS; i++) {
        int len = snprintf(k, sizeof(k), "key:%08d", i);
        struct key_plan kp;
        key_plan_make(&kp, nd, k, (size_t)len);
        assert_true(kp.home < 3);
        for (uint32_t w = 0; w < ways; w++) {
            per_node[kp.pos[w] / slots]++;
            for (uint32_t j = 0; j < w; j++)
                assert_true(kp.pos[j] != kp.pos[w]);
        }
    }
    for (uint32_t n = 3; n < 8; n++)
        assert_int_equal(per_node[n], 0);
    /* ... and the members share the positions evenly (within 3 %). */
    for (uint32_t n = 0; n < 3; n++)
        assert_true(per_node[n] > (uint64_t)KEYS * ways / 3 * 97 / 100 &&
                    per_node[n] < (uint64_t)KEYS * ways / 3 * 103 / 100);
    close_node(nd);
}

/* An added node takes about 1/(N+1) of the positions (N members before), and what moves, moves
 * to it: the "<= 1.1/N of the index positions move (N after the add)". */
static void test_an_add_moves_one_in_n(void **state)
{
    (void)state;
    const uint32_t ways = 3, cap = 8;
    const uint64_t slots = 4096;
    for (uint32_t n = 2; n < cap; n++) {
        struct nessie_node *before = open_node(n, cap, slots, ways);
        uint64_t *a = plans_positions(before, ways);
        close_node(before);
        struct nessie_node *after = open_node(n + 1, cap, slots, ways);
        uint64_t *b = plans_positions(after, ways);
        close_node(after);
        struct moved m = plans_moved(a, b, ways, slots, -1, (int)n);
        double frac = (double)m.moved / ((double)KEYS * ways);
        fprintf(stderr, "add: %u -> %u nodes: %.4f of positions moved (1/N = %.4f), %llu not to "
                        "the new node\n", n, n + 1, frac, 1.0 / (n + 1),
                (unsigned long long)m.elsewhere);
        assert_true(frac <= 1.1 / (n + 1));
        assert_true(frac >= 0.9 / (n + 1));
        /* Only the duplicate rule moves a position elsewhere: a later way that took its next
         * draw because an earlier way held one, now moved. */
        assert_true(m.elsewhere * 1000 <= m.moved);
        free(a);
        free(b);
    }
}

/* A node that leaves (made absent, as a retire will) gives up exactly its own positions, each
 * to a node that stays: about 1/N. */
static void test_a_retire_moves_one_in_n(void **state)
{
    (void)state;
    const uint32_t ways = 3, nodes = 4;
    const uint64_t slots = 4096;
    struct nessie_node *nd = open_node(nodes, 6, slots, ways);
    uint64_t *a = plans_positions(nd, ways);
    assert_int_equal(mship_set_absent(&nd->view, 2, true), NESSIE_OK);
    uint64_t *b = plans_positions(nd, ways);
    struct moved m = plans_moved(a, b, ways, slots, 2, -1);
    double frac = (double)m.moved / ((double)KEYS * ways);
    fprintf(stderr, "retire: node 2 of %u: %.4f of positions moved (1/N = %.4f), %llu not from "
                    "it\n", nodes, frac, 1.0 / nodes, (unsigned long long)m.elsewhere);
    assert_true(frac <= 1.1 / nodes && frac >= 0.9 / nodes);
    assert_true(m.elsewhere * 1000 <= m.moved);
    for (size_t i = 0; i < (size_t)KEYS * ways; i++)
        assert_true(b[i] / slots != 2);
    /* Present again: the placement before, exactly (a function of the placed set). */
    assert_int_equal(mship_set_absent(&nd->view, 2, false), NESSIE_OK);
    uint64_t *c = plans_positions(nd, ways);
    assert_memory_equal(a, c, (size_t)KEYS * ways * sizeof(*a));
    /* An id past NESSIE_NODES_MAX is refused (a joining node may be absent to itself:
     * test_elastic checks what that means). */
    assert_int_equal(mship_set_absent(&nd->view, NESSIE_NODES_MAX, true), NESSIE_INVALID);
    free(a);
    free(b);
    free(c);
    close_node(nd);
}

/* The plan during a change (issue 30, step 3): the union T of the placements before and after,
 * the one before first, each position's role, the phase's no-insert bits; home stays before's.
 * After the commit, the plan is the placement of a cluster that always had the new members. */
static void check_change(uint32_t nodes, uint32_t cap, uint32_t node, bool add)
{
    const uint32_t ways = 3;
    const uint64_t slots = 4096;
    const int keys = KEYS / 4;
    struct nessie_node *ref = open_node(add ? nodes + 1 : nodes, cap, slots, ways);
    if (!add)
        assert_int_equal(mship_set_absent(&ref->view, node, true), NESSIE_OK);
    uint64_t *after = plans_positions(ref, ways);
    close_node(ref);
    struct nessie_node *nd = open_node(nodes, cap, slots, ways);
    uint64_t *before = plans_positions(nd, ways);
    enum mship_change_kind kind = add ? MSHIP_CHANGE_ADD : MSHIP_CHANGE_RETIRE;
    uint64_t moved = 0, total = 0;
    for (int phase = MSHIP_PHASE_ANNOUNCE; phase <= MSHIP_PHASE_MOVE; phase++) {
        assert_int_equal(mship_change_set(&nd->view, node, kind, phase), NESSIE_OK);
        char k[32];
        for (int i = 0; i < keys; i++) {
            int len = snprintf(k, sizeof(k), "key:%08d", i);
            struct key_plan kp;
            key_plan_make(&kp, nd, k, (size_t)len);
            const uint64_t *b = &before[(size_t)i * ways], *a = &after[(size_t)i * ways];
            assert_true(kp.n >= ways && kp.n <= 2 * ways);
            assert_memory_equal(kp.pos, b, ways * sizeof(*b)); /* before's, first, in order */
            /* Shipped calls go where they went, but never to a node being retired (R1): to
             * the node of the key's first position elsewhere. */
            uint32_t home = (uint32_t)(b[0] / slots);
            for (uint32_t p = 1; !add && home == node && p < kp.n; p++)
                if (kp.pos[p] / slots != node)
                    home = (uint32_t)(kp.pos[p] / slots);
            assert_int_equal(kp.home, home);
            uint32_t want_shut = 0;
            for (uint32_t p = 0; p < kp.n; p++) {
                bool in_b = false, in_a = false;
                for (uint32_t w = 0; w < ways; w++) {
                    in_b = in_b || b[w] == kp.pos[p];
                    in_a = in_a || a[w] == kp.pos[p];
                }
                assert_true(in_b || in_a);
                enum key_role want = in_b && in_a ? KEY_STAY : in_b ? KEY_LEAVING : KEY_ARRIVING;
                assert_int_equal(kp.role[p], want);
                if (want == (phase == MSHIP_PHASE_ANNOUNCE ? KEY_ARRIVING : KEY_LEAVING))
                    want_shut |= 1u << p;
                /* what moves, moves to the added node, or from the retired one */
                if (want == KEY_ARRIVING && add)
                    assert_int_equal(kp.pos[p] / slots, node);
                if (want == KEY_LEAVING && !add)
                    assert_int_equal(kp.pos[p] / slots, node);
                for (uint32_t q = 0; q < p; q++)
                    assert_true(kp.pos[q] != kp.pos[p]);
            }
            assert_int_equal(kp.no_insert, want_shut);
            /* every position after's is in the plan */
            for (uint32_t w = 0; w < ways; w++) {
                bool in = false;
                for (uint32_t p = 0; p < kp.n; p++)
                    in = in || kp.pos[p] == a[w];
                assert_true(in);
            }
            if (phase == MSHIP_PHASE_ANNOUNCE) {
                moved += kp.n - ways;
                total += ways;
            }
        }
    }
    double frac = (double)moved / (double)total, n_after = add ? nodes + 1 : nodes;
    assert_true(frac <= 1.1 / n_after);
    assert_true(frac >= 0.9 / n_after);
    /* A change of another node, or going back a phase, is refused while this one is on. */
    assert_int_equal(mship_change_set(&nd->view, add ? 0 : cap - 1, kind, MSHIP_PHASE_MOVE),
                     NESSIE_INVALID);
    assert_int_equal(mship_change_set(&nd->view, node, kind, MSHIP_PHASE_ANNOUNCE),
                     NESSIE_INVALID);
    assert_int_equal(mship_change_commit(&nd->view), NESSIE_OK);
    assert_int_equal(mship_change(&nd->view), 0);
    uint64_t *now = plans_positions(nd, ways);
    for (int i = 0; i < keys; i++) {
        assert_memory_equal(&now[(size_t)i * ways], &after[(size_t)i * ways], ways * sizeof(*now));
    }
    assert_int_equal(mship_change_commit(&nd->view), NESSIE_INVALID);
    free(before);
    free(after);
    free(now);
    close_node(nd);
}

static void test_a_change_plans_the_union(void **state)
{
    (void)state;
    check_change(3, 4, 3, true);   /* add node 3 to 0..2 */
    check_change(4, 4, 2, false);  /* retire node 2 of 0..3 */
    check_change(2, 8, 2, true);   /* a small cluster of a large capacity */
    check_change(5, 6, 4, false);  /* retire the last node, capacity to spare */
}

/* Only what fits the cluster begins: not an add of a present node, a retire of an absent one,
 * an unknown kind or phase. A node may be retired by its own engine (it then writes nothing
 * new: mship_retiring_self). */
static void test_a_change_that_does_not_fit_is_refused(void **state)
{
    (void)state;
    struct nessie_node *nd = open_node(3, 5, 64, 3);
    assert_int_equal(mship_change_set(&nd->view, 1, MSHIP_CHANGE_ADD, MSHIP_PHASE_ANNOUNCE),
                     NESSIE_INVALID);
    assert_int_equal(mship_change_set(&nd->view, 4, MSHIP_CHANGE_RETIRE, MSHIP_PHASE_ANNOUNCE),
                     NESSIE_INVALID);
    assert_int_equal(mship_change_set(&nd->view, 3, 7, MSHIP_PHASE_ANNOUNCE), NESSIE_INVALID);
    assert_int_equal(mship_change_set(&nd->view, 3, MSHIP_CHANGE_ADD, 9), NESSIE_INVALID);
    assert_int_equal(mship_change(&nd->view), 0);
    assert_int_equal(mship_change_commit(&nd->view), NESSIE_INVALID);
    assert_false(mship_retiring_self(&nd->view));
    assert_int_equal(mship_change_set(&nd->view, 0, MSHIP_CHANGE_RETIRE, MSHIP_PHASE_ANNOUNCE),
                     NESSIE_OK);
    assert_true(mship_retiring_self(&nd->view));
    assert_int_equal(mship_change_commit(&nd->view), NESSIE_OK);
    assert_true(mship_self_out(&nd->view)); /* retired: it serves nothing */
    close_node(nd);
}

/* The figure over many shapes: an add or a retire moves at most 1.1/N of the index
 * positions (N after the add), at node-id capacities from N to 4N. */
static void test_moves_stay_within_the_figure(void **state)
{
    (void)state;
    const uint32_t ways = 3;
    const uint64_t slots = 1024;
    const int keys = KEYS / 10;
    char k[32];
    for (uint32_t n = 2; n <= 8; n++) {
        for (uint32_t f = 1; f <= 4; f *= 2) {
            uint32_t cap = n * f < n + 1 ? n + 1 : n * f;
            for (int add = 0; add <= 1; add++) {
                uint32_t nodes = add ? n - 1 : n, node = add ? n - 1 : n / 2;
                if (nodes < 1 || (!add && n < 2))
                    continue;
                struct nessie_node *nd = open_node(nodes, cap, slots, ways);
                assert_int_equal(mship_change_set(&nd->view, node,
                                                  add ? MSHIP_CHANGE_ADD : MSHIP_CHANGE_RETIRE,
                                                  MSHIP_PHASE_ANNOUNCE), NESSIE_OK);
                uint64_t moved = 0;
                for (int i = 0; i < keys; i++) {
                    int len = snprintf(k, sizeof(k), "key:%08d", i);
                    struct key_plan kp;
                    key_plan_make(&kp, nd, k, (size_t)len);
                    moved += kp.n - ways;
                }
                double frac = (double)moved / ((double)keys * ways);
                if (frac > 1.1 / n)
                    fprintf(stderr, "%s at N=%u, capacity %u: %.4f moved, 1.1/N = %.4f\n",
                            add ? "add" : "retire", n, cap, frac, 1.1 / n);
                assert_true(frac <= 1.1 / n);
                close_node(nd);
            }
        }
    }
}

/* The capacity is checked at open: below the node count, past 64 per node or 1024: refused. */
static void test_capacity_is_checked(void **state)
{
    (void)state;
    struct nessie_config cfg;
    nessie_config_defaults(&cfg);
    cfg.cluster = "test-keys-bad";
    cfg.nodes = 3;
    cfg.self = 0;
    cfg.index_slots = 64;
    cfg.data_bytes = 1 << 20;
    cfg.max_item_size = 4096;
    struct nessie_node *nd = NULL;
    const uint32_t bad[] = {1, 2, 3 * 64 + 1, 1025};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cfg.node_ids = bad[i];
        assert_int_equal(nessie_node_open(&cfg, &nd), NESSIE_INVALID);
        assert_null(nd);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plans_are_pinned),
        cmocka_unit_test(test_plans_with_a_fence_are_pinned),
        cmocka_unit_test(test_full_capacity_is_the_pinned_placement),
        cmocka_unit_test(test_absent_ids_hold_nothing),
        cmocka_unit_test(test_an_add_moves_one_in_n),
        cmocka_unit_test(test_a_retire_moves_one_in_n),
        cmocka_unit_test(test_capacity_is_checked),
        cmocka_unit_test(test_a_change_plans_the_union),
        cmocka_unit_test(test_a_change_that_does_not_fit_is_refused),
        cmocka_unit_test(test_moves_stay_within_the_figure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
