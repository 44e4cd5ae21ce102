/*
 * channel.h - the daemon's side of a client channel (include/nessie/wire.h): the shared-memory
 * region and doorbell it hands to a client, and the execution of the client's requests through
 * the engine. A channel is used by one worker thread at a time.
 */
#ifndef NESSIE_RECEPTION_CHANNEL_H
#define NESSIE_RECEPTION_CHANNEL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <nessie/wire.h>

#include <nessie/nessie.h>

/* A key the shim may send is one the engine takes: memcached's limit on both sides. */
_Static_assert(WIRE_KEY_MAX == NESSIE_KEY_MAX, "the wire's and the engine's key limits agree");

enum recep_stage_kind { STAGE_NONE = 0, STAGE_STORE, STAGE_FETCH };

/* A value travelling in chunks through one slot (wire.h "Large values"): the store being
 * assembled, or the value of the slot's last get being fetched. */
struct recep_stage {
    enum recep_stage_kind kind;
    unsigned char *buf;
    uint32_t len, total;
    unsigned char key[WIRE_KEY_MAX];
    uint16_t klen;
    struct wire_req req;
};

struct recep_channel {
    uint64_t id;
    int memfd;                 /* the region, shared with the client */
    int doorbell;              /* eventfd the client rings when the worker is parked */
    int sock;                  /* the client's connection: its hang-up ends the channel */
    pid_t pid;                 /* the client, from SO_PEERCRED (for logs) */
    struct wire_channel *hdr;  /* mapping of the region */
    unsigned char *arena;
    size_t map_bytes;
    uint32_t arena_bytes;
    uint32_t max_item_size;
    /* The ring position up to which requests were taken. Private: the copy in the shared header
     * is for the client's information, and the client could overwrite it. */
    uint32_t tail;
    struct recep_stage stage[WIRE_SLOTS]; /* per slot; buffers owned by the channel */
    uint64_t staged_bytes;     /* held by stage[] now, against the channel's budget */
    uint64_t requests;         /* served, for stats */
    bool broken;               /* the client broke the ring: nothing more is taken from it */
    bool dead;                 /* the client hung up, or broke the ring; the worker closes it */
};

/* A request taken from a channel, until its reply is posted. */
struct recep_req {
    struct recep_channel *ch;
    uint16_t slot;
    struct wire_req rq;        /* copied out of the slot: the client may change it meanwhile */
    struct wire_rep rep;
    uint64_t taken_ns;         /* when it was taken from the ring */
    unsigned char key[WIRE_KEY_MAX]; /* single-key requests: the key, read once */
};

/* Make a channel: its region (memfd) mapped here, its doorbell. Returns 0, or -errno (logged)
 * with nothing made. sock is taken over (closed by recep_channel_destroy). */
int recep_channel_create(uint32_t arena_bytes, uint32_t max_item_size, int sock, pid_t pid,
                         uint64_t id, struct recep_channel **out);
void recep_channel_destroy(struct recep_channel *ch);

/* How many times clients' handles reconnected (memcached_quit, WIRE_NOOP_RECONNECT) since the
 * daemon started: memcached counts each as a connection. */
uint64_t recep_channel_reconnects(void);

/* True if the client posted requests not taken yet (a cheap load, for the worker's loops). */
bool recep_channel_pending(const struct recep_channel *ch);

/*
 * Take up to max posted requests into out, in posting order (each slot claimed: REQUEST ->
 * BUSY). Returns how many. A ring that cannot be followed breaks the channel (wire.h step 3:
 * error set, waiters woken, ch->dead set for the worker to close it) and returns what was taken
 * before, which is still served.
 */
size_t recep_channel_take(struct recep_channel *ch, struct recep_req *out, size_t max);

/*
 * Run n taken requests (of any channels) with ctx and post each reply as soon as it is ready,
 * waking its client if it sleeps. The GETs among them go to the engine together (one
 * nessie_get_multi: their fabric reads are posted as one batch); the others run one by one.
 * Never trusts a request: a malformed one gets WIRE_E_MALFORMED and changes nothing. Returns
 * true if a reply had to wake its client (it was asleep).
 */
bool recep_channel_run(struct recep_req *reqs, size_t n, struct nessie_ctx *ctx);

#endif
