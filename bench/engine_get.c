/*
 * engine_get.c - build/bench/engine-get: the engine alone: GETs issued in process on the
 * shared-memory fabric (nessie/nessie.h), no daemon, no channel, no shim: what the protocol
 * itself costs an end-to-end GET.
 *
 *   engine-get [--header] [-N NODES] [-n KEYS] [-k KEY_BYTES] [-D SECONDS] VALUE_BYTES...
 *
 * For each value size: NODES (3) engine nodes in this process (as the test suite runs them: the
 * index is spread over all of them, as in a cluster of daemons), configured as bench/lib.sh
 * configures the benchmark cluster (262144 index slots, 1 GiB data region per node, 2 MiB items,
 * default optimizations); one context on node 0 stores KEYS keys (10000, or 1000 for values over
 * 16 KiB) of KEY_BYTES (128) bytes, then GETs uniformly random ones, one after the other, for
 * SECONDS (1, after a tenth of that unmeasured), timing each. Then the nodes are closed and their
 * regions removed. Prints one CSV row per size:
 *   value_size,keys,nodes,gets,p50_us,p99_us,mean_us,ops_per_s,goodput_mb_s
 * Exit status 1 if a store or a GET fails.
 */
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "microbench.h"
#include <nessie/nessie.h>

#define HEADER "value_size,keys,nodes,gets,p50_us,p99_us,mean_us,ops_per_s,goodput_mb_s"
#define MAXN 8
#define MAX_SAMPLES (8u << 20)

static char cluster[64];
static uint32_t nnodes;

/* Remove the regions of the cluster being measured (also on SIGINT / SIGTERM). */
static void unlink_all(void)
{
    struct nessie_config cfg;
    nessie_config_defaults(&cfg);
    cfg.cluster = cluster;
    for (cfg.self = 0; cfg.self < nnodes; cfg.self++)
        nessie_node_unlink(&cfg);
}

static void on_signal(int sig)
{
    unlink_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng(void)
{
    uint64_t x = rng_state; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static void make_key(char *buf, size_t klen, uint64_t i)
{
    memset(buf, 'k', klen);
    char num[24];
    int n = snprintf(num, sizeof(num), "%llu", (unsigned long long)i);
    memcpy(buf + klen - (size_t)n, num, (size_t)n);
    memcpy(buf, "engine-get:", klen < 11 ? klen : 11);
}

static int run(uint32_t value_size, uint64_t keys, size_t klen, double seconds, uint64_t *lat)
{
    static unsigned seq;
    struct nessie_node *node[MAXN] = {0};
    struct nessie_ctx *ctx = NULL;
    char *key = malloc(klen);
    unsigned char *value = malloc(value_size ? value_size : 1);
    int ret = 1;
    if (!key || !value) {
        fprintf(stderr, "engine-get: out of memory\n");
        goto out;
    }
    snprintf(cluster, sizeof(cluster), "bench-eng-%d-%u", (int)getpid(), seq++);
    for (uint32_t i = 0; i < nnodes; i++) {
        struct nessie_config cfg;
        nessie_config_defaults(&cfg);
        cfg.cluster = cluster;
        cfg.nodes = nnodes;
        cfg.self = i;
        cfg.index_slots = 262144;
        cfg.data_bytes = 1ull << 30;
        cfg.max_item_size = 2u << 20;
        int rc = nessie_node_open(&cfg, &node[i]);
        if (rc != NESSIE_OK) {
            fprintf(stderr, "engine-get: node %u: %s\n", i, nessie_strerror(rc));
            goto out;
        }
    }
    int rc = nessie_ctx_create(node[0], &ctx);
    if (rc != NESSIE_OK) {
        fprintf(stderr, "engine-get: context: %s\n", nessie_strerror(rc));
        goto out;
    }
    for (uint32_t i = 0; i < value_size; i++)
        value[i] = (unsigned char)rng();
    for (uint64_t k = 0; k < keys; k++) {
        make_key(key, klen, k);
        rc = nessie_store(ctx, NESSIE_SET, key, klen, value, value_size, 0, 0, 0, NULL);
        if (rc != NESSIE_OK) {
            fprintf(stderr, "engine-get: store: %s\n", nessie_strerror(rc));
            goto out;
        }
    }

    /* A tenth of the time unmeasured, then the measured GETs. */
    uint64_t n = 0, t0 = 0, prev = 0, bytes = 0;
    for (int phase = 0; phase < 2; phase++) {
        uint64_t start = nessie_mono_ns();
        uint64_t deadline = start + (uint64_t)((phase ? seconds : seconds / 10) * 1e9);
        t0 = prev = start;
        n = 0;
        bytes = 0;
        for (;;) {
            struct nessie_item it;
            make_key(key, klen, rng() % keys);
            rc = nessie_get(ctx, key, klen, &it);
            if (rc != NESSIE_OK || it.value_len != value_size) {
                fprintf(stderr, "engine-get: get: %s (%u bytes)\n", nessie_strerror(rc),
                        rc == NESSIE_OK ? it.value_len : 0);
                goto out;
            }
            bytes += it.value_len;
            uint64_t t = nessie_mono_ns();
            if (phase && n < MAX_SAMPLES)
                lat[n] = t - prev;
            n++;
            prev = t;
            if (t >= deadline)
                break;
        }
    }
    double elapsed = (double)(prev - t0) / 1e9;
    size_t ns = n < MAX_SAMPLES ? n : MAX_SAMPLES;
    qsort(lat, ns, sizeof(*lat), mb_cmp_u64);
    printf("%u,%llu,%u,%llu,%.2f,%.2f,%.3f,%.0f,%.1f\n", value_size, (unsigned long long)keys,
           nnodes, (unsigned long long)n, mb_quantile_us(lat, ns, 0.5), mb_quantile_us(lat, ns, 0.99),
           elapsed * 1e6 / (double)n, (double)n / elapsed, (double)bytes / elapsed / 1e6);
    fflush(stdout);
    ret = 0;
out:
    if (ctx)
        nessie_ctx_destroy(ctx);
    for (uint32_t i = 0; i < nnodes; i++)
        if (node[i])
            nessie_node_close(node[i]);
    unlink_all();
    free(key);
    free(value);
    return ret;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: engine-get [--header] [-N NODES] [-n KEYS] [-k KEY_BYTES] [-D SECONDS] "
               "VALUE_BYTES...\n"
               "  one CSV row per size: " HEADER "\n");
}

int main(int argc, char **argv)
{
    long keys = 0, klen = 128, nodes = 3;
    double seconds = 1.0;
    int header = 0;
    static const struct option opts[] = {
        {"header", no_argument, NULL, 'H'}, {"help", no_argument, NULL, 'h'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "N:n:k:D:h", opts, NULL)) != -1) {
        switch (c) {
        case 'N': nodes = atol(optarg); break;
        case 'n': keys = atol(optarg); break;
        case 'k': klen = atol(optarg); break;
        case 'D': seconds = atof(optarg); break;
        case 'H': header = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc || nodes < 1 || nodes > MAXN || keys < 0 || klen < 16 || klen > 250 ||
        seconds <= 0) {
        usage(stderr);
        return 2;
    }
    nnodes = (uint32_t)nodes;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    uint64_t *lat = malloc(MAX_SAMPLES * sizeof(*lat));
    if (!lat) {
        fprintf(stderr, "engine-get: out of memory\n");
        return 1;
    }
    if (header)
        puts(HEADER);
    int ret = 0;
    for (int i = optind; i < argc && ret == 0; i++) {
        long v = atol(argv[i]);
        if (v < 0 || v > (1l << 21) - 4096) {
            fprintf(stderr, "engine-get: bad value size %s\n", argv[i]);
            ret = 2;
            break;
        }
        uint64_t k = keys ? (uint64_t)keys : v > 16384 ? 1000 : 10000;
        ret = run((uint32_t)v, k, (size_t)klen, seconds, lat);
    }
    free(lat);
    return ret;
}
