#!/bin/sh
# tests/integration/flash.sh: the flash tier's log in a running cluster (issue 31, its first
# part: eviction does not demote to it yet; the log itself is tests/unit/test_flash.c).
#   - `nessie-cluster start --flash DIR:BYTES` gives each node its log, DIR/<cluster>.node<N>.flash of
#     BYTES, reserved at start;
#   - the daemons report it under extstore's names, to memcstat (libmemcached-tools, through
#     the shim) and to nessie-stat;
#   - a daemon restarted on its tables (killed, then `start`) recovers its log; one that makes
#     its tables anew (after `stop --purge`) empties it;
#   - a log the disk has no room for is refused at start, with the reason (where the disk
#     holds less than the most a log may be).
#
# Environment: BUILD (default build).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$here/$BUILD" ;; esac
cluster="$here/tools/nessie-cluster"
export NESSIE_RECEPTION="$BUILD/reception"
export NESSIE_SHIM="$BUILD/libdeception.so"
command -v memcstat >/dev/null || { echo "flash: memcstat missing (libmemcached-tools)" >&2; exit 1; }

dir=$(mktemp -d /tmp/nessie-flash-XXXXXX)
cleanup() {
    "$cluster" stop --dir "$dir/run" --purge >/dev/null 2>&1 || true
    "$cluster" stop --dir "$dir/full" --purge >/dev/null 2>&1 || true
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
fail=0
bad() { echo "flash: FAIL: $*"; fail=1; }
mkdir "$dir/flash"
size=16777216

"$cluster" start --nodes 2 --dir "$dir/run" --flash "$dir/flash:$size" >/dev/null
for n in 0 1; do
    f=$(ls "$dir"/flash/*.node$n.flash 2>/dev/null | head -1)
    [ -f "$f" ] || { bad "node $n has no log $f"; continue; }
    # Its pages, and ahead of them a 4 KiB superblock and the life table (8 bytes a page, to
    # the block): 16 pages of 1 MiB.
    want=$((size + 4096 + 4096))
    [ "$(stat -c %s "$f")" = "$want" ] || bad "node $n's log is $(stat -c %s "$f") bytes, not $want"
    # Reserved: its blocks are the disk's now, not at the first demotion.
    [ $(($(stat -c %b "$f") * $(stat -c %B "$f"))) -ge "$want" ] || bad "node $n's log is not reserved"
done

# memcstat, an unmodified libmemcached tool, through the shim (on the normal build: a sanitized
# shim would need the sanitizer's runtime preloaded into the tool, as shim-clients.sh says).
if [ -z "${SAN:-}" ]; then
    NESSIE_SOCKET="$dir/run/node1.sock" "$here/tools/nessie-run" memcstat --servers=127.0.0.1 \
        >"$dir/memcstat.txt" || bad "memcstat failed"
    for want in "extstore_limit_maxbytes: $size" "extstore_page_size: 1048576" \
        "extstore_pages_free: 16" "extstore_objects_used: 0" "badcrc_from_extstore: 0"; do
        grep -qF "$want" "$dir/memcstat.txt" || bad "memcstat does not show \"$want\""
    done
else
    echo "flash: memcstat through the shim skipped under sanitizers (nessie-stat below reads the same stats)"
fi
"$here/tools/nessie-stat" --dir "$dir/run" >"$dir/nessie-stat.txt" || bad "nessie-stat failed"
[ "$(grep -c '^  flash: 0 items, 0 of 16777216 bytes used' "$dir/nessie-stat.txt")" = 2 ] ||
    { cat "$dir/nessie-stat.txt"; bad "nessie-stat does not show both nodes' flash"; }
grep -q "node 0: flash tier .*node0.flash, 16 MiB in 16 pages of 1024 KiB.*(new tables: emptied)" \
    "$dir/run/node0.log" || bad "node 0's log does not say its flash tier was emptied at its first start"

# Killed and started again: it re-attaches its tables and recovers its log (only the log lines
# written since count: the logs are appended to).
lines() { wc -l <"$1"; }
n1=$(lines "$dir/run/node1.log")
kill -KILL "$(cat "$dir/run/node1.pid")"
sleep 0.3
"$cluster" start --dir "$dir/run" >/dev/null
tail -n +$((n1 + 1)) "$dir/run/node1.log" | grep -q "node 1: flash tier .* records recovered" ||
    bad "node 1 did not recover its log after a restart on its tables"
# New tables (the cluster purged): the log is emptied, not recovered.
"$cluster" stop --dir "$dir/run" --purge >/dev/null
n0=$(lines "$dir/run/node0.log")
"$cluster" start --nodes 1 --dir "$dir/run" --flash "$dir/flash:$size" >/dev/null
tail -n +$((n0 + 1)) "$dir/run/node0.log" | grep -q "(new tables: emptied)" ||
    bad "new tables did not empty the log"
"$cluster" stop --dir "$dir/run" --purge >/dev/null

# More than the disk holds: the daemon does not start, and says why.
avail=$(df -B1 --output=avail "$dir/flash" | tail -1 | tr -d ' ')
if [ "$avail" -lt 1099511627776 ]; then
    if "$cluster" start --nodes 1 --dir "$dir/full" --flash "$dir/flash:1099511627776" \
        >"$dir/full.out" 2>&1; then
        bad "a 1 TiB log on a disk with $avail bytes free was accepted"
    fi
    grep -q "cannot reserve 1099511627776 bytes for .*node0.flash: No space left on device" \
        "$dir/full/node0.log" || bad "no reason given for the full disk: $(tail -3 "$dir/full/node0.log")"
else
    echo "flash: $dir has room for a 1 TiB log: the no-room case is skipped"
fi

[ "$fail" = 0 ] && echo "flash: passed"
exit "$fail"
