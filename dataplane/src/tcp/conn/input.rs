//! Segment arrival (RFC 9293 §3.10.7): acceptability, RST, SYN, ACK
//! (with RTT, congestion control and SACK), data and FIN.

use std::time::Duration;

use smoltcp::wire::{TcpControl, TcpRepr, TcpTimestampRepr};

use super::*;
use crate::tcp::buffer::BufferPool;
use crate::tcp::hystart::{Growth, CSS_GROWTH_DIVISOR};
use crate::tcp::{CloseReason, Seq, TcpConfig, TcpCounters};
use crate::time::Instant;

/// RFC 8985 §7.2's WCDelAckT: how long a receiver may delay its ACK of a
/// lone segment.
const WORST_CASE_DELAYED_ACK: Duration = Duration::from_millis(200);

/// Challenge ACKs one connection sends per second at most (RFC 5961 §7).
const CHALLENGE_ACKS_PER_SEC: u8 = 10;

impl<A: Default> Conn<A> {
    /// An acceptable segment came: the peer is there.
    fn heard(&mut self, now: Instant) {
        self.last_activity = now;
        self.ka_sent = 0;
    }

    /// A segment for this connection (RFC 9293 §3.10.7.3–4).
    ///
    /// Long on purpose: it is the RFC's segment-arrival procedure in the
    /// RFC's order (acceptability, RST, SYN, ACK with RTT, congestion
    /// control and SACK, data, FIN), each step quoting its section; cut
    /// into pieces, the order that makes it correct would be spread over
    /// several places. The ACK processing proper is `on_new_ack`.
    pub fn input(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        cfg: &TcpConfig,
        pool: &mut BufferPool,
        counters: &mut TcpCounters,
    ) -> Input {
        if self.state == State::SynSent {
            self.heard(now);
            return self.input_syn_sent(now, seg, cfg);
        }
        let mut out = Input::default();
        let seq = Seq(seg.seq_number.0 as u32);
        let seg_len = seg.segment_len() as u32;

        // The peer did not hear our SYN-ACK and sent its SYN again: the
        // SYN-ACK goes again (as Linux does; the window check below would
        // answer the SYN, one below RCV.NXT, with a bare ACK).
        if self.state == State::SynReceived
            && seg.control == TcpControl::Syn
            && seg.ack_number.is_none()
            && seq + 1 == self.rcv_nxt
        {
            self.synack_needed = true;
            out.send = true;
            return out;
        }

        // Timestamps (RFC 7323), on a connection that uses them. An RST is
        // taken whatever its timestamp (§5.3, "RST segments"); so is a SYN,
        // which only ever gets a challenge ACK (RFC 5961 §4: a peer that
        // restarted, perhaps without timestamps, learns from it to reset).
        let exempt = matches!(seg.control, TcpControl::Rst | TcpControl::Syn);
        if let (Some(recent), false) = (self.ts_recent, exempt) {
            match seg.timestamp {
                // §3.2: a non-RST segment without the option SHOULD be
                // dropped silently. Linux takes it; we follow the RFC (an
                // attacker's blind segment must then also guess TSval).
                None => {
                    counters.timestamp_missing += 1;
                    return out;
                }
                // §5.3 R1, PAWS: an older TSval than TS.Recent is an old
                // duplicate: not acceptable, answered with an ACK.
                Some(ts) if (ts.tsval.wrapping_sub(recent) as i32) < 0 => {
                    counters.paws_rejected += 1;
                    out.send = self.answer_unacceptable(seg, now, counters);
                    return out;
                }
                Some(_) => {}
            }
        }

        // First: is the segment in the receive window?
        let wnd = self.recv_free(cfg).max(1);
        let acceptable = if seg_len == 0 {
            seq.diff(self.rcv_nxt) >= 0 && seq.diff(self.rcv_nxt + wnd) < 0 || seq == self.rcv_nxt
        } else {
            let last = seq + (seg_len - 1);
            (seq.diff(self.rcv_nxt) >= 0 && seq.diff(self.rcv_nxt + wnd) < 0)
                || (last.diff(self.rcv_nxt) >= 0 && last.diff(self.rcv_nxt + wnd) < 0)
                || (seq.diff(self.rcv_nxt) < 0 && last.diff(self.rcv_nxt) >= 0)
        };
        if !acceptable {
            if seg.control != TcpControl::Rst {
                // A retransmitted FIN in TIME-WAIT (the one we took): ack
                // it again and restart the 2 MSL timer.
                if self.state == State::TimeWait
                    && seg.control == TcpControl::Fin
                    && seq + seg.payload.len() as u32 + 1 == self.rcv_nxt
                {
                    self.timewait_until = Some(now + cfg.time_wait);
                }
                // Data we already have: a D-SACK block tells the sender
                // this copy was not needed (RFC 2883 §4).
                let end = seq + seg.payload.len() as u32;
                if self.sack_ok && !seg.payload.is_empty() && end.diff(self.rcv_nxt) <= 0 {
                    self.dsack = Some((seq, end));
                }
                out.send = self.answer_unacceptable(seg, now, counters);
            }
            return out;
        }

        // Second: RST (RFC 5961 §3.2: only an exact match resets; anything
        // else in the window gets a challenge ACK).
        if seg.control == TcpControl::Rst {
            if self.state == State::TimeWait {
                // RFC 1337: a reset must not end TIME-WAIT early.
                return out;
            }
            if seq == self.rcv_nxt {
                out.closed = Some(CloseReason::Reset);
            } else {
                out.send = self.challenge(now, counters);
            }
            return out;
        }

        // Fourth: SYN in a synchronized state (RFC 5961 §4): challenge ACK.
        if seg.control == TcpControl::Syn {
            out.send = self.challenge(now, counters);
            return out;
        }

        // Fifth: ACK.
        let Some(ack) = seg.ack_number.map(|a| Seq(a.0 as u32)) else {
            return out;
        };
        if self.state == State::SynReceived {
            if ack.diff(self.snd_una) > 0 && ack.diff(self.snd_nxt) <= 0 {
                self.state = State::Established;
                if self.accepted {
                    // Ours (a simultaneous open, RFC 9293 §3.5): connected,
                    // not accepted from a listener.
                    out.connected = true;
                } else {
                    self.accepted = true;
                    out.established = true;
                }
                self.set_snd_wnd(u32::from(seg.window_len) << self.snd_shift);
                self.snd_wl1 = seq;
                self.snd_wl2 = ack;
            } else {
                // RFC 9293 §3.10.7.4: an ACK of something else gets
                // <SEQ=SEG.ACK><CTL=RST>; the half-open connection stays.
                out.reset_peer = Some(ack);
                return out;
            }
        }
        // RFC 5961 §5.2: acceptable is SND.UNA − MAX.SND.WND ≤ SEG.ACK ≤
        // SND.NXT; anything else (an ACK of what was never sent, or one too
        // old to be a duplicate: a blind injection) is discarded, with
        // its data, and answered with a (rate-limited) ACK.
        if ack.diff(self.snd_max) > 0
            || (self.snd_una.diff(ack) > 0 && self.snd_una - ack > self.max_snd_wnd)
        {
            out.send = self.challenge(now, counters);
            return out;
        }
        // Only a segment that got this far keeps the connection alive: an
        // out-of-window segment, a blind RST or SYN, or a forged ACK does
        // not refresh the idle and keepalive timers.
        self.heard(now);
        // RFC 7323 §4.3: TS.Recent from a segment at or before our last
        // ACK (Last.ACK.sent), never moving back: with ACKs delayed, the
        // echo is the earliest unacknowledged segment's, so the peer's
        // round trip includes the delay.
        if let (Some(ts), Some(recent)) = (seg.timestamp, self.ts_recent) {
            if seq.diff(self.last_ack_sent) <= 0 && ts.tsval.wrapping_sub(recent) as i32 >= 0 {
                self.ts_recent = Some(ts.tsval);
            }
        }
        let window = u32::from(seg.window_len) << self.snd_shift;
        let sack_news = self.sack_ok && seg.sack_ranges.iter().any(Option::is_some);
        let dsack = if sack_news {
            dsack_block(seg, ack)
        } else {
            None
        };
        self.settle_tlp_episode(ack, seg_len == 0 && !sack_news, dsack, counters);
        self.rack
            .on_ack(ack.max(self.snd_una), self.snd_max, dsack.is_some());
        if sack_news {
            for &(l, r) in seg.sack_ranges.iter().flatten() {
                self.scoreboard.add(
                    Seq(l),
                    Seq(r),
                    (ack.max(self.snd_una), self.snd_max),
                    &mut pool.boards,
                );
            }
        }
        if ack.diff(self.snd_una) > 0 {
            let acked = ack - self.snd_una;
            // Was the congestion response in progress needed? (RFC 3522)
            let ends_recovery = self.recover.is_some_and(|rec| ack.diff(rec) >= 0);
            let needless = self.undo_judge(seg.timestamp, ends_recovery);
            if self.on_new_ack(now, ack, seg.timestamp, cfg, pool, &mut out) {
                counters.hystart_exits += 1;
            }
            if let Some(u) = needless {
                self.undo_response(u, acked, counters);
            }
        } else if ack == self.snd_una
            && seg_len == 0
            && window == self.snd_wnd
            && window > 0
            && self.snd_max != self.snd_una
        {
            // A duplicate ACK (RFC 5681 §2). Not with a closed window: those
            // answer persist probes, whose byte the peer could not take.
            // With SACK on a path seen to reorder, three of them are not
            // loss either (a receiver sends one for each segment that
            // overtook another): RACK's time rule decides (RFC 8985 §6.2).
            self.dupacks = self.dupacks.saturating_add(1);
            let reorders = self.sack_ok && self.rack.reordering_seen();
            // Without SACK, NewReno's window inflation (RFC 6582 §3.2)
            // stands for the segments that left the network; with it,
            // the pipe estimate already leaves SACKed data out (RFC 6675
            // §5), and inflating too would send two segments for each
            // one delivered, all through recovery.
            if self.dupacks == 3 && self.may_enter_recovery() && !reorders {
                self.enter_recovery(now);
                if !self.sack_ok {
                    self.cwnd = self.ssthresh + 3 * self.seg_size;
                }
                self.fast_rtx = true;
                out.send = true;
            } else if self.dupacks > 3 && self.recover.is_some() {
                // Each stands for a segment that left the network: never
                // more of them than are in flight (a peer repeating one
                // ACK grew the window without bound).
                // What was in flight when recovery began (SND.MAX then,
                // RECOVER): the cap does not move with what each
                // inflation lets out.
                let flight = self.recover.map_or(0, |rec| rec - self.snd_una);
                let cap = self.ssthresh.saturating_add(flight);
                if !self.sack_ok && self.cwnd < cap {
                    self.cwnd = self.cwnd.saturating_add(self.seg_size).min(cap);
                }
                out.send = true;
            }
        }
        // RFC 6675 §5: with SACK, more than 3 MSS SACKed above a hole means
        // loss, without waiting for three duplicate ACKs; in recovery each
        // ACK lets the next holes go out.
        if sack_news && !self.scoreboard.is_empty() {
            // RACK after a tail loss probe (RFC 8985 §6.2, §7.4): the probe
            // went out 2·SRTT after everything below it; SACKed while a
            // hole stays open below, that hole is lost (three segments'
            // worth of SACKs may never come at the tail of a flight).
            let probe_arrived = self
                .tlp_seq
                .take()
                .is_some_and(|p| self.scoreboard.covering(p).is_some() && self.snd_una.diff(p) < 0);
            // RACK (RFC 8985 §6.2): the latest-sent data delivered is the
            // highest SACKed, unless that is a probe's resent tail (not a
            // first send: its time is not the log's).
            if let Some(high) = self.scoreboard.highest() {
                let resent_tail = self
                    .tlp_episode
                    .is_some_and(|e| e.retrans && high.diff(e.start) > 0 && high.diff(e.end) <= 0);
                if !resent_tail {
                    self.rack.delivered(high, now);
                }
            }
            let rack_found = self.rack_detect(now);
            // RFC 6675's three segments' worth SACKed above a hole marks
            // loss only while the path has not been seen to reorder; after
            // that, RACK's time rule does (RFC 8985 §6.2).
            let sack_rule =
                !self.rack.reordering_seen() && self.scoreboard.bytes() > 3 * self.seg_size;
            if self.may_enter_recovery() && (probe_arrived || rack_found || sack_rule) {
                self.enter_recovery(now);
            }
            if rack_found {
                counters.rack_losses += 1;
            }
            if self.recover.is_some() {
                self.fast_rtx = true;
                out.send = true;
                self.rack_lost_retransmissions(now, counters);
            }
        }
        // RFC 9293 §3.10.7.4: the window from a segment not older than the
        // last one that set it, and acknowledging nothing below SND.UNA.
        if ack.diff(self.snd_una) >= 0
            && (self.snd_wl1.diff(seq) < 0 || (self.snd_wl1 == seq && self.snd_wl2.diff(ack) <= 0))
        {
            if self.snd_wnd == 0 && window > 0 {
                // The window opened: the last probe's byte may not have
                // been taken, so go on from SND.UNA. Only a probe's byte:
                // what else is in flight stays so (the ACK and RTO paths
                // repair its losses); going back over it drew a flight
                // from a peer that closed and opened its window with two
                // bare ACKs.
                if self.snd_nxt - self.snd_una <= 1 {
                    self.snd_nxt = self.snd_una;
                }
                out.send = true;
            }
            self.set_snd_wnd(window);
            self.snd_wl1 = seq;
            self.snd_wl2 = ack;
        }
        // The peer answers while we wait on its window (persist probes):
        // it is there, so those probes are not retries (MUST-26: never
        // give up on a receiver that keeps acknowledging them).
        if self.snd_una == self.snd_max || self.snd_wnd == 0 {
            self.retries = 0;
        }
        let fin_acked = self.fin_seq.is_some_and(|f| self.snd_una.diff(f) > 0);
        match self.state {
            State::FinWait1 if fin_acked => {
                self.state = State::FinWait2;
                self.data_heard = now;
            }
            State::Closing if fin_acked => self.enter_time_wait(now, cfg, pool),
            State::LastAck if fin_acked => {
                out.closed = Some(CloseReason::Normal);
                return out;
            }
            _ => {}
        }

        // Seventh: segment text.
        if seg.payload.len() > self.seg_size as usize {
            // Several segments in one (the port's LRO or the kernel's GRO).
            counters.large_segments_in += 1;
        }
        if !seg.payload.is_empty() && self.state.receives_data() && !self.peer_fin {
            if seq.diff(self.rcv_nxt) <= 0 {
                let skip = (self.rcv_nxt - seq) as usize;
                if skip > 0 && self.sack_ok {
                    // The start came twice (RFC 2883 §4).
                    self.dsack = Some((seq, seq + skip.min(seg.payload.len()) as u32));
                }
                let data = &seg.payload[skip.min(seg.payload.len())..];
                // At the buffer cap what does not fit is dropped (the peer
                // sends it again).
                let mut n = 0;
                if let Some(ring) = pool.reserve_receive(&mut self.recv, data.len()) {
                    n = ring.push(data) as u32;
                    // The gap may now be filled: take in the out-of-order
                    // data already written behind it.
                    let mut end = self.rcv_nxt + n;
                    while let Some(&(l, r)) = self.ooo.ranges().first() {
                        if l.diff(end) > 0 {
                            break;
                        }
                        if r.diff(end) > 0 {
                            ring.commit((r - end) as usize);
                            n += r - end;
                            end = r;
                        }
                        self.ooo.prune(r, &mut pool.boards);
                    }
                }
                if let Some(ring) = self.recv.take_if(|r| r.is_empty() && self.ooo.is_empty()) {
                    pool.give(ring);
                }
                self.rcv_nxt = self.rcv_nxt + n;
                self.bytes_received += u64::from(n);
                if n > 0 {
                    out.readable = true;
                    self.data_heard = now;
                }
                // A segment of several (a NIC's LRO, the kernel's GRO)
                // counts as as many: ACK at least every second one.
                let segs = (data.len() / (self.seg_size.max(1) as usize)).clamp(1, 255) as u8;
                self.unacked_segs = self.unacked_segs.saturating_add(segs);
                if (n as usize) < data.len() || self.unacked_segs >= 2 || !self.ooo.is_empty() {
                    self.ack_now = true;
                } else if data.len() < self.seg_size as usize {
                    // The end of a message (a request, a handshake flight):
                    // ACKed at the end of this iteration, on the answer if
                    // there is one, or held while the application waits
                    // (`Conn::hold_ack`).
                    self.ack_small = true;
                } else if self.ack_at.is_none() {
                    self.ack_at = Some(now + cfg.delayed_ack);
                }
            } else {
                // Out of order: keep it behind the gap (where it fits) and
                // send a duplicate ACK at once, with SACK blocks.
                let offset = (seq - self.rcv_nxt) as usize;
                let end = offset + seg.payload.len();
                if end > ooo_reach(self.recv.as_ref(), self.bytes_received) {
                    counters.ooo_beyond_reach += 1;
                } else if let Some(ring) = pool.reserve_receive(&mut self.recv, end) {
                    if ring.write_ahead(offset, seg.payload) {
                        let (l, r) = (seq, seq + seg.payload.len() as u32);
                        let window = (self.rcv_nxt, self.rcv_nxt + ring.free() as u32);
                        self.ooo.add(l, r, window, &mut pool.boards);
                        self.ooo_last = Some(l);
                    }
                }
                if let Some(ring) = self.recv.take_if(|r| r.is_empty() && self.ooo.is_empty()) {
                    pool.give(ring);
                }
                self.ack_now = true;
            }
        }

        // Eighth: FIN, once everything before it has arrived.
        if seg.control == TcpControl::Fin
            && seq + seg.payload.len() as u32 == self.rcv_nxt
            && !self.peer_fin
        {
            self.peer_fin = true;
            self.rcv_nxt = self.rcv_nxt + 1;
            self.ack_now = true;
            out.peer_closed = true;
            // Bytes held beyond the FIN are no part of the stream: they
            // go, and the ring with them once read (else they kept the
            // connection out of the compact TIME-WAIT table for good).
            self.ooo.release(&mut pool.boards);
            self.ooo_last = None;
            if let Some(ring) = self.recv.take_if(|r| r.is_empty()) {
                pool.give(ring);
            }
            let fin_acked = self.fin_seq.is_some_and(|f| self.snd_una.diff(f) > 0);
            match self.state {
                State::Established => self.state = State::CloseWait,
                State::FinWait1 if fin_acked => self.enter_time_wait(now, cfg, pool),
                State::FinWait1 => self.state = State::Closing,
                State::FinWait2 => self.enter_time_wait(now, cfg, pool),
                _ => {}
            }
        }
        out.send |= self.acks_now();
        out
    }

    /// An acceptable ACK of new data, up to `ack`: buffers, RTT, loss
    /// recovery and the congestion window. Returns whether HyStart++
    /// found the round trip growing with it (RFC 9406: CSS began).
    fn on_new_ack(
        &mut self,
        now: Instant,
        ack: Seq,
        ts: Option<TcpTimestampRepr>,
        cfg: &TcpConfig,
        pool: &mut BufferPool,
        out: &mut Input,
    ) -> bool {
        let acked = ack - self.snd_una;
        let mut css_began = false;
        self.snd_una = ack;
        if self.snd_nxt.diff(ack) < 0 {
            self.snd_nxt = ack;
        }
        // Drop acknowledged bytes (the SYN and FIN take no buffer space).
        if let Some(ring) = self.send.as_mut() {
            let data_end = self.buf_seq + ring.len() as u32;
            let upto = if ack.diff(data_end) > 0 {
                data_end
            } else {
                ack
            };
            if upto.diff(self.buf_seq) > 0 {
                let n = upto - self.buf_seq;
                ring.consume(n as usize);
                self.buf_seq = upto;
                out.writable = true;
            }
            if ring.is_empty() {
                pool.give(self.send.take().expect("some"));
            }
        } else if ack.diff(self.buf_seq) > 0
            && self.fin_seq.is_none_or(|f| self.buf_seq.diff(f) < 0)
        {
            self.buf_seq = ack;
        }
        // Round-trip time (RFC 6298 §2, Karn's rule via timestamps or one
        // timed segment).
        let sample = match self.ts_recent.and(echoed_rtt(now, ts)) {
            Some(r) => Some(r),
            _ => match self.rtt_probe {
                Some((end, sent)) if ack.diff(end) >= 0 => Some(now - sent),
                _ => None,
            },
        };
        if let Some(r) = sample {
            self.rtt_probe = None;
            self.update_rto(r, cfg);
        }
        self.note_send_progress(now, acked > 0);
        self.rack.acked(ack, now);
        self.rack.log.prune(ack);
        if self.rack_lost.diff(ack) < 0 {
            self.rack_lost = ack;
        }
        self.retries = 0;
        self.dupacks = 0;
        // RFC 8985 §6.2 step 3: a hole below SACKed data filled with
        // nothing resent into it (no recovery, no probe): the path
        // reorders.
        if self.recover.is_none()
            && self.tlp_episode.is_none()
            && self
                .scoreboard
                .ranges()
                .first()
                .is_some_and(|&(left, _)| ack.diff(left) >= 0)
        {
            self.rack.reordering_observed();
        }
        self.scoreboard.prune(ack, &mut pool.boards);
        if self.timeout_point.is_some_and(|p| ack.diff(p) >= 0) {
            self.timeout_point = None;
        }
        if self.rtx_next.diff(ack) < 0 {
            self.rtx_next = ack;
        }
        // Congestion control.
        match self.recover {
            Some(rec) if ack.diff(rec) >= 0 => {
                self.recover = None;
                self.cwnd = self.ssthresh;
                self.scoreboard.release(&mut pool.boards);
                self.rack.recovery_ended();
            }
            Some(_) => {
                // Partial ACK (RFC 6582): retransmit the next hole now,
                // and without SACK deflate the inflated window.
                self.fast_rtx = true;
                if !self.sack_ok {
                    self.cwnd = (self.cwnd.saturating_sub(acked).max(self.seg_size))
                        .saturating_add(self.seg_size);
                }
            }
            // Slow start counts bytes acknowledged, not ACKs (RFC 3465):
            // receivers with GRO send stretch ACKs covering many segments.
            // HyStart++ (RFC 9406) slows the first slow start, and ends
            // it, when the round trip grows.
            None if self.cwnd < self.ssthresh => {
                let (growth, css) = self.hystart.on_ack(ack, self.snd_nxt, sample);
                css_began = css;
                match growth {
                    Growth::Full => self.cwnd = self.cwnd.saturating_add(acked),
                    Growth::Conservative => {
                        self.cwnd = self.cwnd.saturating_add(acked / CSS_GROWTH_DIVISOR);
                    }
                    Growth::End => self.ssthresh = self.cwnd,
                }
            }
            // Congestion avoidance: CUBIC (RFC 9438).
            None => {
                let srtt = self.srtt.unwrap_or(self.rto);
                self.cwnd = self
                    .cubic
                    .on_ack(now, acked, self.cwnd, self.seg_size, srtt);
            }
        }
        // New data acknowledged: a tail loss probe may be sent again, and
        // the loss timer restarts (PTO or RTO).
        self.tlp_out = false;
        if self.recover.is_none() && self.rtx_next.diff(self.snd_una) <= 0 {
            // No resend left in flight above SND.UNA (a recovery may end
            // with holes above its recovery point resent and unanswered).
            self.rtx_sent = None;
        }
        if self.snd_una == self.snd_max {
            self.rto_at = None;
            self.tlp_armed = false;
            self.reo_at = None;
        } else {
            self.arm_loss_timer(now, true);
        }
        out.send = true;
        css_began
    }

    /// Whether a loss now starts fast recovery: not while one runs, nor
    /// for data an RTO's go-back-N is sending again.
    pub(super) fn may_enter_recovery(&self) -> bool {
        self.recover.is_none() && self.timeout_point.is_none()
    }

    /// Fast recovery begins (RFC 6675 §5, RFC 8985 §6.2): the window is
    /// cut, holes go out from SND.UNA, and a probe's episode is over (its
    /// loss gets this response, §7.1).
    pub(super) fn enter_recovery(&mut self, now: Instant) {
        self.undo_begin(now, false);
        self.cut_window();
        self.recover = Some(self.snd_max);
        // Holes an earlier recovery resent, whose resends are still in
        // flight, do not go again: RACK's rule for retransmissions
        // (`rack_lost_retransmissions`) sends them again once later data
        // shows them lost.
        self.rtx_next = match self.rtx_sent {
            Some(_) => self.rtx_next.max(self.snd_una),
            None => self.snd_una,
        };
        self.tlp_episode = None;
    }

    /// The congestion response to a loss: ssthresh from CUBIC, and the
    /// window down to it.
    fn cut_window(&mut self) {
        self.hystart.off();
        self.ssthresh = self.cubic.on_congestion(self.cwnd, self.seg_size);
        self.cwnd = self.ssthresh;
    }

    /// RACK's loss detection (RFC 8985 §6.2 step 5) and its reordering
    /// timer (§6.3). Returns whether it found lost data not yet resent.
    pub(super) fn rack_detect(&mut self, now: Instant) -> bool {
        if !self.sack_ok {
            return false;
        }
        let reo_wnd = self.rack.reo_wnd(self.srtt.unwrap_or(self.rto));
        let (lost, next) = self
            .rack
            .detect(now, reo_wnd, self.snd_una, &self.scoreboard);
        self.reo_at = next;
        if lost.diff(self.rack_lost) > 0 {
            self.rack_lost = lost;
        }
        let from = match self.recover {
            Some(_) => self.rtx_next.max(self.snd_una),
            None => self.snd_una,
        };
        lost.diff(from) > 0 && self.scoreboard.has_gap(from, lost)
    }

    /// Ends a tail loss probe's episode once an ACK reaches TLP.end_seq
    /// (RFC 8985 §7.4.2). A probe of new data, a D-SACK of the resent
    /// tail, or a bare duplicate ACK (the original had arrived): nothing
    /// was lost. An ACK beyond it with none of those: the probe repaired
    /// a loss, which gets the congestion response fast recovery would
    /// have. An ACK of exactly TLP.end_seq waits for the next.
    fn settle_tlp_episode(
        &mut self,
        ack: Seq,
        bare: bool,
        dsack: Option<(Seq, Seq)>,
        counters: &mut TcpCounters,
    ) {
        let Some(e) = self.tlp_episode.filter(|e| ack.diff(e.end) >= 0) else {
            return;
        };
        let dsacked = dsack.is_some_and(|(l, r)| r.diff(e.start) > 0 && l.diff(e.end) < 0);
        let duplicate = bare && ack == self.snd_una;
        if !e.retrans || dsacked || duplicate {
            self.tlp_episode = None;
        } else if ack.diff(e.end) > 0 {
            self.tlp_episode = None;
            if self.recover.is_none() {
                self.cut_window();
                counters.tlp_repairs += 1;
            }
        }
    }

    /// RACK's time rule (RFC 8985 §6.2) for retransmissions: data sent
    /// after the latest recovery retransmission has been SACKed, more than a
    /// reordering window (SRTT/4) after that retransmission went out, while
    /// the holes it filled are still open below: those retransmissions were
    /// lost too. They go again now rather than at the RTO.
    fn rack_lost_retransmissions(&mut self, now: Instant, counters: &mut TcpCounters) {
        let Some((sent, mark)) = self.rtx_sent else {
            return;
        };
        let reo_wnd = (self.srtt.unwrap_or(self.rto) / 4).max(Duration::from_millis(1));
        let later_arrived = self.scoreboard.highest().is_some_and(|h| h.diff(mark) > 0);
        if later_arrived && now.saturating_since(sent) >= reo_wnd {
            self.rtx_sent = None;
            self.rtx_next = self.snd_una;
            self.fast_rtx = true;
            counters.lost_retransmits += 1;
        }
    }

    /// Arms the loss timer after new data went out or new data was
    /// acknowledged: the tail loss probe's timeout where RFC 8985 §7.2
    /// allows one (SACK in use, not in recovery, no probe out, an RTT
    /// measured, the window open: else this is the persist timer): PTO =
    /// 2·SRTT, plus the worst-case delayed ACK (200 ms) when one segment is
    /// in flight, and never past the RTO's expiry; the RTO where no probe
    /// is allowed. `restart`: new data was acknowledged.
    pub(super) fn arm_loss_timer(&mut self, now: Instant, restart: bool) {
        let pto = match self.srtt {
            Some(srtt)
                if self.sack_ok && self.recover.is_none() && !self.tlp_out && self.snd_wnd > 0 =>
            {
                let mut pto = srtt * 2;
                if self.snd_max - self.snd_una <= self.seg_size {
                    pto += WORST_CASE_DELAYED_ACK;
                }
                Some(pto.max(Duration::from_millis(2)))
            }
            _ => None,
        };
        // The RTO keeps its deadline while it runs (RFC 6298 §5.1), unless
        // new data was acknowledged (§5.3).
        let rto_at = match (restart, self.tlp_armed, self.rto_at) {
            (false, false, Some(t)) => t,
            _ => now + self.rto,
        };
        // §7.2: a PTO past the RTO's expiry fires at the expiry instead.
        match pto.map(|p| (now + p).min(rto_at)) {
            Some(p) => {
                self.rto_at = Some(p);
                self.tlp_armed = true;
            }
            None => {
                self.rto_at = Some(rto_at);
                self.tlp_armed = false;
            }
        }
    }

    /// Queues the ACK an unacceptable segment gets (RFC 9293 §3.10.7.4),
    /// returning whether it did. One that carries data or a FIN is always
    /// answered (a retransmission the peer needs our ACK, or its D-SACK,
    /// for); anything else, a bare ACK or a SYN, shares the challenge
    /// ACKs' budget (as Linux's `tcp_invalid_ratelimit` and its SYN
    /// challenge): otherwise anyone who knows the 4-tuple draws ACKs to
    /// the peer at their own rate, or two stacks that disagree on the
    /// window ACK each other in a loop.
    fn answer_unacceptable(
        &mut self,
        seg: &TcpRepr<'_>,
        now: Instant,
        counters: &mut TcpCounters,
    ) -> bool {
        if seg.payload.is_empty() && seg.control != TcpControl::Fin {
            return self.challenge(now, counters);
        }
        self.ack_now = true;
        true
    }

    /// Queues a challenge ACK (RFC 5961 §§3.2, 4.2, 5.2) unless this
    /// connection has sent its share this second (§7). The limit is per
    /// connection: a shared one is the side channel of CVE-2016-5696 (an
    /// off-path host counting our challenge ACKs learns which 4-tuples
    /// exist). Returns whether one is queued.
    fn challenge(&mut self, now: Instant, counters: &mut TcpCounters) -> bool {
        let sec = (now.as_nanos() / 1_000_000_000) as u32;
        if sec != self.challenge_sec {
            self.challenge_sec = sec;
            self.challenges = 0;
        }
        if self.challenges >= CHALLENGE_ACKS_PER_SEC {
            counters.challenge_acks_limited += 1;
            return false;
        }
        self.challenges += 1;
        counters.challenge_acks += 1;
        self.ack_now = true;
        true
    }

    pub(super) fn update_rto(&mut self, r: Duration, cfg: &TcpConfig) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let delta = srtt.abs_diff(r);
                self.rttvar = self.rttvar * 3 / 4 + delta / 4;
                self.srtt = Some(srtt * 7 / 8 + r / 8);
            }
        }
        let srtt = self.srtt.expect("set");
        self.rto = (srtt + (self.rttvar * 4).max(Duration::from_millis(1)))
            .clamp(cfg.min_rto, cfg.max_rto);
    }

    /// TIME-WAIT: what we sent is all acknowledged, so the send buffer
    /// goes; what the peer sent stays until the application has read it
    /// (then the engine moves the connection to its TIME-WAIT table).
    fn enter_time_wait(&mut self, now: Instant, cfg: &TcpConfig, pool: &mut BufferPool) {
        self.state = State::TimeWait;
        self.timewait_until = Some(now + cfg.time_wait);
        self.rto_at = None;
        if let Some(r) = self.send.take() {
            pool.give(r);
        }
    }

    // ---- timers ----
}

/// A D-SACK block in `seg` (RFC 2883 §4): its first block lies below the
/// cumulative ACK, or inside its second block.
fn dsack_block(seg: &TcpRepr<'_>, ack: Seq) -> Option<(Seq, Seq)> {
    let (l, r) = seg.sack_ranges[0].map(|(l, r)| (Seq(l), Seq(r)))?;
    let below = r.diff(ack) <= 0;
    let inside =
        seg.sack_ranges[1].is_some_and(|(l2, r2)| l.diff(Seq(l2)) >= 0 && r.diff(Seq(r2)) <= 0);
    (below || inside).then_some((l, r))
}
