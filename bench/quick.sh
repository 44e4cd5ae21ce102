#!/bin/sh
# bench/quick.sh - `make bench-quick`: Nessie against memcached, side by side in one run, in
# under three minutes.
#
# The same load generator binary (build/bench/loadgen, libmemcached) runs against a memcached
# server and, through the shim, against a local 3-node Nessie cluster: one client thread, 90 %
# GETs, uniform keys of 128 bytes; 1 KiB values over 10000 keys and 128 KiB values over 1000 keys.
# The four runs are repeated BENCH_REPS times (3), alternating systems so both see the same
# machine, and each ratio is the median of the repetitions' ratios. Prints a table and one line
# `ratio NAME VALUE` per ratio; CSV and PNG in bench/results/quick/.
#
# Usage: bench/quick.sh [--help]    (environment: BENCH_SECONDS, BENCH_REPS)
set -eu
case ${1:-} in -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

REPS=${BENCH_REPS:-3}
SMALL=1024
LARGE=131072
bench_begin quick "3-node Nessie (shim, shm fabric) vs memcached, same loadgen binary, 1 client thread, 90% GETs, uniform, 128 B keys; $SMALL B values over 10000 keys, $LARGE B values over 1000 keys; $REPS alternating repetitions"

mc_start
nessie_start 3
COLS_HEADER="rep,case"
rep=1
while [ $rep -le "$REPS" ]; do
    for c in small large; do
        if [ $c = small ]; then size=$SMALL; keys=10000; else size=$LARGE; keys=1000; fi
        COLS="$rep,$c"
        bench_log "rep $rep/$REPS: $c values ($size B): memcached"
        run_memcached memcached -v $size -n $keys -g 0.9
        bench_log "rep $rep/$REPS: $c values ($size B): nessie"
        run_nessie nessie -v $size -n $keys -g 0.9
    done
    rep=$((rep + 1))
done
bench_cleanup

# The machine's memory copy bandwidth for the large values, to state goodput as a fraction of it.
memcpy_gbs=$("$BUILD/bench/limits" memcpy $LARGE | cut -d, -f3)
echo "# memcpy $LARGE B from a cold source: $memcpy_gbs GB/s (build/bench/limits)" >>"$CSV"

# Medians per system and case, and median per-repetition ratios.
awk -F, -v memcpy="$memcpy_gbs" -v small=$SMALL -v large=$LARGE '
function median(list,    n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
/^#/ { next }
!hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
{
    k = $c["case"] SUBSEP $c["label"]
    ops[k] = ops[k] " " $c["ops_per_s"]; p50[k] = p50[k] " " $c["get_p50_us"]
    p99[k] = p99[k] " " $c["get_p99_us"]; gp[k] = gp[k] " " $c["goodput_mb_s"]
    cpu[k] = cpu[k] " " $c["cpu_us_per_op"]
    v[$c["rep"], $c["case"], $c["label"], "ops"] = $c["ops_per_s"]
    v[$c["rep"], $c["case"], $c["label"], "p50"] = $c["get_p50_us"]
    v[$c["rep"], $c["case"], $c["label"], "gp"] = $c["goodput_mb_s"]
    reps[$c["rep"]] = 1
}
END {
    for (r in reps) {
        r_sops = r_sops " " v[r, "small", "nessie", "ops"] / v[r, "small", "memcached", "ops"]
        r_sp50 = r_sp50 " " v[r, "small", "memcached", "p50"] / v[r, "small", "nessie", "p50"]
        r_lgp = r_lgp " " v[r, "large", "nessie", "gp"] / v[r, "large", "memcached", "gp"]
        r_lp50 = r_lp50 " " v[r, "large", "memcached", "p50"] / v[r, "large", "nessie", "p50"]
    }
    S = "small" SUBSEP; L = "large" SUBSEP
    printf "\nbench-quick: Nessie (3 nodes, shim) vs memcached, one loadgen binary, 1 client thread, 90%% GETs\n"
    printf "(medians of the repetitions; ratios are medians of per-repetition ratios)\n\n"
    printf "%-30s %12s %12s %9s   %s\n", "metric", "memcached", "nessie", "ratio", "target"
    printf "%-30s %12.0f %12.0f %8.2fx   %s\n", "1 KiB ops/s", median(ops[S "memcached"]), median(ops[S "nessie"]), median(r_sops), ">= 10x"
    printf "%-30s %12.2f %12.2f %8.2fx   %s\n", "1 KiB GET p50 (us)", median(p50[S "memcached"]), median(p50[S "nessie"]), median(r_sp50), "nessie <= 5 us"
    printf "%-30s %12.2f %12.2f %9s\n", "1 KiB GET p99 (us)", median(p99[S "memcached"]), median(p99[S "nessie"]), ""
    printf "%-30s %12.2f %12.2f %9s\n", "1 KiB CPU us per op (all)", median(cpu[S "memcached"]), median(cpu[S "nessie"]), ""
    printf "%-30s %12.0f %12.0f %8.2fx   %s\n", "128 KiB goodput (MB/s)", median(gp[L "memcached"]), median(gp[L "nessie"]), median(r_lgp), ">= 3x"
    printf "%-30s %12.2f %12.2f %8.2fx\n", "128 KiB GET p50 (us)", median(p50[L "memcached"]), median(p50[L "nessie"]), median(r_lp50)
    printf "%-30s %12.1f %12.1f %9s   %s\n", "128 KiB goodput / memcpy (%)", median(gp[L "memcached"]) / (memcpy * 10), median(gp[L "nessie"]) / (memcpy * 10), "", ">= 50 % of " memcpy " GB/s"
    printf "\n"
    printf "ratio small_get_ops %.2f\n", median(r_sops)
    printf "ratio small_get_p50 %.2f\n", median(r_sp50)
    printf "ratio large_get_goodput %.2f\n", median(r_lgp)
    printf "ratio large_get_p50 %.2f\n", median(r_lp50)
}' "$CSV" | tee "$OUT/summary.txt"

ops=$(col ops_per_s); gp=$(col goodput_mb_s); p50=$(col get_p50_us); lab=$(col label); cs=$(col case); rp=$(col rep)
plot quick <<EOF
set multiplot layout 1,3 title 'bench-quick: Nessie (shim, 3 nodes) vs memcached, 1 client thread, 90% GETs'
set style data linespoints
set xlabel 'repetition'
set xtics 1
set key inside bottom right
set logscale y
set title '1 KiB ops/s'
plot '$CSV' using $rp:((strcol($lab) eq 'nessie' && strcol($cs) eq 'small') ? \$$ops : NaN) title 'nessie' pt 7, \
     '' using $rp:((strcol($lab) eq 'memcached' && strcol($cs) eq 'small') ? \$$ops : NaN) title 'memcached' pt 5
set title '1 KiB GET p50 (us)'
plot '$CSV' using $rp:((strcol($lab) eq 'nessie' && strcol($cs) eq 'small') ? \$$p50 : NaN) title 'nessie' pt 7, \
     '' using $rp:((strcol($lab) eq 'memcached' && strcol($cs) eq 'small') ? \$$p50 : NaN) title 'memcached' pt 5
set title '128 KiB goodput (MB/s)'
unset logscale y
plot '$CSV' using $rp:((strcol($lab) eq 'nessie' && strcol($cs) eq 'large') ? \$$gp : NaN) title 'nessie' pt 7, \
     '' using $rp:((strcol($lab) eq 'memcached' && strcol($cs) eq 'large') ? \$$gp : NaN) title 'memcached' pt 5
unset multiplot
EOF
bench_end
