/*
 * test_views.c - the view's rules (reception/views.h): its value reads back as written and a
 * malformed one is refused; a node lost is fenced, readmitted at a newer incarnation only once
 * every live member's scrub is done for the view that fenced it, and fenced again after a
 * readmission only once every live member's scrub has passed that readmission (the service
 * holds the write: model/views.pml, -DBUG_UNHELD_FENCE).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <glib.h>
#include <string.h>

#include "views.h"

static uint64_t acked[NESSIE_NODES_MAX];

/* The member set of a view value (asserting it parses), and its epoch in *epoch. */
static struct live parsed(const char *s, uint64_t *epoch)
{
    struct live lv;
    assert_int_equal(view_parse(s, epoch, &lv), 0);
    return lv;
}

/* Assert that view_want, given the view value view and the registrations registered (a value
 * of the same form), wants the view value expect next. */
static void expect_next(const char *view, const char *registered, const char *expect)
{
    uint64_t epoch, e;
    struct live inview = parsed(view, &epoch), now = parsed(registered, &e), want;
    view_want(&inview, epoch, &now, acked, &want);
    char *s = view_format(epoch + 1, &want);
    assert_string_equal(s, expect);
    g_free(s);
}

static void test_value_round_trip(void **state)
{
    (void)state;
    const char *vals[] = {"1 0:1", "7 r5 0:1 1:3 2:gone@2", "3 0:gone@1 5:9"};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        uint64_t epoch;
        struct live lv = parsed(vals[i], &epoch);
        char *s = view_format(epoch, &lv);
        assert_string_equal(s, vals[i]);
        g_free(s);
    }
    const char *bad[] = {"", "0 0:1", "x", "2 0:1 0:2", "2 0:0", "2 0:gone@", "2 r 0:1",
                         "2 1024:1", "2 0:1x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t epoch;
        struct live lv;
        assert_int_equal(view_parse(bad[i], &epoch, &lv), -1);
    }
}

static void test_lapsed_member_fenced(void **state)
{
    (void)state;
    memset(acked, 0, sizeof(acked));
    expect_next("4 0:1 1:1 2:1", "1 0:1 1:1", "5 0:1 1:1 2:gone@1");
}

static void test_readmitted_after_every_scrub(void **state)
{
    (void)state;
    memset(acked, 0, sizeof(acked));
    acked[0] = 5, acked[1] = 4; /* node 1's scrub not done for view 5 yet */
    expect_next("5 0:1 1:1 2:gone@1", "1 0:1 1:1 2:2", "6 0:1 1:1 2:gone@1");
    acked[1] = 5;
    expect_next("5 0:1 1:1 2:gone@1", "1 0:1 1:1 2:2", "6 r6 0:1 1:1 2:2");
}

/* Node 2 was readmitted by view 6 and its lease lapsed again: while node 1's scrub has not
 * passed view 6 (its index may hold an orphan of the outage at a position the fence would draw
 * again), the view keeps node 2 live; once it has, node 2 is fenced. Before the hold the fence
 * was written at once, and a member that had not acted on view 6 acted on it at once. */
static void test_fence_after_readmission_waits_for_scrubs(void **state)
{
    (void)state;
    memset(acked, 0, sizeof(acked));
    acked[0] = 6, acked[1] = 5, acked[2] = 6;
    expect_next("6 r6 0:1 1:1 2:2", "1 0:1 1:1", "7 r6 0:1 1:1 2:2");
    acked[1] = 6;
    expect_next("6 r6 0:1 1:1 2:2", "1 0:1 1:1", "7 r6 0:1 1:1 2:gone@2");
    /* A member whose own lease lapsed too is not waited for: it is fenced with the other. */
    acked[1] = 5;
    expect_next("6 r6 0:1 1:1 2:2", "1 0:1", "7 r6 0:1 1:gone@1 2:gone@2");
}

/* Node 2 is back and every scrub is done, but node 3's lease lapsed: the view fences node 3 and
 * readmits node 2 only in the view after (one view doing both would be held by every member for
 * acks of itself, forever). */
static void test_fence_before_readmission(void **state)
{
    (void)state;
    memset(acked, 0, sizeof(acked));
    acked[0] = 5, acked[1] = 5, acked[3] = 5;
    expect_next("5 0:1 1:1 2:gone@1 3:1", "1 0:1 1:1 2:2", "6 0:1 1:1 2:gone@1 3:gone@1");
    acked[0] = 6, acked[1] = 6;
    expect_next("6 0:1 1:1 2:gone@1 3:gone@1", "1 0:1 1:1 2:2", "7 r7 0:1 1:1 2:2 3:gone@1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_value_round_trip),
        cmocka_unit_test(test_lapsed_member_fenced),
        cmocka_unit_test(test_readmitted_after_every_scrub),
        cmocka_unit_test(test_fence_after_readmission_waits_for_scrubs),
        cmocka_unit_test(test_fence_before_readmission),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
