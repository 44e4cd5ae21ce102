/*
 * proto_bin.c - memcached's binary protocol on the engine (proto_bin.h).
 *
 * The framing and the answers are memcached 1.6.18's (its proto_bin.c, read, not copied), down
 * to its quirks, because binary clients are written against them:
 *   - nothing of a request is judged before its header, extras and key are in; a header whose
 *     magic is not 0x80 closes the connection without a word, and the responses memcached held
 *     unwritten then are lost with it (proto_bin_done says when it writes them);
 *   - extras and key longer than the body: "Unknown command", and the connection is closed; a
 *     key over 250 bytes, or lengths an opcode does not take: "Invalid arguments", closed;
 *   - an unknown opcode (and SASL's, SASL being off) is "Unknown command", its body swallowed
 *     counted from after its key, as memcached counts it: bodylen bytes, so a request with
 *     extras or a key loses as many bytes of the next one;
 *   - STAT, TOUCH and the GATs take their header, extras and key only: a body past them is read
 *     as the next request;
 *   - a value over the item limit is "Too large." and its bytes swallowed, a SET so refused
 *     taking the key's old value out; a body too short for its value (negative as memcached's
 *     int) is "Too large." with nothing swallowed, and the bytes after the key are read as the
 *     next request;
 *   - the quiet opcodes say nothing on success (GETQ, GETKQ, GATQ, GATKQ: nothing on a miss),
 *     but errors are answered;
 *   - SET, ADD and REPLACE with a CAS in the header are all memcached's cas (a miss NOT_FOUND, a
 *     mismatch EXISTS); APPEND, PREPEND, DELETE, INCREMENT and DECREMENT check a CAS too.
 * tests/integration/tcp-transcript-binary.cases holds the answers, compared byte for byte with a
 * real memcached's.
 *
 * The engine checks a CAS itself for every write (nessie_store_meta's for APPEND and PREPEND,
 * nessie_delete_cas, nessie_arith_cas), so those stay atomic. What it has no call for is
 * INCREMENT's initial value: an ADD after a miss, retried as an incr if another client's ADD
 * came first (memcached's own answer to that race, NOT_STORED, only when the retries run
 * out).
 *
 * Consecutive GET, GETQ, GETK and GETKQ requests (a binary client's multi-get: GETKQs and a
 * NOOP) are read together with nessie_get_multi, so their keys' reads go out as one batch.
 */
#include "proto_bin.h"

#include <glib.h>
#include <stdio.h>
#include <string.h>

#include <nessie/wire.h>

/* The protocol's numbers (memcached's protocol_binary.h). */
#define PROTO_BIN_HDR 24   /* a header's bytes, request or response */
#define PROTO_BIN_RES 0x81 /* the response magic */

enum proto_bin_opcode {
    PROTO_BIN_GET = 0x00,
    PROTO_BIN_SET = 0x01,
    PROTO_BIN_ADD = 0x02,
    PROTO_BIN_REPLACE = 0x03,
    PROTO_BIN_DELETE = 0x04,
    PROTO_BIN_INCREMENT = 0x05,
    PROTO_BIN_DECREMENT = 0x06,
    PROTO_BIN_QUIT = 0x07,
    PROTO_BIN_FLUSH = 0x08,
    PROTO_BIN_GETQ = 0x09,
    PROTO_BIN_NOOP = 0x0a,
    PROTO_BIN_VERSION = 0x0b,
    PROTO_BIN_GETK = 0x0c,
    PROTO_BIN_GETKQ = 0x0d,
    PROTO_BIN_APPEND = 0x0e,
    PROTO_BIN_PREPEND = 0x0f,
    PROTO_BIN_STAT = 0x10,
    PROTO_BIN_SETQ = 0x11,
    PROTO_BIN_ADDQ = 0x12,
    PROTO_BIN_REPLACEQ = 0x13,
    PROTO_BIN_DELETEQ = 0x14,
    PROTO_BIN_INCREMENTQ = 0x15,
    PROTO_BIN_DECREMENTQ = 0x16,
    PROTO_BIN_QUITQ = 0x17,
    PROTO_BIN_FLUSHQ = 0x18,
    PROTO_BIN_APPENDQ = 0x19,
    PROTO_BIN_PREPENDQ = 0x1a,
    PROTO_BIN_TOUCH = 0x1c,
    PROTO_BIN_GAT = 0x1d,
    PROTO_BIN_GATQ = 0x1e,
    PROTO_BIN_SASL_LIST_MECHS = 0x20,
    PROTO_BIN_SASL_AUTH = 0x21,
    PROTO_BIN_SASL_STEP = 0x22,
    PROTO_BIN_GATK = 0x23,
    PROTO_BIN_GATKQ = 0x24,
};

enum proto_bin_status {
    PROTO_BIN_OK = 0x00,
    PROTO_BIN_ENOENT = 0x01,
    PROTO_BIN_EEXISTS = 0x02,
    PROTO_BIN_E2BIG = 0x03,
    PROTO_BIN_EINVAL = 0x04,
    PROTO_BIN_NOT_STORED = 0x05,
    PROTO_BIN_DELTA_BADVAL = 0x06,
    PROTO_BIN_UNKNOWN = 0x81,
    PROTO_BIN_ENOMEM = 0x82,
    PROTO_BIN_EINTERNAL = 0x84, /* the protocol's "internal error": outcomes memcached has not */
};

/* An item's bytes beyond its key and value as memcached counts them (its header, the key's NUL,
 * the value's "\r\n", the CAS; 4 more for non-zero flags): nessie.h's max_item_size counts the
 * same, so a value is refused here exactly where memcached -I refuses it, before it is read. */
#define PROTO_BIN_ITEM_OVERHEAD 59u
/* Requests of a run of gets read together, at most (one nessie_get_multi). */
#define PROTO_BIN_GET_BATCH 64
/* Times an incr whose initial value another client's ADD beat is tried again as an incr. */
#define PROTO_BIN_ARITH_TRIES 8
/* INCREMENT's expiration that means "do not create": a miss is NOT_FOUND. */
#define PROTO_BIN_NO_CREATE 0xffffffffu

/* One run of requests over a connection's input (proto_bin_run). */
struct proto_bin_state {
    struct proto_conn *c;
    size_t flushed; /* c->out's length where memcached last wrote what it held */
    unsigned reqs;  /* requests answered in this run */
    bool flush;     /* the request being answered makes memcached write what it holds */
};

/* A request's header, in host order. */
struct proto_bin_hdr {
    uint8_t opcode; /* as sent (a response carries the quiet opcode a request came with) */
    uint8_t extlen;
    uint16_t keylen;
    uint32_t bodylen;
    uint32_t opaque;
    uint64_t cas;
};

/* The request being answered. */
struct proto_bin_req {
    struct proto_bin_state *st;
    struct proto_bin_hdr h;
    uint8_t op;                /* h.opcode, a quiet one folded onto its loud one */
    bool quiet;                /* success (and for the gets, a miss) goes unsaid */
    const unsigned char *ext;  /* h.extlen bytes, in the input */
    const unsigned char *key;  /* h.keylen bytes, in the input */
};

static uint16_t proto_bin_get16(const unsigned char *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t proto_bin_get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t proto_bin_get64(const unsigned char *p)
{
    return (uint64_t)proto_bin_get32(p) << 32 | proto_bin_get32(p + 4);
}

static void proto_bin_put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static void proto_bin_put32(unsigned char *p, uint32_t v)
{
    proto_bin_put16(p, (uint16_t)(v >> 16));
    proto_bin_put16(p + 2, (uint16_t)v);
}

static void proto_bin_put64(unsigned char *p, uint64_t v)
{
    proto_bin_put32(p, (uint32_t)(v >> 32));
    proto_bin_put32(p + 4, (uint32_t)v);
}

/* Append len bytes at p to out (p may be NULL when len is 0). */
static void proto_bin_append(GString *out, const void *p, size_t len)
{
    if (len > 0)
        g_string_append_len(out, p, (gssize)len);
}

/* Read the header at p (PROTO_BIN_HDR bytes; its magic is the caller's to check). */
static void proto_bin_parse(const unsigned char *p, struct proto_bin_hdr *h)
{
    h->opcode = p[1];
    h->keylen = proto_bin_get16(p + 2);
    h->extlen = p[4];
    /* p[5], the data type, and p[6..8), the vbucket, are ignored, as memcached ignores them. */
    h->bodylen = proto_bin_get32(p + 8);
    h->opaque = proto_bin_get32(p + 12);
    h->cas = proto_bin_get64(p + 16);
}

/* Fill r for the request whose header is h and whose extras and key follow it at p. */
static void proto_bin_req_init(struct proto_bin_req *r, struct proto_bin_state *st,
                               const struct proto_bin_hdr *h, const unsigned char *p)
{
    static const uint8_t loud[][2] = {
        {PROTO_BIN_GETQ, PROTO_BIN_GET},         {PROTO_BIN_GETKQ, PROTO_BIN_GETK},
        {PROTO_BIN_SETQ, PROTO_BIN_SET},         {PROTO_BIN_ADDQ, PROTO_BIN_ADD},
        {PROTO_BIN_REPLACEQ, PROTO_BIN_REPLACE}, {PROTO_BIN_DELETEQ, PROTO_BIN_DELETE},
        {PROTO_BIN_INCREMENTQ, PROTO_BIN_INCREMENT},
        {PROTO_BIN_DECREMENTQ, PROTO_BIN_DECREMENT},
        {PROTO_BIN_QUITQ, PROTO_BIN_QUIT},       {PROTO_BIN_FLUSHQ, PROTO_BIN_FLUSH},
        {PROTO_BIN_APPENDQ, PROTO_BIN_APPEND},   {PROTO_BIN_PREPENDQ, PROTO_BIN_PREPEND},
        {PROTO_BIN_GATQ, PROTO_BIN_GAT},         {PROTO_BIN_GATKQ, PROTO_BIN_GATK},
    };
    *r = (struct proto_bin_req){.st = st, .h = *h, .op = h->opcode,
                                .ext = p + PROTO_BIN_HDR, .key = p + PROTO_BIN_HDR + h->extlen};
    for (size_t i = 0; i < sizeof(loud) / sizeof(loud[0]); i++)
        if (loud[i][0] == h->opcode) {
            r->op = loud[i][1];
            r->quiet = true;
        }
}

/* Append a response header for r to the connection's output. */
static void proto_bin_header(struct proto_bin_req *r, uint8_t opcode, uint16_t status,
                             uint8_t extlen, uint16_t keylen, uint32_t bodylen, uint64_t cas)
{
    unsigned char b[PROTO_BIN_HDR] = {PROTO_BIN_RES, opcode};
    proto_bin_put16(b + 2, keylen);
    b[4] = extlen;
    /* b[5], the data type: raw bytes (0). */
    proto_bin_put16(b + 6, status);
    proto_bin_put32(b + 8, bodylen);
    proto_bin_put32(b + 12, r->h.opaque);
    proto_bin_put64(b + 16, cas);
    g_string_append_len(r->st->c->out, (const char *)b, PROTO_BIN_HDR);
}

/* A success response: extras, key and body, any of them empty; cas is the item's version (0:
 * none). Nothing for a quiet request. */
static void proto_bin_ok(struct proto_bin_req *r, const void *ext, uint8_t extlen,
                         const void *key, uint16_t keylen, const void *body, uint32_t bodylen,
                         uint64_t cas)
{
    if (r->quiet)
        return;
    GString *o = r->st->c->out;
    proto_bin_header(r, r->h.opcode, PROTO_BIN_OK, extlen, keylen,
                     (uint32_t)extlen + keylen + bodylen, cas);
    proto_bin_append(o, ext, extlen);
    proto_bin_append(o, key, keylen);
    proto_bin_append(o, body, bodylen);
}

/* memcached's message for a status it answers without one of its own. */
static const char *proto_bin_message(uint16_t status)
{
    switch (status) {
    case PROTO_BIN_ENOENT:
        return "Not found";
    case PROTO_BIN_EEXISTS:
        return "Data exists for key.";
    case PROTO_BIN_E2BIG:
        return "Too large.";
    case PROTO_BIN_EINVAL:
        return "Invalid arguments";
    case PROTO_BIN_NOT_STORED:
        return "Not stored.";
    case PROTO_BIN_DELTA_BADVAL:
        return "Non-numeric server-side value for incr or decr";
    case PROTO_BIN_UNKNOWN:
        return "Unknown command";
    case PROTO_BIN_ENOMEM:
        return "Out of memory";
    default:
        return "internal error";
    }
}

/* An error response, its message the body (memcached's for the status when msg is NULL).
 * Answered for quiet requests too, as memcached does; memcached writes what it holds after it. */
static void proto_bin_error(struct proto_bin_req *r, uint16_t status, const char *msg)
{
    if (!msg)
        msg = proto_bin_message(status);
    size_t len = strlen(msg);
    proto_bin_header(r, r->h.opcode, status, 0, 0, (uint32_t)len, 0);
    proto_bin_append(r->st->c->out, msg, len);
    r->st->flush = true;
}

/* An error after which the next n bytes of input are discarded (memcached's swallow: it writes
 * nothing meanwhile, and tcp.c holds the responses until the last byte is read). */
/* A swallow count as memcached's write_bin_error takes it, an int: past 2^31 - 1 it is
 * negative, and nothing is swallowed (the bytes are read as requests). */
static uint64_t proto_bin_int(uint64_t n)
{
    return (int32_t)(uint32_t)n > 0 ? (uint64_t)(int32_t)(uint32_t)n : 0;
}

static void proto_bin_refuse(struct proto_bin_req *r, uint16_t status, uint64_t n)
{
    proto_bin_error(r, status, NULL);
    r->st->c->swallow = n;
    if (n > 0)
        r->st->flush = false;
}

/* A request whose lengths are not its opcode's: memcached's answer, then the connection ends. */
static void proto_bin_malformed(struct proto_bin_req *r)
{
    proto_bin_error(r, PROTO_BIN_EINVAL, NULL);
    r->st->c->close = true;
}

/* An engine outcome that is none of the request's own answers, as a binary status: memcached's
 * where it has one (nomem: its message for the call's want of memory), the protocol's internal
 * error with proto_text.c's words where it has none. */
static void proto_bin_engine_error(struct proto_bin_req *r, int rc, const char *nomem)
{
    switch (rc) {
    case NESSIE_TOO_BIG:
        proto_bin_error(r, PROTO_BIN_E2BIG, NULL);
        break;
    case NESSIE_NO_MEMORY:
    case NESSIE_INDEX_FULL:
        proto_bin_error(r, PROTO_BIN_ENOMEM, nomem);
        break;
    case NESSIE_TIMEOUT:
        proto_bin_error(r, PROTO_BIN_EINTERNAL, "timed out: the outcome is unknown");
        break;
    case NESSIE_FABRIC_ERROR:
        proto_bin_error(r, PROTO_BIN_EINTERNAL, "a node it needed could not be reached");
        break;
    case NESSIE_BAD_KEY:
        proto_bin_error(r, PROTO_BIN_EINVAL, NULL);
        break;
    default:
        proto_bin_error(r, PROTO_BIN_EINTERNAL, "internal error");
        break;
    }
}

/*
 * A request has been answered. memcached writes the responses it holds after an error or a
 * NOOP, when it needs more input (a run's start), and every 20 requests of a read (its
 * reqs_per_event: after the 21st, then every 20th); what it has written survives a close
 * without a word (a bad magic), what it held does not.
 */
static void proto_bin_done(struct proto_bin_state *st)
{
    st->reqs++;
    if (st->flush || (st->reqs > 20 && st->reqs % 20 == 1))
        st->flushed = st->c->out->len;
    st->flush = false;
}

/* Whether a response of more bytes, counted with those appended since mark, may be held: within
 * c->reply_max, and within c->held_max with what every connection holds. */
static bool proto_bin_fits(const struct proto_conn *c, size_t mark, size_t more)
{
    uint64_t grown = (uint64_t)(c->out->len - mark) + more;
    return grown <= c->reply_max &&
           (!c->held || __atomic_load_n(c->held, __ATOMIC_RELAXED) + grown <= c->held_max);
}

/* The bytes of a hit's response (proto_bin_hit). */
static size_t proto_bin_hit_len(const struct proto_bin_req *r, const struct nessie_item *it,
                                bool with_key, bool with_value)
{
    return PROTO_BIN_HDR + 4 + (with_key ? r->h.keylen : 0) + (with_value ? it->value_len : 0);
}

/* A get's or a touch's hit: the flags as extras, the key if asked (GETK, GATK), the value (not
 * for TOUCH), the item's version as the CAS. Said for quiet requests too. */
static void proto_bin_hit(struct proto_bin_req *r, const struct nessie_item *it, bool with_key,
                          bool with_value)
{
    GString *o = r->st->c->out;
    uint16_t klen = with_key ? r->h.keylen : 0;
    uint32_t vlen = with_value ? it->value_len : 0;
    unsigned char flags[4];
    proto_bin_put32(flags, it->flags);
    proto_bin_header(r, r->h.opcode, PROTO_BIN_OK, 4, klen, 4 + klen + vlen, it->version);
    proto_bin_append(o, flags, 4);
    proto_bin_append(o, r->key, klen);
    proto_bin_append(o, it->value, vlen);
}

/* A get's or a touch's miss: nothing if quiet; the key with NOT_FOUND if asked (GETK, GATK:
 * memcached's response, not its error); else the error. */
static void proto_bin_miss(struct proto_bin_req *r, bool with_key)
{
    if (r->quiet)
        return;
    if (with_key) {
        proto_bin_header(r, r->h.opcode, PROTO_BIN_ENOENT, 0, r->h.keylen, r->h.keylen, 0);
        proto_bin_append(r->st->c->out, r->key, r->h.keylen);
    } else {
        proto_bin_error(r, PROTO_BIN_ENOENT, NULL);
    }
}

/* ---------------------------------------------------------------------------------------------
 * GET, GETQ, GETK, GETKQ: a run of them read together. */

struct proto_bin_batch {
    struct proto_bin_state *st;
    size_t n;
    size_t answered;  /* requests answered, in order */
    size_t stop;      /* requests from here on are left for a later run: n unless stopped */
    size_t mark;      /* c->out's length before the batch's responses */
    struct proto_bin_req req[PROTO_BIN_GET_BATCH];
    const void *keys[PROTO_BIN_GET_BATCH];
    size_t lens[PROTO_BIN_GET_BATCH];
};

/* Answer request i of the batch with the engine's outcome for its key (nessie_multi_fn). */
static void proto_bin_get_one(void *user, size_t i, int status, const struct nessie_item *it)
{
    struct proto_bin_batch *b = user;
    if (i >= b->stop)
        return;
    if (i != b->answered) {
        /* Out of order (the engine reads again, last, a key that waited for a view): the
         * responses must keep the requests' order, so the unanswered ones run again. */
        b->stop = b->answered;
        return;
    }
    struct proto_bin_req *r = &b->req[i];
    bool with_key = r->op == PROTO_BIN_GETK;
    if (status == NESSIE_OK) {
        if (!proto_bin_fits(b->st->c, b->mark, proto_bin_hit_len(r, it, with_key, true))) {
            if (i > 0) {
                /* The batch's responses are as large as one connection may make at once: the
                 * rest run again once they are written. */
                b->stop = i;
                return;
            }
            proto_bin_error(r, PROTO_BIN_ENOMEM, "Out of memory writing get response");
        } else {
            proto_bin_hit(r, it, with_key, true);
        }
    } else if (status == NESSIE_NOT_FOUND) {
        proto_bin_miss(r, with_key);
    } else {
        /* Not a miss: the engine could not read the key (a node it needed unreachable, the
         * call's budget spent), and a miss would be a lie about a value that may be there. */
        proto_bin_engine_error(r, status, NULL);
    }
    b->answered = i + 1;
    proto_bin_done(b->st);
}

/* Whether header h begins a get the batch can take: memcached's lengths for it, a key of at most
 * 250 bytes, and all of it in the input. */
static bool proto_bin_batchable(const struct proto_bin_hdr *h, size_t avail)
{
    bool get = h->opcode == PROTO_BIN_GET || h->opcode == PROTO_BIN_GETQ ||
               h->opcode == PROTO_BIN_GETK || h->opcode == PROTO_BIN_GETKQ;
    return get && h->extlen == 0 && h->keylen > 0 && h->keylen <= NESSIE_KEY_MAX &&
           h->bodylen == h->keylen && avail >= PROTO_BIN_HDR + (size_t)h->keylen;
}

/* Run the gets at the start of in[0..avail), as many as come in a row (at most a batch).
 * Returns the bytes of the requests answered; 0 when the input does not start with one. */
static size_t proto_bin_gets(struct proto_bin_state *st, const unsigned char *in, size_t avail)
{
    struct proto_bin_batch b = {.st = st, .mark = st->c->out->len};
    size_t end[PROTO_BIN_GET_BATCH];
    size_t off = 0;
    while (b.n < PROTO_BIN_GET_BATCH && avail - off >= PROTO_BIN_HDR &&
           in[off] == PROTO_BIN_MAGIC) {
        struct proto_bin_hdr h;
        proto_bin_parse(in + off, &h);
        if (!proto_bin_batchable(&h, avail - off))
            break;
        proto_bin_req_init(&b.req[b.n], st, &h, in + off);
        b.keys[b.n] = b.req[b.n].key;
        b.lens[b.n] = h.keylen;
        off += PROTO_BIN_HDR + h.keylen;
        end[b.n++] = off;
    }
    if (b.n == 0)
        return 0;
    b.stop = b.n;
    int rc = nessie_get_multi(st->c->ctx, b.n, b.keys, b.lens, proto_bin_get_one, &b);
    /* Keys it did not call back for (the whole call refused: this node out of the view) fail
     * with the call. */
    for (size_t i = b.answered; i < b.stop; i++)
        proto_bin_get_one(&b, i, rc == NESSIE_OK ? NESSIE_INVALID : rc, NULL);
    if (b.stop == 0) {
        /* Its first key came back out of order: read alone, it is answered now. */
        struct nessie_item it;
        b.stop = 1;
        rc = nessie_get(st->c->ctx, b.keys[0], b.lens[0], &it);
        proto_bin_get_one(&b, 0, rc, rc == NESSIE_OK ? &it : NULL);
    }
    return end[b.stop - 1];
}

/* ---------------------------------------------------------------------------------------------
 * The other requests, one at a time. */

/* TOUCH, GAT, GATQ, GATK, GATKQ: the item as read, then its new expiration (memcached's order:
 * a GAT with a time already past returns the value once). */
static void proto_bin_touch(struct proto_bin_req *r)
{
    struct proto_conn *c = r->st->c;
    bool with_key = r->op == PROTO_BIN_GATK, with_value = r->op != PROTO_BIN_TOUCH;
    int64_t exptime = proto_bin_get32(r->ext); /* unsigned on the wire: never negative */
    struct nessie_item it;
    int rc = nessie_get(c->ctx, r->key, r->h.keylen, &it);
    if (rc == NESSIE_NOT_FOUND) {
        proto_bin_miss(r, with_key);
        return;
    }
    if (rc != NESSIE_OK) {
        proto_bin_engine_error(r, rc, NULL);
        return;
    }
    size_t mark = c->out->len;
    if (!proto_bin_fits(c, mark, proto_bin_hit_len(r, &it, with_key, with_value))) {
        proto_bin_error(r, PROTO_BIN_ENOMEM, "Out of memory writing get response");
        return;
    }
    /* Written now: the item's value is the context's until its next call, the touch. */
    proto_bin_hit(r, &it, with_key, with_value);
    rc = nessie_touch(c->ctx, r->key, r->h.keylen, exptime);
    if (rc == NESSIE_OK)
        return;
    g_string_truncate(c->out, mark);
    if (rc == NESSIE_NOT_FOUND)
        proto_bin_miss(r, with_key); /* gone between the read and the touch: it ran after */
    else
        proto_bin_engine_error(r, rc, NULL);
}

/* The item memcached would make of key_len and value_len bytes with flags: past the cluster's
 * limit? (nessie.h's max_item_size counts as memcached does.) */
static bool proto_bin_too_big(const struct proto_conn *c, uint64_t key_len, uint64_t value_len,
                              uint32_t flags)
{
    return key_len + value_len + PROTO_BIN_ITEM_OVERHEAD + (flags ? 4 : 0) > c->max_item_size;
}

/*
 * A value refused before it is read: vlen is memcached's (the body less extras and key, as a
 * 32-bit int). "Too large.", and a SET takes the key's old value out (memcached's "avoid stale
 * data"); a value's bytes are swallowed, and a negative vlen swallows nothing, the bytes after
 * the key being read as the next request (memcached refuses it as too large too, and its
 * swallow of a negative count is none; nor does it write what it holds then).
 */
static void proto_bin_too_large(struct proto_bin_req *r, int32_t vlen)
{
    proto_bin_refuse(r, PROTO_BIN_E2BIG, vlen > 0 ? (uint64_t)vlen : 0);
    r->st->flush = false;
    if (r->op == PROTO_BIN_SET)
        nessie_delete(r->st->c->ctx, r->key, r->h.keylen);
}

/* SET, ADD, REPLACE (and their quiet forms) of value[0..vlen). A CAS in the header makes any of
 * them memcached's cas. */
static void proto_bin_store(struct proto_bin_req *r, const unsigned char *value, uint32_t vlen)
{
    struct proto_conn *c = r->st->c;
    uint32_t flags = proto_bin_get32(r->ext);
    int64_t exptime = proto_bin_get32(r->ext + 4); /* unsigned on the wire, as memcached reads it */
    enum nessie_store_mode mode = r->h.cas ? NESSIE_CAS
                                  : r->op == PROTO_BIN_SET ? NESSIE_SET
                                  : r->op == PROTO_BIN_ADD ? NESSIE_ADD
                                                           : NESSIE_REPLACE;
    uint64_t version = 0;
    int rc = nessie_store(c->ctx, mode, r->key, r->h.keylen, value, vlen, flags, exptime, r->h.cas,
                          &version);
    switch (rc) {
    case NESSIE_OK:
        proto_bin_ok(r, NULL, 0, NULL, 0, NULL, 0, version);
        break;
    case NESSIE_NOT_STORED:
        /* memcached's words for an add that found the key, a replace that did not. */
        proto_bin_error(r, mode == NESSIE_ADD ? PROTO_BIN_EEXISTS : PROTO_BIN_ENOENT, NULL);
        break;
    case NESSIE_EXISTS:
        proto_bin_error(r, PROTO_BIN_EEXISTS, NULL);
        break;
    case NESSIE_NOT_FOUND:
        proto_bin_error(r, PROTO_BIN_ENOENT, NULL);
        break;
    default:
        /* memcached's rule: a SET that fails for want of room takes the old value out. */
        if (r->op == PROTO_BIN_SET && (rc == NESSIE_TOO_BIG || rc == NESSIE_NO_MEMORY))
            nessie_delete(c->ctx, r->key, r->h.keylen);
        proto_bin_engine_error(r, rc, "Out of memory allocating item");
        break;
    }
}

/* APPEND, PREPEND (and their quiet forms) of value[0..vlen); with a CAS, only onto the item of
 * that version (nessie_store_meta compares it, after the miss, as memcached does; nessie_store's
 * append ignores a cas), no meta marks. */
static void proto_bin_join(struct proto_bin_req *r, const unsigned char *value, uint32_t vlen)
{
    enum nessie_store_mode mode = r->op == PROTO_BIN_APPEND ? NESSIE_APPEND : NESSIE_PREPEND;
    uint64_t version = 0;
    int rc = nessie_store_meta(r->st->c->ctx, mode, r->key, r->h.keylen, value, vlen, 0, 0,
                               r->h.cas, 0, &version);
    switch (rc) {
    case NESSIE_OK:
        proto_bin_ok(r, NULL, 0, NULL, 0, NULL, 0, version);
        break;
    case NESSIE_EXISTS:
        proto_bin_error(r, PROTO_BIN_EEXISTS, NULL);
        break;
    case NESSIE_NOT_STORED:
    case NESSIE_TOO_BIG:
    case NESSIE_NO_MEMORY:
        /* memcached's answer for a miss, and for a joined item it could not allocate. */
        proto_bin_error(r, PROTO_BIN_NOT_STORED, NULL);
        break;
    default:
        proto_bin_engine_error(r, rc, NULL);
        break;
    }
}

/* DELETE, DELETEQ; with a CAS, only the item of that version. */
static void proto_bin_delete(struct proto_bin_req *r)
{
    int rc = nessie_delete_cas(r->st->c->ctx, r->key, r->h.keylen, r->h.cas);
    switch (rc) {
    case NESSIE_OK:
        proto_bin_ok(r, NULL, 0, NULL, 0, NULL, 0, 0); /* memcached says no CAS here */
        break;
    case NESSIE_NOT_FOUND:
        proto_bin_error(r, PROTO_BIN_ENOENT, NULL);
        break;
    case NESSIE_EXISTS:
        proto_bin_error(r, PROTO_BIN_EEXISTS, NULL);
        break;
    default:
        proto_bin_engine_error(r, rc, NULL);
        break;
    }
}

/* Whether r's key holds an empty value: memcached finds it no number before it looks at the
 * CAS, the engine after; read again only when the engine has said EXISTS, to say what memcached
 * says. */
static bool proto_bin_empty(struct proto_conn *c, const struct proto_bin_req *r)
{
    struct nessie_item it;
    return nessie_get(c->ctx, r->key, r->h.keylen, &it) == NESSIE_OK && it.value_len == 0;
}

/* INCREMENT, DECREMENT (and their quiet forms): extras delta (8), initial (8), expiration (4). */
static void proto_bin_arith(struct proto_bin_req *r)
{
    struct proto_conn *c = r->st->c;
    bool incr = r->op == PROTO_BIN_INCREMENT;
    uint64_t delta = proto_bin_get64(r->ext), initial = proto_bin_get64(r->ext + 8);
    uint32_t exptime = proto_bin_get32(r->ext + 16);
    unsigned char body[8];
    /* The engine has no incr with an initial value: a miss is an ADD of the initial value, and
     * if another client's ADD came first, the incr is tried again on what it stored. */
    for (int tries = 0; tries < PROTO_BIN_ARITH_TRIES; tries++) {
        uint64_t result = 0, version = 0;
        int rc = nessie_arith_cas(c->ctx, r->key, r->h.keylen, incr, delta, r->h.cas, &result,
                                  &version);
        if (rc == NESSIE_EXISTS && proto_bin_empty(c, r))
            rc = NESSIE_NON_NUMERIC;
        if (rc == NESSIE_NOT_FOUND) {
            if (exptime == PROTO_BIN_NO_CREATE) {
                proto_bin_error(r, PROTO_BIN_ENOENT, NULL);
                return;
            }
            char num[21];
            int n = snprintf(num, sizeof(num), "%llu", (unsigned long long)initial);
            rc = nessie_store(c->ctx, NESSIE_ADD, r->key, r->h.keylen, num, (size_t)n, 0,
                              exptime, 0, &version);
            if (rc == NESSIE_NOT_STORED)
                continue;
            result = initial;
            if (rc != NESSIE_OK) {
                proto_bin_engine_error(r, rc, "Out of memory allocating new item");
                return;
            }
        }
        switch (rc) {
        case NESSIE_OK:
            proto_bin_put64(body, result);
            proto_bin_ok(r, NULL, 0, NULL, 0, body, 8, version);
            break;
        case NESSIE_NON_NUMERIC:
            proto_bin_error(r, PROTO_BIN_DELTA_BADVAL, NULL);
            break;
        case NESSIE_EXISTS:
            proto_bin_error(r, PROTO_BIN_EEXISTS, NULL);
            break;
        case NESSIE_TOO_BIG: /* a longer number past the limit: memcached's failed allocation */
        case NESSIE_NO_MEMORY:
        case NESSIE_INDEX_FULL:
            proto_bin_error(r, PROTO_BIN_ENOMEM, "Out of memory incrementing value");
            break;
        default:
            proto_bin_engine_error(r, rc, NULL);
            break;
        }
        return;
    }
    proto_bin_error(r, PROTO_BIN_NOT_STORED, NULL); /* memcached's answer to a lost ADD */
}

/* FLUSH, FLUSHQ: now, or at the time its extras name (memcached's delayed flush_all). */
static void proto_bin_flush(struct proto_bin_req *r)
{
    int64_t exptime = r->h.extlen == 4 ? proto_bin_get32(r->ext) : 0;
    int rc = nessie_flush_delayed(r->st->c->ctx, exptime);
    if (rc == NESSIE_OK)
        proto_bin_ok(r, NULL, 0, NULL, 0, NULL, 0, 0);
    else
        proto_bin_engine_error(r, rc, NULL);
}

/* One statistic's packet (memcached's append_bin_stats): its name as the key, its value as the
 * body; the terminator has neither. */
static void proto_bin_stat_packet(struct proto_bin_req *r, const char *name, size_t nlen,
                                  const char *value, size_t vlen)
{
    proto_bin_header(r, PROTO_BIN_STAT, PROTO_BIN_OK, 0, (uint16_t)nlen, (uint32_t)(nlen + vlen),
                     0);
    proto_bin_append(r->st->c->out, name, nlen);
    proto_bin_append(r->st->c->out, value, vlen);
}

/* Whether r's key, from byte at on, begins with word (memcached compares some STAT keys by
 * their prefix only). */
static bool proto_bin_key_starts(const struct proto_bin_req *r, size_t at, const char *word)
{
    size_t n = strlen(word);
    return r->h.keylen >= at + n && memcmp(r->key + at, word, n) == 0;
}

/* Whether r's key is word. */
static bool proto_bin_key_is(const struct proto_bin_req *r, const char *word)
{
    return r->h.keylen == strlen(word) && proto_bin_key_starts(r, 0, word);
}

/* memcached's statistics in its text form ("STAT name value\r\n" lines, then "END\r\n"), as
 * the daemon renders them for the text protocol: a packet each, then the terminator. */
static void proto_bin_stat_lines(struct proto_bin_req *r, const GString *text)
{
    for (const char *line = text->str; *line;) {
        const char *eol = strstr(line, "\r\n");
        if (!eol)
            break;
        if (strncmp(line, "STAT ", 5) == 0) {
            const char *name = line + 5;
            const char *sp = memchr(name, ' ', (size_t)(eol - name));
            const char *value = sp ? sp + 1 : eol;
            proto_bin_stat_packet(r, name, (size_t)((sp ? sp : eol) - name), value,
                                  (size_t)(eol - value));
        }
        line = eol + 2;
    }
    proto_bin_stat_packet(r, NULL, 0, NULL, 0);
}

/* STAT detail...: this daemon keeps no per-prefix counts (as the text protocol says), so a dump
 * is memcached's empty one and there is nothing to turn on; else memcached's answer. */
static void proto_bin_stat_detail(struct proto_bin_req *r)
{
    if (proto_bin_key_starts(r, 6, " dump")) {
        proto_bin_stat_packet(r, "detailed", 8, "END\r\n", 5);
        proto_bin_stat_packet(r, NULL, 0, NULL, 0);
    } else if (proto_bin_key_starts(r, 6, " on") || proto_bin_key_starts(r, 6, " off")) {
        proto_bin_error(r, PROTO_BIN_EINVAL, "stats detail is not kept by this server");
    } else {
        proto_bin_error(r, PROTO_BIN_ENOENT, NULL);
    }
}

/*
 * STAT: the groups memcached's binary STAT serves, with its matching (reset, settings and
 * detail by prefix, the others whole), rendered by the daemon as for the text protocol's
 * "stats": no key, the general statistics; reset, the counters start again (only the terminator
 * is said); settings, items, slabs, sizes; detail (proto_bin_stat_detail). Any other key:
 * memcached's answer to a group it does not know (conns and cachedump are none of its binary
 * groups either).
 */
static void proto_bin_stat(struct proto_bin_req *r)
{
    struct recep_stats *st = r->st->c->stats;
    if (!st) {
        proto_bin_error(r, PROTO_BIN_ENOENT, NULL); /* none kept */
        return;
    }
    if (r->h.keylen > 0 && proto_bin_key_starts(r, 0, "detail")) {
        proto_bin_stat_detail(r);
        return;
    }
    GString *text = g_string_sized_new(4096);
    bool known = true;
    if (r->h.keylen == 0)
        recep_stats_format(st, text);
    else if (proto_bin_key_starts(r, 0, "reset"))
        recep_stats_reset(st);
    else if (proto_bin_key_starts(r, 0, "settings"))
        recep_stats_settings(st, text);
    else if (proto_bin_key_is(r, "items"))
        recep_stats_items(st, text);
    else if (proto_bin_key_is(r, "slabs"))
        recep_stats_slabs(st, text);
    else if (proto_bin_key_is(r, "sizes"))
        /* memcached's answer while its size histogram is off (its default); none is kept here */
        g_string_append(text, "STAT sizes_status disabled\r\nEND\r\n");
    else
        known = false;
    if (known)
        proto_bin_stat_lines(r, text);
    else
        proto_bin_error(r, PROTO_BIN_ENOENT, NULL);
    g_string_free(text, TRUE);
}

/*
 * Run the request at the start of in[0..avail) that is not a get (those are proto_bin_gets').
 * Returns the bytes consumed, or 0 with c->need set when it is not all there yet; sets c->close
 * (and c->swallow) as memcached would.
 */
static size_t proto_bin_one(struct proto_bin_state *st, const unsigned char *in, size_t avail)
{
    struct proto_conn *c = st->c;
    if (avail < PROTO_BIN_HDR) {
        c->need = PROTO_BIN_HDR;
        return 0;
    }
    if (in[0] != PROTO_BIN_MAGIC) {
        /* Closed without a word; what memcached held unwritten goes with the connection. */
        g_string_truncate(c->out, st->flushed);
        c->close = true;
        return avail;
    }
    struct proto_bin_hdr h;
    proto_bin_parse(in, &h);
    size_t head = PROTO_BIN_HDR + h.extlen + (size_t)h.keylen;
    if (head > PROTO_BIN_READ_MAX) {
        /* It cannot fit memcached's read buffer: once more than that has come, it closes. */
        if (avail > PROTO_BIN_READ_MAX) {
            c->close = true;
            return avail;
        }
        c->need = PROTO_BIN_READ_MAX + 1;
        return 0;
    }
    if (avail < head) {
        c->need = head;
        return 0;
    }
    struct proto_bin_req r;
    proto_bin_req_init(&r, st, &h, in);
    if ((uint64_t)h.keylen + h.extlen > h.bodylen) {
        proto_bin_error(&r, PROTO_BIN_UNKNOWN, NULL);
        c->close = true;
        return head;
    }
    if (h.keylen > NESSIE_KEY_MAX) {
        proto_bin_malformed(&r);
        return head;
    }
    bool bare = h.extlen == 0 && h.keylen == 0 && h.bodylen == 0;
    switch (r.op) {
    case PROTO_BIN_SET:
    case PROTO_BIN_ADD:
    case PROTO_BIN_REPLACE:
    case PROTO_BIN_APPEND:
    case PROTO_BIN_PREPEND: {
        bool join = r.op == PROTO_BIN_APPEND || r.op == PROTO_BIN_PREPEND;
        if (join ? h.keylen == 0 || h.extlen != 0
                 : h.extlen != 8 || h.keylen == 0 || h.bodylen < h.keylen + 8u) {
            proto_bin_malformed(&r);
            return head;
        }
        int32_t vlen = (int32_t)(h.bodylen - h.keylen - h.extlen); /* memcached's int */
        if (vlen < 0 ||
            proto_bin_too_big(c, h.keylen, (uint64_t)vlen, join ? 0 : proto_bin_get32(r.ext))) {
            proto_bin_too_large(&r, vlen);
            return head;
        }
        if (avail - head < (size_t)vlen) {
            c->need = head + (size_t)vlen;
            return 0;
        }
        if (join)
            proto_bin_join(&r, in + head, (uint32_t)vlen);
        else
            proto_bin_store(&r, in + head, (uint32_t)vlen);
        return head + (size_t)vlen;
    }
    case PROTO_BIN_DELETE:
        if (h.keylen == 0 || h.extlen != 0 || h.bodylen != h.keylen)
            proto_bin_malformed(&r);
        else
            proto_bin_delete(&r);
        return head;
    case PROTO_BIN_INCREMENT:
    case PROTO_BIN_DECREMENT:
        if (h.keylen == 0 || h.extlen != 20 || h.bodylen != h.keylen + 20u)
            proto_bin_malformed(&r);
        else
            proto_bin_arith(&r);
        return head;
    case PROTO_BIN_TOUCH:
    case PROTO_BIN_GAT:
    case PROTO_BIN_GATK:
        if (h.extlen != 4 || h.keylen == 0)
            proto_bin_malformed(&r);
        else
            proto_bin_touch(&r);
        return head;
    case PROTO_BIN_GET:
    case PROTO_BIN_GETK:
        /* A well-formed get is proto_bin_gets'; this one's lengths are not a get's. */
        proto_bin_malformed(&r);
        return head;
    case PROTO_BIN_STAT:
        if (h.extlen != 0)
            proto_bin_malformed(&r);
        else
            proto_bin_stat(&r);
        return head;
    case PROTO_BIN_FLUSH:
        if (h.keylen != 0 || h.bodylen != h.extlen || (h.extlen != 0 && h.extlen != 4))
            proto_bin_malformed(&r);
        else
            proto_bin_flush(&r);
        return head;
    case PROTO_BIN_NOOP:
        if (!bare) {
            proto_bin_malformed(&r);
        } else {
            proto_bin_ok(&r, NULL, 0, NULL, 0, NULL, 0, 0);
            st->flush = true; /* memcached writes what it holds at a NOOP */
        }
        return head;
    case PROTO_BIN_VERSION:
        if (!bare)
            proto_bin_malformed(&r);
        else
            /* The memcached whose answers these are, as the text protocol's VERSION says it. */
            proto_bin_ok(&r, NULL, 0, NULL, 0, WIRE_COMPAT_VERSION,
                         (uint32_t)strlen(WIRE_COMPAT_VERSION), 0);
        return head;
    case PROTO_BIN_QUIT:
        if (!bare)
            proto_bin_malformed(&r);
        else
            proto_bin_ok(&r, NULL, 0, NULL, 0, NULL, 0, 0);
        c->close = true;
        return head;
    case PROTO_BIN_SASL_LIST_MECHS:
        /* SASL is never on here: memcached's answers without -S. */
        if (!bare)
            proto_bin_malformed(&r);
        else
            proto_bin_refuse(&r, PROTO_BIN_UNKNOWN, 0);
        return head;
    case PROTO_BIN_SASL_AUTH:
    case PROTO_BIN_SASL_STEP:
        if (h.extlen != 0 || h.keylen == 0)
            proto_bin_malformed(&r);
        else
            proto_bin_refuse(&r, PROTO_BIN_UNKNOWN, proto_bin_int(h.bodylen - h.keylen));
        return head;
    default:
        /* memcached swallows the whole body after the key it has already read. */
        proto_bin_refuse(&r, PROTO_BIN_UNKNOWN, proto_bin_int(h.bodylen));
        return head;
    }
}

size_t proto_bin_run(struct proto_conn *c, const unsigned char *in, size_t len)
{
    /* memcached has written all it held when it waits for input, as at a run's start. */
    struct proto_bin_state st = {.c = c, .flushed = c->out->len};
    size_t off = 0;
    c->need = 0;
    /* Swallowing writes nothing: it goes on past out_max (a refused value's answer may have
     * passed it, and the answer waits for the swallow to end). */
    while (off < len && !c->close && (c->swallow > 0 || c->out->len < c->out_max)) {
        if (c->swallow > 0) {
            off += proto_swallow(c, len - off);
            continue;
        }
        size_t used = proto_bin_gets(&st, in + off, len - off);
        if (used == 0) {
            used = proto_bin_one(&st, in + off, len - off);
            if (used == 0)
                break; /* c->need says what it waits for */
            proto_bin_done(&st);
        }
        off += used;
    }
    return off;
}
