/*
 * test_failover.c - the data path under a view that lost a node (issue 28, its second slice).
 * Three nodes in one process on the shm fabric; node 2 "dies": every fabric request of nodes 0
 * and 1 to it is dropped, as over verbs once its host is gone. Before any view says so, the calls
 * that need it fail (today's behaviour, checked so the test proves the change); once nodes 0 and 1
 * install a view with node 2 GONE:
 *   - every call answers: a GET is the value last written or a miss, never an error, never an
 *     older value; values that lived on node 2 are misses;
 *   - every write succeeds, positions that were on node 2 drawn again on live nodes, the same on
 *     both survivors (each reads back what the other wrote), lost entries' room taken back;
 *   - nothing of node 2's memory is written after the fence (its index is unchanged);
 *   - node 2, once its own view fences it, serves nothing (NESSIE_FABRIC_ERROR).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memory/memory.h"
#include "protocol/nessie_test.h" /* nessie_node_fabric */
#include <nessie/nessie.h>

#define NODES 3
#define DEAD 2
#define KEYS 150

static struct {
    char name[64];
    struct nessie_node *node[NODES];
    struct nessie_ctx *ctx[NODES];
} C;

/* Requests to the dead node: dropped (they never run), counted. */
static atomic_uint_fast64_t to_dead;

static enum fab_fault dead_fault(void *user, struct fab_ep *ep, const struct fab_wr *wr)
{
    (void)user;
    (void)ep;
    if (wr->node != DEAD)
        return FAB_FAULT_NONE;
    atomic_fetch_add(&to_dead, 1);
    return FAB_FAULT_DROP;
}

static int setup(void **state)
{
    (void)state;
    static unsigned seq;
    memset(&C, 0, sizeof(C));
    snprintf(C.name, sizeof(C.name), "test-failover-%d-%u", (int)getpid(), seq++);
    for (uint32_t i = 0; i < NODES; i++) {
        struct nessie_config cfg;
        nessie_config_defaults(&cfg);
        cfg.cluster = C.name;
        cfg.nodes = NODES;
        cfg.self = i;
        cfg.index_slots = 128; /* 150 keys: 0.39 of 3 nodes' slots, 0.59 of 2 nodes' */
        cfg.data_bytes = 4 << 20;
        cfg.max_item_size = 4096;
        assert_int_equal(nessie_node_open(&cfg, &C.node[i]), NESSIE_OK);
        assert_int_equal(nessie_ctx_create(C.node[i], &C.ctx[i]), NESSIE_OK);
    }
    atomic_store(&to_dead, 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < NODES; i++) {
        nessie_ctx_destroy(C.ctx[i]);
        nessie_node_close(C.node[i]);
        fab_unlink(FAB_BACKEND_SHM, C.name, i);
    }
    return 0;
}

static void key_of(int i, char *k) { snprintf(k, 32, "key-%03d", i); }

static int put(uint32_t n, int i, const char *tag)
{
    char k[32], v[64];
    key_of(i, k);
    snprintf(v, sizeof(v), "%s-%03d", tag, i);
    return nessie_store(C.ctx[n], NESSIE_SET, k, strlen(k), v, strlen(v), 0, 0, 0, NULL);
}

/* GET key i at node n: 1 when it holds the value tag-i, 0 for a miss; fails the test on an error
 * or any other value. */
static int got(uint32_t n, int i, const char *tag)
{
    char k[32], v[64];
    key_of(i, k);
    snprintf(v, sizeof(v), "%s-%03d", tag, i);
    struct nessie_item it;
    int rc = nessie_get(C.ctx[n], k, strlen(k), &it);
    if (rc == NESSIE_NOT_FOUND)
        return 0;
    if (rc != NESSIE_OK)
        fail_msg("node %u: GET %s: %s", n, k, nessie_strerror(rc));
    if (it.value_len != strlen(v) || memcmp(it.value, v, it.value_len) != 0)
        fail_msg("node %u: GET %s: \"%.*s\", want \"%s\" or a miss", n, k, (int)it.value_len,
                 (const char *)it.value, v);
    return 1;
}

/* A view of epoch over the three nodes, node DEAD gone or live. */
static void install(uint32_t n, uint64_t epoch, bool dead_gone)
{
    struct nessie_view *v = calloc(1, sizeof(*v));
    v->epoch = epoch;
    v->nmembers = NODES;
    for (uint32_t i = 0; i < NODES; i++)
        v->members[i] = (struct nessie_view_member){
            .node = i, .incarnation = nessie_node_incarnation(C.node[i]),
            .state = dead_gone && i == DEAD ? NESSIE_MEMBER_GONE : NESSIE_MEMBER_LIVE};
    assert_int_equal(nessie_view_install(C.node[n], v), NESSIE_OK);
    free(v);
}

/* A checksum of node DEAD's index, read from its own memory. */
static uint64_t dead_index_sum(void)
{
    struct nessie_node *nd = C.node[DEAD];
    uint64_t sum = 0, w;
    for (uint64_t s = 0; s < nd->cfg.index_slots; s++) {
        assert_int_equal(fab_local_read(nd->fab, FAB_REGION_INDEX, s * 8, &w, 8), FAB_OK);
        sum = sum * 0x100000001b3ULL ^ w;
    }
    return sum;
}

static void test_calls_answer_without_the_lost_node(void **state)
{
    (void)state;
    for (uint32_t n = 0; n < NODES; n++)
        install(n, 1, false);
    /* Values written through node 0 (their data on node 0) and through node 2 (on node 2). */
    for (int i = 0; i < KEYS; i++)
        assert_int_equal(put(i % 2 ? DEAD : 0, i, "v1"), NESSIE_OK);

    /* Node 2 dies. Before any view says so, a call that needs it fails: not one of its keys'
     * writes can be sure where the key's entry is. */
    for (uint32_t n = 0; n < DEAD; n++)
        fab_set_fault(nessie_node_fabric(C.node[n]), dead_fault, NULL);
    int failed = 0;
    for (int i = 0; i < KEYS; i++)
        failed += put(0, i, "v1") != NESSIE_OK;
    assert_true(failed > 0);
    assert_true(atomic_load(&to_dead) > 0);
    /* Those failed writes changed nothing (a fabric error before any CAS), or rewrote v1. */

    /* The view that lost it. */
    for (uint32_t n = 0; n < DEAD; n++)
        install(n, 2, true);
    uint64_t dead_sum = dead_index_sum();
    atomic_store(&to_dead, 0);

    /* Every GET answers: the value, or a miss (node 2's values are lost; so are entries that were
     * on its positions). Node 0's values whose entries were on live positions survive. */
    int hits[DEAD] = {0}, lost_hits = 0;
    for (uint32_t n = 0; n < DEAD; n++)
        for (int i = 0; i < KEYS; i++) {
            int h = got(n, i, "v1");
            hits[n] += h;
            if (i % 2)
                lost_hits += h;
        }
    assert_int_equal(lost_hits, 0);     /* every value that lived on node 2 is a miss */
    assert_true(hits[0] > KEYS / 4);    /* most of node 0's values are still there */
    assert_int_equal(hits[0], hits[1]); /* both survivors see the same */
    print_message("after the loss: %d of %d values still read (%d written through node 0)\n",
                  hits[0], KEYS, KEYS / 2);

    /* Every write succeeds, from either survivor, and each reads back what the other wrote. */
    for (int i = 0; i < KEYS; i++)
        assert_int_equal(put(i % 2, i, "v2"), NESSIE_OK);
    for (uint32_t n = 0; n < DEAD; n++)
        for (int i = 0; i < KEYS; i++)
            assert_int_equal(got(n, i, "v2"), 1);
    /* DELETE and ADD: a deleted key misses everywhere; an add of it succeeds once. */
    char k[32];
    key_of(7, k);
    assert_int_equal(nessie_delete(C.ctx[0], k, strlen(k)), NESSIE_OK);
    assert_int_equal(got(1, 7, "v2"), 0);
    assert_int_equal(nessie_store(C.ctx[1], NESSIE_ADD, k, strlen(k), "a", 1, 0, 0, 0, NULL),
                     NESSIE_OK);
    assert_int_equal(nessie_store(C.ctx[0], NESSIE_ADD, k, strlen(k), "b", 1, 0, 0, 0, NULL),
                     NESSIE_NOT_STORED);

    /* Nothing was sent to node 2, and its memory is as it was when the view lost it. */
    assert_int_equal(atomic_load(&to_dead), 0);
    assert_true(dead_sum == dead_index_sum());
    /* Lost entries were met (GETs passed over them, writes took their room back). */
    struct nessie_counters *c = calloc(1, sizeof(*c));
    nessie_node_counters(C.node[0], c);
    uint64_t lost = 0;
    for (int op = 0; op < NESSIE_OPK_COUNT; op++)
        lost += c->op[op].lost_entries;
    assert_true(lost > 0);
    free(c);
    for (uint32_t n = 0; n < DEAD; n++)
        fab_set_fault(nessie_node_fabric(C.node[n]), NULL, NULL);
}

/* Node 2 itself, once its view says it is gone, answers nothing from its memory: its peers no
 * longer read it, so a value there may be older than one they hold. */
static void test_lost_node_serves_nothing(void **state)
{
    (void)state;
    for (uint32_t n = 0; n < NODES; n++)
        install(n, 1, false);
    assert_int_equal(put(DEAD, 1, "v1"), NESSIE_OK);
    assert_int_equal(got(DEAD, 1, "v1"), 1);
    install(DEAD, 2, true);
    char k[32];
    key_of(1, k);
    struct nessie_item it;
    assert_int_equal(nessie_get(C.ctx[DEAD], k, strlen(k), &it), NESSIE_FABRIC_ERROR);
    assert_int_equal(put(DEAD, 1, "v2"), NESSIE_FABRIC_ERROR);
    /* A view that shows it live again is refused: it stays out. */
    struct nessie_view *v = calloc(1, sizeof(*v));
    v->epoch = 3;
    v->nmembers = NODES;
    for (uint32_t i = 0; i < NODES; i++)
        v->members[i] = (struct nessie_view_member){.node = i, .state = NESSIE_MEMBER_LIVE,
                                                    .incarnation = 1};
    assert_int_equal(nessie_view_install(C.node[DEAD], v), NESSIE_INVALID);
    assert_int_equal(nessie_view_epoch(C.node[DEAD]), 2);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_calls_answer_without_the_lost_node, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_node_serves_nothing, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
