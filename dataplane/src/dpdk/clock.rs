//! The engine's clock: TSC ticks converted to [`Instant`]s.

use super::{tsc_hz, tsc_now};
use crate::time::Instant;

/// Converts TSC ticks to [`Instant`]s. Made once per engine.
#[derive(Debug, Clone, Copy)]
pub struct TscClock {
    start: u64,
    hz: u64,
}

impl TscClock {
    pub fn new() -> Self {
        Self {
            start: tsc_now(),
            hz: tsc_hz(),
        }
    }

    /// Ticks per second.
    pub fn hz(&self) -> u64 {
        self.hz
    }

    /// Current TSC value.
    #[inline]
    pub fn ticks(&self) -> u64 {
        tsc_now()
    }

    /// Converts a TSC value to engine time (a value before this clock's
    /// start is its start, not a wrap to centuries ahead).
    #[inline]
    pub fn at(&self, ticks: u64) -> Instant {
        let dt = u128::from(ticks.saturating_sub(self.start));
        Instant::from_nanos((dt * 1_000_000_000 / u128::from(self.hz.max(1))) as u64)
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
