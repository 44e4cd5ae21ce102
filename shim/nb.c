/*
 * nb.c - the non-blocking extensions (include/nessie/memcached_nb.h).
 *
 * An issued operation is posted into a slot of the thread's own channel (shim_ch_post_*: up to
 * SHIM_CH_ASYNC in flight besides the thread's blocking calls, which share the channel), so that
 * many operations are in the daemon's workers at once, and are batched there, without opening
 * more channels. Test or wait completes it; issuing with NB_MAX_INFLIGHT in flight first
 * completes the oldest. A GET's value is copied once, from the channel into memory from the
 * handle's allocators.
 *
 * May call: common.h, the core (shim.h) and the channel (channel.h); an operation run blocking
 * goes through the public memcached_set and memcached_get (the shim's own, reached as a program
 * reaches them), never another family's internals. The core reaches this file only through the
 * channel watch registered below.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nessie/memcached_nb.h>

#include "channel.h"
#include "common.h"
#include "shim.h"

_Static_assert(NB_MAX_INFLIGHT <= SHIM_CH_ASYNC, "every operation in flight has a slot");

/* Gets in flight at once on a thread's channel: each may have its value staged in the daemon
 * (one longer than its slot's part of the arena waits there to be fetched), and the daemon
 * stages at most WIRE_STAGE_ITEMS items a channel, answering "out of memory" past that; one is
 * kept for the thread's blocking calls. A get issued past this first completes the oldest one
 * (nb-overlap, 32 chunks of 512 KiB a block: 32 of 64 igets were refused so). */
#define NB_GETS_INFLIGHT (WIRE_STAGE_ITEMS - 1)

struct nb_op {
    memcached_req *req;       /* the operation in flight, or NULL */
    memcached_st *ptr;
    int ticket;
    bool is_get;
    size_t *vlen_out;
    uint32_t *flags_out;
    uint64_t issued;          /* order of issue, to find the oldest */
};

/* This thread's operations in flight, the channel they were posted on, and the process they
 * belong to (a forked child starts afresh: the channel is its parent's). */
static __thread struct nb_op ops[NB_MAX_INFLIGHT];
static __thread struct shim_ch *ops_ch;
static __thread pid_t ops_pid;
static __thread uint64_t issue_seq;

static void complete(struct nb_op *o, memcached_return_t rc)
{
    memcached_req *req = o->req;
    req->rc = rc;
    req->complete = 1;
    req->impl = NULL;
    o->req = NULL;
}

/* The channel watch (shim.h): exported under these names, as they always were. */
void shim_nb_drop(void);
void shim_nb_forget(void);

/* This thread's channel is gone at its exit (or was its parent's, in a forked child): forget
 * its operations without touching them (the requests may be gone with the thread). */
void shim_nb_drop(void)
{
    for (int i = 0; i < NB_MAX_INFLIGHT; i++)
        ops[i] = (struct nb_op){0};
    ops_ch = NULL;
}

/* This thread's channel is going away: complete its non-blocking operations in flight with
 * MEMCACHED_CONNECTION_FAILURE. */
void shim_nb_forget(void)
{
    for (int i = 0; i < NB_MAX_INFLIGHT; i++)
        if (ops[i].req)
            complete(&ops[i], MEMCACHED_CONNECTION_FAILURE);
    ops_ch = NULL;
}

/* Registered at load, before any operation can be issued: the core tells this file when a
 * thread's channel goes. */
__attribute__((constructor)) static void nb_watch_channels(void)
{
    static const struct shim_channel_watch watch = {.lost = shim_nb_forget,
                                                    .dropped = shim_nb_drop};
    shim_channel_watch(&watch);
}

/* The channel failed under operation o (wire_rc < 0): every operation on it is lost. */
static void channel_lost(void)
{
    shim_nb_forget();
    shim_channel_failed();
}

/* The answer of o is in rep (or its channel failed: wire_rc < 0). */
static void finish(struct nb_op *o, int wire_rc, const struct wire_rep *rep)
{
    memcached_req *req = o->req;
    if (wire_rc < 0) {
        channel_lost();
        return;
    }
    if (!o->is_get) {
        shim_ch_release(ops_ch, o->ticket);
        complete(o, shim_status(rep->status));
        return;
    }
    struct shim_value v;
    struct shim_alloc a = shim_handle_alloc(o->ptr);
    int rc = shim_ch_get_value(ops_ch, o->ticket, rep, &a, &v);
    if (rc < 0 && rc != -ENOMEM) {
        channel_lost();
        return;
    }
    shim_ch_release(ops_ch, o->ticket);
    if (rc != WIRE_OK) {
        complete(o, rc == -ENOMEM ? MEMCACHED_MEMORY_ALLOCATION_FAILURE : shim_status(rc));
        return;
    }
    if (v.len == 0) { /* empty: NULL with SUCCESS, as memcached_get */
        a.release(a.user, v.data);
        v.data = NULL;
    }
    req->value = v.data;
    req->value_length = v.len;
    req->flags = v.flags;
    if (o->vlen_out)
        *o->vlen_out = v.len;
    if (o->flags_out)
        *o->flags_out = v.flags;
    complete(o, MEMCACHED_SUCCESS);
}

static void wait_op(struct nb_op *o)
{
    struct wire_rep rep;
    int rc = shim_ch_wait(ops_ch, o->ticket, &rep);
    finish(o, rc < 0 ? rc : 0, &rep);
}

/* This thread's channel and a free operation record, completing the oldest operation if all are
 * in flight (for a get, the oldest get if NB_GETS_INFLIGHT are). NULL if no channel can be had. */
static struct nb_op *take_op(struct shim_ch **chp, bool is_get)
{
    if (ops_pid != getpid()) {
        /* Inherited through fork: the parent's operations are not ours to finish. */
        for (int i = 0; i < NB_MAX_INFLIGHT; i++)
            ops[i] = (struct nb_op){0};
        ops_ch = NULL;
        ops_pid = getpid();
    }
    struct shim_ch *ch = shim_channel();
    if (!ch)
        return NULL;
    if (ch != ops_ch) {
        shim_nb_forget(); /* a new channel: what was in flight on the old one is lost */
        ops_ch = ch;
    }
    *chp = ch;
    struct nb_op *oldest = NULL;
    if (is_get) {
        int gets = 0;
        for (int i = 0; i < NB_MAX_INFLIGHT; i++)
            if (ops[i].req && ops[i].is_get) {
                gets++;
                if (!oldest || ops[i].issued < oldest->issued)
                    oldest = &ops[i];
            }
        if (gets >= NB_GETS_INFLIGHT) {
            wait_op(oldest);
            return ops_ch ? oldest : NULL; /* NULL: the channel failed meanwhile */
        }
        oldest = NULL;
    }
    for (int i = 0; i < NB_MAX_INFLIGHT; i++) {
        if (!ops[i].req)
            return &ops[i];
        if (!oldest || ops[i].issued < oldest->issued)
            oldest = &ops[i];
    }
    wait_op(oldest);
    if (!ops_ch) /* the channel failed meanwhile */
        return NULL;
    return oldest;
}

/* req is in flight on this thread's channel, in this process (after a fork, the child's copy of
 * a request its parent issued is not: the channel it rode on is the parent's). */
static bool ours(const memcached_req *req)
{
    const struct nb_op *o = req->impl;
    return ops_pid == getpid() && ops_ch && o >= ops && o < ops + NB_MAX_INFLIGHT && o->req == req;
}

static void req_init(memcached_req *req)
{
    req->complete = 0;
    req->rc = MEMCACHED_IN_PROGRESS;
    req->value = NULL;
    req->value_length = 0;
    req->flags = 0;
    req->impl = NULL;
}

static memcached_return_t done_now(memcached_req *req, memcached_return_t rc)
{
    req->rc = rc;
    req->complete = 1;
    return rc;
}

static memcached_return_t nb_set(memcached_st *ptr, const char *key, size_t klen,
                                 const char *value, size_t vlen, time_t exp, uint32_t *flags,
                                 memcached_req *req)
{
    if (!req)
        return MEMCACHED_INVALID_ARGUMENTS;
    req_init(req);
    uint32_t f = flags ? *flags : 0;
    char k[SHIM_KEY_MAX];
    size_t kl;
    /* An encrypted handle's values go through the blocking path, which seals them (and a
     * buffering handle's, which queues them). */
    if (!shim_serving() || !ptr || shim_encrypted(ptr) ||
        REAL(memcached_behavior_get)(ptr, MEMCACHED_BEHAVIOR_BUFFER_REQUESTS) ||
        shim_full_key(ptr, key, klen, k, &kl) != MEMCACHED_SUCCESS)
        return done_now(req, memcached_set(ptr, key, klen, value, vlen, exp, f));
    struct shim_ch *ch;
    struct nb_op *o = take_op(&ch, false);
    if (!o)
        return done_now(req, MEMCACHED_CONNECTION_FAILURE);
    int64_t e = (int64_t)exp;
    if (REAL(memcached_behavior_get)(ptr, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL))
        e = (int64_t)(uint32_t)exp;
    else if (e < 0 || e > INT32_MAX)
        e = -1; /* as the blocking call: see shim_exptime_of in common.c */
    int ticket;
    int rc = shim_ch_post_store(ch, WIRE_SET, k, kl, value ? value : "", vlen, f, e, &ticket);
    if (rc == -E2BIG || rc == -EBUSY) /* larger than a slot's part: stored now, in chunks */
        return done_now(req, memcached_set(ptr, key, klen, value, vlen, exp, f));
    if (rc != 0) {
        if (rc < 0)
            channel_lost();
        return done_now(req, rc < 0 ? MEMCACHED_CONNECTION_FAILURE : shim_status(rc));
    }
    *o = (struct nb_op){.req = req, .ptr = ptr, .ticket = ticket, .issued = ++issue_seq};
    req->impl = o;
    return MEMCACHED_SUCCESS;
}

/* The get run now, blocking (not served here, or no async slot for it): req completes at once. */
static memcached_return_t get_now(memcached_st *ptr, const char *key, size_t klen, size_t *vlen,
                                  uint32_t *flags, memcached_req *req)
{
    memcached_return_t rc;
    size_t len = 0;
    uint32_t fl = 0;
    req->value = memcached_get(ptr, key, klen, &len, &fl, &rc);
    req->value_length = len;
    req->flags = fl;
    if (vlen)
        *vlen = len;
    if (flags)
        *flags = fl;
    return done_now(req, rc);
}

static char *nb_get(memcached_st *ptr, const char *key, size_t klen, size_t *vlen,
                    uint32_t *flags, memcached_req *req, memcached_return_t *error)
{
    memcached_return_t dummy;
    if (!error)
        error = &dummy;
    if (!req) {
        *error = MEMCACHED_INVALID_ARGUMENTS;
        return NULL;
    }
    req_init(req);
    char k[SHIM_KEY_MAX];
    size_t kl;
    if (!shim_serving() || !ptr || shim_encrypted(ptr) ||
        shim_full_key(ptr, key, klen, k, &kl) != MEMCACHED_SUCCESS) {
        *error = get_now(ptr, key, klen, vlen, flags, req);
        return NULL;
    }
    shim_drain_writes(ptr); /* queued writes go out ahead of this read, as on a connection */
    struct shim_ch *ch;
    struct nb_op *o = take_op(&ch, true);
    if (!o) {
        *error = done_now(req, MEMCACHED_CONNECTION_FAILURE);
        return NULL;
    }
    int ticket;
    int rc = shim_ch_post_get(ch, k, kl, &ticket);
    if (rc == -E2BIG || rc == -EBUSY) { /* no async slots on this channel: read it now */
        *error = get_now(ptr, key, klen, vlen, flags, req);
        return NULL;
    }
    if (rc != 0) {
        if (rc < 0)
            channel_lost();
        *error = done_now(req, rc < 0 ? MEMCACHED_CONNECTION_FAILURE : shim_status(rc));
        return NULL;
    }
    *o = (struct nb_op){.req = req, .ptr = ptr, .ticket = ticket, .is_get = true,
                        .vlen_out = vlen, .flags_out = flags, .issued = ++issue_seq};
    req->impl = o;
    *error = MEMCACHED_SUCCESS;
    return NULL;
}

memcached_return_t memcached_iset(memcached_st *ptr, const char *key, size_t key_length,
                                  const char *value, size_t value_length, time_t expiration,
                                  uint32_t *flags, memcached_req *req)
{
    return nb_set(ptr, key, key_length, value, value_length, expiration, flags, req);
}

memcached_return_t memcached_bset(memcached_st *ptr, const char *key, size_t key_length,
                                  const char *value, size_t value_length, time_t expiration,
                                  uint32_t *flags, memcached_req *req)
{
    return nb_set(ptr, key, key_length, value, value_length, expiration, flags, req);
}

char *memcached_iget(memcached_st *ptr, const char *key, size_t key_length, size_t *value_length,
                     uint32_t *flags, memcached_req *req, memcached_return_t *error)
{
    return nb_get(ptr, key, key_length, value_length, flags, req, error);
}

char *memcached_bget(memcached_st *ptr, const char *key, size_t key_length, size_t *value_length,
                     uint32_t *flags, memcached_req *req, memcached_return_t *error)
{
    return nb_get(ptr, key, key_length, value_length, flags, req, error);
}

void memcached_test(memcached_st *ptr, memcached_req *req)
{
    (void)ptr;
    if (!req || req->complete || !req->impl)
        return;
    struct nb_op *o = req->impl;
    if (!ours(req))
        return;
    struct wire_rep rep;
    int rc = shim_ch_poll(ops_ch, o->ticket, &rep);
    if (rc != 0)
        finish(o, rc < 0 ? rc : 0, &rep);
}

void memcached_wait(memcached_st *ptr, memcached_req *req)
{
    (void)ptr;
    if (!req || req->complete || !req->impl)
        return;
    if (!ours(req))
        return;
    wait_op(req->impl);
}
