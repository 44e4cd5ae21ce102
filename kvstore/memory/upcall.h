/*
 * upcall.h - what the memory room asks of the rooms above it. The rooms' dependencies point down
 * (tests/integration/rooms.sh), but a few things memory decides must be carried out by a room
 * that knows more: the evictor chooses a victim here and removes it through the protocol's
 * DELETE path, so that the removal is linearizable with every other call on its key, or swings
 * its entry to the flash record it demoted it to (and a dropped flash page's entries to nothing)
 * with the protocol's CAS on the exact word. Each such
 * need is declared here, in memory's terms, and implemented above (the file is named at each);
 * memory never includes a header of a room above it.
 */
#ifndef NESSIE_KVSTORE_UPCALL_H
#define NESSIE_KVSTORE_UPCALL_H

#include <stddef.h>
#include <stdint.h>

#include "memory.h"

/* Remove the key kp plans if its first entry in the index is exactly ite: the DELETE path of
 * A.1.5, as an eviction (implemented by protocol/write.c). Returns NESSIE_OK (removed), NESSIE_NOT_FOUND or
 * NESSIE_EXISTS (changed, or in use: no effect), NESSIE_TIMEOUT (unknown), or another error (no
 * effect): NESSIE_FABRIC_ERROR among them when the node's view lease ran out and was not renewed
 * within the call's budget (it waits for the renewal as every call does, touching nothing). */
int nessie_evict_entry(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t ite);

/* Swing the entry of the key kp plans that is exactly `from` (at whichever of its positions
 * holds it) to `to`, by one CAS: the flash tier's demotion of an evictor's victim to its record
 * (to: the flash entry), compaction's move of a record to its copy (to: the copy's entry), and
 * the drop of a flash item whose page goes (to: 0). The value is the same either side of a
 * demotion or a move, so a reader meets the one or the other, both valid, and a
 * writer that read `from` loses its CAS and starts again (implemented by protocol/migrate.c,
 * beside proto_take_back). Never writes a DTE, never waits for memory, recycles nothing.
 * Returns NESSIE_OK (swung), NESSIE_NOT_FOUND (no position holds `from`: changed since),
 * NESSIE_EXISTS (changed under the CAS; or, to nothing, refused: another entry that may be the
 * key's stands in its positions, which only the DELETE path clears), NESSIE_TIMEOUT (unknown:
 * the CAS's answer was lost, and the entry could not be read again or a copy of the key appeared
 * beside it), or
 * another error (no effect), the view's lease obeyed as nessie_evict_entry obeys it. */
int nessie_swing_entry(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t from,
                       uint64_t to);

#endif
