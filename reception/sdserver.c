/*
 * sdserver.c - the daemon's server-driven threads (sdserver.h).
 */
#include "sdserver.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "cpuload.h"
#include "log.h"

/* An adaptive server that found nothing sleeps this long at first, doubling up to a cap: 200 us
 * while a stream of requests comes (the last one within SD_QUIET_NS; a request that arrives
 * during a nap waits at most that), 2 ms after that or for a lone request, 10 ms once the rings
 * have been quiet for SD_IDLE_NS. The three daemons of an idle local cluster used 1.56 CPU
 * seconds in 10 s at a 200 us cap, 0.40 at 2 ms, against 0.11-0.14 without SD servers
 * (tests/integration/cluster-kill.sh's idle line). On shm a request rings the home node's
 * doorbell and ends its servers' naps (nessie_sd_nap), so there they nap 10 ms whatever came
 * before (the caps above are for fabrics without a bell); over verbs nothing rings (a doorbell
 * there would need a WRITE with immediate and a completion channel), so the first request after
 * a second of silence waits up to 10 ms. The paper's servers spin instead (sd_poll = spin). */
#define SD_NAP_MIN_NS 2000
#define SD_NAP_BUSY_MAX_NS 200000
#define SD_NAP_QUIET_MAX_NS 2000000
#define SD_NAP_IDLE_MAX_NS 10000000
#define SD_QUIET_NS 100000000ULL
#define SD_IDLE_NS 1000000000ULL
/* The short naps are for a stream of requests, not for one: a lone request (mode auto's
 * exploration of the shipped way, once every second or so per home) kept a server on 200 us naps
 * for the next 100 ms, five thousand wake-ups a second that preempted the client and worker on
 * busy cores (issue 27). Only SD_BUSY_MIN requests within SD_QUIET_NS count as a stream. */
#define SD_BUSY_MIN 4

struct sd_thread {
    struct recep_sdserver *owner;
    struct nessie_ctx *ctx;
    pthread_t thread;
    uint32_t index;
    bool started;
};

struct recep_sdserver {
    _Atomic int stop;
    struct nessie_node *node;
    enum recep_sd_poll poll;
    uint64_t spin_ns;
    uint32_t n;
    struct sd_thread *t;
};

/* Requests answered since stream_start (a window of SD_QUIET_NS) and in the window before it:
 * the two together make a stream once they reach SD_BUSY_MIN. */
struct sd_stream {
    uint64_t start, n, prev;
};

static void stream_note(struct sd_stream *st, uint64_t n, uint64_t now)
{
    if (now - st->start >= SD_QUIET_NS) {
        st->prev = now - st->start < 2 * SD_QUIET_NS ? st->n : 0;
        st->start = now;
        st->n = 0;
    }
    st->n += n;
}

static void *sdserver_main(void *arg)
{
    struct sd_thread *t = arg;
    struct recep_sdserver *s = t->owner;
    uint64_t last_work = nessie_mono_ns();
    struct sd_stream stream = {0};
    /* The workers' helpers answer GETs too (nessie_sd_help): those count in the stream, so the
     * naps stay short while requests come, whoever answers them; they do not make this thread
     * spin (last_help, not last_work). */
    uint64_t helped_seen = nessie_sd_helped(s->node), last_help = 0;
    /* Where requests ring (nessie_sd_nap_rings: shm), a nap ends when one comes: short naps
     * only cost wake-ups, so it sleeps SD_NAP_IDLE_MAX_NS at once. bench/flash.sh's loads on
     * 3 nodes / 2 cores, two alternated runs each, against the bell with the naps of a fabric
     * without one: zipf-one GET p99 170 -> 141-145 us, uniform 512-696 -> 422-446 us,
     * zipf-all 323-348 -> 266-291 us, ops +3-50 % (then with 2 ms naps; 10 ms since). */
    const bool rung = nessie_sd_nap_rings(s->node);
    const uint64_t nap_first = rung ? SD_NAP_IDLE_MAX_NS : SD_NAP_MIN_NS;
    uint64_t nap = nap_first;
    while (!atomic_load_explicit(&s->stop, memory_order_acquire)) {
        size_t served = nessie_sd_serve(t->ctx, t->index, s->n);
        if (served) {
            stream_note(&stream, served, nessie_mono_ns());
            last_work = 0;
            nap = nap_first;
            continue;
        }
        if (s->poll == RECEP_SD_POLL_SPIN) {
            __builtin_ia32_pause();
            continue;
        }
        uint64_t now = nessie_mono_ns();
        if (last_work == 0)
            last_work = now;
        /* Not where the machine is crowded (nessie_cpu_crowded): there the spin keeps a CPU
         * from the requesters and helpers queued behind it, and a request rings the bell. */
        if (now - last_work < s->spin_ns && !(rung && nessie_cpu_crowded())) {
            __builtin_ia32_pause();
            continue;
        }
        nessie_sd_nap(t->ctx, nap); /* a peer's request wakes it where the fabric rings */
        uint64_t helped = nessie_sd_helped(s->node);
        if (helped != helped_seen) {
            stream_note(&stream, helped - helped_seen, now);
            helped_seen = helped;
            last_help = now;
        }
        uint64_t quiet = now - (last_help > last_work ? last_help : last_work);
        bool busy = quiet < SD_QUIET_NS && stream.n + stream.prev >= SD_BUSY_MIN;
        /* Where requests ring, a nap's length only paces the heartbeat (sd_beat: a shunned
         * home is probed one take-up limit after, and needs its beat to have moved), so the
         * nap stays nap_first, the idle one. Mode auto's explorations, a lone request per home
         * every second or so, had kept each peer's server on 2 ms naps for the second after
         * each: 200-550 wake-ups a second against mode cd's 150, on cores the client and its
         * worker keep busy (issue 27; bench/modes.sh's mixed scenario, peers' context
         * switches). Elsewhere the naps double up to the cap of the stream's state. */
        if (!rung) {
            uint64_t cap = busy                 ? SD_NAP_BUSY_MAX_NS
                           : quiet < SD_IDLE_NS ? SD_NAP_QUIET_MAX_NS
                                                : SD_NAP_IDLE_MAX_NS;
            nap = nap * 2 > cap ? cap : nap * 2;
        }
    }
    return NULL;
}

int recep_sdserver_start(struct nessie_node *node, uint32_t n, enum recep_sd_poll poll,
                         uint32_t spin_us, struct recep_sdserver **out)
{
    struct recep_sdserver *s = calloc(1, sizeof(*s));
    if (!s || !(s->t = calloc(n, sizeof(*s->t)))) {
        free(s);
        log_error("sd server: out of memory");
        return -1;
    }
    s->n = n;
    s->node = node;
    s->poll = poll;
    s->spin_ns = (uint64_t)spin_us * 1000;
    for (uint32_t i = 0; i < n; i++) {
        struct sd_thread *t = &s->t[i];
        t->owner = s;
        t->index = i;
        if (nessie_ctx_create(node, &t->ctx) != NESSIE_OK) {
            log_error("sd server %u: cannot create an engine context", i);
            recep_sdserver_stop(s);
            return -1;
        }
        int rc = pthread_create(&t->thread, NULL, sdserver_main, t);
        if (rc != 0) {
            log_error("sd server %u: pthread_create: %s", i, strerror(rc));
            recep_sdserver_stop(s);
            return -1;
        }
        t->started = true;
    }
    *out = s;
    return 0;
}

void recep_sdserver_stop(struct recep_sdserver *s)
{
    if (!s)
        return;
    atomic_store_explicit(&s->stop, 1, memory_order_release);
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->t[i].started)
            pthread_join(s->t[i].thread, NULL);
        nessie_ctx_destroy(s->t[i].ctx);
    }
    free(s->t);
    free(s);
}
