//! An engine with two ports of different kinds, over the in-memory link:
//! each connection is sized for the port its local address is on. A port
//! that cuts TCP segments (TSO) gets large segments beside a port that
//! does not, and the one that does not never gets one.

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use dataplane::engine::{Engine, EngineConfig};
use dataplane::net::InterfaceConfig;
use dataplane::port::{link, link_with_segmentation, Check, MemBuf, MemPort, PacketBuf, Port};
use dataplane::stats::{DropReason, SharedCounters};
use dataplane::time::Instant;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, EthernetAddress, EthernetFrame, EthernetProtocol, IpAddress, IpProtocol,
    Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

/// One of the engine's ports and the host on its other end.
struct Side {
    host: MemPort,
    dut_mac: EthernetAddress,
    host_mac: EthernetAddress,
    dut_ip: Ipv4Addr,
    host_ip: Ipv4Addr,
}

impl Side {
    fn frame(&self, repr: &TcpRepr<'_>) -> Vec<u8> {
        let ip = Ipv4Repr {
            src_addr: self.host_ip,
            dst_addr: self.dut_ip,
            next_header: IpProtocol::Tcp,
            payload_len: repr.buffer_len(),
            hop_limit: 64,
        };
        common::ipv4_frame(self.host_mac, self.dut_mac, &ip, |payload| {
            repr.emit(
                &mut TcpPacket::new_unchecked(payload),
                &IpAddress::Ipv4(self.host_ip),
                &IpAddress::Ipv4(self.dut_ip),
                &ChecksumCapabilities::default(),
            );
        })
    }

    fn send(&mut self, now: Instant, frames: Vec<Vec<u8>>) {
        let mut batch: Vec<MemBuf> = frames
            .into_iter()
            .map(|f| {
                let mut b = self.host.alloc().expect("host buffers");
                b.set_len(f.len());
                b.data_mut().copy_from_slice(&f);
                b
            })
            .collect();
        self.host.tx_burst(now, &mut batch);
        assert!(batch.is_empty(), "the link took the burst");
    }

    /// TCP segments the engine sent this host: (seq, payload length, flags).
    fn received(&mut self, now: Instant) -> Vec<(u32, usize, TcpControl)> {
        let mut got = Vec::new();
        self.host.rx_burst(now, &mut got, 4096);
        got.iter()
            .filter_map(|b| {
                let eth = EthernetFrame::new_checked(b.data()).ok()?;
                if eth.ethertype() != EthernetProtocol::Ipv4 {
                    return None;
                }
                let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
                let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
                // An offloading link marks what its sender's NIC filled
                // as good (as a NIC does) instead of writing it out.
                let filled = b.rx_checks().l4 == Check::Good;
                assert!(
                    filled
                        || tcp.verify_checksum(
                            &IpAddress::Ipv4(ip.src_addr()),
                            &IpAddress::Ipv4(ip.dst_addr())
                        ),
                    "every segment arrives with its checksum right"
                );
                assert!(ip.total_len() <= 1500, "no frame above the MTU");
                let control = if tcp.syn() {
                    TcpControl::Syn
                } else if tcp.fin() {
                    TcpControl::Fin
                } else {
                    TcpControl::None
                };
                Some((tcp.seq_number().0 as u32, tcp.payload().len(), control))
            })
            .collect()
    }
}

fn tcp_seg(
    port: u16,
    seq: u32,
    ack: Option<u32>,
    control: TcpControl,
    payload: &[u8],
) -> TcpRepr<'_> {
    TcpRepr {
        src_port: port,
        dst_port: 80,
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
        window_len: 65535,
        window_scale: (control == TcpControl::Syn).then_some(7),
        max_seg_size: (control == TcpControl::Syn).then_some(1460),
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    }
}

/// Fetches `bytes` from the responder over `side`, ACKing everything as
/// it comes; returns the payload bytes received.
fn fetch(engine: &mut Engine<MemPort>, side: &mut Side, now: &mut Instant, bytes: usize) -> usize {
    let mut step = |engine: &mut Engine<MemPort>, side: &mut Side, frames: Vec<Vec<u8>>| {
        side.send(*now, frames);
        *now = *now + Duration::from_micros(50);
        while engine.poll(*now) > 0 {}
        side.received(*now)
    };
    let arp = common::arp_frame(
        ArpOperation::Request,
        side.host_mac,
        side.host_ip,
        EthernetAddress::BROADCAST,
        side.dut_ip,
    );
    step(engine, side, vec![arp]);
    let syn = side.frame(&tcp_seg(40_000, 1000, None, TcpControl::Syn, &[]));
    let out = step(engine, side, vec![syn]);
    let &(iss, _, _) = out
        .iter()
        .find(|s| s.2 == TcpControl::Syn)
        .expect("a SYN-ACK");
    let req = format!("GET /bytes/{bytes} HTTP/1.0\r\n\r\n");
    let ack = iss.wrapping_add(1);
    let get = side.frame(&tcp_seg(
        40_000,
        1001,
        Some(ack),
        TcpControl::Psh,
        req.as_bytes(),
    ));
    let seq = 1001 + req.len() as u32;
    let mut next = ack;
    let mut got = 0;
    let mut frames = vec![get];
    for _ in 0..1000 {
        let out = step(engine, side, std::mem::take(&mut frames));
        for &(s, len, control) in &out {
            if s == next {
                next = next.wrapping_add(len as u32);
                got += len;
                if control == TcpControl::Fin {
                    return got;
                }
            }
        }
        frames.push(side.frame(&tcp_seg(40_000, seq, Some(next), TcpControl::None, &[])));
    }
    got
}

#[test]
fn a_tso_port_beside_one_without_each_gets_its_own_segment_sizes() {
    let mac = |n| EthernetAddress([0x02, 0, 0, 0, 0, n]);
    let (tso_dut, tso_host) = link_with_segmentation(mac(1), mac(2), 256, 1024);
    let (plain_dut, plain_host) = link(mac(3), mac(4), 256, 1024);
    let mut engine = Engine::new(EngineConfig::default(), Arc::new(SharedCounters::default()));
    let mut tso = Side {
        host: tso_host,
        dut_mac: mac(1),
        host_mac: mac(2),
        dut_ip: Ipv4Addr::new(10, 1, 0, 1),
        host_ip: Ipv4Addr::new(10, 1, 0, 2),
    };
    let mut plain = Side {
        host: plain_host,
        dut_mac: mac(3),
        host_mac: mac(4),
        dut_ip: Ipv4Addr::new(10, 2, 0, 1),
        host_ip: Ipv4Addr::new(10, 2, 0, 2),
    };
    for (port, side) in [(tso_dut, &tso), (plain_dut, &plain)] {
        engine.add_port(
            port,
            InterfaceConfig {
                mac: side.dut_mac,
                addr: side.dut_ip,
                prefix_len: 24,
                gateway: None,
            },
        );
        engine.listen(side.dut_ip, 80);
    }
    let mut now = Instant::from_millis(1);
    let body = 300_000;

    // The port without TSO first: whole frames only, none dropped.
    let got = fetch(&mut engine, &mut plain, &mut now, body);
    assert!(got > body, "the response arrived ({got} bytes)");
    assert_eq!(engine.tcp().counters().offload_segments, 0);
    assert_eq!(engine.counters().dropped(DropReason::Oversize), 0);

    // The TSO port's connection hands its port segments to cut, though
    // the other port cannot: before, one port without TSO turned it off
    // for every connection of the engine.
    let got = fetch(&mut engine, &mut tso, &mut now, body);
    assert!(got > body, "the response arrived ({got} bytes)");
    assert!(
        engine.tcp().counters().offload_segments > 0,
        "large segments went to the port that cuts them"
    );
    assert_eq!(engine.counters().dropped(DropReason::Oversize), 0);
}
