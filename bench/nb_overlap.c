/*
 * nb_overlap.c - build/bench/nb-overlap: the paper's bursty-I/O example (Listing 2 of the
 * non-blocking extensions paper) on Nessie: data blocks split in chunks, each chunk a key; a
 * block's chunks are issued with memcached_iset (or read with memcached_iget) without waiting,
 * tested at the end of the block, and all waited for at the end. Prints the time of the
 * blocking and the non-blocking runs side by side, and checks every chunk read back.
 *
 *   nb-overlap [--blocks N] [--chunks N] [--chunk-bytes N] [--binary] [--misses-ok] HOST:PORT
 * Run it with the shim (tools/nessie-run build/bench/nb-overlap ...). Exit status 1 if a chunk
 * read back differs from what was written, or is missing unless --misses-ok (a cache smaller
 * than the data: bench/flash-seed.sh against memcached, whose misses are counted and printed).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nessie/memcached_nb.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void fill(char *buf, size_t len, int b, int c, int round)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)('a' + (size_t)(b * 31 + c * 7 + round + (int)i) % 26);
}

int main(int argc, char **argv)
{
    int blocks = 16, chunks = 32;
    size_t chunk_bytes = 4096;
    int binary = 0, misses_ok = 0;
    static const struct option lo[] = {{"blocks", 1, 0, 'b'}, {"chunks", 1, 0, 'c'},
                                       {"chunk-bytes", 1, 0, 's'}, {"binary", 0, 0, 'B'},
                                       {"misses-ok", 0, 0, 'M'}, {"help", 0, 0, 'h'},
                                       {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'b': blocks = atoi(optarg); break;
        case 'c': chunks = atoi(optarg); break;
        case 's': chunk_bytes = (size_t)atol(optarg); break;
        case 'B': binary = 1; break;
        case 'M': misses_ok = 1; break;
        default:
            fprintf(stderr, "usage: nb-overlap [--blocks N] [--chunks N] [--chunk-bytes N] [--binary] [--misses-ok] HOST:PORT\n");
            return o == 'h' ? 0 : 2;
        }
    }
    if (optind >= argc || blocks <= 0 || chunks <= 0 || chunk_bytes == 0) {
        fprintf(stderr, "usage: nb-overlap [--blocks N] [--chunks N] [--chunk-bytes N] [--binary] [--misses-ok] HOST:PORT\n");
        return 2;
    }
    char config[256];
    snprintf(config, sizeof(config), "--SERVER=%s%s", argv[optind],
             binary ? " --BINARY-PROTOCOL" : "");
    memcached_st *m = memcached(config, strlen(config));
    if (!m) {
        fprintf(stderr, "nb-overlap: bad configuration %s\n", argv[optind]);
        return 2;
    }
    size_t n = (size_t)blocks * (size_t)chunks;
    memcached_req *reqs = calloc(n, sizeof(*reqs));
    char *buf = malloc(chunk_bytes), key[64];
    /* errors, get_errors: sets and gets that failed (a miss is not a failure); mismatches:
     * values read back that are not what was written (never acceptable); misses: not found. */
    unsigned errors = 0, mismatches = 0, misses = 0, get_errors = 0;
    memcached_return_t first_error = MEMCACHED_SUCCESS; /* what the first failed call said */
#define NB_FAILED(rc_) (first_error = first_error != MEMCACHED_SUCCESS ? first_error : (rc_), 1)

    /* Blocking writes and reads, the baseline. */
    double t0 = now();
    for (int b = 0; b < blocks; b++)
        for (int c = 0; c < chunks; c++) {
            int kl = snprintf(key, sizeof(key), "BR%04dB%04dC", b, c);
            fill(buf, chunk_bytes, b, c, 0);
            memcached_return_t src = memcached_set(m, key, (size_t)kl, buf, chunk_bytes, 0, 0);
            errors += src != MEMCACHED_SUCCESS && NB_FAILED(src);
        }
    double t_bset = now() - t0;
    t0 = now();
    for (int b = 0; b < blocks; b++)
        for (int c = 0; c < chunks; c++) {
            int kl = snprintf(key, sizeof(key), "BR%04dB%04dC", b, c);
            size_t len;
            uint32_t fl;
            memcached_return_t rc;
            char *v = memcached_get(m, key, (size_t)kl, &len, &fl, &rc);
            fill(buf, chunk_bytes, b, c, 0);
            if (!v && rc == MEMCACHED_NOTFOUND)
                misses++;
            else if (!v)
                get_errors += NB_FAILED(rc);
            else
                mismatches += len != chunk_bytes || memcmp(v, buf, len) != 0;
            free(v);
        }
    double t_bget = now() - t0;

    /* Non-blocking: issue a block's chunks, test them at the end of the block, wait at the end. */
    t0 = now();
    size_t tested_done = 0;
    for (int b = 0; b < blocks; b++) {
        for (int c = 0; c < chunks; c++) {
            int kl = snprintf(key, sizeof(key), "BR%04dB%04dC", b, c);
            fill(buf, chunk_bytes, b, c, 1);
            uint32_t flags = 0;
            memcached_iset(m, key, (size_t)kl, buf, chunk_bytes, 0, &flags,
                           &reqs[(size_t)b * (size_t)chunks + (size_t)c]);
        }
        for (int c = 0; c < chunks; c++) {
            memcached_req *r = &reqs[(size_t)b * (size_t)chunks + (size_t)c];
            memcached_test(m, r);
            tested_done += r->complete;
        }
    }
    for (size_t i = 0; i < n; i++) {
        memcached_wait(m, &reqs[i]);
        errors += reqs[i].rc != MEMCACHED_SUCCESS && NB_FAILED(reqs[i].rc);
    }
    double t_iset = now() - t0;
    t0 = now();
    for (int b = 0; b < blocks; b++)
        for (int c = 0; c < chunks; c++) {
            int kl = snprintf(key, sizeof(key), "BR%04dB%04dC", b, c);
            memcached_return_t rc;
            memcached_iget(m, key, (size_t)kl, NULL, NULL,
                           &reqs[(size_t)b * (size_t)chunks + (size_t)c], &rc);
        }
    for (int b = 0; b < blocks; b++)
        for (int c = 0; c < chunks; c++) {
            memcached_req *r = &reqs[(size_t)b * (size_t)chunks + (size_t)c];
            memcached_wait(m, r);
            fill(buf, chunk_bytes, b, c, 1);
            if (r->rc == MEMCACHED_NOTFOUND)
                misses++;
            else if (r->rc != MEMCACHED_SUCCESS || !r->value)
                get_errors += NB_FAILED(r->rc);
            else
                mismatches += r->value_length != chunk_bytes ||
                              memcmp(r->value, buf, chunk_bytes) != 0;
            free(r->value);
        }
    double t_iget = now() - t0;

    printf("nb-overlap: %zu chunks of %zu bytes in %d blocks\n", n, chunk_bytes, blocks);
    printf("  set: blocking %.3f s, non-blocking %.3f s (ratio %.2f); %zu of %zu already complete "
           "when tested at the end of their block\n",
           t_bset, t_iset, t_iset > 0 ? t_bset / t_iset : 0.0, tested_done, n);
    printf("  get: blocking %.3f s, non-blocking %.3f s (ratio %.2f)\n", t_bget, t_iget,
           t_iget > 0 ? t_bget / t_iget : 0.0);
    printf("  errors %u (sets) %u (gets), mismatched chunks %u, missing chunks %u\n", errors,
           get_errors, mismatches, misses);
    if (errors || get_errors)
        printf("  the first failed call: %s\n", memcached_strerror(m, first_error));
    free(reqs);
    free(buf);
    memcached_free(m);
    return errors || get_errors || mismatches || (misses && !misses_ok) ? 1 : 0;
}
