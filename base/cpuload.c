/*
 * cpuload.c - nessie_cpu_spare (cpuload.h).
 */
#include "cpuload.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"

/* How long a verdict stands: a spin loop asks on every look, and a look must stay a load or
 * two; the count changes as fast as threads wake, so a verdict older than a wake-up or two
 * says little. */
#define CPULOAD_FRESH_NS 20000ULL

/* File-static: one machine, one file, one verdict shared by every thread of the process. */
static pthread_once_t cpuload_once = PTHREAD_ONCE_INIT;
static int cpuload_fd = -1;     /* /proc/loadavg; -1: never spare */
static unsigned cpuload_cpus;   /* online CPUs at the first call */
/* The runnable count's moving average, in sixteenths, and when the file was last read: relaxed
 * atomics (a lost update or a stale pair only makes one more read, or one decision a look late).
 * An average, not the last count: a background thread that wakes for a few microseconds (a
 * daemon's recycler, an SD server's nap ending) must not stop a spin whose party runs, while a
 * machine that stays oversubscribed (three clients and three workers on two CPUs) says so
 * within a few reads. */
static uint64_t cpuload_read_ns;
static uint32_t cpuload_avg16;
/* Weight of a new count in the average: 1/4, about the last 4 reads (80 us and more). */
#define CPULOAD_AVG_SHIFT 2

static void cpuload_init(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t mine;
    if (cpus < 2 || (sched_getaffinity(0, sizeof(mine), &mine) == 0 && CPU_COUNT(&mine) < 2))
        return;
    cpuload_cpus = (unsigned)cpus;
    cpuload_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
}

/* The runnable count's moving average in sixteenths, refreshed if stale; UINT32_MAX if it
 * cannot be read (or the process has one CPU). */
static uint32_t cpuload_avg(void)
{
    pthread_once(&cpuload_once, cpuload_init);
    if (cpuload_fd < 0)
        return UINT32_MAX;
    uint64_t now = nessie_mono_ns();
    uint32_t avg = __atomic_load_n(&cpuload_avg16, __ATOMIC_RELAXED);
    if (now - __atomic_load_n(&cpuload_read_ns, __ATOMIC_RELAXED) >= CPULOAD_FRESH_NS) {
        __atomic_store_n(&cpuload_read_ns, now, __ATOMIC_RELAXED);
        char b[128];
        ssize_t r = pread(cpuload_fd, b, sizeof(b) - 1, 0);
        if (r <= 0)
            return UINT32_MAX;
        b[r] = '\0';
        const char *p = b;
        for (int field = 0; field < 3 && p; field++)
            if ((p = strchr(p, ' ')) != NULL)
                p++;
        if (!p)
            return UINT32_MAX;
        unsigned long n = strtoul(p, NULL, 10);
        uint32_t n16 = n > 65535 ? 65535u * 16 : (uint32_t)n * 16;
        avg = avg - (avg >> CPULOAD_AVG_SHIFT) + (n16 >> CPULOAD_AVG_SHIFT);
        __atomic_store_n(&cpuload_avg16, avg, __ATOMIC_RELAXED);
    }
    return avg;
}

bool nessie_cpu_spare(void)
{
    uint32_t avg = cpuload_avg();
    /* Half a thread over: a runqueue that is seldom longer than the CPUs. */
    return avg != UINT32_MAX && avg <= cpuload_cpus * 16 + 8;
}

/* Crowded: more than two and a half runnable threads over the CPUs, in sixteenths. A worker
 * and its one client spinning for each other make two; two CPU burners beside them four, on
 * two CPUs: there a parked worker lost (16 KiB closed loop with 2 burners, 3 runs each
 * alternated: 365-386 MB/s parking at 1.5 threads over, 622-898 at 2.5 or never), while three
 * clients and their three workers on two CPUs (six and more) won by parking: GET p99 of 4 KiB
 * zipf GETs, a client per node, 81-122 us against 145-274 never parking. */
#define CPULOAD_CROWDED_16 40

bool nessie_cpu_crowded(void)
{
    uint32_t avg = cpuload_avg();
    return avg != UINT32_MAX && avg > cpuload_cpus * 16 + CPULOAD_CROWDED_16;
}
