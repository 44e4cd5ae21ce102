#!/usr/bin/env bash
# run.sh - model-check the Nessie protocol models (model/nessie.pml, model/views.pml,
# model/elastic.pml, model/retire.pml) with SPIN.
#
#   model/run.sh            the new design must pass every scenario, the old (today's) design
#                           must fail, and each bug-* variant (issue 26's findings as today's
#                           code has them; issue 28's view rules put out) must fail, and each
#                           reach-* probe must fail (what it names is reachable); exit 0 only
#                           if all hold
#   model/run.sh --quick    scenarios 1 and 2 and the views model's design only (about 1 min)
#   model/run.sh --holes    also show that each refinement of the new design is needed: the new
#                           design with one refinement switched off must fail (about 1 min more),
#                           and search scenario 3 on the old design (information only)
#   model/run.sh --keep     keep the work directory (trails: spin -t <defines> <model> there)
#
# Installs nothing: needs spin (Debian package "spin") and a C compiler. Works in a temporary
# directory. Runs at most two verifications at once, under nice; each is exhaustive (-DCOLLAPSE:
# lossless state compression), capped at MEMLIM MB and TIMEOUT seconds.
set -u

here=$(cd "$(dirname "$0")" && pwd)
quick=0; holes=0; keep=0
for a in "$@"; do
    case $a in
    --quick) quick=1 ;;
    --holes) holes=1 ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $a" >&2; exit 2 ;;
    esac
done

for tool in spin gcc timeout; do
    command -v $tool >/dev/null 2>&1 || { echo "run.sh: $tool not found (spin: apt-get install spin)" >&2; exit 2; }
done

JOBS=${JOBS:-2}
MEMLIM=${MEMLIM:-3500}
TIMEOUT=${TIMEOUT:-600}
work=$(mktemp -d "${TMPDIR:-/tmp}/nessie-model.XXXXXX")
[ $keep = 1 ] || trap 'rm -rf "$work"' EXIT
cp "$here/nessie.pml" "$here/views.pml" "$here/elastic.pml" "$here/retire.pml" "$here/hunt_c.never" "$work/"

# variant NAME EXPECT "spin -D flags" [claim] [model]   (EXPECT: pass | fail; model: nessie.pml)
variant() {
    local name=$1 expect=$2 defs=$3 claim=${4:-} model=${5:-nessie.pml}
    local d="$work/$name" t0 t1 rc
    mkdir -p "$d"; cp "$work/$model" "$work/hunt_c.never" "$d/"
    (
        cd "$d" || exit 1
        t0=$(date +%s.%N)
        # A search that must end in a violation mostly stops early: compiling pan.c with -O2
        # (32 s for nessie.pml here, 5 s with -O0) costs more than it saves there. An exhaustive
        # search keeps -O2 (scenario 1: 36 s of search at -O2, 56 s at -O0).
        opt=-O2
        [ "$expect" = fail ] && opt=-O0
        cflags="$opt -DSAFETY -DCOLLAPSE -DMEMLIM=$MEMLIM -DVECTORSZ=2048"
        nflag=""
        if [ -n "$claim" ]; then nflag="-N $claim"; cflags="$cflags -DNOREDUCE"; fi
        if ! spin $defs -a $nflag "$model" >spin.out 2>&1; then
            echo "$name|$expect|ERROR|spin -a failed|0" >result; exit 0
        fi
        if ! gcc $cflags -o pan pan.c >gcc.out 2>&1; then
            echo "$name|$expect|ERROR|gcc failed|0" >result; exit 0
        fi
        nice -n 10 timeout "$TIMEOUT" ./pan -m300000 -w26 >pan.out 2>&1; rc=$?
        t1=$(date +%s.%N)
        local secs states errors what
        secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
        states=$(awk '/states, stored/{print $1; exit}' pan.out)
        errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.out | head -1)
        what=$(grep -m1 -oE '^pan:[0-9]+: .*' pan.out | sed 's/^pan:[0-9]*: //')
        case "$what" in
        "") ;;
        *"assert"*linok*) what="not linearizable (1)" ;;
        *"ite[0]==0"*) what="ITE names a dead life, or a live entry's prev is dead (2)" ;;
        *everlinked*) what="slot freed at once though an ITE named it (2)" ;;
        *onfree*) what="slot freed twice (2)" ;;
        *"vgen=="*) what="GET returned another life's contents (2)" ;;
        *hvis*|*"hres[vcreator]"*|*"hres[d["*) what="a definite failure took effect (3)" ;;
        *"st&2"*) what="a key stuck on an uncommitted entry (4)" ;;
        *leaked*) what="leaked slot (4)" ;;
        *oldgen*) what="hole c: rollback abandoned another life" ;;
        *hlive*) what="a takeover acted on a live call's entry" ;;
        *"d[s_].gen=="*) what="hole c: blind mark hit another life" ;;
        *"invalid end state"*) what="a process blocked forever" ;;
        *"lostseq>=need"*) what="a GET missed a value no view change lost (1)" ;;
        *"seqof[res]>=need"*) what="a GET returned a value older than one acknowledged (1)" ;;
        *"lastdel>=need"*) what="A read absent though no DELETE came after the newest value (1)" ;;
        *"seqof[found]==curseq"*|*"lastdel==curseq"*) what="at the end, not the newest value under the new placement (2)" ;;
        *"!(((ev[1]!=0)"*) what="at the end, A left at the leaving position (2)" ;;
        *"elife["*) what="X's old tables read after its return (2)" ;;
        *"!(eR[q])"*) what="at the end, an entry names the retired node's data (3)" ;;
        *"!((rw&&unreach))"*) what="the retired node's data read after it left (2)" ;;
        *"!((unreach&&(k<4)))"*) what="the retired node's index planned on after it left (2)" ;;
        *"assertion violated  !("*) what="reached" ;;
        *) what=$(printf '%s' "$what" | cut -c1-60 | tr '|' '/') ;;
        esac
        if [ $rc = 124 ]; then what="time limit"; errors=""; fi
        # an incomplete search proves nothing: memory cap, depth limit, time limit
        if grep -qE "Search not completed|max search depth too small|reached -DMEMLIM" pan.out && [ "${errors:-0}" = 0 ]; then
            errors=""; what="search not completed (raise MEMLIM)"
        fi
        echo "$name|$expect|${errors:-?}|${what:-}|${states:-?}|$secs|$defs" >result
    )
}

# queue: run at most JOBS variants at once
pids=()
queue() {
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n 2>/dev/null || sleep 1; done
    variant "$@" &
}

# --- what runs -------------------------------------------------------------------------------
# scenarios (see README.md): 1 faults, 2 stall/ABA, 3 cuckoo (3 clients), 4 two writers + faults,
# 5 DELETE + two PUTs on the owner node (memory waits, rollback); 6 hole-c hunting ground
if [ $quick = 1 ]; then scen="1 2"; else scen="1 2 3 4 5"; fi
for s in $scen; do queue "new-scen$s" pass "-DSCEN=$s"; done
for s in $scen; do
    # scenario 3 has no fault and one epoch: none of the old holes fits in it (information only,
    # a 24-million-state search: with --holes only)
    if [ $s = 3 ]; then
        [ $holes = 0 ] || queue "old-scen$s" info "-DSCEN=$s -DOLD_DESIGN"
    else
        queue "old-scen$s" fail "-DSCEN=$s -DOLD_DESIGN"
    fi
done
[ $quick = 1 ] || queue "old-hunt-c" fail "-DSCEN=6 -DOLD_DESIGN -DHUNT_C" hunt_c.never
if [ $quick = 0 ]; then
    # issue 26 (model/time-findings.md): MIGRATE (7), the memory-wait extension and the grace (8),
    # TTL (9). The new design must pass each; today's behaviour (bug-*) must fail each.
    queue "new-scen7"            pass "-DSCEN=7"
    # a migrator that stalls past the grace between its Step 0 check and step 7, then dies,
    # loses the item: only the time bound (grace > the longest call) rules that out
    queue "new-scen7-timed"      pass "-DSCEN=7 -DTIMED -DEXT=0 -DGRACE=2 -DMAXC=1"
    queue "new-scen8"            pass "-DSCEN=8"
    queue "new-scen9"            pass "-DSCEN=9"
    queue "bug-f1-migrate"       fail "-DSCEN=7 -DBUG_MIGRATE_NO_STEP0"
    queue "bug-f2-grace"         fail "-DSCEN=8 -DOLD_GRACE -DOLD_LIFE_RETRY"
    queue "bug-f7-ttl-adopt"     fail "-DSCEN=9 -DBUG_TTL_ADOPT_DEAD"
fi
# issue 28 (views.pml): view changes under load. The design must pass; each of its rules put
# out (bug-views-*) must fail; each reach-views-* probe must fail (the situation it names is
# reachable, so the checks are not vacuous there).
queue "new-views" pass "" "" views.pml
if [ $quick = 0 ]; then
    for b in NO_LEASE NO_SUSPEND NO_REJOIN_MARK READMIT_EARLY NO_FENCE_HOLD UNHELD_FENCE; do
        queue "bug-views-$(echo $b | tr 'A-Z_' 'a-z-')" fail "-DBUG_$b" "" views.pml
    done
    for p in 1 2 3 4; do queue "reach-views-$p" fail "-DPROBE=$p" "" views.pml; done
fi
# issue 30 (elastic.pml): an add (and, mirrored, a retire) under load, through its three views.
# The design must pass; each of its rules put out (bug-elastic-*) must fail; each
# reach-elastic-* probe must fail.
[ $quick = 1 ] || queue "new-elastic" pass "" "" elastic.pml
if [ $quick = 0 ]; then
    for b in ANNOUNCE_WRITES E2_EARLY INSERT_LEAVING MOVER_EARLY MOVER_ONE_WAIT COMMIT_EARLY; do
        queue "bug-elastic-$(echo $b | tr 'A-Z_' 'a-z-')" fail "-DBUG_$b" "" elastic.pml
    done
    for p in 1 2 3 4 5; do queue "reach-elastic-$p" fail "-DPROBE=$p" "" elastic.pml; done
fi
# issue 30 (retire.pml): a retire's values, in the retiring node's data, relocated before it
# leaves. The design and its two relaxations must pass; each rule put out must fail; each
# reach-retire-* probe must fail.
queue "new-retire" pass "" "" retire.pml
if [ $quick = 0 ]; then
    queue "new-retire-no-waits" pass "-DRELOCATE_NO_WAITS" "" retire.pml
    queue "new-retire-commit-span" pass "-DCOMMIT_SPAN" "" retire.pml
    for b in R1_OFF RELOCATE_EARLY RELOCATE_BUSY UNREACH_AT_COMMIT; do
        queue "bug-retire-$(echo $b | tr 'A-Z_' 'a-z-')" fail "-DBUG_$b" "" retire.pml
    done
    for p in 1 2 3 4 5 6; do queue "reach-retire-$p" fail "-DPROBE=$p" "" retire.pml; done
fi
if [ $holes = 1 ]; then
    queue "new-without-abandon-rule"   fail "-DSCEN=1 -DNAIVE_ABANDON"
    queue "new-without-reread-rule"    fail "-DSCEN=1 -DREREAD_FREES"
    queue "new-without-prev-to-sweep"  fail "-DSCEN=1 -DROLLBACK_RECYCLES_PREV"
    queue "new-without-memwait-rule"   fail "-DSCEN=5 -DMEMWAIT_NOMEM"
    queue "new-without-commit-rule"    fail "-DSCEN=2 -DMAXE=3 -DCOMMIT_FAIL_INVALID"
    queue "new-without-step4-rule"     fail "-DSCEN=5 -DMAXF=1 -DMAXC=1 -DSTEP4_CLEARS_BUSY"
    queue "new-without-step4-prev"     fail "-DSCEN=5 -DMAXF=1 -DSTEP4_PREV_UNRESOLVED"
    queue "new-without-generations"    fail "-DSCEN=2 -DGENS=1"
    queue "bug-f1-residual-untimed"    fail "-DSCEN=7 -DMAXC=1"
    # the fixed interpretation alone survives today's grace; finding 7b (deadness judged late)
    queue "new-scen8-oldgrace"         pass "-DSCEN=8 -DOLD_GRACE"
    queue "bug-f7-ttl-late"            fail "-DSCEN=9 -DBUG_TTL_LATE_DEAD"
fi
wait

# --- report ----------------------------------------------------------------------------------
ok=1; newpass=1; oldfail=0
printf '%-28s %-6s %-10s %10s %8s  %s\n' variant expect result states seconds "first violation"
for r in "$work"/*/result; do
    IFS='|' read -r name expect errors what states secs defs <"$r"
    if [ "$errors" = "0" ]; then res=PASS; elif [ "$errors" = "?" ] || [ "$errors" = "ERROR" ]; then res=INCOMPLETE; else res=FAIL; fi
    printf '%-28s %-6s %-10s %10s %8s  %s\n' "$name" "$expect" "$res" "$states" "$secs" "$what"
    case "$name:$res" in
    new-scen*:PASS|new-views:PASS|new-elastic:PASS|new-retire*:PASS) ;;
    new-scen*:*|new-views:*|new-elastic:*|new-retire*:*) newpass=0 ;;
    old-*:FAIL) oldfail=1 ;;
    esac
    if [ "$expect" = fail ] && [ "$res" != FAIL ] && { [ "${name#new-}" != "$name" ] || [ "${name#bug-}" != "$name" ] || [ "${name#reach-}" != "$name" ]; }; then ok=0; fi
done
[ $keep = 1 ] && echo "work directory kept: $work (replay a trail: cd there/<variant> && spin -t <its -D flags> nessie.pml, views.pml, elastic.pml or retire.pml)"
if [ $newpass = 1 ] && [ $oldfail = 1 ] && [ $ok = 1 ]; then
    echo "model: OK (new design: no violation in any scenario; old design: violations found)"
    exit 0
fi
echo "model: FAILED (new design passes: $newpass, old design fails: $oldfail)"
exit 1
