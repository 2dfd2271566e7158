//! Listeners and what they admit: a cap on open connections and a rate
//! of new connections per source address (docs/architecture.md, "Limits").
//! A SYN over either gets a reset and is counted under the listener's tag
//! (a VIP's counter slot). Limits are per engine: the control plane gives
//! each engine its share of a VIP's.

use std::net::IpAddr;

use crate::time::Instant;

/// What one listener admits on this engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListenLimits {
    /// Most connections open at once (TIME-WAIT not counted).
    pub max_conns: Option<u32>,
    /// Most new connections per second from one source address, with
    /// bursts of one second's worth.
    pub per_source_rate: Option<u32>,
}

/// SYNs a listener refused, by limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refusals {
    pub conn_limit: u64,
    pub source_rate: u64,
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
        self.limits = limits;
    }

    /// Whether its connection cap is reached.
    pub fn at_conn_limit(&self) -> bool {
        self.limits.max_conns.is_some_and(|m| self.open >= m)
    }

    /// Whether a SYN from `source` (an IPv4 address, an IPv6 /64:
    /// `FlowAddr::source_id`) may open a connection now; `Err` names the
    /// limit it is over. `source_hash` (the source's keyed hash) is asked
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
        if let (Some(rate), Some(t)) = (self.limits.per_source_rate, self.sources.as_mut()) {
            if !t.admit(source, source_hash(), now, rate) {
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
}

impl Refusals {
    pub(super) fn count(&mut self, r: Refusal) {
        match r {
            Refusal::ConnLimit => self.conn_limit += 1,
            Refusal::SourceRate => self.source_rate += 1,
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

    fn admit(&mut self, source: u64, hash: u64, now: Instant, rate: u32) -> bool {
        const SECOND: u64 = 1_000_000_000;
        let interval = SECOND / u64::from(rate.max(1));
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
                per_source_rate: None,
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
}
