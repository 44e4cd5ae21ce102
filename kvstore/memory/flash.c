/*
 * flash.c - the flash tier's log (issue 31): pages filled in a write buffer and written whole,
 * records checked by CRC32C, exact live bytes per page, recovery at open. The format and the
 * contracts are in flash.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <glib.h>
#include <isa-l/crc.h>
#include <liburing.h>

#include "flash.h"
#include "layout.h"
#include "log.h"

_Static_assert(FLASH_LOC_BITS == ITE_FLASH_LOC_BITS, "a location fills an ITE's offset and gen");

#define FLASH_MAGIC 0x4e53484cu /* "LHSN" on a little-endian disk: a record */
#define FLASH_SUPER_MAGIC 0x31474f4c48534e4eULL /* "NNSHLOG1": the file's first bytes */
#define FLASH_FORMAT 1
/* The device's block: a page's used part is written rounded up to it. */
#define FLASH_BLOCK 4096u
/* The log's ring: one I/O in flight at a time (the log's mutex is held across it: the writes of
 * seals and the life table, recovery's reads); a few spare entries. */
#define FLASH_URING_DEPTH 4
/* A reading thread's own ring (read_ring): one read in flight, its thread's. */
#define FLASH_READ_RING_DEPTH 2
/* A page's starts: the low 15 bits a record's start / 64, bit 15 whether it is live. */
#define START_LIVE 0x8000u
#define START_MASK 0x7FFFu
#define REC_HDR ((uint32_t)sizeof(struct flash_rec))
/* Bytes of a record covered by its CRC, after the magic and the CRC fields. */
#define REC_CRC_FROM 8u

enum page_state { PAGE_FREE, PAGE_OPEN, PAGE_FULL };

/* The file's first block: what the log was made with, so it is never read with another shape. */
struct flash_super {
    uint64_t magic;
    uint32_t format;
    uint32_t page_bytes;
    uint64_t npages;
    uint32_t node;
    char cluster[64]; /* NUL-padded */
    uint32_t crc;     /* CRC32C of the bytes before it */
};
_Static_assert(sizeof(struct flash_super) <= FLASH_BLOCK, "a superblock is one block");

struct flash_page {
    uint64_t seq;   /* the log's sequence number when this life began (its age) */
    uint64_t life;  /* this page's lives so far (0: never written); kept when it is freed */
    bool ended;     /* at open: the life table says its last life ended (freed) */
    uint32_t used;  /* bytes of records */
    uint32_t live;  /* bytes of records not unlinked */
    uint8_t state;
    GArray *starts; /* uint16_t per record, in order: START_MASK units, START_LIVE */
};

/* Faults the next I/Os meet (flash_inject_*): the next fail_reads reads and fail_writes writes
 * fail with EIO, the next short_left transfers move at most half of what they ask. */
struct io_faults {
    uint32_t fail_reads, fail_writes, short_left;
};

struct flash_log {
    pthread_mutex_t mu; /* everything below: the evictor, SD servers and compaction share it */
    int fd;
    char *path;
    char cluster[64];  /* NUL-padded, as in the superblock */
    uint32_t node;
    uint64_t bytes;      /* of pages: locations are offsets from data_off */
    uint32_t page_bytes;
    uint64_t npages;
    uint64_t table_off;  /* the life table: a uint64_t per page, after the superblock */
    uint64_t data_off;   /* the first page, after the table (block-aligned) */
    struct flash_page *pages;
    GQueue free_pages; /* page index + 1, the longest free first */
    int64_t cur;       /* the page being filled, or -1 */
    unsigned char *wbuf; /* its write buffer (page_bytes, block-aligned) */
    uint32_t wused;
    unsigned char *scratch; /* page_bytes: a page for recovery, the superblock, the life table */
    uint64_t next_seq;
    bool uring;
    struct io_uring ring;
    struct io_faults faults;          /* flash_inject_errors, flash_inject_short */
    void (*read_pause)(void *);       /* flash_inject_read_pause: once, then NULL */
    void *read_pause_arg;
    uint64_t io_token;                /* the user_data of the I/O in the ring */
    struct flash_stats st;
};

/* In 64 bits: a value length read from the device may be anything, and must not wrap into a
 * plausible length. */
static uint64_t rec_len(uint32_t klen, uint64_t vlen)
{
    return (REC_HDR + klen + vlen + FLASH_UNIT - 1) & ~(uint64_t)(FLASH_UNIT - 1);
}

static uint32_t rec_crc(const struct flash_rec *h, const void *key, const void *value)
{
    uint32_t c = crc32_iscsi((unsigned char *)h + REC_CRC_FROM, (int)(REC_HDR - REC_CRC_FROM), 0);
    c = crc32_iscsi((unsigned char *)key, h->key_len, c);
    return crc32_iscsi((unsigned char *)value, (int)h->value_len, c);
}

/* --- I/O ------------------------------------------------------------------------------------ */

/* One vectored transfer at off, through the ring or the plain calls. Returns bytes moved or
 * -errno. Mutex held (the ring and the injections are the log's). */
/* How an I/O is made: the ring it goes through (NULL: the plain calls) and that ring's token
 * counter, the faults it may meet, and its counts (added to the log's stats under its mutex by
 * the caller). The log's own ring and faults with the mutex held (io_buf); a reading thread's
 * own ring and a share of the faults without it (flash_read, flash_read_rec). */
struct io_how {
    struct io_uring *ring;
    uint64_t *token;
    struct io_faults *faults;
    uint64_t io_errors, short_io;
    void (*pause)(void *);       /* a read's injected pause (flash_inject_read_pause) */
    void *pause_arg;
};

static void read_ring_drop(void);

static ssize_t io_once(struct flash_log *fl, struct io_how *how, bool wr, struct iovec *iov,
                       int n, uint64_t off)
{
    struct io_faults *f = how->faults;
    if (wr ? f->fail_writes : f->fail_reads) {
        if (wr)
            f->fail_writes--;
        else
            f->fail_reads--;
        return -EIO;
    }
    /* An injected short transfer: ask for at most half, to 512 bytes. */
    struct iovec cut[8];
    if (f->short_left && n <= 8) {
        size_t total = 0;
        for (int i = 0; i < n; i++)
            total += iov[i].iov_len;
        size_t want = total / 2 & ~(size_t)511;
        if (want) {
            f->short_left--;
            int m = 0;
            for (; m < n && want; m++) {
                cut[m] = iov[m];
                if (cut[m].iov_len > want)
                    cut[m].iov_len = want;
                want -= cut[m].iov_len;
            }
            iov = cut;
            n = m;
        }
    }
    if (!how->ring) {
        ssize_t r = wr ? pwritev(fl->fd, iov, n, (off_t)off) : preadv(fl->fd, iov, n, (off_t)off);
        return r < 0 ? -errno : r;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(how->ring);
    if (!sqe)
        return -EBUSY; /* cannot happen: one I/O at a time per ring, each reaped */
    if (wr)
        io_uring_prep_writev(sqe, fl->fd, iov, (unsigned)n, off);
    else
        io_uring_prep_readv(sqe, fl->fd, iov, (unsigned)n, off);
    uint64_t token = ++*how->token;
    io_uring_sqe_set_data64(sqe, token);
    int rc;
    do
        rc = io_uring_submit(how->ring);
    while (rc == -EINTR || rc == -EAGAIN);
    if (rc <= 0) {
        /* The entry was not taken, so nothing is in flight: leave the ring for good (a retry
         * would queue this entry twice) and move this and every later I/O to the plain calls. */
        log_warn("flash: io_uring submit failed (%s): %s uses plain pread/pwrite from now on%s",
                 rc ? strerror(-rc) : "nothing taken", fl->path,
                 how->ring == &fl->ring ? "" : " (this thread's reads)");
        io_uring_queue_exit(how->ring);
        if (how->ring == &fl->ring) /* the log's: a failed submit moves the log off it */
            fl->uring = fl->st.uring = false;
        else
            read_ring_drop();
        how->ring = NULL;
        ssize_t r = wr ? pwritev(fl->fd, iov, n, (off_t)off) : preadv(fl->fd, iov, n, (off_t)off);
        return r < 0 ? -errno : r;
    }
    for (;;) {
        struct io_uring_cqe *cqe;
        rc = io_uring_wait_cqe(how->ring, &cqe);
        if (rc == -EINTR || rc == -EAGAIN || rc == -ETIME)
            continue;
        if (rc < 0) {
            /* The I/O is in flight into the caller's buffers and cannot be waited for: going
             * on would let the kernel write into memory handed back to others. */
            log_error("flash: io_uring wait failed (%s) with an I/O in flight on %s",
                      strerror(-rc), fl->path);
            abort();
        }
        ssize_t res = cqe->res;
        bool mine = io_uring_cqe_get_data64(cqe) == token;
        io_uring_cqe_seen(how->ring, cqe);
        if (mine)
            return res;
        /* Another entry's completion (none is ever left behind: each I/O waits for its own). */
    }
}

/* The whole of iov[0..n) at off, short transfers continued; the end of the file is an error.
 * Returns 0 or -errno (logged, counted in how). iov is consumed. */
static int io_full(struct flash_log *fl, struct io_how *how, bool wr, struct iovec *iov, int n,
                   uint64_t off)
{
    while (n > 0) {
        ssize_t r = io_once(fl, how, wr, iov, n, off);
        if (r == -EINTR || r == -EAGAIN)
            continue;
        if (r <= 0) {
            int err = r == 0 ? EIO : (int)-r;
            how->io_errors++;
            log_warn("flash: %s %s at %llu: %s", wr ? "write to" : "read of", fl->path,
                     (unsigned long long)off, strerror(err));
            return -err;
        }
        size_t asked = 0;
        for (int i = 0; i < n; i++)
            asked += iov[i].iov_len;
        if ((size_t)r < asked)
            how->short_io++;
        off += (uint64_t)r;
        while (n > 0 && (size_t)r >= iov->iov_len) {
            r -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + r;
            iov->iov_len -= (size_t)r;
        }
    }
    return 0;
}

/* An I/O with the log's mutex held: its ring, its faults, its stats. */
static int io_buf(struct flash_log *fl, bool wr, void *buf, size_t len, uint64_t off)
{
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct io_how how = {.ring = fl->uring ? &fl->ring : NULL, .token = &fl->io_token,
                         .faults = &fl->faults};
    int rc = io_full(fl, &how, wr, &iov, 1, off);
    fl->st.io_errors += how.io_errors;
    fl->st.short_io += how.short_io;
    return rc;
}

/* Whether page is full and in life `life`. Mutex held. */
static bool page_is(const struct flash_log *fl, int64_t page, uint64_t life)
{
    return fl->pages[page].state == PAGE_FULL && fl->pages[page].life == life;
}

/* --- reads without the log's mutex ----------------------------------------------------------
 *
 * A record's read is made without the log's mutex: with it held, every read of a node waited
 * for the one before it and for any seal's page write (a megabyte), and a reader descheduled
 * holding it (three daemons and their clients on two CPUs) stalled every other. The record is
 * found under the mutex, read without it, and its page's life checked under it again: a page
 * freed and written again meanwhile (a new life) makes the read a miss, never another record's
 * bytes taken for this one (the header names the life too, and the CRC covers the whole).
 * The log's ring has a single submitter, the mutex's holder; so each reading thread has a ring
 * of its own, made at its first read and closed when it exits. */

/* File-static, per thread: the calling thread's read ring (NULL until its first read, or for
 * good once the kernel refused one for it), and the key whose destructor closes it. */
static pthread_once_t read_ring_once = PTHREAD_ONCE_INIT;
static pthread_key_t read_ring_key;
static bool read_ring_keyed;
static __thread struct io_uring *read_ring_mine;
static __thread bool read_ring_refused;
static __thread uint64_t read_ring_token;

static void read_ring_free(void *r)
{
    io_uring_queue_exit(r);
    free(r);
}

static void read_ring_key_make(void)
{
    read_ring_keyed = pthread_key_create(&read_ring_key, read_ring_free) == 0;
}

/* The thread's ring after a failed submit (io_once has exited it): plain reads from now on. */
static void read_ring_drop(void)
{
    if (read_ring_keyed)
        (void)pthread_setspecific(read_ring_key, NULL);
    free(read_ring_mine);
    read_ring_mine = NULL;
    read_ring_refused = true;
}

/* The calling thread's read ring, made if it has none; NULL (plain preadv) where the kernel or
 * the memory refuses one, said once per thread. */
static struct io_uring *read_ring(const struct flash_log *fl)
{
    if (read_ring_mine || read_ring_refused)
        return read_ring_mine;
    pthread_once(&read_ring_once, read_ring_key_make);
    struct io_uring *r = malloc(sizeof(*r));
    int rc = !read_ring_keyed ? -EAGAIN : r ? io_uring_queue_init(FLASH_READ_RING_DEPTH, r, 0)
                                            : -ENOMEM;
    if (rc == 0 && pthread_setspecific(read_ring_key, r) != 0) {
        io_uring_queue_exit(r);
        rc = -ENOMEM;
    }
    if (rc != 0) {
        free(r);
        read_ring_refused = true;
        log_warn("flash: no io_uring for a reading thread of %s (%s): it reads with preadv",
                 fl->path, strerror(-rc));
        return NULL;
    }
    return read_ring_mine = r;
}

/* What a read made without the mutex takes from the log under it: its share of the injected
 * faults (a failure if one is due, up to 8 short transfers). Returns whether the log reads
 * through io_uring (the thread's ring is then found without the mutex: read_ring). */
static bool read_begin(struct flash_log *fl, struct io_faults *share, struct io_how *how)
{
    share->fail_reads = fl->faults.fail_reads > 0;
    fl->faults.fail_reads -= share->fail_reads;
    share->fail_writes = 0;
    share->short_left = fl->faults.short_left < 8 ? fl->faults.short_left : 8;
    fl->faults.short_left -= share->short_left;
    *how = (struct io_how){.ring = NULL, .token = &read_ring_token, .faults = share};
    how->pause = fl->read_pause;
    how->pause_arg = fl->read_pause_arg;
    fl->read_pause = NULL;
    return fl->uring;
}

/* Between read_begin and the I/O, the mutex released: the thread's ring, and an injected
 * pause (tests: what others may do while a read is on its way). */
static void read_go(struct flash_log *fl, bool uring, struct io_how *how)
{
    if (uring)
        how->ring = read_ring(fl);
    if (how->pause)
        how->pause(how->pause_arg);
}

/* Back under the mutex after such a read: the shorts it did not use return to the log, its
 * counts join the log's stats. */
static void read_end_io(struct flash_log *fl, const struct io_faults *share,
                        const struct io_how *how)
{
    fl->faults.short_left += share->short_left;
    fl->st.io_errors += how->io_errors;
    fl->st.short_io += how->short_io;
}

/* --- pages ---------------------------------------------------------------------------------- */

static void page_reset(struct flash_page *p)
{
    p->state = PAGE_FREE;
    p->used = p->live = 0;
    g_array_set_size(p->starts, 0);
}

/* How many of p's records are not unlinked. */
static uint64_t live_records(const struct flash_page *p)
{
    uint64_t n = 0;
    for (guint i = 0; i < p->starts->len; i++)
        n += (g_array_index(p->starts, uint16_t, i) & START_LIVE) != 0;
    return n;
}

/* The index in p->starts of the record starting at byte in_page, or -1. */
static gint start_find(const struct flash_page *p, uint32_t in_page)
{
    uint16_t want = (uint16_t)(in_page / FLASH_UNIT);
    gint lo = 0, hi = (gint)p->starts->len - 1;
    while (lo <= hi) {
        gint mid = (lo + hi) / 2;
        uint16_t s = g_array_index(p->starts, uint16_t, mid) & START_MASK;
        if (s == want)
            return mid;
        if (s < want)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* The length of record i of p. */
static uint32_t start_len(const struct flash_page *p, gint i)
{
    uint32_t at = (g_array_index(p->starts, uint16_t, i) & START_MASK) * FLASH_UNIT;
    uint32_t end = (guint)i + 1 < p->starts->len
                       ? (g_array_index(p->starts, uint16_t, i + 1) & START_MASK) * FLASH_UNIT
                       : p->used;
    return end - at;
}

/* The page at loc if loc names its current life (not free, same life modulo 64), with the
 * record's start in it; NULL otherwise, *bad set when loc lies past the file. */
static struct flash_page *page_of(struct flash_log *fl, uint64_t loc, uint32_t *in_page, bool *bad)
{
    uint64_t off = flash_loc_offset(loc);
    *bad = off >= fl->bytes;
    if (*bad)
        return NULL;
    struct flash_page *p = &fl->pages[off / fl->page_bytes];
    if (p->state == PAGE_FREE ||
        (p->life & ((1u << FLASH_LOC_LIFE_BITS) - 1)) != flash_loc_life(loc))
        return NULL;
    *in_page = (uint32_t)(off % fl->page_bytes);
    return p;
}

/* Whether the bytes at rec (avail of them) begin a whole, intact record of this log's page size,
 * of life `life` and, unless seq is 0, of sequence `seq`; sets *len to its length. */
static bool rec_valid(const struct flash_log *fl, const unsigned char *rec, uint32_t avail,
                      uint64_t life, uint64_t seq, uint32_t *len)
{
    if (avail < REC_HDR)
        return false;
    const struct flash_rec *h = (const struct flash_rec *)rec;
    if (h->magic != FLASH_MAGIC || h->life != life || (seq && h->seq != seq) ||
        h->page_bytes != fl->page_bytes)
        return false;
    uint64_t l = rec_len(h->key_len, h->value_len);
    if (l > avail)
        return false;
    if (rec_crc(h, rec + REC_HDR, rec + REC_HDR + h->key_len) != h->crc)
        return false;
    *len = (uint32_t)l;
    return true;
}

static uint64_t page_off(const struct flash_log *fl, uint64_t page)
{
    return fl->data_off + page * fl->page_bytes;
}

/* Record on the device page `page`'s life and whether it has ended (its slot of the life table:
 * life x 2 + ended): the new life before any location into it is handed out, so a daemon that
 * dies before the page is written leaves that life taken, and the next is another; its end when
 * the page is freed, so its records are not recovered at a restart. A page's life never depends
 * on what its own blocks hold, which a torn write may have changed. Returns 0 or -errno. Mutex
 * held. */
static int life_write(struct flash_log *fl, uint64_t page, uint64_t life, bool ended)
{
    uint64_t v = life << 1 | ended;
    int rc = io_buf(fl, true, &v, sizeof(v), fl->table_off + page * sizeof(v));
    if (rc == 0)
        fl->st.bytes_device += FLASH_BLOCK; /* the device writes the table's block */
    return rc;
}

/* Write the page being filled (its used part, to the block) and mark it full; on failure it
 * stays the page being filled (FLASH_IO). Mutex held. */
static int seal_locked(struct flash_log *fl)
{
    if (fl->cur < 0)
        return FLASH_OK;
    struct flash_page *p = &fl->pages[fl->cur];
    uint64_t page = (uint64_t)fl->cur;
    uint32_t len = (fl->wused + FLASH_BLOCK - 1) & ~(FLASH_BLOCK - 1);
    if (len > fl->page_bytes)
        len = fl->page_bytes;
    /* Past the last record, zeros up to the block: recovery stops there (a whole unit of zeros
     * is no record). What lies past the block is an earlier life's, of another sequence. */
    memset(fl->wbuf + fl->wused, 0, len - fl->wused);
    if (p->used == 0) {
        fl->cur = -1;
        fl->wused = 0;
        page_reset(p);
        g_queue_push_head(&fl->free_pages, GSIZE_TO_POINTER(page + 1));
        return FLASH_OK;
    }
    if (io_buf(fl, true, fl->wbuf, len, page_off(fl, page)) != 0) {
        /* The page stays the one being filled, whole in its buffer and read from there: its
         * records are items whose entries name them, so losing them would evict items nobody
         * can name (their keys are in the buffer only). Appends fail meanwhile (their victims
         * stay in memory or are evicted) and the next seal writes the page again. Part of it
         * may have reached the device: its life stands, so a crash before a write succeeds
         * recovers only whole records of it, each of its own location. */
        return FLASH_IO;
    }
    fl->cur = -1;
    fl->wused = 0;
    fl->st.bytes_device += len;
    p->state = PAGE_FULL;
    return FLASH_OK;
}

/* Read page i's records at open: front to back, up to the first that is not an intact record
 * of the page's life (from the life table) and of the first one's sequence. Returns 0 or -EIO. */
static int recover_page(struct flash_log *fl, uint64_t i)
{
    struct flash_page *p = &fl->pages[i];
    if (p->life == 0 || p->ended)
        return 0; /* never written, or freed */
    if (io_buf(fl, false, fl->scratch, fl->page_bytes, page_off(fl, i)) != 0)
        return -EIO;
    uint32_t at = 0, len;
    uint64_t seq = 0;
    while (at < fl->page_bytes &&
           rec_valid(fl, fl->scratch + at, fl->page_bytes - at, p->life, seq, &len)) {
        seq = ((const struct flash_rec *)(fl->scratch + at))->seq;
        uint16_t s = (uint16_t)(at / FLASH_UNIT) | START_LIVE;
        g_array_append_val(p->starts, s);
        at += len;
    }
    if (!p->starts->len)
        return 0;
    p->state = PAGE_FULL;
    p->seq = seq;
    p->used = p->live = at;
    fl->st.recovered += p->starts->len;
    fl->st.objects_live += p->starts->len;
    if (seq >= fl->next_seq)
        fl->next_seq = seq + 1;
    return 0;
}

/* Judge the file's first n bytes (at most a block) as this log's superblock. Returns 1 (this
 * node's log, of this shape), 0 (blank: a new file) or -1 with the reason in err. */
static int super_check(const struct flash_log *fl, const unsigned char *blk, size_t n, char *err,
                       size_t errlen)
{
    bool blank = true;
    for (size_t i = 0; i < n && blank; i++)
        blank = blk[i] == 0;
    if (blank)
        return 0;
    struct flash_super sb;
    if (n >= sizeof(sb))
        memcpy(&sb, blk, sizeof(sb));
    if (n < sizeof(sb) || sb.magic != FLASH_SUPER_MAGIC || sb.format != FLASH_FORMAT ||
        crc32_iscsi((unsigned char *)&sb, (int)offsetof(struct flash_super, crc), 0) != sb.crc) {
        snprintf(err, errlen,
                 "flash: %s is not a Nessie flash log of format %u: left as it is; remove it to "
                 "start an empty one", fl->path, FLASH_FORMAT);
        return -1;
    }
    if (sb.node != fl->node || memcmp(sb.cluster, fl->cluster, sizeof(sb.cluster)) != 0) {
        snprintf(err, errlen, "flash: %s is the log of cluster %.64s node %u, not of %s node %u",
                 fl->path, sb.cluster, sb.node, fl->cluster, fl->node);
        return -1;
    }
    if (sb.page_bytes != fl->page_bytes || sb.npages != fl->npages) {
        snprintf(err, errlen,
                 "flash: %s was made with %llu pages of %u bytes, not %llu of %u: left as it is; "
                 "set [flash] bytes and page_bytes back, or remove the file to start it empty",
                 fl->path, (unsigned long long)sb.npages, sb.page_bytes,
                 (unsigned long long)fl->npages, fl->page_bytes);
        return -1;
    }
    return 1;
}

/* The superblock and the life table at open, the file already judged (super_check) and sized:
 * made anew (fresh, or a new file), or the table read. Returns 0, or -1 with the reason in
 * err. */
static int super_load(struct flash_log *fl, bool fresh, char *err, size_t errlen)
{
    uint64_t tbytes = fl->npages * sizeof(uint64_t);
    if (!fresh) {
        if (io_buf(fl, false, fl->scratch, FLASH_BLOCK, 0) != 0) {
            snprintf(err, errlen, "flash: cannot read %s: %s", fl->path, strerror(EIO));
            return -1;
        }
        int rc = super_check(fl, fl->scratch, FLASH_BLOCK, err, errlen);
        if (rc < 0)
            return -1;
        fresh = rc == 0; /* a new file */
    }
    if (fresh) {
        /* Every life 0 (the table's blocks zeroed), then the superblock that makes it a log. */
        memset(fl->scratch, 0, FLASH_BLOCK);
        for (uint64_t at = 0; at < tbytes; at += FLASH_BLOCK) {
            uint64_t n = tbytes - at < FLASH_BLOCK ? tbytes - at : FLASH_BLOCK;
            if (io_buf(fl, true, fl->scratch, n, fl->table_off + at) != 0) {
                snprintf(err, errlen, "flash: cannot write %s: %s", fl->path, strerror(EIO));
                return -1;
            }
        }
        struct flash_super sb = {.magic = FLASH_SUPER_MAGIC, .format = FLASH_FORMAT,
                                 .page_bytes = fl->page_bytes, .npages = fl->npages,
                                 .node = fl->node};
        memcpy(sb.cluster, fl->cluster, sizeof(sb.cluster));
        sb.crc = crc32_iscsi((unsigned char *)&sb, (int)offsetof(struct flash_super, crc), 0);
        memcpy(fl->scratch, &sb, sizeof(sb));
        if (io_buf(fl, true, fl->scratch, FLASH_BLOCK, 0) != 0) {
            snprintf(err, errlen, "flash: cannot write %s: %s", fl->path, strerror(EIO));
            return -1;
        }
        return 0;
    }
    for (uint64_t at = 0; at < tbytes; at += fl->page_bytes) {
        uint64_t n = tbytes - at < fl->page_bytes ? tbytes - at : fl->page_bytes;
        if (io_buf(fl, false, fl->scratch, n, fl->table_off + at) != 0) {
            snprintf(err, errlen, "flash: cannot read %s: %s", fl->path, strerror(EIO));
            return -1;
        }
        for (uint64_t k = 0; k < n / sizeof(uint64_t); k++) {
            uint64_t v;
            memcpy(&v, fl->scratch + k * sizeof(v), sizeof(v));
            struct flash_page *p = &fl->pages[at / sizeof(v) + k];
            p->life = v >> 1;
            p->ended = v & 1;
        }
    }
    return 0;
}

/* --- the calls ------------------------------------------------------------------------------ */

int flash_open(const struct flash_config *cfg, struct flash_log **out, char *err, size_t errlen)
{
    *out = NULL;
    uint32_t pb = cfg->page_bytes;
    if (pb < FLASH_PAGE_MIN || pb > FLASH_PAGE_MAX || (pb & (pb - 1))) {
        snprintf(err, errlen, "flash: page size %u is not a power of two from %u to %u", pb,
                 FLASH_PAGE_MIN, FLASH_PAGE_MAX);
        return -1;
    }
    if (cfg->bytes < pb || cfg->bytes % pb || cfg->bytes > FLASH_MAX_BYTES) {
        snprintf(err, errlen,
                 "flash: size %llu is not a whole number of %u-byte pages up to %llu bytes",
                 (unsigned long long)cfg->bytes, pb, (unsigned long long)FLASH_MAX_BYTES);
        return -1;
    }
    struct stat sb;
    if (!cfg->dir || !*cfg->dir) {
        snprintf(err, errlen, "flash: no path set (a directory for the nodes' logs)");
        return -1;
    }
    if (stat(cfg->dir, &sb) != 0) {
        snprintf(err, errlen, "flash: path %s: %s", cfg->dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "flash: path %s: not a directory", cfg->dir);
        return -1;
    }
    struct flash_log *fl = g_new0(struct flash_log, 1);
    fl->fd = -1;
    fl->cur = -1;
    fl->next_seq = 1;
    fl->bytes = cfg->bytes;
    fl->page_bytes = pb;
    fl->npages = cfg->bytes / pb;
    fl->table_off = FLASH_BLOCK;
    fl->data_off = fl->table_off +
                   ((fl->npages * sizeof(uint64_t) + FLASH_BLOCK - 1) & ~(uint64_t)(FLASH_BLOCK - 1));
    uint64_t fsize = fl->data_off + cfg->bytes;
    fl->node = cfg->node;
    snprintf(fl->cluster, sizeof(fl->cluster), "%s", cfg->cluster ? cfg->cluster : "");
    fl->path = cfg->cluster && *cfg->cluster
                   ? g_strdup_printf("%s/%s.node%u.flash", cfg->dir, cfg->cluster, cfg->node)
                   : g_strdup_printf("%s/node%u.flash", cfg->dir, cfg->node);
    pthread_mutex_init(&fl->mu, NULL);
    g_queue_init(&fl->free_pages);

    /* Setup, in order; on a failure, `fail` undoes what was done (flash_close's ladder, and
     * the file itself when this call made it). */
    bool created = stat(fl->path, &sb) != 0;
    fl->fd = open(fl->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fl->fd < 0) {
        snprintf(err, errlen, "flash: cannot open %s: %s", fl->path, strerror(errno));
        goto fail;
    }
    /* One process per log: a second daemon of the same node (or a test) is refused, not let
     * to write over the first one's pages. */
    if (flock(fl->fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, errlen, "flash: %s is in use by another process (%s)", fl->path,
                 strerror(errno));
        created = false; /* not ours to remove */
        goto fail;
    }
    /* A file that is there and is not this node's log of this shape is refused before it is
     * resized or reserved: left exactly as it was. */
    if (!cfg->fresh && !created) {
        unsigned char blk[FLASH_BLOCK];
        ssize_t n = pread(fl->fd, blk, sizeof(blk), 0);
        if (n < 0) {
            snprintf(err, errlen, "flash: cannot read %s: %s", fl->path, strerror(errno));
            goto fail;
        }
        if (super_check(fl, blk, (size_t)n, err, errlen) < 0)
            goto fail;
    }
    /* The whole file's blocks now: a disk without room is refused at start, not at the first
     * demotion. Judged first from the free space (the file's own blocks counted as room), so a
     * size far past it is refused without filling the disk on the way (a failed fallocate may
     * keep what it took), and before a fresh log empties the file. */
    struct statvfs vfs;
    int rc = 0;
    if (fstat(fl->fd, &sb) != 0 || fstatvfs(fl->fd, &vfs) != 0) {
        snprintf(err, errlen, "flash: cannot stat %s: %s", fl->path, strerror(errno));
        goto fail;
    }
    if (fsize > (uint64_t)sb.st_blocks * 512 + (uint64_t)vfs.f_bavail * vfs.f_frsize)
        rc = ENOSPC;
    if (rc == 0 && (cfg->fresh || (uint64_t)sb.st_size > fsize) &&
        ftruncate(fl->fd, cfg->fresh ? 0 : (off_t)fsize) != 0) {
        snprintf(err, errlen, "flash: cannot size %s: %s", fl->path, strerror(errno));
        goto fail;
    }
    if (rc == 0)
        rc = posix_fallocate(fl->fd, 0, (off_t)fsize);
    if (rc != 0) {
        snprintf(err, errlen, "flash: cannot reserve %llu bytes for %s: %s",
                 (unsigned long long)cfg->bytes, fl->path, strerror(rc));
        goto fail;
    }
    fl->pages = g_new0(struct flash_page, fl->npages);
    for (uint64_t i = 0; i < fl->npages; i++)
        fl->pages[i].starts = g_array_new(FALSE, FALSE, sizeof(uint16_t));
    fl->wbuf = aligned_alloc(FLASH_BLOCK, pb);
    fl->scratch = aligned_alloc(FLASH_BLOCK, pb);
    if (!fl->wbuf || !fl->scratch) {
        snprintf(err, errlen, "flash: no memory for %u-byte page buffers", pb);
        goto fail;
    }
    if (!cfg->no_uring) {
        rc = io_uring_queue_init(FLASH_URING_DEPTH, &fl->ring, 0);
        if (rc == 0)
            fl->uring = true;
        else
            log_warn("flash: io_uring refused by the kernel (%s): %s uses plain pread/pwrite",
                     strerror(-rc), fl->path);
    }
    fl->st.uring = fl->uring;
    if (super_load(fl, cfg->fresh, err, errlen) != 0)
        goto fail;
    for (uint64_t i = 0; i < fl->npages; i++) {
        if (recover_page(fl, i) != 0) {
            snprintf(err, errlen, "flash: cannot read %s at %llu: %s", fl->path,
                     (unsigned long long)page_off(fl, i), strerror(EIO));
            goto fail;
        }
        if (fl->pages[i].state == PAGE_FREE)
            g_queue_push_tail(&fl->free_pages, GSIZE_TO_POINTER(i + 1));
    }
    *out = fl;
    return 0;
fail:
    if (created && fl->fd >= 0)
        unlink(fl->path);
    flash_close(fl);
    return -1;
}

void flash_close(struct flash_log *fl)
{
    if (!fl)
        return;
    if (fl->fd >= 0 && fl->pages) {
        pthread_mutex_lock(&fl->mu);
        (void)seal_locked(fl); /* a failure is logged, and its records are lost as a crash's */
        pthread_mutex_unlock(&fl->mu);
    }
    if (fl->uring)
        io_uring_queue_exit(&fl->ring);
    free(fl->scratch);
    free(fl->wbuf);
    for (uint64_t i = 0; fl->pages && i < fl->npages; i++)
        g_array_free(fl->pages[i].starts, TRUE);
    g_free(fl->pages);
    if (fl->fd >= 0)
        close(fl->fd);
    g_queue_clear(&fl->free_pages);
    pthread_mutex_destroy(&fl->mu);
    g_free(fl->path);
    g_free(fl);
}

/* flash_append and flash_rewrite: a rewrite is counted apart, as write amplification. */
static int append(struct flash_log *fl, const void *key, uint32_t klen, const void *value,
                  uint32_t vlen, const struct flash_meta *meta, uint64_t *loc, bool rewrite)
{
    if (klen == 0 || klen > UINT8_MAX)
        return FLASH_BAD;
    uint64_t need = (uint64_t)REC_HDR + klen + vlen;
    if (need > fl->page_bytes)
        return FLASH_TOO_BIG;
    uint32_t len = (uint32_t)rec_len(klen, vlen);
    pthread_mutex_lock(&fl->mu);
    int rc = FLASH_OK;
    if (fl->cur >= 0 && fl->wused + len > fl->page_bytes)
        rc = seal_locked(fl);
    if (rc == FLASH_OK && fl->cur < 0) {
        gpointer q = g_queue_pop_head(&fl->free_pages);
        if (!q) {
            rc = FLASH_FULL;
        } else {
            uint64_t page = GPOINTER_TO_SIZE(q) - 1;
            struct flash_page *p = &fl->pages[page];
            /* The new life on the device before any location into it (life_write); if that
             * fails, the life is skipped all the same. */
            p->life++;
            if (life_write(fl, page, p->life, false) != 0) {
                g_queue_push_tail(&fl->free_pages, q);
                rc = FLASH_IO;
            } else {
                fl->cur = (int64_t)page;
                p->state = PAGE_OPEN;
                p->seq = fl->next_seq++;
                fl->wused = 0;
            }
        }
    }
    if (rc != FLASH_OK) {
        pthread_mutex_unlock(&fl->mu);
        return rc;
    }
    struct flash_page *p = &fl->pages[fl->cur];
    unsigned char *r = fl->wbuf + fl->wused;
    struct flash_rec *h = (struct flash_rec *)r;
    *h = (struct flash_rec){.magic = FLASH_MAGIC, .seq = p->seq, .version = meta->version,
                            .flags = meta->flags, .exptime = meta->exptime, .value_len = vlen,
                            .key_len = (uint8_t)klen, .flags8 = meta->flags8,
                            .life = p->life, .page_bytes = fl->page_bytes};
    memcpy(r + REC_HDR, key, klen);
    memcpy(r + REC_HDR + klen, value, vlen);
    memset(r + REC_HDR + klen + vlen, 0, len - (REC_HDR + klen + vlen));
    h->crc = rec_crc(h, r + REC_HDR, r + REC_HDR + klen);
    uint16_t s = (uint16_t)(fl->wused / FLASH_UNIT) | START_LIVE;
    g_array_append_val(p->starts, s);
    *loc = flash_loc_make((uint64_t)fl->cur * fl->page_bytes + fl->wused, p->life);
    fl->wused += len;
    p->used += len;
    p->live += len;
    fl->st.objects_written++;
    fl->st.objects_live++;
    fl->st.bytes_appended += len;
    if (rewrite) {
        fl->st.objects_rewritten++;
        fl->st.bytes_rewritten += len;
    }
    pthread_mutex_unlock(&fl->mu);
    return FLASH_OK;
}

int flash_append(struct flash_log *fl, const void *key, uint32_t klen, const void *value,
                 uint32_t vlen, const struct flash_meta *meta, uint64_t *loc)
{
    return append(fl, key, klen, value, vlen, meta, loc, false);
}

int flash_rewrite(struct flash_log *fl, const void *key, uint32_t klen, const void *value,
                  uint32_t vlen, const struct flash_meta *meta, uint64_t *loc)
{
    return append(fl, key, klen, value, vlen, meta, loc, true);
}

uint64_t flash_pages_free(struct flash_log *fl)
{
    pthread_mutex_lock(&fl->mu);
    uint64_t n = g_queue_get_length(&fl->free_pages);
    pthread_mutex_unlock(&fl->mu);
    return n;
}

int flash_seal(struct flash_log *fl)
{
    pthread_mutex_lock(&fl->mu);
    int rc = seal_locked(fl);
    pthread_mutex_unlock(&fl->mu);
    return rc;
}

/* The page and record loc names, for a read: its offset in the page and length in *in_page and
 * *len; or NULL with *rc FLASH_BAD (past the file) or FLASH_MISS (no record of that life there;
 * counted). Mutex held. */
static struct flash_page *rec_find(struct flash_log *fl, uint64_t loc, uint32_t *in_page,
                                   uint32_t *len, int *rc)
{
    bool bad;
    struct flash_page *p = page_of(fl, loc, in_page, &bad);
    gint i = p ? start_find(p, *in_page) : -1;
    if (i < 0) {
        if (!bad)
            fl->st.misses++;
        *rc = bad ? FLASH_BAD : FLASH_MISS;
        return NULL;
    }
    *len = start_len(p, i);
    return p;
}

/* The end of a read whose result so far is rc, its header h (key and value where they were
 * read, len its length): a record whose CRC fails is a miss (counted, logged); a miss is
 * counted; a hit fills *meta and is counted. Returns the read's result. Mutex held. */
static int read_end(struct flash_log *fl, uint64_t loc, int rc, const struct flash_rec *h,
                    const void *key, const void *value, uint32_t len, struct flash_meta *meta)
{
    if (rc == FLASH_OK && rec_crc(h, key, value) != h->crc) {
        fl->st.crc_failures++;
        log_warn("flash: record at %llu of %s fails its CRC: read as a miss",
                 (unsigned long long)flash_loc_offset(loc), fl->path);
        rc = FLASH_MISS;
    }
    if (rc == FLASH_MISS)
        fl->st.misses++;
    if (rc == FLASH_OK) {
        *meta = (struct flash_meta){.version = h->version, .flags = h->flags,
                                    .exptime = h->exptime, .flags8 = h->flags8};
        fl->st.objects_read++;
        fl->st.bytes_read += len;
    }
    return rc;
}

int flash_read(struct flash_log *fl, uint64_t loc, const void *key, uint32_t klen, void *buf,
               size_t cap, uint32_t *vlen, struct flash_meta *meta)
{
    if (klen == 0 || klen > UINT8_MAX)
        return FLASH_BAD;
    pthread_mutex_lock(&fl->mu);
    uint32_t in_page = 0, len = 0;
    int rc = FLASH_OK;
    struct flash_page *p = rec_find(fl, loc, &in_page, &len, &rc);
    if (!p) {
        pthread_mutex_unlock(&fl->mu);
        return rc;
    }
    uint64_t page = flash_loc_offset(loc) / fl->page_bytes;
    struct flash_rec h;
    unsigned char kbuf[UINT8_MAX];
    uint64_t life = p->life, seq = p->seq;
    /* Anything shorter than the header and this key cannot be the key's record. */
    if (len < REC_HDR + klen) {
        rc = FLASH_MISS;
    } else if (p->state == PAGE_OPEN) {
        const unsigned char *r = fl->wbuf + in_page;
        memcpy(&h, r, REC_HDR);
        memcpy(kbuf, r + REC_HDR, klen);
        if (h.key_len == klen && h.value_len <= cap && h.value_len <= len - REC_HDR - klen)
            memcpy(buf, r + REC_HDR + klen, h.value_len);
    } else {
        /* Header, key, then the value straight into the caller's room; its padding (or a
         * value too big for the room) into a scratch buffer of this read's own. Without the
         * mutex (see "reads without the log's mutex"). */
        size_t rest = len - REC_HDR - klen;
        size_t direct = rest < cap ? rest : cap;
        unsigned char padbuf[FLASH_UNIT];
        unsigned char *pad = rest - direct <= sizeof(padbuf) ? padbuf : malloc(rest - direct);
        struct iovec iov[4] = {{&h, REC_HDR}, {kbuf, klen}, {buf, direct}, {pad, rest - direct}};
        struct io_faults share;
        struct io_how how;
        bool uring = read_begin(fl, &share, &how);
        pthread_mutex_unlock(&fl->mu);
        read_go(fl, uring, &how);
        int io = -ENOMEM;
        if (pad)
            io = io_full(fl, &how, false, iov, rest > direct ? 4 : 3,
                         page_off(fl, page) + in_page);
        if (pad != padbuf)
            free(pad);
        pthread_mutex_lock(&fl->mu);
        read_end_io(fl, &share, &how);
        if (io != 0)
            rc = FLASH_IO;
        else if (!page_is(fl, (int64_t)page, life))
            rc = FLASH_MISS; /* freed (and perhaps written again) while it was read */
    }
    if (rc == FLASH_OK) {
        /* The record must be this key's, of this life of the page, whole and intact; its
         * length from the device is believed only where it matches the one kept in memory. */
        if (h.magic != FLASH_MAGIC || h.life != life || h.seq != seq ||
            h.page_bytes != fl->page_bytes || h.key_len != klen ||
            memcmp(kbuf, key, klen) != 0 || rec_len(klen, h.value_len) != len) {
            rc = FLASH_MISS;
        } else if (h.value_len > cap) {
            *vlen = h.value_len;
            rc = FLASH_TOO_BIG;
        }
    }
    rc = read_end(fl, loc, rc, &h, kbuf, buf, len, meta);
    if (rc == FLASH_OK)
        *vlen = h.value_len;
    pthread_mutex_unlock(&fl->mu);
    return rc;
}

bool flash_has(struct flash_log *fl, uint64_t loc)
{
    pthread_mutex_lock(&fl->mu);
    uint32_t in_page = 0;
    bool bad;
    struct flash_page *p = page_of(fl, loc, &in_page, &bad);
    bool has = p && start_find(p, in_page) >= 0;
    pthread_mutex_unlock(&fl->mu);
    return has;
}

int flash_read_rec(struct flash_log *fl, uint64_t loc, void *buf, size_t cap, uint32_t *klen,
                   uint32_t *vlen, struct flash_meta *meta)
{
    pthread_mutex_lock(&fl->mu);
    uint32_t in_page = 0, len = 0;
    int rc = FLASH_OK;
    struct flash_page *p = rec_find(fl, loc, &in_page, &len, &rc);
    if (!p) {
        pthread_mutex_unlock(&fl->mu);
        return rc;
    }
    uint64_t page = flash_loc_offset(loc) / fl->page_bytes;
    uint64_t life = p->life, seq = p->seq;
    struct flash_rec h;
    /* Key, value and padding land in buf: the length kept in memory says how much (a record's
     * length read from the device is believed only where it matches that one). */
    if (len <= REC_HDR) {
        rc = FLASH_MISS;
    } else if (len - REC_HDR > cap) {
        rc = FLASH_TOO_BIG;
    } else if (p->state == PAGE_OPEN) {
        memcpy(&h, fl->wbuf + in_page, REC_HDR);
        memcpy(buf, fl->wbuf + in_page + REC_HDR, len - REC_HDR);
    } else {
        /* Without the mutex, as flash_read. */
        struct iovec iov[2] = {{&h, REC_HDR}, {buf, len - REC_HDR}};
        struct io_faults share;
        struct io_how how;
        bool uring = read_begin(fl, &share, &how);
        pthread_mutex_unlock(&fl->mu);
        read_go(fl, uring, &how);
        int io = io_full(fl, &how, false, iov, 2, page_off(fl, page) + in_page);
        pthread_mutex_lock(&fl->mu);
        read_end_io(fl, &share, &how);
        if (io != 0)
            rc = FLASH_IO;
        else if (!page_is(fl, (int64_t)page, life))
            rc = FLASH_MISS; /* freed (and perhaps written again) while it was read */
    }
    const unsigned char *k = buf;
    if (rc == FLASH_OK &&
        (h.magic != FLASH_MAGIC || h.life != life || h.seq != seq ||
         h.page_bytes != fl->page_bytes || h.key_len == 0 || rec_len(h.key_len, h.value_len) != len))
        rc = FLASH_MISS;
    rc = read_end(fl, loc, rc, &h, k, k + (rc == FLASH_OK ? h.key_len : 0), len, meta);
    if (rc == FLASH_OK) {
        *klen = h.key_len;
        *vlen = h.value_len;
    }
    pthread_mutex_unlock(&fl->mu);
    return rc;
}

/* Set or clear the live bit of the record at loc, keeping the page's live bytes and the live
 * count exact. Returns FLASH_OK, or FLASH_MISS when loc names no record of the page's current
 * life or the bit is already so. */
static int set_live(struct flash_log *fl, uint64_t loc, bool live)
{
    pthread_mutex_lock(&fl->mu);
    uint32_t in_page = 0;
    bool bad;
    struct flash_page *p = page_of(fl, loc, &in_page, &bad);
    gint i = p ? start_find(p, in_page) : -1;
    int rc = FLASH_MISS;
    uint16_t *s = i >= 0 ? &g_array_index(p->starts, uint16_t, i) : NULL;
    if (s && !(*s & START_LIVE) == live) {
        *s ^= START_LIVE;
        if (live) {
            p->live += start_len(p, i);
            fl->st.objects_live++;
        } else {
            p->live -= start_len(p, i);
            fl->st.objects_live--;
        }
        rc = FLASH_OK;
    }
    pthread_mutex_unlock(&fl->mu);
    return rc;
}

int flash_unlink(struct flash_log *fl, uint64_t loc)
{
    return set_live(fl, loc, false);
}

/* The full page that `better` prefers to all others (and that `ok` admits), with its life in
 * *life, or -1. */
static int64_t page_pick(struct flash_log *fl, bool (*ok)(const struct flash_page *, uint32_t),
                         bool (*better)(const struct flash_page *, const struct flash_page *),
                         uint32_t arg, uint64_t *life)
{
    pthread_mutex_lock(&fl->mu);
    int64_t best = -1;
    for (uint64_t i = 0; i < fl->npages; i++) {
        const struct flash_page *p = &fl->pages[i];
        if (p->state == PAGE_FULL && ok(p, arg) && (best < 0 || better(p, &fl->pages[best])))
            best = (int64_t)i;
    }
    if (best >= 0 && life)
        *life = fl->pages[best].life;
    pthread_mutex_unlock(&fl->mu);
    return best;
}

static bool any_page(const struct flash_page *p, uint32_t arg)
{
    (void)p, (void)arg;
    return true;
}
static bool older(const struct flash_page *a, const struct flash_page *b) { return a->seq < b->seq; }
static bool sparse_enough(const struct flash_page *p, uint32_t max_live_pct)
{
    return (uint64_t)p->live * 100 <= (uint64_t)p->used * max_live_pct;
}
static bool sparser(const struct flash_page *a, const struct flash_page *b)
{
    return a->live < b->live;
}

int64_t flash_oldest_page(struct flash_log *fl, uint64_t *life)
{
    return page_pick(fl, any_page, older, 0, life);
}

int64_t flash_sparsest_page(struct flash_log *fl, uint32_t max_live_pct, uint64_t *life)
{
    return page_pick(fl, sparse_enough, sparser, max_live_pct, life);
}

int flash_page_each(struct flash_log *fl, int64_t page, uint64_t life, flash_each_fn fn,
                    void *user, uint64_t *lost)
{
    if (lost)
        *lost = 0;
    if (page < 0 || (uint64_t)page >= fl->npages)
        return FLASH_BAD;
    /* The page's live starts, taken under the mutex; its bytes read with pread without it
     * (the ring is the mutex's), and fn run without it (it may append the records it keeps, or
     * unlink them). */
    pthread_mutex_lock(&fl->mu);
    struct flash_page *p = &fl->pages[page];
    if (!page_is(fl, page, life)) {
        pthread_mutex_unlock(&fl->mu);
        return FLASH_MISS;
    }
    uint32_t used = p->used;
    GArray *starts = g_array_copy(p->starts);
    bool fail = fl->faults.fail_reads > 0;
    fl->faults.fail_reads -= fail;
    pthread_mutex_unlock(&fl->mu);
    unsigned char *copy = g_malloc(used);
    int rc = FLASH_OK;
    uint64_t got = 0, off = page_off(fl, (uint64_t)page);
    while (!fail && got < used) {
        ssize_t r = pread(fl->fd, copy + got, used - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            log_warn("flash: read of %s at %llu: %s", fl->path, (unsigned long long)(off + got),
                     r ? strerror(errno) : "end of file");
            fail = true;
            break;
        }
        got += (uint64_t)r;
    }
    /* Freed (and perhaps written again) while it was read: what was read is not its life's. */
    pthread_mutex_lock(&fl->mu);
    if (!page_is(fl, page, life))
        rc = FLASH_MISS;
    else if (fail)
        fl->st.io_errors++;
    pthread_mutex_unlock(&fl->mu);
    if (fail && rc == FLASH_OK)
        rc = FLASH_IO;
    uint64_t bad = 0;
    for (guint i = 0; rc == FLASH_OK && i < starts->len; i++) {
        uint16_t s = g_array_index(starts, uint16_t, i);
        uint32_t at = (s & START_MASK) * FLASH_UNIT, len;
        if (!(s & START_LIVE))
            continue;
        if (!rec_valid(fl, copy + at, used - at, life, 0, &len)) {
            /* Written whole and read back changed: the device's fault, the item a miss. */
            bad++;
            continue;
        }
        const struct flash_rec *h = (const struct flash_rec *)(copy + at);
        struct flash_meta m = {.version = h->version, .flags = h->flags, .exptime = h->exptime,
                               .flags8 = h->flags8};
        uint64_t loc = flash_loc_make((uint64_t)page * fl->page_bytes + at, life);
        if (!fn(user, loc, copy + at + REC_HDR, h->key_len,
                copy + at + REC_HDR + h->key_len, h->value_len, &m))
            break;
    }
    if (bad) {
        pthread_mutex_lock(&fl->mu);
        fl->st.crc_failures += bad;
        pthread_mutex_unlock(&fl->mu);
    }
    if (lost)
        *lost = bad;
    g_free(copy);
    g_array_free(starts, TRUE);
    return rc;
}

int flash_page_free(struct flash_log *fl, int64_t page, uint64_t life)
{
    if (page < 0 || (uint64_t)page >= fl->npages)
        return FLASH_BAD;
    pthread_mutex_lock(&fl->mu);
    struct flash_page *p = &fl->pages[page];
    if (!page_is(fl, page, life)) {
        pthread_mutex_unlock(&fl->mu);
        return FLASH_MISS;
    }
    /* Its life ends on the device first: if that fails, the page stays as it is (a restart
     * would find its records, whose locations the caller may have dropped). */
    if (life_write(fl, (uint64_t)page, life, true) != 0) {
        pthread_mutex_unlock(&fl->mu);
        return FLASH_IO;
    }
    fl->st.objects_live -= live_records(p);
    page_reset(p);
    g_queue_push_tail(&fl->free_pages, GSIZE_TO_POINTER((uint64_t)page + 1));
    fl->st.page_reclaims++;
    pthread_mutex_unlock(&fl->mu);
    return FLASH_OK;
}

void flash_relive_begin(struct flash_log *fl)
{
    pthread_mutex_lock(&fl->mu);
    for (uint64_t i = 0; i < fl->npages; i++) {
        struct flash_page *p = &fl->pages[i];
        if (p->state != PAGE_FULL)
            continue;
        fl->st.objects_live -= live_records(p);
        for (guint k = 0; k < p->starts->len; k++)
            g_array_index(p->starts, uint16_t, k) &= START_MASK;
        p->live = 0;
    }
    pthread_mutex_unlock(&fl->mu);
}

int flash_relive(struct flash_log *fl, uint64_t loc)
{
    return set_live(fl, loc, true);
}

void flash_inject_short(struct flash_log *fl, uint32_t n)
{
    pthread_mutex_lock(&fl->mu);
    fl->faults.short_left = n;
    pthread_mutex_unlock(&fl->mu);
}

void flash_inject_read_pause(struct flash_log *fl, void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&fl->mu);
    fl->read_pause = fn;
    fl->read_pause_arg = arg;
    pthread_mutex_unlock(&fl->mu);
}

void flash_inject_errors(struct flash_log *fl, uint32_t reads, uint32_t writes)
{
    pthread_mutex_lock(&fl->mu);
    fl->faults.fail_reads = reads;
    fl->faults.fail_writes = writes;
    pthread_mutex_unlock(&fl->mu);
}

void flash_stats(struct flash_log *fl, struct flash_stats *st)
{
    pthread_mutex_lock(&fl->mu);
    *st = fl->st;
    st->pages = fl->npages;
    st->pages_free = st->pages_full = st->bytes_used = st->bytes_live = 0;
    for (uint64_t i = 0; i < fl->npages; i++) {
        const struct flash_page *p = &fl->pages[i];
        st->pages_free += p->state == PAGE_FREE;
        st->pages_full += p->state == PAGE_FULL;
        st->bytes_used += p->used;
        st->bytes_live += p->live;
        st->ram_bytes += sizeof(*p) + p->starts->len * sizeof(uint16_t);
    }
    st->ram_bytes += sizeof(*fl) + 2ull * fl->page_bytes;
    pthread_mutex_unlock(&fl->mu);
}

uint64_t flash_file_offset(const struct flash_log *fl, uint64_t loc)
{
    return fl->data_off + flash_loc_offset(loc);
}
