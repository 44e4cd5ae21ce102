/* lincheck.c - see lincheck.h. */
#include "lincheck.h"

#include <glib.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/arith.h"

const char *lc_op_name(enum lc_op op)
{
    static const char *const names[] = {"get", "set", "add", "replace", "cas", "append",
                                        "prepend", "incr", "decr", "touch", "delete"};
    return (unsigned)op <= LC_DELETE ? names[op] : "?";
}

const char *lc_outcome_name(enum lc_outcome o)
{
    static const char *const names[] = {"ok", "not-found", "not-stored", "exists",
                                        "cas-not-found", "non-numeric", "failed", "unknown",
                                        "maybe"};
    return (unsigned)o <= LC_MAYBE ? names[o] : "?";
}

/* A value of the model, interned: its hash is computed once. */
struct val {
    uint64_t hash;
    uint32_t len;
    unsigned char bytes[];
};

struct state {
    bool present;
    bool vknown;        /* version known (false after a write whose response was lost) */
    const struct val *v;
    uint32_t flags;
    uint64_t version;
};

/* An entry of the call/return list (Lowe's "entries"). */
struct entry {
    struct entry *prev, *next;
    uint32_t op;        /* index into ops */
    bool is_call;
};

struct op {
    const struct lc_event *e;
    struct entry call, ret; /* ret unused for ops that have no return entry (LC_UNKNOWN) */
    bool has_ret;
    uint64_t zobrist;   /* random bits for the memo's hash of the linearized set */
};

struct frame {
    uint32_t op;
    uint32_t choice;    /* which of the op's effects was applied (an LC_MAYBE op has two) */
    struct state saved;
};

struct checker {
    struct op *ops;
    uint32_t nops;
    GPtrArray *vals;    /* every interned value, freed at the end */
    GHashTable *interned; /* struct val * -> itself: one copy of each distinct value */
    /* The memo: explored (linearized set, state) pairs, an open-addressing set of 16-byte keys
     * in one array. It holds one entry per explored step, so its size is what bounds the search
     * budget in memory: 16 bytes x 2 (load <= 1/2) per step, not a node and a malloc each. */
    struct memo_key *memo;
    size_t memo_cap, memo_n;
};

struct memo_key {
    uint64_t set_hash, state_hash;
};

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t bytes_hash(const void *p, size_t len)
{
    const unsigned char *b = p;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ len;
    for (size_t i = 0; i < len; i++)
        h = mix64(h ^ b[i]) + i;
    return h;
}

static guint val_hash(gconstpointer p) { return (guint)((const struct val *)p)->hash; }

static gboolean val_equal(gconstpointer a, gconstpointer b)
{
    const struct val *x = a, *y = b;
    return x->hash == y->hash && x->len == y->len && memcmp(x->bytes, y->bytes, x->len) == 0;
}

/* The one copy of a value: the search builds the same appended or incremented values over and
 * over, and a copy per step would cost more memory than the memo. */
static const struct val *intern(struct checker *c, const void *bytes, size_t len)
{
    struct val *v = g_malloc(sizeof(*v) + len);
    v->len = (uint32_t)len;
    if (len)
        memcpy(v->bytes, bytes, len);
    v->hash = bytes_hash(bytes, len);
    struct val *have = g_hash_table_lookup(c->interned, v);
    if (have) {
        g_free(v);
        return have;
    }
    g_hash_table_add(c->interned, v);
    g_ptr_array_add(c->vals, v);
    return v;
}

/* Add k to the memo. Returns false if it was there already. */
static bool memo_add(struct checker *c, struct memo_key k)
{
    if (k.set_hash == 0 && k.state_hash == 0)
        k.state_hash = 1; /* {0,0} marks an empty slot */
    if (2 * (c->memo_n + 1) > c->memo_cap) {
        size_t cap = c->memo_cap ? c->memo_cap * 2 : 1024;
        struct memo_key *m = g_new0(struct memo_key, cap);
        for (size_t i = 0; i < c->memo_cap; i++) {
            struct memo_key o = c->memo[i];
            if (o.set_hash == 0 && o.state_hash == 0)
                continue;
            size_t j = mix64(o.set_hash ^ mix64(o.state_hash)) & (cap - 1);
            while (m[j].set_hash != 0 || m[j].state_hash != 0)
                j = (j + 1) & (cap - 1);
            m[j] = o;
        }
        g_free(c->memo);
        c->memo = m;
        c->memo_cap = cap;
    }
    size_t j = mix64(k.set_hash ^ mix64(k.state_hash)) & (c->memo_cap - 1);
    while (c->memo[j].set_hash != 0 || c->memo[j].state_hash != 0) {
        if (c->memo[j].set_hash == k.set_hash && c->memo[j].state_hash == k.state_hash)
            return false;
        j = (j + 1) & (c->memo_cap - 1);
    }
    c->memo[j] = k;
    c->memo_n++;
    return true;
}

static bool val_eq(const struct val *v, const void *bytes, size_t len)
{
    return v->len == len && (len == 0 || memcmp(v->bytes, bytes, len) == 0);
}

static uint64_t state_hash(const struct state *s)
{
    if (!s->present)
        return 1;
    return mix64(s->v->hash ^ mix64(s->flags + 7) ^ mix64(s->vknown ? s->version + 3 : 5));
}

/* Written values become the item, with the written flags and the version the write reported
 * (unknown if its response was lost). */
static void put_value(struct checker *c, struct state *s, const struct lc_event *e,
                      const void *bytes, size_t len, uint32_t flags)
{
    s->present = true;
    s->v = intern(c, bytes, len);
    s->flags = flags;
    s->version = e->version_out;
    s->vknown = e->outcome != LC_UNKNOWN && e->outcome != LC_MAYBE;
}

/* How many effects e may have had: an LC_MAYBE op took effect (choice 0) or not (choice 1);
 * the search tries both wherever it linearizes it. */
static uint32_t choices(const struct lc_event *e) { return e->outcome == LC_MAYBE ? 2 : 1; }

/*
 * Apply e to s. Returns true (and the new state in s) if e's outcome and outputs are what the
 * model gives in state s. For an LC_UNKNOWN op, "what the model gives" is whatever happens; an
 * LC_MAYBE op's choice 0 is the same, its choice 1 is no effect at all.
 */
static bool apply(struct checker *c, const struct lc_event *e, uint32_t choice, struct state *s)
{
    if (e->outcome == LC_MAYBE && choice == 1)
        return true;
    bool unknown = e->outcome == LC_UNKNOWN || e->outcome == LC_MAYBE;
    switch (e->op) {
    case LC_GET:
        if (e->outcome == LC_NOT_FOUND)
            return !s->present;
        if (!s->present || !val_eq(s->v, e->out, e->outlen) || s->flags != e->flags_out)
            return false;
        if (s->vknown)
            return s->version == e->version_out;
        s->version = e->version_out; /* learn the version an unknown write produced */
        s->vknown = true;
        return true;
    case LC_SET:
        put_value(c, s, e, e->val, e->vlen, e->flags_in);
        return true;
    case LC_ADD:
        if (unknown) {
            if (!s->present)
                put_value(c, s, e, e->val, e->vlen, e->flags_in);
            return true;
        }
        if (e->outcome == LC_NOT_STORED)
            return s->present;
        if (s->present)
            return false;
        put_value(c, s, e, e->val, e->vlen, e->flags_in);
        return true;
    case LC_REPLACE:
        if (unknown) {
            if (s->present)
                put_value(c, s, e, e->val, e->vlen, e->flags_in);
            return true;
        }
        if (e->outcome == LC_NOT_STORED)
            return !s->present;
        if (!s->present)
            return false;
        put_value(c, s, e, e->val, e->vlen, e->flags_in);
        return true;
    case LC_CAS: {
        bool match = s->present && (!s->vknown || s->version == e->cas_in);
        if (unknown) {
            if (match)
                put_value(c, s, e, e->val, e->vlen, e->flags_in);
            return true;
        }
        if (e->outcome == LC_CAS_NOT_FOUND)
            return !s->present;
        if (e->outcome == LC_EXISTS)
            return s->present && (!s->vknown || s->version != e->cas_in);
        if (!match)
            return false;
        put_value(c, s, e, e->val, e->vlen, e->flags_in);
        return true;
    }
    case LC_APPEND:
    case LC_PREPEND: {
        if (!unknown && e->outcome == LC_NOT_STORED)
            return !s->present;
        if (!s->present)
            return unknown;
        size_t len = (size_t)s->v->len + e->vlen;
        unsigned char *buf = g_malloc(len ? len : 1);
        if (e->op == LC_APPEND) {
            memcpy(buf, s->v->bytes, s->v->len);
            memcpy(buf + s->v->len, e->val, e->vlen);
        } else {
            memcpy(buf, e->val, e->vlen);
            memcpy(buf + e->vlen, s->v->bytes, s->v->len);
        }
        put_value(c, s, e, buf, len, s->flags);
        g_free(buf);
        return true;
    }
    case LC_INCR:
    case LC_DECR: {
        if (!unknown && e->outcome == LC_NOT_FOUND)
            return !s->present;
        if (!s->present)
            return unknown;
        size_t cap = s->v->len > ARITH_MAX_DIGITS ? s->v->len : ARITH_MAX_DIGITS;
        char *buf = g_malloc(cap);
        size_t outlen;
        uint64_t result;
        bool numeric = arith_apply(s->v->bytes, s->v->len, e->op == LC_INCR, e->delta, buf, cap,
                                   &outlen, &result);
        bool ok;
        if (unknown) {
            if (numeric)
                put_value(c, s, e, buf, outlen, s->flags);
            ok = true;
        } else if (e->outcome == LC_NON_NUMERIC) {
            ok = !numeric;
        } else {
            ok = numeric && result == e->num_out;
            if (ok)
                put_value(c, s, e, buf, outlen, s->flags);
        }
        g_free(buf);
        return ok;
    }
    case LC_TOUCH:
        if (unknown)
            return true;
        return e->outcome == LC_NOT_FOUND ? !s->present : s->present;
    case LC_DELETE:
        if (unknown) {
            s->present = false;
            return true;
        }
        if (e->outcome == LC_NOT_FOUND)
            return !s->present;
        if (!s->present)
            return false;
        s->present = false;
        return true;
    }
    return false;
}

static void lift(struct entry *e)
{
    e->prev->next = e->next;
    if (e->next)
        e->next->prev = e->prev;
}

/* Undo lift(): valid because lifts are undone in reverse order (dancing links). */
static void unlift(struct entry *e)
{
    e->prev->next = e;
    if (e->next)
        e->next->prev = e;
}

/* Entries by time; at equal times calls first, so touching intervals count as overlapping. */
static int cmp_entry(const void *a, const void *b, void *arg)
{
    const struct entry *const *x = a, *const *y = b;
    const struct checker *c = arg;
    const struct lc_event *ex = c->ops[(*x)->op].e, *ey = c->ops[(*y)->op].e;
    uint64_t tx = (*x)->is_call ? ex->call_ns : ex->ret_ns;
    uint64_t ty = (*y)->is_call ? ey->call_ns : ey->ret_ns;
    if (tx != ty)
        return tx < ty ? -1 : 1;
    if ((*x)->is_call != (*y)->is_call)
        return (*x)->is_call ? -1 : 1;
    return (*x)->op < (*y)->op ? -1 : (*x)->op > (*y)->op;
}

static void describe(char *why, size_t whylen, const char *what, uint32_t depth,
                     const struct lc_event *e, const struct state *s)
{
    char state[160];
    if (!s->present)
        snprintf(state, sizeof(state), "absent");
    else
        snprintf(state, sizeof(state), "'%.*s' flags %u version %llx%s", (int)(s->v->len > 60 ? 60 : s->v->len),
                 (const char *)s->v->bytes, s->flags, (unsigned long long)s->version,
                 s->vknown ? "" : " (unknown)");
    if (!e) {
        snprintf(why, whylen, "%s after %u operations; model: %s", what, depth, state);
        return;
    }
    snprintf(why, whylen,
             "%s: after linearizing %u operations at most, no order fits; the earliest pending "
             "operation to return is %s (%s) called at %llu, returned at %llu, value in '%.*s', "
             "value out '%.*s' version out %llx num out %llu; model then: %s",
             what, depth, lc_op_name(e->op), lc_outcome_name(e->outcome),
             (unsigned long long)e->call_ns, (unsigned long long)e->ret_ns,
             (int)(e->vlen > 60 ? 60 : e->vlen), e->val ? (const char *)e->val : "",
             (int)(e->outlen > 60 ? 60 : e->outlen), e->out ? (const char *)e->out : "",
             (unsigned long long)e->version_out, (unsigned long long)e->num_out, state);
}

int lc_check_key(const struct lc_event *ev, size_t n, uint64_t budget, char *why, size_t whylen)
{
    struct checker c = {0};
    if (budget == 0)
        budget = 10000000;
    c.ops = g_new0(struct op, n ? n : 1);
    c.vals = g_ptr_array_new_with_free_func(g_free);
    c.interned = g_hash_table_new(val_hash, val_equal);

    /* Keep the operations that can matter: failed ones had no effect, and reads whose answer
     * was lost tell nothing. */
    uint64_t rng = 0x1234567;
    uint32_t returns = 0;
    for (size_t i = 0; i < n; i++) {
        const struct lc_event *e = &ev[i];
        if (e->outcome == LC_FAILED)
            continue;
        if ((e->outcome == LC_UNKNOWN || e->outcome == LC_MAYBE) &&
            (e->op == LC_GET || e->op == LC_TOUCH))
            continue;
        struct op *o = &c.ops[c.nops];
        o->e = e;
        o->has_ret = e->outcome != LC_UNKNOWN;
        rng = mix64(rng + 0x9e3779b97f4a7c15ULL);
        o->zobrist = rng;
        o->call = (struct entry){.op = c.nops, .is_call = true};
        o->ret = (struct entry){.op = c.nops, .is_call = false};
        returns += o->has_ret;
        c.nops++;
    }

    /* The entry list, in time order, behind a sentinel head. */
    struct entry **sorted = g_new(struct entry *, 2 * (size_t)c.nops + 1);
    size_t m = 0;
    for (uint32_t i = 0; i < c.nops; i++) {
        sorted[m++] = &c.ops[i].call;
        if (c.ops[i].has_ret)
            sorted[m++] = &c.ops[i].ret;
    }
    qsort_r(sorted, m, sizeof(*sorted), cmp_entry, &c);
    struct entry head = {0};
    struct entry *prev = &head;
    for (size_t i = 0; i < m; i++) {
        prev->next = sorted[i];
        sorted[i]->prev = prev;
        prev = sorted[i];
    }
    prev->next = NULL;
    g_free(sorted);

    /* An operation that never returned is a candidate from its call until the first return entry
     * after it, like any other; moving its call entry to just before that return entry changes
     * nothing about when it may be linearized, but makes the search try it after the operations
     * that did return there. Tried first (its call is early), it sends the search down long
     * branches that assume it took effect; most such operations never did. */
    for (uint32_t i = 0; i < c.nops; i++) {
        struct entry *e = &c.ops[i].call;
        if (c.ops[i].has_ret)
            continue;
        struct entry *r = e->next;
        while (r && r->is_call)
            r = r->next;
        if (r == e->next)
            continue; /* already just before a return entry */
        lift(e);
        if (r) {
            e->prev = r->prev;
            e->next = r;
            r->prev->next = e;
            r->prev = e;
        } else { /* no return entry after it: to the end of the list */
            struct entry *last = e->prev;
            while (last->next)
                last = last->next;
            last->next = e;
            e->prev = last;
            e->next = NULL;
        }
    }

    GArray *stack = g_array_new(FALSE, FALSE, sizeof(struct frame));
    struct state s = {0};
    uint64_t set_hash = 0, explored = 0;
    uint32_t best_depth = 0;
    const struct lc_event *best_blocker = NULL;
    struct state best_state = {0};
    int result;
    struct entry *cur = head.next;
    uint32_t first_choice = 0; /* of the op at cur: 1 when backtracking from its choice 0 */

    for (;;) {
        if (returns == 0) {
            result = 0; /* every completed operation is linearized; unknown ones may be omitted */
            break;
        }
        if (cur && cur->is_call) {
            struct op *o = &c.ops[cur->op];
            uint32_t choice = first_choice;
            first_choice = 0;
            bool pushed = false, over = false;
            for (; choice < choices(o->e) && !pushed; choice++) {
                struct state next = s;
                if (!apply(&c, o->e, choice, &next))
                    continue;
                struct memo_key key = {set_hash ^ o->zobrist, state_hash(&next)};
                if (!memo_add(&c, key))
                    continue;
                if (++explored > budget) {
                    over = true;
                    break;
                }
                struct frame f = {.op = cur->op, .choice = choice, .saved = s};
                g_array_append_val(stack, f);
                s = next;
                set_hash ^= o->zobrist;
                lift(&o->call);
                if (o->has_ret) {
                    lift(&o->ret);
                    returns--;
                }
                if (stack->len > best_depth) {
                    best_depth = stack->len;
                    best_blocker = NULL;
                }
                pushed = true;
            }
            if (over) {
                result = -1;
                break;
            }
            cur = pushed ? head.next : cur->next;
            continue;
        }
        /* cur is the first return entry (or the end): nothing before it fits. Backtrack. */
        if (stack->len == best_depth && cur && !best_blocker) {
            best_blocker = c.ops[cur->op].e;
            best_state = s;
        }
        if (stack->len == 0) {
            if (!best_blocker && cur) {
                best_blocker = c.ops[cur->op].e;
                best_state = s;
            }
            result = 1;
            break;
        }
        struct frame f = g_array_index(stack, struct frame, stack->len - 1);
        g_array_set_size(stack, stack->len - 1);
        struct op *o = &c.ops[f.op];
        if (o->has_ret) {
            unlift(&o->ret);
            returns++;
        }
        unlift(&o->call);
        set_hash ^= o->zobrist;
        s = f.saved;
        /* An op with another effect left to try is tried again at the same place with it;
         * otherwise the search goes on with the entries after it. */
        if (f.choice + 1 < choices(o->e)) {
            cur = &o->call;
            first_choice = f.choice + 1;
        } else {
            cur = o->call.next;
        }
    }

    if (result == 1)
        describe(why, whylen, "not linearizable", best_depth, best_blocker, &best_state);
    else if (result == -1)
        describe(why, whylen, "search budget exhausted", stack->len, NULL, &s);

    g_free(c.memo);
    g_hash_table_destroy(c.interned);
    g_array_free(stack, TRUE);
    g_ptr_array_free(c.vals, TRUE);
    g_free(c.ops);
    return result;
}
