/*
 * node.c - what every room does with a node's memory through a context: its scratch buffers,
 * the clock the node publishes for orphan ages, a DTE's state word CASed through the fabric, an
 * index entry read by position.
 */
#include <stdlib.h>

#include "memory.h"

unsigned char *nessie_ctx_buf(struct nessie_ctx *ctx, int b, size_t len)
{
    if (ctx->cap[b] < len) {
        size_t cap = ctx->cap[b] ? ctx->cap[b] : 4096;
        while (cap < len)
            cap *= 2;
        unsigned char *p = realloc(ctx->buf[b], cap);
        if (!p)
            return NULL;
        ctx->buf[b] = p;
        ctx->cap[b] = cap;
    }
    return ctx->buf[b];
}

void nessie_clock_publish(struct nessie_node *nd)
{
    /* Stores only when the published value is a millisecond old: several recycler threads call
     * this, and peers read the line; rewriting it on every call would only bounce it. */
    uint64_t now = nessie_mono_ns();
    if (now - __atomic_load_n(&nd->hdr->clock_ns, __ATOMIC_RELAXED) >= 1000000ULL)
        __atomic_store_n(&nd->hdr->clock_ns, now, __ATOMIC_RELAXED);
}

int nessie_state_cas(struct fab_ep *ep, uint64_t ite, uint64_t expect, uint64_t swap,
                     uint64_t *old)
{
    struct fab_wr wr = {.opcode = FAB_OP_CAS, .node = ite_node(ite), .region = FAB_REGION_DATA,
                        .offset = ite_offset(ite) + DTE_OFF_STATE, .local = old, .length = 8,
                        .compare = expect, .swap = swap};
    return fab_exec(ep, &wr) == FAB_OK ? NESSIE_OK : NESSIE_FABRIC_ERROR;
}

int nessie_ite_read_pos(struct fab_ep *ep, const struct nessie_node *nd, uint64_t pos,
                        uint64_t *out)
{
    struct fab_wr rd = {.opcode = FAB_OP_READ, .node = (uint32_t)(pos / nd->cfg.index_slots),
                        .region = FAB_REGION_INDEX, .offset = (pos % nd->cfg.index_slots) * 8,
                        .local = out, .length = 8};
    return fab_exec(ep, &rd) == FAB_OK ? NESSIE_OK : NESSIE_FABRIC_ERROR;
}
