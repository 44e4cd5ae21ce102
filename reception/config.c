/*
 * config.c - the cluster configuration file: its schema, parsing, checks and printing.
 *
 * The schema below is the only description of the file. Parsing looks keys up in it (a key it
 * does not list is a typo, and an error: a setting silently ignored is worse than a daemon that
 * refuses to start), its bounds are the engine's limits (nessie/nessie.h), and
 * `reception --print-config` writes the file from it, comments included; reception/nessie.conf is
 * that output. A key without a default of its own takes the engine's (nessie_config_defaults).
 */
#include "config.h"

#include <errno.h>
#include <glib.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "members.h"
#include <nessie/wire.h>

/* How a key's value is written and where it goes in struct recep_config. */
enum cfg_type {
    CFG_U32,   /* an unsigned integer (decimal, 0x hex or 0 octal), into a uint32_t */
    CFG_U64,   /* the same, into a uint64_t */
    CFG_OCTAL, /* the same, written back in octal (permission bits), into a uint32_t */
    CFG_NOT,   /* true or false, into a bool that holds its negation (the engine's no_* switches) */
    CFG_STR,   /* a string of min..max bytes, into a char array */
    CFG_ENUM,  /* one of choices ("a|b|c"), its index into an enum */
    CFG_ADDRS, /* HOST:PORT, HOST:PORT, ... one per node: [cluster] addresses */
};

struct cfg_key {
    const char *group, *key;
    enum cfg_type type;
    uint64_t min, max;   /* numbers: the bounds; strings: their length's */
    const char *def;     /* the default as the file writes it; NULL: the engine's */
    const char *example; /* keys with no value: written commented out with this value */
    const char *choices; /* CFG_ENUM: its values in the enum's order, '|'-separated */
    size_t off;          /* offsetof(struct recep_config, ...) */
    size_t size;         /* CFG_STR: the array's size */
    const char *doc;     /* the comment above it in the file */
};

#define F(field) offsetof(struct recep_config, field), sizeof(((struct recep_config *)0)->field)

/* Enums are stored as the int they are. */
_Static_assert(sizeof(enum nessie_backend) == sizeof(int) && sizeof(enum nessie_mode) == sizeof(int) &&
               sizeof(enum recep_sd_poll) == sizeof(int) &&
               sizeof(enum recep_membership) == sizeof(int), "enums are int-sized");

static const char *const file_header =
    "Nessie cluster configuration: one file for the whole cluster, the same on every node.\n"
    "Each node runs one daemon:   reception --config nessie.conf --node ID\n"
    "Every key is optional. Written by `reception --print-config`, which with no --config and no\n"
    "--set shows the defaults; reception/nessie.conf is that output.";

static const struct {
    const char *group, *doc;
} groups[] = {
    {"cluster", "The same on every node: the cluster's shape, its tables and its protocol."},
    {"optimizations", "Each can be switched off to measure what it buys (paper figure 13)."},
    {"reception", "This node's daemon: its threads and its clients' socket."},
    {"membership", "Who agrees the cluster's view (its epoch and live members): issue 28."},
    {"flash", "The flash tier (issue 31): what does not fit in a node's memory kept in a log on its\n"
              "disk, as memcached's extstore keeps it (-o ext_path=FILE:SIZE). The evictor writes\n"
              "its victims there instead of dropping them; their index entries name the records,\n"
              "which only this node reads (other nodes' calls are sent here). Stats extstore_*."},
};

static const struct cfg_key schema[] = {
    {"cluster", "name", CFG_STR, 1, 64, "nessie", NULL, NULL, F(cluster),
     "Names the cluster's shared-memory regions (/dev/shm/nessie.<name>.n<ID>.index|data): two\n"
     "clusters on one host need two names. [A-Za-z0-9_-]."},
    {"cluster", "nodes", CFG_U32, 1, NESSIE_NODES_MAX, "1", NULL, NULL, F(engine.nodes),
     "Nodes in the cluster."},
    {"cluster", "node_ids", CFG_U32, 0, NESSIE_NODES_MAX, "0", NULL, NULL, F(engine.node_ids),
     "Node-id capacity: the ids 0..node_ids-1 a node of this cluster may ever have (0: nodes).\n"
     "Positions are hashed over it, so it is fixed for the cluster's life and the same on every\n"
     "node; ids from nodes on are absent (hold nothing) until a node is added (issue 30). At most\n"
     "64 x nodes. Each id costs every node 2 x sd_slots x max_item_size bytes of request rings."},
    {"cluster", "fabric", CFG_ENUM, 0, 0, "shm", NULL, "shm|verbs", F(engine.backend),
     "shm: every node on this host (one-sided access through shared memory).\n"
     "verbs: RDMA (rdma-core) between hosts."},
    {"cluster", "addresses", CFG_ADDRS, 0, 0, "", "10.0.0.1:7470, 10.0.0.2:7470, 10.0.0.3:7470",
     NULL, F(addr),
     "verbs only: each node's listener, HOST:PORT, in node order, comma-separated; HOST is an address\n"
     "of the node's RDMA netdev (on Soft-RoCE: the netdev of `rdma link add rxe0 type rxe netdev\n"
     "eth0`). Every node's daemon reads the same list."},
    {"cluster", "device", CFG_STR, 0, 63, "", "rxe0", NULL, F(device),
     "verbs only: the RDMA device the address must be on (empty: whichever it is on)."},
    {"cluster", "index_slots", CFG_U64, 16, 1ULL << 32, "65536", NULL, NULL, F(engine.index_slots),
     "Index table entries per node. The index is an N-way cuckoo hash over all nodes' tables; keep\n"
     "its load factor (nessie-stat shows it) under ~0.8, or PUTs migrate a lot and may fail."},
    {"cluster", "data_bytes", CFG_U64, 1 << 20, NESSIE_DATA_BYTES_MAX, "67108864", NULL, NULL,
     F(engine.data_bytes),
     "Data region per node, bytes: values, keys and 64-byte headers, carved into size classes that\n"
     "grow by 1.25x from 128 bytes up to max_item_size."},
    {"cluster", "ways", CFG_U32, NESSIE_WAYS_MIN, NESSIE_WAYS_MAX, NULL, NULL, NULL, F(engine.ways),
     "N of N-way cuckoo hashing (the paper's setting: 3)."},
    {"cluster", "filter_bits", CFG_U32, 0, NESSIE_FILTER_BITS_MAX, NULL, NULL, NULL,
     F(engine.filter_bits), "Filter bits per index entry (0: off; the paper's setting: 7)."},
    {"cluster", "max_item_size", CFG_U32, 1024, 1U << 30, NULL, NULL, NULL, F(engine.max_item_size),
     "Largest item, bytes, counted as memcached counts it (key + value + 59, + 4 with flags), so\n"
     "the same values fit as in memcached -I. memcached's default is 1 MiB."},
    {"cluster", "expiration_ms", CFG_U32, 1, 3600 * 1000, NULL, NULL, NULL, F(engine.expiration_ms),
     "The expiration period, ms: how long a recycled entry and a cached index entry stay untouched,\n"
     "and the budget of one attempt of an operation. A full node keeps SET rate x period of its\n"
     "memory out of use (the paper, 4.3.1: period <= spare slots / PUT rate); the paper uses 1 s,\n"
     "which holds a 64 MiB node under ~13k SETs/s of 1 KiB items once it is full. A fabric whose\n"
     "round trips take tens of ms (emulated RDMA, as qemu without KVM) needs a longer one."},
    {"cluster", "op_timeout_ms", CFG_U32, 0, 3600 * 1000, NULL, NULL, NULL, F(engine.op_timeout_ms),
     "Budget of one call, all retries included, ms (0: the longer of 1 s and one expiration\n"
     "period)."},
    {"cluster", "migrate_depth", CFG_U32, 0, 64, NULL, NULL, NULL, F(engine.migrate_depth),
     "Depth limit of recursive MIGRATE."},
    {"cluster", "evict", CFG_NOT, 0, 0, NULL, NULL, NULL, F(engine.no_evict),
     "A full node evicts (true: items sampled and scored by their reads, the least read and longest\n"
     "idle removed, as memcached evicts), or refuses SETs with an out-of-memory error (false, as\n"
     "memcached -M). Expired and flushed items are reclaimed either way, and DELETE always works."},
    {"cluster", "mode", CFG_ENUM, 0, 0, NULL, NULL, "cd|sd|hy|auto", F(engine.mode),
     "Who carries out an operation (the paper's comparisons, section 6): cd, the client's own node,\n"
     "with one-sided READ, WRITE and CAS (Nessie); sd, the key's home node, to which the operation\n"
     "is shipped through a request ring in its memory (NessieSD); hy, GETs cd and writes sd\n"
     "(NessieHY); auto, per operation the way that has lately been faster (Cell's selector: each\n"
     "node measures both ways per peer, kind of operation and value size, and explores the slower\n"
     "way now and then). Nodes of one cluster may differ; `reception --mode` overrides it."},
    {"cluster", "sd_slots", CFG_U32, 1, NESSIE_SD_SLOTS_MAX, NULL, NULL, NULL, F(engine.sd_slots),
     "Requests one node may have in flight to one home node at once (its ring slots there).\n"
     "Each slot holds a whole item: the rings cost 2 x nodes x sd_slots x max_item_size (capped at\n"
     "1 MiB) bytes of shared memory per node."},

    {"optimizations", "cache", CFG_NOT, 0, 0, NULL, NULL, NULL, F(engine.no_cache),
     "The per-worker LRU cache of remote entries, keyed by index entry."},
    {"optimizations", "previous_versions", CFG_NOT, 0, 0, NULL, NULL, NULL,
     F(engine.no_prev_versions), "A GET that meets an entry being written reads its previous version."},
    {"optimizations", "multi_read", CFG_NOT, 0, 0, NULL, NULL, NULL, F(engine.no_multi_read),
     "Large entries are read in two READs, header and key first (multi_read_bytes)."},
    {"optimizations", "multi_read_bytes", CFG_U32, 64, 1U << 30, NULL, NULL, NULL,
     F(engine.multi_read_bytes),
     "A DTE read is split into header+key first and value after when its slot exceeds this."},
    {"optimizations", "cache_entries", CFG_U32, 1, 1U << 24, NULL, NULL, NULL,
     F(engine.cache_entries), "The cache's entries, per worker."},
    {"optimizations", "cache_bytes", CFG_U64, 4096, 1ULL << 36, NULL, NULL, NULL,
     F(engine.cache_bytes), "The cache's bytes, per worker."},

    {"reception", "workers", CFG_U32, 1, 256, "2", NULL, NULL, F(workers),
     "Threads running requests; each serves a share of the channels."},
    {"reception", "recyclers", CFG_U32, 1, 64, "1", NULL, NULL, F(recyclers),
     "Background recycling threads."},
    {"reception", "arena_bytes", CFG_U32, 4096, 1U << 30, "1048576", NULL, NULL, F(arena_bytes),
     "Shared-memory arena per client channel, bytes, a multiple of 8. Larger values still work (in\n"
     "chunks)."},
    {"reception", "max_channels", CFG_U32, 1, 1 << 20, "1024", NULL, NULL, F(max_channels),
     "Channels (client threads) one daemon serves at most."},
    {"reception", "spin_us", CFG_U32, 0, 1000000, "50", NULL, NULL, F(spin_us),
     "Longest a worker busy-waits for the next request before it sleeps, microseconds. Within this\n"
     "cap it spins only as long as its clients' measured think times say the next request is due\n"
     "soon (include/nessie/wire_sync.h); 0: never spin. The memcached port's threads spin this\n"
     "long too, while their requests come within 150 us of their replies and a CPU would\n"
     "otherwise go idle (one thread at a time on fewer than 4 CPUs; none on one)."},
    {"reception", "sd_servers", CFG_U32, 1, 64, "1", NULL, NULL, F(sd_servers),
     "Threads that run the operations peers ship to this node (their mode sd or hy): every daemon\n"
     "runs them, whatever its own mode."},
    {"reception", "sd_poll", CFG_ENUM, 0, 0, "adaptive", NULL, "adaptive|spin", F(sd_poll),
     "How they wait for requests: adaptive (spin spin_us after the last request, then sleep in\n"
     "steps up to 200 us, 2 ms once no request came for 100 ms, 10 ms after a second: the first\n"
     "request after a quiet spell waits that long) or spin (a core each, always busy, as the paper's\n"
     "servers)."},
    {"reception", "sd_help", CFG_NOT, 0, 0, NULL, NULL, NULL, F(no_sd_help),
     "Workers answer peers' shipped GETs themselves while they are awake: while they wait for the\n"
     "replies of their own shipped calls, and while they spin for their clients' next requests. A\n"
     "request one of them answers does not wait for the SD server's nap (true), or the SD servers\n"
     "alone answer (false)."},
    {"reception", "sweep_every_s", CFG_U32, 0, 1 << 20, "60", NULL, NULL, F(sweep_every_s),
     "Leak sweep period, seconds: the sweep recycles the entries that faults leave behind (a\n"
     "timed-out write's previous version, a migration of unknown outcome, a crashed writer's\n"
     "entries), which nothing else ever reclaims; it reads the index entries of every item older\n"
     "than the grace, so it runs now and then, not always. 0: only the sweeps after a start."},
    {"reception", "socket", CFG_STR, 1, 107, WIRE_SOCKET_NAME, NULL, NULL, F(socket_name),
     "The Unix socket: relative to the run directory (--run-dir, $NESSIE_RUN_DIR, /tmp/nessie-$UID);\n"
     "%u is replaced by the node ID."},
    {"reception", "socket_mode", CFG_OCTAL, 0, 0777, "0600", NULL, NULL, F(socket_mode),
     "Who may connect: the daemon's user only (peer credentials are checked as well)."},
    {"reception", "memcached_port", CFG_U32, 0, 65535, "0", "11211", NULL, F(memcached_port),
     "The memcached protocol on TCP, for clients that do not use libmemcached (pymemcache,\n"
     "gomemcache, spymemcached, proxies): node N listens on this port + N. 0: off (the default:\n"
     "every request on it runs with the daemon's rights, and it has no authentication)."},
    {"reception", "memcached_addr", CFG_STR, 1, 63, "127.0.0.1", "0.0.0.0", NULL,
     F(memcached_addr),
     "The address the memcached port listens on, numeric (IPv4 or IPv6). Only this host by\n"
     "default: another address only when the operator writes it."},
    {"reception", "memcached_threads", CFG_U32, 1, 256, "4", NULL, NULL, F(memcached_threads),
     "Threads running the memcached port's connections; each runs its connections' requests\n"
     "itself, start to end. memcached's default (-t 4): on a shared machine the scheduler gives\n"
     "each runnable thread its share, so fewer threads than memcached's lose to its under\n"
     "contention (bench/tcp.sh's contended case: 2 threads served 0.54 of memcached's ops/s)."},
    {"reception", "max_connections", CFG_U32, 1, 1 << 20, "1024", NULL, NULL, F(max_connections),
     "Connections the memcached port keeps open at most (memcached's -c, same default); one\n"
     "more is answered \"ERROR Too many open connections\" and closed, as memcached does."},
    {"reception", "idle_timeout_s", CFG_U32, 0, 1 << 24, "0", NULL, NULL, F(idle_timeout_s),
     "A memcached-port connection that sends and reads nothing this long is closed (memcached's\n"
     "-o idle_timeout; 0: never, its default)."},
    {"reception", "partial_timeout_s", CFG_U32, 0, 1 << 24, "60", NULL, NULL,
     F(partial_timeout_s),
     "A memcached-port connection whose request is begun and makes no progress this long (a line\n"
     "with no end, a value short of its length), or whose replies wait this long for it to read\n"
     "them, is closed: it holds up to an item's memory. 0: never."},

    {"membership", "mode", CFG_ENUM, 0, 0, "static", NULL, "static|etcd", F(membership),
     "static: the members are nodes 0..nodes-1, always (no view; no coordination service).\n"
     "etcd: each daemon holds an etcd lease and registers under /nessie/<name>/members/<ID>; a\n"
     "member whose lease lapses is removed by a view change written through etcd (a transaction),\n"
     "never by one peer's suspicion, and every daemon installs each view it reads: the calls plan\n"
     "their keys on it (a member removed from it holds no positions; a call that needs one waits\n"
     "for the view that removes it), and nodes are added and retired through it (nessie-cluster)."},
    {"membership", "endpoints", CFG_STR, 0, 511, "", "http://10.0.0.1:2379, http://10.0.0.2:2379",
     NULL, F(etcd_endpoints),
     "etcd only: the etcd cluster's client URLs (its v3 JSON gateway), comma-separated, tried in\n"
     "order. A daemon that can reach none of them at start exits with an error naming them.\n"
     "tools/nessie-cluster --membership etcd starts a private etcd and passes its URL itself."},
    {"membership", "lease_s", CFG_U32, 1, 60, "2", NULL, NULL, F(lease_s),
     "etcd only: this daemon's lease, seconds: a daemon that stops renewing it (killed, stalled,\n"
     "cut off) is removed from the view about this long after (plus etcd's expiry check, ~0.5 s).\n"
     "2 s lets a daemon its service manager restarts after 1 s come back within it; etcd itself\n"
     "raises a TTL below its minimum (1.5 s at its default election timeout). Half of it (the view\n"
     "lease) must exceed [cluster] expiration_ms plus 200 ms, or the daemon refuses to start."},

    {"flash", "path", CFG_STR, 0, NESSIE_FLASH_PATH_MAX - 1, "", "/var/lib/nessie", NULL,
     F(flash_path),
     "A directory on the flash device (empty: no flash tier). Each node keeps its log there, in\n"
     "<[cluster] name>.node<ID>.flash, written only by its own daemon (two clusters may share the\n"
     "directory; the file is locked while its daemon runs); the directory must exist. A daemon that\n"
     "re-attaches its tables (a restart) recovers its log; one that makes them anew empties it."},
    {"flash", "bytes", CFG_U64, 0, 1ULL << 40, "1073741824", NULL, NULL, F(engine.flash_bytes),
     "The log's pages per node, bytes: a whole number of pages, at most 1 TiB (what an index\n"
     "entry addresses); the file holds 4 KiB and 8 bytes per page more (its superblock and page\n"
     "table). Reserved at start: a disk without that much room is refused then."},
    {"flash", "page_bytes", CFG_U32, 64 << 10, 2 << 20, NULL, NULL, NULL,
     F(engine.flash_page_bytes),
     "The log's page, bytes (a power of two): filled in memory and written whole, and the unit\n"
     "that compaction and a full log free. A log made with another page size or size is\n"
     "refused at start, with the reason (remove the file to start it empty)."},
    {"flash", "item_min", CFG_U32, 0, 1U << 30, NULL, NULL, NULL, F(engine.flash_item_min),
     "Evicted values smaller than this are dropped, not demoted, as memcached's ext_item_size:\n"
     "a small value saves little memory and costs a flash read."},
    {"flash", "promote_ms", CFG_U32, 0, 3600000, NULL, NULL, NULL, F(engine.flash_promote_ms),
     "An item read from the log twice within this many ms is brought back into memory (as\n"
     "memcached's extstore recaches an item read again), so a hot key, once demoted, is not read\n"
     "from flash on every GET; 0: never (every read of a flash item goes to the device). With\n"
     "eviction off ([cluster] evict = false) nothing is promoted: a copy would take room for good."},
};
#define SCHEMA_LEN (sizeof(schema) / sizeof(schema[0]))

static const struct cfg_key *schema_find(const char *group, const char *key)
{
    for (size_t i = 0; i < SCHEMA_LEN; i++)
        if (strcmp(schema[i].group, group) == 0 && (!key || strcmp(schema[i].key, key) == 0))
            return &schema[i];
    return NULL;
}

/* The index of s in a '|'-separated list, or -1. */
static int choice_index(const char *choices, const char *s)
{
    size_t n = strlen(s);
    int i = 0;
    for (const char *p = choices; p; i++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, s, n) == 0)
            return i;
        p = bar ? bar + 1 : NULL;
    }
    return -1;
}

/* Write choice i of a '|'-separated list. */
static void choice_print(FILE *out, const char *choices, int i)
{
    const char *p = choices;
    for (; i > 0 && p; i--) {
        p = strchr(p, '|');
        p = p ? p + 1 : NULL;
    }
    if (p)
        fprintf(out, "%.*s", (int)strcspn(p, "|"), p);
}

static int parse_addrs(struct recep_config *cfg, const char *where, const struct cfg_key *k,
                       const char *s)
{
    gchar **parts = g_strsplit(s, ",", -1);
    uint32_t n = 0;
    int rc = 0;
    for (gchar **p = parts; *p; p++) {
        g_strstrip(*p);
        if (!**p && !p[1] && n == 0)
            break; /* an empty list */
        if (n >= NESSIE_NODES_MAX || strlen(*p) >= sizeof(cfg->addr[0]) || !strchr(*p, ':')) {
            log_error("config %s: [%s] %s: \"%s\": expected HOST:PORT, at most %u of them", where,
                      k->group, k->key, *p, NESSIE_NODES_MAX);
            rc = -1;
            break;
        }
        snprintf(cfg->addr[n], sizeof(cfg->addr[n]), "%s", *p);
        cfg->addr_ptr[n] = cfg->addr[n];
        n++;
    }
    g_strfreev(parts);
    if (rc == 0)
        cfg->naddr = n;
    return rc;
}

/*
 * Parse s as key k's value into cfg. where names the source for the error message (a file, or
 * --set). Returns 0, or -1 after logging the group, the key, the value and what was expected;
 * cfg is then unchanged.
 */
static int set_value(struct recep_config *cfg, const char *where, const struct cfg_key *k,
                     const char *s)
{
    char *field = (char *)cfg + k->off;
    switch (k->type) {
    case CFG_U32:
    case CFG_U64:
    case CFG_OCTAL: {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 0);
        if (errno || end == s || *end != '\0' || s[0] == '-' || v < k->min || v > k->max) {
            log_error(k->type == CFG_OCTAL
                          ? "config %s: [%s] %s = \"%s\": expected an integer in 0%llo..0%llo"
                          : "config %s: [%s] %s = \"%s\": expected an integer in %llu..%llu",
                      where, k->group, k->key, s, (unsigned long long)k->min,
                      (unsigned long long)k->max);
            return -1;
        }
        if (k->type == CFG_U64)
            *(uint64_t *)field = v;
        else
            *(uint32_t *)field = (uint32_t)v;
        return 0;
    }
    case CFG_NOT: {
        bool v;
        if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0) {
            v = true;
        } else if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0) {
            v = false;
        } else {
            log_error("config %s: [%s] %s = \"%s\": expected true or false", where, k->group,
                      k->key, s);
            return -1;
        }
        *(bool *)field = !v;
        return 0;
    }
    case CFG_STR: {
        size_t len = strlen(s);
        if (len < k->min || len > k->max || len >= k->size) {
            log_error("config %s: [%s] %s = \"%s\": expected a string of %llu..%llu bytes", where,
                      k->group, k->key, s, (unsigned long long)k->min, (unsigned long long)k->max);
            return -1;
        }
        /* What the file cannot hold as written (GKeyFile strips blanks at the ends and reads
         * backslashes as escapes), so that --print-config's output reads back the same. */
        bool plain = len == 0 || (s[0] != ' ' && s[0] != '\t' && s[len - 1] != ' ' &&
                                  s[len - 1] != '\t');
        for (size_t i = 0; plain && i < len; i++)
            plain = (unsigned char)s[i] >= 0x20 && s[i] != '\\' && s[i] != 0x7f;
        if (!plain) {
            log_error("config %s: [%s] %s = \"%s\": no blanks at its ends, backslashes or "
                      "control characters", where, k->group, k->key, s);
            return -1;
        }
        memcpy(field, s, len + 1); /* length checked above */
        return 0;
    }
    case CFG_ENUM: {
        int i = choice_index(k->choices, s);
        if (i < 0) {
            log_error("config %s: [%s] %s = \"%s\": expected one of %s", where, k->group, k->key,
                      s, k->choices);
            return -1;
        }
        *(int *)field = i;
        return 0;
    }
    case CFG_ADDRS:
        return parse_addrs(cfg, where, k, s);
    }
    return -1;
}

/* Every schema default, over the engine's (nessie_config_defaults). */
static void defaults(struct recep_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    nessie_config_defaults(&cfg->engine);
    /* The daemon recycles in its own threads (recycler.c), off the workers' path. */
    cfg->engine.background_recycle = true;
    for (size_t i = 0; i < SCHEMA_LEN; i++)
        if (schema[i].def && set_value(cfg, "(schema)", &schema[i], schema[i].def) != 0)
            abort(); /* a default outside its own bounds: a bug in the table above */
}

static int load_file(struct recep_config *cfg, const char *path)
{
    GKeyFile *kf = g_key_file_new();
    GError *err = NULL;
    if (!g_key_file_load_from_file(kf, path, G_KEY_FILE_NONE, &err)) {
        log_error("config %s: %s", path, err->message);
        g_error_free(err);
        g_key_file_free(kf);
        return -1;
    }
    int rc = 0;
    gchar **gs = g_key_file_get_groups(kf, NULL);
    for (gchar **g = gs; *g && rc == 0; g++) {
        if (!schema_find(*g, NULL)) {
            log_error("config %s: unknown group [%s] (groups: cluster, optimizations, reception, "
                      "membership)",
                      path, *g);
            rc = -1;
            break;
        }
        gchar **ks = g_key_file_get_keys(kf, *g, NULL, NULL);
        for (gchar **k = ks; k && *k && rc == 0; k++) {
            const struct cfg_key *sk = schema_find(*g, *k);
            if (!sk) {
                log_error("config %s: [%s] has no key \"%s\" (see reception --print-config)", path,
                          *g, *k);
                rc = -1;
                break;
            }
            gchar *v = g_key_file_get_string(kf, *g, *k, &err);
            if (!v) {
                log_error("config %s: [%s] %s: %s", path, *g, *k, err->message);
                g_clear_error(&err);
                rc = -1;
                break;
            }
            rc = set_value(cfg, path, sk, v);
            g_free(v);
        }
        g_strfreev(ks);
    }
    g_strfreev(gs);
    g_key_file_free(kf);
    return rc;
}

/* One "GROUP.KEY=VALUE" override. */
static int load_set(struct recep_config *cfg, const char *set)
{
    const char *dot = strchr(set, '.'), *eq = strchr(set, '=');
    if (!dot || !eq || dot > eq) {
        log_error("config --set %s: expected GROUP.KEY=VALUE", set);
        return -1;
    }
    char group[32], key[64];
    if ((size_t)(dot - set) >= sizeof(group) || (size_t)(eq - dot - 1) >= sizeof(key)) {
        log_error("config --set %s: no such key (see reception --print-config)", set);
        return -1;
    }
    snprintf(group, sizeof(group), "%.*s", (int)(dot - set), set);
    snprintf(key, sizeof(key), "%.*s", (int)(eq - dot - 1), dot + 1);
    const struct cfg_key *k = schema_find(group, key);
    if (!k) {
        log_error("config --set %s: [%s] has no key \"%s\" (see reception --print-config)", set,
                  group, key);
        return -1;
    }
    return set_value(cfg, "--set", k, eq + 1);
}

/* The checks that involve more than one key. */
static int check_whole(struct recep_config *cfg, const char *where)
{
    struct nessie_config *e = &cfg->engine;
    if (e->backend == NESSIE_BACKEND_VERBS) {
        uint32_t ids = e->node_ids ? e->node_ids : e->nodes;
        if (cfg->naddr != ids) {
            log_error("config %s: [cluster] fabric = verbs needs addresses = HOST:PORT, ... with "
                      "one entry per node id (%u), found %u", where, ids, cfg->naddr);
            return -1;
        }
        e->addrs = cfg->addr_ptr;
    }
    if (e->node_ids && (e->node_ids < e->nodes ||
                        e->node_ids > NESSIE_NODE_IDS_PER_NODE_MAX * (uint64_t)e->nodes)) {
        log_error("config %s: [cluster] node_ids = %u: must be 0, or nodes (%u) to %u x nodes",
                  where, e->node_ids, e->nodes, NESSIE_NODE_IDS_PER_NODE_MAX);
        return -1;
    }
    e->device = cfg->device[0] ? cfg->device : NULL;
    const char *pct = strchr(cfg->socket_name, '%');
    if (pct && (pct[1] != 'u' || strchr(pct + 1, '%'))) {
        log_error("config %s: [reception] socket = \"%s\": %%u (the node) is the only escape",
                  where, cfg->socket_name);
        return -1;
    }
    if (cfg->arena_bytes % 8) {
        log_error("config %s: [reception] arena_bytes = %u: must be a multiple of 8", where,
                  cfg->arena_bytes);
        return -1;
    }
    if (strspn(cfg->cluster, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") !=
        strlen(cfg->cluster)) {
        log_error("config %s: [cluster] name = \"%s\": expected letters, digits, _ and - only",
                  where, cfg->cluster);
        return -1;
    }
    e->cluster = cfg->cluster;
    e->flash_path = cfg->flash_path[0] ? cfg->flash_path : NULL;
    if (e->flash_path) {
        uint32_t pb = e->flash_page_bytes;
        if (pb & (pb - 1)) {
            log_error("config %s: [flash] page_bytes = %u: must be a power of two", where, pb);
            return -1;
        }
        if (e->flash_bytes < pb || e->flash_bytes % pb) {
            log_error("config %s: [flash] bytes = %llu: must be a whole number of pages "
                      "(page_bytes = %u), at least one", where,
                      (unsigned long long)e->flash_bytes, pb);
            return -1;
        }
    }
    if (cfg->membership == RECEP_MEMBERSHIP_ETCD && !cfg->etcd_endpoints[0]) {
        log_error("config %s: [membership] mode = etcd needs endpoints = http://HOST:PORT, ...",
                  where);
        return -1;
    }
    /* The view lease against the attempt's span: members.c has the bound and why. */
    return members_config_check(cfg, where);
}

int recep_config_load(struct recep_config *cfg, const char *path, const char *const *sets)
{
    defaults(cfg);
    if (path && load_file(cfg, path) != 0)
        return -1;
    for (const char *const *s = sets; s && *s; s++)
        if (load_set(cfg, *s) != 0)
            return -1;
    return check_whole(cfg, path ? path : sets && *sets ? "--set" : "(defaults)");
}

int recep_config_for_node(struct recep_config *cfg, uint32_t node, const char *run_dir,
                          const char *socket)
{
    uint32_t ids = cfg->engine.node_ids ? cfg->engine.node_ids : cfg->engine.nodes;
    if (node >= ids) {
        log_error("config: node %u is not in the cluster ([cluster] nodes = %u, node_ids = %u)",
                  node, cfg->engine.nodes, cfg->engine.node_ids);
        return -1;
    }
    /* An id past the first members joins through a change of membership (issue 30), which is
     * agreed through the coordination service: without one it would never serve. */
    if (node >= cfg->engine.nodes && cfg->membership != RECEP_MEMBERSHIP_ETCD) {
        log_error("config: node %u is past the cluster's first members ([cluster] nodes = %u): "
                  "it joins through a change of membership (nessie-cluster add), which needs "
                  "[membership] mode = etcd", node, cfg->engine.nodes);
        return -1;
    }
    cfg->engine.self = node;
    if (run_dir)
        snprintf(cfg->run_dir, sizeof(cfg->run_dir), "%s", run_dir);
    else
        wire_run_dir(cfg->run_dir, sizeof(cfg->run_dir));
    /* The socket: --socket, else the file's (relative to the run directory, %u = node). */
    char tmp[512];
    if (socket) {
        snprintf(tmp, sizeof(tmp), "%s", socket);
    } else {
        char name[sizeof(cfg->socket_name) + 16];
        if (strchr(cfg->socket_name, '%'))
            snprintf(name, sizeof(name), cfg->socket_name, node); /* checked: one %u at most */
        else
            snprintf(name, sizeof(name), "%s", cfg->socket_name);
        if (name[0] == '/')
            snprintf(tmp, sizeof(tmp), "%s", name);
        else
            snprintf(tmp, sizeof(tmp), "%s/%s", cfg->run_dir, name);
    }
    if (strlen(tmp) >= sizeof(cfg->socket_path)) {
        log_error("config: socket path %s is longer than a Unix socket path may be (%zu)", tmp,
                  sizeof(cfg->socket_path) - 1);
        return -1;
    }
    memcpy(cfg->socket_path, tmp, strlen(tmp) + 1); /* length checked above */
    return 0;
}

/* Write text as comment lines. */
static void print_comment(FILE *out, const char *text)
{
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        fprintf(out, "# %.*s\n", (int)len, p);
        p += len;
        if (*p == '\n')
            p++;
    }
}

/* Whether key k has a value in cfg (an empty string or list is none). */
static bool has_value(const struct recep_config *cfg, const struct cfg_key *k)
{
    if (k->type == CFG_STR)
        return *((const char *)cfg + k->off) != '\0';
    if (k->type == CFG_ADDRS)
        return cfg->naddr > 0;
    return true;
}

/* Write key k's value in cfg as the file writes it. */
static void print_value(FILE *out, const struct recep_config *cfg, const struct cfg_key *k)
{
    const char *field = (const char *)cfg + k->off;
    switch (k->type) {
    case CFG_U32:
        fprintf(out, "%u", *(const uint32_t *)field);
        break;
    case CFG_U64:
        fprintf(out, "%llu", (unsigned long long)*(const uint64_t *)field);
        break;
    case CFG_OCTAL:
        fprintf(out, "0%o", *(const uint32_t *)field);
        break;
    case CFG_NOT:
        fputs(*(const bool *)field ? "false" : "true", out);
        break;
    case CFG_STR:
        fputs(field, out);
        break;
    case CFG_ENUM:
        choice_print(out, k->choices, *(const int *)field);
        break;
    case CFG_ADDRS:
        for (uint32_t i = 0; i < cfg->naddr; i++)
            fprintf(out, "%s%s", i ? ", " : "", cfg->addr[i]);
        break;
    }
}

int recep_config_print(const struct recep_config *cfg, FILE *out)
{
    print_comment(out, file_header);
    for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
        fprintf(out, "\n[%s]\n", groups[g].group);
        print_comment(out, groups[g].doc);
        for (size_t i = 0; i < SCHEMA_LEN; i++) {
            const struct cfg_key *k = &schema[i];
            if (strcmp(k->group, groups[g].group) != 0)
                continue;
            print_comment(out, k->doc);
            if (k->type == CFG_U32 || k->type == CFG_U64)
                fprintf(out, "# Range: %llu..%llu.\n", (unsigned long long)k->min,
                        (unsigned long long)k->max);
            else if (k->type == CFG_ENUM)
                fprintf(out, "# One of: %s.\n", k->choices);
            /* A key with no value is written commented out, with an example. */
            if (has_value(cfg, k)) {
                fprintf(out, "%s = ", k->key);
                print_value(out, cfg, k);
                fputc('\n', out);
            } else {
                fprintf(out, "#%s = %s\n", k->key, k->example ? k->example : "");
            }
        }
    }
    return fflush(out) == 0 && !ferror(out) ? 0 : -1;
}
