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
 * A retire (model/retire.pml) moves more: the retired node r writes nothing new from the retire's
 * announce on (R1), so it moves nothing itself. Each survivor relocates the entries of its own
 * index that name r's data (relocate_slot: a committed copy in its own data swung in by CAS on
 * the exact word), then moves its share of r's index entries remotely, as an add's mover moves
 * its own (every position on r is leaving). The pass's end is the survivor's ack of the move
 * phase, and the commit comes after every survivor's; r stays reachable until the commit is acted
 * on, since nodes that have not read it still plan on r's index (the daemon waits V + F).
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

/* Begin one step of a pass (a slot's judgement) as an operation of no key: its attempt starts
 * now, under the view lease as every attempt's does. Returns false (the operation finished) when
 * the lease has run out: the pass stops there for now. */
static bool pass_op(struct nessie_ctx *ctx, struct op *op)
{
    const struct key_plan none = {.key = NULL};
    proto_op_init(op, ctx, NESSIE_OPK_MIGRATE, &none);
    op->attempt_start = nessie_mono_ns();
    if (proto_view_current(op))
        return true;
    proto_finish(op, NESSIE_FABRIC_ERROR);
    return false;
}

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
        r = proto_take_back(&op, pos, w, TAKE_RECYCLE, &status);
    proto_finish(&op, r == A_DONE ? status : NESSIE_EXISTS);
    return r == A_DONE && status == NESSIE_OK;
}

/* Take the flash entry w out of position pos for a pass (an eviction: another node's, whose key
 * only it can read, or one whose record is gone), ending op. Returns true when the slot is done
 * with (*status NESSIE_OK: taken out; else an error, and the pass stops there for now), false
 * when the slot changed meanwhile and is to be read again. */
static bool move_take_flash(struct op *op, uint64_t pos, uint64_t w, unsigned how, int *status)
{
    *status = NESSIE_OK;
    enum attempt a = proto_take_back(op, pos, w, TAKE_FLASH | how, status);
    proto_finish(op, a == A_DONE ? *status : NESSIE_EXISTS);
    return a == A_DONE;
}

/* Judge the entry at index position pos (this node's, or for a retire the retired node's) and
 * move it if it is leaving for its key. Adds to *moved. Returns true when the slot is done, false
 * when the pass must stop at it for now. */
static bool move_slot(struct nessie_ctx *ctx, uint64_t pos, size_t *moved)
{
    struct nessie_node *nd = ctx->node;
    for (int tries = 0; tries < MOVE_TRIES; tries++) {
        struct op op;
        if (!pass_op(ctx, &op))
            return false;
        uint64_t w;
        if (ite_read(&op, pos, &w) != NESSIE_OK) {
            proto_finish(&op, NESSIE_FABRIC_ERROR);
            return false;
        }
        /* Empty, or lost (its value was on a fenced node: the scrub's to take out). */
        if (ite_empty(w) || mship_lost(&nd->view, ite_node(w))) {
            proto_finish(&op, NESSIE_OK);
            return true;
        }
        /* Another node's flash item (issue 31): whether it leaves is known only to a reader
         * of its key, which only its node is. Taken out, as an eviction (the coldest of
         * items); this node's own are moved as any entry (their copies in memory). */
        if (ite_is_flash(w) && ite_node(w) != nd->cfg.self) {
            int st;
            if (move_take_flash(&op, pos, w, 0, &st))
                return st == NESSIE_OK;
            continue; /* changed under us: read the slot again */
        }
        struct dte_view v;
        bool match;
        int rc = proto_dte_fetch(&op, w, 1, NULL, 0, false, nessie_mono_ns(), &v, &match);
        if (rc == NESSIE_OK && v.flash_gone) {
            if (move_take_flash(&op, pos, w, TAKE_RECYCLE | TAKE_ANON, &rc))
                return rc == NESSIE_OK;
            continue;
        }
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

bool proto_retiring_data(const struct nessie_node *nd, uint32_t node)
{
    if (node == nd->cfg.self)
        return false;
    uint32_t w = mship_change(&nd->view);
    if (w && mship_change_kind(w) == MSHIP_CHANGE_RETIRE && mship_change_node(w) == node)
        return true;
    return mship_retired(&nd->view, node);
}

int proto_retire_copy(struct op *op, uint64_t w, uint64_t *copy)
{
    const uint64_t t = nessie_mono_ns();
    struct dte_view v, full;
    bool match;
    int rc = proto_dte_fetch(op, w, 1, NULL, 0, false, t, &v, &match);
    if (rc != NESSIE_OK)
        return rc;
    if (!match || v.h.key_len == 0 || !dte_readable(&v.h))
        return NESSIE_EXISTS;
    unsigned char key[NESSIE_KEY_MAX];
    const uint32_t klen = v.h.key_len;
    memcpy(key, v.key, klen);
    if ((rc = proto_dte_fetch(op, w, 1, key, klen, true, t, &full, &match)) != NESSIE_OK)
        return rc;
    if (!match || full.stale || !dte_readable(&full.h))
        return NESSIE_EXISTS;
    struct dte_hdr tmpl = full.h;
    tmpl.prev_ite = 0;
    tmpl.flags8 = full.h.flags8 & ~DTE_F_COPY; /* committed at once: never a copy to undo */
    rc = proto_dte_write_new(op, &tmpl, full.h.creator, key, full.value, full.h.value_len, NULL,
                             0, ite_filter(w), copy);
    if (rc != NESSIE_OK)
        return rc;
    bool committed = false;
    if (proto_commit_own(op, *copy, &committed) != NESSIE_OK || !committed)
        return NESSIE_TIMEOUT; /* linked nowhere: the leak sweep takes it */
    return NESSIE_OK;
}

/* The relocation of the entry at this node's index slot s (a retire's move phase, on a
 * survivor; model/retire.pml): an entry naming the retired node r's data gets a copy of its
 * value in this node's data (proto_retire_copy), committed before it is linked, and the exact
 * word read is swung to it by CAS, so it is committed at once: a reader meets the one or the
 * other, both valid, and a writer that read the old word loses its CAS and starts again. The
 * pass stops at an entry in progress that names r's data, or whose previous version does (its
 * writer may roll back to it: RPASS in the model), until it is over, taking it over if its writer
 * is gone; and at an unreadable one: the next run starts there again. A committed tombstone
 * naming r's data (a DELETE whose unlink failed) is taken out, which it stands for. With no
 * memory for the copy the entry is evicted, as the mover does. Adds to *moved; returns true when
 * the slot is done. */
static bool relocate_slot(struct nessie_ctx *ctx, uint32_t r, uint64_t s, size_t *moved)
{
    struct nessie_node *nd = ctx->node;
    const uint64_t pos = (uint64_t)nd->cfg.self * nd->cfg.index_slots + s;
    for (int tries = 0; tries < MOVE_TRIES; tries++) {
        uint64_t w;
        if (fab_local_read(nd->fab, FAB_REGION_INDEX, s * 8, &w, sizeof(w)) != FAB_OK)
            return false;
        if (ite_empty(w) || mship_lost(&nd->view, ite_node(w)))
            return true;
        struct op op;
        if (!pass_op(ctx, &op))
            return false;
        /* A flash item (issue 31) of the retired node: its log leaves with it, and nobody else
         * can read it: taken out, as an eviction. Another node's is not r's: nothing to do. */
        if (ite_is_flash(w) && ite_node(w) != nd->cfg.self) {
            if (ite_node(w) != r) {
                proto_finish(&op, NESSIE_OK);
                return true;
            }
            int st;
            if (move_take_flash(&op, pos, w, 0, &st))
                return st == NESSIE_OK;
            continue;
        }
        struct dte_view v;
        bool match;
        int rc = proto_dte_fetch(&op, w, 1, NULL, 0, false, nessie_mono_ns(), &v, &match);
        if (rc == NESSIE_OK && v.flash_gone) {
            if (move_take_flash(&op, pos, w, TAKE_RECYCLE | TAKE_ANON, &rc))
                return rc == NESSIE_OK;
            continue;
        }
        if (rc != NESSIE_OK) {
            proto_finish(&op, rc);
            return false;
        }
        if (!match) {
            proto_finish(&op, NESSIE_EXISTS);
            continue; /* changed under us: read the slot again */
        }
        const bool names_r = ite_node(w) == r;
        if (!(v.h.state & DTE_COMMITTED)) {
            if (!names_r && (ite_empty(v.h.prev_ite) || ite_node(v.h.prev_ite) != r)) {
                proto_finish(&op, NESSIE_OK);
                return true; /* in progress, but neither it nor what it may roll back to is r's */
            }
            if (proto_is_orphan(&op, w, &v.h)) {
                /* Its writer is gone: the takeover commits it, or links its previous version
                 * again (a copy, if that is r's: proto_retiring_data); judged again. */
                rc = proto_takeover(&op, pos, w, &v);
                proto_finish(&op, rc);
                if (rc != NESSIE_OK)
                    return false;
                continue;
            }
            proto_finish(&op, NESSIE_EXISTS);
            return false; /* in progress: the pass stops here for now */
        }
        if (!names_r) {
            proto_finish(&op, NESSIE_OK);
            return true;
        }
        if (v.h.kind == DTE_KIND_TOMBSTONE) {
            int status = NESSIE_OK;
            enum attempt a = proto_take_back(&op, pos, w, TAKE_RECYCLE, &status);
            proto_finish(&op, a == A_DONE ? status : NESSIE_EXISTS);
            if (a == A_DONE && status != NESSIE_OK)
                return false;
            continue;
        }
        uint64_t copy;
        rc = proto_retire_copy(&op, w, &copy);
        if (rc == NESSIE_NO_MEMORY) {
            proto_finish(&op, rc);
            unsigned char key[NESSIE_KEY_MAX]; /* the fetch buffer is the eviction's too */
            memcpy(key, v.key, v.h.key_len);
            struct key_plan kp;
            key_plan_make(&kp, nd, key, v.h.key_len);
            int er = nessie_evict_entry(ctx, &kp, w);
            /* NOT_FOUND: a duplicate no reader meets; its room is taken back in place. */
            if (er == NESSIE_OK || (er == NESSIE_NOT_FOUND && take_back_dup(ctx, pos, w)))
                CTR_ADD(ctx->ctr.move_evicted, 1);
            continue;
        }
        if (rc == NESSIE_EXISTS) {
            proto_finish(&op, rc);
            continue;
        }
        if (rc != NESSIE_OK) {
            proto_finish(&op, rc);
            return false;
        }
        if (attempt_expired(&op)) { /* Step 0, before a CAS */
            proto_dte_free_unpublished(&op, copy);
            proto_finish(&op, NESSIE_TIMEOUT);
            continue;
        }
        bool ok = false, clean = true;
        rc = proto_ite_cas_resolve(&op, pos, w, copy, &ok, &clean);
        if (rc == NESSIE_OK && ok) {
            nessie_recycle(ctx, w); /* r's entry: unlinked by us */
            proto_finish(&op, NESSIE_OK);
            (*moved)++;
            return true;
        }
        if (rc == NESSIE_OK && clean) {
            proto_dte_free_unpublished(&op, copy); /* never visible */
            proto_finish(&op, NESSIE_EXISTS);
            continue;
        }
        /* Unknown whether the copy is linked: it is committed, so either way is right; if it is
         * not linked, the leak sweep takes it. The slot is judged again on the next run. */
        proto_finish(&op, NESSIE_FABRIC_ERROR);
        return false;
    }
    return false;
}

/* This node's share of a retire's pass over the retired node r's index: the slots s with s mod
 * k = its rank among the k survivors (the placed nodes but r), so each slot has one mover. */
static bool retire_share(const struct nessie_node *nd, uint32_t r, uint64_t s)
{
    uint32_t k = 0, rank = 0;
    for (uint32_t i = 0; i < nd->cfg.node_ids; i++) {
        if (i == r || !mship_placed(&nd->view, i))
            continue;
        if (i == nd->cfg.self)
            rank = k;
        k++;
    }
    return k && s % k == rank;
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
    const bool retire = mship_change_kind(change) == MSHIP_CHANGE_RETIRE;
    const uint32_t r = mship_change_node(change);
    if (retire && r == nd->cfg.self) {
        /* R1: the retired node moves nothing (a copy would be new data of its own); the
         * survivors move its index and relocate its values. */
        atomic_store_explicit(&nd->move_done, step, memory_order_release);
        return 0;
    }
    /* An add: one pass over this node's index. A retire: one over this node's index, relocating
     * what names r's data, then one over this node's share of r's index (retire_share). */
    const uint64_t slots = nd->cfg.index_slots, span = retire ? 2 * slots : slots;
    uint64_t cursor = atomic_load_explicit(&nd->move_cursor, memory_order_relaxed);
    if (step != atomic_load_explicit(&nd->move_step, memory_order_relaxed)) {
        cursor = 0;
        atomic_store_explicit(&nd->move_step, step, memory_order_relaxed);
        atomic_store_explicit(&nd->move_end, span, memory_order_relaxed);
    }
    const uint64_t end = atomic_load_explicit(&nd->move_end, memory_order_relaxed);
    enum nessie_opkind saved = ctx->kind;
    size_t moved = 0;
    for (size_t i = 0; i < scan_slots; i++, cursor++) {
        if (cursor >= end) {
            atomic_store_explicit(&nd->move_done, step, memory_order_release);
            break;
        }
        bool done;
        if (!retire)
            done = move_slot(ctx, (uint64_t)nd->cfg.self * slots + cursor, &moved);
        else if (cursor < slots)
            done = relocate_slot(ctx, r, cursor, &moved);
        else
            done = !retire_share(nd, r, cursor - slots) ||
                   move_slot(ctx, (uint64_t)r * slots + (cursor - slots), &moved);
        if (!done)
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
        return mship_change_kind(change) == MSHIP_CHANGE_RETIRE ? 2 * nd->cfg.index_slots
                                                                : nd->cfg.index_slots;
    uint64_t end = atomic_load_explicit((_Atomic uint64_t *)&nd->move_end, memory_order_relaxed);
    uint64_t cur = atomic_load_explicit((_Atomic uint64_t *)&nd->move_cursor, memory_order_relaxed);
    return end > cur ? end - cur : 0;
}
