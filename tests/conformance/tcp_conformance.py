#!/usr/bin/env python3
"""TCP conformance checks for dpd, run inside the lab's client namespace.

Hand-built segments (scapy) go from the client veth to dpd's built-in HTTP
responder VIP (port 80); dpd's answers are read from an AF_PACKET socket on
the same veth and checked against the RFC rule each check names. Each check
prints `PASS name` or `FAIL name: why`; the exit status is 1 if any failed.

    tcp_conformance.py --dut 10.77.0.1 --src 10.77.0.2 [--iface veth-cli]
    tcp_conformance.py --dut fd00:77::1 --src fd00:77::2 ...   (over IPv6)
                       [--control /path/to/control.sock]
                       [--group main|cookies_off] [--only NAME ...]

The checks are written to the RFC text, not to what dpd does today; where
Linux behaves otherwise, the check's docstring says so and why.

Kernel resets: the kernel in this namespace owns --src but did not open the
connections made here, so it would answer dpd's SYN-ACKs and data with RST.
We keep the kernel's address and stop those resets with an nftables rule
(table inet tlsdp_conformance, output hook) that drops RSTs the kernel sends
from the script's source ports (PORT_LO..PORT_HI). Our own segments,
hand-made RSTs included, leave through an AF_PACKET socket below netfilter,
so the rule does not touch them. Checksums: scapy computes full IP and TCP
checksums (lab.sh also turns TX checksum offload off on the client veth).
"""

import argparse
import atexit
import json
import logging
import math
import random
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import defaultdict

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.layers.inet import IP, TCP  # noqa: E402
from scapy.layers.inet6 import IPv6, ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr  # noqa: E402
from scapy.layers.l2 import ARP, Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402

# Source ports the script uses (and whose kernel RSTs nft drops); the flood
# takes the top FLOOD_PORTS of them.
PORT_LO, PORT_HI = 20000, 29999
FLOOD_PORTS = 200
# The responder's body pattern (dataplane::app::responder::PATTERN).
PATTERN = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/"
NFT_TABLE = "tlsdp_conformance"
ETH_P_ALL = 0x0003
SO_RCVBUFFORCE = 33
T0 = time.monotonic()


# Whether the checks run over IPv6 (set from --dut).
V6 = False


def ip_layer(src, dst):
    """The IP header of our segments: IPv4 or IPv6 as --dut is."""
    return IPv6(src=src, dst=dst) if V6 else IP(src=src, dst=dst)


class Fail(Exception):
    """A check's expectation did not hold."""


def expect(cond, why):
    if not cond:
        raise Fail(why)


def sdiff(a, b):
    """a − b in sequence space (RFC 9293 §3.4), as a signed 32-bit value."""
    return (a - b + (1 << 31)) % (1 << 32) - (1 << 31)


def wrap(n):
    return n % (1 << 32)


# ---- received segments ----------------------------------------------------


class Seg:
    """One TCP segment from dpd, parsed from the raw frame."""

    __slots__ = ("t", "sport", "dport", "seq", "ack", "flags", "win", "opts",
                 "opt_len", "payload", "ip_len")

    def __init__(self, frame, t):
        ip = frame[14:]
        if frame[12:14] == b"\x86\xdd":
            # IPv6: a bare 40-byte header (dpd sends no extension headers).
            ihl = 40
            self.ip_len = 40 + struct.unpack("!H", ip[4:6])[0]
        else:
            ihl = (ip[0] & 15) * 4
            self.ip_len = struct.unpack("!H", ip[2:4])[0]
        tcp = ip[ihl:self.ip_len]
        (self.sport, self.dport, self.seq, self.ack, off_flags,
         self.win) = struct.unpack("!HHIIHH", tcp[:16])
        doff = (off_flags >> 12) * 4
        self.flags = "".join(c for bit, c in zip(range(8), "FSRPAUEC")
                             if off_flags & (1 << bit))
        self.opt_len = doff - 20
        self.opts = parse_options(tcp[20:doff])
        self.payload = bytes(tcp[doff:])
        self.t = t

    def has(self, flags):
        return all(f in self.flags for f in flags)

    def __repr__(self):
        return (f"<{self.flags or '.'} seq={self.seq} ack={self.ack} "
                f"win={self.win} len={len(self.payload)} opts={self.opts}>")


def parse_options(b):
    """TCP options as a dict: mss, wscale, sackok, sack [(l, r)], ts (val, ecr)."""
    opts, i = {}, 0
    while i < len(b):
        kind = b[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= len(b) or b[i + 1] < 2:
            opts["malformed"] = True
            break
        n = b[i + 1]
        body = b[i + 2:i + n]
        if kind == 2 and n == 4:
            opts["mss"] = struct.unpack("!H", body)[0]
        elif kind == 3 and n == 3:
            opts["wscale"] = body[0]
        elif kind == 4 and n == 2:
            opts["sackok"] = True
        elif kind == 5:
            opts["sack"] = [struct.unpack("!II", body[j:j + 8])
                            for j in range(0, len(body) - 7, 8)]
        elif kind == 8 and n == 10:
            opts["ts"] = struct.unpack("!II", body)
        i += n
    return opts


# ---- the link: raw frames in and out --------------------------------------


class Link:
    """AF_PACKET sockets on the client veth: frames out, dpd's TCP in.

    A thread files every TCP segment from dpd under its destination port,
    with its arrival time, so checks can wait for a condition with a
    timeout instead of sleeping."""

    def __init__(self, iface, src, dut):
        self.iface, self.src, self.dut = iface, src, dut
        with open(f"/sys/class/net/{iface}/address") as f:
            self.mac = f.read().strip()
        self.rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                                socket.htons(ETH_P_ALL))
        self.rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
        self.rx.bind((iface, 0))
        self.tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self.tx.bind((iface, 0))
        self.cond = threading.Condition()
        self.queues = defaultdict(list)
        self.dut_mac = None
        self.next_port = random.randrange(PORT_LO, PORT_HI - FLOOD_PORTS - 2000)
        self.conns = []
        self.running = True
        self.thread = threading.Thread(target=self._receive, daemon=True)
        self.thread.start()

    def _receive(self):
        dut = socket.inet_pton(socket.AF_INET6 if V6 else socket.AF_INET, self.dut)
        while self.running:
            ready, _, _ = select.select([self.rx], [], [], 0.1)
            if not ready:
                continue
            frame, addr = self.rx.recvfrom(65536)
            t = time.monotonic()
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            etype = frame[12:14]
            if etype == b"\x08\x06" and frame[20:22] == b"\x00\x02" \
                    and frame[28:32] == dut:
                with self.cond:
                    self.dut_mac = ":".join(f"{b:02x}" for b in frame[22:28])
                    self.cond.notify_all()
            elif etype == b"\x86\xdd" and frame[20] == 58 and frame[54] == 136 \
                    and frame[62:78] == dut:
                # A Neighbor Advertisement for dpd's address.
                with self.cond:
                    self.dut_mac = ":".join(f"{b:02x}" for b in frame[6:12])
                    self.cond.notify_all()
            elif (etype == b"\x08\x00" and frame[23] == 6 and frame[26:30] == dut) or \
                    (etype == b"\x86\xdd" and frame[20] == 6 and frame[22:38] == dut):
                seg = Seg(frame, t)
                with self.cond:
                    self.queues[seg.dport].append(seg)
                    self.cond.notify_all()

    def resolve(self):
        """Learns dpd's MAC address (ARP, or a Neighbor Solicitation)."""
        if V6:
            target = socket.inet_pton(socket.AF_INET6, self.dut)
            group = "ff02::1:ff" + target[13:14].hex() + ":" + target[14:16].hex()
            group_mac = "33:33:ff:" + ":".join(f"{b:02x}" for b in target[13:16])
            req = Ether(dst=group_mac, src=self.mac) / IPv6(
                src=self.src, dst=group, hlim=255) / ICMPv6ND_NS(tgt=self.dut) / \
                ICMPv6NDOptSrcLLAddr(lladdr=self.mac)
        else:
            req = Ether(dst="ff:ff:ff:ff:ff:ff", src=self.mac) / ARP(
                op=1, hwsrc=self.mac, psrc=self.src, pdst=self.dut)
        for _ in range(10):
            self.tx.send(bytes(req))
            with self.cond:
                self.cond.wait_for(lambda: self.dut_mac, 0.5)
                if self.dut_mac:
                    return
        raise SystemExit(f"no ARP or ND reply from {self.dut} on {self.iface}")

    def frame(self, ip_packet):
        return bytes(Ether(dst=self.dut_mac, src=self.mac) / ip_packet)

    def send_frames(self, frames):
        for f in frames:
            self.tx.send(f)

    def new_port(self):
        self.next_port += 1
        return self.next_port

    def next_seg(self, port, pos, timeout):
        """The pos-th segment dpd sent to port, waiting up to timeout."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self.cond:
            while len(self.queues[port]) <= pos:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)
            return self.queues[port][pos]

    def count(self, port):
        with self.cond:
            return len(self.queues[port])

    def cleanup(self):
        """Resets the connections a check left open, so dpd holds no state
        for them (half-open slots matter: the flood check counts them)."""
        for c in self.conns:
            c.abort()
        self.conns = []


# ---- a hand-driven connection ---------------------------------------------


def http_get(path, version="1.1", close=False):
    head = f"GET {path} HTTP/{version}\r\nHost: dut\r\n"
    if close:
        head += "Connection: close\r\n"
    return (head + "\r\n").encode()


def response_complete(data):
    """(complete, head, body) for an HTTP response in data."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return False, None, None
    head = bytes(data[:end + 4])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = bytes(data[end + 4:])
    return len(body) >= length, head, body[:length]


def pattern_ok(body):
    return all(b == PATTERN[i % 64] for i, b in enumerate(body))


class Conn:
    """Our side of one connection to dpd, driven segment by segment.

    snd_nxt is our next sequence number, rcv_nxt the next byte we expect
    from dpd; peer_ack the last ACK dpd sent (dpd's RCV.NXT), used to reset
    at the exact sequence number."""

    def __init__(self, link, dport=80, mss=1460, wscale=None, sack=False,
                 ts=False, window=65535):
        self.link, self.dport = link, dport
        self.sport = link.new_port()
        self.mss, self.wscale, self.sack, self.ts = mss, wscale, sack, ts
        self.window = window
        self.iss = random.getrandbits(32)
        self.snd_nxt = self.iss
        self.rcv_nxt = 0
        self.peer_ack = None
        self.peer_iss = None
        self.shift = 0  # our window scale, once both sides offered it
        self.ts_base = random.randrange(1 << 24, 1 << 30)
        self.ts_recent = 0
        self.pos = 0
        self.seen = []
        self.closed = False
        link.conns.append(self)

    # -- sending --

    def tsval(self):
        return wrap(self.ts_base + int((time.monotonic() - T0) * 1000))

    def segment(self, flags, seq=None, ack=None, payload=b"", window=None,
                options=None, tsval=None):
        """An IP/TCP packet of this connection (not sent)."""
        if seq is None:
            seq = self.snd_nxt
        if ack is None:
            ack = self.rcv_nxt if "A" in flags else 0
        if window is None:
            window = min(65535, self.window >> self.shift)
        if options is None:
            options = []
            if self.ts and "R" not in flags:
                v = self.tsval() if tsval is None else tsval
                options = [("NOP", None), ("NOP", None),
                           ("Timestamp", (v, self.ts_recent))]
        pkt = ip_layer(self.link.src, self.link.dut) / TCP(
            sport=self.sport, dport=self.dport, flags=flags, seq=wrap(seq),
            ack=wrap(ack), window=window, options=options)
        if payload:
            pkt = pkt / Raw(payload)
        return pkt

    def send(self, flags="A", payload=b"", advance=True, **kw):
        """Sends a segment; with advance, snd_nxt moves past it when it was
        sent at snd_nxt."""
        seq = kw.get("seq", self.snd_nxt)
        self.link.send_frames([self.link.frame(self.segment(flags, payload=payload, **kw))])
        if advance and seq == self.snd_nxt:
            self.snd_nxt = wrap(self.snd_nxt + len(payload)
                                + ("S" in flags) + ("F" in flags))

    def syn_options(self, tsval=None):
        opts = []
        if self.mss is not None:
            opts.append(("MSS", self.mss))
        if self.sack:
            opts.append(("SAckOK", b""))
        if self.ts:
            opts.append(("Timestamp", (self.tsval() if tsval is None else tsval, 0)))
        if self.wscale is not None:
            opts += [("NOP", None), ("WScale", self.wscale)]
        return opts

    def send_syn(self, tsval=None):
        """Sends our SYN (again, if sent before: same ISN)."""
        self.link.send_frames([self.link.frame(self.segment(
            "S", seq=self.iss, ack=0, window=min(self.window, 65535),
            options=self.syn_options(tsval)))])
        self.snd_nxt = wrap(self.iss + 1)

    def syn(self, timeout=2.0, tsval=None):
        """SYN, then waits for the SYN-ACK (returned); no final ACK."""
        self.send_syn(tsval)
        sa = self.recv(timeout, lambda s: s.has("SA") or "R" in s.flags)
        expect(sa is not None, "no SYN-ACK")
        expect("R" not in sa.flags, f"SYN answered with a reset {sa}")
        expect(sa.ack == self.snd_nxt, f"SYN-ACK acks {sa.ack}, not ISN+1 {self.snd_nxt}")
        self.peer_iss = sa.seq
        self.rcv_nxt = wrap(sa.seq + 1)
        if self.wscale is not None and "wscale" in sa.opts:
            self.shift = self.wscale
        return sa

    def open(self, **kw):
        """The three-way handshake; returns dpd's SYN-ACK."""
        sa = self.syn(**kw)
        self.send("A")
        return sa

    # -- receiving --

    def _note(self, s):
        self.seen.append(s)
        if "A" in s.flags:
            self.peer_ack = s.ack
        if "ts" in s.opts:
            self.ts_recent = s.opts["ts"][0]
        if "R" in s.flags:
            self.closed = True

    def recv(self, timeout=1.0, pred=None):
        """The next segment from dpd (matching pred; others are passed
        over), or None after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            s = self.link.next_seg(self.sport, self.pos, deadline - time.monotonic())
            if s is None:
                return None
            self.pos += 1
            self._note(s)
            if pred is None or pred(s):
                return s

    def collect(self, duration):
        """Every segment dpd sends within duration seconds from now."""
        out, deadline = [], time.monotonic() + duration
        while True:
            s = self.recv(deadline - time.monotonic())
            if s is None:
                return out
            out.append(s)

    def ack(self, window=None):
        self.send("A", window=window)

    def read(self, data=None, until_fin=False, min_bytes=None, timeout=5.0):
        """Receives dpd's bytes in order, ACKing each segment, until the
        HTTP response is complete (and with until_fin, dpd's FIN came), or
        min_bytes arrived, or timeout. Returns (data, fin)."""
        data = bytearray(data or b"")
        fin = False
        deadline = time.monotonic() + timeout
        while True:
            done, _, _ = response_complete(data)
            if min_bytes is not None and len(data) >= min_bytes:
                break
            if min_bytes is None and done and (fin or not until_fin):
                break
            s = self.recv(deadline - time.monotonic())
            if s is None:
                break
            if "R" in s.flags:
                raise Fail(f"reset by dpd after {len(data)} bytes: {s}")
            if not s.payload and "F" not in s.flags:
                continue
            off = sdiff(s.seq, self.rcv_nxt)
            if off <= 0 and -off < len(s.payload):
                new = s.payload[-off:]
                data += new
                self.rcv_nxt = wrap(self.rcv_nxt + len(new))
            if "F" in s.flags and wrap(s.seq + len(s.payload)) == self.rcv_nxt:
                fin = True
                self.rcv_nxt = wrap(self.rcv_nxt + 1)
            self.ack()
        return bytes(data), fin

    def get(self, path, timeout=5.0):
        """Sends GET path and reads the whole response; returns the body."""
        self.send("PA", http_get(path))
        data, _ = self.read(timeout=timeout)
        done, head, body = response_complete(data)
        expect(done, f"incomplete response to GET {path}: {len(data)} bytes")
        return head, body

    def expect_alive(self):
        """The connection still serves a request."""
        try:
            _, body = self.get("/bytes/10", timeout=2.0)
        except Fail as e:
            raise Fail(f"connection did not survive: {e}") from None
        expect(body == PATTERN[:10], f"wrong body {body!r}")

    def abort(self):
        """Resets the connection at dpd's RCV.NXT (best effort)."""
        if self.closed:
            return
        seq = self.peer_ack if self.peer_ack is not None else self.snd_nxt
        self.link.send_frames([self.link.frame(self.segment("R", seq=seq, ack=0))])
        self.closed = True


# ---- control socket -------------------------------------------------------


def dpd_stats(path):
    """dpd's total counters (control API `stats`), or None without a socket."""
    if not path:
        return None
    time.sleep(0.05)  # engines publish their counters every 1 ms
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(b'{"cmd":"stats"}\n')
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)["stats"]["total"]


# ---- the checks -----------------------------------------------------------

CHECKS = []


def check(group="main"):
    def register(f):
        CHECKS.append((group, f))
        return f
    return register


@check()
def synack_carries_mss_rfc9293_3_7_1(ctx):
    """RFC 9293 §3.7.1: a TCP SHOULD send an MSS option in every SYN when
    its receive MSS differs from the default 536 (SHLD-5): dpd's SYN-ACK
    carries one, with or without options in our SYN, no larger than the
    link's 1500-byte MTU allows (1460)."""
    for kw in ({"mss": None}, {"mss": 1460, "sack": True, "ts": True, "wscale": 7}):
        c = Conn(ctx.link, **kw)
        sa = c.syn()
        expect("mss" in sa.opts, f"SYN-ACK to a SYN with {kw} has no MSS: {sa}")
        expect(536 <= sa.opts["mss"] <= 1460, f"SYN-ACK MSS {sa.opts['mss']}")
        c.abort()


@check()
def synack_window_scale_only_if_offered_rfc7323_2_2(ctx):
    """RFC 7323 §2.2: a TCP MAY send the Window Scale option in a SYN-ACK
    only if it received one in the SYN; when offered, dpd answers with its
    own shift (≤ 14, §2.3)."""
    c = Conn(ctx.link, wscale=7)
    sa = c.syn()
    expect("wscale" in sa.opts, f"no Window Scale in the SYN-ACK to a SYN with one: {sa}")
    expect(sa.opts["wscale"] <= 14, f"shift {sa.opts['wscale']} > 14")
    c.abort()
    c = Conn(ctx.link)
    sa = c.syn()
    expect("wscale" not in sa.opts, f"Window Scale in the SYN-ACK to a SYN without: {sa}")


@check()
def synack_sack_permitted_only_if_offered_rfc2018_2(ctx):
    """RFC 2018 §2: SACK-permitted is sent in SYNs and SACK is used only
    when both ends sent it; dpd's SYN-ACK carries it when our SYN did, and
    not otherwise (as Linux: an unsolicited one would mean nothing)."""
    c = Conn(ctx.link, sack=True)
    sa = c.syn()
    expect(sa.opts.get("sackok"), f"no SACK-permitted in the SYN-ACK to a SYN with it: {sa}")
    c.abort()
    c = Conn(ctx.link)
    sa = c.syn()
    expect(not sa.opts.get("sackok"), f"SACK-permitted in the SYN-ACK to a SYN without: {sa}")


@check()
def synack_timestamps_echo_tsval_rfc7323_3_2(ctx):
    """RFC 7323 §3.2: the SYN-ACK to a SYN with TSopt carries TSopt whose
    TSecr echoes the SYN's TSval; a TCP MAY send TSopt in other segments
    only if the SYN carried it, so a SYN without gets a SYN-ACK without."""
    c = Conn(ctx.link, ts=True)
    sa = c.syn(tsval=0x12345678)
    expect("ts" in sa.opts, f"no TSopt in the SYN-ACK to a SYN with one: {sa}")
    expect(sa.opts["ts"][1] == 0x12345678,
           f"TSecr {sa.opts['ts'][1]:#x}, not the SYN's TSval 0x12345678")
    c.abort()
    c = Conn(ctx.link)
    sa = c.syn()
    expect("ts" not in sa.opts, f"TSopt in the SYN-ACK to a SYN without: {sa}")


@check()
def synack_window_unscaled_rfc7323_2_2(ctx):
    """RFC 7323 §2.2: the window field of a SYN or SYN-ACK is never
    scaled. We compare the SYN-ACK's window field with the window dpd
    advertises once scaling applies (field << shift): the SYN-ACK's field
    must be that window capped at 65535, not the window >> shift."""
    c = Conn(ctx.link, wscale=7, sack=True, ts=True, window=1 << 20)
    sa = c.open()
    shift = sa.opts.get("wscale", 0)
    expect(shift > 0, f"dpd offered no window scale, nothing to compare: {sa}")
    c.get("/bytes/1")
    later = [s for s in c.seen[1:] if "A" in s.flags]
    expect(later, "no segment after the handshake")
    real = later[-1].win << shift
    want = min(real, 65535)
    expect(sa.win >= want - (1 << shift),
           f"SYN-ACK window field {sa.win}, but dpd's window is {real} bytes "
           f"(field {later[-1].win} << {shift}): the SYN-ACK's looks scaled")


@check()
def duplicate_syn_in_syn_received_gets_synack_rfc9293_3_10_7_4(ctx):
    """RFC 9293 §3.10.7.4 / §3.8.1: a retransmitted SYN (same ISN) in
    SYN-RECEIVED means our SYN-ACK was lost; it is answered with the SYN-ACK
    again (a retransmission: same ISS, ack ISN+1), at once rather than at
    the next RTO. (The letter of §3.10.7.4's first check would answer the
    unacceptable segment with a bare ACK <SEQ=ISS+1>, which cannot
    synchronize a peer that never saw the SYN-ACK; Linux, too, retransmits
    the SYN-ACK for a duplicate SYN: tcp_check_req.)"""
    c = Conn(ctx.link, sack=True, ts=True)
    sa = c.syn()
    c.send_syn()
    s = c.recv(0.5)  # well before the 1 s retransmission timeout
    expect(s is not None, "no answer to the duplicate SYN within 0.5 s")
    expect(s.has("SA"), f"duplicate SYN answered with {s}, not the SYN-ACK")
    expect(s.seq == sa.seq and s.ack == wrap(c.iss + 1),
           f"second SYN-ACK {s} differs from the first {sa}")


@check()
def synack_retransmitted_with_backoff_rfc6298_5(ctx):
    """RFC 6298 §2.1 and §5: with no RTT sample the RTO is 1 s; when it
    expires the SYN-ACK is retransmitted and the RTO doubled (§5.5). With
    no final ACK, the first retransmission comes ≈1 s after the SYN-ACK,
    the second ≈2 s after the first."""
    c = Conn(ctx.link)
    sa = c.syn()
    r1 = c.recv(2.5, lambda s: s.has("SA"))
    expect(r1 is not None, "no SYN-ACK retransmission within 2.5 s")
    r2 = c.recv(4.0, lambda s: s.has("SA"))
    expect(r2 is not None, "no second SYN-ACK retransmission within 4 s of the first")
    g1, g2 = r1.t - sa.t, r2.t - r1.t
    expect(r1.seq == sa.seq and r2.seq == sa.seq, "retransmissions with another ISS")
    expect(0.8 <= g1 <= 1.5, f"first retransmission after {g1:.2f} s, want ≈1 s")
    expect(1.6 <= g2 <= 3.0, f"second retransmission {g2:.2f} s after the first, want ≈2 s")
    return f"retransmissions after {g1:.2f} s and {g2:.2f} s more"


@check()
def rst_exact_sequence_resets_rfc5961_3_2(ctx):
    """RFC 5961 §3.2 / RFC 9293 §3.10.7.4: an RST whose sequence number is
    exactly RCV.NXT resets the connection (no answer to the RST). A later
    segment of that 4-tuple meets the listener, which answers an ACK-bearing
    segment with <SEQ=SEG.ACK><CTL=RST> (§3.10.7.2), and the request in it
    is not served."""
    c = Conn(ctx.link, ts=True)
    c.open()
    c.send("R", seq=c.snd_nxt, ack=0, advance=False)
    s = c.recv(0.3)
    expect(s is None, f"the RST was answered: {s}")
    c.closed = False  # the next segment is ours to see answered
    c.send("PA", http_get("/bytes/10"))
    s = c.recv(1.0)
    expect(s is not None, "no answer to a segment after the reset")
    expect("R" in s.flags, f"segment after the reset answered with {s}, not RST: still open?")
    expect(s.seq == c.rcv_nxt, f"RST seq {s.seq}, want SEG.ACK {c.rcv_nxt}")
    extra = [x for x in c.collect(0.3) if x.payload]
    expect(not extra, "request served after the reset")


@check()
def rst_in_window_gets_challenge_ack_rfc5961_3_2(ctx):
    """RFC 5961 §3.2: an RST in the receive window but not at RCV.NXT gets
    a challenge ACK <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK> and the connection
    goes on."""
    c = Conn(ctx.link, ts=True)
    c.open()
    c.send("R", seq=wrap(c.snd_nxt + 1000), ack=0, advance=False)
    s = c.recv(0.5)
    expect(s is not None, "no challenge ACK for an in-window RST")
    expect(s.flags == "A" and s.ack == c.snd_nxt and s.seq == c.rcv_nxt,
           f"answer {s}, want a bare ACK seq={c.rcv_nxt} ack={c.snd_nxt}")
    c.expect_alive()


@check()
def rst_out_of_window_ignored_rfc5961_3_2(ctx):
    """RFC 5961 §3.2 / RFC 9293 §3.10.7.4: an RST outside the receive
    window is silently dropped: no answer, the connection goes on."""
    c = Conn(ctx.link, ts=True)
    c.open()
    c.send("R", seq=wrap(c.snd_nxt + (1 << 30)), ack=0, advance=False)
    s = c.recv(0.5)
    expect(s is None, f"out-of-window RST answered with {s}")
    c.expect_alive()


@check()
def syn_in_established_gets_challenge_ack_rfc5961_4_2(ctx):
    """RFC 5961 §4.2: a SYN in a synchronized state, whatever its sequence
    number, gets a challenge ACK <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>; the
    connection is not reset and goes on."""
    c = Conn(ctx.link, ts=True)
    c.open()
    c.send("S", seq=wrap(c.snd_nxt + 100), ack=0, advance=False,
           options=[("MSS", 1460)])
    s = c.recv(0.5)
    expect(s is not None, "no challenge ACK for a SYN in ESTABLISHED")
    expect(s.flags == "A" and s.ack == c.snd_nxt and s.seq == c.rcv_nxt,
           f"answer {s}, want a bare ACK seq={c.rcv_nxt} ack={c.snd_nxt}")
    c.expect_alive()


def send_request_with_bad_ack(ctx, ack_offset):
    """An established connection, then a request whose SEG.ACK is dpd's
    SND.UNA + ack_offset; returns (conn, what dpd sent within 0.8 s)."""
    c = Conn(ctx.link, ts=True)
    c.open()
    c.send("PA", http_get("/bytes/10"), ack=wrap(c.rcv_nxt + ack_offset), advance=False)
    return c, c.collect(0.8)


@check()
def ack_below_window_discarded_rfc5961_5_2(ctx):
    """RFC 5961 §5.2: a segment is acceptable only if SND.UNA − MAX.SND.WND
    ≤ SEG.ACK ≤ SND.NXT; one with SEG.ACK = SND.UNA − 2^30 is discarded and
    answered with a (challenge) ACK: its data is not delivered (the HTTP
    request in it gets no response) nor acknowledged. (RFC 9293 alone
    ignores an old ACK and takes the data; Linux follows RFC 5961 here.)"""
    c, segs = send_request_with_bad_ack(ctx, -(1 << 30))
    expect(not any(s.payload for s in segs), "the request was served: its data was delivered")
    expect(any(s.flags == "A" and s.ack == c.snd_nxt for s in segs),
           f"no challenge ACK (ack={c.snd_nxt}) in {segs}")
    expect(all(sdiff(s.ack, c.snd_nxt) <= 0 for s in segs), f"the data was acknowledged: {segs}")


@check()
def ack_of_unsent_data_dropped_rfc9293_3_10_7_4(ctx):
    """RFC 9293 §3.10.7.4 (fifth, ESTABLISHED): if SEG.ACK > SND.NXT (it
    acknowledges something not yet sent), send an ACK, drop the segment
    and return: the request in it gets no response (RFC 5961 §5.2 too)."""
    c, segs = send_request_with_bad_ack(ctx, 100000)
    expect(not any(s.payload for s in segs), "the request was served: its data was delivered")
    expect(any(s.flags == "A" and s.ack == c.snd_nxt for s in segs),
           f"no ACK (ack={c.snd_nxt}) in {segs}")
    expect(all(sdiff(s.ack, c.snd_nxt) <= 0 for s in segs), f"the data was acknowledged: {segs}")


@check()
def paws_old_timestamp_dropped_rfc7323_5_3(ctx):
    """RFC 7323 §5.3 (R1): on a connection with timestamps, a segment whose
    TSval is older than TS.Recent is not acceptable: send an ACK and drop
    it. Our request carries TSval = TS.Recent − 100000 (modulo 2^32): dpd
    ACKs without covering it and does not serve it."""
    c = Conn(ctx.link, ts=True)
    c.open()
    old = wrap(c.tsval() - 100000)
    c.send("PA", http_get("/bytes/10"), tsval=old, advance=False)
    segs = c.collect(0.8)
    expect(not any(s.payload for s in segs), "the old-TSval request was served (PAWS)")
    expect(all(sdiff(s.ack, c.snd_nxt) <= 0 for s in segs), f"the data was acknowledged: {segs}")
    expect(any(s.flags == "A" and s.ack == c.snd_nxt for s in segs),
           f"no ACK for the old-TSval segment in {segs}")
    c.expect_alive()


@check()
def segment_without_timestamp_dropped_rfc7323_3_2(ctx):
    """RFC 7323 §3.2: once timestamps are negotiated, a non-RST segment
    without TSopt SHOULD be silently dropped, and the connection MUST NOT
    be aborted for it. Our request without TSopt is not delivered (no
    response, not acknowledged; an ACK that does not cover it is tolerated),
    and the connection then serves a request with TSopt. (Linux accepts
    such segments, for peers and middleboxes that strip options; dpd's
    decision follows the RFC.)"""
    c = Conn(ctx.link, ts=True)
    c.open()
    c.send("PA", http_get("/bytes/10"), options=[], advance=False)
    segs = c.collect(0.8)
    expect(not any(s.payload for s in segs), "the request without TSopt was served")
    expect(all(sdiff(s.ack, c.snd_nxt) <= 0 for s in segs), f"the data was acknowledged: {segs}")
    c.expect_alive()


@check()
def out_of_order_segment_gets_immediate_sack_rfc2018_4(ctx):
    """RFC 5681 §4.2: a receiver SHOULD send an immediate duplicate ACK for
    an out-of-order segment; RFC 2018 §4: with SACK permitted, that ACK
    carries SACK blocks, the first covering the segment that triggered it.
    We send the second half of a request first: within 200 ms (well under
    any delayed-ACK time) comes ACK = RCV.NXT with that block."""
    c = Conn(ctx.link, sack=True, ts=True)
    c.open()
    req = http_get("/bytes/10")
    left = wrap(c.snd_nxt + 10)
    c.send("PA", req[10:], seq=left, advance=False)
    s = c.recv(0.2)
    expect(s is not None, "no immediate ACK for an out-of-order segment")
    expect(s.ack == c.snd_nxt, f"ACK {s.ack}, want the duplicate {c.snd_nxt}")
    blocks = s.opts.get("sack")
    expect(blocks, f"no SACK blocks in {s}")
    expect(blocks[0] == (left, wrap(c.snd_nxt + len(req))),
           f"first SACK block {blocks[0]}, want {(left, wrap(c.snd_nxt + len(req)))}")


@check()
def hole_fill_gets_cumulative_ack_rfc5681_4_2(ctx):
    """RFC 5681 §4.2 / RFC 9293 §3.10.7.4: a segment that fills the hole
    is acknowledged at once with a cumulative ACK covering the data held
    behind it, and the whole request is delivered (served)."""
    c = Conn(ctx.link, sack=True, ts=True)
    c.open()
    req = http_get("/bytes/10")
    c.send("PA", req[10:], seq=wrap(c.snd_nxt + 10), advance=False)
    c.recv(0.2)
    c.send("PA", req[:10], advance=False)
    end = wrap(c.snd_nxt + len(req))
    s = c.recv(0.2, lambda s: s.ack == end)
    expect(s is not None, f"no cumulative ACK {end} within 200 ms of filling the hole")
    c.snd_nxt = end
    data, _ = c.read(data=None, timeout=2.0)
    done, _, body = response_complete(data)
    expect(done and body == PATTERN[:10], f"request not served: {data[:80]!r}")


@check()
def zero_window_probes_back_off_rfc9293_3_8_6_1(ctx):
    """RFC 9293 §3.8.6.1 / RFC 1122 §4.2.2.17: facing a zero window the
    sender probes it, the first probe after an RTO and then at
    exponentially growing intervals, and keeps the connection open as long
    as the probes are ACKed, even with window 0. We take two full segments
    (2920 bytes; 2880 over IPv6, whose segments are 20 bytes shorter: a
    remainder below a segment and below half the largest window would
    rightly wait for the persist timer, §3.8.6.2.1 MUST-38) of
    a 100 kB response, ACK them with window 0 and ACK each probe with
    window 0 (not taking its byte); we want ≥ 3 probes within 8.5 s, each
    interval ≥ 1.3× the one before, then a window update lets the response
    finish."""
    two = 2 * (1440 if V6 else 1460)
    c = Conn(ctx.link, window=two)
    c.open()
    c.send("PA", http_get("/bytes/100000"))
    got = bytearray()
    deadline = time.monotonic() + 2.0
    while len(got) < two and time.monotonic() < deadline:
        s = c.recv(deadline - time.monotonic(), lambda s: s.payload)
        if s is not None and s.seq == c.rcv_nxt:
            got += s.payload
            c.rcv_nxt = wrap(c.rcv_nxt + len(s.payload))
    expect(len(got) == two, f"dpd sent {len(got)} bytes into a {two}-byte window")
    c.window = 0
    c.ack()
    t_zero = time.monotonic()
    probes = []
    while len(probes) < 4 and time.monotonic() < t_zero + 8.5:
        s = c.recv(t_zero + 8.5 - time.monotonic())
        if s is None:
            break
        expect("R" not in s.flags, f"connection reset during the zero window: {s}")
        probes.append(s.t)
        c.ack()  # window 0, RCV.NXT unchanged: the probe's byte is not taken
    times = [t_zero] + probes
    gaps = [b - a for a, b in zip(times, times[1:])]
    shown = ", ".join(f"{g:.2f}" for g in gaps)
    expect(len(probes) >= 3, f"{len(probes)} probe(s) in 8.5 s (intervals {shown} s)")
    expect(all(b >= 1.3 * a for a, b in zip(gaps, gaps[1:])),
           f"probe intervals do not grow: {shown} s")
    c.window = 65535
    c.ack()
    data, _ = c.read(data=got, timeout=5.0)
    done, _, body = response_complete(data)
    expect(done and len(body) == 100000 and pattern_ok(body),
           f"response incomplete after the window opened: {len(data)} bytes")
    return f"probe intervals {shown} s"


@check()
def fin_with_request_gets_response_then_fin_rfc9293_3_6(ctx):
    """RFC 9293 §3.6 / §3.10.7.4 (eighth): a FIN in the segment carrying
    the request closes only our direction: dpd ACKs it, sends the whole
    response and then its FIN (CLOSE-WAIT → LAST-ACK); our ACK of that FIN
    ends the connection, so nothing more comes."""
    c = Conn(ctx.link, ts=True)
    c.open()
    c.send("FPA", http_get("/bytes/20000"))
    data, fin = c.read(until_fin=True, timeout=5.0)
    done, _, body = response_complete(data)
    expect(done and len(body) == 20000 and pattern_ok(body),
           f"response incomplete: {len(data)} bytes")
    expect(fin, "no FIN from dpd after the response")
    expect(c.peer_ack == c.snd_nxt, f"our FIN not acknowledged (ack {c.peer_ack}, want {c.snd_nxt})")
    more = c.collect(0.5)
    expect(not more, f"dpd went on sending after our last ACK: {more}")
    c.closed = True


@check()
def half_close_data_still_arrives_rfc9293_3_6(ctx):
    """RFC 9293 §3.6: after our FIN, dpd (CLOSE-WAIT) may and does go on
    sending: a FIN arriving while a 200 kB response is under way still gets
    every byte, then dpd's FIN."""
    c = Conn(ctx.link, ts=True, sack=True)
    c.open()
    c.send("PA", http_get("/bytes/200000"))
    data, _ = c.read(min_bytes=1, timeout=2.0)
    c.send("FA")
    data, fin = c.read(data=data, until_fin=True, timeout=10.0)
    done, _, body = response_complete(data)
    expect(done and len(body) == 200000 and pattern_ok(body),
           f"response incomplete after our FIN: {len(data)} bytes")
    expect(fin, "no FIN from dpd after the response")
    c.closed = True


@check()
def rst_in_time_wait_ignored_rfc1337(ctx):
    """RFC 1337 (TIME-WAIT assassination, fix F1): an RST in TIME-WAIT is
    ignored, so the TIME-WAIT state survives it. dpd closes first (HTTP/1.0),
    we ACK its FIN and send ours; once dpd ACKs it (TIME-WAIT) we send an
    RST at exactly RCV.NXT, then retransmit our FIN: it must still be ACKed
    (RFC 9293 §3.10.7.4: a FIN in TIME-WAIT is acknowledged and the 2 MSL
    timer restarted), not answered with RST. (RFC 9293 itself lets an RST
    close TIME-WAIT, and Linux does so by default, net.ipv4.tcp_rfc1337 = 0.)"""
    c = Conn(ctx.link, ts=True)
    c.open()
    c.send("PA", http_get("/bytes/100", version="1.0"))
    data, fin = c.read(until_fin=True, timeout=3.0)
    expect(fin, f"dpd did not close after an HTTP/1.0 response ({len(data)} bytes)")
    fin_seq = c.snd_nxt
    c.send("FA")
    s = c.recv(1.0, lambda s: s.ack == c.snd_nxt)
    expect(s is not None, "our FIN was not acknowledged: no TIME-WAIT")
    c.send("R", seq=c.snd_nxt, ack=0, advance=False)
    s = c.recv(0.3)
    expect(s is None, f"the RST in TIME-WAIT was answered: {s}")
    c.send("FA", seq=fin_seq, advance=False)
    s = c.recv(1.0)
    expect(s is not None, "no answer to a retransmitted FIN after the RST: TIME-WAIT gone?")
    expect(s.flags == "A" and s.ack == c.snd_nxt,
           f"retransmitted FIN answered with {s}, want an ACK of it: the RST ended TIME-WAIT")
    c.closed = True


@check()
def segments_fit_mtu_with_sack_blocks_rfc2018_3(ctx):
    """RFC 2018 §3 / RFC 9293 §3.7.1: TCP options, SACK blocks included,
    count against the segment size: with MSS 1460 on a 1500-byte link, a
    segment carrying timestamps and SACK blocks has less room for data. We
    keep an out-of-order range held at dpd (so its segments carry a SACK
    block) while it sends a 100 kB response: no IP packet over 1500 bytes.
    (The Rust test sets both veths' MTU to 9000 so that an oversize packet
    reaches us and is measured; a 1500-byte veth drops it, and the check
    then fails as a stalled response.)"""
    c = Conn(ctx.link, mss=1460, sack=True, ts=True, wscale=7, window=1 << 20)
    c.open()
    c.send("PA", http_get("/bytes/100000"))
    c.send("PA", b"x" * 20, seq=wrap(c.snd_nxt + 100), advance=False)
    data, _ = c.read(timeout=8.0)
    done, _, _ = response_complete(data)
    with open(f"/sys/class/net/{ctx.link.iface}/mtu") as f:
        mtu = int(f.read())
    expect(done, f"response incomplete: {len(data)} bytes (link MTU {mtu}: "
           "a veth drops frames over its MTU, so oversize segments look like a stall)")
    with_data = [s for s in c.seen if s.payload]
    expect(any("sack" in s.opts for s in with_data),
           "no SACK block in dpd's data segments although it holds out-of-order data")
    big = max(with_data, key=lambda s: s.ip_len)
    expect(big.ip_len <= 1500,
           f"IP packet of {big.ip_len} bytes (payload {len(big.payload)}, options {big.opt_len})")


@check()
def segments_within_peer_mss_rfc9293_3_7_1(ctx):
    """RFC 9293 §3.7.1 (and RFC 6691): a sender's segments carry at most the
    MSS its peer announced: data plus TCP options ≤ MSS. With MSS 1000 in
    our SYN (and timestamps), no segment of a 30 kB response exceeds it."""
    c = Conn(ctx.link, mss=1000, ts=True, window=1 << 16)
    c.open()
    c.send("PA", http_get("/bytes/30000"))
    data, _ = c.read(timeout=5.0)
    done, _, _ = response_complete(data)
    expect(done, f"response incomplete: {len(data)} bytes")
    big = max((s for s in c.seen if s.payload), key=lambda s: len(s.payload) + s.opt_len)
    expect(len(big.payload) <= 1000, f"segment payload {len(big.payload)} > MSS 1000")
    expect(len(big.payload) + big.opt_len <= 1000,
           f"payload {len(big.payload)} + options {big.opt_len} > MSS 1000")


def slow_round_trips(c, delay=0.03, rounds=5):
    """Requests answered with our ACKs held back `delay` s, so that dpd's
    SRTT (and with it the loss probe's timeout, 2·SRTT) is well above the
    time this script takes to answer a flight: the probe then cannot fire
    while we are still reading."""
    for _ in range(rounds):
        c.send("PA", http_get("/bytes/10"))
        data = bytearray()
        deadline = time.monotonic() + 2.0
        while not response_complete(data)[0] and time.monotonic() < deadline:
            s = c.recv(deadline - time.monotonic(), lambda s: s.payload)
            if s is not None and s.seq == c.rcv_nxt:
                data += s.payload
                c.rcv_nxt = wrap(c.rcv_nxt + len(s.payload))
        expect(response_complete(data)[0], "no answer to a warm-up request")
        time.sleep(delay)
        c.ack()


def first_flight(c, path):
    """Sends GET path and gathers dpd's data segments, unacknowledged,
    until the response is complete; returns them in order."""
    c.send("PA", http_get(path))
    segs = []
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        s = c.recv(deadline - time.monotonic(), lambda s: s.payload)
        if s is None:
            break
        segs.append(s)
        if response_complete(b"".join(x.payload for x in segs))[0]:
            break
    expect(response_complete(b"".join(x.payload for x in segs))[0],
           f"response incomplete: {len(segs)} segments")
    return segs


def unacknowledged_flight(ctx):
    """A SACK and timestamp connection with a slow SRTT, dpd's counters,
    then an 8 kB response's segments, none acknowledged yet."""
    c = Conn(ctx.link, sack=True, ts=True, wscale=7, window=1 << 20)
    c.open()
    slow_round_trips(c)
    before = dpd_stats(ctx.control)
    segs = first_flight(c, "/bytes/8000")
    expect(len(segs) >= 4, f"only {len(segs)} segments")
    return c, before, segs


def stat_delta(before, after, names):
    return {n: after[n] - before[n] for n in names}


LOSS_COUNTERS = ("tcp_tail_loss_probes", "tcp_rto_expiries", "tcp_rack_losses")


@check()
def tail_loss_probe_long_before_the_rto_rfc8985_7_3(ctx):
    """RFC 8985 §7.2–7.3: when the ACKs for the tail of a flight do not
    come, the sender sends a loss probe (the last segment again, or new
    data) a probe timeout (2·SRTT here: more than one segment is out) after
    the last ACK, long before the RTO (200 ms at least). We ACK an 8 kB
    response up to its second-to-last segment and no further: dpd's next
    data segment must come within 150 ms, counted as a tail loss probe and
    not as an RTO. (Linux probes the same way.)"""
    c, before, segs = unacknowledged_flight(ctx)
    hold = segs[-2].seq
    c.send("A", ack=hold)
    t = time.monotonic()
    s = c.recv(1.0, lambda s: s.payload)
    expect(s is not None, "nothing sent again within 1 s of the last ACK")
    took = s.t - t
    expect(sdiff(s.seq, hold) >= 0, f"resent {s}, below our ACK {hold}")
    expect(took < 0.15, f"first resend {took * 1000:.0f} ms after our ACK (an RTO, not a probe)")
    c.rcv_nxt = wrap(segs[-1].seq + len(segs[-1].payload))
    c.ack()
    if before is not None:
        d = stat_delta(before, dpd_stats(ctx.control), LOSS_COUNTERS)
        expect(d["tcp_tail_loss_probes"] >= 1 and d["tcp_rto_expiries"] == 0, f"counters {d}")
    c.expect_alive()
    return f"probe {took * 1000:.1f} ms after the last ACK"


@check()
def rack_resends_a_hole_with_one_segment_sacked_above_rfc8985_6_2(ctx):
    """RFC 8985 §6.2: a segment sent before one the receiver holds (it is
    SACKed), and still missing a reordering window later (min RTT/4), is
    lost, however few segments are SACKed above it (RFC 6675 alone wants
    three segments' worth, so would wait for a probe or the RTO). We ACK an
    8 kB response up to its third-to-last segment and SACK the last one:
    the hole must be sent again before a probe would be (2·SRTT), found by
    RACK (tcp_rack_losses), with no probe and no RTO. (Linux's RACK does
    the same.)"""
    c, before, segs = unacknowledged_flight(ctx)
    hole, last = segs[-2], segs[-1]
    end = wrap(last.seq + len(last.payload))
    c.rcv_nxt = hole.seq
    opts = [("NOP", None), ("NOP", None), ("Timestamp", (c.tsval(), c.ts_recent)),
            ("NOP", None), ("NOP", None), ("SAck", (last.seq, end))]
    c.send("A", options=opts)
    t = time.monotonic()
    s = c.recv(1.0, lambda s: s.payload)
    expect(s is not None, "the hole was not sent again within 1 s")
    took = s.t - t
    expect(s.seq == hole.seq, f"resent {s}, want the hole at {hole.seq}")
    c.rcv_nxt = end
    c.ack()
    if before is not None:
        d = stat_delta(before, dpd_stats(ctx.control), LOSS_COUNTERS)
        expect(d["tcp_rack_losses"] >= 1, f"not found by RACK: counters {d}")
        expect(d["tcp_tail_loss_probes"] == 0 and d["tcp_rto_expiries"] == 0,
               f"a probe or an RTO was needed: counters {d}")
    c.expect_alive()
    return f"hole resent {took * 1000:.1f} ms after the SACK"


@check()
def closed_port_syn_gets_rst_ack_rfc9293_3_10_7_1(ctx):
    """RFC 9293 §3.10.7.1 (CLOSED): a segment without ACK to a port with no
    listener gets <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>: for a SYN,
    ack = ISN + 1."""
    c = Conn(ctx.link, dport=81)
    c.send_syn()
    s = c.recv(1.0)
    expect(s is not None, "no answer from the closed port")
    expect(s.flags == "RA" and s.seq == 0 and s.ack == wrap(c.iss + 1),
           f"answer {s}, want RST,ACK seq=0 ack={wrap(c.iss + 1)}")


@check()
def closed_port_ack_gets_rst_at_seg_ack_rfc9293_3_10_7_1(ctx):
    """RFC 9293 §3.10.7.1 (CLOSED): a segment with ACK to a port with no
    listener gets <SEQ=SEG.ACK><CTL=RST> (no ACK bit)."""
    c = Conn(ctx.link, dport=81)
    ack = random.getrandbits(32)
    c.send("PA", b"hello", seq=c.iss, ack=ack)
    s = c.recv(1.0)
    expect(s is not None, "no answer from the closed port")
    expect(s.flags == "R" and s.seq == ack, f"answer {s}, want RST seq={ack}")


@check()
def challenge_ack_rate_limited_rfc5961_7(ctx):
    """RFC 5961 §7: challenge ACKs SHOULD be throttled (a count per time
    interval, left configurable), so forged segments cannot turn dpd into
    an ACK amplifier. The bound we hold dpd to: 100 per second (Linux's
    original tcp_challenge_ack_limit; Linux now allows 1000/s globally plus
    one per 500 ms per socket). 500 in-window RSTs, none at RCV.NXT, paced
    4 ms apart (so that each is processed on its own, not coalesced into
    one ACK per receive burst) get at least one challenge ACK but at most
    100 per second of the 2 s burst and 0.3 s after it (230, against 500
    without a limit); the connection survives them. (A dpd that shares its
    core with another busy process handles segments in batches and sends
    one ACK per batch, so it may pass without a limit: the PASS line gives
    the count.)"""
    c = Conn(ctx.link, ts=True)
    c.open()
    frames = [ctx.link.frame(c.segment("R", seq=wrap(c.snd_nxt + 1 + 64 * i), ack=0))
              for i in range(500)]
    t0 = time.monotonic()
    for i, f in enumerate(frames):
        while time.monotonic() < t0 + i * 0.004:
            time.sleep(0.0005)
        ctx.link.send_frames([f])
    burst = time.monotonic() - t0
    span = burst + 0.3
    segs = c.collect(t0 + span - time.monotonic())
    acks = [s for s in segs if s.flags == "A"]
    limit = math.ceil(100 * span)
    expect(acks, "no challenge ACK at all for 500 in-window RSTs")
    expect(len(acks) <= limit,
           f"{len(acks)} challenge ACKs for 500 RSTs in {span:.2f} s (limit {limit})")
    c.expect_alive()
    return f"{len(acks)} challenge ACKs for 500 RSTs in {span:.2f} s"


@check()
def syn_cookies_when_half_open_full_rfc4987_3_6(ctx):
    """RFC 4987 §3.6: once the half-open budget is spent (max_half_open =
    16 in this dpd's config, syn_cookies = "when_full"), SYNs are answered
    with cookies instead of being dropped; a client whose handshake meets a
    cookie still gets a connection that serves its request. We send 200
    SYNs that never complete (ports whose kernel resets nft drops), then
    open a connection: its SYN-ACK carries a cookie (the control socket's
    tcp_syn_cookies_accepted counts it) and it serves a request."""
    link = ctx.link
    before = dpd_stats(ctx.control)
    ports = list(range(PORT_HI - FLOOD_PORTS + 1, PORT_HI + 1))
    isns = {p: random.getrandbits(32) for p in ports}
    frames = [link.frame(ip_layer(link.src, link.dut) / TCP(
        sport=p, dport=80, flags="S", seq=isns[p], window=65535,
        options=[("MSS", 1460)])) for p in ports]
    link.send_frames(frames)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and sum(link.count(p) > 0 for p in ports) < len(ports):
        time.sleep(0.05)
    answered = sum(link.count(p) > 0 for p in ports)
    try:
        c = Conn(link, ts=True, sack=True)
        c.open()
        _, body = c.get("/bytes/1000")
        expect(body == (PATTERN * 16)[:1000], "wrong body")
        after = dpd_stats(ctx.control)
    finally:
        # Free the half-open slots the flood took.
        link.send_frames([link.frame(ip_layer(link.src, link.dut) / TCP(
            sport=p, dport=80, flags="R", seq=wrap(isns[p] + 1))) for p in ports])
    expect(answered >= FLOOD_PORTS - 10,
           f"only {answered} of {FLOOD_PORTS} flood SYNs answered: over the budget, "
           "SYNs must get cookies, not be dropped")
    if before is not None:
        sent = after["tcp_syn_cookies_sent"] - before["tcp_syn_cookies_sent"]
        took = after["tcp_syn_cookies_accepted"] - before["tcp_syn_cookies_accepted"]
        expect(sent >= FLOOD_PORTS - 16 - 10, f"only {sent} cookies sent for {FLOOD_PORTS} SYNs")
        expect(took >= 1, "our connection did not come in through a cookie "
               f"(tcp_syn_cookies_accepted +{took})")
        return f"{answered} flood SYNs answered, {sent} cookies sent, {took} accepted"
    return f"{answered} flood SYNs answered"


@check("cookies_off")
def forged_cookie_ack_refused_rfc9293_3_10_7_2(ctx):
    """RFC 9293 §3.10.7.2 (LISTEN) and RFC 4987 §3.6: with syn_cookies =
    "off" there are no cookies to validate: any ACK-bearing segment to the
    listener gets <SEQ=SEG.ACK><CTL=RST>. A bare ACK carrying a forged
    cookie, and then a request on the same 4-tuple, each get that RST, no
    response, and no connection is established (tcp_accepted unchanged)."""
    before = dpd_stats(ctx.control)
    c = Conn(ctx.link)
    ack = random.getrandbits(32)
    c.send("A", seq=wrap(c.iss + 1), ack=ack)
    s = c.recv(1.0)
    expect(s is not None, "no answer to a stray ACK to the listener")
    expect(s.flags == "R" and s.seq == ack, f"answer {s}, want RST seq={ack}")
    c.send("PA", http_get("/bytes/10"), seq=wrap(c.iss + 1), ack=ack)
    segs = c.collect(0.6)
    expect(not any(s.payload for s in segs), "the request was served")
    expect(any(s.flags == "R" and s.seq == ack for s in segs), f"no RST for the request: {segs}")
    after = dpd_stats(ctx.control)
    if before is not None:
        for k in ("tcp_accepted", "tcp_syn_cookies_accepted"):
            expect(after[k] == before[k], f"{k} went from {before[k]} to {after[k]}")
    c.closed = True


# ---- running --------------------------------------------------------------


def block_kernel_rsts():
    """nft: drop the kernel's RSTs from our source ports (see the module
    docstring); removed at exit."""
    rules = (f"table inet {NFT_TABLE} {{\n chain out {{ type filter hook output priority 0; "
             f"policy accept; tcp sport {PORT_LO}-{PORT_HI} tcp flags & rst == rst drop; }}\n}}\n")
    subprocess.run(["nft", "-f", "-"], input=rules.encode(), check=True)
    atexit.register(lambda: subprocess.run(["nft", "delete", "table", "inet", NFT_TABLE],
                                           stderr=subprocess.DEVNULL))


class Ctx:
    def __init__(self, link, control):
        self.link, self.control = link, control


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dut", required=True, help="dpd's address (the VIP)")
    ap.add_argument("--src", required=True, help="this namespace's address on --iface")
    ap.add_argument("--iface", default="veth-cli")
    ap.add_argument("--control", help="dpd's control socket (counter checks)")
    ap.add_argument("--group", default="main", choices=["main", "cookies_off"])
    ap.add_argument("--only", nargs="*", help="run only these checks")
    args = ap.parse_args()
    global V6
    V6 = ":" in args.dut

    block_kernel_rsts()
    link = Link(args.iface, args.src, args.dut)
    link.resolve()
    ctx = Ctx(link, args.control)
    failed = ran = 0
    for group, f in CHECKS:
        if group != args.group or (args.only and f.__name__ not in args.only):
            continue
        ran += 1
        t = time.monotonic()
        try:
            note = f(ctx)
            note = f": {note}" if note else ""
            print(f"PASS {f.__name__} ({time.monotonic() - t:.1f} s){note}")
        except Fail as e:
            failed += 1
            print(f"FAIL {f.__name__}: {e}")
        except Exception as e:  # a broken check fails, the others still run
            failed += 1
            print(f"FAIL {f.__name__}: {type(e).__name__}: {e}")
        finally:
            link.cleanup()
        sys.stdout.flush()
    link.running = False
    print(f"{ran - failed} passed, {failed} failed ({time.monotonic() - T0:.1f} s)")
    sys.exit(1 if failed or not ran else 0)


if __name__ == "__main__":
    main()
