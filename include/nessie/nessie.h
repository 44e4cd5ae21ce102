/*
 * nessie/nessie.h - the Nessie engine (libnessie): a key-value store whose every operation is
 * carried out by the node that issues it, with one-sided READ / WRITE / CAS on the other nodes'
 * memory (over RDMA verbs, or shared memory on one host). The protocol is Appendix A of Cassell's thesis; the mechanisms are section
 * 4.3 of the Nessie paper.
 *
 * Objects:
 *   struct nessie_node: one per process, for the node it plays (its regions, its allocator, its
 *     recycling queues, the counters of all its contexts). Thread-safe.
 *   struct nessie_ctx: one per thread that issues operations (its fabric endpoint, its cache, its
 *     counters). Used by one thread at a time.
 *
 * Every operation returns a final outcome. Concurrent-operation aborts are retried inside the
 * engine with exponential back-off; an attempt that runs longer than one expiration period is
 * abandoned, and a call whose attempts have used up op_timeout_ms returns NESSIE_TIMEOUT.
 *
 * Outcomes are honest, under faults too: NESSIE_TIMEOUT is the only outcome whose effect is
 * unknown (the call may have taken effect, or may still be completed later by an orphan
 * takeover). Every other outcome is definite: NESSIE_OK took effect once; every error had no
 * effect, ever. In particular NESSIE_FABRIC_ERROR (a node the call needed could not be reached,
 * or a request to it failed) means the call changed nothing: a write that had already published
 * its entry took it back out (abandoned it, so that no takeover can complete it) before
 * returning it, and returns NESSIE_TIMEOUT instead when it could not make sure of that.
 */
#ifndef NESSIE_NESSIE_H
#define NESSIE_NESSIE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum nessie_status {
    NESSIE_OK = 0,       /* found / stored / deleted / touched */
    NESSIE_NOT_FOUND,    /* key absent (get, delete, incr, decr, touch, cas) */
    NESSIE_NOT_STORED,   /* add: key present; replace, append, prepend: key absent */
    NESSIE_EXISTS,       /* cas: the version does not match */
    NESSIE_NON_NUMERIC,  /* incr/decr: the value is not a number */
    NESSIE_TOO_BIG,      /* the item exceeds max_item_size; nothing changed */
    NESSIE_NO_MEMORY,    /* this node's data region has no free entry of the needed size */
    NESSIE_INDEX_FULL,   /* no index entry could be freed, even by migrating */
    NESSIE_TIMEOUT,      /* op_timeout_ms elapsed, or a fault hid the outcome: effect unknown */
    NESSIE_BAD_KEY,      /* key length not in 1..250 */
    NESSIE_INVALID,      /* bad argument */
    NESSIE_FABRIC_ERROR, /* a node it needed is unreachable; no effect */
};
#define NESSIE_STATUS_COUNT (NESSIE_FABRIC_ERROR + 1)

const char *nessie_strerror(int status);

/* Limits of a cluster's shape and of an item, fixed by the entry layouts (kvstore/memory/layout.h). */
#define NESSIE_KEY_MAX 250          /* bytes of a key: memcached's limit */
#define NESSIE_FLASH_PATH_MAX 256   /* bytes of [flash] path, its NUL included */
#define NESSIE_NODES_MAX 1024       /* nodes in a cluster: the ITE's node field */
#define NESSIE_WAYS_MIN 2           /* N of N-way cuckoo hashing */
#define NESSIE_WAYS_MAX 8
#define NESSIE_FILTER_BITS_MAX 7    /* the ITE's filter field */
#define NESSIE_DATA_BYTES_MAX (64ULL << 30) /* one node's data region: the ITE's offset field */
#define NESSIE_SD_SLOTS_MAX 64      /* a node's request ring slots per home node */

/* The fabric a cluster runs on. */
enum nessie_backend {
    NESSIE_BACKEND_SHM = 0, /* POSIX shared memory: every node a process on this host */
    NESSIE_BACKEND_VERBS,   /* RDMA verbs (rdma-core): RC queue pairs, connected with librdmacm */
};

/* The node-id capacity's ceiling per member (node_ids below): placement draws each way about
 * node_ids / members times (kvstore/memory/keys.c), so the ratio bounds a call's hashing, and at
 * 64 the chance that a way runs out of draws is below e^-64. */
#define NESSIE_NODE_IDS_PER_NODE_MAX 64

struct nessie_config {
    enum nessie_backend backend;
    const char *cluster;        /* fabric cluster name */
    const char *const *addrs;   /* verbs: each node's listener, HOST:PORT (node_ids entries) */
    const char *device;         /* verbs: the RDMA device this node's address must be on, or NULL */
    uint32_t nodes;             /* nodes in the cluster */
    uint32_t self;              /* the node this process plays */
    uint64_t index_slots;       /* ITEs per node */
    uint64_t data_bytes;        /* data region bytes per node (at most 64 GiB) */
    uint32_t ways;              /* N of N-way cuckoo hashing, 2..8 (default 3) */
    uint32_t filter_bits;       /* 0..7 (default 7); 0 disables filter bits */
    /* The largest item, counted as memcached counts it (key + value + 59 bytes, + 4 when the
     * flags are not 0), so the items memcached -I takes fit (default 1 MiB). */
    uint32_t max_item_size;
    uint32_t expiration_ms;     /* expiration period (default 100) */
    uint32_t op_timeout_ms;     /* budget of one call, retries included (0, the default: 1 s or E) */
    uint32_t migrate_depth;     /* recursive MIGRATE depth limit (default 4) */
    bool no_cache;              /* optimizations are on unless switched off (paper figure 13) */
    bool no_prev_versions;
    bool no_multi_read;
    uint32_t multi_read_bytes;  /* split a DTE read when its slot exceeds this (default 2048) */
    uint64_t cache_bytes;       /* per context (default 4 MiB) */
    uint32_t cache_entries;     /* per context (default 4096) */
    bool background_recycle;    /* true: step 7 only stages; nessie_recycle_run() marks */
    /* false: a full node refuses SETs with NESSIE_NO_MEMORY (memcached -M); true (default):
     * it evicts (nessie_evict_run, and a write that finds no room evicts on its own). Expired and
     * flushed items are reclaimed either way. */
    bool no_evict;
    /* Who carries out an operation (issue 16; nessie_ctx_set_mode overrides it per context). */
    enum nessie_mode {
        NESSIE_MODE_CD = 0, /* client-driven: the calling node, one-sided (the paper's Nessie) */
        NESSIE_MODE_SD,     /* server-driven: shipped to the key's home node (NessieSD) */
        NESSIE_MODE_HY,     /* hybrid: GETs client-driven, writes shipped (NessieHY) */
        NESSIE_MODE_AUTO,   /* per operation, the way that has lately been faster (sd.c) */
    } mode;
    /* Requests one node may have in flight to one home node at once (1..64, default 4): the
     * slots of its request ring there. Each slot holds a request and its reply inline, so the
     * MSG region costs 2 x node_ids x sd_slots x (max item, at most 1 MiB) bytes per node. */
    uint32_t sd_slots;
    /* With views (issue 28): how long a call that could not reach a node waits, at most, for the
     * view that fences it, ms; it is then run again under that view (0, the default: no views
     * will come, and such a call fails at once with NESSIE_FABRIC_ERROR). A daemon with
     * [membership] mode = etcd derives it from its lease (reception/members.c). At most 600000. */
    uint32_t view_wait_ms;
    /* Node-id capacity (issue 30): the ids 0..node_ids-1 a member of the cluster may ever have;
     * 0, the default, is nodes. Like index_slots, a constant of the cluster's life: positions
     * are drawn over it (memory/keys.c), so every node must be given the same. Nodes 0..nodes-1
     * are the members; the ids from nodes on are absent (nothing placed on them, never touched)
     * until a change of membership adds them. At most NESSIE_NODE_IDS_PER_NODE_MAX x nodes and
     * 1024. Each id costs every
     * node 2 x sd_slots x (max item) bytes of MSG region (sd_slots above); over verbs, addrs
     * has node_ids entries (NULL for an id that has no host yet). */
    uint32_t node_ids;
    /* The flash tier (issue 31; kvstore/memory/flash.h): a directory holding this node's log,
     * DIR/node<self>.flash (NULL or "", the default: no flash tier); its size, bytes (a whole
     * number of pages, at most 1 TiB); its page size (a power of two, 64 KiB..2 MiB; default
     * 1 MiB), the unit of its writes and of its compaction; and the smallest value demoted to it
     * (default 512, as memcached's ext_item_size: a smaller value costs little memory, and a
     * flash read costs it more than it saves). Only the daemon that owns the node opens it.
     * flash_promote_ms: an item read from the log twice within this many ms is brought back
     * into memory (promoted, as memcached's extstore recaches what is read again, by another
     * rule; default 10000, at most an hour; 0: never; never with no_evict either), so a hot
     * key, once demoted, is not read from flash on every GET. */
    const char *flash_path;
    uint64_t flash_bytes;
    uint32_t flash_page_bytes;
    uint32_t flash_item_min;
    uint32_t flash_promote_ms;
};

/* Fill cfg with the defaults above (cluster, nodes, self and sizes still to be set). */
void nessie_config_defaults(struct nessie_config *cfg);

/* Counters of one kind of operation (index by enum nessie_opkind). */
enum nessie_opkind {
    NESSIE_OPK_GET = 0,
    NESSIE_OPK_PUT,     /* set, add, replace, cas, append, prepend, incr, decr, touch */
    NESSIE_OPK_DELETE,
    NESSIE_OPK_MIGRATE,
    NESSIE_OPK_EVICT,   /* the owner's removals of victims and of expired or flushed items */
    NESSIE_OPK_COUNT
};

enum nessie_abort {
    NESSIE_ABORT_INVALID_DTE = 0, /* met an in-progress entry */
    NESSIE_ABORT_CAS_FAILED,      /* lost a CAS race */
    NESSIE_ABORT_REVERSE_PASS,    /* an ITE changed under the operation */
    NESSIE_ABORT_TIMEOUT,         /* an attempt outlived one expiration period */
    NESSIE_ABORT_MIGRATE,         /* the migrate it needed failed */
    NESSIE_ABORT_MEMORY,          /* no free entry yet: waited for recycled ones to expire */
    NESSIE_ABORT_COUNT
};

/* Per-call distributions of fabric traffic (the paper's figures 8 to 11 are their CDFs): bin i of
 * ops_hist counts calls that posted i fabric requests (the last bin: that many or more); bin i of
 * bytes_hist counts calls that moved [2^(i-1), 2^i) bytes over the fabric (bin 0: none). A call's
 * traffic is what its thread's endpoint posted between the call's start and its end, so a PUT's
 * includes the MIGRATEs it ran; DTEs the node reads from its own memory are not fabric traffic. */
#define NESSIE_HIST_OPS 24
#define NESSIE_HIST_BYTES 28

struct nessie_op_counters {
    uint64_t ops;                 /* calls */
    uint64_t attempts;            /* attempts (ops + retries) */
    uint64_t ite_reads, dte_reads, writes;
    uint64_t cas, cas_failed;     /* on ITEs */
    uint64_t dte_cas;             /* on DTE state words: commits and takeovers */
    uint64_t bytes_read, bytes_written;
    uint64_t local_dte_reads;     /* DTEs read from this node's own memory, not the fabric */
    uint64_t cache_hits, cache_misses;
    uint64_t prev_version_hits;
    uint64_t lost_entries;        /* entries met whose value was on a node lost from the view */
    uint64_t aborts[NESSIE_ABORT_COUNT];
    uint64_t outcomes[NESSIE_STATUS_COUNT];
    uint64_t ops_hist[NESSIE_HIST_OPS];
    uint64_t bytes_hist[NESSIE_HIST_BYTES];
};

struct nessie_counters {
    struct nessie_op_counters op[NESSIE_OPK_COUNT];
    uint64_t migrations, recursive_migrations;
    uint64_t takeovers;           /* orphaned entries completed by another operation */
    uint64_t view_waits;          /* calls that waited for a view (issue 28): for their node's
                                     view lease to be renewed, or for a view to fence a node
                                     they could not reach */
    uint64_t replans;             /* attempts that planned their key again: a change of
                                     membership took a step since the call's plan (issue 30) */
    uint64_t move_evicted;        /* leaving entries a change's mover found no room for at
                                     their arriving positions (or no memory for the copy, with
                                     eviction off): evicted instead (issue 30) */
    uint64_t staged, marked, freed; /* recycling pipeline */
    uint64_t swept;               /* leaked DTEs found by the sweep and recycled */
    uint64_t scanned;             /* slots the recycle scan visited (the node's, in
                                     nessie_node_counters only; allocations' own scans too) */
    /* Eviction and reclamation, with memcached's meanings (stats): */
    uint64_t evictions;           /* live items removed to make room */
    uint64_t evicted_unfetched;   /* ... that nobody had read since they were written */
    uint64_t reclaimed;           /* expired or flushed items removed, their memory reused */
    uint64_t expired_unfetched;   /* ... that nobody had read */
    uint64_t evict_skipped;       /* victims that changed or were in use when their turn came */
    uint64_t moves_undone;        /* MIGRATEs undone after a lost answer: the item is gone, as if
                                     evicted (migrate.c, step 7) */
    /* Server-driven execution (sd.c), on the requesting node and on the home node: */
    uint64_t sd_shipped[NESSIE_OPK_COUNT]; /* operations shipped to their home node */
    uint64_t sd_no_reply;         /* ... whose reply did not come in time (a write: TIMEOUT;
                                     a GET: run here after all) */
    uint64_t sd_served;           /* requests this node executed for its peers */
    uint64_t sd_dropped;          /* requests dropped as garbage (corrupt, torn, malformed) */
    uint64_t sd_auto[2];          /* mode auto's choices: [0] client-driven, [1] shipped */
    uint64_t sd_queue_ns;         /* served requests' waits in the ring, summed (ns) */
    uint64_t sd_withdrawn;        /* shipped calls no server took up in time: withdrawn, run here */
    uint64_t sd_shunned;          /* calls run here, not shipped: their home's servers looked
                                     dead or stalled (their heartbeat stood still) */
    uint64_t sd_expired;          /* requests a server took up after their budget: not run */
    uint64_t sd_helped;           /* ... of sd_served, GETs answered by a helper context while
                                     it waited for its own shipped call (nessie_sd_help) */
    /* Placement (issue 29): stores this node's clients made while it was full, stored by a peer
     * with room (and their value bytes); and stores stored here for peers that were full. */
    uint64_t placed, placed_bytes;
    uint64_t placed_in, placed_in_bytes;
    /* The flash tier (issue 31): */
    uint64_t flash_demoted;       /* victims written to the flash log instead of dropped */
    uint64_t flash_dropped;       /* flash items taken out of the index: their page dropped for
                                     room, or met where they could not stay (a MIGRATE or a
                                     change of membership that cannot read another node's) */
    uint64_t flash_hits;          /* GETs answered from this node's flash log */
    uint64_t flash_shipped;       /* calls sent to the node whose flash item they met */
    uint64_t flash_compacted;     /* sparse pages compaction emptied and freed */
    uint64_t flash_rescued;       /* flash items it moved to another page (their entry swung) */
    uint64_t flash_promoted;      /* flash items a GET brought back into memory (promotion) */
    /* The fabric traffic of the calls this node ran for its peers, per call as ops_hist and
     * bytes_hist (those count only this node's own clients' calls, a shipped one as the
     * request's WRITE and the reply's): what server-driven execution costs on the home node. */
    uint64_t sd_served_ops_hist[NESSIE_OPK_COUNT][NESSIE_HIST_OPS];
    uint64_t sd_served_bytes_hist[NESSIE_OPK_COUNT][NESSIE_HIST_BYTES];
};

struct nessie_node;
struct nessie_ctx;

/*
 * Open node cfg->self: create and format its regions, or re-attach them (a restart) and rebuild
 * its free lists from what they hold. Returns NESSIE_OK and *out, or an error (logged) and
 * nothing.
 */
int nessie_node_open(const struct nessie_config *cfg, struct nessie_node **out);
/* Close; contexts must be destroyed first. The regions stay, so a later nessie_node_open of the
 * same node re-attaches them (a restart keeps the node's data). */
void nessie_node_close(struct nessie_node *node);
/*
 * Remove node cfg->self's regions (of cfg->backend and cfg->cluster; nothing else of cfg is
 * read), so its data is gone and the next open creates them afresh. Call it on a closed node.
 * Returns NESSIE_OK, also when there was nothing to remove; NESSIE_INVALID for a bad cluster
 * name or node; NESSIE_FABRIC_ERROR (logged) when a region could not be removed.
 */
int nessie_node_unlink(const struct nessie_config *cfg);
const struct nessie_config *nessie_node_config(const struct nessie_node *node);

int nessie_ctx_create(struct nessie_node *node, struct nessie_ctx **out);
void nessie_ctx_destroy(struct nessie_ctx *ctx);
/* The node a context was created on. */
struct nessie_node *nessie_ctx_node(const struct nessie_ctx *ctx);
/* This context's counters (cumulative since creation). */
const struct nessie_counters *nessie_ctx_counters(const struct nessie_ctx *ctx);
/* Sum of the counters of every context ever created on node (destroyed ones included). */
void nessie_node_counters(struct nessie_node *node, struct nessie_counters *out);

/* An item as returned by a read. value points into the context's buffer, valid until the next
 * operation on that context. */
struct nessie_item {
    const void *value;
    uint32_t value_len;
    uint32_t flags;
    uint32_t exptime;   /* absolute Unix seconds, 0 = never */
    uint64_t version;   /* memcached CAS token */
    uint32_t access;    /* its reads as this read found them: nessie_item_fetched, _idle_s */
    uint32_t meta;      /* NESSIE_META_* */
};

/* An item's marks for memcached's meta protocol (its stale-while-revalidate). */
#define NESSIE_META_STALE 0x1      /* invalidated (nessie_invalidate): still served, marked stale */
#define NESSIE_META_TOKEN 0x2      /* a reader won the right to refresh it (nessie_token_take) */
#define NESSIE_META_KEY_BINARY 0x4 /* its key was given in base64 by the client that stored it */
#define NESSIE_META_MASK 0x7

/* Whether the item had been read since it was written, before the read that returned it
 * (memcached's "fetched" bit: meta h, me). */
bool nessie_item_fetched(const struct nessie_item *it);
/* Seconds since the item was last read, or written when it never was, before the read that
 * returned it (memcached's last access: meta l, me's la); as coarse as the reads' record, a
 * fifteenth of a second, and the hosts' clocks. */
uint32_t nessie_item_idle_s(const struct nessie_item *it);

enum nessie_store_mode {
    NESSIE_SET = 0,
    NESSIE_ADD,       /* only if absent */
    NESSIE_REPLACE,   /* only if present */
    NESSIE_CAS,       /* only if present with version == cas */
    NESSIE_APPEND,    /* value := old + value, old flags and exptime kept */
    NESSIE_PREPEND,   /* value := value + old */
};

/* exptime arguments follow memcached: 0 never; <= 30 days: seconds from now; else Unix time;
 * negative: already expired. */

int nessie_get(struct nessie_ctx *ctx, const void *key, size_t key_len, struct nessie_item *out);

/*
 * nessie_get, with a buffer of the caller's (cap bytes) for the value: a value read in a READ of
 * its own (an entry larger than multi_read_bytes, paper 4.3.2) that fits, and that is not going
 * into the context's cache (the cache is never filled from the caller's memory), is read
 * straight into buf, and out->value is buf; otherwise out->value points into the context's
 * buffer or cache, as for nessie_get (compare out->value with buf). buf's bytes are unspecified
 * on any other outcome. Saves a copy of large values (the daemon passes its channel's arena).
 */
int nessie_get_into(struct nessie_ctx *ctx, const void *key, size_t key_len, void *buf,
                    size_t cap, struct nessie_item *out);

/*
 * Multi-get: GETs of n keys, several in flight on the fabric at once (their first index reads go
 * out as one batch). done(user, i, status, item) is called for every key, in order; item is NULL
 * unless status is NESSIE_OK, and valid only during the call. Each GET is linearizable on its
 * own; the set of them is not one atomic read (nor is memcached's). Returns NESSIE_OK, or
 * NESSIE_INVALID for bad arguments (then nothing is called).
 */
typedef void (*nessie_multi_fn)(void *user, size_t i, int status, const struct nessie_item *item);
int nessie_get_multi(struct nessie_ctx *ctx, size_t n, const void *const *keys,
                     const size_t *lens, nessie_multi_fn done, void *user);
/* The same with a buffer per key for its value, as nessie_get_into (bufs[i] may be NULL). */
int nessie_get_multi_into(struct nessie_ctx *ctx, size_t n, const void *const *keys,
                          const size_t *lens, void *const *bufs, const size_t *caps,
                          nessie_multi_fn done, void *user);

/* On NESSIE_OK sets *version_out (if not NULL) to the stored item's new version. */
int nessie_store(struct nessie_ctx *ctx, enum nessie_store_mode mode, const void *key,
                 size_t key_len, const void *value, size_t value_len, uint32_t flags,
                 int64_t exptime, uint64_t cas, uint64_t *version_out);

/*
 * nessie_store, with marks for memcached's meta protocol: the new item carries meta's
 * NESSIE_META_TOKEN and NESSIE_META_KEY_BINARY bits (a vivified item is created with its token
 * taken; a key given in base64 is remembered so). NESSIE_META_STALE asks, in NESSIE_CAS mode
 * only, that a cas older (lower) than the item's store the value all the same, marked stale,
 * with the item's expiry and token kept (memcached's ms with I). NESSIE_INVALID for other bits.
 * Unlike nessie_store, whose append and prepend ignore cas, here they compare it when it is
 * not 0 (NESSIE_EXISTS: another version), as memcached's ms with C and MA or MP.
 */
int nessie_store_meta(struct nessie_ctx *ctx, enum nessie_store_mode mode, const void *key,
                      size_t key_len, const void *value, size_t value_len, uint32_t flags,
                      int64_t exptime, uint64_t cas, uint32_t meta, uint64_t *version_out);
/* Invalidate (memcached's md with I): the item stays, marked NESSIE_META_STALE, its token
 * cleared, a new version; its expiry becomes exptime if set_exptime. Only if its version is cas
 * (0: any): NESSIE_EXISTS otherwise; NESSIE_NOT_FOUND when absent. */
int nessie_invalidate(struct nessie_ctx *ctx, const void *key, size_t key_len, uint64_t cas,
                      bool set_exptime, int64_t exptime);
/* Take the item's token (memcached's win, W): set NESSIE_META_TOKEN on the item read at
 * version, version and all else kept. NESSIE_OK: this caller won; NESSIE_EXISTS: someone took
 * it first, or the item changed; NESSIE_NOT_FOUND: absent; NESSIE_INVALID: version 0. Exactly
 * one caller wins a version; NESSIE_TIMEOUT leaves the outcome unknown (read the item again). */
int nessie_token_take(struct nessie_ctx *ctx, const void *key, size_t key_len, uint64_t version);

int nessie_delete(struct nessie_ctx *ctx, const void *key, size_t key_len);
/* nessie_delete, only if the item's version is cas (0: any, as nessie_delete): NESSIE_EXISTS
 * when it is another, and nothing is deleted (memcached's meta delete with C). */
int nessie_delete_cas(struct nessie_ctx *ctx, const void *key, size_t key_len, uint64_t cas);

/* incr (incr=true) or decr by delta; on NESSIE_OK sets *result and *version_out (if not NULL). */
int nessie_arith(struct nessie_ctx *ctx, const void *key, size_t key_len, bool incr,
                 uint64_t delta, uint64_t *result, uint64_t *version_out);
/* nessie_arith, only if the item's version is cas (0: any): NESSIE_EXISTS when it is another,
 * and nothing changes (memcached's meta arithmetic with C). */
int nessie_arith_cas(struct nessie_ctx *ctx, const void *key, size_t key_len, bool incr,
                     uint64_t delta, uint64_t cas, uint64_t *result, uint64_t *version_out);

int nessie_touch(struct nessie_ctx *ctx, const void *key, size_t key_len, int64_t exptime);

/*
 * Server-driven execution (issue 16). A context whose mode (nessie_config.mode, or the override
 * below) ships an operation sends it, with a one-sided WRITE, into a slot of its home node's
 * request ring (the node of the key's first candidate slot: keys are partitioned among nodes as
 * in NessieSD), and waits for the reply, which the home node WRITEs back into this node's MSG
 * region. The home node runs the same protocol on the same tables, so shipped and client-driven
 * operations on the same keys interleave linearizably. Operations on keys whose home is this
 * node, multi-gets' keys one by one, and items larger than a ring slot (1 MiB) run here.
 * A shipped call carries what is left of its budget, and its home node runs it within that; one
 * that no server takes up promptly (its server stalled, busy with a slow call, or dead) is
 * withdrawn and runs on the calling node instead, as do the next calls to a node whose servers
 * stopped looking at their rings. Outcomes stay honest: a shipped write that a server took up
 * but whose reply did not come within its budget is NESSIE_TIMEOUT.
 */
void nessie_ctx_set_mode(struct nessie_ctx *ctx, enum nessie_mode mode);
enum nessie_mode nessie_ctx_mode(const struct nessie_ctx *ctx);
/* "cd", "sd", "hy", "auto"; parse returns false on anything else.
 *
 * Mode auto is Cell's locality selector (its section 4.2) for Nessie: per home node, kind of
 * operation (GET, write) and size of value, the node keeps a moving average of how long the
 * calls of each way took (measured by the caller: a home node whose server thread is starved
 * of CPU cannot measure its own delay), runs each call the way whose average is lower, and
 * explores the other way once its average has gone stale (100 ms times the ratio of the
 * averages, at most a second), so it follows a change of load on either side within about a
 * second. Keys at home on the
 * calling node, and multi-gets, run client-driven. */
const char *nessie_mode_name(enum nessie_mode mode);
bool nessie_mode_parse(const char *s, enum nessie_mode *out);

/*
 * Serve requests peers shipped to this node: scan the request slots that belong to server
 * `worker` of `workers` (slot i belongs to worker i % workers, always the same one, and is
 * served by one thread at a time, it or a helper (nessie_sd_help), so each slot's requests run
 * in order and one reply at a time), execute every new request with ctx as
 * a client-driven operation, and WRITE its reply. A request that is malformed or whose checksum
 * does not match is waited for a moment (a WRITE still landing) and then dropped, counted and
 * logged; it never reaches the tables. A request runs only if this server takes it up before its
 * requester withdraws it, and only within the budget it carried, counted from when this server
 * first saw it; one whose budget is spent is answered as expired, not run. Returns the number of
 * requests answered (0: the caller may wait). The daemon's SD server threads call this in a
 * loop; never blocks.
 */
size_t nessie_sd_serve(struct nessie_ctx *ctx, uint32_t worker, uint32_t workers);

/*
 * Sleep until a peer ships a request to this node, or timeout_ns passed, whichever is first:
 * where the fabric has doorbells (shm: a requester rings the home node's after its request
 * landed), the request wakes the sleeper; over verbs this sleeps the whole timeout. Returns at
 * once if a request is waiting already. For the threads that call nessie_sd_serve, between
 * passes that found nothing. Never fails.
 */
void nessie_sd_nap(struct nessie_ctx *ctx, uint64_t timeout_ns);
/* Whether a request ends nessie_sd_nap's sleep on this node's fabric (shm), or only its
 * timeout does (verbs). */
bool nessie_sd_nap_rings(const struct nessie_node *nd);

/*
 * Answer at most one GET a peer shipped to this node, from any slot no server is serving at this
 * moment, with ctx (a context no call is running on), as nessie_sd_serve would (the same
 * take-up, budget and checks). Only GETs: each runs within a read of the tables or of the flash
 * log, so a thread may help between its own steps without holding them up for long. A slot is
 * served by one thread at a time, so its requests still run in order. Returns 1 if it answered
 * one, else 0. Never blocks; never ships a call on.
 */
size_t nessie_sd_help(struct nessie_ctx *ctx);

/* GETs the node's helpers have answered since it opened (a count that only grows): the SD
 * servers' measure of requests that came while they napped. Never fails. */
uint64_t nessie_sd_helped(const struct nessie_node *nd);

/*
 * Let ctx's waits for the replies of its shipped calls (modes sd, hy, auto, and flash reads)
 * serve peers' shipped GETs with helper (nessie_sd_help): a thread waiting for a peer is awake,
 * and a request it answers at once does not wait out a napping server. helper: another context
 * of the same node, used by ctx's thread only, never a helper's own; NULL: none. Returns
 * NESSIE_OK, or NESSIE_INVALID for a helper of another node, ctx itself or a context that has
 * a helper.
 */
int nessie_ctx_set_sd_helper(struct nessie_ctx *ctx, struct nessie_ctx *helper);

/* flush_all: every item written before this call reads as absent afterwards, on every node.
 * Nodes that cannot be reached learn it when they return (nessie_flush_catch_up), before they
 * serve. Returns NESSIE_OK, or NESSIE_FABRIC_ERROR if no node at all could be reached. */
int nessie_flush(struct nessie_ctx *ctx);

/* flush_all N (memcached): at the time exptime names (seconds from now up to 30 days, else a
 * unix time), every item written before that time reads as absent; items written after it
 * stay. Until then nothing changes. A later flush_all, delayed or not, replaces a pending one
 * (the last one wins, as in memcached); one whose time has come stays in effect. exptime <= 0,
 * or a time already past, is nessie_flush. Returns as nessie_flush. */
int nessie_flush_delayed(struct nessie_ctx *ctx, int64_t exptime);

/* A (re)started node adopts the latest flush any reachable peer knows of. Call before serving. */
void nessie_flush_catch_up(struct nessie_ctx *ctx);

/*
 * Recycling, off the critical path (the daemon's recycler threads call this in a loop):
 * marks staged DTEs (recycle bit + expiry), and returns this node's expired recycled DTEs to the
 * free lists by scanning up to scan_slots slots. Returns how many DTEs it freed or marked.
 */
size_t nessie_recycle_run(struct nessie_ctx *ctx, size_t scan_slots);

/*
 * Take what a view change left behind out of this node's index (issue 28), looking at up to
 * scan_slots index slots from where the last run stopped: entries whose values were on a node
 * lost from the view (fenced), and, in the pass after a view readmitted a node, orphans (entries
 * whose key no longer looks at their position). Each is emptied by CAS on the word read, so one
 * a call changed meanwhile stays. One pass over the index per change of the fence: without one,
 * or once the pass is over, it returns at once. The daemon's recycler calls it, from one thread
 * (runs on one node must not overlap). Never waits for a view (a run under an expired view lease
 * stops where it is). Returns how many entries it emptied.
 */
size_t nessie_scrub_run(struct nessie_ctx *ctx, size_t scan_slots);
/* How many changes of the fence (fences put up, readmissions) this node's scrub has finished a
 * pass for: its index names nothing of a node fenced by then, and holds no orphan of a
 * readmission by then. Whoever agrees views waits for every live member's before readmitting a
 * node, and before acting on a view that fences a node readmitted earlier. One atomic load. */
uint32_t nessie_scrub_done(const struct nessie_node *node);
/*
 * Move a change of membership's leaving entries out of this node's index (issue 30): in the
 * change's move phase, one pass over the index, looking at up to scan_slots slots from where the
 * last run stopped; each entry at a position its key's plan says is leaving is MIGRATEd to one of
 * the key's arriving positions. The caller starts it only once the phase allows (membership.h in
 * kvstore, "Changes": no attempt under the announce phase's policy, nor one that ran alongside
 * one, can still act), runs it from one thread, and commits the change only after every member's
 * pass is over. Stops at an entry it cannot judge yet and starts there next time. Returns how
 * many entries it moved.
 */
size_t nessie_move_run(struct nessie_ctx *ctx, size_t scan_slots);
/* Whether this node's pass for the change in progress is over (false outside a move phase). */
bool nessie_move_over(const struct nessie_node *node);
/* Index slots this node's pass has still to look at (0 when none is owed), and entries it has
 * moved ever. One or two atomic loads. */
uint64_t nessie_move_left(const struct nessie_node *node);
uint64_t nessie_moved(const struct nessie_node *node);

/* How many changes of the fence this node has installed (what nessie_scrub_done counts up to).
 * One atomic load. */
uint32_t nessie_fence_changes(const struct nessie_node *node);

/*
 * Find this node's DTEs that nothing references any more and that nobody will recycle: their
 * writer died before publishing them, or the operation that unlinked them died with its staged
 * recycling (a daemon killed mid-operation), or a takeover completed an operation whose
 * recycling list died with it. Such a DTE is recycled only once it has stayed unreferenced and
 * unmarked across two sweeps at least one grace period apart, so a live operation, which marks
 * what it unlinked well within that time, is never raced. An entry is judged by reading the
 * index entries at its key's positions (and the entries they name), so a node that is down only
 * leaves undecided the entries that need it; the rest are recycled. Run it now and then (a
 * recycler thread), not per operation. Returns how many DTEs it recycled.
 */
long nessie_sweep_leaks(struct nessie_ctx *ctx);
/* The call bound, ms: the longest after its start that anything a call did can still take effect
 * (its budget, the wait for room a write may add, its last attempt, the fabric's longest request;
 * and with views, the wait for a view, view_wait_ms: kvstore/front/engine.c derives it). */
uint64_t nessie_node_call_bound_ms(const struct nessie_node *node);
/* The grace period, ms: the bound of one run of a call (the call bound less the wait for a view,
 * after which a call runs again as a new operation) plus one expiration period. An orphan is
 * taken over, and a leak recycled by a sweep, only that long after its creation. */
uint64_t nessie_node_grace_ms(const struct nessie_node *node);
/* The fabric's request bound, ms: how long after its post a request may still land (0 on shm;
 * the NIC's retry limit over verbs). Whoever agrees views delays acting on a fencing view by it
 * (kvstore/membership/membership.h, "Acting on a view"). */
uint64_t nessie_node_request_bound_ms(const struct nessie_node *node);

/*
 * Membership (issue 28): the cluster's view, an epoch and its members, agreed outside the engine
 * (the daemon's reception/members.c, through etcd) and installed here. Epoch 0 is no view:
 * static membership, as before views. A member GONE in an installed view is fenced for the
 * life of this node: its memory is never touched again, the index positions it held are drawn
 * again on live nodes (only those move), and entries whose value lived there read as misses
 * (their room is taken back by writes that need it). A node whose own view fences it serves
 * nothing: its calls return NESSIE_FABRIC_ERROR. A fenced node is readmitted by a view that
 * shows it LIVE at a newer incarnation (it came back with new tables): see
 * kvstore/membership/membership.h, "Rejoin", for what must come first.
 */
#define NESSIE_VIEW_MEMBERS_MAX NESSIE_NODES_MAX
enum nessie_member_state {
    NESSIE_MEMBER_LIVE = 0, /* holds a lease: serves its positions */
    NESSIE_MEMBER_GONE,     /* its lease lapsed: nothing of its incarnation is read again */
};
struct nessie_view_member {
    uint32_t node;                  /* 0..NESSIE_NODES_MAX-1 */
    enum nessie_member_state state;
    uint64_t incarnation;           /* the member's nessie_node_incarnation() */
};
struct nessie_view {
    uint64_t epoch;                 /* > 0 for an installed view; only ever increases */
    uint32_t nmembers;
    struct nessie_view_member members[NESSIE_VIEW_MEMBERS_MAX]; /* by node, increasing */
};
/*
 * Install view (copied) as this node's current view, if it is well formed (epoch > 0, at most
 * NESSIE_VIEW_MEMBERS_MAX members in strictly increasing node order, known states), newer
 * than the current one, and shows no fenced member LIVE at the incarnation it was fenced in or
 * an older one; fence its GONE members, readmit its fenced members LIVE at a newer incarnation.
 * Returns NESSIE_OK; NESSIE_INVALID (NULL, malformed, or reviving a fenced life) or NESSIE_EXISTS
 * (its epoch is not newer than the current view's: views only move forward), and then nothing
 * changed. Thread-safe; never touches the fabric and never blocks on anything but other threads'
 * reads of the view.
 */
int nessie_view_install(struct nessie_node *node, const struct nessie_view *view);

/*
 * Changes of membership (issue 30): node id added to the cluster (a joining node, absent until
 * now, or this node itself when it is the one joining) or retired from it (a member other than
 * this node), online. Whoever agrees views steps every member through the phases in order,
 * announce then move, and commits the change once every member's mover pass is over; the waits
 * between them are in kvstore/membership/membership.h, "Changes", and model/elastic.pml. A phase
 * is acted on when it is set. Returns NESSIE_OK, or NESSIE_INVALID (a change that does not fit the
 * cluster as it is, another change in progress, a phase going back; no change to commit), and
 * then nothing changes.
 */
enum nessie_change_kind {
    NESSIE_CHANGE_ADD = 1,
    NESSIE_CHANGE_RETIRE = 2, /* refused (NESSIE_INVALID) until its relocation of the retired
                                 node's values exists */
};
enum nessie_change_phase { NESSIE_CHANGE_ANNOUNCE = 1, NESSIE_CHANGE_MOVE = 2 };
int nessie_change_set(struct nessie_node *node, uint32_t id, enum nessie_change_kind kind,
                      enum nessie_change_phase phase);
int nessie_change_commit(struct nessie_node *node);
/* The change in progress: NESSIE_OK with *id, *kind and *phase, NESSIE_NOT_FOUND when none is,
 * NESSIE_INVALID for a NULL argument (nothing written then). Any thread; one atomic load. */
int nessie_change_get(const struct nessie_node *node, uint32_t *id, enum nessie_change_kind *kind,
                      enum nessie_change_phase *phase);
/* The cluster's placed members as its coordination service records them after its last
 * committed change (a daemon's start, before it serves): placed[i] for every id below the
 * node-id capacity; every other id is absent, this node included when it has not been added yet
 * (joining: it serves no call). Returns NESSIE_OK, or NESSIE_INVALID (NULL, no member placed, or
 * a change in progress), and then nothing changes. */
int nessie_members_placed(struct nessie_node *node, const bool *placed, uint32_t n);
/* Copy this node's current view into *out, consistently (never half of one view and half of
 * another), from any thread. Returns NESSIE_OK, or NESSIE_INVALID for NULL arguments (nothing
 * written). Before any install: epoch 0, no members. */
int nessie_view_get(struct nessie_node *node, struct nessie_view *out);
/* The current view's epoch (0: none), without a lock: one atomic load. */
uint64_t nessie_view_epoch(const struct nessie_node *node);
/*
 * The view's lease: the installed view may be acted on until valid_until_ns (CLOCK_MONOTONIC),
 * vouched for by whoever agrees views (the daemon renews it after every read of the service that
 * found no newer view). Once given, a lease is in force for the node's life: a protocol attempt
 * starts only if it posts its last request (an expiration period later) before the lease
 * does, and otherwise waits for a renewal, so a node cut off from the service stops acting on a
 * view that may no longer be current (kvstore/membership/membership.h, "Acting on a view"). An
 * end earlier than the current one changes nothing. Never blocks.
 */
void nessie_view_renew(struct nessie_node *node, uint64_t valid_until_ns);
/*
 * A view that fences member has been read but is not acted on yet (it is installed a view lease
 * later: kvstore/membership/membership.h): from now on this node touches nothing of member's
 * memory, so its calls that need member fail with NESSIE_FABRIC_ERROR (and, with view_wait_ms,
 * wait for the view), while the others go on under the current view. Returns NESSIE_OK, or
 * NESSIE_INVALID for a member id out of range. Never blocks.
 */
int nessie_view_suspend(struct nessie_node *node, uint32_t member);
/*
 * A view that readmits member (fenced, back with new tables) has been read but is not acted on
 * yet (installed a view lease later, as a fencing view): from now on the positions that were
 * drawn elsewhere while member was fenced go back to it, fenced still, so this node's calls that
 * need them fail with NESSIE_FABRIC_ERROR (and, with view_wait_ms, wait for the view) while the
 * others go on (kvstore/membership/membership.h, "Rejoin"). Returns NESSIE_OK, or NESSIE_INVALID
 * for a member id out of range. Never blocks.
 */
int nessie_view_rejoin(struct nessie_node *node, uint32_t member);
/* This node's incarnation: bumped every time its tables are opened, a restart included, so a
 * daemon's registration in a view names one life of the node. Never fails. */
uint64_t nessie_node_incarnation(const struct nessie_node *node);

/*
 * Eviction and reclamation by this node, the owner of its data region (the only node that
 * allocates from it; the daemon's recycler threads call this in a loop, and a write that finds
 * no room evicts on its own too). Keeps every size class's free slots, plus those waiting out
 * their expiration period, above what the class's recent allocation rate consumes in one
 * period (freed slots come back only one period after they are unlinked): below that, victims
 * are chosen by sampling a few of the class's items and scoring them by their read count and
 * the time of their last read (the access hint readers record), and removed through the DELETE
 * path with a CAS on exactly the victim's index entry, so an item written or moved meanwhile is
 * never removed in its place. Expired and flushed items go first, and a crawl removes them in the
 * background whether memory is short or not. Does nothing but that crawl when cfg.no_evict, or
 * while the region has unassigned pages. Returns how many items it removed.
 */
size_t nessie_evict_run(struct nessie_ctx *ctx, size_t max_victims);

/*
 * Called on a writer's thread when a write finds no room in this node's region (eviction on),
 * at most once per 50 us: the thread that runs nessie_evict_run should wake now rather than at
 * the end of its nap, since the writer waits for it. fn must only wake a thread (it runs on the
 * critical path). Install it before writers start, the node's own background threads included
 * (a recycler's moves write); NULL removes it, once they have stopped.
 */
typedef void (*nessie_pressure_fn)(void *arg);
void nessie_node_on_pressure(struct nessie_node *node, nessie_pressure_fn fn, void *arg);

/*
 * Dump (memcached_dump, memcached's `stats cachedump`): call fn(user, key, key_len) for the key
 * of each live item in THIS node's data region: a committed value, not expired, not flushed, not
 * on its way to recycling, that the key's index entries name as the key's value now (the first
 * of the key's N entries that holds the key names it, or names a write in progress whose previous
 * version it is: what a GET would read), so the older versions of a key a node still holds are
 * never listed. A node holds the values written through it (a PUT writes its value on the
 * writing node; a MIGRATE's copy on the migrating one; a shipped write on the key's home node).
 *
 * The walk is resumable, in slot order: *cursor is where it starts (0: the region's start) and,
 * on return, where the next call goes on, 0 once the whole region is done. A call examines at
 * most max_slots slots (0: no limit), so a caller can bound the time one call takes, and stops
 * early when fn returns false: that key is offered again by the next call. No lock is held
 * across fn or between calls (the allocator's is taken once per call, for one load), so writers
 * go on meanwhile; a key written during a dump may be missed, or listed twice (its new entry on
 * the other side of the cursor, like SCAN in Redis); a key left alone is listed exactly once.
 *
 * Judging an item reads its key's N index entries (and the entries they name when their filter
 * bits match), on whichever nodes hold them; an item that needs an unreachable node is left out,
 * the walk goes on, and the call returns NESSIE_FABRIC_ERROR (the keys it listed stand). Returns
 * NESSIE_OK, or NESSIE_INVALID (NULL arguments, or a cursor past the region: nothing called).
 * Never changes an entry, and counts in no operation's counters (it is not an operation).
 */
typedef bool (*nessie_dump_fn)(void *user, const void *key, size_t key_len);
int nessie_dump_local(struct nessie_ctx *ctx, uint64_t *cursor, size_t max_slots,
                      nessie_dump_fn fn, void *user);
/* nessie_dump_local, over the slots of one size class only (cls, as nessie_class_usage numbers
 * them; -1: all), with each item's header as it was judged (it->value is NULL; no access is
 * recorded and no operation counted: memcached's `stats cachedump` reads nothing either). */
typedef bool (*nessie_dump_item_fn)(void *user, const void *key, size_t key_len,
                                    const struct nessie_item *it);
int nessie_dump_class(struct nessie_ctx *ctx, int cls, uint64_t *cursor, size_t max_slots,
                      nessie_dump_item_fn fn, void *user);

/* Live items and their bytes (header, key and value) in this node's data region, as of the
 * last full pass of the recycle scan (memcached's curr_items and bytes). */
void nessie_data_usage(struct nessie_node *node, uint64_t *items, uint64_t *bytes);
/* Of those, the values this node holds for the clients of peers that were full (placed here,
 * issue 29), and their bytes, the same way. */
void nessie_data_placed(struct nessie_node *node, uint64_t *items, uint64_t *bytes);

/* This node's flash tier (issue 31), as memcached's extstore counts its own where the meaning
 * is the same (the names in comments are the stats' names). */
struct nessie_flash_stats {
    uint64_t limit_bytes;     /* extstore_limit_maxbytes: the log's size */
    uint64_t page_bytes;      /* extstore_page_size */
    uint64_t pages_free;      /* extstore_pages_free */
    uint64_t pages_used;      /* extstore_pages_used: written, or being filled */
    uint64_t bytes_used;      /* extstore_bytes_used: bytes of records not unlinked */
    uint64_t bytes_fragmented;/* extstore_bytes_fragmented: of written pages, unlinked bytes */
    uint64_t objects_used;    /* extstore_objects_used: records not unlinked */
    uint64_t objects_written; /* extstore_objects_written */
    uint64_t objects_read;    /* extstore_objects_read */
    uint64_t bytes_written;   /* extstore_bytes_written: bytes the device was given */
    uint64_t bytes_appended;  /* nessie_flash_bytes_appended: bytes of records appended */
    uint64_t objects_rewritten; /* extstore_compact_rescues: records compaction copied on */
    uint64_t bytes_rewritten; /* nessie_flash_bytes_rewritten: their bytes (in bytes_appended) */
    uint64_t bytes_read;      /* extstore_bytes_read */
    uint64_t page_reclaims;   /* extstore_page_reclaims: pages freed */
    uint64_t misses;          /* miss_from_extstore: reads that found no such record */
    uint64_t crc_failures;    /* badcrc_from_extstore */
    uint64_t io_errors;       /* nessie_flash_io_errors */
    uint64_t recovered;       /* nessie_flash_recovered: records found at the daemon's start */
    uint64_t ram_bytes;       /* nessie_flash_ram_bytes: the log's memory besides the index */
    bool uring;               /* nessie_flash_io_uring: 1, or 0 for pread/pwrite */
};

/* Fill st. Returns NESSIE_OK, or NESSIE_NOT_FOUND when the node has no flash tier. */
int nessie_flash_stats(struct nessie_node *node, struct nessie_flash_stats *st);

/* memcached's cache_memlimit: this node's data region assigns at most `bytes` of pages to
 * items from now on (its eviction then keeps within them). Returns NESSIE_OK, or NESSIE_INVALID
 * when bytes is more than the region or less than the pages already in use (never taken back);
 * nothing changes then. */
int nessie_mem_limit(struct nessie_node *node, uint64_t bytes);

/* Non-empty entries of this node's index table (a scan of it: for stats, not per operation). */
uint64_t nessie_index_used(struct nessie_node *node);

/* Per size class usage of this node's data region (for stats and tests; memcached's slab
 * classes: `stats slabs`, `stats items`). */
struct nessie_class_usage {
    uint32_t slot_bytes;
    uint64_t slots;       /* slots in pages assigned to the class */
    uint64_t free;        /* on the free list */
    uint64_t recycled;    /* marked recycled, waiting for their expiry (as of the last full
                             pass of the recycle scan) */
    uint64_t peer_recycled; /* of those, marked by peers: the larger of the last pass's count
                               and the current pass's so far (the scan alone finds them) */
    uint64_t pages;       /* pages assigned to the class */
    uint64_t slots_per_page;
    uint64_t used;        /* holding items (and tombstones on their way out), their bytes */
    uint64_t bytes;       /*   (as of the last full pass of the recycle scan) */
    uint64_t failed;      /* allocations refused: no free slot */
};
/* Fills up to max entries; returns the number of classes. */
uint32_t nessie_class_usage(struct nessie_node *node, struct nessie_class_usage *out,
                            uint32_t max);
/* The class (an index of nessie_class_usage) an item of these sizes goes to, or -1 when it
 * fits none. */
int nessie_class_of(struct nessie_node *node, size_t key_len, size_t value_len);

#ifdef __cplusplus
}
#endif

#endif
