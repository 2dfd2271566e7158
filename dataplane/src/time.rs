//! Engine time: nanoseconds on a monotonic clock, read from the TSC by the
//! engine loop and passed down to everything else (which never reads a
//! clock itself).

use std::ops::{Add, Sub};
use std::time::Duration;

use crate::dpdk;

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

/// Converts TSC ticks to [`Instant`]s. Made once per engine.
#[derive(Debug, Clone, Copy)]
pub struct TscClock {
    start: u64,
    hz: u64,
}

impl TscClock {
    pub fn new() -> Self {
        Self {
            start: dpdk::tsc_now(),
            hz: dpdk::tsc_hz(),
        }
    }

    /// Ticks per second.
    pub fn hz(&self) -> u64 {
        self.hz
    }

    /// Current TSC value.
    #[inline]
    pub fn ticks(&self) -> u64 {
        dpdk::tsc_now()
    }

    /// Converts a TSC value to engine time.
    #[inline]
    pub fn at(&self, ticks: u64) -> Instant {
        let dt = u128::from(ticks.wrapping_sub(self.start));
        Instant((dt * 1_000_000_000 / u128::from(self.hz)) as u64)
    }

    /// Engine time now.
    #[inline]
    pub fn now(&self) -> Instant {
        self.at(self.ticks())
    }
}

impl Default for TscClock {
    fn default() -> Self {
        Self::new()
    }
}
