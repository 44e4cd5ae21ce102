#!/bin/sh
# bench/limits.sh - this machine's own limits, measured the way the benchmarks use it, so
# results can be stated as a fraction of them (build/bench/limits):
#   - memory copy bandwidth for each value size the benchmarks use (256 B to 1 MiB), copying from
#     a source far larger than the caches (a GET of a value not just written) and from a hot one;
#   - the round trip of a wake-up between two processes: sleeping on a futex, and spinning.
# Writes limits.csv (memcpy rows and wakeup rows) and limits.png.
#
# Usage: bench/limits.sh [--help]
set -eu
case ${1:-} in -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

SIZES=${BENCH_SIZES:-"256 1024 4096 16384 65536 131072 262144 1048576"}
bench_begin limits "memcpy sizes $SIZES (cold source: 512 MiB; hot: one buffer); wake-up round trips, 4000 each"
LIM=$BUILD/bench/limits
[ -x "$LIM" ] || bench_die "$LIM missing: run make first"
bench_log "memory copy bandwidth"
# shellcheck disable=SC2086  # the size list
"$LIM" --header memcpy $SIZES >>"$CSV"
bench_log "wake-up round trips"
"$LIM" wakeup | sed 's/^/# /' >>"$CSV"
grep -v '^#' "$CSV" | awk -F, '{ printf "%-8s %-9s %-10s %-9s %s\n", $1, $2, $3, $4, $5 }' >&2
grep '^# wakeup' "$CSV" | sed 's/^# //' | awk -F, '{ printf "wake-up round trip (%s): p50 %s us, mean %s us\n", $2, $3, $4 }' >&2
plot limits <<EOF2
set title "Memory copy bandwidth on this machine (build/bench/limits)\n$(grep '^# wakeup' "$CSV" | sed 's/^# //' | awk -F, '{ printf "wake-up round trip %s: %s us; ", $2, $3 }')"
set logscale x 2; set format x '%.0b%BB'; set xlabel 'copy size'; set ylabel 'GB/s'; set yrange [0:*]
set style data linespoints; set key inside top right
plot '$CSV' using 2:3 title 'cold source (DRAM)' pt 7, '' using 2:4 title 'hot source (cache)' pt 5
EOF2
bench_end
