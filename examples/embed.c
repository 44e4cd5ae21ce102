/*
 * embed.c - the Nessie engine inside a program of its own, with no daemon: a one-node cluster on
 * the shared-memory fabric, a few keys stored and read back, and the node's tables removed.
 *
 * Build it against an installed libnessie:
 *
 *     cc embed.c $(pkg-config --cflags --libs nessie) -o embed && ./embed
 *
 * The shared-memory fabric keeps a node's tables in POSIX shared memory (/dev/shm/nessie.*), so
 * they outlive a process that crashes and a reopen finds them again; this program names its
 * cluster after its pid, so runs never meet, and removes the tables before it exits. A real
 * cluster spans hosts: set cfg.backend = NESSIE_BACKEND_VERBS, cfg.nodes and cfg.addrs (one
 * HOST:PORT listener per node), and open each node in the process that plays it.
 *
 * Exits 0 when every answer was the expected one, 1 otherwise (and says which).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <nessie/nessie.h>

static int failures;

static void expect(const char *what, int got, int want)
{
    if (got != want) {
        fprintf(stderr, "embed: %s: %s, expected %s\n", what, nessie_strerror(got),
                nessie_strerror(want));
        failures++;
    }
}

int main(void)
{
    char cluster[32];
    snprintf(cluster, sizeof(cluster), "embed-%ld", (long)getpid());

    struct nessie_config cfg;
    nessie_config_defaults(&cfg);
    cfg.backend = NESSIE_BACKEND_SHM;
    cfg.cluster = cluster;
    cfg.nodes = 1;
    cfg.self = 0;
    cfg.index_slots = 4096;       /* index entries (each key needs one) */
    cfg.data_bytes = 16u << 20;   /* values, keys and their headers */

    struct nessie_node *node;
    int rc = nessie_node_open(&cfg, &node);
    if (rc != NESSIE_OK) {
        fprintf(stderr, "embed: cannot open the node: %s\n", nessie_strerror(rc));
        return 1;
    }
    struct nessie_ctx *ctx; /* one per thread that issues operations */
    rc = nessie_ctx_create(node, &ctx);
    if (rc != NESSIE_OK) {
        fprintf(stderr, "embed: cannot create a context: %s\n", nessie_strerror(rc));
        nessie_node_close(node);
        nessie_node_unlink(&cfg);
        return 1;
    }

    static const char *const keys[] = {"apple", "banana", "cherry"};
    static const char *const values[] = {"red", "yellow", "dark red"};
    for (int i = 0; i < 3; i++)
        expect("set", nessie_store(ctx, NESSIE_SET, keys[i], strlen(keys[i]), values[i],
                                   strlen(values[i]), (uint32_t)i, 0, 0, NULL),
               NESSIE_OK);

    for (int i = 0; i < 3; i++) {
        struct nessie_item it;
        rc = nessie_get(ctx, keys[i], strlen(keys[i]), &it);
        expect("get", rc, NESSIE_OK);
        if (rc == NESSIE_OK) {
            printf("%s = %.*s (flags %u)\n", keys[i], (int)it.value_len, (const char *)it.value,
                   it.flags);
            if (it.value_len != strlen(values[i]) || memcmp(it.value, values[i], it.value_len) ||
                it.flags != (uint32_t)i) {
                fprintf(stderr, "embed: %s read back wrong\n", keys[i]);
                failures++;
            }
        }
    }

    expect("add of a present key", nessie_store(ctx, NESSIE_ADD, "apple", 5, "green", 5, 0, 0, 0,
                                                 NULL),
           NESSIE_NOT_STORED);
    uint64_t counter = 0;
    expect("set counter", nessie_store(ctx, NESSIE_SET, "visits", 6, "41", 2, 0, 0, 0, NULL),
           NESSIE_OK);
    expect("incr", nessie_arith(ctx, "visits", 6, true, 1, &counter, NULL), NESSIE_OK);
    if (counter != 42) {
        fprintf(stderr, "embed: incr gave %llu, expected 42\n", (unsigned long long)counter);
        failures++;
    }
    expect("delete", nessie_delete(ctx, "banana", 6), NESSIE_OK);
    struct nessie_item gone;
    expect("get after delete", nessie_get(ctx, "banana", 6, &gone), NESSIE_NOT_FOUND);

    struct nessie_counters c;
    nessie_node_counters(node, &c);
    printf("gets %llu, puts %llu, deletes %llu\n",
           (unsigned long long)c.op[NESSIE_OPK_GET].ops,
           (unsigned long long)c.op[NESSIE_OPK_PUT].ops,
           (unsigned long long)c.op[NESSIE_OPK_DELETE].ops);

    /* Cleanup in reverse order of setup; the tables last, once nothing maps them. */
    nessie_ctx_destroy(ctx);
    nessie_node_close(node);
    expect("unlink", nessie_node_unlink(&cfg), NESSIE_OK);

    printf(failures ? "embed: %d failures\n" : "embed: ok\n", failures);
    return failures ? 1 : 0;
}
