//! Two engines sharing one port by software RSS, over the in-memory link:
//! engine 0 polls the port, engine 1 has no queue of its own there (it
//! receives what engine 0 hands it and transmits through engine 0). ARP
//! and Neighbor Discovery frames are answered once, by the engine that
//! received them, and every engine learns the neighbour from its copy.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use dataplane::engine::{Engine, EngineConfig};
use dataplane::net::ipv6::{multicast_mac, solicited_node};
use dataplane::net::{InterfaceConfig, Ipv6Config};
use dataplane::port::{link, MemBuf, MemPort, PacketBuf, Port};
use dataplane::stats::SharedCounters;
use dataplane::steer::{PortShare, SteerLink};
use dataplane::time::Instant;
use smoltcp::wire::{ArpOperation, EthernetAddress, EthernetFrame, EthernetProtocol, Icmpv6Packet};

const DUT_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
const DUT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const HOST_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const DUT_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 1);
const HOST_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 2);

struct Pair {
    engines: [Engine<MemPort>; 2],
    host: MemPort,
    /// Engine 1's port: never polled (it has no queue of its own).
    _idle: MemPort,
    now: Instant,
}

/// An engine on `port` (IPv4 and IPv6 addresses), linked to the others
/// by `link`, using the port as `share` says.
fn engine(port: MemPort, link: &SteerLink<MemBuf>, share: PortShare) -> Engine<MemPort> {
    let mut e = Engine::new(EngineConfig::default(), Arc::new(SharedCounters::default()));
    e.add_port(
        port,
        InterfaceConfig {
            mac: DUT_MAC,
            addr: DUT_IP,
            prefix_len: 24,
            gateway: None,
        },
    );
    e.enable_ipv6(
        0,
        Ipv6Config {
            addresses: vec![(DUT_IP6, 64)],
            gateway: None,
        },
    );
    e.set_steering(link.clone(), &[share]);
    e
}

/// Polls both engines until neither has work (a few rounds: what one
/// hands the other comes back as work).
fn run(engines: &mut [Engine<MemPort>; 2], now: Instant) {
    for _ in 0..4 {
        let [a, b] = engines;
        while a.poll(now) + b.poll(now) > 0 {}
    }
}

fn pair() -> Pair {
    let (dut, host) = link(DUT_MAC, HOST_MAC, 256, 1024);
    let (dut_idle, idle) = link(DUT_MAC, HOST_MAC, 16, 64);
    let links = SteerLink::new_set(2, &dataplane::dpdk::SYMMETRIC_RSS_KEY);
    let shares = [
        PortShare {
            steer: true,
            rx: true,
            tx_via: None,
        },
        PortShare {
            steer: true,
            rx: false,
            tx_via: Some(0),
        },
    ];
    let engines = [(dut, 0), (dut_idle, 1)].map(|(port, i)| engine(port, &links[i], shares[i]));
    Pair {
        engines,
        host,
        _idle: idle,
        now: Instant::from_millis(1),
    }
}

impl Pair {
    /// Sends `frames` from the host, runs both engines until neither has
    /// work, and returns what reached the host.
    fn exchange(&mut self, frames: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let mut batch: Vec<_> = frames
            .into_iter()
            .map(|f| {
                let mut b = self.host.alloc().expect("host buffers");
                b.set_len(f.len());
                b.data_mut().copy_from_slice(&f);
                b
            })
            .collect();
        self.host.tx_burst(self.now, &mut batch);
        self.now = self.now + std::time::Duration::from_micros(10);
        run(&mut self.engines, self.now);
        let mut got = Vec::new();
        self.host.rx_burst(self.now, &mut got, 1024);
        got.iter().map(|b| b.data().to_vec()).collect()
    }
}

/// The host's Neighbor Solicitation for `target` (checksum by smoltcp).
fn solicitation(target: Ipv6Addr) -> Vec<u8> {
    let group = solicited_node(target);
    let mut f = vec![0u8; 14 + 40 + 32];
    f[..6].copy_from_slice(multicast_mac(group).as_bytes());
    f[6..12].copy_from_slice(HOST_MAC.as_bytes());
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f[14] = 0x60;
    f[18..20].copy_from_slice(&32u16.to_be_bytes());
    f[20] = 58;
    f[21] = 255;
    f[22..38].copy_from_slice(&HOST_IP6.octets());
    f[38..54].copy_from_slice(&group.octets());
    let icmp = &mut f[54..];
    icmp[0] = 135;
    icmp[8..24].copy_from_slice(&target.octets());
    icmp[24] = 1;
    icmp[25] = 1;
    icmp[26..32].copy_from_slice(HOST_MAC.as_bytes());
    Icmpv6Packet::new_unchecked(&mut icmp[..]).fill_checksum(&HOST_IP6, &group);
    f
}

#[test]
fn neighbour_frames_are_answered_once_and_learned_by_every_engine() {
    let mut p = pair();
    let request = common::arp_frame(
        ArpOperation::Request,
        HOST_MAC,
        HOST_IP,
        EthernetAddress::BROADCAST,
        DUT_IP,
    );
    let out = p.exchange(vec![request, solicitation(DUT_IP6)]);
    let kinds: Vec<EthernetProtocol> = out
        .iter()
        .map(|f| EthernetFrame::new_checked(&f[..]).unwrap().ethertype())
        .collect();
    assert_eq!(
        kinds,
        [EthernetProtocol::Arp, EthernetProtocol::Ipv6],
        "one ARP reply and one advertisement, not one per engine"
    );
    for (i, e) in p.engines.iter().enumerate() {
        let iface = e.interface(0);
        assert_eq!(
            iface.arp().peek(HOST_IP, p.now),
            Some(HOST_MAC),
            "engine {i}"
        );
        // Stale (RFC 4861 §7.2.3: a solicitation confirms nothing).
        let v6 = iface.ipv6().unwrap();
        assert_eq!(v6.cache().known(HOST_IP6), Some(HOST_MAC), "engine {i}");
    }
    let (c0, c1) = (p.engines[0].counters(), p.engines[1].counters());
    assert_eq!(
        (c0.rx_packets, c1.rx_packets),
        (2, 0),
        "each frame counted once"
    );
    assert_eq!(
        (
            c0.arp_replies,
            c0.nd_advertisements,
            c1.arp_replies,
            c1.nd_advertisements
        ),
        (1, 1, 0, 0)
    );
    assert_eq!(c0.neighbor_frames_shared, 2, "a copy of each");
}

/// Only neighbour frames another engine could learn from are copied to
/// it: a Neighbor Solicitation from off the link (hop limit below 255,
/// as a router forwards one from the internet) and ARP sent to another
/// host's MAC are dropped where they arrive. Before, each was copied to
/// every engine first: a flood of them cost every core, not one.
#[test]
fn neighbour_frames_no_engine_learns_from_are_not_copied() {
    let mut p = pair();
    let mut forwarded = solicitation(DUT_IP6);
    forwarded[21] = 64;
    let other_host = EthernetAddress([0x02, 0, 0, 0, 0, 0x77]);
    let mut unicast_elsewhere = common::arp_frame(
        ArpOperation::Request,
        HOST_MAC,
        HOST_IP,
        other_host,
        Ipv4Addr::new(10, 77, 0, 9),
    );
    unicast_elsewhere[..6].copy_from_slice(other_host.as_bytes());
    let out = p.exchange(vec![forwarded, unicast_elsewhere]);
    assert!(out.is_empty(), "neither answered");
    let c0 = p.engines[0].counters();
    assert_eq!(c0.neighbor_frames_shared, 0, "no copies");
    assert_eq!(c0.rx_packets, 2);
    // One for us is copied still.
    let request = common::arp_frame(
        ArpOperation::Request,
        HOST_MAC,
        HOST_IP,
        EthernetAddress::BROADCAST,
        DUT_IP,
    );
    assert_eq!(p.exchange(vec![request]).len(), 1);
    assert_eq!(p.engines[0].counters().neighbor_frames_shared, 1);
    let v4 = p.engines[1].interface(0).arp().peek(HOST_IP, p.now);
    assert_eq!(v4, Some(HOST_MAC), "engine 1 learned from its copy");
}

/// A port whose NIC spreads flows over a queue per engine leaves ARP on
/// one queue: a reply to engine 1's request that lands on engine 0's
/// queue still reaches engine 1's table (as a copy to learn from).
#[test]
fn with_a_queue_each_replies_on_another_queue_still_resolve() {
    let (dut0, mut host0) = link(DUT_MAC, HOST_MAC, 256, 1024);
    let (dut1, mut host1) = link(DUT_MAC, HOST_MAC, 256, 1024);
    let links = SteerLink::new_set(2, &dataplane::dpdk::SYMMETRIC_RSS_KEY);
    let mut engines =
        [(dut0, 0usize), (dut1, 1)].map(|(port, i)| engine(port, &links[i], PortShare::OWN));
    let mut now = Instant::from_millis(1);
    // Engine 1 asks for the host (its request leaves on its own queue).
    assert!(!engines[1].resolve(HOST_IP, now));
    engines[1].poll(now);
    let mut sent = Vec::new();
    host1.rx_burst(now, &mut sent, 16);
    assert_eq!(sent.len(), 1, "engine 1's request");
    // The reply lands on engine 0's queue.
    let reply = common::arp_frame(ArpOperation::Reply, HOST_MAC, HOST_IP, DUT_MAC, DUT_IP);
    let mut b = host0.alloc().unwrap();
    b.set_len(reply.len());
    b.data_mut().copy_from_slice(&reply);
    host0.tx_burst(now, &mut vec![b]);
    now = now + std::time::Duration::from_micros(10);
    run(&mut engines, now);
    assert!(
        engines[1].resolve(HOST_IP, now),
        "engine 1 learned the reply"
    );
}

/// A SYN from the host to `dst`:80 from `port` over IPv6 (checksum by
/// smoltcp).
fn syn6(port: u16) -> Vec<u8> {
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{IpAddress, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber};
    let repr = TcpRepr {
        src_port: port,
        dst_port: 80,
        control: TcpControl::Syn,
        seq_number: TcpSeqNumber(1000),
        ack_number: None,
        window_len: 65535,
        window_scale: None,
        max_seg_size: Some(1440),
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: &[],
    };
    let mut f = vec![0u8; 14 + 40 + repr.buffer_len()];
    f[..6].copy_from_slice(DUT_MAC.as_bytes());
    f[6..12].copy_from_slice(HOST_MAC.as_bytes());
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f[14] = 0x60;
    f[18..20].copy_from_slice(&(repr.buffer_len() as u16).to_be_bytes());
    f[20] = 6;
    f[21] = 64;
    f[22..38].copy_from_slice(&HOST_IP6.octets());
    f[38..54].copy_from_slice(&DUT_IP6.octets());
    repr.emit(
        &mut TcpPacket::new_unchecked(&mut f[54..]),
        &IpAddress::Ipv6(HOST_IP6),
        &IpAddress::Ipv6(DUT_IP6),
        &ChecksumCapabilities::default(),
    );
    f
}

/// TCP over IPv6 and over a VLAN spreads over the engines as plain IPv4
/// does: each flow is handled by the engine its hash names (the tag
/// looked past), and every SYN is answered once, tagged for its VLAN.
#[test]
fn ipv6_and_vlan_flows_spread_over_the_engines() {
    let mut p = pair();
    let vlan = InterfaceConfig {
        mac: DUT_MAC,
        addr: Ipv4Addr::new(10, 100, 0, 1),
        prefix_len: 24,
        gateway: None,
    };
    for e in &mut p.engines {
        e.add_vlan(0, 100, vlan, None);
        e.listen(DUT_IP6, 80);
        e.listen(Ipv4Addr::new(10, 100, 0, 1), 80);
    }
    let arp_on_vlan = {
        let f = common::arp_frame(
            ArpOperation::Request,
            HOST_MAC,
            Ipv4Addr::new(10, 100, 0, 2),
            EthernetAddress::BROADCAST,
            Ipv4Addr::new(10, 100, 0, 1),
        );
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00, 0x00, 100]);
        t.extend_from_slice(&f[12..]);
        t
    };
    p.exchange(vec![solicitation(DUT_IP6), arp_on_vlan]);
    let tagged_syn = |port: u16| {
        let ip = smoltcp::wire::Ipv4Repr {
            src_addr: Ipv4Addr::new(10, 100, 0, 2),
            dst_addr: Ipv4Addr::new(10, 100, 0, 1),
            next_header: smoltcp::wire::IpProtocol::Tcp,
            payload_len: 20,
            hop_limit: 64,
        };
        let f = common::ipv4_frame(HOST_MAC, DUT_MAC, &ip, |t| {
            let mut seg = smoltcp::wire::TcpPacket::new_unchecked(t);
            seg.set_src_port(port);
            seg.set_dst_port(80);
            seg.set_seq_number(smoltcp::wire::TcpSeqNumber(1000));
            seg.set_header_len(20);
            seg.set_syn(true);
            seg.set_window_len(65535);
            seg.fill_checksum(
                &smoltcp::wire::IpAddress::Ipv4(ip.src_addr),
                &smoltcp::wire::IpAddress::Ipv4(ip.dst_addr),
            );
        });
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00, 0x00, 100]);
        t.extend_from_slice(&f[12..]);
        t
    };
    let half_open = |p: &Pair| -> Vec<u64> {
        p.engines
            .iter()
            .map(|e| e.tcp().counters().half_open)
            .collect()
    };
    // Over IPv6, then tagged for VLAN 100: each batch spreads.
    let out = p.exchange((0..16).map(|i| syn6(50_000 + i)).collect());
    let v6 = out.iter().filter(|f| f[12..14] == [0x86, 0xdd]).count();
    assert_eq!(v6, 16, "every SYN answered once");
    let after_v6 = half_open(&p);
    assert!(
        after_v6.iter().all(|&n| n > 0),
        "both engines took IPv6 flows: {after_v6:?}"
    );
    let out = p.exchange((0..16).map(|i| tagged_syn(51_000 + i)).collect());
    let tagged = out
        .iter()
        .filter(|f| f[12..16] == [0x81, 0x00, 0x00, 100] && f[16..18] == [0x08, 0x00])
        .count();
    assert_eq!(tagged, 16, "every SYN answered once, tagged");
    let after = half_open(&p);
    assert!(
        after.iter().zip(&after_v6).all(|(b, a)| b > a),
        "both engines took VLAN flows: {after_v6:?} then {after:?}"
    );
    assert_eq!(after.iter().sum::<u64>(), 32);
}

/// An ARP request padded to 3,000 bytes on a port that takes large
/// frames (segmentation offload: a `vnet_tap`'s reads): the engine that
/// got it answers it, and its copy for the other engine, which an
/// ordinary buffer cannot hold, is dropped and counted. Before, the copy
/// was sized past its buffer's room: an assertion, and dpd aborted.
#[test]
fn a_neighbour_frame_too_long_to_copy_is_dropped_for_the_others_not_a_crash() {
    use dataplane::port::link_with_segmentation;
    use dataplane::stats::DropReason;

    let (dut, mut host) = link_with_segmentation(DUT_MAC, HOST_MAC, 256, 1024);
    let (dut_idle, _idle) = link(DUT_MAC, HOST_MAC, 16, 64);
    let links = SteerLink::new_set(2, &dataplane::dpdk::SYMMETRIC_RSS_KEY);
    let share = |rx, tx_via| PortShare {
        steer: true,
        rx,
        tx_via,
    };
    let mut engines = [
        engine(dut, &links[0], share(true, None)),
        engine(dut_idle, &links[1], share(false, Some(0))),
    ];
    let mut request = common::arp_frame(
        ArpOperation::Request,
        HOST_MAC,
        HOST_IP,
        EthernetAddress::BROADCAST,
        DUT_IP,
    );
    request.resize(3000, 0);
    let mut big = host.alloc_large().expect("a large buffer");
    big.set_len(request.len());
    big.data_mut().copy_from_slice(&request);
    let now = Instant::from_millis(1);
    host.tx_burst(now, &mut vec![big]);
    run(&mut engines, now);
    let mut got = Vec::new();
    host.rx_burst(now, &mut got, 16);
    assert_eq!(got.len(), 1, "answered once");
    assert_eq!(
        engines[0].counters().dropped(DropReason::Oversize),
        1,
        "the copy for engine 1"
    );
    assert_eq!(engines[0].counters().arp_replies, 1);
}

/// Stopping, an engine that sends for another waits for the other's
/// resets and sends them: with half-open connections on both engines,
/// every one is reset on the wire, even when the sending engine stops
/// first. Before, it left its loop at once and the other's resets stayed
/// in its inbox, never sent.
#[test]
fn resets_sent_through_another_engine_at_stop_reach_the_wire() {
    use std::sync::atomic::AtomicBool;
    let mut p = pair();
    for e in &mut p.engines {
        e.listen(DUT_IP6, 80);
    }
    p.exchange(vec![solicitation(DUT_IP6)]);
    let out = p.exchange((0..16).map(|i| syn6(52_000 + i)).collect());
    assert_eq!(out.len(), 16, "every SYN answered");
    let half_open: Vec<u64> = p
        .engines
        .iter()
        .map(|e| e.tcp().counters().half_open)
        .collect();
    assert!(half_open.iter().all(|&n| n > 0), "{half_open:?}");
    let (stop, drain) = (AtomicBool::new(true), AtomicBool::new(false));
    let clock = &*common::controller::CLOCK;
    let is_reset = |f: &[u8]| {
        f.len() >= 54 + 14 && f[12..14] == [0x86, 0xdd] && f[20] == 6 && f[54 + 13] & 0x04 != 0
    };
    let Pair {
        engines: [sender, other],
        host,
        now,
        ..
    } = &mut p;
    let mut resets = 0u64;
    std::thread::scope(|s| {
        // The engine with the queue stops first: its own resets are on
        // the wire before the other begins to stop.
        let first = s.spawn(|| sender.run(clock, &stop, &drain));
        let t0 = std::time::Instant::now();
        while resets < half_open[0] {
            assert!(t0.elapsed() < std::time::Duration::from_secs(5), "{resets}");
            let mut got = Vec::new();
            host.rx_burst(*now, &mut got, 1024);
            resets += got.iter().filter(|b| is_reset(b.data())).count() as u64;
        }
        other.run(clock, &stop, &drain);
        first.join().unwrap();
    });
    let mut got = Vec::new();
    host.rx_burst(*now, &mut got, 1024);
    resets += got.iter().filter(|b| is_reset(b.data())).count() as u64;
    assert_eq!(resets, half_open.iter().sum::<u64>(), "{half_open:?}");
}
