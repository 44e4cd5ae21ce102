/*
 * test_cache.c - the engine's LRU of remote DTEs keyed by ITE (kvstore/memory/cache.h): expiry is never
 * served, a hit extends but never shortens it, eviction is least recently used by bytes and by
 * count, and a randomized run agrees with a plain reference model.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "memory/cache.h"

static void test_hit_miss_expiry(void **state)
{
    (void)state;
    struct nessie_cache *c = cache_create(1024, 16);
    uint32_t len;
    assert_null(cache_get(c, 1, 0, 100, &len));
    assert_int_equal(cache_put(c, 1, "hello", 5, 100), 0);
    const char *p = cache_get(c, 1, 50, 120, &len); /* hit: expiry raised to 120 */
    assert_non_null(p);
    assert_int_equal(len, 5);
    assert_memory_equal(p, "hello", 5);
    assert_non_null(cache_get(c, 1, 110, 90, &len)); /* 90 < 120: never shortened */
    assert_non_null(cache_get(c, 1, 119, 0, &len));
    assert_null(cache_get(c, 1, 120, 500, &len));   /* expired at 120: miss, evicted */
    assert_null(cache_get(c, 1, 0, 500, &len));     /* gone for good */
    const struct cache_stats *st = cache_stats(c);
    assert_int_equal(st->expired, 1);
    assert_int_equal(st->hits, 3);
    assert_int_equal(st->entries, 0);
    assert_int_equal(st->bytes, 0);
    cache_destroy(c);
}

static void test_lru_eviction(void **state)
{
    (void)state;
    uint32_t len;
    /* by bytes: 3 entries of 10 bytes fit in 30 */
    struct nessie_cache *c = cache_create(30, 100);
    char v[10] = {0};
    for (uint64_t k = 1; k <= 3; k++)
        assert_int_equal(cache_put(c, k, v, 10, 1000), 0);
    assert_non_null(cache_get(c, 1, 0, 0, &len)); /* 1 is now most recent; 2 is the oldest */
    assert_int_equal(cache_put(c, 4, v, 10, 1000), 0);
    assert_null(cache_get(c, 2, 0, 0, &len));
    assert_non_null(cache_get(c, 1, 0, 0, &len));
    assert_non_null(cache_get(c, 3, 0, 0, &len));
    assert_non_null(cache_get(c, 4, 0, 0, &len));
    /* replacing an entry updates the byte count instead of adding to it */
    assert_int_equal(cache_put(c, 4, v, 5, 1000), 0);
    assert_int_equal(cache_stats(c)->bytes, 25);
    /* too big for the whole cache: refused, nothing evicted */
    assert_int_equal(cache_put(c, 9, v, 31, 1000), 0);
    assert_null(cache_get(c, 9, 0, 0, &len));
    assert_int_equal(cache_stats(c)->too_big, 1);
    assert_int_equal(cache_stats(c)->entries, 3);
    cache_remove(c, 3);
    assert_null(cache_get(c, 3, 0, 0, &len));
    cache_clear(c);
    assert_int_equal(cache_stats(c)->entries, 0);
    cache_destroy(c);
    /* by count */
    c = cache_create(1 << 20, 2);
    cache_put(c, 1, v, 1, 1000);
    cache_put(c, 2, v, 1, 1000);
    cache_put(c, 3, v, 1, 1000);
    assert_null(cache_get(c, 1, 0, 0, &len));
    assert_int_equal(cache_stats(c)->evictions, 1);
    cache_destroy(c);
    /* disabled: the engine's switch for the optimization */
    c = cache_create(0, 0);
    assert_int_equal(cache_put(c, 1, v, 1, 1000), 0);
    assert_null(cache_get(c, 1, 0, 0, &len));
    cache_destroy(c);
}

/* Reference model: arrays, linear search, explicit recency stamps. */
#define MODEL_MAX 64
struct model {
    uint64_t key[MODEL_MAX], expiry[MODEL_MAX], used[MODEL_MAX];
    uint32_t len[MODEL_MAX];
    int n;
    uint64_t clock, bytes;
};

static int model_find(struct model *m, uint64_t k)
{
    for (int i = 0; i < m->n; i++)
        if (m->key[i] == k)
            return i;
    return -1;
}

static void model_drop(struct model *m, int i)
{
    m->bytes -= m->len[i];
    m->n--;
    m->key[i] = m->key[m->n];
    m->expiry[i] = m->expiry[m->n];
    m->used[i] = m->used[m->n];
    m->len[i] = m->len[m->n];
}

static void test_randomized_against_model(void **state)
{
    (void)state;
    const size_t max_bytes = 400, max_entries = 12;
    struct nessie_cache *c = cache_create(max_bytes, max_entries);
    struct model m = {0};
    uint64_t rng = 99, now = 0;
    unsigned char buf[64];
    for (int step = 0; step < 100000; step++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t k = (rng >> 40) % 24;
        now += (rng >> 20) % 3;
        if ((rng >> 33) % 3 == 0) {
            uint32_t len = (uint32_t)((rng >> 50) % 60) + 1;
            memset(buf, (int)k, len);
            uint64_t exp = now + (rng >> 45) % 50;
            assert_int_equal(cache_put(c, k, buf, len, exp), 0);
            int i = model_find(&m, k);
            if (i >= 0)
                model_drop(&m, i);
            while (m.n > 0 && (m.bytes + len > max_bytes || (size_t)m.n + 1 > max_entries)) {
                int lru = 0;
                for (int j = 1; j < m.n; j++)
                    if (m.used[j] < m.used[lru])
                        lru = j;
                model_drop(&m, lru);
            }
            m.key[m.n] = k;
            m.expiry[m.n] = exp;
            m.len[m.n] = len;
            m.used[m.n] = ++m.clock;
            m.bytes += len;
            m.n++;
        } else {
            uint32_t len;
            uint64_t ext = now + (rng >> 45) % 50;
            const unsigned char *p = cache_get(c, k, now, ext, &len);
            int i = model_find(&m, k);
            if (i >= 0 && m.expiry[i] <= now) {
                model_drop(&m, i);
                i = -1;
            }
            if (i < 0) {
                assert_null(p);
            } else {
                assert_non_null(p);
                assert_int_equal(len, m.len[i]);
                assert_int_equal(p[0], (unsigned char)k);
                if (ext > m.expiry[i])
                    m.expiry[i] = ext;
                m.used[i] = ++m.clock;
            }
        }
        assert_int_equal(cache_stats(c)->entries, (uint64_t)m.n);
        assert_int_equal(cache_stats(c)->bytes, m.bytes);
    }
    cache_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_miss_expiry),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_randomized_against_model),
    };
    return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}
