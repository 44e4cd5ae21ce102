/*
 * elastic.pml - a SPIN model of an online add of a node (issue 30): a key's position moves from
 * an old node's index to the new node's while calls on the key are in flight, through the three
 * views of the design (../kvstore/memory/keys.c, the transition plan; protocol/move.c, the mover;
 * reception/views.c, who writes which view when). A retire is the mirror image (its leaving
 * positions are on the node that goes, its arriving ones on the nodes that stay) and runs through
 * the same three views, so the same rules are checked here for both.
 *
 * nessie.pml checks the protocol inside one placement (generations, CAS naming a life, takeovers,
 * time); views.pml checks a fence. This model takes both as given and checks what a change of
 * placement adds: calls of one key under two placements at once, and an entry moved between
 * them. So a call here is coarser: a GET reads its positions in one step (its double collect
 * makes that atomic); a write's forward pass is one step, its candidate CAS, each step-4
 * duplicate clearing, its reverse pass and its commit are steps of their own; a migration's copy, its source's
 * removal and its commit are steps of their own.
 *
 * The cluster: nodes 0 and 1 run one client each (node 0: DELETE, GET, PUT; node 1: GET, PUT,
 * GET); node Y joins. One key A, two ways: way 1 is
 * always P0 (node 0's index: STAY); way 0 is P1 (node 1's: LEAVING) before the add and PY (Y's:
 * ARRIVING) after it. Entries of other keys come and go at P0 and P1 (the process `others`), so
 * that A's inserts sometimes find A's early positions taken and go further along. At the start
 * A = 1 is committed at P1.
 *
 * The plans (keys.c): view 1, the old placement, reads [P1, P0]; views 2 and 3 read the union T,
 * the old positions first, then the arriving ones: [P1, P0, PY]; view 4, the new placement,
 * reads its own way order [PY, P0] (so between view 4's first read and the last node's, two
 * orders of the same positions meet). Every call acts on the newest view its node has read.
 *   view 2, E1 announce: policy A: an arriving position is never an insert target;
 *   view 3, E2 move:     policy B: a leaving position is never an insert target (updates in
 *                        place still are); each node's mover pass starts V + F after its node's
 *                        first read of view 3 and moves A from P1 to PY (a MIGRATE);
 *   view 4, E3 commit.
 * The service writes view 3 only once every node acked view 2 (its attempts under view 1 are
 * over), and view 4 only once every node acked view 3 (its mover pass is over).
 *
 * Time is not modelled; the wait before a mover starts is modelled by what it guarantees
 * (membership.h, "Acting on a view"), as views.pml does. V + F after its node's first read of
 * view 3, no attempt under an older view is in flight (QUIET), and from then on a node that has
 * not read view 3 starts no attempt (LEASE: its lease ended before then); one attempt's span
 * later (E + F), every attempt that was in flight at that moment has ended too (strag).
 *
 * Switches: each puts one rule of the design out, and each must fail (model/run.sh):
 *   -DBUG_ANNOUNCE_WRITES  under view 2, inserts may take the arriving position (policy A off)
 *   -DBUG_E2_EARLY         view 3 is written before every node acked view 2
 *   -DBUG_INSERT_LEAVING   under view 3, inserts may take the leaving position (policy B off)
 *   -DBUG_MOVER_EARLY      the mover starts at its node's first read of view 3 (no V + F)
 *   -DBUG_MOVER_ONE_WAIT   the mover starts V + F after that read, not one attempt's span later
 *   -DBUG_COMMIT_EARLY     view 4 is written before every mover pass is over
 *
 * What is checked:
 *   1. No GET returns a value older than the newest acknowledged one (written by a call that had
 *      returned OK, or returned by a GET that had returned, before this GET began), and a GET
 *      (or a DELETE) finds A absent only when a DELETE committed at or after that value. Nothing
 *      is excused: an add loses nothing.
 *   2. At the end (every call returned, view 4 read by every node, the mover idle) A's value is
 *      the newest committed one under the new placement, nothing of A is left at the leaving
 *      position, and no entry is left in progress (stuck).
 */

#define P0    0         /* node 0's index position: A's way 1 in every view (STAY) */
#define P1    1         /* node 1's: A's way 0 before the add (LEAVING) */
#define PY    2         /* Y's: A's way 0 after the add (ARRIVING) */
#define NP    3
#define BUSY  1
#define COMM  2
#define TOMB  4         /* a DELETE's entry (in progress; its commit empties the position) */
#define OTHER 5         /* an entry of another key */
#define NV    6         /* value ids: 1 the initial one, 2 and 3 the clients' PUTs */
#define LASTV 4

#define PLEN(k)    (((k) == 2 || (k) == 3) -> 3 : 2)
#define PLAN(k, i) ((k) == 1 -> ((i) == 0 -> P1 : P0) : \
                    ((k) == 4 -> ((i) == 0 -> PY : P0) : \
                     ((i) == 0 -> P1 : ((i) == 1 -> P0 : PY))))
#ifdef BUG_ANNOUNCE_WRITES
#define ALLOW_A(p) true
#else
#define ALLOW_A(p) ((p) != PY)
#endif
#ifdef BUG_INSERT_LEAVING
#define ALLOW_B(p) true
#else
#define ALLOW_B(p) ((p) != P1)
#endif
#define ALLOW(k, p) ((k) == 2 -> ALLOW_A(p) : ((k) == 3 -> ALLOW_B(p) : true))
#define ISA(p)      (ev[p] != 0 && ev[p] != OTHER)

byte pub = 1;           /* the newest view written to the coordination service */
byte rd[2] = 1;         /* per node: the newest view it has read (and acts on) */
byte ack[2] = 1;        /* per node: the newest view it has done all that view asks for */
byte av[2];             /* per client: the view its attempt in flight acts under (0: none) */
byte acted = 1;         /* the newest view a lease-guarded action (a mover's start) was taken in */
bool mvgo[2];           /* per node: its mover pass has started */
bool armed;             /* node 1's mover: its V + F wait is over (QUIET held, the lease acted) */
bool strag[2];          /* per client: its attempt in flight when node 1's mover was armed */
#define ENDATT(c)       av[c] = 0; strag[c] = false
bool mvdone[2];         /* per node: its mover pass is over */
byte done = 0;

/* the index: per position, the entry's value id (0: empty), state, previous version (for an
 * entry in progress), and whether it is a migration's copy. A CAS compares all four: value ids
 * are unique per write, so they name the DTE an ITE word names (an empty word is 0 in the code
 * too, so an empty position emptied again is the same word there as here). */
byte ev[NP], est[NP], epv[NP];
bool ecopy[NP];

/* the mover (node 1's; node 0 has no leaving position of A): 0 idle, 1 its copy is at PY, 2 the
 * source is out (the copy waits for its commit); the source's value it copied (its word: the
 * value committed, no previous version) */
byte mv = 0, mvv;
#define SRCLINKED (ev[P1] == mvv && est[P1] == COMM && epv[P1] == 0 && !ecopy[P1])

/* ghosts: commit order (seqof[id]), the newest commit, the newest value acknowledged (by an OK
 * write or a returned GET), the newest committed DELETE */
byte seqof[NV];
byte curseq = 1, ackseq = 1, seenseq = 1, lastdel = 0;

#define QUIET(k)  ((av[0] == 0 || av[0] >= (k)) && (av[1] == 0 || av[1] >= (k)))
#define LEASE(n)  (rd[n] >= acted)
#ifdef BUG_E2_EARLY
#define E2_OK     true
#else
#define E2_OK     (ack[0] >= 2 && ack[1] >= 2)
#endif
#ifdef BUG_COMMIT_EARLY
#define E3_OK     true
#else
#define E3_OK     (ack[0] >= 3 && ack[1] >= 3)
#endif

/* ---- reachability probes ------------------------------------------------------------------ */
/* -DPROBE=n turns one situation the checks are about into an assertion that it never happens:
 * run.sh expects each to fail, so a bound or a guard that made it unreachable (and the checks
 * vacuous there) shows. 1: the final audit runs; 2: A is inserted at the arriving position
 * before the commit; 3: the mover takes A's source out; 4: a GET under the new placement while
 * the other node still reads the union; 5: a PUT's step 4 clears a duplicate. */
#ifndef PROBE
#define PROBE 0
#endif
#define REACHED(k, c) if :: PROBE == (k) -> assert(!(c)) :: else fi

inline clear(p)
{
    ev[p] = 0; est[p] = 0; epv[p] = 0; ecopy[p] = false
}

/* ---- the coordination service -------------------------------------------------------------- */
active proctype service()
{
end:
    do
    :: atomic { pub == 1 -> pub = 2; printf("VIEW 2: Y announced (E1)\n") }
    :: atomic { pub == 2 && E2_OK -> pub = 3; printf("VIEW 3: move (E2)\n") }
    :: atomic { pub == 3 && E3_OK -> pub = 4; printf("VIEW 4: Y live, new placement (E3)\n") }
    od
}

/* ---- other keys ----------------------------------------------------------------------------- */
/* Their inserts and deletes at P0 and P1 (positions of theirs that stay: P1 is leaving for A,
 * not for every key). A bounded number of inserts. */
active proctype others()
{
    byte budget = 2;
end:
    do
    :: atomic { budget > 0 && ev[P0] == 0 -> ev[P0] = OTHER; est[P0] = COMM; budget-- }
    :: atomic { budget > 0 && ev[P1] == 0 -> ev[P1] = OTHER; est[P1] = COMM; budget-- }
    :: atomic { ev[P0] == OTHER -> clear(P0) }
    :: atomic { ev[P1] == OTHER -> clear(P1) }
    od
}

/* ---- a node's daemon: reading views, acking them, the mover -------------------------------- */
proctype daemon(byte n)
{
end:
    do
    :: atomic { rd[n] < pub -> rd[n] = pub; printf("N%d reads view %d\n", n, rd[n]) }
    /* E1's ack: V + F after the first read, this node's attempts under view 1 are over */
    :: atomic { ack[n] < 2 && rd[n] >= 2 && (av[n] == 0 || av[n] >= 2) -> ack[n] = 2 }
    /* the mover pass starts V + F after the first read of view 3 */
#ifdef BUG_MOVER_EARLY
    :: atomic { !mvgo[n] && rd[n] >= 3 -> mvgo[n] = true; mvdone[n] = (n == 0) }
#else
    :: atomic { n == 0 && !mvgo[0] && rd[0] >= 3 && QUIET(3) ->
                mvgo[0] = true; acted = 3; mvdone[0] = true }
    :: atomic { n == 1 && !armed && rd[1] >= 3 && QUIET(3) ->
                armed = true; acted = 3; strag[0] = (av[0] != 0); strag[1] = (av[1] != 0) }
    /* ... and then one attempt's span more: every attempt in flight at the end of the first wait
     * has ended. Such an attempt (policy B) may have passed P1 empty while a policy-A insert put
     * A there; its reverse pass must see A at P1 before the mover moves it behind its candidate
     * (to PY), or it commits ahead of the older copy, which the new placement's order then reads
     * first (the model found this: -DBUG_MOVER_ONE_WAIT) */
#ifdef BUG_MOVER_ONE_WAIT
    :: atomic { n == 1 && armed && !mvgo[1] -> mvgo[1] = true }
#else
    :: atomic { n == 1 && armed && !mvgo[1] && !strag[0] && !strag[1] -> mvgo[1] = true }
#endif
#endif
    /* node 1's pass over P1: judged only when A is not there or committed there */
    :: atomic { n == 1 && mvgo[1] && !mvdone[1] && mv == 0 && !ISA(P1) -> mvdone[1] = true;
                printf("N1 mover: pass over\n") }
    :: atomic { n == 1 && mvgo[1] && !mvdone[1] && mv == 0 && ISA(P1) && est[P1] == COMM &&
                ev[PY] == 0 ->
                /* MIGRATE's copy at the destination, in progress, naming its source */
                mvv = ev[P1];
                ev[PY] = mvv; est[PY] = BUSY; epv[PY] = mvv; ecopy[PY] = true;
                mv = 1; printf("N1 mover: copy of %d at PY\n", mvv) }
    :: atomic { n == 1 && mv == 1 ->
                if
                :: SRCLINKED ->
                    clear(P1); mv = 2; REACHED(3, true); printf("N1 mover: source out\n")
                :: else ->      /* the source changed (updated in place, deleted): undo */
                    assert(ev[PY] == mvv && ecopy[PY]); clear(PY);
                    mv = 0; printf("N1 mover: source changed, copy undone\n")
                fi }
    :: atomic { n == 1 && mv == 2 ->
                assert(ev[PY] == mvv && ecopy[PY] && est[PY] == BUSY);
                est[PY] = COMM; epv[PY] = 0; ecopy[PY] = false; mv = 0;
                printf("N1 mover: copy committed\n") }
    /* E2's ack: the mover pass is over */
    :: atomic { ack[n] == 2 && mvdone[n] -> ack[n] = 3 }
    od
}

/* ---- calls ----------------------------------------------------------------------------------*/
/* An attempt that fails (an entry in progress, a lost CAS, no room) starts again at once: a
 * retry that finds the same state is the same state (SPIN merges it), so no wait is needed for
 * safety, and the state holds no snapshot. */
#define NEED (ackseq > seenseq -> ackseq : seenseq)

inline get_call(n)
{
    need = NEED;
    printf("T%d GET A (needs seq >= %d)\n", n, need);
    do
    :: if
        :: timeout -> goto giveup
        :: atomic { LEASE(n) ->
            k = rd[n]; res = 0; busy = false; i = 0;
            do
            :: i < PLEN(k) ->
                p = PLAN(k, i);
                if
                :: ISA(p) && est[p] == COMM -> res = ev[p]; break
                :: ISA(p) && est[p] == BUSY && ecopy[p] ->
                    /* a migration's copy: its source's value while the source is linked */
                    if
                    :: SRCLINKED && mv == 1 -> res = epv[p]
                    :: else -> busy = true
                    fi; break
                :: ISA(p) && est[p] == BUSY && !ecopy[p] && epv[p] != 0 -> res = epv[p]; break
                :: ISA(p) && est[p] == BUSY && !ecopy[p] && epv[p] == 0 -> busy = true; break
                :: else -> i++
                fi
            :: else -> break
            od;
            i = 0; p = 0;
            if
            :: busy -> skip
            :: !busy && res != 0 ->
                printf("T%d GET A -> %d (seq %d) under view %d\n", n, res, seqof[res], k);
                assert(seqof[res] >= need);
                seenseq = (seqof[res] > seenseq -> seqof[res] : seenseq);
                REACHED(4, k == 4 && rd[1 - n] < 4)
            :: !busy && res == 0 ->
                printf("T%d GET A -> absent under view %d (last delete seq %d)\n", n, k, lastdel);
                assert(lastdel >= need);
                seenseq = (lastdel > seenseq -> lastdel : seenseq);
                REACHED(4, k == 4 && rd[1 - n] < 4)
            fi
        }
        fi;
        if
        :: busy -> skip
        :: else -> break
        fi
    od
}

/* A write (w: a PUT's value, or TOMB: a DELETE): forward pass (step 2: the first entry holding
 * A, else, for a PUT, the first empty position the view's policy lets it take), candidate CAS
 * (step 3), step 4 (duplicates of A further along the plan: a committed one is cleared, made the
 * candidate's previous version if the candidate was empty; one in progress makes the call take
 * its candidate back and start again), the reverse pass (step 5), commit (step 6). */
inline write_call(n, w)
{
    need = NEED;
    printf("T%d write A=%d (%d: DELETE)\n", n, w, TOMB);
    do
    :: if
        :: timeout -> goto giveup
        :: atomic { LEASE(n) ->
            av[n] = rd[n]; k = av[n]; t = NP; ti = 0; fail = false; busy = false; i = 0;
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
                printf("T%d DELETE A -> not found under view %d\n", n, k);
                assert(lastdel >= need);
                seenseq = (lastdel > seenseq -> lastdel : seenseq); ENDATT(n)
            :: t == NP && w != TOMB -> fail = true      /* no room: wait for a change */
            :: t != NP && ISA(t) && est[t] == BUSY -> busy = true
            :: t != NP && !(ISA(t) && est[t] == BUSY) ->
                tv = ev[t]; ts = est[t]; tp = epv[t]; tc = ecopy[t];
                pv = (ISA(t) -> ev[t] : 0)
            fi;
            if :: fail || busy -> ENDATT(n) :: else fi;
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
                :: ev[t] == tv && est[t] == ts && epv[t] == tp && ecopy[t] == tc ->
                    ev[t] = w; est[t] = BUSY; epv[t] = pv; ecopy[t] = false;
                    printf("T%d candidate %d at P%d (prev %d)\n", n, w, t, pv);
                    REACHED(2, t == PY && w != TOMB && pub < 4)
                :: else -> busy = true; ENDATT(n)
                fi
            }
            if
            :: busy -> skip
            :: else ->
                /* step 4: duplicates of A further along this view's plan */
                j = ti + 1; dv = 0;
                do
                :: j < PLEN(k) ->
                    atomic {
                        p = PLAN(k, j);
                        if
                        :: ISA(p) && est[p] == BUSY -> busy = true
                        :: ISA(p) && est[p] == COMM ->
                            if
                            :: epv[t] == 0 && dv == 0 ->  /* made our previous version */
                                dv = ev[p]; dp = epv[p]; epv[t] = dv
                            :: else
                            fi;
                            clear(p); REACHED(5, true)
                        :: else
                        fi;
                        j++
                    }
                    if :: busy -> break :: else fi
                :: else -> break
                od;
                /* step 5: the reverse pass: the positions before the last of the plan read again;
                 * one that holds A now (another write's entry, ahead of ours or behind it) is a
                 * change, and the attempt starts again (the code keeps its entry for the next
                 * attempt to adopt or abandon; taking it back here is one of those) */
                if
                :: !busy ->
                    atomic {
                        j = 0;
                        do
                        :: j < PLEN(k) - 1 ->
                            p = PLAN(k, j);
                            if :: p != t && ISA(p) -> busy = true; break :: else -> j++ fi
                        :: else -> break
                        od
                    }
                :: else
                fi;
                if
                :: busy ->
                    /* take the candidate back out: the word it replaced, or the duplicate it
                     * adopted (unlinked meanwhile: put back where the candidate is) */
                    atomic {
                        assert(ev[t] == w && est[t] == BUSY);
                        if
                        :: dv != 0 -> ev[t] = dv; est[t] = COMM; epv[t] = dp; ecopy[t] = false
                        :: else -> ev[t] = tv; est[t] = ts; epv[t] = tp; ecopy[t] = tc
                        fi;
                        ENDATT(n)
                    }
                :: else ->
                    /* step 6: commit */
                    atomic {
                        assert(ev[t] == w && est[t] == BUSY);
                        curseq++; ackseq = curseq; ENDATT(n);
                        if
                        :: w == TOMB -> clear(t); lastdel = curseq
                        :: else -> est[t] = COMM; epv[t] = 0; seqof[w] = curseq
                        fi;
                        printf("T%d %d OK (seq %d, at P%d, view %d)\n", n, w, curseq, t, k)
                    }
                    break
                fi
            fi
        fi
    od
}

#define LOCALS byte need, res, k, i, j, p, t, ti, pv, tv, ts, tp, dv, dp; \
               bool fail, busy, tc
#define CLEARCALL atomic { need = 0; res = 0; k = 0; i = 0; j = 0; p = 0; t = 0; ti = 0; pv = 0; \
                           tv = 0; ts = 0; tp = 0; dv = 0; dp = 0; \
                           fail = false; busy = false; tc = false }

proctype client0()
{
    LOCALS;
    byte n = 0;
    write_call(n, TOMB); CLEARCALL;
    get_call(n); CLEARCALL;
    write_call(n, 2); CLEARCALL;
    goto fin;
giveup:
    atomic { ENDATT(n); printf("T%d gives up\n", n) }
fin:
    done++
}

proctype client1()
{
    LOCALS;
    byte n = 1;
    get_call(n); CLEARCALL;
    write_call(n, 3); CLEARCALL;
    get_call(n); CLEARCALL;
    goto fin;
giveup:
    atomic { ENDATT(n); printf("T%d gives up\n", n) }
fin:
    done++
}

/* Check 2, once everything is over. */
active proctype audit()
{
    byte q, found;
end:
    atomic {
        done == 2 && pub == 4 && rd[0] == 4 && rd[1] == 4 && mv == 0 ->
        REACHED(1, true);
        assert(!ISA(P1));
        for (q : 0 .. NP - 1) { assert(est[q] != BUSY) }
        found = (ISA(PY) -> ev[PY] : (ISA(P0) -> ev[P0] : 0));
        if
        :: found != 0 -> assert(seqof[found] == curseq)
        :: else -> assert(lastdel == curseq)
        fi
    }
}

init
{
    atomic {
        ev[P1] = 1; est[P1] = COMM; seqof[1] = 1;
        run daemon(0); run daemon(1); run client0(); run client1()
    }
}
