/*
 * wire.h - the contract between a client (the shim, libdeception.so) and its node's reception
 * daemon. Versioned: a change that an old peer would misread bumps WIRE_VERSION.
 *
 * 1. The client connects to the daemon's Unix domain socket (SOCK_SEQPACKET: every message keeps
 *    its boundaries) and sends one struct wire_hello.
 * 2. kind WIRE_HELLO_CHANNEL: the daemon answers with one struct wire_welcome carrying, when its
 *    status is WIRE_OK, two file descriptors (SCM_RIGHTS): the channel (a shared-memory object of
 *    welcome.channel_bytes bytes, to mmap MAP_SHARED) and the doorbell (an eventfd). The socket
 *    then stays open for the channel's life: closing it (or dying) releases the channel.
 *    kind WIRE_HELLO_STATS: the daemon answers with text messages "STAT <name> <value>\r\n"...,
 *    the last of which ends with "END\r\n", then closes the socket.
 *    A hello the daemon cannot take (bad magic, size or kind, an unknown version) is answered by a
 *    welcome with an error status and no descriptors; the daemon closes that socket and carries
 *    on.
 * 3. A channel carries up to WIRE_SLOTS requests in flight (one channel per client thread; its
 *    blocking calls and its non-blocking ones share it). Each request lives in a slot of its own
 *    and uses the part of the arena its req.arena_off / req.arena_len name, chosen by the client
 *    (the parts of requests in flight must not overlap; the daemon only checks that they lie in
 *    the arena). The synchronization is include/nessie/wire_sync.h, compiled by both sides:
 *      client: fill slot.req and its arena part; slot.state = WIRE_ST_REQUEST; append the slot's
 *              index to sq (sq[sq_head % WIRE_SLOTS]) and store sq_head + 1 (seq_cst); if
 *              worker_parked is set, write 1 to the doorbell.
 *      daemon: read sq_head (acquire) and take each new index in order from its private tail;
 *              CAS the slot's state REQUEST -> BUSY; copy req out; check it; run it (several
 *              requests, of several channels, go to the engine together); fill rep and the arena
 *              part; store state = WIRE_ST_REPLY (seq_cst); if the slot's client_waiting is set,
 *              FUTEX_WAKE the slot's state.
 *      client: spin on state only while the worker runs and a reply is due soon (wire_sync.h
 *              explains the policy), else set client_waiting, re-check, and FUTEX_WAIT on state
 *              (a shared futex: the word is in a MAP_SHARED mapping of two processes); read rep;
 *              store state = WIRE_ST_IDLE. The slot is the client's again.
 *    Both sides use seq_cst for the flag/word pairs (Dekker): a store of one's own word followed
 *    by a load of the other's never misses a sleeper.
 *    The daemon trusts nothing in the channel: it copies a request out, checks every length and
 *    offset against the arena, and answers a bad one with WIRE_E_MALFORMED. A ring it cannot
 *    follow (an index past WIRE_SLOTS, a slot that was not posted, more entries than slots) ends
 *    that channel: `error` is set to WIRE_E_MALFORMED, its waiters are woken and its socket is
 *    closed. Nothing else is affected.
 *
 * Large values: a value that does not fit in the arena travels in chunks. A store sends
 * total_len and, per request, the chunk at chunk_off; the daemon answers WIRE_S_CONTINUE until the
 * last chunk, then runs the store. A get whose value does not fit answers with the first chunk,
 * rep.total_len and WIRE_F_MORE; the client fetches the rest with WIRE_OP_FETCH at chunk_off.
 * Both are per slot: a slot's staged value is dropped by the slot's next request of another kind.
 *
 * Dump (WIRE_OP_DUMP, for memcached_dump): the keys of the live items the daemon's node holds
 * (nessie_dump_local: the values written through that node), walked in chunks that the daemon
 * keeps no state for. A request sends req.cursor: 0 to start, else the rep.cursor of the chunk
 * before. The reply packs keys from the start of the request's part as [u8 len][len bytes]
 * (MGET's key format), rep.nitems keys in rep.chunk_len bytes, and sets rep.cursor to where the
 * next chunk starts, with WIRE_F_MORE, or to 0 without it once the walk is done. A chunk may hold
 * no key at all (the daemon examines a bounded number of slots per request, so one request never
 * holds a worker long), so a client goes on while WIRE_F_MORE is set. rep.status: WIRE_OK, or
 * WIRE_FABRIC_ERROR: the chunk's keys stand, but it left out items whose index entries are on a
 * node that cannot be reached (the walk goes on); WIRE_E_MALFORMED: a cursor no walk gave, or a
 * part too small for one key record (1 + WIRE_KEY_MAX bytes): nothing listed. Keys are raw, as
 * stored (a client's namespace prefix included). A key written during the walk may be missed or
 * listed twice; one left alone is listed once. Added in version 2 without a bump, as no peer
 * misreads it: an older daemon answers WIRE_E_UNKNOWN_OP, and the cursors are new names for
 * words only ARITH used, unchanged in place and meaning for every other op.
 */
#ifndef NESSIE_WIRE_H
#define NESSIE_WIRE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define WIRE_MAGIC 0x4e455353u /* "NESS" */
#define WIRE_VERSION 2
/* The oldest version whose stats hello (WIRE_HELLO_STATS) a daemon still answers: that exchange
 * is the same since version 1. */
#define WIRE_STATS_VERSION_MIN 1

#define WIRE_KEY_MAX 250 /* memcached's limit, and the engine's */

/*
 * Where a client finds its node's daemon: the socket WIRE_SOCKET_NAME (the node's id in it) in
 * the run directory, $NESSIE_RUN_DIR, else /tmp/nessie-$UID. A client picks the node with
 * $NESSIE_NODE (default 0), or names the socket itself with $NESSIE_SOCKET; a daemon's
 * configuration may put its socket elsewhere ([reception] socket). tools/nessie-cluster,
 * nessie-run and nessie-stat follow the same rule.
 */
#define WIRE_ENV_RUN_DIR "NESSIE_RUN_DIR"
#define WIRE_ENV_NODE "NESSIE_NODE"
#define WIRE_ENV_SOCKET "NESSIE_SOCKET"
#define WIRE_SOCKET_NAME "node%u.sock"

/* A NOOP with this mode tells the daemon that a client's handle dropped its connection
 * (memcached_quit) and takes a new one at its next call, as a memcached client reconnects: the
 * daemon counts it in total_connections. (An older daemon answers any NOOP with OK.) */
#define WIRE_NOOP_RECONNECT 1

/* The run directory when nothing else names one, into out (len bytes, truncated to fit). */
static inline void wire_run_dir(char *out, size_t len)
{
    const char *env = getenv(WIRE_ENV_RUN_DIR);
    if (env && *env)
        snprintf(out, len, "%s", env);
    else
        snprintf(out, len, "/tmp/nessie-%u", (unsigned)getuid());
}

/* The memcached release whose protocol and outcomes Nessie reproduces (Debian's memcached, which
 * tests/integration/shim-clients.sh compares against): the daemon's version stat is
 * "1.6.18-nessie", and the shim reports these numbers as every server's version once a client
 * has asked for it (memcached_version), as libmemcached does after asking memcached. */
#define WIRE_COMPAT_MAJOR 1
#define WIRE_COMPAT_MINOR 6
#define WIRE_COMPAT_MICRO 18
#define WIRE_STR_(x) #x
#define WIRE_STR(x) WIRE_STR_(x)
#define WIRE_COMPAT_VERSION                                                                   \
    WIRE_STR(WIRE_COMPAT_MAJOR) "." WIRE_STR(WIRE_COMPAT_MINOR) "." WIRE_STR(WIRE_COMPAT_MICRO)

enum wire_hello_kind {
    WIRE_HELLO_CHANNEL = 1,
    WIRE_HELLO_STATS = 2,
};

struct wire_hello {
    uint32_t magic;
    uint16_t version;
    uint16_t kind;
    uint64_t reserved; /* zero */
};

struct wire_welcome {
    uint32_t magic;
    uint16_t version;   /* the daemon's */
    uint16_t status;    /* enum wire_status */
    uint32_t node;      /* the node this daemon plays */
    uint32_t nodes;
    uint64_t channel_bytes;
    uint32_t arena_bytes;
    uint32_t max_item_size;
};

/* Outcomes. The first ones mirror the engine's (nessie_status); the rest are the channel's. */
enum wire_status {
    WIRE_OK = 0,
    WIRE_NOT_FOUND,
    WIRE_NOT_STORED,
    WIRE_EXISTS,
    WIRE_NON_NUMERIC,
    WIRE_TOO_BIG,
    WIRE_NO_MEMORY,
    WIRE_INDEX_FULL,
    WIRE_TIMEOUT,
    WIRE_BAD_KEY,
    WIRE_INVALID,
    WIRE_FABRIC_ERROR,
    WIRE_S_CONTINUE = 32, /* chunk taken; send the next */
    WIRE_E_MALFORMED,     /* the request or hello is not well formed */
    WIRE_E_VERSION,       /* unknown version */
    WIRE_E_BUSY,          /* the daemon is out of channels */
    WIRE_E_SHUTDOWN,      /* the daemon is stopping */
    WIRE_E_UNKNOWN_OP,
};

enum wire_op {
    WIRE_OP_GET = 1,      /* key -> value */
    WIRE_OP_MGET,         /* nkeys keys, each [u8 len][bytes], packed -> wire_mitem records */
    WIRE_OP_STORE,        /* mode (enum wire_store_mode), key, value, flags, exptime, cas */
    WIRE_OP_DELETE,
    WIRE_OP_ARITH,        /* mode 1: incr, 0: decr; delta -> rep.number */
    WIRE_OP_TOUCH,        /* exptime */
    WIRE_OP_FLUSH,
    WIRE_OP_FETCH,        /* the next chunk of the value of the last get, at chunk_off */
    WIRE_OP_NOOP,         /* mode WIRE_NOOP_RECONNECT: a client's handle reconnected (below) */
    WIRE_OP_DUMP,         /* the keys of the live items this node holds, a chunk per request:
                             "Dump" below */
    WIRE_OP_MAX_,
};

enum wire_store_mode {
    WIRE_SET = 0,
    WIRE_ADD,
    WIRE_REPLACE,
    WIRE_CAS,
    WIRE_APPEND,
    WIRE_PREPEND,
};

enum wire_state {
    WIRE_ST_IDLE = 0,
    WIRE_ST_REQUEST,
    WIRE_ST_BUSY,
    WIRE_ST_REPLY,
};

#define WIRE_F_MORE 1u /* rep: the value continues; fetch it */

/* A request. The key is at the arena's start; a value (or chunk) follows it directly. */
struct wire_req {
    uint16_t op;
    uint16_t mode;
    uint16_t key_len;     /* GET..TOUCH; for MGET, the bytes of the packed keys */
    uint16_t nkeys;       /* MGET */
    uint32_t flags;       /* memcached flags */
    uint32_t chunk_len;   /* value bytes in this request */
    uint32_t total_len;   /* the whole value's length */
    uint32_t chunk_off;   /* where this chunk goes (STORE) or comes from (FETCH) */
    int64_t exptime;      /* memcached exptime */
    uint64_t cas;         /* WIRE_CAS: the expected version */
    union {
        uint64_t delta;   /* ARITH */
        uint64_t cursor;  /* DUMP: where the walk goes on (0: from the start) */
    };
    uint64_t seq;         /* the client's request number, echoed */
    uint32_t arena_off;   /* the arena part of this request: key, value, reply */
    uint32_t arena_len;
};

struct wire_rep {
    uint16_t status;      /* enum wire_status */
    uint16_t rflags;      /* WIRE_F_MORE */
    uint32_t flags;       /* memcached flags of the item read */
    uint32_t chunk_len;   /* value bytes in the arena */
    uint32_t total_len;   /* the whole value's length */
    uint16_t nitems;      /* MGET: wire_mitem records in the arena; DUMP: keys in the arena */
    uint16_t nkeys_done;  /* MGET: keys answered (hits and misses); the client resends the rest */
    /* How long the daemon worked on the request (ns, saturated), and CLOCK_MONOTONIC (one clock
     * per host, shared by both sides) when it replied: from them the client learns how long
     * requests take and how long a parked worker takes to wake, without counting its own
     * wake-ups (wire_sync.h). Informational: nothing depends on them for safety. */
    uint32_t busy_ns;
    uint64_t version;     /* CAS token of the item read or stored */
    union {
        uint64_t number;  /* ARITH result */
        uint64_t cursor;  /* DUMP: where the next chunk starts (0: the walk is done) */
    };
    uint64_t seq;
    uint64_t done_ns;
};

/* MGET reply record, 8-byte aligned, followed by key, then value (chunk_len bytes), padded to 8.
 * Only hits are recorded; a record with WIRE_F_MORE carries the start of a long value, whose rest
 * the client fetches (it is always the last record of its reply). */
struct wire_mitem {
    uint16_t key_index;   /* position of the key in this request */
    uint8_t key_len;
    uint8_t rflags;
    uint32_t flags;
    uint32_t chunk_len;
    uint32_t total_len;
    uint64_t version;
};

/* Requests in flight per channel. A power of two: ring positions are free-running 32-bit
 * counters taken modulo WIRE_SLOTS. */
#define WIRE_SLOTS 64

/* Values a channel's daemon stages at once, in items of the cluster's largest size: a value
 * longer than its slot's part of the arena waits in the daemon's memory for the client's
 * WIRE_OP_FETCH, and a client cannot make the daemon hold more for it than this (past it, the
 * request is answered WIRE_NO_MEMORY). The shim keeps fewer gets than this in flight per
 * channel (shim/nb.c). */
#define WIRE_STAGE_ITEMS 8

struct wire_slot {
    struct wire_req req;     /* one cache line, written by the client */
    /* The futex word: enum wire_state. Written by both sides as step 3 says. With the reply in
     * the same cache line: the client spinning on it gets the reply in the same transfer. */
    uint32_t state;
    uint32_t client_waiting; /* the client sleeps (or is about to) on state */
    struct wire_rep rep;
} __attribute__((aligned(64))); /* two cache lines per slot: no false sharing between slots */

/* The channel: this header at offset 0, the arena at WIRE_ARENA_OFFSET. */
#define WIRE_ARENA_OFFSET 16384

struct wire_channel {
    uint32_t magic;
    uint16_t version;
    uint16_t nslots;         /* WIRE_SLOTS */
    uint32_t arena_bytes;
    uint32_t max_item_size;
    uint32_t worker_parked;  /* the serving worker sleeps (or is about to) on the doorbell */
    uint32_t worker_cpu;     /* the CPU the serving worker last ran on, plus one (0: unknown) */
    uint32_t error;          /* set by the daemon when it gives up on the channel */
    uint32_t sq_head;        /* written by the client: ring entries posted (free-running) */
    /* The client's estimates, for the worker's spin budget (wire_sync.h): its think time (from a
     * reply to its next request) and how long it takes to wake once its reply is posted. Hints,
     * never trusted for more than how long the worker spins (at most its spin_us). */
    uint32_t client_think_ns;
    uint32_t client_wake_ns;
    uint16_t sq[WIRE_SLOTS] __attribute__((aligned(64))); /* the ring: slot indices, in order */
    struct wire_slot slot[WIRE_SLOTS];
};

_Static_assert(sizeof(struct wire_channel) <= WIRE_ARENA_OFFSET, "channel header too large");
_Static_assert(sizeof(struct wire_hello) == 16, "hello layout");
_Static_assert(sizeof(struct wire_mitem) == 24, "mitem layout");
_Static_assert((WIRE_SLOTS & (WIRE_SLOTS - 1)) == 0, "WIRE_SLOTS is a power of two");
_Static_assert(sizeof(struct wire_req) == 64 && sizeof(struct wire_slot) == 128, "slot layout");

#endif
