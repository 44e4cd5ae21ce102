/*
 * changes.c - the daemon's part in a change of membership (changes.h says what, and which keys).
 */
#include "changes.h"

#include <glib.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "etcd.h"
#include "log.h"

/* The phases as this daemon counts them: installed in this order, never skipped. */
enum ch_phase { CH_NONE = 0, CH_ANNOUNCE, CH_MOVE, CH_COMMIT };
static const char *const ch_phase_name[] = {"none", "announce", "move", "commit"};

/*
 * The daemon's change: file-static because a daemon plays one node in one cluster, and at most
 * one change is in progress (the engine refuses a second). Written by the agent thread only
 * (changes_read_*, changes_install, changes_ack), but for mover_from_ns, which the recycler reads.
 */
static struct {
    bool open;
    struct nessie_node *node;
    uint32_t self, node_ids;
    char *change_key, *acks_prefix, *placed_key;
    uint64_t v_ns, f_ns, span_ns; /* V, F, and an attempt's span, E + F */
    uint64_t n;              /* the change installed here (its number), 0 for none yet */
    uint32_t id;             /* the node it adds or retires */
    bool retire;             /* a retire (else an add) */
    enum ch_phase phase;     /* its phase as installed here */
    uint64_t phase_ns;       /* when that phase was installed (CLOCK_MONOTONIC) */
    enum ch_phase acked;     /* the last phase acknowledged in etcd */
    bool failed;             /* the engine refused the change: said once, nothing more done */
    /* What the last round's read found: the change key's value and the placed key's (NULL: no
     * such key), for changes_install. */
    char *change_value, *placed_value;
    uint64_t placed_n;       /* the placed record last applied (its change number) */
    bool placed_applied;     /* ... and whether one was (0 is a valid record number too) */
    char *bad_value;         /* the last malformed change or placed value warned about */
    _Atomic uint64_t mover_from_ns; /* the mover may run from then on; 0: not now */
} ch;

int changes_open(struct nessie_node *node, const char *cluster_prefix, uint32_t self,
                 uint64_t view_lease_ms)
{
    const struct nessie_config *cfg = nessie_node_config(node);
    memset(&ch, 0, sizeof(ch));
    ch.node = node;
    ch.self = self;
    ch.node_ids = cfg->node_ids ? cfg->node_ids : cfg->nodes;
    ch.change_key = g_strdup_printf("%schange", cluster_prefix);
    ch.acks_prefix = g_strdup_printf("%schanged/", cluster_prefix);
    ch.placed_key = g_strdup_printf("%splaced", cluster_prefix);
    ch.v_ns = view_lease_ms * 1000000ULL;
    ch.f_ns = nessie_node_request_bound_ms(node) * 1000000ULL;
    ch.span_ns = (uint64_t)cfg->expiration_ms * 1000000ULL + ch.f_ns;
    atomic_init(&ch.mover_from_ns, 0);
    ch.open = true;
    return 0;
}

void changes_close(void)
{
    g_free(ch.change_key);
    g_free(ch.acks_prefix);
    g_free(ch.placed_key);
    g_free(ch.change_value);
    g_free(ch.placed_value);
    g_free(ch.bad_value);
    memset(&ch, 0, sizeof(ch));
}

/* "<N> <ID> <ID> ...": *n and placed[] for the ids named (all below the capacity, at least one).
 * Returns 0, or -1 for anything else. */
static int placed_parse(const char *s, uint64_t *n, bool *placed, uint32_t cap)
{
    char *end;
    memset(placed, 0, cap * sizeof(*placed));
    *n = strtoull(s, &end, 10);
    if (end == s)
        return -1;
    uint32_t count = 0;
    for (s = end; *s;) {
        while (*s == ' ')
            s++;
        if (!*s)
            break;
        unsigned long id = strtoul(s, &end, 10);
        if (end == s || id >= cap || (*end != ' ' && *end != '\0'))
            return -1;
        placed[id] = true;
        count++;
        s = end;
    }
    return count ? 0 : -1;
}

/* Warn of a malformed value once, not at every read (about ten a second). */
static void warn_bad(const char *key, const char *value, const char *what)
{
    if (ch.bad_value && strcmp(ch.bad_value, value) == 0)
        return;
    g_free(ch.bad_value);
    ch.bad_value = g_strdup(value);
    log_warn("changes: %s = \"%s\" is not %s: ignored", key, value, what);
}

void changes_read_begin(void)
{
    if (!ch.open)
        return;
    g_free(ch.change_value);
    g_free(ch.placed_value);
    ch.change_value = ch.placed_value = NULL;
}

void changes_read_key(const char *key, const char *value)
{
    if (!ch.open)
        return;
    char **slot = strcmp(key, ch.change_key) == 0   ? &ch.change_value
                  : strcmp(key, ch.placed_key) == 0 ? &ch.placed_value
                                                    : NULL;
    if (slot) {
        g_free(*slot);
        *slot = g_strdup(value);
    }
}

/* Apply the placed record read last, if it is newer than the one applied and no change is in
 * progress in the engine (one that is ends with the same placement). Returns 0, or -1 when it
 * is malformed or refused (logged). */
static int apply_placed(void)
{
    if (!ch.placed_value)
        return 0;
    bool *placed = g_new0(bool, ch.node_ids);
    uint64_t n;
    int rc = 0;
    uint32_t id;
    enum nessie_change_kind kind;
    enum nessie_change_phase phase;
    if (placed_parse(ch.placed_value, &n, placed, ch.node_ids) != 0) {
        warn_bad(ch.placed_key, ch.placed_value, "a set of placed members of this cluster");
        rc = -1;
    } else if ((!ch.placed_applied || n > ch.placed_n) &&
               nessie_change_get(ch.node, &id, &kind, &phase) == NESSIE_NOT_FOUND) {
        if (nessie_members_placed(ch.node, placed, ch.node_ids) != NESSIE_OK) {
            warn_bad(ch.placed_key, ch.placed_value, "a set of placed members of this cluster");
            rc = -1;
        } else {
            ch.placed_n = n;
            ch.placed_applied = true;
        }
    }
    g_free(placed);
    return rc;
}

/* "<N> add|retire <ID> <phase>", N > 0, ID below the capacity. Returns 0, or -1. */
static int change_parse(const char *s, uint64_t *n, uint32_t *id, bool *retire,
                        enum ch_phase *phase)
{
    char kind[16], ph[16];
    unsigned long long nn;
    unsigned long i;
    int used = 0;
    if (sscanf(s, "%llu %15s %lu %15s%n", &nn, kind, &i, ph, &used) != 4 || s[used] != '\0' ||
        nn == 0 || i >= ch.node_ids || (strcmp(kind, "add") != 0 && strcmp(kind, "retire") != 0))
        return -1;
    *n = nn;
    *retire = strcmp(kind, "retire") == 0;
    *id = (uint32_t)i;
    for (int p = CH_ANNOUNCE; p <= CH_COMMIT; p++)
        if (strcmp(ph, ch_phase_name[p]) == 0) {
            *phase = (enum ch_phase)p;
            return 0;
        }
    return -1;
}

/* What the change does, for the logs. */
static const char *what(void) { return ch.retire ? "retire" : "add"; }

/* Install the phase after ch.phase. Returns whether it went in. */
static bool step(void)
{
    enum ch_phase next = (enum ch_phase)(ch.phase + 1);
    int rc = next == CH_COMMIT
                 ? nessie_change_commit(ch.node)
                 : nessie_change_set(ch.node, ch.id,
                                     ch.retire ? NESSIE_CHANGE_RETIRE : NESSIE_CHANGE_ADD,
                                     next == CH_ANNOUNCE ? NESSIE_CHANGE_ANNOUNCE
                                                         : NESSIE_CHANGE_MOVE);
    if (rc != NESSIE_OK) {
        log_error("changes: change %" PRIu64 " (%s of node %u): the engine refuses its %s "
                  "phase (%s); this node takes no further part in it", ch.n, what(), ch.id,
                  ch_phase_name[next], nessie_strerror(rc));
        ch.failed = true;
        return false;
    }
    ch.phase = next;
    ch.phase_ns = nessie_mono_ns();
    if (next == CH_MOVE) {
        /* V + F, then one attempt's span, E + F, from now (changes.h) */
        atomic_store(&ch.mover_from_ns, ch.phase_ns + ch.v_ns + ch.f_ns + ch.span_ns);
    } else if (next == CH_COMMIT) {
        atomic_store(&ch.mover_from_ns, 0);
    }
    const uint64_t wait_ms = (ch.v_ns + ch.f_ns + ch.span_ns) / 1000000;
    if (!ch.retire) {
        if (next == CH_ANNOUNCE)
            log_info("changes: change %" PRIu64 ": node %u is added: announced (its positions "
                     "are read, not written, until the move phase)", ch.n, ch.id);
        else if (next == CH_MOVE)
            log_info("changes: change %" PRIu64 ": move phase: this node's leaving entries move "
                     "to node %u in %" PRIu64 " ms", ch.n, ch.id, wait_ms);
        else
            log_info("changes: change %" PRIu64 ": committed: node %u is a member (this node "
                     "moved %" PRIu64 " entries in all)", ch.n, ch.id, nessie_moved(ch.node));
    } else if (ch.id == ch.self) {
        if (next == CH_ANNOUNCE)
            log_info("changes: change %" PRIu64 ": this node is retired: announced (from now on "
                     "it writes nothing new: its clients' writes run on the other nodes)", ch.n);
        else if (next == CH_MOVE)
            log_info("changes: change %" PRIu64 ": move phase: the other nodes move this node's "
                     "entries and values out in %" PRIu64 " ms", ch.n, wait_ms);
        else
            log_info("changes: change %" PRIu64 ": committed: this node is no longer a member and "
                     "serves nothing; its memory stays readable %" PRIu64 " ms for calls planned "
                     "before the commit, then it may be stopped", ch.n,
                     (ch.v_ns + ch.f_ns) / 1000000);
    } else {
        if (next == CH_ANNOUNCE)
            log_info("changes: change %" PRIu64 ": node %u is retired: announced (it writes "
                     "nothing new from now on)", ch.n, ch.id);
        else if (next == CH_MOVE)
            log_info("changes: change %" PRIu64 ": move phase: in %" PRIu64 " ms this node "
                     "relocates the values of node %u its index names and moves its share of "
                     "node %u's index", ch.n, wait_ms, ch.id, ch.id);
        else
            log_info("changes: change %" PRIu64 ": committed: node %u is no longer a member "
                     "(this node moved or relocated %" PRIu64 " entries in all)", ch.n, ch.id,
                     nessie_moved(ch.node));
    }
    return true;
}

int changes_install(bool strict)
{
    if (!ch.open)
        return 0;
    uint64_t n;
    uint32_t id;
    bool retire;
    enum ch_phase want;
    /* The placement committed so far first: a daemon that starts during a change steps through
     * its phases from the placement before it, which the placed record holds (applied only
     * while no change is in progress in the engine). */
    int placed_rc = apply_placed();
    if (!ch.change_value) {
        if (ch.n && ch.phase != CH_COMMIT && !ch.failed)
            log_warn("changes: change %" PRIu64 " (%s of node %u) was withdrawn at its %s "
                     "phase: the engine keeps it as it is", ch.n, what(), ch.id,
                     ch_phase_name[ch.phase]);
        ch.failed = ch.failed || (ch.n && ch.phase != CH_COMMIT);
        return placed_rc != 0 && strict ? -1 : 0;
    }
    if (change_parse(ch.change_value, &n, &id, &retire, &want) != 0) {
        warn_bad(ch.change_key, ch.change_value,
                 "a change (\"<N> add|retire <ID> announce|move|commit\")");
        return placed_rc != 0 && strict ? -1 : 0;
    }
    if (n != ch.n) {
        if (ch.n && ch.phase != CH_COMMIT && !ch.failed)
            log_warn("changes: change %" PRIu64 " replaced change %" PRIu64 " at its %s phase",
                     n, ch.n, ch_phase_name[ch.phase]);
        uint32_t cur_id;
        enum nessie_change_kind kind;
        enum nessie_change_phase cur;
        bool engine_busy = nessie_change_get(ch.node, &cur_id, &kind, &cur) == NESSIE_OK;
        ch.n = n;
        ch.id = id;
        ch.retire = retire;
        ch.phase = CH_NONE;
        ch.acked = CH_NONE;
        ch.failed = engine_busy;
        if (engine_busy)
            log_error("changes: change %" PRIu64 " comes while the engine has another in "
                      "progress: this node takes no part in it", n);
        else if (want == CH_COMMIT) {
            /* Committed before this daemon saw it (it started during the commit): the placed
             * record written with the commit has the change (applied below). */
            ch.phase = CH_COMMIT;
        }
    }
    if (!ch.failed) {
        /* In order: a daemon that starts while a change is under way has no calls in flight,
         * so stepping through the earlier phases at once is what every member did, only
         * faster. */
        while (ch.phase < want && step())
            ;
    }
    /* After a commit: the record written with it (the same placement) is the last applied. */
    if (apply_placed() != 0)
        placed_rc = -1;
    return placed_rc != 0 && strict ? -1 : 0;
}

void changes_ack(CURL *curl, int64_t lease)
{
    if (!ch.open || ch.failed || !ch.n || !ch.change_value)
        return;
    /* The retired node acknowledges its commit V + F after it installed it: nodes that have not
     * read the commit plan under the move phase (its index) until their view lease runs out,
     * and what they posted lands F later (model/retire.pml, BUG_UNREACH_AT_COMMIT); whoever
     * stops its daemon waits for this. */
    const uint64_t now = nessie_mono_ns();
    bool done = (ch.phase == CH_COMMIT &&
                 (!ch.retire || ch.id != ch.self || now >= ch.phase_ns + ch.v_ns + ch.f_ns)) ||
                (ch.phase == CH_ANNOUNCE && now >= ch.phase_ns + ch.span_ns) ||
                (ch.phase == CH_MOVE && nessie_move_over(ch.node));
    if (!done || ch.acked == ch.phase)
        return;
    char key[256], val[64];
    snprintf(key, sizeof(key), "%s%u", ch.acks_prefix, ch.self);
    snprintf(val, sizeof(val), "%" PRIu64 " %s", ch.n, ch_phase_name[ch.phase]);
    if (etcd_put(curl, key, val, lease, NESSIE_LOG_WARN) == 0) {
        ch.acked = ch.phase;
        log_debug("changes: change %" PRIu64 ": acknowledged its %s phase", ch.n,
                  ch_phase_name[ch.phase]);
    }
}

void changes_lease_changed(void)
{
    ch.acked = CH_NONE; /* the acknowledgement went with the old lease: written again */
}

bool changes_mover_due(void)
{
    uint64_t from = atomic_load_explicit(&ch.mover_from_ns, memory_order_relaxed);
    return from && nessie_mono_ns() >= from;
}
