/*
 * fabric.h - the only way kvstore touches memory of another node.
 *
 * Room: fabric, above membership only (tests/integration/rooms.sh keeps the order membership ->
 * fabric -> memory -> protocol -> modes -> front). It owns the regions a node exposes and the
 * endpoints that reach them, on two backends: shared memory on one host (fabric_shm.c) and rdma-core verbs
 * (fabric_verbs.c), with fault injection for the tests (fabric.c). It may call nothing of the
 * engine; every other room reaches remote memory through it and through nothing else.
 *
 * The model is RDMA's, so that the engine runs unchanged on the shared-memory backend (one host)
 * and on rdma-core verbs (many hosts):
 *
 *   - Every node owns named regions (FAB_REGION_INDEX, FAB_REGION_DATA, FAB_REGION_MSG). A node creates its own
 *     regions, or re-attaches them if they outlived a previous process; peers only ever reach them
 *     through work requests. Region sizes are a cluster-wide setting: every node's INDEX region has
 *     the same size, and so does every node's DATA region.
 *   - A thread that wants to touch remote memory owns an endpoint (struct fab_ep; verbs: one RC QP
 *     per peer plus a CQ). It posts work requests (READ, WRITE, 64-bit CAS) in batches, several
 *     in flight at once, and later polls their completions. An endpoint is used by one thread at a
 *     time; the domain (struct fab) is shared by all threads of a process.
 *   - CAS follows IBV_WR_ATOMIC_CMP_AND_SWP: the target word is 8-byte aligned, and the value it held
 *     before the operation is written to the 8-byte local buffer of the request, whether or not the
 *     swap happened. The caller compares it with its `compare` to learn the outcome.
 *
 * Errors: requests that can be judged at post time (unknown node or region, out-of-bounds offset,
 * misaligned CAS, zero length, full queue) make fab_post() fail for the whole batch, and nothing
 * of that batch is executed. Failures of the transport (peer unreachable, its regions missing,
 * verbs: QP in error) are reported in the completion's status; such a request changed nothing
 * that the caller can rely on.
 *
 * Ordering: a completion with FAB_OK means the request has taken effect. A CAS is atomic against
 * every other CAS of every node on the same word. Requests posted in one batch may take effect in
 * any order (as on a NIC): a caller that needs one before another waits for its completion first.
 * A successful CAS publishes every WRITE whose completion the caller had polled before posting it
 * (release); a READ returns data at least as new as the writes it observed through a CAS or READ
 * it completed earlier (acquire). The engine relies on exactly this pair: write a DTE, wait, CAS
 * the ITE; read the ITE, then read the DTE.
 */
#ifndef NESSIE_KVSTORE_FABRIC_H
#define NESSIE_KVSTORE_FABRIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The regions every node owns. */
enum fab_region {
    FAB_REGION_INDEX = 0, /* index table entries: 64-bit words, changed only by CAS */
    FAB_REGION_DATA = 1,  /* data table entries: written by the owner, read by everyone */
    FAB_REGION_MSG = 2,   /* server-driven requests and replies (kvstore/modes/sd.c): written by peers */
    FAB_REGION_COUNT
};

enum fab_backend {
    FAB_BACKEND_SHM = 0, /* POSIX shared memory, all nodes on one host */
    FAB_BACKEND_VERBS,   /* rdma-core verbs over RC queue pairs, connected with librdmacm */
};

/* Status of a call or of a completion. 0 is success; every other value is an error. */
enum fab_status {
    FAB_OK = 0,
    FAB_ERR_INVAL,    /* malformed argument: NULL buffer, zero length, bad opcode, bad config */
    FAB_ERR_NODE,     /* node id outside the cluster */
    FAB_ERR_REGION,   /* region id unknown */
    FAB_ERR_RANGE,    /* offset + length beyond the end of the region */
    FAB_ERR_ALIGN,    /* CAS target not 8-byte aligned */
    FAB_ERR_AGAIN,    /* endpoint queue full: poll completions, then post again */
    FAB_ERR_NOMEM,    /* out of memory in this process */
    FAB_ERR_EXISTS,   /* an existing region does not match this configuration */
    FAB_ERR_UNREACH,  /* peer or its region not reachable (not started, gone) */
    FAB_ERR_SYS,      /* a system call failed; errno-level detail was logged */
    FAB_ERR_NOTSUP,   /* backend not available in this build */
};

enum fab_opcode {
    FAB_OP_READ = 1,  /* remote -> local buffer */
    FAB_OP_WRITE = 2, /* local buffer -> remote */
    FAB_OP_CAS = 3,   /* 64-bit compare-and-swap; old value -> local buffer (8 bytes) */
};

/* One work request. Buffers stay owned by the caller and must stay valid until completion. */
struct fab_wr {
    uint64_t wr_id;          /* returned unchanged in the completion */
    enum fab_opcode opcode;
    uint32_t node;           /* target node */
    enum fab_region region;  /* target region */
    uint64_t offset;         /* byte offset inside the target region */
    void *local;             /* READ: destination; WRITE: source; CAS: receives the old value */
    uint32_t length;         /* bytes; CAS: must be 8 */
    uint64_t compare;        /* CAS only */
    uint64_t swap;           /* CAS only */
};

struct fab_wc {
    uint64_t wr_id;
    enum fab_opcode opcode;
    enum fab_status status;
};

/* Counters of one endpoint; the engine's per-operation counters are built on these. */
struct fab_ep_stats {
    uint64_t reads, writes, cas; /* posted; the engine counts which CASes failed */
    uint64_t bytes_read, bytes_written;
    uint64_t errors;
};

struct fab_config {
    enum fab_backend backend;
    const char *cluster;     /* cluster name: [A-Za-z0-9_-], 1..FAB_CLUSTER_NAME_MAX chars */
    uint32_t nodes;          /* node ids the cluster may have, 1..FAB_MAX_NODES: its
                              * capacity, not its members (engine.c) */
    uint32_t self;           /* this process's node */
    uint64_t region_size[FAB_REGION_COUNT]; /* bytes, same on every node; multiple of 8 */
    /* verbs only: each node's listener, "HOST:PORT" (nodes entries; copied by fab_open), and the
     * RDMA device this node's address must be on (NULL: whichever it is on). */
    const char *const *addrs;
    const char *device;
};

#define FAB_CLUSTER_NAME_MAX 64
/* The ITE layout addresses 1024 nodes (DESIGN.md); the fabric allows a little headroom. */
#define FAB_MAX_NODES 4096
/* Default outstanding work requests of an endpoint; verbs sizes its send queues from this. */
#define FAB_EP_DEPTH_DEFAULT 64

struct fab;
struct fab_ep;

/*
 * Open the fabric for node cfg->self: create its regions (zero-filled, mode 0600) or re-attach
 * them if they exist. Peers' regions are attached on first use. On success returns FAB_OK, sets
 * *out, and sets *created (if not NULL) to true when the regions were made new, false when they
 * were re-attached. On error returns a status, logs why, and leaves nothing behind that this call
 * made (regions it created are removed again).
 */
int fab_open(const struct fab_config *cfg, struct fab **out, bool *created);

/* Detach every region; never removes them (they outlive the process by design). NULL is a no-op. */
void fab_close(struct fab *fab);

/*
 * Remove node `node`'s regions of cluster `cluster` from the system. Processes that still map them
 * keep their mappings. Returns FAB_OK also when there was nothing to remove.
 */
int fab_unlink(enum fab_backend backend, const char *cluster, uint32_t node);

/* Base address and size of this node's own region, for direct DRAM access by the owner. */
void *fab_local_base(const struct fab *fab, enum fab_region region);
uint64_t fab_region_size(const struct fab *fab, enum fab_region region);
uint32_t fab_self(const struct fab *fab);
uint32_t fab_nodes(const struct fab *fab);
/* The longest, in ns, that a posted request may still take effect at its target after it was
 * posted (0 on shm, where it runs inside fab_post; the NIC's retry limit on verbs). */
uint64_t fab_request_bound_ns(const struct fab *fab);

/*
 * Read or write this node's own region directly (the owner's DRAM access, A.1.2 step 2.3), with
 * the same atomicity and ordering as READ and WRITE requests, since peers access it concurrently.
 * Returns FAB_OK, or FAB_ERR_RANGE / FAB_ERR_REGION and copies nothing.
 */
int fab_local_read(const struct fab *fab, enum fab_region region, uint64_t offset, void *dst,
                   uint32_t len);
int fab_local_write(struct fab *fab, enum fab_region region, uint64_t offset, const void *src,
                    uint32_t len);

/*
 * Doorbells: a sleeper on a word of its own node's region is woken by a peer that posted it
 * work, instead of finding the work when its nap ends. The word (8-byte aligned) is a struct
 * fab_bell; only the shm backend has them (a futex on the shared page). Over verbs a bell would
 * need a WRITE with immediate and a completion channel: fab_bell_wait sleeps its whole timeout
 * there, and fab_bell_ring does nothing, so a sleeper's work waits for its nap's end, as without
 * bells.
 */
struct fab_bell {
    uint32_t seq;      /* rung: incremented by a peer that found sleepers */
    uint32_t sleepers; /* threads in fab_bell_wait on it */
};
/* Whether this fabric's bells wake sleepers (shm), or fab_bell_wait only sleeps (verbs). */
bool fab_has_bells(const struct fab *fab);
/*
 * Sleep up to timeout_ns on the bell at offset of this node's own region, unless idle(arg)
 * says work came meanwhile (it is asked after this thread counted itself a sleeper: work posted
 * before its answer is seen by it, work posted after rings). Returns early when rung, on a
 * signal, or at once if idle(arg) is false. Never fails: a bad offset just sleeps.
 */
void fab_bell_wait(struct fab *fab, enum fab_region region, uint64_t offset, uint64_t timeout_ns,
                   bool (*idle)(void *), void *arg);
/*
 * Wake node's sleepers on its bell at offset, if it has any: call after the work for them was
 * posted and has landed (a completed WRITE). One load of the peer's word when nobody sleeps, a
 * futex wake when someone does. Does nothing over verbs, to a fenced node (fab_set_fence), or to
 * one not reachable.
 */
void fab_bell_ring(struct fab *fab, uint32_t node, enum fab_region region, uint64_t offset);

/* Create an endpoint able to keep `depth` requests outstanding (0: FAB_EP_DEPTH_DEFAULT). */
int fab_ep_create(struct fab *fab, uint32_t depth, struct fab_ep **out);
void fab_ep_destroy(struct fab_ep *ep);

/*
 * Post n requests as one batch (one doorbell on verbs). Either every request of the batch is
 * posted and FAB_OK returned, or none is and the status of the first offending request is
 * returned (FAB_ERR_AGAIN when the batch does not fit the free queue space).
 */
int fab_post(struct fab_ep *ep, const struct fab_wr *wrs, size_t n);

/* Poll up to max completions into wcs. Returns how many were written (0 if none ready). */
int fab_poll(struct fab_ep *ep, struct fab_wc *wcs, int max);

/* Requests posted on ep and not polled yet (background requests not counted). */
uint32_t fab_ep_outstanding(const struct fab_ep *ep);

/*
 * Post a WRITE of up to 8 bytes that nobody waits for: a hint whose loss costs nothing (the
 * engine's access records for eviction). The bytes are copied, so wr->local need not outlive the
 * call; its completion is consumed by later polls of ep and never returned, whatever its status,
 * and it does not count as outstanding for fab_exec. At most FAB_BG_SLOTS are in flight per
 * endpoint: when they are all taken (and a poll frees none), or the queue is full, the request
 * is not posted and FAB_ERR_AGAIN is returned. Returns FAB_OK or an error; never blocks.
 * Callers' own wr_ids must not have FAB_WR_ID_BG's top byte.
 */
#define FAB_BG_SLOTS 8
#define FAB_WR_ID_BG (UINT64_C(0xB6) << 56)
int fab_post_background(struct fab_ep *ep, const struct fab_wr *wr);

/*
 * Convenience for synchronous callers: post one request and poll until it completes. Returns the
 * completion's status (or the post error). Only valid when nothing else is outstanding on ep.
 */
int fab_exec(struct fab_ep *ep, const struct fab_wr *wr);

const struct fab_ep_stats *fab_ep_stats(const struct fab_ep *ep);

const char *fab_strerror(int status);

/*
 * Fault injection, for tests and nessie-stress: the faults a real fabric has, on any backend.
 * fn is asked about every request at post time, in the posting thread, and answers:
 *   FAB_FAULT_NONE: the request runs;
 *   FAB_FAULT_DROP: it never runs and completes with FAB_ERR_UNREACH (a peer that is down);
 *   FAB_FAULT_LOSE: it runs, but completes with FAB_ERR_UNREACH (the response was lost: an RC
 *                   QP that exhausts its retries after the responder executed a CAS or WRITE).
 * fn may sleep (a delay, or a thread stalled between two steps of an operation) and may post
 * on other endpoints, but not on ep. Set it before endpoints are busy; NULL removes it. Costs one
 * predictable branch per post when unset.
 */
enum fab_fault { FAB_FAULT_NONE = 0, FAB_FAULT_DROP, FAB_FAULT_LOSE };
typedef enum fab_fault (*fab_fault_fn)(void *user, struct fab_ep *ep, const struct fab_wr *wr);
void fab_set_fault(struct fab *fab, fab_fault_fn fn, void *user);
/* Requests answered DROP or LOSE on ep so far. */
uint64_t fab_ep_injected(const struct fab_ep *ep);

/*
 * The fence (membership/membership.h, issue 28): once set, a request to a node the view fenced
 * (or suspended: a fence on its way) is refused at post with FAB_ERR_UNREACH and never touches the node's memory, whatever the backend
 * (on shm a lost peer's tables may still be mapped here: its leftover memory must not be read or
 * written). Set once, before endpoints are busy; fence must outlive fab. NULL: no fence.
 */
struct mship_state;
void fab_set_fence(struct fab *fab, const struct mship_state *fence);

#endif
