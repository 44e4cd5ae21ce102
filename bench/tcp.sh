#!/bin/sh
# bench/tcp.sh - the memcached protocol on TCP (issue 32): one load generator binary, talking
# to memcached's port and to a Nessie daemon's memcached port (no shim: libmemcached over TCP,
# as any client that does not use the shim reaches Nessie). Both pay the kernel's TCP path; the
# engine behind it differs.
#
# Cases, each run on memcached then on Nessie, repeated BENCH_REPS times (3), medians reported:
#   closed loop, 90 % GETs, uniform keys: 1 and 4 connections (loadgen threads, one connection
#   each) x 1 KiB (10000 keys) and 128 KiB (1000 keys) values;
#   open loop, 1 connection, 1 KiB, BENCH_TCP_RATE ops/s offered (2000; 5000 saturated both
#   servers on a 2-core machine): GET p99 and CPU per op at a low load;
#   contended: 4 connections, 1 KiB, with BENCH_TCP_BURNERS CPU burners (2) competing.
# The protocol is the text one unless BENCH_TCP_BINARY=1 (loadgen -b: memcached's binary).
# Servers: memcached with its defaults (4 threads, -m BENCH_MC_MB); one Nessie node with its
# defaults ([reception] memcached_threads 4, as memcached's -t). Ratio lines: `ratio tcp_<case>_ops` (Nessie /
# memcached ops/s) and `ratio tcp_<case>_p99` (memcached / Nessie GET p99), >= 1 where Nessie
# does better; `ratio tcp_open_cpu` (memcached / Nessie CPU us per op, clients and server).
# Writes tcp.csv and tcp.png.
#
# Usage: bench/tcp.sh [--help]    (environment: BENCH_SECONDS, BENCH_REPS, BENCH_TCP_RATE,
#   BENCH_TCP_BURNERS, BENCH_TCP_BINARY)
set -eu
case ${1:-} in -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
. "$(dirname "$0")/lib.sh"

REPS=${BENCH_REPS:-3}
RATE=${BENCH_TCP_RATE:-2000}
NBURN=${BENCH_TCP_BURNERS:-2}
PROTO=""
PROTO_NAME=text
if [ "${BENCH_TCP_BINARY:-0}" = 1 ]; then PROTO=-b; PROTO_NAME=binary; fi
bench_begin tcp "memcached port, $PROTO_NAME protocol: memcached (defaults) vs 1 Nessie node (defaults), loadgen over TCP; closed loop 1 and 4 connections x 1 KiB (10000 keys) and 128 KiB (1000 keys), 90% GETs, uniform; open loop $RATE ops/s 1 KiB; 4 connections 1 KiB with $NBURN CPU burners; $REPS repetitions"
trap 'burners_stop; bench_cleanup' EXIT

mc_start
# The Nessie node's memcached port: the next free one after memcached's.
NPORT=$((MC_PORT + 1))
while memcstat --servers=127.0.0.1:$NPORT >/dev/null 2>&1; do NPORT=$((NPORT + 1)); done
nessie_start 1 "reception.memcached_port=$NPORT"
NPID=$(cat "$NESSIE_DIR/node0.pid")
mc_wait "$NPORT" "$NESSIE_DIR/node0.log"

# One run against port $2 (LABEL PORT WATCH [LOADGEN ARGS...]); appends its row.
run_tcp() {
    rt_label=$1 rt_port=$2 rt_watch=$3
    shift 3
    # shellcheck disable=SC2086  # $PROTO is empty or one option
    row=$("$LOADGEN" -s 127.0.0.1:"$rt_port" $PROTO -l "$rt_label" -D "$BENCH_SECONDS" \
        -w "$BENCH_WARMUP" -W "$rt_watch" "$@" 2>>"$OUT/loadgen.log") ||
        bench_die "loadgen failed against $rt_label (see $OUT/loadgen.log)"
    _bench_row "$row"
    _bench_errors "$row" "$rt_label"
}

# Both systems on one case (CASE [LOADGEN ARGS...]), memcached first, then Nessie.
pair() {
    COLS="$rep,$1"
    shift
    run_tcp memcached "$MC_PORT" "memcached:$MC_PID" "$@"
    run_tcp nessie "$NPORT" "node0:$NPID" "$@"
}

COLS_HEADER="rep,case"
rep=1
while [ $rep -le "$REPS" ]; do
    for c in 1 4; do
        bench_log "rep $rep/$REPS: $c connection(s), 1 KiB and 128 KiB: memcached, nessie"
        pair "c${c}_1k" -v 1024 -n 10000 -g 0.9 -t $c
        pair "c${c}_128k" -v 131072 -n 1000 -g 0.9 -t $c
    done
    bench_log "rep $rep/$REPS: open loop, $RATE ops/s, 1 KiB"
    pair open -v 1024 -n 10000 -g 0.9 -t 1 -r "$RATE"
    bench_log "rep $rep/$REPS: 4 connections, 1 KiB, $NBURN CPU burners"
    burners_add "$NBURN"
    pair contended -v 1024 -n 10000 -g 0.9 -t 4
    burners_stop
    rep=$((rep + 1))
done
bench_cleanup

# Medians per system and case; each ratio is the median of the repetitions' own ratios (the two
# systems of one repetition ran back to back).
awk -F, "$AWK_MEDIAN"'
function div(a, b) { return b > 0 ? a / b : 0 }
/^#/ { next }
!hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
{
    cs = $c["case"]; sys = $c["label"]; r = $c["rep"]
    if (!(cs in seen)) { seen[cs] = 1; order[++ncase] = cs }
    split("ops_per_s get_p50_us get_p99_us cpu_us_per_op errors", names, " ")
    for (i in names) { m[cs, sys, names[i]] = m[cs, sys, names[i]] " " $c[names[i]]; v[r, cs, sys, names[i]] = $c[names[i]] }
    reps[r] = 1
}
END {
    printf "\nbench/tcp: memcached vs one Nessie node, each on its memcached port, one loadgen binary over TCP\n"
    printf "(medians of the repetitions; ratios the medians of per-repetition ratios, >= 1: Nessie better)\n\n"
    printf "%-11s %11s %11s %7s   %9s %9s   %9s %9s %7s   %8s %8s\n", "case", "mc ops/s", "nessie", "ratio", "mc p50", "nessie", "mc p99", "nessie", "ratio", "mc cpu", "nessie"
    for (k = 1; k <= ncase; k++) {
        cs = order[k]; ro = ""; rp = ""; rc = ""
        for (r in reps) {
            ro = ro " " div(v[r, cs, "nessie", "ops_per_s"], v[r, cs, "memcached", "ops_per_s"])
            rp = rp " " div(v[r, cs, "memcached", "get_p99_us"], v[r, cs, "nessie", "get_p99_us"])
            rc = rc " " div(v[r, cs, "memcached", "cpu_us_per_op"], v[r, cs, "nessie", "cpu_us_per_op"])
        }
        ops[cs] = median(ro); p99[cs] = median(rp); cpu[cs] = median(rc)
        printf "%-11s %11.0f %11.0f %6.2fx   %9.1f %9.1f   %9.1f %9.1f %6.2fx   %8.2f %8.2f\n", cs,
            median(m[cs, "memcached", "ops_per_s"]), median(m[cs, "nessie", "ops_per_s"]), ops[cs],
            median(m[cs, "memcached", "get_p50_us"]), median(m[cs, "nessie", "get_p50_us"]),
            median(m[cs, "memcached", "get_p99_us"]), median(m[cs, "nessie", "get_p99_us"]), p99[cs],
            median(m[cs, "memcached", "cpu_us_per_op"]), median(m[cs, "nessie", "cpu_us_per_op"])
        err = median(m[cs, "memcached", "errors"]) + median(m[cs, "nessie", "errors"])
        if (err > 0) printf "  (%s: calls refused in a run: see the CSV errors column)\n", cs
    }
    printf "\n"
    for (k = 1; k <= ncase; k++) {
        cs = order[k]
        if (cs != "open") printf "ratio tcp_%s_ops %.2f\n", cs, ops[cs]
        printf "ratio tcp_%s_p99 %.2f\n", cs, p99[cs]
    }
    printf "ratio tcp_open_cpu %.2f\n", cpu["open"]
}' "$CSV" | tee "$OUT/summary.txt"

cs=$(col case); lab=$(col label); ops=$(col ops_per_s); p99=$(col get_p99_us)
plot tcp <<EOF2
set multiplot layout 1,2 title 'memcached protocol on TCP ($PROTO_NAME): memcached vs one Nessie node, same loadgen (all repetitions)'
set style data points; set xtics rotate by -30; set logscale y
set title 'ops/s (closed loop; open: offered $RATE)'
plot '$CSV' using 0:((strcol($lab) eq 'memcached') ? \$$ops : NaN):xtic(strcol($cs)) title 'memcached' pt 5, \
     '' using 0:((strcol($lab) eq 'nessie') ? \$$ops : NaN) title 'nessie' pt 7
set title 'GET p99 (us)'
plot '$CSV' using 0:((strcol($lab) eq 'memcached') ? \$$p99 : NaN):xtic(strcol($cs)) title 'memcached' pt 5, \
     '' using 0:((strcol($lab) eq 'nessie') ? \$$p99 : NaN) title 'nessie' pt 7
unset multiplot
EOF2
bench_end
