/*
 * modes.h - who carries out a call (nessie.h, enum nessie_mode). Not a public header.
 *
 * Room: modes, above protocol. It owns the way a call runs: here, client-driven (the protocol
 * room); or shipped to its key's home node and run there by that node's servers (sd.c: the
 * request rings, deadlines, withdrawal, the servers' side); or, in mode auto, whichever a
 * selector measures as faster (sd.c, Cell's). The one dispatch function per call (dispatch.c)
 * decides it before any protocol step. It may call protocol, memory and fabric.
 */
#ifndef NESSIE_KVSTORE_MODES_H
#define NESSIE_KVSTORE_MODES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memory/memory.h"

/* --- server-driven execution (sd.c) ----------------------------------------------------------- */

/* Set up (sd_open: at node open, after the fabric; takes every request already in this node's
 * ring as served, since it was meant for an earlier life) and free (sd_close) the node's
 * server-driven state. sd_open returns NESSIE_OK or NESSIE_NO_MEMORY. */
int sd_open(struct nessie_node *nd);
void sd_close(struct nessie_node *nd);

/* Whether a call on the key kp plans, with value_len bytes of value, may be shipped to its home
 * node now: the home is another node, the request fits a ring slot, and the home's servers are
 * not shunned (a probe of a shunned home's heartbeat may clear it; a call run here because of a
 * shunned home is counted, sd_shunned). Mode-blind: the dispatch asks it only for calls its mode
 * ships. */
bool sd_can_ship(struct nessie_ctx *ctx, const struct key_plan *kp, size_t value_len);
/* Whether a call with klen + value_len bytes of payload may be shipped to node `to` now: it is
 * another node, the request fits a ring slot, and its servers are not shunned (sd_can_ship's
 * rules for any node: placement ships stores to nodes that are not the key's home). */
bool sd_can_ship_to(struct nessie_ctx *ctx, uint32_t to, size_t payload_len);
/* Whether calls to home run here for now: its servers looked dead or stalled (a withdrawal won
 * there), until a probe sees its heartbeat move. A shunned home is probed (one fabric READ of
 * its heartbeat, one thread at a time, at most once a take-up limit) by whoever asks, so every
 * caller that avoids a shunned home must ask here: a home only ever tested by a plain load
 * would stay shunned for good. One acquire load when the home is not shunned; never blocks. */
bool sd_home_shunned(struct nessie_ctx *ctx, uint32_t home);
/* Whether a call that met node `to`'s flash item may be shipped there: as sd_can_ship_to, but
 * a home whose servers look stalled is tried too (only it can read the item). */
bool sd_can_ship_flash(struct nessie_ctx *ctx, uint32_t to, size_t payload_len);

/* Mode auto (nessie.h): pick the way of one call (NESSIE_MODE_CD or NESSIE_MODE_SD), then, once
 * it ended, teach the selector how long it took. */
struct sd_choice {
    struct sd_est *est; /* NULL: nothing to learn (the key's home is this node) */
    int way;            /* 0 cd, 1 sd */
    bool fresh;         /* the way's average was stale: the sample replaces it */
    bool probe;         /* one of a probe's client-driven calls (sd.c, AUTO_PROBE) */
    bool probe_last;    /* ... its last: the probe's least time becomes cd's average */
    uint64_t t0;
};
enum nessie_mode sd_auto_choose(struct nessie_ctx *ctx, bool write, const struct key_plan *kp,
                                size_t value_len, struct sd_choice *ch);
void sd_auto_learn(struct nessie_ctx *ctx, const struct sd_choice *ch);

/* Carry out a GET at node `to` (kp's home, or the owner of a flash item met). Returns its outcome (as nessie_get_into), or -1: it did not
 * run there and never will (not taken up in time, withdrawn; or the value is larger than a
 * slot), so the caller runs it here, client-driven, within what is left of its budget (the next
 * proto_op_init on ctx gets that end). */
int sd_get(struct nessie_ctx *ctx, uint32_t to, const struct key_plan *kp, void *buf, size_t cap,
           struct nessie_item *out);
/* Carry out a write at node `to` (kp's home, or for a placed store a node with room): rq names
 * it (op, sub, lengths, flags, exptime, arg). Returns its outcome, and on NESSIE_OK the new
 * version (and for arith the new value); or -1 as sd_get does. */
int sd_write(struct nessie_ctx *ctx, uint32_t to, const struct key_plan *kp,
             const struct sd_req *rq, const void *value, uint64_t *version_out,
             uint64_t *num_out);

/* --- placement (place.c, issue 29) ------------------------------------------------------------ */

/* Set up (at node open: NESSIE_OK or NESSIE_NO_MEMORY) and free the node's placement state. */
int place_open(struct nessie_node *nd);
void place_close(struct nessie_node *nd);

/* The node a client-driven store of key_len + value_len bytes should run on: this node while it
 * has an unassigned page or free slots of the value's class to spare; else a reachable peer, not
 * shunned, that has PLACE_MIN_SPARE spare pages or free slots of the class to spare (the one with
 * most spare pages); else, every node being full, the peer whose recent
 * eviction victims were read a quarter longer ago than this node's, if any, else this node.
 * Never blocks past one READ per peer (at most every PLACE_REFRESH_NS); never fails (a peer it
 * cannot read is not chosen). */
uint32_t place_target(struct nessie_ctx *ctx, uint32_t key_len, size_t value_len);

/* --- the dispatch (dispatch.c) ------------------------------------------------------------- */

/*
 * Each public call, once its arguments are checked and its key planned (front/api.c): the way it
 * runs (here, client-driven; or shipped to the key's home node) is decided here, once, from the
 * context's mode (and for mode auto by the selector), before any protocol step. They return what
 * the public calls of nessie.h return.
 */
int mode_get(struct nessie_ctx *ctx, const struct key_plan *kp, void *buf, size_t cap,
             struct nessie_item *out);
int mode_get_multi(struct nessie_ctx *ctx, size_t n, const void *const *keys, const size_t *lens,
                   void *const *bufs, const size_t *caps, nessie_multi_fn done, void *user);
int mode_store(struct nessie_ctx *ctx, const struct key_plan *kp, enum nessie_store_mode mode,
               const void *value, size_t value_len, uint32_t flags, int64_t exptime,
               uint64_t cas, uint32_t meta, uint64_t *version_out);
int mode_invalidate(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t cas,
                    bool set_exptime, int64_t exptime);
int mode_token(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t version);
int mode_delete(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t cas);
int mode_arith(struct nessie_ctx *ctx, const struct key_plan *kp, bool incr, uint64_t delta,
               uint64_t cas, uint64_t *result, uint64_t *version_out);
int mode_touch(struct nessie_ctx *ctx, const struct key_plan *kp, int64_t exptime);

#endif
