/*
 * view.c - a node's current view: install (epochs only increase) and consistent reads
 * (membership.h says which memory orderings and why).
 */
#include "membership.h"

#include <string.h>

int mship_init(struct mship_state *st, uint32_t self)
{
    memset(&st->view, 0, sizeof(st->view));
    atomic_init(&st->epoch, 0);
    st->self = self;
    atomic_init(&st->nfenced, 0);
    for (uint32_t i = 0; i < NESSIE_NODES_MAX / 64; i++)
        atomic_init(&st->fenced[i], 0);
    for (uint32_t i = 0; i < NESSIE_NODES_MAX / 64; i++)
        atomic_init(&st->suspended[i], 0);
    for (uint32_t i = 0; i < NESSIE_NODES_MAX / 64; i++)
        atomic_init(&st->rejoining[i], 0);
    atomic_init(&st->nabsent, 0);
    atomic_init(&st->step, 0);
    for (uint32_t i = 0; i < NESSIE_NODES_MAX / 64; i++)
        atomic_init(&st->absent[i], 0);
    memset(st->fenced_inc, 0, sizeof(st->fenced_inc));
    for (uint32_t i = 0; i < NESSIE_NODES_MAX; i++)
        atomic_init(&st->lives[i], 0);
    atomic_init(&st->fence_changes, 0);
    atomic_init(&st->readmissions, 0);
    atomic_init(&st->valid_until_ns, 0);
    return pthread_rwlock_init(&st->lock, NULL) == 0 ? NESSIE_OK : NESSIE_NO_MEMORY;
}

void mship_destroy(struct mship_state *st)
{
    pthread_rwlock_destroy(&st->lock);
}

int mship_view_check(const struct nessie_view *v)
{
    if (!v || v->epoch == 0 || v->nmembers > NESSIE_VIEW_MEMBERS_MAX)
        return NESSIE_INVALID;
    for (uint32_t i = 0; i < v->nmembers; i++) {
        const struct nessie_view_member *m = &v->members[i];
        if (m->node >= NESSIE_NODES_MAX || (i > 0 && m->node <= v->members[i - 1].node))
            return NESSIE_INVALID;
        if (m->state != NESSIE_MEMBER_LIVE && m->state != NESSIE_MEMBER_GONE)
            return NESSIE_INVALID;
    }
    return NESSIE_OK;
}

int mship_install(struct mship_state *st, const struct nessie_view *v)
{
    if (mship_view_check(v) != NESSIE_OK)
        return NESSIE_INVALID;
    pthread_rwlock_wrlock(&st->lock);
    /* Decided under the lock: two installers racing cannot both pass with different views of
     * one epoch, nor let the older land last. */
    if (v->epoch <= st->view.epoch) {
        pthread_rwlock_unlock(&st->lock);
        return NESSIE_EXISTS;
    }
    for (uint32_t i = 0; i < v->nmembers; i++) {
        const struct nessie_view_member *m = &v->members[i];
        if (m->state == NESSIE_MEMBER_LIVE && mship_fenced(st, m->node) &&
            m->incarnation <= st->fenced_inc[m->node]) {
            pthread_rwlock_unlock(&st->lock); /* a fenced life revived: see membership.h */
            return NESSIE_INVALID;
        }
    }
    bool changed = false, readmitted = false;
    for (uint32_t i = 0; i < v->nmembers; i++) {
        const struct nessie_view_member *m = &v->members[i];
        uint32_t node = m->node;
        uint64_t bit = 1ULL << (node % 64);
        if (m->state == NESSIE_MEMBER_GONE && !mship_fenced(st, node)) {
            st->fenced_inc[node] = m->incarnation;
            atomic_fetch_or_explicit(&st->fenced[node / 64], bit, memory_order_relaxed);
            atomic_fetch_add_explicit(&st->nfenced, 1, memory_order_relaxed);
            changed = true;
        } else if (m->state == NESSIE_MEMBER_LIVE && mship_fenced(st, node)) {
            /* Readmitted at a newer incarnation ("Rejoin"): its new tables are mapped anew
             * (lives), then it is reachable again. */
            atomic_fetch_add_explicit(&st->lives[node], 1, memory_order_release);
            atomic_fetch_and_explicit(&st->suspended[node / 64], ~bit, memory_order_relaxed);
            atomic_fetch_and_explicit(&st->fenced[node / 64], ~bit, memory_order_release);
            atomic_fetch_and_explicit(&st->rejoining[node / 64], ~bit, memory_order_relaxed);
            atomic_fetch_sub_explicit(&st->nfenced, 1, memory_order_relaxed);
            changed = readmitted = true;
        }
    }
    /* This node's first view: what its index holds (re-attached after a restart) was placed
     * under views it no longer knows, so its scrub makes a pass that also looks for orphans. */
    if (st->view.epoch == 0)
        changed = readmitted = true;
    if (readmitted)
        atomic_fetch_add_explicit(&st->readmissions, 1, memory_order_relaxed);
    if (changed)
        atomic_fetch_add_explicit(&st->fence_changes, 1, memory_order_release);
    st->view.epoch = v->epoch;
    st->view.nmembers = v->nmembers;
    memcpy(st->view.members, v->members, v->nmembers * sizeof(v->members[0]));
    /* Release: a lock-free reader that sees this epoch and then copies under the lock sees
     * these members (or newer). */
    atomic_store_explicit(&st->epoch, v->epoch, memory_order_release);
    pthread_rwlock_unlock(&st->lock);
    return NESSIE_OK;
}

void mship_get(struct mship_state *st, struct nessie_view *out)
{
    pthread_rwlock_rdlock(&st->lock);
    out->epoch = st->view.epoch;
    out->nmembers = st->view.nmembers;
    memcpy(out->members, st->view.members, st->view.nmembers * sizeof(out->members[0]));
    pthread_rwlock_unlock(&st->lock);
}

uint64_t mship_epoch(const struct mship_state *st)
{
    /* Acquire pairs with install's release (membership.h). The cast drops const for C11's
     * atomic_load on a const object, which some libcs reject. */
    return atomic_load_explicit((_Atomic uint64_t *)&st->epoch, memory_order_acquire);
}

void mship_renew(struct mship_state *st, uint64_t until_ns)
{
    /* Release: an attempt that reads this lease (acquire) sees the view it was renewed for. A
     * renewal older than the current end changes nothing (two readers of the service). */
    uint64_t cur = atomic_load_explicit(&st->valid_until_ns, memory_order_relaxed);
    while (until_ns > cur &&
           !atomic_compare_exchange_weak_explicit(&st->valid_until_ns, &cur, until_ns,
                                                  memory_order_release, memory_order_relaxed))
        ;
}

/* Set or clear node's absence bit, counting it in nabsent; idempotent. The caller holds the
 * lock: the bit and the count move together under it, so two callers cannot both count one
 * change; readers load them without it (see absent in membership.h). */
static void absent_locked(struct mship_state *st, uint32_t node, bool absent)
{
    uint64_t bit = 1ULL << (node % 64);
    uint64_t w = atomic_load_explicit(&st->absent[node / 64], memory_order_relaxed);
    if (absent && !(w & bit)) {
        atomic_fetch_or_explicit(&st->absent[node / 64], bit, memory_order_relaxed);
        atomic_fetch_add_explicit(&st->nabsent, 1, memory_order_relaxed);
    } else if (!absent && (w & bit)) {
        atomic_fetch_and_explicit(&st->absent[node / 64], ~bit, memory_order_relaxed);
        atomic_fetch_sub_explicit(&st->nabsent, 1, memory_order_relaxed);
    }
}

/* Placement takes a step: the change word now is `change` (0: none), and the count moves. The
 * caller holds the lock and has set the bits the step changes: release, so a plan that reads
 * the step with acquire finds them (see step in membership.h). */
static void step_locked(struct mship_state *st, uint32_t change)
{
    uint64_t cur = atomic_load_explicit(&st->step, memory_order_relaxed);
    atomic_store_explicit(&st->step, ((cur >> 32) + 1) << 32 | change, memory_order_release);
}

int mship_set_absent(struct mship_state *st, uint32_t node, bool absent)
{
    if (node >= NESSIE_NODES_MAX)
        return NESSIE_INVALID;
    pthread_rwlock_wrlock(&st->lock);
    absent_locked(st, node, absent);
    step_locked(st, mship_step_change(atomic_load_explicit(&st->step, memory_order_relaxed)));
    pthread_rwlock_unlock(&st->lock);
    return NESSIE_OK;
}

int mship_change_set(struct mship_state *st, uint32_t node, enum mship_change_kind kind,
                     enum mship_change_phase phase)
{
    if (node >= NESSIE_NODES_MAX || (kind != MSHIP_CHANGE_ADD && kind != MSHIP_CHANGE_RETIRE) ||
        (phase != MSHIP_PHASE_ANNOUNCE && phase != MSHIP_PHASE_MOVE))
        return NESSIE_INVALID;
    int rc = NESSIE_OK;
    pthread_rwlock_wrlock(&st->lock);
    uint32_t cur = mship_step_change(atomic_load_explicit(&st->step, memory_order_relaxed));
    bool absent = (atomic_load_explicit(&st->absent[node / 64], memory_order_relaxed) >>
                   (node % 64)) & 1;
    if (cur && (mship_change_node(cur) != node || mship_change_kind(cur) != kind ||
                mship_change_phase(cur) > phase))
        rc = NESSIE_INVALID; /* another change, or a phase going back */
    else if (!cur && phase != MSHIP_PHASE_ANNOUNCE)
        rc = NESSIE_INVALID; /* every change is announced first (model/elastic.pml) */
    else if (!cur && (kind == MSHIP_CHANGE_ADD ? !absent : absent))
        rc = NESSIE_INVALID;
    else {
        /* An added node is reachable from the change's start (mship_joining); its absence bit
         * stays until the commit ("Changes"). */
        if (!cur && kind == MSHIP_CHANGE_ADD &&
            atomic_load_explicit(&st->retired, memory_order_relaxed) == node + 1)
            atomic_store_explicit(&st->retired, 0, memory_order_relaxed); /* back: joining */
        if (cur != MSHIP_CHANGE_WORD(node, kind, phase))
            step_locked(st, MSHIP_CHANGE_WORD(node, kind, phase));
    }
    pthread_rwlock_unlock(&st->lock);
    return rc;
}

int mship_change_commit(struct mship_state *st)
{
    pthread_rwlock_wrlock(&st->lock);
    uint32_t cur = mship_step_change(atomic_load_explicit(&st->step, memory_order_relaxed));
    if (!cur) {
        pthread_rwlock_unlock(&st->lock);
        return NESSIE_INVALID;
    }
    /* The node's bit first, the word after with release: see "Changes". */
    absent_locked(st, mship_change_node(cur), mship_change_kind(cur) == MSHIP_CHANGE_RETIRE);
    if (mship_change_kind(cur) == MSHIP_CHANGE_RETIRE)
        atomic_store_explicit(&st->retired, mship_change_node(cur) + 1, memory_order_relaxed);
    step_locked(st, 0);
    pthread_rwlock_unlock(&st->lock);
    return NESSIE_OK;
}

void mship_suspend(struct mship_state *st, uint32_t node)
{
    if (node < NESSIE_NODES_MAX)
        atomic_fetch_or_explicit(&st->suspended[node / 64], 1ULL << (node % 64),
                                 memory_order_relaxed);
}

void mship_rejoin(struct mship_state *st, uint32_t node)
{
    if (node < NESSIE_NODES_MAX)
        atomic_fetch_or_explicit(&st->rejoining[node / 64], 1ULL << (node % 64),
                                 memory_order_relaxed);
}
