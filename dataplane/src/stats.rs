//! Per-core counters. The engine counts in plain integers and publishes them
//! to a cache-padded block of atomics (single writer, relaxed stores) that
//! the control thread reads; nothing on the packet path does an atomic
//! read-modify-write or touches another core's lines.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use control::api::CoreStats;
use control::counters;
use crossbeam_utils::CachePadded;

pub use control::api::VipCounters;

/// Most VIPs a `dpd` can have had (slots of per-VIP counters are not
/// reused while it runs).
pub const MAX_VIPS: usize = 256;

/// Fields of [`VipCounters`].
const VIP_FIELDS: usize = counters::VIP_COUNT;

/// Why a received frame was dropped, or a frame to send was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum DropReason {
    /// Too short or inconsistent for its protocol.
    Malformed,
    /// Addressed to another host (MAC or IP).
    NotForUs,
    /// An EtherType we do not handle (802.1ad stacked tags, ..., and IPv6
    /// on a port without IPv6 addresses).
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
    /// A SYN dropped: the half-open, connection or buffer-memory limit
    /// was reached.
    ListenOverflow,
    /// Software RSS: another engine's inbox was full.
    SteerFull,
    /// A SYN refused by its VIP's limits (connection cap or per-source
    /// rate), answered by RST.
    ListenRefused,
    /// A segment too long for the buffer or the port it was to go out on.
    Oversize,
    /// A frame the device refused to send or failed to deliver to us
    /// (its driver's error count).
    PortError,
    /// An IPv6 extension header we do not take (unknown, an option that
    /// says discard, a routing header asking us to forward, too many).
    BadExtensionHeader,
    /// An 802.1Q tag for a VLAN the port is not configured with.
    UnknownVlan,
    /// From a denied source (`[access] deny`) to no connection, or a SYN
    /// from a network its VIP does not allow: unanswered.
    SourceDenied,
    /// From an address no host sends from (loopback, broadcast,
    /// multicast, unspecified, reserved, the subnet's broadcast, one of
    /// ours: RFC 1122 §3.2.1.3), or source-routed (RFC 7126 §4.3).
    BadSource,
}

impl From<crate::tcp::SegmentDrop> for DropReason {
    fn from(d: crate::tcp::SegmentDrop) -> Self {
        use crate::tcp::SegmentDrop;
        match d {
            SegmentDrop::Malformed => Self::Malformed,
            SegmentDrop::BadChecksum => Self::BadTcpChecksum,
            SegmentDrop::NoConnection => Self::NoConnection,
            SegmentDrop::ListenOverflow => Self::ListenOverflow,
            SegmentDrop::Refused => Self::ListenRefused,
            SegmentDrop::Denied => Self::SourceDenied,
        }
    }
}

impl DropReason {
    pub const COUNT: usize = 23;
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
        Self::ListenRefused,
        Self::Oversize,
        Self::PortError,
        Self::BadExtensionHeader,
        Self::UnknownVlan,
        Self::SourceDenied,
        Self::BadSource,
    ];

    /// A stable snake_case name (used in stats output and metrics).
    #[must_use]
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
            Self::ListenRefused => "listen_refused",
            Self::Oversize => "oversize",
            Self::PortError => "port_error",
            Self::BadExtensionHeader => "bad_extension_header",
            Self::UnknownVlan => "unknown_vlan",
            Self::SourceDenied => "source_denied",
            Self::BadSource => "bad_source",
        }
    }
}

macro_rules! engine_counters {
    ($($f:ident: $kind:ident, $metric:literal, $help:literal;)*) => {
        /// One engine's counters: the scalars declared in
        /// [`control::counters`], and the labelled ones.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct Counters {
            $(#[doc = $help] pub $f: u64,)*
            /// Handshakes by version, suite and group (indices of
            /// `crypto::session::{VERSIONS, SUITES, GROUPS}`).
            pub tls_versions: [u64; crypto::session::VERSIONS.len()],
            pub tls_suites: [u64; crypto::session::SUITES.len()],
            pub tls_groups: [u64; crypto::session::GROUPS.len()],
            /// Handshakes by certificate key type (`crypto::session::KEY_TYPES`).
            pub tls_key_types: [u64; crypto::session::KEY_TYPES.len()],
            /// Failures by reason (`crypto::session::FAILURES`).
            pub tls_failure_reasons: [u64; crypto::session::FAILURES.len()],
            /// Dropped frames by reason ([`DropReason`]).
            pub drops: [u64; DropReason::COUNT],
        }

        impl Counters {
            /// The scalar counters, in declaration order.
            pub fn scalars(&self) -> [u64; counters::COUNT] {
                [$(self.$f),*]
            }

            /// Sets the scalar counters from `v` (declaration order).
            pub fn set_scalars(&mut self, v: &[u64; counters::COUNT]) {
                let mut v = v.iter().copied();
                $(self.$f = v.next().unwrap_or_default();)*
            }

            /// Converts to the API's shape (labels by name, zeros left out
            /// but for drops).
            pub fn to_api(&self, lcore: Option<u32>) -> CoreStats {
                CoreStats {
                    lcore,
                    $($f: self.$f,)*
                    tls_versions: named(&crypto::session::VERSIONS, &self.tls_versions),
                    tls_suites: named(&crypto::session::SUITES, &self.tls_suites),
                    tls_groups: named(&crypto::session::GROUPS, &self.tls_groups),
                    tls_key_types: named(&crypto::session::KEY_TYPES, &self.tls_key_types),
                    tls_failure_reasons: named(&crypto::session::FAILURES, &self.tls_failure_reasons),
                    vips: BTreeMap::new(),
                    drops: DropReason::ALL
                        .iter()
                        .map(|r| (r.name().to_string(), self.dropped(*r)))
                        .collect(),
                }
            }
        }
    };
}
control::with_counters!(engine_counters);

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

    /// Adds another engine's counters (for totals over cores; a version
    /// is the newest, see [`counters::Kind::combine`]).
    pub fn add(&mut self, o: &Counters) {
        let mut sum = self.scalars();
        for ((d, s), info) in sum.iter_mut().zip(o.scalars()).zip(counters::SCALARS) {
            *d = info.kind.combine(*d, s);
        }
        self.set_scalars(&sum);
        for (d, s) in self.labelled_mut().into_iter().zip(o.labelled()) {
            for (d, s) in d.iter_mut().zip(s) {
                *d += s;
            }
        }
    }

    /// The labelled counters, in publication order.
    fn labelled(&self) -> [&[u64]; 6] {
        [
            &self.drops,
            &self.tls_versions,
            &self.tls_suites,
            &self.tls_groups,
            &self.tls_key_types,
            &self.tls_failure_reasons,
        ]
    }

    fn labelled_mut(&mut self) -> [&mut [u64]; 6] {
        [
            &mut self.drops,
            &mut self.tls_versions,
            &mut self.tls_suites,
            &mut self.tls_groups,
            &mut self.tls_key_types,
            &mut self.tls_failure_reasons,
        ]
    }
}

/// Non-zero counts by name.
fn named(names: &[&str], counts: &[u64]) -> BTreeMap<String, u64> {
    names
        .iter()
        .zip(counts)
        .filter(|(_, &n)| n > 0)
        .map(|(k, &n)| (k.to_string(), n))
        .collect()
}

/// The labelled TLS counters' fields, from the name lists they index.
const TLS_FIELDS: usize = {
    use crypto::session::{FAILURES, GROUPS, KEY_TYPES, SUITES, VERSIONS};
    VERSIONS.len() + SUITES.len() + GROUPS.len() + KEY_TYPES.len() + FAILURES.len()
};
const FIELDS: usize = counters::COUNT + DropReason::COUNT + TLS_FIELDS;

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
            vips: (0..MAX_VIPS * VIP_FIELDS)
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
            for (slot, x) in slots.iter().zip(v.scalars()) {
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
                let vals: [u64; VIP_FIELDS] =
                    std::array::from_fn(|i| s.get(i).map_or(0, |a| a.load(Ordering::Relaxed)));
                let mut v = VipCounters::default();
                v.set_scalars(&vals);
                v
            })
            .collect()
    }

    /// The last published counters.
    pub fn read(&self) -> Counters {
        let mut v = [0u64; FIELDS];
        for (d, slot) in v.iter_mut().zip(self.slots.iter()) {
            *d = slot.load(Ordering::Relaxed);
        }
        let mut c = Counters::default();
        let (scalars, mut rest) = v.split_at(counters::COUNT);
        if let Ok(scalars) = scalars.try_into() {
            c.set_scalars(scalars);
        }
        for d in c.labelled_mut() {
            let (mine, next) = rest.split_at(d.len());
            d.copy_from_slice(mine);
            rest = next;
        }
        c
    }

    fn flatten(c: &Counters) -> [u64; FIELDS] {
        let mut v = [0u64; FIELDS];
        v[..counters::COUNT].copy_from_slice(&c.scalars());
        let mut at = counters::COUNT;
        for s in c.labelled() {
            v[at..at + s.len()].copy_from_slice(s);
            at += s.len();
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counters with a value of their own in every field (none zero).
    fn distinct() -> Counters {
        let mut c = Counters::default();
        let mut scalars = [0u64; counters::COUNT];
        for (i, v) in scalars.iter_mut().enumerate() {
            *v = 1_000 + i as u64;
        }
        c.set_scalars(&scalars);
        let mut n = 5_000;
        for a in c.labelled_mut() {
            for v in a {
                *v = n;
                n += 1;
            }
        }
        c
    }

    #[test]
    fn publish_read_round_trip() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "ALL is in discriminant order");
        }
        let c = distinct();
        let s = SharedCounters::default();
        s.publish(&c);
        assert_eq!(s.read(), c);
    }

    /// Every declared counter reaches every view with its own value: the
    /// published copy, the API type (and its JSON), the Prometheus text.
    #[test]
    fn every_counter_reaches_every_view() {
        let c = distinct();
        let s = SharedCounters::default();
        s.publish(&c);
        let mut vip = VipCounters::default();
        let values: Vec<u64> = (0..counters::VIP_COUNT as u64).map(|i| 7_000 + i).collect();
        vip.set_scalars(&values);
        s.publish_vips(&[VipCounters::default(), vip]);
        assert_eq!(s.read_vips(), vec![VipCounters::default(), vip]);
        let mut api = s.read().to_api(Some(1));
        api.vips.insert("web".into(), vip);
        assert_eq!(api.scalars(), c.scalars());
        let json: serde_json::Value = serde_json::to_value(&api).unwrap();
        for (info, v) in counters::SCALARS.iter().zip(c.scalars()) {
            assert_eq!(json[info.field].as_u64(), Some(v), "{} in JSON", info.field);
        }
        assert_eq!(api.drops.len(), DropReason::COUNT);
        assert_eq!(
            api.tls_failure_reasons.len(),
            crypto::session::FAILURES.len()
        );
        let hz = 1_000;
        let text = control::metrics::render(
            &control::api::Stats {
                cores: vec![api.clone()],
                total: api,
                tsc_hz: hz,
            },
            &control::metrics::ConfigState::default(),
        );
        for (info, v) in counters::SCALARS.iter().zip(c.scalars()) {
            let value = match info.kind {
                counters::Kind::Cycles => format!("{}", v as f64 / hz as f64),
                _ => v.to_string(),
            };
            let sample = format!("{}{{core=\"1\"}} {value}\n", info.metric);
            assert!(text.contains(&sample), "{sample:?} in the metrics");
            assert!(text.contains(&format!("# HELP {} {}\n", info.metric, info.help)));
        }
        for (info, v) in counters::VIP_SCALARS.iter().zip(&values) {
            let sample = format!("{}{{core=\"1\",vip=\"web\"}} {v}\n", info.metric);
            assert!(text.contains(&sample), "{sample:?} in the metrics");
            assert_eq!(json["vips"]["web"][info.field].as_u64(), Some(*v));
        }
    }

    #[test]
    fn totals_sum_but_take_the_newest_version() {
        let mut a = distinct();
        let b = distinct();
        a.add(&b);
        assert_eq!(a.rx_packets, 2 * b.rx_packets);
        assert_eq!(a.config_version, b.config_version);
        assert_eq!(a.drops[0], 2 * b.drops[0]);
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = DropReason::ALL.iter().map(|r| r.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DropReason::COUNT);
    }
}
