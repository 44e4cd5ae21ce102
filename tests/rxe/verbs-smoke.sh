#!/bin/sh
# tests/rxe/verbs-smoke.sh: boot the Soft-RoCE guest (tools/rxe) and run build/tests/verbs-smoke
# there: Nessie's verbs fabric backend moving real READ, WRITE and CAS through rxe0.
# Environment: BUILD (default build).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$here/$BUILD" ;; esac
[ -x "$BUILD/tests/verbs-smoke" ] || { echo "verbs-smoke: $BUILD/tests/verbs-smoke missing (make)" >&2; exit 1; }
"$here/tools/rxe/build-image" --out "$BUILD/rxe"
pl=$(mktemp -d /tmp/nessie-verbs-smoke-XXXXXX)
trap 'rm -rf "$pl"' EXIT
cp "$BUILD/tests/verbs-smoke" "$pl/"
printf '#!/bin/sh\n./verbs-smoke "$RXE_IP"\n' >"$pl/run.sh"
chmod +x "$pl/run.sh"
t0=$(date +%s)
if "$here/tools/rxe/run-guest" --image "$BUILD/rxe" --payload "$pl" --timeout 300; then
    echo "verbs-smoke: PASS ($(( $(date +%s) - t0 )) s)"
else
    echo "verbs-smoke: FAIL" >&2
    exit 1
fi
