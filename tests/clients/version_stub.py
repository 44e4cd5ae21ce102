#!/usr/bin/python3
"""version_stub.py PORT: a TCP listener on 127.0.0.1:PORT that answers memcached's text
`version` command and nothing else.

pylibmc's test suite checks that its server is alive with a raw socket (`version`) before each
test, which no shim can answer. Through the shim with NESSIE_STRICT=1 every call the shim serves
goes to Nessie, never to a server; this stub stands where the server would be, so the suite runs,
and anything else that reaches it (a call the shim does not serve) gets SERVER_ERROR, so it shows
as a difference instead of being answered by a real memcached.
"""
import socket
import sys
import threading

VERSION = b"VERSION 1.6.18-nessie\r\n"


def serve(conn):
    with conn:
        buf = b""
        while True:
            data = conn.recv(4096)
            if not data:
                return
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip() == b"version":
                    conn.sendall(VERSION)
                else:
                    conn.sendall(b"SERVER_ERROR only version is answered here\r\n")


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) == 2 else 2
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(sys.argv[1])))
    s.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
