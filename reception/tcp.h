/*
 * tcp.h - the memcached protocol on a TCP port (issue 32): a listener and the threads that run
 * its connections' requests themselves (a hand-off between threads would cost a wake-up, tens of
 * us here: shared/notes/machine-limits.md). Off unless [reception] memcached_port is set; node N
 * listens on that port + N. The protocol itself is proto_text.c.
 */
#ifndef NESSIE_RECEPTION_TCP_H
#define NESSIE_RECEPTION_TCP_H

#include <stdint.h>

#include <nessie/nessie.h>
#include "stats.h"

struct recep_tcp_config {
    const char *addr;          /* the address to listen on, numeric (IPv4 or IPv6) */
    uint32_t port;             /* this node's port (the configured one + its id) */
    uint32_t threads;          /* connection threads */
    uint32_t max_connections;  /* past it, a new connection is told so and closed */
    uint32_t idle_s;           /* a connection silent this long is closed (0: never) */
    uint32_t partial_s;        /* a request begun and not finished this long: closed (0: never) */
    uint32_t spin_us;          /* a thread busy-waits this long at most for a request ([reception]
                                * spin_us, as the workers; 0: never) */
};

struct recep_tcp;

/*
 * Listen and start the threads. Returns 0, or -1 after logging why (the address taken, a bad
 * address); nothing is left running then. stats may be NULL (no "stats" answers).
 */
int recep_tcp_start(struct nessie_node *node, const struct recep_tcp_config *cfg,
                    struct recep_stats *stats, struct recep_tcp **out);
/* Stop listening, close every connection, join the threads. t may be NULL. */
void recep_tcp_stop(struct recep_tcp *t);

/* Connections as memcached counts them (its stats of these names), for stats.c: open now,
 * accepted ever, refused for max_connections; and the limit (0: no listener). */
struct recep_tcp_counts {
    uint64_t curr, total, rejected, max;
    uint64_t direct_gets;  /* values read straight into a reply (proto_text_direct_gets) */
    uint64_t spins;        /* times a thread busy-waited for a request instead of sleeping */
    uint64_t spin_hits;    /* ... and one came before it gave up */
};
void recep_tcp_counts(struct recep_tcp_counts *out);

#endif
