/*
 * test_reception.c - the reception daemon through its socket and channels (include/nessie/wire.h),
 * as a client sees it: the request forms, values larger than the arena, multi-get, many requests
 * in flight on one channel, and bad input of every kind (garbage hellos, malformed requests,
 * garbage in the request ring, clients that die mid-request or with requests in their ring). After each
 * bad input the daemon must still serve, and nothing may have changed.
 *
 * The daemon under test is $BUILD/reception (build/ by default), started once for the group.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "channel.h"
#include "fabric/fabric.h"

/* An arena with async slots (each gets ARENA / 2 / SHIM_CH_ASYNC = 1 KiB), and items several
 * arenas long, so values travel in chunks both ways. */
#define ARENA 65536
#define MAX_ITEM 262144

static char dir[64], sock_path[100], cluster[64];
static pid_t daemon_pid;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/nessie-test-recep-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(cluster, sizeof(cluster), "test-recep-%d", (int)getpid());
    char conf[300];
    snprintf(conf, sizeof(conf), "%s/nessie.conf", dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        return -1;
    fprintf(f, "[cluster]\nname = %s\nnodes = 1\nindex_slots = 4096\ndata_bytes = 16777216\n"
               "max_item_size = %d\nexpiration_ms = 200\n"
               "[reception]\nworkers = 2\narena_bytes = %d\nsocket = node%%u.sock\n",
            cluster, MAX_ITEM, ARENA);
    fclose(f);
    snprintf(sock_path, sizeof(sock_path), "%s/node0.sock", dir);
    const char *build = getenv("BUILD");
    char bin[300];
    snprintf(bin, sizeof(bin), "%s/reception", build && *build ? build : "build");
    daemon_pid = fork();
    if (daemon_pid == 0) {
        execl(bin, bin, "--config", conf, "--node", "0", "--run-dir", dir, "--log-level", "warn",
              (char *)NULL);
        perror(bin);
        _exit(127);
    }
    char pidfile[300];
    snprintf(pidfile, sizeof(pidfile), "%s/node0.pid", dir);
    for (int i = 0; i < 600 && access(pidfile, F_OK) != 0; i++)
        sleep_ms(50); /* sanitized builds start slowly */
    return access(pidfile, F_OK) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    int st = 0;
    kill(daemon_pid, SIGTERM);
    waitpid(daemon_pid, &st, 0);
    fab_unlink(FAB_BACKEND_SHM, cluster, 0);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    /* A clean stop: SIGTERM ends the daemon with status 0, never a crash. */
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static struct shim_ch *open_ch(void)
{
    struct shim_ch *ch = NULL;
    assert_int_equal(shim_ch_open(sock_path, &ch), WIRE_OK);
    return ch;
}

static void put(struct shim_ch *ch, const char *k, const char *v)
{
    assert_int_equal(shim_ch_store(ch, WIRE_SET, k, strlen(k), v, strlen(v), 0, 0, 0, NULL),
                     WIRE_OK);
}

static void expect(struct shim_ch *ch, const char *k, const char *v)
{
    struct shim_value got;
    int rc = shim_ch_get(ch, k, strlen(k), NULL, &got);
    if (!v) {
        assert_int_equal(rc, WIRE_NOT_FOUND);
        return;
    }
    assert_int_equal(rc, WIRE_OK);
    assert_int_equal(got.len, strlen(v));
    assert_memory_equal(got.data, v, got.len);
    free(got.data);
}

/* The daemon still serves a new client, and the sentinel key still holds its value. */
static void still_serving(void)
{
    struct shim_ch *ch = open_ch();
    expect(ch, "sentinel", "unchanged");
    shim_ch_close(ch);
}

static long stat_value(const char *name)
{
    char *text;
    assert_int_equal(shim_stats(sock_path, &text), WIRE_OK);
    char pat[128];
    snprintf(pat, sizeof(pat), "STAT %s ", name);
    char *p = strstr(text, pat);
    long v = p ? strtol(p + strlen(pat), NULL, 10) : -1;
    free(text);
    return v;
}

static void test_request_forms(void **state)
{
    (void)state;
    struct shim_ch *ch = open_ch();
    put(ch, "sentinel", "unchanged");
    uint64_t ver = 0, res = 0;
    assert_int_equal(shim_ch_store(ch, WIRE_SET, "f", 1, "one", 3, 7, 0, 0, &ver), WIRE_OK);
    struct shim_value v;
    assert_int_equal(shim_ch_get(ch, "f", 1, NULL, &v), WIRE_OK);
    assert_int_equal(v.flags, 7);
    assert_true(v.version == ver);
    free(v.data);
    assert_int_equal(shim_ch_store(ch, WIRE_ADD, "f", 1, "x", 1, 0, 0, 0, NULL), WIRE_NOT_STORED);
    assert_int_equal(shim_ch_store(ch, WIRE_REPLACE, "nope", 4, "x", 1, 0, 0, 0, NULL),
                     WIRE_NOT_STORED);
    assert_int_equal(shim_ch_store(ch, WIRE_CAS, "f", 1, "two", 3, 0, 0, ver + 1000, NULL),
                     WIRE_EXISTS);
    assert_int_equal(shim_ch_store(ch, WIRE_CAS, "f", 1, "two", 3, 0, 0, ver, NULL), WIRE_OK);
    assert_int_equal(shim_ch_store(ch, WIRE_APPEND, "f", 1, "+", 1, 0, 0, 0, NULL), WIRE_OK);
    assert_int_equal(shim_ch_store(ch, WIRE_PREPEND, "f", 1, "-", 1, 0, 0, 0, NULL), WIRE_OK);
    expect(ch, "f", "-two+");
    put(ch, "n", "41");
    assert_int_equal(shim_ch_arith(ch, "n", 1, 1, 1, &res), WIRE_OK);
    assert_true(res == 42);
    assert_int_equal(shim_ch_arith(ch, "f", 1, 1, 1, &res), WIRE_NON_NUMERIC);
    assert_int_equal(shim_ch_touch(ch, "n", 1, 100), WIRE_OK);
    assert_int_equal(shim_ch_delete(ch, "n", 1), WIRE_OK);
    assert_int_equal(shim_ch_delete(ch, "n", 1), WIRE_NOT_FOUND);
    expect(ch, "n", NULL);
    shim_ch_close(ch);
}

static void fill(char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)('A' + (i * 7 + seed) % 53);
    buf[len] = '\0';
}

/* Values larger than the arena travel in chunks both ways; one over the item limit is refused:
 * a SET then takes the old value out, as memcached does (no stale value outlives a failed SET),
 * the other forms leave it. */
static void test_large_values(void **state)
{
    (void)state;
    struct shim_ch *ch = open_ch();
    static char big[MAX_ITEM + 1], other[MAX_ITEM + 1];
    fill(big, 200000, 1);
    put(ch, "big", big);
    expect(ch, "big", big);
    fill(other, MAX_ITEM, 2);
    assert_int_equal(shim_ch_store(ch, WIRE_REPLACE, "big", 3, other, MAX_ITEM, 0, 0, 0, NULL),
                     WIRE_TOO_BIG);
    expect(ch, "big", big);
    assert_int_equal(shim_ch_store(ch, WIRE_SET, "big", 3, other, MAX_ITEM, 0, 0, 0, NULL),
                     WIRE_TOO_BIG);
    expect(ch, "big", NULL);
    /* An arena-sized value, exactly, and one byte either side. */
    for (size_t len = ARENA - 4; len <= ARENA - 2; len++) {
        fill(other, len, (unsigned)len);
        put(ch, "edge", other);
        expect(ch, "edge", other);
    }
    shim_ch_close(ch);
}

struct hits {
    int n;
    char seen[400];
    int bad;
};

static void on_hit(void *user, size_t index, struct shim_value *v)
{
    struct hits *h = user;
    char want[MAX_ITEM + 1];
    size_t len = index % 7 == 0 ? 9000 : 10 + index;
    fill(want, len, (unsigned)index);
    if (v->len != len || memcmp(v->data, want, len) != 0 || h->seen[index])
        h->bad++;
    h->seen[index] = 1;
    h->n++;
    free(v->data);
}

/* 400 keys, every other one present, some values larger than the arena: one call returns all
 * the hits, each once, whatever number of requests it takes. */
static void test_multi_get(void **state)
{
    (void)state;
    struct shim_ch *ch = open_ch();
    static char keys[400][16];
    const void *kp[400];
    size_t kl[400];
    static char val[MAX_ITEM + 1];
    for (int i = 0; i < 400; i++) {
        snprintf(keys[i], sizeof(keys[i]), "m%d", i);
        kp[i] = keys[i];
        kl[i] = strlen(keys[i]);
        if (i % 2 == 0) {
            fill(val, i % 7 == 0 ? 9000 : 10 + (size_t)i, (unsigned)i);
            put(ch, keys[i], val);
        }
    }
    struct hits h = {0};
    assert_int_equal(shim_ch_mget(ch, kp, kl, 400, on_hit, &h), WIRE_OK);
    assert_int_equal(h.bad, 0);
    assert_int_equal(h.n, 200);
    for (int i = 0; i < 400; i++)
        assert_int_equal(h.seen[i], i % 2 == 0);
    shim_ch_close(ch);
}

static int raw_socket(void)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Send bytes as a hello; return the welcome's status, or -1 if the daemon just hung up. */
static int hello_status(const void *buf, size_t len)
{
    int fd = raw_socket();
    assert_int_equal(send(fd, buf, len, 0), (ssize_t)len);
    struct wire_welcome w;
    ssize_t n = recv(fd, &w, sizeof(w), 0);
    close(fd);
    if (n != (ssize_t)sizeof(w))
        return -1;
    assert_int_equal(w.magic, WIRE_MAGIC);
    return w.status;
}

static void test_garbage_hellos(void **state)
{
    (void)state;
    assert_int_equal(hello_status("GET / HTTP/1.0\r\n\r\n", 18), WIRE_E_MALFORMED);
    assert_int_equal(hello_status("x", 1), WIRE_E_MALFORMED);
    struct wire_hello h = {.magic = WIRE_MAGIC, .version = WIRE_VERSION, .kind = 99};
    assert_int_equal(hello_status(&h, sizeof(h)), WIRE_E_MALFORMED);
    h.kind = WIRE_HELLO_CHANNEL;
    h.version = WIRE_VERSION + 1;
    assert_int_equal(hello_status(&h, sizeof(h)), WIRE_E_VERSION);
    /* A channel of version 1 (one request slot) is refused; its stats hello, which has not
     * changed, is still answered (tools of then keep working). */
    h.version = 1;
    assert_int_equal(hello_status(&h, sizeof(h)), WIRE_E_VERSION);
    h.kind = WIRE_HELLO_STATS;
    int sfd = raw_socket();
    assert_int_equal(send(sfd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
    char text[16384];
    ssize_t got = recv(sfd, text, sizeof(text) - 1, MSG_WAITALL);
    assert_true(got > 5);
    text[got] = '\0';
    assert_memory_equal(text, "STAT ", 5);
    close(sfd);
    h.kind = WIRE_HELLO_CHANNEL;
    h.version = WIRE_VERSION;
    h.magic = 0x12345678;
    assert_int_equal(hello_status(&h, sizeof(h)), WIRE_E_MALFORMED);
    char longer[64] = {0};
    h.magic = WIRE_MAGIC;
    memcpy(longer, &h, sizeof(h));
    assert_int_equal(hello_status(longer, sizeof(longer)), WIRE_E_MALFORMED);
    /* A client that connects and says nothing is dropped; others are not held up for good. */
    int fd = raw_socket();
    still_serving();
    close(fd);
    still_serving();
}

static int raw(struct shim_ch *ch, struct wire_req rq, const void *data, size_t len)
{
    struct wire_rep rep;
    return shim_ch_raw(ch, &rq, data, len, &rep);
}

/* Requests a correct client never sends: each gets its error, and changes nothing. */
static void test_malformed_requests(void **state)
{
    (void)state;
    struct shim_ch *ch = open_ch();
    const char kv[] = "sentinelXYZ";
    assert_int_equal(raw(ch, (struct wire_req){.op = 0}, NULL, 0), WIRE_E_UNKNOWN_OP);
    assert_int_equal(raw(ch, (struct wire_req){.op = 999}, NULL, 0), WIRE_E_UNKNOWN_OP);
    assert_int_equal(raw(ch, (struct wire_req){.op = WIRE_OP_GET, .key_len = 0}, NULL, 0),
                     WIRE_BAD_KEY);
    assert_int_equal(raw(ch, (struct wire_req){.op = WIRE_OP_GET, .key_len = 251}, NULL, 0),
                     WIRE_BAD_KEY);
    assert_int_equal(raw(ch, (struct wire_req){.op = WIRE_OP_GET, .key_len = 200,
                                               .chunk_len = ARENA},
                         NULL, 0),
                     WIRE_E_MALFORMED);
    /* Store: a chunk beyond the value, a length beyond the arena, a mode that does not exist. */
    struct wire_req st = {.op = WIRE_OP_STORE, .key_len = 8, .chunk_len = 3, .total_len = 3};
    st.chunk_off = 5;
    assert_int_equal(raw(ch, st, kv, 11), WIRE_E_MALFORMED);
    st.chunk_off = 0;
    st.chunk_len = 0xffffffffu;
    st.total_len = 0xffffffffu;
    assert_int_equal(raw(ch, st, kv, 11), WIRE_E_MALFORMED);
    st.chunk_len = 3;
    st.total_len = 3;
    st.mode = 77;
    assert_int_equal(raw(ch, st, kv, 11), WIRE_E_MALFORMED);
    /* A value over the item limit, announced: refused before anything is buffered. (An add: a
     * SET that fails so takes the old value out, as memcached's does; test_large_values.) */
    st.mode = WIRE_ADD;
    st.total_len = 0x7fffffffu;
    assert_int_equal(raw(ch, st, kv, 11), WIRE_TOO_BIG);
    st.mode = WIRE_SET;
    /* A continuation of a store that never started; a fetch of nothing. */
    st.total_len = 100;
    st.chunk_off = 50;
    assert_int_equal(raw(ch, st, kv, 11), WIRE_E_MALFORMED);
    assert_int_equal(raw(ch, (struct wire_req){.op = WIRE_OP_FETCH, .chunk_off = 0}, NULL, 0),
                     WIRE_E_MALFORMED);
    /* A chunked store broken off by another request, then resumed: the resumption is refused. */
    st.chunk_off = 0;
    st.chunk_len = 3;
    st.total_len = 100;
    assert_int_equal(raw(ch, st, kv, 11), WIRE_S_CONTINUE);
    assert_int_equal(raw(ch, (struct wire_req){.op = WIRE_OP_NOOP}, NULL, 0), WIRE_OK);
    st.chunk_off = 3;
    assert_int_equal(raw(ch, st, kv, 11), WIRE_E_MALFORMED);
    /* Multi-get: no keys; a key length running past the packed bytes; a zero-length key. */
    assert_int_equal(raw(ch, (struct wire_req){.op = WIRE_OP_MGET, .nkeys = 0}, NULL, 0),
                     WIRE_E_MALFORMED);
    const unsigned char packed[] = {200, 'a', 'b'};
    assert_int_equal(raw(ch, (struct wire_req){.op = WIRE_OP_MGET, .nkeys = 1, .key_len = 3},
                         packed, 3),
                     WIRE_E_MALFORMED);
    const unsigned char zero[] = {0, 1, 'a'};
    assert_int_equal(raw(ch, (struct wire_req){.op = WIRE_OP_MGET, .nkeys = 2, .key_len = 3},
                         zero, 3),
                     WIRE_E_MALFORMED);
    assert_int_equal(raw(ch, (struct wire_req){.op = WIRE_OP_MGET, .nkeys = 5, .key_len = 60000},
                         NULL, 0),
                     WIRE_E_MALFORMED);
    assert_int_equal(raw(ch, (struct wire_req){.op = WIRE_OP_ARITH, .mode = 9, .key_len = 8},
                         kv, 8),
                     WIRE_E_MALFORMED);
    /* The channel itself still works, and nothing changed. */
    expect(ch, "sentinel", "unchanged");
    shim_ch_close(ch);
    still_serving();
}

static void *store_forever(void *arg)
{
    static char v[20001];
    fill(v, 20000, 3);
    for (;;)
        shim_ch_store(arg, WIRE_SET, "dying", 5, v, 20000, 0, 0, 0, NULL);
    return NULL;
}

/* A client killed in the middle of a chunked store, and one killed while its request runs:
 * their channels are released, and the keys they touched are not stuck. */
static void test_client_dies_mid_request(void **state)
{
    (void)state;
    /* No other client is connected: every channel, those of the dead included, must go. */
    const long before = 0;
    for (int round = 0; round < 2; round++) {
        pid_t p = fork();
        if (p == 0) {
            struct shim_ch *ch;
            if (shim_ch_open(sock_path, &ch) != WIRE_OK)
                _exit(1);
            struct wire_req st = {.op = WIRE_OP_STORE, .key_len = 5, .chunk_len = 10,
                                  .total_len = round == 0 ? 60000 : 10};
            struct wire_rep rep;
            if (round == 0) {
                shim_ch_raw(ch, &st, "dyingAAAAAAAAAA", 15, &rep); /* first chunk only */
            } else {
                /* Killed at a random point of a stream of chunked stores: most likely while
                 * the daemon runs one, or between two of its chunks. */
                pthread_t t;
                pthread_create(&t, NULL, store_forever, ch);
                sleep_ms(5);
            }
            raise(SIGKILL);
        }
        int st;
        waitpid(p, &st, 0);
        assert_true(WIFSIGNALED(st));
    }
    /* The hang-ups reach the workers asynchronously. */
    long now = -1;
    for (int i = 0; i < 100 && (now = stat_value("curr_connections")) != before; i++)
        sleep_ms(20);
    assert_int_equal(now, before);
    struct shim_ch *ch = open_ch();
    put(ch, "dying", "alive");
    expect(ch, "dying", "alive");
    shim_ch_close(ch);
    still_serving();
}

/* One channel, every async slot in flight at once (stores, then gets answered in any order),
 * with blocking calls in between: every value comes back whole, to the request that asked. */
static void test_many_in_flight(void **state)
{
    (void)state;
    enum { N = SHIM_CH_ASYNC };
    struct shim_ch *ch = open_ch();
    static char vals[N][801];
    char keys[N][24];
    int t[N];
    struct wire_rep rep;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            snprintf(keys[i], sizeof(keys[i]), "inflight-%d", i);
            fill(vals[i], 100 + (size_t)i * 20 + (size_t)round, (unsigned)(i + round));
            assert_int_equal(shim_ch_post_store(ch, WIRE_SET, keys[i], strlen(keys[i]), vals[i],
                                                strlen(vals[i]), (uint32_t)i, 0, &t[i]),
                             0);
        }
        assert_int_equal(shim_ch_async_busy(ch), N);
        int extra;
        assert_int_equal(shim_ch_post_get(ch, "x", 1, &extra), -EBUSY);
        /* A blocking call while every async slot is taken. */
        expect(ch, "sentinel", "unchanged");
        for (int i = N - 1; i >= 0; i--) {
            assert_int_equal(shim_ch_wait(ch, t[i], &rep), WIRE_OK);
            shim_ch_release(ch, t[i]);
        }
        assert_int_equal(shim_ch_async_busy(ch), 0);
        for (int i = 0; i < N; i++)
            assert_int_equal(shim_ch_post_get(ch, keys[i], strlen(keys[i]), &t[i]), 0);
        int left = N;
        bool done[N];
        memset(done, 0, sizeof(done));
        while (left > 0) {
            for (int i = 0; i < N; i++) {
                if (done[i])
                    continue;
                if (i % 2) {
                    int rc = shim_ch_poll(ch, t[i], &rep);
                    if (rc == 0)
                        continue;
                    assert_int_equal(rc, 1);
                } else {
                    assert_int_equal(shim_ch_wait(ch, t[i], &rep), WIRE_OK);
                }
                /* An answered ticket is not waited for twice. */
                assert_int_equal(shim_ch_wait(ch, t[i], &rep), -EINVAL);
                struct shim_value v;
                assert_int_equal(shim_ch_get_value(ch, t[i], &rep, NULL, &v), WIRE_OK);
                assert_int_equal(v.len, strlen(vals[i]));
                assert_memory_equal(v.data, vals[i], v.len);
                assert_int_equal(v.flags, (uint32_t)i);
                free(v.data);
                shim_ch_release(ch, t[i]);
                done[i] = true;
                left--;
            }
        }
    }
    /* A value larger than an async slot's part comes back in chunks through that slot, while
     * other slots are in flight. */
    static char big[20001];
    fill(big, 20000, 9);
    put(ch, "inflight-big", big);
    int tb, ts;
    assert_int_equal(shim_ch_post_store(ch, WIRE_SET, "inflight-0", 10, "zero", 4, 0, 0, &ts), 0);
    assert_int_equal(shim_ch_post_get(ch, "inflight-big", 12, &tb), 0);
    assert_int_equal(shim_ch_wait(ch, tb, &rep), WIRE_OK);
    struct shim_value v;
    assert_int_equal(shim_ch_get_value(ch, tb, &rep, NULL, &v), WIRE_OK);
    assert_int_equal(v.len, 20000);
    assert_memory_equal(v.data, big, 20000);
    free(v.data);
    shim_ch_release(ch, tb);
    assert_int_equal(shim_ch_wait(ch, ts, &rep), WIRE_OK);
    shim_ch_release(ch, ts);
    expect(ch, "inflight-0", "zero");
    /* A ticket released before its answer: the slot is reused only once the daemon is done. */
    for (int i = 0; i < 3 * N; i++) {
        assert_int_equal(shim_ch_post_get(ch, "inflight-big", 12, &tb), 0);
        shim_ch_release(ch, tb);
    }
    assert_int_equal(shim_ch_async_busy(ch), 0);
    expect(ch, "inflight-big", big);
    shim_ch_close(ch);
    still_serving();
}

/* What a channel stages for its slots (values longer than a slot's part, waiting to be fetched)
 * is bounded: past the budget the GET is refused, and nothing else changes. */
static void test_staging_budget(void **state)
{
    (void)state;
    enum { N = SHIM_CH_ASYNC, LEN = 200000 };
    struct shim_ch *ch = open_ch();
    static char big[LEN + 1];
    fill(big, LEN, 4);
    put(ch, "staged", big);
    int t[N], ok = 0, refused = 0;
    struct wire_rep rep[N];
    for (int i = 0; i < N; i++)
        assert_int_equal(shim_ch_post_get(ch, "staged", 6, &t[i]), 0);
    for (int i = 0; i < N; i++) {
        int rc = shim_ch_wait(ch, t[i], &rep[i]);
        assert_true(rc == WIRE_OK || rc == WIRE_NO_MEMORY);
        rc == WIRE_OK ? ok++ : refused++;
    }
    assert_true(ok >= 1 && refused >= 1);
    for (int i = 0; i < N; i++) {
        if (rep[i].status == WIRE_OK) {
            struct shim_value v;
            assert_int_equal(shim_ch_get_value(ch, t[i], &rep[i], NULL, &v), WIRE_OK);
            assert_int_equal(v.len, LEN);
            assert_memory_equal(v.data, big, LEN);
            free(v.data);
        }
        shim_ch_release(ch, t[i]);
    }
    expect(ch, "staged", big); /* fetched values were unstaged: the budget is free again */
    shim_ch_close(ch);
    still_serving();
}

/* A client may not resize its channel's region under the daemon (that would be a SIGBUS in the
 * daemon): the region is sealed. */
static void test_region_sealed(void **state)
{
    (void)state;
    struct shim_ch *ch = open_ch();
    assert_int_equal(ftruncate(shim_ch_region_fd(ch), 0), -1);
    assert_int_equal(errno, EPERM);
    assert_int_equal(ftruncate(shim_ch_region_fd(ch), 1 << 30), -1);
    expect(ch, "sentinel", "unchanged");
    shim_ch_close(ch);
    still_serving();
}

struct keep_posting {
    struct shim_ch *ch;
    long posted;
};

/* Keeps every async slot of the channel busy (a GET of a missing key in each, re-posted as soon
 * as it is answered) until the channel ends. */
static void *post_until_ended(void *arg)
{
    enum { N = SHIM_CH_ASYNC };
    struct keep_posting *k = arg;
    struct wire_rep rep;
    int t[N];
    for (int i = 0; i < N; i++)
        if (shim_ch_post_get(k->ch, "nothing", 7, &t[i]) != 0)
            return NULL;
    for (;;) {
        for (int i = 0; i < N; i++) {
            int rc = shim_ch_wait(k->ch, t[i], &rep);
            shim_ch_release(k->ch, t[i]);
            if (rc < 0 || shim_ch_post_get(k->ch, "nothing", 7, &t[i]) != 0)
                return NULL;
            __atomic_fetch_add(&k->posted, 1, __ATOMIC_RELAXED);
        }
    }
}

/* A client that hangs up but keeps posting as fast as it can: the daemon serves what was posted
 * when it saw the hang-up, then ends the channel; it does not stay serving that client (which
 * would starve every other channel of its worker, and stop). */
static void test_hangup_while_posting(void **state)
{
    (void)state;
    struct shim_ch *bystander[4];
    for (int i = 0; i < 4; i++)
        bystander[i] = open_ch();
    struct keep_posting k = {.ch = open_ch()};
    pthread_t t;
    pthread_create(&t, NULL, post_until_ended, &k);
    while (__atomic_load_n(&k.posted, __ATOMIC_RELAXED) < 1000)
        sleep_ms(1);
    shutdown(shim_ch_socket_fd(k.ch), SHUT_WR);
    pthread_join(t, NULL); /* ends: the daemon closed the channel */
    for (int i = 0; i < 4; i++) {
        expect(bystander[i], "sentinel", "unchanged");
        shim_ch_close(bystander[i]);
    }
    shim_ch_close(k.ch);
    still_serving();
}

/* Poke the ring of ch as a broken client would, then make the worker look at it. */
enum ring_garbage { BAD_INDEX, NOT_POSTED, HEAD_RUNAWAY };

static void break_ring(struct shim_ch *ch, enum ring_garbage how)
{
    struct wire_channel *h = shim_ch_header(ch);
    uint32_t head = __atomic_load_n(&h->sq_head, __ATOMIC_RELAXED);
    switch (how) {
    case BAD_INDEX:
        h->sq[head % WIRE_SLOTS] = 999;
        head += 1;
        break;
    case NOT_POSTED:
        h->sq[head % WIRE_SLOTS] = 7; /* an idle slot */
        head += 1;
        break;
    case HEAD_RUNAWAY:
        head += 1000;
        break;
    }
    __atomic_store_n(&h->sq_head, head, __ATOMIC_SEQ_CST);
}

/* Garbage in a request: that request is refused. Garbage in the ring: that channel ends with an
 * error, at once (no hang); other channels and the data are untouched. */
static void test_ring_garbage(void **state)
{
    (void)state;
    struct shim_ch *ch = open_ch();
    put(ch, "ringkey", "v1");
    struct wire_rep rep;
    struct wire_req past = {.op = WIRE_OP_GET, .key_len = 4, .arena_off = ARENA - 8,
                            .arena_len = 64};
    assert_int_equal(shim_ch_raw(ch, &past, NULL, 0, &rep), WIRE_E_MALFORMED);
    past.arena_off = ARENA + 8;
    past.arena_len = 8;
    assert_int_equal(shim_ch_raw(ch, &past, NULL, 0, &rep), WIRE_E_MALFORMED);
    past.arena_off = 0xfffffff0u;
    past.arena_len = 0x20;
    assert_int_equal(shim_ch_raw(ch, &past, NULL, 0, &rep), WIRE_E_MALFORMED);
    struct wire_req longkey = {.op = WIRE_OP_GET, .key_len = 100, .arena_off = 0, .arena_len = 64};
    assert_int_equal(shim_ch_raw(ch, &longkey, NULL, 0, &rep), WIRE_E_MALFORMED);
    struct wire_req store = {.op = WIRE_OP_STORE, .key_len = 7, .chunk_len = 100,
                             .total_len = 100, .arena_off = 0, .arena_len = 50};
    assert_int_equal(shim_ch_raw(ch, &store, "ringkeyXXXX", 11, &rep), WIRE_E_MALFORMED);
    expect(ch, "ringkey", "v1");
    shim_ch_close(ch);

    for (int how = BAD_INDEX; how <= HEAD_RUNAWAY; how++) {
        struct shim_ch *bystander = open_ch();
        struct shim_ch *bad = open_ch();
        expect(bad, "ringkey", "v1");
        break_ring(bad, (enum ring_garbage)how);
        shim_ch_kick(bad);
        for (int i = 0; i < 500 && !__atomic_load_n(&shim_ch_header(bad)->error, __ATOMIC_ACQUIRE);
             i++)
            sleep_ms(10);
        assert_int_equal(shim_ch_header(bad)->error, WIRE_E_MALFORMED);
        /* The channel is ended, and says so to the next request. */
        struct shim_value v;
        assert_true(shim_ch_get(bad, "ringkey", 7, NULL, &v) < 0);
        shim_ch_close(bad);
        expect(bystander, "ringkey", "v1");
        put(bystander, "ringkey", "v1");
        shim_ch_close(bystander);
    }
    still_serving();
}

/* A client killed with requests in its ring: what it posted is served (its effect does not
 * depend on when the hang-up is seen), its channel is released, and no key is stuck. */
static void test_client_killed_with_ring(void **state)
{
    (void)state;
    enum { N = SHIM_CH_ASYNC };
    pid_t p = fork();
    if (p == 0) {
        struct shim_ch *ch;
        if (shim_ch_open(sock_path, &ch) != WIRE_OK)
            _exit(1);
        for (int i = 0; i < N; i++) {
            char k[24], v[32];
            snprintf(k, sizeof(k), "killed-%d", i);
            snprintf(v, sizeof(v), "posted-%d", i);
            int t;
            if (shim_ch_post_store(ch, WIRE_SET, k, strlen(k), v, strlen(v), 0, 0, &t) != 0)
                _exit(2);
        }
        raise(SIGKILL);
    }
    int st;
    waitpid(p, &st, 0);
    assert_true(WIFSIGNALED(st));
    long now = -1;
    for (int i = 0; i < 100 && (now = stat_value("curr_connections")) != 0; i++)
        sleep_ms(20);
    assert_int_equal(now, 0);
    struct shim_ch *ch = open_ch();
    for (int i = 0; i < N; i++) {
        char k[24], v[32];
        snprintf(k, sizeof(k), "killed-%d", i);
        snprintf(v, sizeof(v), "posted-%d", i);
        expect(ch, k, v);
        put(ch, k, "after");
        expect(ch, k, "after");
    }
    shim_ch_close(ch);
    still_serving();
}

/* Idle: every worker parks (asleep in epoll_wait, using no CPU). */
static void test_idle_workers_sleep(void **state)
{
    (void)state;
    long asleep = -1;
    for (int i = 0; i < 100 && (asleep = stat_value("nessie_workers_asleep")) != 2; i++)
        sleep_ms(20);
    assert_int_equal(asleep, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_forms),
        cmocka_unit_test(test_large_values),
        cmocka_unit_test(test_multi_get),
        cmocka_unit_test(test_garbage_hellos),
        cmocka_unit_test(test_malformed_requests),
        cmocka_unit_test(test_client_dies_mid_request),
        cmocka_unit_test(test_many_in_flight),
        cmocka_unit_test(test_ring_garbage),
        cmocka_unit_test(test_client_killed_with_ring),
        cmocka_unit_test(test_staging_budget),
        cmocka_unit_test(test_region_sealed),
        cmocka_unit_test(test_hangup_while_posting),
        cmocka_unit_test(test_idle_workers_sleep),
    };
    return cmocka_run_group_tests_name("reception", tests, group_setup, group_teardown);
}
