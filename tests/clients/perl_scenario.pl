#!/usr/bin/perl
# tests/clients/perl_scenario.pl SERVERHOST PORT [--binary]: the Perl binding
# (Memcached::libmemcached) exercising what it can call, one line per step: a transcript to
# compare between memcached (no shim) and Nessie (through libdeception.so).
use strict;
use warnings;
use Memcached::libmemcached qw(:memcached_behavior_t :memcached_hash_t
    :memcached_server_distribution_t memcached_create memcached_server_add
    memcached_behavior_set memcached_set memcached_add memcached_replace memcached_append
    memcached_prepend memcached_cas memcached_get memcached_mget memcached_fetch
    memcached_increment memcached_decrement memcached_delete memcached_flush memcached_free);

my ($host, $port, $mode) = @ARGV;
my $m = memcached_create();
memcached_server_add($m, $host, $port);
memcached_behavior_set($m, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL(), 1) if ($mode // '') eq '--binary';
memcached_behavior_set($m, MEMCACHED_BEHAVIOR_SUPPORT_CAS(), 1);

sub show { my ($name, $ok) = @_; printf "%s: %s (%s)\n", $name, ($ok ? "ok" : "fail"), $m->errstr; }
sub get {
    my ($name, $key) = @_;
    my ($flags, $rc) = (0, 0);
    my $v = memcached_get($m, $key, $flags, $rc);
    printf "%s: %s flags=%d (%s)\n", $name, defined $v ? "'$v'" : 'undef', $flags, $m->errstr;
}

show("flush", memcached_flush($m, 0));
show("set a", memcached_set($m, "a", "alpha", 0, 5));
get("get a", "a");
get("get missing", "nope");
show("add a", memcached_add($m, "a", "x"));
show("replace nope", memcached_replace($m, "nope", "x"));
show("append a", memcached_append($m, "a", "+"));
show("prepend a", memcached_prepend($m, "a", "-"));
get("get a", "a");
show("set nul", memcached_set($m, "nul", "x\0y\0z"));
my $nul = memcached_get($m, "nul");
printf "get nul: %s\n", join(",", map { ord } split //, $nul // '');
show("set big", memcached_set($m, "big", "b" x 1_000_000));
printf "get big: %d\n", length(memcached_get($m, "big") // '');
show("set too big", memcached_set($m, "huge", "h" x (1024 * 1024 + 1)));
show("set key 250", memcached_set($m, "k" x 250, "v"));
get("get key 250", "k" x 250);
show("set key 251", memcached_set($m, "k" x 251, "v"));
show("set m1", memcached_set($m, "m1", "one"));
show("set m2", memcached_set($m, "m2", "two"));
show("mget", memcached_mget($m, [qw(m1 nope m2)]));
my %got;
while (1) {
    my $k;
    my $v = memcached_fetch($m, $k);
    last unless defined $v;
    $got{$k} = $v;
}
print "fetched: ", join(" ", map { "$_=$got{$_}" } sort keys %got), " (", $m->errstr, ")\n";
my $multi = $m->get_multi(qw(m1 m2 nope));
print "get_multi: ", join(" ", map { "$_=$multi->{$_}" } sort keys %$multi), "\n";
show("set n", memcached_set($m, "n", "10"));
my $val = 0;
show("incr n 5", memcached_increment($m, "n", 5, $val)); print "  -> $val\n";
show("decr n 100", memcached_decrement($m, "n", 100, $val)); print "  -> $val\n";
show("incr nope", memcached_increment($m, "nope", 1, $val));
show("incr a", memcached_increment($m, "a", 1, $val));
show("delete a", memcached_delete($m, "a"));
show("delete a again", memcached_delete($m, "a"));
show("set expired", memcached_set($m, "e", "x", -1));
get("get expired", "e");
# More of what clients do (issue 17): hashing and distribution behaviours (the daemon routes
# every key: they must change nothing), flags at both ends, TTLs zero and absolute (a Unix
# time), a multi-get of 1000 keys.
for my $b (["hash md5", MEMCACHED_BEHAVIOR_HASH(), MEMCACHED_HASH_MD5()],
           ["hash murmur", MEMCACHED_BEHAVIOR_HASH(), MEMCACHED_HASH_MURMUR()],
           ["distribution ketama", MEMCACHED_BEHAVIOR_DISTRIBUTION(),
            MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA()],
           ["distribution modula", MEMCACHED_BEHAVIOR_DISTRIBUTION(), MEMCACHED_DISTRIBUTION_MODULA()]) {
    my ($name, $beh, $v) = @$b;
    (my $k = "hb-$name") =~ s/ /-/g;
    show("behavior $name", memcached_behavior_set($m, $beh, $v));
    show("$name: set", memcached_set($m, $k, $name));
    get("$name: get", $k);
    get("$name: get m1", "m1");
}
show("set flags max", memcached_set($m, "fl", "x", 0, 4294967295));
get("get flags max", "fl");
show("set flags 0", memcached_set($m, "fl", "y", 0, 0));
get("get flags 0", "fl");
show("set ttl 0", memcached_set($m, "t0", "zero", 0));
get("get ttl 0", "t0");
show("set ttl absolute", memcached_set($m, "ta", "abs", time() + 3600));
get("get ttl absolute", "ta");
show("set ttl absolute past", memcached_set($m, "tp", "past", time() - 3600));
get("get ttl absolute past", "tp");
my @many = map { "mk$_" } 0 .. 999;
my $stored = 0;
for (my $i = 0; $i < 1000; $i += 3) { $stored++ if memcached_set($m, "mk$i", "v$i"); }
print "set 334: $stored\n";
my $all = $m->get_multi(@many);
my $right = grep { ($all->{"mk$_"} // '') eq "v$_" } grep { $_ % 3 == 0 } 0 .. 999;
printf "get_multi 1000: %d found, %d right\n", scalar(keys %$all), $right;
# CAS: the binding gives no token back (memcached_result_cas is not implemented in it), so a
# race cannot be written; a stale token and a missing key are what a Perl program can meet.
memcached_set($m, "race", "r0");
show("cas with a stale token", memcached_cas($m, "race", "r2", 0, 0, 12345));
get("get after stale cas", "race");
show("cas on a missing key", memcached_cas($m, "nocas", "x", 0, 0, 1));
get("get after cas on a missing key", "nocas");
# The item size limit (memcached -I 1m; the cluster's max_item_size): key + value + 59 bytes fit,
# + 4 with flags; one more is refused and takes the old value out.
my $largest = 1048576 - 59 - 2;
for my $case (["largest value", $largest, 0], ["largest value + 1", $largest + 1, 0],
              ["largest with flags", $largest - 4, 5], ["largest with flags + 1", $largest - 3, 5],
              ["1 MiB value", 1048576, 0]) {
    my ($name, $size, $fl) = @$case;
    memcached_set($m, "mx", "old");
    show("set $name", memcached_set($m, "mx", "m" x $size, 0, $fl));
    my ($flags, $rc) = (0, 0);
    my $v = memcached_get($m, "mx", $flags, $rc);
    printf "get %s: %s flags=%d\n", $name, defined $v ? length($v) : 'undef', $flags;
}
show("flush", memcached_flush($m, 0));
get("get after flush", "m1");
memcached_free($m);
