/*
 * fabric_verbs.c - the RDMA fabric backend: rdma-core verbs over RC queue pairs, connections set
 * up with librdmacm. Runs on any RDMA NIC and on Soft-RoCE (rdma_rxe).
 *
 * Regions. A node's INDEX and DATA regions are the shared-memory backend's POSIX shared memory
 * objects (so a restarted daemon re-attaches its tables exactly as on one host), registered as
 * memory regions with remote read, write and atomic access. Every node runs a listener (a thread
 * per process) on its address from the configuration; a peer's connection request carries the
 * cluster and the peer's node, and the reply carries this node's region addresses and rkeys.
 *
 * Endpoints. An endpoint owns one CQ and, per peer it talked to, one RC QP, connected on first
 * use, itself included: the owner of an index entry reaches it through its NIC like everybody
 * else, since a NIC's atomics are not atomic against the CPU's (paper 4.1.1). Requests are posted
 * as one chain per QP (one doorbell), signalled, and completed by polling the CQ.
 *
 * Local buffers. The engine passes ordinary memory. Requests of up to VERBS_BOUNCE_SLOT bytes go
 * through the endpoint's registered bounce buffer, one slot per request in flight (copied in at
 * post for WRITE, out at completion for READ and CAS); larger ones register the caller's buffer
 * for the time of the request.
 *
 * Failures. A connection that cannot be set up, or a QP that went to error (peer gone, retries
 * exhausted), makes its requests complete with FAB_ERR_UNREACH, never a hang: requests that
 * could not be posted get a completion made here, and the NIC flushes the others.
 *
 * Dead nodes. The first such failure marks the node down for the whole process: from then on
 * every request to it, from every endpoint, fails at once (no endpoint connects to it, so no
 * worker waits for a connect to a host that is gone), and the prober thread alone tries to
 * reach it, with a connection of its own, at growing intervals. When a probe connects, the node
 * is up again and endpoints reconnect their QPs on their next request to it (a connect to a live
 * node takes milliseconds).
 */
#include "clock.h"
#include "fabric_int.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "log.h"
#include "membership/membership.h"

/* Tunables, with their reason:
 * - the bounce slot covers index entries, DTE headers and small values; larger requests
 *   register the caller's buffer instead (a registration costs microseconds, a copy of more
 *   than this costs more);
 * - connection steps wait this long: rdma_cm's address and route resolution answer within
 *   milliseconds on a live network, so this only bounds the wait for a peer that is gone;
 * - READ/atomic depth: outstanding READs and atomics per QP, capped by the device. */
#define VERBS_BOUNCE_SLOT 4096
#define VERBS_CONNECT_MS 3000
#define VERBS_RD_ATOMIC 16
/* Local ACK timeout exponent: 4.096 us x 2^16 = 268 ms per try, 7 tries: a peer that is gone fails
 * its requests in about 2 s (the default lets them hang for many seconds, which looks like a
 * hang to a crash-restart test). */
#define VERBS_ACK_TIMEOUT 16
#define VERBS_RETRY_COUNT 7
/* The NIC's own limit on a request: a try every 4.096 us x 2^VERBS_ACK_TIMEOUT, the first and
 * VERBS_RETRY_COUNT more, after which the QP errors and nothing of it runs any more; rounded up.
 * A request posted to a live peer lands long before; this is what the engine's call bound must
 * allow for a request that is retransmitted until the last try (fab_request_bound_ns). */
#define VERBS_REQUEST_BOUND_MS \
    ((4096ULL << VERBS_ACK_TIMEOUT) * (VERBS_RETRY_COUNT + 1) / 1000000ULL + 1)
/* After a failed connect, requests to that peer fail at once for a while before the next
 * attempt: a connect to a host that is gone blocks the calling worker for up to 3 connection
 * steps of VERBS_CONNECT_MS. The wait doubles per failure from the first value to the last, and
 * starts over once a connect succeeds; the first is short so a restarted peer is found soon. */
#define VERBS_RETRY_FIRST_MS 100
#define VERBS_RETRY_MAX_MS 5000
/* The prober tries a down node after these waits, doubling: soon enough that a restarted node
 * serves again within a fraction of a second, rarely enough that a node gone for good costs
 * nothing (each probe of a gone host blocks only the prober, for up to 3 connect steps). */
#define VERBS_PROBE_FIRST_MS 50
#define VERBS_PROBE_MAX_MS 2000
/* A request outstanding this long is to a node that is gone: its QP is moved to the error state,
 * which completes everything in flight on it with an error, and the node is marked down. The
 * NIC's own retries (VERBS_ACK_TIMEOUT) should end it sooner, but rxe does not always: a
 * request to a killed process was seen outstanding for minutes. Longer than a live peer under
 * load ever takes (milliseconds, even in a TCG guest), shorter than any operation's budget. */
#define VERBS_REQUEST_TIMEOUT_MS 1500
#define VERBS_HELLO_MAGIC 0x4E565242u /* "NVRB" */

/* Connection private data, both ways: who is asking (request) and where the regions are (reply).
 * 52 bytes: inside the 56 an RC connection request may carry (so a fourth region would not fit). */
struct verbs_hello {
    uint32_t magic;
    uint32_t node;
    uint64_t cluster_hash;
    uint64_t addr[FAB_REGION_COUNT];
    uint32_t rkey[FAB_REGION_COUNT];
};
_Static_assert(sizeof(struct verbs_hello) <= 56, "hello fits a connection request's private data");

struct verbs_fab {
    void *shm_priv;                      /* the shared-memory backend's state (the regions) */
    char **addrs;                        /* copy of the configuration's, fab->cfg.addrs points here */
    char *device;
    struct rdma_event_channel *listen_ec;
    struct rdma_cm_id *listen_id;
    struct ibv_context *ctx;             /* the device the listener's address is on */
    struct ibv_pd *pd;
    struct ibv_mr *mr[FAB_REGION_COUNT];
    struct ibv_cq *passive_cq;           /* accepted QPs post nothing; they need a CQ anyway */
    uint32_t rd_atomic;
    uint64_t cluster_hash;
    pthread_t listener;
    int stop_pipe[2];
    /* Connections the listener accepted, so close can end them before the CQ, MRs and PD they
     * use. Only the listener thread touches this, and close after joining it. */
    struct rdma_cm_id **accepted;
    size_t naccepted, accepted_cap;
    /* Per node: since when (monotonic ns) it is believed down, 0 if not. Set by any endpoint
     * that fails to reach it, cleared by the prober only. */
    _Atomic uint64_t *down_since;
    /* Per node: it connected to us while believed down, or a view readmitted it, so it is
     * probed at once rather than after its back-off. Set by the listener and by posts, cleared
     * by the prober. */
    _Atomic bool *probe_now;
    /* Per node: the readmissions (mship_lives) the endpoints have seen: one that moved is a node
     * back on new tables and listening again (membership.h, "Rejoin"). */
    _Atomic uint32_t *life;
    pthread_t prober;
    pthread_mutex_t probe_lock;
    pthread_cond_t probe_cond;    /* a node went down, or close: the prober looks again */
    bool probe_stop;
};

struct verbs_conn {
    struct rdma_event_channel *ec;
    struct rdma_cm_id *id;
    struct verbs_hello peer;             /* its regions */
    bool up;
    bool broken;                         /* QP in error or never connected: reconnect when idle */
    bool flushed;                        /* moved to the error state by us: completions follow */
    uint32_t inflight;
    uint64_t retry_ns;                   /* no connect attempt before this (monotonic) */
    uint32_t backoff_ms;                 /* the wait after the next failed attempt */
};

struct verbs_req {                       /* a request in flight, indexed by its slot */
    uint64_t wr_id;
    enum fab_opcode opcode;
    void *local;
    uint32_t length;
    uint32_t node;
    struct ibv_mr *tmp_mr;               /* registered caller buffer, or NULL (bounce slot) */
    bool used;
    uint64_t posted_ns;                  /* monotonic, for VERBS_REQUEST_TIMEOUT_MS */
};

struct verbs_ep {
    struct ibv_cq *cq;
    unsigned char *bounce;
    struct ibv_mr *bounce_mr;
    struct verbs_req *req;               /* depth slots */
    uint32_t *free_slots, nfree;
    struct verbs_conn *conn;             /* per node */
    struct fab_wc *synth;                /* completions made here (requests never posted) */
    uint32_t nsynth;
    uint64_t next_check_ns;              /* when an idle poll next looks for stuck requests */
};

/* Note that node is unreachable: every endpoint fails its requests to it at once from now on,
 * and the prober starts trying it. */
static void mark_down(struct fab *fab, uint32_t node)
{
    struct verbs_fab *v = fab->priv;
    uint64_t zero = 0;
    if (node == fab->cfg.self)
        return; /* our own regions: never down while we run */
    if (atomic_compare_exchange_strong(&v->down_since[node], &zero, nessie_mono_ns())) {
        log_warn("fabric verbs: node %u (%s) is down: its requests fail at once until a probe "
                 "reaches it", node, fab->cfg.addrs[node]);
        pthread_mutex_lock(&v->probe_lock);
        pthread_cond_signal(&v->probe_cond);
        pthread_mutex_unlock(&v->probe_lock);
    }
}

/* Remember an accepted connection. Returns 0, or -1 (out of memory: the caller rejects it). */
static int accepted_add(struct verbs_fab *v, struct rdma_cm_id *id)
{
    if (v->naccepted == v->accepted_cap) {
        size_t cap = v->accepted_cap ? v->accepted_cap * 2 : 16;
        struct rdma_cm_id **a = realloc(v->accepted, cap * sizeof(*a));
        if (!a)
            return -1;
        v->accepted = a;
        v->accepted_cap = cap;
    }
    v->accepted[v->naccepted++] = id;
    return 0;
}

/* Forget an accepted connection (no-op for one never added). */
static void accepted_remove(struct verbs_fab *v, struct rdma_cm_id *id)
{
    for (size_t i = 0; i < v->naccepted; i++) {
        if (v->accepted[i] == id) {
            v->accepted[i] = v->accepted[--v->naccepted];
            return;
        }
    }
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* Split "host:port" into a sockaddr. Returns 0, or -1 (logged). */
static int resolve(const char *hostport, struct sockaddr_storage *sa, socklen_t *len)
{
    char host[256];
    const char *colon = hostport ? strrchr(hostport, ':') : NULL;
    if (!colon || colon == hostport || (size_t)(colon - hostport) >= sizeof(host)) {
        log_error("fabric verbs: address \"%s\": expected HOST:PORT", hostport ? hostport : "");
        return -1;
    }
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc != 0 || !ai) {
        log_error("fabric verbs: address %s: %s", hostport, gai_strerror(rc));
        return -1;
    }
    memcpy(sa, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* Wait up to VERBS_CONNECT_MS for the next event on ec; it must be `want`. Returns 0 and the
 * event (to be acked by the caller), or -1 (logged; nothing to ack). */
static int wait_event(struct rdma_event_channel *ec, enum rdma_cm_event_type want,
                      struct rdma_cm_event **out)
{
    struct pollfd p = {.fd = ec->fd, .events = POLLIN};
    int rc = poll(&p, 1, VERBS_CONNECT_MS);
    if (rc <= 0) {
        log_warn("fabric verbs: no %s within %d ms", rdma_event_str(want), VERBS_CONNECT_MS);
        return -1;
    }
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(ec, &ev) != 0) {
        log_warn("fabric verbs: rdma_get_cm_event: %s", strerror(errno));
        return -1;
    }
    if (ev->event != want) {
        log_warn("fabric verbs: expected %s, got %s (status %d)", rdma_event_str(want),
                 rdma_event_str(ev->event), ev->status);
        rdma_ack_cm_event(ev);
        return -1;
    }
    *out = ev;
    return 0;
}

static void fill_hello(const struct fab *fab, struct verbs_hello *h)
{
    const struct verbs_fab *v = fab->priv;
    memset(h, 0, sizeof(*h));
    h->magic = VERBS_HELLO_MAGIC;
    h->node = fab->cfg.self;
    h->cluster_hash = v->cluster_hash;
    for (int r = 0; r < FAB_REGION_COUNT; r++) {
        h->addr[r] = (uintptr_t)fab->local[r].base;
        h->rkey[r] = v->mr[r]->rkey;
    }
}

/* Remote access on a QP in INIT: READ, WRITE and atomics from the peer. */
static int allow_remote(struct ibv_qp *qp)
{
    struct ibv_qp_attr a = {.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                               IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC};
    return ibv_modify_qp(qp, &a, IBV_QP_ACCESS_FLAGS);
}

static void *prober_main(void *arg);

/* The listener: accepts peers' connections with a QP that answers their requests. */
static void *listener_main(void *arg)
{
    struct fab *fab = arg;
    struct verbs_fab *v = fab->priv;
    struct pollfd p[2] = {{.fd = v->listen_ec->fd, .events = POLLIN},
                          {.fd = v->stop_pipe[0], .events = POLLIN}};
    for (;;) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            log_error("fabric verbs: listener poll: %s", strerror(errno));
            return NULL;
        }
        if (p[1].revents)
            return NULL;
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(v->listen_ec, &ev) != 0)
            continue;
        struct rdma_cm_id *id = ev->id;
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
            const struct verbs_hello *h = ev->param.conn.private_data;
            struct verbs_hello mine;
            fill_hello(fab, &mine);
            struct ibv_qp_init_attr qa = {
                .send_cq = v->passive_cq, .recv_cq = v->passive_cq, .qp_type = IBV_QPT_RC,
                .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
            struct rdma_conn_param cp = {.private_data = &mine, .private_data_len = sizeof(mine),
                                         .responder_resources = (uint8_t)v->rd_atomic,
                                         .initiator_depth = (uint8_t)v->rd_atomic};
            if (ev->param.conn.private_data_len < sizeof(*h) || h->magic != VERBS_HELLO_MAGIC ||
                h->cluster_hash != v->cluster_hash || h->node >= fab->cfg.nodes) {
                log_warn("fabric verbs: refused a connection from outside cluster %s", fab->cluster);
                rdma_reject(id, NULL, 0);
                rdma_ack_cm_event(ev);
                rdma_destroy_id(id);
                continue;
            }
            if (id->verbs != v->ctx || accepted_add(v, id) != 0) {
                log_warn("fabric verbs: cannot accept node %u: %s", h->node,
                         id->verbs != v->ctx ? "it came in on another device" : "out of memory");
                rdma_reject(id, NULL, 0);
                rdma_ack_cm_event(ev);
                rdma_destroy_id(id);
                continue;
            }
            if (rdma_create_qp(id, v->pd, &qa) != 0 || allow_remote(id->qp) != 0 ||
                rdma_accept(id, &cp) != 0) {
                accepted_remove(v, id);
                log_warn("fabric verbs: cannot accept node %u: %s", h->node, strerror(errno));
                if (id->qp)
                    rdma_destroy_qp(id);
                rdma_reject(id, NULL, 0);
                rdma_ack_cm_event(ev);
                rdma_destroy_id(id);
                continue;
            }
            /* A peer that connects is up, whatever we believed: probe it now rather than after
             * its back-off, so a cluster whose hosts start one after another serves as soon
             * as the last one is up, not up to VERBS_PROBE_MAX_MS later (make test-rxe's two
             * guests: A's daemons marked node 2 down at start, before B's was up, and A's
             * first SET after B said it was up failed). A probe, not a plain "up": the peer
             * reaching us does not prove we reach it. */
            if (atomic_load(&v->down_since[h->node]) != 0) {
                atomic_store(&v->probe_now[h->node], true);
                pthread_mutex_lock(&v->probe_lock);
                pthread_cond_signal(&v->probe_cond);
                pthread_mutex_unlock(&v->probe_lock);
            }
            rdma_ack_cm_event(ev);
        } else if (ev->event == RDMA_CM_EVENT_DISCONNECTED ||
                   ev->event == RDMA_CM_EVENT_CONNECT_ERROR ||
                   ev->event == RDMA_CM_EVENT_UNREACHABLE || ev->event == RDMA_CM_EVENT_REJECTED) {
            /* An accepted connection that ended, or never completed (the peer gave up before
             * our accept reached it): nothing else will free it. */
            rdma_ack_cm_event(ev);
            accepted_remove(v, id);
            if (id->qp)
                rdma_destroy_qp(id);
            rdma_destroy_id(id);
        } else {
            rdma_ack_cm_event(ev);
        }
    }
}

static int verbs_open(struct fab *fab, bool *created)
{
    const struct fab_config *cfg = &fab->cfg;
    if (!cfg->addrs || !cfg->addrs[cfg->self]) {
        log_error("fabric verbs: no address for node %u in the configuration", cfg->self);
        return FAB_ERR_INVAL;
    }
    struct sockaddr_storage sa;
    socklen_t salen;
    if (resolve(cfg->addrs[cfg->self], &sa, &salen) != 0)
        return FAB_ERR_INVAL;
    struct verbs_fab *v = calloc(1, sizeof(*v));
    if (!v)
        return FAB_ERR_NOMEM;
    int rc = FAB_ERR_NOMEM;
    v->stop_pipe[0] = v->stop_pipe[1] = -1;
    v->cluster_hash = hash_name(fab->cluster);
    v->addrs = calloc(cfg->nodes, sizeof(*v->addrs));
    if (!v->addrs) {
        free(v);
        return FAB_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < cfg->nodes; i++)
        if (cfg->addrs[i] && !(v->addrs[i] = strdup(cfg->addrs[i])))
            goto fail_free;
    if (cfg->device && !(v->device = strdup(cfg->device)))
        goto fail_free;
    fab->cfg.addrs = (const char *const *)v->addrs;
    fab->cfg.device = v->device;

    /* Setup ladder; the labels below undo it in reverse. */
    rc = fab_shm_ops.open(fab, created); /* the regions themselves */
    if (rc != FAB_OK)
        goto fail_free;
    v->shm_priv = fab->priv;
    fab->priv = v;
    rc = FAB_ERR_SYS;
    if (!(v->listen_ec = rdma_create_event_channel())) {
        if (errno == ENODEV || errno == ENOENT) {
            log_error("fabric verbs: this host has no RDMA (no rdma_cm device; with Soft-RoCE: "
                      "rdma link add rxe0 type rxe netdev eth0)");
            rc = FAB_ERR_NOTSUP;
        } else {
            log_error("fabric verbs: rdma_create_event_channel: %s", strerror(errno));
        }
        goto fail_shm;
    }
    if (rdma_create_id(v->listen_ec, &v->listen_id, fab, RDMA_PS_TCP) != 0) {
        log_error("fabric verbs: rdma_create_id: %s", strerror(errno));
        goto fail_ec;
    }
    if (rdma_bind_addr(v->listen_id, (struct sockaddr *)&sa) != 0 || !v->listen_id->verbs) {
        log_error("fabric verbs: cannot bind %s to an RDMA device: %s (is there one, with this "
                  "address on its netdev?)", cfg->addrs[cfg->self], strerror(errno));
        rc = FAB_ERR_UNREACH;
        goto fail_id;
    }
    v->ctx = v->listen_id->verbs;
    if (cfg->device && strcmp(cfg->device, ibv_get_device_name(v->ctx->device)) != 0) {
        log_error("fabric verbs: %s is on device %s, the configuration says %s",
                  cfg->addrs[cfg->self], ibv_get_device_name(v->ctx->device), cfg->device);
        rc = FAB_ERR_INVAL;
        goto fail_id;
    }
    struct ibv_device_attr da;
    if (ibv_query_device(v->ctx, &da) != 0) {
        log_error("fabric verbs: ibv_query_device: %s", strerror(errno));
        goto fail_id;
    }
    v->rd_atomic = VERBS_RD_ATOMIC;
    if ((uint32_t)da.max_qp_rd_atom < v->rd_atomic)
        v->rd_atomic = (uint32_t)da.max_qp_rd_atom;
    if ((uint32_t)da.max_qp_init_rd_atom < v->rd_atomic)
        v->rd_atomic = (uint32_t)da.max_qp_init_rd_atom;
    if (!(v->pd = ibv_alloc_pd(v->ctx))) {
        log_error("fabric verbs: ibv_alloc_pd: %s", strerror(errno));
        goto fail_id;
    }
    int r;
    for (r = 0; r < FAB_REGION_COUNT; r++) {
        v->mr[r] = ibv_reg_mr(v->pd, fab->local[r].base, fab->local[r].size,
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
        if (!v->mr[r]) {
            log_error("fabric verbs: ibv_reg_mr of %llu bytes: %s (ulimit -l?)",
                      (unsigned long long)fab->local[r].size, strerror(errno));
            goto fail_mr;
        }
    }
    if (!(v->passive_cq = ibv_create_cq(v->ctx, 4, NULL, NULL, 0))) {
        log_error("fabric verbs: ibv_create_cq: %s", strerror(errno));
        goto fail_mr;
    }
    if (pipe(v->stop_pipe) != 0) {
        log_error("fabric verbs: pipe: %s", strerror(errno));
        goto fail_cq;
    }
    /* The prober's state comes before the listener, which tells the prober of peers that
     * connect; the prober itself after it. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the prober waits on monotonic time */
    pthread_cond_init(&v->probe_cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&v->probe_lock, NULL);
    if (!(v->down_since = calloc(cfg->nodes, sizeof(*v->down_since))) ||
        !(v->probe_now = calloc(cfg->nodes, sizeof(*v->probe_now))) ||
        !(v->life = calloc(cfg->nodes, sizeof(*v->life)))) {
        log_error("fabric verbs: out of memory for the prober's state");
        goto fail_probe;
    }
    if (rdma_listen(v->listen_id, 64) != 0) {
        log_error("fabric verbs: rdma_listen on %s: %s", cfg->addrs[cfg->self], strerror(errno));
        goto fail_probe;
    }
    if (pthread_create(&v->listener, NULL, listener_main, fab) != 0) {
        log_error("fabric verbs: cannot start the listener");
        goto fail_probe;
    }
    if (pthread_create(&v->prober, NULL, prober_main, fab) != 0) {
        log_error("fabric verbs: cannot start the prober");
        goto fail_listener;
    }
    return FAB_OK;

fail_listener:
    if (write(v->stop_pipe[1], "x", 1) != 1)
        log_warn("fabric verbs: cannot stop the listener: %s", strerror(errno));
    pthread_join(v->listener, NULL);
fail_probe:
    free(v->life);
    free(v->probe_now);
    free(v->down_since);
    pthread_cond_destroy(&v->probe_cond);
    pthread_mutex_destroy(&v->probe_lock);
    close(v->stop_pipe[0]);
    close(v->stop_pipe[1]);
fail_cq:
    ibv_destroy_cq(v->passive_cq);
fail_mr:
    while (--r >= 0)
        ibv_dereg_mr(v->mr[r]);
    ibv_dealloc_pd(v->pd);
fail_id:
    rdma_destroy_id(v->listen_id);
fail_ec:
    rdma_destroy_event_channel(v->listen_ec);
fail_shm:
    fab->priv = v->shm_priv;
    fab_shm_ops.close(fab);
    if (*created) /* leave nothing this call made */
        fab_shm_ops.unlink(fab->cluster, cfg->self);
fail_free:
    for (uint32_t i = 0; i < cfg->nodes; i++)
        free(v->addrs[i]);
    free(v->addrs);
    free(v->device);
    free(v);
    return rc;
}

static void verbs_close(struct fab *fab)
{
    struct verbs_fab *v = fab->priv;
    pthread_mutex_lock(&v->probe_lock);
    v->probe_stop = true;
    pthread_cond_signal(&v->probe_cond);
    pthread_mutex_unlock(&v->probe_lock);
    pthread_join(v->prober, NULL);
    if (write(v->stop_pipe[1], "x", 1) != 1)
        log_warn("fabric verbs: cannot stop the listener: %s", strerror(errno));
    pthread_join(v->listener, NULL);
    /* The listener signals the prober: its state goes once both are gone. */
    pthread_cond_destroy(&v->probe_cond);
    pthread_mutex_destroy(&v->probe_lock);
    free(v->life);
    free(v->probe_now);
    free(v->down_since);
    close(v->stop_pipe[0]);
    close(v->stop_pipe[1]);
    /* End the accepted connections before what they use goes: their peers' requests then fail
     * as unreachable (and reconnect later) rather than reach deregistered memory. */
    for (size_t i = 0; i < v->naccepted; i++) {
        struct rdma_cm_id *id = v->accepted[i];
        rdma_disconnect(id);
        if (id->qp)
            rdma_destroy_qp(id);
        rdma_destroy_id(id);
    }
    free(v->accepted);
    rdma_destroy_id(v->listen_id);
    ibv_destroy_cq(v->passive_cq);
    for (int r = FAB_REGION_COUNT - 1; r >= 0; r--)
        ibv_dereg_mr(v->mr[r]);
    ibv_dealloc_pd(v->pd);
    rdma_destroy_event_channel(v->listen_ec);
    fab->priv = v->shm_priv;
    fab_shm_ops.close(fab);
    for (uint32_t i = 0; i < fab->cfg.nodes; i++)
        free(v->addrs[i]);
    free(v->addrs);
    free(v->device);
    free(v);
}

static int verbs_unlink(const char *cluster, uint32_t node)
{
    return fab_shm_ops.unlink(cluster, node);
}

static void conn_drop(struct verbs_conn *c)
{
    if (c->id) {
        if (c->up)
            rdma_disconnect(c->id);
        if (c->id->qp)
            rdma_destroy_qp(c->id);
        rdma_destroy_id(c->id);
    }
    if (c->ec)
        rdma_destroy_event_channel(c->ec);
    c->id = NULL;
    c->ec = NULL;
    c->up = false;
    c->flushed = false;
}

/* Connect c to node with a QP on cq able to hold depth requests. Returns 0, or -1 (logged) with
 * nothing left behind. Blocks for up to 3 connect steps of VERBS_CONNECT_MS on a host that is
 * gone: endpoints call it only for nodes not known down, the prober for the others. */
static int conn_connect(struct fab *fab, struct verbs_conn *c, uint32_t node, struct ibv_cq *cq,
                        uint32_t depth)
{
    struct verbs_fab *v = fab->priv;
    struct sockaddr_storage sa;
    socklen_t salen;
    struct rdma_cm_event *ev;
    if (!fab->cfg.addrs[node] || resolve(fab->cfg.addrs[node], &sa, &salen) != 0)
        return -1;
    if (!(c->ec = rdma_create_event_channel()) ||
        rdma_create_id(c->ec, &c->id, NULL, RDMA_PS_TCP) != 0) {
        log_warn("fabric verbs: cannot create a connection id: %s", strerror(errno));
        goto fail;
    }
    if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&sa, VERBS_CONNECT_MS) != 0 ||
        wait_event(c->ec, RDMA_CM_EVENT_ADDR_RESOLVED, &ev) != 0)
        goto fail;
    rdma_ack_cm_event(ev);
    if (rdma_resolve_route(c->id, VERBS_CONNECT_MS) != 0 ||
        wait_event(c->ec, RDMA_CM_EVENT_ROUTE_RESOLVED, &ev) != 0)
        goto fail;
    rdma_ack_cm_event(ev);
    uint8_t ack_timeout = VERBS_ACK_TIMEOUT;
    if (rdma_set_option(c->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout,
                        sizeof(ack_timeout)) != 0)
        log_warn("fabric verbs: cannot set the ACK timeout: %s (using the default)",
                 strerror(errno));
    if (c->id->verbs != v->ctx) {
        log_warn("fabric verbs: node %u (%s) is reached through another device than this node's "
                 "regions are on", node, fab->cfg.addrs[node]);
        goto fail;
    }
    struct ibv_qp_init_attr qa = {
        .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
        .cap = {.max_send_wr = depth, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
    if (rdma_create_qp(c->id, v->pd, &qa) != 0 || allow_remote(c->id->qp) != 0) {
        log_warn("fabric verbs: cannot create a QP to node %u: %s", node, strerror(errno));
        goto fail;
    }
    struct verbs_hello mine;
    fill_hello(fab, &mine);
    struct rdma_conn_param cp = {.private_data = &mine, .private_data_len = sizeof(mine),
                                 .responder_resources = (uint8_t)v->rd_atomic,
                                 .initiator_depth = (uint8_t)v->rd_atomic,
                                 .retry_count = VERBS_RETRY_COUNT,
                                 .rnr_retry_count = 7};
    if (rdma_connect(c->id, &cp) != 0 ||
        wait_event(c->ec, RDMA_CM_EVENT_ESTABLISHED, &ev) != 0) {
        log_warn("fabric verbs: cannot connect to node %u at %s", node, fab->cfg.addrs[node]);
        goto fail;
    }
    const struct verbs_hello *h = ev->param.conn.private_data;
    bool ok = ev->param.conn.private_data_len >= sizeof(*h) && h->magic == VERBS_HELLO_MAGIC &&
              h->cluster_hash == v->cluster_hash && h->node == node;
    if (ok)
        c->peer = *h;
    rdma_ack_cm_event(ev);
    if (!ok) {
        log_warn("fabric verbs: %s does not answer as node %u of cluster %s", fab->cfg.addrs[node],
                 node, fab->cluster);
        c->up = true;
        goto fail;
    }
    c->up = true;
    c->broken = false;
    return 0;
fail:
    conn_drop(c);
    return -1;
}

/* Connect ep's QP to node. Returns 0, or -1 (logged) with nothing left behind. */
static int conn_open(struct fab_ep *ep, uint32_t node)
{
    struct verbs_ep *e = ep->priv;
    return conn_connect(ep->fab, &e->conn[node], node, e->cq, ep->depth);
}

/*
 * The prober: the only thread that tries to reach nodes believed down. A probe is a whole
 * connection (address, route, connect, the peer's hello checked), then closed: a node that
 * answers it as itself serves again. Tries each down node after VERBS_PROBE_FIRST_MS, doubling
 * to VERBS_PROBE_MAX_MS.
 */
static void *prober_main(void *arg)
{
    struct fab *fab = arg;
    struct verbs_fab *v = fab->priv;
    uint32_t n = fab->cfg.nodes;
    uint64_t *next = calloc(n, sizeof(*next));
    uint32_t *wait_ms = calloc(n, sizeof(*wait_ms));
    if (!next || !wait_ms) {
        log_error("fabric verbs: out of memory for the prober; down nodes stay down");
        free(next);
        free(wait_ms);
        return NULL;
    }
    pthread_mutex_lock(&v->probe_lock);
    while (!v->probe_stop) {
        uint64_t now = nessie_mono_ns(), soonest = UINT64_MAX;
        for (uint32_t i = 0; i < n && !v->probe_stop; i++) {
            if (atomic_load(&v->down_since[i]) == 0) {
                next[i] = 0;
                wait_ms[i] = 0;
                continue;
            }
            if (next[i] == 0) { /* newly down */
                wait_ms[i] = VERBS_PROBE_FIRST_MS;
                next[i] = now + (uint64_t)wait_ms[i] * 1000000ULL;
            }
            if (atomic_exchange(&v->probe_now[i], false))
                next[i] = now; /* it connected to us: see whether we reach it too */
            if (next[i] <= now) {
                pthread_mutex_unlock(&v->probe_lock);
                struct verbs_conn c = {0};
                int rc = conn_connect(fab, &c, i, v->passive_cq, 1);
                conn_drop(&c);
                pthread_mutex_lock(&v->probe_lock);
                now = nessie_mono_ns();
                if (rc == 0) {
                    log_info("fabric verbs: node %u (%s) is reachable again, after %.1f s", i,
                             fab->cfg.addrs[i], (double)(now - atomic_load(&v->down_since[i])) / 1e9);
                    atomic_store(&v->down_since[i], 0);
                    next[i] = 0;
                    continue;
                }
                wait_ms[i] = wait_ms[i] * 2 > VERBS_PROBE_MAX_MS ? VERBS_PROBE_MAX_MS : wait_ms[i] * 2;
                next[i] = now + (uint64_t)wait_ms[i] * 1000000ULL;
            }
            if (next[i] < soonest)
                soonest = next[i];
        }
        if (v->probe_stop)
            break;
        if (soonest == UINT64_MAX) {
            pthread_cond_wait(&v->probe_cond, &v->probe_lock);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t until = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec +
                             (soonest > now ? soonest - now : 0);
            ts.tv_sec = (time_t)(until / 1000000000ULL);
            ts.tv_nsec = (long)(until % 1000000000ULL);
            pthread_cond_timedwait(&v->probe_cond, &v->probe_lock, &ts);
        }
    }
    pthread_mutex_unlock(&v->probe_lock);
    free(next);
    free(wait_ms);
    return NULL;
}

static int verbs_ep_init(struct fab_ep *ep)
{
    struct verbs_fab *v = ep->fab->priv;
    struct verbs_ep *e = calloc(1, sizeof(*e));
    if (!e)
        return FAB_ERR_NOMEM;
    int rc = FAB_ERR_NOMEM;
    e->req = calloc(ep->depth, sizeof(*e->req));
    e->free_slots = calloc(ep->depth, sizeof(*e->free_slots));
    e->synth = calloc(ep->depth, sizeof(*e->synth));
    e->conn = calloc(ep->fab->cfg.nodes, sizeof(*e->conn));
    if (!e->req || !e->free_slots || !e->synth || !e->conn)
        goto fail;
    for (uint32_t i = 0; i < ep->depth; i++)
        e->free_slots[e->nfree++] = ep->depth - 1 - i;
    size_t bytes = (size_t)ep->depth * VERBS_BOUNCE_SLOT;
    if (posix_memalign((void **)&e->bounce, 4096, bytes) != 0)
        goto fail;
    rc = FAB_ERR_SYS;
    if (!(e->bounce_mr = ibv_reg_mr(v->pd, e->bounce, bytes, IBV_ACCESS_LOCAL_WRITE))) {
        log_error("fabric verbs: ibv_reg_mr (bounce): %s", strerror(errno));
        goto fail_bounce;
    }
    if (!(e->cq = ibv_create_cq(v->ctx, (int)(ep->depth * 2), NULL, NULL, 0))) {
        log_error("fabric verbs: ibv_create_cq: %s", strerror(errno));
        goto fail_mr;
    }
    ep->priv = e;
    return FAB_OK;
fail_mr:
    ibv_dereg_mr(e->bounce_mr);
fail_bounce:
    free(e->bounce);
fail:
    free(e->conn);
    free(e->synth);
    free(e->free_slots);
    free(e->req);
    free(e);
    return rc;
}

static void verbs_ep_fini(struct fab_ep *ep)
{
    struct verbs_ep *e = ep->priv;
    for (uint32_t n = 0; n < ep->fab->cfg.nodes; n++)
        conn_drop(&e->conn[n]);
    for (uint32_t i = 0; i < ep->depth; i++)
        if (e->req[i].used && e->req[i].tmp_mr)
            ibv_dereg_mr(e->req[i].tmp_mr);
    ibv_destroy_cq(e->cq);
    ibv_dereg_mr(e->bounce_mr);
    free(e->bounce);
    free(e->conn);
    free(e->synth);
    free(e->free_slots);
    free(e->req);
    free(e);
}

static void synth_fail(struct verbs_ep *e, const struct fab_wr *wr)
{
    e->synth[e->nsynth++] = (struct fab_wc){.wr_id = wr->wr_id, .opcode = wr->opcode,
                                            .status = FAB_ERR_UNREACH};
}

/* Release slot s after its completion. */
static void slot_put(struct verbs_ep *e, uint32_t s)
{
    if (e->req[s].tmp_mr)
        ibv_dereg_mr(e->req[s].tmp_mr);
    e->req[s].tmp_mr = NULL;
    e->req[s].used = false;
    e->free_slots[e->nfree++] = s;
}

static void verbs_post(struct fab_ep *ep, const struct fab_wr *wrs, size_t n)
{
    struct verbs_ep *e = ep->priv;
    struct verbs_fab *v = ep->fab->priv;
    struct ibv_send_wr sw[n];
    struct ibv_sge sg[n];
    bool done[n];
    memset(done, 0, sizeof(done));
    /* One chain per target node, in the order given. */
    for (size_t i = 0; i < n; i++) {
        if (done[i])
            continue;
        uint32_t node = wrs[i].node;
        struct verbs_conn *c = &e->conn[node];
        bool down = atomic_load_explicit(&v->down_since[node], memory_order_relaxed) != 0;
        if (down && ep->fab->fence) {
            /* Readmitted since (a view lifted its fence): it is back, on new tables, so probe
             * it now rather than after a back-off grown over its whole absence. */
            uint32_t life = mship_lives(ep->fab->fence, node);
            if (life != atomic_load_explicit(&v->life[node], memory_order_relaxed) &&
                atomic_exchange_explicit(&v->life[node], life, memory_order_relaxed) != life) {
                atomic_store(&v->probe_now[node], true);
                pthread_mutex_lock(&v->probe_lock);
                pthread_cond_signal(&v->probe_cond);
                pthread_mutex_unlock(&v->probe_lock);
            }
        }
        if (down && c->up && !c->broken && c->inflight == 0) {
            conn_drop(c); /* a QP to a node gone: its next connect comes after a probe */
        }
        if (!down && (!c->up || c->broken) && c->inflight == 0) {
            uint64_t now = nessie_mono_ns();
            if (now >= c->retry_ns) {
                conn_drop(c);
                if (conn_open(ep, node) == 0) {
                    c->backoff_ms = 0;
                } else {
                    mark_down(ep->fab, node);
                    if (c->backoff_ms == 0)
                        c->backoff_ms = VERBS_RETRY_FIRST_MS;
                    c->retry_ns = nessie_mono_ns() + (uint64_t)c->backoff_ms * 1000000ULL;
                    c->backoff_ms = c->backoff_ms * 2 > VERBS_RETRY_MAX_MS ? VERBS_RETRY_MAX_MS
                                                                           : c->backoff_ms * 2;
                }
            }
        }
        struct ibv_send_wr *head = NULL, **tail = &head;
        for (size_t j = i; j < n; j++) {
            if (done[j] || wrs[j].node != node)
                continue;
            done[j] = true;
            const struct fab_wr *w = &wrs[j];
            if (!c->up || c->broken || down) {
                synth_fail(e, w); /* fails at once: no wait for a node known down */
                continue;
            }
            uint32_t s = e->free_slots[--e->nfree];
            struct verbs_req *rq = &e->req[s];
            *rq = (struct verbs_req){.wr_id = w->wr_id, .opcode = w->opcode, .local = w->local,
                                     .length = w->length, .node = node, .used = true,
                                     .posted_ns = nessie_mono_ns()};
            void *buf = e->bounce + (size_t)s * VERBS_BOUNCE_SLOT;
            uint32_t lkey = e->bounce_mr->lkey;
            if (w->length > VERBS_BOUNCE_SLOT) {
                /* A WRITE's source is only read by the NIC: no access flag, so read-only
                 * memory registers too. A READ lands in it: local write. */
                rq->tmp_mr = ibv_reg_mr(v->pd, w->local, w->length,
                                        w->opcode == FAB_OP_WRITE ? 0 : IBV_ACCESS_LOCAL_WRITE);
                if (!rq->tmp_mr) {
                    log_warn("fabric verbs: ibv_reg_mr of a %u-byte buffer: %s", w->length,
                             strerror(errno));
                    slot_put(e, s);
                    e->synth[e->nsynth++] = (struct fab_wc){.wr_id = w->wr_id, .opcode = w->opcode,
                                                            .status = FAB_ERR_NOMEM};
                    continue;
                }
                buf = w->local;
                lkey = rq->tmp_mr->lkey;
            } else if (w->opcode == FAB_OP_WRITE) {
                memcpy(buf, w->local, w->length);
            }
            sg[j] = (struct ibv_sge){.addr = (uintptr_t)buf, .length = w->length, .lkey = lkey};
            memset(&sw[j], 0, sizeof(sw[j]));
            sw[j].wr_id = s;
            sw[j].sg_list = &sg[j];
            sw[j].num_sge = 1;
            sw[j].send_flags = IBV_SEND_SIGNALED;
            uint64_t raddr = c->peer.addr[w->region] + w->offset;
            uint32_t rkey = c->peer.rkey[w->region];
            switch (w->opcode) {
            case FAB_OP_READ:
                sw[j].opcode = IBV_WR_RDMA_READ;
                sw[j].wr.rdma.remote_addr = raddr;
                sw[j].wr.rdma.rkey = rkey;
                break;
            case FAB_OP_WRITE:
                sw[j].opcode = IBV_WR_RDMA_WRITE;
                sw[j].wr.rdma.remote_addr = raddr;
                sw[j].wr.rdma.rkey = rkey;
                break;
            case FAB_OP_CAS:
                sw[j].opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
                sw[j].wr.atomic.remote_addr = raddr;
                sw[j].wr.atomic.rkey = rkey;
                sw[j].wr.atomic.compare_add = w->compare;
                sw[j].wr.atomic.swap = w->swap;
                break;
            }
            *tail = &sw[j];
            tail = &sw[j].next;
            c->inflight++;
        }
        *tail = NULL;
        if (!head)
            continue;
        struct ibv_send_wr *bad = NULL;
        int rc = ibv_post_send(c->id->qp, head, &bad);
        if (rc != 0) {
            /* Nothing from bad on was posted: those complete here, with an error. */
            log_warn("fabric verbs: ibv_post_send to node %u: %s", node, strerror(rc));
            c->broken = true;
            for (struct ibv_send_wr *x = bad; x; x = x->next) {
                uint32_t s = (uint32_t)x->wr_id;
                e->synth[e->nsynth++] = (struct fab_wc){.wr_id = e->req[s].wr_id,
                                                        .opcode = e->req[s].opcode,
                                                        .status = FAB_ERR_UNREACH};
                c->inflight--;
                slot_put(e, s);
            }
        }
    }
}

static enum fab_status status_of(enum ibv_wc_status st)
{
    switch (st) {
    case IBV_WC_SUCCESS: return FAB_OK;
    case IBV_WC_REM_ACCESS_ERR: return FAB_ERR_RANGE;
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_REM_INV_REQ_ERR: return FAB_ERR_INVAL;
    default: return FAB_ERR_UNREACH; /* retries exhausted, flushed, QP in error */
    }
}

/*
 * Requests that will not complete by themselves: to a node marked down (by any endpoint), or
 * outstanding longer than VERBS_REQUEST_TIMEOUT_MS (then the node is marked down). Their QP is
 * moved to the error state, so the NIC completes all it holds with a flush error now; whether
 * such a request ran is unknown to the caller, as for any failed completion (fabric.h).
 */
static void flush_stuck(struct fab_ep *ep, uint64_t now)
{
    struct verbs_ep *e = ep->priv;
    struct verbs_fab *v = ep->fab->priv;
    for (uint32_t s = 0; s < ep->depth; s++) {
        struct verbs_req *rq = &e->req[s];
        if (!rq->used)
            continue;
        struct verbs_conn *c = &e->conn[rq->node];
        bool down = atomic_load_explicit(&v->down_since[rq->node], memory_order_relaxed) != 0;
        bool late = now - rq->posted_ns > (uint64_t)VERBS_REQUEST_TIMEOUT_MS * 1000000ULL;
        if (c->flushed || !c->id || !c->id->qp || !(down || late))
            continue;
        if (late && !down) {
            log_warn("fabric verbs: a request to node %u is outstanding after %d ms",
                     rq->node, VERBS_REQUEST_TIMEOUT_MS);
            mark_down(ep->fab, rq->node);
        }
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
        if (ibv_modify_qp(c->id->qp, &a, IBV_QP_STATE) != 0)
            log_warn("fabric verbs: cannot move the QP to node %u to the error state: %s",
                     rq->node, strerror(errno));
        c->flushed = true;
        c->broken = true;
    }
}

static int verbs_poll(struct fab_ep *ep, struct fab_wc *wcs, int max)
{
    struct verbs_ep *e = ep->priv;
    int got = 0;
    /* Completions carry no order (fabric.h): hand the made ones out from the end. */
    while (got < max && e->nsynth > 0)
        wcs[got++] = e->synth[--e->nsynth];
    if (got == max)
        return got;
    struct ibv_wc wc[32];
    int want = max - got < 32 ? max - got : 32;
    int k = ibv_poll_cq(e->cq, want, wc);
    if (k < 0) {
        log_error("fabric verbs: ibv_poll_cq failed");
        return got;
    }
    if (k == 0 && got == 0) {
        /* Nothing came: now and then (an idle poll is a spin), look for requests that never
         * will. */
        uint64_t now = nessie_mono_ns();
        if (now >= e->next_check_ns) {
            e->next_check_ns = now + 1000000ULL;
            flush_stuck(ep, now);
        }
    }
    for (int i = 0; i < k; i++) {
        uint32_t s = (uint32_t)wc[i].wr_id;
        struct verbs_req *rq = &e->req[s];
        enum fab_status st = status_of(wc[i].status);
        if (st == FAB_OK && !rq->tmp_mr && rq->opcode != FAB_OP_WRITE)
            memcpy(rq->local, e->bounce + (size_t)s * VERBS_BOUNCE_SLOT, rq->length);
        if (st != FAB_OK) {
            if (wc[i].status != IBV_WC_WR_FLUSH_ERR) {
                log_warn("fabric verbs: request to node %u: %s", rq->node,
                         ibv_wc_status_str(wc[i].status));
                if (st == FAB_ERR_UNREACH)
                    mark_down(ep->fab, rq->node);
            }
            e->conn[rq->node].broken = true;
        }
        e->conn[rq->node].inflight--;
        wcs[got++] = (struct fab_wc){.wr_id = rq->wr_id, .opcode = rq->opcode, .status = st};
        slot_put(e, s);
    }
    return got;
}

const struct fab_backend_ops fab_verbs_ops = {
    .name = "verbs",
    .request_bound_ms = VERBS_REQUEST_BOUND_MS,
    .open = verbs_open,
    .close = verbs_close,
    .unlink = verbs_unlink,
    .ep_init = verbs_ep_init,
    .ep_fini = verbs_ep_fini,
    .post = verbs_post,
    .poll = verbs_poll,
};
