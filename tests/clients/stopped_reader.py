#!/usr/bin/env python3
"""A client that stops reading: it connects (plain or TLS) with a small
receive buffer, asks for a large body, never reads, and prints how long
the server took to reset it ("reset after S s", TCP_INFO's state CLOSE)
or that it held on ("held S s"). Its kernel keeps the window closed and
answers every zero-window probe, as RFC 9293 lets a receiver do."""

import argparse
import socket
import ssl
import time

TCP_CLOSE = 7


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dut", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tls", action="store_true")
    p.add_argument("--limit", type=float, default=10.0, help="seconds to wait")
    a = p.parse_args()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((a.dut, a.port))
    if a.tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        s = ctx.wrap_socket(s)
    s.sendall(b"GET /bytes/50000000 HTTP/1.1\r\nHost: t\r\n\r\n")
    t0 = time.monotonic()
    while time.monotonic() - t0 < a.limit:
        if s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == TCP_CLOSE:
            print(f"reset after {time.monotonic() - t0:.2f} s")
            return
        time.sleep(0.05)
    print(f"held {a.limit:.0f} s")


if __name__ == "__main__":
    main()
