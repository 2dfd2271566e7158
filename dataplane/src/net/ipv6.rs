//! IPv6 on one port, as a host (RFC 8200, RFC 4291): a link-local address
//! made from the port's MAC and statically configured ones, Neighbor
//! Discovery (RFC 4861: solicitations answered, advertisements learned, our
//! own solicitations for next hops), ICMPv6 echo (RFC 4443). Extension
//! headers are walked within the packet's bounds (an atomic fragment,
//! RFC 6946, as if it had no Fragment header); fragments, unknown
//! extension headers and options whose type says "discard" are dropped and
//! counted; what RFC 8200 answers with an ICMPv6 Parameter Problem (an
//! unknown next header or upper layer, an option that asks for one, a
//! routing header with segments left) gets one, rate-limited. TCP
//! segments for one of our addresses go to the engine's TCP
//! ([`Ipv6Action::Tcp`]). Our addresses are checked for duplicates once
//! (a conflict is counted, the address kept), and Router Advertisements
//! are not taken (the gateway is configured). The
//! fixed header is read and written through `smoltcp::wire::Ipv6Packet`;
//! extension headers and ICMPv6 messages by offset, each bound checked.
//! docs/architecture.md, "net".

use std::net::Ipv6Addr;
use std::time::Duration;

use smoltcp::wire::{EthernetAddress, IpProtocol, Ipv6Packet};

use super::arp::{NdCache, ND_REACHABLE_TIME};
use crate::stats::DropReason;
use crate::time::Instant;

/// IPv6 header length.
pub const HEADER_LEN: usize = 40;
/// A Neighbor Solicitation or Advertisement with one link-layer option.
const ND_LEN: usize = 24 + 8;
/// The longest frame this module writes in place of a received one: an
/// advertisement answering a solicitation that carried no option.
pub const ND_FRAME_LEN: usize = 14 + HEADER_LEN + ND_LEN;
/// The IPv6 minimum link MTU: no ICMPv6 error we send is longer.
const MIN_MTU: usize = 1280;
/// Room an ICMPv6 error needs before the packet it quotes.
pub const ERROR_HEADROOM: usize = HEADER_LEN + 8;
/// Extension headers walked before giving up on a packet.
pub(crate) const MAX_EXTENSION_HEADERS: usize = 8;
/// Neighbours remembered per port.
const ND_ENTRIES: usize = 4096;
/// Most solicitations queued for sending between two engine iterations.
const MAX_PENDING_SOLICITATIONS: usize = 16;

const NEXT_HOP_BY_HOP: u8 = 0;
const NEXT_ROUTING: u8 = 43;
const NEXT_FRAGMENT: u8 = 44;
const NEXT_TCP: u8 = 6;
const NEXT_ICMPV6: u8 = 58;
const NEXT_NONE: u8 = 59;
const NEXT_DEST_OPTS: u8 = 60;

const ICMP_PACKET_TOO_BIG: u8 = 2;
const ICMP_PARAMETER_PROBLEM: u8 = 4;
const MLD_QUERY: u8 = 130;
const MLD_REPORT: u8 = 143;
/// An MLDv2 record type: listening to the group, from every source.
const MODE_IS_EXCLUDE: u8 = 2;
/// `ff02::16`, where MLDv2 routers (and snooping switches) hear reports.
pub const MLD_REPORTS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x16);
/// Unsolicited reports sent on joining (RFC 3810 §9.1, Robustness).
const ROBUSTNESS: u8 = 2;
/// Least time between two reports (a second, as the unsolicited ones).
const MIN_REPORT_GAP: Duration = Duration::from_secs(1);
/// Group records one report holds: a 1,500-byte packet.
pub const MAX_REPORT_GROUPS: usize = (1500 - HEADER_LEN - 8 - 8) / 20;
const ICMP_ECHO_REQUEST: u8 = 128;
const ICMP_ECHO_REPLY: u8 = 129;
const ICMP_NEIGHBOR_SOLICIT: u8 = 135;
const ICMP_NEIGHBOR_ADVERT: u8 = 136;
const ICMP_REDIRECT: u8 = 137;

const OPT_SOURCE_LLADDR: u8 = 1;
const OPT_TARGET_LLADDR: u8 = 2;

/// Neighbor Advertisement flags (RFC 4861 §4.4), in the message's fifth byte.
const NA_SOLICITED: u8 = 0x40;
const NA_OVERRIDE: u8 = 0x20;

/// `ff02::1`, all nodes on the link.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// A port's IPv6 configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ipv6Config {
    /// Global (or unique local) addresses with their prefix lengths.
    pub addresses: Vec<(Ipv6Addr, u8)>,
    /// The default router: link-local or on one of the prefixes.
    pub gateway: Option<Ipv6Addr>,
}

impl Ipv6Config {
    /// The next hop towards `dst`: itself when link-local or on one of the
    /// prefixes, else the gateway.
    pub fn next_hop(&self, dst: Ipv6Addr) -> Option<Ipv6Addr> {
        if is_link_local(dst) || self.addresses.iter().any(|&(a, l)| on_prefix(a, dst, l)) {
            Some(dst)
        } else {
            self.gateway
        }
    }

    /// The address a connection of ours to `dst` starts from: the one on
    /// its prefix, else (through the gateway) the first; `None` when
    /// `dst` is not reached or link-local (not a backend's address).
    pub fn source_for(&self, dst: Ipv6Addr) -> Option<Ipv6Addr> {
        if is_link_local(dst) {
            return None;
        }
        let on_link = self.addresses.iter().find(|&&(a, l)| on_prefix(a, dst, l));
        match on_link {
            Some(&(a, _)) => Some(a),
            None => self.gateway.and(self.addresses.first().map(|&(a, _)| a)),
        }
    }
}

/// The link-local address of a MAC (RFC 4291 appendix A: the modified
/// EUI-64 interface identifier, RFC 4862 §5.3).
pub fn link_local(mac: EthernetAddress) -> Ipv6Addr {
    let m = mac.0;
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 0x02,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ])
}

/// The solicited-node multicast address of `addr` (RFC 4291 §2.7.1).
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let a = addr.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, a[13], a[14], a[15],
    ])
}

/// The Ethernet multicast address of IPv6 multicast `addr` (RFC 2464 §7).
pub fn multicast_mac(addr: Ipv6Addr) -> EthernetAddress {
    let a = addr.octets();
    EthernetAddress([0x33, 0x33, a[12], a[13], a[14], a[15]])
}

fn on_prefix(a: Ipv6Addr, b: Ipv6Addr, prefix_len: u8) -> bool {
    let mask = if prefix_len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(prefix_len.min(128)))
    };
    (u128::from(a) ^ u128::from(b)) & mask == 0
}

fn is_link_local(a: Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// What became of an IPv6 packet for us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipv6Action {
    /// The packet now holds a reply of `len` bytes (from the IPv6 header)
    /// for the Ethernet address `mac`.
    ReplyTo { mac: EthernetAddress, len: usize },
    /// The packet now holds a reply of `len` bytes to send via neighbour
    /// `hop` (resolved through the neighbour cache).
    ReplyVia { hop: Ipv6Addr, len: usize },
    /// Taken (an advertisement learned from); nothing to send.
    Consumed,
    /// A TCP segment for one of our addresses at `start..end` of the
    /// packet (past any extension headers), from `src` to `dst`.
    Tcp {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        start: usize,
        end: usize,
    },
    /// A Packet Too Big quoting a TCP segment of ours: the path to
    /// `key.remote` takes packets of at most `mtu` bytes (at least 1,280);
    /// `seq` is the quoted segment's sequence number.
    TooBig {
        key: crate::tcp::FlowKey6,
        seq: u32,
        mtu: u32,
    },
}

/// One port's IPv6 host state.
#[derive(Debug)]
pub struct Ipv6Host {
    mac: EthernetAddress,
    link_local: Ipv6Addr,
    cfg: Ipv6Config,
    cache: NdCache,
    /// Addresses to send solicitations for (the engine builds the frames).
    probes: Vec<Ipv6Addr>,
    /// What is left of the ICMPv6 error rate limit.
    errors: ErrorBudget,
    /// Multicast Listener Reports still to send, when the next is due,
    /// the first group the next frame of it reports (a report of more
    /// groups than a frame holds goes as several, RFC 3810 §5.2.15), and
    /// when the last one ended.
    reports_left: u8,
    report_at: Instant,
    report_from: usize,
    last_report: Instant,
    /// The groups this port listens to beyond all-nodes (which is never
    /// reported, RFC 3810 §6): the solicited-node group of each address,
    /// once (addresses sharing their last 24 bits share one), sorted; and
    /// their MACs, sorted: looked up for every multicast frame.
    groups: Vec<Ipv6Addr>,
    group_macs: Vec<EthernetAddress>,
    /// Draws the random delays of query responses (xorshift).
    rng: u64,
    /// Our addresses still to check for duplicates (last first).
    dad: Vec<Ipv6Addr>,
    /// Addresses of ours beyond the configured ones (VIPs), sorted.
    extra: Vec<Ipv6Addr>,
}

impl Ipv6Host {
    pub fn new(mac: EthernetAddress, cfg: Ipv6Config) -> Self {
        use std::hash::BuildHasher;
        let seed = std::collections::hash_map::RandomState::new().hash_one(mac.0);
        let mut host = Self {
            mac,
            link_local: link_local(mac),
            cfg,
            cache: NdCache::with_reachable_time(ND_ENTRIES, ND_REACHABLE_TIME),
            probes: Vec::with_capacity(MAX_PENDING_SOLICITATIONS),
            errors: ErrorBudget::new(),
            reports_left: 0,
            report_at: Instant::ZERO,
            report_from: 0,
            last_report: Instant::ZERO,
            groups: Vec::new(),
            group_macs: Vec::new(),
            rng: seed | 1,
            dad: Vec::new(),
            extra: Vec::new(),
        };
        host.refresh_groups();
        host
    }

    /// Computes the groups again from the addresses (after a change).
    fn refresh_groups(&mut self) {
        let mut groups: Vec<Ipv6Addr> = self.unicast().map(solicited_node).collect();
        groups.sort_unstable();
        groups.dedup();
        let mut macs: Vec<EthernetAddress> = groups.iter().map(|&g| multicast_mac(g)).collect();
        macs.sort_unstable();
        macs.dedup();
        self.groups = groups;
        self.group_macs = macs;
    }

    /// Adds an address of ours (a VIP's) beside the configured ones:
    /// answered in Neighbor Discovery, taken by TCP, in the groups
    /// reported from the next report on.
    pub fn add_address(&mut self, a: Ipv6Addr) {
        if !self.is_local(a) {
            if let Err(at) = self.extra.binary_search(&a) {
                self.extra.insert(at, a);
                self.refresh_groups();
            }
        }
    }

    /// Keeps the added addresses `keep` holds true for.
    pub fn retain_addresses(&mut self, keep: impl FnMut(&Ipv6Addr) -> bool) {
        let before = self.extra.len();
        self.extra.retain(keep);
        if self.extra.len() != before {
            self.refresh_groups();
        }
    }

    pub fn link_local(&self) -> Ipv6Addr {
        self.link_local
    }

    pub fn config(&self) -> &Ipv6Config {
        &self.cfg
    }

    pub fn cache(&self) -> &NdCache {
        &self.cache
    }

    /// Whether `a` is one of this port's unicast addresses.
    pub fn is_local(&self, a: Ipv6Addr) -> bool {
        a == self.link_local
            || self.cfg.addresses.iter().any(|&(x, _)| x == a)
            || self.extra.binary_search(&a).is_ok()
    }

    /// Whether a packet to `a` is for this port: a unicast address of
    /// ours, all nodes, or the solicited-node group of one of ours.
    fn accepts(&self, a: Ipv6Addr) -> bool {
        self.is_local(a)
            || a == ALL_NODES
            || (is_solicited_node(a) && self.groups.binary_search(&a).is_ok())
    }

    /// Whether an Ethernet frame to `mac` may be for this port: the
    /// all-nodes group or a solicited-node group of ours.
    pub fn accepts_mac(&self, mac: EthernetAddress) -> bool {
        mac == multicast_mac(ALL_NODES) || self.group_macs.binary_search(&mac).is_ok()
    }

    /// The next hop towards `dst`: itself when link-local or on one of the
    /// prefixes, else the gateway.
    pub fn next_hop(&self, dst: Ipv6Addr) -> Option<Ipv6Addr> {
        self.cfg.next_hop(dst)
    }

    /// Our source address towards `dst`: the link-local one to a
    /// link-local address, else a configured address on its prefix, else
    /// (off the link, through the gateway) the first configured one: a
    /// link-local source is never forwarded (RFC 4291 §2.5.6).
    fn source_for(&self, dst: Ipv6Addr) -> Ipv6Addr {
        if is_link_local(dst) {
            return self.link_local;
        }
        let addresses = &self.cfg.addresses;
        addresses
            .iter()
            .find(|&&(a, l)| on_prefix(a, dst, l))
            .or(addresses.first())
            .map_or(self.link_local, |&(a, _)| a)
    }

    /// The MAC of neighbour `hop`, queueing a solicitation on a miss (paced
    /// per address, as ARP requests are).
    pub fn resolve(&mut self, hop: Ipv6Addr, now: Instant) -> Option<EthernetAddress> {
        self.cache
            .resolve(hop, now, &mut self.probes, MAX_PENDING_SOLICITATIONS)
    }

    /// Keeps the gateway resolved.
    pub fn on_timer(&mut self, now: Instant) {
        if let Some(gw) = self.cfg.gateway {
            if self.cache.peek(gw, now).is_none() {
                self.resolve(gw, now);
            }
        }
    }

    /// Takes one address to send a solicitation for.
    pub fn take_probe(&mut self) -> Option<Ipv6Addr> {
        self.probes.pop()
    }

    /// Writes a Neighbor Solicitation for `target` (RFC 4861 §7.2.2: to its
    /// solicited-node group, hop limit 255, our MAC in the option) into
    /// `frame`, which must hold [`ND_FRAME_LEN`] bytes; returns the length.
    pub fn write_solicitation(&self, target: Ipv6Addr, frame: &mut [u8]) -> usize {
        self.write_ns(target, false, frame)
    }

    /// Writes a duplicate address check of our `target` (RFC 4862 §5.4.2:
    /// from `::`, no link-layer option) into `frame` ([`ND_FRAME_LEN`]
    /// bytes); returns the length. A node that holds `target` answers to
    /// all nodes, and that answer is counted as `nd_conflicts`.
    pub fn write_dad_solicitation(&self, target: Ipv6Addr, frame: &mut [u8]) -> usize {
        self.write_ns(target, true, frame)
    }

    fn write_ns(&self, target: Ipv6Addr, dad: bool, frame: &mut [u8]) -> usize {
        let group = solicited_node(target);
        let icmp_len = if dad { ND_LEN - 8 } else { ND_LEN };
        let len = 14 + HEADER_LEN + icmp_len;
        let frame = &mut frame[..len];
        frame.fill(0);
        frame[..6].copy_from_slice(multicast_mac(group).as_bytes());
        frame[6..12].copy_from_slice(self.mac.as_bytes());
        frame[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        let src = if dad {
            Ipv6Addr::UNSPECIFIED
        } else {
            self.source_for(target)
        };
        let (ip, icmp) = frame[14..].split_at_mut(HEADER_LEN);
        write_header(ip, src, group, icmp_len, IpProtocol::Icmpv6, 255);
        icmp[0] = ICMP_NEIGHBOR_SOLICIT;
        icmp[8..24].copy_from_slice(&target.octets());
        if !dad {
            icmp[24] = OPT_SOURCE_LLADDR;
            icmp[25] = 1;
            icmp[26..32].copy_from_slice(self.mac.as_bytes());
        }
        let sum = crate::checksum::icmpv6(src.octets(), group.octets(), icmp);
        icmp[2..4].copy_from_slice(&sum.to_be_bytes());
        len
    }

    /// Takes one of our addresses still to check for duplicates.
    pub fn take_dad_probe(&mut self) -> Option<Ipv6Addr> {
        self.dad.pop()
    }

    /// Handles the IPv6 packet in the first `received` bytes of `pkt` (the
    /// frame's payload as received, Ethernet padding included) that came
    /// from `eth_src`, to a link-layer group (multicast or broadcast) when
    /// `eth_group`. Replies are written in place over `pkt`, which must
    /// be at least [`ND_FRAME_LEN`]` - 14` bytes long for an advertisement
    /// to fit (the caller makes room past what was received).
    pub fn process(
        &mut self,
        now: Instant,
        eth_src: EthernetAddress,
        eth_group: bool,
        pkt: &mut [u8],
        received: usize,
        counters: &mut crate::stats::Counters,
    ) -> Result<Ipv6Action, DropReason> {
        let received = received.min(pkt.len());
        // smoltcp checks the header and the payload length against what
        // was received (Ethernet padding past it is ignored).
        let ip = Ipv6Packet::new_checked(&pkt[..received]).map_err(|_| DropReason::Malformed)?;
        if ip.version() != 6 {
            return Err(DropReason::Malformed);
        }
        let end = HEADER_LEN + usize::from(ip.payload_len());
        let (hop_limit, src, dst) = (ip.hop_limit(), ip.src_addr(), ip.dst_addr());
        if !self.accepts(dst) {
            return Err(DropReason::NotForUs);
        }
        if src.is_multicast() {
            return Err(DropReason::Malformed);
        }
        // No host sends from loopback (RFC 4291 §2.5.3), an IPv4-mapped
        // address (RFC 4291 §2.5.5.2: never on the wire; a backend given
        // one in a PROXY header may take it for an IPv4 client) or one of
        // ours.
        if src.is_loopback() || src.to_ipv4_mapped().is_some() || self.is_local(src) {
            return Err(DropReason::BadSource);
        }
        let start = match upper_layer(pkt, end) {
            Ok((NEXT_TCP, start)) => {
                // TCP only to a unicast address of ours (RFC 9293 §3.9.1
                // has no multicast), sent to our MAC rather than a group
                // one (as RFC 1122 §3.3.6 asks of IPv4), from a unicast
                // address.
                if !self.is_local(dst) || eth_group {
                    return Err(DropReason::NotForUs);
                }
                if src.is_unspecified() {
                    return Err(DropReason::Malformed);
                }
                return Ok(Ipv6Action::Tcp {
                    src,
                    dst,
                    start,
                    end,
                });
            }
            Ok((_, start)) => start, // ICMPv6
            Err(Refusal {
                reason,
                problem: Some(problem),
            }) => {
                let refused = Refused {
                    end,
                    problem,
                    reason,
                    eth_group,
                };
                return self.parameter_problem(now, pkt, refused, counters);
            }
            Err(Refusal { reason, .. }) => return Err(reason),
        };
        let icmp = &pkt[start..end];
        if icmp.len() < 8 {
            return Err(DropReason::Malformed);
        }
        if !crate::checksum::icmpv6_ok(src.octets(), dst.octets(), icmp) {
            return Err(DropReason::BadIcmpChecksum);
        }
        match (icmp[0], icmp[1]) {
            (ICMP_ECHO_REQUEST, 0) => {
                if src.is_unspecified() {
                    return Err(DropReason::Malformed);
                }
                let hop = self.next_hop(src).ok_or(DropReason::NoRoute)?;
                // RFC 4443 §4.2: the reply comes from the unicast address
                // the request was sent to (else one of ours), with the
                // request's identifier, sequence and data; extension
                // headers are not returned.
                let from = if self.is_local(dst) {
                    dst
                } else {
                    self.source_for(src)
                };
                let len = end - start;
                pkt.copy_within(start..end, HEADER_LEN);
                write_header(pkt, from, src, len, IpProtocol::Icmpv6, 64);
                let icmp = &mut pkt[HEADER_LEN..HEADER_LEN + len];
                icmp[0] = ICMP_ECHO_REPLY;
                icmp[2..4].fill(0);
                let sum = crate::checksum::icmpv6(from.octets(), src.octets(), icmp);
                icmp[2..4].copy_from_slice(&sum.to_be_bytes());
                counters.icmpv6_echo_replies += 1;
                Ok(Ipv6Action::ReplyVia {
                    hop,
                    len: HEADER_LEN + len,
                })
            }
            (ICMP_NEIGHBOR_SOLICIT, 0) => {
                let (target, lladdr) = nd_message(icmp, hop_limit, OPT_SOURCE_LLADDR)?;
                let dad = src.is_unspecified();
                // RFC 4861 §7.1.1: from the unspecified address only to a
                // solicited-node group, and without a link-layer option.
                if dad && (!is_solicited_node(dst) || lladdr.is_some()) {
                    return Err(DropReason::Malformed);
                }
                if !self.is_local(target) {
                    return Err(DropReason::NotForUs);
                }
                // §7.2.3: the sender's entry is created or updated, stale
                // (a solicitation confirms nothing); created only for a
                // sender on the link (link-local or on one of our
                // prefixes): one elsewhere is reached through the gateway,
                // and a flood of them would push out neighbours in use.
                if let Some(mac) = lladdr.filter(|_| self.cfg.next_hop(src) == Some(src)) {
                    self.cache.solicited_by(src, mac, now);
                }
                // §7.2.4 (and RFC 4862 §5.4.3 for a duplicate address
                // check of ours): answer to all nodes when the sender has
                // no address, else to it, solicited.
                let (to_ip, to_mac, flags) = if dad {
                    (ALL_NODES, multicast_mac(ALL_NODES), NA_OVERRIDE)
                } else {
                    (src, lladdr.unwrap_or(eth_src), NA_SOLICITED | NA_OVERRIDE)
                };
                if pkt.len() < HEADER_LEN + ND_LEN {
                    return Err(DropReason::Oversize);
                }
                write_header(pkt, target, to_ip, ND_LEN, IpProtocol::Icmpv6, 255);
                let icmp = &mut pkt[HEADER_LEN..HEADER_LEN + ND_LEN];
                icmp.fill(0);
                icmp[0] = ICMP_NEIGHBOR_ADVERT;
                icmp[4] = flags;
                icmp[8..24].copy_from_slice(&target.octets());
                icmp[24] = OPT_TARGET_LLADDR;
                icmp[25] = 1;
                icmp[26..32].copy_from_slice(self.mac.as_bytes());
                let sum = crate::checksum::icmpv6(target.octets(), to_ip.octets(), icmp);
                icmp[2..4].copy_from_slice(&sum.to_be_bytes());
                counters.nd_advertisements += 1;
                Ok(Ipv6Action::ReplyTo {
                    mac: to_mac,
                    len: HEADER_LEN + ND_LEN,
                })
            }
            (ICMP_NEIGHBOR_ADVERT, 0) => {
                let (target, lladdr) = nd_message(icmp, hop_limit, OPT_TARGET_LLADDR)?;
                // §7.1.2: an advertisement to a group is not solicited.
                if dst.is_multicast() && icmp[4] & NA_SOLICITED != 0 {
                    return Err(DropReason::Malformed);
                }
                if self.is_local(target) {
                    // Another node claims one of our addresses.
                    counters.nd_conflicts += 1;
                    return Ok(Ipv6Action::Consumed);
                }
                // §7.2.5: only an entry we have is updated, as the
                // Solicited and Override flags say.
                let flags = icmp.get(4).copied().unwrap_or(0);
                let (solicited, override_) = (flags & NA_SOLICITED != 0, flags & NA_OVERRIDE != 0);
                self.cache
                    .advertised(target, lladdr, solicited, override_, now);
                Ok(Ipv6Action::Consumed)
            }
            (ICMP_PACKET_TOO_BIG, 0) => too_big(icmp, |a| self.is_local(a), counters),
            (MLD_QUERY, 0) => {
                // RFC 3810 §5.1.14: from a link-local router, not
                // forwarded (hop limit 1); then report every group.
                if !is_link_local(src) || hop_limit != 1 || icmp.len() < 24 {
                    return Err(DropReason::Malformed);
                }
                self.query_received(now, u16::from_be_bytes([icmp[4], icmp[5]]));
                Ok(Ipv6Action::Consumed)
            }
            _ => Err(DropReason::UnsupportedProtocol),
        }
    }

    /// Makes this port report its groups unsolicited, [`ROBUSTNESS`] times
    /// a second apart from the next transmit (RFC 3810 §6.1), as an
    /// interface joining them does, and check each address once for
    /// duplicates; queries are answered whether or not this is called.
    /// One engine per port does it (the others would only repeat it).
    pub fn join_groups(&mut self) {
        self.reports_left = ROBUSTNESS;
        self.report_at = Instant::ZERO;
        // With the first reports, one duplicate address check of each
        // address (RFC 4862 §5.4; the addresses are used meanwhile).
        self.dad = self.unicast().collect();
        self.dad.reverse(); // taken from the back: link-local first
    }

    /// A general query whose Maximum Response Code is `code` (RFC 3810
    /// §5.1.3): the answer goes after a random delay within the Maximum
    /// Response Delay, unless one is already due sooner (§6.2: one answer
    /// for several queries); and never sooner than [`MIN_REPORT_GAP`]
    /// after the last report, whatever the queries ask (a flood of
    /// queries with no delay would each draw a report up to 18 times
    /// their size).
    fn query_received(&mut self, now: Instant, code: u16) {
        let max_ms = if code < 0x8000 {
            u64::from(code)
        } else {
            let (exp, mant) = (u32::from((code >> 12) & 7), u64::from(code & 0xfff));
            (mant | 0x1000) << (exp + 3)
        };
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let delay = Duration::from_millis(self.rng % (max_ms + 1));
        let at = (now + delay).max(self.last_report + MIN_REPORT_GAP);
        if self.reports_left == 0 {
            self.reports_left = 1;
            self.report_at = at;
        } else if at < self.report_at {
            self.report_at = at;
        }
    }

    /// Whether a report (or the rest of one) is due at `now`.
    pub fn report_pending(&self, now: Instant) -> bool {
        self.reports_left > 0 && now >= self.report_at
    }

    /// Our unicast addresses: the link-local one, then the configured.
    pub fn unicast(&self) -> impl Iterator<Item = Ipv6Addr> + '_ {
        std::iter::once(self.link_local)
            .chain(self.cfg.addresses.iter().map(|&(a, _)| a))
            .chain(self.extra.iter().copied())
    }

    /// Writes the next frame of the report due at `now` into `frame`,
    /// which must hold [`MAX_REPORT_GROUPS`] records; its length, or
    /// `None` when none is due. A report of more groups than a frame
    /// holds goes as several frames (RFC 3810 §5.2.15), written by calls
    /// in turn; once its last is written the next report waits a second.
    pub fn next_report(&mut self, now: Instant, frame: &mut [u8]) -> Option<usize> {
        if !self.report_pending(now) {
            return None;
        }
        let from = self.report_from.min(self.groups.len());
        let len = self.write_report(frame, from);
        self.report_from = from + MAX_REPORT_GROUPS;
        if self.report_from >= self.groups.len() {
            self.report_from = 0;
            self.reports_left -= 1;
            self.report_at = now + MIN_REPORT_GAP;
            self.last_report = now;
        }
        Some(len)
    }

    /// Writes an MLDv2 Report of the groups from the `from`th into
    /// `frame` (RFC 3810 §5.2: from the link-local address to ff02::16,
    /// hop limit 1, a Router Alert option; `MODE_IS_EXCLUDE` with no
    /// sources: listening): at most as many as a 1,500-byte packet holds;
    /// `frame` must hold the result. Returns the frame's length.
    fn write_report(&self, frame: &mut [u8], from: usize) -> usize {
        let groups = self.groups.get(from..).unwrap_or_default();
        let groups = &groups[..groups.len().min(MAX_REPORT_GROUPS)];
        let count = groups.len();
        let icmp_len = 8 + 20 * count;
        let len = 14 + HEADER_LEN + 8 + icmp_len;
        let frame = &mut frame[..len];
        frame.fill(0);
        frame[..6].copy_from_slice(multicast_mac(MLD_REPORTS).as_bytes());
        frame[6..12].copy_from_slice(self.mac.as_bytes());
        frame[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        let (ip, rest) = frame[14..].split_at_mut(HEADER_LEN);
        let hop_by_hop = IpProtocol::HopByHop;
        write_header(
            ip,
            self.link_local,
            MLD_REPORTS,
            8 + icmp_len,
            hop_by_hop,
            1,
        );
        // Hop-by-hop: Router Alert (MLD), then PadN of two bytes.
        rest[..8].copy_from_slice(&[NEXT_ICMPV6, 0, 5, 2, 0, 0, 1, 0]);
        let icmp = &mut rest[8..];
        icmp[0] = MLD_REPORT;
        // Bounded by MAX_REPORT_GROUPS.
        icmp[6..8].copy_from_slice(&(count as u16).to_be_bytes());
        for (record, group) in icmp[8..].chunks_exact_mut(20).zip(groups) {
            record[0] = MODE_IS_EXCLUDE;
            record[4..20].copy_from_slice(&group.octets());
        }
        let sum = crate::checksum::icmpv6(self.link_local.octets(), MLD_REPORTS.octets(), icmp);
        icmp[2..4].copy_from_slice(&sum.to_be_bytes());
        len
    }
}

impl Ipv6Host {
    /// Answers the refused packet in `pkt[..end]` with a Parameter
    /// Problem in place (RFC 4443 §3.4: as much of the packet as fits in
    /// 1,280 bytes), unless RFC 4443 §2.4(e) forbids one (about an ICMPv6
    /// error; from an unspecified or multicast source; to a group, by IP or
    /// link-layer address, but for an option that asks even then) or the
    /// rate limit (§2.4(f)) is spent. The packet is counted as dropped for
    /// its reason either way.
    fn parameter_problem(
        &mut self,
        now: Instant,
        pkt: &mut [u8],
        refused: Refused,
        counters: &mut crate::stats::Counters,
    ) -> Result<Ipv6Action, DropReason> {
        let Refused {
            end,
            problem,
            reason,
            eth_group,
        } = refused;
        let ip = Ipv6Packet::new_unchecked(&pkt[..HEADER_LEN]);
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let to_group = dst.is_multicast() || eth_group;
        let allowed = !src.is_unspecified()
            && !src.is_multicast()
            && (!to_group || problem.even_to_groups)
            && !carries_icmpv6_error(pkt, end);
        let room = pkt.len().min(MIN_MTU).saturating_sub(ERROR_HEADROOM);
        if !allowed || room < HEADER_LEN {
            return Err(reason);
        }
        let Some(hop) = self.next_hop(src) else {
            return Err(reason);
        };
        if !self.errors.take(now) {
            counters.icmpv6_errors_limited += 1;
            return Err(reason);
        }
        let from = if self.is_local(dst) {
            dst
        } else {
            self.source_for(src)
        };
        let quoted = end.min(room);
        pkt.copy_within(..quoted, HEADER_LEN + 8);
        let len = 8 + quoted;
        write_header(pkt, from, src, len, IpProtocol::Icmpv6, 64);
        let icmp = &mut pkt[HEADER_LEN..HEADER_LEN + len];
        icmp[..4].copy_from_slice(&[ICMP_PARAMETER_PROBLEM, problem.code, 0, 0]);
        // Offsets are within a packet of under 64 KiB.
        icmp[4..8].copy_from_slice(&(problem.pointer as u32).to_be_bytes());
        let sum = crate::checksum::icmpv6(from.octets(), src.octets(), icmp);
        icmp[2..4].copy_from_slice(&sum.to_be_bytes());
        counters.icmpv6_errors += 1;
        counters.drop(reason);
        Ok(Ipv6Action::ReplyVia {
            hop,
            len: HEADER_LEN + len,
        })
    }
}

/// A token bucket for the ICMPv6 errors of one port (RFC 4443 §2.4(f)).
#[derive(Debug)]
struct ErrorBudget {
    tokens: u32,
    refilled: Instant,
}

/// ICMPv6 errors a port sends in a burst, and a second on average.
const ERROR_BURST: u32 = 10;
const ERRORS_PER_SECOND: u32 = 100;

impl ErrorBudget {
    fn new() -> Self {
        Self {
            tokens: ERROR_BURST,
            refilled: Instant::ZERO,
        }
    }

    /// Takes a token if there is one, refilling first.
    fn take(&mut self, now: Instant) -> bool {
        let step = Duration::from_secs(1) / ERRORS_PER_SECOND;
        while self.tokens < ERROR_BURST && now.saturating_since(self.refilled) >= step {
            self.tokens += 1;
            self.refilled = self.refilled + step;
        }
        if self.tokens == ERROR_BURST {
            self.refilled = now;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

fn addr_at(pkt: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&pkt[at..at + 16]);
    Ipv6Addr::from(a)
}

fn is_solicited_node(a: Ipv6Addr) -> bool {
    a.octets()[..13] == solicited_node(Ipv6Addr::UNSPECIFIED).octets()[..13]
}

/// Writes an IPv6 header (traffic class and flow label zero).
pub(crate) fn write_header(
    ip: &mut [u8],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    payload_len: usize,
    next: IpProtocol,
    hops: u8,
) {
    let mut ip = Ipv6Packet::new_unchecked(&mut ip[..HEADER_LEN]);
    ip.set_version(6);
    ip.set_traffic_class(0);
    ip.set_flow_label(0);
    // Callers' payloads are under 64 KiB (checked by the TCP writer; at
    // most a received packet's for the others).
    ip.set_payload_len(payload_len as u16);
    ip.set_next_header(next);
    ip.set_hop_limit(hops);
    ip.set_src_addr(src);
    ip.set_dst_addr(dst);
}

/// A Packet Too Big (RFC 4443 §3.2): the next link's MTU, then as much
/// of the invoking packet as fits. Taken when that packet is one of ours
/// (its source one of our addresses) carrying TCP right after its header
/// (ours never have extension headers); others are counted and dropped.
fn too_big(
    icmp: &[u8],
    is_local: impl Fn(Ipv6Addr) -> bool,
    counters: &mut crate::stats::Counters,
) -> Result<Ipv6Action, DropReason> {
    let quoted = icmp.get(8..).unwrap_or(&[]);
    // The quoted header and the TCP ports and sequence number.
    if quoted.len() < HEADER_LEN + 8 || quoted[0] >> 4 != 6 {
        return Err(DropReason::Malformed);
    }
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&quoted[at..at + 16]);
        Ipv6Addr::from(a)
    };
    let (local, remote) = (addr(8), addr(24));
    if !is_local(local) || quoted[6] != NEXT_TCP {
        return Err(DropReason::NotForUs);
    }
    counters.icmpv6_too_big += 1;
    let be16 = |at: usize| u16::from_be_bytes([quoted[at], quoted[at + 1]]);
    let tcp = HEADER_LEN;
    Ok(Ipv6Action::TooBig {
        key: crate::tcp::FlowKey {
            local,
            local_port: be16(tcp),
            remote,
            remote_port: be16(tcp + 2),
        },
        seq: u32::from_be_bytes([
            quoted[tcp + 4],
            quoted[tcp + 5],
            quoted[tcp + 6],
            quoted[tcp + 7],
        ]),
        // RFC 8201 §4: never below the minimum link MTU.
        mtu: u32::from_be_bytes([icmp[4], icmp[5], icmp[6], icmp[7]]).max(MIN_MTU as u32),
    })
}

/// Why a packet's headers were refused: the drop, and the Parameter
/// Problem (RFC 4443 §3.4) it asks for, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Refusal {
    reason: DropReason,
    problem: Option<Problem>,
}

/// An ICMPv6 Parameter Problem to send: its code, the offset of the field
/// at fault, and whether it goes even to a packet sent to a group (an
/// option of type `10xxxxxx`, RFC 8200 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Problem {
    code: u8,
    pointer: usize,
    even_to_groups: bool,
}

/// Parameter Problem codes (RFC 4443 §3.4).
const PROBLEM_FIELD: u8 = 0;
const PROBLEM_NEXT_HEADER: u8 = 1;
const PROBLEM_OPTION: u8 = 2;

impl From<DropReason> for Refusal {
    fn from(reason: DropReason) -> Self {
        Self {
            reason,
            problem: None,
        }
    }
}

fn problem(reason: DropReason, code: u8, pointer: usize) -> Refusal {
    Refusal {
        reason,
        problem: Some(Problem {
            code,
            pointer,
            even_to_groups: false,
        }),
    }
}

/// A packet refused with a Parameter Problem to answer: where it ends,
/// the problem, the drop reason, and whether it came to a link-layer
/// group.
struct Refused {
    end: usize,
    problem: Problem,
    reason: DropReason,
    eth_group: bool,
}

/// Whether `pkt[..end]` carries an ICMPv6 error message (type below 128)
/// or a Redirect after whatever extension headers it has: RFC 4443
/// §2.4(e.1, e.2) answers neither with an error. Headers are skipped by their lengths only (the
/// packet is being refused for one of them); one that runs past `end`
/// ends the walk.
fn carries_icmpv6_error(pkt: &[u8], end: usize) -> bool {
    let Some(&first) = pkt.get(6) else {
        return false;
    };
    let (mut next, mut at) = (first, HEADER_LEN);
    for _ in 0..=MAX_EXTENSION_HEADERS {
        match next {
            NEXT_HOP_BY_HOP | NEXT_DEST_OPTS | NEXT_ROUTING => {
                let (Some(&n), Some(&l)) = (pkt.get(at), pkt.get(at + 1)) else {
                    return false;
                };
                next = n;
                at += (usize::from(l) + 1) * 8;
            }
            // An atomic fragment's header (RFC 6946: the packet is taken
            // as a whole): 8 bytes, the next header first.
            NEXT_FRAGMENT => {
                let Some(&n) = pkt.get(at) else {
                    return false;
                };
                next = n;
                at += 8;
            }
            NEXT_ICMPV6 => {
                return at < end && pkt.get(at).is_some_and(|&t| t < 128 || t == ICMP_REDIRECT)
            }
            _ => return false,
        }
    }
    false
}

/// Walks the extension headers of `pkt[..end]` (RFC 8200 §4): the upper
/// layer's protocol and offset, or why the packet is dropped.
fn upper_layer(pkt: &[u8], end: usize) -> Result<(u8, usize), Refusal> {
    let mut next = pkt[6];
    // Where `next` was read from: a Parameter Problem points there.
    let mut next_at = 6;
    let mut at = HEADER_LEN;
    for i in 0..=MAX_EXTENSION_HEADERS {
        match next {
            NEXT_HOP_BY_HOP | NEXT_DEST_OPTS | NEXT_ROUTING => {
                if i == MAX_EXTENSION_HEADERS {
                    return Err(DropReason::BadExtensionHeader.into());
                }
                // §4.3: hop-by-hop options only right after the header;
                // elsewhere the type is not one we take there.
                if next == NEXT_HOP_BY_HOP && i != 0 {
                    let code = PROBLEM_NEXT_HEADER;
                    return Err(problem(DropReason::BadExtensionHeader, code, next_at));
                }
                if at + 8 > end {
                    return Err(DropReason::Malformed.into());
                }
                let len = (usize::from(pkt[at + 1]) + 1) * 8;
                if at + len > end {
                    return Err(DropReason::Malformed.into());
                }
                let header = &pkt[at..at + len];
                if next == NEXT_ROUTING {
                    // §4.4: we know no routing type (type 0 is deprecated,
                    // RFC 5095); with segments left it must be refused,
                    // pointing at the type.
                    if header[3] != 0 {
                        let code = PROBLEM_FIELD;
                        return Err(problem(DropReason::BadExtensionHeader, code, at + 2));
                    }
                } else {
                    check_options(&header[2..], at + 2)?;
                }
                next = header[0];
                next_at = at;
                at += len;
            }
            NEXT_FRAGMENT => {
                // RFC 6946 §4: an atomic fragment (offset 0, no more
                // fragments) is processed on its own, as if it had no
                // Fragment header; a real fragment is dropped (we do not
                // reassemble).
                let Some(header) = pkt.get(at..at + 8).filter(|_| at + 8 <= end) else {
                    return Err(DropReason::Malformed.into());
                };
                if !is_atomic_fragment(header) {
                    return Err(DropReason::Fragment.into());
                }
                next = header[0];
                next_at = at;
                at += 8;
            }
            NEXT_NONE => return Err(DropReason::UnsupportedProtocol.into()),
            NEXT_ICMPV6 | NEXT_TCP => return Ok((next, at)),
            // AH, ESP, Mobility, HIP, Shim6, experimental: extension
            // headers we do not take.
            50 | 51 | 135 | 139 | 140 | 253 | 254 => {
                let code = PROBLEM_NEXT_HEADER;
                return Err(problem(DropReason::BadExtensionHeader, code, next_at));
            }
            // An upper layer we do not carry (UDP among others).
            _ => {
                let code = PROBLEM_NEXT_HEADER;
                return Err(problem(DropReason::UnsupportedProtocol, code, next_at));
            }
        }
    }
    Err(DropReason::BadExtensionHeader.into())
}

/// Whether a Fragment header (RFC 8200 §4.5) is of an atomic fragment
/// (RFC 6946): offset 0 and the M flag clear, the whole packet in one.
pub(crate) fn is_atomic_fragment(header: &[u8]) -> bool {
    header.len() >= 4 && u16::from_be_bytes([header[2], header[3]]) & 0xfff9 == 0
}

/// Checks the options of a hop-by-hop or destination options header
/// (RFC 8200 §4.2), found at offset `base` of the packet: padding is
/// skipped, and so is an option whose type's two high bits are `00`; we
/// know no other option, so `01` drops the packet silently and `10`/`11`
/// answer with a Parameter Problem pointing at the option's type.
fn check_options(mut opts: &[u8], base: usize) -> Result<(), Refusal> {
    let mut at = base;
    while let Some(&kind) = opts.first() {
        if kind == 0 {
            opts = &opts[1..]; // Pad1
            at += 1;
            continue;
        }
        let Some(&len) = opts.get(1) else {
            return Err(DropReason::Malformed.into());
        };
        let size = 2 + usize::from(len);
        if size > opts.len() {
            return Err(DropReason::Malformed.into());
        }
        match (kind, kind >> 6) {
            (1, _) | (_, 0) => {}
            (_, 1) => return Err(DropReason::BadExtensionHeader.into()),
            (_, action) => {
                return Err(Refusal {
                    reason: DropReason::BadExtensionHeader,
                    problem: Some(Problem {
                        code: PROBLEM_OPTION,
                        pointer: at,
                        even_to_groups: action == 2,
                    }),
                })
            }
        }
        opts = &opts[size..];
        at += size;
    }
    Ok(())
}

/// Checks a Neighbor Solicitation or Advertisement (RFC 4861 §7.1): hop
/// limit 255, at least 24 bytes, a unicast target, options of non-zero
/// length. Returns the target and the link-layer address option of kind
/// `option` (source for solicitations, target for advertisements).
fn nd_message(
    icmp: &[u8],
    hop_limit: u8,
    option: u8,
) -> Result<(Ipv6Addr, Option<EthernetAddress>), DropReason> {
    if hop_limit != 255 || icmp.len() < 24 {
        return Err(DropReason::Malformed);
    }
    let target = addr_at(icmp, 8);
    if target.is_multicast() {
        return Err(DropReason::Malformed);
    }
    let mut lladdr = None;
    let mut opts = &icmp[24..];
    while opts.len() >= 2 {
        let size = usize::from(opts[1]) * 8;
        if size == 0 || size > opts.len() {
            return Err(DropReason::Malformed);
        }
        if opts[0] == option && size == 8 {
            let mut mac = [0u8; 6];
            mac.copy_from_slice(&opts[2..8]);
            let mac = EthernetAddress(mac);
            if !mac.is_unicast() {
                return Err(DropReason::Malformed);
            }
            lladdr = Some(mac);
        }
        opts = &opts[size..];
    }
    if !opts.is_empty() {
        return Err(DropReason::Malformed);
    }
    Ok((target, lladdr))
}
