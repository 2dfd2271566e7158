//! The Toeplitz hash NICs use for RSS, in software: the engine picks the
//! source port of a connection it opens so that the replies hash to its
//! own queue (docs/architecture.md, docs/scaling.md: share-nothing engines).

use smoltcp::wire::EthernetAddress;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Toeplitz hash of `input` under `key` (`key` at least `input.len() + 4`
/// bytes).
pub fn hash(key: &[u8], input: &[u8]) -> u32 {
    let mut result = 0u32;
    // The 32-bit window of the key starting at the current input bit.
    let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    for (i, &byte) in input.iter().enumerate() {
        let next = key.get(i + 4).copied().unwrap_or(0);
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                result ^= window;
            }
            window = (window << 1) | u32::from((next >> (7 - bit)) & 1);
        }
    }
    result
}

/// The hash a NIC computes for a TCP/IPv4 segment from `src:sport` to
/// `dst:dport` (RSS input: source address, destination address, source
/// port, destination port).
pub fn tcp4(key: &[u8], src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) -> u32 {
    let mut input = [0u8; 12];
    input[..4].copy_from_slice(&src.octets());
    input[4..8].copy_from_slice(&dst.octets());
    input[8..10].copy_from_slice(&sport.to_be_bytes());
    input[10..].copy_from_slice(&dport.to_be_bytes());
    hash(key, &input)
}

/// The hash a NIC computes for a TCP/IPv6 segment (RSS input: source
/// address, destination address, source port, destination port; no
/// extension headers hashed). `key` at least 40 bytes.
pub fn tcp6(key: &[u8], src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16) -> u32 {
    hash(key, &tcp6_input(src, dst, sport, dport))
}

fn tcp6_input(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16) -> [u8; 36] {
    let mut input = [0u8; 36];
    input[..16].copy_from_slice(&src.octets());
    input[16..32].copy_from_slice(&dst.octets());
    input[32..34].copy_from_slice(&sport.to_be_bytes());
    input[34..].copy_from_slice(&dport.to_be_bytes());
    input
}

/// Bytes of the longest hashed input: a TCP/IPv6 4-tuple.
const MAX_INPUT: usize = 36;

/// The Toeplitz hash of a TCP 4-tuple by table lookup: a lookup and XOR
/// per input byte (12 for IPv4, 36 for IPv6) instead of 8 bit steps, for
/// hashing every received frame (software RSS).
#[derive(Debug, Clone)]
pub struct Toeplitz {
    /// `table[i][b]`: what byte `b` at input position `i` contributes.
    /// IPv4 tuples use the first 12 rows only.
    table: Box<[[u32; 256]; MAX_INPUT]>,
}

impl Toeplitz {
    /// The table for `key` (at least 16 bytes; 40 for IPv6 tuples).
    pub fn new(key: &[u8]) -> Self {
        let mut table = Box::new([[0u32; 256]; MAX_INPUT]);
        for (i, row) in table.iter_mut().enumerate() {
            for (b, slot) in row.iter_mut().enumerate() {
                let mut input = [0u8; MAX_INPUT];
                input[i] = b as u8;
                *slot = hash(key, &input[..=i]);
            }
        }
        Self { table }
    }

    /// As [`tcp6`].
    pub fn tcp6(&self, src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16) -> u32 {
        tcp6_input(src, dst, sport, dport)
            .iter()
            .zip(self.table.iter())
            .fold(0, |h, (&b, row)| h ^ row[usize::from(b)])
    }

    /// As [`tcp4`].
    #[inline]
    pub fn tcp4(&self, src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) -> u32 {
        let mut input = [0u8; 12];
        input[..4].copy_from_slice(&src.octets());
        input[4..8].copy_from_slice(&dst.octets());
        input[8..10].copy_from_slice(&sport.to_be_bytes());
        input[10..].copy_from_slice(&dport.to_be_bytes());
        input
            .iter()
            .zip(self.table.iter())
            .fold(0, |h, (&b, row)| h ^ row[usize::from(b)])
    }
}

/// What a received frame is, for software steering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameClass {
    /// An unfragmented TCP segment (IPv4, or IPv6 behind no extension
    /// headers but hop-by-hop, destination options, routing ones and an
    /// atomic fragment's) and its flow's hash.
    Tcp(u32),
    /// ARP, or an IPv6 Neighbor Solicitation or Advertisement (without
    /// extension headers): every engine learns from it.
    Neighbor,
    /// Anything else (ICMP, fragments, other protocols, malformed): handled
    /// where it arrived.
    Other,
}

/// Classifies an Ethernet frame (no VLAN tags) and hashes TCP flows.
pub fn classify(frame: &[u8], t: &Toeplitz) -> FrameClass {
    // An 802.1Q tag is looked past: a VLAN's flows are hashed alike.
    let (at, _) = super::vlan::peek(frame);
    let Some(ty) = frame.get(at..at + 2) else {
        return FrameClass::Other;
    };
    match [ty[0], ty[1]] {
        [0x08, 0x06] => return FrameClass::Neighbor,
        [0x86, 0xdd] => return classify_ipv6(&frame[at + 2..], t),
        [0x08, 0x00] => {}
        _ => return FrameClass::Other,
    }
    let ip = &frame[at + 2..];
    if ip.len() >= 20 && ip[0] >> 4 == 4 && ip[9] == 1 {
        return classify_frag_needed(ip, t);
    }
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 6 {
        return FrameClass::Other;
    }
    // More fragments, or a fragment offset: not reassembled, not steered.
    if u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
        return FrameClass::Other;
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ihl < 20 || ip.len() < ihl + 4 {
        return FrameClass::Other;
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let sport = u16::from_be_bytes([ip[ihl], ip[ihl + 1]]);
    let dport = u16::from_be_bytes([ip[ihl + 2], ip[ihl + 3]]);
    FrameClass::Tcp(t.tcp4(src, dst, sport, dport))
}

/// An ICMP "fragmentation needed" quoting one of our TCP segments goes
/// to the engine of its flow, hashed as the flow's received segments are
/// (the quoted packet is ours: its addresses and ports swap); other ICMP
/// stays.
fn classify_frag_needed(ip: &[u8], t: &Toeplitz) -> FrameClass {
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let Some(icmp) = ip.get(ihl..).filter(|_| ihl >= 20) else {
        return FrameClass::Other;
    };
    let Some(q) = icmp
        .get(8..)
        .filter(|q| q.len() >= 20 && icmp[..2] == [3, 4])
    else {
        return FrameClass::Other;
    };
    let qihl = usize::from(q[0] & 0x0f) * 4;
    if q[0] >> 4 != 4 || q[9] != 6 || qihl < 20 || q.len() < qihl + 4 {
        return FrameClass::Other;
    }
    let ours = Ipv4Addr::new(q[12], q[13], q[14], q[15]);
    let theirs = Ipv4Addr::new(q[16], q[17], q[18], q[19]);
    let our_port = u16::from_be_bytes([q[qihl], q[qihl + 1]]);
    let their_port = u16::from_be_bytes([q[qihl + 2], q[qihl + 3]]);
    FrameClass::Tcp(t.tcp4(theirs, ours, their_port, our_port))
}

/// The flow hash, as that flow's plain segments are hashed, of a frame a
/// NIC's RSS hashes on its addresses alone, so that it lands on a queue
/// that need not be its flow's: an ICMP error quoting one of our TCP
/// segments (a "fragmentation needed", a Packet Too Big), or an IPv6 TCP
/// segment behind extension headers or in an atomic fragment. `None` for
/// any other frame (the NIC hashed it as its flow). For ports whose NIC
/// spreads flows.
pub fn address_hashed_flow(frame: &[u8], t: &Toeplitz) -> Option<u32> {
    let (at, _) = super::vlan::peek(frame);
    let ip = frame.get(at + 2..)?;
    let class = match frame.get(at..at + 2)? {
        [0x08, 0x00] if ip.len() >= 20 && ip[0] >> 4 == 4 && ip[9] == 1 => {
            classify_frag_needed(ip, t)
        }
        [0x86, 0xdd] if ip.len() > 40 && ip[6] == 58 && ip[40] == 2 => classify_ipv6(ip, t),
        // Hop-by-hop, routing, fragment, destination options: what
        // `classify_ipv6` walks to reach TCP.
        [0x86, 0xdd] if ip.len() > 40 && matches!(ip[6], 0 | 43 | 44 | 60) => classify_ipv6(ip, t),
        _ => return None,
    };
    match class {
        FrameClass::Tcp(h) => Some(h),
        _ => None,
    }
}

/// Whether `frame` is one every engine learns neighbours from (ARP, an
/// IPv6 Neighbor Solicitation or Advertisement), without hashing anything:
/// for ports whose NIC spreads flows (its RSS leaves these on one queue).
pub fn is_neighbor_frame(frame: &[u8]) -> bool {
    let (at, _) = super::vlan::peek(frame);
    let ip = at + 2;
    match frame.get(at..ip) {
        Some([0x08, 0x06]) => true,
        Some([0x86, 0xdd]) => {
            frame.len() > ip + 40 && frame[ip + 6] == 58 && matches!(frame[ip + 40], 135 | 136)
        }
        _ => false,
    }
}

/// Whether another engine could learn a neighbour from `frame` (one
/// [`is_neighbor_frame`] or [`classify`] found to be ARP or ND) received
/// on a port with MAC `ours`: sent to us (our MAC, broadcast or a
/// multicast group), and for ND with hop limit 255 (RFC 4861 §7.1: one
/// from off the link is dropped by every engine). Only such frames are
/// copied: a flood of others would cost every engine, not just one.
pub fn neighbor_frame_to_learn_from(frame: &[u8], ours: EthernetAddress) -> bool {
    let Some(dst) = frame.get(..6) else {
        return false;
    };
    if dst != ours.as_bytes() && dst[0] & 1 == 0 {
        return false; // another host's unicast
    }
    let (at, _) = super::vlan::peek(frame);
    match frame.get(at..at + 2) {
        Some([0x86, 0xdd]) => frame.get(at + 2 + 7) == Some(&255),
        Some(_) => true,
        None => false,
    }
}

/// An IPv6 packet: TCP is hashed as a NIC's RSS does, after whatever
/// hop-by-hop, destination options and routing headers the engine walks
/// to reach it (`ipv6::upper_layer`), so a segment with them goes where
/// its flow's others go; Neighbor Solicitations and Advertisements go to
/// every engine.
fn classify_ipv6(ip: &[u8], t: &Toeplitz) -> FrameClass {
    if ip.len() <= 40 || ip[0] >> 4 != 6 {
        return FrameClass::Other;
    }
    match (ip[6], ip[40]) {
        (58, 135 | 136) => return FrameClass::Neighbor,
        // A Packet Too Big quoting one of our TCP segments goes to the
        // engine of its flow: hashed as the flow's received segments are
        // (the quoted packet is ours, so its addresses and ports swap).
        (58, 2) if ip.len() >= 48 + 40 + 4 && ip[48] >> 4 == 6 && ip[48 + 6] == 6 => {
            let q = &ip[48..];
            let addr = |at: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&q[at..at + 16]);
                Ipv6Addr::from(a)
            };
            let ours = u16::from_be_bytes([q[40], q[41]]);
            let theirs = u16::from_be_bytes([q[42], q[43]]);
            return FrameClass::Tcp(t.tcp6(addr(24), addr(8), theirs, ours));
        }
        _ => {}
    }
    let (mut next, mut at) = (ip[6], 40);
    for _ in 0..=super::ipv6::MAX_EXTENSION_HEADERS {
        match next {
            6 => {
                let Some(ports) = ip.get(at..at + 4) else {
                    return FrameClass::Other;
                };
                let addr = |at: usize| {
                    let mut a = [0u8; 16];
                    a.copy_from_slice(&ip[at..at + 16]);
                    Ipv6Addr::from(a)
                };
                let sport = u16::from_be_bytes([ports[0], ports[1]]);
                let dport = u16::from_be_bytes([ports[2], ports[3]]);
                return FrameClass::Tcp(t.tcp6(addr(8), addr(24), sport, dport));
            }
            // Hop-by-hop, destination options, routing: skipped by length.
            0 | 60 | 43 => {
                let (Some(&n), Some(&len)) = (ip.get(at), ip.get(at + 1)) else {
                    return FrameClass::Other;
                };
                next = n;
                at += (usize::from(len) + 1) * 8;
            }
            // An atomic fragment (RFC 6946) is taken as if unfragmented.
            44 => match ip.get(at..at + 8) {
                Some(h) if super::ipv6::is_atomic_fragment(h) => {
                    next = h[0];
                    at += 8;
                }
                _ => return FrameClass::Other,
            },
            _ => return FrameClass::Other,
        }
    }
    FrameClass::Other
}

pub use crate::port::RssSteering;

#[cfg(test)]
mod tests {
    use super::*;

    /// Microsoft's RSS verification suite (the key and vectors of the
    /// "Verifying the RSS Hash Calculation" page), IPv4 with TCP ports.
    const MS_KEY: [u8; 40] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f,
        0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ];

    #[test]
    fn microsoft_vectors() {
        let v = |s: [u8; 4], sp, d: [u8; 4], dp, want: u32| {
            let got = tcp4(&MS_KEY, Ipv4Addr::from(s), Ipv4Addr::from(d), sp, dp);
            assert_eq!(got, want, "{s:?}:{sp} -> {d:?}:{dp}");
        };
        v(
            [66, 9, 149, 187],
            2794,
            [161, 142, 100, 80],
            1766,
            0x51cc_c178,
        );
        v(
            [199, 92, 111, 2],
            14230,
            [65, 69, 140, 83],
            4739,
            0xc626_b0ea,
        );
        v(
            [24, 19, 198, 95],
            12898,
            [12, 22, 207, 184],
            38024,
            0x5c2b_394a,
        );
        v(
            [38, 27, 205, 30],
            48228,
            [209, 142, 163, 6],
            2217,
            0xafc7_327f,
        );
        v(
            [153, 39, 163, 191],
            44251,
            [202, 188, 127, 2],
            1303,
            0x10e8_28a2,
        );
        // Addresses only (IPv4 RSS type).
        let ip = hash(&MS_KEY, &[66, 9, 149, 187, 161, 142, 100, 80]);
        assert_eq!(ip, 0x323e_8fc2);
    }

    /// Microsoft's RSS verification suite, IPv6 with TCP ports and
    /// addresses only.
    #[test]
    fn microsoft_ipv6_vectors() {
        let a = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        let cases = [
            (
                "3ffe:2501:200:1fff::7",
                2794,
                "3ffe:2501:200:3::1",
                1766,
                0x4020_7d3d,
                0x2cc1_8cd5,
            ),
            (
                "3ffe:501:8::260:97ff:fe40:efab",
                14230,
                "ff02::1",
                4739,
                0xdde5_1bbf,
                0x0f0c_461c,
            ),
            (
                "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
                44251,
                "fe80::200:f8ff:fe21:67cf",
                38024,
                0x02d1_feef,
                0x4b61_e985,
            ),
        ];
        let table = Toeplitz::new(&MS_KEY);
        for (src, sp, dst, dp, with_ports, addresses) in cases {
            let (src, dst) = (a(src), a(dst));
            assert_eq!(
                tcp6(&MS_KEY, src, dst, sp, dp),
                with_ports,
                "{src} -> {dst}"
            );
            assert_eq!(table.tcp6(src, dst, sp, dp), with_ports);
            let only = [src.octets(), dst.octets()].concat();
            assert_eq!(hash(&MS_KEY, &only), addresses, "{src} -> {dst}");
        }
    }

    /// `rte_softrss` on IPv6 tuples (`rte_ipv6_tuple`: each address as
    /// four host-order words, then the ports) agrees with ours and the
    /// table, for both keys.
    #[test]
    fn agrees_with_rte_softrss_on_ipv6() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let sym = crate::dpdk::SYMMETRIC_RSS_KEY;
        for key in [&MS_KEY[..], &sym[..]] {
            let table = Toeplitz::new(key);
            for _ in 0..5_000 {
                let src = Ipv6Addr::from((u128::from(next()) << 64) | u128::from(next()));
                let dst = Ipv6Addr::from((u128::from(next()) << 64) | u128::from(next()));
                let p = next();
                let (sp, dp) = (p as u16, (p >> 16) as u16);
                let mut words = Vec::with_capacity(9);
                for addr in [src, dst] {
                    for w in addr.octets().chunks_exact(4) {
                        words.push(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
                    }
                }
                words.push((u32::from(sp) << 16) | u32::from(dp));
                let dpdk = crate::dpdk::softrss(&words, key);
                let ours = tcp6(key, src, dst, sp, dp);
                assert_eq!(ours, dpdk, "{src}:{sp} -> {dst}:{dp}");
                assert_eq!(table.tcp6(src, dst, sp, dp), ours);
            }
        }
    }

    /// DPDK's own software Toeplitz (`rte_softrss`, the reference the
    /// NIC-side tests of DPDK use) agrees with ours and with the table, on
    /// Microsoft's vectors and 10 000 random tuples, for both keys.
    #[test]
    fn agrees_with_rte_softrss() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let sym = crate::dpdk::SYMMETRIC_RSS_KEY;
        for key in [&MS_KEY[..], &sym[..]] {
            let table = Toeplitz::new(key);
            let mut tuples = vec![
                ([66, 9, 149, 187], 2794u16, [161, 142, 100, 80], 1766u16),
                ([199, 92, 111, 2], 14230, [65, 69, 140, 83], 4739),
            ];
            for _ in 0..10_000 {
                let r = next();
                let a = (r as u32).to_be_bytes();
                let b = ((r >> 32) as u32).to_be_bytes();
                let p = next();
                tuples.push((a, p as u16, b, (p >> 16) as u16));
            }
            for (s, sp, d, dp) in tuples {
                let (src, dst) = (Ipv4Addr::from(s), Ipv4Addr::from(d));
                // rte_ipv4_tuple: addresses, then dport in the low half and
                // sport in the high half of the third word (host order).
                let words = [
                    u32::from(src),
                    u32::from(dst),
                    (u32::from(sp) << 16) | u32::from(dp),
                ];
                let dpdk = crate::dpdk::softrss(&words, key);
                let ours = tcp4(key, src, dst, sp, dp);
                assert_eq!(ours, dpdk, "{src}:{sp} -> {dst}:{dp}");
                assert_eq!(table.tcp4(src, dst, sp, dp), ours);
            }
        }
    }

    #[test]
    fn queue_of_follows_the_table() {
        let s = |reta_size, queue| RssSteering {
            key: &MS_KEY,
            queues: 3,
            reta_size,
            queue,
        };
        // 128 entries: entry h % 128, queue entry % 3.
        assert_eq!(s(128, 0).queue_of(130), 2);
        assert_eq!(s(128, 0).queue_of(127), 1);
        // No table: h % queues (not always queue 0).
        assert_eq!(s(0, 0).queue_of(130), 1);
        assert_eq!(s(0, 0).queue_of(5), 2);
    }

    #[test]
    fn frames_are_classified() {
        let t = Toeplitz::new(&crate::dpdk::SYMMETRIC_RSS_KEY);
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[14 + 9] = 6;
        f[26..30].copy_from_slice(&[10, 0, 0, 2]);
        f[30..34].copy_from_slice(&[10, 0, 0, 1]);
        f[34..36].copy_from_slice(&40000u16.to_be_bytes());
        f[36..38].copy_from_slice(&443u16.to_be_bytes());
        let want = t.tcp4(
            Ipv4Addr::new(10, 0, 0, 2),
            Ipv4Addr::new(10, 0, 0, 1),
            40000,
            443,
        );
        assert_eq!(classify(&f, &t), FrameClass::Tcp(want));
        // Tagged for a VLAN: hashed alike.
        let mut tagged = f.clone();
        tagged.splice(12..12, [0x81, 0x00, 0x00, 100]);
        assert_eq!(classify(&tagged, &t), FrameClass::Tcp(want));
        f[14 + 6] = 0x20; // more fragments
        assert_eq!(classify(&f, &t), FrameClass::Other);
        f[14 + 6] = 0x40; // don't fragment: fine
        assert_eq!(classify(&f, &t), FrameClass::Tcp(want));
        f[14 + 9] = 1;
        assert_eq!(classify(&f, &t), FrameClass::Other);
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(classify(&f, &t), FrameClass::Neighbor);
        assert_eq!(classify(&f[..10], &t), FrameClass::Other);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14 + 9] = 6;
        assert_eq!(
            classify(&f[..14 + 20 + 2], &t),
            FrameClass::Other,
            "ports cut off"
        );
        // IPv6: neighbour discovery goes to every engine, the rest stays.
        let mut v6 = vec![0u8; 14 + 40 + 32];
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        v6[14] = 0x60;
        v6[14 + 6] = 58;
        for (kind, class) in [
            (135, FrameClass::Neighbor),
            (136, FrameClass::Neighbor),
            (128, FrameClass::Other),
        ] {
            v6[14 + 40] = kind;
            assert_eq!(classify(&v6, &t), class, "ICMPv6 type {kind}");
        }
        // TCP: hashed as a NIC hashes it.
        v6[14 + 6] = 6;
        v6[14 + 8..14 + 24]
            .copy_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        v6[14 + 24..14 + 40]
            .copy_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        v6[14 + 40..14 + 44].copy_from_slice(&[0x9c, 0x40, 0x01, 0xbb]);
        let want = t.tcp6(
            "2001:db8::2".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
            40000,
            443,
        );
        assert_eq!(classify(&v6, &t), FrameClass::Tcp(want));
        let v6_tcp = v6.clone();
        assert_eq!(
            classify(&v6[..14 + 42], &t),
            FrameClass::Other,
            "ports cut off"
        );
        // Behind a destination options and a hop-by-hop header (as the
        // engine reads it): hashed the same, so it goes where the flow's
        // other segments go (it was `Other`: kept by the engine it
        // reached, which need not own the flow).
        let mut ext = v6[..14 + 40].to_vec();
        ext[14 + 6] = 0;
        ext.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop, PadN
        ext.extend_from_slice(&[6, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        ext.extend_from_slice(&v6[14 + 40..]);
        assert_eq!(classify(&ext, &t), FrameClass::Tcp(want));
        assert_eq!(classify(&ext[..14 + 40 + 24 + 2], &t), FrameClass::Other);
        // In an atomic fragment (RFC 6946): hashed the same; a real
        // fragment (M set) is not.
        let mut frag = v6[..14 + 40].to_vec();
        frag[14 + 6] = 44;
        frag.extend_from_slice(&[6, 0, 0, 0, 1, 2, 3, 4]);
        frag.extend_from_slice(&v6[14 + 40..]);
        assert_eq!(classify(&frag, &t), FrameClass::Tcp(want));
        frag[14 + 40 + 3] = 1;
        assert_eq!(classify(&frag, &t), FrameClass::Other);
        // On a port whose NIC hashes these on their addresses alone, the
        // atomic fragment and the segment behind options are hashed
        // again; a plain segment (the NIC hashed it right) and a real
        // fragment are not.
        frag[14 + 40 + 3] = 0;
        assert_eq!(address_hashed_flow(&frag, &t), Some(want));
        assert_eq!(address_hashed_flow(&ext, &t), Some(want));
        assert_eq!(address_hashed_flow(&v6_tcp, &t), None);
        frag[14 + 40 + 3] = 1;
        assert_eq!(address_hashed_flow(&frag, &t), None);
        v6[14 + 6] = 0; // a hop-by-hop header first, then an unknown one
        v6[14 + 40] = 135;
        assert_eq!(classify(&v6, &t), FrameClass::Other);
        assert_eq!(classify(&v6[..14 + 40], &t), FrameClass::Other);
    }

    #[test]
    fn a_fragmentation_needed_goes_where_its_flow_goes() {
        let t = Toeplitz::new(&crate::dpdk::SYMMETRIC_RSS_KEY);
        let (us, peer) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 9, 0, 2));
        let flow = t.tcp4(peer, us, 40000, 443);
        let mut f = vec![0u8; 14 + 20 + 8 + 20 + 8];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[14 + 9] = 1; // ICMP
        f[14 + 20] = 3; // destination unreachable
        f[14 + 21] = 4; // fragmentation needed
        let q = 14 + 28;
        f[q] = 0x45;
        f[q + 9] = 6;
        f[q + 12..q + 16].copy_from_slice(&us.octets());
        f[q + 16..q + 20].copy_from_slice(&peer.octets());
        f[q + 20..q + 24].copy_from_slice(&[0x01, 0xbb, 0x9c, 0x40]);
        assert_eq!(classify(&f, &t), FrameClass::Tcp(flow));
        f[14 + 21] = 3; // port unreachable: stays
        assert_eq!(classify(&f, &t), FrameClass::Other);
    }

    #[test]
    fn a_packet_too_big_goes_where_its_flow_goes() {
        let t = Toeplitz::new(&crate::dpdk::SYMMETRIC_RSS_KEY);
        let (us, peer, router): (Ipv6Addr, Ipv6Addr, Ipv6Addr) = (
            "2001:db8::1".parse().unwrap(),
            "2001:db8:9::2".parse().unwrap(),
            "2001:db8::fe".parse().unwrap(),
        );
        // The flow's received segments: from the peer's port 40000 to 443.
        let flow = t.tcp6(peer, us, 40000, 443);
        let mut f = vec![0u8; 14 + 40 + 8 + 40 + 20];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[14 + 6] = 58;
        f[14 + 8..14 + 24].copy_from_slice(&router.octets());
        f[14 + 24..14 + 40].copy_from_slice(&us.octets());
        f[14 + 40] = 2; // Packet Too Big
                        // The quoted packet: ours, from 443 to the peer's 40000.
        let q = 14 + 48;
        f[q] = 0x60;
        f[q + 6] = 6;
        f[q + 8..q + 24].copy_from_slice(&us.octets());
        f[q + 24..q + 40].copy_from_slice(&peer.octets());
        f[q + 40..q + 44].copy_from_slice(&[0x01, 0xbb, 0x9c, 0x40]);
        assert_eq!(classify(&f, &t), FrameClass::Tcp(flow));
        // Quoting something else (UDP), or cut short: not steered.
        assert_eq!(classify(&f[..q + 42], &t), FrameClass::Other);
        f[q + 6] = 17;
        assert_eq!(classify(&f, &t), FrameClass::Other);
    }

    #[test]
    fn the_symmetric_key_hashes_both_directions_alike() {
        let key = crate::dpdk::SYMMETRIC_RSS_KEY;
        let (a, b) = (Ipv4Addr::new(10, 77, 0, 1), Ipv4Addr::new(10, 77, 1, 2));
        let (a6, b6): (Ipv6Addr, Ipv6Addr) = (
            "2001:db8:77::1".parse().unwrap(),
            "2001:db8:99::2".parse().unwrap(),
        );
        for port in [1u16, 80, 443, 40_000, 65_535] {
            assert_eq!(tcp4(&key, a, b, port, 80), tcp4(&key, b, a, 80, port));
            assert_eq!(tcp6(&key, a6, b6, port, 80), tcp6(&key, b6, a6, 80, port));
        }
    }
}
