#!/bin/sh
# tests/clients/tools_scenario.sh SERVERS [--binary]: the libmemcached-tools commands, one step a
# line with the command's output and exit status: a transcript to compare between memcached (no
# shim) and Nessie (through tools/nessie-run). Runs in a scratch directory of its own.
set -u
S="--servers=$1"
B=""
[ "${2:-}" = "--binary" ] && B="--binary"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

step() { # step NAME CMD...: prints "NAME: rc=N" and the output, key-sorted where order is free
    name=$1
    shift
    out=$("$@" 2>&1)
    rc=$?
    printf '%s: rc=%s\n' "$name" "$rc"
    # the handle's address in libmemcached's error messages differs from run to run
    [ -n "$out" ] && printf '%s\n' "$out" | sed 's/(0x[0-9a-f]*)/(ADDR)/; s/^/    /'
}

printf 'hello world\n' >hello.txt
printf 'a\000b\000c' >nul.bin
head -c 1000000 /dev/zero | tr '\0' 'x' >near1m.dat
head -c 1100000 /dev/zero | tr '\0' 'y' >over1m.dat
k250=$(printf 'k%.0s' $(seq 1 250))
printf 'long key\n' >"$k250"

step flush memcflush $S $B
step "cp hello" memccp $S $B hello.txt
step "cat hello" memccat $S $B hello.txt
step "cat missing" memccat $S $B missing.txt
step "cp add existing" memccp $S $B --add hello.txt
step "cp replace missing" memccp $S $B --replace nul.bin
step "cp nul" memccp $S $B nul.bin
step "cat nul (hex)" sh -c "memccat $S $B nul.bin | od -An -c"
step "cp near 1 MiB" memccp $S $B near1m.dat
step "cat near 1 MiB (bytes)" sh -c "memccat $S $B near1m.dat | wc -c"
step "cp over 1 MiB" memccp $S $B over1m.dat
step "cp key 250" memccp $S $B "$k250"
step "cat key 250" memccat $S $B "$k250"
k251="${k250}k"
printf 'x\n' >"$k251"
step "cp key 251" memccp $S $B "$k251"
step "exist" memcexist $S $B hello.txt
step "exist missing" memcexist $S $B missing.txt
step "touch" memctouch $S $B --expire=100 hello.txt
step "touch missing" memctouch $S $B --expire=100 missing.txt
step "rm" memcrm $S $B hello.txt
step "rm missing" memcrm $S $B hello.txt
step "cat removed" memccat $S $B hello.txt
step "cp expired" memccp $S $B --expire=1 nul.bin
sleep 2
step "cat expired" memccat $S $B nul.bin
# Flags at both ends, and a TTL of 0 (issue 17).
printf 'flagged\n' >flags.txt
step "cp flags max" memccp $S $B --flags=4294967295 flags.txt
step "cat flags max" memccat $S $B --flags flags.txt
step "cp flags 0" memccp $S $B --flags=0 flags.txt
step "cat flags 0" memccat $S $B --flags flags.txt
step "cp ttl 0" memccp $S $B --expire=0 hello.txt
step "cat ttl 0" memccat $S $B hello.txt
step "flush all" memcflush $S $B
step "cat after flush" memccat $S $B near1m.dat
exit 0
