#!/bin/sh
# tests/integration/cluster-kill.sh: a 3-node local cluster under mixed traffic from 6 client
# processes (2 per node, each checking what it reads against what it was told); node 1's daemon
# is killed with SIGKILL mid-traffic and restarted by `nessie-cluster start`. Every acknowledged
# write must still be readable, no key stuck (the clients read every key back at the end), and
# no client may see a value that was never written. Also: an idle cluster's CPU use over 10 s is
# reported (not asserted), and each daemon's workers must be asleep.
#
# Environment: BUILD (build dir, default build), OPS (operations per client, default 20000),
# IDLE_SECONDS (default 10; 0 skips the idle measurement).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$here/$BUILD" ;; esac
OPS=${OPS:-20000}
IDLE_SECONDS=${IDLE_SECONDS:-10}
client="$BUILD/tests/wire-client"
cluster="$here/tools/nessie-cluster"
export NESSIE_RECEPTION="$BUILD/reception"

dir=$(mktemp -d /tmp/nessie-it-XXXXXX)
cleanup() {
    "$cluster" stop --dir "$dir" --purge >/dev/null 2>&1 || true
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT

# Its checker holds every acknowledged write to stay readable: no eviction here (the evictor is
# checked by nessie-stress, which records evictions in the histories, and by test_engine).
"$BUILD/reception" --print-config --set "cluster.name=it-$$" --set cluster.nodes=3 \
    --set cluster.index_slots=2048 --set cluster.data_bytes=33554432 \
    --set cluster.max_item_size=262144 --set cluster.expiration_ms=200 --set cluster.evict=false \
    --set reception.workers=2 --set reception.arena_bytes=65536 >"$dir/nessie.conf"
"$cluster" start --nodes 3 --dir "$dir" --config "$dir/nessie.conf"

pids=""
for n in 0 1 2; do
    for c in 0 1; do
        id=$((n * 2 + c))
        "$client" -s "$dir/node$n.sock" load --id $id --keys 200 --ops "$OPS" \
            --max-value 200000 --seed $$ >"$dir/client$id.out" 2>&1 &
        pids="$pids $!"
    done
done

# Kill node 1 once its clients are well under way: by its request count, not by the clock (a
# fixed sleep let fast runs finish first).
t=0
while :; do
    served=$("$client" -s "$dir/node1.sock" stats 2>/dev/null | sed -n 's/^STAT nessie_requests \([0-9]*\).*/\1/p')
    [ "${served:-0}" -ge 300 ] && break
    t=$((t + 1))
    [ $t -lt 1000 ] || { echo "cluster-kill: node 1 served only ${served:-0} requests in 10 s"; exit 1; }
    sleep 0.01
done
victim=$(cat "$dir/node1.pid")
kill -KILL "$victim"
echo "killed node 1 (pid $victim) mid-traffic"
sleep 0.5
"$cluster" start --dir "$dir"

fail=0
for p in $pids; do
    wait "$p" || fail=1
done
for id in 0 1 2 3 4 5; do
    echo "client $id: $(tail -n 1 "$dir/client$id.out")"
    # Refusals (out of memory, index full...) change nothing; show which ones there were.
    sed -n 's/^load: [^:]*: \([A-Z_]*\)$/    refused: \1/p' "$dir/client$id.out" | sort | uniq -c
done
if [ $fail -ne 0 ]; then
    echo "cluster-kill: a client saw a violation or failed:"
    cat "$dir"/client*.out
    exit 1
fi
# The clients of node 1 must have lived through its death.
grep -q "reconnects=[1-9]" "$dir/client2.out" "$dir/client3.out" || {
    echo "cluster-kill: node 1's clients never noticed the kill (it came too late?)"
    exit 1
}
"$cluster" status --dir "$dir"
# The operator's view after the run (tools/nessie-stat asks every daemon of the run directory).
"$here/tools/nessie-stat" --dir "$dir" | tee "$dir/stat.out"
grep -q "index load factor" "$dir/stat.out"

if [ "$IDLE_SECONDS" -gt 0 ]; then
    # Let the recyclers' post-restart sweeps finish, then measure.
    sleep 1
    ticks() { for n in 0 1 2; do awk '{print $14 + $15}' "/proc/$(cat "$dir/node$n.pid")/stat"; done | awk '{s += $1} END {print s}'; }
    t0=$(ticks)
    sleep "$IDLE_SECONDS"
    t1=$(ticks)
    hz=$(getconf CLK_TCK)
    echo "idle cluster: 3 daemons used $(awk "BEGIN {printf \"%.2f\", ($t1 - $t0) / $hz}") CPU seconds in $IDLE_SECONDS s"
fi
for n in 0 1 2; do
    asleep=$("$client" -s "$dir/node$n.sock" stats | sed -n 's/^STAT nessie_workers_asleep \([0-9]*\).*/\1/p')
    [ "$asleep" = 2 ] || { echo "cluster-kill: node $n: $asleep of 2 workers asleep when idle"; exit 1; }
done
# A fatal signal prints a backtrace (libunwind), and the restarted daemon has everything
# acknowledged before it. (Not in sanitized builds: their runtimes own the fatal signals.)
if [ -z "${SAN:-}" ]; then
    "$client" -s "$dir/node2.sock" set before-crash still-here
    kill -SEGV "$(cat "$dir/node2.pid")"
    sleep 0.5
    grep -q "fatal signal 11.*backtrace" "$dir/node2.log" || { echo "cluster-kill: no backtrace in node 2's log"; exit 1; }
    "$cluster" start --dir "$dir" >/dev/null
    [ "$("$client" -s "$dir/node2.sock" get before-crash)" = still-here ] || { echo "cluster-kill: write lost across a crash"; exit 1; }
    echo "node 2: SIGSEGV printed a backtrace; restarted with its data"
fi

# A clean stop, and nothing a sanitizer (sanitized builds) found in any daemon.
"$cluster" stop --dir "$dir"
if grep -l "Sanitizer\|runtime error" "$dir"/node*.log; then
    echo "cluster-kill: a daemon's log has sanitizer reports:"
    grep -A30 "Sanitizer\|runtime error" "$dir"/node*.log | head -n 80
    exit 1
fi
echo "cluster-kill: passed"
