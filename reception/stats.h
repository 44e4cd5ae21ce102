/*
 * stats.h - the stats thread: once a second it sums the engine's counters and the workers', and
 * keeps the rates of the last interval; recep_stats_format() renders them in memcached's "STAT
 * name value" text, which the Receptionist sends to tools (tools/nessie-stat, the shim's
 * memcached_stat for memcstat).
 */
#ifndef NESSIE_RECEPTION_STATS_H
#define NESSIE_RECEPTION_STATS_H

#include <glib.h>
#include <stdint.h>

#include <nessie/wire.h>

#include <nessie/nessie.h>
#include "worker.h"

struct recep_stats;

/* Start the thread. workers[nworkers] are read, never changed. Returns 0 or -1 (logged). */
int recep_stats_start(struct nessie_node *node, struct recep_worker **workers, uint32_t nworkers,
                      struct recep_stats **out);
void recep_stats_stop(struct recep_stats *st);
/* Count a channel handed out (the Receptionist calls it). */
void recep_stats_channel_opened(struct recep_stats *st);
/* Append the stats text ("STAT name value\r\n" lines, then "END\r\n") to out. */
void recep_stats_format(struct recep_stats *st, GString *out);

#endif
