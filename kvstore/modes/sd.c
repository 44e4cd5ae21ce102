/*
 * sd.c - server-driven execution (issue 16): the NessieSD and NessieHY ways of carrying out an
 * operation, on the same tables and through the same protocol as the client-driven way.
 *
 * A requester ships an operation to its key's home node (the node of the key's first candidate
 * slot) by WRITEing it into its own slot of the home node's request ring (layout.h, the MSG
 * region), and waits for the reply the home node WRITEs into its MSG region. The home node's
 * server threads (nessie_sd_serve) find new requests by polling the rings' header words, run
 * them as client-driven operations of their own context (so the node's own memory is reached
 * locally, and every step is the protocol of Appendix A), and reply. Shipped and client-driven
 * operations on one key therefore interleave linearizably: each takes effect inside the home
 * node's execution, which lies inside the requester's call.
 *
 * Deadlines and withdrawal (issue 26). A request carries its requester's remaining budget (a
 * duration: clocks of two hosts are never compared); the server adds it to its own clock when it
 * first sees the request, and runs the call with that end as its budget (answering "expired",
 * not running it, once it has passed), so the shipped call obeys the call bound (engine.c,
 * bound_compute) from its start at the home node. A server takes a request up by a CAS of its
 * take-up word (posted -> taken); a requester that has had no reply within the take-up limit
 * withdraws it by a CAS of the same word (posted -> withdrawn): exactly one of the two wins. A
 * withdrawn call runs here, client-driven, with what is left of the budget it started with. So
 * one slow or stalled call holds up only itself: the calls queued behind it at its server are
 * withdrawn and run by their callers. A won withdrawal also shuns the home node (no server
 * looked at its ring): calls to it run here at once until its servers' heartbeat moves, so a
 * dead home node costs one take-up limit, not a budget per call, on every fabric.
 *
 * Honesty under faults (nessie.h): a GET changes nothing, so one that gets no answer may run
 * here after all, or say NESSIE_TIMEOUT. A write that a server may have taken up (taken, or its
 * take-up word could not be read) but whose reply did not come is NESSIE_TIMEOUT: the home node
 * may run it, or may have. A slot whose request may still be landing is poisoned (its header
 * zeroed, and that WRITE waited for) before it carries the next request, so a server still
 * copying the old request sees the change and drops its copy instead of running a request torn
 * between two.
 *
 * Ownership: a requester's slot is held by one thread at a time (the free mask); a home node's
 * request slot i belongs to server worker i % workers, and is served by whichever thread holds
 * it (sd_in.held): that server, or a helper (nessie_sd_help: a thread of the home node that is
 * awake anyway, waiting for its own shipped call or spinning for its clients, answers a GET at
 * once instead of leaving it to a napping server). So one slot's requests run one at a time, in
 * order, and its replies never race each other.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <isa-l/crc.h>

#include "memory/memory.h"
#include "memory/hash.h"
#include "modes.h"
#include "protocol/protocol.h"
#include "cpuload.h"
#include "log.h"

/* A request that stays torn, or fails its checksum, this long is garbage, not a WRITE still
 * landing (a WRITE lands within microseconds; one held up longer by verbs retransmissions gets
 * its requester a TIMEOUT, an honest answer): dropped, counted and logged. */
#define SD_GARBAGE_NS (100ULL * 1000000ULL)
/* A requester whose request was taken up waits for the reply this long beyond the longest the
 * home node may still run the call (the budget the request carried, W for a write, E, F: the
 * call bound, engine.c): the reply's transit and the server's scheduling. */
#define SD_TRANSIT_MARGIN_MS 100
/*
 * The take-up limit (issue 26): a request that has had no reply this long after it was posted is
 * withdrawn (its take-up word CASed from posted to withdrawn) and, if that wins, the call runs
 * here, client-driven, within what is left of its budget. A server answers an idle ring within
 * one nap (reception/sdserver.c: 200 us while busy, 10 ms after a second of silence) plus the
 * calls ahead of it in its pass, microseconds each; a request still unanswered later waits behind
 * a slow call (a write waiting up to W for room), or its server is stalled, starved or dead, and
 * the call is better run here than queued. A quarter of the expiration period, the time the
 * cluster is configured to give one step, keeps what such a home node costs a call to a fraction
 * of a step; at least SD_TAKEUP_MIN_MS, a scheduler tick (4 ms) and a little, which a runnable
 * server thread behind a hog on a busy core may wait, so a healthy server is not withdrawn from.
 * The same interval paces the probes of a shunned home node's heartbeat (sd_home_probe).
 */
#define SD_TAKEUP_PERIOD_DIV 4
#define SD_TAKEUP_MIN_MS 5
/* CASes of a take-up word (a withdrawal, or a server's take-up) whose completion was lost and
 * whose word, read back, shows they did not run: each costs a round trip; after these the
 * outcome counts as unknown (the fabric to that node is failing). Also the tries of a reply's
 * WRITE. */
#define SD_CTL_TRIES 3
/* The servers' heartbeat (layout.h, msg_hdr.sd_beat) is stored at most this often: several
 * server threads pass over the rings, and peers read the line. */
#define SD_BEAT_EVERY_NS 1000000ULL
/* sd_ship's answer beyond enum nessie_status: the call did not run at its home node and never
 * will (nothing was sent, or the request was withdrawn, or refused as expired): run it here. */
#define SD_RUN_HERE (-1)
/* How a requester waits: spin at least SD_WAIT_SPIN polls and SD_WAIT_SPIN_NS, then sleep in
 * steps of an eighth of the time waited, from SD_WAIT_SLEEP_MIN_US to SD_WAIT_SLEEP_MAX_US (a
 * futex wake-up would cost the server a system call per reply, and over verbs it has none to
 * make). The spin lasts about what a sleep costs, so waiting never costs much more than twice
 * what the better of the two would (the spin-then-block rule): on the session machine (a VM) a
 * nanosleep cost its thread about 30 us of CPU whatever its length (perf: 16.7k a second took a
 * quarter of two cores, in the kernel's timer code), and a wake-up 35-80 us
 * (../shared/notes/machine-limits.md). Sleeps of a microsecond or two after 256 polls (~10 us),
 * as before, made a shipped flash read of bench/flash.sh's uniform load pay several of them:
 * with these, its GET p99 fell from 1294-1491 to 1008 us and zipf-all's from 860-1196 to 696-795
 * (three alternated runs each, 3 nodes on 2 cores). */
#define SD_WAIT_SPIN 256
#define SD_WAIT_SPIN_NS 50000ULL
/* ... but past its first SD_WAIT_SPIN_ALWAYS polls (a microsecond or so: a spinning server's
 * reply is back by then), only while a CPU is to spare (nessie_cpu_spare): where more threads
 * are runnable than there are CPUs, the spinner keeps a CPU from the thread it waits for (the
 * home node's server or helper, queued behind it), and sleeping at once frees it. bench/flash.sh's
 * loads on 3 nodes / 2 cores, three alternated runs each: uniform GET p99 614-647 -> 520-549 us,
 * zipf-all 364-549 -> 315-348 us, zipf-one unchanged (231-283 -> 248-266 us). */
#define SD_WAIT_SPIN_ALWAYS 16
#define SD_WAIT_SLEEP_MIN_US 50
#define SD_WAIT_SLEEP_MAX_US 200
/* A requester with a helper context (nessie_ctx_set_sd_helper) looks for peers' GETs to serve
 * every SD_HELP_EVERY polls of its spin and before each of its sleeps, while at least
 * SD_HELP_MARGIN_NS of its own wait is left. On two cores running three nodes, the hop to a
 * napping server cost a shipped flash read most of its 130 us p50 (bench/flash.sh's uniform
 * load): the waiting workers of the other nodes are awake and can answer at once. */
#define SD_HELP_EVERY 16
#define SD_HELP_MARGIN_NS 2000000ULL

/* Mode auto (nessie.h): Cell's selector. Its moving averages weigh a new sample 1/8 (about the
 * last 20 calls count); a sample is capped at 8 times the average, so one call descheduled for
 * a long time does not flip the choice (Cell discards samples beyond 3 sigma), while a lasting
 * change still wins within a few calls.
 *
 * Exploration costs what the worse way costs, and here the ways differ by up to 40x (a cached
 * client-driven GET takes 1-2 us, a shipped one 50 us and more, a napping server's wake-up
 * included), so Cell's fixed 1 % would cost half the throughput (bench/modes.sh measured auto at
 * 0.2 of cd). Nor is the explored call all it costs: a shipped call wakes its home node's
 * napping SD server, which then polls in short naps for SD_QUIET_NS (reception/sdserver.c), and
 * on busy cores those wake-ups preempt the very client and worker being measured. Exploring at
 * random (1 call in 64 r, r the ratio of the averages) woke them twenty times a second: the
 * base scenario ran at 158-175k ops/s in auto against 181-187k with exploration by time alone
 * (cd: about 200k). So a call explores the worse way only once that way's average is older than
 * AUTO_STALE_MS x r, at most AUTO_STALE_MAX_MS: one call per period per average. A stale average
 * is replaced by the new sample instead of blended with it (Cell drops a history that has gone
 * quiet). A change of the way in use is followed by its own samples within tens of calls; the
 * other way's improvement is seen at its next exploration, within AUTO_STALE_MS x r: at r = 20
 * (a small GET here) two seconds, a rare call worth 20 times the usual one. (Issue 27: a cap of
 * one second kept the servers of two homes, four averages each, woken four times a second, and
 * auto at 0.45-0.85 of cd on a machine where the shipped ways never win.)
 *
 * A call's measurement costs two clock reads and two stores to a line every thread of the node
 * shares; one call in AUTO_SAMPLE is measured (and only such a call may explore), so an average
 * moves every eighth call: a lasting change still flips the choice within a few dozen calls. */
#define AUTO_SAMPLE 8
#define AUTO_SHIFT 3
#define AUTO_CAP 8
#define AUTO_STALE_MS 100
#define AUTO_STALE_MAX_MS 10000
/* The client-driven way is measured by a probe whenever it is not the way in use (explored
 * while calls are shipped, and its first measurement): AUTO_PROBE calls in a row, each measured,
 * cd's average then the least of them. A single call measured the shipped way's regime, not its
 * own: the home's SD server spinning after its last request and the requester's worker waiting
 * for replies hold the CPUs, and the explored call ran behind them (bench/modes.sh, mixed:
 * explorations of cd at 94-299 us against 1-16 us once it ran, which kept a node's GETs shipped
 * for 1.1 s at a tenth of cd's speed). And a fresh cluster's first calls are cold (its first
 * 64 KiB write took 2.4 ms client-driven against 238 us shipped, and that ratio kept the writes
 * shipped for the 3.4 s until cd's next exploration, all of mixed's run). By a probe's later
 * calls the servers have gone quiet and the memory is warm; its least time is the one least
 * delayed by others, the noise here being time added, never taken. A probe costs AUTO_PROBE
 * calls of cd per exploration (AUTO_PROBE x r of one call per AUTO_STALE_MS x r where cd really
 * is r times slower) and never wakes a server. Explorations of sd stay single calls: they are
 * the ones that wake a napping server, and their bias (a cold server) errs on the cheap side. */
#define AUTO_PROBE 8
/* Writes' averages are kept per size of value: small, up to 16 KiB, larger (the paper's
 * crossover between the ways lies between 8 and 16 KiB). A GET's size is unknown before it
 * runs, so GETs share one set per home node. */
#define AUTO_BUCKETS 3

/* 32 bytes: the three words a call that is not measured loads (ns, probe) share a cache line. */
struct sd_est {
    _Atomic uint64_t ns[2];    /* moving average of a call's time, [0] cd, [1] sd; 0: none yet */
    /* When it was last updated or explored: this node's clock in ms, cut to 32 bits (it wraps
     * every 49 days: compared only by difference). */
    _Atomic uint32_t at_ms[2];
    _Atomic uint32_t probe;    /* cd calls a probe still has to make (AUTO_PROBE) */
    _Atomic uint32_t probe_ns; /* the least time of its calls so far (saturated) */
};
_Static_assert(sizeof(struct sd_est) == 32, "two averages per cache line");

/* One requester slot's state, touched only by the thread holding the slot. */
struct sd_out {
    uint64_t seq;     /* the last request's seq (counts from 1 in this incarnation) */
    bool unanswered;  /* its reply never came: poison the slot before the next request */
};

/* One request slot's state on the home node, touched only by the thread that holds the slot
 * (held, slot_hold): the server worker the slot belongs to, or a helper (nessie_sd_help). One
 * holder at a time keeps the slot's requests in order and its replies from racing each other.
 * done_seq and done_inc are also read without holding the slot, as a hint of whether it holds
 * anything new (relaxed atomics); every decision is made again by the holder. */
struct sd_in {
    _Atomic bool held;
    uint32_t done_inc;      /* the last request served or dropped: (incarnation, seq) */
    uint64_t done_seq;
    uint64_t bad_seq;       /* a request that did not validate, and when it was first seen */
    uint32_t bad_inc;
    uint64_t bad_since;
    uint64_t seen_seq;      /* the last request seen arriving, and when (this node's clock): */
    uint32_t seen_inc;      /* its budget runs from then */
    uint64_t seen_ns;
};

/* What this node knows of one home node's servers, shared by all its requesters. */
struct sd_home {
    /* Shunned: a withdrawal won there, so no server was looking at its ring; calls to it run
     * here until its heartbeat moves away from `beat`, the value it showed then. probe_ns: when
     * it was shunned or last probed (this node's clock). */
    _Atomic bool shunned;
    _Atomic uint64_t beat;
    _Atomic uint64_t probe_ns;
};

struct sd_state {
    uint32_t nodes, slots;
    /* This life of the node's requester side: random, never 0, drawn at every open. Not the
     * data header's incarnation: regions can be removed and made again independently (an
     * operator, `nessie-cluster stop --purge` of an older version), and a counter that starts
     * over while a peer's ring still holds the old count made every new request look like a
     * replay of an old one (bench/modes.sh hung so). A peer takes a request of a life other than
     * the last one it served as new; within a life, counts only grow. */
    uint32_t life;
    uint64_t slot_bytes;
    unsigned char *msg;         /* this node's MSG region */
    /* Per home node, which of this node's slots in its ring are free (bit s). */
    _Atomic uint64_t *free;
    struct sd_out *out;         /* [home * slots + s] */
    struct sd_in *in;           /* [requester * slots + s] */
    /* Mode auto's averages, [(home * 2 + write) * AUTO_BUCKETS + bucket]; shared by every
     * context of the node (relaxed: a lost update loses one sample). */
    struct sd_est *est;
    struct sd_home *home;       /* [home] */
    _Atomic uint64_t drop_logged_ns; /* rate limit of the garbage warning */
    /* GETs the helpers answered (nessie_sd_helped): the servers count them in the stream of
     * requests that keeps their naps short, so that when the helpers stop (their clients went
     * quiet) the requests still coming are not left to a server in its long naps. */
    _Atomic uint64_t helped;
};

static uint64_t req_off(const struct sd_state *st, uint32_t requester, uint32_t s)
{
    return MSG_HDR_BYTES + ((uint64_t)requester * st->slots + s) * st->slot_bytes;
}

static uint64_t rep_off(const struct sd_state *st, uint32_t home, uint32_t s)
{
    return MSG_HDR_BYTES + ((uint64_t)st->nodes * st->slots + (uint64_t)home * st->slots + s) *
                               st->slot_bytes;
}

/* Bytes of payload a slot holds. */
static uint64_t slot_payload(const struct sd_state *st) { return st->slot_bytes - 64 - 8; }

int sd_open(struct nessie_node *nd)
{
    struct sd_state *st = calloc(1, sizeof(*st));
    if (!st)
        return NESSIE_NO_MEMORY;
    st->nodes = nd->cfg.node_ids;
    st->slots = nd->cfg.sd_slots;
    st->slot_bytes = msg_slot_bytes(nd->cfg.max_item_size);
    st->msg = fab_local_base(nd->fab, FAB_REGION_MSG);
    while (st->life == 0) {
        if (getrandom(&st->life, sizeof(st->life), 0) != (ssize_t)sizeof(st->life)) {
            uint64_t x = nessie_mono_ns() ^ nessie_real_ns() ^ ((uint64_t)getpid() << 32);
            st->life = (uint32_t)hash_xorshift(&x);
        }
    }
    st->free = calloc(st->nodes, sizeof(*st->free));
    st->out = calloc((size_t)st->nodes * st->slots, sizeof(*st->out));
    st->in = calloc((size_t)st->nodes * st->slots, sizeof(*st->in));
    st->est = calloc((size_t)st->nodes * 2 * AUTO_BUCKETS, sizeof(*st->est));
    st->home = calloc(st->nodes, sizeof(*st->home));
    nd->sd = st;
    if (!st->free || !st->out || !st->in || !st->est || !st->home)
        return NESSIE_NO_MEMORY; /* the caller closes the node, and sd_close frees these */
    uint64_t all = st->slots == 64 ? UINT64_MAX : (1ULL << st->slots) - 1;
    for (uint32_t h = 0; h < st->nodes; h++)
        atomic_init(&st->free[h], all);
    /* No server of this life sleeps on the bell yet; one of an earlier life that was killed
     * asleep left itself counted, and peers would ring for nobody. */
    _Static_assert(sizeof(((struct msg_hdr *)0)->sd_bell) == sizeof(struct fab_bell),
                   "msg_hdr.sd_bell is a fab_bell");
    __atomic_store_n(&((struct fab_bell *)(st->msg + MSG_HDR_OFF_BELL))->sleepers, 0,
                     __ATOMIC_RELAXED);
    /* Whatever the ring holds now was sent to an earlier life of this node: served. */
    for (uint32_t r = 0; r < st->nodes; r++)
        for (uint32_t s = 0; s < st->slots; s++) {
            const struct sd_req *q = (const void *)(st->msg + req_off(st, r, s));
            struct sd_in *in = &st->in[r * st->slots + s];
            in->done_seq = __atomic_load_n(&q->seq, __ATOMIC_ACQUIRE);
            in->done_inc = __atomic_load_n(&q->incarnation, __ATOMIC_RELAXED);
        }
    return NESSIE_OK;
}

void sd_close(struct nessie_node *nd)
{
    struct sd_state *st = nd->sd;
    if (!st)
        return;
    free(st->free);
    free(st->out);
    free(st->in);
    free(st->est);
    free(st->home);
    free(st);
    nd->sd = NULL;
}

static int sd_exec(struct nessie_ctx *ctx, const struct fab_wr *wr);

/* The take-up limit (SD_TAKEUP_PERIOD_DIV), in ns. */
static uint64_t sd_takeup_ns(const struct nessie_node *nd)
{
    uint64_t t = nd->bound.period_ns / SD_TAKEUP_PERIOD_DIV;
    return t > SD_TAKEUP_MIN_MS * 1000000ULL ? t : SD_TAKEUP_MIN_MS * 1000000ULL;
}

/* Read home's server heartbeat (layout.h, msg_hdr.sd_beat) into *beat. Returns a fabric status. */
static int sd_beat_read(struct nessie_ctx *ctx, uint32_t home, uint64_t *beat)
{
    struct fab_wr wr = {.opcode = FAB_OP_READ, .node = home, .region = FAB_REGION_MSG,
                        .offset = MSG_HDR_OFF_BEAT, .local = beat, .length = 8};
    return sd_exec(ctx, &wr);
}

/* A withdrawal from home won: no server was looking at its ring. Calls to it run here until its
 * heartbeat moves (sd_home_probe). A heartbeat that cannot be read shuns nothing: the calls that
 * need that node meet the fabric's own answer. */
static void sd_home_shun(struct nessie_ctx *ctx, uint32_t home)
{
    struct sd_home *h = &ctx->node->sd->home[home];
    uint64_t beat;
    if (sd_beat_read(ctx, home, &beat) != FAB_OK)
        return;
    atomic_store_explicit(&h->beat, beat, memory_order_relaxed);
    atomic_store_explicit(&h->probe_ns, nessie_mono_ns(), memory_order_relaxed);
    atomic_store_explicit(&h->shunned, true, memory_order_release);
}

/* Whether calls may be shipped to home: it is not shunned, or one take-up limit has passed since
 * it was last looked at and its heartbeat has moved since it was shunned (one thread at a time
 * probes, by CAS on probe_ns; the others run their calls here meanwhile). */
static bool sd_home_open(struct nessie_ctx *ctx, uint32_t home)
{
    struct nessie_node *nd = ctx->node;
    struct sd_home *h = &nd->sd->home[home];
    if (!atomic_load_explicit(&h->shunned, memory_order_acquire))
        return true;
    uint64_t now = nessie_mono_ns(), at = atomic_load_explicit(&h->probe_ns, memory_order_relaxed);
    uint64_t beat;
    if (now - at < sd_takeup_ns(nd) ||
        !atomic_compare_exchange_strong_explicit(&h->probe_ns, &at, now, memory_order_relaxed,
                                                 memory_order_relaxed) ||
        sd_beat_read(ctx, home, &beat) != FAB_OK ||
        beat == atomic_load_explicit(&h->beat, memory_order_relaxed))
        return false;
    atomic_store_explicit(&h->shunned, false, memory_order_relaxed);
    return true;
}

void nessie_ctx_set_mode(struct nessie_ctx *ctx, enum nessie_mode mode)
{
    if ((unsigned)mode <= NESSIE_MODE_AUTO)
        ctx->mode = mode;
}

enum nessie_mode nessie_ctx_mode(const struct nessie_ctx *ctx) { return ctx->mode; }

static const char *const mode_names[] = {
    [NESSIE_MODE_CD] = "cd", [NESSIE_MODE_SD] = "sd", [NESSIE_MODE_HY] = "hy",
    [NESSIE_MODE_AUTO] = "auto"};

const char *nessie_mode_name(enum nessie_mode mode)
{
    return (unsigned)mode <= NESSIE_MODE_AUTO ? mode_names[mode] : "unknown";
}

bool nessie_mode_parse(const char *s, enum nessie_mode *out)
{
    for (unsigned m = 0; s && m <= NESSIE_MODE_AUTO; m++)
        if (strcmp(s, mode_names[m]) == 0) {
            *out = (enum nessie_mode)m;
            return true;
        }
    return false;
}

bool sd_can_ship_to(struct nessie_ctx *ctx, uint32_t to, size_t payload_len)
{
    struct nessie_node *nd = ctx->node;
    /* The home node runs its own keys' operations the way a server would: here, locally. */
    if (to == nd->cfg.self || payload_len > slot_payload(nd->sd))
        return false;
    if (!sd_home_open(ctx, to)) {
        CTR_ADD(ctx->ctr.sd_shunned, 1);
        return false; /* no server there is looking at its ring: run it here at once */
    }
    return true;
}

bool sd_can_ship_flash(struct nessie_ctx *ctx, uint32_t to, size_t payload_len)
{
    struct nessie_node *nd = ctx->node;
    /* A shunned home is tried all the same: nobody else can read its flash items, and a slow
     * server is better than an eviction (a withdrawal costs a take-up limit). */
    return to != nd->cfg.self && to < nd->cfg.node_ids && payload_len <= slot_payload(nd->sd) &&
           !mship_unreachable(&nd->view, to);
}

bool sd_home_shunned(struct nessie_ctx *ctx, uint32_t home)
{
    return home < ctx->node->cfg.node_ids && !sd_home_open(ctx, home);
}

bool sd_can_ship(struct nessie_ctx *ctx, const struct key_plan *kp, size_t value_len)
{
    return sd_can_ship_to(ctx, kp->home, kp->klen + value_len);
}

enum nessie_mode sd_auto_choose(struct nessie_ctx *ctx, bool write, const struct key_plan *kp,
                                size_t value_len, struct sd_choice *ch)
{
    struct nessie_node *nd = ctx->node;
    struct sd_state *st = nd->sd;
    ch->est = NULL;
    uint32_t home = kp->home;
    if (home == nd->cfg.self || kp->klen + value_len > slot_payload(st) ||
        !sd_home_open(ctx, home))
        return NESSIE_MODE_CD; /* nothing to choose (or its servers look dead): nothing to learn */
    uint32_t bucket = !write ? 0 : value_len <= 1024 ? 0 : value_len <= 16384 ? 1 : 2;
    struct sd_est *e = &st->est[((size_t)home * 2 + write) * AUTO_BUCKETS + bucket];
    uint64_t cd = atomic_load_explicit(&e->ns[0], memory_order_relaxed);
    uint64_t sd = atomic_load_explicit(&e->ns[1], memory_order_relaxed);
    int best = sd < cd ? 1 : 0, way = best;
    ch->fresh = false;
    ch->probe = false;
    /* A probe of cd under way: this call is one of its calls, measured. */
    uint32_t pr = atomic_load_explicit(&e->probe, memory_order_relaxed);
    if (pr > 0) {
        while (pr > 0 && !atomic_compare_exchange_weak_explicit(&e->probe, &pr, pr - 1,
                                                                memory_order_relaxed,
                                                                memory_order_relaxed))
            ;
        if (pr > 0) {
            ch->probe = true;
            ch->probe_last = pr == 1;
            ch->est = e;
            ch->way = 0;
            ch->t0 = nessie_mono_ns();
            CTR_ADD(ctx->ctr.sd_auto[0], 1);
            return NESSIE_MODE_CD;
        }
    }
    /* One call in AUTO_SAMPLE is measured, and only a measured one may explore; the others
     * follow the averages for three loads, with no clock read and no store. */
    bool sample = (ctx->auto_seq++ & (AUTO_SAMPLE - 1)) == 0;
    bool probe = false;
    if (cd == 0 || sd == 0) {
        way = cd == 0 ? 0 : 1; /* a way never measured is tried first */
        probe = way == 0;      /* ... cd by a probe: a fresh node's first calls are cold */
    } else if (!sample) {
        CTR_ADD(ctx->ctr.sd_auto[way], 1);
        return way ? NESSIE_MODE_SD : NESSIE_MODE_CD;
    } else {
        /* Explore the other way now and then, and when its average has gone stale; the
         * timestamp is claimed by CAS, so one call per period explores, not every thread. */
        uint64_t r = (best ? cd : sd) / (best ? sd : cd);
        r = r < 1 ? 1 : r > 1024 ? 1024 : r;
        uint64_t stale = AUTO_STALE_MS * r < AUTO_STALE_MAX_MS ? AUTO_STALE_MS * r : AUTO_STALE_MAX_MS;
        uint32_t now = (uint32_t)(nessie_mono_ns() / 1000000ULL);
        uint32_t at = atomic_load_explicit(&e->at_ms[!best], memory_order_relaxed);
        if ((uint32_t)(now - at) >= stale &&
            atomic_compare_exchange_strong_explicit(&e->at_ms[!best], &at, now,
                                                    memory_order_relaxed, memory_order_relaxed)) {
            way = !best;
            ch->fresh = way == 1;
            probe = way == 0; /* cd explored while calls are shipped */
        }
    }
    if (probe) {
        /* A probe of cd begins: this call its first. */
        atomic_store_explicit(&e->probe_ns, UINT32_MAX, memory_order_relaxed);
        atomic_store_explicit(&e->probe, AUTO_PROBE - 1, memory_order_relaxed);
        ch->probe = true;
        ch->probe_last = false;
    }
    ch->est = e;
    ch->way = way;
    ch->t0 = nessie_mono_ns();
    CTR_ADD(ctx->ctr.sd_auto[way], 1);
    return way ? NESSIE_MODE_SD : NESSIE_MODE_CD;
}

void sd_auto_learn(struct nessie_ctx *ctx, const struct sd_choice *ch)
{
    (void)ctx;
    if (!ch->est)
        return;
    uint64_t end = nessie_mono_ns(), s = end - ch->t0;
    if (s == 0)
        s = 1;
    if (ch->probe) {
        /* Relaxed: two calls of one probe racing may lose a time, not the probe. */
        uint32_t m = atomic_load_explicit(&ch->est->probe_ns, memory_order_relaxed);
        if (s < m)
            atomic_store_explicit(&ch->est->probe_ns, m = (uint32_t)s, memory_order_relaxed);
        if (!ch->probe_last)
            return;
        atomic_store_explicit(&ch->est->ns[0], m, memory_order_relaxed);
        atomic_store_explicit(&ch->est->at_ms[0], (uint32_t)(end / 1000000ULL),
                              memory_order_relaxed);
        return;
    }
    _Atomic uint64_t *avg = &ch->est->ns[ch->way];
    uint64_t a = ch->fresh ? 0 : atomic_load_explicit(avg, memory_order_relaxed);
    if (a && s > a * AUTO_CAP)
        s = a * AUTO_CAP;
    uint64_t next = a ? a - (a >> AUTO_SHIFT) + (s >> AUTO_SHIFT) : s;
    atomic_store_explicit(avg, next ? next : 1, memory_order_relaxed);
    atomic_store_explicit(&ch->est->at_ms[ch->way], (uint32_t)(end / 1000000ULL),
                          memory_order_relaxed);
}

/* Ensure ctx's message buffers exist (a slot each). Returns false on out of memory. */
static bool sd_bufs(struct nessie_ctx *ctx)
{
    size_t n = ctx->node->sd->slot_bytes;
    for (int b = 0; b < 2; b++)
        if (!ctx->sd_buf[b] && !(ctx->sd_buf[b] = malloc(n)))
            return false;
    return true;
}

/* The CRC-32 (gzip's, reflected) of a message (a request if `request`, else a reply): its 64-byte
 * header with the crc word as zero, then len bytes of payload. ISA-L's, with carry-less multiply:
 * 37 GB/s here against zlib's 3.9 (3.6 us for a 128 KiB value instead of 33, twice per shipped
 * call, which made large shipped PUTs a fifth slower than the server-driven design costs). */
_Static_assert(offsetof(struct sd_req, crc) == offsetof(struct sd_rep, crc), "one crc word");
static uint32_t msg_crc(const unsigned char *msg, bool request, uint64_t len)
{
    unsigned char h[64];
    memcpy(h, msg, 64);
    memset(h + offsetof(struct sd_req, crc), 0, 4);
    /* A request's take-up word changes after it was written (layout.h): not part of it. */
    if (request)
        memset(h + SD_REQ_OFF_CTL, 0, 8);
    /* Seeded with the wire version: a peer of another version sees every message torn. */
    uint32_t c = crc32_gzip_refl(MSG_WIRE_VERSION, h, 64);
    return crc32_gzip_refl(c, msg + 64, len);
}

/* Post one request on ctx's endpoint and wait for its completion. Returns its fabric status. */
static int sd_exec(struct nessie_ctx *ctx, const struct fab_wr *wr)
{
    int rc = fab_post(ctx->ep, wr, 1);
    if (rc != FAB_OK)
        return rc;
    for (;;) {
        struct fab_wc wc;
        if (fab_poll(ctx->ep, &wc, 1) == 1)
            return wc.status;
    }
}

/* One step of a requester's wait, the n-th since it began at t0: a few microseconds of pause,
 * then sleeps of an eighth of the time waited so far (never sched_yield in a loop: on busy
 * cores it hands the core to whatever hog is runnable, DESIGN.md "Busy CPUs"). */
static bool wait_spinning(unsigned n, uint64_t waited)
{
    return (n < SD_WAIT_SPIN || waited < SD_WAIT_SPIN_NS) &&
           (n < SD_WAIT_SPIN_ALWAYS || nessie_cpu_spare());
}

/* now: the caller's clock read of this step. */
static void wait_step(unsigned n, uint64_t t0, uint64_t now)
{
    uint64_t waited = now - t0;
    if (wait_spinning(n, waited)) {
        __builtin_ia32_pause();
        return;
    }
    uint64_t us = waited / 1000 / 8;
    if (us < SD_WAIT_SLEEP_MIN_US)
        us = SD_WAIT_SLEEP_MIN_US;
    if (us > SD_WAIT_SLEEP_MAX_US)
        us = SD_WAIT_SLEEP_MAX_US;
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

/* Take a free slot of this node's ring at home, waiting for one until deadline. Returns the
 * slot, or -1. */
static int slot_take(struct sd_state *st, uint32_t home, uint64_t deadline)
{
    uint64_t t0 = nessie_mono_ns();
    for (unsigned spins = 0;; spins++) {
        uint64_t m = atomic_load_explicit(&st->free[home], memory_order_relaxed);
        while (m) {
            int s = __builtin_ctzll(m);
            /* acquire: the slot's sd_out as its last holder left it */
            if (atomic_compare_exchange_weak_explicit(&st->free[home], &m, m & ~(1ULL << s),
                                                      memory_order_acquire,
                                                      memory_order_relaxed))
                return s;
        }
        uint64_t now = nessie_mono_ns();
        if (now >= deadline)
            return -1;
        /* Another thread of this node holds every slot for the length of a shipped call. */
        wait_step(spins, t0, now);
    }
}

static void slot_give(struct sd_state *st, uint32_t home, int s)
{
    /* release: the next holder sees this one's sd_out */
    atomic_fetch_or_explicit(&st->free[home], 1ULL << s, memory_order_release);
}

/* Wait until `until` (this node's clock) for the reply to request (inc, seq) in this node's
 * reply slot s from home; t0: when the wait began (it paces wait_step). Returns true with the
 * reply, whole and checked, in ctx->sd_buf[1] (its bytes added to *bytes). */
static bool sd_reply_wait(struct nessie_ctx *ctx, uint32_t home, uint32_t s, uint32_t inc,
                          uint64_t seq, uint64_t until, uint64_t t0, uint64_t *bytes)
{
    struct nessie_node *nd = ctx->node;
    struct sd_state *st = nd->sd;
    unsigned char *rep = ctx->sd_buf[1];
    uint64_t off = rep_off(st, home, s);
    /* The home node's WRITE lands in this node's own region, its bytes in any order. */
    const struct sd_rep *live = (const struct sd_rep *)(st->msg + off);
    for (unsigned n = 0;; n++) {
        if (__atomic_load_n(&live->seq, __ATOMIC_ACQUIRE) == seq &&
            __atomic_load_n(&live->incarnation, __ATOMIC_RELAXED) == inc) {
            struct sd_rep *h = (struct sd_rep *)rep;
            fab_local_read(nd->fab, FAB_REGION_MSG, off, rep, 64);
            uint64_t rt = msg_round8(64 + (uint64_t)h->value_len);
            uint64_t trailer = 0;
            if (h->seq == seq && h->value_len <= slot_payload(st) &&
                fab_local_read(nd->fab, FAB_REGION_MSG, off + 64, rep + 64,
                               (uint32_t)(rt + 8 - 64)) == FAB_OK) {
                memcpy(&trailer, rep + rt, 8);
                if (trailer == seq && h->crc == msg_crc(rep, false, h->value_len)) {
                    *bytes += rt + 8;
                    return true;
                }
            }
            /* Still landing (or torn): look again. */
        }
        uint64_t now = nessie_mono_ns();
        if (now >= until)
            return false;
        /* Meanwhile serve a peer's shipped GET (nessie_ctx_set_sd_helper): this thread is
         * awake anyway, and a request it answers now does not wait out its server's nap. Not
         * on every pause (a look at the rings costs a load per slot), and not when this call's
         * own wait is nearly over (one GET, a flash read included, takes well under that). */
        if (ctx->sd_helper && (n % SD_HELP_EVERY == 0 || !wait_spinning(n, now - t0)) &&
            until - now > SD_HELP_MARGIN_NS && nessie_sd_help(ctx->sd_helper))
            continue;
        wait_step(n, t0, now);
    }
}

/* How a withdrawal ended (sd_withdraw). */
enum sd_wd {
    SD_WD_WON,     /* withdrawn: no server runs the request, ever */
    SD_WD_TAKEN,   /* a server took it up first: its reply is coming */
    SD_WD_ABSENT,  /* the word names another request: this one never landed */
    SD_WD_UNKNOWN, /* neither the CAS nor a READ of the word completed */
};

/* Withdraw request (inc, seq) from this node's slot s of home's ring: CAS its take-up word from
 * posted to withdrawn. A CAS whose completion was lost is resolved by reading the word back (as
 * proto_ite_cas_resolve does): withdrawn (by this CAS), taken, or still posted (the CAS did not
 * run: again, SD_CTL_TRIES times in all). *ops counts the requests posted. */
static enum sd_wd sd_withdraw(struct nessie_ctx *ctx, uint32_t home, uint32_t s, uint32_t inc,
                              uint64_t seq, uint64_t *ops)
{
    struct sd_state *st = ctx->node->sd;
    const uint64_t posted = sd_ctl(SD_CTL_POSTED, inc, seq), gone = sd_ctl(SD_CTL_WITHDRAWN, inc, seq);
    const uint64_t taken = sd_ctl(SD_CTL_TAKEN, inc, seq);
    uint64_t off = req_off(st, ctx->node->cfg.self, s) + SD_REQ_OFF_CTL;
    for (int i = 0; i < SD_CTL_TRIES; i++) {
        uint64_t old = 0;
        struct fab_wr cas = {.opcode = FAB_OP_CAS, .node = home, .region = FAB_REGION_MSG,
                             .offset = off, .local = &old, .length = 8, .compare = posted,
                             .swap = gone};
        (*ops)++;
        if (sd_exec(ctx, &cas) != FAB_OK) {
            struct fab_wr rd = {.opcode = FAB_OP_READ, .node = home, .region = FAB_REGION_MSG,
                                .offset = off, .local = &old, .length = 8};
            (*ops)++;
            if (sd_exec(ctx, &rd) != FAB_OK)
                return SD_WD_UNKNOWN;
            if (old == posted)
                continue; /* the CAS did not run */
        }
        if (old == posted || old == gone)
            return SD_WD_WON;
        return old == taken ? SD_WD_TAKEN : SD_WD_ABSENT;
    }
    return SD_WD_UNKNOWN;
}

/*
 * Ship the request in ctx->sd_buf[0] (header filled but for seq, incarnation, version, budget,
 * take-up word and crc; payload of plen bytes after it) to home and wait for its reply, which is
 * left in ctx->sd_buf[1]. t0: the call's start (its budget runs from there). Returns NESSIE_OK (a
 * valid reply), NESSIE_TIMEOUT (the request may have run or may still run; no reply came in
 * time), or SD_RUN_HERE: it has not run at home and never will (nothing was sent, it was
 * withdrawn, or its server refused it as expired), so the caller runs it itself.
 *
 * A request no server has answered within the take-up limit is withdrawn (sd_withdraw). If a
 * server took it up first, the server took it up before the withdrawal's CAS, so it first saw it
 * before then and runs it within the budget the request carried from that moment (plus W for a
 * write that waits for room, E, F): a write's requester waits that long for the reply, counted
 * from the CAS's completion, and then says TIMEOUT; a GET's waits one more take-up limit and then
 * runs here (SD_RUN_HERE), as a GET whose withdrawal's outcome is unknown does.
 */
static int sd_ship(struct nessie_ctx *ctx, uint32_t home, uint64_t plen, bool write, uint64_t t0)
{
    struct nessie_node *nd = ctx->node;
    struct sd_state *st = nd->sd;
    const struct nessie_bound *b = &nd->bound;
    uint64_t takeup = sd_takeup_ns(nd), budget_end = t0 + b->budget_ns;
    /* Every slot held for longer than the take-up limit: the calls ahead wait at a slow home. */
    int s = slot_take(st, home, t0 + takeup);
    if (s < 0)
        return SD_RUN_HERE;
    struct sd_out *out = &st->out[home * st->slots + (uint32_t)s];
    uint64_t fab_ops = 0, fab_bytes = 0;
    int status;

    if (out->unanswered) {
        /* A request whose landing is unknown may still be landing: zero its header, and wait
         * for that WRITE, so a server copying it sees the change before any byte of the next
         * request lands. */
        uint64_t zero[2] = {0, 0};
        struct fab_wr wr = {.opcode = FAB_OP_WRITE, .node = home, .region = FAB_REGION_MSG,
                            .offset = req_off(st, nd->cfg.self, (uint32_t)s), .local = zero,
                            .length = sizeof(zero)};
        fab_ops++;
        fab_bytes += sizeof(zero);
        if (sd_exec(ctx, &wr) != FAB_OK) {
            status = SD_RUN_HERE; /* nothing of this call was sent */
            goto out;
        }
        out->unanswered = false;
    }

    uint64_t now = nessie_mono_ns();
    if (now >= budget_end) {
        status = SD_RUN_HERE; /* nothing sent; sd_here finds the budget spent */
        goto out;
    }
    uint64_t left_us = (budget_end - now) / 1000;
    unsigned char *msg = ctx->sd_buf[0];
    struct sd_req *rq = (struct sd_req *)msg;
    const uint64_t seq = ++out->seq;
    const uint32_t inc = st->life;
    rq->seq = seq;
    rq->incarnation = inc;
    rq->version = MSG_WIRE_VERSION;
    rq->budget_us = left_us == 0 ? 1 : left_us > UINT32_MAX ? UINT32_MAX : (uint32_t)left_us;
    rq->ctl = sd_ctl(SD_CTL_POSTED, inc, seq);
    rq->crc = 0;
    uint64_t tr = msg_round8(64 + plen);
    memset(msg + 64 + plen, 0, tr - 64 - plen);
    memcpy(msg + tr, &rq->seq, 8);
    rq->crc = msg_crc(msg, true, plen);
    /* The longest a server that takes it up may still be running it, counted from then. */
    uint64_t run_ns = (uint64_t)rq->budget_us * 1000 + (write ? b->memory_wait_ns : 0) +
                      b->period_ns + b->fabric_ns + SD_TRANSIT_MARGIN_MS * 1000000ULL;
    struct fab_wr wr = {.opcode = FAB_OP_WRITE, .node = home, .region = FAB_REGION_MSG,
                        .offset = req_off(st, nd->cfg.self, (uint32_t)s), .local = msg,
                        .length = (uint32_t)(tr + 8)};
    fab_ops++;
    fab_bytes += tr + 8;
    bool sent = sd_exec(ctx, &wr) == FAB_OK;
    if (sent) /* it landed: a server asleep on the home node's bell wakes for it */
        fab_bell_ring(nd->fab, home, FAB_REGION_MSG, MSG_HDR_OFF_BELL);
    uint64_t posted = nessie_mono_ns();
    if (sent && sd_reply_wait(ctx, home, (uint32_t)s, inc, seq, posted + takeup, posted, &fab_bytes))
        goto replied;

    /* No reply within the take-up limit, or a WRITE whose completion failed (it may have
     * landed: a lost completion): take the request back if no server has taken it up. */
    switch (sd_withdraw(ctx, home, (uint32_t)s, inc, seq, &fab_ops)) {
    case SD_WD_WON:
        CTR_ADD(ctx->ctr.sd_withdrawn, 1);
        if (sent)
            sd_home_shun(ctx, home); /* nobody looked at the ring for a take-up limit */
        status = SD_RUN_HERE;
        goto out;
    case SD_WD_TAKEN:
        if (!write) {
            /* A GET changes nothing, so its caller need not wait out the server's bound: one
             * more take-up limit for the reply (the server took it up, so it is running it), and
             * then it runs here. The late reply names this seq, and the slot's next request
             * (seq + 1) is served only after it, so it is never read as another call's. */
            if (sd_reply_wait(ctx, home, (uint32_t)s, inc, seq, nessie_mono_ns() + takeup, posted,
                              &fab_bytes))
                goto replied;
            CTR_ADD(ctx->ctr.sd_no_reply, 1);
            status = SD_RUN_HERE;
            goto out;
        }
        break;
    case SD_WD_ABSENT:
        if (!sent && b->fabric_ns == 0) {
            status = SD_RUN_HERE; /* a failed WRITE on shm never lands later */
            goto out;
        }
        /* On verbs a failed WRITE may still land (within F), and a completed one that is not
         * there was overwritten by garbage: either may yet be run, as an unknown one may. */
        __attribute__((fallthrough));
    case SD_WD_UNKNOWN:
    default:
        out->unanswered = true;
        if (!write) {
            status = SD_RUN_HERE; /* a GET changes nothing: running it here too is harmless */
            goto out;
        }
        break;
    }
    if (!sd_reply_wait(ctx, home, (uint32_t)s, inc, seq, nessie_mono_ns() + run_ns, posted,
                       &fab_bytes)) {
        out->unanswered = true;
        CTR_ADD(ctx->ctr.sd_no_reply, 1);
        status = NESSIE_TIMEOUT;
        goto out;
    }
replied:
    out->unanswered = false;
    fab_ops++; /* the reply's WRITE is this call's traffic too */
    status = ((const struct sd_rep *)ctx->sd_buf[1])->status == SD_STATUS_EXPIRED ? SD_RUN_HERE
                                                                                 : NESSIE_OK;
out:
    slot_give(st, home, s);
    CTR_ADD(OPC(ctx).writes, fab_ops);
    CTR_ADD(OPC(ctx).bytes_written, fab_bytes);
    /* A call run here after all is charged to the histograms once, by its own run. */
    if (status != SD_RUN_HERE)
        nessie_count_traffic(ctx, fab_ops, fab_bytes);
    return status;
}

/* The call's bookkeeping on the requesting node: one call of ctx->kind, shipped (its ops and
 * attempts are counted when it ends shipped, sd_done: a call run here counts its own). */
static void sd_count(struct nessie_ctx *ctx, enum nessie_opkind kind)
{
    ctx->kind = kind;
    CTR_ADD(ctx->ctr.sd_shipped[kind], 1);
}

static int sd_done(struct nessie_ctx *ctx, int rc)
{
    CTR_ADD(OPC(ctx).ops, 1);
    CTR_ADD(OPC(ctx).attempts, 1);
    CTR_ADD(OPC(ctx).outcomes[rc], 1);
    return rc;
}

/* The call started at t0 is to run here, client-driven, after all: its budget still runs from
 * t0 (the call bound holds from the call's start), so the next proto_op_init on ctx gets that
 * end. Returns false if the budget is spent already: the call then ends NESSIE_TIMEOUT, having
 * had no effect anywhere. */
static bool sd_here(struct nessie_ctx *ctx, uint64_t t0)
{
    uint64_t end = t0 + ctx->node->bound.budget_ns;
    if (nessie_mono_ns() >= end)
        return false;
    ctx->call_deadline_ns = end;
    return true;
}

int sd_get(struct nessie_ctx *ctx, uint32_t to, const struct key_plan *kp, void *buf, size_t cap,
           struct nessie_item *out)
{
    uint64_t t0 = nessie_mono_ns();
    if (!sd_bufs(ctx))
        return -1; /* out of memory here: run it client-driven */
    sd_count(ctx, NESSIE_OPK_GET);
    struct sd_req *rq = (struct sd_req *)ctx->sd_buf[0];
    memset(rq, 0, sizeof(*rq));
    rq->op = SD_OP_GET;
    rq->key_len = (uint8_t)kp->klen;
    memcpy(ctx->sd_buf[0] + 64, kp->key, kp->klen);
    int rc = sd_ship(ctx, to, kp->klen, false, t0);
    if (rc == NESSIE_OK && ((const struct sd_rep *)ctx->sd_buf[1])->status == SD_STATUS_TOO_LARGE)
        rc = SD_RUN_HERE;
    if (rc == SD_RUN_HERE) {
        if (sd_here(ctx, t0))
            return -1;
        rc = NESSIE_TIMEOUT;
    } else if (rc == NESSIE_OK) {
        const struct sd_rep *rp = (const struct sd_rep *)ctx->sd_buf[1];
        rc = rp->status < NESSIE_STATUS_COUNT ? (int)rp->status : NESSIE_FABRIC_ERROR;
        if (rc == NESSIE_OK) {
            const unsigned char *v = ctx->sd_buf[1] + 64;
            if (buf && rp->value_len <= cap) {
                memcpy(buf, v, rp->value_len);
                v = buf;
            }
            *out = (struct nessie_item){.value = v, .value_len = rp->value_len,
                                        .flags = rp->flags, .exptime = rp->exptime,
                                        .version = rp->version, .access = rp->access,
                                        .meta = rp->meta};
        }
    }
    return sd_done(ctx, rc);
}

int sd_write(struct nessie_ctx *ctx, uint32_t to, const struct key_plan *kp,
             const struct sd_req *rq, const void *value, uint64_t *version_out,
             uint64_t *num_out)
{
    uint64_t t0 = nessie_mono_ns();
    enum nessie_opkind kind = rq->op == SD_OP_DELETE && !(rq->sub & SD_SUB_INVALIDATE)
                                    ? NESSIE_OPK_DELETE
                                    : NESSIE_OPK_PUT /* an invalidation writes the item */;
    if (!sd_bufs(ctx))
        return NESSIE_NO_MEMORY; /* nothing sent, nothing changed */
    sd_count(ctx, kind);
    unsigned char *msg = ctx->sd_buf[0];
    memcpy(msg, rq, 64);
    struct sd_req *q = (struct sd_req *)msg;
    q->key_len = (uint8_t)kp->klen;
    memcpy(msg + 64, kp->key, q->key_len);
    if (q->value_len)
        memcpy(msg + 64 + q->key_len, value, q->value_len);
    int rc = sd_ship(ctx, to, (uint64_t)q->key_len + q->value_len, true, t0);
    if (rc == SD_RUN_HERE) {
        if (sd_here(ctx, t0))
            return -1; /* the caller runs it here, within what is left of its budget */
        rc = NESSIE_TIMEOUT; /* no effect, but the budget is gone */
    } else if (rc == NESSIE_OK) {
        const struct sd_rep *rp = (const struct sd_rep *)ctx->sd_buf[1];
        rc = rp->status < NESSIE_STATUS_COUNT ? (int)rp->status : NESSIE_TIMEOUT;
        if (rc == NESSIE_OK) {
            if (version_out)
                *version_out = rp->version;
            if (num_out)
                *num_out = rp->num;
        }
    }
    return sd_done(ctx, rc);
}

/* --- the home node's side ---------------------------------------------------------------------- */

/* Copy the request in slot (r, s), whose header word reads (inc, seq), into ctx->sd_buf[0] and
 * check it whole. Returns true if it is a well-formed request that arrived intact. */
static bool req_take(struct nessie_ctx *ctx, uint32_t r, uint32_t s, uint32_t inc, uint64_t seq)
{
    struct nessie_node *nd = ctx->node;
    struct sd_state *st = nd->sd;
    unsigned char *msg = ctx->sd_buf[0];
    const struct sd_req *q = (const struct sd_req *)msg;
    uint64_t off = req_off(st, r, s);
    if (fab_local_read(nd->fab, FAB_REGION_MSG, off, msg, 64) != FAB_OK)
        return false;
    uint64_t plen = (uint64_t)q->key_len + q->value_len;
    if (q->seq != seq || q->incarnation != inc || q->version != MSG_WIRE_VERSION ||
        q->op == 0 || q->op >= SD_OP_END ||
        q->key_len == 0 || q->value_len > nd->cfg.max_item_size || plen > slot_payload(st) ||
        (q->op == SD_OP_STORE && (q->sub & ~SD_SUB_PLACED) > NESSIE_PREPEND) ||
        (q->op == SD_OP_ARITH && q->sub > 1) ||
        (q->op == SD_OP_DELETE && (q->sub & ~(SD_SUB_INVALIDATE | SD_SUB_EXPTIME) ||
                                   (q->sub & (SD_SUB_INVALIDATE | SD_SUB_EXPTIME)) == SD_SUB_EXPTIME)) ||
        (q->op == SD_OP_TOUCH && q->sub > SD_SUB_TOKEN))
        return false;
    uint64_t tr = msg_round8(64 + plen), trailer;
    if (fab_local_read(nd->fab, FAB_REGION_MSG, off + 64, msg + 64, (uint32_t)(tr + 8 - 64)) != FAB_OK)
        return false;
    memcpy(&trailer, msg + tr, 8);
    if (trailer != seq || q->crc != msg_crc(msg, true, plen))
        return false;
    /* The copy is whole only if the requester did not start over meanwhile: it zeroes the
     * header (and waits) before it writes a slot whose request went unanswered. */
    const struct sd_req *live = (const struct sd_req *)(st->msg + off);
    return __atomic_load_n(&live->seq, __ATOMIC_ACQUIRE) == seq;
}

/* Run the request in ctx->sd_buf[0] client-driven and build its reply in ctx->sd_buf[1].
 * Returns the reply's payload length. */
static uint64_t req_run(struct nessie_ctx *ctx)
{
    struct nessie_node *nd = ctx->node;
    struct sd_state *st = nd->sd;
    const struct sd_req *q = (const struct sd_req *)ctx->sd_buf[0];
    const unsigned char *key = ctx->sd_buf[0] + 64;
    const unsigned char *val = key + q->key_len;
    struct sd_rep *rp = (struct sd_rep *)ctx->sd_buf[1];
    unsigned char *rv = ctx->sd_buf[1] + 64;
    memset(rp, 0, sizeof(*rp));
    int rc;
    struct key_plan kp;
    if (key_check(key, q->key_len) != NESSIE_OK) {
        rp->status = NESSIE_BAD_KEY; /* req_take let it through: answered, never run */
        return 0;
    }
    if (mship_self_out(&nd->view)) {
        rp->status = NESSIE_FABRIC_ERROR; /* lost from the view, or joining: serves nothing (front/api.c) */
        return 0;
    }
    if (q->op != SD_OP_GET && mship_retiring_self(&nd->view)) {
        /* R1 (model/retire.pml): a node being retired writes nothing new; its requester runs
         * the write itself, as one refused for its budget. */
        rp->status = SD_STATUS_EXPIRED;
        return 0;
    }
    key_plan_make(&kp, nd, key, q->key_len);
    /* Client-driven, here: a server runs what it is sent and never ships it on. */
    switch (q->op) {
    case SD_OP_GET: {
        struct nessie_item it;
        rc = proto_get(ctx, &kp, rv, slot_payload(st), &it);
        if (rc == NESSIE_OK) {
            if (it.value_len > slot_payload(st)) {
                rp->status = SD_STATUS_TOO_LARGE;
                return 0;
            }
            if (it.value != rv)
                memcpy(rv, it.value, it.value_len);
            rp->value_len = it.value_len;
            rp->flags = it.flags;
            rp->exptime = it.exptime;
            rp->version = it.version;
            rp->access = it.access;
            rp->meta = it.meta;
        }
        break;
    }
    case SD_OP_STORE:
        /* A value placed here for room (place.c): run as any store, its entry marked, and
         * counted once stored. */
        if (q->sub & SD_SUB_PLACED)
            ctx->value_flags8 = DTE_F_PLACED;
        /* A peer's request is checked as nessie_store checks a program's call. */
        if ((q->sub & ~SD_SUB_PLACED) > NESSIE_PREPEND || (q->arg2 & ~(uint64_t)NESSIE_META_MASK) ||
            ((q->arg2 & NESSIE_META_STALE) && (q->sub & ~SD_SUB_PLACED) != NESSIE_CAS))
            rc = NESSIE_INVALID;
        else if (mc_item_size(q->key_len, q->value_len, q->flags) > nd->cfg.max_item_size)
            rc = NESSIE_TOO_BIG;
        else
            rc = proto_store(ctx, &kp, (enum nessie_store_mode)(q->sub & ~SD_SUB_PLACED), val,
                             q->value_len, q->flags, q->exptime, q->arg, (uint32_t)q->arg2,
                             &rp->version);
        if (rc == NESSIE_OK && ctx->value_flags8) {
            CTR_ADD(ctx->ctr.placed_in, 1);
            CTR_ADD(ctx->ctr.placed_in_bytes, q->value_len);
        }
        ctx->value_flags8 = 0;
        break;
    case SD_OP_DELETE:
        if (q->sub & SD_SUB_INVALIDATE)
            rc = proto_invalidate(ctx, &kp, q->arg, (q->sub & SD_SUB_EXPTIME) != 0, q->exptime);
        else
            rc = proto_delete(ctx, &kp, q->arg);
        break;
    case SD_OP_ARITH:
        rc = proto_arith(ctx, &kp, q->sub == 1, q->arg, q->arg2, &rp->num, &rp->version);
        break;
    case SD_OP_TOUCH:
    default:
        if (q->sub & SD_SUB_TOKEN)
            rc = proto_token(ctx, &kp, q->arg);
        else
            rc = proto_touch(ctx, &kp, q->exptime);
        break;
    }
    if (rc == NESSIE_ELSEWHERE) {
        /* It met a third node's flash item (demoted there since its requester shipped it): no
         * effect; its requester runs it on, and goes there (dispatch.c). */
        rp->status = SD_STATUS_EXPIRED;
        return 0;
    }
    if (rc == NESSIE_FABRIC_ERROR && q->op != SD_OP_GET && mship_retiring_self(&nd->view)) {
        /* Refused by R1 once its retire was announced here while it ran: no effect, so its
         * requester may still run it. */
        rp->status = SD_STATUS_EXPIRED;
        return 0;
    }
    rp->status = (uint32_t)rc;
    return rp->value_len;
}

/* Take up request (inc, seq) of slot (r, s): CAS its take-up word from posted to taken, through
 * the fabric also on this node (on verbs the NIC's atomics are atomic only with each other, and
 * the requester's withdrawal is one). A lost completion is resolved by reading the word back.
 * Returns true if this server took it up; false if it was withdrawn (its requester runs it), or
 * the word cannot be changed (it stays posted, and its requester withdraws it). */
static bool req_claim(struct nessie_ctx *ctx, uint32_t r, uint32_t s, uint32_t inc, uint64_t seq)
{
    struct nessie_node *nd = ctx->node;
    const uint64_t posted = sd_ctl(SD_CTL_POSTED, inc, seq), taken = sd_ctl(SD_CTL_TAKEN, inc, seq);
    uint64_t off = req_off(nd->sd, r, s) + SD_REQ_OFF_CTL;
    for (int i = 0; i < SD_CTL_TRIES; i++) {
        uint64_t old = 0;
        struct fab_wr cas = {.opcode = FAB_OP_CAS, .node = nd->cfg.self, .region = FAB_REGION_MSG,
                             .offset = off, .local = &old, .length = 8, .compare = posted,
                             .swap = taken};
        if (sd_exec(ctx, &cas) == FAB_OK)
            return old == posted;
        /* Only the slot's holder takes its requests up: taken is this CAS's doing. */
        fab_local_read(nd->fab, FAB_REGION_MSG, off, &old, 8);
        if (old != posted)
            return old == taken;
    }
    return false;
}

/* Publish that this node's servers are looking at their rings (layout.h, msg_hdr.sd_beat). */
static void sd_beat(struct sd_state *st)
{
    struct msg_hdr *h = (struct msg_hdr *)st->msg;
    uint64_t now = nessie_mono_ns();
    if (now - __atomic_load_n(&h->sd_beat, __ATOMIC_RELAXED) >= SD_BEAT_EVERY_NS)
        __atomic_store_n(&h->sd_beat, now, __ATOMIC_RELAXED);
}

/* Hold slot i of the rings (its sd_in) for serving it. Returns false when another thread holds
 * it: that one serves what the slot holds. acquire: the state the last holder left. */
static bool slot_hold(struct sd_in *in)
{
    return !atomic_exchange_explicit(&in->held, true, memory_order_acquire);
}

static void slot_release(struct sd_in *in)
{
    atomic_store_explicit(&in->held, false, memory_order_release); /* release: its state */
}

static void in_done(struct sd_in *in, uint64_t seq, uint32_t inc)
{
    __atomic_store_n(&in->done_seq, seq, __ATOMIC_RELAXED);
    __atomic_store_n(&in->done_inc, inc, __ATOMIC_RELAXED);
}

/* Slot i of this node's rings (requester i / slots, its slot i % slots) as it lands. */
static const struct sd_req *slot_live(const struct sd_state *st, uint32_t i)
{
    return (const struct sd_req *)(st->msg + req_off(st, i / st->slots, i % st->slots));
}

/* Whether slot i shows a request not served yet, read from its live header without holding the
 * slot: *seq and *inc as read. A hint: the holder looks again. */
static bool slot_pending(const struct sd_state *st, uint32_t self, uint32_t i, uint64_t *seq,
                         uint32_t *inc)
{
    if (i / st->slots == self)
        return false; /* a node runs its own keys' operations itself (sd_can_ship) */
    const struct sd_req *live = slot_live(st, i);
    *seq = __atomic_load_n(&live->seq, __ATOMIC_ACQUIRE);
    *inc = __atomic_load_n(&live->incarnation, __ATOMIC_RELAXED);
    const struct sd_in *in = &st->in[i];
    return *seq != 0 && (*seq != __atomic_load_n(&in->done_seq, __ATOMIC_RELAXED) ||
                         *inc != __atomic_load_n(&in->done_inc, __ATOMIC_RELAXED));
}

/* Note when the requests in worker's slots were first seen: a request's budget runs from then,
 * also while it waits behind another call of the same worker. A slot held by a helper is
 * skipped: the helper is serving what it holds. */
static void sd_note_arrivals(struct sd_state *st, uint32_t self, uint32_t worker, uint32_t workers)
{
    uint64_t now = 0;
    for (uint32_t i = worker; i < st->nodes * st->slots; i += workers) {
        uint64_t seq;
        uint32_t inc;
        if (!slot_pending(st, self, i, &seq, &inc))
            continue;
        struct sd_in *in = &st->in[i];
        if (!slot_hold(in))
            continue;
        if (seq != in->seen_seq || inc != in->seen_inc) {
            if (!now)
                now = nessie_mono_ns();
            in->seen_seq = seq;
            in->seen_inc = inc;
            in->seen_ns = now;
        }
        slot_release(in);
    }
}

/*
 * Serve what slot i holds, the slot held: take up its request, run it, WRITE the reply.
 * Returns true if it answered a request. gets_only (a helper): only a GET is served, and a
 * request that does not validate is left to the slot's server, which judges garbage.
 */
static bool serve_slot(struct nessie_ctx *ctx, uint32_t i, bool gets_only)
{
    struct nessie_node *nd = ctx->node;
    struct sd_state *st = nd->sd;
    uint32_t r = i / st->slots, s = i % st->slots;
    const struct sd_req *live = slot_live(st, i);
    uint64_t seq = __atomic_load_n(&live->seq, __ATOMIC_ACQUIRE);
    uint32_t inc = __atomic_load_n(&live->incarnation, __ATOMIC_RELAXED);
    struct sd_in *in = &st->in[i];
    if (seq == in->done_seq && inc == in->done_inc)
        return false;
    if (seq == 0 || (seq == in->bad_seq && inc == in->bad_inc && in->bad_since == 0))
        return false; /* a poisoned slot (its next request is on its way), or dropped already */
    bool newer = inc != in->done_inc || seq > in->done_seq;
    if (gets_only && (!newer || __atomic_load_n(&live->op, __ATOMIC_RELAXED) != SD_OP_GET))
        return false;
    if (newer && __atomic_load_n(&live->ctl, __ATOMIC_ACQUIRE) ==
                     sd_ctl(SD_CTL_WITHDRAWN, inc, seq)) {
        in_done(in, seq, inc); /* withdrawn before its turn: its requester runs it */
        return false;
    }
    if (!newer || !req_take(ctx, r, s, inc, seq)) {
        if (gets_only)
            return false;
        uint64_t now = nessie_mono_ns();
        if (in->bad_seq != seq || in->bad_inc != inc) {
            in->bad_seq = seq;
            in->bad_inc = inc;
            in->bad_since = now;
        }
        if (newer && now - in->bad_since < SD_GARBAGE_NS)
            return false; /* may still be landing: look again later */
        /* Dropped: remembered as bad (bad_since 0), never as done, so garbage with a high
         * count cannot make the requester's next real requests look like replays. */
        in->bad_since = 0;
        CTR_ADD(ctx->ctr.sd_dropped, 1);
        if (nessie_every(&st->drop_logged_ns, 1000000000ULL))
            log_warn("sd: dropped a %s request from node %u (ring slot %u, seq %llu)",
                     newer ? "malformed or torn" : "replayed", r, s, (unsigned long long)seq);
        return false;
    }
    const struct sd_req *q = (const struct sd_req *)ctx->sd_buf[0];
    if (gets_only && q->op != SD_OP_GET)
        return false; /* the slot's next request since the look above: its server's */
    in_done(in, seq, inc);
    uint64_t seen = in->seen_seq == seq && in->seen_inc == inc ? in->seen_ns : nessie_mono_ns();
    uint64_t deadline = seen + (uint64_t)q->budget_us * 1000;
    if (!req_claim(ctx, r, s, inc, seq))
        return false; /* withdrawn meanwhile: its requester runs it */
    struct sd_rep *rp = (struct sd_rep *)ctx->sd_buf[1];
    uint64_t vlen = 0, start = nessie_mono_ns();
    if (start >= deadline) {
        /* Its budget is spent (it waited behind other calls, or this thread stalled): never
         * run, so it cannot take effect after its requester has given up on it. */
        memset(rp, 0, sizeof(*rp));
        rp->status = SD_STATUS_EXPIRED;
        CTR_ADD(ctx->ctr.sd_expired, 1);
    } else {
        CTR_ADD(ctx->ctr.sd_queue_ns, start - seen);
        ctx->call_deadline_ns = deadline; /* the call's budget: what the request carried */
        vlen = req_run(ctx);
        ctx->call_deadline_ns = 0;
        CTR_ADD(ctx->ctr.sd_served, 1);
        if (gets_only)
            CTR_ADD(ctx->ctr.sd_helped, 1);
    }
    rp->seq = seq;
    rp->incarnation = inc;
    uint64_t tr = msg_round8(64 + vlen);
    memset(ctx->sd_buf[1] + 64 + vlen, 0, tr - 64 - vlen);
    memcpy(ctx->sd_buf[1] + tr, &seq, 8);
    rp->crc = msg_crc(ctx->sd_buf[1], false, vlen);
    struct fab_wr wr = {.opcode = FAB_OP_WRITE, .node = r, .region = FAB_REGION_MSG,
                        .offset = rep_off(st, nd->cfg.self, s), .local = ctx->sd_buf[1],
                        .length = (uint32_t)(tr + 8)};
    /* A reply whose WRITE failed is written again: its requester, or a write's, would otherwise
     * wait out the call bound for it and say TIMEOUT. Writing the same bytes twice is harmless
     * (the requester takes the reply naming its seq, once), and the slot's next reply is
     * written after this one (the slot is held until then). Only failures that came fast are
     * tried again (over verbs a peer that is gone fails a request after the NIC's retries, F,
     * and this thread serves the other requesters meanwhile). A reply that cannot be delivered
     * (the requester gone, the fabric to it down) is its requester's TIMEOUT. */
    uint64_t sent_at = nessie_mono_ns();
    for (int t = 0; t < SD_CTL_TRIES && sd_exec(ctx, &wr) != FAB_OK &&
                    nessie_mono_ns() - sent_at < sd_takeup_ns(nd);
         t++)
        ;
    return true;
}

/* nessie_sd_nap's question, asked once it counted itself a sleeper: no request waits in any of
 * this node's rings. */
static bool sd_rings_idle(void *arg)
{
    const struct nessie_node *nd = arg;
    const struct sd_state *st = nd->sd;
    uint64_t seq;
    uint32_t inc;
    for (uint32_t i = 0; i < st->nodes * st->slots; i++)
        if (slot_pending(st, nd->cfg.self, i, &seq, &inc))
            return false;
    return true;
}

void nessie_sd_nap(struct nessie_ctx *ctx, uint64_t timeout_ns)
{
    struct nessie_node *nd = ctx->node;
    fab_bell_wait(nd->fab, FAB_REGION_MSG, MSG_HDR_OFF_BELL, timeout_ns, sd_rings_idle, nd);
}

bool nessie_sd_nap_rings(const struct nessie_node *nd) { return fab_has_bells(nd->fab); }

size_t nessie_sd_serve(struct nessie_ctx *ctx, uint32_t worker, uint32_t workers)
{
    struct nessie_node *nd = ctx->node;
    struct sd_state *st = nd->sd;
    if (workers == 0 || worker >= workers || !sd_bufs(ctx))
        return 0;
    ctx->serving = true;        /* its calls' traffic is the home node's share (stats) */
    size_t served = 0;
    uint32_t n = st->nodes * st->slots;
    sd_beat(st);
    sd_note_arrivals(st, nd->cfg.self, worker, workers);
    for (uint32_t i = worker; i < n; i += workers) {
        uint64_t seq;
        uint32_t inc;
        if (!slot_pending(st, nd->cfg.self, i, &seq, &inc) || !slot_hold(&st->in[i]))
            continue;
        bool answered = serve_slot(ctx, i, false);
        slot_release(&st->in[i]);
        if (!answered)
            continue;
        served++;
        /* Requests that came in while this one ran: their budgets run from now. */
        sd_note_arrivals(st, nd->cfg.self, worker, workers);
        sd_beat(st);
    }
    ctx->serving = false;
    return served;
}

uint64_t nessie_sd_helped(const struct nessie_node *nd)
{
    return nd->sd ? atomic_load_explicit(&nd->sd->helped, memory_order_relaxed) : 0;
}

size_t nessie_sd_help(struct nessie_ctx *ctx)
{
    struct nessie_node *nd = ctx->node;
    struct sd_state *st = nd->sd;
    if (!st || !sd_bufs(ctx))
        return 0;
    uint32_t n = st->nodes * st->slots;
    for (uint32_t k = 0; k < n; k++) {
        /* From where the last help stopped, so no requester's slots always come first. */
        uint32_t i = (ctx->sd_help_next + k) % n;
        uint64_t seq;
        uint32_t inc;
        if (!slot_pending(st, nd->cfg.self, i, &seq, &inc) ||
            __atomic_load_n(&slot_live(st, i)->op, __ATOMIC_RELAXED) != SD_OP_GET ||
            !slot_hold(&st->in[i]))
            continue;
        ctx->serving = true;
        bool answered = serve_slot(ctx, i, true);
        ctx->serving = false;
        slot_release(&st->in[i]);
        if (answered) {
            ctx->sd_help_next = i + 1;
            atomic_fetch_add_explicit(&st->helped, 1, memory_order_relaxed);
            sd_beat(st);
            return 1;
        }
    }
    return 0;
}
