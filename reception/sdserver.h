/*
 * sdserver.h - the server-driven side of the daemon (issue 16): threads that poll this node's
 * request rings (kvstore/modes/sd.c) and run what peers shipped to it, as NessieSD's server threads
 * do. Every daemon runs them, whatever its own mode: a peer in sd or hy mode ships to it.
 */
#ifndef NESSIE_RECEPTION_SDSERVER_H
#define NESSIE_RECEPTION_SDSERVER_H

#include <stdbool.h>
#include <stdint.h>

#include <nessie/nessie.h>

enum recep_sd_poll {
    RECEP_SD_POLL_ADAPTIVE = 0, /* spin a while after the last request, then sleep in steps */
    RECEP_SD_POLL_SPIN,         /* never sleep (the paper's servers: a core each, always) */
};

struct recep_sdserver;

/* Start n threads (server i serves ring slots i, i + n, ...). spin_us: how long an adaptive
 * server spins after its last request before it starts to sleep. Returns 0, or -1 (logged)
 * with none running. */
int recep_sdserver_start(struct nessie_node *node, uint32_t n, enum recep_sd_poll poll,
                         uint32_t spin_us, struct recep_sdserver **out);
/* Stop and join them. Requests still in the rings get no reply (their requesters time out). */
void recep_sdserver_stop(struct recep_sdserver *s);

#endif
