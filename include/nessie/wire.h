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
 * 3. On a channel, one request at a time (one channel per client thread):
 *      client: fill req and the arena; store state = WIRE_ST_REQUEST (seq_cst); if worker_parked
 *              is set, write 1 to the doorbell.
 *      daemon: CAS state REQUEST -> BUSY; copy req out; check it; run it; fill rep and the arena;
 *              store state = WIRE_ST_REPLY (seq_cst); if client_waiting is set, FUTEX_WAKE state.
 *      client: spin briefly on state, then set client_waiting, re-check, and FUTEX_WAIT on state
 *              (a shared futex: the word is in a MAP_SHARED mapping of two processes); read rep;
 *              store state = WIRE_ST_IDLE.
 *    Both sides use seq_cst for the flag/state pairs (Dekker): a store of one's own word followed
 *    by a load of the other's never misses a sleeper.
 *    The daemon trusts nothing in the channel: it copies the request out, checks every length and
 *    offset against the arena, and answers a bad one with WIRE_E_MALFORMED.
 *
 * Large values: a value that does not fit in the arena travels in chunks. A store sends
 * total_len and, per request, the chunk at chunk_off; the daemon answers WIRE_S_CONTINUE until the
 * last chunk, then runs the store. A get whose value does not fit answers with the first chunk,
 * rep.total_len and WIRE_F_MORE; the client fetches the rest with WIRE_OP_FETCH at chunk_off.
 */
#ifndef NESSIE_WIRE_H
#define NESSIE_WIRE_H

#include <stdint.h>

#define WIRE_MAGIC 0x4e455353u /* "NESS" */
#define WIRE_VERSION 1

#define WIRE_KEY_MAX 250 /* memcached's limit, and the engine's */

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
    WIRE_OP_NOOP,
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
    uint64_t delta;       /* ARITH */
    uint64_t seq;         /* the client's request number, echoed */
};

struct wire_rep {
    uint16_t status;      /* enum wire_status */
    uint16_t rflags;      /* WIRE_F_MORE */
    uint32_t flags;       /* memcached flags of the item read */
    uint32_t chunk_len;   /* value bytes in the arena */
    uint32_t total_len;   /* the whole value's length */
    uint32_t nitems;      /* MGET: wire_mitem records in the arena */
    uint32_t nkeys_done;  /* MGET: keys answered (hits and misses); the client resends the rest */
    uint64_t version;     /* CAS token of the item read or stored */
    uint64_t number;      /* ARITH result */
    uint64_t seq;
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

/* The channel: this header at offset 0, the arena at WIRE_ARENA_OFFSET. */
#define WIRE_ARENA_OFFSET 4096

struct wire_channel {
    uint32_t magic;
    uint16_t version;
    uint16_t reserved0;
    uint32_t arena_bytes;
    uint32_t max_item_size;
    /* The futex word: enum wire_state. Written by both sides as the protocol above says. */
    uint32_t state;
    uint32_t client_waiting; /* the client sleeps (or is about to) on state */
    uint32_t worker_parked;  /* the serving worker sleeps (or is about to) on the doorbell */
    uint32_t reserved1;
    struct wire_req req;
    struct wire_rep rep;
};

_Static_assert(sizeof(struct wire_channel) <= WIRE_ARENA_OFFSET, "channel header too large");
_Static_assert(sizeof(struct wire_hello) == 16, "hello layout");
_Static_assert(sizeof(struct wire_mitem) == 24, "mitem layout");

#endif
