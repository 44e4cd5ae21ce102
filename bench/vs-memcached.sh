#!/bin/sh
# bench/vs-memcached.sh - Nessie against memcached on the same client binaries: our load
# generator, and memcslap from libmemcached-tools (an unmodified client, through the shim).
#
# loadgen: 1 KiB and 128 KiB values, 90 % GETs, uniform keys, 1, 2 and 4 client threads.
# memcslap: --test=get and --test=set with 1 and 4 threads (--concurrency), its own keys and
# values; its "Time to get/set N keys" gives ops/s. Writes vs-memcached.csv (loadgen rows),
# memcslap.csv (system,test,concurrency,ops,seconds,ops_per_s), vs-memcached.png and memcslap.png.
#
# Usage: bench/vs-memcached.sh [--help]    (environment: BENCH_SECONDS, BENCH_THREADS_LIST,
#   BENCH_MEMCSLAP_OPS (ops per memcslap thread, 20000))
set -eu
case ${1:-} in -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

THREADS_LIST=${BENCH_THREADS_LIST:-"1 2 4"}
SLAP_OPS=${BENCH_MEMCSLAP_OPS:-20000}
bench_begin vs-memcached "3-node Nessie (shim) vs memcached; loadgen 1 KiB (10000 keys) and 128 KiB (1000 keys) values, 90% GETs, uniform, threads $THREADS_LIST; memcslap get/set, concurrency 1 and 4, $SLAP_OPS ops per thread"

mc_start
nessie_start 3
COLS_HEADER="case"
for t in $THREADS_LIST; do
    for c in small large; do
        if [ $c = small ]; then size=1024; keys=10000; else size=131072; keys=1000; fi
        COLS=$c
        bench_log "loadgen: $c values, $t thread(s): memcached, nessie"
        run_memcached memcached -v $size -n $keys -g 0.9 -t "$t"
        run_nessie nessie -v $size -n $keys -g 0.9 -t "$t"
    done
done

# memcslap prints "Time to get   N keys by   T threads:   S seconds."
SLAP=$OUT/memcslap.csv
{ grep '^#' "$CSV"; echo "system,test,concurrency,ops,seconds,ops_per_s"; } >"$SLAP"
slap() { # system test concurrency
    if [ "$1" = memcached ]; then
        out=$(memcslap --servers=127.0.0.1:"$MC_PORT" --concurrency="$3" --execute-number="$SLAP_OPS" --test="$2" 2>&1)
    else
        out=$(NESSIE_RUN_DIR=$NESSIE_DIR NESSIE_STRICT=1 "$BENCH_ROOT/tools/nessie-run" memcslap \
            --servers=127.0.0.1:9 --concurrency="$3" --execute-number="$SLAP_OPS" --test="$2" 2>&1)
    fi
    echo "$out" >>"$OUT/memcslap.log"
    echo "$out" | awk -v s="$1" -v t="$2" -v c="$3" '
        /^Time to (get|set) .* threads:/ { n = $4; sec = $(NF - 1); printf("%s,%s,%s,%d,%.3f,%.0f\n", s, t, c, n, sec, (sec > 0 ? n / sec : 0)); found = 1 }
        END { if (!found) exit 1 }' >>"$SLAP" || bench_die "memcslap against $1 printed no timing (see $OUT/memcslap.log)"
}
for c in 1 4; do
    for test in set get; do
        bench_log "memcslap --test=$test --concurrency=$c: memcached, nessie"
        slap memcached $test $c
        slap nessie $test $c
    done
done
bench_cleanup

lab=$(col label); th=$(col threads); ops=$(col ops_per_s); gp=$(col goodput_mb_s); cs=$(col case); p50=$(col get_p50_us)
plot vs-memcached <<EOF2
set multiplot layout 1,3 title 'Nessie (shim, 3 nodes) vs memcached, same client binaries, 90% GETs'
set style data linespoints; set xlabel 'client threads'; set xtics 1; set logscale y
set title 'loadgen, 1 KiB: ops/s'
plot '$CSV' using $th:((strcol($lab) eq 'nessie' && strcol($cs) eq 'small') ? \$$ops : NaN) title 'nessie' pt 7, \
     '' using $th:((strcol($lab) eq 'memcached' && strcol($cs) eq 'small') ? \$$ops : NaN) title 'memcached' pt 5
set title 'loadgen, 1 KiB: GET p50 (us)'
plot '$CSV' using $th:((strcol($lab) eq 'nessie' && strcol($cs) eq 'small') ? \$$p50 : NaN) title 'nessie' pt 7, \
     '' using $th:((strcol($lab) eq 'memcached' && strcol($cs) eq 'small') ? \$$p50 : NaN) title 'memcached' pt 5
set title 'loadgen, 128 KiB: goodput (MB/s)'
plot '$CSV' using $th:((strcol($lab) eq 'nessie' && strcol($cs) eq 'large') ? \$$gp : NaN) title 'nessie' pt 7, \
     '' using $th:((strcol($lab) eq 'memcached' && strcol($cs) eq 'large') ? \$$gp : NaN) title 'memcached' pt 5
unset multiplot
EOF2
plot memcslap <<EOF2
set title 'memcslap (unmodified client, through the shim): ops/s, 3-node Nessie vs memcached'
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8 border -1
set ylabel 'ops/s'; set logscale y; set key inside top left
plot '<grep -v ^# $SLAP | tail -n +2 | grep ^nessie' using 6:xtic(stringcolumn(2) . ' c=' . stringcolumn(3)) title 'nessie', \
     '<grep -v ^# $SLAP | tail -n +2 | grep ^memcached' using 6 title 'memcached'
EOF2
bench_end
