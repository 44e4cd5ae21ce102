/*
 * layout.h - what lives in the regions: index table entries (ITEs), data table entries (DTEs)
 * and the data region's header. Every node reads these from every other node, so this file is
 * the on-memory (and on-wire, for verbs) format of the cluster; change it only with
 * DATA_LAYOUT_VERSION.
 *
 * Index table entry: one 64-bit word in the INDEX region, changed only by CAS. 0 is empty (a new
 * region is zero-filled, so a new index is empty).
 *
 *   63 62          51 50     45 44                                   13 12            0
 *  +--+-------------+---------+---------------------------------------+---------------+
 *  |P |  node (12)  |class (6)|   DTE offset in the data region / 64  | filter (13)   |
 *  +--+-------------+---------+---------------------------------------+---------------+
 *   P: present (1 = refers to a DTE). node: 4096 nodes. class: the DTE's size class, so a reader
 *   knows the slot size and can read a small entry whole in one READ. offset: 32 bits of 64-byte
 *   units = 256 GiB of data per node. filter: low bits of the key hash (the configured number of
 *   them, default 7; the rest are 0), so most non-matching DTEs are never read (paper 4.3.2).
 *
 *   An ITE word names one DTE, and a DTE is never reused within an expiration period of being
 *   unlinked, so an ITE value is unique in time: re-reading an ITE and finding the same word means
 *   nothing happened to it (no ABA, paper 4.3.1), and it can key the local cache.
 *
 * Data table entry: in the DATA region of the node that wrote it (only the owner allocates),
 * at a 64-byte aligned offset, in a slot of its size class.
 *
 *   0       8       16       24       32       40        48      52     56       60   61   62
 *  +-------+-------+--------+--------+--------+---------+-------+------+--------+----+----+--+
 *  | state |recycle|prev ITE|version |creator |created  |val len|flags |exptime |klen|kind|F |
 *  +-------+-------+--------+--------+--------+---------+-------+------+--------+----+----+--+
 *  64: key (klen bytes) | value (val len bytes)
 *
 *   state:   BUSY (allocated), COMMITTED (the operation that wrote it finished: for a VALUE it
 *            is then valid and readable; a TOMBSTONE, a DELETE's blank entry, is never readable),
 *            ABANDONED (its writer retried with another entry: it must never be committed).
 *            Changed only by CAS: the writer's final step and an orphan takeover race on it.
 *   recycle: RECYCLED bit + expiry (ms, CLOCK_REALTIME) in one word, so the bit can never be seen
 *            with half a timestamp (paper A.1.3 step 7 orders the bytes for the same reason).
 *            Written by whoever unlinked the DTE; read by the owner's recycler.
 *   prev ITE: the ITE word the writer's CAS replaced (previous versions, paper 4.3.2).
 *   version: the memcached CAS token; its high bits are the write time (see engine.c), so it also
 *            orders items against flush_all.
 *   creator: the operation that wrote it (node, context, operation number): a retried PUT may take
 *            over its own earlier attempt's entry (A.1.3 step 2.3).
 *   created: CLOCK_REALTIME ns of the allocation; orphan takeover waits a grace period from it.
 * The header and key can be read without the value (multiple reads, paper 4.3.2).
 */
#ifndef NESSIE_KVSTORE_LAYOUT_H
#define NESSIE_KVSTORE_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#define DATA_LAYOUT_VERSION 1

/* --- ITE ------------------------------------------------------------------------------------- */

#define ITE_PRESENT (1ULL << 63)
#define ITE_NODE_SHIFT 51
#define ITE_NODE_BITS 12
#define ITE_CLASS_SHIFT 45
#define ITE_CLASS_BITS 6
#define ITE_OFF_SHIFT 13
#define ITE_OFF_BITS 32
#define ITE_FILTER_BITS_MAX 13
#define ITE_UNIT 64 /* DTE offsets are in 64-byte units */

#define ITE_MAX_NODES (1u << ITE_NODE_BITS)
#define ITE_MAX_CLASSES (1u << ITE_CLASS_BITS)
#define ITE_MAX_DATA_BYTES ((uint64_t)ITE_UNIT << ITE_OFF_BITS)

static inline uint64_t ite_make(uint32_t node, uint32_t cls, uint64_t offset, uint32_t filter)
{
    return ITE_PRESENT | ((uint64_t)node << ITE_NODE_SHIFT) | ((uint64_t)cls << ITE_CLASS_SHIFT) |
           ((offset / ITE_UNIT) << ITE_OFF_SHIFT) | (uint64_t)filter;
}
static inline bool ite_empty(uint64_t ite) { return ite == 0; }
static inline uint32_t ite_node(uint64_t ite)
{
    return (uint32_t)((ite >> ITE_NODE_SHIFT) & ((1u << ITE_NODE_BITS) - 1));
}
static inline uint32_t ite_class(uint64_t ite)
{
    return (uint32_t)((ite >> ITE_CLASS_SHIFT) & ((1u << ITE_CLASS_BITS) - 1));
}
static inline uint64_t ite_offset(uint64_t ite)
{
    return ((ite >> ITE_OFF_SHIFT) & ((1ULL << ITE_OFF_BITS) - 1)) * ITE_UNIT;
}
static inline uint32_t ite_filter(uint64_t ite)
{
    return (uint32_t)(ite & ((1u << ITE_FILTER_BITS_MAX) - 1));
}

/* --- DTE ------------------------------------------------------------------------------------- */

#define DTE_BUSY (1ULL << 0)      /* allocated */
#define DTE_COMMITTED (1ULL << 1) /* its operation finished (by its writer or a takeover) */
#define DTE_ABANDONED (1ULL << 2) /* its writer gave it up: it will never be committed */
#define DTE_RECYCLED (1ULL << 63)
#define DTE_RECYCLE_MS_MASK ((1ULL << 48) - 1)

/* A MIGRATE's copy: its previous version is its source, which stays in the index until the
 * migration ends, so undoing the copy empties its ITE instead of restoring the source there. */
#define DTE_F_COPY 0x01

enum dte_kind {
    DTE_KIND_VALUE = 1,
    DTE_KIND_TOMBSTONE = 2,
};

struct dte_hdr {
    uint64_t state;
    uint64_t recycle;
    uint64_t prev_ite;
    uint64_t version;
    uint64_t creator;
    uint64_t created_ns;
    uint32_t value_len;
    uint32_t flags;
    uint32_t exptime; /* absolute Unix seconds; 0 = never */
    uint8_t key_len;
    uint8_t kind;
    uint8_t flags8;  /* DTE_F_* */
    uint8_t pad;
};
_Static_assert(sizeof(struct dte_hdr) == 64, "DTE header is one cache line, 8-byte words first");

#define DTE_HDR_SIZE ((uint32_t)sizeof(struct dte_hdr))
#define DTE_OFF_STATE 0
#define DTE_OFF_RECYCLE 8
#define NESSIE_KEY_MAX 250

static inline bool dte_readable(const struct dte_hdr *h)
{
    return (h->state & DTE_COMMITTED) && h->kind == DTE_KIND_VALUE;
}

/* Bytes a DTE needs: header, key, value. */
static inline uint64_t dte_size(uint32_t key_len, uint32_t value_len)
{
    return (uint64_t)DTE_HDR_SIZE + key_len + value_len;
}

/* --- the data region's header ---------------------------------------------------------------- */

#define DATA_MAGIC 0x4e45535349454454ULL /* "NESSIEDT" */
#define DATA_HDR_BYTES 4096               /* struct data_hdr, padded */
#define DATA_PAGE_UNASSIGNED 0xFF

/*
 * At offset 0 of every node's DATA region. The page table (one byte per page: its size class, or
 * DATA_PAGE_UNASSIGNED) follows at DATA_HDR_BYTES; pages start at data_hdr.pages_offset.
 * Written by the owner, except flush_ns, which any node raises (CAS) when it flushes the cluster.
 */
struct data_hdr {
    uint64_t magic;          /* written last when formatting: a region without it is unformatted */
    uint32_t layout_version;
    uint32_t class_count;
    uint64_t region_bytes;
    uint64_t page_bytes;
    uint64_t page_count;
    uint64_t pages_offset;
    uint64_t max_item_size;
    uint64_t last_version;   /* owner's CAS-token clock (atomic), survives restarts */
    uint64_t flush_ns;       /* items with version time <= this are gone (flush_all) */
    uint64_t incarnation;    /* bumped at every (re)start of the owner */
    uint32_t class_size[ITE_MAX_CLASSES];
};
_Static_assert(sizeof(struct data_hdr) <= DATA_HDR_BYTES, "data header fits its page");

#define DATA_HDR_OFF_FLUSH ((uint64_t)__builtin_offsetof(struct data_hdr, flush_ns))

#endif
