/*
 * scrub.c - a lost node's entries taken out of this node's index (issue 28).
 *
 * A node fenced by the view (membership/membership.h) leaves entries behind in every survivor's
 * index: words naming DTEs in its data region, whose values are lost. Calls read them as misses
 * (protocol.c, proto_dte_fetch) and a write that needs the slot takes it back (migrate.c), but
 * until then each holds an index slot: after losing one node of three, a third of the entries of
 * every survivor's index. The scrub walks this node's own index in the background (the daemon's
 * recycler) and empties them, each by CAS on the exact word it read, as the migration's lost
 * branch and an eviction do, so a word that changed meanwhile is left alone. Nothing is
 * recycled: the memory they name is the lost node's.
 *
 * After the fence no index entry naming a fenced node's data is made again: a write links its
 * own node's data, a migration empties a lost source instead of copying it (migrate.c), and a
 * takeover or an abandoning writer never links a lost previous version again (protocol.c,
 * write.c). So once the scrub has passed over the whole index after the fence is in force, this
 * node's index names nothing of the lost node; a rejoin (not built yet) needs that of every
 * survivor before the lost node may come back with new tables.
 */
#include <stdatomic.h>

#include "memory/memory.h"
#include "protocol.h"

size_t nessie_scrub_run(struct nessie_ctx *ctx, size_t scan_slots)
{
    struct nessie_node *nd = ctx->node;
    if (!mship_any_fenced(&nd->view) || mship_self_fenced(&nd->view))
        return 0;
    const uint64_t slots = nd->cfg.index_slots, base = (uint64_t)nd->cfg.self * slots;
    /* One whole pass per fence, from when this node first runs after it: entries naming a fenced
     * node are never made again (see the top), so a finished pass leaves none. */
    uint32_t nf = atomic_load_explicit(&nd->view.nfenced, memory_order_relaxed);
    uint32_t was = atomic_load_explicit(&nd->scrub_fenced, memory_order_relaxed);
    if (nf != was && atomic_compare_exchange_strong_explicit(&nd->scrub_fenced, &was, nf,
                                                             memory_order_relaxed,
                                                             memory_order_relaxed))
        atomic_store_explicit(&nd->scrub_end,
                              atomic_load_explicit(&nd->scrub_cursor, memory_order_relaxed) + slots,
                              memory_order_relaxed);
    enum nessie_opkind saved = ctx->kind; /* called from a thread that may be mid-call: evict.c */
    size_t cleared = 0;
    for (size_t i = 0; i < scan_slots; i++) {
        uint64_t at = atomic_fetch_add_explicit(&nd->scrub_cursor, 1, memory_order_relaxed);
        if (at >= atomic_load_explicit(&nd->scrub_end, memory_order_relaxed)) {
            atomic_fetch_sub_explicit(&nd->scrub_cursor, 1, memory_order_relaxed);
            break; /* the pass is over */
        }
        uint64_t s = at % slots, w;
        if (fab_local_read(nd->fab, FAB_REGION_INDEX, s * 8, &w, sizeof(w)) != FAB_OK)
            break;
        if (ite_empty(w) || !mship_fenced(&nd->view, ite_node(w)))
            continue;
        const struct key_plan none = {.key = NULL};
        struct op op;
        proto_op_init(&op, ctx, NESSIE_OPK_EVICT, &none);
        op.attempt_start = nessie_mono_ns();
        /* "Acting on a view": a CAS only while the view is known current. The scrub never waits
         * for a renewal (proto_view_gate would): the next run goes on from this slot. */
        uint64_t until = mship_valid_until(&nd->view);
        if (until != 0 && op.attempt_start + nd->bound.period_ns > until) {
            atomic_fetch_sub_explicit(&nd->scrub_cursor, 1, memory_order_relaxed);
            proto_finish(&op, NESSIE_FABRIC_ERROR);
            break;
        }
        bool ok = false, clean;
        int rc = proto_ite_cas_resolve(&op, base + s, w, 0, &ok, &clean);
        if (rc == NESSIE_OK && ok) {
            CTR_ADD(OPC(ctx).lost_entries, 1);
            cleared++;
        }
        proto_finish(&op, rc != NESSIE_OK ? rc : ok ? NESSIE_OK : NESSIE_EXISTS);
    }
    ctx->kind = saved;
    return cleared;
}
