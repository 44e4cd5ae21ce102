/*
 * test_keys.c - a key's plan (kvstore/memory/keys.c) is the cluster's format: every node must
 * draw the same positions, filter bits and home for a key, and a daemon of another build must
 * draw what the running ones do (keys.h: changing it re-homes every key). These golden vectors
 * pin the placement as it is, with all nodes placed and with one fenced (the failover redraw),
 * so that a change of the formula (issue 30's node-id capacity, a faster hash) shows here: the
 * checksums of 100,000 keys' plans at three configurations.
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

/* Open node 0 of a cluster of `nodes` (its own regions only: a plan needs no peer), fence
 * `fenced` (a node id, or -1) by a view, and checksum the plans of KEYS keys: positions, filter
 * bits, home. */
static uint64_t plans_checksum(uint32_t nodes, uint64_t index_slots, uint32_t ways, int fenced)
{
    static unsigned seq;
    char name[64];
    snprintf(name, sizeof(name), "test-keys-%d-%u", (int)getpid(), seq++);
    struct nessie_config cfg;
    nessie_config_defaults(&cfg);
    cfg.cluster = name;
    cfg.nodes = nodes;
    cfg.self = 0;
    cfg.index_slots = index_slots;
    cfg.ways = ways;
    cfg.data_bytes = 1 << 20;
    cfg.max_item_size = 4096;
    struct nessie_node *nd;
    assert_int_equal(nessie_node_open(&cfg, &nd), NESSIE_OK);
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
    nessie_node_close(nd);
    fab_unlink(FAB_BACKEND_SHM, name, 0);
    return h;
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plans_are_pinned),
        cmocka_unit_test(test_plans_with_a_fence_are_pinned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
