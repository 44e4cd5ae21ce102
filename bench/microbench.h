/*
 * microbench.h - what the microbenchmarks (bench/hop.c, bench/engine_get.c) share: quantiles of
 * sorted latency samples, and base/clock.h's clock. Header-only: each is one small program.
 */
#ifndef NESSIE_BENCH_MICROBENCH_H
#define NESSIE_BENCH_MICROBENCH_H

#include <stddef.h>
#include <stdint.h>

#include "clock.h" /* nessie_mono_ns */

/* qsort order of uint64_t samples. */
static inline int mb_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile of n sorted samples (ns), in microseconds. */
static inline double mb_quantile_us(const uint64_t *s, size_t n, double q)
{
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return (double)s[i] / 1000.0;
}

#endif
