/*
 * members.c - the cluster's view agreed through etcd (members.h says what and which keys).
 *
 * Three threads. The keeper keeps the lease alive (every third of its TTL, and within a second
 * again after a beat that failed), on a thread of its own so that nothing else this daemon asks
 * etcd can delay it: a reconcile is several requests, each of which may wait seconds for a loaded
 * etcd, and a keep-alive queued behind them once let a live daemon's lease lapse (the 1-vCPU
 * guests of `make test-rxe` on a slower machine). The agent reconciles: it reads
 * the members and the view, writes a new view when the member set differs from the view's (a
 * transaction that compares the view key's mod_revision, so of several daemons that see the same
 * change exactly one writes epoch+1 and the others read it), and installs the view it read. The
 * watcher holds a streaming watch (POST /v3/watch on the gateway, which answers with one JSON
 * message per line for as long as the connection lasts) on the cluster's prefix and wakes the
 * agent on any event. Streaming rather than polling: a change is seen within a round trip, and
 * an idle cluster sends nothing. The watcher does not parse the events: any of them only means
 * "read again", so a missed or garbled message costs nothing, and the agent also reconciles
 * every MEMBERS_REFRESH_MS, which bounds how long a lost watch could hide a change. About once a
 * second while the stats read them (every ten seconds otherwise) the agent also asks etcd how long
 * ago each member's lease was renewed, for the stats (members_lease_ages), which read its last
 * answers and never wait for etcd.
 */
#include "members.h"

#include <curl/curl.h>
#include <errno.h>
#include <glib.h>
#include <inttypes.h>
#include <json-glib/json-glib.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "changes.h"
#include "clock.h"
#include "etcd.h"
#include "log.h"
#include "views.h"

/* Tunables, with their reasons. */
/* The watcher's pause before it re-opens a watch that ended (etcd restarting, endpoint gone):
 * short, since the agent's own reconcile covers the gap anyway. */
#define MEMBERS_REWATCH_MS 200
/* How often the agent reads the view even with no event (membership.h, "Acting on a view"):
 * each read that finds no newer view renews the engine's view lease, so this bounds how long a
 * node's calls pause when a view fences a node (from the last read before the new view was
 * written to the first after) and how stale a view a node can act on. It costs etcd one range
 * read (of a few small keys) per node per period: little for an etcd on a server, but in the
 * one-vCPU TCG guest of make test-rxe each request costs it milliseconds (reconcile). */
#define MEMBERS_REFRESH_MS 100
/* etcd removes an expired lease at its next check (the lessor's, every 500 ms) and then the
 * watch and a reconcile see it: what the lease's lapse costs on top of its TTL, at most. */
#define MEMBERS_EXPIRY_SLOP_MS 1000
/* How often the agent asks etcd how long ago each member's lease was renewed (members_lease_ages):
 * a figure for people and tools, so once a second is plenty. It costs one request per registered
 * member, so a cluster of N nodes asks etcd N x N times a period: once a second only while this
 * node's stats are read (within MEMBERS_AGES_WANTED_MS of the last read), else every
 * MEMBERS_AGES_IDLE_MS, so that a scrape now and then still finds ages, at most that old. Asked
 * every second always, 4 daemons' 16 requests a second were a quarter of what etcd answered in
 * make test-rxe's guest, where each costs it milliseconds of its one emulated CPU. */
#define MEMBERS_AGES_MS 1000
#define MEMBERS_AGES_IDLE_MS 10000
#define MEMBERS_AGES_WANTED_MS 30000
/* How soon the keeper tries again after a keep-alive that no endpoint answered: well within the
 * TTL (whose third is the normal beat), so a few seconds of etcd trouble cost no lease, and not
 * so often that an etcd down for minutes fills the log (each failure is one warning). */
#define MEMBERS_KEEPALIVE_RETRY_MS 1000

/*
 * The daemon's membership: file-static because a daemon plays one node of one cluster and has
 * one membership, which its two threads and members_stop() share without a handle passed
 * around (memcached's style for a subsystem). Written by members_start before the threads start;
 * after that, the fields under lock are the threads' rendezvous and the rest is read-only,
 * (the endpoints are etcd.c's).
 */
static struct {
    bool running;              /* members_start went through with mode = etcd */
    struct nessie_node *node;
    uint32_t self, nodes;
    uint32_t lease_s;
    uint64_t incarnation;      /* what this node registers: nessie_node_incarnation() */
    char *members_prefix;      /* /nessie/<name>/members/ */
    char *view_key;            /* /nessie/<name>/view */
    char *cluster_prefix;      /* /nessie/<name>/ : what the watcher watches */
    char *scrubbed_prefix;     /* /nessie/<name>/scrubbed/ : each member's scrub, done for */
    uint64_t acked_epoch;      /* what this daemon wrote there last (agent thread only) */
    /* This daemon's lease ID: written by the agent (register_self), read by the keeper; and the
     * ID the keeper found expired, for the agent to register again (0: none). Relaxed: each is
     * one word on its own, and a keep-alive of an ID just replaced only finds it expired. */
    _Atomic int64_t lease, lapsed;
    /* Incarnations of members seen in earlier views, so a member that left is shown as gone
     * with the incarnation it had (agent thread only after start). */
    uint64_t last_inc[NESSIE_NODES_MAX];
    bool seen[NESSIE_NODES_MAX];
    /* The view lease (membership.h): V = view_lease_ms; fenced[] what this daemon has installed
     * as gone; a view that fences more waits V from when it was first read (pending_*) before it
     * is installed. Agent thread only after start; `adopting` is false until the first view is
     * in (a new process has no calls under an older view, so its first view needs no wait). */
    uint64_t view_lease_ms;
    bool fenced[NESSIE_NODES_MAX];
    uint64_t pending_epoch, pending_since_ns;
    bool adopting;
    /* The etcd lease each member's key was under at the last reconcile's read (0: no key), and
     * whether that read went through (agent thread only after start): what ages_refresh asks
     * etcd about. */
    int64_t reg_lease[NESSIE_NODES_MAX];
    bool reg_read;
    pthread_t agent, watcher, keeper;
    pthread_mutex_t lock;
    pthread_cond_t cond;       /* wakes the agent */
    pthread_cond_t keeper_cond; /* wakes the keeper (only to stop) */
    bool stop, dirty;          /* under lock */
    atomic_bool stopping;      /* the watcher's curl progress callback reads it without the lock */
} members;

/* The members' lease ages as the agent last published them (members_lease_ages): apart from the
 * rest so that stats copy them under a lock of their own, which the agent holds only to copy its
 * answers in, never across a request to etcd. n is 0 when no membership runs. */
static struct {
    pthread_mutex_t lock;
    uint32_t n;
    int32_t age[NESSIE_NODES_MAX]; /* seconds, or MEMBERS_AGE_NONE / MEMBERS_AGE_UNKNOWN */
    uint64_t asked_ms;             /* the last members_lease_ages (CLOCK_MONOTONIC), 0: never */
} ages = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* How often the agent asks etcd for the ages now: every MEMBERS_AGES_MS while the stats read
 * them, else every MEMBERS_AGES_IDLE_MS. */
static uint64_t ages_period_ms(void)
{
    pthread_mutex_lock(&ages.lock);
    bool wanted = ages.asked_ms && nessie_mono_ms() - ages.asked_ms < MEMBERS_AGES_WANTED_MS;
    pthread_mutex_unlock(&ages.lock);
    return wanted ? MEMBERS_AGES_MS : MEMBERS_AGES_IDLE_MS;
}

/* --- the lease and the registration ------------------------------------------------------- */

/* Grant a lease and put this node's key under it. Returns 0, or -1 (logged at level). */
static int register_self(CURL *curl, enum nessie_log_level level)
{
    char *body = g_strdup_printf("{\"TTL\": %u}", members.lease_s);
    JsonParser *p = etcd_call(curl, "/v3/lease/grant", body, level);
    g_free(body);
    if (!p)
        return -1;
    int64_t id = etcd_jint(etcd_root(p), "ID"), ttl = etcd_jint(etcd_root(p), "TTL");
    g_object_unref(p);
    if (id == 0) {
        nessie_log(level, "members: etcd granted no lease");
        return -1;
    }
    char key[256], val[32];
    snprintf(key, sizeof(key), "%s%u", members.members_prefix, members.self);
    snprintf(val, sizeof(val), "%" PRIu64, members.incarnation);
    if (etcd_put(curl, key, val, id, level) != 0)
        return -1;
    atomic_store_explicit(&members.lease, id, memory_order_relaxed);
    members.acked_epoch = 0; /* the old lease's ack went with it */
    changes_lease_changed();   /* ... and the change's */
    log_info("members: node %u registered as incarnation %" PRIu64 " under lease %" PRIx64
             " (TTL %" PRId64 " s)", members.self, members.incarnation, (uint64_t)id, ttl);
    return 0;
}

/* Renew the lease (the keeper's thread). Returns false when no endpoint answered (logged). A
 * lease that expired meanwhile (the daemon stalled past its TTL) is handed to the agent, which
 * registers again (register_self) under a new one; but the view that removed this node fenced it
 * in this incarnation: it stays out, and serves nothing, until it is started again (it then comes
 * back on new tables and rejoins: members_start). */
static bool keep_alive(CURL *curl)
{
    int64_t lease = atomic_load_explicit(&members.lease, memory_order_relaxed);
    char *body = g_strdup_printf("{\"ID\": \"%" PRId64 "\"}", lease);
    JsonParser *p = etcd_call(curl, "/v3/lease/keepalive", body, NESSIE_LOG_WARN);
    g_free(body);
    if (!p)
        return false;
    JsonObject *o = etcd_root(p);
    JsonObject *res = json_object_has_member(o, "result") ? json_object_get_object_member(o, "result")
                                                          : o;
    int64_t ttl = etcd_jint(res, "TTL");
    g_object_unref(p);
    int64_t none = 0;
    if (ttl <= 0 &&
        atomic_compare_exchange_strong_explicit(&members.lapsed, &none, lease, memory_order_relaxed,
                                                memory_order_relaxed)) {
        log_warn("members: lease %" PRIx64 " expired (this daemon was removed from the view); "
                 "registering again (it stays fenced until it is started again)", (uint64_t)lease);
        pthread_mutex_lock(&members.lock);
        members.dirty = true;
        pthread_cond_signal(&members.cond);
        pthread_mutex_unlock(&members.lock);
    }
    return true;
}

/* --- views -------------------------------------------------------------------------------- */

/* The registrations as a range read them: each member's incarnation (no node gone: a struct
 * live of registered members only), and the etcd lease its key is under. */
struct regs {
    struct live lv;
    int64_t lease[NESSIE_NODES_MAX];
};

/* The node a per-member key names (prefix then the decimal id). Returns the id, or -1 for a key
 * that names no node of this cluster. */
static long member_of(const char *key, const char *prefix)
{
    const char *id = key + strlen(prefix);
    char *end;
    unsigned long n = strtoul(id, &end, 10);
    return end != id && *end == '\0' && n < members.nodes ? (long)n : -1;
}

static void on_member(void *arg, const char *k, const char *v, int64_t mod, int64_t lease)
{
    (void)mod;
    struct regs *rg = arg;
    long n = member_of(k, members.members_prefix);
    uint64_t inc = strtoull(v, NULL, 10);
    if (n >= 0 && inc > 0) {
        rg->lv.inc[n] = inc;
        rg->lease[n] = lease;
    } else {
        log_warn("members: ignoring %s = %s (not a node id of this cluster, below %u)", k, v,
                 members.nodes);
    }
}

struct view_read {
    bool found;
    char *value;
    int64_t mod;
};

static void on_view(void *arg, const char *k, const char *v, int64_t mod, int64_t lease)
{
    (void)k, (void)lease;
    struct view_read *vr = arg;
    g_free(vr->value);
    vr->value = g_strdup(v);
    vr->mod = mod;
    vr->found = true;
}

/* Install the view of epoch over lv into the engine (its fenced nodes listed as gone, with the
 * incarnation they had when last seen live); log it once, when it is new here. Returns whether
 * the engine now holds it (installed, or already). */
static bool install(uint64_t epoch, const struct live *lv)
{
    struct nessie_view *v = g_new0(struct nessie_view, 1);
    v->epoch = epoch;
    GString *line = g_string_new(NULL), *gone = g_string_new(NULL);
    uint32_t live = 0;
    for (uint32_t i = 0; i < members.nodes; i++) {
        if (lv->inc[i]) {
            members.seen[i] = true;
            members.last_inc[i] = lv->inc[i];
        } else if (!lv->gone[i]) {
            continue;
        }
        struct nessie_view_member *m = &v->members[v->nmembers++];
        m->node = i;
        m->incarnation = lv->inc[i]       ? lv->inc[i]
                         : lv->gone_inc[i] ? lv->gone_inc[i]
                         : members.seen[i] ? members.last_inc[i]
                                           : 0;
        m->state = lv->inc[i] ? NESSIE_MEMBER_LIVE : NESSIE_MEMBER_GONE;
        if (lv->inc[i]) {
            g_string_append_printf(line, " %u (incarnation %" PRIu64 ")", i, lv->inc[i]);
            live++;
        } else {
            g_string_append_printf(gone, " %u", i);
        }
    }
    int rc = nessie_view_install(members.node, v);
    GString *back = g_string_new(NULL);
    if (rc == NESSIE_OK || rc == NESSIE_EXISTS)
        for (uint32_t i = 0; i < members.nodes; i++) {
            if (members.fenced[i] && lv->inc[i])
                g_string_append_printf(back, " %u", i);
            members.fenced[i] = lv->gone[i] || (members.fenced[i] && !lv->inc[i]);
        }
    if (rc == NESSIE_OK) {
        log_info("view %" PRIu64 ": members%s (%u live)%s%s%s%s", epoch, line->str, live,
                 gone->len ? "; gone:" : "", gone->str, back->len ? "; readmitted:" : "",
                 back->str);
        if (lv->gone[members.self] && members.incarnation > lv->gone_inc[members.self])
            log_info("members: node %u is back as incarnation %" PRIu64 " and serves once a view "
                     "readmits it", members.self, members.incarnation);
        else if (lv->gone[members.self])
            log_error("members: node %u lost its lease and is out of the cluster (view %" PRIu64
                      "): it serves nothing, its calls fail; started again (its service "
                      "manager, or `nessie-cluster start`) it comes back with new tables and "
                      "rejoins", members.self, epoch);
    } else if (rc != NESSIE_EXISTS) {
        log_warn("members: view %" PRIu64 " not installed: %s", epoch, nessie_strerror(rc));
    }
    g_string_free(line, TRUE);
    g_string_free(gone, TRUE);
    g_string_free(back, TRUE);
    g_free(v);
    return rc == NESSIE_OK || rc == NESSIE_EXISTS;
}

/*
 * Act on the view of epoch over lv, read from etcd by a request sent at read_ns (CLOCK_MONOTONIC):
 * install it, and renew the engine's view lease to read_ns + V, since the view was current then
 * (etcd answered after read_ns). A view that fences a node this daemon has not fenced yet is
 * installed only V after it was first read; from that first read the nodes it fences are
 * suspended (nothing of their memory touched: calls that need them wait for the view), and the
 * lease is renewed as before for the calls that do not need them, which act the same under both
 * views; other nodes act on the new view only V after they read it, so the two placements never
 * act at once on what they disagree about (membership.h, "Acting on a view"). A view that
 * readmits a node is acted on the same way, the positions that go back to it no longer drawn
 * elsewhere from its first read (nessie_view_rejoin); and a view that fences a node only once
 * every live member's scrub has passed the last readmission (acked: the epoch each member's
 * scrub is done for), so no orphan of it is found at the positions drawn again (membership.h,
 * "Rejoin"; such a view is also written only then: views.c view_want, which is what covers a
 * node that never acted on the readmission and so has no fence to wait for here). This node gone from the view: installed (it serves nothing then), never renewed.
 */
static void adopt(uint64_t epoch, const struct live *lv, uint64_t read_ns, const uint64_t *acked)
{
    bool fences = false, readmits = false;
    for (uint32_t i = 0; i < members.nodes; i++) {
        fences = fences || (lv->gone[i] && !members.fenced[i]);
        readmits = readmits || (lv->inc[i] && members.fenced[i]);
    }
    bool swept = true;
    /* The last readmission before this view: one in this view itself (views.c never writes
     * such a view) would wait for acks that no member gives before acting on it. */
    for (uint32_t i = 0; fences && lv->readmit && lv->readmit < epoch && i < members.nodes; i++)
        swept = swept && (!lv->inc[i] || acked[i] >= lv->readmit);
    uint64_t v_ns = members.view_lease_ms * 1000000ULL;
    /* Acted on V + F after its first read: F, the fabric's request bound, for what the calls under
     * the older view posted to land (membership.h). */
    uint64_t delay_ns = v_ns + nessie_node_request_bound_ms(members.node) * 1000000ULL;
    if ((fences || readmits) && members.adopting) {
        if (members.pending_epoch != epoch) {
            members.pending_epoch = epoch;
            members.pending_since_ns = read_ns;
            for (uint32_t i = 0; i < members.nodes; i++) {
                if (lv->gone[i] && !members.fenced[i] && i != members.self)
                    nessie_view_suspend(members.node, i);
                if (lv->inc[i] && members.fenced[i] && i != members.self)
                    nessie_view_rejoin(members.node, i);
            }
            log_info("members: view %" PRIu64 " %s: acted on in %" PRIu64 " ms, once every "
                     "member's calls under the older view are over%s", epoch,
                     fences && readmits ? "fences a node and readmits one"
                     : fences           ? "fences a node: not touched from now on"
                                        : "readmits a node",
                     (uint64_t)(delay_ns / 1000000ULL),
                     swept ? "" : ", and every live member's scrub has passed the last rejoin");
        }
        if (nessie_mono_ns() < members.pending_since_ns + delay_ns || !swept) {
            if (!lv->gone[members.self])
                nessie_view_renew(members.node, read_ns + v_ns); /* for calls clear of it */
            return;
        }
    }
    /* A view the engine refuses (one reviving a fenced node: etcd's keys were reset under a
     * running cluster) is not current here: no renewal, so this node's calls stop. */
    if (!install(epoch, lv))
        return;
    members.adopting = true;
    if (!lv->gone[members.self])
        nessie_view_renew(members.node, read_ns + v_ns);
}

static void on_scrubbed(void *arg, const char *k, const char *v, int64_t mod, int64_t lease)
{
    (void)mod, (void)lease;
    uint64_t *acked = arg;
    long n = member_of(k, members.scrubbed_prefix);
    if (n >= 0)
        acked[n] = strtoull(v, NULL, 10);
}

/* Tell the others, under this daemon's lease, the view epoch its scrub is done for (every fence
 * change it installed by then has had its pass: nessie_scrub_done), when that moved. Best effort:
 * a failed put is tried again at the next reconcile. */
static void ack_scrub(CURL *curl)
{
    uint64_t epoch = nessie_view_epoch(members.node);
    if (epoch <= members.acked_epoch ||
        nessie_scrub_done(members.node) != nessie_fence_changes(members.node))
        return;
    char key[256], val[32];
    snprintf(key, sizeof(key), "%s%u", members.scrubbed_prefix, members.self);
    snprintf(val, sizeof(val), "%" PRIu64, epoch);
    if (etcd_put(curl, key, val, members.lease, NESSIE_LOG_WARN) == 0) {
        members.acked_epoch = epoch;
        log_debug("members: node %u's scrub is done for view %" PRIu64, members.self, epoch);
    }
}

/* What one range read of the cluster's keys (its prefix) gives a reconcile round: the
 * registrations, the view, the scrubs' epochs, and the change and placed record (changes.h). */
struct round_read {
    struct regs *reg;
    struct view_read *vr;
    uint64_t *acked;
};

static bool has_prefix(const char *k, const char *prefix)
{
    return strncmp(k, prefix, strlen(prefix)) == 0;
}

static void on_cluster_key(void *arg, const char *k, const char *v, int64_t mod, int64_t lease)
{
    struct round_read *rr = arg;
    if (has_prefix(k, members.members_prefix))
        on_member(rr->reg, k, v, mod, lease);
    else if (strcmp(k, members.view_key) == 0)
        on_view(rr->vr, k, v, mod, lease);
    else if (has_prefix(k, members.scrubbed_prefix))
        on_scrubbed(rr->acked, k, v, mod, lease);
    else
        changes_read_key(k, v); /* the change and the placed record; the acks are nessie-cluster's */
}

/*
 * Read the members, the view and the change in progress, all in one range read of the cluster's
 * prefix (one request a round: every member reconciles ten times a second, and with a request a
 * key a TCG guest's etcd spent more CPU answering them than the daemons did serving; one read
 * also gives one revision's snapshot of them all); when the view's member set is not the one
 * it should have (view_want: the registered members, less the fenced ones), write view epoch+1
 * with a transaction on the view key's mod_revision (of the daemons racing to write it, one
 * wins; the others' comparisons fail and they read the winner's); install what etcd holds.
 * Returns 0, or -1 when etcd could not be read (logged; the next beat tries again).
 */
static int reconcile(CURL *curl)
{
    struct regs *reg = g_new0(struct regs, 1);
    struct live *now = &reg->lv, *inview = g_new0(struct live, 1);
    struct live *want = g_new0(struct live, 1);
    struct view_read vr = {0};
    char *end = etcd_prefix_end(members.cluster_prefix);
    uint64_t *acked = g_new0(uint64_t, NESSIE_NODES_MAX);
    int rc = -1;
    members.reg_read = false;
    for (int round = 0; round < 2; round++) {
        memset(reg, 0, sizeof(*reg));
        g_free(vr.value);
        vr = (struct view_read){0};
        uint64_t read_ns = nessie_mono_ns(); /* before the request: the view is current after it */
        memset(acked, 0, NESSIE_NODES_MAX * sizeof(*acked));
        /* The change of membership in progress is read in the same range: its phase is
         * installed before the view lease this round's start vouches for is renewed
         * (changes.h). */
        changes_read_begin();
        struct round_read rr = {.reg = reg, .vr = &vr, .acked = acked};
        if (etcd_range(curl, members.cluster_prefix, end, on_cluster_key, &rr) != 0)
            goto out;
        memcpy(members.reg_lease, reg->lease, sizeof(members.reg_lease));
        members.reg_read = true;
        uint64_t epoch = 0;
        if (vr.found && view_parse(vr.value, &epoch, inview) != 0) {
            log_warn("members: %s = \"%s\" is not a view; writing a new one", members.view_key,
                     vr.value);
            memset(inview, 0, sizeof(*inview));
            epoch = 0;
            vr.found = false;
        }
        view_want(inview, epoch, now, acked, want);
        if (vr.found && memcmp(want, inview, sizeof(*want)) == 0) {
            /* At start (nothing adopted yet) a placement that cannot be read is an error. */
            if (changes_install(!members.adopting) != 0)
                goto out;
            adopt(epoch, inview, read_ns, acked);
            if (!inview->gone[members.self]) {
                ack_scrub(curl);
                changes_ack(curl, members.lease);
            }
            rc = 0;
            goto out;
        }
        if (round == 1)
            break; /* lost the race twice in a row: the next event or beat tries again */
        /* Compare mod_revision: 0 for a view key that does not exist yet. */
        char *val = view_format(epoch + 1, want);
        char *k64 = etcd_b64(members.view_key), *v64 = etcd_b64(val);
        char *body = g_strdup_printf(
            "{\"compare\": [{\"key\": \"%s\", \"target\": \"MOD\", \"result\": \"EQUAL\", "
            "\"mod_revision\": \"%" PRId64 "\"}], \"success\": [{\"request_put\": {\"key\": "
            "\"%s\", \"value\": \"%s\"}}]}", k64, vr.found ? vr.mod : 0, k64, v64);
        JsonParser *p = etcd_call(curl, "/v3/kv/txn", body, NESSIE_LOG_WARN);
        if (p && json_object_has_member(etcd_root(p), "succeeded") &&
            json_object_get_boolean_member(etcd_root(p), "succeeded"))
            log_debug("members: wrote %s = %s", members.view_key, val);
        if (p)
            g_object_unref(p);
        g_free(body), g_free(k64), g_free(v64), g_free(val);
        /* Won or lost, read again and install what etcd holds. */
    }
    rc = 0;
out:
    g_free(vr.value);
    g_free(end);
    g_free(acked);
    g_free(reg);
    g_free(inview);
    g_free(want);
    return rc;
}

/* --- lease ages --------------------------------------------------------------------------- */

/*
 * Ask etcd how long ago each registered member's lease was renewed, its granted TTL less what
 * remains of it (POST /v3/lease/timetolive, with the lease the last reconcile read the member's
 * key under), and publish the answers for members_lease_ages. etcd tells what remains in whole
 * seconds, rounded down, so an age is whole seconds rounded up. A member with no key, or whose
 * lease etcd no longer has, is MEMBERS_AGE_NONE; MEMBERS_AGE_UNKNOWN when the registrations could
 * not be read, or etcd not asked. Stops asking at the first request that fails (and logs it at
 * debug only: the reconcile's own reads warn of an etcd that does not answer), since this thread
 * also keeps the leases and the view alive and one dead endpoint must not cost it a timeout per
 * member.
 */
static void ages_refresh(CURL *curl)
{
    int32_t *age = g_new(int32_t, members.nodes);
    bool asking = members.reg_read;
    for (uint32_t i = 0; i < members.nodes; i++) {
        age[i] = MEMBERS_AGE_UNKNOWN;
        if (!asking)
            continue;
        if (members.reg_lease[i] == 0) {
            age[i] = MEMBERS_AGE_NONE;
            continue;
        }
        char *body = g_strdup_printf("{\"ID\": \"%" PRId64 "\"}", members.reg_lease[i]);
        JsonParser *p = etcd_call(curl, "/v3/lease/timetolive", body, NESSIE_LOG_DEBUG);
        g_free(body);
        if (!p) {
            asking = false;
            continue;
        }
        /* TTL -1: no such lease (it lapsed since the read); TTL omitted: under a second left. */
        int64_t ttl = etcd_jint(etcd_root(p), "TTL"), granted = etcd_jint(etcd_root(p), "grantedTTL");
        g_object_unref(p);
        if (ttl < 0)
            age[i] = MEMBERS_AGE_NONE;
        else if (granted > 0 && ttl <= granted)
            age[i] = (int32_t)(granted - ttl);
    }
    pthread_mutex_lock(&ages.lock);
    memcpy(ages.age, age, members.nodes * sizeof(*age));
    ages.n = members.nodes;
    pthread_mutex_unlock(&ages.lock);
    g_free(age);
}

/* --- the threads -------------------------------------------------------------------------- */

/* Wait on cond under members.lock until deadline_ms (CLOCK_MONOTONIC) or a signal. */
static void wait_until(pthread_cond_t *cond, uint64_t deadline_ms)
{
    uint64_t now = nessie_mono_ms();
    if (now >= deadline_ms)
        return;
    struct timespec ts = nessie_deadline_after_ms(CLOCK_MONOTONIC, deadline_ms - now);
    pthread_cond_timedwait(cond, &members.lock, &ts);
}

/* Reconcile on every event the watcher reports and every MEMBERS_REFRESH_MS; register again when
 * the keeper found the lease expired (at most once a beat while etcd refuses); after a reconcile,
 * the members' lease ages when they are due (every MEMBERS_AGES_MS while the stats read them,
 * else every MEMBERS_AGES_IDLE_MS). */
static void *agent_main(void *arg)
{
    (void)arg;
    CURL *curl = curl_easy_init();
    uint64_t beat_ms = members.lease_s * 1000ULL / 3, register_due = 0;
    uint64_t refresh = nessie_mono_ms() + MEMBERS_REFRESH_MS, ages_at = nessie_mono_ms();
    pthread_mutex_lock(&members.lock);
    while (!members.stop) {
        if (!members.dirty && nessie_mono_ms() < refresh) {
            wait_until(&members.cond, refresh);
            continue;
        }
        members.dirty = false;
        pthread_mutex_unlock(&members.lock);
        int64_t lapsed = atomic_load_explicit(&members.lapsed, memory_order_relaxed);
        if (lapsed && nessie_mono_ms() >= register_due) {
            /* Only the lease the keeper found expired is replaced: one registered since is not. */
            if (lapsed != atomic_load_explicit(&members.lease, memory_order_relaxed) ||
                register_self(curl, NESSIE_LOG_WARN) == 0)
                atomic_store_explicit(&members.lapsed, 0, memory_order_relaxed);
            else
                register_due = nessie_mono_ms() + beat_ms;
        }
        reconcile(curl);
        refresh = nessie_mono_ms() + MEMBERS_REFRESH_MS;
        if (nessie_mono_ms() - ages_at >= ages_period_ms()) {
            ages_refresh(curl);
            ages_at = nessie_mono_ms();
        }
        pthread_mutex_lock(&members.lock);
    }
    pthread_mutex_unlock(&members.lock);
    curl_easy_cleanup(curl);
    return NULL;
}

/* Keep-alive every third of the lease (two beats may fail before it lapses), and again
 * MEMBERS_KEEPALIVE_RETRY_MS after one that no endpoint answered; never behind another request
 * of this daemon's (the head of this file says why). */
static void *keeper_main(void *arg)
{
    (void)arg;
    CURL *curl = curl_easy_init();
    uint64_t beat_ms = members.lease_s * 1000ULL / 3;
    uint64_t retry_ms = beat_ms < MEMBERS_KEEPALIVE_RETRY_MS ? beat_ms : MEMBERS_KEEPALIVE_RETRY_MS;
    uint64_t next = nessie_mono_ms() + beat_ms;
    pthread_mutex_lock(&members.lock);
    while (!members.stop) {
        if (nessie_mono_ms() < next) {
            wait_until(&members.keeper_cond, next);
            continue;
        }
        pthread_mutex_unlock(&members.lock);
        bool answered = curl && keep_alive(curl);
        next = nessie_mono_ms() + (answered ? beat_ms : retry_ms);
        pthread_mutex_lock(&members.lock);
    }
    pthread_mutex_unlock(&members.lock);
    if (curl)
        curl_easy_cleanup(curl);
    return NULL;
}

/* Any bytes of the watch stream: something under the prefix changed (or the watch was just
 * created, and anything may have changed before it): wake the agent. */
static size_t on_watch_data(char *data, size_t size, size_t n, void *arg)
{
    (void)data, (void)arg;
    pthread_mutex_lock(&members.lock);
    members.dirty = true;
    pthread_cond_signal(&members.cond);
    pthread_mutex_unlock(&members.lock);
    return size * n;
}

/* curl calls it about once a second, and more often while data flows: ends the watch on stop. */
static int on_watch_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)arg, (void)a, (void)b, (void)c, (void)d;
    return atomic_load(&members.stopping) ? 1 : 0;
}

static void *watcher_main(void *arg)
{
    (void)arg;
    CURL *curl = curl_easy_init();
    char *end = etcd_prefix_end(members.cluster_prefix);
    char *k64 = etcd_b64(members.cluster_prefix), *e64 = etcd_b64(end);
    char *body = g_strdup_printf("{\"create_request\": {\"key\": \"%s\", \"range_end\": \"%s\"}}",
                                 k64, e64);
    while (!atomic_load(&members.stopping)) {
        guint i;
        const char *ep = etcd_endpoint(&i);
        char *url = g_strconcat(ep, "/v3/watch", NULL);
        curl_easy_reset(curl);
        curl_easy_setopt(curl, CURLOPT_URL, url);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_watch_data);
        curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_watch_progress);
        curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long)ETCD_CONNECT_MS);
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        CURLcode rc = curl_easy_perform(curl);
        g_free(url);
        if (atomic_load(&members.stopping))
            break;
        log_debug("members: watch on %s ended (%s); watching again", ep,
                  curl_easy_strerror(rc));
        if (rc != CURLE_OK) /* this endpoint failed: the next one, as etcd_call would */
            etcd_endpoint_failed(i);
        g_usleep(MEMBERS_REWATCH_MS * 1000);
    }
    g_free(body), g_free(k64), g_free(e64), g_free(end);
    curl_easy_cleanup(curl);
    return NULL;
}

/* --- start and stop ----------------------------------------------------------------------- */

static void members_free(void)
{
    etcd_close();
    changes_close();
    g_free(members.members_prefix);
    g_free(members.view_key);
    g_free(members.cluster_prefix);
    g_free(members.scrubbed_prefix);
    members.members_prefix = members.view_key = members.cluster_prefix = NULL;
    members.scrubbed_prefix = NULL;
}

uint64_t members_view_lease_ms(const struct recep_config *cfg)
{
    return cfg->lease_s * 1000ULL / 2;
}

/*
 * The bound: an attempt starts only if it ends, one expiration period E after its start, before
 * the view lease does (proto_view_gate). The agent renews the lease to V past a read's start, and
 * renews it again only a refresh and the next reads later, so the most an attempt may count on
 * at any moment is about V less a refresh and the reads (the second refresh: the reads, and the
 * agent's scheduling on a busy host). At V <= E no attempt ever starts; within two refreshes of
 * E, calls wait for a renewal most of the time and time out on a busy host. Neither is a setting
 * to run with, so the daemon refuses it at start.
 */
int members_config_check(const struct recep_config *cfg, const char *where)
{
    if (cfg->membership != RECEP_MEMBERSHIP_ETCD)
        return 0;
    uint64_t v = members_view_lease_ms(cfg), e = cfg->engine.expiration_ms;
    uint64_t need = e + 2 * MEMBERS_REFRESH_MS;
    if (v > need)
        return 0;
    /* The smallest lease_s that would do with this expiration_ms (V is half the lease). */
    uint64_t lease_min = need * 2 / 1000 + 1;
    log_error("config %s: [membership] lease_s = %u gives a view lease of %" PRIu64 " ms (half "
              "the lease), which must be longer than [cluster] expiration_ms = %" PRIu64 " plus "
              "two refreshes of %u ms, %" PRIu64 " ms, or calls wait for renewals instead of "
              "running: raise lease_s to %" PRIu64 " or more, or lower expiration_ms below %" PRIu64,
              where, cfg->lease_s, v, e, (unsigned)MEMBERS_REFRESH_MS, need, lease_min,
              v > 2 * MEMBERS_REFRESH_MS ? v - 2 * MEMBERS_REFRESH_MS : (uint64_t)1);
    return -1;
}

uint32_t members_lease_ages(int32_t *age, uint32_t cap)
{
    pthread_mutex_lock(&ages.lock);
    uint32_t n = ages.n;
    memcpy(age, ages.age, (n < cap ? n : cap) * sizeof(*age));
    ages.asked_ms = nessie_mono_ms();
    pthread_mutex_unlock(&ages.lock);
    return n;
}

uint32_t members_view_wait_ms(const struct recep_config *cfg)
{
    if (cfg->membership != RECEP_MEMBERSHIP_ETCD)
        return 0;
    return (uint32_t)(cfg->lease_s * 1000ULL + MEMBERS_EXPIRY_SLOP_MS + members_view_lease_ms(cfg) +
                      2 * MEMBERS_REFRESH_MS);
}

/*
 * Whether the view lists this node as gone, read before it registers: if so it rejoins under an
 * incarnation newer than the one it was fenced in (members.incarnation raised), fenced until a
 * view readmits it (members.fenced, so that view is acted on a view lease after its first read,
 * as every member does). Returns 1 (gone), 0, or -1 when etcd could not be read (logged).
 */
static int gone_before(CURL *curl)
{
    struct view_read vr = {0};
    if (etcd_range(curl, members.view_key, NULL, on_view, &vr) != 0)
        return -1;
    struct live *lv = g_new0(struct live, 1);
    uint64_t epoch = 0;
    int gone = vr.found && view_parse(vr.value, &epoch, lv) == 0 && lv->gone[members.self];
    if (gone) {
        if (members.incarnation <= lv->gone_inc[members.self])
            members.incarnation = lv->gone_inc[members.self] + 1;
        members.fenced[members.self] = true;
        members.adopting = true;
        log_info("members: node %u was lost in view %" PRIu64 " (incarnation %" PRIu64 "); it "
                 "comes back empty as incarnation %" PRIu64 " and serves once readmitted",
                 members.self, epoch, lv->gone_inc[members.self], members.incarnation);
    }
    g_free(lv);
    g_free(vr.value);
    return gone;
}

int members_start(const struct recep_config *cfg, struct nessie_node *node)
{
    if (cfg->membership != RECEP_MEMBERSHIP_ETCD)
        return 0;
    members.node = node;
    members.self = cfg->engine.self;
    /* Every id the cluster may have (issue 30): a node added later registers as one. */
    members.nodes = cfg->engine.node_ids ? cfg->engine.node_ids : cfg->engine.nodes;
    members.lease_s = cfg->lease_s;
    members.view_lease_ms = members_view_lease_ms(cfg);
    members.adopting = false;
    members.pending_epoch = 0;
    memset(members.fenced, 0, sizeof(members.fenced));
    members.incarnation = nessie_node_incarnation(node);
    int n = etcd_open(cfg->etcd_endpoints);
    etcd_set_lease(cfg->lease_s);
    atomic_init(&members.stopping, false);
    atomic_init(&members.lease, 0);
    atomic_init(&members.lapsed, 0);
    members.members_prefix = g_strdup_printf("/nessie/%s/members/", cfg->cluster);
    members.view_key = g_strdup_printf("/nessie/%s/view", cfg->cluster);
    members.cluster_prefix = g_strdup_printf("/nessie/%s/", cfg->cluster);
    members.scrubbed_prefix = g_strdup_printf("/nessie/%s/scrubbed/", cfg->cluster);
    if (n != 0) {
        log_error("members: [membership] endpoints names no URL");
        members_free();
        return -1;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        log_error("members: curl_global_init failed");
        members_free();
        return -1;
    }
    pthread_mutex_init(&members.lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the threads' deadlines are monotonic */
    pthread_cond_init(&members.cond, &ca);
    pthread_cond_init(&members.keeper_cond, &ca);
    pthread_condattr_destroy(&ca);
    members.stop = members.dirty = false;
    bool keeper = false, agent = false;
    int rc = 0;
    CURL *curl = curl_easy_init();
    /* Lost from the view earlier: back under a newer incarnation, with new tables (rejoin). */
    int gone = curl ? gone_before(curl) : -1;
    if (gone == 1 && nessie_node_incarnation(node) != 1) {
        log_warn("members: node %u was lost from the view and its tables were kept: they are "
                 "removed and made anew before it rejoins", members.self);
        rc = MEMBERS_NEW_TABLES;
        goto fail;
    }
    /* At start every failure is an error: a daemon that cannot register must not serve as if
     * it were a member. etcd_call has logged each endpoint and what it said. The keeper starts
     * as soon as the lease is granted: the first reconcile, through a slow etcd, may take
     * longer than the lease's TTL. */
    if (gone < 0 || changes_open(node, members.cluster_prefix, members.self,
                                 members.view_lease_ms) != 0 ||
        register_self(curl, NESSIE_LOG_ERROR) != 0)
        goto refused;
    if ((rc = pthread_create(&members.keeper, NULL, keeper_main, NULL)) != 0)
        goto no_thread;
    keeper = true;
    if (reconcile(curl) != 0)
        goto refused;
    /* So the stats show ages from the start, and as if read now: asked every second for 30 s. */
    pthread_mutex_lock(&ages.lock);
    ages.asked_ms = nessie_mono_ms();
    pthread_mutex_unlock(&ages.lock);
    ages_refresh(curl);
    curl_easy_cleanup(curl);
    curl = NULL;
    if ((rc = pthread_create(&members.agent, NULL, agent_main, NULL)) != 0)
        goto no_thread;
    agent = true;
    if ((rc = pthread_create(&members.watcher, NULL, watcher_main, NULL)) != 0)
        goto no_thread;
    members.running = true;
    return 0;

no_thread:
    log_error("members: pthread_create: %s", strerror(rc));
    rc = -1;
    goto fail;
refused:
    log_error("members: cannot join the cluster's view through etcd at %s", cfg->etcd_endpoints);
    rc = -1;
fail:
    pthread_mutex_lock(&members.lock);
    members.stop = true;
    pthread_cond_signal(&members.cond);
    pthread_cond_signal(&members.keeper_cond);
    pthread_mutex_unlock(&members.lock);
    if (agent)
        pthread_join(members.agent, NULL);
    if (keeper)
        pthread_join(members.keeper, NULL);
    if (curl)
        curl_easy_cleanup(curl);
    pthread_mutex_lock(&ages.lock);
    ages.n = 0;
    pthread_mutex_unlock(&ages.lock);
    pthread_cond_destroy(&members.keeper_cond);
    pthread_cond_destroy(&members.cond);
    pthread_mutex_destroy(&members.lock);
    curl_global_cleanup();
    members_free();
    return rc;
}

void members_stop(void)
{
    if (!members.running)
        return;
    atomic_store(&members.stopping, true);
    pthread_mutex_lock(&members.lock);
    members.stop = true;
    pthread_cond_signal(&members.cond);
    pthread_cond_signal(&members.keeper_cond);
    pthread_mutex_unlock(&members.lock);
    pthread_join(members.agent, NULL);
    pthread_join(members.watcher, NULL);
    pthread_join(members.keeper, NULL);
    pthread_mutex_lock(&ages.lock);
    ages.n = 0;
    pthread_mutex_unlock(&ages.lock);
    /* The lease is left to lapse, not revoked. A node lost from a view is fenced for good (until
     * rejoin is built), so a cluster stopped whole (nessie-cluster stop signals every daemon at
     * once) would, with revocations, fence its own members one by one as they left and come
     * back degraded; lapsing within the TTL, the leases outlive every daemon's exit and no view
     * is written. A node that leaves alone is removed when its lease lapses, as a dead one. */
    log_info("members: node %u leaves; its lease lapses within %u s", members.self,
             members.lease_s);
    pthread_cond_destroy(&members.keeper_cond);
    pthread_cond_destroy(&members.cond);
    pthread_mutex_destroy(&members.lock);
    curl_global_cleanup();
    members_free();
    members.running = false;
}
