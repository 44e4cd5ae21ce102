/*
 * receptionist.h - the Receptionist thread: accepts clients on the node's Unix domain socket,
 * checks who they are (SO_PEERCRED: the daemon's own user, or root), reads their hello and
 * answers it: a channel (handed to the least loaded worker) or the stats text. A client that
 * sends garbage gets an error welcome and is disconnected; nobody else notices.
 */
#ifndef NESSIE_RECEPTION_RECEPTIONIST_H
#define NESSIE_RECEPTION_RECEPTIONIST_H

#include <stdint.h>
#include <sys/types.h>

#include <nessie/nessie.h>
#include "stats.h"
#include "worker.h"

struct recep_receptionist;

struct recep_receptionist_config {
    const char *socket_path;
    mode_t socket_mode;
    uint32_t arena_bytes;
    uint32_t max_channels;
};

/* Bind and listen (a stale socket left by a dead daemon is replaced; a live one is an error),
 * then start the thread. Returns 0, or -1 (logged) with nothing left behind. */
int recep_receptionist_start(const struct recep_receptionist_config *cfg,
                             struct nessie_node *node, struct recep_worker **workers,
                             uint32_t nworkers, struct recep_stats *stats,
                             struct recep_receptionist **out);
/* Stop accepting, join, and remove the socket. */
void recep_receptionist_stop(struct recep_receptionist *r);

#endif
