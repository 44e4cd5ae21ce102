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

#endif
