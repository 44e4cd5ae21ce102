/*
 * members.h - the daemon's part in the cluster's view (issue 28): with [membership] mode = etcd
 * it holds an etcd lease, registers this node's incarnation under it, watches the cluster's
 * members, writes each change of the member set as a new view through an etcd transaction, and
 * installs every view it reads into its engine (nessie_view_install). The view change is decided
 * by etcd's own lease expiry and transaction, never by one peer's suspicion.
 *
 * Keys, under the cluster's [cluster] name so two clusters never meet in one etcd:
 *   /nessie/<name>/members/<ID>  = this node's incarnation (decimal), under its lease
 *   /nessie/<name>/view          = "<epoch> [r<E>] <ID>:<incarnation> ... <ID>:gone@<inc> ..."
 *                                  (live members, the fenced ones with the incarnation they lost
 *                                  their lease in, and E, the last view that readmitted a node)
 *   /nessie/<name>/scrubbed/<ID> = the view epoch this node's scrub is done for, under its lease
 *
 * A node lost from the view is fenced (kvstore/membership/membership.h) and listed gone; its own
 * daemon, seeing itself gone, serves nothing. Started again, it comes back on new tables under a
 * newer incarnation (members_start), and a view readmits it once every live member's scrub is
 * done for the current view (nothing names its old tables then): "Rejoin" in membership.h.
 *
 * etcd is reached through its v3 JSON gateway (POST /v3/...) with libcurl; the engine never sees
 * etcd. With mode = static nothing here runs (members_start returns at once, no curl call).
 */
#ifndef NESSIE_RECEPTION_MEMBERS_H
#define NESSIE_RECEPTION_MEMBERS_H

#include <stdint.h>

#include <nessie/nessie.h>
#include "config.h"

/*
 * The view lease V (membership.h, "Acting on a view"): half the etcd lease, so that a node cut off
 * from etcd stops acting on its view well before its etcd lease lapses and the view that removes
 * it can be written, while renewals (every MEMBERS_REFRESH_MS, 100 ms) come far more often.
 */
uint64_t members_view_lease_ms(const struct recep_config *cfg);
/*
 * What the engine's calls may wait for a view (nessie_config.view_wait_ms): the detection time of
 * a lost node, from its last keep-alive to the view that fences it being acted on here: the
 * lease's TTL, etcd's expiry check and the watch (MEMBERS_EXPIRY_SLOP_MS), V, and two refreshes.
 * 0 with mode = static. Set it in the engine's configuration before the node is opened.
 */
uint32_t members_view_wait_ms(const struct recep_config *cfg);

/*
 * Whether cfg's membership settings can work together: with mode = etcd, the view lease V
 * (members_view_lease_ms, from [membership] lease_s) must be longer than one attempt ([cluster]
 * expiration_ms) plus two refreshes (members.c says why), or calls wait for renewals that never
 * let them start. Returns 0 (always with mode = static), or -1 after logging an error that names
 * where (the file, or --set), both settings and the bound. Reads only cfg: call it before
 * anything is opened, so that a refused configuration changes nothing.
 */
int members_config_check(const struct recep_config *cfg, const char *where);

/* What members_lease_ages gives for a node instead of an age. */
#define MEMBERS_AGE_NONE (-1)    /* no registration: no key, or etcd no longer has its lease */
#define MEMBERS_AGE_UNKNOWN (-2) /* etcd could not be asked */

/*
 * How long ago each node's etcd lease was last renewed (issue 28: shown with the view), as the
 * agent thread last asked etcd: about once a second while they are read (a call here within
 * the last 30 s), else every ten seconds, so the first read after a quiet spell may give ages
 * up to ten seconds old. age[i] for node i, in seconds, or MEMBERS_AGE_NONE or
 * MEMBERS_AGE_UNKNOWN. etcd tells a lease's remaining TTL in whole seconds,
 * rounded down, so an age is whole seconds rounded up: renewed at most that long before the
 * agent asked. Writes at most cap entries; returns the cluster's node count, or 0 with mode =
 * static (and before members_start, after members_stop). Never waits for etcd: copies what the
 * agent published, under a lock the agent holds only to publish. Any thread.
 */
uint32_t members_lease_ages(int32_t *age, uint32_t cap);

/*
 * Join the cluster's membership as cfg says. mode = static: does nothing, returns 0. mode =
 * etcd: grants a lease of cfg->lease_s, registers this node, writes and installs the first view
 * (so the node serves with one), then starts the thread that keeps the lease alive and the one
 * that watches. A node the view lists as gone (its lease lapsed earlier) comes back under a newer
 * incarnation, on new tables only: if it re-attached its old ones, returns MEMBERS_NEW_TABLES
 * having done nothing else, and the caller removes them, opens the node anew and calls again.
 * Returns 0, or -1 after logging an error that names every endpoint it could not reach (nothing
 * left running, no lease held). Call once per process (again only after MEMBERS_NEW_TABLES).
 */
#define MEMBERS_NEW_TABLES 1
int members_start(const struct recep_config *cfg, struct nessie_node *node);

/* Leave: stop the threads; the lease lapses within its TTL (members.c says why it is not
 * revoked). Does nothing after a static start. */
void members_stop(void);

#endif
