/*
 * upcall.h - what the memory room asks of the rooms above it. The rooms' dependencies point down
 * (tests/integration/rooms.sh), but a few things memory decides must be carried out by a room
 * that knows more: the evictor chooses a victim here and removes it through the protocol's
 * DELETE path, so that the removal is linearizable with every other call on its key. Each such
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

#endif
