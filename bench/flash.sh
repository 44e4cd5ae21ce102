#!/bin/sh
# bench/flash.sh - the flash tier (issue 31): Nessie with flash against memcached with extstore,
# equal memory and equal flash on the same disk, the same client binary.
#
# A 3-node Nessie cluster with BENCH_FLASH_DATA_BYTES (32 MiB) of data per node and a flash log
# per node, and memcached with -m = 3 x that and -o ext_path of the same total size, both files
# in one directory (BENCH_FLASH_DIR, default /var/tmp). 4 KiB values under 64-byte keys over a
# working set 4x what the memory holds (BENCH_FLASH_FACTOR). Two more systems give what a memory
# large enough for everything would hit: Nessie and memcached with 8x the memory, no flash.
# For each system: every key stored once (a loadgen per node for Nessie, as many processes for
# memcached), then BENCH_FLASH_SECONDS (15) of each load, 95 % GETs, a GET that misses
# followed by a SET of its key (a cache's users):
#   zipf-all:  Zipf 0.99, a client process per node (memcached: as many processes);
#   zipf-one:  Zipf 0.99, one client process (Nessie: on node 0);
#   uniform:   uniform keys, a client per node: most hits then come from flash, so its GET
#              p99 is the flash read's (the summary gives each system's share of GETs served
#              from flash, from its own stats: get_extstore, GETs answered from a flash log,
#              on both; Nessie's extstore_objects_read also counts the records a SET or a
#              retry read).
# Prints a table, then `ratio flash_hit_vs_extstore` (zipf-all hit ratio, Nessie / memcached),
# `ratio flash_hit_vs_all_memory` (Nessie with flash / Nessie all in memory),
# `ratio get_p99_extstore_vs_flash` and `ratio uniform_get_p99_extstore_vs_flash` (memcached's
# GET p99 / Nessie's: at least 1 where Nessie's is at most extstore's), the same for zipf-one,
# `flash_ram_per_item B` (nessie_flash_ram_per_item: the index entry's 8 bytes per flash item
# plus the page table's share) and `write_amplification W` (nessie_flash_write_amplification:
# the bytes the log wrote to the device per byte demoted, compaction's rewrites included),
# both means over the nodes at the end. Then the same two figures with the logs about 90 % full
# (the issue's bar): a fresh cluster with BENCH_FLASH_FILL_MB (2048) of flash a node, each node's
# client storing keys of its own (loadgen --key-base) until their records take 88 % of its log:
# `flash_fill_pct P` (record bytes in the logs / their size, mean over the nodes; a page sealed
# before it is full counts its unused tail free), `flash_ram_per_item_full B` and
# `write_amplification_full W` (the log's page buffers, 2 MiB a node, are a fixed cost that the
# figure above shares among fewer items). Writes flash.csv (loadgen rows), flash-summary.csv and
# flash.png.
#
# Usage: bench/flash.sh [--help]   (environment: BENCH_FLASH_SECONDS, BENCH_FLASH_DATA_BYTES,
#   BENCH_FLASH_FACTOR, BENCH_FLASH_FILL_MB, BENCH_FLASH_DIR, BENCH_WARMUP)
set -eu
case ${1:-} in -h|--help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
BENCH_DATA_BYTES=${BENCH_FLASH_DATA_BYTES:-33554432}
BENCH_MAX_ITEM=${BENCH_MAX_ITEM:-65536}
. "$(dirname "$0")/lib.sh"

NODES=3
VALUE=4096
KEY=64
FACTOR=${BENCH_FLASH_FACTOR:-4}
SECONDS_EACH=${BENCH_FLASH_SECONDS:-15}
# Items the memory holds, roughly (header 64 B + key + value), and the working set.
CAPACITY=$((NODES * BENCH_DATA_BYTES / (64 + KEY + VALUE)))
KEYS=$((FACTOR * CAPACITY))
MEM_MB=$((NODES * BENCH_DATA_BYTES / 1048576))
# Flash per node: the working set's share, twice over (room for compaction to work), in whole
# MiB (Nessie's pages are 1 MiB); memcached's file is the three nodes' sum.
FLASH_MB=$(( (KEYS * (64 + KEY + VALUE) * 2 / NODES + 1048575) / 1048576 ))
[ "$FLASH_MB" -ge 16 ] || FLASH_MB=16
# The all-memory systems: everything fits, twice over.
BIG_BYTES=$((8 * BENCH_DATA_BYTES))
FLASH_DIR=$(mktemp -d "${BENCH_FLASH_DIR:-/var/tmp}/nessie-flash-bench.XXXXXX")
BENCH_SECONDS=$SECONDS_EACH
bench_begin flash "3-node Nessie (shim, shm, $BENCH_DATA_BYTES data bytes and $FLASH_MB MiB of flash per node) vs memcached -m $MEM_MB -o ext_path=$FLASH_DIR/memcached.ext:$((NODES * FLASH_MB))m; all-memory references at 8x the memory; $VALUE B values, $KEY B keys, $KEYS keys ($FACTOR x the ~$CAPACITY items memory holds); 95% GETs, set on miss, $SECONDS_EACH s per load"
trap 'bench_cleanup; rm -rf "$FLASH_DIR"' EXIT
COLS_HEADER="system,load"
LG="-v $VALUE -k $KEY -n $KEYS -g 0.95 --set-on-miss"
SUMMARY=$OUT/flash-summary.csv
echo "system,load,hit_ratio,ops_per_s,get_p50_us,get_p99_us,flash_share" >"$SUMMARY"

# nessie_stats NAME: NAME's value on each node, a line each.
nessie_stats() {
    for sock in "$NESSIE_DIR"/node*.sock; do
        "$BUILD/tests/wire-client" -s "$sock" stats 2>/dev/null | sed -n "s/^STAT $1 \([0-9.]*\).*/\1/p"
    done
}
nessie_stat_sum() { nessie_stats "$1" | awk '{ s += $1 } END { print s + 0 }'; }
nessie_stat_mean() { nessie_stats "$1" | awk '{ s += $1; n++ } END { printf "%.2f\n", n ? s / n : 0 }'; }

# summarize SYSTEM LOAD OPS GETS HITS P50 P99 FLASH_READS: a summary row and shell variables
# named after SYSTEM and LOAD (dashes as underscores): hit_S_L and p99_S_L.
summarize() {
    v=$(echo "$1_$2" | tr '-' '_')
    hit=$(awk -v h="$5" -v g="$4" 'BEGIN { printf "%.4f", g ? h / g : 0 }')
    share=$(awk -v f="$8" -v g="$4" 'BEGIN { printf "%.3f", g ? f / g : 0 }')
    echo "$1,$2,$hit,$3,$6,$7,$share" >>"$SUMMARY"
    eval "hit_$v=$hit p99_$v=$7"
    bench_log "$1 $2: hit ratio $hit, $3 ops/s, GET p50 $6 us p99 $7 us, GETs from flash $share"
}

# One load on memcached: mc_load SYSTEM LOAD PROCS [LOADGEN ARGS]
mc_load() {
    sys=$1 load=$2 procs=$3
    shift 3
    before=$(mc_stat get_extstore)
    COLS="$sys,$load"
    run_memcached "$sys" -P "$procs" --no-preload $LG "$@"
    after=$(mc_stat get_extstore)
    summarize "$sys" "$load" "$(row_field "$LAST_ROW" ops_per_s)" "$(row_field "$LAST_ROW" gets)" \
        "$(row_field "$LAST_ROW" get_hits)" "$(row_field "$LAST_ROW" get_p50_us)" \
        "$(row_field "$LAST_ROW" get_p99_us)" $(( ${after:-0} - ${before:-0} ))
}

# One load on Nessie: nessie_load SYSTEM LOAD NODES [LOADGEN ARGS]: a loadgen on each of the
# first NODES nodes at once. GET percentiles are those of all their GETs together (their
# histograms added: loadgen --hist, --merge-hist), as memcached's loadgen -P reports its
# processes'; the worst node's p99 goes to the log beside it.
nessie_load() {
    sys=$1 load=$2 on=$3
    shift 3
    before=$(nessie_stat_sum get_extstore)
    COLS="$sys,$load"
    i=0 pids=""
    for p in $NESSIE_PIDS; do
        [ $i -lt "$on" ] || break
        NESSIE_NODE=$i NESSIE_RUN_DIR=$NESSIE_DIR NESSIE_STRICT=1 "$BENCH_ROOT/tools/nessie-run" \
            "$LOADGEN" -s 127.0.0.1:9 -l "$sys-node$i" -D "$BENCH_SECONDS" -w "$BENCH_WARMUP" \
            -W "node$i:$p" --seed $((42 + i)) --no-preload --hist "$OUT/hist$i.tmp" $LG "$@" \
            >"$OUT/row$i.tmp" 2>>"$OUT/loadgen.log" &
        pids="$pids $!"
        i=$((i + 1))
    done
    for p in $pids; do wait "$p" || bench_die "a loadgen failed (see $OUT/loadgen.log)"; done
    ops=0 gets=0 hits=0 worst=0 hists=""
    j=0
    while [ $j -lt $i ]; do
        hists="$hists $OUT/hist$j.tmp"
        row=$(cat "$OUT/row$j.tmp")
        rm -f "$OUT/row$j.tmp"
        _bench_row "$row"
        _bench_errors "$row" Nessie
        ops=$(awk -v a="$ops" -v b="$(row_field "$row" ops_per_s)" 'BEGIN { print a + b }')
        gets=$((gets + $(row_field "$row" gets)))
        hits=$((hits + $(row_field "$row" get_hits)))
        worst=$(awk -v a="$worst" -v b="$(row_field "$row" get_p99_us)" 'BEGIN { print (b > a) ? b : a }')
        j=$((j + 1))
    done
    # shellcheck disable=SC2086  # $hists is a list of files
    merged=$("$LOADGEN" --merge-hist $hists | sed -n 2p) || bench_die "loadgen --merge-hist failed"
    # shellcheck disable=SC2086
    rm -f $hists
    p50=$(echo "$merged" | cut -d, -f2)
    p99=$(echo "$merged" | cut -d, -f3)
    [ "$i" -eq 1 ] || bench_log "$sys $load: GET p99 of all $i clients' GETs $p99 us (the worst client's own: $worst us)"
    after=$(nessie_stat_sum get_extstore)
    summarize "$sys" "$load" "$ops" "$gets" "$hits" "$p50" "$p99" $((after - before))
}

# Every key stored once, from every node (each loadgen stores all of them: values then land
# on every node's memory and flash, as the loads' own SETs spread them). nessie_fill EACH: each
# node's loadgen stores EACH keys of its own instead (node i's numbered from i x EACH).
nessie_fill() {
    i=0 pids=""
    for p in $NESSIE_PIDS; do
        # shellcheck disable=SC2046  # the keys of its own: two more options, or none
        NESSIE_NODE=$i NESSIE_RUN_DIR=$NESSIE_DIR NESSIE_STRICT=1 "$BENCH_ROOT/tools/nessie-run" \
            "$LOADGEN" -s 127.0.0.1:9 -l fill -o 1 -w 0 --seed $((42 + i)) $LG \
            ${1:+-n "$1" --key-base $((i * $1))} >/dev/null 2>>"$OUT/loadgen.log" &
        pids="$pids $!"
        i=$((i + 1))
    done
    for p in $pids; do wait "$p" || bench_die "a fill failed (see $OUT/loadgen.log)"; done
}

nessie_system() { # SYSTEM [SETTINGS...]
    sys=$1
    shift
    nessie_start $NODES cluster.evict=true "cluster.index_slots=$((2 * KEYS / NODES))" "$@"
    bench_log "$sys: storing $KEYS keys"
    nessie_fill
    nessie_load "$sys" zipf-all $NODES -d zipf
    nessie_load "$sys" zipf-one 1 -d zipf
    nessie_load "$sys" uniform $NODES -d uniform
}

mc_system() { # SYSTEM [MEMCACHED OPTIONS...]
    sys=$1
    shift
    MC_EXTRA="$*"
    mc_start
    bench_log "$sys: storing $KEYS keys"
    "$LOADGEN" -s 127.0.0.1:"$MC_PORT" -P $NODES -l fill -o 1 -w 0 $LG >/dev/null 2>>"$OUT/loadgen.log" ||
        bench_die "the fill failed against memcached (see $OUT/loadgen.log)"
    mc_load "$sys" zipf-all $NODES -d zipf
    mc_load "$sys" zipf-one 1 -d zipf
    mc_load "$sys" uniform $NODES -d uniform
}

BENCH_MC_MB=$MEM_MB
mc_system memcached-ext -o "ext_path=$FLASH_DIR/memcached.ext:$((NODES * FLASH_MB))m"
mc_ext_items=$(mc_stat extstore_objects_used)
MC_RECACHED=$(mc_stat recache_from_extstore)
mc_stop
rm -f "$FLASH_DIR/memcached.ext"

nessie_system nessie-flash "flash.path=$FLASH_DIR" "flash.bytes=$((FLASH_MB * 1048576))"
ram_per_item=$(nessie_stat_mean nessie_flash_ram_per_item)
wa=$(nessie_stat_mean nessie_flash_write_amplification)
n_flash_items=$(nessie_stat_sum extstore_objects_used)
n_compacted=$(nessie_stat_sum nessie_flash_compacted)
n_dropped=$(nessie_stat_sum nessie_flash_dropped)
n_promoted=$(nessie_stat_sum recache_from_extstore)
nessie_stop

BENCH_DATA_BYTES=$BIG_BYTES
nessie_system nessie-memory
nessie_stop
BENCH_MC_MB=$((NODES * BIG_BYTES / 1048576))
mc_system memcached-memory
mc_stop

# The logs about 90 % full: per node, keys of its own whose records (64-byte header, key, value,
# to 64 bytes) take 88 % of its log (the items still in memory take the rest of the margin).
FILL_MB=${BENCH_FLASH_FILL_MB:-2048}
FILL_KEYS=$((FILL_MB * 1048576 / 100 * 88 / (64 + KEY + VALUE)))
BENCH_DATA_BYTES=${BENCH_FLASH_DATA_BYTES:-33554432}
nessie_start $NODES cluster.evict=true "cluster.index_slots=$((2 * FILL_KEYS))" \
    "flash.path=$FLASH_DIR" "flash.bytes=$((FILL_MB * 1048576))"
bench_log "nessie-fill: $FILL_KEYS keys a node into $FILL_MB MiB of flash each"
nessie_fill "$FILL_KEYS"
fill_pct=$(for sock in "$NESSIE_DIR"/node*.sock; do
    "$BUILD/tests/wire-client" -s "$sock" stats 2>/dev/null |
        awk '$2 == "extstore_bytes_used" { u = $3 } $2 == "extstore_limit_maxbytes" { l = $3 }
             END { if (l) print 100 * u / l }'
done | awk '{ s += $1; n++ } END { printf "%.1f\n", n ? s / n : 0 }')
ram_full=$(nessie_stat_mean nessie_flash_ram_per_item)
wa_full=$(nessie_stat_mean nessie_flash_write_amplification)
n_full=$(nessie_stat_sum extstore_objects_used)
nessie_stop
bench_log "nessie-fill: $n_full items on flash, the logs $fill_pct % full, $ram_full B of memory an item, write amplification $wa_full"

printf '%-16s %-9s %9s %12s %10s %10s %7s\n' system load "hit" "ops/s" "GET p50" "GET p99" flash
grep -v '^system' "$SUMMARY" | awk -F, '{ printf "%-16s %-9s %9.4f %12.0f %10.1f %10.1f %7.3f\n", $1, $2, $3, $4, $5, $6, $7 }'
echo "flash items at the end: nessie $n_flash_items (pages compacted $n_compacted, dropped $n_dropped), memcached $mc_ext_items"
echo "flash items brought back into memory (recache_from_extstore): nessie $n_promoted, memcached $MC_RECACHED"
# shellcheck disable=SC2154  # hit_* and p99_* are set by summarize's eval
{
    awk -v a="$hit_nessie_flash_zipf_all" -v b="$hit_memcached_ext_zipf_all" 'BEGIN { printf "ratio flash_hit_vs_extstore %.3f\n", b ? a / b : 0 }'
    awk -v a="$hit_nessie_flash_zipf_all" -v b="$hit_nessie_memory_zipf_all" 'BEGIN { printf "ratio flash_hit_vs_all_memory %.3f\n", b ? a / b : 0 }'
    awk -v a="$p99_memcached_ext_zipf_all" -v b="$p99_nessie_flash_zipf_all" 'BEGIN { printf "ratio get_p99_extstore_vs_flash %.2f\n", b ? a / b : 0 }'
    awk -v a="$p99_memcached_ext_zipf_one" -v b="$p99_nessie_flash_zipf_one" 'BEGIN { printf "ratio one_client_get_p99_extstore_vs_flash %.2f\n", b ? a / b : 0 }'
    awk -v a="$p99_memcached_ext_uniform" -v b="$p99_nessie_flash_uniform" 'BEGIN { printf "ratio uniform_get_p99_extstore_vs_flash %.2f\n", b ? a / b : 0 }'
}
echo "flash_ram_per_item $ram_per_item"
echo "write_amplification $wa"
echo "flash_fill_pct $fill_pct"
echo "flash_ram_per_item_full $ram_full"
echo "write_amplification_full $wa_full"

plot flash <<EOF2
set multiplot layout 1,2 title 'Working set ${FACTOR}x memory ($MEM_MB MiB): Nessie with flash vs memcached with extstore; 4 KiB values, 95% GETs, set on miss'
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8 border -1
set xtics rotate by -20; set key outside bottom center horizontal
set title 'GET hit ratio'; set yrange [0:1.05]
plot for [s in "nessie-flash memcached-ext nessie-memory memcached-memory"] '< grep "^'.s.'," $SUMMARY' using 3:xtic(2) title s
set title 'GET p99 (us)'; set yrange [0:*]
plot for [s in "nessie-flash memcached-ext nessie-memory memcached-memory"] '< grep "^'.s.'," $SUMMARY' using 6:xtic(2) title s
unset multiplot
EOF2
bench_end
