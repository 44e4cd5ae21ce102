<?php
// tests/clients/php_scenario.php HOST PORT [--binary]: the PHP memcached extension exercising what
// it can call, one line per step: a transcript to compare between memcached (no shim) and Nessie
// (through libdeception.so, tools/nessie-run).
$host = $argv[1];
$port = (int)$argv[2];
$m = new Memcached();
$m->setOption(Memcached::OPT_COMPRESSION, false);
if (($argv[3] ?? '') === '--binary')
    $m->setOption(Memcached::OPT_BINARY_PROTOCOL, true);
$m->addServer($host, $port);

function step($name, $r) {
    global $m;
    printf("%s: %s (%d %s)\n", $name, var_export($r, true), $m->getResultCode(),
           $m->getResultMessage());
}

step("flush", $m->flush());
step("set a", $m->set("a", "alpha"));
step("get a", $m->get("a"));
step("get missing", $m->get("nope"));
step("add a", $m->add("a", "x"));
step("add b", $m->add("b", "beta"));
step("replace nope", $m->replace("nope", "x"));
step("replace b", $m->replace("b", "beta2"));
step("append a", $m->append("a", "+"));
step("prepend a", $m->prepend("a", "-"));
step("get a", $m->get("a"));
step("set int", $m->set("i", 42));
step("get int", $m->get("i"));
step("set array", $m->set("arr", [1, "two", 3.0]));
step("get array", $m->get("arr"));
step("set nul", $m->set("nul", "x\0y"));
step("get nul", bin2hex($m->get("nul")));
step("set big", $m->set("big", str_repeat("b", 1000000)));
step("get big", strlen($m->get("big")));
step("set too big", $m->set("huge", str_repeat("h", 1024 * 1024 + 1)));
step("set key 250", $m->set(str_repeat("k", 250), "v"));
step("get key 250", $m->get(str_repeat("k", 250)));
step("set key 251", $m->set(str_repeat("k", 251), "v"));
step("setMulti", $m->setMulti(["m1" => "one", "m2" => "two", "m3" => 3]));
$r = $m->getMulti(["m1", "nope", "m2", "m3"]);
ksort($r);
step("getMulti", $r);
step("getMulti none", $m->getMulti(["x1", "x2"]));
step("set n", $m->set("n", "10"));
step("increment", $m->increment("n", 5));
step("decrement", $m->decrement("n", 100));
step("increment missing", $m->increment("nope"));
step("increment text", $m->increment("a"));
step("incrementByKey", $m->incrementByKey("grp", "n", 3));
step("touch", $m->touch("m1", 100));
step("touch missing", $m->touch("nope", 100));
$g = $m->get("m1", null, Memcached::GET_EXTENDED);
step("get extended", is_array($g) ? $g["value"] : $g);
step("cas", $m->cas($g["cas"], "m1", "uno"));
step("cas stale", $m->cas($g["cas"], "m1", "eins"));
step("get after cas", $m->get("m1"));
step("setByKey", $m->setByKey("grp", "gk", "gv"));
step("getByKey", $m->getByKey("grp", "gk"));
step("delete", $m->delete("m2"));
step("delete missing", $m->delete("m2"));
// More of what clients do (issue 17): hashing and distribution options (the daemon routes every
// key: they must change nothing), TTLs zero and past 30 days (a Unix time), touchByKey, a
// multi-get of 1000 keys, a CAS race between two clients, flags' round trip.
foreach ([["hash md5", Memcached::OPT_HASH, Memcached::HASH_MD5],
          ["hash murmur", Memcached::OPT_HASH, Memcached::HASH_MURMUR],
          ["distribution consistent", Memcached::OPT_DISTRIBUTION, Memcached::DISTRIBUTION_CONSISTENT],
          ["libketama compatible", Memcached::OPT_LIBKETAMA_COMPATIBLE, true],
          ["distribution modula", Memcached::OPT_DISTRIBUTION, Memcached::DISTRIBUTION_MODULA]] as $o) {
    step("option " . $o[0], $m->setOption($o[1], $o[2]));
    $k = "hb-" . str_replace(" ", "-", $o[0]);
    step($o[0] . ": set", $m->set($k, $o[0]));
    step($o[0] . ": get", $m->get($k));
    step($o[0] . ": get b", $m->get("b"));
}
step("set ttl 0", $m->set("t0", "zero", 0));
step("get ttl 0", $m->get("t0"));
step("set ttl absolute", $m->set("ta", "abs", time() + 3600));
step("get ttl absolute", $m->get("ta"));
step("set ttl absolute past", $m->set("tp", "past", time() - 3600));
step("get ttl absolute past", $m->get("tp"));
step("touchByKey", $m->touchByKey("grp", "gk", 100));
step("touchByKey missing", $m->touchByKey("grp", "gk0", 100));
$many = [];
for ($i = 0; $i < 1000; $i += 3)
    $many["mk$i"] = "v$i";
step("setMulti 334", $m->setMulti($many));
$keys = [];
for ($i = 0; $i < 1000; $i++)
    $keys[] = "mk$i";
$got = $m->getMulti($keys);
ksort($got);
ksort($many);
step("getMulti 1000", $got === $many);
$o2 = new Memcached();
$o2->setOption(Memcached::OPT_COMPRESSION, false);
if (($argv[3] ?? '') === '--binary')
    $o2->setOption(Memcached::OPT_BINARY_PROTOCOL, true);
$o2->addServer($host, $port);
step("race set", $m->set("race", "r0"));
$g = $m->get("race", null, Memcached::GET_EXTENDED);
step("race other set", $o2->set("race", "r1"));
step("race cas", $m->cas($g["cas"], "race", "r2"));
step("race get", $m->get("race"));
step("getVersion", array_values($m->getVersion())); // its keys name the server: not compared
step("expired", $m->set("e", "x", -1));
step("get expired", $m->get("e"));
// The item size limit (memcached -I 1m; the cluster's max_item_size): key + value + 59 bytes fit
// (a string carries flags 0 without compression); one more is refused and takes the old value out.
$largest = 1048576 - 59 - 2;
foreach (["largest value" => $largest, "largest value + 1" => $largest + 1,
          "1 MiB value" => 1048576] as $name => $size) {
    $m->set("mx", "old");
    step("set $name", $m->set("mx", str_repeat("m", $size)));
    $v = $m->get("mx");
    step("get $name", $v === false ? false : strlen($v));
}
step("flush", $m->flush());
step("get after flush", $m->get("m1"));
// php-memcached's stats_hang.phpt: with NO_BLOCK and BINARY both on, getStats turns NO_BLOCK off
// and on around its call, and the library reconnects for it: a second getStats sees one more
// connection (total_connections); with either off, none.
foreach ([[true, true], [false, true], [true, false], [false, false]] as $nb) {
    $m->setOption(Memcached::OPT_NO_BLOCK, $nb[0]);
    $m->setOption(Memcached::OPT_BINARY_PROTOCOL, $nb[1]);
    $s1 = array_values($m->getStats())[0]["total_connections"];
    $s2 = array_values($m->getStats())[0]["total_connections"];
    step(sprintf("stats reconnects (no_block %d, binary %d)", $nb[0], $nb[1]), $s1 == $s2);
}
