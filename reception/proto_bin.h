/*
 * proto_bin.h - memcached's binary protocol, as memcached 1.6.18 speaks it, run through the
 * engine's calls: the requests of one TCP connection whose first byte was the binary request
 * magic (tcp.c tells the protocols apart by that byte, as memcached does), parsed from its input
 * and answered into its output. The same contract as proto_text.h's, on the same struct
 * proto_conn: no socket here, only bytes turned into engine calls and their outcomes into
 * memcached's response packets.
 */
#ifndef NESSIE_RECEPTION_PROTO_BIN_H
#define NESSIE_RECEPTION_PROTO_BIN_H

#include <stddef.h>

#include "proto_text.h"

/* The request magic: a connection whose first byte is this speaks the binary protocol. */
#define PROTO_BIN_MAGIC 0x80
/* A request's header, extras and key are read into memcached's fixed 16 KiB read buffer before
 * anything is judged: one whose header, extras and key are longer can never be parsed, and
 * memcached closes its connection once more than this has come. */
#define PROTO_BIN_READ_MAX 16384
/* The most input one request needs at once (c->need): its header, extras (at most 255 bytes)
 * and key (at most 250: a longer one is refused once read), and a value the item limit admits
 * (a larger one is refused and swallowed); or PROTO_BIN_READ_MAX + 1 to find a header too long. */
#define PROTO_BIN_NEED_MAX(item_max)                                                               \
    (24u + 255u + 250u + (size_t)(item_max) > PROTO_BIN_READ_MAX + 1u                              \
         ? 24u + 255u + 250u + (size_t)(item_max)                                                  \
         : PROTO_BIN_READ_MAX + 1u)

/*
 * Run the whole requests at the start of in[0..len), in order, appending their responses to
 * c->out, as proto_text_run does (proto_text.h): returns the bytes consumed, sets c->need when a
 * request is not all there yet, c->swallow when a refused value is to be discarded as it comes,
 * and c->close when the connection must end (quit, a malformed request). Stops running requests
 * once c->out holds c->out_max bytes.
 */
size_t proto_bin_run(struct proto_conn *c, const unsigned char *in, size_t len);

#endif
