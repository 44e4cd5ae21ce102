/*
 * test_cpuload.c - base/cpuload.c: the verdicts busy-waits ask of the machine.
 *
 * Only what holds whatever else the machine runs is checked: with more spinning threads than
 * the CPUs and three more, the machine is crowded and has no CPU to spare, within a few reads.
 * (The other way, idle, depends on what runs beside the test and is not checked.)
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cpuload.h"

static _Atomic int spin_stop;

static void *spinner(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&spin_stop, memory_order_relaxed))
        ;
    return NULL;
}

/* CPUs + 4 busy threads (on at most 64 CPUs): crowded and not spare within 2 s of asking. */
static void test_spinners_past_the_cpus_crowd_the_machine(void **state)
{
    (void)state;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t mine;
    if (cpus < 2 || cpus > 64 ||
        (sched_getaffinity(0, sizeof(mine), &mine) == 0 && CPU_COUNT(&mine) < 2))
        skip(); /* one CPU: never crowded by contract (nobody runs beside a spinner) */
    pthread_t t[68];
    int n = (int)cpus + 4;
    atomic_store(&spin_stop, 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_create(&t[i], NULL, spinner, NULL), 0);
    bool crowded = false, spare = true;
    for (int i = 0; i < 2000 && (!crowded || spare); i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        crowded = nessie_cpu_crowded();
        spare = nessie_cpu_spare();
    }
    atomic_store(&spin_stop, 1);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    assert_true(crowded);
    assert_false(spare);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spinners_past_the_cpus_crowd_the_machine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
