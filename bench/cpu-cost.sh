#!/bin/sh
# bench/cpu-cost.sh - CPU spent against offered load (paper figure 14, where watts are measured;
# power cannot be read on this machine, so CPU seconds per operation stand in for energy).
#
# For each system (memcached; Nessie through the shim, 3 nodes), first the closed-loop maximum
# with one client thread, then open-loop runs offering 5, 10, 25, 50, 75 and 100 % of that
# maximum. CPU seconds of every process involved (the client threads, memcached or all three
# daemons) are read over the measured window. Writes cpu-cost.csv and cpu-cost.png (CPU cores
# busy, and CPU microseconds per operation, against the fraction of the maximum).
#
# Usage: bench/cpu-cost.sh [--help]    (environment: BENCH_SECONDS, BENCH_VALUE (16384), BENCH_LOADS)
set -eu
case ${1:-} in -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

VALUE=${BENCH_VALUE:-16384}
LOADS=${BENCH_LOADS:-"5 10 25 50 75 100"}
bench_begin cpu-cost "3-node Nessie (shim) vs memcached; $VALUE B values; 90% GETs; uniform; 10000 keys; 1 client thread; open-loop loads $LOADS % of each system's closed-loop maximum"

mc_start
nessie_start 3
COLS_HEADER="load_pct"
for sys in memcached nessie; do
    COLS=max
    bench_log "$sys: closed-loop maximum"
    run_$sys $sys -v "$VALUE" -n 10000 -g 0.9
    max=$(row_field "$LAST_ROW" ops_per_s)
    for l in $LOADS; do
        rate=$(echo "$max $l" | awk '{ printf "%.0f", $1 * $2 / 100 }')
        COLS=$l
        bench_log "$sys: $l % of $max ops/s = $rate ops/s"
        run_$sys $sys -v "$VALUE" -n 10000 -g 0.9 -r "$rate"
    done
done
bench_cleanup

lab=$(col label); ld=$(col load_pct); sec=$(col seconds); cc=$(col cpu_client_s); cs=$(col cpu_server_s); per=$(col cpu_us_per_op)
plot cpu-cost <<EOF2
set multiplot layout 1,2 title 'CPU cost vs offered load: $VALUE B values, 90% GETs, 1 client thread (paper figure 14, CPU for watts)'
set xlabel 'offered load (% of the closed-loop maximum)'; set style data linespoints; set xrange [0:105]
set title 'CPU cores busy (clients + servers)'; set ylabel 'cores'; set yrange [0:*]
plot '$CSV' using $ld:(strcol($lab) eq 'nessie' ? (\$$cc + \$$cs) / \$$sec : NaN) title 'nessie' pt 7, \
     '' using $ld:(strcol($lab) eq 'memcached' ? (\$$cc + \$$cs) / \$$sec : NaN) title 'memcached' pt 5
set title 'CPU time per operation'; set ylabel 'CPU us per op'; set logscale y; set yrange [*:*]
plot '$CSV' using $ld:(strcol($lab) eq 'nessie' ? \$$per : NaN) title 'nessie' pt 7, \
     '' using $ld:(strcol($lab) eq 'memcached' ? \$$per : NaN) title 'memcached' pt 5
unset multiplot
EOF2
bench_end
