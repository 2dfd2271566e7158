//! IPv6 on an engine port over the in-memory link: Neighbor Discovery
//! (RFC 4861), ICMPv6 echo (RFC 4443) and extension headers (RFC 8200),
//! with frames built by hand here and replies checked with smoltcp's
//! parsers and checksums.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use dataplane::net::ipv6::{link_local, multicast_mac, solicited_node, ALL_NODES};
use dataplane::net::Ipv6Config;
use dataplane::stats::DropReason;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, Icmpv6Packet, IpProtocol, Ipv6Packet,
    NdiscNeighborFlags, NdiscRepr, RawHardwareAddress,
};

const DUT_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
const GW_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0xfe]);
const DUT_IP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 1);
const HOST_IP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 2);
const FAR_IP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 7);
const GW_IP: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0xfe);

const ECHO_REQUEST: u8 = 128;
const ECHO_REPLY: u8 = 129;
const NS: u8 = 135;
const NA: u8 = 136;

type Lab = common::MemLab;
/// An ICMPv6 Parameter Problem's code and pointer.
type Problem = (u8, u32);

fn new_lab() -> Lab {
    lab_with(None)
}

fn lab_with(gateway: Option<Ipv6Addr>) -> Lab {
    let mut lab = Lab::new(DUT_MAC, HOST_MAC, Ipv4Addr::new(10, 77, 0, 1), None);
    lab.engine.enable_ipv6(
        0,
        Ipv6Config {
            addresses: vec![(DUT_IP, 64)],
            gateway,
        },
    );
    lab
}

/// An IPv6 frame from `src_mac`: `ext` (extension headers, their next
/// header fields already set; the first header's type is `first`) then
/// an ICMPv6 message of `kind` with `body` after the 4-byte header, its
/// checksum filled by smoltcp.
#[allow(clippy::too_many_arguments)]
fn icmp6(
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    first: u8,
    ext: &[u8],
    kind: u8,
    body: &[u8],
) -> Vec<u8> {
    let icmp_len = 4 + body.len();
    let mut f = vec![0u8; 14 + 40 + ext.len() + icmp_len];
    f[..6].copy_from_slice(dst_mac.as_bytes());
    f[6..12].copy_from_slice(src_mac.as_bytes());
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f[14] = 0x60;
    f[18..20].copy_from_slice(&((ext.len() + icmp_len) as u16).to_be_bytes());
    f[20] = if ext.is_empty() { 58 } else { first };
    f[21] = hop_limit;
    f[22..38].copy_from_slice(&src.octets());
    f[38..54].copy_from_slice(&dst.octets());
    f[54..54 + ext.len()].copy_from_slice(ext);
    let icmp = &mut f[54 + ext.len()..];
    icmp[0] = kind;
    icmp[4..].copy_from_slice(body);
    Icmpv6Packet::new_unchecked(&mut icmp[..]).fill_checksum(&src, &dst);
    f
}

/// The body of a solicitation or advertisement: flags, target, and a
/// link-layer option of `opt_kind` when `mac` is given.
fn nd_body(flags: u8, target: Ipv6Addr, opt_kind: u8, mac: Option<EthernetAddress>) -> Vec<u8> {
    let mut b = vec![flags, 0, 0, 0];
    b.extend_from_slice(&target.octets());
    if let Some(mac) = mac {
        b.extend_from_slice(&[opt_kind, 1]);
        b.extend_from_slice(mac.as_bytes());
    }
    b
}

fn solicit(target: Ipv6Addr) -> Vec<u8> {
    let group = solicited_node(target);
    icmp6(
        HOST_MAC,
        multicast_mac(group),
        HOST_IP,
        group,
        255,
        58,
        &[],
        NS,
        &nd_body(0, target, 1, Some(HOST_MAC)),
    )
}

fn echo_body(ident: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let mut b = ident.to_be_bytes().to_vec();
    b.extend_from_slice(&seq.to_be_bytes());
    b.extend_from_slice(data);
    b
}

fn ping(dst: Ipv6Addr, seq: u16, data: &[u8]) -> Vec<u8> {
    icmp6(
        HOST_MAC,
        DUT_MAC,
        HOST_IP,
        dst,
        64,
        58,
        &[],
        ECHO_REQUEST,
        &echo_body(7, seq, data),
    )
}

/// A received frame's Ethernet destination, IPv6 source, destination and
/// hop limit, and its ICMPv6 message (checksum verified).
struct Out {
    eth_dst: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    icmp: Vec<u8>,
}

fn parse(f: &[u8]) -> Out {
    let frame = EthernetFrame::new_checked(f).unwrap();
    assert_eq!(frame.src_addr(), DUT_MAC);
    assert_eq!(frame.ethertype(), EthernetProtocol::Ipv6);
    assert!(f.len() >= 60, "padded to the minimum frame");
    let ip = Ipv6Packet::new_checked(frame.payload()).unwrap();
    assert_eq!(ip.next_header(), IpProtocol::Icmpv6, "no extension headers");
    let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
    assert!(
        icmp.verify_checksum(&ip.src_addr(), &ip.dst_addr()),
        "ICMPv6 checksum"
    );
    Out {
        eth_dst: frame.dst_addr(),
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        hop_limit: ip.hop_limit(),
        icmp: ip.payload().to_vec(),
    }
}

fn ndisc(out: &Out) -> NdiscRepr<'_> {
    NdiscRepr::parse(&Icmpv6Packet::new_checked(&out.icmp[..]).unwrap()).unwrap()
}

#[test]
fn the_link_local_address_is_the_modified_eui64_of_the_mac() {
    // RFC 4291 appendix A: the universal/local bit inverted, ff:fe inserted.
    let mac = EthernetAddress([0x00, 0x1b, 0x21, 0x3c, 0x4d, 0x5e]);
    assert_eq!(
        link_local(mac),
        "fe80::21b:21ff:fe3c:4d5e".parse::<Ipv6Addr>().unwrap()
    );
    assert_eq!(
        solicited_node("2001:db8::1:2345:6789".parse().unwrap()),
        "ff02::1:ff45:6789".parse::<Ipv6Addr>().unwrap()
    );
    assert_eq!(
        multicast_mac("ff02::1:ff45:6789".parse().unwrap()),
        EthernetAddress([0x33, 0x33, 0xff, 0x45, 0x67, 0x89])
    );
}

#[test]
fn solicitations_for_each_address_are_answered_and_the_sender_learned() {
    let mut lab = new_lab();
    let ll = link_local(DUT_MAC);
    for target in [DUT_IP, ll] {
        let out = lab.exchange(vec![solicit(target)]);
        assert_eq!(out.len(), 1, "one advertisement for {target}");
        let na = parse(&out[0]);
        assert_eq!(
            (na.eth_dst, na.src, na.dst, na.hop_limit),
            (HOST_MAC, target, HOST_IP, 255)
        );
        assert_eq!(
            ndisc(&na),
            NdiscRepr::NeighborAdvert {
                flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
                target_addr: target,
                lladdr: Some(RawHardwareAddress::from(DUT_MAC)),
            }
        );
    }
    assert_eq!(lab.engine.counters().nd_advertisements, 2);
    // RFC 4861 §7.2.3: the sender's entry is made STALE, not reachable
    // (a solicitation confirms nothing): used at once, with no
    // solicitation of ours first, and asked about only after
    // DELAY_FIRST_PROBE_TIME (5 s).
    let v6 = lab.engine.interface(0).ipv6().unwrap();
    assert_eq!(v6.cache().peek(HOST_IP, lab.now), None, "stale");
    let kinds = |out: &[Vec<u8>]| -> Vec<(u8, EthernetAddress)> {
        out.iter()
            .map(|f| {
                let o = parse(f);
                (o.icmp[0], o.eth_dst)
            })
            .collect()
    };
    let out = lab.exchange(vec![ping(DUT_IP, 1, b"now")]);
    assert_eq!(kinds(&out), [(ECHO_REPLY, HOST_MAC)]);
    lab.advance(Duration::from_secs(5));
    let out = lab.exchange(vec![ping(DUT_IP, 2, b"later")]);
    assert_eq!(
        kinds(&out),
        [
            (ECHO_REPLY, HOST_MAC),
            (NS, multicast_mac(solicited_node(HOST_IP)))
        ]
    );
}

/// A solicitation from a global address off our prefixes is answered
/// (to the link-layer address it gives) but makes no cache entry: that
/// address is reached through the gateway, and a flood of such senders
/// would push out neighbours in use. One from a link-local or on-prefix
/// address in the same burst is learned.
#[test]
fn a_solicitation_from_off_our_prefixes_is_answered_not_learned() {
    let mut lab = new_lab();
    let from = |src: Ipv6Addr| {
        let group = solicited_node(DUT_IP);
        icmp6(
            HOST_MAC,
            multicast_mac(group),
            src,
            group,
            255,
            58,
            &[],
            NS,
            &nd_body(0, DUT_IP, 1, Some(HOST_MAC)),
        )
    };
    let near = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x22);
    let out = lab.exchange(vec![from(FAR_IP), from(near), from(HOST_IP)]);
    assert_eq!(out.len(), 3, "each answered");
    assert_eq!(parse(&out[0]).dst, FAR_IP);
    let cache = lab.engine.interface(0).ipv6().unwrap().cache();
    assert_eq!(cache.known(FAR_IP), None, "off our prefixes: not learned");
    assert_eq!(cache.known(near), Some(HOST_MAC));
    assert_eq!(cache.known(HOST_IP), Some(HOST_MAC));
}

#[test]
fn a_duplicate_address_check_of_ours_is_answered_to_all_nodes() {
    // RFC 4862 §5.4.3 / RFC 4861 §7.2.4: from ::, no option; the answer
    // goes to ff02::1 and is not marked solicited. The request is 78
    // bytes, the answer with our link-layer option 86.
    let mut lab = new_lab();
    let group = solicited_node(DUT_IP);
    let dad = icmp6(
        HOST_MAC,
        multicast_mac(group),
        Ipv6Addr::UNSPECIFIED,
        group,
        255,
        58,
        &[],
        NS,
        &nd_body(0, DUT_IP, 1, None),
    );
    let out = lab.exchange(vec![dad]);
    assert_eq!(out.len(), 1);
    let na = parse(&out[0]);
    assert_eq!(
        (na.eth_dst, na.src, na.dst),
        (multicast_mac(ALL_NODES), DUT_IP, ALL_NODES)
    );
    assert_eq!(
        ndisc(&na),
        NdiscRepr::NeighborAdvert {
            flags: NdiscNeighborFlags::OVERRIDE,
            target_addr: DUT_IP,
            lladdr: Some(RawHardwareAddress::from(DUT_MAC)),
        }
    );
}

#[test]
fn solicitations_that_break_the_rules_are_dropped() {
    let mut lab = new_lab();
    let group = solicited_node(DUT_IP);
    let with = |src: Ipv6Addr, dst: Ipv6Addr, dst_mac, hops, body: Vec<u8>| {
        icmp6(HOST_MAC, dst_mac, src, dst, hops, 58, &[], NS, &body)
    };
    let body = nd_body(0, DUT_IP, 1, Some(HOST_MAC));
    let other = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 9);
    let cases = [
        // §7.1.1: hop limit 255 only (it was not forwarded).
        (
            with(HOST_IP, group, multicast_mac(group), 64, body.clone()),
            DropReason::Malformed,
        ),
        // From :: with a link-layer option.
        (
            with(
                Ipv6Addr::UNSPECIFIED,
                group,
                multicast_mac(group),
                255,
                body.clone(),
            ),
            DropReason::Malformed,
        ),
        // An option of length zero.
        (
            with(HOST_IP, group, multicast_mac(group), 255, {
                let mut b = nd_body(0, DUT_IP, 1, Some(HOST_MAC));
                b[21] = 0;
                b
            }),
            DropReason::Malformed,
        ),
        // A multicast target.
        (
            with(
                HOST_IP,
                group,
                multicast_mac(group),
                255,
                nd_body(0, ALL_NODES, 1, None),
            ),
            DropReason::Malformed,
        ),
        // Another node's address, to its group (whose MAC is not ours).
        (
            with(
                HOST_IP,
                solicited_node(other),
                multicast_mac(solicited_node(other)),
                255,
                nd_body(0, other, 1, Some(HOST_MAC)),
            ),
            DropReason::NotForUs,
        ),
        // Another node's address, sent to us.
        (
            with(
                HOST_IP,
                DUT_IP,
                DUT_MAC,
                255,
                nd_body(0, other, 1, Some(HOST_MAC)),
            ),
            DropReason::NotForUs,
        ),
    ];
    for (frame, reason) in cases {
        let before = lab.dropped(reason);
        assert!(lab.exchange(vec![frame]).is_empty(), "{reason:?} answered");
        assert_eq!(lab.dropped(reason), before + 1, "{reason:?} not counted");
    }
    assert_eq!(
        lab.engine
            .interface(0)
            .ipv6()
            .unwrap()
            .cache()
            .peek(HOST_IP, lab.now),
        None,
        "nothing learned from them"
    );
}

#[test]
fn echo_from_an_unknown_neighbour_waits_for_its_advertisement() {
    let mut lab = new_lab();
    let data: Vec<u8> = (0..56u8).collect();
    let out = lab.exchange(vec![ping(DUT_IP, 1, &data)]);
    assert_eq!(out.len(), 1, "a solicitation, the reply held");
    let ns = parse(&out[0]);
    let group = solicited_node(HOST_IP);
    assert_eq!(
        (ns.eth_dst, ns.src, ns.dst, ns.hop_limit),
        (multicast_mac(group), DUT_IP, group, 255)
    );
    assert_eq!(
        ndisc(&ns),
        NdiscRepr::NeighborSolicit {
            target_addr: HOST_IP,
            lladdr: Some(RawHardwareAddress::from(DUT_MAC)),
        }
    );
    assert_eq!(lab.engine.counters().nd_solicitations, 1);
    let na = icmp6(
        HOST_MAC,
        DUT_MAC,
        HOST_IP,
        DUT_IP,
        255,
        58,
        &[],
        NA,
        &nd_body(0x60, HOST_IP, 2, Some(HOST_MAC)),
    );
    let out = lab.exchange(vec![na]);
    assert_eq!(out.len(), 1, "the held reply");
    let reply = parse(&out[0]);
    assert_eq!(
        (reply.eth_dst, reply.src, reply.dst, reply.icmp[0]),
        (HOST_MAC, DUT_IP, HOST_IP, ECHO_REPLY)
    );
    assert_eq!(reply.icmp[4..], echo_body(7, 1, &data)[..]);
    assert_eq!(lab.engine.counters().icmpv6_echo_replies, 1);
}

#[test]
fn a_solicitation_and_pings_in_one_burst_are_all_answered() {
    let mut lab = new_lab();
    let ll = link_local(DUT_MAC);
    let out = lab.exchange(vec![
        solicit(DUT_IP),
        ping(DUT_IP, 1, b"one"),
        ping(ll, 2, b"two"),
        ping(ALL_NODES, 3, b"three"),
    ]);
    let kinds: Vec<(u8, Ipv6Addr)> = out
        .iter()
        .map(|f| {
            let o = parse(f);
            (o.icmp[0], o.src)
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (NA, DUT_IP),
            (ECHO_REPLY, DUT_IP),
            (ECHO_REPLY, ll),
            (ECHO_REPLY, DUT_IP), // to all nodes: from our address on its prefix
        ]
    );
}

#[test]
fn echo_through_extension_headers_is_answered_without_them() {
    let mut lab = new_lab();
    lab.exchange(vec![solicit(DUT_IP)]);
    // Hop-by-hop: PadN(4); destination options: a skippable unknown
    // option (type 0x1e, high bits 00) of 4 bytes; then ICMPv6.
    let hbh = [60u8, 0, 1, 4, 0, 0, 0, 0];
    let dst_opts = [58u8, 0, 0x1e, 4, 1, 2, 3, 4];
    let ext = [&hbh[..], &dst_opts[..]].concat();
    let data = b"through options";
    let frame = icmp6(
        HOST_MAC,
        DUT_MAC,
        HOST_IP,
        DUT_IP,
        64,
        0,
        &ext,
        ECHO_REQUEST,
        &echo_body(9, 4, data),
    );
    let out = lab.exchange(vec![frame]);
    assert_eq!(out.len(), 1);
    let reply = parse(&out[0]);
    assert_eq!(reply.icmp[0], ECHO_REPLY);
    assert_eq!(reply.icmp[4..], echo_body(9, 4, data)[..]);
}

#[test]
fn bad_packets_are_dropped_counted_and_leave_it_answering() {
    let mut lab = new_lab();
    lab.exchange(vec![solicit(DUT_IP)]);
    let body = echo_body(1, 1, b"x");
    let with_ext = |first: u8, ext: &[u8]| {
        icmp6(
            HOST_MAC,
            DUT_MAC,
            HOST_IP,
            DUT_IP,
            64,
            first,
            ext,
            ECHO_REQUEST,
            &body,
        )
    };
    let good = ping(DUT_IP, 1, b"x");
    let mut bad_sum = good.clone();
    let last = bad_sum.len() - 1;
    bad_sum[last] ^= 0xff;
    let mut long_payload = good.clone();
    long_payload[18..20].copy_from_slice(&2000u16.to_be_bytes());
    let mut udp = good.clone();
    udp[20] = 17;
    let mut nine = Vec::new();
    for _ in 0..9 {
        nine.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
    }
    let at = nine.len() - 8;
    nine[at] = 58;
    // (frame, drop reason, the Parameter Problem's code and pointer when
    // RFC 8200 asks for one)
    let cases: Vec<(Vec<u8>, DropReason, Option<Problem>)> = vec![
        (good[..14 + 30].to_vec(), DropReason::Malformed, None),
        (long_payload, DropReason::Malformed, None),
        (bad_sum, DropReason::BadIcmpChecksum, None),
        // An upper layer we do not carry (UDP): unrecognised next header.
        (udp, DropReason::UnsupportedProtocol, Some((1, 6))),
        // A fragment header: not reassembled.
        (
            with_ext(44, &[58, 0, 0, 1, 0, 0, 0, 1]),
            DropReason::Fragment,
            None,
        ),
        // An option whose type says discard silently (high bits 01).
        (
            with_ext(60, &[58, 0, 0x41, 4, 0, 0, 0, 0]),
            DropReason::BadExtensionHeader,
            None,
        ),
        // An option whose type asks for a Parameter Problem (10), after a
        // Pad1: the pointer is the option's type.
        (
            with_ext(60, &[58, 0, 0, 0x81, 3, 0, 0, 0]),
            DropReason::BadExtensionHeader,
            Some((2, 43)),
        ),
        // A routing header with segments left: the pointer is its type.
        (
            with_ext(43, &[58, 0, 4, 1, 0, 0, 0, 0]),
            DropReason::BadExtensionHeader,
            Some((0, 42)),
        ),
        // Hop-by-hop after another header: its next header field at fault.
        (
            with_ext(60, &[0, 0, 1, 4, 0, 0, 0, 0, 58, 0, 1, 4, 0, 0, 0, 0]),
            DropReason::BadExtensionHeader,
            Some((1, 40)),
        ),
        // A header running past the packet.
        (
            with_ext(60, &[58, 9, 1, 4, 0, 0, 0, 0]),
            DropReason::Malformed,
            None,
        ),
        // An option running past its header.
        (
            with_ext(60, &[58, 0, 1, 9, 0, 0, 0, 0]),
            DropReason::Malformed,
            None,
        ),
        // ESP: an extension header we do not take.
        (
            with_ext(50, &[58, 0, 0, 0, 0, 0, 0, 0]),
            DropReason::BadExtensionHeader,
            Some((1, 6)),
        ),
        // More extension headers than we walk.
        (with_ext(60, &nine), DropReason::BadExtensionHeader, None),
        // From a multicast source.
        (
            icmp6(
                HOST_MAC,
                DUT_MAC,
                ALL_NODES,
                DUT_IP,
                64,
                58,
                &[],
                ECHO_REQUEST,
                &body,
            ),
            DropReason::Malformed,
            None,
        ),
        // To an address that is not ours.
        (ping(HOST_IP, 1, b"x"), DropReason::NotForUs, None),
    ];
    for (frame, reason, problem) in cases {
        let before = lab.dropped(reason);
        let out = lab.exchange(vec![frame.clone()]);
        assert_eq!(lab.dropped(reason), before + 1, "{reason:?} not counted");
        match problem {
            None => assert!(out.is_empty(), "{reason:?} answered"),
            Some((code, pointer)) => {
                assert_eq!(out.len(), 1, "{reason:?}: one Parameter Problem");
                let pp = parse(&out[0]);
                assert_eq!((pp.eth_dst, pp.src, pp.dst), (HOST_MAC, DUT_IP, HOST_IP));
                assert_eq!(pp.icmp[..2], [4, code], "{reason:?}");
                assert_eq!(pp.icmp[4..8], pointer.to_be_bytes(), "{reason:?}");
                assert_eq!(pp.icmp[8..], frame[14..], "the packet quoted whole");
            }
        }
    }
    assert_eq!(lab.engine.counters().icmpv6_errors, 5);
    let out = lab.exchange(vec![good]);
    assert_eq!(parse(&out[0]).icmp[0], ECHO_REPLY, "still answering");
}

#[test]
fn an_off_link_sender_is_answered_through_the_gateway() {
    let mut lab = lab_with(Some(GW_IP));
    let frame = icmp6(
        GW_MAC,
        DUT_MAC,
        FAR_IP,
        DUT_IP,
        60,
        58,
        &[],
        ECHO_REQUEST,
        &echo_body(3, 3, b"far"),
    );
    let out = lab.exchange(vec![frame]);
    let ns = parse(&out[0]);
    assert_eq!(
        ndisc(&ns),
        NdiscRepr::NeighborSolicit {
            target_addr: GW_IP,
            lladdr: Some(RawHardwareAddress::from(DUT_MAC)),
        }
    );
    assert_eq!(
        ns.src,
        link_local(DUT_MAC),
        "a link-local target is asked from ours"
    );
    let na = icmp6(
        GW_MAC,
        DUT_MAC,
        GW_IP,
        link_local(DUT_MAC),
        255,
        58,
        &[],
        NA,
        &nd_body(0x60, GW_IP, 2, Some(GW_MAC)),
    );
    let out = lab.exchange(vec![na]);
    let reply = parse(&out[0]);
    assert_eq!(
        (reply.eth_dst, reply.src, reply.dst),
        (GW_MAC, DUT_IP, FAR_IP)
    );
    // Sent to all nodes (no address of ours to answer from): answered
    // from our global address, one a router forwards. Before, from our
    // link-local one (RFC 4291 §2.5.6: never forwarded).
    let to_all = icmp6(
        GW_MAC,
        multicast_mac(ALL_NODES),
        FAR_IP,
        ALL_NODES,
        60,
        58,
        &[],
        ECHO_REQUEST,
        &echo_body(4, 4, b"far"),
    );
    let out = lab.exchange(vec![to_all]);
    let reply = parse(&out[0]);
    assert_eq!(
        (reply.icmp[0], reply.eth_dst, reply.src, reply.dst),
        (ECHO_REPLY, GW_MAC, DUT_IP, FAR_IP)
    );
}

#[test]
fn advertisements_update_only_what_we_asked_and_never_our_own_addresses() {
    let mut lab = new_lab();
    let unasked = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 5);
    let advert = |target, mac| {
        icmp6(
            HOST_MAC,
            multicast_mac(ALL_NODES),
            HOST_IP,
            ALL_NODES,
            255,
            58,
            &[],
            NA,
            &nd_body(0x20, target, 2, Some(mac)),
        )
    };
    assert!(lab
        .exchange(vec![advert(unasked, HOST_MAC), advert(DUT_IP, HOST_MAC)])
        .is_empty());
    let v6 = lab.engine.interface(0).ipv6().unwrap();
    assert_eq!(
        v6.cache().peek(unasked, lab.now),
        None,
        "§7.2.5: no entry made"
    );
    assert_eq!(lab.engine.counters().nd_conflicts, 1);
    // A solicited advertisement to a group is invalid (§7.1.2).
    let mut bad = advert(HOST_IP, HOST_MAC);
    bad[54 + 4] = 0x60;
    let icmp_at = 54;
    bad[icmp_at + 2..icmp_at + 4].fill(0);
    Icmpv6Packet::new_unchecked(&mut bad[icmp_at..]).fill_checksum(&HOST_IP, &ALL_NODES);
    let before = lab.dropped(DropReason::Malformed);
    lab.exchange(vec![bad]);
    assert_eq!(lab.dropped(DropReason::Malformed), before + 1);
}

#[test]
fn held_replies_give_up_when_the_neighbour_never_answers() {
    let mut lab = new_lab();
    assert_eq!(lab.exchange(vec![ping(DUT_IP, 1, b"x")]).len(), 1);
    let before = lab.dropped(DropReason::NeighborMiss);
    // Solicitations repeat (paced) while the reply waits, then it goes.
    let mut asked = 1;
    for _ in 0..40 {
        asked += lab.advance(Duration::from_millis(100)).len();
    }
    assert!(asked >= 3, "solicited again: {asked}");
    assert_eq!(lab.dropped(DropReason::NeighborMiss), before + 1);
}

/// Every mutation of valid frames, in bursts, is counted and none stops
/// the port answering (the fuzz targets feed the same engine set-up).
#[test]
fn mutated_frames_in_bursts_never_stop_it() {
    let mut lab = new_lab();
    let seeds = [
        solicit(DUT_IP),
        ping(DUT_IP, 1, b"seed"),
        icmp6(
            HOST_MAC,
            DUT_MAC,
            HOST_IP,
            DUT_IP,
            64,
            0,
            &[60, 0, 1, 4, 0, 0, 0, 0, 58, 0, 0x1e, 4, 1, 2, 3, 4],
            ECHO_REQUEST,
            &echo_body(1, 1, b"x"),
        ),
    ];
    let mut x = 0x2545_f491_u32;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    };
    for _ in 0..400 {
        let burst: Vec<Vec<u8>> = (0..8)
            .map(|_| {
                let mut f = seeds[rand() as usize % seeds.len()].clone();
                for _ in 0..1 + rand() % 4 {
                    let at = 14 + rand() as usize % (f.len() - 14);
                    f[at] = rand() as u8;
                }
                if rand() % 4 == 0 {
                    let len = 14 + rand() as usize % (f.len() - 14);
                    f.truncate(len);
                }
                f
            })
            .collect();
        lab.exchange(burst);
    }
    let c = *lab.engine.counters();
    assert_eq!(c.rx_packets, 400 * 8);
    let out = lab.exchange(vec![ping(DUT_IP, 9, b"after")]);
    assert!(
        out.iter().any(|f| parse(f).icmp[0] == ECHO_REPLY),
        "still answering"
    );
}

#[test]
fn parameter_problems_are_rate_limited_and_never_sent_to_groups() {
    let mut lab = new_lab();
    lab.exchange(vec![solicit(DUT_IP)]);
    let routed = |dst: Ipv6Addr, dst_mac, option: u8| {
        icmp6(
            HOST_MAC,
            dst_mac,
            HOST_IP,
            dst,
            64,
            60,
            &[58, 0, option, 4, 0, 0, 0, 0],
            ECHO_REQUEST,
            &echo_body(1, 1, b"x"),
        )
    };
    // To all nodes: an option of type 11xxxxxx gets no answer, 10xxxxxx
    // does (RFC 8200 §4.2).
    let group = multicast_mac(ALL_NODES);
    assert!(lab
        .exchange(vec![routed(ALL_NODES, group, 0xc2)])
        .is_empty());
    assert_eq!(lab.exchange(vec![routed(ALL_NODES, group, 0x82)]).len(), 1);
    // A burst of 50: at most the bucket's burst answered, the rest counted.
    let burst: Vec<Vec<u8>> = (0..50).map(|_| routed(DUT_IP, DUT_MAC, 0x82)).collect();
    let before = lab.engine.counters().icmpv6_errors;
    let answered = lab.exchange(burst).len() as u64;
    let c = *lab.engine.counters();
    assert!(answered <= 10, "{answered} errors in one burst");
    assert_eq!(c.icmpv6_errors, before + answered);
    assert_eq!(c.icmpv6_errors_limited, 50 - answered);
    // A second later the bucket is full again.
    lab.advance(Duration::from_secs(1));
    assert_eq!(lab.exchange(vec![routed(DUT_IP, DUT_MAC, 0x82)]).len(), 1);
}

#[test]
fn a_stale_neighbour_is_still_answered_while_it_is_asked_again() {
    let mut lab = new_lab();
    lab.exchange(vec![solicit(DUT_IP)]);
    // Past RFC 4861's reachable time the entry goes stale: the reply
    // goes at once to the MAC we know, beside a solicitation to confirm.
    lab.advance(Duration::from_secs(31));
    let out = lab.exchange(vec![ping(DUT_IP, 1, b"stale")]);
    let kinds: Vec<(u8, EthernetAddress)> = out
        .iter()
        .map(|f| {
            let o = parse(f);
            (o.icmp[0], o.eth_dst)
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (ECHO_REPLY, HOST_MAC),
            (NS, multicast_mac(solicited_node(HOST_IP)))
        ]
    );
}

/// RFC 6583 §7.1: pings from 20,000 addresses on our /64 that nobody
/// answers for (spoofed) each make us ask for their sender; those
/// questions churn among a quota of their own, so a neighbour already
/// known keeps its entry and is answered at once, with no solicitation
/// first. Before, the flood pushed it out of the cache (4,096 entries).
#[test]
fn a_flood_from_spoofed_on_link_sources_leaves_known_neighbours_answered() {
    let mut lab = new_lab();
    lab.exchange(vec![solicit(DUT_IP)]);
    for chunk in 0..(20_000u32 / 32) {
        let burst: Vec<Vec<u8>> = (0..32)
            .map(|i| {
                let n = chunk * 32 + i;
                let spoofed = Ipv6Addr::new(
                    0x2001,
                    0xdb8,
                    0x77,
                    0,
                    0,
                    0xdead,
                    (n >> 16) as u16,
                    n as u16,
                );
                icmp6(
                    HOST_MAC,
                    DUT_MAC,
                    spoofed,
                    DUT_IP,
                    64,
                    58,
                    &[],
                    ECHO_REQUEST,
                    &echo_body(9, n as u16, b"flood"),
                )
            })
            .collect();
        lab.exchange(burst);
    }
    let out = lab.exchange(vec![ping(DUT_IP, 1, b"known")]);
    let kinds: Vec<(u8, EthernetAddress)> = out
        .iter()
        .map(|f| {
            let o = parse(f);
            (o.icmp[0], o.eth_dst)
        })
        .collect();
    assert_eq!(kinds, [(ECHO_REPLY, HOST_MAC)]);
}

/// The MLDv2 Reports a frame holds: (source, destination, hop limit,
/// the hop-by-hop header, the groups reported as listened to).
fn parse_report(f: &[u8]) -> (Ipv6Addr, Ipv6Addr, u8, Vec<u8>, Vec<Ipv6Addr>) {
    let frame = EthernetFrame::new_checked(f).unwrap();
    assert_eq!(
        frame.dst_addr(),
        multicast_mac(dataplane::net::ipv6::MLD_REPORTS)
    );
    let ip = Ipv6Packet::new_checked(frame.payload()).unwrap();
    assert_eq!(u8::from(ip.next_header()), 0, "a hop-by-hop header");
    let hbh = ip.payload()[..8].to_vec();
    let icmp = &ip.payload()[8..];
    assert!(Icmpv6Packet::new_checked(icmp)
        .unwrap()
        .verify_checksum(&ip.src_addr(), &ip.dst_addr()));
    assert_eq!(icmp[0], 143, "an MLDv2 Report");
    let n = usize::from(u16::from_be_bytes([icmp[6], icmp[7]]));
    let groups = icmp[8..]
        .chunks_exact(20)
        .take(n)
        .map(|r| {
            assert_eq!(r[..4], [2, 0, 0, 0], "MODE_IS_EXCLUDE, no sources");
            Ipv6Addr::from(<[u8; 16]>::try_from(&r[4..20]).unwrap())
        })
        .collect();
    (ip.src_addr(), ip.dst_addr(), ip.hop_limit(), hbh, groups)
}

#[test]
fn the_reporting_engine_reports_its_groups_checks_its_addresses_and_answers_queries() {
    let mut lab = Lab::new(DUT_MAC, HOST_MAC, Ipv4Addr::new(10, 77, 0, 1), None);
    let second = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 1, 0x2345);
    lab.engine.enable_ipv6(
        0,
        Ipv6Config {
            addresses: vec![(DUT_IP, 64), (second, 64)],
            gateway: None,
        },
    );
    lab.engine.join_ipv6_groups(0);
    let ll = link_local(DUT_MAC);
    // The link-local address and DUT_IP end alike (::ff:fe00:1, ::1): one
    // group for both.
    assert_eq!(solicited_node(ll), solicited_node(DUT_IP));
    let want_groups = vec![solicited_node(ll), solicited_node(second)];
    // RFC 3810 §6.1: unsolicited, twice, a second apart; with the first,
    // a duplicate address check of each address (RFC 4862 §5.4.2: from
    // ::, to the address's group, no option).
    let first = lab.exchange(vec![]);
    assert_eq!(first.len(), 4, "a report and three checks");
    for (f, target) in first[1..].iter().zip([ll, DUT_IP, second]) {
        let ns = parse(f);
        assert_eq!(
            (ns.eth_dst, ns.src, ns.dst, ns.hop_limit),
            (
                multicast_mac(solicited_node(target)),
                Ipv6Addr::UNSPECIFIED,
                solicited_node(target),
                255
            )
        );
        assert_eq!(
            ndisc(&ns),
            NdiscRepr::NeighborSolicit {
                target_addr: target,
                lladdr: None
            }
        );
    }
    // Another node defends `second`: a conflict, counted.
    let defend = icmp6(
        HOST_MAC,
        multicast_mac(ALL_NODES),
        HOST_IP,
        ALL_NODES,
        255,
        58,
        &[],
        NA,
        &nd_body(0x20, second, 2, Some(HOST_MAC)),
    );
    assert!(lab.exchange(vec![defend]).is_empty());
    assert_eq!(lab.engine.counters().nd_conflicts, 1);
    let (src, dst, hops, hbh, groups) = parse_report(&first[0]);
    assert_eq!((src, dst, hops), (ll, dataplane::net::ipv6::MLD_REPORTS, 1));
    assert_eq!(hbh[2..4], [5, 2], "Router Alert");
    assert_eq!(groups, want_groups);
    assert!(lab.advance(Duration::from_millis(500)).is_empty());
    assert_eq!(lab.advance(Duration::from_millis(500)).len(), 1);
    assert!(lab.advance(Duration::from_secs(5)).is_empty(), "then quiet");
    assert_eq!(lab.engine.counters().mld_reports, 2);
    // A general query (from a link-local router, hop limit 1, through
    // a Router Alert option) is answered with a report.
    let mut query = vec![0u8; 20]; // max response, reserved, ::, flags...
    query[0..2].copy_from_slice(&1000u16.to_be_bytes());
    let query = |hops: u8, from: Ipv6Addr| {
        icmp6(
            GW_MAC,
            multicast_mac(ALL_NODES),
            from,
            ALL_NODES,
            hops,
            0,
            &[58, 0, 5, 2, 0, 0, 1, 0],
            130,
            &query,
        )
    };
    // Answered within its Maximum Response Delay (1,000 ms), after a
    // random part of it (RFC 3810 §6.2).
    let mut out = lab.exchange(vec![query(1, GW_IP)]);
    for _ in 0..11 {
        out.extend(lab.advance(Duration::from_millis(100)));
    }
    assert_eq!(out.len(), 1);
    assert_eq!(parse_report(&out[0]).4, want_groups);
    // Not from a link-local address, or forwarded: dropped.
    let before = lab.dropped(DropReason::Malformed);
    assert!(lab
        .exchange(vec![query(1, HOST_IP), query(2, GW_IP)])
        .is_empty());
    assert_eq!(lab.dropped(DropReason::Malformed), before + 2);
}

/// RFC 4861 §7.2.5: an advertisement without the Override flag does not
/// move a known neighbour to another MAC (a reachable entry turns stale:
/// replies still go to the MAC it had, and it is asked again); with
/// Override it does, stale until confirmed; a solicited one makes it
/// reachable. Before, any advertisement replaced the MAC and made the
/// entry reachable for 30 s.
#[test]
fn advertisements_follow_their_override_and_solicited_flags() {
    const OTHER_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x99]);
    let mut lab = new_lab();
    // The host's solicitation makes its entry (stale, HOST_MAC); a
    // solicited advertisement makes it reachable.
    lab.exchange(vec![solicit(DUT_IP)]);
    let peek = |lab: &Lab| {
        lab.engine
            .interface(0)
            .ipv6()
            .unwrap()
            .cache()
            .peek(HOST_IP, lab.now)
    };
    let advert = |flags, mac| {
        icmp6(
            OTHER_MAC,
            multicast_mac(ALL_NODES),
            HOST_IP,
            ALL_NODES,
            255,
            58,
            &[],
            NA,
            &nd_body(flags, HOST_IP, 2, Some(mac)),
        )
    };
    // The MAC an echo reply goes to.
    let reply_mac = |lab: &mut Lab, seq| {
        let out = lab.exchange(vec![ping(DUT_IP, seq, b"x")]);
        let reply = out
            .iter()
            .find(|f| f.len() > 54 && f[54] == 129)
            .expect("an echo reply");
        EthernetAddress::from_bytes(&reply[..6])
    };
    // Solicited (to us, unicast) for the MAC it has: reachable.
    let solicited_by = |mac: EthernetAddress| {
        let mut f = advert(0x40, mac);
        f[..6].copy_from_slice(DUT_MAC.as_bytes());
        f[6..12].copy_from_slice(mac.as_bytes());
        f[38..54].copy_from_slice(&DUT_IP.octets());
        f[56..58].fill(0);
        Icmpv6Packet::new_unchecked(&mut f[54..]).fill_checksum(&HOST_IP, &DUT_IP);
        f
    };
    lab.exchange(vec![solicited_by(HOST_MAC)]);
    assert_eq!(peek(&lab), Some(HOST_MAC));
    // Neither flag: the MAC stays, the entry goes stale.
    lab.exchange(vec![advert(0x00, OTHER_MAC)]);
    assert_eq!(peek(&lab), None, "stale");
    assert_eq!(reply_mac(&mut lab, 1), HOST_MAC);
    // Override: the MAC moves, stale until confirmed.
    lab.exchange(vec![advert(0x20, OTHER_MAC)]);
    assert_eq!(peek(&lab), None);
    assert_eq!(reply_mac(&mut lab, 2), OTHER_MAC);
    // Solicited: reachable.
    lab.exchange(vec![solicited_by(OTHER_MAC)]);
    assert_eq!(peek(&lab), Some(OTHER_MAC));
}

/// RFC 4443 §2.4(e): no Parameter Problem for a packet that came as a
/// link-layer broadcast or multicast (e.4, e.5: as for an IP group, only
/// an option that asks even then), nor about an ICMPv6 error message
/// (e.1). Before, the Ethernet destination was not looked at, and the
/// ICMPv6 type behind a refused header not at all; a Redirect (e.2)
/// got one.
#[test]
fn parameter_problems_spare_link_layer_groups_and_icmpv6_errors() {
    let mut lab = new_lab();
    lab.exchange(vec![solicit(DUT_IP)]);
    // To our unicast address, then UDP (which we do not carry).
    let udp = |dst_mac| {
        icmp6(
            HOST_MAC,
            dst_mac,
            HOST_IP,
            DUT_IP,
            64,
            60,
            &[17, 0, 1, 4, 0, 0, 0, 0],
            ECHO_REQUEST,
            &echo_body(1, 1, b"x"),
        )
    };
    for group in [EthernetAddress::BROADCAST, multicast_mac(ALL_NODES)] {
        let before = lab.dropped(DropReason::UnsupportedProtocol);
        assert!(lab.exchange(vec![udp(group)]).is_empty(), "{group}");
        assert_eq!(lab.dropped(DropReason::UnsupportedProtocol), before + 1);
    }
    assert_eq!(
        lab.exchange(vec![udp(DUT_MAC)]).len(),
        1,
        "unicast: answered"
    );
    // An option that asks for an answer (10xxxxxx) before an ICMPv6
    // error (Destination Unreachable): none; before an echo: one.
    let behind = |kind| {
        icmp6(
            HOST_MAC,
            DUT_MAC,
            HOST_IP,
            DUT_IP,
            64,
            60,
            &[58, 0, 0x82, 4, 0, 0, 0, 0],
            kind,
            &echo_body(1, 2, b"x"),
        )
    };
    lab.advance(Duration::from_secs(1));
    assert!(lab.exchange(vec![behind(1)]).is_empty(), "about an error");
    // Nor about a Redirect (e.2).
    assert!(
        lab.exchange(vec![behind(137)]).is_empty(),
        "about a redirect"
    );
    assert_eq!(lab.exchange(vec![behind(ECHO_REQUEST)]).len(), 1);
    // The same behind an atomic fragment header (RFC 6946: processed as
    // a whole packet): none about the error. Before, the walk for the
    // ICMPv6 type stopped at the Fragment header and answered.
    let behind_fragment = |kind| {
        icmp6(
            HOST_MAC,
            DUT_MAC,
            HOST_IP,
            DUT_IP,
            64,
            44,
            &[60, 0, 0, 0, 0, 0, 0, 7, 58, 0, 0x82, 4, 0, 0, 0, 0],
            kind,
            &echo_body(1, 3, b"x"),
        )
    };
    lab.advance(Duration::from_secs(1));
    assert!(
        lab.exchange(vec![behind_fragment(1)]).is_empty(),
        "about an error behind a fragment header"
    );
    assert_eq!(lab.exchange(vec![behind_fragment(ECHO_REQUEST)]).len(), 1);
}

/// A general query asking for an answer at once (Maximum Response Code
/// 0), fifty in a burst and then one every 10 ms for three seconds: at
/// most one report a second (RFC 3810 §6.2: one answer for queries
/// while one is pending; and a floor of a second between reports).
/// Before, every query was answered at once: a report up to 18 times a
/// query's size, for each.
#[test]
fn a_flood_of_queries_gets_at_most_a_report_a_second() {
    let mut lab = new_lab();
    let query = || {
        icmp6(
            GW_MAC,
            multicast_mac(ALL_NODES),
            GW_IP,
            ALL_NODES,
            1,
            0,
            &[58, 0, 5, 2, 0, 0, 1, 0],
            130,
            &[0u8; 20],
        )
    };
    let mut reports = lab.exchange((0..50).map(|_| query()).collect()).len();
    for _ in 0..300 {
        reports += lab.advance(Duration::from_millis(10)).len();
        reports += lab.exchange(vec![query()]).len();
    }
    assert!((2..=4).contains(&reports), "{reports} reports in 3 s");
    assert_eq!(lab.engine.counters().mld_reports, reports as u64);
}

/// A port with more addresses than one report holds (72 groups)
/// reports every group, in as many frames as they take (RFC 3810
/// §5.2.15). Before, the groups past the 72nd were never reported, and
/// a switch snooping MLD stopped passing their solicitations.
#[test]
fn every_group_is_reported_however_many() {
    let mut lab = Lab::new(DUT_MAC, HOST_MAC, Ipv4Addr::new(10, 77, 0, 1), None);
    let addresses: Vec<(Ipv6Addr, u8)> = (1..=100u16)
        .map(|i| (Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 2, i), 64))
        .collect();
    lab.engine.enable_ipv6(
        0,
        Ipv6Config {
            addresses: addresses.clone(),
            gateway: None,
        },
    );
    lab.engine.join_ipv6_groups(0);
    let mut reported: Vec<Ipv6Addr> = lab
        .exchange(vec![])
        .iter()
        .filter(|f| f[12..14] == [0x86, 0xdd] && f[20] == 0)
        .flat_map(|f| parse_report(f).4)
        .collect();
    reported.sort();
    let mut want: Vec<Ipv6Addr> = addresses
        .iter()
        .map(|&(a, _)| solicited_node(a))
        .chain([solicited_node(link_local(DUT_MAC))])
        .collect();
    want.sort();
    want.dedup();
    assert_eq!(want.len(), 101);
    assert_eq!(reported, want);
    assert_eq!(lab.engine.counters().mld_reports, 2, "two frames");
}
