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
//! answered) with MSS, window scaling, timestamps with PAWS (RFC 7323) and
//! SACK-permitted; SYN cookies (RFC 4987); in-order data both ways and
//! out-of-order data held behind the gap, reported in SACK blocks;
//! retransmission (RFC 6298 with exponential backoff), fast retransmit,
//! NewReno (RFC 6582), SACK-based recovery (RFC 6675) and RACK-TLP (RFC
//! 8985); CUBIC (RFC 9438); delayed ACKs, zero-window probes, silly window
//! avoidance, keepalive; graceful close from either side, TIME-WAIT in a
//! bounded table of its own; RST validation and rate-limited challenge
//! ACKs (RFC 5961); handshake and idle timeouts; resets for segments to no
//! connection. The full list: docs/architecture.md, "TCP".

mod buffer;
mod config;
mod conn;
mod cookie;
mod cubic;
mod ended;
mod flow_table;
mod hystart;
mod inspect;
mod key;
mod limits;
mod listen;
mod output;
mod read;
mod refused;
pub mod seq;
mod time_wait;
mod timer;
pub use timer::TURN as TIMER_TURN;
pub(crate) mod wire;

use std::hash::Hasher;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

pub use buffer::BufferPool;
pub use config::{SynCookies, TcpConfig};
use conn::{Conn, Input};
pub use conn::{ConnTcpView, State};
pub use ended::Ended;
use flow_table::{FlowTable, Found};
pub use inspect::{ConnFilter, ConnView};
use key::Tables;
pub use key::{AnyFlowKey, FlowAddr, FlowKey, FlowKey6};
use limits::Listener;
pub use limits::{ListenLimits, Refusals};
pub use listen::SourceCount;
pub use read::Unread;
pub use refused::{RefusedSource, WINDOW as REFUSED_WINDOW};
pub use seq::Seq;
use time_wait::TimeWait;
use timer::TimerWheel;

use crate::net::PrefixSet;
use crate::port::Check;
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

/// Slots beyond `max_conns` the slab reserves: connections released in
/// this iteration whose slots are not free again yet.
const SLOT_HEADROOM: usize = 4096;

/// Connection slots to reserve for an engine of `max_conns`: that many
/// and `SLOT_HEADROOM` (tables indexed by slot, the TCP slab and the
/// applications' roles, reserve this many; past it they grow).
pub fn slots_for(max_conns: usize) -> usize {
    max_conns.min(SLOT_MASK as usize + 1) + SLOT_HEADROOM
}

/// An empty slab with [`slots_for`] `max_conns` reserved (address space
/// only: pages are touched as slots are first used), so that it never
/// grows inside the engine loop: doubling would copy every connection
/// (32,768 × 672 bytes on the way to the default bound). If the
/// reservation is refused, the slab grows as it must.
fn reserved_slab<A>(max_conns: usize) -> Vec<Option<Conn<A>>> {
    let mut slab = Vec::new();
    let _ = slab.try_reserve_exact(slots_for(max_conns));
    slab
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
    /// The application's deadline for it passed
    /// ([`TcpEngine::set_deadline`]): reset, as by an abort.
    Deadline,
    /// The peer acknowledged none of the data waiting for it for the
    /// application's send timeout ([`TcpEngine::set_send_timeout`]):
    /// reset.
    SendTimeout,
    /// We aborted it.
    Aborted,
    /// Its source was denied while it was open (`[access] deny`, its
    /// VIP's `allow`): reset, as by an abort.
    Denied,
    /// An operator reset it (`dpctl conn reset`), as by an abort.
    Operator,
    /// An active open was answered with a reset.
    Refused,
    /// dpd stopped with it open ([`TcpEngine::reset_at_stop`]): reset, as
    /// by an abort.
    Stopped,
}

impl CloseReason {
    /// We reset it at once (an abort, a deny, an operator, a stop): what
    /// it left unread is dropped.
    pub fn is_ours(self) -> bool {
        matches!(
            self,
            Self::Aborted | Self::Denied | Self::Operator | Self::Stopped
        )
    }
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
    /// A SYN dropped: the half-open, connection or buffer-memory limit
    /// was reached.
    ListenOverflow,
    /// A SYN refused by its listener's limits (answered by RST).
    Refused,
    /// From a denied source (`[access] deny`) to no connection, or to a
    /// listener whose allow list does not hold it: dropped unanswered.
    Denied,
}

/// A segment to transmit: addresses and the TCP header and payload.
#[derive(Debug)]
pub struct Outgoing<'a> {
    /// Both of one family.
    pub src: IpAddr,
    pub dst: IpAddr,
    pub repr: TcpRepr<'a>,
    /// The port is to cut the payload into segments of this many bytes
    /// (TCP segmentation offload); 0: the segment goes as it is.
    pub segment_size: u16,
}

/// Counters of the TCP engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpCounters {
    pub accepted: u64,
    /// Active opens completed.
    pub connected: u64,
    pub active: u64,
    /// Open connections listeners took (half-open ones too): clients',
    /// not ours to backends and health checks.
    pub accepted_open: u64,
    pub half_open: u64,
    pub time_wait: u64,
    /// TIME-WAIT entries recycled early because the table was full.
    pub time_wait_recycled: u64,
    pub closed: u64,
    pub resets_sent: u64,
    pub resets_received: u64,
    pub retransmits: u64,
    /// Retransmission timer expiries (RFC 6298 §5.4).
    pub rto_expiries: u64,
    pub timeouts: u64,
    pub keepalive_probes: u64,
    /// Challenge ACKs sent (RFC 5961 §§3–5) and those the per-connection
    /// limit held back (§7).
    pub challenge_acks: u64,
    pub challenge_acks_limited: u64,
    /// Segments dropped by PAWS (RFC 7323 §5.3: TSval older than
    /// TS.Recent) and for lacking the timestamp option on a connection
    /// that uses it (§3.2).
    pub paws_rejected: u64,
    pub timestamp_missing: u64,
    /// Zero-window (persist) probes sent (RFC 9293 §3.8.6.1).
    pub window_probes: u64,
    /// Connections reset in FIN-WAIT-2 with no FIN from the peer within
    /// `fin_wait2_timeout`.
    pub fin_wait2_timeouts: u64,
    /// Accepted connections reset when their source was denied.
    pub denied_resets: u64,
    /// Accepted connections reset at an operator's request (`dpctl conn
    /// reset`).
    pub operator_resets: u64,
    /// Tail loss probes sent (RFC 8985 §7), and retransmissions found lost
    /// by RACK's time rule (§6.2) instead of waiting for the RTO.
    pub tail_loss_probes: u64,
    pub lost_retransmits: u64,
    /// Times RACK's time rule found first transmissions lost (RFC 8985
    /// §6.2), and probes that repaired a loss and so cut the congestion
    /// window (§7.4.2).
    pub rack_losses: u64,
    pub tlp_repairs: u64,
    /// First slow starts HyStart++ slowed on a growing round trip (RFC
    /// 9406), before any loss.
    pub hystart_exits: u64,
    /// RTOs shown needless by timestamps (RFC 3522), their response undone.
    pub spurious_timeouts: u64,
    /// Fast recoveries shown needless by timestamps, their response undone.
    pub spurious_recoveries: u64,
    pub syn_dropped: u64,
    /// SYNs dropped because the buffer cap left no ring for them.
    pub syn_no_memory: u64,
    /// Bytes of the ring pool (in use and idle), and rings or larger rings
    /// it refused at its cap.
    pub buffer_bytes: u64,
    /// Bytes the application holds outside the rings, charged to the cap.
    pub buffer_outside_bytes: u64,
    pub buffer_denied: u64,
    pub syn_cookies_sent: u64,
    pub syn_cookies_accepted: u64,
    pub syn_cookies_rejected: u64,
    pub segments_in: u64,
    pub segments_out: u64,
    /// Segments longer than one segment size, handed to the port to cut
    /// (TCP segmentation offload).
    pub offload_segments: u64,
    /// Segments received longer than one segment size (LRO/GRO).
    pub large_segments_in: u64,
    /// Out-of-order segments dropped because they lay past what the
    /// connection may hold ahead of its gap (`conn::ooo_reach`).
    pub ooo_beyond_reach: u64,
    /// Connections whose segment size a Packet Too Big lowered.
    pub path_mtu_lowered: u64,
}

/// The engine's secret (128 bits) for its keyed PRF, SipHash-2-4: ISNs
/// (RFC 6528) and SYN cookies (RFC 4987) are outputs an attacker can see,
/// so they must not reveal the key nor let one predict the next.
#[derive(Clone, Copy)]
pub struct Secret([u64; 2]);

impl Secret {
    /// A secret drawn from the process's random keys (std's `RandomState`,
    /// seeded from the OS): each call a new one.
    pub fn random() -> Self {
        use std::hash::BuildHasher;
        let keys = std::collections::hash_map::RandomState::new();
        Self([keys.hash_one(0u8), keys.hash_one(1u8)])
    }

    /// A fixed secret, for reproducible runs (tests, simulation, fuzzing).
    pub fn from_seed(seed: u64) -> Self {
        let mix = |x: u64| {
            let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            x ^ (x >> 31)
        };
        Self([mix(seed), mix(seed ^ 0x9e37_79b9_7f4a_7c15)])
    }

    /// The seed of the engine's flow-table hashing ([`FlowHashing`]).
    pub fn flow_hashing(&self) -> FlowHashing {
        FlowHashing(self.prf(b'h').finish())
    }

    /// The PRF for one use, `domain` keeping uses apart.
    fn prf(&self, domain: u8) -> siphasher::sip::SipHasher24 {
        let mut h = siphasher::sip::SipHasher24::new_with_keys(self.0[0], self.0[1]);
        h.write_u8(domain);
        h
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// FxHash (a few multiplies per key, much faster than SipHash on the
/// per-segment lookup), started from a seed: see [`FlowHashing`].
#[derive(Debug, Default, Clone, Copy)]
pub struct FxHasher(u64);

/// Builds the flow tables' hashers from a per-engine seed drawn from the
/// engine's secret ([`Secret::flow_hashing`]). Peers choose the 4-tuples
/// (a spoofed SYN's addresses and ports), and an unseeded FxHash is a
/// public function: keys crafted to share buckets would make every lookup
/// walk one long probe sequence (hash flooding). Seeded, the bucket of a
/// 4-tuple cannot be computed from outside. Not a cryptographic MAC: the
/// ISNs and cookies use SipHash.
#[derive(Debug, Default, Clone, Copy)]
pub struct FlowHashing(u64);

impl FlowHashing {
    /// A seed of its own (from the process's random hash keys), for a
    /// table no engine secret reaches: the neighbour caches, whose keys
    /// peers choose too (the sender of an ARP request for our address).
    pub fn random() -> Self {
        use std::hash::BuildHasher;
        Self(std::collections::hash_map::RandomState::new().hash_one(0x6e65_6967_6862_6f72u64))
    }
}

impl std::hash::BuildHasher for FlowHashing {
    type Hasher = FxHasher;
    fn build_hasher(&self) -> FxHasher {
        FxHasher(self.0)
    }
}

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
    /// With a final avalanche (MurmurHash3's fmix64): the multiply-xor
    /// rounds leave the low bits, which pick the table bucket, depending
    /// on little of the input, and 4-tuples from many addresses and ports
    /// then crowd a few buckets.
    #[inline]
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
}

/// A reset owed to a segment that matched no connection.
#[derive(Debug, Clone, Copy)]
struct Reset {
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    dst_port: u16,
    seq: Seq,
    ack: Option<Seq>,
}

impl Reset {
    /// A reset from our side of `key`.
    fn new(key: AnyFlowKey, seq: Seq, ack: Option<Seq>) -> Self {
        let (local, remote) = (key.local_addr(), key.remote_addr());
        Self {
            src: local.ip(),
            dst: remote.ip(),
            src_port: local.port(),
            dst_port: remote.port(),
            seq,
            ack,
        }
    }
}

/// How long a 4-tuple stays in TIME-WAIT before `connect` may reuse it
/// (when the old connection used timestamps).
const TIME_WAIT_REUSE: Duration = Duration::from_secs(1);

/// Most resets queued per engine iteration (never an amplifier).
const MAX_RESETS: usize = 64;
/// Most cookie SYN-ACKs queued per engine iteration.
const MAX_COOKIE_SYNACKS: usize = 256;

/// A stateless SYN-ACK owed to a SYN answered with a cookie.
#[derive(Debug, Clone, Copy)]
struct CookieSynAck {
    key: AnyFlowKey,
    iss: Seq,
    ack: Seq,
    /// The MSS the SYN-ACK offers: the local address's link's.
    mss: u16,
    wscale: bool,
    sack: bool,
    /// The SYN's TSval to echo, when it carried timestamps.
    ts_echo: Option<u32>,
}

/// What one local address's link takes, where it is more than the
/// engine's defaults (`TcpConfig::mss`, `TcpConfig::segmentation_max`):
/// a larger MTU, or a port that cuts large segments (TSO) where another
/// port does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkLimits {
    /// The link's MTU: connections on the address offer it less the IP and
    /// TCP headers.
    pub mtu: u16,
    /// Payload bytes a segment may carry for the port to cut (0: none).
    pub segmentation_max: u32,
}

/// The limits one connection keeps from its local address's link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLink {
    /// The MSS we offer.
    pub mss: u16,
    /// Payload bytes a segment may carry for the port to cut (0: none).
    pub segmentation_max: u32,
}

/// The TCP engine of one core, with per-connection application state `A`.
#[derive(Debug)]
pub struct TcpEngine<A> {
    cfg: TcpConfig,
    /// Local addresses whose links take more than `cfg`'s defaults:
    /// connections on them offer their link's MSS and send segments as
    /// large as its port cuts.
    links: Vec<(IpAddr, LinkLimits)>,
    listeners: Vec<Listener>,
    /// Client networks refused (`[access] deny`), shared read-only with
    /// the other engines.
    deny: Arc<PrefixSet>,
    /// SYNs refused by listener limits, by listener tag (a VIP's slot).
    refused: Vec<Refusals>,
    /// The sources refused lately, per VIP (`dpctl sources --refused`).
    refused_sources: refused::RefusedTable,
    flows: Tables,
    conns: Vec<Option<Conn<A>>>,
    /// The 4-tuples of IPv6 connections by slot (their control blocks
    /// hold only the ports, so IPv4's stay as small as they were); an
    /// entry is meaningful while its slot holds an IPv6 connection.
    keys6: Vec<FlowKey6>,
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
    /// Unread bytes of connections that ended, readable until the
    /// application has had their `Closed` event.
    remains: read::Remains,
    /// What accepted connections left at their end, while kept.
    ended: ended::EndedConns,
    /// Connections past their handshake in TIME-WAIT: compact entries.
    /// ACKs owed from TIME-WAIT entries (bounded per iteration).
    time_wait_acks: Vec<output::TimeWaitAck>,
    closed_batch: std::collections::VecDeque<A>,
    /// Listeners take new connections (false while draining: SYNs are
    /// answered with a reset).
    accepting: bool,
    /// Connections with something to send.
    dirty: Vec<ConnId>,
    /// Resets for segments to no connection (at most `MAX_RESETS` an
    /// iteration), and those ending our own connections (all of them).
    resets: Vec<Reset>,
    own_resets: Vec<Reset>,
    cookie_synacks: Vec<CookieSynAck>,
    counters: TcpCounters,
    secret: Secret,
    /// When the last SYN cookie went out: cookie ACKs are looked at only
    /// within two cookie periods of it (as Linux does), so stray ACKs
    /// cannot probe the MAC while no cookie is out.
    last_cookie: Option<Instant>,
    /// Timers fired in one poll (kept to reuse its capacity).
    fired: Vec<(ConnId, Instant)>,
    /// Connections per state, indexed by `State as usize`.
    states: [u64; State::COUNT],
}

impl<A: Default> TcpEngine<A> {
    pub fn new(cfg: TcpConfig, now: Instant, secret: Secret) -> Self {
        Self {
            cfg,
            links: Vec::new(),
            listeners: Vec::new(),
            deny: Arc::default(),
            refused: Vec::new(),
            refused_sources: refused::RefusedTable::new(),
            flows: Tables {
                v4: FlowTable::new(cfg.max_time_wait, secret.flow_hashing()),
                v6: FlowTable::new(cfg.max_time_wait, secret.flow_hashing()),
            },
            conns: reserved_slab(cfg.max_conns),
            keys6: Vec::new(),
            free: Vec::new(),
            released: Vec::new(),
            closing_slots: Vec::new(),
            timers: TimerWheel::new(now),
            buffers: BufferPool::new(cfg.buffer_size, cfg.buffer_memory),
            events: Vec::with_capacity(256),
            closed_apps: std::collections::VecDeque::with_capacity(256),
            remains: read::Remains::default(),
            ended: ended::EndedConns::default(),
            time_wait_acks: Vec::with_capacity(MAX_RESETS),
            closed_batch: std::collections::VecDeque::with_capacity(256),
            accepting: true,
            dirty: Vec::with_capacity(256),
            resets: Vec::with_capacity(MAX_RESETS),
            own_resets: Vec::with_capacity(MAX_RESETS),
            cookie_synacks: Vec::with_capacity(MAX_COOKIE_SYNACKS),
            counters: TcpCounters::default(),
            secret,
            last_cookie: None,
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

    /// Payload bytes a segment may carry for the port to cut (TCP
    /// segmentation offload; 0: none), on addresses [`Self::set_links`]
    /// does not list. See [`TcpConfig::segmentation_max`].
    pub fn set_segmentation_max(&mut self, bytes: u32) {
        self.cfg.segmentation_max = bytes;
    }

    /// The local addresses whose link takes more than the defaults (jumbo
    /// frames, or TSO where another port has none): connections opened to
    /// or from them afterwards offer that link's MSS and hand its port
    /// segments as large as it cuts. An address on several links (a
    /// routed VIP) belongs in the list with the least of their limits.
    pub fn set_links(&mut self, links: Vec<(IpAddr, LinkLimits)>) {
        self.links = links;
    }

    /// What a connection at local address `local` keeps of its link: the
    /// MSS it offers (the link's MTU less the IP and TCP headers, at
    /// least the configured one) and the largest segment its port cuts.
    fn link_for<I: FlowAddr>(&self, local: I) -> ConnLink {
        let base = ConnLink {
            mss: if I::IPV6 {
                self.cfg.mss6()
            } else {
                self.cfg.mss
            },
            segmentation_max: self.cfg.segmentation_max,
        };
        if self.links.is_empty() {
            return base;
        }
        let ip = local.ip();
        match self.links.iter().find(|(a, _)| *a == ip) {
            Some(&(_, link)) => {
                let headers = if I::IPV6 { 60 } else { 40 };
                ConnLink {
                    mss: link.mtu.saturating_sub(headers).max(base.mss),
                    segmentation_max: link.segmentation_max.max(base.segmentation_max),
                }
            }
            None => base,
        }
    }

    /// Keeps the listeners `keep(addr, port)` holds true for; SYNs to the
    /// others get a reset. Open connections are not touched.
    pub fn retain_listeners(&mut self, mut keep: impl FnMut(IpAddr, u16) -> bool) {
        for l in &mut self.listeners {
            l.accepting &= keep(l.addr, l.port);
        }
        self.listeners.retain(|l| l.accepting || l.open > 0);
    }

    /// Whether connections a listener on `addr` (exactly: not a wildcard)
    /// accepted are still open, its VIP removed or not.
    pub fn serves_address(&self, addr: IpAddr) -> bool {
        self.listeners.iter().any(|l| l.addr == addr && l.open > 0)
    }

    /// Accepts connections to `addr:port` (`0.0.0.0` or `::`: any of the
    /// family's addresses).
    pub fn listen(&mut self, addr: impl Into<IpAddr>, port: u16) {
        self.listen_with(addr, port, ListenLimits::default(), None);
    }

    /// Accepts connections to `addr:port` within `limits`, counting its
    /// refusals under `tag` ([`TcpEngine::refusals`]); an existing
    /// listener takes the new limits.
    pub fn listen_with(
        &mut self,
        addr: impl Into<IpAddr>,
        port: u16,
        limits: ListenLimits,
        tag: Option<u16>,
    ) {
        let addr = addr.into();
        if let Some(t) = tag {
            let need = usize::from(t) + 1;
            if self.refused.len() < need {
                self.refused.resize(need, Refusals::default());
            }
        }
        match self
            .listeners
            .iter()
            .position(|l| l.addr == addr && l.port == port)
        {
            Some(i) => {
                let l = &mut self.listeners[i];
                let counted = l.counts_sources();
                l.accepting = true;
                l.tag = tag;
                l.set_limits(limits);
                if l.counts_sources() != counted {
                    self.recount_sources(i);
                }
            }
            None => self.listeners.push(Listener::new(addr, port, limits, tag)),
        }
    }

    /// SYNs refused by the limits of listeners tagged `tag`, ever.
    pub fn refusals(&self, tag: u16) -> Refusals {
        self.refused
            .get(usize::from(tag))
            .copied()
            .unwrap_or_default()
    }

    /// The `max` sources refused most in the last one to two minutes (at
    /// listeners tagged `vip` only, when given), most first.
    pub fn refused_sources(
        &mut self,
        vip: Option<u16>,
        max: usize,
        now: Instant,
    ) -> Vec<RefusedSource> {
        self.refused_sources.top(vip, max, now)
    }

    /// The listener taking SYNs to `addr:port` (its own or a wildcard's).
    fn listener_for<I: FlowAddr>(&self, addr: I, port: u16) -> Option<usize> {
        let at = |a: IpAddr| {
            self.listeners
                .iter()
                .position(|l| l.accepting && l.addr == a && l.port == port)
        };
        at(addr.ip()).or_else(|| at(I::UNSPECIFIED.ip()))
    }

    pub fn counters(&self) -> TcpCounters {
        let mut c = self.counters;
        // A connection in TIME-WAIT keeps its slot until the application
        // has read what the peer sent; either way it is not open.
        let in_slot = self.states[State::TimeWait as usize];
        c.active = self.flows.conns() as u64 - in_slot;
        c.half_open = self.states[State::SynReceived as usize];
        c.accepted_open = self.listeners.iter().map(|l| u64::from(l.open)).sum();
        let compact = self.flows.v4.time_wait_len() + self.flows.v6.time_wait_len();
        c.time_wait = compact as u64 + in_slot;
        c.time_wait_recycled = self.flows.v4.recycled() + self.flows.v6.recycled();
        c.buffer_bytes = self.buffers.bytes_held() as u64;
        c.buffer_outside_bytes = self.buffers.bytes_outside() as u64;
        c.buffer_denied = self.buffers.denied();
        c
    }

    /// Bytes of connection state held: the slots made (the slab's
    /// reservation is untouched beyond them), the flow and TIME-WAIT
    /// tables and the timer wheel (capacities, not lengths), plus the
    /// ring pool's bytes.
    pub fn state_bytes(&self) -> usize {
        self.table_bytes() + self.buffers.bytes_held()
    }

    /// Bytes of the timer wheel's slots (part of [`TcpEngine::table_bytes`]).
    pub fn timer_bytes(&self) -> usize {
        self.timers.entry_bytes()
    }

    /// [`TcpEngine::state_bytes`] but the byte rings: what connections
    /// and TIME-WAIT hold whatever they carry. O(1): published every
    /// tick (`tcp_state_bytes`).
    pub fn table_bytes(&self) -> usize {
        let slot = std::mem::size_of::<Option<Conn<A>>>();
        self.conns.len() * slot
            + self.flows.v4.bytes()
            + self.flows.v6.bytes()
            + self.keys6.capacity() * std::mem::size_of::<FlowKey6>()
            + self.free.capacity() * 4
            + self.timers.entry_bytes()
            + self.buffers.boards.bytes()
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

    /// The pool, for the application to charge what it holds for
    /// connections outside the rings ([`BufferPool::charge`]).
    pub fn buffers_mut(&mut self) -> &mut BufferPool {
        &mut self.buffers
    }

    /// Counts a state change of a connection.
    fn transition(&mut self, before: State, after: State) {
        self.account(Some(before), Some(after));
    }

    /// Whether `key` is waiting out TIME-WAIT (in the compact table).
    pub fn in_time_wait<I: FlowAddr>(&self, key: &FlowKey<I>) -> bool {
        I::table(&self.flows).time_wait(key).is_some()
    }

    /// Moves a connection in TIME-WAIT whose received bytes are all read
    /// to the compact table and frees its slot (`Event::Closed`, Normal):
    /// the 4-tuple stays protected for 2 MSL at a fraction of the cost.
    fn retire_to_time_wait(&mut self, id: ConnId, now: Instant) {
        match self.key(id) {
            Some(AnyFlowKey::V4(key)) => self.retire::<Ipv4Addr>(id, key, now),
            Some(AnyFlowKey::V6(key)) => self.retire::<Ipv6Addr>(id, key, now),
            None => {}
        }
    }

    /// [`Self::retire_to_time_wait`] for connection `id` of `key`.
    fn retire<I: FlowAddr>(&mut self, id: ConnId, key: FlowKey<I>, now: Instant) {
        let Some(c) = live(&self.conns, id) else {
            return;
        };
        let tw = c.time_wait_entry(key, now, &self.cfg);
        self.release(id, CloseReason::Normal);
        I::table_mut(&mut self.flows).enter_time_wait(tw);
    }

    /// Takes the queued events.
    ///
    /// Slots of connections whose `Closed` event a call returns are reused
    /// only from the call after it: until then, the application may keep
    /// state by [`ConnId::slot`] for them.
    pub fn drain_events(&mut self, out: &mut Vec<Event>) {
        self.wake_starved_senders();
        out.append(&mut self.events);
        self.free.append(&mut self.closing_slots);
        std::mem::swap(&mut self.closing_slots, &mut self.released);
        // The apps of connections closed in these events, in order; those
        // the caller did not take are dropped now.
        self.closed_batch.clear();
        std::mem::swap(&mut self.closed_batch, &mut self.closed_apps);
        self.remains.next_batch(&mut self.buffers);
        self.ended.next_batch();
    }

    /// Memory came back after senders were starved at the buffer cap
    /// ([`BufferPool::relieved`]): each connection that found no send room
    /// with nothing of its own queued (so no ACK of its data will come to
    /// wake it) is told it is writable. One pass over the slots, once per
    /// episode of pressure, not per packet.
    fn wake_starved_senders(&mut self) {
        if !self.buffers.relieved() {
            return;
        }
        for (slot, c) in self.conns.iter().enumerate() {
            let Some(c) = c else { continue };
            if c.take_send_starved() && c.can_send() {
                self.events
                    .push(Event::Writable(ConnId::new(slot as u32, c.gen)));
            }
        }
    }

    /// The application has handled the events the last
    /// [`TcpEngine::drain_events`] returned: the unread bytes of the
    /// connections that ended in them go back to the pool now rather than
    /// at the next call (which may be long on an idle engine).
    pub fn events_handled(&mut self) {
        self.remains.release_batch(&mut self.buffers);
    }

    /// The application state of the next connection whose
    /// `Event::Closed` the last [`TcpEngine::drain_events`] returned (one
    /// per such event, in order): what the app kept about a connection
    /// that is gone. Valid until the next `drain_events`.
    pub fn take_closed_app(&mut self) -> Option<A> {
        self.closed_batch.pop_front()
    }

    /// The application state of a connection.
    pub fn app(&mut self, id: ConnId) -> Option<&mut A> {
        self.conn_mut(id).map(|c| &mut c.app)
    }

    /// A connection's state (None once closed).
    pub fn state(&self, id: ConnId) -> Option<State> {
        live(&self.conns, id).map(|c| c.state)
    }

    /// A connection's 4-tuple.
    pub fn key(&self, id: ConnId) -> Option<AnyFlowKey> {
        let c = live(&self.conns, id)?;
        if c.ipv6 {
            self.keys6.get(id.slot()).copied().map(AnyFlowKey::V6)
        } else {
            Some(AnyFlowKey::V4(c.key))
        }
    }

    /// A connection's addresses, source (ours) first, for its segments.
    fn path(keys6: &[FlowKey6], c: &Conn<A>, id: ConnId) -> Option<conn::Path> {
        Some(if c.ipv6 {
            let k = keys6.get(id.slot())?;
            conn::Path {
                src: IpAddr::V6(k.local),
                dst: IpAddr::V6(k.remote),
            }
        } else {
            conn::Path {
                src: IpAddr::V4(c.key.local),
                dst: IpAddr::V4(c.key.remote),
            }
        })
    }

    fn conn_mut(&mut self, id: ConnId) -> Option<&mut Conn<A>> {
        live_mut(&mut self.conns, id)
    }

    /// Opens a connection (RFC 9293 active open). `Event::Connected` follows
    /// the handshake; `Event::Closed(_, Refused | TimedOut)` its failure.
    ///
    /// # Errors
    /// When the 4-tuple is taken or the connection limit is reached.
    pub fn connect(
        &mut self,
        now: Instant,
        key: impl Into<AnyFlowKey>,
    ) -> Result<ConnId, ConnectError> {
        match key.into() {
            AnyFlowKey::V4(key) => self.connect_in(now, key),
            AnyFlowKey::V6(key) => self.connect_in(now, key),
        }
    }

    fn connect_in<I: FlowAddr>(
        &mut self,
        now: Instant,
        key: FlowKey<I>,
    ) -> Result<ConnId, ConnectError> {
        let table = I::table_mut(&mut self.flows);
        if table.conn(&key).is_some() {
            return Err(ConnectError::InUse);
        }
        if let Some(tw) = table.time_wait(&key) {
            // RFC 6191: our SYN's TSval (a millisecond clock) is above any
            // the old connection sent, so the peer can tell them apart once
            // timestamps were in use; Linux's tcp_tw_reuse waits 1 s more
            // after TIME-WAIT began (one `time_wait` before its end).
            if tw.ts_recent.is_none() || now + self.cfg.time_wait < tw.until + TIME_WAIT_REUSE {
                return Err(ConnectError::InUse);
            }
            table.end_time_wait(&key);
        }
        if self.flows.conns() >= self.cfg.max_conns {
            return Err(ConnectError::TooMany);
        }
        let iss = self.isn(&key, now);
        let id = self.alloc_slot();
        let link = self.link_for(key.local);
        let conn = Conn::connect(I::inline_key(key), I::IPV6, iss, now, &self.cfg, link);
        self.install(id, key, conn);
        I::table_mut(&mut self.flows).insert_conn(key, id);
        self.account(None, Some(State::SynSent));
        let c = live_mut(&mut self.conns, id).expect("just made");
        mark_dirty(&mut self.dirty, c, id);
        self.rearm(id, now);
        Ok(id)
    }

    /// Free space in the send buffer.
    pub fn send_space(&self, id: ConnId) -> usize {
        live(&self.conns, id).map_or(0, |c| c.send_space(&self.buffers))
    }

    /// Whether everything queued on `id` was sent and acknowledged (true
    /// for a connection that is gone).
    pub fn all_acked(&self, id: ConnId) -> bool {
        live(&self.conns, id).is_none_or(|c| c.all_acked())
    }

    /// Bytes the application has queued on `id` over its life (0 for none).
    pub fn bytes_queued(&self, id: ConnId) -> u64 {
        live(&self.conns, id).map_or(0, |c| c.bytes_queued)
    }

    /// Queues bytes to send; returns how many fitted.
    pub fn send(&mut self, id: ConnId, data: &[u8]) -> usize {
        let Some(c) = live_mut(&mut self.conns, id) else {
            return 0;
        };
        let n = c.send(data, &mut self.buffers);
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
        let Some(c) = live_mut(&mut self.conns, id) else {
            return 0;
        };
        let n = c.send_with(max, &mut self.buffers, fill);
        if n > 0 {
            mark_dirty(&mut self.dirty, c, id);
        }
        n
    }

    /// Ends the connection at `at` unless it is set again first (`None`
    /// clears it): a reset, then `Closed(_, Deadline)`. For the
    /// application's own limits (a handshake, a request head); one per
    /// connection, not in TIME-WAIT.
    pub fn set_deadline(&mut self, id: ConnId, at: Option<Instant>, now: Instant) {
        if let Some(c) = live_mut(&mut self.conns, id) {
            c.deadline = at;
            self.rearm(id, now);
        }
    }

    /// How long this connection's peer may stay silent before it is reset
    /// (default: `[tcp] idle_timeout`).
    pub fn set_idle_timeout(&mut self, id: ConnId, timeout: Duration, now: Instant) {
        if let Some(c) = live_mut(&mut self.conns, id) {
            c.idle_timeout = Some(timeout);
            self.rearm(id, now);
        }
    }

    /// Resets the connection once data has waited `timeout` for the peer
    /// with none of it acknowledged ([`CloseReason::SendTimeout`]): a peer
    /// that stopped reading, holding its window closed while it answers
    /// every probe, is otherwise kept for ever (RFC 9293 §3.8.6.1; RFC
    /// 6429 leaves ending it to the application). The clock starts when
    /// data is queued and again with each ACK that takes some.
    pub fn set_send_timeout(&mut self, id: ConnId, timeout: Duration, now: Instant) {
        if let Some(c) = live_mut(&mut self.conns, id) {
            c.send_timeout = Some(timeout);
            c.note_send_progress(now, false);
            self.rearm(id, now);
        }
    }

    /// When the connection began: the peer's SYN (or its cookie's ACK), or
    /// our connect.
    pub fn opened_at(&self, id: ConnId) -> Option<Instant> {
        live(&self.conns, id).map(|c| c.opened)
    }

    /// Closes our side after the queued bytes (FIN).
    pub fn close(&mut self, id: ConnId) {
        if let Some(c) = live_mut(&mut self.conns, id) {
            c.close();
            mark_dirty(&mut self.dirty, c, id);
        }
    }

    /// Resets the connection once the bytes already queued have been
    /// delivered (acknowledged), taking nothing more to send and sending
    /// no FIN: the peer gets everything, then learns the stream was cut
    /// (a proxy whose backend reset). At once when nothing is queued; a
    /// peer that stops acknowledging is given up by the retransmission
    /// timeout as usual.
    pub fn abort_after_send(&mut self, id: ConnId) {
        let Some(c) = live_mut(&mut self.conns, id) else {
            return;
        };
        if c.all_acked() || !c.state.is_synchronized() {
            self.abort(id);
            return;
        }
        c.reset_when_sent = true;
    }

    /// Resets the connection and frees it at once.
    pub fn abort(&mut self, id: ConnId) {
        self.abort_for(id, CloseReason::Aborted);
    }

    /// [`TcpEngine::abort`], its `Closed` event saying why (`Aborted`,
    /// `Denied`, `Operator`).
    fn abort_for(&mut self, id: ConnId, reason: CloseReason) {
        let Some(c) = live_mut(&mut self.conns, id) else {
            return;
        };
        if c.state != State::SynSent {
            let seq = c.reset_seq();
            if let Some(key) = self.key(id) {
                self.own_reset(key, seq);
            }
        }
        self.release(id, reason);
    }

    /// A Packet Too Big (ICMPv6, RFC 8201) or a "fragmentation needed"
    /// (ICMP, RFC 1191) quoting our segment of `key` that started at
    /// `seq`: the path takes IP packets of at most `mtu` bytes. False when
    /// no connection took it (unknown, or `seq` not in flight).
    pub fn packet_too_big<I: FlowAddr>(
        &mut self,
        now: Instant,
        key: FlowKey<I>,
        seq: Seq,
        mtu: u32,
    ) -> bool {
        let Some(id) = I::table(&self.flows).conn(&key) else {
            return false;
        };
        let Some(c) = live_mut(&mut self.conns, id) else {
            return false;
        };
        // Never below the family's minimum (RFC 8201 §4: IPv6's minimum
        // link MTU; RFC 791's 576 for IPv4); the IP header comes off.
        let (min, header) = if I::IPV6 { (1280, 40) } else { (576, 20) };
        if !c.lower_path_mtu(mtu.max(min) - header, seq, now) {
            return false;
        }
        self.counters.path_mtu_lowered += 1;
        mark_dirty(&mut self.dirty, c, id);
        self.rearm(id, now);
        true
    }

    /// Processes one TCP segment (`bytes` = TCP header and payload) from
    /// `src` to `dst`.
    ///
    /// # Errors
    /// The reason a malformed or unwanted segment was dropped.
    pub fn input<I: FlowAddr>(
        &mut self,
        now: Instant,
        src: I,
        dst: I,
        bytes: &[u8],
    ) -> Result<(), SegmentDrop> {
        self.input_checked(now, src, dst, bytes, Check::Unknown)
    }

    /// Prefetches what the input of a SYN of flow `key` will read that is
    /// likely out of the caches: its TIME-WAIT index bucket (the engine
    /// prefetches a burst's SYNs before it processes the burst). Only a
    /// hint: nothing changes.
    pub fn prefetch_syn<I: FlowAddr>(&self, key: &FlowKey<I>) {
        I::table(&self.flows).prefetch_time_wait(key);
    }

    /// [`TcpEngine::input`] for a segment whose checksum the port has
    /// already judged (`Good` or `Bad`; `Unknown` is checked here).
    ///
    /// # Errors
    /// The reason a malformed or unwanted segment was dropped.
    pub fn input_checked<I: FlowAddr>(
        &mut self,
        now: Instant,
        src: I,
        dst: I,
        bytes: &[u8],
        checksum: Check,
    ) -> Result<(), SegmentDrop> {
        if !wire::well_sized(bytes) {
            return Err(SegmentDrop::Malformed);
        }
        let checksum_ok = match checksum {
            Check::Good => true,
            Check::Bad => false,
            Check::Unknown => I::checksum_ok(src, dst, bytes),
        };
        if !checksum_ok {
            return Err(SegmentDrop::BadChecksum);
        }
        let repr = wire::parse(bytes).ok_or(SegmentDrop::Malformed)?;
        self.counters.segments_in += 1;
        let key = FlowKey {
            local: dst,
            local_port: repr.dst_port,
            remote: src,
            remote_port: repr.src_port,
        };
        let id = match I::table(&self.flows).find(&key) {
            Found::Conn(id) => id,
            Found::TimeWait(tw) => return self.on_time_wait(now, tw, &repr),
            Found::Nothing => {
                if self.listener_for(dst, repr.dst_port).is_some() {
                    return self.on_listen(now, key, &repr, None);
                }
                self.reset_for(&key, &repr);
                return Err(SegmentDrop::NoConnection);
            }
        };
        let Some(c) = live_mut(&mut self.conns, id) else {
            // A flow entry outlived its connection (never expected:
            // `release` removes both); forget it rather than abort.
            debug_assert!(false, "flow {key:?} maps to a released slot");
            I::table_mut(&mut self.flows).remove_conn(&key);
            return Err(SegmentDrop::NoConnection);
        };
        // RFC 9293 §3.6.1: a new SYN may reopen a connection in TIME-WAIT
        // when it is newer than the old one's (as the compact table's
        // entries: by timestamps where both have them, RFC 6191).
        if c.state == State::TimeWait
            && repr.control == TcpControl::Syn
            && repr.ack_number.is_none()
            && c.reopened_by(&repr)
        {
            let old_snd_nxt = c.snd_max_now();
            self.release(id, CloseReason::Normal);
            return self.on_listen(now, key, &repr, Some(old_snd_nxt));
        }
        let before = c.state;
        let out = c.input(now, &repr, &self.cfg, &mut self.buffers, &mut self.counters);
        let after = c.state;
        if after == State::TimeWait && before != State::TimeWait {
            // The connection moves to the compact table once its last ACK
            // is out (`retire_to_time_wait`, in the transmit pass): its
            // bucket there is a cache miss, asked for now while the rest
            // of the burst is processed.
            I::table(&self.flows).prefetch_time_wait(&key);
        }
        self.transition(before, after);
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

    /// Puts a new connection of `key` in the slot `alloc_slot` gave.
    fn install<I: FlowAddr>(&mut self, id: ConnId, key: FlowKey<I>, mut conn: Conn<A>) {
        conn.gen = id.gen();
        if let Some(k6) = I::side_key(key) {
            if self.keys6.len() <= id.slot() {
                self.keys6.resize(id.slot() + 1, k6);
            }
            self.keys6[id.slot()] = k6;
        }
        self.conns[id.slot()] = Some(conn);
    }

    /// Applies a connection's input results: events, state counters, frees.
    fn apply(&mut self, id: ConnId, out: Input, now: Instant) {
        if out.established {
            if !self.count_source(id, now) {
                // Its source is over the listener's cap or rate.
                self.abort(id);
                return;
            }
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
            if matches!(
                reason,
                CloseReason::TimedOut | CloseReason::Deadline | CloseReason::SendTimeout
            ) {
                if let Some(c) = live(&self.conns, id).filter(|c| c.state.is_synchronized()) {
                    let seq = c.reset_seq();
                    if let Some(key) = self.key(id) {
                        self.own_reset(key, seq);
                    }
                }
            }
            self.release(id, reason);
            return;
        }
        let c = live_mut(&mut self.conns, id).expect("live");
        if c.reset_when_sent && c.all_acked() {
            self.abort(id);
            return;
        }
        if out.send {
            mark_dirty(&mut self.dirty, c, id);
        }
        self.rearm(id, now);
    }

    fn rearm(&mut self, id: ConnId, now: Instant) {
        let c = live_mut(&mut self.conns, id).expect("live");
        if let Some(at) = c.next_deadline(now, &self.cfg) {
            let at = at.min(now + timer::HORIZON);
            if !c.armed.covers(at) {
                c.armed.add(at);
                self.timers.arm(id, at);
            }
        }
    }

    /// Queues the RST that ends one of our connections (an abort, a
    /// timeout, a deadline). Every one goes out, however many end at once
    /// (at most one per connection slot are ever queued), unlike the
    /// bounded resets for stray segments.
    fn own_reset(&mut self, key: AnyFlowKey, seq: Seq) {
        self.own_resets.push(Reset::new(key, seq, None));
    }

    /// Queues a RST from our side of `key` (bounded per iteration).
    fn queue_reset(&mut self, key: AnyFlowKey, seq: Seq, ack: Option<Seq>) {
        if self.resets.len() < MAX_RESETS {
            self.resets.push(Reset::new(key, seq, ack));
        }
    }

    /// Frees a connection's slot, buffers and flow entry.
    fn release(&mut self, id: ConnId, reason: CloseReason) {
        let Some(key) = self.key(id) else {
            return;
        };
        let Some(mut c) = self.conns[id.slot()].take() else {
            return;
        };
        // Read before its buffers go back.
        let unacked = if self.ended.keep { c.send_queued() } else { 0 };
        self.account(Some(c.state), None);
        // Bytes the peer sent before it reset (or before we gave up) stay
        // readable through this batch of events; an abort discards them.
        if c.accepted && !reason.is_ours() {
            if let Some(ring) = c.take_unread() {
                self.remains.keep(id, key, ring);
            }
        }
        c.release_buffers(&mut self.buffers);
        if let Some(l) = c.listener {
            let source = c.source_counted.then(|| listen::source_id(key));
            let addr = listen::listener_addr(l, key);
            self.listener_closed(addr, key.local_addr().port(), source);
        }
        match key {
            AnyFlowKey::V4(k) => self.flows.v4.remove_conn(&k),
            AnyFlowKey::V6(k) => self.flows.v6.remove_conn(&k),
        }
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
            self.ended.note(|| ended::Ended {
                id,
                key,
                opened: c.opened,
                bytes_received: c.bytes_received,
                bytes_queued: c.bytes_queued,
                bytes_unacked: unacked,
            });
            self.events.push(Event::Closed(id, reason));
            self.closed_apps.push_back(c.app);
            self.released.push(id.next_gen());
        } else {
            self.free.push(id.next_gen());
        }
    }
}

fn mark_dirty<A>(dirty: &mut Vec<ConnId>, c: &mut Conn<A>, id: ConnId) {
    if !c.queued {
        c.queued = true;
        dirty.push(id);
    }
}

#[cfg(test)]
mod tests;
