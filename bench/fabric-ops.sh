#!/bin/sh
# bench/fabric-ops.sh - fabric operations and bytes per GET and per PUT (paper figures 8 to 11).
#
# The paper's workload: 50 % GETs, 16 KiB values, uniform keys; here on a 3-node Nessie cluster
# through the shim, in each mode of BENCH_MODES (cd, the paper's Nessie; sd, NessieSD: every call
# shipped to the key's home node; hy, NessieHY: writes shipped). The engine counts, for every
# call, the fabric requests its thread posted and the bytes they moved (STAT
# nessie_get_fabric_ops_hist etc., see nessie/nessie.h; a shipped call is its request's WRITE
# and its reply's), and apart from them what each home node posted running the calls shipped to
# it (nessie_get_served_fabric_ops_hist: its own memory is local, a candidate slot or a value on
# a third node is not). The script reads them from every daemon before and after the measured
# run and writes their distributions as CDFs: fabric-ops.csv
# (workload,mode,op,metric,value,calls,cdf; op "get@home" is the home node's share of a GET),
# fabric-ops.png (operations per call) and fabric-bytes.png (bytes per call), and prints the mean
# per call of each, the requester's and the home node's. Also run at 90 % GETs, and with Zipf
# keys, to show how the cache and the filter bits change them.
#
# Usage: bench/fabric-ops.sh [--help]
#   environment: BENCH_SECONDS, BENCH_VALUE (16384), BENCH_WORKLOADS, BENCH_MODES ("cd sd hy")
set -eu
case ${1:-} in -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

VALUE=${BENCH_VALUE:-16384}
WORKLOADS=${BENCH_WORKLOADS:-"0.5:uniform 0.9:uniform 0.5:zipf"}
MODES=${BENCH_MODES:-"cd sd hy"}
bench_begin fabric-ops "3-node Nessie (shim) in modes $MODES; $VALUE B values; 10000 keys; workloads (GET ratio:distribution) $WORKLOADS; one client thread on every node"

# Every daemon's STAT lines, one "NAME VALUE" per line, summed over the nodes.
stats_sum() {
    "$BENCH_ROOT/tools/nessie-stat" --dir "$NESSIE_DIR" --raw | awk '
        $1 ~ /_fabric_(ops|bytes)_hist$/ { n = split($2, v, ","); for (i = 1; i <= n; i++) s[$1, i - 1] += v[i]; len[$1] = n }
        END { for (k in len) for (i = 0; i < len[k]; i++) print k, i, s[k, i] }' | sort
}

DATA=$OUT/fabric-ops.csv
echo "workload,mode,op,metric,value,calls,cdf" >"$OUT/cdf.tmp"
for m in $MODES; do
for w in $WORKLOADS; do
    g=${w%%:*}; d=${w#*:}
    nessie_start 3 "cluster.mode=$m"
    COLS_HEADER="workload,mode"; COLS="$w,$m"
    # As in the paper, every node runs a client, so entries are written by (and live on) every
    # node and GETs read remote ones. First each client stores every key, outside the counted
    # window; then the measured run.
    bench_log "mode $m, $g GETs, $d keys, $VALUE B values: loading"
    run_nessie_every_node preload -v "$VALUE" -n 10000 -g 0 -D 0.2 -w 0
    stats_sum >"$OUT/before.tmp"
    bench_log "mode $m, $g GETs, $d keys, $VALUE B values: measuring"
    run_nessie_every_node nessie -v "$VALUE" -n 10000 -g "$g" -d "$d" --no-preload
    stats_sum >"$OUT/after.tmp"
    # The difference, as CDFs. Ops bins are counts (the last: that many or more); bytes bins
    # i > 0 hold [2^(i-1), 2^i) bytes and are plotted at their upper end 2^i - 1 (bin 0: none).

    awk -v w="$w" -v m="$m" '
        FNR == NR { before[$1, $2] = $3; next }
        {
            name = $1; i = $2; d = $3 - before[name, i]
            split(name, p, "_"); op = p[2]; metric = (name ~ /ops_hist/) ? "ops" : "bytes"
            if (name ~ /_served_/) op = op "@home"
            if (metric == "bytes") v = (i == 0) ? 0 : 2 ^ i - 1; else v = i
            cnt[op, metric, i] = d; tot[op, metric] += d; val[op, metric, i] = v
            if (i + 1 > nb[op, metric]) nb[op, metric] = i + 1
        }
        END {
            for (k in nb) {
                split(k, q, SUBSEP); op = q[1]; metric = q[2]
                if (op !~ /^(get|put)(@home)?$/) continue
                if (tot[k] == 0) continue
                run = 0
                for (i = 0; i < nb[k]; i++) {
                    run += cnt[op, metric, i]
                    if (cnt[op, metric, i] > 0 || run == tot[k] && i > 0 && cnt[op, metric, i - 1] > 0)
                        printf "%s,%s,%s,%s,%.0f,%d,%.6f\n", w, m, op, metric, val[op, metric, i], cnt[op, metric, i], run / tot[k]
                }
            }
        }' "$OUT/before.tmp" "$OUT/after.tmp" | sort -t, -k3,4 -k5n >>"$OUT/cdf.tmp"
    nessie_stop
done
done
rm -f "$OUT/before.tmp" "$OUT/after.tmp"
{ grep '^#' "$CSV"; cat "$OUT/cdf.tmp"; } >"$DATA.new"
# Keep the loadgen rows next to the CDFs: they say how many calls were made, and how fast.
mv "$CSV" "$OUT/loadgen-runs.csv"
mv "$DATA.new" "$DATA"
rm -f "$OUT/cdf.tmp"
CSV=$DATA

nw=$(echo $WORKLOADS | wc -w)
for metric in ops bytes; do
    {
        echo "set multiplot layout 1,$nw title 'CDF of fabric $metric per call, $VALUE B values, 3 nodes, modes $MODES (paper figures 8-11)'"
        if [ $metric = ops ]; then
            echo "set xlabel 'fabric operations per call'; set xrange [0:*]"
        else
            echo "set xlabel 'fabric bytes per call'; set logscale x 2; set format x '%.0b%BB'"
        fi
        echo "set ylabel 'fraction of calls'; set yrange [0:1.05]; set key inside bottom right"
        for w in $WORKLOADS; do
            echo "set title '$w'"
            printf "plot "
            sep=""
            for m in $MODES; do
                for op in get put get@home put@home; do
                    # the home node's share exists only where calls were shipped
                    grep -q "^$w,$m,$op,$metric," "$CSV" || continue
                    printf "%s'%s' using 5:((strcol(1) eq '%s' && strcol(2) eq '%s' && strcol(3) eq '%s' && strcol(4) eq '%s') ? \$7 : NaN) with steps title '%s %s'" \
                        "$sep" "$CSV" "$w" "$m" "$op" "$metric" "$m" "$(echo $op | tr a-z A-Z)"
                    sep=", "
                done
            done
            echo
        done
        echo "unset multiplot"
    } | plot "fabric-$metric"
done
# Means per call (bytes: from the bins' upper ends, so an overestimate by less than 2x).
{ printf "%-14s %-5s %-9s %10s %12s\n" workload mode op ops/call bytes/call
grep -v '^#' "$CSV" | awk -F, '
    NR == 1 { next }
    { k = $1 "," $2 "," $3; n[k, $4] += $6; s[k, $4] += $5 * $6; keys[k] = 1 }
    END {
        for (k in keys) { split(k, f, ","); printf "%-14s %-5s %-9s %10.2f %12.0f\n", f[1], f[2], f[3], n[k, "ops"] ? s[k, "ops"] / n[k, "ops"] : 0, n[k, "bytes"] ? s[k, "bytes"] / n[k, "bytes"] : 0 }
    }' | sort; } | tee "$OUT/summary.txt"
bench_end
