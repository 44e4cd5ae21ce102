#!/bin/sh
# tests/integration/install.sh: `make install` into a temporary DESTDIR (PREFIX=/opt/nessie)
# stages everything an install has, and the staged copy works on its own:
#   - files: the daemon, nessie-stress and the operator tools, the shim, libnessie (.a, .so and its
#     soname link), nessie.pc, the public headers, the example configuration, the embed example,
#     a man page per program, the service unit with the install's paths filled in;
#   - examples/embed.c compiles against the staged copy with pkg-config alone and runs (a one-node
#     cluster in its own process: stores, reads back, removes its tables);
#   - the shared library exports only nessie_ symbols (nm -D), and so does the archive;
#   - the staged daemon runs (--help); systemd-analyze verify accepts the unit;
#   - `make uninstall` removes every file it installed.
#
# Environment: BUILD (default build), SAN (skipped under sanitizers: an installed library built
# with them would need their runtime in every program that links it).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
if [ -n "${SAN:-}" ]; then
    echo "install: skipped under sanitizers"
    exit 0
fi
dest=$(mktemp -d /tmp/nessie-install-XXXXXX)
trap 'rm -rf "$dest"' EXIT
prefix=/opt/nessie
root=$dest$prefix
make -s -C "$here" --no-print-directory BUILD="$BUILD" DESTDIR="$dest" PREFIX="$prefix" install \
    >"$dest/make.log" 2>&1 || { cat "$dest/make.log"; exit 1; }
rm -f "$dest/make.log"
fail=0
for f in bin/reception bin/nessie-stress bin/nessie-cluster bin/nessie-run bin/nessie-stat \
         lib/libdeception.so lib/libnessie.a lib/libnessie.so lib/libnessie.so.0 \
         lib/pkgconfig/nessie.pc etc/nessie/nessie.conf \
         include/nessie/nessie.h include/nessie/wire.h include/nessie/memcached_nb.h \
         share/doc/nessie/examples/embed.c lib/systemd/system/nessie-reception@.service \
         share/man/man1/reception.1 share/man/man1/nessie-stress.1 share/man/man1/nessie-cluster.1 \
         share/man/man1/nessie-run.1 share/man/man1/nessie-stat.1; do
    [ -e "$root/$f" ] || { echo "install: $f missing"; fail=1; }
done
# Private headers stay in the source tree.
for f in memory.h protocol.h modes.h front.h layout.h slab.h fabric.h nessie_test.h log.h; do
    [ ! -e "$root/include/nessie/$f" ] || { echo "install: private header $f installed"; fail=1; }
done
"$root/bin/reception" --help >/dev/null || { echo "install: the installed reception --help failed"; fail=1; }
for p in reception nessie-stress nessie-cluster nessie-run nessie-stat; do
    grep -q '^\.SH' "$root/share/man/man1/$p.1" 2>/dev/null ||
        { echo "install: the man page of $p has no sections"; fail=1; }
done

# The embed example, built by what a user of the installed copy has: its pkg-config file, found
# where the install put it (--define-prefix: the staged tree stands for $prefix).
pc="pkg-config --define-prefix"
export PKG_CONFIG_PATH="$root/lib/pkgconfig"
flags=$($pc --cflags --libs nessie) || { echo "install: pkg-config cannot read nessie.pc"; fail=1; }
echo "install: pkg-config --cflags --libs nessie: $flags"
if cc -std=c11 -Wall -Wextra -Werror "$root/share/doc/nessie/examples/embed.c" $flags \
        -o "$dest/embed"; then
    if out=$(LD_LIBRARY_PATH="$root/lib" "$dest/embed" 2>&1); then
        echo "$out" | sed 's/^/install: embed: /'
    else
        echo "$out"; echo "install: embed failed"; fail=1
    fi
    ldd "$dest/embed" | grep -q "libnessie.so.0 => $root/lib" 2>/dev/null ||
        LD_LIBRARY_PATH="$root/lib" ldd "$dest/embed" | grep -q "libnessie.so.0 => $root/lib" ||
        { echo "install: embed is not linked to the installed libnessie.so.0"; fail=1; }
    ls /dev/shm 2>/dev/null | grep -q '^nessie\.embed-' &&
        { echo "install: embed left its tables in /dev/shm"; fail=1; }
else
    echo "install: embed.c does not compile against the installed copy"; fail=1
fi
# And statically, from the archive (pkg-config --static adds the libraries libnessie needs).
if cc -std=c11 "$root/share/doc/nessie/examples/embed.c" $($pc --cflags nessie) \
        "$root/lib/libnessie.a" $($pc --static --libs-only-l --libs-only-other nessie | sed 's/-lnessie//') \
        -o "$dest/embed-static" && "$dest/embed-static" >/dev/null; then
    echo "install: embed linked statically: ok"
else
    echo "install: embed does not link or run statically against libnessie.a"; fail=1
fi

# Only the API is exported: a program's own cache_get or hash_key never meets the engine's.
others=$(nm -D --defined-only "$root/lib/libnessie.so" | awk '{ print $3 }' | grep -v '^nessie_' || true)
[ -z "$others" ] || { echo "install: libnessie.so exports non-nessie_ symbols:"; echo "$others"; fail=1; }
count=$(nm -D --defined-only "$root/lib/libnessie.so" | grep -c ' T nessie_' || true)
echo "install: libnessie.so exports $count functions, all nessie_"
others=$(nm -g --defined-only "$root/lib/libnessie.a" | awk 'NF == 3 { print $3 }' | grep -v '^nessie_' || true)
[ -z "$others" ] || { echo "install: libnessie.a has global non-nessie_ symbols:"; echo "$others"; fail=1; }

unit="$root/lib/systemd/system/nessie-reception@.service"
grep -q "^ExecStart=$prefix/bin/reception --config $prefix/etc/nessie/nessie.conf --node %i" "$unit" ||
    { echo "install: the unit's ExecStart does not name the installed daemon and config:"; grep ExecStart "$unit"; fail=1; }
if command -v systemd-analyze >/dev/null 2>&1; then
    # verify checks that ExecStart's program exists: a copy of the unit names the staged one.
    mkdir -p "$dest/unit"
    sed "s|$prefix/|$root/|g" "$unit" >"$dest/unit/nessie-reception@.service"
    if ! out=$(systemd-analyze verify "$dest/unit/nessie-reception@.service" 2>&1) || [ -n "$out" ]; then
        echo "install: systemd-analyze verify:"; echo "$out"; fail=1
    else
        echo "install: systemd-analyze verify: the unit is clean"
    fi
else
    echo "install: systemd-analyze not found; the unit was not verified"
    fail=1
fi

make -s -C "$here" --no-print-directory BUILD="$BUILD" DESTDIR="$dest" PREFIX="$prefix" uninstall \
    >/dev/null 2>&1
left=$(find "$root" ! -type d | wc -l)
[ "$left" = 0 ] || { echo "install: uninstall left $left files:"; find "$root" ! -type d; fail=1; }
[ "$fail" = 0 ] && echo "install: passed"
exit "$fail"
