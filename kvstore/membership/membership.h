/*
 * membership.h - the cluster's view as this node knows it. Not a public header.
 *
 * Room: membership, the engine's lowest: a room every other room may use (tests/integration/
 * rooms.sh keeps the order membership -> fabric -> memory -> protocol -> modes -> front). It
 * owns the cluster's view (an epoch and its members, each with an incarnation and a state: issue
 * 28), a node's current view, and the fence the data path obeys (which nodes' memory is out of
 * it: memory/keys.c draws positions around them, protocol/ takes entries naming their data for
 * lost, the fabric refuses to touch them). It may call nothing of the engine: the view is agreed
 * outside it (the daemon's reception/members.c, through etcd) and only installed here, so the
 * engine knows views, never the service that agrees them.
 *
 * Installing: epochs only increase. A view whose epoch is not newer than the current one is
 * refused and changes nothing, so views that arrive late or twice (two watchers, a retried
 * read) can never move a node back. Epoch 0 is "no view yet": static membership.
 *
 * Fences: a member GONE in an installed view is fenced, for the incarnation the view shows it
 * with: nothing of its memory is read or written again, its index positions are drawn again on
 * live nodes, and entries naming its data are lost values. A later view that shows it LIVE at
 * that incarnation or an older one is refused (NESSIE_INVALID): its old tables must never be
 * read again. This node itself fenced means it is out of the cluster: its calls fail (nessie.h)
 * instead of serving from a memory its peers no longer read.
 *
 * Rejoin: a fenced node comes back with new, empty tables under a newer incarnation, and a view
 * showing it LIVE at that incarnation readmits it: the fence is lifted, its positions return to
 * it, and the fabric reaches its new tables. Nothing that named its old tables may be read then,
 * and no index entry carries an incarnation, so whoever agrees views readmits a node only after
 * every live member's scrub has taken out the entries naming its old data (protocol/scrub.c; no
 * such entry is made after the fence). The placements before and after differ for the keys
 * whose positions were drawn elsewhere: from a node's first read of the readmitting view those
 * positions are no longer drawn elsewhere but stay on the node, fenced still (mship_rejoin), so
 * calls that need them wait, exactly as a fencing view's suspension makes them, and the view is
 * acted on V + F after its first read, by the argument below. Entries left at the positions
 * drawn elsewhere (orphans: their keys no longer look there) are never read under the new view;
 * the scrub's pass after a readmission takes them out, and a view that fences the same node
 * again is written, and acted on, only once every live member's pass is over, since that view
 * would draw the same positions again and find them. (Holding the write matters: a node that
 * never acted on the readmission still has the node fenced and would act on such a view at
 * once; a member's pass is over only after it acted on the readmission. reception/views.c,
 * model/views.pml.)
 *
 * Acting on a view: a view may be acted on only while it is known current. The daemon renews
 * this node's view lease V after every read of the service that found no newer view (every
 * MEMBERS_REFRESH_MS, reception/members.c); V is shorter than a member's etcd lease. A protocol
 * attempt starts only if it posts its last request (one expiration period later: its Step 0
 * checks) before the lease ends, and otherwise waits for a renewal (protocol.h, RUN_ATTEMPTS);
 * what it posted lands within the fabric's request bound F after that. A view that fences a
 * node X is installed V + F after it was first read; from that first read on, X is suspended
 * here (mship_suspend): nothing more of its memory is touched, so a call that needs X fails (and
 * waits for the view: front/api.c), while calls that do not need X go on under the old view,
 * and renewals go on. The two placements differ only for keys with a position on X, and an
 * entry naming X's data is met only by touching X: a call that touches nothing of X acts the
 * same under both. So: no request under the old view touching X lands later than the new
 * view's write plus a refresh, an attempt's span and F (each node suspends X at its first read
 * of it), no attempt under the new view starts before that write plus V + F, and V is longer
 * than a refresh and a span, so the two placements never act at once on what they disagree
 * about. A node cut off from the service gets no renewals and stops posting before its own etcd
 * lease lapses (its last requests land F later), so the view that removes it, written after
 * the lapse and acted on V + F after, comes after its last effect.
 *
 * Reading: from any thread, consistently (a reader never sees half of one view and half of
 * another). The members are copied under a reader-writer lock: a view changes rarely (a node
 * lost or returning) and is read rarely (stats), so a lock costs nothing that matters, and it
 * keeps the copy free of data races (a seqlock's racy copy of 16 KiB is undefined in C11 and
 * what ThreadSanitizer reports). The epoch alone is also kept in an atomic word, stored with
 * release after the members are written and loaded with acquire, so a call that only needs to
 * know whether the view changed (front/api.c, waiting for a view) reads one word and takes no
 * lock: a reader that loads epoch N and then copies under the lock gets view N or a newer one,
 * never an older one. The fence, the suspensions and the lease are words of their own, read on
 * every call's path without the lock.
 */
#ifndef NESSIE_KVSTORE_MEMBERSHIP_H
#define NESSIE_KVSTORE_MEMBERSHIP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <nessie/nessie.h>

/* A node's current view (embedded in struct nessie_node, memory/memory.h). */
struct mship_state {
    pthread_rwlock_t lock;   /* writers: install; readers: get */
    _Atomic uint64_t epoch;  /* view.epoch, readable without the lock (release / acquire) */
    struct nessie_view view; /* under lock */
    uint32_t self;           /* this node's id (fixed at init) */
    /* The fence: one bit per node, set and cleared by install, under the lock; read on every
     * call's path without the lock. A call that reads a bit late acts as one that started
     * before the install, which the call bound already covers. A bit cleared (a readmission)
     * is released after the node's lives moved, and read with acquire (mship_fenced). nfenced (how many bits are set) lets a cluster with no fence, static
     * membership's always, skip the bitmap with one load. */
    _Atomic uint32_t nfenced;
    _Atomic uint64_t fenced[NESSIE_NODES_MAX / 64];
    /* Suspended nodes (a fencing view read, not acted on yet: "Acting on a view"): their
     * memory is not touched, their placement unchanged. Set by mship_suspend, cleared when a
     * view readmits the node; relaxed, as fenced. */
    _Atomic uint64_t suspended[NESSIE_NODES_MAX / 64];
    /* Rejoining nodes (a view readmitting them read, not acted on yet: "Rejoin"): their
     * positions are no longer drawn elsewhere; they stay on the node, fenced still, so calls
     * that need them wait. Set by mship_rejoin, cleared when the readmitting view is installed. */
    _Atomic uint64_t rejoining[NESSIE_NODES_MAX / 64];
    /* Absent ids (issue 30): ids below the cluster's node-id capacity that are not members (never
     * joined yet). Nothing is placed on them and nothing of them is touched: placement draws
     * around them as around a fenced node, and the fabric refuses them. Unlike a fence, absence
     * says nothing about data: no entry can name an absent id's data. Set and cleared by
     * mship_set_absent; relaxed, as fenced; nabsent lets a cluster with none (the default:
     * capacity == nodes) skip the bitmap with one load. */
    _Atomic uint32_t nabsent;
    _Atomic uint64_t absent[NESSIE_NODES_MAX / 64];
    /* The placement's step ("Changes" below): in its low half the change of membership in
     * progress (MSHIP_CHANGE_WORD, or 0), in its high half how many steps placement has taken
     * (a change's start, each phase, its commit, an absence set), so two steps never look the
     * same: a call that planned at one step and finds another plans again. Under the lock;
     * release, read with acquire (mship_step). */
    _Atomic uint64_t step;
    /* The last node a retire committed, plus one (0: none): absent, so placement draws around
     * it and it serves nothing, but still reachable, since an attempt planned before a node read
     * the commit may still read the node's index (model/retire.pml, BUG_UNREACH_AT_COMMIT: the
     * retired daemon stays up V + F after the commit for them). Cleared when the id is added
     * again. Relaxed, as absent: set at the commit before the step's release. */
    _Atomic uint32_t retired;
    /* Per node, the incarnation its fence is for (the member's in the view that fenced it): a
     * view may readmit the node only at a newer one. Under lock. */
    uint64_t fenced_inc[NESSIE_NODES_MAX];
    /* Per node, how many times a view readmitted it: the shm fabric maps a node's tables anew
     * when this moves (fabric_shm.c). Release at the readmission, acquire by the fabric. */
    _Atomic uint32_t lives[NESSIE_NODES_MAX];
    /* Fences put up or lifted so far, and readmissions: the scrub owes a pass for every change
     * (protocol/scrub.c), and after a readmission one that also looks for orphans. Release
     * after the fence words, acquire by the scrub. */
    _Atomic uint32_t fence_changes, readmissions;
    /* Until when (CLOCK_MONOTONIC ns) the installed view may be acted on: the view's lease (see
     * "Acting on a view" above). 0: no lease in force (static membership, or none given yet). */
    _Atomic uint64_t valid_until_ns;
};

/* Changes of membership (issue 30): a node added to the cluster or retired from it online.
 * While one is in progress, every call's plan is the union of the placements before and after
 * (memory/keys.h), and its phase says which of them takes no new entry: announced, the arriving
 * positions; moving, the leaving ones (model/elastic.pml checks why, and why the mover of the
 * leaving entries waits as it does). One change at a time. The change is one word, so a plan
 * reads it once: the node, the kind, the phase. An added node is reachable from the change's start
 * (mship_joining): the plans read its positions, and the change word, not its bit, says whether
 * it is placed. Its absence bit stays set until the commit, so a plan that read the step before
 * the change began still draws around it, whenever it reads the bits. Each bit a change moves is
 * moved at the step that makes the change word say the same (an add's at its commit, a retire's
 * at its commit), before the step is stored with release: a plan that loads the step with
 * acquire and finds no change also finds the bits as they are after it, and one that finds the
 * change reads the changed node's placement from the word, not the bit.
 *
 * A call may span several phases (its attempts retry for up to its budget), and the model's
 * insert policies and the mover's waits hold for attempts, not calls: so every attempt plans
 * under the step it reads after its timer starts (protocol.h, RUN_ATTEMPTS), and the step's
 * count tells it whether the placement moved since its last plan, even from a change's commit
 * back to no change. */
enum mship_change_kind { MSHIP_CHANGE_ADD = 1, MSHIP_CHANGE_RETIRE = 2 };
enum mship_change_phase { MSHIP_PHASE_ANNOUNCE = 1, MSHIP_PHASE_MOVE = 2 };
#define MSHIP_CHANGE_WORD(node, kind, phase) \
    (((uint32_t)(node) + 1) | (uint32_t)(kind) << 16 | (uint32_t)(phase) << 24)
static inline uint32_t mship_change_node(uint32_t w) { return (w & 0xFFFF) - 1; }
static inline enum mship_change_kind mship_change_kind(uint32_t w)
{
    return (enum mship_change_kind)((w >> 16) & 0xFF);
}
static inline enum mship_change_phase mship_change_phase(uint32_t w)
{
    return (enum mship_change_phase)(w >> 24);
}

/* Start with no view (epoch 0, no members, no fence) for node self. Returns NESSIE_OK, or
 * NESSIE_NO_MEMORY when the lock cannot be made. */
int mship_init(struct mship_state *st, uint32_t self);
void mship_destroy(struct mship_state *st);

/* Check a view's shape: epoch > 0, at most NESSIE_VIEW_MEMBERS_MAX members, node ids below
 * NESSIE_NODES_MAX in strictly increasing order, states known. Returns NESSIE_OK or
 * NESSIE_INVALID. Reads only v. */
int mship_view_check(const struct nessie_view *v);

/* Install v (copied) if it is well formed, newer than the current view and revives no fenced
 * member at the incarnation it was fenced in (or an older one); fence its GONE members (for the
 * incarnation they are shown with), readmit its fenced members shown LIVE at a newer
 * incarnation ("Rejoin"). Returns NESSIE_OK; NESSIE_INVALID (a malformed view, or one showing a
 * fenced member LIVE at its fenced incarnation or before) or NESSIE_EXISTS (an epoch not newer
 * than the current one), and then the current view and the fence are unchanged. Never blocks
 * on anything but readers' copies. */
int mship_install(struct mship_state *st, const struct nessie_view *v);

/* Copy the current view into *out (epoch 0 and no members before the first install). */
void mship_get(struct mship_state *st, struct nessie_view *out);

/* The current view's epoch, without the lock. */
uint64_t mship_epoch(const struct mship_state *st);

/* Suspend node: from now on nothing of its memory is touched (the fabric refuses it), its
 * placement unchanged (see "Acting on a view"). Never blocks; idempotent. */
void mship_suspend(struct mship_state *st, uint32_t node);

/* A view that readmits node was read (not acted on yet: "Rejoin"): from now on its positions
 * are no longer drawn elsewhere. Never blocks; idempotent. */
void mship_rejoin(struct mship_state *st, uint32_t node);

/* Mark node absent (or present again): see absent above. This node itself may be absent only
 * while it is joining (opened with an id past the first members: front/engine.c), and is out
 * then (mship_self_out). Returns NESSIE_OK, or NESSIE_INVALID for an id past NESSIE_NODES_MAX,
 * and then nothing changes. Idempotent; never blocks but on readers' copies. */
int mship_set_absent(struct mship_state *st, uint32_t node, bool absent);

/* Begin a change of node (an add: node absent now; a retire: node present now, this node too:
 * mship_retiring_self) at its announce phase, or move it to a later phase. Returns NESSIE_OK; NESSIE_INVALID for a
 * node or kind that does not fit the cluster as it is, a change that starts past its announce
 * phase, a phase that goes back, or a change of another node while one is in progress, and
 * then nothing changes. Never blocks but on readers' copies. */
int mship_change_set(struct mship_state *st, uint32_t node, enum mship_change_kind kind,
                     enum mship_change_phase phase);

/* End the change in progress: an added node becomes present, a retired one absent (see
 * "Changes"). Returns NESSIE_OK, or NESSIE_INVALID when no change is in progress. */
int mship_change_commit(struct mship_state *st);

/* The placement's step (see step above): one load, acquire ("Changes"). */
static inline uint64_t mship_step(const struct mship_state *st)
{
    return atomic_load_explicit((_Atomic uint64_t *)&st->step, memory_order_acquire);
}

/* The change a step is in (MSHIP_CHANGE_WORD), or 0. */
static inline uint32_t mship_step_change(uint64_t step) { return (uint32_t)step; }

/* The change in progress (MSHIP_CHANGE_WORD), or 0: one load, acquire ("Changes"). */
static inline uint32_t mship_change(const struct mship_state *st)
{
    return mship_step_change(mship_step(st));
}

/* Whether node is the one an add in progress adds: reachable from the change's start, though
 * absent until its commit ("Changes"). One acquire load. */
static inline bool mship_joining(const struct mship_state *st, uint32_t node)
{
    uint32_t w = mship_change(st);
    return w && mship_change_kind(w) == MSHIP_CHANGE_ADD && mship_change_node(w) == node;
}

/* Whether this node is the one a retire in progress retires (any phase): from the retire's
 * announce on it writes no new DTE (R1, model/retire.pml): its calls' writes run on the
 * survivors, its servers send writes back to their requesters, its evictor and mover rest.
 * One acquire load. */
static inline bool mship_retiring_self(const struct mship_state *st)
{
    uint32_t w = mship_change(st);
    return w && mship_change_kind(w) == MSHIP_CHANGE_RETIRE && mship_change_node(w) == st->self;
}

/* Whether node is the one the change in progress adds or retires: no place to put new data for
 * room (modes/place.c), whatever its bits say. One acquire load. */
static inline bool mship_changing(const struct mship_state *st, uint32_t node)
{
    uint32_t w = mship_change(st);
    return w && mship_change_node(w) == node;
}

/* Extend the view lease to until_ns (CLOCK_MONOTONIC); the first call puts leases in force for
 * good. Never blocks. */
void mship_renew(struct mship_state *st, uint64_t until_ns);

/* The view lease's end (CLOCK_MONOTONIC ns), or 0 when no lease is in force. Acquire: pairs
 * with the release of mship_renew, which follows the install of the view it vouches for. */
static inline uint64_t mship_valid_until(const struct mship_state *st)
{
    return atomic_load_explicit((_Atomic uint64_t *)&st->valid_until_ns, memory_order_acquire);
}

/* Whether any node is fenced: one relaxed load (false for static membership, always). */
static inline bool mship_any_fenced(const struct mship_state *st)
{
    return atomic_load_explicit((_Atomic uint32_t *)&st->nfenced, memory_order_relaxed) != 0;
}

/* Whether node's memory is out of the data path (see "Fences" above). Never blocks. Acquire:
 * a thread that finds a readmitted node's bit clear also sees its lives moved (release at the
 * readmission), so the fabric maps its new tables before touching them, never the old ones. A
 * plain load on x86. */
static inline bool mship_fenced(const struct mship_state *st, uint32_t node)
{
    if (!mship_any_fenced(st) || node >= NESSIE_NODES_MAX)
        return false;
    uint64_t w = atomic_load_explicit((_Atomic uint64_t *)&st->fenced[node / 64],
                                      memory_order_acquire);
    return (w >> (node % 64)) & 1;
}

/* Whether node is rejoining: fenced still, but its positions stay on it. Never blocks. */
static inline bool mship_rejoining(const struct mship_state *st, uint32_t node)
{
    if (node >= NESSIE_NODES_MAX)
        return false;
    uint64_t w = atomic_load_explicit((_Atomic uint64_t *)&st->rejoining[node / 64],
                                      memory_order_relaxed);
    return (w >> (node % 64)) & 1;
}

/* Whether what names node's data is lost: the node is fenced and not rejoining. Entries naming
 * a rejoining node's data name its new tables (nothing names its old ones by then: "Rejoin"),
 * linked by nodes that acted on the readmission before this one; they are neither lost nor
 * reachable from here yet, so the fabric refuses them and calls wait for the readmission, as for
 * its positions. Taking them for lost would make a GET miss a value nobody lost, and a write or
 * the scrub take a live entry out (model/views.pml's review, 2026-11-26). Never blocks. */
static inline bool mship_lost(const struct mship_state *st, uint32_t node)
{
    return mship_fenced(st, node) && !mship_rejoining(st, node);
}

/* Whether any id is absent: one relaxed load (false when the capacity is the node count). */
static inline bool mship_any_absent(const struct mship_state *st)
{
    return atomic_load_explicit((_Atomic uint32_t *)&st->nabsent, memory_order_relaxed) != 0;
}

/* Whether node is an absent id (see absent above). Never blocks. */
static inline bool mship_absent(const struct mship_state *st, uint32_t node)
{
    if (!mship_any_absent(st) || node >= NESSIE_NODES_MAX)
        return false;
    uint64_t w = atomic_load_explicit((_Atomic uint64_t *)&st->absent[node / 64],
                                      memory_order_relaxed);
    return (w >> (node % 64)) & 1;
}

/* Whether placement may put index positions on node: it is neither absent nor fenced, unless
 * rejoining ("Rejoin": a rejoining node keeps its positions). memory/keys.c draws again around
 * every node this is false for. Never blocks. */
static inline bool mship_placed(const struct mship_state *st, uint32_t node)
{
    return !mship_absent(st, node) && !mship_lost(st, node);
}

/* Whether placement must look at the bitmaps at all: some node is fenced or absent. Two
 * relaxed loads; false for a static cluster at full capacity, always. */
static inline bool mship_any_unplaced(const struct mship_state *st)
{
    return mship_any_fenced(st) || mship_any_absent(st);
}

/* Whether any node is rejoining (a readmitting view read here, not acted on yet). Reads every
 * word of the bitmap: for the rare paths that meet an orphan, never a call's common path. */
static inline bool mship_any_rejoining(const struct mship_state *st)
{
    for (uint32_t i = 0; i < NESSIE_NODES_MAX / 64; i++)
        if (atomic_load_explicit((_Atomic uint64_t *)&st->rejoining[i], memory_order_relaxed))
            return true;
    return false;
}

/* How many times node was readmitted (see lives above). Acquire: pairs with the readmission. */
static inline uint32_t mship_lives(const struct mship_state *st, uint32_t node)
{
    return node < NESSIE_NODES_MAX
               ? atomic_load_explicit((_Atomic uint32_t *)&st->lives[node], memory_order_acquire)
               : 0;
}

/* Whether this node itself is fenced: out of the cluster, it serves nothing. Never blocks. */
static inline bool mship_self_fenced(const struct mship_state *st)
{
    return mship_fenced(st, st->self);
}

/* Whether this node serves no call: fenced, or joining (absent until a change adds it: its
 * peers do not read its memory yet, so nothing may be written there that an entry names). */
static inline bool mship_self_out(const struct mship_state *st)
{
    return mship_self_fenced(st) || (mship_absent(st, st->self) && !mship_joining(st, st->self));
}

/* Whether node is the one the last retire retired, absent but still reachable (see retired
 * above). One relaxed load. */
static inline bool mship_retired(const struct mship_state *st, uint32_t node)
{
    return atomic_load_explicit((_Atomic uint32_t *)&st->retired, memory_order_relaxed) ==
           node + 1;
}

/* Whether node's memory must not be touched: fenced, suspended or absent (but for the node an
 * add in progress adds, mship_joining, and the one the last retire retired: retired above).
 * Never blocks. */
static inline bool mship_unreachable(const struct mship_state *st, uint32_t node)
{
    if (node >= NESSIE_NODES_MAX)
        return false;
    uint64_t w = atomic_load_explicit((_Atomic uint64_t *)&st->suspended[node / 64],
                                      memory_order_relaxed);
    return ((w >> (node % 64)) & 1) || mship_fenced(st, node) ||
           (mship_absent(st, node) && !mship_joining(st, node) && !mship_retired(st, node));
}

#endif
