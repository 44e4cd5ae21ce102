#!/bin/sh
# bench/elastic.sh - issue 30's figure: a node added online under load, through the shim, and
# retired again.
#
# A 3-node Nessie cluster (shm, views and changes through a private etcd, node-id capacity 6),
# one loadgen per node through its own node's shim (one thread each; ELASTIC_KEYS keys, 20000,
# 128 B keys, 1 KiB values, uniform, 90 % GETs, a SET after each GET that misses), closed loop,
# ELASTIC_SECONDS (24) measured after BENCH_WARMUP (1). ELASTIC_ADD_AT (4) s into the measured
# time, `nessie-cluster add` adds node 3 (its daemon starts with no client); ELASTIC_REMOVE_AT
# (13) s in, `nessie-cluster remove --node 3` retires it again (the loadgens' own nodes stay).
# Every loadgen preloads every key first, so the hit ratio before the add is 1.
#
# Prints the issue's figures as lines:
#   add_seconds S          how long `nessie-cluster add` took (start of its daemon to commit)
#   add_moved_fraction F   entries the members' movers moved / entries in the index before the
#                          add (what share of the index positions the add reassigned; the goal
#                          is <= 1.1/N, N = 4 after the add)
#   errors E               calls that failed in the whole run, through the add and the retire
#                          (loadgen's errors, all nodes; the goal is 0)
#   ratio add_throughput_during   ops/s in the seconds the add was in progress / ops/s before it
#                          (goal >= 0.80)
#   ratio add_hit_after    GET hit ratio in the second that starts 2 s after the commit / before
#                          the add (goal >= 0.95)
#   remove_seconds, remove_moved_fraction (entries the survivors moved or relocated / entries in
#   the index before the retire; goal <= 1.1/N, N = 4 before it), ratio remove_throughput_during
#   and ratio remove_hit_after   the same for the retire, "before" being the whole seconds between the
#                          add's commit + 3 s and the retire
# and writes elastic.csv (a loadgen row per node), series-node*.csv (per second), elastic.png
# (ops/s and hit ratio over time, the add's and the retire's spans marked), the daemons' logs
# under run/.
#
# Usage: bench/elastic.sh [--help]   (environment: ELASTIC_SECONDS, ELASTIC_ADD_AT,
#   ELASTIC_REMOVE_AT, ELASTIC_KEYS, BENCH_WARMUP; needs etcd)
set -eu
case ${1:-} in -h|--help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
BENCH_WARMUP=${BENCH_WARMUP:-1}
SECONDS_=${ELASTIC_SECONDS:-24}
BENCH_SECONDS=$SECONDS_
ADD_AT=${ELASTIC_ADD_AT:-4}
REMOVE_AT=${ELASTIC_REMOVE_AT:-13}
KEYS=${ELASTIC_KEYS:-20000}
BENCH_DATA_BYTES=${BENCH_DATA_BYTES:-134217728}
BENCH_INDEX_SLOTS=${BENCH_INDEX_SLOTS:-65536}
BENCH_MAX_ITEM=${BENCH_MAX_ITEM:-1048576}
. "$(dirname "$0")/lib.sh"
command -v etcd >/dev/null 2>&1 || bench_die "etcd missing: run tools/install-deps (changes of membership need it)"
[ "$ADD_AT" -ge 2 ] && [ $((ADD_AT + 7)) -le "$REMOVE_AT" ] && [ $((REMOVE_AT + 8)) -le "$SECONDS_" ] ||
    bench_die "ELASTIC_ADD_AT must be at least 2, ELASTIC_REMOVE_AT 7 s after it, and 8 s before the end (ELASTIC_SECONDS)"

bench_begin elastic "node 3 added ${ADD_AT} s and retired ${REMOVE_AT} s into ${SECONDS_} s under load: 3 loadgens (one per node, through its shim, 1 thread each), $KEYS keys, 1 KiB values, uniform, 90% GETs, a SET after each miss; nessie: 3 nodes, shm, etcd views and changes, node_ids 6"
COLS_HEADER="system"

BG_PIDS=""
elastic_cleanup() {
    for p in $BG_PIDS; do kill -KILL "$p" $(ps -o pid= --ppid "$p" 2>/dev/null) 2>/dev/null || true; done
    BG_PIDS=""
    bench_cleanup
}
trap elastic_cleanup EXIT
now_ns() { date +%s%N; }
sleep_until() {
    d=$(($1 - $(now_ns)))
    [ "$d" -le 0 ] || sleep "$(awk -v d="$d" 'BEGIN { printf "%.3f", d / 1e9 }')"
}
stat_of() { # node, stat name
    "$BUILD/tests/wire-client" -s "$NESSIE_DIR/node$1.sock" stats 2>/dev/null | sed -n "s/^STAT $2 \([^[:space:]]*\).*/\1/p"
}

rm -rf "$RUN"
BENCH_MEMBERSHIP=etcd nessie_start 3 cluster.node_ids=6 membership.lease_s=2
# The load starts together on every node this long after its processes do (they preload).
T0=$(($(now_ns) + 3000000000))
lg_pids=""
for i in 0 1 2; do
    NESSIE_NODE=$i NESSIE_RUN_DIR=$NESSIE_DIR NESSIE_STRICT=1 "$BENCH_ROOT/tools/nessie-run" "$LOADGEN" \
        -s 127.0.0.1:9 -l nessie-node$i -n "$KEYS" -g 0.9 --set-on-miss -D "$SECONDS_" \
        -w "$BENCH_WARMUP" --seed $((42 + i)) --start-at "$T0" --series "$OUT/series-node$i.csv" \
        >"$OUT/row$i.tmp" 2>>"$OUT/loadgen.log" &
    lg_pids="$lg_pids $!"
done
BG_PIDS=$lg_pids
MEASURE_NS=$((T0 + $(awk -v w="$BENCH_WARMUP" 'BEGIN { printf "%d", w * 1e9 }')))
sleep_until $((MEASURE_NS + ADD_AT * 1000000000))
used=0
for i in 0 1 2; do used=$((used + $(stat_of $i nessie_index_used))); done
A0=$(now_ns)
bench_log "nessie: add of node 3 at $(((A0 - MEASURE_NS) / 1000000)) ms into the measured time ($used entries in the index)"
"$BENCH_ROOT/tools/nessie-cluster" add --dir "$NESSIE_DIR" >"$OUT/add.log" 2>&1 ||
    bench_die "nessie-cluster add failed (see $OUT/add.log)"
A1=$(now_ns)
bench_log "nessie: $(tail -n 1 "$OUT/add.log")"
moved=0
for i in 0 1 2; do moved=$((moved + $(stat_of $i nessie_moved))); done
sleep_until $((MEASURE_NS + REMOVE_AT * 1000000000))
rused=0
for i in 0 1 2 3; do rused=$((rused + $(stat_of $i nessie_index_used))); done
R0=$(now_ns)
bench_log "nessie: retire of node 3 at $(((R0 - MEASURE_NS) / 1000000)) ms into the measured time ($rused entries in the index)"
"$BENCH_ROOT/tools/nessie-cluster" remove --node 3 --dir "$NESSIE_DIR" >"$OUT/remove.log" 2>&1 ||
    bench_die "nessie-cluster remove failed (see $OUT/remove.log)"
R1=$(now_ns)
bench_log "nessie: $(tail -n 1 "$OUT/remove.log")"
rmoved=0
for i in 0 1 2; do rmoved=$((rmoved + $(stat_of $i nessie_moved))); done
rmoved=$((rmoved - moved))
for p in $lg_pids; do wait "$p" || bench_die "a loadgen failed: a wrong value, or no daemon (see $OUT/loadgen.log)"; done
BG_PIDS=""
errors=0
for i in 0 1 2; do
    row=$(cat "$OUT/row$i.tmp")
    rm -f "$OUT/row$i.tmp"
    COLS=nessie
    _bench_row "$row"
    errors=$((errors + $(row_field "$row" errors)))
done

# The three nodes' series summed per second: ops/s added, hit ratios averaged.
# A loadgen may leave its last second out: only the seconds every node has.
awk -F, 'FNR == 1 { next }
         { ops[$1] += $2; hit[$1] += $3; n[$1]++; if ($1 + 0 > last) last = $1 + 0 }
         END { print "second,ops_per_s,get_hit_ratio"
               for (s = 1; s <= last; s++) if (n[s] == 3) printf "%d,%.0f,%.4f\n", s, ops[s], hit[s] / 3 }' \
    "$OUT/series-node0.csv" "$OUT/series-node1.csv" "$OUT/series-node2.csv" >"$OUT/series.csv"
at_s() { awk -v a="$1" -v m="$MEASURE_NS" 'BEGIN { printf "%.2f", (a - m) / 1e9 }'; }
add_from=$(at_s "$A0")
add_to=$(at_s "$A1")
rm_from=$(at_s "$R0")
rm_to=$(at_s "$R1")
# A change's figures from series.csv: ops/s and hit ratio over the whole seconds from $3 to the
# change's start $1, the ops/s of the seconds overlapping the change ($1 to $2) over that, and the
# hit ratio of the second that starts 2 s after its end over that. series.csv's "second" is the
# end of its second (1 = the first second).
figures() {
    awk -F, -v f="$1" -v t="$2" -v b="$3" '
        NR == 1 { next }
        { s = $1; from = s - 1 }
        s <= f && from >= b { bo += $2; bh += $3; bn++ }
        s > f && from < t { d += $2; dn++ }
        from >= t + 2 && from < t + 3 { ah = $3; an = 1 }
        END {
            if (!bn || !dn || !an) { print "NaN NaN NaN NaN"; exit }
            printf "%.0f %.4f %.4f %.4f\n", bo / bn, bh / bn, (d / dn) / (bo / bn), ah / (bh / bn)
        }' "$OUT/series.csv"
}
set -- $(figures "$add_from" "$add_to" 0.5)
before_ops=$1 before_hit=$2 during=$3 hit_after=$4
set -- $(figures "$rm_from" "$rm_to" "$(awk -v t="$add_to" 'BEGIN { print t + 3 }')")
rbefore_ops=$1 rbefore_hit=$2 rduring=$3 rhit_after=$4
frac=$(awk -v m="$moved" -v u="$used" 'BEGIN { printf "%.4f", u ? m / u : 0 }')
rfrac=$(awk -v m="$rmoved" -v u="$rused" 'BEGIN { printf "%.4f", u ? m / u : 0 }')

plot elastic <<EOF
set title "Node 3 added online, then retired: 3 nodes, a loadgen on each (shim), 90% GETs, $KEYS keys"
set xlabel "seconds into the measured time"
set ylabel "ops/s (all nodes)"
set y2label "GET hit ratio"
set y2range [0:1.05]
set y2tics
set yrange [0:*]
set object 1 rect from $add_from, graph 0 to $add_to, graph 1 fc rgb "#dddddd" fs solid 0.5 behind
set label 1 "add" at $add_from, graph 0.95
set object 2 rect from $rm_from, graph 0 to $rm_to, graph 1 fc rgb "#dddddd" fs solid 0.5 behind
set label 2 "retire" at $rm_from, graph 0.95
plot '$OUT/series.csv' every ::1 using (\$1 - 0.5):2 with linespoints title "ops/s", \
     '' every ::1 using (\$1 - 0.5):3 axes x1y2 with linespoints title "GET hit ratio"
EOF

{
    echo "add_seconds $(awk -v a="$A0" -v b="$A1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')"
    echo "add_moved_fraction $frac (entries moved $moved of $used; 1/N = 0.25 for N = 4, goal <= 0.275)"
    echo "errors $errors (calls that failed in the whole run, the add and the retire)"
    echo "before: $before_ops ops/s, hit ratio $before_hit"
    echo "ratio add_throughput_during $during"
    echo "ratio add_hit_after $hit_after"
    echo "remove_seconds $(awk -v a="$R0" -v b="$R1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')"
    echo "remove_moved_fraction $rfrac (entries moved or relocated $rmoved of $rused; 1/N = 0.25 for N = 4, goal <= 0.275)"
    echo "before the retire: $rbefore_ops ops/s, hit ratio $rbefore_hit"
    echo "ratio remove_throughput_during $rduring"
    echo "ratio remove_hit_after $rhit_after"
} | tee "$OUT/summary.txt"
bench_end
