//! How much TLS handshake work one loop iteration may do
//! (docs/architecture.md, "Loop and roles").
//!
//! A handshake step (a ClientHello's signature and key exchange, a TLS
//! 1.2 ClientKeyExchange, a Finished) holds the loop while it runs, from
//! a few microseconds to milliseconds (an RSA-4096 signature). Counting
//! steps bounds the loop badly: eight RSA-2048 ClientHellos are 3 ms,
//! eight Finished messages a few microseconds. The budget is time
//! instead, read from the TSC around each step: steps start while some
//! of it is left, and the first step of an iteration always does, so an
//! iteration spends at most the budget plus one step.

use std::time::Duration;

use crate::dpdk::{tsc_hz, tsc_now};

/// One iteration's handshake time, in TSC ticks.
#[derive(Debug, Clone)]
pub struct HandshakeBudget {
    per_iteration: u64,
    left: u64,
    steps: u32,
}

/// A step under way: when it started.
#[derive(Debug, Clone, Copy)]
pub struct Step(u64);

impl HandshakeBudget {
    /// `per_iteration` of handshake work per loop iteration.
    pub fn new(per_iteration: Duration) -> Self {
        let ticks = u128::from(tsc_hz()) * per_iteration.as_nanos() / 1_000_000_000;
        let per_iteration = u64::try_from(ticks).unwrap_or(u64::MAX);
        Self {
            per_iteration,
            left: per_iteration,
            steps: 0,
        }
    }

    /// A new iteration: the whole budget again.
    pub fn refill(&mut self) {
        self.left = self.per_iteration;
        self.steps = 0;
    }

    /// Whether a step may start now.
    pub fn allows(&self) -> bool {
        self.left > 0 || self.steps == 0
    }

    /// A step starts (after [`HandshakeBudget::allows`]).
    pub fn start(&self) -> Step {
        Step(tsc_now())
    }

    /// The step that began at `step` ended: its time is spent.
    pub fn charge(&mut self, step: Step) {
        self.charge_ticks(tsc_now().saturating_sub(step.0));
    }

    fn charge_ticks(&mut self, ticks: u64) {
        self.left = self.left.saturating_sub(ticks);
        self.steps = self.steps.saturating_add(1);
    }

    /// Steps taken in this iteration.
    #[cfg(test)]
    fn steps(&self) -> u32 {
        self.steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_budget_still_takes_one_step_per_iteration() {
        let mut b = HandshakeBudget::new(Duration::ZERO);
        assert!(b.allows());
        let s = b.start();
        b.charge(s);
        assert!(!b.allows());
        b.refill();
        assert!(b.allows());
    }

    /// Steps go on while time is left, whatever they cost: many cheap
    /// ones, or one that overruns and ends the iteration's share.
    #[test]
    fn steps_are_charged_their_time_not_counted() {
        let hz = tsc_hz();
        let mut b = HandshakeBudget::new(Duration::from_micros(500));
        let micro = hz / 1_000_000;
        for _ in 0..100 {
            assert!(b.allows());
            b.charge_ticks(micro); // a Finished: about a microsecond
        }
        assert_eq!(b.steps(), 100);
        assert!(b.allows(), "400 µs left");
        b.charge_ticks(450 * micro); // an RSA-2048 ClientHello
        assert!(!b.allows());
        b.refill();
        b.charge_ticks(10_000 * micro); // one step far over the budget
        assert!(!b.allows());
        assert_eq!(b.steps(), 1);
    }
}
