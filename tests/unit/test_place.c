/*
 * test_place.c - placement (kvstore/modes/place.c, issue 29): a node's clients use the
 * cluster's memory. A client-driven store whose node has no spare page is run by a peer that has
 * some, and its value lives there; once every node is full, stores go to the node whose victims
 * are coldest; a node that cannot take a shipped store keeps the value here.
 *
 * Nodes are engine instances in this process on the shared-memory fabric, each with a server
 * thread (the daemon's SD server, in miniature). No evictor thread runs: a writer that finds no
 * room evicts on its own (write.c, proto_memory_short).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memory/memory.h"
#include "memory/layout.h"
#include <nessie/nessie.h>

#define NODES 3
#define VALUE_LEN 1000
/* A period long enough that a server descheduled on a loaded machine is not shunned (the
 * take-up limit is a quarter of it): its stores would then run on node 0, for tests that count
 * where values went; SHORT_MS for those that wait out many quarantines. */
#define PERIOD_MS 200
#define SHORT_MS 20

struct server {
    struct nessie_node *node;
    pthread_t thread;
    _Atomic int stop;
    bool running;
};

static struct {
    char name[64];
    struct nessie_node *node[NODES];
    struct nessie_ctx *ctx[NODES];
    struct server srv[NODES];
} C;

static void *server_main(void *p)
{
    struct server *s = p;
    struct nessie_ctx *ctx;
    if (nessie_ctx_create(s->node, &ctx) != NESSIE_OK)
        return (void *)1;
    while (!atomic_load(&s->stop))
        if (nessie_sd_serve(ctx, 0, 1) == 0)
            usleep(20);
    nessie_ctx_destroy(ctx);
    return NULL;
}

/* Start node i's server thread. */
static void server_start(uint32_t i)
{
    struct server *s = &C.srv[i];
    s->node = C.node[i];
    assert_int_equal(pthread_create(&s->thread, NULL, server_main, s), 0);
    s->running = true;
}

/* Open NODES nodes of 1 MiB of data each (about 800 values of VALUE_LEN bytes), with a server
 * thread on those in `serving` (a bit per node), expiration period period_ms. */
static void cluster_open(unsigned serving, uint32_t period_ms)
{
    static unsigned seq;
    memset(&C, 0, sizeof(C));
    snprintf(C.name, sizeof(C.name), "test-place-%d-%u", (int)getpid(), seq++);
    for (uint32_t i = 0; i < NODES; i++) {
        struct nessie_config cfg;
        nessie_config_defaults(&cfg);
        cfg.cluster = C.name;
        cfg.nodes = NODES;
        cfg.self = i;
        cfg.index_slots = 4096;
        cfg.data_bytes = 1 << 20;
        cfg.max_item_size = 4096;
        cfg.expiration_ms = period_ms;
        cfg.op_timeout_ms = 1000;
        cfg.sd_slots = 2;
        assert_int_equal(nessie_node_open(&cfg, &C.node[i]), NESSIE_OK);
        assert_int_equal(nessie_ctx_create(C.node[i], &C.ctx[i]), NESSIE_OK);
    }
    for (uint32_t i = 0; i < NODES; i++)
        if (serving & (1u << i))
            server_start(i);
}

static int teardown(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < NODES; i++)
        if (C.srv[i].running) {
            atomic_store(&C.srv[i].stop, 1);
            pthread_join(C.srv[i].thread, NULL);
        }
    for (uint32_t i = 0; i < NODES; i++) {
        nessie_ctx_destroy(C.ctx[i]);
        nessie_node_close(C.node[i]);
        fab_unlink(FAB_BACKEND_SHM, C.name, i);
    }
    return 0;
}

static void value_of(char *v, int i)
{
    memset(v, 'a' + i % 26, VALUE_LEN);
    snprintf(v, 16, "value-%d;", i);
}

static void set_n(struct nessie_ctx *ctx, int from, int to)
{
    char k[32], v[VALUE_LEN];
    for (int i = from; i < to; i++) {
        snprintf(k, sizeof(k), "place-%d", i);
        value_of(v, i);
        assert_int_equal(nessie_store(ctx, NESSIE_SET, k, strlen(k), v, VALUE_LEN, 0, 0, 0, NULL),
                         NESSIE_OK);
    }
}

/* How many of keys [from, to) read back with their value (a miss is an eviction). */
static int hits(struct nessie_ctx *ctx, int from, int to)
{
    char k[32], v[VALUE_LEN];
    int n = 0;
    for (int i = from; i < to; i++) {
        struct nessie_item it;
        snprintf(k, sizeof(k), "place-%d", i);
        value_of(v, i);
        int rc = nessie_get(ctx, k, strlen(k), &it);
        if (rc == NESSIE_NOT_FOUND)
            continue;
        assert_int_equal(rc, NESSIE_OK);
        assert_int_equal(it.value_len, VALUE_LEN);
        assert_memory_equal(it.value, v, VALUE_LEN);
        n++;
    }
    return n;
}

static struct nessie_counters counters(uint32_t n)
{
    struct nessie_counters c;
    nessie_node_counters(C.node[n], &c);
    return c;
}

/* Twice what one node holds, written through node 0: every value is kept (the other nodes
 * hold the rest), none evicted, and what node 0 placed is what its peers took in. Before
 * placement, node 0 evicted about half of them. */
static void test_full_node_places_values_on_peers(void **state)
{
    (void)state;
    cluster_open(0x7, PERIOD_MS);
    set_n(C.ctx[0], 0, 1600);
    struct nessie_counters c0 = counters(0), c1 = counters(1), c2 = counters(2);
    assert_true(c0.placed > 0);
    assert_int_equal(c0.placed, c1.placed_in + c2.placed_in);
    assert_int_equal(c0.placed_bytes, c1.placed_in_bytes + c2.placed_in_bytes);
    assert_int_equal(c0.evictions + c1.evictions + c2.evictions, 0);
    assert_int_equal(hits(C.ctx[0], 0, 1600), 1600);
    assert_int_equal(hits(C.ctx[2], 0, 1600), 1600); /* any node reads them all */
    /* The stats, once a recycle scan has passed over every region: the values held for node 0
     * are on 1 and 2 (with migrated copies of node 0's own, which are not counted as held for
     * it), node 0 holds none for anyone, and every value is held once. */
    uint64_t items[NODES], bytes[NODES], held[NODES], held_bytes[NODES];
    for (uint32_t i = 0; i < NODES; i++) {
        for (int pass = 0; pass < 2; pass++)
            nessie_recycle_run(C.ctx[i], 1 << 20);
        nessie_data_usage(C.node[i], &items[i], &bytes[i]);
        nessie_data_placed(C.node[i], &held[i], &held_bytes[i]);
    }
    assert_int_equal(held[0], 0);
    assert_true(held[1] > 0 && held[1] <= items[1]);
    assert_true(held[2] > 0 && held[2] <= items[2]);
    assert_int_equal(items[0] + items[1] + items[2], 1600);
    assert_int_equal(held[1] + held[2], c0.placed);
}

/* A node whose pages are all assigned but that has freed many slots (here, deletes) writes its
 * values there again once its evictor has seen the free slots, rather than place them on peers
 * that still have spare pages (before room_classes, every store of a node without a spare page
 * was placed). */
static void test_freed_slots_are_used_before_peers(void **state)
{
    (void)state;
    cluster_open(0x7, PERIOD_MS);
    set_n(C.ctx[0], 0, 1600);
    char k[32];
    for (int i = 0; i < 400; i++) { /* the first values went to node 0's own table */
        snprintf(k, sizeof(k), "place-%d", i);
        assert_int_equal(nessie_delete(C.ctx[0], k, strlen(k)), NESSIE_OK);
    }
    uint64_t placed = counters(0).placed;
    usleep(2 * PERIOD_MS * 1000); /* the slots' quarantine (one expiration period) */
    for (int pass = 0; pass < 2; pass++)
        nessie_recycle_run(C.ctx[0], 1 << 20);
    nessie_evict_run(C.ctx[0], 256);
    assert_int_equal(counters(0).evictions, 0);
    set_n(C.ctx[0], 2000, 2100);
    assert_int_equal(counters(0).placed, placed);
    assert_int_equal(hits(C.ctx[1], 2000, 2100), 100);
}

/* A full node's store whose chosen peer has no server taking it up is run here after all: the
 * value is kept (node 0 evicts for it), the call does not fail. */
static void test_placement_without_server_runs_here(void **state)
{
    (void)state;
    cluster_open(0x1, SHORT_MS); /* node 0 serves; 1 and 2 do not */
    set_n(C.ctx[0], 0, 1000);
    assert_int_equal(counters(0).placed, 0);
    assert_true(counters(0).sd_withdrawn + counters(0).sd_shunned > 0);
    assert_int_equal(hits(C.ctx[0], 900, 1000), 100); /* the newest are there */
}

/* A peer shunned because its server did not take a store up is placed on again once its server
 * runs: placement probes the shunned peer's heartbeat as shipping does. Before, placement only
 * looked at the shunned flag, which nothing else cleared in a node whose calls are all CD: a
 * server descheduled past one take-up limit (5 ms) sent every later placement back home for
 * good (seen as a flaky test_full_cluster_evicts_everywhere under tsan on a loaded machine). */
static void test_shunned_peer_is_placed_on_again(void **state)
{
    (void)state;
    cluster_open(0x1, SHORT_MS); /* node 0 serves; 1 and 2 do not, yet */
    set_n(C.ctx[0], 0, 1000);
    assert_int_equal(counters(0).placed, 0);
    assert_true(counters(0).sd_withdrawn > 0); /* both peers shunned */
    server_start(1);
    server_start(2);
    usleep(4 * SHORT_MS * 1000); /* past a take-up limit: the heartbeats have moved */
    set_n(C.ctx[0], 1000, 1200);
    assert_true(counters(0).placed > 0);
    assert_int_equal(hits(C.ctx[0], 1000, 1200), 200);
}

/* Once every node is full, stores keep succeeding, and go where the coldest items are: node 0
 * evicts, but so do the others (before, only node 0's items were ever evicted). */
static void test_full_cluster_evicts_everywhere(void **state)
{
    (void)state;
    cluster_open(0x7, SHORT_MS);
    set_n(C.ctx[0], 0, 4000);
    struct nessie_counters c0 = counters(0), c1 = counters(1), c2 = counters(2);
    assert_true(c1.evictions + c2.evictions > 0);
    assert_true(c0.placed > 0);
    assert_int_equal(hits(C.ctx[0], 3950, 4000), 50);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_full_node_places_values_on_peers, teardown),
        cmocka_unit_test_teardown(test_freed_slots_are_used_before_peers, teardown),
        cmocka_unit_test_teardown(test_placement_without_server_runs_here, teardown),
        cmocka_unit_test_teardown(test_shunned_peer_is_placed_on_again, teardown),
        cmocka_unit_test_teardown(test_full_cluster_evicts_everywhere, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
