//! One connection's control block and its state machine (RFC 9293 §3.10).

use std::time::Duration;

use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

use super::buffer::{BufferPool, RingBuf};
use super::cubic::Cubic;
use super::{CloseReason, FlowKey, Outgoing, Seq, TcpConfig, TcpCounters};
use crate::time::Instant;

/// Connection states, named as RFC 9293 §3.3.2 names them (LISTEN is the
/// engine's listener table, not a connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    SynSent,
    SynReceived,
    Established,
    FinWait1,
    FinWait2,
    CloseWait,
    Closing,
    LastAck,
    TimeWait,
}

impl State {
    pub const COUNT: usize = 9;

    /// Past the handshake (RFC 9293's "synchronized" states).
    pub fn is_synchronized(self) -> bool {
        !matches!(self, State::SynSent | State::SynReceived)
    }

    /// States in which the peer may still send data.
    fn receives_data(self) -> bool {
        matches!(self, State::Established | State::FinWait1 | State::FinWait2)
    }
}

/// What one input or timer did, for the engine.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Input {
    pub established: bool,
    pub readable: bool,
    pub writable: bool,
    pub peer_closed: bool,
    pub closed: Option<CloseReason>,
    pub send: bool,
    /// SYN-SENT got an ACK for something else: reset with this SEQ.
    pub reset_peer: Option<Seq>,
    /// An active open completed.
    pub connected: bool,
}

/// Smallest MSS we accept from a peer (Linux's TCP_MIN_MSS): a tiny or
/// zero MSS option would otherwise make segments of a few bytes (or none).
const MIN_PEER_MSS: u16 = 88;

/// The peer's MSS option, defaulted (RFC 9293 §3.7.1: 536) and clamped.
fn peer_mss(option: Option<u16>) -> u32 {
    u32::from(option.unwrap_or(536).max(MIN_PEER_MSS))
}

/// Timestamps in ms for the TSopt clock (RFC 7323 §5.4: 1 ms to 1 s/tick).
fn ts_now(now: Instant) -> u32 {
    (now.as_nanos() / 1_000_000) as u32
}

#[derive(Debug)]
pub(super) struct Conn<A> {
    pub key: FlowKey,
    pub state: State,
    pub app: A,
    /// Reached ESTABLISHED (the application knows it).
    pub accepted: bool,
    /// On the engine's dirty list.
    pub queued: bool,
    /// The generation of the slot this connection occupies (see `ConnId`).
    pub gen: u8,
    /// Deadline of the live timer-wheel entry.
    pub armed_at: Option<Instant>,

    // Send sequence space (RFC 9293 §3.3.1).
    iss: Seq,
    pub snd_una: Seq,
    pub snd_nxt: Seq,
    /// Highest sequence number sent (snd_nxt moves back on timeout).
    snd_max: Seq,
    snd_wnd: u32,
    snd_wl1: Seq,
    snd_wl2: Seq,
    /// Shift for the peer's window field.
    snd_shift: u8,
    /// Payload bytes per segment (MSS less option overhead).
    seg_size: u32,
    send: Option<RingBuf>,
    /// Sequence number of the send buffer's first byte.
    buf_seq: Seq,
    /// Sequence number of our FIN, once the application closed.
    fin_seq: Option<Seq>,
    synack_needed: bool,

    // Receive sequence space.
    pub rcv_nxt: Seq,
    rcv_shift: u8,
    recv: Option<RingBuf>,
    /// Right edge of the window we last advertised.
    adv_right: Seq,
    peer_fin: bool,

    // Options.
    ts_recent: Option<u32>,

    // Timers and round-trip time (RFC 6298).
    rto: Duration,
    srtt: Option<Duration>,
    rttvar: Duration,
    rtt_probe: Option<(Seq, Instant)>,
    retries: u8,
    rto_at: Option<Instant>,
    ack_at: Option<Instant>,
    ack_now: bool,
    unacked_segs: u8,
    handshake_until: Instant,
    timewait_until: Option<Instant>,
    last_activity: Instant,
    /// Send one byte past a zero window (persist probe).
    probe: bool,
    /// Keepalive probes sent since the peer was last heard.
    ka_sent: u8,
    /// Send a keepalive probe with the next transmit.
    ka_probe: bool,

    // Congestion control (RFC 5681, NewReno RFC 6582).
    cwnd: u32,
    ssthresh: u32,
    dupacks: u8,
    recover: Option<Seq>,
    fast_rtx: bool,

    cubic: Cubic,

    // SACK (RFC 2018), sender side: what the peer holds above snd_una.
    sack_ok: bool,
    scoreboard: Scoreboard,
    /// Receive side: out-of-order ranges above rcv_nxt already written into
    /// the receive ring's free space (same sorted-ranges structure).
    ooo: Scoreboard,
    /// Next sequence number to consider for retransmission in recovery.
    rtx_next: Seq,
}

/// Up to four SACKed ranges above SND.UNA, sorted and disjoint.
#[derive(Debug, Clone, Copy, Default)]
struct Scoreboard {
    ranges: [(Seq, Seq); 4],
    len: u8,
}

impl Scoreboard {
    fn ranges(&self) -> &[(Seq, Seq)] {
        &self.ranges[..usize::from(self.len)]
    }

    fn clear(&mut self) {
        self.len = 0;
    }

    /// Bytes covered.
    fn bytes(&self) -> u32 {
        self.ranges().iter().map(|&(l, r)| r - l).sum()
    }

    /// The highest SACKed sequence number.
    fn highest(&self) -> Option<Seq> {
        self.ranges().last().map(|&(_, r)| r)
    }

    /// Adds a block (clipped to `una..max`), merging overlaps.
    fn add(&mut self, left: Seq, right: Seq, una: Seq, max: Seq) {
        let left = left.max(una);
        let right = if right.diff(max) > 0 { max } else { right };
        if right.diff(left) <= 0 {
            return;
        }
        let mut v: [(Seq, Seq); 5] = [(Seq(0), Seq(0)); 5];
        let n = usize::from(self.len);
        v[..n].copy_from_slice(&self.ranges[..n]);
        v[n] = (left, right);
        let v = &mut v[..=n];
        v.sort_by(|a, b| a.0.diff(b.0).cmp(&0));
        let mut out: [(Seq, Seq); 5] = [(Seq(0), Seq(0)); 5];
        let mut m = 0;
        for &(l, r) in v.iter() {
            if m > 0 && l.diff(out[m - 1].1) <= 0 {
                if r.diff(out[m - 1].1) > 0 {
                    out[m - 1].1 = r;
                }
            } else {
                out[m] = (l, r);
                m += 1;
            }
        }
        // Keep the four highest ranges (those matter for recovery).
        let skip = m.saturating_sub(4);
        self.len = (m - skip) as u8;
        self.ranges[..m - skip].copy_from_slice(&out[skip..m]);
    }

    /// Forgets what lies below `una`.
    fn prune(&mut self, una: Seq) {
        let mut out = [(Seq(0), Seq(0)); 4];
        let mut m = 0;
        for &(l, r) in self.ranges() {
            if r.diff(una) > 0 {
                out[m] = (l.max(una), r);
                m += 1;
            }
        }
        self.ranges = out;
        self.len = m as u8;
    }

    /// Bytes SACKed above `seq`.
    fn above(&self, seq: Seq) -> u32 {
        self.ranges()
            .iter()
            .filter(|&&(l, _)| l.diff(seq) > 0)
            .map(|&(l, r)| r - l)
            .sum()
    }

    /// The end of the SACKed range containing `seq`, if any.
    fn covering(&self, seq: Seq) -> Option<Seq> {
        self.ranges()
            .iter()
            .find(|&&(l, r)| seq.diff(l) >= 0 && seq.diff(r) < 0)
            .map(|&(_, r)| r)
    }
}

impl<A: Default> Conn<A> {
    /// A control block before any segment: SYN-SENT with our ISS, nothing
    /// known of the peer. `accept` and `connect` start from it.
    fn new(key: FlowKey, iss: Seq, now: Instant, cfg: &TcpConfig) -> Self {
        let seg_size = u32::from(cfg.mss) - 12;
        Self {
            key,
            state: State::SynSent,
            app: A::default(),
            accepted: false,
            queued: false,
            gen: 0,
            armed_at: None,
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_max: iss,
            snd_wnd: 0,
            snd_wl1: Seq(0),
            snd_wl2: iss,
            snd_shift: 0,
            seg_size,
            send: None,
            buf_seq: iss + 1,
            fin_seq: None,
            synack_needed: true,
            rcv_nxt: Seq(0),
            rcv_shift: cfg.window_scale,
            recv: None,
            adv_right: Seq(0),
            peer_fin: false,
            ts_recent: None,
            rto: cfg.initial_rto,
            srtt: None,
            rttvar: Duration::ZERO,
            rtt_probe: None,
            retries: 0,
            rto_at: None,
            ack_at: None,
            ack_now: false,
            unacked_segs: 0,
            handshake_until: now + cfg.handshake_timeout,
            timewait_until: None,
            last_activity: now,
            probe: false,
            ka_sent: 0,
            ka_probe: false,
            cwnd: 10 * seg_size,
            ssthresh: u32::MAX / 2,
            dupacks: 0,
            recover: None,
            fast_rtx: false,
            cubic: Cubic::default(),
            sack_ok: false,
            scoreboard: Scoreboard::default(),
            ooo: Scoreboard::default(),
            rtx_next: Seq(0),
        }
    }

    /// Takes the peer's SYN options (MSS, window scale, timestamps, SACK).
    fn take_syn_options(&mut self, syn: &TcpRepr<'_>, cfg: &TcpConfig) {
        match syn.window_scale {
            Some(s) => self.snd_shift = s.min(14),
            None => {
                // RFC 7323 §2.2: scaling only when both sides offered it.
                self.snd_shift = 0;
                self.rcv_shift = 0;
            }
        }
        self.ts_recent = syn.timestamp.map(|t| t.tsval);
        self.sack_ok = syn.sack_permitted;
        let ts_overhead = if self.ts_recent.is_some() { 12 } else { 0 };
        self.seg_size = peer_mss(syn.max_seg_size).min(u32::from(cfg.mss)) - ts_overhead;
        self.cwnd = 10 * self.seg_size;
        let irs = Seq(syn.seq_number.0 as u32);
        self.rcv_nxt = irs + 1;
        self.adv_right = self.rcv_nxt;
        self.snd_wl1 = irs;
    }

    /// A connection for a SYN that reached a listener (RFC 9293 §3.10.7.2).
    pub fn accept(
        key: FlowKey,
        syn: &TcpRepr<'_>,
        iss: Seq,
        now: Instant,
        cfg: &TcpConfig,
    ) -> Self {
        let mut c = Self::new(key, iss, now, cfg);
        c.state = State::SynReceived;
        c.take_syn_options(syn, cfg);
        // The SYN's window is never scaled (RFC 7323 §2.2).
        c.snd_wnd = u32::from(syn.window_len);
        c
    }

    /// An active open (RFC 9293 §3.10.1): a connection in SYN-SENT whose SYN
    /// goes out with the next transmit. The application knows it from the
    /// start (failures end in `Event::Closed`).
    pub fn connect(key: FlowKey, iss: Seq, now: Instant, cfg: &TcpConfig) -> Self {
        let mut c = Self::new(key, iss, now, cfg);
        c.accepted = true;
        c
    }

    // RFC 9293 §3.10.7.3, SYN-SENT.
    fn input_syn_sent(&mut self, now: Instant, seg: &TcpRepr<'_>, cfg: &TcpConfig) -> Input {
        let mut out = Input::default();
        let ack = seg.ack_number.map(|a| Seq(a.0 as u32));
        let ack_ok = ack.is_some_and(|a| a.diff(self.iss) > 0 && a.diff(self.snd_nxt) <= 0);
        if ack.is_some() && !ack_ok {
            // Not for our SYN: the engine answers with a reset.
            out.reset_peer = ack;
            return out;
        }
        if seg.control == TcpControl::Rst {
            if ack_ok {
                out.closed = Some(CloseReason::Refused);
            }
            return out;
        }
        if seg.control != TcpControl::Syn {
            return out;
        }
        self.take_syn_options(seg, cfg);
        if let Some(a) = ack.filter(|_| ack_ok) {
            // The SYN-ACK: established (the SYN-ACK's window is unscaled).
            self.snd_una = a;
            self.snd_wnd = u32::from(seg.window_len);
            self.snd_wl2 = a;
            self.rto_at = None;
            self.retries = 0;
            if let Some(t) = seg.timestamp.filter(|t| t.tsecr != 0) {
                let r = Duration::from_millis(u64::from(ts_now(now).wrapping_sub(t.tsecr)));
                self.update_rto(r, cfg);
            }
            self.state = State::Established;
            out.connected = true;
            self.ack_now = true;
            out.send = true;
        } else {
            // Simultaneous open: answer with our SYN and an ACK.
            self.state = State::SynReceived;
            self.snd_nxt = self.iss;
            self.synack_needed = true;
            out.send = true;
        }
        out
    }

    /// A connection rebuilt from a valid SYN cookie and the ACK that
    /// returned it: established at once (RFC 4987 §3.6).
    #[allow(clippy::too_many_arguments)]
    pub fn from_cookie(
        key: FlowKey,
        ack_seg: &TcpRepr<'_>,
        iss: Seq,
        irs: Seq,
        mss: u16,
        wscale: Option<u8>,
        sack: bool,
        now: Instant,
        cfg: &TcpConfig,
    ) -> Self {
        let syn = TcpRepr {
            src_port: key.remote_port,
            dst_port: key.local_port,
            control: TcpControl::Syn,
            seq_number: TcpSeqNumber(irs.0 as i32),
            ack_number: None,
            window_len: ack_seg.window_len,
            window_scale: wscale,
            max_seg_size: Some(mss),
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: ack_seg.timestamp,
            payload: &[],
        };
        let mut c = Self::accept(key, &syn, iss, now, cfg);
        c.sack_ok = sack;
        c.state = State::Established;
        c.accepted = true;
        c.synack_needed = false;
        c.snd_una = iss + 1;
        c.snd_nxt = iss + 1;
        c.snd_max = iss + 1;
        c.snd_wnd = u32::from(ack_seg.window_len) << c.snd_shift;
        c.snd_wl1 = Seq(ack_seg.seq_number.0 as u32);
        c.snd_wl2 = iss + 1;
        c
    }

    // ---- application side ----

    pub fn recv(&mut self, buf: &mut [u8], pool: &mut BufferPool) -> usize {
        let Some(r) = self.recv.as_mut() else {
            return 0;
        };
        let n = r.pop_into(buf);
        if r.is_empty() && self.ooo.len == 0 {
            pool.give(self.recv.take().expect("some"));
        }
        n
    }

    pub fn peek(&self) -> (&[u8], &[u8]) {
        self.recv.as_ref().map_or((&[], &[]), RingBuf::as_slices)
    }

    pub fn consume(&mut self, n: usize, pool: &mut BufferPool) {
        if let Some(r) = self.recv.as_mut() {
            r.consume(n);
            if r.is_empty() && self.ooo.len == 0 {
                pool.give(self.recv.take().expect("some"));
            }
        }
    }

    fn can_send(&self) -> bool {
        self.fin_seq.is_none()
            && matches!(
                self.state,
                State::SynReceived | State::Established | State::CloseWait
            )
    }

    pub fn send_space(&self, size: usize) -> usize {
        if !self.can_send() {
            return 0;
        }
        self.send.as_ref().map_or(size, RingBuf::free)
    }

    pub fn send(&mut self, data: &[u8], size: usize, pool: &mut BufferPool) -> usize {
        let mut done = 0;
        while done < data.len() {
            let n = self.send_with(data.len() - done, size, pool, |room| {
                room.copy_from_slice(&data[done..done + room.len()]);
                room.len()
            });
            if n == 0 {
                break;
            }
            done += n;
        }
        done
    }

    pub fn send_with(
        &mut self,
        max: usize,
        _size: usize,
        pool: &mut BufferPool,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> usize {
        if !self.can_send() || max == 0 {
            return 0;
        }
        let ring = self.send.get_or_insert_with(|| pool.take());
        let n = ring.push_with(max, fill);
        if ring.is_empty() {
            pool.give(self.send.take().expect("some"));
        }
        n
    }

    /// The application is done sending: FIN after the queued bytes.
    pub fn close(&mut self) {
        if self.fin_seq.is_none() {
            self.fin_seq = Some(self.buf_seq + self.send.as_ref().map_or(0, RingBuf::len) as u32);
        }
    }

    pub fn release_buffers(&mut self, pool: &mut BufferPool) {
        if let Some(r) = self.send.take() {
            pool.give(r);
        }
        if let Some(r) = self.recv.take() {
            pool.give(r);
        }
    }

    // ---- windows ----

    fn recv_free(&self, cfg: &TcpConfig) -> u32 {
        self.recv.as_ref().map_or(cfg.buffer_size, RingBuf::free) as u32
    }

    /// The window field to send, and the right edge it advertises.
    fn window_field(&self, cfg: &TcpConfig) -> (u16, Seq) {
        let free = self.recv_free(cfg);
        let field = (free >> self.rcv_shift).min(u32::from(u16::MAX));
        // Never shrink the window (RFC 9293 §3.8.6.2.2).
        let right = (self.rcv_nxt + (field << self.rcv_shift)).max(self.adv_right);
        (field as u16, right)
    }

    /// The application freed enough receive space that the peer should
    /// hear of it (RFC 9293 §3.8.6.2.2: by at least 2 MSS).
    pub fn window_update_due(&mut self, cfg: &TcpConfig) -> bool {
        if !self.state.receives_data() {
            return false;
        }
        let (_, right) = self.window_field(cfg);
        if right.diff(self.adv_right) >= (2 * self.seg_size) as i32 {
            self.ack_now = true;
            return true;
        }
        false
    }

    // ---- input (RFC 9293 §3.10.7.4) ----

    pub fn input(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        cfg: &TcpConfig,
        pool: &mut BufferPool,
        counters: &mut TcpCounters,
    ) -> Input {
        self.last_activity = now;
        self.ka_sent = 0;
        if self.state == State::SynSent {
            return self.input_syn_sent(now, seg, cfg);
        }
        let mut out = Input::default();
        let seq = Seq(seg.seq_number.0 as u32);
        let seg_len = seg.segment_len() as u32;

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
                // A retransmitted FIN in TIME-WAIT: ack it again and restart
                // the 2 MSL timer.
                if self.state == State::TimeWait && seg.control == TcpControl::Fin {
                    self.timewait_until = Some(now + cfg.time_wait);
                }
                self.ack_now = true;
                out.send = true;
            }
            return out;
        }

        // Second: RST (RFC 5961 §3.2: only an exact match resets; anything
        // else in the window gets a challenge ACK).
        if seg.control == TcpControl::Rst {
            if seq == self.rcv_nxt {
                out.closed = Some(CloseReason::Reset);
            } else {
                counters.challenge_acks += 1;
                self.ack_now = true;
                out.send = true;
            }
            return out;
        }

        // Fourth: SYN in a synchronized state (RFC 5961 §4): challenge ACK.
        if seg.control == TcpControl::Syn {
            if self.state == State::SynReceived && seq + 1 == self.rcv_nxt {
                // The peer retransmitted its SYN: send the SYN-ACK again.
                self.synack_needed = true;
            } else {
                counters.challenge_acks += 1;
                self.ack_now = true;
            }
            out.send = true;
            return out;
        }

        // Fifth: ACK.
        let Some(ack) = seg.ack_number.map(|a| Seq(a.0 as u32)) else {
            return out;
        };
        if self.state == State::SynReceived {
            if ack.diff(self.snd_una) > 0 && ack.diff(self.snd_nxt) <= 0 {
                self.state = State::Established;
                self.accepted = true;
                out.established = true;
                self.snd_wnd = u32::from(seg.window_len) << self.snd_shift;
                self.snd_wl1 = seq;
                self.snd_wl2 = ack;
            } else {
                // RFC 9293: <SEQ=SEG.ACK><CTL=RST>; we just drop it and let
                // the SYN-ACK retransmission sort it out.
                return out;
            }
        }
        if ack.diff(self.snd_max) > 0 {
            // Acknowledges something never sent.
            self.ack_now = true;
            out.send = true;
            return out;
        }
        if let Some(ts) = seg.timestamp {
            if seq.diff(self.rcv_nxt) <= 0 {
                self.ts_recent = Some(ts.tsval);
            }
        }
        let window = u32::from(seg.window_len) << self.snd_shift;
        let sack_news = self.sack_ok && seg.sack_ranges.iter().any(Option::is_some);
        if sack_news {
            for &(l, r) in seg.sack_ranges.iter().flatten() {
                self.scoreboard
                    .add(Seq(l), Seq(r), ack.max(self.snd_una), self.snd_max);
            }
        }
        if ack.diff(self.snd_una) > 0 {
            self.on_new_ack(now, ack, seg.timestamp, cfg, pool, &mut out);
        } else if ack == self.snd_una
            && seg_len == 0
            && window == self.snd_wnd
            && self.snd_max != self.snd_una
        {
            // A duplicate ACK (RFC 5681 §2).
            self.dupacks = self.dupacks.saturating_add(1);
            if self.dupacks == 3 && self.recover.is_none() {
                self.ssthresh = self.cubic.on_congestion(self.cwnd, self.seg_size);
                self.cwnd = self.ssthresh + 3 * self.seg_size;
                self.recover = Some(self.snd_max);
                self.rtx_next = self.snd_una;
                self.fast_rtx = true;
                counters.retransmits += 1;
                out.send = true;
            } else if self.dupacks > 3 {
                self.cwnd += self.seg_size;
                out.send = true;
            }
        }
        // RFC 6675 §5: with SACK, more than 3 MSS SACKed above a hole means
        // loss, without waiting for three duplicate ACKs; in recovery each
        // ACK lets the next holes go out.
        if sack_news && self.scoreboard.len > 0 {
            if self.recover.is_none() && self.scoreboard.bytes() > 3 * self.seg_size {
                self.ssthresh = self.cubic.on_congestion(self.cwnd, self.seg_size);
                self.cwnd = self.ssthresh;
                self.recover = Some(self.snd_max);
                self.rtx_next = self.snd_una;
                counters.retransmits += 1;
            }
            if self.recover.is_some() {
                self.fast_rtx = true;
                out.send = true;
            }
        }
        if self.snd_wl1.diff(seq) < 0 || (self.snd_wl1 == seq && self.snd_wl2.diff(ack) <= 0) {
            if self.snd_wnd == 0 && window > 0 {
                out.send = true;
            }
            self.snd_wnd = window;
            self.snd_wl1 = seq;
            self.snd_wl2 = ack;
        }
        let fin_acked = self.fin_seq.is_some_and(|f| self.snd_una.diff(f) > 0);
        match self.state {
            State::FinWait1 if fin_acked => self.state = State::FinWait2,
            State::Closing if fin_acked => self.enter_time_wait(now, cfg, pool),
            State::LastAck if fin_acked => {
                out.closed = Some(CloseReason::Normal);
                return out;
            }
            _ => {}
        }

        // Seventh: segment text.
        if !seg.payload.is_empty() && self.state.receives_data() && !self.peer_fin {
            if seq.diff(self.rcv_nxt) <= 0 {
                let skip = (self.rcv_nxt - seq) as usize;
                let data = &seg.payload[skip.min(seg.payload.len())..];
                let ring = self.recv.get_or_insert_with(|| pool.take());
                let mut n = ring.push(data) as u32;
                // The gap may now be filled: take in the out-of-order data
                // already written behind it.
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
                    self.ooo.prune(r);
                }
                if ring.is_empty() && self.ooo.len == 0 {
                    pool.give(self.recv.take().expect("some"));
                }
                self.rcv_nxt = self.rcv_nxt + n;
                if n > 0 {
                    out.readable = true;
                }
                self.unacked_segs = self.unacked_segs.saturating_add(1);
                if (n as usize) < data.len()
                    || self.unacked_segs >= 2
                    || data.len() < self.seg_size as usize
                    || self.ooo.len > 0
                {
                    self.ack_now = true;
                } else if self.ack_at.is_none() {
                    self.ack_at = Some(now + cfg.delayed_ack);
                }
            } else {
                // Out of order: keep it behind the gap (where it fits) and
                // send a duplicate ACK at once, with SACK blocks.
                let offset = (seq - self.rcv_nxt) as usize;
                let ring = self.recv.get_or_insert_with(|| pool.take());
                if ring.write_ahead(offset, seg.payload) {
                    let (l, r) = (seq, seq + seg.payload.len() as u32);
                    self.ooo
                        .add(l, r, self.rcv_nxt, self.rcv_nxt + ring.free() as u32);
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
            let fin_acked = self.fin_seq.is_some_and(|f| self.snd_una.diff(f) > 0);
            match self.state {
                State::Established => self.state = State::CloseWait,
                State::FinWait1 if fin_acked => self.enter_time_wait(now, cfg, pool),
                State::FinWait1 => self.state = State::Closing,
                State::FinWait2 => self.enter_time_wait(now, cfg, pool),
                _ => {}
            }
        }
        out.send |= self.ack_now;
        out
    }

    fn on_new_ack(
        &mut self,
        now: Instant,
        ack: Seq,
        ts: Option<TcpTimestampRepr>,
        cfg: &TcpConfig,
        pool: &mut BufferPool,
        out: &mut Input,
    ) {
        let acked = ack - self.snd_una;
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
        let sample = match (ts, self.ts_recent) {
            (Some(t), Some(_)) if t.tsecr != 0 => Some(Duration::from_millis(u64::from(
                ts_now(now).wrapping_sub(t.tsecr),
            ))),
            _ => match self.rtt_probe {
                Some((end, sent)) if ack.diff(end) >= 0 => Some(now - sent),
                _ => None,
            },
        };
        if let Some(r) = sample {
            self.rtt_probe = None;
            self.update_rto(r, cfg);
        }
        self.retries = 0;
        self.dupacks = 0;
        self.scoreboard.prune(ack);
        if self.rtx_next.diff(ack) < 0 {
            self.rtx_next = ack;
        }
        // Congestion control.
        match self.recover {
            Some(rec) if ack.diff(rec) >= 0 => {
                self.recover = None;
                self.cwnd = self.ssthresh;
                self.scoreboard.clear();
            }
            Some(_) => {
                // Partial ACK (RFC 6582): retransmit the next hole now.
                self.fast_rtx = true;
                self.cwnd = self.cwnd.saturating_sub(acked).max(self.seg_size) + self.seg_size;
            }
            // Slow start counts bytes acknowledged, not ACKs (RFC 3465):
            // receivers with GRO send stretch ACKs covering many segments.
            None if self.cwnd < self.ssthresh => self.cwnd = self.cwnd.saturating_add(acked),
            // Congestion avoidance: CUBIC (RFC 9438).
            None => {
                let srtt = self.srtt.unwrap_or(self.rto);
                self.cwnd = self
                    .cubic
                    .on_ack(now, acked, self.cwnd, self.seg_size, srtt);
            }
        }
        self.rto_at = if self.snd_una == self.snd_max {
            None
        } else {
            Some(now + self.rto)
        };
        out.send = true;
    }

    fn update_rto(&mut self, r: Duration, cfg: &TcpConfig) {
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

    fn enter_time_wait(&mut self, now: Instant, cfg: &TcpConfig, pool: &mut BufferPool) {
        self.state = State::TimeWait;
        self.timewait_until = Some(now + cfg.time_wait);
        self.rto_at = None;
        self.release_buffers(pool);
    }

    // ---- timers ----

    pub fn next_deadline(&self, _now: Instant, cfg: &TcpConfig) -> Option<Instant> {
        let mut at: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                at = Some(at.map_or(t, |a: Instant| a.min(t)));
            }
        };
        consider(self.timewait_until);
        consider(self.ack_at);
        consider(self.rto_at);
        match self.state {
            State::SynSent | State::SynReceived => consider(Some(self.handshake_until)),
            State::TimeWait => {}
            _ => {
                consider(Some(self.last_activity + cfg.idle_timeout));
                consider(self.keepalive_due(cfg));
            }
        }
        at
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
        if matches!(self.state, State::SynSent | State::SynReceived) && now >= self.handshake_until
        {
            out.closed = Some(CloseReason::TimedOut);
            return out;
        }
        if self.state != State::TimeWait
            && self.state.is_synchronized()
            && now >= self.last_activity + cfg.idle_timeout
        {
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
        if self.rto_at.is_some_and(|t| now >= t) {
            // RFC 6298 §5: retransmission timeout.
            if self.retries >= cfg.max_retransmits {
                out.closed = Some(CloseReason::TimedOut);
                return out;
            }
            self.retries += 1;
            counters.retransmits += 1;
            counters.rto_expiries += 1;
            self.rto = (self.rto * 2).min(cfg.max_rto);
            self.rto_at = None;
            if matches!(self.state, State::SynSent | State::SynReceived) {
                self.synack_needed = true;
            } else if self.snd_wnd == 0 && self.snd_una == self.snd_max {
                self.probe = true;
            } else {
                self.ssthresh = self.cubic.on_congestion(self.cwnd, self.seg_size);
                self.cwnd = self.seg_size;
                self.snd_nxt = self.snd_una;
                self.recover = None;
                self.dupacks = 0;
                self.rtt_probe = None;
                self.scoreboard.clear();
            }
            out.send = true;
        }
        out
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

    /// SACK blocks for our ACKs (RFC 2018 §4): out-of-order ranges, highest
    /// first.
    fn sack_blocks(&self) -> [Option<(u32, u32)>; 3] {
        let mut blocks = [None; 3];
        if self.sack_ok {
            for (slot, &(l, r)) in blocks.iter_mut().zip(self.ooo.ranges().iter().rev()) {
                *slot = Some((l.0, r.0));
            }
        }
        blocks
    }

    fn sent_ack(&mut self, cfg: &TcpConfig) {
        let (_, right) = self.window_field(cfg);
        self.adv_right = right;
        self.ack_now = false;
        self.ack_at = None;
        self.unacked_segs = 0;
    }

    /// Emits what this connection owes. Returns false if `emit` refused.
    pub fn transmit(
        &mut self,
        now: Instant,
        cfg: &TcpConfig,
        counters: &mut TcpCounters,
        emit: &mut impl FnMut(&Outgoing<'_>) -> bool,
    ) -> bool {
        let (src, dst) = (self.key.local, self.key.remote);
        if self.state == State::SynSent {
            return !self.synack_needed || self.emit_syn(now, cfg, counters, emit);
        }
        if self.state == State::SynReceived {
            if self.synack_needed {
                if !self.emit_syn(now, cfg, counters, emit) {
                    return false;
                }
            } else if self.ack_now {
                // An unacceptable segment (e.g. the peer's SYN-ACK crossing
                // ours in a simultaneous open) is answered with an ACK.
                if !self.emit_ack(now, cfg, counters, emit) {
                    return false;
                }
            }
            return true;
        }
        if self.state == State::TimeWait {
            return !self.ack_now || self.emit_ack(now, cfg, counters, emit);
        }

        let data_len = self.send.as_ref().map_or(0, RingBuf::len) as u32;
        let data_end = self.buf_seq + data_len;
        // Fast retransmit / SACK recovery: resend holes, snd_nxt unchanged.
        // Without SACK information this is the one segment at snd_una
        // (RFC 5681/6582); with it, every hole below the highest SACKed
        // byte, as far as the congestion window allows (RFC 6675).
        if self.fast_rtx {
            self.fast_rtx = false;
            let pipe = (self.snd_nxt - self.snd_una).saturating_sub(self.scoreboard.bytes());
            let mut budget = (self.cwnd.saturating_sub(pipe) / self.seg_size).max(1);
            let limit = self.scoreboard.highest().unwrap_or(self.snd_una + 1);
            let mut at = if self.scoreboard.len > 0 {
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
                // three segments' worth is SACKed above it (reordering
                // alone rarely gets that far). The first hole, at snd_una,
                // always goes (NewReno's partial-ACK rule).
                if self.scoreboard.len > 0
                    && at != self.snd_una
                    && self.scoreboard.above(at) < 3 * self.seg_size
                {
                    break;
                }
                // The hole runs to the next SACKed range (or one segment).
                let hole_end = self
                    .scoreboard
                    .ranges()
                    .iter()
                    .find(|&&(l, _)| l.diff(at) > 0)
                    .map_or(limit, |&(l, _)| l);
                let len = (hole_end - at)
                    .min(self.seg_size)
                    .min(data_end.max(at) - at);
                let off = (at - self.buf_seq) as usize;
                let payload = self
                    .send
                    .as_ref()
                    .map_or(&[][..], |r| r.slice_at(off, len as usize));
                let plen = payload.len() as u32;
                let fin = self.fin_seq == Some(at + plen);
                if plen == 0 && !fin {
                    break;
                }
                let control = if fin {
                    TcpControl::Fin
                } else {
                    TcpControl::Psh
                };
                let repr = self.repr(cfg, now, control, at, payload);
                if !emit(&Outgoing { src, dst, repr }) {
                    self.fast_rtx = true;
                    return false;
                }
                counters.segments_out += 1;
                counters.retransmits += 1;
                self.sent_ack(cfg);
                self.rto_at.get_or_insert(now + self.rto);
                at = at + plen + u32::from(fin);
                self.rtx_next = at;
                budget -= 1;
            }
        }
        loop {
            // Bytes the peer holds out of order are not in the network.
            let in_flight = (self.snd_nxt - self.snd_una).saturating_sub(self.scoreboard.bytes());
            let wnd = self.snd_wnd.min(self.cwnd);
            let mut usable = wnd.saturating_sub(in_flight);
            if self.probe && usable == 0 {
                usable = 1;
            }
            let fin_due = self
                .fin_seq
                .is_some_and(|f| self.snd_nxt.diff(f) >= 0 && self.snd_nxt.diff(f + 1) < 0);
            if self.snd_nxt.diff(data_end) < 0 && usable > 0 {
                let off = (self.snd_nxt - self.buf_seq) as usize;
                let len = (data_end - self.snd_nxt).min(self.seg_size).min(usable);
                let payload = self
                    .send
                    .as_ref()
                    .map_or(&[][..], |r| r.slice_at(off, len as usize));
                let plen = payload.len() as u32;
                let with_fin = self.fin_seq == Some(self.snd_nxt + plen);
                let control = if with_fin {
                    TcpControl::Fin
                } else {
                    TcpControl::Psh
                };
                let repr = self.repr(cfg, now, control, self.snd_nxt, payload);
                if !emit(&Outgoing { src, dst, repr }) {
                    return false;
                }
                counters.segments_out += 1;
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
                self.snd_max = self.snd_max.max(self.snd_nxt);
                self.rto_at.get_or_insert(now + self.rto);
                self.sent_ack(cfg);
                continue;
            }
            if fin_due && self.snd_nxt == data_end {
                let repr = self.repr(cfg, now, TcpControl::Fin, self.snd_nxt, &[]);
                if !emit(&Outgoing { src, dst, repr }) {
                    return false;
                }
                counters.segments_out += 1;
                self.snd_nxt = self.snd_nxt + 1;
                self.snd_max = self.snd_max.max(self.snd_nxt);
                self.on_fin_sent();
                self.rto_at.get_or_insert(now + self.rto);
                self.sent_ack(cfg);
            }
            break;
        }
        if self.ka_probe {
            // RFC 9293 §3.8.4: SEG.SEQ = SND.NXT − 1, no data: the peer
            // answers with an ACK if it is there.
            let repr = self.repr(cfg, now, TcpControl::None, self.snd_nxt + u32::MAX, &[]);
            if !emit(&Outgoing { src, dst, repr }) {
                return false;
            }
            counters.segments_out += 1;
            self.ka_probe = false;
        }
        if self.snd_wnd == 0 && self.snd_nxt.diff(data_end) < 0 && self.rto_at.is_none() {
            // Persist timer (RFC 9293 §3.8.6.1).
            self.rto_at = Some(now + self.rto);
        }
        if self.ack_now {
            return self.emit_ack(now, cfg, counters, emit);
        }
        true
    }

    /// Sends our SYN (SYN-SENT) or SYN-ACK (SYN-RECEIVED) with its options
    /// and starts the retransmission timer.
    fn emit_syn(
        &mut self,
        now: Instant,
        cfg: &TcpConfig,
        counters: &mut TcpCounters,
        emit: &mut impl FnMut(&Outgoing<'_>) -> bool,
    ) -> bool {
        let active = self.state == State::SynSent;
        let mut repr = self.repr(cfg, now, TcpControl::Syn, self.iss, &[]);
        repr.max_seg_size = Some(cfg.mss);
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
            src: self.key.local,
            dst: self.key.remote,
            repr,
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
        emit: &mut impl FnMut(&Outgoing<'_>) -> bool,
    ) -> bool {
        let repr = self.repr(cfg, now, TcpControl::None, self.snd_nxt, &[]);
        if !emit(&Outgoing {
            src: self.key.local,
            dst: self.key.remote,
            repr,
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
