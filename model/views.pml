/*
 * views.pml - a SPIN model of Nessie's membership (issue 28): a node lost from the view while
 * calls are in flight on it, its readmission under a newer incarnation, and its second loss.
 * kvstore/membership/ (membership.h: "Rejoin", "Acting on a view"), memory/keys.c (placement),
 * protocol/scrub.c (lost entries, orphans), reception/members.c (who writes which view when).
 *
 * nessie.pml checks the protocol inside one view (generations, CAS naming a life, takeovers,
 * time); this model takes that as given and checks what a change of view adds: two placements
 * of one key, entries naming a lost node's data, the lost node's index itself, and entries left
 * at positions a readmission takes back. So a call here is coarser: a GET reads its two
 * positions in one step; a write's forward pass is one step, then its candidate CAS and its
 * commit are steps of their own, and a view change can fall between any two of them (a call in
 * flight across a view change).
 *
 * The cluster: nodes 0 and 1 survive and run one client each; node X (2) is lost (view 2),
 * comes back empty under incarnation 2 and is readmitted (view 3), and is lost again (view 4).
 * One key A, two ways: way 1 is always P0 (node 0's index); way 0 is PX (X's index) while X is
 * a member or rejoining, and the position drawn instead of it while X is fenced, P1 (node 1's
 * index). At the start A = 1 is committed at P0 with its data on X (an entry that X's fence
 * leaves behind in a survivor's index).
 *
 * Time is not modelled; the view lease (V + F) is modelled by what it guarantees
 * (membership.h, "Acting on a view"): a node whose lease is over starts no attempt (LEASE: its
 * lease ends before any node acts on a view it has not read), and a view is acted on only once
 * no attempt in flight under an older placement can still land (QUIET: each such attempt posted
 * its last request before its lease ended, and it lands within F). That V is longer than a
 * refresh and an attempt's span is checked by the daemon's config check, not here.
 *
 * Switches: each puts one rule of the design out, and each must fail (model/run.sh):
 *   -DBUG_NO_LEASE        a node acts on a view without its lease: it starts attempts under a
 *                         view others have left, and a view is acted on at its first read
 *   -DBUG_NO_SUSPEND      the first read of a fencing view does not suspend the fenced node
 *   -DBUG_NO_REJOIN_MARK  the first read of a readmitting view leaves the positions drawn
 *                         elsewhere in use until the view is acted on
 *   -DBUG_READMIT_EARLY   the readmitting view is written before every survivor's scrub of the
 *                         fence is done (its lost entries are then read as the new tables')
 *   -DBUG_UNHELD_FENCE    the service writes a view fencing a readmitted node before every
 *                         survivor's scrub has passed the readmission; only the nodes hold it
 *                         (reception/members.c before 65f6556: a node that never acted on
 *                         the readmission, or has it pending, acts on that fence at once)
 *   -DBUG_NO_FENCE_HOLD   a later fence of the readmitted node is written and acted on before
 *                         every survivor's pass after the readmission (its orphans are read)
 *
 * What is checked:
 *   1. No GET returns a value older than the newest acknowledged one (written by a call that had
 *      returned OK, or returned by a GET that had returned, before this GET began), and a GET
 *      misses only when the newest such value was lost: at some moment its only entries were on
 *      X, or named X's data, or lay at positions the newest view does not read.
 *   2. Nothing that named X's old tables is read after X came back ("old tables").
 *   3. At the end no entry in a survivor's index is left in progress (stuck).
 */

#define X     2
#define P0    0         /* node 0's index position: A's way 1 in every view */
#define P1    1         /* node 1's: A's way 0 while X is fenced */
#define PX    2         /* X's: A's way 0 while X is a member (or rejoining) */
#define NP    3
#define BUSY  1
#define COMM  2
#define NID   5         /* value ids: 1 the initial one, 2..4 the clients' writes */

/* views: 1 all members (X at incarnation 1), 2 X gone@1, 3 X live at 2, 4 X gone@2 */
#define FENCES(k) ((k) == 2 || (k) == 4)
#define LASTV 4

byte pub = 1;           /* the newest view written to the coordination service */
byte rd[2] = 1;         /* per survivor: the newest view it has read */
byte inst[2] = 1;         /* per survivor: the view it acts on (installed) */
byte ack[2] = 1;        /* per survivor: the view its scrub pass is over for */
byte xlife = 1;         /* X's incarnation: its tables (2: new and empty) */
bool xup = true;        /* X's memory reachable (false: crashed, or cut off from the fabric) */

/* the index: per position, the entry's value id (0: empty), state, data node, the incarnation
 * of X its data was written in (when on X), and for an entry in progress its previous version
 * (value id, and whether that one's data is on X) */
byte ev[NP], est[NP], edn[NP], elife[NP], epv[NP];
bool epvx[NP];

/* calls in flight, per client (client c runs on node c): the view whose placement its current
 * attempt uses (0: none in flight) */
byte av[2];
byte done = 0;

/* ghosts: commit order (seqof[id], 0: never committed), the newest commit, the newest value
 * acknowledged (by an OK write or a returned GET), the newest value ever lost */
byte seqof[NID];
byte curseq = 1, ackseq = 1, seenseq = 1, lostseq = 0;

/* ---- a node's view of X ------------------------------------------------------------------ */
/* reception/members.c adopt(): a node reads the newest view (rd), skipping any it missed; one
 * that fences X while X is not fenced here, or readmits X while it is, is pending (tgt: the view
 * it will act on) and acted on only once QUIET (and HOLD) allow; any other is acted on at once.
 * A newer view read meanwhile replaces a pending one; one that fences X again while X is still
 * fenced here (the readmission never acted on) is acted on at once: what keeps that safe is
 * that the service writes no view fencing a readmitted node before every survivor's scrub has
 * passed the readmission (WHOLD), which a node can only do after acting on it. */
byte tgt[2] = 1;         /* per survivor: the view it will act on next */
bool mk[2];             /* per survivor: X rejoining (keys.c keeps X's positions; calls wait) */
#define XFENCED(n)  FENCES(inst[n])
#define CHANGES(n)  (FENCES(tgt[n]) != XFENCED(n))                 /* tv fences or readmits X */
#define SUSP(n)     (tgt[n] > inst[n] && FENCES(tgt[n]) && !XFENCED(n))   /* a fence pending */
#ifdef BUG_NO_REJOIN_MARK
#define WAY0(n)     (XFENCED(n) -> P1 : PX)
#define OLDPLACE(n) (mk[n])
#else
#define WAY0(n)     ((XFENCED(n) && !mk[n]) -> P1 : PX)
#define OLDPLACE(n) false
#endif
#ifdef BUG_NO_SUSPEND
#define XREACH(n,al) (xup && xlife == (al) && !XFENCED(n))
#define OLDSUSP(n)   SUSP(n)
#else
#define XREACH(n,al) (xup && xlife == (al) && !XFENCED(n) && !SUSP(n))
#define OLDSUSP(n)   false
#endif
#define REACH(n,p,al) ((p) != PX || XREACH(n, al))
/* the view whose placement an attempt started now acts under (QUIET compares it): the pending
 * one's while its changes are kept from use (X suspended, or its positions kept and waited on) */
#define AV(n) ((tgt[n] > inst[n] && CHANGES(n) && !OLDPLACE(n) && !OLDSUSP(n)) -> tgt[n] : inst[n])

#ifdef BUG_NO_LEASE
#define LEASE(n)  true
#define QUIET(k)  true
#else
#define LEASE(n)  (inst[0] <= rd[n] && inst[1] <= rd[n])
#define QUIET(k)  ((av[0] == 0 || av[0] >= (k)) && (av[1] == 0 || av[1] >= (k)))
#endif
/* a view fencing the readmitted X: written (WHOLD) and acted on (HOLD) only once every
 * survivor's scrub has passed the readmission (acks of view 3) */
#ifdef BUG_NO_FENCE_HOLD
#define HOLD(k)   true
#define WHOLD     true
#else
#define HOLD(k)   ((k) != 4 || (ack[0] >= 3 && ack[1] >= 3))
#ifdef BUG_UNHELD_FENCE
#define WHOLD     true
#else
#define WHOLD     (ack[0] >= 3 && ack[1] >= 3)
#endif
#endif
#ifdef BUG_READMIT_EARLY
#define READMIT_OK true
#else
#define READMIT_OK (ack[0] >= 2 && ack[1] >= 2)
#endif

/* ---- reachability probes ------------------------------------------------------------------ */
/* -DPROBE=n turns one situation the checks are about into an assertion that it never happens:
 * run.sh expects each to fail, so a bound or a guard that made it unreachable (and the checks
 * above vacuous there) shows. 1: a GET under the second fence returns a value; 2: a GET under
 * the second fence after a survivor's scrub took an orphan out; 3: a write's candidate is in
 * place while another node acts on a fence; 4: a GET misses after a loss. */
#ifndef PROBE
#define PROBE 0
#endif
#define REACHED(k, c) if :: PROBE == (k) -> assert(!(c)) :: else fi
bool orphaned;          /* a scrub took an orphan out */
bool cand[2];           /* per client: its candidate is in place, not committed yet */

/* ---- ghosts ------------------------------------------------------------------------------ */
/* What a view change may lose. Under the new design nothing is written under an older
 * placement once any node acts on a view (LEASE, QUIET), so the moment a view is first acted on
 * is when what it cannot read is lost: the newest committed value is lost then unless an entry
 * at one of A's positions in that view, with its data readable, is committed with it or in
 * progress over it. (Values written at the positions a readmission takes back are lost that way:
 * the outage's writes; issue 30 is to migrate them.) Nothing is excused later: a value written
 * under an older placement after that moment, and missed, is a violation. */
#define INPLACE(p,k)  ((p) == P0 || (p) == (FENCES(k) -> P1 : PX))
#define DATAOK(p,k)   (edn[p] != X || (!FENCES(k) && elife[p] == xlife && xup))
#define HOLDS(p,k)    (ev[p] != 0 && INPLACE(p, k) && ((p) != PX || xup) && \
                       ((est[p] == COMM && DATAOK(p, k) && seqof[ev[p]] == curseq) || \
                        (est[p] == BUSY && epv[p] != 0 && seqof[epv[p]] == curseq && \
                         (!epvx[p] || (!FENCES(k) && xlife == 1 && xup)))))
byte acted = 1;         /* the newest view any node has acted on */
inline first_act(k)
{
    if :: (k) > acted -> acted = (k); note_loss(k) :: else fi
}
inline note_loss(k)
{
    if
    :: !(HOLDS(P0, k) || HOLDS(P1, k) || HOLDS(PX, k)) && lostseq < curseq ->
        lostseq = curseq; printf("LOSS: value of seq %d lost (view %d)\n", curseq, k)
    :: else
    fi
}

inline clear(p)
{
    ev[p] = 0; est[p] = 0; edn[p] = 0; elife[p] = 0; epv[p] = 0; epvx[p] = false
}

/* ---- the coordination service and X's life ------------------------------------------------ */
/* Views are written in order; X's lease lapses (it crashed, or was cut off) before each fence.
 * X starts again, empty, once the survivors act on the fence (a restart before that is the
 * fabric's business: shm maps the new tables anew, verbs keys change; test_failover). */
active proctype service()
{
end:
    do
    :: atomic { pub == 1 -> pub = 2; printf("VIEW 2: X gone@1\n") }
    :: atomic { xup && xlife == 1 -> xup = false; printf("X down (life 1)\n") }
    :: atomic { pub == 2 && xlife == 1 && inst[0] >= 2 && inst[1] >= 2 ->
                xlife = 2; xup = true; clear(PX); printf("X back, empty, incarnation 2\n") }
    :: atomic { pub == 2 && xlife == 2 && READMIT_OK -> pub = 3; printf("VIEW 3: X live@2\n") }
    :: atomic { pub == 3 && WHOLD -> pub = 4; printf("VIEW 4: X gone@2\n") }
    :: atomic { xup && xlife == 2 && pub >= 3 -> xup = false; printf("X down (life 2)\n") }
    od
}

/* ---- a survivor's daemon: reading views, acting on them, the scrub ------------------------- */
inline scrub(n)
{
    /* protocol/scrub.c: this node's index (position n): an entry naming a fenced node's data is
     * taken out; after a readmission, so is an entry at a position its key no longer draws */
    if
    :: ev[n] != 0 && edn[n] == X && XFENCED(n) ->
        printf("N%d scrub: lost entry %d out\n", n, ev[n]); clear(n)
    :: ev[n] != 0 && inst[n] >= 3 && !INPLACE(n, inst[n]) && !(edn[n] == X && XFENCED(n)) ->
        printf("N%d scrub: orphan %d out\n", n, ev[n]); clear(n); orphaned = true
    :: else
    fi;
    ack[n] = inst[n]
}

proctype daemon(byte n)
{
end:
    do
    :: atomic { rd[n] < pub ->
                rd[n] = pub; printf("N%d reads view %d\n", n, rd[n]);
                tgt[n] = rd[n];
                if :: tgt[n] > inst[n] && !FENCES(tgt[n]) && XFENCED(n) -> mk[n] = true :: else fi }
    :: atomic { tgt[n] > inst[n] && (!CHANGES(n) || (QUIET(tgt[n]) && HOLD(tgt[n]))) ->
                if :: XFENCED(n) && !FENCES(tgt[n]) -> mk[n] = false :: else fi;
                REACHED(3, FENCES(tgt[n]) && cand[1 - n]);
                inst[n] = tgt[n]; tgt[n] = rd[n]; printf("N%d acts on view %d\n", n, inst[n]);
                if :: tgt[n] > inst[n] && !FENCES(tgt[n]) && XFENCED(n) -> mk[n] = true :: else fi;
                first_act(inst[n]) }
    :: atomic { !mk[n] && ack[n] < inst[n] && LEASE(n) -> scrub(n) }
    od
}

/* ---- calls ----------------------------------------------------------------------------------*/
/* A position's entry as an attempt of node n sees it: live (A's entry, data readable), lost (its
 * data on a fenced X: read as absent, taken back by a write), or unreachable (the attempt
 * fails). An entry naming X's data of an older incarnation read while X is not fenced here is
 * a read of the old tables (check 2). */
#define LOSTE(n,p)   (ev[p] != 0 && edn[p] == X && XFENCED(n))
#define OLDTAB(n,p)  (ev[p] != 0 && edn[p] == X && !XFENCED(n) && elife[p] != xlife)
#define DUNREACH(n,p,al) (ev[p] != 0 && edn[p] == X && !XFENCED(n) && !XREACH(n, al))
#define LIVE(n,p)    (ev[p] != 0 && !LOSTE(n, p))

/* wait for anything an attempt's failure depends on to change, or give up when nothing can */
#define WAITCHANGE(n) if :: (rd[n] != r0 || inst[n] != i0 || xup != u0 || xlife != l0 || ev[0] != e0 || ev[1] != e1 || ev[2] != e2 || est[0] != s0 || est[1] != s1 || est[2] != s2) -> CLEARSNAP :: timeout -> goto giveup fi
/* locals hold nothing between steps that are not needed (fewer states) */
#define CLEARSNAP atomic { r0 = 0; i0 = 0; u0 = 0; l0 = 0; e0 = 0; e1 = 0; e2 = 0; s0 = 0; s1 = 0; s2 = 0 }
#define CLEARCALL atomic { need = 0; res = 0; al = 0; w0 = 0; p = 0; t = 0; pv = 0; tv = 0; ts = 0; \
                           td = 0; tl = 0; tp = 0; fail = 0; busy = 0; pvx = 0; tx = 0 }
#define SNAPALL r0 = rd[n]; i0 = inst[n]; u0 = xup; l0 = xlife; e0 = ev[0]; e1 = ev[1]; e2 = ev[2]; s0 = est[0]; s1 = est[1]; s2 = est[2]

inline get_call(n)
{
    need = (ackseq > seenseq -> ackseq : seenseq);
    printf("T%d GET A (needs seq >= %d)\n", n, need);
    do
    :: if
        :: timeout -> goto giveup   /* no lease, and nothing will bring one */
        :: atomic { LEASE(n) ->     /* an attempt starts only under the view's lease */
            av[n] = AV(n); al = xlife; w0 = WAY0(n); res = 0; fail = false;
            if
            :: !REACH(n, w0, al) -> fail = true
            :: else ->
                assert(!OLDTAB(n, w0) && !OLDTAB(n, P0));
                if
                :: DUNREACH(n, w0, al) || (!LIVE(n, w0) && DUNREACH(n, P0, al)) -> fail = true
                :: else ->
                    if
                    :: LIVE(n, w0) -> p = w0
                    :: !LIVE(n, w0) && LIVE(n, P0) -> p = P0
                    :: else -> p = NP
                    fi;
                    if
                    :: p == NP -> res = 0
                    :: p != NP && est[p] == COMM -> res = ev[p]
                    :: p != NP && est[p] == BUSY && epvx[p] && XFENCED(n) -> res = 0 /* prev lost */
                    :: p != NP && est[p] == BUSY && epvx[p] && !XFENCED(n) && !XREACH(n, al) -> fail = true
                    :: p != NP && est[p] == BUSY && !(epvx[p] && (XFENCED(n) || !XREACH(n, al))) ->
                        assert(!(epvx[p] && xlife != 1)); res = epv[p]
                    fi
                fi
            fi;
            av[n] = 0;
            if
            :: fail -> SNAPALL
            :: else ->
                printf("T%d GET A -> %d (seq %d; lost up to %d)\n", n, res, seqof[res], lostseq);
                if
                :: res != 0 -> assert(seqof[res] >= need);
                    seenseq = (seqof[res] > seenseq -> seqof[res] : seenseq);
                    REACHED(1, inst[n] == 4); REACHED(2, inst[n] == 4 && orphaned)
                :: else -> assert(lostseq >= need); REACHED(4, lostseq > 0)
                fi
            fi
        }
        fi;
        if
        :: fail -> WAITCHANGE(n)
        :: else -> break
        fi
    od
}

/* A write (SET): forward pass, candidate CAS (step 3), commit (step 6). The target is A's live
 * entry (way 0 first), else way 0 (empty, or a lost entry taken back: migrate.c take_back). A
 * failure before the commit (a node it needs unreachable, an entry in progress, a CAS that
 * finds the entry changed) waits for a change (a view) and starts again; a commit that cannot
 * be done (X unreachable) leaves the candidate and is a TIMEOUT. */
inline put_call(n, w)
{
    printf("T%d PUT A=%d\n", n, w);
    do
    :: if
        :: timeout -> goto giveup
        :: atomic { LEASE(n) ->
            av[n] = AV(n); al = xlife; w0 = WAY0(n); fail = false; busy = false;
            if
            :: !REACH(n, w0, al) || DUNREACH(n, w0, al) || DUNREACH(n, P0, al) -> fail = true
            :: else ->
                assert(!OLDTAB(n, w0) && !OLDTAB(n, P0));
                busy = (LIVE(n, w0) && est[w0] == BUSY) || (LIVE(n, P0) && est[P0] == BUSY);
                if
                :: LIVE(n, w0) -> t = w0
                :: !LIVE(n, w0) && LIVE(n, P0) -> t = P0
                :: else -> t = w0
                fi;
                pv = (LIVE(n, t) -> ev[t] : 0);
                pvx = (LIVE(n, t) -> edn[t] == X : false);
                tv = ev[t]; ts = est[t]; td = edn[t]; tl = elife[t]; tp = epv[t]; tx = epvx[t];
            fi;
            if :: fail || busy -> av[n] = 0; SNAPALL :: else fi
        }
        fi;
        if
        :: fail || busy -> WAITCHANGE(n)
        :: else ->
            /* step 3: the candidate CAS, on the exact entry read */
            atomic {
                if
                :: !REACH(n, t, al) -> fail = true
                :: REACH(n, t, al) && (ev[t] != tv || est[t] != ts || edn[t] != td ||
                                       elife[t] != tl || epv[t] != tp || epvx[t] != tx) ->
                    busy = true
                :: else ->
                    ev[t] = w; est[t] = BUSY; edn[t] = n; elife[t] = 0; epv[t] = pv; epvx[t] = pvx;
                    printf("T%d candidate %d at P%d (prev %d)\n", n, w, t, pv); cand[n] = 1
                fi;
                if :: fail || busy -> av[n] = 0; SNAPALL :: else fi
            }
            if
            :: fail || busy -> WAITCHANGE(n)
            :: else ->
                /* step 6: commit (step 4 clears duplicates, which one key in two ways never has
                 * here: a write takes its key's entry in place; nessie.pml checks step 4) */
                atomic {
                    if
                    :: REACH(n, t, al) && ev[t] == w && est[t] == BUSY ->
                        cand[n] = 0; est[t] = COMM; curseq++; seqof[w] = curseq; av[n] = 0;
                        ackseq = curseq;   /* it returns OK: the newest value acknowledged */
                        printf("T%d PUT A=%d OK (seq %d, at P%d)\n", n, w, curseq, t)
                    :: else -> cand[n] = 0; av[n] = 0; printf("T%d PUT A=%d TIMEOUT\n", n, w)
                    fi
                }
                break
            fi
        fi
    od
}

/* The locals a call needs (one client process runs its calls one after another). */
#define LOCALS byte need, res, al, w0, p, t, pv, tv, ts, td, tl, tp; \
               bool fail, busy, pvx, tx; \
               byte r0, i0, l0, e0, e1, e2, s0, s1, s2; bool u0

proctype client0()
{
    LOCALS;
    byte n = 0;
    put_call(n, 2); CLEARCALL;
    put_call(n, 3); CLEARCALL;
    get_call(n); CLEARCALL;
    goto fin;
giveup:
    atomic { av[n] = 0; printf("T%d gives up (no view came)\n", n) }
fin:
    atomic { done++; if :: done == 2 -> assert(est[P0] != BUSY && est[P1] != BUSY) :: else fi }
}

proctype client1()
{
    LOCALS;
    byte n = 1;
    get_call(n); CLEARCALL;
    put_call(n, 4); CLEARCALL;
    get_call(n); CLEARCALL;
    goto fin;
giveup:
    atomic { av[n] = 0; printf("T%d gives up (no view came)\n", n) }
fin:
    atomic { done++; if :: done == 2 -> assert(est[P0] != BUSY && est[P1] != BUSY) :: else fi }
}

init
{
    atomic {
        /* A = 1 committed at P0, its data on X (incarnation 1) */
        ev[P0] = 1; est[P0] = COMM; edn[P0] = X; elife[P0] = 1; seqof[1] = 1;
        run daemon(0); run daemon(1); run client0(); run client1()
    }
}
