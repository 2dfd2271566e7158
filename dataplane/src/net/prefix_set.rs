//! A set of networks (IPv4 and IPv6 prefixes) asked whether it holds an
//! address: `[access] deny` (docs/architecture.md, "Limits"). Built once
//! per configuration change by the control thread, then only read.

use std::collections::HashSet;
use std::net::IpAddr;

/// Networks, by prefix length: an address is in the set when its first
/// `len` bits are one of the networks of that length. A lookup costs one
/// hash probe per distinct length (a few), whatever the number of
/// networks.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PrefixSet {
    v4: Vec<(u8, HashSet<u32>)>,
    v6: Vec<(u8, HashSet<u128>)>,
    len: usize,
}

impl PrefixSet {
    /// The set of `networks` (address, prefix length); bits past the
    /// length are ignored, lengths past the family's are taken as all.
    pub fn new(networks: impl IntoIterator<Item = (IpAddr, u8)>) -> Self {
        let mut set = Self::default();
        for (addr, len) in networks {
            let added = match addr {
                IpAddr::V4(a) => {
                    let len = len.min(32);
                    insert(&mut set.v4, len, u32::from(a) & mask4(len))
                }
                IpAddr::V6(a) => {
                    let len = len.min(128);
                    insert(&mut set.v6, len, u128::from(a) & mask6(len))
                }
            };
            set.len += usize::from(added);
        }
        set
    }

    /// Networks held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `addr` is on one of the networks.
    pub fn contains(&self, addr: IpAddr) -> bool {
        match addr {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4
                    .iter()
                    .any(|(len, nets)| nets.contains(&(a & mask4(*len))))
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6
                    .iter()
                    .any(|(len, nets)| nets.contains(&(a & mask6(*len))))
            }
        }
    }
}

/// Adds `net` under `len`; whether it was new.
fn insert<T: std::hash::Hash + Eq>(by_len: &mut Vec<(u8, HashSet<T>)>, len: u8, net: T) -> bool {
    match by_len.iter_mut().find(|(l, _)| *l == len) {
        Some((_, nets)) => nets.insert(net),
        None => {
            by_len.push((len, HashSet::from([net])));
            true
        }
    }
}

fn mask4(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask6(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(nets: &[(&str, u8)]) -> PrefixSet {
        PrefixSet::new(nets.iter().map(|(a, l)| (a.parse().unwrap(), *l)))
    }

    fn has(s: &PrefixSet, a: &str) -> bool {
        s.contains(a.parse().unwrap())
    }

    #[test]
    fn an_address_is_in_when_a_network_of_any_length_holds_it() {
        let s = set(&[
            ("198.51.100.0", 24),
            ("203.0.113.7", 32),
            ("10.0.0.0", 8),
            ("2001:db8:bad::", 48),
            ("2001:db8::1", 128),
        ]);
        assert_eq!(s.len(), 5);
        for a in [
            "198.51.100.0",
            "198.51.100.255",
            "203.0.113.7",
            "10.200.1.1",
        ] {
            assert!(has(&s, a), "{a}");
        }
        for a in ["198.51.101.0", "203.0.113.6", "11.0.0.1", "0.0.0.0"] {
            assert!(!has(&s, a), "{a}");
        }
        assert!(has(&s, "2001:db8:bad:ffff::9"));
        assert!(has(&s, "2001:db8::1"));
        assert!(!has(&s, "2001:db8::2"));
        assert!(!has(&s, "2001:db8:bae::1"));
        // The families are apart: ::ffff:10.0.0.1 is an IPv6 address.
        assert!(!has(&s, "::ffff:10.0.0.1"));
    }

    #[test]
    fn zero_length_holds_all_of_its_family_and_duplicates_count_once() {
        let s = set(&[("0.0.0.0", 0), ("192.0.2.9", 24), ("192.0.2.0", 24)]);
        assert_eq!(s.len(), 2, "192.0.2.9/24 is 192.0.2.0/24");
        assert!(has(&s, "255.255.255.255") && has(&s, "1.2.3.4"));
        assert!(!has(&s, "::1"));
        let all6 = set(&[("::", 0)]);
        assert!(has(&all6, "fe80::1") && !has(&all6, "127.0.0.1"));
        assert!(!PrefixSet::default().contains("127.0.0.1".parse().unwrap()));
    }
}
