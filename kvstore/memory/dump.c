/*
 * dump.c - the keys of the live items this node holds (nessie_dump_local, for memcached_dump).
 *
 * The owner walks its own data region slot by slot (slab_walk) and judges each committed value
 * the way a GET would meet it: through the key's N index entries. A slot's header says only that
 * the entry was written and not yet marked recycled; an older version of a key stays unmarked
 * until its writer's recycling (staged, with background recycling) gets to it, and a MIGRATE's
 * source stays until its copy is linked. Only the index says which of them a GET reads now.
 */
#include <string.h>

#include "memory.h"

struct dump_walk {
    struct nessie_ctx *ctx;
    nessie_dump_fn fn;
    nessie_dump_item_fn item_fn; /* instead of fn: the item's header too (nessie_dump_class) */
    int cls;                     /* only this class's slots (-1: all) */
    void *user;
    bool undecided; /* an item was left out: a node its judgment needed is unreachable */
};

/* Whether the key of the entry mine names reads as mine now: 1, 0, or -1 when a node it needs
 * is unreachable. As GET's forward pass (protocol/get.c): the first of the key's entries whose filter
 * bits match and whose entry holds the key decides; it is mine, or an uncommitted write on the
 * key whose previous version is mine (a GET reads that version until the write commits). */
static int dump_current(struct nessie_ctx *ctx, uint64_t mine, const struct key_plan *kp)
{
    struct nessie_node *nd = ctx->node;
    const uint64_t *pos = kp->pos;
    for (uint32_t i = 0; i < kp->n; i++) {
        uint64_t w;
        if (nessie_ite_read_pos(ctx->ep, nd, pos[i], &w) != NESSIE_OK)
            return -1;
        if (ite_empty(w) || ite_filter(w) != ite_filter(mine))
            continue;
        if (w == mine)
            return 1;
        uint32_t cls = ite_class(w);
        if (cls >= nd->nclasses || ite_node(w) >= nd->cfg.node_ids ||
            DTE_HDR_SIZE + kp->klen > nd->class_size[cls])
            continue; /* not an entry that can hold this key */
        unsigned char hk[DTE_HDR_SIZE + NESSIE_KEY_MAX];
        struct fab_wr rd = {.opcode = FAB_OP_READ, .node = ite_node(w), .region = FAB_REGION_DATA,
                            .offset = ite_offset(w), .local = hk, .length = DTE_HDR_SIZE + kp->klen};
        if (fab_exec(ctx->ep, &rd) != FAB_OK)
            return -1;
        struct dte_hdr h;
        memcpy(&h, hk, sizeof(h));
        /* Another life of that slot (the entry we read the index through is gone) or another
         * key that shares the filter bits: not this key's entry. */
        if (dte_gen(h.state) != ite_gen(w) || h.key_len != kp->klen ||
            memcmp(hk + DTE_HDR_SIZE, kp->key, kp->klen) != 0)
            continue;
        return !(h.state & DTE_COMMITTED) && ite_same_entry(h.prev_ite, mine);
    }
    return 0;
}

/* One slot of the walk: false stops it (fn refused the key, which the next walk offers again). */
static bool dump_slot(void *arg, uint32_t cls, uint64_t off)
{
    struct dump_walk *dw = arg;
    struct nessie_node *nd = dw->ctx->node;
    if (dw->cls >= 0 && cls != (uint32_t)dw->cls)
        return true;
    struct dte_hdr h;
    if (fab_local_read(nd->fab, FAB_REGION_DATA, off, &h, sizeof(h)) != FAB_OK)
        return true;
    if ((h.state & (DTE_BUSY | DTE_COMMITTED | DTE_ABANDONED | DTE_RECYCLED)) !=
            (DTE_BUSY | DTE_COMMITTED) ||
        h.kind != DTE_KIND_VALUE || h.key_len == 0 || h.key_len > NESSIE_KEY_MAX ||
        DTE_HDR_SIZE + h.key_len > nd->class_size[cls] || nessie_item_dead(nd, &h))
        return true;
    unsigned char key[NESSIE_KEY_MAX];
    if (fab_local_read(nd->fab, FAB_REGION_DATA, off + DTE_HDR_SIZE, key, h.key_len) != FAB_OK)
        return true;
    /* A committed value's state word changes only when it is marked recycled, and its slot is
     * reused only a quarantine later: the same word after the key was read means the key read
     * is this life's. */
    uint64_t state = __atomic_load_n((uint64_t *)(void *)(nd->data + off + DTE_OFF_STATE),
                                     __ATOMIC_ACQUIRE);
    if (state != h.state)
        return true;
    struct key_plan kp;
    key_plan_make(&kp, nd, key, h.key_len);
    uint64_t mine = ite_make(nd->cfg.self, cls, off, dte_gen(h.state), kp.filter);
    int cur = dump_current(dw->ctx, mine, &kp);
    if (cur < 0)
        dw->undecided = true;
    if (cur <= 0)
        return true;
    if (!dw->item_fn)
        return dw->fn(dw->user, key, h.key_len);
    struct nessie_item it = {.value_len = h.value_len, .flags = h.flags, .exptime = h.exptime,
                             .version = h.version, .access = h.access,
                             .meta = (h.flags8 & DTE_F_META) >> DTE_F_META_SHIFT};
    return dw->item_fn(dw->user, key, h.key_len, &it);
}

int nessie_dump_local(struct nessie_ctx *ctx, uint64_t *cursor, size_t max_slots,
                      nessie_dump_fn fn, void *user)
{
    if (!ctx || !cursor || !fn || *cursor >= ctx->node->cfg.data_bytes)
        return NESSIE_INVALID;
    struct dump_walk dw = {.ctx = ctx, .fn = fn, .cls = -1, .user = user};
    slab_walk(&ctx->node->slab, cursor, max_slots ? max_slots : SIZE_MAX, dump_slot, &dw);
    return dw.undecided ? NESSIE_FABRIC_ERROR : NESSIE_OK;
}

int nessie_dump_class(struct nessie_ctx *ctx, int cls, uint64_t *cursor, size_t max_slots,
                      nessie_dump_item_fn fn, void *user)
{
    if (!ctx || !cursor || !fn || *cursor >= ctx->node->cfg.data_bytes || cls < -1 ||
        (cls >= 0 && (uint32_t)cls >= ctx->node->nclasses))
        return NESSIE_INVALID;
    struct dump_walk dw = {.ctx = ctx, .item_fn = fn, .cls = cls, .user = user};
    slab_walk(&ctx->node->slab, cursor, max_slots ? max_slots : SIZE_MAX, dump_slot, &dw);
    return dw.undecided ? NESSIE_FABRIC_ERROR : NESSIE_OK;
}
