/*
 * write.c - PUT and its conditional and read-modify-write forms (Appendix A.1.3: set, add,
 * replace, cas, append, prepend, incr, decr, touch), DELETE (A.1.5) and the evictor's DELETE of
 * one chosen entry; and the new entries they and a MIGRATE's copy are written into: room for them
 * (waiting for it, evicting for it), writing one, freeing one never published, and the writer's
 * last step, its commit. What the appendix leaves open for writes (conditions judged at the
 * candidate's CAS, absent keys, adopting an earlier attempt's entry, abandoning a published entry
 * on a fabric error) is decided as protocol.c's opening comment says.
 *
 * The machinery every operation shares is in protocol.c, through protocol_int.h; MIGRATE, which a
 * write calls when the key's N entries are all taken by other keys, is in migrate.c.
 */
#include <string.h>

#include "arith.h"
#include "memory/memory.h"
#include "memory/upcall.h"
#include "log.h"
#include "protocol.h"

enum wmode {
    W_SET, W_ADD, W_REPLACE, W_CAS, W_APPEND, W_PREPEND, W_INCR, W_DECR, W_TOUCH, W_DELETE,
    W_INVALIDATE, /* meta md I: the item kept, marked stale, a new version */
    W_TOKEN,      /* meta's win: the item kept as it is, its token taken */
    W_EVICT, /* a DELETE by the evictor: only if the key's entry is still exactly the victim */
};

/* What a write call asks for and gets back. */
struct wreq {
    enum wmode mode;
    const void *val;
    uint32_t vlen;
    uint32_t flags;
    uint32_t exptime;
    uint64_t cas;     /* W_CAS; W_DELETE, W_INCR, W_DECR: the version required (0: any) */
    uint64_t delta;
    uint64_t version_out;
    uint64_t num_out;
    uint64_t victim;  /* W_EVICT: the exact ITE word the key's first entry must hold */
    uint32_t meta;    /* NESSIE_META_* for the new item (and, with W_CAS, STALE: see build_new) */
    bool set_exptime; /* W_INVALIDATE: exptime is the new expiry */
};

static bool rec_push(struct op *op, uint64_t ite)
{
    if (op->nrec == NESSIE_MAX_REC) {
        log_warn("protocol: recycle list of one call is full; an entry is left to the leak sweep");
        return false;
    }
    op->rec[op->nrec++] = ite;
    return true;
}

/* --- new entries (A.1.3 steps 3 and 6, A.1.4 steps 5 and 8) ---------------------------------- */

/* Whether a new DTE of these sizes, which found no free entry, will find one once recycled entries
 * of its size class expire. */
static bool memory_pending(struct op *op, uint32_t key_len, uint32_t value_len)
{
    struct nessie_node *nd = op->node;
    int cls = slab_class_for(&nd->slab, dte_size(key_len, value_len));
    return cls >= 0 && slab_pending(&nd->slab, (uint32_t)cls);
}

/* A write that finds its node full evicts this many of its class's items on its own (the
 * background evictor normally keeps ahead), and may wait for their slots beyond its budget for
 * the call bound's W (engine.c, bound_compute): one period for the slots' quarantine, the rest
 * for a page of another class to drain when its size class has no page (slab_drain). */
#define EVICT_INLINE 8

/* A write found no room for a new entry of key_len + value_len bytes (its own, or a MIGRATE's
 * copy that makes room for it in the index). With eviction on: wake the evictor, and unless
 * slots are on their way back evict a few of the class's items now (or a page of another
 * class's); freed slots come back one expiration period after they are unlinked, so the call
 * waits, and may wait that long beyond its own budget: a SET is not refused for lack of memory
 * while eviction is on. With eviction off, the call waits only for replaced entries already
 * waiting out their period (writers are paced by recycling). Returns true if the caller should
 * retry (the wait is counted), false if the write fails for lack of memory. */
bool proto_memory_short(struct op *op, uint32_t key_len, uint32_t value_len)
{
    struct nessie_node *nd = op->node;
    int cls = slab_class_for(&nd->slab, dte_size(key_len, value_len));
    if (!nd->cfg.no_evict) {
        nessie_pressure(nd);
        if (cls >= 0 && !memory_pending(op, key_len, value_len))
            nessie_evict_class(op->ctx, (uint32_t)cls, EVICT_INLINE);
        if (!op->memory_wait)
            op->deadline += nd->bound.memory_wait_ns;
    } else if (!memory_pending(op, key_len, value_len)) {
        return false;
    }
    if (!op->memory_wait) {
        op->memory_wait_ns = nessie_mono_ns();
        op->want_cls = cls;
    }
    op->memory_wait = true;
    count_abort(op, NESSIE_ABORT_MEMORY);
    return true;
}

/* Write a new DTE into this node's data region, created by `creator`. Returns NESSIE_OK and its
 * ITE, or NESSIE_TOO_BIG / NESSIE_NO_MEMORY, or NESSIE_FABRIC_ERROR on a node being retired (R1). The entry is BUSY: invisible until an ITE points at
 * it, invalid until its writer commits it. */
int proto_dte_write_new(struct op *op, const struct dte_hdr *tmpl, uint64_t creator,
                        const void *key, const void *v1, uint32_t l1, const void *v2,
                        uint32_t l2, uint32_t filter, uint64_t *ite_out)
{
    struct nessie_node *nd = op->node;
    /* R1 (model/retire.pml): a node being retired writes no new DTE, for any call or background
     * work, so its data only shrinks while the survivors relocate what names it. A call that
     * got here (one that began before the retire was announced) ends with no effect, and the
     * dispatcher ships it to a survivor (modes/dispatch.c). */
    if (mship_retiring_self(&nd->view))
        return NESSIE_FABRIC_ERROR;
    uint64_t size = dte_size(tmpl->key_len, l1 + l2);
    if (tmpl->kind == DTE_KIND_VALUE
            ? mc_item_size(tmpl->key_len, (uint64_t)l1 + l2, tmpl->flags) > nd->cfg.max_item_size
            : size > dte_max_size(nd->cfg.max_item_size))
        return NESSIE_TOO_BIG;
    int want = slab_class_for(&nd->slab, size);
    uint64_t off;
    uint32_t cls;
    if (want < 0)
        return NESSIE_TOO_BIG;
    /* A value whose writer has waited a whole period for room goes before a page move. */
    enum slab_use use = tmpl->kind == DTE_KIND_TOMBSTONE ? SLAB_FOR_TOMBSTONE
                        : op->memory_wait && nessie_mono_ns() - op->memory_wait_ns >
                                                 (uint64_t)nd->cfg.expiration_ms * 1000000ULL
                            ? SLAB_FOR_LATE_VALUE
                            : SLAB_FOR_VALUE;
    if (slab_alloc(&nd->slab, (uint32_t)want, use, &off, &cls) != 0)
        return NESSIE_NO_MEMORY;
    /* A new life of the slot: its generation is one more than its last life's. */
    uint64_t last;
    fab_local_read(nd->fab, FAB_REGION_DATA, off + DTE_OFF_STATE, &last, sizeof(last));
    uint32_t gen = (dte_gen(last) + 1) & GEN_MASK;
    struct dte_hdr h = *tmpl;
    h.state = dte_state(gen, DTE_BUSY);
    h.quarantine_ms = 0;
    /* A new item starts at the initial read count, with its write as its last access, and
     * unfetched; a migration's copy keeps its source's hint (tmpl). */
    if (!(tmpl->flags8 & DTE_F_COPY))
        h.access = dte_acc_make(nessie_acc_tick(), NESSIE_ACC_INIT, false);
    h.value_len = l1 + l2;
    h.creator = creator;
    h.created_ns = nessie_mono_ns(); /* on this owner's clock, as is data_hdr.clock_ns */
    /* Body first, header last: the slot may still be read by a slow reader of its previous life
     * only until that life's expiry, which has passed (slab), so the order is for clarity. */
    fab_local_write(nd->fab, FAB_REGION_DATA, off + DTE_HDR_SIZE, key, h.key_len);
    if (l1)
        fab_local_write(nd->fab, FAB_REGION_DATA, off + DTE_HDR_SIZE + h.key_len, v1, l1);
    if (l2)
        fab_local_write(nd->fab, FAB_REGION_DATA, off + DTE_HDR_SIZE + h.key_len + l1, v2, l2);
    fab_local_write(nd->fab, FAB_REGION_DATA, off, &h, sizeof(h));
    *ite_out = ite_make(nd->cfg.self, cls, off, gen, filter);
    return NESSIE_OK;
}

void proto_dte_free_unpublished(struct op *op, uint64_t ite)
{
    slab_free_unpublished(&op->node->slab, ite_class(ite), ite_offset(ite));
}

/*
 * The writer's last step (A.1.3 step 6, A.1.4 step 8): BUSY -> COMMITTED on our own DTE, naming
 * its life. Sets *committed when the entry is committed: by us, or by a takeover that beat us to
 * it. *committed stays false only for an entry abandoned or recycled uncommitted, which cannot
 * happen (step 4 never clears an entry in progress, and only its writer abandons it). A lost
 * completion is resolved by reading the word (it is in this node's memory). Returns
 * NESSIE_FABRIC_ERROR if the CAS cannot be made, NESSIE_TIMEOUT if the slot is in another life
 * already: this call stalled past the grace period and the outcome is unknown (a takeover
 * committed it, most likely; the leak sweep may have taken an entry never linked).
 */
int proto_commit_own(struct op *op, uint64_t ite, bool *committed)
{
    uint64_t expect = dte_state(ite_gen(ite), DTE_BUSY);
    *committed = false;
    for (int tries = 0; tries < 8; tries++) {
        uint64_t old = 0;
        if (proto_dte_state_cas(op, ite, expect, expect | DTE_COMMITTED, &old) != NESSIE_OK)
            fab_local_read(op->node->fab, FAB_REGION_DATA, ite_offset(ite) + DTE_OFF_STATE, &old,
                           sizeof(old));
        else if (old == expect) {
            *committed = true;
            return NESSIE_OK;
        }
        if (dte_gen(old) != ite_gen(ite) || !(old & DTE_BUSY))
            return NESSIE_TIMEOUT; /* another life already: unknown (model N5) */
        if (old & DTE_COMMITTED) {
            *committed = true; /* a takeover, or our own CAS whose completion was lost */
            return NESSIE_OK;
        }
        if (old & (DTE_ABANDONED | DTE_RECYCLED))
            return NESSIE_OK; /* cannot happen (see above): *committed stays false */
        expect = old;         /* unchanged: the CAS was dropped; try again */
    }
    return NESSIE_FABRIC_ERROR;
}

/* --- PUT and its forms (A.1.3), DELETE (A.1.5) ---------------------------------------------- */

/* Modes whose candidate must hold the key: they need the current item. */
static bool needs_present(enum wmode m) { return m != W_SET && m != W_ADD; }
/* Modes that build the new value from the old one. */
static bool needs_old_value(enum wmode m)
{
    return m == W_APPEND || m == W_PREPEND || m == W_INCR || m == W_DECR || m == W_TOUCH ||
           m == W_INVALIDATE || m == W_TOKEN;
}

static int absent_status(enum wmode m)
{
    switch (m) {
    case W_REPLACE:
    case W_APPEND:
    case W_PREPEND:
        return NESSIE_NOT_STORED;
    default:
        return NESSIE_NOT_FOUND;
    }
}

/*
 * Judge the condition on the item the candidate holds (live: present and neither expired nor
 * flushed) and build the new DTE's contents. Returns NESSIE_OK to go on, or the final status.
 */
static int build_new(struct op *op, struct wreq *w, const struct dte_view *old, bool live,
                     struct dte_hdr *h, const void **v1, uint32_t *l1, const void **v2,
                     uint32_t *l2)
{
    struct nessie_node *nd = op->node;
    memset(h, 0, sizeof(*h));
    h->key_len = (uint8_t)op->klen;
    h->kind = DTE_KIND_VALUE;
    h->flags8 = op->ctx->value_flags8 |
                (uint8_t)(((w->meta & (NESSIE_META_TOKEN | NESSIE_META_KEY_BINARY)) << DTE_F_META_SHIFT));
    h->flags = w->flags;
    h->exptime = w->exptime;
    *v1 = w->val;
    *l1 = w->vlen;
    *v2 = NULL;
    *l2 = 0;
    switch (w->mode) {
    case W_SET:
        break;
    case W_ADD:
        if (live)
            return NESSIE_NOT_STORED;
        h->flags8 |= DTE_F_ADD;
        break;
    case W_REPLACE:
        if (!live)
            return NESSIE_NOT_STORED;
        break;
    case W_CAS:
        if (!live)
            return NESSIE_NOT_FOUND;
        if (old->h.version == w->cas)
            break;
        /* memcached's ms with I: a CAS older than the item's still stores, marked stale, with
         * the item's expiry and token */
        if (!(w->meta & NESSIE_META_STALE) || w->cas > old->h.version)
            return NESSIE_EXISTS;
        h->exptime = old->h.exptime;
        h->flags8 |= (uint8_t)((NESSIE_META_STALE << DTE_F_META_SHIFT) |
                               (old->h.flags8 & (NESSIE_META_TOKEN << DTE_F_META_SHIFT)));
        break;
    case W_APPEND:
    case W_PREPEND:
        if (!live)
            return NESSIE_NOT_STORED;
        if (w->cas && old->h.version != w->cas)
            return NESSIE_EXISTS; /* meta ms A/P with C */
        h->flags = old->h.flags;
        h->exptime = old->h.exptime;
        if (w->mode == W_APPEND) {
            *v1 = old->value;
            *l1 = old->h.value_len;
            *v2 = w->val;
            *l2 = w->vlen;
        } else {
            *v2 = old->value;
            *l2 = old->h.value_len;
        }
        break;
    case W_INCR:
    case W_DECR: {
        if (!live)
            return NESSIE_NOT_FOUND;
        if (w->cas && old->h.version != w->cas)
            return NESSIE_EXISTS; /* meta arithmetic's C */
        size_t cap = old->h.value_len > ARITH_MAX_DIGITS ? old->h.value_len : ARITH_MAX_DIGITS;
        char *out = (char *)nessie_ctx_buf(op->ctx, 2, cap);
        size_t outlen;
        if (!out)
            return NESSIE_NO_MEMORY;
        if (!arith_apply(old->value, old->h.value_len, w->mode == W_INCR, w->delta, out, cap,
                         &outlen, &w->num_out))
            return NESSIE_NON_NUMERIC;
        h->flags = old->h.flags;
        h->exptime = old->h.exptime;
        *v1 = out;
        *l1 = (uint32_t)outlen;
        break;
    }
    case W_TOUCH:
        if (!live)
            return NESSIE_NOT_FOUND;
        h->flags = old->h.flags;
        h->flags8 |= old->h.flags8 & DTE_F_META; /* a touch changes no mark */
        *v1 = old->value;
        *l1 = old->h.value_len;
        h->version = old->h.version; /* memcached's touch keeps the CAS token */
        return NESSIE_OK;
    case W_TOKEN:
        if (!live)
            return NESSIE_NOT_FOUND;
        if (old->h.version != w->cas ||
            (old->h.flags8 & (NESSIE_META_TOKEN << DTE_F_META_SHIFT)))
            return NESSIE_EXISTS; /* changed, or another reader won it */
        h->flags = old->h.flags;
        h->exptime = old->h.exptime;
        h->flags8 |= (uint8_t)((old->h.flags8 & DTE_F_META) | (NESSIE_META_TOKEN << DTE_F_META_SHIFT));
        *v1 = old->value;
        *l1 = old->h.value_len;
        h->version = old->h.version; /* memcached sets the bit in place: the CAS stays */
        return NESSIE_OK;
    case W_INVALIDATE:
        if (!live)
            return NESSIE_NOT_FOUND;
        if (w->cas && old->h.version != w->cas)
            return NESSIE_EXISTS;
        h->flags = old->h.flags;
        h->exptime = w->set_exptime ? w->exptime : old->h.exptime;
        /* stale, its token free for the next reader to win; its key's mark kept */
        h->flags8 |= (uint8_t)((old->h.flags8 & (NESSIE_META_KEY_BINARY << DTE_F_META_SHIFT)) |
                               (NESSIE_META_STALE << DTE_F_META_SHIFT));
        *v1 = old->value;
        *l1 = old->h.value_len;
        break;
    case W_DELETE:
        if (!live)
            return NESSIE_NOT_FOUND;
        if (w->cas && old->h.version != w->cas)
            return NESSIE_EXISTS; /* meta delete's C */
        h->kind = DTE_KIND_TOMBSTONE;
        *v1 = NULL;
        *l1 = 0;
        break;
    case W_EVICT:
        /* Dead or alive (expired and flushed items are reclaimed this way too), but only the
         * victim the evictor chose: if the key was written or moved since, it stays. */
        h->kind = DTE_KIND_TOMBSTONE;
        *v1 = NULL;
        *l1 = 0;
        break;
    }
    h->version = nessie_version_next(nd);
    return NESSIE_OK;
}

/* A DTE with this call's creator id: the call's own earlier attempt. */
static bool is_mine(const struct op *op, const struct dte_view *v)
{
    return v->h.creator == op->id;
}

static void rec_remove(struct op *op, uint64_t ite)
{
    for (uint32_t i = 0; i < op->nrec; i++)
        if (op->rec[i] == ite) {
            op->rec[i] = op->rec[--op->nrec];
            return;
        }
}

/* Read our own DTE's header (always local). */
static void mine_hdr(struct op *op, uint64_t ite, struct dte_hdr *h)
{
    fab_local_read(op->node->fab, FAB_REGION_DATA, ite_offset(ite), h, sizeof(*h));
}

static bool rec_has(const struct op *op, uint64_t ite)
{
    for (uint32_t i = 0; i < op->nrec; i++)
        if (op->rec[i] == ite)
            return true;
    return false;
}

/*
 * Point our own entry e's previous version at prev, if e is still in the life we wrote it in,
 * uncommitted and not recycled (only then is the slot ours to write; a call stalled past the
 * grace period may find it committed by a takeover, replaced and reused since). Returns whether
 * it wrote. The window between the check and the write is a few instructions, not a step.
 */
static bool set_prev(struct op *op, uint64_t e, uint64_t prev)
{
    uint64_t st;
    fab_local_read(op->node->fab, FAB_REGION_DATA, ite_offset(e) + DTE_OFF_STATE, &st, sizeof(st));
    if (dte_gen(st) != ite_gen(e) || (st & (DTE_COMMITTED | DTE_RECYCLED)) || !(st & DTE_BUSY))
        return false;
    fab_local_write(op->node->fab, FAB_REGION_DATA,
                    ite_offset(e) + __builtin_offsetof(struct dte_hdr, prev_ite), &prev,
                    sizeof(prev));
    return true;
}

/* This call's entry is in another life already: it stalled past the grace period, and a
 * takeover committed the entry, which was replaced and recycled since; or it was never linked
 * and the leak sweep took it back. Whether the call took effect is unknown. What it unlinked is
 * left to the leak sweep (its previous version may be linked again). */
static int lost_track(struct op *op)
{
    op->mine = 0;
    op->nrec = 0;
    op->lost = true;
    return NESSIE_TIMEOUT;
}

/*
 * Take this call's uncommitted entry back out of the index, so that the call has no effect:
 *   1. its previous version is made one that this call unlinked itself (the candidate's old
 *      entry, or a duplicate step 4 cleared): whoever links it again (this call, or a takeover
 *      of the abandoned entry) must not link an entry somebody else is recycling;
 *   2. abandon it: a CAS naming its life, after which no takeover can commit it, ever: from
 *      here on the call has no effect, whatever happens to the rest;
 *   3. link the previous version again in its place; if that cannot be done now, the takeover
 *      of the abandoned entry does it after the grace period.
 * Sets *done when the entry had been committed already (a takeover, or a lost completion of
 * our own commit): the call took effect then, with *version. Returns NESSIE_FABRIC_ERROR when
 * step 2 cannot be made (op->mine stays: the effect is unknown), NESSIE_TIMEOUT when the entry is
 * in another life already (lost_track). The previous version is never recycled by this call
 * once it has been offered for linking again: if step 3 fails, it may be linked by a takeover
 * and replaced since, somebody else's to recycle (model N3); the leak sweep takes it otherwise.
 */
static int abandon_mine(struct op *op, bool *done, uint64_t *version)
{
    uint64_t e = op->mine;
    *done = false;
    if (!e)
        return NESSIE_OK;
    struct dte_hdr h;
    mine_hdr(op, e, &h);
    if (dte_gen(h.state) != ite_gen(e) || !(h.state & DTE_BUSY))
        return lost_track(op);
    uint64_t back = !ite_empty(h.prev_ite) && rec_has(op, h.prev_ite) ? h.prev_ite
                                                                       : op->mine_replaced;
    /* A retire's values (model/retire.pml): what we would link again names the data of a node
     * being retired, and the relocation may have passed this slot: a committed copy of it in our
     * own data goes back instead (the entry itself stays ours to recycle, step 7). If no copy
     * can be made, the entry itself goes back, as before a retire. */
    uint64_t copy;
    if (!ite_empty(back) && !(h.state & DTE_COMMITTED) &&
        proto_retiring_data(op->node, ite_node(back)) &&
        proto_retire_copy(op, back, &copy) == NESSIE_OK)
        back = copy;
    /* Step 1: our own memory, published by the CAS below. */
    if (back != h.prev_ite && !(h.state & DTE_COMMITTED) && !set_prev(op, e, back))
        return lost_track(op);
    /* Step 2. */
    uint64_t expect = dte_state(ite_gen(e), DTE_BUSY), old = 0;
    bool abandoned = false;
    for (int tries = 0; tries < 8 && !abandoned; tries++) {
        if (proto_dte_state_cas(op, e, expect, expect | DTE_ABANDONED, &old) != NESSIE_OK)
            fab_local_read(op->node->fab, FAB_REGION_DATA, ite_offset(e) + DTE_OFF_STATE, &old,
                           sizeof(old)); /* a lost completion: what is the word now? */
        else if (old == expect)
            old |= DTE_ABANDONED;
        if (dte_gen(old) != ite_gen(e) || !(old & DTE_BUSY))
            return lost_track(op); /* model N1 */
        if (old & DTE_COMMITTED) {
            /* Committed: by a takeover, or by our own commit whose completion was lost. */
            *done = true;
            *version = op->mine_version;
            op->mine = 0;
            return NESSIE_OK;
        }
        abandoned = (old & DTE_ABANDONED) != 0;
        expect = old; /* unchanged (the CAS was dropped), or RECYCLED added: abandon that */
    }
    if (!abandoned)
        return NESSIE_FABRIC_ERROR;
    /* Step 3. A CAS that did not run leaves e linked: try again, a few times. A previous
     * version whose value was on a node lost from the view since is lost: the slot is emptied
     * instead of linking it again (proto_takeover says why). */
    bool ok = false, clean;
    uint64_t pos = op->mine_at, now = e;
    uint64_t relink = !ite_empty(back) && mship_lost(&op->node->view, ite_node(back)) ? 0 : back;
    int rc = NESSIE_OK;
    for (int tries = 0; tries < 4 && rc == NESSIE_OK && !ok && now == e; tries++) {
        rc = proto_ite_cas_resolve(op, pos, e, relink, &ok, &clean);
        if (rc == NESSIE_OK && !ok && ite_read(op, pos, &now) != NESSIE_OK)
            rc = NESSIE_FABRIC_ERROR;
    }
    if (rc == NESSIE_OK && !ok && now == e)
        rc = NESSIE_FABRIC_ERROR; /* still linked: the takeover of the abandoned entry ends it */
    rec_remove(op, back); /* linked again, or offered to be: see above */
    /* Not linked where it was: never published, or linked again over, or unlinked by somebody
     * else (who recycles it too: a second mark of the same life is harmless, and nobody else
     * would if it never was published). Unknown: the takeover of the abandoned entry will. */
    if (rc == NESSIE_OK)
        nessie_recycle(op->ctx, e);
    op->mine = 0;
    return NESSIE_OK;
}

/* A duplicate made our entry's previous version (step 4) was not unlinked after all: point the
 * previous version back at the candidate's old entry, which we did unlink (model N7). */
static void unadopt_dup(struct op *op, uint64_t mine, uint64_t *dup)
{
    if (!*dup)
        return;
    if (set_prev(op, mine, op->mine_replaced))
        op->mine_prev_live = false;
    *dup = 0;
}

/* The call is finished (it took effect): recycle what it replaced. */
static enum attempt write_done(struct op *op, struct wreq *w, uint64_t version, int *status)
{
    w->version_out = version;
    op->mine = 0;
    proto_recycle_all(op);
    *status = NESSIE_OK;
    return A_DONE;
}

static enum attempt write_attempt(struct op *op, struct wreq *w, int *status)
{
    struct nessie_node *nd = op->node;
    struct dte_view v;
    bool ok, done;
    int cand = -1;
    bool adopted = false, live = false;
    struct dte_view old = {0};
    uint64_t version;

    /* Step 2: forward pass for a candidate: the first entry holding the key, or the first empty
     * one if the mode allows an absent key. A call with an entry of its own still in the index
     * from an earlier attempt looks on for it, to adopt it (A.1.3 step 2.3). */
    for (uint32_t i = 0; i < op->n; i++) {
        if (attempt_expired(op)) {
            count_abort(op, NESSIE_ABORT_TIMEOUT);
            return A_RETRY;
        }
        uint64_t ite, t = nessie_mono_ns();
        if ((*status = ite_read(op, op->pos[i], &ite)) != NESSIE_OK)
            return A_DONE;
        op->seen[i] = ite;
        if (ite_empty(ite)) {
            /* Step 2.1; never at a position a change of membership keeps from new entries
             * (keys.h: the insert policies of model/elastic.pml) */
            if (!needs_present(w->mode) && !op->mine && !((op->no_insert >> i) & 1)) {
                cand = (int)i;
                break;
            }
            continue;
        }
        if (ite_filter(ite) != op->filter) /* Step 2.2 */
            continue;
        if (ite == op->mine) { /* our earlier attempt's entry, still uncommitted: adopt it */
            cand = (int)i;
            adopted = true;
            break;
        }
        /* Step 2.3: the DTE without its value, unless the new value is built from it. */
        enum attempt end;
        int is_key = proto_fetch_key(op, op->pos[i], ite, needs_old_value(w->mode), t, &v, status, &end);
        if (is_key < 0)
            return end;
        if (!is_key)
            continue;
        if (is_mine(op, &v) && (v.h.state & DTE_COMMITTED)) /* a takeover finished this call */
            return write_done(op, w, v.h.version, status);
        if (!(v.h.state & DTE_COMMITTED)) {
            if (proto_is_orphan(op, ite, &v.h)) {
                if ((*status = proto_takeover(op, op->pos[i], ite, &v)) != NESSIE_OK)
                    return A_DONE;
                return A_RETRY_NOW;
            }
            count_abort(op, NESSIE_ABORT_INVALID_DTE); /* in progress elsewhere */
            return A_RETRY;
        }
        if (op->mine) {
            /* The key is committed in front of our own entry (moved there meanwhile): our entry
             * would be hidden behind it. Take ours back out and start over. */
            if ((*status = abandon_mine(op, &done, &version)) != NESSIE_OK)
                return A_DONE;
            if (done)
                return write_done(op, w, version, status);
            return A_RETRY_NOW;
        }
        cand = (int)i;
        old = v;
        live = dte_readable(&v.h) && !nessie_item_dead(nd, &v.h);
        break;
    }

    if (cand < 0 && op->mine) {
        /* Our entry is gone from the index. Still in its life: committed by a takeover and
         * replaced since (the call took effect), or never linked (our CAS's answer was lost and
         * it had not run) or undone by a takeover (an add): it never took effect, and nobody can
         * link it again: try again. In another life: this call stalled past the grace, and the
         * entry was taken over and then replaced, recycled and reused, or was never linked and
         * the leak sweep took it; which of the two is unknown, so the call's outcome is
         * (a second write would apply a SET or INCR twice, or undo a DELETE). */
        struct dte_hdr h;
        mine_hdr(op, op->mine, &h);
        if (dte_gen(h.state) != ite_gen(op->mine) || !(h.state & DTE_BUSY)) {
            *status = lost_track(op);
            return A_DONE;
        }
        if (h.state & DTE_COMMITTED)
            return write_done(op, w, op->mine_version, status);
        if (h.state & DTE_ABANDONED)
            rec_remove(op, h.prev_ite); /* linked again by the takeover that undid it */
        op->mine = 0;
        return A_RETRY_NOW;
    }
    if (cand < 0 && needs_present(w->mode)) /* in none of I_1..I_n: as a GET miss ends */
        return proto_end_absent(op, absent_status(w->mode), status);
    if (cand < 0) {
        /* Step 2.4: every entry is taken by other keys: MIGRATE one away, then try again. The
         * thesis moves I_1; when that chain ends at the depth limit, I_2.. are tried too before
         * the index is declared full. */
        enum attempt r = A_DONE;
        for (uint32_t i = 0; i < op->n; i++) {
            if ((op->no_insert >> i) & 1)
                continue; /* room there would not be ours to take */
            r = proto_migrate(op, op->pos[i], op->pos, op->n, 0, status);
            if (r == A_DONE && *status == NESSIE_OK)
                return A_RETRY_NOW;
            if (!(r == A_DONE && *status == NESSIE_INDEX_FULL))
                break;
        }
        if (r == A_RETRY)
            count_abort(op, NESSIE_ABORT_MIGRATE);
        return r;
    }

    uint64_t mine = op->mine;
    if (!adopted) {
        /* Step 3: the new DTE, in local memory, invalid, with the candidate's ITE as previous
         * version. The condition of a conditional form is judged here, on the item the
         * candidate holds; the CAS below makes sure it still holds it. */
        struct dte_hdr h;
        const void *v1, *v2;
        uint32_t l1, l2;
        EXPIRED_RETRY(op);
        if (w->mode == W_EVICT && op->seen[cand] != w->victim) {
            *status = NESSIE_NOT_FOUND; /* changed since the victim was chosen */
            return A_DONE;
        }
        int rc = build_new(op, w, &old, live, &h, &v1, &l1, &v2, &l2);
        if (rc != NESSIE_OK) {
            *status = rc;
            return A_DONE;
        }
        h.prev_ite = op->seen[cand];
        *status = proto_dte_write_new(op, &h, op->id, op->key, v1, l1, v2, l2, op->filter, &mine);
        /* An eviction never waits for room for its tombstone: another victim, later, will do. */
        if (*status == NESSIE_NO_MEMORY && w->mode != W_EVICT &&
            proto_memory_short(op, h.key_len, l1 + l2))
            return A_RETRY;
        if (*status != NESSIE_OK)
            return A_DONE;
        /* Step 3.1: swing the candidate to it. */
        HOOK(op, NESSIE_HOOK_PUT_BEFORE_CAS, cand);
        if (attempt_expired(op)) {
            proto_dte_free_unpublished(op, mine);
            count_abort(op, NESSIE_ABORT_TIMEOUT);
            return A_RETRY;
        }
        bool clean;
        *status = proto_ite_cas_resolve(op, op->pos[cand], op->seen[cand], mine, &ok, &clean);
        if (clean && !ok) {
            proto_dte_free_unpublished(op, mine); /* never visible: free at once */
            count_abort(op, NESSIE_ABORT_CAS_FAILED);
            return A_RETRY;
        }
        /* Published, or perhaps (the CAS's outcome was lost): from here on the entry is the
         * call's to commit or to abandon (abandon_mine); it is never freed without quarantine. */
        op->mine = mine;
        op->mine_at = op->pos[cand];
        op->mine_replaced = op->seen[cand];
        op->mine_prev_live = live;
        op->mine_version = h.version;
        if (*status != NESSIE_OK || !ok) {
            if (*status == NESSIE_OK)
                *status = NESSIE_FABRIC_ERROR; /* not linked now: run_write abandons it */
            return A_DONE;
        }
        /* Step 3.2: the replaced DTE is recycled once the call is done (it serves as the
         * previous version meanwhile). */
        if (!ite_empty(op->seen[cand]))
            rec_push(op, op->seen[cand]);
        op->seen[cand] = mine;
        HOOK(op, NESSIE_HOOK_PUT_AFTER_CAS, cand);
    }

    /* Step 4: clear duplicates of the key in I_{cnd+1}..I_n, in order. */
    uint64_t adopted_dup = 0; /* made our previous version, not yet unlinked */
    for (uint32_t j = (uint32_t)cand + 1; j < op->n; j++) {
        uint64_t ite, t = nessie_mono_ns();
        if ((*status = ite_read(op, op->pos[j], &ite)) != NESSIE_OK)
            return A_DONE;
        op->seen[j] = ite;
        if (ite_empty(ite) || ite_filter(ite) != op->filter)
            continue;
        enum attempt end;
        int is_key = proto_fetch_key(op, op->pos[j], ite, false, t, &v, status, &end);
        if (is_key < 0)
            return end;
        if (!is_key)
            continue;
        bool dup_live = dte_readable(&v.h) && !nessie_item_dead(nd, &v.h);
        if (!(v.h.state & DTE_COMMITTED)) {
            /* An entry in progress behind ours (another write of the key, or a migration's
             * copy). The thesis's step 4.4 clears it, but its writer may then commit it without
             * knowing it is unlinked, and report success for a value nobody will read if this
             * call later abandons its own entry (a fabric error, or the key found committed in
             * front of it); for add it may also stand for a live item. So it is never cleared:
             * this call takes its own entry back out (holding it would block the other, which
             * meets ours first) and tries again once the other has finished, or takes it over
             * if its writer is gone. */
            if (proto_is_orphan(op, ite, &v.h)) {
                if ((*status = proto_takeover(op, op->pos[j], ite, &v)) != NESSIE_OK)
                    return A_DONE;
                return A_RETRY_NOW;
            }
            if ((*status = abandon_mine(op, &done, &version)) != NESSIE_OK)
                return A_DONE;
            if (done)
                return write_done(op, w, version, status);
            count_abort(op, NESSIE_ABORT_INVALID_DTE);
            return A_RETRY;
        }
        if (dup_live && w->mode == W_ADD) {
            /* add finds the key present after all: take our entry back out. */
            if ((*status = abandon_mine(op, &done, &version)) != NESSIE_OK)
                return A_DONE;
            if (done)
                return write_done(op, w, version, status);
            proto_recycle_all(op);
            *status = NESSIE_NOT_STORED;
            return A_DONE;
        }
        if (dup_live && !op->mine_prev_live && ite_empty(op->mine_replaced)) {
            /* The duplicate is the value readers see (the candidate was empty): make it our
             * entry's previous version before unlinking it, so that readers meeting our entry,
             * and a rollback of it, still find that value. Not when the candidate held the key,
             * expired or flushed: readers stop at that entry and see the key absent, and the
             * older duplicate behind it must stay hidden (issue 26, finding 7:
             * test_dead_front_entry_hides_older_duplicate read it back during the write). */
            if (!set_prev(op, mine, ite)) {
                *status = lost_track(op);
                return A_DONE;
            }
            op->mine_prev_live = true;
            adopted_dup = ite;
        }
        /* Step 4.4 */
        if (attempt_expired(op)) {
            unadopt_dup(op, mine, &adopted_dup);
            count_abort(op, NESSIE_ABORT_TIMEOUT);
            return A_RETRY;
        }
        bool clean;
        if ((*status = proto_ite_cas_resolve(op, op->pos[j], ite, 0, &ok, &clean)) != NESSIE_OK) {
            /* Whether the duplicate is still linked is unknown, and our entry names it: neither
             * abandoning (its restore could lose the duplicate, or link it twice) nor
             * recycling it is safe. Leave the entry for a takeover to commit (model N7). */
            *status = NESSIE_TIMEOUT;
            return A_DONE;
        }
        if (!ok) {
            unadopt_dup(op, mine, &adopted_dup);
            count_abort(op, NESSIE_ABORT_CAS_FAILED);
            return A_RETRY;
        }
        adopted_dup = 0;
        rec_push(op, ite);
        op->seen[j] = 0;
    }

    /* Step 5: reverse pass. */
    HOOK(op, NESSIE_HOOK_PUT_BEFORE_REVERSE, 0);
    bool changed;
    if ((*status = proto_reverse_pass(op, &changed)) != NESSIE_OK)
        return A_DONE;
    if (changed) {
        count_abort(op, NESSIE_ABORT_REVERSE_PASS);
        return A_RETRY;
    }
    if (attempt_expired(op)) {
        count_abort(op, NESSIE_ABORT_TIMEOUT);
        return A_RETRY;
    }

    HOOK(op, NESSIE_HOOK_PUT_BEFORE_COMMIT, 0);
    /* Step 6: commit: the same CAS a takeover would make, so only one of them happens. PUT: the
     * entry becomes valid. DELETE (A.1.5 step 6): the tombstone is committed, then unlinked. */
    bool committed;
    if ((*status = proto_commit_own(op, mine, &committed)) != NESSIE_OK) {
        if (*status == NESSIE_TIMEOUT)
            lost_track(op);
        return A_DONE;
    }
    if (!committed) {
        /* Abandoned by a takeover: an add's entry, undone because this call outlived the grace
         * (protocol.c, proto_takeover); the takeover links its previous version again, which
         * is therefore not ours to recycle. The add had no effect, but this call has already
         * stalled past its bound: it reports what a call that lost track reports. */
        struct dte_hdr h;
        mine_hdr(op, mine, &h);
        rec_remove(op, h.prev_ite);
        if (!(w->mode == W_ADD && (h.state & DTE_ABANDONED)))
            log_error("protocol: own entry %016llx could not be committed",
                      (unsigned long long)mine);
        op->mine = 0;
        op->lost = true;
        *status = NESSIE_TIMEOUT;
        return A_DONE;
    }
    op->mine = 0; /* committed: nothing to abandon any more, whatever happens below */
    if (w->mode == W_DELETE || w->mode == W_EVICT) {
        /* The DELETE took effect at its commit; unlinking the committed tombstone is
         * housekeeping (if it fails, the key's next write replaces it and recycles it). */
        bool clean;
        if (proto_ite_cas_resolve(op, op->pos[cand], mine, 0, &ok, &clean) == NESSIE_OK && ok)
            rec_push(op, mine);
    }
    /* Step 7: recycle what the call replaced. */
    return write_done(op, w, op->mine_version, status);
}

/* After a write call's last attempt: settle what it leaves behind, and its outcome. */
static int write_end(struct op *op, struct wreq *w, int status)
{
    struct nessie_ctx *ctx = op->ctx;
    if (status != NESSIE_OK && status != NESSIE_TIMEOUT && op->mine) {
        /* A definite failure must have no effect, ever (nessie.h): take our published entry
         * back out, or report the effect unknown if even that cannot be made sure of, or if
         * the call is past the last moment it may act (op_act_end: a takeover may be about to
         * finish the entry, and the grace assumes we are done). */
        bool done;
        uint64_t version;
        if (nessie_mono_ns() >= op_act_end(op)) {
            status = NESSIE_TIMEOUT;
        } else if (abandon_mine(op, &done, &version) != NESSIE_OK) {
            status = NESSIE_TIMEOUT;
        } else if (done) {
            w->version_out = version;
            status = NESSIE_OK;
        }
    }
    if (status != NESSIE_TIMEOUT) {
        /* A call that ends refused (exists, not stored, ...) after an earlier attempt of it
         * unlinked entries still owes their recycling: its own entry is out of the index by then
         * (adopted, rolled back, or cleared by another operation). */
        proto_recycle_all(op);
    } else {
        /* Our published entry (if any) is left for a takeover to finish; the DTEs we already
         * unlinked can be recycled, except the one that entry names as its previous version
         * (readers use it until the entry is committed; the leak sweep finds it after). */
        uint64_t keep = 0;
        if (op->mine) {
            struct dte_hdr h;
            mine_hdr(op, op->mine, &h);
            keep = h.prev_ite;
        }
        for (uint32_t i = 0; i < op->nrec; i++)
            if (op->rec[i] != keep)
                nessie_recycle(ctx, op->rec[i]);
    }
    return proto_finish(op, status);
}

static int run_write(struct nessie_ctx *ctx, enum nessie_opkind kind, const struct key_plan *kp,
                     struct wreq *w)
{
    struct op op;
    proto_op_init(&op, ctx, kind, kp);
    int status = NESSIE_OK;
    RUN_ATTEMPTS(&op, write_attempt(&op, w, &status));
    return write_end(&op, w, status);
}

/* Attempts an eviction makes before it leaves a busy key alone: a victim that other operations
 * are writing is not worth waiting for, another one will do. */
#define EVICT_ATTEMPTS 3

nessie_evict_hook_fn nessie_evict_hook;
void *nessie_evict_hook_user;

nessie_evict_anon_fn nessie_evict_anon_hook;
void *nessie_evict_anon_user;

void nessie_set_evict_anon_hook(nessie_evict_anon_fn fn, void *user)
{
    nessie_evict_anon_user = user;
    nessie_evict_anon_hook = fn;
}

void nessie_set_evict_hook(nessie_evict_hook_fn fn, void *user)
{
    nessie_evict_hook_user = user;
    nessie_evict_hook = fn;
}

/* Attempt number `tries` (from 1) of an eviction: a write attempt, except that the last one
 * allowed (EVICT_ATTEMPTS) ends the call when it would retry: NESSIE_EXISTS, the victim busy
 * (no effect: write_end takes back what it published). */
static enum attempt evict_attempt(struct op *op, struct wreq *w, int *status, unsigned tries)
{
    enum attempt a = write_attempt(op, w, status);
    if (a != A_DONE && tries >= EVICT_ATTEMPTS) {
        *status = NESSIE_EXISTS;
        return A_DONE;
    }
    return a;
}

/* memory/upcall.h has the contract. The attempts run through RUN_ATTEMPTS as every call's do, so
 * an eviction obeys the view lease (protocol.h): under a lease that has run out it waits for a
 * renewal within its budget, and without one ends before its attempt, NESSIE_FABRIC_ERROR, with
 * nothing touched; and one whose budget ends between two attempts ends NESSIE_TIMEOUT as theirs
 * do. */
int nessie_evict_entry(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t ite)
{
    enum nessie_opkind saved = ctx->kind; /* a write that evicts on its own is under way */
    struct wreq w = {.mode = W_EVICT, .victim = ite};
    struct op op;
    if (nessie_evict_hook)
        nessie_evict_hook(nessie_evict_hook_user, kp->key, kp->klen, false, 0);
    proto_op_init(&op, ctx, NESSIE_OPK_EVICT, kp);
    int status = NESSIE_OK;
    unsigned tries = 0;
    RUN_ATTEMPTS(&op, evict_attempt(&op, &w, &status, ++tries));
    status = write_end(&op, &w, status);
    ctx->kind = saved;
    if (nessie_evict_hook)
        nessie_evict_hook(nessie_evict_hook_user, kp->key, kp->klen, true, status);
    return status;
}

int proto_store(struct nessie_ctx *ctx, const struct key_plan *kp, enum nessie_store_mode mode,
                const void *value, size_t value_len, uint32_t flags, int64_t exptime,
                uint64_t cas, uint32_t meta, uint64_t *version_out)
{
    static const enum wmode modes[] = {
        [NESSIE_SET] = W_SET, [NESSIE_ADD] = W_ADD, [NESSIE_REPLACE] = W_REPLACE,
        [NESSIE_CAS] = W_CAS, [NESSIE_APPEND] = W_APPEND, [NESSIE_PREPEND] = W_PREPEND,
    };
    struct wreq w = {.mode = modes[mode], .val = value, .vlen = (uint32_t)value_len,
                     .flags = flags, .exptime = nessie_abs_exptime(exptime), .cas = cas,
                     .meta = meta};
    int rc = run_write(ctx, NESSIE_OPK_PUT, kp, &w);
    if (rc == NESSIE_OK && version_out)
        *version_out = w.version_out;
    return rc;
}

int proto_delete(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t cas)
{
    struct wreq w = {.mode = W_DELETE, .cas = cas};
    return run_write(ctx, NESSIE_OPK_DELETE, kp, &w);
}

int proto_arith(struct nessie_ctx *ctx, const struct key_plan *kp, bool incr, uint64_t delta,
                uint64_t cas, uint64_t *result, uint64_t *version_out)
{
    struct wreq w = {.mode = incr ? W_INCR : W_DECR, .delta = delta, .cas = cas};
    int rc = run_write(ctx, NESSIE_OPK_PUT, kp, &w);
    if (rc == NESSIE_OK) {
        if (result)
            *result = w.num_out;
        if (version_out)
            *version_out = w.version_out;
    }
    return rc;
}

int proto_invalidate(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t cas,
                     bool set_exptime, int64_t exptime)
{
    struct wreq w = {.mode = W_INVALIDATE, .cas = cas, .set_exptime = set_exptime,
                     .exptime = set_exptime ? nessie_abs_exptime(exptime) : 0};
    return run_write(ctx, NESSIE_OPK_PUT, kp, &w);
}

int proto_token(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t version)
{
    struct wreq w = {.mode = W_TOKEN, .cas = version};
    return run_write(ctx, NESSIE_OPK_PUT, kp, &w);
}

int proto_touch(struct nessie_ctx *ctx, const struct key_plan *kp, int64_t exptime)
{
    struct wreq w = {.mode = W_TOUCH, .exptime = nessie_abs_exptime(exptime)};
    return run_write(ctx, NESSIE_OPK_PUT, kp, &w);
}
