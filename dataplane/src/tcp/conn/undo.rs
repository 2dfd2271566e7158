//! Undoing a congestion response that was not needed.
//!
//! Detection is RFC 3522's (Eifel), from timestamps: a retransmission's
//! TSval is later than the original's, and a receiver echoes the TSval of
//! the segment that moved its cumulative ACK (RFC 7323 §4.3, TS.Recent
//! never moving back). So an ACK whose TSecr is older than the first
//! retransmission of an episode was made by data sent before it:
//! - after an RTO, the first acceptable ACK: the original got there, the
//!   timeout was spurious (a delay spike, or only ACKs lost);
//! - in fast recovery, the ACK that ends it (as Linux judges, not the
//!   first: several holes may be open and one really lost): no
//!   retransmission filled a hole, the path reordered.
//!
//! The response is RFC 4015's: the go-back-N stops (SND.NXT back to
//! SND.MAX), ssthresh goes back to the larger of the window before the
//! response and its own value then (pipe_prev), the window to what is in
//! flight plus at most an initial window (no burst: slow start takes it
//! back up within about a round trip), CUBIC's W_max to its value before
//! (RFC 9438 §4.9). RFC 4015 also re-seeds the RTT estimate after a
//! spurious timeout with the larger of SRTT and the ACK's sample; we
//! take that sample as any other (RFC 6298's average): where the
//! timeout came from lost ACKs, not delay, the sample spans them, and
//! re-seeding from it made every later RTO several times longer (at 5 %
//! loss both ways in `goodput_by_loss_keeps_its_floors`, 24 seeds:
//! 10.6 Mbit/s against 12.0). A needless fast recovery also tells RACK the
//! path reorders, as a D-SACK does (RFC 8985 §6.2 steps 3-4): for a peer
//! that sends no D-SACKs this is the only way it learns.
//!
//! Only on a connection with timestamps; without them nothing is undone.
//! The milliseconds of our TSval clock bound what can be told apart: a
//! retransmission in the same millisecond as the original is never judged
//! needless. A receiver that echoes a TSecr older than it should can make
//! us undo a cut that was needed; it could as well acknowledge data it
//! never got, so this trusts it no further than TCP already does.

use smoltcp::wire::TcpTimestampRepr;

use super::{ts_now, Conn, INITIAL_SSTHRESH};
use crate::tcp::TcpCounters;
use crate::time::Instant;

/// The state before a congestion response that may prove needless, and
/// when its first retransmission went out.
#[derive(Debug, Clone, Copy)]
pub(super) struct Undo {
    /// Our TSval clock when the response began: its first retransmission
    /// carries this or later.
    tsval: u32,
    cwnd: u32,
    ssthresh: u32,
    /// CUBIC's W_max, in segments.
    w_max: f32,
    /// An RTO's go-back-N, judged on the first ACK after it; else fast
    /// recovery, judged on the ACK that ends it.
    pub timeout: bool,
}

impl<A> Conn<A> {
    /// A congestion response begins at `now`, before the window is cut:
    /// fast recovery, or an RTO (`timeout`). The RTOs that back off after
    /// the first keep the first one's state and time. An RTO with loss
    /// already known (in fast recovery, or the peer SACKing data above a
    /// hole) is never undone: its go-back-N repairs those holes, which
    /// stopping it would leave to the next RTO (the scoreboard and RACK's
    /// log are gone), as Linux uses F-RTO only outside recovery.
    pub(super) fn undo_begin(&mut self, now: Instant, timeout: bool) {
        if timeout && (self.recover.is_some() || !self.scoreboard.is_empty()) {
            self.undo = None;
            return;
        }
        if self.ts_recent.is_none() || (timeout && self.undo.is_some_and(|u| u.timeout)) {
            return;
        }
        self.undo = Some(Undo {
            tsval: ts_now(now),
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            w_max: self.cubic.w_max() as f32,
            timeout,
        });
    }

    /// Whether `ts` (an ACK that acknowledged new data) echoes a TSval
    /// older than the pending episode's first retransmission, when this
    /// ACK is the one that judges it: the first after an RTO, or (`ends`)
    /// the one that ends fast recovery. The episode is over either way.
    pub(super) fn undo_judge(&mut self, ts: Option<TcpTimestampRepr>, ends: bool) -> Option<Undo> {
        let u = self.undo?;
        if !u.timeout && !ends {
            return None;
        }
        self.undo = None;
        let ts = ts.filter(|t| t.tsecr != 0)?;
        ((ts.tsecr.wrapping_sub(u.tsval) as i32) < 0).then_some(u)
    }

    /// RFC 4015's response to a needless episode `u`, on the ACK that
    /// showed it, which acknowledged `acked` bytes.
    pub(super) fn undo_response(&mut self, u: Undo, acked: u32, counters: &mut TcpCounters) {
        if u.timeout {
            // What went out before the RTO is not sent again.
            if self.snd_nxt.diff(self.snd_max) < 0 {
                self.snd_nxt = self.snd_max;
            }
            counters.spurious_timeouts += 1;
        } else {
            self.rack.needless_retransmission(self.snd_max);
            counters.spurious_recoveries += 1;
        }
        let initial_window = 10 * self.seg_size;
        let flight = self.snd_max - self.snd_una;
        // pipe_prev, but a slow start that no loss had ended yet does not
        // go on unbounded: it ends at the window it had reached (without
        // HyStart, nothing but a loss would end it again, and a receiver
        // that reneges when its buffer fills, as Linux prunes its
        // out-of-order queue, then sees the whole window at once).
        let prior = if u.ssthresh >= INITIAL_SSTHRESH {
            u.cwnd
        } else {
            u.ssthresh.max(u.cwnd)
        };
        self.ssthresh = self.ssthresh.max(prior);
        self.cwnd = self.cwnd.max(flight + acked.min(initial_window));
        self.cubic.restore(f64::from(u.w_max));
    }
}
