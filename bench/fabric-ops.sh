#!/bin/sh
# bench/fabric-ops.sh - fabric operations and bytes per GET and per PUT (paper figures 8 to 11).
#
# The paper's workload: 50 % GETs, 16 KiB values, uniform keys; here on a 3-node Nessie cluster
# through the shim. The engine counts, for every call, the fabric requests its thread posted and
# the bytes they moved (STAT nessie_get_fabric_ops_hist etc., see kvstore/nessie.h); the script
# reads them from every daemon before and after the measured run, and writes their distributions
# as CDFs: fabric-ops.csv (op,metric,value,calls,cdf), fabric-ops.png (operations per call) and
# fabric-bytes.png (bytes per call). Also run at 90 % GETs, and with Zipf keys, to show how the
# cache and the filter bits change them.
#
# Usage: bench/fabric-ops.sh [--help]    (environment: BENCH_SECONDS, BENCH_VALUE (16384))
set -eu
case ${1:-} in -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

VALUE=${BENCH_VALUE:-16384}
WORKLOADS=${BENCH_WORKLOADS:-"0.5:uniform 0.9:uniform 0.5:zipf"}
bench_begin fabric-ops "3-node Nessie (shim); $VALUE B values; 10000 keys; workloads (GET ratio:distribution) $WORKLOADS; one client thread on every node"

# Every daemon's STAT lines, one "NAME VALUE" per line, summed over the nodes.
stats_sum() {
    "$BENCH_ROOT/tools/nessie-stat" --dir "$NESSIE_DIR" --raw | awk '
        $1 ~ /_fabric_(ops|bytes)_hist$/ { n = split($2, v, ","); for (i = 1; i <= n; i++) s[$1, i - 1] += v[i]; len[$1] = n }
        END { for (k in len) for (i = 0; i < len[k]; i++) print k, i, s[k, i] }' | sort
}

DATA=$OUT/fabric-ops.csv
echo "workload,op,metric,value,calls,cdf" >"$OUT/cdf.tmp"
for w in $WORKLOADS; do
    g=${w%%:*}; d=${w#*:}
    nessie_start 3
    COLS_HEADER="workload"; COLS="$w"
    # As in the paper, every node runs a client, so entries are written by (and live on) every
    # node and GETs read remote ones. First each client stores every key, outside the counted
    # window; then the measured run.
    bench_log "$g GETs, $d keys, $VALUE B values: loading"
    run_nessie_every_node preload -v "$VALUE" -n 10000 -g 0 -D 0.2 -w 0
    stats_sum >"$OUT/before.tmp"
    bench_log "$g GETs, $d keys, $VALUE B values: measuring"
    run_nessie_every_node nessie -v "$VALUE" -n 10000 -g "$g" -d "$d" --no-preload
    stats_sum >"$OUT/after.tmp"
    # The difference, as CDFs. Ops bins are counts (the last: that many or more); bytes bins
    # i > 0 hold [2^(i-1), 2^i) bytes and are plotted at their upper end 2^i - 1 (bin 0: none).

    awk -v w="$w" '
        FNR == NR { before[$1, $2] = $3; next }
        {
            name = $1; i = $2; d = $3 - before[name, i]
            split(name, p, "_"); op = p[2]; metric = (name ~ /ops_hist/) ? "ops" : "bytes"
            if (metric == "bytes") v = (i == 0) ? 0 : 2 ^ i - 1; else v = i
            cnt[op, metric, i] = d; tot[op, metric] += d; val[op, metric, i] = v
            if (i + 1 > nb[op, metric]) nb[op, metric] = i + 1
        }
        END {
            for (k in nb) {
                split(k, q, SUBSEP); op = q[1]; metric = q[2]
                if (op != "get" && op != "put") continue
                if (tot[k] == 0) continue
                run = 0
                for (i = 0; i < nb[k]; i++) {
                    run += cnt[op, metric, i]
                    if (cnt[op, metric, i] > 0 || run == tot[k] && i > 0 && cnt[op, metric, i - 1] > 0)
                        printf "%s,%s,%s,%.0f,%d,%.6f\n", w, op, metric, val[op, metric, i], cnt[op, metric, i], run / tot[k]
                }
            }
        }' "$OUT/before.tmp" "$OUT/after.tmp" | sort -t, -k2,3 -k4n >>"$OUT/cdf.tmp"
    nessie_stop
done
rm -f "$OUT/before.tmp" "$OUT/after.tmp"
{ grep '^#' "$CSV"; cat "$OUT/cdf.tmp"; } >"$DATA.new"
# Keep the loadgen rows next to the CDFs: they say how many calls were made, and how fast.
mv "$CSV" "$OUT/loadgen-runs.csv"
mv "$DATA.new" "$DATA"
rm -f "$OUT/cdf.tmp"
CSV=$DATA

for m in ops bytes; do
    {
        if [ $m = ops ]; then
            echo "set xlabel 'fabric operations per call'; set xrange [0:*]"
        else
            echo "set xlabel 'fabric bytes per call'; set logscale x 2; set format x '%.0b%BB'"
        fi
        echo "set title 'CDF of fabric $m per call, $VALUE B values, 3 nodes (paper figures 8-11)'"
        echo "set ylabel 'fraction of calls'; set yrange [0:1.05]; set key inside bottom right"
        printf "plot "
        sep=""
        for w in $WORKLOADS; do
            for op in get put; do
                printf "%s'%s' using 4:((strcol(1) eq '%s' && strcol(2) eq '%s' && strcol(3) eq '%s') ? \$6 : NaN) with steps title '%s %s'" \
                    "$sep" "$CSV" "$w" "$op" "$m" "$(echo $op | tr a-z A-Z)" "$w"
                sep=", "
            done
        done
        echo
    } | plot "fabric-$m"
done
bench_end
