/*
 * get.c - GET (Appendix A.1.2) and multi-get: a forward pass over the key's N index entries, with
 * the paper's filter bits, ITE-keyed cache, previous versions and multiple reads (section 4.3),
 * and, when the key is met nowhere, the reverse pass (protocol.c, proto_end_absent). A multi-get
 * posts the first READ of many GETs as one batch and runs each GET on from its read-ahead.
 *
 * The machinery every operation shares (a call's state, the counted fabric accesses, fetching an
 * entry, orphans and their takeover, a call's end) is in protocol.c, through protocol_int.h.
 */
#include "memory/demote.h"
#include "memory/memory.h"
#include "protocol.h"

/* Whether the source src of a migration's copy met at I_i is still linked: at one of
 * I_{i+1}..I_n (one in front of the copy would have been met first). Sets *linked. Returns
 * NESSIE_OK or NESSIE_FABRIC_ERROR. */
static int source_linked(struct op *op, uint32_t i, uint64_t src, bool *linked)
{
    *linked = false;
    for (uint32_t j = i + 1; j < op->n && !*linked; j++) {
        uint64_t ite;
        int rc = ite_read(op, op->pos[j], &ite);
        if (rc != NESSIE_OK)
            return rc;
        *linked = ite == src;
    }
    return NESSIE_OK;
}

static void item_out(const struct dte_view *v, struct nessie_item *out)
{
    out->value = v->h.value_len ? v->value : NULL;
    out->value_len = v->h.value_len;
    out->flags = v->h.flags;
    out->exptime = v->h.exptime;
    out->version = v->h.version;
    out->access = v->h.access;
    out->meta = (v->h.flags8 & DTE_F_META) >> DTE_F_META_SHIFT;
}

/*
 * Promotion (issue 31): the flash item of entry fite, met at I_i and read whole into v by a GET
 * that answers with it, is brought back into memory: a copy in this node's data, committed before
 * it is linked, swung in by CAS on the exact word read (a retire's relocation, move.c, with a
 * flash record as its source). A reader meets the flash entry or the copy, the same value and
 * version; a writer that read the flash entry loses its CAS and starts again; a reader whose
 * record is unlinked and its page freed later finds it gone and reads the key again (demote.c).
 * The record is unlinked only when the swing is known to have happened: a writer that swung the
 * entry out owns its unlink (and one that abandons its write links the flash entry back). Best
 * effort, and never waits: no room, a retire, a lost race, a late attempt leave the item on
 * flash, and the GET's answer is the same either way (it was linearized at its read).
 */
static void promote(struct op *op, uint32_t i, uint64_t fite, const struct dte_view *v)
{
    struct dte_hdr tmpl = v->h;
    tmpl.prev_ite = 0;
    tmpl.flags8 = v->h.flags8 & ~DTE_F_COPY; /* committed at once: never a copy to undo */
    uint64_t copy;
    if (proto_dte_write_new(op, &tmpl, op->id, v->key, v->value, v->h.value_len, NULL, 0,
                            ite_filter(fite), &copy) != NESSIE_OK)
        return;
    /* Read now, and once before: the evictor must not see a new item nobody read (its version
     * is old, so it is not young either), or the hot item it was demoted for would be its next
     * victim. Written before the copy is visible, in this node's memory. */
    uint32_t a = dte_acc_make(nessie_acc_tick(), NESSIE_ACC_INIT + 1, true);
    fab_local_write(op->node->fab, FAB_REGION_DATA, ite_offset(copy) + DTE_OFF_ACCESS, &a,
                    sizeof(a));
    bool committed = false;
    if (proto_commit_own(op, copy, &committed) != NESSIE_OK || !committed)
        return; /* linked nowhere: the leak sweep takes it */
    HOOK(op, NESSIE_HOOK_PROMOTE_BEFORE_CAS, i);
    if (attempt_expired(op)) { /* Step 0, before a CAS */
        proto_dte_free_unpublished(op, copy);
        return;
    }
    bool ok = false, clean = true;
    int rc = proto_ite_cas_resolve(op, op->pos[i], fite, copy, &ok, &clean);
    if (rc == NESSIE_OK && ok) {
        nessie_recycle(op->ctx, fite); /* the record: unlinked by us */
        CTR_ADD(op->ctx->ctr.flash_promoted, 1);
    } else if (rc == NESSIE_OK && clean) {
        proto_dte_free_unpublished(op, copy); /* never visible */
    }
    /* Else unknown whether the copy is linked: it is committed, so either way is right; if it
     * is not, the leak sweep takes it. The record is left live, as a demotion's unknown swing
     * leaves its own: it counts in extstore_objects_used until its page is compacted (which
     * finds the entry changed) or dropped. */
}

static enum attempt get_attempt(struct op *op, struct nessie_item *out, int *status)
{
    struct nessie_node *nd = op->node;
    struct dte_view v;
    for (uint32_t i = 0; i < op->n; i++) {
        if (attempt_expired(op)) {
            count_abort(op, NESSIE_ABORT_TIMEOUT);
            return A_RETRY;
        }
        /* Step 2: read I_i (I_1 may have been read ahead, in a multi-get's batch). */
        uint64_t ite;
        uint64_t t = nessie_mono_ns();
        if (i == 0 && op->pre_valid) {
            ite = op->pre_ite;
            t = op->pre_t;
            op->pre_valid = false;
        } else if ((*status = ite_read(op, op->pos[i], &ite)) != NESSIE_OK) {
            return A_DONE;
        }
        op->seen[i] = ite;
        HOOK(op, NESSIE_HOOK_GET_ITE_READ, i);
        /* Steps 2.1, 2.2: empty, or filter bits say it cannot be this key. */
        if (ite_empty(ite) || ite_filter(ite) != op->filter)
            continue;
        /* Step 2.3: the DTE, from memory, the cache, or remotely. */
        enum attempt end;
        int is_key = proto_fetch_key(op, op->pos[i], ite, true, t, &v, status, &end);
        if (is_key < 0)
            return end;
        if (!is_key)
            continue;
        /* Step 2.4: valid: the answer. Expired or flushed: the key is absent. */
        EXPIRED_RETRY(op);
        if (dte_readable(&v.h)) {
            if (nessie_item_dead_at(nd, &v.h, t)) {
                *status = NESSIE_NOT_FOUND;
            } else {
                item_out(&v, out);
                nessie_access_record(op->ctx, ite, v.h.access, v.cached);
                if (ite_is_flash(ite)) {
                    CTR_ADD(op->ctx->ctr.flash_hits, 1);
                    if (demote_promote_wanted(nd, ite))
                        promote(op, i, ite, &v);
                }
                *status = NESSIE_OK;
            }
            return A_DONE;
        }
        if ((v.h.state & DTE_COMMITTED) && v.h.kind == DTE_KIND_TOMBSTONE) {
            *status = NESSIE_NOT_FOUND; /* a finished DELETE whose last CAS is on its way */
            return A_DONE;
        }
        if (proto_is_orphan(op, ite, &v.h)) {
            if ((*status = proto_takeover(op, op->pos[i], ite, &v)) != NESSIE_OK)
                return A_DONE;
            return A_RETRY_NOW;
        }
        /* Step 2.5: an operation is writing this key; its predecessor is still valid for one
         * expiration period from our read of I_i (previous versions, paper 4.3.2). A
         * migration's copy is the exception: its predecessor is its source, the key's value
         * only while the source is still in the index (a DELETE may have taken it out before
         * the copy was linked: test_get_ignores_copy_of_deleted_source). */
        bool prev_ok = true;
        if ((v.h.flags8 & DTE_F_COPY) && !nd->cfg.no_prev_versions &&
            (*status = source_linked(op, i, v.h.prev_ite, &prev_ok)) != NESSIE_OK)
            return A_DONE;
        if (!nd->cfg.no_prev_versions && !ite_empty(v.h.prev_ite) && prev_ok) {
            struct dte_view pv;
            bool pmatch;
            *status = proto_dte_fetch(op, v.h.prev_ite, 1, op->key, op->klen, true, t, &pv,
                                      &pmatch);
            /* Another node's flash item: read there (the call goes to it), unless this run
             * is one that may not go anywhere: then the write in progress is waited for. */
            if (*status == NESSIE_ELSEWHERE && op->ctx->flash_take) {
                *status = NESSIE_OK;
                pmatch = false;
            }
            if (*status != NESSIE_OK)
                return A_DONE;
            EXPIRED_RETRY(op);
            if (pmatch && !pv.stale && dte_readable(&pv.h)) {
                CTR_ADD(OPC(op->ctx).prev_version_hits, 1);
                if (nessie_item_dead_at(nd, &pv.h, t)) {
                    *status = NESSIE_NOT_FOUND;
                } else {
                    item_out(&pv, out);
                    nessie_access_record(op->ctx, v.h.prev_ite, pv.h.access, pv.cached);
                    *status = NESSIE_OK;
                }
                return A_DONE;
            }
        }
        count_abort(op, NESSIE_ABORT_INVALID_DTE);
        return A_RETRY;
    }
    /* Step 3: not found in the forward pass; a migration may have moved it behind us. */
    HOOK(op, NESSIE_HOOK_GET_BEFORE_REVERSE, 0);
    return proto_end_absent(op, NESSIE_NOT_FOUND, status);
}

int proto_get(struct nessie_ctx *ctx, const struct key_plan *kp, void *buf, size_t cap,
              struct nessie_item *out)
{
    struct op op;
    proto_op_init(&op, ctx, NESSIE_OPK_GET, kp);
    op.dst = buf;
    op.dst_cap = cap;
    int status = NESSIE_OK;
    RUN_ATTEMPTS(&op, get_attempt(&op, out, &status));
    return proto_finish(&op, status);
}

/*
 * Multi-get: the first step of up to MULTI_WINDOW GETs (the READ of each key's I_1) is posted
 * as one batch, so those READs are in flight together; each GET then goes on from its own
 * read-ahead, with its Step 0 timer started before the batch was posted, so an early read can
 * only make an attempt expire sooner, never let a stale view through.
 */
#define MULTI_WINDOW 32

int proto_get_multi(struct nessie_ctx *ctx, size_t n, const void *const *keys, const size_t *lens,
                    void *const *bufs, const size_t *caps, nessie_multi_fn done, void *user)
{
    for (size_t base = 0; base < n; base += MULTI_WINDOW) {
        size_t m = n - base < MULTI_WINDOW ? n - base : MULTI_WINDOW;
        struct op ops[MULTI_WINDOW];
        struct key_plan plans[MULTI_WINDOW];
        struct fab_wr wrs[MULTI_WINDOW];
        bool ok[MULTI_WINDOW];
        size_t nwr = 0;
        uint64_t t0 = nessie_mono_ns();
        for (size_t i = 0; i < m; i++) {
            ok[i] = key_check(keys[base + i], lens[base + i]) == NESSIE_OK;
            if (!ok[i])
                continue;
            key_plan_make(&plans[i], ctx->node, keys[base + i], lens[base + i]);
            proto_op_init(&ops[i], ctx, NESSIE_OPK_GET, &plans[i]);
            ops[i].pre_t = t0;
            if (bufs) {
                ops[i].dst = bufs[base + i];
                ops[i].dst_cap = bufs[base + i] ? caps[base + i] : 0;
            }
            wrs[nwr++] = (struct fab_wr){
                .wr_id = i, .opcode = FAB_OP_READ,
                .node = (uint32_t)ite_node_of_pos(ctx->node, ops[i].pos[0]),
                .region = FAB_REGION_INDEX, .offset = ite_off_of_pos(ctx->node, ops[i].pos[0]),
                .local = &ops[i].pre_ite, .length = 8};
        }
        /* All in flight at once; a batch the endpoint cannot take (or a failed read) just
         * leaves those GETs to read I_1 themselves. */
        bool batched = nwr && fab_post(ctx->ep, wrs, nwr) == FAB_OK;
        if (batched) {
            CTR_ADD(OPC(ctx).ite_reads, nwr);
            CTR_ADD(OPC(ctx).bytes_read, 8 * nwr);
            for (size_t got = 0; got < nwr;) {
                struct fab_wc wc[MULTI_WINDOW];
                int k = fab_poll(ctx->ep, wc, MULTI_WINDOW);
                for (int j = 0; j < k; j++)
                    ops[wc[j].wr_id].pre_valid = wc[j].status == FAB_OK;
                got += (size_t)(k > 0 ? k : 0);
            }
        }
        for (size_t i = 0; i < m; i++) {
            struct nessie_item it = {0};
            if (!ok[i]) {
                done(user, base + i, NESSIE_BAD_KEY, NULL);
                continue;
            }
            struct op *op = &ops[i];
            ctx->kind = NESSIE_OPK_GET;
            /* Its budget starts now, not when the batch was posted: the keys before it may have
             * taken a while (one slow key must not time out the rest of the batch). */
            uint64_t now = nessie_mono_ns();
            op->deadline = now + ctx->node->bound.budget_ns;
            /* Its traffic: its own, and its one READ of the shared batch. */
            op_traffic_mark(op);
            if (batched) {
                op->fab_ops0 -= 1;
                op->fab_bytes0 -= 8;
            }
            int status = NESSIE_OK;
            RUN_ATTEMPTS(op, get_attempt(op, &it, &status));
            done(user, base + i, proto_finish(op, status), status == NESSIE_OK ? &it : NULL);
        }
    }
    return NESSIE_OK;
}
