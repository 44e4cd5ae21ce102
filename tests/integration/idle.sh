#!/bin/sh
# tests/integration/idle.sh: an idle node that holds many items keeps its recycle scan to the
# idle pace (reception/recycler.c, SCAN_IDLE_SLOTS_PER_MS: 64 slots a ms), and its statistics
# still come up to date.
#
# The scan visits every slot of the data region. At full pace (two passes per expiration period,
# while memory is short) a node holding 40k items visits about 800k slots a second: before the
# idle pace it did so forever, and a node of 200k 1 KiB items used 38 % of a core doing nothing.
# The check counts visits (nessie_recycle_scanned), not CPU time: a slower machine only visits
# fewer, so the bound holds on any machine.
#
# Environment: BUILD (build dir, default build), ITEMS (default 40000), IDLE_SECONDS (default 3;
# 0 skips the test, as tests/run-unit sets it under sanitizers: the fill's client goes through
# the sanitized shim, which would need its runtime preloaded into loadgen). A skip exits 77.
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${SAN:-}" ] || [ "${IDLE_SECONDS:-3}" = 0 ]; then
    echo "idle: skipped (sanitizers, or IDLE_SECONDS=0)"
    exit 77
fi
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$here/$BUILD" ;; esac
ITEMS=${ITEMS:-40000}
IDLE_SECONDS=${IDLE_SECONDS:-3}
client="$BUILD/tests/wire-client"
cluster="$here/tools/nessie-cluster"
export NESSIE_RECEPTION="$BUILD/reception"

dir=$(mktemp -d /tmp/nessie-idle-XXXXXX)
cleanup() {
    "$cluster" stop --dir "$dir" --purge >/dev/null 2>&1 || true
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "idle: $*"; exit 1; }

# Room for every item: nothing is evicted, so memory is never short after the fill.
"$BUILD/reception" --print-config --set "cluster.name=idle-$$" --set cluster.nodes=1 \
    --set cluster.index_slots=131072 --set cluster.data_bytes=134217728 \
    --set cluster.expiration_ms=100 >"$dir/nessie.conf"
"$cluster" start --nodes 1 --dir "$dir" --config "$dir/nessie.conf" >/dev/null

stat() { "$client" -s "$dir/node0.sock" stats | sed -n "s/^STAT $1 \([0-9]*\).*/\1/p"; }
slots() { "$client" -s "$dir/node0.sock" stats | sed -n 's/^STAT nessie_class_[0-9]*_slots \([0-9]*\).*/\1/p' | awk '{s += $1} END {print s + 0}'; }
now_ms() { date +%s%3N; }

# The fill: loadgen stores every key once (its preload) through the shim, then does one GET.
NESSIE_RUN_DIR=$dir NESSIE_STRICT=1 "$here/tools/nessie-run" "$BUILD/bench/loadgen" \
    -s 127.0.0.1:9 -n "$ITEMS" -v 1024 -g 1 -o 1 -w 0 >/dev/null 2>"$dir/loadgen.err" ||
    { cat "$dir/loadgen.err"; fail "the fill failed"; }
[ "$(stat evictions)" = 0 ] || fail "the fill evicted: the region is too small for this test"

# curr_items is counted by the scan: at the idle pace it must still come up to date within a
# few passes (a pass over S slots takes S / 64 ms).
n=$(slots)
wait_ms=$((3 * n / 64 + 3000))
t0=$(now_ms)
until [ "$(stat curr_items)" = "$ITEMS" ]; do
    [ $(($(now_ms) - t0)) -lt "$wait_ms" ] || fail "curr_items is $(stat curr_items), not $ITEMS, $wait_ms ms after the fill"
    sleep 0.1
done
echo "idle: $ITEMS items in $n slots; curr_items up to date $(($(now_ms) - t0)) ms after the fill"

# Past SCAN_SHORT_HOLD_MS since the fill (nothing was short anyway), then count the visits.
sleep 1.2
s0=$(stat nessie_recycle_scanned)
t0=$(now_ms)
sleep "$IDLE_SECONDS"
s1=$(stat nessie_recycle_scanned)
ms=$(($(now_ms) - t0))
visits=$((s1 - s0))
# 64 a ms at most, doubled for rounding and a run that takes a whole pass's worth at once.
bound=$((2 * 64 * ms + 4096))
full=$((2 * n * 1000 / 100 * ms / 1000))
echo "idle: the scan visited $visits slots in $ms ms idle (bound $bound; the full pace would be about $full)"
[ "$visits" -le "$bound" ] || fail "the scan kept a full pace on an idle node: $visits visits in $ms ms, more than $bound"
[ "$visits" -gt 0 ] || fail "the scan stopped altogether on an idle node"
"$cluster" stop --dir "$dir"
if grep -l "Sanitizer\|runtime error" "$dir"/node*.log; then
    grep -A30 "Sanitizer\|runtime error" "$dir"/node*.log | head -n 80
    fail "a daemon's log has sanitizer reports"
fi
echo "idle: passed"
