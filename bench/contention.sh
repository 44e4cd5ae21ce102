#!/bin/sh
# bench/contention.sh - goodput as background processes compete for the CPU (paper figure 4).
#
# 16 KiB values, 90 % GETs, uniform keys, one client thread; 0 to BENCH_MAX_BURNERS (4) CPU
# burners (`yes >/dev/null`, each keeps a core busy if it can) running at the same priority
# while memcached and then Nessie (shim, 3 nodes) are measured with the same loadgen binary.
# Writes contention.csv and contention.png (goodput, and goodput relative to no contention).
#
# Usage: bench/contention.sh [--help]    (environment: BENCH_SECONDS, BENCH_VALUE, BENCH_MAX_BURNERS)
set -eu
case ${1:-} in -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

VALUE=${BENCH_VALUE:-16384}
MAXB=${BENCH_MAX_BURNERS:-4}
bench_begin contention "3-node Nessie (shim) vs memcached; $VALUE B values; 90% GETs; uniform; 10000 keys; 1 client thread; 0..$MAXB CPU burners (yes >/dev/null) on $(nproc) cpus"

trap 'burners_stop; bench_cleanup' EXIT

mc_start
nessie_start 3
COLS_HEADER="burners"
b=0
while [ $b -le "$MAXB" ]; do
    [ $b -gt 0 ] && burners_add 1
    COLS=$b
    bench_log "$b burner(s): memcached, nessie"
    run_memcached memcached -v "$VALUE" -n 10000 -g 0.9
    run_nessie nessie -v "$VALUE" -n 10000 -g 0.9
    b=$((b + 1))
done
burners_stop
bench_cleanup

lab=$(col label); bu=$(col burners); gp=$(col goodput_mb_s)
base() { grep -v '^#' "$CSV" | awk -F, -v l="$1" -v c="$lab" -v b="$bu" -v g="$gp" '$b == 0 && $c == l { print $g }'; }
bn=$(base nessie); bm=$(base memcached)
plot contention <<EOF2
set multiplot layout 1,2 title 'CPU contention: $VALUE B values, 90% GETs, 1 client thread, $(nproc) cpus (paper figure 4)'
set xlabel 'background CPU burners'; set xtics 1; set style data linespoints
set ylabel 'goodput (MB/s)'; set logscale y
set title 'goodput'
plot '$CSV' using $bu:(strcol($lab) eq 'nessie' ? \$$gp : NaN) title 'nessie' pt 7, \
     '' using $bu:(strcol($lab) eq 'memcached' ? \$$gp : NaN) title 'memcached' pt 5
unset logscale y
set title 'relative to no burners'; set ylabel 'fraction'; set yrange [0:*]
plot '$CSV' using $bu:(strcol($lab) eq 'nessie' ? \$$gp / $bn : NaN) title 'nessie' pt 7, \
     '' using $bu:(strcol($lab) eq 'memcached' ? \$$gp / $bm : NaN) title 'memcached' pt 5
unset multiplot
EOF2
bench_end
