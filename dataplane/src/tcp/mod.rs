//! tlsdp's TCP engine (RFC 9293), sans-IO: fed segments and the current
//! time, it updates connections, queues events for the application and
//! produces segments to send. It never reads a clock or touches a port.
//!
//! One engine per core. Connections live in a slab indexed by [`ConnId`];
//! a flow table maps 4-tuples to slots; one hashed timer wheel drives every
//! connection's deadlines. Send and receive buffers are taken when data
//! flows and given back when drained, so an idle connection holds only its
//! control block.
//!
//! What this version does: passive and active open (simultaneous open
//! answered) with MSS, window scaling, timestamps (RFC 7323) and
//! SACK-permitted; SYN cookies (RFC 4987); in-order data both ways and
//! out-of-order data held behind the gap, reported in SACK blocks;
//! retransmission (RFC 6298 with exponential backoff), fast retransmit,
//! NewReno (RFC 6582) and SACK-based recovery (RFC 6675); CUBIC (RFC
//! 9438); delayed ACKs, zero-window probes, keepalive; graceful close from
//! either side, TIME-WAIT (with reuse by a newer SYN); RST validation and
//! challenge ACKs (RFC 5961); handshake and idle timeouts; resets for
//! segments to no connection. The full list, and what is not built yet
//! (RACK/TLP, PAWS, challenge-ACK rate limits): docs/architecture.md, "TCP".

mod buffer;
mod conn;
mod cookie;
mod cubic;
pub mod seq;
mod timer;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::Ipv4Addr;
use std::time::Duration;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{IpAddress, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

pub use buffer::BufferPool;
pub use conn::State;
use conn::{Conn, Input};
pub use seq::Seq;
use timer::TimerWheel;

use crate::time::Instant;

/// A connection's handle: its slot in the engine (low 24 bits) and the
/// slot's generation (high 8 bits). A slot is reused once its connection
/// is gone, with the next generation, so a handle kept past its
/// connection's end (in an event not yet handled, a timer, a peer link)
/// finds nothing rather than the next connection in that slot; only a
/// handle kept over 256 reuses of its slot could (peer links and timers
/// also check the flow key and deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(u32);

/// Slots per engine: `tcp.max_connections` is at most 16,000,000.
const SLOT_BITS: u32 = 24;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;

impl ConnId {
    pub(crate) const fn new(slot: u32, gen: u8) -> Self {
        Self(slot & SLOT_MASK | (gen as u32) << SLOT_BITS)
    }

    /// The slot, for tables indexed by it: the next connection in the
    /// slot has the same one.
    pub fn slot(self) -> usize {
        (self.0 & SLOT_MASK) as usize
    }

    fn gen(self) -> u8 {
        (self.0 >> SLOT_BITS) as u8
    }

    /// The handle of the slot's next connection.
    fn next_gen(self) -> Self {
        Self::new(self.0 & SLOT_MASK, self.gen().wrapping_add(1))
    }
}

/// The connection `id` names, if it is still there.
fn live<A>(conns: &[Option<Conn<A>>], id: ConnId) -> Option<&Conn<A>> {
    conns.get(id.slot())?.as_ref().filter(|c| c.gen == id.gen())
}

/// The connection `id` names, if it is still there.
fn live_mut<A>(conns: &mut [Option<Conn<A>>], id: ConnId) -> Option<&mut Conn<A>> {
    conns
        .get_mut(id.slot())?
        .as_mut()
        .filter(|c| c.gen == id.gen())
}

/// A connection's addresses, from our side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub local: Ipv4Addr,
    pub local_port: u16,
    pub remote: Ipv4Addr,
    pub remote_port: u16,
}

/// What happened to a connection, for the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The three-way handshake completed on a listener.
    Accepted(ConnId),
    /// An active open ([`TcpEngine::connect`]) completed.
    Connected(ConnId),
    /// New bytes can be read.
    Readable(ConnId),
    /// Send-buffer space was freed.
    Writable(ConnId),
    /// The peer sent FIN: no more bytes will arrive.
    PeerClosed(ConnId),
    /// The connection is gone: reset by the peer, timed out, or closed. The
    /// id is invalid after this event.
    Closed(ConnId, CloseReason),
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Both sides closed.
    Normal,
    /// The peer sent RST.
    Reset,
    /// Retransmissions, handshake or idle time ran out.
    TimedOut,
    /// We aborted it.
    Aborted,
    /// An active open was answered with a reset.
    Refused,
}

/// Why [`TcpEngine::connect`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectError {
    /// That 4-tuple is in use.
    InUse,
    /// The connection limit is reached.
    TooMany,
}

/// Why TCP dropped a received segment (counted by the engine as a
/// `stats::DropReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentDrop {
    /// Too short or inconsistent to be TCP.
    Malformed,
    /// Its checksum is wrong.
    BadChecksum,
    /// For no connection and no listener (answered by RST where the RFC
    /// says so).
    NoConnection,
    /// A SYN refused: the half-open or connection limit was reached.
    ListenOverflow,
}

/// When listeners answer SYNs with cookies instead of keeping state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynCookies {
    /// When the half-open budget (`max_half_open`) is spent.
    WhenFull,
    /// For every SYN (tests, or under known attack).
    Always,
    /// Never: SYNs beyond the budget are dropped.
    Off,
}

/// Tuning of the TCP engine.
#[derive(Debug, Clone, Copy)]
pub struct TcpConfig {
    /// Our MSS (MTU 1500 − 40).
    pub mss: u16,
    /// Our window scale shift.
    pub window_scale: u8,
    /// Bytes buffered per connection and direction.
    pub buffer_size: usize,
    /// Most connections (slots) per engine.
    pub max_conns: usize,
    /// Most connections in SYN-RECEIVED.
    pub max_half_open: usize,
    pub syn_cookies: SynCookies,
    pub initial_rto: Duration,
    pub min_rto: Duration,
    pub max_rto: Duration,
    /// Retransmissions of one segment before the connection is dropped.
    pub max_retransmits: u8,
    pub delayed_ack: Duration,
    pub handshake_timeout: Duration,
    pub idle_timeout: Duration,
    pub time_wait: Duration,
    /// Keepalive (RFC 9293 §3.8.4): probe an idle established connection
    /// after this long (`None`: off), every `keepalive_interval`, and give up
    /// after `keepalive_probes` unanswered probes.
    pub keepalive: Option<Duration>,
    pub keepalive_interval: Duration,
    pub keepalive_probes: u8,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            mss: 1460,
            window_scale: 7,
            buffer_size: 256 * 1024,
            max_conns: 65536,
            max_half_open: 4096,
            syn_cookies: SynCookies::WhenFull,
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(60),
            max_retransmits: 8,
            delayed_ack: Duration::from_millis(10),
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            time_wait: Duration::from_secs(30),
            keepalive: None,
            keepalive_interval: Duration::from_secs(75),
            keepalive_probes: 9,
        }
    }
}

/// A segment to transmit: addresses and the TCP header and payload.
#[derive(Debug)]
pub struct Outgoing<'a> {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub repr: TcpRepr<'a>,
}

/// Counters of the TCP engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpCounters {
    pub accepted: u64,
    /// Active opens completed.
    pub connected: u64,
    pub active: u64,
    pub half_open: u64,
    pub time_wait: u64,
    pub closed: u64,
    pub resets_sent: u64,
    pub resets_received: u64,
    pub retransmits: u64,
    /// Retransmission timer expiries (RFC 6298 §5.4).
    pub rto_expiries: u64,
    pub timeouts: u64,
    pub keepalive_probes: u64,
    pub challenge_acks: u64,
    pub syn_dropped: u64,
    pub syn_cookies_sent: u64,
    pub syn_cookies_accepted: u64,
    pub syn_cookies_rejected: u64,
    pub segments_in: u64,
    pub segments_out: u64,
}

/// FxHash: the flow table's keys are not attacker-chosen in a way that
/// matters more than the per-core table size bound; speed wins here.
#[derive(Debug, Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    #[inline]
    fn write_u16(&mut self, n: u16) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(n)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(n)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

type FlowTable = HashMap<FlowKey, ConnId, BuildHasherDefault<FxHasher>>;

/// A reset owed to a segment that matched no connection.
#[derive(Debug, Clone, Copy)]
struct Reset {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    seq: Seq,
    ack: Option<Seq>,
}

/// Most resets queued per engine iteration (never an amplifier).
const MAX_RESETS: usize = 64;
/// Most cookie SYN-ACKs queued per engine iteration.
const MAX_COOKIE_SYNACKS: usize = 256;

/// A stateless SYN-ACK owed to a SYN answered with a cookie.
#[derive(Debug, Clone, Copy)]
struct CookieSynAck {
    key: FlowKey,
    iss: Seq,
    ack: Seq,
    wscale: bool,
    sack: bool,
    /// The SYN's TSval to echo, when it carried timestamps.
    ts_echo: Option<u32>,
}

/// The TCP engine of one core, with per-connection application state `A`.
#[derive(Debug)]
pub struct TcpEngine<A> {
    cfg: TcpConfig,
    listeners: Vec<(Ipv4Addr, u16)>,
    flows: FlowTable,
    conns: Vec<Option<Conn<A>>>,
    /// Free slots, each with the generation its next connection gets.
    free: Vec<ConnId>,
    /// Slots of connections released since the last `drain_events`, and
    /// of those whose `Closed` event the last one returned: not free yet.
    released: Vec<ConnId>,
    closing_slots: Vec<ConnId>,
    timers: TimerWheel,
    buffers: BufferPool,
    events: Vec<Event>,
    /// Apps of released connections, in the order of their Closed events:
    /// pending (not yet drained) and the batch of the last drain.
    closed_apps: std::collections::VecDeque<A>,
    /// Connections the application knows that entered TIME-WAIT since the
    /// last [`TcpEngine::drain_time_wait`]: done for the application, though
    /// their slot lives on for 2 MSL.
    entered_time_wait: Vec<ConnId>,
    closed_batch: std::collections::VecDeque<A>,
    /// Listeners take new connections (false while draining: SYNs are
    /// answered with a reset).
    accepting: bool,
    /// Connections with something to send.
    dirty: Vec<ConnId>,
    resets: Vec<Reset>,
    cookie_synacks: Vec<CookieSynAck>,
    counters: TcpCounters,
    isn_key: u64,
    /// Timers fired in one poll (kept to reuse its capacity).
    fired: Vec<(ConnId, Instant)>,
    /// Connections per state, indexed by `State as usize`.
    states: [u64; State::COUNT],
}

impl<A: Default> TcpEngine<A> {
    pub fn new(cfg: TcpConfig, now: Instant, isn_key: u64) -> Self {
        Self {
            cfg,
            listeners: Vec::new(),
            flows: FlowTable::default(),
            conns: Vec::new(),
            free: Vec::new(),
            released: Vec::new(),
            closing_slots: Vec::new(),
            timers: TimerWheel::new(now),
            buffers: BufferPool::new(cfg.buffer_size),
            events: Vec::with_capacity(256),
            closed_apps: std::collections::VecDeque::with_capacity(256),
            entered_time_wait: Vec::with_capacity(256),
            closed_batch: std::collections::VecDeque::with_capacity(256),
            accepting: true,
            dirty: Vec::with_capacity(256),
            resets: Vec::with_capacity(MAX_RESETS),
            cookie_synacks: Vec::with_capacity(MAX_COOKIE_SYNACKS),
            counters: TcpCounters::default(),
            isn_key,
            fired: Vec::new(),
            states: [0; State::COUNT],
        }
    }

    /// Whether listeners take new connections; while not (draining), a SYN
    /// to a listener gets a reset and existing connections go on.
    pub fn set_accepting(&mut self, accepting: bool) {
        self.accepting = accepting;
    }

    pub fn config(&self) -> &TcpConfig {
        &self.cfg
    }

    /// Keeps the listeners `keep(addr, port)` holds true for; SYNs to the
    /// others get a reset. Open connections are not touched.
    pub fn retain_listeners(&mut self, mut keep: impl FnMut(Ipv4Addr, u16) -> bool) {
        self.listeners.retain(|&(a, p)| keep(a, p));
    }

    /// Accepts connections to `addr:port`.
    pub fn listen(&mut self, addr: Ipv4Addr, port: u16) {
        if !self.listeners.contains(&(addr, port)) {
            self.listeners.push((addr, port));
        }
    }

    pub fn counters(&self) -> TcpCounters {
        let mut c = self.counters;
        c.active = self.flows.len() as u64;
        c.half_open = self.states[State::SynReceived as usize];
        c.time_wait = self.states[State::TimeWait as usize];
        c
    }

    /// Bytes of connection state held: the slot slab, the flow table and
    /// the timer wheel (capacities, not lengths), plus rings in use.
    pub fn state_bytes(&self) -> usize {
        let slot = std::mem::size_of::<Option<Conn<A>>>();
        // hashbrown: one control byte per bucket besides the entry.
        let flow = std::mem::size_of::<(FlowKey, ConnId)>() + 1;
        self.conns.capacity() * slot
            + self.flows.capacity() * flow
            + self.free.capacity() * 4
            + self.timers.entry_bytes()
            + self.buffers.in_use() * self.cfg.buffer_size
    }

    /// The application state of every live connection.
    pub fn apps(&self) -> impl Iterator<Item = &A> {
        self.conns.iter().flatten().map(|c| &c.app)
    }

    /// Connections in `state` now.
    pub fn in_state(&self, state: State) -> u64 {
        self.states[state as usize]
    }

    /// Keeps the per-state gauges right across a transition.
    fn account(&mut self, from: Option<State>, to: Option<State>) {
        if from != to {
            if let Some(f) = from {
                self.states[f as usize] -= 1;
            }
            if let Some(t) = to {
                self.states[t as usize] += 1;
            }
        }
    }

    /// Buffers in use and idle in the pool.
    pub fn buffers(&self) -> &BufferPool {
        &self.buffers
    }

    /// Moves the connections that entered TIME-WAIT since the last call
    /// into `out` (each once; the application's state is still there).
    pub fn drain_time_wait(&mut self, out: &mut Vec<ConnId>) {
        out.append(&mut self.entered_time_wait);
    }

    /// Counts a state change of `id`; notes one into TIME-WAIT.
    fn transition(&mut self, id: ConnId, before: State, after: State) {
        self.account(Some(before), Some(after));
        if after == State::TimeWait
            && before != after
            && live(&self.conns, id).is_some_and(|c| c.accepted)
        {
            self.entered_time_wait.push(id);
        }
    }

    /// Takes the queued events.
    ///
    /// Slots of connections whose `Closed` event a call returns are reused
    /// only from the call after it: until then, the application may keep
    /// state by [`ConnId::slot`] for them.
    pub fn drain_events(&mut self, out: &mut Vec<Event>) {
        out.append(&mut self.events);
        self.free.append(&mut self.closing_slots);
        std::mem::swap(&mut self.closing_slots, &mut self.released);
        // The apps of connections closed in these events, in order; those
        // the caller did not take are dropped now.
        self.closed_batch.clear();
        std::mem::swap(&mut self.closed_batch, &mut self.closed_apps);
    }

    /// The application state of the next connection whose
    /// `Event::Closed` the last [`TcpEngine::drain_events`] returned (one
    /// per such event, in order): what the app kept about a connection
    /// that is gone. Valid until the next `drain_events`.
    pub fn take_closed_app(&mut self) -> Option<A> {
        self.closed_batch.pop_front()
    }

    /// Moves up to `max` received bytes of `from` into the send buffer of
    /// `to` (ring to ring, no other copy) and consumes them; returns how
    /// many. A proxy's data path.
    pub fn splice(&mut self, from: ConnId, to: ConnId, max: usize) -> usize {
        if live(&self.conns, from).is_none() || live(&self.conns, to).is_none() {
            return 0;
        }
        let (f, t) = (from.slot(), to.slot());
        if f == t {
            return 0;
        }
        let size = self.cfg.buffer_size;
        let (src, dst) = if f < t {
            let (lo, hi) = self.conns.split_at_mut(t);
            (&mut lo[f], &mut hi[0])
        } else {
            let (lo, hi) = self.conns.split_at_mut(f);
            (&mut hi[0], &mut lo[t])
        };
        let (Some(src), Some(dst)) = (src.as_mut(), dst.as_mut()) else {
            return 0;
        };
        let mut moved = 0;
        loop {
            let (a, b) = src.peek();
            let chunk = if a.is_empty() { b } else { a };
            let want = chunk.len().min(max - moved);
            if want == 0 {
                break;
            }
            let n = dst.send(&chunk[..want], size, &mut self.buffers);
            if n == 0 {
                break;
            }
            src.consume(n, &mut self.buffers);
            moved += n;
        }
        if moved > 0 {
            mark_dirty(&mut self.dirty, dst, to);
            if src.window_update_due(&self.cfg) {
                mark_dirty(&mut self.dirty, src, from);
            }
        }
        moved
    }

    /// The application state of a connection.
    pub fn app(&mut self, id: ConnId) -> Option<&mut A> {
        self.conn_mut(id).map(|c| &mut c.app)
    }

    /// A connection's state (None once closed).
    pub fn state(&self, id: ConnId) -> Option<State> {
        live(&self.conns, id).map(|c| c.state)
    }

    pub fn key(&self, id: ConnId) -> Option<FlowKey> {
        live(&self.conns, id).map(|c| c.key)
    }

    fn conn_mut(&mut self, id: ConnId) -> Option<&mut Conn<A>> {
        live_mut(&mut self.conns, id)
    }

    /// Opens a connection (RFC 9293 active open). `Event::Connected` follows
    /// the handshake; `Event::Closed(_, Refused | TimedOut)` its failure.
    ///
    /// # Errors
    /// When the 4-tuple is taken or the connection limit is reached.
    pub fn connect(&mut self, now: Instant, key: FlowKey) -> Result<ConnId, ConnectError> {
        if self.flows.contains_key(&key) {
            return Err(ConnectError::InUse);
        }
        if self.flows.len() >= self.cfg.max_conns {
            return Err(ConnectError::TooMany);
        }
        let iss = self.isn(&key, now);
        let id = self.alloc_slot();
        self.install(id, Conn::connect(key, iss, now, &self.cfg));
        self.flows.insert(key, id);
        self.account(None, Some(State::SynSent));
        let c = live_mut(&mut self.conns, id).expect("just made");
        mark_dirty(&mut self.dirty, c, id);
        self.rearm(id, now);
        Ok(id)
    }

    /// Copies received bytes into `buf`; returns how many.
    pub fn recv(&mut self, id: ConnId, buf: &mut [u8]) -> usize {
        let Some(c) = live_mut(&mut self.conns, id) else {
            return 0;
        };
        let n = c.recv(buf, &mut self.buffers);
        if n > 0 {
            // Opening the window may need an update to the peer.
            if c.window_update_due(&self.cfg) {
                mark_dirty(&mut self.dirty, c, id);
            }
        }
        n
    }

    /// Received bytes, without consuming them (up to two slices).
    pub fn peek(&self, id: ConnId) -> (&[u8], &[u8]) {
        match live(&self.conns, id) {
            Some(c) => c.peek(),
            None => (&[], &[]),
        }
    }

    /// Consumes `n` received bytes (after [`TcpEngine::peek`]).
    pub fn consume(&mut self, id: ConnId, n: usize) {
        let Some(c) = live_mut(&mut self.conns, id) else {
            return;
        };
        c.consume(n, &mut self.buffers);
        if c.window_update_due(&self.cfg) {
            mark_dirty(&mut self.dirty, c, id);
        }
    }

    /// Free space in the send buffer.
    pub fn send_space(&self, id: ConnId) -> usize {
        live(&self.conns, id).map_or(0, |c| c.send_space(self.cfg.buffer_size))
    }

    /// Queues bytes to send; returns how many fitted.
    pub fn send(&mut self, id: ConnId, data: &[u8]) -> usize {
        let size = self.cfg.buffer_size;
        let Some(c) = live_mut(&mut self.conns, id) else {
            return 0;
        };
        let n = c.send(data, size, &mut self.buffers);
        if n > 0 {
            mark_dirty(&mut self.dirty, c, id);
        }
        n
    }

    /// Queues bytes produced by `fill` into the send buffer's free space
    /// (no intermediate copy); `fill` returns how many bytes it wrote.
    pub fn send_with(
        &mut self,
        id: ConnId,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> usize {
        let size = self.cfg.buffer_size;
        let Some(c) = live_mut(&mut self.conns, id) else {
            return 0;
        };
        let n = c.send_with(max, size, &mut self.buffers, fill);
        if n > 0 {
            mark_dirty(&mut self.dirty, c, id);
        }
        n
    }

    /// Closes our side after the queued bytes (FIN).
    pub fn close(&mut self, id: ConnId) {
        if let Some(c) = live_mut(&mut self.conns, id) {
            c.close();
            mark_dirty(&mut self.dirty, c, id);
        }
    }

    /// Resets the connection and frees it at once.
    pub fn abort(&mut self, id: ConnId) {
        let Some(c) = live_mut(&mut self.conns, id) else {
            return;
        };
        if c.state != State::SynSent {
            let (key, seq) = (c.key, c.snd_nxt);
            self.queue_reset(key, seq, None);
        }
        self.release(id, CloseReason::Aborted);
    }

    /// Processes one TCP segment (`bytes` = TCP header and payload) from
    /// `src` to `dst`.
    ///
    /// # Errors
    /// The reason a malformed or unwanted segment was dropped.
    pub fn input(
        &mut self,
        now: Instant,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        bytes: &[u8],
    ) -> Result<(), SegmentDrop> {
        let packet = TcpPacket::new_checked(bytes).map_err(|_| SegmentDrop::Malformed)?;
        if !crate::checksum::tcp_ok(src.octets(), dst.octets(), bytes) {
            return Err(SegmentDrop::BadChecksum);
        }
        // Checked above, faster than smoltcp would.
        let mut caps = ChecksumCapabilities::default();
        caps.tcp = smoltcp::phy::Checksum::None;
        let repr = TcpRepr::parse(&packet, &IpAddress::Ipv4(src), &IpAddress::Ipv4(dst), &caps)
            .map_err(|_| SegmentDrop::Malformed)?;
        self.counters.segments_in += 1;
        let key = FlowKey {
            local: dst,
            local_port: repr.dst_port,
            remote: src,
            remote_port: repr.src_port,
        };
        if let Some(&id) = self.flows.get(&key) {
            let Some(c) = live_mut(&mut self.conns, id) else {
                // A flow entry outlived its connection (never expected:
                // `release` removes both); forget it rather than abort.
                debug_assert!(false, "flow {key:?} maps to a released slot");
                self.flows.remove(&key);
                return Err(SegmentDrop::NoConnection);
            };
            // RFC 9293 §3.6.1: a new SYN may reopen a connection in TIME-WAIT
            // when its sequence number is above the old one's.
            if c.state == State::TimeWait
                && repr.control == TcpControl::Syn
                && repr.ack_number.is_none()
                && Seq(repr.seq_number.0 as u32) > c.rcv_nxt
            {
                self.release(id, CloseReason::Normal);
                return self.on_listen(now, key, &repr);
            }
            let before = c.state;
            let out = c.input(now, &repr, &self.cfg, &mut self.buffers, &mut self.counters);
            let after = c.state;
            self.transition(id, before, after);
            self.apply(id, out, now);
            return Ok(());
        }
        if self.listeners.contains(&(dst, repr.dst_port))
            || self
                .listeners
                .contains(&(Ipv4Addr::UNSPECIFIED, repr.dst_port))
        {
            return self.on_listen(now, key, &repr);
        }
        self.reset_for(&key, &repr);
        Err(SegmentDrop::NoConnection)
    }

    // RFC 9293 §3.10.7.2, LISTEN.
    fn on_listen(
        &mut self,
        now: Instant,
        key: FlowKey,
        repr: &TcpRepr<'_>,
    ) -> Result<(), SegmentDrop> {
        if !self.accepting {
            // Draining: no new connection (a reset tells the client at once).
            self.reset_for(&key, repr);
            return Err(SegmentDrop::NoConnection);
        }
        match (repr.control, repr.ack_number) {
            (TcpControl::Rst, _) => return Err(SegmentDrop::NoConnection),
            (TcpControl::Syn, Some(_)) => {
                self.reset_for(&key, repr);
                return Err(SegmentDrop::NoConnection);
            }
            (_, Some(ack)) => return self.on_cookie_ack(now, key, repr, Seq(ack.0 as u32)),
            (TcpControl::Syn, None) => {}
            _ => return Err(SegmentDrop::NoConnection),
        }
        if self.flows.len() >= self.cfg.max_conns {
            self.counters.syn_dropped += 1;
            return Err(SegmentDrop::ListenOverflow);
        }
        let full = self.states[State::SynReceived as usize] as usize >= self.cfg.max_half_open;
        match self.cfg.syn_cookies {
            SynCookies::Always => return self.send_cookie(now, key, repr),
            SynCookies::WhenFull if full => return self.send_cookie(now, key, repr),
            SynCookies::Off if full => {
                self.counters.syn_dropped += 1;
                return Err(SegmentDrop::ListenOverflow);
            }
            _ => {}
        }
        let iss = self.isn(&key, now);
        let id = self.alloc_slot();
        let conn = Conn::accept(key, repr, iss, now, &self.cfg);
        self.install(id, conn);
        self.flows.insert(key, id);
        self.account(None, Some(State::SynReceived));
        let c = live_mut(&mut self.conns, id).expect("just made");
        mark_dirty(&mut self.dirty, c, id);
        self.rearm(id, now);
        Ok(())
    }

    /// Answers a SYN statelessly with a cookie SYN-ACK.
    fn send_cookie(
        &mut self,
        now: Instant,
        key: FlowKey,
        syn: &TcpRepr<'_>,
    ) -> Result<(), SegmentDrop> {
        if self.cookie_synacks.len() >= MAX_COOKIE_SYNACKS {
            self.counters.syn_dropped += 1;
            return Err(SegmentDrop::ListenOverflow);
        }
        let client_isn = Seq(syn.seq_number.0 as u32);
        let params = cookie::SynParams {
            mss: syn.max_seg_size.unwrap_or(536).min(self.cfg.mss),
            wscale: syn.window_scale,
            sack: syn.sack_permitted,
        };
        let iss = cookie::encode(self.isn_key, &key, client_isn, now, params);
        self.cookie_synacks.push(CookieSynAck {
            key,
            iss,
            ack: client_isn + 1,
            wscale: syn.window_scale.is_some(),
            sack: syn.sack_permitted,
            ts_echo: syn.timestamp.map(|t| t.tsval),
        });
        self.counters.syn_cookies_sent += 1;
        Ok(())
    }

    /// An ACK to a listener with no connection: the third step of a
    /// handshake answered with a cookie, or a stray segment (reset).
    fn on_cookie_ack(
        &mut self,
        now: Instant,
        key: FlowKey,
        repr: &TcpRepr<'_>,
        ack: Seq,
    ) -> Result<(), SegmentDrop> {
        let client_isn = Seq(repr.seq_number.0 as u32) + u32::MAX; // SEG.SEQ − 1
        let Some(params) = cookie::decode(self.isn_key, &key, client_isn, ack + u32::MAX, now)
        else {
            self.counters.syn_cookies_rejected += 1;
            self.reset_for(&key, repr);
            return Err(SegmentDrop::NoConnection);
        };
        if self.flows.len() >= self.cfg.max_conns {
            self.counters.syn_dropped += 1;
            return Err(SegmentDrop::ListenOverflow);
        }
        self.counters.syn_cookies_accepted += 1;
        let id = self.alloc_slot();
        let mut conn = Conn::from_cookie(
            key,
            repr,
            ack + u32::MAX,
            client_isn,
            params.mss,
            params.wscale,
            params.sack,
            now,
            &self.cfg,
        );
        let out = conn.input(now, repr, &self.cfg, &mut self.buffers, &mut self.counters);
        let state = conn.state;
        self.install(id, conn);
        self.flows.insert(key, id);
        self.account(None, Some(state));
        self.counters.accepted += 1;
        self.events.push(Event::Accepted(id));
        self.apply(id, out, now);
        Ok(())
    }

    /// A free slot, with the generation its next connection gets.
    fn alloc_slot(&mut self) -> ConnId {
        self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            debug_assert!(self.conns.len() <= SLOT_MASK as usize + 1);
            ConnId::new(self.conns.len() as u32 - 1, 0)
        })
    }

    /// Puts a new connection in the slot `alloc_slot` gave.
    fn install(&mut self, id: ConnId, mut conn: Conn<A>) {
        conn.gen = id.gen();
        self.conns[id.slot()] = Some(conn);
    }

    /// RFC 6528-style initial sequence number: a keyed hash of the 4-tuple
    /// plus a 4 µs clock.
    fn isn(&self, key: &FlowKey, now: Instant) -> Seq {
        let mut h = FxHasher(self.isn_key);
        h.write_u32(u32::from(key.local));
        h.write_u32(u32::from(key.remote));
        h.write_u16(key.local_port);
        h.write_u16(key.remote_port);
        let mixed = h.finish();
        let mixed = (mixed ^ (mixed >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        Seq((mixed >> 32) as u32 ^ mixed as u32) + (now.as_nanos() / 4000) as u32
    }

    // RFC 9293 §3.10.7.1, CLOSED: answer with a reset.
    fn reset_for(&mut self, key: &FlowKey, repr: &TcpRepr<'_>) {
        if repr.control == TcpControl::Rst {
            return;
        }
        match repr.ack_number {
            Some(ack) => self.queue_reset(*key, Seq(ack.0 as u32), None),
            None => {
                let ack = Seq(repr.seq_number.0 as u32) + repr.segment_len() as u32;
                self.queue_reset(*key, Seq(0), Some(ack));
            }
        }
    }

    /// Applies a connection's input results: events, state counters, frees.
    fn apply(&mut self, id: ConnId, out: Input, now: Instant) {
        if out.established {
            self.counters.accepted += 1;
            self.events.push(Event::Accepted(id));
        }
        if out.connected {
            self.counters.connected += 1;
            self.events.push(Event::Connected(id));
        }
        if let Some(seq) = out.reset_peer {
            if let Some(key) = self.key(id) {
                self.queue_reset(key, seq, None);
            }
        }
        if out.readable {
            self.events.push(Event::Readable(id));
        }
        if out.writable {
            self.events.push(Event::Writable(id));
        }
        if out.peer_closed {
            self.events.push(Event::PeerClosed(id));
        }
        if let Some(reason) = out.closed {
            if reason == CloseReason::Reset {
                self.counters.resets_received += 1;
            }
            // A connection given up on (idle, retransmissions) is reset, so
            // a peer that is still there does not hang on it.
            if reason == CloseReason::TimedOut {
                if let Some(c) = live(&self.conns, id).filter(|c| c.state.is_synchronized()) {
                    let (key, seq) = (c.key, c.snd_nxt);
                    self.queue_reset(key, seq, None);
                }
            }
            self.release(id, reason);
            return;
        }
        let c = live_mut(&mut self.conns, id).expect("live");
        if out.send {
            mark_dirty(&mut self.dirty, c, id);
        }
        self.rearm(id, now);
    }

    fn rearm(&mut self, id: ConnId, now: Instant) {
        let c = live_mut(&mut self.conns, id).expect("live");
        if let Some(at) = c.next_deadline(now, &self.cfg) {
            if c.armed_at.is_none_or(|a| at < a) {
                c.armed_at = Some(at);
                self.timers.arm(id, at);
            }
        }
    }

    /// Queues a RST from our side of `key` (bounded per iteration).
    fn queue_reset(&mut self, key: FlowKey, seq: Seq, ack: Option<Seq>) {
        if self.resets.len() < MAX_RESETS {
            self.resets.push(Reset {
                src: key.local,
                dst: key.remote,
                src_port: key.local_port,
                dst_port: key.remote_port,
                seq,
                ack,
            });
        }
    }

    /// Frees a connection's slot, buffers and flow entry.
    fn release(&mut self, id: ConnId, reason: CloseReason) {
        if live(&self.conns, id).is_none() {
            return;
        }
        let Some(mut c) = self.conns[id.slot()].take() else {
            return;
        };
        self.account(Some(c.state), None);
        c.release_buffers(&mut self.buffers);
        self.flows.remove(&c.key);
        self.counters.closed += 1;
        if reason == CloseReason::TimedOut {
            self.counters.timeouts += 1;
        }
        // A connection never accepted is invisible to the application: its
        // slot is free at once. Otherwise the slot waits until the
        // application has had the `Closed` event (see `drain_events`), so
        // state it keeps by slot is never overwritten by the slot's next
        // connection before it has heard of this one's end.
        if c.accepted {
            self.events.push(Event::Closed(id, reason));
            self.closed_apps.push_back(c.app);
            self.released.push(id.next_gen());
        } else {
            self.free.push(id.next_gen());
        }
    }

    /// Runs due timers.
    pub fn poll_timers(&mut self, now: Instant) {
        let mut due = std::mem::take(&mut self.fired);
        self.timers.expire(now, |id, at| due.push((id, at)));
        for &(id, at) in &due {
            let Some(c) = live_mut(&mut self.conns, id) else {
                continue;
            };
            if c.armed_at != Some(at) {
                continue; // stale entry
            }
            c.armed_at = None;
            let before = c.state;
            let out = c.on_timer(now, &self.cfg, &mut self.counters);
            let after = c.state;
            self.transition(id, before, after);
            self.apply(id, out, now);
        }
        due.clear();
        self.fired = due;
    }

    /// Produces every segment owed: resets, handshakes, data, FINs, ACKs.
    /// `emit` builds and queues the frame; it returns false when it cannot
    /// (no buffer), and transmission stops there until the next call.
    pub fn transmit(&mut self, now: Instant, mut emit: impl FnMut(&Outgoing<'_>) -> bool) {
        while let Some(r) = self.resets.pop() {
            let repr = TcpRepr {
                src_port: r.src_port,
                dst_port: r.dst_port,
                control: TcpControl::Rst,
                seq_number: TcpSeqNumber(r.seq.0 as i32),
                ack_number: r.ack.map(|a| TcpSeqNumber(a.0 as i32)),
                window_len: 0,
                window_scale: None,
                max_seg_size: None,
                sack_permitted: false,
                sack_ranges: [None; 3],
                timestamp: None,
                payload: &[],
            };
            if !emit(&Outgoing {
                src: r.src,
                dst: r.dst,
                repr,
            }) {
                self.resets.push(r);
                return;
            }
            self.counters.resets_sent += 1;
            self.counters.segments_out += 1;
        }
        while let Some(c) = self.cookie_synacks.pop() {
            let repr = TcpRepr {
                src_port: c.key.local_port,
                dst_port: c.key.remote_port,
                control: TcpControl::Syn,
                seq_number: TcpSeqNumber(c.iss.0 as i32),
                ack_number: Some(TcpSeqNumber(c.ack.0 as i32)),
                window_len: self.cfg.buffer_size.min(65535) as u16,
                window_scale: c.wscale.then_some(self.cfg.window_scale),
                max_seg_size: Some(self.cfg.mss),
                sack_permitted: c.sack,
                sack_ranges: [None; 3],
                timestamp: c
                    .ts_echo
                    .map(|e| TcpTimestampRepr::new((now.as_nanos() / 1_000_000) as u32, e)),
                payload: &[],
            };
            if !emit(&Outgoing {
                src: c.key.local,
                dst: c.key.remote,
                repr,
            }) {
                self.cookie_synacks.push(c);
                return;
            }
            self.counters.segments_out += 1;
        }
        let mut i = 0;
        while i < self.dirty.len() {
            let id = self.dirty[i];
            i += 1;
            let Some(c) = live_mut(&mut self.conns, id) else {
                continue;
            };
            c.queued = false;
            let before = c.state;
            let blocked = !c.transmit(now, &self.cfg, &mut self.counters, &mut emit);
            if blocked {
                c.queued = true;
            }
            let after = c.state;
            self.transition(id, before, after);
            if blocked {
                self.dirty.drain(..i - 1);
                return;
            }
            self.rearm(id, now);
        }
        self.dirty.clear();
    }
}

fn mark_dirty<A>(dirty: &mut Vec<ConnId>, c: &mut Conn<A>, id: ConnId) {
    if !c.queued {
        c.queued = true;
        dirty.push(id);
    }
}

#[cfg(test)]
mod size_tests {
    #[test]
    fn control_block_size() {
        let n = std::mem::size_of::<Option<super::Conn<crate::app::responder::Session>>>();
        eprintln!("connection slot: {n} bytes");
        assert!(n <= 1024, "{n}");
    }
}

#[cfg(test)]
mod listen_tests {
    use super::*;
    use smoltcp::wire::TcpSeqNumber;

    fn syn(port: u16) -> Vec<u8> {
        let repr = TcpRepr {
            src_port: port,
            dst_port: 80,
            control: TcpControl::Syn,
            seq_number: TcpSeqNumber(1000),
            ack_number: None,
            window_len: 65535,
            window_scale: Some(7),
            max_seg_size: Some(1460),
            sack_permitted: true,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &[],
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        let (src, dst) = (
            IpAddress::Ipv4(Ipv4Addr::new(10, 0, 0, 2)),
            IpAddress::Ipv4(Ipv4Addr::new(10, 0, 0, 1)),
        );
        repr.emit(
            &mut TcpPacket::new_unchecked(&mut buf[..]),
            &src,
            &dst,
            &ChecksumCapabilities::default(),
        );
        buf
    }

    #[test]
    fn cookies_engage_when_the_half_open_budget_is_spent() {
        let cfg = TcpConfig {
            max_half_open: 2,
            ..TcpConfig::default()
        };
        let mut tcp: TcpEngine<()> = TcpEngine::new(cfg, Instant::ZERO, 7);
        tcp.listen(Ipv4Addr::new(10, 0, 0, 1), 80);
        for port in 1000..1005 {
            tcp.input(
                Instant::from_millis(1),
                Ipv4Addr::new(10, 0, 0, 2),
                Ipv4Addr::new(10, 0, 0, 1),
                &syn(port),
            )
            .unwrap();
        }
        let c = tcp.counters();
        assert_eq!((c.half_open, c.syn_cookies_sent), (2, 3), "{c:?}");
        let off = TcpConfig {
            max_half_open: 2,
            syn_cookies: SynCookies::Off,
            ..TcpConfig::default()
        };
        let mut tcp: TcpEngine<()> = TcpEngine::new(off, Instant::ZERO, 7);
        tcp.listen(Ipv4Addr::new(10, 0, 0, 1), 80);
        let mut refused = 0;
        for port in 1000..1005 {
            if tcp.input(
                Instant::from_millis(1),
                Ipv4Addr::new(10, 0, 0, 2),
                Ipv4Addr::new(10, 0, 0, 1),
                &syn(port),
            ) == Err(SegmentDrop::ListenOverflow)
            {
                refused += 1;
            }
        }
        assert_eq!((tcp.counters().half_open, refused), (2, 3));
    }
}

#[cfg(test)]
mod pair_tests {
    //! Two TCP engines wired back to back (segments handed over directly),
    //! for the transitions a client/server exchange never reaches.
    use super::*;

    const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    struct Pair {
        a: TcpEngine<()>,
        b: TcpEngine<()>,
        now: Instant,
    }

    impl Pair {
        fn new(cfg: TcpConfig) -> Self {
            Self {
                a: TcpEngine::new(cfg, Instant::ZERO, 1),
                b: TcpEngine::new(cfg, Instant::ZERO, 2),
                now: Instant::from_millis(1),
            }
        }

        /// Advances `ms` milliseconds `rounds` times; in each round both
        /// sides transmit first, then both receive (segments cross).
        fn run(&mut self, ms: u64, rounds: usize) {
            for _ in 0..rounds {
                self.now = self.now + Duration::from_millis(ms);
                let now = self.now;
                let out_a = Self::output(&mut self.a, now);
                let out_b = Self::output(&mut self.b, now);
                for (s, d, bytes) in out_a {
                    let _ = self.b.input(now, s, d, &bytes);
                }
                for (s, d, bytes) in out_b {
                    let _ = self.a.input(now, s, d, &bytes);
                }
            }
        }

        fn output(tcp: &mut TcpEngine<()>, now: Instant) -> Vec<(Ipv4Addr, Ipv4Addr, Vec<u8>)> {
            let mut segs = Vec::new();
            tcp.poll_timers(now);
            tcp.transmit(now, |o| {
                let mut buf = vec![0u8; o.repr.buffer_len()];
                o.repr.emit(
                    &mut TcpPacket::new_unchecked(&mut buf[..]),
                    &IpAddress::Ipv4(o.src),
                    &IpAddress::Ipv4(o.dst),
                    &ChecksumCapabilities::default(),
                );
                segs.push((o.src, o.dst, buf));
                true
            });
            segs
        }
    }

    fn key(local: Ipv4Addr, lp: u16, remote: Ipv4Addr, rp: u16) -> FlowKey {
        FlowKey {
            local,
            local_port: lp,
            remote,
            remote_port: rp,
        }
    }

    fn established(cfg: TcpConfig) -> (Pair, ConnId, ConnId) {
        let mut p = Pair::new(cfg);
        p.a.listen(A, 80);
        let cb = p.b.connect(p.now, key(B, 5000, A, 80)).unwrap();
        p.run(1, 5);
        let mut ev = Vec::new();
        p.a.drain_events(&mut ev);
        let ca = ev
            .iter()
            .find_map(|e| {
                if let Event::Accepted(id) = e {
                    Some(*id)
                } else {
                    None
                }
            })
            .expect("accepted");
        assert_eq!(p.b.state(cb), Some(State::Established));
        (p, ca, cb)
    }

    #[test]
    fn a_handle_kept_past_its_connection_reaches_nothing() {
        // An event not yet handled, a timer or a peer link can still name
        // a connection that is gone; the next connection in its slot is
        // not reached through it.
        let (mut p, _, cb) = established(TcpConfig::default());
        p.b.abort(cb);
        // Not reused before the application has had the Closed event (it
        // may keep state by slot until then).
        let early = p.b.connect(p.now, key(B, 5002, A, 80)).unwrap();
        assert_ne!(early.slot(), cb.slot());
        let mut ev = Vec::new();
        p.b.drain_events(&mut ev);
        assert!(
            ev.contains(&Event::Closed(cb, CloseReason::Aborted)),
            "{ev:?}"
        );
        let other = p.b.connect(p.now, key(B, 5003, A, 80)).unwrap();
        assert_ne!(other.slot(), cb.slot(), "nor while that batch is handled");
        p.b.drain_events(&mut ev);
        let next = p.b.connect(p.now, key(B, 5001, A, 80)).unwrap();
        assert_eq!(next.slot(), cb.slot(), "then the slot is reused");
        assert_ne!(next, cb);
        assert_eq!(p.b.key(cb), None);
        assert_eq!(p.b.state(cb), None);
        assert!(p.b.app(cb).is_none());
        assert_eq!(p.b.send(cb, b"stale"), 0);
        assert_eq!(p.b.send_space(cb), 0);
        p.b.close(cb);
        p.b.abort(cb);
        assert_eq!(p.b.splice(cb, next, usize::MAX), 0);
        assert_eq!(p.b.key(next), Some(key(B, 5001, A, 80)));
        p.run(1, 5);
        assert_eq!(p.b.state(next), Some(State::Established), "untouched");
        assert_eq!(p.b.send(next, b"fresh"), 5);
    }

    #[test]
    fn simultaneous_open() {
        // RFC 9293 §3.5, figure 7: both sides send SYN; both pass through
        // SYN-RECEIVED to ESTABLISHED.
        let mut p = Pair::new(TcpConfig::default());
        let ca = p.a.connect(p.now, key(A, 1000, B, 2000)).unwrap();
        let cb = p.b.connect(p.now, key(B, 2000, A, 1000)).unwrap();
        p.run(1, 10);
        assert_eq!(p.a.state(ca), Some(State::Established));
        assert_eq!(p.b.state(cb), Some(State::Established));
        assert_eq!(p.a.send(ca, b"hello"), 5);
        p.run(1, 5);
        let mut buf = [0u8; 16];
        assert_eq!(p.b.recv(cb, &mut buf), 5);
        assert_eq!(&buf[..5], b"hello");
    }

    #[test]
    fn simultaneous_close_goes_through_closing() {
        // RFC 9293 §3.6, figure 13: FINs cross; both sides pass CLOSING to
        // TIME-WAIT.
        let (mut p, ca, cb) = established(TcpConfig::default());
        p.a.close(ca);
        p.b.close(cb);
        p.run(1, 1);
        assert_eq!(p.a.state(ca), Some(State::Closing));
        assert_eq!(p.b.state(cb), Some(State::Closing));
        p.run(1, 3);
        assert_eq!(p.a.state(ca), Some(State::TimeWait));
        assert_eq!(p.b.state(cb), Some(State::TimeWait));
        // 2 MSL later both are gone.
        p.run(1000, 31);
        assert_eq!((p.a.state(ca), p.b.state(cb)), (None, None));
    }

    #[test]
    fn zero_window_is_probed_and_reopened() {
        let cfg = TcpConfig {
            buffer_size: 16 * 1024,
            ..TcpConfig::default()
        };
        let (mut p, ca, cb) = established(cfg);
        let data: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        let mut sent = 0;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        // B does not read for 5 s: its window closes, A probes it.
        for _ in 0..50 {
            sent += p.a.send(ca, &data[sent..]);
            p.run(100, 1);
        }
        assert!(sent < data.len(), "A blocked by the closed window");
        assert!(p.a.counters().retransmits > 0, "persist probes went out");
        assert_eq!(
            p.a.state(ca),
            Some(State::Established),
            "probes do not kill the connection"
        );
        // B reads: the window reopens and everything arrives in order.
        for _ in 0..200 {
            sent += p.a.send(ca, &data[sent..]);
            let n = p.b.recv(cb, &mut buf);
            got.extend_from_slice(&buf[..n]);
            p.run(10, 1);
            if got.len() == data.len() {
                break;
            }
        }
        assert_eq!(got, data);
    }
}
