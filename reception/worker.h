/*
 * worker.h - worker threads: each serves the channels assigned to it, running their requests
 * through the engine with its own engine context. It spins for spin_us after its last request,
 * then parks in epoll_wait on its channels' doorbells and sockets, so an idle daemon uses no CPU.
 */
#ifndef NESSIE_RECEPTION_WORKER_H
#define NESSIE_RECEPTION_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "channel.h"
#include <nessie/nessie.h>

struct recep_worker;

/* Start worker `index`. sd_help: it answers peers' shipped GETs while it is awake (waiting
 * for its own shipped calls, spinning for its clients), with an engine context of its own
 * (nessie_sd_help). Returns 0, or -1 (logged). */
int recep_worker_start(struct nessie_node *node, uint32_t index, uint32_t spin_us, bool sd_help,
                       struct recep_worker **out);
/* Hand a channel over; the worker owns it from now on (and destroys it when its client hangs
 * up, or at stop). Never fails: the queue is unbounded (bounded by max_channels upstream). */
void recep_worker_add(struct recep_worker *w, struct recep_channel *ch);
/* Finish the request in progress and those already posted, close every channel, join. */
void recep_worker_stop(struct recep_worker *w);

struct recep_worker_stats {
    uint64_t requests;
    uint64_t sleeps;       /* times it parked */
    uint32_t channels;     /* open now */
    bool asleep;           /* parked in epoll_wait right now */
};
void recep_worker_stats(const struct recep_worker *w, struct recep_worker_stats *out);

#endif
