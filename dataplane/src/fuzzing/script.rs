//! A stateful fuzz harness: the input is a script of segments that a peer
//! with many connections sends, in bursts, with sequence numbers the peer
//! keeps right (so the fuzzer reaches established connections, closes in
//! every state and handshakes ending in the same burst as a reset, which
//! raw frames would need the engine's ISNs to reach). The peer plays
//! clients of every kind of VIP and the backends and health-check targets
//! the engine connects to.
//!
//! Each op is 3 bytes `[a, b, c]`:
//! - `a`: bits 0–3 the connection slot, bit 4 the side (0: a connection
//!   the peer opens to a VIP; 1: one the engine opened to the peer, taken
//!   in the order its SYNs were seen), bits 5–7 the segment (see [`Kind`]);
//! - `b`: its argument (VIP, payload, sequence offset);
//! - `c`: bit 0 ends the burst (the engine polls), bit 1 shifts the
//!   sequence number by `b` (out of window), bit 2 flips byte `b` of the
//!   frame, bits 3–4 advance time before the burst by 0, 1, 50 or
//!   `b × 10` ms; on an ACK, bit 5 reports a hole: the ACK stays
//!   `(b & 15) × 1448 + 1` bytes below what the peer holds and a SACK block
//!   covers all of it but the first `((b >> 4) + 1) × 512` bytes (RACK and
//!   SACK recovery), and bit 6 adds a D-SACK block below the ACK first;
//!   bits 1, 2, 5, 6 and 7 all set ([`DENY_TOGGLE`]) also deny the peer's
//!   address (`[access] deny`), or let it back, after the segment; bits
//!   1, 2, 5 and 7 set and 6 clear ([`CONN_RESET`]) list the engine's
//!   connections and reset the peer's, as `dpctl conn list` and `conn
//!   reset` do.
//!
//! A burst holds at most [`super::MAX_BURST`] frames.

use std::net::Ipv4Addr;
use std::time::Duration;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, IpAddress, IpProtocol, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr,
    TcpSeqNumber,
};

use super::{FUZZ_ADDR, FUZZ_MAC, MAX_BURST};
use crate::engine::Engine;
use crate::net::PrefixSet;
use crate::port::{PacketBuf, Port};
use crate::tcp::ConnFilter;
use crate::time::Instant;

/// The peer's address and MAC.
pub const PEER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

/// Connections per side.
const SLOTS: usize = 16;

/// The segment an op sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A new connection in the slot (client side: to VIP `b % vips`; the
    /// engine's side: SYN-ACK to its SYN).
    Syn,
    Ack,
    /// A payload chosen by `b` (see [`payload`]).
    Data,
    Fin,
    Rst,
    /// RST with the ACK bit.
    RstAck,
    /// Data and FIN in one segment.
    DataFin,
    /// A segment that ACKs data the engine never sent (`b` bytes ahead).
    AckAhead,
}

impl Kind {
    fn of(a: u8) -> Self {
        match a >> 5 {
            0 => Self::Syn,
            1 => Self::Ack,
            2 => Self::Data,
            3 => Self::Fin,
            4 => Self::Rst,
            5 => Self::RstAck,
            6 => Self::DataFin,
            _ => Self::AckAhead,
        }
    }
}

/// One connection as the peer keeps it.
#[derive(Debug, Clone, Copy, Default)]
struct PeerConn {
    /// The peer's port and the engine's (0: no connection in the slot).
    port: u16,
    dut_port: u16,
    snd_nxt: u32,
    /// The next byte expected from the engine, once its SYN was seen.
    rcv_nxt: Option<u32>,
}

/// The peer's state: its connections and what it learned from the
/// engine's segments.
#[derive(Debug)]
pub(super) struct Peer {
    clients: [PeerConn; SLOTS],
    /// Connections the engine opened, in the order their SYNs came.
    opened: [PeerConn; SLOTS],
    next_opened: usize,
    next_port: u16,
    /// The VIP ports clients pick from.
    vips: &'static [u16],
    /// A TLS ClientHello, when a TLS VIP exists.
    client_hello: Option<Vec<u8>>,
}

impl Peer {
    pub(super) fn new(vips: &'static [u16], client_hello: Option<Vec<u8>>) -> Self {
        Self {
            clients: [PeerConn::default(); SLOTS],
            opened: [PeerConn::default(); SLOTS],
            next_opened: 0,
            next_port: 1024,
            vips,
            client_hello,
        }
    }

    /// Learns from a frame the engine sent: new connections it opens,
    /// and the sequence numbers of its data.
    fn learn(&mut self, frame: &[u8]) {
        let Some((repr_seq, len, control, has_ack, src_port, dst_port)) = tcp_of(frame) else {
            return;
        };
        if control == TcpControl::Syn && !has_ack {
            // The engine connects to us: a slot of the other side.
            let slot = self.next_opened % SLOTS;
            self.next_opened += 1;
            self.opened[slot] = PeerConn {
                port: dst_port,
                dut_port: src_port,
                snd_nxt: 0x4000_0000 ^ (u32::from(dst_port) << 8),
                rcv_nxt: Some(repr_seq.wrapping_add(1)),
            };
            return;
        }
        let conns = self.clients.iter_mut().chain(self.opened.iter_mut());
        for c in conns.filter(|c| c.port == dst_port && c.dut_port == src_port) {
            let flag = u32::from(matches!(control, TcpControl::Syn | TcpControl::Fin));
            match (control, c.rcv_nxt) {
                (TcpControl::Syn, _) => c.rcv_nxt = Some(repr_seq.wrapping_add(1)),
                (_, Some(next)) if next == repr_seq => {
                    c.rcv_nxt = Some(next.wrapping_add(len as u32 + flag));
                }
                _ => {}
            }
        }
    }

    /// The frame op `[a, b, c]` sends, if its slot has what it needs.
    fn frame(&mut self, a: u8, b: u8, c: u8) -> Option<Vec<u8>> {
        let kind = Kind::of(a);
        let slot = usize::from(a & 0x0f);
        let opened_side = a & 0x10 != 0;
        let conn = if opened_side {
            &mut self.opened[slot]
        } else {
            &mut self.clients[slot]
        };
        let mut control = TcpControl::None;
        let mut ack = conn.rcv_nxt;
        let mut body: &[u8] = &[];
        let mut sack_ranges = [None; 3];
        match kind {
            Kind::Syn if !opened_side => {
                let vip = self.vips[usize::from(b) % self.vips.len()];
                self.next_port = self.next_port.wrapping_add(1).max(1024);
                *conn = PeerConn {
                    port: self.next_port,
                    dut_port: vip,
                    snd_nxt: u32::from(self.next_port) << 16,
                    rcv_nxt: None,
                };
                control = TcpControl::Syn;
                ack = None;
            }
            Kind::Syn => control = TcpControl::Syn, // SYN-ACK
            Kind::Ack => {
                if let (Some(held), true) = (ack, c & 0x60 != 0) {
                    let below = if c & 0x20 != 0 {
                        u32::from(b & 0x0f) * 1448 + 1
                    } else {
                        0
                    };
                    let at = held.wrapping_sub(below);
                    let hole = (u32::from(b >> 4) + 1) * 512;
                    let dsack = (c & 0x40 != 0).then(|| (at.wrapping_sub(hole), at));
                    let sacked = (below > hole).then(|| (at.wrapping_add(hole), held));
                    let blocks = [dsack, sacked].into_iter().flatten();
                    for (slot, block) in sack_ranges.iter_mut().zip(blocks) {
                        *slot = Some(block);
                    }
                    ack = Some(at);
                }
            }
            Kind::Data | Kind::DataFin => {
                body = payload(b, self.client_hello.as_deref());
                if kind == Kind::DataFin {
                    control = TcpControl::Fin;
                }
            }
            Kind::Fin => control = TcpControl::Fin,
            Kind::Rst => {
                control = TcpControl::Rst;
                ack = None;
            }
            Kind::RstAck => control = TcpControl::Rst,
            Kind::AckAhead => ack = ack.map(|a| a.wrapping_add(u32::from(b) + 1)),
        }
        if conn.port == 0 {
            return None;
        }
        let seq = if c & 2 != 0 {
            conn.snd_nxt.wrapping_sub(u32::from(b) << 8)
        } else {
            conn.snd_nxt
        };
        let tcp = TcpRepr {
            src_port: conn.port,
            dst_port: conn.dut_port,
            control,
            seq_number: TcpSeqNumber(seq as i32),
            ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
            window_len: 65535,
            window_scale: (control == TcpControl::Syn).then_some(7),
            max_seg_size: (control == TcpControl::Syn).then_some(1460),
            sack_permitted: control == TcpControl::Syn,
            sack_ranges,
            timestamp: None,
            payload: body,
        };
        if c & 2 == 0 && control != TcpControl::Rst {
            let flag = u32::from(matches!(control, TcpControl::Syn | TcpControl::Fin));
            conn.snd_nxt = seq.wrapping_add(body.len() as u32 + flag);
        }
        let mut frame = tcp_frame(&tcp);
        if c & 4 != 0 {
            let i = usize::from(b) % frame.len();
            frame[i] ^= 0x55;
        }
        Some(frame)
    }
}

/// Payloads a peer sends: requests whole and cut, a ClientHello, an HTTP
/// answer (as a backend or health-check target), garbage, a full segment.
fn payload(b: u8, client_hello: Option<&[u8]>) -> &[u8] {
    const FULL: [u8; 1400] = [b'x'; 1400];
    match b % 8 {
        0 => b"GET /bytes/3000 HTTP/1.1\r\nHost: f\r\n\r\n",
        1 => b"GET / HTTP/1.0\r\n\r\n",
        2 => b"GET /bytes/1",
        3 => client_hello.unwrap_or(b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00"),
        4 => b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
        5 => b"\x15\x03\x03\x00\x02\x02\x28",
        6 => &FULL,
        _ => b"\x00\xffgarbage\r\n\r\n",
    }
}

/// Sequence number, payload length, control, ACK flag and ports of a TCP
/// frame.
fn tcp_of(frame: &[u8]) -> Option<(u32, usize, TcpControl, bool, u16, u16)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.next_header() != IpProtocol::Tcp {
        return None;
    }
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    let control = match (tcp.syn(), tcp.fin(), tcp.rst()) {
        (true, _, _) => TcpControl::Syn,
        (_, true, _) => TcpControl::Fin,
        (_, _, true) => TcpControl::Rst,
        _ => TcpControl::None,
    };
    Some((
        tcp.seq_number().0 as u32,
        tcp.payload().len(),
        control,
        tcp.ack(),
        tcp.src_port(),
        tcp.dst_port(),
    ))
}

/// The peer's frame carrying `tcp` to the engine.
fn tcp_frame(tcp: &TcpRepr<'_>) -> Vec<u8> {
    let ip = Ipv4Repr {
        src_addr: PEER_ADDR,
        dst_addr: FUZZ_ADDR,
        next_header: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        hop_limit: 64,
    };
    let mut buf = vec![0u8; 14 + ip.buffer_len() + ip.payload_len];
    let mut eth = EthernetFrame::new_unchecked(&mut buf[..]);
    EthernetRepr {
        src_addr: PEER_MAC,
        dst_addr: FUZZ_MAC,
        ethertype: EthernetProtocol::Ipv4,
    }
    .emit(&mut eth);
    let mut ipp = Ipv4Packet::new_unchecked(eth.payload_mut());
    ip.emit(&mut ipp, &ChecksumCapabilities::default());
    tcp.emit(
        &mut TcpPacket::new_unchecked(ipp.payload_mut()),
        &IpAddress::Ipv4(PEER_ADDR),
        &IpAddress::Ipv4(FUZZ_ADDR),
        &ChecksumCapabilities::default(),
    );
    buf
}

/// The peer's ARP request for the engine's address (so the engine knows
/// the peer's MAC from the start).
pub(super) fn arp_hello() -> Vec<u8> {
    let repr = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr: PEER_MAC,
        source_protocol_addr: PEER_ADDR,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: FUZZ_ADDR,
    };
    let mut buf = vec![0u8; 14 + repr.buffer_len()];
    let mut eth = EthernetFrame::new_unchecked(&mut buf[..]);
    EthernetRepr {
        src_addr: PEER_MAC,
        dst_addr: EthernetAddress::BROADCAST,
        ethertype: EthernetProtocol::Arp,
    }
    .emit(&mut eth);
    repr.emit(&mut ArpPacket::new_unchecked(eth.payload_mut()));
    buf
}

/// The bits of an op's `c` that deny the peer, or let it back.
pub const DENY_TOGGLE: u8 = 0xe6;
/// [`DENY_TOGGLE`]'s bits as they are when an op lists the connections
/// and resets the peer's instead.
pub const CONN_RESET: u8 = 0xa6;

/// Adds `frame` to `burst` in a buffer of `port`; false when none is free.
fn push<P: Port>(frame: &[u8], burst: &mut Vec<P::Buf>, port: &mut P) -> bool {
    let Some(mut buf) = port.alloc() else {
        return false;
    };
    buf.set_len(frame.len());
    buf.data_mut().copy_from_slice(frame);
    burst.push(buf);
    true
}

/// Plays `script` against `engine` over the link whose other end is
/// `peer_port`; returns the frames fed.
pub(super) fn play<P: Port>(
    engine: &mut Engine<P>,
    peer_port: &mut P,
    peer: &mut Peer,
    script: &[u8],
    mut now: Instant,
) -> (u64, Instant) {
    let mut fed = 0;
    let mut burst: Vec<P::Buf> = Vec::with_capacity(MAX_BURST);
    let mut sent = Vec::new();
    if push(&arp_hello(), &mut burst, peer_port) {
        fed += 1;
    }
    let mut denied = false;
    for op in script.chunks_exact(3) {
        let (a, b, c) = (op[0], op[1], op[2]);
        if let Some(frame) = peer.frame(a, b, c) {
            if push(&frame, &mut burst, peer_port) {
                fed += 1;
            }
        }
        if c & DENY_TOGGLE == DENY_TOGGLE {
            // The peer denied, or let back (`[access] deny`), between
            // bursts: its open connections are reset wherever they are.
            denied = !denied;
            let nets = denied.then_some((std::net::IpAddr::V4(PEER_ADDR), 32));
            engine.set_deny(std::sync::Arc::new(PrefixSet::new(nets)));
        }
        if c & DENY_TOGGLE == CONN_RESET {
            // `dpctl conn list`, then `conn reset --source` of the peer,
            // between bursts, whatever state its connections are in.
            let all = ConnFilter::default();
            let listed = engine.connections(all, 16, now);
            assert!(listed.len() <= 16, "conn list keeps to its count");
            for (view, _) in &listed {
                assert_eq!(view.client.ip(), std::net::IpAddr::V4(PEER_ADDR));
                assert!(view.state != crate::tcp::State::TimeWait);
            }
            let peer_net = Some((std::net::IpAddr::V4(PEER_ADDR), 32));
            let picked = ConnFilter {
                source: peer_net,
                ..all
            };
            engine.reset_connections(picked, now);
        }
        if c & 1 != 0 || burst.len() >= MAX_BURST {
            now = now
                + match (c >> 3) & 3 {
                    0 => Duration::ZERO,
                    1 => Duration::from_millis(1),
                    2 => Duration::from_millis(50),
                    _ => Duration::from_millis(u64::from(b) * 10),
                };
            peer_port.tx_burst(now, &mut burst);
            burst.clear();
            for _ in 0..8 {
                if engine.poll(now) == 0 {
                    break;
                }
            }
            while peer_port.rx_burst(now, &mut sent, 64) > 0 {
                for f in sent.drain(..) {
                    peer.learn(f.data());
                }
            }
        }
    }
    peer_port.tx_burst(now, &mut burst);
    burst.clear();
    (fed, now)
}
