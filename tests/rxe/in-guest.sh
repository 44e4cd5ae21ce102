#!/bin/sh
# tests/rxe/in-guest.sh: the guest half of `make test-rxe` (tests/rxe/test-rxe.sh packs it with the
# binaries as /payload/run.sh). Runs, on rxe0 ($RXE_IP), every Nessie test that needs real verbs:
#   fabric   the fabric unit tests (tests/unit/test_fabric.c) on the verbs backend
#   stress   nessie-stress --check on 3 node processes with --fabric verbs
#   crash    the same while a random node is killed (kill -9) and restarted every 3 s: its
#            peers' requests fail and reconnect, and nothing is lost, stuck or leaked
#   dead     a node killed for good for 4 s while the others run checked: what they answered
#            and how fast they failed meanwhile (the dead-node: line), then it comes back
#   lost     a node lost for good (issue 28): killed 1.5 s in, fenced by a view 2 s later (the
#            parent plays the coordination service); the others' calls that need it wait for the
#            view instead of failing (the lost-node: line), and no GET reads an older value
#   evict    nessie-stress --check with more keys than the data regions hold: the evictions
#            (DELETEs over verbs; a few hundred in 20000 operations) are in the checked history,
#            and the readers' access records are posted WRITEs nobody waits for
#   sd       the server-driven modes (issue 16): nessie-stress --check --mode mixed (each
#            operation picks cd, sd, hy or auto: requests and replies cross rxe0 as WRITEs into the
#            peers' rings while client-driven operations run on the same keys), then --mode sd
#            while a random node is killed and restarted every 3 s
#   elastic  a node added online and one retired (issue 30): nessie-stress --check --add-node-at
#            --remove-node-at, node 3 joining three over verbs 1.5 s in, then node 2 retired (the
#            parent plays the coordination service, stepping every node through each change): the
#            entries of node 3's positions move to it, node 2's values are relocated and its index
#            entries moved out over verbs, while checked calls run; its remove: line must show
#            something moved
#   flash    the flash tier over verbs (issue 31): nessie-stress --check --flash with data
#            regions far smaller than the keys, so most values are demoted to each node's log
#            (io_uring on the guest's tmpfs), a small log (compaction, oldest pages dropped) and
#            injected log I/O errors; the calls that meet another node's flash item are shipped
#            to it over rxe0; its summary must show items demoted and read back from flash
#   cluster  nessie-cluster add and remove over verbs (issue 30): three reception daemons with
#            `fabric = verbs` and a private etcd (payload's etcd, etcdctl), node-id capacity 5
#            (addresses for every id in the config); node 3 added and then node 1 retired, each
#            under a checked load (wire-client load) on every member: no call fails, none reads an
#            older value or misses what it wrote; every key reads its value through every member
#   shim     a 3-daemon cluster with `fabric = verbs` serving unmodified libmemcached clients
#            (memccp, memccat, memcstat from libmemcached-tools) through libdeception.so, and
#            loadgen checking every value it reads
# Prints one line per step and a summary; exits non-zero if any step failed.
# Environment: STRESS_OPS (default 20000), CRASH_OPS (default 8000), DEAD_OPS (default 20000),
# LOST_OPS (default 20000), EVICT_OPS (default 20000), SD_OPS (default 20000), SD_CRASH_OPS (default 3000), ELASTIC_OPS (default 20000), RXE_STEPS (default "fabric stress crash
# dead lost evict sd elastic cluster shim"), STEP_LIMIT (seconds, default 900), TSAN_OPTIONS (a ThreadSanitizer
# build: test-rxe.sh sets it).
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$self")"
export PATH=$PWD:$PATH
summary=""
failed=0
# step NAME: run the step function NAME in a session of its own (this script again, with
# --step), record PASS/FAIL with its time. A step still running after STEP_LIMIT seconds is
# killed with everything it started (its process group): a hang costs one step, not the run.
step() {
    name=$1
    echo "== rxe step $name"
    t0=$(date +%s)
    setsid "$self" --step "$name" &
    pid=$!
    (sleep "${STEP_LIMIT:-900}"; echo "== rxe step $name: killed after ${STEP_LIMIT:-900} s";
     kill -9 -"$pid") 2>/dev/null &
    watchdog=$!
    wait "$pid"
    rc=$?
    kill "$watchdog" 2>/dev/null
    t=$(( $(date +%s) - t0 ))
    if [ $rc = 0 ]; then verdict="PASS ($t s)"; else verdict="FAIL (exit $rc, $t s)"; failed=1; fi
    # At once, not only in the summary: a run cut short by its own bound still tells its steps.
    echo "== rxe step $name: $verdict"
    summary="$summary
${verdict%% *} $name ${verdict#* }"
}

fabric() {
    NESSIE_TEST_FABRIC=verbs NESSIE_TEST_VERBS_IP=$RXE_IP ./test_fabric
}

stress() {
    ./nessie-stress --fabric verbs --addr "$RXE_IP" --port-base 7400 --nodes 3 --threads 2 \
        --keys 64 --index-slots 32 --ops "${STRESS_OPS:-20000}" --expiration-ms 100 --check --quiet
}

crash() {
    ./nessie-stress --fabric verbs --addr "$RXE_IP" --port-base 7420 --nodes 3 --threads 2 \
        --keys 64 --index-slots 32 --ops "${CRASH_OPS:-8000}" --expiration-ms 100 \
        --crash-every 3000 --check --quiet
}

# dead: the last node is killed for good (kill -9) 1.5 s into the run and stays down 4 s while
# the others go on; its peers learn it is down from their first failed request and fail every
# later one to it at once, their prober alone tries it until it is back. Prints the dead-node:
# line (calls answered and failed meanwhile, and how fast the failures came), then the usual
# check: no violation, nothing stuck or leaked once it is back.
dead() {
    ./nessie-stress --fabric verbs --addr "$RXE_IP" --port-base 7440 --nodes 3 --threads 2 \
        --keys 64 --index-slots 32 --ops "${DEAD_OPS:-20000}" --expiration-ms 100 \
        --kill-node-at 1500 --dead-for 4000 --check --quiet
}

lost() {
    ./nessie-stress --fabric verbs --addr "$RXE_IP" --port-base 7540 --nodes 3 --threads 2 \
        --keys 64 --index-slots 32 --ops "${LOST_OPS:-20000}" --expiration-ms 100 \
        --lose-node-at 1500 --detect-ms 2000 --check --quiet
}

evict() {
    ./nessie-stress --fabric verbs --addr "$RXE_IP" --port-base 7460 --nodes 3 --threads 2 \
        --keys 8000 --index-slots 4000 --data-bytes 262144 --ops "${EVICT_OPS:-20000}" \
        --expiration-ms 100 --check --quiet
}

sd() {
    ./nessie-stress --fabric verbs --addr "$RXE_IP" --port-base 7500 --nodes 3 --threads 2 \
        --keys 64 --index-slots 32 --ops "${SD_OPS:-20000}" --expiration-ms 100 --mode mixed \
        --check --quiet &&
    # Each kill costs the calls shipped to the dead node a whole budget (about 6 s here) before
    # they say TIMEOUT: fewer operations than the crash step, for the same number of kills.
    ./nessie-stress --fabric verbs --addr "$RXE_IP" --port-base 7520 --nodes 3 --threads 2 \
        --keys 64 --index-slots 32 --ops "${SD_CRASH_OPS:-3000}" --expiration-ms 100 --mode sd \
        --crash-every 3000 --check --quiet
}

elastic() {
    ./nessie-stress --fabric verbs --addr "$RXE_IP" --port-base 7560 --nodes 3 --threads 2 \
        --keys 200 --index-slots 128 --ops "${ELASTIC_OPS:-20000}" --expiration-ms 100 \
        --add-node-at 1500 --remove-node-at 1600 --check --quiet >/tmp/elastic.out 2>&1
    rc=$?
    cat /tmp/elastic.out
    [ $rc = 0 ] || return $rc
    # The calls during the retire are not required: a sanitized run (a fifth of the operations,
    # each several times slower) may have ended its calls by then; the unsanitized one has them.
    grep -q '^remove: node 2 left: .* [1-9][0-9]* entries moved or relocated' /tmp/elastic.out ||
        { echo "elastic: the retire moved nothing"; return 1; }
}

flash() {
    d=$(mktemp -d /tmp/flash.XXXXXX)
    ./nessie-stress --fabric verbs --addr "$RXE_IP" --port-base 7580 --nodes 3 --threads 2 \
        --keys 6000 --index-slots 4096 --data-bytes 131072 --ops "${FLASH_OPS:-12000}" \
        --expiration-ms 100 --mode mixed --flash "$d" --flash-bytes 262144 --flash-errors 0.01 \
        --check --quiet >/tmp/flash.out 2>&1
    rc=$?
    rm -rf "$d"
    cat /tmp/flash.out
    [ $rc = 0 ] || return $rc
    # A run that demoted nothing, or read nothing back from a log, checked nothing of the tier.
    ! grep -q -e ' demoted=0 ' -e ' flash-hits=0 ' /tmp/flash.out ||
        { echo "flash: nothing demoted, or nothing read from flash"; return 1; }
}

# cpu_by_process: the guest's busiest processes, by CPU time (their own, and their reaped
# children's, in ticks): the guest has one emulated CPU, and a step that runs slow usually has
# one process eating it (etcd, once: the daemons' reads of the view).
cpu_by_process() {
    echo "cluster: CPU ticks by process (own, children's, name):"
    for pp in /proc/[0-9]*; do awk '{print $14+$15, $16+$17, $2}' $pp/stat 2>/dev/null; done |
        sort -n | tail -n 8 | sed 's/^/cluster:   /'
}

# cluster: the daemons' side of issue 30 over verbs, as an operator runs it on one host.
cluster() {
    export NESSIE_RECEPTION=$PWD/reception
    d=/tmp/cluster
    mkdir -p $d
    command -v etcd >/dev/null && command -v etcdctl >/dev/null ||
        { echo "cluster: no etcd or etcdctl in the payload (tools/install-deps on the host)"; return 1; }
    addrs="$RXE_IP:7600, $RXE_IP:7601, $RXE_IP:7602, $RXE_IP:7603, $RXE_IP:7604"
    ./reception --print-config --set cluster.name=elastic --set cluster.nodes=3 \
        --set cluster.node_ids=5 --set cluster.fabric=verbs --set cluster.index_slots=4096 \
        --set cluster.data_bytes=16777216 --set cluster.max_item_size=65536 \
        --set cluster.evict=false --set cluster.expiration_ms=500 --set cluster.op_timeout_ms=15000 --set membership.lease_s=10 \
        --set "cluster.addresses=$addrs" --set reception.workers=1 >$d/nessie.conf || return 1
    # The daemons' last warnings (the first are their peers' connections while they start).
    fail() {
        echo "cluster: FAIL: $*"
        cpu_by_process
        grep -h -E "warn|error" $d/node*.log | sort | tail -n 30
        for f in $d/node*.log; do echo "-- the end of $f:"; tail -n 6 "$f"; done
        ./nessie-cluster stop --dir $d >/dev/null 2>&1
        return 1
    }
    ./nessie-cluster start --nodes 3 --dir $d --config $d/nessie.conf --membership etcd >/dev/null ||
        { fail "start: $(tail -n 3 $d/node*.log $d/etcd/etcd.log 2>/dev/null)"; return 1; }
    KEYS=50
    i=0
    while [ $i -lt $KEYS ]; do
        ./wire-client -s $d/node$((i % 3)).sock set "e$i" "v-e$i" >/dev/null || { fail "SET e$i"; return 1; }
        i=$((i + 1))
    done
    # keys_read NODES WHEN: every key reads its value through each of NODES, in one process a
    # node (wire-client's get of several keys: each process start costs a TCG guest seconds).
    keys=""
    want=""
    i=0
    while [ $i -lt $KEYS ]; do
        keys="$keys e$i"
        want="${want}e$i v-e$i
"
        i=$((i + 1))
    done
    keys_read() {
        for n in $1; do
            # shellcheck disable=SC2086  # the key list is meant to be split
            got=$(./wire-client -s $d/node$n.sock get $keys 2>&1) || true
            [ "$got
" = "$want" ] || { fail "$2, node $n: $(printf '%s\n' "$got" | grep -v ' v-e' | head -n 3)"; return 1; }
        done
    }
    # load_start ID-BASE NODES: a checked load through each of NODES; load_check NODES WHAT.
    load_start() {
        for n in $2; do
            ./wire-client -s $d/node$n.sock load --id $(($1 + n)) --keys 32 --ops 100000000 \
                --seconds 30 --max-value 512 --seed 7 >$d/load$n.out 2>&1 &
            echo $! >$d/load$n.pid
        done
    }
    load_check() {
        for n in $1; do
            wait "$(cat $d/load$n.pid)" || { fail "node $n's checked load across the $2: $(tail -n 3 $d/load$n.out)"; return 1; }
            line=$(tail -n 1 $d/load$n.out)
            case $line in *" errors=0 "*" violations=0 lost=0 "*) ;; *) fail "node $n's load across the $2: $line"; return 1 ;; esac
            echo "cluster: node $n's load across the $2: $line"
        done
    }
    # One checked load at a time: the guest has one emulated CPU for the daemons, etcd, the
    # load and nessie-cluster's etcdctl processes (each a Go process start, costly under TCG:
    # its reads again, when one failed, only every second).
    export NESSIE_CLUSTER_POLL_S=1
    echo "cluster: $(date +%T) $KEYS keys stored; add under load"
    load_start 0 "0"
    sleep 1
    ./nessie-cluster add --dir $d --timeout 120 >$d/add.out 2>&1 || { fail "add: $(cat $d/add.out)"; return 1; }
    sed 's/^/cluster: /' $d/add.out
    grep -q "^node 3: added in" $d/add.out || { fail "add did not say node 3 was added"; return 1; }
    load_check "0" add || return 1
    keys_read "0 1 2 3" "after the add" || return 1
    echo "cluster: $(date +%T) keys read back; retire under load"
    load_start 10 "3"
    sleep 1
    ./nessie-cluster remove --node 1 --dir $d --timeout 120 >$d/remove.out 2>&1 ||
        { fail "remove: $(cat $d/remove.out)"; return 1; }
    sed 's/^/cluster: /' $d/remove.out
    grep -q "^node 1: retired in" $d/remove.out || { fail "remove did not say node 1 was retired"; return 1; }
    load_check "3" retire || return 1
    keys_read "0 2 3" "after the retire" || return 1
    ! ./wire-client -s $d/node1.sock get e1 >/dev/null 2>&1 || { fail "node 1 still answers after its retire"; return 1; }
    moved=0
    for n in 0 2 3; do
        m=$(./wire-client -s $d/node$n.sock stats 2>/dev/null | sed -n 's/^STAT nessie_moved \([0-9]*\).*/\1/p')
        moved=$((moved + ${m:-0}))
    done
    [ "$moved" -gt 0 ] || { fail "nothing moved"; return 1; }
    ./nessie-cluster status --dir $d | sed 's/^/cluster: /'
    cpu_by_process
    ./nessie-cluster stop --dir $d >/dev/null
    echo "cluster: node 3 added and node 1 retired over verbs under checked load; $KEYS keys read back through every member; $moved entries moved"
}

shim() {
    export NESSIE_RECEPTION=$PWD/reception NESSIE_SHIM=$PWD/libdeception.so NESSIE_STRICT=1
    d=/tmp/shim
    mkdir -p $d
    ./reception --print-config --set cluster.name=shim --set cluster.nodes=3 \
        --set cluster.fabric=verbs --set cluster.index_slots=4096 --set cluster.data_bytes=16777216 \
        --set "cluster.addresses=$RXE_IP:7480, $RXE_IP:7481, $RXE_IP:7482" \
        --set reception.workers=1 >$d/nessie.conf || return 1
    ./nessie-cluster start --nodes 3 --dir $d --config $d/nessie.conf >/dev/null ||
        { tail $d/node*.log; return 1; }
    rc=0
    # memccp stores a file under its name through node 0; memccat reads it through node 1 and
    # node 2: the value crossed rxe0 both ways.
    head -c 3000 /payload/reception | od -An -tx1 | head -c 6000 >$d/value.txt
    (cd $d && NESSIE_SOCKET=$d/node0.sock nessie-run memccp --servers=127.0.0.1 value.txt) || rc=1
    for n in 1 2; do
        NESSIE_SOCKET=$d/node$n.sock nessie-run memccat --servers=127.0.0.1 value.txt >$d/got$n.txt || rc=1
        # memccat ends what it prints with a newline
        { cat $d/value.txt; echo; } | cmp - $d/got$n.txt ||
            { echo "shim: memccat through node $n differs"; rc=1; }
    done
    NESSIE_SOCKET=$d/node1.sock nessie-run memcstat --servers=127.0.0.1 >$d/stat.txt || rc=1
    grep -q "fabric" $d/stat.txt || { echo "shim: memcstat shows no Nessie stats"; cat $d/stat.txt; rc=1; }
    # Several threads per node, every value read checked against its key's tag, no call refused.
    ./checked-load shim "--keys 200 --value-size 512 --ops 1500" \
        $d/node0.sock $d/node1.sock $d/node2.sock || rc=1
    ./nessie-cluster stop --dir $d >/dev/null
    [ $rc = 0 ] || grep -h -E "warn|error" $d/node*.log | head -20
    return $rc
}

if [ "${1:-}" = --step ]; then
    "$2"
    exit $?
fi
for s in ${RXE_STEPS:-fabric stress crash dead lost evict sd elastic flash cluster shim}; do
    step "$s"
done
printf 'rxe summary (one guest, rxe0 on %s):%s\n' "$RXE_NETDEV" "$summary"
exit $failed
