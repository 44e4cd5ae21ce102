#!/bin/sh
# bench/contention.sh - goodput as background processes compete for the CPU (paper figure 4).
#
# 16 KiB values, 90 % GETs, uniform keys, one client thread; 0 to BENCH_MAX_BURNERS (4) CPU
# burners (`yes >/dev/null`, each keeps a core busy if it can) running at the same priority
# while memcached and then Nessie (shim, 3 nodes) in each mode of BENCH_MODES (cd: client-driven,
# the paper's Nessie; sd: shipped to the key's home node, NessieSD; hy: GETs client-driven and
# writes shipped, NessieHY; auto: the selector) are measured with the same loadgen binary.
# Writes contention.csv and contention.png (goodput, and goodput relative to no contention).
#
# Usage: bench/contention.sh [--help]
#   environment: BENCH_SECONDS, BENCH_VALUE, BENCH_MAX_BURNERS, BENCH_MODES ("cd sd hy auto")
set -eu
case ${1:-} in -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

VALUE=${BENCH_VALUE:-16384}
MAXB=${BENCH_MAX_BURNERS:-4}
MODES=${BENCH_MODES:-"cd sd hy auto"}
bench_begin contention "3-node Nessie (shim) in modes $MODES vs memcached; $VALUE B values; 90% GETs; uniform; 10000 keys; 1 client thread; 0..$MAXB CPU burners (yes >/dev/null) on $(nproc) cpus"

trap 'burners_stop; bench_cleanup' EXIT
COLS_HEADER="burners"

# sweep SYSTEM: one run per burner count, 0 to MAXB, against whatever is running.
sweep() {
    b=0
    while [ $b -le "$MAXB" ]; do
        [ $b -gt 0 ] && burners_add 1
        COLS=$b
        bench_log "$1: $b burner(s)"
        if [ "$1" = memcached ]; then
            run_memcached memcached -v "$VALUE" -n 10000 -g 0.9
        else
            run_nessie "nessie-$1" -v "$VALUE" -n 10000 -g 0.9
        fi
        b=$((b + 1))
    done
    burners_stop
}

mc_start
sweep memcached
mc_stop
for m in $MODES; do
    nessie_start 3 "cluster.mode=$m"
    sweep "$m"
    nessie_stop
done
bench_cleanup

lab=$(col label); bu=$(col burners); gp=$(col goodput_mb_s)
base() { grep -v '^#' "$CSV" | awk -F, -v l="$1" -v c="$lab" -v b="$bu" -v g="$gp" '$b == 0 && $c == l { print $g }'; }
SYSTEMS="memcached"
for m in $MODES; do SYSTEMS="$SYSTEMS nessie-$m"; done
# One gnuplot plot command: a line per system, of column expression $1 (a function of $gp).
curves() {
    printf "plot "
    sep=""
    for s in $SYSTEMS; do
        b=$(base "$s")
        printf "%s'%s' using %s:(strcol(%s) eq '%s' ? %s : NaN) title '%s' pt 7" "$sep" "$CSV" "$bu" "$lab" "$s" "$(echo "$1" | sed "s/BASE/${b:-1}/")" "$s"
        sep=", "
    done
    echo
}
{
    echo "set multiplot layout 1,2 title 'CPU contention: $VALUE B values, 90% GETs, 1 client thread, $(nproc) cpus (paper figure 4)'"
    echo "set xlabel 'background CPU burners'; set xtics 1; set style data linespoints"
    echo "set ylabel 'goodput (MB/s)'; set logscale y"
    echo "set title 'goodput'"
    curves "\$$gp"
    echo "unset logscale y"
    echo "set title 'relative to no burners'; set ylabel 'fraction'; set yrange [0:*]"
    curves "\$$gp / BASE"
    echo "unset multiplot"
} | plot contention
# The paper's claim, as a line: client-driven goodput over server-driven with 2 burners (or
# the most this sweep ran, if fewer).
rb=2; [ "$MAXB" -ge 2 ] || rb=$MAXB
at() { grep -v '^#' "$CSV" | awk -F, -v l="$1" -v c="$lab" -v b="$bu" -v g="$gp" -v n="$rb" '$b == n && $c == l { print $g }'; }
cdg=$(at nessie-cd); sdg=$(at nessie-sd)
if [ -n "$cdg" ] && [ -n "$sdg" ]; then
    echo "$cdg $sdg" | awk -v n="$rb" '{ printf "ratio contended_cd_vs_sd %.2f   (goodput with %d burners: cd %.1f MB/s, sd %.1f MB/s)\n", ($2 > 0 ? $1 / $2 : 0), n, $1, $2 }' | tee "$OUT/summary.txt"
fi
bench_end
