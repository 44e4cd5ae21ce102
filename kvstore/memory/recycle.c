/*
 * recycle.c - giving entries back (A.1.3 step 7): a finished call's replaced entries are marked
 * recycled, at once or staged for the recycler thread (nessie_recycle_run), and their owner
 * quarantines the slots for an expiration period before reuse; the leak sweep finds entries that
 * no call will ever give back (their writer died or lost track of them) and marks them after two
 * sweeps a grace period apart.
 */
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#include "log.h"
#include "flash.h"
#include "memory.h"

/*
 * Mark the DTE ite names recycled (A.1.3 step 7): set RECYCLED in its state word with a CAS that
 * names the life ite names, so a late or repeated mark can never end a later life of the slot.
 * Its owner starts its quarantine when it sees the mark. Returns true when the entry is marked
 * now (by this call or before it) or is no longer in that life; false on a fabric error (the
 * caller tries again later).
 */
static bool mark_recycled(struct nessie_ctx *ctx, uint64_t ite)
{
    /* The usual case first: a committed entry that an operation replaced. */
    uint64_t expect = dte_state(ite_gen(ite), DTE_BUSY | DTE_COMMITTED);
    /* Our own entry: the mark carries its time on our clock, so its quarantine starts now
     * rather than when the scan first sees it (a scan sooner). */
    uint64_t when = ite_node(ite) == ctx->node->cfg.self ? (nessie_mono_ms() + 1) << DTE_MARK_SHIFT
                                                         : 0;
    /* On a node lost from the view (issue 28): its memory is out of the cluster, nothing of it
     * is ours to recycle, and a mark would only fail at the fabric run after run. */
    if (mship_lost(&ctx->node->view, ite_node(ite)))
        return true;
    for (int tries = 0; tries < 8; tries++) {
        uint64_t old = 0;
        if (nessie_state_cas(ctx->ep, ite, expect, expect | DTE_RECYCLED | when, &old) !=
            NESSIE_OK)
            return false;
        if (old == expect) {
            CTR_ADD(ctx->ctr.marked, 1);
            if (when)
                slab_quarantine(&ctx->node->slab, ite_class(ite), ite_offset(ite), ite_gen(ite));
            return true;
        }
        if (dte_gen(old) != ite_gen(ite) || !(old & DTE_BUSY) || (old & DTE_RECYCLED))
            return true; /* marked already, or that life is over */
        expect = old;    /* another state of the same life (uncommitted, abandoned): mark it */
    }
    return true; /* its state keeps changing: it is not ours to end (the leak sweep decides) */
}

/* Put ite on the stage (the recycler marks it). Returns false if it could not be staged. */
static bool stage(struct nessie_ctx *ctx, uint64_t ite)
{
    struct nessie_node *nd = ctx->node;
    pthread_mutex_lock(&nd->stage_lock);
    if (nd->nstage == nd->stage_cap) {
        size_t cap = nd->stage_cap ? nd->stage_cap * 2 : 1024;
        uint64_t *p = realloc(nd->stage, cap * sizeof(*p));
        if (p) {
            nd->stage = p;
            nd->stage_cap = cap;
        }
    }
    bool staged = nd->nstage < nd->stage_cap;
    if (staged)
        nd->stage[nd->nstage++] = ite;
    pthread_mutex_unlock(&nd->stage_lock);
    return staged;
}

void nessie_recycle(struct nessie_ctx *ctx, uint64_t ite)
{
    if (ite_empty(ite))
        return;
    /* A flash item (issue 31) has no slot to mark: this node's own record is unlinked, so its
     * page's live bytes go down at once. Another node's is left to that node, whose compaction
     * moves only records the index still names and whose full log drops the oldest pages. */
    if (ite_is_flash(ite)) {
        struct nessie_node *nd = ctx->node;
        if (ite_node(ite) == nd->cfg.self && nd->flash)
            (void)flash_unlink(nd->flash, ite_flash_loc(ite));
        return;
    }
    if (ctx->node->cfg.background_recycle && stage(ctx, ite)) {
        CTR_ADD(ctx->ctr.staged, 1);
        return;
    }
    /* A mark that cannot be made now (a peer unreachable) is staged for the recycler to retry;
     * if even that fails the entry is left to the leak sweep. */
    if (!mark_recycled(ctx, ite) && !stage(ctx, ite))
        log_warn("engine: cannot mark DTE %016llx recycled; left to the leak sweep",
                 (unsigned long long)ite);
}

size_t nessie_recycle_run(struct nessie_ctx *ctx, size_t scan_slots)
{
    struct nessie_node *nd = ctx->node;
    size_t done = 0;
    nessie_clock_publish(nd);
    /* Take the whole staged batch under the lock, mark it outside (marks may be fabric CASes).
     * Marks that fail (their node unreachable) go back on the stage for the next run. */
    pthread_mutex_lock(&nd->stage_lock);
    uint64_t *batch = nd->stage;
    size_t n = nd->nstage;
    nd->stage = NULL;
    nd->nstage = nd->stage_cap = 0;
    pthread_mutex_unlock(&nd->stage_lock);
    for (size_t i = 0; i < n; i++) {
        if (mark_recycled(ctx, batch[i]))
            done++;
        else if (!stage(ctx, batch[i]))
            log_warn("engine: cannot stage DTE %016llx again; left to the leak sweep",
                     (unsigned long long)batch[i]);
    }
    free(batch);
    size_t freed = slab_scan(&nd->slab, scan_slots, nessie_mono_ms());
    CTR_ADD(ctx->ctr.freed, freed);
    return done + freed;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct sweep_scan {
    struct nessie_node *nd;
    GArray *candidates; /* ITE words naming entries that look unreferenced */
    uint64_t now_ns;
};

/* A slot that is in use, not marked, and older than the grace period: a candidate. */
static void sweep_slot(void *arg, uint32_t cls, uint64_t off)
{
    struct sweep_scan *sc = arg;
    struct dte_hdr h;
    fab_local_read(sc->nd->fab, FAB_REGION_DATA, off, &h, sizeof(h));
    if (!(h.state & DTE_BUSY) || (h.state & DTE_RECYCLED))
        return; /* free, or on its way back */
    if (h.created_ns + sc->nd->bound.grace_ns > sc->now_ns)
        return; /* may belong to an operation still running */
    uint64_t ite = ite_make(sc->nd->cfg.self, cls, off, dte_gen(h.state), 0);
    g_array_append_val(sc->candidates, ite);
}

/*
 * Whether anything may still use the entry ite names: an ITE at one of its key's positions (every
 * entry of a key is linked only there: PUTs, DELETEs and MIGRATE copies alike) names it, or names
 * an uncommitted entry whose previous version it is. Reads only those N positions (and their
 * entries), so a sweep needs only the nodes that hold them: returns 1 (referenced), 0 (not), or
 * -1 when a node it needs is unreachable (undecided: it stays, and is looked at next time).
 */
static int sweep_referenced(struct nessie_ctx *ctx, uint64_t ite)
{
    struct nessie_node *nd = ctx->node;
    unsigned char hk[DTE_HDR_SIZE + NESSIE_KEY_MAX];
    fab_local_read(nd->fab, FAB_REGION_DATA, ite_offset(ite), hk, sizeof(struct dte_hdr));
    struct dte_hdr h;
    memcpy(&h, hk, sizeof(h));
    if (h.key_len == 0 || h.key_len > NESSIE_KEY_MAX ||
        ite_offset(ite) + DTE_HDR_SIZE + h.key_len > nd->cfg.data_bytes)
        return 0; /* no key: it was never published whole */
    fab_local_read(nd->fab, FAB_REGION_DATA, ite_offset(ite) + DTE_HDR_SIZE, hk + DTE_HDR_SIZE,
                   h.key_len);
    uint64_t pos[NESSIE_PLAN_MAX];
    uint32_t n = nessie_key_plan_positions(nd, hk + DTE_HDR_SIZE, h.key_len, pos);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t w;
        if (nessie_ite_read_pos(ctx->ep, nd, pos[i], &w) != NESSIE_OK)
            return -1;
        if (ite_empty(w))
            continue;
        if (ite_same_entry(w, ite))
            return 1;
        if (ite_class(w) >= nd->nclasses)
            continue;
        uint64_t hdr[3]; /* state, quarantine, prev ITE */
        struct fab_wr rh = {.opcode = FAB_OP_READ, .node = ite_node(w), .region = FAB_REGION_DATA,
                            .offset = ite_offset(w), .local = hdr, .length = sizeof(hdr)};
        if (fab_exec(ctx->ep, &rh) != FAB_OK)
            return -1;
        if (!(hdr[0] & DTE_COMMITTED) && !ite_empty(hdr[2]) && ite_same_entry(hdr[2], ite))
            return 1;
    }
    return 0;
}

long nessie_sweep_leaks(struct nessie_ctx *ctx)
{
    struct nessie_node *nd = ctx->node;
    uint64_t now = nessie_mono_ns();
    pthread_mutex_lock(&nd->sweep_lock);
    if (nd->sweep_prev_ns && now - nd->sweep_prev_ns < nd->bound.grace_ns) {
        pthread_mutex_unlock(&nd->sweep_lock);
        return 0; /* too soon to confirm anything */
    }
    GArray *cand = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    struct sweep_scan sc = {.nd = nd, .candidates = cand, .now_ns = now};
    slab_for_each_slot(&nd->slab, sweep_slot, &sc);
    /* Confirm: unreferenced now, and already at the previous sweep, a grace period ago (the same
     * life of the slot: the generation is in the word). */
    GArray *keep = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    long marked = 0, undecided = 0;
    for (guint i = 0; i < cand->len; i++) {
        uint64_t ite = g_array_index(cand, uint64_t, i);
        int ref = sweep_referenced(ctx, ite);
        if (ref != 0) {
            undecided += ref < 0;
            continue;
        }
        if (nd->sweep_prev &&
            bsearch(&ite, nd->sweep_prev, nd->nsweep_prev, sizeof(uint64_t), cmp_u64)) {
            if (mark_recycled(ctx, ite))
                marked++;
        } else {
            g_array_append_val(keep, ite);
        }
    }
    g_free(nd->sweep_prev);
    nd->nsweep_prev = keep->len;
    nd->sweep_prev = (uint64_t *)g_array_free(keep, FALSE); /* NULL when empty */
    if (nd->nsweep_prev)
        qsort(nd->sweep_prev, nd->nsweep_prev, sizeof(uint64_t), cmp_u64);
    nd->sweep_prev_ns = now;
    CTR_ADD(ctx->ctr.swept, (uint64_t)marked);
    if (marked)
        log_info("engine: node %u: recycled %ld leaked data table entries", nd->cfg.self, marked);
    if (undecided)
        log_info("engine: node %u: %ld entries left for the next sweep (a node they need is "
                 "unreachable)", nd->cfg.self, undecided);
    g_array_free(cand, TRUE);
    pthread_mutex_unlock(&nd->sweep_lock);
    return marked;
}
