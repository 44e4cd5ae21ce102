#!/bin/sh
# bench/cpu-cost.sh - CPU spent against offered load (paper figure 14, where watts are measured;
# power cannot be read on this machine, so CPU seconds per operation stand in for energy).
#
# For each system (memcached; Nessie through the shim, 3 nodes, in each mode of BENCH_MODES; and
# sd-spin, mode sd with its servers spinning on their rings as the paper's NessieSD servers do,
# beside sd's adaptive wait), first the closed-loop maximum with one client thread, then
# open-loop runs offering 5, 10, 25, 50, 75 and 100 % of that maximum. CPU seconds of every
# process involved (the client threads, memcached or all three daemons) are read over the
# measured window. Writes cpu-cost.csv and cpu-cost.png (CPU cores busy, and CPU microseconds
# per operation, against the fraction of the maximum), and prints the CPU per operation at
# 20 % of memcached's maximum for every system (the paper's partial-load point).
#
# Usage: bench/cpu-cost.sh [--help]
#   environment: BENCH_SECONDS, BENCH_VALUE (16384), BENCH_LOADS, BENCH_MODES ("cd sd hy auto")
set -eu
case ${1:-} in -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

VALUE=${BENCH_VALUE:-16384}
LOADS=${BENCH_LOADS:-"5 10 25 50 75 100"}
MODES=${BENCH_MODES:-"cd sd hy auto"}
SYSTEMS="memcached"
for m in $MODES; do SYSTEMS="$SYSTEMS nessie-$m"; done
case " $MODES " in *" sd "*) SYSTEMS="$SYSTEMS nessie-sd-spin" ;; esac
bench_begin cpu-cost "3-node Nessie (shim) in modes $MODES (and sd with spinning servers) vs memcached; $VALUE B values; 90% GETs; uniform; 10000 keys; 1 client thread; open-loop loads $LOADS % of each system's closed-loop maximum, and 20 % of memcached's"

COLS_HEADER="load_pct"
# run SYSTEM [LOADGEN ARGS...]
run() {
    s=$1
    shift
    if [ "$s" = memcached ]; then run_memcached memcached "$@"; else run_nessie "$s" "$@"; fi
}
for sys in $SYSTEMS; do
    case $sys in
        memcached) mc_start ;;
        nessie-sd-spin) nessie_start 3 cluster.mode=sd reception.sd_poll=spin ;;
        *) nessie_start 3 "cluster.mode=${sys#nessie-}" ;;
    esac
    COLS=max
    bench_log "$sys: closed-loop maximum"
    run "$sys" -v "$VALUE" -n 10000 -g 0.9
    max=$(row_field "$LAST_ROW" ops_per_s)
    [ "$sys" != memcached ] || MC_MAX=$max
    for l in $LOADS; do
        rate=$(echo "$max $l" | awk '{ printf "%.0f", $1 * $2 / 100 }')
        COLS=$l
        bench_log "$sys: $l % of $max ops/s = $rate ops/s"
        run "$sys" -v "$VALUE" -n 10000 -g 0.9 -r "$rate" --no-preload
    done
    # The same absolute rate for every system: 20 % of memcached's maximum.
    rate=$(echo "$MC_MAX" | awk '{ printf "%.0f", $1 * 0.2 }')
    COLS=mc20
    bench_log "$sys: 20 % of memcached's maximum = $rate ops/s"
    run "$sys" -v "$VALUE" -n 10000 -g 0.9 -r "$rate" --no-preload
    bench_cleanup
done

lab=$(col label); ld=$(col load_pct); sec=$(col seconds); cc=$(col cpu_client_s); cs=$(col cpu_server_s); per=$(col cpu_us_per_op)
# curves EXPR: a gnuplot plot command with a line per system of column expression EXPR.
curves() {
    printf "plot "
    sep=""
    for s in $SYSTEMS; do
        printf "%s'%s' using %s:(strcol(%s) eq '%s' ? %s : NaN) title '%s' pt 7" "$sep" "$CSV" "$ld" "$lab" "$s" "$1" "$s"
        sep=", "
    done
    echo
}
{
    echo "set multiplot layout 1,2 title 'CPU cost vs offered load: $VALUE B values, 90% GETs, 1 client thread (paper figure 14, CPU for watts)'"
    echo "set xlabel 'offered load (% of the closed-loop maximum)'; set style data linespoints; set xrange [0:105]"
    echo "set title 'CPU cores busy (clients + servers)'; set ylabel 'cores'; set yrange [0:*]"
    curves "(\$$cc + \$$cs) / \$$sec"
    echo "set title 'CPU time per operation'; set ylabel 'CPU us per op'; set logscale y; set yrange [*:*]"
    curves "\$$per"
    echo "unset multiplot"
} | plot cpu-cost
grep -v '^#' "$CSV" | awk -F, -v l="$lab" -v ld="$ld" -v per="$per" -v sec="$sec" -v cc="$cc" -v cs="$cs" '
    $ld == "mc20" { c[$l] = $per; busy[$l] = ($cc + $cs) / $sec; order[++n] = $l }
    END {
        print "CPU at 20 % of memcached'"'"'s maximum (the same offered rate for every system):"
        for (i = 1; i <= n; i++) printf "  %-16s %8.2f CPU us per op, %.2f cores busy\n", order[i], c[order[i]], busy[order[i]]
        if (c["nessie-cd"] > 0) {
            if ("nessie-sd" in c) printf "ratio low_load_cpu_sd_vs_cd %.2f\n", c["nessie-sd"] / c["nessie-cd"]
            if ("nessie-sd-spin" in c) printf "ratio low_load_cpu_sdspin_vs_cd %.2f\n", c["nessie-sd-spin"] / c["nessie-cd"]
        }
    }' | tee "$OUT/summary.txt"
bench_end
