//! The client addresses the listeners' limits refused lately, per VIP, for
//! `dpctl sources --refused` (docs/control-api.md): who is over the
//! limits, or knocking while denied.
//!
//! A fixed table of [`SETS`] × [`WAYS`] entries per window, sets chosen by
//! the engine's keyed hash of the source (so a client cannot aim its
//! addresses at another's set). A source not in its set takes the way
//! that counted least (Space-Saving, per set): a flood from many
//! addresses churns the ways of singletons and leaves a source that is
//! refused often where it is. Counts are from when the entry was made.
//! Two windows of [`WINDOW`]: what is listed is the current one and the
//! one before, so the last one to two minutes. Fixed size: 2 × 64 KiB;
//! no allocation after it is made.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use super::limits::Refusal;
use crate::time::Instant;

const WAYS: usize = 8;
const SETS: usize = 256;
/// How long a window counts.
pub const WINDOW: Duration = Duration::from_secs(60);

/// One source's refusals at one VIP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Way {
    /// [`super::FlowAddr::source_id`] of the address.
    source: u64,
    /// 0: free; 4 or 6: the address family.
    family: u8,
    /// The VIP's counter slot (`u16::MAX`: a listener without one).
    vip: u16,
    /// By [`Refusal`]: connection cap, source rate, source cap, denied.
    counts: [u32; 4],
}

impl Way {
    fn total(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).sum()
    }
}

/// A source refused at a VIP, as [`RefusedTable::top`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusedSource {
    /// The address, or an IPv6 /64's first address.
    pub source: IpAddr,
    /// The VIP's counter slot (`None`: a listener without one).
    pub vip: Option<u16>,
    /// SYNs (or handshakes) refused by the VIP's connection cap, the
    /// source's rate, the source's cap, and dropped for a denied source.
    pub conn_limit: u64,
    pub source_rate: u64,
    pub source_conns: u64,
    pub denied: u64,
}

impl RefusedSource {
    pub fn total(&self) -> u64 {
        self.conn_limit + self.source_rate + self.source_conns + self.denied
    }
}

/// See the module's documentation.
#[derive(Debug)]
pub(super) struct RefusedTable {
    /// The current window, then the one before.
    windows: [Box<[Way]>; 2],
    /// When the current window ends (`None`: nothing counted yet).
    ends: Option<Instant>,
}

impl RefusedTable {
    pub(super) fn new() -> Self {
        let empty = || vec![Way::default(); SETS * WAYS].into_boxed_slice();
        Self {
            windows: [empty(), empty()],
            ends: None,
        }
    }

    /// Moves the windows on to `now`'s.
    fn roll(&mut self, now: Instant) {
        let Some(ends) = self.ends else {
            self.ends = Some(now + WINDOW);
            return;
        };
        if now < ends {
            return;
        }
        self.windows.swap(0, 1);
        self.windows[0].fill(Way::default());
        if now >= ends + WINDOW {
            // Nothing counted for a whole window: the one before is empty.
            self.windows[1].fill(Way::default());
        }
        let whole = (now - ends).as_nanos() / WINDOW.as_nanos();
        self.ends = Some(ends + WINDOW * (whole as u32 + 1));
    }

    /// Counts a refusal of `source` (`v6`: an IPv6 /64) at VIP slot
    /// `vip`; `hash` is the engine's keyed hash of `source`.
    pub(super) fn record(
        &mut self,
        source: u64,
        v6: bool,
        vip: Option<u16>,
        hash: u64,
        why: Refusal,
        now: Instant,
    ) {
        self.roll(now);
        let family = if v6 { 6 } else { 4 };
        let vip = vip.unwrap_or(u16::MAX);
        let set = (hash as usize % SETS) * WAYS;
        let ways = &mut self.windows[0][set..set + WAYS];
        let same = |w: &Way| w.family == family && w.source == source && w.vip == vip;
        let i = match ways.iter().position(same) {
            Some(i) => i,
            None => {
                let least = ways.iter().enumerate().min_by_key(|(_, w)| w.total());
                let i = least.map_or(0, |(i, _)| i);
                ways[i] = Way {
                    source,
                    family,
                    vip,
                    counts: [0; 4],
                };
                i
            }
        };
        let n = &mut ways[i].counts[why as usize];
        *n = n.saturating_add(1);
    }

    /// The `max` sources refused most in the last one to two windows (at
    /// VIP slot `vip` only, when given), most first.
    pub(super) fn top(&mut self, vip: Option<u16>, max: usize, now: Instant) -> Vec<RefusedSource> {
        self.roll(now);
        let mut all: std::collections::HashMap<(u8, u64, u16), [u64; 4]> =
            std::collections::HashMap::new();
        for w in self.windows.iter().flat_map(|w| w.iter()) {
            if w.family == 0 || vip.is_some_and(|v| v != w.vip) {
                continue;
            }
            let sum = all.entry((w.family, w.source, w.vip)).or_default();
            for (s, &c) in sum.iter_mut().zip(&w.counts) {
                *s += u64::from(c);
            }
        }
        let mut list: Vec<RefusedSource> = all
            .into_iter()
            .map(|((family, source, vip), c)| RefusedSource {
                source: if family == 6 {
                    IpAddr::V6(Ipv6Addr::from(u128::from(source) << 64))
                } else {
                    IpAddr::V4(Ipv4Addr::from(source as u32))
                },
                vip: (vip != u16::MAX).then_some(vip),
                conn_limit: c[0],
                source_rate: c[1],
                source_conns: c[2],
                denied: c[3],
            })
            .collect();
        list.sort_unstable_by(|a, b| {
            (b.total(), a.source, a.vip).cmp(&(a.total(), b.source, b.vip))
        });
        list.truncate(max);
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    fn v4(i: u32) -> u64 {
        u64::from(0x6440_0000 + i)
    }

    #[test]
    fn a_source_refused_often_stays_listed_through_a_flood_of_singletons() {
        let mut t = RefusedTable::new();
        let heavy = v4(7);
        for k in 0..2_000u32 {
            t.record(heavy, false, Some(0), 42, Refusal::SourceRate, at(1));
            if k % 10 == 0 {
                t.record(heavy, false, Some(0), 42, Refusal::Denied, at(1));
            }
            // Fifty singletons between two of its refusals, some in its set.
            for s in 0..50u32 {
                let i = 10_000 + k * 50 + s;
                let hash = if s % 5 == 0 { 42 } else { u64::from(i) };
                t.record(v4(i), false, Some(0), hash, Refusal::ConnLimit, at(2));
            }
        }
        let top = t.top(None, 3, at(3));
        assert_eq!(top[0].source, IpAddr::from(Ipv4Addr::from(0x6440_0007)));
        assert_eq!((top[0].source_rate, top[0].denied), (2_000, 200));
        assert_eq!(top[0].vip, Some(0));
        assert!(top[1].total() <= 2, "{top:?}");
        // The VIP filter, and a VIP of its own for the same source.
        t.record(heavy, false, Some(3), 42, Refusal::SourceConns, at(4));
        let at3 = t.top(Some(3), 10, at(5));
        assert_eq!(at3.len(), 1);
        assert_eq!(
            (at3[0].vip, at3[0].source_conns, at3[0].total()),
            (Some(3), 1, 1)
        );
    }

    #[test]
    fn a_window_is_64_kib() {
        assert_eq!(std::mem::size_of::<Way>() * SETS * WAYS, 64 << 10);
    }

    #[test]
    fn windows_keep_the_last_minute_or_two_and_families_apart() {
        let mut t = RefusedTable::new();
        t.record(1, false, None, 1, Refusal::ConnLimit, at(0));
        t.record(1, true, None, 1, Refusal::ConnLimit, at(0));
        t.record(1, true, None, 1, Refusal::ConnLimit, at(0));
        let top = t.top(None, 10, at(59_000));
        assert_eq!(top.len(), 2);
        assert_eq!(top[0].source, "0:0:0:1::".parse::<IpAddr>().unwrap());
        assert_eq!((top[0].total(), top[0].vip), (2, None));
        assert_eq!(top[1].source, IpAddr::from(Ipv4Addr::new(0, 0, 0, 1)));
        // The next window lists the one before too; the one after not.
        t.record(1, false, None, 1, Refusal::ConnLimit, at(61_000));
        let v4_total = |t: &mut RefusedTable, ms| {
            let top = t.top(None, 10, at(ms));
            top.iter()
                .filter(|r| r.source.is_ipv4())
                .map(RefusedSource::total)
                .sum::<u64>()
        };
        assert_eq!(v4_total(&mut t, 100_000), 2);
        assert_eq!(v4_total(&mut t, 130_000), 1);
        assert_eq!(v4_total(&mut t, 185_000), 0);
        // Quiet for minutes: nothing left.
        t.record(9, false, None, 9, Refusal::Denied, at(190_000));
        assert_eq!(t.top(None, 10, at(600_000)).len(), 0);
    }
}
