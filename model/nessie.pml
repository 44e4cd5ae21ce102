/*
 * nessie.pml - a SPIN model of the Nessie key-value protocol as kvstore/ implements it
 * (thesis Appendix A.1; kvstore/protocol/protocol.c, memory/recycle.c, memory/slab.c, memory/layout.h).
 *
 * Two designs behind one compile-time switch:
 *   -DOLD_DESIGN   today's code: ITE words and DTE state words name a slot, not a life of it;
 *                  LIFO free lists; mark_recycled is a blind WRITE; rollback_mine abandons
 *                  BUSY->ABANDONED on whatever life the slot holds; a fabric error after the
 *                  candidate CAS ends the call with FABRIC_ERROR and leaves the entry linked.
 *   (default)      the NEW design: every ITE word and every DTE state word carry the slot's
 *                  generation, every CAS names one life, recycle marks are CASes naming a life,
 *                  readers retry on a generation mismatch, FIFO free lists, honest outcomes
 *                  (a published entry is abandoned before FABRIC_ERROR is returned).
 *
 * The NEW design as the brief states it is not enough: the model adds seven refinements (see
 * new-design-findings.md, N1..N7). Each can be switched off to reproduce its trail:
 *   -DNAIVE_ABANDON          N1 a failed abandon CAS read as "not applied"
 *   -DREREAD_FREES           N2 "the re-read ITE does not hold my entry" read as "my CAS did not run"
 *   -DROLLBACK_RECYCLES_PREV N3 rollback recycles prev when the ITE does not hold it
 *   -DMEMWAIT_NOMEM          N4 finish(): NO_MEMORY after a memory wait, even with an entry linked
 *   -DCOMMIT_FAIL_INVALID    N5 a failed commit CAS read as INVALID ("cannot happen")
 *   -DSTEP4_CLEARS_BUSY      N6 step 4 unlinks a duplicate that is in progress
 *   -DSTEP4_PREV_UNRESOLVED  N7 prev adopted from a duplicate whose unlink did not (surely) run
 * Other switches: -DGENS=n (generations per slot), -DNO_LOST_COMPLETION (a CAS with a fabric
 * error never ran), -DNO_PREVOK (drop the PREVOK invariant, to follow a trail further),
 * -DHUNT_C (all checks off but the two hole-c assertions; with hunt_c.never).
 * Issue 26 (time-findings.md): -DTIMED (calls bounded in time; EXT, FAB, -DOLD_GRACE), and
 * today's behaviour for its findings: -DBUG_MIGRATE_NO_STEP0 (1), -DOLD_LIFE_RETRY (2: "my entry
 * is in another life" read as "never took effect"; lost_track's NO_MEMORY),
 * -DBUG_TTL_ADOPT_DEAD (7), -DBUG_TTL_LATE_DEAD (7b).
 *
 * Scenarios (-DSCEN=n) choose the initial index, the clients' scripts and the fault budget; see
 * the SCENARIOS section at the end and README.md.
 *
 * What is abstracted away (and why it does not matter for the properties checked):
 *   - values, keys and the filter bits are small numbers; an ITE word is
 *     1 + slot + NS*(key + 2*generation); in the OLD design the generation part is a ghost that
 *     no comparison looks at (the real 64-bit word has no generation: same slot + same key ==
 *     same word, which is exactly the ABA of hole b).
 *   - a DTE is read in one atomic step (header, key and value): entries are written before they
 *     are linked and their state word changes only by CAS, so a torn read can only mix a
 *     header with a body of another life, which the quarantine is there to prevent; the model
 *     instead checks the quarantine itself (a slot that was ever linked never skips it).
 *   - time: a global epoch advanced by the clock process; one epoch == one expiration period E.
 *     Step 0 of an attempt started at epoch t fails once epoch >= t+1. A recycled slot is
 *     reusable once epoch >= mark+1. The call budget (op_timeout) is OPT epochs, the orphan
 *     grace GRACE epochs from the entry's creation (engine.c: op_timeout + 2E; the brief's 2).
 *     Because the clock may tick between any two steps, every gap between a timer check and the
 *     CAS after it is a potential stall past E: no explicit STALL step is needed.
 *   - back-off, the cache, multi-reads, flush_all, the background staging of recycle marks;
 *     MIGRATE only in scenario 7 (its own key positions; depth 0), TTL only in scenario 9.
 *   - n = 2 ways: the reverse pass re-reads I_1 only (protocol.c reverse_pass: I_{n-1}..I_1).
 */

/* ---------------------------------------------------------------------------------------- */
/* bounds                                                                                     */
/* ---------------------------------------------------------------------------------------- */
#ifndef SCEN
#define SCEN 1
#endif
/* per-scenario defaults (any of them can be overridden with -D) */
#if SCEN == 2 || SCEN == 3 || SCEN == 5 || SCEN == 6
#ifndef MAXF
#define MAXF 0
#endif
#ifndef MAXC
#define MAXC 0
#endif
#endif
#if SCEN == 3
#ifndef MAXE
#define MAXE 1
#endif
#endif
#if SCEN == 7 || SCEN == 9
#ifndef MAXF
#define MAXF 0
#endif
#endif
#if SCEN == 9
#ifndef MAXC
#define MAXC 0
#endif
#endif
#if SCEN == 7 && !defined(TIMED)
#ifndef MAXC            /* a crash after step 7 of a stalled migrator is the residual hole */
#define MAXC 0
#endif
#endif
#if SCEN == 8
/* the memory-wait extension: calls are bounded in time (TIMED), the clock starts at epoch 1 */
#define TIMED
#ifndef MAXF
#define MAXF 0
#endif
#ifndef MAXC
#define MAXC 0
#endif
#ifndef MAXE
#define MAXE 5
#endif
#ifndef MAXATT
#define MAXATT 4
#endif
#endif
#ifndef MAXE            /* the clock stops at this epoch */
#define MAXE 2
#endif
#ifndef MAXF            /* fabric errors per run */
#define MAXF 1
#endif
#ifndef MAXC            /* client crashes per run */
#define MAXC 1
#endif
#ifndef MAXATT          /* attempts per call (bounds the back-off loop; the deadline is OPT) */
#define MAXATT 3
#endif
#ifndef OPT             /* call budget, in epochs (op_timeout_ms: at least E; the default, 1 s, is 10 E) */
#define OPT 1
#endif
#ifdef TIMED
/* TIMED: every call acts only within its bound (the clock waits for it): its budget, OPT
 * epochs, plus EXT once it has waited for memory (write.c proto_memory_short: 3 E + 500 ms),
 * plus the epoch its last attempt (and the fabric's longest request) may run into. So a call
 * started at epoch t acts at epochs <= t + OPT (+ EXT); L = OPT (+ EXT) + 1 periods. */
#ifndef EXT
#define EXT 4
#endif
#ifndef FAB             /* the fabric's longest request beyond the last attempt, in epochs */
#define FAB 0
#endif
#ifndef GRACE
#ifdef OLD_GRACE
#define GRACE (OPT + 2)         /* engine.c today: op_timeout + 2 E, blind to the extension */
#else
#define GRACE (OPT + EXT + FAB + 2)   /* the new rule: grace = L + E */
#endif
#endif
#endif
#ifndef GRACE           /* orphan grace, in epochs */
#define GRACE 2
#endif
#ifndef TICKFROM        /* the earliest epoch of the tick (a schedule: once the later calls start) */
#define TICKFROM GRACE
#endif

#ifndef GENS            /* generations a slot cycles through (10 bits in the real code) */
#define GENS 4
#endif

/* Migration copies and TTL exist only in the scenarios that use them (7, 9): elsewhere their
 * code is left out, which keeps pan.c (and its compile time) as it was. */
#if SCEN == 7
#define HAVE_COPY
#endif
#if SCEN == 9
#define HAVE_TTL
#endif

/* Every property is a CHECK; -DHUNT_C turns them all off except the two hunting assertions
 * (which name hole c directly), so that a search can go looking for that hole alone. */
#ifdef HUNT_C
#define CHECK(x) skip
#else
#define CHECK(x) assert(x)
#endif

#define NS 4            /* DTE slots: node 0 owns 0,1; node 1 owns 2,3 */
#define NI 3            /* ITEs */
#define NOPS 8          /* op ids: 0 = initial state, 1..5 client calls, 6,7 final reads */
#define NONE 255

/* DTE state bits (layout.h) */
#define BUSY 1
#define COMM 2
#define ABAN 4

/* keys: A has positions (0,1), B has (0,2): they compete for ITE 0 (2-way cuckoo). Scenario 7
 * (MIGRATE) has B at (2,0) instead: B sits at its second position, ITE 0, so that the copy a
 * migration makes at ITE 2 is in front of its source for a GET of B; and a third key C, at ITE 1
 * and never written, so that a PUT of A finds both of its positions held by other keys. */
#define KA 0
#define KB 1
#define KC 2
#define NK 3
#if SCEN == 7
#define POS(kk,ii) ((2 * (kk) + (ii)) % 3)     /* A (0,1), B (2,0), C (1,2) */
#else
#define POS(kk,ii) ((((ii) == 0) -> 0 : (1 + (kk))))
#endif
#define KCH(kk) (((kk) == KA) -> 'A' : (((kk) == KB) -> 'B' : 'C'))

/* ITE words */
#define W(s,kk,g)  (1 + (s) + NS*((kk) + NK*(g)))
#define WSLOT(w)   (((w) - 1) % NS)
#define WKEY(w)    ((((w) - 1) / NS) % NK)
#define WGEN(w)    (((w) - 1) / (NK*NS))
#define NODE(s)    ((s) / 2)

#ifdef OLD_DESIGN
/* a 64-bit word compare: node/class/offset + filter; the life is not in the word */
#define ITE_EQ(a,b) ((((a) == 0) && ((b) == 0)) || (((a) != 0) && ((b) != 0) && (WSLOT(a) == WSLOT(b)) && (WKEY(a) == WKEY(b))))
/* a DTE state CAS compares the state word only (no life in it; RECYCLED is another word) */
#define STATE_MATCH(s,w,est,erec) (d[s].st == (est))
#else
#define ITE_EQ(a,b) ((a) == (b))
/* the state word holds the generation and the RECYCLED flag: a CAS names one life */
#define STATE_MATCH(s,w,est,erec) ((d[s].st == (est)) && (d[s].gen == WGEN(w)) && (d[s].rec == (erec)))
#endif

/* outcomes (nessie.h) */
#define R_NONE 0        /* not returned: crashed */
#define R_OK   1
#define R_NF   2        /* NOT_FOUND */
#define R_FAB  3        /* FABRIC_ERROR */
#define R_TMO  4        /* TIMEOUT: effect unknown */
#define R_MEM  5        /* NO_MEMORY */
#define R_INV  6        /* INVALID / INDEX_FULL: "cannot happen" paths */
#define DEFINITE_FAIL(r) (((r) == R_FAB) || ((r) == R_MEM) || ((r) == R_INV))

/* op kinds */
#define K_PUT  1        /* nessie_store(SET) */
#define K_DEL  2        /* nessie_delete */
#define K_INCR 3        /* nessie_arith(incr): a form whose new value is built from the old one */
#define K_GET  4
#define K_FIN  5        /* the final read of a key, after recovery */
#define K_EVICT 6       /* ghost: an item reported lost as an eviction (a migration whose copy was
                         * undone after it emptied the source): a DELETE that no call made */
#define K_TICK 7        /* ghost: the TTL clock ticks: every item with an exptime is dead from here */
#define EVOP   4        /* the op id of the eviction report (scenario 7) */
#define TICKOP 5        /* the op id of the TTL tick (scenario 9) */

/* attempt results (protocol.c enum attempt) */
#define A_DONE  0
#define A_RETRY 1

/* rollback / abandon results */
#define RB_GONE    0    /* our entry is out (or abandoned): it will never be committed */
#define RB_DONE    1    /* it was committed already (a takeover): the call took effect */
#define RB_FAULT   2    /* OLD: a fabric error: FABRIC_ERROR */
#define RB_UNKNOWN 3    /* NEW: could not name our life any more: TIMEOUT */

/* ---------------------------------------------------------------------------------------- */
/* shared state                                                                               */
/* ---------------------------------------------------------------------------------------- */
typedef DTE {
    byte st;        /* BUSY / COMM / ABAN bits; 0 = free (slab.c reclaim zeroes it) */
    bit  rec;       /* RECYCLED (OLD: the recycle word; NEW: a flag in the state word) */
    byte rmark;     /* epoch of the recycle mark (the expiry is rmark + 1) */
    byte gen;       /* the slot's life: NEW in the state word, OLD a ghost */
    byte prev;      /* prev ITE (previous version; a migration's copy: its source) */
    byte key;
    bit  copy;      /* DTE_F_COPY: a migration's copy */
    bit  ttl;       /* has an exptime: dead once the TTL clock has ticked (texp) */
    byte val;
    bit  tomb;      /* DTE_KIND_TOMBSTONE (a DELETE's entry) */
    byte created;   /* epoch of allocation (created_ns) */
    byte creator;   /* op id (creator) */
    bit  everlinked;/* ghost: this life was made visible by an ITE CAS */
    bit  onfree;    /* ghost: on its node's free list */
}

byte ite[NI];
DTE d[NS];
byte fl[NS];        /* free lists: node n uses fl[2n], fl[2n+1], nfl[n] entries */
byte nfl[2];
byte epoch;
byte faults;
byte crashes;
byte nfin;          /* clients that are done (returned from every call, or crashed) */
bit  stop;
bit  sweepowed;     /* a call left an entry to the leak sweep by design */

/* history, for the linearizability check at the end */
byte hkind[NOPS];
byte hkey[NOPS];
byte harg[NOPS];    /* PUT: the value */
byte hres[NOPS];    /* outcome */
byte hval[NOPS];    /* GET / final read: the value returned; INCR: the new number */
byte hprec[NOPS];   /* ops that had returned a definite outcome when this one was invoked */
bit  hinv[NOPS];    /* invoked */
bit  hvis[NOPS];    /* ghost: a reader returned a value this op wrote */
byte hdone;         /* ops that have returned a definite outcome */
byte hnb[NOPS];     /* a scenario may hold a call back until this epoch (a schedule, no more) */
byte initv[NK];     /* initial logical value of each key (0 = absent) */
bit  httl[NOPS];    /* PUT: with an exptime (the TTL clock's tick; absolute, like memcached's) */
bit  hlive[NOPS];   /* ghost: invoked, not returned, not crashed */
bit  texp;          /* the TTL clock has ticked: items with an exptime are dead (item_dead) */
byte evprec;        /* ghost: hdone when a migration emptied its source (the eviction's start) */
#ifdef TIMED
byte lb[5];         /* per client (pid): the last epoch its live call may act in (255: none) */
#endif

/* ---------------------------------------------------------------------------------------- */
/* invariants checked in every state                                                          */
/* ---------------------------------------------------------------------------------------- */
/* A linked ITE names the live life of its slot: same generation, in use, not marked recycled,
 * not on a free list, holding the key its filter says (no use-after-free, no reuse while
 * linked). */
#define LINKOK(p) ((ite[p] == 0) || ((d[WSLOT(ite[p])].gen == WGEN(ite[p])) && (d[WSLOT(ite[p])].st != 0) && !d[WSLOT(ite[p])].rec && !d[WSLOT(ite[p])].onfree && (d[WSLOT(ite[p])].key == WKEY(ite[p]))))
/* The previous version of a linked, uncommitted entry is still alive (readers of that entry
 * return it, a rollback or a takeover of an abandoned entry links it again). A migration's copy
 * is exempt: its prev is its source, which readers use only while it is linked (LINKOK covers
 * it then) and which no takeover links again. */
#define PE(p) d[WSLOT(ite[p])]
#define PV(p) d[WSLOT(PE(p).prev)]
#define PREVOK(p) ((ite[p] == 0) || (PE(p).st & COMM) || (PE(p).prev == 0) || PE(p).copy || ((PV(p).gen == WGEN(PE(p).prev)) && !PV(p).onfree && !PV(p).rec))
#ifdef NO_PREVOK   /* (to let a run go on past a recycled previous version, for a longer trail) */
#define INVARIANT (LINKOK(0) && LINKOK(1) && LINKOK(2))
#else
#define INVARIANT (LINKOK(0) && LINKOK(1) && LINKOK(2) && PREVOK(0) && PREVOK(1) && PREVOK(2))
#endif

active proctype monitor()
{
end:
    atomic { !INVARIANT -> CHECK(INVARIANT) }
}

/* ---------------------------------------------------------------------------------------- */
/* clock, recycler                                                                            */
/* ---------------------------------------------------------------------------------------- */
/* The expiration clock. Every tick can fall between any two steps of every other process: a
 * process that checked its timer and then waits past a tick has stalled past E. */
#ifdef TIMED
/* TIMED: the clock does not pass a live call's bound: every call ends in time (the assumption
 * the grace period rests on). */
#define INTIME (epoch + 1 <= lb[2] && epoch + 1 <= lb[3] && epoch + 1 <= lb[4])
#else
#define INTIME true
#endif
proctype clock()
{
end:
    do
    :: atomic { !stop && epoch < MAXE && INTIME -> epoch++; printf("CLOCK: epoch %d\n", epoch) }
    od
}

/* The TTL clock (scenario 9): one tick, at any moment, after which every item with an exptime
 * is dead for every reader (one clock: the model has no skew between nodes' real clocks). The
 * tick is an event of the history, placed in real-time order like a call that returned at once. */
proctype ttlclock()
{
end:
    atomic {
        !stop && epoch >= TICKFROM ->
        texp = 1;
        hkind[TICKOP] = K_TICK; hinv[TICKOP] = 1; hprec[TICKOP] = hdone; hres[TICKOP] = R_OK;
        hdone = hdone | (1 << TICKOP);
        printf("TTL CLOCK: items with an exptime are dead from now on\n")
    }
}
#ifdef HAVE_TTL
#define DEAD(t) ((t) && texp)
#else
#define DEAD(t) false
#endif
/* Whether the entry a view holds is dead: judged at the time of the ITE read that led to it
 * (rtexp), the instant the view is of. -DBUG_TTL_LATE_DEAD: judged when the caller looks, as
 * get.c and write.c call nessie_item_dead with the clock of that moment: an item that was
 * replaced while still alive can then be reported expired. */
#if defined(HAVE_TTL) && defined(BUG_TTL_LATE_DEAD)
#define VDEAD DEAD(vttl)
#else
#define VDEAD ((vttl) && rtexp)
#endif

inline push_free(s)
{
    CHECK(!d[s].onfree);               /* a slot freed twice would be handed out twice */
    d[s].onfree = 1;
    fl[2 * NODE(s) + nfl[NODE(s)]] = s;
    nfl[NODE(s)]++
}

/* slab.c reclaim_if_expired: the owner returns a recycled slot to its free list once its
 * expiry has passed (one period after the mark). */
#define RECLAIMABLE(s) (d[s].rec && epoch >= d[s].rmark + 1)
inline reclaim(s)
{
    printf("RECYCLER e%d: slot D%d (g%d) back on node %d's free list\n", epoch, s, d[s].gen, NODE(s));
    d[s].st = 0;
    d[s].rec = 0;
    d[s].rmark = 0;
    push_free(s)
}

proctype recycler()
{
end:
    do
    :: atomic { RECLAIMABLE(0) -> reclaim(0) }
    :: atomic { RECLAIMABLE(1) -> reclaim(1) }
    :: atomic { RECLAIMABLE(2) -> reclaim(2) }
    :: atomic { RECLAIMABLE(3) -> reclaim(3) }
    od
}

/* ---------------------------------------------------------------------------------------- */
/* fabric access (protocol.c ite_read / ite_cas / dte_state_cas / dte_read_bytes,            */
/* engine.c mark_recycled). A fabric error either never ran the request, or (CAS) ran it and  */
/* lost its completion. The budget MAXF bounds them per run.                                  */
/* ---------------------------------------------------------------------------------------- */
#define CAN_FAULT (faults < MAXF)

/* Trace lines for `spin -t -p` replays (pan does not print them). A word is shown as
 * D<slot>.<key>.g<generation>, or "empty"; keys: 0 = A, 1 = B. */
inline showw(w)
{
    if
    :: (w) == 0 -> printf("empty")
    :: else -> printf("D%d.%c.g%d", WSLOT(w), KCH(WKEY(w)), WGEN(w))
    fi
}
#define WHO printf("T%d e%d [op%d] ", _pid, epoch, opid)

inline ite_read(p, dst)
{
    atomic {
        flt = 0;
        if
        :: CAN_FAULT -> faults++; flt = 1; WHO; printf("READ ITE%d: FABRIC ERROR\n", p)
        :: true -> dst = ite[p]; rtexp = texp; WHO; printf("READ ITE%d = ", p); showw(dst); printf("\n")
        fi
    }
}

/* CAS an ITE: ok = swapped and reported. */
inline ite_cas(p, expect, swap)
{
    atomic {
        ok = 0;
        flt = 0;
        WHO; printf("CAS ITE%d ", p); showw(expect); printf(" -> "); showw(swap); printf(" (holds "); showw(ite[p]); printf("): ");
        if
        :: CAN_FAULT -> faults++; flt = 1;
            if
            :: printf("FABRIC ERROR, request dropped\n")
#ifndef NO_LOST_COMPLETION
            :: ITE_EQ(ite[p], expect) -> ite[p] = swap;      /* ran, completion lost */
                if :: swap != 0 -> d[WSLOT(swap)].everlinked = 1 :: else fi;
                printf("FABRIC ERROR, but the CAS ran (completion lost)\n")
#endif
            fi
        :: true ->
            if
            :: ITE_EQ(ite[p], expect) -> ite[p] = swap; ok = 1;
                if :: swap != 0 -> d[WSLOT(swap)].everlinked = 1 :: else fi;
                printf("ok\n")
            :: else -> printf("failed\n")
            fi
        fi
    }
}

/* CAS the state word of the DTE that w names: expect est (and, NEW, w's life and erec),
 * swap to nst. ok, and what it held: oldst, oldgen, oldrec. */
inline dte_cas(w, est, erec, nst)
{
    atomic {
        ok = 0;
        flt = 0;
        s_ = WSLOT(w);
        oldst = d[s_].st;
        oldgen = d[s_].gen;
        oldrec = d[s_].rec;
        WHO; printf("CAS state of "); showw(w); printf(" %d -> %d (holds st=%d rec=%d g%d): ", est, nst, oldst, oldrec, oldgen);
        if
        :: CAN_FAULT -> faults++; flt = 1;
            if
            :: printf("FABRIC ERROR, request dropped\n")
#ifndef NO_LOST_COMPLETION
            :: STATE_MATCH(s_, w, est, erec) -> d[s_].st = nst;
                printf("FABRIC ERROR, but the CAS ran (completion lost)\n")
#endif
            fi
        :: true ->
            if
            :: STATE_MATCH(s_, w, est, erec) -> d[s_].st = nst; ok = 1; printf("ok\n")
            :: else -> printf("failed\n")
            fi
        fi;
        s_ = 0
    }
}

/* Read the DTE that w names (header, key and value) into the view v*: from this node's memory
 * directly (cannot fail) or with a fabric READ. */
inline dte_read(w)
{
    atomic {
        flt = 0;
        s_ = WSLOT(w);
        if
        :: NODE(s_) != node && CAN_FAULT -> faults++; flt = 1; WHO; printf("READ "); showw(w); printf(": FABRIC ERROR\n")
        :: true ->
            vst = d[s_].st; vrec = d[s_].rec; vgen = d[s_].gen; vprev = d[s_].prev;
            vkey = d[s_].key; vval = d[s_].val; vtomb = d[s_].tomb;
            vcreated = d[s_].created; vcreator = d[s_].creator; vcopy = d[s_].copy; vttl = d[s_].ttl;
            WHO; printf("READ "); showw(w); printf(" = {st=%d rec=%d g%d key=%c val=%d tomb=%d prev=", vst, vrec, vgen, KCH(vkey), vval, vtomb);
            showw(vprev); printf(" created=e%d by op%d copy=%d ttl=%d}\n", vcreated, vcreator, vcopy, vttl)
        fi;
        s_ = 0
    }
}

/* nessie_recycle -> mark_recycled (A.1.3 step 7). OLD: a blind WRITE of the recycle word
 * (local: a memory write; remote: a fabric WRITE whose failure is only logged: the entry leaks
 * until the leak sweep). NEW: a CAS on the state word that sets RECYCLED only on the life w
 * names, in use, and not marked yet. */
inline recycle(w)
{
    atomic {
        s_ = WSLOT(w);
        if
        :: NODE(s_) != node && CAN_FAULT -> faults++; WHO; printf("MARK RECYCLED "); showw(w); printf(": FABRIC ERROR (leaks until the sweep)\n")
        :: true ->
            WHO; printf("MARK RECYCLED "); showw(w);
#ifdef OLD_DESIGN
            d[s_].rec = 1; d[s_].rmark = epoch; printf(" (slot holds g%d st=%d): written\n", d[s_].gen, d[s_].st);
#ifdef HUNT_C
            assert(d[s_].gen == WGEN(w));   /* hunt: the blind mark hit another life */
#endif
#else
            if
            :: d[s_].gen == WGEN(w) && !d[s_].rec && d[s_].st != 0 -> d[s_].rec = 1; d[s_].rmark = epoch; printf(": ok\n")
            :: else -> printf(": CAS failed (slot holds g%d st=%d rec=%d)\n", d[s_].gen, d[s_].st, d[s_].rec)
            fi
#endif
        fi;
        s_ = 0
    }
}

/* slab_alloc + dte_write_new (A.1.3 step 3): a BUSY entry in this node's memory, invisible
 * until an ITE names it. nw = its ITE word, or 0 if the node has no free slot. OLD pops the
 * most recently freed slot (LIFO stack), NEW the oldest (FIFO). */
inline dte_write_new(kk, vv, tb, pv, cp, tl, cr)
{
    atomic {
        nw = 0;
        if
        :: nfl[node] == 0 -> skip
        :: else ->
#ifdef OLD_DESIGN
            s_ = fl[2 * node + nfl[node] - 1];
            fl[2 * node + nfl[node] - 1] = 0;
#else
            s_ = fl[2 * node];
            fl[2 * node] = fl[2 * node + 1];
            fl[2 * node + 1] = 0;
#endif
            nfl[node]--;
            d[s_].onfree = 0;
            d[s_].gen = (d[s_].gen + 1) % GENS;     /* a new life */
            d[s_].st = BUSY; d[s_].rec = 0; d[s_].rmark = 0;
            d[s_].prev = pv; d[s_].key = kk; d[s_].val = vv; d[s_].tomb = tb;
            d[s_].created = epoch; d[s_].creator = cr; d[s_].everlinked = 0;
            d[s_].copy = cp; d[s_].ttl = tl;
            nw = W(s_, kk, d[s_].gen);
            WHO; printf("ALLOC "); showw(nw); printf(" BUSY val=%d tomb=%d copy=%d ttl=%d prev=", vv, tb, cp, tl); showw(pv); printf("\n");
            s_ = 0
        fi
    }
}

/* slab_free_unpublished: a slot whose CAS failed goes back at once, without quarantine. That
 * is only sound if no ITE ever named it: checked. */
inline free_unpublished(w)
{
    atomic {
        s_ = WSLOT(w);
        WHO; printf("FREE UNPUBLISHED "); showw(w); printf("\n");
        CHECK(!d[s_].everlinked);      /* freed without quarantine although it was visible */
        d[s_].st = 0; d[s_].rec = 0;
        push_free(s_);
        s_ = 0
    }
}

/* ---------------------------------------------------------------------------------------- */
/* takeover (protocol.c takeover): an orphan older than the grace period. ABANDONED: put its  */
/* previous version back (CAS naming the abandoned entry's ITE word). Otherwise: commit it    */
/* (the CAS the writer's last step also makes); a TOMBSTONE is then unlinked. Uses the view.  */
/* flt = a fabric error.                                                                      */
/* ---------------------------------------------------------------------------------------- */
/* protocol.c copy_undo: an orphaned migration's copy is always undone (abandoned, then
 * unlinked). If its source is still in its life, not recycled, and linked at none of the key's
 * positions, its migration (or a demotion, in C) may have emptied it: the item may be lost, told
 * to the checker as an eviction of unknown effect (R_TMO: placed anywhere after the report, or
 * not at all). Reads the source's state word and the key's ITEs (cu); sets undo, and flt on a
 * fabric error. */
#ifdef HAVE_COPY
inline copy_undo()
{
    undo = 1;
    if
    :: vprev == 0 -> skip
    :: else ->
        atomic {
            s_ = WSLOT(vprev);
            if
            :: NODE(s_) != node && CAN_FAULT -> faults++; flt = 1; WHO; printf("READ state of "); showw(vprev); printf(": FABRIC ERROR\n")
            :: true -> flt = 0;
                if
                :: d[s_].gen != WGEN(vprev) || d[s_].st == 0 || d[s_].rec -> cu = 1
                :: else -> cu = 0
                fi;
                WHO; printf("COPY_UNDO: source "); showw(vprev); printf(" gone or recycled: %d\n", cu)
            fi;
            s_ = 0
        }
        if
        :: flt || cu -> skip
        :: else ->
            ite_read(POS(vkey, 0), cu);
            if
            :: flt -> skip
            :: !flt && cu == vprev -> skip
            :: else ->
                ite_read(POS(vkey, 1), cu);
                if
                :: flt -> skip
                :: !flt && cu == vprev -> skip
                :: else ->
                    /* the source is out of the index: undoing the copy may lose the item */
                    atomic {
                        WHO; printf("COPY_UNDO: source out of the index: an eviction of unknown effect\n");
                        if
                        :: !hinv[EVOP] ->
                            hkind[EVOP] = K_EVICT; hkey[EVOP] = vkey; hinv[EVOP] = 1; hprec[EVOP] = hdone;
                            hres[EVOP] = R_TMO; hdone = hdone | (1 << EVOP)
                        :: else
                        fi
                    }
                fi
            fi
        fi;
        cu = 0
    fi
}
#endif

inline takeover(p, w)
{
#if defined(TIMED) && !defined(OLD_GRACE)
    /* with a grace longer than the longest call, a takeover never acts on a live call's entry */
    CHECK(!hlive[vcreator]);
#endif
#ifdef HAVE_COPY
    undo = 0;
    if :: vcopy && !(vst & ABAN) -> copy_undo() :: else -> flt = 0 fi;
    if
    :: flt -> skip
    :: !flt && undo ->
        /* abandoned first (naming its life), so its migration can never commit it */
        dte_cas(w, vst, vrec, vst | ABAN);
        if
        :: ok -> ite_cas(p, w, 0); if :: ok -> recycle(w) :: else fi
        :: else
        fi
    :: !flt && !undo && (vst & ABAN) ->
        ite_cas(p, w, (vcopy -> 0 : vprev));
        if :: ok -> recycle(w) :: else fi
    :: else ->
#else
    if
    :: (vst & ABAN) ->
        ite_cas(p, w, vprev);
        if :: ok -> recycle(w) :: else fi
    :: else ->
#endif
        dte_cas(w, vst, vrec, vst | COMM);
        if
        :: ok && vtomb ->
            ite_cas(p, w, 0);
            if :: ok -> recycle(w) :: else fi
        :: else
        fi
    fi
}

/* ---------------------------------------------------------------------------------------- */
/* the clients                                                                                */
/* ---------------------------------------------------------------------------------------- */
#define CRASH_POINT if :: crashes < MAXC -> crashes++; WHO; printf("CRASH\n"); goto crashed :: true -> skip fi
#define EXPIRED (epoch != t0)   /* Step 0: attempt_expired() */

inline rec_push(w)
{
    CHECK(nrec < 3);
    rec[nrec] = w;
    nrec++
}

/* remove one entry equal to w (a word compare: OLD ignores the ghost generation) */
inline rec_remove(w)
{
    x = 0;
    do
    :: x >= nrec -> break
    :: x < nrec && w != 0 && ITE_EQ(rec[x], w) ->
        nrec--; rec[x] = rec[nrec]; rec[nrec] = 0; break
    :: else -> x++
    od;
    x = 0
}

inline recycle_all()
{
    do
    :: nrec == 0 -> break
    :: nrec > 0 -> nrec--; recycle(rec[nrec]); rec[nrec] = 0
    od
}

inline clear_view()
{
    vst = 0; vrec = 0; vgen = 0; vprev = 0; vkey = 0; vval = 0; vtomb = 0; vcreated = 0; vcreator = 0;
    vcopy = 0; vttl = 0; rtexp = 0; undo = 0; prevok = 0; cu = 0;
    sv = 0; mdst = 0; cw = 0; mkey = 0; mval = 0; mcr = 0; mttl = 0;
    w = 0; pw = 0; nw = 0; i = 0; j = 0; ok = 0; flt = 0; oldst = 0; oldgen = 0; oldrec = 0
}

/* a value returned to a GET: invariants 2 and 3 */
inline get_return(vw)
{
    /* the life the GET read is the one the word it followed named (no freed or reused slot),
     * and it holds the key asked for */
    CHECK(vgen == WGEN(vw) && vkey == k);
    /* never a value of a call that returned a definite failure */
    CHECK(!DEFINITE_FAIL(hres[vcreator]));
    hvis[vcreator] = 1;
    hval[opid] = vval;
    status = R_OK
}

/* GET (A.1.2, protocol.c get_attempt) */
inline get_attempt()
{
    res = A_RETRY;
    i = 0;
    do
    :: i == 2 ->
        /* Step 3: not found in the forward pass; the reverse pass re-reads I_1 */
        ite_read(POS(k, 0), w);
        if :: flt -> status = R_FAB; res = A_DONE; break :: else fi;
        if :: !ITE_EQ(w, seen[0]) -> break :: else fi;
        if :: EXPIRED -> break :: else fi;
        status = R_NF; hval[opid] = 0; res = A_DONE; break
    :: i < 2 ->
        if :: EXPIRED -> break :: else fi;
        /* Step 2: read I_i */
        ite_read(POS(k, i), w);
        if :: flt -> status = R_FAB; res = A_DONE; break :: else fi;
        seen[i] = w;
        if
        :: w == 0 || WKEY(w) != k -> i++            /* Steps 2.1, 2.2 */
        :: else ->
            dte_read(w);                             /* Step 2.3 */
            if :: flt -> status = R_FAB; res = A_DONE; break :: else fi;
#ifndef OLD_DESIGN
            if :: vgen != WGEN(w) -> break :: else fi;   /* another life: retry */
#endif
            if
            :: vkey != k -> i++
            :: else ->
                if :: EXPIRED -> break :: else fi;
                if
                :: (vst & COMM) && !vtomb && !VDEAD ->      /* Step 2.4 */
                    get_return(w); res = A_DONE; break
                :: (vst & COMM) && !vtomb && VDEAD ->       /* expired: absent */
                    status = R_NF; hval[opid] = 0; res = A_DONE; break
                :: (vst & COMM) && vtomb ->          /* a finished DELETE */
                    status = R_NF; hval[opid] = 0; res = A_DONE; break
                :: else
                fi;
                if
                :: epoch >= vcreated + GRACE ->      /* an orphan: take it over, retry */
                    takeover(POS(k, i), w);
                    if :: flt -> status = R_FAB; res = A_DONE :: else fi;
                    break
                :: else
                fi;
                /* Step 2.5: the previous version; a migration's copy's is its source, used only
                 * while the source is still linked at a later position (get.c source_linked) */
                prevok = 1;
#ifdef HAVE_COPY
                if
                :: vcopy ->
                    if
                    :: i == 0 ->
                        ite_read(POS(k, 1), cu);
                        if :: flt -> status = R_FAB; res = A_DONE; break :: else fi;
                        prevok = (cu != 0 && ITE_EQ(cu, vprev))
                    :: else -> prevok = 0
                    fi;
                    cu = 0
                :: else
                fi;
#endif
                if
                :: vprev != 0 && prevok ->
                    pw = vprev;
                    dte_read(pw);
                    if :: flt -> status = R_FAB; res = A_DONE; break :: else fi;
                    if :: EXPIRED -> break :: else fi;
                    if
#ifdef OLD_DESIGN
                    :: vkey == k && (vst & COMM) && !vtomb ->
#else
                    :: vkey == k && vgen == WGEN(pw) && (vst & COMM) && !vtomb ->
#endif
                        if
                        :: VDEAD -> status = R_NF; hval[opid] = 0
                        :: else -> get_return(pw)
                        fi;
                        res = A_DONE; break
                    :: else
                    fi
                :: else
                fi;
                break                                /* concurrent operation: retry */
            fi
        fi
    od
}

/*
 * OLD rollback_mine: abandon our entry (BUSY -> BUSY|ABANDONED, no life named: hole c), then put
 * its previous version back in its ITE. rb: RB_DONE (a takeover committed it), RB_GONE, RB_FAULT.
 * NEW abandon_own: the same CAS naming our generation (and no RECYCLED flag); a fabric error on
 * it, or a life we no longer own, is unknown (RB_UNKNOWN -> TIMEOUT). Once abandoned the entry
 * is never committed; its previous version is kept (not recycled) unless it is linked again
 * or our entry was unlinked by someone else.
 */
inline rollback_mine()
{
    dte_cas(mine, BUSY, 0, BUSY | ABAN);
#ifdef OLD_DESIGN
#ifdef HUNT_C
    assert(!(ok || flt) || oldgen == WGEN(mine));   /* hunt: abandoned another life */
#endif
    if
    :: flt -> rb = RB_FAULT
    :: !flt && (oldst & COMM) -> rb = RB_DONE
    :: else ->
        CRASH_POINT;
        pw = d[WSLOT(mine)].prev;                    /* mine_hdr: a local read */
        ite_cas(POS(k, minepos), mine, pw);
        if
        :: flt -> rb = RB_FAULT
        :: !flt && ok -> recycle(mine); rec_remove(pw); rb = RB_GONE; mine = 0
        :: else ->
            ite_read(POS(k, minepos), w);
            if
            :: flt -> rb = RB_FAULT
            :: else ->
                if :: w != 0 && ITE_EQ(w, pw) -> rec_remove(pw) :: else fi;
                rb = RB_GONE; mine = 0
            fi
        fi
    fi
#else
    if
    :: flt -> rb = RB_UNKNOWN
    :: !flt && !ok && oldgen == WGEN(mine) && (oldst & COMM) -> rb = RB_DONE
#ifdef NAIVE_ABANDON
    /* the brief's rule read literally: whatever is not COMMITTED means "not applied" */
    :: !flt && !ok && !(oldgen == WGEN(mine) && (oldst & COMM)) -> rb = RB_GONE; mine = 0
#else
    :: !flt && !ok && oldgen == WGEN(mine) && (oldst & BUSY) && !(oldst & COMM) ->
        /* still our life, never committed, and it never will be: abandoned already, or
         * unlinked by another call and marked RECYCLED (a commit CAS names "no RECYCLED") */
        rb = RB_GONE; mine = 0
    :: !flt && !ok && !(oldgen == WGEN(mine) && (oldst & BUSY)) ->
        /* our life is over (the slot is free, or holds another life): whether it was
         * committed before it was unlinked cannot be told any more */
        rb = RB_UNKNOWN;
#ifdef OLD_LIFE_RETRY
        mine = 0;                                    /* write.c lost_track zeroes op->mine */
#endif
        skip
#endif
    :: !flt && ok ->
        CRASH_POINT;
        pw = d[WSLOT(mine)].prev;
        ite_cas(POS(k, minepos), mine, pw);
        if
        :: flt -> rec_remove(pw)                     /* may still be linked: keep its prev */
        :: !flt && ok -> recycle(mine); rec_remove(pw)
        :: else ->
#ifdef ROLLBACK_RECYCLES_PREV
            /* today's inference: the ITE does not hold prev, so prev is still ours */
            ite_read(POS(k, minepos), w);
            if
            :: flt -> rec_remove(pw)
            :: else -> if :: w != 0 && w == pw -> rec_remove(pw) :: else fi
            fi
#else
            /* Someone else unlinked our entry: a takeover that put prev back (prev is then
             * linked, and whoever replaced it since owns it), or another call's step 4 (then
             * prev is unlinked and ours). The ITE cannot tell which: prev is left to the leak
             * sweep, which only takes entries nothing references. */
            rec_remove(pw); sweepowed = 1
#endif
        fi;
        rb = RB_GONE; mine = 0
    fi
#endif
}


#ifdef TIMED
/* proto_memory_short: the first wait extends the call's deadline by EXT epochs */
#define SET_MEMWAIT if :: !memwait -> lb[_pid] = tcall + OPT + EXT + FAB :: else fi; memwait = 1
#define BUDGET (OPT + (memwait -> EXT : 0))
#else
#define SET_MEMWAIT memwait = 1
#define BUDGET OPT
#endif

/* the copy is taken back out: abandoned (naming its life: nobody can commit it any more), then
 * unlinked from the destination and recycled (it was visible) */
inline undo_copy()
{
    dte_cas(cw, BUSY, 0, BUSY | ABAN);
    ite_cas(mdst, cw, 0);
    if :: ok -> recycle(cw) :: else fi
}

/*
 * MIGRATE (A.1.4, migrate.c proto_migrate) at depth 0: the entry at the key's I_1 (the source,
 * another key's) moves to that key's other position (the destination): a copy, BUSY with
 * DTE_F_COPY, prev = the source and the source's creator (step 5), linked at the empty
 * destination (step 6), the source emptied (step 7), the copy committed (step 8), the source
 * recycled (step 9); then the write tries again. A destination that is not empty would need a
 * recursive migration (step 4.2): not modelled, the attempt retries. Runs inside write_attempt
 * (its labels). Scenario 7 has no fabric error: the fault paths are the code's, untested here.
 */
inline migrate()
{
    /* Step 2: the source */
    ite_read(POS(k, 0), sv);
    if :: flt -> goto wa_fault :: else fi;
    if :: sv == 0 -> goto wa_end :: else fi;                       /* 2.1: freed meanwhile */
    dte_read(sv);
    if :: flt -> goto wa_fault :: else fi;
    if :: vgen != WGEN(sv) || vst == 0 -> goto wa_end :: else fi;  /* stale view */
    if :: vkey == k -> goto wa_end :: else fi;                     /* 2.3: the key got here */
    if
    :: !(vst & COMM) ->                                            /* 2.4: in progress */
        if
        :: epoch >= vcreated + GRACE ->
            takeover(POS(k, 0), sv);
            if :: flt -> goto wa_fault :: else -> goto wa_end fi
        :: else -> goto wa_end
        fi
    :: (vst & COMM) && vtomb -> goto wa_end
    :: else
    fi;
    /* Steps 3, 4: the destination: the moved key's position that is not one of ours */
    mkey = vkey; mval = vval; mttl = vttl; mcr = vcreator;
    mdst = ((POS(mkey, 0) == POS(k, 0) || POS(mkey, 0) == POS(k, 1)) -> POS(mkey, 1) : POS(mkey, 0));
    if :: mdst == POS(k, 0) || mdst == POS(k, 1) -> status = R_INV; goto wa_done :: else fi;
    ite_read(mdst, cu);
    if :: flt -> goto wa_fault :: else fi;
    if :: cu != 0 -> cu = 0; goto wa_end :: else fi;               /* 4.2: not modelled */
    /* Step 5: the copy */
    if :: EXPIRED -> goto wa_end :: else fi;
    dte_write_new(mkey, mval, 0, sv, 1, mttl, mcr);
    if
    :: nw == 0 ->
        if
        :: d[2 * node].rec || d[2 * node + 1].rec -> SET_MEMWAIT; goto wa_end
        :: else -> status = R_MEM; goto wa_done
        fi
    :: else
    fi;
    cw = nw; nw = 0;
    /* Step 6: link it at the (empty) destination */
    if :: EXPIRED -> free_unpublished(cw); goto wa_end :: else fi;
    ite_cas(mdst, 0, cw);
    if
    :: flt -> undo_copy(); status = R_FAB; sweepowed = 1; goto wa_done
    :: !flt && !ok -> free_unpublished(cw); goto wa_end
    :: else
    fi;
    CRASH_POINT;
    /* Step 7: empty the source */
#ifndef BUG_MIGRATE_NO_STEP0
    /* Step 0 before this CAS too (the fix of finding 1): views older than a period are stale */
    if :: EXPIRED -> undo_copy(); goto wa_end :: else fi;
#endif
    evprec = hdone;                     /* ghost: the item may be lost from here on */
    ite_cas(POS(k, 0), sv, 0);
    if
    :: flt -> status = R_FAB; sweepowed = 1; goto wa_done          /* the copy stays: a takeover */
    :: !flt && !ok -> undo_copy(); goto wa_end                       /* the source changed */
    :: else
    fi;
    CRASH_POINT;
    /* Step 8: commit the copy (proto_commit_own) */
    dte_cas(cw, BUSY, 0, BUSY | COMM);
    if
    :: ok || (oldgen == WGEN(cw) && (oldst & COMM)) -> skip
    :: !ok && oldgen == WGEN(cw) && (oldst & BUSY) && !(oldst & COMM) ->
        /* committed == false: a takeover (copy_undo) abandoned the copy while the source was
         * still linked, and our step 7 has emptied the source since: neither is linked */
#ifdef BUG_MIGRATE_NO_STEP0
        WHO; printf("MIGRATE: copy found abandoned, ignored (migrate.c never reads `committed`)\n")
#else
        WHO; printf("MIGRATE: copy found abandoned after the source was emptied: item lost, reported as an eviction\n");
        hkind[EVOP] = K_EVICT; hkey[EVOP] = mkey; hinv[EVOP] = 1; hprec[EVOP] = evprec;
        hres[EVOP] = R_OK; hdone = hdone | (1 << EVOP)
#endif
    :: else -> status = R_TMO; goto wa_done      /* the copy's life is over: unknown */
    fi;
    /* Step 9 */
    recycle(sv);
    goto wa_end
}

/* PUT / DELETE / INCR (A.1.3, A.1.5, protocol.c write_attempt) */
inline write_attempt()
{
    res = A_RETRY;
    cand = NONE;
    adopted = 0;
    live = 0;
    oldval = 0;
    i = 0;
    /* Step 2: forward pass for a candidate */
    do
    :: i == 2 -> break
    :: i < 2 ->
        if :: EXPIRED -> goto wa_end :: else fi;
        ite_read(POS(k, i), w);
        if :: flt -> goto wa_fault :: else fi;
        seen[i] = w;
        if
        :: w == 0 ->
            if
            :: mode == K_PUT && mine == 0 -> cand = i; break   /* Step 2.1 */
            :: else -> i++
            fi
        :: w != 0 && WKEY(w) != k -> i++                        /* Step 2.2 */
        :: w != 0 && WKEY(w) == k && mine != 0 && ITE_EQ(w, mine) ->
            cand = i; adopted = 1; break                        /* our earlier attempt's */
        :: else ->
            dte_read(w);                                        /* Step 2.3 */
            if :: flt -> goto wa_fault :: else fi;
#ifndef OLD_DESIGN
            if :: vgen != WGEN(w) -> goto wa_end :: else fi;
#endif
            if
            :: vkey != k -> i++
            :: else ->
                if :: vcreator == opid && (vst & COMM) -> goto wa_ok :: else fi;
                if
                :: !(vst & COMM) ->
                    if
                    :: epoch >= vcreated + GRACE ->
                        takeover(POS(k, i), w);
                        if :: flt -> goto wa_fault :: else -> goto wa_end fi
                    :: else -> goto wa_end                      /* in progress elsewhere */
                    fi
                :: else
                fi;
                if :: mine != 0 -> goto wa_rollback :: else fi;  /* committed in front of ours */
                cand = i; oldval = vval; oldttl = vttl; live = !vtomb && !VDEAD; break
            fi
        fi
    od;

    if
    :: cand == NONE && mine != 0 ->
        /* our entry is gone from the index: committed by a takeover, or cleared */
#ifdef OLD_DESIGN
        if :: (d[WSLOT(mine)].st & COMM) -> goto wa_ok :: else -> mine = 0; goto wa_end fi
#else
        if
        :: d[WSLOT(mine)].gen == WGEN(mine) && (d[WSLOT(mine)].st & COMM) -> goto wa_ok
        :: d[WSLOT(mine)].gen == WGEN(mine) && (d[WSLOT(mine)].st & BUSY) && !(d[WSLOT(mine)].st & COMM) -> mine = 0; goto wa_end
#ifdef OLD_LIFE_RETRY
        /* write.c 531-541 today: another life (or a free slot) read as "never took effect" */
        :: else -> WHO; printf("MY ENTRY IS IN ANOTHER LIFE: write again\n"); mine = 0; goto wa_end
#else
        :: else -> status = R_TMO; goto wa_done                  /* life over: unknown */
#endif
        fi
#endif
    :: cand == NONE && mine == 0 && mode != K_PUT ->
        /* as a GET miss ends: the reverse pass, then NOT_FOUND */
        ite_read(POS(k, 0), w);
        if :: flt -> goto wa_fault :: else fi;
        if :: !ITE_EQ(w, seen[0]) -> goto wa_end :: else fi;
        if :: EXPIRED -> goto wa_end :: else fi;
        status = R_NF; goto wa_done
    :: cand == NONE && mine == 0 && mode == K_PUT ->
#if SCEN == 7
        /* Step 2.4: both positions hold other keys: MIGRATE I_1's entry away, then retry */
        migrate()
#else
        /* Step 2.4 (MIGRATE): both positions hold another key; with these key positions only
         * reachable when an ITE names a DTE that holds another key (a reused slot): INDEX_FULL */
        status = R_INV; goto wa_done
#endif
    :: else
    fi;

    if
    :: !adopted ->
        /* Step 3: the new DTE, with the candidate as its previous version */
        if :: EXPIRED -> goto wa_end :: else fi;
        if
        :: mode == K_PUT -> newval = harg[opid]; ntomb = 0; nttl = httl[opid]
        :: mode == K_INCR ->
            if :: !live -> status = R_NF; goto wa_done :: else fi;
            newval = oldval + 1; ntomb = 0; nttl = oldttl     /* incr keeps the exptime */
        :: mode == K_DEL ->
            if :: !live -> status = R_NF; goto wa_done :: else fi;
            newval = 0; ntomb = 1; nttl = 0
        fi;
        dte_write_new(k, newval, ntomb, seen[cand], 0, nttl, opid);
        if
        :: nw == 0 ->
            if
            :: d[2 * node].rec || d[2 * node + 1].rec -> SET_MEMWAIT; goto wa_end  /* wait */
            :: else -> status = R_MEM; goto wa_done
            fi
        :: else
        fi;
        /* Step 3.1: swing the candidate to it */
        if :: EXPIRED -> free_unpublished(nw); goto wa_end :: else fi;
        ite_cas(POS(k, cand), seen[cand], nw);
        if
        :: flt ->
#ifdef OLD_DESIGN
            free_unpublished(nw); status = R_FAB; goto wa_done
#else
            /* resolved by re-reading the ITE */
            ite_read(POS(k, cand), w);
            if
            :: flt ->                       /* unknown: treat as published, keep the prev */
                mine = nw; minepos = cand; mineprevlive = live; published = 1; goto wa_fault
            :: !flt && w == nw ->           /* it ran */
                if :: seen[cand] != 0 -> rec_push(seen[cand]) :: else fi;
                seen[cand] = nw; mine = nw; minepos = cand; mineprevlive = live; published = 1; goto wa_fault
            :: else ->
#ifdef REREAD_FREES
                /* the brief read literally: not there, so it did not run */
                free_unpublished(nw); status = R_FAB; goto wa_done
#else
                /* Not there now: it did not run, or it ran and our entry was unlinked since
                 * (a takeover committed it, or another call's step 4 cleared it). Abandon it
                 * by a CAS naming its life; recycle it (quarantine), never free it at once. */
                dte_cas(nw, BUSY, 0, BUSY | ABAN);
                if
                :: flt -> status = R_TMO; sweepowed = 1; goto wa_done
                :: !flt && ok -> recycle(nw); sweepowed = 1; status = R_FAB; goto wa_done
                :: !flt && !ok && oldgen == WGEN(nw) && (oldst & COMM) ->
                    /* it ran and a takeover committed it: the call took effect */
                    if :: seen[cand] != 0 -> rec_push(seen[cand]) :: else fi;
                    goto wa_ok
                :: !flt && !ok && oldgen == WGEN(nw) && (oldst & BUSY) && !(oldst & COMM) ->
                    status = R_FAB; sweepowed = 1; goto wa_done  /* cleared, never committed */
                :: else -> status = R_TMO; sweepowed = 1; goto wa_done
                fi
#endif
            fi
#endif
        :: !flt && !ok -> free_unpublished(nw); goto wa_end
        :: else
        fi;
        /* Step 3.2 */
        if :: seen[cand] != 0 -> rec_push(seen[cand]) :: else fi;
        seen[cand] = nw; mine = nw; minepos = cand; mineprevlive = live; published = 1;
        CRASH_POINT
    :: else
    fi;

    /* Step 4: clear duplicates of the key in I_{cnd+1}..I_n */
    j = cand + 1;
    do
    :: j >= 2 -> break
    :: j < 2 ->
        ite_read(POS(k, j), w);
        if :: flt -> goto wa_fault :: else fi;
        seen[j] = w;
        if
        :: w == 0 || WKEY(w) != k -> j++
        :: else ->
            dte_read(w);
            if :: flt -> goto wa_fault :: else fi;
#ifndef OLD_DESIGN
            if :: vgen != WGEN(w) -> goto wa_end :: else fi;
#endif
            if
            :: vkey != k -> j++
#if !defined(OLD_DESIGN) && !defined(STEP4_CLEARS_BUSY)
            :: vkey == k && !(vst & COMM) ->
                /* An entry in progress stands for the value behind it (its prev), which our
                 * entry does not name: clearing it and later abandoning ours would restore the
                 * wrong version. As protocol.c already does for add: take it over if it is an
                 * orphan, else take our own entry back out, and try again. */
                if
                :: epoch >= vcreated + GRACE ->
                    takeover(POS(k, j), w);
                    if :: flt -> goto wa_fault :: else -> goto wa_end fi
                :: else -> goto wa_rollback
                fi
#endif
            :: else ->
                /* the duplicate is the value readers see: make it our previous version */
                s4prev = 0;
                if
#ifdef BUG_TTL_ADOPT_DEAD
                /* write.c today: any live duplicate behind a candidate that was not live */
                :: (vst & COMM) && !vtomb && !VDEAD && !mineprevlive ->
#else
                /* only when the candidate was empty: behind a dead (expired) entry of the key the
                 * key is absent, and a live duplicate there is an older item (finding 7) */
                :: (vst & COMM) && !vtomb && !VDEAD && !mineprevlive && d[WSLOT(mine)].prev == 0 ->
#endif
                    origprev = d[WSLOT(mine)].prev; s4prev = 1;
                    d[WSLOT(mine)].prev = w; mineprevlive = 1
                :: else
                fi;
                if :: EXPIRED -> goto wa_s4undo :: else fi;     /* Step 4.4 */
                ite_cas(POS(k, j), w, 0);
#if defined(OLD_DESIGN) || defined(STEP4_PREV_UNRESOLVED)
                if :: flt -> goto wa_fault :: else fi;
                if :: !ok -> goto wa_end :: else fi;
#else
                /* prev must name a version we unlinked ourselves: if this CAS did not (or may
                 * not have) run, resolve it before anything can restore prev */
                if
                :: flt ->
                    dupw = w;
                    ite_read(POS(k, j), w);
                    if
                    :: flt -> status = R_TMO; goto wa_done           /* unknown: leave it all */
                    :: !flt && w == dupw -> goto wa_s4undo_fault    /* did not run */
                    :: else -> rec_push(dupw); seen[j] = 0; goto wa_fault   /* it ran */
                    fi
                :: !flt && !ok -> goto wa_s4undo
                :: else
                fi;
#endif
                rec_push(w); seen[j] = 0;
                CRASH_POINT;
                j++
            fi
        fi
    od;

    /* Step 5: reverse pass */
    ite_read(POS(k, 0), w);
    if :: flt -> goto wa_fault :: else fi;
    if :: !ITE_EQ(w, seen[0]) -> goto wa_end :: else fi;
    if :: EXPIRED -> goto wa_end :: else fi;

    /* Step 6: commit (commit_own) */
    dte_cas(mine, BUSY, 0, BUSY | COMM);
    if :: flt -> goto wa_fault :: else fi;
#ifdef OLD_DESIGN
    if :: !(ok || (oldst & COMM)) -> status = R_INV; goto wa_done :: else fi;
#elif defined(COMMIT_FAIL_INVALID)
    if :: !(ok || (oldgen == WGEN(mine) && (oldst & COMM))) -> status = R_INV; goto wa_done :: else fi;
#else
    if
    :: ok || (oldgen == WGEN(mine) && (oldst & COMM)) -> skip   /* committed (by us or a takeover) */
    :: !ok && oldgen == WGEN(mine) && (oldst & BUSY) && !(oldst & COMM) ->
        /* still our life, and it can never be committed (abandoned, or unlinked by another
         * call and marked RECYCLED): the call did not take effect; try again */
        mine = 0; goto wa_end
    :: else ->
        /* our life is over (freed, or reused): a takeover may have committed it before it was
         * replaced and recycled; nobody can tell any more */
#ifdef OLD_LIFE_RETRY
        mine = 0;                                    /* lost_track */
#endif
        status = R_TMO; goto wa_done
    fi;
#endif
    CRASH_POINT;
    if
    :: mode == K_DEL ->                 /* A.1.5 step 6: the committed tombstone is unlinked */
        ite_cas(POS(k, cand), mine, 0);
        if :: !flt && ok -> rec_push(mine) :: else fi
    :: else
    fi;
    goto wa_ok;

wa_s4undo:
    /* step 4 stops before unlinking the duplicate it made our previous version: point our entry
     * back at the candidate's old version (ours), then retry (or, after a fault, abandon).
     * Today's code (OLD) leaves prev naming the duplicate. */
#if !defined(OLD_DESIGN) && !defined(STEP4_PREV_UNRESOLVED)
    if :: s4prev -> d[WSLOT(mine)].prev = origprev; mineprevlive = 0 :: else fi;
#endif
    goto wa_end;
wa_s4undo_fault:
    if :: s4prev -> d[WSLOT(mine)].prev = origprev; mineprevlive = 0 :: else fi;
    goto wa_fault;

wa_rollback:
    /* the key is committed in front of our own entry: take ours back out */
    rollback_mine();
    if
    :: rb == RB_DONE -> goto wa_ok
    :: rb == RB_GONE -> goto wa_end
    :: rb == RB_FAULT -> status = R_FAB; goto wa_done
    :: rb == RB_UNKNOWN -> status = R_TMO; goto wa_done
    fi;

wa_fault:
#ifdef OLD_DESIGN
    /* a fabric error: FABRIC_ERROR, whatever was published (hole a) */
    status = R_FAB; goto wa_done;
#else
    /* honest outcomes: nothing published -> FABRIC_ERROR; published -> abandon it first */
    if
    :: mine == 0 -> status = R_FAB; goto wa_done
    :: else ->
        rollback_mine();
        if
        :: rb == RB_DONE -> goto wa_ok
        :: rb == RB_GONE -> status = R_FAB; goto wa_done
        :: rb == RB_UNKNOWN -> status = R_TMO; goto wa_done
        fi
    fi;
#endif

wa_ok:
    /* write_done: the call took effect */
    status = R_OK;
    if :: mode == K_INCR -> hval[opid] = newval :: else fi;
    mine = 0;

wa_done:
    res = A_DONE;

wa_end:
    skip
}

/* run_write: attempts within the call's budget, then what is owed to recycling */
inline write_call()
{
    att = 0; tcall = epoch; mine = 0; nrec = 0; memwait = 0; status = R_NONE; newval = 0;
    do
    :: att == MAXATT -> status = R_TMO; break
    :: else ->
        att++; t0 = epoch;
        write_attempt();
        clear_view();
        if
        :: res == A_DONE -> break
        :: else -> if :: epoch >= tcall + BUDGET -> status = R_TMO; break :: else fi
        fi
    od;
    if
    :: status == R_TMO ->
        /* our published entry (if any) is left for a takeover; recycle what we unlinked,
         * except the entry it names as its previous version */
        if :: mine != 0 -> rec_remove(d[WSLOT(mine)].prev) :: else fi;
        recycle_all();
#if defined(OLD_DESIGN) || defined(MEMWAIT_NOMEM)
        /* finish(): a call that waited for memory and ran out of time "failed for lack of
         * memory", even if a later attempt published an entry a takeover may commit */
        if :: memwait -> status = R_MEM :: else fi
#elif defined(OLD_LIFE_RETRY)
        /* proto_finish today: NO_MEMORY unless op->mine, which lost_track zeroes */
        if :: memwait && mine == 0 -> status = R_MEM :: else fi
#else
        /* NO_MEMORY only if the call never published an entry (finding 2: an entry that left
         * our hands, lost track of or not, may have been committed by a takeover) */
        if :: memwait && !published -> status = R_MEM :: else fi
#endif
    :: else ->
        recycle_all()
    fi;
    mine = 0; minepos = 0; mineprevlive = 0; cand = 0; adopted = 0; live = 0; oldval = 0;
    seen[0] = 0; seen[1] = 0; rb = 0; ntomb = 0; memwait = 0; att = 0; t0 = 0; tcall = 0;
    published = 0; nttl = 0; oldttl = 0
}

inline get_call()
{
    att = 0; tcall = epoch; status = R_NONE;
    do
    :: att == MAXATT -> status = R_TMO; break
    :: else ->
        att++; t0 = epoch;
        get_attempt();
        clear_view();
        if
        :: res == A_DONE -> break
        :: else -> if :: epoch >= tcall + OPT -> status = R_TMO; break :: else fi
        fi
    od;
    seen[0] = 0; seen[1] = 0; att = 0; t0 = 0; tcall = 0
}

#define LOCALS \
    byte opid, k, mode, status, res, att, t0, tcall; \
    byte seen[2]; byte rec[3]; byte nrec; \
    byte mine, minepos; bit mineprevlive; \
    byte cand; bit adopted, live; byte oldval, newval; bit ntomb, memwait; \
    byte i, j, w, pw, nw, s_, x; bit ok, flt; byte oldst, oldgen; bit oldrec; \
    byte vst, vgen, vprev, vval, vcreated, vcreator, vkey; bit vtomb, vrec; \
    byte rb, origprev, dupw; bit s4prev; \
    bit vcopy, vttl, rtexp, oldttl, nttl, published, undo, prevok, mttl; \
    byte sv, mdst, cw, mkey, mval, mcr, cu

/* a client thread on `node`: up to two calls, o1 then o2 (op ids; 0 = none) */
proctype client(byte node; byte o1; byte o2)
{
    LOCALS;
    byte step;
    do
    :: step == 2 -> break
    :: step < 2 ->
        atomic {
            epoch >= hnb[(step == 0 -> o1 : o2)];
            opid = (step == 0 -> o1 : o2);
            step++;
            if
            :: opid != 0 ->
                k = hkey[opid]; mode = hkind[opid];
                hinv[opid] = 1; hprec[opid] = hdone; hlive[opid] = 1;   /* invocation */
#ifdef TIMED
                lb[_pid] = epoch + OPT + FAB;
#endif
                WHO; printf("CALL kind %d (1 put,2 delete,3 incr,4 get) key %c arg %d\n", mode, KCH(k), harg[opid])
            :: else
            fi
        }
        if
        :: opid == 0 -> skip
        :: opid != 0 && mode == K_GET -> get_call()
        :: opid != 0 && mode != K_GET -> write_call()
        fi;
        atomic {
            if
            :: opid != 0 ->                                   /* response */
                hres[opid] = status; hlive[opid] = 0;
#ifdef TIMED
                lb[_pid] = 255;
#endif
                WHO; printf("RETURN outcome %d (1 ok,2 not found,3 fabric error,4 timeout,5 no memory,6 invalid) value %d\n", status, hval[opid]);
                if :: status != R_TMO -> hdone = hdone | (1 << opid) :: else fi;
                /* invariant 3: a definite failure was never seen */
                CHECK(!(DEFINITE_FAIL(status) && hvis[opid]))
            :: else
            fi;
            opid = 0; k = 0; mode = 0; status = 0; res = 0
        }
    od;
    nfin++;
    goto theend;
crashed:
    hlive[opid] = 0;
#ifdef TIMED
    lb[_pid] = 255;
#endif
    nfin++;
theend:
    skip
}

/* ---------------------------------------------------------------------------------------- */
/* the end: recovery, leaks, the final reads and the linearizability check                    */
/* ---------------------------------------------------------------------------------------- */
byte mand, optl, smask[NOPS], sval[NOPS], snext[NOPS], sp, nv, leaked, r, p;
bit linok, excused, found;

#define IN_MASK(m, o) (((m) >> (o)) & 1)
/* the sequential spec: does op o return what it returned, from value cur */
/* A state is 0 (absent) or a value, + 64 if it has an exptime (it dies at the TTL tick; a value
 * with one stored after the tick is absent at once, as memcached stores an item whose absolute
 * exptime has passed). */
#define TTLBIT 64
#define TICKED IN_MASK(smask[sp], TICKOP)
#define SPEC_OK(o, cur) \
    ((hkind[o] == K_PUT) || (hkind[o] == K_EVICT) || (hkind[o] == K_TICK) || \
     (hkind[o] == K_DEL && (!IN_MASK(mand, o) || ((cur) == 0 && hres[o] == R_NF) || ((cur) != 0 && hres[o] == R_OK))) || \
     (hkind[o] == K_INCR && (!IN_MASK(mand, o) || ((cur) == 0 && hres[o] == R_NF) || ((cur) != 0 && hres[o] == R_OK && hval[o] == ((cur) & (TTLBIT - 1)) + 1))) || \
     ((hkind[o] == K_GET || hkind[o] == K_FIN) && (((cur) == 0 && hres[o] == R_NF) || ((cur) != 0 && hres[o] == R_OK && hval[o] == ((cur) & (TTLBIT - 1))))))
#define SPEC_NEXT(o, cur) \
    ((hkind[o] == K_PUT) -> (httl[o] -> (TICKED -> 0 : harg[o] + TTLBIT) : harg[o]) : \
     ((hkind[o] == K_DEL || hkind[o] == K_EVICT) -> 0 : \
      ((hkind[o] == K_TICK) -> ((((cur) & TTLBIT) != 0) -> 0 : (cur)) : \
       ((hkind[o] == K_INCR) -> (((cur) == 0) -> 0 : (cur) + 1) : (cur)))))

/* Is the history of key kk linearizable? OK / NOT_FOUND calls and GETs must all be placed,
 * TIMEOUT and crashed writes may be placed (anywhere after their invocation) or not, definite
 * failures never; a call is placed after every call that returned before it was invoked. A
 * depth-first search over orders. */
inline lincheck(kk)
{
    mand = 0; optl = 0; x = 1;
    do
    :: x == NOPS -> break
    :: else ->
        if
        :: hinv[x] && (hkey[x] == kk || hkind[x] == K_TICK) ->
            if
            :: hres[x] == R_OK || hres[x] == R_NF -> mand = mand | (1 << x)
            :: (hres[x] == R_TMO || hres[x] == R_NONE) && hkind[x] != K_GET && hkind[x] != K_FIN ->
                optl = optl | (1 << x)
            :: else
            fi
        :: else
        fi;
        x++
    od;
    sp = 0; smask[0] = 0; sval[0] = initv[kk]; snext[0] = 1; linok = 0;
    do
    :: linok || sp == NONE -> break
    :: else ->
        if
        :: (smask[sp] & mand) == mand -> linok = 1
        :: else ->
            x = snext[sp];
            do
            :: x >= NOPS -> break
            :: x < NOPS && IN_MASK(mand | optl, x) && !IN_MASK(smask[sp], x) &&
               ((hprec[x] & mand & ~smask[sp]) == 0) && SPEC_OK(x, sval[sp]) -> break
            :: else -> x++
            od;
            if
            :: x >= NOPS -> if :: sp == 0 -> sp = NONE :: else -> sp-- fi
            :: else ->
                snext[sp] = x + 1;
                nv = SPEC_NEXT(x, sval[sp]);
                smask[sp + 1] = smask[sp] | (1 << x);
                sval[sp + 1] = nv; snext[sp + 1] = 1; sp++
            fi
        fi
    od;
    if
    :: !linok ->
        printf("NOT LINEARIZABLE: key %d, initial value %d\n", kk, initv[kk]);
        x = 1;
        do
        :: x == NOPS -> break
        :: else ->
            if
            :: hinv[x] && (hkey[x] == kk || hkind[x] == K_TICK) ->
                printf("  op %d kind %d (1 put,2 del,3 incr,4 get,5 final read,6 eviction,7 ttl tick) arg %d ttl %d -> outcome %d (1 ok,2 not found,3 fabric error,4 timeout,5 no memory,6 invalid,0 crashed) value %d, after ops mask %d\n",
                       x, hkind[x], harg[x], httl[x], hres[x], hval[x], hprec[x])
            :: else
            fi;
            x++
        od
    :: else
    fi;
    CHECK(linok);
    x = 0; sp = 0; nv = 0
}

/* the final read of key kk (op id o): what a GET returns once everything has settled */
inline final_read(kk, o)
{
    hkind[o] = K_FIN; hkey[o] = kk; hinv[o] = 1; hprec[o] = 255 ^ (1 << o);
    hres[o] = R_NF; hval[o] = 0;
    found = 0; i = 0;
    do
    :: i == 2 || found -> break
    :: else ->
        w = ite[POS(kk, i)];
        if
        :: w != 0 && WKEY(w) == kk && d[WSLOT(w)].key == kk ->
            found = 1;
            CHECK(d[WSLOT(w)].st & COMM);                   /* invariant 4: no stuck key */
            if
            :: !d[WSLOT(w)].tomb && !DEAD(d[WSLOT(w)].ttl) ->
                hres[o] = R_OK; hval[o] = d[WSLOT(w)].val;
                CHECK(!DEFINITE_FAIL(hres[d[WSLOT(w)].creator]))   /* invariant 3 */
            :: else
            fi
        :: else
        fi;
        i++
    od;
    i = 0; w = 0
}

inline final_phase()
{
    /* every client is done or dead; time passes until every grace period is over */
    excused = (crashes > 0 || faults > 0 || sweepowed);
    stop = 1;
    epoch = MAXE + GRACE + 1;
    faults = MAXF; crashes = MAXC;          /* recovery itself runs without faults */
    node = 0;
    /* recovery: takeovers of everything left uncommitted in the index (what any later
     * operation on those keys would do) */
    r = 0;
    do
    :: r == 3 -> break
    :: else ->
        p = 0;
        do
        :: p == NI -> break
        :: else ->
            w = ite[p];
            if
            :: w != 0 && !(d[WSLOT(w)].st & COMM) ->
                dte_read(w);
                takeover(p, w)
            :: else
            fi;
            p++
        od;
        r++
    od;
    clear_view();
    /* invariant 4a: no key stuck */
    p = 0;
    do
    :: p == NI -> break
    :: else -> CHECK(ite[p] == 0 || (d[WSLOT(ite[p])].st & COMM)); p++
    od;
    /* the recyclers run to the end */
    p = 0;
    do
    :: p == NS -> break
    :: else -> if :: d[p].rec -> reclaim(p) :: else fi; p++
    od;
    /* invariant 4b: no leaked slot (neither free, nor linked, nor recycled-pending). Runs in
     * which a call crashed, ended TIMEOUT or met a fabric error may leave some to the leak
     * sweep (engine.c nessie_sweep_leaks), by design; all others must leave none. */
    x = 1;
    do
    :: x == NOPS -> break
    :: else -> if :: hinv[x] && (hres[x] == R_TMO || hres[x] == R_NONE) -> excused = 1 :: else fi; x++
    od;
    leaked = 0;
    p = 0;
    do
    :: p == NS -> break
    :: else ->
        found = d[p].onfree;
        i = 0;
        do
        :: i == NI -> break
        :: else ->
            if :: ite[i] != 0 && WSLOT(ite[i]) == p -> found = 1 :: else fi;
            i++
        od;
        if :: !found -> leaked++ :: else fi;
        p++
    od;
    i = 0; found = 0;
    CHECK(leaked == 0 || excused);
    /* the final reads and the linearizability check, per key */
    final_read(KA, 6);
    final_read(KB, 7);
    lincheck(KA);
    lincheck(KB)
}

/* ---------------------------------------------------------------------------------------- */
/* SCENARIOS                                                                                  */
/* ---------------------------------------------------------------------------------------- */
inline defop(o, kind, kk, a)
{
    hkind[o] = kind; hkey[o] = kk; harg[o] = a
}

/* an initial committed entry of key kk, value vv, in slot s, linked at ITE p */
inline initial(s, kk, vv, p)
{
    d[s].st = COMM; d[s].gen = 0; d[s].key = kk; d[s].val = vv; d[s].everlinked = 1;
    ite[p] = W(s, kk, 0);
    initv[kk] = vv
}

/* free lists in address order of allocation (slab.c grow_class pushes in reverse) */
inline free_lists()
{
    p = NS;
    do
    :: p == 0 -> break
    :: else -> p--;
        if
        :: d[p].st == 0 ->
#ifdef OLD_DESIGN
            push_free(p)                 /* stack: the last pushed (lowest) is popped first */
#else
            skip
#endif
        :: else
        fi
    od;
#ifndef OLD_DESIGN
    p = 0;
    do
    :: p == NS -> break
    :: else -> if :: d[p].st == 0 -> push_free(p) :: else fi; p++
    od;
#endif
    p = 0
}

init
{
    LOCALS;
    byte node, ncl;
    atomic {
        hres[0] = R_OK;                  /* op 0: the initial state */
#if SCEN == 1
        /* faults: a PUT and a DELETE racing a GET, one fabric error, one crash */
        initial(0, KA, 1, 0);
        free_lists();
        defop(1, K_PUT, KA, 2);
        defop(2, K_GET, KA, 0);
        defop(3, K_DEL, KA, 0);
        run client(0, 1, 0);
        run client(1, 2, 3);
        ncl = 2;
#elif SCEN == 2
        /* ABA: an INCR stalls between its timer check and its CAS while two PUTs on the
         * slot's owner node replace the entry twice (the second reuses the first's slot) */
        initial(0, KA, 1, 0);
        free_lists();
        defop(1, K_INCR, KA, 0);
        defop(2, K_PUT, KA, 2);
        defop(3, K_PUT, KA, 3);
        run client(1, 1, 0);
        run client(0, 2, 3);
        ncl = 2;
#elif SCEN == 3
        /* cuckoo: B holds I_1 of A, A sits at its second position; DELETE B lets a PUT of A
         * take I_1 and clear its old entry (step 4) while a GET reads A */
        initial(0, KB, 5, 0);
        initial(2, KA, 1, 1);
        free_lists();
        defop(1, K_DEL, KB, 0);
        defop(2, K_PUT, KA, 2);
        defop(3, K_GET, KA, 0);
        run client(0, 1, 0);
        run client(1, 2, 0);
        run client(1, 3, 0);
        ncl = 3;
#elif SCEN == 4
        /* two writers on one key, each on its own node, with a fabric error and a crash */
        initial(0, KA, 1, 0);
        free_lists();
        defop(1, K_PUT, KA, 2);
        defop(2, K_INCR, KA, 0);
        run client(0, 1, 0);
        run client(1, 2, 0);
        ncl = 2;
#elif SCEN == 5
        /* a writer's own entry is cleared by another's step 4 and its slot reused (hole c):
         * A sits at its second position behind B; DELETE B and two PUTs of A */
        initial(0, KB, 5, 0);
        initial(2, KA, 1, 1);
        free_lists();
        defop(1, K_PUT, KA, 2);
        defop(2, K_DEL, KB, 0);
        defop(3, K_PUT, KA, 3);
        run client(0, 1, 0);
        run client(1, 2, 3);
        ncl = 2;
#elif SCEN == 6
        /* hole c hunting ground: W1's entry is cleared by W2's step 4 and its slot reused by
         * W3 on W1's node while W1 is stalled before its rollback */
        initial(0, KB, 5, 0);
        initial(2, KA, 1, 1);
        free_lists();
        defop(1, K_PUT, KA, 2);
        defop(2, K_DEL, KB, 0);
        defop(3, K_PUT, KA, 3);
        defop(4, K_PUT, KB, 4);
        hnb[3] = 1; hnb[4] = 2;
        run client(0, 1, 0);
        run client(1, 2, 3);
        run client(0, 4, 0);
        ncl = 3;
#elif SCEN == 7
        /* MIGRATE (finding 1): A's positions (0,1) hold B (at its second position) and C, so a
         * PUT of A moves B from ITE 0 to ITE 2 while GETs of B read ITE 2 first */
        initial(2, KB, 5, 0);
        initial(3, KC, 9, 1);
        free_lists();
        defop(1, K_PUT, KA, 2);
        defop(2, K_GET, KB, 0);
        defop(3, K_GET, KB, 0);
        run client(0, 1, 0);
        run client(1, 2, 3);
        ncl = 2;
#elif SCEN == 8
        /* the memory-wait extension (finding 2): the PUT finds its node's only other slot on
         * its way back (recycled at epoch 0, the clock starts at 1): it waits, which extends
         * its deadline by EXT, then publishes; a GET and a DELETE of A on the other node come
         * once an entry of epoch 1 is an orphan under today's grace */
        epoch = 1;
        lb[0] = 255; lb[1] = 255; lb[2] = 255; lb[3] = 255; lb[4] = 255;
        initial(0, KA, 1, 0);
        d[1].st = COMM; d[1].rec = 1; d[1].rmark = 0; d[1].key = KA; d[1].val = 0; d[1].everlinked = 1;
        free_lists();
        defop(1, K_PUT, KA, 2);
        defop(2, K_GET, KA, 0);
        defop(3, K_DEL, KA, 0);
        hnb[2] = 1 + OPT + 2; hnb[3] = 1 + OPT + 2;
        run client(0, 1, 0);
        run client(1, 2, 3);
        ncl = 2;
#elif SCEN == 9
        /* TTL (finding 7): A = 1 (no exptime) at its second position; in front of it, at ITE 0,
         * the entry of a PUT A=2 with an exptime (op 1) whose writer crashed right after its
         * candidate CAS (ITE 0 was empty: a SET takes the first empty position), before its
         * step 4 could clear A = 1: the state scenario 5 reaches with a crash, taken as the
         * start to keep the search small. Once that orphan is older than the grace, a PUT A=3
         * and two GETs of A; the TTL clock ticks at any moment from then on. */
        initial(2, KA, 1, 1);
        d[0].st = BUSY; d[0].gen = 1; d[0].key = KA; d[0].val = 2; d[0].ttl = 1; d[0].created = 0;
        d[0].creator = 1; d[0].everlinked = 1;
        ite[0] = W(0, KA, 1);
        free_lists();
        defop(1, K_PUT, KA, 2); httl[1] = 1; hinv[1] = 1; hres[1] = R_NONE;
        defop(2, K_PUT, KA, 3);
        defop(3, K_GET, KA, 0);
        defop(4, K_GET, KA, 0);
        hnb[2] = GRACE; hnb[3] = GRACE;
        run client(1, 2, 0);
        run client(1, 3, 4);
        run ttlclock();
        ncl = 2;
#else
#error "unknown SCEN"
#endif
        run clock();
        run recycler();
    }
    (nfin == ncl);
    atomic { final_phase() }
}
