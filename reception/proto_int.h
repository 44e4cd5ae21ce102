/*
 * proto_int.h - what the text protocol's files share (proto_text.c, the classic commands and
 * the line reader; proto_meta.c, the meta commands): memcached's tokenizer, its number parsers,
 * the request being answered. Internal to reception/; the connection layer sees proto_text.h.
 */
#ifndef NESSIE_RECEPTION_PROTO_INT_H
#define NESSIE_RECEPTION_PROTO_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto_text.h"

/* Tokens a command is split into at most (memcached's MAX_TOKENS); a get's further keys are
 * read from the rest of its line. */
#define PROTO_TOKENS_MAX 24

struct proto_token {
    char *v;
    size_t len;
};

/* The request being run: its answer is silenced by noreply (meta: the q flag, for the answers
 * memcached lets q silence). */
struct proto_req {
    struct proto_conn *c;
    bool noreply;
};

/* Split line (NUL-terminated, modified) at spaces as memcached does: runs of spaces are one
 * separator, at most max - 1 tokens; t[n - 1] is the terminal token, whose v is the rest of the
 * line not split (NULL when the whole line was). Returns n, the terminal token counted. */
size_t proto_tokenize(char *line, struct proto_token *t, size_t max);

/* memcached's number parsers (its util.c safe_strto*): true and *out set, or false. */
bool proto_parse_u64(const char *s, uint64_t *out);
bool proto_parse_u32(const char *s, uint32_t *out);
bool proto_parse_i32(const char *s, int32_t *out);

/* Append line and "\r\n" to the connection's replies, unless the request is silenced. */
void proto_reply(struct proto_req *r, const char *line);

/* memcached's line for an engine outcome that is no answer of its own. */
const char *proto_server_error(int rc);

/*
 * A meta command (mg, ms, md, ma, me; mn is the line reader's), its tokens t[0..n) (the
 * terminal one counted), its line line_len bytes of the input in[0..avail). Returns the bytes
 * consumed (the line, or an ms's line and data), or 0 with c->need set while an ms's data is not
 * all there. Never fails: a bad request gets memcached's error line and changes nothing.
 */
size_t proto_meta_run(struct proto_req *r, struct proto_token *t, size_t n,
                      const unsigned char *in, size_t line_len, size_t avail);

#endif
