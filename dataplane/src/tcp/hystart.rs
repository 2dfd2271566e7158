//! HyStart++ (RFC 9406): the first slow start ends when the round trip
//! grows, before a queue on the path overflows.
//!
//! Slow start doubles the window each round trip until a loss; by then
//! the window is up to twice what the path holds and a whole round's
//! excess is lost at once. HyStart++ watches the lowest RTT of each round
//! (from its first eight samples on): once it has grown by an eighth of
//! the last round's (at least 4 ms, at most 16 ms) a queue is building,
//! and the window grows a quarter as fast (Conservative Slow Start, CSS).
//! If the RTT falls back below where CSS began, that was jitter and slow
//! start goes on; after five rounds of CSS, congestion avoidance begins.
//!
//! Only the first slow start (RFC 9406 §4.3): after a loss, ssthresh
//! already says where to stop. Rounds with fewer than eight samples (a
//! connection without timestamps times one segment a round) never end
//! it. Our TSval clock ticks in milliseconds, so paths are judged from
//! 1 ms up, below the 4 ms threshold. The per-ACK cap on growth without
//! pacing (L = 8 segments) is left out, as slow start here counts bytes
//! acknowledged (RFC 3465) so stretch ACKs from GRO receivers do not slow
//! it.

use std::time::Duration;

use super::Seq;

/// RFC 9406 §4.2's constants.
const MIN_RTT_THRESH: Duration = Duration::from_millis(4);
const MAX_RTT_THRESH: Duration = Duration::from_millis(16);
const MIN_RTT_DIVISOR: u32 = 8;
const N_RTT_SAMPLE: u8 = 8;
/// How much slower the window grows in CSS.
pub(super) const CSS_GROWTH_DIVISOR: u32 = 4;
const CSS_ROUNDS: u8 = 5;

/// No round minimum yet.
const NONE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    SlowStart,
    /// Conservative Slow Start, for this many rounds so far.
    Css(u8),
    /// After the first slow start.
    Off,
}

/// How an ACK in slow start grows the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Growth {
    /// By the bytes it acknowledged.
    Full,
    /// By a quarter of them (CSS).
    Conservative,
    /// Not: slow start is over, ssthresh is the window now.
    End,
}

/// HyStart++'s state for one connection (RFC 9406 §4.2).
#[derive(Debug, Clone, Copy)]
pub(super) struct HyStart {
    phase: Phase,
    /// The round ends when this is acknowledged (windowEnd).
    window_end: Seq,
    /// The lowest RTT of the last round and of this one, in µs
    /// (lastRoundMinRTT, currentRoundMinRTT; `NONE` when unknown).
    last_round_min: u32,
    round_min: u32,
    /// RTT samples this round (rttSampleCount).
    samples: u8,
    /// The round minimum when CSS began (cssBaselineMinRtt).
    css_baseline: u32,
}

impl HyStart {
    /// A connection whose first round ends when `end` is acknowledged;
    /// `on`: HyStart++ at all (else slow start is plain).
    pub fn new(end: Seq, on: bool) -> Self {
        Self {
            phase: if on { Phase::SlowStart } else { Phase::Off },
            window_end: end,
            last_round_min: NONE,
            round_min: NONE,
            samples: 0,
            css_baseline: NONE,
        }
    }

    /// An ACK in slow start moved SND.UNA to `una`, with SND.NXT at `nxt`
    /// and `rtt` its round-trip sample, if it had one. Returns how the
    /// window grows, and whether CSS began with it.
    pub fn on_ack(&mut self, una: Seq, nxt: Seq, rtt: Option<Duration>) -> (Growth, bool) {
        if self.phase == Phase::Off {
            return (Growth::Full, false);
        }
        if una.diff(self.window_end) >= 0 {
            // The round is over; the next ends with what is sent by now.
            if let Phase::Css(rounds) = self.phase {
                if rounds + 1 >= CSS_ROUNDS {
                    self.phase = Phase::Off;
                    return (Growth::End, false);
                }
                self.phase = Phase::Css(rounds + 1);
            }
            self.last_round_min = self.round_min;
            self.round_min = NONE;
            self.samples = 0;
            self.window_end = nxt;
        }
        if let Some(r) = rtt {
            let us = u32::try_from(r.as_micros()).unwrap_or(NONE - 1);
            self.round_min = self.round_min.min(us);
            self.samples = self.samples.saturating_add(1);
        }
        let judged = self.samples >= N_RTT_SAMPLE && self.round_min != NONE;
        match self.phase {
            Phase::SlowStart if judged && self.last_round_min != NONE => {
                let thresh =
                    Duration::from_micros(u64::from(self.last_round_min / MIN_RTT_DIVISOR))
                        .clamp(MIN_RTT_THRESH, MAX_RTT_THRESH);
                let thresh = thresh.as_micros() as u32;
                if self.round_min >= self.last_round_min.saturating_add(thresh) {
                    self.css_baseline = self.round_min;
                    self.phase = Phase::Css(0);
                    return (Growth::Conservative, true);
                }
                (Growth::Full, false)
            }
            Phase::Css(_) if judged && self.round_min < self.css_baseline => {
                // The RTT came back down: jitter, not a queue.
                self.css_baseline = NONE;
                self.phase = Phase::SlowStart;
                (Growth::Full, false)
            }
            Phase::Css(_) => (Growth::Conservative, false),
            _ => (Growth::Full, false),
        }
    }

    /// A congestion event: HyStart++ is for the first slow start only.
    pub fn off(&mut self) {
        self.phase = Phase::Off;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    /// Feeds one round of `samples` ACKs with RTT `rtt`, the round ending
    /// at `*end` (then the next at `*end + 100`). Returns what the last
    /// ACK did.
    fn round(h: &mut HyStart, end: &mut u32, samples: u32, rtt: u64) -> (Growth, bool) {
        let mut out = (Growth::Full, false);
        for i in 0..samples {
            let una = if i == 0 { *end } else { *end + i };
            out = h.on_ack(Seq(una), Seq(*end + 100), ms(rtt));
            if out.1 || out.0 == Growth::End {
                break;
            }
        }
        *end += 100;
        out
    }

    #[test]
    fn a_round_trip_grown_by_the_threshold_starts_css_and_five_rounds_end_slow_start() {
        let mut h = HyStart::new(Seq(0), true);
        let mut end = 0;
        // 20 ms rounds: the threshold is max(4, min(20/8, 16)) = 4 ms.
        assert_eq!(round(&mut h, &mut end, 10, 20), (Growth::Full, false));
        assert_eq!(round(&mut h, &mut end, 10, 23), (Growth::Full, false));
        assert_eq!(
            round(&mut h, &mut end, 10, 27),
            (Growth::Conservative, true)
        );
        // CSS: a quarter's growth for five rounds, then the end.
        for _ in 0..4 {
            assert_eq!(
                round(&mut h, &mut end, 10, 28),
                (Growth::Conservative, false)
            );
        }
        assert_eq!(
            h.on_ack(Seq(end), Seq(end + 100), ms(28)),
            (Growth::End, false)
        );
        assert_eq!(
            h.on_ack(Seq(end + 1), Seq(end + 100), ms(90)),
            (Growth::Full, false)
        );
    }

    #[test]
    fn a_round_trip_back_below_css_s_start_resumes_slow_start() {
        let mut h = HyStart::new(Seq(0), true);
        let mut end = 0;
        round(&mut h, &mut end, 10, 100);
        // 100 ms: the threshold is 12.5 ms; then 14 ms.
        assert_eq!(round(&mut h, &mut end, 10, 112), (Growth::Full, false));
        assert_eq!(
            round(&mut h, &mut end, 10, 126),
            (Growth::Conservative, true)
        );
        assert_eq!(round(&mut h, &mut end, 10, 120), (Growth::Full, false));
        assert_eq!(h.phase, Phase::SlowStart);
    }

    #[test]
    fn fewer_than_eight_samples_a_round_or_a_loss_never_start_css() {
        let mut h = HyStart::new(Seq(0), true);
        let mut end = 0;
        round(&mut h, &mut end, 7, 10);
        assert_eq!(round(&mut h, &mut end, 7, 200), (Growth::Full, false));
        let mut h = HyStart::new(Seq(0), true);
        let mut end = 0;
        round(&mut h, &mut end, 10, 10);
        h.off();
        assert_eq!(round(&mut h, &mut end, 10, 200), (Growth::Full, false));
    }
}
