/*
 * capi_scenario.c - build/tests/capi-scenario CONFIG: the libmemcached C API a program may call,
 * one line per step with what it returned: a transcript to compare between memcached (no shim)
 * and Nessie (through libdeception.so). CONFIG is a libmemcached configuration string
 * ("--SERVER=host:port [--BINARY-PROTOCOL]").
 */
#include <libmemcached/memcached.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static memcached_st *m;

static void show(const char *step, memcached_return_t rc)
{
    printf("%s: %s\n", step, memcached_strerror(m, rc));
}

static void get(const char *step, const char *key)
{
    memcached_return_t rc;
    size_t len = 0;
    uint32_t flags = 0;
    char *v = memcached_get(m, key, strlen(key), &len, &flags, &rc);
    printf("%s: %s len=%zu flags=%u value=%s\n", step, memcached_strerror(m, rc), len, flags,
           v ? v : "(null)");
    free(v);
}

static memcached_return_t count_cb(const memcached_st *p, memcached_result_st *r, void *ctx)
{
    (void)p;
    (*(int *)ctx)++;
    printf("    callback %.*s=%.*s\n", (int)memcached_result_key_length(r),
           memcached_result_key_value(r), (int)memcached_result_length(r),
           memcached_result_value(r));
    return MEMCACHED_SUCCESS;
}

/* GET key through handle h: its status and what came back, as plain text or as "sealed" bytes
 * (what another handle reads of an encrypted value: never the plain one). */
static void get_on(memcached_st *h, const char *step, const char *key, const char *plain)
{
    memcached_return_t rc;
    size_t len = 0;
    uint32_t flags = 0;
    char *v = memcached_get(h, key, strlen(key), &len, &flags, &rc);
    bool same = v && len == strlen(plain) && memcmp(v, plain, len) == 0;
    printf("%s: %s flags=%u %s\n", step, memcached_strerror(h, rc), flags,
           !v ? "(null)" : same ? plain : len > strlen(plain) ? "sealed" : "other");
    free(v);
}

/* memcached_set_encoding_key: the library encrypts a value before it leaves and decrypts it as
 * it arrives (over ascii; over binary it hands the sealed bytes back as they came). Through the
 * shim the same must hold, and Nessie must hold the sealed bytes: a handle without the key reads
 * them. (A read that cannot be decrypted answers NOT FOUND or FAILURE depending on the handle's
 * previous reads: not compared.) */
static void encoding_key(void)
{
    memcached_st *e = memcached_clone(NULL, m), *bare = memcached_clone(NULL, m);
    show("set_encoding_key", memcached_set_encoding_key(e, "s3cret", 6));
    show("enc set", memcached_set(e, "enc", 3, "plaintext", 9, 0, 3));
    get_on(e, "enc get", "enc", "plaintext");
    get_on(bare, "enc get without key", "enc", "plaintext");
    const char *keys[] = {"enc", "nope"};
    size_t lens[] = {3, 4};
    show("enc mget", memcached_mget(e, keys, lens, 2));
    memcached_return_t rc;
    memcached_result_st *r;
    while ((r = memcached_fetch_result(e, NULL, &rc))) {
        bool plain = memcached_result_length(r) == 9 && !memcmp(memcached_result_value(r), "plaintext", 9);
        printf("    fetched %.*s=%s\n", (int)memcached_result_key_length(r),
               memcached_result_key_value(r), plain ? "plaintext" : "sealed");
        memcached_result_free(r);
    }
    printf("enc fetch end: %s\n", memcached_strerror(e, rc));
    show("enc append", memcached_append(e, "enc", 3, "more", 4, 0, 0));
    show("enc replace", memcached_replace(e, "enc", 3, "second", 6, 0, 0));
    get_on(e, "enc get replaced", "enc", "second");
    show("enc set empty", memcached_set(e, "empty", 5, "", 0, 0, 0));
    get_on(e, "enc get empty", "empty", "");
    {
        /* A handle with another key never reads the plain value (its status: not compared). */
        memcached_st *w = memcached_clone(NULL, m);
        show("set_encoding_key wrong", memcached_set_encoding_key(w, "wrong!", 6));
        size_t len = 0;
        uint32_t fl = 0;
        char *v = memcached_get(w, "enc", 3, &len, &fl, &rc);
        printf("enc get with a wrong key: %s\n",
               v && len == 6 && !memcmp(v, "second", 6) ? "plaintext" : "not plaintext");
        free(v);
        memcached_free(w);
    }
    memcached_free(bare);
    memcached_free(e);
}

/* memcached_behavior_set of hashing and distribution: with the shim the daemon routes every key
 * (they must change nothing a client sees); against one memcached they change nothing either. */
static void hashing_behaviours(void)
{
    static const struct {
        const char *name;
        memcached_behavior_t b;
        uint64_t v;
    } sets[] = {
        {"hash md5", MEMCACHED_BEHAVIOR_HASH, MEMCACHED_HASH_MD5},
        {"hash fnv1a_32", MEMCACHED_BEHAVIOR_HASH, MEMCACHED_HASH_FNV1A_32},
        {"hash murmur", MEMCACHED_BEHAVIOR_HASH, MEMCACHED_HASH_MURMUR},
        {"distribution ketama", MEMCACHED_BEHAVIOR_DISTRIBUTION,
         MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA},
        {"ketama weighted", MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1},
        {"distribution random", MEMCACHED_BEHAVIOR_DISTRIBUTION, MEMCACHED_DISTRIBUTION_RANDOM},
        {"distribution modula", MEMCACHED_BEHAVIOR_DISTRIBUTION, MEMCACHED_DISTRIBUTION_MODULA},
    };
    memcached_st *h = memcached_clone(NULL, m);
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
        char step[64], key[16], val[16];
        snprintf(step, sizeof(step), "behavior %s", sets[i].name);
        show(step, memcached_behavior_set(h, sets[i].b, sets[i].v));
        snprintf(key, sizeof(key), "hb%zu", i);
        snprintf(val, sizeof(val), "v%zu", i);
        snprintf(step, sizeof(step), "%s: set %s", sets[i].name, key);
        show(step, memcached_set(h, key, strlen(key), val, strlen(val), 0, 0));
        snprintf(step, sizeof(step), "%s: get %s", sets[i].name, key);
        get_on(h, step, key, val);
        snprintf(step, sizeof(step), "%s: get hb0 (stored earlier)", sets[i].name);
        get_on(h, step, "hb0", "v0");
    }
    const char *keys[] = {"hb0", "hb3", "hb6", "hb-none"};
    size_t lens[] = {3, 3, 3, 7};
    show("hashing: mget", memcached_mget(h, keys, lens, 4));
    memcached_return_t rc;
    memcached_result_st *r;
    unsigned n = 0;
    while ((r = memcached_fetch_result(h, NULL, &rc))) {
        n++;
        memcached_result_free(r);
    }
    printf("hashing: mget fetched %u, end %s\n", n, memcached_strerror(h, rc));
    memcached_free(h);
}

/* MEMCACHED_BEHAVIOR_BUFFER_REQUESTS: a SET or a DELETE answers ACTION QUEUED and is written
 * out ahead of the handle's next other command, at memcached_flush_buffers or at memcached_free;
 * until then another handle does not see it. */
static void buffered_writes(void)
{
    memcached_st *b = memcached_clone(NULL, m), *o = memcached_clone(NULL, m);
    const char *keys[] = {"bw1", "bw2", "bw3", "bw4", "bw5", "bw6"};
    for (int i = 0; i < 6; i++)
        memcached_delete(o, keys[i], 3, 0);
    memcached_behavior_set(b, MEMCACHED_BEHAVIOR_BUFFER_REQUESTS, 1);
    show("buffered set bw1", memcached_set(b, "bw1", 3, "one", 3, 0, 0));
    get_on(o, "other get bw1", "bw1", "one");
    show("add bw2 (not buffered)", memcached_add(b, "bw2", 3, "two", 3, 0, 0));
    get_on(o, "other get bw1 after the add", "bw1", "one");
    show("buffered set bw3", memcached_set(b, "bw3", 3, "three", 5, 0, 0));
    get_on(b, "own get bw3", "bw3", "three");
    show("buffered set bw4", memcached_set(b, "bw4", 3, "four", 4, 0, 0));
    show("buffered delete bw9", memcached_delete(b, "bw9", 3, 0));
    get_on(o, "other get bw4", "bw4", "four");
    show("buffered set bw5", memcached_set(b, "bw5", 3, "five", 4, 0, 0));
    show("flush_buffers", memcached_flush_buffers(b));
    usleep(200 * 1000); /* memcached reads the flushed bytes in its own time */
    get_on(o, "other get bw5", "bw5", "five");
    show("buffered set bw6", memcached_set(b, "bw6", 3, "six", 3, 0, 0));
    memcached_free(b);
    usleep(200 * 1000);
    get_on(o, "other get bw6 after free", "bw6", "six");
    memcached_free(o);
}

/* More of what clients do: absolute TTLs (past 30 days a TTL is a Unix time), a multi-get of
 * 1000 keys, touch_by_key, a CAS race between two handles, and NOREPLY. */
static void more_calls(void)
{
    time_t now = time(NULL);
    show("set ttl absolute future", memcached_set(m, "ta", 2, "fut", 3, now + 100, 0));
    get("get ttl absolute future", "ta");
    show("set ttl absolute past", memcached_set(m, "tp", 2, "past", 4, now - 100, 0));
    get("get ttl absolute past", "tp");
    show("set ttl 31 days (a time in 1970)", memcached_set(m, "t31", 3, "old", 3, 31 * 86400, 0));
    get("get ttl 31 days", "t31");
    show("set ttl 30 days (relative)", memcached_set(m, "t30", 3, "rel", 3, 30 * 86400, 0));
    get("get ttl 30 days", "t30");

    static char keys[1000][8];
    const char *kp[1000];
    size_t kl[1000];
    int stored = 0;
    for (int i = 0; i < 1000; i++) {
        snprintf(keys[i], sizeof(keys[i]), "mk%d", i);
        kp[i] = keys[i];
        kl[i] = strlen(keys[i]);
        if (i % 3 != 0) /* a third are misses */
            stored += memcached_set(m, keys[i], kl[i], keys[i], kl[i], 0, (uint32_t)i) ==
                      MEMCACHED_SUCCESS;
    }
    printf("stored for mget: %d\n", stored);
    show("mget 1000", memcached_mget(m, kp, kl, 1000));
    memcached_return_t rc;
    memcached_result_st *r;
    int got = 0, right = 0;
    while ((r = memcached_fetch_result(m, NULL, &rc))) {
        got++;
        right += memcached_result_length(r) == memcached_result_key_length(r) &&
                 !memcmp(memcached_result_value(r), memcached_result_key_value(r),
                         memcached_result_length(r));
        memcached_result_free(r);
    }
    printf("mget 1000: fetched %d, each its own value: %d, end %s\n", got, right,
           memcached_strerror(m, rc));

    show("touch_by_key", memcached_touch_by_key(m, "grp", 3, "mk1", 3, 100));
    show("touch_by_key missing", memcached_touch_by_key(m, "grp", 3, "mk0", 3, 100));

    memcached_st *h1 = memcached_clone(NULL, m), *h2 = memcached_clone(NULL, m);
    show("cas race: set", memcached_set(h1, "race", 4, "v0", 2, 0, 0));
    const char *rk[] = {"race"};
    size_t rl[] = {4};
    memcached_mget(h1, rk, rl, 1);
    r = memcached_fetch_result(h1, NULL, &rc);
    uint64_t cas = r ? memcached_result_cas(r) : 0;
    if (r)
        memcached_result_free(r);
    while ((r = memcached_fetch_result(h1, NULL, &rc)))
        memcached_result_free(r);
    show("cas race: the other handle sets", memcached_set(h2, "race", 4, "v2", 2, 0, 0));
    show("cas race: the first handle's cas", memcached_cas(h1, "race", 4, "v1", 2, 0, 0, cas));
    get("cas race: get", "race");
    memcached_free(h2);
    memcached_free(h1);
}

/* MEMCACHED_BEHAVIOR_NOREPLY: writes answer SUCCESS whatever the server would have said (an
 * incr's value reads all ones). Reads through the same handle afterwards are left out: over
 * binary, libmemcached 1.1.4 then reads the quiet commands' stray answers as theirs. */
static void noreply_calls(void)
{
    memcached_st *n = memcached_clone(NULL, m), *o = memcached_clone(NULL, m);
    memcached_delete(o, "nr1", 3, 0);
    memcached_delete(o, "nr2", 3, 0);
    memcached_behavior_set(n, MEMCACHED_BEHAVIOR_NOREPLY, 1);
    show("noreply set", memcached_set(n, "nr1", 3, "one", 3, 0, 0));
    usleep(200 * 1000); /* memcached answers nothing: give it the time to apply it */
    get_on(o, "other get nr1", "nr1", "one");
    show("noreply add existing", memcached_add(n, "nr1", 3, "two", 3, 0, 0));
    show("noreply replace missing", memcached_replace(n, "nr2", 3, "x", 1, 0, 0));
    show("noreply delete missing", memcached_delete(n, "nr2", 3, 0));
    show("noreply append", memcached_append(n, "nr1", 3, "+", 1, 0, 0));
    usleep(200 * 1000);
    get_on(o, "other get nr1 after", "nr1", "one+");
    uint64_t v = 7;
    show("noreply incr non-numeric", memcached_increment(n, "nr1", 3, 1, &v));
    printf("noreply incr value: %llu\n", (unsigned long long)v);
    show("noreply delete", memcached_delete(n, "nr1", 3, 0));
    usleep(200 * 1000);
    get_on(o, "other get nr1 after delete", "nr1", "one+");
    memcached_free(n);
    memcached_free(o);
}

/* The server's total_connections (memcached_stat on the first server), or 0. */
static unsigned long long total_connections(void)
{
    memcached_return_t rc;
    memcached_stat_st *st = memcached_stat(m, NULL, &rc);
    if (!st)
        return 0;
    char *v = memcached_stat_get_value(m, st, "total_connections", &rc);
    unsigned long long n = v ? strtoull(v, NULL, 10) : 0;
    free(v);
    memcached_stat_free(m, st);
    return n;
}

/* memcached counts a connection each time a handle reconnects after memcached_quit; calls on an
 * open connection, and a clone's free, count none of the handle's. */
static void reconnects(void)
{
    unsigned long long t0 = total_connections();
    show("set rc1", memcached_set(m, "rc1", 3, "x", 1, 0, 0));
    unsigned long long t1 = total_connections();
    printf("total_connections after a set: +%llu\n", t1 - t0);
    memcached_quit(m);
    show("set rc2 after quit", memcached_set(m, "rc2", 3, "y", 1, 0, 0));
    unsigned long long t2 = total_connections();
    printf("total_connections after quit and a set: +%llu\n", t2 - t1);
    memcached_quit(m);
    memcached_quit(m);
    unsigned long long t3 = total_connections();
    printf("total_connections after two quits: +%llu\n", t3 - t2);
}

/* Values at the item size limit (memcached -I 1m, the cluster's max_item_size 1 MiB): key + value
 * + 59 bytes fit, 4 fewer with flags; one byte more is too big and leaves the old value; a value
 * of exactly 1 MiB never fits. Each stored value is read back whole. */
static void item_size_limits(void)
{
    const size_t mib = 1048576, key = 2;
    char *v = malloc(mib + 1);
    if (!v)
        return;
    for (size_t i = 0; i <= mib; i++)
        v[i] = (char)('a' + i % 26);
    const struct {
        const char *step;
        size_t len;
        uint32_t flags;
    } c[] = {
        {"largest value - 1", mib - 59 - key - 1, 0}, {"largest value", mib - 59 - key, 0},
        {"largest value + 1", mib - 59 - key + 1, 0}, {"largest with flags", mib - 63 - key, 9},
        {"largest with flags + 1", mib - 63 - key + 1, 9}, {"1 MiB value", mib, 0},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        memcached_set(m, "mx", key, "old", 3, 0, 0);
        memcached_return_t rc = memcached_set(m, "mx", key, v, c[i].len, 0, c[i].flags);
        printf("set %s (%zu B): %s\n", c[i].step, c[i].len, memcached_strerror(m, rc));
        size_t len = 0;
        uint32_t fl = 0;
        char *got = memcached_get(m, "mx", key, &len, &fl, &rc);
        printf("get %s: %s len=%zu flags=%u %s\n", c[i].step, memcached_strerror(m, rc), len, fl,
               !got ? "(null)"
               : len == c[i].len && memcmp(got, v, len) == 0 ? "whole"
               : len == 3 && memcmp(got, "old", 3) == 0 ? "old"
                                                          : "other");
        free(got);
    }
    free(v);
}

/* Keys with bytes the ascii protocol cannot carry (a space or a control character ends a token),
 * and one past 0x7e, which memcached takes. */
static const struct {
    const char *name, *key;
    size_t len;
} odd_keys[] = {
    {"space", "a b", 3},      {"newline", "a\nb", 3},  {"cr", "a\rb", 3},
    {"tab", "a\tb", 3},       {"ctl-01", "a\001b", 3}, {"del", "a\177b", 3},
    {"nul", "a\0b", 3},       {"lead-space", " ab", 3}, {"only-space", " ", 1},
    {"crlf", "a\r\nb", 4},     {"high", "a\351b", 3},
};
#define ODD_KEYS (sizeof(odd_keys) / sizeof(odd_keys[0]))

/* Each odd key through h (or "high" alone): set, get, delete, a multi-get with a good key, then
 * a good set (the connection must still be in step). */
static void odd_keys_on(memcached_st *h, const char *what, bool high_only)
{
    char step[96];
    for (size_t i = 0; i < ODD_KEYS; i++) {
        if (high_only && strcmp(odd_keys[i].name, "high") != 0)
            continue;
        const char *k = odd_keys[i].key;
        size_t kl = odd_keys[i].len;
        memcached_return_t rc = memcached_set(h, k, kl, "v", 1, 0, 0);
        printf("%s %s set: %s\n", what, odd_keys[i].name, memcached_strerror(h, rc));
        size_t vl = 0;
        uint32_t fl = 0;
        char *v = memcached_get(h, k, kl, &vl, &fl, &rc);
        printf("%s %s get: %s %s\n", what, odd_keys[i].name, memcached_strerror(h, rc),
               v ? v : "(null)");
        free(v);
        rc = memcached_delete(h, k, kl, 0);
        printf("%s %s delete: %s\n", what, odd_keys[i].name, memcached_strerror(h, rc));
        const char *keys[2] = {"a", k};
        size_t lens[2] = {1, kl};
        rc = memcached_mget(h, keys, lens, 2);
        printf("%s %s mget: %s\n", what, odd_keys[i].name, memcached_strerror(h, rc));
        memcached_result_st *r;
        while ((r = memcached_fetch_result(h, NULL, &rc)))
            memcached_result_free(r);
        snprintf(step, sizeof(step), "%s %s then set", what, odd_keys[i].name);
        rc = memcached_set(h, "odd-ok", 6, "v", 1, 0, 0);
        printf("%s: %s\n", step, memcached_strerror(h, rc));
    }
}

/* With MEMCACHED_BEHAVIOR_VERIFY_KEY the library refuses, in ascii, every key that is not all
 * isgraph() bytes, before it talks to anyone; in binary it checks nothing and memcached stores
 * any byte. Without it, in binary, the same; in ascii the library sends them and the connection
 * breaks (or an assertion aborts the program): only "high" is compared there, and the rest is
 * checked through the shim alone (CAPI_ODD_KEYS=ascii, tests/integration/shim-clients.sh). */
static void odd_keys_checks(void)
{
    memcached_st *v = memcached_clone(NULL, m);
    memcached_behavior_set(v, MEMCACHED_BEHAVIOR_VERIFY_KEY, 1);
    odd_keys_on(v, "verify-key", false);
    memcached_free(v);
    odd_keys_on(m, "plain", memcached_behavior_get(m, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL) == 0);
}

static memcached_return_t dump_count(const memcached_st *p, const char *key, size_t len,
                                     void *ctx)
{
    (void)p;
    (void)key;
    (void)len;
    (*(int *)ctx)++;
    return MEMCACHED_SUCCESS;
}

/* memcached_dump after a few sets: only its outcome is compared. memcached lists only the items
 * of its COLD LRU (a key just set is often not listed at all), and Nessie lists the keys of the
 * node the shim talks to (every key this scenario wrote through it, whatever the server list),
 * so the keys differ by design (tests/integration/shim-clients.sh compares them with a memcached
 * that lists all its items). Binary: NOT SUPPORTED; ascii: the library asks the servers'
 * versions first, which the version numbers printed after this show. */
static void dump_calls(void)
{
    int n = 0;
    memcached_dump_fn cbs[] = {dump_count};
    for (int i = 0; i < 3; i++) {
        char k[8];
        snprintf(k, sizeof(k), "dk%d", i);
        memcached_set(m, k, strlen(k), "v", 1, 0, 0);
    }
    show("dump", memcached_dump(m, cbs, &n, 1));
    show("dump without callbacks", memcached_dump(m, NULL, NULL, 0));
    memcached_st *e = memcached_create(NULL);
    printf("no servers: dump %s\n", memcached_strerror(e, memcached_dump(e, cbs, &n, 1)));
    memcached_free(e);
}

/* The callbacks' contract (libmemcached's dump.cc), which only a dump that lists keys shows
 * (CAPI_DUMP=1; tests/integration/shim-clients.sh runs it against a memcached that lists all its
 * items), after a flush and five sets, d0..d4. Every key reaches the first callback; a callback
 * that answers anything but SUCCESS ends that key's callbacks, not the dump; an error answer
 * (memcached_fatal) makes the result SOME ERRORS, another one does not. The keys are deleted at
 * the end. */
static memcached_return_t dump_first_rc;
static memcached_return_t dump_first(const memcached_st *p, const char *key, size_t len,
                                     void *ctx)
{
    (void)p;
    int *c = ctx;
    c[0]++;
    return len == 2 && strcmp(key, "d3") == 0 ? dump_first_rc : MEMCACHED_SUCCESS;
}

static memcached_return_t dump_second(const memcached_st *p, const char *key, size_t len,
                                      void *ctx)
{
    (void)p;
    (void)key;
    (void)len;
    ((int *)ctx)[1]++;
    return MEMCACHED_SUCCESS;
}

static void dump_callbacks(void)
{
    static const memcached_return_t rcs[] = {MEMCACHED_SUCCESS, MEMCACHED_NOTFOUND,
                                             MEMCACHED_FAILURE};
    memcached_dump_fn cbs[] = {dump_first, dump_second};
    show("flush", memcached_flush(m, 0));
    for (int i = 0; i < 5; i++) {
        char k[8];
        snprintf(k, sizeof(k), "d%d", i);
        show(k, memcached_set(m, k, strlen(k), "v", 1, 0, 0));
    }
    for (size_t i = 0; i < sizeof(rcs) / sizeof(rcs[0]); i++) {
        int counts[2] = {0, 0};
        dump_first_rc = rcs[i];
        memcached_return_t rc = memcached_dump(m, cbs, counts, 2);
        printf("dump, d3's first callback answering %s: %s, first %d, second %d\n",
               memcached_strerror(m, rcs[i]), memcached_strerror(m, rc), counts[0], counts[1]);
    }
    for (int i = 0; i < 5; i++) { /* nothing left behind for the dumps after this one */
        char k[8];
        snprintf(k, sizeof(k), "d%d", i);
        memcached_delete(m, k, strlen(k), 0);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: capi-scenario CONFIG\n");
        return 2;
    }
    m = memcached(argv[1], strlen(argv[1]));
    if (!m) {
        fprintf(stderr, "capi-scenario: bad configuration\n");
        return 2;
    }
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_SUPPORT_CAS, 1);
    if (getenv("CAPI_DUMP")) { /* the dump's callbacks alone (see above) */
        dump_callbacks();
        memcached_free(m);
        return 0;
    }
    if (getenv("CAPI_ODD_KEYS")) { /* the odd keys alone, without VERIFY_KEY (see above) */
        odd_keys_on(m, "plain", false);
        memcached_free(m);
        return 0;
    }
    memcached_return_t rc;
    uint64_t v64 = 0;

    show("flush", memcached_flush(m, 0));
    show("set a", memcached_set(m, "a", 1, "alpha", 5, 0, 7));
    get("get a", "a");
    show("set empty", memcached_set(m, "empty", 5, "", 0, 0, 0));
    get("get empty", "empty");
    show("add a", memcached_add(m, "a", 1, "x", 1, 0, 0));
    show("replace nope", memcached_replace(m, "nope", 4, "x", 1, 0, 0));
    show("append nope", memcached_append(m, "nope", 4, "x", 1, 0, 0));
    show("prepend a", memcached_prepend(m, "a", 1, "<", 1, 0, 0));
    get("get a", "a");
    show("set_by_key b", memcached_set_by_key(m, "grp", 3, "b", 1, "beta", 4, 0, 3));
    {
        size_t len;
        uint32_t fl;
        char *v = memcached_get_by_key(m, "grp", 3, "b", 1, &len, &fl, &rc);
        printf("get_by_key b: %s %.*s flags=%u\n", memcached_strerror(m, rc), (int)len,
               v ? v : "", fl);
        free(v);
    }
    /* cas: the token from a multi-get result */
    const char *k1[] = {"a"};
    size_t l1[] = {1};
    show("mget a", memcached_mget(m, k1, l1, 1));
    memcached_result_st *r = memcached_fetch_result(m, NULL, &rc);
    uint64_t cas = r ? memcached_result_cas(r) : 0;
    printf("fetch_result a: %s cas-nonzero=%d\n", memcached_strerror(m, rc), cas != 0);
    memcached_result_free(r);
    r = memcached_fetch_result(m, NULL, &rc);
    printf("fetch_result end: %s %p\n", memcached_strerror(m, rc), (void *)r);
    {
        memcached_result_st res;
        memcached_result_create(m, &res);
        show("mget a (caller's result)", memcached_mget(m, k1, l1, 1));
        memcached_result_st *got = memcached_fetch_result(m, &res, &rc);
        printf("fetch_result: %s same=%d\n", memcached_strerror(m, rc), got == &res);
        got = memcached_fetch_result(m, &res, &rc);
        printf("fetch_result end: %s %p\n", memcached_strerror(m, rc), (void *)got);
        memcached_result_free(&res);
    }
    show("cas stale", memcached_cas(m, "a", 1, "C", 1, 0, 0, cas + 12345));
    show("cas", memcached_cas(m, "a", 1, "C", 1, 0, 0, cas));
    get("get a after cas", "a");
    show("cas missing", memcached_cas(m, "nope", 4, "C", 1, 0, 0, cas));
    /* multi-get with fetch (key buffer), and with no hits at all */
    const char *k3[] = {"a", "nope", "b"};
    size_t l3[] = {1, 4, 1};
    show("mget a nope b", memcached_mget(m, k3, l3, 3));
    for (;;) {
        char key[MEMCACHED_MAX_KEY];
        size_t kl = 0, vl = 0;
        uint32_t fl = 0;
        char *v = memcached_fetch(m, key, &kl, &vl, &fl, &rc);
        if (!v && rc != MEMCACHED_SUCCESS) {
            printf("fetch end: %s\n", memcached_strerror(m, rc));
            break;
        }
        printf("fetch: %.*s=%.*s flags=%u\n", (int)kl, key, (int)vl, v ? v : "", fl);
        free(v);
    }
    const char *k0[] = {"x1", "x2"};
    size_t l0[] = {2, 2};
    show("mget misses", memcached_mget(m, k0, l0, 2));
    r = memcached_fetch_result(m, NULL, &rc);
    printf("fetch_result misses: %s %p\n", memcached_strerror(m, rc), (void *)r);
    int n = 0;
    memcached_execute_fn cbs[] = {count_cb};
    show("mget a b", memcached_mget(m, k3, l3, 3));
    show("fetch_execute", memcached_fetch_execute(m, cbs, &n, 1));
    show("fetch_execute again", memcached_fetch_execute(m, cbs, &n, 1));
    show("mget_execute", memcached_mget_execute(m, k3, l3, 3, cbs, &n, 1));
    show("fetch_execute after", memcached_fetch_execute(m, cbs, &n, 1));
    printf("callbacks: %d\n", n);
    /* arithmetic */
    show("set n", memcached_set(m, "n", 1, "10", 2, 0, 0));
    rc = memcached_increment(m, "n", 1, 5, &v64);
    printf("incr n 5: %s %llu\n", memcached_strerror(m, rc), (unsigned long long)v64);
    rc = memcached_decrement(m, "n", 1, 100, &v64);
    printf("decr n 100: %s %llu\n", memcached_strerror(m, rc), (unsigned long long)v64);
    rc = memcached_increment(m, "nope", 4, 1, &v64);
    printf("incr nope: %s\n", memcached_strerror(m, rc));
    rc = memcached_increment(m, "a", 1, 1, &v64);
    printf("incr a (text): %s\n", memcached_strerror(m, rc));
    rc = memcached_increment_by_key(m, "grp", 3, "n", 1, 7, &v64);
    printf("incr_by_key n 7: %s %llu\n", memcached_strerror(m, rc), (unsigned long long)v64);
    v64 = 0;
    rc = memcached_increment_with_initial(m, "ctr", 3, 1, 100, 0, &v64);
    printf("incr_with_initial ctr: %s %llu\n", memcached_strerror(m, rc), (unsigned long long)v64);
    rc = memcached_increment_with_initial(m, "ctr", 3, 1, 100, 0, &v64);
    printf("incr_with_initial ctr again: %s %llu\n", memcached_strerror(m, rc),
           (unsigned long long)v64);
    /* exist, touch, delete, by_key forms */
    show("exist a", memcached_exist(m, "a", 1));
    show("exist nope", memcached_exist(m, "nope", 4));
    show("touch a", memcached_touch(m, "a", 1, 100));
    show("touch nope", memcached_touch(m, "nope", 4, 100));
    show("delete a", memcached_delete(m, "a", 1, 0));
    show("delete a again", memcached_delete(m, "a", 1, 0));
    show("delete_by_key b", memcached_delete_by_key(m, "grp", 3, "b", 1, 0));
    get("get b", "b");
    /* keys: empty, 250, 251 */
    char k250[252];
    memset(k250, 'k', sizeof(k250));
    show("set key 250", memcached_set(m, k250, 250, "v", 1, 0, 0));
    show("set key 251", memcached_set(m, k250, 251, "v", 1, 0, 0));
    show("set key empty", memcached_set(m, "", 0, "v", 1, 0, 0));
    {
        /* The server rejects the long key of exist, and the ascii connection is out of step
         * after that: a handle of its own. */
        memcached_st *c = memcached_clone(NULL, m);
        rc = memcached_exist(c, k250, 251);
        printf("exist key 251: %s\n", memcached_strerror(c, rc));
        memcached_free(c);
    }
    show("touch key 251", memcached_touch(m, k250, 251, 10));
    show("delete key 251", memcached_delete(m, k250, 251, 0));
    get("get key 251", k250);
    rc = memcached_increment(m, k250, 251, 1, &v64);
    printf("incr key 251: %s\n", memcached_strerror(m, rc));
    /* A namespace is prefixed to every key. (In ascii mode this libmemcached answers a namespaced
     * store with ERROR and loses its place in the stream; binary mode only.) */
    if (memcached_behavior_get(m, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL)) {
    show("namespace", memcached_callback_set(m, MEMCACHED_CALLBACK_NAMESPACE, "ns:"));
    show("set ns x", memcached_set(m, "x", 1, "in-ns", 5, 0, 0));
    get("get ns x", "x");
    memcached_callback_set(m, MEMCACHED_CALLBACK_NAMESPACE, NULL);
    get("get x without ns", "x");
    get("get ns:x without ns", "ns:x");
    }
    /* fork: the child gets its own connection (with the shim: its own channel) and works. */
    {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            memcached_return_t crc = memcached_set(m, "forked", 6, "by-child", 8, 0, 0);
            size_t len;
            uint32_t fl;
            char *v = memcached_get(m, "forked", 6, &len, &fl, &crc);
            int ok = v && len == 8 && memcmp(v, "by-child", 8) == 0;
            free(v);
            _exit(ok ? 0 : 1);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        printf("fork: child %s\n", WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "ok" : "failed");
        get("get forked (parent)", "forked");
    }
    /* A multi-get of no keys. */
    show("mget no keys", memcached_mget(m, k3, l3, 0));
    show("mget_by_key no keys", memcached_mget_by_key(m, "grp", 3, k3, l3, 0));
    show("mget_execute no keys", memcached_mget_execute(m, k3, l3, 0, cbs, &n, 1));
    /* A handle without servers. */
    {
        memcached_st *e = memcached_create(NULL);
        printf("no servers: set %s\n", memcached_strerror(e, memcached_set(e, "a", 1, "v", 1, 0, 0)));
        size_t len = 0;
        uint32_t fl = 0;
        char *v = memcached_get(e, "a", 1, &len, &fl, &rc);
        printf("no servers: get %s %p\n", memcached_strerror(e, rc), (void *)v);
        free(v);
        printf("no servers: mget %s\n", memcached_strerror(e, memcached_mget(e, k1, l1, 1)));
        printf("no servers: delete %s\n", memcached_strerror(e, memcached_delete(e, "a", 1, 0)));
        rc = memcached_increment(e, "n", 1, 1, &v64);
        printf("no servers: incr %s\n", memcached_strerror(e, rc));
        printf("no servers: exist %s\n", memcached_strerror(e, memcached_exist(e, "a", 1)));
        printf("no servers: touch %s\n", memcached_strerror(e, memcached_touch(e, "a", 1, 1)));
        printf("no servers: flush %s\n", memcached_strerror(e, memcached_flush(e, 0)));
        printf("no servers: empty key %s\n",
               memcached_strerror(e, memcached_set(e, "", 0, "v", 1, 0, 0)));
        memcached_free(e);
    }
    /* Flags at both ends, TTLs zero and negative (already expired). */
    show("set flags max", memcached_set(m, "fl", 2, "x", 1, 0, UINT32_MAX));
    get("get flags max", "fl");
    show("set flags 0", memcached_set(m, "fl", 2, "y", 1, 0, 0));
    get("get flags 0", "fl");
    show("set ttl 0", memcached_set(m, "ttl", 3, "z", 1, 0, 0));
    get("get ttl 0", "ttl");
    show("set ttl -1", memcached_set(m, "ttl", 3, "z", 1, (time_t)-1, 0));
    get("get ttl -1", "ttl");
    dump_calls();
    /* The server's version, as clients that check a minimum version read it: unknown (255) until
     * memcached_version asks (or, in ascii, memcached_dump), then the server's own. */
    {
        const memcached_instance_st *in = memcached_server_instance_by_position(m, 0);
        printf("version before asking: %u.%u.%u\n", memcached_server_major_version(in),
               memcached_server_minor_version(in), memcached_server_micro_version(in));
        show("version", memcached_version(m));
        in = memcached_server_instance_by_position(m, 0);
        uint8_t maj = memcached_server_major_version(in), min = memcached_server_minor_version(in);
        printf("version: %u.%u.%u\n", maj, min, memcached_server_micro_version(in));
        printf("version >= 1.4: %s\n", maj > 1 || (maj == 1 && min >= 4) ? "yes" : "no");
    }
    show("flush_buffers", memcached_flush_buffers(m));
    show("flush", memcached_flush(m, 0));
    get("get after flush", "n");
    /* flush_all 2: nothing changes for now; at its time, what was written before it is gone,
     * including what was written after the command (memcached's meaning). A later write stays.
     * memcached counts whole seconds: 3.5 s are past its time on either side of a tick. */
    show("set d1", memcached_set(m, "d1", 2, "one", 3, 0, 0));
    show("flush 2", memcached_flush(m, 2));
    get("get d1 before", "d1");
    show("set d2", memcached_set(m, "d2", 2, "two", 3, 0, 0));
    get("get d2 before", "d2");
    usleep(3500 * 1000);
    get("get d1 after", "d1");
    get("get d2 after", "d2");
    show("set d3", memcached_set(m, "d3", 2, "three", 5, 0, 0));
    get("get d3 after", "d3");
    encoding_key();
    hashing_behaviours();
    buffered_writes();
    more_calls();
    noreply_calls();
    odd_keys_checks();
    item_size_limits();
    reconnects();
    memcached_free(m);
    return 0;
}
