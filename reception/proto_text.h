/*
 * proto_text.h - memcached's text protocol (issue 32), as memcached 1.6 speaks it, run through
 * the engine's calls: the requests of one TCP connection (tcp.c), parsed from its input and
 * answered into its output. No socket here: the connection layer reads and writes, this file
 * only turns bytes into engine calls and their outcomes into memcached's reply lines.
 */
#ifndef NESSIE_RECEPTION_PROTO_TEXT_H
#define NESSIE_RECEPTION_PROTO_TEXT_H

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nessie/nessie.h>
#include "stats.h"

/* memcached's own limit on a command line that is not a get (its try_read_command_ascii): past
 * it with no newline, the connection is closed. */
#define PROTO_LINE_MAX 2048
/* A get's line (many keys) may be longer, as in memcached, but not without bound here: past this
 * with no newline, the connection is closed. */
#define PROTO_GET_LINE_MAX (1024 * 1024)

/*
 * A run of c->out's bytes that are not part of the replies: the room left in front of a value
 * read straight into c->out (a get's header is shorter than the room kept for it, which its
 * value's length decides). The connection layer skips them when it writes.
 */
struct proto_gap {
    size_t at, len;
};
/* Gaps one connection's pending replies may have (more: values are copied, as without gaps). */
#define PROTO_GAPS_MAX 16

/* What a connection's requests run with, and what they leave for the connection layer. */
struct proto_conn {
    struct nessie_ctx *ctx;     /* the connection's thread's engine context */
    struct recep_stats *stats;  /* for "stats" (NULL: none) */
    uint32_t max_item_size;     /* the cluster's, as the engine counts it */
    GString *out;               /* replies are appended here */
    GArray *gaps;               /* struct proto_gap in out, by offset (NULL: out is one string,
                                 * every value copied into it; else the writer skips them) */
    size_t out_max;             /* past this many bytes of replies, no further request is run */
    size_t reply_max;           /* one get's reply at most: past it (or past held_max for the
                                 * daemon), memcached's answer for a reply it cannot hold,
                                 * "SERVER_ERROR out of memory writing get response" */
    const uint64_t *held;       /* replies every connection holds now (NULL: not counted) */
    uint64_t held_max;
    uint64_t swallow;           /* bytes of a refused value still to discard (in and out) */
    size_t need;                /* out: bytes the next request needs at the input's start to
                                 * go on (0: a line not yet whole) */
    bool close;                 /* out: close once out is written (quit, a hopeless line) */
    /* "stats conns": appends the connection layer's lines for it (self the connection asking)
     * to out; NULL: that layer keeps none, and the sub-command is unknown. */
    void (*conns)(void *user, const struct proto_conn *self, GString *out);
    void *conns_user;
};

/*
 * Run the whole requests at the start of in[0..len), in order, appending their replies to
 * c->out. Returns the bytes consumed (requests run, or discarded while swallowing); the rest is
 * an incomplete request, to be passed again with more bytes after it. Sets c->need to the bytes
 * that request needs in all when it knows (a storage command's line and data), and c->close
 * when the connection must end (quit, or a line too long to be one). Never fails: bad input
 * gets memcached's error line and changes nothing.
 */
size_t proto_text_run(struct proto_conn *c, const unsigned char *in, size_t len);

/* Values read straight into a connection's replies since the daemon started (a counter for
 * the stats: every get of a single key that the engine read into the room offered). */
uint64_t proto_text_direct_gets(void);

/* c->out cut back to len bytes, and the gaps past it forgotten. */
static inline void proto_out_truncate(struct proto_conn *c, size_t len)
{
    g_string_truncate(c->out, len);
    while (c->gaps && c->gaps->len > 0) {
        struct proto_gap *last = &g_array_index(c->gaps, struct proto_gap, c->gaps->len - 1);
        if (last->at < len) {
            /* (Marks are taken between replies, never inside a gap: kept for any caller.) */
            if (last->at + last->len > len)
                last->len = len - last->at;
            break;
        }
        g_array_set_size(c->gaps, c->gaps->len - 1);
    }
}

/* The bytes of a refused value still to be discarded that avail bytes of input hold (and
 * c->swallow lowered by them): both protocols' runs skip them before reading a request. */
static inline size_t proto_swallow(struct proto_conn *c, size_t avail)
{
    size_t k = avail < c->swallow ? avail : (size_t)c->swallow;
    c->swallow -= k;
    return k;
}

#endif
