/*
 * test_flash.c - the flash tier's log (kvstore/memory/flash.c, issue 31) on a real file: records
 * read back byte for byte from the write buffer and from the file, through io_uring and through
 * pread/pwrite; a location into a page written again, another key, a corrupt or torn record
 * are misses and never bytes; a restart recovers what was written; a full log refuses, a page
 * freed takes records again; live bytes are exact; injected I/O errors; bad configurations.
 * Pages reused in turn more than 64 times, a restart after a free and after a crash with a page
 * unwritten, 2 MiB pages, short transfers, a log reopened with another page size, the recount
 * of live records after a restart, and threads appending, reading, unlinking and freeing.
 * Each test runs twice: through io_uring (where the kernel allows it) and through pread/pwrite.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memory/flash.h"
#include "memory/layout.h"
#include "memory/slab.h"

#define PAGE (64u << 10)
#define PAGES 4

struct fx {
    char dir[64];
    bool no_uring;
    struct flash_log *fl;
};

static int fx_setup(void **state, bool no_uring)
{
    struct fx *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/test-flash-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    f->no_uring = no_uring;
    *state = f;
    return 0;
}
static int setup_uring(void **state) { return fx_setup(state, false); }
static int setup_plain(void **state) { return fx_setup(state, true); }

static int teardown(void **state)
{
    struct fx *f = *state;
    flash_close(f->fl);
    char path[128];
    snprintf(path, sizeof(path), "%s/node3.flash", f->dir);
    unlink(path);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* Bytes of the log's file (node 3's) read or written behind its back, as a device or a crash
 * would change them. */
static void dev_io(struct fx *f, bool wr, off_t at, void *buf, size_t n)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/node3.flash", f->dir);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(wr ? pwrite(fd, buf, n, at) : pread(fd, buf, n, at), (ssize_t)n);
    close(fd);
}

static struct flash_log *open_log_sized(struct fx *f, bool fresh, uint32_t page, uint32_t pages)
{
    struct flash_config cfg = {.dir = f->dir, .node = 3, .bytes = (uint64_t)page * pages,
                               .page_bytes = page, .no_uring = f->no_uring, .fresh = fresh};
    char err[256] = "";
    struct flash_log *fl = NULL;
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), 0);
    assert_non_null(fl);
    return fl;
}

static struct flash_log *open_log(struct fx *f, bool fresh)
{
    return open_log_sized(f, fresh, PAGE, PAGES);
}

/* Item i: key "key-<i>", a value of a size that varies with i, bytes derived from i. */
static uint32_t val_len(int i) { return (uint32_t)(100 + (i * 997) % 9000); }
static void val_fill(int i, unsigned char *v)
{
    for (uint32_t k = 0; k < val_len(i); k++)
        v[k] = (unsigned char)(i * 31 + k * 7);
}
static int key_of(int i, char *k) { return sprintf(k, "key-%d", i); }

static uint64_t put(struct flash_log *fl, int i)
{
    char k[32];
    unsigned char v[10000];
    int kl = key_of(i, k);
    val_fill(i, v);
    struct flash_meta m = {.version = 1000 + (uint64_t)i, .flags = (uint32_t)i,
                           .exptime = 77, .flags8 = 0x8};
    uint64_t loc = 0;
    assert_int_equal(flash_append(fl, k, (uint32_t)kl, v, val_len(i), &m, &loc), FLASH_OK);
    return loc;
}

/* Whether item i reads back at loc whole, with its meta. */
static void check(struct flash_log *fl, int i, uint64_t loc)
{
    char k[32];
    unsigned char want[10000], got[10000];
    int kl = key_of(i, k);
    val_fill(i, want);
    uint32_t vl = 0;
    struct flash_meta m;
    assert_int_equal(flash_read(fl, loc, k, (uint32_t)kl, got, sizeof(got), &vl, &m), FLASH_OK);
    assert_int_equal(vl, val_len(i));
    assert_memory_equal(got, want, vl);
    assert_int_equal(m.version, 1000 + (uint64_t)i);
    assert_int_equal(m.flags, (uint32_t)i);
    assert_int_equal(m.exptime, 77);
    assert_int_equal(m.flags8, 0x8);
}

static int read_rc(struct flash_log *fl, int i, uint64_t loc)
{
    char k[32];
    unsigned char got[10000];
    int kl = key_of(i, k);
    uint32_t vl;
    struct flash_meta m;
    return flash_read(fl, loc, k, (uint32_t)kl, got, sizeof(got), &vl, &m);
}

static void test_append_and_read_back(void **state)
{
    struct fx *f = *state;
    f->fl = open_log(f, true);
    struct flash_stats st;
    flash_stats(f->fl, &st);
    print_message("flash: %s\n", st.uring ? "io_uring" : "pread/pwrite");
    assert_int_equal(st.pages, PAGES);
    uint64_t loc[40];
    for (int i = 0; i < 40; i++) {
        loc[i] = put(f->fl, i);
        check(f->fl, i, loc[i]); /* from the write buffer, or the file once its page is full */
    }
    for (int i = 0; i < 40; i++)
        check(f->fl, i, loc[i]);
    flash_stats(f->fl, &st);
    assert_int_equal(st.objects_written, 40);
    assert_int_equal(st.objects_live, 40);
    assert_true(st.pages_full >= 2); /* about 200 KB of records in 64 KiB pages */
    assert_int_equal(st.bytes_used, st.bytes_appended);
    assert_int_equal(st.bytes_live, st.bytes_used);
    /* Whole pages only, each written once: the device saw the used parts, to the block, and
     * one block per page opened (its slot of the life table). */
    assert_true(st.bytes_device >= st.bytes_used - PAGE &&
                st.bytes_device <= st.pages_full * PAGE + (st.pages_full + 1) * 4096);
    /* Another key at a good location, and a location inside a record: misses. */
    assert_int_equal(read_rc(f->fl, 1, loc[0]), FLASH_MISS);
    assert_int_equal(read_rc(f->fl, 0, loc[0] + (1u << FLASH_LOC_LIFE_BITS)), FLASH_MISS);
    /* A value larger than the room: its size, no bytes. */
    char k[32];
    unsigned char small[50];
    uint32_t vl = 0;
    struct flash_meta m;
    int kl = key_of(5, k);
    assert_int_equal(flash_read(f->fl, loc[5], k, (uint32_t)kl, small, sizeof(small), &vl, &m),
                     FLASH_TOO_BIG);
    assert_int_equal(vl, val_len(5));
}

static void test_unlink_is_exact_and_once(void **state)
{
    struct fx *f = *state;
    f->fl = open_log(f, true);
    uint64_t loc[30];
    for (int i = 0; i < 30; i++)
        loc[i] = put(f->fl, i);
    struct flash_stats before, after;
    flash_stats(f->fl, &before);
    uint64_t gone = 0;
    for (int i = 0; i < 30; i += 3) {
        assert_int_equal(flash_unlink(f->fl, loc[i]), FLASH_OK);
        gone += (64 + strlen("key-") + (i >= 10 ? 2 : 1) + val_len(i) + 63) / 64 * 64;
    }
    assert_int_equal(flash_unlink(f->fl, loc[0]), FLASH_MISS); /* twice: nothing */
    flash_stats(f->fl, &after);
    assert_int_equal(after.bytes_live, before.bytes_live - gone);
    assert_int_equal(after.objects_live, 20);
    /* An unlinked record is still there until its page is freed (a reader that read the ITE
     * before the unlink still finds it). */
    check(f->fl, 3, loc[3]);
    check(f->fl, 0, loc[0]);
}

struct each_ctx {
    int seen;
    uint64_t locs[128];
};

static bool each_count(void *user, uint64_t loc, const void *key, uint32_t klen, const void *value,
                       uint32_t vlen, const struct flash_meta *meta)
{
    struct each_ctx *e = user;
    int i;
    char k[32] = "";
    assert_true(klen < sizeof(k));
    memcpy(k, key, klen); /* the value follows the key unterminated */
    assert_int_equal(sscanf(k, "key-%d", &i), 1);
    assert_int_equal(klen, strlen("key-") + (i >= 10 ? 2 : 1));
    unsigned char want[10000];
    val_fill(i, want);
    assert_int_equal(vlen, val_len(i));
    assert_memory_equal(value, want, vlen);
    assert_int_equal(meta->version, 1000 + (uint64_t)i);
    assert_int_equal(loc, e->locs[i]);
    e->seen++;
    return true;
}

static void test_full_log_and_page_reclaim(void **state)
{
    struct fx *f = *state;
    f->fl = open_log(f, true);
    struct each_ctx e = {0};
    int n = 0;
    for (;; n++) {
        char k[32];
        unsigned char v[10000];
        int kl = key_of(n, k);
        val_fill(n, v);
        struct flash_meta m = {.version = 1000 + (uint64_t)n, .flags = (uint32_t)n, .exptime = 77,
                               .flags8 = 0x8};
        int rc = flash_append(f->fl, k, (uint32_t)kl, v, val_len(n), &m, &e.locs[n]);
        if (rc == FLASH_FULL)
            break;
        assert_int_equal(rc, FLASH_OK);
        assert_true(n < 120);
    }
    struct flash_stats st;
    flash_stats(f->fl, &st);
    assert_int_equal(st.pages_free, 0);
    uint64_t life = 0;
    int64_t old = flash_oldest_page(f->fl, &life);
    assert_int_equal(old, 0); /* the first page filled */
    assert_int_equal(life, 1);
    /* Unlink every other record of page 0; its walk gives the others, in order. */
    int in0 = 0;
    for (int i = 0; i < n; i++)
        if (flash_loc_offset(e.locs[i]) < PAGE) {
            in0++;
            if (i % 2)
                assert_int_equal(flash_unlink(f->fl, e.locs[i]), FLASH_OK);
        }
    assert_int_equal(flash_sparsest_page(f->fl, 100, NULL), 0);
    assert_int_equal(flash_page_each(f->fl, old, life, each_count, &e, NULL), FLASH_OK);
    assert_int_equal(e.seen, (in0 + 1) / 2);
    assert_int_equal(flash_page_each(f->fl, old, life + 1, each_count, &e, NULL), FLASH_MISS);
    assert_int_equal(flash_page_free(f->fl, old, life), FLASH_OK);
    assert_int_equal(flash_page_free(f->fl, old, life), FLASH_MISS); /* freed already */
    /* Its records are gone, even once the page is written again (another life) and the same
     * key's record lies at the same offset: the old location names the old life. */
    uint64_t again = put(f->fl, 0); /* lands at page 0's offset 0 */
    assert_true(flash_loc_offset(again) == 0 && flash_loc_offset(e.locs[0]) == 0);
    assert_int_equal(read_rc(f->fl, 0, e.locs[0]), FLASH_MISS);
    check(f->fl, 0, again);
    flash_stats(f->fl, &st);
    assert_int_equal(st.page_reclaims, 1);
    for (int i = 0; i < n; i++)
        if (flash_loc_offset(e.locs[i]) >= PAGE)
            check(f->fl, i, e.locs[i]);
}

static void test_corrupt_record_is_a_miss(void **state)
{
    struct fx *f = *state;
    f->fl = open_log(f, true);
    uint64_t loc[8];
    for (int i = 0; i < 8; i++)
        loc[i] = put(f->fl, i);
    assert_int_equal(flash_seal(f->fl), FLASH_OK);
    /* One byte of item 4's value changed on the device. */
    unsigned char b;
    off_t at = (off_t)flash_file_offset(f->fl, loc[4]) + 64 + 5 + 10;
    dev_io(f, false, at, &b, 1);
    b ^= 0x40;
    dev_io(f, true, at, &b, 1);
    assert_int_equal(read_rc(f->fl, 4, loc[4]), FLASH_MISS);
    struct flash_stats st;
    flash_stats(f->fl, &st);
    assert_int_equal(st.crc_failures, 1);
    check(f->fl, 3, loc[3]);
    check(f->fl, 5, loc[5]);
}

static void test_restart_recovers_and_stops_at_a_torn_record(void **state)
{
    struct fx *f = *state;
    f->fl = open_log(f, true);
    uint64_t loc[30];
    for (int i = 0; i < 30; i++)
        loc[i] = put(f->fl, i);
    off_t torn = (off_t)flash_file_offset(f->fl, loc[20]) + 36;
    flash_close(f->fl); /* seals the page being filled */
    f->fl = NULL;
    /* A torn write: item 20's header's key length changed on the device (its CRC fails). */
    unsigned char z = 0x77;
    dev_io(f, true, torn, &z, 1);
    f->fl = open_log(f, false);
    struct flash_stats st;
    flash_stats(f->fl, &st);
    /* Everything but item 20 and those after it in its page. */
    int kept = 0;
    for (int i = 0; i < 30; i++) {
        bool after_tear = flash_loc_offset(loc[i]) / PAGE == flash_loc_offset(loc[20]) / PAGE &&
                          flash_loc_offset(loc[i]) >= flash_loc_offset(loc[20]);
        if (after_tear) {
            assert_int_equal(read_rc(f->fl, i, loc[i]), FLASH_MISS);
        } else {
            check(f->fl, i, loc[i]);
            kept++;
        }
    }
    assert_int_equal(st.recovered, kept);
    assert_int_equal(st.objects_live, kept);
    /* Page 0 freed: its records are gone, and stay gone through another restart. */
    assert_int_equal(flash_page_free(f->fl, 0, 1), FLASH_OK);
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < 30; i++)
            if (flash_loc_offset(loc[i]) < PAGE)
                assert_int_equal(read_rc(f->fl, i, loc[i]), FLASH_MISS);
        flash_close(f->fl);
        f->fl = open_log(f, false);
    }
    flash_stats(f->fl, &st);
    int in0 = 0;
    for (int i = 0; i < 30; i++)
        in0 += flash_loc_offset(loc[i]) < PAGE;
    assert_true(in0 > 0);
    assert_int_equal(st.recovered, kept - in0);
}

static void test_io_errors(void **state)
{
    struct fx *f = *state;
    f->fl = open_log(f, true);
    uint64_t loc[8];
    for (int i = 0; i < 8; i++)
        loc[i] = put(f->fl, i);
    assert_int_equal(flash_unlink(f->fl, loc[2]), FLASH_OK); /* counted once, not again below */
    /* A page that cannot be written stays in its buffer, whole and read from there (its
     * records are items the index names), and the next seal writes it. */
    flash_inject_errors(f->fl, 0, 1);
    assert_int_equal(flash_seal(f->fl), FLASH_IO);
    for (int i = 0; i < 8; i++)
        check(f->fl, i, loc[i]);
    assert_int_equal(flash_seal(f->fl), FLASH_OK);
    for (int i = 0; i < 8; i++)
        check(f->fl, i, loc[i]);
    for (int i = 0; i < 8; i++)
        loc[i] = put(f->fl, 10 + i);
    assert_int_equal(flash_seal(f->fl), FLASH_OK);
    /* A read that fails is an error for that read only. */
    flash_inject_errors(f->fl, 1, 0);
    assert_int_equal(read_rc(f->fl, 10, loc[0]), FLASH_IO);
    check(f->fl, 10, loc[0]);
    struct flash_stats st;
    flash_stats(f->fl, &st);
    assert_int_equal(st.io_errors, 2);
    assert_int_equal(st.objects_live, 15);
}

/* A record of key k whose value, of byte b, makes the record exactly `rec` bytes long. */
static uint64_t put_kv(struct flash_log *fl, const char *k, uint32_t rec, unsigned char b)
{
    static unsigned char v[FLASH_PAGE_MAX];
    uint32_t vl = rec - 64 - (uint32_t)strlen(k);
    memset(v, b, vl);
    struct flash_meta m = {.version = b};
    uint64_t loc = 0;
    assert_int_equal(flash_append(fl, k, (uint32_t)strlen(k), v, vl, &m, &loc), FLASH_OK);
    return loc;
}

/* FLASH_OK with the value's first byte in *b, or the read's result. */
static int read_kv(struct flash_log *fl, uint64_t loc, const char *k, unsigned char *b)
{
    static unsigned char v[FLASH_PAGE_MAX];
    uint32_t vl;
    struct flash_meta m;
    int rc = flash_read(fl, loc, k, (uint32_t)strlen(k), v, sizeof(v), &vl, &m);
    if (rc == FLASH_OK) {
        *b = v[0];
        assert_int_equal(m.version, v[0]);
        for (uint32_t i = 0; i < vl; i++)
            assert_int_equal(v[i], v[0]);
    }
    return rc;
}

/* Pages reused in turn, the oldest freed and written again, the same key at the same offset of
 * each life: no location of an earlier life (up to 63 back) reads the new record or unlinks it.
 * A sequence number modulo 64 in the location aliased here after 16 turns of 4 pages. */
static void test_page_lives_in_turn(void **state)
{
    struct fx *f = *state;
    f->fl = open_log(f, true);
    enum { TURNS = 40 };
    uint64_t locs[PAGES][TURNS];
    char k[PAGES][24];
    for (int p = 0; p < PAGES; p++) {
        snprintf(k[p], sizeof(k[p]), "page-%d", p);
        locs[p][0] = put_kv(f->fl, k[p], PAGE, (unsigned char)p);
        assert_int_equal(flash_loc_offset(locs[p][0]), (uint64_t)p * PAGE);
    }
    for (int t = 1; t < TURNS; t++) {
        assert_int_equal(flash_seal(f->fl), FLASH_OK); /* the last page, full, written */
        for (int p = 0; p < PAGES; p++) {
            /* The oldest full page freed: the only free one, so the next record lands in
             * it, at offset 0. */
            uint64_t life = 0;
            int64_t old = flash_oldest_page(f->fl, &life);
            assert_int_equal(old, p);
            assert_int_equal(flash_page_free(f->fl, old, life), FLASH_OK);
            unsigned char b = (unsigned char)(t * PAGES + p);
            locs[p][t] = put_kv(f->fl, k[p], PAGE, b);
            assert_int_equal(flash_loc_offset(locs[p][t]), (uint64_t)p * PAGE);
            unsigned char got = 0;
            assert_int_equal(read_kv(f->fl, locs[p][t], k[p], &got), FLASH_OK);
            assert_int_equal(got, b);
            for (int e = 0; e < t; e++) {
                assert_int_equal(read_kv(f->fl, locs[p][e], k[p], &got), FLASH_MISS);
                assert_int_equal(flash_unlink(f->fl, locs[p][e]), FLASH_MISS);
            }
        }
    }
    struct flash_stats st;
    flash_stats(f->fl, &st);
    assert_int_equal(st.objects_live, PAGES);
}

/* Restarts: a freed page's records do not come back and its lives go on (the newest page freed,
 * whose sequence number a restart could otherwise hand out again); a daemon that dies with a
 * page unwritten (a child that exits without closing the log) leaves locations into a life
 * that never reached the device, and the next life of that page is another one. */
static void test_restart_after_free_and_crash(void **state)
{
    struct fx *f = *state;
    f->fl = open_log(f, true);
    uint64_t loc[PAGES];
    for (int p = 0; p < PAGES; p++)
        loc[p] = put_kv(f->fl, "same", PAGE, (unsigned char)(10 + p));
    assert_int_equal(flash_seal(f->fl), FLASH_OK);
    assert_int_equal(flash_page_free(f->fl, PAGES - 1, 1), FLASH_OK); /* its first life */
    flash_close(f->fl);
    f->fl = open_log(f, false);
    struct flash_stats st;
    flash_stats(f->fl, &st);
    assert_int_equal(st.recovered, PAGES - 1);
    unsigned char b = 0;
    assert_int_equal(read_kv(f->fl, loc[PAGES - 1], "same", &b), FLASH_MISS);
    uint64_t again = put_kv(f->fl, "same", PAGE, 99); /* the only free page: the freed one */
    assert_int_equal(flash_loc_offset(again), flash_loc_offset(loc[PAGES - 1]));
    assert_int_equal(read_kv(f->fl, loc[PAGES - 1], "same", &b), FLASH_MISS);
    assert_int_equal(flash_unlink(f->fl, loc[PAGES - 1]), FLASH_MISS);
    assert_int_equal(read_kv(f->fl, again, "same", &b), FLASH_OK);
    assert_int_equal(b, 99);
    for (int p = 0; p < PAGES - 1; p++) {
        assert_int_equal(read_kv(f->fl, loc[p], "same", &b), FLASH_OK);
        assert_int_equal(b, 10 + p);
    }
    /* Free page 0, then a child takes it, appends and dies before the page is written. */
    assert_int_equal(flash_page_free(f->fl, 0, 1), FLASH_OK);
    flash_close(f->fl);
    f->fl = NULL;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct flash_log *fl = open_log(f, false);
        uint64_t l = put_kv(fl, "same", 4096, 77);
        if (write(fds[1], &l, sizeof(l)) != sizeof(l))
            _exit(2);
        _exit(0); /* no flash_close: the page never reaches the device */
    }
    uint64_t lost = 0;
    assert_int_equal(read(fds[0], &lost, sizeof(lost)), sizeof(lost));
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(fds[0]);
    close(fds[1]);
    assert_int_equal(flash_loc_offset(lost), 0);
    f->fl = open_log(f, false);
    uint64_t next = put_kv(f->fl, "same", 4096, 78);
    assert_int_equal(flash_loc_offset(next), 0);
    assert_true(next != lost);
    assert_int_equal(read_kv(f->fl, lost, "same", &b), FLASH_MISS);
    assert_int_equal(flash_unlink(f->fl, lost), FLASH_MISS);
    assert_int_equal(read_kv(f->fl, next, "same", &b), FLASH_OK);
    assert_int_equal(b, 78);
}

/* A log reopened with another page size (larger or smaller) or another size is refused with
 * the reason, and kept; a file that is not a log is refused, not overwritten. */
static void test_other_shape_refused(void **state)
{
    struct fx *f = *state;
    f->fl = open_log_sized(f, true, PAGE * 2, PAGES);
    uint64_t big = put_kv(f->fl, "big", PAGE + 4096, 7); /* its first record longer than PAGE */
    flash_close(f->fl);
    f->fl = NULL;
    struct flash_config cfg = {.dir = f->dir, .node = 3, .bytes = (uint64_t)PAGE * 2 * PAGES,
                               .page_bytes = PAGE, .no_uring = f->no_uring};
    char err[256] = "";
    struct flash_log *fl = NULL;
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    print_message("flash: %s\n", err);
    assert_non_null(strstr(err, "made with 4 pages of 131072 bytes, not 8 of 65536"));
    cfg.page_bytes = PAGE * 4;
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "made with 4 pages of 131072 bytes, not 2 of 262144"));
    cfg.page_bytes = PAGE * 2;
    cfg.bytes = (uint64_t)PAGE * 2 * (PAGES + 1);
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "not 5 of 131072"));
    /* Fewer pages: refused before the file is cut to them (it was, and half the log was lost
     * when the size was set back). */
    struct stat st0, st1;
    char path[128];
    snprintf(path, sizeof(path), "%s/node3.flash", f->dir);
    assert_int_equal(stat(path, &st0), 0);
    cfg.bytes = (uint64_t)PAGE * 2 * (PAGES - 2);
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "not 2 of 131072"));
    assert_int_equal(stat(path, &st1), 0);
    assert_int_equal(st1.st_size, st0.st_size);
    /* Another node's log under this node's name: refused. */
    cfg.bytes = (uint64_t)PAGE * 2 * PAGES;
    cfg.page_bytes = PAGE * 2;
    cfg.node = 4;
    char other[128];
    snprintf(other, sizeof(other), "%s/node4.flash", f->dir);
    assert_int_equal(link(path, other), 0);
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    unlink(other);
    assert_non_null(strstr(err, "is the log of cluster  node 3, not of  node 4"));
    cfg.node = 3;
    f->fl = open_log_sized(f, false, PAGE * 2, PAGES);
    /* Open in this process: a second opener is refused (one process per log). */
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "in use by another process"));
    assert_null(fl);
    unsigned char b = 0;
    assert_int_equal(read_kv(f->fl, big, "big", &b), FLASH_OK);
    assert_int_equal(b, 7);
    flash_close(f->fl);
    f->fl = NULL;
    /* Not a log: some other file where the log would be, smaller than the log: refused, and
     * neither grown nor changed. */
    unlink(path);
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "#!/bin/sh\necho hi\n", 18), 18);
    close(fd);
    cfg.bytes = (uint64_t)PAGE * 2 * PAGES;
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "is not a Nessie flash log"));
    assert_int_equal(stat(path, &st1), 0);
    assert_int_equal(st1.st_size, 18);
    char first[18];
    dev_io(f, false, 0, first, 18);
    assert_memory_equal(first, "#!/bin/sh\necho hi\n", 18);
}

/* A page's seal torn by a crash: its first record (8 KiB) has its first block on the device and
 * not its second. At the restart the record is not recovered, and the page's next life is
 * another one: the location from before the crash does not read the key's new record there. A
 * life taken from the page's own first record reset to 0 here, and the old location read the
 * new value. */
static void test_torn_first_record(void **state)
{
    struct fx *f = *state;
    f->fl = open_log(f, true);
    uint64_t old = put_kv(f->fl, "k", 8192, 1);
    assert_int_equal(flash_seal(f->fl), FLASH_OK);
    off_t at = (off_t)flash_file_offset(f->fl, old);
    flash_close(f->fl);
    f->fl = NULL;
    static unsigned char zero[4096];
    dev_io(f, true, at + 4096, zero, sizeof(zero));
    f->fl = open_log(f, false);
    struct flash_stats st;
    flash_stats(f->fl, &st);
    assert_int_equal(st.recovered, 0);
    unsigned char b = 0;
    assert_int_equal(read_kv(f->fl, old, "k", &b), FLASH_MISS);
    uint64_t now = put_kv(f->fl, "k", 8192, 2); /* page 0 again: the first free page */
    assert_int_equal(flash_loc_offset(now), flash_loc_offset(old));
    assert_true(now != old);
    assert_int_equal(read_kv(f->fl, old, "k", &b), FLASH_MISS);
    assert_int_equal(read_kv(f->fl, now, "k", &b), FLASH_OK);
    assert_int_equal(b, 2);
}

/* 2 MiB pages (a record's start uses all 15 bits), with transfers cut short by the device all
 * along: appends, reads, page writes, recovery and a page's scan continue them. */
static void test_big_pages_and_short_transfers(void **state)
{
    struct fx *f = *state;
    f->fl = open_log_sized(f, true, FLASH_PAGE_MAX, 3);
    flash_inject_short(f->fl, 1000000);
    enum { N = 600 };
    static uint64_t loc[N];
    for (int i = 0; i < N; i++)
        loc[i] = put(f->fl, i);
    assert_true(flash_loc_offset(loc[N - 1]) >= FLASH_PAGE_MAX); /* past the first page */
    for (int i = 0; i < N; i++)
        check(f->fl, i, loc[i]);
    /* A small record at the last unit of a page: its start is 32767 units. */
    uint32_t last = 0;
    for (int i = 0; i < N; i++)
        if (flash_loc_offset(loc[i]) < FLASH_PAGE_MAX && flash_loc_offset(loc[i]) > last)
            last = (uint32_t)flash_loc_offset(loc[i]);
    assert_true(last > FLASH_PAGE_MAX / 2);
    flash_close(f->fl);
    f->fl = open_log_sized(f, false, FLASH_PAGE_MAX, 3);
    flash_inject_short(f->fl, 1000000);
    for (int i = 0; i < N; i++)
        check(f->fl, i, loc[i]);
    struct flash_stats st;
    flash_stats(f->fl, &st);
    assert_int_equal(st.recovered, N);
    assert_true(st.short_io > 0);
    /* A page's last record starting 32766 units in (a start uses all 15 bits; 32767 cannot
     * start one: a record is at least 128 bytes). */
    flash_close(f->fl);
    f->fl = open_log_sized(f, true, FLASH_PAGE_MAX, 3);
    uint64_t a = put_kv(f->fl, "big", FLASH_PAGE_MAX - 128, 5);
    uint64_t z = put_kv(f->fl, "t", 128, 6);
    assert_int_equal(flash_loc_offset(z), FLASH_PAGE_MAX - 128);
    unsigned char b = 0;
    assert_int_equal(read_kv(f->fl, z, "t", &b), FLASH_OK); /* from the write buffer */
    assert_int_equal(b, 6);
    flash_close(f->fl);
    f->fl = open_log_sized(f, false, FLASH_PAGE_MAX, 3);
    assert_int_equal(read_kv(f->fl, a, "big", &b), FLASH_OK);
    assert_int_equal(b, 5);
    assert_int_equal(read_kv(f->fl, z, "t", &b), FLASH_OK);
    assert_int_equal(b, 6);
    assert_int_equal(flash_unlink(f->fl, z), FLASH_OK);
    flash_stats(f->fl, &st);
    assert_int_equal(st.bytes_live, FLASH_PAGE_MAX - 128);
}

/* After a restart every record counts as live until the index names it again; a location past
 * the file is a bad argument; a page's scan reports a record that fails its CRC as lost. */
static void test_relive_scan_losses_and_bad_locations(void **state)
{
    struct fx *f = *state;
    f->fl = open_log(f, true);
    uint64_t loc[20];
    for (int i = 0; i < 20; i++)
        loc[i] = put(f->fl, i);
    for (int i = 0; i < 20; i += 2)
        assert_int_equal(flash_unlink(f->fl, loc[i]), FLASH_OK);
    flash_close(f->fl);
    f->fl = open_log(f, false);
    struct flash_stats st;
    flash_stats(f->fl, &st);
    assert_int_equal(st.objects_live, 20); /* unlinks are not on the device */
    flash_relive_begin(f->fl);
    flash_stats(f->fl, &st);
    assert_int_equal(st.objects_live, 0);
    assert_int_equal(st.bytes_live, 0);
    uint64_t want = 0;
    for (int i = 1; i < 20; i += 2) {
        assert_int_equal(flash_relive(f->fl, loc[i]), FLASH_OK);
        want += (64 + strlen("key-") + (i >= 10 ? 2 : 1) + val_len(i) + 63) / 64 * 64;
    }
    assert_int_equal(flash_relive(f->fl, loc[1]), FLASH_MISS); /* twice: nothing */
    flash_stats(f->fl, &st);
    assert_int_equal(st.objects_live, 10);
    assert_int_equal(st.bytes_live, want);
    /* Page 0's scan passes only the records named again. */
    struct each_ctx e = {0};
    memcpy(e.locs, loc, sizeof(loc));
    int in0 = 0;
    for (int i = 1; i < 20; i += 2)
        in0 += flash_loc_offset(loc[i]) < PAGE;
    uint64_t lost = 99;
    assert_int_equal(flash_page_each(f->fl, 0, 1, each_count, &e, &lost), FLASH_OK);
    assert_int_equal(e.seen, in0);
    assert_int_equal(lost, 0);
    /* One of them changed on the device: not passed, counted as lost. */
    unsigned char z = 0x5a;
    dev_io(f, true, (off_t)flash_file_offset(f->fl, loc[1]) + 70, &z, 1);
    e.seen = 0;
    assert_int_equal(flash_page_each(f->fl, 0, 1, each_count, &e, &lost), FLASH_OK);
    assert_int_equal(e.seen, in0 - 1);
    assert_int_equal(lost, 1);
    /* An injected read error fails the scan. */
    flash_inject_errors(f->fl, 1, 0);
    assert_int_equal(flash_page_each(f->fl, 0, 1, each_count, &e, &lost), FLASH_IO);
    /* Past the file: a bad location, not a miss. */
    uint64_t past = flash_loc_make((uint64_t)PAGE * PAGES, 1);
    assert_int_equal(read_rc(f->fl, 1, past), FLASH_BAD);
    assert_int_equal(flash_unlink(f->fl, past), FLASH_MISS);
}

/* Threads: two append (and free the oldest page when the log is full), two read what was
 * appended, one unlinks, one scans the oldest page and frees it (a compactor's shape). A read gives the key's own bytes or a miss, never anything else; the
 * live count ends exact. Run under tsan by `make tsan`. */
#define CONC_N 6000
struct conc {
    struct flash_log *fl;
    pthread_mutex_t mu;
    uint64_t loc[CONC_N];
    bool set[CONC_N], unlinked[CONC_N];
    int next, writers_done;
    int oks, misses;
    int scans, scans_missed, scanned;
};

static void *conc_writer(void *arg)
{
    struct conc *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        int i = c->next < CONC_N ? c->next++ : -1;
        pthread_mutex_unlock(&c->mu);
        if (i < 0) {
            pthread_mutex_lock(&c->mu);
            c->writers_done++;
            pthread_mutex_unlock(&c->mu);
            return NULL;
        }
        char k[32];
        unsigned char v[10000];
        int kl = key_of(i, k);
        val_fill(i, v);
        struct flash_meta m = {.version = 1000 + (uint64_t)i, .flags = (uint32_t)i, .exptime = 77,
                               .flags8 = 0x8};
        uint64_t loc;
        int rc;
        while ((rc = flash_append(c->fl, k, (uint32_t)kl, v, val_len(i), &m, &loc)) == FLASH_FULL) {
            uint64_t life;
            int64_t old = flash_oldest_page(c->fl, &life);
            if (old >= 0) {
                /* Another thread may free it first, and it may be written again since: then
                 * this free is refused, never done to its new life. */
                int frc = flash_page_free(c->fl, old, life);
                assert_true(frc == FLASH_OK || frc == FLASH_MISS);
            }
        }
        assert_int_equal(rc, FLASH_OK);
        pthread_mutex_lock(&c->mu);
        c->loc[i] = loc;
        c->set[i] = true;
        pthread_mutex_unlock(&c->mu);
    }
}

static void *conc_reader(void *arg)
{
    struct conc *c = arg;
    unsigned seed = 7;
    for (int n = 0;; n++) {
        pthread_mutex_lock(&c->mu);
        bool done = c->writers_done == 2;
        int hi = c->next;
        /* Half anywhere, half among the last 50 appended (most of the rest are freed). */
        unsigned span = n % 2 || hi < 50 ? (unsigned)hi : 50;
        int i = hi ? hi - 1 - (int)(rand_r(&seed) % span) : 0;
        bool set = hi && c->set[i];
        uint64_t loc = set ? c->loc[i] : 0;
        pthread_mutex_unlock(&c->mu);
        if (done && n >= CONC_N)
            return NULL;
        if (!set)
            continue;
        char k[32];
        unsigned char want[10000], got[10000];
        int kl = key_of(i, k);
        uint32_t vl = 0;
        struct flash_meta m;
        int rc = flash_read(c->fl, loc, k, (uint32_t)kl, got, sizeof(got), &vl, &m);
        assert_true(rc == FLASH_OK || rc == FLASH_MISS);
        if (rc == FLASH_OK) {
            val_fill(i, want);
            assert_int_equal(vl, val_len(i));
            assert_memory_equal(got, want, vl);
            assert_int_equal(m.version, 1000 + (uint64_t)i);
        }
        pthread_mutex_lock(&c->mu);
        *(rc == FLASH_OK ? &c->oks : &c->misses) += 1;
        pthread_mutex_unlock(&c->mu);
    }
}

static void *conc_unlinker(void *arg)
{
    struct conc *c = arg;
    for (int i = 0; i < CONC_N; i += 3) {
        for (;;) {
            pthread_mutex_lock(&c->mu);
            bool set = c->set[i];
            uint64_t loc = c->loc[i];
            pthread_mutex_unlock(&c->mu);
            if (set) {
                /* A miss: its page was freed first. */
                (void)flash_unlink(c->fl, loc);
                break;
            }
            sched_yield();
        }
    }
    return NULL;
}

static bool conc_each(void *user, uint64_t loc, const void *key, uint32_t klen, const void *value,
                      uint32_t vlen, const struct flash_meta *meta)
{
    int *n = user;
    char k[32] = "";
    int i;
    (void)loc;
    assert_true(klen < sizeof(k));
    memcpy(k, key, klen);
    assert_int_equal(sscanf(k, "key-%d", &i), 1);
    unsigned char want[10000];
    val_fill(i, want);
    assert_int_equal(vlen, val_len(i));
    assert_memory_equal(value, want, vlen);
    assert_int_equal(meta->version, 1000 + (uint64_t)i);
    (*n)++;
    return true;
}

/* A compactor's shape: scan the oldest page, then free it, while the writers free pages too. */
static void *conc_compactor(void *arg)
{
    struct conc *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        bool done = c->writers_done == 2;
        pthread_mutex_unlock(&c->mu);
        if (done)
            return NULL;
        uint64_t life;
        int64_t page = flash_oldest_page(c->fl, &life);
        if (page < 0) {
            sched_yield();
            continue;
        }
        int n = 0;
        uint64_t lost = 99;
        int rc = flash_page_each(c->fl, page, life, conc_each, &n, &lost);
        assert_true(rc == FLASH_OK || rc == FLASH_MISS);
        assert_int_equal(lost, 0); /* nothing changed on the device: no record lost */
        int frc = flash_page_free(c->fl, page, life);
        assert_true(frc == FLASH_OK || frc == FLASH_MISS);
        pthread_mutex_lock(&c->mu);
        c->scans++;
        c->scans_missed += rc == FLASH_MISS;
        c->scanned += n;
        pthread_mutex_unlock(&c->mu);
    }
}

static void test_threads(void **state)
{
    struct fx *f = *state;
    f->fl = open_log_sized(f, true, PAGE, 16);
    struct conc *c = calloc(1, sizeof(*c));
    c->fl = f->fl;
    pthread_mutex_init(&c->mu, NULL);
    pthread_t t[6];
    pthread_create(&t[0], NULL, conc_writer, c);
    pthread_create(&t[1], NULL, conc_writer, c);
    pthread_create(&t[2], NULL, conc_reader, c);
    pthread_create(&t[3], NULL, conc_reader, c);
    pthread_create(&t[4], NULL, conc_unlinker, c);
    pthread_create(&t[5], NULL, conc_compactor, c);
    for (int i = 0; i < 6; i++)
        pthread_join(t[i], NULL);
    print_message("flash: threads: %d reads found, %d missed (pages freed); %d page scans (%d of "
                  "pages freed meanwhile), %d records scanned\n", c->oks, c->misses, c->scans,
                  c->scans_missed, c->scanned);
    assert_true(c->oks > 0);
    /* Exact live count: every record still in a page, not unlinked. */
    struct flash_stats st;
    flash_stats(f->fl, &st);
    uint64_t live = 0;
    for (int i = 0; i < CONC_N; i++) {
        if (read_rc(f->fl, i, c->loc[i]) != FLASH_OK)
            continue;
        if (flash_unlink(f->fl, c->loc[i]) == FLASH_OK)
            live++;
    }
    assert_int_equal(st.objects_live, live);
    flash_stats(f->fl, &st);
    assert_int_equal(st.objects_live, 0);
    assert_int_equal(st.bytes_live, 0);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* The index word of a flash item (layout.h): its class is never a size class, and its location,
 * node and filter bits come back whole, the largest location included. */
static void test_flash_ite(void **state)
{
    (void)state;
    const uint64_t locs[] = {0, 1, flash_loc_make(65536 * 7 + 192, 5),
                             flash_loc_make(FLASH_MAX_BYTES - FLASH_UNIT, 63),
                             (1ULL << FLASH_LOC_BITS) - 1};
    for (size_t i = 0; i < sizeof(locs) / sizeof(locs[0]); i++)
        for (uint32_t node = 0; node < ITE_MAX_NODES; node += 341)
            for (uint32_t filter = 0; filter < 128; filter += 127) {
                uint64_t w = ite_make_flash(node, locs[i], filter);
                assert_true(ite_is_flash(w));
                assert_false(ite_empty(w));
                assert_int_equal(ite_class(w), ITE_CLASS_FLASH);
                assert_int_equal(ite_node(w), node);
                assert_int_equal(ite_flash_loc(w), locs[i]);
                assert_int_equal(ite_filter(w), filter);
            }
    assert_false(ite_is_flash(0));
    assert_false(ite_is_flash(ite_make(3, ITE_SIZE_CLASSES - 1, 1 << 20, 5, 9)));
    /* The size classes stop short of it: the largest item that fits in 63 classes is taken,
     * one that would need the 64th is refused. */
    uint32_t sizes[ITE_MAX_CLASSES];
    uint64_t pb, pc, po;
    uint32_t n = slab_geometry(1ULL << 36, 200u << 20, sizes, &pb, &pc, &po);
    assert_true(n > 0 && n <= ITE_SIZE_CLASSES);
    assert_int_equal(slab_geometry(1ULL << 36, 260u << 20, sizes, &pb, &pc, &po), 0);
}

static void test_bad_configurations(void **state)
{
    struct fx *f = *state;
    char err[256];
    struct flash_log *fl = (struct flash_log *)1;
    struct flash_config cfg = {.dir = "/nonexistent-nessie-flash", .node = 3, .bytes = PAGE * 4,
                               .page_bytes = PAGE, .no_uring = f->no_uring};
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    assert_null(fl);
    assert_non_null(strstr(err, "No such file"));
    char file[128];
    snprintf(file, sizeof(file), "%s/plain", f->dir);
    int fd = open(file, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    close(fd);
    cfg.dir = file;
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    unlink(file);
    assert_non_null(strstr(err, "not a directory"));
    cfg.dir = f->dir;
    cfg.page_bytes = PAGE + 4096;
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "power of two"));
    cfg.page_bytes = PAGE;
    cfg.bytes = PAGE * 4 + 1;
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "whole number"));
    /* More than the disk holds: refused at start, with the reason (where the disk holds less
     * than the most a log may be). */
    struct statvfs vfs;
    assert_int_equal(statvfs(f->dir, &vfs), 0);
    if ((uint64_t)vfs.f_bavail * vfs.f_frsize >= FLASH_MAX_BYTES) {
        print_message("flash: %s has room for the largest log: the no-room case is skipped\n",
                      f->dir);
        return;
    }
    /* A log that holds records, reopened fresh at a size the disk refuses, keeps them. */
    f->fl = open_log(f, true);
    uint64_t kept = put(f->fl, 7);
    flash_close(f->fl);
    f->fl = NULL;
    cfg.bytes = FLASH_MAX_BYTES;
    cfg.fresh = true;
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    print_message("flash: %s\n", err);
    assert_non_null(strstr(err, "cannot reserve"));
    assert_null(fl);
    f->fl = open_log(f, false);
    check(f->fl, 7, kept);
    flash_close(f->fl);
    f->fl = NULL;
    /* A file the call made itself is not left behind. */
    char path[128];
    snprintf(path, sizeof(path), "%s/node3.flash", f->dir);
    assert_int_equal(unlink(path), 0);
    cfg.fresh = false;
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    assert_int_equal(access(path, F_OK), -1);
}

/* A read's I/O is made without the log's mutex (flash.c, "reads without the log's mutex"):
 * while it is on its way, another read, an append and a seal go through; and its page freed
 * and written again meanwhile, with the same key at the same offset and another value of the
 * same length (a record whole and intact of its own), makes it a miss, never the other value. (With the I/O under the mutex, as before, the pause's calls
 * would wait for it for ever.) */
struct pause_ctx {
    struct fx *f;
    uint64_t other_loc; /* a record of another page, read during the pause */
    int other;
    uint64_t again;     /* key-0's new record, at page 0's offset 0 in its next life */
    bool ran;
};

static void pause_meanwhile(void *arg)
{
    struct pause_ctx *c = arg;
    struct flash_log *fl = c->f->fl;
    c->ran = true;
    check(fl, c->other, c->other_loc);
    uint64_t life = 0;
    assert_int_equal(flash_oldest_page(fl, &life), 0);
    assert_int_equal(flash_page_free(fl, 0, life), FLASH_OK);
    char k[32];
    unsigned char v[10000];
    int kl = key_of(0, k);
    memset(v, 0xAB, val_len(0)); /* another value under key-0, of the same length */
    struct flash_meta m = {.version = 1, .flags = 0, .exptime = 0, .flags8 = 0};
    assert_int_equal(flash_append(fl, k, (uint32_t)kl, v, val_len(0), &m, &c->again), FLASH_OK);
    assert_int_equal(flash_seal(fl), FLASH_OK); /* on the device, over the old record */
}

static void test_read_outside_the_mutex(void **state)
{
    struct fx *f = *state;
    f->fl = open_log(f, true);
    uint64_t locs[128];
    int n = 0;
    for (; n < 128; n++) {
        char k[32];
        unsigned char v[10000];
        int kl = key_of(n, k);
        val_fill(n, v);
        struct flash_meta m = {.version = 1000 + (uint64_t)n, .flags = (uint32_t)n,
                               .exptime = 77, .flags8 = 0x8};
        int rc = flash_append(f->fl, k, (uint32_t)kl, v, val_len(n), &m, &locs[n]);
        if (rc == FLASH_FULL)
            break;
        assert_int_equal(rc, FLASH_OK);
    }
    assert_int_equal(flash_seal(f->fl), FLASH_OK);
    assert_int_equal(flash_loc_offset(locs[0]), 0);
    struct pause_ctx c = {.f = f, .other = n - 1, .other_loc = locs[n - 1]};
    assert_true(flash_loc_offset(c.other_loc) >= PAGE);
    flash_inject_read_pause(f->fl, pause_meanwhile, &c);
    assert_int_equal(read_rc(f->fl, 0, locs[0]), FLASH_MISS);
    assert_true(c.ran);
    assert_int_equal(flash_loc_offset(c.again), 0);
    /* The new record reads back as what it is. */
    char k[32];
    unsigned char want[10000], got[10000];
    int kl = key_of(0, k);
    memset(want, 0xAB, val_len(0));
    uint32_t vl = 0;
    struct flash_meta m;
    assert_int_equal(flash_read(f->fl, c.again, k, (uint32_t)kl, got, sizeof(got), &vl, &m),
                     FLASH_OK);
    assert_int_equal(vl, val_len(0));
    assert_memory_equal(got, want, vl);
    /* Reads with no pause are hits as before (flash_read_rec too). */
    check(f->fl, n - 1, locs[n - 1]);
    unsigned char rec[10100];
    uint32_t rk = 0, rv = 0;
    assert_int_equal(flash_read_rec(f->fl, locs[n - 1], rec, sizeof(rec), &rk, &rv, &m), FLASH_OK);
    assert_int_equal(rv, val_len(n - 1));
}

#define BOTH(t)                                                       \
    cmocka_unit_test_setup_teardown(t, setup_uring, teardown),        \
        cmocka_unit_test_setup_teardown(t, setup_plain, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(test_append_and_read_back),
        BOTH(test_unlink_is_exact_and_once),
        BOTH(test_full_log_and_page_reclaim),
        BOTH(test_corrupt_record_is_a_miss),
        BOTH(test_restart_recovers_and_stops_at_a_torn_record),
        BOTH(test_io_errors),
        BOTH(test_bad_configurations),
        cmocka_unit_test(test_flash_ite),
        BOTH(test_page_lives_in_turn),
        BOTH(test_restart_after_free_and_crash),
        BOTH(test_other_shape_refused),
        BOTH(test_torn_first_record),
        BOTH(test_big_pages_and_short_transfers),
        BOTH(test_relive_scan_losses_and_bad_locations),
        BOTH(test_threads),
        BOTH(test_read_outside_the_mutex),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
