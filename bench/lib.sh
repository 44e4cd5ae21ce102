# bench/lib.sh - what every benchmark script shares; sourced, never run.
#
# A script calls bench_begin NAME "parameters", starts the systems it compares (mc_start,
# nessie_start), runs the load generator through run_memcached / run_nessie (each appends one CSV
# row to $CSV, prefixed with the script's own columns from $COLS), plots with gnuplot, and ends
# with bench_end. Everything it leaves is in bench/results/NAME/: NAME.csv (with a '#' header
# recording the machine, the commit and the parameters), *.png, and the daemons' logs.
#
# Knobs (environment): BENCH_SECONDS (measured seconds per run), BENCH_WARMUP, BENCH_OUT (results
# root, default bench/results), BUILD (default build), BENCH_NESSIE_SET (settings added to every
# Nessie cluster a script starts, SECTION.KEY=VALUE separated by spaces: an A/B run of one switch,
# e.g. BENCH_NESSIE_SET=reception.sd_help=false). POSIX sh: dash runs it.

BENCH_ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$BENCH_ROOT/build}
case $BUILD in /*) ;; *) BUILD=$BENCH_ROOT/$BUILD ;; esac
LOADGEN=$BUILD/bench/loadgen
# Its CSV header, read once (row_field and _bench_row need it for every run).
LOADGEN_HEADER=$("$LOADGEN" --header-only 2>/dev/null || true)
BENCH_SECONDS=${BENCH_SECONDS:-3}
BENCH_WARMUP=${BENCH_WARMUP:-1}
# Nessie's data region per node for benchmarks: large values at 50 % PUTs keep an expiration
# period of replaced entries waiting for expiry, on top of the live ones (1 GiB: room for the
# paper's 1 s with BENCH_EXPIRATION_MS=1000).
BENCH_DATA_BYTES=${BENCH_DATA_BYTES:-1073741824}
# memcached's memory, MiB, and its largest item (1 MiB values need more than its 1 MiB default).
BENCH_MC_MB=${BENCH_MC_MB:-4096}
# Nessie's largest item (its slab pages are this big, at least 64 KiB), and the expiration period
# (empty: the config's default, 100 ms; the paper's is 1000).
BENCH_MAX_ITEM=${BENCH_MAX_ITEM:-2097152}
BENCH_EXPIRATION_MS=${BENCH_EXPIRATION_MS:-}

MC_PID=""
MC_PORT=""
NESSIE_DIR=""
NESSIE_PIDS=""
BENCH_T0=$(date +%s)
COLS=""
COLS_HEADER=""

# An awk function for scripts' summaries, prepended to their awk programs: median(list) of a
# space-separated list of numbers (0 for an empty one).
AWK_MEDIAN='
function median(list,    n, a, i, j, t) {
    n = split(list, a, " ")
    if (n == 0) return 0
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}'

bench_die() {
    echo "bench: $*" >&2
    exit 1
}

bench_log() {
    printf '[%4ds] %s\n' $(( $(date +%s) - BENCH_T0 )) "$*" >&2
}

# The experiment's directory and CSV; a header records where and how the numbers were made.
# Usage: bench_begin NAME "PARAMETERS" (any text: the exact parameters of the run).
bench_begin() {
    BENCH_NAME=$1
    OUT=${BENCH_OUT:-$BENCH_ROOT/bench/results}/$1
    mkdir -p "$OUT"
    CSV=$OUT/$1.csv
    rm -f "$OUT"/*.log "$OUT"/*.png "$OUT"/*.csv "$OUT"/*.tmp
    RUN=$OUT/run
    [ -x "$LOADGEN" ] || bench_die "$LOADGEN missing: run make first"
    [ -f "$BUILD/libdeception.so" ] || bench_die "$BUILD/libdeception.so missing: run make first"
    command -v memcached >/dev/null || bench_die "memcached missing: run tools/install-deps"
    commit=$(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [ -n "$(git -C "$BENCH_ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
        commit="$commit (with uncommitted changes)"
    fi
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
    mem=$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
    {
        echo "# experiment: $1"
        echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
        echo "# machine: $(uname -srm), $(nproc) cpus ($cpu), $mem"
        echo "# commit: $commit"
        echo "# memcached: $(memcached -V 2>/dev/null), libmemcached $(pkg-config --modversion libmemcached 2>/dev/null)"
        echo "# parameters: $2; $BENCH_SECONDS s measured after $BENCH_WARMUP s warm-up per run"
        echo "# command: $0${BENCH_ARGS:+ $BENCH_ARGS}"
        [ -z "${BENCH_NESSIE_SET:-}" ] || echo "# every Nessie cluster also set: $BENCH_NESSIE_SET"
    } >"$CSV"
    BENCH_HEADER_DONE=0
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
    bench_log "$1: results in $OUT"
}

# CPU burners (`yes >/dev/null`, each keeps a core busy if it can), competing at the same
# priority: burners_add N starts N more (and lets them get going), burners_stop kills them all.
# Scripts that start burners stop them in their EXIT trap too.
BURNERS=""
burners_add() {
    _n=$1
    while [ "$_n" -gt 0 ]; do
        yes >/dev/null &
        BURNERS="$BURNERS $!"
        _n=$((_n - 1))
    done
    sleep 0.2
}
burners_stop() {
    for _p in $BURNERS; do kill -KILL "$_p" 2>/dev/null || true; done
    for _p in $BURNERS; do wait "$_p" 2>/dev/null || true; done
    BURNERS=""
}

# Stop whatever is still running (also on error or ^C).
bench_cleanup() {
    mc_stop
    nessie_stop
}

# memcached, the baseline, on a free loopback port with its default 4 threads; MC_EXTRA: more
# options (bench/flash.sh: -o ext_path=...).
mc_start() {
    MC_PORT=$(( 20000 + $$ % 10000 ))
    user=$(id -un)
    memcached -u "$user" -l 127.0.0.1 -p "$MC_PORT" -U 0 -m "$BENCH_MC_MB" -I 2m \
        ${MC_THREADS:+-t $MC_THREADS} ${MC_EXTRA:-} >"$OUT/memcached.log" 2>&1 &
    MC_PID=$!
    mc_wait "$MC_PORT" "$OUT/memcached.log"
}

# mc_wait PORT LOG: until the memcached on 127.0.0.1:PORT answers (10 s at most; then the run
# dies pointing at LOG).
mc_wait() {
    i=0
    until memcstat --servers=127.0.0.1:"$1" >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 100 ] || bench_die "memcached did not start on port $1 (see $2)"
        sleep 0.1
    done
}

# mc_stat NAME: a stat of the memcached mc_start started (curr_items, evictions ...).
mc_stat() { memcstat --servers=127.0.0.1:"$MC_PORT" 2>/dev/null | awk -v k="$1" '$1 == k":" || $1 == k { print $2; exit }'; }

mc_stop() {
    if [ -n "$MC_PID" ]; then
        kill "$MC_PID" 2>/dev/null || true
        wait "$MC_PID" 2>/dev/null || true
        MC_PID=""
    fi
}

# A local Nessie cluster of $1 nodes on the shared-memory fabric. Further arguments are settings
# of the config file as GROUP.KEY=VALUE, e.g. optimizations.cache=false (reception --set).
# BENCH_MEMBERSHIP=etcd starts it with `nessie-cluster --membership etcd` (a private etcd, which
# nessie_stop stops; bench/failover.sh); empty, the default: static membership.
nessie_start() {
    n=$1
    shift
    nessie_stop
    mkdir -p "$RUN"
    # The daemon writes the file (every key, commented); each setting is one --set. (sh has no
    # local variables: these names must not be the callers' loop variables.)
    for ns_set in "cluster.name=bench-$BENCH_NAME-$$" "cluster.nodes=$n" cluster.fabric=shm \
        "cluster.index_slots=${BENCH_INDEX_SLOTS:-262144}" "cluster.data_bytes=$BENCH_DATA_BYTES" \
        "cluster.max_item_size=$BENCH_MAX_ITEM" \
        ${BENCH_EXPIRATION_MS:+"cluster.expiration_ms=$BENCH_EXPIRATION_MS"} "$@" \
        ${BENCH_NESSIE_SET:-}; do
        printf '%s\n' "--set=$ns_set"
    done >"$RUN/sets"
    set --
    while IFS= read -r ns_set; do set -- "$@" "$ns_set"; done <"$RUN/sets"
    "$BUILD/reception" --print-config "$@" >"$RUN/nessie.conf" ||
        bench_die "reception --print-config refused the settings above"
    "$BENCH_ROOT/tools/nessie-cluster" start --nodes "$n" --dir "$RUN" --config "$RUN/nessie.conf" \
        ${BENCH_MEMBERSHIP:+--membership "$BENCH_MEMBERSHIP"} \
        >/dev/null || bench_die "the Nessie cluster did not start (see $RUN/node*.log)"
    NESSIE_DIR=$RUN
    NESSIE_PIDS=""
    i=0
    while [ $i -lt "$n" ]; do
        NESSIE_PIDS="$NESSIE_PIDS $(cat "$RUN/node$i.pid")"
        i=$((i + 1))
    done
}

nessie_stop() {
    if [ -n "$NESSIE_DIR" ]; then
        "$BENCH_ROOT/tools/nessie-cluster" stop --dir "$NESSIE_DIR" --purge >/dev/null 2>&1 || true
        NESSIE_DIR=""
        NESSIE_PIDS=""
    fi
}

# Append one loadgen row to $CSV, after the script's columns $COLS (header: $COLS_HEADER).
# Usage: _bench_row ROW
_bench_row() {
    if [ "$BENCH_HEADER_DONE" = 0 ]; then
        echo "${COLS_HEADER:+$COLS_HEADER,}$LOADGEN_HEADER" >>"$CSV"
        BENCH_HEADER_DONE=1
    fi
    echo "${COLS:+$COLS,}$1" >>"$CSV"
}

# Run the load generator against memcached. Usage: run_memcached LABEL [LOADGEN ARGS...]
run_memcached() {
    label=$1
    shift
    row=$("$LOADGEN" -s 127.0.0.1:"$MC_PORT" -l "$label" -D "$BENCH_SECONDS" -w "$BENCH_WARMUP" \
        -W memcached:"$MC_PID" "$@" 2>>"$OUT/loadgen.log") || bench_die "loadgen failed against memcached (see $OUT/loadgen.log)"
    _bench_row "$row"
    LAST_ROW=$row
    _bench_errors "$row" memcached
}

# A line on stderr when a run had calls refused (they stay in the CSV's errors column).
_bench_errors() {
    e=$(row_field "$1" errors)
    [ "${e:-0}" = 0 ] || bench_log "warning: $2 refused $e calls in this run (see $OUT/loadgen.log)"
}

# Run the same load generator through the shim against the Nessie cluster. Its server list names
# a port where nothing listens and NESSIE_STRICT=1 is set: every answer comes from Nessie.
# Usage: run_nessie LABEL [LOADGEN ARGS...]
run_nessie() {
    label=$1
    shift
    watch=""
    i=0
    for p in $NESSIE_PIDS; do
        watch="$watch -W node$i:$p"
        i=$((i + 1))
    done
    # shellcheck disable=SC2086  # $watch is a list of options
    row=$(NESSIE_RUN_DIR=$NESSIE_DIR NESSIE_STRICT=1 "$BENCH_ROOT/tools/nessie-run" "$LOADGEN" \
        -s 127.0.0.1:9 -l "$label" -D "$BENCH_SECONDS" -w "$BENCH_WARMUP" $watch "$@" \
        2>>"$OUT/loadgen.log") || bench_die "loadgen failed against Nessie (see $OUT/loadgen.log)"
    _bench_row "$row"
    LAST_ROW=$row
    _bench_errors "$row" Nessie
}

# One loadgen per node, all at once, each through the shim of its own node's daemon (as in the
# paper, where every node runs clients: entries then live on every node, and GETs read remote
# ones). Appends a row per node (label LABEL-nodeI) and sets SUM_OPS and SUM_GOODPUT to the sums.
# Usage: run_nessie_every_node LABEL [LOADGEN ARGS...]
run_nessie_every_node() {
    label=$1
    shift
    i=0
    pids=""
    for p in $NESSIE_PIDS; do
        NESSIE_NODE=$i NESSIE_RUN_DIR=$NESSIE_DIR NESSIE_STRICT=1 "$BENCH_ROOT/tools/nessie-run" "$LOADGEN" \
            -s 127.0.0.1:9 -l "$label-node$i" -D "$BENCH_SECONDS" -w "$BENCH_WARMUP" -W "node$i:$p" "$@" \
            >"$OUT/row$i.tmp" 2>>"$OUT/loadgen.log" &
        pids="$pids $!"
        i=$((i + 1))
    done
    for p in $pids; do wait "$p" || bench_die "a loadgen failed (see $OUT/loadgen.log)"; done
    SUM_OPS=0
    SUM_GOODPUT=0
    i=0
    for p in $NESSIE_PIDS; do
        row=$(cat "$OUT/row$i.tmp")
        rm -f "$OUT/row$i.tmp"
        _bench_row "$row"
        SUM_OPS=$(echo "$SUM_OPS $(row_field "$row" ops_per_s)" | awk '{print $1 + $2}')
        SUM_GOODPUT=$(echo "$SUM_GOODPUT $(row_field "$row" goodput_mb_s)" | awk '{print $1 + $2}')
        i=$((i + 1))
    done
}

# A field of a loadgen row by column name. Usage: row_field "$LAST_ROW" ops_per_s
row_field() {
    echo "$LOADGEN_HEADER" | awk -F, -v row="$1" -v name="$2" '
        { n = split(row, r, ","); for (i = 1; i <= NF; i++) if ($i == name) print r[i] }'
}

# Column number of NAME in $CSV's header (for gnuplot's `using`).
col() {
    grep -v '^#' "$CSV" | head -n 1 | awk -F, -v name="$1" '
        { for (i = 1; i <= NF; i++) if ($i == name) { print i; exit } }'
}

# Run gnuplot on a script read from stdin, with the CSV conventions set; PNG into $OUT/$1.png.
plot() {
    command -v gnuplot >/dev/null || { bench_log "gnuplot missing: no $1.png"; return 0; }
    {
        echo "set terminal pngcairo size 1100,700 noenhanced font ',11'"
        echo "set output '$OUT/$1.png'"
        echo "set datafile separator ','"
        echo "set datafile missing 'NaN'"
        echo "set grid"
        echo "set key inside top right"
        cat
    } | gnuplot 2>>"$OUT/gnuplot.log" || bench_log "gnuplot failed for $1.png (see $OUT/gnuplot.log)"
}

bench_end() {
    bench_cleanup
    bench_log "$BENCH_NAME done: $CSV$(cd "$OUT" && for f in *.png; do [ -f "$f" ] && printf ' %s' "$OUT/$f"; done)"
}
