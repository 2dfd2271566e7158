//! 802.1Q VLANs on an engine port over the in-memory link
//! (docs/vlan.md): the port's untagged network and two VLANs, each with
//! its own addresses; frames built by hand, tagged by the test, and every
//! frame the engine sends checked for the tag of the network it belongs
//! to.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

use dataplane::app::pool::{Balance, Member, MemberState, Pool};
use dataplane::net::ipv6::{multicast_mac, solicited_node};
use dataplane::net::{InterfaceConfig, Ipv6Config};
use dataplane::stats::DropReason;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    Icmpv4Packet, Icmpv4Repr, IpAddress, IpProtocol, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket,
    TcpRepr, TcpSeqNumber,
};

const DUT_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
const UNTAGGED: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const V100: Ipv4Addr = Ipv4Addr::new(10, 100, 0, 1);
const V200: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);
const V200_6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x200, 0, 0, 0, 0, 1);
/// A VIP on VLAN 100, and a backend on VLAN 200.
const VIP: Ipv4Addr = Ipv4Addr::new(10, 100, 0, 80);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 100, 0, 2);
const BACKEND: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 11);

/// The engine's port: untagged 10.77.0.1/24, VLAN 100 with 10.100.0.1/24,
/// VLAN 200 with 10.200.0.1/24 and 2001:db8:200::1/64.
fn lab() -> common::MemLab {
    let mut lab = common::MemLab::new(DUT_MAC, HOST_MAC, UNTAGGED, None);
    let net = |addr| InterfaceConfig {
        mac: DUT_MAC,
        addr,
        prefix_len: 24,
        gateway: None,
    };
    lab.engine.add_vlan(0, 100, net(V100), None);
    let v6 = Ipv6Config {
        addresses: vec![(V200_6, 64)],
        gateway: None,
    };
    lab.engine.add_vlan(0, 200, net(V200), Some(v6));
    lab
}

/// `frame` tagged for VLAN `vid` (the tag after the MACs).
fn tagged(vid: u16, frame: &[u8]) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&[0x81, 0x00]);
    f.extend_from_slice(&vid.to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

/// A frame's VLAN (`None`: untagged) and the frame without its tag.
fn untagged(frame: &[u8]) -> (Option<u16>, Vec<u8>) {
    if frame[12..14] == [0x81, 0x00] {
        let vid = u16::from_be_bytes([frame[14], frame[15]]) & 0x0fff;
        let mut f = frame[..12].to_vec();
        f.extend_from_slice(&frame[16..]);
        (Some(vid), f)
    } else {
        (None, frame.to_vec())
    }
}

fn arp_request(from: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    common::arp_frame(
        ArpOperation::Request,
        HOST_MAC,
        from,
        EthernetAddress::BROADCAST,
        target,
    )
}

fn arp_reply(from: Ipv4Addr, to: Ipv4Addr) -> Vec<u8> {
    common::arp_frame(ArpOperation::Reply, HOST_MAC, from, DUT_MAC, to)
}

/// An ARP frame's operation, sender and target addresses.
fn arp(frame: &[u8]) -> Option<(ArpOperation, Ipv4Addr, Ipv4Addr)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Arp {
        return None;
    }
    match ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()? {
        ArpRepr::EthernetIpv4 {
            operation,
            source_protocol_addr,
            target_protocol_addr,
            ..
        } => Some((operation, source_protocol_addr, target_protocol_addr)),
        _ => None,
    }
}

fn ping(from: Ipv4Addr, to: Ipv4Addr) -> Vec<u8> {
    let icmp = Icmpv4Repr::EchoRequest {
        ident: 7,
        seq_no: 1,
        data: b"vlan",
    };
    let ip = Ipv4Repr {
        src_addr: from,
        dst_addr: to,
        next_header: IpProtocol::Icmp,
        payload_len: icmp.buffer_len(),
        hop_limit: 64,
    };
    common::ipv4_frame(HOST_MAC, DUT_MAC, &ip, |p| {
        icmp.emit(
            &mut Icmpv4Packet::new_unchecked(p),
            &ChecksumCapabilities::default(),
        );
    })
}

/// A TCP segment from the host, by hand.
fn tcp(
    from: (Ipv4Addr, u16),
    to: (Ipv4Addr, u16),
    seq: u32,
    ack: Option<u32>,
    control: TcpControl,
    payload: &[u8],
) -> Vec<u8> {
    let repr = TcpRepr {
        src_port: from.1,
        dst_port: to.1,
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
        window_len: 65535,
        window_scale: None,
        max_seg_size: (control == TcpControl::Syn).then_some(1460),
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    let ip = Ipv4Repr {
        src_addr: from.0,
        dst_addr: to.0,
        next_header: IpProtocol::Tcp,
        payload_len: repr.buffer_len(),
        hop_limit: 64,
    };
    common::ipv4_frame(HOST_MAC, DUT_MAC, &ip, |p| {
        repr.emit(
            &mut TcpPacket::new_unchecked(p),
            &IpAddress::Ipv4(from.0),
            &IpAddress::Ipv4(to.0),
            &ChecksumCapabilities::default(),
        );
    })
}

/// A TCP/IPv4 segment the engine sent (checksums verified by smoltcp):
/// source, destination, and the segment.
#[derive(Debug)]
struct Out {
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    seq: u32,
    control: TcpControl,
    payload: Vec<u8>,
}

fn parse_tcp(frame: &[u8]) -> Option<Out> {
    parse_tcp_as(frame, true)
}

/// [`parse_tcp`], checking the checksums or not (a frame the sending
/// port was to fill arrives unfilled on the in-memory link, judged good).
fn parse_tcp_as(frame: &[u8], verify: bool) -> Option<Out> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    assert!(!verify || ip.verify_checksum(), "IPv4 header checksum");
    if ip.next_header() != IpProtocol::Tcp {
        return None;
    }
    let (s, d) = (ip.src_addr(), ip.dst_addr());
    let t = TcpPacket::new_checked(ip.payload()).ok()?;
    assert!(
        !verify || t.verify_checksum(&IpAddress::Ipv4(s), &IpAddress::Ipv4(d)),
        "TCP checksum"
    );
    // Checked above when asked; smoltcp would refuse an unfilled one.
    let r = TcpRepr::parse(
        &t,
        &IpAddress::Ipv4(s),
        &IpAddress::Ipv4(d),
        &ChecksumCapabilities::ignored(),
    )
    .ok()?;
    Some(Out {
        src: (s, r.src_port),
        dst: (d, r.dst_port),
        seq: r.seq_number.0 as u32,
        control: r.control,
        payload: r.payload.to_vec(),
    })
}

/// The engine's frames by VLAN, untagged.
fn by_vlan(frames: &[Vec<u8>]) -> Vec<(Option<u16>, Vec<u8>)> {
    frames.iter().map(|f| untagged(f)).collect()
}

#[test]
fn arp_and_echo_are_answered_on_their_own_vlan_only() {
    let mut lab = lab();
    let out = by_vlan(&lab.exchange(vec![
        tagged(100, &arp_request(Ipv4Addr::new(10, 100, 0, 2), V100)),
        tagged(200, &arp_request(Ipv4Addr::new(10, 200, 0, 2), V200)),
        arp_request(Ipv4Addr::new(10, 77, 0, 2), UNTAGGED),
        // Asked on the wrong network: no answer.
        tagged(200, &arp_request(Ipv4Addr::new(10, 200, 0, 2), V100)),
        arp_request(Ipv4Addr::new(10, 77, 0, 2), V200),
    ]));
    let replies: Vec<_> = out
        .iter()
        .filter_map(|(vid, f)| Some((*vid, arp(f)?)))
        .collect();
    assert_eq!(
        replies,
        vec![
            (
                Some(100),
                (ArpOperation::Reply, V100, Ipv4Addr::new(10, 100, 0, 2))
            ),
            (
                Some(200),
                (ArpOperation::Reply, V200, Ipv4Addr::new(10, 200, 0, 2))
            ),
            (
                None,
                (ArpOperation::Reply, UNTAGGED, Ipv4Addr::new(10, 77, 0, 2))
            ),
        ]
    );
    // Echo on VLAN 200, answered tagged 200; a priority tag (VLAN 0) is
    // the untagged network.
    let out = by_vlan(&lab.exchange(vec![
        tagged(200, &ping(Ipv4Addr::new(10, 200, 0, 2), V200)),
        tagged(0, &ping(Ipv4Addr::new(10, 77, 0, 2), UNTAGGED)),
    ]));
    let vlans: Vec<Option<u16>> = out.iter().map(|(v, _)| *v).collect();
    assert_eq!(vlans, [Some(200), None], "{out:?}");
    assert_eq!(lab.engine.counters().icmp_echo_replies, 2);
    // A VLAN the port does not have, a reserved one, stacked tags.
    let mut qinq = tagged(100, &ping(CLIENT, V100));
    qinq[12..14].copy_from_slice(&[0x88, 0xa8]);
    let out = lab.exchange(vec![
        tagged(300, &ping(CLIENT, V100)),
        tagged(4095, &ping(CLIENT, V100)),
        qinq,
    ]);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(lab.dropped(DropReason::UnknownVlan), 1);
    assert_eq!(lab.dropped(DropReason::Malformed), 1);
    assert_eq!(lab.dropped(DropReason::UnsupportedEtherType), 1);
}

#[test]
fn neighbor_discovery_on_a_vlan_is_answered_tagged() {
    let mut lab = lab();
    let host6 = Ipv6Addr::new(0x2001, 0xdb8, 0x200, 0, 0, 0, 0, 2);
    let group = solicited_node(V200_6);
    let mut icmp = vec![135, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&V200_6.octets());
    icmp.extend_from_slice(&[1, 1]);
    icmp.extend_from_slice(HOST_MAC.as_bytes());
    let sum = dataplane::checksum::icmpv6(host6.octets(), group.octets(), &icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut f = vec![0u8; 54];
    f[..6].copy_from_slice(multicast_mac(group).as_bytes());
    f[6..12].copy_from_slice(HOST_MAC.as_bytes());
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f[14] = 0x60;
    f[18..20].copy_from_slice(&(icmp.len() as u16).to_be_bytes());
    f[20] = 58;
    f[21] = 255;
    f[22..38].copy_from_slice(&host6.octets());
    f[38..54].copy_from_slice(&group.octets());
    f.extend_from_slice(&icmp);
    let out = by_vlan(&lab.exchange(vec![tagged(200, &f), f.clone()]));
    assert_eq!(
        lab.engine.counters().nd_advertisements,
        1,
        "once: on VLAN 200"
    );
    let (vid, na) = &out[0];
    assert_eq!(*vid, Some(200));
    assert_eq!(na[12..14], [0x86, 0xdd]);
    assert_eq!(na[54], 136, "a Neighbor Advertisement");
}

#[test]
fn a_vip_on_one_vlan_proxies_to_a_backend_on_another() {
    let mut lab = lab();
    let member = Member::new(SocketAddrV4::new(BACKEND, 80), 1, MemberState::Up);
    let p = lab
        .engine
        .add_pool(Pool::new("b".into(), Balance::RoundRobin, vec![member]));
    lab.engine.listen_pool(VIP, 8080, None, p);
    // The client on VLAN 100: its SYN (and, in the same burst, an ARP
    // request for the VIP, answered on VLAN 100).
    let c = (CLIENT, 40_000);
    let out = by_vlan(&lab.exchange(vec![
        tagged(100, &arp_request(CLIENT, VIP)),
        tagged(100, &tcp(c, (VIP, 8080), 100, None, TcpControl::Syn, b"")),
    ]));
    let synack = out
        .iter()
        .find_map(|(v, f)| Some((*v, parse_tcp(f)?)))
        .expect("a SYN-ACK");
    assert_eq!(synack.0, Some(100));
    assert_eq!(synack.1.src, (VIP, 8080));
    let iss = synack.1.seq;
    let req = b"GET / HTTP/1.0\r\n\r\n";
    let out = by_vlan(&lab.exchange(vec![tagged(
        100,
        &tcp(c, (VIP, 8080), 101, Some(iss + 1), TcpControl::Psh, req),
    )]));
    // The backend is resolved on VLAN 200, from the VLAN's address.
    let ask = out
        .iter()
        .find_map(|(v, f)| Some((*v, arp(f)?)))
        .expect("an ARP request for the backend");
    assert_eq!(ask, (Some(200), (ArpOperation::Request, V200, BACKEND)));
    let out = by_vlan(&lab.exchange(vec![tagged(200, &arp_reply(BACKEND, V200))]));
    let (vid, syn) = out
        .iter()
        .find_map(|(v, f)| Some((*v, parse_tcp(f)?)))
        .expect("the backend SYN");
    assert_eq!(vid, Some(200));
    assert_eq!(syn.control, TcpControl::Syn);
    assert_eq!((syn.src.0, syn.dst), (V200, (BACKEND, 80)));
    // The backend accepts, reads the request and answers in one burst.
    let b = (BACKEND, 80);
    let to = syn.src;
    let bseq = 9_000;
    let out = by_vlan(&lab.exchange(vec![tagged(
        200,
        &tcp(b, to, bseq, Some(syn.seq + 1), TcpControl::Syn, b""),
    )]));
    let fwd: Vec<u8> = out
        .iter()
        .filter(|(v, _)| *v == Some(200))
        .filter_map(|(_, f)| parse_tcp(f))
        .flat_map(|o| o.payload)
        .collect();
    assert_eq!(fwd, req, "the request reached the backend on VLAN 200");
    let page = b"HTTP/1.0 200 OK\r\n\r\nvlan 200 backend\n";
    let out = by_vlan(&lab.exchange(vec![tagged(
        200,
        &tcp(
            b,
            to,
            bseq + 1,
            Some(syn.seq + 1 + req.len() as u32),
            TcpControl::Fin,
            page,
        ),
    )]));
    let back: Vec<u8> = out
        .iter()
        .filter_map(|(v, f)| Some((*v, parse_tcp(f)?)))
        .filter(|(_, o)| o.dst == c)
        .flat_map(|(v, o)| {
            assert_eq!(v, Some(100), "to the client on VLAN 100");
            o.payload
        })
        .collect();
    assert_eq!(back, page, "the backend's answer reached the client");
    assert_eq!(lab.engine.counters().drops.iter().sum::<u64>(), 0);
}

#[test]
fn segmentation_offload_cuts_tagged_frames_at_the_right_headers() {
    // A port that cuts TCP segments (TSO) and fills their checksums, as a
    // NIC does, starting from the link-layer length recorded with the
    // request: the tag must be counted in it, or the port would cut at
    // the wrong place and every segment would be garbage.
    let (dut, host) = dataplane::port::link_with_segmentation(DUT_MAC, HOST_MAC, 256, 1024);
    let mut lab = common::MemLab::from_ports(dut, host, UNTAGGED);
    lab.engine.add_vlan(
        0,
        100,
        InterfaceConfig {
            mac: DUT_MAC,
            addr: V100,
            prefix_len: 24,
            gateway: None,
        },
        None,
    );
    lab.engine.listen(VIP, 80);
    let c = (CLIENT, 40_001);
    let out = by_vlan(&lab.exchange(vec![
        tagged(100, &arp_request(CLIENT, VIP)),
        tagged(100, &tcp(c, (VIP, 80), 5, None, TcpControl::Syn, b"")),
    ]));
    let iss = out
        .iter()
        .find_map(|(_, f)| parse_tcp_as(f, false))
        .unwrap_or_else(|| panic!("a SYN-ACK: {out:?} {:?}", lab.engine.counters()))
        .seq;
    let req = b"GET /bytes/100000 HTTP/1.0\r\n\r\n";
    let frames = lab.exchange(vec![tagged(
        100,
        &tcp(c, (VIP, 80), 6, Some(iss + 1), TcpControl::Psh, req),
    )]);
    let mut next = iss + 1;
    let mut segments = 0;
    for f in &frames {
        assert!(f.len() <= 1518, "a {}-byte frame", f.len());
        let (vid, plain) = untagged(f);
        assert_eq!(vid, Some(100));
        // parse_tcp checks both checksums of each cut segment.
        let o = parse_tcp(&plain).expect("a TCP segment cut at the right headers");
        assert_eq!(o.seq, next, "in sequence");
        next = next.wrapping_add(o.payload.len() as u32);
        segments += 1;
    }
    assert!(segments >= 4, "the first flight, cut: {segments} segments");
    assert!(
        lab.engine.tcp().counters().offload_segments > 0,
        "the engine handed large segments to the port"
    );
}
