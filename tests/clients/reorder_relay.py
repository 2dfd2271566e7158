#!/usr/bin/env python3
"""A transparent Ethernet relay between two interfaces of one namespace
that delays frames: a path that reorders, as `tc netem` would make one
(this kernel has no netem).

Every frame waits DELAY ms in each direction; every EVERY-th TCP segment
with data that arrives on the second interface (B, going to A) waits LATE
ms more, so the segments sent after it overtake it (--every 0: none).
With --rate-mbit, frames from B first pass a bottleneck of that rate
behind a drop-tail queue of --queue frames, as a router's would be:
frames that find it full are dropped. The queue and delays run on the
kernel's receive timestamps, not on when the relay reads a frame.

    reorder_relay.py A B [--delay-ms 5] [--late-ms 4] [--every 40]
                     [--rate-mbit R --queue N] [--limit 120]

Prints "ready" once both interfaces are bound. On SIGTERM (or after
--limit seconds) prints "late N forwarded M dropped D queue_drops Q": the
segments held late, the frames forwarded, the frames the kernel dropped
before the relay read them (its socket buffers full) or could not send,
and the frames the bottleneck's queue dropped.
"""

import argparse
import collections
import heapq
import select
import signal
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_STATISTICS = 6
# <asm-generic/socket.h>: receive times in a struct timespec (CLOCK_REALTIME).
SO_TIMESTAMPNS = 35
TIMESPEC = struct.Struct("qq")


def bound(ifname):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.bind((ifname, 0))
    s.setblocking(False)
    return s


def received_at(ancdata, realtime_offset):
    """When the kernel received the frame, on time.monotonic()'s clock;
    None without the timestamp."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            sec, nsec = TIMESPEC.unpack_from(data)
            return sec + nsec / 1e9 - realtime_offset
    return None


def tcp_payload_len(frame):
    """The TCP payload length of an IPv4 TCP frame, else 0."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return 0
    ihl = (frame[14] & 0x0F) * 4
    if frame[23] != 6 or len(frame) < 14 + ihl + 20:
        return 0
    total = struct.unpack_from("!H", frame, 16)[0]
    data_off = (frame[14 + ihl + 12] >> 4) * 4
    return max(0, total - ihl - data_off)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--delay-ms", type=float, default=5.0)
    ap.add_argument("--late-ms", type=float, default=4.0)
    ap.add_argument("--every", type=int, default=40)
    ap.add_argument("--rate-mbit", type=float, default=0.0)
    ap.add_argument("--queue", type=int, default=100)
    ap.add_argument("--limit", type=float, default=120.0)
    args = ap.parse_args()

    side_a, side_b = bound(args.a), bound(args.b)
    other = {side_a.fileno(): side_b, side_b.fileno(): side_a}
    delay, late = args.delay_ms / 1000.0, args.late_ms / 1000.0
    held = []  # (due, order, socket to send on, frame)
    order = late_count = forwarded = send_failures = data_from_b = queue_drops = 0
    # The bottleneck: when each frame queued for it leaves it.
    leaving = collections.deque()
    link_free = 0.0
    stop = False

    def on_term(_sig, _frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    print("ready", flush=True)
    end = time.monotonic() + args.limit
    poller = select.poll()
    for s in (side_a, side_b):
        poller.register(s, select.POLLIN)
    # The queue and delays run on the kernel's receive times, so a relay
    # short of CPU that reads a backlog at once still sees its frames come
    # as they came (it sends them late, but drops none a real queue would
    # have passed).
    realtime_offset = time.time() - time.monotonic()
    while not stop and time.monotonic() < end:
        now = time.monotonic()
        wait_ms = 100 if not held else max(0.0, (held[0][0] - now) * 1000.0)
        for fd, _ev in poller.poll(wait_ms):
            src = side_a if fd == side_a.fileno() else side_b
            while True:
                try:
                    frame, ancdata, _flags, addr = src.recvmsg(65536, 64)
                except BlockingIOError:
                    break
                if addr[2] == PACKET_OUTGOING:
                    continue  # our own send on this interface
                arrived = received_at(ancdata, realtime_offset) or time.monotonic()
                due = arrived + delay
                if src is side_b and args.rate_mbit > 0:
                    while leaving and leaving[0] <= arrived:
                        leaving.popleft()
                    if len(leaving) >= args.queue:
                        queue_drops += 1
                        continue
                    link_free = max(link_free, arrived) + len(frame) * 8 / (
                        args.rate_mbit * 1e6
                    )
                    leaving.append(link_free)
                    due = link_free + delay
                if src is side_b and tcp_payload_len(frame) > 0:
                    data_from_b += 1
                    if args.every > 0 and data_from_b % args.every == 0:
                        due += late
                        late_count += 1
                order += 1
                heapq.heappush(held, (due, order, other[fd], frame))
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, _, dst, frame = heapq.heappop(held)
            try:
                dst.send(frame)
                forwarded += 1
            except OSError:
                send_failures += 1
    kernel_drops = 0
    for s in (side_a, side_b):
        _packets, drops = struct.unpack(
            "II", s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        )
        kernel_drops += drops
    print(
        f"late {late_count} forwarded {forwarded} dropped {kernel_drops + send_failures}"
        f" queue_drops {queue_drops}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
