#!/bin/sh
# bench/failover.sh - issue 28's figure: one node of three lost for 4 s under load, Nessie (through
# the shim, on shm, views through etcd) against memcached behind libmemcached, in one run.
#
# The load (the issue's): 2 client threads, 64 keys (128 B keys, 1 KiB values), 90 % GETs, a SET
# after each GET that misses (a cache's users), closed loop, the same loadgen binary for every
# system. FAILOVER_SECONDS (8.5) are measured after BENCH_WARMUP (0.5); node or server 2 is killed
# with SIGKILL FAILOVER_KILL_AT (1.5) s into the measured time, and started again FAILOVER_DOWN (4)
# s later. Systems, one after the other:
#   nessie: a 3-node cluster, `nessie-cluster start --membership etcd` (a private etcd, leases of
#     FAILOVER_LEASE_S, 2 s). One loadgen per node, each through its own node's shim, one thread
#     each: nodes 0 and 1 are the live nodes, whose 2 threads are the load measured; node 2's
#     client writes too, so that values live in node 2's memory when it goes, and is killed with
#     its daemon (node 2 is lost whole, tables and all; FAILOVER_VICTIM_LOAD=0 leaves node 2
#     without a client).
#     Node 2 is started again with `nessie-cluster start` when its 4 s are over: it comes back
#     empty under a newer incarnation and a view readmits it (rejoin); the calls of nodes 0 and 1
#     that need its positions wait for that view a view lease (1 s) from its first read.
#   memcached-removal: 3 memcached (-U 0 -m 64 -t 1), one loadgen with 2 threads whose handles
#     hold all three servers, ketama, failed-server removal: REMOVE_FAILED_SERVERS with a failure
#     limit of 1, a retry timeout of FAILOVER_MC_RETRY_S (1) and a dead timeout of
#     FAILOVER_MC_DEAD_S (1) (without one, libmemcached 1.1 fails every call on a removed server
#     for good once its retry timeout is over: bench/loadgen.c, connect_client). Server 2 is
#     killed and started again, empty, on its port.
#   memcached-defaults: the same servers and load with libmemcached's defaults (modula, no
#     removal, retry timeout 2 s); FAILOVER_DEFAULTS=0 leaves it out.
#
# How to read it. A call is one libmemcached call (a GET, or the SET after a miss, or a SET):
# answered when it gets a definite answer (a GET's value, checked, or NOT FOUND; a SET stored),
# failed otherwise. "outage" is the calls issued from the kill until the restart, FAILOVER_DOWN
# s; "run" is the whole measured time. For each system the summary gives calls, answered (%),
# failed, SETs acknowledged (of those issued), p99 and the slowest call; for Nessie also the
# detection time (the kill to the survivors' installing the view that fences node 2, from their
# logs) and the issue's three goals: >= 99.9 % of the live nodes' calls answered during the
# outage (99.99 % hoped for), every SET acknowledged, no call slower than the detection time
# plus 50 ms. Node 2 is lost as a host is (`nessie-cluster kill`: SIGKILL, then its shared-memory
# tables removed, which its peers notice within milliseconds and from then on fail every request
# to it, as to an unreachable host over verbs), so a Nessie call that needs node 2 waits for that
# view (up to the daemons' view_wait_ms) rather than fail (the summary's "calls waited for a
# view", nessie_view_waits); calls that do not need it go on. Nessie's rate rises after the kill: node 2's daemon and
# client no longer share the machine's cores. Then a table of answered / failed calls per
# second, and `ratio` lines (Nessie / memcached-removal): outage_answered (answered fractions),
# outage_slowest (slowest calls) and run_calls (calls made in the run: throughput, on a machine
# all of it shares).
# Nessie's p99 is the larger of its two live nodes' (one loadgen each). Writes failover.csv (a
# loadgen row per system, node0/node1 for Nessie), timeline-*.csv (calls per FAILOVER_BIN_MS,
# 100 ms), summary.txt, failover.png (answered and failed calls over time, all systems), the
# survivors' stats at the end (stats-node*.txt), the daemons' logs under run/.
#
# Usage: bench/failover.sh [--help]   (environment: FAILOVER_SECONDS, FAILOVER_KILL_AT,
#   FAILOVER_DOWN, FAILOVER_THREADS (2, split over the live nodes), FAILOVER_KEYS (64),
#   FAILOVER_LEASE_S, FAILOVER_VICTIM_LOAD, FAILOVER_MC_RETRY_S, FAILOVER_MC_DEAD_S,
#   FAILOVER_DEFAULTS, FAILOVER_BIN_MS, BENCH_WARMUP; needs etcd and memcached)
set -eu
case ${1:-} in -h|--help) sed -n '2,53p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
BENCH_WARMUP=${BENCH_WARMUP:-0.5}
# The measured time (lib.sh records it in the CSV's header as BENCH_SECONDS).
SECONDS_=${FAILOVER_SECONDS:-8.5}
BENCH_SECONDS=$SECONDS_
BENCH_DATA_BYTES=${BENCH_DATA_BYTES:-67108864}
BENCH_INDEX_SLOTS=${BENCH_INDEX_SLOTS:-65536}
BENCH_MAX_ITEM=${BENCH_MAX_ITEM:-1048576}
. "$(dirname "$0")/lib.sh"

KILL_AT=${FAILOVER_KILL_AT:-1.5}
DOWN=${FAILOVER_DOWN:-4}
THREADS=${FAILOVER_THREADS:-2}
KEYS=${FAILOVER_KEYS:-64}
LEASE_S=${FAILOVER_LEASE_S:-2}
VICTIM_LOAD=${FAILOVER_VICTIM_LOAD:-1}
MC_RETRY_S=${FAILOVER_MC_RETRY_S:-1}
MC_DEAD_S=${FAILOVER_MC_DEAD_S:-1}
DEFAULTS=${FAILOVER_DEFAULTS:-1}
BIN_MS=${FAILOVER_BIN_MS:-100}
ms() { awk -v s="$1" 'BEGIN { printf "%d", s * 1000 + 0.5 }'; }
KILL_MS=$(ms "$KILL_AT")
DOWN_MS=$(ms "$DOWN")
WARMUP_MS=$(ms "$BENCH_WARMUP")
END_MS=$((KILL_MS + DOWN_MS))
[ $((THREADS % 2)) = 0 ] && [ "$THREADS" -ge 2 ] || bench_die "FAILOVER_THREADS must be even (split over the 2 live nodes)"
[ "$END_MS" -lt "$(ms "$SECONDS_")" ] || bench_die "the restart (FAILOVER_KILL_AT + FAILOVER_DOWN) must come before the end (FAILOVER_SECONDS)"
command -v etcd >/dev/null 2>&1 || bench_die "etcd missing: run tools/install-deps (Nessie's views need it)"
PER_NODE=$((THREADS / 2))

bench_begin failover "node 2 of 3 killed (SIGKILL) ${KILL_AT} s in, started again ${DOWN} s later; $THREADS client threads, $KEYS keys, 1 KiB values, 90% GETs, a SET after each miss; nessie: 3 nodes, shm, etcd views (lease ${LEASE_S} s), shim, $PER_NODE thread(s) on each of nodes 0 and 1$([ "$VICTIM_LOAD" = 1 ] && echo ", $PER_NODE on node 2 (killed with it)"); memcached x3 (-m 64 -t 1): ketama + removal (failure limit 1, retry ${MC_RETRY_S} s, dead ${MC_DEAD_S} s)$([ "$DEFAULTS" = 1 ] && echo ", and libmemcached's defaults")"
COLS_HEADER="system"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"

# Processes this script starts besides lib.sh's (loadgens, the memcached trio), stopped on exit.
BG_PIDS=""
MC3_PIDS=""
failover_cleanup() {
    for p in $BG_PIDS $MC3_PIDS; do kill -KILL "$p" 2>/dev/null || true; done
    for p in $BG_PIDS $MC3_PIDS; do wait "$p" 2>/dev/null || true; done
    BG_PIDS="" MC3_PIDS=""
    bench_cleanup
}
trap failover_cleanup EXIT

now_ns() { date +%s%N; }
# Sleep until wall-clock time $1 (ns since the epoch).
sleep_until() {
    d=$(($1 - $(now_ns)))
    [ "$d" -le 0 ] || sleep "$(awk -v d="$d" 'BEGIN { printf "%.3f", d / 1e9 }')"
}
# A loadgen process and its client process (loadgen forks one per --procs): kill both.
kill_loadgen() {
    kill -KILL "$1" $(ps -o pid= --ppid "$1" 2>/dev/null) 2>/dev/null || true
}
# Free TCP ports on 127.0.0.1 (as nessie-cluster picks etcd's).
free_ports() {
    python3 -c 'import socket, sys
s = [socket.socket() for _ in range(int(sys.argv[1]))]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])' "$1" 2>/dev/null ||
        { b=$((30000 + $$ % 20000)); i=0; while [ $i -lt "$1" ]; do printf '%d ' $((b + i)); i=$((i + 1)); done; echo; }
}

# The load, the same for every system; the window is the outage.
LG="-n $KEYS -g 0.9 --set-on-miss -D $SECONDS_ -w $BENCH_WARMUP --timeline-ms $BIN_MS --window-from $KILL_MS --window-to $END_MS"
# The load starts this long after its processes do (they preload their keys meanwhile).
LEAD_NS=1000000000

# ---- Nessie --------------------------------------------------------------------------------------

stat_of() { # node, stat name
    "$BUILD/tests/wire-client" -s "$NESSIE_DIR/node$1.sock" stats 2>/dev/null | sed -n "s/^STAT $2 \([^[:space:]]*\).*/\1/p"
}
# HH:MM:SS.mmm of a daemon's log line, as ns since the epoch (today's date; a run across
# midnight would be off by a day).
log_ns() { date -d "$1" +%s%N; }

bench_log "nessie: 3 nodes, etcd views (lease ${LEASE_S} s)"
# The daemons append to their logs, which are read below: a fresh run directory.
rm -rf "$RUN"
BENCH_MEMBERSHIP=etcd nessie_start 3 "membership.lease_s=$LEASE_S"
t=0
until [ "$(stat_of 0 nessie_view_members)" = 3 ] && [ "$(stat_of 1 nessie_view_members)" = 3 ] &&
      [ "$(stat_of 2 nessie_view_members)" = 3 ]; do
    t=$((t + 1))
    [ $t -lt 200 ] || bench_die "the three daemons did not install a view of 3 members in 20 s (see $RUN/node*.log)"
    sleep 0.1
done
VICTIM_DAEMON=$(cat "$NESSIE_DIR/node2.pid")
T0=$(($(now_ns) + LEAD_NS))
lg_pids=""
for i in 0 1 2; do
    [ $i != 2 ] || [ "$VICTIM_LOAD" = 1 ] || continue
    label=nessie-node$i
    [ $i != 2 ] || label=nessie-node2-victim
    # shellcheck disable=SC2086  # $LG is a list of options
    NESSIE_NODE=$i NESSIE_RUN_DIR=$NESSIE_DIR NESSIE_STRICT=1 "$BENCH_ROOT/tools/nessie-run" "$LOADGEN" \
        -s 127.0.0.1:9 -l $label -t "$PER_NODE" --seed $((42 + i)) --start-at "$T0" \
        --timeline "$OUT/timeline-$label.csv" $LG >"$OUT/row$i.tmp" 2>>"$OUT/loadgen.log" &
    BG_PIDS="$BG_PIDS $!"
    [ $i = 2 ] && VICTIM_LG=$! || lg_pids="$lg_pids $!"
done
bench_log "nessie: load from $(date -d @$((T0 / 1000000000)) +%T) + ${BENCH_WARMUP} s warm-up; node 2 killed ${KILL_AT} s in"
sleep_until $((T0 + (WARMUP_MS + KILL_MS) * 1000000))
KILL_NS=$(now_ns)
# A lost host: SIGKILL and its tables removed (nessie-cluster kill), so the survivors cannot
# reach its memory either, as over verbs.
"$BENCH_ROOT/tools/nessie-cluster" kill --node 2 --dir "$NESSIE_DIR" >>"$OUT/restart.log" 2>&1 ||
    bench_die "nessie-cluster kill --node 2 failed (see $OUT/restart.log)"
[ "$VICTIM_LOAD" != 1 ] || kill_loadgen "$VICTIM_LG"
N_KILL_MS=$(((KILL_NS - T0) / 1000000 - WARMUP_MS))
bench_log "nessie: node 2's daemon (pid $VICTIM_DAEMON)$([ "$VICTIM_LOAD" = 1 ] && echo " and its client") killed at ${N_KILL_MS} ms"
sleep_until $((KILL_NS + DOWN_MS * 1000000))
RESTART_NS=$(now_ns)
"$BENCH_ROOT/tools/nessie-cluster" start --dir "$NESSIE_DIR" >>"$OUT/restart.log" 2>&1 ||
    bench_log "warning: nessie-cluster start of node 2 failed (see $OUT/restart.log)"
bench_log "nessie: node 2 started again at $(((RESTART_NS - T0) / 1000000 - WARMUP_MS)) ms (it rejoins once a view readmits it)"
for p in $lg_pids; do wait "$p" || bench_die "a Nessie loadgen failed: a wrong value, or no daemon (see $OUT/loadgen.log)"; done
[ "$VICTIM_LOAD" != 1 ] || wait "$VICTIM_LG" 2>/dev/null || true
BG_PIDS=""
rm -f "$OUT/row2.tmp" "$OUT/timeline-nessie-node2-victim.csv"

# When the survivors installed the view that fences node 2, and when it was first read.
DETECT_MS=""
DETECT_LIST=""
for i in 0 1; do
    line=$(grep -m 1 "view [0-9]*: members.*; gone:.* 2$" "$NESSIE_DIR/node$i.log" || true)
    if [ -n "$line" ]; then
        d=$((($(log_ns "$(echo "$line" | cut -d' ' -f1)") - KILL_NS) / 1000000))
        DETECT_LIST="$DETECT_LIST node $i ${d} ms,"
        [ -n "$DETECT_MS" ] && [ "$DETECT_MS" -ge "$d" ] || DETECT_MS=$d
    else
        DETECT_LIST="$DETECT_LIST node $i never,"
    fi
done
first=$(grep -h -m 1 "fences a node" "$NESSIE_DIR/node0.log" "$NESSIE_DIR/node1.log" | cut -d' ' -f1 | sort | head -n 1)
FIRST_READ_MS=""
[ -z "$first" ] || FIRST_READ_MS=$((($(log_ns "$first") - KILL_NS) / 1000000))
back=$(grep -c "readmitted: 2" "$NESSIE_DIR/node0.log" || true)
N_WAITS=0 N_LOST=0
for i in 0 1; do
    v=$(stat_of $i nessie_view_waits)
    N_WAITS=$((N_WAITS + ${v:-0}))
    v=$(stat_of $i nessie_lost_entries)
    N_LOST=$((N_LOST + ${v:-0}))
done
N_MEMBERS=$(stat_of 0 nessie_view_members)
for i in 0 1; do
    "$BUILD/tests/wire-client" -s "$NESSIE_DIR/node$i.sock" stats >"$OUT/stats-node$i.txt" 2>&1 || true
done
NODE2_BACK=$(grep -c "is back as incarnation" "$NESSIE_DIR/node2.log" || true)

for i in 0 1; do
    COLS=nessie
    _bench_row "$(cat "$OUT/row$i.tmp")"
    eval "N_ROW$i=\$(cat \"\$OUT/row\$i.tmp\")"
    rm -f "$OUT/row$i.tmp"
done
# shellcheck disable=SC2154  # set by eval above
paste -d, "$OUT/timeline-nessie-node0.csv" "$OUT/timeline-nessie-node1.csv" | awk -F, '
    NR == 1 { print "ms,calls,answered,failed,sets,sets_ok,max_us"; next }
    { printf "%s,%d,%d,%d,%d,%d,%s\n", $1, $2 + $9, $3 + $10, $4 + $11, $5 + $12, $6 + $13, ($7 > $14 ? $7 : $14) }' \
    >"$OUT/timeline-nessie.csv"
nessie_stop

# ---- memcached ------------------------------------------------------------------------------------

# Three memcached on the ports $MC3_PORTS; server 2 is started again by mc3_one 2.
mc3_one() { # index
    port=$(echo "$MC3_PORTS" | cut -d' ' -f$(($1 + 1)))
    memcached -u "$(id -un)" -l 127.0.0.1 -p "$port" -U 0 -m 64 -t 1 >>"$OUT/memcached$1.log" 2>&1 &
    eval "MC3_PID$1=$!"
    MC3_PIDS="$MC3_PIDS $!"
}
mc3_start() {
    MC3_PORTS=$(free_ports 3)
    for i in 0 1 2; do mc3_one $i; done
    for port in $MC3_PORTS; do mc_wait "$port" "$OUT/memcached*.log"; done
    MC3_SERVERS=$(for port in $MC3_PORTS; do printf '127.0.0.1:%s,' "$port"; done | sed 's/,$//')
}
mc3_stop() {
    for p in $MC3_PIDS; do kill "$p" 2>/dev/null || true; done
    for p in $MC3_PIDS; do wait "$p" 2>/dev/null || true; done
    MC3_PIDS=""
}

# One memcached run: mc_run LABEL [LIBMEMCACHED OPTIONS...]; sets the row in MC_ROW_<label>.
mc_run() {
    label=$1
    shift
    mc3_start
    T0=$(($(now_ns) + LEAD_NS))
    # shellcheck disable=SC2086  # $LG is a list of options
    "$LOADGEN" -s "$MC3_SERVERS" -l "$label" -t "$THREADS" --start-at "$T0" \
        --timeline "$OUT/timeline-$label.csv" $LG "$@" >"$OUT/row.tmp" 2>>"$OUT/loadgen.log" &
    lg=$!
    BG_PIDS=$lg
    bench_log "$label: load from $(date -d @$((T0 / 1000000000)) +%T) + ${BENCH_WARMUP} s warm-up; server 2 killed ${KILL_AT} s in"
    sleep_until $((T0 + (WARMUP_MS + KILL_MS) * 1000000))
    kill_ns=$(now_ns)
    # shellcheck disable=SC2154  # set by mc3_one through eval
    kill -KILL "$MC3_PID2"
    bench_log "$label: server 2 (pid $MC3_PID2) killed at $(((kill_ns - T0) / 1000000 - WARMUP_MS)) ms"
    sleep_until $((kill_ns + DOWN_MS * 1000000))
    mc3_one 2
    bench_log "$label: server 2 started again (empty) at $((($(now_ns) - T0) / 1000000 - WARMUP_MS)) ms"
    wait "$lg" || bench_die "the $label loadgen failed: a wrong value (see $OUT/loadgen.log)"
    BG_PIDS=""
    mc3_stop
    COLS=$label
    row=$(cat "$OUT/row.tmp")
    rm -f "$OUT/row.tmp"
    _bench_row "$row"
    eval "MC_ROW_$(echo "$label" | tr - _)=\$row"
}

mc_run memcached-removal --ketama --failure-limit 1 --retry-timeout "$MC_RETRY_S" --dead-timeout "$MC_DEAD_S"
[ "$DEFAULTS" != 1 ] || mc_run memcached-defaults

# ---- the summary -------------------------------------------------------------------------------

# Sums (or the largest, for p99 and slowest) of rows' fields: agg sum|max FIELD ROW...
agg() {
    how=$1 f=$2
    shift 2
    for r in "$@"; do row_field "$r" "$f"; done | awk -v how="$how" '
        { if (how == "sum") v += $1; else if (NR == 1 || $1 > v) v = $1 } END { printf "%s", v + 0 }'
}
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.4f", 100 * (b - a) / b; else printf "0" }'; }
# One system's lines; sets S_<field> for the ratios. Usage: report NAME ROW...
report() {
    name=$1
    shift
    wc=$(agg sum win_calls "$@") wf=$(agg sum win_failed "$@") ws=$(agg sum win_sets "$@")
    wso=$(agg sum win_sets_ok "$@") wp99=$(agg max win_p99_us "$@") wmax=$(agg max win_max_us "$@")
    rc=$(agg sum calls "$@") rf=$(agg sum calls_failed "$@") rs=$(agg sum sets "$@")
    rso=$(agg sum sets_ok "$@") rmax=$(agg max max_call_us "$@")
    printf '%-19s outage: %7d calls, answered %9s %%, failed %5d, SETs acknowledged %5d of %5d, p99 %8.3f ms, slowest %8.3f ms\n' \
        "$name" "$wc" "$(pct "$wf" "$wc")" "$wf" "$wso" "$ws" "$(awk -v v="$wp99" 'BEGIN { print v / 1000 }')" \
        "$(awk -v v="$wmax" 'BEGIN { print v / 1000 }')"
    printf '%-19s run:    %7d calls, answered %9s %%, failed %5d, SETs acknowledged %5d of %5d, slowest %8.3f ms\n' \
        "" "$rc" "$(pct "$rf" "$rc")" "$rf" "$rso" "$rs" "$(awk -v v="$rmax" 'BEGIN { print v / 1000 }')"
    S_answered=$(awk -v f="$wf" -v c="$wc" 'BEGIN { print (c > 0 ? (c - f) / c : 0) }')
    S_slowest=$wmax S_calls=$rc S_wf=$wf S_ws=$ws S_wso=$wso S_rs=$rs S_rso=$rso S_rf=$rf
}

{
    echo "failover: node/server 2 of 3 killed ${KILL_AT} s in, down ${DOWN} s; $THREADS threads, $KEYS keys, 90% GETs, SET after each miss; outage = calls issued ${KILL_MS}..${END_MS} ms"
    # shellcheck disable=SC2154  # set by eval above
    report "nessie (nodes 0+1)" "$N_ROW0" "$N_ROW1"
    n_answered=$S_answered n_slowest=$S_slowest n_calls=$S_calls n_wf=$S_wf n_ws=$S_ws n_wso=$S_wso
    n_rs=$S_rs n_rso=$S_rso
    echo "nessie: node 2 killed at ${N_KILL_MS} ms; the view fencing it first read $([ -n "$FIRST_READ_MS" ] && echo "${FIRST_READ_MS} ms" || echo never) after the kill, installed by${DETECT_LIST%,}; $N_WAITS calls waited for a view, $N_LOST lost entries met; node 2 restarted: $([ "$NODE2_BACK" -gt 0 ] && echo "back empty under a newer incarnation" || echo "did NOT log that it is back"), ${N_MEMBERS:-?} live members in the survivors' view at the end ($back view readmitting it on node 0)"
    # shellcheck disable=SC2154  # set by mc_run through eval
    report memcached-removal "$MC_ROW_memcached_removal"
    m_answered=$S_answered m_slowest=$S_slowest m_calls=$S_calls
    if [ "$DEFAULTS" = 1 ]; then
        # shellcheck disable=SC2154
        report memcached-defaults "$MC_ROW_memcached_defaults"
    fi
    # The issue's goals, for Nessie's live nodes.
    g1=$(awk -v a="$n_answered" 'BEGIN { print (a >= 0.999 ? "met" : "NOT met") }')
    g1b=$(awk -v a="$n_answered" 'BEGIN { print (a >= 0.9999 ? "met" : "not met") }')
    g2=$([ "$n_wso" = "$n_ws" ] && [ "$n_rso" = "$n_rs" ] && echo met || echo "NOT met")
    if [ -n "$DETECT_MS" ]; then
        g3=$(awk -v s="$n_slowest" -v d="$DETECT_MS" 'BEGIN { print (s / 1000 <= d + 50 ? "met" : "NOT met") }')
        g3="$g3 (slowest $(awk -v s="$n_slowest" 'BEGIN { printf "%.1f", s / 1000 }') ms, detection ${DETECT_MS} ms + 50)"
    else
        g3="not measured (no survivor installed a view fencing node 2)"
    fi
    echo "goal >= 99.9 % answered during the outage: $g1 (99.99 %: $g1b)"
    echo "goal every write acknowledged: $g2 ($n_wso of $n_ws SETs during the outage, $n_rso of $n_rs in the run)"
    echo "goal no call slower than detection + 50 ms: $g3"
    awk -v a="$n_answered" -v b="$m_answered" 'BEGIN { printf "ratio outage_answered %.5f\n", (b > 0 ? a / b : 0) }'
    awk -v a="$n_slowest" -v b="$m_slowest" 'BEGIN { printf "ratio outage_slowest %.2f\n", (b > 0 ? a / b : 0) }'
    awk -v a="$n_calls" -v b="$m_calls" 'BEGIN { printf "ratio run_calls %.3f\n", (b > 0 ? a / b : 0) }'
    # Answered / failed per second (the measured time's seconds; kill and restart marked).
    echo "calls per second (answered/failed; the last second may be partial); kill at ${KILL_AT} s, restart at $(awk -v a="$KILL_MS" -v b="$DOWN_MS" 'BEGIN { print (a + b) / 1000 }') s:"
    files="$OUT/timeline-nessie.csv $OUT/timeline-memcached-removal.csv"
    hdr="second nessie memcached-removal"
    if [ "$DEFAULTS" = 1 ]; then
        files="$files $OUT/timeline-memcached-defaults.csv"
        hdr="$hdr memcached-defaults"
    fi
    # shellcheck disable=SC2086  # $files is a list
    paste -d, $files | awk -F, -v bin="$BIN_MS" -v hdr="$hdr" '
        NR == 1 { n = split(hdr, h, " "); printf "%-7s", h[1]; for (i = 2; i <= n; i++) printf " %22s", h[i]; printf "\n"; next }
        { s = int($1 / 1000); if (s > last) last = s
          for (k = 0; k < n - 1; k++) { a[s, k] += $(7 * k + 3); f[s, k] += $(7 * k + 4) } }
        END { for (s = 0; s <= last; s++) { printf "%-7d", s
                for (k = 0; k < n - 1; k++) printf " %22s", (a[s, k] + 0) "/" (f[s, k] + 0); printf "\n" } }'
} | tee "$SUMMARY"

# The figure: answered calls/s and failed calls per bin over time, every system.
kill_s=$(awk -v a="$KILL_MS" 'BEGIN { print a / 1000 }')
back_s=$(awk -v a="$END_MS" 'BEGIN { print a / 1000 }')
view_s=$([ -n "$DETECT_MS" ] && awk -v a="$N_KILL_MS" -v d="$DETECT_MS" 'BEGIN { print (a + d) / 1000 }' || echo "")
failed_all=$(awk -F, 'NR > 1 { f += $4 } END { print f + 0 }' "$OUT/timeline-nessie.csv")
defaults_a=""
defaults_f=""
if [ "$DEFAULTS" = 1 ]; then
    defaults_a=", '$OUT/timeline-memcached-defaults.csv' every ::1 using (\$1/1000):(\$3*1000/$BIN_MS) title 'memcached, libmemcached defaults' lw 2 lc rgb '#999999'"
    defaults_f=", '$OUT/timeline-memcached-defaults.csv' every ::1 using (\$1/1000):(\$4 > 0 ? \$4 : NaN) title 'memcached, libmemcached defaults' with points pt 6 lc rgb '#999999'"
fi
plot failover <<EOF2
set terminal pngcairo size 1100,900 noenhanced font ',11'
set output '$OUT/failover.png'
set multiplot layout 2,1 title 'Node 2 of 3 killed at ${kill_s} s, back at ${back_s} s; $THREADS threads, $KEYS keys, 90% GETs, SET after miss ($BIN_MS ms bins)'
set style data lines; set xlabel 'seconds (measured time)'; set xrange [0:$SECONDS_]; set key below
set arrow 1 from $kill_s, graph 0 to $kill_s, graph 1 nohead dt 2 lc rgb 'red'
set arrow 2 from $back_s, graph 0 to $back_s, graph 1 nohead dt 2 lc rgb 'dark-green'
$([ -n "$view_s" ] && echo "set arrow 3 from $view_s, graph 0 to $view_s, graph 1 nohead dt 3 lc rgb 'blue'; set label 3 'view fences node 2' at $view_s, graph 0.85 offset 0.5,0 tc rgb 'blue'")
set label 1 'kill' at $kill_s, graph 0.95 offset 0.5,0 tc rgb 'red'
set label 2 'restart' at $back_s, graph 0.95 offset 0.5,0 tc rgb 'dark-green'
set title 'answered calls per second'; set ylabel 'calls/s'; set yrange [0:*]
plot '$OUT/timeline-nessie.csv' every ::1 using (\$1/1000):(\$3*1000/$BIN_MS) title 'nessie (live nodes 0+1)' lw 2 lc rgb '#1f77b4', \
     '$OUT/timeline-memcached-removal.csv' every ::1 using (\$1/1000):(\$3*1000/$BIN_MS) title 'memcached, ketama + removal' lw 2 lc rgb '#ff7f0e'$defaults_a
set title 'failed calls per bin (none: no point; nessie: $failed_all in all)'; set ylabel 'failed calls'; set logscale y; set yrange [0.8:*]
plot '$OUT/timeline-nessie.csv' every ::1 using (\$1/1000):(\$4 > 0 ? \$4 : NaN) title 'nessie (live nodes 0+1)' with points pt 7 lc rgb '#1f77b4', \
     '$OUT/timeline-memcached-removal.csv' every ::1 using (\$1/1000):(\$4 > 0 ? \$4 : NaN) title 'memcached, ketama + removal' with points pt 5 lc rgb '#ff7f0e'$defaults_f
unset multiplot
EOF2
bench_end
