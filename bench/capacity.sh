#!/bin/sh
# bench/capacity.sh - issue 29's two figures: how much of the cluster's memory a client on one
# node can use, Nessie against memcached at the same total memory, in one run.
#
# Nessie: NODES daemons (shm fabric, cluster.evict=true) with D MiB of data each; memcached:
# -m NODES x D. The same loadgen binary, one client process, 1 KiB values under 128-byte keys;
# Nessie's client runs through node 0's shim only (every node's daemon is up, none has clients).
#   fill: SETS SETs, no GETs, from empty, keys drawn uniformly over SETS keys (issue 29's command,
#         `loadgen -v 1024 -g 0 -n SETS --no-preload -o SETS -w 0`; drawn with replacement, so
#         about 63 % of the SETs are of distinct keys: far more than either system holds). Then
#         the items each Nessie node holds and its evictions (nessie-stat --raw against each
#         daemon), memcached's curr_items and evictions (memcstat), and the SETs each refused
#         (loadgen's errors column). Prints `items held: nessie/memcached = X.XXx`.
#   zipf: on the same filled systems, Zipf 0.99 GETs (90 %) over 10x the items that fit (NODES x
#         D MiB / (64 + 128 + 1024) B), a SET after each miss: ZIPF_OPS operations (3x the items
#         that fit) to warm up, then ZIPF_OPS measured: the GET hit ratio of each, and the SETs
#         refused. Counts of operations, not seconds: the hit ratio climbs with the operations
#         done, and Nessie's client runs several times faster than memcached's here, so equal
#         times would compare a warmer Nessie. Prints `zipf hit ratio: nessie/memcached = X.XXx`.
# Issue 29's goals: items held >= 0.9x (goal 1.0x) with no SET refused; zipf hit ratio >= 1.0x.
# Also prints `ratio items_held X` and `ratio zipf_hit X` as the other scripts do. Writes
# capacity.csv (the loadgen rows), capacity-items.csv (system,node,curr_items,evictions),
# capacity-summary.txt (what it printed), capacity.png.
#
# Usage: bench/capacity.sh [--quick] [--nodes N] [--data-mib D] [--sets N] [--help]
#   --quick      a smoke run of under a minute: 4 MiB a node, 40000 SETs
#   --nodes N    Nessie nodes (3); memcached gets N x D MiB
#   --data-mib D data MiB per Nessie node (32)
#   --sets N     SETs in the fill, and its key space (300000)
# Environment: ZIPF_OPS, BENCH_MAX_ITEM (Nessie's largest item and slab page, 65536 as in
#   eviction.sh), BENCH_EXPIRATION_MS.
set -eu
usage() { sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; }
NODES=3 DATA_MIB=32 SETS=300000 QUICK=0
BENCH_ARGS="$*"
while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --quick) QUICK=1 ;;
        --nodes) NODES=${2:?--nodes needs a number}; shift ;;
        --data-mib) DATA_MIB=${2:?--data-mib needs a number}; shift ;;
        --sets) SETS=${2:?--sets needs a number}; shift ;;
        *) echo "bench/capacity.sh: unknown option $1 (--help)" >&2; exit 2 ;;
    esac
    shift
done
# --quick's sizes, unless named too (options given after it win either way).
if [ $QUICK = 1 ]; then
    case " $BENCH_ARGS " in *" --data-mib "*) ;; *) DATA_MIB=4 ;; esac
    case " $BENCH_ARGS " in *" --sets "*) ;; *) SETS=40000 ;; esac
fi
for v in "$NODES" "$DATA_MIB" "$SETS"; do
    case $v in ''|*[!0-9]*|0) echo "bench/capacity.sh: --nodes, --data-mib and --sets take positive integers" >&2; exit 2 ;; esac
done
BENCH_DATA_BYTES=$((DATA_MIB * 1048576))
BENCH_MAX_ITEM=${BENCH_MAX_ITEM:-65536}
BENCH_MC_MB=$((NODES * DATA_MIB))
# mc_start's -I 2m needs -m of twice that at least.
[ "$BENCH_MC_MB" -ge 4 ] || { echo "bench/capacity.sh: memcached -m $BENCH_MC_MB: nodes x data MiB must be >= 4 (mc_start's -I 2m)" >&2; exit 2; }
. "$(dirname "$0")/lib.sh"

VALUE=1024
KEY=128
# Items the memory holds, roughly: header (Nessie 64 B, memcached ~56 B) + key + value.
CAPACITY=$((NODES * BENCH_DATA_BYTES / (64 + KEY + VALUE)))
ZIPF_KEYS=$((10 * CAPACITY))
ZIPF_OPS=${ZIPF_OPS:-$((3 * CAPACITY))}
EXPIRATION_MS=${BENCH_EXPIRATION_MS:-$("$BUILD/reception" --print-config | sed -n 's/^expiration_ms = //p')}
bench_begin capacity "$NODES-node Nessie (shim, shm, $BENCH_DATA_BYTES data bytes per node, max item $BENCH_MAX_ITEM, expiration $EXPIRATION_MS ms, evict) vs memcached -m $BENCH_MC_MB; one client process, on node 0 for Nessie; $VALUE B values, $KEY B keys; fill: $SETS SETs over $SETS keys, uniform, no preload; zipf: 0.99 over $ZIPF_KEYS keys (10x the ~$CAPACITY items that fit), 90% GETs, set on miss, $ZIPF_OPS ops to warm up then $ZIPF_OPS measured"
COLS_HEADER="phase"
ITEMS=$OUT/capacity-items.csv
SUMMARY=$OUT/capacity-summary.txt
echo "system,node,curr_items,evictions" >"$ITEMS"

# node_stat SOCKET NAME: one daemon's stat, read with the project's stats tool.
node_stat() { "$BENCH_ROOT/tools/nessie-stat" --raw --socket "$1" 2>/dev/null | awk -v k="$2" '$1 == k { print $2; exit }'; }
# quotient FORMAT A B: printf FORMAT A / B (0 if B is 0).
quotient() { awk -v f="$1" -v a="$2" -v b="$3" 'BEGIN { printf f, b ? a / b : 0 }'; }
# The GET hit ratio of $LAST_ROW.
row_hit() { quotient %.4f "$(row_field "$LAST_ROW" get_hits)" "$(row_field "$LAST_ROW" gets)"; }

mc_start
nessie_start "$NODES" cluster.evict=true

FILL="-v $VALUE -k $KEY -g 0 -n $SETS --no-preload -o $SETS -w 0"
COLS=fill
bench_log "fill: $SETS SETs of $VALUE B through one client: memcached -m $BENCH_MC_MB"
t=$(date +%s)
# shellcheck disable=SC2086  # $FILL is a list of options
run_memcached memcached $FILL
mc_fill_s=$(($(date +%s) - t))
mc_refused=$(row_field "$LAST_ROW" errors)
mc_items=$(mc_stat curr_items)
mc_evictions=$(mc_stat evictions)
echo "memcached,all,$mc_items,$mc_evictions" >>"$ITEMS"
bench_log "fill: the same on Nessie, the client on node 0"
t=$(date +%s)
# shellcheck disable=SC2086
run_nessie nessie $FILL
n_fill_s=$(($(date +%s) - t))
n_refused=$(row_field "$LAST_ROW" errors)
n_items=0
per_node=""
i=0
while [ $i -lt "$NODES" ]; do
    items=$(node_stat "$NESSIE_DIR/node$i.sock" curr_items)
    ev=$(node_stat "$NESSIE_DIR/node$i.sock" evictions)
    [ -n "$items" ] || bench_die "no curr_items from node $i (tools/nessie-stat --raw --socket $NESSIE_DIR/node$i.sock)"
    echo "nessie,$i,$items,${ev:-0}" >>"$ITEMS"
    per_node="$per_node  node $i: $items items, ${ev:-0} evictions
"
    n_items=$((n_items + items))
    i=$((i + 1))
done

ZIPF="-v $VALUE -k $KEY -g 0.9 -d zipf -n $ZIPF_KEYS --no-preload --set-on-miss -o $ZIPF_OPS -w 0"
bench_log "zipf: 0.99 over $ZIPF_KEYS keys, 90% GETs, set on miss, $ZIPF_OPS ops twice (warm-up, measured): memcached, nessie"
# zipf_phase RUNNER NAME: the warm-up, then the measured run, of one system; sets Z_HIT and
# Z_REFUSED. The warm-up's row is kept too (phase zipf-warm), with its own seed: other keys, same
# law.
zipf_phase() {
    COLS=zipf-warm
    # shellcheck disable=SC2086
    "$1" "$2" $ZIPF --seed 7
    COLS=zipf
    # shellcheck disable=SC2086
    "$1" "$2" $ZIPF
    Z_HIT=$(row_hit)
    Z_REFUSED=$(row_field "$LAST_ROW" errors)
}
zipf_phase run_memcached memcached
mc_hit=$Z_HIT mc_zipf_refused=$Z_REFUSED
zipf_phase run_nessie nessie
n_hit=$Z_HIT n_zipf_refused=$Z_REFUSED
bench_cleanup

{
    echo "fill: $SETS SETs of $VALUE B values ($KEY B keys) over $SETS keys, one client ($NODES x $DATA_MIB MiB)"
    echo "nessie ($NODES nodes x $DATA_MIB MiB, client on node 0): $n_items items, $n_refused SETs refused, ${n_fill_s} s"
    printf '%s' "$per_node"
    echo "memcached (-m $BENCH_MC_MB): $mc_items items, $mc_evictions evictions, $mc_refused SETs refused, ${mc_fill_s} s"
    quotient 'items held: nessie/memcached = %.2fx\n' "$n_items" "$mc_items"
    echo "zipf 0.99 over $ZIPF_KEYS keys (10x ~$CAPACITY), 90% GETs, set on miss, $ZIPF_OPS ops after $ZIPF_OPS:"
    echo "  hit ratio: nessie $n_hit ($n_zipf_refused SETs refused), memcached $mc_hit ($mc_zipf_refused SETs refused)"
    quotient 'zipf hit ratio: nessie/memcached = %.2fx\n' "$n_hit" "$mc_hit"
    quotient 'ratio items_held %.3f\n' "$n_items" "$mc_items"
    quotient 'ratio zipf_hit %.3f\n' "$n_hit" "$mc_hit"
} | tee "$SUMMARY"

plot capacity <<EOF2
set title 'Items held after $SETS SETs of 1 KiB through one client: Nessie ($NODES x $DATA_MIB MiB, client on node 0) vs memcached -m $BENCH_MC_MB'
set style data histograms; set style histogram rowstacked; set style fill solid 0.8 border -1
set boxwidth 0.6; set ylabel 'items'; set yrange [0:*]; set key inside top right
plot '<tail -n +2 $ITEMS' using 3:xtic(stringcolumn(1) . ' ' . stringcolumn(2)) title 'curr_items'
EOF2
bench_end
