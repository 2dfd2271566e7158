//! The neighbour cache of one interface, for ARP (RFC 826, IPv4) and
//! Neighbor Discovery (RFC 4861, IPv6): reachable, stale and incomplete
//! entries, probe pacing, and eviction by second chance (a FIFO where an
//! entry used since it was queued goes round once more). Hashed: an engine
//! facing on-link clients talks to thousands of neighbours, and a scan per
//! frame over them (or per insert, to find the oldest) would be a cost a
//! sender of spoofed addresses controls.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use smoltcp::wire::EthernetAddress;

use crate::tcp::FlowHashing;
use crate::time::Instant;

/// How long a mapping learned by ARP is trusted.
pub const REACHABLE_TIME: Duration = Duration::from_secs(300);
/// How long a mapping learned by Neighbor Discovery is trusted (RFC 4861
/// §10, `REACHABLE_TIME`); then it is solicited again, as ARP's are.
pub const ND_REACHABLE_TIME: Duration = Duration::from_secs(30);
/// Least time between two requests for one address.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// Requests sent for a stale entry, still used meanwhile, before it is
/// given up (RFC 4861 §10, `MAX_UNICAST_SOLICIT`).
pub const STALE_PROBES: u8 = 3;
/// How long an entry a Neighbor Solicitation made or moved is used
/// before it is asked about (RFC 4861 §10, `DELAY_FIRST_PROBE_TIME`).
pub const DELAY_FIRST_PROBE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
enum State {
    Reachable {
        mac: EthernetAddress,
        expires: Instant,
    },
    /// Past its reachable time: still used while requests (paced) ask
    /// whether it holds (RFC 4861's STALE, DELAY and PROBE in one; Linux
    /// does the same for ARP), given up after [`STALE_PROBES`].
    Stale {
        mac: EthernetAddress,
        next_probe: Instant,
        probes_left: u8,
    },
    Incomplete {
        next_probe: Instant,
    },
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    state: State,
    /// Looked up since it was last queued (its second chance).
    used: bool,
    /// Made by a lookup that missed and not resolved yet: counted against
    /// the quota of such entries ([`NeighborCache::pending_cap`]).
    pending: bool,
    /// Which insertion made it: a queue item naming the address with
    /// another `seq` is left from an entry since removed.
    seq: u32,
}

impl Entry {
    /// Moves it to `state`; one that leaves incomplete is no longer
    /// pending (`pending_live` counts those that are).
    fn set(&mut self, state: State, pending_live: &mut usize) {
        if self.pending && !matches!(state, State::Incomplete { .. }) {
            self.pending = false;
            *pending_live -= 1;
        }
        self.state = state;
    }
}

/// Result of [`NeighborCache::lookup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpLookup {
    /// Known and fresh.
    Hit(EthernetAddress),
    /// Known but past its reachable time: use it; `probe` says whether to
    /// send a request now to confirm it.
    Stale { mac: EthernetAddress, probe: bool },
    /// Unknown or stale: `probe` says whether to send a request now (paced
    /// to one per [`PROBE_INTERVAL`] per address).
    Miss { probe: bool },
}

/// A bounded table of neighbours' MACs by protocol address `A`.
#[derive(Debug)]
pub struct NeighborCache<A> {
    /// Seeded: peers choose the keys (any sender address asking for
    /// ours), and an unseeded FxHash would let them pick addresses that
    /// share one probe sequence ([`FlowHashing`]).
    entries: HashMap<A, Entry, FlowHashing>,
    /// Every address in `entries`, in the order it was (re)queued, with
    /// the `seq` of its entry (items of removed entries are passed over,
    /// and cleared out when the queue reaches twice the capacity).
    order: VecDeque<(A, u32)>,
    capacity: usize,
    /// Entries made by lookups that missed, oldest first (as `order`).
    pending: VecDeque<(A, u32)>,
    /// How many of them are still unresolved.
    pending_live: usize,
    /// At most this many unresolved at once (RFC 6583 §7.1): past it, a
    /// new one takes the place of the oldest. Addresses a peer makes us
    /// look up (replies to spoofed on-link sources) so churn among
    /// themselves and never push out neighbours already known.
    pending_cap: usize,
    next_seq: u32,
    /// How long a learned mapping is trusted.
    reachable: Duration,
    /// Entries made reachable so far (wrapping).
    learned: u64,
}

/// The ARP table of an IPv4 interface.
pub type ArpCache = NeighborCache<Ipv4Addr>;
/// The neighbour cache of an IPv6 interface.
pub type NdCache = NeighborCache<Ipv6Addr>;

impl ArpCache {
    pub fn new(capacity: usize) -> Self {
        Self::with_reachable_time(capacity, REACHABLE_TIME)
    }
}

impl<A: Copy + Eq + Hash> NeighborCache<A> {
    /// A table of at most `capacity` entries, each trusted for `reachable`
    /// after it is learned.
    pub fn with_reachable_time(capacity: usize, reachable: Duration) -> Self {
        Self {
            entries: HashMap::with_hasher(FlowHashing::random()),
            order: VecDeque::new(),
            capacity: capacity.max(1),
            pending: VecDeque::new(),
            pending_live: 0,
            pending_cap: (capacity / 4).max(1),
            next_seq: 0,
            reachable,
            learned: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Looks `ip` up; a miss makes an incomplete entry and, when
    /// `can_probe` (the caller has room to send one), paces probes: a probe
    /// the caller could not send is asked for again at the next lookup.
    pub fn lookup(&mut self, ip: A, now: Instant, can_probe: bool) -> ArpLookup {
        let next_probe = if can_probe { now + PROBE_INTERVAL } else { now };
        match self.entries.get_mut(&ip) {
            Some(e) => {
                e.used = true;
                match e.state {
                    State::Reachable { mac, expires } if now < expires => ArpLookup::Hit(mac),
                    State::Reachable { mac, .. } => {
                        e.set(
                            State::Stale {
                                mac,
                                next_probe,
                                probes_left: STALE_PROBES - u8::from(can_probe),
                            },
                            &mut self.pending_live,
                        );
                        ArpLookup::Stale {
                            mac,
                            probe: can_probe,
                        }
                    }
                    State::Stale {
                        mac,
                        next_probe: due,
                        probes_left,
                    } if now >= due => {
                        if probes_left == 0 {
                            e.set(State::Incomplete { next_probe }, &mut self.pending_live);
                            return ArpLookup::Miss { probe: can_probe };
                        }
                        e.set(
                            State::Stale {
                                mac,
                                next_probe,
                                probes_left: probes_left - u8::from(can_probe),
                            },
                            &mut self.pending_live,
                        );
                        ArpLookup::Stale {
                            mac,
                            probe: can_probe,
                        }
                    }
                    State::Stale { mac, .. } => ArpLookup::Stale { mac, probe: false },
                    State::Incomplete { next_probe: due } if now >= due => {
                        e.state = State::Incomplete { next_probe };
                        ArpLookup::Miss { probe: can_probe }
                    }
                    State::Incomplete { .. } => ArpLookup::Miss { probe: false },
                }
            }
            None => {
                self.make_room_for_pending();
                let seq = self.insert(ip, State::Incomplete { next_probe }, true);
                self.pending.push_back((ip, seq));
                ArpLookup::Miss { probe: can_probe }
            }
        }
    }

    /// The MAC to send to next hop `ip`: fresh or stale (then confirmed
    /// by a request). A request to send now is pushed onto `probes`,
    /// which holds at most `max` (a full queue means the next lookup asks).
    pub fn resolve(
        &mut self,
        ip: A,
        now: Instant,
        probes: &mut Vec<A>,
        max: usize,
    ) -> Option<EthernetAddress> {
        let (mac, probe) = match self.lookup(ip, now, probes.len() < max) {
            ArpLookup::Hit(mac) => (Some(mac), false),
            ArpLookup::Stale { mac, probe } => (Some(mac), probe),
            ArpLookup::Miss { probe } => (None, probe),
        };
        if probe {
            probes.push(ip);
        }
        mac
    }

    /// Records `ip` → `mac`. An existing entry is always updated (RFC 826's
    /// merge step); a new one is made only when `create` (the packet was for
    /// us, or answered our request). Counted as learned ([`Self::learned`])
    /// when it is new, was incomplete or moved: a refresh of what was
    /// known releases no frame waiting for a neighbour.
    pub fn learn(&mut self, ip: A, mac: EthernetAddress, now: Instant, create: bool) {
        let state = State::Reachable {
            mac,
            expires: now + self.reachable,
        };
        if let Some(e) = self.entries.get_mut(&ip) {
            let known = match e.state {
                State::Reachable { mac: held, .. } | State::Stale { mac: held, .. } => held == mac,
                State::Incomplete { .. } => false,
            };
            e.set(state, &mut self.pending_live);
            e.used = true;
            if known {
                return;
            }
        } else if create {
            self.insert(ip, state, false);
        } else {
            return;
        }
        self.learned = self.learned.wrapping_add(1);
    }

    /// Takes the source link-layer address of a Neighbor Solicitation
    /// from `ip` (RFC 4861 §7.2.3). A solicitation says nothing of
    /// reachability, so a new entry, an incomplete one, or one whose MAC
    /// it moves is STALE: used, and asked about after
    /// [`DELAY_FIRST_PROBE`] until an advertisement confirms it. One that
    /// already holds that MAC is left as it is.
    pub fn solicited_by(&mut self, ip: A, mac: EthernetAddress, now: Instant) {
        let stale = State::Stale {
            mac,
            next_probe: now + DELAY_FIRST_PROBE,
            probes_left: STALE_PROBES,
        };
        match self.entries.get_mut(&ip) {
            Some(e) => match e.state {
                State::Reachable { mac: held, .. } | State::Stale { mac: held, .. }
                    if held == mac => {}
                _ => {
                    e.set(stale, &mut self.pending_live);
                    e.used = true;
                    self.learned = self.learned.wrapping_add(1);
                }
            },
            None => {
                self.insert(ip, stale, false);
                self.learned = self.learned.wrapping_add(1);
            }
        }
    }

    /// Takes a Neighbor Advertisement for `ip` (RFC 4861 §7.2.5): only an
    /// entry we have changes. An incomplete one takes the advertised MAC
    /// (reachable when `solicited`, else stale). A known one keeps its MAC
    /// against a different one without `override_` (a reachable entry
    /// turns stale: something else claims the address); otherwise it takes
    /// the advertised MAC, and is reachable when `solicited`, stale when
    /// the MAC changed without being asked for, else as it was.
    pub fn advertised(
        &mut self,
        ip: A,
        mac: Option<EthernetAddress>,
        solicited: bool,
        override_: bool,
        now: Instant,
    ) {
        let Some(e) = self.entries.get_mut(&ip) else {
            return;
        };
        let reachable = |mac| State::Reachable {
            mac,
            expires: now + self.reachable,
        };
        let stale = |mac| State::Stale {
            mac,
            next_probe: now,
            probes_left: STALE_PROBES,
        };
        let cached = match e.state {
            State::Reachable { mac, .. } | State::Stale { mac, .. } => mac,
            State::Incomplete { .. } => {
                let Some(mac) = mac else { return };
                let state = if solicited {
                    reachable(mac)
                } else {
                    stale(mac)
                };
                e.set(state, &mut self.pending_live);
                self.learned = self.learned.wrapping_add(1);
                return;
            }
        };
        let changed = mac.is_some_and(|m| m != cached);
        if changed && !override_ {
            if let State::Reachable { .. } = e.state {
                e.state = stale(cached);
            }
            return;
        }
        let mac = mac.unwrap_or(cached);
        if solicited {
            e.state = reachable(mac);
        } else if changed {
            e.state = stale(mac);
        }
        // Only a move can release a frame waiting for a neighbour (none
        // waits for one already known): a confirmation is not counted.
        if changed {
            self.learned = self.learned.wrapping_add(1);
        }
    }

    /// Counts the neighbours learned, resolved or moved (not those only
    /// confirmed or refreshed): frames waiting for a neighbour need
    /// looking at again only when it moved.
    pub fn learned(&self) -> u64 {
        self.learned
    }

    /// The mapping held for `ip`, fresh or stale, without side effects.
    pub fn known(&self, ip: A) -> Option<EthernetAddress> {
        self.entries.get(&ip).and_then(|e| match e.state {
            State::Reachable { mac, .. } | State::Stale { mac, .. } => Some(mac),
            State::Incomplete { .. } => None,
        })
    }

    /// The fresh mapping for `ip`, without side effects.
    pub fn peek(&self, ip: A, now: Instant) -> Option<EthernetAddress> {
        self.entries.get(&ip).and_then(|e| match e.state {
            State::Reachable { mac, expires } if now < expires => Some(mac),
            _ => None,
        })
    }

    /// Adds an entry for `ip` (not in the table); `pending` when a lookup
    /// missed. Returns its `seq`.
    fn insert(&mut self, ip: A, state: State, pending: bool) -> u32 {
        // Full: the oldest entry not used since it was queued goes (each
        // entry passed over loses its mark, so this ends within two turns).
        while self.entries.len() >= self.capacity {
            let Some((old, seq)) = self.order.pop_front() else {
                break;
            };
            match self.entries.get_mut(&old) {
                Some(e) if e.seq != seq => {} // left from a removed entry
                Some(e) if e.used => {
                    e.used = false;
                    self.order.push_back((old, seq));
                }
                Some(_) => self.remove(old),
                None => {}
            }
        }
        // Items of entries removed elsewhere (pending ones past their
        // quota) are cleared out before they outnumber the entries.
        if self.order.len() >= 2 * self.capacity {
            let entries = &self.entries;
            self.order
                .retain(|(a, seq)| entries.get(a).is_some_and(|e| e.seq == *seq));
        }
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        self.entries.insert(
            ip,
            Entry {
                state,
                used: false,
                pending,
                seq,
            },
        );
        self.order.push_back((ip, seq));
        if pending {
            self.pending_live += 1;
        }
        seq
    }

    /// Takes `ip`'s entry out.
    fn remove(&mut self, ip: A) {
        if self.entries.remove(&ip).is_some_and(|e| e.pending) {
            self.pending_live -= 1;
        }
    }

    /// Before a lookup that missed makes an entry: at the quota of
    /// unresolved ones, the oldest of them goes (RFC 6583 §7.1: what is
    /// known keeps its place before what is only asked about).
    fn make_room_for_pending(&mut self) {
        while self.pending_live >= self.pending_cap {
            let Some((old, seq)) = self.pending.pop_front() else {
                break;
            };
            if self
                .entries
                .get(&old)
                .is_some_and(|e| e.seq == seq && e.pending)
            {
                self.remove(old);
            }
        }
        // Items of entries resolved (or removed) meanwhile are cleared out
        // before they outnumber the quota.
        if self.pending.len() >= 2 * self.pending_cap {
            let entries = &self.entries;
            self.pending
                .retain(|(a, seq)| entries.get(a).is_some_and(|e| e.seq == *seq && e.pending));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 9]);

    /// An advertisement for an address we are asking about (incomplete)
    /// fills it: reachable when solicited, else stale (used, and asked
    /// again); one without a link-layer address changes nothing.
    #[test]
    fn an_advertisement_fills_an_incomplete_entry_as_its_flags_say() {
        let ip = Ipv4Addr::new(10, 0, 0, 7);
        let t0 = Instant::from_millis(1000);
        for solicited in [false, true] {
            let mut c = ArpCache::new(4);
            assert_eq!(c.lookup(ip, t0, true), ArpLookup::Miss { probe: true });
            c.advertised(ip, None, solicited, true, t0);
            assert_eq!(c.lookup(ip, t0, false), ArpLookup::Miss { probe: false });
            c.advertised(ip, Some(MAC), solicited, false, t0);
            let want = if solicited {
                ArpLookup::Hit(MAC)
            } else {
                ArpLookup::Stale {
                    mac: MAC,
                    probe: true,
                }
            };
            assert_eq!(c.lookup(ip, t0, true), want, "solicited {solicited}");
        }
        // No entry: none made.
        let mut c = ArpCache::new(4);
        c.advertised(ip, Some(MAC), true, true, t0);
        assert!(c.is_empty());
    }

    /// Each cache hashes with a seed of its own: the bucket of an
    /// address cannot be computed from outside (the sender addresses of
    /// ARP requests and Neighbor Solicitations are the peer's choice).
    /// Before, every cache used FxHash from 0, a public function.
    #[test]
    fn each_cache_hashes_with_a_seed_of_its_own() {
        use std::hash::BuildHasher;
        let (a, b) = (ArpCache::new(4), ArpCache::new(4));
        for i in 1..200u32 {
            let ip = Ipv4Addr::from(0x0a00_0000 + i);
            let (ha, hb) = (a.entries.hasher(), b.entries.hasher());
            assert_ne!(ha.hash_one(ip), hb.hash_one(ip), "{ip}");
            assert_ne!(ha.hash_one(ip), FlowHashing::default().hash_one(ip), "{ip}");
        }
    }
    #[test]
    fn miss_probes_once_per_interval_then_hits() {
        let mut c = ArpCache::new(4);
        let ip = Ipv4Addr::new(10, 0, 0, 9);
        let t0 = Instant::from_millis(1000);
        assert_eq!(c.lookup(ip, t0, true), ArpLookup::Miss { probe: true });
        assert_eq!(
            c.lookup(ip, t0 + Duration::from_millis(10), true),
            ArpLookup::Miss { probe: false }
        );
        assert_eq!(
            c.lookup(ip, t0 + PROBE_INTERVAL, true),
            ArpLookup::Miss { probe: true }
        );
        c.learn(ip, MAC, t0 + PROBE_INTERVAL, false);
        assert_eq!(c.lookup(ip, t0 + PROBE_INTERVAL, true), ArpLookup::Hit(MAC));
    }

    #[test]
    fn a_probe_the_caller_could_not_send_is_asked_for_at_the_next_lookup() {
        // A burst of misses overflows the caller's request queue: those
        // left out must not wait a whole probe interval for their request.
        let mut c = ArpCache::new(4);
        let ip = Ipv4Addr::new(10, 0, 0, 9);
        let t0 = Instant::from_millis(1000);
        assert_eq!(c.lookup(ip, t0, false), ArpLookup::Miss { probe: false });
        let t1 = t0 + Duration::from_millis(1);
        assert_eq!(c.lookup(ip, t1, true), ArpLookup::Miss { probe: true });
        assert_eq!(c.lookup(ip, t1, true), ArpLookup::Miss { probe: false });
        assert_eq!(c.learned(), 0);
        c.learn(ip, MAC, t1, false);
        assert_eq!(c.learned(), 1);
    }

    #[test]
    fn expired_entries_stay_in_use_while_asked_then_go() {
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
        // Stale: used, and asked about once per interval, three times.
        let mut t = Instant::ZERO + REACHABLE_TIME;
        for _ in 0..STALE_PROBES {
            assert_eq!(
                c.lookup(ip, t, true),
                ArpLookup::Stale {
                    mac: MAC,
                    probe: true
                }
            );
            assert_eq!(
                c.lookup(ip, t + Duration::from_millis(10), true),
                ArpLookup::Stale {
                    mac: MAC,
                    probe: false
                }
            );
            assert_eq!(c.peek(ip, t), None, "not fresh");
            t = t + PROBE_INTERVAL;
        }
        // No answer: given up.
        assert_eq!(c.lookup(ip, t, true), ArpLookup::Miss { probe: true });
        // An answer while stale makes it reachable again.
        c.learn(ip, MAC, t, false);
        let t = t + REACHABLE_TIME;
        assert!(matches!(c.lookup(ip, t, true), ArpLookup::Stale { .. }));
        c.learn(ip, MAC, t, false);
        assert_eq!(c.lookup(ip, t, true), ArpLookup::Hit(MAC));
    }

    /// RFC 4861 §7.2.3: a solicitation makes or moves its sender's entry
    /// STALE (used, asked about after the first-probe delay), and leaves
    /// one with the same MAC as it was. Before, it made the entry
    /// reachable for 30 s, whatever MAC it named.
    #[test]
    fn a_solicitation_makes_its_sender_stale_never_reachable() {
        const OTHER: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x99]);
        let mut c = NdCache::with_reachable_time(8, ND_REACHABLE_TIME);
        let ip: Ipv6Addr = "fd00::9".parse().unwrap();
        let t0 = Instant::from_millis(1000);
        c.solicited_by(ip, MAC, t0);
        assert_eq!(c.learned(), 1, "held frames are looked at again");
        assert_eq!(c.peek(ip, t0), None, "not reachable");
        assert_eq!(
            c.lookup(ip, t0, true),
            ArpLookup::Stale {
                mac: MAC,
                probe: false
            },
            "used at once, not asked about yet"
        );
        let later = t0 + DELAY_FIRST_PROBE;
        assert_eq!(
            c.lookup(ip, later, true),
            ArpLookup::Stale {
                mac: MAC,
                probe: true
            }
        );
        // Confirmed by an advertisement: reachable; the same MAC solicited
        // again leaves it so.
        c.advertised(ip, Some(MAC), true, true, later);
        c.solicited_by(ip, MAC, later);
        assert_eq!(c.peek(ip, later), Some(MAC));
        // Another MAC: moved, and stale again.
        c.solicited_by(ip, OTHER, later);
        assert_eq!(c.peek(ip, later), None);
        assert_eq!(
            c.lookup(ip, later, true),
            ArpLookup::Stale {
                mac: OTHER,
                probe: false
            }
        );
        // An incomplete entry (frames held for it) takes the MAC, stale.
        let other_ip: Ipv6Addr = "fd00::10".parse().unwrap();
        assert_eq!(
            c.lookup(other_ip, later, true),
            ArpLookup::Miss { probe: true }
        );
        let learned = c.learned();
        c.solicited_by(other_ip, MAC, later);
        assert_eq!(c.learned(), learned + 1);
        assert!(matches!(
            c.lookup(other_ip, later, true),
            ArpLookup::Stale { mac: MAC, .. }
        ));
    }

    /// RFC 6583 §7.1: lookups for addresses nobody answers (replies to
    /// spoofed on-link sources) churn among a quota of unresolved
    /// entries; neighbours already known keep their place, and the
    /// queues stay bounded however long the flood. Before, each miss could
    /// push out a known neighbour, and a flood emptied the table of them.
    #[test]
    fn a_flood_of_misses_never_pushes_out_known_neighbours() {
        let mut c = ArpCache::new(16);
        let t0 = Instant::from_millis(1000);
        let known: Vec<Ipv4Addr> = (1..=12).map(|i| Ipv4Addr::new(10, 0, 0, i)).collect();
        for &ip in &known {
            c.learn(ip, MAC, t0, true);
        }
        for i in 0..100_000u32 {
            let spoofed = Ipv4Addr::from(0x0a01_0000 + i);
            assert_eq!(c.lookup(spoofed, t0, true), ArpLookup::Miss { probe: true });
        }
        for &ip in &known {
            assert_eq!(c.peek(ip, t0), Some(MAC), "{ip} kept");
        }
        assert_eq!(c.len(), 16, "12 known, 4 asked about");
        assert_eq!(c.pending_live, 4);
        assert!(c.order.len() < 2 * 16 && c.pending.len() < 2 * 4);
        // The newest of those asked about is still asked about, and its
        // answer is taken.
        let last = Ipv4Addr::from(0x0a01_0000 + 99_999);
        c.learn(last, MAC, t0, false);
        assert_eq!(c.peek(last, t0), Some(MAC));
        assert_eq!(c.pending_live, 3);
        // A full table of known neighbours gives up at most the quota to
        // a flood.
        let mut c = ArpCache::new(16);
        for i in 1..=16 {
            c.learn(Ipv4Addr::new(10, 0, 0, i), MAC, t0, true);
        }
        for i in 0..1_000u32 {
            c.lookup(Ipv4Addr::from(0x0a01_0000 + i), t0, true);
        }
        let kept = (1..=16)
            .filter(|&i| c.peek(Ipv4Addr::new(10, 0, 0, i), t0).is_some())
            .count();
        assert_eq!(kept, 12);
    }

    /// Only what can release a frame waiting for a neighbour counts as
    /// learned: a new entry, a resolved one, a moved one. Before, every
    /// ARP packet from a known sender counted, and each made the engine
    /// look over all its waiting frames again (an ARP flood's cost).
    #[test]
    fn a_refresh_of_a_known_mapping_is_not_counted_as_learned() {
        const OTHER: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 10]);
        let mut c = ArpCache::new(4);
        let ip = Ipv4Addr::new(10, 0, 0, 9);
        let t0 = Instant::from_millis(1000);
        c.learn(ip, MAC, t0, true);
        assert_eq!(c.learned(), 1);
        for _ in 0..100 {
            c.learn(ip, MAC, t0, false);
        }
        assert_eq!(c.learned(), 1, "refreshed, not learned");
        assert_eq!(c.peek(ip, t0 + REACHABLE_TIME / 2), Some(MAC));
        c.learn(ip, OTHER, t0, false);
        assert_eq!(c.learned(), 2, "moved");
        let missed = Ipv4Addr::new(10, 0, 0, 10);
        c.lookup(missed, t0, true);
        c.learn(missed, MAC, t0, false);
        assert_eq!(c.learned(), 3, "resolved");
        // Neighbor Discovery alike: a solicited advertisement confirming
        // the MAC held is not counted; one moving it (override) is.
        let mut nd = NdCache::with_reachable_time(4, ND_REACHABLE_TIME);
        let ip6: Ipv6Addr = "fd00::9".parse().unwrap();
        nd.lookup(ip6, t0, true);
        nd.advertised(ip6, Some(MAC), true, true, t0);
        assert_eq!(nd.learned(), 1, "resolved");
        for _ in 0..100 {
            nd.advertised(ip6, Some(MAC), true, true, t0);
        }
        assert_eq!(nd.learned(), 1, "confirmed, not learned");
        assert_eq!(nd.peek(ip6, t0), Some(MAC));
        nd.advertised(ip6, Some(OTHER), true, true, t0);
        assert_eq!(nd.learned(), 2, "moved");
        assert_eq!(nd.peek(ip6, t0), Some(OTHER));
    }

    #[test]
    fn learn_without_create_only_updates() {
        let mut c = ArpCache::new(4);
        c.learn(Ipv4Addr::new(10, 0, 0, 1), MAC, Instant::ZERO, false);
        assert!(c.is_empty());
    }

    #[test]
    fn full_table_evicts_what_was_not_used_since() {
        let mut c = ArpCache::new(2);
        let (a, b, d) = (
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            Ipv4Addr::new(10, 0, 0, 3),
        );
        c.learn(a, MAC, Instant::from_millis(1), true);
        c.learn(b, MAC, Instant::from_millis(2), true);
        assert_eq!(
            c.lookup(a, Instant::from_millis(3), true),
            ArpLookup::Hit(MAC)
        );
        c.learn(d, MAC, Instant::from_millis(4), true);
        assert_eq!(c.len(), 2);
        assert_eq!(
            c.peek(b, Instant::from_millis(5)),
            None,
            "b was not used since it was learned"
        );
        assert_eq!(c.peek(a, Instant::from_millis(5)), Some(MAC));
    }
}
