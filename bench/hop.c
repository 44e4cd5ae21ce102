/*
 * hop.c - build/bench/hop: the round trip of an empty request (WIRE_OP_NOOP) through the
 * shim <-> daemon channel alone, no engine behind it: what the hop costs an end-to-end GET.
 *
 *   hop [--header] [-n ITERATIONS] [-w WARMUP] [-D MAX_SECONDS] [-l LABEL] SOCKET
 *
 * Connects to the daemon listening on SOCKET (a cluster started by tools/nessie-cluster has
 * DIR/nodeI.sock), sends WARMUP (1000) requests unmeasured, then ITERATIONS (200000) requests one
 * after the other, timing each, or as many as fit in MAX_SECONDS (2). The channel's wait mode is
 * whatever the client channel chooses at open (NESSIE_WAIT=adaptive|spin|block, where supported);
 * LABEL (default: $NESSIE_WAIT, or "default") names the row. Prints one CSV row:
 *   label,iterations,p50_us,p99_us,p999_us,mean_us,ops_per_s
 * Exit status 1 if a request fails.
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nessie/wire.h>

#include "channel.h"
#include "microbench.h"

#define HEADER "label,iterations,p50_us,p99_us,p999_us,mean_us,ops_per_s"

static void usage(FILE *f)
{
    fprintf(f, "usage: hop [--header] [-n ITERATIONS] [-w WARMUP] [-D MAX_SECONDS] [-l LABEL] "
               "SOCKET\n"
               "  one CSV row: " HEADER "\n");
}

static int noop(struct shim_ch *ch)
{
    struct wire_req req = {.op = WIRE_OP_NOOP};
    struct wire_rep rep;
    int rc = shim_ch_raw(ch, &req, NULL, 0, &rep);
    if (rc == WIRE_OK && rep.status != WIRE_OK)
        rc = rep.status;
    return rc;
}

int main(int argc, char **argv)
{
    long iters = 200000, warmup = 1000;
    double max_s = 2.0;
    const char *label = getenv("NESSIE_WAIT");
    int header = 0;
    static const struct option opts[] = {
        {"header", no_argument, NULL, 'H'}, {"help", no_argument, NULL, 'h'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "n:w:D:l:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': iters = atol(optarg); break;
        case 'w': warmup = atol(optarg); break;
        case 'D': max_s = atof(optarg); break;
        case 'l': label = optarg; break;
        case 'H': header = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc - 1 || iters < 1 || warmup < 0 || max_s <= 0) {
        usage(stderr);
        return 2;
    }
    if (!label || !*label)
        label = "default";
    const char *path = argv[optind];

    struct shim_ch *ch;
    int rc = shim_ch_open(path, &ch);
    if (rc != WIRE_OK) {
        fprintf(stderr, "hop: %s: %s\n", path,
                rc < 0 ? strerror(-rc) : "refused by the daemon");
        return 1;
    }
    for (long i = 0; i < warmup; i++) {
        if ((rc = noop(ch)) != WIRE_OK)
            goto failed;
    }
    uint64_t *lat = malloc((size_t)iters * sizeof(*lat));
    if (!lat) {
        fprintf(stderr, "hop: out of memory\n");
        return 1;
    }
    uint64_t t0 = nessie_mono_ns(), deadline = t0 + (uint64_t)(max_s * 1e9), prev = t0;
    long n = 0;
    while (n < iters) {
        if ((rc = noop(ch)) != WIRE_OK)
            goto failed;
        uint64_t t = nessie_mono_ns();
        lat[n++] = t - prev;
        prev = t;
        if (t >= deadline)
            break;
    }
    double elapsed = (double)(prev - t0) / 1e9;
    shim_ch_close(ch);

    qsort(lat, (size_t)n, sizeof(*lat), mb_cmp_u64);
    if (header)
        puts(HEADER);
    printf("%s,%ld,%.2f,%.2f,%.2f,%.3f,%.0f\n", label, n, mb_quantile_us(lat, (size_t)n, 0.5),
           mb_quantile_us(lat, (size_t)n, 0.99), mb_quantile_us(lat, (size_t)n, 0.999),
           elapsed * 1e6 / (double)n, (double)n / elapsed);
    free(lat);
    return 0;

failed:
    fprintf(stderr, "hop: request failed: %s\n", rc < 0 ? strerror(-rc) : "wire error");
    shim_ch_close(ch);
    return 1;
}
