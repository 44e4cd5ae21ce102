#!/bin/sh
# tests/integration/bench-smoke.sh: every benchmark script (bench/*.sh) runs from this checkout
# and leaves its CSV and PNG files, at a tiny scale (runs of 0.2 s, short sweeps), into a
# temporary directory. Timings are not looked at (they are noise on a shared machine); what is
# checked is that each script finishes, that every loadgen run it made read back only the values
# it wrote (loadgen exits non-zero on a wrong value, and the scripts stop on that), that the CSV
# files have data rows, that the plots were drawn, and that bench/quick.sh ends with its
# `ratio NAME VALUE` lines, as do bench/modes.sh, bench/eviction.sh, bench/capacity.sh and
# bench/flash.sh (whose Nessie must have read from its flash logs) and bench/flash-seed.sh, and
# that the scripts of the paper's comparisons drew the server-driven mode beside the
# client-driven one (the home node's share of the traffic included), and that bench/failover.sh
# ends with its goal and ratio lines (skipped without etcd).
#
# Environment: BUILD (default build), SAN (skipped under sanitizers: the shim's clients would
# need the sanitizer runtime preloaded).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${SAN:-}" ]; then
    echo "bench-smoke: skipped under sanitizers"
    exit 0
fi
out=$(mktemp -d /tmp/nessie-bench-XXXXXX)
trap 'rm -rf "$out"' EXIT
export BENCH_OUT="$out" BENCH_SECONDS=0.2 BENCH_WARMUP=0.05 BUILD="${BUILD:-build}"
fail=0
check() { # script csv-file png-files...
    s=$1; csv=$2; shift 2
    rows=$(grep -v '^#' "$out/$s/$csv" 2>/dev/null | tail -n +2 | grep -c . || true)
    if [ "${rows:-0}" -lt 1 ]; then
        echo "bench-smoke: $s: no data rows in $csv"; fail=1
    fi
    for p in "$@"; do
        if [ ! -s "$out/$s/$p" ]; then echo "bench-smoke: $s: $p missing"; fail=1; fi
    done
}
run() { # script [env assignments...]
    s=$1; shift
    if ! env "$@" "$here/bench/$s.sh" >"$out/$s.out" 2>&1; then
        echo "bench-smoke: bench/$s.sh failed:"; tail -n 15 "$out/$s.out"; fail=1
    fi
}

run limits BENCH_SIZES="1024 131072"
check limits limits.csv limits.png
run quick BENCH_REPS=1
check quick quick.csv quick.png
for r in small_get_ops small_get_p99 large_get_goodput large_get_memcpy contended_goodput \
         low_load_cpu open_loop_capacity threads4_ops; do
    grep -Eq "^ratio $r [0-9.]+$" "$out/quick.out" || { echo "bench-smoke: quick: no 'ratio $r' line"; fail=1; }
done
run vs-memcached BENCH_THREADS_LIST=1 BENCH_MEMCSLAP_OPS=500
check vs-memcached vs-memcached.csv vs-memcached.png memcslap.png
check vs-memcached memcslap.csv
# modes: each script's sweep of all modes made short (two; the modes script runs all four)
has() { # script file pattern what
    grep -Eq "$3" "$out/$1/$2" 2>/dev/null || { echo "bench-smoke: $1: no $4 in $2"; fail=1; }
}
run value-size BENCH_SIZES="1024 65536" BENCH_RATIOS="0.5 0.99" BENCH_DISTS="uniform zipf" BENCH_MODES="cd sd"
check value-size value-size.csv value-size-uniform.png value-size-zipf.png value-size-p50.png
has value-size value-size.csv '^nessie-sd,' "sd rows"
grep -Eq "^crossover uniform 0.50 GETs: cd above sd (from|at no size)" "$out/value-size.out" || { echo "bench-smoke: value-size: no crossover line"; fail=1; }
run fabric-ops BENCH_WORKLOADS="0.5:uniform" BENCH_VALUE=4096 BENCH_MODES="cd sd"
check fabric-ops fabric-ops.csv fabric-ops.png fabric-bytes.png
has fabric-ops fabric-ops.csv '^0.5:uniform,sd,get@home,ops,' "home node's share of sd GETs"
has fabric-ops fabric-ops.csv '^0.5:uniform,cd,put,ops,' "cd PUTs"
run breakdown BENCH_RATIOS=0.5 BENCH_VALUE=4096
check breakdown breakdown-summary.csv breakdown.png
run contention BENCH_MAX_BURNERS=1 BENCH_VALUE=4096 BENCH_MODES="cd sd"
check contention contention.csv contention.png
grep -Eq "^ratio contended_cd_vs_sd [0-9.]+ " "$out/contention.out" || { echo "bench-smoke: contention: no ratio line"; fail=1; }
run cpu-cost BENCH_LOADS="10 100" BENCH_VALUE=4096 BENCH_MODES="cd sd"
check cpu-cost cpu-cost.csv cpu-cost.png
for r in low_load_cpu_sd_vs_cd low_load_cpu_sdspin_vs_cd; do
    grep -Eq "^ratio $r [0-9.]+$" "$out/cpu-cost.out" || { echo "bench-smoke: cpu-cost: no 'ratio $r' line"; fail=1; }
done
run modes BENCH_KEYS=500 BENCH_LARGE_KEYS=50 BENCH_BURNERS=1 BENCH_REPS=2
check modes modes.csv modes.png
has modes modes.csv "^mixed,auto,2," "second repetition of mode auto"
for r in contended_cd_vs_sd large_put_cd_vs_sd low_load_cpu_sd_vs_cd small_sd_vs_cd auto_vs_best mixed_auto_vs_best; do
    grep -Eq "^ratio $r [0-9.]+$" "$out/modes.out" || { echo "bench-smoke: modes: no 'ratio $r' line"; fail=1; }
done
# Mode auto's shipped share, per scenario, as a percentage of its calls.
grep -Eq '^auto shipped: small [0-9]+ of [0-9]+ \([0-9.]+ %\), base ' "$out/modes.out" ||
    { echo "bench-smoke: modes: no 'auto shipped:' line per scenario"; fail=1; }
run eviction BENCH_EVICT_DATA_BYTES=2097152 BENCH_EVICT_SECONDS=2
check eviction eviction.csv eviction.png
for r in fill_ops set_empty_ops full_vs_empty_sets zipf_hit uniform_hit get_full_vs_empty; do
    grep -Eq "^ratio $r [0-9.]+$" "$out/eviction.out" || { echo "bench-smoke: eviction: no 'ratio $r' line"; fail=1; }
done
grep -Eq "^fill_errors [0-9]+$" "$out/eviction.out" || { echo "bench-smoke: eviction: no fill_errors line"; fail=1; }
# capacity takes options, not environment: run by hand.
"$here/bench/capacity.sh" --quick --data-mib 2 --sets 5000 >"$out/capacity.out" 2>&1 ||
    { echo "bench-smoke: bench/capacity.sh failed:"; tail -n 15 "$out/capacity.out"; fail=1; }
check capacity capacity.csv capacity.png capacity-items.csv
for r in items_held zipf_hit; do
    grep -Eq "^ratio $r [0-9.]+$" "$out/capacity.out" || { echo "bench-smoke: capacity: no 'ratio $r' line"; fail=1; }
done
# loadgen --merge-hist adds the histograms of loadgens run apart (bench/flash.sh's clients, one
# per node): 98 GETs in bin 10 (10 ns) and 2 in bin 50 (50 ns) have p50 0.01 us and p99 0.05.
lg_magic=$("$here/$BUILD/bench/loadgen" -s 127.0.0.1:9 --hist "$out/h0" -o 1 --no-preload -w 0 \
    >/dev/null 2>&1; head -n 1 "$out/h0" 2>/dev/null)
{ echo "$lg_magic"; echo "10 98"; } >"$out/h1"
{ echo "$lg_magic"; echo "50 2"; } >"$out/h2"
merged=$("$here/$BUILD/bench/loadgen" --merge-hist "$out/h1" "$out/h2" | sed -n 2p)
[ "$merged" = "100,0.01,0.05" ] || { echo "bench-smoke: loadgen --merge-hist printed '$merged', not 100,0.01,0.05"; fail=1; }
echo "garbage" >"$out/h2"
if "$here/$BUILD/bench/loadgen" --merge-hist "$out/h1" "$out/h2" >/dev/null 2>&1; then
    echo "bench-smoke: loadgen --merge-hist took a file that is not a histogram"; fail=1
fi
# flash: 4 MiB a node and 0.5 s a load (memcached's extstore writes nothing at that size, too
# little for its write buffers; every system and load must still run), its files in $out.
run flash BENCH_FLASH_DATA_BYTES=4194304 BENCH_FLASH_SECONDS=0.5 BENCH_FLASH_FILL_MB=16 BENCH_FLASH_DIR="$out"
check flash flash.csv flash.png flash-summary.csv
for r in flash_hit_vs_extstore flash_hit_vs_all_memory get_p99_extstore_vs_flash uniform_get_p99_extstore_vs_flash; do
    grep -Eq "^ratio $r [0-9.]+$" "$out/flash.out" || { echo "bench-smoke: flash: no 'ratio $r' line"; fail=1; }
done
for l in flash_ram_per_item write_amplification flash_fill_pct flash_ram_per_item_full write_amplification_full; do
    grep -Eq "^$l [0-9.]+$" "$out/flash.out" || { echo "bench-smoke: flash: no '$l' line"; fail=1; }
done
# Nessie's uniform load read from its logs (the flash column: GETs served from flash).
awk -F, '$1 == "nessie-flash" && $2 == "uniform" && $7 > 0 { ok = 1 } END { exit !ok }' \
    "$out/flash/flash-summary.csv" 2>/dev/null || { echo "bench-smoke: flash: Nessie read nothing from flash"; fail=1; }
# flash-seed: the seed paper's experiments at 4 MiB a node (its blocks, 4x that, on flash):
# both systems, both loads, both block sizes, every ratio line.
run flash-seed BENCH_FLASH_DATA_BYTES=4194304 BENCH_FLASH_SECONDS=0.5 BENCH_FLASH_DIR="$out"
check flash-seed flash-seed.csv flash-seed.png seed-summary.csv seed-blocks.csv
for r in seed_get_mean_extstore_vs_flash seed_mixed_mean_extstore_vs_flash \
    seed_block_2m_read_extstore_vs_nb seed_block_2m_read_block_vs_nb \
    seed_block_16m_read_extstore_vs_nb seed_block_16m_read_block_vs_nb; do
    grep -Eq "^ratio $r [0-9.]+$" "$out/flash-seed.out" || { echo "bench-smoke: flash-seed: no 'ratio $r' line"; fail=1; }
done
[ "$(grep -c '^nessie-flash,' "$out/flash-seed/seed-blocks.csv" 2>/dev/null)" = 2 ] ||
    { echo "bench-smoke: flash-seed: Nessie's block rows missing"; fail=1; }
# failover: node 2 killed 0.3 s in, down 4 s (longer than Nessie's detection, ~3 s, so the
# restarted node finds itself fenced, as in the full run), no libmemcached-defaults run. It
# needs etcd for Nessie's views: without one it is skipped, as members.sh is.
if command -v etcd >/dev/null 2>&1; then
    run failover FAILOVER_SECONDS=4.6 FAILOVER_KILL_AT=0.3 FAILOVER_DOWN=4 FAILOVER_DEFAULTS=0 BENCH_WARMUP=0.05
    check failover failover.csv failover.png timeline-nessie.csv timeline-memcached-removal.csv
    for r in outage_answered outage_slowest run_calls; do
        grep -Eq "^ratio $r [0-9.]+$" "$out/failover.out" || { echo "bench-smoke: failover: no 'ratio $r' line"; fail=1; }
    done
    for g in "answered during the outage" "every write acknowledged" "no call slower than detection"; do
        grep -q "^goal .*$g" "$out/failover.out" || { echo "bench-smoke: failover: no goal line '$g'"; fail=1; }
    done
else
    echo "bench-smoke: failover skipped (no etcd; tools/install-deps)"
fi
# No daemon or memcached may outlive its script.
if pgrep -f "$out/.*/run[^/]*/nessie.conf" >/dev/null; then echo "bench-smoke: a daemon was left running"; fail=1; fi
[ $fail = 0 ] && echo "bench-smoke: passed" || { echo "bench-smoke: FAILED"; exit 1; }
