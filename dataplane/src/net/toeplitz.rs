//! The Toeplitz hash NICs use for RSS, in software: the engine picks the
//! source port of a connection it opens so that the replies hash to its
//! own queue (DESIGN.md: share-nothing engines).

use std::net::Ipv4Addr;

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

/// How a port spreads received flows over its queues, and which is ours.
#[derive(Debug, Clone, Copy)]
pub struct RssSteering {
    pub key: &'static [u8],
    pub queues: u16,
    /// Redirection table size (entries; the default table maps entry `i`
    /// to queue `i % queues`).
    pub reta_size: u16,
    pub queue: u16,
}

impl RssSteering {
    /// The queue a segment with RSS hash `h` lands on.
    pub fn queue_of(&self, h: u32) -> u16 {
        let reta = u32::from(self.reta_size.max(1));
        ((h % reta) % u32::from(self.queues.max(1))) as u16
    }
}

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

    #[test]
    fn the_symmetric_key_hashes_both_directions_alike() {
        let key = crate::dpdk::SYMMETRIC_RSS_KEY;
        let (a, b) = (Ipv4Addr::new(10, 77, 0, 1), Ipv4Addr::new(10, 77, 1, 2));
        for port in [1u16, 80, 443, 40_000, 65_535] {
            assert_eq!(tcp4(&key, a, b, port, 80), tcp4(&key, b, a, 80, port));
        }
    }
}
