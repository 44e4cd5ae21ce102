#!/bin/sh
# bench/breakdown.sh - what each of Nessie's optimizations buys (paper figure 13).
#
# Zipf keys (0.99), 16 KiB values, 50 % and 99 % GETs, one client on every node of a 3-node
# cluster (as in the paper). Five configurations, each adding one optimization to the previous:
# basic (no filter bits, no cache, no previous versions, single reads), + filter bits, + cache,
# + previous versions, + multiple reads (all on: the default). Writes breakdown.csv (every
# loadgen row), breakdown-summary.csv (config, GET ratio, total goodput) and breakdown.png.
#
# Usage: bench/breakdown.sh [--help]    (environment: BENCH_SECONDS, BENCH_VALUE (16384))
set -eu
case ${1:-} in -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

VALUE=${BENCH_VALUE:-16384}
RATIOS=${BENCH_RATIOS:-"0.5 0.99"}
bench_begin breakdown "3-node Nessie (shim); Zipf 0.99; $VALUE B values; 10000 keys; GET ratios $RATIOS; one client thread on every node; configurations basic, +filter, +cache, +prev, +multi"

# The configurations, cumulative: NAME and the settings that differ from the defaults.
config_lines() {
    f="cluster.filter_bits=0"; c="optimizations.cache=false"
    p="optimizations.previous_versions=false"; m="optimizations.multi_read=false"
    case $1 in
    basic) ;;
    +filter) f="" ;;
    +cache) f=""; c="" ;;
    +prev) f=""; c=""; p="" ;;
    +multi) f=""; c=""; p=""; m="" ;;
    esac
    for l in "$f" "$c" "$p" "$m"; do [ -n "$l" ] && echo "$l"; done
    return 0
}

SUMMARY=$OUT/breakdown-summary.csv
{ grep '^#' "$CSV"; echo "config,get_ratio,goodput_mb_s,ops_per_s"; } >"$SUMMARY"
COLS_HEADER="config"
for cfg in basic +filter +cache +prev +multi; do
    # shellcheck disable=SC2046  # one argument per config line
    IFS='
'
    set -- $(config_lines "$cfg")
    unset IFS
    nessie_start 3 "$@"
    for g in $RATIOS; do
        COLS=$cfg
        bench_log "$cfg, $g GETs"
        run_nessie_every_node "$cfg" -v "$VALUE" -n 10000 -g "$g" -d zipf
        echo "$cfg,$g,$SUM_GOODPUT,$SUM_OPS" >>"$SUMMARY"
    done
    nessie_stop
done

CSV_ROWS=$CSV
CSV=$SUMMARY
{
    echo "set title 'Optimization breakdown: Zipf 0.99, $VALUE B values, 3 nodes, a client on each (paper figure 13)'"
    echo "set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8 border -1"
    echo "set ylabel 'goodput (MB/s), all clients'; set yrange [0:*]; set key inside top left"
    printf "plot "
    sep=""
    for g in $RATIOS; do
        printf "%s'<grep -v ^# %s | awk -F, \"\\\\\$2 == %s\"' using 3:xtic(1) title '%s GETs'" "$sep" "$SUMMARY" "$g" "$g"
        sep=", "
    done
    echo
} | plot breakdown
CSV=$CSV_ROWS
bench_end
