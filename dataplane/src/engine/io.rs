//! The loop's side of the ports: one received frame to the interface
//! and TCP, software RSS hand-offs, the transmit buffer and its flush.

use super::{EnginePort, Held, MAX_TX_PENDING, MAX_UNRESOLVED, RESOLVE_TIMEOUT};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::app::Tcp;
use crate::net::toeplitz::{classify, FrameClass};
use crate::net::{set_destination, Verdict};
use crate::net::{vlan, Interface};
use crate::port::{PacketBuf, Port, RssSteering};
use crate::stats::{Counters, DropReason};
use crate::steer::{SteerLink, Steered};
use crate::tcp::{AnyFlowKey, FlowKey, FlowKey6};
use crate::time::Instant;

/// Prefetches, for each SYN (without ACK) among `frames`, what its input
/// will read out of the caches ([`Tcp::prefetch_syn`]: its TIME-WAIT
/// bucket), so that those misses overlap as the burst is processed.
/// Frames it cannot read are left to [`receive`] to judge.
pub(super) fn prefetch_syns<B: PacketBuf>(frames: &[B], tcp: &Tcp) {
    for buf in frames {
        match syn_key(buf.data()) {
            Some(AnyFlowKey::V4(key)) => tcp.prefetch_syn(&key),
            Some(AnyFlowKey::V6(key)) => tcp.prefetch_syn(&key),
            None => {}
        }
    }
}

/// The flow of a TCP SYN without ACK in `frame` (untagged or one 802.1Q
/// tag, IPv4 or IPv6 without extension headers), ours the destination;
/// `None` for anything else or too short to tell. Nothing is checked
/// that [`receive`] checks (checksums, fragments, lengths past the
/// flags): this only picks what to prefetch.
fn syn_key(frame: &[u8]) -> Option<AnyFlowKey> {
    /// SYN and ACK in the TCP header's flags byte.
    const SYN_ACK: u8 = 0x12;
    const SYN: u8 = 0x02;
    let (at, _) = vlan::peek(frame);
    let ip = frame.get(at + 2..)?;
    let ports = |tcp: &[u8]| {
        (
            u16::from_be_bytes([tcp[0], tcp[1]]),
            u16::from_be_bytes([tcp[2], tcp[3]]),
        )
    };
    match frame.get(at..at + 2)? {
        [0x08, 0x00] => {
            let ihl = usize::from(ip.first()? & 0x0f) * 4;
            let tcp = ip.get(ihl..ihl + 14).filter(|_| ihl >= 20 && ip[9] == 6)?;
            if tcp[13] & SYN_ACK != SYN {
                return None;
            }
            let (src_port, dst_port) = ports(tcp);
            Some(AnyFlowKey::V4(FlowKey {
                local: Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
                local_port: dst_port,
                remote: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
                remote_port: src_port,
            }))
        }
        [0x86, 0xdd] => {
            let tcp = ip.get(40..54).filter(|_| ip[6] == 6)?;
            if tcp[13] & SYN_ACK != SYN {
                return None;
            }
            let addr = |at: usize| {
                let a: [u8; 16] = ip.get(at..at + 16)?.try_into().ok()?;
                Some(Ipv6Addr::from(a))
            };
            let (src_port, dst_port) = ports(tcp);
            Some(AnyFlowKey::V6(FlowKey6 {
                local: addr(24)?,
                local_port: dst_port,
                remote: addr(8)?,
                remote_port: src_port,
            }))
        }
        _ => None,
    }
}

/// Processes one received frame: TCP to the stack, the rest answered or
/// dropped by the interface.
pub(super) fn receive<P: Port>(
    ep: &mut EnginePort<P>,
    mut buf: P::Buf,
    now: Instant,
    burst: usize,
    tcp: &mut Tcp,
    counters: &mut Counters,
) {
    counters.rx_packets += 1;
    counters.rx_bytes += buf.data().len() as u64;
    let tagged = match vlan::untag(&mut buf) {
        Ok(v) => v,
        Err(reason) => return counters.drop(reason),
    };
    let Some(iface) = ep.iface_on(tagged) else {
        return counters.drop(DropReason::UnknownVlan);
    };
    match iface.process(now, &mut buf, counters) {
        Verdict::Tcp {
            src,
            dst,
            start,
            end,
            checksum,
        } => segment_in(
            tcp,
            now,
            (src, dst),
            buf.data().get(start..end),
            checksum,
            counters,
        ),
        Verdict::Tcp6 {
            src,
            dst,
            start,
            end,
            checksum,
        } => segment_in(
            tcp,
            now,
            (src, dst),
            buf.data().get(start..end),
            checksum,
            counters,
        ),
        Verdict::TooBig4 { key, seq, mtu } => too_big_in(tcp, now, key, seq, mtu, counters),
        Verdict::TooBig6 { key, seq, mtu } => too_big_in(tcp, now, key, seq, mtu, counters),
        other => {
            queue(ep, buf, other, tagged, now, burst, counters);
        }
    }
}

/// A TCP segment (header and payload, `None` when the interface's bounds
/// fall outside the frame: never expected) from `addrs.0` to `addrs.1`,
/// either family, to TCP; its drop counted.
#[inline]
fn segment_in<I: crate::tcp::FlowAddr>(
    tcp: &mut Tcp,
    now: Instant,
    addrs: (I, I),
    segment: Option<&[u8]>,
    checksum: crate::port::Check,
    counters: &mut Counters,
) {
    let Some(segment) = segment else {
        return counters.drop(DropReason::Malformed);
    };
    if let Err(reason) = tcp.input_checked(now, addrs.0, addrs.1, segment, checksum) {
        counters.drop(reason.into());
    }
}

/// A Packet Too Big or "fragmentation needed" for our segment of `key`
/// at `seq` to TCP; one no connection takes is counted.
#[inline]
fn too_big_in<I: crate::tcp::FlowAddr>(
    tcp: &mut Tcp,
    now: Instant,
    key: crate::tcp::FlowKey<I>,
    seq: u32,
    mtu: u32,
    counters: &mut Counters,
) {
    if !tcp.packet_too_big(now, key, crate::tcp::Seq(seq), mtu) {
        counters.drop(DropReason::NoConnection);
    }
}

/// Software RSS on a received frame: another engine's TCP flow goes to
/// its inbox (`None`); an ARP or IPv6 neighbour discovery frame is kept
/// (this engine answers it) and copied to every other engine to learn from
/// ([`learn`]); anything else is kept.
pub(super) fn steer<P: Port>(
    link: &SteerLink<P::Buf>,
    ep: &mut EnginePort<P>,
    port: usize,
    buf: P::Buf,
    counters: &mut Counters,
) -> Option<P::Buf> {
    match classify(buf.data(), &link.table) {
        FrameClass::Tcp(h) => {
            let owner = link.owner(h);
            if owner == link.engine {
                return Some(buf);
            }
            pass_on(link, owner, port, buf, counters);
            None
        }
        FrameClass::Neighbor => {
            share_neighbor_frame(link, ep, port, &buf, counters);
            Some(buf)
        }
        FrameClass::Other => Some(buf),
    }
}

/// The engine a frame received on a port whose NIC spreads flows (`rss`)
/// belongs to, when the NIC hashed it on its addresses alone and its flow
/// is another engine's: an ICMP error quoting a flow (fragmentation
/// needed, Packet Too Big), an IPv6 segment behind extension headers or
/// in an atomic fragment ([`crate::net::toeplitz::address_hashed_flow`]).
/// Engine `q` polls queue `q` on such a port.
pub(super) fn address_hashed_owner<B: PacketBuf>(
    link: &SteerLink<B>,
    rss: Option<RssSteering>,
    buf: &B,
) -> Option<u16> {
    let rss = rss?;
    let h = crate::net::toeplitz::address_hashed_flow(buf.data(), &link.table)?;
    let owner = rss.queue_of(h);
    (owner != link.engine && owner < link.engines).then_some(owner)
}

/// Hands a received frame to engine `owner` to take as its own (counted
/// as steered; dropped and counted when its inbox is full).
pub(super) fn pass_on<B: PacketBuf>(
    link: &SteerLink<B>,
    owner: u16,
    port: usize,
    buf: B,
    counters: &mut Counters,
) {
    counters.frames_steered += 1;
    let msg = Steered::Rx {
        port: port as u8,
        buf,
    };
    if link.send(owner, msg).is_err() {
        counters.drop(DropReason::SteerFull);
    }
}

/// Copies an ARP or Neighbor Discovery frame this engine received (and
/// answers) to every other engine to learn from ([`learn`]): on a port
/// the engines steer in software, and on one whose NIC spreads flows,
/// which leaves these frames on one queue (the replies to another
/// engine's requests among them).
pub(super) fn share_neighbor_frame<P: Port>(
    link: &SteerLink<P::Buf>,
    ep: &mut EnginePort<P>,
    port: usize,
    buf: &P::Buf,
    counters: &mut Counters,
) {
    if !crate::net::toeplitz::neighbor_frame_to_learn_from(buf.data(), ep.port.mac()) {
        return; // answered (or dropped) here; nothing any engine learns
    }
    for other in (0..link.engines).filter(|&e| e != link.engine) {
        let Some(mut copy) = ep.port.alloc() else {
            counters.drop(DropReason::NoBuffer);
            continue;
        };
        // A port that takes large frames (segmentation offload) hands over
        // what a peer pads past any MTU: no ordinary buffer holds it, and
        // no neighbour frame is that long.
        if buf.data().len() > copy.capacity() {
            counters.drop(DropReason::Oversize);
            continue;
        }
        copy.set_len(buf.data().len());
        copy.data_mut().copy_from_slice(buf.data());
        let msg = Steered::Learn {
            port: port as u8,
            buf: copy,
        };
        match link.send(other, msg) {
            Ok(()) => counters.neighbor_frames_shared += 1,
            Err(_) => counters.drop(DropReason::SteerFull),
        }
    }
}

/// Learns neighbours from a copy of an ARP or Neighbor Discovery frame
/// that another engine received and answers: the interface takes it as
/// its own (the same rules), but its answer is dropped and nothing is
/// counted, so the wire sees one answer and the counters one frame.
pub(super) fn learn<P: Port>(ep: &mut EnginePort<P>, mut buf: P::Buf, now: Instant) {
    let mut unseen = Counters::default();
    let Ok(tagged) = vlan::untag(&mut buf) else {
        return;
    };
    if let Some(iface) = ep.iface_on(tagged) {
        iface.process(now, &mut buf, &mut unseen);
    }
}

/// Puts a frame an interface built on the transmit buffer, tagged for
/// its VLAN; a frame with no room for the tag is dropped (counted).
pub(super) fn push_tagged<B: PacketBuf>(
    tx: &mut Vec<B>,
    since: &mut Option<Instant>,
    mut buf: B,
    vlan: Option<u16>,
    now: Instant,
) -> bool {
    if !vlan::tag(&mut buf, vlan) {
        return false;
    }
    tx.push(buf);
    since.get_or_insert(now);
    true
}

/// What an interface sends of its own accord: ARP requests and Neighbor
/// Solicitations for next hops, and on IPv6 the Multicast Listener
/// Reports with the duplicate address checks, tagged for its VLAN.
pub(super) fn send_own_frames<P: Port>(
    iface: &mut Interface,
    port: &mut P,
    tx: &mut Vec<P::Buf>,
    since: &mut Option<Instant>,
    now: Instant,
    counters: &mut Counters,
) {
    let vlan = iface.vlan();
    while let Some(ip) = iface.take_probe() {
        let Some(mut buf) = port.alloc() else {
            counters.drop(DropReason::NoBuffer);
            continue;
        };
        if !iface.write_probe(ip, &mut buf) || !push_tagged(tx, since, buf, vlan, now) {
            counters.drop(DropReason::NoBuffer);
            continue;
        }
        match ip {
            IpAddr::V4(_) => counters.arp_requests += 1,
            IpAddr::V6(_) => counters.nd_solicitations += 1,
        }
    }
    if iface.report_pending(now) {
        // Every frame of the report due (one per 72 groups).
        while iface.report_pending(now) {
            let Some(mut buf) = port.alloc() else {
                counters.drop(DropReason::NoBuffer);
                break;
            };
            if !iface.write_report_if_due(now, &mut buf) {
                break;
            }
            if push_tagged(tx, since, buf, vlan, now) {
                counters.mld_reports += 1;
            }
        }
        // The duplicate address checks go with the first report.
        while let Some(mut buf) = port.alloc() {
            if !iface.write_dad_probe(&mut buf) {
                break;
            }
            if push_tagged(tx, since, buf, vlan, now) {
                counters.nd_solicitations += 1;
            }
        }
    }
}

/// Acts on a frame's verdict: transmit (flushing full bursts), hold for ARP,
/// or count the drop. Returns false when the frame was dropped because the
/// transmit buffer is full (counted as `tx_full`): a caller that can keep
/// what it sent (TCP) stops and sends it again later.
pub(super) fn queue<P: Port>(
    ep: &mut EnginePort<P>,
    mut buf: P::Buf,
    verdict: Verdict,
    vlan: Option<u16>,
    now: Instant,
    burst: usize,
    counters: &mut Counters,
) -> bool {
    if vlan.is_some()
        && matches!(verdict, Verdict::Transmit | Verdict::AwaitNeighbor(_))
        && !vlan::tag(&mut buf, vlan)
    {
        counters.drop(DropReason::Oversize);
        return true;
    }
    match verdict {
        Verdict::Transmit => {
            if ep.tx.len() >= MAX_TX_PENDING {
                flush(ep, now, counters);
            }
            if ep.tx.len() >= MAX_TX_PENDING {
                counters.drop(DropReason::TxFull);
                return false;
            }
            ep.tx.push(buf);
            ep.tx_since.get_or_insert(now);
            if ep.tx.len() >= burst {
                flush(ep, now, counters);
            }
        }
        Verdict::Consumed
        | Verdict::Tcp { .. }
        | Verdict::Tcp6 { .. }
        | Verdict::TooBig4 { .. }
        | Verdict::TooBig6 { .. } => {}
        Verdict::Drop(reason) => counters.drop(reason),
        Verdict::AwaitNeighbor(hop) => {
            if ep.unresolved.len() == MAX_UNRESOLVED {
                ep.unresolved.pop_front();
                counters.drop(DropReason::NeighborMiss);
            }
            ep.unresolved.push_back(Held {
                vlan,
                hop,
                buf,
                until: now + RESOLVE_TIMEOUT,
            });
        }
    }
    true
}

/// Whether a port's transmit buffer has room for another frame (after
/// trying to send what it holds).
pub(super) fn tx_room<P: Port>(
    ep: &mut EnginePort<P>,
    now: Instant,
    counters: &mut Counters,
) -> bool {
    if ep.tx.len() >= MAX_TX_PENDING {
        flush(ep, now, counters);
    }
    ep.tx.len() < MAX_TX_PENDING
}

/// Moves held frames whose next hop is now known to the transmit buffer, in
/// arrival order, drops those that waited too long, and repeats the ARP
/// request (paced) for the rest.
pub(super) fn release_resolved<P: Port>(
    ep: &mut EnginePort<P>,
    now: Instant,
    counters: &mut Counters,
) {
    // Each held frame is taken from the front once and goes out, is
    // dropped, or goes to the back: one pass, order kept, nothing moved
    // but the frame itself. Once the transmit buffer has no room, none
    // goes out for the rest of the pass (a later frame of a flow must not
    // pass an earlier one); they wait for the next look, at the latest
    // the next tick.
    let mut room = true;
    for _ in 0..ep.unresolved.len() {
        let Some(held) = ep.unresolved.pop_front() else {
            break;
        };
        let mac = ep
            .iface_on(held.vlan)
            .and_then(|iface| iface.resolve_hop(held.hop, now));
        if mac.is_some() && room {
            room = tx_room(ep, now, counters);
        }
        match mac {
            Some(mac) if room => {
                let mut buf = held.buf;
                set_destination(buf.data_mut(), mac);
                ep.tx.push(buf);
                ep.tx_since.get_or_insert(now);
            }
            _ if now < held.until => ep.unresolved.push_back(held),
            Some(_) => counters.drop(DropReason::TxFull),
            None => counters.drop(DropReason::NeighborMiss),
        }
    }
}

/// Sends a port's buffered frames. Frames the queue does not take stay
/// buffered for the next iteration (bounded by [`MAX_TX_PENDING`]).
pub(super) fn flush<P: Port>(ep: &mut EnginePort<P>, now: Instant, counters: &mut Counters) {
    if let Some((via, port)) = &ep.tx_via {
        // No TX queue of our own here: the engine that has it sends.
        // Counted as sent by the engine that sends them. What its inbox
        // does not take stays buffered, in order, like a full TX queue.
        ep.tx.reverse(); // oldest last: popped first
        while let Some(buf) = ep.tx.pop() {
            if let Err(
                Steered::Tx { buf, .. } | Steered::Rx { buf, .. } | Steered::Learn { buf, .. },
            ) = via.send_tx(*port, buf)
            {
                ep.tx.push(buf);
                break;
            }
        }
        ep.tx.reverse();
        ep.tx_since = if ep.tx.is_empty() { None } else { Some(now) };
        return;
    }
    if let Some(c) = &ep.capture {
        let mut on = true;
        for b in ep.tx.iter().skip(ep.tx_captured) {
            on = on && c.take(b.data());
        }
        if !on {
            ep.capture = None;
        }
    }
    let offered: u64 = ep.tx.iter().map(|b| b.data().len() as u64).sum();
    let mut sent = 0;
    while !ep.tx.is_empty() {
        let n = ep.port.tx_burst(now, &mut ep.tx);
        if n == 0 {
            break;
        }
        sent += n;
    }
    let unsent: u64 = ep.tx.iter().map(|b| b.data().len() as u64).sum();
    counters.tx_packets += sent as u64;
    counters.tx_bytes += offered - unsent;
    ep.tx_captured = ep.tx.len();
    ep.tx_since = if ep.tx.is_empty() { None } else { Some(now) };
}

/// Payload bytes one TCP segment may carry for `port` to cut (TCP
/// segmentation offload): what its largest frame leaves after the longest
/// headers, and an IPv4 total length; 0 when it does not segment (or
/// does not fill checksums, which segmenting needs).
pub(super) fn segmentation_max<P: Port>(port: &P) -> u32 {
    const HEADERS: usize = 14 + 20 + 60; // Ethernet, IPv4, TCP with options
    match port.segmentation() {
        Some(frame) if port.checksum_offload().tx() => {
            let payload = frame
                .saturating_sub(HEADERS)
                .min(usize::from(u16::MAX) - 20 - 60);
            payload as u32 // < 2^16
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame (with an 802.1Q tag for `vlan`) carrying a TCP
    /// header with `flags` from `src:1234` to `dst:443`.
    fn frame(ip: IpAddr, vlan: Option<u16>, flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; 12]; // MACs
        if let Some(id) = vlan {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&id.to_be_bytes());
        }
        let mut tcp = [0u8; 20];
        tcp[..2].copy_from_slice(&1234u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&443u16.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = flags;
        match ip {
            IpAddr::V4(_) => {
                f.extend_from_slice(&[0x08, 0x00]);
                let mut h = [0u8; 20];
                h[0] = 0x45;
                h[9] = 6;
                h[12..16].copy_from_slice(&[10, 0, 0, 2]);
                h[16..20].copy_from_slice(&[10, 0, 0, 1]);
                f.extend_from_slice(&h);
            }
            IpAddr::V6(_) => {
                f.extend_from_slice(&[0x86, 0xdd]);
                let mut h = [0u8; 40];
                h[0] = 0x60;
                h[6] = 6;
                h[8..24].copy_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).octets());
                h[24..40].copy_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).octets());
                f.extend_from_slice(&h);
            }
        }
        f.extend_from_slice(&tcp);
        f
    }

    const V4: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    const V6: IpAddr = IpAddr::V6(Ipv6Addr::UNSPECIFIED);

    #[test]
    fn a_syn_names_its_flow_ours_the_destination() {
        let v4 = FlowKey {
            local: Ipv4Addr::new(10, 0, 0, 1),
            local_port: 443,
            remote: Ipv4Addr::new(10, 0, 0, 2),
            remote_port: 1234,
        };
        let v6 = FlowKey6 {
            local: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            local_port: 443,
            remote: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
            remote_port: 1234,
        };
        for vlan in [None, Some(100)] {
            assert_eq!(syn_key(&frame(V4, vlan, 0x02)), Some(AnyFlowKey::V4(v4)));
            assert_eq!(syn_key(&frame(V6, vlan, 0x02)), Some(AnyFlowKey::V6(v6)));
        }
    }

    #[test]
    fn only_a_syn_without_ack_is_named() {
        // SYN-ACK, ACK, FIN+ACK, RST: no lookup of TIME-WAIT to come.
        for flags in [0x12, 0x10, 0x11, 0x04] {
            assert_eq!(syn_key(&frame(V4, None, flags)), None, "{flags:#x}");
            assert_eq!(syn_key(&frame(V6, None, flags)), None, "{flags:#x}");
        }
    }

    #[test]
    fn frames_too_short_or_not_tcp_name_nothing() {
        for ip in [V4, V6] {
            let whole = frame(ip, Some(7), 0x02);
            // Every cut short of the flags byte, tagged or not.
            for len in 0..whole.len() - 6 {
                assert_eq!(syn_key(&whole[..len]), None, "cut at {len}");
            }
        }
        let mut udp = frame(V4, None, 0x02);
        udp[14 + 9] = 17;
        assert_eq!(syn_key(&udp), None);
        let mut short_ihl = frame(V4, None, 0x02);
        short_ihl[14] = 0x44; // a header of 16 bytes
        assert_eq!(syn_key(&short_ihl), None);
        let mut arp = frame(V4, None, 0x02);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(syn_key(&arp), None);
    }
}
