/*
 * move.c - the mover (issue 30): a change of membership's leaving entries in this node's index,
 * migrated to their keys' arriving positions.
 *
 * While a change is in progress every plan is the union T of the placements before and after
 * (memory/keys.h), and in its move phase no new entry goes to a leaving position (the insert
 * policies). So one pass over this node's index, once nothing can put an entry at a leaving
 * position any more, finds every leaving entry there is; each is MIGRATEd to one of its key's
 * arriving positions (migrate.c, with the key's positions before the change as those it must not
 * take), forward in every reader's pass, so a GET meets the source or, once it is out, the copy
 * (model/elastic.pml). After every member's pass, nothing of any key is at a position the
 * placement after the change does not read, and the change can be committed.
 *
 * When the pass may start is the caller's to judge (membership.h, "Changes"): V + F after this
 * node first read the move phase, no attempt under the announce phase's policy is in flight
 * anywhere; one attempt's span later (E + F), neither is any attempt that ran alongside one
 * (model/elastic.pml, BUG_MOVER_ONE_WAIT: such a PUT can commit ahead of a copy the mover made
 * behind it). The pass stops at an entry it cannot judge yet (in progress, unreadable) and starts
 * there again on the next run: passing over a leaving entry would lose it at the commit. An entry
 * with no room at any arriving position (or no memory for its copy, eviction off) is evicted
 * instead (counted: move_evicted), so a full cache cannot hold a change up for good.
 *
 * A MIGRATE writes its copy into the migrating node's own data region, so an add's moves fill the
 * nodes that already hold the values: the copies and the evictions they cause are the price of
 * moving on the old owners (issue 30 step S8 ships them to the added node).
 */
#include <stdatomic.h>
#include <string.h>

#include "memory/memory.h"
#include "memory/upcall.h"
#include "log.h"
#include "protocol.h"

/* MIGRATE attempts per slot within one run before the pass stops there for now (a concurrent
 * writer of the key keeps winning): the next run starts at the slot again. */
#define MOVE_TRIES 4

/* When a warning that the mover evicted with eviction off was last logged (any node of this
 * process: a rate limit, nessie_every). */
static _Atomic uint64_t move_warned;

/* Take a duplicate's room back at pos if it still holds w. Returns whether it did. */
static bool take_back_dup(struct nessie_ctx *ctx, uint64_t pos, uint64_t w)
{
    const struct key_plan none = {.key = NULL};
    struct op op;
    proto_op_init(&op, ctx, NESSIE_OPK_EVICT, &none);
    op.attempt_start = nessie_mono_ns();
    int status = NESSIE_FABRIC_ERROR;
    enum attempt r = A_DONE;
    if (proto_view_current(&op))
        r = proto_take_back(&op, pos, w, true, &status);
    proto_finish(&op, r == A_DONE ? status : NESSIE_EXISTS);
    return r == A_DONE && status == NESSIE_OK;
}

/* Judge the entry at this node's index slot s and move it if it is leaving for its key. Adds to
 * *moved. Returns true when the slot is done, false when the pass must stop at it for now. */
static bool move_slot(struct nessie_ctx *ctx, uint64_t s, size_t *moved)
{
    struct nessie_node *nd = ctx->node;
    const uint64_t pos = (uint64_t)nd->cfg.self * nd->cfg.index_slots + s;
    for (int tries = 0; tries < MOVE_TRIES; tries++) {
        uint64_t w;
        if (fab_local_read(nd->fab, FAB_REGION_INDEX, s * 8, &w, sizeof(w)) != FAB_OK)
            return false;
        /* Empty, or lost (its value was on a fenced node: the scrub's to take out). */
        if (ite_empty(w) || mship_lost(&nd->view, ite_node(w)))
            return true;
        const struct key_plan none = {.key = NULL};
        struct op op;
        proto_op_init(&op, ctx, NESSIE_OPK_MIGRATE, &none);
        op.attempt_start = nessie_mono_ns();
        if (!proto_view_current(&op)) {
            proto_finish(&op, NESSIE_FABRIC_ERROR);
            return false;
        }
        struct dte_view v;
        bool match;
        int rc = proto_dte_fetch(&op, w, 1, NULL, 0, false, nessie_mono_ns(), &v, &match);
        if (rc != NESSIE_OK || !match || v.h.key_len == 0) {
            proto_finish(&op, rc != NESSIE_OK ? rc : NESSIE_EXISTS);
            continue; /* changed under us, or in flux: read the slot again */
        }
        unsigned char key[NESSIE_KEY_MAX];
        uint32_t klen = v.h.key_len;
        memcpy(key, v.key, klen);
        struct key_plan kp;
        key_plan_make(&kp, nd, key, klen);
        uint32_t at = kp.n;
        for (uint32_t i = 0; i < kp.n; i++)
            if (kp.pos[i] == pos)
                at = i;
        if (at == kp.n || kp.role[at] != KEY_LEAVING) {
            /* Staying (or an orphan: the scrub's). */
            proto_finish(&op, NESSIE_NOT_FOUND);
            return true;
        }
        /* The positions the copy must not take: every one but the arriving ones. */
        uint64_t keep[NESSIE_PLAN_MAX];
        uint32_t nkeep = 0;
        for (uint32_t i = 0; i < kp.n; i++)
            if (kp.role[i] != KEY_ARRIVING)
                keep[nkeep++] = kp.pos[i];
        int status = NESSIE_OK;
        /* Moved: a copy committed at depth 0 (an OK also says the source was gone already). */
        const uint64_t m0 = ctx->ctr.migrations - ctx->ctr.recursive_migrations;
        enum attempt r = proto_migrate(&op, pos, keep, nkeep, 0, &status);
        proto_finish(&op, r == A_DONE ? status : NESSIE_EXISTS);
        if (r == A_DONE && status == NESSIE_OK) {
            /* The slot is empty now, or holds what replaced the entry meanwhile: judged again. */
            *moved += ctx->ctr.migrations - ctx->ctr.recursive_migrations != m0;
            continue;
        }
        if (r == A_DONE && (status == NESSIE_INDEX_FULL || status == NESSIE_NO_MEMORY)) {
            /* No room for it: its arriving positions are full and nothing there could move
             * within the depth, or no memory for the copy with eviction off (with it on, the
             * MIGRATE made room and retried). Waiting would stop the pass for good, and the
             * change with it; a cache makes room by evicting, so the entry is evicted as the
             * evictor evicts (memory/upcall.h: a DELETE of exactly this word, linearizable),
             * and the slot judged again. */
            int er = nessie_evict_entry(ctx, &kp, w);
            /* NOT_FOUND: the key's first entry is elsewhere, so this one is a duplicate no
             * reader meets (a write's step 4 would clear it): its room is taken back in place. */
            if (er == NESSIE_OK || (er == NESSIE_NOT_FOUND && take_back_dup(ctx, pos, w))) {
                CTR_ADD(ctx->ctr.move_evicted, 1);
                if (nd->cfg.no_evict && nessie_every(&move_warned, NESSIE_SETTING_WARN_EVERY_NS))
                    log_warn("move: node %u: an entry leaving for the node a change of membership "
                             "adds found no room there and was evicted, though eviction is off "
                             "(the change must end; more index_slots or data_bytes avoid it)",
                             nd->cfg.self);
            }
            continue;
        }
        if (r == A_DONE)
            return false; /* a fabric error: the next run tries again */
    }
    return false;
}

size_t nessie_move_run(struct nessie_ctx *ctx, size_t scan_slots)
{
    struct nessie_node *nd = ctx->node;
    /* The step, not the change word: an add, a retire and an add again of one node have the
     * same words, and each move phase owes its own pass. */
    uint64_t step = mship_step(&nd->view);
    uint32_t change = mship_step_change(step);
    if (!change || mship_change_phase(change) != MSHIP_PHASE_MOVE || mship_self_fenced(&nd->view))
        return 0;
    if (step == atomic_load_explicit(&nd->move_done, memory_order_relaxed))
        return 0; /* this change's pass is over: one load a run */
    uint64_t cursor = atomic_load_explicit(&nd->move_cursor, memory_order_relaxed);
    if (step != atomic_load_explicit(&nd->move_step, memory_order_relaxed)) {
        atomic_store_explicit(&nd->move_step, step, memory_order_relaxed);
        atomic_store_explicit(&nd->move_end, cursor + nd->cfg.index_slots, memory_order_relaxed);
    }
    const uint64_t end = atomic_load_explicit(&nd->move_end, memory_order_relaxed);
    enum nessie_opkind saved = ctx->kind;
    size_t moved = 0;
    for (size_t i = 0; i < scan_slots; i++, cursor++) {
        if (cursor >= end) {
            atomic_store_explicit(&nd->move_done, step, memory_order_release);
            break;
        }
        if (!move_slot(ctx, cursor % nd->cfg.index_slots, &moved))
            break;
    }
    atomic_store_explicit(&nd->move_cursor, cursor, memory_order_relaxed);
    atomic_fetch_add_explicit(&nd->moved, moved, memory_order_relaxed);
    ctx->kind = saved;
    return moved;
}

bool nessie_move_over(const struct nessie_node *nd)
{
    uint64_t step = mship_step(&nd->view);
    uint32_t change = mship_step_change(step);
    return change && mship_change_phase(change) == MSHIP_PHASE_MOVE &&
           atomic_load_explicit((_Atomic uint64_t *)&nd->move_done, memory_order_acquire) == step;
}

uint64_t nessie_moved(const struct nessie_node *nd)
{
    return atomic_load_explicit((_Atomic uint64_t *)&nd->moved, memory_order_relaxed);
}

uint64_t nessie_move_left(const struct nessie_node *nd)
{
    uint64_t step = mship_step(&nd->view);
    uint32_t change = mship_step_change(step);
    if (!change || mship_change_phase(change) != MSHIP_PHASE_MOVE || nessie_move_over(nd))
        return 0;
    if (step != atomic_load_explicit((_Atomic uint64_t *)&nd->move_step, memory_order_relaxed))
        return nd->cfg.index_slots;
    uint64_t end = atomic_load_explicit((_Atomic uint64_t *)&nd->move_end, memory_order_relaxed);
    uint64_t cur = atomic_load_explicit((_Atomic uint64_t *)&nd->move_cursor, memory_order_relaxed);
    return end > cur ? end - cur : 0;
}
