/*
 * tcp.c - the memcached protocol's connections (tcp.h): one listening socket, a few threads,
 * each with its own epoll set, engine context and connections.
 *
 * Every thread watches the listening socket (EPOLLEXCLUSIVE: one of them is woken per
 * connection) and deals what it accepts to the thread with the fewest connections (handed over
 * through that thread's queue and eventfd, once per connection), which then runs that
 * connection's requests itself, start to end, as memcached's worker threads do. A connection
 * speaks memcached's text protocol (proto_text.c) or, if its first byte is the binary request
 * magic, the binary one (proto_bin.c), as memcached decides.
 * Epoll is level-triggered: a connection with replies it could not write yet is watched for
 * EPOLLOUT only, so a client that never reads its replies stops being read from, and what the
 * daemon holds for it stays bounded: its input buffer (a request line, or a storage command's
 * line and data: at most the item limit plus PROTO_LINE_MAX, a multi-get's line at most
 * PROTO_GET_LINE_MAX; a binary request's header, key and value: PROTO_BIN_NEED_MAX) and its
 * pending replies (OUT_MAX, plus one request's). Anything a client sends can close its own
 * connection, never the daemon.
 * A thread that has answered sleeps in epoll_wait for what comes next, unless its clients
 * answer fast and a CPU is free: then it looks again and again for up to spin_us first
 * (spin_budget), as the shim's workers spin for their channels, since a request that finds its
 * thread asleep pays a wake-up, tens of us on these machines, on top of the client's.
 */
#include "tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <glib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <nessie/wire_sync.h>

#include "clock.h"
#include "cpuload.h"
#include "log.h"
#include "proto_bin.h"
#include "proto_text.h"

/* Tunables, with their reasons. */
/* A connection's input buffer to start with, and the least room a read is given: most requests
 * are a line and a small value. */
#define IN_START 16384
/* Replies held for a connection before its requests stop being run until they are written: a
 * pipelining client gets its replies in large writes, one that does not read them costs this. */
#define OUT_MAX (4u << 20)
/* How often a thread looks for idle and stuck connections, ms. */
#define SWEEP_MS 1000
/* One get's reply at most (at least an item and its line, whatever the item limit): past it,
 * memcached's answer for a reply it cannot hold. */
#define REPLY_MAX (16u << 20)
/* Replies all connections together hold unwritten, at most (a get past it is refused as one past
 * REPLY_MAX): a thousand clients that ask for large values and never read them cost the daemon
 * this much, not a thousand times a reply. At least two replies of the largest item. */
#define HELD_MAX (256ull << 20)
/* Reads one connection is given per wake-up of its thread before the others' turn (memcached's
 * reqs_per_event): level-triggered epoll comes back to it. */
#define READS_PER_EVENT 16
/* A thread spins for its next request (spin_us at most) only while the requests it serves come
 * this soon after its replies, on average: a closed loop's client answers within its own
 * wake-up, tens of us here (shared/notes/machine-limits.md), and a request that finds the thread
 * asleep pays the thread's wake-up too. Past it (a low offered load), the thread sleeps at once
 * and an idle port costs no CPU. The average is measured whether the thread spun or slept, so a
 * thread that sleeps still sees a closed loop's gaps (its own wake-up added: the bound leaves
 * room for it). Below the clamp of a sample (wire_est_add), or a long gap would never exceed it. */
#define SPIN_GAP_MAX_NS 150000ull
/* After the CPUs were found all wanted (nessie_cpu_spare), how long a thread sleeps at once
 * before it looks again: the look formats /proc/loadavg in the kernel, 3 % of a busy thread's CPU
 * when it looked after every pass (4 connections on 2 CPUs), and a machine that busy stays so
 * for a while. */
#define SPIN_BACKOFF_NS 1000000ull
_Static_assert(SPIN_GAP_MAX_NS < WIRE_WAKE_COST_MAX_NS, "SPIN_GAP_MAX_NS past wire_est's clamp");
/* A stopped thread's load: above any live thread's, so no connection is dealt to it. */
#define TCP_LOAD_DEAD (UINT32_MAX / 2)
/* memcached's answer to a connection past its limit (its maxconns_fast). */
#define TOO_MANY "ERROR Too many open connections\r\n"

struct tconn {
    int fd;
    guint index;               /* in its thread's conns */
    unsigned char *in;
    size_t in_len, in_cap;
    GString *out;
    size_t out_off;            /* written so far (never inside a gap) */
    struct proto_conn pc;
    uint64_t active_ns;        /* the last byte read or written */
    uint64_t partial_ns;       /* the last progress of an incomplete request (0: none) */
    uint64_t stalled_ns;       /* since when replies wait for the client to read (0: none) */
    uint64_t held;             /* its unwritten replies, as counted in held_bytes */
    bool writing;              /* watched for EPOLLOUT (replies pending), not EPOLLIN */
    bool eof;                  /* the client sent all it will: closed once its replies are out */
    bool binary_checked;       /* its first byte was looked at */
    bool binary;               /* ... and it was the binary protocol's magic */
    /* For "stats conns" (tcp_conns), read by whichever thread answers it: the two addresses as
     * memcached prints them (fixed at accept), and, as relaxed atomics, when the last request
     * bytes were read and the state after the last pass (enum conn_state). */
    char addr[64], listen_addr[64];
    uint64_t cmd_ns;
    uint8_t state;
};

/* A connection's state as "stats conns" names it, memcached's names for the same moments: a
 * connection between requests waits in conn_read; one with a request half read in conn_nread
 * (a value still coming) or conn_read (its line); conn_swallow while a refused value is
 * discarded; conn_mwrite while replies wait for the client to read them; one that never sent
 * anything in conn_new_cmd. The connection that asks is in conn_parse_cmd. */
enum conn_state { CS_NEW_CMD, CS_READ, CS_NREAD, CS_SWALLOW, CS_MWRITE };
static const char *const conn_state_names[] = {
    [CS_NEW_CMD] = "conn_new_cmd", [CS_READ] = "conn_read", [CS_NREAD] = "conn_nread",
    [CS_SWALLOW] = "conn_swallow", [CS_MWRITE] = "conn_mwrite"};

struct tcp_thread {
    struct recep_tcp *tcp;
    uint32_t index;
    pthread_t thread;
    int epfd;
    struct nessie_ctx *ctx;
    GPtrArray *conns;          /* owned by the thread; changed under conns_lock, which other
                                * threads take to read it ("stats conns": tcp_conns; a pthread
                                * mutex, which ThreadSanitizer sees, not glib's futex GMutex) */
    pthread_mutex_t conns_lock;
    int wakefd;                /* eventfd: connections another thread accepted for this one */
    GAsyncQueue *incoming;     /* ... those connections (struct tconn), to be adopted */
    /* Counts hand-overs: the accepting thread increments it (release) once a connection is
     * built and before it queues it; this thread reads it (acquire) after taking one. The
     * queue's lock already orders them, but glib's futex-based GMutex is invisible to
     * ThreadSanitizer (worker.c does the same). */
    uint64_t handoffs;
    uint32_t load;             /* its connections, adopted or on their way (relaxed atomic):
                                * where the next accepted one goes */
    bool accept_paused;        /* out of descriptors: the listening socket left out until the
                                * next sweep, or its readiness would spin the thread */
    uint64_t now_ns;           /* the clock when epoll_wait last returned: what the connections'
                                * timeouts count (seconds) needs no fresher, and a read of the
                                * clock per read and per write was 2 % of a small get's cost */
    uint64_t replied_ns;       /* when its last pass over ready connections ended (0: none yet) */
    struct wire_est gap;       /* from the end of such a pass to the next ready connection */
    uint64_t calm_after_ns;    /* no spin before this (SPIN_BACKOFF_NS) */
};

struct recep_tcp {
    struct recep_tcp_config cfg;
    struct nessie_node *node;
    struct recep_stats *stats;
    size_t in_max;             /* a connection's input buffer at most */
    int lfd;
    int stopfd;                /* eventfd: written once, stop (level-triggered: wakes all) */
    struct tcp_thread *threads;
    uint32_t started;
    uint32_t rotor;            /* where the next choice of a thread starts (relaxed atomic) */
    char listen_addr[64];      /* the listening socket's address, as "stats conns" prints it */
    uint64_t start_ns;         /* when it started listening */
    /* Threads spinning for a request now, and how many may (half the CPUs, at least one): the
     * clients they wait for need CPUs to send on, and four threads spinning for four clients on
     * two CPUs would hold back the very requests they wait for. Relaxed atomic: a token count. */
    uint32_t spinning, spin_max;
};

/* The counters memcached's stats have (tcp.h): file-static because a daemon has one listener
 * and stats.c reads them without a handle; relaxed atomics, being counters. */
static uint64_t n_curr, n_total, n_rejected, n_max;
/* The threads' spins for a request (spin_budget), and those a request ended: whether spinning
 * pays on this machine, for the operator (stats nessie_tcp_spins, nessie_tcp_spin_hits). */
static uint64_t n_spins, n_spin_hits;
/* Bytes of replies all connections hold unwritten (HELD_MAX); file-static for the same reason:
 * proto_text.c reads it through each connection's pointer. */
static uint64_t held_bytes;

void recep_tcp_counts(struct recep_tcp_counts *out)
{
    out->curr = __atomic_load_n(&n_curr, __ATOMIC_RELAXED);
    out->total = __atomic_load_n(&n_total, __ATOMIC_RELAXED);
    out->rejected = __atomic_load_n(&n_rejected, __ATOMIC_RELAXED);
    out->max = __atomic_load_n(&n_max, __ATOMIC_RELAXED);
    out->direct_gets = proto_text_direct_gets();
    out->spins = __atomic_load_n(&n_spins, __ATOMIC_RELAXED);
    out->spin_hits = __atomic_load_n(&n_spin_hits, __ATOMIC_RELAXED);
}

/* Account for c's unwritten replies in held_bytes. */
static void conn_held(struct tconn *c)
{
    uint64_t now = c->out->len - c->out_off;
    if (now != c->held) {
        __atomic_fetch_add(&held_bytes, now - c->held, __ATOMIC_RELAXED); /* wraps to a sub */
        c->held = now;
    }
}

/* ss as memcached's "stats conns" names an address: tcp:A.B.C.D:PORT or tcp6:[ADDR]:PORT. */
static void addr_name(const struct sockaddr_storage *ss, char *buf, size_t n)
{
    char a[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a6->sin6_addr, a, sizeof(a));
        snprintf(buf, n, "tcp6:[%s]:%u", a, ntohs(a6->sin6_port));
    } else {
        const struct sockaddr_in *a4 = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a4->sin_addr, a, sizeof(a));
        snprintf(buf, n, "tcp:%s:%u", a, ntohs(a4->sin_port));
    }
}

/* The state "stats conns" shows for c, noted after each of its passes (relaxed: a reader on
 * another thread sees this pass's or the last one's). */
static void conn_note_state(struct tconn *c)
{
    uint8_t st = CS_READ;
    if (c->writing)
        st = CS_MWRITE;
    else if (c->pc.swallow > 0)
        st = CS_SWALLOW;
    else if (c->in_len > 0 && c->pc.need > c->in_len)
        st = CS_NREAD;
    __atomic_store_n(&c->state, st, __ATOMIC_RELAXED);
}

/* One connection's lines of "stats conns". */
struct conn_row {
    int fd;
    char addr[64], listen_addr[64];
    const char *state;
    uint64_t secs;
};

static int conn_row_cmp(const void *a, const void *b)
{
    const struct conn_row *x = a, *y = b;
    return (x->fd > y->fd) - (x->fd < y->fd);
}

/*
 * "stats conns" (proto_conn.conns): the listening socket, then every connection of every thread
 * in descriptor order, memcached's lines for each: STAT <fd>:addr, :listen_addr (a connection's
 * own address), :state, :secs_since_last_cmd; then END. self, the connection asking, is in
 * conn_parse_cmd. Each thread's list is read under its lock, so no connection is freed while
 * it is looked at; its fields are a moment's, as memcached's are.
 */
static void tcp_conns(void *user, const struct proto_conn *self, GString *out)
{
    struct recep_tcp *t = user;
    uint64_t now = nessie_mono_ns();
    GArray *rows = g_array_new(FALSE, FALSE, sizeof(struct conn_row));
    /* Every thread's list and lock exist before the first thread starts. */
    for (uint32_t i = 0; i < t->cfg.threads; i++) {
        struct tcp_thread *th = &t->threads[i];
        pthread_mutex_lock(&th->conns_lock);
        for (guint k = 0; k < th->conns->len; k++) {
            const struct tconn *c = g_ptr_array_index(th->conns, k);
            struct conn_row r = {.fd = c->fd};
            memcpy(r.addr, c->addr, sizeof(r.addr));
            memcpy(r.listen_addr, c->listen_addr, sizeof(r.listen_addr));
            uint8_t st = __atomic_load_n(&c->state, __ATOMIC_RELAXED);
            r.state = &c->pc == self ? "conn_parse_cmd" : conn_state_names[st];
            uint64_t at = __atomic_load_n(&c->cmd_ns, __ATOMIC_RELAXED);
            r.secs = now > at ? (now - at) / 1000000000u : 0;
            g_array_append_val(rows, r);
        }
        pthread_mutex_unlock(&th->conns_lock);
    }
    g_array_sort(rows, conn_row_cmp);
    g_string_append_printf(out, "STAT %d:addr %s\r\nSTAT %d:state conn_listening\r\n"
                                "STAT %d:secs_since_last_cmd %" PRIu64 "\r\n",
                           t->lfd, t->listen_addr, t->lfd, t->lfd,
                           (now - t->start_ns) / 1000000000u);
    for (guint k = 0; k < rows->len; k++) {
        const struct conn_row *r = &g_array_index(rows, struct conn_row, k);
        g_string_append_printf(out, "STAT %d:addr %s\r\nSTAT %d:listen_addr %s\r\n"
                                    "STAT %d:state %s\r\nSTAT %d:secs_since_last_cmd %" PRIu64
                                    "\r\n",
                               r->fd, r->addr, r->fd, r->listen_addr, r->fd, r->state, r->fd,
                               r->secs);
    }
    g_string_append(out, "END\r\n");
    g_array_free(rows, TRUE);
}

/* A connection's memory freed and its count given back (its socket already closed). */
static void conn_free(struct tconn *c)
{
    g_array_free(c->pc.gaps, TRUE);
    g_string_free(c->out, TRUE);
    g_free(c->in);
    g_free(c);
    __atomic_fetch_sub(&n_curr, 1, __ATOMIC_RELAXED);
}

static void conn_close(struct tcp_thread *th, struct tconn *c)
{
    c->out_off = c->out->len;
    conn_held(c);
    epoll_ctl(th->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    /* Out of the array by swapping the last one in. */
    pthread_mutex_lock(&th->conns_lock);
    struct tconn *last = g_ptr_array_index(th->conns, th->conns->len - 1);
    last->index = c->index;
    g_ptr_array_index(th->conns, c->index) = last;
    g_ptr_array_set_size(th->conns, th->conns->len - 1);
    pthread_mutex_unlock(&th->conns_lock);
    __atomic_fetch_sub(&th->load, 1, __ATOMIC_RELAXED);
    conn_free(c);
}

static void conn_watch(struct tcp_thread *th, struct tconn *c, bool writing)
{
    if (c->writing == writing)
        return;
    /* No EPOLLRDHUP: level-triggered, it would wake the thread again and again while the
     * replies to a client that shut its side wait to be written; a read finds the end. */
    struct epoll_event ev = {.events = writing ? EPOLLOUT : EPOLLIN, .data.ptr = c};
    if (epoll_ctl(th->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->writing = writing;
}

/* When accept last failed for want of descriptors or memory, logged at most every 10 s: a
 * flood of connections must not flood the log too. */
static uint64_t accept_warned_ns;

static void accept_warn(int err)
{
    uint64_t now = nessie_mono_ns(), last = __atomic_load_n(&accept_warned_ns, __ATOMIC_RELAXED);
    if (last && now - last < 10000000000ull)
        return;
    if (__atomic_compare_exchange_n(&accept_warned_ns, &last, now, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        log_warn("tcp: accept: %s (new connections wait)", strerror(err));
}

/* A connection for the socket fd accepted from peer, not yet any thread's. */
static struct tconn *conn_new(struct recep_tcp *t, int fd, const struct sockaddr_storage *peer)
{
    struct tconn *c = g_new0(struct tconn, 1);
    c->fd = fd;
    c->in_cap = IN_START;
    c->in = g_malloc(c->in_cap);
    c->out = g_string_sized_new(1024);
    GArray *gaps = g_array_new(FALSE, FALSE, sizeof(struct proto_gap));
    uint32_t item = nessie_node_config(t->node)->max_item_size;
    size_t reply_max = item + 4096u > REPLY_MAX ? item + 4096u : REPLY_MAX;
    c->pc = (struct proto_conn){.stats = t->stats, .max_item_size = item, .out = c->out,
                                .gaps = gaps, .out_max = OUT_MAX, .reply_max = reply_max,
                                .held = &held_bytes,
                                .held_max = 2 * (uint64_t)reply_max > HELD_MAX
                                                ? 2 * (uint64_t)reply_max
                                                : HELD_MAX,
                                .conns = tcp_conns, .conns_user = t};
    c->active_ns = nessie_mono_ns();
    c->cmd_ns = c->active_ns;
    c->state = CS_NEW_CMD;
    /* Its two ends, named as memcached's "stats conns" names them: the peer as accept gave it,
     * its own end asked (a listener on a wildcard address serves several). */
    addr_name(peer, c->addr, sizeof(c->addr));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    memset(&ss, 0, sizeof(ss));
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        addr_name(&ss, c->listen_addr, sizeof(c->listen_addr));
    return c;
}

/*
 * The thread a new connection goes to: the one with the fewest, ties broken round-robin (as
 * memcached's dispatcher deals connections out). Whichever thread the kernel woke to accept
 * is no guide: with EPOLLEXCLUSIVE the same one often takes several in a row, and two
 * connections on one thread wait for each other while another thread idles.
 */
static struct tcp_thread *pick_thread(struct recep_tcp *t)
{
    uint32_t n = t->cfg.threads;
    uint32_t at = __atomic_fetch_add(&t->rotor, 1, __ATOMIC_RELAXED) % n;
    struct tcp_thread *best = &t->threads[at];
    uint32_t least = __atomic_load_n(&best->load, __ATOMIC_RELAXED);
    for (uint32_t k = 1; k < n; k++) {
        struct tcp_thread *th = &t->threads[(at + k) % n];
        uint32_t l = __atomic_load_n(&th->load, __ATOMIC_RELAXED);
        if (l < least) {
            least = l;
            best = th;
        }
    }
    __atomic_fetch_add(&best->load, 1, __ATOMIC_RELAXED);
    return best;
}

/* c becomes th's: watched by its epoll set, run with its engine context. On failure it is
 * closed (logged). */
static void conn_adopt(struct tcp_thread *th, struct tconn *c)
{
    c->pc.ctx = th->ctx;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(th->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        log_warn("tcp: epoll_ctl: %s; connection dropped", strerror(errno));
        close(c->fd);
        __atomic_fetch_sub(&th->load, 1, __ATOMIC_RELAXED);
        conn_free(c);
        return;
    }
    pthread_mutex_lock(&th->conns_lock);
    c->index = th->conns->len;
    g_ptr_array_add(th->conns, c);
    pthread_mutex_unlock(&th->conns_lock);
}

/* Adopt the connections other threads accepted for th. */
static void adopt_incoming(struct tcp_thread *th)
{
    struct tconn *c;
    while ((c = g_async_queue_try_pop(th->incoming)) != NULL) {
        (void)__atomic_load_n(&th->handoffs, __ATOMIC_ACQUIRE);
        conn_adopt(th, c);
    }
}

static void on_accept(struct tcp_thread *th)
{
    struct recep_tcp *t = th->tcp;
    for (;;) {
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        memset(&peer, 0, sizeof(peer));
        int fd = accept4(t->lfd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* The connection stays queued and the socket readable: this thread stops
                 * watching it until its next sweep (memcached's accept_new_conns(false)). */
                accept_warn(errno);
                if (epoll_ctl(th->epfd, EPOLL_CTL_DEL, t->lfd, NULL) == 0)
                    th->accept_paused = true;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                       errno != ECONNABORTED) {
                accept_warn(errno);
            }
            return;
        }
        /* Counted first, then judged: threads accepting at once cannot pass the limit. */
        if (__atomic_add_fetch(&n_curr, 1, __ATOMIC_RELAXED) > t->cfg.max_connections) {
            __atomic_fetch_sub(&n_curr, 1, __ATOMIC_RELAXED);
            /* As memcached: told, then closed. A full send buffer on a new socket cannot
             * happen, and a lost line is no loss. */
            ssize_t w = write(fd, TOO_MANY, sizeof(TOO_MANY) - 1);
            (void)w;
            close(fd);
            __atomic_fetch_add(&n_rejected, 1, __ATOMIC_RELAXED);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        __atomic_fetch_add(&n_total, 1, __ATOMIC_RELAXED);
        struct tconn *c = conn_new(t, fd, &peer);
        struct tcp_thread *to = pick_thread(t);
        if (to == th) {
            conn_adopt(th, c);
            continue;
        }
        __atomic_fetch_add(&to->handoffs, 1, __ATOMIC_RELEASE);
        g_async_queue_push(to->incoming, c);
        uint64_t one_more = 1;
        if (write(to->wakefd, &one_more, sizeof(one_more)) != sizeof(one_more))
            log_warn("tcp: waking thread %u: %s (its new connection waits for its sweep)",
                     to->index, strerror(errno));
    }
}

/* c's pending replies from out_off as iovecs, its gaps left out; returns how many (at most n,
 * the rest left for the next write). */
static int conn_iov(const struct tconn *c, struct iovec *iov, int n)
{
    int k = 0;
    size_t at = c->out_off;
    for (guint g = 0; g < c->pc.gaps->len && k < n; g++) {
        const struct proto_gap *gp = &g_array_index(c->pc.gaps, struct proto_gap, g);
        if (gp->at + gp->len <= at)
            continue;
        if (gp->at > at)
            iov[k++] = (struct iovec){.iov_base = c->out->str + at, .iov_len = gp->at - at};
        at = gp->at + gp->len;
    }
    if (k < n && at < c->out->len)
        iov[k++] = (struct iovec){.iov_base = c->out->str + at, .iov_len = c->out->len - at};
    return k;
}

/* out_off moved past w bytes written, and past the gaps it reaches. */
static void conn_advance(struct tconn *c, size_t w)
{
    for (guint g = 0; g < c->pc.gaps->len; g++) {
        const struct proto_gap *gp = &g_array_index(c->pc.gaps, struct proto_gap, g);
        if (gp->at + gp->len <= c->out_off)
            continue;
        if (gp->at > c->out_off) {
            size_t take = gp->at - c->out_off < w ? gp->at - c->out_off : w;
            c->out_off += take;
            w -= take;
            if (c->out_off < gp->at)
                return; /* w spent before this gap */
        }
        c->out_off = gp->at + gp->len;
    }
    c->out_off += w;
}

/* Write what is pending. Returns false if the connection is to be closed (an error). */
static bool conn_flush(struct tcp_thread *th, struct tconn *c)
{
    while (c->out_off < c->out->len) {
        struct iovec iov[PROTO_GAPS_MAX + 1];
        struct msghdr msg = {.msg_iov = iov,
                             .msg_iovlen = (size_t)conn_iov(c, iov, PROTO_GAPS_MAX + 1)};
        if (msg.msg_iovlen == 0) {
            c->out_off = c->out->len; /* only gaps were left */
            break;
        }
        ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                conn_watch(th, c, true);
                conn_held(c);
                if (!c->stalled_ns)
                    c->stalled_ns = th->now_ns;
                return true;
            }
            return false;
        }
        conn_advance(c, (size_t)w);
        c->active_ns = th->now_ns;
        c->stalled_ns = 0; /* it reads: its replies are moving */
    }
    /* A large reply's buffer is not kept for the small ones after it. */
    if (c->out->allocated_len > OUT_MAX) {
        g_string_free(c->out, TRUE);
        c->out = g_string_sized_new(1024);
        c->pc.out = c->out;
    } else {
        g_string_truncate(c->out, 0);
    }
    g_array_set_size(c->pc.gaps, 0);
    c->out_off = 0;
    c->stalled_ns = 0;
    conn_held(c);
    conn_watch(th, c, false);
    return true;
}

/* Run the whole requests in the input, then write their replies. Returns false if the
 * connection is to be closed. */
static bool conn_run(struct tcp_thread *th, struct tconn *c)
{
    /* memcached tells the protocols apart by a connection's first byte, once for its life:
     * the binary protocol's request magic, or text. */
    if (!c->binary_checked && c->in_len > 0) {
        c->binary_checked = true;
        c->binary = c->in[0] == PROTO_BIN_MAGIC;
    }
    for (;;) {
        size_t used = c->binary ? proto_bin_run(&c->pc, c->in, c->in_len)
                                : proto_text_run(&c->pc, c->in, c->in_len);
        if (used > 0) {
            memmove(c->in, c->in + used, c->in_len - used);
            c->in_len -= used;
            c->partial_ns = 0; /* a request done: progress */
        }
        conn_held(c);
        /* While a refused value is swallowed, its answer and those before it wait, as in
         * memcached (they are written once the value's last byte is read). */
        if (c->pc.swallow > 0)
            break;
        if (!conn_flush(th, c))
            return false;
        if (c->pc.close)
            return c->writing; /* closed once the last replies are out */
        if (c->writing || used == 0 || c->in_len == 0)
            break;
        /* Stopped at OUT_MAX with requests left, and their replies are out: go on. */
    }
    /* An incomplete request starts the partial timeout, counted from its last progress (a
     * request done, or bytes read: conn_read); replies the client has not read yet have the
     * same timeout of their own (stalled_ns), counted from the last bytes it took. */
    if (!c->writing && (c->in_len > 0 || c->pc.swallow > 0))
        c->partial_ns = c->partial_ns ? c->partial_ns : th->now_ns;
    else
        c->partial_ns = 0;
    return true;
}

/* Read what the socket has, and run it. Returns false if the connection is to be closed. */
static bool conn_read(struct tcp_thread *th, struct tconn *c)
{
    struct recep_tcp *t = th->tcp;
    for (int reads = 0; reads < READS_PER_EVENT; reads++) {
        /* Room for the request that waits, or for a read's worth. */
        size_t want = c->pc.need > c->in_len ? c->pc.need : c->in_len + IN_START;
        if (want > t->in_max)
            want = t->in_max;
        if (want > c->in_cap) {
            size_t cap = c->in_cap;
            while (cap < want)
                cap *= 2;
            if (cap > t->in_max)
                cap = t->in_max;
            c->in = g_realloc(c->in, cap);
            c->in_cap = cap;
        }
        if (c->in_len == c->in_cap)
            return false; /* no request can be this long: its protocol would have said so */
        size_t room = c->in_cap - c->in_len;
        ssize_t r = recv(c->fd, c->in + c->in_len, room, 0);
        if (r == 0) {
            /* The requests it sent are answered all the same (a client that shuts its side
             * after its last request still reads the replies). */
            c->eof = true;
            return conn_run(th, c) && c->writing;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK;
        }
        c->in_len += (size_t)r;
        c->active_ns = th->now_ns;
        __atomic_store_n(&c->cmd_ns, th->now_ns, __ATOMIC_RELAXED);
        c->partial_ns = 0; /* bytes came: progress */
        if (!conn_run(th, c))
            return false;
        if (c->writing || c->pc.close)
            return true;
        /* Memory stays bounded: a big buffer emptied shrinks back. */
        if (c->in_len == 0 && c->in_cap > 4 * IN_START) {
            g_free(c->in);
            c->in_cap = IN_START;
            c->in = g_malloc(c->in_cap);
        }
        /* A read that did not fill the room took all the socket had: another would find
         * nothing, a syscall per request for an EAGAIN (memcached reads again only after a full
         * read too). Epoll is level-triggered: whatever arrives next wakes the thread. */
        if ((size_t)r < room)
            return true;
    }
    return true; /* its turn is over; epoll comes back to what is left */
}

static void sweep(struct tcp_thread *th)
{
    struct recep_tcp *t = th->tcp;
    const struct recep_tcp_config *cfg = &t->cfg;
    adopt_incoming(th); /* in case a wake-up was lost */
    /* A fresh clock, read after the adoption: a connection another thread accepted was stamped
     * on that thread's clock, later than this thread's now_ns, and must not look a lifetime idle
     * (the stamps are compared as "not after now" too, for one accepted meanwhile). */
    uint64_t now = nessie_mono_ns();
    if (th->accept_paused) {
        struct epoll_event el = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &t->lfd};
        if (epoll_ctl(th->epfd, EPOLL_CTL_ADD, t->lfd, &el) == 0)
            th->accept_paused = false;
    }
    uint64_t partial = (uint64_t)cfg->partial_s * 1000000000u;
    for (guint i = th->conns->len; i-- > 0;) {
        struct tconn *c = g_ptr_array_index(th->conns, i);
        bool idle = cfg->idle_s && c->active_ns < now &&
                    now - c->active_ns > (uint64_t)cfg->idle_s * 1000000000u;
        bool stuck = partial && c->partial_ns && c->partial_ns < now &&
                     now - c->partial_ns > partial;
        bool unread = partial && c->stalled_ns && c->stalled_ns < now &&
                      now - c->stalled_ns > partial;
        if (idle || stuck || unread)
            conn_close(th, c);
    }
}

/* How long th spins for its next request before it sleeps: spin_us while its requests come
 * soon after its replies (SPIN_GAP_MAX_NS) and a spinner's token is free (taken here: the caller
 * gives it back after its spin), else 0. */
static uint64_t spin_budget(struct tcp_thread *th)
{
    struct recep_tcp *t = th->tcp;
    if (!t->cfg.spin_us || th->gap.avg_ns == 0 || th->gap.avg_ns > SPIN_GAP_MAX_NS ||
        th->now_ns < th->calm_after_ns)
        return 0;
    /* Where every CPU has a thread to run (several connections busy at once, or other
     * programs' load), the request that comes wakes th on a busy CPU, without an idle CPU's
     * exit, and a spin would take the CPU from the clients it waits for (bench/tcp.sh, 4
     * connections on 2 CPUs: spinning regardless served 0.57 of the ops/s of sleeping). */
    if (!nessie_cpu_spare()) {
        th->calm_after_ns = th->now_ns + SPIN_BACKOFF_NS;
        return 0;
    }
    uint32_t k = __atomic_load_n(&t->spinning, __ATOMIC_RELAXED);
    do {
        if (k >= t->spin_max)
            return 0;
    } while (!__atomic_compare_exchange_n(&t->spinning, &k, k + 1, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return (uint64_t)t->cfg.spin_us * 1000u;
}

static void *tcp_thread_main(void *arg)
{
    struct tcp_thread *th = arg;
    struct recep_tcp *t = th->tcp;
    char name[16];
    snprintf(name, sizeof(name), "nessie-tcp%u", th->index);
    prctl(PR_SET_NAME, name, 0, 0, 0);
    struct epoll_event evs[64];
    uint64_t next_sweep = nessie_mono_ns() + SWEEP_MS * 1000000ull;
    for (;;) {
        int n = 0;
        const uint64_t spin_ns = spin_budget(th);
        if (spin_ns) {
            /* A look costs a syscall (~1 us), against the wake-up it saves; the spin ends too
             * once the CPUs are wanted (nessie_cpu_spare): by the clients it waits for, often. */
            uint64_t start = nessie_mono_ns(), now = start;
            while ((n = epoll_wait(th->epfd, evs, 64, 0)) == 0 &&
                   (now = nessie_mono_ns()) - start < spin_ns) {
                if (!nessie_cpu_spare()) {
                    th->calm_after_ns = now + SPIN_BACKOFF_NS;
                    break;
                }
                wire_cpu_relax();
            }
            __atomic_fetch_sub(&t->spinning, 1, __ATOMIC_RELAXED);
            __atomic_fetch_add(&n_spins, 1, __ATOMIC_RELAXED);
            if (n > 0)
                __atomic_fetch_add(&n_spin_hits, 1, __ATOMIC_RELAXED);
        }
        if (n == 0)
            n = epoll_wait(th->epfd, evs, 64, SWEEP_MS);
        th->now_ns = nessie_mono_ns();
        bool served = false;
        if (n < 0 && errno != EINTR) {
            log_error("tcp: thread %u: epoll_wait: %s; it stops", th->index, strerror(errno));
            /* Never the thread with the fewest again: what is dealt to it now would wait in
             * its queue until the port stops (recep_tcp_stop closes those). */
            __atomic_store_n(&th->load, TCP_LOAD_DEAD, __ATOMIC_RELAXED);
            break;
        }
        bool stop = false;
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &t->stopfd) {
                stop = true;
            } else if (p == &th->wakefd) {
                uint64_t v;
                if (read(th->wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                    log_warn("tcp: thread %u: eventfd: %s", th->index, strerror(errno));
                adopt_incoming(th);
            } else if (p == &t->lfd) {
                on_accept(th);
            } else {
                struct tconn *c = p;
                served = true;
                bool keep;
                if (c->writing)
                    keep = conn_flush(th, c) &&
                           (c->writing || (!c->pc.close && conn_run(th, c) &&
                                           (!c->eof || c->writing)));
                else
                    keep = conn_read(th, c);
                if (!keep || (c->pc.close && !c->writing))
                    conn_close(th, c);
                else
                    conn_note_state(c);
            }
        }
        if (stop)
            break;
        if (served) {
            if (th->replied_ns)
                wire_est_add(&th->gap, th->now_ns - th->replied_ns);
            th->replied_ns = nessie_mono_ns();
        }
        if (th->now_ns >= next_sweep) {
            sweep(th);
            next_sweep = th->now_ns + SWEEP_MS * 1000000ull;
        }
    }
    while (th->conns->len > 0)
        conn_close(th, g_ptr_array_index(th->conns, th->conns->len - 1));
    /* Dealt to it before it stopped, or while it stopped. */
    struct tconn *c;
    while ((c = g_async_queue_try_pop(th->incoming)) != NULL) {
        (void)__atomic_load_n(&th->handoffs, __ATOMIC_ACQUIRE);
        close(c->fd);
        conn_free(c);
    }
    return NULL;
}

static int listen_on(const struct recep_tcp_config *cfg)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, cfg->addr, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)cfg->port);
        sl = sizeof(*a4);
    } else if (inet_pton(AF_INET6, cfg->addr, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)cfg->port);
        sl = sizeof(*a6);
    } else {
        log_error("tcp: [reception] memcached_addr = %s is not a numeric IPv4 or IPv6 address",
                  cfg->addr);
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        log_error("tcp: socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0) {
        log_error("tcp: cannot listen on %s port %u: %s", cfg->addr, cfg->port, strerror(errno));
        close(fd);
        return -1;
    }
    if (listen(fd, 1024) != 0) {
        log_error("tcp: listen on %s port %u: %s", cfg->addr, cfg->port, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

void recep_tcp_stop(struct recep_tcp *t)
{
    if (!t)
        return;
    uint64_t one = 1;
    if (t->stopfd >= 0 && write(t->stopfd, &one, sizeof(one)) != sizeof(one))
        log_warn("tcp: stop: %s", strerror(errno));
    for (uint32_t i = t->started; i-- > 0;) {
        struct tcp_thread *th = &t->threads[i];
        pthread_join(th->thread, NULL);
    }
    for (uint32_t i = t->cfg.threads; i-- > 0;) {
        struct tcp_thread *th = &t->threads[i];
        if (th->conns) {
            g_ptr_array_free(th->conns, TRUE);
            pthread_mutex_destroy(&th->conns_lock);
        }
        if (th->incoming) {
            /* Handed over after this thread stopped, or before it took them. */
            struct tconn *c;
            while ((c = g_async_queue_try_pop(th->incoming)) != NULL) {
                (void)__atomic_load_n(&th->handoffs, __ATOMIC_ACQUIRE);
                close(c->fd);
                conn_free(c);
            }
            g_async_queue_unref(th->incoming);
        }
        if (th->wakefd >= 0)
            close(th->wakefd);
        if (th->ctx)
            nessie_ctx_destroy(th->ctx);
        if (th->epfd >= 0)
            close(th->epfd);
    }
    free(t->threads);
    if (t->stopfd >= 0)
        close(t->stopfd);
    if (t->lfd >= 0)
        close(t->lfd);
    __atomic_store_n(&n_max, 0, __ATOMIC_RELAXED);
    free(t);
}

int recep_tcp_start(struct nessie_node *node, const struct recep_tcp_config *cfg,
                    struct recep_stats *stats, struct recep_tcp **out)
{
    struct recep_tcp *t = calloc(1, sizeof(*t));
    if (!t)
        return -1;
    t->cfg = *cfg;
    t->node = node;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    t->spin_max = cpus >= 4 ? (uint32_t)(cpus / 2) : 1; /* on one CPU, nessie_cpu_spare: never */
    t->stats = stats;
    t->stopfd = -1;
    size_t item = nessie_node_config(node)->max_item_size;
    t->in_max = (item + PROTO_LINE_MAX + 2 > PROTO_GET_LINE_MAX ? item + PROTO_LINE_MAX + 2
                                                                  : PROTO_GET_LINE_MAX) + 1;
    if (t->in_max < PROTO_BIN_NEED_MAX(item) + 1)
        t->in_max = PROTO_BIN_NEED_MAX(item) + 1;
    /* A descriptor per connection, and room for the rest (channels, the fabric): the soft limit
     * raised toward the hard one, as memcached does for its -c. */
    struct rlimit rl;
    rlim_t want = (rlim_t)cfg->max_connections + 256;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < want)
            log_warn("tcp: open files limited to %llu: fewer than max_connections = %u may be "
                     "served", (unsigned long long)rl.rlim_cur, cfg->max_connections);
    }
    t->lfd = listen_on(cfg);
    if (t->lfd < 0)
        goto fail;
    t->start_ns = nessie_mono_ns();
    {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        memset(&ss, 0, sizeof(ss));
        if (getsockname(t->lfd, (struct sockaddr *)&ss, &sl) == 0)
            addr_name(&ss, t->listen_addr, sizeof(t->listen_addr));
    }
    t->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    t->threads = calloc(cfg->threads, sizeof(*t->threads));
    for (uint32_t i = 0; t->threads && i < cfg->threads; i++)
        t->threads[i].epfd = t->threads[i].wakefd = -1; /* before any exit to fail: its
                                                          * ladder closes what is >= 0 */
    if (t->stopfd < 0 || !t->threads) {
        log_error("tcp: eventfd or memory: %s", strerror(errno));
        goto fail;
    }
    for (uint32_t i = 0; i < cfg->threads; i++) {
        struct tcp_thread *th = &t->threads[i];
        th->tcp = t;
        th->index = i;
        th->conns = g_ptr_array_new();
        pthread_mutex_init(&th->conns_lock, NULL);
        th->incoming = g_async_queue_new();
        th->epfd = epoll_create1(EPOLL_CLOEXEC);
        th->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (th->epfd < 0 || th->wakefd < 0) {
            log_error("tcp: epoll_create1 or eventfd: %s", strerror(errno));
            goto fail;
        }
        if (nessie_ctx_create(node, &th->ctx) != NESSIE_OK) {
            log_error("tcp: no engine context for thread %u", i);
            goto fail;
        }
        /* One thread woken per new connection; the stop, level-triggered, wakes them all. */
        struct epoll_event el = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &t->lfd};
        struct epoll_event es = {.events = EPOLLIN, .data.ptr = &t->stopfd};
        struct epoll_event ew = {.events = EPOLLIN, .data.ptr = &th->wakefd};
        if (epoll_ctl(th->epfd, EPOLL_CTL_ADD, t->lfd, &el) != 0 ||
            epoll_ctl(th->epfd, EPOLL_CTL_ADD, t->stopfd, &es) != 0 ||
            epoll_ctl(th->epfd, EPOLL_CTL_ADD, th->wakefd, &ew) != 0) {
            log_error("tcp: epoll_ctl: %s", strerror(errno));
            goto fail;
        }
    }
    for (; t->started < cfg->threads; t->started++) {
        struct tcp_thread *th = &t->threads[t->started];
        int rc = pthread_create(&th->thread, NULL, tcp_thread_main, th);
        if (rc != 0) {
            log_error("tcp: pthread_create: %s", strerror(rc));
            goto fail;
        }
    }
    __atomic_store_n(&n_max, cfg->max_connections, __ATOMIC_RELAXED);
    log_info("tcp: memcached protocol on %s port %u (%u threads, at most %u connections)",
             cfg->addr, cfg->port, cfg->threads, cfg->max_connections);
    *out = t;
    return 0;
fail:
    if (!t->threads)
        t->cfg.threads = 0;
    recep_tcp_stop(t);
    return -1;
}
