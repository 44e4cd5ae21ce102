/*
 * test_flash.c - the flash tier's log (kvstore/memory/flash.c, issue 31) on a real file: records
 * read back byte for byte from the write buffer and from the file, through io_uring and through
 * pread/pwrite; a location into a page written again, another key, a corrupt or torn record
 * are misses and never bytes; a restart recovers what was written; a full log refuses, a page
 * freed takes records again; live bytes are exact; injected I/O errors; bad configurations.
 * Each test runs twice: through io_uring (where the kernel allows it) and through pread/pwrite.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memory/flash.h"

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

static struct flash_log *open_log(struct fx *f, bool fresh)
{
    struct flash_config cfg = {.dir = f->dir, .node = 3, .bytes = (uint64_t)PAGE * PAGES,
                               .page_bytes = PAGE, .no_uring = f->no_uring, .fresh = fresh};
    char err[256] = "";
    struct flash_log *fl = NULL;
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), 0);
    assert_non_null(fl);
    return fl;
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
    /* Whole pages only, each written once: the device saw the used parts, to the block. */
    assert_true(st.bytes_device >= st.bytes_used - PAGE && st.bytes_device <= st.pages_full * PAGE);
    /* Another key at a good location, and a location inside a record: misses. */
    assert_int_equal(read_rc(f->fl, 1, loc[0]), FLASH_MISS);
    assert_int_equal(read_rc(f->fl, 0, loc[0] + (1u << FLASH_LOC_SEQ_BITS)), FLASH_MISS);
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
    int64_t old = flash_oldest_page(f->fl);
    assert_int_equal(old, 0); /* the first page filled */
    /* Unlink every other record of page 0; its walk gives the others, in order. */
    int in0 = 0;
    for (int i = 0; i < n; i++)
        if (flash_loc_offset(e.locs[i]) < PAGE) {
            in0++;
            if (i % 2)
                assert_int_equal(flash_unlink(f->fl, e.locs[i]), FLASH_OK);
        }
    assert_int_equal(flash_sparsest_page(f->fl, 100), 0);
    assert_int_equal(flash_page_each(f->fl, old, each_count, &e), FLASH_OK);
    assert_int_equal(e.seen, (in0 + 1) / 2);
    assert_int_equal(flash_page_free(f->fl, old), FLASH_OK);
    assert_int_equal(flash_page_free(f->fl, old), FLASH_BAD);
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
    char path[128];
    snprintf(path, sizeof(path), "%s/node3.flash", f->dir);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    off_t at = (off_t)flash_loc_offset(loc[4]) + 64 + 5 + 10;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
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
    flash_close(f->fl); /* seals the page being filled */
    f->fl = NULL;
    /* A torn write: item 20's header's key length changed on the device (its CRC fails). */
    char path[128];
    snprintf(path, sizeof(path), "%s/node3.flash", f->dir);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char z = 0x77;
    assert_int_equal(pwrite(fd, &z, 1, (off_t)flash_loc_offset(loc[20]) + 36), 1);
    close(fd);
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
    /* New records go to new lives: their sequence numbers past every recovered one's, so no
     * old location reads a new record. */
    uint64_t nl = put(f->fl, 50);
    check(f->fl, 50, nl);
    for (int i = 0; i < 30; i++)
        if (flash_loc_offset(loc[i]) / PAGE == flash_loc_offset(nl) / PAGE)
            assert_int_equal(read_rc(f->fl, i, loc[i]), FLASH_MISS);
}

static void test_io_errors(void **state)
{
    struct fx *f = *state;
    f->fl = open_log(f, true);
    uint64_t loc[8];
    for (int i = 0; i < 8; i++)
        loc[i] = put(f->fl, i);
    assert_int_equal(flash_unlink(f->fl, loc[2]), FLASH_OK); /* counted once, not again below */
    /* A page that cannot be written: its records are lost, never half-read. */
    flash_inject_errors(f->fl, 0, 1);
    assert_int_equal(flash_seal(f->fl), FLASH_IO);
    for (int i = 0; i < 8; i++)
        assert_int_equal(read_rc(f->fl, i, loc[i]), FLASH_MISS);
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
    assert_int_equal(st.objects_live, 8);
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
    /* More than the disk holds: refused at start, with the reason. */
    cfg.bytes = FLASH_MAX_BYTES;
    assert_int_equal(flash_open(&cfg, &fl, err, sizeof(err)), -1);
    print_message("flash: %s\n", err);
    assert_non_null(strstr(err, "cannot reserve"));
    assert_null(fl);
    char path[128];
    snprintf(path, sizeof(path), "%s/node3.flash", f->dir);
    assert_int_equal(access(path, F_OK), -1); /* not left behind */
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
