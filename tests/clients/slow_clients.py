#!/usr/bin/env python3
"""Slow and silent clients (a small slowloris) against dpd's VIPs.

Opens COUNT connections of each kind at once, each from the client
namespace over the lab link:

  silent-tls     connects to the TLS port and sends nothing;
  trickle-tls    sends a ClientHello record header announcing 512 bytes,
                 then one byte every INTERVAL seconds;
  silent-plain   connects to the plain port and sends nothing;
  trickle-plain  sends a request head one byte every INTERVAL seconds,
                 never its end;
  after-hello    sends a whole ClientHello (Python's ssl, TLS 1.3) at once,
                 takes the server's first flight and sends nothing more
                 (only with --kinds).

--kinds picks some of them (comma-separated). Once every connection is
open and has sent its first byte, prints "ready N" (scripts/
slowloris-memory.sh samples dpd's memory then). Then waits (at most
--limit seconds) for dpd to end each connection (EOF or reset) and prints
one line per kind: the kind, how many ended, and the shortest and longest
hold in seconds. Exit status 0 once every connection ended within the
limit, 1 otherwise.
"""

import argparse
import errno
import selectors
import socket
import ssl
import time


def client_hello():
    """A fresh ClientHello from Python's ssl (no verification)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="tlsdp.test")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dut", required=True)
    ap.add_argument("--tls-port", type=int, default=443)
    ap.add_argument("--plain-port", type=int, default=80)
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--limit", type=float, default=20.0)
    ap.add_argument("--kinds", default="silent-tls,trickle-tls,silent-plain,trickle-plain")
    a = ap.parse_args()

    hello = bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03]) + b"\x42" * 501
    head = b"GET / HTTP/1.1\r\nHost: tlsdp\r\nX-Slow: " + b"a" * 4000
    kinds = {
        "silent-tls": (a.tls_port, None),
        "trickle-tls": (a.tls_port, hello),
        "silent-plain": (a.plain_port, None),
        "trickle-plain": (a.plain_port, head),
        "after-hello": (a.tls_port, "hello"),
    }
    wanted = a.kinds.split(",")
    unknown = [k for k in wanted if k not in kinds]
    if unknown:
        ap.error(f"unknown kinds {unknown}; known: {list(kinds)}")
    kinds = {k: v for k, v in kinds.items() if k in wanted}
    sel = selectors.DefaultSelector()
    conns = []
    for kind, (port, data) in kinds.items():
        for _ in range(a.count):
            s = socket.create_connection((a.dut, port), timeout=5)
            s.setblocking(False)
            whole = data == "hello"
            if whole:
                data = client_hello()
            c = {"kind": kind, "sock": s, "data": data, "whole": whole, "sent": 0, "start": time.monotonic(), "end": None}
            conns.append(c)
            sel.register(s, selectors.EVENT_READ, c)
    next_send = time.monotonic()
    deadline = time.monotonic() + a.limit
    ready = False
    while time.monotonic() < deadline and any(c["end"] is None for c in conns):
        now = time.monotonic()
        if now >= next_send:
            next_send = now + a.interval
            for c in conns:
                if c["end"] is None and c["data"] is not None and c["sent"] < len(c["data"]):
                    step = len(c["data"]) if c["whole"] else 1
                    try:
                        c["sent"] += c["sock"].send(c["data"][c["sent"] : c["sent"] + step])
                    except OSError:
                        pass  # reset: the read below sees it
            if not ready:
                ready = True
                print(f"ready {len(conns)}", flush=True)
        for key, _ in sel.select(timeout=min(0.05, max(0.0, next_send - time.monotonic()))):
            c = key.data
            try:
                chunk = c["sock"].recv(4096)
            except BlockingIOError:
                continue
            except OSError as e:
                chunk = b"" if e.errno in (errno.ECONNRESET, errno.EPIPE) else None
            if not chunk:
                c["end"] = time.monotonic()
                sel.unregister(c["sock"])
                c["sock"].close()
    ok = True
    for kind in kinds:
        held = [c["end"] - c["start"] for c in conns if c["kind"] == kind and c["end"] is not None]
        ended = len(held)
        ok &= ended == a.count
        lo = min(held) if held else -1
        hi = max(held) if held else -1
        print(f"{kind} ended {ended}/{a.count} held {lo:.2f}..{hi:.2f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
