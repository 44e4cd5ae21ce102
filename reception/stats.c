/*
 * stats.c - counters aggregation and rendering.
 */
#include "stats.h"
#include "tcp.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "channel.h"
#include "clock.h"
#include "log.h"
#include "members.h"

struct recep_stats {
    struct nessie_node *node;
    struct recep_worker **workers;
    uint32_t nworkers;
    pthread_t thread;
    time_t started;
    uint64_t channels_total; /* __atomic */
    /* The last interval's rates, under lock (written once a second, read on request). */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;
    struct nessie_counters prev;
    uint64_t prev_ns;
    double rate[NESSIE_OPK_COUNT];
    /* What "stats reset" took away, under lock: the counters are the engine's, cumulative and
     * shared with its other readers (the rates above, tests), so a reset is a baseline the
     * rendered counters are taken from, never a change to the engine's. */
    struct nessie_counters base;
    uint64_t base_connections, base_rejected;
    uint64_t maxbytes; /* __atomic: the limit cache_memlimit set last (0: the region's size) */
};

/* Every field of struct nessie_counters is a uint64_t counter: a baseline is taken from all. */
_Static_assert(sizeof(struct nessie_counters) % sizeof(uint64_t) == 0,
               "nessie_counters holds uint64_t counters only");

/* The engine's counters since the last "stats reset". */
static void counters_since_reset(struct recep_stats *st, struct nessie_counters *c)
{
    uint64_t *v = (uint64_t *)(void *)c;
    pthread_mutex_lock(&st->lock); /* with the read: a reset between the two would wrap */
    nessie_node_counters(st->node, c);
    const uint64_t *b = (const uint64_t *)(const void *)&st->base;
    for (size_t i = 0; i < sizeof(*c) / sizeof(uint64_t); i++)
        v[i] -= b[i];
    pthread_mutex_unlock(&st->lock);
}

static void *stats_main(void *arg)
{
    struct recep_stats *st = arg;
    pthread_mutex_lock(&st->lock);
    while (!st->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&st->cond, &st->lock, &ts);
        if (st->stop)
            break;
        struct nessie_counters cur;
        nessie_node_counters(st->node, &cur);
        uint64_t now = nessie_mono_ns();
        double dt = (double)(now - st->prev_ns) / 1e9;
        for (int k = 0; k < NESSIE_OPK_COUNT; k++)
            st->rate[k] = dt > 0 ? (double)(cur.op[k].ops - st->prev.op[k].ops) / dt : 0;
        st->prev = cur;
        st->prev_ns = now;
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

int recep_stats_start(struct nessie_node *node, struct recep_worker **workers, uint32_t nworkers,
                      struct recep_stats **out)
{
    struct recep_stats *st = calloc(1, sizeof(*st));
    if (!st)
        return -1;
    st->node = node;
    st->workers = workers;
    st->nworkers = nworkers;
    st->started = time(NULL);
    pthread_mutex_init(&st->lock, NULL);
    pthread_cond_init(&st->cond, NULL);
    nessie_node_counters(node, &st->prev);
    st->prev_ns = nessie_mono_ns();
    int rc = pthread_create(&st->thread, NULL, stats_main, st);
    if (rc != 0) {
        log_error("stats: pthread_create: %s", strerror(rc));
        pthread_cond_destroy(&st->cond);
        pthread_mutex_destroy(&st->lock);
        free(st);
        return -1;
    }
    *out = st;
    return 0;
}

void recep_stats_stop(struct recep_stats *st)
{
    if (!st)
        return;
    pthread_mutex_lock(&st->lock);
    st->stop = true;
    pthread_cond_signal(&st->cond);
    pthread_mutex_unlock(&st->lock);
    pthread_join(st->thread, NULL);
    pthread_cond_destroy(&st->cond);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

void recep_stats_channel_opened(struct recep_stats *st)
{
    __atomic_fetch_add(&st->channels_total, 1, __ATOMIC_RELAXED);
}

static const char *const opk_name[NESSIE_OPK_COUNT] = {"get", "put", "delete", "migrate",
                                                         "evict"};
static const char *const abort_name[NESSIE_ABORT_COUNT] = {"invalid_dte", "cas_failed",
                                                          "reverse_pass", "timeout", "migrate",
                                                          "memory"};

#define STAT_U(name, v) g_string_append_printf(out, "STAT %s %llu\r\n", (name), \
                                               (unsigned long long)(v))
#define STAT_F(name, v) g_string_append_printf(out, "STAT %s %.3f\r\n", (name), (double)(v))
#define STAT_S(name, v) g_string_append_printf(out, "STAT %s %s\r\n", (name), (v))

static double per(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0.0; }

/* "STAT nessie_<op>_<what>_hist c0,c1,...": a per-call distribution's n bin counts. */
static void stat_hist(GString *out, const char *op, const char *what, const uint64_t *bins, int n)
{
    g_string_append_printf(out, "STAT nessie_%s_%s_hist ", op, what);
    for (int b = 0; b < n; b++)
        g_string_append_printf(out, "%s%" PRIu64, b ? "," : "", bins[b]);
    g_string_append(out, "\r\n");
}

/* memcached's maxbytes: the region's size, or the limit cache_memlimit set last. */
static uint64_t maxbytes(struct recep_stats *st)
{
    uint64_t b = __atomic_load_n(&st->maxbytes, __ATOMIC_RELAXED);
    return b ? b : nessie_node_config(st->node)->data_bytes;
}

bool recep_stats_mem_limit(struct recep_stats *st, uint64_t bytes)
{
    /* under the lock: two at once leave the engine's limit and the stat's the same */
    pthread_mutex_lock(&st->lock);
    bool ok = nessie_mem_limit(st->node, bytes) == NESSIE_OK;
    if (ok)
        __atomic_store_n(&st->maxbytes, bytes, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&st->lock);
    if (!ok)
        return false;
    log_info("stats: cache_memlimit: this node's items now take %llu MiB at most",
             (unsigned long long)(bytes >> 20));
    return true;
}

/* memcached counts every connection it accepted: a channel is one, and so is each time a
 * client's handle reconnected after memcached_quit, and each of the memcached port's. */
static uint64_t connections_total(struct recep_stats *st, const struct recep_tcp_counts *tc)
{
    return __atomic_load_n(&st->channels_total, __ATOMIC_RELAXED) + recep_channel_reconnects() +
           tc->total;
}

void recep_stats_format(struct recep_stats *st, GString *out)
{
    const struct nessie_config *cfg = nessie_node_config(st->node);
    struct nessie_counters c;
    counters_since_reset(st, &c);
    double rate[NESSIE_OPK_COUNT];
    uint64_t base_connections, base_rejected;
    pthread_mutex_lock(&st->lock);
    memcpy(rate, st->rate, sizeof(rate));
    base_connections = st->base_connections;
    base_rejected = st->base_rejected;
    pthread_mutex_unlock(&st->lock);

    /* memcached's names first, so memcstat and memcached tools read what they expect. */
    STAT_U("pid", getpid());
    STAT_U("uptime", time(NULL) - st->started);
    STAT_U("time", time(NULL));
    /* memcached's dotted form, Nessie named after it: clients parse the numbers to decide which
     * features a server has (the ones of the memcached whose behaviour the shim follows, which
     * the transcripts check against), and the suffix says who answered. */
    g_string_append(out, "STAT version " WIRE_COMPAT_VERSION "-nessie\r\n");
    STAT_U("pointer_size", sizeof(void *) * 8);
    uint32_t channels = 0, asleep = 0;
    uint64_t requests = 0;
    for (uint32_t i = 0; i < st->nworkers; i++) {
        struct recep_worker_stats ws;
        recep_worker_stats(st->workers[i], &ws);
        channels += ws.channels;
        asleep += ws.asleep;
        requests += ws.requests;
    }
    /* The memcached port's connections (tcp.c) count as memcached counts its own. */
    struct recep_tcp_counts tc;
    recep_tcp_counts(&tc);
    if (tc.max)
        STAT_U("max_connections", tc.max);
    STAT_U("curr_connections", channels + tc.curr);
    STAT_U("total_connections", connections_total(st, &tc) - base_connections);
    if (tc.max) {
        STAT_U("rejected_connections", tc.rejected - base_rejected);
        /* Not memcached's: gets whose value the engine read straight into the reply (since
         * the start, as the nessie_ counters). */
        STAT_U("nessie_tcp_direct_gets", tc.direct_gets);
        /* Also not memcached's: the port's threads busy-waited for a request this often
         * (tcp.c, spin_budget), and a request came before the spin ended this often. */
        STAT_U("nessie_tcp_spins", tc.spins);
        STAT_U("nessie_tcp_spin_hits", tc.spin_hits);
    }
    STAT_U("threads", st->nworkers);
    const struct nessie_op_counters *g = &c.op[NESSIE_OPK_GET], *p = &c.op[NESSIE_OPK_PUT],
                                    *d = &c.op[NESSIE_OPK_DELETE];
    STAT_U("cmd_get", g->ops);
    STAT_U("cmd_set", p->ops);
    STAT_U("cmd_delete", d->ops);
    STAT_U("get_hits", g->outcomes[NESSIE_OK]);
    STAT_U("get_misses", g->outcomes[NESSIE_NOT_FOUND]);
    STAT_U("delete_hits", d->outcomes[NESSIE_OK]);
    STAT_U("delete_misses", d->outcomes[NESSIE_NOT_FOUND]);
    STAT_U("limit_maxbytes", maxbytes(st));
    /* This node's data region: its items as of the recycle scan's last pass, and what its
     * evictor removed (memcached's meanings; reclaimed: expired or flushed items removed). */
    uint64_t items, bytes;
    nessie_data_usage(st->node, &items, &bytes);
    STAT_U("curr_items", items);
    STAT_U("bytes", bytes);
    STAT_U("evictions", c.evictions);
    STAT_U("evicted_unfetched", c.evicted_unfetched);
    STAT_U("reclaimed", c.reclaimed);
    STAT_U("expired_unfetched", c.expired_unfetched);
    STAT_U("evictions_enabled", !cfg->no_evict);
    /* The flash tier (issue 31), under extstore's names where they mean the same; only when it
     * is on, as memcached prints extstore's only with -o ext_path. */
    struct nessie_flash_stats fs;
    if (nessie_flash_stats(st->node, &fs) == NESSIE_OK) {
        STAT_U("extstore_limit_maxbytes", fs.limit_bytes);
        STAT_U("extstore_page_size", fs.page_bytes);
        STAT_U("extstore_pages_free", fs.pages_free);
        STAT_U("extstore_pages_used", fs.pages_used);
        STAT_U("extstore_page_reclaims", fs.page_reclaims);
        STAT_U("extstore_objects_used", fs.objects_used);
        STAT_U("extstore_objects_written", fs.objects_written);
        STAT_U("extstore_objects_read", fs.objects_read);
        STAT_U("extstore_bytes_used", fs.bytes_used);
        STAT_U("extstore_bytes_fragmented", fs.bytes_fragmented);
        STAT_U("extstore_bytes_written", fs.bytes_written);
        STAT_U("extstore_bytes_read", fs.bytes_read);
        STAT_U("get_extstore", c.flash_hits); /* GETs answered from this node's log */
        STAT_U("miss_from_extstore", fs.misses);
        STAT_U("badcrc_from_extstore", fs.crc_failures);
        STAT_U("nessie_flash_io_uring", fs.uring);
        STAT_U("nessie_flash_io_errors", fs.io_errors);
        STAT_U("nessie_flash_recovered", fs.recovered);
        STAT_U("nessie_flash_bytes_appended", fs.bytes_appended);
        /* Victims written to the log, flash items taken out of the index (their page dropped
         * for room, or met where they could not be read), and calls sent to a flash item's
         * node (counted where they met it). */
        STAT_U("nessie_flash_demoted", c.flash_demoted);
        STAT_U("nessie_flash_dropped", c.flash_dropped);
        STAT_U("nessie_flash_shipped", c.flash_shipped);
        STAT_U("recache_from_extstore", c.flash_promoted); /* promoted: read again, in memory */
        /* Compaction: records copied out of sparse pages (memcached's name), their bytes,
         * and the pages it freed. */
        STAT_U("extstore_compact_rescues", fs.objects_rewritten);
        STAT_U("nessie_flash_bytes_rewritten", fs.bytes_rewritten);
        STAT_U("nessie_flash_compacted", c.flash_compacted);
        /* Bytes the device was given per byte of records demoted: compaction's copies, page
         * padding to the block, and a block of the life table when a page's life begins and
         * ends are the log's own writes. */
        STAT_F("nessie_flash_write_amplification",
               per(fs.bytes_written, fs.bytes_appended - fs.bytes_rewritten));
        /* Memory a flash item costs: its index entry (8 bytes) plus the log's own memory
         * (its page table and 2 bytes per record, and its two page buffers, a fixed cost)
         * shared among the items on flash. */
        STAT_U("nessie_flash_ram_bytes", fs.ram_bytes);
        STAT_F("nessie_flash_ram_per_item",
               per(8 * fs.objects_used + fs.ram_bytes, fs.objects_used));
    }

    /* Nessie's own. */
    STAT_U("nessie_node", cfg->self);
    STAT_U("nessie_nodes", cfg->nodes);
    STAT_U("nessie_node_ids", cfg->node_ids ? cfg->node_ids : cfg->nodes);
    STAT_U("nessie_requests", requests);
    STAT_U("nessie_workers_asleep", asleep);
    char name[96];
    for (int k = 0; k < NESSIE_OPK_COUNT; k++) {
        const struct nessie_op_counters *o = &c.op[k];
        snprintf(name, sizeof(name), "nessie_%s_ops", opk_name[k]);
        STAT_U(name, o->ops);
        snprintf(name, sizeof(name), "nessie_%s_ops_per_sec", opk_name[k]);
        STAT_F(name, rate[k]);
        snprintf(name, sizeof(name), "nessie_%s_retries", opk_name[k]);
        STAT_U(name, o->attempts > o->ops ? o->attempts - o->ops : 0);
        for (int a = 0; a < NESSIE_ABORT_COUNT; a++) {
            snprintf(name, sizeof(name), "nessie_%s_aborts_%s", opk_name[k], abort_name[a]);
            STAT_U(name, o->aborts[a]);
        }
        snprintf(name, sizeof(name), "nessie_%s_timeouts", opk_name[k]);
        STAT_U(name, o->outcomes[NESSIE_TIMEOUT]);
        /* Fabric operations and bytes per call: what the paper's figures 8 to 11 plot. */
        snprintf(name, sizeof(name), "nessie_%s_reads_per_op", opk_name[k]);
        STAT_F(name, per(o->ite_reads + o->dte_reads, o->ops));
        snprintf(name, sizeof(name), "nessie_%s_ite_reads_per_op", opk_name[k]);
        STAT_F(name, per(o->ite_reads, o->ops));
        snprintf(name, sizeof(name), "nessie_%s_writes_per_op", opk_name[k]);
        STAT_F(name, per(o->writes, o->ops));
        snprintf(name, sizeof(name), "nessie_%s_cas_per_op", opk_name[k]);
        STAT_F(name, per(o->cas, o->ops));
        snprintf(name, sizeof(name), "nessie_%s_bytes_per_op", opk_name[k]);
        STAT_F(name, per(o->bytes_read + o->bytes_written, o->ops));
        /* Their distributions, as comma-separated bin counts (see NESSIE_HIST_OPS); then the
         * same for the calls this node ran for its peers (modes sd, hy, auto). */
        stat_hist(out, opk_name[k], "fabric_ops", o->ops_hist, NESSIE_HIST_OPS);
        stat_hist(out, opk_name[k], "fabric_bytes", o->bytes_hist, NESSIE_HIST_BYTES);
        stat_hist(out, opk_name[k], "served_fabric_ops", c.sd_served_ops_hist[k], NESSIE_HIST_OPS);
        stat_hist(out, opk_name[k], "served_fabric_bytes", c.sd_served_bytes_hist[k],
                  NESSIE_HIST_BYTES);
    }
    uint64_t hits = 0, misses = 0, lost = 0;
    for (int k = 0; k < NESSIE_OPK_COUNT; k++) {
        hits += c.op[k].cache_hits;
        misses += c.op[k].cache_misses;
        lost += c.op[k].lost_entries;
    }
    STAT_U("nessie_cache_hits", hits);
    STAT_U("nessie_cache_misses", misses);
    STAT_F("nessie_cache_hit_rate", per(hits, hits + misses));
    STAT_U("nessie_prev_version_hits", g->prev_version_hits);
    STAT_U("nessie_migrations", c.migrations);
    STAT_U("nessie_recursive_migrations", c.recursive_migrations);
    STAT_U("nessie_takeovers", c.takeovers);
    STAT_U("nessie_evict_skipped", c.evict_skipped);
    STAT_U("nessie_moves_undone", c.moves_undone);
    /* Entries met whose value was on a node lost from the view (issue 28): read as absent. */
    STAT_U("nessie_lost_entries", lost);
    /* Server-driven execution: what this node's clients shipped, and what it ran for peers. */
    /* The cluster's view (issue 28; epoch 0: static membership, no view): its epoch, its live
     * members' count, and each member as ID:incarnation, '-' after a gone one's. */
    struct nessie_view *view = g_new(struct nessie_view, 1);
    nessie_view_get(st->node, view);
    uint32_t live = 0;
    GString *vm = g_string_new(NULL);
    for (uint32_t i = 0; i < view->nmembers; i++) {
        const struct nessie_view_member *m = &view->members[i];
        live += m->state == NESSIE_MEMBER_LIVE;
        g_string_append_printf(vm, "%s%u:%" PRIu64 "%s", i ? "," : "", m->node, m->incarnation,
                               m->state == NESSIE_MEMBER_LIVE ? "" : "-");
    }
    STAT_U("nessie_view_epoch", view->epoch);
    STAT_U("nessie_view_members", live);
    STAT_S("nessie_view", vm->len ? vm->str : "none");
    /* How long ago each node's etcd lease was renewed, as ID:seconds, '-' for a node with no
     * registration, '?' when etcd could not be asked: the agent's last answers (members.h says
     * how coarse they are), never a request to etcd from here. "none": static membership. */
    const uint32_t ids = cfg->node_ids ? cfg->node_ids : cfg->nodes;
    int32_t *age = g_new(int32_t, ids);
    uint32_t nages = members_lease_ages(age, ids);
    g_string_truncate(vm, 0);
    for (uint32_t i = 0; i < nages && i < ids; i++) {
        g_string_append_printf(vm, "%s%u:", i ? "," : "", i);
        if (age[i] >= 0)
            g_string_append_printf(vm, "%" PRId32, age[i]);
        else
            g_string_append(vm, age[i] == MEMBERS_AGE_NONE ? "-" : "?");
    }
    STAT_S("nessie_view_leases", vm->len ? vm->str : "none");
    g_free(age);
    STAT_U("nessie_incarnation", nessie_node_incarnation(st->node));
    /* Calls that waited for a view: its lease's renewal, or one fencing a node they needed. */
    STAT_U("nessie_view_waits", c.view_waits);
    STAT_U("nessie_replans", c.replans);
    /* A change of membership in progress (issue 30): "add:3:announce", or "none"; the index
     * slots this node's mover has still to look at, and the entries it has moved ever. */
    uint32_t ch_id;
    enum nessie_change_kind ch_kind;
    enum nessie_change_phase ch_phase;
    if (nessie_change_get(st->node, &ch_id, &ch_kind, &ch_phase) == NESSIE_OK)
        g_string_append_printf(out, "STAT nessie_change %s:%u:%s\r\n",
                               ch_kind == NESSIE_CHANGE_ADD ? "add" : "retire", ch_id,
                               ch_phase == NESSIE_CHANGE_ANNOUNCE ? "announce" : "move");
    else
        STAT_S("nessie_change", "none");
    STAT_U("nessie_move_left", nessie_move_left(st->node));
    STAT_U("nessie_moved", nessie_moved(st->node));
    STAT_U("nessie_move_evicted", c.move_evicted);
    g_string_free(vm, TRUE);
    g_free(view);
    STAT_S("nessie_mode", nessie_mode_name(cfg->mode));
    STAT_U("nessie_sd_shipped_get", c.sd_shipped[NESSIE_OPK_GET]);
    STAT_U("nessie_sd_shipped_put", c.sd_shipped[NESSIE_OPK_PUT]);
    STAT_U("nessie_sd_shipped_delete", c.sd_shipped[NESSIE_OPK_DELETE]);
    STAT_U("nessie_sd_no_reply", c.sd_no_reply);
    STAT_U("nessie_sd_served", c.sd_served);
    STAT_U("nessie_sd_dropped", c.sd_dropped);
    STAT_U("nessie_sd_withdrawn", c.sd_withdrawn);
    STAT_U("nessie_sd_shunned", c.sd_shunned);
    STAT_U("nessie_sd_expired", c.sd_expired);
    STAT_U("nessie_sd_helped", c.sd_helped);
    STAT_U("nessie_sd_auto_cd", c.sd_auto[0]);
    STAT_U("nessie_sd_auto_sd", c.sd_auto[1]);
    /* Placement (issue 29): this node's stores run on a peer with room while it was full, and
     * the stores it ran for full peers (their values live here). */
    STAT_U("nessie_placed", c.placed);
    STAT_U("nessie_placed_bytes", c.placed_bytes);
    STAT_U("nessie_placed_in", c.placed_in);
    STAT_U("nessie_placed_in_bytes", c.placed_in_bytes);
    /* ... and of curr_items, those held now for full peers' clients (the rest are this node's
     * own clients'), as of the recycle scan's last pass. */
    uint64_t held, held_bytes;
    nessie_data_placed(st->node, &held, &held_bytes);
    STAT_U("nessie_placed_items", held);
    STAT_U("nessie_placed_item_bytes", held_bytes);
    uint64_t used = nessie_index_used(st->node);
    STAT_U("nessie_index_slots", cfg->index_slots);
    STAT_U("nessie_index_used", used);
    STAT_F("nessie_index_load_factor", per(used, cfg->index_slots));
    STAT_U("nessie_recycle_staged", c.staged);
    STAT_U("nessie_recycle_marked", c.marked);
    STAT_U("nessie_recycle_freed", c.freed);
    STAT_U("nessie_recycle_swept", c.swept);
    STAT_U("nessie_recycle_scanned", c.scanned);
    STAT_U("nessie_recycle_backlog", c.staged > c.marked ? c.staged - c.marked : 0);
    struct nessie_class_usage cu[64];
    uint32_t ncls = nessie_class_usage(st->node, cu, 64);
    for (uint32_t i = 0; i < ncls && i < 64; i++) {
        if (cu[i].slots == 0)
            continue;
        g_string_append_printf(out, "STAT nessie_class_%u_bytes %u\r\n", i, cu[i].slot_bytes);
        snprintf(name, sizeof(name), "nessie_class_%u_slots", i);
        STAT_U(name, cu[i].slots);
        snprintf(name, sizeof(name), "nessie_class_%u_free", i);
        STAT_U(name, cu[i].free);
        snprintf(name, sizeof(name), "nessie_class_%u_recycled", i);
        STAT_U(name, cu[i].recycled);
    }
    g_string_append(out, "END\r\n");
}

void recep_stats_reset(struct recep_stats *st)
{
    struct recep_tcp_counts tc;
    recep_tcp_counts(&tc);
    pthread_mutex_lock(&st->lock);
    nessie_node_counters(st->node, &st->base);
    st->base_connections = connections_total(st, &tc);
    st->base_rejected = tc.rejected;
    pthread_mutex_unlock(&st->lock);
}

void recep_stats_settings(struct recep_stats *st, GString *out)
{
    const struct nessie_config *cfg = nessie_node_config(st->node);
    struct recep_tcp_counts tc;
    recep_tcp_counts(&tc);
    /* memcached's names, where the setting means the same here. */
    STAT_U("maxbytes", maxbytes(st));
    if (tc.max)
        STAT_U("maxconns", tc.max);
    STAT_U("udpport", 0);
    STAT_S("evictions", cfg->no_evict ? "off" : "on");
    STAT_S("cas_enabled", "yes");
    STAT_U("item_size_max", cfg->max_item_size);
    STAT_S("flush_enabled", "yes");
    STAT_S("dump_enabled", "yes");
    /* Nessie's own. */
    STAT_U("nessie_nodes", cfg->nodes);
    STAT_U("nessie_index_slots", cfg->index_slots);
    STAT_U("nessie_expiration_ms", cfg->expiration_ms);
    STAT_S("nessie_mode", nessie_mode_name(cfg->mode));
    g_string_append(out, "END\r\n");
}

/* The classes of this node's data region: up to CLASSES_MAX, as memcached's slab classes (its
 * ids start at 1). */
#define CLASSES_MAX 64

void recep_stats_slabs(struct recep_stats *st, GString *out)
{
    struct nessie_class_usage cu[CLASSES_MAX];
    uint32_t n = nessie_class_usage(st->node, cu, CLASSES_MAX);
    uint64_t active = 0, malloced = 0;
    char name[64];
    for (uint32_t i = 0; i < n && i < CLASSES_MAX; i++) {
        if (cu[i].pages == 0)
            continue;
        active++;
        malloced += cu[i].slots * cu[i].slot_bytes;
#define SLAB_STAT(field, v)                                                                        \
    do {                                                                                           \
        snprintf(name, sizeof(name), "%u:%s", i + 1, field);                                       \
        STAT_U(name, v);                                                                           \
    } while (0)
        SLAB_STAT("chunk_size", cu[i].slot_bytes);
        SLAB_STAT("chunks_per_page", cu[i].slots_per_page);
        SLAB_STAT("total_pages", cu[i].pages);
        SLAB_STAT("total_chunks", cu[i].slots);
        /* memcached's count: the chunks not free (here, also those recycled and waiting out
         * their quarantine) */
        SLAB_STAT("used_chunks", cu[i].slots > cu[i].free ? cu[i].slots - cu[i].free : 0);
        SLAB_STAT("free_chunks", cu[i].free);
#undef SLAB_STAT
    }
    STAT_U("active_slabs", active);
    STAT_U("total_malloced", malloced);
    g_string_append(out, "END\r\n");
}

void recep_stats_items(struct recep_stats *st, GString *out)
{
    struct nessie_class_usage cu[CLASSES_MAX];
    uint32_t n = nessie_class_usage(st->node, cu, CLASSES_MAX);
    char name[64];
    for (uint32_t i = 0; i < n && i < CLASSES_MAX; i++) {
        if (cu[i].used == 0)
            continue;
        snprintf(name, sizeof(name), "items:%u:number", i + 1);
        STAT_U(name, cu[i].used);
        snprintf(name, sizeof(name), "items:%u:mem_requested", i + 1);
        STAT_U(name, cu[i].bytes);
        snprintf(name, sizeof(name), "items:%u:outofmemory", i + 1);
        STAT_U(name, cu[i].failed);
    }
    g_string_append(out, "END\r\n");
}

/* stats cachedump's walk: the keys of one class, up to a count and a size. */
struct cachedump {
    int cls;
    uint32_t limit, shown;
    GString *out;
    size_t max_bytes;
    bool full; /* the next line would pass max_bytes */
};

/* memcached's answer is at most this long (its item_cachedump's memlimit). */
#define CACHEDUMP_MAX_BYTES (2 * 1024 * 1024)

static bool cachedump_one(void *user, const void *key, size_t key_len,
                          const struct nessie_item *it)
{
    struct cachedump *d = user;
    /* memcached leaves out keys given in base64; here also any key that would not print as one
     * token (a space, a control byte: it could fake the answer's end) */
    if (it->meta & NESSIE_META_KEY_BINARY)
        return true;
    for (size_t i = 0; i < key_len; i++)
        if (((const unsigned char *)key)[i] <= 0x20 || ((const unsigned char *)key)[i] == 0x7f)
            return true;
    GString *line = g_string_new("ITEM ");
    g_string_append_len(line, key, (gssize)key_len);
    g_string_append_printf(line, " [%" PRIu32 " b; %" PRIu32 " s]\r\n", it->value_len, it->exptime);
    d->full = d->out->len + line->len > d->max_bytes;
    if (!d->full) {
        g_string_append_len(d->out, line->str, (gssize)line->len);
        d->shown++;
    }
    g_string_free(line, TRUE);
    return !d->full && (d->limit == 0 || d->shown < d->limit);
}

void recep_stats_cachedump(struct recep_stats *st, struct nessie_ctx *ctx, uint32_t id,
                           uint32_t limit, GString *out)
{
    (void)st;
    struct cachedump d = {.cls = (int)id - 1, .limit = limit, .out = out,
                          .max_bytes = out->len + CACHEDUMP_MAX_BYTES - 5};
    uint64_t cursor = 0;
    /* One walk over the region, stopped by the limit or the answer's size. */
    while (id >= 1 && !d.full && (limit == 0 || d.shown < limit)) {
        if (nessie_dump_class(ctx, d.cls, &cursor, 0, cachedump_one, &d) == NESSIE_INVALID ||
            cursor == 0)
            break;
    }
    g_string_append(out, "END\r\n");
}
