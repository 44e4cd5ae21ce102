/*
 * demote.h - the index's traffic with the flash log (issue 31): an evictor's victim demoted to
 * it, its full log's oldest page dropped, its sparse pages compacted. Part of the memory room;
 * every change of an index entry goes through the protocol's CAS on the exact word (upcall.h).
 */
#ifndef NESSIE_KVSTORE_DEMOTE_H
#define NESSIE_KVSTORE_DEMOTE_H

#include <stdbool.h>
#include <stdint.h>

#include "memory.h"

/* Demote the item of ITE ite (its key's plan kp), whose DTE at data offset `off` has header h,
 * to the node's flash log: its record appended (a sparse page compacted, or the oldest page
 * dropped, first when the log needs room), its entry swung to the record by CAS on the exact
 * word, its slot recycled as an eviction's. Returns NESSIE_OK (on flash now); NESSIE_NOT_FOUND,
 * NESSIE_EXISTS or NESSIE_TIMEOUT (the entry changed, or the CAS's answer was lost: not an
 * eviction either, the item is left alone); NESSIE_NO_MEMORY when the log refused it (an I/O
 * error, no page it could free): the caller evicts it as before. Never called without a log. */
int demote_item(struct nessie_ctx *ctx, const struct key_plan *kp, uint64_t ite, uint64_t off,
                const struct dte_hdr *h);

/* Compact the sparsest full page of the node's log if at most max_live_pct % of it is live:
 * each live record copied to the log's head (flash_rewrite) and its entry swung there by CAS
 * on the exact word; the page freed once no entry can name one of its records. A record whose
 * entry changed meanwhile (rewritten, deleted, dropped) is not moved, and its copy unlinked.
 * Returns true if a page was freed; false when none is sparse enough, another compaction runs,
 * or the page had to be kept (the log had no room for a copy, a swing's answer was lost): its
 * moved records stay moved, and the next compaction picks it up again. */
bool demote_compact(struct nessie_ctx *ctx, uint32_t max_live_pct);

/* A GET read the flash item of ITE ite (this node's log) and will answer with it: whether the
 * item should be brought back into memory now (promoted: protocol/get.c), because the same
 * record was read before within [flash] promote_ms. Records this read either way. Never fails;
 * false when promotion is off (promote_ms 0) or eviction is (a promotion would take a writer's
 * room for good). */
bool demote_promote_wanted(struct nessie_node *nd, uint64_t ite);

#endif
