/*
 * test_fabric.c - the fabric contract (kvstore/fabric/fabric.h): one suite, both backends. By default
 * the shared-memory backend; with NESSIE_TEST_FABRIC=verbs the RDMA backend, its nodes listening
 * on NESSIE_TEST_VERBS_IP (default 10.77.0.1, the Soft-RoCE guest's: tests/rxe/in-guest.sh runs
 * it there), ports from 20000 up.
 *
 * Several processes (fork) play the nodes of one cluster, as the daemons do, so what is proven
 * here is what the engine relies on across processes: CAS atomicity, WRITE-then-READ visibility,
 * regions that outlive their creator, and requests that are refused without changing anything.
 *
 * A process forked after it used RDMA cannot use RDMA itself: librdmacm keeps the device
 * contexts it opened for the life of the process, and the kernel refuses a uverbs file used
 * from a forked child (EACCES). So every test forks its nodes before it touches the fabric, and
 * on verbs each test runs in a process of its own (main).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "fabric/fabric.h"

#define INDEX_BYTES (64 * 1024)
#define DATA_BYTES (256 * 1024)

/* Each test gets a cluster name of its own, so runs in parallel (make -j, asan next to tsan) and
 * leftovers of a crashed run never meet. */
static char cluster[64];
static uint32_t cluster_nodes;
/* The backend under test and, for verbs, the nodes' listeners (a port range per test, so a test
 * never meets a listener a previous one left in the kernel's TIME_WAIT-like states). */
static enum fab_backend backend = FAB_BACKEND_SHM;
static char addr_buf[8][64];
static const char *addrs[8];

static struct fab_config config(uint32_t nodes, uint32_t self)
{
    struct fab_config c = {
        .backend = backend,
        .cluster = cluster,
        .nodes = nodes,
        .self = self,
        .region_size = {[FAB_REGION_INDEX] = INDEX_BYTES, [FAB_REGION_DATA] = DATA_BYTES,
                        [FAB_REGION_MSG] = 4096},
        .addrs = addrs,
    };
    return c;
}

static int setup(void **state)
{
    static unsigned seq;
    (void)state;
    snprintf(cluster, sizeof(cluster), "test-fabric-%d-%u", (int)getpid(), seq);
    const char *ip = getenv("NESSIE_TEST_VERBS_IP");
    for (int i = 0; i < 8; i++) {
        /* 20000..59999: a valid port above the privileged ones, whatever the pid. */
        snprintf(addr_buf[i], sizeof(addr_buf[i]), "%s:%u", ip ? ip : "10.77.0.1",
                 20000 + (unsigned)((getpid() % 50) * 800) + (seq % 100) * 8 + (unsigned)i);
        addrs[i] = addr_buf[i];
    }
    seq++;
    cluster_nodes = 4;
    for (uint32_t n = 0; n < cluster_nodes; n++)
        fab_unlink(FAB_BACKEND_SHM, cluster, n);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (uint32_t n = 0; n < cluster_nodes; n++)
        assert_int_equal(fab_unlink(FAB_BACKEND_SHM, cluster, n), FAB_OK);
    return 0;
}

static struct fab *open_node(uint32_t nodes, uint32_t self, bool *created)
{
    struct fab_config c = config(nodes, self);
    struct fab *fab = NULL;
    int rc = fab_open(&c, &fab, created);
    if (rc != FAB_OK) {
        fprintf(stderr, "fab_open(node %u): %s\n", self, fab_strerror(rc));
        return NULL;
    }
    return fab;
}

static int do_read(struct fab_ep *ep, uint32_t node, enum fab_region r, uint64_t off, void *buf,
                   uint32_t len)
{
    struct fab_wr wr = {.opcode = FAB_OP_READ, .node = node, .region = r, .offset = off,
                        .local = buf, .length = len};
    return fab_exec(ep, &wr);
}

static int do_write(struct fab_ep *ep, uint32_t node, enum fab_region r, uint64_t off,
                    const void *buf, uint32_t len)
{
    struct fab_wr wr = {.opcode = FAB_OP_WRITE, .node = node, .region = r, .offset = off,
                        .local = (void *)buf, .length = len};
    return fab_exec(ep, &wr);
}

static void fill(unsigned char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 8));
}

/* Wait for a child and return its exit status (or 100 + signal). */
static int reap(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return 99;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

/* --- creation and re-attach --------------------------------------------------------------- */

static void test_create_then_reattach(void **state)
{
    (void)state;
    bool created = false;
    struct fab *fab = open_node(2, 0, &created);
    assert_non_null(fab);
    assert_true(created);
    assert_int_equal(fab_region_size(fab, FAB_REGION_DATA), DATA_BYTES);
    unsigned char *data = fab_local_base(fab, FAB_REGION_DATA);
    assert_non_null(data);
    /* A new region is zero-filled: the engine relies on an all-zero index being empty. */
    for (size_t i = 0; i < DATA_BYTES; i += 4096)
        assert_int_equal(data[i], 0);
    memcpy(data + 100, "nessie", 6);
    fab_close(fab);

    fab = open_node(2, 0, &created);
    assert_non_null(fab);
    assert_false(created);
    assert_memory_equal((unsigned char *)fab_local_base(fab, FAB_REGION_DATA) + 100, "nessie", 6);
    fab_close(fab);
}

static void test_reattach_after_creator_exited(void **state)
{
    (void)state;
    unsigned char pattern[5000];
    fill(pattern, sizeof(pattern), 7);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        bool created;
        struct fab *fab = open_node(2, 1, &created);
        struct fab_ep *ep = NULL;
        if (!fab || !created || fab_ep_create(fab, 0, &ep) != FAB_OK)
            _exit(1);
        /* Through the fabric, at an unaligned offset, to the node's own region. */
        if (do_write(ep, 1, FAB_REGION_DATA, 12345, pattern, sizeof(pattern)) != FAB_OK)
            _exit(2);
        uint64_t old, word = 0xfeedfacecafebeefULL;
        struct fab_wr cas = {.opcode = FAB_OP_CAS, .node = 1, .region = FAB_REGION_INDEX,
                             .offset = 8 * 100, .local = &old, .length = 8, .compare = 0,
                             .swap = word};
        if (fab_exec(ep, &cas) != FAB_OK || old != 0)
            _exit(3);
        /* Exit without closing anything, as a killed daemon would. */
        _exit(0);
    }
    assert_int_equal(reap(pid), 0);

    bool created = true;
    struct fab *fab = open_node(2, 1, &created);
    assert_non_null(fab);
    assert_false(created);
    assert_memory_equal((unsigned char *)fab_local_base(fab, FAB_REGION_DATA) + 12345, pattern,
                        sizeof(pattern));
    uint64_t word;
    memcpy(&word, (unsigned char *)fab_local_base(fab, FAB_REGION_INDEX) + 800, 8);
    assert_true(word == 0xfeedfacecafebeefULL);
    fab_close(fab);
}

/* --- visibility across processes ------------------------------------------------------------- */

static void test_write_seen_by_read_of_other_process(void **state)
{
    (void)state;
    int go[2], done[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(done), 0);

    /* Node 0 (parent) creates its regions first; node 1 (child) then writes into them remotely.
     * The child is forked before the parent touches the fabric. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char c;
        unsigned char buf[3000];
        /* Each end is held only by the side that uses it, so a side that dies is seen as EOF by
         * the other instead of a wait forever. */
        close(go[1]);
        close(done[0]);
        if (read(go[0], &c, 1) != 1)
            _exit(2);
        struct fab *f = open_node(2, 1, NULL);
        struct fab_ep *ep = NULL;
        if (!f || fab_ep_create(f, 0, &ep) != FAB_OK)
            _exit(1);
        for (unsigned k = 0; k < 20; k++) {
            fill(buf, sizeof(buf), k);
            if (do_write(ep, 0, FAB_REGION_DATA, 8000 * k + 3, buf, sizeof(buf)) != FAB_OK)
                _exit(3);
        }
        if (write(done[1], "x", 1) != 1)
            _exit(4);
        /* Stay up (node 1's regions are reached through its listener) until the parent read. */
        if (read(go[0], &c, 1) != 1)
            _exit(5);
        fab_ep_destroy(ep);
        fab_close(f);
        _exit(0);
    }
    close(go[0]);
    close(done[1]);
    struct fab *fab = open_node(2, 0, NULL);
    assert_non_null(fab);
    char c;
    assert_int_equal(write(go[1], "x", 1), 1);
    assert_int_equal(read(done[0], &c, 1), 1);

    struct fab_ep *ep;
    assert_int_equal(fab_ep_create(fab, 0, &ep), FAB_OK);
    for (unsigned k = 0; k < 20; k++) {
        unsigned char want[3000], got[3000];
        fill(want, sizeof(want), k);
        assert_int_equal(do_read(ep, 0, FAB_REGION_DATA, 8000 * k + 3, got, sizeof(got)), FAB_OK);
        assert_memory_equal(got, want, sizeof(want));
    }
    /* And the child's own regions are readable by the parent, once the child made them. */
    unsigned char z[64];
    assert_int_equal(do_read(ep, 1, FAB_REGION_INDEX, 0, z, sizeof(z)), FAB_OK);
    assert_int_equal(write(go[1], "x", 1), 1);
    assert_int_equal(reap(pid), 0);
    fab_ep_destroy(ep);
    fab_close(fab);
    close(go[1]);
    close(done[0]);
}

/* --- CAS atomicity ----------------------------------------------------------------------------- */

#define CAS_WORDS 6     /* words incremented, spread over every node's index region */
#define CAS_ROUNDS 3000 /* increments of each word by each incrementer */

static uint64_t word_node(int w) { return (uint64_t)w % 3; }
static uint64_t word_offset(int w) { return 8 * (uint64_t)(w * 17 + 1); }

/*
 * Increment every word CAS_ROUNDS times with CAS loops, keeping one CAS per word in flight at once
 * (one batch per round), as the engine keeps several requests in flight. Returns 0 on success.
 */
static int cas_increment_all(struct fab_ep *ep, uint64_t *cas_failures)
{
    uint64_t seen[CAS_WORDS], old[CAS_WORDS];
    int todo[CAS_WORDS];
    struct fab_wr wr[CAS_WORDS];

    for (int w = 0; w < CAS_WORDS; w++) {
        if (do_read(ep, (uint32_t)word_node(w), FAB_REGION_INDEX, word_offset(w), &seen[w], 8))
            return 1;
        todo[w] = CAS_ROUNDS;
    }
    for (;;) {
        int n = 0;
        for (int w = 0; w < CAS_WORDS; w++) {
            if (todo[w] == 0)
                continue;
            wr[n] = (struct fab_wr){.wr_id = (uint64_t)w, .opcode = FAB_OP_CAS,
                                    .node = (uint32_t)word_node(w), .region = FAB_REGION_INDEX,
                                    .offset = word_offset(w), .local = &old[w], .length = 8,
                                    .compare = seen[w], .swap = seen[w] + 1};
            n++;
        }
        if (n == 0)
            return 0;
        if (fab_post(ep, wr, (size_t)n) != FAB_OK)
            return 2;
        int got = 0;
        while (got < n) {
            struct fab_wc wc[CAS_WORDS];
            int k = fab_poll(ep, wc, CAS_WORDS);
            for (int i = 0; i < k; i++) {
                int w = (int)wc[i].wr_id;
                if (wc[i].status != FAB_OK || wc[i].opcode != FAB_OP_CAS)
                    return 3;
                if (old[w] == seen[w]) {
                    seen[w]++;
                    todo[w]--;
                } else {
                    seen[w] = old[w]; /* lost the race: retry from what the word holds now */
                    (*cas_failures)++;
                }
            }
            got += k;
        }
    }
}

static void test_cas_increments_from_many_processes(void **state)
{
    (void)state;
    const int procs = 4; /* nodes 0..2 own the words; node 3 only increments remotely */
    pid_t pids[4];
    /* One pipe per signal: a fast child must never take a byte meant for a slow one. */
    int opened[2], ready[2], finished[2], leave[2];
    assert_int_equal(pipe(opened), 0);
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(finished), 0);
    assert_int_equal(pipe(leave), 0);

    /* Each node is a process of its own; all of them open their node (so no incrementer finds a
     * peer missing) before any starts, and stay up (their listeners serve the others) until all
     * are done. */
    for (int p = 0; p < procs; p++) {
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0) {
            char c;
            /* Only the parent writes ready and leave, so its death is EOF here; each child
             * closes its write end of opened and finished once written, so a child that dies
             * is EOF for the parent. */
            close(ready[1]);
            close(leave[1]);
            close(opened[0]);
            close(finished[0]);
            struct fab *f = open_node(4, (uint32_t)p, NULL);
            struct fab_ep *ep;
            uint64_t failures = 0;
            if (!f || fab_ep_create(f, 8, &ep) != FAB_OK)
                _exit(1);
            if (write(opened[1], "x", 1) != 1)
                _exit(2);
            close(opened[1]);
            if (read(ready[0], &c, 1) != 1) /* start together, to collide as much as possible */
                _exit(2);
            int rc = cas_increment_all(ep, &failures);
            if (write(finished[1], "x", 1) != 1)
                _exit(4);
            close(finished[1]);
            if (read(leave[0], &c, 1) != 1)
                _exit(4);
            fab_ep_destroy(ep);
            fab_close(f);
            _exit(rc ? 10 + rc : 0);
        }
    }
    close(opened[1]);
    close(finished[1]);
    close(ready[0]);
    close(leave[0]);
    char c;
    for (int p = 0; p < procs; p++)
        assert_int_equal(read(opened[0], &c, 1), 1);
    for (int p = 0; p < procs; p++)
        assert_int_equal(write(ready[1], "x", 1), 1);
    for (int p = 0; p < procs; p++)
        assert_int_equal(read(finished[0], &c, 1), 1);
    for (int p = 0; p < procs; p++)
        assert_int_equal(write(leave[1], "x", 1), 1);
    for (int p = 0; p < procs; p++)
        assert_int_equal(reap(pids[p]), 0);

    /* The regions outlive their nodes: re-attach and look at the words directly. */
    for (int w = 0; w < CAS_WORDS; w++) {
        struct fab *owner = open_node(4, (uint32_t)word_node(w), NULL);
        assert_non_null(owner);
        uint64_t v;
        memcpy(&v, (unsigned char *)fab_local_base(owner, FAB_REGION_INDEX) + word_offset(w), 8);
        assert_int_equal(v, (uint64_t)procs * CAS_ROUNDS);
        fab_close(owner);
    }
    close(opened[0]);
    close(ready[1]);
    close(finished[0]);
    close(leave[1]);
}

struct thread_arg {
    struct fab *fab;
    int rc;
};

static void *cas_thread(void *p)
{
    struct thread_arg *a = p;
    struct fab_ep *ep;
    uint64_t failures = 0;
    a->rc = fab_ep_create(a->fab, 8, &ep);
    if (a->rc == FAB_OK) {
        a->rc = cas_increment_all(ep, &failures);
        fab_ep_destroy(ep);
    }
    return NULL;
}

/* Threads of one process share the domain (and attach peers lazily, concurrently), each with its
 * own endpoint: the daemon's worker threads do exactly this. */
static void test_cas_increments_from_threads(void **state)
{
    (void)state;
    struct fab *peers[3];
    for (uint32_t n = 1; n < 3; n++) {
        peers[n] = open_node(3, n, NULL);
        assert_non_null(peers[n]);
    }
    struct fab *fab = open_node(3, 0, NULL);
    assert_non_null(fab);
    pthread_t th[3];
    struct thread_arg arg[3];
    for (int t = 0; t < 3; t++) {
        arg[t] = (struct thread_arg){.fab = fab};
        assert_int_equal(pthread_create(&th[t], NULL, cas_thread, &arg[t]), 0);
    }
    for (int t = 0; t < 3; t++) {
        assert_int_equal(pthread_join(th[t], NULL), 0);
        assert_int_equal(arg[t].rc, 0);
    }
    struct fab_ep *ep;
    assert_int_equal(fab_ep_create(fab, 0, &ep), FAB_OK);
    for (int w = 0; w < CAS_WORDS; w++) {
        uint64_t v;
        assert_int_equal(do_read(ep, (uint32_t)word_node(w), FAB_REGION_INDEX, word_offset(w), &v,
                                 8), FAB_OK);
        assert_int_equal(v, 3 * CAS_ROUNDS);
    }
    fab_ep_destroy(ep);
    fab_close(fab);
    for (uint32_t n = 1; n < 3; n++)
        fab_close(peers[n]);
}

/* --- requests that must be refused ------------------------------------------------------------ */

static void test_bad_requests_change_nothing(void **state)
{
    (void)state;
    struct fab *fab = open_node(2, 0, NULL);
    assert_non_null(fab);
    struct fab_ep *ep;
    assert_int_equal(fab_ep_create(fab, 0, &ep), FAB_OK);

    unsigned char snapshot_i[INDEX_BYTES], snapshot_d[DATA_BYTES];
    unsigned char *idx = fab_local_base(fab, FAB_REGION_INDEX);
    unsigned char *dat = fab_local_base(fab, FAB_REGION_DATA);
    fill(idx, INDEX_BYTES, 1);
    fill(dat, DATA_BYTES, 2);
    memcpy(snapshot_i, idx, INDEX_BYTES);
    memcpy(snapshot_d, dat, DATA_BYTES);

    unsigned char buf[64] = {0xAA};
    uint64_t old = 0;
    const struct {
        struct fab_wr wr;
        int expect;
    } bad[] = {
        /* out of bounds, including one that would wrap around 2^64 */
        {{.opcode = FAB_OP_WRITE, .node = 0, .region = FAB_REGION_DATA, .offset = DATA_BYTES,
          .local = buf, .length = 1}, FAB_ERR_RANGE},
        {{.opcode = FAB_OP_WRITE, .node = 0, .region = FAB_REGION_DATA, .offset = DATA_BYTES - 8,
          .local = buf, .length = 9}, FAB_ERR_RANGE},
        {{.opcode = FAB_OP_WRITE, .node = 0, .region = FAB_REGION_INDEX,
          .offset = UINT64_MAX - 3, .local = buf, .length = 8}, FAB_ERR_RANGE},
        {{.opcode = FAB_OP_CAS, .node = 0, .region = FAB_REGION_INDEX, .offset = INDEX_BYTES,
          .local = &old, .length = 8, .compare = 0, .swap = 1}, FAB_ERR_RANGE},
        /* unknown node and region */
        {{.opcode = FAB_OP_WRITE, .node = 2, .region = FAB_REGION_DATA, .offset = 0,
          .local = buf, .length = 8}, FAB_ERR_NODE},
        {{.opcode = FAB_OP_WRITE, .node = UINT32_MAX, .region = FAB_REGION_DATA, .offset = 0,
          .local = buf, .length = 8}, FAB_ERR_NODE},
        {{.opcode = FAB_OP_WRITE, .node = 0, .region = (enum fab_region)7, .offset = 0,
          .local = buf, .length = 8}, FAB_ERR_REGION},
        /* misaligned or mis-sized CAS */
        {{.opcode = FAB_OP_CAS, .node = 0, .region = FAB_REGION_INDEX, .offset = 4,
          .local = &old, .length = 8, .compare = 0, .swap = 1}, FAB_ERR_ALIGN},
        {{.opcode = FAB_OP_CAS, .node = 0, .region = FAB_REGION_INDEX, .offset = 8,
          .local = &old, .length = 4, .compare = 0, .swap = 1}, FAB_ERR_INVAL},
        /* malformed */
        {{.opcode = FAB_OP_WRITE, .node = 0, .region = FAB_REGION_DATA, .offset = 0,
          .local = NULL, .length = 8}, FAB_ERR_INVAL},
        {{.opcode = FAB_OP_READ, .node = 0, .region = FAB_REGION_DATA, .offset = 0,
          .local = buf, .length = 0}, FAB_ERR_INVAL},
        {{.opcode = (enum fab_opcode)99, .node = 0, .region = FAB_REGION_DATA, .offset = 0,
          .local = buf, .length = 8}, FAB_ERR_INVAL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        /* Alone, and as the second request of a batch whose first request is valid: the valid
         * one must not run either. */
        struct fab_wr batch[2] = {
            {.opcode = FAB_OP_WRITE, .node = 0, .region = FAB_REGION_DATA, .offset = 64,
             .local = buf, .length = sizeof(buf)},
            bad[i].wr,
        };
        assert_int_equal(fab_post(ep, &bad[i].wr, 1), bad[i].expect);
        assert_int_equal(fab_post(ep, batch, 2), bad[i].expect);
        assert_int_equal(fab_ep_outstanding(ep), 0);
    }
    struct fab_wc wc;
    assert_int_equal(fab_poll(ep, &wc, 1), 0);
    assert_memory_equal(idx, snapshot_i, INDEX_BYTES);
    assert_memory_equal(dat, snapshot_d, DATA_BYTES);

    /* A peer that was never started: refused in the completion, nothing done. */
    assert_int_equal(do_write(ep, 1, FAB_REGION_DATA, 0, buf, 8), FAB_ERR_UNREACH);
    assert_int_equal(do_read(ep, 1, FAB_REGION_INDEX, 0, buf, 8), FAB_ERR_UNREACH);

    fab_ep_destroy(ep);
    fab_close(fab);
}

static void test_queue_depth_and_completion_ids(void **state)
{
    (void)state;
    struct fab *fab = open_node(1, 0, NULL);
    assert_non_null(fab);
    struct fab_ep *ep;
    assert_int_equal(fab_ep_create(fab, 4, &ep), FAB_OK);
    uint64_t v[5] = {11, 22, 33, 44, 55}, back[5] = {0};
    struct fab_wr wr[5];
    for (int i = 0; i < 5; i++)
        wr[i] = (struct fab_wr){.wr_id = 1000 + (uint64_t)i, .opcode = FAB_OP_WRITE, .node = 0,
                                .region = FAB_REGION_INDEX, .offset = 8 * (uint64_t)i,
                                .local = &v[i], .length = 8};
    assert_int_equal(fab_post(ep, wr, 5), FAB_ERR_AGAIN);
    assert_int_equal(fab_post(ep, wr, 4), FAB_OK);
    assert_int_equal(fab_post(ep, &wr[4], 1), FAB_ERR_AGAIN);
    assert_int_equal(fab_ep_outstanding(ep), 4);
    struct fab_wc wc[8];
    int got = 0;
    while (got < 4)
        got += fab_poll(ep, wc + got, 8);
    assert_int_equal(got, 4);
    uint64_t ids = 0;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(wc[i].status, FAB_OK);
        ids |= 1ULL << (wc[i].wr_id - 1000);
    }
    assert_int_equal(ids, 0xF);
    assert_int_equal(fab_post(ep, &wr[4], 1), FAB_OK);
    assert_int_equal(fab_poll(ep, wc, 8), 1);
    assert_int_equal(do_read(ep, 0, FAB_REGION_INDEX, 0, back, sizeof(back)), FAB_OK);
    assert_memory_equal(back, v, sizeof(v));
    const struct fab_ep_stats *st = fab_ep_stats(ep);
    assert_int_equal(st->writes, 5);
    assert_int_equal(st->reads, 1);
    assert_int_equal(st->bytes_written, 40);
    fab_ep_destroy(ep);
    fab_close(fab);
}

/* fab_post_background (the engine's access hints): the bytes are copied at the call, the write
 * lands, its completion never reaches the caller and never counts as outstanding, so fab_exec
 * works with background writes in flight; at most FAB_BG_SLOTS in flight, then FAB_ERR_AGAIN. */
static void test_background_writes(void **state)
{
    (void)state;
    struct fab *fab = open_node(1, 0, NULL);
    assert_non_null(fab);
    struct fab_ep *ep;
    assert_int_equal(fab_ep_create(fab, 0, &ep), FAB_OK);
    bool posted[32] = {false};
    int n = 0;
    for (uint32_t i = 0; i < 32; i++) {
        uint32_t v = 100 + i;
        struct fab_wr wr = {.opcode = FAB_OP_WRITE, .node = 0, .region = FAB_REGION_DATA,
                            .offset = 4096 + 4 * (uint64_t)i, .local = &v, .length = 4};
        int rc = fab_post_background(ep, &wr);
        assert_true(rc == FAB_OK || rc == FAB_ERR_AGAIN);
        posted[i] = rc == FAB_OK;
        n += posted[i];
        v = 0; /* copied at the call: the caller's buffer is free at once */
        assert_int_equal(fab_ep_outstanding(ep), 0);
    }
    assert_true(n >= FAB_BG_SLOTS);
    uint32_t back[32];
    assert_int_equal(do_read(ep, 0, FAB_REGION_DATA, 4096, back, sizeof(back)), FAB_OK);
    for (uint32_t i = 0; i < 32; i++)
        if (posted[i])
            assert_int_equal(back[i], 100 + i);
    struct fab_wc wc;
    assert_int_equal(fab_poll(ep, &wc, 1), 0);
    /* Only short WRITEs. */
    uint64_t big[2] = {0};
    struct fab_wr rd = {.opcode = FAB_OP_READ, .node = 0, .region = FAB_REGION_DATA,
                        .offset = 0, .local = big, .length = 8};
    assert_int_equal(fab_post_background(ep, &rd), FAB_ERR_INVAL);
    struct fab_wr wide = {.opcode = FAB_OP_WRITE, .node = 0, .region = FAB_REGION_DATA,
                          .offset = 0, .local = big, .length = 16};
    assert_int_equal(fab_post_background(ep, &wide), FAB_ERR_INVAL);
    fab_ep_destroy(ep); /* waits for what is still in flight */
    fab_close(fab);
}

static void test_unaligned_round_trips(void **state)
{
    (void)state;
    struct fab *fab = open_node(1, 0, NULL);
    assert_non_null(fab);
    struct fab_ep *ep;
    assert_int_equal(fab_ep_create(fab, 0, &ep), FAB_OK);
    unsigned char want[300], got[300];
    for (uint64_t off = 0; off < 16; off++) {
        for (uint32_t len = 1; len <= 300; len += 37) {
            fill(want, len, (unsigned)(off * 1000 + len));
            memset(got, 0, sizeof(got));
            assert_int_equal(do_write(ep, 0, FAB_REGION_DATA, 4096 + off, want, len), FAB_OK);
            assert_int_equal(do_read(ep, 0, FAB_REGION_DATA, 4096 + off, got, len), FAB_OK);
            assert_memory_equal(got, want, len);
        }
    }
    /* The last byte of a region is reachable, the one past it is not. */
    assert_int_equal(do_write(ep, 0, FAB_REGION_DATA, DATA_BYTES - 1, want, 1), FAB_OK);
    assert_int_equal(do_write(ep, 0, FAB_REGION_DATA, DATA_BYTES, want, 1), FAB_ERR_RANGE);
    fab_ep_destroy(ep);
    fab_close(fab);
}

static void test_bad_configurations(void **state)
{
    (void)state;
    struct fab *fab = NULL;
    struct fab_config c = config(2, 0);
    c.cluster = "bad/name";
    assert_int_equal(fab_open(&c, &fab, NULL), FAB_ERR_INVAL);
    c = config(2, 2);
    assert_int_equal(fab_open(&c, &fab, NULL), FAB_ERR_NODE);
    c = config(0, 0);
    assert_int_equal(fab_open(&c, &fab, NULL), FAB_ERR_NODE);
    c = config(2, 0);
    c.region_size[FAB_REGION_DATA] = 1001;
    assert_int_equal(fab_open(&c, &fab, NULL), FAB_ERR_INVAL);
    /* verbs where this node's address is on no RDMA device (TEST-NET-1), or on a host without
     * RDMA: refused, and the regions it would have made are not left behind. */
    c = config(2, 0);
    c.backend = FAB_BACKEND_VERBS;
    const char *nowhere[2] = {"192.0.2.1:9", "192.0.2.2:9"};
    c.addrs = nowhere;
    int rc = fab_open(&c, &fab, NULL);
    assert_true(rc == FAB_ERR_NOTSUP || rc == FAB_ERR_UNREACH);
    assert_null(fab);
    char path[160];
    snprintf(path, sizeof(path), "/dev/shm/nessie.%s.n0.index", cluster);
    assert_int_equal(access(path, F_OK), -1);

    /* Re-attaching with another geometry is refused and leaves the region as it was. */
    fab = open_node(2, 0, NULL);
    assert_non_null(fab);
    memcpy(fab_local_base(fab, FAB_REGION_DATA), "keep", 4);
    fab_close(fab);
    c = config(2, 0);
    c.region_size[FAB_REGION_DATA] = 2 * DATA_BYTES;
    fab = NULL;
    assert_int_equal(fab_open(&c, &fab, NULL), FAB_ERR_EXISTS);
    assert_null(fab);
    fab = open_node(2, 0, NULL);
    assert_non_null(fab);
    assert_memory_equal(fab_local_base(fab, FAB_REGION_DATA), "keep", 4);
    fab_close(fab);
}

/* --- fault injection ----------------------------------------------------------------------- */

/* Drop READs, lose CASes on offset 8, let the rest through. */
static enum fab_fault faults(void *user, struct fab_ep *ep, const struct fab_wr *wr)
{
    (void)ep;
    ++*(int *)user;
    if (wr->opcode == FAB_OP_READ)
        return FAB_FAULT_DROP;
    if (wr->opcode == FAB_OP_CAS && wr->offset == 8)
        return FAB_FAULT_LOSE;
    return FAB_FAULT_NONE;
}

/* A dropped request never runs and completes in error; a lost one runs and completes in error;
 * completions keep their ids, and the queue accounting is the same as without faults. */
static void test_fault_injection(void **state)
{
    (void)state;
    struct fab *fab = open_node(1, 0, NULL);
    struct fab_ep *ep;
    assert_int_equal(fab_ep_create(fab, 8, &ep), FAB_OK);
    int asked = 0;
    fab_set_fault(fab, faults, &asked);
    uint64_t one = 1, got = 77, old0 = 0, old8 = 0;
    assert_int_equal(do_write(ep, 0, FAB_REGION_INDEX, 0, &one, 8), FAB_OK);
    assert_int_equal(do_read(ep, 0, FAB_REGION_INDEX, 0, &got, 8), FAB_ERR_UNREACH);
    assert_true(got == 77); /* dropped: nothing was read */
    struct fab_wr wrs[3] = {
        {.wr_id = 10, .opcode = FAB_OP_CAS, .node = 0, .region = FAB_REGION_INDEX, .offset = 0,
         .local = &old0, .length = 8, .compare = 1, .swap = 2},
        {.wr_id = 11, .opcode = FAB_OP_CAS, .node = 0, .region = FAB_REGION_INDEX, .offset = 8,
         .local = &old8, .length = 8, .compare = 0, .swap = 5},
        {.wr_id = 12, .opcode = FAB_OP_READ, .node = 0, .region = FAB_REGION_INDEX, .offset = 0,
         .local = &got, .length = 8},
    };
    assert_int_equal(fab_post(ep, wrs, 3), FAB_OK);
    int status[13] = {0}, seen = 0;
    while (seen < 3) {
        struct fab_wc wc[3];
        int k = fab_poll(ep, wc, 3);
        for (int i = 0; i < k; i++)
            status[wc[i].wr_id] = wc[i].status == FAB_OK ? 1 : 2;
        seen += k;
    }
    assert_int_equal(status[10], 1);
    assert_int_equal(status[11], 2);
    assert_int_equal(status[12], 2);
    assert_int_equal(fab_ep_outstanding(ep), 0);
    assert_int_equal(fab_ep_injected(ep), 3);
    assert_int_equal(asked, 5);
    /* The lost CAS ran: its word holds 5. */
    uint64_t *words = fab_local_base(fab, FAB_REGION_INDEX);
    assert_true(words[0] == 2 && words[1] == 5);
    fab_set_fault(fab, NULL, NULL);
    assert_int_equal(do_read(ep, 0, FAB_REGION_INDEX, 8, &got, 8), FAB_OK);
    assert_true(got == 5);
    fab_ep_destroy(ep);
    fab_close(fab);
}

/* A node believed down that connects to us is probed at once (verbs only: shm has no down
 * state). Node 0 finds node 1 absent and marks it down; its prober's back-off then grows
 * (50 ms, doubling, to 2 s). Node 1 opens just after the probe at 1.55 s and reads node 0:
 * node 0 must reach node 1 within a second. Without the probe on connect its next probe came
 * at 3.15 s (make test-rxe's two guests: a SET failed after every daemon was up). */
static void test_peer_that_connects_is_probed_at_once(void **state)
{
    (void)state;
    if (backend != FAB_BACKEND_VERBS)
        skip();
    struct fab *f0 = open_node(2, 0, NULL);
    assert_non_null(f0);
    struct fab_ep *e0, *e1;
    assert_int_equal(fab_ep_create(f0, 0, &e0), FAB_OK);
    uint64_t word = 0;
    assert_int_equal(do_read(e0, 1, FAB_REGION_INDEX, 0, &word, 8), FAB_ERR_UNREACH);
    usleep(1650 * 1000); /* probes at 50, 150, 350, 750, 1550 ms; the next at 3150 */
    struct fab *f1 = open_node(2, 1, NULL);
    assert_non_null(f1);
    assert_int_equal(fab_ep_create(f1, 0, &e1), FAB_OK);
    assert_int_equal(do_read(e1, 0, FAB_REGION_INDEX, 0, &word, 8), FAB_OK);
    int rc = FAB_ERR_UNREACH;
    for (int i = 0; i < 50 && rc != FAB_OK; i++) {
        rc = do_read(e0, 1, FAB_REGION_INDEX, 0, &word, 8);
        if (rc != FAB_OK)
            usleep(20 * 1000);
    }
    assert_int_equal(rc, FAB_OK);
    fab_ep_destroy(e1);
    fab_ep_destroy(e0);
    fab_close(f1);
    fab_close(f0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_then_reattach, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reattach_after_creator_exited, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_seen_by_read_of_other_process, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cas_increments_from_many_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cas_increments_from_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_requests_change_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queue_depth_and_completion_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_background_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unaligned_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_configurations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_injection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_that_connects_is_probed_at_once, setup, teardown),
    };
    const char *which = getenv("NESSIE_TEST_FABRIC");
    if (which && strcmp(which, "verbs") == 0) {
        int ndev = 0;
        struct ibv_device **devs = ibv_get_device_list(&ndev);
        if (devs)
            ibv_free_device_list(devs);
        if (ndev == 0) {
            printf("fabric (verbs): SKIPPED: no RDMA device on this host\n");
            return 77;
        }
        backend = FAB_BACKEND_VERBS;
        /* One process per test (see the top of this file); the group's summary is ours. */
        size_t n = sizeof(tests) / sizeof(tests[0]), failed = 0;
        for (size_t i = 0; i < n; i++) {
            fflush(stdout);
            fflush(stderr);
            pid_t pid = fork();
            if (pid < 0) {
                perror("fork");
                return 1;
            }
            if (pid == 0)
                _exit(_cmocka_run_group_tests("fabric (verbs)", &tests[i], 1, NULL, NULL) ? 1 : 0);
            if (reap(pid) != 0)
                failed++;
        }
        printf("fabric (verbs): %zu of %zu tests passed\n", n - failed, n);
        return failed ? 1 : 0;
    }
    if (which && strcmp(which, "shm") != 0) {
        fprintf(stderr, "NESSIE_TEST_FABRIC=%s: expected shm or verbs\n", which);
        return 2;
    }
    return cmocka_run_group_tests_name("fabric (shm)", tests, NULL, NULL);
}
