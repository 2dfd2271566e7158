//! Engine time: nanoseconds on a monotonic clock, read by the engine loop
//! (from the TSC: `dpdk::TscClock`) and passed down to everything else,
//! which never reads a clock itself. Pure: no DPDK here.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in engine time (nanoseconds since an arbitrary start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    pub const ZERO: Self = Self(0);

    pub const fn from_nanos(ns: u64) -> Self {
        Self(ns)
    }

    pub const fn from_millis(ms: u64) -> Self {
        Self(ms * 1_000_000)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Self;
    fn add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(d.as_nanos() as u64))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

/// Engine time made from clock readings so that it never goes back: a
/// reading earlier than the last one given out (a time stamp counter
/// stepped back by a hypervisor, or read on a core whose counter lags)
/// gives the last time again, and is counted. Timers, RTT samples and TCP
/// timestamps rely on it: a TSval that went back would be an old
/// duplicate to every peer's PAWS check (RFC 7323 §5.3), and each of
/// its connections would stall until the clock caught up.
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicTime {
    last: Instant,
    steps_back: u64,
}

impl MonotonicTime {
    /// Engine time for `reading`: `reading`, or the last time given out
    /// when `reading` is earlier.
    #[inline]
    pub fn at(&mut self, reading: Instant) -> Instant {
        if reading < self.last {
            self.steps_back += 1;
            return self.last;
        }
        self.last = reading;
        reading
    }

    /// Readings that were earlier than the time already given out.
    pub fn steps_back(&self) -> u64 {
        self.steps_back
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock that steps back is held at the latest time until it has
    /// caught up; each step back is counted once per reading.
    #[test]
    fn engine_time_never_goes_back() {
        let mut t = MonotonicTime::default();
        let readings = [5, 9, 7, 8, 9, 12, 3, 12, 13];
        let given: Vec<u64> = readings
            .iter()
            .map(|&ms| t.at(Instant::from_millis(ms)).as_nanos() / 1_000_000)
            .collect();
        assert_eq!(given, [5, 9, 9, 9, 9, 12, 12, 12, 13]);
        assert_eq!(t.steps_back(), 3);
    }
}
