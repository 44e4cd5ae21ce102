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

#include "nessie.h"

enum recep_stage { STAGE_NONE = 0, STAGE_STORE, STAGE_FETCH };

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
    /* A value travelling in chunks (wire.h "Large values"): the store being assembled, or the
     * value of the last get being fetched. Owned by the channel, freed with it. */
    enum recep_stage stage;
    unsigned char *stage_buf;
    uint32_t stage_len, stage_total;
    unsigned char stage_key[WIRE_KEY_MAX];
    uint16_t stage_klen;
    struct wire_req stage_req;
    uint64_t requests;         /* served, for stats */
    bool dead;                 /* the client hung up; the worker closes it */
};

/* Make a channel: its region (memfd) mapped here, its doorbell. Returns 0, or -errno (logged)
 * with nothing made. sock is taken over (closed by recep_channel_destroy). */
int recep_channel_create(uint32_t arena_bytes, uint32_t max_item_size, int sock, pid_t pid,
                         uint64_t id, struct recep_channel **out);
void recep_channel_destroy(struct recep_channel *ch);

/* True if the client posted a request (a cheap load, for the worker's spin loop). */
bool recep_channel_pending(const struct recep_channel *ch);

/*
 * Take the posted request (if the client still has one posted), run it with ctx, post the
 * reply and wake the client if it sleeps. Never trusts the channel's contents: a malformed
 * request gets WIRE_E_MALFORMED and changes nothing. Returns true if a request was served.
 */
bool recep_channel_serve(struct recep_channel *ch, struct nessie_ctx *ctx);

#endif
