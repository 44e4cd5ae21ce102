/*
 * proto_meta.c - memcached's meta commands (mg, ms, md, ma, me) on the engine (proto_int.h).
 *
 * The grammar and the answers are memcached 1.6.18's (its process_m*_command, read, not
 * copied): a command's flags are single letters, some with a token after them (T30, O123); a
 * flag given twice or unknown is refused before anything is done; the answer is a two-letter
 * status (HD, VA, EN, NF, NS, EX) followed by the flags that return something, in the order
 * the request gave them; q silences the answers a pipelining client does not need (mg's EN, the
 * HD of ms, md and ma), never an error.
 *
 * The state memcached keeps per item for these commands is the engine's too: the marks of its
 * stale-while-revalidate (NESSIE_META_STALE and _TOKEN: md I, mg N and R, ms I, and the W, X,
 * Z flags they give; a token is taken by a CAS-like write, so exactly one reader wins it), a
 * key given in base64 (NESSIE_META_KEY_BINARY), and the record of reads (mg h and l, me:
 * nessie_item_fetched, nessie_item_idle_s, as coarse as the engine keeps it).
 * A client that relies on them to protect a key from a stampede would be harmed by a made-up
 * answer. Where memcached changes an item in place under its lock and the engine has no such
 * call (mg T, ma T: the new expiry after the read), two engine calls are made, as gat does.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <glib.h>

#include "proto_int.h"

/* memcached's limits on a meta request: tokens (MFLAG_MAX_OPT_LENGTH) and an opaque's length
 * (MFLAG_MAX_OPAQUE_LENGTH). */
#define META_TOKENS_MAX 20
#define META_OPAQUE_MAX 32

#define META_BAD_FORMAT "CLIENT_ERROR bad command line format"

/* A request's flags, as memcached's _meta_flag_preparse reads them. */
struct meta_flags {
    const char *err; /* the answer, when the flags were refused */
    bool b, q, v;
    bool has_T, has_N, has_R, has_I, has_C;
    char mode;    /* M: ms's and ma's mode switch (0: none) */
    int32_t T, N, R; /* as the client gave them: memcached's exptime rules (nessie.h) */
    uint32_t F;
    uint64_t C, D, J;
};

/*
 * memcached's base64 decoder (its base64.c), in place: characters outside the alphabet are
 * skipped; a count of the others that is 0 or not a multiple of 4, or a bad padding, is a
 * failure. Returns the decoded length, 0 on failure.
 */
static size_t meta_b64_decode(char *s, size_t len)
{
    static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned char block[4];
    size_t count = 0, out = 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] == '=' || (s[i] != '\0' && strchr(alpha, s[i])))
            count++;
    if (count == 0 || count % 4)
        return 0;
    int pad = 0;
    count = 0;
    for (size_t i = 0; i < len; i++) {
        const char *at = s[i] != '\0' ? strchr(alpha, s[i]) : NULL;
        if (s[i] != '=' && !at)
            continue;
        if (s[i] == '=')
            pad++;
        block[count++] = s[i] == '=' ? 0 : (unsigned char)(at - alpha);
        if (count < 4)
            continue;
        /* out never passes i: 3 bytes are written for every 4 read */
        s[out++] = (char)((block[0] << 2) | (block[1] >> 4));
        s[out++] = (char)((block[1] << 4) | (block[2] >> 2));
        s[out++] = (char)((block[2] << 6) | block[3]);
        count = 0;
        if (pad) {
            if (pad > 2)
                return 0;
            out -= (size_t)pad;
            break;
        }
    }
    return out;
}

/*
 * Read the flags t[start..n-1) into *f (memcached's preparse): a repeated or unknown flag stops
 * at once; a bad number is noted and the scan goes on. The key t[1] is decoded in place when b
 * is given. Returns false (f->err set) when the request is to be refused.
 */
static bool meta_flags_parse(struct proto_token *t, size_t start, size_t n, struct meta_flags *f)
{
    bool seen[128] = {false}, bad = false;
    memset(f, 0, sizeof(*f));
    f->err = META_BAD_FORMAT;
    f->D = 1;
    for (size_t i = start; i < n - 1; i++) {
        unsigned char o = (unsigned char)t[i].v[0];
        const char *arg = t[i].v + 1;
        if (o >= 127 || seen[o]) {
            f->err = "CLIENT_ERROR duplicate flag";
            return false;
        }
        seen[o] = true;
        switch (o) {
        case 'b': {
            size_t l = meta_b64_decode(t[1].v, t[1].len);
            if (l == 0) {
                f->err = "CLIENT_ERROR error decoding key";
                bad = true;
            }
            t[1].len = l;
            f->b = true;
            break;
        }
        case 'N': case 'T': case 'R': { /* a time: vivify's, the new TTL, recache below */
            int32_t *v = o == 'N' ? &f->N : o == 'T' ? &f->T : &f->R;
            *(o == 'N' ? &f->has_N : o == 'T' ? &f->has_T : &f->has_R) = true;
            if (!proto_parse_i32(arg, v)) {
                f->err = "CLIENT_ERROR bad token in command line format";
                bad = true;
            }
            break;
        }
        case 'O': case 'P': case 'L': /* opaque; the proxy's own flags, ignored as memcached does */
        case 'k': case 's': case 't': case 'f': case 'u': case 'c': case 'h': case 'l':
            break;
        case 'v':
            f->v = true;
            break;
        case 'q':
            f->q = true;
            break;
        case 'F':
            if (!proto_parse_u32(arg, &f->F))
                bad = true;
            break;
        case 'C':
            f->has_C = true;
            if (!proto_parse_u64(arg, &f->C)) {
                f->err = "CLIENT_ERROR bad token in command line format";
                bad = true;
            }
            break;
        case 'M':
            if (t[i].len != 2) {
                f->err = "CLIENT_ERROR incorrect length for M token";
                bad = true;
            } else {
                f->mode = t[i].v[1];
            }
            break;
        case 'J':
            if (!proto_parse_u64(arg, &f->J)) {
                f->err = "CLIENT_ERROR invalid numeric initial value";
                bad = true;
            }
            break;
        case 'D':
            if (!proto_parse_u64(arg, &f->D)) {
                f->err = "CLIENT_ERROR invalid numeric delta value";
                bad = true;
            }
            break;
        case 'I':
            f->has_I = true;
            break;
        default:
            f->err = "CLIENT_ERROR invalid flag";
            return false;
        }
    }
    return !bad;
}

/* Whether flag letter o was given in t[start..n-1). */
static bool meta_has(const struct proto_token *t, size_t start, size_t n, char o)
{
    for (size_t i = start; i < n - 1; i++)
        if (t[i].v[0] == o)
            return true;
    return false;
}

/* An error: said even under q (memcached's out_errstring). */
static void meta_error(struct proto_req *r, const char *line)
{
    r->noreply = false;
    proto_reply(r, line);
}

/* Append " k<key>" to o, base64 with " b" after it when the request's key was. */
static void meta_key(GString *o, const struct proto_token *key, bool b)
{
    g_string_append_len(o, " k", 2);
    if (!b) {
        g_string_append_len(o, key->v, (gssize)key->len);
        return;
    }
    gchar *enc = g_base64_encode((const guchar *)key->v, key->len);
    g_string_append(o, enc);
    g_free(enc);
    g_string_append_len(o, " b", 2);
}

/* Append the flags that echo the request (O, k) to o, in the request's order. Returns false if
 * an opaque is too long (memcached's error, said instead of the answer). */
static bool meta_echo(GString *o, const struct proto_token *t, size_t start, size_t n, bool b)
{
    for (size_t i = start; i < n - 1; i++) {
        if (t[i].v[0] == 'O') {
            if (t[i].len > META_OPAQUE_MAX)
                return false;
            g_string_append_c(o, ' ');
            g_string_append_len(o, t[i].v, (gssize)t[i].len);
        } else if (t[i].v[0] == 'k') {
            meta_key(o, &t[1], b);
        }
    }
    return true;
}

/* Whether an opaque of the request is too long (checked first where memcached checks it before
 * acting). */
static bool meta_opaque_bad(const struct proto_token *t, size_t start, size_t n)
{
    for (size_t i = start; i < n - 1; i++)
        if (t[i].v[0] == 'O' && t[i].len > META_OPAQUE_MAX)
            return true;
    return false;
}

/* The absolute Unix time an exptime as a client gives it means (nessie.h's rules, memcached's):
 * 0 never; up to 30 days from now; else a Unix time; negative: already past. */
static int64_t meta_abs_exptime(int64_t e, int64_t now)
{
    if (e == 0)
        return 0;
    if (e < 0)
        return now - 1;
    return e <= 60 * 60 * 24 * 30 ? now + e : e;
}

/* " t<seconds left>", or " t-1" for an item that never expires. */
static void meta_ttl(GString *o, int64_t abs_exptime, int64_t now)
{
    if (abs_exptime == 0)
        g_string_append_len(o, " t-1", 4);
    else
        g_string_append_printf(o, " t%" PRId64, abs_exptime > now ? abs_exptime - now : 0);
}

/* The checks every meta command makes first (memcached's order); false: answered. */
static bool meta_precheck(struct proto_req *r, const struct proto_token *t, size_t n,
                          const char *too_many)
{
    if (n < 3) {
        proto_reply(r, "ERROR");
        return false;
    }
    if (t[1].len > NESSIE_KEY_MAX) {
        proto_reply(r, META_BAD_FORMAT);
        return false;
    }
    if (n > META_TOKENS_MAX) {
        proto_reply(r, too_many);
        return false;
    }
    return true;
}

/* mg: the item's value and metadata, as its flags ask; with N, a miss creates an empty item
 * whose refresh this client wins; a stale item, or one R says is due, is won by its first
 * reader (W), and later readers are told someone has it (Z). */
static void meta_get(struct proto_req *r, struct proto_token *t, size_t n)
{
    struct proto_conn *c = r->c;
    struct meta_flags f;
    if (!meta_precheck(r, t, n, "CLIENT_ERROR options flags are too long"))
        return;
    if (!meta_flags_parse(t, 2, n, &f)) {
        meta_error(r, f.err);
        return;
    }
    r->noreply = f.q;
    struct nessie_item it;
    bool created = false;
    int rc = nessie_get(c->ctx, t[1].v, t[1].len, &it);
    /* N: a miss creates the item, empty, with its token taken by this client; an add that
     * loses means another client created it first: read again, as memcached's reader after
     * it would. */
    for (int tries = 0; rc == NESSIE_NOT_FOUND && f.has_N && tries < 3; tries++) {
        uint64_t version;
        int ar = nessie_store_meta(c->ctx, NESSIE_ADD, t[1].v, t[1].len, "", 0, 0, f.N, 0,
                                   NESSIE_META_TOKEN, &version);
        if (ar == NESSIE_OK) {
            created = true;
            it = (struct nessie_item){.value = "", .version = version, .meta = NESSIE_META_TOKEN,
                                      .exptime = (uint32_t)meta_abs_exptime(f.N, time(NULL))};
            rc = NESSIE_OK;
            break;
        }
        rc = ar == NESSIE_NOT_STORED ? nessie_get(c->ctx, t[1].v, t[1].len, &it) : ar;
    }
    GString *o = c->out;
    size_t mark = o->len;
    if (rc == NESSIE_NOT_FOUND) {
        g_string_append_len(o, "EN", 2);
        if (!meta_echo(o, t, 2, n, f.b)) {
            g_string_truncate(o, mark);
            meta_error(r, "CLIENT_ERROR opaque token too long");
            return;
        }
        if (f.q)
            g_string_truncate(o, mark); /* a miss is not said under q */
        else
            g_string_append_len(o, "\r\n", 2);
        return;
    }
    if (rc != NESSIE_OK) {
        meta_error(r, proto_server_error(rc));
        return;
    }
    uint64_t grown = (uint64_t)it.value_len + t[1].len * 2 + 256;
    if (f.v && (grown > c->reply_max ||
                (c->held && __atomic_load_n(c->held, __ATOMIC_RELAXED) + grown > c->held_max))) {
        meta_error(r, "SERVER_ERROR out of memory writing get response");
        return;
    }
    if (meta_opaque_bad(t, 2, n)) {
        meta_error(r, "CLIENT_ERROR opaque token too long");
        return;
    }
    int64_t now = (int64_t)time(NULL), exptime = it.exptime;
    /* Who refreshes the item (memcached's tokens): one that was created here is this client's
     * already; a stale one, or one whose TTL is below R's, goes to its first reader, which
     * takes the token on the version it read (exactly one reader wins it). */
    bool token = (it.meta & NESSIE_META_TOKEN) != 0, stale = (it.meta & NESSIE_META_STALE) != 0;
    bool won = created;
    if (!created && !token &&
        (stale || (f.has_R && it.exptime != 0 && it.exptime < meta_abs_exptime(f.R, now)))) {
        int tr = nessie_token_take(c->ctx, t[1].v, t[1].len, it.version);
        if (tr == NESSIE_OK) {
            won = true;
        } else if (tr == NESSIE_EXISTS) {
            token = true; /* another reader took it, or the item changed: as if read after */
        } else if (tr != NESSIE_NOT_FOUND) {
            /* The outcome is unknown (a timeout, an unreachable node): read again. The token
             * set on the version read is this reader's as much as anyone's, and a second
             * winner is harmless (its refresh stores with the CAS it read); not saying W
             * would leave the item stale with nobody refreshing it. */
            struct nessie_item again;
            int gr = nessie_get(c->ctx, t[1].v, t[1].len, &again);
            if (gr != NESSIE_OK && gr != NESSIE_NOT_FOUND) {
                g_string_truncate(o, mark);
                meta_error(r, proto_server_error(tr));
                return;
            }
            won = gr == NESSIE_OK && again.version == it.version &&
                  (again.meta & NESSIE_META_TOKEN);
            token = gr == NESSIE_OK && !won && (again.meta & NESSIE_META_TOKEN);
        } /* NOT_FOUND: gone since the read; answered as read, nobody's token */
    }
    if (f.v)
        g_string_append_printf(o, "VA %" PRIu32, it.value_len);
    else
        g_string_append_len(o, "HD", 2);
    /* the item's own mark: a vivified item has none (memcached's prints its key raw) */
    bool key_binary = (it.meta & NESSIE_META_KEY_BINARY) != 0;
    for (size_t i = 2; i < n - 1; i++) {
        switch (t[i].v[0]) {
        case 'T': /* the new expiry counts for a t after it, as memcached's loop has it */
            exptime = meta_abs_exptime(f.T, now);
            break;
        case 's':
            g_string_append_printf(o, " s%" PRIu32, it.value_len);
            break;
        case 't':
            meta_ttl(o, exptime, now);
            break;
        case 'c':
            g_string_append_printf(o, " c%" PRIu64, it.version);
            break;
        case 'f':
            g_string_append_printf(o, " f%" PRIu32, it.flags);
            break;
        case 'l':
            g_string_append_printf(o, " l%" PRIu32, nessie_item_idle_s(&it));
            break;
        case 'h':
            g_string_append(o, nessie_item_fetched(&it) ? " h1" : " h0");
            break;
        case 'O':
            g_string_append_c(o, ' ');
            g_string_append_len(o, t[i].v, (gssize)t[i].len);
            break;
        case 'k': /* the item's own key's form, as memcached re-encodes it from the item */
            meta_key(o, &t[1], key_binary);
            break;
        }
    }
    if (token && !created)
        g_string_append_len(o, " Z", 2);
    if (stale)
        g_string_append_len(o, " X", 2);
    if (won)
        g_string_append_len(o, " W", 2);
    g_string_append_len(o, "\r\n", 2);
    if (f.v) {
        g_string_append_len(o, it.value, it.value_len);
        g_string_append_len(o, "\r\n", 2);
    }
    /* memcached sets the expiry in place under the item's lock; here, a touch after the read
     * (a write between the two gets the new expiry, as with gat). */
    if (f.has_T)
        nessie_touch(c->ctx, t[1].v, t[1].len, f.T);
}

/* ms: store the data that follows the line, in the mode M says. Returns the bytes consumed, or
 * 0 (c->need set) while the data is not all there. */
static size_t meta_set(struct proto_req *r, struct proto_token *t, size_t n,
                       const unsigned char *in, size_t line_len, size_t avail)
{
    struct proto_conn *c = r->c;
    struct meta_flags f;
    if (!meta_precheck(r, t, n, "CLIENT_ERROR options flags too long"))
        return line_len;
    int32_t vlen;
    if (n == 3 || !proto_parse_i32(t[2].v, &vlen) || vlen < 0 || vlen > INT_MAX - 2) {
        proto_reply(r, META_BAD_FORMAT);
        return line_len;
    }
    uint64_t data = (uint64_t)vlen + 2;
    /* From here, a refused request swallows its data, as memcached's does. */
    const char *err = NULL;
    enum nessie_store_mode mode = NESSIE_SET;
    if (!meta_flags_parse(t, 3, n, &f))
        err = f.err;
    if (!err) {
        switch (f.mode) {
        case 0: case 'S': mode = NESSIE_SET; break;
        case 'E': mode = NESSIE_ADD; break;
        case 'A': mode = NESSIE_APPEND; break;
        case 'P': mode = NESSIE_PREPEND; break;
        case 'R': mode = NESSIE_REPLACE; break;
        default: err = "CLIENT_ERROR invalid mode for ms M token"; break;
        }
    }
    if (!err && meta_opaque_bad(t, 3, n)) /* memcached's order: the mode first */
        err = "CLIENT_ERROR opaque token too long";
    bool has_cas = !err && meta_has(t, 3, n, 'C');
    if (!err && (uint64_t)vlen > c->max_item_size) {
        err = "SERVER_ERROR object too large for cache";
        nessie_delete(c->ctx, t[1].v, t[1].len); /* memcached's "avoid stale data", any mode */
    }
    if (err) {
        meta_error(r, err);
        c->swallow = data;
        return line_len;
    }
    /* memcached: a CAS turns a set or a replace into a cas (an add ignores it; an append or a
     * prepend compares it); with I, a cas older than the item's stores the value stale. */
    if (has_cas && (mode == NESSIE_SET || mode == NESSIE_REPLACE))
        mode = NESSIE_CAS;
    uint32_t meta = (f.b ? NESSIE_META_KEY_BINARY : 0) |
                    (f.has_I && mode == NESSIE_CAS ? NESSIE_META_STALE : 0);
    r->noreply = f.q;
    if (avail - line_len < data) {
        c->need = line_len + (size_t)data;
        return 0;
    }
    const unsigned char *value = in + line_len;
    if (value[vlen] != '\r' || value[vlen + 1] != '\n') {
        meta_error(r, "CLIENT_ERROR bad data chunk");
        return line_len + (size_t)data;
    }
    uint64_t version = 0;
    int rc = nessie_store_meta(c->ctx, mode, t[1].v, t[1].len, value, (size_t)vlen, f.F,
                               f.has_T ? f.T : 0, f.C, meta, &version);
    const char *status;
    switch (rc) {
    case NESSIE_OK: status = "HD"; break;
    case NESSIE_EXISTS: status = "EX"; break;
    case NESSIE_NOT_FOUND: status = "NF"; break;
    case NESSIE_NOT_STORED: status = "NS"; break;
    default:
        if (rc == NESSIE_TOO_BIG || rc == NESSIE_NO_MEMORY)
            nessie_delete(c->ctx, t[1].v, t[1].len);
        meta_error(r, proto_server_error(rc));
        return line_len + (size_t)data;
    }
    if (rc == NESSIE_OK && f.q)
        return line_len + (size_t)data; /* HD is not said under q */
    if (rc != NESSIE_OK)
        version = 0; /* memcached's c->cas, cleared before the store, set only on success */
    GString *o = c->out;
    g_string_append(o, status);
    for (size_t i = 3; i < n - 1; i++) {
        if (t[i].v[0] == 'O') {
            g_string_append_c(o, ' ');
            g_string_append_len(o, t[i].v, (gssize)t[i].len);
        } else if (t[i].v[0] == 'k') {
            meta_key(o, &t[1], f.b);
        } else if (t[i].v[0] == 'c') {
            g_string_append_printf(o, " c%" PRIu64, version);
        }
    }
    g_string_append_len(o, "\r\n", 2);
    return line_len + (size_t)data;
}

/* md's and ma's first checks (memcached's order and words): false when answered. Sets
 * r->noreply from q once the flags are read. */
static bool meta_begin(struct proto_req *r, struct proto_token *t, size_t n, struct meta_flags *f)
{
    if (!meta_precheck(r, t, n, "CLIENT_ERROR options flags too long"))
        return false;
    if (!meta_flags_parse(t, 2, n, f)) {
        meta_error(r, "CLIENT_ERROR invalid or duplicate flag");
        return false;
    }
    r->noreply = f->q;
    return true;
}

/* md: delete the item, if its CAS is C when C is given. */
static void meta_delete(struct proto_req *r, struct proto_token *t, size_t n)
{
    struct proto_conn *c = r->c;
    struct meta_flags f;
    if (!meta_begin(r, t, n, &f))
        return;
    if (meta_opaque_bad(t, 2, n)) {
        meta_error(r, "CLIENT_ERROR opaque token too long");
        return;
    }
    /* I: the item stays, stale, its refresh to be won by its next reader */
    int rc;
    struct nessie_item it;
    if (f.has_C && f.C == 0) {
        /* memcached compares a C of 0 too, which no item's CAS is; the engine's 0 means "any" */
        rc = nessie_get(c->ctx, t[1].v, t[1].len, &it);
        rc = rc == NESSIE_OK ? NESSIE_EXISTS : rc;
    } else if (f.has_I) {
        rc = nessie_invalidate(c->ctx, t[1].v, t[1].len, f.C, f.has_T, f.T);
    } else {
        rc = nessie_delete_cas(c->ctx, t[1].v, t[1].len, f.C);
    }
    const char *status = rc == NESSIE_OK          ? "HD"
                         : rc == NESSIE_NOT_FOUND ? "NF"
                         : rc == NESSIE_EXISTS    ? "EX"
                                                  : NULL;
    if (!status) {
        meta_error(r, proto_server_error(rc));
        return;
    }
    if (rc == NESSIE_OK && f.q)
        return;
    g_string_append(c->out, status);
    meta_echo(c->out, t, 2, n, f.b);
    g_string_append_len(c->out, "\r\n", 2);
}

/* ma: increment or decrement, creating the item from J when N is given and it is missing. */
static void meta_arith(struct proto_req *r, struct proto_token *t, size_t n)
{
    struct proto_conn *c = r->c;
    struct meta_flags f;
    if (!meta_begin(r, t, n, &f))
        return;
    bool incr;
    switch (f.mode) {
    case 0: case 'I': case '+': incr = true; break;
    case 'D': case '-': incr = false; break;
    default:
        meta_error(r, "CLIENT_ERROR invalid mode for ma M token");
        return;
    }
    uint64_t num = 0, version = 0;
    bool created = false;
    int rc;
    /* A miss with N creates the item from J (an add); an add that lost to another writer's
     * means the key is there now: the arithmetic is tried again. */
    for (int tries = 0;; tries++) {
        rc = nessie_arith_cas(c->ctx, t[1].v, t[1].len, incr, f.D, f.C, &num, &version);
        if (rc != NESSIE_NOT_FOUND || !f.has_N || tries == 3)
            break;
        char init[24];
        int len = snprintf(init, sizeof(init), "%" PRIu64, f.J);
        rc = nessie_store(c->ctx, NESSIE_ADD, t[1].v, t[1].len, init, (size_t)len, 0, f.N, 0,
                          &version);
        if (rc == NESSIE_OK) {
            created = true;
            num = f.J;
            break;
        }
        if (rc != NESSIE_NOT_STORED)
            break;
    }
    GString *o = c->out;
    /* memcached looks at the opaques' length only as it writes the answer: after the
     * arithmetic, which stays done. */
    if ((rc == NESSIE_OK || rc == NESSIE_NOT_FOUND || rc == NESSIE_EXISTS) &&
        meta_opaque_bad(t, 2, n)) {
        meta_error(r, "CLIENT_ERROR opaque token too long");
        return;
    }
    switch (rc) {
    case NESSIE_OK:
        break;
    case NESSIE_NOT_FOUND:
    case NESSIE_EXISTS:
        g_string_append(o, rc == NESSIE_EXISTS ? "EX" : "NF");
        meta_echo(o, t, 2, n, f.b);
        g_string_append_len(o, "\r\n", 2);
        return;
    case NESSIE_NON_NUMERIC:
        meta_error(r, "CLIENT_ERROR cannot increment or decrement non-numeric value");
        return;
    case NESSIE_NO_MEMORY:
    case NESSIE_INDEX_FULL:
        meta_error(r, "SERVER_ERROR out of memory");
        return;
    default:
        meta_error(r, proto_server_error(rc));
        return;
    }
    /* The expiry, for t: a created item's is none until its N (memcached creates it so and
     * applies N and T where the request names them), else read back (the arithmetic keeps
     * it). want: the expiry the item must end with, when not the one it was created with. */
    int64_t now = (int64_t)time(NULL), exptime = 0;
    int32_t want = 0;
    bool retouch = false;
    if (!created && meta_has(t, 2, n, 't')) {
        struct nessie_item it;
        if (nessie_get(c->ctx, t[1].v, t[1].len, &it) == NESSIE_OK)
            exptime = it.exptime;
    }
    char numbuf[24];
    int numlen = snprintf(numbuf, sizeof(numbuf), "%" PRIu64, num);
    size_t mark = o->len;
    if (f.v)
        g_string_append_printf(o, "VA %d", numlen);
    else
        g_string_append_len(o, "HD", 2);
    for (size_t i = 2; i < n - 1; i++) {
        switch (t[i].v[0]) {
        case 'c':
            g_string_append_printf(o, " c%" PRIu64, version);
            break;
        case 't':
            meta_ttl(o, exptime, now);
            break;
        case 'T':
            exptime = meta_abs_exptime(f.T, now);
            want = f.T;
            retouch = true;
            break;
        case 'N':
            if (created) {
                exptime = meta_abs_exptime(f.N, now);
                want = f.N;
                retouch = false; /* created with it */
            }
            break;
        case 'O':
            g_string_append_c(o, ' ');
            g_string_append_len(o, t[i].v, (gssize)t[i].len);
            break;
        case 'k':
            meta_key(o, &t[1], f.b);
            break;
        }
    }
    g_string_append_len(o, "\r\n", 2);
    if (f.v) {
        g_string_append_len(o, numbuf, (gssize)numlen);
        g_string_append_len(o, "\r\n", 2);
    }
    if (f.q && !created)
        g_string_truncate(o, mark); /* a success is not said under q (a creation is: memcached's) */
    if (retouch) /* memcached sets it in place; here a touch after (as mg T) */
        nessie_touch(c->ctx, t[1].v, t[1].len, want);
}

/* me KEY [b]: memcached's debug line for an item (its exp is the seconds since the expiry: a
 * negative number for an item that has not expired, -1 for one that never does; size is its
 * item's size as memcached counts it; cls, the class stats items and cachedump number). */
static void meta_debug(struct proto_req *r, struct proto_token *t, size_t n)
{
    struct proto_conn *c = r->c;
    if (n < 3 || t[1].len > NESSIE_KEY_MAX) {
        proto_reply(r, META_BAD_FORMAT);
        return;
    }
    bool b = n >= 4 && t[2].len == 1 && t[2].v[0] == 'b';
    if (b) {
        size_t l = meta_b64_decode(t[1].v, t[1].len);
        if (l == 0) {
            proto_reply(r, META_BAD_FORMAT);
            return;
        }
        t[1].len = l;
    }
    struct nessie_item it;
    int rc = nessie_get(c->ctx, t[1].v, t[1].len, &it);
    if (rc == NESSIE_NOT_FOUND) {
        proto_reply(r, "EN");
        return;
    }
    if (rc != NESSIE_OK) {
        proto_reply(r, proto_server_error(rc));
        return;
    }
    GString *o = c->out;
    g_string_append_len(o, "ME ", 3);
    if (b) {
        gchar *enc = g_base64_encode((const guchar *)t[1].v, t[1].len);
        g_string_append(o, enc);
        g_free(enc);
    } else {
        g_string_append_len(o, t[1].v, (gssize)t[1].len);
    }
    int64_t now = (int64_t)time(NULL);
    int cls = nessie_class_of(nessie_ctx_node(c->ctx), t[1].len, it.value_len);
    g_string_append_printf(o, " exp=%" PRId64 " la=%" PRIu32 " cas=%" PRIu64
                           " fetch=%s cls=%d size=%" PRIu64 "\r\n",
                           it.exptime == 0 ? -1 : now - (int64_t)it.exptime,
                           nessie_item_idle_s(&it), it.version,
                           nessie_item_fetched(&it) ? "yes" : "no", cls + 1,
                           /* memcached's item size: its 48-byte header, the CAS, the key's NUL
                            * and the value's CRLF, and 4 bytes for flags that are not 0 */
                           (uint64_t)59 + (it.flags ? 4 : 0) + t[1].len + it.value_len);
}

size_t proto_meta_run(struct proto_req *r, struct proto_token *t, size_t n,
                      const unsigned char *in, size_t line_len, size_t avail)
{
    switch (t[0].v[1]) {
    case 'g':
        meta_get(r, t, n);
        break;
    case 's':
        return meta_set(r, t, n, in, line_len, avail);
    case 'd':
        meta_delete(r, t, n);
        break;
    case 'a':
        meta_arith(r, t, n);
        break;
    case 'e':
        meta_debug(r, t, n);
        break;
    case 'n':
        proto_reply(r, "MN");
        break;
    default:
        proto_reply(r, "ERROR");
        break;
    }
    return line_len;
}
