#!/bin/sh
# bench/flash-seed.sh - the seed's experiments on the flash tier (issue 31; Shankar et al., the
# hybrid RDMA-Memcached paper, ../shared/papers/002_52af61316c319f62.txt, figures 6(b) and 8(b)):
# Nessie with a flash log per node against memcached with extstore, equal memory and equal flash
# in one directory (BENCH_FLASH_DIR, default /var/tmp), the same client binaries.
#
#   latency  data 1.5x what the memory holds (BENCH_SEED_FACTOR), 32 KiB values under 64-byte
#            keys, every key stored first, then one client (Nessie: on node 0) for
#            BENCH_FLASH_SECONDS (15) of Zipf 0.99 GETs, read-only and 50:50 GET:SET, a GET that
#            misses followed by a SET (the paper's figure 6(b)); mean latency, GET and SET p50
#            and p99.
#   blocks   the paper's bursty-I/O example (figure 8(b), build/bench/nb-overlap): blocks of 2 MiB
#            and 16 MiB in 256 KiB chunks, 4x what the memory holds in all, every block written
#            and then read back chunk by chunk with the blocking calls, then its chunks issued
#            with memcached_iset / memcached_iget and waited for at the end; the time per block.
#            memcached has no non-blocking calls: the shim's fallback (no daemon) runs them
#            blocking against it, so its non-blocking rows are its blocking ones, measured again.
#            A chunk the cache lost (memcached's extstore keeps what its pages hold) is counted
#            (the missing column: a miss is quicker than a read, so compare rows without any).
#
# Prints a table, then `ratio seed_get_mean_extstore_vs_flash` (memcached's mean GET latency /
# Nessie's, read-only, blocking calls), `ratio seed_mixed_mean_extstore_vs_flash` (the same at
# 50:50), and per block size `ratio seed_block_<size>_read_extstore_vs_nb` (memcached's blocking
# read of a block / Nessie's non-blocking one) and `ratio seed_block_<size>_read_block_vs_nb`
# (Nessie blocking / Nessie non-blocking: what the overlap wins on one system). Writes
# flash-seed.csv (loadgen rows), seed-blocks.csv, seed-summary.csv and flash-seed.png.
#
# Usage: bench/flash-seed.sh [--help]   (environment: BENCH_FLASH_SECONDS, BENCH_FLASH_DATA_BYTES,
#   BENCH_SEED_FACTOR, BENCH_SEED_BLOCK_FACTOR, BENCH_FLASH_DIR, BENCH_WARMUP)
set -eu
case ${1:-} in -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
BENCH_DATA_BYTES=${BENCH_FLASH_DATA_BYTES:-33554432}
# Nessie's largest item (its slab pages): a 256 KiB chunk and its header.
BENCH_MAX_ITEM=${BENCH_MAX_ITEM:-524288}
. "$(dirname "$0")/lib.sh"

NODES=3
VALUE=32768
KEY=64
CHUNK=262144
FACTOR=${BENCH_SEED_FACTOR:-1.5}
BLOCK_FACTOR=${BENCH_SEED_BLOCK_FACTOR:-4}
SECONDS_EACH=${BENCH_FLASH_SECONDS:-15}
MEM_BYTES=$((NODES * BENCH_DATA_BYTES))
MEM_MB=$((MEM_BYTES / 1048576))
# Items of 32 KiB the memory holds, roughly (header 64 B + key + value), and the working set.
KEYS=$(awk -v m="$MEM_BYTES" -v f="$FACTOR" -v s=$((64 + KEY + VALUE)) 'BEGIN { printf "%d", f * m / s }')
# The block experiment's data: BLOCK_FACTOR x the memory, in 256 KiB chunks.
BLOCK_DATA=$((BLOCK_FACTOR * MEM_BYTES))
# Flash per node: the larger data set's share, twice over (room for compaction: nb-overlap
# writes everything twice), in whole MiB; memcached's file is the three nodes' sum.
FLASH_MB=$(( (BLOCK_DATA * 2 / NODES + 1048575) / 1048576 ))
[ "$FLASH_MB" -ge 16 ] || FLASH_MB=16
BENCH_SECONDS=$SECONDS_EACH
FLASH_PARENT=${BENCH_FLASH_DIR:-/var/tmp}
bench_begin flash-seed "3-node Nessie (shim, shm, $BENCH_DATA_BYTES data bytes and $FLASH_MB MiB of flash per node) vs memcached -m $MEM_MB -o ext_path=$FLASH_PARENT/nessie-flash-seed.*/memcached.ext:$((NODES * FLASH_MB))m; latency: $VALUE B values, $KEY B keys, $KEYS keys ($FACTOR x memory), Zipf 0.99, one client, $SECONDS_EACH s per load; blocks: 2 MiB and 16 MiB of $CHUNK B chunks, $BLOCK_DATA bytes ($BLOCK_FACTOR x memory)"
FLASH_DIR=$(mktemp -d "$FLASH_PARENT/nessie-flash-seed.XXXXXX")
trap 'bench_cleanup; rm -rf "$FLASH_DIR"' EXIT
COLS_HEADER="system,load"
LG="-v $VALUE -k $KEY -n $KEYS -d zipf --set-on-miss"
SUMMARY=$OUT/seed-summary.csv
BLOCKS=$OUT/seed-blocks.csv
echo "system,load,mean_us,get_p50_us,get_p99_us,set_p50_us,set_p99_us,hit_ratio" >"$SUMMARY"
echo "system,block_bytes,blocks,write_block_ms,read_block_ms,nb_write_block_ms,nb_read_block_ms,chunks_missing" >"$BLOCKS"

# summarize SYSTEM LOAD: a summary row from $LAST_ROW, and mean_S_L set (dashes as underscores).
summarize() {
    v=$(echo "$1_$2" | tr '-' '_')
    mean=$(row_field "$LAST_ROW" mean_us)
    gets=$(row_field "$LAST_ROW" gets)
    hits=$(row_field "$LAST_ROW" get_hits)
    hit=$(awk -v h="$hits" -v g="$gets" 'BEGIN { printf "%.4f", g ? h / g : 0 }')
    echo "$1,$2,$mean,$(row_field "$LAST_ROW" get_p50_us),$(row_field "$LAST_ROW" get_p99_us),$(row_field "$LAST_ROW" set_p50_us),$(row_field "$LAST_ROW" set_p99_us),$hit" >>"$SUMMARY"
    eval "mean_$v=$mean"
    bench_log "$1 $2: mean $mean us, GET p50 $(row_field "$LAST_ROW" get_p50_us) p99 $(row_field "$LAST_ROW" get_p99_us) us, hit ratio $hit"
}

# latency_loads SYSTEM RUN: the two latency loads (read-only, 50:50) through RUN, run_memcached
# or run_nessie, each with its summary row.
latency_loads() {
    for mix in "read-only 1" "50-50 0.5"; do
        set -- "$1" "$2" $mix
        COLS="$1,$3"
        "$2" "$1" --no-preload $LG -g "$4"
        summarize "$1" "$3"
    done
}

# nessie_stat_sum NAME: NAME summed over the nodes of the running Nessie cluster.
nessie_stat_sum() {
    for sock in "$NESSIE_DIR"/node*.sock; do
        "$BUILD/tests/wire-client" -s "$sock" stats 2>/dev/null | sed -n "s/^STAT $1 \([0-9]*\).*/\1/p"
    done | awk '{ s += $1 } END { print s + 0 }'
}

# blocks SYSTEM CMD...: nb-overlap at both block sizes, through CMD (the shim's runner, with its
# environment); a row of seed-blocks.csv each, and blk_S_SIZE_{read,nbread} set (ms a block).
blocks() {
    sys=$1
    shift
    for mib in 2 16; do
        chunks=$((mib * 1048576 / CHUNK))
        nblocks=$((BLOCK_DATA / (mib * 1048576)))
        [ "$nblocks" -ge 1 ] || nblocks=1
        "$@" "$BUILD/bench/nb-overlap" --blocks "$nblocks" --chunks "$chunks" --chunk-bytes "$CHUNK" \
            --misses-ok "$SERVER" >"$OUT/nb-$sys-$mib.txt" 2>>"$OUT/loadgen.log" ||
            bench_die "nb-overlap failed against $sys (see $OUT/nb-$sys-$mib.txt)"
        # "  set: blocking A s, non-blocking B s ..." and "  get: blocking C s, non-blocking D s ..."
        row=$(awk -v n="$nblocks" '
            /^  set:/ { ws = $3; nws = $6 }
            /^  get:/ { rs = $3; nrs = $6 }
            /missing chunks/ { miss = $NF }
            END { printf "%.3f,%.3f,%.3f,%.3f,%d", ws * 1000 / n, rs * 1000 / n, nws * 1000 / n, nrs * 1000 / n, miss }' \
            "$OUT/nb-$sys-$mib.txt")
        echo "$sys,$((mib * 1048576)),$nblocks,$row" >>"$BLOCKS"
        v=$(echo "$sys" | tr '-' '_')
        eval "blk_${v}_${mib}_read=$(echo "$row" | cut -d, -f2) blk_${v}_${mib}_nbread=$(echo "$row" | cut -d, -f4)"
        bench_log "$sys blocks of $mib MiB: write/read $(echo "$row" | cut -d, -f1,2 | tr , /) ms a block blocking, $(echo "$row" | cut -d, -f3,4 | tr , /) ms non-blocking, $(echo "$row" | cut -d, -f5) chunks missing"
    done
}

# memcached with extstore.
BENCH_MC_MB=$MEM_MB
MC_EXTRA="-o ext_path=$FLASH_DIR/memcached.ext:$((NODES * FLASH_MB))m"
mc_start
bench_log "memcached-ext: storing $KEYS keys"
"$LOADGEN" -s 127.0.0.1:"$MC_PORT" -l fill -o 1 -w 0 $LG >/dev/null 2>>"$OUT/loadgen.log" ||
    bench_die "the fill failed against memcached (see $OUT/loadgen.log)"
latency_loads memcached-ext run_memcached
mc_stop
rm -f "$FLASH_DIR/memcached.ext"
# A fresh memcached for the blocks (the latency keys would crowd its memory); nb-overlap through
# the shim with no daemon to find (a socket path where none is; not strict): the fallback
# passes every call to libmemcached.
mc_start
SERVER=127.0.0.1:$MC_PORT
blocks memcached-ext env NESSIE_SOCKET="$FLASH_DIR/no-daemon.sock" NESSIE_STRICT=0 \
    "$BENCH_ROOT/tools/nessie-run"
mc_stop
rm -f "$FLASH_DIR/memcached.ext"

# Nessie with a flash log per node.
nessie_flash_start() {
    nessie_start $NODES cluster.evict=true "cluster.index_slots=$((8 * BLOCK_DATA / CHUNK + 4 * KEYS))" \
        "flash.path=$FLASH_DIR" "flash.bytes=$((FLASH_MB * 1048576))"
}
nessie_flash_start
bench_log "nessie-flash: storing $KEYS keys"
NESSIE_RUN_DIR=$NESSIE_DIR NESSIE_STRICT=1 "$BENCH_ROOT/tools/nessie-run" "$LOADGEN" -s 127.0.0.1:9 \
    -l fill -o 1 -w 0 $LG >/dev/null 2>>"$OUT/loadgen.log" || bench_die "the fill failed against Nessie (see $OUT/loadgen.log)"
latency_loads nessie-flash run_nessie
n_flash_hits=$(nessie_stat_sum get_extstore)
nessie_stop
nessie_flash_start
SERVER=127.0.0.1:9
blocks nessie-flash env NESSIE_RUN_DIR="$NESSIE_DIR" NESSIE_STRICT=1 "$BENCH_ROOT/tools/nessie-run"
n_block_demoted=$(nessie_stat_sum nessie_flash_demoted)
n_block_evicted=$(nessie_stat_sum evictions)
n_block_dropped=$(nessie_stat_sum nessie_flash_dropped)
nessie_stop

printf '%-14s %-10s %10s %10s %10s %10s %10s %7s\n' system load "mean us" "GET p50" "GET p99" "SET p50" "SET p99" hit
grep -v '^system' "$SUMMARY" | awk -F, '{ printf "%-14s %-10s %10.1f %10.1f %10.1f %10.1f %10.1f %7.4f\n", $1, $2, $3, $4, $5, $6, $7, $8 }'
printf '%-14s %8s %7s %12s %12s %12s %12s %8s\n' system block blocks "write ms" "read ms" "nb write ms" "nb read ms" missing
grep -v '^system' "$BLOCKS" | awk -F, '{ printf "%-14s %6d M %7d %12.2f %12.2f %12.2f %12.2f %8d\n", $1, $2 / 1048576, $3, $4, $5, $6, $7, $8 }'
echo "Nessie's GETs answered from flash in the latency loads: $n_flash_hits; in the blocks: values demoted $n_block_demoted, evicted (not demoted) $n_block_evicted, flash items dropped $n_block_dropped"
# shellcheck disable=SC2154  # mean_* and blk_* are set by summarize's and blocks' evals
{
    awk -v a="$mean_memcached_ext_read_only" -v b="$mean_nessie_flash_read_only" 'BEGIN { printf "ratio seed_get_mean_extstore_vs_flash %.2f\n", b ? a / b : 0 }'
    awk -v a="$mean_memcached_ext_50_50" -v b="$mean_nessie_flash_50_50" 'BEGIN { printf "ratio seed_mixed_mean_extstore_vs_flash %.2f\n", b ? a / b : 0 }'
    for mib in 2 16; do
        eval "mr=\$blk_memcached_ext_${mib}_read nr=\$blk_nessie_flash_${mib}_read nn=\$blk_nessie_flash_${mib}_nbread"
        awk -v a="$mr" -v b="$nn" -v s="${mib}m" 'BEGIN { printf "ratio seed_block_%s_read_extstore_vs_nb %.2f\n", s, b ? a / b : 0 }'
        awk -v a="$nr" -v b="$nn" -v s="${mib}m" 'BEGIN { printf "ratio seed_block_%s_read_block_vs_nb %.2f\n", s, b ? a / b : 0 }'
    done
} | tee -a "$OUT/seed-summary.txt"

if command -v gnuplot >/dev/null; then
    gnuplot <<EOF 2>>"$OUT/gnuplot.log" || bench_log "gnuplot failed (see $OUT/gnuplot.log)"
set terminal pngcairo size 1200,450
set output '$OUT/flash-seed.png'
set datafile separator ','
set multiplot layout 1,2 title "The seed's experiments on flash: Nessie vs memcached extstore ($MEM_MB MiB of memory)"
set style data histograms
set style histogram clustered
set style fill solid 0.8
set key top left
set title 'latency, data ${FACTOR}x memory, 32 KiB, Zipf (us)'
plot '< grep -v "^system" $SUMMARY | grep "^memcached"' using 3:xtic(2) title 'memcached-ext mean', \
     '< grep -v "^system" $SUMMARY | grep "^nessie"' using 3 title 'nessie-flash mean', \
     '< grep -v "^system" $SUMMARY | grep "^memcached"' using 5 title 'memcached-ext GET p99', \
     '< grep -v "^system" $SUMMARY | grep "^nessie"' using 5 title 'nessie-flash GET p99'
set title 'read a block of 256 KiB chunks (ms)'
plot '< grep -v "^system" $BLOCKS | grep "^memcached"' using 5:xtic(sprintf("%d MiB", \$2/1048576)) title 'memcached-ext blocking', \
     '< grep -v "^system" $BLOCKS | grep "^nessie"' using 5 title 'nessie-flash blocking', \
     '< grep -v "^system" $BLOCKS | grep "^nessie"' using 7 title 'nessie-flash iget'
unset multiplot
EOF
fi
bench_log "flash-seed done: $CSV $OUT/flash-seed.png"
