//! What a connection sends and when: deadlines and timer expiry (RFC
//! 6298 retransmission, delayed ACKs, keepalive, TIME-WAIT), segment
//! building, retransmission of holes and new data.

use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

use super::*;
use crate::tcp::buffer::RingBuf;
use crate::tcp::{CloseReason, Outgoing, Seq, TcpConfig, TcpCounters};
use crate::time::Instant;

/// The smallest segment size a port is asked to cut to (TSO).
pub const MIN_TSO_SEGMENT: u32 = 256;

/// Where a connection's segments go: our address and the peer's (the
/// engine's, for an IPv6 connection's control block holds only ports).
#[derive(Debug, Clone, Copy)]
pub(in crate::tcp) struct Path {
    pub src: std::net::IpAddr,
    pub dst: std::net::IpAddr,
}

impl<A: Default> Conn<A> {
    /// When this connection next needs its timer: the earliest of its
    /// deadlines. A SYN or SYN-ACK still to go out goes out in this
    /// iteration's transmission and is retransmitted one RTO after `now`:
    /// that is its deadline already, so the entry armed for it when the
    /// connection is made is the one its retransmission needs (the
    /// handshake deadline, later, would be a second entry).
    pub fn next_deadline(&self, now: Instant, cfg: &TcpConfig) -> Option<Instant> {
        let mut at: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                at = Some(at.map_or(t, |a: Instant| a.min(t)));
            }
        };
        consider(self.timewait_until);
        consider(self.ack_at);
        consider(self.rto_at);
        if self.synack_needed && self.rto_at.is_none() {
            consider(Some(now + self.rto));
        }
        consider(self.reo_at);
        match self.state {
            State::SynSent | State::SynReceived => {
                consider(Some(self.opened + cfg.handshake_timeout));
            }
            State::TimeWait => {}
            _ => {
                consider(self.deadline);
                consider(self.send_timeout_at());
                if self.state == State::FinWait2 {
                    consider(Some(self.data_heard + cfg.fin_wait2_timeout));
                }
                consider(Some(self.last_activity + self.idle_timeout(cfg)));
                consider(self.keepalive_due(cfg));
            }
        }
        at
    }

    /// How long the peer may stay silent.
    fn idle_timeout(&self, cfg: &TcpConfig) -> Duration {
        self.idle_timeout.unwrap_or(cfg.idle_timeout)
    }

    /// When the next keepalive probe is due (established, nothing in flight).
    fn keepalive_due(&self, cfg: &TcpConfig) -> Option<Instant> {
        let idle = cfg.keepalive?;
        (self.state == State::Established && self.snd_una == self.snd_max)
            .then(|| self.last_activity + idle + cfg.keepalive_interval * u32::from(self.ka_sent))
    }

    pub fn on_timer(&mut self, now: Instant, cfg: &TcpConfig, counters: &mut TcpCounters) -> Input {
        let mut out = Input::default();
        if self.timewait_until.is_some_and(|t| now >= t) {
            out.closed = Some(CloseReason::Normal);
            return out;
        }
        if matches!(self.state, State::SynSent | State::SynReceived)
            && now >= self.opened + cfg.handshake_timeout
        {
            out.closed = Some(CloseReason::TimedOut);
            return out;
        }
        let open = self.state != State::TimeWait && self.state.is_synchronized();
        if open && self.deadline.is_some_and(|t| now >= t) {
            out.closed = Some(CloseReason::Deadline);
            return out;
        }
        if open && self.send_timeout_at().is_some_and(|t| now >= t) {
            out.closed = Some(CloseReason::SendTimeout);
            return out;
        }
        if self.state == State::FinWait2 && now >= self.data_heard + cfg.fin_wait2_timeout {
            counters.fin_wait2_timeouts += 1;
            out.closed = Some(CloseReason::TimedOut);
            return out;
        }
        if open && now >= self.last_activity + self.idle_timeout(cfg) {
            out.closed = Some(CloseReason::TimedOut);
            return out;
        }
        if self.keepalive_due(cfg).is_some_and(|t| now >= t) {
            if self.ka_sent >= cfg.keepalive_probes {
                out.closed = Some(CloseReason::TimedOut);
                return out;
            }
            self.ka_sent += 1;
            self.ka_probe = true;
            counters.keepalive_probes += 1;
            out.send = true;
        }
        if self.ack_at.is_some_and(|t| now >= t) {
            self.ack_at = None;
            self.ack_now = true;
            out.send = true;
        }
        if self.reo_at.is_some_and(|t| now >= t) {
            // RACK's reordering timer (RFC 8985 §6.3): data sent before
            // what arrived is still missing a reordering window later.
            self.reo_at = None;
            if self.rack_detect(now) {
                if self.may_enter_recovery() {
                    self.enter_recovery(now);
                }
                counters.rack_losses += 1;
                self.fast_rtx = true;
                out.send = true;
            }
        }
        if self.tlp_armed && self.rto_at.is_some_and(|t| now >= t) {
            self.tlp_armed = false;
            self.rto_at = Some(now + self.rto);
            if self.recover.is_none() && self.snd_wnd > 0 && self.snd_una != self.snd_max {
                // Tail loss probe (RFC 8985 §7.3): no ACK for 2·SRTT, so the
                // tail of the flight (or its ACKs) may be lost and nothing
                // would tell us but the RTO. One segment elicits an ACK whose
                // SACK blocks start recovery: new data if there is some and
                // the peer's window takes it, else the last segment again.
                self.tlp_out = true;
                counters.tail_loss_probes += 1;
                let data_end = self.buf_seq + self.send.as_ref().map_or(0, RingBuf::len) as u32;
                let in_flight = self.snd_nxt - self.snd_una;
                if self.snd_nxt.diff(data_end) < 0 && self.snd_wnd > in_flight {
                    self.tlp_new = true;
                } else {
                    self.tlp_rtx = true;
                }
                out.send = true;
            }
            return out;
        }
        if self.rto_at.is_some_and(|t| now >= t) {
            // RFC 6298 §5: retransmission timeout, or the persist timer.
            if self.retries >= cfg.max_retransmits {
                out.closed = Some(CloseReason::TimedOut);
                return out;
            }
            self.retries += 1;
            self.rto = (self.rto * 2).min(cfg.max_rto);
            self.rto_at = None;
            let handshake = matches!(self.state, State::SynSent | State::SynReceived);
            if !handshake && (self.snd_wnd == 0 || self.snd_una == self.snd_max) {
                // Persist (RFC 9293 §3.8.6.1): the window is closed (or too
                // small to send into, §3.8.6.2.1's override): probe it
                // again with the byte at SND.UNA, the interval doubling up
                // to max_rto. Any ACK resets `retries`, so only a peer that
                // stops answering is given up on. With a send timeout, at
                // most a quarter of it: a window update lost on the way
                // leaves only a probe's answer to show the window open,
                // and that must come before the timeout ends a peer that
                // reads again.
                if let Some(limit) = self.send_timeout {
                    self.rto = self.rto.min((limit / 4).max(cfg.min_rto));
                }
                self.snd_nxt = self.snd_una;
                self.probe = true;
                counters.window_probes += 1;
                out.send = true;
                return out;
            }
            counters.rto_expiries += 1;
            if handshake {
                counters.retransmits += 1;
                self.restart_rack(now);
                self.synack_needed = true;
            } else {
                self.undo_begin(now, true);
                self.hystart.off();
                self.ssthresh = self.cubic.on_congestion(self.cwnd, self.seg_size);
                self.cwnd = self.seg_size;
                self.rack.recovery_ended();
                self.go_back(now);
                self.timeout_point = Some(self.snd_max);
            }
            out.send = true;
        }
        out
    }

    /// RFC 8985 §7.1: what is in flight goes again from SND.UNA, so a
    /// probe's episode ends and RACK starts over.
    fn restart_rack(&mut self, now: Instant) {
        self.tlp_out = false;
        self.rtx_sent = None;
        self.tlp_episode = None;
        self.rack.reset(now);
        self.rack_lost = self.snd_una;
        self.reo_at = None;
    }

    /// Sends everything in flight again from SND.UNA (after an RTO, or a
    /// Packet Too Big): what the peer holds above it is forgotten, as
    /// RFC 2018 §8 allows, and found again from its next ACKs.
    fn go_back(&mut self, now: Instant) {
        self.restart_rack(now);
        self.snd_nxt = self.snd_una;
        self.recover = None;
        self.dupacks = 0;
        self.rtt_probe = None;
        self.scoreboard.clear();
    }

    /// A Packet Too Big for this connection's path (RFC 8201 §4): `room`
    /// is the reported MTU less the IP header, `seq` the sequence number
    /// of the segment it quotes. Believed only for a segment in flight
    /// (RFC 5927 §4.1: SND.UNA ≤ seq < SND.MAX, so an off-path attacker
    /// must guess the window); then segments are cut to fit and what is
    /// in flight goes again at once, with no congestion response (the
    /// drop was not congestion; Linux's tcp_simple_retransmit). True when
    /// the segment size went down.
    pub fn lower_path_mtu(&mut self, room: u32, seq: Seq, now: Instant) -> bool {
        if !self.state.is_synchronized()
            || seq.diff(self.snd_una) < 0
            || seq.diff(self.snd_max) >= 0
        {
            return false;
        }
        let ts_overhead = if self.ts_recent.is_some() { 12 } else { 0 };
        let size = room.saturating_sub(20 + ts_overhead);
        if size >= self.seg_size || size < u32::from(MIN_PEER_MSS) {
            return false;
        }
        self.seg_size = size;
        self.go_back(now);
        self.undo = None;
        true
    }

    // ---- output ----

    fn repr<'b>(
        &self,
        cfg: &TcpConfig,
        now: Instant,
        control: TcpControl,
        seq: Seq,
        payload: &'b [u8],
    ) -> TcpRepr<'b> {
        let (window, _) = self.window_field(cfg);
        TcpRepr {
            src_port: self.key.local_port,
            dst_port: self.key.remote_port,
            control,
            seq_number: TcpSeqNumber(seq.0 as i32),
            ack_number: Some(TcpSeqNumber(self.rcv_nxt.0 as i32)),
            window_len: window,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: self.sack_blocks(),
            timestamp: self
                .ts_recent
                .map(|r| TcpTimestampRepr::new(ts_now(now), r)),
            payload,
        }
    }

    /// SACK blocks for our ACKs (RFC 2018 §4): a D-SACK block if data
    /// came twice (RFC 2883 §4), then the range holding the last
    /// out-of-order segment (the one that triggered this ACK: the §4
    /// MUST), then the other ranges, highest first.
    fn sack_blocks(&self) -> [Option<(u32, u32)>; 3] {
        let mut blocks = [None; 3];
        if !self.sack_ok || (self.dsack.is_none() && self.ooo.is_empty()) {
            return blocks; // nearly every ACK
        }
        let ranges = self.ooo.ranges();
        let latest = self.ooo_last.and_then(|at| {
            ranges
                .iter()
                .position(|&(l, r)| at.diff(l) >= 0 && at.diff(r) < 0)
        });
        let rest = ranges
            .iter()
            .enumerate()
            .rev()
            .filter(|&(i, _)| Some(i) != latest)
            .map(|(_, &range)| range);
        let order = self
            .dsack
            .into_iter()
            .chain(latest.map(|i| ranges[i]))
            .chain(rest);
        for (slot, (l, r)) in blocks.iter_mut().zip(order) {
            *slot = Some((l.0, r.0));
        }
        blocks
    }

    fn sent_ack(&mut self, cfg: &TcpConfig) {
        let (_, right) = self.window_field(cfg);
        self.adv_right = right;
        self.last_ack_sent = self.rcv_nxt;
        self.dsack = None;
        self.ack_now = false;
        self.ack_small = false;
        self.ack_held = false;
        self.ack_at = None;
        self.unacked_segs = 0;
    }

    /// Emits what this connection owes. Returns false if `emit` refused.
    pub fn transmit(
        &mut self,
        now: Instant,
        cfg: &TcpConfig,
        counters: &mut TcpCounters,
        to: Path,
        emit: &mut impl FnMut(&Outgoing<'_>) -> bool,
    ) -> bool {
        let Path { src, dst } = to;
        self.note_send_progress(now, false);
        if self.state == State::SynSent {
            return !self.synack_needed || self.emit_syn(now, cfg, counters, to, emit);
        }
        if self.state == State::SynReceived {
            if self.synack_needed {
                if !self.emit_syn(now, cfg, counters, to, emit) {
                    return false;
                }
            } else if self.ack_now {
                // An unacceptable segment (e.g. the peer's SYN-ACK crossing
                // ours in a simultaneous open) is answered with an ACK.
                if !self.emit_ack(now, cfg, counters, to, emit) {
                    return false;
                }
            }
            return true;
        }
        if self.state == State::TimeWait {
            return !self.ack_now || self.emit_ack(now, cfg, counters, to, emit);
        }

        let data_len = self.send.as_ref().map_or(0, RingBuf::len) as u32;
        let data_end = self.buf_seq + data_len;
        if self.fast_rtx && !self.emit_retransmissions(now, cfg, counters, to, emit, data_end) {
            return false;
        }
        if self.tlp_rtx && !self.emit_tail_probe(now, cfg, counters, to, emit, data_end) {
            return false;
        }
        if !self.emit_new(now, cfg, counters, to, emit, data_end) {
            return false;
        }
        if self.ka_probe {
            // RFC 9293 §3.8.4: SEG.SEQ = SND.NXT − 1, no data: the peer
            // answers with an ACK if it is there.
            let repr = self.repr(cfg, now, TcpControl::None, self.snd_nxt + u32::MAX, &[]);
            if !emit(&Outgoing {
                src,
                dst,
                repr,
                segment_size: 0,
            }) {
                return false;
            }
            counters.segments_out += 1;
            self.ka_probe = false;
        }
        if self.snd_nxt.diff(data_end) < 0 && self.rto_at.is_none() {
            // Data waits and nothing is outstanding: the window is closed or
            // too small to be worth a segment. Persist timer (RFC 9293
            // §3.8.6.1).
            self.rto_at = Some(now + self.rto);
        }
        if self.acks_now() {
            return self.emit_ack(now, cfg, counters, to, emit);
        }
        true
    }

    /// Up to `len` bytes of the send buffer from sequence number `at`.
    fn sent_bytes(&self, at: Seq, len: u32) -> &[u8] {
        let off = (at - self.buf_seq) as usize;
        self.send
            .as_ref()
            .map_or(&[][..], |r| r.slice_at(off, len as usize))
    }

    /// Fast retransmit / SACK recovery: resends holes, `snd_nxt`
    /// unchanged. Without SACK information this is the one segment at
    /// `snd_una` (RFC 5681/6582); with it, every hole below the highest
    /// SACKed byte, as far as the congestion window allows (RFC 6675).
    /// Returns false if `emit` refused.
    fn emit_retransmissions(
        &mut self,
        now: Instant,
        cfg: &TcpConfig,
        counters: &mut TcpCounters,
        to: Path,
        emit: &mut impl FnMut(&Outgoing<'_>) -> bool,
        data_end: Seq,
    ) -> bool {
        self.fast_rtx = false;
        let pipe = (self.snd_nxt - self.snd_una).saturating_sub(self.scoreboard.bytes());
        let mut budget = (self.cwnd.saturating_sub(pipe) / self.seg_size).max(1);
        // Holes below the highest SACKed byte; without SACK information,
        // the one segment at snd_una, never past SND.MAX (what lies there
        // was never sent).
        let one_segment = self.snd_una + self.data_room().min(self.snd_max - self.snd_una);
        let limit = self.scoreboard.highest().unwrap_or(one_segment);
        let mut at = if !self.scoreboard.is_empty() {
            self.rtx_next.max(self.snd_una)
        } else {
            self.snd_una
        };
        while budget > 0 && at.diff(limit) < 0 && at.diff(self.snd_max) < 0 {
            if let Some(end) = self.scoreboard.covering(at) {
                at = end;
                continue;
            }
            // RFC 6675 IsLost: a hole counts as lost once at least
            // three segments' worth is SACKed above it (while the path
            // has not been seen to reorder), or RACK's time rule says
            // so (RFC 8985 §6.2). The first hole, at snd_una, always
            // goes (NewReno's partial-ACK rule).
            if !self.scoreboard.is_empty()
                && at != self.snd_una
                && (self.rack.reordering_seen() || self.scoreboard.above(at) < 3 * self.seg_size)
                && self.rack_lost.diff(at) <= 0
            {
                break;
            }
            // The hole runs to the next SACKed range (or one segment).
            let hole_end = self.scoreboard.next_above(at).unwrap_or(limit);
            let len = (hole_end - at)
                .min(self.data_room())
                .min(data_end.max(at) - at);
            debug_assert!((at + len).diff(self.snd_max) <= 0, "a resend past SND.MAX");
            let Some(sent) = self.resend(now, cfg, counters, to, emit, at, len, self.fin_seq)
            else {
                self.fast_rtx = true;
                return false;
            };
            if sent == 0 {
                break;
            }
            if self.rto_at.is_none() || self.tlp_armed {
                self.rto_at = Some(now + self.rto);
                self.tlp_armed = false;
            }
            self.rtx_sent = Some((now, self.snd_max));
            at = at + sent;
            self.rtx_next = at;
            budget -= 1;
        }
        true
    }

    /// The tail loss probe that resends the last segment sent (its data,
    /// and our FIN if it carried it). Returns false if `emit` refused.
    fn emit_tail_probe(
        &mut self,
        now: Instant,
        cfg: &TcpConfig,
        counters: &mut TcpCounters,
        to: Path,
        emit: &mut impl FnMut(&Outgoing<'_>) -> bool,
        data_end: Seq,
    ) -> bool {
        let fin_sent = self.fin_seq.filter(|&f| self.snd_max.diff(f) > 0);
        let data_sent_end = if self.snd_max.diff(data_end) < 0 {
            self.snd_max
        } else {
            data_end
        };
        let len = if data_sent_end.diff(self.snd_una) > 0 {
            (data_sent_end - self.snd_una).min(self.data_room())
        } else {
            0
        };
        let at = data_sent_end + len.wrapping_neg();
        let Some(sent) = self.resend(now, cfg, counters, to, emit, at, len, fin_sent) else {
            return false;
        };
        self.tlp_rtx = false;
        if sent > 0 {
            self.tlp_seq = Some(at);
            self.start_tlp_episode(at, true);
        }
        true
    }

    /// SND.MAX follows SND.NXT; what first went out now is logged for
    /// RACK.
    fn advance_snd_max(&mut self, now: Instant) {
        if self.snd_nxt.diff(self.snd_max) > 0 {
            self.snd_max = self.snd_nxt;
            self.rack.log.record(self.snd_max, now);
        }
    }

    /// A probe went out from `start` (RFC 8985 §7.4.1): unless an episode
    /// is open, one starts, ending at SND.NXT.
    fn start_tlp_episode(&mut self, start: Seq, retrans: bool) {
        if self.tlp_episode.is_none() {
            self.tlp_episode = Some(TlpEpisode {
                start,
                end: self.snd_max,
                retrans,
            });
        }
    }

    /// Sends again up to `len` bytes from `at`, with our FIN when it is at
    /// `fin_at` right after them. Returns the sequence space sent (0:
    /// nothing to send), or None if `emit` refused.
    #[allow(clippy::too_many_arguments)]
    fn resend(
        &mut self,
        now: Instant,
        cfg: &TcpConfig,
        counters: &mut TcpCounters,
        to: Path,
        emit: &mut impl FnMut(&Outgoing<'_>) -> bool,
        at: Seq,
        len: u32,
        fin_at: Option<Seq>,
    ) -> Option<u32> {
        let payload = self.sent_bytes(at, len);
        let plen = payload.len() as u32;
        let fin = fin_at == Some(at + plen);
        if plen == 0 && !fin {
            return Some(0);
        }
        let control = if fin {
            TcpControl::Fin
        } else {
            TcpControl::Psh
        };
        let repr = self.repr(cfg, now, control, at, payload);
        if !emit(&Outgoing {
            src: to.src,
            dst: to.dst,
            repr,
            segment_size: 0,
        }) {
            return None;
        }
        counters.segments_out += 1;
        counters.retransmits += 1;
        self.sent_ack(cfg);
        Some(plen + u32::from(fin))
    }

    /// New data and our FIN, as far as the send and congestion windows
    /// allow. Returns false if `emit` refused.
    fn emit_new(
        &mut self,
        now: Instant,
        cfg: &TcpConfig,
        counters: &mut TcpCounters,
        to: Path,
        emit: &mut impl FnMut(&Outgoing<'_>) -> bool,
        data_end: Seq,
    ) -> bool {
        let Path { src, dst } = to;
        loop {
            // Bytes the peer holds out of order are not in the network.
            let in_flight = (self.snd_nxt - self.snd_una).saturating_sub(self.scoreboard.bytes());
            let wnd = self.snd_wnd.min(self.cwnd);
            let mut usable = wnd.saturating_sub(in_flight);
            if self.probe && usable == 0 {
                usable = 1;
            }
            if self.tlp_new {
                // The tail loss probe: one segment past the congestion
                // window, within the peer's.
                usable = usable.max(self.snd_wnd.saturating_sub(in_flight).min(self.seg_size));
            }
            let fin_due = self
                .fin_seq
                .is_some_and(|f| self.snd_nxt.diff(f) >= 0 && self.snd_nxt.diff(f + 1) < 0);
            let queued = if self.snd_nxt.diff(data_end) < 0 {
                data_end - self.snd_nxt
            } else {
                0
            };
            let segment = self.data_room();
            let mut room = self.send_room(segment);
            if self.snd_nxt.diff(self.snd_max) < 0 {
                // Sending again (go-back-N after an RTO): what the peer
                // has SACKed since does not go again (RFC 6675 §5.1).
                if let Some(end) = self.scoreboard.covering(self.snd_nxt) {
                    self.snd_nxt = end;
                    continue;
                }
                if let Some(next) = self.scoreboard.next_above(self.snd_nxt) {
                    room = room.min(next - self.snd_nxt);
                }
            }
            let mut len = queued.min(room).min(usable);
            // Silly window avoidance (RFC 9293 §3.8.6.2.1, MUST-38) for
            // both windows: where the peer's window or the congestion
            // window ends the segment short of what is queued, send whole
            // segments only, and wait for room for the rest. A byte-counted
            // congestion window grows a few bytes per ACK; sending what it
            // allowed split the stream into runts (a quarter-size average
            // through a bottleneck), each costing a packet on every queue
            // and a whole slot in a drop-tail one. Where the peer's window
            // limits, half the largest one it offered also goes; the
            // persist probe and the tail loss probe override.
            let short = len < queued.min(room);
            if short && len >= segment {
                len -= len % segment;
            }
            let window_bound = self.snd_wnd < self.cwnd;
            let worth = !short
                || len >= segment
                || (window_bound && len >= self.max_snd_wnd / 2)
                || self.probe
                || self.tlp_new;
            if len > 0 && worth {
                let payload = self.sent_bytes(self.snd_nxt, len);
                let plen = payload.len() as u32;
                let with_fin = self.fin_seq == Some(self.snd_nxt + plen);
                let control = if with_fin {
                    TcpControl::Fin
                } else {
                    TcpControl::Psh
                };
                let repr = self.repr(cfg, now, control, self.snd_nxt, payload);
                // Longer than a segment only where the port cuts it.
                let segment_size = if plen > segment { segment as u16 } else { 0 };
                if !emit(&Outgoing {
                    src,
                    dst,
                    repr,
                    segment_size,
                }) {
                    return false;
                }
                counters.segments_out += 1;
                if segment_size > 0 {
                    counters.offload_segments += 1;
                }
                if self.snd_nxt.diff(self.snd_max) < 0 {
                    // Sent before: go-back-N after an RTO or a Packet Too
                    // Big, or a window probe's byte again.
                    counters.retransmits += 1;
                }
                self.probe = false;
                if self.rtt_probe.is_none()
                    && self.snd_nxt == self.snd_max
                    && self.ts_recent.is_none()
                {
                    self.rtt_probe = Some((self.snd_nxt + plen, now));
                }
                self.snd_nxt = self.snd_nxt + plen + u32::from(with_fin);
                if with_fin {
                    self.on_fin_sent();
                }
                self.advance_snd_max(now);
                self.arm_loss_timer(now, false);
                self.sent_ack(cfg);
                if self.tlp_new {
                    self.tlp_new = false;
                    let start = self.snd_nxt + (plen + u32::from(with_fin)).wrapping_neg();
                    self.tlp_seq = Some(start);
                    self.start_tlp_episode(start, false);
                    break;
                }
                continue;
            }
            if fin_due && self.snd_nxt == data_end {
                let repr = self.repr(cfg, now, TcpControl::Fin, self.snd_nxt, &[]);
                if !emit(&Outgoing {
                    src,
                    dst,
                    repr,
                    segment_size: 0,
                }) {
                    return false;
                }
                counters.segments_out += 1;
                self.snd_nxt = self.snd_nxt + 1;
                self.advance_snd_max(now);
                self.on_fin_sent();
                self.arm_loss_timer(now, false);
                self.sent_ack(cfg);
            }
            break;
        }
        true
    }

    /// Most new payload bytes for one segment handed to the port: one
    /// `segment` (the data room of a segment), or as many whole ones as
    /// fit the link's `segmentation_max` where its port cuts them (TSO),
    /// and a segment size the port's 16-bit field can carry. Never cut
    /// below [`MIN_TSO_SEGMENT`]: a peer announcing a tiny MSS gets
    /// segments we cut ourselves (NICs refuse such TSO requests, some by
    /// resetting the queue: i40e's floor is 256).
    fn send_room(&self, segment: u32) -> u32 {
        if self.segmentation_max <= segment
            || segment > u32::from(u16::MAX)
            || segment < MIN_TSO_SEGMENT
        {
            return segment;
        }
        self.segmentation_max / segment * segment
    }

    /// Sends our SYN (SYN-SENT) or SYN-ACK (SYN-RECEIVED) with its options
    /// and starts the retransmission timer.
    fn emit_syn(
        &mut self,
        now: Instant,
        cfg: &TcpConfig,
        counters: &mut TcpCounters,
        to: Path,
        emit: &mut impl FnMut(&Outgoing<'_>) -> bool,
    ) -> bool {
        let active = self.state == State::SynSent;
        let mut repr = self.repr(cfg, now, TcpControl::Syn, self.iss, &[]);
        repr.max_seg_size = Some(self.our_mss);
        // The window of a SYN or SYN-ACK is never scaled (RFC 7323 §2.2).
        let unscaled = cfg.buffer_size.min(65535) as u16;
        if active {
            repr.ack_number = None;
            repr.window_len = unscaled;
            repr.window_scale = Some(cfg.window_scale);
            repr.timestamp = Some(TcpTimestampRepr::new(ts_now(now), 0));
            repr.sack_permitted = true;
        } else {
            repr.window_len = repr.window_len.max(unscaled);
            repr.window_scale = (self.rcv_shift > 0).then_some(self.rcv_shift);
            repr.sack_permitted = self.sack_ok;
        }
        if !emit(&Outgoing {
            src: to.src,
            dst: to.dst,
            repr,
            segment_size: 0,
        }) {
            return false;
        }
        counters.segments_out += 1;
        self.synack_needed = false;
        self.snd_nxt = self.iss + 1;
        self.snd_max = self.snd_max.max(self.snd_nxt);
        self.rto_at = Some(now + self.rto);
        if !active {
            self.sent_ack(cfg);
        }
        true
    }

    /// Sends a pure ACK (<SEQ=SND.NXT><ACK=RCV.NXT>, window, SACK blocks).
    fn emit_ack(
        &mut self,
        now: Instant,
        cfg: &TcpConfig,
        counters: &mut TcpCounters,
        to: Path,
        emit: &mut impl FnMut(&Outgoing<'_>) -> bool,
    ) -> bool {
        let repr = self.repr(cfg, now, TcpControl::None, self.snd_nxt, &[]);
        if !emit(&Outgoing {
            src: to.src,
            dst: to.dst,
            repr,
            segment_size: 0,
        }) {
            return false;
        }
        counters.segments_out += 1;
        self.sent_ack(cfg);
        true
    }

    fn on_fin_sent(&mut self) {
        match self.state {
            State::Established => self.state = State::FinWait1,
            State::CloseWait => self.state = State::LastAck,
            _ => {}
        }
    }
}
