//! The Internet checksum (RFC 1071) for TCP over IPv4 and IPv6, fast enough for the
//! bulk path: 32-bit words summed into four 64-bit accumulators (no carry
//! handling inside the loop; the compiler vectorises it), folded once at
//! the end. smoltcp's 16-bit loop was the largest single cost of a TLS
//! bulk transfer without checksum offload.

/// One's-complement sum of `data` in native byte order, not yet folded.
#[inline]
fn sum_native(data: &[u8]) -> u64 {
    let mut acc = [0u64; 4];
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        for (a, w) in acc.iter_mut().zip(c.chunks_exact(4)) {
            *a += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
        }
    }
    let mut total = acc.iter().sum::<u64>();
    let mut rest = chunks.remainder();
    while rest.len() >= 4 {
        total += u64::from(u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]));
        rest = &rest[4..];
    }
    // The tail, padded with zeros to a 32-bit word (RFC 1071 pads with a
    // zero byte at the end; the padding lands at the same positions).
    if !rest.is_empty() {
        let mut w = [0u8; 4];
        w[..rest.len()].copy_from_slice(rest);
        total += u64::from(u32::from_ne_bytes(w));
    }
    total
}

/// Folds a 64-bit one's-complement sum to 16 bits, in network byte order.
fn fold(mut s: u64) -> u16 {
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    // A native-order sum is the network-order sum byte-swapped (RFC 1071
    // §2(B)); undo that on little-endian machines.
    u16::from_be(s as u16)
}

fn pseudo_header(src: [u8; 4], dst: [u8; 4], len: usize) -> u64 {
    let mut ph = [0u8; 12];
    ph[..4].copy_from_slice(&src);
    ph[4..8].copy_from_slice(&dst);
    ph[9] = 6; // TCP
    ph[10..].copy_from_slice(&(len as u16).to_be_bytes());
    sum_native(&ph)
}

/// The TCP checksum of `segment` (header with a zero checksum field, and
/// payload) from `src` to `dst`.
pub fn tcp(src: [u8; 4], dst: [u8; 4], segment: &[u8]) -> u16 {
    !fold(pseudo_header(src, dst, segment.len()) + sum_native(segment))
}

/// The sum of the TCP pseudo-header for a `len`-byte segment from `src`
/// to `dst`, not complemented: what a port offloading the TCP checksum
/// expects in the checksum field.
pub fn tcp_pseudo_header(src: [u8; 4], dst: [u8; 4], len: usize) -> u16 {
    fold(pseudo_header(src, dst, len))
}

/// Whether a received TCP segment's checksum is right.
#[inline]
pub fn tcp_ok(src: [u8; 4], dst: [u8; 4], segment: &[u8]) -> bool {
    fold(pseudo_header(src, dst, segment.len()) + sum_native(segment)) == 0xffff
}

/// The IPv6 pseudo-header (RFC 8200 §8.1) of an upper-layer packet.
fn pseudo_header_v6(src: [u8; 16], dst: [u8; 16], next_header: u8, len: usize) -> u64 {
    let mut ph = [0u8; 40];
    ph[..16].copy_from_slice(&src);
    ph[16..32].copy_from_slice(&dst);
    ph[32..36].copy_from_slice(&(len as u32).to_be_bytes());
    ph[39] = next_header;
    sum_native(&ph)
}

/// The ICMPv6 checksum (RFC 4443 §2.3) of `message` (its checksum field
/// zero) from `src` to `dst`.
pub fn icmpv6(src: [u8; 16], dst: [u8; 16], message: &[u8]) -> u16 {
    !fold(pseudo_header_v6(src, dst, 58, message.len()) + sum_native(message))
}

/// The TCP checksum of `segment` over IPv6 (RFC 8200 §8.1).
pub fn tcp6(src: [u8; 16], dst: [u8; 16], segment: &[u8]) -> u16 {
    !fold(pseudo_header_v6(src, dst, 6, segment.len()) + sum_native(segment))
}

/// [`tcp_pseudo_header`] over IPv6: what a port offloading the checksum
/// of a TCP/IPv6 segment expects in the checksum field.
pub fn tcp6_pseudo_header(src: [u8; 16], dst: [u8; 16], len: usize) -> u16 {
    fold(pseudo_header_v6(src, dst, 6, len))
}

/// Whether a received TCP/IPv6 segment's checksum is right.
pub fn tcp6_ok(src: [u8; 16], dst: [u8; 16], segment: &[u8]) -> bool {
    fold(pseudo_header_v6(src, dst, 6, segment.len()) + sum_native(segment)) == 0xffff
}

/// Whether a received ICMPv6 message's checksum is right.
pub fn icmpv6_ok(src: [u8; 16], dst: [u8; 16], message: &[u8]) -> bool {
    fold(pseudo_header_v6(src, dst, 58, message.len()) + sum_native(message)) == 0xffff
}

/// The checksum of an IPv4 header (its checksum field zero).
pub fn ipv4_header(header: &[u8]) -> u16 {
    !fold(sum_native(header))
}

/// Whether a received IPv4 header's checksum is right.
pub fn ipv4_header_ok(header: &[u8]) -> bool {
    fold(sum_native(header)) == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::{IpAddress, TcpPacket};

    /// `len` pseudo-random bytes from the xorshift state `x`.
    fn noise(x: &mut u32, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                *x ^= *x << 13;
                *x ^= *x >> 17;
                *x ^= *x << 5;
                *x as u8
            })
            .collect()
    }

    /// Against smoltcp's checksum for every length up to 1600 and odd
    /// alignments, and a known vector.
    #[test]
    fn matches_smoltcp_on_every_length() {
        let src = [10, 1, 0, 2];
        let dst = [10, 1, 0, 1];
        let bytes = noise(&mut 0x1234_5678_u32, 1700);
        for start in 0..3 {
            for len in 20..1600 {
                let mut seg = bytes[start..start + len].to_vec();
                seg[12] = 0x50; // data offset 5 words
                seg[16] = 0;
                seg[17] = 0;
                let mut p = TcpPacket::new_unchecked(&mut seg[..]);
                p.fill_checksum(&IpAddress::v4(10, 1, 0, 2), &IpAddress::v4(10, 1, 0, 1));
                let want = p.checksum();
                seg[16] = 0;
                seg[17] = 0;
                assert_eq!(tcp(src, dst, &seg), want, "len {len}");
                seg[16..18].copy_from_slice(&want.to_be_bytes());
                assert!(tcp_ok(src, dst, &seg), "len {len}");
                seg[len / 2] ^= 0x40;
                assert!(!tcp_ok(src, dst, &seg), "len {len}: corruption seen");
            }
        }
    }

    #[test]
    fn icmpv6_as_smoltcp_sums_it() {
        use smoltcp::wire::{Icmpv6Packet, Ipv6Address};
        let src = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0xff, 0xfe, 0, 0, 1];
        let dst = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
        let bytes = noise(&mut 0x0bad_cafe_u32, 1600);
        for len in 8..1500 {
            let mut m = bytes[..len].to_vec();
            m[2..4].fill(0);
            let mut p = Icmpv6Packet::new_unchecked(&mut m[..]);
            p.fill_checksum(&Ipv6Address::from(src), &Ipv6Address::from(dst));
            let want = p.checksum();
            m[2..4].fill(0);
            assert_eq!(icmpv6(src, dst, &m), want, "len {len}");
            m[2..4].copy_from_slice(&want.to_be_bytes());
            assert!(icmpv6_ok(src, dst, &m), "len {len}");
            m[len - 1] ^= 0x01;
            assert!(!icmpv6_ok(src, dst, &m), "len {len}: corruption seen");
        }
    }

    #[test]
    fn tcp6_as_smoltcp_sums_it() {
        use smoltcp::wire::{IpAddress, Ipv6Address, TcpPacket};
        let src = [0x20, 1, 0xd, 0xb8, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let dst = [0x20, 1, 0xd, 0xb8, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let bytes = noise(&mut 0x5eed_f00d_u32, 1600);
        for len in 20..1500 {
            let mut seg = bytes[..len].to_vec();
            seg[12] = 0x50; // data offset 5: a plain header
            let mut p = TcpPacket::new_unchecked(&mut seg[..]);
            p.fill_checksum(
                &IpAddress::Ipv6(Ipv6Address::from(src)),
                &IpAddress::Ipv6(Ipv6Address::from(dst)),
            );
            let want = p.checksum();
            seg[16..18].fill(0);
            assert_eq!(tcp6(src, dst, &seg), want, "len {len}");
            let partial = tcp6_pseudo_header(src, dst, len);
            assert_eq!(!fold(u64::from(partial.to_be()) + sum_native(&seg)), want);
            seg[16..18].copy_from_slice(&want.to_be_bytes());
            assert!(tcp6_ok(src, dst, &seg), "len {len}");
            seg[len - 1] ^= 0x10;
            assert!(!tcp6_ok(src, dst, &seg), "len {len}: corruption seen");
        }
    }

    #[test]
    fn ipv4_headers_as_smoltcp_sums_them() {
        use smoltcp::wire::Ipv4Packet;
        let mut x = 0x9e37_79b9_u32;
        for n in 0..2000 {
            let words = 5 + n % 11; // options too
            let mut h = noise(&mut x, words * 4);
            h[0] = 0x40 | words as u8;
            h[10..12].fill(0);
            let mut p = Ipv4Packet::new_unchecked(&mut h[..]);
            p.fill_checksum();
            let want = p.checksum();
            h[10..12].fill(0);
            assert_eq!(ipv4_header(&h), want);
            h[10..12].copy_from_slice(&want.to_be_bytes());
            assert!(ipv4_header_ok(&h));
            h[n % (words * 4)] ^= 0x10;
            assert!(!ipv4_header_ok(&h));
        }
    }
}
