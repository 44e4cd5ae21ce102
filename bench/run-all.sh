#!/bin/sh
# bench/run-all.sh - `make bench`: every experiment, one after the other, with progress; then
# the list of CSV and PNG files. Takes about 25 minutes with the default run lengths
# (BENCH_SECONDS=3); BENCH_SECONDS=1 roughly halves it.
#
# Usage: bench/run-all.sh [--help]
set -eu
case ${1:-} in -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
t0=$(date +%s)
failed=""
for s in limits quick vs-memcached value-size fabric-ops breakdown contention cpu-cost eviction failover tcp flash flash-seed; do
    echo "== bench/$s.sh ($(( $(date +%s) - t0 )) s elapsed)"
    "$here/$s.sh" || failed="$failed $s"
done
echo "== done in $(( $(date +%s) - t0 )) s; results:"
ls -1 "${BENCH_OUT:-$here/results}"/*/*.csv "${BENCH_OUT:-$here/results}"/*/*.png 2>/dev/null
[ -z "$failed" ] || { echo "failed:$failed" >&2; exit 1; }
