//! One connection's control block and its state machine (RFC 9293 §3.10).

use std::time::Duration;

use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

mod input;
mod output;
mod rack;
mod sack;
mod undo;

use super::buffer::{BufferPool, RingBuf};
use super::cubic::Cubic;
use super::hystart::HyStart;
use super::{CloseReason, ConnLink, FlowKey, Seq, TcpConfig};
use crate::time::Instant;
pub(super) use output::Path;
use rack::Rack;
pub(super) use sack::BoardSpares;
use sack::Scoreboard;
use undo::Undo;

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

    /// The state's name as RFC 9293 writes it (`FIN-WAIT-1`).
    pub fn name(self) -> &'static str {
        match self {
            State::SynSent => "SYN-SENT",
            State::SynReceived => "SYN-RECEIVED",
            State::Established => "ESTABLISHED",
            State::FinWait1 => "FIN-WAIT-1",
            State::FinWait2 => "FIN-WAIT-2",
            State::CloseWait => "CLOSE-WAIT",
            State::Closing => "CLOSING",
            State::LastAck => "LAST-ACK",
            State::TimeWait => "TIME-WAIT",
        }
    }

    /// The state RFC 9293's `name` names (as [`State::name`] writes it;
    /// any case, `_` for `-`).
    pub fn from_name(name: &str) -> Option<State> {
        let name = name.replace('_', "-");
        let all = [
            State::SynSent,
            State::SynReceived,
            State::Established,
            State::FinWait1,
            State::FinWait2,
            State::CloseWait,
            State::Closing,
            State::LastAck,
            State::TimeWait,
        ];
        all.into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(&name))
    }

    /// Past the handshake (RFC 9293's "synchronized" states).
    pub fn is_synchronized(self) -> bool {
        !matches!(self, State::SynSent | State::SynReceived)
    }

    /// States in which the peer may still send data.
    fn receives_data(self) -> bool {
        matches!(self, State::Established | State::FinWait1 | State::FinWait2)
    }
}

/// A connection's TCP state as `dpctl conn list` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnTcpView {
    /// Since the connection began (the peer's SYN, or a cookie's ACK).
    pub age: Duration,
    /// Since a segment last came from the peer.
    pub idle: Duration,
    /// Bytes in the send buffer: sent and not acknowledged, or not sent.
    pub send_queue: u32,
    /// Bytes received that the application has not taken.
    pub recv_queue: u32,
    /// The window the peer offers, in bytes (0: it reads nothing more).
    pub peer_window: u32,
    /// The smoothed round-trip time, once measured.
    pub srtt: Option<Duration>,
    /// The congestion window, in bytes.
    pub cwnd: u32,
    /// Retransmission timeouts in a row without an acknowledgement.
    pub retries: u8,
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
    /// The segment acknowledged something else: reset it with this SEQ.
    pub reset_peer: Option<Seq>,
    /// An active open completed.
    pub connected: bool,
}

/// Smallest MSS we accept from a peer (Linux's TCP_MIN_MSS): a tiny or
/// zero MSS option would otherwise make segments of a few bytes (or none).
pub(super) const MIN_PEER_MSS: u16 = 88;

/// The peer's MSS option, defaulted (RFC 9293 §3.7.1: 536) and clamped.
fn peer_mss(option: Option<u16>) -> u32 {
    u32::from(option.unwrap_or(536).max(MIN_PEER_MSS))
}

/// Out-of-order data any connection may hold ahead of its gap: an
/// initial window of ten full segments (RFC 6928), so a first segment
/// lost at the start of an upload costs no more than before.
const OOO_REACH_MIN: usize = 16 * 1024;

/// How far past RCV.NXT a connection keeps out-of-order data: within the
/// ring it has, or twice what it received in order, at least
/// [`OOO_REACH_MIN`]. The window offers the full buffer size, but a ring
/// must be as large as the furthest byte it holds, so one byte far ahead
/// would pin (and count against the buffer cap) a full-size ring for a
/// client that sent nothing else. What lies beyond is dropped for the
/// peer to send again (RFC 9293 §3.10.7.4 lets a receiver keep or drop
/// segments in the window past a gap); a flow that has moved data in
/// order soon reaches the full window.
pub fn ooo_reach(ring: Option<&RingBuf>, received_in_order: u64) -> usize {
    let earned = usize::try_from(received_in_order.saturating_mul(2)).unwrap_or(usize::MAX);
    ring.map_or(0, RingBuf::capacity)
        .max(OOO_REACH_MIN)
        .max(earned)
}

/// ssthresh before any loss (RFC 5681 §3.1: arbitrarily high).
const INITIAL_SSTHRESH: u32 = u32::MAX / 2;

/// The round trip a segment's timestamp echo measures (RFC 7323 §4.1):
/// none for no echo, or one ahead of our clock (no TSval of ours: forged,
/// or a peer's bug), which would read as a round trip of days.
fn echoed_rtt(now: Instant, ts: Option<TcpTimestampRepr>) -> Option<Duration> {
    let elapsed = ts_now(now).wrapping_sub(ts.filter(|t| t.tsecr != 0)?.tsecr);
    (elapsed as i32 >= 0).then(|| Duration::from_millis(u64::from(elapsed)))
}

/// Timestamps in ms for the TSopt clock (RFC 7323 §5.4: 1 ms to 1 s/tick).
fn ts_now(now: Instant) -> u32 {
    (now.as_nanos() / 1_000_000) as u32
}

/// Which listener a passively opened connection counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::tcp) enum ListenerAddr {
    /// The one on the connection's own address.
    Own,
    /// The family's wildcard (`0.0.0.0` or `::`).
    Any,
}

#[derive(Debug)]
pub(super) struct Conn<A> {
    /// The 4-tuple of an IPv4 connection; only the ports of an IPv6 one
    /// (its addresses: `TcpEngine::keys6`).
    pub key: FlowKey,
    /// An IPv6 connection (its MSS is 20 bytes less).
    pub ipv6: bool,
    pub state: State,
    pub app: A,
    /// Reached ESTABLISHED (the application knows it).
    pub accepted: bool,
    /// The listener whose SYN opened it (counted in that listener's open
    /// connections).
    pub listener: Option<ListenerAddr>,
    /// Counted against its source's established connections at that
    /// listener (`Listener::source_established`).
    pub source_counted: bool,
    /// On the engine's dirty list.
    pub queued: bool,
    /// The application found no send room at the buffer cap with nothing
    /// of ours queued: it waits for a wake-up no ACK will bring
    /// (`TcpEngine::wake_starved_senders`).
    send_starved: std::cell::Cell<bool>,
    /// The generation of the slot this connection occupies (see `ConnId`).
    pub gen: u8,
    /// The timer-wheel entries it has.
    pub armed: super::timer::Armed,

    // Send sequence space (RFC 9293 §3.3.1).
    iss: Seq,
    pub snd_una: Seq,
    pub snd_nxt: Seq,
    /// Highest sequence number sent (snd_nxt moves back on timeout).
    snd_max: Seq,
    snd_wnd: u32,
    /// The largest window the peer has offered (RFC 5961 §5.2's
    /// MAX.SND.WND; half of it is the sender's SWS threshold, §3.8.6.2.1).
    max_snd_wnd: u32,
    snd_wl1: Seq,
    snd_wl2: Seq,
    /// Shift for the peer's window field.
    snd_shift: u8,
    /// Payload bytes per segment (MSS less option overhead).
    seg_size: u32,
    /// The MSS we offer (our link's, for this connection's family).
    our_mss: u16,
    /// Most payload bytes in one segment handed to the port (above
    /// `seg_size` only where our link's port cuts segments, TSO).
    segmentation_max: u32,
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
    /// The acknowledgement number of the last ACK we sent (RFC 7323
    /// §4.3's Last.ACK.sent): TS.Recent comes from a segment at or
    /// before it.
    last_ack_sent: Seq,
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
    /// An ACK owed only for in-order data shorter than a segment: sent
    /// at the end of this iteration as `ack_now` is (on the answer, when
    /// the application answers), unless the application holds it
    /// ([`Conn::hold_ack`]).
    ack_small: bool,
    /// `ack_small`, held until the application takes the data or
    /// `ack_at`, whichever comes first.
    ack_held: bool,
    unacked_segs: u8,
    /// When the connection began (the peer's SYN, or our connect; a
    /// cookie's ACK): its handshake deadline counts from here.
    pub opened: Instant,
    /// Payload bytes taken in order from the peer, and queued by the
    /// application to send to it, over the connection's life.
    pub bytes_received: u64,
    pub bytes_queued: u64,
    /// Reset once everything queued is acknowledged
    /// (`TcpEngine::abort_after_send`); nothing more is taken to send.
    pub reset_when_sent: bool,
    /// The application's deadline (`TcpEngine::set_deadline`).
    pub deadline: Option<Instant>,
    /// This connection's idle timeout, when not `[tcp] idle_timeout`.
    pub idle_timeout: Option<Duration>,
    /// How long data may wait for the peer with none of it acknowledged
    /// (`TcpEngine::set_send_timeout`; none by default: TCP itself probes
    /// a closed window for as long as the peer answers, RFC 9293
    /// §3.8.6.1).
    pub send_timeout: Option<Duration>,
    /// With a send timeout: since when data has waited for the peer with
    /// none of it acknowledged (from its queueing, or the last ACK that
    /// took some); `None` while nothing waits.
    send_waiting_since: Option<Instant>,
    timewait_until: Option<Instant>,
    last_activity: Instant,
    /// When the peer's data last moved RCV.NXT, or FIN-WAIT-2 began if
    /// later: FIN-WAIT-2's timeout counts from here.
    data_heard: Instant,
    /// Send one byte past a zero window (persist probe).
    probe: bool,
    /// Keepalive probes sent since the peer was last heard.
    ka_sent: u8,
    /// Challenge ACKs sent in second `challenge_sec` (RFC 5961 §7).
    challenges: u8,
    challenge_sec: u32,
    /// Send a keepalive probe with the next transmit.
    ka_probe: bool,

    // Congestion control (RFC 5681, NewReno RFC 6582).
    cwnd: u32,
    ssthresh: u32,
    dupacks: u8,
    recover: Option<Seq>,
    /// SND.MAX at the last RTO, until SND.UNA passes it: what was in
    /// flight then is resent by the go-back-N, so no fast recovery (and
    /// no second window cut) starts for it (RFC 6582 §3.2 step 1, RFC 6675
    /// §5.1).
    timeout_point: Option<Seq>,
    fast_rtx: bool,

    cubic: Cubic,
    hystart: HyStart,

    // RACK-TLP (RFC 8985).
    /// `rto_at` is the probe timeout (PTO), not the RTO.
    tlp_armed: bool,
    /// A probe is out; no other until an ACK acknowledges new data.
    tlp_out: bool,
    /// The probe to send: one new segment (past the congestion window), or
    /// the last segment again.
    tlp_new: bool,
    tlp_rtx: bool,
    /// Where the probe that went out starts.
    tlp_seq: Option<Seq>,
    /// The probe's episode (RFC 8985 §7.4), until an ACK settles whether
    /// it repaired a loss.
    tlp_episode: Option<TlpEpisode>,
    /// RACK (§6): when the data in flight was sent, and what it found.
    rack: Rack,
    /// Data below this the peer does not hold is lost by RACK's time rule.
    rack_lost: Seq,
    /// RACK's reordering timer (§6.3): when data sent before the latest
    /// delivered and still missing will count as lost.
    reo_at: Option<Instant>,
    /// When the latest recovery retransmission went out, and SND.MAX then:
    /// data above it was sent later, so its arrival while the retransmitted
    /// holes stay open means those retransmissions were lost.
    rtx_sent: Option<(Instant, Seq)>,

    // SACK (RFC 2018), sender side: what the peer holds above snd_una.
    sack_ok: bool,
    scoreboard: Scoreboard,
    /// Receive side: out-of-order ranges above rcv_nxt already written into
    /// the receive ring's free space (same sorted-ranges structure).
    ooo: Scoreboard,
    /// Data that arrived again, for a D-SACK block in our next segment
    /// (RFC 2883).
    dsack: Option<(Seq, Seq)>,
    /// Where the last out-of-order segment began, while it is still out
    /// of order: its range is our next SACK option's first block (RFC
    /// 2018 §4).
    ooo_last: Option<Seq>,
    /// Next sequence number to consider for retransmission in recovery.
    rtx_next: Seq,
    /// The congestion response in progress, until an ACK shows whether it
    /// was needed (`undo.rs`).
    undo: Option<Undo>,
}

/// A tail loss probe's episode (RFC 8985 §7.4.1): TLP.end_seq and
/// TLP.is_retrans, and where the probe started.
#[derive(Debug, Clone, Copy)]
struct TlpEpisode {
    start: Seq,
    end: Seq,
    retrans: bool,
}

impl<A: Default> Conn<A> {
    /// A control block before any segment: SYN-SENT with our ISS, nothing
    /// known of the peer. `accept` and `connect` start from it.
    fn new(
        key: FlowKey,
        ipv6: bool,
        iss: Seq,
        now: Instant,
        cfg: &TcpConfig,
        link: ConnLink,
    ) -> Self {
        let seg_size = u32::from(link.mss) - 12;
        Self {
            key,
            ipv6,
            state: State::SynSent,
            app: A::default(),
            accepted: false,
            listener: None,
            source_counted: false,
            queued: false,
            send_starved: std::cell::Cell::new(false),
            gen: 0,
            armed: super::timer::Armed::default(),
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_max: iss,
            snd_wnd: 0,
            max_snd_wnd: 0,
            snd_wl1: Seq(0),
            snd_wl2: iss,
            snd_shift: 0,
            seg_size,
            our_mss: link.mss,
            segmentation_max: link.segmentation_max,
            send: None,
            buf_seq: iss + 1,
            fin_seq: None,
            synack_needed: true,
            rcv_nxt: Seq(0),
            rcv_shift: cfg.window_scale,
            recv: None,
            adv_right: Seq(0),
            last_ack_sent: Seq(0),
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
            ack_small: false,
            ack_held: false,
            unacked_segs: 0,
            opened: now,
            bytes_received: 0,
            bytes_queued: 0,
            reset_when_sent: false,
            deadline: None,
            idle_timeout: None,
            send_timeout: None,
            send_waiting_since: None,
            timewait_until: None,
            last_activity: now,
            data_heard: now,
            probe: false,
            ka_sent: 0,
            ka_probe: false,
            challenges: 0,
            challenge_sec: 0,
            cwnd: 10 * seg_size,
            ssthresh: INITIAL_SSTHRESH,
            dupacks: 0,
            recover: None,
            timeout_point: None,
            fast_rtx: false,
            cubic: Cubic::default(),
            hystart: HyStart::new(iss, cfg.hystart),
            tlp_armed: false,
            tlp_out: false,
            tlp_new: false,
            tlp_rtx: false,
            tlp_seq: None,
            tlp_episode: None,
            rack: Rack::default(),
            rack_lost: iss,
            reo_at: None,
            rtx_sent: None,
            sack_ok: false,
            scoreboard: Scoreboard::default(),
            ooo: Scoreboard::default(),
            dsack: None,
            ooo_last: None,
            rtx_next: Seq(0),
            undo: None,
        }
    }

    /// Takes the peer's SYN options (MSS, window scale, timestamps, SACK).
    fn take_syn_options(&mut self, syn: &TcpRepr<'_>) {
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
        self.seg_size = peer_mss(syn.max_seg_size).min(u32::from(self.our_mss)) - ts_overhead;
        self.cwnd = 10 * self.seg_size;
        let irs = Seq(syn.seq_number.0 as u32);
        self.rcv_nxt = irs + 1;
        self.adv_right = self.rcv_nxt;
        self.last_ack_sent = self.rcv_nxt;
        self.snd_wl1 = irs;
    }

    /// A connection for a SYN that reached a listener (RFC 9293 §3.10.7.2),
    /// keeping its `link`'s MSS and segment limit.
    pub fn accept(
        key: FlowKey,
        ipv6: bool,
        syn: &TcpRepr<'_>,
        iss: Seq,
        now: Instant,
        cfg: &TcpConfig,
        link: ConnLink,
    ) -> Self {
        let mut c = Self::new(key, ipv6, iss, now, cfg, link);
        c.state = State::SynReceived;
        c.take_syn_options(syn);
        // The SYN's window is never scaled (RFC 7323 §2.2).
        c.set_snd_wnd(u32::from(syn.window_len));
        c
    }

    /// An active open (RFC 9293 §3.10.1): a connection in SYN-SENT whose SYN
    /// goes out with the next transmit. The application knows it from the
    /// start (failures end in `Event::Closed`).
    pub fn connect(
        key: FlowKey,
        ipv6: bool,
        iss: Seq,
        now: Instant,
        cfg: &TcpConfig,
        link: ConnLink,
    ) -> Self {
        let mut c = Self::new(key, ipv6, iss, now, cfg, link);
        c.accepted = true;
        c
    }

    // RFC 9293 §3.10.7.3, SYN-SENT.
    fn input_syn_sent(&mut self, now: Instant, seg: &TcpRepr<'_>, cfg: &TcpConfig) -> Input {
        let mut out = Input::default();
        let ack = seg.ack_number.map(|a| Seq(a.0 as u32));
        let ack_ok = ack.is_some_and(|a| a.diff(self.iss) > 0 && a.diff(self.snd_nxt) <= 0);
        if seg.control == TcpControl::Rst {
            // Only a reset that acknowledges our SYN refuses it; any other
            // is dropped, never answered (a reset for a reset).
            if ack_ok {
                out.closed = Some(CloseReason::Refused);
            }
            return out;
        }
        if ack.is_some() && !ack_ok {
            // Not for our SYN: the engine answers with a reset.
            out.reset_peer = ack;
            return out;
        }
        if seg.control != TcpControl::Syn {
            return out;
        }
        self.take_syn_options(seg);
        if let Some(a) = ack.filter(|_| ack_ok) {
            // The SYN-ACK: established (the SYN-ACK's window is unscaled).
            self.snd_una = a;
            self.set_snd_wnd(u32::from(seg.window_len));
            self.snd_wl2 = a;
            self.rto_at = None;
            self.retries = 0;
            if let Some(r) = echoed_rtt(now, seg.timestamp) {
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
        ipv6: bool,
        ack_seg: &TcpRepr<'_>,
        iss: Seq,
        irs: Seq,
        mss: u16,
        wscale: Option<u8>,
        sack: bool,
        now: Instant,
        cfg: &TcpConfig,
        link: ConnLink,
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
        let mut c = Self::accept(key, ipv6, &syn, iss, now, cfg, link);
        c.sack_ok = sack;
        c.state = State::Established;
        c.accepted = true;
        c.synack_needed = false;
        c.snd_una = iss + 1;
        c.snd_nxt = iss + 1;
        c.snd_max = iss + 1;
        c.set_snd_wnd(u32::from(ack_seg.window_len) << c.snd_shift);
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
        if r.is_empty() && self.ooo.is_empty() {
            pool.give(self.recv.take().expect("some"));
        }
        if n > 0 {
            self.release_held_ack();
        }
        n
    }

    pub fn peek(&self) -> (&[u8], &[u8]) {
        self.recv.as_ref().map_or((&[], &[]), RingBuf::as_slices)
    }

    pub fn consume(&mut self, n: usize, pool: &mut BufferPool) {
        if let Some(r) = self.recv.as_mut() {
            r.consume(n);
            if r.is_empty() && self.ooo.is_empty() {
                pool.give(self.recv.take().expect("some"));
            }
        }
        if n > 0 {
            self.release_held_ack();
        }
    }

    /// Holds the ACK owed for short in-order data until the application
    /// takes the data ([`Conn::consume`], [`Conn::recv`]), and at most
    /// `[tcp] delayed_ack`: the application will answer soon and the
    /// answer carries the ACK (a TLS handshake waiting for the handshake
    /// budget). Any other ACK owed (out of order, every second segment,
    /// a FIN, a window update) is not held. True when `ack_at` moved.
    pub fn hold_ack(&mut self, now: Instant, cfg: &TcpConfig) -> bool {
        if !self.ack_small || self.ack_now {
            return false;
        }
        self.ack_small = false;
        self.ack_held = true;
        let by = now + cfg.delayed_ack;
        if self.ack_at.is_some_and(|t| t <= by) {
            return false;
        }
        self.ack_at = Some(by);
        true
    }

    /// The application took data: a held ACK is owed at the end of this
    /// iteration again.
    fn release_held_ack(&mut self) {
        if self.ack_held {
            self.ack_held = false;
            self.ack_small = true;
        }
    }

    /// Whether an ACK goes out at the end of this iteration.
    pub fn acks_now(&self) -> bool {
        self.ack_now || self.ack_small
    }

    /// A new SYN (no ACK) is newer than this connection in TIME-WAIT, so
    /// may reopen its 4-tuple: a TSval past TS.Recent where both used
    /// timestamps (RFC 6191), else a sequence number past RCV.NXT
    /// (RFC 9293 §3.6.1).
    pub(super) fn reopened_by(&self, syn: &TcpRepr<'_>) -> bool {
        match (self.ts_recent, syn.timestamp) {
            (Some(recent), Some(ts)) => ts.tsval.wrapping_sub(recent) as i32 > 0,
            _ => Seq(syn.seq_number.0 as u32).diff(self.rcv_nxt) > 0,
        }
    }

    /// The highest sequence number sent (SND.MAX).
    pub(super) fn snd_max_now(&self) -> Seq {
        self.snd_max
    }

    /// It waited for send room at the buffer cap with nothing queued
    /// (cleared: it is to be woken now).
    pub(super) fn take_send_starved(&self) -> bool {
        self.send_starved.replace(false) && self.send.is_none()
    }

    /// The application may still queue bytes on it.
    pub(super) fn can_send(&self) -> bool {
        self.fin_seq.is_none()
            && !self.reset_when_sent
            && matches!(
                self.state,
                State::SynReceived | State::Established | State::CloseWait
            )
    }

    /// Bytes the application may queue now: the full ring's room, less
    /// at the buffer cap.
    pub fn send_space(&self, pool: &BufferPool) -> usize {
        if !self.can_send() {
            return 0;
        }
        let room = pool.room(self.send.as_ref());
        if room == 0 && self.send.is_none() {
            self.send_starved.set(true);
        }
        room
    }

    pub fn send(&mut self, data: &[u8], pool: &mut BufferPool) -> usize {
        let mut done = 0;
        while done < data.len() {
            let n = self.send_with(data.len() - done, pool, |room| {
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
        pool: &mut BufferPool,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> usize {
        if !self.can_send() || max == 0 {
            return 0;
        }
        let n = pool
            .reserve(&mut self.send, max)
            .map_or(0, |ring| ring.push_with(max, fill));
        if self.send.is_none() {
            self.send_starved.set(true); // no ring could be had
        }
        if let Some(ring) = self.send.take_if(|r| r.is_empty()) {
            pool.give(ring);
        }
        self.bytes_queued += n as u64;
        n
    }

    /// The application is done sending: FIN after the queued bytes.
    pub fn close(&mut self) {
        if self.fin_seq.is_none() {
            self.fin_seq = Some(self.buf_seq + self.send.as_ref().map_or(0, RingBuf::len) as u32);
        }
    }

    /// Every received byte has been read (no receive buffer held).
    pub fn drained(&self) -> bool {
        self.recv.is_none()
    }

    /// What the TIME-WAIT table keeps of this connection.
    pub fn time_wait_entry<I: super::FlowAddr>(
        &self,
        key: super::FlowKey<I>,
        now: Instant,
        cfg: &TcpConfig,
    ) -> super::TimeWait<I> {
        super::TimeWait {
            key,
            snd_nxt: self.snd_nxt,
            rcv_nxt: self.rcv_nxt,
            ts_recent: self.ts_recent,
            window: self.window_field(cfg).0,
            until: self.timewait_until.unwrap_or(now + cfg.time_wait),
        }
    }

    /// How long the peer has sent nothing, at `now`.
    pub(super) fn idle(&self, now: Instant) -> Duration {
        now.saturating_since(self.last_activity)
    }

    /// What `dpctl conn list` shows of its TCP state at `now`.
    /// Bytes in the send buffer: not acknowledged yet, or not sent.
    pub(super) fn send_queued(&self) -> u32 {
        self.send.as_ref().map_or(0, |b| b.len() as u32)
    }

    pub(super) fn view(&self, now: Instant) -> ConnTcpView {
        let len = |b: &Option<RingBuf>| b.as_ref().map_or(0, |b| b.len() as u32);
        ConnTcpView {
            age: now.saturating_since(self.opened),
            idle: self.idle(now),
            send_queue: len(&self.send),
            recv_queue: len(&self.recv),
            peer_window: self.snd_wnd,
            srtt: self.srtt,
            cwnd: self.cwnd,
            retries: self.retries,
        }
    }

    /// Everything queued to send has been acknowledged.
    pub fn all_acked(&self) -> bool {
        self.snd_una == self.snd_max && self.send.as_ref().is_none_or(RingBuf::is_empty)
    }

    /// The sequence number of a reset of ours: SND.NXT, unless that is past
    /// the right edge of the peer's window (after a zero-window probe's
    /// byte), where the peer drops it unseen (RFC 9293 §3.10.7.4 takes a
    /// RST only in the window; with a zero window, only at RCV.NXT): then
    /// that edge, as Linux's `tcp_acceptable_seq` does.
    pub fn reset_seq(&self) -> Seq {
        let edge = self.snd_una + self.snd_wnd;
        if self.snd_nxt.diff(edge) > 0 {
            edge
        } else {
            self.snd_nxt
        }
    }

    /// Moves the send timeout's clock at `now`: started when data begins
    /// to wait, started again when an ACK takes some (`progress`), stopped
    /// when all is acknowledged.
    pub(super) fn note_send_progress(&mut self, now: Instant, progress: bool) {
        if self.send_timeout.is_none() || self.all_acked() {
            self.send_waiting_since = None;
        } else if progress || self.send_waiting_since.is_none() {
            self.send_waiting_since = Some(now);
        }
    }

    /// When the send timeout ends the connection, if data waits.
    pub(super) fn send_timeout_at(&self) -> Option<Instant> {
        Some(self.send_waiting_since? + self.send_timeout?)
    }

    /// The receive ring, when it holds bytes the application has not read.
    pub fn take_unread(&mut self) -> Option<RingBuf> {
        self.recv.take_if(|r| !r.is_empty())
    }

    pub fn release_buffers(&mut self, pool: &mut BufferPool) {
        self.scoreboard.release(&mut pool.boards);
        self.ooo.release(&mut pool.boards);
        if let Some(r) = self.send.take() {
            pool.give(r);
        }
        if let Some(r) = self.recv.take() {
            pool.give(r);
        }
    }

    // ---- windows ----

    /// The peer's window, noting the largest.
    fn set_snd_wnd(&mut self, window: u32) {
        self.snd_wnd = window;
        self.max_snd_wnd = self.max_snd_wnd.max(window);
    }

    /// Payload bytes the next segment may carry: the segment size less the
    /// SACK blocks our ACK field carries with it (RFC 2018 §3: options
    /// count against the MSS), so no packet exceeds the MTU.
    fn data_room(&self) -> u32 {
        let blocks = if self.sack_ok {
            (self.ooo.count() + usize::from(self.dsack.is_some())).min(3) as u32
        } else {
            0
        };
        if blocks == 0 {
            return self.seg_size;
        }
        let ts = if self.ts_recent.is_some() { 10 } else { 0 };
        let options = |n: u32| (ts + if n > 0 { 2 + 8 * n } else { 0 }).div_ceil(4) * 4;
        self.seg_size
            .saturating_sub(options(blocks) - options(0))
            .max(1)
    }

    fn recv_free(&self, cfg: &TcpConfig) -> u32 {
        // The full ring's room: a smaller ring grows as bytes come.
        cfg.buffer_size
            .saturating_sub(self.recv.as_ref().map_or(0, RingBuf::len)) as u32
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
}

/// What the engine's tests look at and set inside a connection.
#[cfg(test)]
impl<A> Conn<A> {
    /// Congestion state: (cwnd, ssthresh, bytes in flight when recovery
    /// began, in recovery).
    pub(in crate::tcp) fn congestion(&self) -> (u32, u32, u32, bool) {
        (
            self.cwnd,
            self.ssthresh,
            self.recover.map_or(0, |rec| rec - self.snd_una),
            self.recover.is_some(),
        )
    }

    /// As if the peer had not offered SACK.
    pub(in crate::tcp) fn forget_sack(&mut self) {
        self.sack_ok = false;
    }
}
