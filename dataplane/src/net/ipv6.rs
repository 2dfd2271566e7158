//! IPv6 on one port, as a host (RFC 8200, RFC 4291): a link-local address
//! made from the port's MAC and statically configured ones, Neighbor
//! Discovery (RFC 4861: solicitations answered, advertisements learned, our
//! own solicitations for next hops), ICMPv6 echo (RFC 4443). Extension
//! headers are walked within the packet's bounds; fragments, unknown
//! extension headers and options whose type says "discard" are dropped and
//! counted. TCP over IPv6 is not carried yet: such segments are counted as
//! `unsupported_protocol`. No ICMPv6 error messages are sent, no duplicate
//! address detection is run (addresses are configured), and Router
//! Advertisements are not taken (the gateway is configured).
//! docs/architecture.md, "net".

use std::net::Ipv6Addr;

use smoltcp::wire::EthernetAddress;

use super::arp::{ArpLookup, NdCache, ND_REACHABLE_TIME};
use crate::stats::DropReason;
use crate::time::Instant;

/// IPv6 header length.
pub const HEADER_LEN: usize = 40;
/// A Neighbor Solicitation or Advertisement with one link-layer option.
const ND_LEN: usize = 24 + 8;
/// The longest frame this module writes in place of a received one: an
/// advertisement answering a solicitation that carried no option.
pub const ND_FRAME_LEN: usize = 14 + HEADER_LEN + ND_LEN;
/// Extension headers walked before giving up on a packet.
const MAX_EXTENSION_HEADERS: usize = 8;
/// Neighbours remembered per port.
const ND_ENTRIES: usize = 4096;
/// Most solicitations queued for sending between two engine iterations.
const MAX_PENDING_SOLICITATIONS: usize = 16;

const NEXT_HOP_BY_HOP: u8 = 0;
const NEXT_ROUTING: u8 = 43;
const NEXT_FRAGMENT: u8 = 44;
const NEXT_ICMPV6: u8 = 58;
const NEXT_NONE: u8 = 59;
const NEXT_DEST_OPTS: u8 = 60;

const ICMP_ECHO_REQUEST: u8 = 128;
const ICMP_ECHO_REPLY: u8 = 129;
const ICMP_NEIGHBOR_SOLICIT: u8 = 135;
const ICMP_NEIGHBOR_ADVERT: u8 = 136;

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
}

impl Ipv6Host {
    pub fn new(mac: EthernetAddress, cfg: Ipv6Config) -> Self {
        Self {
            mac,
            link_local: link_local(mac),
            cfg,
            cache: NdCache::with_reachable_time(ND_ENTRIES, ND_REACHABLE_TIME),
            probes: Vec::with_capacity(MAX_PENDING_SOLICITATIONS),
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
        a == self.link_local || self.cfg.addresses.iter().any(|&(x, _)| x == a)
    }

    /// Whether a packet to `a` is for this port: a unicast address of
    /// ours, all nodes, or the solicited-node group of one of ours.
    fn accepts(&self, a: Ipv6Addr) -> bool {
        self.is_local(a)
            || a == ALL_NODES
            || (a.octets()[..13] == solicited_node(Ipv6Addr::UNSPECIFIED).octets()[..13]
                && (a == solicited_node(self.link_local)
                    || self
                        .cfg
                        .addresses
                        .iter()
                        .any(|&(x, _)| a == solicited_node(x))))
    }

    /// Whether an Ethernet frame to `mac` may be for this port: the
    /// all-nodes group or a solicited-node group of ours.
    pub fn accepts_mac(&self, mac: EthernetAddress) -> bool {
        mac == multicast_mac(ALL_NODES)
            || mac == multicast_mac(solicited_node(self.link_local))
            || self
                .cfg
                .addresses
                .iter()
                .any(|&(x, _)| mac == multicast_mac(solicited_node(x)))
    }

    /// The next hop towards `dst`: itself when link-local or on one of the
    /// prefixes, else the gateway.
    pub fn next_hop(&self, dst: Ipv6Addr) -> Option<Ipv6Addr> {
        if is_link_local(dst)
            || self
                .cfg
                .addresses
                .iter()
                .any(|&(a, l)| on_prefix(a, dst, l))
        {
            Some(dst)
        } else {
            self.cfg.gateway
        }
    }

    /// Our source address towards `dst`: a configured address on its
    /// prefix, else the link-local one.
    fn source_for(&self, dst: Ipv6Addr) -> Ipv6Addr {
        self.cfg
            .addresses
            .iter()
            .find(|&&(a, l)| !is_link_local(dst) && on_prefix(a, dst, l))
            .map_or(self.link_local, |&(a, _)| a)
    }

    /// The MAC of neighbour `hop`, queueing a solicitation on a miss (paced
    /// per address, as ARP requests are).
    pub fn resolve(&mut self, hop: Ipv6Addr, now: Instant) -> Option<EthernetAddress> {
        let room = self.probes.len() < MAX_PENDING_SOLICITATIONS;
        match self.cache.lookup(hop, now, room) {
            ArpLookup::Hit(mac) => Some(mac),
            ArpLookup::Stale { mac, probe } => {
                if probe {
                    self.probes.push(hop);
                }
                Some(mac)
            }
            ArpLookup::Miss { probe } => {
                if probe {
                    self.probes.push(hop);
                }
                None
            }
        }
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
        let group = solicited_node(target);
        let frame = &mut frame[..ND_FRAME_LEN];
        frame.fill(0);
        frame[..6].copy_from_slice(multicast_mac(group).as_bytes());
        frame[6..12].copy_from_slice(self.mac.as_bytes());
        frame[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        let src = self.source_for(target);
        let (ip, icmp) = frame[14..].split_at_mut(HEADER_LEN);
        write_header(ip, src, group, ND_LEN, 255);
        icmp[0] = ICMP_NEIGHBOR_SOLICIT;
        icmp[8..24].copy_from_slice(&target.octets());
        icmp[24] = OPT_SOURCE_LLADDR;
        icmp[25] = 1;
        icmp[26..32].copy_from_slice(self.mac.as_bytes());
        let sum = crate::checksum::icmpv6(src.octets(), group.octets(), icmp);
        icmp[2..4].copy_from_slice(&sum.to_be_bytes());
        ND_FRAME_LEN
    }

    /// Handles the IPv6 packet in the first `received` bytes of `pkt` (the
    /// frame's payload as received, Ethernet padding included) that came
    /// from `eth_src`. Replies are written in place over `pkt`, which must
    /// be at least [`ND_FRAME_LEN`]` - 14` bytes long for an advertisement
    /// to fit (the caller makes room past what was received).
    pub fn process(
        &mut self,
        now: Instant,
        eth_src: EthernetAddress,
        pkt: &mut [u8],
        received: usize,
        counters: &mut crate::stats::Counters,
    ) -> Result<Ipv6Action, DropReason> {
        let received = received.min(pkt.len());
        if received < HEADER_LEN || pkt[0] >> 4 != 6 {
            return Err(DropReason::Malformed);
        }
        let payload_len = usize::from(u16::from_be_bytes([pkt[4], pkt[5]]));
        let end = HEADER_LEN + payload_len;
        if end > received {
            return Err(DropReason::Malformed);
        }
        let hop_limit = pkt[7];
        let src = addr_at(pkt, 8);
        let dst = addr_at(pkt, 24);
        if !self.accepts(dst) {
            return Err(DropReason::NotForUs);
        }
        if src.is_multicast() {
            return Err(DropReason::Malformed);
        }
        let (next, start) = upper_layer(pkt, end)?;
        // TCP over IPv6 is not carried yet.
        if next != NEXT_ICMPV6 {
            return Err(DropReason::UnsupportedProtocol);
        }
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
                write_header(pkt, from, src, len, 64);
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
                if let Some(mac) = lladdr {
                    // §7.2.3: the sender's entry is created or updated.
                    self.cache.learn(src, mac, now, true);
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
                write_header(pkt, target, to_ip, ND_LEN, 255);
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
                // §7.2.5: only an entry we have is updated.
                if let Some(mac) = lladdr {
                    self.cache.learn(target, mac, now, false);
                }
                Ok(Ipv6Action::Consumed)
            }
            _ => Err(DropReason::UnsupportedProtocol),
        }
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
fn write_header(ip: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr, payload_len: usize, hops: u8) {
    ip[..4].copy_from_slice(&[0x60, 0, 0, 0]);
    // Callers' payloads are at most a received packet's, under 64 KiB.
    ip[4..6].copy_from_slice(&(payload_len as u16).to_be_bytes());
    ip[6] = NEXT_ICMPV6;
    ip[7] = hops;
    ip[8..24].copy_from_slice(&src.octets());
    ip[24..40].copy_from_slice(&dst.octets());
}

/// Walks the extension headers of `pkt[..end]` (RFC 8200 §4): the upper
/// layer's protocol and offset, or why the packet is dropped.
fn upper_layer(pkt: &[u8], end: usize) -> Result<(u8, usize), DropReason> {
    let mut next = pkt[6];
    let mut at = HEADER_LEN;
    for i in 0..=MAX_EXTENSION_HEADERS {
        match next {
            NEXT_HOP_BY_HOP | NEXT_DEST_OPTS | NEXT_ROUTING => {
                // §4.3: hop-by-hop options only right after the header.
                if i == MAX_EXTENSION_HEADERS || next == NEXT_HOP_BY_HOP && i != 0 {
                    return Err(DropReason::BadExtensionHeader);
                }
                if at + 8 > end {
                    return Err(DropReason::Malformed);
                }
                let len = (usize::from(pkt[at + 1]) + 1) * 8;
                if at + len > end {
                    return Err(DropReason::Malformed);
                }
                let header = &pkt[at..at + len];
                if next == NEXT_ROUTING {
                    // §4.4: we are no router; a header with segments left
                    // asks us to forward.
                    if header[3] != 0 {
                        return Err(DropReason::BadExtensionHeader);
                    }
                } else {
                    check_options(&header[2..])?;
                }
                next = header[0];
                at += len;
            }
            NEXT_FRAGMENT => return Err(DropReason::Fragment),
            NEXT_NONE => return Err(DropReason::UnsupportedProtocol),
            // AH, ESP, Mobility, HIP, Shim6, experimental: extension
            // headers we do not take.
            50 | 51 | 135 | 139 | 140 | 253 | 254 => return Err(DropReason::BadExtensionHeader),
            upper => return Ok((upper, at)),
        }
    }
    Err(DropReason::BadExtensionHeader)
}

/// Checks the options of a hop-by-hop or destination options header
/// (RFC 8200 §4.2): padding is skipped, and so is an option whose type's
/// two high bits say so; any other (we know none) drops the packet.
fn check_options(mut opts: &[u8]) -> Result<(), DropReason> {
    while let Some(&kind) = opts.first() {
        if kind == 0 {
            opts = &opts[1..]; // Pad1
            continue;
        }
        let Some(&len) = opts.get(1) else {
            return Err(DropReason::Malformed);
        };
        let size = 2 + usize::from(len);
        if size > opts.len() {
            return Err(DropReason::Malformed);
        }
        if kind != 1 && kind >> 6 != 0 {
            return Err(DropReason::BadExtensionHeader);
        }
        opts = &opts[size..];
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
