/*
 * worker.c - the request loop of one worker thread.
 *
 * Each pass takes what every channel posted (up to BATCH_MAX requests, the channels visited from
 * a rotating start so none is starved) and runs it as one batch: the GETs together, so their
 * fabric reads go out as one post (reception/channel.c).
 *
 * Waiting follows include/nessie/wire_sync.h: after a pass that found work the worker spins for
 * the next request only for the budget its clients' measured think times allow (at most
 * spin_us), with `pause`, never sched_yield; then it parks. Parking (the daemon's side of
 * the wake-up protocol): it stores worker_parked = 1 in each of its channels (seq_cst), then
 * looks at their rings once more (seq_cst loads); a client stores its ring head (seq_cst) and
 * then loads worker_parked. One of the two sees the other: the worker finds the request, or the
 * client rings the doorbell.
 */
#include "worker.h"

#include <errno.h>
#include <glib.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <nessie/wire_sync.h>

#include "cpuload.h"
#include "log.h"

/* Requests taken per pass and run as one batch: enough for every slot of a busy client and more,
 * few enough that the first of them is not kept waiting long by the last. */
#define BATCH_MAX 64

struct recep_worker {
    pthread_t thread;
    uint32_t index;
    uint32_t spin_us;
    struct nessie_node *node;
    struct nessie_ctx *ctx;
    /* Answers peers' shipped GETs while the worker is awake (nessie_sd_help): ctx's helper,
     * and used in the spin below; NULL when [reception] sd_help is off. A context of its own,
     * as ctx is in the middle of a call when it waits for a shipped reply. */
    struct nessie_ctx *help;
    int epfd;
    int wake;                 /* eventfd: a new channel, or stop */
    GAsyncQueue *incoming;    /* channels handed over by the Receptionist */
    /* Counts hand-overs: the Receptionist increments it (release) once a channel is fully built
     * and before it queues it; the worker reads it (acquire) after taking one. GAsyncQueue's
     * lock already orders the two, but glib's futex-based GMutex is invisible to
     * ThreadSanitizer, which then reports the worker's first reads of the channel as races. */
    uint64_t handoffs;
    GPtrArray *channels;      /* owned by the worker thread only */
    guint rotor;              /* where the next pass starts, for fairness */
    /* From the last pass that found work: the smallest think time and wake-up of the clients it
     * served, and whether it woke one of them (wire_sync.h: the spin budget). */
    uint64_t think_ns, client_wake_ns;
    bool woke;
    uint32_t cpu;             /* wire_cpu_tag() as last published in the channels */
    struct recep_req batch[BATCH_MAX]; /* the pass's requests: too large for the stack */
    bool stop;                /* __atomic; set by recep_worker_stop */
    /* Stats, written by the worker, read by the stats thread (relaxed atomics: counters). */
    uint64_t requests, sleeps;
    uint32_t nchannels;
    bool asleep;
};

/* Tag of the epoll data for a channel's socket (the doorbell uses the channel pointer itself):
 * channel structs are at least 8-aligned, so bit 0 is free. */
#define SOCK_TAG 1u

static void adopt(struct recep_worker *w, struct recep_channel *ch)
{
    /* Edge-triggered: each ring of the doorbell (an eventfd write) is reported once, so nobody
     * has to read it back, which saves the worker a system call per wake-up. Its counter only
     * grows; it would take 2^64 rings to fill. */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = ch};
    struct epoll_event es = {.events = EPOLLRDHUP | EPOLLHUP | EPOLLIN,
                             .data.ptr = (void *)((uintptr_t)ch | SOCK_TAG)};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, ch->doorbell, &ev) != 0 ||
        epoll_ctl(w->epfd, EPOLL_CTL_ADD, ch->sock, &es) != 0) {
        log_error("worker %u: epoll_ctl: %s; dropping channel %llu", w->index, strerror(errno),
                  (unsigned long long)ch->id);
        recep_channel_destroy(ch); /* closing its fds also removes whatever was added */
        return;
    }
    __atomic_store_n(&ch->hdr->worker_cpu, w->cpu, __ATOMIC_RELAXED);
    g_ptr_array_add(w->channels, ch);
    __atomic_store_n(&w->nchannels, w->channels->len, __ATOMIC_RELAXED);
    log_debug("worker %u: channel %llu of pid %d", w->index, (unsigned long long)ch->id,
              (int)ch->pid);
}

static void reap(struct recep_worker *w)
{
    for (guint i = 0; i < w->channels->len;) {
        struct recep_channel *ch = g_ptr_array_index(w->channels, i);
        if (!ch->dead) {
            i++;
            continue;
        }
        /* Requests posted just before the client died are served first: their effect must not
         * depend on when we noticed the hang-up (and serving them leaves no key half-done).
         * Once: at most WIRE_SLOTS are posted at a time, and a client that keeps posting after
         * its hang-up must not keep the worker here. */
        size_t n = recep_channel_take(ch, w->batch, BATCH_MAX);
        if (n)
            recep_channel_run(w->batch, n, w->ctx);
        log_debug("worker %u: channel %llu closed (pid %d, %llu requests)", w->index,
                  (unsigned long long)ch->id, (int)ch->pid, (unsigned long long)ch->requests);
        /* Out of the epoll set before the descriptors close: a client that broke its ring still
         * holds copies of them, which would keep them registered (and firing) after the close. */
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, ch->doorbell, NULL);
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, ch->sock, NULL);
        recep_channel_destroy(ch);
        g_ptr_array_remove_index_fast(w->channels, i);
    }
    __atomic_store_n(&w->nchannels, w->channels->len, __ATOMIC_RELAXED);
}

/* One pass: take what the channels posted and run it as one batch. Returns the requests run. */
static size_t serve_pass(struct recep_worker *w)
{
    size_t n = 0;
    bool broken = false;
    uint64_t think = UINT64_MAX, wake = UINT64_MAX;
    const guint nch = w->channels->len;
    for (guint k = 0; k < nch && n < BATCH_MAX; k++) {
        struct recep_channel *ch = g_ptr_array_index(w->channels, (w->rotor + k) % nch);
        if (recep_channel_pending(ch)) {
            n += recep_channel_take(ch, w->batch + n, BATCH_MAX - n);
            broken |= ch->broken;
            uint64_t t = wire_hint(&ch->hdr->client_think_ns);
            uint64_t cw = wire_hint(&ch->hdr->client_wake_ns);
            if (t < think)
                think = t;
            if (cw && cw < wake)
                wake = cw;
        }
    }
    if (n) {
        w->think_ns = think;
        w->client_wake_ns = wake;
    }
    if (nch)
        w->rotor = (w->rotor + 1) % nch;
    if (n) {
        w->woke = recep_channel_run(w->batch, n, w->ctx);
        __atomic_fetch_add(&w->requests, n, __ATOMIC_RELAXED);
    }
    if (broken)
        reap(w);
    return n;
}

/* Tell the clients which CPU serves them (they do not spin for a worker queued behind them). */
static void publish_cpu(struct recep_worker *w)
{
    uint32_t c = wire_cpu_tag();
    if (c == w->cpu)
        return;
    w->cpu = c;
    for (guint i = 0; i < w->channels->len; i++) {
        struct recep_channel *ch = g_ptr_array_index(w->channels, i);
        __atomic_store_n(&ch->hdr->worker_cpu, c, __ATOMIC_RELAXED);
    }
}

static void set_parked(struct recep_worker *w, uint32_t v)
{
    for (guint i = 0; i < w->channels->len; i++) {
        struct recep_channel *ch = g_ptr_array_index(w->channels, i);
        wire_set_parked(ch->hdr, v);
    }
}

static bool any_pending(struct recep_worker *w)
{
    for (guint i = 0; i < w->channels->len; i++)
        if (recep_channel_pending(g_ptr_array_index(w->channels, i)))
            return true;
    return false;
}

/* What epoll_wait reported: the wake eventfd (drained), doorbells (nothing to do: waking us was
 * their job; edge-triggered, never read), and sockets (the client's end: closed here). */
static void handle_events(struct recep_worker *w, const struct epoll_event *evs, int n)
{
    bool hangups = false;
    for (int i = 0; i < n; i++) {
        uint64_t drain;
        if (evs[i].data.ptr == NULL) {
            if (read(w->wake, &drain, sizeof(drain)) < 0 && errno != EAGAIN)
                log_warn("worker %u: wake read: %s", w->index, strerror(errno));
        } else if ((uintptr_t)evs[i].data.ptr & SOCK_TAG) {
            struct recep_channel *ch = (void *)((uintptr_t)evs[i].data.ptr & ~(uintptr_t)SOCK_TAG);
            /* After the hello, a client sends nothing on its socket: any event is its end
             * (hang-up, or data it should not send, which ends it as well). */
            ch->dead = true;
            hangups = true;
        }
    }
    if (hangups)
        reap(w);
}

/* A worker that never runs out of work still looks at its epoll set this often, for hang-ups
 * (the channels of exited client threads must go even while others keep it busy). */
#define BUSY_POLL_NS 1000000ULL

static void *worker_main(void *arg)
{
    struct recep_worker *w = arg;
    struct epoll_event evs[64];
    uint64_t last = wire_now_ns();   /* when the last pass found work */
    uint64_t last_poll = last;       /* when epoll was last looked at */
    const uint64_t spin_cap_ns = (uint64_t)w->spin_us * 1000ULL;
    /* A worker waits for shipped calls' replies (modes sd, hy, auto) and backs off between
     * attempts in sleeps of microseconds; the default 50 us of timer slack would stretch each
     * to 50 us or more (a 256 B GET in mode sd: p50 85 us, against 21-55 us at 1 us). */
    if (prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0) != 0)
        log_warn("worker %u: PR_SET_TIMERSLACK: %s (short waits will sleep longer)", w->index,
                 strerror(errno));
    for (;;) {
        struct recep_channel *ch;
        while ((ch = g_async_queue_try_pop(w->incoming)) != NULL) {
            (void)__atomic_load_n(&w->handoffs, __ATOMIC_ACQUIRE);
            adopt(w, ch);
        }
        /* Before serving, so that a worker kept busy still stops (what is posted then is served
         * below). */
        if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE))
            break;
        if (serve_pass(w)) {
            last = wire_now_ns();
            publish_cpu(w);
            if (last - last_poll >= BUSY_POLL_NS) {
                last_poll = last;
                int n = epoll_wait(w->epfd, evs, 64, 0);
                if (n > 0)
                    handle_events(w, evs, n);
            }
            continue;
        }
        /* Stopped where the machine is crowded (nessie_cpu_crowded: threads queue for its
         * CPUs), not where it merely has no CPU to spare (nessie_cpu_spare, as a shipped call's
         * wait and the memcached port's threads ask): that count includes the clients that spin
         * themselves (a shim's wait for its reply, a load generator pacing an open loop), so it
         * parked the worker between requests of a busy open loop, and bench-quick's open-loop
         * capacity fell from ~100k to ~22k ops/s. Crowded takes more threads than a worker and
         * its client: clients on every node of a 2-CPU host (cpuload.c has the figures). */
        uint64_t budget = wire_worker_budget(w->think_ns, w->client_wake_ns, w->woke, spin_cap_ns);
        if (wire_now_ns() - last < budget && !nessie_cpu_crowded()) {
            /* Look at the rings between pauses (a request is noticed within one), at the clock
             * only now and then (it costs more). */
            for (int i = 0; i < WIRE_SPIN_CLOCK_EVERY && !any_pending(w); i++)
                wire_cpu_relax();
            if (w->help && !any_pending(w))
                nessie_sd_help(w->help);
            continue;
        }
        set_parked(w, 1);
        if (any_pending(w) || g_async_queue_length(w->incoming) > 0) {
            set_parked(w, 0);
            continue;
        }
        __atomic_store_n(&w->asleep, true, __ATOMIC_RELAXED);
        __atomic_fetch_add(&w->sleeps, 1, __ATOMIC_RELAXED);
        int n = epoll_wait(w->epfd, evs, 64, -1);
        __atomic_store_n(&w->asleep, false, __ATOMIC_RELAXED);
        set_parked(w, 0);
        if (n < 0 && errno != EINTR) {
            log_error("worker %u: epoll_wait: %s", w->index, strerror(errno));
            break;
        }
        last_poll = wire_now_ns();
        if (n > 0)
            handle_events(w, evs, n);
    }
    /* Stop: what was posted before is served, then every channel is closed. */
    for (int i = 0; i < WIRE_SLOTS && serve_pass(w) > 0; i++)
        ;
    for (guint i = 0; i < w->channels->len; i++)
        recep_channel_destroy(g_ptr_array_index(w->channels, i));
    g_ptr_array_set_size(w->channels, 0);
    struct recep_channel *ch;
    while ((ch = g_async_queue_try_pop(w->incoming)) != NULL) {
        (void)__atomic_load_n(&w->handoffs, __ATOMIC_ACQUIRE);
        recep_channel_destroy(ch);
    }
    return NULL;
}

int recep_worker_start(struct nessie_node *node, uint32_t index, uint32_t spin_us, bool sd_help,
                       struct recep_worker **out)
{
    struct recep_worker *w = calloc(1, sizeof(*w));
    if (!w)
        return -1;
    w->index = index;
    w->spin_us = spin_us;
    w->node = node;
    if (nessie_ctx_create(node, &w->ctx) != NESSIE_OK) {
        log_error("worker %u: cannot create an engine context", index);
        goto fail_ctx;
    }
    if (sd_help && (nessie_ctx_create(node, &w->help) != NESSIE_OK ||
                    nessie_ctx_set_sd_helper(w->ctx, w->help) != NESSIE_OK)) {
        log_error("worker %u: cannot create the engine context that helps the SD servers", index);
        goto fail_help;
    }
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w->epfd < 0) {
        log_error("worker %u: epoll_create1: %s", index, strerror(errno));
        goto fail_epoll;
    }
    w->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->wake < 0) {
        log_error("worker %u: eventfd: %s", index, strerror(errno));
        goto fail_wake;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->wake, &ev) != 0) {
        log_error("worker %u: epoll_ctl: %s", index, strerror(errno));
        goto fail_ctl;
    }
    w->incoming = g_async_queue_new();
    w->channels = g_ptr_array_new();
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        log_error("worker %u: pthread_create: %s", index, strerror(rc));
        goto fail_thread;
    }
    *out = w;
    return 0;

fail_thread:
    g_ptr_array_free(w->channels, TRUE);
    g_async_queue_unref(w->incoming);
fail_ctl:
    close(w->wake);
fail_wake:
    close(w->epfd);
fail_epoll:
fail_help:
    nessie_ctx_destroy(w->help);
    nessie_ctx_destroy(w->ctx);
fail_ctx:
    free(w);
    return -1;
}

static void ring(struct recep_worker *w)
{
    uint64_t one = 1;
    if (write(w->wake, &one, sizeof(one)) < 0 && errno != EAGAIN)
        log_warn("worker %u: wake: %s", w->index, strerror(errno));
}

void recep_worker_add(struct recep_worker *w, struct recep_channel *ch)
{
    __atomic_fetch_add(&w->handoffs, 1, __ATOMIC_RELEASE);
    g_async_queue_push(w->incoming, ch);
    ring(w);
}

void recep_worker_stop(struct recep_worker *w)
{
    if (!w)
        return;
    __atomic_store_n(&w->stop, true, __ATOMIC_RELEASE);
    ring(w);
    pthread_join(w->thread, NULL);
    g_ptr_array_free(w->channels, TRUE);
    g_async_queue_unref(w->incoming);
    close(w->wake);
    close(w->epfd);
    nessie_ctx_destroy(w->ctx);
    nessie_ctx_destroy(w->help);
    free(w);
}

void recep_worker_stats(const struct recep_worker *w, struct recep_worker_stats *out)
{
    out->requests = __atomic_load_n(&w->requests, __ATOMIC_RELAXED);
    out->sleeps = __atomic_load_n(&w->sleeps, __ATOMIC_RELAXED);
    out->channels = __atomic_load_n(&w->nchannels, __ATOMIC_RELAXED);
    out->asleep = __atomic_load_n(&w->asleep, __ATOMIC_RELAXED);
}
