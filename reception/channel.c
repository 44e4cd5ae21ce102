/*
 * channel.c - serving one client channel: wire.h requests run through the engine.
 *
 * The ring, the slots' states and their memory orderings are include/nessie/wire_sync.h's, shared
 * with the client. Here: checking what a request says, running it, and placing its answer in the
 * request's part of the arena.
 */
#include "channel.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <nessie/wire_sync.h>

#include "log.h"

/* Reconnections clients reported (WIRE_NOOP_RECONNECT), for total_connections: process-wide,
 * because a channel may close before the stats are read, and one daemon is one process. */
static uint64_t reconnects;

uint64_t recep_channel_reconnects(void)
{
    return __atomic_load_n(&reconnects, __ATOMIC_RELAXED);
}

int recep_channel_create(uint32_t arena_bytes, uint32_t max_item_size, int sock, pid_t pid,
                         uint64_t id, struct recep_channel **out)
{
    struct recep_channel *ch = calloc(1, sizeof(*ch));
    int err;
    if (!ch) {
        close(sock);
        return -ENOMEM;
    }
    ch->id = id;
    ch->sock = sock;
    ch->pid = pid;
    ch->arena_bytes = arena_bytes;
    ch->max_item_size = max_item_size;
    ch->map_bytes = WIRE_ARENA_OFFSET + (size_t)arena_bytes;
    /* Sealed against resizing before it is handed over: a client that truncated it would make
     * the daemon's next access to the region a SIGBUS. */
    ch->memfd = memfd_create("nessie-channel", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (ch->memfd < 0) {
        err = -errno;
        log_error("channel: memfd_create: %s", strerror(errno));
        goto fail_memfd;
    }
    if (ftruncate(ch->memfd, (off_t)ch->map_bytes) != 0) {
        err = -errno;
        log_error("channel: ftruncate %zu: %s", ch->map_bytes, strerror(errno));
        goto fail_map;
    }
    if (fcntl(ch->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        err = -errno;
        log_error("channel: sealing the region: %s", strerror(errno));
        goto fail_map;
    }
    void *m = mmap(NULL, ch->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, ch->memfd, 0);
    if (m == MAP_FAILED) {
        err = -errno;
        log_error("channel: mmap %zu: %s", ch->map_bytes, strerror(errno));
        goto fail_map;
    }
    ch->hdr = m;
    ch->arena = (unsigned char *)m + WIRE_ARENA_OFFSET;
    ch->doorbell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ch->doorbell < 0) {
        err = -errno;
        log_error("channel: eventfd: %s", strerror(errno));
        goto fail_eventfd;
    }
    ch->hdr->magic = WIRE_MAGIC;
    ch->hdr->version = WIRE_VERSION;
    ch->hdr->nslots = WIRE_SLOTS;
    ch->hdr->arena_bytes = arena_bytes;
    ch->hdr->max_item_size = max_item_size;
    /* A fresh memfd reads as zeros: every slot IDLE, the ring empty. Handed to the worker through
     * a queue whose hand-over orders these stores before its first look. */
    *out = ch;
    return 0;

fail_eventfd:
    munmap(m, ch->map_bytes);
fail_map:
    close(ch->memfd);
fail_memfd:
    close(sock);
    free(ch);
    return err;
}

static void stage_clear(struct recep_channel *ch, struct recep_stage *st)
{
    if (st->buf)
        ch->staged_bytes -= st->total;
    free(st->buf);
    st->buf = NULL;
    st->kind = STAGE_NONE;
    st->len = st->total = 0;
}

/* A buffer of len bytes for slot st (cleared first), counted against the channel's budget; NULL
 * if over budget or out of memory. */
static unsigned char *stage_alloc(struct recep_channel *ch, struct recep_stage *st, uint32_t len)
{
    stage_clear(ch, st);
    /* A channel's budget (wire.h, WIRE_STAGE_ITEMS), over all its slots: values staged for
     * WIRE_OP_FETCH and stores being assembled. */
    if (ch->staged_bytes + len > (uint64_t)WIRE_STAGE_ITEMS * ch->max_item_size)
        return NULL;
    st->buf = malloc(len ? len : 1);
    if (!st->buf)
        return NULL;
    st->total = len;
    ch->staged_bytes += len;
    return st->buf;
}

void recep_channel_destroy(struct recep_channel *ch)
{
    if (!ch)
        return;
    for (unsigned i = 0; i < WIRE_SLOTS; i++)
        stage_clear(ch, &ch->stage[i]);
    close(ch->doorbell);
    munmap(ch->hdr, ch->map_bytes);
    close(ch->memfd);
    close(ch->sock);
    free(ch);
}

bool recep_channel_pending(const struct recep_channel *ch)
{
    return !ch->broken && wire_ring_pending(ch->hdr, ch->tail) != 0;
}

/* The engine's outcomes and the wire's first ones are the same list; spelled out so a change on
 * either side is a compile-time decision, not a silent shift. */
static uint16_t wire_status_of(int rc)
{
    switch (rc) {
    case NESSIE_OK: return WIRE_OK;
    case NESSIE_NOT_FOUND: return WIRE_NOT_FOUND;
    case NESSIE_NOT_STORED: return WIRE_NOT_STORED;
    case NESSIE_EXISTS: return WIRE_EXISTS;
    case NESSIE_NON_NUMERIC: return WIRE_NON_NUMERIC;
    case NESSIE_TOO_BIG: return WIRE_TOO_BIG;
    case NESSIE_NO_MEMORY: return WIRE_NO_MEMORY;
    case NESSIE_INDEX_FULL: return WIRE_INDEX_FULL;
    case NESSIE_TIMEOUT: return WIRE_TIMEOUT;
    case NESSIE_BAD_KEY: return WIRE_BAD_KEY;
    case NESSIE_FABRIC_ERROR: return WIRE_FABRIC_ERROR;
    default: return WIRE_INVALID;
    }
}


/* The request's part of the arena (checked by request_ok before anything uses it). */
static unsigned char *part(const struct recep_req *r)
{
    return r->ch->arena + r->rq.arena_off;
}

static struct recep_stage *stage_of(const struct recep_req *r)
{
    return &r->ch->stage[r->slot];
}

/* Copy `len` bytes of a value into the request's part at `off` as the reply's chunk; if it does
 * not fit, keep the whole value staged in the slot for WIRE_OP_FETCH. Returns the bytes placed. */
static uint32_t place_value(struct recep_req *r, uint32_t off, const void *v, uint32_t len,
                            bool *more)
{
    uint32_t room = r->rq.arena_len - off;
    *more = false;
    if (len <= room) {
        if (v != part(r) + off) /* else the engine read it there already */
            memcpy(part(r) + off, v, len);
        return len;
    }
    struct recep_stage *st = stage_of(r);
    unsigned char *buf = stage_alloc(r->ch, st, len);
    if (!buf) {
        r->rep.status = WIRE_NO_MEMORY;
        return 0;
    }
    memcpy(buf, v, len);
    st->kind = STAGE_FETCH;
    st->len = len;
    memcpy(part(r) + off, v, room);
    *more = true;
    return room;
}

/* A GET's answer, from nessie_get or nessie_get_multi. */
static void get_done(struct recep_req *r, int rc, const struct nessie_item *it)
{
    r->rep.status = wire_status_of(rc);
    if (rc != NESSIE_OK)
        return;
    bool more;
    r->rep.flags = it->flags;
    r->rep.version = it->version;
    r->rep.total_len = it->value_len;
    r->rep.chunk_len = place_value(r, 0, it->value, it->value_len, &more);
    if (more)
        r->rep.rflags |= WIRE_F_MORE;
}

static void do_fetch(struct recep_req *r)
{
    struct recep_stage *st = stage_of(r);
    const struct wire_req *rq = &r->rq;
    if (st->kind != STAGE_FETCH || rq->chunk_off >= st->total) {
        r->rep.status = WIRE_E_MALFORMED;
        return;
    }
    uint32_t left = st->total - rq->chunk_off;
    uint32_t n = left < rq->arena_len ? left : rq->arena_len;
    memcpy(part(r), st->buf + rq->chunk_off, n);
    r->rep.status = WIRE_OK;
    r->rep.chunk_len = n;
    r->rep.total_len = st->total;
    if (n < left)
        r->rep.rflags |= WIRE_F_MORE;
    else
        stage_clear(r->ch, st);
}

/*
 * memcached's rule for a SET that fails for want of room (too big, out of memory): it takes the
 * key's old value out, so that no stale value outlives the write that failed ("Avoid stale data
 * persisting in cache because we failed alloc", memcached.c; measured on 1.6.18, both protocols).
 * The other store forms leave the old value. The engine changes nothing on those errors, so the
 * daemon deletes; the DELETE's own outcome does not change the answer.
 */
static void set_failed_unlink(struct nessie_ctx *ctx, const struct wire_req *rq,
                              const unsigned char *key, int rc)
{
    if (rq->mode == WIRE_SET && (rc == NESSIE_TOO_BIG || rc == NESSIE_NO_MEMORY))
        nessie_delete(ctx, key, rq->key_len);
}

static int run_store(struct nessie_ctx *ctx, const struct wire_req *rq, const unsigned char *key,
                     const void *value, struct wire_rep *rep)
{
    static const enum nessie_store_mode modes[] = {
        [WIRE_SET] = NESSIE_SET,         [WIRE_ADD] = NESSIE_ADD,
        [WIRE_REPLACE] = NESSIE_REPLACE, [WIRE_CAS] = NESSIE_CAS,
        [WIRE_APPEND] = NESSIE_APPEND,   [WIRE_PREPEND] = NESSIE_PREPEND,
    };
    uint64_t version = 0;
    int rc = nessie_store(ctx, modes[rq->mode], key, rq->key_len, value, rq->total_len,
                          rq->flags, rq->exptime, rq->cas, &version);
    rep->version = version;
    set_failed_unlink(ctx, rq, key, rc);
    return rc;
}

static void do_store(struct recep_req *r, struct nessie_ctx *ctx)
{
    const struct wire_req *rq = &r->rq;
    struct wire_rep *rep = &r->rep;
    struct recep_stage *st = stage_of(r);
    if (rq->mode > WIRE_PREPEND || rq->chunk_off > rq->total_len ||
        rq->chunk_len > rq->total_len - rq->chunk_off) {
        rep->status = WIRE_E_MALFORMED;
        return;
    }
    if (rq->total_len > r->ch->max_item_size) {
        /* Nothing could hold it: refuse before buffering anything (the engine would too). */
        stage_clear(r->ch, st);
        set_failed_unlink(ctx, rq, r->key, NESSIE_TOO_BIG);
        rep->status = WIRE_TOO_BIG;
        return;
    }
    const unsigned char *chunk = part(r) + rq->key_len;
    if (rq->chunk_off == 0 && rq->chunk_len == rq->total_len) {
        stage_clear(r->ch, st);
        rep->status = wire_status_of(run_store(ctx, rq, r->key, chunk, rep));
        return;
    }
    if (rq->chunk_off == 0) {
        if (!stage_alloc(r->ch, st, rq->total_len)) {
            set_failed_unlink(ctx, rq, r->key, NESSIE_NO_MEMORY);
            rep->status = WIRE_NO_MEMORY;
            return;
        }
        st->kind = STAGE_STORE;
        st->klen = rq->key_len;
        memcpy(st->key, r->key, rq->key_len);
        st->req = *rq;
    } else if (st->kind != STAGE_STORE || rq->chunk_off != st->len ||
               rq->total_len != st->total || rq->key_len != st->klen ||
               memcmp(r->key, st->key, rq->key_len) != 0 || rq->mode != st->req.mode) {
        /* Not the continuation of the store being assembled: drop it, change nothing. */
        stage_clear(r->ch, st);
        rep->status = WIRE_E_MALFORMED;
        return;
    }
    memcpy(st->buf + rq->chunk_off, chunk, rq->chunk_len);
    st->len = rq->chunk_off + rq->chunk_len;
    if (st->len < st->total) {
        rep->status = WIRE_S_CONTINUE;
        return;
    }
    rep->status = wire_status_of(run_store(ctx, rq, r->key, st->buf, rep));
    stage_clear(r->ch, st);
}

/* MGET's reply under construction: hits packed as wire_mitem records from the part's start. */
struct mget_fill {
    struct recep_req *r;
    const unsigned char *keys;
    const uint16_t *offs;
    size_t base;    /* the request's index of the current window's first key */
    uint32_t off;
    bool stopped;   /* the reply is full, or failed: later answers are dropped (resent) */
};

/* One key's answer, in key order (nessie_get_multi's callback). */
static void mget_one(void *user, size_t wi, int status, const struct nessie_item *it)
{
    struct mget_fill *f = user;
    const size_t i = f->base + wi;
    struct recep_req *r = f->r;
    struct wire_rep *rep = &r->rep;
    const uint32_t room = r->rq.arena_len;
    if (f->stopped)
        return;
    if (status == NESSIE_NOT_FOUND || status == NESSIE_BAD_KEY) {
        rep->nkeys_done = (uint32_t)i + 1;
        return;
    }
    if (status != NESSIE_OK) {
        /* A failure ends the batch: the client reports it for the keys not done, or gets it on
         * its resend if hits came first. */
        if (rep->nitems == 0)
            rep->status = wire_status_of(status);
        f->stopped = true;
        return;
    }
    const unsigned char *k = f->keys + f->offs[i] + 1;
    uint8_t klen = f->keys[f->offs[i]];
    uint32_t head = (uint32_t)sizeof(struct wire_mitem) + klen;
    uint32_t need = (head + it->value_len + 7u) & ~7u;
    if ((uint64_t)f->off + need > room && (rep->nitems > 0 || (uint64_t)f->off + head + 8 > room)) {
        f->stopped = true; /* resent by the client */
        return;
    }
    struct wire_mitem mi = {.key_index = (uint16_t)i, .key_len = klen, .flags = it->flags,
                            .total_len = it->value_len, .version = it->version};
    bool more;
    mi.chunk_len = place_value(r, f->off + head, it->value, it->value_len, &more);
    if (rep->status != WIRE_OK) {
        f->stopped = true;
        return;
    }
    if (more)
        mi.rflags = WIRE_F_MORE;
    memcpy(part(r) + f->off, &mi, sizeof(mi));
    memcpy(part(r) + f->off + sizeof(mi), k, klen);
    f->off += (head + mi.chunk_len + 7u) & ~7u;
    rep->nitems++;
    rep->nkeys_done = (uint32_t)i + 1;
    if (more)
        f->stopped = true; /* the long value's rest is fetched; it ends the reply */
}

/* Keys handed to the engine per nessie_get_multi call: their first reads are in flight
 * together; a reply that fills up wastes at most this many lookups (the client resends). */
#define MGET_WINDOW 32

/* MGET: the keys are copied out of the part first (the reply overwrites it). Hits are packed as
 * wire_mitem records; a hit that does not fit ends the reply (the client resends the keys not
 * done), unless it is the reply's first, which then carries the start of its value. */
static void do_mget(struct recep_req *r, struct nessie_ctx *ctx)
{
    const struct wire_req *rq = &r->rq;
    struct wire_rep *rep = &r->rep;
    unsigned char *keys = malloc(rq->key_len ? rq->key_len : 1);
    uint16_t *offs = malloc(sizeof(*offs) * rq->nkeys);
    const void **kp = malloc(sizeof(*kp) * rq->nkeys);
    size_t *kl = malloc(sizeof(*kl) * rq->nkeys);
    if (!keys || !offs || !kp || !kl) {
        rep->status = WIRE_NO_MEMORY;
        goto out;
    }
    memcpy(keys, part(r), rq->key_len);
    uint32_t p = 0;
    for (uint16_t i = 0; i < rq->nkeys; i++) {
        if (p >= rq->key_len || keys[p] == 0 || p + 1u + keys[p] > rq->key_len) {
            rep->status = WIRE_E_MALFORMED;
            goto out;
        }
        offs[i] = (uint16_t)p;
        kp[i] = keys + p + 1;
        kl[i] = keys[p];
        p += 1u + keys[p];
    }
    if (p != rq->key_len) {
        rep->status = WIRE_E_MALFORMED;
        goto out;
    }
    rep->status = WIRE_OK;
    struct mget_fill f = {.r = r, .keys = keys, .offs = offs};
    for (f.base = 0; f.base < rq->nkeys && !f.stopped; f.base += MGET_WINDOW) {
        size_t n = rq->nkeys - f.base < MGET_WINDOW ? rq->nkeys - f.base : MGET_WINDOW;
        nessie_get_multi(ctx, n, kp + f.base, kl + f.base, mget_one, &f);
    }
out:
    free(keys);
    free(offs);
    free(kp);
    free(kl);
}

/* Slots a DUMP request examines at most: a header read each, and the index reads of the live
 * items among them, a few ms of a worker at most, during which its other channels wait; a region
 * of mostly free or replaced slots then takes more requests, never a long one. */
#define DUMP_SLOTS_PER_REQUEST 16384

/* DUMP's reply under construction: keys packed as [u8 len][bytes] from the part's start. */
struct dump_fill {
    struct recep_req *r;
    uint32_t off;
};

/* One key of the walk (nessie_dump_local's callback): false once the part or the count is full,
 * which leaves the key for the next chunk. */
static bool dump_one(void *user, const void *key, size_t klen)
{
    struct dump_fill *f = user;
    struct recep_req *r = f->r;
    if ((uint64_t)f->off + 1 + klen > r->rq.arena_len || r->rep.nitems == UINT16_MAX)
        return false;
    part(r)[f->off] = (unsigned char)klen;
    memcpy(part(r) + f->off + 1, key, klen);
    f->off += 1 + (uint32_t)klen;
    r->rep.nitems++;
    return true;
}

/* DUMP (wire.h "Dump"): the next chunk of this node's keys from req.cursor. The walk is the
 * engine's and keeps nothing here between requests, so a client that stops halfway costs
 * nothing. */
static void do_dump(struct recep_req *r, struct nessie_ctx *ctx)
{
    struct wire_rep *rep = &r->rep;
    if (r->rq.arena_len < 1 + WIRE_KEY_MAX) {
        rep->status = WIRE_E_MALFORMED; /* a key might never fit: the walk could not go on */
        return;
    }
    struct dump_fill f = {.r = r};
    uint64_t cursor = r->rq.cursor;
    int rc = nessie_dump_local(ctx, &cursor, DUMP_SLOTS_PER_REQUEST, dump_one, &f);
    if (rc == NESSIE_INVALID) {
        rep->status = WIRE_E_MALFORMED; /* the cursor, the one argument that is the client's */
        rep->nitems = 0;
        return;
    }
    rep->status = wire_status_of(rc);
    rep->chunk_len = f.off;
    rep->cursor = cursor;
    if (cursor != 0)
        rep->rflags |= WIRE_F_MORE;
}

static bool is_key_op(uint16_t op)
{
    return op == WIRE_OP_GET || op == WIRE_OP_STORE || op == WIRE_OP_DELETE ||
           op == WIRE_OP_ARITH || op == WIRE_OP_TOUCH;
}

/*
 * Check what a request says about the arena, and read a single-key request's key (once: the
 * client may scribble on the arena meanwhile). Drops the slot's staged value when the request is
 * not its continuation. Returns false with rep->status set if the request cannot run.
 */
static bool request_ok(struct recep_req *r)
{
    const struct wire_req *rq = &r->rq;
    struct wire_rep *rep = &r->rep;
    struct recep_stage *st = stage_of(r);
    if ((st->kind == STAGE_FETCH && rq->op != WIRE_OP_FETCH) ||
        (st->kind == STAGE_STORE && rq->op != WIRE_OP_STORE))
        stage_clear(r->ch, st);
    if (rq->arena_off > r->ch->arena_bytes || rq->arena_len > r->ch->arena_bytes - rq->arena_off ||
        rq->arena_len == 0) {
        rep->status = WIRE_E_MALFORMED;
        return false;
    }
    if (is_key_op(rq->op)) {
        if ((uint64_t)rq->key_len + rq->chunk_len > rq->arena_len) {
            rep->status = WIRE_E_MALFORMED;
            return false;
        }
        if (rq->key_len == 0 || rq->key_len > WIRE_KEY_MAX) {
            rep->status = WIRE_BAD_KEY;
            return false;
        }
        memcpy(r->key, part(r), rq->key_len);
    }
    return true;
}

/* Run one request that is not a GET going through the batch. */
static void dispatch(struct recep_req *r, struct nessie_ctx *ctx)
{
    const struct wire_req *rq = &r->rq;
    struct wire_rep *rep = &r->rep;
    switch (rq->op) {
    case WIRE_OP_GET: {
        /* A large value is read by the fabric straight into the request's part of the arena. */
        struct nessie_item it;
        int rc = nessie_get_into(ctx, r->key, rq->key_len, part(r), rq->arena_len, &it);
        get_done(r, rc, &it);
        break;
    }
    case WIRE_OP_STORE:
        do_store(r, ctx);
        break;
    case WIRE_OP_DELETE:
        rep->status = wire_status_of(nessie_delete(ctx, r->key, rq->key_len));
        break;
    case WIRE_OP_ARITH:
        if (rq->mode > 1) {
            rep->status = WIRE_E_MALFORMED;
            break;
        }
        rep->status = wire_status_of(nessie_arith(ctx, r->key, rq->key_len, rq->mode == 1,
                                                  rq->delta, &rep->number, &rep->version));
        break;
    case WIRE_OP_TOUCH:
        rep->status = wire_status_of(nessie_touch(ctx, r->key, rq->key_len, rq->exptime));
        break;
    case WIRE_OP_MGET:
        if (rq->nkeys == 0 || rq->key_len > rq->arena_len) {
            rep->status = WIRE_E_MALFORMED;
            break;
        }
        do_mget(r, ctx);
        break;
    case WIRE_OP_FLUSH:
        rep->status = wire_status_of(nessie_flush_delayed(ctx, rq->exptime));
        break;
    case WIRE_OP_FETCH:
        do_fetch(r);
        break;
    case WIRE_OP_NOOP:
        if (rq->mode == WIRE_NOOP_RECONNECT)
            __atomic_fetch_add(&reconnects, 1, __ATOMIC_RELAXED);
        rep->status = WIRE_OK;
        break;
    case WIRE_OP_DUMP:
        do_dump(r, ctx);
        break;
    default:
        rep->status = WIRE_E_UNKNOWN_OP;
        break;
    }
}

/* Post r's reply: into its slot, then the state that hands the slot back (wire_sync.h). Returns
 * true if it had to wake the client (the worker's spin budget counts the client's wake-up then). */
static bool reply(struct recep_req *r)
{
    struct recep_channel *ch = r->ch;
    if (r->rep.status >= WIRE_E_MALFORMED)
        log_debug("channel %llu (pid %d): slot %u op %u refused: status %u",
                  (unsigned long long)ch->id, (int)ch->pid, r->slot, r->rq.op, r->rep.status);
    r->rep.done_ns = wire_now_ns();
    uint64_t busy = r->rep.done_ns - r->taken_ns;
    r->rep.busy_ns = busy > UINT32_MAX ? UINT32_MAX : (uint32_t)busy;
    memcpy(&ch->hdr->slot[r->slot].rep, &r->rep, sizeof(r->rep));
    ch->requests++;
    return wire_reply(ch->hdr, r->slot);
}

size_t recep_channel_take(struct recep_channel *ch, struct recep_req *out, size_t max)
{
    if (ch->broken)
        return 0;
    uint32_t avail = wire_ring_pending(ch->hdr, ch->tail);
    size_t n = 0;
    if (avail > WIRE_SLOTS)
        goto broken; /* more in flight than there are slots */
    uint64_t now = avail ? wire_now_ns() : 0;
    for (; n < max && n < avail; n++) {
        int idx = wire_ring_take(ch->hdr, &ch->tail);
        if (idx < 0)
            goto broken;
        struct recep_req *r = &out[n];
        r->ch = ch;
        r->slot = (uint16_t)idx;
        memcpy(&r->rq, &ch->hdr->slot[idx].req, sizeof(r->rq));
        r->rep = (struct wire_rep){.seq = r->rq.seq};
        r->taken_ns = now;
    }
    return n;
broken:
    log_warn("channel %llu (pid %d): its request ring is corrupt (head %u, tail %u); closing it",
             (unsigned long long)ch->id, (int)ch->pid, __atomic_load_n(&ch->hdr->sq_head,
                                                                      __ATOMIC_RELAXED), ch->tail);
    wire_break(ch->hdr, WIRE_E_MALFORMED);
    ch->broken = ch->dead = true;
    return n;
}

/* The batch's GETs, handed to nessie_get_multi together, and whether a reply woke its client. */
struct get_batch {
    struct recep_req **reqs;
    bool woke;
};

static void batch_get_one(void *user, size_t i, int status, const struct nessie_item *it)
{
    struct get_batch *b = user;
    get_done(b->reqs[i], status, it);
    b->woke |= reply(b->reqs[i]);
}

/* Run the GETs gathered so far together, each replied as soon as it is answered. Returns true if
 * a reply woke its client. */
static bool run_gets(struct recep_req **gets, const void **kp, size_t *kl, void **bufs,
                     size_t *caps, size_t ng, struct nessie_ctx *ctx)
{
    if (ng == 1) {
        dispatch(gets[0], ctx);
        return reply(gets[0]);
    }
    struct get_batch b = {.reqs = gets};
    if (ng > 1 &&
        nessie_get_multi_into(ctx, ng, kp, kl, bufs, caps, batch_get_one, &b) != NESSIE_OK) {
        for (size_t i = 0; i < ng; i++) {
            gets[i]->rep.status = WIRE_INVALID;
            b.woke |= reply(gets[i]);
        }
    }
    return b.woke;
}

bool recep_channel_run(struct recep_req *reqs, size_t n, struct nessie_ctx *ctx)
{
    bool woke = false;
    struct recep_req *gets[n ? n : 1];
    const void *kp[n ? n : 1];
    size_t kl[n ? n : 1];
    void *bufs[n ? n : 1];  /* where each GET's value is read: its part of the arena */
    size_t caps[n ? n : 1];
    size_t ng = 0;
    for (size_t i = 0; i < n; i++) {
        struct recep_req *r = &reqs[i];
        if (!request_ok(r)) {
            woke |= reply(r);
            continue;
        }
        if (r->rq.op == WIRE_OP_GET) {
            gets[ng] = r;
            kp[ng] = r->key;
            kl[ng] = r->rq.key_len;
            bufs[ng] = part(r);
            caps[ng] = r->rq.arena_len;
            ng++;
            continue;
        }
        /* Anything else runs after the GETs posted before it: a channel's requests take effect
         * in the order it posted them, as on one memcached connection. */
        woke |= run_gets(gets, kp, kl, bufs, caps, ng, ctx);
        ng = 0;
        dispatch(r, ctx);
        woke |= reply(r);
    }
    return run_gets(gets, kp, kl, bufs, caps, ng, ctx) | woke;
}
