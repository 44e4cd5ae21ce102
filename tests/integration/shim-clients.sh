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
# holds (build/tests/channels-scenario), and the fallback: without a daemon and without
# NESSIE_STRICT, calls reach the configured server.
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
mcpid=""
cleanup() {
    "$cluster" stop --dir "$dir" --purge >/dev/null 2>&1 || true
    [ -n "$mcpid" ] && kill "$mcpid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
export NESSIE_RUN_DIR="$dir"
"$cluster" start --nodes 3 --dir "$dir" >/dev/null

# The baseline: a real memcached on a free port.
port=$((20000 + $$ % 20000))
user=""
[ "$(id -u)" = 0 ] && user="-u root"
memcached $user -p "$port" -l 127.0.0.1 -m 1024 -U 0 &
mcpid=$!
for i in $(seq 1 50); do
    memcping --servers=127.0.0.1:$port >/dev/null 2>&1 && break
    sleep 0.1
done
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

# Channels per client: 64 non-blocking operations ride in the thread's one channel; threads that
# exit release theirs (the daemon's curr_connections falls back).
if NESSIE_STRICT=1 "$run" "$BUILD/tests/channels-scenario" $nowhere >"$dir/chan.txt" 2>&1; then
    sed 's/^channels-scenario: /channels: /' "$dir/chan.txt"
else
    echo "channels-scenario: failed"
    cat "$dir/chan.txt"
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
