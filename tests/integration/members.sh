#!/bin/sh
# tests/integration/members.sh: the cluster's view through etcd, and the data path under it
# (issue 28). A 3-node local cluster started with `nessie-cluster --membership etcd` (a private
# etcd): all three daemons must agree on one view epoch with 3 live members (their stats). Keys
# are written through node 0 and through node 2. Node 2 is lost (`nessie-cluster kill`: SIGKILL,
# and its tables removed, as a dead host's memory is unreachable) and the two others must install a newer view that shows it gone within the lease TTL plus a margin
# (etcd's own expiry removes it, never a peer). A checked load runs on nodes 0 and 1 across the
# loss: no call may fail (calls that need node 2 wait for the view), none may read an older
# value, none may take longer than the view wait. Each daemon shows how long ago each member's
# etcd lease was renewed (nessie_view_leases, and nessie-stat): a live member's within the lease,
# node 2's '-' once its registration lapsed. Then, on nodes 0 and 1, every call answers:
# a GET is the value written or a miss (node 2's values are lost), never an error; every SET
# succeeds, and each survivor reads what the other wrote. Restarted with `nessie-cluster start`,
# node 2 comes back empty and is readmitted; no read anywhere is older than the last write, nor
# after it is lost a second time, nor after its daemon is killed with its tables kept and started
# again (it makes them anew). `stop` must leave no etcd running and nothing listening on its
# port.
#
# Environment: BUILD (build dir, default build), KEEP (keep the run directory).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$here/$BUILD" ;; esac
client="$BUILD/tests/wire-client"
cluster="$here/tools/nessie-cluster"
export NESSIE_RECEPTION="$BUILD/reception"
LEASE_S=2
# The lease, etcd's expiry check (~0.5 s), a keep-alive beat and a reconcile: 5 s is well past.
WAIT_S=$((LEASE_S + 5))

command -v etcd >/dev/null 2>&1 || { echo "members: SKIP: no etcd (tools/install-deps)"; exit 77; }

dir=$(mktemp -d /tmp/nessie-members-XXXXXX)
cleanup() {
    "$cluster" stop --dir "$dir" --purge >/dev/null 2>&1 || true
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "members: FAIL: $*"; for n in 0 1 2; do tail -n 5 "$dir/node$n.log" 2>/dev/null; done; exit 1; }

# No eviction: the checked load holds every acknowledged write to stay readable but for the
# lost node's (evictions would be misses too; nessie-stress checks the evictor).
"$BUILD/reception" --print-config --set "cluster.name=members-$$" --set cluster.nodes=3 \
    --set cluster.index_slots=1024 --set cluster.data_bytes=33554432 --set cluster.evict=false \
    --set "membership.lease_s=$LEASE_S" --set reception.workers=1 >"$dir/nessie.conf"
"$cluster" start --nodes 3 --dir "$dir" --config "$dir/nessie.conf" --membership etcd

stat_of() { # node, stat name
    "$client" -s "$dir/node$1.sock" stats 2>/dev/null | sed -n "s/^STAT $2 \([^[:space:]]*\).*/\1/p"
}

# Wait until each node of $1 reports a view with $2 live members, all of them the same epoch,
# newer than $3; prints that epoch.
agree() {
    t=0
    while :; do
        epochs=""
        ok=1
        for n in $1; do
            e=$(stat_of "$n" nessie_view_epoch)
            m=$(stat_of "$n" nessie_view_members)
            [ -n "$e" ] && [ "${m:-0}" = "$2" ] && [ "$e" -gt "$3" ] || ok=0
            epochs="$epochs $e"
        done
        first=$(echo $epochs | cut -d' ' -f1)
        for e in $epochs; do [ "$e" = "$first" ] || ok=0; done
        [ $ok = 1 ] && { echo "$first"; return 0; }
        t=$((t + 1))
        [ $t -le $((WAIT_S * 10)) ] || { echo "epochs:$epochs" >&2; return 1; }
        sleep 0.1
    done
}

# Whether node $1's nessie_view_leases lists the cluster's 3 nodes, each of $2 with a plausible
# age (whole seconds, at most the lease: a live daemon renews every third of it) and each of $3 as
# '-' (no registration).
leases_are() {
    la_s=$(stat_of "$1" nessie_view_leases)
    [ "$(echo "$la_s" | tr ',' '\n' | grep -c .)" = 3 ] || return 1
    for la_n in $2; do
        la_a=$(echo ",$la_s," | sed -n "s/.*,$la_n:\([^,]*\),.*/\1/p")
        case $la_a in '' | *[!0-9]*) return 1 ;; esac
        [ "$la_a" -le "$LEASE_S" ] || return 1
    done
    for la_n in $3; do
        case ",$la_s," in *",$la_n:-,"*) ;; *) return 1 ;; esac
    done
}
# Wait until each node of $1 shows the lease ages leases_are $2 $3 checks (they are asked of etcd
# about once a second while the stats are read, as here).
leases_become() {
    lb_t=0
    for lb_n in $1; do
        until leases_are "$lb_n" "$2" "$3"; do
            lb_t=$((lb_t + 1))
            [ $lb_t -le $((WAIT_S * 10)) ] ||
                { echo "node $lb_n: nessie_view_leases $(stat_of "$lb_n" nessie_view_leases)" >&2; return 1; }
            sleep 0.1
        done
    done
}

n1=$(agree "0 1 2" 3 0) || fail "the three daemons did not agree on a view of 3 members"
echo "members: all three installed view $n1 with 3 members ($(stat_of 0 nessie_view))"
grep -q "view $n1: members" "$dir/node0.log" || fail "node 0 did not log view $n1"
leases_become "0 1 2" "0 1 2" "" || fail "the daemons do not show every member's lease renewed within $LEASE_S s"
"$here/tools/nessie-stat" --dir "$dir" >"$dir/nessie-stat.out" ||
    fail "nessie-stat: $(cat "$dir/nessie-stat.out")"
[ "$(grep -c "leases renewed, seconds ago: 0:[0-9]*,1:[0-9]*,2:[0-9]*$" "$dir/nessie-stat.out")" = 3 ] ||
    fail "nessie-stat does not show the lease ages of every node: $(cat "$dir/nessie-stat.out")"
echo "members: leases renewed, seconds ago: $(stat_of 0 nessie_view_leases) (node 0), as nessie-stat shows them"

# What the idle cluster costs etcd: each daemon reconciles every 100 ms with one range read of the
# cluster's keys (members.c), so three of them make 30-40 range reads a second (etcd's own count,
# on its /metrics: 106 in 3 s here). Five reads a round (440 in 3 s) took most of the CPU of
# make test-rxe's one-vCPU guest. A slower machine reconciles less often, never more.
ranges() {
    read -r cport _ <"$dir/etcd/ports"
    python3 -c "
import urllib.request
for l in urllib.request.urlopen('http://127.0.0.1:$cport/metrics', timeout=5).read().decode().splitlines():
    if l.startswith('etcd_debugging_mvcc_range_total '): print(int(float(l.split()[1])))"
}
r0=$(ranges) || fail "etcd's /metrics could not be read"
sleep 3
r1=$(ranges) || fail "etcd's /metrics could not be read"
[ -n "$r0" ] && [ -n "$r1" ] || fail "etcd's /metrics has no etcd_debugging_mvcc_range_total"
[ $((r1 - r0)) -le 180 ] ||
    fail "three idle daemons made $((r1 - r0)) range reads of etcd in 3 s (at most 180: two a daemon every 100 ms)"
echo "members: three idle daemons made $((r1 - r0)) range reads of etcd in 3 s"

# A key's GET through node $1: prints the value, "MISS", or "ERROR <status>".
get() {
    if out=$("$client" -s "$dir/node$1.sock" get "$2" 2>&1); then
        echo "$out"
    elif [ "$out" = NOT_FOUND ]; then
        echo MISS
    else
        echo "ERROR $out"
    fi
}
KEYS=40
# Every key's GET on each node of $1 must be the value $2-<key> or a miss ($3 says when, on a
# failure); om_hits counts the values read.
only_or_miss() {
    om_hits=0
    for om_n in $1; do
        om_i=0
        while [ $om_i -lt $KEYS ]; do
            for om_k in a b; do
                om_r=$(get "$om_n" "$om_k$om_i")
                case $om_r in
                    MISS) ;;
                    "$2-$om_k$om_i") om_hits=$((om_hits + 1)) ;;
                    *) fail "node $om_n $3: GET $om_k$om_i: $om_r (want $2-$om_k$om_i or a miss)" ;;
                esac
            done
            om_i=$((om_i + 1))
        done
    done
}
# SET every key to $1-<key>, the i-th through node i % $2 ($3 says when, on a failure).
set_all() {
    sa_i=0
    while [ $sa_i -lt $KEYS ]; do
        for sa_k in a b; do
            "$client" -s "$dir/node$((sa_i % $2)).sock" set "$sa_k$sa_i" "$1-$sa_k$sa_i" >/dev/null 2>&1 ||
                fail "SET $sa_k$sa_i through node $((sa_i % $2)) $3"
        done
        sa_i=$((sa_i + 1))
    done
}
i=0
while [ $i -lt $KEYS ]; do
    "$client" -s "$dir/node0.sock" set "a$i" "v1-a$i" || fail "SET a$i through node 0"
    "$client" -s "$dir/node2.sock" set "b$i" "v1-b$i" || fail "SET b$i through node 2"
    i=$((i + 1))
done

# Checked load on both survivors, running across the loss: every call must answer (a miss of a
# value the lost node held is an answer a cache may give: --may-lose; an older value is not).
LOAD_S=9
for n in 0 1; do
    "$client" -s "$dir/node$n.sock" load --id $n --keys 64 --ops 100000000 --seconds $LOAD_S \
        --max-value 512 --seed $$ --may-lose >"$dir/load$n.out" 2>&1 &
    eval "load$n=\$!"
done
sleep 1

# A lost host: SIGKILL, and its tables removed, so its peers cannot reach its memory either.
"$cluster" kill --node 2 --dir "$dir" || fail "nessie-cluster kill --node 2"
start=$(date +%s)
n2=$(agree "0 1" 2 "$n1") || fail "no view without node 2 within $WAIT_S s of its loss"
echo "members: nodes 0 and 1 installed view $n2 without node 2, $(( $(date +%s) - start )) s after" \
     "its loss ($(stat_of 0 nessie_view))"
case ",$(stat_of 0 nessie_view)," in *,2:*-,*) ;; *) fail "view $n2 does not show node 2 gone" ;; esac
leases_become "0 1" "0 1" "2" || fail "nodes 0 and 1 do not show node 2 with no lease, or their own renewed"
echo "members: leases renewed, seconds ago: $(stat_of 0 nessie_view_leases) (node 0, node 2 unregistered)"

for n in 0 1; do
    eval "wait \$load$n" || fail "node $n's checked load saw a violation: $(tail -n 3 "$dir/load$n.out")"
    line=$(tail -n 1 "$dir/load$n.out")
    case $line in *" errors=0 "*) ;; *) fail "node $n's load had calls fail across the loss: $line" ;; esac
    echo "members: node $n's load across the loss: $line"
done
# No call waited longer than the engine lets it wait for the view (nessie_node_call_bound_ms).
bound=$(( LEASE_S * 1000 + 1000 + LEASE_S * 500 + 200 ))
for n in 0 1; do
    max=$(tail -n 1 "$dir/load$n.out" | sed -n 's/.*max_ms=\([0-9]*\).*/\1/p')
    [ "${max:-99999}" -le $((bound + 1000)) ] ||
        fail "node $n: a call took $max ms, more than the view wait ($bound ms) and a second"
done
waits=$(stat_of 0 nessie_view_waits)
echo "members: node 0 after the load: $(stat_of 0 curr_items) items, $(stat_of 0 evictions) evictions, $(stat_of 0 reclaimed) reclaimed"
echo "members: slowest calls within the view wait of $bound ms; $waits calls on node 0 waited for the view"

# Every call of the survivors answers. Values written through node 2 lived in its memory: lost.
hits=0
for n in 0 1; do
    i=0
    while [ $i -lt $KEYS ]; do
        for k in a b; do
            r=$(get $n "$k$i")
            case $r in
                MISS) ;;
                "v1-$k$i") [ $k = a ] || fail "node $n read b$i, whose value lived on the lost node 2"
                           hits=$((hits + 1)) ;;
                *) fail "node $n: GET $k$i: $r (want v1-$k$i or a miss)" ;;
            esac
        done
        i=$((i + 1))
    done
done
echo "members: every GET on nodes 0 and 1 answered ($hits of $((2 * KEYS)) node-0 values still read, every node-2 value a miss)"
set_all v2 2 "after node 2 was lost"
i=0
while [ $i -lt $KEYS ]; do
    for k in a b; do
        r=$(get $(((i + 1) % 2)) "$k$i")
        [ "$r" = "v2-$k$i" ] || fail "node $(((i + 1) % 2)): GET $k$i: $r, want v2-$k$i (written through the other survivor)"
    done
    i=$((i + 1))
done
lost=$(stat_of 0 nessie_lost_entries)
echo "members: every SET on nodes 0 and 1 succeeded, each read the other's ($lost lost entries met on node 0)"

# Rejoin: restarted, node 2 comes back empty under a newer incarnation and, once the survivors'
# scrubs have taken out what named its old tables, a view readmits it. No key ever reads a value
# older than the last one written: b$i was written through node 2 (v1, in its old memory) and
# overwritten during the outage (v2); every read on every node is now v2 or a miss.
"$cluster" start --dir "$dir" >/dev/null
start=$(date +%s)
n3=$(agree "0 1 2" 3 "$n2") || fail "node 2 was not readmitted within $WAIT_S s of its restart"
echo "members: node 2 restarted, readmitted in view $n3 $(( $(date +%s) - start )) s after ($(stat_of 0 nessie_view))"
grep -q "view $n3: .*readmitted: 2" "$dir/node0.log" && grep -q "view $n3: .*readmitted: 2" "$dir/node1.log" ||
    fail "the survivors did not log node 2 readmitted in view $n3"
only_or_miss "0 1 2" v2 "after the rejoin"
echo "members: after the rejoin no read is older than the outage's writes ($om_hits of $((6 * KEYS)) reads hit)"
set_all v3 3 "after the rejoin"
for n in 0 1 2; do
    i=0
    while [ $i -lt $KEYS ]; do
        r=$(get $n "b$i")
        [ "$r" = "v3-b$i" ] || fail "node $n after the rejoin: GET b$i: $r, want v3-b$i"
        i=$((i + 1))
    done
done
echo "members: every node writes and reads the others' writes, node 2 included"

# Lost again: its positions are drawn on the survivors again, where the first outage's entries
# were (orphans since the rejoin, taken out by the scrubs): never v2 or v1, v3 or a miss.
"$cluster" kill --node 2 --dir "$dir" || fail "nessie-cluster kill --node 2, the second time"
n4=$(agree "0 1" 2 "$n3") || fail "no view without node 2 within $WAIT_S s of its second loss"
only_or_miss "0 1" v3 "after the second loss"
echo "members: lost again (view $n4): every read of nodes 0 and 1 is the last value written or a miss"

# A third life: back, then its daemon killed with its tables kept (its host alive). Once a view
# lists it gone, started again it finds its old tables, removes them, makes new ones and rejoins.
"$cluster" start --dir "$dir" >/dev/null
n5=$(agree "0 1 2" 3 "$n4") || fail "node 2 was not readmitted after its second loss"
kill -9 "$(cat "$dir/node2.pid")"
n6=$(agree "0 1" 2 "$n5") || fail "no view without node 2 within $WAIT_S s of its third loss"
"$cluster" start --dir "$dir" >/dev/null
n7=$(agree "0 1 2" 3 "$n6") || fail "node 2, started again on its kept tables, was not readmitted"
grep -q "its tables were kept: they are removed and made anew" "$dir/node2.log" ||
    fail "node 2 did not log that it made its kept tables anew"
only_or_miss "0 1 2" v3 "after its third life"
echo "members: killed with its tables kept and started again, node 2 made them anew and was readmitted (view $n7); every read is the last value written or a miss"

port=$(cut -d' ' -f1 "$dir/etcd/ports")
epid=$(cat "$dir/etcd/etcd.pid")
"$cluster" stop --dir "$dir" >/dev/null
kill -0 "$epid" 2>/dev/null && fail "the private etcd (pid $epid) still runs after stop"
if ss -ltn 2>/dev/null | grep -q "127.0.0.1:$port "; then
    fail "something still listens on the private etcd's port $port after stop"
fi
echo "members: stop left no etcd (pid $epid gone, port $port closed)"
echo "members: passed"
