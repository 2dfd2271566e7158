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
