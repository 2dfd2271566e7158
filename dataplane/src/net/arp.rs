//! The ARP cache (RFC 826) of one interface: a small fixed table with
//! reachable and incomplete entries, probe pacing and eviction of the oldest
//! entry. Engines talk to few neighbours (a gateway, local backends), so a
//! linear scan over a few dozen entries beats hashing.

use std::net::Ipv4Addr;
use std::time::Duration;

use smoltcp::wire::EthernetAddress;

use crate::time::Instant;

/// How long a learned mapping is trusted.
pub const REACHABLE_TIME: Duration = Duration::from_secs(300);
/// Least time between two requests for one address.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy)]
enum State {
    Reachable {
        mac: EthernetAddress,
        expires: Instant,
    },
    Incomplete {
        next_probe: Instant,
    },
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    ip: Ipv4Addr,
    state: State,
    touched: Instant,
}

/// Result of [`ArpCache::lookup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpLookup {
    /// Known and fresh.
    Hit(EthernetAddress),
    /// Unknown or stale: `probe` says whether to send a request now (paced
    /// to one per [`PROBE_INTERVAL`] per address).
    Miss { probe: bool },
}

/// A fixed-size ARP table.
#[derive(Debug)]
pub struct ArpCache {
    entries: Vec<Entry>,
    capacity: usize,
}

impl ArpCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Vec::with_capacity(capacity),
            capacity: capacity.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The MAC for `ip`, or whether to ask for it.
    pub fn lookup(&mut self, ip: Ipv4Addr, now: Instant) -> ArpLookup {
        match self.entries.iter_mut().find(|e| e.ip == ip) {
            Some(e) => match e.state {
                State::Reachable { mac, expires } if now < expires => {
                    e.touched = now;
                    ArpLookup::Hit(mac)
                }
                State::Reachable { .. } => {
                    e.state = State::Incomplete {
                        next_probe: now + PROBE_INTERVAL,
                    };
                    ArpLookup::Miss { probe: true }
                }
                State::Incomplete { next_probe } if now >= next_probe => {
                    e.state = State::Incomplete {
                        next_probe: now + PROBE_INTERVAL,
                    };
                    ArpLookup::Miss { probe: true }
                }
                State::Incomplete { .. } => ArpLookup::Miss { probe: false },
            },
            None => {
                self.insert(Entry {
                    ip,
                    state: State::Incomplete {
                        next_probe: now + PROBE_INTERVAL,
                    },
                    touched: now,
                });
                ArpLookup::Miss { probe: true }
            }
        }
    }

    /// Records `ip` → `mac`. An existing entry is always updated (RFC 826's
    /// merge step); a new one is made only when `create` (the packet was for
    /// us, or answered our request).
    pub fn learn(&mut self, ip: Ipv4Addr, mac: EthernetAddress, now: Instant, create: bool) {
        let state = State::Reachable {
            mac,
            expires: now + REACHABLE_TIME,
        };
        if let Some(e) = self.entries.iter_mut().find(|e| e.ip == ip) {
            e.state = state;
            e.touched = now;
        } else if create {
            self.insert(Entry {
                ip,
                state,
                touched: now,
            });
        }
    }

    /// The fresh mapping for `ip`, without side effects.
    pub fn peek(&self, ip: Ipv4Addr, now: Instant) -> Option<EthernetAddress> {
        self.entries
            .iter()
            .find(|e| e.ip == ip)
            .and_then(|e| match e.state {
                State::Reachable { mac, expires } if now < expires => Some(mac),
                _ => None,
            })
    }

    fn insert(&mut self, entry: Entry) {
        if self.entries.len() < self.capacity {
            self.entries.push(entry);
            return;
        }
        // Evict the least recently used entry.
        let oldest = self
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.touched)
            .map(|(i, _)| i)
            .expect("capacity >= 1");
        self.entries[oldest] = entry;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 9]);

    #[test]
    fn miss_probes_once_per_interval_then_hits() {
        let mut c = ArpCache::new(4);
        let ip = Ipv4Addr::new(10, 0, 0, 9);
        let t0 = Instant::from_millis(1000);
        assert_eq!(c.lookup(ip, t0), ArpLookup::Miss { probe: true });
        assert_eq!(
            c.lookup(ip, t0 + Duration::from_millis(10)),
            ArpLookup::Miss { probe: false }
        );
        assert_eq!(
            c.lookup(ip, t0 + PROBE_INTERVAL),
            ArpLookup::Miss { probe: true }
        );
        c.learn(ip, MAC, t0 + PROBE_INTERVAL, false);
        assert_eq!(c.lookup(ip, t0 + PROBE_INTERVAL), ArpLookup::Hit(MAC));
    }

    #[test]
    fn entries_expire() {
        let mut c = ArpCache::new(4);
        let ip = Ipv4Addr::new(10, 0, 0, 9);
        c.learn(ip, MAC, Instant::ZERO, true);
        assert_eq!(
            c.peek(
                ip,
                Instant::ZERO + (REACHABLE_TIME - Duration::from_secs(1))
            ),
            Some(MAC)
        );
        assert_eq!(
            c.lookup(ip, Instant::ZERO + REACHABLE_TIME),
            ArpLookup::Miss { probe: true }
        );
    }

    #[test]
    fn learn_without_create_only_updates() {
        let mut c = ArpCache::new(4);
        c.learn(Ipv4Addr::new(10, 0, 0, 1), MAC, Instant::ZERO, false);
        assert!(c.is_empty());
    }

    #[test]
    fn full_table_evicts_least_recently_used() {
        let mut c = ArpCache::new(2);
        let (a, b, d) = (
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            Ipv4Addr::new(10, 0, 0, 3),
        );
        c.learn(a, MAC, Instant::from_millis(1), true);
        c.learn(b, MAC, Instant::from_millis(2), true);
        assert_eq!(c.lookup(a, Instant::from_millis(3)), ArpLookup::Hit(MAC));
        c.learn(d, MAC, Instant::from_millis(4), true);
        assert_eq!(c.len(), 2);
        assert_eq!(
            c.peek(b, Instant::from_millis(5)),
            None,
            "b was least recently used"
        );
        assert_eq!(c.peek(a, Instant::from_millis(5)), Some(MAC));
    }
}
