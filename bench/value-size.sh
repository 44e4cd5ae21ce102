#!/bin/sh
# bench/value-size.sh - goodput against value size, Nessie vs memcached (paper figures 5 to 7,
# and 12 for the Zipf distribution).
#
# For each key distribution (uniform, Zipf 0.99), GET fraction (50, 90, 99 %) and value size
# (256 B to 1 MiB), one loadgen run against memcached and the same binary through the shim
# against a 3-node Nessie cluster. Keys: 10000, fewer for large values (256 MiB of live data at
# most). Writes value-size.csv and value-size-uniform.png, value-size-zipf.png (goodput), and
# value-size-p50.png (GET p50 latency at 90 % GETs).
#
# Usage: bench/value-size.sh [--help]
#   environment: BENCH_SECONDS (3), BENCH_THREADS (client threads, 1), BENCH_SIZES, BENCH_RATIOS,
#   BENCH_DISTS (space-separated lists overriding the sweep)
set -eu
case ${1:-} in -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

SIZES=${BENCH_SIZES:-"256 1024 4096 16384 65536 262144 1048576"}
RATIOS=${BENCH_RATIOS:-"0.5 0.9 0.99"}
DISTS=${BENCH_DISTS:-"uniform zipf"}
THREADS=${BENCH_THREADS:-1}
bench_begin value-size "3-node Nessie (shim) vs memcached; sizes $SIZES; GET ratios $RATIOS; distributions $DISTS; $THREADS client thread(s); 128 B keys; keys min(10000, 256 MiB / size)"

mc_start
total=0
for s in $SIZES; do for d in $DISTS; do for g in $RATIOS; do total=$((total + 1)); done; done; done
step=0
for s in $SIZES; do
    # A fresh cluster per value size: Nessie's slab pages stay with the size class that first
    # took them (no rebalancing yet), so a sweep through sizes on one cluster would leave the
    # large sizes without memory.
    nessie_start 3
    for d in $DISTS; do
        for g in $RATIOS; do
            step=$((step + 1))
            keys=$(( 268435456 / s )); [ $keys -le 10000 ] || keys=10000
            bench_log "[$step/$total] $s B, $d, $g GETs: memcached, nessie"
            run_memcached memcached -v "$s" -n $keys -g "$g" -d "$d" -t "$THREADS"
            run_nessie nessie -v "$s" -n $keys -g "$g" -d "$d" -t "$THREADS"
        done
    done
    nessie_stop
done
bench_cleanup

lab=$(col label); vs=$(col value_size); gr=$(col get_ratio); di=$(col dist); gp=$(col goodput_mb_s); p50=$(col get_p50_us)
for d in $DISTS; do
    {
        echo "set multiplot layout 1,$(echo $RATIOS | wc -w) title 'Goodput vs value size, $d keys, $THREADS client thread(s): Nessie (shim, 3 nodes) vs memcached'"
        echo "set logscale x 2; set logscale y; set format x '%.0b%BB'"
        echo "set xlabel 'value size'; set ylabel 'goodput (MB/s)'; set style data linespoints"
        for g in $RATIOS; do
            echo "set title '$g GETs'"
            echo "plot '$CSV' using $vs:((strcol($lab) eq 'nessie' && strcol($di) eq '$d' && \$$gr == $g) ? \$$gp : NaN) title 'nessie' pt 7, \\"
            echo "     '' using $vs:((strcol($lab) eq 'memcached' && strcol($di) eq '$d' && \$$gr == $g) ? \$$gp : NaN) title 'memcached' pt 5"
        done
        echo "unset multiplot"
    } | plot "value-size-$d"
done
g=$(echo $RATIOS | tr ' ' '\n' | grep -x 0.9 || echo $RATIOS | cut -d' ' -f1)
{
    echo "set title 'GET p50 latency vs value size, $g GETs, $THREADS client thread(s)'"
    echo "set logscale x 2; set logscale y; set format x '%.0b%BB'"
    echo "set xlabel 'value size'; set ylabel 'GET p50 (us)'; set style data linespoints"
    printf "plot "
    sep=""
    for d in $DISTS; do
        printf "%s'%s' using %s:((strcol(%s) eq 'nessie' && strcol(%s) eq '%s' && \$%s == %s) ? \$%s : NaN) title 'nessie %s' pt 7" "$sep" "$CSV" "$vs" "$lab" "$di" "$d" "$gr" "$g" "$p50" "$d"
        printf ", '' using %s:((strcol(%s) eq 'memcached' && strcol(%s) eq '%s' && \$%s == %s) ? \$%s : NaN) title 'memcached %s' pt 5" "$vs" "$lab" "$di" "$d" "$gr" "$g" "$p50" "$d"
        sep=", "
    done
    echo
} | plot value-size-p50
bench_end
