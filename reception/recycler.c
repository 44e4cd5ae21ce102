/*
 * recycler.c - recycler daemon threads.
 */
#include "recycler.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "changes.h"
#include "clock.h"
#include "log.h"

/* A run that did at least this much found a backlog: the next one starts at once. A run that did
 * less (a trickle of writes) naps TRICKLE_NAP_MS: entries are then marked that much later (and
 * reused that much later, against an expiration period of 100 ms by default), while the
 * recycler no longer wakes for every few writes, which cost more CPU per request at low load
 * than serving the request itself. */
#define RECYCLE_BACKLOG 64
/* Victims one run removes at most: a run stays short (each removal is a DELETE), and a run that
 * removes many counts as a backlog, so the next starts at once. */
#define EVICT_PER_RUN 256
#define TRICKLE_NAP_MS 10
/* Index slots one run of the scrub looks at (only after a node was lost from the view, one pass
 * over the index: nessie_scrub_run): a local read each, a few microseconds a run, so a pass over
 * a million slots takes a few hundred runs and no writer notices it. */
#define SCRUB_PER_RUN 4096
/* Index slots one run of a change's mover looks at (issue 30: only in a move phase, one pass over
 * the index: nessie_move_run): most are a local read; the few leaving entries a MIGRATE each, so
 * a run stays short while the pass over a million slots takes a few hundred runs. */
#define MOVE_PER_RUN 4096
/* The scan finds peers' marks on this node's entries (its own marks are queued and need no
 * scan): a mark's quarantine starts when the scan first sees it, and the slot is freed when
 * the scan sees it again after the period. One pass per SCAN_PASSES_PER_PERIOD-th of an
 * expiration period delays both by that much at most; scanning faster only burns the CPU the
 * writers and the evictor need: a recycler that runs back to back while it evicts scanned 4096
 * slots a run, thousands of runs a second, a third of both cores (perf, bench/eviction.sh).
 * The scan takes the allocator's lock 64 slots at a time, so a long run blocks no writer. */
#define SCAN_PASSES_PER_PERIOD 2
/* ... but only while it has something to find soon: peers' marks seen and not yet freed (the
 * evictor counts them as memory on its way back, within a period), or memory short: a writer
 * waited for room (it kicks the recycler, with eviction on), an allocation was refused (the
 * class usage's count, looked up every SCAN_USAGE_MS: with eviction off, writers that wait do
 * not kick), or the evictor took victims (evicted or demoted), within the last
 * SCAN_SHORT_HOLD_MS (or expiration period, if longer: evictions come in runs with naps between,
 * and the pace holds across them), or the daemon started as long ago (a region attached again
 * may hold marks that only the scan finds; a pass longer than that goes on at the idle pace, and
 * its marks only wait longer).
 * Otherwise it visits at most SCAN_IDLE_SLOTS_PER_MS slots a ms (or SCAN_PASSES_PER_PERIOD passes
 * per period, if that is slower): a pass at full pace costs about 180 ns a slot, so a node
 * holding 200k 1 KiB items burned 38 % of a core doing nothing (and 1 GiB of them would take all
 * of it). At the idle pace, a peer's first mark is seen up to a pass later (when memory turns
 * short, the evictor may evict live items for the marks it has not seen yet, for up to a pass),
 * and the statistics the scan counts (curr_items, bytes) lag by up to two passes. */
#define SCAN_IDLE_SLOTS_PER_MS 64
#define SCAN_SHORT_HOLD_MS 1000
#define SCAN_USAGE_MS 100

struct recycler_thread {
    struct recep_recycler *r;
    pthread_t thread;
    uint32_t index;
    struct nessie_ctx *ctx;
    bool started;
};

struct recep_recycler {
    struct nessie_node *node;
    uint32_t n;
    uint32_t sweep_every_s;
    uint32_t expiration_ms;
    uint64_t grace_ms; /* the engine's takeover grace: the call bound and a period (engine.c) */
    /* Stop: a flag under a mutex with a condition variable, so a sleeping recycler stops at once
     * rather than at the end of its nap. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;
    bool kicked; /* a writer found no room (nessie_node_on_pressure): end the naps now */
    /* When memory was last short (SCAN_SHORT_HOLD_MS), on nessie_mono_ms: set by kick(), by any
     * recycler that evicted or saw an allocation refused, read by all (they share the scan's
     * cursor, and its pace). Relaxed: a time, read as a hint (two stores out of order leave the
     * older time, a hold shorter by microseconds). */
    uint64_t short_ms;
    struct recycler_thread *t;
};

/* Sleep ms unless stopped or kicked first (a kick made before the call counts: it is consumed
 * here). Returns true if stopping. */
static bool nap(struct recep_recycler *r, uint64_t ms)
{
    pthread_mutex_lock(&r->lock);
    if (ms > 0) {
        struct timespec ts = nessie_deadline_after_ms(CLOCK_REALTIME, ms);
        while (!r->stop && !r->kicked &&
               pthread_cond_timedwait(&r->cond, &r->lock, &ts) != ETIMEDOUT)
            ;
    }
    bool stop = r->stop;
    r->kicked = false;
    pthread_mutex_unlock(&r->lock);
    return stop;
}

/* nessie_node_on_pressure's callback: a writer waits for room. */
static void kick(void *arg)
{
    struct recep_recycler *r = arg;
    __atomic_store_n(&r->short_ms, nessie_mono_ms(), __ATOMIC_RELAXED);
    pthread_mutex_lock(&r->lock);
    r->kicked = true;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

static void *recycler_main(void *arg)
{
    struct recycler_thread *t = arg;
    struct recep_recycler *r = t->r;
    /* Idle naps grow up to a quarter of an expiration period: recycled entries become reusable
     * one period after marking, so checking more often than that buys nothing when idle, and an
     * idle daemon should not wake up often. */
    const uint64_t max_nap = r->expiration_ms / 4 ? r->expiration_ms / 4 : 1;
    uint64_t nap_ms = 1;
    /* Thread 0 sweeps leaks: twice after start (a DTE is reclaimed only if two sweeps at least a
     * grace period apart find it unreferenced; the engine keeps that rule), then every
     * sweep_every_s. */
    uint64_t next_sweep = t->index == 0 ? nessie_mono_ms() : UINT64_MAX;
    int sweeps = 0;
    uint64_t last_scan_ms = nessie_mono_ms(), slots = 0, slots_ms = 0;
    uint64_t peer_marks = 0; /* peers' marks the scan has seen and not freed */
    uint64_t refused = 0;    /* allocations refused so far, as last looked up */
    for (;;) {
        /* The scan's budget: slots in the region (looked up now and then: pages move between
         * classes but their number only grows) x the time since the last scan / the time a
         * pass may take, shared by the recyclers (they move one cursor); at least a slot per
         * ms, at most a pass per run. */
        uint64_t now = nessie_mono_ms();
        if (now - slots_ms >= SCAN_USAGE_MS || slots == 0) {
            struct nessie_class_usage u[64];
            uint32_t nc = nessie_class_usage(r->node, u, 64);
            uint64_t failed = 0;
            slots = peer_marks = 0;
            for (uint32_t c = 0; c < nc; c++) {
                slots += u[c].slots;
                peer_marks += u[c].peer_recycled;
                failed += u[c].failed;
            }
            if (failed != refused) {
                refused = failed;
                __atomic_store_n(&r->short_ms, now, __ATOMIC_RELAXED);
            }
            slots_ms = now;
        }
        uint64_t pass_ms = r->expiration_ms / SCAN_PASSES_PER_PERIOD;
        if (pass_ms == 0)
            pass_ms = 1;
        uint64_t short_ms = __atomic_load_n(&r->short_ms, __ATOMIC_RELAXED);
        bool memory_short = short_ms >= now || now - short_ms < SCAN_SHORT_HOLD_MS ||
                            now - short_ms < r->expiration_ms;
        if (!memory_short && peer_marks == 0 && slots / SCAN_IDLE_SLOTS_PER_MS > pass_ms)
            pass_ms = slots / SCAN_IDLE_SLOTS_PER_MS;
        uint64_t budget = slots * (now - last_scan_ms) / pass_ms / r->n;
        if (budget < now - last_scan_ms)
            budget = now - last_scan_ms;
        if (budget > slots)
            budget = slots;
        if (budget > 0)
            last_scan_ms = now;
        size_t done = nessie_recycle_run(t->ctx, (size_t)budget);
        /* Entries naming a lost node's data: their index slots taken back (issue 28). */
        if (t->index == 0)
            done += nessie_scrub_run(t->ctx, SCRUB_PER_RUN);
        /* A change of membership's leaving entries, once its move phase allows (changes.h): the
         * pass goes on without naps while it gets on, as a backlog does, since the change waits
         * for it; one that made no headway (an entry in progress, no view lease, this node
         * fenced) naps as an idle recycler does. */
        bool moving = false;
        if (t->index == 0 && changes_mover_due()) {
            uint64_t left = nessie_move_left(r->node);
            done += nessie_move_run(t->ctx, MOVE_PER_RUN);
            uint64_t after = nessie_move_left(r->node);
            moving = after > 0 && after < left;
        }
        /* Keep room ahead of the writers (and reclaim expired and flushed items). A run that
         * evicted goes on at once: a node that needs room needs it at the writers' pace, and
         * a nap would cap evictions at a few per nap while the writers wait for them. */
        const struct nessie_counters *ec = nessie_ctx_counters(t->ctx);
        uint64_t victims = ec->evictions + ec->flash_demoted;
        size_t evicted = nessie_evict_run(t->ctx, EVICT_PER_RUN);
        done += evicted;
        /* Victims (evicted, or demoted to the flash log), not the run's count: expired and
         * flushed items it removes are the owner's marks, queued (slab_quarantine), and say
         * nothing of room; a node with short TTLs or after a flush_all would otherwise never
         * reach the idle pace. */
        if (ec->evictions + ec->flash_demoted != victims)
            __atomic_store_n(&r->short_ms, nessie_mono_ms(), __ATOMIC_RELAXED);
        if (t->index == 0 && nessie_mono_ms() >= next_sweep) {
            nessie_sweep_leaks(t->ctx); /* logs what it recycles */
            sweeps++;
            if (sweeps < 3)
                next_sweep = nessie_mono_ms() + r->grace_ms + 100;
            else if (r->sweep_every_s)
                next_sweep = nessie_mono_ms() + 1000ULL * r->sweep_every_s;
            else
                next_sweep = UINT64_MAX;
        }
        uint64_t ms;
        if (done >= RECYCLE_BACKLOG || evicted > 0 || moving) {
            ms = 0;
            nap_ms = 1;
        } else if (done > 0) {
            ms = nap_ms = TRICKLE_NAP_MS < max_nap ? TRICKLE_NAP_MS : max_nap;
        } else {
            ms = nap_ms = nap_ms * 2 > max_nap ? max_nap : nap_ms * 2;
        }
        if (nap(r, ms))
            break;
    }
    return NULL;
}

int recep_recycler_start(struct nessie_node *node, uint32_t n, uint32_t sweep_every_s,
                         struct recep_recycler **out)
{
    struct recep_recycler *r = calloc(1, sizeof(*r));
    if (!r)
        return -1;
    r->node = node;
    r->n = n;
    r->sweep_every_s = sweep_every_s;
    const struct nessie_config *c = nessie_node_config(node);
    r->expiration_ms = c->expiration_ms;
    r->grace_ms = nessie_node_grace_ms(node);
    r->short_ms = nessie_mono_ms(); /* a full pace to begin with: marks of a region attached
                                     * again are the scan's to find */
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    r->t = calloc(n, sizeof(*r->t));
    if (!r->t) {
        free(r);
        return -1;
    }
    /* Before the threads: recycler 0's moves write, and a write that finds no room kicks. */
    nessie_node_on_pressure(node, kick, r);
    for (uint32_t i = 0; i < n; i++) {
        struct recycler_thread *t = &r->t[i];
        t->r = r;
        t->index = i;
        if (nessie_ctx_create(node, &t->ctx) != NESSIE_OK) {
            log_error("recycler %u: cannot create an engine context", i);
            recep_recycler_stop(r);
            return -1;
        }
        int rc = pthread_create(&t->thread, NULL, recycler_main, t);
        if (rc != 0) {
            log_error("recycler %u: pthread_create: %s", i, strerror(rc));
            nessie_ctx_destroy(t->ctx);
            t->ctx = NULL;
            recep_recycler_stop(r);
            return -1;
        }
        t->started = true;
    }
    *out = r;
    return 0;
}

void recep_recycler_stop(struct recep_recycler *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    r->stop = true;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    for (uint32_t i = 0; i < r->n; i++) {
        if (r->t[i].started)
            pthread_join(r->t[i].thread, NULL);
        if (r->t[i].ctx)
            nessie_ctx_destroy(r->t[i].ctx);
    }
    /* After the joins: recycler 0 is a writer too (its moves), and may kick until it ends; the
     * workers and sd servers are stopped by now. */
    nessie_node_on_pressure(r->node, NULL, NULL);
    free(r->t);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
