/*
 * retire.pml - a SPIN model of an online retire of a node (issue 30): node R leaves the cluster
 * while calls are in flight, through the three views of elastic.pml (E1 announce, E2 move, E3
 * commit), and what a retire adds to an add: values live in data regions, and entries anywhere
 * may name R's data. After the commit R is unreachable, so every such entry must have been
 * relocated to a survivor's data first, and no call may still be about to read R's data.
 * Checked by model/run.sh (new-retire, bug-retire-*, reach-retire-*).
 *
 * elastic.pml checks how a key's position moves from a leaving index position to an arriving one
 * (policies A and B, the mover's waits V + F and E + F); this model keeps that part coarse (one
 * key, one leaving, one staying and one arriving position, the same plans, policies and mover)
 * and checks what the retire adds. Read elastic.pml's header first: the views, the plans, the
 * waits QUIET / LEASE / strag and the ghosts are the same here, and are not explained again.
 *
 * The cluster: survivors 0 and 1, and R (2), which retires. One key A, two ways: way 1 is always
 * P0 (node 0's index: STAY); way 0 is PR (R's index: LEAVING; every position on R is leaving, for
 * every key) before the retire and P1 (node 1's index: ARRIVING) after it. The plans are
 * elastic.pml's: view 1 reads [PR, P0], views 2 and 3 the union [PR, P0, P1], view 4 [P1, P0].
 * Node 0 runs a client (DELETE, GET, PUT 2), R runs one (PUT 3, GET); node 1 runs the mover of
 * R's index. Other keys' entries come and go at P0, and at PR before the move phase (`others`,
 * a budget of OTHERS inserts), so that A's inserts sometimes go further along. At the start A = 1
 * is committed at P0 naming R's data: written by a call that ran on R when PR was taken by
 * another key (that key has left since), so the survivor's index holds an entry that only the
 * relocation can save.
 *
 * Where a value lives: every entry (ITE word) names one DTE, in R's data or in a survivor's
 * (eR: the bit that tells them apart, part of the word, so a CAS compares it; epR: the same for
 * the previous version an entry in progress names from its DTE). A write's DTE is in the data of
 * the node that runs it.
 *   R1   from R's first read of view 2 (announce), R runs no write that creates a DTE: its calls
 *        are shipped to the survivors. An attempt on R that began under view 1 may still be in
 *        flight until R acks view 2 (one attempt's span), so DTEs in R's data appear until then
 *        (the model: an attempt's DTE is in R's data iff it runs on R and began under view 1).
 *   Move phase (view 3), on each survivor, after the mover's waits (V + F after its first read
 *        of view 3: QUIET, LEASE; then E + F: strag):
 *        - the mover of R's index (node 1 here): elastic.pml's MIGRATE, PR to P1, its copy in
 *          node 1's data (an entry of another key at PR leaves for its own arriving position:
 *          not modelled, it is only taken out);
 *        - the relocation of this survivor's index (node 0: P0; node 1: P1): an entry naming
 *          R's data is read (committed only: the pass stops at an entry in progress until it is
 *          not), a copy with the same value is written to the survivor's data, and the exact word
 *          read is CASed to one naming the copy (committed at once). A writer that read the old
 *          word loses its CAS and starts again.
 *        A survivor acks view 3 when its passes are over (folded into E3_OK).
 *   Commit: view 4 is written once every member acked view 3 (every survivor's passes over). R
 *        stays reachable until the commit is acted on by the lease (no attempt under an older
 *        view in flight, and none starts: views.pml's argument, V + F after the commit is
 *        written): nodes that have not read view 4 still plan under view 3, which reads PR. From
 *        then on R is unreachable (unreach): a read of R's data, or a plan that reads R's index,
 *        is an error, since calls must never fail for a change.
 *
 * A GET is two steps here (elastic.pml's is one): its words (the double collect, where it is
 * linearized and checked) and then the DTE they name (where R's reachability is checked), with
 * its attempt in flight (av) between them, so that a view can change in between. A write reads
 * the DTEs of the entries of A it meets in its forward pass and its step 4, in those steps. A
 * write's commit is on its own DTE (nessie.pml, commit_own): should its entry have been replaced
 * in the index meanwhile (only BUG_RELOCATE_BUSY does that), the commit still succeeds and the
 * call returns OK, and the index keeps whatever replaced it.
 *
 * Switches: each puts one retire rule out, and each must fail:
 *   -DBUG_R1_OFF            R keeps writing DTEs in its own data after it read view 2
 *   -DBUG_RELOCATE_EARLY    the relocation starts at its node's first read of view 2 (announce):
 *                           neither behind E2 (R's view-1 attempts over) nor the mover's waits
 *   -DBUG_RELOCATE_BUSY     the relocation does not stop at an entry in progress: it relocates
 *                           what a reader of it reads (its previous version, when that is in R's
 *                           data) as a committed copy, over the writer's entry
 *   -DBUG_UNREACH_AT_COMMIT R is unreachable as soon as view 4 is written: a node that has not
 *                           read it plans under view 3 (R's index) for up to its lease
 * Variants that pass (checked too, they say what the design does not need):
 *   -DRELOCATE_NO_WAITS     the relocation starts at its node's first read of view 3, without the
 *                           mover's waits: what keeps R's data from growing behind a pass is E2
 *                           (R acked view 2: its view-1 attempts are over) and R1, not V + F or
 *                           E + F, which are about index positions. The code relocates after the
 *                           waits anyway (the mover's pass does both), which this covers too.
 *   -DCOMMIT_SPAN           view 4 is written one attempt's span after the last ack: not needed,
 *                           since R stays reachable until the commit is acted on.
 *   -DOTHERS=n              other keys' inserts (default 1; 0 makes the state space smaller, but
 *                           BUG_RELOCATE_EARLY and probe 2 need an entry of another key at PR)
 *
 * What is checked:
 *   1. As in elastic.pml: no GET returns a value older than the newest acknowledged one, and a
 *      GET or DELETE finds A absent only when a DELETE committed at or after it.
 *   2. After R became unreachable no call reads R's data (RDATA: a GET's DTE read, a write's
 *      read of an entry's DTE in its forward pass or step 4).
 *   3. At the end (every call returned, view 4 read by every node, the mover idle): nothing is
 *      at R's index position (nothing of A, nor of another key), no entry names R's data, none
 *      is in progress, and A's value under the new placement is the newest committed one.
 * The writes' asserts that their candidate is still theirs at the rollback and the commit hold
 * for the design (nothing but BUG_RELOCATE_BUSY replaces an entry in progress).
 *
 * Probes (-DPROBE=n: each must fail, so each situation is reachable and the checks are not
 * vacuous there): 1 a relocation's CAS succeeds; 2 a GET returns a relocated copy; 3 the final
 * audit runs; 4 the mover moves an entry naming R's data; 5 a writer's candidate CAS loses to a
 * relocation (its word differs only in where its DTE is); 6 a GET reads R's data after every
 * member acked view 3 and view 4 was written (R must stay reachable after the commit).
 *
 * Not modelled: a key whose old placement has two positions on survivors (a writer's step 4 may
 * adopt a duplicate naming R's data from a position a relocation has not passed yet and, taking
 * its candidate back, put that word back at its candidate's position, which a relocation may have
 * passed: here the only position after a candidate is the arriving one, which never names R's
 * data). The code closes it otherwise: a survivor that links a previous version naming R's data
 * again (a write's rollback, a takeover) links a committed copy of it in its own data instead
 * (protocol/move.c, proto_retire_copy), and its pass stops only at entries in progress that name
 * R's data or whose previous version does (RPASS here stops at any entry of A in progress). Also
 * not modelled: other keys' entries naming R's data; the shipping of R's calls (they act on R's
 * view here); R's own background work (MIGRATE, eviction, takeovers) after view 2; more than one
 * mover; R failing during the retire (a fence: views.pml).
 *
 * Run as elastic.pml is (model/run.sh):
 *   spin [-D...] -a retire.pml
 *   gcc -O2 -DSAFETY -DCOLLAPSE -DMEMLIM=3500 -DVECTORSZ=2048 -o pan pan.c
 *   ./pan -m300000 -w26
 */

#define N0    0         /* survivor 0: its index holds P0; runs client T0 */
#define N1    1         /* survivor 1: its index holds P1; runs the mover of R's index */
#define NR    2         /* R, retiring: its index holds PR; runs client T1 */
#define P0    0         /* node 0's index position: A's way 1 in every view (STAY) */
#define PR    1         /* R's: A's way 0 before the retire (LEAVING) */
#define P1    2         /* node 1's: A's way 0 after the retire (ARRIVING) */
#define NP    3
#define BUSY  1
#define COMM  2
#define TOMB  4         /* a DELETE's entry (in progress; its commit empties the position) */
#define OTHER 5         /* an entry of another key */
#define NV    6         /* value ids: 1 the initial one, 2 and 3 the clients' PUTs */

#ifndef OTHERS
#define OTHERS 1
#endif

#define PLEN(k)    (((k) == 2 || (k) == 3) -> 3 : 2)
#define PLAN(k, i) ((k) == 1 -> ((i) == 0 -> PR : P0) : \
                    ((k) == 4 -> ((i) == 0 -> P1 : P0) : \
                     ((i) == 0 -> PR : ((i) == 1 -> P0 : P1))))
#define ALLOW_A(p)  ((p) != P1)         /* policy A (view 2): no insert at the arriving position */
#define ALLOW_B(p)  ((p) != PR)         /* policy B (view 3): no insert at the leaving position */
#define ALLOW(k, p) ((k) == 2 -> ALLOW_A(p) : ((k) == 3 -> ALLOW_B(p) : true))
#define ISA(p)      (ev[p] != 0 && ev[p] != OTHER)

/* R1: where a write attempt's DTE is (true: R's data) */
#ifdef BUG_R1_OFF
#define WHERE(n, k) ((n) == NR)
#else
#define WHERE(n, k) ((n) == NR && (k) == 1)
#endif

byte pub = 1;           /* the newest view written to the coordination service */
byte rd[3] = 1;         /* per node: the newest view it has read (and acts on) */
bool ack2[3];           /* nodes 0 and R: view 2 acked (their client's attempts under view 1 are
                         * over); node 1 has no client, so its read is its ack (E2_OK) */
byte av[2];             /* per client (T0 on node 0, T1 on R): the view its attempt in flight
                         * acts under (0: none); GET attempts too */
byte acted = 1;         /* the newest view a lease-guarded action was taken in */
bool armed[2];          /* per survivor: its V + F wait after its first read of view 3 is over */
byte stragm[2];         /* per survivor, a bit per client: its attempt was in flight at arming */
bool armed4;            /* every member acked view 3: the commit's extra span runs */
byte strag4;            /* a bit per client: its attempt was in flight then */
bool unreach;           /* R is unreachable */
#define CBIT(c)   (1 << (c))
#define INFLIGHT  ((av[0] != 0 -> 1 : 0) + (av[1] != 0 -> 2 : 0))
#define ENDATT(c) av[c] = 0; stragm[0] = stragm[0] & ~CBIT(c); stragm[1] = stragm[1] & ~CBIT(c); \
                  strag4 = strag4 & ~CBIT(c)
#define CLI(n)    ((n) == N0 -> 0 : 1)
byte done = 0;

/* the index: per position, the entry's value id (0: empty), state, previous version (for an
 * entry in progress), whether it is a migration's copy, whether its DTE is in R's data, whether
 * its previous version's is. A CAS compares all six (value ids are unique per write; a copy or
 * a relocated copy of a value differs from its source by position or by eR). */
byte ev[NP], est[NP], epv[NP];
bool ecopy[NP], eR[NP], epR[NP];

/* the mover (node 1's, of R's index): 0 idle, 1 its copy is at P1, 2 the source is out; the
 * source's value and where its DTE is */
bool mvgo, mvdone;
byte mv = 0, mvv;
bool mvw;
#define SRCLINKED (ev[PR] == mvv && est[PR] == COMM && epv[PR] == 0 && !ecopy[PR] && eR[PR] == mvw)

/* the relocations (survivor n's of its own position RPOS(n)): rs 0 judging, 1 its copy of value
 * rv written (the CAS next), 2 the pass is over */
#define RPOS(n)   ((n) == N0 -> P0 : P1)
bool rgo[2];
byte rs[2], rv[2];
#define RWORD(q, v) (ev[q] == (v) && est[q] == COMM && epv[q] == 0 && !ecopy[q] && eR[q])
#ifdef BUG_RELOCATE_BUSY
#define RPASS(q)  (!(ISA(q) && (eR[q] || (est[q] == BUSY && epv[q] != 0 && epR[q]))))
#define RELOC_BUSY_ON true
#else
#define RPASS(q)  (!(ISA(q) && (est[q] == BUSY || eR[q])))
#define RELOC_BUSY_ON false
#endif
#if defined(BUG_RELOCATE_EARLY)
#define RELOC_START(n) (rd[n] >= 2)
#elif defined(RELOCATE_NO_WAITS)
#define RELOC_START(n) (rd[n] >= 3)
#else
#define RELOC_START(n) (armed[n] && stragm[n] == 0)
#endif

/* ghosts: commit order (seqof[id]), the newest commit, the newest value acknowledged (by an OK
 * write or a returned GET), the newest committed DELETE; the values relocated (probe 2 only) */
byte seqof[NV];
byte curseq = 1, ackseq = 1, seenseq = 1, lastdel = 0;
byte relv;

#define QUIET(k)  ((av[0] == 0 || av[0] >= (k)) && (av[1] == 0 || av[1] >= (k)))
#define LEASE(n)  (rd[n] >= acted)
#define E2_OK     (ack2[N0] && rd[N1] >= 2 && ack2[NR])
/* every member acked view 3: read it, and (survivors) their passes are over */
#define E3_OK     (rd[N0] >= 3 && rd[N1] >= 3 && rd[NR] >= 3 && rs[N0] == 2 && rs[N1] == 2 && \
                   mvdone)

/* check 2: a read of R's data */
#define RDATA(r)  assert(!((r) && unreach))
#define RIDX(k)   assert(!(unreach && (k) < 4))
#ifdef BUG_UNREACH_AT_COMMIT
#define UNREACH_AT_COMMIT unreach = true
#else
#define UNREACH_AT_COMMIT skip
#endif

/* ---- reachability probes ------------------------------------------------------------------ */
#ifndef PROBE
#define PROBE 0
#endif
#define REACHED(k, c) if :: PROBE == (k) -> assert(!(c)) :: else fi
#define GHOST_REL(v)  if :: PROBE == 2 -> relv = relv | (1 << (v)) :: else fi

inline clear(p)
{
    ev[p] = 0; est[p] = 0; epv[p] = 0; ecopy[p] = false; eR[p] = false; epR[p] = false
}

/* ---- the coordination service -------------------------------------------------------------- */
active proctype service()
{
end:
    do
    :: atomic { pub == 1 -> pub = 2; printf("VIEW 2: retire of R announced (E1)\n") }
    :: atomic { pub == 2 && E2_OK -> pub = 3; printf("VIEW 3: move (E2)\n") }
#ifndef COMMIT_SPAN
    /* the design: the commit is written once every member acked view 3 */
    :: atomic { pub == 3 && E3_OK -> pub = 4; UNREACH_AT_COMMIT;
                printf("VIEW 4: R out, new placement (E3), at the acks\n") }
#else
    /* every member acked view 3: one attempt's span more (every attempt then in flight ends) */
    :: atomic { pub == 3 && E3_OK && !armed4 -> armed4 = true; strag4 = INFLIGHT }
    :: atomic { pub == 3 && armed4 && strag4 == 0 -> pub = 4; UNREACH_AT_COMMIT;
                printf("VIEW 4: R out, new placement (E3)\n") }
#endif
#ifndef BUG_UNREACH_AT_COMMIT
    /* the commit acted on, by the lease: no attempt under an older view in flight, none starts */
    :: atomic { pub == 4 && !unreach && QUIET(4) -> unreach = true; acted = 4;
                printf("R unreachable\n") }
#endif
    od
}

/* ---- other keys ----------------------------------------------------------------------------- */
/* Their inserts and deletes at P0, and at PR before the move phase is written (PR leaves for
 * every key: under view 3 it takes no insert; the mover takes what is left there out, to its
 * key's own arriving position, not modelled). A bounded number of inserts. */
active proctype others()
{
    byte budget = OTHERS;
end:
    do
    :: atomic { budget > 0 && ev[P0] == 0 -> ev[P0] = OTHER; est[P0] = COMM; budget-- }
    :: atomic { budget > 0 && pub < 3 && ev[PR] == 0 -> ev[PR] = OTHER; est[PR] = COMM; budget-- }
    :: atomic { ev[P0] == OTHER -> clear(P0) }
    :: atomic { ev[PR] == OTHER -> clear(PR) }
    od
}

/* ---- a node's daemon: reading views, acking them, the mover, the relocation ---------------- */
proctype daemon(byte n)
{
end:
    do
    :: atomic { rd[n] < pub -> rd[n] = pub; printf("N%d reads view %d\n", n, rd[n]) }
    /* E1's ack: this node's attempts under view 1 are over (on R: the last ones that may create
     * a DTE in R's data, R1) */
    :: atomic { n != N1 && !ack2[n] && rd[n] >= 2 && (av[CLI(n)] == 0 || av[CLI(n)] >= 2) ->
                ack2[n] = true }
    /* a survivor's waits, as elastic.pml's mover's: V + F after its first read of view 3 ... */
    :: atomic { n != NR && !armed[n] && rd[n] >= 3 && QUIET(3) ->
                armed[n] = true; acted = (acted > 3 -> acted : 3); stragm[n] = INFLIGHT }
    /* ... and one attempt's span more; then the mover of R's index starts (node 1) */
    :: atomic { n == N1 && armed[N1] && stragm[N1] == 0 && !mvgo -> mvgo = true }
    /* and the relocation of the survivor's own index */
    :: atomic { n != NR && !rgo[n] && RELOC_START(n) -> rgo[n] = true;
                printf("N%d relocation starts\n", n) }

    /* node 1's mover over PR (elastic.pml's): judged only when PR is empty or committed */
    :: atomic { n == N1 && mvgo && !mvdone && mv == 0 && ev[PR] == 0 -> mvdone = true;
                printf("N1 mover: pass over\n") }
    :: atomic { n == N1 && mvgo && !mvdone && mv == 0 && ev[PR] == OTHER -> clear(PR) }
    :: atomic { n == N1 && mvgo && !mvdone && mv == 0 && ISA(PR) && est[PR] == COMM &&
                ev[P1] == 0 ->
                /* MIGRATE's copy at the destination, in node 1's data, in progress, naming its
                 * source (whose DTE may be in R's data: R is reachable until the commit) */
                mvv = ev[PR]; mvw = eR[PR];
                ev[P1] = mvv; est[P1] = BUSY; epv[P1] = mvv; ecopy[P1] = true;
                eR[P1] = false; epR[P1] = mvw;
                mv = 1; REACHED(4, mvw); printf("N1 mover: copy of %d at P1\n", mvv) }
    :: atomic { n == N1 && mv == 1 ->
                if
                :: SRCLINKED -> clear(PR); mv = 2; printf("N1 mover: source out\n")
                :: else ->      /* the source changed (updated in place, deleted): undo */
                    assert(ev[P1] == mvv && ecopy[P1]); clear(P1);
                    mv = 0; mvv = 0; mvw = false; printf("N1 mover: source changed, undone\n")
                fi }
    :: atomic { n == N1 && mv == 2 ->
                assert(ev[P1] == mvv && ecopy[P1] && est[P1] == BUSY);
                est[P1] = COMM; epv[P1] = 0; ecopy[P1] = false; epR[P1] = false;
                mv = 0; mvv = 0; mvw = false; printf("N1 mover: copy committed\n") }

    /* the relocation over RPOS(n): nothing of R's there (RPASS), the pass is over; a committed
     * entry naming R's data: its copy in this node's data, then the CAS of the exact word read
     * (a change meanwhile: the copy is dropped and the position judged again) */
    :: atomic { n != NR && rgo[n] && rs[n] == 0 && RPASS(RPOS(n)) -> rs[n] = 2;
                printf("N%d relocation: pass over\n", n) }
    :: atomic { n != NR && rgo[n] && rs[n] == 0 && ISA(RPOS(n)) && est[RPOS(n)] == COMM &&
                eR[RPOS(n)] -> rv[n] = ev[RPOS(n)]; rs[n] = 1 }
    :: atomic { n != NR && rs[n] == 1 ->
                if
                :: RWORD(RPOS(n), rv[n]) ->
                    eR[RPOS(n)] = false; GHOST_REL(rv[n]); REACHED(1, true);
                    printf("N%d relocation: %d moved to its data\n", n, rv[n])
                :: else
                fi;
                rv[n] = 0; rs[n] = 0 }
#ifdef BUG_RELOCATE_BUSY
    /* an entry in progress whose previous version is in R's data: that version (what a GET of
     * the entry returns) installed as a committed copy over the writer's entry */
    :: atomic { n != NR && rgo[n] && rs[n] == 0 && ISA(RPOS(n)) && est[RPOS(n)] == BUSY &&
                !ecopy[RPOS(n)] && !eR[RPOS(n)] && epv[RPOS(n)] != 0 && epR[RPOS(n)] ->
                ev[RPOS(n)] = epv[RPOS(n)]; est[RPOS(n)] = COMM; epv[RPOS(n)] = 0;
                epR[RPOS(n)] = false; GHOST_REL(ev[RPOS(n)]);
                printf("N%d relocation: entry in progress replaced\n", n) }
#endif
    od
}

/* ---- calls ----------------------------------------------------------------------------------*/
/* As in elastic.pml, an attempt that fails starts again at once. c: the client (0: T0 on node 0,
 * 1: T1 on R), n: its node. */
#define NEED (ackseq > seenseq -> ackseq : seenseq)
#define OURS(q, v, r) (ev[q] == (v) && est[q] == BUSY && !ecopy[q] && eR[q] == (r))

/* A GET: its words (the double collect, one step: the value and the DTE it is read from are
 * chosen, and checked, here), then that DTE's read, its attempt still in flight. */
inline get_call(c, n)
{
    need = NEED;
    printf("T%d GET A (needs seq >= %d)\n", c, need);
    do
    :: if
        :: timeout -> goto giveup
        :: atomic { LEASE(n) ->
            k = rd[n]; RIDX(k); res = 0; rw = false; busy = false; i = 0;
            do
            :: i < PLEN(k) ->
                p = PLAN(k, i);
                if
                :: ISA(p) && est[p] == COMM ->
                    res = ev[p]; rw = eR[p];
                    REACHED(2, !eR[p] && ((relv >> ev[p]) & 1) == 1); break
                :: ISA(p) && est[p] == BUSY && ecopy[p] ->
                    /* a migration's copy: its source's value while the source is linked */
                    if
                    :: SRCLINKED && mv == 1 -> res = epv[p]; rw = epR[p]
                    :: else -> busy = true
                    fi; break
                :: ISA(p) && est[p] == BUSY && !ecopy[p] && epv[p] != 0 ->
                    res = epv[p]; rw = eR[p] || epR[p]; break   /* its DTE names the version */
                :: ISA(p) && est[p] == BUSY && !ecopy[p] && epv[p] == 0 ->
                    RDATA(eR[p]); busy = true; break
                :: else -> i++
                fi
            :: else -> break
            od;
            i = 0; p = 0;
            if
            :: busy -> skip
            :: !busy && res != 0 ->
                av[c] = k;
                printf("T%d GET A -> %d (seq %d) under view %d\n", c, res, seqof[res], k);
                assert(seqof[res] >= need)
            :: !busy && res == 0 ->
                printf("T%d GET A -> absent under view %d (last delete seq %d)\n", c, k, lastdel);
                assert(lastdel >= need);
                seenseq = (lastdel > seenseq -> lastdel : seenseq)
            fi
        }
        fi;
        if
        :: busy -> skip
        :: else -> break
        fi
    od;
    if
    :: res != 0 ->
        atomic {
            RDATA(rw);
            REACHED(6, rw && pub >= 4);
            seenseq = (seqof[res] > seenseq -> seqof[res] : seenseq);
            ENDATT(c)
        }
    :: else
    fi
}

/* A write (w: a PUT's value, or TOMB: a DELETE), as in elastic.pml: forward pass, candidate CAS
 * (on the exact word read, eR and epR included), step 4, reverse pass, commit. Its DTE is in R's
 * data or not by R1 (wr). */
inline write_call(c, n, w)
{
    need = NEED;
    printf("T%d write A=%d (%d: DELETE)\n", c, w, TOMB);
    do
    :: if
        :: timeout -> goto giveup
        :: atomic { LEASE(n) ->
            av[c] = rd[n]; k = av[c]; RIDX(k); wr = WHERE(n, k);
            t = NP; ti = 0; fail = false; busy = false; i = 0;
            do
            :: i < PLEN(k) ->
                p = PLAN(k, i);
                if
                :: ISA(p) -> t = p; ti = i; break
                :: ev[p] == 0 && w != TOMB && ALLOW(k, p) -> t = p; ti = i; break
                :: else -> i++
                fi
            :: else -> break
            od;
            if
            :: t == NP && w == TOMB ->  /* NOT_FOUND: a read of A's absence */
                printf("T%d DELETE A -> not found under view %d\n", c, k);
                assert(lastdel >= need);
                seenseq = (lastdel > seenseq -> lastdel : seenseq); ENDATT(c)
            :: t == NP && w != TOMB -> fail = true      /* no room: wait for a change */
            :: t != NP && ISA(t) && est[t] == BUSY -> RDATA(eR[t]); busy = true
            :: t != NP && !(ISA(t) && est[t] == BUSY) ->
                RDATA(ISA(t) && eR[t]);                 /* the entry's DTE: its key */
                tv = ev[t]; ts = est[t]; tp = epv[t]; tc = ecopy[t]; tr = eR[t]; tpr = epR[t];
                pv = (ISA(t) -> ev[t] : 0); pr = (ISA(t) -> eR[t] : false)
            fi;
            if :: fail || busy -> ENDATT(c) :: else fi;
            i = 0; p = 0
        }
        fi;
        if
        :: fail || busy -> skip
        :: t == NP -> break     /* a DELETE that found nothing */
        :: else ->
            /* step 3: the candidate CAS, on the exact word read */
            atomic {
                if
                :: ev[t] == tv && est[t] == ts && epv[t] == tp && ecopy[t] == tc &&
                   eR[t] == tr && epR[t] == tpr ->
                    ev[t] = w; est[t] = BUSY; epv[t] = pv; ecopy[t] = false;
                    eR[t] = wr; epR[t] = pr;
                    printf("T%d candidate %d at P%d (prev %d, data on R: %d)\n", c, w, t, pv, wr)
                :: else ->
                    REACHED(5, ev[t] == tv && est[t] == ts && epv[t] == tp && ecopy[t] == tc &&
                               eR[t] != tr);
                    busy = true; ENDATT(c)
                fi
            }
            if
            :: busy -> skip
            :: else ->
                /* step 4: duplicates of A further along this view's plan */
                j = ti + 1; dv = 0; dr = false;
                do
                :: j < PLEN(k) ->
                    atomic {
                        p = PLAN(k, j);
                        if
                        :: ISA(p) && est[p] == BUSY -> RDATA(eR[p]); busy = true
                        :: ISA(p) && est[p] == COMM ->
                            RDATA(eR[p]);
                            if
                            :: OURS(t, w, wr) && epv[t] == 0 && dv == 0 ->
                                /* made our previous version (it may be in R's data) */
                                dv = ev[p]; dr = eR[p]; epv[t] = dv; epR[t] = dr
                            :: else
                            fi;
                            clear(p)
                        :: else
                        fi;
                        j++; p = 0
                    }
                    if :: busy -> break :: else fi
                :: else -> break
                od;
                /* step 5: the reverse pass (elastic.pml's) */
                if
                :: !busy ->
                    atomic {
                        j = 0;
                        do
                        :: j < PLEN(k) - 1 ->
                            p = PLAN(k, j);
                            if :: p != t && ISA(p) -> busy = true; break :: else -> j++ fi
                        :: else -> break
                        od;
                        j = 0; p = 0
                    }
                :: else
                fi;
                if
                :: busy ->
                    /* take the candidate back out: the word it replaced, or the duplicate it
                     * adopted, put back where the candidate is */
                    atomic {
                        if
                        :: OURS(t, w, wr) ->
                            if
                            :: dv != 0 -> ev[t] = dv; est[t] = COMM; epv[t] = 0; ecopy[t] = false;
                                          eR[t] = dr; epR[t] = false
                            :: else -> ev[t] = tv; est[t] = ts; epv[t] = tp; ecopy[t] = tc;
                                       eR[t] = tr; epR[t] = tpr
                            fi
                        :: else -> assert(RELOC_BUSY_ON)   /* replaced: the CAS finds another */
                        fi;
                        ENDATT(c)
                    }
                :: else ->
                    /* step 6: commit (on our own DTE: it succeeds even if our entry was
                     * replaced in the index meanwhile, and the call returns OK) */
                    atomic {
                        curseq++; ackseq = curseq; ENDATT(c);
                        if
                        :: OURS(t, w, wr) ->
                            if
                            :: w == TOMB -> clear(t); lastdel = curseq
                            :: else -> est[t] = COMM; epv[t] = 0; epR[t] = false;
                                       seqof[w] = curseq
                            fi
                        :: else ->
                            assert(RELOC_BUSY_ON);
                            if :: w == TOMB -> lastdel = curseq :: else -> seqof[w] = curseq fi
                        fi;
                        printf("T%d %d OK (seq %d, at P%d, view %d)\n", c, w, curseq, t, k)
                    }
                    break
                fi
            fi
        fi
    od
}

#define LOCALS byte need, res, k, i, j, p, t, ti, pv, tv, ts, tp, dv; \
               bool fail, busy, tc, tr, tpr, wr, pr, dr, rw
#define CLEARCALL atomic { need = 0; res = 0; k = 0; i = 0; j = 0; p = 0; t = 0; ti = 0; pv = 0; \
                           tv = 0; ts = 0; tp = 0; dv = 0; fail = false; busy = false; \
                           tc = false; tr = false; tpr = false; wr = false; pr = false; \
                           dr = false; rw = false }

proctype client0()
{
    LOCALS;
    write_call(0, N0, TOMB); CLEARCALL;
    get_call(0, N0); CLEARCALL;
    write_call(0, N0, 2); CLEARCALL;
    goto fin;
giveup:
    atomic { ENDATT(0); printf("T0 gives up\n") }
fin:
    done++
}

/* R's client: its PUT creates a DTE in R's data only if it begins under view 1 (R1) */
proctype clientR()
{
    LOCALS;
    write_call(1, NR, 3); CLEARCALL;
    get_call(1, NR); CLEARCALL;
    goto fin;
giveup:
    atomic { ENDATT(1); printf("T1 gives up\n") }
fin:
    done++
}

/* Check 3, once everything is over. */
active proctype audit()
{
    byte q, found;
end:
    atomic {
        done == 2 && pub == 4 && rd[N0] == 4 && rd[N1] == 4 && rd[NR] == 4 && mv == 0 ->
        REACHED(3, true);
        assert(!ISA(PR));
        assert(ev[PR] == 0);
        for (q : 0 .. NP - 1) { assert(!eR[q]); assert(est[q] != BUSY) }
        found = (ISA(P1) -> ev[P1] : (ISA(P0) -> ev[P0] : 0));
        if
        :: found != 0 -> assert(seqof[found] == curseq)
        :: else -> assert(lastdel == curseq)
        fi
    }
}

init
{
    atomic {
        /* A = 1, committed at P0, its DTE in R's data */
        ev[P0] = 1; est[P0] = COMM; eR[P0] = true; seqof[1] = 1;
        run daemon(N0); run daemon(N1); run daemon(NR); run client0(); run clientR()
    }
}
