/*
 * channel.c - client side of wire.h.
 *
 * A channel has WIRE_SLOTS slots; this side uses slot 0 for the blocking calls and slots
 * 1..SHIM_CH_ASYNC for asynchronous requests (the non-blocking API). The arena is shared out by
 * this side, which alone decides where a request's key, value and reply go: an async slot owns a
 * fixed part of the arena's upper half; a blocking call uses the whole arena when no async request
 * is in flight, else the lower half. The ring, the states and their orderings, and the wait
 * policy are include/nessie/wire_sync.h's.
 */
#include "channel.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <nessie/wire_sync.h>

/* While asleep, look at the socket this often: a daemon killed mid-request never wakes us. */
#define LIVENESS_MS 100
/* Keys per MGET request (key_len, the packed keys' bytes, is 16 bits anyway). */
#define MGET_BATCH 1024
/* An async slot's part smaller than this (a tiny configured arena) is not worth having: async
 * posts then return -E2BIG and the caller runs them blocking. */
#define ASYNC_PART_MIN 1024
#define SYNC_SLOT 0

_Static_assert(SHIM_CH_ASYNC < WIRE_SLOTS, "async slots and the blocking one fit the ring");

struct shim_ch {
    int sock;
    int doorbell;
    int memfd;
    struct wire_channel *hdr;
    unsigned char *arena;
    size_t map_bytes;
    uint32_t arena_bytes;
    uint32_t max_item_size;
    uint32_t async_part;       /* bytes of each async slot's part; 0: no async slots */
    uint32_t head;             /* ring entries posted */
    uint64_t seq;
    uint64_t async_busy;       /* bit i: async slot i posted and not released */
    uint64_t slot_seq[WIRE_SLOTS];
    uint64_t posted_ns[WIRE_SLOTS];
    bool rang[WIRE_SLOTS];     /* the worker was parked when this slot was posted */
    bool answered[WIRE_SLOTS]; /* its reply was taken (an async ticket not yet released) */
    unsigned in_flight;        /* posted and not yet answered */
    uint64_t last_reply_ns;    /* when the last reply was taken with nothing else in flight */
    struct wire_est service;   /* how long a running worker takes to answer */
    struct wire_est think;     /* from a reply to our next request */
    struct wire_est worker_wake; /* how long a parked worker takes to take a request */
    struct wire_est own_wake;  /* how long we take to see a reply once we sleep */
    enum wire_wait_mode mode;
    bool dead;
};

static int connect_to(const char *path, int *fd_out)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    *fd_out = fd;
    return 0;
}

static int send_hello(int fd, uint16_t kind)
{
    struct wire_hello h = {.magic = WIRE_MAGIC, .version = WIRE_VERSION, .kind = kind};
    if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h))
        return -errno;
    return 0;
}

int shim_ch_open(const char *path, struct shim_ch **out)
{
    int fd, rc;
    if ((rc = connect_to(path, &fd)) != 0)
        return rc;
    if ((rc = send_hello(fd, WIRE_HELLO_CHANNEL)) != 0)
        goto fail;
    struct wire_welcome w;
    struct iovec iov = {.iov_base = &w, .iov_len = sizeof(w)};
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = sizeof(u.buf)};
    ssize_t n;
    do
        n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    int fds[2] = {-1, -1};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
        cm->cmsg_len == CMSG_LEN(2 * sizeof(int)))
        memcpy(fds, CMSG_DATA(cm), sizeof(fds));
    if (n != (ssize_t)sizeof(w) || w.magic != WIRE_MAGIC) {
        rc = n < 0 ? -errno : -EPROTO;
        goto fail_fds;
    }
    if (w.status != WIRE_OK || fds[0] < 0 || fds[1] < 0) {
        rc = w.status != WIRE_OK ? w.status : -EPROTO;
        goto fail_fds;
    }
    struct shim_ch *ch = calloc(1, sizeof(*ch));
    if (!ch) {
        rc = -ENOMEM;
        goto fail_fds;
    }
    void *m = mmap(NULL, w.channel_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    if (m == MAP_FAILED) {
        rc = -errno;
        free(ch);
        goto fail_fds;
    }
    ch->sock = fd;
    ch->memfd = fds[0];
    ch->doorbell = fds[1];
    ch->hdr = m;
    ch->map_bytes = w.channel_bytes;
    ch->arena = (unsigned char *)m + WIRE_ARENA_OFFSET;
    ch->arena_bytes = w.arena_bytes;
    ch->max_item_size = w.max_item_size;
    ch->mode = wire_wait_mode_parse(getenv("NESSIE_WAIT"));
    uint32_t part = (ch->arena_bytes / 2 / SHIM_CH_ASYNC) & ~7u;
    ch->async_part = part >= ASYNC_PART_MIN ? part : 0;
    if (ch->hdr->magic != WIRE_MAGIC || ch->hdr->version != WIRE_VERSION ||
        ch->hdr->nslots != WIRE_SLOTS || ch->hdr->arena_bytes != w.arena_bytes ||
        w.channel_bytes != WIRE_ARENA_OFFSET + (uint64_t)w.arena_bytes) {
        shim_ch_close(ch);
        return -EPROTO;
    }
    *out = ch;
    return WIRE_OK;

fail_fds:
    if (fds[0] >= 0)
        close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
fail:
    close(fd);
    return rc;
}

void shim_ch_close(struct shim_ch *ch)
{
    if (!ch)
        return;
    munmap(ch->hdr, ch->map_bytes);
    close(ch->memfd);
    close(ch->doorbell);
    close(ch->sock); /* the daemon sees the hang-up and frees its side */
    free(ch);
}

uint32_t shim_ch_arena_bytes(const struct shim_ch *ch) { return ch->arena_bytes; }
uint32_t shim_ch_max_item_size(const struct shim_ch *ch) { return ch->max_item_size; }

static bool daemon_gone(struct shim_ch *ch)
{
    if (__atomic_load_n(&ch->hdr->error, __ATOMIC_ACQUIRE) != 0)
        return true;
    struct pollfd p = {.fd = ch->sock, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLIN));
}

struct wire_channel *shim_ch_header(struct shim_ch *ch) { return ch->hdr; }

int shim_ch_region_fd(const struct shim_ch *ch) { return ch->memfd; }
int shim_ch_socket_fd(const struct shim_ch *ch) { return ch->sock; }

void shim_ch_kick(struct shim_ch *ch)
{
    uint64_t one = 1;
    if (write(ch->doorbell, &one, sizeof(one)) < 0)
        ch->dead = true;
}

unsigned shim_ch_async_busy(const struct shim_ch *ch)
{
    return (unsigned)__builtin_popcountll(ch->async_busy);
}

/* The arena part of slot idx now: where its key and value go and its reply comes back. */
static void part_of(const struct shim_ch *ch, unsigned idx, uint32_t *off, uint32_t *len)
{
    if (idx == SYNC_SLOT) {
        *off = 0;
        *len = ch->async_busy && ch->async_part ? ch->arena_bytes / 2 : ch->arena_bytes;
        return;
    }
    *off = ch->arena_bytes / 2 + (idx - 1) * ch->async_part;
    *len = ch->async_part;
}

static struct wire_req *slot_req(struct shim_ch *ch, unsigned idx)
{
    return &ch->hdr->slot[idx].req;
}

static unsigned char *slot_part(struct shim_ch *ch, unsigned idx)
{
    uint32_t off, len;
    part_of(ch, idx, &off, &len);
    return ch->arena + off;
}

/* Post slot idx with the arena part [off, off + len): its req is filled except seq and the part,
 * the part holds key and value. */
static int post_part(struct shim_ch *ch, unsigned idx, uint32_t off, uint32_t len)
{
    if (ch->dead)
        return -EPIPE;
    struct wire_req *rq = slot_req(ch, idx);
    rq->arena_off = off;
    rq->arena_len = len;
    rq->seq = ch->slot_seq[idx] = ++ch->seq;
    uint64_t now = wire_now_ns();
    if (ch->in_flight == 0 && ch->last_reply_ns) {
        wire_est_add(&ch->think, now - ch->last_reply_ns);
        wire_publish_hint(&ch->hdr->client_think_ns, ch->think.avg_ns);
    }
    ch->posted_ns[idx] = now;
    ch->answered[idx] = false;
    ch->in_flight++;
    ch->rang[idx] = wire_post(ch->hdr, &ch->head, (uint16_t)idx);
    if (ch->rang[idx]) {
        uint64_t one = 1;
        if (write(ch->doorbell, &one, sizeof(one)) < 0 && errno != EAGAIN) {
            ch->dead = true;
            return -errno;
        }
    }
    return 0;
}

/* Post slot idx with its part. */
static int post(struct shim_ch *ch, unsigned idx)
{
    uint32_t off, len;
    part_of(ch, idx, &off, &len);
    return post_part(ch, idx, off, len);
}

/* The reply of slot idx is there: take it; the slot is ours again (its part stays ours until
 * released, for async slots). */
static int take_reply(struct shim_ch *ch, unsigned idx, struct wire_rep *rep)
{
    struct wire_slot *sl = &ch->hdr->slot[idx];
    memcpy(rep, &sl->rep, sizeof(*rep));
    __atomic_store_n(&sl->state, WIRE_ST_IDLE, __ATOMIC_RELAXED);
    ch->answered[idx] = true;
    ch->in_flight--;
    uint64_t now = wire_now_ns();
    if (ch->in_flight == 0)
        ch->last_reply_ns = now;
    if (rep->seq != ch->slot_seq[idx]) {
        ch->dead = true;
        return -EPROTO;
    }
    /* Only answers of a running worker tell how long a running worker takes; those of a parked
     * one tell how long it takes to wake. */
    const uint64_t posted = ch->posted_ns[idx];
    if (rep->done_ns >= posted && rep->done_ns <= now) {
        if (!ch->rang[idx])
            wire_est_add(&ch->service, rep->done_ns - posted);
        else if (rep->done_ns - rep->busy_ns >= posted)
            wire_est_add(&ch->worker_wake, rep->done_ns - rep->busy_ns - posted);
    }
    return rep->status;
}

/* Wait for the reply of slot idx, as wire_sync.h's policy says: spin while it pays, else sleep
 * on the slot's state. */
static int wait_reply(struct shim_ch *ch, unsigned idx, struct wire_rep *rep)
{
    struct wire_slot *sl = &ch->hdr->slot[idx];
    if (ch->dead)
        return -EPIPE;
    if (wire_replied(ch->hdr, (uint16_t)idx))
        return take_reply(ch, idx, rep);
    uint32_t wcpu = __atomic_load_n(&ch->hdr->worker_cpu, __ATOMIC_RELAXED);
    uint64_t budget = wire_client_budget(ch->mode, &ch->service, &ch->worker_wake, ch->rang[idx],
                                         wcpu != 0 && wcpu == wire_cpu_tag());
    if (budget) {
        const uint64_t t0 = wire_now_ns();
        for (unsigned i = 1;; i++) {
            if (wire_replied(ch->hdr, (uint16_t)idx))
                return take_reply(ch, idx, rep);
            wire_cpu_relax();
            if (i % WIRE_SPIN_CLOCK_EVERY)
                continue;
            /* A worker that parked after we posted answers only after a wake-up: sleep too. */
            if (!ch->rang[idx] && __atomic_load_n(&ch->hdr->worker_parked, __ATOMIC_RELAXED))
                break;
            if (wire_now_ns() - t0 >= budget)
                break;
        }
    }
    __atomic_store_n(&sl->client_waiting, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        uint32_t st = __atomic_load_n(&sl->state, __ATOMIC_SEQ_CST);
        if (st == WIRE_ST_REPLY)
            break;
        int r = wire_futex_wait(&sl->state, st, LIVENESS_MS);
        if ((r == ETIMEDOUT || __atomic_load_n(&ch->hdr->error, __ATOMIC_ACQUIRE)) &&
            !wire_replied(ch->hdr, (uint16_t)idx) && daemon_gone(ch)) {
            __atomic_store_n(&sl->client_waiting, 0, __ATOMIC_RELAXED);
            ch->dead = true;
            return -EPIPE;
        }
    }
    /* The seq_cst load that saw REPLY acquired the reply: take it. */
    __atomic_store_n(&sl->client_waiting, 0, __ATOMIC_RELAXED);
    int rc = take_reply(ch, idx, rep);
    /* How long we took to wake: the worker's budget for our next request counts it. */
    uint64_t now = wire_now_ns();
    if (rc >= 0 && rep->done_ns <= now) {
        wire_est_add(&ch->own_wake, now - rep->done_ns);
        wire_publish_hint(&ch->hdr->client_wake_ns, ch->own_wake.avg_ns);
    }
    return rc;
}

/* Post slot idx and wait for its reply. */
static int roundtrip(struct shim_ch *ch, unsigned idx, struct wire_rep *rep)
{
    int rc = post(ch, idx);
    return rc < 0 ? rc : wait_reply(ch, idx, rep);
}

/* ---- asynchronous requests ------------------------------------------------------------------ */

/* A free async slot, or -EBUSY / -E2BIG (no async slots on this channel). */
static int async_slot(struct shim_ch *ch)
{
    if (ch->dead)
        return -EPIPE;
    if (!ch->async_part)
        return -E2BIG;
    for (unsigned i = 1; i <= SHIM_CH_ASYNC; i++)
        if (!(ch->async_busy & (1ULL << i)))
            return (int)i;
    return -EBUSY;
}

int shim_ch_post_store(struct shim_ch *ch, enum wire_store_mode mode, const void *key,
                       size_t klen, const void *value, size_t vlen, uint32_t flags,
                       int64_t exptime, int *ticket)
{
    if (klen == 0 || klen > WIRE_KEY_MAX)
        return WIRE_BAD_KEY;
    int idx = async_slot(ch);
    if (idx < 0)
        return idx;
    if (vlen > ch->async_part - klen)
        return -E2BIG;
    ch->async_busy |= 1ULL << idx;
    struct wire_req *rq = slot_req(ch, (unsigned)idx);
    *rq = (struct wire_req){.op = WIRE_OP_STORE, .mode = (uint16_t)mode, .key_len = (uint16_t)klen,
                            .flags = flags, .chunk_len = (uint32_t)vlen,
                            .total_len = (uint32_t)vlen, .exptime = exptime};
    unsigned char *p = slot_part(ch, (unsigned)idx);
    memcpy(p, key, klen);
    if (vlen)
        memcpy(p + klen, value, vlen);
    int rc = post(ch, (unsigned)idx);
    if (rc < 0) {
        ch->async_busy &= ~(1ULL << idx);
        return rc;
    }
    *ticket = idx;
    return 0;
}

int shim_ch_post_get(struct shim_ch *ch, const void *key, size_t klen, int *ticket)
{
    if (klen == 0 || klen > WIRE_KEY_MAX)
        return WIRE_BAD_KEY;
    int idx = async_slot(ch);
    if (idx < 0)
        return idx;
    ch->async_busy |= 1ULL << idx;
    struct wire_req *rq = slot_req(ch, (unsigned)idx);
    *rq = (struct wire_req){.op = WIRE_OP_GET, .key_len = (uint16_t)klen};
    memcpy(slot_part(ch, (unsigned)idx), key, klen);
    int rc = post(ch, (unsigned)idx);
    if (rc < 0) {
        ch->async_busy &= ~(1ULL << idx);
        return rc;
    }
    *ticket = idx;
    return 0;
}

/* A ticket posted and not released; answered: its reply was taken already. */
static bool ticket_ok(const struct shim_ch *ch, int ticket, bool answered)
{
    return ticket >= 1 && ticket <= SHIM_CH_ASYNC && (ch->async_busy & (1ULL << ticket)) &&
           ch->answered[ticket] == answered;
}

int shim_ch_poll(struct shim_ch *ch, int ticket, struct wire_rep *rep)
{
    if (!ticket_ok(ch, ticket, false))
        return -EINVAL;
    if (ch->dead)
        return -EPIPE;
    if (!wire_replied(ch->hdr, (uint16_t)ticket)) {
        if (daemon_gone(ch)) {
            ch->dead = true;
            return -EPIPE;
        }
        return 0;
    }
    int rc = take_reply(ch, (unsigned)ticket, rep);
    return rc < 0 ? rc : 1;
}

int shim_ch_wait(struct shim_ch *ch, int ticket, struct wire_rep *rep)
{
    if (!ticket_ok(ch, ticket, false))
        return -EINVAL;
    return wait_reply(ch, (unsigned)ticket, rep);
}

void shim_ch_release(struct shim_ch *ch, int ticket)
{
    if (ticket < 1 || ticket > SHIM_CH_ASYNC || !(ch->async_busy & (1ULL << ticket)))
        return;
    /* Not answered yet: the daemon still owns the slot and its part; wait for the answer (or
     * the channel's end) before they can be used again. */
    struct wire_rep rep;
    if (!ch->answered[ticket] && !ch->dead)
        wait_reply(ch, (unsigned)ticket, &rep);
    ch->async_busy &= ~(1ULL << ticket);
}

/* ---- values --------------------------------------------------------------------------------- */

static void *alloc_value(const struct shim_alloc *a, size_t n)
{
    return a ? a->alloc(a->user, n) : malloc(n);
}

static void release_value(const struct shim_alloc *a, void *p)
{
    if (a)
        a->release(a->user, p);
    else
        free(p);
}

/* The rest of a long value, through slot idx: WIRE_OP_FETCH from off until it is complete. */
static int fetch_rest(struct shim_ch *ch, unsigned idx, unsigned char *buf, uint32_t off,
                      uint32_t total)
{
    /* The chunks land in the blocking slot's part, free here (shim_ch_get_value is never called
     * inside a blocking call): half the arena, where an async slot's own part, a 64th of it,
     * took a round trip per 16 KiB (bench/flash-seed.sh: an iget of 256 KiB chunks took 4x the
     * blocking get). */
    uint32_t poff, plen;
    part_of(ch, SYNC_SLOT, &poff, &plen);
    while (off < total) {
        struct wire_rep rep;
        *slot_req(ch, idx) = (struct wire_req){.op = WIRE_OP_FETCH, .chunk_off = off};
        int rc = post_part(ch, idx, poff, plen);
        if (rc < 0 || (rc = wait_reply(ch, idx, &rep)) != WIRE_OK)
            return rc;
        if (rep.chunk_len == 0 || rep.chunk_len > total - off || rep.chunk_len > plen ||
            rep.total_len != total)
            return -EPROTO;
        memcpy(buf + off, ch->arena + poff, rep.chunk_len);
        off += rep.chunk_len;
    }
    return WIRE_OK;
}

/* A GET's value from slot idx's reply: one copy from the arena into the caller's memory. */
static int value_of(struct shim_ch *ch, unsigned idx, const struct wire_rep *rep,
                    const struct shim_alloc *a, struct shim_value *out)
{
    if (rep->status != WIRE_OK)
        return rep->status;
    uint32_t poff, plen;
    part_of(ch, idx, &poff, &plen);
    if (rep->chunk_len > rep->total_len || rep->chunk_len > plen)
        return -EPROTO;
    unsigned char *buf = alloc_value(a, (size_t)rep->total_len + 1);
    if (!buf) {
        /* The daemon holds the rest for this slot until its next request (wire.h): an empty
         * one lets it go now, or it would count against the channel's staging room (a long
         * value of another get refused) for as long as the slot stays unused. */
        if (rep->chunk_len < rep->total_len) {
            struct wire_rep r2;
            *slot_req(ch, idx) = (struct wire_req){.op = WIRE_OP_NOOP};
            (void)roundtrip(ch, idx, &r2);
        }
        return -ENOMEM;
    }
    memcpy(buf, ch->arena + poff, rep->chunk_len);
    int rc;
    if (rep->chunk_len < rep->total_len &&
        (rc = fetch_rest(ch, idx, buf, rep->chunk_len, rep->total_len)) != WIRE_OK) {
        release_value(a, buf);
        return rc;
    }
    buf[rep->total_len] = '\0';
    out->data = buf;
    out->len = rep->total_len;
    out->flags = rep->flags;
    out->version = rep->version;
    return WIRE_OK;
}

int shim_ch_get_value(struct shim_ch *ch, int ticket, const struct wire_rep *rep,
                      const struct shim_alloc *a, struct shim_value *out)
{
    if (!ticket_ok(ch, ticket, true))
        return -EINVAL;
    return value_of(ch, (unsigned)ticket, rep, a, out);
}

/* ---- blocking calls (slot 0) ---------------------------------------------------------------- */

int shim_ch_reconnected(struct shim_ch *ch)
{
    struct wire_rep rep;
    return shim_ch_raw(ch, &(struct wire_req){.op = WIRE_OP_NOOP, .mode = WIRE_NOOP_RECONNECT},
                       NULL, 0, &rep);
}

int shim_ch_raw(struct shim_ch *ch, const struct wire_req *req, const void *arena_data,
                size_t arena_len, struct wire_rep *rep)
{
    if (arena_len > ch->arena_bytes)
        return -EINVAL;
    if (ch->dead)
        return -EPIPE;
    struct wire_req *rq = slot_req(ch, SYNC_SLOT);
    memcpy(rq, req, sizeof(*req));
    if (arena_len)
        memcpy(ch->arena, arena_data, arena_len);
    /* As post(), but the arena part is the one given, if any (tests send bad ones). */
    uint32_t off = req->arena_off, len = req->arena_len;
    if (off == 0 && len == 0)
        part_of(ch, SYNC_SLOT, &off, &len);
    int rc = post_part(ch, SYNC_SLOT, off, len);
    if (rc < 0)
        return rc;
    return wait_reply(ch, SYNC_SLOT, rep);
}

/* Start a single-key request in the blocking slot: the key at the start of its part. */
static int key_req(struct shim_ch *ch, uint16_t op, const void *key, size_t klen)
{
    if (klen == 0 || klen > WIRE_KEY_MAX)
        return WIRE_BAD_KEY;
    *slot_req(ch, SYNC_SLOT) = (struct wire_req){.op = op, .key_len = (uint16_t)klen};
    memcpy(slot_part(ch, SYNC_SLOT), key, klen);
    return WIRE_OK;
}

int shim_ch_get(struct shim_ch *ch, const void *key, size_t klen, const struct shim_alloc *a,
                struct shim_value *out)
{
    struct wire_rep rep;
    int rc = key_req(ch, WIRE_OP_GET, key, klen);
    if (rc != WIRE_OK)
        return rc;
    if ((rc = roundtrip(ch, SYNC_SLOT, &rep)) != WIRE_OK)
        return rc;
    return value_of(ch, SYNC_SLOT, &rep, a, out);
}

int shim_ch_store(struct shim_ch *ch, enum wire_store_mode mode, const void *key, size_t klen,
                  const void *value, size_t vlen, uint32_t flags, int64_t exptime, uint64_t cas,
                  uint64_t *version_out)
{
    struct wire_rep rep;
    int rc = key_req(ch, WIRE_OP_STORE, key, klen);
    if (rc != WIRE_OK)
        return rc;
    if (vlen > UINT32_MAX)
        return WIRE_TOO_BIG;
    uint32_t poff, plen;
    part_of(ch, SYNC_SLOT, &poff, &plen);
    const uint32_t room = plen - (uint32_t)klen;
    uint32_t off = 0;
    do {
        uint32_t n = (uint32_t)vlen - off < room ? (uint32_t)vlen - off : room;
        *slot_req(ch, SYNC_SLOT) = (struct wire_req){
            .op = WIRE_OP_STORE, .mode = (uint16_t)mode, .key_len = (uint16_t)klen,
            .flags = flags, .exptime = exptime, .cas = cas, .total_len = (uint32_t)vlen,
            .chunk_off = off, .chunk_len = n};
        unsigned char *p = ch->arena + poff;
        memcpy(p, key, klen); /* the reply of the last chunk may have overwritten it */
        memcpy(p + klen, (const unsigned char *)value + off, n);
        rc = roundtrip(ch, SYNC_SLOT, &rep);
        off += n;
    } while (rc == WIRE_S_CONTINUE && off < vlen);
    if (rc == WIRE_S_CONTINUE)
        return -EPROTO;
    if (rc == WIRE_OK && version_out)
        *version_out = rep.version;
    return rc;
}

int shim_ch_delete(struct shim_ch *ch, const void *key, size_t klen)
{
    struct wire_rep rep;
    int rc = key_req(ch, WIRE_OP_DELETE, key, klen);
    return rc != WIRE_OK ? rc : roundtrip(ch, SYNC_SLOT, &rep);
}

int shim_ch_arith(struct shim_ch *ch, const void *key, size_t klen, int incr, uint64_t delta,
                  uint64_t *result)
{
    struct wire_rep rep;
    int rc = key_req(ch, WIRE_OP_ARITH, key, klen);
    if (rc != WIRE_OK)
        return rc;
    slot_req(ch, SYNC_SLOT)->mode = incr ? 1 : 0;
    slot_req(ch, SYNC_SLOT)->delta = delta;
    rc = roundtrip(ch, SYNC_SLOT, &rep);
    if (rc == WIRE_OK && result)
        *result = rep.number;
    return rc;
}

int shim_ch_touch(struct shim_ch *ch, const void *key, size_t klen, int64_t exptime)
{
    struct wire_rep rep;
    int rc = key_req(ch, WIRE_OP_TOUCH, key, klen);
    if (rc != WIRE_OK)
        return rc;
    slot_req(ch, SYNC_SLOT)->exptime = exptime;
    return roundtrip(ch, SYNC_SLOT, &rep);
}

int shim_ch_flush(struct shim_ch *ch, int64_t exptime)
{
    struct wire_rep rep;
    *slot_req(ch, SYNC_SLOT) = (struct wire_req){.op = WIRE_OP_FLUSH, .exptime = exptime};
    return roundtrip(ch, SYNC_SLOT, &rep);
}

int shim_ch_mget(struct shim_ch *ch, const void *const *keys, const size_t *klens, size_t n,
                 shim_hit_fn hit, void *user)
{
    size_t start = 0;
    uint32_t poff, plen;
    while (start < n) {
        part_of(ch, SYNC_SLOT, &poff, &plen);
        unsigned char *arena = ch->arena + poff;
        /* Pack keys [start, end) into the part. A key no memcached could hold is a miss. */
        uint32_t p = 0;
        size_t end = start;
        size_t map[MGET_BATCH];
        uint16_t nk = 0;
        for (; end < n && nk < MGET_BATCH; end++) {
            size_t kl = klens[end];
            if (kl == 0 || kl > WIRE_KEY_MAX)
                continue; /* a key no memcached could hold: a miss */
            if (p + 1 + kl > plen || p + 1 + kl > UINT16_MAX)
                break;
            arena[p] = (unsigned char)kl;
            memcpy(arena + p + 1, keys[end], kl);
            p += 1 + (uint32_t)kl;
            map[nk++] = end;
        }
        if (nk == 0)
            break; /* only bad keys were left */
        struct wire_rep rep;
        *slot_req(ch, SYNC_SLOT) = (struct wire_req){.op = WIRE_OP_MGET, .nkeys = nk,
                                                     .key_len = (uint16_t)p};
        int rc = roundtrip(ch, SYNC_SLOT, &rep);
        if (rc != WIRE_OK)
            return rc;
        if (rep.nkeys_done == 0 || rep.nkeys_done > nk)
            return -EPROTO;
        uint32_t off = 0;
        for (uint32_t i = 0; i < rep.nitems; i++) {
            struct wire_mitem mi;
            if (off + sizeof(mi) > plen)
                return -EPROTO;
            memcpy(&mi, arena + off, sizeof(mi));
            uint32_t head = (uint32_t)sizeof(mi) + mi.key_len;
            if (mi.key_index >= nk || mi.chunk_len > mi.total_len ||
                (uint64_t)off + head + mi.chunk_len > plen)
                return -EPROTO;
            unsigned char *buf = malloc((size_t)mi.total_len + 1);
            if (!buf)
                return -ENOMEM;
            memcpy(buf, arena + off + head, mi.chunk_len);
            if (mi.chunk_len < mi.total_len &&
                (rc = fetch_rest(ch, SYNC_SLOT, buf, mi.chunk_len, mi.total_len)) != WIRE_OK) {
                free(buf);
                return rc;
            }
            buf[mi.total_len] = '\0';
            struct shim_value v = {.data = buf, .len = mi.total_len, .flags = mi.flags,
                                   .version = mi.version};
            hit(user, map[mi.key_index], &v);
            off += (head + mi.chunk_len + 7u) & ~7u;
        }
        start = map[rep.nkeys_done - 1] + 1;
    }
    return WIRE_OK;
}

int shim_ch_dump(struct shim_ch *ch, uint64_t cursor, uint32_t part, shim_key_fn key,
                 void *user)
{
    bool partial = false;
    unsigned char *chunk = NULL;
    int rc;
    do {
        struct wire_rep rep;
        uint32_t poff, plen;
        part_of(ch, SYNC_SLOT, &poff, &plen);
        if (part && part < plen)
            plen = part;
        *slot_req(ch, SYNC_SLOT) = (struct wire_req){.op = WIRE_OP_DUMP, .cursor = cursor};
        rc = post_part(ch, SYNC_SLOT, poff, plen);
        if (rc == 0)
            rc = wait_reply(ch, SYNC_SLOT, &rep);
        if (rc != WIRE_OK && rc != WIRE_FABRIC_ERROR)
            goto out;
        partial |= rc == WIRE_FABRIC_ERROR;
        /* A cursor that does not move on would have us ask for the same chunk for ever. */
        rc = -EPROTO;
        if (rep.chunk_len > plen || ((rep.rflags & WIRE_F_MORE) != 0) != (rep.cursor != 0) ||
            (rep.cursor != 0 && rep.cursor == cursor))
            goto out;
        /* Out of the arena before any callback runs: a callback may well make calls of its own,
         * on this thread's channel, whose replies land in the same part. */
        unsigned char *grown = realloc(chunk, rep.chunk_len ? rep.chunk_len : 1);
        if (!grown) {
            rc = -ENOMEM;
            goto out;
        }
        chunk = grown;
        memcpy(chunk, ch->arena + poff, rep.chunk_len);
        uint32_t off = 0, i;
        for (i = 0; i < rep.nitems; i++) {
            if (off >= rep.chunk_len || chunk[off] == 0 || chunk[off] > WIRE_KEY_MAX ||
                off + 1u + chunk[off] > rep.chunk_len)
                goto out;
            off += 1u + chunk[off];
        }
        if (off != rep.chunk_len)
            goto out;
        for (off = 0, i = 0; i < rep.nitems; i++, off += 1u + chunk[off]) {
            char k[WIRE_KEY_MAX + 1];
            memcpy(k, chunk + off + 1, chunk[off]);
            k[chunk[off]] = '\0';
            if (!key(user, k, chunk[off])) {
                rc = WIRE_OK;
                goto out;
            }
        }
        cursor = rep.cursor;
    } while (cursor != 0);
    rc = partial ? WIRE_FABRIC_ERROR : WIRE_OK;
out:
    free(chunk);
    return rc;
}

int shim_stats(const char *path, char **text)
{
    int fd, rc;
    if ((rc = connect_to(path, &fd)) != 0)
        return rc;
    if ((rc = send_hello(fd, WIRE_HELLO_STATS)) != 0) {
        close(fd);
        return rc;
    }
    size_t len = 0, cap = 65536;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return -ENOMEM;
    }
    for (;;) {
        if (cap - len < 16385) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                rc = -ENOMEM;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EPROTO; /* closed before END */
            break;
        }
        len += (size_t)n;
        buf[len] = '\0';
        if (len >= 5 && strcmp(buf + len - 5, "END\r\n") == 0) {
            rc = WIRE_OK;
            break;
        }
        if (len == sizeof(struct wire_welcome) && ((struct wire_welcome *)(void *)buf)->magic ==
                                                      WIRE_MAGIC) {
            rc = ((struct wire_welcome *)(void *)buf)->status; /* refused */
            break;
        }
    }
    close(fd);
    if (rc != WIRE_OK) {
        free(buf);
        return rc;
    }
    *text = buf;
    return WIRE_OK;
}
