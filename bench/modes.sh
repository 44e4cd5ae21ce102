#!/bin/sh
# bench/modes.sh - `make bench-modes`: the paper's comparisons of the client-driven design (cd)
# with the server-driven (sd, NessieSD) and hybrid (hy, NessieHY) ones (section 6), and the
# selector between them (auto), with memcached beside them, in one run and with the same loadgen
# binary, in about twelve minutes (five repetitions).
#
# A 3-node cluster (shm fabric) restarted in each mode; one client thread through the shim on
# node 0, so two keys in three live on a peer: cd reaches them one-sided, sd ships the operation
# to the key's home node (its SD server polls adaptively, the daemon default), hy ships writes.
# Scenarios, each closed loop unless said: small (256 B, 90 % GETs, 10000 keys), base (16 KiB, 90 %
# GETs), low (16 KiB at LOW_PCT % of memcached's base ops/s, open loop: CPU per op), contended
# (16 KiB with BURNERS CPU burners), large_put (128 KiB, 50 % GETs, 1000 keys), mixed (half the
# keys 256 B, half 64 KiB, 90 % GETs: no one fixed mode is best for both). Prints the ratio lines
# of issue 16 (auto_vs_best: the lowest, over small, base, contended and large_put, of auto's
# goodput over the best fixed mode's; mixed_auto_vs_best: the same in the mixed scenario, above
# 1 where choosing per operation beats every fixed mode), how many calls auto shipped in each
# scenario, and writes modes.csv and modes.png.
# Each of Nessie's modes runs every scenario BENCH_REPS times (5), the modes taking turns on each
# group of scenarios that shares a fresh system (small; base, low and contended; large_put;
# mixed), forward then backward (cd sd hy auto, auto hy sd cd, ...), so the runs a ratio compares
# are seconds apart, not a whole mode's block of scenarios (about 40 s) or more: the machine
# drifts over a run (bench-modes at d223e8e, mixed: cd 5140 4150 4293 3613 3591 MB/s in its
# repetitions, auto 3547 3455 3514 4023 4643, each mode's block minutes from the other's).
# Every figure is the median of its runs:
# on a 2-core machine running 3 daemons and the client, runs of one mode differ by 2x and more
# (mixed, cd: 1827 to 4520 MB/s; contended, cd: 350 to 1627), auto and cd (the same code path
# here) alike. One run of each, minutes apart, gave auto_vs_best from 0.68 to 1.01 on a quiet
# machine; medians of 3 runs 0.92 and 0.82; the best of 5 let one lucky run decide (contended
# cd 1627 against 350..1204 in its other four). memcached runs once: no ratio compares with it.
#
# Usage: bench/modes.sh [--help]   (environment: BENCH_SECONDS, BENCH_LOW_PCT, BENCH_BURNERS,
#        BENCH_KEYS (10000), BENCH_LARGE_KEYS (1000), BENCH_REPS (5))
set -eu
case ${1:-} in -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

LOW_PCT=${BENCH_LOW_PCT:-20}
BURNERS_N=${BENCH_BURNERS:-2}
KEYS=${BENCH_KEYS:-10000}
LARGE_KEYS=${BENCH_LARGE_KEYS:-1000}
REPS=${BENCH_REPS:-5}
MODES="cd sd hy auto"
bench_begin modes "3-node Nessie (shim, shm fabric) in modes $MODES vs memcached; 1 client thread on node 0; uniform keys; small 256 B 90% GETs $KEYS keys; base 16 KiB 90% GETs; low 16 KiB open loop at $LOW_PCT % of memcached's base ops/s; contended 16 KiB with $BURNERS_N CPU burners (yes >/dev/null); large_put 128 KiB 50% GETs $LARGE_KEYS keys; mixed 256 B and 64 KiB (half the keys each) 90% GETs $LARGE_KEYS keys; $REPS repetitions of each mode, medians; $(nproc) cpus"
trap 'burners_stop; bench_cleanup' EXIT
rm -f "$OUT/auto_share.txt"
COLS_HEADER="scenario,system,rep"

# Mode auto's choices so far, summed over the cluster's nodes: "CD SD" (stats nessie_sd_auto_*).
auto_counts() {
    "$BENCH_ROOT/tools/nessie-stat" --dir "$NESSIE_DIR" --raw 2>/dev/null |
        awk '$1 == "nessie_sd_auto_cd" { c += $2 } $1 == "nessie_sd_auto_sd" { s += $2 }
             END { print c + 0, s + 0 }'
}

# run SYSTEM SCENARIO [LOADGEN ARGS...]: one row, through memcached or the cluster as it runs.
# For auto, also how many of its calls it shipped in that scenario ($OUT/auto_share.txt).
run() {
    sys=$1 sc=$2
    shift 2
    COLS="$sc,$sys,$REP"
    bench_log "$sc: $sys"
    if [ "$sys" = memcached ]; then run_memcached "$sys" "$@"; else run_nessie "$sys" "$@"; fi
    if [ "$sys" = auto ]; then
        set -- $(auto_counts)
        dc=$(($1 - AUTO_CD)) ds=$(($2 - AUTO_SD))
        AUTO_CD=$1 AUTO_SD=$2
        echo "$sc $ds $((dc + ds))" >>"$OUT/auto_share.txt"
        bench_log "$sc: auto shipped $ds of $((dc + ds)) calls"
    fi
}
AUTO_CD=0 AUTO_SD=0

# A fresh system before each value size: Nessie's slab pages stay with the size class that took
# them, and one client's writes in mode cd all land in its own node's region, so 128 KiB PUTs
# after the 16 KiB scenarios ran at a third of their speed on a fresh cluster, waiting for pages
# to be drained (a cost of changing sizes, not of the mode; the paper ran each on its own).
fresh() {
    if [ "$1" = memcached ]; then
        mc_stop
        mc_start
    else
        nessie_stop
        nessie_start 3 "cluster.mode=$1"
        AUTO_CD=0 AUTO_SD=0 # a new cluster counts from zero
    fi
}

# The scenarios in groups, each group on a fresh system (Nessie's slab pages stay with the size
# class that took them: see fresh); the low-load rate comes from memcached's base run, which
# goes first. Usage: group SYSTEM GROUP
group() {
    s=$1
    fresh "$s"
    case $2 in
    small)
        run "$s" small -v 256 -n "$KEYS" -g 0.9
        ;;
    base)
        run "$s" base -v 16384 -n "$KEYS" -g 0.9
        [ -n "${LOW_RATE:-}" ] || LOW_RATE=$(row_field "$LAST_ROW" ops_per_s | awk -v p="$LOW_PCT" '{ printf "%.0f", $1 * p / 100 }')
        run "$s" low -v 16384 -n "$KEYS" -g 0.9 -r "$LOW_RATE" --no-preload
        burners_add "$BURNERS_N"
        run "$s" contended -v 16384 -n "$KEYS" -g 0.9 --no-preload
        burners_stop
        ;;
    large_put)
        run "$s" large_put -v 131072 -n "$LARGE_KEYS" -g 0.5
        ;;
    mixed)
        run "$s" mixed --value-sizes 256,65536 -n "$LARGE_KEYS" -g 0.9
        ;;
    esac
}
GROUPS_ALL="small base large_put mixed"

REP=1
for g in $GROUPS_ALL; do group memcached "$g"; done
mc_stop
BACKWARD=$(echo "$MODES" | awk '{ for (i = NF; i >= 1; i--) printf "%s%s", $i, (i > 1 ? " " : "") }')
turn=0
for REP in $(seq 1 "$REPS"); do
    for g in $GROUPS_ALL; do
        order=$MODES
        [ $((turn % 2)) -eq 0 ] || order=$BACKWARD
        turn=$((turn + 1))
        for m in $order; do
            bench_log "repetition $REP of $REPS: $g, mode $m"
            group "$m" "$g"
        done
    done
done
nessie_stop
bench_cleanup

sc=$(col scenario); sy=$(col system); gp=$(col goodput_mb_s); cpu=$(col cpu_us_per_op)
awk -F, -v sc="$sc" -v sy="$sy" -v gp="$gp" -v cpu="$cpu" -v lowpct="$LOW_PCT" -v rate="$LOW_RATE" \
    -v pivot="$OUT/pivot.csv" "$AWK_MEDIAN"'
/^#/ { next }
!hdr { hdr = 1; next }
{ gl[$sc, $sy] = gl[$sc, $sy] " " $gp; cl[$sc, $sy] = cl[$sc, $sy] " " $cpu }
function div(a, b) { return b > 0 ? a / b : 0 }
END {
    for (k in gl) g[k] = median(gl[k])
    for (k in cl) c[k] = median(cl[k])
    printf "%-12s %10s %10s %10s %10s %10s   (goodput MB/s; low: CPU us per op at %s ops/s, %s %% load)\n", "scenario", "memcached", "cd", "sd", "hy", "auto", rate, lowpct
    n = split("small base contended large_put mixed", s, " ")
    worst = -1
    for (i = 1; i <= n; i++) {
        printf "%-12s %10.1f %10.1f %10.1f %10.1f %10.1f\n", s[i], g[s[i], "memcached"], g[s[i], "cd"], g[s[i], "sd"], g[s[i], "hy"], g[s[i], "auto"]
        best = g[s[i], "cd"]
        if (g[s[i], "sd"] > best) best = g[s[i], "sd"]
        if (g[s[i], "hy"] > best) best = g[s[i], "hy"]
        r = div(g[s[i], "auto"], best)
        if (s[i] == "mixed")
            mixed = r
        else if (worst < 0 || r < worst)
            worst = r
    }
    printf "%-12s %10.1f %10.1f %10.1f %10.1f %10.1f\n", "low (CPU)", c["low", "memcached"], c["low", "cd"], c["low", "sd"], c["low", "hy"], c["low", "auto"]
    # The table the plot draws: a row per scenario, goodput then CPU per op of each system.
    print "scenario,memcached,cd,sd,hy,auto,cpu_memcached,cpu_cd,cpu_sd,cpu_hy,cpu_auto" > pivot
    m = split("small base low contended large_put mixed", t, " ")
    for (i = 1; i <= m; i++)
        printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", t[i], g[t[i], "memcached"], g[t[i], "cd"], g[t[i], "sd"], g[t[i], "hy"], g[t[i], "auto"], c[t[i], "memcached"], c[t[i], "cd"], c[t[i], "sd"], c[t[i], "hy"], c[t[i], "auto"] > pivot
    printf "ratio contended_cd_vs_sd %.2f\n", div(g["contended", "cd"], g["contended", "sd"])
    printf "ratio large_put_cd_vs_sd %.2f\n", div(g["large_put", "cd"], g["large_put", "sd"])
    printf "ratio low_load_cpu_sd_vs_cd %.2f\n", div(c["low", "sd"], c["low", "cd"])
    printf "ratio small_sd_vs_cd %.2f\n", div(g["small", "sd"], g["small", "cd"])
    printf "ratio auto_vs_best %.2f\n", worst
    printf "ratio mixed_auto_vs_best %.2f\n", mixed
}' "$CSV" | tee "$OUT/summary.txt"
# Where auto chose the shipped way (it must where that way is faster), over all repetitions.
[ ! -f "$OUT/auto_share.txt" ] ||
    awk '!($1 in sd) { order[++n] = $1 } { sd[$1] += $2; all[$1] += $3 }
         END { for (i = 1; i <= n; i++) printf "%s%s %s of %s (%.4f %%)", (i > 1 ? ", " : "auto shipped: "),
                   order[i], sd[order[i]], all[order[i]], (all[order[i]] > 0 ? 100 * sd[order[i]] / all[order[i]] : 0)
               if (n) print "" }' "$OUT/auto_share.txt" |
        tee -a "$OUT/summary.txt"

plot modes <<EOF2
set multiplot layout 1,2 title 'cd, sd, hy, auto and memcached: 1 client thread, 3 nodes, $(nproc) cpus (paper figures 4, 5, 14)'
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8 border -1
set boxwidth 0.9; set key top left
set title 'goodput (MB/s, log scale; low: open loop at $LOW_PCT % load)'; set logscale y; set ylabel 'MB/s'
plot for [i=2:6] '$OUT/pivot.csv' using i:xtic(1) title columnheader(i)
unset logscale y
set title 'CPU us per operation, all processes'; set ylabel 'us'
plot for [i=7:11] '$OUT/pivot.csv' using i:xtic(1) title columnheader(i)
unset multiplot
EOF2
bench_end
