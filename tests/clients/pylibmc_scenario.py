#!/usr/bin/python3
"""A pylibmc client exercising what it can call; prints one line per step (a transcript), so the
same script run against memcached and against Nessie (through libdeception.so) can be compared.

usage: pylibmc_scenario.py SERVERS [--binary]
"""
import sys
import time

import pylibmc


def main():
    servers = sys.argv[1].split(",")
    binary = "--binary" in sys.argv[2:]
    mc = pylibmc.Client(servers, binary=binary)
    out = []

    def step(name, fn):
        try:
            r = fn()
        except Exception as e:  # pylibmc raises on errors; the class is the transcript
            r = "raised " + type(e).__name__
        out.append("%s: %r" % (name, r))

    step("flush", lambda: mc.flush_all())
    step("set", lambda: mc.set("k1", "v1"))
    step("get", lambda: mc.get("k1"))
    step("get missing", lambda: mc.get("nope"))
    step("add existing", lambda: mc.add("k1", "x"))
    step("add new", lambda: mc.add("k2", "v2"))
    step("replace missing", lambda: mc.replace("nope", "x"))
    step("replace", lambda: mc.replace("k2", "v2b"))
    step("get replaced", lambda: mc.get("k2"))
    step("append", lambda: mc.append("k1", "+a"))
    step("prepend", lambda: mc.prepend("k1", "p+"))
    step("get appended", lambda: mc.get("k1"))
    step("append missing", lambda: mc.append("nope", "x"))
    step("set int", lambda: mc.set("n", 41))
    step("incr", lambda: mc.incr("n"))
    step("incr 10", lambda: mc.incr("n", 10))
    step("decr", lambda: mc.decr("n", 100))
    step("get int", lambda: mc.get("n"))
    step("incr missing", lambda: mc.incr("nope"))
    step("incr non-numeric", lambda: mc.incr("k1"))
    # A key of a NUL byte: memcached's ascii line ends there (ERROR); binary carries it.
    step("incr NUL key", lambda: mc.incr("\0"))
    step("decr NUL key", lambda: mc.decr("a\0b", 2))
    step("incr after NUL key", lambda: mc.incr("n"))
    step("binary value", lambda: mc.set("bin", b"a\x00b\x00\xff"))
    step("get binary", lambda: mc.get("bin"))
    step("big value", lambda: mc.set("big", b"x" * (1000 * 1000)))
    step("get big", lambda: len(mc.get("big") or b""))
    step("too big", lambda: mc.set("huge", b"x" * (1024 * 1024 + 1)))
    step("key 250", lambda: mc.set("k" * 250, "long"))
    step("get key 250", lambda: mc.get("k" * 250))
    step("key 251", lambda: mc.set("k" * 251, "x"))
    step("multi set", lambda: mc.set_multi({"m1": "a", "m2": "b", "m3": "c"}))
    step("multi get", lambda: sorted(mc.get_multi(["m1", "m2", "nope", "m3"]).items()))
    step("multi get none", lambda: mc.get_multi(["nope1", "nope2"]))
    step("delete", lambda: mc.delete("m1"))
    step("delete missing", lambda: mc.delete("m1"))
    step("touch", lambda: mc.touch("m2", 100))
    step("touch missing", lambda: mc.touch("nope", 100))
    step("gets/cas", lambda: mc.cas("m2", "b2", mc.gets("m2")[1]))
    step("cas stale", lambda: mc.cas("m2", "b3", 12345))
    step("get after cas", lambda: mc.get("m2"))
    step("expired", lambda: (mc.set("e", "x", time=-1), mc.get("e"))[1])
    # More of what clients do (issue 17): hashing and distribution behaviours (the daemon routes
    # every key: they must change nothing), TTLs zero and past 30 days (a Unix time), a multi-get
    # of 1000 keys, and a CAS race between two clients (pylibmc itself refuses an empty server list).
    for name, beh in (("hash md5", {"hash": "md5"}), ("hash murmur", {"hash": "murmur"}),
                      ("distribution consistent", {"distribution": "consistent"}),
                      ("ketama", {"ketama": True}), ("distribution modula", {"distribution": "modula"})):
        def with_behaviour(beh=beh, name=name):
            mc.behaviors = beh
            key = "hb-" + name.replace(" ", "-")
            mc.set(key, name)
            return (mc.get(key), mc.get("k2"))
        step("behaviour " + name, with_behaviour)
    step("ttl 0", lambda: (mc.set("t0", "zero", time=0), mc.get("t0")))
    step("ttl absolute future", lambda: (mc.set("ta", "abs", time=int(time.time()) + 3600), mc.get("ta")))
    step("ttl absolute past", lambda: (mc.set("tp", "past", time=int(time.time()) - 3600), mc.get("tp")))
    step("set 1000", lambda: mc.set_multi({"mk%d" % i: "v%d" % i for i in range(0, 1000, 3)}))
    step("get_multi 1000", lambda: sorted(mc.get_multi(["mk%d" % i for i in range(1000)]).items()) ==
         sorted(("mk%d" % i, "v%d" % i) for i in range(0, 1000, 3)))
    other = pylibmc.Client(servers, binary=binary)
    def cas_race():
        mc.behaviors = {"cas": True}
        mc.set("race", "r0")
        _, token = mc.gets("race")
        other.set("race", "r1")
        return (mc.cas("race", "r2", token), mc.get("race"))
    step("cas race", cas_race)
    # get_stats(): one (server, stats) pair per server, memcached's stat names (the library's
    # list); the values differ from server to server, so only their shape is compared.
    def stats_shape():
        servers = mc.get_stats()
        st = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in servers[0][1].items()}
        return (len(servers), sorted(st), int(st["pid"]) > 0, st["version"].split(".")[0].isdigit(),
                int(st["cmd_get"]) > 0, int(st["get_hits"]) > 0, int(st["limit_maxbytes"]) > 0)
    step("stats", stats_shape)
    # The item size limit (memcached -I 1m; the cluster's max_item_size): key + value + 59 bytes
    # fit (bytes values carry flags 0); one more is refused and takes the old value out.
    largest = 1048576 - 59 - 2
    for name, size in (("largest value", largest), ("largest value + 1", largest + 1),
                       ("1 MiB value", 1048576)):
        def at_limit(size=size):
            mc.set("mx", b"old")
            try:
                r = mc.set("mx", b"m" * size)
            except Exception as e:
                r = "raised " + type(e).__name__
            v = mc.get("mx")
            return (r, None if v is None else len(v))
        step(name, at_limit)
    step("flush all", lambda: mc.flush_all())
    step("get after flush", lambda: mc.get("m2"))
    print("\n".join(out))


if __name__ == "__main__":
    main()
