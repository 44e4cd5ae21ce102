/*
 * loadgen.c - build/bench/loadgen: the load generator of the benchmark scripts.
 *
 * An ordinary libmemcached program: run as is, it loads a memcached server; run through the shim
 * (tools/nessie-run build/bench/loadgen ...), the very same binary loads Nessie. That is what
 * makes a Nessie / memcached ratio mean something: same client code, same calls, same run.
 *
 * Workload (the papers' parameters): keys of --key-size bytes (128), values of --value-size
 * bytes, --get-ratio GETs and the rest SETs, keys drawn uniformly or from YCSB's scrambled Zipf
 * (theta 0.99) over --keys keys, --procs processes of --threads threads, each thread with its own
 * memcached_st. Closed loop by default; --rate R offers R ops/s in all (open loop): each thread
 * issues on a fixed schedule and latency counts from the scheduled time, so a slow system is not
 * flattered by the requests it delayed (coordinated omission).
 *
 * Every GET checks what it read: the length, and the key's tag in the first 8 bytes. A wrong value
 * makes the exit status 1. Calls the server refused (out of memory, say) are counted in the CSV's
 * errors column and named on stderr, but are a measured outcome, not a failure of the run.
 *
 * Output: one CSV row on stdout (--csv-header prints the header first), a human summary on
 * stderr, and with --progress a line per second on stderr. CPU seconds are measured over the
 * measured window only: the client threads' own (CLOCK_THREAD_CPUTIME_ID) and, for each
 * --watch-pid, the process's utime+stime from /proc (daemons, memcached).
 *
 * Calls (the failover benchmark, bench/failover.sh): besides operations (a GET, with its SET when
 * --set-on-miss follows a miss with one, is one operation), every libmemcached call is counted on
 * its own: answered (a GET's right value or NOTFOUND, a SET's SUCCESS) or failed (any other
 * outcome), with its latency from its own start. The CSV's last columns give the calls of the
 * measured window, and apart those issued between --window-from and --window-to (milliseconds
 * into the measured window: an outage, say), with their slowest call and p99; --timeline writes
 * the calls per --timeline-ms bin. Several servers (--servers A,B,C) make one memcached_st with
 * all of them; --ketama, --failure-limit, --retry-timeout and --dead-timeout set libmemcached's
 * distribution and its removal of failed servers (connect_client says what each one does).
 * --start-at has several loadgen processes start at one wall-clock time, so their bins line up
 * and a script can time events in the run (a kill, a restart).
 */
#include <errno.h>
#include <glib.h>
#include <inttypes.h>
#include <libmemcached/memcached.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

/* Latency histogram: exact below 64 ns, then 32 sub-buckets per power of two (<= 3 % error),
 * up to 2^40 ns (18 minutes). Fixed size so it can live in memory shared by the processes. */
#define HIST_SUB 32
#define HIST_BINS (64 + (40 - 6 + 1) * HIST_SUB)
/* At most this many watched processes (daemons, memcached). */
#define MAX_WATCH 16
/* Open loop: below this distance to the next scheduled op a thread spins instead of sleeping,
 * since a sleep costs a wake-up (~60 us here) and would shift the schedule. */
#define OPEN_LOOP_SPIN_NS 100000

enum { OP_GET = 0, OP_SET = 1, OP_KINDS };

/* One thread's results; lives in a MAP_SHARED page so forked processes report to the parent. */
struct thread_result {
    uint64_t ops[OP_KINDS];
    uint64_t ok[OP_KINDS];   /* GET hits with the right value; SETs stored */
    uint64_t misses;         /* GET NOTFOUND */
    uint64_t errors;         /* anything else, wrong values included */
    uint64_t bad_values;
    uint64_t late;           /* open loop: ops issued more than 1 ms after their time */
    uint64_t cpu_ns;         /* thread CPU time over the measured window */
    uint64_t elapsed_ns;     /* --ops mode: the thread's measured time */
    uint64_t good_bytes;     /* value bytes of the ok GETs and SETs (goodput) */
    uint64_t hist[OP_KINDS][HIST_BINS];
    /* libmemcached calls (a GET, a SET), each answered or failed (header comment) */
    uint64_t calls, calls_failed, max_call_ns;
    /* ... of them, those issued in --window-from..--window-to */
    uint64_t win_calls, win_failed, win_sets, win_sets_ok, win_max_ns;
    uint64_t win_hist[HIST_BINS];
    char first_error[160];
};

/* --timeline: one bin's calls, summed over every thread of every process (shared memory). */
struct tl_bin {
    _Atomic uint64_t calls, failed, sets, sets_ok, max_ns;
};

/* What the parent and every thread of every process share. */
struct shared {
    atomic_uint ready;         /* threads connected and waiting */
    atomic_uint failed;        /* threads that could not start */
    _Atomic uint64_t t_start;  /* 0 until the parent sets it: warm-up begins */
    _Atomic uint64_t t_measure; /* warm-up ends, measurement begins */
    _Atomic uint64_t t_end;    /* measurement ends (duration mode) */
    _Atomic uint64_t progress_ops; /* ops completed in the measured window, for --progress */
    _Atomic uint64_t progress_gets, progress_hits; /* ... and GETs and hits, for --series */
    _Atomic uint64_t progress_calls, progress_failed; /* ... and calls, failed ones, for --progress */
    struct thread_result res[];
};

/* Options; file static because every thread reads them and they never change after parsing. */
static struct {
    char *servers;
    gboolean binary;
    int key_size, value_size;
    double get_ratio;
    char *dist;
    double theta;
    int64_t keys;
    int64_t key_base; /* key i is named lg<key_base + i>: loads of disjoint key sets */
    int procs, threads;
    double duration, warmup;
    int64_t ops;
    double rate;
    gboolean no_preload, csv_header, header_only, progress, set_on_miss;
    char *series; /* per-second CSV file */
    char *value_sizes; /* --value-sizes A,B,..: key i's value has the (i mod n)-th size */
    char *label;
    char **watch; /* NAME:PID */
    uint64_t seed;
    gboolean ketama;
    int failure_limit, retry_timeout, dead_timeout;
    int64_t window_from, window_to; /* ms into the measured window; equal: no window */
    char *timeline;                 /* per-bin CSV file */
    int timeline_ms;
    int64_t start_at;               /* CLOCK_REALTIME ns; 0: as soon as every thread is ready */
    char *hist;                     /* --hist: the GETs' latency histogram, written here */
    gboolean merge_hist;            /* --merge-hist FILE...: their sum's percentiles, no load */
} opt = {
    .key_size = 128, .value_size = 1024, .get_ratio = 0.9, .theta = 0.99, .keys = 10000,
    .procs = 1, .threads = 1, .duration = 5, .warmup = 1, .seed = 42, .retry_timeout = -1,
    .dead_timeout = -1,
    .timeline_ms = 1000,
};

static bool zipf;
/* Value sizes by key: key i's value is value_len[i % n_value_lens] bytes (one size unless
 * --value-sizes mixes several), so a GET knows the length to expect; max_value_len sizes the
 * buffers. Set once before forking. */
#define MAX_VALUE_SIZES 16
static int value_len_of[MAX_VALUE_SIZES], n_value_lens = 1, max_value_len;
/* The Zipf generator's constants (YCSB's ZipfianGenerator), computed once before forking. */
static double zipf_zetan, zipf_alpha, zipf_eta, zipf_half_pow;
static struct shared *sh;
/* --timeline's bins (shared memory), tl_n of them, each opt.timeline_ms long. */
static struct tl_bin *tl;
static unsigned tl_n;

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000ULL), (long)(t % 1000000000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static int hist_bin(uint64_t v)
{
    if (v < 64)
        return (int)v;
    int e = 63 - __builtin_clzll(v);
    if (e > 40)
        return HIST_BINS - 1;
    return 64 + (e - 6) * HIST_SUB + (int)((v >> (e - 5)) - HIST_SUB);
}

/* Midpoint of a bin, ns. */
static double hist_value(int bin)
{
    if (bin < 64)
        return bin;
    int e = (bin - 64) / HIST_SUB + 6;
    uint64_t sub = (uint64_t)((bin - 64) % HIST_SUB + HIST_SUB);
    uint64_t lo = sub << (e - 5), width = 1ULL << (e - 5);
    return (double)lo + (double)width / 2;
}

/* The q-quantile (0..1) of a histogram, microseconds; 0 when it is empty. */
static double hist_quantile(const uint64_t *h, double q)
{
    uint64_t n = 0;
    for (int i = 0; i < HIST_BINS; i++)
        n += h[i];
    if (n == 0)
        return 0;
    uint64_t rank = (uint64_t)ceil(q * (double)n), seen = 0;
    if (rank == 0)
        rank = 1;
    for (int i = 0; i < HIST_BINS; i++) {
        seen += h[i];
        if (seen >= rank)
            return hist_value(i) / 1000.0;
    }
    return hist_value(HIST_BINS - 1) / 1000.0;
}

static double hist_mean(const uint64_t *h)
{
    double sum = 0;
    uint64_t n = 0;
    for (int i = 0; i < HIST_BINS; i++) {
        sum += hist_value(i) * (double)h[i];
        n += h[i];
    }
    return n ? sum / (double)n / 1000.0 : 0;
}

/* splitmix64: a thread's random stream. */
static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rnd_unit(uint64_t *s)
{
    return (double)(rnd(s) >> 11) * 0x1.0p-53;
}

static uint64_t fnv1a64(uint64_t v)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (i * 8)) & 0xff;
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* YCSB's ZipfianGenerator (Gray et al., "Quickly generating billion-record synthetic
 * databases"), items 0..n-1 with 0 the most popular. */
static void zipf_init(uint64_t n, double theta)
{
    double zeta2 = 1.0 + pow(0.5, theta);
    zipf_zetan = 0;
    for (uint64_t i = 1; i <= n; i++)
        zipf_zetan += 1.0 / pow((double)i, theta);
    zipf_alpha = 1.0 / (1.0 - theta);
    zipf_eta = (1.0 - pow(2.0 / (double)n, 1.0 - theta)) / (1.0 - zeta2 / zipf_zetan);
    zipf_half_pow = 1.0 + pow(0.5, theta);
}

/* Next key index. Zipf ranks are scrambled with FNV-1a as in YCSB's ScrambledZipfianGenerator,
 * so the popular keys are spread over the key space (and over the nodes), not packed at 0. */
static uint64_t next_key(uint64_t *s)
{
    uint64_t n = (uint64_t)opt.keys;
    if (!zipf)
        return rnd(s) % n;
    double u = rnd_unit(s), uz = u * zipf_zetan;
    uint64_t rank;
    if (uz < 1.0)
        rank = 0;
    else if (uz < zipf_half_pow)
        rank = 1;
    else
        rank = (uint64_t)((double)n * pow(zipf_eta * u - zipf_eta + 1.0, zipf_alpha));
    if (rank >= n)
        rank = n - 1;
    return fnv1a64(rank) % n;
}

/* Key i: "lg<key_base + i>:" padded with 'k' to key_size bytes. */
static void make_key(char *buf, uint64_t i)
{
    int n = snprintf(buf, (size_t)opt.key_size + 1, "lg%" PRIu64 ":", (uint64_t)opt.key_base + i);
    if (n < opt.key_size)
        memset(buf + n, 'k', (size_t)(opt.key_size - n));
    buf[opt.key_size] = '\0';
}

/* Value bytes of key i. */
static size_t value_len(uint64_t i)
{
    return (size_t)value_len_of[i % (uint64_t)n_value_lens];
}

/* Value of key i: its index in the first 8 bytes (checked by GETs), then a fixed pattern. */
static void tag_value(char *val, uint64_t i)
{
    if (value_len(i) >= 8)
        memcpy(val, &i, 8);
}

static memcached_st *connect_client(void)
{
    memcached_st *m = memcached_create(NULL);
    if (!m)
        return NULL;
    memcached_server_st *list = memcached_servers_parse(opt.servers);
    if (!list || memcached_server_push(m, list) != MEMCACHED_SUCCESS) {
        if (list)
            memcached_server_list_free(list);
        memcached_free(m);
        return NULL;
    }
    memcached_server_list_free(list);
    if (opt.binary)
        memcached_behavior_set(m, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, 1);
    /* A benchmark client wants each request on the wire at once, as memslap does. */
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
    /* Failover (bench/failover.sh). Ketama places keys on a continuum, so removing a server moves
     * only its keys. libmemcached 1.1 (connect.cc, backoff_handling): a server that fails is put
     * in timeout for RETRY_TIMEOUT seconds (its calls fail at once, TEMPORARILY DISABLED), and
     * each timeout counts one failure; once SERVER_FAILURE_LIMIT failures are counted, with
     * REMOVE_FAILED_SERVERS (which, in 1.1, no longer sets the limit itself) the distribution is
     * rebuilt without it until its retry time. DEAD_TIMEOUT is then what brings it back: with 0,
     * the default, a removed server whose retry time has passed is in the distribution again but
     * every call on it fails (MARKED DEAD), forever; with S > 0 it is tried once more S seconds
     * later. */
    const char *refused = NULL;
    if (opt.ketama && memcached_behavior_set(m, MEMCACHED_BEHAVIOR_KETAMA, 1) != MEMCACHED_SUCCESS)
        refused = "KETAMA";
    if (opt.failure_limit > 0 &&
        (memcached_behavior_set(m, MEMCACHED_BEHAVIOR_REMOVE_FAILED_SERVERS, 1) !=
             MEMCACHED_SUCCESS ||
         memcached_behavior_set(m, MEMCACHED_BEHAVIOR_SERVER_FAILURE_LIMIT,
                                (uint64_t)opt.failure_limit) != MEMCACHED_SUCCESS))
        refused = "REMOVE_FAILED_SERVERS or SERVER_FAILURE_LIMIT";
    if (opt.retry_timeout >= 0 &&
        memcached_behavior_set(m, MEMCACHED_BEHAVIOR_RETRY_TIMEOUT,
                               (uint64_t)opt.retry_timeout) != MEMCACHED_SUCCESS)
        refused = "RETRY_TIMEOUT";
    if (opt.dead_timeout >= 0 &&
        memcached_behavior_set(m, MEMCACHED_BEHAVIOR_DEAD_TIMEOUT,
                               (uint64_t)opt.dead_timeout) != MEMCACHED_SUCCESS)
        refused = "DEAD_TIMEOUT";
    if (refused) {
        fprintf(stderr, "loadgen: libmemcached refused MEMCACHED_BEHAVIOR_%s\n", refused);
        memcached_free(m);
        return NULL;
    }
    return m;
}

static void note_error(struct thread_result *r, const char *what, memcached_st *m,
                       memcached_return_t rc)
{
    r->errors++;
    if (!r->first_error[0])
        snprintf(r->first_error, sizeof(r->first_error), "%s: %s", what,
                 memcached_strerror(m, rc));
}

/* A thread's calls in its current --timeline bin, added to the shared bin when it moves on. */
struct tl_acc {
    int64_t bin; /* -1: none yet */
    uint64_t calls, failed, sets, sets_ok, max_ns;
};

static void tl_flush(struct tl_acc *a)
{
    if (a->bin < 0 || !tl)
        return;
    struct tl_bin *b = &tl[a->bin];
    atomic_fetch_add_explicit(&b->calls, a->calls, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->failed, a->failed, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->sets, a->sets, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->sets_ok, a->sets_ok, memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&b->max_ns, memory_order_relaxed);
    while (a->max_ns > m &&
           !atomic_compare_exchange_weak_explicit(&b->max_ns, &m, a->max_ns, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
    a->bin = -1;
    a->calls = a->failed = a->sets = a->sets_ok = a->max_ns = 0;
}

/* One libmemcached call of the measured window, issued at start and returned at end (ns,
 * CLOCK_MONOTONIC), answered or not: the thread's totals, the outage window's, the timeline. */
static void count_call(struct thread_result *r, struct tl_acc *a, uint64_t t_measure,
                       uint64_t start, uint64_t end, bool is_set, bool answered)
{
    uint64_t lat = end - start, since = start - t_measure;
    r->calls++;
    r->calls_failed += !answered;
    if (lat > r->max_call_ns)
        r->max_call_ns = lat;
    if (opt.window_to > opt.window_from && since >= (uint64_t)opt.window_from * 1000000ULL &&
        since < (uint64_t)opt.window_to * 1000000ULL) {
        r->win_calls++;
        r->win_failed += !answered;
        r->win_sets += is_set;
        r->win_sets_ok += is_set && answered;
        if (lat > r->win_max_ns)
            r->win_max_ns = lat;
        r->win_hist[hist_bin(lat)]++;
    }
    if (tl) {
        int64_t bin = (int64_t)(since / ((uint64_t)opt.timeline_ms * 1000000ULL));
        if (bin >= (int64_t)tl_n)
            bin = (int64_t)tl_n - 1;
        if (bin != a->bin) {
            tl_flush(a);
            a->bin = bin;
        }
        a->calls++;
        a->failed += !answered;
        a->sets += is_set;
        a->sets_ok += is_set && answered;
        if (lat > a->max_ns)
            a->max_ns = lat;
    }
}

struct thread_arg {
    unsigned index; /* global thread index */
};

/* One client thread: connect, wait for the start, run until the end; results in sh->res[]. */
static void *client_thread(void *p)
{
    const struct thread_arg *ta = p;
    struct thread_result *r = &sh->res[ta->index];
    uint64_t seed = opt.seed * 1000003ULL + ta->index;
    char *key = malloc((size_t)opt.key_size + 1);
    char *val = malloc((size_t)max_value_len + 1);
    memcached_st *m = connect_client();
    if (!key || !val || !m) {
        snprintf(r->first_error, sizeof(r->first_error), "cannot create a client");
        atomic_fetch_add(&sh->failed, 1);
        free(key);
        free(val);
        return NULL;
    }
    memset(val, 'v', (size_t)max_value_len);
    atomic_fetch_add(&sh->ready, 1);
    uint64_t t_start;
    while ((t_start = atomic_load(&sh->t_start)) == 0)
        usleep(1000);
    sleep_until(t_start);
    uint64_t t_measure = atomic_load(&sh->t_measure), t_end = atomic_load(&sh->t_end);
    unsigned nthreads = (unsigned)(opt.procs * opt.threads);
    /* Open loop: this thread's share of the rate, with a random phase so threads interleave. */
    double period = opt.rate > 0 ? 1e9 * nthreads / opt.rate : 0;
    double next = (double)t_start + (period > 0 ? rnd_unit(&seed) * period : 0);
    int64_t quota = opt.ops > 0 ? opt.ops / (int64_t)nthreads : -1;
    bool measuring = false;
    uint64_t cpu0 = 0, t0 = 0, progress_batch = 0, gets_batch = 0, hits_batch = 0;
    uint64_t calls_batch = 0, failed_batch = 0;
    struct tl_acc acc = {.bin = -1};
    for (;;) {
        uint64_t sched = 0, t = nessie_mono_ns();
        if (period > 0) {
            sched = (uint64_t)next;
            next += period;
            if (sched > t + OPEN_LOOP_SPIN_NS)
                sleep_until(sched - OPEN_LOOP_SPIN_NS / 2);
            while ((t = nessie_mono_ns()) < sched)
                ;
        }
        if (!measuring && t >= t_measure) {
            measuring = true;
            cpu0 = thread_cpu_ns();
            t0 = t;
        }
        if (measuring && (quota == 0 || (quota < 0 && t >= t_end)))
            break;
        uint64_t k = next_key(&seed);
        make_key(key, k);
        int kind = rnd_unit(&seed) < opt.get_ratio ? OP_GET : OP_SET;
        size_t vlen = value_len(k);
        bool ok = false;
        if (kind == OP_GET) {
            size_t len = 0;
            uint32_t flags = 0;
            memcached_return_t rc;
            uint64_t get_t = nessie_mono_ns();
            char *v = memcached_get(m, key, (size_t)opt.key_size, &len, &flags, &rc);
            uint64_t got_t = nessie_mono_ns();
            if (v) {
                uint64_t tag = 0;
                if (len >= 8)
                    memcpy(&tag, v, 8);
                if (len == vlen && (vlen < 8 || tag == k)) {
                    ok = true;
                } else if (measuring) {
                    r->bad_values++;
                    r->errors++;
                    if (!r->first_error[0])
                        snprintf(r->first_error, sizeof(r->first_error),
                                 "key %" PRIu64 ": wrong value (%zu bytes, tag %" PRIu64 ")", k,
                                 len, tag);
                }
                free(v);
            } else if (rc == MEMCACHED_NOTFOUND) {
                if (measuring)
                    r->misses++;
            } else if (measuring) {
                note_error(r, "get", m, rc);
            }
            if (measuring) {
                bool answered = ok || (!v && rc == MEMCACHED_NOTFOUND);
                count_call(r, &acc, t_measure, get_t, got_t, false, answered);
                calls_batch++;
                failed_batch += !answered;
            }
            if (!v && rc == MEMCACHED_NOTFOUND && opt.set_on_miss) {
                /* A cache's user: fetch the value elsewhere, then store it (the SET is part of
                 * this operation's latency, counted as a SET as well). */
                tag_value(val, k);
                uint64_t set_t = nessie_mono_ns();
                rc = memcached_set(m, key, (size_t)opt.key_size, val, vlen, 0, 0);
                if (measuring) {
                    bool stored = rc == MEMCACHED_SUCCESS;
                    count_call(r, &acc, t_measure, set_t, nessie_mono_ns(), true, stored);
                    calls_batch++;
                    failed_batch += !stored;
                    r->ops[OP_SET]++;
                    if (stored) {
                        r->ok[OP_SET]++;
                        r->good_bytes += vlen;
                    } else
                        note_error(r, "set", m, rc);
                }
            }
        } else {
            tag_value(val, k);
            uint64_t set_t = nessie_mono_ns();
            memcached_return_t rc = memcached_set(m, key, (size_t)opt.key_size, val, vlen, 0, 0);
            if (rc == MEMCACHED_SUCCESS)
                ok = true;
            else if (measuring)
                note_error(r, "set", m, rc);
            if (measuring) {
                count_call(r, &acc, t_measure, set_t, nessie_mono_ns(), true, ok);
                calls_batch++;
                failed_batch += !ok;
            }
        }
        if (!measuring)
            continue;
        uint64_t done = nessie_mono_ns();
        uint64_t lat = done - (period > 0 ? sched : t);
        if (period > 0 && t > sched + 1000000)
            r->late++;
        r->ops[kind]++;
        if (ok) {
            r->ok[kind]++;
            r->good_bytes += vlen;
        }
        r->hist[kind][hist_bin(lat)]++;
        if (quota > 0)
            quota--;
        if (kind == OP_GET) {
            gets_batch++;
            hits_batch += ok;
        }
        if (++progress_batch == 64) {
            atomic_fetch_add_explicit(&sh->progress_ops, progress_batch, memory_order_relaxed);
            atomic_fetch_add_explicit(&sh->progress_gets, gets_batch, memory_order_relaxed);
            atomic_fetch_add_explicit(&sh->progress_hits, hits_batch, memory_order_relaxed);
            atomic_fetch_add_explicit(&sh->progress_calls, calls_batch, memory_order_relaxed);
            atomic_fetch_add_explicit(&sh->progress_failed, failed_batch, memory_order_relaxed);
            progress_batch = gets_batch = hits_batch = calls_batch = failed_batch = 0;
        }
    }
    tl_flush(&acc);
    atomic_fetch_add_explicit(&sh->progress_ops, progress_batch, memory_order_relaxed);
    atomic_fetch_add_explicit(&sh->progress_calls, calls_batch, memory_order_relaxed);
    atomic_fetch_add_explicit(&sh->progress_failed, failed_batch, memory_order_relaxed);
    r->cpu_ns = thread_cpu_ns() - cpu0;
    r->elapsed_ns = nessie_mono_ns() - t0;
    memcached_free(m);
    free(key);
    free(val);
    return NULL;
}

/* A child process: its threads, then exit. */
static void run_process(int proc)
{
    pthread_t tid[opt.threads];
    struct thread_arg args[opt.threads];
    for (int i = 0; i < opt.threads; i++) {
        args[i].index = (unsigned)(proc * opt.threads + i);
        if (pthread_create(&tid[i], NULL, client_thread, &args[i]) != 0) {
            atomic_fetch_add(&sh->failed, 1);
            tid[i] = 0;
        }
    }
    for (int i = 0; i < opt.threads; i++)
        if (tid[i])
            pthread_join(tid[i], NULL);
}

/* Store every key once, so GETs hit. Returns the number of failed SETs. */
static int64_t preload(void)
{
    memcached_st *m = connect_client();
    if (!m)
        return opt.keys;
    char *key = malloc((size_t)opt.key_size + 1), *val = malloc((size_t)max_value_len + 8);
    memset(val, 'v', (size_t)max_value_len + 8);
    int64_t failed = 0;
    memcached_return_t last = MEMCACHED_SUCCESS;
    for (int64_t i = 0; i < opt.keys; i++) {
        make_key(key, (uint64_t)i);
        tag_value(val, (uint64_t)i);
        memcached_return_t rc =
            memcached_set(m, key, (size_t)opt.key_size, val, value_len((uint64_t)i), 0, 0);
        if (rc != MEMCACHED_SUCCESS) {
            failed++;
            last = rc;
        }
    }
    if (failed)
        fprintf(stderr, "loadgen: preload: %" PRId64 " of %" PRId64 " SETs failed (%s)\n", failed,
                opt.keys, memcached_strerror(m, last));
    memcached_free(m);
    free(key);
    free(val);
    return failed;
}

struct watched {
    char name[32];
    int pid;
    uint64_t ticks0, ticks1;
    bool gone;
};

/* utime + stime of a process, in clock ticks; false if it is gone. */
static bool proc_ticks(int pid, uint64_t *ticks)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return false;
    /* Fields after the command: state(3) ... utime(14) stime(15). */
    unsigned long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return false;
    *ticks = ut + st;
    return true;
}

static GOptionEntry entries[] = {
    {"servers", 's', 0, G_OPTION_ARG_STRING, &opt.servers, "memcached servers (default 127.0.0.1:11211)", "HOST:PORT[,..]"},
    {"binary", 'b', 0, G_OPTION_ARG_NONE, &opt.binary, "binary protocol (default: ascii)", NULL},
    {"key-size", 'k', 0, G_OPTION_ARG_INT, &opt.key_size, "key bytes, 16..250 (default 128, the paper's)", "N"},
    {"value-size", 'v', 0, G_OPTION_ARG_INT, &opt.value_size, "value bytes (default 1024)", "N"},
    {"value-sizes", 0, 0, G_OPTION_ARG_STRING, &opt.value_sizes,
     "a mix instead: key i's value has the (i mod n)-th of these sizes (the CSV's value_size is "
     "their mean, goodput counts each op's own bytes)", "A,B[,..]"},
    {"get-ratio", 'g', 0, G_OPTION_ARG_DOUBLE, &opt.get_ratio, "fraction of GETs, 0..1 (default 0.9)", "F"},
    {"dist", 'd', 0, G_OPTION_ARG_STRING, &opt.dist, "key distribution: uniform (default) or zipf", "D"},
    {"theta", 0, 0, G_OPTION_ARG_DOUBLE, &opt.theta, "Zipf skew (default 0.99, YCSB's)", "F"},
    {"keys", 'n', 0, G_OPTION_ARG_INT64, &opt.keys, "distinct keys (default 10000)", "N"},
    {"key-base", 0, 0, G_OPTION_ARG_INT64, &opt.key_base,
     "number the keys from N (default 0): several loadgens on disjoint keys", "N"},
    {"procs", 'P', 0, G_OPTION_ARG_INT, &opt.procs, "client processes (default 1)", "N"},
    {"threads", 't', 0, G_OPTION_ARG_INT, &opt.threads, "threads per process (default 1)", "N"},
    {"duration", 'D', 0, G_OPTION_ARG_DOUBLE, &opt.duration, "measured seconds (default 5)", "S"},
    {"warmup", 'w', 0, G_OPTION_ARG_DOUBLE, &opt.warmup, "unmeasured seconds first (default 1)", "S"},
    {"ops", 'o', 0, G_OPTION_ARG_INT64, &opt.ops, "measure this many ops in all instead of a duration", "N"},
    {"rate", 'r', 0, G_OPTION_ARG_DOUBLE, &opt.rate, "open loop: offered ops/s in all (default: closed loop)", "R"},
    {"no-preload", 0, 0, G_OPTION_ARG_NONE, &opt.no_preload, "do not store every key first", NULL},
    {"label", 'l', 0, G_OPTION_ARG_STRING, &opt.label, "first CSV column (default: loadgen)", "S"},
    {"watch-pid", 'W', 0, G_OPTION_ARG_STRING_ARRAY, &opt.watch, "count this process's CPU seconds (repeatable)", "NAME:PID"},
    {"csv-header", 'H', 0, G_OPTION_ARG_NONE, &opt.csv_header, "print the CSV header line first", NULL},
    {"header-only", 0, 0, G_OPTION_ARG_NONE, &opt.header_only, "print the CSV header line and exit", NULL},
    {"progress", 'p', 0, G_OPTION_ARG_NONE, &opt.progress, "a line per second on stderr", NULL},
    {"set-on-miss", 0, 0, G_OPTION_ARG_NONE, &opt.set_on_miss,
     "a GET that misses is followed by a SET of its key, as a cache's users do", NULL},
    {"series", 0, 0, G_OPTION_ARG_FILENAME, &opt.series,
     "write a line per second of the measured window to FILE: second,ops_per_s,get_hit_ratio",
     "FILE"},
    {"seed", 0, 0, G_OPTION_ARG_INT64, &opt.seed, "random seed (default 42)", "N"},
    {"ketama", 0, 0, G_OPTION_ARG_NONE, &opt.ketama,
     "ketama consistent hashing over the servers (MEMCACHED_BEHAVIOR_KETAMA)", NULL},
    {"failure-limit", 0, 0, G_OPTION_ARG_INT, &opt.failure_limit,
     "remove a server from the distribution after N failures (MEMCACHED_BEHAVIOR_REMOVE_FAILED_"
     "SERVERS and SERVER_FAILURE_LIMIT = N; default: libmemcached's, no removal)", "N"},
    {"retry-timeout", 0, 0, G_OPTION_ARG_INT, &opt.retry_timeout,
     "seconds a failed server is left alone (MEMCACHED_BEHAVIOR_RETRY_TIMEOUT; default: "
     "libmemcached's, 2)", "S"},
    {"dead-timeout", 0, 0, G_OPTION_ARG_INT, &opt.dead_timeout,
     "seconds before a removed server is tried again (MEMCACHED_BEHAVIOR_DEAD_TIMEOUT; default: "
     "libmemcached's, 0: never, its calls fail once its retry timeout is over)", "S"},
    {"window-from", 0, 0, G_OPTION_ARG_INT64, &opt.window_from,
     "count the calls issued from MS into the measured window apart (the CSV's win_ columns)",
     "MS"},
    {"window-to", 0, 0, G_OPTION_ARG_INT64, &opt.window_to, "... until MS", "MS"},
    {"timeline", 0, 0, G_OPTION_ARG_FILENAME, &opt.timeline,
     "write the measured window's calls per bin to FILE: ms,calls,answered,failed,sets,sets_ok,"
     "max_us (ms: the bin's start, into the measured window)", "FILE"},
    {"timeline-ms", 0, 0, G_OPTION_ARG_INT, &opt.timeline_ms, "--timeline's bin (default 1000)",
     "MS"},
    {"start-at", 0, 0, G_OPTION_ARG_INT64, &opt.start_at,
     "start the load (its warm-up) at this CLOCK_REALTIME time, ns since the epoch (date +%s%N), "
     "not as soon as every thread is ready: loadgens started together share their bins", "NS"},
    {"hist", 0, 0, G_OPTION_ARG_FILENAME, &opt.hist,
     "write the measured GETs' latency histogram to FILE (for --merge-hist: loadgens run apart, "
     "one per node, have one GET p99, not the worst of theirs)", "FILE"},
    {"merge-hist", 0, 0, G_OPTION_ARG_NONE, &opt.merge_hist,
     "run no load: sum the --hist files named after the options and print their GET count, "
     "p50 and p99 (us) as CSV", NULL},
    {NULL, 0, 0, 0, NULL, NULL, NULL},
};

/* The first line of a --hist file: its format, with the bin layout it was written in. */
#define HIST_FILE_MAGIC "# loadgen GET latency histogram: bin count; bins"

/* Write h to path (--hist): the magic line, then "bin count" for every bin that counted.
 * Returns false (with a message) if it cannot be written; never leaves a partial file named
 * path behind without saying so. */
static bool hist_write(const char *path, const uint64_t *h)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "loadgen: --hist %s: %s\n", path, strerror(errno));
        return false;
    }
    fprintf(f, "%s %d\n", HIST_FILE_MAGIC, HIST_BINS);
    for (int b = 0; b < HIST_BINS; b++)
        if (h[b])
            fprintf(f, "%d %" PRIu64 "\n", b, h[b]);
    if (fclose(f) != 0) {
        fprintf(stderr, "loadgen: --hist %s: %s\n", path, strerror(errno));
        return false;
    }
    return true;
}

/* --merge-hist: add the histograms of files[0..n) and print "gets,get_p50_us,get_p99_us" and
 * their values. Returns the exit status: 2 (with a message naming the file and line) for a file
 * that cannot be read or is not a --hist file of this binary's layout. */
static int hist_merge(char **files, int n)
{
    static uint64_t sum[HIST_BINS];
    uint64_t total = 0;
    if (n < 1) {
        fprintf(stderr, "loadgen: --merge-hist needs at least one file\n");
        return 2;
    }
    for (int i = 0; i < n; i++) {
        FILE *f = fopen(files[i], "r");
        if (!f) {
            fprintf(stderr, "loadgen: --merge-hist %s: %s\n", files[i], strerror(errno));
            return 2;
        }
        char line[128];
        int bins = 0, lineno = 1;
        if (!fgets(line, sizeof(line), f) ||
            strncmp(line, HIST_FILE_MAGIC, strlen(HIST_FILE_MAGIC)) != 0 ||
            sscanf(line + strlen(HIST_FILE_MAGIC), "%d", &bins) != 1 || bins != HIST_BINS) {
            fprintf(stderr, "loadgen: --merge-hist %s: not a --hist file of this loadgen (%d bins)\n",
                    files[i], HIST_BINS);
            fclose(f);
            return 2;
        }
        while (fgets(line, sizeof(line), f)) {
            int b;
            uint64_t c;
            lineno++;
            if (sscanf(line, "%d %" SCNu64, &b, &c) != 2 || b < 0 || b >= HIST_BINS) {
                fprintf(stderr, "loadgen: --merge-hist %s:%d: expected \"bin count\", bin < %d\n",
                        files[i], lineno, HIST_BINS);
                fclose(f);
                return 2;
            }
            sum[b] += c;
            total += c;
        }
        fclose(f);
    }
    printf("gets,get_p50_us,get_p99_us\n%" PRIu64 ",%.2f,%.2f\n", total, hist_quantile(sum, 0.5),
           hist_quantile(sum, 0.99));
    return 0;
}

#define CSV_HEADER                                                                                \
    "label,value_size,key_size,get_ratio,dist,keys,procs,threads,offered_rate,seconds,ops,"      \
    "ops_per_s,gets,get_hits,misses,sets,errors,goodput_mb_s,p50_us,p99_us,p999_us,mean_us,"     \
    "get_p50_us,get_p99_us,set_p50_us,set_p99_us,cpu_client_s,cpu_server_s,cpu_us_per_op,late,"  \
    "calls,calls_failed,sets_ok,max_call_us,win_calls,win_failed,win_sets,win_sets_ok,"          \
    "win_p99_us,win_max_us"

int main(int argc, char **argv)
{
    GError *err = NULL;
    GOptionContext *ctx = g_option_context_new("- the Nessie benchmarks' load generator");
    g_option_context_set_summary(ctx,
        "Loads memcached servers through libmemcached; run through tools/nessie-run to load\n"
        "Nessie with the same binary. Prints one CSV row (see --csv-header) on stdout.");
    g_option_context_add_main_entries(ctx, entries, NULL);
    if (!g_option_context_parse(ctx, &argc, &argv, &err)) {
        fprintf(stderr, "loadgen: %s (try --help)\n", err->message);
        return 2;
    }
    g_option_context_free(ctx);
    if (opt.merge_hist)
        return hist_merge(argv + 1, argc - 1);
    if (opt.header_only) {
        printf("%s\n", CSV_HEADER);
        return 0;
    }
    if (!opt.servers)
        opt.servers = g_strdup("127.0.0.1:11211");
    if (!opt.dist)
        opt.dist = g_strdup("uniform");
    if (!opt.label)
        opt.label = g_strdup("loadgen");
    zipf = strcmp(opt.dist, "zipf") == 0;
    const char *bad = NULL;
    if (!zipf && strcmp(opt.dist, "uniform") != 0)
        bad = "--dist must be uniform or zipf";
    else if (opt.key_size < 16 || opt.key_size > 250)
        bad = "--key-size must be 16..250";
    else if (opt.value_size < 0 || opt.value_size > 64 * 1024 * 1024)
        bad = "--value-size must be 0..64 MiB";
    else if (opt.get_ratio < 0 || opt.get_ratio > 1)
        bad = "--get-ratio must be 0..1";
    else if (opt.keys < 1 || opt.key_base < 0 || opt.procs < 1 || opt.threads < 1 ||
             opt.procs * opt.threads > 4096)
        bad = "--keys, --procs and --threads must be >= 1 (procs x threads <= 4096), --key-base >= 0";
    else if (opt.duration <= 0 || opt.warmup < 0 || opt.ops < 0 || opt.rate < 0)
        bad = "--duration must be > 0; --warmup, --ops and --rate >= 0";
    else if (zipf && (opt.theta <= 0 || opt.theta >= 1))
        bad = "--theta must be in (0, 1)";
    else if (opt.failure_limit < 0 || opt.retry_timeout < -1 || opt.dead_timeout < -1)
        bad = "--failure-limit, --retry-timeout and --dead-timeout must be >= 0";
    else if (opt.window_from < 0 || opt.window_to < opt.window_from)
        bad = "--window-from must be >= 0 and --window-to >= it";
    else if (opt.timeline && (opt.timeline_ms < 1 || opt.ops > 0))
        bad = "--timeline needs --timeline-ms >= 1 and a duration (not --ops)";
    else if (opt.start_at < 0)
        bad = "--start-at must be a time in ns since the epoch";
    value_len_of[0] = max_value_len = opt.value_size;
    if (!bad && opt.value_sizes) {
        gchar **parts = g_strsplit(opt.value_sizes, ",", -1);
        n_value_lens = 0;
        max_value_len = 0;
        int64_t sum = 0;
        for (gchar **p = parts; *p && !bad; p++) {
            char *end;
            long v = strtol(*p, &end, 10);
            if (n_value_lens == MAX_VALUE_SIZES || end == *p || *end || v < 0 ||
                v > 64 * 1024 * 1024)
                bad = "--value-sizes must be at most 16 sizes of 0..64 MiB, comma-separated";
            else {
                value_len_of[n_value_lens++] = (int)v;
                max_value_len = v > max_value_len ? (int)v : max_value_len;
                sum += v;
            }
        }
        g_strfreev(parts);
        if (!bad && n_value_lens == 0)
            bad = "--value-sizes needs at least one size";
        if (!bad)
            opt.value_size = (int)(sum / n_value_lens);
    }
    if (bad) {
        fprintf(stderr, "loadgen: %s\n", bad);
        return 2;
    }
    struct watched watch[MAX_WATCH];
    int nwatch = 0;
    for (char **w = opt.watch; w && *w; w++) {
        char *colon = strrchr(*w, ':');
        if (nwatch == MAX_WATCH || !colon || atoi(colon + 1) <= 0) {
            fprintf(stderr, "loadgen: --watch-pid %s: expected NAME:PID (at most %d)\n", *w,
                    MAX_WATCH);
            return 2;
        }
        memset(&watch[nwatch], 0, sizeof(watch[nwatch]));
        snprintf(watch[nwatch].name, sizeof(watch[nwatch].name), "%.*s", (int)(colon - *w), *w);
        watch[nwatch].pid = atoi(colon + 1);
        nwatch++;
    }
    if (zipf)
        zipf_init((uint64_t)opt.keys, opt.theta);

    unsigned nthreads = (unsigned)(opt.procs * opt.threads);
    size_t shbytes = sizeof(struct shared) + nthreads * sizeof(struct thread_result);
    sh = mmap(NULL, shbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("loadgen: mmap");
        return 1;
    }
    if (opt.timeline) {
        tl_n = (unsigned)ceil(opt.duration * 1000.0 / opt.timeline_ms);
        if (tl_n == 0)
            tl_n = 1;
        tl = mmap(NULL, tl_n * sizeof(*tl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                  -1, 0);
        if (tl == MAP_FAILED) {
            perror("loadgen: mmap");
            return 1;
        }
    }
    if (!opt.no_preload && preload() == opt.keys) {
        fprintf(stderr, "loadgen: every preload SET failed: is the server there?\n");
        return 1;
    }
    /* Children are forked before any thread exists, so fork is safe. */
    pid_t kids[opt.procs];
    for (int p = 0; p < opt.procs; p++) {
        kids[p] = fork();
        if (kids[p] < 0) {
            perror("loadgen: fork");
            atomic_store(&sh->t_start, 1);
            return 1;
        }
        if (kids[p] == 0) {
            run_process(p);
            _exit(0);
        }
    }
    while (atomic_load(&sh->ready) + atomic_load(&sh->failed) < nthreads)
        usleep(1000);
    uint64_t t_start = nessie_mono_ns() + 20000000ULL;
    if (opt.start_at > 0) {
        /* The wall-clock time on the monotonic clock (both run at one rate; the run is short). */
        uint64_t real = nessie_real_ns(), mono = nessie_mono_ns();
        if ((uint64_t)opt.start_at > real)
            t_start = mono + ((uint64_t)opt.start_at - real);
        else
            fprintf(stderr, "loadgen: %s: --start-at passed %.3f s ago (preload too slow?): "
                    "starting now\n", opt.label ? opt.label : "loadgen",
                    (double)(real - (uint64_t)opt.start_at) / 1e9);
    }
    uint64_t t_measure = t_start + (uint64_t)(opt.warmup * 1e9);
    uint64_t t_end = t_measure + (uint64_t)(opt.duration * 1e9);
    atomic_store(&sh->t_measure, t_measure);
    atomic_store(&sh->t_end, t_end);
    atomic_store(&sh->t_start, t_start);
    if (atomic_load(&sh->failed))
        fprintf(stderr, "loadgen: %u threads could not start\n", atomic_load(&sh->failed));

    sleep_until(t_measure);
    for (int i = 0; i < nwatch; i++)
        watch[i].gone = !proc_ticks(watch[i].pid, &watch[i].ticks0);
    /* Sample the watched processes' CPU when the last thread is done: in duration mode that is
     * t_end; in --ops mode it is when the children exit. */
    int alive = opt.procs;
    uint64_t last_ops = 0, last_gets = 0, last_hits = 0, last_t = nessie_mono_ns();
    uint64_t last_calls = 0, last_failed = 0;
    uint64_t t_next = t_measure + 1000000000ULL;
    FILE *series = NULL;
    if (opt.series) {
        series = fopen(opt.series, "w");
        if (!series)
            fprintf(stderr, "loadgen: %s: %s (no series written)\n", opt.series, strerror(errno));
        else
            fprintf(series, "second,ops_per_s,get_hit_ratio\n");
    }
    bool sampled = false;
    while (alive > 0) {
        int status;
        pid_t w = waitpid(-1, &status, WNOHANG);
        if (w > 0) {
            alive--;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fprintf(stderr, "loadgen: client process %d died\n", (int)w);
            continue;
        }
        uint64_t t = nessie_mono_ns();
        if (!sampled && opt.ops == 0 && t >= t_end) {
            for (int i = 0; i < nwatch; i++)
                watch[i].gone |= !proc_ticks(watch[i].pid, &watch[i].ticks1);
            sampled = true;
        }
        if ((opt.progress || series) && t >= t_next) {
            uint64_t o = atomic_load(&sh->progress_ops), g = atomic_load(&sh->progress_gets),
                     h = atomic_load(&sh->progress_hits), c = atomic_load(&sh->progress_calls),
                     f = atomic_load(&sh->progress_failed);
            double ops_s = (double)(o - last_ops) * 1e9 / (double)(t - last_t);
            double hit = g > last_gets ? (double)(h - last_hits) / (double)(g - last_gets) : 0;
            if (opt.progress)
                fprintf(stderr,
                        "loadgen: %s %4.0f s  %10.0f ops/s  GET hits %5.1f%%  calls answered %" PRIu64
                        " failed %" PRIu64 "\n",
                        opt.label, (double)(t - t_measure) / 1e9, ops_s, 100 * hit,
                        (c - last_calls) - (f - last_failed), f - last_failed);
            if (series)
                fprintf(series, "%.0f,%.0f,%.4f\n", (double)(t - t_measure) / 1e9, ops_s, hit);
            last_ops = o;
            last_gets = g;
            last_hits = h;
            last_calls = c;
            last_failed = f;
            last_t = t;
            t_next += 1000000000ULL;
        }
        usleep(2000);
    }
    if (!sampled)
        for (int i = 0; i < nwatch; i++)
            watch[i].gone |= !proc_ticks(watch[i].pid, &watch[i].ticks1);

    if (series)
        fclose(series);
    if (tl) {
        FILE *f = fopen(opt.timeline, "w");
        if (!f) {
            fprintf(stderr, "loadgen: %s: %s (no timeline written)\n", opt.timeline,
                    strerror(errno));
        } else {
            fprintf(f, "ms,calls,answered,failed,sets,sets_ok,max_us\n");
            for (unsigned b = 0; b < tl_n; b++) {
                uint64_t c = atomic_load(&tl[b].calls), fl = atomic_load(&tl[b].failed);
                fprintf(f, "%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
                        ",%.0f\n", (uint64_t)b * (uint64_t)opt.timeline_ms, c, c - fl, fl,
                        (uint64_t)atomic_load(&tl[b].sets), (uint64_t)atomic_load(&tl[b].sets_ok),
                        (double)atomic_load(&tl[b].max_ns) / 1e3);
            }
            fclose(f);
        }
    }

    /* Sum the threads. */
    static struct thread_result tot;
    uint64_t all_hist[HIST_BINS] = {0};
    double cpu_client = 0, seconds = opt.duration;
    uint64_t max_elapsed = 0;
    const char *first_error = NULL;
    for (unsigned t = 0; t < nthreads; t++) {
        struct thread_result *r = &sh->res[t];
        for (int k = 0; k < OP_KINDS; k++) {
            tot.ops[k] += r->ops[k];
            tot.ok[k] += r->ok[k];
            for (int b = 0; b < HIST_BINS; b++) {
                tot.hist[k][b] += r->hist[k][b];
                all_hist[b] += r->hist[k][b];
            }
        }
        tot.misses += r->misses;
        tot.errors += r->errors;
        tot.bad_values += r->bad_values;
        tot.late += r->late;
        tot.good_bytes += r->good_bytes;
        tot.calls += r->calls;
        tot.calls_failed += r->calls_failed;
        tot.max_call_ns = r->max_call_ns > tot.max_call_ns ? r->max_call_ns : tot.max_call_ns;
        tot.win_calls += r->win_calls;
        tot.win_failed += r->win_failed;
        tot.win_sets += r->win_sets;
        tot.win_sets_ok += r->win_sets_ok;
        tot.win_max_ns = r->win_max_ns > tot.win_max_ns ? r->win_max_ns : tot.win_max_ns;
        for (int b = 0; b < HIST_BINS; b++)
            tot.win_hist[b] += r->win_hist[b];
        cpu_client += (double)r->cpu_ns / 1e9;
        if (r->elapsed_ns > max_elapsed)
            max_elapsed = r->elapsed_ns;
        if (!first_error && r->first_error[0])
            first_error = r->first_error;
    }
    if (opt.ops > 0 && max_elapsed > 0)
        seconds = (double)max_elapsed / 1e9;
    double hz = (double)sysconf(_SC_CLK_TCK), cpu_server = 0;
    for (int i = 0; i < nwatch; i++) {
        if (watch[i].gone)
            fprintf(stderr, "loadgen: watched process %s (%d) went away\n", watch[i].name,
                    watch[i].pid);
        else
            cpu_server += (double)(watch[i].ticks1 - watch[i].ticks0) / hz;
    }
    uint64_t ops = tot.ops[OP_GET] + tot.ops[OP_SET];
    double ops_s = (double)ops / seconds;
    double goodput = (double)tot.good_bytes / seconds / 1e6;
    double cpu_per_op = ops ? (cpu_client + cpu_server) / (double)ops * 1e6 : 0;

    if (opt.csv_header)
        printf("%s\n", CSV_HEADER);
    printf("%s,%d,%d,%.2f,%s,%" PRId64 ",%d,%d,%.0f,%.3f,%" PRIu64 ",%.0f,%" PRIu64 ",%" PRIu64
           ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.3f,%.3f,%.3f,%" PRIu64
           ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.1f,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
           ",%.1f,%.1f\n",
           opt.label, opt.value_size, opt.key_size, opt.get_ratio, opt.dist, opt.keys, opt.procs,
           opt.threads, opt.rate, seconds, ops, ops_s, tot.ops[OP_GET], tot.ok[OP_GET], tot.misses,
           tot.ops[OP_SET], tot.errors, goodput, hist_quantile(all_hist, 0.5),
           hist_quantile(all_hist, 0.99), hist_quantile(all_hist, 0.999), hist_mean(all_hist),
           hist_quantile(tot.hist[OP_GET], 0.5), hist_quantile(tot.hist[OP_GET], 0.99),
           hist_quantile(tot.hist[OP_SET], 0.5), hist_quantile(tot.hist[OP_SET], 0.99), cpu_client,
           cpu_server, cpu_per_op, tot.late, tot.calls, tot.calls_failed, tot.ok[OP_SET],
           (double)tot.max_call_ns / 1e3, tot.win_calls, tot.win_failed, tot.win_sets,
           tot.win_sets_ok, hist_quantile(tot.win_hist, 0.99), (double)tot.win_max_ns / 1e3);
    fflush(stdout);
    fprintf(stderr,
            "loadgen: %s: %" PRIu64 " ops in %.2f s = %.0f ops/s, goodput %.1f MB/s, p50 %.2f us, "
            "p99 %.2f us, p99.9 %.2f us, misses %" PRIu64 ", errors %" PRIu64 ", CPU %.2f s client + "
            "%.2f s server\n",
            opt.label, ops, seconds, ops_s, goodput, hist_quantile(all_hist, 0.5),
            hist_quantile(all_hist, 0.99), hist_quantile(all_hist, 0.999), tot.misses, tot.errors,
            cpu_client, cpu_server);
    if (tot.calls_failed || opt.window_to > opt.window_from || tl)
        fprintf(stderr,
                "loadgen: %s: calls %" PRIu64 ", answered %.4f%%, failed %" PRIu64
                ", SETs acknowledged %" PRIu64 " of %" PRIu64 ", slowest call %.3f ms\n",
                opt.label, tot.calls,
                tot.calls ? 100.0 * (double)(tot.calls - tot.calls_failed) / (double)tot.calls : 0,
                tot.calls_failed, tot.ok[OP_SET], tot.ops[OP_SET], (double)tot.max_call_ns / 1e6);
    if (opt.window_to > opt.window_from)
        fprintf(stderr,
                "loadgen: %s: window %" PRId64 "..%" PRId64 " ms: calls %" PRIu64
                ", answered %.4f%%, failed %" PRIu64 ", SETs acknowledged %" PRIu64 " of %" PRIu64
                ", p99 %.3f ms, slowest call %.3f ms\n",
                opt.label, opt.window_from, opt.window_to, tot.win_calls,
                tot.win_calls ? 100.0 * (double)(tot.win_calls - tot.win_failed) /
                                    (double)tot.win_calls
                              : 0,
                tot.win_failed, tot.win_sets_ok, tot.win_sets, hist_quantile(tot.win_hist, 0.99) / 1e3,
                (double)tot.win_max_ns / 1e6);
    if (first_error)
        fprintf(stderr, "loadgen: first error: %s\n", first_error);
    if (opt.hist && !hist_write(opt.hist, tot.hist[OP_GET]))
        return 1;
    if (atomic_load(&sh->failed))
        return 1;
    return tot.bad_values ? 1 : 0;
}
