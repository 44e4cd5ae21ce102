/*
 * channel.c - serving one client channel: wire.h requests run through the engine.
 *
 * Memory orderings: `state`, `client_waiting` and `worker_parked` are accessed with __atomic
 * builtins. The reply is published by a seq_cst store of WIRE_ST_REPLY (which also orders the
 * reply's plain stores before it, as a release would); the following load of client_waiting is
 * seq_cst so that it cannot be reordered before that store (Dekker with the client's
 * store-client_waiting / load-state pair): either we see the client waiting and wake it, or it
 * sees the reply before sleeping.
 */
#include "channel.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

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
    ch->memfd = memfd_create("nessie-channel", MFD_CLOEXEC);
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
    ch->hdr->arena_bytes = arena_bytes;
    ch->hdr->max_item_size = max_item_size;
    __atomic_store_n(&ch->hdr->state, WIRE_ST_IDLE, __ATOMIC_RELEASE);
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

static void stage_clear(struct recep_channel *ch)
{
    free(ch->stage_buf);
    ch->stage_buf = NULL;
    ch->stage = STAGE_NONE;
    ch->stage_len = ch->stage_total = 0;
}

void recep_channel_destroy(struct recep_channel *ch)
{
    if (!ch)
        return;
    stage_clear(ch);
    close(ch->doorbell);
    munmap(ch->hdr, ch->map_bytes);
    close(ch->memfd);
    close(ch->sock);
    free(ch);
}

bool recep_channel_pending(const struct recep_channel *ch)
{
    return __atomic_load_n(&ch->hdr->state, __ATOMIC_ACQUIRE) == WIRE_ST_REQUEST;
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

/* Copy `len` bytes of a value into the arena at `off` as the reply's chunk; if it does not fit,
 * keep the whole value staged for WIRE_OP_FETCH. Returns the bytes placed. */
static uint32_t place_value(struct recep_channel *ch, uint32_t off, const void *v, uint32_t len,
                            struct wire_rep *rep, bool *more)
{
    uint32_t room = ch->arena_bytes - off;
    *more = false;
    if (len <= room) {
        memcpy(ch->arena + off, v, len);
        return len;
    }
    unsigned char *buf = malloc(len);
    if (!buf) {
        rep->status = WIRE_NO_MEMORY;
        return 0;
    }
    memcpy(buf, v, len);
    stage_clear(ch);
    ch->stage = STAGE_FETCH;
    ch->stage_buf = buf;
    ch->stage_len = ch->stage_total = len;
    memcpy(ch->arena + off, v, room);
    *more = true;
    return room;
}

static void do_get(struct recep_channel *ch, struct nessie_ctx *ctx, const unsigned char *key,
                   uint16_t klen, struct wire_rep *rep)
{
    struct nessie_item it;
    int rc = nessie_get(ctx, key, klen, &it);
    rep->status = wire_status_of(rc);
    if (rc != NESSIE_OK)
        return;
    bool more;
    rep->flags = it.flags;
    rep->version = it.version;
    rep->total_len = it.value_len;
    rep->chunk_len = place_value(ch, 0, it.value, it.value_len, rep, &more);
    if (more)
        rep->rflags |= WIRE_F_MORE;
}

static void do_fetch(struct recep_channel *ch, const struct wire_req *rq, struct wire_rep *rep)
{
    if (ch->stage != STAGE_FETCH || rq->chunk_off >= ch->stage_total) {
        rep->status = WIRE_E_MALFORMED;
        return;
    }
    uint32_t left = ch->stage_total - rq->chunk_off;
    uint32_t n = left < ch->arena_bytes ? left : ch->arena_bytes;
    memcpy(ch->arena, ch->stage_buf + rq->chunk_off, n);
    rep->status = WIRE_OK;
    rep->chunk_len = n;
    rep->total_len = ch->stage_total;
    if (n < left)
        rep->rflags |= WIRE_F_MORE;
    else
        stage_clear(ch);
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
    return rc;
}

static void do_store(struct recep_channel *ch, struct nessie_ctx *ctx, const struct wire_req *rq,
                     const unsigned char *key, struct wire_rep *rep)
{
    if (rq->mode > WIRE_PREPEND || rq->chunk_off > rq->total_len ||
        rq->chunk_len > rq->total_len - rq->chunk_off) {
        rep->status = WIRE_E_MALFORMED;
        return;
    }
    if (rq->total_len > ch->max_item_size) {
        /* Nothing could hold it: refuse before buffering anything (the engine would too). */
        stage_clear(ch);
        rep->status = WIRE_TOO_BIG;
        return;
    }
    const unsigned char *chunk = ch->arena + rq->key_len;
    if (rq->chunk_off == 0 && rq->chunk_len == rq->total_len) {
        stage_clear(ch);
        rep->status = wire_status_of(run_store(ctx, rq, key, chunk, rep));
        return;
    }
    if (rq->chunk_off == 0) {
        stage_clear(ch);
        ch->stage_buf = malloc(rq->total_len);
        if (!ch->stage_buf) {
            rep->status = WIRE_NO_MEMORY;
            return;
        }
        ch->stage = STAGE_STORE;
        ch->stage_total = rq->total_len;
        ch->stage_klen = rq->key_len;
        memcpy(ch->stage_key, key, rq->key_len);
        ch->stage_req = *rq;
    } else if (ch->stage != STAGE_STORE || rq->chunk_off != ch->stage_len ||
               rq->total_len != ch->stage_total || rq->key_len != ch->stage_klen ||
               memcmp(key, ch->stage_key, rq->key_len) != 0 || rq->mode != ch->stage_req.mode) {
        /* Not the continuation of the store being assembled: drop it, change nothing. */
        stage_clear(ch);
        rep->status = WIRE_E_MALFORMED;
        return;
    }
    memcpy(ch->stage_buf + rq->chunk_off, chunk, rq->chunk_len);
    ch->stage_len = rq->chunk_off + rq->chunk_len;
    if (ch->stage_len < ch->stage_total) {
        rep->status = WIRE_S_CONTINUE;
        return;
    }
    rep->status = wire_status_of(run_store(ctx, rq, key, ch->stage_buf, rep));
    stage_clear(ch);
}

/* MGET's reply under construction: hits packed as wire_mitem records from the arena's start. */
struct mget_fill {
    struct recep_channel *ch;
    struct wire_rep *rep;
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
    struct recep_channel *ch = f->ch;
    struct wire_rep *rep = f->rep;
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
    if (f->off + need > ch->arena_bytes && (rep->nitems > 0 || f->off + head + 8 > ch->arena_bytes)) {
        f->stopped = true; /* resent by the client */
        return;
    }
    struct wire_mitem mi = {.key_index = (uint16_t)i, .key_len = klen, .flags = it->flags,
                            .total_len = it->value_len, .version = it->version};
    bool more;
    mi.chunk_len = place_value(ch, f->off + head, it->value, it->value_len, rep, &more);
    if (rep->status != WIRE_OK) {
        f->stopped = true;
        return;
    }
    if (more)
        mi.rflags = WIRE_F_MORE;
    memcpy(ch->arena + f->off, &mi, sizeof(mi));
    memcpy(ch->arena + f->off + sizeof(mi), k, klen);
    f->off += (head + mi.chunk_len + 7u) & ~7u;
    rep->nitems++;
    rep->nkeys_done = (uint32_t)i + 1;
    if (more)
        f->stopped = true; /* the long value's rest is fetched; it ends the reply */
}

/* Keys handed to the engine per nessie_get_multi call: their first reads are in flight
 * together; a reply that fills up wastes at most this many lookups (the client resends). */
#define MGET_WINDOW 32

/* MGET: the keys are copied out of the arena first (the reply overwrites it). Hits are packed as
 * wire_mitem records; a hit that does not fit ends the reply (the client resends the keys not
 * done), unless it is the reply's first, which then carries the start of its value. */
static void do_mget(struct recep_channel *ch, struct nessie_ctx *ctx, const struct wire_req *rq,
                    struct wire_rep *rep)
{
    unsigned char *keys = malloc(rq->key_len ? rq->key_len : 1);
    uint16_t *offs = malloc(sizeof(*offs) * rq->nkeys);
    const void **kp = malloc(sizeof(*kp) * rq->nkeys);
    size_t *kl = malloc(sizeof(*kl) * rq->nkeys);
    if (!keys || !offs || !kp || !kl) {
        rep->status = WIRE_NO_MEMORY;
        goto out;
    }
    memcpy(keys, ch->arena, rq->key_len);
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
    struct mget_fill f = {.ch = ch, .rep = rep, .keys = keys, .offs = offs};
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

/* Check what every single-key request shares: a key, and key + chunk inside the arena. */
static bool key_request_ok(const struct recep_channel *ch, const struct wire_req *rq,
                           struct wire_rep *rep)
{
    if ((uint64_t)rq->key_len + rq->chunk_len > ch->arena_bytes) {
        rep->status = WIRE_E_MALFORMED;
        return false;
    }
    if (rq->key_len == 0 || rq->key_len > WIRE_KEY_MAX) {
        rep->status = WIRE_BAD_KEY;
        return false;
    }
    return true;
}

static void dispatch(struct recep_channel *ch, struct nessie_ctx *ctx, const struct wire_req *rq,
                     struct wire_rep *rep)
{
    unsigned char key[WIRE_KEY_MAX];
    if (ch->stage == STAGE_FETCH && rq->op != WIRE_OP_FETCH)
        stage_clear(ch);
    if (ch->stage == STAGE_STORE && rq->op != WIRE_OP_STORE)
        stage_clear(ch);
    switch (rq->op) {
    case WIRE_OP_GET:
    case WIRE_OP_STORE:
    case WIRE_OP_DELETE:
    case WIRE_OP_ARITH:
    case WIRE_OP_TOUCH:
        if (!key_request_ok(ch, rq, rep))
            return;
        /* The key is read once, here: the client may scribble on the arena meanwhile. */
        memcpy(key, ch->arena, rq->key_len);
        break;
    default:
        break;
    }
    switch (rq->op) {
    case WIRE_OP_GET:
        do_get(ch, ctx, key, rq->key_len, rep);
        break;
    case WIRE_OP_STORE:
        do_store(ch, ctx, rq, key, rep);
        break;
    case WIRE_OP_DELETE:
        rep->status = wire_status_of(nessie_delete(ctx, key, rq->key_len));
        break;
    case WIRE_OP_ARITH:
        if (rq->mode > 1) {
            rep->status = WIRE_E_MALFORMED;
            break;
        }
        rep->status = wire_status_of(nessie_arith(ctx, key, rq->key_len, rq->mode == 1,
                                                  rq->delta, &rep->number, &rep->version));
        break;
    case WIRE_OP_TOUCH:
        rep->status = wire_status_of(nessie_touch(ctx, key, rq->key_len, rq->exptime));
        break;
    case WIRE_OP_MGET:
        if (rq->nkeys == 0 || rq->key_len > ch->arena_bytes) {
            rep->status = WIRE_E_MALFORMED;
            break;
        }
        do_mget(ch, ctx, rq, rep);
        break;
    case WIRE_OP_FLUSH:
        rep->status = wire_status_of(nessie_flush(ctx));
        break;
    case WIRE_OP_FETCH:
        do_fetch(ch, rq, rep);
        break;
    case WIRE_OP_NOOP:
        rep->status = WIRE_OK;
        break;
    default:
        rep->status = WIRE_E_UNKNOWN_OP;
        break;
    }
}

bool recep_channel_serve(struct recep_channel *ch, struct nessie_ctx *ctx)
{
    uint32_t expect = WIRE_ST_REQUEST;
    if (!__atomic_compare_exchange_n(&ch->hdr->state, &expect, WIRE_ST_BUSY, false,
                                     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return false;
    struct wire_req rq;
    memcpy(&rq, &ch->hdr->req, sizeof(rq)); /* one copy: the client may change it meanwhile */
    struct wire_rep rep = {.seq = rq.seq};
    dispatch(ch, ctx, &rq, &rep);
    if (rep.status >= WIRE_E_MALFORMED)
        log_debug("channel %llu (pid %d): request op %u refused: status %u",
                  (unsigned long long)ch->id, (int)ch->pid, rq.op, rep.status);
    memcpy(&ch->hdr->rep, &rep, sizeof(rep));
    ch->requests++;
    __atomic_store_n(&ch->hdr->state, WIRE_ST_REPLY, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&ch->hdr->client_waiting, __ATOMIC_SEQ_CST))
        syscall(SYS_futex, &ch->hdr->state, FUTEX_WAKE, 1, NULL, NULL, 0);
    return true;
}
