/*
 * changes.h - the daemon's part in a change of membership (issue 30): a node added to the
 * cluster, or one retired from it, online. With [membership] mode = etcd only; the engine's half
 * is in kvstore (membership.h, "Changes"; protocol/move.c), and its rules are model/elastic.pml's
 * and model/retire.pml's.
 *
 * Whoever makes the change (`nessie-cluster add`, `remove`) steps it through etcd, one phase at a
 * time, and moves on only once every member has acknowledged the phase:
 *   /nessie/<name>/change      = "<N> add|retire <ID> announce|move|commit": change N, its phase
 *                                (written by the coordinator; gone once the change is over)
 *   /nessie/<name>/changed/<I> = "<N> <phase>": member I has installed the phase and done what
 *                                it asks (under I's lease)
 *   /nessie/<name>/placed      = "<N> <ID> <ID> ...": the placed members after change N (written
 *                                with its commit; read by a daemon at its start)
 * What a phase asks of a member before it acknowledges: announce, that its attempts under the
 * placement before are over (one attempt's span, E + F, after it installed the phase); move, that
 * its mover's pass is over, which starts V + F + E + F after it installed the phase (the view
 * lease V: a member that has not read the phase starts no attempt under the announce phase's
 * policy by then; then one attempt's span for those in flight, and one more for those that ran
 * alongside them: model/elastic.pml, BUG_MOVER_ONE_WAIT); commit, nothing, but of the node a
 * retire retires: V + F after it installed the commit, the longest a member that has not read
 * the commit may still read its memory (model/retire.pml); its daemon may be stopped after that.
 * In a retire, the move phase's pass is a survivor's relocation of the values its index names in
 * the retired node's data and its share of the retired node's index; the retired node's own pass
 * is empty (it writes nothing new from the announce on: R1).
 *
 * The agent thread of members.c reads the change with the view, in the same round, and installs
 * its phase before it renews the view lease that round's start vouches for: a member that acts
 * under a lease has installed every phase written before the lease's read. The recycler's first
 * thread runs the mover when changes_mover_due says so.
 */
#ifndef NESSIE_RECEPTION_CHANGES_H
#define NESSIE_RECEPTION_CHANGES_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>

#include <nessie/nessie.h>

/* Set up for node (cluster's etcd prefix "/nessie/<name>/", this node's id, the view lease V in
 * ms). Nothing is read yet. Returns 0, or -1 when out of memory. */
int changes_open(struct nessie_node *node, const char *cluster_prefix, uint32_t self,
                 uint64_t view_lease_ms);
void changes_close(void);

/* The change in progress and the placed record are read with the view, in the same range
 * read of the cluster's keys (members.c, reconcile): changes_read_begin forgets the last round's
 * values, and the reader hands every key it got to changes_read_key, which keeps the change's and
 * the placed record's values (copied) for changes_install and ignores the others. A key absent from the read is absent (NULL) for changes_install. Agent thread only; a
 * read that failed is never installed (the next round begins again). */
void changes_read_begin(void);
void changes_read_key(const char *key, const char *value);

/* Act on what the round's read found (changes_read_key), before the view lease that read renews
 * is renewed: install the change's phases in order (never skipping one), and apply the placed
 * record when it is newer than the last applied and no change is in progress (a daemon's start;
 * a commit it saw late).
 * Touches no etcd. Returns 0, or -1 when strict (at start: the node must not serve on a
 * placement it cannot read) and the placed record is malformed or refused (logged once). */
int changes_install(bool strict);

/* Acknowledge the installed phase once what it asks is done (the header above), under this
 * daemon's etcd lease. Best effort: a failed put is tried again at the next call. */
void changes_ack(CURL *curl, int64_t lease);

/* This daemon's etcd lease was replaced (its keys went with the old one): acknowledge again. */
void changes_lease_changed(void);

/* Whether the mover may run now (a move phase installed here and its wait over). Any thread. */
bool changes_mover_due(void);

#endif
