/*
 * flash.h - the flash tier's log (issue 31): one file per node, written only by its owner, in
 * whole pages; where eviction demotes values to when the tier is on, and where a shipped GET
 * of a flash item is read. Part of the memory room: it calls nothing above it, and nothing in
 * the fabric (a flash item is only ever read by its owner).
 *
 * The file is a 4 KiB superblock (the format, the page size and the page count it was made with:
 * a log is never read with another shape), a life table (a uint64_t per page) and [flash] bytes
 * of pages of page_bytes. A page is filled front to back in a write buffer in memory and
 * reaches the file in one write when it is full (or on flash_seal), so the device sees only large
 * sequential writes; a record never spans two pages. Each time a page is opened for writing it
 * starts a new life: its life counter goes up by one and is written to its slot of the life
 * table before any location into it is handed out, and it takes the log's next sequence number
 * (global, which orders pages by age). Every record carries both; a location names the page's
 * life modulo 64, so a location into a page written again since is refused without trusting the
 * bytes found there, for the next 63 lives of that page whatever the order pages are reused in,
 * and a record left by an earlier life is told apart by its full life number.
 *
 * A page's life comes from the table, never from the page's own blocks (which a torn write may
 * have left half old, half new): a page freed has its life marked ended in the table, so its
 * records are not recovered at a restart; a page being filled when the daemon died had its
 * life taken in the table, so the next is another (each reuse of a page costs one life). At a restart a page's records are
 * recovered front to back while each is intact (CRC), of the page's life and of its first
 * record's sequence. Nothing is fdatasync'ed: the log survives a daemon's restart (the page
 * cache keeps it), not a machine's (the index in shared memory does not survive that either).
 *
 * A location (uint64_t) fits the 40 bits of an ITE's offset and gen fields (layout.h), which is
 * where a demoted item's ITE carries it, under a size class reserved for flash:
 *
 *    39                                            6 5      0
 *   +-----------------------------------------------+--------+
 *   | record offset in the pages / 64 (34 bits)     |life%64 |
 *   +-----------------------------------------------+--------+
 *
 * so 2^34 x 64 bytes = 1 TiB of flash per node is addressable. A record is a 64-byte header
 * (struct flash_rec), the key, the value, zero padding to a multiple of 64 bytes. Its CRC32C
 * covers everything after the CRC field up to the value's end, so a torn write (a crash during a
 * page's write) is found when the record is read or recovered.
 *
 * Memory per flash item: its ITE (8 bytes, in the index) and, here, 2 bytes for its start in its
 * page and a live bit (pages are at most 2 MiB: a start is 15 bits of 64-byte units); the
 * page table is per page, not per item. That lets an unlink know its record's exact length, so
 * every page keeps exact live bytes for compaction.
 *
 * Threads: the owner's evictor appends, its SD servers read, compaction and unlinks come from
 * either; one mutex covers the log. I/O runs through io_uring (one ring, under the mutex), or
 * pread/pwrite where the kernel refuses io_uring (said once at open). A read waits for its I/O;
 * reads that complete later (the non-blocking API's iget) are the next step. A page's scan
 * (flash_page_each) reads the page with pread, without the mutex, so compaction does not stall
 * the readers and appenders for a page's read.
 *
 * After a restart every recovered record counts as live (unlinks are kept in memory only): the
 * caller recounts them from its index with flash_relive_begin / flash_relive.
 */
#ifndef NESSIE_KVSTORE_FLASH_H
#define NESSIE_KVSTORE_FLASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Results of the calls below. */
enum flash_rc {
    FLASH_OK = 0,
    FLASH_MISS = 1,    /* no such record there (a page written again, a torn or corrupt
                          record, another key): the item is not on flash any more */
    FLASH_FULL = 2,    /* no free page to open: drop or compact one first */
    FLASH_TOO_BIG = 3, /* a record larger than a page, or a value larger than the caller's room */
    FLASH_IO = 4,      /* the device failed the I/O (logged); a read's item counts as a miss */
    FLASH_BAD = 5,     /* a bad argument (a location out of the file, a key too long) */
};

#define FLASH_LOC_LIFE_BITS 6
#define FLASH_LOC_OFF_BITS 34
#define FLASH_LOC_BITS (FLASH_LOC_LIFE_BITS + FLASH_LOC_OFF_BITS)
#define FLASH_UNIT 64
#define FLASH_MAX_BYTES ((uint64_t)FLASH_UNIT << FLASH_LOC_OFF_BITS) /* 1 TiB */
/* Pages: a record's start in its page is 15 bits of 64-byte units (the 16th bit is its live
 * bit), and a whole page stays one write the kernel takes in one request. */
#define FLASH_PAGE_MIN (64u << 10)
#define FLASH_PAGE_MAX (2u << 20)

struct flash_config {
    const char *dir;     /* a directory; the log is DIR/<cluster>.node<N>.flash */
    const char *cluster; /* whose log: the cluster's name (two clusters may share DIR) ... */
    uint32_t node;       /* ... and the node's */
    uint64_t bytes;      /* the file's size: a whole number of pages, at most FLASH_MAX_BYTES */
    uint32_t page_bytes; /* FLASH_PAGE_MIN..FLASH_PAGE_MAX, a power of two */
    bool no_uring;       /* use pread/pwrite even where io_uring works (tests, operators) */
    bool fresh;          /* empty the log instead of recovering what it holds */
};

/* What a record holds besides its key and value: the item's memcached fields. */
struct flash_meta {
    uint64_t version; /* the CAS token */
    uint32_t flags;
    uint32_t exptime;
    uint8_t flags8; /* the DTE's DTE_F_META bits, kept as a demotion found them */
};

/* The record header, on flash; 64 bytes, little-endian as the host (a log is read only by the
 * host that wrote it). */
struct flash_rec {
    uint32_t magic;
    uint32_t crc; /* CRC32C of the bytes after this field up to the value's end */
    uint64_t seq; /* the log's sequence number when the page was opened (its age) */
    uint64_t version;
    uint32_t flags;
    uint32_t exptime;
    uint32_t value_len;
    uint8_t key_len;
    uint8_t flags8;
    uint16_t pad0;
    uint64_t life;       /* the page's life (see above) */
    uint32_t page_bytes; /* the log's page size when written */
    uint32_t pad1;
    uint64_t reserved;
};
_Static_assert(sizeof(struct flash_rec) == 64, "a record header is one 64-byte unit");

struct flash_stats {
    uint64_t pages, pages_free, pages_full;
    uint64_t bytes_used;      /* bytes of records in pages written or being filled */
    uint64_t bytes_live;      /* of those, records not unlinked */
    uint64_t objects_live;    /* records not unlinked */
    uint64_t objects_written; /* records appended since open (extstore_objects_written) */
    uint64_t bytes_appended;  /* their bytes, headers and padding included */
    uint64_t objects_rewritten, bytes_rewritten; /* of those, compaction's copies (flash_rewrite) */
    uint64_t bytes_device;    /* bytes written to the file (whole pages' used parts, to 4 KiB) */
    uint64_t objects_read, bytes_read; /* records read back (extstore_objects_read) */
    uint64_t misses;          /* reads that found no such record (stale, torn, another key) */
    uint64_t crc_failures;    /* of those, records whose CRC did not match */
    uint64_t io_errors;
    uint64_t page_reclaims;   /* pages freed (dropped or compacted) (extstore_page_reclaims) */
    uint64_t recovered;       /* records found valid at open */
    uint64_t short_io;        /* transfers the device (or an injection) cut short, continued */
    uint64_t ram_bytes;       /* the log's memory: page table, record starts, two page buffers */
    bool uring;               /* I/O through io_uring */
};

struct flash_log;

/* Open (creating it if absent) DIR/<cluster>.node<N>.flash of cfg->bytes, reserving its space,
 * and recover the records it holds (unless cfg->fresh): each page's records are read front to
 * back up to the first that is torn, corrupt or of another life of the page. The file is locked
 * (flock) while open: a second process opening it is refused. Returns 0 and *out, or -1 with a
 * message in err (a missing directory, a disk without room for the file, a bad size, a file
 * that is not this node's log or of another shape, which is then left exactly as it was); never
 * leaves a half-open log. */
int flash_open(const struct flash_config *cfg, struct flash_log **out, char *err, size_t errlen);

/* Seal the page being filled (its records reach the file), then close. NULL is a no-op. */
void flash_close(struct flash_log *fl);

/* Append a record of key and value to the page being filled, opening the next free page (oldest
 * free first) when it is full. Returns FLASH_OK and its location in *loc; FLASH_FULL when no page
 * is free (nothing is written: the caller drops or compacts a page and tries again),
 * FLASH_TOO_BIG, FLASH_IO (the full page could not be written, or its next life not recorded:
 * nothing appended; the full page stays in memory, readable, and is written again by the next
 * append or seal) or FLASH_BAD. */
int flash_append(struct flash_log *fl, const void *key, uint32_t klen, const void *value,
                 uint32_t vlen, const struct flash_meta *meta, uint64_t *loc);

/* flash_append for a record compaction copies out of a sparse page: the same, but counted in
 * objects_rewritten and bytes_rewritten (the part of the device's writes that is the log's own,
 * its write amplification). */
int flash_rewrite(struct flash_log *fl, const void *key, uint32_t klen, const void *value,
                  uint32_t vlen, const struct flash_meta *meta, uint64_t *loc);

/* Pages free: neither being filled nor holding records. */
uint64_t flash_pages_free(struct flash_log *fl);

/* Read the record at loc into buf (cap bytes for the value) if it holds key. Returns FLASH_OK
 * with *vlen and *meta; FLASH_MISS (counted, and counted as a CRC failure when that is why);
 * FLASH_TOO_BIG with *vlen set when the value does not fit (a length checked against the
 * record's length known in memory, never one only the device says); FLASH_IO; FLASH_BAD (a
 * location past the file, a bad key length). A record still in the write buffer is read from
 * memory. Never returns bytes whose CRC did not match. */
int flash_read(struct flash_log *fl, uint64_t loc, const void *key, uint32_t klen, void *buf,
               size_t cap, uint32_t *vlen, struct flash_meta *meta);

/* Whether loc names a record of its page's current life (live or unlinked): false once the page
 * is freed. */
bool flash_has(struct flash_log *fl, uint64_t loc);

/* Read the record at loc whatever its key: its key then its value (then up to 63 bytes of
 * padding) into buf, which must hold cap >= the record's length less its 64-byte header (a
 * record is never longer than a page). Returns FLASH_OK with *klen, *vlen and *meta; FLASH_MISS
 * (the record is gone: its page written again or freed, torn, corrupt), FLASH_TOO_BIG (cap is
 * too small; nothing read), FLASH_IO or FLASH_BAD, as flash_read. For callers that learn the
 * key from the record (the index's passes over entries) and that must tell "gone" from
 * "another key's". */
int flash_read_rec(struct flash_log *fl, uint64_t loc, void *buf, size_t cap, uint32_t *klen,
                   uint32_t *vlen, struct flash_meta *meta);

/* The record at loc is no longer any item's: its page's live bytes go down by its length.
 * Returns FLASH_OK, or FLASH_MISS when loc names no live record of the page's current life (an
 * unlink twice, or after its page was dropped, changes nothing). */
int flash_unlink(struct flash_log *fl, uint64_t loc);

/* Write out the page being filled, as it is, and start the next record on a new page. Returns
 * FLASH_OK, or FLASH_IO: the page stays the one being filled, whole in memory (a later seal or
 * append writes it again; closed before that, its records are lost as in a crash). */
int flash_seal(struct flash_log *fl);

/* The full page with the lowest sequence number (the oldest written), with its life in *life
 * (a page is named by both below: a page freed and written again since is another), or -1 if
 * none is full. */
int64_t flash_oldest_page(struct flash_log *fl, uint64_t *life);

/* The full page with the fewest live bytes, if at most max_live_pct % of its used bytes are
 * live, with its life in *life; -1 otherwise. */
int64_t flash_sparsest_page(struct flash_log *fl, uint32_t max_live_pct, uint64_t *life);

/* Call fn on each live record of full page `page` in life `life`, in order, with its location,
 * key, value and meta (valid during the call only; its value read from the file). fn returns
 * false to stop. Live means live when the page was read: a record unlinked since is still
 * passed, so the caller's move must be conditional (the index CAS from this location). A record
 * that fails its CRC is not passed (counted in crc_failures and in *lost when lost is not
 * NULL): its item reads as a miss. Returns FLASH_OK, FLASH_IO, FLASH_MISS (the page is not
 * full in that life, or was freed while it was read: nothing passed) or FLASH_BAD. */
typedef bool (*flash_each_fn)(void *user, uint64_t loc, const void *key, uint32_t klen,
                              const void *value, uint32_t vlen, const struct flash_meta *meta);
int flash_page_each(struct flash_log *fl, int64_t page, uint64_t life, flash_each_fn fn,
                    void *user, uint64_t *lost);

/* Free full page `page` in life `life`: its records, live or not, are gone (locations into it
 * read as misses, also after a restart). Counts a page reclaim. Returns FLASH_OK, FLASH_MISS
 * (not full in that life: freed by another caller, and perhaps written again), FLASH_IO (its
 * end could not be recorded on the device: nothing changed) or FLASH_BAD. */
int flash_page_free(struct flash_log *fl, int64_t page, uint64_t life);

/* After a restart: every record of every full page counts as unlinked until flash_relive names
 * it again (the caller walks its index, calling flash_relive on each location it holds, before
 * it serves). Records nothing names are then dead and compaction drops them. */
void flash_relive_begin(struct flash_log *fl);

/* The record at loc is an item's again (see flash_relive_begin). Returns FLASH_OK, or
 * FLASH_MISS when loc names no record of the page's current life. */
int flash_relive(struct flash_log *fl, uint64_t loc);

/* Faults for tests (nessie-stress, test_flash): the next `reads` reads and `writes` writes of
 * the file fail with EIO, as a failing device's would. */
void flash_inject_errors(struct flash_log *fl, uint32_t reads, uint32_t writes);

/* For tests: the next read of a record from the device (flash_read, flash_read_rec) calls
 * fn(arg) once, after it found the record and released the log, before its I/O: whatever fn
 * does to the log then (reads, appends, seals, pages freed and written again) is what other
 * threads may do while a read is on its way. */
void flash_inject_read_pause(struct flash_log *fl, void (*fn)(void *), void *arg);

/* Faults for tests: the next `n` transfers move only part of what they ask (at most half, to
 * 512 bytes), as a device or the kernel may; the log continues them. */
void flash_inject_short(struct flash_log *fl, uint32_t n);

void flash_stats(struct flash_log *fl, struct flash_stats *st);

/* Where the record at loc lies in the file (tests and tools that look at the device). */
uint64_t flash_file_offset(const struct flash_log *fl, uint64_t loc);

/* Location helpers. */
static inline uint64_t flash_loc_make(uint64_t file_off, uint64_t life)
{
    return ((file_off / FLASH_UNIT) << FLASH_LOC_LIFE_BITS) |
           (life & ((1u << FLASH_LOC_LIFE_BITS) - 1));
}
static inline uint64_t flash_loc_offset(uint64_t loc)
{
    return ((loc >> FLASH_LOC_LIFE_BITS) & ((1ULL << FLASH_LOC_OFF_BITS) - 1)) * FLASH_UNIT;
}
static inline uint32_t flash_loc_life(uint64_t loc)
{
    return (uint32_t)(loc & ((1u << FLASH_LOC_LIFE_BITS) - 1));
}

#endif
