#!/bin/sh
# tests/integration/tcp.sh: the memcached protocol on TCP (issue 32). A 2-node cluster started
# with `nessie-cluster start --memcached-port`; then
#   - the transcripts (tests/integration/tcp-transcript.cases: text, limits, meta and binary;
#     tcp-transcript-binary.cases: the binary protocol's every opcode): every case sent to a
#     real memcached and to node 1's port, the answers compared byte for byte
#     (tcp-transcript.py); `stats conns` lists what memcached lists (tcp-conns.py); a key
#     written through node 0's port is read through node 1's;
#   - the robustness checks of tcp-robust.py against a 1-node cluster of its own (max_connections
#     1000, partial_timeout_s 3): a thousand connections, the limit, cut requests, garbage, an
#     over-size value, a client that never reads, a request left unfinished; the daemon serves
#     throughout and its memory stays bounded;
#   - a port already taken: the daemon refuses to start and says why.
#
# Environment: BUILD (build dir, default build), KEEP (keep the run directory).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$here/$BUILD" ;; esac
cluster="$here/tools/nessie-cluster"
export NESSIE_RECEPTION="$BUILD/reception"
command -v python3 >/dev/null 2>&1 || { echo "tcp: SKIP: no python3"; exit 77; }
command -v memcached >/dev/null 2>&1 || { echo "tcp: SKIP: no memcached (tools/install-deps)"; exit 77; }

dir=$(mktemp -d /tmp/nessie-tcp-XXXXXX)
rdir="$dir/robust"
mcpid=""
cleanup() {
    [ -z "$mcpid" ] || kill "$mcpid" 2>/dev/null || true
    "$cluster" stop --dir "$dir" --purge >/dev/null 2>&1 || true
    "$cluster" stop --dir "$rdir" --purge >/dev/null 2>&1 || true
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "tcp: FAIL: $*"; tail -n 5 "$dir/node0.log" "$dir/node1.log" 2>/dev/null; exit 1; }

# Free ports: a base derived from the pid (below the kernel's ephemeral range, 32768 and up),
# moved on while a port cannot be bound (a listener, or a connection's own end, has it).
port_free() { python3 -c 'import socket,sys; s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null; }
port_answers() { python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.2)' "$1" 2>/dev/null; }
base=$((21000 + ($$ % 2000) * 4))
while ! port_free $base || ! port_free $((base + 1)) || ! port_free $((base + 2)) || ! port_free $((base + 3)); do
    base=$((base + 4))
done
mport=$((base + 2))
rport=$((base + 3))

"$cluster" start --nodes 2 --dir "$dir" --memcached-port "$base" >"$dir/start.out" ||
    fail "start: $(cat "$dir/start.out")"
grep -q "memcached protocol on 127.0.0.1:$((base + 1))" "$dir/start.out" ||
    fail "start did not say where node 1's memcached port is: $(cat "$dir/start.out")"

# The reference: a real memcached (its default item limit, 1 MiB, as the cluster's).
user=""
[ "$(id -u)" != 0 ] || user="-u root" # memcached refuses to run as root unless told whom to run as
# shellcheck disable=SC2086
memcached -U 0 -p "$mport" -l 127.0.0.1 -m 64 $user >"$dir/memcached.log" 2>&1 &
mcpid=$!
for i in $(seq 1 50); do ! port_answers "$mport" || break; sleep 0.1; done

for cases in tcp-transcript.cases tcp-transcript-binary.cases; do
    python3 "$here/tests/integration/tcp-transcript.py" "$here/tests/integration/$cases" \
        "127.0.0.1:$mport" "127.0.0.1:$((base + 1))" >"$dir/transcript.out" 2>&1 ||
        { cat "$dir/transcript.out"; fail "the transcript ($cases) differs from memcached's"; }
    tail -n 1 "$dir/transcript.out" | sed "s/^/tcp: $cases: /"
done

# stats conns: the same connections, fields and states as memcached lists.
python3 "$here/tests/integration/tcp-conns.py" "127.0.0.1:$mport" "127.0.0.1:$((base + 1))" \
    >"$dir/conns.out" 2>&1 || { cat "$dir/conns.out"; fail "stats conns differs from memcached's"; }
sed "s/^/tcp: /" "$dir/conns.out"

# Written through node 0's port, read through node 1's: one cluster behind both.
got=$(python3 - "$base" <<'EOF'
import socket, sys
p = int(sys.argv[1])
a = socket.create_connection(("127.0.0.1", p), 5)
a.sendall(b"set across 7 0 5\r\nhello\r\n")
assert a.recv(100) == b"STORED\r\n"
b = socket.create_connection(("127.0.0.1", p + 1), 5)
b.sendall(b"get across\r\n")
out = b""
while not out.endswith(b"END\r\n"):
    out += b.recv(100)
print(out)
EOF
)
[ "$got" = "b'VALUE across 7 5\\r\\nhello\\r\\nEND\\r\\n'" ] || fail "a key set through node 0's port, read through node 1's: $got"
echo "tcp: a key set through node 0's port reads back through node 1's"

mkdir -p "$rdir"
"$BUILD/reception" --print-config --set "cluster.name=tcp-robust-$$" --set cluster.nodes=1 \
    --set cluster.index_slots=65536 --set cluster.data_bytes=67108864 \
    --set "reception.memcached_port=$rport" --set reception.max_connections=1000 \
    --set reception.partial_timeout_s=3 >"$rdir/nessie.conf"
"$cluster" start --nodes 1 --dir "$rdir" --config "$rdir/nessie.conf" >"$rdir/start.out" ||
    fail "start of the robustness cluster: $(cat "$rdir/start.out")"
python3 "$here/tests/integration/tcp-robust.py" "127.0.0.1:$rport" "$(cat "$rdir/node0.pid")" 1000 3 ||
    fail "tcp-robust.py"
kill -0 "$(cat "$rdir/node0.pid")" || fail "the robustness cluster's daemon died"

# A port already taken (the reference memcached's): a daemon of another cluster told to listen
# there says so and does not start.
other="tcp-other-$$"
if "$BUILD/reception" --config "$rdir/nessie.conf" --set "cluster.name=$other" \
    --set "reception.memcached_port=$mport" --node 0 --run-dir "$dir/other" >"$dir/taken.out" 2>&1; then
    fail "a daemon started on a port already taken"
fi
rm -f /dev/shm/nessie."$other".n*
grep -q "cannot listen on 127.0.0.1 port $mport" "$dir/taken.out" || fail "a taken port: $(tail -n 3 "$dir/taken.out")"
echo "tcp: a taken port refused: $(grep -o 'cannot listen.*' "$dir/taken.out" | head -n 1)"
echo "tcp: passed"
