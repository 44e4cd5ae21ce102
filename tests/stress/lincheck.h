/*
 * lincheck.h - is one key's history linearizable? (Wing & Gong's search with Lowe's
 * improvements: a linked list of call and return entries, "lifting" linearized operations out
 * of it, and a memo of (linearized set, model state) already explored.)
 *
 * The model is one memcached item: absent, or present with a value, flags and a version (the CAS
 * token). Each operation's outcome and outputs must match the model applied in some total order
 * that respects real time (an operation that returned before another was called comes first).
 */
#ifndef NESSIE_TESTS_LINCHECK_H
#define NESSIE_TESTS_LINCHECK_H

#include <stddef.h>
#include <stdint.h>

enum lc_op { LC_GET, LC_SET, LC_ADD, LC_REPLACE, LC_CAS, LC_APPEND, LC_PREPEND, LC_INCR, LC_DECR,
             LC_TOUCH, LC_DELETE };

enum lc_outcome {
    LC_OK,            /* get: hit; writes: stored; incr/decr: done; delete: deleted */
    LC_NOT_FOUND,     /* get: miss; incr/decr/touch/delete: key absent */
    LC_NOT_STORED,    /* add: key present; replace/append/prepend: key absent */
    LC_EXISTS,        /* cas: key present but version differs */
    LC_CAS_NOT_FOUND, /* cas: key absent */
    LC_NON_NUMERIC,   /* incr/decr: value not a number (no effect) */
    LC_FAILED,        /* definitely no effect (out of memory, index full, too big) */
    LC_UNKNOWN,       /* timed out or never returned: took effect at most once, at any time after
                         its call (even after it returned: the engine may complete it later), or
                         not at all */
    LC_MAYBE          /* took effect at most once, between its call and its return, or not at
                         all: what a run knows of an event nobody called, such as a node's loss
                         (every key's value may vanish between the kill and the view that fences
                         the node, and not later) */
};

struct lc_event {
    uint64_t call_ns, ret_ns;        /* one clock for every process of the run */
    enum lc_op op;
    enum lc_outcome outcome;
    const void *val;                 /* value written (set/add/replace/cas/append/prepend) */
    uint32_t vlen;
    uint32_t flags_in;               /* set/add/replace/cas */
    uint64_t delta;                  /* incr/decr */
    uint64_t cas_in;                 /* cas: the version expected */
    const void *out;                 /* get hit: value, flags and version returned */
    uint32_t outlen;
    uint32_t flags_out;
    uint64_t num_out;                /* incr/decr LC_OK: the new number */
    uint64_t version_out;            /* get hit: version read; a successful write: the version it
                                        created (touch keeps the old one); 0 when unknown */
    const char *who;                 /* the caller's label for a dump (who ran it, with which
                                        status); never read by the check; may be NULL */
};

/*
 * Check one key's history (events in any order; the initial state is absent). budget bounds the
 * search in model states explored (0: 10 million). Returns 0 if linearizable, 1 if not, -1 if the
 * budget ran out; for 1 and -1 writes an explanation into why. Never modifies ev.
 */
int lc_check_key(const struct lc_event *ev, size_t n, uint64_t budget, char *why, size_t whylen);

const char *lc_op_name(enum lc_op op);
const char *lc_outcome_name(enum lc_outcome o);

#endif
