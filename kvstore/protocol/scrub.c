/*
 * scrub.c - entries a view change left behind, taken out of this node's index (issue 28).
 *
 * Lost entries. A node fenced by the view (membership/membership.h) leaves entries behind in
 * every survivor's index: words naming DTEs in its data region, whose values are lost. Calls read
 * them as misses (protocol.c, proto_dte_fetch) and a write that needs the slot takes it back
 * (migrate.c), but until then each holds an index slot: after losing one node of three, a third
 * of the entries of every survivor's index. After the fence no index entry naming a fenced
 * node's data is made again: a write links its own node's data, a migration empties a lost
 * source instead of copying it, and a takeover or an abandoning writer never links a lost
 * previous version again (protocol.c, write.c). So once a pass that started after the fence is
 * over, this node's index names nothing of the lost node: what a rejoin waits for.
 *
 * Orphans. A readmission (membership.h, "Rejoin") gives the returning node back the positions
 * that were drawn elsewhere while it was fenced; the entries written there meanwhile are orphans:
 * their keys no longer look there. Nothing reads them under the new view (and a migration that
 * meets one takes it out instead of moving it: migrate.c), but a later fence of the same node
 * would draw the same positions again and find them, older than what was written since; so the
 * pass after a readmission also reads every entry's key and takes out those not at one of their
 * key's positions, and its end is what such a fence waits for.
 *
 * Each entry is taken out by CAS on the exact word read, as the migration's lost branch and an
 * eviction do, so a word that changed meanwhile is left alone. A lost entry's memory is the lost
 * node's (nothing to recycle); an orphan's DTE is recycled.
 */
#include <stdatomic.h>

#include "memory/memory.h"
#include "protocol.h"
#include "nessie_test.h"

/* Whether the entry w at this node's slot s is an orphan: its key's positions under the current
 * view do not include the slot. Reads its DTE (a READ, on any node). Returns NESSIE_OK and sets
 * *orphan, or the fetch's error (the entry is then left for a later pass). */
static int scrub_is_orphan(struct op *op, uint64_t pos, uint64_t w, bool *orphan)
{
    struct dte_view v;
    bool match;
    *orphan = false;
    /* Another node's flash item (issue 31) has a key only that node can read: after a change
     * it cannot be judged here, and an orphan left in the index could answer for its key
     * again once the key looks here anew. Taken out, as an eviction; so is one of this node's
     * whose record is gone. */
    if (ite_is_flash(w) && ite_node(w) != op->node->cfg.self) {
        *orphan = true;
        return NESSIE_OK;
    }
    int rc = proto_dte_fetch(op, w, 1, NULL, 0, false, nessie_mono_ns(), &v, &match);
    if (rc == NESSIE_OK && !match && v.flash_gone) {
        *orphan = true;
        return NESSIE_OK;
    }
    if (rc != NESSIE_OK || !match || v.h.key_len == 0)
        return rc; /* not readable as an entry with a key now (stale, in flux): left alone */
    uint64_t kp[NESSIE_PLAN_MAX];
    uint32_t n = nessie_key_plan_positions(op->node, v.key, v.h.key_len, kp);
    for (uint32_t i = 0; i < n; i++)
        if (kp[i] == pos)
            return NESSIE_OK;
    *orphan = true;
    return NESSIE_OK;
}

/* Judge the entry at this node's index slot s and take it out if it is lost (its data on a fenced
 * node) or, when orphans is set, an orphan. Adds what it took out to *cleared. Returns true when
 * the slot is done, false when the pass must stop at it for now (the view's lease is over, a
 * readmission is pending, or the entry could not be read): the next run starts there again. */
static bool scrub_slot(struct nessie_ctx *ctx, uint64_t s, bool orphans, size_t *cleared)
{
    struct nessie_node *nd = ctx->node;
    const uint64_t pos = (uint64_t)nd->cfg.self * nd->cfg.index_slots + s;
    uint64_t w;
    if (fab_local_read(nd->fab, FAB_REGION_INDEX, s * 8, &w, sizeof(w)) != FAB_OK)
        return false;
    bool lost = !ite_empty(w) && mship_lost(&nd->view, ite_node(w));
    if (ite_empty(w) || (!lost && !orphans))
        return true;
    const struct key_plan none = {.key = NULL};
    struct op op;
    proto_op_init(&op, ctx, NESSIE_OPK_EVICT, &none);
    op.attempt_start = nessie_mono_ns();
    /* "Acting on a view": a CAS only while the view is known current. The scrub never waits
     * for a renewal (proto_view_gate would). Orphans are judged only under a view acted on: not
     * while one that readmits a node is read but not acted on here (migrate.c says why). */
    if (!proto_view_current(&op) || (!lost && mship_any_rejoining(&nd->view))) {
        proto_finish(&op, NESSIE_FABRIC_ERROR);
        return false;
    }
    bool orphan = false;
    int rc = lost ? NESSIE_OK : scrub_is_orphan(&op, pos, w, &orphan);
    if (rc != NESSIE_OK) {
        proto_finish(&op, rc);
        /* Not judged (a fabric error): the pass must not end without it. An entry whose data is
         * on a node a view is about to fence is passed over instead: once fenced it is lost,
         * which the next pass takes out, and the fence may itself be waiting for this pass
         * (reception/members.c, adopt). */
        return mship_unreachable(&nd->view, ite_node(w));
    }
    if (!lost && !orphan) {
        proto_finish(&op, NESSIE_NOT_FOUND);
        return true;
    }
    bool ok = false, clean;
    const uint64_t call_ns = nessie_mono_ns();
    rc = proto_ite_cas_resolve(&op, pos, w, 0, &ok, &clean);
    /* A flash item taken out: its key may be unknown here (another node's, or gone). */
    if (ite_is_flash(w) && nessie_evict_anon_hook)
        nessie_evict_anon_hook(nessie_evict_anon_user, pos, ite_filter(w),
                               rc != NESSIE_OK || (ok && !clean) ? NESSIE_TIMEOUT
                               : ok                              ? NESSIE_OK
                                                                 : NESSIE_EXISTS,
                               call_ns);
    if (rc == NESSIE_OK && ok) {
        if (orphan)
            nessie_recycle(ctx, w);
        CTR_ADD(OPC(ctx).lost_entries, 1);
        (*cleared)++;
    }
    proto_finish(&op, rc != NESSIE_OK ? rc : ok ? NESSIE_OK : NESSIE_EXISTS);
    return true;
}

size_t nessie_scrub_run(struct nessie_ctx *ctx, size_t scan_slots)
{
    struct nessie_node *nd = ctx->node;
    if (mship_self_fenced(&nd->view))
        return 0;
    /* One whole pass per change of the fence, from when this node first runs after it. */
    uint32_t ch = atomic_load_explicit(&nd->view.fence_changes, memory_order_acquire);
    if (ch == atomic_load_explicit(&nd->scrub_done, memory_order_relaxed))
        return 0; /* no change, or its pass is over: one load a run */
    uint64_t cursor = atomic_load_explicit(&nd->scrub_cursor, memory_order_relaxed);
    if (ch != atomic_load_explicit(&nd->scrub_changes, memory_order_relaxed)) {
        atomic_store_explicit(&nd->scrub_changes, ch, memory_order_relaxed);
        uint32_t rd = atomic_load_explicit(&nd->view.readmissions, memory_order_relaxed);
        /* Orphans are looked for by a pass after a readmission, and by every pass that starts
         * before such a pass is over. */
        if (atomic_exchange_explicit(&nd->scrub_readmissions, rd, memory_order_relaxed) != rd)
            atomic_store_explicit(&nd->scrub_orphans, true, memory_order_relaxed);
        atomic_store_explicit(&nd->scrub_end, cursor + nd->cfg.index_slots, memory_order_relaxed);
    }
    const uint64_t end = atomic_load_explicit(&nd->scrub_end, memory_order_relaxed);
    bool orphans = atomic_load_explicit(&nd->scrub_orphans, memory_order_relaxed);
    enum nessie_opkind saved = ctx->kind; /* called from a thread that may be mid-call: evict.c */
    size_t cleared = 0;
    for (size_t i = 0; i < scan_slots; i++, cursor++) {
        if (cursor >= end) { /* the pass is over */
            atomic_store_explicit(&nd->scrub_orphans, false, memory_order_relaxed);
            atomic_store_explicit(&nd->scrub_done, ch, memory_order_release);
            break;
        }
        if (!scrub_slot(ctx, cursor % nd->cfg.index_slots, orphans, &cleared))
            break;
    }
    atomic_store_explicit(&nd->scrub_cursor, cursor, memory_order_relaxed);
    ctx->kind = saved;
    return cleared;
}

uint32_t nessie_scrub_done(const struct nessie_node *nd)
{
    return atomic_load_explicit((_Atomic uint32_t *)&nd->scrub_done, memory_order_acquire);
}
