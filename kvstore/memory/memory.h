/*
 * memory.h - a node's memory and the state every call carries. Not a public header.
 *
 * Room: memory, above fabric and membership. It owns a node's tables and what keeps them
 * usable: the entry layouts (layout.h), where a key lives (keys.c: the call plan), the allocator
 * of data entries (slab.c), the per-context entry cache (cache.c), items' time (items.c:
 * versions, exptimes, flush), recycling and the leak sweep (recycle.c), the evictor (evict.c),
 * the dump (dump.c), and the node and context structures below, which every room above uses. It
 * may call the fabric and membership; what it needs from a room above (the evictor's DELETE) it
 * declares in upcall.h. The flash tier (issue 31) lives here too: its log (flash.c, a file per
 * node written in whole pages through io_uring) and the index's traffic with it (demote.c:
 * eviction's victims demoted to it, its full log's oldest page dropped, its sparse pages
 * compacted).
 */
#ifndef NESSIE_KVSTORE_MEMORY_H
#define NESSIE_KVSTORE_MEMORY_H

#include <pthread.h>
#include <stdatomic.h>

#include "cache.h"
#include "clock.h"
#include "fabric/fabric.h"
#include "keys.h"
#include "layout.h"
#include "membership/membership.h"
#include "slab.h"
struct flash_log;
#include <nessie/nessie.h>

/* Slots of the table of recent flash reads (struct nessie_node, flash_seen): 32 KiB a node, and
 * a hot set of a few thousand flash items (more than that many hot items belong in memory, and
 * are promoted as they collide less) is recognised at its second read. */
#define NESSIE_FLASH_SEEN_SLOTS 4096

#define NESSIE_MAX_WAYS NESSIE_WAYS_MAX
/* The public limits (nessie.h) are the entry layouts' (layout.h), and the fabric's backends are
 * the engine's in the same order (front/engine.c passes one for the other). */
_Static_assert(NESSIE_NODES_MAX == ITE_MAX_NODES && NESSIE_NODES_MAX <= FAB_MAX_NODES,
               "node limit is the ITE's");
_Static_assert(NESSIE_FILTER_BITS_MAX == ITE_FILTER_BITS_MAX, "filter bits are the ITE's");
_Static_assert(NESSIE_DATA_BYTES_MAX == ITE_MAX_DATA_BYTES, "data region limit is the ITE's");
_Static_assert((int)NESSIE_BACKEND_SHM == (int)FAB_BACKEND_SHM &&
               (int)NESSIE_BACKEND_VERBS == (int)FAB_BACKEND_VERBS, "backends match");
/* DTEs one call may have to recycle: the candidate, up to N-1 cleared duplicates per attempt and
 * a migration's source; bounded because attempts that keep failing end in a timeout. */
#define NESSIE_MAX_REC 64

/*
 * How long a call may act (front/engine.c, bound_compute, where the argument is written down): every
 * term is derived from the configuration and the fabric once, at node open, and everything that
 * relies on a call having ended (the orphan takeover, the leak sweep, a shipped call's requester)
 * uses these figures and no other.
 */
struct nessie_bound {
    uint64_t budget_ns;      /* B: a call starts no attempt after start + B (op_timeout_ms) */
    uint64_t memory_wait_ns; /* W: what a write that waits for room gets beyond B, once */
    uint64_t period_ns;      /* E: an attempt acts only within one period of its start */
    uint64_t fabric_ns;      /* F: a posted request takes effect at most this long after */
    uint64_t act_ns;         /* L = B + W + E + F: start to the last effect of anything posted */
    uint64_t grace_ns;       /* L + E: an uncommitted entry this old has no live writer */
};

struct nessie_node {
    struct nessie_config cfg;
    char cluster[FAB_CLUSTER_NAME_MAX + 1];
    struct fab *fab;
    struct slab slab;
    unsigned char *data;        /* this node's DATA region */
    struct data_hdr *hdr;
    uint32_t nclasses;
    uint32_t class_size[ITE_MAX_CLASSES]; /* same on every node: same configuration */
    struct nessie_bound bound;  /* the longest a call acts, and the takeover grace after it */
    uint64_t incarnation;
    /* The cluster's view as installed by nessie_view_install (membership/membership.h). */
    struct mship_state view;
    bool view_ready; /* view's lock made (nessie_node_close destroys only what was made) */
    /* The flash tier's log (flash.h), or NULL when [flash] path is not set; cfg.flash_path
     * points at flash_path (the caller's string is not kept). */
    struct flash_log *flash;
    char flash_path[NESSIE_FLASH_PATH_MAX];
    /* One compaction at a time (demote.c): two would copy the same page's records twice, and
     * the losers' copies would only be unlinked again. */
    atomic_bool flash_compacting;
    _Atomic uint64_t flash_compact_idle_ns; /* the last search that found no page to compact */
    /* The flash records read lately, for promotion's "read twice" (demote.c,
     * demote_promote_wanted): a record's location and the time of its last read, in a slot
     * its location hashes to. A table, not a list: it must cost a read of a flash item one
     * exchange, and a collision only forgets a first read (the item waits for its next two). */
    _Atomic uint64_t flash_seen[NESSIE_FLASH_SEEN_SLOTS];

    /* DTEs whose operations finished and that wait to be marked recycled (background_recycle):
     * ITE words, drained by nessie_recycle_run(). A mutex, because workers push and recyclers
     * pop, and both are rare next to fabric operations. */
    pthread_mutex_t stage_lock;
    uint64_t *stage;
    size_t nstage, stage_cap;

    /* Leak sweep: the candidates of the previous sweep (offsets, sorted) and when it ran. */
    pthread_mutex_t sweep_lock;
    uint64_t *sweep_prev;
    size_t nsweep_prev;
    uint64_t sweep_prev_ns;

    /* The evictor's view of allocation rates (evict.c): one evictor at a time (trylock). */
    pthread_mutex_t evict_lock;
    uint64_t evict_last_ns;
    uint64_t evict_last_allocs[ITE_MAX_CLASSES];
    uint64_t evict_last_failed[ITE_MAX_CLASSES];
    double evict_rate[ITE_MAX_CLASSES];  /* allocations per second, smoothed */
    double evict_boost[ITE_MAX_CLASSES]; /* slack multiplier, raised while writers wait */
    double evict_served_rate[ITE_MAX_CLASSES]; /* allocations served per second, smoothed */
    /* How long a new item counts as read once (evict.c, EVICT_YOUNG_SHARE): written by the
     * evictor, read by every thread that scores candidates. 0 until a second run of the evictor
     * has measured a rate: EVICT_YOUNG_MS meanwhile. */
    _Atomic uint64_t evict_young_ns[ITE_MAX_CLASSES];
    _Atomic uint64_t quarantine_warn_ns; /* the last "period too long" warning (evict.c) */
    uint64_t crawl_page, crawl_slot;     /* the reclaim crawl's cursor */
    uint64_t crawl_last_ns;              /* ... and when it last moved (it is paced by time) */
    /* The victim pools, one per class (evict.c: struct evict_pool), allocated on first use. */
    pthread_mutex_t evict_pool_lock;
    struct evict_pool *evict_pool;
    /* Who to wake when a writer finds no room (nessie_node_on_pressure), and when it was last
     * woken: writers that keep waiting would otherwise wake it once per back-off step each.
     * Atomic: a daemon's own recycler writes (a move's copies) while the callback is installed
     * and removed; arg is stored before fn with release, and fn loaded with acquire before arg,
     * so a reader that finds fn set finds the arg that went with it (evict.c). */
    _Atomic(nessie_pressure_fn) pressure_fn;
    _Atomic(void *) pressure_arg;
    _Atomic uint64_t pressure_last_ns;
    /* The scrub (protocol/scrub.c): its cursor over this node's index (slots looked at, ever),
     * where the pass it owes ends, the fence change that pass is for (the view's fence_changes
     * when it started), the last one whose pass is over, the readmissions the last orphan pass
     * was for, and whether the current pass looks for orphans. A change starts a new pass; a
     * finished pass makes runs free until the next change. Written by the one thread that runs
     * the scrub; atomic because nessie_scrub_done is read from any. */
    _Atomic uint64_t scrub_cursor, scrub_end;
    _Atomic uint32_t scrub_changes, scrub_done, scrub_readmissions;
    _Atomic bool scrub_orphans;
    /* The mover (protocol/move.c, issue 30): its cursor over this node's index, where the pass
     * for the change in progress ends, the placement's step that pass is for (mship_step), the
     * last one whose pass is over, and the entries moved ever. Written by the one thread that
     * runs the mover. */
    _Atomic uint64_t move_cursor, move_end, moved;
    _Atomic uint64_t move_step, move_done;

    /* Server-driven execution's state (modes/sd.c): the ring slots' counts, on both sides. */
    struct sd_state *sd;
    /* What this node last read of its peers' room (modes/place.c). */
    struct place_state *place;

    /* Every live context, for nessie_node_counters(); retired holds the sums of destroyed ones. */
    pthread_mutex_t ctx_lock;
    struct nessie_ctx *ctxs;
    struct nessie_counters retired;
    uint32_t next_ctx_id;
    /* The operation numbers of this node's calls (the low bits of their creator ids): contexts
     * take them in blocks (relaxed atomic adds: a block is never handed out twice), so no two
     * calls of one incarnation share one, however many contexts come and go. */
    uint64_t op_seq_next;
};

struct nessie_ctx {
    struct nessie_node *node;
    struct nessie_ctx *next;    /* node->ctxs list */
    struct fab_ep *ep;
    struct nessie_cache *cache;
    uint32_t id;
    uint64_t op_seq, op_seq_end; /* its block of operation numbers (node->op_seq_next) */
    uint64_t rng;
    enum nessie_opkind kind;    /* what the counters are charged to right now */
    /* Counters are written by the owning thread only and read by stats readers; relaxed atomic
     * accesses (plain moves on x86) keep those reads defined. */
    struct nessie_counters ctr;
    /* DTE buffers: [0] the entry under examination, [1] a previous version or a migration's
     * source, [2] a value being built (append, incr). */
    unsigned char *buf[3];
    size_t cap[3];
    /* Per node: the clock it last published, and when (our monotonic ns) we first read that
     * value: a clock that stops advancing (its owner dead, or its recycler stalled) still ages
     * its entries by the time we have watched it stand still (protocol/protocol.c, owner_clock). */
    struct nessie_clock_seen {
        uint64_t published, first_seen;
    } *clock_seen;
    enum nessie_mode mode;      /* who carries out its calls (modes/dispatch.c) */
    uint32_t auto_seq;          /* mode auto's calls, counted to pick the measured ones */
    /* The budget's end (monotonic ns) of the next call started on this context, when it is a
     * shipped call carried out here: by its home node's server (from the budget the request
     * carried) or by its requester after a withdrawal (from the call's original start), so its
     * bound still runs from where the call began. 0: none (now + B). proto_op_init consumes it;
     * modes/dispatch.c clears it after a call run here in any case. */
    uint64_t call_deadline_ns;
    bool serving;               /* running a peer's shipped call: traffic counted as served */
    /* Serves peers' shipped GETs while this context waits for its own shipped calls' replies
     * (nessie_ctx_set_sd_helper); NULL: none. sd_help_next: where its next look starts. */
    struct nessie_ctx *sd_helper;
    uint32_t sd_help_next;
    /* DTE_F_* flags the values this context writes carry besides their own: DTE_F_PLACED while a
     * server runs a store placed here for a full peer (modes/sd.c), else 0. */
    uint8_t value_flags8;
    /* The node whose flash item the last call that ended NESSIE_ELSEWHERE met (a flash item is
     * read only by its owner, so the call goes there: modes/dispatch.c). */
    uint32_t elsewhere;
    /* Set by modes/dispatch.c for a call whose flash items' owners could not settle it (not
     * reachable, or sending it back and forth between two owners): another node's flash entry
     * it meets where its key may be is taken out of the index, an eviction, and the pass goes
     * on (protocol.h, proto_fetch_key). */
    bool flash_take;
    /* Server-driven messages (modes/sd.c), one slot long each: [0] the request (built here, or copied
     * out of the ring by a server), [1] the reply (built by a server, or copied in here). */
    unsigned char *sd_buf[2];
};

/* An internal status, never returned by a public call: the call met, where its key may be, an
 * entry naming another node's flash item, which only that node can read (the flash tier, issue
 * 31). It had no effect; ctx->elsewhere names the node, and modes/dispatch.c ships it there. */
#define NESSIE_ELSEWHERE 0x100

#define CTR_ADD(field, n) \
    __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (n), __ATOMIC_RELAXED)
#define OPC(ctx) ((ctx)->ctr.op[(ctx)->kind])

/* How often a warning about a setting that does not fit (expiration_ms too long for the memory,
 * or too short for the fabric) may repeat: once a minute is seen in a log without filling it. */
#define NESSIE_SETTING_WARN_EVERY_NS 60000000000ULL

/* A rate limit: true at most once per every_ns for all the callers sharing *last (relaxed: a
 * lost race only lets one more through, or one fewer). */
static inline bool nessie_every(_Atomic uint64_t *last, uint64_t every_ns)
{
    uint64_t now = nessie_mono_ns(), seen = atomic_load_explicit(last, memory_order_relaxed);
    return now - seen >= every_ns &&
           atomic_compare_exchange_strong_explicit(last, &seen, now, memory_order_relaxed,
                                                   memory_order_relaxed);
}

/* A new CAS token: unique in the cluster (the node is in the low bits), increasing on this node,
 * its high bits the write time, and later than the last flush this node has seen. */
uint64_t nessie_version_next(struct nessie_node *node);
#define VERSION_TIME(v) ((v) & ~0xFFFULL)
/* Flush time as this node knows it (set on every node by nessie_flush before it returns). */
uint64_t nessie_flush_ns(struct nessie_node *node);
/* The delayed flush this node knows of, if its time (now_real_ns) has come; else 0. */
uint64_t nessie_flush_at_due(struct nessie_node *node, uint64_t now_real_ns);

/* memcached's exptime as absolute unix seconds: 0 never; up to 30 days relative; beyond,
 * absolute; negative: already past (1). */
uint32_t nessie_abs_exptime(int64_t exptime);

/* Ensure buffer b of ctx holds at least len bytes. Returns NULL on out of memory. */
unsigned char *nessie_ctx_buf(struct nessie_ctx *ctx, int b, size_t len);

/* Step 7: stage (background) or mark now the DTE that ite referred to. */
void nessie_recycle(struct nessie_ctx *ctx, uint64_t ite);

/* CAS the state word of the DTE ite names (through the fabric, also on this node: the NIC's
 * atomics and the CPU's need not be atomic with each other on verbs). Sets *old. Returns
 * NESSIE_OK or NESSIE_FABRIC_ERROR (then whether it ran is unknown). */
int nessie_state_cas(struct fab_ep *ep, uint64_t ite, uint64_t expect, uint64_t swap,
                     uint64_t *old);

/* Publish this node's monotonic clock in its data header (orphan ages are judged on it). */
void nessie_clock_publish(struct nessie_node *node);

/* Read the ITE at global position pos (node * index_slots + slot) into *out, uncounted (the
 * leak sweep and the dump, which are not operations). Returns NESSIE_OK or NESSIE_FABRIC_ERROR. */
int nessie_ite_read_pos(struct fab_ep *ep, const struct nessie_node *nd, uint64_t pos,
                        uint64_t *out);

/* Logically absent although present: expired (memcached TTL) or written before a flush_all. */
bool nessie_item_dead(struct nessie_node *nd, const struct dte_hdr *h);
/* The same, judged as of read_ns (this host's monotonic clock): when the index entry the view
 * came from was read. A GET answers as of that read, its linearization point; judged later, an
 * item replaced meanwhile by one without an expiry could read as absent, which it never was
 * (model/time-findings.md, 7b). */
bool nessie_item_dead_at(struct nessie_node *nd, const struct dte_hdr *h, uint64_t read_ns);

/* Charge a finished call's fabric traffic (requests posted, bytes moved) to the histograms of
 * the kind ctx->kind names. */
void nessie_count_traffic(struct nessie_ctx *ctx, uint64_t ops, uint64_t bytes);

/* --- eviction (evict.c) ----------------------------------------------------------------------- */

/* The access hint's LFU counter (Redis's): a new item starts at ACC_INIT, so it is not the first
 * victim merely for being new; each read increments it with probability 1 / ((c - INIT) *
 * ACC_LOG_FACTOR + 1), so 127 stands for about a million reads; it loses one per ACC_DECAY_TICKS
 * of idle time (about a minute), so items hot long ago cool down. */
#define NESSIE_ACC_INIT 5
#define NESSIE_ACC_LOG_FACTOR 10
#define NESSIE_ACC_DECAY_TICKS 900

/* The current access tick (layout.h, DTE_ACC_*): this host's CLOCK_REALTIME in ~67 ms units. */
uint32_t nessie_acc_tick(void);

/* A read hit the item whose ITE is ite and whose access word was `old` as read: record it for
 * the evictor, with a posted WRITE nobody waits for (a local store for this node's own items),
 * only when the word changes. cached: the context's cached copy of the entry, whose word is
 * updated too (so that hits on the copy do not write again), or NULL. Never fails. */
void nessie_access_record(struct nessie_ctx *ctx, uint64_t ite, uint32_t old,
                          unsigned char *cached);

/* Evict up to n victims of class cls now (a write that found no room). Returns how many. */
size_t nessie_evict_class(struct nessie_ctx *ctx, uint32_t cls, size_t n);

/* A writer found no room: wake the evictor (nessie_node_on_pressure), rate-limited. */
void nessie_pressure(struct nessie_node *nd);



#endif
