//! RACK (RFC 8985 §6): first transmissions found lost by when they were
//! sent, not by how many segments were SACKed above them.
//!
//! The send log keeps, for the data in flight, when each stretch of it
//! first went out. A connection sends in sequence order, so send order is
//! sequence order: a stretch is the data that went out at one instant
//! (one `transmit`), and RFC 8985's "sent before the latest delivered
//! segment" is "below it". The log is a fixed eight entries; when a ninth
//! stretch goes out, the two neighbours closest in time become one, which
//! keeps their later time (so a loss is never declared early, only up to
//! that gap late) and remembers that it was merged (so the time of its
//! earliest byte is only known to be after the entry before it).
//!
//! Retransmissions are not logged: holes resent in recovery have their
//! own rule (`Conn::rack_lost_retransmissions`), a probe that resent the
//! tail is left out of RACK's delivered segment, and after an RTO the log
//! starts again, with the go-back-N resends as its new first sends.

use std::time::Duration;

use super::sack::Scoreboard;
use crate::tcp::Seq;
use crate::time::Instant;

const ENTRIES: usize = 8;

/// Microseconds on the engine's clock, wrapping every 71 minutes: a span
/// in flight is far shorter (at most `max_retransmits` RTOs).
type Micros = u32;

fn micros(t: Instant) -> Micros {
    (t.as_nanos() / 1000) as u32
}

/// `a − b` in µs, negative when `a` is earlier.
fn since(a: Micros, b: Micros) -> i64 {
    i64::from(a.wrapping_sub(b) as i32)
}

/// When stretches of the data in flight first went out (see the module).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SendLog {
    /// Where each stretch ends, and when its last byte went out; ascending.
    ends: [Seq; ENTRIES],
    at: [Micros; ENTRIES],
    /// Bit i: entry i took in the entry before it, so its first byte went
    /// out after the time of the entry before (or `floor`), not at `at[i]`.
    merged: u8,
    len: u8,
    /// The time of the last entry pruned, or of the RTO that cleared the
    /// log: the lower bound for entry 0.
    floor: Micros,
    /// Cleared by an RTO: the next entry also covers the go-back-N resends
    /// before it, so it counts as merged.
    restarted: bool,
}

impl SendLog {
    /// Data up to `end` (above what was logged) went out at `now`.
    pub fn record(&mut self, end: Seq, now: Instant) {
        let now = micros(now);
        let n = usize::from(self.len);
        if n > 0 && self.ends[n - 1].diff(end) >= 0 {
            return;
        }
        if n > 0 && self.at[n - 1] == now {
            self.ends[n - 1] = end;
            return;
        }
        if n == ENTRIES {
            // Merge the neighbours closest in time: entry i into i + 1.
            let i = (0..ENTRIES - 1)
                .min_by_key(|&i| since(self.at[i + 1], self.at[i]))
                .unwrap_or(0);
            self.remove(i);
            self.merged |= 1 << i;
        }
        let n = usize::from(self.len);
        self.ends[n] = end;
        self.at[n] = now;
        self.merged &= !(1 << n);
        if n == 0 && self.restarted {
            self.merged |= 1;
            self.restarted = false;
        }
        self.len += 1;
    }

    /// Entry `i` goes; those above move down one.
    fn remove(&mut self, i: usize) {
        let n = usize::from(self.len);
        self.ends.copy_within(i + 1..n, i);
        self.at.copy_within(i + 1..n, i);
        // In u16: for the last entry, i + 1 is the width of a u8.
        let merged = u16::from(self.merged);
        let below = merged & ((1 << i) - 1);
        self.merged = (below | ((merged >> (i + 1)) << i)) as u8;
        self.len -= 1;
    }

    /// Forgets stretches acknowledged up to `una`.
    pub fn prune(&mut self, una: Seq) {
        while self.len > 0 && self.ends[0].diff(una) <= 0 {
            self.floor = self.at[0];
            self.remove(0);
        }
    }

    /// Forgets everything (an RTO at `now`: what is in flight goes again
    /// in order, unlogged, before the next new data).
    pub fn clear(&mut self, now: Instant) {
        self.len = 0;
        self.merged = 0;
        self.floor = micros(now);
        self.restarted = true;
    }

    /// When the byte at `seq` first went out: (no earlier than, no later
    /// than). None when it is not in the log.
    fn sent(&self, seq: Seq) -> Option<(Micros, Micros)> {
        let i = self.ends[..usize::from(self.len)]
            .iter()
            .position(|&e| e.diff(seq) > 0)?;
        let earliest = match (self.merged & (1 << i) != 0, i) {
            (false, _) => self.at[i],
            (true, 0) => self.floor,
            (true, _) => self.at[i - 1],
        };
        Some((earliest, self.at[i]))
    }
}

/// RACK's state (RFC 8985 §6.1) over the send log.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Rack {
    pub log: SendLog,
    /// RACK.end_seq: the end of the latest-sent first transmission
    /// delivered (SACKed or acknowledged); None before one is.
    end: Option<Seq>,
    /// RACK.rtt, from the earliest it can have been sent: the longest it
    /// can have taken, so losses are not declared early.
    rtt: Micros,
    /// RACK.min_RTT (µs; 0: none yet).
    min_rtt: Micros,
    /// RACK.reo_wnd_mult − 1: how many quarters of the minimum RTT past
    /// the first the reordering window is (§6.2 step 4).
    reo_wnd_extra: u8,
    /// RACK.reo_wnd_persist: recoveries left before a widened window
    /// narrows to its base again.
    reo_wnd_persist: u8,
    /// RACK.dsack_round: D-SACKs widen the window once per round trip,
    /// until SND.UNA passes this (SND.NXT when the first came).
    dsack_round: Option<Seq>,
    /// RACK.reordering_seen: the peer reported a duplicate (a D-SACK: our
    /// retransmission was not needed), or a hole below SACKed data filled
    /// before anything was resent into it.
    reordering_seen: bool,
}

/// Recoveries a widened reordering window outlives without a D-SACK
/// (RFC 8985 §6.2 step 4).
const REO_WND_PERSIST: u8 = 16;

impl Rack {
    /// SND.UNA moved to `ack` at `now`: a sample for RACK.min_RTT, in
    /// microseconds from the send log, not from the millisecond
    /// timestamps (a path of a millisecond or less would read 0). The
    /// newest byte acknowledged went out no earlier than the log says, so
    /// the sample is never shorter than its round trip (a resent byte's
    /// is longer).
    pub fn acked(&mut self, ack: Seq, now: Instant) {
        if let Some((earliest, _)) = self.log.sent(ack + u32::MAX) {
            self.min_rtt_sample(micros(now).wrapping_sub(earliest));
        }
    }

    fn min_rtt_sample(&mut self, us: Micros) {
        if self.min_rtt == 0 || us < self.min_rtt {
            self.min_rtt = us.max(1);
        }
    }

    /// RACK.reo_wnd (§6.2 step 4): RACK.reo_wnd_mult quarters of the
    /// minimum RTT, at most SRTT. Reordering is always taken as possible:
    /// the window is never 0 (the RFC's 0 before any reordering was seen
    /// is left out), and never under 250 µs.
    pub fn reo_wnd(&self, srtt: Duration) -> Duration {
        let quarters = u64::from(self.reo_wnd_extra) + 1;
        let wnd = Duration::from_micros(quarters * u64::from(self.min_rtt / 4));
        wnd.min(srtt).max(Duration::from_micros(250))
    }

    /// §6.2 step 4 for an acceptable ACK: `una` is SND.UNA after it,
    /// `nxt` the highest sequence number sent, `dsack` whether it carried
    /// a D-SACK block (RFC 2883). The first D-SACK of a round trip widens
    /// the reordering window by a quarter of the minimum RTT and keeps it
    /// wide for the next 16 recoveries.
    pub fn on_ack(&mut self, una: Seq, nxt: Seq, dsack: bool) {
        if self.dsack_round.is_some_and(|r| una.diff(r) >= 0) {
            self.dsack_round = None;
        }
        if dsack {
            self.needless_retransmission(nxt);
        }
    }

    /// A retransmission was not needed (a D-SACK, or timestamps showed the
    /// original arrived: `Conn::undo_judge`), with `nxt` the highest
    /// sequence number sent: the path reorders, and the first such news
    /// in a round trip widens the window (§6.2 step 4).
    pub fn needless_retransmission(&mut self, nxt: Seq) {
        self.reordering_seen = true;
        if self.dsack_round.is_none() {
            self.dsack_round = Some(nxt);
            self.reo_wnd_extra = self.reo_wnd_extra.saturating_add(1);
            self.reo_wnd_persist = REO_WND_PERSIST;
        }
    }

    /// A hole below SACKed data was filled with nothing resent into it:
    /// the network reorders (§6.2 step 3).
    pub fn reordering_observed(&mut self) {
        self.reordering_seen = true;
    }

    /// Whether this connection's path has been seen to reorder: then SACKs
    /// alone (RFC 6675's three segments' worth above a hole) no longer
    /// mark loss, RACK's time rule does.
    pub fn reordering_seen(&self) -> bool {
        self.reordering_seen
    }

    /// A recovery ended (fast recovery, or an RTO, counted when it
    /// fires): after 16 without a D-SACK the window narrows to a quarter
    /// of the minimum RTT again (§6.2 step 4).
    pub fn recovery_ended(&mut self) {
        if self.reo_wnd_persist > 0 {
            self.reo_wnd_persist -= 1;
            if self.reo_wnd_persist == 0 {
                self.reo_wnd_extra = 0;
            }
        }
    }

    /// §6.2 step 2: first-sent data up to `end` has been delivered, at
    /// `now`. Only a later send than the one RACK holds moves it.
    pub fn delivered(&mut self, end: Seq, now: Instant) {
        if self.end.is_some_and(|e| end.diff(e) <= 0) {
            return;
        }
        if let Some((earliest, _)) = self.log.sent(end + u32::MAX) {
            self.end = Some(end);
            self.rtt = micros(now).wrapping_sub(earliest);
            self.min_rtt_sample(self.rtt);
        }
    }

    /// Forgets RACK's delivered segment and the log (an RTO at `now`).
    pub fn reset(&mut self, now: Instant) {
        self.end = None;
        self.log.clear(now);
    }

    /// §6.2 step 5: data below the returned sequence number that the peer
    /// does not hold is lost (it went out more than RACK.rtt + reo_wnd
    /// ago, before data that has arrived); and when more may be (RACK's
    /// reordering timer, §6.3), if data sent before the delivered segment
    /// is still missing.
    pub fn detect(
        &self,
        now: Instant,
        reo_wnd: Duration,
        una: Seq,
        board: &Scoreboard,
    ) -> (Seq, Option<Instant>) {
        let Some(end) = self.end else {
            return (una, None);
        };
        let wait = i64::from(self.rtt) + reo_wnd.as_micros().min(1 << 31) as i64;
        let now_us = micros(now);
        let mut lost = una;
        let mut start = una;
        for i in 0..usize::from(self.log.len) {
            if start.diff(end) >= 0 {
                break;
            }
            let stop = if self.log.ends[i].diff(end) > 0 {
                end
            } else {
                self.log.ends[i]
            };
            if stop.diff(start) <= 0 {
                continue;
            }
            // This stretch's latest send + RACK.rtt + reo_wnd, from now.
            let left = since(self.log.at[i], now_us) + wait;
            if left <= 0 {
                lost = stop;
            } else {
                if board.has_gap(start, stop) {
                    return (lost, Some(now + Duration::from_micros(left as u64)));
                }
                break;
            }
            start = stop;
        }
        (lost, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::conn::sack::BoardSpares;

    fn at_us(us: u64) -> Instant {
        Instant::from_nanos(us * 1000)
    }

    #[test]
    fn the_log_bounds_each_bytes_send_time() {
        let mut log = SendLog::default();
        let base = Seq(1000);
        // Ten stretches of 100 bytes, 10 µs apart, 1 µs apart for the
        // third and fourth: those two merge when the ninth comes; when the
        // tenth does, the oldest of the pairs equally close (the first two).
        let times = [0, 10, 20, 21, 40, 50, 60, 70, 80, 90];
        for (i, &t) in times.iter().enumerate() {
            log.record(base + 100 * (i as u32 + 1), at_us(t));
        }
        assert_eq!(log.len, 8);
        assert_eq!(log.sent(base), Some((0, 10)));
        assert_eq!(log.sent(base + 150), Some((0, 10)));
        // The merged stretch: after the one before it, by its own time.
        assert_eq!(log.sent(base + 250), Some((10, 21)));
        assert_eq!(log.sent(base + 350), Some((10, 21)));
        assert_eq!(log.sent(base + 999), Some((90, 90)));
        assert_eq!(log.sent(base + 1000), None);
        // The same instant extends the last stretch; nothing is logged
        // twice.
        log.record(base + 1100, at_us(90));
        log.record(base + 1050, at_us(95));
        assert_eq!(log.sent(base + 1099), Some((90, 90)));
        assert_eq!(log.len, 8);
        log.prune(base + 400);
        assert_eq!(log.sent(base + 400), Some((40, 40)));
        assert_eq!(
            log.sent(base + 399),
            Some((40, 40)),
            "below SND.UNA: the first entry"
        );
        log.clear(at_us(500));
        log.record(base + 1200, at_us(600));
        assert_eq!(log.sent(base + 1150), Some((500, 600)), "after an RTO");
    }

    #[test]
    fn d_sacks_widen_the_window_once_a_round_trip_and_sixteen_recoveries_narrow_it() {
        let ms = Duration::from_millis;
        let srtt = ms(8);
        let mut rack = Rack::default();
        // A first send at 0 acknowledged at 8 ms: the minimum RTT.
        rack.log.record(Seq(1000), at_us(0));
        rack.acked(Seq(1000), at_us(8000));
        assert_eq!(rack.reo_wnd(srtt), ms(2), "a quarter of the minimum RTT");
        assert!(!rack.reordering_seen());
        // A D-SACK while SND.NXT is 5000 widens it by a quarter; more
        // before SND.UNA reaches 5000 do not.
        rack.on_ack(Seq(1000), Seq(5000), true);
        assert!(rack.reordering_seen());
        assert_eq!(rack.reo_wnd(srtt), ms(4));
        rack.on_ack(Seq(3000), Seq(7000), true);
        assert_eq!(rack.reo_wnd(srtt), ms(4), "the same round trip");
        // SND.UNA at 5000: the round is over, the next D-SACK counts.
        rack.on_ack(Seq(5000), Seq(9000), true);
        assert_eq!(rack.reo_wnd(srtt), ms(6));
        rack.on_ack(Seq(9000), Seq(12000), false);
        rack.on_ack(Seq(12000), Seq(15000), true);
        assert_eq!(rack.reo_wnd(srtt), ms(8));
        rack.on_ack(Seq(15000), Seq(18000), true);
        assert_eq!(rack.reo_wnd(srtt), ms(8), "never past SRTT");
        // Sixteen recoveries with no D-SACK since the last: back to a
        // quarter. Reordering stays seen.
        for _ in 0..15 {
            rack.recovery_ended();
        }
        assert_eq!(rack.reo_wnd(srtt), ms(8));
        rack.recovery_ended();
        assert_eq!(rack.reo_wnd(srtt), ms(2));
        assert!(rack.reordering_seen());
        // Recoveries with the window at its base change nothing.
        rack.recovery_ended();
        assert_eq!(rack.reo_wnd(srtt), ms(2));
    }

    #[test]
    fn what_was_sent_before_the_delivered_segment_is_lost_a_reordering_window_later() {
        let una = Seq(0);
        let mut rack = Rack::default();
        // Stretches sent at 0, 1.5 and 2 ms; the last arrives (SACKed) at
        // 6 ms: RACK.rtt and the minimum RTT are 4 ms, reo_wnd 1 ms.
        for (i, t) in [0u64, 1500, 2000].into_iter().enumerate() {
            rack.log.record(Seq(1000 * (i as u32 + 1)), at_us(t));
        }
        let mut board = Scoreboard::default();
        let mut spares = BoardSpares::default();
        board.add(Seq(2000), Seq(3000), (una, Seq(3000)), &mut spares);
        rack.delivered(Seq(3000), at_us(6000));
        let reo = rack.reo_wnd(Duration::from_millis(4));
        assert_eq!(reo, Duration::from_millis(1));
        // The first stretch went 2 ms before the delivered one: lost
        // (0 + 4 + 1 ≤ 6). The second went 0.5 ms before it: lost at
        // 6.5 ms. The delivered one is held, so no timer for it.
        let (lost, next) = rack.detect(at_us(6000), reo, una, &board);
        assert_eq!((lost, next), (Seq(1000), Some(at_us(6500))));
        let (lost, next) = rack.detect(at_us(6500), reo, una, &board);
        assert_eq!((lost, next), (Seq(2000), None));
        // A stretch the peer holds is never a reason for the timer.
        board.add(Seq(1000), Seq(2000), (una, Seq(3000)), &mut spares);
        let (lost, next) = rack.detect(at_us(6000), reo, una, &board);
        assert_eq!((lost, next), (Seq(1000), None));
        // Nothing delivered yet: nothing lost.
        let fresh = Rack::default();
        assert_eq!(fresh.detect(at_us(9000), reo, una, &board), (una, None));
    }
}
