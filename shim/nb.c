/*
 * nb.c - the non-blocking extensions (include/nessie/memcached_nb.h).
 *
 * Each thread keeps up to NB_MAX_INFLIGHT channels of its own besides its blocking one; an
 * issued operation occupies one (a channel carries one request at a time) until test or wait
 * completes it, so that many operations are in the daemon's workers at once. Issuing with every
 * channel busy first completes the oldest operation.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nessie/memcached_nb.h>

#include "channel.h"
#include "shim.h"

#define KEY_MAX 250

struct nb_slot {
    struct shim_ch *ch;
    memcached_req *req;       /* the operation in flight, or NULL */
    memcached_st *ptr;
    bool is_get;
    size_t *vlen_out;
    uint32_t *flags_out;
    uint64_t issued;          /* order of issue, to find the oldest */
};

/* This thread's slots, and the process they belong to (a forked child starts afresh). */
static __thread struct nb_slot pool[NB_MAX_INFLIGHT];
static __thread pid_t pool_pid;
static __thread uint64_t issue_seq;

static void complete(struct nb_slot *s, memcached_return_t rc)
{
    memcached_req *req = s->req;
    req->rc = rc;
    req->complete = 1;
    req->impl = NULL;
    s->req = NULL;
}

/* The answer of slot s is in rep (or the channel failed: wire_rc < 0). */
static void finish(struct nb_slot *s, int wire_rc, const struct wire_rep *rep)
{
    memcached_req *req = s->req;
    if (wire_rc < 0) {
        shim_ch_close(s->ch);
        s->ch = NULL;
        complete(s, MEMCACHED_CONNECTION_FAILURE);
        return;
    }
    if (!s->is_get) {
        complete(s, shim_status(rep->status));
        return;
    }
    struct shim_value v;
    int rc = shim_ch_get_value(s->ch, rep, &v);
    if (rc < 0) {
        shim_ch_close(s->ch);
        s->ch = NULL;
        complete(s, MEMCACHED_CONNECTION_FAILURE);
        return;
    }
    if (rc != WIRE_OK) {
        complete(s, shim_status(rc));
        return;
    }
    req->value = v.len ? shim_dup_value(s->ptr, v.data, v.len) : NULL;
    req->value_length = v.len;
    req->flags = v.flags;
    if (s->vlen_out)
        *s->vlen_out = v.len;
    if (s->flags_out)
        *s->flags_out = v.flags;
    free(v.data);
    complete(s, v.len && !req->value ? MEMCACHED_MEMORY_ALLOCATION_FAILURE : MEMCACHED_SUCCESS);
}

static void wait_slot(struct nb_slot *s)
{
    struct wire_rep rep;
    int rc = shim_ch_wait(s->ch, &rep);
    finish(s, rc < 0 ? rc : 0, &rep);
}

/* A free slot with an open channel, completing the oldest operation if all are busy. NULL if no
 * channel can be opened. */
static struct nb_slot *take_slot(void)
{
    if (pool_pid != getpid()) {
        /* Inherited through fork: the parent's channels are not ours to use. */
        for (int i = 0; i < NB_MAX_INFLIGHT; i++) {
            if (pool[i].ch)
                shim_ch_close(pool[i].ch);
            pool[i] = (struct nb_slot){0};
        }
        pool_pid = getpid();
    }
    struct nb_slot *oldest = NULL;
    for (int i = 0; i < NB_MAX_INFLIGHT; i++) {
        if (!pool[i].req) {
            if (!pool[i].ch && shim_ch_open(shim_socket_path(), &pool[i].ch) != WIRE_OK) {
                pool[i].ch = NULL;
                continue;
            }
            return &pool[i];
        }
        if (!oldest || pool[i].issued < oldest->issued)
            oldest = &pool[i];
    }
    if (!oldest)
        return NULL;
    wait_slot(oldest);
    if (!oldest->ch && shim_ch_open(shim_socket_path(), &oldest->ch) != WIRE_OK) {
        oldest->ch = NULL;
        return NULL;
    }
    return oldest;
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
    char k[KEY_MAX];
    size_t kl;
    if (!shim_serving() || !ptr || shim_full_key(ptr, key, klen, k, &kl) != MEMCACHED_SUCCESS)
        return done_now(req, memcached_set(ptr, key, klen, value, vlen, exp, f));
    struct nb_slot *s = take_slot();
    if (!s)
        return done_now(req, MEMCACHED_CONNECTION_FAILURE);
    int64_t e = (int64_t)exp;
    if (REAL(memcached_behavior_get)(ptr, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL))
        e = (int64_t)(uint32_t)exp;
    else if (e < 0 || e > INT32_MAX)
        e = -1; /* as the blocking call: see exptime_of in api.c */
    int rc = shim_ch_post_store(s->ch, WIRE_SET, k, kl, value ? value : "", vlen, f, e);
    if (rc == -E2BIG) /* larger than the arena: stored now, in chunks */
        return done_now(req, memcached_set(ptr, key, klen, value, vlen, exp, f));
    if (rc != 0) {
        shim_ch_close(s->ch);
        s->ch = NULL;
        return done_now(req, rc < 0 ? MEMCACHED_CONNECTION_FAILURE : shim_status(rc));
    }
    *s = (struct nb_slot){.ch = s->ch, .req = req, .ptr = ptr, .issued = ++issue_seq};
    req->impl = s;
    return MEMCACHED_SUCCESS;
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
    char k[KEY_MAX];
    size_t kl;
    if (!shim_serving() || !ptr || shim_full_key(ptr, key, klen, k, &kl) != MEMCACHED_SUCCESS) {
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
        *error = done_now(req, rc);
        return NULL;
    }
    struct nb_slot *s = take_slot();
    if (!s) {
        *error = done_now(req, MEMCACHED_CONNECTION_FAILURE);
        return NULL;
    }
    int rc = shim_ch_post_get(s->ch, k, kl);
    if (rc != 0) {
        shim_ch_close(s->ch);
        s->ch = NULL;
        *error = done_now(req, rc < 0 ? MEMCACHED_CONNECTION_FAILURE : shim_status(rc));
        return NULL;
    }
    *s = (struct nb_slot){.ch = s->ch, .req = req, .ptr = ptr, .is_get = true, .vlen_out = vlen,
                          .flags_out = flags, .issued = ++issue_seq};
    req->impl = s;
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
    struct nb_slot *s = req->impl;
    struct wire_rep rep;
    int rc = shim_ch_poll(s->ch, &rep);
    if (rc != 0)
        finish(s, rc < 0 ? rc : 0, &rep);
}

void memcached_wait(memcached_st *ptr, memcached_req *req)
{
    (void)ptr;
    if (!req || req->complete || !req->impl)
        return;
    wait_slot(req->impl);
}
