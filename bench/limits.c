/*
 * limits.c - build/bench/limits: this machine's own limits, measured the way the benchmarks
 * use the machine, so results can be stated as a fraction of them.
 *
 *   limits memcpy SIZE...   memory copy bandwidth for each size: copies of SIZE bytes from a
 *                           source area much larger than the caches (as a GET of a value that
 *                           was not just written) into one destination buffer, and from a hot
 *                           source (as a value copied twice in a row)
 *   limits wakeup           round trip of a wake-up between two processes: both sleeping on a
 *                           futex, and both spinning on shared memory
 *
 * Prints CSV rows on stdout: `memcpy,SIZE,cold_gb_s,hot_gb_s,us_per_copy_cold` and
 * `wakeup,KIND,round_trip_us_p50,round_trip_us_mean`. --header prints the header lines first.
 * Each measurement runs about half a second.
 */
#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

/* The cold source: far beyond any last-level cache, so each copy streams from DRAM. */
#define COLD_BYTES (512ULL << 20)
#define RUN_NS 500000000ULL
#define WAKEUP_ROUNDS 4000

/* Bytes per second copying `size` bytes at a time for RUN_NS, sources stepping through `src`
 * of `src_bytes` (one slot when src_bytes == size: hot). */
static double copy_rate(unsigned char *dst, const unsigned char *src, size_t src_bytes, size_t size)
{
    size_t slots = src_bytes / size, i = 0;
    uint64_t copies = 0, t0 = nessie_mono_ns(), t;
    do {
        for (int k = 0; k < 16; k++) {
            memcpy(dst, src + (i % slots) * size, size);
            i += 7; /* a stride, so the prefetcher does not see one long stream */
            copies++;
        }
        /* Keep the copies from being optimized away. */
        __asm__ volatile("" : : "r"(dst) : "memory");
        t = nessie_mono_ns();
    } while (t - t0 < RUN_NS);
    return (double)copies * (double)size / ((double)(t - t0) / 1e9);
}

static int do_memcpy(int argc, char **argv)
{
    unsigned char *cold = mmap(NULL, COLD_BYTES, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (cold == MAP_FAILED) {
        perror("limits: mmap");
        return 1;
    }
    memset(cold, 0x5a, COLD_BYTES);
    for (int a = 0; a < argc; a++) {
        long size = atol(argv[a]);
        if (size <= 0 || (unsigned long long)size > COLD_BYTES / 64) {
            fprintf(stderr, "limits: memcpy size %s: expected 1..%llu\n", argv[a], COLD_BYTES / 64);
            return 2;
        }
        unsigned char *dst = aligned_alloc(4096, ((size_t)size + 4095) / 4096 * 4096);
        if (!dst)
            return 1;
        memset(dst, 0, (size_t)size);
        double c = copy_rate(dst, cold, COLD_BYTES, (size_t)size);
        double h = copy_rate(dst, cold, (size_t)size, (size_t)size);
        printf("memcpy,%ld,%.2f,%.2f,%.3f\n", size, c / 1e9, h / 1e9, (double)size / c * 1e6);
        fflush(stdout);
        free(dst);
    }
    munmap(cold, COLD_BYTES);
    return 0;
}

/* Ping-pong on one shared word: the parent writes 1 and waits for 2, the child waits for 1 and
 * writes 2. `sleep`: waiters sleep in FUTEX_WAIT and writers FUTEX_WAKE (a shared futex, the
 * word being in a mapping of two processes); otherwise both spin. */
static void wait_for(_Atomic uint32_t *w, uint32_t v, int sleep)
{
    uint32_t cur;
    while ((cur = atomic_load_explicit(w, memory_order_acquire)) != v) {
        /* FUTEX_WAIT sleeps only while the word still holds the value this loop judged: a
         * second load here could read the peer's post made after the check and sleep through
         * its wake-up for ever (bench-smoke hung so, both processes in futex_wait). */
        if (sleep)
            syscall(SYS_futex, w, FUTEX_WAIT, cur, NULL, NULL, 0);
        else
            __builtin_ia32_pause();
    }
}

static void post(_Atomic uint32_t *w, uint32_t v, int sleep)
{
    atomic_store_explicit(w, v, memory_order_release);
    if (sleep)
        syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int do_wakeup(void)
{
    for (int sleep = 1; sleep >= 0; sleep--) {
        _Atomic uint32_t *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                                   -1, 0);
        if (w == MAP_FAILED) {
            perror("limits: mmap");
            return 1;
        }
        atomic_store(w, 0);
        pid_t kid = fork();
        if (kid < 0) {
            perror("limits: fork");
            return 1;
        }
        if (kid == 0) {
            for (int i = 0; i < WAKEUP_ROUNDS + 100; i++) {
                wait_for(w, 1, sleep);
                post(w, 2, sleep);
            }
            _exit(0);
        }
        static uint64_t rt[WAKEUP_ROUNDS];
        for (int i = 0; i < WAKEUP_ROUNDS + 100; i++) {
            uint64_t t0 = nessie_mono_ns();
            post(w, 1, sleep);
            wait_for(w, 2, sleep);
            if (i >= 100)
                rt[i - 100] = nessie_mono_ns() - t0;
        }
        waitpid(kid, NULL, 0);
        double sum = 0;
        for (int i = 0; i < WAKEUP_ROUNDS; i++)
            sum += (double)rt[i];
        qsort(rt, WAKEUP_ROUNDS, sizeof(rt[0]), cmp_u64);
        printf("wakeup,%s,%.3f,%.3f\n", sleep ? "futex" : "spin",
               (double)rt[WAKEUP_ROUNDS / 2] / 1e3, sum / WAKEUP_ROUNDS / 1e3);
        fflush(stdout);
        munmap((void *)w, 4096);
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: limits [--header] memcpy SIZE... | limits [--header] wakeup\n"
               "  memcpy: copy bandwidth (GB/s) from a cold (512 MiB) and a hot source\n"
               "  wakeup: round trip between two processes, futex sleep and spinning\n");
}

int main(int argc, char **argv)
{
    int a = 1;
    if (a < argc && (strcmp(argv[a], "-h") == 0 || strcmp(argv[a], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    int header = a < argc && strcmp(argv[a], "--header") == 0;
    a += header;
    if (a >= argc) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[a], "memcpy") == 0 && a + 1 < argc) {
        if (header)
            printf("what,size,cold_gb_s,hot_gb_s,us_per_copy_cold\n");
        return do_memcpy(argc - a - 1, argv + a + 1);
    }
    if (strcmp(argv[a], "wakeup") == 0) {
        if (header)
            printf("what,kind,round_trip_us_p50,round_trip_us_mean\n");
        return do_wakeup();
    }
    usage(stderr);
    return 2;
}
