#!/bin/sh
# tests/integration/modes.sh: the server-driven modes (issue 16) behind unmodified clients. A
# 3-node local cluster runs with [cluster] mode = sd, then hy; the C API scenario and the
# libmemcached tools' scenario, run through libdeception.so on node 0, must give the same
# transcripts as against a real memcached (so every behaviour survives being shipped to the
# key's home node), and the daemons' stats must show operations shipped by node 0 and served by
# its peers (nessie-stat --raw).
#
# Environment: BUILD (default build).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$here/$BUILD" ;; esac
cluster="$here/tools/nessie-cluster"
run="$here/tools/nessie-run"
export NESSIE_RECEPTION="$BUILD/reception" NESSIE_SHIM="$BUILD/libdeception.so"

if [ -n "${SAN:-}" ]; then
    # As shim-clients.sh: the clients would need the sanitizer runtime preloaded.
    echo "modes: skipped under sanitizers"
    exit 0
fi

dir=$(mktemp -d /tmp/nessie-modes-XXXXXX)
mcpid=""
cleanup() {
    "$cluster" stop --dir "$dir/run" --purge >/dev/null 2>&1 || true
    [ -n "$mcpid" ] && kill "$mcpid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT

port=$((20000 + ($$ + 7919) % 20000))
user=""
[ "$(id -u)" = 0 ] && user="-u root"
memcached $user -p "$port" -l 127.0.0.1 -m 256 -U 0 &
mcpid=$!
for i in $(seq 1 50); do
    memcping --servers=127.0.0.1:$port >/dev/null 2>&1 && break
    sleep 0.1
done
"$BUILD/tests/capi-scenario" "--SERVER=127.0.0.1:$port" >"$dir/mc-ascii.txt" 2>&1
"$BUILD/tests/capi-scenario" "--SERVER=127.0.0.1:$port --BINARY-PROTOCOL" >"$dir/mc-binary.txt" 2>&1
"$here/tests/clients/tools_scenario.sh" 127.0.0.1:$port >"$dir/mc-tools.txt" 2>&1
nowhere=127.0.0.1:1
fail=0

compare() { # compare NAME EXPECTED GOT
    if diff -u "$2" "$3" >"$dir/diff.txt"; then
        echo "$1: identical to memcached ($(wc -l <"$3") lines)"
    else
        echo "$1: DIFFERENT from memcached:"
        cat "$dir/diff.txt"
        fail=1
    fi
}

stat_of() { # stat_of NODE NAME: the daemon's stat (nessie-stat --raw prints "name value")
    "$here/tools/nessie-stat" --raw --socket "$dir/run/node$1.sock" | sed -n "s/^$2 //p"
}

for mode in sd hy; do
    mkdir -p "$dir/run"
    "$BUILD/reception" --print-config --set "cluster.name=modes-$$-$mode" --set cluster.nodes=3 \
        --set cluster.index_slots=65536 --set cluster.data_bytes=33554432 \
        --set cluster.max_item_size=1048576 --set "cluster.mode=$mode" >"$dir/$mode.conf"
    export NESSIE_RUN_DIR="$dir/run"
    "$cluster" start --nodes 3 --dir "$dir/run" --config "$dir/$mode.conf" >/dev/null
    NESSIE_STRICT=1 "$run" "$BUILD/tests/capi-scenario" "--SERVER=$nowhere" >"$dir/ns.txt" 2>&1
    compare "C API ascii, mode $mode" "$dir/mc-ascii.txt" "$dir/ns.txt"
    NESSIE_STRICT=1 "$run" "$BUILD/tests/capi-scenario" "--SERVER=$nowhere --BINARY-PROTOCOL" >"$dir/ns.txt" 2>&1
    compare "C API binary, mode $mode" "$dir/mc-binary.txt" "$dir/ns.txt"
    NESSIE_STRICT=1 "$run" "$here/tests/clients/tools_scenario.sh" $nowhere >"$dir/ns.txt" 2>&1
    compare "libmemcached-tools, mode $mode" "$dir/mc-tools.txt" "$dir/ns.txt"

    got_mode=$(stat_of 0 nessie_mode)
    puts=$(stat_of 0 nessie_sd_shipped_put)
    gets=$(stat_of 0 nessie_sd_shipped_get)
    served=$(( $(stat_of 1 nessie_sd_served) + $(stat_of 2 nessie_sd_served) ))
    dropped=$(( $(stat_of 1 nessie_sd_dropped) + $(stat_of 2 nessie_sd_dropped) ))
    echo "mode $mode: node 0 shipped $puts writes and $gets GETs; nodes 1 and 2 served $served, dropped $dropped"
    [ "$got_mode" = "$mode" ] || { echo "mode $mode: the daemon reports mode '$got_mode'"; fail=1; }
    [ "${puts:-0}" -gt 0 ] && [ "$served" -ge "$puts" ] && [ "$dropped" -eq 0 ] || fail=1
    if [ "$mode" = sd ]; then
        [ "${gets:-0}" -gt 0 ] || { echo "mode sd: no GET shipped"; fail=1; }
    else
        [ "${gets:-0}" -eq 0 ] || { echo "mode hy: GETs shipped"; fail=1; }
    fi
    "$cluster" stop --dir "$dir/run" --purge >/dev/null
done

[ $fail -eq 0 ] && echo "modes: passed" || { echo "modes: FAILED"; exit 1; }
