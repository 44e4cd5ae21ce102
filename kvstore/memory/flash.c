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
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <glib.h>
#include <isa-l/crc.h>
#include <liburing.h>

#include "flash.h"
#include "log.h"

#define FLASH_MAGIC 0x4e53484cu /* "LHSN" on a little-endian disk */
/* The device's block: a page's used part is written rounded up to it. */
#define FLASH_BLOCK 4096u
/* One I/O in flight at a time (the log's mutex is held across it); a few spare entries. */
#define FLASH_URING_DEPTH 4
/* A page's starts: the low 15 bits a record's start / 64, bit 15 whether it is live. */
#define START_LIVE 0x8000u
#define START_MASK 0x7FFFu
#define REC_HDR ((uint32_t)sizeof(struct flash_rec))
/* Bytes of a record covered by its CRC, after the magic and the CRC fields. */
#define REC_CRC_FROM 8u

enum page_state { PAGE_FREE, PAGE_OPEN, PAGE_FULL };

struct flash_page {
    uint64_t seq;   /* the life being filled or written (0: never written) */
    uint32_t used;  /* bytes of records */
    uint32_t live;  /* bytes of records not unlinked */
    uint8_t state;
    GArray *starts; /* uint16_t per record, in order: START_MASK units, START_LIVE */
};

struct flash_log {
    pthread_mutex_t mu; /* everything below: the evictor, SD servers and compaction share it */
    int fd;
    char *path;
    uint64_t bytes;
    uint32_t page_bytes;
    uint64_t npages;
    struct flash_page *pages;
    GQueue free_pages; /* page index + 1, the longest free first */
    int64_t cur;       /* the page being filled, or -1 */
    unsigned char *wbuf; /* its write buffer (page_bytes, block-aligned) */
    uint32_t wused;
    unsigned char *scratch; /* page_bytes: a read's padding, a page for recovery or a scan */
    uint64_t next_seq;
    bool uring;
    struct io_uring ring;
    uint32_t fail_reads, fail_writes; /* flash_inject_errors */
    struct flash_stats st;
};

static uint32_t rec_len(uint32_t klen, uint32_t vlen)
{
    return (REC_HDR + klen + vlen + FLASH_UNIT - 1) & ~(FLASH_UNIT - 1);
}

static uint32_t rec_crc(const struct flash_rec *h, const void *key, const void *value)
{
    uint32_t c = crc32_iscsi((unsigned char *)h + REC_CRC_FROM, (int)(REC_HDR - REC_CRC_FROM), 0);
    c = crc32_iscsi((unsigned char *)key, h->key_len, c);
    return crc32_iscsi((unsigned char *)value, (int)h->value_len, c);
}

/* --- I/O ------------------------------------------------------------------------------------ */

/* One vectored transfer at off, through the ring or the plain calls. Returns bytes moved or
 * -errno. */
static ssize_t io_once(struct flash_log *fl, bool wr, struct iovec *iov, int n, uint64_t off)
{
    if (wr ? fl->fail_writes : fl->fail_reads) {
        if (wr)
            fl->fail_writes--;
        else
            fl->fail_reads--;
        return -EIO;
    }
    if (!fl->uring) {
        ssize_t r = wr ? pwritev(fl->fd, iov, n, (off_t)off) : preadv(fl->fd, iov, n, (off_t)off);
        return r < 0 ? -errno : r;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(&fl->ring);
    if (!sqe)
        return -EBUSY; /* cannot happen: one I/O at a time, under the mutex */
    if (wr)
        io_uring_prep_writev(sqe, fl->fd, iov, (unsigned)n, off);
    else
        io_uring_prep_readv(sqe, fl->fd, iov, (unsigned)n, off);
    int rc = io_uring_submit(&fl->ring);
    if (rc < 0)
        return rc;
    struct io_uring_cqe *cqe;
    do
        rc = io_uring_wait_cqe(&fl->ring, &cqe);
    while (rc == -EINTR);
    if (rc < 0)
        return rc;
    ssize_t res = cqe->res;
    io_uring_cqe_seen(&fl->ring, cqe);
    return res;
}

/* The whole of iov[0..n) at off, short transfers continued; the end of the file is an error.
 * Returns 0 or -errno (logged, counted). iov is consumed. */
static int io_full(struct flash_log *fl, bool wr, struct iovec *iov, int n, uint64_t off)
{
    while (n > 0) {
        ssize_t r = io_once(fl, wr, iov, n, off);
        if (r == -EINTR || r == -EAGAIN)
            continue;
        if (r <= 0) {
            int err = r == 0 ? EIO : (int)-r;
            fl->st.io_errors++;
            log_warn("flash: %s %s at %llu: %s", wr ? "write to" : "read of", fl->path,
                     (unsigned long long)off, strerror(err));
            return -err;
        }
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

static int io_buf(struct flash_log *fl, bool wr, void *buf, size_t len, uint64_t off)
{
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    return io_full(fl, wr, &iov, 1, off);
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

/* The page at loc of its current life (not free, same sequence modulo 64), or NULL. */
static struct flash_page *page_of(struct flash_log *fl, uint64_t loc, uint32_t *in_page)
{
    uint64_t off = flash_loc_offset(loc);
    if (off >= fl->bytes)
        return NULL;
    struct flash_page *p = &fl->pages[off / fl->page_bytes];
    if (p->state == PAGE_FREE || (p->seq & ((1u << FLASH_LOC_SEQ_BITS) - 1)) != flash_loc_seq(loc))
        return NULL;
    *in_page = (uint32_t)(off % fl->page_bytes);
    return p;
}

/* Whether the bytes at rec (avail of them) begin a whole, intact record of life seq (0: any);
 * sets *len to its length. */
static bool rec_valid(const unsigned char *rec, uint32_t avail, uint64_t seq, uint32_t *len)
{
    if (avail < REC_HDR)
        return false;
    const struct flash_rec *h = (const struct flash_rec *)rec;
    if (h->magic != FLASH_MAGIC || h->seq == 0 || (seq && h->seq != seq))
        return false;
    uint32_t l = rec_len(h->key_len, h->value_len);
    if (h->value_len > avail || l > avail)
        return false;
    if (rec_crc(h, rec + REC_HDR, rec + REC_HDR + h->key_len) != h->crc)
        return false;
    *len = l;
    return true;
}

/* Write the page being filled (its used part, to the block) and mark it full; on failure its
 * records are lost (their locations read as misses) and it is free again. Mutex held. */
static int seal_locked(struct flash_log *fl)
{
    if (fl->cur < 0)
        return FLASH_OK;
    struct flash_page *p = &fl->pages[fl->cur];
    uint64_t page = (uint64_t)fl->cur;
    fl->cur = -1;
    uint32_t len = (fl->wused + FLASH_BLOCK - 1) & ~(FLASH_BLOCK - 1);
    if (len > fl->page_bytes)
        len = fl->page_bytes;
    /* Past the last record, zeros up to the block: recovery stops there (a whole unit of zeros
     * is no record). What lies past the block is an earlier life's, of another sequence. */
    memset(fl->wbuf + fl->wused, 0, len - fl->wused);
    fl->wused = 0;
    if (p->used == 0) {
        page_reset(p);
        g_queue_push_head(&fl->free_pages, GSIZE_TO_POINTER(page + 1));
        return FLASH_OK;
    }
    if (io_buf(fl, true, fl->wbuf, len, page * fl->page_bytes) != 0) {
        fl->st.objects_live -= live_records(p); /* those unlinked were counted already */
        page_reset(p);
        g_queue_push_tail(&fl->free_pages, GSIZE_TO_POINTER(page + 1));
        return FLASH_IO;
    }
    fl->st.bytes_device += len;
    p->state = PAGE_FULL;
    return FLASH_OK;
}

/* Read page i's records at open: front to back, up to the first that is not an intact record
 * of the first one's life. Returns 0 or -errno. */
static int recover_page(struct flash_log *fl, uint64_t i)
{
    struct flash_page *p = &fl->pages[i];
    if (io_buf(fl, false, fl->scratch, fl->page_bytes, i * fl->page_bytes) != 0)
        return -EIO;
    uint32_t at = 0, len;
    uint64_t seq = 0;
    while (at < fl->page_bytes && rec_valid(fl->scratch + at, fl->page_bytes - at, seq, &len)) {
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
    fl->path = g_strdup_printf("%s/node%u.flash", cfg->dir, cfg->node);
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
    if ((cfg->fresh || fstat(fl->fd, &sb) != 0 || (uint64_t)sb.st_size > cfg->bytes) &&
        ftruncate(fl->fd, cfg->fresh ? 0 : (off_t)cfg->bytes) != 0) {
        snprintf(err, errlen, "flash: cannot size %s: %s", fl->path, strerror(errno));
        goto fail;
    }
    /* The whole file's blocks now: a disk without room is refused at start, not at the first
     * demotion. Judged first from the free space, so a size far past it is refused without
     * filling the disk on the way (a failed fallocate may keep what it took). */
    struct statvfs vfs;
    int rc = 0;
    if (fstat(fl->fd, &sb) == 0 && fstatvfs(fl->fd, &vfs) == 0 &&
        cfg->bytes > (uint64_t)sb.st_blocks * 512 &&
        cfg->bytes - (uint64_t)sb.st_blocks * 512 > (uint64_t)vfs.f_bavail * vfs.f_frsize)
        rc = ENOSPC;
    if (rc == 0)
        rc = posix_fallocate(fl->fd, 0, (off_t)cfg->bytes);
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
    for (uint64_t i = 0; i < fl->npages; i++) {
        if (!cfg->fresh && recover_page(fl, i) != 0) {
            snprintf(err, errlen, "flash: cannot read %s at %llu: %s", fl->path,
                     (unsigned long long)(i * pb), strerror(EIO));
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

int flash_append(struct flash_log *fl, const void *key, uint32_t klen, const void *value,
                 uint32_t vlen, const struct flash_meta *meta, uint64_t *loc)
{
    if (klen == 0 || klen > UINT8_MAX)
        return FLASH_BAD;
    uint64_t need = (uint64_t)REC_HDR + klen + vlen;
    if (need > fl->page_bytes)
        return FLASH_TOO_BIG;
    uint32_t len = rec_len(klen, vlen);
    pthread_mutex_lock(&fl->mu);
    int rc = FLASH_OK;
    if (fl->cur >= 0 && fl->wused + len > fl->page_bytes)
        rc = seal_locked(fl);
    if (rc == FLASH_OK && fl->cur < 0) {
        gpointer q = g_queue_pop_head(&fl->free_pages);
        if (!q) {
            rc = FLASH_FULL;
        } else {
            fl->cur = (int64_t)(GPOINTER_TO_SIZE(q) - 1);
            struct flash_page *p = &fl->pages[fl->cur];
            p->state = PAGE_OPEN;
            p->seq = fl->next_seq++;
            fl->wused = 0;
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
                            .key_len = (uint8_t)klen, .flags8 = meta->flags8};
    memcpy(r + REC_HDR, key, klen);
    memcpy(r + REC_HDR + klen, value, vlen);
    memset(r + REC_HDR + klen + vlen, 0, len - (REC_HDR + klen + vlen));
    h->crc = rec_crc(h, r + REC_HDR, r + REC_HDR + klen);
    uint16_t s = (uint16_t)(fl->wused / FLASH_UNIT) | START_LIVE;
    g_array_append_val(p->starts, s);
    *loc = flash_loc_make((uint64_t)fl->cur * fl->page_bytes + fl->wused, p->seq);
    fl->wused += len;
    p->used += len;
    p->live += len;
    fl->st.objects_written++;
    fl->st.objects_live++;
    fl->st.bytes_appended += len;
    pthread_mutex_unlock(&fl->mu);
    return FLASH_OK;
}

int flash_seal(struct flash_log *fl)
{
    pthread_mutex_lock(&fl->mu);
    int rc = seal_locked(fl);
    pthread_mutex_unlock(&fl->mu);
    return rc;
}

int flash_read(struct flash_log *fl, uint64_t loc, const void *key, uint32_t klen, void *buf,
               size_t cap, uint32_t *vlen, struct flash_meta *meta)
{
    if (klen == 0 || klen > UINT8_MAX)
        return FLASH_BAD;
    pthread_mutex_lock(&fl->mu);
    uint32_t in_page;
    struct flash_page *p = page_of(fl, loc, &in_page);
    gint i = p ? start_find(p, in_page) : -1;
    if (i < 0) {
        fl->st.misses++;
        pthread_mutex_unlock(&fl->mu);
        return FLASH_MISS;
    }
    uint32_t len = start_len(p, i);
    uint64_t page = flash_loc_offset(loc) / fl->page_bytes;
    struct flash_rec h;
    unsigned char kbuf[UINT8_MAX];
    int rc = FLASH_OK;
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
         * value too big for the room) into the scratch page. */
        size_t rest = len - REC_HDR - klen;
        size_t direct = rest < cap ? rest : cap;
        struct iovec iov[4] = {{&h, REC_HDR}, {kbuf, klen}, {buf, direct},
                               {fl->scratch, rest - direct}};
        if (io_full(fl, false, iov, rest > direct ? 4 : 3, page * fl->page_bytes + in_page) != 0)
            rc = FLASH_IO;
    }
    if (rc == FLASH_OK) {
        /* The record must be this key's, of this life of the page, whole and intact. */
        if (h.magic != FLASH_MAGIC || h.seq != p->seq || h.key_len != klen ||
            memcmp(kbuf, key, klen) != 0 || rec_len(klen, h.value_len) != len) {
            rc = FLASH_MISS;
        } else if (h.value_len > cap) {
            *vlen = h.value_len;
            rc = FLASH_TOO_BIG;
        } else if (rec_crc(&h, kbuf, buf) != h.crc) {
            fl->st.crc_failures++;
            log_warn("flash: record at %llu of %s fails its CRC: read as a miss",
                     (unsigned long long)flash_loc_offset(loc), fl->path);
            rc = FLASH_MISS;
        }
    }
    if (rc == FLASH_MISS)
        fl->st.misses++;
    if (rc == FLASH_OK) {
        *vlen = h.value_len;
        *meta = (struct flash_meta){.version = h.version, .flags = h.flags,
                                    .exptime = h.exptime, .flags8 = h.flags8};
        fl->st.objects_read++;
        fl->st.bytes_read += len;
    }
    pthread_mutex_unlock(&fl->mu);
    return rc;
}

int flash_unlink(struct flash_log *fl, uint64_t loc)
{
    pthread_mutex_lock(&fl->mu);
    uint32_t in_page;
    struct flash_page *p = page_of(fl, loc, &in_page);
    gint i = p ? start_find(p, in_page) : -1;
    int rc = FLASH_MISS;
    if (i >= 0 && (g_array_index(p->starts, uint16_t, i) & START_LIVE)) {
        g_array_index(p->starts, uint16_t, i) &= START_MASK;
        p->live -= start_len(p, i);
        fl->st.objects_live--;
        rc = FLASH_OK;
    }
    pthread_mutex_unlock(&fl->mu);
    return rc;
}

int64_t flash_oldest_page(struct flash_log *fl)
{
    pthread_mutex_lock(&fl->mu);
    int64_t best = -1;
    for (uint64_t i = 0; i < fl->npages; i++)
        if (fl->pages[i].state == PAGE_FULL &&
            (best < 0 || fl->pages[i].seq < fl->pages[best].seq))
            best = (int64_t)i;
    pthread_mutex_unlock(&fl->mu);
    return best;
}

int64_t flash_sparsest_page(struct flash_log *fl, uint32_t max_live_pct)
{
    pthread_mutex_lock(&fl->mu);
    int64_t best = -1;
    for (uint64_t i = 0; i < fl->npages; i++) {
        const struct flash_page *p = &fl->pages[i];
        if (p->state == PAGE_FULL && (uint64_t)p->live * 100 <= (uint64_t)p->used * max_live_pct &&
            (best < 0 || p->live < fl->pages[best].live))
            best = (int64_t)i;
    }
    pthread_mutex_unlock(&fl->mu);
    return best;
}

int flash_page_each(struct flash_log *fl, int64_t page, flash_each_fn fn, void *user)
{
    if (page < 0 || (uint64_t)page >= fl->npages)
        return FLASH_BAD;
    /* A copy of the page and of its live starts, taken under the mutex; fn runs without it (it
     * may append the records it keeps, or unlink them). */
    pthread_mutex_lock(&fl->mu);
    struct flash_page *p = &fl->pages[page];
    if (p->state != PAGE_FULL) {
        pthread_mutex_unlock(&fl->mu);
        return FLASH_BAD;
    }
    uint64_t seq = p->seq;
    uint32_t used = p->used;
    GArray *starts = g_array_copy(p->starts);
    unsigned char *copy = g_malloc(used);
    int rc = io_buf(fl, false, copy, used, (uint64_t)page * fl->page_bytes) != 0 ? FLASH_IO
                                                                                 : FLASH_OK;
    pthread_mutex_unlock(&fl->mu);
    for (guint i = 0; rc == FLASH_OK && i < starts->len; i++) {
        uint16_t s = g_array_index(starts, uint16_t, i);
        uint32_t at = (s & START_MASK) * FLASH_UNIT, len;
        if (!(s & START_LIVE))
            continue;
        if (!rec_valid(copy + at, used - at, seq, &len)) {
            /* Written whole and read back changed: the device's fault, the item a miss. */
            pthread_mutex_lock(&fl->mu);
            fl->st.crc_failures++;
            pthread_mutex_unlock(&fl->mu);
            continue;
        }
        const struct flash_rec *h = (const struct flash_rec *)(copy + at);
        struct flash_meta m = {.version = h->version, .flags = h->flags, .exptime = h->exptime,
                               .flags8 = h->flags8};
        if (!fn(user, flash_loc_make((uint64_t)page * fl->page_bytes + at, seq), copy + at + REC_HDR,
                h->key_len, copy + at + REC_HDR + h->key_len, h->value_len, &m))
            break;
    }
    g_free(copy);
    g_array_free(starts, TRUE);
    return rc;
}

int flash_page_free(struct flash_log *fl, int64_t page)
{
    if (page < 0 || (uint64_t)page >= fl->npages)
        return FLASH_BAD;
    pthread_mutex_lock(&fl->mu);
    struct flash_page *p = &fl->pages[page];
    if (p->state != PAGE_FULL) {
        pthread_mutex_unlock(&fl->mu);
        return FLASH_BAD;
    }
    fl->st.objects_live -= live_records(p);
    page_reset(p);
    /* Its first block zeroed on the device, so a restart does not bring its records back; if
     * that write fails, recovery would find them, and their items are gone from the index:
     * unreferenced records, which cost only room until the page is written again. */
    memset(fl->scratch, 0, FLASH_BLOCK);
    (void)io_buf(fl, true, fl->scratch, FLASH_BLOCK, (uint64_t)page * fl->page_bytes);
    g_queue_push_tail(&fl->free_pages, GSIZE_TO_POINTER((uint64_t)page + 1));
    fl->st.page_reclaims++;
    pthread_mutex_unlock(&fl->mu);
    return FLASH_OK;
}

void flash_inject_errors(struct flash_log *fl, uint32_t reads, uint32_t writes)
{
    pthread_mutex_lock(&fl->mu);
    fl->fail_reads = reads;
    fl->fail_writes = writes;
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
    }
    pthread_mutex_unlock(&fl->mu);
}
