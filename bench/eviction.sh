#!/bin/sh
# bench/eviction.sh - a full cache: Nessie's eviction against memcached's, at the same memory.
#
# A 3-node Nessie cluster with BENCH_EVICT_DATA_BYTES (64 MiB, the shipped data_bytes and
# memcached's default -m) of data per node, and memcached with -m = 3 x that; the same loadgen binary, 3 client processes in all (Nessie: one per node,
# each through its own node's shim, so every node's region fills; memcached: --procs 3), 1 KiB
# values under 128-byte keys, over a key space of 10x what the memory holds:
#   set-empty: SETs only, BENCH_SECONDS, over a tenth of the capacity in keys, on the empty
#            caches: the SET rates with nothing to evict, what fill_ops can hope for on this
#            machine (memcached's own rate drops too once full, so not a strict bound);
#   fill:    SETs of 10x the capacity, from empty (memory runs full early on);
#   full:    SETs only, BENCH_SECONDS (5) on the full cache: SET throughput while evicting;
#   zipf:    Zipf 0.99, 90 % GETs, a GET that misses followed by a SET of its key (a cache's
#            users), BENCH_EVICT_SECONDS (20): hit ratio and throughput over time;
#   uniform: the same with uniform keys.
# Prints `ratio fill_ops` (SET ops/s in `full`, Nessie / memcached), `ratio set_empty_ops` (the
# same in `set-empty`), `ratio full_vs_empty_sets` (Nessie's SET ops/s full / empty: what
# eviction and quarantine cost its writers), `fill_errors N` (SETs Nessie refused in set-empty,
# fill and full), `ratio zipf_hit` (GET hit ratio in `zipf`, Nessie / memcached), `ratio
# uniform_hit`, `ratio get_full_vs_empty` (Nessie's GETs of a tenth of the capacity in resident
# keys, BENCH_SECONDS each, the full cluster and a second one left empty in turns at the end,
# medians of three turns), and each system's evictions as its stats report them. Writes
# eviction.csv (loadgen rows), series-*.csv (per second), eviction.png (hit ratio and ops/s over
# time).
#
# Nessie's expiration period is the config's (100 ms; BENCH_EXPIRATION_MS sets another): an
# evicted or replaced item's memory comes back one period after it is unlinked (readers may
# still read it until then), so a full node holds SET rate x period of memory in quarantine,
# and the evictor keeps at most a quarter of a class ready: a full node takes at most
# slots / (4 x period) SETs a second. At 16 MiB a node (BENCH_EVICT_DATA_BYTES=16777216) that
# caps fill_ops near 1; at the paper's 1 s (BENCH_EXPIRATION_MS=1000) and 64 MiB, at ~13k SETs/s
# a node, and fill_ops measured 0.20 to 0.55.
#
# Usage: bench/eviction.sh [--help]   (environment: BENCH_SECONDS, BENCH_EVICT_SECONDS,
#   BENCH_EVICT_DATA_BYTES, BENCH_EXPIRATION_MS)
set -eu
case ${1:-} in -h|--help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
BENCH_SECONDS=${BENCH_SECONDS:-5}
BENCH_WARMUP=${BENCH_WARMUP:-0}
BENCH_DATA_BYTES=${BENCH_EVICT_DATA_BYTES:-67108864}
BENCH_MAX_ITEM=${BENCH_MAX_ITEM:-65536}
. "$(dirname "$0")/lib.sh"

NODES=3
VALUE=1024
KEY=128
SERIES_S=${BENCH_EVICT_SECONDS:-20}
# memcached gets the same total memory, in MiB.
BENCH_MC_MB=$((NODES * BENCH_DATA_BYTES / 1048576))
# Items the memory holds, roughly: header (Nessie 64 B, memcached ~56 B) + key + value.
CAPACITY=$((NODES * BENCH_DATA_BYTES / (64 + KEY + VALUE)))
KEYS=$((10 * CAPACITY))
FILL_OPS=$((10 * CAPACITY))

# The period the clusters run with (the config's default unless BENCH_EXPIRATION_MS).
EXPIRATION_MS=${BENCH_EXPIRATION_MS:-$("$BUILD/reception" --print-config | sed -n 's/^expiration_ms = //p')}
bench_begin eviction "3-node Nessie (shim, shm, $BENCH_DATA_BYTES data bytes per node, expiration $EXPIRATION_MS ms) vs memcached -m $BENCH_MC_MB; 3 client processes; $VALUE B values, $KEY B keys, $KEYS keys (10x the ~$CAPACITY items that fit); fill: $FILL_OPS SETs; full: SETs for $BENCH_SECONDS s; zipf 0.99 and uniform, 90% GETs, set on miss, $SERIES_S s each"
COLS_HEADER="phase"

LG="-v $VALUE -k $KEY -n $KEYS --no-preload"

# One phase on memcached: mc_phase PHASE [LOADGEN ARGS]
mc_phase() {
    COLS=$1
    phase=$1
    shift
    run_memcached memcached -P $NODES --series "$OUT/series-memcached-$phase.csv" $LG "$@"
}

# One phase on Nessie, a loadgen per node at once: nessie_phase PHASE [LOADGEN ARGS]. Sets
# N_OPS, N_GETS, N_HITS, N_ERRORS to the sums over the nodes.
nessie_phase() {
    COLS=$1
    phase=$1
    shift
    i=0
    pids=""
    for p in $NESSIE_PIDS; do
        NESSIE_NODE=$i NESSIE_RUN_DIR=$NESSIE_DIR NESSIE_STRICT=1 "$BENCH_ROOT/tools/nessie-run" \
            "$LOADGEN" -s 127.0.0.1:9 -l "nessie-node$i" -D "$BENCH_SECONDS" -w "$BENCH_WARMUP" \
            -W "node$i:$p" --series "$OUT/series-nessie$i-$phase.csv" --seed $((42 + i)) $LG "$@" \
            >"$OUT/row$i.tmp" 2>>"$OUT/loadgen.log" &
        pids="$pids $!"
        i=$((i + 1))
    done
    for p in $pids; do wait "$p" || bench_die "a loadgen failed (see $OUT/loadgen.log)"; done
    N_OPS=0 N_GETS=0 N_HITS=0 N_ERRORS=0
    i=0
    for p in $NESSIE_PIDS; do
        row=$(cat "$OUT/row$i.tmp")
        rm -f "$OUT/row$i.tmp"
        _bench_row "$row"
        N_OPS=$(awk -v a="$N_OPS" -v b="$(row_field "$row" ops_per_s)" 'BEGIN { print a + b }')
        N_GETS=$((N_GETS + $(row_field "$row" gets)))
        N_HITS=$((N_HITS + $(row_field "$row" get_hits)))
        N_ERRORS=$((N_ERRORS + $(row_field "$row" errors)))
        i=$((i + 1))
    done
    # The nodes' series, merged: ops/s summed, hit ratio averaged (equal loads).
    paste -d, "$OUT"/series-nessie[0-9]-"$phase".csv | awk -F, -v n=$NODES '
        NR == 1 { print "second,ops_per_s,get_hit_ratio"; next }
        { ops = 0; hit = 0; for (i = 0; i < n; i++) { ops += $(3 * i + 2); hit += $(3 * i + 3) }
          printf "%s,%.0f,%.4f\n", $1, ops, hit / n }' >"$OUT/series-nessie-$phase.csv"
    rm -f "$OUT"/series-nessie[0-9]-"$phase".csv
}

nessie_stat_sum() {
    s=0
    for sock in "$NESSIE_DIR"/node*.sock; do
        v=$("$BUILD/tests/wire-client" -s "$sock" stats 2>/dev/null | sed -n "s/^STAT $1 \([0-9]*\).*/\1/p")
        s=$((s + ${v:-0}))
    done
    echo "$s"
}

mc_start
# Two clusters alike: one is filled, the other stays empty. At the end the full one's GETs are
# compared with the empty one's, in turns, side by side in time: this machine's speed drifts by
# tens of percent over the minutes between the start and the end (get-empty alone read 180k to
# 275k ops/s over a day's runs).
RUN_MAIN=$RUN
RUN=$OUT/run-empty
nessie_start $NODES cluster.evict=true "cluster.name=bench-eviction-empty-$$"
EMPTY_DIR=$NESSIE_DIR EMPTY_PIDS=$NESSIE_PIDS
NESSIE_DIR="" # nessie_start stops the cluster it knows: not this one
RUN=$RUN_MAIN
# Stops the empty cluster once; bench_cleanup then stops the full one, whichever the phase left
# in NESSIE_DIR.
empty_stop() {
    if [ -n "$EMPTY_DIR" ]; then
        "$BENCH_ROOT/tools/nessie-cluster" stop --dir "$EMPTY_DIR" --purge >/dev/null 2>&1 || true
    fi
    EMPTY_DIR=""
}
trap 'empty_stop; NESSIE_DIR=${FULL_DIR:-$NESSIE_DIR}; bench_cleanup' EXIT
nessie_start $NODES cluster.evict=true
FULL_DIR=$NESSIE_DIR FULL_PIDS=$NESSIE_PIDS

# GETs of a few resident keys (a tenth of the capacity, preloaded), at the end: what being full
# costs a GET (eviction's leftovers, access hints).
GET_KEYS=$((CAPACITY / 10))
get_phase() {
    lg_all=$LG
    LG="-v $VALUE -k $KEY -n $GET_KEYS"
    nessie_phase "$1" -g 1
    LG=$lg_all
}

bench_log "set-empty: SETs only for $BENCH_SECONDS s over $GET_KEYS keys on the empty caches"
lg_all=$LG
LG="-v $VALUE -k $KEY -n $GET_KEYS --no-preload"
mc_phase set-empty -g 0
mc_set_empty=$(row_field "$LAST_ROW" ops_per_s)
nessie_phase set-empty -g 0
LG=$lg_all
n_set_empty=$N_OPS
fill_errors=$N_ERRORS

bench_log "fill: $FILL_OPS SETs over $KEYS keys: memcached, nessie"
mc_phase fill -g 0 -o "$FILL_OPS" -w 0
nessie_phase fill -g 0 -o $((FILL_OPS / NODES)) -w 0
fill_errors=$((fill_errors + N_ERRORS))

bench_log "full: SETs only for $BENCH_SECONDS s on the full caches"
mc_phase full -g 0
mc_full=$(row_field "$LAST_ROW" ops_per_s)
nessie_phase full -g 0
n_full=$N_OPS
fill_errors=$((fill_errors + N_ERRORS))

QUICK_S=$BENCH_SECONDS
BENCH_SECONDS=$SERIES_S
for d in zipf uniform; do
    bench_log "$d: 90% GETs, set on miss, $SERIES_S s"
    mc_phase "$d" -g 0.9 -d "$d" --set-on-miss
    eval "mc_hit_$d=\$(awk -v h=$(row_field "$LAST_ROW" get_hits) -v g=$(row_field "$LAST_ROW" gets) 'BEGIN { print g ? h / g : 0 }')"
    eval "mc_ops_$d=$(row_field "$LAST_ROW" ops_per_s)"
    nessie_phase "$d" -g 0.9 -d "$d" --set-on-miss
    eval "n_hit_$d=\$(awk -v h=$N_HITS -v g=$N_GETS 'BEGIN { print g ? h / g : 0 }')"
    eval "n_ops_$d=$N_OPS"
done

BENCH_SECONDS=$QUICK_S
GET_TURNS=3
bench_log "get: GETs of $GET_KEYS resident keys (stored again), the full cluster and an empty one in turn, $GET_TURNS times"
e_list="" f_list="" n_get_full_hit=""
t=0
while [ $t -lt $GET_TURNS ]; do
    NESSIE_DIR=$EMPTY_DIR NESSIE_PIDS=$EMPTY_PIDS
    get_phase get-empty
    e_list="$e_list $N_OPS"
    NESSIE_DIR=$FULL_DIR NESSIE_PIDS=$FULL_PIDS
    get_phase get-full
    f_list="$f_list $N_OPS"
    n_get_full_hit="$n_get_full_hit $(awk -v h=$N_HITS -v g=$N_GETS 'BEGIN { printf "%.4f", g ? h / g : 0 }')"
    t=$((t + 1))
done
median3() { echo "$@" | tr ' ' '\n' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
n_get_empty=$(median3 $e_list)
n_get_full=$(median3 $f_list)

mc_evictions=$(mc_stat evictions)
n_evictions=$(nessie_stat_sum evictions)
n_reclaimed=$(nessie_stat_sum reclaimed)
n_items=$(nessie_stat_sum curr_items)
mc_items=$(mc_stat curr_items)
empty_stop
bench_cleanup

printf '%-10s %14s %14s %12s %12s\n' phase "memcached" "nessie" "mc hit" "nessie hit"
printf '%-10s %14.0f %14.0f\n' set-empty "$mc_set_empty" "$n_set_empty"
printf '%-10s %14.0f %14.0f\n' full "$mc_full" "$n_full"
# shellcheck disable=SC2154  # set by eval above
printf '%-10s %14.0f %14.0f %12.3f %12.3f\n' zipf "$mc_ops_zipf" "$n_ops_zipf" "$mc_hit_zipf" "$n_hit_zipf"
# shellcheck disable=SC2154
printf '%-10s %14.0f %14.0f %12.3f %12.3f\n' uniform "$mc_ops_uniform" "$n_ops_uniform" "$mc_hit_uniform" "$n_hit_uniform"
echo "evictions: memcached $mc_evictions, nessie $n_evictions (reclaimed $n_reclaimed); items at the end: memcached $mc_items, nessie $n_items"
awk -v a="$n_full" -v b="$mc_full" 'BEGIN { printf "ratio fill_ops %.2f\n", b ? a / b : 0 }'
awk -v a="$n_set_empty" -v b="$mc_set_empty" 'BEGIN { printf "ratio set_empty_ops %.2f\n", b ? a / b : 0 }'
awk -v a="$n_full" -v b="$n_set_empty" 'BEGIN { printf "ratio full_vs_empty_sets %.2f\n", b ? a / b : 0 }'
echo "fill_errors $fill_errors"
awk -v a="$n_hit_zipf" -v b="$mc_hit_zipf" 'BEGIN { printf "ratio zipf_hit %.3f\n", b ? a / b : 0 }'
awk -v a="$n_hit_uniform" -v b="$mc_hit_uniform" 'BEGIN { printf "ratio uniform_hit %.3f\n", b ? a / b : 0 }'
awk -v a="$n_ops_zipf" -v b="$mc_ops_zipf" 'BEGIN { printf "ratio zipf_ops %.2f\n", b ? a / b : 0 }'
echo "nessie GETs of $GET_KEYS resident keys, medians of $GET_TURNS turns: empty cache $n_get_empty ops/s ($e_list), full cache $n_get_full ops/s ($f_list; hit ratios$n_get_full_hit)"
awk -v a="$n_get_full" -v b="$n_get_empty" 'BEGIN { printf "ratio get_full_vs_empty %.3f\n", b ? a / b : 0 }'

plot eviction <<EOF2
set multiplot layout 2,2 title 'Full caches, same memory ($BENCH_MC_MB MiB): Nessie (3 nodes, expiration $EXPIRATION_MS ms) vs memcached; 90% GETs, set on miss'
set xlabel 'seconds'; set style data lines
set title 'Zipf 0.99: GET hit ratio'; set yrange [0:1]
plot '$OUT/series-nessie-zipf.csv' every ::1 using 1:3 title 'nessie' lw 2, '$OUT/series-memcached-zipf.csv' every ::1 using 1:3 title 'memcached' lw 2
set title 'uniform: GET hit ratio'
plot '$OUT/series-nessie-uniform.csv' every ::1 using 1:3 title 'nessie' lw 2, '$OUT/series-memcached-uniform.csv' every ::1 using 1:3 title 'memcached' lw 2
set autoscale y; set yrange [0:*]
set title 'Zipf 0.99: ops/s'
plot '$OUT/series-nessie-zipf.csv' every ::1 using 1:2 title 'nessie' lw 2, '$OUT/series-memcached-zipf.csv' every ::1 using 1:2 title 'memcached' lw 2
set title 'fill (SETs, from empty): ops/s'
plot '$OUT/series-nessie-fill.csv' every ::1 using 1:2 title 'nessie' lw 2, '$OUT/series-memcached-fill.csv' every ::1 using 1:2 title 'memcached' lw 2
unset multiplot
EOF2
bench_end
