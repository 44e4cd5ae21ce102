/*
 * demote.c - the index's traffic with the flash log (issue 31): what the evictor demotes
 * instead of dropping, and the two ways the log makes room, dropping its oldest page and
 * compacting a sparse one.
 *
 * Every move of an item between memory and the log, or within the log, is one CAS on the exact
 * word of its index entry (nessie_swing_entry, upcall.h), made after the record it names is
 * whole in the log, so a reader meets the old entry or the new, both naming the same value, and
 * a writer that read the old one loses its CAS and starts again. A record is unlinked only once
 * no entry can name it, and a page freed only once none of its records can be named: a reader
 * that read an entry before it was swung, and reads its record after the page was freed (and
 * perhaps written again), finds no such record (the location's life, the key, the CRC), and
 * takes the entry out by CAS on the word it read, which fails since the entry was swung: it
 * reads the key again (protocol.h, proto_fetch_key). That is the compaction race memcached's
 * extstore once lost items to (items read while their page was compacted), and
 * test_sd's test_flash_compaction_race plays it step by step.
 */
#include <stdlib.h>

#include "demote.h"
#include "flash.h"
#include "upcall.h"

/* Tunables, with their reasons:
 * - DEMOTE_COMPACT_RESERVE: compaction starts when this few pages are free, before the log is
 *   full, because its copies need room: a page at most DEMOTE_COMPACT_LIVE_PCT live fits in
 *   the page being filled and one free page, and frees a whole one (extstore also compacts
 *   when its free pages run low);
 * - DEMOTE_COMPACT_LIVE_PCT: a page is worth compacting when at most half of it is live: its
 *   copies cost at most half a page's writes per page freed, a write amplification of at most
 *   2 for the items that outlive their neighbours (memcached's extstore compacts at a
 *   comparable threshold); a page fuller than that is dropped when it is the oldest;
 * - DEMOTE_COMPACT_IDLE_NS: after a compaction that freed nothing (no page sparse enough, no
 *   room for its copies), the next waits this long: a search reads the whole page table under
 *   the log's mutex (a 1 TiB log of 2 MiB pages has half a million), and pages thin out only as
 *   their items are rewritten, which a millisecond of demotions barely changes. */
#define DEMOTE_COMPACT_RESERVE 2
#define DEMOTE_COMPACT_LIVE_PCT 50
#define DEMOTE_COMPACT_IDLE_NS 1000000ULL
/* - DEMOTE_SEEN_TICK_SHIFT: the table of recent flash reads (memory.h, flash_seen) keeps a
 *   read's time in 2^4 = 16 ms ticks, in the 24 bits beside the 40-bit location: a window of up
 *   to 74 hours, judged to a tick (promote_ms is a rate of reuse, not a deadline). */
#define DEMOTE_SEEN_TICK_SHIFT 4
#define DEMOTE_SEEN_TICK_BITS 24

/* A record just linked whose page was dropped between its append and the swing that linked it
 * (this thread held up, others filling the log): the drop could not find the entry yet. The
 * entry is taken out now, as the drop would have (an eviction), rather than left naming a record
 * that is gone. */
static void take_if_dropped(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t loc)
{
    struct nessie_node *nd = ctx->node;
    if (!flash_has(nd->flash, loc))
        (void)nessie_swing_entry(ctx, kp, ite_make_flash(nd->cfg.self, loc, kp->filter), 0);
}

/* The full log's room: the oldest page's items are dropped, as evictions are, each flash entry
 * still naming one of its records taken out of the index by CAS on the exact word (an entry
 * rewritten or unlinked since names another record, or none), then the page is freed, unless an
 * entry may still name one of its records (flash_drop_oldest). */
struct flash_drop {
    struct nessie_ctx *ctx;
    uint64_t dropped;
    bool kept; /* a record whose entry may still name it: the page is not freed now */
};

static bool flash_drop_record(void *user, uint64_t loc, const void *key, uint32_t klen,
                              const void *value, uint32_t vlen, const struct flash_meta *meta)
{
    (void)value, (void)vlen, (void)meta;
    struct flash_drop *d = user;
    struct nessie_node *nd = d->ctx->node;
    struct key_plan kp;
    key_plan_make(&kp, nd, key, klen);
    uint64_t fite = ite_make_flash(nd->cfg.self, loc, kp.filter);
    int rc = nessie_swing_entry(d->ctx, &kp, fite, 0);
    if (rc == NESSIE_EXISTS) /* refused beside another entry, or changed: the DELETE path */
        rc = nessie_evict_entry(d->ctx, &kp, fite);
    if (rc == NESSIE_OK)
        d->dropped++;
    else if (rc != NESSIE_NOT_FOUND)
        d->kept = true;
    return true;
}

/* Returns whether a page was freed. */
static bool flash_drop_oldest(struct nessie_ctx *ctx)
{
    struct nessie_node *nd = ctx->node;
    uint64_t life;
    int64_t page = flash_oldest_page(nd->flash, &life);
    if (page < 0)
        return false;
    struct flash_drop d = {.ctx = ctx};
    int erc = flash_page_each(nd->flash, page, life, flash_drop_record, &d, NULL);
    CTR_ADD(ctx->ctr.flash_dropped, d.dropped);
    /* Freed only once no entry can name a record of it: one still linked (its drop refused,
     * or unknown) keeps the page for a later drop, and the log's victims are evicted
     * meanwhile. A page that could not be read, or whose records failed their CRC, is freed:
     * entries naming those records read as gone and are taken out when met. */
    if (d.kept && erc == FLASH_OK)
        return false;
    int rc = flash_page_free(nd->flash, page, life);
    return rc == FLASH_OK || rc == FLASH_MISS; /* MISS: freed by another thread meanwhile */
}

/* Compaction: each live record of the page copied on and its entry swung to the copy. */
struct compact_run {
    struct nessie_ctx *ctx;
    uint64_t rescued;
    bool kept; /* a record an entry may still name: the page is not freed now */
};

static bool compact_record(void *user, uint64_t loc, const void *key, uint32_t klen,
                           const void *value, uint32_t vlen, const struct flash_meta *meta)
{
    struct compact_run *r = user;
    struct nessie_node *nd = r->ctx->node;
    struct key_plan kp;
    key_plan_make(&kp, nd, key, klen);
    uint64_t nloc;
    if (flash_rewrite(nd->flash, key, klen, value, vlen, meta, &nloc) != FLASH_OK) {
        r->kept = true; /* no room for the copy, or the device failed: the rest stay */
        return false;
    }
    int rc = nessie_swing_entry(r->ctx, &kp, ite_make_flash(nd->cfg.self, loc, kp.filter),
                                ite_make_flash(nd->cfg.self, nloc, kp.filter));
    if (rc == NESSIE_OK) {
        (void)flash_unlink(nd->flash, loc);
        r->rescued++;
        take_if_dropped(r->ctx, &kp, nloc);
        return true;
    }
    /* Unknown (TIMEOUT, a lost answer): the entry names one record or the other, and both
     * stay live. Changed (NOT_FOUND, EXISTS: rewritten, deleted, dropped since the page was
     * read): nothing names the copy, nor the record (unlinked here too: a take-out by another
     * node never unlinks it). Another error (the view's lease ran out): nothing changed, and
     * the entry may still name the record. */
    if (rc != NESSIE_TIMEOUT)
        (void)flash_unlink(nd->flash, nloc);
    if (rc == NESSIE_NOT_FOUND || rc == NESSIE_EXISTS)
        (void)flash_unlink(nd->flash, loc);
    else
        r->kept = true;
    return true;
}

bool demote_compact(struct nessie_ctx *ctx, uint32_t max_live_pct)
{
    struct nessie_node *nd = ctx->node;
    /* acq_rel: a compaction that follows another sees its page table's work through the log's
     * mutex anyway; the flag only keeps two from copying the same page. */
    if (atomic_exchange_explicit(&nd->flash_compacting, true, memory_order_acq_rel))
        return false;
    bool freed = false;
    uint64_t life;
    int64_t page = flash_sparsest_page(nd->flash, max_live_pct, &life);
    if (page >= 0) {
        struct compact_run r = {.ctx = ctx};
        int erc = flash_page_each(nd->flash, page, life, compact_record, &r, NULL);
        CTR_ADD(ctx->ctr.flash_rescued, r.rescued);
        /* A page that could not be read is left to the oldest page's drop, which frees it
         * (its entries then read as gone); MISS: dropped by another thread meanwhile. The
         * copies may still be in the page being filled: a daemon that dies before it is
         * written loses them, as it loses the items it demoted there (sealing it now would
         * leave it half empty, and compaction would gain no page). */
        if (erc == FLASH_OK && !r.kept && flash_page_free(nd->flash, page, life) == FLASH_OK) {
            CTR_ADD(ctx->ctr.flash_compacted, 1);
            freed = true;
        }
    }
    /* Nothing freed (none sparse enough, no room for the copies, a page kept): the next
     * search waits DEMOTE_COMPACT_IDLE_NS, rather than each demotion scanning and copying
     * again. */
    if (!freed)
        atomic_store_explicit(&nd->flash_compact_idle_ns, nessie_mono_ns(), memory_order_relaxed);
    atomic_store_explicit(&nd->flash_compacting, false, memory_order_release);
    return freed;
}

/* demote.h has the contract. */
int demote_item(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t ite, uint64_t off,
                const struct dte_hdr *h)
{
    struct nessie_node *nd = ctx->node;
    uint32_t klen = h->key_len, vlen = h->value_len;
    /* Not the context's buffers: an eviction may run inside a write that holds them. */
    unsigned char *buf = malloc((size_t)klen + vlen);
    if (!buf)
        return NESSIE_NO_MEMORY;
    if (fab_local_read(nd->fab, FAB_REGION_DATA, off + DTE_HDR_SIZE, buf, klen + vlen) !=
        FAB_OK) {
        free(buf);
        return NESSIE_NO_MEMORY;
    }
    const struct flash_meta m = {.version = h->version, .flags = h->flags,
                                 .exptime = h->exptime, .flags8 = h->flags8 & DTE_F_META};
    if (flash_pages_free(nd->flash) <= DEMOTE_COMPACT_RESERVE &&
        nessie_mono_ns() - atomic_load_explicit(&nd->flash_compact_idle_ns,
                                                memory_order_relaxed) >= DEMOTE_COMPACT_IDLE_NS)
        (void)demote_compact(ctx, DEMOTE_COMPACT_LIVE_PCT);
    uint64_t loc;
    int frc = flash_append(nd->flash, buf, klen, buf + klen, vlen, &m, &loc);
    for (int drops = 0; frc == FLASH_FULL && drops < 2 && flash_drop_oldest(ctx); drops++)
        frc = flash_append(nd->flash, buf, klen, buf + klen, vlen, &m, &loc);
    free(buf);
    if (frc != FLASH_OK)
        return NESSIE_NO_MEMORY;
    /* Read after the value: a slot recycled and written again since has another generation,
     * which the CAS below, on the exact word, tells apart. */
    int rc = nessie_swing_entry(ctx, kp, ite, ite_make_flash(nd->cfg.self, loc, kp->filter));
    if (rc != NESSIE_OK) {
        /* Unknown (TIMEOUT): the entry may name the record; it stays live (a compaction or
         * the page's drop settles it). Otherwise nothing names it. */
        if (rc != NESSIE_TIMEOUT)
            (void)flash_unlink(nd->flash, loc);
        return rc == NESSIE_NO_MEMORY ? NESSIE_EXISTS : rc;
    }
    nessie_recycle(ctx, ite);
    CTR_ADD(ctx->ctr.flash_demoted, 1);
    take_if_dropped(ctx, kp, loc);
    return NESSIE_OK;
}

/* Promotion's rule (memcached's extstore recaches an item read again, to a rate): a second read
 * of the same record within promote_ms. A record is read twice in a row only if its entry still
 * names it, so two reads are one item's, and a rewritten item is a new record that starts over. */
bool demote_promote_wanted(struct nessie_node *nd, uint64_t ite)
{
    uint64_t window = nd->cfg.flash_promote_ms;
    if (window == 0 || nd->cfg.no_evict)
        return false;
    const uint64_t mask = (1ULL << DEMOTE_SEEN_TICK_BITS) - 1;
    uint64_t loc = ite_flash_loc(ite);
    uint64_t tick = (nessie_mono_ms() >> DEMOTE_SEEN_TICK_SHIFT) & mask;
    /* Fibonacci hashing: locations are page-aligned runs, their low bits alike. */
    uint64_t slot = (loc * 0x9E3779B97F4A7C15ULL) >> 52;
    _Static_assert(NESSIE_FLASH_SEEN_SLOTS == 1 << 12, "the hash keeps 12 bits");
    uint64_t mine = loc << DEMOTE_SEEN_TICK_BITS | tick;
    uint64_t was = atomic_exchange_explicit(&nd->flash_seen[slot], mine, memory_order_relaxed);
    if (was >> DEMOTE_SEEN_TICK_BITS != loc || was == 0)
        return false;
    uint64_t ago = (tick - (was & mask)) & mask;
    if (ago > (window >> DEMOTE_SEEN_TICK_SHIFT) + 1)
        return false;
    /* One promoter per second read: the slot is emptied by CAS on the word this read stored,
     * so the GETs of a hot item that read it at once do not each copy it (all but one would
     * lose the swing and give the copy back). */
    return atomic_compare_exchange_strong_explicit(&nd->flash_seen[slot], &mine, 0,
                                                   memory_order_relaxed, memory_order_relaxed);
}
