//! What the engine tests over the in-memory link share: one engine on one
//! port, the test's host on the other end of the link, and frames built
//! with smoltcp::wire.

// Each test file uses the part it needs.
#![allow(dead_code)]

pub mod controller;
pub mod host;
pub mod vips;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use dataplane::engine::{Engine, EngineConfig};
use dataplane::net::InterfaceConfig;
use dataplane::port::{link, MemBuf, MemPort, PacketBuf, Port};
use dataplane::stats::{DropReason, SharedCounters};
use dataplane::tcp::TcpConfig;
use dataplane::time::Instant;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, Ipv4Packet, Ipv4Repr,
};

/// An engine with one port (`addr`/24) and the host linked to it.
pub struct MemLab {
    pub engine: Engine<MemPort>,
    pub host: MemPort,
    pub now: Instant,
}

impl MemLab {
    pub fn new(
        dut_mac: EthernetAddress,
        host_mac: EthernetAddress,
        addr: Ipv4Addr,
        gateway: Option<Ipv4Addr>,
    ) -> Self {
        Self::with_tcp(dut_mac, host_mac, addr, gateway, TcpConfig::default())
    }

    /// [`MemLab::new`] with `tcp` for the engine's TCP.
    pub fn with_tcp(
        dut_mac: EthernetAddress,
        host_mac: EthernetAddress,
        addr: Ipv4Addr,
        gateway: Option<Ipv4Addr>,
        tcp: TcpConfig,
    ) -> Self {
        let (dut, host) = link(dut_mac, host_mac, 256, 1024);
        let cfg = EngineConfig {
            tcp,
            ..EngineConfig::default()
        };
        let mut engine = Engine::new(cfg, Arc::new(SharedCounters::default()));
        engine.add_port(
            dut,
            InterfaceConfig {
                mac: dut_mac,
                addr,
                prefix_len: 24,
                gateway,
            },
        );
        Self {
            engine,
            host,
            now: Instant::from_millis(1),
        }
    }

    /// An engine on `dut` (`addr`/24) with `host` on the other end of its
    /// link (made by one of `dataplane::port`'s `link` functions).
    pub fn from_ports(dut: MemPort, host: MemPort, addr: Ipv4Addr) -> Self {
        let mac = dut.mac();
        let mut engine = Engine::new(EngineConfig::default(), Arc::new(SharedCounters::default()));
        engine.add_port(
            dut,
            InterfaceConfig {
                mac,
                addr,
                prefix_len: 24,
                gateway: None,
            },
        );
        Self {
            engine,
            host,
            now: Instant::from_millis(1),
        }
    }

    /// Sends `frames` from the host in one burst (10 µs later), runs the
    /// engine until it is idle, and returns the frames it sent.
    pub fn exchange(&mut self, frames: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let mut batch: Vec<MemBuf> = frames
            .into_iter()
            .map(|f| {
                let mut b = self.host.alloc().expect("host buffers");
                b.set_len(f.len());
                b.data_mut().copy_from_slice(&f);
                b
            })
            .collect();
        self.host.tx_burst(self.now, &mut batch);
        assert!(batch.is_empty(), "the link took the burst");
        self.now = self.now + Duration::from_micros(10);
        while self.engine.poll(self.now) > 0 {}
        let mut got = Vec::new();
        self.host.rx_burst(self.now, &mut got, 1024);
        got.iter().map(|b| b.data().to_vec()).collect()
    }

    /// Lets `d` pass, then runs the engine: what it sent.
    pub fn advance(&mut self, d: Duration) -> Vec<Vec<u8>> {
        self.now = self.now + d;
        self.exchange(Vec::new())
    }

    pub fn dropped(&self, r: DropReason) -> u64 {
        self.engine.counters().dropped(r)
    }
}

/// An ARP frame (a request's target hardware address is zero).
pub fn arp_frame(
    op: ArpOperation,
    src_mac: EthernetAddress,
    src_ip: Ipv4Addr,
    dst_mac: EthernetAddress,
    target_ip: Ipv4Addr,
) -> Vec<u8> {
    let repr = ArpRepr::EthernetIpv4 {
        operation: op,
        source_hardware_addr: src_mac,
        source_protocol_addr: src_ip,
        target_hardware_addr: if op == ArpOperation::Request {
            EthernetAddress([0; 6])
        } else {
            dst_mac
        },
        target_protocol_addr: target_ip,
    };
    let mut buf = vec![0u8; 14 + repr.buffer_len()];
    let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
    EthernetRepr {
        src_addr: src_mac,
        dst_addr: dst_mac,
        ethertype: EthernetProtocol::Arp,
    }
    .emit(&mut frame);
    repr.emit(&mut ArpPacket::new_unchecked(frame.payload_mut()));
    buf
}

/// The address an ARP reply answers for (its sender's), if `frame` is
/// one.
pub fn arp_reply_from(frame: &[u8]) -> Option<Ipv4Addr> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Arp {
        return None;
    }
    match ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()? {
        ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Reply,
            source_protocol_addr,
            ..
        } => Some(source_protocol_addr),
        _ => None,
    }
}

/// An IPv4 frame: `ip` (its `payload_len` set), then what `payload`
/// writes into the IP payload.
pub fn ipv4_frame(
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    ip: &Ipv4Repr,
    payload: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    let mut buf = vec![0u8; 14 + ip.buffer_len() + ip.payload_len];
    let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
    EthernetRepr {
        src_addr: src_mac,
        dst_addr: dst_mac,
        ethertype: EthernetProtocol::Ipv4,
    }
    .emit(&mut frame);
    let mut ipp = Ipv4Packet::new_unchecked(frame.payload_mut());
    ip.emit(&mut ipp, &ChecksumCapabilities::default());
    payload(ipp.payload_mut());
    buf
}
