//! CUBIC congestion control (RFC 9438) for the congestion-avoidance phase;
//! slow start and loss recovery stay RFC 5681/6582/6675 as in `conn`.
//! Windows are in bytes outside, in segments inside (as the RFC writes them).

use std::time::Duration;

use crate::time::Instant;

/// RFC 9438 §4.1: C and β_cubic.
const C: f64 = 0.4;
const BETA: f64 = 0.7;
/// α_cubic for the Reno-friendly estimate (RFC 9438 §4.3).
const ALPHA: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);

/// CUBIC's state for one connection.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cubic {
    /// Window before the last reduction, in segments.
    w_max: f64,
    /// Start of the current congestion-avoidance epoch.
    epoch: Option<Instant>,
    /// Time to reach `w_max` from the epoch's start, in seconds.
    k: f64,
    /// Reno-friendly window estimate, in segments.
    w_est: f64,
    /// The window at the epoch's start, in segments.
    cwnd_epoch: f64,
}

impl Cubic {
    /// A congestion event (RFC 9438 §4.6, with fast convergence §4.7):
    /// returns the new slow-start threshold in bytes.
    pub fn on_congestion(&mut self, cwnd: u32, mss: u32) -> u32 {
        let w = f64::from(cwnd) / f64::from(mss);
        self.w_max = if w < self.w_max {
            w * (1.0 + BETA) / 2.0
        } else {
            w
        };
        self.epoch = None;
        ((f64::from(cwnd) * BETA) as u32).max(2 * mss)
    }

    /// W_max, in segments: kept before a congestion event that may prove
    /// spurious.
    pub fn w_max(&self) -> f64 {
        self.w_max
    }

    /// The congestion event was spurious (RFC 9438 §4.9): W_max as it was
    /// before it, and a new epoch (K from the window it finds).
    pub fn restore(&mut self, w_max: f64) {
        self.w_max = w_max;
        self.epoch = None;
    }

    /// The window after `acked` bytes were acknowledged in congestion
    /// avoidance, given the smoothed RTT.
    pub fn on_ack(&mut self, now: Instant, acked: u32, cwnd: u32, mss: u32, srtt: Duration) -> u32 {
        let mss_f = f64::from(mss);
        let w = f64::from(cwnd) / mss_f;
        let epoch = *self.epoch.get_or_insert_with(|| {
            // RFC 9438 §4.2: K from the distance to w_max.
            self.k = if w < self.w_max {
                ((self.w_max - w) / C).cbrt()
            } else {
                0.0
            };
            if w >= self.w_max {
                self.w_max = w;
            }
            self.w_est = w;
            self.cwnd_epoch = w;
            now
        });
        let t = (now - epoch).as_secs_f64() + srtt.as_secs_f64();
        let target = (C * (t - self.k).powi(3) + self.w_max).clamp(w, 1.5 * w);
        // Reno-friendly region (§4.3).
        self.w_est += ALPHA * (f64::from(acked) / mss_f) / w;
        let next = if self.w_est > target {
            self.w_est
        } else {
            // Concave/convex region (§4.4, §4.5): approach the target.
            w + (target - w) / w * (f64::from(acked) / mss_f)
        };
        ((next * mss_f) as u32).max(cwnd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RTTs until the window is back at 100 segments after a loss at 100,
    /// and the window after 1000 RTTs.
    fn regrow(rtt: Duration) -> (u32, u32) {
        let mss = 1000;
        let mut c = Cubic::default();
        let ssthresh = c.on_congestion(100 * mss, mss);
        assert_eq!(ssthresh, 70 * mss, "β = 0.7");
        let mut cwnd = ssthresh;
        let mut now = Instant::from_millis(1000);
        let mut reached = None;
        for step in 0..1000 {
            for _ in 0..cwnd / mss {
                cwnd = c.on_ack(now, mss, cwnd, mss, rtt);
            }
            now = now + rtt;
            if reached.is_none() && cwnd >= 100 * mss {
                reached = Some(step);
            }
        }
        (reached.expect("w_max reached again"), cwnd / mss)
    }

    #[test]
    fn cubic_region_on_long_paths() {
        // K = cbrt(30 / 0.4) ≈ 4.2 s = 42 RTTs of 100 ms; Reno would need
        // 30 / α ≈ 57 RTTs, so the cubic curve leads.
        let (r, end) = regrow(Duration::from_millis(100));
        assert!((35..=55).contains(&r), "reached w_max after {r} RTTs");
        assert!(end > 150, "then probes beyond w_max (convex region): {end}");
    }

    #[test]
    fn reno_friendly_region_on_short_paths() {
        // At 10 ms, K is 420 RTTs away: the Reno-friendly estimate leads.
        let (r, _) = regrow(Duration::from_millis(10));
        assert!((50..=60).contains(&r), "reached w_max after {r} RTTs");
    }

    #[test]
    fn fast_convergence_lowers_w_max() {
        let mut c = Cubic::default();
        c.on_congestion(100_000, 1000);
        c.on_congestion(80_000, 1000);
        assert!((c.w_max - 80.0 * 0.85).abs() < 1e-9, "{}", c.w_max);
    }
}
