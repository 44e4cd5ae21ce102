/*
 * channel.c - client side of wire.h.
 *
 * Memory orderings: the request is published by a seq_cst store of WIRE_ST_REQUEST (ordering the
 * plain stores of req and arena before it), followed by a seq_cst load of worker_parked (Dekker
 * with the worker's park: see reception/worker.c). The reply is taken with an acquire load of
 * state == WIRE_ST_REPLY. Before sleeping, client_waiting is stored seq_cst and state re-loaded
 * seq_cst (Dekker with the worker's reply store and its load of client_waiting).
 */
#include "channel.h"

#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Busy-wait on the reply this long before sleeping: a small request finishes within a few
 * microseconds of the worker taking it and a large one (1 MiB) within ~200, while a futex
 * round trip costs ~60 us here (bench/limits.sh), so sleeping sooner would only add a
 * wake-up. Measured in time, not iterations: the cost of `pause` differs tenfold between CPUs. */
#define SPIN_NS 300000ULL
/* While asleep, look at the socket this often: a daemon killed mid-request never wakes us. */
#define LIVENESS_MS 100
/* Keys per MGET request (key_len, the packed keys' bytes, is 16 bits anyway). */
#define MGET_BATCH 1024

struct shim_ch {
    int sock;
    int doorbell;
    int memfd;
    struct wire_channel *hdr;
    unsigned char *arena;
    size_t map_bytes;
    uint32_t arena_bytes;
    uint32_t max_item_size;
    uint64_t seq;
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
    if (ch->hdr->magic != WIRE_MAGIC || ch->hdr->version != WIRE_VERSION ||
        ch->hdr->arena_bytes != w.arena_bytes || w.channel_bytes < WIRE_ARENA_OFFSET) {
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
    struct pollfd p = {.fd = ch->sock, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLIN));
}

/* Post hdr->req (already filled): publish it and ring the doorbell if the worker sleeps. */
static int post(struct shim_ch *ch)
{
    if (ch->dead)
        return -EPIPE;
    ch->hdr->req.seq = ++ch->seq;
    __atomic_store_n(&ch->hdr->state, WIRE_ST_REQUEST, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&ch->hdr->worker_parked, __ATOMIC_SEQ_CST)) {
        uint64_t one = 1;
        if (write(ch->doorbell, &one, sizeof(one)) < 0 && errno != EAGAIN) {
            ch->dead = true;
            return -errno;
        }
    }
    return 0;
}

/* The reply is there: take it and free the channel for the next request. */
static int take_reply(struct shim_ch *ch, struct wire_rep *rep)
{
    memcpy(rep, &ch->hdr->rep, sizeof(*rep));
    __atomic_store_n(&ch->hdr->state, WIRE_ST_IDLE, __ATOMIC_RELEASE);
    if (rep->seq != ch->seq) {
        ch->dead = true;
        return -EPROTO;
    }
    return rep->status;
}

static uint64_t spin_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Wait for the reply of the posted request. */
static int wait_reply(struct shim_ch *ch, struct wire_rep *rep)
{
    uint32_t st = 0;
    uint64_t t0 = 0;
    for (unsigned i = 0;; i++) {
        st = __atomic_load_n(&ch->hdr->state, __ATOMIC_ACQUIRE);
        if (st == WIRE_ST_REPLY)
            return take_reply(ch, rep);
        __builtin_ia32_pause();
        /* Read the clock only now and then: it costs more than the load. */
        if ((i & 63) == 63) {
            /* Let whatever else wants this CPU run (the worker serving us, when there are more
             * runnable threads than cores): with nothing else runnable this returns at once. */
            sched_yield();
            uint64_t t = spin_clock_ns();
            if (t0 == 0)
                t0 = t;
            else if (t - t0 >= SPIN_NS)
                break;
        }
    }
    __atomic_store_n(&ch->hdr->client_waiting, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        st = __atomic_load_n(&ch->hdr->state, __ATOMIC_SEQ_CST);
        if (st == WIRE_ST_REPLY)
            break;
        struct timespec ts = {0, LIVENESS_MS * 1000000L};
        /* A shared futex (no FUTEX_PRIVATE_FLAG): the word lives in a mapping of two processes. */
        long r = syscall(SYS_futex, &ch->hdr->state, FUTEX_WAIT, st, &ts, NULL, 0);
        if (r != 0 && errno == ETIMEDOUT && daemon_gone(ch)) {
            __atomic_store_n(&ch->hdr->client_waiting, 0, __ATOMIC_RELAXED);
            ch->dead = true;
            return -EPIPE;
        }
    }
    __atomic_store_n(&ch->hdr->client_waiting, 0, __ATOMIC_RELAXED);
    return take_reply(ch, rep);
}

/* Post hdr->req (already filled) and wait for the reply. */
static int roundtrip(struct shim_ch *ch, struct wire_rep *rep)
{
    int rc = post(ch);
    return rc < 0 ? rc : wait_reply(ch, rep);
}

int shim_ch_post_store(struct shim_ch *ch, enum wire_store_mode mode, const void *key,
                       size_t klen, const void *value, size_t vlen, uint32_t flags,
                       int64_t exptime)
{
    if (klen == 0 || klen > WIRE_KEY_MAX)
        return WIRE_BAD_KEY;
    if (vlen > ch->arena_bytes - klen)
        return -E2BIG;
    struct wire_req rq = {.op = WIRE_OP_STORE, .mode = (uint16_t)mode, .key_len = (uint16_t)klen,
                          .flags = flags, .chunk_len = (uint32_t)vlen, .total_len = (uint32_t)vlen,
                          .exptime = exptime};
    memcpy(ch->arena, key, klen);
    if (vlen)
        memcpy(ch->arena + klen, value, vlen);
    memcpy(&ch->hdr->req, &rq, sizeof(rq));
    return post(ch);
}

int shim_ch_post_get(struct shim_ch *ch, const void *key, size_t klen)
{
    if (klen == 0 || klen > WIRE_KEY_MAX)
        return WIRE_BAD_KEY;
    struct wire_req rq = {.op = WIRE_OP_GET, .key_len = (uint16_t)klen};
    memcpy(ch->arena, key, klen);
    memcpy(&ch->hdr->req, &rq, sizeof(rq));
    return post(ch);
}

int shim_ch_poll(struct shim_ch *ch, struct wire_rep *rep)
{
    if (ch->dead)
        return -EPIPE;
    if (__atomic_load_n(&ch->hdr->state, __ATOMIC_ACQUIRE) != WIRE_ST_REPLY) {
        if (daemon_gone(ch)) {
            ch->dead = true;
            return -EPIPE;
        }
        return 0;
    }
    int rc = take_reply(ch, rep);
    return rc < 0 ? rc : 1;
}

int shim_ch_wait(struct shim_ch *ch, struct wire_rep *rep)
{
    if (ch->dead)
        return -EPIPE;
    return wait_reply(ch, rep);
}

int shim_ch_raw(struct shim_ch *ch, const struct wire_req *req, const void *arena_data,
                size_t arena_len, struct wire_rep *rep)
{
    if (arena_len > ch->arena_bytes)
        return -EINVAL;
    memcpy(&ch->hdr->req, req, sizeof(*req));
    if (arena_len)
        memcpy(ch->arena, arena_data, arena_len);
    return roundtrip(ch, rep);
}

static int key_req(struct shim_ch *ch, uint16_t op, const void *key, size_t klen,
                   struct wire_req *rq)
{
    if (klen == 0 || klen > WIRE_KEY_MAX)
        return WIRE_BAD_KEY;
    memset(rq, 0, sizeof(*rq));
    rq->op = op;
    rq->key_len = (uint16_t)klen;
    memcpy(ch->arena, key, klen);
    return WIRE_OK;
}

/* The rest of a long value: WIRE_OP_FETCH from off until it is complete. */
static int fetch_rest(struct shim_ch *ch, unsigned char *buf, uint32_t off, uint32_t total)
{
    while (off < total) {
        struct wire_req rq = {.op = WIRE_OP_FETCH, .chunk_off = off};
        struct wire_rep rep;
        memcpy(&ch->hdr->req, &rq, sizeof(rq));
        int rc = roundtrip(ch, &rep);
        if (rc != WIRE_OK)
            return rc;
        if (rep.chunk_len == 0 || rep.chunk_len > total - off || rep.total_len != total)
            return -EPROTO;
        memcpy(buf + off, ch->arena, rep.chunk_len);
        off += rep.chunk_len;
    }
    return WIRE_OK;
}

int shim_ch_get_value(struct shim_ch *ch, const struct wire_rep *rep, struct shim_value *out)
{
    if (rep->status != WIRE_OK)
        return rep->status;
    if (rep->chunk_len > rep->total_len || rep->chunk_len > ch->arena_bytes)
        return -EPROTO;
    unsigned char *buf = malloc(rep->total_len ? rep->total_len : 1);
    if (!buf)
        return -ENOMEM;
    memcpy(buf, ch->arena, rep->chunk_len);
    int rc;
    if (rep->chunk_len < rep->total_len &&
        (rc = fetch_rest(ch, buf, rep->chunk_len, rep->total_len)) != WIRE_OK) {
        free(buf);
        return rc;
    }
    out->data = buf;
    out->len = rep->total_len;
    out->flags = rep->flags;
    out->version = rep->version;
    return WIRE_OK;
}

int shim_ch_get(struct shim_ch *ch, const void *key, size_t klen, struct shim_value *out)
{
    struct wire_req rq;
    struct wire_rep rep;
    int rc = key_req(ch, WIRE_OP_GET, key, klen, &rq);
    if (rc != WIRE_OK)
        return rc;
    memcpy(&ch->hdr->req, &rq, sizeof(rq));
    if ((rc = roundtrip(ch, &rep)) != WIRE_OK)
        return rc;
    if (rep.chunk_len > rep.total_len || rep.chunk_len > ch->arena_bytes)
        return -EPROTO;
    unsigned char *buf = malloc(rep.total_len ? rep.total_len : 1);
    if (!buf)
        return -ENOMEM;
    memcpy(buf, ch->arena, rep.chunk_len);
    if (rep.chunk_len < rep.total_len &&
        (rc = fetch_rest(ch, buf, rep.chunk_len, rep.total_len)) != WIRE_OK) {
        free(buf);
        return rc;
    }
    out->data = buf;
    out->len = rep.total_len;
    out->flags = rep.flags;
    out->version = rep.version;
    return WIRE_OK;
}

int shim_ch_store(struct shim_ch *ch, enum wire_store_mode mode, const void *key, size_t klen,
                  const void *value, size_t vlen, uint32_t flags, int64_t exptime, uint64_t cas,
                  uint64_t *version_out)
{
    struct wire_req rq;
    struct wire_rep rep;
    int rc = key_req(ch, WIRE_OP_STORE, key, klen, &rq);
    if (rc != WIRE_OK)
        return rc;
    if (vlen > UINT32_MAX)
        return WIRE_TOO_BIG;
    rq.mode = (uint16_t)mode;
    rq.flags = flags;
    rq.exptime = exptime;
    rq.cas = cas;
    rq.total_len = (uint32_t)vlen;
    const uint32_t room = ch->arena_bytes - (uint32_t)klen;
    uint32_t off = 0;
    do {
        uint32_t n = (uint32_t)vlen - off < room ? (uint32_t)vlen - off : room;
        rq.chunk_off = off;
        rq.chunk_len = n;
        memcpy(ch->arena, key, klen); /* the reply of the last chunk may have overwritten it */
        memcpy(ch->arena + klen, (const unsigned char *)value + off, n);
        memcpy(&ch->hdr->req, &rq, sizeof(rq));
        rc = roundtrip(ch, &rep);
        off += n;
    } while (rc == WIRE_S_CONTINUE && off < vlen);
    if (rc == WIRE_S_CONTINUE)
        return -EPROTO;
    if (rc == WIRE_OK && version_out)
        *version_out = rep.version;
    return rc;
}

static int simple(struct shim_ch *ch, struct wire_req *rq, struct wire_rep *rep)
{
    memcpy(&ch->hdr->req, rq, sizeof(*rq));
    return roundtrip(ch, rep);
}

int shim_ch_delete(struct shim_ch *ch, const void *key, size_t klen)
{
    struct wire_req rq;
    struct wire_rep rep;
    int rc = key_req(ch, WIRE_OP_DELETE, key, klen, &rq);
    return rc != WIRE_OK ? rc : simple(ch, &rq, &rep);
}

int shim_ch_arith(struct shim_ch *ch, const void *key, size_t klen, int incr, uint64_t delta,
                  uint64_t *result)
{
    struct wire_req rq;
    struct wire_rep rep;
    int rc = key_req(ch, WIRE_OP_ARITH, key, klen, &rq);
    if (rc != WIRE_OK)
        return rc;
    rq.mode = incr ? 1 : 0;
    rq.delta = delta;
    rc = simple(ch, &rq, &rep);
    if (rc == WIRE_OK && result)
        *result = rep.number;
    return rc;
}

int shim_ch_touch(struct shim_ch *ch, const void *key, size_t klen, int64_t exptime)
{
    struct wire_req rq;
    struct wire_rep rep;
    int rc = key_req(ch, WIRE_OP_TOUCH, key, klen, &rq);
    if (rc != WIRE_OK)
        return rc;
    rq.exptime = exptime;
    return simple(ch, &rq, &rep);
}

int shim_ch_flush(struct shim_ch *ch)
{
    struct wire_req rq = {.op = WIRE_OP_FLUSH};
    struct wire_rep rep;
    return simple(ch, &rq, &rep);
}

int shim_ch_mget(struct shim_ch *ch, const void *const *keys, const size_t *klens, size_t n,
                 shim_hit_fn hit, void *user)
{
    size_t start = 0;
    while (start < n) {
        /* Pack keys [start, end) into the arena. A key no memcached could hold is a miss. */
        uint32_t p = 0;
        size_t end = start;
        size_t map[MGET_BATCH];
        uint16_t nk = 0;
        for (; end < n && nk < MGET_BATCH; end++) {
            size_t kl = klens[end];
            if (kl == 0 || kl > WIRE_KEY_MAX)
                continue; /* a key no memcached could hold: a miss */
            if (p + 1 + kl > ch->arena_bytes || p + 1 + kl > UINT16_MAX)
                break;
            ch->arena[p] = (unsigned char)kl;
            memcpy(ch->arena + p + 1, keys[end], kl);
            p += 1 + (uint32_t)kl;
            map[nk++] = end;
        }
        if (nk == 0)
            break; /* only bad keys were left */
        struct wire_req rq = {.op = WIRE_OP_MGET, .nkeys = nk, .key_len = (uint16_t)p};
        struct wire_rep rep;
        memcpy(&ch->hdr->req, &rq, sizeof(rq));
        int rc = roundtrip(ch, &rep);
        if (rc != WIRE_OK)
            return rc;
        if (rep.nkeys_done == 0 || rep.nkeys_done > nk)
            return -EPROTO;
        uint32_t off = 0;
        for (uint32_t i = 0; i < rep.nitems; i++) {
            struct wire_mitem mi;
            if (off + sizeof(mi) > ch->arena_bytes)
                return -EPROTO;
            memcpy(&mi, ch->arena + off, sizeof(mi));
            uint32_t head = (uint32_t)sizeof(mi) + mi.key_len;
            if (mi.key_index >= nk || mi.chunk_len > mi.total_len ||
                off + head + mi.chunk_len > ch->arena_bytes)
                return -EPROTO;
            unsigned char *buf = malloc(mi.total_len ? mi.total_len : 1);
            if (!buf)
                return -ENOMEM;
            memcpy(buf, ch->arena + off + head, mi.chunk_len);
            if (mi.chunk_len < mi.total_len &&
                (rc = fetch_rest(ch, buf, mi.chunk_len, mi.total_len)) != WIRE_OK) {
                free(buf);
                return rc;
            }
            struct shim_value v = {.data = buf, .len = mi.total_len, .flags = mi.flags,
                                   .version = mi.version};
            hit(user, map[mi.key_index], &v);
            off += (head + mi.chunk_len + 7u) & ~7u;
        }
        start = map[rep.nkeys_done - 1] + 1;
    }
    return WIRE_OK;
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
