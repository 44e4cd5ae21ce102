#!/bin/sh
# tests/integration/config.sh: the configuration file as the daemon describes it (issue 18).
#   - `reception --print-config` is reception/nessie.conf: the checked-in example is current
#     (`make config` rewrites it);
#   - it round-trips: a printed file (defaults, or every key set away from its default with
#     --set) loads back to the same settings, i.e. prints the same, and shows each value set;
#   - every numeric key refuses the value past each of its bounds, from a file and from --set,
#     with an error that names the group, the key and the bounds (read off the printed file's
#     "Range:" lines, so no key is forgotten); unknown groups and keys, malformed lines, bad
#     booleans and enum values are refused too, and a refused configuration starts no daemon.
#
# Environment: BUILD (default build).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$here/$BUILD" ;; esac
recep="$BUILD/reception"
[ -x "$recep" ] || { echo "config: $recep missing (make)" >&2; exit 1; }
dir=$(mktemp -d /tmp/nessie-config-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail=0
bad() { echo "config: FAIL: $*"; fail=1; }

# 1. The checked-in example is the daemon's own output.
"$recep" --print-config >"$dir/defaults.conf" || bad "--print-config failed"
if ! diff -u "$here/reception/nessie.conf" "$dir/defaults.conf" >"$dir/diff"; then
    cat "$dir/diff"; bad "reception/nessie.conf is not current (run: make config)"
fi
keys=$(grep -c '^#\{0,1\}[a-z_]* = ' "$dir/defaults.conf")
echo "config: --print-config writes $keys keys in $(grep -c '^\[' "$dir/defaults.conf") groups"
# Issue 26, finding 5: at the defaults the leak sweep ran three times after a start and never
# again, so what faults leaked at run time stayed lost until a restart. It must recur.
grep -q '^sweep_every_s = [1-9]' "$dir/defaults.conf" ||
    bad "the leak sweep does not recur at the defaults (sweep_every_s = 0)"

# 2. Round trips: the defaults, and every key away from its default.
"$recep" --config "$dir/defaults.conf" --print-config >"$dir/again.conf" &&
    cmp -s "$dir/defaults.conf" "$dir/again.conf" || bad "the defaults do not round-trip"
set -- cluster.name=rt-x_1 cluster.nodes=3 cluster.node_ids=4 cluster.fabric=verbs \
    "cluster.addresses=10.1.2.3:7470, 10.1.2.4:7471, [fe80::1]:7472, 10.1.2.5:7473" \
    cluster.device=mlx5_0 \
    cluster.index_slots=4096 cluster.data_bytes=16777216 cluster.ways=4 cluster.filter_bits=5 \
    cluster.max_item_size=262144 cluster.expiration_ms=250 cluster.op_timeout_ms=900 \
    cluster.migrate_depth=2 cluster.evict=false cluster.mode=auto cluster.sd_slots=8 \
    optimizations.cache=false optimizations.previous_versions=false optimizations.multi_read=false \
    optimizations.multi_read_bytes=4096 optimizations.cache_entries=100 \
    optimizations.cache_bytes=65536 reception.workers=3 reception.recyclers=2 \
    reception.arena_bytes=65536 reception.max_channels=16 reception.spin_us=0 \
    reception.sd_servers=2 reception.sd_poll=spin reception.sd_help=false reception.sweep_every_s=30 \
    reception.socket=n%u.s reception.socket_mode=0660 reception.memcached_port=11311 \
    reception.memcached_addr=::1 reception.memcached_threads=3 reception.max_connections=77 \
    reception.idle_timeout_s=600 reception.partial_timeout_s=7 membership.mode=etcd \
    "membership.endpoints=http://10.1.2.3:2379, http://10.1.2.4:2379" membership.lease_s=5 \
    flash.path=/var/lib/nessie-rt flash.bytes=2097152 flash.page_bytes=65536 flash.item_min=100 \
    flash.promote_ms=2500
n=$#
[ "$n" -eq "$keys" ] || bad "the round trip sets $n keys, the schema has $keys"
printed="$dir/set.conf"
for s in "$@"; do printf '%s\n' "--set=$s"; done >"$dir/args"
# One --set per line of $dir/args (values hold spaces).
set --
while IFS= read -r a; do set -- "$@" "$a"; done <"$dir/args"
"$recep" "$@" --print-config >"$printed" || bad "--print-config with --set failed"
while IFS= read -r a; do
    kv=${a#--set=}; key=${kv%%=*}; key=${key#*.}; value=${kv#*=}
    grep -qxF "$key = $value" "$printed" || bad "--set $kv: the printed file has $(grep "^$key = " "$printed")"
done <"$dir/args"
"$recep" --config "$printed" --print-config >"$dir/set-again.conf" &&
    cmp -s "$printed" "$dir/set-again.conf" || { diff "$printed" "$dir/set-again.conf"; bad "a file with every key set does not round-trip"; }
echo "config: round trips of the defaults and of $n keys set: checked"

# 3. Bounds: every "Range: MIN..MAX." of the printed file, one past each end, from a file and --set.
refuse() { # refuse WHAT EXPECT ARGS...: the configuration must be refused with EXPECT in the error
    what=$1; expect=$2; shift 2
    if "$recep" "$@" --print-config >/dev/null 2>"$dir/err"; then
        bad "$what: accepted"
    elif ! grep -qF -- "$expect" "$dir/err"; then
        bad "$what: the error does not say \"$expect\": $(cat "$dir/err")"
    fi
}
checked=0
group=""
while IFS= read -r line; do
    case $line in
    \[*\]) group=${line#[}; group=${group%]} ;;
    "# Range: "*) range=${line#"# Range: "}; range=${range%.}; min=${range%..*}; max=${range#*..} ;;
    [a-z]*" = "*)
        key=${line%% = *}
        if [ -n "${range:-}" ]; then
            for v in $(python3 -c "print($max + 1, $min - 1 if $min > 0 else '')"); do
                printf '[%s]\n%s = %s\n' "$group" "$key" "$v" >"$dir/one.conf"
                refuse "[$group] $key = $v (file)" "[$group] $key = \"$v\": expected an integer in $min..$max" \
                    --config "$dir/one.conf"
                refuse "[$group] $key = $v (--set)" "[$group] $key = \"$v\": expected an integer in $min..$max" \
                    --set "$group.$key=$v"
                checked=$((checked + 1))
            done
        fi
        range="" ;;
    esac
done <"$dir/defaults.conf"
echo "config: $checked out-of-range values refused, each from a file and from --set"
[ "$checked" -ge 20 ] || bad "only $checked bounds checked"

# 4. What is not a setting.
printf '[cluster]\nnodez = 3\n' >"$dir/x.conf"
refuse "unknown key" '[cluster] has no key "nodez"' --config "$dir/x.conf"
printf '[clusters]\nnodes = 3\n' >"$dir/x.conf"
refuse "unknown group" 'unknown group [clusters]' --config "$dir/x.conf"
printf '[cluster\nnodes = 3\n' >"$dir/x.conf"
refuse "malformed line" "$dir/x.conf" --config "$dir/x.conf"
refuse "bad boolean" '[cluster] evict = "maybe": expected true or false' --set cluster.evict=maybe
refuse "bad enum" '[cluster] mode = "fast": expected one of cd|sd|hy|auto' --set cluster.mode=fast
refuse "bad number" '[reception] workers = "2x"' --set reception.workers=2x
refuse "no such file" "$dir/none.conf" --config "$dir/none.conf"
refuse "--set without a key" 'expected GROUP.KEY=VALUE' --set nodes=3
refuse "verbs without addresses" 'needs addresses' --set cluster.fabric=verbs
refuse "verbs with an address per node, not per node id" 'one entry per node id (4), found 3' \
    --set cluster.fabric=verbs --set cluster.nodes=3 --set cluster.node_ids=4 \
    --set "cluster.addresses=10.1.2.3:7470, 10.1.2.4:7471, 10.1.2.5:7472"
refuse "a node-id capacity below the nodes" 'node_ids = 2: must be 0, or nodes (3) to 64 x nodes' \
    --set cluster.nodes=3 --set cluster.node_ids=2
refuse "a node-id capacity past 64 per node" 'node_ids = 129' --set cluster.nodes=2 \
    --set cluster.node_ids=129
refuse "cluster name outside [A-Za-z0-9_-]" 'expected letters, digits, _ and - only' --set "cluster.name=a b"
refuse "a string the file cannot hold" 'no blanks at its ends' --set "reception.socket=n%u.sock "
refuse "etcd without endpoints" 'mode = etcd needs endpoints' --set membership.mode=etcd
refuse "arena not a multiple of 8" 'arena_bytes = 4100: must be a multiple of 8' --set reception.arena_bytes=4100
refuse "a flash page not a power of two" '[flash] page_bytes = 100000: must be a power of two' \
    --set flash.path=/tmp --set flash.page_bytes=100000
refuse "a flash log not a whole number of pages" '[flash] bytes = 3000000: must be a whole number of pages' \
    --set flash.path=/tmp --set flash.bytes=3000000
# The view lease (half of lease_s) must outlast an attempt (expiration_ms) by two refreshes
# (200 ms), or calls wait for renewals instead of running (members.c, members_config_check): at
# lease_s = 1 and expiration_ms = 300 it does not; at 299 it does; static membership has no lease.
etcd_at="membership.endpoints=http://127.0.0.1:9"
refuse "a view lease within an attempt and two refreshes" \
    '[membership] lease_s = 1 gives a view lease of 500 ms' \
    --set membership.mode=etcd --set "$etcd_at" --set membership.lease_s=1 --set cluster.expiration_ms=300
for want in "[cluster] expiration_ms = 300" "500 ms" "raise lease_s to 2 or more" "below 300"; do
    grep -qF -- "$want" "$dir/err" || bad "the view lease error does not say \"$want\": $(cat "$dir/err")"
done
"$recep" --set membership.mode=etcd --set "$etcd_at" --set membership.lease_s=1 \
    --set cluster.expiration_ms=299 --print-config >/dev/null 2>"$dir/err" ||
    bad "a view lease of 500 ms with expiration_ms = 299 was refused: $(cat "$dir/err")"
"$recep" --set membership.lease_s=1 --set cluster.expiration_ms=300 --print-config >/dev/null 2>"$dir/err" ||
    bad "static membership was refused for its lease_s: $(cat "$dir/err")"
# ... and the daemon refuses it before it opens anything: no tables, no socket, no etcd asked.
trap_name=cfgtrap-$$
if "$recep" --set membership.mode=etcd --set "$etcd_at" --set membership.lease_s=1 \
    --set cluster.expiration_ms=300 --set "cluster.name=$trap_name" --node 0 \
    --run-dir "$dir/run" 2>"$dir/err"; then
    bad "the daemon started with a view lease of 500 ms and expiration_ms = 300"
fi
grep -qF '[membership] lease_s = 1 gives a view lease of 500 ms' "$dir/err" ||
    bad "the daemon's error for the view lease: $(cat "$dir/err")"
if ls /dev/shm/nessie."$trap_name".* >/dev/null 2>&1; then
    rm -f /dev/shm/nessie."$trap_name".*
    bad "the refused view lease left tables in /dev/shm"
fi
[ ! -e "$dir/run/node0.sock" ] || bad "the refused view lease left a socket"
# A flash directory that is not there: the daemon says so and makes no tables (issue 31).
if "$recep" --set "flash.path=$dir/no-such-dir" --set "cluster.name=$trap_name" --node 0 \
    --run-dir "$dir/run" 2>"$dir/err"; then
    bad "the daemon started with a missing flash directory"
fi
grep -qF "[flash] path $dir/no-such-dir: No such file or directory" "$dir/err" ||
    bad "the daemon's error for a missing flash directory: $(cat "$dir/err")"
if ls /dev/shm/nessie."$trap_name".* >/dev/null 2>&1; then
    rm -f /dev/shm/nessie."$trap_name".*
    bad "the missing flash directory left tables in /dev/shm"
fi
# A refused configuration starts nothing: no socket appears.
printf '[reception]\nworkers = 0\n' >"$dir/x.conf"
if "$recep" --config "$dir/x.conf" --node 0 --run-dir "$dir/run" 2>"$dir/err"; then
    bad "the daemon started with workers = 0"
fi
[ ! -e "$dir/run/node0.sock" ] || bad "a refused configuration left a socket"
grep -qF '[reception] workers = "0": expected an integer in 1..256' "$dir/err" ||
    bad "the daemon's error: $(cat "$dir/err")"

[ "$fail" = 0 ] && echo "config: passed"
exit "$fail"
