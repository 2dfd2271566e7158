//! Listeners and what they admit: a cap on open connections, and per
//! source address a rate of new connections and a cap on established ones
//! (docs/architecture.md, "Limits").
//! A SYN over either gets a reset and is counted under the listener's tag
//! (a VIP's counter slot). Limits are per engine: the control plane gives
//! each engine its share of a VIP's.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use crate::net::PrefixSet;
use crate::time::Instant;

/// What one listener admits on this engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListenLimits {
    /// Most connections open at once (TIME-WAIT not counted).
    pub max_conns: Option<u32>,
    /// Most new connections per second from one source address, with
    /// bursts of one second's worth.
    pub per_source_rate: Option<u32>,
    /// Most established connections from one source address at once.
    /// Only connections that completed their handshake count, so SYNs
    /// spoofed from a client's address cannot spend its share.
    pub per_source_conns: Option<u32>,
}

/// SYNs a listener refused, by limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refusals {
    pub conn_limit: u64,
    pub source_rate: u64,
    pub source_conns: u64,
    /// Dropped: the source is denied (`[access] deny`).
    pub denied: u64,
}

/// A listener: an address (or `0.0.0.0`, `::`) and port, its limits and
/// its open connections.
#[derive(Debug)]
pub(super) struct Listener {
    pub addr: IpAddr,
    pub port: u16,
    /// Index of its refusal counts (`None`: not counted apart).
    pub tag: Option<u16>,
    pub limits: ListenLimits,
    /// Still taking connections; one that is not stays until its last
    /// open connection ends, so the count stays right if it comes back.
    pub accepting: bool,
    pub open: u32,
    /// Per-source rates, made when a rate limit is set.
    sources: Option<SourceRates>,
    /// Established connections per source, kept while a per-source cap is
    /// set. At most one entry per connection of the engine (an entry goes
    /// with its source's last connection), so `[tcp] max_connections`
    /// bounds it; keyed by the standard library's randomly keyed SipHash,
    /// so sources chosen to collide cannot slow it.
    source_open: Option<HashMap<u64, u32>>,
    /// The client networks it takes connections from (`None`: any), the
    /// VIP's `allow`, shared read-only with the other engines.
    pub allow: Option<Arc<PrefixSet>>,
}

impl Listener {
    pub fn new(addr: IpAddr, port: u16, limits: ListenLimits, tag: Option<u16>) -> Self {
        let mut l = Self {
            addr,
            port,
            tag,
            limits: ListenLimits::default(),
            accepting: true,
            open: 0,
            sources: None,
            source_open: None,
            allow: None,
        };
        l.set_limits(limits);
        l
    }

    pub fn set_limits(&mut self, limits: ListenLimits) {
        if limits.per_source_rate.is_none() {
            self.sources = None;
        } else if self.sources.is_none() {
            self.sources = Some(SourceRates::new());
        }
        if limits.per_source_conns.is_none() {
            self.source_open = None;
        } else if self.source_open.is_none() {
            // Empty: the engine counts the connections already established
            // (`TcpEngine::recount_sources`).
            self.source_open = Some(HashMap::new());
        }
        self.limits = limits;
    }

    /// Whether it takes connections from `source` (its allow list holds
    /// it, or it has none).
    pub fn allows(&self, source: IpAddr) -> bool {
        self.allow.as_ref().is_none_or(|a| a.contains(source))
    }

    /// Whether it counts established connections per source (a per-source
    /// cap is set).
    pub fn counts_sources(&self) -> bool {
        self.source_open.is_some()
    }

    /// Counts a connection from `source` established before the cap was
    /// set: it stays, even over the cap.
    pub fn source_recounted(&mut self, source: u64) {
        if let Some(open) = self.source_open.as_mut() {
            *open.entry(source).or_insert(0) += 1;
        }
    }

    /// A connection from `source` completed its handshake: it takes its
    /// place in its source's rate (`source_hash` asked for only when a
    /// rate limit is set), and `Ok(true)` when it is counted against a
    /// per-source cap, so that its end is too. Refused when its source
    /// already has the cap established or spent its rate: SYNs admitted
    /// while it had room may complete after it filled. Only completed
    /// handshakes count, so SYNs spoofed from a source spend nothing of
    /// its share.
    pub fn source_established(
        &mut self,
        source: u64,
        source_hash: impl FnOnce() -> u64,
        now: Instant,
    ) -> Result<bool, Refusal> {
        if let (Some(max), Some(open)) = (self.limits.per_source_conns, self.source_open.as_ref()) {
            if open.get(&source).is_some_and(|&n| n >= max) {
                return Err(Refusal::SourceConns);
            }
        }
        if let (Some(rate), Some(t)) = (self.limits.per_source_rate, self.sources.as_mut()) {
            if !t.admit(source, source_hash(), now, rate) {
                return Err(Refusal::SourceRate);
            }
        }
        let (Some(_), Some(open)) = (self.limits.per_source_conns, self.source_open.as_mut())
        else {
            return Ok(false);
        };
        *open.entry(source).or_insert(0) += 1;
        Ok(true)
    }

    /// A counted connection from `source` ended.
    pub fn source_ended(&mut self, source: u64) {
        if let Some(Entry::Occupied(mut e)) = self.source_open.as_mut().map(|o| o.entry(source)) {
            if *e.get() <= 1 {
                e.remove();
            } else {
                *e.get_mut() -= 1;
            }
        }
    }

    /// Whether its connection cap is reached.
    pub fn at_conn_limit(&self) -> bool {
        self.limits.max_conns.is_some_and(|m| self.open >= m)
    }

    /// Whether a SYN from `source` (an IPv4 address, an IPv6 /64:
    /// `FlowAddr::source_id`) may open a connection now; `Err` names the
    /// limit it is over. It spends nothing: a connection counts once its
    /// handshake completes ([`Listener::source_established`]). `source_hash` (the source's keyed hash) is asked
    /// for only when a rate limit is set.
    pub fn admit(
        &mut self,
        source: u64,
        source_hash: impl FnOnce() -> u64,
        now: Instant,
    ) -> Result<(), Refusal> {
        if self.at_conn_limit() {
            return Err(Refusal::ConnLimit);
        }
        if let (Some(max), Some(open)) = (self.limits.per_source_conns, self.source_open.as_ref()) {
            if open.get(&source).is_some_and(|&n| n >= max) {
                return Err(Refusal::SourceConns);
            }
        }
        if let (Some(rate), Some(t)) = (self.limits.per_source_rate, self.sources.as_ref()) {
            if t.spent(source, source_hash(), now, rate) {
                return Err(Refusal::SourceRate);
            }
        }
        Ok(())
    }
}

/// Which limit refused a SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    ConnLimit,
    SourceRate,
    SourceConns,
    Denied,
}

impl Refusals {
    pub(super) fn count(&mut self, r: Refusal) {
        match r {
            Refusal::ConnLimit => self.conn_limit += 1,
            Refusal::SourceRate => self.source_rate += 1,
            Refusal::SourceConns => self.source_conns += 1,
            Refusal::Denied => self.denied += 1,
        }
    }
}

/// Sets of this many sources each (a set's least limited source makes
/// room for a new one).
const WAYS: usize = 4;
const SETS: usize = 1024;

/// New-connection rates of up to `SETS × WAYS` sources at once, as GCRA
/// (a virtual-scheduling token bucket): each source has a theoretical
/// arrival time, one interval later per connection admitted; a connection
/// is admitted while that time is at most a second ahead of now. A
/// source whose time has passed holds nothing more than a new one would,
/// so evicting it forgets nothing; a set of four sources all still
/// limited forgets the least limited. Sets are chosen by a keyed hash, so
/// a client cannot aim its addresses at another's set. Fixed size: 64 KiB.
#[derive(Debug)]
struct SourceRates {
    /// `(source, theoretical arrival time in ns)`.
    entries: Box<[(u64, u64)]>,
}

impl SourceRates {
    fn new() -> Self {
        Self {
            entries: vec![(0, 0); SETS * WAYS].into_boxed_slice(),
        }
    }

    /// Whether `source` has spent its rate now: its next connection
    /// would be refused (nothing changes).
    fn spent(&self, source: u64, hash: u64, now: Instant, rate: u32) -> bool {
        let set = (hash as usize % SETS) * WAYS;
        let Some(&(_, tat)) = self.entries[set..set + WAYS]
            .iter()
            .find(|e| e.0 == source && e.1 != 0)
        else {
            return false;
        };
        let now = now.as_nanos();
        tat.max(now) - now > SECOND - interval(rate).min(SECOND)
    }

    fn admit(&mut self, source: u64, hash: u64, now: Instant, rate: u32) -> bool {
        let interval = interval(rate);
        let now = now.as_nanos();
        let addr = source;
        let set = (hash as usize % SETS) * WAYS;
        let ways = &mut self.entries[set..set + WAYS];
        let i = match ways.iter().position(|e| e.0 == addr && e.1 != 0) {
            Some(i) => i,
            None => {
                // The way whose time is earliest: free if it has passed.
                let (i, _) = ways
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, e)| e.1)
                    .unwrap_or((0, &(0, 0)));
                ways[i] = (addr, 0);
                i
            }
        };
        let tat = ways[i].1.max(now);
        // Burst: `rate` connections at once (the last one's time a
        // second ahead at most).
        if tat - now > SECOND - interval.min(SECOND) {
            return false;
        }
        ways[i].1 = tat + interval;
        true
    }
}

const SECOND: u64 = 1_000_000_000;

/// Nanoseconds between connections at `rate` a second.
fn interval(rate: u32) -> u64 {
    SECOND / u64::from(rate.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    use crate::tcp::FlowAddr;

    fn source(a: Ipv4Addr) -> u64 {
        a.source_id()
    }

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn a_source_gets_its_burst_then_its_rate() {
        let mut t = SourceRates::new();
        let a = source(Ipv4Addr::new(192, 0, 2, 1));
        let admitted = (0..20).filter(|_| t.admit(a, 7, at(1000), 10)).count();
        assert_eq!(admitted, 10, "one second's worth at once");
        assert!(!t.admit(a, 7, at(1050), 10), "the next one is 100 ms away");
        assert!(t.admit(a, 7, at(1100), 10));
        assert!(!t.admit(a, 7, at(1150), 10));
        // Two seconds later the bucket is full again, not fuller.
        let admitted = (0..20).filter(|_| t.admit(a, 7, at(3100), 10)).count();
        assert_eq!(admitted, 10);
    }

    #[test]
    fn sources_are_limited_apart_and_many_fit() {
        let mut t = SourceRates::new();
        let limited = source(Ipv4Addr::new(198, 51, 100, 9));
        while t.admit(limited, 3, at(0), 5) {}
        // Other sources of the same set and of every set go on.
        for i in 0..(SETS * WAYS) as u32 {
            let a = source(Ipv4Addr::from(0x0a00_0000 + i));
            assert!(t.admit(a, u64::from(i), at(0), 5), "{a}");
        }
        // Four newcomers shared its set: the least limited of them made
        // room each time, so it is still limited.
        assert!(!t.admit(limited, 3, at(10), 5));
    }

    #[test]
    fn a_passed_source_makes_room_and_is_forgotten_cleanly() {
        let mut t = SourceRates::new();
        let ways: Vec<u64> = (1..=WAYS as u64 + 1).collect();
        // All in one set, each at its limit at time 0.
        for a in &ways[..WAYS] {
            while t.admit(*a, 0, at(0), 2) {}
        }
        // A fifth source of that set evicts the earliest, still limited:
        // admitted, since it is new.
        assert!(t.admit(ways[WAYS], 0, at(0), 2));
        // Two seconds on every time has passed: all admitted again.
        for a in &ways {
            assert!(t.admit(*a, 0, at(2000), 2), "{a}");
        }
    }

    #[test]
    fn the_connection_cap_counts_open_connections() {
        let mut l = Listener::new(
            Ipv4Addr::new(10, 0, 0, 1).into(),
            443,
            ListenLimits {
                max_conns: Some(2),
                ..ListenLimits::default()
            },
            Some(0),
        );
        let src = source(Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(l.admit(src, || 0, at(0)), Ok(()));
        l.open = 2;
        assert_eq!(l.admit(src, || 0, at(0)), Err(Refusal::ConnLimit));
        l.open = 1;
        assert_eq!(l.admit(src, || 0, at(0)), Ok(()));
    }

    #[test]
    fn the_per_source_cap_counts_established_connections_of_each_source() {
        let mut l = Listener::new(
            Ipv4Addr::new(10, 0, 0, 1).into(),
            443,
            ListenLimits {
                per_source_conns: Some(2),
                ..ListenLimits::default()
            },
            Some(0),
        );
        let (a, b) = (
            source(Ipv4Addr::new(10, 0, 0, 2)),
            source(Ipv4Addr::new(10, 0, 0, 3)),
        );
        // Admitted SYNs count nothing until their handshakes complete;
        // those past the cap are refused as they do.
        for _ in 0..5 {
            assert_eq!(l.admit(a, || 0, at(0)), Ok(()));
        }
        assert_eq!(l.source_established(a, || 0, at(0)), Ok(true));
        assert_eq!(l.source_established(a, || 0, at(0)), Ok(true));
        assert_eq!(
            l.source_established(a, || 0, at(0)),
            Err(Refusal::SourceConns)
        );
        assert_eq!(l.admit(a, || 0, at(0)), Err(Refusal::SourceConns));
        assert_eq!(l.admit(b, || 0, at(0)), Ok(()), "another source");
        l.source_ended(a);
        assert_eq!(l.admit(a, || 0, at(0)), Ok(()));
        l.source_ended(a);
        l.source_ended(a); // one more end than starts: ignored
        assert!(l.source_open.as_ref().is_some_and(HashMap::is_empty));
        // Without the cap nothing is kept or counted.
        l.set_limits(ListenLimits::default());
        assert_eq!(l.source_established(a, || 0, at(0)), Ok(false));
        assert_eq!(l.admit(a, || 0, at(0)), Ok(()));
    }
}
