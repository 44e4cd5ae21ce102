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

/* memcached's stats sub-commands, in its form (each ends with "END\r\n"). */
/* stats reset: the counters (not the gauges: items, connections open) start again from 0, as
 * memcached's; the engine's own counters are untouched (a baseline is kept). */
void recep_stats_reset(struct recep_stats *st);
/* cache_memlimit: this node's items take at most bytes from now on (nessie_mem_limit), and the
 * stats' limit_maxbytes says so. Returns false (nothing changed) when the engine refuses. */
bool recep_stats_mem_limit(struct recep_stats *st, uint64_t bytes);
/* stats settings: the settings that mean here what they mean in memcached, then Nessie's. */
void recep_stats_settings(struct recep_stats *st, GString *out);
/* stats slabs and stats items: this node's size classes as memcached's slab classes
 * (numbered from 1), with the counts this engine keeps. */
void recep_stats_slabs(struct recep_stats *st, GString *out);
void recep_stats_items(struct recep_stats *st, GString *out);
/* stats cachedump ID LIMIT: this node's items of class ID (as stats items numbers them), LIMIT
 * at most (0: all), in memcached's "ITEM key [bytes b; exptime s]" lines, 2 MiB at most. Reads
 * each item (a debugging aid, as in memcached: not for a loaded server). */
void recep_stats_cachedump(struct recep_stats *st, struct nessie_ctx *ctx, uint32_t id,
                           uint32_t limit, GString *out);

#endif
