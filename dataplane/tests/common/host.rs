//! The test's host as a hand-driven TCP peer of the engine: it builds and
//! parses segments itself (smoltcp::wire), answers ARP for its address,
//! and sends what the test chooses in one burst, so the order in which
//! frames reach the engine is the test's, not left to timing. One host can
//! play every role at once: clients of the VIPs, backends, health-check
//! targets.

use std::net::Ipv4Addr;
use std::time::Duration;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol, IpAddress,
    IpProtocol, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

use super::MemLab;

pub const DUT_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
pub const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
pub const DUT_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
pub const HOST_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);

/// A TCP segment between the host and the engine.
#[derive(Debug, Clone)]
pub struct Seg {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: Option<u32>,
    pub control: TcpControl,
    pub payload: Vec<u8>,
    /// The window field (unscaled: the host never offers scaling).
    pub window: u16,
}

impl Seg {
    pub fn to(dst_port: u16, src_port: u16, seq: u32, ack: Option<u32>) -> Self {
        Self {
            src_port,
            dst_port,
            seq,
            ack,
            control: TcpControl::None,
            payload: Vec::new(),
            window: 65535,
        }
    }

    /// The same segment offering window `window`.
    pub fn window(mut self, window: u16) -> Self {
        self.window = window;
        self
    }

    pub fn with(mut self, control: TcpControl, payload: &[u8]) -> Self {
        self.control = control;
        self.payload = payload.to_vec();
        self
    }

    /// The sequence number after this segment.
    pub fn end(&self) -> u32 {
        let flags = u32::from(matches!(self.control, TcpControl::Syn | TcpControl::Fin));
        self.seq
            .wrapping_add(self.payload.len() as u32)
            .wrapping_add(flags)
    }

    /// The host's frame carrying it to the engine.
    pub fn frame(&self) -> Vec<u8> {
        self.frame_from(HOST_IP)
    }

    /// The frame carrying it from `src` (an address the host routes for,
    /// in a [`HostLab::routed`] lab) to the engine.
    pub fn frame_from(&self, src: Ipv4Addr) -> Vec<u8> {
        self.frame_between(src, DUT_IP)
    }

    /// The frame carrying it from `src` to `dst` (one of the engine's
    /// addresses, a VIP's).
    pub fn frame_between(&self, src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port: self.src_port,
            dst_port: self.dst_port,
            control: self.control,
            seq_number: TcpSeqNumber(self.seq as i32),
            ack_number: self.ack.map(|a| TcpSeqNumber(a as i32)),
            window_len: self.window,
            window_scale: None,
            max_seg_size: (self.control == TcpControl::Syn).then_some(1460),
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &self.payload,
        };
        let ip = Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        super::ipv4_frame(HOST_MAC, DUT_MAC, &ip, |payload| {
            tcp.emit(
                &mut TcpPacket::new_unchecked(payload),
                &IpAddress::Ipv4(src),
                &IpAddress::Ipv4(dst),
                &ChecksumCapabilities::default(),
            );
        })
    }

    /// The segment an engine frame carries, if it is TCP.
    pub fn parse(frame: &[u8]) -> Option<Self> {
        Self::parse_to(frame).map(|(_, s)| s)
    }

    /// The segment an engine frame carries and its destination address.
    pub fn parse_to(frame: &[u8]) -> Option<(Ipv4Addr, Self)> {
        let eth = EthernetFrame::new_checked(frame).ok()?;
        if eth.ethertype() != EthernetProtocol::Ipv4 {
            return None;
        }
        let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
        if ip.next_header() != IpProtocol::Tcp {
            return None;
        }
        let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
        let repr = TcpRepr::parse(
            &tcp,
            &IpAddress::Ipv4(ip.src_addr()),
            &IpAddress::Ipv4(ip.dst_addr()),
            &ChecksumCapabilities::ignored(),
        )
        .ok()?;
        Some((
            ip.dst_addr(),
            Self {
                src_port: repr.src_port,
                dst_port: repr.dst_port,
                seq: repr.seq_number.0 as u32,
                ack: repr.ack_number.map(|a| a.0 as u32),
                control: repr.control,
                payload: repr.payload.to_vec(),
                window: repr.window_len,
            },
        ))
    }
}

/// The engine on one end of the link (`DUT_IP`/24); the test's host on the
/// other answers ARP by itself and hands over the TCP segments.
pub struct HostLab {
    pub mem: MemLab,
}

impl HostLab {
    /// The lab, with the host's address already in the engine's ARP
    /// cache (so bursts of replies are not held for resolution).
    pub fn new() -> Self {
        Self::with(MemLab::new(DUT_MAC, HOST_MAC, DUT_IP, None))
    }

    /// A lab whose engine routes everything off its subnet through the
    /// host: clients from any address, and `tcp` for the engine's TCP.
    pub fn routed(tcp: dataplane::tcp::TcpConfig) -> Self {
        Self::with(MemLab::with_tcp(
            DUT_MAC,
            HOST_MAC,
            DUT_IP,
            Some(HOST_IP),
            tcp,
        ))
    }

    fn with(mut mem: MemLab) -> Self {
        let request = super::arp_frame(
            ArpOperation::Request,
            HOST_MAC,
            HOST_IP,
            EthernetAddress::BROADCAST,
            DUT_IP,
        );
        mem.exchange(vec![request]);
        Self { mem }
    }

    /// Sends `segs` in one burst, runs the engine until it is idle, and
    /// returns the TCP segments it sent (ARP requests answered here).
    pub fn exchange(&mut self, segs: &[Seg]) -> Vec<Seg> {
        let frames = segs.iter().map(Seg::frame).collect();
        self.exchange_frames(frames)
            .into_iter()
            .map(|(_, s)| s)
            .collect()
    }

    /// [`HostLab::exchange`] to `dst`, another of the engine's addresses
    /// (a VIP's).
    pub fn exchange_to(&mut self, dst: Ipv4Addr, segs: &[Seg]) -> Vec<Seg> {
        let frames = segs.iter().map(|s| s.frame_between(HOST_IP, dst)).collect();
        self.exchange_frames(frames)
            .into_iter()
            .map(|(_, s)| s)
            .collect()
    }

    /// [`HostLab::exchange`] from several addresses: `(source, segment)`
    /// in, `(destination, segment)` out.
    pub fn exchange_from(&mut self, segs: &[(Ipv4Addr, Seg)]) -> Vec<(Ipv4Addr, Seg)> {
        let frames = segs.iter().map(|(a, s)| s.frame_from(*a)).collect();
        self.exchange_frames(frames)
    }

    fn exchange_frames(&mut self, mut frames: Vec<Vec<u8>>) -> Vec<(Ipv4Addr, Seg)> {
        let mut out = Vec::new();
        for _ in 0..4 {
            let sent = self.mem.exchange(std::mem::take(&mut frames));
            for f in &sent {
                match arp_reply_to(f) {
                    Some(reply) => frames.push(reply),
                    None => out.extend(Seg::parse_to(f)),
                }
            }
            if frames.is_empty() {
                break;
            }
        }
        out
    }

    /// Lets `d` pass, then runs the engine: the segments it sent.
    pub fn advance(&mut self, d: Duration) -> Vec<Seg> {
        self.mem.now = self.mem.now + d;
        self.exchange(&[])
    }

    /// Advances time a millisecond at a time until the engine sends a SYN.
    pub fn wait_for_syn(&mut self) -> Seg {
        for _ in 0..1000 {
            if let Some(s) = self
                .advance(Duration::from_millis(1))
                .into_iter()
                .find(|s| s.control == TcpControl::Syn)
            {
                return s;
            }
        }
        panic!("the engine opened no connection");
    }
}

/// The host's reply to an ARP request for its address.
fn arp_reply_to(frame: &[u8]) -> Option<Vec<u8>> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Arp {
        return None;
    }
    let ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr,
        source_protocol_addr,
        target_protocol_addr,
        ..
    } = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?
    else {
        return None;
    };
    if target_protocol_addr != HOST_IP {
        return None;
    }
    Some(super::arp_frame(
        ArpOperation::Reply,
        HOST_MAC,
        HOST_IP,
        source_hardware_addr,
        source_protocol_addr,
    ))
}

/// One TCP connection as the host keeps it: its ports, the next sequence
/// numbers each way, and what the engine sent on it (in order: the link
/// neither loses nor reorders).
#[derive(Debug, Clone)]
pub struct HostConn {
    /// The host's port.
    pub port: u16,
    /// The engine's port.
    pub dut_port: u16,
    pub snd_nxt: u32,
    /// Next byte expected from the engine (known once its SYN is seen).
    pub rcv_nxt: Option<u32>,
    pub received: Vec<u8>,
    /// Bytes received when the engine's FIN came.
    pub fin_at: Option<usize>,
    pub reset: bool,
}

impl HostConn {
    /// A connection the host opens (its SYN not sent yet).
    pub fn client(port: u16, dut_port: u16, iss: u32) -> Self {
        Self {
            port,
            dut_port,
            snd_nxt: iss,
            rcv_nxt: None,
            received: Vec::new(),
            fin_at: None,
            reset: false,
        }
    }

    /// The host's side of a connection the engine opened with `syn`.
    pub fn accepted(syn: &Seg, iss: u32) -> Self {
        Self {
            port: syn.dst_port,
            dut_port: syn.src_port,
            snd_nxt: iss,
            rcv_nxt: Some(syn.end()),
            received: Vec::new(),
            fin_at: None,
            reset: false,
        }
    }

    /// The next segment (control, payload), advancing `snd_nxt`.
    pub fn next(&mut self, control: TcpControl, payload: &[u8]) -> Seg {
        let ack = if control == TcpControl::Syn && self.rcv_nxt.is_none() {
            None
        } else {
            self.rcv_nxt
        };
        let seg = Seg::to(self.dut_port, self.port, self.snd_nxt, ack).with(control, payload);
        if control != TcpControl::Rst {
            self.snd_nxt = seg.end();
        }
        seg
    }

    /// Takes what the engine sent on this connection.
    pub fn absorb(&mut self, segs: &[Seg]) {
        for s in segs
            .iter()
            .filter(|s| s.dst_port == self.port && s.src_port == self.dut_port)
        {
            match s.control {
                TcpControl::Rst => self.reset = true,
                TcpControl::Syn if self.rcv_nxt.is_none() => self.rcv_nxt = Some(s.end()),
                _ => {}
            }
            let Some(next) = self.rcv_nxt else { continue };
            if s.control != TcpControl::Syn && s.seq == next && !s.payload.is_empty() {
                self.received.extend_from_slice(&s.payload);
                self.rcv_nxt = Some(next.wrapping_add(s.payload.len() as u32));
            }
            if s.control == TcpControl::Fin && s.end().wrapping_sub(1) == self.rcv_nxt.unwrap_or(0)
            {
                self.fin_at.get_or_insert(self.received.len());
                self.rcv_nxt = Some(s.end());
            }
        }
    }
}
