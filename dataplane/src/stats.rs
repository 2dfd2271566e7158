//! Per-core counters. The engine counts in plain integers and publishes them
//! to a cache-padded block of atomics (single writer, relaxed stores) that
//! the control thread reads; nothing on the packet path does an atomic
//! read-modify-write or touches another core's lines.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

pub use control::api::VipCounters;

/// Fields of [`VipCounters`].
const VIP_FIELDS: usize = 5;

/// Why a received frame was dropped, or a frame to send was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum DropReason {
    /// Too short or inconsistent for its protocol.
    Malformed,
    /// Addressed to another host (MAC or IP).
    NotForUs,
    /// An EtherType we do not handle (IPv6, VLAN, ...).
    UnsupportedEtherType,
    /// An IP protocol we do not (yet) handle.
    UnsupportedProtocol,
    /// IPv4 header checksum wrong.
    BadIpChecksum,
    /// ICMP checksum wrong.
    BadIcmpChecksum,
    /// IPv4 fragments are not reassembled.
    Fragment,
    /// No route to the destination (off-subnet and no gateway).
    NoRoute,
    /// Next hop's MAC still unknown after ARP requests (or too many frames
    /// waiting for it).
    NeighborMiss,
    /// The transmit queue was full: frame freed.
    TxFull,
    /// No buffer to build a frame in.
    NoBuffer,
    /// Chained (multi-segment) frames are not expected.
    MultiSegment,
    /// TCP checksum wrong.
    BadTcpChecksum,
    /// A TCP segment for no connection and no listener (answered by RST).
    NoConnection,
    /// A SYN refused: the half-open or connection limit was reached.
    ListenOverflow,
    /// Software RSS: another engine's inbox was full.
    SteerFull,
}

impl DropReason {
    pub const COUNT: usize = 16;
    pub const ALL: [DropReason; Self::COUNT] = [
        Self::Malformed,
        Self::NotForUs,
        Self::UnsupportedEtherType,
        Self::UnsupportedProtocol,
        Self::BadIpChecksum,
        Self::BadIcmpChecksum,
        Self::Fragment,
        Self::NoRoute,
        Self::NeighborMiss,
        Self::TxFull,
        Self::NoBuffer,
        Self::MultiSegment,
        Self::BadTcpChecksum,
        Self::NoConnection,
        Self::ListenOverflow,
        Self::SteerFull,
    ];

    /// A stable snake_case name (used in stats output and metrics).
    pub fn name(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::NotForUs => "not_for_us",
            Self::UnsupportedEtherType => "unsupported_ethertype",
            Self::UnsupportedProtocol => "unsupported_protocol",
            Self::BadIpChecksum => "bad_ip_checksum",
            Self::BadIcmpChecksum => "bad_icmp_checksum",
            Self::Fragment => "fragment",
            Self::NoRoute => "no_route",
            Self::NeighborMiss => "neighbor_miss",
            Self::TxFull => "tx_full",
            Self::NoBuffer => "no_buffer",
            Self::MultiSegment => "multi_segment",
            Self::BadTcpChecksum => "bad_tcp_checksum",
            Self::NoConnection => "no_connection",
            Self::ListenOverflow => "listen_overflow",
            Self::SteerFull => "steer_full",
        }
    }
}

/// One engine's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub arp_replies: u64,
    pub arp_requests: u64,
    pub icmp_echo_replies: u64,
    pub tcp_accepted: u64,
    /// TCP connections open now: every state but TIME-WAIT.
    pub tcp_active: u64,
    pub tcp_retransmits: u64,
    pub tcp_resets_sent: u64,
    pub tcp_timeouts: u64,
    pub tcp_syn_cookies_sent: u64,
    pub tcp_syn_cookies_accepted: u64,
    pub http_requests: u64,
    pub tls_handshakes: u64,
    pub tls_failures: u64,
    /// Handshakes by version, suite and group (indices of
    /// `crypto::session::{VERSIONS, SUITES, GROUPS}`).
    pub tls_versions: [u64; 2],
    pub tls_suites: [u64; 10],
    pub tls_groups: [u64; 5],
    /// Handshakes by certificate key type (`crypto::session::KEY_TYPES`).
    pub tls_key_types: [u64; 6],
    /// Failures by reason (`crypto::session::FAILURES`).
    pub tls_failure_reasons: [u64; 11],
    /// Handshakes that resumed a session (tickets).
    pub tls_resumed: u64,
    /// TLS 1.3 KeyUpdates received from clients.
    pub tls_key_updates: u64,
    pub tls_renegotiations_refused: u64,
    /// Times a connection's handshake work waited for the next loop
    /// iteration (the per-iteration handshake budget was spent).
    pub tls_handshakes_deferred: u64,
    /// Backend connections opened for proxied VIPs; those that could not
    /// be established (each retried on another member); clients ended for
    /// want of a member.
    pub proxy_backend_connects: u64,
    pub proxy_backend_failures: u64,
    pub proxy_no_member: u64,
    /// TCP connections in TIME-WAIT now (not part of `tcp_active`).
    pub tcp_time_wait: u64,
    /// Health checks run, failed, and members' state changes.
    pub health_checks: u64,
    pub health_failures: u64,
    pub health_changes: u64,
    /// Version of the configuration snapshot the engine uses.
    pub snapshot_version: u64,
    /// Frames received here and handed to the engine owning their flow
    /// (software RSS).
    pub frames_steered: u64,
    /// TLS connections that ended before their handshake did, with no TLS
    /// error of ours: the client closed, reset or went silent (scanners,
    /// TCP health checks, clients giving up). Not in `tls_failures`.
    pub tls_abandoned: u64,
    pub drops: [u64; DropReason::COUNT],
    /// TSC cycles spent in loop iterations that did work.
    pub busy_cycles: u64,
    /// TSC cycles spent in iterations that found nothing to do.
    pub idle_cycles: u64,
    pub loops: u64,
}

impl Counters {
    #[inline]
    pub fn drop(&mut self, reason: DropReason) {
        self.drops[reason as usize] += 1;
    }

    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Adds another engine's counters (for totals over cores).
    pub fn add(&mut self, o: &Counters) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.arp_replies += o.arp_replies;
        self.arp_requests += o.arp_requests;
        self.icmp_echo_replies += o.icmp_echo_replies;
        self.tcp_accepted += o.tcp_accepted;
        self.tcp_active += o.tcp_active;
        self.tcp_retransmits += o.tcp_retransmits;
        self.tcp_resets_sent += o.tcp_resets_sent;
        self.tcp_timeouts += o.tcp_timeouts;
        self.tcp_syn_cookies_sent += o.tcp_syn_cookies_sent;
        self.tcp_syn_cookies_accepted += o.tcp_syn_cookies_accepted;
        self.tls_handshakes += o.tls_handshakes;
        self.tls_failures += o.tls_failures;
        for (d, s) in self.tls_versions.iter_mut().zip(o.tls_versions) {
            *d += s;
        }
        for (d, s) in self.tls_suites.iter_mut().zip(o.tls_suites) {
            *d += s;
        }
        for (d, s) in self.tls_groups.iter_mut().zip(o.tls_groups) {
            *d += s;
        }
        for (d, s) in self.tls_key_types.iter_mut().zip(o.tls_key_types) {
            *d += s;
        }
        for (d, s) in self
            .tls_failure_reasons
            .iter_mut()
            .zip(o.tls_failure_reasons)
        {
            *d += s;
        }
        self.tls_resumed += o.tls_resumed;
        self.tls_key_updates += o.tls_key_updates;
        self.tls_renegotiations_refused += o.tls_renegotiations_refused;
        self.tls_handshakes_deferred += o.tls_handshakes_deferred;
        self.proxy_backend_connects += o.proxy_backend_connects;
        self.proxy_backend_failures += o.proxy_backend_failures;
        self.proxy_no_member += o.proxy_no_member;
        self.tcp_time_wait += o.tcp_time_wait;
        self.health_checks += o.health_checks;
        self.health_failures += o.health_failures;
        self.health_changes += o.health_changes;
        // A version is not a sum: the newest (the caller takes the oldest
        // over engines where that matters).
        self.snapshot_version = self.snapshot_version.max(o.snapshot_version);
        self.http_requests += o.http_requests;
        self.frames_steered += o.frames_steered;
        self.tls_abandoned += o.tls_abandoned;
        for (d, s) in self.drops.iter_mut().zip(o.drops) {
            *d += s;
        }
        self.busy_cycles += o.busy_cycles;
        self.idle_cycles += o.idle_cycles;
        self.loops += o.loops;
    }
}

const SCALARS: usize = 34;
const TLS_FIELDS: usize = 2 + 10 + 5 + 6 + 11;
const FIELDS: usize = SCALARS + DropReason::COUNT + TLS_FIELDS;

/// The published copy of one engine's [`Counters`].
#[derive(Debug)]
pub struct SharedCounters {
    slots: CachePadded<[AtomicU64; FIELDS]>,
    /// Per-VIP counters by slot, and how many slots are published.
    vips: Box<[AtomicU64]>,
    vip_slots: AtomicU64,
}

impl Default for SharedCounters {
    fn default() -> Self {
        Self {
            slots: CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))),
            vips: (0..crate::snapshot::MAX_VIPS * VIP_FIELDS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            vip_slots: AtomicU64::new(0),
        }
    }
}

impl SharedCounters {
    /// Publishes `c` (called by the owning engine only).
    pub fn publish(&self, c: &Counters) {
        let vals = Self::flatten(c);
        for (slot, v) in self.slots.iter().zip(vals) {
            slot.store(v, Ordering::Relaxed);
        }
    }

    /// Publishes the per-VIP counters (slots `0..vips.len()`).
    pub fn publish_vips(&self, vips: &[VipCounters]) {
        for (v, slots) in vips.iter().zip(self.vips.chunks(VIP_FIELDS)) {
            let vals = [
                v.connections,
                v.active,
                v.tls_handshakes,
                v.tls_failures,
                v.proxy_no_member,
            ];
            for (slot, x) in slots.iter().zip(vals) {
                slot.store(x, Ordering::Relaxed);
            }
        }
        self.vip_slots.store(vips.len() as u64, Ordering::Release);
    }

    /// The last published per-VIP counters, by slot.
    pub fn read_vips(&self) -> Vec<VipCounters> {
        let n = self.vip_slots.load(Ordering::Acquire) as usize;
        self.vips
            .chunks(VIP_FIELDS)
            .take(n)
            .map(|s| {
                let v = |i: usize| s[i].load(Ordering::Relaxed);
                VipCounters {
                    connections: v(0),
                    active: v(1),
                    tls_handshakes: v(2),
                    tls_failures: v(3),
                    proxy_no_member: v(4),
                }
            })
            .collect()
    }

    /// The last published counters.
    pub fn read(&self) -> Counters {
        let mut v = [0u64; FIELDS];
        for (d, slot) in v.iter_mut().zip(self.slots.iter()) {
            *d = slot.load(Ordering::Relaxed);
        }
        let mut c = Counters {
            rx_packets: v[0],
            rx_bytes: v[1],
            tx_packets: v[2],
            tx_bytes: v[3],
            arp_replies: v[4],
            arp_requests: v[5],
            icmp_echo_replies: v[6],
            busy_cycles: v[7],
            idle_cycles: v[8],
            loops: v[9],
            tcp_accepted: v[10],
            tcp_active: v[11],
            tcp_retransmits: v[12],
            tcp_resets_sent: v[13],
            tcp_timeouts: v[14],
            http_requests: v[15],
            tcp_syn_cookies_sent: v[16],
            tcp_syn_cookies_accepted: v[17],
            tls_handshakes: v[18],
            tls_failures: v[19],
            tls_resumed: v[20],
            tls_key_updates: v[21],
            tls_renegotiations_refused: v[22],
            tls_handshakes_deferred: v[23],
            proxy_backend_connects: v[24],
            proxy_backend_failures: v[25],
            proxy_no_member: v[26],
            health_checks: v[27],
            health_failures: v[28],
            health_changes: v[29],
            tcp_time_wait: v[30],
            snapshot_version: v[31],
            frames_steered: v[32],
            tls_abandoned: v[33],
            ..Counters::default()
        };
        let d = SCALARS + DropReason::COUNT;
        c.drops.copy_from_slice(&v[SCALARS..d]);
        c.tls_versions.copy_from_slice(&v[d..d + 2]);
        c.tls_suites.copy_from_slice(&v[d + 2..d + 12]);
        c.tls_groups.copy_from_slice(&v[d + 12..d + 17]);
        c.tls_key_types.copy_from_slice(&v[d + 17..d + 23]);
        c.tls_failure_reasons.copy_from_slice(&v[d + 23..d + 34]);
        c
    }

    fn flatten(c: &Counters) -> [u64; FIELDS] {
        let mut v = [0u64; FIELDS];
        v[..SCALARS].copy_from_slice(&[
            c.rx_packets,
            c.rx_bytes,
            c.tx_packets,
            c.tx_bytes,
            c.arp_replies,
            c.arp_requests,
            c.icmp_echo_replies,
            c.busy_cycles,
            c.idle_cycles,
            c.loops,
            c.tcp_accepted,
            c.tcp_active,
            c.tcp_retransmits,
            c.tcp_resets_sent,
            c.tcp_timeouts,
            c.http_requests,
            c.tcp_syn_cookies_sent,
            c.tcp_syn_cookies_accepted,
            c.tls_handshakes,
            c.tls_failures,
            c.tls_resumed,
            c.tls_key_updates,
            c.tls_renegotiations_refused,
            c.tls_handshakes_deferred,
            c.proxy_backend_connects,
            c.proxy_backend_failures,
            c.proxy_no_member,
            c.health_checks,
            c.health_failures,
            c.health_changes,
            c.tcp_time_wait,
            c.snapshot_version,
            c.frames_steered,
            c.tls_abandoned,
        ]);
        let d = SCALARS + DropReason::COUNT;
        v[SCALARS..d].copy_from_slice(&c.drops);
        v[d..d + 2].copy_from_slice(&c.tls_versions);
        v[d + 2..d + 12].copy_from_slice(&c.tls_suites);
        v[d + 12..d + 17].copy_from_slice(&c.tls_groups);
        v[d + 17..d + 23].copy_from_slice(&c.tls_key_types);
        v[d + 23..d + 34].copy_from_slice(&c.tls_failure_reasons);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_read_round_trip() {
        let mut c = Counters {
            rx_packets: 1,
            rx_bytes: 2,
            tx_packets: 3,
            tx_bytes: 4,
            arp_replies: 5,
            arp_requests: 6,
            icmp_echo_replies: 7,
            busy_cycles: 8,
            idle_cycles: 9,
            loops: 10,
            tcp_accepted: 11,
            tcp_active: 12,
            tcp_retransmits: 13,
            tcp_resets_sent: 14,
            tcp_timeouts: 15,
            http_requests: 16,
            tcp_syn_cookies_sent: 17,
            tcp_syn_cookies_accepted: 18,
            tls_handshakes: 19,
            tls_failures: 20,
            tls_resumed: 21,
            tls_key_updates: 22,
            tls_renegotiations_refused: 23,
            tls_handshakes_deferred: 24,
            proxy_backend_connects: 25,
            proxy_backend_failures: 26,
            proxy_no_member: 27,
            health_checks: 28,
            health_failures: 29,
            health_changes: 30,
            tcp_time_wait: 31,
            ..Default::default()
        };
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "ALL is in discriminant order");
            c.drops[i] = 100 + i as u64;
        }
        c.tls_versions = [201, 202];
        c.tls_suites[9] = 309;
        c.tls_groups[4] = 404;
        c.tls_key_types = [501, 502, 503, 504, 505, 506];
        c.tls_failure_reasons[10] = 610;
        c.tls_failure_reasons[0] = 600;
        let s = SharedCounters::default();
        s.publish(&c);
        assert_eq!(s.read(), c);
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = DropReason::ALL.iter().map(|r| r.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DropReason::COUNT);
    }
}
