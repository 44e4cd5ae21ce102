/*
 * protocol.h - the client-driven protocol of Appendix A. Not a public header.
 *
 * Room: protocol, above memory. It owns the operations as one node carries them out alone, with
 * one-sided READ, WRITE and CAS: protocol.c (the operations' machinery: a call's state, its
 * counted fabric accesses, views of entries, orphans and their takeover, the reverse pass,
 * recycling, a call's end), get.c (GET, A.1.2), write.c (PUT and its forms, DELETE: A.1.3,
 * A.1.5; and the new entries writes and MIGRATE's copies are written into), migrate.c (MIGRATE,
 * A.1.4), arith.c (memcached's incr/decr on values), and the test back doors (nessie_test.h). It
 * may call memory and fabric. It knows nothing of modes: who runs a call is decided above it
 * (modes/dispatch.c), and a call comes here planned (memory/keys.h) and checked.
 *
 * What one file defines for the others is named proto_ (the library exports no generic names);
 * the tiny helpers the GET path calls are static inline here, so that none of them is a call
 * across files. The entry points the rooms above call are at the end ("the calls").
 */
#ifndef NESSIE_KVSTORE_PROTOCOL_H
#define NESSIE_KVSTORE_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memory/memory.h"
#include "nessie_test.h"

/* Outcome of one attempt. */
enum attempt {
    A_DONE,      /* final: *status is the answer */
    A_RETRY,     /* concurrent operation: back off, try again */
    A_RETRY_NOW, /* the way was cleared (takeover, migration): try again at once */
};

/* A call in progress: what lives across its attempts. */
struct op {
    struct nessie_ctx *ctx;
    struct nessie_node *node;
    const unsigned char *key;
    uint32_t klen;
    uint32_t n;                     /* positions: the ways, more during a change (keys.h) */
    uint32_t no_insert;             /* bit i: pos[i] takes no new entry (keys.h) */
    uint64_t step;                  /* the placement's step pos was planned at (keys.h) */
    uint64_t pos[NESSIE_PLAN_MAX];  /* global ITE positions of the key, I_1..I_n */
    uint32_t filter;
    uint64_t id;                    /* creator id written into this call's DTEs */
    uint64_t deadline;              /* monotonic ns: no attempt starts after it (B, and W once) */
    bool lost;                      /* lost track of its own entry (write.c, lost_track): the
                                       outcome is unknown, whatever else happened */
    bool spent;                     /* its budget ended before it started (a shipped call that
                                       its caller runs after a withdrawal): no attempt runs */
    uint64_t attempt_start;         /* monotonic ns: Step 0 timer of the current attempt */
    uint64_t seen[NESSIE_PLAN_MAX]; /* ITE values as this attempt last read or wrote them */
    uint64_t rec[NESSIE_MAX_REC];   /* I_rec: ITEs whose DTEs to recycle once the call is done */
    uint32_t nrec;
    uint64_t mine;                  /* ITE of this call's published (or possibly published: its
                                       CAS's outcome was lost), uncommitted DTE, or 0 */
    uint64_t mine_at;               /* its global ITE position (a plan made again may no longer
                                       hold it at the same index, or at all) */
    uint64_t mine_replaced;         /* the ITE word its CAS replaced (what a rollback restores) */
    bool mine_prev_live;            /* its previous version is the value readers see */
    uint64_t mine_version;          /* its version */
    /* Multi-get: I_1 read ahead in a batch with other keys' (pre_ite), at pre_t (monotonic ns,
     * taken before the batch was posted). Used by the first attempt only. */
    bool pre_valid;
    uint64_t pre_ite;
    uint64_t pre_t;
    bool memory_wait;               /* an attempt found no free entry and waited for one */
    int want_cls;                   /* ... of this size class */
    uint64_t memory_wait_ns;        /* ... since then (nessie_mono_ns) */
    int last_abort;                 /* why the last attempt retried (enum nessie_abort), or -1 */
    /* GET: where a value read in a READ of its own goes (the caller's buffer: the daemon's
     * channel arena), instead of the context's buffer; NULL: the context's. */
    unsigned char *dst;
    size_t dst_cap;
    /* The endpoint's totals when the call started, for its traffic histograms. */
    uint64_t fab_ops0, fab_bytes0;
};

/* A DTE as read: header copy, key and (if read) value. */
struct dte_view {
    struct dte_hdr h;
    const unsigned char *key;
    const unsigned char *value; /* NULL if the value was not read */
    bool stale;                 /* the slot is in another life than the ITE named: the view of
                                   the index it came from is older than one expiration period */
    unsigned char *cached;      /* the context's cached copy it came from, or NULL */
    bool flash_gone;            /* a flash entry whose record is gone: no key's (protocol.c) */
};

/* --- small helpers ------------------------------------------------------------------------- */

/* The test hook (nessie.h, nessie_set_test_hook): process-wide, because tests drive several
 * contexts from one thread. */
extern nessie_hook_fn proto_test_hook;
extern void *proto_test_hook_user;

/* Loaded atomically: a test may install or remove it while server threads run calls (test_sd);
 * the user pointer is stored before the function (release), so it goes with it. A plain load on
 * x86. */
#define HOOK(op, point, arg)                                                              \
    do {                                                                                  \
        nessie_hook_fn h_ = __atomic_load_n(&proto_test_hook, __ATOMIC_ACQUIRE);          \
        if (__builtin_expect(h_ != NULL, 0))                                              \
            h_((op)->ctx, (point), (uint32_t)(arg),                                       \
               __atomic_load_n(&proto_test_hook_user, __ATOMIC_RELAXED));                 \
    } while (0)

static inline uint64_t ite_node_of_pos(const struct nessie_node *nd, uint64_t pos)
{
    return pos / nd->cfg.index_slots;
}

static inline uint64_t ite_off_of_pos(const struct nessie_node *nd, uint64_t pos)
{
    return (pos % nd->cfg.index_slots) * 8;
}

/* Remember the endpoint's totals: proto_finish() charges the difference to the call. */
static inline void op_traffic_mark(struct op *op)
{
    const struct fab_ep_stats *st = fab_ep_stats(op->ctx->ep);
    op->fab_ops0 = st->reads + st->writes + st->cas;
    op->fab_bytes0 = st->bytes_read + st->bytes_written;
}

/* A call's start: its key's positions and filter bits (from the plan kp, which must outlive the
 * call), its creator id, its budget; counts it as an operation of kind. */
void proto_op_init(struct op *op, struct nessie_ctx *ctx, enum nessie_opkind kind,
                   const struct key_plan *kp);

/* The last moment the call may post anything (front/engine.c, bound_compute): start + B + W + E. The
 * deadline is start + B, moved once by W when the call waited for room with eviction on
 * (write.c, proto_memory_short). */
static inline uint64_t op_act_end(const struct op *op)
{
    const struct nessie_bound *b = &op->node->bound;
    bool extended = op->memory_wait && !op->node->cfg.no_evict;
    return op->deadline + (extended ? 0 : b->memory_wait_ns) + b->period_ns;
}

/* Step 0: an attempt that outlived one expiration period may hold stale views: abort it. */
static inline bool attempt_expired(const struct op *op)
{
    return nessie_mono_ns() - op->attempt_start >= (uint64_t)op->node->cfg.expiration_ms * 1000000ULL;
}

static inline void count_abort(struct op *op, enum nessie_abort why)
{
    op->last_abort = why;
    CTR_ADD(OPC(op->ctx).aborts[why], 1);
}

/* Step 0, at the moments that matter: a result is used, or a CAS is made, only if every read it
 * rests on is less than one expiration period old. A thread descheduled for longer between its
 * reads and this check could otherwise act on an entry that was recycled and reused meanwhile
 * (the same slot, for the same key, even has the same ITE word). */
#define EXPIRED_RETRY(op)                              \
    do {                                               \
        if (attempt_expired(op)) {                     \
            count_abort((op), NESSIE_ABORT_TIMEOUT);   \
            return A_RETRY;                            \
        }                                              \
    } while (0)

/* The placement moved to step (a change of membership's phase, its commit) since the call was
 * planned: plan its key again at step, for the attempt about to start (membership.h,
 * "Changes"). A read-ahead of I_1 (pre_valid) was for the old plan and is dropped. */
void proto_replan(struct op *op, uint64_t step);

/* Exponential back-off with jitter before the next attempt (paper 4.3.2). */
void proto_backoff(struct op *op, unsigned attempt);

/* --- fabric access, counted ------------------------------------------------------------------ */

static inline int fabric_status(int rc)
{
    return rc == FAB_OK ? NESSIE_OK : NESSIE_FABRIC_ERROR;
}

static inline int ite_read(struct op *op, uint64_t pos, uint64_t *val)
{
    struct fab_wr wr = {.opcode = FAB_OP_READ, .node = (uint32_t)ite_node_of_pos(op->node, pos),
                        .region = FAB_REGION_INDEX, .offset = ite_off_of_pos(op->node, pos),
                        .local = val, .length = 8};
    CTR_ADD(OPC(op->ctx).ite_reads, 1);
    CTR_ADD(OPC(op->ctx).bytes_read, 8);
    return fabric_status(fab_exec(op->ctx->ep, &wr));
}

/* ite_cas, and when its completion reports an error, a READ of the entry to learn whether it ran
 * (*ok); *clean: the CAS itself completed. NESSIE_FABRIC_ERROR: even the READ failed (unknown). */
int proto_ite_cas_resolve(struct op *op, uint64_t pos, uint64_t expect, uint64_t swap, bool *ok,
                          bool *clean);
/* CAS a DTE's state word (the writer's last step, a rollback, or a takeover). Sets *old. */
int proto_dte_state_cas(struct op *op, uint64_t ite, uint64_t expect, uint64_t swap,
                        uint64_t *old);

/* Fetch the DTE ite refers to (A.1.2 step 2.3), into the context's buffer b unless it is
 * cached: protocol.c says what each argument means. */
int proto_dte_fetch(struct op *op, uint64_t ite, int b, const void *key, uint32_t klen,
                    bool want_value, uint64_t ite_read_ns, struct dte_view *v, bool *match);

/*
 * Take the room of an entry back in place, by CAS on the exact word sv at position src as an
 * eviction does: for a source whose value is lost to its key (issue 28: its value was on a fenced
 * node, or it is a rejoin's orphan), a duplicate the mover cannot place, and a linked committed
 * tombstone (its DELETE's unlink, done on its behalf). how: TAKE_RECYCLE recycles its entry (not
 * when its memory is a lost node's); TAKE_LOST counts it as a lost entry (its value lost to its
 * key: a tombstone or a duplicate is not). Returns A_DONE (*status set: NESSIE_OK once the slot is
 * empty, or the fabric's error), or A_RETRY when the attempt outlived its period or the word
 * changed meanwhile (nothing done).
 */
#define TAKE_RECYCLE 1u
#define TAKE_LOST 2u
#define TAKE_FLASH 4u /* counted as a flash item dropped */
#define TAKE_ANON 8u  /* a flash item whose key is not known here: told to the checkers by
                         position and filter bits (always so for another node's) */
enum attempt proto_take_back(struct op *op, uint64_t src, uint64_t sv, unsigned how,
                             int *status);

/*
 * Step 2.3 as a pass over I_1..I_n runs it (GET's and a write's forward pass, a write's step 4):
 * fetch ite's DTE (its value too if want_value), read at ite_read_ns, into *v, and judge it.
 * Returns 1 if it holds the op's key, 0 if not (the pass goes on), or -1 if the attempt ends
 * here: *end is A_DONE (*status set) or A_RETRY (the view is older than one expiration period).
 */
static inline int proto_fetch_key(struct op *op, uint64_t pos, uint64_t ite, bool want_value,
                                  uint64_t ite_read_ns, struct dte_view *v, int *status,
                                  enum attempt *end)
{
    bool match;
    *status = proto_dte_fetch(op, ite, 0, op->key, op->klen, want_value, ite_read_ns, v, &match);
    /* A flash entry that must come out: another node's that its owner cannot judge for us
     * (ctx->flash_take), or one whose record is gone or unreadable. Out of the index by CAS on
     * the exact word, as an eviction (proto_take_back tells the checkers), and the pass goes on
     * past it only once it is out: an entry left there may still be the key's. */
    const bool take = (*status == NESSIE_ELSEWHERE && op->ctx->flash_take) ||
                      (*status == NESSIE_OK && v->flash_gone);
    if (take) {
        unsigned how = TAKE_FLASH | (v->flash_gone ? TAKE_RECYCLE | TAKE_ANON : 0);
        *status = NESSIE_OK;
        enum attempt a = proto_take_back(op, pos, ite, how, status);
        if (a == A_DONE && *status == NESSIE_OK)
            return 0;
        *end = a; /* A_RETRY: expired, or changed meanwhile (read it again); or an error */
        return -1;
    }
    if (*status != NESSIE_OK) {
        *end = A_DONE;
        return -1;
    }
    if (v->stale) {
        count_abort(op, NESSIE_ABORT_TIMEOUT);
        *end = A_RETRY;
        return -1;
    }
    return match;
}

/* --- orphans, reverse pass, the end of a call ------------------------------------------------ */

/* An uncommitted entry older than the grace period, on its owner's clock. */
bool proto_is_orphan(struct op *op, uint64_t ite, const struct dte_hdr *h);
/* Take over the orphan ite at position pos (view v): finish it as its writer would have, or undo
 * it if it was abandoned (or is a migration's copy that must not stand). */
int proto_takeover(struct op *op, uint64_t pos, uint64_t ite, const struct dte_view *v);
/* Reverse pass (A.1.2 step 3, A.1.3 step 5): I_{n-1}..I_1 read again; *changed if any differs
 * from what the attempt saw. */
int proto_reverse_pass(struct op *op, bool *changed);
/* Hand every DTE in I_rec to recycling (A.1.3 step 7). */
void proto_recycle_all(struct op *op);
/* A.1.2 step 3: the key met nowhere; the reverse pass decides (the call ends with `absent`). */
enum attempt proto_end_absent(struct op *op, int absent, int *status);

/* "Acting on a view" (membership/membership.h): whether an attempt started at attempt_start posts
 * its last request, one expiration period later, before the view's lease ends (always, with no
 * lease in force). Never waits: proto_view_gate does. */
static inline bool proto_view_current(const struct op *op)
{
    uint64_t until = mship_valid_until(&op->node->view);
    return until == 0 || op->attempt_start + op->node->bound.period_ns <= until;
}

/* "Acting on a view" (membership/membership.h): whether the attempt starting now (attempt_start)
 * posts its last request, one expiration period later, before the view's lease ends (what it
 * posts lands within the fabric's bound after: the daemon's delays allow for it); if not, wait
 * for a renewal (counted as a view wait) until the call's deadline, and then restart the
 * attempt's timer. Returns false when the deadline came first: the attempt must not run. */
bool proto_view_gate(struct op *op);

/* Run attempts with back-off until one is final or the call's budget is spent; an attempt runs
 * only under a current view (proto_view_gate): a call that cannot get one ends without its
 * attempt, NESSIE_FABRIC_ERROR (no effect) or, with an entry of its own published, TIMEOUT. */
#define RUN_ATTEMPTS(op, call)                                                   \
    do {                                                                         \
        for (unsigned attempt_no = 0;; attempt_no++) {                           \
            /* A read-ahead belongs to the first attempt only: its timer starts   \
             * then; any later attempt reads I_1 itself, on a timer of its own. */ \
            if (attempt_no > 0)                                                  \
                (op)->pre_valid = false;                                         \
            (op)->attempt_start = (op)->pre_valid ? (op)->pre_t : nessie_mono_ns(); \
            /* The view's lease (membership.h): in force only with views. */     \
            if (__builtin_expect(mship_valid_until(&(op)->node->view) != 0, 0) && \
                !proto_view_gate(op)) {                                          \
                status = (op)->mine ? NESSIE_TIMEOUT : NESSIE_FABRIC_ERROR;      \
                break;                                                           \
            }                                                                    \
            /* A shipped call run here with its budget spent acts not at all. */  \
            if (attempt_no == 0 && (op)->spent) {                                \
                status = NESSIE_TIMEOUT;                                         \
                break;                                                           \
            }                                                                    \
            /* Each attempt acts on the placement's step it reads after its      \
             * timer started (membership.h, "Changes"). */                       \
            uint64_t step_ = mship_step(&(op)->node->view);                      \
            if (__builtin_expect(step_ != (op)->step, 0))                        \
                proto_replan((op), step_);                                       \
            CTR_ADD(OPC((op)->ctx).attempts, 1);                                 \
            enum attempt a_ = (call);                                            \
            if (a_ == A_DONE)                                                    \
                break;                                                           \
            if (nessie_mono_ns() >= (op)->deadline) {                            \
                status = NESSIE_TIMEOUT;                                         \
                break;                                                           \
            }                                                                    \
            if (a_ == A_RETRY)                                                   \
                proto_backoff((op), attempt_no);                                 \
        }                                                                        \
    } while (0)

/* A call's end: its outcome counted, its traffic charged to the histograms. Returns status (or
 * NESSIE_NO_MEMORY for a call that timed out waiting for room). */
int proto_finish(struct op *op, int status);

/* --- new entries (write.c) ------------------------------------------------------------------- */

/* A write (or a MIGRATE's copy) found no room for a new entry of these sizes: whether to retry
 * (the wait is counted, and with eviction on, room is made) or fail for lack of memory. */
bool proto_memory_short(struct op *op, uint32_t key_len, uint32_t value_len);
/* Write a new DTE (BUSY, uncommitted) into this node's data region, created by `creator`, from
 * the header tmpl, key and the value's two parts. Sets *ite_out. */
int proto_dte_write_new(struct op *op, const struct dte_hdr *tmpl, uint64_t creator,
                        const void *key, const void *v1, uint32_t l1, const void *v2,
                        uint32_t l2, uint32_t filter, uint64_t *ite_out);
/* Free a new DTE that no ITE ever named (no quarantine needed). */
void proto_dte_free_unpublished(struct op *op, uint64_t ite);
/* The writer's last step (A.1.3 step 6, A.1.4 step 8): commit our own DTE; *committed. */
int proto_commit_own(struct op *op, uint64_t ite, bool *committed);

/* --- MIGRATE (migrate.c) --------------------------------------------------------------------- */

/* MIGRATE the entry at position src out of the way of key_pos (the key_n positions of the key
 * that needs room); depth counts recursion. The destination is never a position its key's plan
 * keeps from new entries (keys.h, no_insert). */
enum attempt proto_migrate(struct op *op, uint64_t src, const uint64_t *key_pos, uint32_t key_n,
                           unsigned depth, int *status);

/*
 * A retire's values (move.c, model/retire.pml). proto_retiring_data: whether an entry naming
 * node's data must not be linked again as it is, here: node is being retired, or was retired and
 * is still reachable (membership.h, retired), and this node is not it. Whoever would link such a
 * word back into the index (a write taking its entry back, the takeover of an abandoned entry)
 * links a copy instead, or the relocation's pass could have passed that slot already.
 * proto_retire_copy: a committed copy of the value word w names, in this node's data (the same
 * item: key, value, version, creator, flags, expiry), linked nowhere yet. Returns NESSIE_OK and
 * *copy; NESSIE_EXISTS when w's entry is not a committed value any more (or not yet), or
 * changed; NESSIE_NO_MEMORY; or the fabric's error. Never links anything.
 */
bool proto_retiring_data(const struct nessie_node *nd, uint32_t node);
int proto_retire_copy(struct op *op, uint64_t w, uint64_t *copy);

/* --- the calls, client-driven ------------------------------------------------------------- */

/*
 * What the rooms above ask of this one (the modes room's dispatch, and the SD server running a
 * peer's call): each public call of nessie.h carried out here, by this node alone, on a key
 * already planned (memory/keys.h: positions, filter bits). Their arguments were checked by the
 * caller as nessie.h's public calls check them (key_check, pointers); they return what those
 * calls return. None of them knows who else might have run the call: that is decided above.
 */
int proto_get(struct nessie_ctx *ctx, const struct key_plan *kp, void *buf, size_t cap,
              struct nessie_item *out);
/* A multi-get of n keys (nessie_get_multi_into), checking each key itself: a bad one is
 * answered NESSIE_BAD_KEY through done and the others go on. */
int proto_get_multi(struct nessie_ctx *ctx, size_t n, const void *const *keys, const size_t *lens,
                    void *const *bufs, const size_t *caps, nessie_multi_fn done, void *user);
/* mode must be one of enum nessie_store_mode and the item no larger than max_item_size: the
 * caller refuses the others (NESSIE_INVALID, NESSIE_TOO_BIG), as nessie_store does. */
int proto_store(struct nessie_ctx *ctx, const struct key_plan *kp, enum nessie_store_mode mode,
                const void *value, size_t value_len, uint32_t flags, int64_t exptime,
                uint64_t cas, uint32_t meta, uint64_t *version_out);
/* nessie_invalidate and nessie_token_take's protocol calls. */
int proto_invalidate(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t cas,
                     bool set_exptime, int64_t exptime);
int proto_token(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t version);
/* cas: the version the item must have (0: any), else NESSIE_EXISTS. */
int proto_delete(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t cas);
int proto_arith(struct nessie_ctx *ctx, const struct key_plan *kp, bool incr, uint64_t delta,
                uint64_t cas, uint64_t *result, uint64_t *version_out);
int proto_touch(struct nessie_ctx *ctx, const struct key_plan *kp, int64_t exptime);

/* The eviction observer (nessie_set_evict_hook), or NULL. */
extern nessie_evict_anon_fn nessie_evict_anon_hook;
extern void *nessie_evict_anon_user;
extern nessie_evict_hook_fn nessie_evict_hook;
extern void *nessie_evict_hook_user;

#endif
