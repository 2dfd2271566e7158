//! TCP over IPv6 on an engine port over the in-memory link: the host
//! builds segments by hand (smoltcp::wire, IPv6 pseudo-header checksums)
//! and checks every frame the engine sends: its IPv6 header, its TCP
//! checksum, the MSS it offers, what it answers (RFC 9293 over RFC 8200).
//! Path MTU discovery is here for both families (Packet Too Big, and
//! IPv4's "fragmentation needed").

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use dataplane::net::ipv6::{multicast_mac, solicited_node};
use dataplane::net::Ipv6Config;
use dataplane::stats::DropReason;
use dataplane::tcp::{ListenLimits, SynCookies, TcpConfig};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, IpAddress, IpProtocol, Ipv4Repr, Ipv6Packet,
    TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

const DUT_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
const DUT_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const HOST_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const DUT_IP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 1);
const HOST_IP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 2);
/// A VIP on the port's prefix that is not the port's own address.
const VIP_IP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 0x80);

fn lab(tcp: TcpConfig) -> common::MemLab {
    let mut lab = common::MemLab::with_tcp(DUT_MAC, HOST_MAC, DUT_V4, None, tcp);
    lab.engine.enable_ipv6(
        0,
        Ipv6Config {
            addresses: vec![(DUT_IP, 64)],
            gateway: None,
        },
    );
    lab
}

/// A Neighbor Solicitation from `src` for `target` carrying the host's
/// MAC: the engine learns where `src` is.
fn solicit(src: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let group = solicited_node(target);
    let mut icmp = vec![135, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&target.octets());
    icmp.extend_from_slice(&[1, 1]);
    icmp.extend_from_slice(HOST_MAC.as_bytes());
    let sum = dataplane::checksum::icmpv6(src.octets(), group.octets(), &icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    frame6(multicast_mac(group), src, group, 58, 255, &icmp)
}

/// An IPv6 frame from the host carrying `payload` as `next` header.
fn frame6(
    dst_mac: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next: u8,
    hops: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 40];
    f[..6].copy_from_slice(dst_mac.as_bytes());
    f[6..12].copy_from_slice(HOST_MAC.as_bytes());
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f[14] = 0x60;
    f[18..20].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    f[20] = next;
    f[21] = hops;
    f[22..38].copy_from_slice(&src.octets());
    f[38..54].copy_from_slice(&dst.octets());
    f.extend_from_slice(payload);
    f
}

/// A segment of the host's, by hand.
#[derive(Debug, Clone)]
struct Seg {
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: Option<u32>,
    control: TcpControl,
    mss: Option<u16>,
    payload: Vec<u8>,
}

impl Seg {
    fn syn(src_port: u16, dst_port: u16, seq: u32) -> Self {
        Self {
            src_port,
            dst_port,
            seq,
            ack: None,
            control: TcpControl::Syn,
            mss: Some(1440),
            payload: Vec::new(),
        }
    }

    fn ack(src_port: u16, dst_port: u16, seq: u32, ack: u32) -> Self {
        Self {
            src_port,
            dst_port,
            seq,
            ack: Some(ack),
            control: TcpControl::None,
            mss: None,
            payload: Vec::new(),
        }
    }

    fn with(mut self, control: TcpControl, payload: &[u8]) -> Self {
        self.control = control;
        self.payload = payload.to_vec();
        self
    }

    fn repr(&self) -> TcpRepr<'_> {
        TcpRepr {
            src_port: self.src_port,
            dst_port: self.dst_port,
            control: self.control,
            seq_number: TcpSeqNumber(self.seq as i32),
            ack_number: self.ack.map(|a| TcpSeqNumber(a as i32)),
            window_len: 65535,
            window_scale: None,
            max_seg_size: self.mss,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &self.payload,
        }
    }

    /// The frame carrying it from `src` to `dst` over IPv6.
    fn frame6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let repr = self.repr();
        let mut tcp = vec![0u8; repr.buffer_len()];
        repr.emit(
            &mut TcpPacket::new_unchecked(&mut tcp[..]),
            &IpAddress::Ipv6(src),
            &IpAddress::Ipv6(dst),
            &ChecksumCapabilities::default(),
        );
        frame6(DUT_MAC, src, dst, 6, 64, &tcp)
    }

    /// The frame carrying it from the host's IPv4 address to the port's.
    fn frame4(&self) -> Vec<u8> {
        let repr = self.repr();
        let ip = Ipv4Repr {
            src_addr: HOST_V4,
            dst_addr: DUT_V4,
            next_header: IpProtocol::Tcp,
            payload_len: repr.buffer_len(),
            hop_limit: 64,
        };
        common::ipv4_frame(HOST_MAC, DUT_MAC, &ip, |payload| {
            repr.emit(
                &mut TcpPacket::new_unchecked(payload),
                &IpAddress::Ipv4(HOST_V4),
                &IpAddress::Ipv4(DUT_V4),
                &ChecksumCapabilities::default(),
            );
        })
    }
}

/// A TCP/IPv6 segment the engine sent, its header checked.
#[derive(Debug)]
struct Out {
    eth_dst: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: Option<u32>,
    control: TcpControl,
    mss: Option<u16>,
    payload: Vec<u8>,
}

impl Out {
    fn end(&self) -> u32 {
        let flags = u32::from(matches!(self.control, TcpControl::Syn | TcpControl::Fin));
        self.seq
            .wrapping_add(self.payload.len() as u32)
            .wrapping_add(flags)
    }
}

/// The TCP/IPv6 segments among `frames`, each checked: from our MAC,
/// a bare IPv6 header with hop limit 64, a TCP checksum over the IPv6
/// pseudo-header that smoltcp verifies, no frame over 1,514 bytes.
fn tcp6(frames: &[Vec<u8>]) -> Vec<Out> {
    tcp6_as(frames, true)
}

/// [`tcp6`], checking the TCP checksum or not (a frame whose checksum
/// the sending port was to fill arrives unfilled on the in-memory link,
/// judged good, unless the port cut it).
fn tcp6_as(frames: &[Vec<u8>], verify: bool) -> Vec<Out> {
    let mut out = Vec::new();
    for f in frames {
        assert!(f.len() <= 1514, "a {}-byte frame", f.len());
        let eth = EthernetFrame::new_checked(&f[..]).expect("Ethernet");
        if eth.ethertype() != EthernetProtocol::Ipv6 {
            continue;
        }
        let ip = Ipv6Packet::new_checked(eth.payload()).expect("IPv6");
        if ip.next_header() != IpProtocol::Tcp {
            continue;
        }
        assert_eq!(eth.src_addr(), DUT_MAC);
        assert_eq!(ip.hop_limit(), 64);
        assert_eq!((ip.traffic_class(), ip.flow_label()), (0, 0));
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let tcp = TcpPacket::new_checked(ip.payload()).expect("TCP");
        assert!(
            !verify || tcp.verify_checksum(&IpAddress::Ipv6(src), &IpAddress::Ipv6(dst)),
            "TCP checksum over the IPv6 pseudo-header"
        );
        let r = TcpRepr::parse(
            &tcp,
            &IpAddress::Ipv6(src),
            &IpAddress::Ipv6(dst),
            &ChecksumCapabilities::ignored(),
        )
        .expect("a TCP segment");
        out.push(Out {
            eth_dst: eth.dst_addr(),
            src,
            dst,
            src_port: r.src_port,
            dst_port: r.dst_port,
            seq: r.seq_number.0 as u32,
            ack: r.ack_number.map(|a| a.0 as u32),
            control: r.control,
            mss: r.max_seg_size,
            payload: r.payload.to_vec(),
        });
    }
    out
}

/// Opens a connection from `src`:`port` to `dst`:80 (the host already
/// known to the engine); returns our next sequence number and the
/// engine's.
fn handshake(lab: &mut common::MemLab, src: Ipv6Addr, dst: Ipv6Addr, port: u16) -> (u32, u32) {
    let syn = Seg::syn(port, 80, 1000);
    let out = tcp6(&lab.exchange(vec![syn.frame6(src, dst)]));
    assert_eq!(out.len(), 1, "{out:?}");
    let synack = &out[0];
    assert_eq!(synack.control, TcpControl::Syn);
    assert_eq!(synack.ack, Some(1001));
    assert_eq!((synack.src, synack.dst), (dst, src));
    (1001, synack.end())
}

#[test]
fn a_client_over_ipv6_is_served_and_closes_cleanly() {
    let mut lab = lab(TcpConfig::default());
    lab.engine.listen(DUT_IP, 80);
    lab.exchange(vec![solicit(HOST_IP, DUT_IP)]);
    let syn = Seg::syn(40_000, 80, 1000);
    let out = tcp6(&lab.exchange(vec![syn.frame6(HOST_IP, DUT_IP)]));
    assert_eq!(out.len(), 1, "{out:?}");
    let synack = &out[0];
    assert_eq!(synack.eth_dst, HOST_MAC);
    assert_eq!((synack.src, synack.dst), (DUT_IP, HOST_IP));
    assert_eq!((synack.src_port, synack.dst_port), (80, 40_000));
    assert_eq!(synack.control, TcpControl::Syn);
    // RFC 8200's header is 20 bytes longer than IPv4's: 1500 − 60.
    assert_eq!(synack.mss, Some(1440), "the MSS of a 1,500-byte link");
    let iss = synack.seq;
    // The handshake's end, the request and the client's FIN in one burst.
    let req = b"GET / HTTP/1.1\r\nHost: v6\r\n\r\n";
    let burst = vec![
        Seg::ack(40_000, 80, 1001, iss + 1).frame6(HOST_IP, DUT_IP),
        Seg::ack(40_000, 80, 1001, iss + 1)
            .with(TcpControl::Psh, req)
            .frame6(HOST_IP, DUT_IP),
        Seg::ack(40_000, 80, 1001 + req.len() as u32, iss + 1)
            .with(TcpControl::Fin, &[])
            .frame6(HOST_IP, DUT_IP),
    ];
    let out = tcp6(&lab.exchange(burst));
    let body: Vec<u8> = out.iter().flat_map(|o| o.payload.clone()).collect();
    let text = String::from_utf8_lossy(&body);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let fin = out
        .iter()
        .find(|o| o.control == TcpControl::Fin)
        .expect("our FIN after the response");
    assert_eq!(fin.ack, Some(1002 + req.len() as u32), "their FIN taken");
    // Our FIN acknowledged: the connection is over.
    let last = Seg::ack(40_000, 80, 1002 + req.len() as u32, fin.end());
    lab.exchange(vec![last.frame6(HOST_IP, DUT_IP)]);
    assert_eq!(lab.engine.tcp().counters().active, 0);
    assert_eq!(lab.engine.tcp().counters().accepted, 1);
}

#[test]
fn ipv4_and_ipv6_flows_on_the_same_ports_are_apart() {
    let mut lab = lab(TcpConfig::default());
    lab.engine.listen(DUT_V4, 80);
    lab.engine.listen(DUT_IP, 80);
    let arp = common::arp_frame(
        smoltcp::wire::ArpOperation::Request,
        HOST_MAC,
        HOST_V4,
        EthernetAddress::BROADCAST,
        DUT_V4,
    );
    lab.exchange(vec![arp, solicit(HOST_IP, DUT_IP)]);
    // The same ports and sequence numbers over both families, one burst.
    let syn = Seg::syn(40_001, 80, 5000);
    let frames = lab.exchange(vec![syn.frame4(), syn.frame6(HOST_IP, DUT_IP)]);
    let v6 = tcp6(&frames);
    assert_eq!(v6.len(), 1, "one SYN-ACK over IPv6");
    let v4: Vec<_> = frames
        .iter()
        .filter(|f| f.get(12..14) == Some(&[0x08, 0x00]))
        .collect();
    assert_eq!(v4.len(), 1, "one SYN-ACK over IPv4");
    assert_eq!(lab.engine.tcp().counters().half_open, 2);
    // A reset over IPv6 ends only the IPv6 connection.
    let rst = Seg::ack(40_001, 80, 5001, v6[0].seq + 1).with(TcpControl::Rst, &[]);
    lab.exchange(vec![rst.frame6(HOST_IP, DUT_IP)]);
    assert_eq!(lab.engine.tcp().counters().half_open, 1);
}

#[test]
fn syn_cookies_carry_ipv6_connections() {
    let tcp = TcpConfig {
        syn_cookies: SynCookies::Always,
        ..TcpConfig::default()
    };
    let mut lab = lab(tcp);
    lab.engine.listen(DUT_IP, 80);
    lab.exchange(vec![solicit(HOST_IP, DUT_IP)]);
    let (seq, ack) = handshake(&mut lab, HOST_IP, DUT_IP, 40_002);
    assert_eq!(lab.engine.tcp().counters().syn_cookies_sent, 1);
    assert_eq!(lab.engine.tcp().counters().half_open, 0, "no state kept");
    // A cookie for another source address (the MAC covers the IPv6
    // 4-tuple) is refused; the right one opens the connection.
    let other = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 3);
    let req = b"GET / HTTP/1.0\r\n\r\n";
    let forged = Seg::ack(40_002, 80, seq, ack).with(TcpControl::Psh, req);
    lab.exchange(vec![solicit(other, DUT_IP), forged.frame6(other, DUT_IP)]);
    assert_eq!(lab.engine.tcp().counters().syn_cookies_rejected, 1);
    let out = tcp6(&lab.exchange(vec![forged.frame6(HOST_IP, DUT_IP)]));
    assert_eq!(lab.engine.tcp().counters().syn_cookies_accepted, 1);
    let body: Vec<u8> = out.iter().flat_map(|o| o.payload.clone()).collect();
    let text = String::from_utf8_lossy(&body);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

#[test]
fn a_vip_address_on_the_prefix_is_answered_in_nd_and_served() {
    let mut lab = lab(TcpConfig::default());
    lab.engine.listen(VIP_IP, 80);
    // The VIP's address answers Neighbor Discovery like the port's own.
    let frames = lab.exchange(vec![solicit(HOST_IP, VIP_IP)]);
    assert_eq!(lab.engine.counters().nd_advertisements, 1, "{frames:?}");
    handshake(&mut lab, HOST_IP, VIP_IP, 40_003);
    // A port without the VIP: a SYN to the port's own address on 80 gets
    // a reset (no listener there).
    let syn = Seg::syn(40_004, 80, 1);
    let out = tcp6(&lab.exchange(vec![syn.frame6(HOST_IP, DUT_IP)]));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].control, TcpControl::Rst);
    assert_eq!(out[0].ack, Some(2));
    assert_eq!(lab.dropped(DropReason::NoConnection), 1);
}

#[test]
fn bad_segments_are_dropped_and_counted() {
    let mut lab = lab(TcpConfig::default());
    lab.engine.listen(DUT_IP, 80);
    lab.exchange(vec![solicit(HOST_IP, DUT_IP)]);
    let mut bad_sum = Seg::syn(40_005, 80, 1).frame6(HOST_IP, DUT_IP);
    let last = bad_sum.len() - 1;
    bad_sum[last - 2] ^= 0x40;
    // To all nodes: TCP is unicast only.
    let mut to_group = Seg::syn(40_006, 80, 1).frame6(HOST_IP, DUT_IP);
    to_group[38..54].copy_from_slice(&Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1).octets());
    // From the unspecified address.
    let from_nobody = Seg::syn(40_007, 80, 1).frame6(Ipv6Addr::UNSPECIFIED, DUT_IP);
    // A header cut short.
    let mut short = Seg::syn(40_008, 80, 1).frame6(HOST_IP, DUT_IP);
    short.truncate(14 + 40 + 12);
    short[18..20].copy_from_slice(&12u16.to_be_bytes());
    // To our address but a link-layer group (all nodes' MAC).
    let mut to_group_mac = Seg::syn(40_010, 80, 1).frame6(HOST_IP, DUT_IP);
    to_group_mac[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    // The first of several fragments (M set): not reassembled.
    let first_fragment = behind_fragment(&Seg::syn(40_011, 80, 1), 0x0001);
    let out = lab.exchange(vec![
        bad_sum,
        to_group,
        from_nobody,
        short,
        to_group_mac,
        first_fragment,
    ]);
    assert!(tcp6(&out).is_empty(), "nothing answered");
    assert_eq!(lab.dropped(DropReason::BadTcpChecksum), 1);
    assert_eq!(lab.dropped(DropReason::NotForUs), 2);
    assert_eq!(lab.dropped(DropReason::Malformed), 2);
    assert_eq!(lab.dropped(DropReason::Fragment), 1);
    // And it still serves.
    handshake(&mut lab, HOST_IP, DUT_IP, 40_009);
}

/// `seg` from the host to `DUT_IP` behind a Fragment header whose
/// offset-and-flags field is `offset_flags`.
fn behind_fragment(seg: &Seg, offset_flags: u16) -> Vec<u8> {
    let plain = seg.frame6(HOST_IP, DUT_IP);
    let mut payload = vec![6, 0];
    payload.extend_from_slice(&offset_flags.to_be_bytes());
    payload.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    payload.extend_from_slice(&plain[14 + 40..]);
    frame6(DUT_MAC, HOST_IP, DUT_IP, 44, 64, &payload)
}

/// RFC 6946 §4: an atomic fragment (offset 0, M clear) is processed as a
/// whole packet. Before, every segment with a Fragment header was dropped,
/// so a peer that (per RFC 2460's old rule) sent atomic fragments after a
/// Packet Too Big below 1,280 could not connect.
#[test]
fn a_segment_in_an_atomic_fragment_is_taken_as_a_whole_packet() {
    let mut lab = lab(TcpConfig::default());
    lab.engine.listen(DUT_IP, 80);
    lab.exchange(vec![solicit(HOST_IP, DUT_IP)]);
    let out = tcp6(&lab.exchange(vec![behind_fragment(&Seg::syn(40_020, 80, 7), 0)]));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].control, TcpControl::Syn);
    assert_eq!(out[0].ack, Some(8));
    assert_eq!(lab.dropped(DropReason::Fragment), 0);
    // A later fragment (offset 8, M clear) is still not reassembled.
    let out = lab.exchange(vec![behind_fragment(&Seg::syn(40_021, 80, 7), 8 << 3)]);
    assert!(tcp6(&out).is_empty());
    assert_eq!(lab.dropped(DropReason::Fragment), 1);
}

#[test]
fn per_source_limits_count_an_ipv6_slash_64_as_one_source() {
    let mut lab = lab(TcpConfig::default());
    lab.engine.listen(DUT_IP, 80);
    let limits = ListenLimits {
        per_source_rate: Some(1),
        ..ListenLimits::default()
    };
    lab.engine.set_vip_limits(DUT_IP, 80, limits);
    // Two hosts of one /64 (another host's /64 would be its own source).
    let same_64 = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0xaaaa, 0, 0, 9);
    lab.exchange(vec![solicit(HOST_IP, DUT_IP), solicit(same_64, DUT_IP)]);
    // A completed handshake spends the rate (a SYN alone does not).
    let (seq, ack) = handshake(&mut lab, HOST_IP, DUT_IP, 40_010);
    lab.exchange(vec![Seg::ack(40_010, 80, seq, ack).frame6(HOST_IP, DUT_IP)]);
    let syn = Seg::syn(40_011, 80, 1);
    let out = tcp6(&lab.exchange(vec![syn.frame6(same_64, DUT_IP)]));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].control, TcpControl::Rst, "the /64's rate is spent");
    assert_eq!(lab.dropped(DropReason::ListenRefused), 1);
    // `sources --refused` names the /64; `conn list` the host's
    // connection, address and port.
    let now = lab.now;
    let refused = lab.engine.refused_sources(None, 10, now);
    let first_of_64 = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 0);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(
        (refused[0].source, refused[0].source_rate),
        (first_of_64.into(), 1)
    );
    let conns = lab.engine.connections(Default::default(), 10, now);
    let clients: Vec<String> = conns.iter().map(|(v, _)| v.client.to_string()).collect();
    assert_eq!(clients, [format!("[{HOST_IP}]:40010")]);
    // A second later the /64 may open one again.
    lab.advance(Duration::from_secs(1));
    handshake(&mut lab, same_64, DUT_IP, 40_012);
}

/// A Packet Too Big from a router on the path quoting `quoted` (one of
/// the engine's frames), reporting `mtu`: as much of the packet as fits
/// in 1,280 bytes (RFC 4443 §3.2).
fn too_big(quoted: &[u8], mtu: u32) -> Vec<u8> {
    let router = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 0xfe);
    let packet = &quoted[14..];
    let mut icmp = vec![2, 0, 0, 0];
    icmp.extend_from_slice(&mtu.to_be_bytes());
    icmp.extend_from_slice(&packet[..packet.len().min(1280 - 48)]);
    let sum = dataplane::checksum::icmpv6(router.octets(), DUT_IP.octets(), &icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    frame6(DUT_MAC, router, DUT_IP, 58, 64, &icmp)
}

#[test]
fn a_packet_too_big_for_a_segment_in_flight_shrinks_the_segments() {
    let mut lab = lab(TcpConfig::default());
    lab.engine.listen(DUT_IP, 80);
    lab.exchange(vec![solicit(HOST_IP, DUT_IP)]);
    let (seq, ack) = handshake(&mut lab, HOST_IP, DUT_IP, 40_020);
    let req = b"GET /bytes/30000 HTTP/1.0\r\n\r\n";
    let get = Seg::ack(40_020, 80, seq, ack).with(TcpControl::Psh, req);
    let frames = lab.exchange(vec![get.frame6(HOST_IP, DUT_IP)]);
    let data: Vec<&Vec<u8>> = frames.iter().filter(|f| f.len() == 1514).collect();
    assert!(
        data.len() >= 2,
        "full-size segments first: {}",
        frames.len()
    );
    let first = tcp6(&[data[0].clone()]).remove(0);
    // A Packet Too Big for a sequence number not in flight (below
    // SND.UNA) is not believed (RFC 5927 §4.1); one quoting an address
    // not ours is not for us.
    let mut stale = data[0].clone();
    stale[14 + 40 + 4..14 + 40 + 8].copy_from_slice(&(ack - 5000).to_be_bytes());
    let mut other = data[0].clone();
    other[14 + 8..14 + 24].copy_from_slice(&VIP_IP.octets());
    let out = lab.exchange(vec![too_big(&stale, 1280), too_big(&other, 1280)]);
    assert!(tcp6(&out).is_empty(), "nothing resent: {out:?}");
    assert_eq!(lab.engine.counters().icmpv6_too_big, 1);
    assert_eq!(lab.engine.tcp().counters().path_mtu_lowered, 0);
    assert_eq!(lab.dropped(DropReason::NoConnection), 1);
    assert_eq!(lab.dropped(DropReason::NotForUs), 1);
    // A believable one (MTU 1,000 is taken as IPv6's minimum, 1,280): what
    // is in flight goes again at once, cut to fit.
    let out = tcp6(&lab.exchange(vec![too_big(data[0], 1000)]));
    assert_eq!(lab.engine.tcp().counters().path_mtu_lowered, 1);
    assert_eq!(out.first().map(|o| o.seq), Some(first.seq), "from SND.UNA");
    assert!(
        out.iter().all(|o| 40 + 20 + o.payload.len() <= 1280),
        "{out:?}"
    );
    assert_eq!(out[0].payload.len(), 1280 - 60);
    // The whole response arrives in segments that fit, byte for byte.
    let mut body = std::collections::BTreeMap::new();
    let mut pending = out;
    let mut next = first.seq;
    for _ in 0..100 {
        for o in &pending {
            assert!(40 + 20 + o.payload.len() <= 1280);
            body.insert(o.seq, o.payload.clone());
        }
        while let Some(p) = body.get(&next) {
            next = next.wrapping_add(p.len() as u32);
        }
        if pending.iter().any(|o| o.control == TcpControl::Fin) {
            break;
        }
        let ack_seg = Seg::ack(40_020, 80, seq + req.len() as u32, next);
        pending = tcp6(&lab.exchange(vec![ack_seg.frame6(HOST_IP, DUT_IP)]));
        if pending.is_empty() {
            pending = tcp6(&lab.advance(Duration::from_millis(300)));
        }
    }
    let got: Vec<u8> = body.values().flatten().copied().collect();
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..40.min(text.len())]
    );
    let head = text.find("\r\n\r\n").expect("a head") + 4;
    assert_eq!(got.len() - head, 30_000, "the whole body");
}

/// A lab whose port cuts TCP segments (TSO) and fills their checksums,
/// serving on `DUT_IP`:80, the host known to the engine.
fn tso_lab() -> common::MemLab {
    let (dut, host) = dataplane::port::link_with_segmentation(DUT_MAC, HOST_MAC, 256, 1024);
    let mut lab = common::MemLab::from_ports(dut, host, DUT_V4);
    lab.engine.enable_ipv6(
        0,
        Ipv6Config {
            addresses: vec![(DUT_IP, 64)],
            gateway: None,
        },
    );
    lab.engine.listen(DUT_IP, 80);
    lab.exchange(vec![solicit(HOST_IP, DUT_IP)]);
    lab
}

#[test]
fn a_port_that_cuts_segments_cuts_ipv6_ones_too() {
    // TSO over IPv6: the engine hands the port segments of many MSS with
    // the pseudo-header sum in place; the port (in memory, as a NIC) cuts
    // them at the IPv6 and TCP headers, sets each payload length and fills
    // each checksum.
    let mut lab = tso_lab();
    let syn = Seg::syn(40_030, 80, 1000);
    let out = tcp6_as(&lab.exchange(vec![syn.frame6(HOST_IP, DUT_IP)]), false);
    let iss = out.first().expect("a SYN-ACK").seq;
    let req = b"GET /bytes/100000 HTTP/1.0\r\n\r\n";
    let get = Seg::ack(40_030, 80, 1001, iss + 1).with(TcpControl::Psh, req);
    // tcp6() checks each cut segment: its size, headers and checksum.
    let data = tcp6(&lab.exchange(vec![get.frame6(HOST_IP, DUT_IP)]));
    assert!(data.len() >= 4, "the first flight, cut: {}", data.len());
    let mut next = iss + 1;
    for o in &data {
        assert_eq!(o.seq, next, "in sequence");
        assert!(o.payload.len() <= 1440);
        next = next.wrapping_add(o.payload.len() as u32);
    }
    assert!(
        lab.engine.tcp().counters().offload_segments > 0,
        "the engine handed large segments to the port"
    );
}

/// A peer that announces an MSS below 256 is sent segments the engine
/// cuts itself, never a TSO request for them: NICs refuse such requests,
/// some (i40e) by resetting the queue. Before, a client announcing MSS 100
/// got 64 KB segments for the port to cut to 100.
#[test]
fn a_tiny_mss_is_never_handed_to_the_port_to_cut() {
    let mut lab = tso_lab();
    let mut syn = Seg::syn(40_031, 80, 1000);
    syn.mss = Some(100);
    let out = tcp6_as(&lab.exchange(vec![syn.frame6(HOST_IP, DUT_IP)]), false);
    let iss = out.first().expect("a SYN-ACK").seq;
    let req = b"GET /bytes/5000 HTTP/1.0\r\n\r\n";
    let get = Seg::ack(40_031, 80, 1001, iss + 1).with(TcpControl::Psh, req);
    // Checksums are the port's to fill (unfilled on the in-memory link).
    let data = tcp6_as(&lab.exchange(vec![get.frame6(HOST_IP, DUT_IP)]), false);
    assert!(!data.is_empty());
    assert!(data.iter().all(|o| o.payload.len() <= 100), "{data:?}");
    assert_eq!(lab.engine.tcp().counters().offload_segments, 0);
}

#[test]
fn a_fragmentation_needed_for_a_segment_in_flight_shrinks_ipv4_segments() {
    // RFC 1191 over IPv4: our segments go with DF set; a router that
    // cannot forward one answers ICMP type 3 code 4 with its next hop's
    // MTU, quoting our IP header and 8 bytes of TCP.
    let mut lab = lab(TcpConfig::default());
    lab.engine.listen(DUT_V4, 80);
    let arp = common::arp_frame(
        smoltcp::wire::ArpOperation::Request,
        HOST_MAC,
        HOST_V4,
        EthernetAddress::BROADCAST,
        DUT_V4,
    );
    lab.exchange(vec![arp]);
    let parse4 = |f: &Vec<u8>| -> Option<(u32, usize, TcpControl)> {
        let eth = EthernetFrame::new_checked(&f[..]).ok()?;
        let ip = smoltcp::wire::Ipv4Packet::new_checked(eth.payload()).ok()?;
        assert!(ip.dont_frag(), "DF set: the path may answer");
        let t = TcpPacket::new_checked(ip.payload()).ok()?;
        assert!(t.verify_checksum(
            &IpAddress::Ipv4(ip.src_addr()),
            &IpAddress::Ipv4(ip.dst_addr())
        ));
        let control = if t.fin() {
            TcpControl::Fin
        } else if t.syn() {
            TcpControl::Syn
        } else {
            TcpControl::None
        };
        Some((t.seq_number().0 as u32, t.payload().len(), control))
    };
    let out = lab.exchange(vec![Seg::syn(40_040, 80, 1000).frame4()]);
    let iss = out.iter().find_map(parse4).expect("a SYN-ACK").0;
    let req = b"GET /bytes/30000 HTTP/1.0\r\n\r\n";
    let get = Seg::ack(40_040, 80, 1001, iss + 1).with(TcpControl::Psh, req);
    let frames = lab.exchange(vec![get.frame4()]);
    let big = frames
        .iter()
        .filter(|f| f.len() > 1400)
        .min_by_key(|f| parse4(f).map(|(seq, _, _)| seq.wrapping_sub(iss)))
        .expect("full-size segments");
    let router = Ipv4Addr::new(10, 77, 0, 254);
    let frag_needed = |quoted: &[u8], mtu: u16| {
        let mut icmp = vec![3, 4, 0, 0, 0, 0];
        icmp.extend_from_slice(&mtu.to_be_bytes());
        icmp.extend_from_slice(&quoted[14..14 + 20 + 8]);
        let sum = !fold(&icmp);
        icmp[2..4].copy_from_slice(&sum.to_be_bytes());
        let ip = smoltcp::wire::Ipv4Repr {
            src_addr: router,
            dst_addr: DUT_V4,
            next_header: IpProtocol::Icmp,
            payload_len: icmp.len(),
            hop_limit: 64,
        };
        common::ipv4_frame(HOST_MAC, DUT_MAC, &ip, |p| p.copy_from_slice(&icmp))
    };
    // A stale sequence number is not believed; an MTU below 576 is taken
    // as 576 (RFC 791's minimum).
    let mut stale = big.clone();
    let old = (iss - 5000).to_be_bytes();
    stale[14 + 20 + 4..14 + 20 + 8].copy_from_slice(&old);
    lab.exchange(vec![frag_needed(&stale, 1000)]);
    assert_eq!(lab.engine.tcp().counters().path_mtu_lowered, 0);
    assert_eq!(lab.engine.counters().icmp_frag_needed, 1);
    let out = lab.exchange(vec![frag_needed(big, 300)]);
    assert_eq!(lab.engine.tcp().counters().path_mtu_lowered, 1);
    let resent: Vec<_> = out.iter().filter_map(parse4).collect();
    assert!(!resent.is_empty(), "what was in flight goes again");
    assert!(
        out.iter().all(|f| f.len() <= 14 + 576),
        "packets of 576 bytes at most"
    );
    assert_eq!(resent[0].0, iss + 1, "from SND.UNA");
}

/// The Internet checksum of `data`, folded (not complemented).
fn fold(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// SYNs from loopback, an IPv4-mapped address or our own address are
/// dropped unanswered (`bad_source`), as IPv4's are. Before, each was
/// served, and a proxied one's PROXY header named `::1` or
/// `::ffff:10.0.0.1` to a backend that may trust it as local or as an
/// IPv4 client.
#[test]
fn syns_from_loopback_mapped_or_our_own_addresses_are_dropped() {
    let mut lab = lab(TcpConfig::default());
    lab.engine.listen(DUT_IP, 80);
    lab.exchange(vec![solicit(HOST_IP, DUT_IP)]);
    let sources = [
        Ipv6Addr::LOCALHOST,
        Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped(),
        DUT_IP,
    ];
    let frames = sources
        .iter()
        .enumerate()
        .map(|(i, &src)| Seg::syn(41_000 + i as u16, 80, 1).frame6(src, DUT_IP))
        .collect();
    let out = lab.exchange(frames);
    assert!(tcp6(&out).is_empty(), "nothing answered");
    assert_eq!(lab.dropped(DropReason::BadSource), 3);
    handshake(&mut lab, HOST_IP, DUT_IP, 41_009);
}
