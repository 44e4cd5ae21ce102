#!/bin/sh
# tests/integration/etcd-slow.sh: a daemon joins through an etcd that answers late. A loaded etcd
# (a 1-vCPU guest of `make test-rxe`, a member fsyncing on a busy disk) lets requests wait past
# the daemon's first, brief wait (500 ms, so that a dead endpoint costs little): the daemon then
# asks again, patiently (2 s, at most half its lease), rather than failing its join or a
# keep-alive. Here the etcd is stopped (SIGSTOP) for 1.5 s while a one-node cluster's daemon
# starts (its first request goes out well within the first second): it must join once the
# etcd goes on, and say nothing worse than a warning. Before the patient second request, the
# join failed ("cannot join the cluster's view") and the daemon exited. Then its lease must hold
# through an etcd whose reads are slow (part two below).
#
# Environment: BUILD (build dir, default build), KEEP (keep the run directory).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$here/$BUILD" ;; esac
client="$BUILD/tests/wire-client"

for t in etcd etcdctl python3; do
    command -v $t >/dev/null 2>&1 || { echo "etcd-slow: SKIP: no $t (tools/install-deps)"; exit 77; }
done

dir=$(mktemp -d /tmp/nessie-etcd-slow-XXXXXX)
etcdpid=""
recpid=""
cleanup() {
    rc=$?
    set +e # a killed child's wait answers 143
    [ -z "$etcdpid" ] || { kill -CONT "$etcdpid" 2>/dev/null; kill "$etcdpid" 2>/dev/null; wait "$etcdpid" 2>/dev/null; }
    [ -z "$recpid" ] || { kill "$recpid" 2>/dev/null; wait "$recpid" 2>/dev/null; }
    rm -f /dev/shm/nessie.etcd-slow-$$.* 2>/dev/null
    [ -z "${proxypid:-}" ] || kill "$proxypid" 2>/dev/null
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
    exit $rc
}
trap cleanup EXIT
fail() { echo "etcd-slow: FAIL: $*"; tail -n 8 "$dir/node0.log" 2>/dev/null; exit 1; }

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cport=$(port)
pport=$(port)
url="http://127.0.0.1:$cport"
etcd --name slow --data-dir "$dir/etcd" --listen-client-urls "$url" --advertise-client-urls "$url" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "slow=http://127.0.0.1:$pport" >"$dir/etcd.log" 2>&1 &
etcdpid=$!
i=0
until ETCDCTL_API=3 etcdctl --endpoints="$url" endpoint health >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -lt 150 ] || fail "etcd did not come up: $(tail -n 5 "$dir/etcd.log")"
    sleep 0.2
done

"$BUILD/reception" --print-config --set "cluster.name=etcd-slow-$$" --set cluster.nodes=1 \
    --set cluster.index_slots=1024 --set cluster.data_bytes=4194304 --set reception.workers=1 \
    --set membership.mode=etcd --set "membership.endpoints=$url" --set membership.lease_s=6 \
    >"$dir/nessie.conf"
kill -STOP "$etcdpid"
setsid "$BUILD/reception" --config "$dir/nessie.conf" --node 0 --run-dir "$dir" >"$dir/node0.log" 2>&1 &
recpid=$!
sleep 1.5
kill -CONT "$etcdpid"
# Joined: its view names it live (epoch 1 or later), within a few seconds of the etcd going on.
i=0
while :; do
    kill -0 "$recpid" 2>/dev/null || fail "the daemon exited while the etcd was stopped for 1.5 s"
    e=$("$client" -s "$dir/node0.sock" stats 2>/dev/null | sed -n 's/^STAT nessie_view_epoch \([0-9]*\).*/\1/p')
    [ -n "$e" ] && [ "$e" -ge 1 ] && break
    i=$((i + 1))
    [ $i -lt 100 ] || fail "no view 10 s after the etcd went on"
    sleep 0.1
done
grep -q " error: " "$dir/node0.log" && fail "the daemon logged an error: $(grep " error: " "$dir/node0.log" | head -n 3)"
echo "etcd-slow: joined through an etcd stopped for 1.5 s (view $e); $(grep -c ' warn: ' "$dir/node0.log") warnings"
kill "$recpid"
wait "$recpid" || true
recpid=""

# Part two: an etcd whose reads answer in 1.2 s (a proxy in front of it holds each range request;
# everything else passes at once), lease 6 s. Each read then costs the daemon its brief wait and
# a patient one, a reconcile (four reads or more) about 7 s, longer than the TTL: a keep-alive
# that waited for the reconcile (the agent did both, until the keeper got a thread of its own)
# let the lease lapse, a live daemon was fenced, and make test-rxe's cluster step failed so on a
# slower machine. The lease must hold through the start and 10 s of serving: registered once,
# never expired, its key still in etcd.
proxy=$(port)
cat >"$dir/proxy.py" <<'PY'
import http.client, http.server, sys, time
upstream, delay = sys.argv[2], float(sys.argv[3])
class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request a connection: no stream held open
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.startswith("/v3/watch"):  # no stream: the daemon watches again, reads anyway
            time.sleep(0.5)
            self.send_error(503)
            return
        if self.path.startswith("/v3/kv/range"):
            time.sleep(delay)
        c = http.client.HTTPConnection(upstream, timeout=10)
        c.request("POST", self.path, body, {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        self.send_response(r.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Proxy).serve_forever()
PY
python3 "$dir/proxy.py" "$proxy" "127.0.0.1:$cport" 1.2 >"$dir/proxy.log" 2>&1 &
proxypid=$!
i=0
until python3 -c "import socket; socket.create_connection(('127.0.0.1', $proxy), 1)" 2>/dev/null; do
    i=$((i + 1))
    [ $i -lt 100 ] || fail "the proxy did not come up: $(cat "$dir/proxy.log")"
    sleep 0.1
done
"$BUILD/reception" --print-config --set "cluster.name=etcd-slow2-$$" --set cluster.nodes=1 \
    --set cluster.index_slots=1024 --set cluster.data_bytes=4194304 --set reception.workers=1 \
    --set membership.mode=etcd --set "membership.endpoints=http://127.0.0.1:$proxy" \
    --set membership.lease_s=6 >"$dir/nessie2.conf"
setsid "$BUILD/reception" --config "$dir/nessie2.conf" --node 0 --run-dir "$dir" >"$dir/node0.log" 2>&1 &
recpid=$!
# Serving once its first reconcile is through (two rounds of reads: 15 s or more), then 10 s more.
i=0
until grep -q "serving on" "$dir/node0.log"; do
    kill -0 "$recpid" 2>/dev/null || fail "the daemon exited under an etcd with slow reads"
    i=$((i + 1))
    [ $i -lt 600 ] || fail "not serving 60 s into its start under slow reads"
    sleep 0.1
done
sleep 10
kill -0 "$recpid" 2>/dev/null || fail "the daemon exited under an etcd with slow reads"
# Its registration, read from the etcd itself (not through the proxy): still there, under the
# lease it was granted first.
key="/nessie/etcd-slow2-$$/members/0"
ETCDCTL_API=3 etcdctl --endpoints="$url" get "$key" | grep -q . ||
    fail "the lease lapsed under slow reads: $key is gone from etcd"
grep -q "expired" "$dir/node0.log" && fail "the lease lapsed under slow reads: $(grep expired "$dir/node0.log" | head -n 2)"
regs=$(grep -c "registered as incarnation" "$dir/node0.log" || true)
[ "$regs" = 1 ] || fail "registered $regs times under slow reads (once expected)"
echo "etcd-slow: the lease held through an etcd whose reads took 1.2 s, through the start and 10 s after (registered once, never expired)"
echo "etcd-slow: passed"
