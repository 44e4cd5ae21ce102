#!/bin/sh
# bench/value-size.sh - goodput against value size, Nessie in each mode vs memcached (paper
# figures 5 to 7, and 12 for the Zipf distribution).
#
# For each key distribution (uniform, Zipf 0.99), GET fraction (50, 90, 99 %) and value size
# (256 B to 1 MiB), one loadgen run against memcached and the same binary through the shim
# against a 3-node Nessie cluster in each mode of BENCH_MODES (cd, the paper's Nessie; sd,
# NessieSD; hy, NessieHY; auto, the selector). Keys: 10000, fewer for large values (256 MiB of
# live data at most). Writes value-size.csv and value-size-uniform.png, value-size-zipf.png
# (goodput), and value-size-p50.png (GET p50 latency at 90 % GETs), and prints, per workload,
# the smallest value size from which cd's goodput is above sd's (the paper: from 8-16 KiB).
#
# Usage: bench/value-size.sh [--help]
#   environment: BENCH_SECONDS (3), BENCH_THREADS (client threads, 1), BENCH_SIZES, BENCH_RATIOS,
#   BENCH_DISTS, BENCH_MODES ("cd sd hy auto") (space-separated lists overriding the sweep)
set -eu
case ${1:-} in -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

SIZES=${BENCH_SIZES:-"256 1024 4096 16384 65536 262144 1048576"}
RATIOS=${BENCH_RATIOS:-"0.5 0.9 0.99"}
DISTS=${BENCH_DISTS:-"uniform zipf"}
THREADS=${BENCH_THREADS:-1}
MODES=${BENCH_MODES:-"cd sd hy auto"}
SYSTEMS="memcached"
for m in $MODES; do SYSTEMS="$SYSTEMS nessie-$m"; done
bench_begin value-size "3-node Nessie (shim) in modes $MODES vs memcached; sizes $SIZES; GET ratios $RATIOS; distributions $DISTS; $THREADS client thread(s); 128 B keys; keys min(10000, 256 MiB / size)"

total=0
for s in $SIZES; do for d in $DISTS; do for g in $RATIOS; do for y in $SYSTEMS; do total=$((total + 1)); done; done; done; done
step=0
# workloads SYSTEM SIZE: every distribution and GET ratio at one value size, against whatever runs.
workloads() {
    for d in $DISTS; do
        for g in $RATIOS; do
            step=$((step + 1))
            keys=$(( 268435456 / $2 )); [ $keys -le 10000 ] || keys=10000
            bench_log "[$step/$total] $2 B, $d, $g GETs: $1"
            if [ "$1" = memcached ]; then
                run_memcached memcached -v "$2" -n $keys -g "$g" -d "$d" -t "$THREADS"
            else
                run_nessie "$1" -v "$2" -n $keys -g "$g" -d "$d" -t "$THREADS"
            fi
        done
    done
}
mc_start
for s in $SIZES; do
    workloads memcached "$s"
    # A fresh cluster per value size and mode: Nessie's slab pages stay with the size class that
    # first took them (no rebalancing yet), so a sweep through sizes on one cluster would leave
    # the large sizes without memory.
    for m in $MODES; do
        nessie_start 3 "cluster.mode=$m"
        workloads "nessie-$m" "$s"
        nessie_stop
    done
done
bench_cleanup

lab=$(col label); vs=$(col value_size); gr=$(col get_ratio); di=$(col dist); gp=$(col goodput_mb_s); p50=$(col get_p50_us)
for d in $DISTS; do
    {
        echo "set multiplot layout 1,$(echo $RATIOS | wc -w) title 'Goodput vs value size, $d keys, $THREADS client thread(s): Nessie (shim, 3 nodes) in each mode vs memcached'"
        echo "set logscale x 2; set logscale y; set format x '%.0b%BB'"
        echo "set xlabel 'value size'; set ylabel 'goodput (MB/s)'; set style data linespoints; set key top left"
        for g in $RATIOS; do
            echo "set title '$g GETs'"
            printf "plot "
            sep=""
            for y in $SYSTEMS; do
                printf "%s'%s' using %s:((strcol(%s) eq '%s' && strcol(%s) eq '%s' && \$%s == %s) ? \$%s : NaN) title '%s' pt 7" "$sep" "$CSV" "$vs" "$lab" "$y" "$di" "$d" "$gr" "$g" "$gp" "$y"
                sep=", "
            done
            echo
        done
        echo "unset multiplot"
    } | plot "value-size-$d"
done
g=$(echo $RATIOS | tr ' ' '\n' | grep -x 0.9 || echo $RATIOS | cut -d' ' -f1)
{
    echo "set title 'GET p50 latency vs value size, $g GETs, $THREADS client thread(s)'"
    echo "set logscale x 2; set logscale y; set format x '%.0b%BB'"
    echo "set xlabel 'value size'; set ylabel 'GET p50 (us)'; set style data linespoints; set key top left"
    printf "plot "
    sep=""
    for d in $DISTS; do
        for y in $SYSTEMS; do
            printf "%s'%s' using %s:((strcol(%s) eq '%s' && strcol(%s) eq '%s' && \$%s == %s) ? \$%s : NaN) title '%s %s' pt 7" "$sep" "$CSV" "$vs" "$lab" "$y" "$di" "$d" "$gr" "$g" "$p50" "$y" "$d"
            sep=", "
        done
    done
    echo
} | plot value-size-p50
# Where client-driven overtakes server-driven, per workload: the smallest size from which cd's
# goodput stays above sd's (the paper's crossover: 8-16 KiB).
grep -v '^#' "$CSV" | awk -F, -v l="$lab" -v vs="$vs" -v gr="$gr" -v di="$di" -v gp="$gp" '
    NR == 1 { next }
    $l == "nessie-cd" || $l == "nessie-sd" { w = $di " " $gr; g[w, $vs, $l] = $gp; sizes[$vs] = 1; ws[w] = 1 }
    END {
        n = 0
        for (s in sizes) sz[++n] = s + 0
        for (i = 2; i <= n; i++) for (j = i; j > 1 && sz[j] < sz[j - 1]; j--) { t = sz[j]; sz[j] = sz[j - 1]; sz[j - 1] = t }
        for (w in ws) {
            from = "none"
            for (i = n; i >= 1; i--) {
                if (!((w, sz[i], "nessie-cd") in g) || !((w, sz[i], "nessie-sd") in g)) continue
                if (g[w, sz[i], "nessie-cd"] > g[w, sz[i], "nessie-sd"]) from = sz[i]; else break
            }
            if (from == "none")
                printf "crossover %s GETs: cd above sd at no size (not at the largest)\n", w
            else
                printf "crossover %s GETs: cd above sd from %s B\n", w, from
        }
    }' | sort | tee "$OUT/summary.txt"
bench_end
