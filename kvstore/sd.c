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
 * Honesty under faults (nessie.h): a GET changes nothing, so one that gets no answer may say
 * NESSIE_FABRIC_ERROR (the request could not be sent) or NESSIE_TIMEOUT. A write whose request
 * may have arrived (its WRITE completed, or failed in a way that hides whether it landed) but
 * whose reply did not come is NESSIE_TIMEOUT: the home node may run it, or may have. A slot whose
 * request went unanswered is poisoned (its header zeroed, and that WRITE waited for) before it
 * carries the next request, so a server still copying the old request sees the change and drops
 * its copy instead of running a request torn between two.
 *
 * Ownership: a requester's slot is held by one thread at a time (the free mask); a home node's
 * request slot i is served by server worker i % workers only, so one slot's requests run one at
 * a time, in order, and its replies never race each other.
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

#include "engine_int.h"
#include "hash.h"
#include "log.h"

/* A request that stays torn, or fails its checksum, this long is garbage, not a WRITE still
 * landing (a WRITE lands within microseconds; one held up longer by verbs retransmissions gets
 * its requester a TIMEOUT, an honest answer): dropped, counted and logged. */
#define SD_GARBAGE_NS (100ULL * 1000000ULL)
/* A requester waits for a reply this long beyond the home node's own budget for the call (its
 * op_timeout, and for a write the extra a full node grants a write waiting for room: the call
 * bound's W, engine.c): the transit both ways and the server's scan. */
#define SD_TRANSIT_MARGIN_MS 100
/* How a requester waits: spin this many polls (a reply from an idle server comes within a few
 * microseconds), then sleep in steps growing with the wait, up to SD_WAIT_SLEEP_MAX_US (a futex
 * wake-up would cost the server a system call per reply, and over verbs it has none to make). */
#define SD_WAIT_SPIN 256
#define SD_WAIT_SLEEP_MAX_US 200

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
 * quiet), so a change is followed within about a second. */
#define AUTO_SHIFT 3
#define AUTO_CAP 8
#define AUTO_STALE_MS 100
#define AUTO_STALE_MAX_MS 1000
/* Writes' averages are kept per size of value: small, up to 16 KiB, larger (the paper's
 * crossover between the ways lies between 8 and 16 KiB). A GET's size is unknown before it
 * runs, so GETs share one set per home node. */
#define AUTO_BUCKETS 3

struct sd_est {
    _Atomic uint64_t ns[2];    /* moving average of a call's time, [0] cd, [1] sd; 0: none yet */
    _Atomic uint64_t at_ms[2]; /* when it was last updated or explored (this node's clock) */
};

/* One requester slot's state, touched only by the thread holding the slot. */
struct sd_out {
    uint64_t seq;     /* the last request's seq (counts from 1 in this incarnation) */
    bool unanswered;  /* its reply never came: poison the slot before the next request */
};

/* One request slot's state on the home node, touched only by the server worker it belongs to. */
struct sd_in {
    uint32_t done_inc;      /* the last request served or dropped: (incarnation, seq) */
    uint64_t done_seq;
    uint64_t bad_seq;       /* a request that did not validate, and when it was first seen */
    uint32_t bad_inc;
    uint64_t bad_since;
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
    _Atomic uint64_t drop_logged_ns; /* rate limit of the garbage warning */
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
    st->nodes = nd->cfg.nodes;
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
    nd->sd = st;
    if (!st->free || !st->out || !st->in || !st->est)
        return NESSIE_NO_MEMORY; /* the caller closes the node, and sd_close frees these */
    uint64_t all = st->slots == 64 ? UINT64_MAX : (1ULL << st->slots) - 1;
    for (uint32_t h = 0; h < st->nodes; h++)
        atomic_init(&st->free[h], all);
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
    free(st);
    nd->sd = NULL;
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

bool sd_route(struct nessie_ctx *ctx, bool write, const void *key, size_t key_len,
              size_t value_len, uint32_t *home)
{
    /* (Mode auto has chosen cd or sd before a call gets here: sd_auto_choose.) */
    if (ctx->mode == NESSIE_MODE_CD || ctx->mode == NESSIE_MODE_AUTO ||
        (ctx->mode == NESSIE_MODE_HY && !write))
        return false;
    struct nessie_node *nd = ctx->node;
    uint32_t h = nessie_key_home(nd, key, key_len);
    /* The home node runs its own keys' operations the way a server would: here, locally. */
    if (h == nd->cfg.self || key_len + value_len > slot_payload(nd->sd))
        return false;
    *home = h;
    return true;
}

enum nessie_mode sd_auto_choose(struct nessie_ctx *ctx, bool write, const void *key,
                                size_t key_len, size_t value_len, struct sd_choice *ch)
{
    struct nessie_node *nd = ctx->node;
    struct sd_state *st = nd->sd;
    ch->est = NULL;
    uint32_t home = nessie_key_home(nd, key, key_len);
    if (home == nd->cfg.self || key_len + value_len > slot_payload(st))
        return NESSIE_MODE_CD; /* nothing to choose: nothing to learn */
    ch->t0 = nessie_mono_ns();
    uint32_t bucket = !write ? 0 : value_len <= 1024 ? 0 : value_len <= 16384 ? 1 : 2;
    struct sd_est *e = &st->est[((size_t)home * 2 + write) * AUTO_BUCKETS + bucket];
    uint64_t cd = atomic_load_explicit(&e->ns[0], memory_order_relaxed);
    uint64_t sd = atomic_load_explicit(&e->ns[1], memory_order_relaxed);
    int best = sd < cd ? 1 : 0, way = best;
    ch->fresh = false;
    if (cd == 0 || sd == 0) {
        way = cd == 0 ? 0 : 1; /* a way never measured is tried first */
    } else {
        /* Explore the other way now and then, and when its average has gone stale; the
         * timestamp is claimed by CAS, so one call per period explores, not every thread. */
        uint64_t r = (best ? cd : sd) / (best ? sd : cd);
        r = r < 1 ? 1 : r > 1024 ? 1024 : r;
        uint64_t stale = AUTO_STALE_MS * r < AUTO_STALE_MAX_MS ? AUTO_STALE_MS * r : AUTO_STALE_MAX_MS;
        uint64_t now = ch->t0 / 1000000ULL;
        uint64_t at = atomic_load_explicit(&e->at_ms[!best], memory_order_relaxed);
        if (now - at >= stale &&
            atomic_compare_exchange_strong_explicit(&e->at_ms[!best], &at, now,
                                                    memory_order_relaxed, memory_order_relaxed)) {
            way = !best;
            ch->fresh = true;
        }
    }
    ch->est = e;
    ch->way = way;
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
    _Atomic uint64_t *avg = &ch->est->ns[ch->way];
    uint64_t a = ch->fresh ? 0 : atomic_load_explicit(avg, memory_order_relaxed);
    if (a && s > a * AUTO_CAP)
        s = a * AUTO_CAP;
    uint64_t next = a ? a - (a >> AUTO_SHIFT) + (s >> AUTO_SHIFT) : s;
    atomic_store_explicit(avg, next ? next : 1, memory_order_relaxed);
    atomic_store_explicit(&ch->est->at_ms[ch->way], end / 1000000ULL, memory_order_relaxed);
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

/* The CRC-32 (gzip's, reflected) of a message: its 64-byte header with the crc word as zero,
 * then len bytes of payload. crc_off: the header's crc word. ISA-L's, with carry-less multiply:
 * 37 GB/s here against zlib's 3.9 (3.6 us for a 128 KiB value instead of 33, twice per shipped
 * call, which made large shipped PUTs a fifth slower than the server-driven design costs). */
static uint32_t msg_crc(const unsigned char *msg, size_t crc_off, uint64_t len)
{
    unsigned char h[64];
    memcpy(h, msg, 64);
    memset(h + crc_off, 0, 4);
    uint32_t c = crc32_gzip_refl(0, h, 64);
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
static void wait_step(unsigned n, uint64_t t0)
{
    if (n < SD_WAIT_SPIN) {
        __builtin_ia32_pause();
        return;
    }
    uint64_t waited = nessie_mono_ns() - t0;
    uint64_t us = waited / 1000 / 8;
    if (us > SD_WAIT_SLEEP_MAX_US)
        us = SD_WAIT_SLEEP_MAX_US;
    struct timespec ts = {0, (long)(us ? us : 1) * 1000};
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
        if (nessie_mono_ns() >= deadline)
            return -1;
        /* Another thread of this node holds every slot for the length of a shipped call. */
        wait_step(spins, t0);
    }
}

static void slot_give(struct sd_state *st, uint32_t home, int s)
{
    /* release: the next holder sees this one's sd_out */
    atomic_fetch_or_explicit(&st->free[home], 1ULL << s, memory_order_release);
}

/*
 * Ship the request in ctx->sd_buf[0] (header filled but for seq, incarnation and crc; payload
 * of plen bytes after it) to home and wait for its reply, which is left in ctx->sd_buf[1].
 * Returns NESSIE_OK (a valid reply), NESSIE_FABRIC_ERROR (nothing of the request can have
 * reached home), or NESSIE_TIMEOUT (it may have; no reply came in time).
 */
static int sd_ship(struct nessie_ctx *ctx, uint32_t home, uint64_t plen, bool write)
{
    struct nessie_node *nd = ctx->node;
    struct sd_state *st = nd->sd;
    const struct nessie_config *cfg = &nd->cfg;
    uint64_t t0 = nessie_mono_ns();
    uint64_t budget_ms = cfg->op_timeout_ms + SD_TRANSIT_MARGIN_MS +
                         (write ? ctx->node->bound.memory_wait_ns / 1000000ULL : 0);
    uint64_t deadline = t0 + budget_ms * 1000000ULL;
    int s = slot_take(st, home, deadline);
    if (s < 0)
        return NESSIE_TIMEOUT; /* nothing sent: no effect, but nothing definite to say either */
    struct sd_out *out = &st->out[home * st->slots + (uint32_t)s];
    uint64_t fab_ops = 0, fab_bytes = 0;
    int status;

    if (out->unanswered) {
        /* A server may still be copying the request that went unanswered: zero its header, and
         * wait for that WRITE, so the server's re-check of the header sees the change before any
         * byte of the next request lands. */
        uint64_t zero[2] = {0, 0};
        struct fab_wr wr = {.opcode = FAB_OP_WRITE, .node = home, .region = FAB_REGION_MSG,
                            .offset = req_off(st, nd->cfg.self, (uint32_t)s), .local = zero,
                            .length = sizeof(zero)};
        fab_ops++;
        fab_bytes += sizeof(zero);
        if (sd_exec(ctx, &wr) != FAB_OK) {
            status = NESSIE_FABRIC_ERROR;
            goto out;
        }
        out->unanswered = false;
    }

    unsigned char *msg = ctx->sd_buf[0];
    struct sd_req *rq = (struct sd_req *)msg;
    rq->seq = ++out->seq;
    rq->incarnation = st->life;
    rq->crc = 0;
    uint64_t tr = msg_round8(64 + plen);
    memset(msg + 64 + plen, 0, tr - 64 - plen);
    memcpy(msg + tr, &rq->seq, 8);
    rq->crc = msg_crc(msg, offsetof(struct sd_req, crc), plen);
    struct fab_wr wr = {.opcode = FAB_OP_WRITE, .node = home, .region = FAB_REGION_MSG,
                        .offset = req_off(st, nd->cfg.self, (uint32_t)s), .local = msg,
                        .length = (uint32_t)(tr + 8)};
    fab_ops++;
    fab_bytes += tr + 8;
    int frc = sd_exec(ctx, &wr);
    if (frc != FAB_OK) {
        /* A failed WRITE may still have landed (a lost completion): the home node may run it. */
        out->unanswered = true;
        status = write ? NESSIE_TIMEOUT : NESSIE_FABRIC_ERROR;
        goto out;
    }

    /* The reply, in this node's own region; the home node's WRITE lands there in any order. */
    unsigned char *rep = ctx->sd_buf[1];
    const unsigned char *slot = st->msg + rep_off(st, home, (uint32_t)s);
    const struct sd_rep *live = (const struct sd_rep *)slot;
    for (unsigned n = 0;; n++) {
        if (__atomic_load_n(&live->seq, __ATOMIC_ACQUIRE) == rq->seq &&
            __atomic_load_n(&live->incarnation, __ATOMIC_RELAXED) == rq->incarnation) {
            struct sd_rep *h = (struct sd_rep *)rep;
            fab_local_read(nd->fab, FAB_REGION_MSG, rep_off(st, home, (uint32_t)s), rep, 64);
            uint64_t rt = msg_round8(64 + (uint64_t)h->value_len);
            uint64_t trailer = 0;
            if (h->seq == rq->seq && h->value_len <= slot_payload(st) &&
                fab_local_read(nd->fab, FAB_REGION_MSG, rep_off(st, home, (uint32_t)s) + 64,
                               rep + 64, (uint32_t)(rt + 8 - 64)) == FAB_OK) {
                memcpy(&trailer, rep + rt, 8);
                if (trailer == rq->seq && h->crc == msg_crc(rep, offsetof(struct sd_rep, crc),
                                                            h->value_len)) {
                    fab_ops++; /* the reply's WRITE is this call's traffic too */
                    fab_bytes += rt + 8;
                    status = NESSIE_OK;
                    goto out;
                }
            }
            /* Still landing (or torn): look again. */
        }
        if (nessie_mono_ns() >= deadline) {
            out->unanswered = true;
            CTR_ADD(ctx->ctr.sd_no_reply, 1);
            status = NESSIE_TIMEOUT;
            goto out;
        }
        wait_step(n, t0);
    }
out:
    slot_give(st, home, s);
    CTR_ADD(OPC(ctx).writes, fab_ops);
    CTR_ADD(OPC(ctx).bytes_written, fab_bytes);
    nessie_count_traffic(ctx, fab_ops, fab_bytes);
    return status;
}

/* The call's bookkeeping on the requesting node: one call of ctx->kind, shipped. */
static void sd_count(struct nessie_ctx *ctx, enum nessie_opkind kind)
{
    ctx->kind = kind;
    CTR_ADD(OPC(ctx).ops, 1);
    CTR_ADD(OPC(ctx).attempts, 1);
    CTR_ADD(ctx->ctr.sd_shipped[kind], 1);
}

int sd_get(struct nessie_ctx *ctx, uint32_t home, const void *key, size_t key_len, void *buf,
           size_t cap, struct nessie_item *out)
{
    if (!sd_bufs(ctx))
        return -1; /* out of memory here: run it client-driven */
    sd_count(ctx, NESSIE_OPK_GET);
    struct sd_req *rq = (struct sd_req *)ctx->sd_buf[0];
    memset(rq, 0, sizeof(*rq));
    rq->op = SD_OP_GET;
    rq->key_len = (uint8_t)key_len;
    memcpy(ctx->sd_buf[0] + 64, key, key_len);
    int rc = sd_ship(ctx, home, key_len, false);
    if (rc == NESSIE_OK) {
        const struct sd_rep *rp = (const struct sd_rep *)ctx->sd_buf[1];
        if (rp->status == SD_STATUS_TOO_LARGE)
            return -1;
        rc = rp->status < NESSIE_STATUS_COUNT ? (int)rp->status : NESSIE_FABRIC_ERROR;
        if (rc == NESSIE_OK) {
            const unsigned char *v = ctx->sd_buf[1] + 64;
            if (buf && rp->value_len <= cap) {
                memcpy(buf, v, rp->value_len);
                v = buf;
            }
            *out = (struct nessie_item){.value = v, .value_len = rp->value_len,
                                        .flags = rp->flags, .exptime = rp->exptime,
                                        .version = rp->version};
        }
    }
    CTR_ADD(OPC(ctx).outcomes[rc], 1);
    return rc;
}

int sd_write(struct nessie_ctx *ctx, uint32_t home, const struct sd_req *rq, const void *key,
             size_t key_len, const void *value, uint64_t *version_out, uint64_t *num_out)
{
    enum nessie_opkind kind = rq->op == SD_OP_DELETE ? NESSIE_OPK_DELETE : NESSIE_OPK_PUT;
    if (!sd_bufs(ctx))
        return NESSIE_NO_MEMORY; /* nothing sent, nothing changed */
    sd_count(ctx, kind);
    unsigned char *msg = ctx->sd_buf[0];
    memcpy(msg, rq, 64);
    struct sd_req *q = (struct sd_req *)msg;
    q->key_len = (uint8_t)key_len;
    memcpy(msg + 64, key, q->key_len);
    if (q->value_len)
        memcpy(msg + 64 + q->key_len, value, q->value_len);
    int rc = sd_ship(ctx, home, (uint64_t)q->key_len + q->value_len, true);
    if (rc == NESSIE_OK) {
        const struct sd_rep *rp = (const struct sd_rep *)ctx->sd_buf[1];
        rc = rp->status < NESSIE_STATUS_COUNT ? (int)rp->status : NESSIE_TIMEOUT;
        if (rc == NESSIE_OK) {
            if (version_out)
                *version_out = rp->version;
            if (num_out)
                *num_out = rp->num;
        }
    }
    CTR_ADD(OPC(ctx).outcomes[rc], 1);
    return rc;
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
    if (q->seq != seq || q->incarnation != inc || q->op == 0 || q->op >= SD_OP_END ||
        q->key_len == 0 || q->value_len > nd->cfg.max_item_size || plen > slot_payload(st) ||
        (q->op == SD_OP_STORE && q->sub > NESSIE_PREPEND) || (q->op == SD_OP_ARITH && q->sub > 1))
        return false;
    uint64_t tr = msg_round8(64 + plen), trailer;
    if (fab_local_read(nd->fab, FAB_REGION_MSG, off + 64, msg + 64, (uint32_t)(tr + 8 - 64)) != FAB_OK)
        return false;
    memcpy(&trailer, msg + tr, 8);
    if (trailer != seq || q->crc != msg_crc(msg, offsetof(struct sd_req, crc), plen))
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
    struct sd_state *st = ctx->node->sd;
    const struct sd_req *q = (const struct sd_req *)ctx->sd_buf[0];
    const unsigned char *key = ctx->sd_buf[0] + 64;
    const unsigned char *val = key + q->key_len;
    struct sd_rep *rp = (struct sd_rep *)ctx->sd_buf[1];
    unsigned char *rv = ctx->sd_buf[1] + 64;
    memset(rp, 0, sizeof(*rp));
    int rc;
    switch (q->op) {
    case SD_OP_GET: {
        struct nessie_item it;
        rc = nessie_get_into(ctx, key, q->key_len, rv, slot_payload(st), &it);
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
        }
        break;
    }
    case SD_OP_STORE:
        rc = nessie_store(ctx, (enum nessie_store_mode)q->sub, key, q->key_len, val, q->value_len,
                          q->flags, q->exptime, q->arg, &rp->version);
        break;
    case SD_OP_DELETE:
        rc = nessie_delete(ctx, key, q->key_len);
        break;
    case SD_OP_ARITH:
        rc = nessie_arith(ctx, key, q->key_len, q->sub == 1, q->arg, &rp->num, &rp->version);
        break;
    case SD_OP_TOUCH:
    default:
        rc = nessie_touch(ctx, key, q->key_len, q->exptime);
        break;
    }
    rp->status = (uint32_t)rc;
    return rp->value_len;
}

size_t nessie_sd_serve(struct nessie_ctx *ctx, uint32_t worker, uint32_t workers)
{
    struct nessie_node *nd = ctx->node;
    struct sd_state *st = nd->sd;
    if (workers == 0 || worker >= workers || !sd_bufs(ctx))
        return 0;
    enum nessie_mode mode = ctx->mode;
    ctx->mode = NESSIE_MODE_CD; /* a server runs what it is sent; it never ships it on */
    ctx->serving = true;        /* its calls' traffic is the home node's share (stats) */
    size_t served = 0;
    uint32_t n = st->nodes * st->slots;
    for (uint32_t i = worker; i < n; i += workers) {
        uint32_t r = i / st->slots, s = i % st->slots;
        if (r == nd->cfg.self)
            continue; /* a node runs its own keys' operations itself (sd_route) */
        const struct sd_req *live = (const struct sd_req *)(st->msg + req_off(st, r, s));
        uint64_t seq = __atomic_load_n(&live->seq, __ATOMIC_ACQUIRE);
        uint32_t inc = __atomic_load_n(&live->incarnation, __ATOMIC_RELAXED);
        struct sd_in *in = &st->in[i];
        if (seq == in->done_seq && inc == in->done_inc)
            continue;
        if (seq == 0 || (seq == in->bad_seq && inc == in->bad_inc && in->bad_since == 0))
            continue; /* a poisoned slot (its next request is on its way), or dropped already */
        bool newer = inc != in->done_inc || seq > in->done_seq;
        if (!newer || !req_take(ctx, r, s, inc, seq)) {
            uint64_t now = nessie_mono_ns();
            if (in->bad_seq != seq || in->bad_inc != inc) {
                in->bad_seq = seq;
                in->bad_inc = inc;
                in->bad_since = now;
            }
            if (newer && now - in->bad_since < SD_GARBAGE_NS)
                continue; /* may still be landing: look again later */
            /* Dropped: remembered as bad (bad_since 0), never as done, so garbage with a high
             * count cannot make the requester's next real requests look like replays. */
            in->bad_since = 0;
            CTR_ADD(ctx->ctr.sd_dropped, 1);
            if (nessie_every(&st->drop_logged_ns, 1000000000ULL))
                log_warn("sd: dropped a %s request from node %u (ring slot %u, seq %llu)",
                         newer ? "malformed or torn" : "replayed", r, s, (unsigned long long)seq);
            continue;
        }
        in->done_seq = seq;
        in->done_inc = inc;
        uint64_t vlen = req_run(ctx);
        struct sd_rep *rp = (struct sd_rep *)ctx->sd_buf[1];
        rp->seq = seq;
        rp->incarnation = inc;
        uint64_t tr = msg_round8(64 + vlen);
        memset(ctx->sd_buf[1] + 64 + vlen, 0, tr - 64 - vlen);
        memcpy(ctx->sd_buf[1] + tr, &seq, 8);
        rp->crc = msg_crc(ctx->sd_buf[1], offsetof(struct sd_rep, crc), vlen);
        struct fab_wr wr = {.opcode = FAB_OP_WRITE, .node = r, .region = FAB_REGION_MSG,
                            .offset = rep_off(st, nd->cfg.self, s), .local = ctx->sd_buf[1],
                            .length = (uint32_t)(tr + 8)};
        /* A reply that cannot be delivered (the requester gone) is its requester's TIMEOUT. */
        (void)sd_exec(ctx, &wr);
        CTR_ADD(ctx->ctr.sd_served, 1);
        served++;
    }
    ctx->mode = mode;
    ctx->serving = false;
    return served;
}
