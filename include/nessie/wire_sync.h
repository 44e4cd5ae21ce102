/*
 * wire_sync.h - the synchronization of a channel (wire.h step 3), compiled by both sides: the
 * client (shim/channel.c) and the daemon (reception/channel.c, reception/worker.c). Header-only,
 * so the shim links nothing of the daemon's.
 *
 * Memory orderings, in one place:
 * - A request is published by the client's seq_cst store of sq_head (after its plain stores of
 *   the slot's req, its arena part, its state and the ring entry: the store releases them all);
 *   the daemon's acquire load of sq_head sees them. The client then loads worker_parked seq_cst;
 *   the daemon, before it sleeps, stores worker_parked = 1 seq_cst and loads sq_head seq_cst
 *   (Dekker): either the daemon sees the request, or the client sees it parked and rings.
 * - A reply is published by the daemon's seq_cst store of the slot's state = REPLY (releasing
 *   rep and the arena part); the client's acquire load of state == REPLY sees them. The daemon
 *   then loads client_waiting seq_cst; the client, before it sleeps, stores client_waiting = 1
 *   seq_cst and loads state seq_cst (Dekker again): one of them sees the other.
 * - Ring entries are read with relaxed atomic loads: a well-behaved client wrote them before the
 *   release above; a misbehaving one may scribble on them at any time, and whatever is read is
 *   checked before it is used.
 *
 * The wait policy ("Busy CPUs" in DESIGN.md). A wake-up through a futex or an eventfd costs 5 to
 * 80 us depending on the machine (shared/notes/machine-limits.md), a look at shared memory 0.2 us.
 * Spinning pays only while the other side is running and its answer is due within about one
 * wake-up; past that, blocking at once costs at most twice the best possible (the classic bound
 * of spin-then-block). And spinning while the other side is not running is worse than useless: a
 * spinner that does not yield keeps the CPU the other side may be queued on. So each side spins
 * only for a budget derived from what it measured, capped by the wake-up cost it measured, and
 * only while the other side runs on another CPU:
 * - The client waits for a reply. It estimates the service time of its requests from the
 *   daemon's timestamps (rep.done_ns - its posting time), counting only requests posted to a
 *   running worker, and the worker's wake-up cost from the requests that rang the doorbell
 *   (rep.done_ns - rep.busy_ns - its posting time). It spins for twice the service time (plus a
 *   slack, at most one wake-up cost) only if the worker is running (not parked, and not last seen
 *   on the client's own CPU), stops the moment the worker parks, and blocks at once after ringing
 *   the doorbell (the woken worker may be placed on the client's CPU).
 * - The worker waits for the next request. That is the client's think time (from a reply to the
 *   next request) plus, when the reply had to wake the client, the client's wake-up: both
 *   measured by the client and published in the channel. After a pass that found work the worker
 *   spins for twice the smallest think time of the clients it just served, plus their wake-up
 *   when it woke them (a closed loop that once fell asleep finds its way back to spinning this
 *   way, instead of paying two wake-ups per request for ever), at most spin_us, and not at all
 *   when that think time exceeds spin_us; then it parks.
 * - So at low offered load (requests further apart than spin_us) nobody spins: the worker parks
 *   after each request, the client finds it parked and sleeps; an idle daemon sleeps.
 * - NESSIE_WAIT=spin|block (client side) forces one behaviour, for the hop microbenchmark.
 */
#ifndef NESSIE_WIRE_SYNC_H
#define NESSIE_WIRE_SYNC_H

#include <errno.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <nessie/wire.h>

/* Tunables of the wait policy, with their reasons. */
/* What a sleep + wake-up costs until one was measured (35-80 us on most machines of this kind),
 * and the bounds of the measured figure (a sample past the upper one says "block" as clearly). */
#define WIRE_WAKE_COST_NS 50000ULL
#define WIRE_WAKE_COST_MIN_NS 2000ULL
#define WIRE_WAKE_COST_MAX_NS 200000ULL
/* Slack added to twice the estimate, so a little jitter does not cost a wake-up. */
#define WIRE_SPIN_SLACK_NS 4000ULL
/* NESSIE_WAIT=spin: spin this long before blocking anyway (a 1 MiB request takes ~200 us). */
#define WIRE_SPIN_FORCED_NS 300000ULL
/* Weight of a new sample in the estimates: 1/8, a few requests' memory. */
#define WIRE_EST_SHIFT 3
/* Read the clock once per this many spins: it costs more than a look at the word. */
#define WIRE_SPIN_CLOCK_EVERY 16

enum wire_wait_mode {
    WIRE_WAIT_ADAPTIVE = 0,
    WIRE_WAIT_SPIN,  /* spin up to WIRE_SPIN_FORCED_NS whatever was measured */
    WIRE_WAIT_BLOCK, /* never spin */
};

static inline enum wire_wait_mode wire_wait_mode_parse(const char *s)
{
    if (s && strcmp(s, "spin") == 0)
        return WIRE_WAIT_SPIN;
    if (s && strcmp(s, "block") == 0)
        return WIRE_WAIT_BLOCK;
    return WIRE_WAIT_ADAPTIVE;
}

static inline uint64_t wire_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* A hint to the CPU that this is a spin loop (it saves power and the sibling hyperthread). */
static inline void wire_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* An estimate of a waiting time: an exponentially weighted moving average. */
struct wire_est {
    uint64_t avg_ns; /* 0: nothing measured yet */
};

static inline void wire_est_add(struct wire_est *e, uint64_t sample_ns)
{
    /* A sample far past any wake-up says "block" as clearly as any larger one; clamping it lets
     * the estimate come back within a few requests once waits are short again. */
    if (sample_ns > WIRE_WAKE_COST_MAX_NS)
        sample_ns = WIRE_WAKE_COST_MAX_NS;
    if (e->avg_ns == 0)
        e->avg_ns = sample_ns ? sample_ns : 1;
    else
        e->avg_ns = e->avg_ns - (e->avg_ns >> WIRE_EST_SHIFT) + (sample_ns >> WIRE_EST_SHIFT);
}

/* A wake-up cost estimate, within its bounds (the default until measured). */
static inline uint64_t wire_wake_cost(uint64_t measured_ns)
{
    if (measured_ns == 0)
        return WIRE_WAKE_COST_NS;
    if (measured_ns < WIRE_WAKE_COST_MIN_NS)
        return WIRE_WAKE_COST_MIN_NS;
    return measured_ns < WIRE_WAKE_COST_MAX_NS ? measured_ns : WIRE_WAKE_COST_MAX_NS;
}

/* Twice the estimate plus a slack, capped at the wake-up cost; zero when a wake-up is cheaper. */
static inline uint64_t wire_spin_for(uint64_t est_ns, uint64_t wake_ns)
{
    if (est_ns > wake_ns)
        return 0;
    uint64_t b = 2 * est_ns + WIRE_SPIN_SLACK_NS;
    return b < wake_ns ? b : wake_ns;
}

/* The client's spin budget for a reply. service, worker_wake: its estimates; rang: it rang the
 * doorbell (the worker was parked); same_cpu: the worker was last seen on this CPU. */
static inline uint64_t wire_client_budget(enum wire_wait_mode mode, const struct wire_est *service,
                                          const struct wire_est *worker_wake, bool rang,
                                          bool same_cpu)
{
    if (mode == WIRE_WAIT_SPIN)
        return WIRE_SPIN_FORCED_NS;
    if (mode == WIRE_WAIT_BLOCK || rang || same_cpu)
        return 0;
    return wire_spin_for(service->avg_ns, wire_wake_cost(worker_wake->avg_ns));
}

/* The worker's spin budget for the next request: think and client_wake are the smallest hints
 * of the clients the last pass served (UINT64_MAX: none), woke: it woke one of them, cap_ns: the
 * configured longest spin (spin_us). The think time is compared with the cap, not with a wake-up
 * cost: a request that arrives while the worker sleeps pays a wake-up on the worker's side and,
 * since its client then sleeps too, one on the client's, and each wake-up risks a scheduling
 * delay far longer than its average (the tail of an open loop at moderate load); spinning up to
 * spin_us between requests that come that often costs at most spin_us of CPU per request. */
static inline uint64_t wire_worker_budget(uint64_t think_ns, uint64_t client_wake_ns, bool woke,
                                          uint64_t cap_ns)
{
    if (think_ns > cap_ns)
        return 0;
    uint64_t b = 2 * think_ns + WIRE_SPIN_SLACK_NS;
    if (woke)
        b += wire_wake_cost(client_wake_ns == UINT64_MAX ? 0 : client_wake_ns);
    return b < cap_ns ? b : cap_ns;
}

/* FUTEX_WAIT on a word of a MAP_SHARED mapping (no FUTEX_PRIVATE_FLAG: two processes share it)
 * while it holds val, for at most timeout_ms. Returns 0 when woken or the word changed, or
 * ETIMEDOUT / EINTR. */
static inline int wire_futex_wait(uint32_t *word, uint32_t val, long timeout_ms)
{
    struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
    long r = syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, NULL, 0);
    if (r == 0 || errno == EAGAIN)
        return 0;
    return errno;
}

static inline void wire_futex_wake_all(uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
}

/* Client: publish slot idx (its req, arena part and state already written) in the ring. Returns
 * true if the worker is parked and the doorbell must be rung. */
static inline bool wire_post(struct wire_channel *hdr, uint32_t *head, uint16_t idx)
{
    __atomic_store_n(&hdr->slot[idx].state, WIRE_ST_REQUEST, __ATOMIC_RELAXED);
    __atomic_store_n(&hdr->sq[*head % WIRE_SLOTS], idx, __ATOMIC_RELAXED);
    *head += 1;
    __atomic_store_n(&hdr->sq_head, *head, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&hdr->worker_parked, __ATOMIC_SEQ_CST) != 0;
}

/* Client: the slot's reply is there (acquire: rep and the arena part are visible). */
static inline bool wire_replied(struct wire_channel *hdr, uint16_t idx)
{
    return __atomic_load_n(&hdr->slot[idx].state, __ATOMIC_ACQUIRE) == WIRE_ST_REPLY;
}

/* Daemon: entries posted past tail (0 if none). A count past WIRE_SLOTS is a broken ring.
 * seq_cst, not just acquire: it is also the load of the park check (free on x86). */
static inline uint32_t wire_ring_pending(struct wire_channel *hdr, uint32_t tail)
{
    return __atomic_load_n(&hdr->sq_head, __ATOMIC_SEQ_CST) - tail;
}

/*
 * Daemon: take the ring entry at *tail: check its index, claim its slot (REQUEST -> BUSY) and
 * advance *tail. Returns the slot index, or -1 if the entry is garbage (the channel is broken:
 * a well-behaved client posts only slots it set to REQUEST).
 */
static inline int wire_ring_take(struct wire_channel *hdr, uint32_t *tail)
{
    uint16_t idx = __atomic_load_n(&hdr->sq[*tail % WIRE_SLOTS], __ATOMIC_RELAXED);
    if (idx >= WIRE_SLOTS)
        return -1;
    uint32_t expect = WIRE_ST_REQUEST;
    if (!__atomic_compare_exchange_n(&hdr->slot[idx].state, &expect, WIRE_ST_BUSY, false,
                                     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return -1;
    *tail += 1;
    return idx;
}

/* Daemon: publish the reply of slot idx (rep already stored in the slot, the arena part filled)
 * and wake the client if it sleeps on it. Returns true if it had to wake it. */
static inline bool wire_reply(struct wire_channel *hdr, uint16_t idx)
{
    struct wire_slot *s = &hdr->slot[idx];
    __atomic_store_n(&s->state, WIRE_ST_REPLY, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&s->client_waiting, __ATOMIC_SEQ_CST))
        return false;
    syscall(SYS_futex, &s->state, FUTEX_WAKE, 1, NULL, NULL, 0);
    return true;
}

/* Client: publish an estimate for the worker (client_think_ns, client_wake_ns), only when it
 * moved by more than an eighth: the header's cache line is read by the worker on every request,
 * and a store on every request would bounce it between the two CPUs. */
static inline void wire_publish_hint(uint32_t *word, uint64_t ns)
{
    uint32_t v = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
    uint32_t old = __atomic_load_n(word, __ATOMIC_RELAXED);
    uint32_t d = v > old ? v - old : old - v;
    if (d > old / 8)
        __atomic_store_n(word, v, __ATOMIC_RELAXED);
}

/* Daemon: one of the client's hints (client_think_ns, client_wake_ns). */
static inline uint64_t wire_hint(const uint32_t *word)
{
    return __atomic_load_n(word, __ATOMIC_RELAXED);
}

/* This thread's CPU plus one, 0 if unknown (cheap: the vDSO, or rseq). */
static inline uint32_t wire_cpu_tag(void)
{
    int c = sched_getcpu();
    return c < 0 ? 0 : (uint32_t)c + 1;
}

/* Daemon: about to sleep (parked = 1) or awake again (0). With parked = 1, the caller must look
 * at the ring once more (wire_ring_pending) before it sleeps: see the orderings above. */
static inline void wire_set_parked(struct wire_channel *hdr, uint32_t parked)
{
    __atomic_store_n(&hdr->worker_parked, parked, __ATOMIC_SEQ_CST);
}

/* Daemon: give up on a channel: the client's waits end with an error at once. */
static inline void wire_break(struct wire_channel *hdr, uint32_t status)
{
    __atomic_store_n(&hdr->error, status, __ATOMIC_SEQ_CST);
    for (unsigned i = 0; i < WIRE_SLOTS; i++)
        if (__atomic_load_n(&hdr->slot[i].client_waiting, __ATOMIC_SEQ_CST))
            wire_futex_wake_all(&hdr->slot[i].state);
}

#endif
