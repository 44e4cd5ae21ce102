/*
 * test_membership.c - the membership room (kvstore/membership/membership.h): epochs only
 * increase (an older or equal view is refused and changes nothing), malformed views are
 * refused, and a reader thread copying the view while a writer installs new ones never sees a
 * torn view (half of one epoch's members, half of another's) nor an epoch going back; a member
 * GONE in a view stays fenced.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "membership/membership.h"

/* A view whose every field is derived from its epoch, so a reader can tell a torn copy: members
 * 0..n-1 with n = epoch % 7 + 1, each with incarnation = epoch. */
static struct nessie_view *view_of(uint64_t epoch)
{
    struct nessie_view *v = calloc(1, sizeof(*v));
    v->epoch = epoch;
    v->nmembers = (uint32_t)(epoch % 7) + 1;
    for (uint32_t i = 0; i < v->nmembers; i++)
        v->members[i] = (struct nessie_view_member){.node = i * 2, .state = NESSIE_MEMBER_LIVE,
                                                    .incarnation = epoch};
    return v;
}

static void test_epochs_only_increase(void **state)
{
    (void)state;
    struct mship_state *st = calloc(1, sizeof(*st));
    struct nessie_view *out = calloc(1, sizeof(*out));
    assert_int_equal(mship_init(st, NESSIE_NODES_MAX - 1), NESSIE_OK);
    mship_get(st, out);
    assert_int_equal(out->epoch, 0); /* no view yet: static membership */
    assert_int_equal(out->nmembers, 0);

    struct nessie_view *v5 = view_of(5), *v3 = view_of(3), *v9 = view_of(9);
    assert_int_equal(mship_install(st, v5), NESSIE_OK);
    assert_int_equal(mship_epoch(st), 5);
    /* Older and equal epochs are refused and change nothing. */
    assert_int_equal(mship_install(st, v3), NESSIE_EXISTS);
    struct nessie_view *v5b = view_of(5);
    v5b->members[0].incarnation = 77;
    assert_int_equal(mship_install(st, v5b), NESSIE_EXISTS);
    mship_get(st, out);
    assert_int_equal(out->epoch, 5);
    assert_int_equal(out->nmembers, v5->nmembers);
    assert_int_equal(out->members[0].incarnation, 5);
    /* Newer: installed, also after a gap. */
    assert_int_equal(mship_install(st, v9), NESSIE_OK);
    mship_get(st, out);
    assert_int_equal(out->epoch, 9);
    assert_int_equal(out->nmembers, v9->nmembers);
    assert_memory_equal(out->members, v9->members, v9->nmembers * sizeof(v9->members[0]));
    free(v3), free(v5), free(v5b), free(v9), free(out);
    mship_destroy(st);
    free(st);
}

static void test_malformed_refused(void **state)
{
    (void)state;
    struct mship_state *st = calloc(1, sizeof(*st));
    assert_int_equal(mship_init(st, NESSIE_NODES_MAX - 1), NESSIE_OK);
    struct nessie_view *v = view_of(4);
    v->epoch = 0; /* epoch 0 is "no view" */
    assert_int_equal(mship_install(st, v), NESSIE_INVALID);
    v->epoch = 4;
    v->members[1].node = v->members[0].node; /* not strictly increasing */
    assert_int_equal(mship_install(st, v), NESSIE_INVALID);
    v->members[1].node = 2;
    v->members[0].state = (enum nessie_member_state)9;
    assert_int_equal(mship_install(st, v), NESSIE_INVALID);
    v->members[0].state = NESSIE_MEMBER_GONE;
    v->nmembers = NESSIE_VIEW_MEMBERS_MAX + 1;
    assert_int_equal(mship_install(st, v), NESSIE_INVALID);
    assert_int_equal(mship_install(st, NULL), NESSIE_INVALID);
    assert_int_equal(mship_epoch(st), 0); /* none of them changed anything */
    v->nmembers = 5;
    assert_int_equal(mship_install(st, v), NESSIE_OK);
    assert_int_equal(mship_epoch(st), 4);
    free(v);
    mship_destroy(st);
    free(st);
}

#define TORN_VIEWS 20000

/* One per reader thread: its own counters, so the checks race with nothing. */
struct reader {
    struct mship_state *st;
    atomic_bool *done;
    atomic_int *started; /* readers past their first read: installs wait for them all */
    uint64_t reads, torn, backwards, lockfree_ahead;
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    struct nessie_view *out = calloc(1, sizeof(*out));
    uint64_t last = 0;
    while (!atomic_load(r->done)) {
        /* The lock-free epoch read first: the copy after it must be that view or newer. */
        uint64_t seen = mship_epoch(r->st);
        mship_get(r->st, out);
        if (r->reads++ == 0)
            atomic_fetch_add(r->started, 1);
        if (out->epoch < seen)
            r->lockfree_ahead++;
        if (out->epoch < last)
            r->backwards++;
        last = out->epoch;
        if (out->epoch == 0)
            continue;
        bool ok = out->nmembers == (uint32_t)(out->epoch % 7) + 1;
        for (uint32_t i = 0; ok && i < out->nmembers; i++)
            ok = out->members[i].incarnation == out->epoch && out->members[i].node == i * 2;
        if (!ok)
            r->torn++;
    }
    free(out);
    return NULL;
}

static void test_reader_never_torn(void **state)
{
    (void)state;
    struct mship_state *st = calloc(1, sizeof(*st));
    assert_int_equal(mship_init(st, NESSIE_NODES_MAX - 1), NESSIE_OK);
    atomic_bool done;
    atomic_init(&done, false);
    atomic_int started;
    atomic_init(&started, 0);
    struct reader r[2] = {{.st = st, .done = &done, .started = &started},
                          {.st = st, .done = &done, .started = &started}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, reader_main, &r[i]), 0);
    /* On a busy machine a reader may not run at all before every view is in: the installs start
     * once both read, so they race with the copies the test is about. */
    while (atomic_load(&started) < 2)
        sched_yield();
    for (uint64_t e = 1; e <= TORN_VIEWS; e++) {
        struct nessie_view *v = view_of(e);
        assert_int_equal(mship_install(st, v), NESSIE_OK);
        free(v);
    }
    atomic_store(&done, true);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        assert_true(r[i].reads > 0);
        assert_int_equal(r[i].torn, 0);
        assert_int_equal(r[i].backwards, 0);
        assert_int_equal(r[i].lockfree_ahead, 0);
    }
    assert_int_equal(mship_epoch(st), TORN_VIEWS);
    mship_destroy(st);
    free(st);
}

static struct nessie_view *three(uint64_t epoch, int gone)
{
    struct nessie_view *v = calloc(1, sizeof(*v));
    v->epoch = epoch;
    v->nmembers = 3;
    for (uint32_t i = 0; i < 3; i++)
        v->members[i] = (struct nessie_view_member){
            .node = i, .state = (int)i == gone ? NESSIE_MEMBER_GONE : NESSIE_MEMBER_LIVE,
            .incarnation = epoch};
    return v;
}

/* A member GONE in a view is fenced for the incarnation it had: a later view that shows it LIVE
 * at that incarnation or an older one is refused and changes nothing (its old tables must never
 * be read again), and a later view that no longer lists it keeps it fenced. A view showing it
 * LIVE at a newer incarnation readmits it (it came back with new tables: "Rejoin"). */
static void test_fence_holds(void **state)
{
    (void)state;
    struct mship_state *st = calloc(1, sizeof(*st));
    assert_int_equal(mship_init(st, 0), NESSIE_OK);
    assert_false(mship_any_fenced(st));
    struct nessie_view *v1 = three(1, -1), *v2 = three(2, 2), *v3 = three(3, -1);
    assert_int_equal(mship_install(st, v1), NESSIE_OK);
    assert_false(mship_any_fenced(st));
    assert_int_equal(mship_install(st, v2), NESSIE_OK);
    assert_true(mship_any_fenced(st));
    assert_true(mship_fenced(st, 2));
    assert_false(mship_fenced(st, 0));
    assert_false(mship_fenced(st, 1));
    assert_false(mship_fenced(st, NESSIE_NODES_MAX)); /* out of range: never fenced, no read */
    /* Revived in its fenced life, or an older one: refused, the view stays at 2. */
    v3->members[2].incarnation = 2;
    assert_int_equal(mship_install(st, v3), NESSIE_INVALID);
    v3->members[2].incarnation = 1;
    assert_int_equal(mship_install(st, v3), NESSIE_INVALID);
    assert_int_equal(mship_epoch(st), 2);
    assert_true(mship_fenced(st, 2));
    /* Dropped from the list: installed, still fenced. */
    v3->nmembers = 2;
    assert_int_equal(mship_install(st, v3), NESSIE_OK);
    assert_true(mship_fenced(st, 2));
    /* GONE again: counted once. */
    struct nessie_view *v4 = three(4, 2);
    assert_int_equal(mship_install(st, v4), NESSIE_OK);
    assert_int_equal(atomic_load(&st->nfenced), 1);
    uint32_t changes = atomic_load(&st->fence_changes);
    /* Rejoining: its positions stay on it, fenced still. Readmitted at a newer incarnation: the
     * fence lifted, its lives moved (the fabric maps its new tables), a change of the fence. */
    mship_suspend(st, 2);
    mship_rejoin(st, 2);
    assert_true(mship_rejoining(st, 2) && mship_fenced(st, 2));
    struct nessie_view *v5 = three(5, -1);
    assert_int_equal(mship_install(st, v5), NESSIE_OK);
    assert_false(mship_fenced(st, 2));
    assert_false(mship_unreachable(st, 2)); /* no longer suspended */
    assert_false(mship_rejoining(st, 2));
    assert_false(mship_any_fenced(st));
    assert_int_equal(mship_lives(st, 2), 1);
    assert_int_equal(atomic_load(&st->fence_changes), changes + 1);
    assert_int_equal(atomic_load(&st->readmissions), 2); /* this one, and the first view (its orphan pass) */
    /* Lost again: fenced for incarnation 5, which no later view may revive. */
    struct nessie_view *v6 = three(6, 2);
    v6->members[2].incarnation = 5;
    assert_int_equal(mship_install(st, v6), NESSIE_OK);
    assert_true(mship_fenced(st, 2));
    struct nessie_view *v7 = three(7, -1);
    v7->members[2].incarnation = 5;
    assert_int_equal(mship_install(st, v7), NESSIE_INVALID);
    assert_true(mship_fenced(st, 2));
    assert_int_equal(atomic_load(&st->fence_changes), changes + 2);
    free(v5), free(v6), free(v7);
    free(v1), free(v2), free(v3), free(v4);
    mship_destroy(st);
    free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epochs_only_increase),
        cmocka_unit_test(test_malformed_refused),
        cmocka_unit_test(test_reader_never_torn),
        cmocka_unit_test(test_fence_holds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
