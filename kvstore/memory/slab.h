/*
 * slab.h - the owner's allocator of its data region: size classes of growing slot size carved
 * from fixed-size pages (memcached's slab idea), free lists kept in process memory and rebuilt
 * from the region when a restarted node re-attaches it. Only the owning node allocates from its
 * region (DESIGN.md); other nodes only mark entries recycled, which this allocator finds again
 * by scanning. Thread-safe.
 */
#ifndef NESSIE_KVSTORE_SLAB_H
#define NESSIE_KVSTORE_SLAB_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"

struct slab_class {
    uint32_t slot_bytes;
    /* Free slot offsets, a FIFO ring (free[head], then the next nfree - 1 modulo cap): the slot
     * freed longest ago is reused first, so a slot's lives are as far apart as the free slots
     * allow, not one quarantine apart as a stack would make them (layout.h, "Lives"). */
    uint64_t *free;
    size_t head, nfree, cap;
    uint64_t slots;       /* slots in pages assigned to this class */
    /* Marked recycled and not yet expired: counted by the recycle scan as it passes, published
     * when a pass over all pages completes (a stat, possibly one pass old). */
    uint64_t recycled, recycled_pass;
    /* ... of which peers marked (their marks carry no owner time and are not queued): with
     * `queued`, the slots on their way back, which the evictor counts (slab_class_state) */
    uint64_t peer_recycled, peer_recycled_pass;
    /* Committed and not recycled (items, and tombstones on their way out), the same way. */
    uint64_t used, used_pass, bytes, bytes_pass;
    /* ... of which values held for full peers (DTE_F_PLACED), the same way. */
    uint64_t placed, placed_pass, placed_bytes, placed_bytes_pass;
    uint64_t queued;      /* in the owner's quarantine queue (slab_quarantine) */
    /* Free slots only tombstones may take (DELETE and eviction must work on a full node). */
    uint64_t reserve;
    /* Allocations so far (the evictor's rate estimate), and the pages assigned to the class
     * (for sampling victims), in no order. */
    uint64_t allocs, failed; /* ... and allocations refused (tombstones: sent to a larger class) */
    uint64_t refused_ms;     /* when one was last refused (nessie_mono_ms, base/clock.h: the clock of quarantines): rebalance spares it */
    uint64_t value_refused_ms; /* ... a value's: writers wait, tombstones keep off its slots */
    uint32_t *pages;
    uint32_t npages, pages_cap;
};

/* What an allocation is for: a tombstone (a DELETE's or an eviction's blank entry) may take the
 * reserve, and a slot of a larger class when its own has none; a value may not. A late value
 * (its writer waited a whole expiration period for room) may take a free slot of a page being
 * drained for another class: the drain then takes longer (it evicts the new item in its turn),
 * but a drain holds its page's free slots for up to several periods, and writers whose only
 * free slots were there were refused (bench/eviction.sh, with a drain for tombstones). */
enum slab_use { SLAB_FOR_VALUE = 0, SLAB_FOR_TOMBSTONE, SLAB_FOR_LATE_VALUE };

struct slab {
    unsigned char *base;  /* this node's DATA region, mapped */
    struct data_hdr *hdr;
    uint8_t *page_class;  /* persistent page table, in the region */
    uint32_t nclasses;
    struct slab_class cls[ITE_MAX_CLASSES];
    /* One lock for the free lists and page assignment: allocation is a push/pop, far shorter than
     * any fabric operation around it, so finer locking would buy nothing measurable yet. */
    pthread_mutex_t lock;
    uint64_t next_page;   /* pages below this are assigned (assignment goes in page order) */
    uint64_t scan_page, scan_slot; /* cursor of the incremental recycle scan */
    uint64_t scanned;              /* slots it visited since the start (allocations' own scans
                                    * included): what the recycler's pace costs */
    uint32_t *page_free;  /* per page: its slots on a free list (process memory, rebuilt) */
    /* Per page: when a slot of it last came back to a free list (nessie_mono_ms; the open's time
     * after a re-attach). A page is divided anew only late_ms after that: a peer's WRITE that
     * nobody waits for (an access hint, evict.c) may land that long after its post, and must
     * land in the slot it was meant for, never inside another class's item (issue 26, finding
     * 4). late_ms is the fabric's request bound (slab_set_late_ms; 0 on shm). */
    uint64_t *page_freed_ms;
    uint64_t late_ms;
    uint64_t rebalanced;  /* pages moved from one class to another */
    uint64_t quarantine_ms; /* a recycled slot is freed this long after the scan first sees it */
    uint64_t reserve_pages; /* unassigned pages only tombstones may take */
    /* Pages that may be assigned at most: the region's, or fewer once an operator lowered the
     * limit (memcached's cache_memlimit: slab_set_limit). Under the lock. */
    uint64_t page_limit;
    /* The page being emptied for another class (slab_drain), or -1: its free slots are not
     * handed out again, so that once its items are evicted and their quarantine is over it is
     * entirely free and rebalance_locked gives it to drain_for. */
    int64_t drain_page;
    uint32_t drain_for;
    uint64_t drain_started_ms;
    /* Slots this owner marked recycled itself, oldest mark first: freed the moment their
     * quarantine ends (slab_reap) rather than when the scan next passes them, so the evictor and
     * waiting writers get them back on time. Peers' marks are found by the scan only. */
    struct slab_qent {
        uint64_t off;
        uint32_t cls, gen;
    } *q;
    size_t qhead, qlen, qcap;
};

/* Peers' marks of class c as the scan saw them: the larger of the last pass's count and the
 * current pass's so far. Called with the lock held. */
static inline uint64_t slab_peer_marks(const struct slab_class *c)
{
    return c->peer_recycled > c->peer_recycled_pass ? c->peer_recycled : c->peer_recycled_pass;
}

/* Slot geometry for a configuration: fills class sizes and page size; the largest class holds
 * the largest DTE an item of max_item bytes needs (layout.h, dte_max_size). Returns the number
 * of classes, or 0 if the configuration cannot be laid out (logged). */
uint32_t slab_geometry(uint64_t region_bytes, uint64_t max_item, uint32_t *class_size,
                       uint64_t *page_bytes, uint64_t *page_count, uint64_t *pages_offset);

/* Format a new region (fresh=true) or re-attach an existing one and rebuild the free lists.
 * quarantine_ms: how long a slot marked recycled stays out of use, from the moment this owner's
 * scan first sees the mark (on this owner's monotonic clock; a re-attach starts every pending
 * quarantine again). Returns 0, or -1 (logged) if the region's header does not match the
 * configuration. */
int slab_open(struct slab *s, void *region, uint64_t region_bytes, uint64_t max_item, bool fresh,
              uint64_t quarantine_ms);
void slab_close(struct slab *s);

/* Smallest class whose slots hold `bytes`, or -1 if none (too big). */
int slab_class_for(const struct slab *s, uint64_t bytes);
/* Let at most bytes of pages be assigned from now on (memcached's cache_memlimit; all the
 * region's pages when bytes is more). Returns false, and changes nothing, when that is fewer
 * pages than are assigned already (with the tombstones' reserve): pages given to classes are
 * never taken back for this. */
bool slab_set_limit(struct slab *s, uint64_t bytes);
/* Slots in one page of class cls. */
uint64_t slab_slots_per_page(const struct slab *s, uint32_t cls);

/* Pages are divided anew only ms after their last slot came back (see page_freed_ms). */
void slab_set_late_ms(struct slab *s, uint64_t ms);

/* Take a free slot of class cls: free list (oldest first), else a new page, else a scan for
 * recycled slots whose quarantine is over, else a page another class holds entirely free. A
 * value never takes a class's reserve or the reserve pages; a tombstone may, and takes a slot of
 * the next larger class that has one when cls has none. Returns 0, *offset and *cls_out (the
 * class of the slot), or -1 when the region has nothing of that size for that use (out of
 * memory). The slot's state word still holds the generation of its last life (the caller bumps
 * it). */
int slab_alloc(struct slab *s, uint32_t cls, enum slab_use use, uint64_t *offset,
               uint32_t *cls_out);

/* Whether the region has unassigned pages a value may still take (no class needs eviction). */
bool slab_has_spare_pages(struct slab *s);

/* Whether a value of class cls was ever refused (since this process opened the region). */
bool slab_values_refused(struct slab *s, uint32_t cls);

/* Class cls as the evictor sees it: free slots (reserve excluded), slots waiting out their
 * quarantine (the owner's queue, and peers' marks as the scan saw them), slots in all, items
 * (as of the scan's last pass), allocations so far, allocations refused so far (tombstones'
 * included, also when a larger class took them in). */
void slab_class_state(struct slab *s, uint32_t cls, uint64_t *nfree, uint64_t *pending,
                      uint64_t *items,
                      uint64_t *slots, uint64_t *allocs, uint64_t *failed);

/*
 * A class that needs room and cannot get it from its own items (it has no page, or no item to
 * evict) gets a whole page of another class (memcached's slab reassignment with eviction): pick
 * a page of the class holding the most pages, stop handing out its free slots, and let the
 * caller evict every item in it; once their quarantine is over the page is entirely free, and
 * the next allocation for cls takes it. One page drains at a time; a drain that has not ended
 * after max_ms is given up (its items came back faster than they could be evicted). Returns
 * true and the page's first slot offset, its class and slot count (the page may already be
 * draining for cls), false if no other class has a page to give.
 */
bool slab_drain(struct slab *s, uint32_t cls, uint64_t max_ms, uint64_t *first, uint32_t *page_cls,
                uint64_t *slots);

/* Up to n random slots of class cls (offsets into *offs; *rng is an xorshift state). Returns
 * how many it drew (0 if the class has no page). */
uint32_t slab_sample(struct slab *s, uint32_t cls, uint64_t *rng, uint64_t *offs, uint32_t n);

/* Whether offset is the start of a slot of class cls now (a page changes class when it moves:
 * an offset sampled before may then point into the middle of another class's slot). */
bool slab_slot_of_class(struct slab *s, uint32_t cls, uint64_t offset);

/* Whether class cls has slots marked recycled that have not expired yet, as the scans last saw
 * them, or a page draining for it: an allocation that failed may succeed once they expire
 * (within one period). */
bool slab_pending(struct slab *s, uint32_t cls);

/* The owner marked the slot at offset (class cls, life gen) recycled, with its mark time in the
 * state word: queue it to be freed when its quarantine ends. Never fails (a slot that cannot be
 * queued is found by the scan). */
void slab_quarantine(struct slab *s, uint32_t cls, uint64_t offset, uint32_t gen);

/* Free the queued slots whose quarantine ended before now_ms. Returns how many. */
size_t slab_reap(struct slab *s, uint64_t now_ms);

/* Give back a slot that was never made visible (its CAS failed for sure): no quarantine. */
void slab_free_unpublished(struct slab *s, uint32_t cls, uint64_t offset);

/* Scan up to max_slots slots from the cursor: start the quarantine of slots newly marked
 * recycled, and return to the free lists those whose quarantine ended before now_ms (this
 * owner's CLOCK_MONOTONIC, ms). Returns how many it freed. */
size_t slab_scan(struct slab *s, size_t max_slots, uint64_t now_ms);


/* Call fn on the next n slots from the cursor (*page, *slot), which it advances and wraps;
 * without the lock, so fn may take its time (the evictor's reclaim crawl). */
void slab_crawl(struct slab *s, uint64_t *page, uint64_t *slot, size_t n,
                void (*fn)(void *arg, uint32_t cls, uint64_t offset), void *arg);

/*
 * Call fn on the slots of the assigned pages in region order, from the slot at or after offset
 * *pos (0: the first slot), at most n of them, without the lock (fn may take its time: the dump's
 * index reads). fn returns false to stop before that slot. On return *pos is where the next walk
 * starts: the slot fn refused or the first one past the n, or 0 when no slot is left. A position
 * that a page's change of class has put inside a slot starts at the page's next slot boundary.
 */
void slab_walk(struct slab *s, uint64_t *pos, size_t n,
               bool (*fn)(void *arg, uint32_t cls, uint64_t offset), void *arg);

/* Committed items (not tombstones) and their bytes, and of those the values held for full peers
 * (DTE_F_PLACED) and theirs, as of the recycle scan's last full pass. */
void slab_usage(struct slab *s, uint64_t *items, uint64_t *bytes, uint64_t *placed,
                uint64_t *placed_bytes);

/* Call fn on every slot of every assigned page (for the leak sweep and tests). */
void slab_for_each_slot(struct slab *s, void (*fn)(void *arg, uint32_t cls, uint64_t offset),
                        void *arg);

#endif
