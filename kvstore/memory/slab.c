/* slab.c - see slab.h. */
#include "slab.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "hash.h"
#include "log.h"

/* Tunables of the carving, with their reason:
 * - the smallest slot holds a header, a short key and a short value;
 * - slots grow by 1.25x (memcached's default factor): at most 25% of a slot is wasted, and a
 *   1 MiB maximum needs ~40 classes, a 64 MiB one ~60, inside the ITE's 6 class bits;
 * - a page holds at least one slot of the largest class and is never smaller than 64 KiB, so
 *   small classes get many slots per page. */
#define SLAB_MIN_SLOT 128
#define SLAB_GROWTH_NUM 5
#define SLAB_GROWTH_DEN 4
#define SLAB_MIN_PAGE (64 * 1024)

static uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

static _Atomic uint64_t *word_at(unsigned char *base, uint64_t off)
{
    return (_Atomic uint64_t *)(base + off);
}

/* The 4-byte quarantine end of the slot at off (layout.h): ms modulo 2^32, 0 = none. */
static _Atomic uint32_t *quarantine_at(unsigned char *base, uint64_t off)
{
    return (_Atomic uint32_t *)(base + off + DTE_OFF_QUARANTINE);
}

uint32_t slab_geometry(uint64_t region_bytes, uint64_t max_item, uint32_t *class_size,
                       uint64_t *page_bytes, uint64_t *page_count, uint64_t *pages_offset)
{
    uint64_t largest = round_up(dte_max_size(max_item), ITE_UNIT);
    uint32_t n = 0;
    uint64_t size = SLAB_MIN_SLOT;
    if (largest < SLAB_MIN_SLOT)
        largest = SLAB_MIN_SLOT;
    while (n < ITE_SIZE_CLASSES) { /* the last class is the flash tier's (layout.h) */
        if (size >= largest) {
            class_size[n++] = (uint32_t)largest;
            break;
        }
        class_size[n++] = (uint32_t)size;
        uint64_t next = round_up(size * SLAB_GROWTH_NUM / SLAB_GROWTH_DEN, ITE_UNIT);
        size = next > size ? next : size + ITE_UNIT;
    }
    if (class_size[n - 1] != largest) {
        log_error("slab: max item size %llu needs more than %u size classes",
                  (unsigned long long)max_item, ITE_SIZE_CLASSES);
        return 0;
    }
    /* A page holds one slot of the largest class, and at least SLAB_MIN_PAGE bytes. It is not
     * rounded further: the largest DTE is a few bytes past a power of two (dte_max_size), and a
     * page rounded up to the next 64 KiB would waste that much of each. */
    uint64_t page = largest > SLAB_MIN_PAGE ? largest : SLAB_MIN_PAGE;
    /* Pages follow the header and the page table (one byte per page, bounded above by the number
     * of pages that could fit if the table took no room). */
    uint64_t max_pages = region_bytes / page;
    uint64_t offset = round_up(DATA_HDR_BYTES + max_pages, 4096);
    if (offset >= region_bytes || (region_bytes - offset) / page == 0) {
        log_error("slab: a data region of %llu bytes holds no page of %llu bytes (max item size "
                  "%llu); make it larger or the max item size smaller",
                  (unsigned long long)region_bytes, (unsigned long long)page,
                  (unsigned long long)max_item);
        return 0;
    }
    *page_bytes = page;
    *page_count = (region_bytes - offset) / page;
    *pages_offset = offset;
    return n;
}

static uint64_t page_of(const struct slab *s, uint64_t off)
{
    return (off - s->hdr->pages_offset) / s->hdr->page_bytes;
}

static uint8_t page_class_of(const struct slab *s, uint64_t off)
{
    return atomic_load_explicit((_Atomic uint8_t *)&s->page_class[page_of(s, off)],
                                memory_order_acquire);
}

/* The i-th free slot of class c, oldest first. */
static uint64_t *free_at(struct slab_class *c, size_t i) { return &c->free[(c->head + i) % c->cap]; }

/* Put a slot at the tail of its class's free ring, and count it free in its page (for
 * rebalancing). Returns -1 on out of memory (the slot is then found again by a scan). */
static int push_free(struct slab *s, uint32_t cls, uint64_t off)
{
    struct slab_class *c = &s->cls[cls];
    if (c->nfree == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        uint64_t *p = malloc(cap * sizeof(*p));
        if (!p)
            return -1;
        for (size_t i = 0; i < c->nfree; i++)
            p[i] = *free_at(c, i);
        free(c->free);
        c->free = p;
        c->cap = cap;
        c->head = 0;
    }
    *free_at(c, c->nfree++) = off;
    s->page_free[page_of(s, off)]++;
    s->page_freed_ms[page_of(s, off)] = nessie_mono_ms();
    return 0;
}

void slab_set_late_ms(struct slab *s, uint64_t ms)
{
    pthread_mutex_lock(&s->lock);
    s->late_ms = ms;
    pthread_mutex_unlock(&s->lock);
}

/* Take the oldest free slot of class cls (there is one). */
static uint64_t pop_free(struct slab *s, uint32_t cls)
{
    struct slab_class *c = &s->cls[cls];
    uint64_t off = *free_at(c, 0);
    c->head = (c->head + 1) % c->cap;
    c->nfree--;
    s->page_free[page_of(s, off)]--;
    return off;
}

static uint64_t page_offset(const struct slab *s, uint64_t page)
{
    return s->hdr->pages_offset + page * s->hdr->page_bytes;
}

uint64_t slab_slots_per_page(const struct slab *s, uint32_t cls)
{
    return s->hdr->page_bytes / s->cls[cls].slot_bytes;
}

/* A slot is free when its state has no flag (never used, or reset by the scan; its generation
 * stays) and no quarantine is running. */
static bool slot_free(struct slab *s, uint64_t off)
{
    uint64_t st = atomic_load_explicit(word_at(s->base, off + DTE_OFF_STATE), memory_order_acquire);
    return (st & DTE_FLAGS_MASK) == 0 &&
           atomic_load_explicit(quarantine_at(s->base, off), memory_order_acquire) == 0;
}

/* Record that page p now belongs to class cls (its list of pages, for sampling). */
static int page_list_add(struct slab *s, uint32_t cls, uint64_t p)
{
    struct slab_class *c = &s->cls[cls];
    if (c->npages == c->pages_cap) {
        uint32_t cap = c->pages_cap ? c->pages_cap * 2 : 16;
        uint32_t *np = realloc(c->pages, cap * sizeof(*np));
        if (!np)
            return -1;
        c->pages = np;
        c->pages_cap = cap;
    }
    c->pages[c->npages++] = (uint32_t)p;
    return 0;
}

static void page_list_remove(struct slab *s, uint32_t cls, uint64_t p)
{
    struct slab_class *c = &s->cls[cls];
    for (uint32_t i = 0; i < c->npages; i++)
        if (c->pages[i] == p) {
            c->pages[i] = c->pages[--c->npages];
            return;
        }
}

/* Slots of a class that only tombstones may take: enough for a burst of DELETEs and evictions
 * while the evictor catches up, and never more than an eighth of the class. */
#define SLAB_RESERVE_SLOTS 32

static void set_reserve(struct slab *s, uint32_t cls)
{
    struct slab_class *c = &s->cls[cls];
    c->reserve = c->slots / 8 < SLAB_RESERVE_SLOTS ? c->slots / 8 : SLAB_RESERVE_SLOTS;
}

/* Publish how many unassigned pages a value may still take (data_hdr.room_spare_pages): the
 * figure peers place values by (modes/place.c) and this node's own writers check first. Called
 * with the lock held, or before the slab is shared. */
static void publish_spare(struct slab *s)
{
    uint64_t used = s->next_page + s->reserve_pages;
    uint64_t spare = used < s->page_limit ? s->page_limit - used : 0;
    __atomic_store_n(&s->hdr->room_spare_pages, spare, __ATOMIC_RELAXED);
}

int slab_open(struct slab *s, void *region, uint64_t region_bytes, uint64_t max_item, bool fresh,
              uint64_t quarantine_ms)
{
    uint32_t sizes[ITE_MAX_CLASSES];
    uint64_t page_bytes, page_count, pages_offset;
    uint32_t n = slab_geometry(region_bytes, max_item, sizes, &page_bytes, &page_count,
                               &pages_offset);
    if (n == 0)
        return -1;

    memset(s, 0, sizeof(*s));
    s->base = region;
    s->hdr = region;
    s->page_class = s->base + DATA_HDR_BYTES;
    s->nclasses = n;
    s->quarantine_ms = quarantine_ms;
    pthread_mutex_init(&s->lock, NULL);

    struct data_hdr *h = s->hdr;
    uint64_t magic = atomic_load_explicit((_Atomic uint64_t *)&h->magic, memory_order_acquire);
    if (fresh || magic != DATA_MAGIC) {
        /* Format. The magic goes last (release), so a crash mid-format leaves a region that the
         * next start formats again rather than trusts. */
        h->layout_version = DATA_LAYOUT_VERSION;
        h->class_count = n;
        h->region_bytes = region_bytes;
        h->page_bytes = page_bytes;
        h->page_count = page_count;
        h->pages_offset = pages_offset;
        h->max_item_size = max_item;
        memcpy(h->class_size, sizes, n * sizeof(sizes[0]));
        memset(s->page_class, DATA_PAGE_UNASSIGNED, page_count);
        atomic_store_explicit((_Atomic uint64_t *)&h->magic, DATA_MAGIC, memory_order_release);
    } else if (h->layout_version != DATA_LAYOUT_VERSION || h->region_bytes != region_bytes ||
               h->max_item_size != max_item || h->class_count != n ||
               memcmp(h->class_size, sizes, n * sizeof(sizes[0])) != 0) {
        log_error("slab: the data region was formatted for another configuration (layout %u, "
                  "%llu bytes, max item %llu); wipe it or restore the configuration",
                  h->layout_version, (unsigned long long)h->region_bytes,
                  (unsigned long long)h->max_item_size);
        pthread_mutex_destroy(&s->lock);
        return -1;
    }

    for (uint32_t c = 0; c < n; c++)
        s->cls[c].slot_bytes = sizes[c];
    /* One page in 64 (at least one) stays unassigned until a tombstone needs it: a full region
     * whose pages all went to large values still has room for the blank entries that DELETE
     * and eviction write. */
    s->drain_page = -1;
    s->reserve_pages = h->page_count / 64 ? h->page_count / 64 : 1;
    if (s->reserve_pages >= h->page_count)
        s->reserve_pages = 0;
    s->page_limit = h->page_count;
    s->page_free = calloc(h->page_count, sizeof(*s->page_free));
    s->page_freed_ms = calloc(h->page_count, sizeof(*s->page_freed_ms));
    if (!s->page_free || !s->page_freed_ms) {
        free(s->page_free);
        free(s->page_freed_ms);
        s->page_free = NULL;
        s->page_freed_ms = NULL;
        log_error("slab: out of memory for the page table of %llu pages",
                  (unsigned long long)h->page_count);
        pthread_mutex_destroy(&s->lock);
        return -1;
    }

    /* Rebuild the free lists from the pages (empty after a format). */
    for (uint64_t p = 0; p < h->page_count; p++) {
        uint8_t c = s->page_class[p];
        if (c == DATA_PAGE_UNASSIGNED)
            continue;
        if (c >= n) {
            log_error("slab: page %llu has unknown class %u", (unsigned long long)p, c);
            pthread_mutex_destroy(&s->lock);
            return -1;
        }
        s->next_page = p + 1;
        uint64_t per = slab_slots_per_page(s, c);
        s->cls[c].slots += per;
        set_reserve(s, c);
        if (page_list_add(s, c, p) != 0) {
            slab_close(s);
            return -1;
        }
        for (uint64_t i = 0; i < per; i++) {
            uint64_t off = page_offset(s, p) + i * sizes[c];
            /* A quarantine started by a previous process restarts: its clock is not ours to
             * trust (another boot, for all this process knows). */
            atomic_store_explicit(quarantine_at(s->base, off), 0, memory_order_relaxed);
            if (slot_free(s, off) && push_free(s, c, off) != 0) {
                slab_close(s);
                return -1;
            }
        }
    }
    publish_spare(s);
    return 0;
}

void slab_close(struct slab *s)
{
    for (uint32_t c = 0; c < s->nclasses; c++) {
        free(s->cls[c].free);
        free(s->cls[c].pages);
    }
    free(s->page_free);
    free(s->page_freed_ms);
    free(s->q);
    pthread_mutex_destroy(&s->lock);
    memset(s, 0, sizeof(*s));
}

int slab_class_for(const struct slab *s, uint64_t bytes)
{
    for (uint32_t c = 0; c < s->nclasses; c++)
        if (s->cls[c].slot_bytes >= bytes)
            return (int)c;
    return -1;
}

/* Assign the next unassigned page to cls. A value may not take the reserve pages. Called with
 * the lock held. */
static int grow_class(struct slab *s, uint32_t cls, enum slab_use use)
{
    uint64_t limit = s->page_limit - (use != SLAB_FOR_TOMBSTONE ? s->reserve_pages : 0);
    if (s->next_page >= limit)
        return -1;
    uint64_t p = s->next_page++;
    publish_spare(s);
    uint64_t per = slab_slots_per_page(s, cls);
    /* Persist the assignment before any slot of the page is handed out, so a restart that finds a
     * written slot also finds the page's class. */
    atomic_store_explicit((_Atomic uint8_t *)&s->page_class[p], (uint8_t)cls, memory_order_release);
    s->cls[cls].slots += per;
    set_reserve(s, cls);
    if (page_list_add(s, cls, p) != 0)
        return -1;
    for (uint64_t i = 0; i < per; i++)
        if (push_free(s, cls, page_offset(s, p) + i * s->cls[cls].slot_bytes) != 0)
            return -1;
    return 0;
}

/* Start the quarantine of a slot newly marked recycled, or free it once the quarantine is over.
 * Called with the lock held. */
static bool reclaim_if_expired(struct slab *s, uint32_t cls, uint64_t off, uint64_t now_ms)
{
    _Atomic uint64_t *state = word_at(s->base, off + DTE_OFF_STATE);
    _Atomic uint32_t *quarantine = quarantine_at(s->base, off);
    uint64_t st = atomic_load_explicit(state, memory_order_acquire);
    if (!(st & DTE_RECYCLED)) {
        if ((st & (DTE_BUSY | DTE_COMMITTED)) != (DTE_BUSY | DTE_COMMITTED))
            return false;
        /* Committed: immutable but for its access hint. Its writer stored the header with word
         * stores (fab_copy_to_shared), and over verbs the commit that orders them before this
         * read was the NIC's CAS, which neither the compiler nor ThreadSanitizer sees: load the
         * words, never the plain fields. Only the tail words (lengths, kind) are filled in. */
        _Static_assert(offsetof(struct dte_hdr, value_len) % 8 == 0, "tail words aligned");
        struct dte_hdr h;
        for (size_t w = offsetof(struct dte_hdr, value_len); w < sizeof(h); w += 8) {
            uint64_t v = atomic_load_explicit(word_at(s->base, off + w), memory_order_relaxed);
            memcpy((unsigned char *)&h + w, &v, sizeof(v));
        }
        if (h.kind == DTE_KIND_VALUE) {
            s->cls[cls].used_pass++;
            s->cls[cls].bytes_pass += dte_size(h.key_len, h.value_len);
            if (h.flags8 & DTE_F_PLACED) {
                s->cls[cls].placed_pass++;
                s->cls[cls].placed_bytes_pass += dte_size(h.key_len, h.value_len);
            }
        }
        return false;
    }
    uint32_t q = atomic_load_explicit(quarantine, memory_order_relaxed);
    if (q == 0) {
        /* First sight of the mark: the period starts at the mark if this owner made it (its
         * time is in the state word, set by the marking CAS itself), else now, on this owner's
         * clock, read here after the state's acquire load: not the caller's now_ms, read before
         * its run, since when a peer may have unlinked and marked the slot (a run of the
         * background scan releases the lock every SCAN_CHUNK slots and can take milliseconds).
         * Either is after the unlink, so every reader that read the ITE before the unlink
         * started its attempt earlier still, and times out first (rates of monotonic clocks
         * agree; their values are never compared). Only this scan writes the word, under the
         * lock, before it frees the slot: a late writer could otherwise stamp a later life.
         * Modulo 2^32 ms (49 days), compared as a difference: quarantines last seconds. */
        uint64_t marked = dte_marked_ms(st);
        q = (uint32_t)((marked ? marked - 1 : nessie_mono_ms()) + s->quarantine_ms);
        if (q == 0)
            q = 1; /* 0 means none */
        atomic_store_explicit(quarantine, q, memory_order_relaxed);
    }
    if ((int32_t)(q - (uint32_t)now_ms) > 0) {
        s->cls[cls].recycled_pass++;
        if (!dte_marked_ms(st))
            s->cls[cls].peer_recycled_pass++;
        return false;
    }
    /* Over: no operation that could still hold its ITE is alive (they all time out within one
     * expiration period), so the slot can be reset and reused. The flags go, the generation of
     * its last life stays for the next allocation to bump. A late CAS naming that life fails. */
    atomic_store_explicit(quarantine, 0, memory_order_relaxed);
    atomic_store_explicit(state, dte_state(dte_gen(st), 0), memory_order_release);
    return push_free(s, cls, off) == 0;
}

void slab_quarantine(struct slab *s, uint32_t cls, uint64_t offset, uint32_t gen)
{
    pthread_mutex_lock(&s->lock);
    if (s->qlen == s->qcap) {
        size_t cap = s->qcap ? s->qcap * 2 : 1024;
        struct slab_qent *q = malloc(cap * sizeof(*q));
        if (!q) {
            pthread_mutex_unlock(&s->lock);
            return;
        }
        for (size_t i = 0; i < s->qlen; i++)
            q[i] = s->q[(s->qhead + i) % s->qcap];
        free(s->q);
        s->q = q;
        s->qcap = cap;
        s->qhead = 0;
    }
    s->q[(s->qhead + s->qlen++) % s->qcap] = (struct slab_qent){offset, cls, gen};
    s->cls[cls].queued++;
    pthread_mutex_unlock(&s->lock);
}

/* Called with the lock held. */
static size_t reap_locked(struct slab *s, uint64_t now_ms)
{
    size_t freed = 0;
    while (s->qlen > 0) {
        struct slab_qent *e = &s->q[s->qhead];
        uint64_t st = atomic_load_explicit(word_at(s->base, e->off + DTE_OFF_STATE),
                                           memory_order_acquire);
        /* Still that marked life: free it if its time has come (reclaim_if_expired judges, as
         * the scan would), else stop: later entries were marked later. Anything else (the scan
         * freed it, or it lives again): drop it. */
        if ((st & DTE_RECYCLED) && dte_gen(st) == e->gen &&
            page_class_of(s, e->off) == e->cls) {
            uint64_t marked = dte_marked_ms(st);
            if (marked && marked - 1 + s->quarantine_ms > now_ms)
                break;
            if (!reclaim_if_expired(s, e->cls, e->off, now_ms))
                break;
            freed++;
        }
        s->cls[e->cls].queued--;
        s->qhead = (s->qhead + 1) % s->qcap;
        s->qlen--;
    }
    return freed;
}

size_t slab_reap(struct slab *s, uint64_t now_ms)
{
    pthread_mutex_lock(&s->lock);
    size_t freed = reap_locked(s, now_ms);
    pthread_mutex_unlock(&s->lock);
    return freed;
}

/* One step of the scan cursor over (page, slot). Returns false when no page is assigned. */
static bool scan_step(struct slab *s, uint32_t *cls, uint64_t *off)
{
    if (s->next_page == 0)
        return false;
    if (s->scan_page >= s->next_page) {
        s->scan_page = 0;
        s->scan_slot = 0;
        for (uint32_t c = 0; c < s->nclasses; c++) {
            s->cls[c].recycled = s->cls[c].recycled_pass;
            s->cls[c].recycled_pass = 0;
            s->cls[c].peer_recycled = s->cls[c].peer_recycled_pass;
            s->cls[c].peer_recycled_pass = 0;
            s->cls[c].used = s->cls[c].used_pass;
            s->cls[c].used_pass = 0;
            s->cls[c].bytes = s->cls[c].bytes_pass;
            s->cls[c].bytes_pass = 0;
            s->cls[c].placed = s->cls[c].placed_pass;
            s->cls[c].placed_pass = 0;
            s->cls[c].placed_bytes = s->cls[c].placed_bytes_pass;
            s->cls[c].placed_bytes_pass = 0;
        }
    }
    uint8_t c = atomic_load_explicit((_Atomic uint8_t *)&s->page_class[s->scan_page],
                                     memory_order_acquire);
    if (s->scan_slot >= slab_slots_per_page(s, c)) {
        /* The page changed class under the cursor (rebalance_locked): go on with the next. */
        s->scan_slot = 0;
        s->scan_page++;
        return scan_step(s, cls, off);
    }
    *cls = c;
    *off = page_offset(s, s->scan_page) + s->scan_slot * s->cls[c].slot_bytes;
    if (++s->scan_slot >= slab_slots_per_page(s, c)) {
        s->scan_slot = 0;
        s->scan_page++;
    }
    return true;
}

static size_t scan_locked(struct slab *s, size_t max_slots, uint64_t now_ms, int want_cls)
{
    size_t freed = 0;
    for (size_t i = 0; i < max_slots; i++) {
        uint32_t c;
        uint64_t off;
        if (!scan_step(s, &c, &off))
            break;
        s->scanned++;
        if (reclaim_if_expired(s, c, off, now_ms)) {
            freed++;
            if (want_cls >= 0 && (int)c == want_cls)
                break;
        }
    }
    return freed;
}

static uint64_t total_slots(const struct slab *s)
{
    uint64_t n = 0;
    for (uint32_t c = 0; c < s->nclasses; c++)
        n += s->cls[c].slots;
    return n;
}

/*
 * Give class cls a page that another class holds entirely free (memcached's slab reassignment):
 * without it, pages stay with whichever class took them first, and a workload whose item sizes
 * change finds its new sizes out of memory while old ones hold free pages. The donor is the class
 * with the most free slots. Its page's slots leave the donor's free list; the words that mark a
 * slot free (state, recycle) are zeroed at the new class's slot boundaries before the page's
 * class changes in the persistent page table, so a crash in between leaves every slot of the page
 * free under either class. Nobody can hold a reference into the page: its slots are free, that is
 * never published or reclaimed after their expiration period. Called with the lock held. Returns
 * 0 if cls got a page, -1 if no class has an entirely free page.
 */
static int rebalance_locked(struct slab *s, uint32_t cls)
{
    uint64_t best = UINT64_MAX;
    size_t best_free = 0;
    uint64_t now = nessie_mono_ms();
    for (uint64_t p = 0; p < s->next_page; p++) {
        uint8_t d = s->page_class[p];
        if (d == DATA_PAGE_UNASSIGNED || d >= s->nclasses || d == cls)
            continue;
        /* Not from a class refused in the last few periods: its page is free because its
         * slots came back together (a quarantine that ended), not for lack of demand; taken,
         * it would be drained back at once (tombstones under eviction did that). */
        if (s->cls[d].refused_ms && now - s->cls[d].refused_ms < 4 * s->quarantine_ms)
            continue;
        /* Nor a class's last page: the class of tombstones, whose page empties whenever its
         * quarantines end, gave its last to values, and then no eviction could get a tombstone
         * and no write room (test_migration_on_full_node_waits_for_room). */
        if (s->cls[d].npages <= 1)
            continue;
        if (s->page_free[p] == slab_slots_per_page(s, d) && now - s->page_freed_ms[p] >= s->late_ms &&
            s->cls[d].nfree > best_free) {
            best = p;
            best_free = s->cls[d].nfree;
        }
    }
    if (s->drain_page >= 0 && s->drain_for == cls &&
        s->page_free[s->drain_page] == slab_slots_per_page(s, s->page_class[s->drain_page]) &&
        now - s->page_freed_ms[s->drain_page] >= s->late_ms)
        best = (uint64_t)s->drain_page;
    if (best == UINT64_MAX)
        return -1;
    if ((int64_t)best == s->drain_page)
        s->drain_page = -1; /* drained: it moves now */
    uint8_t d = s->page_class[best];
    struct slab_class *dc = &s->cls[d];
    size_t kept = 0;
    for (size_t i = 0; i < dc->nfree; i++) {
        uint64_t off = *free_at(dc, i);
        if (page_of(s, off) != best)
            *free_at(dc, kept++) = off;
    }
    dc->nfree = kept;
    dc->slots -= slab_slots_per_page(s, d);
    set_reserve(s, d);
    page_list_remove(s, d, best);
    s->page_free[best] = 0;
    uint64_t per = slab_slots_per_page(s, cls);
    for (uint64_t i = 0; i < per; i++) {
        uint64_t off = page_offset(s, best) + i * s->cls[cls].slot_bytes;
        /* A new slot that starts where one of the donor's did continues that slot's lives (its
         * generation + 1, as a reuse would), so an index entry naming the old slot's last life
         * can never name the new one's first. Elsewhere the new slot has no life to count from
         * (an older division of the page may have had a slot there): it starts at a generation
         * drawn from its offset and the rebalance count, not at 0. Either way a stale entry
         * is also older than the quarantine and late_ms, which the time guard covers. */
        uint32_t gen = (uint32_t)((off / ITE_UNIT) * 2654435761u + s->rebalanced * 40503u);
        if ((off - page_offset(s, best)) % s->cls[d].slot_bytes == 0)
            gen = dte_gen(atomic_load_explicit(word_at(s->base, off + DTE_OFF_STATE),
                                               memory_order_relaxed)) + 1;
        atomic_store_explicit(word_at(s->base, off + DTE_OFF_STATE), dte_state(gen, 0),
                              memory_order_relaxed);
        atomic_store_explicit(quarantine_at(s->base, off), 0, memory_order_relaxed);
    }
    atomic_store_explicit((_Atomic uint8_t *)&s->page_class[best], (uint8_t)cls,
                          memory_order_release);
    s->cls[cls].slots += per;
    set_reserve(s, cls);
    s->rebalanced++;
    if (page_list_add(s, cls, best) != 0)
        return -1;
    for (uint64_t i = 0; i < per; i++)
        if (push_free(s, cls, page_offset(s, best) + i * s->cls[cls].slot_bytes) != 0)
            return -1;
    return 0;
}

/* Slots an allocation scans on its own before it lets the caller wait for the recycler. */
#define SLAB_ALLOC_SCAN 1024

bool slab_pending(struct slab *s, uint32_t cls)
{
    if (cls >= s->nclasses)
        return false;
    pthread_mutex_lock(&s->lock);
    bool pending = s->cls[cls].recycled + s->cls[cls].recycled_pass + s->cls[cls].queued > 0 ||
                   (s->drain_page >= 0 && s->drain_for == cls);
    pthread_mutex_unlock(&s->lock);
    return pending;
}

/* Take a slot of class cls for use, if its free list has one the use may take. Lock held. */
static bool take_free(struct slab *s, uint32_t cls, enum slab_use use, uint64_t *offset)
{
    struct slab_class *c = &s->cls[cls];
    if (c->nfree == 0 || (use != SLAB_FOR_TOMBSTONE && c->nfree <= c->reserve))
        return false;
    /* A draining page's free slots go round to the tail: they stay free for the page's move,
     * unless they are all there is and a late value needs one (slab_use). */
    for (size_t turns = c->nfree; s->drain_page >= 0 && turns > 0; turns--) {
        if ((int64_t)page_of(s, *free_at(c, 0)) != s->drain_page)
            break;
        if (turns == 1 && use == SLAB_FOR_LATE_VALUE)
            break; /* every free slot is on the draining page: take this one */
        uint64_t off = pop_free(s, cls);
        push_free(s, cls, off); /* cannot fail: the slot it frees is reused */
        if (turns == 1)
            return false;
    }
    *offset = pop_free(s, cls);
    c->allocs++;
    return true;
}

int slab_alloc(struct slab *s, uint32_t cls, enum slab_use use, uint64_t *offset,
               uint32_t *cls_out)
{
    if (cls >= s->nclasses)
        return -1;
    pthread_mutex_lock(&s->lock);
    struct slab_class *c = &s->cls[cls];
    int rc = 0;
    *cls_out = cls;
    if (take_free(s, cls, use, offset))
        goto out;
    /* A page may add no slot a value can take: the class's reserve grows with its slots (at
     * 8 slots, 1), and a class of one slot a page gives the reserve its first new slot. Another
     * page then (64 SETs of 512 KiB into a 256 MiB node evicted 3 of them, with 244 pages
     * left: shim-clients.sh's long non-blocking chunks). */
    while (grow_class(s, cls, use) == 0)
        if (take_free(s, cls, use, offset))
            goto out;
    if (reap_locked(s, nessie_mono_ms()) > 0 && take_free(s, cls, use, offset))
        goto out;
    /* A tombstone fits any larger slot: better a large one for an expiration period than a
     * DELETE refused. Its own class's shortage still counts as refused (the evictor then gives
     * that class a page: evictions are tombstones too, as many as SETs on a full node). Not a
     * class whose values were refused within the last period, though: writers wait for its
     * slots, and the evictor, whose tombstones these mostly are, took each slot as it came
     * back, ahead of them (bench/eviction.sh: SETs refused after 900 ms of waiting). The
     * tombstone then waits, or the eviction is given up for now. */
    if (use == SLAB_FOR_TOMBSTONE) {
        uint64_t now = nessie_mono_ms();
        c->failed++;
        c->refused_ms = now;
        for (uint32_t b = cls + 1; b < s->nclasses; b++)
            if ((!s->cls[b].value_refused_ms || now - s->cls[b].value_refused_ms > s->quarantine_ms) &&
                take_free(s, b, use, offset)) {
                *cls_out = b;
                goto out;
            }
    }
    /* Nothing free and no page left: scan on the critical path (the background recycler is
     * meant to make this rare). Not when the class has slots in the owner's quarantine queue:
     * reap_locked above freed every one whose time has come, and the caller waits for the rest
     * (slab_pending); a scan under the lock would find at best peers' marks, which the
     * recycler's paced scan finds too, while every writer of the node waits for the lock. A
     * short scan when the class has peers' marks waiting for expiry, one full pass otherwise. */
    if (c->queued == 0) {
        uint64_t all = total_slots(s);
        bool pending = c->recycled + c->recycled_pass > 0;
        scan_locked(s, pending && all > SLAB_ALLOC_SCAN ? SLAB_ALLOC_SCAN : all, nessie_mono_ms(),
                    (int)cls);
        if (take_free(s, cls, use, offset))
            goto out;
    }
    if (rebalance_locked(s, cls) == 0 && take_free(s, cls, use, offset))
        goto out;
    rc = -1;
    if (use != SLAB_FOR_TOMBSTONE) {
        c->failed++;
        c->refused_ms = c->value_refused_ms = nessie_mono_ms();
    }
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

bool slab_drain(struct slab *s, uint32_t cls, uint64_t max_ms, uint64_t *first, uint32_t *page_cls,
                uint64_t *slots)
{
    pthread_mutex_lock(&s->lock);
    uint64_t now = nessie_mono_ms();
    if (s->drain_page >= 0 && now - s->drain_started_ms > max_ms)
        s->drain_page = -1; /* given up: a new page is picked */
    if (s->drain_page < 0) {
        /* The donor: the class with the most pages (it can spare one best), not cls. */
        uint32_t donor = UINT32_MAX;
        for (uint32_t c = 0; c < s->nclasses; c++)
            if (c != cls && s->cls[c].npages > 0 &&
                (donor == UINT32_MAX || s->cls[c].npages > s->cls[donor].npages))
                donor = c;
        if (donor == UINT32_MAX || (s->cls[donor].npages < 2 && s->cls[cls].npages > 0)) {
            pthread_mutex_unlock(&s->lock);
            return false;
        }
        struct slab_class *dc = &s->cls[donor];
        s->drain_page = dc->pages[(now * 2654435761u) % dc->npages];
        s->drain_for = cls;
        s->drain_started_ms = now;
    }
    uint64_t p = (uint64_t)s->drain_page;
    *page_cls = s->page_class[p];
    *first = page_offset(s, p);
    *slots = slab_slots_per_page(s, *page_cls);
    bool ours = s->drain_for == cls;
    pthread_mutex_unlock(&s->lock);
    return ours;
}

bool slab_values_refused(struct slab *s, uint32_t cls)
{
    pthread_mutex_lock(&s->lock);
    bool refused = cls < s->nclasses && s->cls[cls].value_refused_ms != 0;
    pthread_mutex_unlock(&s->lock);
    return refused;
}

bool slab_set_limit(struct slab *s, uint64_t bytes)
{
    uint64_t pages = bytes / s->hdr->page_bytes;
    if (pages > s->hdr->page_count)
        pages = s->hdr->page_count;
    pthread_mutex_lock(&s->lock);
    /* raising is always possible; lowering, down to the pages in use (tombstones may have taken
     * the reserve under a lower limit: raising back must not depend on it) */
    bool ok = pages >= s->page_limit || pages >= s->next_page + s->reserve_pages;
    if (ok) {
        s->page_limit = pages;
        publish_spare(s);
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

bool slab_has_spare_pages(struct slab *s)
{
    pthread_mutex_lock(&s->lock);
    bool spare = s->next_page + s->reserve_pages < s->page_limit;
    pthread_mutex_unlock(&s->lock);
    return spare;
}

void slab_class_state(struct slab *s, uint32_t cls, uint64_t *nfree, uint64_t *pending,
                      uint64_t *items,
                      uint64_t *slots, uint64_t *allocs, uint64_t *failed)
{
    pthread_mutex_lock(&s->lock);
    const struct slab_class *c = &s->cls[cls];
    *nfree = c->nfree > c->reserve ? c->nfree - c->reserve : 0;
    /* The owner's marks: the queue, exact and current. Peers' marks: as the scan last saw them
     * (the larger of the last pass and this one so far). The scan's count of all marks would
     * lag by up to a pass, and at a high eviction rate most of what it saw is free or reused
     * by now: counted as on its way back, it stopped the evictor while writers waited. */
    *pending = c->queued + slab_peer_marks(c);
    *slots = c->slots;
    *items = c->used > c->used_pass ? c->used : c->used_pass;
    *allocs = c->allocs;
    *failed = c->failed;
    pthread_mutex_unlock(&s->lock);
}

uint32_t slab_sample(struct slab *s, uint32_t cls, uint64_t *rng, uint64_t *offs, uint32_t n)
{
    uint32_t got = 0;
    pthread_mutex_lock(&s->lock);
    const struct slab_class *c = &s->cls[cls];
    uint64_t per = cls < s->nclasses ? slab_slots_per_page(s, cls) : 0;
    for (; got < n && c->npages > 0 && per > 0; got++) {
        uint64_t r = hash_xorshift(rng);
        uint64_t p = c->pages[r % c->npages];
        offs[got] = page_offset(s, p) + ((r >> 32) % per) * c->slot_bytes;
    }
    pthread_mutex_unlock(&s->lock);
    return got;
}

bool slab_slot_of_class(struct slab *s, uint32_t cls, uint64_t offset)
{
    if (cls >= s->nclasses || offset < s->hdr->pages_offset)
        return false;
    uint64_t p = page_of(s, offset);
    return p < s->hdr->page_count && page_class_of(s, offset) == cls &&
           (offset - page_offset(s, p)) % s->cls[cls].slot_bytes == 0 &&
           (offset - page_offset(s, p)) / s->cls[cls].slot_bytes < slab_slots_per_page(s, cls);
}

void slab_free_unpublished(struct slab *s, uint32_t cls, uint64_t offset)
{
    _Atomic uint64_t *state = word_at(s->base, offset + DTE_OFF_STATE);
    uint64_t st = atomic_load_explicit(state, memory_order_relaxed);
    atomic_store_explicit(quarantine_at(s->base, offset), 0, memory_order_relaxed);
    atomic_store_explicit(state, dte_state(dte_gen(st), 0), memory_order_release);
    pthread_mutex_lock(&s->lock);
    if (push_free(s, cls, offset) != 0)
        log_warn("slab: out of memory returning a slot; it is found again by the next scan");
    pthread_mutex_unlock(&s->lock);
}

/* The background scan takes the lock for this many slots at a time: each slot costs a cache
 * (and often a TLB) miss, so a long scan under the lock would stall every allocation behind it
 * (a 4096-slot pass held it for ~0.5 ms, the whole latency of a large SET). */
#define SCAN_CHUNK 64

size_t slab_scan(struct slab *s, size_t max_slots, uint64_t now_ms)
{
    size_t freed = slab_reap(s, now_ms);
    for (size_t done = 0; done < max_slots; done += SCAN_CHUNK) {
        size_t n = max_slots - done < SCAN_CHUNK ? max_slots - done : SCAN_CHUNK;
        pthread_mutex_lock(&s->lock);
        bool any = s->next_page != 0;
        freed += scan_locked(s, n, now_ms, -1);
        pthread_mutex_unlock(&s->lock);
        if (!any)
            break;
    }
    return freed;
}

void slab_crawl(struct slab *s, uint64_t *page, uint64_t *slot, size_t n,
                void (*fn)(void *arg, uint32_t cls, uint64_t offset), void *arg)
{
    pthread_mutex_lock(&s->lock);
    uint64_t pages = s->next_page;
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n && pages > 0; i++) {
        if (*page >= pages) {
            *page = 0;
            *slot = 0;
        }
        uint8_t c = atomic_load_explicit((_Atomic uint8_t *)&s->page_class[*page],
                                         memory_order_acquire);
        if (c == DATA_PAGE_UNASSIGNED || c >= s->nclasses || *slot >= slab_slots_per_page(s, c)) {
            (*page)++;
            *slot = 0;
            continue;
        }
        fn(arg, c, page_offset(s, *page) + *slot * s->cls[c].slot_bytes);
        (*slot)++;
    }
}

void slab_walk(struct slab *s, uint64_t *pos, size_t n,
               bool (*fn)(void *arg, uint32_t cls, uint64_t offset), void *arg)
{
    pthread_mutex_lock(&s->lock);
    uint64_t pages = s->next_page;
    pthread_mutex_unlock(&s->lock);
    const uint64_t start = *pos;
    uint64_t p = 0, within = 0;
    if (start >= s->hdr->pages_offset) {
        p = page_of(s, start);
        within = start - page_offset(s, p);
    }
    size_t seen = 0;
    for (; p < pages; p++, within = 0) {
        uint8_t c = atomic_load_explicit((_Atomic uint8_t *)&s->page_class[p], memory_order_acquire);
        if (c == DATA_PAGE_UNASSIGNED || c >= s->nclasses)
            continue;
        const uint64_t sb = s->cls[c].slot_bytes;
        for (uint64_t i = (within + sb - 1) / sb; i < slab_slots_per_page(s, c); i++) {
            uint64_t off = page_offset(s, p) + i * sb;
            if (seen == n || !fn(arg, c, off)) {
                *pos = off;
                return;
            }
            seen++;
        }
    }
    *pos = 0;
}

void slab_usage(struct slab *s, uint64_t *items, uint64_t *bytes, uint64_t *placed,
                uint64_t *placed_bytes)
{
    *items = *bytes = *placed = *placed_bytes = 0;
    pthread_mutex_lock(&s->lock);
    for (uint32_t c = 0; c < s->nclasses; c++) {
        *items += s->cls[c].used;
        *bytes += s->cls[c].bytes;
        *placed += s->cls[c].placed;
        *placed_bytes += s->cls[c].placed_bytes;
    }
    pthread_mutex_unlock(&s->lock);
}

void slab_for_each_slot(struct slab *s, void (*fn)(void *arg, uint32_t cls, uint64_t offset),
                        void *arg)
{
    pthread_mutex_lock(&s->lock);
    uint64_t pages = s->next_page;
    pthread_mutex_unlock(&s->lock);
    for (uint64_t p = 0; p < pages; p++) {
        uint8_t c = atomic_load_explicit((_Atomic uint8_t *)&s->page_class[p], memory_order_acquire);
        if (c == DATA_PAGE_UNASSIGNED || c >= s->nclasses)
            continue;
        for (uint64_t i = 0; i < slab_slots_per_page(s, c); i++)
            fn(arg, c, page_offset(s, p) + i * s->cls[c].slot_bytes);
    }
}
