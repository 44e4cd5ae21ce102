/*
 * items.c - an item's time, as every node judges it: versions (CAS tokens that order writes and
 * flushes), memcached's exptimes, flush_all immediate and delayed, and whether an item is dead
 * (expired or flushed) although still present.
 */
#include "memory.h"

uint64_t nessie_flush_ns(struct nessie_node *node)
{
    return __atomic_load_n(&node->hdr->flush_ns, __ATOMIC_ACQUIRE);
}

/* The delayed flush this node knows of, if its time has come (else 0). */
uint64_t nessie_flush_at_due(struct nessie_node *node, uint64_t now_real_ns)
{
    uint64_t at = __atomic_load_n(&node->hdr->flush_at_ns, __ATOMIC_ACQUIRE);
    return at && at <= now_real_ns ? at : 0;
}

uint32_t nessie_abs_exptime(int64_t exptime)
{
    const int64_t month = 60 * 60 * 24 * 30;
    int64_t now = (int64_t)(nessie_real_ns() / 1000000000ULL);
    if (exptime == 0)
        return 0;
    if (exptime < 0)
        return 1; /* in the past */
    if (exptime <= month)
        return (uint32_t)(now + exptime);
    return exptime > UINT32_MAX ? UINT32_MAX : (uint32_t)exptime;
}

bool nessie_item_dead(struct nessie_node *nd, const struct dte_hdr *h)
{
    return nessie_item_dead_at(nd, h, 0);
}

bool nessie_item_dead_at(struct nessie_node *nd, const struct dte_hdr *h, uint64_t read_ns)
{
    uint64_t vt = VERSION_TIME(h->version);
    if (vt <= nessie_flush_ns(nd))
        return true;
    /* The clock only when something depends on it (this runs on every GET). */
    uint64_t at = __atomic_load_n(&nd->hdr->flush_at_ns, __ATOMIC_ACQUIRE);
    if (h->exptime == 0 && (at == 0 || vt > at))
        return false;
    uint64_t now = nessie_real_ns();
    if (read_ns) {
        /* Back to the moment of the read: the monotonic time since, off the real time now. */
        uint64_t since = nessie_mono_ns() - read_ns;
        now = now > since ? now - since : 0;
    }
    if (h->exptime != 0 && (uint64_t)h->exptime <= now / 1000000000ULL)
        return true;
    return at != 0 && vt <= at && at <= now;
}

uint64_t nessie_version_next(struct nessie_node *node)
{
    /* last_version lives in the region, so versions keep increasing across restarts. */
    uint64_t *lv = &node->hdr->last_version;
    uint64_t last = __atomic_load_n(lv, __ATOMIC_RELAXED), next;
    do {
        uint64_t real = nessie_real_ns(), t = VERSION_TIME(real);
        uint64_t floor = VERSION_TIME(last) + 0x1000;
        uint64_t flush = VERSION_TIME(nessie_flush_ns(node)) + 0x1000;
        uint64_t at = nessie_flush_at_due(node, real); /* a delayed flush in effect: write after it */
        if (at && VERSION_TIME(at) + 0x1000 > flush)
            flush = VERSION_TIME(at) + 0x1000;
        if (t < floor)
            t = floor;
        if (t < flush)
            t = flush;
        next = t | (node->cfg.self & 0xFFF);
    } while (!__atomic_compare_exchange_n(lv, &last, next, false, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return next;
}
