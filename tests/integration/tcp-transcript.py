#!/usr/bin/env python3
"""tests/integration/tcp-transcript.py: the memcached port (issue 32) answers byte for byte as a
real memcached does.

Usage: tcp-transcript.py [--group G[,G...]] [--verbose] [--timeout S] CASES HOST:PORT_A HOST:PORT_B

A is the reference (a real memcached 1.6, default item limit -I 1m), B the server under test.
CASES is a transcript file (tests/integration/tcp-transcript.cases; its head describes the
format). For each case, in the file's order (only those of the groups named by --group, by
default all), a fresh TCP connection is opened to A and one to B, the case's steps are sent on
both, and each step's replies are compared after normalization. One line per case: `ok NAME`,
or `DIFF NAME` followed by the first step that differs (its line in CASES, the request, A's and
B's replies, all shown with Python repr, long ones cut in the middle); then
`transcript: N cases, M differences`. --verbose shows every step of every case.

How a reply is known to be complete: after a `send` step's bytes the harness sends a sentinel, a
meta no-op `mn\r\n` (memcached 1.6 answers `MN\r\n`; on a connection whose first byte was 0x80,
the binary protocol's, a binary NOOP with opaque 'MNMN'), reads until the bytes received end
with its answer, and strips it (a request's own mn commands, its lines that begin with mn, are
counted: the reply is complete at the last of their answers). A `close` step reads until the
server closes; a `quiet` step (no sentinel: for when the server is to swallow what follows)
reads until 1 s of silence or the close. Every read has a deadline (--timeout, default 5 s per
step): a server that hangs gets `<timeout>` at the end of that reply, one that closes the
connection `<closed>` (and every later step of the case on that connection gets `<closed>`
alone).

Normalization, the same on both sides, before comparing:
  - the CAS unique of `VALUE key flags bytes CAS` lines, of a meta reply's `c<N>` flag, of a
    `ME` line's `cas=N` and of a binary response's header (when not 0) becomes `<cas>`; the
    last one a server returned on a connection is what `{cas}` (decimal) and `{cas8}` (8 bytes,
    big-endian) stand for in that connection's next requests;
  - `VERSION x` becomes `VERSION <v>`, as does a binary VERSION response's body (its body length
    becomes `<n>`);
  - a positive remaining TTL (meta `t<N>` flag, `ME` line's `exp=N`) is rounded to the nearest
    ten, `t~100` for both t99 and t100 (the servers' clocks tick apart); the seconds since last
    access (`l<N>`, `la=N`) become `l<la>`, `la=<la>`;
  - a `stats` step is not compared byte for byte: both replies must end with `END\r\n`.
Data blocks (after VALUE and VA lines) are never rewritten.

--known NAME[,NAME...] names cases the server under test is known to answer differently (what it
does not support yet): each is still run, and reported `known NAME` with its first difference,
counted apart in the last line; a known case that no longer differs is a failure too
(`NOW SAME NAME`: take it off the list), so the list cannot hide a change.

Exit 0 if no case differs but the known ones; 1 otherwise; 2 on a usage error, a bad CASES file, or a server
that cannot be connected to.
"""
import argparse
import base64
import os
import re
import select
import socket
import sys
import time

QUIET_S = 1.0  # the silence that ends a `quiet` step
BIN_SENTINEL_OPAQUE = b"MNMN"
BIN_SENTINEL = b"\x80\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" + BIN_SENTINEL_OPAQUE + b"\x00" * 8
TEXT_SENTINEL = b"mn\r\n"
TEXT_SENTINEL_REPLY = b"MN\r\n"
CLOSED = b"<closed>"
TIMEOUT = b"<timeout>"
KINDS = ("send", "close", "quiet", "stats")
MN_REQUEST = re.compile(rb"(?<![^\n]) *mn(?=[ \r\n]|$)")  # a request's own mn commands
MN_LINE = re.compile(rb"(?<![^\n])MN\r\n")
PREFIX_LEN = 10  # len of {p}: binary cases count on it for their key lengths


class CasesError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# The CASES file

class Step:
    def __init__(self, kind, text, lineno):
        self.kind, self.text, self.lineno = kind, text, lineno
        self.parts = parse_request(text, lineno)

    def render(self, prefix, cas):
        out = []
        for kind, val in self.parts:
            if kind == "lit":
                out.append(val)
            elif kind == "p":
                out.append(prefix)
            elif kind == "key":
                out.append(prefix + b"k" * (val - len(prefix)))
            elif kind == "bytes":
                n, pat = val
                pat = pat.replace(b"{p}", prefix)
                out.append((pat * (n // len(pat) + 1))[:n])
            elif kind == "b64":
                out.append(base64.b64encode(val.replace(b"{p}", prefix)))
            elif kind == "cas":
                out.append(b"%d" % cas)
            elif kind == "cas8":
                out.append(cas.to_bytes(8, "big"))
        return b"".join(out)


class Case:
    def __init__(self, name, groups, lineno, index):
        self.name, self.groups, self.lineno, self.index = name, groups, lineno, index
        self.steps = []


PLACEHOLDER = re.compile(r"\{(p|cas|cas8|key:\d+|bytes:\d+(?::(?:[^{}]|\{p\})+)?|b64:(?:[^{}]|\{p\})+)\}")
ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|[rnt0\\])")


def unescape(s, lineno):
    raw = s.encode("utf-8")
    bad = re.search(rb"\\(?!x[0-9a-fA-F]{2}|[rnt0\\])", raw)
    if bad:
        raise CasesError("line %d: unknown escape at %r" % (lineno, raw[bad.start():bad.start() + 4]))

    def one(m):
        e = m.group(1)
        if e[:1] == b"x":
            return bytes([int(e[1:], 16)])
        return {b"r": b"\r", b"n": b"\n", b"t": b"\t", b"0": b"\x00", b"\\": b"\\"}[e]
    return ESCAPE.sub(one, raw)


def parse_request(text, lineno):
    parts, pos = [], 0
    for m in PLACEHOLDER.finditer(text):
        if m.start() > pos:
            parts.append(("lit", unescape(text[pos:m.start()], lineno)))
        ph = m.group(1)
        if ph in ("p", "cas", "cas8"):
            parts.append((ph, None))
        elif ph.startswith("key:"):
            n = int(ph[4:])
            if n < PREFIX_LEN:
                raise CasesError("line %d: {key:N} needs N >= %d" % (lineno, PREFIX_LEN))
            parts.append(("key", n))
        elif ph.startswith("b64:"):
            parts.append(("b64", unescape(ph[4:], lineno)))
        else:
            f = ph.split(":", 2)
            pat = unescape(f[2], lineno) if len(f) == 3 else b"x"
            parts.append(("bytes", (int(f[1]), pat)))
        pos = m.end()
    if pos < len(text):
        parts.append(("lit", unescape(text[pos:], lineno)))
    return parts


def load_cases(path):
    cases, names, cur = [], set(), None
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.startswith("==="):
                m = re.match(r"^===\s+(\S+)\s+\[([\w,-]+)\]\s*$", line)
                if not m:
                    raise CasesError("line %d: a case header is `=== NAME [GROUP]`" % lineno)
                if m.group(1) in names:
                    raise CasesError("line %d: case %s named twice" % (lineno, m.group(1)))
                names.add(m.group(1))
                cur = Case(m.group(1), m.group(2).split(","), lineno, len(cases))
                cases.append(cur)
                continue
            kind, sep, text = line.partition(" ")
            if kind not in KINDS:
                raise CasesError("line %d: a step begins with one of %s" % (lineno, ", ".join(KINDS)))
            if cur is None:
                raise CasesError("line %d: a step before any case header" % lineno)
            cur.steps.append(Step(kind, text, lineno))
    for c in cases:
        if not c.steps:
            raise CasesError("line %d: case %s has no step" % (c.lineno, c.name))
    return cases


# ---------------------------------------------------------------------------------------------
# One connection to one server

class Conn:
    def __init__(self, addr, timeout):
        self.addr, self.timeout = addr, timeout
        self.sock = socket.create_connection(addr, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.closed = False
        self.binary = None  # decided by the connection's first byte, as memcached does
        self.cas = 0

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def complete(self, buf, mns):
        """Where the reply ends in buf (the sentinel's answer starts), or None if not yet. In
        text, mns is how many MN lines end it: the sentinel's and the request's own mn's."""
        if not self.binary:
            if not buf.endswith(TEXT_SENTINEL_REPLY):
                return None
            return len(buf) - 4 if len(MN_LINE.findall(buf)) >= mns else None
        i = 0
        while len(buf) - i >= 24:
            if buf[i] != 0x81:
                return None
            body = int.from_bytes(buf[i + 8:i + 12], "big")
            if len(buf) - i < 24 + body:
                return None
            if buf[i + 1] == 0x0a and buf[i + 12:i + 16] == BIN_SENTINEL_OPAQUE and len(buf) == i + 24 + body:
                return i
            i += 24 + body
        return None

    def exchange(self, data, mode):
        """Send data (plus the sentinel in mode "sentinel") and read the reply: until the
        sentinel's answer, the close ("eof"), or 1 s of silence ("quiet"). Returns the raw reply
        and a marker (None, CLOSED or TIMEOUT)."""
        if self.closed:
            return b"", CLOSED
        if self.binary is None and data:
            self.binary = data[0] == 0x80
        mns = 1 + len(MN_REQUEST.findall(data))
        if mode == "sentinel":
            data += BIN_SENTINEL if self.binary else TEXT_SENTINEL
        out, pos, buf = memoryview(data), 0, bytearray()
        now = time.monotonic()
        deadline, last = now + self.timeout, now
        while True:
            if mode == "sentinel" and pos == len(out):
                end = self.complete(buf, mns)
                if end is not None:
                    return bytes(buf[:end]), None
            now = time.monotonic()
            if now >= deadline:
                return bytes(buf), TIMEOUT
            if mode == "quiet" and pos == len(out) and now - last >= QUIET_S:
                return bytes(buf), None
            until = min(deadline, last + QUIET_S) if mode == "quiet" else deadline
            r, w, _ = select.select([self.sock], [self.sock] if pos < len(out) else [], [],
                                    max(until - now, 0.01))
            if r:
                try:
                    d = self.sock.recv(1 << 18)
                except (BlockingIOError, InterruptedError):
                    d = None
                except OSError:  # reset: the server closed with our data unread
                    d = b""
                if d == b"":
                    self.closed = True
                    return bytes(buf), CLOSED
                if d:
                    buf += d
                    last = time.monotonic()
            if w:
                try:
                    pos += self.sock.send(out[pos:pos + (1 << 18)])
                    last = time.monotonic()
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:  # the server closed: what it said before is still to be read
                    pos = len(out)
                    if mode == "sentinel":
                        mode = "eof"


# ---------------------------------------------------------------------------------------------
# Normalization

def round_ttl(n):
    return b"~%d" % (int((n + 5) // 10) * 10)


def norm_meta_flags(conn, tokens):
    out = []
    for t in tokens:
        if re.fullmatch(rb"c\d+", t):
            conn.cas = int(t[1:])
            t = b"c<cas>"
        elif re.fullmatch(rb"t\d+", t):
            t = b"t" + round_ttl(int(t[1:]))
        elif re.fullmatch(rb"l\d+", t):
            t = b"l<la>"
        out.append(t)
    return out


def norm_me(conn, line):
    def cas(m):
        conn.cas = int(m.group(1))
        return b"cas=<cas>"
    line = re.sub(rb"(?<= )cas=(\d+)", cas, line)
    line = re.sub(rb"(?<= )la=\d+", b"la=<la>", line)
    return re.sub(rb"(?<= )exp=(\d+)", lambda m: b"exp=" + round_ttl(int(m.group(1))), line)


META_CODES = (b"HD", b"EN", b"NF", b"NS", b"EX")


def norm_text(conn, raw):
    out, i = [], 0
    while i < len(raw):
        j = raw.find(b"\r\n", i)
        if j < 0:
            out.append(raw[i:])
            break
        line, i = raw[i:j], j + 2
        data = None
        tok = line.split(b" ")
        if tok[0] == b"VALUE" and len(tok) in (4, 5) and tok[3].isdigit():
            if len(tok) == 5 and tok[4].isdigit():
                conn.cas = int(tok[4])
                tok[4] = b"<cas>"
            data = int(tok[3])
        elif tok[0] == b"VA" and len(tok) >= 2 and tok[1].isdigit():
            data = int(tok[1])
            tok = tok[:2] + norm_meta_flags(conn, tok[2:])
        elif tok[0] in META_CODES:
            tok = tok[:1] + norm_meta_flags(conn, tok[1:])
        elif tok[0] == b"ME" and len(tok) > 2:
            tok = [norm_me(conn, line)]
        elif tok[0] == b"VERSION" and len(tok) > 1:
            tok = [b"VERSION", b"<v>"]
        out.append(b" ".join(tok) + b"\r\n")
        if data is not None:
            out.append(raw[i:i + data + 2])  # the data block, as it is
            i += data + 2
    return b"".join(out)


def norm_binary(conn, raw):
    out, i = [], 0
    while len(raw) - i >= 24 and raw[i] == 0x81:
        body = int.from_bytes(raw[i + 8:i + 12], "big")
        h = raw[i:i + 24]
        b = raw[i + 24:i + 24 + body]
        cas = int.from_bytes(h[16:24], "big")
        hcas = h[16:24]
        if cas:
            conn.cas = cas
            hcas = b"<cas>"
        hlen = h[8:12]
        if h[1] == 0x0b and h[6:8] == b"\x00\x00":  # VERSION, status 0
            hlen, b = b"<n>", b"<v>"
        out.append(h[:8] + hlen + h[12:16] + hcas + b)
        i += 24 + body
    out.append(raw[i:])
    return b"".join(out)


def run_step(conn, step, prefix):
    data = step.render(prefix, conn.cas)
    mode = {"send": "sentinel", "stats": "sentinel", "close": "eof", "quiet": "quiet"}[step.kind]
    raw, marker = conn.exchange(data, mode)
    reply = norm_binary(conn, raw) if conn.binary else norm_text(conn, raw)
    return data, reply + (marker or b"")


def same(step, a, b):
    if step.kind == "stats":
        return a.endswith(b"END\r\n") and b.endswith(b"END\r\n")
    return a == b


# ---------------------------------------------------------------------------------------------

def show(b, limit=600):
    if len(b) <= limit:
        return repr(b)
    return "%r ...<%d bytes>... %r" % (b[:limit // 2], len(b) - limit // 2 - 80, b[-80:])


def parse_addr(s):
    host, sep, port = s.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError("%s is not HOST:PORT" % s)
    return host.strip("[]"), int(port)


def main():
    ap = argparse.ArgumentParser(description="Compare a server's memcached-protocol answers with a real memcached's.")
    ap.add_argument("--group", help="run only the cases of these groups (comma-separated)")
    ap.add_argument("--verbose", action="store_true", help="show every step's request and replies")
    ap.add_argument("--known", default="", help="cases known to differ (comma-separated), reported apart")
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds a step may take (default 5)")
    ap.add_argument("cases")
    ap.add_argument("a", metavar="HOST:PORT_A")
    ap.add_argument("b", metavar="HOST:PORT_B")
    args = ap.parse_args()  # exits 2 on a usage error
    try:
        addr_a, addr_b = parse_addr(args.a), parse_addr(args.b)
        cases = load_cases(args.cases)
    except (ValueError, OSError, CasesError) as e:
        print("tcp-transcript: %s" % e, file=sys.stderr)
        return 2
    if args.group:
        want = set(args.group.split(","))
        known = {g for c in cases for g in c.groups}
        if want - known:
            print("tcp-transcript: no case in group %s" % ",".join(sorted(want - known)), file=sys.stderr)
            return 2
        cases = [c for c in cases if want & set(c.groups)]
    known_diff = set(filter(None, args.known.split(",")))
    unknown = known_diff - {c.name for c in cases}
    if unknown:
        print("tcp-transcript: --known names no case run: %s" % ",".join(sorted(unknown)), file=sys.stderr)
        return 2
    known_n = 0

    run = os.urandom(3).hex().encode()
    diffs = 0
    for case in cases:
        prefix = b"%s%03d_" % (run, case.index % 1000)
        assert len(prefix) == PREFIX_LEN
        conns = []
        try:
            for addr in (addr_a, addr_b):
                conns.append(Conn(addr, args.timeout))
        except OSError as e:
            print("tcp-transcript: cannot connect to %s:%d: %s" % (addr + (e,)), file=sys.stderr)
            for c in conns:
                c.close()
            return 2
        first, later, lines = None, 0, []
        for n, step in enumerate(case.steps, 1):
            req, ra = run_step(conns[0], step, prefix)
            _, rb = run_step(conns[1], step, prefix)
            ok = same(step, ra, rb)
            if args.verbose:
                lines.append("  %sstep %d (line %d) %s %s" % ("" if ok else "*", n, step.lineno, step.kind, show(req)))
                lines.append("    A: %s" % show(ra))
                lines.append("    B: %s" % show(rb))
            if not ok:
                if first is None:
                    first = (n, step, req, ra, rb)
                else:
                    later += 1
        for c in conns:
            c.close()
        if first is None and case.name in known_diff:
            diffs += 1
            print("NOW SAME %s (listed as known to differ: take it off --known)" % case.name)
        elif first is None:
            print("ok %s" % case.name)
        else:
            if case.name in known_diff:
                known_n += 1
            else:
                diffs += 1
            n, step, req, ra, rb = first
            print("%s %s" % ("known" if case.name in known_diff else "DIFF", case.name))
            if not args.verbose:
                print("  step %d (line %d) %s %s" % (n, step.lineno, step.kind, show(req)))
                print("    A: %s" % show(ra))
                print("    B: %s" % show(rb))
                if later:
                    print("  (and %d later step%s)" % (later, "s" if later > 1 else ""))
        for l in lines:
            print(l)
        sys.stdout.flush()
    print("transcript: %d cases, %d differences%s" % (len(cases), diffs,
                                                      ", %d known (not supported yet)" % known_n if known_diff else ""))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
