#!/usr/bin/env python3
"""Holds N HTTP/1.1 keep-alive connections to HOST:PORT, each from its own
source port, for the ECMP rehash tests (tests/tests/cluster.rs).

    hold.py HOST PORT N

Opens the N connections (one request each), prints "open N", then for
every line on stdin ("check") sends one request on every connection and
prints "ok A broken B": a connection is broken when the request fails
(reset, or no whole response within 2 s). Broken ones are opened again
before the answer, so each check starts from N working connections.
"""

import socket
import sys

REQ = b"GET / HTTP/1.1\r\nHost: vip\r\n\r\n"


def ask(sock):
    """One request and its whole response; raises on any failure."""
    sock.sendall(REQ)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if not head.startswith(b"HTTP/1.1 200"):
        raise ConnectionError(head.split(b"\r\n")[0].decode(errors="replace"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed mid-body")
        body += chunk


def connect(host, port):
    sock = socket.create_connection((host, port), timeout=2)
    ask(sock)
    return sock


def main():
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    conns = [connect(host, port) for _ in range(n)]
    print(f"open {len(conns)}", flush=True)
    for line in sys.stdin:
        if line.strip() != "check":
            continue
        ok = broken = 0
        for i, sock in enumerate(conns):
            try:
                ask(sock)
                ok += 1
            except OSError:
                broken += 1
                sock.close()
                conns[i] = connect(host, port)
        print(f"ok {ok} broken {broken}", flush=True)


if __name__ == "__main__":
    main()
