/*
 * test_lincheck.c - the history checker of nessie-stress must accept what is linearizable and
 * reject what is not; a checker that cannot fail proves nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lincheck.h"

static struct lc_event E(uint64_t call, uint64_t ret, enum lc_op op, enum lc_outcome out,
                         const char *val, const char *got, uint64_t version)
{
    struct lc_event e = {.call_ns = call, .ret_ns = ret, .op = op, .outcome = out,
                         .val = val, .vlen = val ? (uint32_t)strlen(val) : 0,
                         .out = got, .outlen = got ? (uint32_t)strlen(got) : 0,
                         .version_out = version};
    return e;
}

static int check(const struct lc_event *ev, size_t n)
{
    char why[1024];
    int rc = lc_check_key(ev, n, 0, why, sizeof(why));
    if (rc)
        printf("  (checker: %s)\n", why);
    return rc;
}

static void test_sequential_histories(void **state)
{
    (void)state;
    struct lc_event ok[] = {
        E(1, 2, LC_GET, LC_NOT_FOUND, NULL, NULL, 0),
        E(3, 4, LC_SET, LC_OK, "a", NULL, 10),
        E(5, 6, LC_GET, LC_OK, NULL, "a", 10),
        E(7, 8, LC_ADD, LC_NOT_STORED, "x", NULL, 0),
        E(9, 10, LC_REPLACE, LC_OK, "b", NULL, 11),
        E(11, 12, LC_APPEND, LC_OK, "c", NULL, 12),
        E(13, 14, LC_PREPEND, LC_OK, "z", NULL, 13),
        E(15, 16, LC_GET, LC_OK, NULL, "zbc", 13),
        E(17, 18, LC_TOUCH, LC_OK, NULL, NULL, 0),
        E(19, 20, LC_GET, LC_OK, NULL, "zbc", 13),
        E(21, 22, LC_DELETE, LC_OK, NULL, NULL, 0),
        E(23, 24, LC_REPLACE, LC_NOT_STORED, "q", NULL, 0),
        E(25, 26, LC_DELETE, LC_NOT_FOUND, NULL, NULL, 0),
        E(27, 28, LC_ADD, LC_OK, "d", NULL, 14),
        E(29, 30, LC_GET, LC_OK, NULL, "d", 14),
    };
    assert_int_equal(check(ok, sizeof(ok) / sizeof(ok[0])), 0);
}

static void test_stale_read_rejected(void **state)
{
    (void)state;
    struct lc_event h[] = {
        E(1, 2, LC_SET, LC_OK, "a", NULL, 1),
        E(3, 4, LC_SET, LC_OK, "b", NULL, 2),
        E(5, 6, LC_GET, LC_OK, NULL, "a", 1), /* b was acknowledged before this read began */
    };
    assert_int_equal(check(h, 3), 1);
    /* the same read overlapping the second write may see either */
    h[2] = E(3, 6, LC_GET, LC_OK, NULL, "a", 1);
    assert_int_equal(check(h, 3), 0);
    h[2] = E(3, 6, LC_GET, LC_OK, NULL, "b", 2);
    assert_int_equal(check(h, 3), 0);
    /* but not a value nobody wrote, nor the right value with the wrong version */
    h[2] = E(3, 6, LC_GET, LC_OK, NULL, "c", 2);
    assert_int_equal(check(h, 3), 1);
    h[2] = E(3, 6, LC_GET, LC_OK, NULL, "b", 1);
    assert_int_equal(check(h, 3), 1);
}

static void test_cas_and_add(void **state)
{
    (void)state;
    struct lc_event h[] = {
        E(1, 2, LC_SET, LC_OK, "a", NULL, 5),
        E(3, 4, LC_CAS, LC_OK, "b", NULL, 6),
        E(5, 6, LC_CAS, LC_EXISTS, "c", NULL, 0),
        E(7, 8, LC_GET, LC_OK, NULL, "b", 6),
    };
    h[1].cas_in = 5;
    h[2].cas_in = 5;
    assert_int_equal(check(h, 4), 0);
    h[2].cas_in = 6; /* the version matched: EXISTS is wrong */
    assert_int_equal(check(h, 4), 1);
    /* two concurrent adds on an absent key: exactly one may succeed */
    struct lc_event a[] = {
        E(1, 10, LC_ADD, LC_OK, "x", NULL, 1),
        E(2, 9, LC_ADD, LC_OK, "y", NULL, 2),
    };
    assert_int_equal(check(a, 2), 1);
    a[1].outcome = LC_NOT_STORED;
    assert_int_equal(check(a, 2), 0);
}

static void test_incr_decr(void **state)
{
    (void)state;
    struct lc_event h[] = {
        E(1, 2, LC_SET, LC_OK, "100", NULL, 1),
        E(3, 4, LC_DECR, LC_OK, NULL, NULL, 2),
        E(5, 6, LC_GET, LC_OK, NULL, "99 ", 2),
        E(7, 8, LC_DECR, LC_OK, NULL, NULL, 3),
        E(9, 10, LC_SET, LC_OK, "abc", NULL, 4),
        E(11, 12, LC_INCR, LC_NON_NUMERIC, NULL, NULL, 0),
        E(13, 14, LC_DELETE, LC_OK, NULL, NULL, 0),
        E(15, 16, LC_INCR, LC_NOT_FOUND, NULL, NULL, 0),
    };
    h[1].delta = 1;
    h[1].num_out = 99;
    h[3].delta = 500;
    h[3].num_out = 0; /* decr stops at 0 */
    h[5].delta = 1;
    assert_int_equal(check(h, 8), 0);
    h[3].num_out = 1;
    assert_int_equal(check(h, 8), 1);
}

static void test_unknown_outcomes(void **state)
{
    (void)state;
    /* A write whose response was lost may take effect after its call, even after it "returned". */
    struct lc_event h[] = {
        E(1, 2, LC_SET, LC_OK, "a", NULL, 1),
        E(3, 4, LC_SET, LC_UNKNOWN, "u", NULL, 0),
        E(5, 6, LC_GET, LC_OK, NULL, "a", 1),
        E(7, 8, LC_GET, LC_OK, NULL, "u", 77), /* its version is learnt here */
        E(9, 10, LC_GET, LC_OK, NULL, "u", 77),
    };
    assert_int_equal(check(h, 5), 0);
    h[4].version_out = 78; /* but once learnt, it must stay */
    assert_int_equal(check(h, 5), 1);
    /* Its value cannot appear before it was called. */
    struct lc_event g[] = {
        E(1, 2, LC_GET, LC_OK, NULL, "u", 5),
        E(3, 4, LC_SET, LC_UNKNOWN, "u", NULL, 0),
    };
    assert_int_equal(check(g, 2), 1);
    /* An unknown op may also never take effect, and never return. */
    struct lc_event n[] = {
        E(1, 2, LC_SET, LC_OK, "a", NULL, 1),
        E(3, UINT64_MAX, LC_DELETE, LC_UNKNOWN, NULL, NULL, 0),
        E(5, 6, LC_GET, LC_OK, NULL, "a", 1),
    };
    assert_int_equal(check(n, 3), 0);
    /* failed ops had no effect */
    struct lc_event f[] = {
        E(1, 2, LC_SET, LC_FAILED, "big", NULL, 0),
        E(3, 4, LC_GET, LC_NOT_FOUND, NULL, NULL, 0),
    };
    assert_int_equal(check(f, 2), 0);
}

/* A possible loss (nessie-stress --lose-node-at): a DELETE that took effect within its interval
 * or not at all, never after it returned. */
static void test_maybe_outcomes(void **state)
{
    (void)state;
    struct lc_event h[] = {
        E(1, 2, LC_SET, LC_OK, "a", NULL, 1),
        E(3, 10, LC_DELETE, LC_MAYBE, NULL, NULL, 0),
        E(4, 5, LC_GET, LC_OK, NULL, "a", 1),
        E(6, 7, LC_GET, LC_NOT_FOUND, NULL, NULL, 0),
        E(11, 12, LC_GET, LC_NOT_FOUND, NULL, NULL, 0),
    };
    /* lost between the two reads, and it stays lost */
    assert_int_equal(check(h, 5), 0);
    /* a loss does not bring the value back */
    h[4] = E(11, 12, LC_GET, LC_OK, NULL, "a", 1);
    assert_int_equal(check(h, 5), 1);
    /* it may not have happened at all */
    h[3] = E(6, 7, LC_GET, LC_OK, NULL, "a", 1);
    assert_int_equal(check(h, 5), 0);
    /* a write after the loss's window stays: a miss after it is no loss's doing */
    struct lc_event w[] = {
        E(1, 2, LC_SET, LC_OK, "a", NULL, 1),
        E(3, 10, LC_DELETE, LC_MAYBE, NULL, NULL, 0),
        E(11, 12, LC_SET, LC_OK, "b", NULL, 2),
        E(13, 14, LC_GET, LC_NOT_FOUND, NULL, NULL, 0),
    };
    assert_int_equal(check(w, 4), 1);
    w[1].outcome = LC_UNKNOWN; /* (an unknown DELETE could take effect that late) */
    w[1].ret_ns = UINT64_MAX;
    assert_int_equal(check(w, 4), 0);
    /* nor does it let an older value be read: the newest acknowledged one, or a miss */
    struct lc_event o[] = {
        E(1, 2, LC_SET, LC_OK, "a", NULL, 1),
        E(3, 4, LC_SET, LC_OK, "b", NULL, 2),
        E(5, 10, LC_DELETE, LC_MAYBE, NULL, NULL, 0),
        E(6, 7, LC_GET, LC_OK, NULL, "a", 1),
    };
    assert_int_equal(check(o, 4), 1);
    o[3] = E(6, 7, LC_GET, LC_NOT_FOUND, NULL, NULL, 0);
    assert_int_equal(check(o, 4), 0);
}

/* A long random history produced by a sequential model (so linearizable), with every interval
 * stretched to overlap its neighbours, is accepted; the same history with one read's answer
 * corrupted is rejected. 12 clients, 5000 operations. */
static void test_random_long_history(void **state)
{
    (void)state;
    enum { N = 5000, CLIENTS = 12 };
    struct lc_event *h = calloc(N, sizeof(*h));
    char (*vals)[32] = calloc(N, 32);
    char cur[32] = "";
    int present = 0;
    uint64_t version = 0, rng = 42;
    int last_get = -1;
    for (int i = 0; i < N; i++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        int r = (int)((rng >> 33) % 10);
        /* Effects happen at time 10*i+5; each op's interval covers it and may overlap others
         * by up to CLIENTS/2 slots either way. */
        uint64_t t = 10ULL * (uint64_t)i + 5;
        uint64_t spread = 10ULL * ((rng >> 40) % (CLIENTS / 2));
        struct lc_event *e = &h[i];
        e->call_ns = t - 4 - (t > spread ? spread : 0) / 2;
        e->ret_ns = t + 4;
        if (r < 5) {
            e->op = LC_GET;
            e->outcome = present ? LC_OK : LC_NOT_FOUND;
            if (present) {
                snprintf(vals[i], 32, "%s", cur);
                e->out = vals[i];
                e->outlen = (uint32_t)strlen(cur);
                e->version_out = version;
                last_get = i;
            }
        } else if (r < 8) {
            e->op = LC_SET;
            e->outcome = LC_OK;
            snprintf(vals[i], 32, "v%d", i);
            e->val = vals[i];
            e->vlen = (uint32_t)strlen(vals[i]);
            e->version_out = ++version;
            snprintf(cur, sizeof(cur), "%s", vals[i]);
            present = 1;
        } else {
            e->op = LC_DELETE;
            e->outcome = present ? LC_OK : LC_NOT_FOUND;
            present = 0;
        }
    }
    assert_int_equal(check(h, N), 0);
    assert_true(last_get >= 0);
    vals[last_get][0] = 'X'; /* a value nobody wrote */
    assert_int_equal(check(h, N), 1);
    free(h);
    free(vals);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequential_histories),
        cmocka_unit_test(test_stale_read_rejected),
        cmocka_unit_test(test_cas_and_add),
        cmocka_unit_test(test_incr_decr),
        cmocka_unit_test(test_unknown_outcomes),
        cmocka_unit_test(test_maybe_outcomes),
        cmocka_unit_test(test_random_long_history),
    };
    return cmocka_run_group_tests_name("lincheck", tests, NULL, NULL);
}
