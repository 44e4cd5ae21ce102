#!/bin/sh
# tests/rxe/cluster-smoke.sh: a 3-node cluster of reception daemons with `fabric = verbs` in the
# Soft-RoCE guest (tools/rxe), started by tools/nessie-cluster from one config file whose
# [cluster] addresses tell each daemon where its peers listen; ten keys stored through one
# node's socket are read back through another's, so every value crosses rxe0.
# Environment: BUILD (default build).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$here/$BUILD" ;; esac
for f in reception tests/wire-client; do
    [ -x "$BUILD/$f" ] || { echo "cluster-smoke: $BUILD/$f missing (make)" >&2; exit 1; }
done
"$here/tools/rxe/build-image" --out "$BUILD/rxe"
pl=$(mktemp -d /tmp/nessie-cluster-smoke-XXXXXX)
trap 'rm -rf "$pl"' EXIT
cp "$BUILD/reception" "$BUILD/tests/wire-client" "$here/tools/nessie-cluster" "$pl/"
cat >"$pl/run.sh" <<'GUEST'
#!/bin/sh
export NESSIE_RECEPTION=$PWD/reception
mkdir -p /tmp/c
./reception --print-config --set cluster.name=guest --set cluster.nodes=3 --set cluster.fabric=verbs \
    --set cluster.index_slots=65536 --set cluster.data_bytes=16777216 \
    --set "cluster.addresses=$RXE_IP:7470, $RXE_IP:7471, $RXE_IP:7472" --set reception.workers=1 \
    >/tmp/c/nessie.conf || exit 1
./nessie-cluster start --nodes 3 --dir /tmp/c --config /tmp/c/nessie.conf >/dev/null ||
    { tail /tmp/c/node*.log; exit 1; }
rc=0
for i in 0 1 2 3 4 5 6 7 8 9; do
    ./wire-client -s /tmp/c/node$((i % 3)).sock set key$i value$i >/dev/null || rc=1
done
for i in 0 1 2 3 4 5 6 7 8 9; do
    got=$(./wire-client -s /tmp/c/node$(((i + 1) % 3)).sock get key$i)
    [ "$got" = "value$i" ] || { echo "cluster-smoke: key$i through node $(((i + 1) % 3)): '$got'"; rc=1; }
done
./nessie-cluster stop --dir /tmp/c >/dev/null
[ $rc = 0 ] || grep -h -E "warn|error" /tmp/c/node*.log | head
exit $rc
GUEST
chmod +x "$pl/run.sh"
t0=$(date +%s)
if "$here/tools/rxe/run-guest" --image "$BUILD/rxe" --payload "$pl" --mem 1024 --timeout 300; then
    echo "cluster-smoke: PASS: 3 daemons over verbs, 10 keys across nodes ($(( $(date +%s) - t0 )) s)"
else
    echo "cluster-smoke: FAIL" >&2
    exit 1
fi
