#!/bin/sh
# tests/integration/pymemcache-suite.sh: the upstream test suite of a client that does not use
# libmemcached, pymemcache (pure Python, its own protocol code), run against a real memcached
# and against a Nessie node's memcached port (issue 32), as a differential test.
#
# The source distribution of pymemcache PYMEMCACHE_VERSION (4.0.0) is downloaded from the Python
# package index (tests/integration/pypi-sdist.py: sha256 checked, never committed), and its
# integration tests (pymemcache/test/test_integration.py, `-m integration`, which take the
# server from --server and --port) run with pytest twice: against memcached, and against node 1
# of a 2-node Nessie cluster started with --memcached-port. Every test whose outcome differs is a
# failure, and so is a test skipped on either side (a skip hides a test that did not run), a
# test that does not pass against memcached (it would hide what Nessie answers), and a run of
# fewer than PYMEMCACHE_TESTS tests (100 in 4.0.0: a collection error runs none). One
# test is left out on both, by name: test_tls, which upstream skips unconditionally (pymemcache
# issue 39) and which needs a TLS port neither server is given here. If the download is
# impossible the script says SKIPPED with the reason and exits 77 (tests/run-unit counts it as
# skipped, not passed).
#
# Environment: BUILD (default build), PYMEMCACHE_VERSION.
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$here/$BUILD" ;; esac
export NESSIE_RECEPTION="$BUILD/reception"
py=/usr/bin/python3 # Debian's, which has python3-pytest
ver=${PYMEMCACHE_VERSION:-4.0.0}
min_tests=${PYMEMCACHE_TESTS:-100}

skip() { echo "pymemcache-suite: SKIPPED: $*"; exit 77; }
$py -c 'import pytest' 2>/dev/null || skip "python3-pytest is not installed"
command -v memcached >/dev/null 2>&1 || skip "no memcached (tools/install-deps)"

dir=$(mktemp -d /tmp/nessie-pymemcache-XXXXXX)
mcpid=""
cleanup() {
    "$here/tools/nessie-cluster" stop --dir "$dir/run" --purge >/dev/null 2>&1 || true
    [ -z "$mcpid" ] || kill "$mcpid" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

why=$($py "$here/tests/integration/pypi-sdist.py" pymemcache "$ver" "$dir/sdist.tar.gz" 2>&1) ||
    skip "cannot download pymemcache $ver from PyPI: $(echo "$why" | tail -n 1)"
tar xzf "$dir/sdist.tar.gz" -C "$dir"
src="$dir/pymemcache-$ver"
[ -f "$src/pymemcache/test/test_integration.py" ] ||
    skip "pymemcache $ver's source distribution has no pymemcache/test/test_integration.py"

# Free ports: a base derived from the pid, below the kernel's ephemeral range (32768 and up, where
# a connection's own end may hold the port: CI's run of bc430bb found 32852 so taken), moved on
# while a port cannot be bound (a listener, or a connection's end, has it).
port_free() { $py -c 'import socket,sys; s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null; }
port_answers() { $py -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.2)' "$1" 2>/dev/null; }
base=$((25000 + ($$ % 1000) * 4))
while ! port_free $base || ! port_free $((base + 1)) || ! port_free $((base + 2)); do
    base=$((base + 4))
done
mcport=$((base + 2))

user=""
[ "$(id -u)" != 0 ] || user="-u root"
# shellcheck disable=SC2086
memcached $user -p "$mcport" -l 127.0.0.1 -m 64 -U 0 >"$dir/memcached.log" 2>&1 &
mcpid=$!
mkdir -p "$dir/run"
"$here/tools/nessie-cluster" start --nodes 2 --dir "$dir/run" --memcached-port "$base" >"$dir/start.out" ||
    { cat "$dir/start.out"; echo "pymemcache-suite: FAIL: the cluster did not start"; exit 1; }
for i in $(seq 1 50); do ! port_answers "$mcport" || break; sleep 0.1; done

# One outcome per test: "NODEID OUTCOME", sorted. The sdist's setup.cfg asks for coverage
# plugins the suite does not need: -c /dev/null reads no configuration.
run_suite() { # OUT-FILE PORT [TEST-ID...]: the whole suite, or the tests named
    out=$1 port=$2
    shift 2
    [ $# -gt 0 ] || set -- pymemcache/test/test_integration.py
    (cd "$src" && timeout 600 $py -m pytest "$@" -c /dev/null \
        --rootdir . -p no:cacheprovider -W ignore::pytest.PytestUnknownMarkWarning -q -rA \
        -m integration --deselect pymemcache/test/test_integration.py::test_tls \
        --server=127.0.0.1 --port="$port" >"$out.log" 2>&1) || true
    set -- "$out"
    sed -n 's/^\(PASSED\|FAILED\|ERROR\|SKIPPED\|XFAIL\|XPASS\) \([^ ]*\).*/\2 \1/p' "$1.log" |
        sort -u >"$1"
    [ -s "$1" ] || { echo "pymemcache-suite: no test outcome in $1.log:"; tail -n 20 "$1.log"; exit 1; }
}
run_suite "$dir/memcached" "$mcport"
run_suite "$dir/nessie" "$((base + 1))"

join -a1 -a2 -e missing -o 0,1.2,2.2 "$dir/memcached" "$dir/nessie" >"$dir/both"

# A test that passed on one server and failed on the other is run again, on both: some upstream
# tests race the clock (test_touch sets a key for 1 s, then touches it: on either server the key
# lives 0-1 s, as memcached's seconds tick, so a slow run, a sanitized daemon's, may see it
# expire first). A difference that does not come back is said, not counted; one that does is.
again=$(awk '($2 == "PASSED" && $3 == "FAILED") || ($2 == "FAILED" && $3 == "PASSED") { print $1 }' "$dir/both")
if [ -n "$again" ]; then
    # shellcheck disable=SC2086  # one test id per word
    run_suite "$dir/memcached.again" "$mcport" $again
    # shellcheck disable=SC2086
    run_suite "$dir/nessie.again" "$((base + 1))" $again
    for id in $again; do
        m=$(awk -v id="$id" '$1 == id { print $2 }' "$dir/memcached.again")
        x=$(awk -v id="$id" '$1 == id { print $2 }' "$dir/nessie.again")
        if [ -n "$m" ] && [ "$m" = "$x" ]; then
            echo "  run again: $id: $m on both (the first run's difference did not come back)"
            awk -v id="$id" -v o="$m" '$1 == id { $2 = o; $3 = o } { print }' "$dir/both" >"$dir/both.new"
            mv "$dir/both.new" "$dir/both"
        else
            echo "  run again: $id: memcached ${m:-missing}, Nessie ${x:-missing}: the difference stands"
        fi
    done
fi
n=$(wc -l <"$dir/both")
same=$(awk '$2 == $3 && $2 != "SKIPPED"' "$dir/both" | wc -l)
echo "pymemcache $ver upstream integration suite: $n tests (test_tls left out), $same with the same outcome against memcached and a Nessie port"
echo "  passed: $(grep -c ' PASSED$' "$dir/memcached" || true) against memcached, $(grep -c ' PASSED$' "$dir/nessie" || true) against Nessie"
fail=0
if [ "$n" -lt "$min_tests" ]; then
    echo "pymemcache-suite: only $n tests ran (at least $min_tests expected); memcached's run:"
    tail -n 20 "$dir/memcached.log"
    fail=1
fi
if awk '$2 != "PASSED" { print "  NOT PASSED against memcached: " $1 " " $2; bad = 1 } END { exit !bad }' "$dir/both"; then
    echo "pymemcache-suite: the reference run must pass every test (is memcached up? see above)"
    fail=1
fi
if awk '$2 != $3 || $2 == "SKIPPED" { print "  DIFFERENT: " $1 ": memcached " $2 ", Nessie " $3; bad = 1 } END { exit !bad }' "$dir/both"; then
    echo "pymemcache-suite: differences (a skip counts as one); the Nessie run's failures:"
    grep -E "^(FAILED|ERROR)|^E " "$dir/nessie.log" | head -n 40
    fail=1
fi
[ "$fail" = 0 ] && echo "pymemcache-suite: passed"
exit "$fail"
