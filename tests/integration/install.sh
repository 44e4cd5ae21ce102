#!/bin/sh
# tests/integration/install.sh: `make install` into a temporary PREFIX installs the daemon, the
# shim, the engine's library and public headers, the example configuration and the service unit
# with the install's paths filled in; the installed daemon runs (--help), and systemd-analyze
# verify accepts the unit (its ExecStart names the installed daemon, which must exist).
#
# Environment: BUILD (default build), SAN (skipped under sanitizers: nothing to add there).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
if [ -n "${SAN:-}" ]; then
    echo "install: skipped under sanitizers"
    exit 0
fi
prefix=$(mktemp -d /tmp/nessie-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT
make -s -C "$here" --no-print-directory BUILD="$BUILD" PREFIX="$prefix" install >"$prefix.log" 2>&1 ||
    { cat "$prefix.log"; rm -f "$prefix.log"; exit 1; }
rm -f "$prefix.log"
fail=0
for f in bin/reception lib/libdeception.so lib/libnessie.a etc/nessie/nessie.conf \
         include/nessie/wire.h include/nessie/memcached_nb.h \
         lib/systemd/system/nessie-reception@.service; do
    [ -e "$prefix/$f" ] || { echo "install: $f missing"; fail=1; }
done
"$prefix/bin/reception" --help >/dev/null || { echo "install: the installed reception --help failed"; fail=1; }
unit="$prefix/lib/systemd/system/nessie-reception@.service"
grep -q "^ExecStart=$prefix/bin/reception --config $prefix/etc/nessie/nessie.conf --node %i" "$unit" ||
    { echo "install: the unit's ExecStart does not name the installed daemon and config:"; grep ExecStart "$unit"; fail=1; }
if command -v systemd-analyze >/dev/null 2>&1; then
    # An instance of the template, as systemctl would load it.
    if ! out=$(systemd-analyze verify "$unit" 2>&1) || [ -n "$out" ]; then
        echo "install: systemd-analyze verify:"; echo "$out"; fail=1
    else
        echo "install: systemd-analyze verify: the unit is clean"
    fi
else
    echo "install: systemd-analyze not found; the unit was not verified"
    fail=1
fi
make -s -C "$here" --no-print-directory BUILD="$BUILD" PREFIX="$prefix" uninstall >/dev/null 2>&1
left=$(find "$prefix" -type f | wc -l)
[ "$left" = 0 ] || { echo "install: uninstall left $left files:"; find "$prefix" -type f; fail=1; }
[ "$fail" = 0 ] && echo "install: passed"
exit "$fail"
