#!/bin/sh
# tests/integration/shim-clients.sh: unmodified memcached clients served by Nessie through
# libdeception.so (tools/nessie-run), against a 3-node local cluster, with NESSIE_STRICT=1 and the
# clients' servers option pointing at a port where nothing listens (so nothing can reach a real
# server). Differential: the same scenario run against a real memcached (no shim) must give the
# same transcript, in ascii and in binary mode: the libmemcached tools
# (tests/clients/tools_scenario.sh), pylibmc (tests/clients/pylibmc_scenario.py), Perl
# (tests/clients/perl_scenario.pl), PHP (tests/clients/php_scenario.php), Python's ctypes, which
# finds libmemcached's functions with dlsym on the library's own handle
# (tests/clients/ctypes_scenario.py), and the C API (build/tests/capi-scenario); keys the ascii
# protocol cannot carry, through the shim alone. A program PHP starts under nessie-run. Then memcslap with 4
# threads (get, mget; ascii and binary), the non-blocking extensions, the channels a client
# holds (build/tests/channels-scenario), memcached_dump's keys (memcdump, below), and the
# fallback: without a daemon and without NESSIE_STRICT, calls reach the configured server.
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
    # A sanitized shim would need the sanitizer runtime preloaded into every client (Python, the
    # tools): this test runs on the normal build only.
    echo "shim-clients: skipped under sanitizers"
    exit 0
fi

dir=$(mktemp -d /tmp/nessie-shim-XXXXXX)
mcpids=""
cleanup() {
    cd /
    "$cluster" stop --dir "$dir" --purge >/dev/null 2>&1 || true
    [ -n "$mcpids" ] && kill $mcpids 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
export NESSIE_RUN_DIR="$dir"
"$cluster" start --nodes 3 --dir "$dir" >/dev/null

user=""
[ "$(id -u)" = 0 ] && user="-u root"
memcached_start() { # memcached_start PORT [OPTION...]: a real memcached, once it answers
    p=$1
    shift
    memcached $user -p "$p" -l 127.0.0.1 -m 1024 -U 0 "$@" &
    mcpids="$mcpids $!"
    for i in $(seq 1 50); do
        memcping --servers=127.0.0.1:$p >/dev/null 2>&1 && break
        sleep 0.1
    done
}
# The baseline: a real memcached on a free port.
port=$((20000 + $$ % 10000)) # below the ephemeral ports (32768 and up)
memcached_start $port
nowhere=127.0.0.1:1
fail=0

compare() { # compare NAME: diff $dir/mc.txt $dir/ns.txt
    if diff -u "$dir/mc.txt" "$dir/ns.txt" >"$dir/diff.txt"; then
        echo "$1: identical ($(wc -l <"$dir/ns.txt") lines)"
    else
        echo "$1: DIFFERENT from memcached:"
        cat "$dir/diff.txt"
        fail=1
    fi
}

for mode in "" --binary; do
    m=${mode:-"--ascii"}
    "$here/tests/clients/tools_scenario.sh" 127.0.0.1:$port $mode >"$dir/mc.txt" 2>&1
    NESSIE_STRICT=1 "$run" "$here/tests/clients/tools_scenario.sh" $nowhere $mode >"$dir/ns.txt" 2>&1
    compare "libmemcached-tools $m"

    /usr/bin/python3 "$here/tests/clients/pylibmc_scenario.py" 127.0.0.1:$port $mode >"$dir/mc.txt" 2>&1
    NESSIE_STRICT=1 "$run" /usr/bin/python3 "$here/tests/clients/pylibmc_scenario.py" $nowhere $mode >"$dir/ns.txt" 2>&1
    compare "pylibmc $m"

    perl "$here/tests/clients/perl_scenario.pl" 127.0.0.1 $port $mode >"$dir/mc.txt" 2>&1
    NESSIE_STRICT=1 "$run" perl "$here/tests/clients/perl_scenario.pl" 127.0.0.1 1 $mode >"$dir/ns.txt" 2>&1
    compare "Perl $m"

    php "$here/tests/clients/php_scenario.php" 127.0.0.1 $port $mode >"$dir/mc.txt" 2>&1
    NESSIE_STRICT=1 "$run" php "$here/tests/clients/php_scenario.php" 127.0.0.1 1 $mode >"$dir/ns.txt" 2>&1
    compare "PHP $m"

    # ctypes: functions found by dlsym on libmemcached's own handle (the shim interposes dlsym).
    /usr/bin/python3 "$here/tests/clients/ctypes_scenario.py" 127.0.0.1:$port $mode >"$dir/mc.txt" 2>&1
    NESSIE_STRICT=1 "$run" /usr/bin/python3 "$here/tests/clients/ctypes_scenario.py" $nowhere $mode >"$dir/ns.txt" 2>&1
    compare "ctypes (dlopen + dlsym) $m"

    opt=""
    [ -n "$mode" ] && opt=" --BINARY-PROTOCOL"
    "$BUILD/tests/capi-scenario" "--SERVER=127.0.0.1:$port$opt" >"$dir/mc.txt" 2>&1
    NESSIE_STRICT=1 "$run" "$BUILD/tests/capi-scenario" "--SERVER=$nowhere$opt" >"$dir/ns.txt" 2>&1
    compare "C API $m"
done

# Keys the ascii protocol cannot carry (a space, a control character), without VERIFY_KEY: the
# library sends them to memcached, which breaks the connection or trips an assertion that aborts
# the program, so there is no transcript to compare. Through the shim such a key is refused
# (BAD KEY PROVIDED), is a miss in a multi-get (memcached reads "get a b" as two keys), and the
# handle stays usable. (With VERIFY_KEY, and in binary, the C API transcripts compare them.)
NESSIE_STRICT=1 CAPI_ODD_KEYS=1 "$run" "$BUILD/tests/capi-scenario" "--SERVER=$nowhere" >"$dir/odd.txt" 2>&1
odd_bad=$(grep -Evc ': (A BAD KEY WAS PROVIDED/CHARACTERS OUT OF RANGE( \(null\))?|SUCCESS( v)?)$' "$dir/odd.txt" || true)
odd_refused=$(grep -c 'set: A BAD KEY WAS PROVIDED' "$dir/odd.txt" || true)
odd_mget=$(grep -c 'mget: SUCCESS$' "$dir/odd.txt" || true)
if [ "$odd_bad" = 0 ] && [ "$odd_refused" = 10 ] && [ "$odd_mget" = 11 ] &&
        grep -q '^plain high set: SUCCESS' "$dir/odd.txt" &&
        [ "$(grep -c 'then set: SUCCESS$' "$dir/odd.txt")" = 11 ]; then
    echo "odd keys, ascii: 10 refused (BAD KEY PROVIDED), misses in a multi-get, bytes past 0x7f stored, the handle usable after each"
else
    echo "odd keys, ascii: unexpected answers:"; cat "$dir/odd.txt"; fail=1
fi

# nessie-run gives PHP's extension chain to PHP alone: a program PHP runs inherits the shim only
# (a shell given the chain failed to start: "undefined symbol: OnUpdateBool").
got=$(NESSIE_STRICT=1 "$run" php -r 'system("sh -c \"echo child-ok; echo \\\$LD_PRELOAD\"");' 2>&1)
if [ "$got" = "child-ok
$NESSIE_SHIM" ]; then
    echo "nessie-run php: a program PHP starts runs, with the shim alone preloaded"
else
    echo "nessie-run php: a program PHP starts: $got"
    fail=1
fi

# memcslap, 4 threads. Its errors go to stderr; there must be none.
for t in get mget; do
    for mode in "" --binary; do
        if ! NESSIE_STRICT=1 "$run" memcslap --servers=$nowhere --concurrency=4 --test=$t $mode \
                >"$dir/slap.txt" 2>"$dir/slap.err" || [ -s "$dir/slap.err" ]; then
            echo "memcslap --test=$t $mode: failed"
            cat "$dir/slap.txt" "$dir/slap.err"
            fail=1
        else
            echo "memcslap --test=$t ${mode:---ascii}: $(grep "Time to $t" "$dir/slap.txt" | tr -s ' ')"
        fi
    done
done

# The non-blocking extensions (memcached_iset/iget/test/wait): the paper's bursty-I/O example,
# every chunk read back and compared.
for mode in "" --binary; do
    if NESSIE_STRICT=1 "$run" "$BUILD/bench/nb-overlap" $mode $nowhere >"$dir/nb.txt" 2>&1; then
        echo "nb-overlap ${mode:---ascii}: $(sed -n 's/^  \(set\|get\): /\1 /p' "$dir/nb.txt" | tr '\n' ';')"
    else
        echo "nb-overlap ${mode:---ascii}: failed"
        cat "$dir/nb.txt"
        fail=1
    fi
done

# Long values, non-blocking: 512 KiB chunks, 32 of a block issued at once, more than the daemon
# stages for a channel (shim/nb.c, NB_GETS_INFLIGHT; each such value waits in the daemon to be
# fetched): none may be refused (32 of 64 igets were, as SERVER_MEMORY_ALLOCATION_FAILURE,
# before the shim kept its gets in flight within that room). On a node of its own, empty and
# with room for every chunk twice over (a 512 KiB item takes a 1 MiB slab page, and a replaced
# one waits an expiration period): a cache that dropped one would fail the check.
mkdir -p "$dir/long"
"$BUILD/reception" --print-config --set cluster.name="shim-long-$$" --set cluster.nodes=1 \
    --set cluster.data_bytes=268435456 >"$dir/long/nessie.conf"
"$cluster" start --nodes 1 --dir "$dir/long" --config "$dir/long/nessie.conf" >/dev/null
if NESSIE_RUN_DIR="$dir/long" NESSIE_STRICT=1 "$run" "$BUILD/bench/nb-overlap" --blocks 2 \
    --chunks 32 --chunk-bytes 524288 $nowhere >"$dir/nb-long.txt" 2>&1; then
    echo "nb-overlap 512 KiB chunks: $(sed -n 's/^  \(set\|get\): /\1 /p' "$dir/nb-long.txt" | tr '\n' ';')"
else
    echo "nb-overlap 512 KiB chunks: failed"
    cat "$dir/nb-long.txt"
    fail=1
fi
"$cluster" stop --dir "$dir/long" --purge >/dev/null 2>&1 || true

# Channels per client: 64 non-blocking operations ride in the thread's one channel; threads that
# exit release theirs (the daemon's curr_connections falls back).
if NESSIE_STRICT=1 "$run" "$BUILD/tests/channels-scenario" $nowhere >"$dir/chan.txt" 2>&1; then
    sed 's/^channels-scenario: /channels: /' "$dir/chan.txt"
else
    echo "channels-scenario: failed"
    cat "$dir/chan.txt"
    fail=1
fi

# memcached_dump. The baseline is a memcached started with -o no_lru_maintainer: one LRU per
# slab class, all of which `stats cachedump` lists (by default memcached 1.6 lists only its COLD
# LRU, so a key just set is mostly missing: the C API transcripts above compare outcomes only).
# Through the shim the cluster is flushed first (the C API's flush_all), so no earlier key counts.
# - The callbacks' contract (capi-scenario with CAPI_DUMP=1): the same transcript.
# - memcdump through node 0 lists every key set through node 0 with memccp (one of them set
#   twice) exactly once, and nothing else: not a key deleted, not one that expired, not those set
#   through node 1, which node 1's memcdump lists (and node 2's nothing). Against memcached the
#   same commands list the same keys, but for the expired one: memcached lists an expired item
#   until it reaps it.
# - The wire (build/tests/wire-client dump, on node 2): a walk whose requests each have room for
#   two of its keys lists them all once; requests no client sends (a part too small for a key, a
#   cursor past the region) get WIRE_E_MALFORMED, and the daemon goes on serving, unchanged.
dport=$((20000 + ($$ + 7) % 20000))
memcached_start $dport -o no_lru_maintainer
mc=127.0.0.1:$dport
CAPI_DUMP=1 "$BUILD/tests/capi-scenario" "--SERVER=$mc" >"$dir/mc.txt" 2>&1
CAPI_DUMP=1 NESSIE_STRICT=1 "$run" "$BUILD/tests/capi-scenario" "--SERVER=$nowhere" >"$dir/ns.txt" 2>&1
compare "memcached_dump's callbacks"

node() { # node N CMD...: CMD through the shim, served by node N
    n=$1
    shift
    NESSIE_NODE=$n NESSIE_STRICT=1 "$run" "$@"
}
mkdir "$dir/files"
cd "$dir/files" # memccp stores a file under its name
keys0="k0 k1 k2 k3 k4 k5 k6 k7 k8 k9"
for k in $keys0 gone old n1a n1b; do echo "value of $k" >"$k"; done
writes() { # writes SERVERS [RUNNER]: node 0's share; "old" expires at once (a time in 2001)
    $2 memccp --servers="$1" $keys0 gone
    echo "k3, written again" >k3
    $2 memccp --servers="$1" k3
    $2 memccp --servers="$1" --expire=1000000000 old
    $2 memcrm --servers="$1" gone
}
writes "$nowhere" "node 0"
node 1 memccp --servers=$nowhere n1a n1b
writes "$mc" ""
for n in 0 1 2; do # each node's memcdump, sorted, duplicates kept
    if ! node $n memcdump --servers=$nowhere >"$dir/raw$n.txt" 2>"$dir/dump$n.err"; then
        echo "memcdump through node $n: failed: $(cat "$dir/dump$n.err")"
        fail=1
    fi
    sort "$dir/raw$n.txt" >"$dir/dump$n.txt"
done
got0=$(cat "$dir/dump0.txt")
if [ "$got0" = "$(printf '%s\n' $keys0 | sort)" ] && [ "$(cat "$dir/dump1.txt")" = "n1a
n1b" ] && [ ! -s "$dir/dump2.txt" ]; then
    echo "memcdump: node 0 lists its 10 keys once each (one overwritten; none deleted, expired or of node 1), node 1 its 2, node 2 none"
else
    echo "memcdump: unexpected keys: $(cat "$dir/dump0.txt" | tr '\n' ' ') / $(cat "$dir/dump1.txt" | tr '\n' ' ') / $(cat "$dir/dump2.txt" | tr '\n' ' ')"
    fail=1
fi
mcgot=$(memcdump --servers=$mc | grep -vx old | sort)
if [ "$mcgot" = "$got0" ]; then
    echo "memcdump: node 0's keys are memcached's for the same commands (its expired key aside)"
else
    echo "memcdump: memcached lists $(echo "$mcgot" | tr '\n' ' '), node 0 $(echo "$got0" | tr '\n' ' ')"
    fail=1
fi
cd "$here"
# Keys of 101 bytes, two to a 260-byte part (a key record is 1 + its length).
wc="$BUILD/tests/wire-client -s $dir/node2.sock"
long=$(printf '%099d' 0)
for i in $(seq 10 24); do $wc set "w$i$long" v >/dev/null; done
want2=$(for i in $(seq 10 24); do echo "w$i$long"; done | sort)
if [ "$($wc dump 260 | sort)" = "$want2" ] && [ "$($wc dump | sort)" = "$want2" ]; then
    echo "wire dump: 15 keys in parts of 260 bytes (8 chunks at least) and in one, each once"
else
    echo "wire dump: in parts of 260 bytes: $($wc dump 260 | sort | tr '\n' ' ')"
    fail=1
fi
for bad in "250" "0 0x7fffffffffffffff"; do
    if got=$($wc dump $bad 2>&1) || [ "$got" != E_MALFORMED ]; then
        echo "wire dump $bad: answered '$got', not E_MALFORMED"
        fail=1
    fi
done
$wc dump 0 12345 >/dev/null || { echo "wire dump from a cursor inside a slot: failed"; fail=1; }
if [ "$($wc dump | sort)" = "$want2" ]; then
    echo "wire dump: a part too small and a cursor past the region refused (E_MALFORMED); the daemon serves on, unchanged"
else
    echo "wire dump: the keys changed after the bad requests"
    fail=1
fi

# Fallback: no daemon reachable, not strict: the call goes to the configured server (and a line
# on stderr says so). Strict: it fails.
printf 'fallback\n' >"$dir/fb.txt"
NESSIE_SOCKET=/nonexistent "$run" memccp --servers=127.0.0.1:$port "$dir/fb.txt" 2>"$dir/fb.err"
[ "$(memccat --servers=127.0.0.1:$port fb.txt)" = fallback ] || { echo "fallback: value not at the server"; fail=1; }
grep -q "go to the configured servers" "$dir/fb.err" || { echo "fallback: no warning"; fail=1; }
if NESSIE_STRICT=1 NESSIE_SOCKET=/nonexistent "$run" memccat --servers=127.0.0.1:$port fb.txt >/dev/null 2>&1; then
    echo "strict: a call succeeded without a daemon"
    fail=1
fi
echo "fallback and strict: as specified"

[ $fail -eq 0 ] && echo "shim-clients: passed" || { echo "shim-clients: FAILED"; exit 1; }
