#!/bin/sh
# tests/rxe/two-guests.sh: the two-guest run of `make test-rxe` (tests/rxe/test-rxe.sh --two).
# Boots guest A (10.77.1.1) and guest B (10.77.1.2) joined by a qemu socket netdev, rxe0 on each
# one's eth0, and runs tests/rxe/wire-guest.sh on both: one Nessie cluster spread over the two,
# so its RDMA traffic crosses a (virtual) wire; then a second one, its view in an etcd on guest
# A, that adds a node on B and retires one on A online (issue 30). Exit 0 if both guests passed.
# Environment: BUILD (default build), WORK (a scratch directory, default a new one).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$here/$BUILD" ;; esac
for f in etcd etcdctl; do
    command -v $f >/dev/null || { echo "two-guests: $f missing (tools/install-deps)" >&2; exit 1; }
done
"$here/tools/rxe/build-image" --out "$BUILD/rxe" >/dev/null
work=$(mktemp -d "${WORK:-/tmp}/nessie-two-guests-XXXXXX")
apid=""
cleanup() {
    [ -z "$apid" ] || kill "$apid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for role in a b; do
    mkdir -p "$work/$role"
    cp "$BUILD/reception" "$BUILD/libdeception.so" "$BUILD/bench/loadgen" \
        "$BUILD/tests/wire-client" "$here/tools/nessie-cluster" "$here/tools/nessie-run" \
        "$here/tests/rxe/checked-load" "$(command -v memccp)" "$(command -v memccat)" \
        "$(command -v etcd)" "$(command -v etcdctl)" "$work/$role/"
    { echo '#!/bin/sh'; echo "export ROLE=$role"; tail -n +2 "$here/tests/rxe/wire-guest.sh"; } \
        >"$work/$role/run.sh"
    chmod +x "$work/$role/run.sh"
done
port=$(( 30000 + $$ % 2700 )) # below the ephemeral ports (32768 and up)
"$here/tools/rxe/run-guest" --image "$BUILD/rxe" --payload "$work/a" --net listen:$port \
    --ip 10.77.1.1/24 --mem 1024 --timeout 900 --log "$work/a.log" >/dev/null 2>&1 &
apid=$!
# B's qemu must find A's listening (it gives up at once otherwise); a probe connection would be
# taken as the peer, so watch the listening sockets instead.
t=0
until ss -Hltn "sport = :$port" | grep -q .; do
    t=$((t + 1))
    if [ $t -gt 600 ] || ! kill -0 "$apid" 2>/dev/null; then
        echo "two-guests: guest A's qemu never listened on port $port" >&2
        exit 1
    fi
    sleep 0.1
done
rb=0
"$here/tools/rxe/run-guest" --image "$BUILD/rxe" --payload "$work/b" --net connect:$port \
    --ip 10.77.1.2/24 --mem 1024 --timeout 900 --log "$work/b.log" >/dev/null 2>&1 || rb=$?
ra=0
wait "$apid" || ra=$?
apid=""
for role in a b; do
    tr -d '\r' <"$work/$role.log" | grep -E "^(wire|guest:|TEST-EXIT|[0-9:.]+ .*(warn|error))" |
        sed "s/^/[guest $(echo $role | tr ab AB)] /"
done
if [ "$ra" = 0 ] && [ "$rb" = 0 ]; then
    echo "two-guests: PASS"
else
    echo "two-guests: FAIL (guest A exit $ra, guest B exit $rb)"
    exit 1
fi
