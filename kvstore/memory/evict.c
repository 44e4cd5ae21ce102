/*
 * evict.c - a cache that stays a cache when it is full (issue 15): the access hints readers
 * record, the owner's evictor and its reclaim crawl.
 *
 * Only the owner allocates from its data region, so only the owner evicts from it, and it does
 * so through the protocol: a victim is removed by the DELETE path with a CAS that expects exactly
 * the victim's ITE word (write.c, W_EVICT), so an item written, moved or deleted after it was
 * chosen is left alone, and a reader meets the item whole or not at all. Victims are chosen as
 * Ditto (SOSP'23) and Redis choose them when no list can be kept (readers are on other hosts and
 * never tell the owner anything but a hint in the entry): sample a few entries of the class that
 * needs room, score them, keep the worst seen so far in a small pool (Redis's eviction pool),
 * remove the pool's worst. The score is Redis's LFU: a logarithmic read count
 * that decays with idle time, ties broken by the time of the last read; expired and flushed items
 * score lowest of all, and an item written within a share of its class's turnover time counts as
 * read once.
 *
 * Why ahead of need: a removed item's slot comes back one expiration period after it is unlinked
 * (readers may still read it until then), so a class must hold free, or already on their way
 * back, the slots it will allocate during one period. The evictor measures each class's
 * allocation rate and keeps that much (and a quarter, plus a floor, more while writers wait)
 * ready.
 */
#include <stdlib.h>
#include <string.h>

#include "demote.h"
#include "flash.h"
#include "memory.h"
#include "upcall.h"
#include "hash.h"
#include "log.h"

/* Tunables, with their reasons:
 * - EVICT_SAMPLES: Redis's default of 5, with its pool of 16 (EVICT_POOL), approximates LRU
 *   closely (its own measurements); more costs a header read each for a small gain (a pool of
 *   32: zipf hit ratio 0.768 against 0.765, within the noise); EVICT_DRAWS bounds the slots
 *   drawn to find them;
 * - EVICT_SLACK_FACTOR: a quarter more than the slots one period consumes (those are in
 *   quarantine anyway, coming back as fast as they go): the rate is a smoothed estimate, bursts
 *   exceed it, and the scan sees recycled slots a pass late; every slot more is an item fewer
 *   (bench/eviction.sh: at twice, a third of the memory held no item); EVICT_BOOST_MAX bounds
 *   the extra slack a class gets while its writers wait;
 * - EVICT_FLOOR_DIV: at least 1/64 of a class ready (and EVICT_FLOOR_MIN slots), so a class
 *   with no recent allocations still takes a burst;
 * - EVICT_CRAWL_PER_MS: slots the reclaim crawl examines per ms since its last run (at most
 *   EVICT_CRAWL_MAX in one run): a 16 MiB region's dead items come back within a fifth of a
 *   second, a GiB's within 15 s (memcached's LRU crawler is of that order). Paced by time, not
 *   per run: an evictor that runs back to back spent 4 % of a core crawling 256 slots a run
 *   (perf, bench/eviction.sh), each a cache miss. */
#define EVICT_SAMPLES 5
#define EVICT_DRAWS 8 /* slots drawn per item wanted in a sample, at most */
#define EVICT_SLACK_FACTOR 1.25
#define EVICT_BOOST_MAX 4.0
#define EVICT_FLOOR_DIV 64
#define EVICT_FLOOR_MIN 8
#define EVICT_CRAWL_PER_MS 64
#define EVICT_CRAWL_MAX 16384
/* A class has room for others' values (data_hdr.room_classes, modes/place.c) when its free slots
 * are this many times what the evictor keeps ready: the slack is the node's own writers', and a
 * class just at it would be pushed into evicting by the first placed values. */
#define EVICT_ROOM_FACTOR 2
/* An item written recently counts as read once: it has not had the time to be read, and
 * without this a sample of items read once would give up the item just written (the one a
 * cache's user reads next); ties then go to the older write. Recently is a share of the time
 * the class takes to turn over (its slots / its allocation rate), as memcached's new items
 * have the HOT and COLD segments to be read in before they go, never less than EVICT_YOUNG_MS
 * nor more than EVICT_YOUNG_MAX_MS (about the decay period, after which counts say little). A
 * fixed 100 ms was a quarter of a 16 MiB node's turnover and a twentieth of a 64 MiB one's, and
 * there a set of 16k keys lost 17 % of them before their first read, to items read once a
 * minute ago (bench/eviction.sh, get-full phase). */
#define EVICT_YOUNG_MS 100
#define EVICT_YOUNG_MAX_MS 60000
#define EVICT_YOUNG_SHARE 0.25
/* Writers that wait for room wake the evictor at most this often: once is enough to end its
 * nap, and each wake-up is a syscall on the writer's critical path. */
#define EVICT_PRESSURE_EVERY_NS 50000ULL

/* Removing it (fn NULL) clears fn first, so no reader pairs the old fn with a NULL arg. A reader
 * may still call the old fn once after this returns: remove it only once what it wakes can take
 * that (nessie.h: install before writers start, remove after they stopped). */
void nessie_node_on_pressure(struct nessie_node *nd, nessie_pressure_fn fn, void *arg)
{
    if (!fn) {
        atomic_store_explicit(&nd->pressure_fn, NULL, memory_order_release);
        atomic_store_explicit(&nd->pressure_arg, NULL, memory_order_relaxed);
        return;
    }
    atomic_store_explicit(&nd->pressure_arg, arg, memory_order_relaxed);
    atomic_store_explicit(&nd->pressure_fn, fn, memory_order_release);
}

void nessie_pressure(struct nessie_node *nd)
{
    nessie_pressure_fn fn = atomic_load_explicit(&nd->pressure_fn, memory_order_acquire);
    if (fn && nessie_every(&nd->pressure_last_ns, EVICT_PRESSURE_EVERY_NS))
        fn(atomic_load_explicit(&nd->pressure_arg, memory_order_relaxed));
}

uint32_t nessie_acc_tick(void)
{
    return (uint32_t)(nessie_real_ns() >> DTE_ACC_TICK_SHIFT) & DTE_ACC_TIME_MASK;
}

bool nessie_item_fetched(const struct nessie_item *it)
{
    return (it->access & DTE_ACC_FETCHED) != 0;
}

uint32_t nessie_item_idle_s(const struct nessie_item *it)
{
    uint64_t ticks = (nessie_acc_tick() - dte_acc_time(it->access)) & DTE_ACC_TIME_MASK;
    return (uint32_t)((ticks << DTE_ACC_TICK_SHIFT) / 1000000000ULL);
}

/* The read count of access word a, decayed by the idle time up to tick now. */
static uint32_t acc_decayed(uint32_t a, uint32_t now)
{
    uint32_t idle = (now - dte_acc_time(a)) & DTE_ACC_TIME_MASK;
    uint32_t c = dte_acc_count(a), periods = idle / NESSIE_ACC_DECAY_TICKS;
    return periods >= c ? 0 : c - periods;
}

void nessie_access_record(struct nessie_ctx *ctx, uint64_t ite, uint32_t old,
                          unsigned char *cached)
{
    struct nessie_node *nd = ctx->node;
    if (ite_is_flash(ite))
        return; /* a flash item has no access word: the read itself was its last use */
    uint32_t now = nessie_acc_tick();
    uint32_t c = acc_decayed(old, now);
    if (c < DTE_ACC_COUNT_MASK) {
        uint32_t base = c > NESSIE_ACC_INIT ? c - NESSIE_ACC_INIT : 0;
        /* Probability 1 / (base * factor + 1), drawn from 32 random bits. */
        if ((hash_xorshift(&ctx->rng) & 0xFFFFFFFFu) * (uint64_t)(base * NESSIE_ACC_LOG_FACTOR + 1) <
            0x100000000ULL)
            c++;
    }
    uint32_t a = dte_acc_make(now, c, true);
    if (a == old)
        return; /* the same tick and count: nothing to tell */
    if (cached)
        memcpy(cached + DTE_OFF_ACCESS, &a, sizeof(a));
    uint64_t off = ite_offset(ite) + DTE_OFF_ACCESS;
    if (ite_node(ite) == nd->cfg.self) {
        fab_local_write(nd->fab, FAB_REGION_DATA, off, &a, sizeof(a));
        return;
    }
    struct fab_wr wr = {.opcode = FAB_OP_WRITE, .node = ite_node(ite), .region = FAB_REGION_DATA,
                        .offset = off, .local = &a, .length = sizeof(a)};
    /* Not waited for, and dropped when the endpoint has no room: a hint. */
    if (fab_post_background(ctx->ep, &wr) == FAB_OK) {
        CTR_ADD(OPC(ctx).writes, 1);
        CTR_ADD(OPC(ctx).bytes_written, sizeof(a));
    }
}

/* A sampled slot as the evictor judges it. */
struct candidate {
    uint64_t off;
    struct dte_hdr h;
    uint64_t round;  /* the pool's round that read it (evict_pool) */
    bool dead;
    uint32_t count;  /* decayed read count */
    uint32_t idle;   /* ticks since the last read (or the write) */
};

/* Score c's header as of access tick now (count, idle time, dead). Scores move with time, so
 * candidates compared are scored against the same clock. */
static void candidate_score(struct nessie_node *nd, uint32_t cls, struct candidate *c,
                            uint32_t now, uint64_t now_ns)
{
    c->dead = nessie_item_dead(nd, &c->h);
    uint64_t written = VERSION_TIME(c->h.version);
    c->count = acc_decayed(c->h.access, now);
    uint64_t young_ns = atomic_load_explicit(&nd->evict_young_ns[cls], memory_order_relaxed);
    if (young_ns == 0)
        young_ns = EVICT_YOUNG_MS * 1000000ULL; /* no rate measured yet */
    /* A version ahead of this clock (a writer's clock ahead, or pushed past a flush) is young. */
    if ((now_ns <= written || now_ns - written < young_ns) &&
        c->count < NESSIE_ACC_INIT + 1)
        c->count = NESSIE_ACC_INIT + 1; /* young: counts as read once */
    c->idle = (now - dte_acc_time(c->h.access)) & DTE_ACC_TIME_MASK;
}

/* Read the header of the slot at off; true if it holds a committed item the evictor may
 * remove (not a tombstone, not in flight, not already on its way out). */
static bool candidate_read(struct nessie_node *nd, uint32_t cls, uint64_t off, uint32_t now,
                           struct candidate *c)
{
    c->off = off;
    if (fab_local_read(nd->fab, FAB_REGION_DATA, off, &c->h, sizeof(c->h)) != FAB_OK)
        return false;
    uint64_t st = c->h.state;
    if ((st & (DTE_BUSY | DTE_COMMITTED | DTE_ABANDONED | DTE_RECYCLED)) !=
            (DTE_BUSY | DTE_COMMITTED) ||
        c->h.kind != DTE_KIND_VALUE || c->h.key_len == 0 || c->h.key_len > NESSIE_KEY_MAX)
        return false;
    candidate_score(nd, cls, c, now, nessie_real_ns());
    return true;
}

/* Whether a is a better victim than b. */
static bool worse(const struct candidate *a, const struct candidate *b)
{
    if (a->dead != b->dead)
        return a->dead;
    if (a->count != b->count)
        return a->count < b->count;
    if (a->idle != b->idle)
        return a->idle > b->idle;
    return a->h.version < b->h.version; /* the same tick: the older write goes */
}

/* Publish when the item just evicted was last read (data_hdr.room_victim_ms), smoothed over
 * about EVICT_VICTIM_SMOOTH evictions: how cold what this node gives up for a new value is,
 * which writers on full nodes compare to place values where the cluster's coldest items are
 * (modes/place.c). A racy read-modify-write between two evicting threads loses one sample of a
 * hint, nothing more. */
#define EVICT_VICTIM_SMOOTH 16
static void room_victim(struct nessie_node *nd, const struct candidate *c)
{
    uint64_t idle_ms = ((uint64_t)c->idle << DTE_ACC_TICK_SHIFT) / 1000000ULL;
    uint64_t now_ms = nessie_real_ns() / 1000000ULL;
    uint64_t v = now_ms > idle_ms ? now_ms - idle_ms : 1;
    uint64_t old = __atomic_load_n(&nd->hdr->room_victim_ms, __ATOMIC_RELAXED);
    if (old != 0)
        v = (uint64_t)((int64_t)old + ((int64_t)v - (int64_t)old) / EVICT_VICTIM_SMOOTH);
    __atomic_store_n(&nd->hdr->room_victim_ms, v ? v : 1, __ATOMIC_RELAXED);
}

/* Remove the item in the slot c describes (its class cls), counting what it was: demoted to the
 * flash log when the tier is on and the value is large enough ([flash] item_min), else (or when
 * the log refuses it) dropped. Returns nessie_evict_entry's status (NESSIE_OK: removed). */
static int remove_candidate(struct nessie_ctx *ctx, uint32_t cls, struct candidate *c)
{
    struct nessie_node *nd = ctx->node;
    unsigned char key[NESSIE_KEY_MAX];
    uint32_t klen = c->h.key_len;
    if (fab_local_read(nd->fab, FAB_REGION_DATA, c->off + DTE_HDR_SIZE, key, klen) != FAB_OK)
        return NESSIE_INVALID;
    struct key_plan kp;
    key_plan_make(&kp, nd, key, klen);
    uint64_t ite = ite_make(nd->cfg.self, cls, c->off, dte_gen(c->h.state), kp.filter);
    if (nd->flash && !c->dead && c->h.value_len >= nd->cfg.flash_item_min) {
        int drc = demote_item(ctx, &kp, ite, c->off, &c->h);
        if (drc == NESSIE_OK) {
            room_victim(nd, c);
            return NESSIE_OK;
        }
        if (drc != NESSIE_NO_MEMORY) {
            CTR_ADD(ctx->ctr.evict_skipped, 1);
            return drc;
        }
    }
    int rc = nessie_evict_entry(ctx, &kp, ite);
    if (rc != NESSIE_OK) {
        CTR_ADD(ctx->ctr.evict_skipped, 1);
        return rc;
    }
    bool fetched = (c->h.access & DTE_ACC_FETCHED) != 0;
    if (c->dead) {
        CTR_ADD(ctx->ctr.reclaimed, 1);
        if (!fetched)
            CTR_ADD(ctx->ctr.expired_unfetched, 1);
    } else {
        CTR_ADD(ctx->ctr.evictions, 1);
        if (!fetched)
            CTR_ADD(ctx->ctr.evicted_unfetched, 1);
        room_victim(nd, c);
    }
    return NESSIE_OK;
}

/* Give class cls a page of another class: evict every item of the page slab_drain picks. */
static size_t drain_for(struct nessie_ctx *ctx, uint32_t cls)
{
    struct nessie_node *nd = ctx->node;
    uint64_t first, slots;
    uint32_t pcls;
    /* A drain ends when its page's quarantines are over: a few periods are plenty. */
    uint64_t max_ms = 4ULL * nd->cfg.expiration_ms + 100;
    if (slab_has_spare_pages(&nd->slab) ||
        !slab_drain(&nd->slab, cls, max_ms, &first, &pcls, &slots))
        return 0;
    size_t removed = 0;
    uint32_t now = nessie_acc_tick();
    for (uint64_t i = 0; i < slots; i++) {
        struct candidate c;
        if (!candidate_read(nd, pcls, first + i * nd->class_size[pcls], now, &c))
            continue;
        int rc = remove_candidate(ctx, pcls, &c);
        if (rc == NESSIE_OK)
            removed++;
        else if (rc == NESSIE_NO_MEMORY)
            break;
    }
    return removed;
}

/* The victim pool (Redis's eviction pool), one per class: the worst candidates sampled so far,
 * kept from one eviction to the next. A victim is the worst of the pool once a new sample has
 * joined it, not the worst of the sample alone: once few unread items are left, a sample of
 * EVICT_SAMPLES holds none of them more often than not, and the worst of it was then an item
 * that is read (test_pool_prefers_unread_items). Its entries are read again before one goes,
 * as it may have been read, rewritten or removed since. Behind nd->evict_pool_lock. */
#define EVICT_POOL 16
struct evict_pool {
    uint64_t round; /* picks so far: a candidate read in an earlier one is read again */
    uint32_t n;
    struct candidate c[EVICT_POOL]; /* in no order */
};

/* Add c to pool p: in place of an entry for the same slot, or if the pool has room, or in place
 * of its best-kept entry if c is a better victim. */
static void pool_add(struct evict_pool *p, const struct candidate *c)
{
    uint32_t keep = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        if (p->c[i].off == c->off) {
            p->c[i] = *c;
            return;
        }
        if (worse(&p->c[keep], &p->c[i]))
            keep = i;
    }
    if (p->n < EVICT_POOL)
        p->c[p->n++] = *c;
    else if (worse(c, &p->c[keep]))
        p->c[keep] = *c;
}

/* Sample class cls into pool p and take the worst candidate out of it into *out. Returns false
 * if the pool is empty (the class has no page, or only tombstones and entries in flight). */
static bool pool_pick(struct nessie_node *nd, struct nessie_ctx *ctx, struct evict_pool *p,
                      uint32_t cls, struct candidate *out)
{
    uint32_t now = nessie_acc_tick(), items = 0;
    uint64_t now_ns = nessie_real_ns();
    p->round++;
    for (uint32_t i = 0; i < p->n; i++)
        candidate_score(nd, cls, &p->c[i], now, now_ns);
    /* EVICT_SAMPLES items, not slots: in a class that is half free or in quarantine, a sample
     * of slots would often hold one item only. Draws are bounded: a class of tombstones and
     * entries in flight has nothing to give. */
    for (uint32_t draws = 0; items < EVICT_SAMPLES && draws < EVICT_SAMPLES * EVICT_DRAWS;) {
        uint64_t offs[EVICT_SAMPLES];
        uint32_t got = slab_sample(&nd->slab, cls, &ctx->rng, offs, EVICT_SAMPLES);
        if (got == 0)
            break; /* no page */
        draws += got;
        for (uint32_t i = 0; i < got && items < EVICT_SAMPLES; i++) {
            struct candidate c;
            if (candidate_read(nd, cls, offs[i], now, &c)) {
                c.round = p->round;
                pool_add(p, &c);
                items++;
            }
        }
    }
    if (p->n == 0)
        return false;
    uint32_t w = 0;
    for (uint32_t i = 1; i < p->n; i++)
        if (worse(&p->c[i], &p->c[w]))
            w = i;
    *out = p->c[w];
    p->c[w] = p->c[--p->n];
    return true;
}

/* Whether a candidate the pool kept from an earlier pick still is what it was: the same life
 * of the same item in a slot of class cls, read no more often since (else it goes back to the
 * pool with its new score, false). Refreshes *c. */
static bool pool_recheck(struct nessie_node *nd, struct evict_pool *p, uint32_t cls,
                         struct candidate *c)
{
    struct candidate now;
    if (!slab_slot_of_class(&nd->slab, cls, c->off) ||
        !candidate_read(nd, cls, c->off, nessie_acc_tick(), &now) || now.h.state != c->h.state ||
        now.h.version != c->h.version)
        return false; /* removed, rewritten or moved since: dropped */
    now.round = p->round;
    if (now.count > c->count) {
        pool_add(p, &now);
        return false;
    }
    *c = now;
    return true;
}

size_t nessie_evict_class(struct nessie_ctx *ctx, uint32_t cls, size_t n)
{
    struct nessie_node *nd = ctx->node;
    if (mship_retiring_self(&nd->view))
        return 0; /* R1: see nessie_evict_run */
    size_t removed = 0;
    /* Another thread of this node evicting holds the pools: this one picks from samples of its
     * own alone (a pool of one pick), rather than wait on a lock held across header reads. */
    struct evict_pool own = {0}, *pools = NULL;
    if (pthread_mutex_trylock(&nd->evict_pool_lock) == 0) {
        if (!nd->evict_pool)
            nd->evict_pool = calloc(nd->nclasses, sizeof(struct evict_pool));
        pools = nd->evict_pool;
        if (!pools)
            pthread_mutex_unlock(&nd->evict_pool_lock); /* out of memory: samples alone */
    }
    /* A class whose samples keep finding nothing to remove (tombstones and entries in flight
     * only) is left after a few rounds: the caller comes back later. */
    for (size_t round = 0; removed < n && round < n * 4; round++) {
        struct evict_pool *p = pools ? &pools[cls] : &own;
        if (!pools)
            own.n = 0;
        struct candidate victim;
        if (!pool_pick(nd, ctx, p, cls, &victim))
            break;
        if (victim.round != p->round && !pool_recheck(nd, p, cls, &victim))
            continue;
        int rc = remove_candidate(ctx, cls, &victim);
        if (rc == NESSIE_OK)
            removed++;
        else if (rc == NESSIE_NO_MEMORY)
            break; /* no room for a tombstone until some come back: later */
    }
    if (pools)
        pthread_mutex_unlock(&nd->evict_pool_lock);
    /* Nothing of its own to give (no page, or only entries in flight): another class's page. */
    if (removed == 0)
        removed = drain_for(ctx, cls);
    return removed;
}

/* The reclaim crawl: examine the next slots (EVICT_CRAWL_PER_MS) and remove the dead items among
 * them (expired, or written before a flush_all), so their memory comes back whether or not
 * the node is short of it. */
struct crawl {
    struct nessie_ctx *ctx;
    uint32_t now;
    size_t removed;
};

static void crawl_slot(void *arg, uint32_t cls, uint64_t off)
{
    struct crawl *cr = arg;
    struct candidate c;
    if (candidate_read(cr->ctx->node, cls, off, cr->now, &c) && c.dead &&
        remove_candidate(cr->ctx, cls, &c) == NESSIE_OK)
        cr->removed++;
}

/* Measure every class's allocation rates since the last run, smoothed over about a second, and
 * set its young-item window. Every class, whether or not this run gets to evict for it: a class
 * skipped once would be credited, next run, with two runs' allocations over one run's time.
 * refused[cls]: writes of the class were refused since the last run. */
static void evict_measure(struct nessie_node *nd, double dt, bool *refused)
{
    for (uint32_t cls = 0; cls < nd->nclasses; cls++) {
        uint64_t nfree, pending, items, slots, allocs, failed;
        slab_class_state(&nd->slab, cls, &nfree, &pending, &items, &slots, &allocs, &failed);
        refused[cls] = failed != nd->evict_last_failed[cls];
        if (dt > 0) {
            /* Demand, not what was served: refused allocations count too (a waiting writer
             * retries, so they overcount, which only evicts sooner), or writers kept waiting
             * would lower the rate, and with it the room made for them. What was served is
             * kept apart, for the warning that the period is too long. */
            double served = (double)(allocs - nd->evict_last_allocs[cls]) / dt;
            double inst = served + (double)(failed - nd->evict_last_failed[cls]) / dt;
            double w = dt >= 1.0 ? 1.0 : dt;
            nd->evict_rate[cls] += w * (inst - nd->evict_rate[cls]);
            nd->evict_served_rate[cls] += w * (served - nd->evict_served_rate[cls]);
            if (slots > 0) {
                double young_ms = nd->evict_rate[cls] > 0 ? (double)slots / nd->evict_rate[cls] *
                                                                1000.0 * EVICT_YOUNG_SHARE
                                                          : EVICT_YOUNG_MAX_MS;
                young_ms = young_ms < EVICT_YOUNG_MS       ? EVICT_YOUNG_MS
                           : young_ms > EVICT_YOUNG_MAX_MS ? EVICT_YOUNG_MAX_MS
                                                           : young_ms;
                atomic_store_explicit(&nd->evict_young_ns[cls], (uint64_t)(young_ms * 1e6),
                                      memory_order_relaxed);
            }
        }
        nd->evict_last_allocs[cls] = allocs;
        nd->evict_last_failed[cls] = failed;
    }
}

size_t nessie_evict_run(struct nessie_ctx *ctx, size_t max_victims)
{
    struct nessie_node *nd = ctx->node;
    /* A node being retired writes nothing new, a DELETE's tombstone included (R1,
     * model/retire.pml): it needs no room, and its entries are the survivors' to relocate. */
    if (mship_retiring_self(&nd->view))
        return 0;
    if (pthread_mutex_trylock(&nd->evict_lock) != 0)
        return 0; /* another thread of this node is at it */
    uint64_t now = nessie_mono_ns();
    uint64_t ms = (now - nd->crawl_last_ns) / 1000000ULL, crawl = ms * EVICT_CRAWL_PER_MS;
    struct crawl cr = {.ctx = ctx, .now = nessie_acc_tick()};
    if (crawl > 0) {
        /* Whole ms paid for, the rest carried over; a long pause is not made up past a run. */
        nd->crawl_last_ns = crawl < EVICT_CRAWL_MAX ? nd->crawl_last_ns + ms * 1000000ULL : now;
        slab_crawl(&nd->slab, &nd->crawl_page, &nd->crawl_slot,
                   crawl < EVICT_CRAWL_MAX ? (size_t)crawl : EVICT_CRAWL_MAX, crawl_slot, &cr);
    }
    size_t removed = cr.removed;

    double dt = nd->evict_last_ns ? (double)(now - nd->evict_last_ns) / 1e9 : 0;
    bool refused_since[ITE_MAX_CLASSES];
    evict_measure(nd, dt, refused_since);
    bool spare = slab_has_spare_pages(&nd->slab);
    const double period = (double)nd->cfg.expiration_ms / 1000.0;
    uint64_t room = 0; /* data_hdr.room_classes, as this run finds the classes */
    for (uint32_t cls = 0; cls < nd->nclasses && removed < max_victims; cls++) {
        uint64_t nfree, pending, items, slots, allocs, failed;
        slab_class_state(&nd->slab, cls, &nfree, &pending, &items, &slots, &allocs, &failed);
        bool refused = refused_since[cls];
        if (nd->cfg.no_evict || spare)
            continue;
        if (refused && nfree + pending == 0) {
            /* Writes of this size were refused and nothing is on its way back (the class may
             * have no page at all: then a page of another class is drained for it). */
            removed += nessie_evict_class(ctx, cls, EVICT_FLOOR_MIN);
            continue;
        }
        if (slots == 0)
            continue;
        uint64_t floor = slots / EVICT_FLOOR_DIV > EVICT_FLOOR_MIN ? slots / EVICT_FLOOR_DIV
                                                                    : EVICT_FLOOR_MIN;
        /* Writers that found no room wait, which lowers the rate they allocate at, and with it
         * the room made for them: a slow equilibrium. So the slack grows by half each run that
         * saw a refusal, and shrinks back slowly (a few percent a run) once none does. */
        double *boost = &nd->evict_boost[cls];
        if (*boost < 1.0)
            *boost = 1.0;
        *boost = refused ? (*boost * 1.5 < EVICT_BOOST_MAX ? *boost * 1.5 : EVICT_BOOST_MAX)
                         : (*boost * 0.98 > 1.0 ? *boost * 0.98 : 1.0);
        uint64_t want = floor + (uint64_t)(nd->evict_rate[cls] * period * EVICT_SLACK_FACTOR *
                                           *boost);
        if (want > slots / 4) {
            /* Never empty a class for a burst. A class of tombstones only (evictions' and
             * DELETEs': no item to evict) refused although a quarter of it is on its way back
             * is too small for its demand: it gets another class's page. (Without, evictions
             * waited for their tombstones, or DELETEs' spilled into larger slots.) A class of
             * items gets room by evicting, never by draining a page, which would remove every
             * item on it, the newest too. */
            /* Writers waited, and one period's allocations alone (those served: a waiting
             * writer's retries inflate the demand; and the boost aside: it rises with any
             * burst) are over the quarter: the expiration period is too long for this
             * node's memory at this SET rate (paper 4.3.1). The operator can change that; say
             * so, at most once a minute. Not for a class of tombstones (no items): that one
             * gets another class's page below. */
            double period_need =
                (double)floor + nd->evict_served_rate[cls] * period * EVICT_SLACK_FACTOR;
            if (refused && items > 0 && period_need > (double)(slots / 4) &&
                nessie_every(&nd->quarantine_warn_ns, NESSIE_SETTING_WARN_EVERY_NS))
                log_warn("evict: writes of %llu-byte slots wait for memory: %.0f a second for "
                         "an expiration period of %u ms, and the slack for bursts, need %.0f%% "
                         "of their %llu slots, more than the quarter kept ready; a shorter "
                         "cluster.expiration_ms or more data_bytes lets them through",
                         (unsigned long long)nd->class_size[cls], nd->evict_served_rate[cls],
                         nd->cfg.expiration_ms, 100.0 * period_need / (double)slots,
                         (unsigned long long)slots);
            want = slots / 4;
            if (refused && items == 0 && !slab_values_refused(&nd->slab, cls) &&
                nfree + pending >= want)
                removed += drain_for(ctx, cls);
        }
        if (nfree >= EVICT_ROOM_FACTOR * want)
            room |= 1ULL << cls; /* free beyond what this node's writers need: peers may use it */
        if (nfree + pending >= want)
            continue;
        size_t need = want - (nfree + pending);
        if (need > max_victims - removed)
            need = max_victims - removed;
        removed += nessie_evict_class(ctx, cls, need);
    }
    /* A run cut short by max_victims leaves the classes it did not reach without room: a hint. */
    __atomic_store_n(&nd->hdr->room_classes, room, __ATOMIC_RELAXED);
    nd->evict_last_ns = now;
    pthread_mutex_unlock(&nd->evict_lock);
    return removed;
}

void nessie_data_usage(struct nessie_node *nd, uint64_t *items, uint64_t *bytes)
{
    uint64_t placed, placed_bytes;
    slab_usage(&nd->slab, items, bytes, &placed, &placed_bytes);
}

void nessie_data_placed(struct nessie_node *nd, uint64_t *items, uint64_t *bytes)
{
    uint64_t all, all_bytes;
    slab_usage(&nd->slab, &all, &all_bytes, items, bytes);
}
