#!/usr/bin/env python3
"""tests/integration/tcp-conns.py: "stats conns" (issue 32) lists what memcached lists.

Usage: tcp-conns.py HOST:PORT_A HOST:PORT_B

A is the reference (a real memcached 1.6 listening on one address), B the server under test;
neither may have other clients meanwhile. On each, five connections are opened: one asks, one
sent a whole request (version) and waits, one is half-way through a storage command's value,
one half-way through a line, one never sent anything; a second later the first sends
`stats conns`. Each server's answer must list the listening socket and exactly those five
connections (by descriptor; each connection's addr names the client's own end, listen_addr
the server's), with memcached's fields in memcached's order, and each connection's state and
seconds since its last command as memcached has them (1.2 s reads as 1 or 2 on memcached's
once-a-second clock: either is the same answer). The two answers, so described (the
descriptors, ports and the listener's age left out), must be the same. Exit 0 if they are, 1
with both descriptions if not, 2 when a server cannot be reached or its answer is not a list of
STAT lines ending in END.
"""
import re
import socket
import sys
import time

STAT = re.compile(r"^STAT (\d+):([a-z_]+) (.*)$")


def describe(host, port):
    """The server's answer, described: [(role, [(field, value)...]), ...] in descriptor order."""
    ask = socket.create_connection((host, port), 5)
    idle = socket.create_connection((host, port), 5)
    idle.sendall(b"version\r\n")
    idle.recv(100)
    value = socket.create_connection((host, port), 5)
    value.sendall(b"set tcp-conns 0 0 10\r\nabc")
    line = socket.create_connection((host, port), 5)
    line.sendall(b"get tcp-co")
    quiet = socket.create_connection((host, port), 5)
    roles = {}
    for name, s in (("ask", ask), ("idle", idle), ("value", value), ("line", line),
                    ("quiet", quiet)):
        h, p = s.getsockname()[:2]
        roles["tcp:%s:%d" % (h, p)] = name
    time.sleep(1.2)
    ask.sendall(b"stats conns\r\n")
    out = b""
    deadline = time.time() + 5
    while not out.endswith(b"END\r\n") and time.time() < deadline:
        ask.settimeout(max(0.1, deadline - time.time()))
        try:
            chunk = ask.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        out += chunk
    for s in (ask, idle, value, line, quiet):
        s.close()
    text = out.decode("ascii", "replace")
    if not text.endswith("END\r\n"):
        print("%s:%d: no END in %r" % (host, port, text))
        sys.exit(2)
    conns = {}
    for l in text[:-len("END\r\n")].split("\r\n")[:-1]:
        m = STAT.match(l)
        if not m:
            print("%s:%d: not a STAT line: %r" % (host, port, l))
            sys.exit(2)
        conns.setdefault(int(m.group(1)), []).append((m.group(2), m.group(3)))
    server = "tcp:%s:%d" % (host, port)
    described = []
    for fd in sorted(conns):
        fields = conns[fd]
        d = dict(fields)
        if d.get("state") == "conn_listening":
            role = "listener" + ("" if d.get("addr") == server else " (another address)")
            keep = [(k, v) for k, v in fields if k not in ("addr", "secs_since_last_cmd")]
            described.append((role, [k for k, _ in fields], keep))
            continue
        role = roles.get(d.get("addr"), "unknown")
        keep = []
        for k, v in fields:
            if k == "addr":
                continue
            if k == "listen_addr":
                v = "the server" if v == server else v
            if k == "secs_since_last_cmd" and v in ("1", "2"):
                # memcached reads a clock that ticks once a second, so 1.2 s of quiet
                # reads as 1 or 2 depending on where the ticks fell: the same answer.
                v = "1 or 2"
            keep.append((k, v))
        described.append((role, [k for k, _ in fields], keep))
    return described


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    got = []
    for arg in sys.argv[1:]:
        host, port = arg.rsplit(":", 1)
        try:
            got.append(describe(host, int(port)))
        except OSError as e:
            print("%s: %s" % (arg, e))
            sys.exit(2)
    a, b = got
    if sorted(a) != sorted(b):
        for name, d in (("reference", a), ("under test", b)):
            print("%s:" % name)
            for row in d:
                print("  %r" % (row,))
        sys.exit(1)
    print("stats conns: %d entries, as memcached's" % len(a))


if __name__ == "__main__":
    main()
