/*
 * recycler.h - the recycler daemons: background threads that keep DTE recycling off the
 * operations' critical path (paper 4.3.3): they mark what finished operations staged (recycle
 * bit + expiry), return expired recycled DTEs to the free lists (so a PUT finds a free entry
 * without scanning), and sweep the DTEs that crashes and faults leaked (after a start, and then
 * every sweep_every_s, a minute by default).
 */
#ifndef NESSIE_RECEPTION_RECYCLER_H
#define NESSIE_RECEPTION_RECYCLER_H

#include <stdint.h>

#include <nessie/nessie.h>

struct recep_recycler;

/* Start n threads. Returns 0, or -1 (logged) with none running. */
int recep_recycler_start(struct nessie_node *node, uint32_t n, uint32_t sweep_every_s,
                         struct recep_recycler **out);
/* Stop and join them; what is staged then stays staged (a restart's sweep finds it). */
void recep_recycler_stop(struct recep_recycler *r);

#endif
