/*
 * fabric_int.h - what a fabric backend implements. Private to kvstore/fabric*.c.
 *
 * fabric.c owns everything a backend need not repeat: configuration checks, request validation
 * (so both backends reject exactly the same requests, and reject them before touching anything),
 * queue-depth accounting, statistics and fab_exec(). A backend moves bytes.
 */
#ifndef NESSIE_KVSTORE_FABRIC_INT_H
#define NESSIE_KVSTORE_FABRIC_INT_H

#include "fabric.h"

struct fab_backend_ops {
    const char *name;
    /* The longest after its post that a request may still take effect at its target, in ms:
     * the engine's call bound includes it (front/engine.c, bound_compute), since a CAS posted before
     * a call's last check can land that much later. */
    uint64_t request_bound_ms;
    /* Create or re-attach cfg.self's regions into fab->local[]. Undo everything on failure. */
    int (*open)(struct fab *fab, bool *created);
    void (*close)(struct fab *fab);
    int (*unlink)(const char *cluster, uint32_t node);
    /* Backend part of an endpoint (ep->priv). */
    int (*ep_init)(struct fab_ep *ep);
    void (*ep_fini)(struct fab_ep *ep);
    /* Requests are valid and fit the queue; post them all. Never fails for a single request:
     * transport failures become completions with an error status. */
    void (*post)(struct fab_ep *ep, const struct fab_wr *wrs, size_t n);
    int (*poll)(struct fab_ep *ep, struct fab_wc *wcs, int max);
    /* Doorbells (fabric.h), NULL where the backend has none; the offsets are checked. */
    void (*bell_wait)(struct fab *fab, struct fab_bell *own, uint64_t timeout_ns,
                      bool (*idle)(void *), void *arg);
    void (*bell_ring)(struct fab *fab, uint32_t node, enum fab_region region, uint64_t offset);
};

struct fab_local_region {
    void *base;
    uint64_t size;
};

struct fab {
    const struct fab_backend_ops *ops;
    struct fab_config cfg; /* cfg.cluster points at cluster[] */
    char cluster[FAB_CLUSTER_NAME_MAX + 1];
    struct fab_local_region local[FAB_REGION_COUNT];
    void *priv; /* backend state */
    fab_fault_fn fault;     /* fab_set_fault() */
    void *fault_user;
    const struct mship_state *fence; /* fab_set_fence() */
};

struct fab_ep {
    struct fab *fab;
    uint32_t depth;
    uint32_t outstanding; /* posted, not yet polled */
    struct fab_ep_stats stats;
    void *priv;
    /* Fault injection (fab_set_fault): completions of dropped requests, returned by the next
     * polls, and requests that run but must complete in error (matched by wr_id and opcode). */
    struct fab_wc *dropped;
    uint32_t ndropped;
    struct fab_wc *lost;
    uint32_t nlost;
    uint64_t injected;
    /* Background requests (fab_post_background): their sources, one 8-byte slot each, a mask of
     * the slots in flight, and how many are. Their completions never reach the caller. */
    uint64_t bg_buf[FAB_BG_SLOTS];
    uint32_t bg_used;
    uint32_t background;
};

extern const struct fab_backend_ops fab_shm_ops;
extern const struct fab_backend_ops fab_verbs_ops;

/* Copies into and out of memory that other processes access concurrently (see fabric_shm.c). */
void fab_copy_from_shared(void *dst, const unsigned char *src, size_t len);
void fab_copy_to_shared(unsigned char *dst, const void *src, size_t len);

#endif
