//! One engine port's interface: classifies each received frame and
//! rewrites the ones that get an answer (ARP replies, ICMP echo replies,
//! and on a port with IPv6 addresses Neighbor Advertisements and ICMPv6
//! echo replies) in place.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    Icmpv4Message, Icmpv4Packet, IpProtocol, Ipv4Packet, ETHERNET_HEADER_LEN, IPV4_HEADER_LEN,
    IPV6_HEADER_LEN,
};

use super::arp::ArpCache;
use super::ipv6::{
    Ipv6Action, Ipv6Config, Ipv6Host, ERROR_HEADROOM, MAX_REPORT_GROUPS, ND_FRAME_LEN,
};

/// The longest Multicast Listener Report frame we write.
const REPORT_FRAME_MAX: usize = 14 + 40 + 8 + 8 + 20 * MAX_REPORT_GROUPS;
use crate::port::{Check, ChecksumOffload, PacketBuf, RxChecks};
use crate::stats::{Counters, DropReason};
use crate::tcp::Outgoing;
use crate::time::Instant;

/// Shortest Ethernet frame without FCS; shorter frames we build are padded.
const MIN_FRAME: usize = 60;
/// Most ARP requests queued for sending between two engine iterations.
const MAX_PENDING_PROBES: usize = 16;
/// Neighbours each interface remembers: on-link clients, backends and the
/// gateway (about 40 bytes each).
const ARP_ENTRIES: usize = 4096;

/// Addresses of one interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterfaceConfig {
    pub mac: EthernetAddress,
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    pub gateway: Option<Ipv4Addr>,
}

impl InterfaceConfig {
    /// The next hop towards `dst`: itself on the subnet, else the
    /// gateway (if any).
    pub fn next_hop(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        if self.on_link(dst) {
            Some(dst)
        } else {
            self.gateway
        }
    }

    /// This subnet's broadcast address (host part all ones), where the
    /// prefix is 30 bits or shorter.
    fn subnet_broadcast(&self) -> Option<Ipv4Addr> {
        let host_mask = u32::MAX.checked_shr(u32::from(self.prefix_len))?;
        (host_mask >= 3).then(|| Ipv4Addr::from(u32::from(self.addr) | host_mask))
    }

    fn on_link(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix_len))
        };
        (u32::from(ip) ^ u32::from(self.addr)) & mask == 0
    }
}

/// What to do with a processed frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The buffer now holds a reply: transmit it.
    Transmit,
    /// Handled (e.g. an ARP reply we learned from); free the buffer.
    Consumed,
    /// Dropped for this reason; free the buffer.
    Drop(DropReason),
    /// The buffer holds a reply for a next hop whose MAC is being resolved
    /// (an ARP request or Neighbor Solicitation is queued): hold it until
    /// [`Interface::resolve_hop`] knows the MAC, then [`set_destination`]
    /// and transmit.
    AwaitNeighbor(IpAddr),
    /// A TCP segment for us: `frame[start..end]` is the TCP header and
    /// payload, from `src` to `dst`; `checksum` is what the port found of
    /// its checksum (not yet checked unless the port did).
    Tcp {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        start: usize,
        end: usize,
        checksum: Check,
    },
    /// An ICMP "fragmentation needed" (RFC 1191) for our TCP segment of
    /// `key` starting at `seq`: the path takes packets of at most `mtu`
    /// bytes.
    TooBig4 {
        key: crate::tcp::FlowKey,
        seq: u32,
        mtu: u32,
    },
    /// A Packet Too Big for our TCP segment of `key` starting at `seq`:
    /// the path takes packets of at most `mtu` bytes.
    TooBig6 {
        key: crate::tcp::FlowKey6,
        seq: u32,
        mtu: u32,
    },
    /// A TCP segment over IPv6 for us, as [`Verdict::Tcp`].
    Tcp6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        start: usize,
        end: usize,
        checksum: Check,
    },
}

/// What the IPv4 layer made of a packet for us.
enum IpAction {
    /// Reply rewritten in place: send `len` IP bytes via next hop `hop`.
    Reply { hop: Ipv4Addr, len: usize },
    /// A TCP segment at `start..end` of the IP packet.
    Tcp {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        start: usize,
        end: usize,
    },
    /// A "fragmentation needed" for our TCP segment of `key` at `seq`.
    TooBig {
        key: crate::tcp::FlowKey,
        seq: u32,
        mtu: u32,
    },
}

/// Sets the destination MAC of a frame built by [`Interface::process`].
pub fn set_destination(frame: &mut [u8], mac: EthernetAddress) {
    frame[..6].copy_from_slice(mac.as_bytes());
}

/// The network layer of one port.
#[derive(Debug)]
pub struct Interface {
    cfg: InterfaceConfig,
    arp: ArpCache,
    /// Addresses to send ARP requests for (the engine builds the frames).
    probes: Vec<Ipv4Addr>,
    /// IPv4 identification of the next packet we originate.
    next_ident: u16,
    /// Further local addresses on this port's link (VIPs, load-generator
    /// sources), answered for in ARP and ICMP like the port's own. Sorted:
    /// every received packet asks `is_local`, with hundreds of VIPs.
    extra: Vec<Ipv4Addr>,
    /// Whether the port fills the checksums of the TCP frames we build.
    tx_checksums_offloaded: bool,
    /// IPv6, on a port that has IPv6 addresses.
    ipv6: Option<Ipv6Host>,
    /// The 802.1Q VLAN this interface is on (`None`: the port's untagged
    /// network). Its frames are tagged and untagged by the engine.
    vlan: Option<u16>,
    /// The subnet's broadcast address, a source no packet comes from.
    subnet_broadcast: Option<Ipv4Addr>,
}

impl Interface {
    pub fn new(cfg: InterfaceConfig) -> Self {
        Self {
            subnet_broadcast: cfg.subnet_broadcast(),
            cfg,
            arp: ArpCache::new(ARP_ENTRIES),
            probes: Vec::with_capacity(MAX_PENDING_PROBES),
            next_ident: 1,
            extra: Vec::new(),
            tx_checksums_offloaded: false,
            ipv6: None,
            vlan: None,
        }
    }

    /// This interface on VLAN `vid` of its port instead of the untagged
    /// network.
    pub fn on_vlan(mut self, vid: u16) -> Self {
        self.vlan = Some(vid);
        self
    }

    /// The VLAN it is on (`None`: untagged).
    pub fn vlan(&self) -> Option<u16> {
        self.vlan
    }

    /// Turns IPv6 on for this port: its link-local address and `cfg`'s.
    pub fn enable_ipv6(&mut self, cfg: Ipv6Config) {
        self.ipv6 = Some(Ipv6Host::new(self.cfg.mac, cfg));
    }

    /// Reports the port's IPv6 groups unsolicited (see
    /// [`Ipv6Host::join_groups`]); nothing without IPv6.
    pub fn join_groups(&mut self) {
        if let Some(v6) = &mut self.ipv6 {
            v6.join_groups();
        }
    }

    /// Builds a Multicast Listener Report in `buf` when one is due; false
    /// when none is (or without IPv6, or the buffer is too small).
    pub fn write_report_if_due<B: PacketBuf>(&mut self, now: Instant, buf: &mut B) -> bool {
        let Some(v6) = &mut self.ipv6 else {
            return false;
        };
        if buf.capacity() < REPORT_FRAME_MAX || !v6.report_pending(now) {
            return false;
        }
        buf.set_len(REPORT_FRAME_MAX);
        match v6.next_report(now, buf.data_mut()) {
            Some(len) => {
                buf.set_len(len);
                true
            }
            None => false,
        }
    }

    /// Builds the next duplicate address check of ours in `buf`; false
    /// when none is left (or without IPv6, or the buffer is too small).
    pub fn write_dad_probe<B: PacketBuf>(&mut self, buf: &mut B) -> bool {
        let Some(v6) = &mut self.ipv6 else {
            return false;
        };
        if buf.capacity() < ND_FRAME_LEN {
            return false;
        }
        let Some(target) = v6.take_dad_probe() else {
            return false;
        };
        buf.set_len(ND_FRAME_LEN);
        let len = v6.write_dad_solicitation(target, buf.data_mut());
        buf.set_len(len.max(MIN_FRAME));
        true
    }

    /// Whether this port has IPv6 and a report is due.
    pub fn report_pending(&self, now: Instant) -> bool {
        self.ipv6.as_ref().is_some_and(|v6| v6.report_pending(now))
    }

    /// The port's IPv6 side, when it has one.
    pub fn ipv6(&self) -> Option<&Ipv6Host> {
        self.ipv6.as_ref()
    }

    /// Uses the port's checksum offloads: with both transmit checksums
    /// offloaded, [`Interface::write_tcp`] leaves them to the port.
    /// (Received frames carry the port's verdicts themselves.)
    pub fn set_checksum_offload(&mut self, offload: ChecksumOffload) {
        self.tx_checksums_offloaded = offload.tx();
    }

    pub fn config(&self) -> &InterfaceConfig {
        &self.cfg
    }

    /// Keeps the extra addresses `keep` holds true for (the port's own
    /// address stays).
    pub fn retain_addresses(&mut self, keep: impl FnMut(&Ipv4Addr) -> bool) {
        self.extra.retain(keep);
    }

    /// Adds a local address (on the port's subnet or routed to it).
    pub fn add_address(&mut self, ip: Ipv4Addr) {
        if ip != self.cfg.addr {
            if let Err(at) = self.extra.binary_search(&ip) {
                self.extra.insert(at, ip);
            }
        }
    }

    /// Whether `ip` is one of this interface's addresses.
    #[inline]
    pub fn is_local(&self, ip: Ipv4Addr) -> bool {
        // Every received packet's source is looked up (`bad_source`): one
        // outside the span of our added addresses, as a peer's mostly is,
        // costs two comparisons, not a search.
        let within = |(first, last): (&Ipv4Addr, &Ipv4Addr)| *first <= ip && ip <= *last;
        ip == self.cfg.addr
            || (self
                .extra
                .first()
                .zip(self.extra.last())
                .is_some_and(within)
                && self.extra.binary_search(&ip).is_ok())
    }

    /// Whether `ip`, of either family, is one of this interface's
    /// addresses.
    #[inline]
    pub fn owns(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => self.is_local(a),
            IpAddr::V6(a) => self.ipv6.as_ref().is_some_and(|v6| v6.is_local(a)),
        }
    }

    /// Adds an IPv6 address of ours (a VIP's); false when the port has no
    /// IPv6 or the address is not on one of its prefixes.
    pub fn add_address6(&mut self, ip: Ipv6Addr) -> bool {
        match &mut self.ipv6 {
            Some(v6) if v6.next_hop(ip) == Some(ip) => {
                v6.add_address(ip);
                true
            }
            _ => false,
        }
    }

    /// Adds an address of ours on none of this network's subnets, routed
    /// to us (a VIP announced by `[routing]`); an IPv6 one only where the
    /// network has IPv6.
    pub fn add_routed_address(&mut self, ip: IpAddr) {
        match ip {
            IpAddr::V4(a) => self.add_address(a),
            IpAddr::V6(a) => {
                if let Some(v6) = &mut self.ipv6 {
                    v6.add_address(a);
                }
            }
        }
    }

    /// Keeps the added IPv6 addresses `keep` holds true for.
    pub fn retain_addresses6(&mut self, keep: impl FnMut(&Ipv6Addr) -> bool) {
        if let Some(v6) = &mut self.ipv6 {
            v6.retain_addresses(keep);
        }
    }

    pub fn arp(&self) -> &ArpCache {
        &self.arp
    }

    /// The next hop towards `dst`: itself on the subnet, else the gateway.
    pub fn next_hop(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        self.cfg.next_hop(dst)
    }

    /// The MAC of next hop `hop`, queueing an ARP request on a miss (paced
    /// per address; with the request queue full, the next miss asks again).
    pub fn resolve(&mut self, hop: Ipv4Addr, now: Instant) -> Option<EthernetAddress> {
        self.arp
            .resolve(hop, now, &mut self.probes, MAX_PENDING_PROBES)
    }

    /// The MAC of next hop `hop` of either family (a miss queues a request
    /// or a solicitation, as [`Interface::resolve`]).
    pub fn resolve_hop(&mut self, hop: IpAddr, now: Instant) -> Option<EthernetAddress> {
        match hop {
            IpAddr::V4(hop) => self.resolve(hop, now),
            IpAddr::V6(hop) => self.ipv6.as_mut()?.resolve(hop, now),
        }
    }

    /// Neighbours learned or refreshed so far, both families (wrapping):
    /// frames waiting for one need looking at again only when it moves.
    pub fn neighbors_learned(&self) -> u64 {
        let v6 = self.ipv6.as_ref().map_or(0, |v6| v6.cache().learned());
        self.arp.learned().wrapping_add(v6)
    }

    /// The known MAC of a neighbour, without side effects.
    pub fn neighbor(&self, ip: Ipv4Addr, now: Instant) -> Option<EthernetAddress> {
        self.arp.peek(ip, now)
    }

    /// Periodic work: keep the gateway resolved so the first packet routed
    /// through it is not lost.
    pub fn on_timer(&mut self, now: Instant) {
        if let Some(gw) = self.cfg.gateway {
            if self.arp.peek(gw, now).is_none() {
                self.resolve(gw, now);
            }
        }
        if let Some(v6) = &mut self.ipv6 {
            v6.on_timer(now);
        }
    }

    /// Takes one address to send an ARP request or (IPv6) a Neighbor
    /// Solicitation for: see [`Interface::write_probe`].
    pub fn take_probe(&mut self) -> Option<IpAddr> {
        if let Some(ip) = self.probes.pop() {
            return Some(IpAddr::V4(ip));
        }
        self.ipv6.as_mut()?.take_probe().map(IpAddr::V6)
    }

    /// Builds the ARP request or Neighbor Solicitation for `target` in
    /// `buf`; false (nothing written) when it cannot be built here (an IPv6
    /// target on a port without IPv6, or a buffer too small).
    pub fn write_probe<B: PacketBuf>(&self, target: IpAddr, buf: &mut B) -> bool {
        match target {
            IpAddr::V4(target) => {
                self.write_arp_request(target, buf);
                true
            }
            IpAddr::V6(target) => {
                let Some(v6) = &self.ipv6 else {
                    return false;
                };
                if buf.capacity() < ND_FRAME_LEN {
                    return false;
                }
                buf.set_len(ND_FRAME_LEN);
                let len = v6.write_solicitation(target, buf.data_mut());
                buf.set_len(len);
                true
            }
        }
    }

    /// This port's addresses: its own, then the extra ones.
    pub fn addresses(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        std::iter::once(self.cfg.addr).chain(self.extra.iter().copied())
    }

    /// Builds an ARP announcement of our address `addr` in `buf` (RFC 5227
    /// §2.3: a request with sender and target both `addr`): neighbours
    /// that know `addr` take our MAC for it.
    pub fn write_arp_announcement<B: PacketBuf>(&self, addr: Ipv4Addr, buf: &mut B) {
        self.write_arp(addr, addr, buf);
    }

    /// Builds an ARP request for `target` in `buf`.
    pub fn write_arp_request<B: PacketBuf>(&self, target: Ipv4Addr, buf: &mut B) {
        self.write_arp(self.cfg.addr, target, buf);
    }

    fn write_arp<B: PacketBuf>(&self, sender: Ipv4Addr, target: Ipv4Addr, buf: &mut B) {
        buf.set_len(MIN_FRAME);
        let data = buf.data_mut();
        data.fill(0);
        let mut frame = EthernetFrame::new_unchecked(data);
        frame.set_dst_addr(EthernetAddress::BROADCAST);
        frame.set_src_addr(self.cfg.mac);
        frame.set_ethertype(EthernetProtocol::Arp);
        ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Request,
            source_hardware_addr: self.cfg.mac,
            source_protocol_addr: sender,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: target,
        }
        .emit(&mut ArpPacket::new_unchecked(frame.payload_mut()));
    }

    /// Builds the frame for an outgoing TCP segment in `buf`. The verdict
    /// is `Transmit`, `AwaitNeighbor` (MAC unknown yet) or `Drop(NoRoute)`.
    pub fn write_tcp<B: PacketBuf>(
        &mut self,
        now: Instant,
        seg: &Outgoing<'_>,
        buf: &mut B,
    ) -> Verdict {
        let (src, dst) = match (seg.src, seg.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => (src, dst),
            (IpAddr::V6(src), IpAddr::V6(dst)) => return self.write_tcp6(now, src, dst, seg, buf),
            _ => return Verdict::Drop(DropReason::NoRoute),
        };
        let Some(hop) = self.next_hop(dst) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let header_len = crate::tcp::wire::header_len(&seg.repr);
        let tcp_len = header_len + seg.repr.payload.len();
        let ip_len = IPV4_HEADER_LEN + tcp_len;
        let segmented = seg.segment_size > 0;
        if ETHERNET_HEADER_LEN + ip_len > buf.capacity()
            || ip_len > usize::from(u16::MAX)
            || segmented && !self.tx_checksums_offloaded
        {
            // TCP sizes segments to the port: only a port that changed
            // under it (or a bug) gets here. Dropped; TCP resends.
            return Verdict::Drop(DropReason::Oversize);
        }
        buf.set_len(ETHERNET_HEADER_LEN + ip_len);
        // Written field by field (smoltcp's emitters cost more than the
        // checksums); `wire`'s tests hold the TCP part to smoltcp's.
        let (eth, packet) = buf.data_mut().split_at_mut(ETHERNET_HEADER_LEN);
        eth[6..12].copy_from_slice(self.cfg.mac.as_bytes());
        eth[12..14].copy_from_slice(&u16::from(EthernetProtocol::Ipv4).to_be_bytes());
        let (ip, tcp) = packet.split_at_mut(IPV4_HEADER_LEN);
        ip[0] = 0x45; // version 4, 5 words
        ip[1] = 0; // DSCP, ECN
        let total = ip_len as u16; // checked above: under 64 KiB
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[4..6].copy_from_slice(&self.next_ident.to_be_bytes());
        self.next_ident = self.next_ident.wrapping_add(1);
        ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF, offset 0
        ip[8] = 64;
        ip[9] = u8::from(IpProtocol::Tcp);
        ip[10..12].fill(0);
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&dst.octets());
        crate::tcp::wire::emit(&seg.repr, tcp);
        let (src, dst) = (src.octets(), dst.octets());
        if self.tx_checksums_offloaded {
            // What the port starts from (DPDK's rte_ipv4_phdr_cksum): a
            // zero IPv4 checksum, the TCP field holding the pseudo-header.
            let sum = crate::checksum::tcp_pseudo_header(src, dst, tcp_len);
            tcp[16..18].copy_from_slice(&sum.to_be_bytes());
            if segmented {
                buf.request_segmentation(
                    ETHERNET_HEADER_LEN as u8,
                    IPV4_HEADER_LEN as u8,
                    header_len as u8, // at most 60
                    seg.segment_size,
                );
            } else {
                buf.request_tx_checksums(ETHERNET_HEADER_LEN as u8, IPV4_HEADER_LEN as u8);
            }
        } else {
            let sum = crate::checksum::ipv4_header(ip);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            let sum = crate::checksum::tcp(src, dst, &tcp[..tcp_len]);
            tcp[16..18].copy_from_slice(&sum.to_be_bytes());
        }
        let mut frame = EthernetFrame::new_unchecked(buf.data_mut());
        match self.resolve(hop, now) {
            Some(mac) => {
                frame.set_dst_addr(mac);
                Verdict::Transmit
            }
            None => Verdict::AwaitNeighbor(IpAddr::V4(hop)),
        }
    }

    /// [`Interface::write_tcp`] over IPv6: a 40-byte header (no options,
    /// no header checksum), the TCP checksum over the IPv6 pseudo-header
    /// (RFC 8200 §8.1), left to the port (with segmentation) where it
    /// offloads checksums, as for IPv4.
    fn write_tcp6<B: PacketBuf>(
        &mut self,
        now: Instant,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        seg: &Outgoing<'_>,
        buf: &mut B,
    ) -> Verdict {
        let Some(v6) = self.ipv6.as_mut() else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let Some(hop) = v6.next_hop(dst) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let header_len = crate::tcp::wire::header_len(&seg.repr);
        let tcp_len = header_len + seg.repr.payload.len();
        let frame_len = ETHERNET_HEADER_LEN + IPV6_HEADER_LEN + tcp_len;
        let segmented = seg.segment_size > 0;
        if frame_len > buf.capacity()
            || tcp_len > usize::from(u16::MAX)
            || segmented && !self.tx_checksums_offloaded
        {
            return Verdict::Drop(DropReason::Oversize);
        }
        buf.set_len(frame_len);
        let (eth, packet) = buf.data_mut().split_at_mut(ETHERNET_HEADER_LEN);
        eth[6..12].copy_from_slice(self.cfg.mac.as_bytes());
        eth[12..14].copy_from_slice(&u16::from(EthernetProtocol::Ipv6).to_be_bytes());
        let (ip, tcp) = packet.split_at_mut(IPV6_HEADER_LEN);
        crate::net::ipv6::write_header(ip, src, dst, tcp_len, IpProtocol::Tcp, 64);
        crate::tcp::wire::emit(&seg.repr, tcp);
        let (s, d) = (src.octets(), dst.octets());
        if self.tx_checksums_offloaded {
            // The port starts from the pseudo-header sum (DPDK's
            // rte_ipv6_phdr_cksum), as for IPv4.
            let sum = crate::checksum::tcp6_pseudo_header(s, d, tcp_len);
            tcp[16..18].copy_from_slice(&sum.to_be_bytes());
            if segmented {
                buf.request_segmentation(
                    ETHERNET_HEADER_LEN as u8,
                    IPV6_HEADER_LEN as u8,
                    crate::tcp::wire::header_len(&seg.repr) as u8, // at most 60
                    seg.segment_size,
                );
            } else {
                buf.request_tx_checksums(ETHERNET_HEADER_LEN as u8, IPV6_HEADER_LEN as u8);
            }
        } else {
            let sum = crate::checksum::tcp6(s, d, &tcp[..tcp_len]);
            tcp[16..18].copy_from_slice(&sum.to_be_bytes());
        }
        let mut frame = EthernetFrame::new_unchecked(buf.data_mut());
        match v6.resolve(hop, now) {
            Some(mac) => {
                frame.set_dst_addr(mac);
                Verdict::Transmit
            }
            None => Verdict::AwaitNeighbor(IpAddr::V6(hop)),
        }
    }

    /// Processes one received frame; on [`Verdict::Transmit`] the buffer
    /// holds the reply.
    pub fn process<B: PacketBuf>(
        &mut self,
        now: Instant,
        buf: &mut B,
        counters: &mut Counters,
    ) -> Verdict {
        let checks = buf.rx_checks();
        // An IPv6 frame may be answered by a longer one (an advertisement
        // with our link-layer address for a solicitation without one, an
        // error quoting the packet): room for it, zeroed; IPv6 reads what
        // was received from its header and `len`.
        let len = buf.data().len();
        if self.ipv6.is_some() && buf.data().get(12..14) == Some(&[0x86, 0xdd]) {
            let room = (len + ERROR_HEADROOM).max(ND_FRAME_LEN).min(buf.capacity());
            if room > len {
                buf.set_len(room);
                buf.data_mut()[len..].fill(0);
            }
        }
        let (verdict, new_len) = self.process_frame(now, buf.data_mut(), len, checks, counters);
        if let Some(len) = new_len {
            let old = buf.data().len();
            buf.set_len(len);
            if len > old {
                buf.data_mut()[old..].fill(0);
            }
        }
        verdict
    }

    /// `data` is the frame, `received` bytes of it as received (the rest
    /// is room for a longer answer).
    fn process_frame(
        &mut self,
        now: Instant,
        data: &mut [u8],
        received: usize,
        checks: RxChecks,
        counters: &mut Counters,
    ) -> (Verdict, Option<usize>) {
        let Ok(mut frame) = EthernetFrame::new_checked(data) else {
            return (Verdict::Drop(DropReason::Malformed), None);
        };
        let dst = frame.dst_addr();
        if dst != self.cfg.mac
            && !dst.is_broadcast()
            && !self.ipv6.as_ref().is_some_and(|v6| v6.accepts_mac(dst))
        {
            return (Verdict::Drop(DropReason::NotForUs), None);
        }
        match frame.ethertype() {
            EthernetProtocol::Arp => self.process_arp(now, &mut frame, counters),
            // IPv4 only to our MAC: we take no IPv4 multicast or
            // broadcast (RFC 1122 §3.3.6), and a unicast packet in a group
            // frame (broadcast, or the IPv6 groups we listen to) is
            // another host's mistake or a probe.
            EthernetProtocol::Ipv4 if dst != self.cfg.mac => {
                (Verdict::Drop(DropReason::NotForUs), None)
            }
            EthernetProtocol::Ipv4 => {
                match self.process_ipv4(frame.payload_mut(), checks.ipv4, counters) {
                    Ok(IpAction::Tcp {
                        src,
                        dst,
                        start,
                        end,
                    }) => (
                        Verdict::Tcp {
                            src,
                            dst,
                            start: ETHERNET_HEADER_LEN + start,
                            end: ETHERNET_HEADER_LEN + end,
                            checksum: checks.l4,
                        },
                        None,
                    ),
                    Ok(IpAction::TooBig { key, seq, mtu }) => {
                        (Verdict::TooBig4 { key, seq, mtu }, None)
                    }
                    Ok(IpAction::Reply { hop, len: ip_len }) => {
                        frame.set_src_addr(self.cfg.mac);
                        let verdict = match self.resolve(hop, now) {
                            Some(mac) => {
                                frame.set_dst_addr(mac);
                                Verdict::Transmit
                            }
                            None => Verdict::AwaitNeighbor(IpAddr::V4(hop)),
                        };
                        (verdict, Some(ETHERNET_HEADER_LEN + ip_len))
                    }
                    Err(reason) => (Verdict::Drop(reason), None),
                }
            }
            EthernetProtocol::Ipv6 if self.ipv6.is_some() => {
                let received = received.saturating_sub(ETHERNET_HEADER_LEN);
                self.process_ipv6_frame(now, &mut frame, received, checks.l4, counters)
            }
            _ => (Verdict::Drop(DropReason::UnsupportedEtherType), None),
        }
    }

    fn process_ipv6_frame(
        &mut self,
        now: Instant,
        frame: &mut EthernetFrame<&mut [u8]>,
        received: usize,
        checksum: Check,
        counters: &mut Counters,
    ) -> (Verdict, Option<usize>) {
        let Some(v6) = &mut self.ipv6 else {
            return (Verdict::Drop(DropReason::UnsupportedEtherType), None);
        };
        let eth_src = frame.src_addr();
        if !eth_src.is_unicast() {
            return (Verdict::Drop(DropReason::Malformed), None);
        }
        let eth_group = frame.dst_addr().is_multicast() || frame.dst_addr().is_broadcast();
        let action = v6.process(
            now,
            eth_src,
            eth_group,
            frame.payload_mut(),
            received,
            counters,
        );
        let (verdict, len) = match action {
            Ok(Ipv6Action::Consumed) => return (Verdict::Consumed, None),
            Ok(Ipv6Action::TooBig { key, seq, mtu }) => {
                return (Verdict::TooBig6 { key, seq, mtu }, None)
            }
            Ok(Ipv6Action::Tcp {
                src,
                dst,
                start,
                end,
            }) => {
                let tcp = Verdict::Tcp6 {
                    src,
                    dst,
                    start: ETHERNET_HEADER_LEN + start,
                    end: ETHERNET_HEADER_LEN + end,
                    checksum,
                };
                return (tcp, None);
            }
            Err(reason) => return (Verdict::Drop(reason), None),
            Ok(Ipv6Action::ReplyTo { mac, len }) => {
                frame.set_dst_addr(mac);
                (Verdict::Transmit, len)
            }
            Ok(Ipv6Action::ReplyVia { hop, len }) => match v6.resolve(hop, now) {
                Some(mac) => {
                    frame.set_dst_addr(mac);
                    (Verdict::Transmit, len)
                }
                None => (Verdict::AwaitNeighbor(IpAddr::V6(hop)), len),
            },
        };
        frame.set_src_addr(self.cfg.mac);
        // Short replies are padded to the minimum frame (zeros past the
        // packet: `process` zeroes what it adds, the rest is cleared here).
        let padded = (ETHERNET_HEADER_LEN + len).max(MIN_FRAME);
        if let Some(pad) = frame
            .payload_mut()
            .get_mut(len..padded - ETHERNET_HEADER_LEN)
        {
            pad.fill(0);
        }
        (verdict, Some(padded))
    }

    // RFC 826, "Packet Reception".
    fn process_arp(
        &mut self,
        now: Instant,
        frame: &mut EthernetFrame<&mut [u8]>,
        counters: &mut Counters,
    ) -> (Verdict, Option<usize>) {
        let Ok(packet) = ArpPacket::new_checked(frame.payload_mut()) else {
            return (Verdict::Drop(DropReason::Malformed), None);
        };
        let Ok(ArpRepr::EthernetIpv4 {
            operation,
            source_hardware_addr,
            source_protocol_addr,
            target_protocol_addr,
            ..
        }) = ArpRepr::parse(&packet)
        else {
            return (Verdict::Drop(DropReason::Malformed), None);
        };
        if !source_hardware_addr.is_unicast()
            || source_hardware_addr == EthernetAddress([0; 6])
            || self.is_local(source_protocol_addr)
        {
            return (Verdict::Drop(DropReason::Malformed), None);
        }
        // A sender no host can be (broadcast, multicast, loopback, ...):
        // neither learned nor answered. `0.0.0.0` is an address probe
        // (RFC 5227): answered, not learned.
        if !source_protocol_addr.is_unspecified() && self.bad_source(source_protocol_addr) {
            return (Verdict::Drop(DropReason::BadSource), None);
        }
        let for_us = self.is_local(target_protocol_addr);
        // Merge: update a known sender; add it when the packet is for us
        // and the sender on our subnet (an entry for any other address
        // would never be looked up: it is reached through the gateway, and
        // a flood of such senders would push out neighbours in use).
        if !source_protocol_addr.is_unspecified() {
            let create = for_us && self.cfg.on_link(source_protocol_addr);
            self.arp
                .learn(source_protocol_addr, source_hardware_addr, now, create);
        }
        if !for_us {
            if source_protocol_addr == target_protocol_addr {
                // An announcement (gratuitous ARP): taken above, no drop.
                return (Verdict::Consumed, None);
            }
            return (Verdict::Drop(DropReason::NotForUs), None);
        }
        if operation != ArpOperation::Request {
            return (Verdict::Consumed, None);
        }
        ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Reply,
            source_hardware_addr: self.cfg.mac,
            source_protocol_addr: target_protocol_addr,
            target_hardware_addr: source_hardware_addr,
            target_protocol_addr: source_protocol_addr,
        }
        .emit(&mut ArpPacket::new_unchecked(frame.payload_mut()));
        frame.set_dst_addr(source_hardware_addr);
        frame.set_src_addr(self.cfg.mac);
        counters.arp_replies += 1;
        // The reply is padded to the minimum frame with zeros: clear any
        // padding the request carried (`process` zeroes what it adds).
        frame.payload_mut()[28..].fill(0);
        (Verdict::Transmit, Some(MIN_FRAME))
    }

    /// Handles an IPv4 packet addressed to us. `Ok(Some((hop, len)))`: the
    /// payload now holds a reply of `len` bytes to send via next hop `hop`.
    /// An ICMP "fragmentation needed and DF set" (RFC 792 type 3 code 4,
    /// with RFC 1191's next-hop MTU in bytes 6–7), `icmp` the whole
    /// message: taken when it quotes a TCP segment of ours (its source one
    /// of our addresses), with at least the 8 bytes of TCP that hold the
    /// ports and sequence number (RFC 792 guarantees them). A next-hop MTU
    /// of 0 (a router older than RFC 1191) or below 576 is taken as 576,
    /// the datagram every host must accept (RFC 791).
    fn frag_needed(&self, icmp: &[u8]) -> Result<IpAction, DropReason> {
        let quoted = icmp.get(8..).unwrap_or(&[]);
        if quoted.len() < 20 || quoted[0] >> 4 != 4 {
            return Err(DropReason::Malformed);
        }
        let ihl = usize::from(quoted[0] & 0x0f) * 4;
        let Some(tcp) = quoted.get(ihl..ihl + 8).filter(|_| ihl >= 20) else {
            return Err(DropReason::Malformed);
        };
        let local = Ipv4Addr::new(quoted[12], quoted[13], quoted[14], quoted[15]);
        let remote = Ipv4Addr::new(quoted[16], quoted[17], quoted[18], quoted[19]);
        if quoted[9] != u8::from(IpProtocol::Tcp) || !self.is_local(local) {
            return Err(DropReason::NotForUs);
        }
        let mtu = u32::from(u16::from_be_bytes([icmp[6], icmp[7]])).max(576);
        Ok(IpAction::TooBig {
            key: crate::tcp::FlowKey {
                local,
                local_port: u16::from_be_bytes([tcp[0], tcp[1]]),
                remote,
                remote_port: u16::from_be_bytes([tcp[2], tcp[3]]),
            },
            seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
            mtu,
        })
    }

    /// Whether no host sends from `src` (RFC 1122 §3.2.1.3: broadcast,
    /// multicast, loopback, "this network"; 240/4 is reserved; our own
    /// addresses, the port's and the VIPs', come from no peer): answering
    /// would reflect to a network, loop back to us (for a VIP routed to
    /// us, through the gateway and back, segment after segment) or reach
    /// no one.
    #[inline]
    fn bad_source(&self, src: Ipv4Addr) -> bool {
        // 0/8 ("this network"), 127/8 (loopback), 224/4 (multicast),
        // 240/4 (reserved, and the limited broadcast): by the first byte.
        matches!(src.octets()[0], 0 | 127 | 224..=255)
            || Some(src) == self.subnet_broadcast
            || self.is_local(src)
    }

    fn process_ipv4(
        &mut self,
        payload: &mut [u8],
        checksum: Check,
        counters: &mut Counters,
    ) -> Result<IpAction, DropReason> {
        let mut ip = Ipv4Packet::new_checked(payload).map_err(|_| DropReason::Malformed)?;
        if ip.version() != 4 {
            return Err(DropReason::Malformed);
        }
        let header_len = usize::from(ip.header_len()); // checked by new_checked
                                                       // RFC 791 §3.1: at least five words (smoltcp's check lets less in,
                                                       // and TCP would be read from inside the IP header).
        if header_len < IPV4_HEADER_LEN {
            return Err(DropReason::Malformed);
        }
        let checksum_ok = match checksum {
            Check::Good => true,
            Check::Bad => false,
            Check::Unknown => crate::checksum::ipv4_header_ok(&ip.as_ref()[..header_len]),
        };
        if !checksum_ok {
            return Err(DropReason::BadIpChecksum);
        }
        let dst = ip.dst_addr();
        if !self.is_local(dst) {
            return Err(DropReason::NotForUs);
        }
        if ip.more_frags() || ip.frag_offset() != 0 {
            return Err(DropReason::Fragment);
        }
        let src = ip.src_addr();
        let options = ip.as_ref().get(IPV4_HEADER_LEN..header_len);
        if self.bad_source(src) || options.is_some_and(|o| !o.is_empty() && source_routed(o)) {
            return Err(DropReason::BadSource);
        }
        let total = usize::from(ip.total_len());
        match ip.next_header() {
            IpProtocol::Icmp => {}
            IpProtocol::Tcp => {
                let start = usize::from(ip.header_len());
                return Ok(IpAction::Tcp {
                    src,
                    dst,
                    start,
                    end: total,
                });
            }
            _ => return Err(DropReason::UnsupportedProtocol),
        }
        // payload_mut is bounded by total_len: Ethernet padding is excluded.
        let mut icmp =
            Icmpv4Packet::new_checked(ip.payload_mut()).map_err(|_| DropReason::Malformed)?;
        if !icmp.verify_checksum() {
            return Err(DropReason::BadIcmpChecksum);
        }
        if icmp.msg_type() == Icmpv4Message::DstUnreachable && icmp.msg_code() == 4 {
            let action = self.frag_needed(icmp.into_inner());
            if action.is_ok() {
                counters.icmp_frag_needed += 1;
            }
            return action;
        }
        if icmp.msg_type() != Icmpv4Message::EchoRequest || icmp.msg_code() != 0 {
            return Err(DropReason::UnsupportedProtocol);
        }
        let hop = self.next_hop(src).ok_or(DropReason::NoRoute)?;
        // RFC 792: reverse addresses, type 0, recompute the checksum;
        // identifier, sequence number and data are returned as received.
        icmp.set_msg_type(Icmpv4Message::EchoReply);
        icmp.fill_checksum();
        ip.set_dst_addr(src);
        ip.set_src_addr(dst);
        ip.set_hop_limit(64);
        ip.fill_checksum();
        counters.icmp_echo_replies += 1;
        Ok(IpAction::Reply { hop, len: total })
    }
}

/// Whether IPv4 `options` carry a loose or strict source route (RFC 791
/// §3.1): such packets are dropped, as Linux does by default and RFC 7126
/// §4.3 advises (a reply would follow the route the sender chose).
fn source_routed(options: &[u8]) -> bool {
    const END: u8 = 0;
    const NOP: u8 = 1;
    const LSRR: u8 = 0x83;
    const SSRR: u8 = 0x89;
    let mut at = 0;
    while let Some(&kind) = options.get(at) {
        match kind {
            END => return false,
            NOP => at += 1,
            LSRR | SSRR => return true,
            // A length below 2 would not move on: the rest is unreadable.
            _ => match options.get(at + 1) {
                Some(&len) if len >= 2 => at += usize::from(len),
                _ => return false,
            },
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_addresses_are_found_however_they_were_added() {
        let mut iface = Interface::new(InterfaceConfig {
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            addr: Ipv4Addr::new(10, 0, 0, 1),
            prefix_len: 24,
            gateway: None,
        });
        for last in [200, 3, 77, 3, 1, 150, 9] {
            iface.add_address(Ipv4Addr::new(10, 0, 0, last));
        }
        let local = |i: &Interface| {
            (0..=255)
                .filter(|&n| i.is_local(Ipv4Addr::new(10, 0, 0, n)))
                .collect::<Vec<u8>>()
        };
        assert_eq!(local(&iface), [1, 3, 9, 77, 150, 200]);
        iface.retain_addresses(|a| a.octets()[3] > 50);
        assert_eq!(
            local(&iface),
            [1, 77, 150, 200],
            "the port's own address stays"
        );
        assert!(!iface.is_local(Ipv4Addr::new(10, 0, 1, 77)));
    }

    /// A frame buffer standing in for a device's: it records the transmit
    /// request and hands out the receive verdicts it is given.
    #[derive(Default)]
    struct DeviceBuf {
        bytes: Vec<u8>,
        requested: Option<(u8, u8)>,
        /// A segmentation request: header lengths and segment size.
        cut: Option<(u8, u8, u8, u16)>,
        rx: RxChecks,
    }

    impl PacketBuf for DeviceBuf {
        fn data(&self) -> &[u8] {
            &self.bytes
        }
        fn data_mut(&mut self) -> &mut [u8] {
            &mut self.bytes
        }
        fn capacity(&self) -> usize {
            2048
        }
        fn set_len(&mut self, len: usize) {
            self.bytes.resize(len, 0);
        }
        fn rx_checks(&self) -> RxChecks {
            self.rx
        }
        fn request_tx_checksums(&mut self, l2_len: u8, l3_len: u8) {
            self.requested = Some((l2_len, l3_len));
        }
        fn request_segmentation(&mut self, l2: u8, l3: u8, l4: u8, mss: u16) {
            self.cut = Some((l2, l3, l4, mss));
        }
    }

    fn iface() -> Interface {
        Interface::new(InterfaceConfig {
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            addr: Ipv4Addr::new(10, 0, 0, 1),
            prefix_len: 24,
            gateway: None,
        })
    }

    /// A 100-byte data segment from the interface's address, framed.
    fn framed(iface: &mut Interface) -> DeviceBuf {
        framed_as(iface, &[7u8; 100], 0).1
    }

    /// A data segment of `payload` for the port to cut at `segment_size`
    /// (0: not cut), framed; and the verdict.
    fn framed_as(iface: &mut Interface, payload: &[u8], segment_size: u16) -> (Verdict, DeviceBuf) {
        let seg = Outgoing {
            src: Ipv4Addr::new(10, 0, 0, 1).into(),
            dst: Ipv4Addr::new(10, 0, 0, 2).into(),
            repr: smoltcp::wire::TcpRepr {
                src_port: 80,
                dst_port: 40000,
                control: smoltcp::wire::TcpControl::Psh,
                seq_number: smoltcp::wire::TcpSeqNumber(1000),
                ack_number: Some(smoltcp::wire::TcpSeqNumber(2000)),
                window_len: 512,
                window_scale: None,
                max_seg_size: None,
                sack_permitted: false,
                sack_ranges: [None; 3],
                timestamp: None,
                payload,
            },
            segment_size,
        };
        let mut buf = DeviceBuf::default();
        let verdict = iface.write_tcp(Instant::from_millis(0), &seg, &mut buf);
        (verdict, buf)
    }

    /// A neighbour that restarts at another MAC announces its addresses
    /// (RFC 5227 §2.3): a known one moves to the new MAC, an unknown one
    /// is not added, and neither counts as a drop.
    #[test]
    fn announcements_move_known_neighbours_and_are_no_drops() {
        let mut dut = iface();
        let now = Instant::from_millis(0);
        let mut counters = Counters::default();
        let peer = |mac: u8, extra: Option<Ipv4Addr>| {
            let mut p = Interface::new(InterfaceConfig {
                mac: EthernetAddress([2, 0, 0, 0, 0, mac]),
                addr: Ipv4Addr::new(10, 0, 0, 2),
                prefix_len: 24,
                gateway: None,
            });
            if let Some(a) = extra {
                p.add_address(a);
            }
            p
        };
        // The DUT asked for 10.0.0.2 and learned it at MAC ..:02.
        let old = peer(2, None);
        let mut ask = DeviceBuf::default();
        old.write_arp_request(Ipv4Addr::new(10, 0, 0, 1), &mut ask);
        dut.process(now, &mut ask, &mut counters);
        assert_eq!(
            dut.arp().peek(Ipv4Addr::new(10, 0, 0, 2), now),
            Some(EthernetAddress([2, 0, 0, 0, 0, 2]))
        );
        // Restarted at ..:09 with a second address: both announced.
        let new = peer(9, Some(Ipv4Addr::new(10, 0, 0, 3)));
        assert_eq!(new.addresses().count(), 2);
        for addr in new.addresses() {
            let mut frame = DeviceBuf::default();
            new.write_arp_announcement(addr, &mut frame);
            assert_eq!(
                dut.process(now, &mut frame, &mut counters),
                Verdict::Consumed
            );
        }
        assert_eq!(
            dut.arp().peek(Ipv4Addr::new(10, 0, 0, 2), now),
            Some(EthernetAddress([2, 0, 0, 0, 0, 9]))
        );
        assert_eq!(dut.arp().peek(Ipv4Addr::new(10, 0, 0, 3), now), None);
        assert_eq!(counters.drops.iter().sum::<u64>(), 0);
    }

    #[test]
    fn a_segment_to_cut_asks_the_device_and_fits_its_buffer() {
        let mut hard = iface();
        hard.set_checksum_offload(ChecksumOffload {
            tx_ipv4: true,
            tx_tcp: true,
            ..ChecksumOffload::default()
        });
        let (_, cut) = framed_as(&mut hard, &[1u8; 1900], 1000);
        assert_eq!(cut.cut, Some((14, 20, 20, 1000)));
        assert_eq!(cut.bytes.len(), 14 + 40 + 1900);
        // The pseudo-header sum covers the whole TCP length (Linux's
        // partial checksum; a DPDK buffer takes the length back out).
        let tcp = &cut.bytes[34..];
        let pseudo = crate::checksum::tcp_pseudo_header([10, 0, 0, 1], [10, 0, 0, 2], 1920);
        assert_eq!(u16::from_be_bytes([tcp[16], tcp[17]]), pseudo);
        // Longer than the buffer, or to cut without checksum offload:
        // dropped, never a panic.
        let (verdict, _) = framed_as(&mut hard, &[1u8; 2100], 1000);
        assert_eq!(verdict, Verdict::Drop(DropReason::Oversize));
        let (verdict, _) = framed_as(&mut iface(), &[1u8; 1900], 1000);
        assert_eq!(verdict, Verdict::Drop(DropReason::Oversize));
    }

    #[test]
    fn offloaded_frames_leave_the_checksums_to_the_device() {
        let mut soft = iface();
        let whole = framed(&mut soft);
        assert_eq!(whole.requested, None);
        let mut hard = iface();
        hard.set_checksum_offload(ChecksumOffload {
            tx_ipv4: true,
            tx_tcp: true,
            ..ChecksumOffload::default()
        });
        let mut left = framed(&mut hard);
        assert_eq!(left.requested, Some((14, 20)));
        let (ip, tcp) = left.bytes[14..].split_at_mut(20);
        assert_eq!(&ip[10..12], &[0, 0], "IPv4 checksum left zero");
        // What the device does (Intel's and DPDK's own software fallback):
        // the IPv4 sum over the header; the TCP sum over the segment with
        // the pseudo-header sum already in its field.
        let sum = crate::checksum::ipv4_header(ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        let pseudo = u16::from_be_bytes([tcp[16], tcp[17]]);
        assert_ne!(pseudo, 0);
        let sum = !fold_sum(tcp);
        tcp[16..18].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(
            left.bytes, whole.bytes,
            "the device's result is the software frame"
        );

        // Only both transmit checksums together are left to the device.
        let mut half = iface();
        half.set_checksum_offload(ChecksumOffload {
            tx_ipv4: true,
            ..ChecksumOffload::default()
        });
        let frame = framed(&mut half);
        assert_eq!(frame.requested, None);
        assert_eq!(frame.bytes, whole.bytes);
    }

    /// The one's-complement sum of `data` (no pseudo-header), folded.
    fn fold_sum(data: &[u8]) -> u16 {
        let mut s: u32 = data
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
            .sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn received_checksums_follow_the_device_verdict() {
        let mut sender = iface();

        let mut receiver = Interface::new(InterfaceConfig {
            mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
            addr: Ipv4Addr::new(10, 0, 0, 2),
            prefix_len: 24,
            gateway: None,
        });
        let mut counters = Counters::default();
        let mut deliver = |mut buf: DeviceBuf, ipv4: Check, l4: Check| {
            buf.bytes[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
            buf.rx = RxChecks { ipv4, l4 };
            receiver.process(Instant::from_millis(0), &mut buf, &mut counters)
        };
        let tcp_check = |v: Verdict| match v {
            Verdict::Tcp { checksum, .. } => Some(checksum),
            _ => None,
        };
        // Unchecked: software judges (right here).
        let v = deliver(framed(&mut sender), Check::Unknown, Check::Unknown);
        assert_eq!(tcp_check(v), Some(Check::Unknown));
        // The device said bad: dropped, though the bytes are right.
        let v = deliver(framed(&mut sender), Check::Bad, Check::Unknown);
        assert_eq!(v, Verdict::Drop(DropReason::BadIpChecksum));
        // The device said good: trusted, not recomputed.
        let mut wrong = framed(&mut sender);
        wrong.bytes[14 + 10] ^= 0xff;
        let v = deliver(wrong, Check::Good, Check::Good);
        assert_eq!(tcp_check(v), Some(Check::Good));
        let mut wrong = framed(&mut sender);
        wrong.bytes[14 + 10] ^= 0xff;
        let v = deliver(wrong, Check::Unknown, Check::Unknown);
        assert_eq!(v, Verdict::Drop(DropReason::BadIpChecksum));
    }
}
