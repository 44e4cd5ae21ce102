#!/bin/sh
# tests/integration/pylibmc-suite.sh: pylibmc's own upstream test suite as a differential test.
#
# The source distribution of the installed pylibmc's exact version is downloaded from the Python
# package index at test time (never committed; its sha256 checked against the index's), and its tests/ run with pytest twice: against a
# real memcached, and through the shim (tools/nessie-run, NESSIE_STRICT=1) against a 3-node
# Nessie cluster. pylibmc's suite checks its server with a raw `version` before each test, which
# no shim can answer: through the shim, the address it is given is tests/clients/version_stub.py,
# which answers `version` and refuses everything else, so a call that would reach a server shows
# up as a difference. Every test whose outcome differs between the two runs is a failure, except
# those listed in tests/clients/pylibmc-suite-expected.txt (one per line, with the reason; only
# server-only features may be listed). If the download is impossible the script says SKIPPED
# with the reason and exits 77 (tests/run-unit counts it as skipped, not passed).
#
# Environment: BUILD (default build), SAN (skipped under sanitizers, as shim-clients.sh).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$here/$BUILD" ;; esac
export NESSIE_RECEPTION="$BUILD/reception" NESSIE_SHIM="$BUILD/libdeception.so"
py=/usr/bin/python3 # Debian's, which has python3-pylibmc and python3-pytest

if [ -n "${SAN:-}" ]; then
    echo "pylibmc-suite: skipped under sanitizers (the clients would need the runtime preloaded)"
    exit 0
fi
skip() { echo "pylibmc-suite: SKIPPED: $*"; exit 77; }
$py -c 'import pytest' 2>/dev/null || skip "python3-pytest is not installed"
ver=$($py -c 'import pylibmc; print(pylibmc.__version__)') || skip "python3-pylibmc is not installed"

dir=$(mktemp -d /tmp/nessie-pylibmc-XXXXXX)
mcpid="" stubpid=""
cleanup() {
    "$here/tools/nessie-cluster" stop --dir "$dir/run" --purge >/dev/null 2>&1 || true
    [ -n "$mcpid" ] && kill "$mcpid" 2>/dev/null
    [ -n "$stubpid" ] && kill "$stubpid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT

# The sdist of exactly this version, checked against the index's digest.
why=$($py "$here/tests/integration/pypi-sdist.py" pylibmc "$ver" "$dir/sdist.tar.gz" 2>&1) ||
    skip "cannot download pylibmc $ver from PyPI: $(echo "$why" | tail -n 1)"
tar xzf "$dir/sdist.tar.gz" -C "$dir"
src="$dir/pylibmc-$ver"
[ -d "$src/tests" ] || skip "pylibmc $ver's source distribution has no tests/"

# One outcome per test: "NODEID OUTCOME", sorted.
run_suite() { # OUT-FILE PORT [nessie-run]
    out=$1 port=$2
    shift 2
    (cd "$src" && MEMCACHED_HOST=127.0.0.1 MEMCACHED_PORT=$port timeout 600 "$@" $py -m pytest \
        -p no:cacheprovider -q -rA tests >"$out.log" 2>&1) || true
    sed -n 's/^\(PASSED\|FAILED\|ERROR\|SKIPPED\|XFAIL\|XPASS\) \([^ ]*\).*/\2 \1/p' "$out.log" |
        sort -u >"$out"
    [ -s "$out" ] || { echo "pylibmc-suite: no test outcome in $out.log:"; tail -n 20 "$out.log"; exit 1; }
}

user=""
[ "$(id -u)" = 0 ] && user="-u root"
mcport=$((20000 + $$ % 10000)) # below the ephemeral ports (32768 and up)
memcached $user -p "$mcport" -l 127.0.0.1 -m 256 -U 0 &
mcpid=$!
stubport=$((mcport + 1))
$py "$here/tests/clients/version_stub.py" "$stubport" >"$dir/stub.out" 2>&1 &
stubpid=$!
for i in $(seq 1 50); do
    memcping --servers=127.0.0.1:$mcport >/dev/null 2>&1 && grep -q ready "$dir/stub.out" && break
    sleep 0.1
done
mkdir -p "$dir/run"
NESSIE_RUN_DIR="$dir/run" "$here/tools/nessie-cluster" start --nodes 3 --dir "$dir/run" >/dev/null

run_suite "$dir/memcached" "$mcport"
NESSIE_RUN_DIR="$dir/run" NESSIE_STRICT=1 run_suite "$dir/nessie" "$stubport" "$here/tools/nessie-run"

expected="$here/tests/clients/pylibmc-suite-expected.txt"
join -a1 -a2 -e missing -o 0,1.2,2.2 "$dir/memcached" "$dir/nessie" >"$dir/both"
n=$(wc -l <"$dir/both")
same=$(awk '$2 == $3' "$dir/both" | wc -l)
fail=0
echo "pylibmc $ver upstream suite: $n tests, $same with the same outcome against memcached and through the shim"
echo "  passed: $(grep -c ' PASSED$' "$dir/memcached" || true) against memcached, $(grep -c ' PASSED$' "$dir/nessie" || true) through the shim"
awk '$2 != $3' "$dir/both" | while read -r id mc ns; do
    if grep -q "^$id " "$expected" 2>/dev/null; then
        echo "  expected difference: $id: memcached $mc, Nessie $ns ($(grep "^$id " "$expected" | cut -d' ' -f2-))"
    else
        echo "  DIFFERENT: $id: memcached $mc, Nessie $ns"
        touch "$dir/unexpected"
    fi
done
if [ -e "$dir/unexpected" ]; then
    echo "pylibmc-suite: unexplained differences; the runs' logs:"
    grep -E "^(FAILED|ERROR)|Error|assert" "$dir/nessie.log" | head -n 40
    fail=1
fi
[ "$fail" = 0 ] && echo "pylibmc-suite: passed"
exit "$fail"
