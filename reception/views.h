/*
 * views.h - the rules of the cluster's view, apart from etcd (members.c reads and writes it):
 * the format of the view key's value, and which member set the next view should have.
 *
 * Pure functions of what they are given: no I/O, no locks; view_want logs a node's return once.
 */
#ifndef NESSIE_RECEPTION_VIEWS_H
#define NESSIE_RECEPTION_VIEWS_H

#include <stdbool.h>
#include <stdint.h>

#include "nessie/nessie.h"

/* A member set: the live members' incarnations, the fenced nodes, and when a node was last
 * readmitted. */
struct live {
    uint64_t inc[NESSIE_NODES_MAX]; /* live: its incarnation (they start at 1); 0: not live */
    /* Lost its lease in an earlier view: fenced, with the incarnation it had (0: unknown), until
     * it comes back under a newer one and every live member has scrubbed (view_want). */
    bool gone[NESSIE_NODES_MAX];
    uint64_t gone_inc[NESSIE_NODES_MAX];
    /* The epoch of the last view that readmitted a node (0: none): a view that fences a node is
     * written and acted on only once every live member's scrub has passed it (its orphans are
     * out: membership.h, "Rejoin"). */
    uint64_t readmit;
};

/* Parse a view value "<epoch> [r<readmit>] <ID>:<inc> ... <ID>:gone@<inc> ..." into *epoch and
 * *lv ("<ID>:gone", an earlier form, is gone at incarnation 0). Returns 0, or -1 for a value
 * that is not a view (then *lv is cleared). */
int view_parse(const char *s, uint64_t *epoch, struct live *lv);

/* The value of a view of epoch over lv (g_free it). Never fails (glib aborts when out of
 * memory). view_parse reads it back as it was. */
char *view_format(uint64_t epoch, const struct live *lv);

/* The member set the view after the one of epoch (inview) should have, into *want, from the
 * registrations (now: the registered nodes' incarnations) and the members' scrubs (acked[i]:
 * the view epoch node i's scrub is done for). Equal to *inview when no view is to be written. */
void view_want(const struct live *inview, uint64_t epoch, const struct live *now,
               const uint64_t *acked, struct live *want);

#endif
