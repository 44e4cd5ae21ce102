/*
 * clock.h - the clocks every layer reads, header-only so that the shim and the standalone bench
 * programs use them without linking the engine.
 *
 * CLOCK_MONOTONIC for intervals, timeouts and ages: it never jumps, and it is one clock for every
 * process of a host (the shared-memory fabric compares times taken by different processes, and
 * the stress checker orders events of all of them). CLOCK_REALTIME only where a time means a
 * date: memcached's absolute expiry times and flush_all's.
 */
#ifndef NESSIE_BASE_CLOCK_H
#define NESSIE_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t nessie_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline uint64_t nessie_mono_ms(void)
{
    return nessie_mono_ns() / 1000000ULL;
}

static inline uint64_t nessie_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The time ms milliseconds after now on clock, as the absolute deadline pthread_cond_timedwait
 * takes (the clock the condition variable was made for). */
static inline struct timespec nessie_deadline_after_ms(clockid_t clock, uint64_t ms)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

#endif
