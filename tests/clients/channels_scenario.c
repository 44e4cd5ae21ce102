/*
 * channels_scenario.c - build/tests/channels-scenario: how many channels a shim client holds
 * (issue "the last hop"), as the daemon counts them (curr_connections, read through
 * memcached_stat_execute, which the shim serves):
 *   1. blocking calls from the main thread: one channel;
 *   2. 64 non-blocking sets and then 64 non-blocking gets issued from that thread without waiting
 *      (each value checked): still one channel, the operations ride in its slots;
 *   3. 8 threads that each store and read a key, then exit: their channels are released when
 *      they exit, and the count falls back to one;
 *   4. a fork with a non-blocking get in flight: the child leaves the parent's request alone (it
 *      rode on the parent's channel) and gets a channel of its own; the parent completes it.
 * Links libdeception.so ahead of libmemcached (for memcached_iset...), and runs against a Nessie
 * daemon (NESSIE_RUN_DIR, node 0) with NESSIE_STRICT=1. Prints one line per step; exit status 1
 * on the first failure.
 *
 *   channels-scenario HOST:PORT
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nessie/memcached_nb.h>

#define NB_OPS 64
#define THREADS 8

static const char *servers;

static memcached_st *handle(void)
{
    memcached_st *m = memcached_create(NULL);
    memcached_server_st *list = memcached_servers_parse(servers);
    if (!m || !list || memcached_server_push(m, list) != MEMCACHED_SUCCESS) {
        fprintf(stderr, "channels-scenario: cannot make a handle for %s\n", servers);
        exit(1);
    }
    memcached_server_list_free(list);
    return m;
}

static memcached_return_t grab(const memcached_instance_st *s, const char *key, size_t klen,
                               const char *value, size_t vlen, void *ctx)
{
    (void)s;
    if (klen == strlen("curr_connections") && memcmp(key, "curr_connections", klen) == 0) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%.*s", (int)(vlen < 31 ? vlen : 31), value);
        *(long *)ctx = strtol(buf, NULL, 10);
    }
    return MEMCACHED_SUCCESS;
}

static long curr_connections(memcached_st *m)
{
    long v = -1;
    memcached_return_t rc = memcached_stat_execute(m, NULL, grab, &v);
    if (rc != MEMCACHED_SUCCESS) {
        fprintf(stderr, "channels-scenario: stats: %s\n", memcached_strerror(m, rc));
        exit(1);
    }
    return v;
}

static void fail(const char *what, long got, long want)
{
    printf("channels-scenario: %s: %ld, expected %ld\n", what, got, want);
    exit(1);
}

static void value_of(char *buf, size_t len, int i)
{
    for (size_t j = 0; j < len; j++)
        buf[j] = (char)('a' + (i * 7 + (int)j) % 26);
}

static void *one_thread(void *arg)
{
    long i = (long)arg;
    memcached_st *m = handle();
    char k[32], v[64];
    snprintf(k, sizeof(k), "chan-thread-%ld", i);
    value_of(v, sizeof(v), (int)i);
    void *ok = (void *)1;
    if (memcached_set(m, k, strlen(k), v, sizeof(v), 0, 0) != MEMCACHED_SUCCESS)
        ok = NULL;
    size_t len;
    uint32_t fl;
    memcached_return_t rc;
    char *got = memcached_get(m, k, strlen(k), &len, &fl, &rc);
    if (rc != MEMCACHED_SUCCESS || len != sizeof(v) || memcmp(got, v, len) != 0)
        ok = NULL;
    free(got);
    memcached_free(m);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "--help") == 0) {
        fprintf(stderr, "usage: channels-scenario HOST:PORT\n");
        return argc == 2 ? 0 : 2;
    }
    servers = argv[1];
    memcached_st *m = handle();

    /* 1. */
    if (memcached_set(m, "chan-main", 9, "x", 1, 0, 0) != MEMCACHED_SUCCESS)
        fail("blocking set", 0, 0);
    /* Clients run before this one may still be leaving (hang-ups are seen asynchronously). */
    long base = -1;
    for (int i = 0; i < 200 && (base = curr_connections(m)) != 1; i++)
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    if (base != 1)
        fail("channels after blocking calls", base, 1);
    printf("channels-scenario: blocking calls: 1 channel\n");

    /* 2. */
    static memcached_req reqs[NB_OPS];
    static char vals[NB_OPS][200];
    char keys[NB_OPS][32];
    for (int i = 0; i < NB_OPS; i++) {
        snprintf(keys[i], sizeof(keys[i]), "chan-nb-%d", i);
        value_of(vals[i], 100 + (size_t)i, i);
        uint32_t fl = (uint32_t)i;
        if (memcached_iset(m, keys[i], strlen(keys[i]), vals[i], 100 + (size_t)i, 0, &fl,
                           &reqs[i]) != MEMCACHED_SUCCESS)
            fail("iset", i, 0);
    }
    for (int i = 0; i < NB_OPS; i++) {
        memcached_wait(m, &reqs[i]);
        if (!reqs[i].complete || reqs[i].rc != MEMCACHED_SUCCESS)
            fail("iset outcome", reqs[i].rc, MEMCACHED_SUCCESS);
    }
    size_t lens[NB_OPS];
    uint32_t flags[NB_OPS];
    for (int i = 0; i < NB_OPS; i++) {
        memcached_return_t err;
        memcached_iget(m, keys[i], strlen(keys[i]), &lens[i], &flags[i], &reqs[i], &err);
        if (err != MEMCACHED_SUCCESS)
            fail("iget", err, MEMCACHED_SUCCESS);
    }
    long during = curr_connections(m);
    for (int i = NB_OPS - 1; i >= 0; i--) {
        memcached_wait(m, &reqs[i]);
        if (reqs[i].rc != MEMCACHED_SUCCESS || reqs[i].value_length != 100 + (size_t)i ||
            memcmp(reqs[i].value, vals[i], reqs[i].value_length) != 0 ||
            reqs[i].flags != (uint32_t)i)
            fail("iget value of key", i, -1);
        free(reqs[i].value);
    }
    long after = curr_connections(m);
    if (during != 1 || after != 1)
        fail("channels with 64 non-blocking operations", during != 1 ? during : after, 1);
    printf("channels-scenario: %d non-blocking sets and gets: 1 channel, every value right\n",
           NB_OPS);

    /* 3. */
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, one_thread, (void *)i);
    for (int i = 0; i < THREADS; i++) {
        void *ok;
        pthread_join(t[i], &ok);
        if (!ok)
            fail("thread's set/get", i, -1);
    }
    /* The daemon learns of each hang-up asynchronously. */
    long now = -1;
    for (int i = 0; i < 200 && (now = curr_connections(m)) != 1; i++)
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    if (now != 1)
        fail("channels after 8 threads exited", now, 1);
    printf("channels-scenario: %d threads exited: their channels released (1 left)\n", THREADS);

    /* 4. A fork with a get in flight: the child's copy of the request is not its own (it rode on
     *    the parent's channel): waiting for it there does nothing, and the child's own calls get
     *    a channel of their own. The parent completes it as usual. */
    memcached_req r;
    size_t len;
    uint32_t fl;
    memcached_return_t err;
    memcached_iget(m, keys[3], strlen(keys[3]), &len, &fl, &r, &err);
    if (err != MEMCACHED_SUCCESS)
        fail("iget before fork", err, MEMCACHED_SUCCESS);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        memcached_wait(m, &r);
        memcached_test(m, &r);
        if (memcached_set(m, "chan-child", 10, "c", 1, 0, 0) != MEMCACHED_SUCCESS)
            _exit(3);
        _exit(0);
    }
    int st = 0;
    waitpid(child, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail("child after fork (exit status, or signal + 128)",
             WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), 0);
    memcached_wait(m, &r);
    if (r.rc != MEMCACHED_SUCCESS || r.value_length != 103 || memcmp(r.value, vals[3], 103) != 0)
        fail("parent's iget across a fork", r.rc, MEMCACHED_SUCCESS);
    free(r.value);
    printf("channels-scenario: fork with a get in flight: the child leaves it alone, the parent "
           "completes it\n");
    memcached_free(m);
    return 0;
}
