/*
 * migrate.c - MIGRATE (Appendix A.1.4): a write whose key's N index entries are all taken by other
 * keys moves one of those keys to another of its own N positions (first freeing that one, the
 * same way, down to a depth limit): a copy of its entry, linked at the destination, then the
 * source emptied, then the copy committed. A GET that meets the copy before it is committed reads
 * its source as its previous version; a copy whose migration died is taken over, or undone when
 * its source was not emptied by it (protocol.c, copy_undo and proto_takeover).
 *
 * The copy is a new entry like a write's (write.c: proto_dte_write_new, proto_memory_short,
 * proto_commit_own); the machinery every operation shares is in protocol.c, through
 * protocol_int.h.
 */
#include <string.h>

#include "memory/memory.h"
#include "protocol.h"
#include "nessie_test.h"
#include "memory/upcall.h"

static bool pos_in(uint64_t p, const uint64_t *set, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (set[i] == p)
            return true;
    return false;
}

/* protocol.h has the contract. */
enum attempt proto_take_back(struct op *op, uint64_t src, uint64_t sv, unsigned how,
                             int *status)
{
    if (attempt_expired(op)) { /* Step 0, before a CAS */
        count_abort(op, NESSIE_ABORT_TIMEOUT);
        return A_RETRY;
    }
    bool ok, clean;
    /* Another node's flash item: its key is known only there; a checker hears of its position
     * and filter bits. */
    const bool anon = (how & TAKE_FLASH) &&
                      (ite_node(sv) != op->node->cfg.self || (how & TAKE_ANON)) &&
                      nessie_evict_anon_hook;
    const uint64_t call_ns = anon ? nessie_mono_ns() : 0;
    *status = proto_ite_cas_resolve(op, src, sv, 0, &ok, &clean);
    if (anon)
        nessie_evict_anon_hook(nessie_evict_anon_user, src, ite_filter(sv),
                               *status != NESSIE_OK || (ok && !clean) ? NESSIE_TIMEOUT
                               : ok                                   ? NESSIE_OK
                                                                      : NESSIE_EXISTS,
                               call_ns);
    if (*status != NESSIE_OK)
        return A_DONE;
    if (!ok)
        return A_RETRY;
    if (how & TAKE_RECYCLE)
        nessie_recycle(op->ctx, sv);
    if (how & TAKE_LOST)
        CTR_ADD(OPC(op->ctx).lost_entries, 1);
    if (how & TAKE_FLASH)
        CTR_ADD(op->ctx->ctr.flash_dropped, 1);
    *status = NESSIE_OK;
    return A_DONE;
}

/* One attempt of nessie_swing_entry: find `from` among the key's positions and CAS it. */
static enum attempt swing_attempt(struct op *op, uint64_t from, uint64_t to, int *status)
{
    uint64_t w[NESSIE_PLAN_MAX];
    uint32_t at = op->n;
    for (uint32_t i = 0; i < op->n; i++) {
        if ((*status = ite_read(op, op->pos[i], &w[i])) != NESSIE_OK)
            return A_DONE;
        if (w[i] == from && at == op->n)
            at = i;
    }
    if (at == op->n) {
        *status = NESSIE_NOT_FOUND;
        return A_DONE;
    }
    /* A swing to nothing removes one entry: with another that may be the key's standing in
     * its positions (a duplicate a MIGRATE with a lost answer left, perhaps of an older
     * version), removing this one could let that one answer. Refused: the DELETE path clears
     * them all (A.1.3 step 4). */
    for (uint32_t j = 0; !to && j < op->n; j++)
        if (j != at && !ite_empty(w[j]) && ite_filter(w[j]) == op->filter) {
            *status = NESSIE_EXISTS;
            return A_DONE;
        }
    if (attempt_expired(op)) { /* Step 0, before a CAS */
        count_abort(op, NESSIE_ABORT_TIMEOUT);
        return A_RETRY;
    }
    bool ok, clean;
    if ((*status = proto_ite_cas_resolve(op, op->pos[at], from, to, &ok, &clean)) != NESSIE_OK) {
        /* Not even the entry could be read again: the CAS may have run. Unknown, never "no
         * effect" (the checkers would take a removal that happened for none). */
        *status = NESSIE_TIMEOUT;
        return A_DONE;
    }
    /* A lost answer and the word read back unchanged: the CAS did not run, and nothing else
     * changed the entry: try again (reporting "changed" would have a compaction free a page
     * whose record the entry still names). */
    if (!ok && !clean) {
        count_abort(op, NESSIE_ABORT_CAS_FAILED);
        return A_RETRY;
    }
    /* A lost answer and the word read back as `to`: a flash entry is unique, so a swing to one
     * ran; an empty word says nothing of who emptied it (a MIGRATE moving the key on, a
     * DELETE): unknown. */
    *status = !ok ? NESSIE_EXISTS : clean || to ? NESSIE_OK : NESSIE_TIMEOUT;
    /* And after: an entry of the key linked between the reads above and the CAS (a write that
     * took an empty position, a copy) may still answer for it: then whether the key is gone
     * is unknown. */
    for (uint32_t j = 0; !to && *status == NESSIE_OK && j < op->n; j++) {
        uint64_t w2;
        if (j != at && (ite_read(op, op->pos[j], &w2) != NESSIE_OK ||
                        (!ite_empty(w2) && ite_filter(w2) == op->filter)))
            *status = NESSIE_TIMEOUT;
    }
    return A_DONE;
}

/* memory/upcall.h has the contract. */
int nessie_swing_entry(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t from,
                       uint64_t to)
{
    enum nessie_opkind saved = ctx->kind; /* a write that evicts on its own is under way */
    struct op op;
    /* A swing to nothing removes the key: an eviction, which the checkers see as one. */
    if (!to && nessie_evict_hook)
        nessie_evict_hook(nessie_evict_hook_user, kp->key, kp->klen, false, 0);
    proto_op_init(&op, ctx, NESSIE_OPK_EVICT, kp);
    int status = NESSIE_OK;
    RUN_ATTEMPTS(&op, swing_attempt(&op, from, to, &status));
    status = proto_finish(&op, status);
    ctx->kind = saved;
    if (!to && nessie_evict_hook)
        nessie_evict_hook(nessie_evict_hook_user, kp->key, kp->klen, true, status);
    return status;
}

/*
 * MIGRATE the entry at global position src out of the way of key_pos (the N positions of the key
 * that needs room). depth counts recursion (A.1.4 step 4.2). Returns A_DONE with *status
 * NESSIE_OK (src is free, or holds the key now), A_RETRY on a concurrent operation, or A_DONE
 * with NESSIE_INDEX_FULL when the depth limit is reached.
 */
enum attempt proto_migrate(struct op *op, uint64_t src, const uint64_t *key_pos, uint32_t key_n,
                           unsigned depth, int *status)
{
    struct nessie_ctx *ctx = op->ctx;
    struct nessie_node *nd = op->node;
    enum nessie_opkind saved = ctx->kind;
    enum attempt result = A_RETRY;
    if (depth > nd->cfg.migrate_depth) {
        *status = NESSIE_INDEX_FULL;
        return A_DONE;
    }
    ctx->kind = NESSIE_OPK_MIGRATE;
    CTR_ADD(OPC(ctx).ops, 1);

    /* Step 2: read the source. */
    HOOK(op, NESSIE_HOOK_MIGRATE_START, depth);
    uint64_t sv;
    uint64_t t = nessie_mono_ns();
    if ((*status = ite_read(op, src, &sv)) != NESSIE_OK) {
        result = A_DONE;
        goto out;
    }
    if (ite_empty(sv)) { /* Step 2.1: freed meanwhile */
        *status = NESSIE_OK;
        result = A_DONE;
        goto out;
    }
    /* An entry whose value was on a node lost from the view (issue 28): the value is gone, and
     * its key cannot be read to find where it could move. Its room is taken back in place, by
     * CAS on the exact word as an eviction does (nothing to recycle: its memory is the lost
     * node's). A miss for its key, which a cache may answer at any time. */
    if (mship_lost(&nd->view, ite_node(sv))) {
        result = proto_take_back(op, src, sv, TAKE_LOST, status);
        goto out;
    }
    /* Another node's flash item (issue 31): its key, and so where it could move, is readable
     * only there. Its room is taken back in place as an eviction's: the coldest of items, as a
     * cache may drop any. This node's own is moved as any entry is (its copy in memory). */
    if (ite_is_flash(sv) && ite_node(sv) != nd->cfg.self) {
        result = proto_take_back(op, src, sv, TAKE_FLASH, status);
        goto out;
    }
    struct dte_view v;
    bool match;
    if ((*status = proto_dte_fetch(op, sv, 1, NULL, 0, false, t, &v, &match)) != NESSIE_OK) {
        result = A_DONE;
        goto out;
    }
    if (!match && v.flash_gone) {
        result = proto_take_back(op, src, sv, TAKE_RECYCLE | TAKE_FLASH | TAKE_ANON, status);
        goto out;
    }
    if (!match) {
        count_abort(op, v.stale ? NESSIE_ABORT_TIMEOUT : NESSIE_ABORT_INVALID_DTE);
        goto out;
    }
    /* Step 2.3: the key that needs room got here meanwhile. */
    if (depth == 0 && v.h.key_len == op->klen && memcmp(v.key, op->key, op->klen) == 0) {
        *status = NESSIE_OK;
        result = A_DONE;
        goto out;
    }
    /* A committed tombstone still linked: its DELETE took effect at its commit, and its step 6
     * (A.1.5: unlink the tombstone) failed or has not run yet. Taking it out by CAS on the exact
     * word is that step, done on its behalf, recycling it as the DELETE would (a second mark of
     * one entry's life, after a CAS whose answer was lost, is ignored: memory/recycle.c): the key
     * reads absent either way. Taken for an entry in progress, it was waited for until the key's
     * next write, for good if none came: a change of membership's pass stopped at it and the
     * change never ended (test_elastic). */
    if ((v.h.state & DTE_COMMITTED) && v.h.kind == DTE_KIND_TOMBSTONE) {
        result = proto_take_back(op, src, sv, TAKE_RECYCLE, status);
        goto out;
    }
    /* Step 2.4: never move an entry an operation is writing. */
    if (!dte_readable(&v.h)) {
        if (proto_is_orphan(op, sv, &v.h)) {
            *status = proto_takeover(op, src, sv, &v);
            result = *status == NESSIE_OK ? A_RETRY_NOW : A_DONE;
        } else {
            count_abort(op, NESSIE_ABORT_INVALID_DTE);
        }
        goto out;
    }
    /* Steps 3, 4: the source key's positions. The destination is one that is neither the source
     * nor one of the positions of the key that needs room; the thesis takes the first such, we
     * take the first empty one if there is one (the thesis allows any choice), which keeps
     * recursion, and so failure at the depth limit, rare. */
    unsigned char skey[NESSIE_KEY_MAX];
    uint32_t sklen = v.h.key_len;
    memcpy(skey, v.key, sklen);
    struct key_plan sp;
    key_plan_make(&sp, nd, skey, sklen);
    const uint64_t *spos = sp.pos;
    /* An orphan (issue 28, rejoin): its key no longer looks here, since the position was drawn
     * here while a node was fenced and went back to that node when a view readmitted it. Its
     * value is lost to its key; moving it to one of the key's positions would bring an older
     * value back. Its room is taken back in place, and its entry recycled. Not while a view that
     * readmits a node is read here but not acted on: nodes that have not read it yet may still
     * write the key there, under the view before, and a value taken out now and another written
     * after would be lost twice by one view change. Once the view is acted on, nobody acts under
     * the one before (membership.h, "Rejoin"): the migration tries again. */
    if (!pos_in(src, spos, sp.n)) {
        if (mship_any_rejoining(&nd->view)) {
            count_abort(op, NESSIE_ABORT_MIGRATE);
            goto out;
        }
        result = proto_take_back(op, src, sv, TAKE_RECYCLE | TAKE_LOST, status);
        goto out;
    }
    uint64_t dst = UINT64_MAX, dv = 0;
    for (uint32_t i = 0; i < sp.n; i++) {
        /* Not a position the change of membership keeps from new entries (keys.h): a copy is
         * one, for its key (model/elastic.pml, policies A and B). */
        if (spos[i] == src || pos_in(spos[i], key_pos, key_n) || ((sp.no_insert >> i) & 1))
            continue;
        uint64_t w;
        if ((*status = ite_read(op, spos[i], &w)) != NESSIE_OK) {
            result = A_DONE;
            goto out;
        }
        if (dst == UINT64_MAX || (dv != 0 && w == 0)) {
            dst = spos[i];
            dv = w;
        }
        if (dv == 0)
            break;
    }
    if (dst == UINT64_MAX) {
        *status = NESSIE_INDEX_FULL;
        result = A_DONE;
        goto out;
    }
    if (!ite_empty(dv)) {
        /* Step 4.2: free the destination first, recursively. */
        enum nessie_opkind k = ctx->kind;
        enum attempt r = proto_migrate(op, dst, spos, sp.n, depth + 1, status);
        ctx->kind = k;
        if (r != A_DONE || *status != NESSIE_OK) {
            if (r == A_RETRY)
                count_abort(op, NESSIE_ABORT_MIGRATE);
            result = r;
            goto out;
        }
    }
    /* Step 5: a copy of the source, invalid. Its previous version is the source itself, so a GET
     * that meets the copy before the migration finishes reads the (same) value there. */
    struct dte_view full;
    if ((*status = proto_dte_fetch(op, sv, 1, skey, sklen, true, t, &full, &match)) != NESSIE_OK) {
        result = A_DONE;
        goto out;
    }
    if (!match || full.stale || !dte_readable(&full.h)) {
        count_abort(op, full.stale ? NESSIE_ABORT_TIMEOUT : NESSIE_ABORT_INVALID_DTE);
        goto out;
    }
    struct dte_hdr tmpl = full.h;
    tmpl.prev_ite = sv;
    tmpl.flags8 = DTE_F_COPY | (full.h.flags8 & (DTE_F_PLACED | DTE_F_META)); /* the same item, moved */
    uint64_t copy;
    /* The copy keeps its source's creator: it is that write's item, moved, and must never be
     * mistaken for an entry of the call that happens to migrate it. */
    *status = proto_dte_write_new(op, &tmpl, full.h.creator, skey, full.value, full.h.value_len,
                                  NULL, 0, sp.filter, &copy);
    /* No room for the copy: the write that needs the move waits for room as for its own entry
     * (it failed at once with NO_MEMORY, a SET refused on a cache with eviction on). An
     * eviction does not wait (it moves nothing: it never inserts). */
    if (*status == NESSIE_NO_MEMORY && saved != NESSIE_OPK_EVICT &&
        proto_memory_short(op, sklen, full.h.value_len))
        goto out; /* result is A_RETRY */
    if (*status != NESSIE_OK) {
        result = A_DONE;
        goto out;
    }
    /* Step 6: point the (empty) destination at the copy. */
    HOOK(op, NESSIE_HOOK_MIGRATE_BEFORE_DST, 0);
    bool ok = false, clean;
    if (attempt_expired(op)) {
        proto_dte_free_unpublished(op, copy);
        count_abort(op, NESSIE_ABORT_TIMEOUT);
        goto out;
    }
    *status = proto_ite_cas_resolve(op, dst, 0, copy, &ok, &clean);
    if (*status != NESSIE_OK || !ok) {
        if (clean) {
            proto_dte_free_unpublished(op, copy); /* never visible: free at once */
        } else {
            /* Perhaps linked (the outcome was lost and the entry could not be read again), or
             * linked and cleared since: abandon it, so that a takeover empties its ITE instead
             * of committing it, and let it through quarantine; if it is linked, whoever takes
             * it over recycles it once more, which a mark naming its life makes harmless. */
            uint64_t old;
            proto_dte_state_cas(op, copy, dte_state(ite_gen(copy), DTE_BUSY),
                                dte_state(ite_gen(copy), DTE_BUSY | DTE_ABANDONED), &old);
            if (*status == NESSIE_OK)
                nessie_recycle(ctx, copy);
        }
        if (*status != NESSIE_OK) {
            result = A_DONE;
        } else {
            count_abort(op, NESSIE_ABORT_CAS_FAILED);
        }
        goto out;
    }
    HOOK(op, NESSIE_HOOK_MIGRATE_AFTER_DST, 0);
    /* Step 0 before step 7, as before every CAS: a migration delayed past the period since its
     * source was read must not empty it. Past the grace, a GET may have met the copy as an
     * orphan and undone it (the source still linked: protocol.c, copy_undo); emptying the
     * source then would leave the item in neither place (issue 26, finding 1). The copy is
     * undone here as when step 7's CAS fails, and the migration tried again. */
    bool expired = attempt_expired(op);
    if (expired) {
        ok = false;
        *status = NESSIE_OK;
        clean = true;
    } else {
        /* Step 7: empty the source. If it changed, undo the destination (paper 4.3.1,
         * "aborting migration"): the copy was visible, so it is recycled, not freed. */
        *status = proto_ite_cas_resolve(op, src, sv, 0, &ok, &clean);
    }
    if (*status != NESSIE_OK) {
        /* Whether the source is empty is unknown: the copy stays as it is, uncommitted. A
         * takeover undoes it after the grace period (protocol.c, copy_undo): the move did not
         * happen if the source is still linked, and the item is lost, as to an eviction told
         * to the checkers, if it is not. Readers of the copy read the source as its previous
         * version meanwhile. */
        result = A_DONE;
        goto out;
    }
    /* The CAS's answer was lost and the source reads empty. That says nothing of who emptied
     * it: this CAS, or a DELETE (or any write) of the key that replaced the source and unlinked
     * its own entry meanwhile, and committing the copy then brought a removed item back
     * (test_migration_source_cas_lost_after_delete). Left uncommitted for a takeover, the copy
     * would block the key for a grace period. Undone instead, as when the CAS fails: the key
     * is absent after, which is right if a DELETE emptied the source and is an eviction if
     * this CAS did (a cache may lose an item to a fault, as to memory; a removed one must never
     * come back). Reported as an eviction whose effect is unknown. */
    bool lost = *status == NESSIE_OK && ok && !clean;
    if (lost) {
        if (nessie_evict_hook)
            nessie_evict_hook(nessie_evict_hook_user, skey, sklen, false, 0);
        ok = false;
    }
    if (!ok) {
        bool cleared;
        uint64_t old;
        /* Abandon the copy first so no takeover can commit it once it is unlinked. */
        proto_dte_state_cas(op, copy, dte_state(ite_gen(copy), DTE_BUSY),
                            dte_state(ite_gen(copy), DTE_BUSY | DTE_ABANDONED), &old);
        if (proto_ite_cas_resolve(op, dst, copy, 0, &cleared, &clean) == NESSIE_OK && cleared)
            nessie_recycle(ctx, copy);
        if (lost) {
            /* Unlinked by this CAS or by the write that emptied the source, which recycles it
             * too: a second mark of the same life is harmless. */
            nessie_recycle(ctx, sv);
            CTR_ADD(ctx->ctr.moves_undone, 1);
            if (nessie_evict_hook)
                nessie_evict_hook(nessie_evict_hook_user, skey, sklen, true, NESSIE_TIMEOUT);
        }
        count_abort(op, expired ? NESSIE_ABORT_TIMEOUT : NESSIE_ABORT_CAS_FAILED);
        goto out;
    }
    /* Step 8: the copy is valid. Step 9: the source's DTE is recycled. */
    bool committed;
    if ((*status = proto_commit_own(op, copy, &committed)) != NESSIE_OK) {
        /* The source is out of the index and the copy not committed: a takeover undoes the
         * copy after the grace period, an eviction it tells the checkers of (copy_undo). The
         * source is its previous version until then (the leak sweep recycles it after). */
        result = A_DONE;
        goto out;
    }
    if (!committed) {
        /* Undone by a takeover between the Step 0 check and step 7's CAS (the migration was
         * descheduled for longer than the grace in those few instructions): the source is out
         * of the index and the copy abandoned, so the item is gone, as to an eviction, and is
         * reported as one whose effect is unknown. The source is ours to recycle (we unlinked
         * it); the copy is the takeover's. */
        if (nessie_evict_hook) {
            nessie_evict_hook(nessie_evict_hook_user, skey, sklen, false, 0);
            nessie_evict_hook(nessie_evict_hook_user, skey, sklen, true, NESSIE_TIMEOUT);
        }
        CTR_ADD(ctx->ctr.moves_undone, 1);
        nessie_recycle(ctx, sv);
        count_abort(op, NESSIE_ABORT_TIMEOUT);
        goto out;
    }
    nessie_recycle(ctx, sv);
    /* Counted here, when an entry has moved: attempts that abort show in the MIGRATE counters. */
    CTR_ADD(ctx->ctr.migrations, 1);
    if (depth > 0)
        CTR_ADD(ctx->ctr.recursive_migrations, 1);
    *status = NESSIE_OK;
    result = A_DONE;
out:
    ctx->kind = saved;
    return result;
}
