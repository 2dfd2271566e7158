//! ARP and ICMP handling of the engine, over the in-memory link: a test host
//! on one end builds frames with smoltcp::wire, the engine on the other end
//! answers.

mod common;

use common::arp_frame as arp;

use std::net::Ipv4Addr;
use std::time::Duration;

use dataplane::stats::DropReason;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Packet, Ipv4Repr,
};

const DUT_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
const GW_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0xfe]);
const DUT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const HOST_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const GW_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 254);
const FAR_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);

type Lab = common::MemLab;

fn new_lab(gateway: Option<Ipv4Addr>) -> Lab {
    Lab::new(DUT_MAC, HOST_MAC, DUT_IP, gateway)
}

fn arp_request(target: Ipv4Addr) -> Vec<u8> {
    arp(
        ArpOperation::Request,
        HOST_MAC,
        HOST_IP,
        EthernetAddress::BROADCAST,
        target,
    )
}

fn ping(
    src_mac: EthernetAddress,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ident: u16,
    seq: u16,
    data: &[u8],
) -> Vec<u8> {
    let icmp = Icmpv4Repr::EchoRequest {
        ident,
        seq_no: seq,
        data,
    };
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Icmp,
        payload_len: icmp.buffer_len(),
        hop_limit: 64,
    };
    common::ipv4_frame(src_mac, DUT_MAC, &ip, |payload| {
        icmp.emit(
            &mut Icmpv4Packet::new_unchecked(payload),
            &ChecksumCapabilities::default(),
        );
    })
}

/// Parses an echo reply: (eth dst, ip src, ip dst, ident, seq, data).
fn parse_echo_reply(f: &[u8]) -> (EthernetAddress, Ipv4Addr, Ipv4Addr, u16, u16, Vec<u8>) {
    let frame = EthernetFrame::new_checked(f).unwrap();
    assert_eq!(frame.src_addr(), DUT_MAC);
    assert_eq!(frame.ethertype(), EthernetProtocol::Ipv4);
    let ip = Ipv4Packet::new_checked(frame.payload()).unwrap();
    assert!(ip.verify_checksum(), "IP checksum of the reply");
    let caps = ChecksumCapabilities::default();
    let repr = Ipv4Repr::parse(&ip, &caps).unwrap();
    let icmp = Icmpv4Packet::new_checked(ip.payload()).unwrap();
    assert!(icmp.verify_checksum(), "ICMP checksum of the reply");
    match Icmpv4Repr::parse(&icmp, &caps).unwrap() {
        Icmpv4Repr::EchoReply {
            ident,
            seq_no,
            data,
        } => (
            frame.dst_addr(),
            repr.src_addr,
            repr.dst_addr,
            ident,
            seq_no,
            data.to_vec(),
        ),
        other => panic!("not an echo reply: {other:?}"),
    }
}

#[test]
fn answers_arp_for_its_address_and_learns_the_sender() {
    let mut lab = new_lab(None);
    let replies = lab.exchange(vec![arp_request(DUT_IP)]);
    assert_eq!(replies.len(), 1);
    let f = &replies[0];
    assert_eq!(f.len(), 60, "padded to the minimum frame");
    let frame = EthernetFrame::new_checked(&f[..]).unwrap();
    assert_eq!(frame.dst_addr(), HOST_MAC);
    assert_eq!(frame.src_addr(), DUT_MAC);
    let repr = ArpRepr::parse(&ArpPacket::new_checked(frame.payload()).unwrap()).unwrap();
    assert_eq!(
        repr,
        ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Reply,
            source_hardware_addr: DUT_MAC,
            source_protocol_addr: DUT_IP,
            target_hardware_addr: HOST_MAC,
            target_protocol_addr: HOST_IP,
        }
    );
    assert!(f[42..].iter().all(|&b| b == 0), "padding is zeros");
    assert_eq!(
        lab.engine.interface(0).arp().peek(HOST_IP, lab.now),
        Some(HOST_MAC)
    );
    assert_eq!(lab.engine.counters().arp_replies, 1);
}

/// A request for our address from a sender off our subnet is answered,
/// but makes no cache entry (nothing would look it up: that address is
/// reached through the gateway). Before, a flood of requests from random
/// senders filled the cache with such entries, pushing out neighbours in
/// use (backends, health-checked members). An on-subnet sender in the
/// same burst is learned.
#[test]
fn arp_from_a_sender_off_the_subnet_is_answered_not_learned() {
    let mut lab = new_lab(None);
    let request = |ip| {
        arp(
            ArpOperation::Request,
            HOST_MAC,
            ip,
            EthernetAddress::BROADCAST,
            DUT_IP,
        )
    };
    let far: Vec<_> = (1..=20)
        .map(|i| request(Ipv4Addr::new(192, 0, 2, i)))
        .collect();
    let mut burst = far.clone();
    burst.push(request(HOST_IP));
    assert_eq!(lab.exchange(burst).len(), 21, "every request answered");
    let arp_cache = lab.engine.interface(0).arp();
    assert_eq!(arp_cache.known(HOST_IP), Some(HOST_MAC));
    assert_eq!(arp_cache.known(Ipv4Addr::new(192, 0, 2, 1)), None);
    assert_eq!(arp_cache.len(), 1, "only the on-subnet sender");
}

#[test]
fn ignores_arp_for_other_addresses() {
    let mut lab = new_lab(None);
    assert!(lab
        .exchange(vec![arp_request(Ipv4Addr::new(10, 77, 0, 9))])
        .is_empty());
    assert_eq!(lab.dropped(DropReason::NotForUs), 1);
    assert!(
        lab.engine.interface(0).arp().is_empty(),
        "no entry made for a packet not for us"
    );
}

#[test]
fn arp_from_a_sender_no_host_can_be_is_neither_answered_nor_learned() {
    // RFC 1122 §3.2.1.3's impossible sources (broadcast, multicast,
    // loopback, the subnet's broadcast) and an all-zero MAC: before, each
    // request for our address made a cache entry (one nothing would use)
    // and got a reply.
    let mut lab = new_lab(None);
    let from = |mac, ip| {
        arp(
            ArpOperation::Request,
            mac,
            ip,
            EthernetAddress::BROADCAST,
            DUT_IP,
        )
    };
    let cases = [
        (
            "limited broadcast",
            from(HOST_MAC, Ipv4Addr::BROADCAST),
            DropReason::BadSource,
        ),
        (
            "multicast",
            from(HOST_MAC, Ipv4Addr::new(224, 0, 0, 1)),
            DropReason::BadSource,
        ),
        (
            "loopback",
            from(HOST_MAC, Ipv4Addr::new(127, 0, 0, 1)),
            DropReason::BadSource,
        ),
        (
            "subnet broadcast",
            from(HOST_MAC, Ipv4Addr::new(10, 77, 0, 255)),
            DropReason::BadSource,
        ),
        (
            "all-zero MAC",
            from(EthernetAddress([0; 6]), HOST_IP),
            DropReason::Malformed,
        ),
    ];
    for (what, frame, reason) in cases {
        let before = lab.dropped(reason);
        assert!(lab.exchange(vec![frame]).is_empty(), "{what}: answered");
        assert_eq!(lab.dropped(reason), before + 1, "{what}: not counted");
    }
    assert!(lab.engine.interface(0).arp().is_empty(), "nothing learned");
    // An address probe (RFC 5227, sender 0.0.0.0) is answered, not
    // learned; a real sender both.
    let probe = from(HOST_MAC, Ipv4Addr::UNSPECIFIED);
    assert_eq!(lab.exchange(vec![probe]).len(), 1);
    assert!(lab.engine.interface(0).arp().is_empty());
    assert_eq!(lab.exchange(vec![arp_request(DUT_IP)]).len(), 1);
    assert_eq!(
        lab.engine.interface(0).arp().peek(HOST_IP, lab.now),
        Some(HOST_MAC)
    );
}

#[test]
fn echo_reply_mirrors_ident_seq_and_data() {
    let mut lab = new_lab(None);
    lab.exchange(vec![arp_request(DUT_IP)]);
    let data: Vec<u8> = (0..56u8).collect();
    let replies = lab.exchange(vec![ping(HOST_MAC, HOST_IP, DUT_IP, 0x1234, 7, &data)]);
    assert_eq!(replies.len(), 1);
    let (dst, src, to, ident, seq, got) = parse_echo_reply(&replies[0]);
    assert_eq!(
        (dst, src, to, ident, seq),
        (HOST_MAC, DUT_IP, HOST_IP, 0x1234, 7)
    );
    assert_eq!(got, data);
    assert_eq!(lab.engine.counters().icmp_echo_replies, 1);
}

#[test]
fn padded_request_gets_unpadded_reply() {
    let mut lab = new_lab(None);
    lab.exchange(vec![arp_request(DUT_IP)]);
    let mut req = ping(HOST_MAC, HOST_IP, DUT_IP, 1, 1, b"hi");
    let ip_end = req.len();
    req.resize(60, 0xee); // Ethernet padding after the IP packet
    let replies = lab.exchange(vec![req]);
    assert_eq!(replies[0].len(), ip_end);
    assert_eq!(parse_echo_reply(&replies[0]).5, b"hi");
}

#[test]
fn unknown_neighbour_is_resolved_then_answered() {
    let mut lab = new_lab(None);
    // No ARP from the host first: the engine must ask.
    let out = lab.exchange(vec![ping(HOST_MAC, HOST_IP, DUT_IP, 9, 1, b"x")]);
    assert_eq!(out.len(), 1, "an ARP request, no reply yet");
    let frame = EthernetFrame::new_checked(&out[0][..]).unwrap();
    assert_eq!(frame.dst_addr(), EthernetAddress::BROADCAST);
    let repr = ArpRepr::parse(&ArpPacket::new_checked(frame.payload()).unwrap()).unwrap();
    assert!(
        matches!(repr, ArpRepr::EthernetIpv4 { operation: ArpOperation::Request, target_protocol_addr, source_protocol_addr, .. }
        if target_protocol_addr == HOST_IP && source_protocol_addr == DUT_IP)
    );
    // A second ping within the probe interval waits too, with no second
    // request.
    assert!(lab
        .exchange(vec![ping(HOST_MAC, HOST_IP, DUT_IP, 9, 2, b"x")])
        .is_empty());
    // The host answers: both held replies leave, in order.
    let reply = arp(ArpOperation::Reply, HOST_MAC, HOST_IP, DUT_MAC, DUT_IP);
    let out = lab.exchange(vec![reply]);
    assert_eq!(out.len(), 2);
    assert_eq!(parse_echo_reply(&out[0]).4, 1);
    assert_eq!(parse_echo_reply(&out[1]).4, 2);
    assert_eq!(lab.dropped(DropReason::NeighborMiss), 0);
}

/// The target of an ARP request frame, if `frame` is one.
fn requested(frame: &[u8]) -> Option<Ipv4Addr> {
    let frame = EthernetFrame::new_checked(frame).ok()?;
    match ArpRepr::parse(&ArpPacket::new_checked(frame.payload()).ok()?).ok()? {
        ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Request,
            target_protocol_addr,
            ..
        } => Some(target_protocol_addr),
        _ => None,
    }
}

#[test]
fn a_burst_from_many_new_neighbours_asks_for_each_at_once() {
    // 40 hosts on the link ping in one burst, none known: more misses than
    // the engine queues requests for in one go (16). Each host must still
    // be asked within milliseconds, not after the 1 s probe interval, and
    // every reply leaves once its host answers.
    let mut lab = new_lab(None);
    let hosts: Vec<Ipv4Addr> = (10..50).map(|i| Ipv4Addr::new(10, 77, 0, i)).collect();
    let mac = |i: usize| EthernetAddress([0x02, 0, 0, 0, 1, i as u8]);
    let pings = hosts
        .iter()
        .enumerate()
        .map(|(i, &h)| ping(mac(i), h, DUT_IP, 7, 1, b"x"))
        .collect();
    let mut asked: Vec<Ipv4Addr> = lab
        .exchange(pings)
        .iter()
        .filter_map(|f| requested(f))
        .collect();
    for _ in 0..5 {
        asked.extend(
            lab.advance(Duration::from_millis(1))
                .iter()
                .filter_map(|f| requested(f)),
        );
    }
    asked.sort();
    assert_eq!(asked, hosts, "one request for each host within 5 ms");
    let answers = hosts
        .iter()
        .enumerate()
        .map(|(i, &h)| arp(ArpOperation::Reply, mac(i), h, DUT_MAC, DUT_IP))
        .collect();
    let replies = lab.exchange(answers);
    assert_eq!(replies.len(), hosts.len(), "every held echo reply left");
    assert_eq!(lab.dropped(DropReason::NeighborMiss), 0);
}

#[test]
fn unanswered_resolution_drops_after_timeout() {
    let mut lab = new_lab(None);
    assert_eq!(
        lab.exchange(vec![ping(HOST_MAC, HOST_IP, DUT_IP, 9, 1, b"x")])
            .len(),
        1,
        "ARP request"
    );
    // Requests repeat once a second while the frame waits.
    assert_eq!(lab.advance(Duration::from_millis(500)).len(), 0, "paced");
    assert_eq!(
        lab.advance(Duration::from_millis(600)).len(),
        1,
        "repeated after a second"
    );
    lab.advance(Duration::from_secs(2));
    assert_eq!(lab.dropped(DropReason::NeighborMiss), 1);
    let reply = arp(ArpOperation::Reply, HOST_MAC, HOST_IP, DUT_MAC, DUT_IP);
    assert!(lab.exchange(vec![reply]).is_empty(), "nothing left to send");
}

#[test]
fn off_subnet_replies_go_through_the_resolved_gateway() {
    let mut lab = new_lab(Some(GW_IP));
    // The first tick asks for the gateway.
    let out = lab.advance(Duration::from_millis(2));
    assert_eq!(out.len(), 1);
    let frame = EthernetFrame::new_checked(&out[0][..]).unwrap();
    let repr = ArpRepr::parse(&ArpPacket::new_checked(frame.payload()).unwrap()).unwrap();
    assert!(
        matches!(repr, ArpRepr::EthernetIpv4 { target_protocol_addr, .. } if target_protocol_addr == GW_IP)
    );
    lab.exchange(vec![arp(
        ArpOperation::Reply,
        GW_MAC,
        GW_IP,
        DUT_MAC,
        DUT_IP,
    )]);
    let out = lab.exchange(vec![ping(GW_MAC, FAR_IP, DUT_IP, 5, 5, b"far")]);
    let (dst, _, to, ..) = parse_echo_reply(&out[0]);
    assert_eq!((dst, to), (GW_MAC, FAR_IP));
}

/// TCP from one of our own addresses is dropped unanswered (RFC 1122
/// §3.2.1.3: no peer sends from them). Before, a SYN from a VIP to
/// itself was taken: on the subnet, its SYN-ACK waited on ARP for our own
/// address; for a VIP routed to us, the SYN-ACK went to the gateway,
/// which routed it back, and the ACKs it drew looped until the
/// handshake's deadline: one spoofed segment, ten seconds of traffic.
#[test]
fn tcp_from_our_own_addresses_is_dropped_unanswered() {
    use common::host::Seg;
    use smoltcp::wire::TcpControl;
    const LINKED: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 50);
    const ROUTED: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
    let mut lab = new_lab(Some(GW_IP));
    let from_gateway = arp(
        ArpOperation::Request,
        GW_MAC,
        GW_IP,
        EthernetAddress::BROADCAST,
        DUT_IP,
    );
    lab.exchange(vec![from_gateway]);
    for vip in [DUT_IP, LINKED, ROUTED] {
        lab.engine.listen(vip, 443);
    }
    let syn = |from: Ipv4Addr, to: Ipv4Addr, port: u16| {
        Seg::to(443, port, 1, None)
            .with(TcpControl::Syn, &[])
            .frame_between(from, to)
    };
    // All in one burst, with a SYN from our own address to another of them.
    let spoofed = vec![
        syn(DUT_IP, DUT_IP, 41_000),
        syn(LINKED, LINKED, 41_001),
        syn(ROUTED, ROUTED, 41_002),
        syn(ROUTED, DUT_IP, 41_003),
    ];
    let out = lab.exchange(spoofed);
    assert!(out.is_empty(), "answered: {out:?}");
    assert_eq!(lab.dropped(DropReason::BadSource), 4);
    assert!(lab.advance(Duration::from_secs(3)).is_empty());
    // A client of the routed VIP is answered, through the gateway.
    let out = lab.exchange(vec![syn(FAR_IP, ROUTED, 41_004)]);
    assert_eq!(out.len(), 1, "the client's SYN-ACK");
    assert_eq!(
        EthernetFrame::new_checked(&out[0][..]).unwrap().dst_addr(),
        GW_MAC
    );
}

#[test]
fn off_subnet_without_gateway_is_no_route() {
    let mut lab = new_lab(None);
    assert!(lab
        .exchange(vec![ping(GW_MAC, FAR_IP, DUT_IP, 5, 5, b"far")])
        .is_empty());
    assert_eq!(lab.dropped(DropReason::NoRoute), 1);
}

#[test]
fn bad_frames_are_counted_by_reason_and_the_engine_carries_on() {
    let mut lab = new_lab(None);
    lab.exchange(vec![arp_request(DUT_IP)]);
    let good = ping(HOST_MAC, HOST_IP, DUT_IP, 1, 1, b"payload");

    let mut bad_ip_sum = good.clone();
    bad_ip_sum[14 + 10] ^= 0xff;
    let mut bad_icmp_sum = good.clone();
    bad_icmp_sum[14 + 20 + 2] ^= 0xff;
    let mut fragment = good.clone();
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut fragment[14..]);
        ip.set_more_frags(true);
        ip.fill_checksum();
    }
    let mut udp = good.clone();
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut udp[14..]);
        ip.set_next_header(IpProtocol::Udp);
        ip.fill_checksum();
    }
    let mut other_mac = good.clone();
    other_mac[..6].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
    let mut ipv6 = good.clone();
    ipv6[12..14].copy_from_slice(&[0x86, 0xdd]);
    let mut long_total = good.clone();
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut long_total[14..]);
        ip.set_total_len(1400);
        ip.fill_checksum();
    }
    let cases = vec![
        (good[..10].to_vec(), DropReason::Malformed),
        (good[..20].to_vec(), DropReason::Malformed),
        (long_total, DropReason::Malformed),
        (bad_ip_sum, DropReason::BadIpChecksum),
        (bad_icmp_sum, DropReason::BadIcmpChecksum),
        (fragment, DropReason::Fragment),
        (udp, DropReason::UnsupportedProtocol),
        (other_mac, DropReason::NotForUs),
        (ipv6, DropReason::UnsupportedEtherType),
        (
            ping(HOST_MAC, HOST_IP, Ipv4Addr::new(10, 77, 0, 3), 1, 1, b"x"),
            DropReason::NotForUs,
        ),
    ];
    for (frame, reason) in cases {
        let before = lab.dropped(reason);
        assert!(lab.exchange(vec![frame]).is_empty(), "{reason:?} answered");
        assert_eq!(lab.dropped(reason), before + 1, "{reason:?} not counted");
    }
    let out = lab.exchange(vec![good]);
    assert_eq!(
        parse_echo_reply(&out[0]).5,
        b"payload",
        "still answering after bad input"
    );
}

#[test]
fn random_and_mutated_frames_never_panic() {
    // A small property test: every frame is either answered or counted.
    let mut lab = new_lab(Some(GW_IP));
    lab.exchange(vec![arp_request(DUT_IP)]);
    let seeds = [
        ping(HOST_MAC, HOST_IP, DUT_IP, 1, 1, &[7u8; 40]),
        arp_request(DUT_IP),
    ];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut sent = 0u64;
    for i in 0..20_000u64 {
        let mut f = if i % 3 == 0 {
            let len = (rnd() % 200) as usize;
            (0..len).map(|_| rnd() as u8).collect()
        } else {
            seeds[(i % 2) as usize].clone()
        };
        if !f.is_empty() {
            for _ in 0..(rnd() % 4) {
                let at = (rnd() as usize) % f.len();
                f[at] = rnd() as u8;
            }
            if rnd() % 5 == 0 {
                f.truncate((rnd() as usize) % f.len());
            }
        }
        sent += 1;
        lab.exchange(vec![f]);
    }
    let c = lab.engine.counters();
    assert_eq!(c.rx_packets, sent + 1);
    // Everything received was answered, consumed (ARP replies), or dropped.
    assert!(c.arp_replies + c.icmp_echo_replies + c.total_drops() <= c.rx_packets);
    assert!(c.total_drops() > 0 && c.icmp_echo_replies > 0);
}

/// Past its reachable time a neighbour's entry is stale: replies still go
/// to the MAC it had at once, beside a request asking again (as Linux's
/// neighbour table does), rather than waiting for a fresh answer.
#[test]
fn a_stale_neighbour_is_still_answered_while_it_is_asked_again() {
    let mut lab = new_lab(None);
    lab.exchange(vec![arp_request(DUT_IP)]);
    lab.advance(dataplane::net::arp::REACHABLE_TIME + Duration::from_secs(1));
    let out = lab.exchange(vec![ping(HOST_MAC, HOST_IP, DUT_IP, 1, 1, b"stale")]);
    assert_eq!(out.len(), 2, "the reply and a request");
    assert_eq!(parse_echo_reply(&out[0]).0, HOST_MAC);
    assert_eq!(requested(&out[1]), Some(HOST_IP));
}

/// The control thread pauses a port around its restart (a memif client
/// connecting again, docs/architecture.md "Ports"): the engine answers
/// once it no longer uses the port, moves nothing through it while
/// paused, and after the resume answers what arrived meanwhile.
#[test]
fn a_paused_port_moves_nothing_until_resumed_and_loses_nothing() {
    use dataplane::snapshot::{ControlLink, FromEngine, ToEngine};
    let mut lab = new_lab(None);
    let link = ControlLink::new_set(1).remove(0);
    lab.engine.set_control(link.clone());
    assert_eq!(lab.exchange(vec![arp_request(DUT_IP)]).len(), 1);

    // Asks, and returns what the engine sent meanwhile.
    let ask = |lab: &mut Lab, paused: bool| {
        link.to_engine
            .push(ToEngine::Pause {
                port: 0,
                paused,
                ask: 7,
            })
            .unwrap();
        // Control messages are read at the engine's tick (1 ms).
        let sent = lab.advance(Duration::from_millis(2));
        match link.from_engines.pop() {
            Some(FromEngine::Paused {
                engine: 0,
                port: 0,
                paused: p,
                ask: 7,
            }) if p == paused => {}
            other => panic!("no answer to the pause ({paused}): {other:?}"),
        }
        sent
    };
    assert!(ask(&mut lab, true).is_empty());
    assert!(
        lab.exchange(vec![arp_request(DUT_IP), arp_request(DUT_IP)])
            .is_empty(),
        "nothing answered while paused"
    );
    assert!(lab.advance(Duration::from_millis(5)).is_empty());
    let replies = ask(&mut lab, false);
    assert_eq!(replies.len(), 2, "both requests answered after the resume");
    for r in &replies {
        let arp =
            ArpPacket::new_checked(EthernetFrame::new_checked(&r[..]).unwrap().payload()).unwrap();
        assert_eq!(arp.operation(), ArpOperation::Reply);
    }
}

/// A frame the port chained over several buffers (a memif peer sending
/// past the buffer size): only its first segment is in view, and an
/// echo or ARP reply built there in place would go out with the peer's
/// trailing segments still attached. Dropped and counted, not answered;
/// the same frame in one piece is answered.
#[test]
fn chained_frames_are_dropped_not_answered_in_place() {
    use dataplane::port::{PacketBuf, Port};
    let mut lab = new_lab(None);
    lab.exchange(vec![arp_request(DUT_IP)]);
    let echo = ping(HOST_MAC, HOST_IP, DUT_IP, 1, 1, b"payload");
    for frame in [arp_request(DUT_IP), echo.clone()] {
        let mut b = lab.host.alloc().unwrap();
        b.set_len(frame.len());
        b.data_mut().copy_from_slice(&frame);
        b.mark_chained();
        lab.host.tx_burst(lab.now, &mut vec![b]);
    }
    let out = lab.advance(Duration::from_millis(1));
    assert!(out.is_empty(), "nothing answered: {out:?}");
    assert_eq!(lab.dropped(DropReason::MultiSegment), 2);
    assert_eq!(lab.exchange(vec![echo]).len(), 1, "whole, it is answered");
}

/// `frame` (an IPv4 frame without options) with IP `options` added: its
/// header and total lengths grown, its checksum again.
fn with_ip_options(frame: &[u8], options: &[u8]) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let mut f = frame[..14 + 20].to_vec();
    f.extend_from_slice(options);
    f.extend_from_slice(&frame[14 + 20..]);
    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
    ip.set_header_len((20 + options.len()) as u8);
    let total = ip.total_len() + options.len() as u16;
    ip.set_total_len(total);
    ip.fill_checksum();
    f
}

/// RFC 1122 §3.2.1.3: packets from addresses no host sends from (our
/// own, loopback, reserved, the subnet's broadcast) are dropped
/// unanswered, as are source-routed ones (RFC 7126 §4.3) and headers
/// under five words (RFC 791 §3.1). Before, each of these pings was
/// answered: to ourselves, to a broadcast address, to loopback, along a
/// route the sender chose, or from bytes inside the header. Likewise a
/// unicast packet in a link-layer group frame (RFC 1122 §3.3.6).
#[test]
fn bad_sources_source_routes_and_short_headers_are_dropped_unanswered() {
    let mut lab = new_lab(None);
    lab.exchange(vec![arp_request(DUT_IP)]);
    let from = |src: Ipv4Addr| ping(HOST_MAC, src, DUT_IP, 1, 1, b"x");
    let good = from(HOST_IP);
    // Loose source route via 10.77.0.9, then padding to a word.
    let lsrr = with_ip_options(&good, &[0x83, 7, 4, 10, 77, 0, 9, 0]);
    let ssrr = with_ip_options(&good, &[1, 0x89, 7, 4, 10, 77, 0, 9]);
    let mut short = good.clone();
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut short[14..]);
        ip.set_header_len(16);
        ip.fill_checksum();
    }
    let cases = [
        ("our own address", from(DUT_IP), DropReason::BadSource),
        (
            "loopback",
            from(Ipv4Addr::new(127, 0, 0, 1)),
            DropReason::BadSource,
        ),
        (
            "reserved",
            from(Ipv4Addr::new(240, 0, 0, 1)),
            DropReason::BadSource,
        ),
        (
            "subnet broadcast",
            from(Ipv4Addr::new(10, 77, 0, 255)),
            DropReason::BadSource,
        ),
        ("loose source route", lsrr, DropReason::BadSource),
        ("strict source route", ssrr, DropReason::BadSource),
        ("a 16-byte header", short, DropReason::Malformed),
    ];
    for (what, frame, reason) in cases {
        let before = lab.dropped(reason);
        assert!(lab.exchange(vec![frame]).is_empty(), "{what}: answered");
        assert_eq!(lab.dropped(reason), before + 1, "{what}: not counted");
    }
    // From a VIP's address (one the port took beside its own): an answer
    // would go to ourselves (before, it was held while we asked ARP for
    // our own address).
    const VIP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 50);
    lab.engine.listen(VIP, 80);
    let before = lab.dropped(DropReason::BadSource);
    assert!(
        lab.exchange(vec![from(VIP)]).is_empty(),
        "from a VIP: answered"
    );
    assert_eq!(lab.dropped(DropReason::BadSource), before + 1);
    assert!(lab.engine.interface(0).arp().peek(VIP, lab.now).is_none());
    // Other options (record route) are no reason to drop.
    let rr = with_ip_options(&good, &[7, 7, 4, 0, 0, 0, 0, 0]);
    assert_eq!(lab.exchange(vec![rr]).len(), 1, "record route answered");
    assert_eq!(lab.exchange(vec![good.clone()]).len(), 1);
    // A unicast packet in a frame to a link-layer group the port listens
    // to for IPv6 (all nodes): RFC 1122 §3.3.6 (before, it was answered).
    lab.engine.enable_ipv6(
        0,
        dataplane::net::Ipv6Config {
            addresses: vec![("2001:db8:77::1".parse().unwrap(), 64)],
            gateway: None,
        },
    );
    let mut to_group = good.clone();
    to_group[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    let before = lab.dropped(DropReason::NotForUs);
    assert!(
        lab.exchange(vec![to_group]).is_empty(),
        "to a group: answered"
    );
    assert_eq!(lab.dropped(DropReason::NotForUs), before + 1);
    assert_eq!(lab.exchange(vec![good]).len(), 1);
}
