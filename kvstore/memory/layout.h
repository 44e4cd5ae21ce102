/*
 * layout.h - what lives in the regions: index table entries (ITEs), data table entries (DTEs)
 * and the data region's header. Every node reads these from every other node, so this file is
 * the on-memory (and on-wire, for verbs) format of the cluster; change it only with
 * DATA_LAYOUT_VERSION.
 *
 * Index table entry: one 64-bit word in the INDEX region, changed only by CAS. 0 is empty (a new
 * region is zero-filled, so a new index is empty).
 *
 *   63 62        53 52     47 46                               17 16          7 6        0
 *  +--+-----------+---------+-----------------------------------+-------------+----------+
 *  |P | node (10) |class (6)| DTE offset in the data region / 64|   gen (10)  |filter (7)|
 *  +--+-----------+---------+-----------------------------------+-------------+----------+
 *   P: present (1 = refers to a DTE). node: 1024 nodes. class: the DTE's size class, so a reader
 *   knows the slot size and can read a small entry whole in one READ. offset: 30 bits of 64-byte
 *   units = 64 GiB of data per node. gen: the life of the slot this word names (the slot's reuse
 *   count, modulo 1024; see below). filter: low bits of the key hash (the configured number of
 *   them, default 7; the rest are 0), so most non-matching DTEs are never read (paper 4.3.2).
 *
 *   Lives (issue 14, DESIGN.md "Stalls and reuse"): a slot is reused one expiration period at the
 *   earliest after it was unlinked, so the paper's argument (an ITE value is unique in time)
 *   holds only for threads that never stall longer than that. A thread descheduled, or a verbs
 *   request retransmitted, between its last timer check and its CAS can outlive it; so every ITE
 *   word and every DTE state word carry the slot's generation, bumped on every reuse. A CAS then
 *   names one life of a slot, and an ABA needs a stall across 1024 lives of one slot, each at
 *   least one expiration period long (and free slots are reused oldest first, slab.c).
 *
 * Data table entry: in the DATA region of the node that wrote it (only the owner allocates),
 * at a 64-byte aligned offset, in a slot of its size class.
 *
 *   0       8       16       24       32       40        48      52     56       60   61   62
 *  +-------+-------+--------+--------+--------+---------+-------+------+--------+----+----+--+
 *  | state |qua|acc|prev ITE|version |creator |created  |val len|flags |exptime |klen|kind|F |
 *  +-------+-------+--------+--------+--------+---------+-------+------+--------+----+----+--+
 *  64: key (klen bytes) | value (val len bytes)
 *
 *   state:   gen (bits 16..25, as in the ITE), the owner's own mark time (bits 26..63, see
 *            DTE_MARK_SHIFT) and flags: BUSY (allocated), COMMITTED (the
 *            operation that wrote it finished: for a VALUE it is then valid and readable; a
 *            TOMBSTONE, a DELETE's blank entry, is never readable), ABANDONED (its writer gave
 *            it up: it must never be committed), RECYCLED (unlinked for good: the owner frees it
 *            once its quarantine is over). Changed only by CAS, and every CAS expects the gen:
 *            the writer's last step, an orphan takeover and a recycle mark race on it.
 *   quarant: the end of the slot's quarantine, in ms of the OWNER's CLOCK_MONOTONIC modulo 2^32
 *            (4 bytes; 0 = none), written only by the owner's recycle scan when it first sees
 *            the RECYCLED flag, from the mark time in the state word if the owner made the mark,
 *            else from then. Time that guards reuse is measured on one clock and never compared
 *            across hosts.
 *   access:  (4 bytes, offset 12) the eviction hint (issue 15): when the item was last read and
 *            a logarithmic count of its reads, written by readers with a posted WRITE that
 *            nobody waits for (DTE_ACC_*). A hint only: a late write that lands in a later life
 *            of the slot, or two readers' writes that race, only make one eviction choice worse,
 *            so the word is never part of a CAS or of anything that guards correctness.
 *   prev ITE: the ITE word the writer's CAS replaced (previous versions, paper 4.3.2), or a
 *            duplicate it unlinked; always a version the writer itself unlinked, because a
 *            rollback or an orphan takeover of an ABANDONED entry links it again.
 *   version: the memcached CAS token; its high bits are the write time (see items.c), so it also
 *            orders items against flush_all.
 *   creator: the operation that wrote it (node, incarnation, operation number): a retried PUT may take
 *            over its own earlier attempt's entry (A.1.3 step 2.3).
 *   created: the owner's CLOCK_MONOTONIC ns at the allocation; an orphan takeover waits a grace
 *            period from it, judged against the owner's clock (data_hdr.clock_ns).
 * The header and key can be read without the value (multiple reads, paper 4.3.2).
 */
#ifndef NESSIE_KVSTORE_LAYOUT_H
#define NESSIE_KVSTORE_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include <nessie/nessie.h> /* NESSIE_KEY_MAX */

/* 4: the largest size class holds dte_max_size(max_item_size), pages are no longer rounded up to
 * 64 KiB past it (so a version-3 region's classes differ for the same configuration). */
#define DATA_LAYOUT_VERSION 4

/* --- ITE ------------------------------------------------------------------------------------- */

#define ITE_PRESENT (1ULL << 63)
#define ITE_NODE_SHIFT 53
#define ITE_NODE_BITS 10
#define ITE_CLASS_SHIFT 47
#define ITE_CLASS_BITS 6
#define ITE_OFF_SHIFT 17
#define ITE_OFF_BITS 30
#define ITE_GEN_SHIFT 7
#define ITE_GEN_BITS 10
#define ITE_FILTER_BITS_MAX 7
#define ITE_UNIT 64 /* DTE offsets are in 64-byte units */
#define GEN_MASK ((1u << ITE_GEN_BITS) - 1)

#define ITE_MAX_NODES (1u << ITE_NODE_BITS)
#define ITE_MAX_CLASSES (1u << ITE_CLASS_BITS)
#define ITE_MAX_DATA_BYTES ((uint64_t)ITE_UNIT << ITE_OFF_BITS)
_Static_assert(ITE_NODE_SHIFT + ITE_NODE_BITS == 63 && ITE_CLASS_SHIFT + ITE_CLASS_BITS == ITE_NODE_SHIFT &&
               ITE_OFF_SHIFT + ITE_OFF_BITS == ITE_CLASS_SHIFT &&
               ITE_GEN_SHIFT + ITE_GEN_BITS == ITE_OFF_SHIFT && ITE_FILTER_BITS_MAX == ITE_GEN_SHIFT,
               "ITE fields tile the word");

static inline uint64_t ite_make(uint32_t node, uint32_t cls, uint64_t offset, uint32_t gen,
                                uint32_t filter)
{
    return ITE_PRESENT | ((uint64_t)node << ITE_NODE_SHIFT) | ((uint64_t)cls << ITE_CLASS_SHIFT) |
           ((offset / ITE_UNIT) << ITE_OFF_SHIFT) | ((uint64_t)(gen & GEN_MASK) << ITE_GEN_SHIFT) |
           (uint64_t)filter;
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
static inline uint32_t ite_gen(uint64_t ite)
{
    return (uint32_t)((ite >> ITE_GEN_SHIFT) & GEN_MASK);
}
static inline uint32_t ite_filter(uint64_t ite)
{
    return (uint32_t)(ite & ((1u << ITE_FILTER_BITS_MAX) - 1));
}
/* Class ITE_CLASS_FLASH is never a size class (slab.c makes at most ITE_SIZE_CLASSES): an ITE
 * of it names a record in its node's flash log (flash.h, issue 31), its offset and gen fields
 * together the record's 40-bit location (FLASH_LOC_BITS; flash.c checks the two agree), its
 * filter bits those of the key as any ITE's. The evictor swings a victim's entry to one
 * (memory/evict.c, demote); its node reads it as a committed DTE, others send their calls there
 * (protocol/protocol.c, flash_fetch); the recycle scan and the leak sweep skip it. */
#define ITE_CLASS_FLASH (ITE_MAX_CLASSES - 1)
#define ITE_SIZE_CLASSES ITE_CLASS_FLASH
#define ITE_FLASH_LOC_BITS (ITE_OFF_BITS + ITE_GEN_BITS)
static inline uint64_t ite_make_flash(uint32_t node, uint64_t loc, uint32_t filter)
{
    return ITE_PRESENT | ((uint64_t)node << ITE_NODE_SHIFT) |
           ((uint64_t)ITE_CLASS_FLASH << ITE_CLASS_SHIFT) |
           ((loc & ((1ULL << ITE_FLASH_LOC_BITS) - 1)) << ITE_GEN_SHIFT) | (uint64_t)filter;
}
static inline bool ite_is_flash(uint64_t ite)
{
    return !ite_empty(ite) && ite_class(ite) == ITE_CLASS_FLASH;
}
static inline uint64_t ite_flash_loc(uint64_t ite)
{
    return (ite >> ITE_GEN_SHIFT) & ((1ULL << ITE_FLASH_LOC_BITS) - 1);
}

/* Whether two words name the same life of the same slot (their filter bits aside: a DTE's
 * prev ITE and the words the leak sweep builds carry none). */
static inline bool ite_same_entry(uint64_t a, uint64_t b)
{
    const uint64_t filter = (1u << ITE_FILTER_BITS_MAX) - 1;
    return (a & ~filter) == (b & ~filter);
}

/* --- DTE ------------------------------------------------------------------------------------- */

#define DTE_BUSY (1ULL << 0)      /* allocated */
#define DTE_COMMITTED (1ULL << 1) /* its operation finished (by its writer or a takeover) */
#define DTE_ABANDONED (1ULL << 2) /* its writer gave it up: it will never be committed */
#define DTE_RECYCLED (1ULL << 3)  /* unlinked for good: freed after its quarantine */
#define DTE_FLAGS_MASK 0xFFFFULL  /* all flags; a free slot has none (its gen stays) */
#define DTE_GEN_SHIFT 16
/* A mark made by the owner itself carries its time (owner's CLOCK_MONOTONIC ms + 1) above the
 * gen, set by the same CAS as RECYCLED, so the quarantine can start at the mark; 0: a peer's
 * mark, whose quarantine starts when the owner's scan first sees it. */
#define DTE_MARK_SHIFT 26

static inline uint64_t dte_marked_ms(uint64_t state) { return state >> DTE_MARK_SHIFT; }

static inline uint32_t dte_gen(uint64_t state) { return (uint32_t)(state >> DTE_GEN_SHIFT) & GEN_MASK; }
static inline uint64_t dte_state(uint32_t gen, uint64_t flags)
{
    return ((uint64_t)(gen & GEN_MASK) << DTE_GEN_SHIFT) | flags;
}

/* A MIGRATE's copy: its previous version is its source, which stays in the index until the
 * migration ends, so undoing the copy empties its ITE instead of restoring the source there. */
#define DTE_F_COPY 0x01
/* An add's entry: its condition (the key absent) was judged at its candidate only, and a live
 * duplicate behind it is found by its step 4, which an orphan never ran; so a takeover undoes an
 * orphaned add instead of committing it (protocol/protocol.c, proto_takeover). */
#define DTE_F_ADD 0x02
/* A value this owner holds for a full peer's client (modes/place.c, issue 29): counted apart by
 * the recycle scan, for the stats; it means nothing to the protocol. A MIGRATE's copy keeps it,
 * although the copy lands in the migrating node's region: the stat is approximate. */
#define DTE_F_PLACED 0x04
/* The item's NESSIE_META_* bits (memcached's stale-while-revalidate, a base64 key), shifted
 * by DTE_F_META_SHIFT. A MIGRATE's copy and a move keep them, as a touch does. */
#define DTE_F_META_SHIFT 3
#define DTE_F_META (0x7 << DTE_F_META_SHIFT)

enum dte_kind {
    DTE_KIND_VALUE = 1,
    DTE_KIND_TOMBSTONE = 2,
};

struct dte_hdr {
    uint64_t state;
    uint32_t quarantine_ms;
    uint32_t access;  /* DTE_ACC_*: eviction hint */
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
#define DTE_OFF_QUARANTINE 8
#define DTE_OFF_ACCESS 12

/* The access word: the time of the last read recorded (bits 8..31, in units of 2^26 ns, about
 * 67 ms, of the READER's CLOCK_REALTIME, modulo 2^24: 13 days), whether any read was recorded
 * (bit 7), and a logarithmic read count (bits 0..6, incremented with probability falling as it
 * grows, and decayed with idle time: Redis's LFU counter). Hosts' clocks only need to agree
 * roughly: the hint orders victims, it guards nothing. */
#define DTE_ACC_COUNT_MASK 0x7Fu
#define DTE_ACC_FETCHED 0x80u
#define DTE_ACC_TIME_SHIFT 8
#define DTE_ACC_TICK_SHIFT 26 /* ns per tick: 2^26 */
#define DTE_ACC_TIME_MASK 0xFFFFFFu
static inline uint32_t dte_acc_count(uint32_t a) { return a & DTE_ACC_COUNT_MASK; }
static inline uint32_t dte_acc_time(uint32_t a) { return a >> DTE_ACC_TIME_SHIFT; }
static inline uint32_t dte_acc_make(uint32_t tick, uint32_t count, bool fetched)
{
    return ((tick & DTE_ACC_TIME_MASK) << DTE_ACC_TIME_SHIFT) | (fetched ? DTE_ACC_FETCHED : 0) |
           (count & DTE_ACC_COUNT_MASK);
}
static inline bool dte_readable(const struct dte_hdr *h)
{
    return (h->state & DTE_COMMITTED) && h->kind == DTE_KIND_VALUE;
}

/* Bytes a DTE needs: header, key, value. */
static inline uint64_t dte_size(uint32_t key_len, uint32_t value_len)
{
    return (uint64_t)DTE_HDR_SIZE + key_len + value_len;
}

/*
 * An item's size as max_item_size limits it: memcached's count (its 48-byte header, the CAS, the
 * key's NUL and the value's CRLF: 59 bytes; 4 more when the flags are not 0), so that exactly the
 * items memcached -I takes fit (measured, memcached 1.6.18 at -I 1m: value + key + 59, or + 63
 * with flags, up to 1048576). A DTE's own header is larger, so the largest DTE is
 * dte_max_size(max_item_size), a few bytes past it: the slab's largest class holds it.
 */
#define MC_ITEM_OVERHEAD 59
#define MC_ITEM_FLAGS_BYTES 4
_Static_assert(DTE_HDR_SIZE >= MC_ITEM_OVERHEAD, "a DTE is never smaller than memcached's item");

static inline uint64_t mc_item_size(uint32_t key_len, uint64_t value_len, uint32_t flags)
{
    return MC_ITEM_OVERHEAD + (flags ? MC_ITEM_FLAGS_BYTES : 0) + (uint64_t)key_len + value_len;
}

static inline uint64_t dte_max_size(uint64_t max_item)
{
    return max_item - MC_ITEM_OVERHEAD + DTE_HDR_SIZE;
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
    uint64_t clock_ns;       /* the owner's CLOCK_MONOTONIC, published now and then: the clock
                                its DTEs' created_ns are on (orphan ages are judged on it) */
    uint32_t class_size[ITE_MAX_CLASSES];
    /* A delayed flush_all (`flush_all N`): from this CLOCK_REALTIME (ns) on, items with version
     * time <= it are gone; 0 = none pending. After the header's other words, so a region
     * formatted before it (zeros there) reads as none: no layout version change. */
    uint64_t flush_at_ns;
    /* Room (issue 29, modes/place.c): what a writer on another node reads, in one READ of
     * DATA_HDR_ROOM_BYTES at DATA_HDR_OFF_ROOM, to decide whether to place a value here when its
     * own node is full. Written by the owner only, with relaxed stores; a hint: a stale figure
     * places a value or two worse, never wrongly (the value is written by this owner, through the
     * protocol, like any shipped write). After flush_at_ns, so a region formatted before reads
     * as no figure (zeros): no layout version change. */
    uint64_t room_spare_pages; /* unassigned pages a value may still take (slab.c) */
    /* CLOCK_REALTIME ms of the last read (or the write) of the items this node evicted lately
     * (smoothed, evict.c): the older, the colder what this node gives up for a new value. 0: it
     * has not evicted. Realtime, as the access hints are: peers compare it with theirs. */
    uint64_t room_victim_ms;
    /* Bit c: size class c has free slots well beyond what this node's evictor keeps ready for
     * its own writers (evict.c), so a value of that class takes one without an eviction, spare
     * pages or not (a node whose pages are all assigned may have emptied many: deletes, expiry,
     * flush_all). Written by the evictor only; 0 until it has run (a restart keeps the last). */
    uint64_t room_classes;
};
_Static_assert(sizeof(struct data_hdr) <= DATA_HDR_BYTES, "data header fits its page");

#define DATA_HDR_OFF_FLUSH ((uint64_t)__builtin_offsetof(struct data_hdr, flush_ns))
#define DATA_HDR_OFF_CLOCK ((uint64_t)__builtin_offsetof(struct data_hdr, clock_ns))
#define DATA_HDR_OFF_FLUSH_AT ((uint64_t)__builtin_offsetof(struct data_hdr, flush_at_ns))
#define DATA_HDR_OFF_ROOM ((uint64_t)__builtin_offsetof(struct data_hdr, room_spare_pages))
#define DATA_HDR_ROOM_BYTES 24
_Static_assert(__builtin_offsetof(struct data_hdr, room_victim_ms) == DATA_HDR_OFF_ROOM + 8 &&
               __builtin_offsetof(struct data_hdr, room_classes) == DATA_HDR_OFF_ROOM + 16,
               "the room figures are one READ");
_Static_assert(ITE_MAX_CLASSES <= 64, "a class is a bit of room_classes");

/* --- the MSG region: server-driven requests and replies (kvstore/modes/sd.c, issue 16) -------------- */

/*
 * A node's MSG region holds, after a reserved header page, nodes x sd_slots request slots (slot
 * (r, s) is written only by node r: its ring of requests to this node) and then nodes x sd_slots
 * reply slots (slot (h, s) is written only by node h: its replies to this node's requests in its
 * ring slot s). Every slot is MSG_SLOT_BYTES(cfg) long and holds one message: a 64-byte header,
 * the payload, and at the next 8-byte boundary the header's seq again (the trailer).
 *
 * A message arrives with one WRITE, whose bytes may land in any order (verbs promises no order
 * within a WRITE; neither does memcpy between processes), so a reader takes it only when the
 * header's seq and incarnation are new, the trailer repeats the seq, the checksum (gzip's CRC-32
 * over the header with crc = 0, then the payload) matches, and the header's seq still reads the
 * same after the copy. Within one life of the requester the seq only grows, so a request
 * written again (a replay) is recognized as old. Who runs a request is settled by its take-up
 * word (struct sd_req, ctl), never by which bytes landed.
 */
#define MSG_HDR_BYTES 4096 /* what a home node publishes about its servers (struct msg_hdr) */
#define MSG_INLINE_MAX (1u << 20) /* largest payload a slot carries (the slot grows no further) */

/*
 * The rings' wire version, folded into every message's checksum (as the CRC's seed), so that a
 * peer of another version finds each of this version's messages torn and drops it (its requester
 * withdraws the call and runs it itself, or times out) instead of running it under other rules.
 * 2 (issue 26): a request carries its take-up word (ctl) and its requester's remaining budget;
 * the take-up word is left out of the checksum, since it changes after the request was written.
 * 3 (issue 29): a store's sub may carry SD_SUB_PLACED, which a version-2 server would refuse.
 * 4 (issue 32): a delete's arg and an arith's cas carry a CAS token, which a version-3 server
 * would ignore (deleting or changing an item the caller meant to leave alone); a get's reply
 * carries the item's access word.
 * 5 (issue 32): a store's arg2 carries meta bits, a delete's and a touch's sub an invalidation
 * and a token (memcached's meta protocol), a get's reply the item's meta bits: a version-4
 * server would run an invalidation as a delete and a token as a touch.
 */
#define MSG_WIRE_VERSION 5

/* At offset 0 of every MSG region, written by its node only. */
struct msg_hdr {
    /* The node's SD servers' heartbeat: their CLOCK_MONOTONIC ns at a recent pass over the rings
     * (stored at most once a millisecond). Peers only ask whether it changed between two of
     * their reads, never compare it with their own clock: a value that stands still means no
     * server is looking at the rings (none running, or all stalled inside calls). */
    uint64_t sd_beat;
    uint64_t beat_line[7]; /* the rest of sd_beat's cache line, which only the node writes */
    /* The SD servers' doorbell (a struct fab_bell, fabric.h): they sleep on it between passes
     * that found nothing (nessie_sd_nap), and a requester rings it once its request landed. The
     * one part of the header peers write. */
    uint32_t sd_bell[2];
};
_Static_assert(sizeof(struct msg_hdr) <= MSG_HDR_BYTES, "MSG header fits its page");
#define MSG_HDR_OFF_BEAT ((uint64_t)__builtin_offsetof(struct msg_hdr, sd_beat))
#define MSG_HDR_OFF_BELL ((uint64_t)__builtin_offsetof(struct msg_hdr, sd_bell))

enum sd_op { SD_OP_GET = 1, SD_OP_STORE, SD_OP_DELETE, SD_OP_ARITH, SD_OP_TOUCH, SD_OP_END };
/* In a store's sub (its enum nessie_store_mode): the value is placed on this node for room, not
 * shipped to its key's home (modes/place.c, issue 29); run the same way, counted apart. */
#define SD_SUB_PLACED 0x80
/* In a delete's sub: an invalidation (nessie_invalidate), with its new expiry if SD_SUB_EXPTIME;
 * in a touch's: a token taken (nessie_token_take, the version in arg). */
#define SD_SUB_INVALIDATE 0x1
#define SD_SUB_EXPTIME 0x2
#define SD_SUB_TOKEN 0x1

struct sd_req {
    uint64_t seq;         /* this slot's request count in the requester's life (from 1) */
    uint32_t incarnation; /* the requester's life: random, drawn at every start (modes/sd.c) */
    uint32_t crc;
    uint8_t op;           /* enum sd_op */
    uint8_t sub;          /* store: enum nessie_store_mode; arith: 1 incr, 0 decr */
    uint8_t key_len;
    uint8_t version;      /* MSG_WIRE_VERSION (for the logs: the checksum is what enforces it) */
    uint32_t value_len;
    uint32_t flags;
    /* The requester's budget left when it posted the request (us, at least 1): the home node
     * adds it to its own clock when it first sees the request, and neither starts nor runs the
     * call past that (clocks of two hosts are never compared; only a duration travels). */
    uint32_t budget_us;
    int64_t exptime;      /* as the client gave it: the home node makes it absolute */
    uint64_t arg;         /* store, delete: the CAS token (0: none); arith: the delta */
    /* The take-up word: sd_ctl(state, incarnation, seq). Written SD_CTL_POSTED with the request;
     * after that changed only by CAS (through the fabric, on the home node too): a server takes
     * the request up (POSTED -> TAKEN) before it runs it, a requester that waited too long
     * withdraws it (POSTED -> WITHDRAWN) and runs the call itself. Exactly one of the two wins. */
    uint64_t ctl;
    uint64_t arg2;        /* arith: the CAS token (0: none); store: NESSIE_META_* bits */
};                        /* then key, value, trailer */
_Static_assert(sizeof(struct sd_req) == 64, "request header is one cache line");
#define SD_REQ_OFF_CTL ((uint64_t)__builtin_offsetof(struct sd_req, ctl))

#define SD_CTL_POSTED 1ULL
#define SD_CTL_TAKEN 2ULL
#define SD_CTL_WITHDRAWN 3ULL
#define SD_CTL_STATE_SHIFT 62
#define SD_CTL_TAG_MASK ((1ULL << SD_CTL_STATE_SHIFT) - 1)
/* The word for one request in one state: its seq's low 48 bits and 14 bits of its requester's
 * life name it, so a late CAS aimed at an earlier request of the slot never matches. */
static inline uint64_t sd_ctl(uint64_t state, uint32_t incarnation, uint64_t seq)
{
    return (state << SD_CTL_STATE_SHIFT) | ((uint64_t)(incarnation & 0x3FFF) << 48) |
           (seq & 0xFFFFFFFFFFFFULL);
}
static inline uint64_t sd_ctl_state(uint64_t ctl) { return ctl >> SD_CTL_STATE_SHIFT; }

/* A reply's status beyond enum nessie_status: the value does not fit a slot (the requester then
 * reads it itself, client-driven). */
#define SD_STATUS_TOO_LARGE 255
/* The request was taken up when its budget was already spent: not run, and never will be (the
 * requester may run it itself if its own budget allows). */
#define SD_STATUS_EXPIRED 254

struct sd_rep {
    uint64_t seq;         /* the request's */
    uint32_t incarnation; /* the request's */
    uint32_t crc;
    uint32_t status;      /* enum nessie_status, or SD_STATUS_TOO_LARGE */
    uint32_t value_len;
    uint32_t flags;
    uint32_t exptime;
    uint64_t version;
    uint64_t num;         /* arith: the new value */
    uint32_t access;      /* get: the item's access word as read (nessie_item.access) */
    uint32_t meta;        /* get: the item's NESSIE_META_* bits */
    uint64_t pad;
};                        /* then value, trailer */
_Static_assert(sizeof(struct sd_rep) == 64, "reply header is one cache line");

static inline uint64_t msg_round8(uint64_t n) { return (n + 7) & ~7ULL; }
/* Bytes of one slot for a cluster whose items are at most max_item bytes. */
static inline uint64_t msg_slot_bytes(uint32_t max_item)
{
    uint64_t payload = max_item < MSG_INLINE_MAX ? max_item : MSG_INLINE_MAX;
    return (64 + payload + 8 + 63) & ~63ULL;
}
static inline uint64_t msg_region_bytes(uint32_t nodes, uint32_t slots, uint32_t max_item)
{
    return MSG_HDR_BYTES + 2ULL * nodes * slots * msg_slot_bytes(max_item);
}

#endif
