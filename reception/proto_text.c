/*
 * proto_text.c - memcached's text protocol on the engine (proto_text.h).
 *
 * The grammar and the answers are memcached 1.6.18's (its proto_text.c, read, not copied), down
 * to its quirks, because its clients are written against them: a line ends at its first NUL
 * (memcached tokenizes with strlen, so "incr \0 1" is "incr" alone: ERROR); runs of spaces are
 * one separator; a "\r" before the "\n" is dropped unless it is the whole line; "noreply" is the
 * last token and silences every answer of its request, errors included; a storage command's
 * data that does not end in "\r\n" is "CLIENT_ERROR bad data chunk" and what follows it is read
 * as the next command; a value over the item limit is answered at once and its data swallowed,
 * and a SET that fails so takes the key's old value out (memcached's "avoid stale data").
 * tests/integration/tcp-transcript.cases holds the answers, compared byte for byte with a real
 * memcached's.
 *
 * Each request runs through the same engine calls as a shim's (reception/channel.c); a multi-key
 * get goes to nessie_get_multi, so its keys' reads go out together.
 */
#include "proto_text.h"
#include "proto_int.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nessie/wire.h>

#include "log.h"

/* Split line (NUL-terminated, modified) at spaces as memcached does: runs of spaces are one
 * separator, at most max - 1 tokens; t[n - 1] is the terminal token, whose v is the rest of the
 * line not split (NULL when the whole line was). Returns n, the terminal token counted. */
size_t proto_tokenize(char *line, struct proto_token *t, size_t max)
{
    size_t n = 0;
    char *s = line, *e = line;
    for (; *e; e++) {
        if (*e != ' ')
            continue;
        if (s != e) {
            t[n].v = s;
            t[n].len = (size_t)(e - s);
            n++;
            *e = '\0';
            if (n == max - 1) {
                s = ++e;
                goto out;
            }
        }
        s = e + 1;
    }
    if (s != e) {
        t[n].v = s;
        t[n].len = (size_t)(e - s);
        n++;
    }
out:
    t[n].v = *e ? e : NULL;
    t[n].len = 0;
    return n + 1;
}

/* memcached's number parsers (its util.c): a number ends at a space or the token's end; an
 * unsigned one that wraps to negative is refused if written with a '-'. */
bool proto_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE || end == s || (*end != '\0' && !isspace((unsigned char)*end)))
        return false;
    if ((long long)v < 0 && strchr(s, '-'))
        return false;
    *out = v;
    return true;
}

bool proto_parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno == ERANGE || end == s || (*end != '\0' && !isspace((unsigned char)*end)))
        return false;
    if ((long)v < 0 && strchr(s, '-'))
        return false;
    *out = (uint32_t)v; /* memcached keeps the low 32 bits too */
    return true;
}

bool proto_parse_i32(const char *s, int32_t *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno == ERANGE || end == s || (*end != '\0' && !isspace((unsigned char)*end)))
        return false;
    *out = (int32_t)v; /* memcached keeps the low 32 bits too */
    return true;
}

/* Is the token exactly s? */
static bool is(const struct proto_token *t, const char *s)
{
    return strcmp(t->v, s) == 0;
}

void proto_reply(struct proto_req *r, const char *line)
{
    if (r->noreply)
        return;
    g_string_append(r->c->out, line);
    g_string_append_len(r->c->out, "\r\n", 2);
}

/* memcached's set_noreply_maybe: the token before the terminal one. */
static bool noreply_maybe(struct proto_req *r, const struct proto_token *t, size_t n)
{
    if (t[n - 2].v && strcmp(t[n - 2].v, "noreply") == 0)
        r->noreply = true;
    return r->noreply;
}

/* An engine outcome that is no answer of memcached's own: said plainly. */
const char *proto_server_error(int rc)
{
    switch (rc) {
    case NESSIE_TOO_BIG:
        return "SERVER_ERROR object too large for cache";
    case NESSIE_NO_MEMORY:
    case NESSIE_INDEX_FULL:
        return "SERVER_ERROR out of memory storing object";
    case NESSIE_TIMEOUT:
        return "SERVER_ERROR timed out: the outcome is unknown";
    case NESSIE_FABRIC_ERROR:
        return "SERVER_ERROR a node it needed could not be reached";
    case NESSIE_BAD_KEY:
        return "CLIENT_ERROR bad command line format";
    default:
        return "SERVER_ERROR internal error";
    }
}

/* get, gets, gat, gats (and memcached's ancient bget): every key of the line, read together, a
 * batch at a time. */
/* Keys read together: their reads go out as one post, and a reply that cannot be held stops the
 * reading within a batch. */
#define GET_BATCH 64

/* The room kept in front of a value read straight into c->out for its header, "VALUE key
 * flags bytes cas\r\n" at its longest (6 + 250 + 1 + 10 + 1 + 10 + 1 + 20 + 2 bytes). */
#define GET_HDR_ROOM 304
/* ... and after it, for "\r\nEND\r\n" and the string's NUL. */
#define GET_TAIL_ROOM 8
_Static_assert(6 + NESSIE_KEY_MAX + 45 <= GET_HDR_ROOM, "a get's longest header fits its room");

/* Gets whose value was read straight into the reply (proto_text_direct_gets): file-static as
 * the daemon has one such count; a relaxed atomic, being a counter. */
static uint64_t direct_gets;

uint64_t proto_text_direct_gets(void)
{
    return __atomic_load_n(&direct_gets, __ATOMIC_RELAXED);
}

/* Write v in decimal at p (at most 20 digits, no NUL); returns the end. */
static char *put_u64(char *p, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

/* A get's keys, on the stack for the usual few, on the heap past GET_KEYS_STACK (a multi-get may
 * have any number): an allocation per get was a measurable part of a small get's cost. */
#define GET_KEYS_STACK 24
struct get_keys {
    const char **v;
    size_t *len;
    size_t n, cap;
    const char *v_stack[GET_KEYS_STACK];
    size_t len_stack[GET_KEYS_STACK];
};

static void keys_init(struct get_keys *k)
{
    k->v = k->v_stack;
    k->len = k->len_stack;
    k->n = 0;
    k->cap = GET_KEYS_STACK;
}

static void keys_free(struct get_keys *k)
{
    if (k->v != k->v_stack) {
        g_free(k->v);
        g_free(k->len);
    }
}

static void keys_add(struct get_keys *k, const char *v, size_t len)
{
    if (k->n == k->cap) {
        size_t cap = k->cap * 2;
        const char **nv = g_new(const char *, cap);
        size_t *nl = g_new(size_t, cap);
        memcpy(nv, k->v, k->n * sizeof(*nv));
        memcpy(nl, k->len, k->n * sizeof(*nl));
        keys_free(k);
        k->v = nv;
        k->len = nl;
        k->cap = cap;
    }
    k->v[k->n] = v;
    k->len[k->n++] = len;
}

struct get_ctx {
    struct proto_conn *c;
    size_t mark;    /* where the reply began in c->out */
    void *direct;   /* where the value may be read straight into c->out (NULL: not offered) */
    bool pending;   /* c->out still holds the room offered at direct, not yet given back */
    bool overflow;  /* it passed c->reply_max or the daemon's c->held_max */
    int error;      /* the first outcome that is neither a value nor a miss (NESSIE_OK: none) */
    bool cas;
    const char *const *keys;
    const size_t *lens;
    bool *hit; /* gat, gats: the keys to touch */
};

static void get_one(void *user, size_t i, int status, const struct nessie_item *it)
{
    struct get_ctx *g = user;
    struct proto_conn *c = g->c;
    GString *o = c->out;
    /* The room offered for a direct read is given back: the string ends after the value where
     * it was read into it, at the reply's start otherwise (cutting a string keeps its bytes). */
    bool in_out = g->pending && status == NESSIE_OK && it->value == g->direct;
    if (g->pending) {
        g_string_truncate(o, in_out ? g->mark + GET_HDR_ROOM + it->value_len : g->mark);
        g->pending = false;
    }
    if (status != NESSIE_OK) {
        /* A miss is left out, as memcached does; a key the engine could not read (a node it
         * needed unreachable, the call's budget spent) fails the whole get: a miss would be a
         * lie about a value that may be there. */
        if (status != NESSIE_NOT_FOUND && g->error == NESSIE_OK)
            g->error = status;
        return;
    }
    if (g->hit)
        g->hit[i] = true;
    size_t grown = (in_out ? g->mark : o->len) - g->mark + it->value_len;
    if (g->overflow || grown > c->reply_max ||
        (c->held && __atomic_load_n(c->held, __ATOMIC_RELAXED) + grown > c->held_max)) {
        g->overflow = true;
        return; /* the get's reply is cut back to mark */
    }
    /* " flags bytes[ cas]\r\n", by hand: snprintf and its helpers were about 2 % of the daemon's
     * samples on gets of 1 KiB (perf, bench/tcp.sh). */
    char nums[64];
    char *e = nums;
    *e++ = ' ';
    e = put_u64(e, it->flags);
    *e++ = ' ';
    e = put_u64(e, it->value_len);
    if (g->cas) {
        *e++ = ' ';
        e = put_u64(e, it->version);
    }
    *e++ = '\r';
    *e++ = '\n';
    int nl = (int)(e - nums);
    if (in_out) {
        /* Read straight into c->out: its header goes right in front of it, and the room left
         * before the header is a gap the writer skips. No copy of the value here. */
        size_t h = 6 + g->lens[i] + (size_t)nl;
        size_t at = g->mark + GET_HDR_ROOM - h;
        memcpy(o->str + at, "VALUE ", 6);
        memcpy(o->str + at + 6, g->keys[i], g->lens[i]);
        memcpy(o->str + at + 6 + g->lens[i], nums, (size_t)nl);
        if (at > g->mark)
            g_array_append_val(c->gaps, ((struct proto_gap){.at = g->mark, .len = at - g->mark}));
        __atomic_fetch_add(&direct_gets, 1, __ATOMIC_RELAXED);
        g_string_append_len(o, "\r\n", 2);
        return;
    }
    g_string_append_len(o, "VALUE ", 6);
    g_string_append_len(o, g->keys[i], (gssize)g->lens[i]);
    g_string_append_len(o, nums, nl);
    g_string_append_len(o, it->value, it->value_len);
    g_string_append_len(o, "\r\n", 2);
}

static void run_get(struct proto_req *r, struct proto_token *t, size_t n, bool cas, bool touch)
{
    struct proto_conn *c = r->c;
    size_t first = 1;
    int32_t exptime = 0;
    if (touch) {
        if (!proto_parse_i32(t[1].v, &exptime)) {
            proto_reply(r, "CLIENT_ERROR invalid exptime argument");
            return;
        }
        first = 2;
    }
    /* The keys: those tokenized, then the rest of the line's (a multi-get may have any number). */
    struct get_keys keys;
    keys_init(&keys);
    bool too_long = false;
    for (size_t i = first; i < n - 1; i++)
        keys_add(&keys, t[i].v, t[i].len);
    for (char *rest = t[n - 1].v; rest;) {
        struct proto_token more[PROTO_TOKENS_MAX];
        size_t m = proto_tokenize(rest, more, PROTO_TOKENS_MAX);
        for (size_t i = 0; i < m - 1; i++)
            keys_add(&keys, more[i].v, more[i].len);
        rest = more[m - 1].v;
    }
    size_t nk = keys.n;
    /* memcached stops at a key too long and answers only the error. */
    for (size_t i = 0; i < nk; i++)
        if (keys.len[i] > NESSIE_KEY_MAX) {
            too_long = true;
            nk = i;
            break;
        }
    struct get_ctx g = {.c = c, .cas = cas, .keys = keys.v, .lens = keys.len,
                        .hit = touch && nk > 0 ? g_new0(bool, nk) : NULL};
    gsize mark = c->out->len;
    g.mark = mark;
    for (size_t i = 0; i < nk && !g.overflow && g.error == NESSIE_OK; i += GET_BATCH) {
        size_t b = nk - i < GET_BATCH ? nk - i : GET_BATCH;
        struct get_ctx part = g;
        part.keys += i;
        part.lens += i;
        part.hit = g.hit ? g.hit + i : NULL;
        /* One key (the usual get), and a connection whose writer skips gaps: the value may be
         * read straight into c->out, in the room its string already has (a value that does not
         * fit is copied, and the string has grown for the next one). */
        size_t room = c->out->allocated_len - c->out->len;
        void *direct = NULL;
        size_t cap = 0;
        if (nk == 1 && c->gaps && c->gaps->len < PROTO_GAPS_MAX &&
            room > GET_HDR_ROOM + GET_TAIL_ROOM + 1024) {
            cap = room - GET_HDR_ROOM - GET_TAIL_ROOM;
            g_string_set_size(c->out, mark + GET_HDR_ROOM + cap);
            direct = c->out->str + mark + GET_HDR_ROOM;
            part.direct = direct;
            part.pending = true;
        }
        int rc = nessie_get_multi_into(c->ctx, b, (const void *const *)(keys.v + i),
                                       part.lens, direct ? &direct : NULL,
                                       direct ? &cap : NULL, get_one, &part);
        if (part.pending) /* refused outright: nothing was called back */
            g_string_truncate(c->out, mark);
        g.overflow = part.overflow;
        /* refused outright (nothing called back): not a miss of every key */
        g.error = rc != NESSIE_OK && part.error == NESSIE_OK ? rc : part.error;
    }
    /* gat: the value as it was read, then its new expiry (memcached's order: a gat with a
     * time already past returns the value once). */
    for (size_t i = 0; g.hit && i < nk; i++)
        if (g.hit[i])
            nessie_touch(c->ctx, keys.v[i], g.lens[i], exptime);
    g_free(g.hit);
    if (too_long) {
        proto_out_truncate(c, mark);
        proto_reply(r, "CLIENT_ERROR bad command line format");
    } else if (g.overflow) {
        proto_out_truncate(c, mark);
        proto_reply(r, "SERVER_ERROR out of memory writing get response");
    } else if (g.error != NESSIE_OK) {
        proto_out_truncate(c, mark);
        proto_reply(r, proto_server_error(g.error));
    } else {
        g_string_append_len(c->out, "END\r\n", 5);
    }
    keys_free(&keys);
}

/*
 * set, add, replace, append, prepend, cas. Needs the line (line_len bytes, its "\n" included)
 * and the data after it in in[0..avail). Returns the bytes consumed (line and data, or the line
 * alone on an error memcached answers before the data), or 0 with c->need set when the data is
 * not all there yet.
 */
static size_t run_store(struct proto_req *r, struct proto_token *t, size_t n, enum nessie_store_mode mode,
                        const unsigned char *in, size_t line_len, size_t avail)
{
    struct proto_conn *c = r->c;
    noreply_maybe(r, t, n);
    if (t[1].len > NESSIE_KEY_MAX) {
        proto_reply(r, "CLIENT_ERROR bad command line format");
        return line_len;
    }
    uint32_t flags;
    int32_t exptime, vlen;
    uint64_t cas = 0;
    if (!proto_parse_u32(t[2].v, &flags) || !proto_parse_i32(t[3].v, &exptime) || !proto_parse_i32(t[4].v, &vlen) ||
        (mode == NESSIE_CAS && !proto_parse_u64(t[5].v, &cas)) || vlen < 0 || vlen > INT_MAX - 2) {
        proto_reply(r, "CLIENT_ERROR bad command line format");
        return line_len;
    }
    uint64_t data = (uint64_t)vlen + 2;
    /* An item no node could hold: answered now, its data swallowed as it comes. The engine
     * counts the item as memcached does (key + value + header), which the value alone
     * bounds from below. */
    if ((uint64_t)vlen > c->max_item_size) {
        proto_reply(r, "SERVER_ERROR object too large for cache");
        if (mode == NESSIE_SET)
            nessie_delete(c->ctx, t[1].v, t[1].len);
        c->swallow = data;
        return line_len;
    }
    if (avail - line_len < data) {
        c->need = line_len + (size_t)data;
        return 0;
    }
    const unsigned char *value = in + line_len;
    if (value[vlen] != '\r' || value[vlen + 1] != '\n') {
        proto_reply(r, "CLIENT_ERROR bad data chunk");
        return line_len + (size_t)data;
    }
    int rc = nessie_store(c->ctx, mode, t[1].v, t[1].len, value, (size_t)vlen, flags, exptime,
                          cas, NULL);
    switch (rc) {
    case NESSIE_OK:
        proto_reply(r, "STORED");
        break;
    case NESSIE_NOT_STORED:
        proto_reply(r, "NOT_STORED");
        break;
    case NESSIE_EXISTS:
        proto_reply(r, "EXISTS");
        break;
    case NESSIE_NOT_FOUND:
        proto_reply(r, "NOT_FOUND");
        break;
    default:
        /* memcached's rule: a SET that fails for want of room takes the old value out. */
        if (mode == NESSIE_SET && (rc == NESSIE_TOO_BIG || rc == NESSIE_NO_MEMORY))
            nessie_delete(c->ctx, t[1].v, t[1].len);
        proto_reply(r, proto_server_error(rc));
        break;
    }
    return line_len + (size_t)data;
}

static void run_arith(struct proto_req *r, struct proto_token *t, size_t n, bool incr)
{
    noreply_maybe(r, t, n);
    if (t[1].len > NESSIE_KEY_MAX) {
        proto_reply(r, "CLIENT_ERROR bad command line format");
        return;
    }
    uint64_t delta, result;
    if (!proto_parse_u64(t[2].v, &delta)) {
        proto_reply(r, "CLIENT_ERROR invalid numeric delta argument");
        return;
    }
    int rc = nessie_arith(r->c->ctx, t[1].v, t[1].len, incr, delta, &result, NULL);
    char num[24];
    switch (rc) {
    case NESSIE_OK:
        snprintf(num, sizeof(num), "%" PRIu64, result);
        proto_reply(r, num);
        break;
    case NESSIE_NOT_FOUND:
        proto_reply(r, "NOT_FOUND");
        break;
    case NESSIE_NON_NUMERIC:
        proto_reply(r, "CLIENT_ERROR cannot increment or decrement non-numeric value");
        break;
    case NESSIE_NO_MEMORY:
    case NESSIE_INDEX_FULL:
        proto_reply(r, "SERVER_ERROR out of memory");
        break;
    default:
        proto_reply(r, proto_server_error(rc));
        break;
    }
}

static void run_delete(struct proto_req *r, struct proto_token *t, size_t n)
{
    if (n > 3) {
        bool zero = strcmp(t[2].v, "0") == 0;
        bool nr = noreply_maybe(r, t, n);
        if (!((n == 4 && (zero || nr)) || (n == 5 && zero && nr))) {
            proto_reply(r, "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]");
            return;
        }
    }
    if (t[1].len > NESSIE_KEY_MAX) {
        proto_reply(r, "CLIENT_ERROR bad command line format");
        return;
    }
    int rc = nessie_delete(r->c->ctx, t[1].v, t[1].len);
    proto_reply(r, rc == NESSIE_OK ? "DELETED" : rc == NESSIE_NOT_FOUND ? "NOT_FOUND" : proto_server_error(rc));
}

static void run_touch(struct proto_req *r, struct proto_token *t, size_t n)
{
    noreply_maybe(r, t, n);
    if (t[1].len > NESSIE_KEY_MAX) {
        proto_reply(r, "CLIENT_ERROR bad command line format");
        return;
    }
    int32_t exptime;
    if (!proto_parse_i32(t[2].v, &exptime)) {
        proto_reply(r, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    int rc = nessie_touch(r->c->ctx, t[1].v, t[1].len, exptime);
    proto_reply(r, rc == NESSIE_OK ? "TOUCHED" : rc == NESSIE_NOT_FOUND ? "NOT_FOUND" : proto_server_error(rc));
}

static void run_flush_all(struct proto_req *r, struct proto_token *t, size_t n)
{
    noreply_maybe(r, t, n);
    int32_t delay = 0;
    if (n != (r->noreply ? 3u : 2u) && !proto_parse_i32(t[1].v, &delay)) {
        proto_reply(r, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    int rc = nessie_flush_delayed(r->c->ctx, delay);
    proto_reply(r, rc == NESSIE_OK ? "OK" : proto_server_error(rc));
}

/* cache_memlimit MB: memcached's runtime memory limit (its checks, its answers). */
static void run_memlimit(struct proto_req *r, struct proto_token *t, size_t n)
{
    noreply_maybe(r, t, n);
    uint32_t mb;
    if (!proto_parse_u32(t[1].v, &mb))
        proto_reply(r, "ERROR");
    else if (mb < 8)
        proto_reply(r, "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m");
    else if (mb > 1000000000)
        proto_reply(r, "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes");
    else if (r->c->stats && recep_stats_mem_limit(r->c->stats, (uint64_t)mb << 20))
        proto_reply(r, "OK");
    else
        proto_reply(r, "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust");
}

static void run_verbosity(struct proto_req *r, struct proto_token *t, size_t n)
{
    noreply_maybe(r, t, n);
    uint32_t level;
    if (!proto_parse_u32(t[1].v, &level)) {
        proto_reply(r, "CLIENT_ERROR bad command line format");
        return;
    }
    proto_reply(r, "OK"); /* the daemon's log level is its own ([reception] and --verbose) */
}

/* memcached's slab classes at most (MAX_NUMBER_OF_SLAB_CLASSES): a cachedump past it is refused. */
#define STATS_CLASSES_MAX 64

static void run_stats(struct proto_req *r, struct proto_token *t, size_t n)
{
    struct recep_stats *st = r->c->stats;
    if (!st) {
        proto_reply(r, "ERROR");
        return;
    }
    if (n == 2) {
        recep_stats_format(st, r->c->out);
        return;
    }
    if (is(&t[1], "reset")) {
        recep_stats_reset(st);
        proto_reply(r, "RESET");
        return;
    }
    if (is(&t[1], "settings")) {
        recep_stats_settings(st, r->c->out);
        return;
    }
    if (is(&t[1], "items")) {
        recep_stats_items(st, r->c->out);
        return;
    }
    if (is(&t[1], "slabs")) {
        recep_stats_slabs(st, r->c->out);
        return;
    }
    if (is(&t[1], "sizes")) {
        /* memcached's answer while its size histogram is off (its default); none is kept here */
        g_string_append(r->c->out, "STAT sizes_status disabled\r\nEND\r\n");
        return;
    }
    if (is(&t[1], "cachedump")) {
        uint32_t id, limit;
        if (n < 5)
            proto_reply(r, "CLIENT_ERROR bad command line");
        else if (!proto_parse_u32(t[2].v, &id) || !proto_parse_u32(t[3].v, &limit))
            proto_reply(r, "CLIENT_ERROR bad command line format");
        else if (id >= STATS_CLASSES_MAX)
            proto_reply(r, "CLIENT_ERROR Illegal slab id");
        else
            recep_stats_cachedump(st, r->c->ctx, id, limit, r->c->out);
        return;
    }
    if (is(&t[1], "conns") && r->c->conns) {
        r->c->conns(r->c->conns_user, r->c, r->c->out);
        return;
    }
    if (n >= 3 && is(&t[1], "detail")) {
        /* memcached's per-prefix counts: its usage line for a bad request; this daemon keeps
         * none, so there is nothing to dump and nothing to turn on. */
        if (n >= 4 && is(&t[2], "dump"))
            proto_reply(r, "END");
        else if (n >= 4 && (is(&t[2], "on") || is(&t[2], "off")))
            proto_reply(r, "CLIENT_ERROR stats detail is not kept by this server");
        else
            proto_reply(r, "CLIENT_ERROR usage: stats detail on|off|dump");
        return;
    }
    /* The others are no sub-command of memcached's either: its answer to one it does not
     * know. */
    proto_reply(r, "ERROR");
}

/*
 * One request whose line is line[0..len) (the "\n" and a "\r" before it already cut off,
 * NUL-terminated, modified), line_len the bytes it took in the input, in the input from the
 * line's start with avail bytes. Returns the bytes consumed, or 0 (c->need set) to wait.
 */
static size_t run_line(struct proto_conn *c, char *line, const unsigned char *in, size_t line_len,
                       size_t avail)
{
    struct proto_req r = {.c = c};
    struct proto_token t[PROTO_TOKENS_MAX];
    size_t n = proto_tokenize(line, t, PROTO_TOKENS_MAX);
    /* Every command has a name of two bytes or more (memcached's rule). */
    if (n < 2 || t[0].len < 2) {
        proto_reply(&r, "ERROR");
        return line_len;
    }
#define WANT(cond)                                                                                 \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            proto_reply(&r, "ERROR");                                                                    \
            return line_len;                                                                       \
        }                                                                                          \
    } while (0)
    if (t[0].len == 2 && t[0].v[0] == 'm') {
        return proto_meta_run(&r, t, n, in, line_len, avail); /* proto_meta.c */
    } else if (is(&t[0], "get") || is(&t[0], "gets") || is(&t[0], "gat") || is(&t[0], "gats") ||
        is(&t[0], "bget")) {
        WANT(n >= 3);
        run_get(&r, t, n, is(&t[0], "gets") || is(&t[0], "gats"),
                is(&t[0], "gat") || is(&t[0], "gats"));
    } else if (is(&t[0], "set") || is(&t[0], "add") || is(&t[0], "replace") ||
               is(&t[0], "append") || is(&t[0], "prepend")) {
        WANT(n == 6 || n == 7);
        enum nessie_store_mode mode = is(&t[0], "set")       ? NESSIE_SET
                                      : is(&t[0], "add")     ? NESSIE_ADD
                                      : is(&t[0], "replace") ? NESSIE_REPLACE
                                      : is(&t[0], "append")  ? NESSIE_APPEND
                                                             : NESSIE_PREPEND;
        return run_store(&r, t, n, mode, in, line_len, avail);
    } else if (is(&t[0], "cas")) {
        WANT(n == 7 || n == 8);
        return run_store(&r, t, n, NESSIE_CAS, in, line_len, avail);
    } else if (is(&t[0], "incr") || is(&t[0], "decr")) {
        WANT(n == 4 || n == 5);
        run_arith(&r, t, n, t[0].v[0] == 'i');
    } else if (is(&t[0], "delete")) {
        WANT(n >= 3 && n <= 5);
        run_delete(&r, t, n);
    } else if (is(&t[0], "touch")) {
        WANT(n == 4 || n == 5);
        run_touch(&r, t, n);
    } else if (is(&t[0], "flush_all")) {
        WANT(n >= 2 && n <= 4);
        run_flush_all(&r, t, n);
    } else if (is(&t[0], "version")) {
        /* The memcached whose answers these are, as the shim's stats say it (wire.h). */
        proto_reply(&r, "VERSION " WIRE_COMPAT_VERSION);
    } else if (is(&t[0], "quit")) {
        c->close = true;
    } else if (is(&t[0], "cache_memlimit")) {
        WANT(n == 3 || n == 4);
        run_memlimit(&r, t, n);
    } else if (is(&t[0], "verbosity")) {
        WANT(n == 3 || n == 4);
        run_verbosity(&r, t, n);
    } else if (is(&t[0], "stats")) {
        run_stats(&r, t, n);
    } else if (is(&t[0], "shutdown")) {
        proto_reply(&r, "ERROR: shutdown not enabled"); /* memcached's, without -A; so here, always */
    } else if (strncmp(t[n - 2].v, "HTTP/", 5) == 0) {
        c->close = true; /* an HTTP request: memcached hangs up on it */
    } else {
        proto_reply(&r, "ERROR");
    }
#undef WANT
    return line_len;
}

/* Does the incomplete line at in[0..len) begin a get (which memcached lets grow past its line
 * limit)? */
static bool starts_get(const unsigned char *in, size_t len)
{
    size_t i = 0;
    while (i < len && i <= 100 && in[i] == ' ')
        i++;
    if (i > 100)
        return false;
    return (len - i >= 4 && memcmp(in + i, "get ", 4) == 0) ||
           (len - i >= 5 && memcmp(in + i, "gets ", 5) == 0);
}

size_t proto_text_run(struct proto_conn *c, const unsigned char *in, size_t len)
{
    size_t off = 0;
    c->need = 0;
    char small[PROTO_LINE_MAX + 1];
    /* Swallowing writes nothing: it goes on past out_max (a refused value's answer may have
     * passed it, and the answer waits for the swallow to end). */
    while (off < len && !c->close && (c->swallow > 0 || c->out->len < c->out_max)) {
        if (c->swallow > 0) {
            off += proto_swallow(c, len - off);
            continue;
        }
        const unsigned char *p = in + off;
        size_t avail = len - off;
        const unsigned char *nl = memchr(p, '\n', avail);
        if (!nl) {
            /* No whole line yet: past memcached's limit it is no command (but a get's). */
            if (avail > PROTO_LINE_MAX &&
                (!starts_get(p, avail) || avail > PROTO_GET_LINE_MAX)) {
                c->close = true;
                off = len;
            }
            break;
        }
        size_t line_len = (size_t)(nl - p) + 1;
        size_t l = line_len - 1;
        if (l > 1 && p[l - 1] == '\r')
            l--;
        char *line = l < sizeof(small) ? small : g_malloc(l + 1);
        memcpy(line, p, l);
        line[l] = '\0'; /* and the line ends at its first NUL, as memcached's does */
        size_t used = run_line(c, line, p, line_len, avail);
        if (line != small)
            g_free(line);
        if (used == 0)
            break; /* a storage command waits for its data */
        off += used;
    }
    return off;
}
