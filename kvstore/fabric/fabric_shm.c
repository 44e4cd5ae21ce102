/*
 * fabric_shm.c - the shared-memory fabric backend: every node of a cluster on one host.
 *
 * Each node's regions are POSIX shared memory objects named /nessie.<cluster>.n<node>.<region>,
 * mode 0600, created by the node that owns them and surviving it, so a restarted daemon
 * re-attaches its tables with nothing lost. Peers map them on first use. It is one-sided for
 * real: a READ, WRITE or CAS is carried out by the CPU of the process that posts it, and the
 * owner's CPU never takes part.
 *
 * Memory ordering. Regions are touched concurrently by many processes, so every access to them
 * is atomic (C11 atomics on the mapped words), which keeps ThreadSanitizer meaningful and the
 * compiler honest:
 *   - CAS is atomic_compare_exchange_strong with memory_order_acq_rel on success: it releases
 *     the caller's earlier WRITEs (a new DTE) to whoever later reads the word it swapped (an
 *     ITE), and acquires what the previous swapper published. memory_order_acquire on failure,
 *     because the old value read is used to find a DTE to read next.
 *   - WRITE is a sequence of release stores, READ a sequence of acquire loads (8 bytes at a time
 *     where aligned). A READ that sees any word of a WRITE also sees everything the writer did
 *     before that word, the ordering a NIC gives between completed requests. On x86 both are
 *     plain moves, so this costs nothing over relaxed accesses; fences would do the same job but
 *     ThreadSanitizer cannot check them.
 * Requests execute at post time and their completions are queued in the endpoint; an RDMA NIC
 * would finish them later, and the engine must not (and does not) tell the difference.
 *
 * A lost host (issue 28). A peer's memory stays mapped here after its daemon dies, so a dead
 * node would go on answering; over verbs it would not. `nessie-cluster kill` emulates a lost host
 * by removing a node's tables after killing it, and every peer checks, at most every
 * SHM_LIVE_CHECK_MS, whether the peer's index object still has a name (fstat: st_nlink 0 once
 * removed); from then on every request to it fails with FAB_ERR_UNREACH, as to an unreachable
 * host, and its leftover memory is never read again. A node whose tables were removed stays
 * gone until a view readmits it (membership.h, "Rejoin": it comes back with new tables): then
 * its old mappings are retired and its regions attached anew by name (peer_relife).
 */
#include "fabric_int.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "membership/membership.h"

static const char *const region_names[FAB_REGION_COUNT] = {"index", "data", "msg"};

struct shm_fab {
    /* Serializes the first attach of a peer region, so two threads of one process never map it
     * twice. After that, lookups are one acquire load of peer[]. */
    pthread_mutex_t attach_lock;
    /* Base of every (node, region) mapping, 0 until attached; indexed node * FAB_REGION_COUNT +
     * region. Written once under attach_lock with release, read with acquire. */
    _Atomic(uintptr_t) *peer;
    /* Per node, the liveness check (above): its index object's descriptor, kept open once
     * mapped (-1 before), when it was last checked (CLOCK_MONOTONIC_COARSE ms), and whether it
     * is gone. Any thread may check; a CAS on the time lets one of them make the fstat. */
    _Atomic int *live_fd;
    _Atomic uint64_t *live_checked_ms;
    _Atomic bool *gone;
    /* Per node, the readmissions (mship_lives) its mappings are for: one that moved means new
     * tables (peer_relife). Written under attach_lock. */
    _Atomic uint32_t *life;
    /* Mappings of earlier lives, kept reserved (over anonymous memory) until close: see
     * peer_relife. Under attach_lock. */
    struct shm_retired {
        void *base;
        uint64_t size;
    } *retired;
    size_t nretired;
};

/* How often a peer's tables are checked for removal: a lost host is noticed within this, for the
 * price of a coarse clock read per request (a few ns) and an fstat per node per period. */
#define SHM_LIVE_CHECK_MS 2

struct shm_ep {
    struct fab_wc *ring; /* completions, in posting order */
    uint32_t head;       /* next completion to hand out */
    uint32_t count;      /* completions queued */
};

static void shm_name(char *buf, size_t len, const char *cluster, uint32_t node, int region)
{
    snprintf(buf, len, "/nessie.%s.n%u.%s", cluster, node, region_names[region]);
}

static void *map_fd(int fd, uint64_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

/*
 * Create (zero-filled) or re-attach this node's region. Returns FAB_OK and sets *made when it
 * created the object; on error removes an object it created and maps nothing.
 */
static int own_region_open(struct fab *fab, int region, bool *made)
{
    char name[128];
    uint64_t size = fab->cfg.region_size[region];
    shm_name(name, sizeof(name), fab->cluster, fab->cfg.self, region);

    bool remade = false;
again:
    *made = false;
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
        *made = true;
    } else if (errno == EEXIST) {
        fd = shm_open(name, O_RDWR, 0600);
    }
    if (fd < 0) {
        log_error("fabric shm: cannot open %s: %s", name, strerror(errno));
        return FAB_ERR_SYS;
    }

    struct stat st;
    if (fstat(fd, &st) != 0) {
        log_error("fabric shm: fstat %s: %s", name, strerror(errno));
        goto fail;
    }
    if (st.st_size == 0) {
        /* New, or its creator died between shm_open and ftruncate: either way it holds nothing. */
        if (ftruncate(fd, (off_t)size) != 0) {
            log_error("fabric shm: cannot size %s to %llu bytes: %s", name,
                      (unsigned long long)size, strerror(errno));
            goto fail;
        }
        *made = true;
    } else if ((uint64_t)st.st_size != size && region == FAB_REGION_MSG && !remade) {
        /* The MSG region holds only messages in flight, and its size follows sd_slots and
         * max_item_size: made again at the configured size rather than refused. */
        log_info("fabric shm: %s has %lld bytes, the configuration %llu: made again", name,
                 (long long)st.st_size, (unsigned long long)size);
        close(fd);
        shm_unlink(name);
        remade = true;
        goto again;
    } else if ((uint64_t)st.st_size != size) {
        log_error("fabric shm: %s exists with %lld bytes, configuration says %llu; remove it "
                  "(rm /dev/shm%s) or fix the configuration",
                  name, (long long)st.st_size, (unsigned long long)size, name);
        close(fd);
        return FAB_ERR_EXISTS;
    }

    void *base = map_fd(fd, size);
    if (!base) {
        log_error("fabric shm: mmap %s: %s", name, strerror(errno));
        goto fail;
    }
    close(fd);
    fab->local[region].base = base;
    fab->local[region].size = size;
    return FAB_OK;

fail:
    close(fd);
    if (*made)
        shm_unlink(name);
    *made = false;
    return FAB_ERR_SYS;
}

static int shm_open_fab(struct fab *fab, bool *created)
{
    struct shm_fab *s = calloc(1, sizeof(*s));
    if (!s)
        return FAB_ERR_NOMEM;
    s->peer = calloc((size_t)fab->cfg.nodes * FAB_REGION_COUNT, sizeof(*s->peer));
    s->live_fd = calloc(fab->cfg.nodes, sizeof(*s->live_fd));
    s->live_checked_ms = calloc(fab->cfg.nodes, sizeof(*s->live_checked_ms));
    s->gone = calloc(fab->cfg.nodes, sizeof(*s->gone));
    s->life = calloc(fab->cfg.nodes, sizeof(*s->life));
    if (!s->peer || !s->live_fd || !s->live_checked_ms || !s->gone || !s->life) {
        free(s->peer), free(s->live_fd), free(s->live_checked_ms), free(s->gone), free(s->life);
        free(s);
        return FAB_ERR_NOMEM;
    }
    for (uint32_t n = 0; n < fab->cfg.nodes; n++)
        atomic_init(&s->live_fd[n], -1);
    pthread_mutex_init(&s->attach_lock, NULL);

    bool made[FAB_REGION_COUNT] = {false};
    int region, rc = FAB_OK;
    for (region = 0; region < FAB_REGION_COUNT; region++) {
        rc = own_region_open(fab, region, &made[region]);
        if (rc != FAB_OK)
            break;
        atomic_store_explicit(&s->peer[fab->cfg.self * FAB_REGION_COUNT + region],
                              (uintptr_t)fab->local[region].base, memory_order_relaxed);
    }
    if (rc != FAB_OK) {
        /* Cleanup ladder: unmap and, if this call made them, remove the regions opened so far. */
        while (--region >= 0) {
            munmap(fab->local[region].base, fab->local[region].size);
            fab->local[region].base = NULL;
            if (made[region]) {
                char name[128];
                shm_name(name, sizeof(name), fab->cluster, fab->cfg.self, region);
                shm_unlink(name);
            }
        }
        pthread_mutex_destroy(&s->attach_lock);
        free(s->peer), free(s->live_fd), free(s->live_checked_ms), free(s->gone), free(s->life);
        free(s);
        return rc;
    }
    /* New tables: the index or the data region is new. A new MSG region alone (a node that ran a
     * version without one) keeps the tables it re-attached. */
    *created = made[FAB_REGION_INDEX] || made[FAB_REGION_DATA];
    fab->priv = s;
    return FAB_OK;
}

static void shm_close_fab(struct fab *fab)
{
    struct shm_fab *s = fab->priv;
    for (uint32_t node = 0; node < fab->cfg.nodes; node++) {
        for (int region = 0; region < FAB_REGION_COUNT; region++) {
            uintptr_t base = atomic_load_explicit(&s->peer[node * FAB_REGION_COUNT + region],
                                                  memory_order_acquire);
            if (base)
                munmap((void *)base, fab->cfg.region_size[region]);
        }
    }
    for (uint32_t node = 0; node < fab->cfg.nodes; node++) {
        int fd = atomic_load_explicit(&s->live_fd[node], memory_order_relaxed);
        if (fd >= 0)
            close(fd);
    }
    for (size_t i = 0; i < s->nretired; i++)
        munmap(s->retired[i].base, s->retired[i].size);
    free(s->retired);
    pthread_mutex_destroy(&s->attach_lock);
    free(s->peer), free(s->live_fd), free(s->live_checked_ms), free(s->gone), free(s->life);
    free(s);
}

static int shm_unlink_node(const char *cluster, uint32_t node)
{
    int rc = FAB_OK;
    for (int region = 0; region < FAB_REGION_COUNT; region++) {
        char name[128];
        shm_name(name, sizeof(name), cluster, node, region);
        if (shm_unlink(name) != 0 && errno != ENOENT) {
            log_error("fabric shm: cannot remove %s: %s", name, strerror(errno));
            rc = FAB_ERR_SYS;
        }
    }
    return rc;
}

/* Map a peer's region on first use. Returns its base, or NULL if the peer has not created it
 * (not started yet) or it does not match the cluster's geometry. */
static unsigned char *peer_base(struct fab *fab, uint32_t node, int region)
{
    struct shm_fab *s = fab->priv;
    _Atomic(uintptr_t) *slot = &s->peer[node * FAB_REGION_COUNT + region];
    uintptr_t base = atomic_load_explicit(slot, memory_order_acquire);
    if (base)
        return (unsigned char *)base;

    pthread_mutex_lock(&s->attach_lock);
    base = atomic_load_explicit(slot, memory_order_relaxed);
    if (!base) {
        char name[128];
        uint64_t size = fab->cfg.region_size[region];
        shm_name(name, sizeof(name), fab->cluster, node, region);
        int fd = shm_open(name, O_RDWR, 0600);
        if (fd < 0) {
            log_debug("fabric shm: peer region %s not reachable: %s", name, strerror(errno));
        } else {
            struct stat st;
            if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == size) {
                void *p = map_fd(fd, size);
                if (p) {
                    base = (uintptr_t)p;
                    atomic_store_explicit(slot, base, memory_order_release);
                } else {
                    log_warn("fabric shm: mmap %s: %s", name, strerror(errno));
                }
            } else if (st.st_size != 0) {
                /* Size 0 means the owner is still creating it: not an error, just not ready. */
                log_warn("fabric shm: peer region %s has %lld bytes, expected %llu", name,
                         (long long)st.st_size, (unsigned long long)size);
            }
            /* The index object's descriptor is kept: its name is the node's liveness. */
            if (base && region == FAB_REGION_INDEX)
                atomic_store_explicit(&s->live_fd[node], fd, memory_order_release);
            else
                close(fd);
        }
    }
    pthread_mutex_unlock(&s->attach_lock);
    return (unsigned char *)base;
}

static uint64_t coarse_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Whether node's tables were removed (a lost host, see the top of this file). Never blocks. */
static bool peer_gone(struct fab *fab, uint32_t node)
{
    struct shm_fab *s = fab->priv;
    if (atomic_load_explicit(&s->gone[node], memory_order_relaxed))
        return true;
    int fd = atomic_load_explicit(&s->live_fd[node], memory_order_acquire);
    if (fd < 0)
        return false; /* not mapped yet: peer_base looks the tables up by name anyway */
    uint64_t now = coarse_ms();
    uint64_t last = atomic_load_explicit(&s->live_checked_ms[node], memory_order_relaxed);
    if (now - last < SHM_LIVE_CHECK_MS ||
        !atomic_compare_exchange_strong_explicit(&s->live_checked_ms[node], &last, now,
                                                 memory_order_relaxed, memory_order_relaxed))
        return false;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_nlink == 0) {
        if (!atomic_exchange_explicit(&s->gone[node], true, memory_order_relaxed))
            log_warn("fabric shm: node %u's tables were removed: it is gone, as a lost host", node);
        return true;
    }
    return false;
}

/*
 * Copies into and out of memory other processes access concurrently.
 *
 * The words that change in place after a write is published (an index entry, a DTE's state and
 * recycle words) are 8-byte aligned and lie in the first FAB_WORD_COPY_BYTES of any request the
 * engine makes that touches them (layout.h: they are ITEs, or in a DTE's 64-byte header). Those
 * bytes are copied with 8-byte atomic accesses, so a READ never tears such a word, as a NIC's
 * never does. The bytes after them (a DTE's key and value) are written once, before the entry is
 * published, and only read after: they are copied with memcpy, at memory bandwidth, behind an
 * acquire (READ) or release (WRITE) fence that gives the ordering fabric.h promises. A value read
 * by a reader that outlived the entry's expiration period may be torn; the engine's Step 0
 * timers discard such reads, as they must on RDMA. ThreadSanitizer cannot know that, so its
 * builds copy everything word by word.
 */
#if defined(__SANITIZE_THREAD__)
#define FAB_WORD_COPY_BYTES SIZE_MAX
#else
#define FAB_WORD_COPY_BYTES 64
#endif

/* READ: acquire loads of the shared bytes, 8 at a time where aligned. */
void fab_copy_from_shared(void *dst, const unsigned char *src, size_t len)
{
    unsigned char *d = dst;
    size_t words = len < FAB_WORD_COPY_BYTES ? len : FAB_WORD_COPY_BYTES;
    size_t i = 0;
    while (i < words && ((uintptr_t)(src + i) & 7) != 0) {
        d[i] = atomic_load_explicit((const _Atomic unsigned char *)(src + i), memory_order_acquire);
        i++;
    }
    for (; i + 8 <= words; i += 8) {
        uint64_t w = atomic_load_explicit((const _Atomic uint64_t *)(src + i), memory_order_acquire);
        memcpy(d + i, &w, 8);
    }
    for (; i < words; i++)
        d[i] = atomic_load_explicit((const _Atomic unsigned char *)(src + i), memory_order_acquire);
    if (i < len) {
        /* Nothing below may be read before what was read above. */
        atomic_thread_fence(memory_order_acquire);
        memcpy(d + i, src + i, len - i);
    }
}

/* WRITE: release stores into the shared bytes: the bulk with memcpy first, then the leading
 * words, so whoever sees those sees the bulk too. */
void fab_copy_to_shared(unsigned char *dst, const void *src, size_t len)
{
    const unsigned char *s = src;
    size_t words = len < FAB_WORD_COPY_BYTES ? len : FAB_WORD_COPY_BYTES;
    if (words < len) {
        memcpy(dst + words, s + words, len - words);
        atomic_thread_fence(memory_order_release);
    }
    size_t i = 0;
    while (i < words && ((uintptr_t)(dst + i) & 7) != 0) {
        atomic_store_explicit((_Atomic unsigned char *)(dst + i), s[i], memory_order_release);
        i++;
    }
    for (; i + 8 <= words; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        atomic_store_explicit((_Atomic uint64_t *)(dst + i), w, memory_order_release);
    }
    for (; i < words; i++)
        atomic_store_explicit((_Atomic unsigned char *)(dst + i), s[i], memory_order_release);
}

/*
 * A view readmitted node with new tables (membership.h, "Rejoin"): forget its old mappings, so
 * the next request attaches its regions anew by name. No request has touched the old ones since
 * its fence (the fabric refuses a fenced node at post, and shm requests run at post), but a
 * thread stalled between that check and its copy could still hold an old base: each old mapping
 * is replaced by anonymous memory at the same address (its pages, the removed tables' memory,
 * go back to the system; such a late copy reads zeroes or writes into nothing) and unmapped at
 * close. Never blocks on anything but other attaches.
 */
static void peer_relife(struct fab *fab, uint32_t node, uint32_t life)
{
    struct shm_fab *s = fab->priv;
    pthread_mutex_lock(&s->attach_lock);
    if (atomic_load_explicit(&s->life[node], memory_order_relaxed) != life) {
        for (int region = 0; region < FAB_REGION_COUNT; region++) {
            uintptr_t base = atomic_exchange_explicit(&s->peer[node * FAB_REGION_COUNT + region],
                                                      0, memory_order_acq_rel);
            uint64_t size = fab->cfg.region_size[region];
            if (!base)
                continue;
            void *p = mmap((void *)base, size, PROT_READ | PROT_WRITE,
                           MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            struct shm_retired *r = p != MAP_FAILED
                                        ? realloc(s->retired, (s->nretired + 1) * sizeof(*r))
                                        : NULL;
            if (r) {
                s->retired = r;
                s->retired[s->nretired++] = (struct shm_retired){(void *)base, size};
            } else {
                munmap((void *)base, size); /* no room to keep it: unmapped now */
            }
        }
        int fd = atomic_exchange_explicit(&s->live_fd[node], -1, memory_order_acq_rel);
        if (fd >= 0)
            close(fd);
        atomic_store_explicit(&s->live_checked_ms[node], 0, memory_order_relaxed);
        atomic_store_explicit(&s->gone[node], false, memory_order_relaxed);
        atomic_store_explicit(&s->life[node], life, memory_order_release);
        log_info("fabric shm: node %u readmitted: its new tables are attached anew", node);
    }
    pthread_mutex_unlock(&s->attach_lock);
}

static enum fab_status execute(struct fab *fab, const struct fab_wr *wr)
{
    if (wr->node != fab->cfg.self && fab->fence) {
        struct shm_fab *s = fab->priv;
        uint32_t life = mship_lives(fab->fence, wr->node);
        if (life != atomic_load_explicit(&s->life[wr->node], memory_order_acquire))
            peer_relife(fab, wr->node, life);
    }
    if (wr->node != fab->cfg.self && peer_gone(fab, wr->node))
        return FAB_ERR_UNREACH;
    unsigned char *base = peer_base(fab, wr->node, wr->region);
    if (!base)
        return FAB_ERR_UNREACH;
    unsigned char *target = base + wr->offset;
    switch (wr->opcode) {
    case FAB_OP_READ:
        fab_copy_from_shared(wr->local, target, wr->length);
        break;
    case FAB_OP_WRITE:
        fab_copy_to_shared(target, wr->local, wr->length);
        break;
    case FAB_OP_CAS: {
        uint64_t expected = wr->compare;
        atomic_compare_exchange_strong_explicit((_Atomic uint64_t *)target, &expected, wr->swap,
                                                memory_order_acq_rel, memory_order_acquire);
        /* On success expected still holds compare, which is what the word held: verbs semantics. */
        memcpy(wr->local, &expected, sizeof(expected));
        break;
    }
    }
    return FAB_OK;
}

static int shm_ep_init(struct fab_ep *ep)
{
    struct shm_ep *e = calloc(1, sizeof(*e));
    if (!e)
        return FAB_ERR_NOMEM;
    e->ring = calloc(ep->depth, sizeof(*e->ring));
    if (!e->ring) {
        free(e);
        return FAB_ERR_NOMEM;
    }
    ep->priv = e;
    return FAB_OK;
}

static void shm_ep_fini(struct fab_ep *ep)
{
    struct shm_ep *e = ep->priv;
    free(e->ring);
    free(e);
}

static void shm_post(struct fab_ep *ep, const struct fab_wr *wrs, size_t n)
{
    struct shm_ep *e = ep->priv;
    for (size_t i = 0; i < n; i++) {
        struct fab_wc *wc = &e->ring[(e->head + e->count) % ep->depth];
        wc->wr_id = wrs[i].wr_id;
        wc->opcode = wrs[i].opcode;
        wc->status = execute(ep->fab, &wrs[i]);
        e->count++;
    }
}

static int shm_poll(struct fab_ep *ep, struct fab_wc *wcs, int max)
{
    struct shm_ep *e = ep->priv;
    int got = 0;
    while (got < max && e->count > 0) {
        wcs[got++] = e->ring[e->head];
        e->head = (e->head + 1) % ep->depth;
        e->count--;
    }
    return got;
}

/*
 * Doorbells (fabric.h): a futex on the bell's seq word. The page is MAP_SHARED between the
 * processes, so the futex is a shared one (no FUTEX_PRIVATE_FLAG).
 *
 * Memory orderings (the store-buffer pattern, as the channel's worker_parked, wire_sync.h):
 * - The sleeper reads seq, then counts itself in sleepers (seq_cst RMW) and asks idle() behind
 *   a seq_cst fence; the ringer's work landed before (its WRITE's release stores), then a seq_cst
 *   fence, then it loads sleepers. Either the sleeper's idle() sees the work, or the ringer sees
 *   the sleeper, bumps seq and wakes it; a ring between the sleeper's read of seq and its
 *   futex_wait makes the wait return at once (the word changed).
 */
static void shm_bell_wait(struct fab *fab, struct fab_bell *own, uint64_t timeout_ns,
                          bool (*idle)(void *), void *arg)
{
    (void)fab;
    _Atomic uint32_t *seq = (_Atomic uint32_t *)&own->seq;
    _Atomic uint32_t *sleepers = (_Atomic uint32_t *)&own->sleepers;
    uint32_t seen = atomic_load_explicit(seq, memory_order_acquire);
    atomic_fetch_add_explicit(sleepers, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    if (idle(arg)) {
        struct timespec ts = {(time_t)(timeout_ns / 1000000000u),
                              (long)(timeout_ns % 1000000000u)};
        syscall(SYS_futex, seq, FUTEX_WAIT, seen, &ts, NULL, 0);
    }
    atomic_fetch_sub_explicit(sleepers, 1, memory_order_relaxed);
}

static void shm_bell_ring(struct fab *fab, uint32_t node, enum fab_region region, uint64_t offset)
{
    if (peer_gone(fab, node))
        return;
    unsigned char *base = peer_base(fab, node, region);
    if (!base)
        return;
    struct fab_bell *b = (struct fab_bell *)(base + offset);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit((_Atomic uint32_t *)&b->sleepers, memory_order_relaxed) == 0)
        return;
    atomic_fetch_add_explicit((_Atomic uint32_t *)&b->seq, 1, memory_order_release);
    syscall(SYS_futex, &b->seq, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

const struct fab_backend_ops fab_shm_ops = {
    .name = "shm",
    .request_bound_ms = 0, /* a request runs inside fab_post(): it lands before post returns */
    .open = shm_open_fab,
    .close = shm_close_fab,
    .unlink = shm_unlink_node,
    .ep_init = shm_ep_init,
    .ep_fini = shm_ep_fini,
    .post = shm_post,
    .poll = shm_poll,
    .bell_wait = shm_bell_wait,
    .bell_ring = shm_bell_ring,
};
