//! The control API: JSON lines over `dpd`'s Unix socket.
//!
//! Each request is one JSON object on one line, `{"cmd": "status"}`; each
//! reply is one JSON object on one line, `{"ok": true, "api": 1, ...}` or
//! `{"ok": false, "api": 1, "error": "..."}`. A malformed request gets an
//! error reply and the connection stays open. `docs/control-api.md` lists
//! the commands.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{Member, NamedCert, Pool, Vip};

/// Version of the request and reply shapes; bumped on incompatible change.
pub const API_VERSION: u32 = 1;

/// Longest request line accepted.
pub const MAX_REQUEST: usize = 64 * 1024;

/// A request. Changes (`vip_add` ... `member_enable`) are applied to a copy
/// of the running configuration, validated as a whole, and pushed to every
/// engine as one snapshot; the reply comes once all engines use it
/// ([`Body::Applied`]), or says why the change was refused (nothing
/// changed then).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Version, uptime, cores, ports and hugepages.
    Status,
    /// Counters per core and in total.
    Stats,
    /// Takes the node out of service: with `[routing]`, its VIPs are
    /// withdrawn first and listeners stop taking connections once the
    /// routers have stopped sending new flows (or at once without
    /// `[routing]`); existing connections go on. The reply says where the
    /// drain stands; asked again, it only reports.
    Drain,
    /// Back in service: listeners take connections and VIPs are announced
    /// again.
    Undrain,
    VipList,
    VipShow {
        name: String,
    },
    /// A new VIP (`[[vip]]` as in the configuration file).
    VipAdd {
        vip: Vip,
    },
    /// Changes a VIP in place (certificates, pool, TLS policy): new
    /// connections get the change, open ones keep what they started with.
    VipSet {
        name: String,
        change: VipChange,
    },
    /// Stops taking connections on the VIP; open ones go on.
    VipRemove {
        name: String,
    },
    VipEnable {
        name: String,
    },
    /// As remove, but the VIP stays configured (`enabled = false`).
    VipDisable {
        name: String,
    },
    CertList,
    CertShow {
        name: String,
    },
    /// A new named certificate (files read by `dpd`).
    CertAdd {
        cert: NamedCert,
    },
    /// New chain and key under an existing name: handshakes that started
    /// before keep the old one, new ones get the new one.
    CertRotate {
        cert: NamedCert,
    },
    CertRemove {
        name: String,
    },
    PoolList,
    PoolShow {
        name: String,
    },
    PoolAdd {
        pool: Pool,
    },
    PoolRemove {
        name: String,
    },
    MemberAdd {
        pool: String,
        member: Member,
    },
    /// Takes the member out; connections to it go on.
    MemberRemove {
        pool: String,
        addr: String,
    },
    MemberWeight {
        pool: String,
        addr: String,
        weight: u32,
    },
    /// No new connections to the member; open ones go on.
    MemberDrain {
        pool: String,
        addr: String,
    },
    /// Back to `up`.
    MemberEnable {
        pool: String,
        addr: String,
    },
    /// Session-ticket keys built again on every VIP with tickets: a key
    /// file is read again (rewritten, its tickets issued before no longer
    /// resume); a random secret is drawn again (none issued before
    /// resumes).
    TicketsRotate,
    /// The running configuration as TOML.
    ConfigShow,
    /// Writes the running configuration as TOML to `path` (default: the
    /// file `dpd` was started with).
    ConfigSave {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<PathBuf>,
    },
    /// Reads the file `dpd` was started with again and applies it as one
    /// change (what SIGHUP does): VIPs, certificates (every one loaded
    /// again from its files, so certificates renewed in place are taken),
    /// ticket key files, pools, `[access]` and `[log]` (level, format, the
    /// connection log's file). Refused, with nothing changed, when the
    /// file is invalid or changes what only a restart applies (`[eal]`,
    /// ports, `[tcp]`, `[control]`, `[routing]`). Run-time changes not
    /// saved are undone; the reply names what changed.
    ConfigReload,
    /// Opens the connection log's file (`[log] connections`) again, by its
    /// name, and writes on there (logrotate's `postrotate`; SIGUSR1 does
    /// the same). Nothing else is read again or changed.
    LogReopen,
    /// Replaces `[log] level` (a level, or a filter such as
    /// `info,dataplane::proxy=debug`) in the running configuration and in
    /// the logger at once: no restart, no connection touched. `RUST_LOG`'s
    /// filter, if `dpd` started with one, is replaced too.
    LogLevel {
        level: String,
    },
    /// Refuses these client networks (`[access] deny`) on every VIP:
    /// their SYNs are dropped and their open connections reset. With
    /// `for_s` (1 s to a year), for that long (`[access] deny_until`): a
    /// network denied for a time already gets the new time, one denied
    /// until taken off stays so. Without, until taken off (one denied for
    /// a time is kept for good).
    DenyAdd {
        prefixes: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        for_s: Option<u64>,
    },
    /// Takes these networks off `[access] deny` or `deny_until` (each
    /// must be on one).
    DenyRemove {
        prefixes: Vec<String>,
    },
    /// Answers [`Body::Deny`].
    DenyList,
    /// Answers [`Body::Sources`]: the `count` client addresses (IPv6:
    /// /64 networks) with the most connections open, on VIP `vip` only
    /// when given. With `refused`, [`Body::Refused`] instead: the ones
    /// the VIPs' limits (and deny lists) refused most in the last one to
    /// two minutes.
    Sources {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vip: Option<String>,
        #[serde(default = "default_sources")]
        count: u32,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        refused: bool,
    },
    /// Answers [`Body::Conns`]: the `count` oldest client connections
    /// open now (TIME-WAIT not); when given, to VIP `vip`, from network
    /// `source`, in TCP state `state` (`ESTABLISHED`, `SYN-RECEIVED`,
    /// `CLOSE-WAIT`, ...) and with nothing from the client for
    /// `idle_over_s` seconds at least, only.
    ConnList {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vip: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idle_over_s: Option<u64>,
        #[serde(default = "default_conns")]
        count: u32,
    },
    /// Resets the client connections open now that `vip`, `source`,
    /// `state` and `idle_over_s` pick, as for [`Request::ConnList`] (one
    /// at least given); answers [`Body::Reset`].
    /// Nothing is refused after: `deny add` for that.
    ConnReset {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vip: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idle_over_s: Option<u64>,
    },
    /// Writes up to `count` frames received or sent on dataplane port
    /// `port` (by name) to `file` (pcap), waiting at most `timeout_ms`.
    Capture {
        port: String,
        count: u32,
        #[serde(default = "default_capture_timeout")]
        timeout_ms: u32,
        file: PathBuf,
    },
}

fn default_capture_timeout() -> u32 {
    10_000
}

/// A successful reply's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Body {
    Status(Box<Status>),
    Stats(Box<Stats>),
    Drain(DrainState),
    /// A change is in use by every engine.
    Applied(Applied),
    Vips(Vec<VipInfo>),
    Certs(Vec<CertInfo>),
    Pools(Vec<PoolInfo>),
    /// The running configuration (TOML).
    Config(String),
    /// Where `config save` wrote it.
    Saved(PathBuf),
    /// The connection log's file `log reopen` opened again.
    Reopened(PathBuf),
    Captured(Captured),
    Deny(DenyInfo),
    Conns(Vec<ConnInfo>),
    Refused(Vec<RefusedInfo>),
    Reset(ResetInfo),
    Sources(Vec<SourceInfo>),
}

/// [`Request::Sources`]'s count when none is given.
pub const DEFAULT_SOURCES: u32 = 20;
/// Most sources one [`Request::Sources`] answers with.
pub const MAX_SOURCES: u32 = 10_000;

fn default_sources() -> u32 {
    DEFAULT_SOURCES
}

/// `conn list`'s rows when no `count` is given.
pub const DEFAULT_CONNS: u32 = 50;
/// Most rows `conn list` gives.
pub const MAX_CONNS: u32 = 10_000;

fn default_conns() -> u32 {
    DEFAULT_CONNS
}

/// A client connection open now (`dpctl conn list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnInfo {
    /// The client's address and port.
    pub client: String,
    /// The address and port it connected to.
    pub local: String,
    /// The VIP listening there ("" if none is now).
    pub vip: String,
    /// The engine (core index) that holds it.
    pub engine: usize,
    /// Its TCP state, as RFC 9293 names it (`ESTABLISHED`, `FIN-WAIT-1`).
    pub state: String,
    /// What serves it: `http` (the built-in responder), `tls` (TLS, then
    /// the responder), `proxy` (to a pool), `tls-proxy`.
    pub role: String,
    /// What it waits for of the client: `handshake`, `request`, or ""
    /// (nothing: an answer, or the backend, is on its way).
    pub waits_for: String,
    /// Proxied: the backend (pool member) its requests go to, once a
    /// connection to it is opened.
    pub backend: Option<String>,
    /// Proxied: bytes passed from the client to the backend, and back.
    pub to_backend: u64,
    pub to_client: u64,
    /// Since its SYN (or its SYN cookie's ACK).
    pub age_ms: u64,
    /// Since a segment last came from the client.
    pub idle_ms: u64,
    /// Bytes waiting in its send buffer (sent and not acknowledged, or
    /// not sent yet).
    pub send_queue: u32,
    /// Bytes received that the application has not taken yet.
    pub recv_queue: u32,
    /// The window the client offers, in bytes: 0 while it reads nothing.
    pub peer_window: u32,
    /// Smoothed round-trip time, once measured.
    pub rtt_us: Option<u64>,
    /// Congestion window, in bytes.
    pub cwnd: u32,
    /// Retransmission timeouts in a row with nothing acknowledged.
    pub retries: u8,
}

/// What `conn reset` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetInfo {
    /// Connections reset, summed over the engines.
    pub connections: u64,
}

/// A client address (or IPv6 /64) refused at a VIP lately, summed over the
/// engines (`dpctl sources --refused`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedInfo {
    /// An address, or an IPv6 network as `2001:db8:1:2::/64`.
    pub source: String,
    /// The VIP ("" for a listener without one).
    pub vip: String,
    /// All its refusals in the last one to two minutes: the sum of the
    /// four below (counted from when the engine's table took the source).
    pub refused: u64,
    /// SYNs reset for the VIP's `max_connections`.
    pub conn_limit: u64,
    /// SYNs or handshakes reset for its `max_new_per_source`.
    pub source_rate: u64,
    /// SYNs or handshakes reset for its `max_connections_per_source`.
    pub source_conns: u64,
    /// SYNs dropped: the source is denied, or not on the VIP's `allow`.
    pub denied: u64,
}

/// A client address (or IPv6 /64) and its connections open now, summed
/// over the engines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceInfo {
    /// An address, or an IPv6 network as `2001:db8:1:2::/64`.
    pub source: String,
    /// Past the TCP handshake (closing ones too; TIME-WAIT not counted).
    pub established: u64,
    /// SYN-RECEIVED.
    pub half_open: u64,
}

/// `[access] deny` and what it refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DenyInfo {
    /// The networks denied until taken off, as in the configuration.
    pub prefixes: Vec<String>,
    /// The networks denied for a time (`[access] deny_until`), soonest
    /// due first.
    #[serde(default)]
    pub temporary: Vec<TemporaryDeny>,
    /// SYNs dropped for their source, ever (all VIPs).
    pub refused: u64,
    /// Open connections reset when their source was denied, ever.
    pub reset: u64,
}

/// A network denied until a time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemporaryDeny {
    pub prefix: String,
    /// When it is taken off (RFC 3339, UTC).
    pub until: String,
    /// Seconds left, rounded up.
    pub left_s: u64,
}

/// The reply to a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// Number of the configuration snapshot now in use (1 at start).
    pub version: u64,
    /// What changed, in words.
    pub change: String,
}

/// A VIP: its configuration and counters summed over the engines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VipInfo {
    pub name: String,
    pub listen: String,
    pub enabled: bool,
    /// Certificate names (empty: plain TCP).
    pub certs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The `[vip.tls]` policy, when one is set (else the defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::config::TlsSettings>,
    /// Its routes by SNI to other pools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<crate::config::Route>,
    /// The only client networks it takes (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Its deadlines and limits in effect.
    #[serde(default)]
    pub limits: VipLimits,
    pub counters: VipCounters,
}

/// A VIP's deadlines and limits as they apply (defaults filled in).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VipLimits {
    pub handshake_timeout_ms: u32,
    pub request_timeout_ms: u32,
    pub send_timeout_ms: u32,
    /// `[tcp] idle_timeout_s` where the VIP sets none.
    pub idle_timeout_s: u32,
    /// `None`: no limit.
    pub max_connections: Option<u32>,
    pub max_new_per_source: Option<u32>,
    pub max_connections_per_source: Option<u32>,
}

/// What `vip set` changes on a VIP; what is absent stays as it is. TLS
/// fields change that one part of the policy (`[vip.tls]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VipChange {
    /// Certificates by `[[cert]]` name, the first the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certs: Option<Vec<String>>,
    /// Forward to this pool from now on ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// ... or answer with the built-in responder.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub builtin: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_versions: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_suites: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_groups: Option<Vec<String>>,
    /// ALPN protocols (`[]`: ALPN off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpn: Option<Vec<String>>,
    /// Session tickets: on with these settings, or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tickets: Option<TicketsChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefer_client_order: Option<bool>,
    /// [`Vip::routes`], replacing the VIP's (`[]`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routes: Option<Vec<crate::config::Route>>,
    /// [`Vip::allow`], replacing the VIP's (`[]`: any client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// [`Vip::handshake_timeout_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake_timeout_ms: Option<u32>,
    /// [`Vip::request_timeout_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout_ms: Option<u32>,
    /// [`Vip::send_timeout_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_timeout_ms: Option<u32>,
    /// [`Vip::idle_timeout_s`]; `null` goes back to `[tcp] idle_timeout_s`.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_timeout_s: Option<Option<u32>>,
    /// [`Vip::max_connections`]; `null` takes the cap away.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_connections: Option<Option<u32>>,
    /// [`Vip::max_new_per_source`]; `null` takes the limit away.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_new_per_source: Option<Option<u32>>,
    /// [`Vip::max_connections_per_source`]; `null` takes the cap away.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_connections_per_source: Option<Option<u32>>,
}

/// A field that is present, `null` included (`Some(None)`); an absent one
/// is `None` through `#[serde(default)]`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// Session tickets in a [`VipChange`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TicketsChange {
    Off,
    On(crate::config::TicketSettings),
}

impl VipChange {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

macro_rules! vip_counters {
    ($($f:ident: $kind:ident, $metric:literal, $help:literal;)*) => {
        /// Counters of one VIP, declared in [`crate::counters`].
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct VipCounters {
            $(#[doc = $help] #[serde(default)] pub $f: u64,)*
        }

        impl VipCounters {
            pub fn add(&mut self, o: &VipCounters) {
                $(self.$f = crate::counters::Kind::$kind.combine(self.$f, o.$f);)*
            }

            /// The counters, in declaration order
            /// ([`crate::counters::VIP_SCALARS`]).
            pub fn scalars(&self) -> [u64; crate::counters::VIP_COUNT] {
                [$(self.$f),*]
            }

            /// Sets the counters from `v` (declaration order).
            pub fn set_scalars(&mut self, v: &[u64]) {
                let mut v = v.iter().copied();
                $(self.$f = v.next().unwrap_or_default();)*
            }
        }
    };
}
crate::with_vip_counters!(vip_counters);

/// A named certificate as loaded by `dpd`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertInfo {
    pub name: String,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// `RSA-2048`, `ECDSA-P256`, ...
    pub key_type: String,
    /// DNS names it serves.
    pub names: Vec<String>,
    /// Validity, Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    /// Certificates in the chain, leaf first.
    pub chain_len: usize,
    /// SHA-256 of the leaf certificate (DER), hex.
    pub sha256: String,
    /// VIPs serving it.
    pub used_by: Vec<String>,
}

/// A pool: its configuration and its members as the engines see them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolInfo {
    pub name: String,
    pub balance: String,
    /// `http GET / expects 200-399 every 1000 ms`, or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    pub proxy_protocol: bool,
    pub members: Vec<MemberInfo>,
    /// VIPs forwarding to it.
    pub used_by: Vec<String>,
}

/// A pool member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberInfo {
    pub addr: String,
    pub weight: u32,
    /// `up`, `drain` or `down` (administrative).
    pub state: String,
    /// Engines whose health checks find it up, out of `engines`.
    pub healthy_engines: u32,
    pub engines: u32,
    /// Backend connections open to it (all engines).
    pub active: u64,
    /// Why its last failed health check failed (`status 503`, `timed
    /// out`, ...), as the engine that checks it saw it; none when no
    /// check of it has failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
}

/// The reply to `capture`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Captured {
    pub file: PathBuf,
    pub packets: u32,
}

/// The reply to `drain` and `undrain`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrainState {
    /// Connections still open (not counting TIME-WAIT).
    pub open_connections: u64,
    /// `serving`, `withdrawn` (VIPs withdrawn, waiting for new flows to
    /// stop), `draining` (no new connections; open ones finishing) or
    /// `drained` (none open, or `drain_timeout_s` passed).
    #[serde(default)]
    pub phase: String,
    /// Seconds since the drain began (0 while serving).
    #[serde(default)]
    pub for_s: f64,
}

/// Route announcement in `status` (`[routing]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutingStatus {
    /// The announce interface.
    pub interface: String,
    /// VIP addresses on it now (announced).
    pub announced: Vec<String>,
    /// VIPs configured but not announced, each with why
    /// (`"web: disabled"`, `"api: no healthy member in pool app"`).
    pub withheld: Vec<String>,
    /// What went wrong last setting the interface's addresses, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The reply to `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub dpdk: String,
    pub pid: u32,
    pub uptime_s: f64,
    /// Dataplane cores.
    pub lcores: Vec<u32>,
    pub ports: Vec<PortStatus>,
    /// Hugepage pools as `dpd` found them at start.
    pub hugepages: Vec<String>,
    /// Whether DPDK's memory is on hugepages.
    pub hugepages_in_use: bool,
    /// Version of the configuration all engines use (1 at start, one up
    /// per applied change).
    #[serde(default)]
    pub config_version: u64,
    /// Where a drain stands (`serving` when none was asked for).
    #[serde(default)]
    pub drain: Option<DrainState>,
    /// Route announcement, with `[routing]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingStatus>,
    /// The last reload of the file (SIGHUP, `config reload`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reload: Option<ReloadStatus>,
    /// The log filter in effect (`[log] level`, `RUST_LOG`'s at start, or
    /// the last `log level`); empty where `dpd`'s logger is not installed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub log_level: String,
    /// The connection log (`[log] connections`), while it is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conn_log: Option<ConnLogStatus>,
    /// Addresses of removed VIPs still dpd's (ARP, ND, their segments)
    /// while connections to them are open.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lingering: Vec<String>,
}

/// The connection log's file and what went into it, in `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnLogStatus {
    pub file: PathBuf,
    /// Lines written since dpd started (to every file it logged to).
    pub written: u64,
    /// Connections not logged: their engine's queue was full (summed over
    /// engines), or writing to the file failed.
    pub dropped: u64,
    pub write_failed: u64,
    /// The last write error, while writes fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The only ends logged (`[log] connection_ends`); absent: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends: Option<Vec<crate::config::ConnEnd>>,
}

/// How the last reload of the configuration file went, in `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReloadStatus {
    /// Whether it applied.
    pub ok: bool,
    /// Seconds since.
    pub ago_s: f64,
    /// What it did (`reloaded from FILE`) or why it did not.
    pub message: String,
}

/// One VLAN of a port in `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VlanStatus {
    pub id: u16,
    /// The IPv4 address with its prefix length.
    pub address: String,
    /// IPv6 addresses with prefix lengths, link-local first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ipv6: Vec<String>,
}

/// One port in `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStatus {
    pub name: String,
    pub device: String,
    pub driver: String,
    pub mac: String,
    /// The IPv4 address with its prefix length.
    pub address: String,
    /// IPv6 addresses with prefix lengths, link-local first; empty on a
    /// port without IPv6.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ipv6: Vec<String>,
    /// Its 802.1Q VLANs, each with its addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vlans: Vec<VlanStatus>,
    /// A bond's member devices (802.3ad), and how many its partner
    /// aggregates now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bond_members: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_members: Option<u16>,
    pub link_up: bool,
    pub speed_mbps: u32,
    pub queues: u16,
    pub rss: bool,
    /// Engines spread this port's flows among themselves in software (no
    /// hardware RSS over a queue per engine).
    #[serde(default)]
    pub steered: bool,
    /// Checksum work the device does for this port.
    #[serde(default)]
    pub checksum_offload: ChecksumOffloads,
    /// The device cuts TCP segments of many MSS (TSO): the largest frame
    /// it takes, 0 when it does not.
    #[serde(default)]
    pub segmentation_max_frame: u32,
    /// The link's MTU (`mtu` in the port's configuration; 0 from a dpd
    /// that did not report it).
    #[serde(default)]
    pub mtu: u16,
    /// A memif client port's connection to its server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memif_client: Option<MemifClientStatus>,
    /// What the device itself counted since it started (DPDK ports; none
    /// for a port dpd runs without DPDK).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_counts: Option<DeviceCounts>,
}

/// A DPDK device's own counts since it started: frames it dropped before
/// any engine saw them show here and in no engine counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCounts {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Frames dropped because the receive queue was full (engines behind).
    pub rx_missed: u64,
    /// Frames received with errors (bad CRC, too long, ...).
    pub rx_errors: u64,
    /// Frames dropped for want of a receive buffer (mbuf).
    pub rx_no_mbuf: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Frames the device failed to send.
    pub tx_errors: u64,
}

/// How a memif client port stands with its server (dpd connects it again
/// while its link is down).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemifClientStatus {
    /// The server's socket.
    pub socket: String,
    pub zero_copy: bool,
    /// Times the link came up.
    pub connections: u64,
    /// Starts tried since the link was last up.
    pub tries: u32,
    /// Why the last start failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The checksum offloads a port uses (what the device has, unless the
/// port's `checksum_offload = false`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecksumOffloads {
    pub rx_ipv4: bool,
    pub rx_tcp: bool,
    pub tx_ipv4: bool,
    pub tx_tcp: bool,
}

impl ChecksumOffloads {
    /// `rx ipv4+tcp, tx ipv4+tcp`, `rx ipv4`, or `none`: for people.
    pub fn summary(&self) -> String {
        let side = |name: &str, ipv4: bool, tcp: bool| match (ipv4, tcp) {
            (true, true) => Some(format!("{name} ipv4+tcp")),
            (true, false) => Some(format!("{name} ipv4")),
            (false, true) => Some(format!("{name} tcp")),
            (false, false) => None,
        };
        let parts: Vec<String> = [
            side("rx", self.rx_ipv4, self.rx_tcp),
            side("tx", self.tx_ipv4, self.tx_tcp),
        ]
        .into_iter()
        .flatten()
        .collect();
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join(", ")
        }
    }
}

/// The reply to `stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub cores: Vec<CoreStats>,
    pub total: CoreStats,
    /// TSC ticks per second: busy/idle cycles divided by this are seconds.
    #[serde(default)]
    pub tsc_hz: u64,
}

impl Stats {
    /// Busy core-seconds over all engines since start.
    pub fn busy_seconds(&self) -> f64 {
        if self.tsc_hz == 0 {
            0.0
        } else {
            self.total.busy_cycles as f64 / self.tsc_hz as f64
        }
    }
}

macro_rules! core_stats {
    ($($f:ident: $kind:ident, $metric:literal, $help:literal;)*) => {
        /// Counters of one engine (or their sum, with `lcore` = None): the
        /// scalars declared in [`crate::counters`], and the labelled ones.
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct CoreStats {
            pub lcore: Option<u32>,
            $(#[doc = $help] #[serde(default)] pub $f: u64,)*
            /// Handshakes by protocol version, cipher suite and key-exchange
            /// group (names with a count above zero).
            #[serde(default)]
            pub tls_versions: BTreeMap<String, u64>,
            #[serde(default)]
            pub tls_suites: BTreeMap<String, u64>,
            #[serde(default)]
            pub tls_groups: BTreeMap<String, u64>,
            /// Handshakes by certificate key type (`RSA-2048`, `ECDSA-P256`, ...).
            #[serde(default)]
            pub tls_key_types: BTreeMap<String, u64>,
            /// Failures by reason (`protocol_version`, `decode_error`, ...).
            #[serde(default)]
            pub tls_failure_reasons: BTreeMap<String, u64>,
            /// Counters by VIP name.
            #[serde(default)]
            pub vips: BTreeMap<String, VipCounters>,
            /// Dropped frames by reason (every reason listed, zeros included).
            pub drops: BTreeMap<String, u64>,
        }

        impl CoreStats {
            /// The scalar counters, in declaration order
            /// ([`crate::counters::SCALARS`]).
            pub fn scalars(&self) -> [u64; crate::counters::COUNT] {
                [$(self.$f),*]
            }
        }
    };
}
crate::with_counters!(core_stats);

impl CoreStats {
    /// Busy share of the loop's cycles, 0.0 to 1.0.
    pub fn busy(&self) -> f64 {
        let all = self.busy_cycles + self.idle_cycles;
        if all == 0 {
            0.0
        } else {
            self.busy_cycles as f64 / all as f64
        }
    }
}

/// A reply as sent on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    pub api: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", flatten)]
    pub body: Option<Body>,
}

impl Reply {
    pub fn ok(body: Body) -> Self {
        Self {
            ok: true,
            api: API_VERSION,
            error: None,
            body: Some(body),
        }
    }

    pub fn error(msg: impl Into<String>) -> Self {
        Self {
            ok: false,
            api: API_VERSION,
            error: Some(msg.into()),
            body: None,
        }
    }
}

/// What a request handler makes of a request.
#[derive(Debug)]
pub enum Answer {
    /// The reply, now.
    Now(Reply),
    /// The reply comes later on this channel, from work done off the
    /// control thread (a capture): that client waits for it (its next
    /// requests after), every other client is served meanwhile.
    Later(mpsc::Receiver<Reply>),
}

impl From<Reply> for Answer {
    fn from(reply: Reply) -> Self {
        Self::Now(reply)
    }
}

/// How long [`Client::connect`] waits for dpd to take the connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most clients connected to the control socket at once; one more is
/// told so and closed.
pub const MAX_CONTROL_CONNS: usize = 64;
/// Longest a reply may take to go out: a client that reads it slower is
/// closed (replies go out as the client takes them, never blocking the
/// control thread).
pub const REPLY_DEADLINE: Duration = Duration::from_secs(10);
/// How long a client must have been idle (no request under way, nothing
/// sent or read) before a newcomer that finds [`MAX_CONTROL_CONNS`] open
/// may take its place: forgotten scripts and hung `socat`s cannot lock
/// the operator out.
pub const IDLE_BEFORE_EVICTION: Duration = Duration::from_secs(10);

/// The listening control socket; the file is removed on drop.
#[derive(Debug)]
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
    /// [`REPLY_DEADLINE`] (shorter in tests).
    reply_deadline: Duration,
    /// [`IDLE_BEFORE_EVICTION`] (shorter in tests).
    idle_before_eviction: Duration,
}

impl ControlSocket {
    /// Binds `path` (making its folder; replacing a stale socket left by a
    /// dead `dpd`) with mode 0600, so only its owner (root) may connect.
    ///
    /// # Errors
    /// When another process is serving on `path`, something that is not a
    /// socket is there (it is left alone), or the folder or socket cannot
    /// be made.
    pub fn bind(path: &Path) -> io::Result<Self> {
        // Every error names the path (an operator reads "Permission
        // denied" with nothing else otherwise).
        Self::bind_at(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
    }

    fn bind_at(path: &Path) -> io::Result<Self> {
        // sun_path holds 108 bytes, NUL included.
        if path.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} bytes: a Unix socket's path holds at most {MAX_SOCKET_PATH}",
                    path.as_os_str().len()
                ),
            ));
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                // A typo in [control] socket must not cost a file.
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "exists and is not a socket",
                ));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(in_use());
            }
            std::fs::remove_file(path)?;
        }
        // Bound in a folder of its own made 0700 first, then linked into
        // place with mode 0600: no moment exists in which another user could
        // connect (the mode a bind gives follows the umask). A link, not a
        // rename: a rename would replace the socket of another dpd started
        // at the same moment. The staging names are short, so the staged
        // path is no longer than the final one for most names.
        let staging = tempdir_beside(path)?;
        let staged = staging.join("s");
        if staged.as_os_str().len() > MAX_SOCKET_PATH {
            let _ = std::fs::remove_dir(&staging);
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "too long to bind beside ({} bytes staged, at most {MAX_SOCKET_PATH}): a shorter name or folder",
                    staged.as_os_str().len()
                ),
            ));
        }
        let bound = UnixListener::bind(&staged).and_then(|listener| {
            std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
            std::fs::hard_link(&staged, path).map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => in_use(),
                _ => e,
            })?;
            Ok(listener)
        });
        let _ = std::fs::remove_file(&staged);
        let _ = std::fs::remove_dir(&staging);
        let listener = bound?;
        listener.set_nonblocking(true)?;
        Ok(Self {
            listener,
            path: path.to_path_buf(),
            reply_deadline: REPLY_DEADLINE,
            idle_before_eviction: IDLE_BEFORE_EVICTION,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves connections until `stop` is set. Requests are answered one
    /// at a time, in arrival order, by `handler` (on this thread), but any
    /// number of clients may stay connected (a `dpctl stats --watch` does
    /// not hold up other commands), and a reply that comes later
    /// ([`Answer::Later`]) holds up only its own client. A malformed
    /// request gets an error reply; a request line longer than
    /// [`MAX_REQUEST`] gets one and is closed.
    pub fn serve(&self, stop: &AtomicBool, handler: impl FnMut(Request) -> Answer) {
        self.serve_ticking(stop, handler, || {});
    }

    /// As [`Self::serve`], calling `tick` between rounds (at least every
    /// few milliseconds).
    pub fn serve_ticking(
        &self,
        stop: &AtomicBool,
        mut handler: impl FnMut(Request) -> Answer,
        mut tick: impl FnMut(),
    ) {
        let mut conns: Vec<Conn> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let mut busy = false;
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    if conns.len() >= MAX_CONTROL_CONNS {
                        // The client idle longest, if idle long enough,
                        // makes room (told why, if it takes the line).
                        let now = std::time::Instant::now();
                        let idlest = (conns.iter().enumerate())
                            .filter(|(_, c)| c.idle_since(now) >= self.idle_before_eviction)
                            .min_by_key(|(_, c)| c.active)
                            .map(|(i, _)| i);
                        if let Some(i) = idlest {
                            let mut gone = conns.swap_remove(i);
                            let _ = gone.reply(&Reply::error(format!(
                                "closed: idle while {MAX_CONTROL_CONNS} control connections were open"
                            )));
                        }
                    }
                    if conns.len() >= MAX_CONTROL_CONNS {
                        // Told why, if it takes the line at once; closed.
                        let _ = stream.set_nonblocking(true);
                        let mut out = serde_json::to_vec(&Reply::error(format!(
                            "{MAX_CONTROL_CONNS} control connections open already; try again"
                        )))
                        .unwrap_or_default();
                        out.push(b'\n');
                        let _ = stream.write(&out);
                    } else if stream.set_nonblocking(true).is_ok() {
                        conns.push(Conn {
                            stream,
                            line: Vec::new(),
                            waiting: None,
                            out: Vec::new(),
                            sending_since: None,
                            reply_deadline: self.reply_deadline,
                            active: std::time::Instant::now(),
                        });
                    }
                    busy = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    eprintln!("control: accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            conns.retain_mut(|c| match c.serve(&mut handler) {
                Ok(progress) => {
                    busy |= progress;
                    true
                }
                Err(e) => {
                    if !matches!(
                        e.kind(),
                        io::ErrorKind::BrokenPipe | io::ErrorKind::UnexpectedEof
                    ) {
                        eprintln!("control: connection error: {e}");
                    }
                    false
                }
            });
            tick();
            if !busy {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// One client connection of the control socket.
#[derive(Debug)]
struct Conn {
    stream: UnixStream,
    /// Bytes of the request line read so far.
    line: Vec<u8>,
    /// The reply to the last request, when it comes later.
    waiting: Option<mpsc::Receiver<Reply>>,
    /// Reply bytes the client has not taken yet.
    out: Vec<u8>,
    /// Since when `out` has waited.
    sending_since: Option<std::time::Instant>,
    reply_deadline: Duration,
    /// When bytes last moved either way.
    active: std::time::Instant,
}

impl Conn {
    /// How long it has been idle at `now`: nothing moved and no request
    /// under way (zero while one is).
    fn idle_since(&self, now: std::time::Instant) -> Duration {
        if self.waiting.is_some() || !self.out.is_empty() {
            return Duration::ZERO;
        }
        now.duration_since(self.active)
    }

    /// Sends a reply that came, reads what is there and answers each
    /// complete line (not past one whose reply comes later). `Ok(true)`
    /// when anything happened; an error (or end of input) ends the
    /// connection.
    fn serve(&mut self, handler: &mut impl FnMut(Request) -> Answer) -> io::Result<bool> {
        use std::io::Read;
        let mut progress = self.flush()?;
        if !self.out.is_empty() {
            // Nothing more is read or answered until the client has
            // taken its replies.
            return Ok(progress);
        }
        if let Some(later) = &self.waiting {
            let reply = match later.try_recv() {
                Ok(reply) => reply,
                Err(mpsc::TryRecvError::Empty) => return Ok(false),
                Err(mpsc::TryRecvError::Disconnected) => {
                    Reply::error("the request's work ended without a reply")
                }
            };
            self.waiting = None;
            self.reply(&reply)?;
            progress = true;
        }
        // Read only once the lines already read are answered: requests
        // sent ahead (pipelined) wait in the socket, not here.
        if !self.line.contains(&b'\n') {
            let mut buf = [0u8; 4096];
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.line.extend_from_slice(&buf[..n]);
                    progress = true;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        while self.waiting.is_none() && self.out.is_empty() {
            let Some(end) = self.line.iter().position(|&b| b == b'\n') else {
                break;
            };
            let line: Vec<u8> = self.line.drain(..=end).collect();
            match serde_json::from_slice::<Request>(&line) {
                Ok(req) => match handler(req) {
                    Answer::Now(reply) => self.reply(&reply)?,
                    Answer::Later(later) => self.waiting = Some(later),
                },
                Err(e) => self.reply(&Reply::error(format!("malformed request: {e}")))?,
            }
        }
        if progress {
            self.active = std::time::Instant::now();
        }
        // The line under way (after the last whole one) is what is long.
        let whole = self
            .line
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        if self.line.len() - whole > MAX_REQUEST {
            self.reply(&Reply::error(format!(
                "request longer than {MAX_REQUEST} bytes"
            )))?;
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(progress)
    }

    /// Queues a reply and sends what the client takes now.
    fn reply(&mut self, reply: &Reply) -> io::Result<()> {
        let start = self.out.len();
        if serde_json::to_writer(&mut self.out, reply).is_err() {
            self.out.truncate(start);
            let e = Reply::error("the reply could not be written as JSON");
            serde_json::to_writer(&mut self.out, &e).map_err(io::Error::other)?;
        }
        self.out.push(b'\n');
        self.flush().map(|_| ())
    }

    /// Sends what the client takes of the queued replies without waiting;
    /// `Ok(true)` when it took some. An error when they have waited past
    /// the reply deadline.
    fn flush(&mut self) -> io::Result<bool> {
        let mut sent = 0;
        while sent < self.out.len() {
            match self.stream.write(&self.out[sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        self.out.drain(..sent);
        let now = std::time::Instant::now();
        if self.out.is_empty() {
            self.sending_since = None;
        } else {
            // The deadline bounds a reply's whole way out, however slowly
            // the client takes it.
            self.sending_since.get_or_insert(now);
        }
        if self
            .sending_since
            .is_some_and(|t| now.duration_since(t) > self.reply_deadline)
        {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not take its reply in time",
            ));
        }
        Ok(sent > 0)
    }
}

/// The longest path a Unix socket can be bound at (`sun_path`, 108
/// bytes, less the NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// Another dpd serves at the path.
fn in_use() -> io::Error {
    io::Error::new(io::ErrorKind::AddrInUse, "in use by a running dpd")
}

/// A new folder, mode 0700, beside `path` (in its folder).
fn tempdir_beside(path: &Path) -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    for n in 0..100u32 {
        let name = format!(".b{}{n}", std::process::id());
        let candidate = dir.join(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free name for the socket's staging folder",
    ))
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A client of the control socket.
#[derive(Debug)]
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    /// Connects to `dpd`'s socket.
    ///
    /// # Errors
    /// When nothing listens there (is dpd running?) or permission is denied.
    pub fn connect(path: &Path) -> io::Result<Self> {
        Self::connect_within(path, CONNECT_TIMEOUT)
    }

    /// [`Client::connect`], giving up after `limit`: a Unix socket's
    /// `connect` waits while the listener's backlog is full (a dpd whose
    /// control thread is stuck), and std has no timeout for it, so it runs
    /// on a thread of its own, left behind if it never returns.
    ///
    /// # Errors
    /// As [`UnixStream::connect`]; `TimedOut` past `limit`.
    pub fn connect_within(path: &Path, limit: Duration) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let target = path.to_path_buf();
        std::thread::Builder::new()
            .name("connect".into())
            .spawn(move || {
                let _ = tx.send(UnixStream::connect(target));
            })?;
        let stream = match rx.recv_timeout(limit) {
            Ok(connected) => connected?,
            Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("dpd did not take the connection within {limit:?}"),
                ))
            }
        };
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.set_write_timeout(Some(Duration::from_secs(10)))?;
        Ok(Self {
            writer: stream.try_clone()?,
            reader: BufReader::new(stream),
        })
    }

    /// How long [`Client::call`] waits for a reply (10 s unless set):
    /// longer for requests that take long on purpose (a capture).
    ///
    /// # Errors
    /// When the socket refuses the setting.
    pub fn set_reply_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        self.reader.get_ref().set_read_timeout(Some(timeout))
    }

    /// Sends a request and waits for its reply.
    ///
    /// # Errors
    /// On I/O errors or an unparseable reply.
    pub fn call(&mut self, req: &Request) -> io::Result<Reply> {
        let mut line = serde_json::to_vec(req).expect("requests serialise");
        line.push(b'\n');
        self.call_raw(&line)
    }

    /// Sends raw bytes (one line) and reads one reply: for tests of bad input.
    ///
    /// # Errors
    /// On I/O errors or an unparseable reply.
    pub fn call_raw(&mut self, line: &[u8]) -> io::Result<Reply> {
        self.writer.write_all(line)?;
        let mut reply = String::new();
        if self.reader.read_line(&mut reply)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "dpd closed the connection",
            ));
        }
        serde_json::from_str(&reply)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad reply: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::sync::Arc;

    #[test]
    fn request_shapes() {
        assert_eq!(
            serde_json::to_string(&Request::Status).unwrap(),
            r#"{"cmd":"status"}"#
        );
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"cmd":"stats"}"#).unwrap(),
            Request::Stats
        );
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"reboot"}"#).is_err());
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"cmd":"undrain"}"#).unwrap(),
            Request::Undrain
        );
        // A drain reply from a dpd before [routing] still reads.
        let old: Body = serde_json::from_str(r#"{"drain":{"open_connections":3}}"#).unwrap();
        assert_eq!(
            old,
            Body::Drain(DrainState {
                open_connections: 3,
                phase: String::new(),
                for_s: 0.0
            })
        );
    }

    #[test]
    fn serves_requests_and_survives_bad_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/control.sock");
        let sock = ControlSocket::bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["control.sock"], "the staging folder is gone");
        assert!(
            ControlSocket::bind(&path).is_err(),
            "a live socket is not replaced"
        );
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let server = std::thread::spawn(move || {
            sock.serve(&stop2, |req| {
                match req {
                    Request::Stats => Reply::ok(Body::Stats(Box::new(Stats {
                        cores: vec![],
                        total: CoreStats::default(),
                        tsc_hz: 0,
                    }))),
                    _ => Reply::error("not in this test"),
                }
                .into()
            });
        });
        let mut c = Client::connect(&path).unwrap();
        let r = c.call(&Request::Stats).unwrap();
        assert!(r.ok);
        assert!(matches!(r.body, Some(Body::Stats(_))));
        let r = c.call_raw(b"{not json\n").unwrap();
        assert!(!r.ok && r.error.unwrap().contains("malformed request"));
        let r = c.call_raw(b"{\"cmd\":\"format_disk\"}\n").unwrap();
        assert!(!r.ok && r.error.unwrap().contains("format_disk"));
        let r = c.call(&Request::Status).unwrap();
        assert_eq!(r.error.as_deref(), Some("not in this test"));
        // A client that stays connected does not hold up another.
        let mut other = Client::connect(&path).unwrap();
        assert!(other.call(&Request::Stats).unwrap().ok);
        // Half a line, then the rest: one request.
        other.writer.write_all(b"{\"cmd\":").unwrap();
        std::thread::sleep(Duration::from_millis(30));
        assert!(other.call_raw(b"\"stats\"}\n").unwrap().ok);
        drop(c);
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
        assert!(!path.exists(), "socket removed on drop");
    }

    /// A client that sends requests and does not read the replies holds
    /// up no other: replies wait for it without blocking the control
    /// thread, and once one has waited past the deadline it is closed. One
    /// client past [`MAX_CONTROL_CONNS`] is told so and closed. Before,
    /// each reply was written blocking, two seconds a write, so a reader
    /// taking a byte now and then held the control thread for good.
    #[test]
    fn a_client_that_does_not_read_holds_up_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let mut sock = ControlSocket::bind(&path).unwrap();
        sock.reply_deadline = Duration::from_millis(600);
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let big = "x".repeat(1 << 20);
        let server = std::thread::spawn(move || {
            sock.serve(&stop2, |req| match req {
                Request::ConfigShow => Reply::ok(Body::Config(big.clone())).into(),
                _ => Reply::error("quick").into(),
            });
        });
        let mut stuck = Client::connect(&path).unwrap();
        let mut asks = Vec::new();
        for _ in 0..8 {
            asks.extend(serde_json::to_vec(&Request::ConfigShow).unwrap());
            asks.push(b'\n');
        }
        stuck.writer.write_all(&asks).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let t0 = std::time::Instant::now();
        let mut quick = Client::connect(&path).unwrap();
        let r = quick.call(&Request::Stats).unwrap();
        assert_eq!(r.error.as_deref(), Some("quick"));
        assert!(
            t0.elapsed() < Duration::from_millis(300),
            "{:?}",
            t0.elapsed()
        );
        // Past the deadline the stuck client is closed: what it reads
        // ends (after the part of a reply that went).
        std::thread::sleep(Duration::from_millis(900));
        let mut rest = Vec::new();
        stuck.reader.read_to_end(&mut rest).unwrap();
        assert!(
            rest.len() < 8 * (1 << 20),
            "closed before all went: {}",
            rest.len()
        );
        // The cap: MAX_CONTROL_CONNS held, the next one told and closed.
        let held: Vec<Client> = (0..MAX_CONTROL_CONNS - 1)
            .map(|_| Client::connect(&path).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let mut over = Client::connect(&path).unwrap();
        let mut line = String::new();
        over.reader.read_line(&mut line).unwrap();
        assert!(line.contains("control connections open already"), "{line}");
        assert!(
            quick.call(&Request::Stats).is_ok(),
            "the ones held still work"
        );
        drop(held);
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
    }

    /// Clients idle past [`IDLE_BEFORE_EVICTION`] that fill the socket
    /// (hung scripts, forgotten `socat`s) give way to a newcomer, the
    /// idlest first, told why. Before, every newcomer was refused for as
    /// long as they stayed.
    #[test]
    fn idle_clients_that_fill_the_socket_give_way_to_a_newcomer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let mut sock = ControlSocket::bind(&path).unwrap();
        sock.idle_before_eviction = Duration::from_millis(300);
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let server = std::thread::spawn(move || {
            sock.serve(&stop2, |_| Reply::error("served").into());
        });
        let mut held: Vec<Client> = (0..MAX_CONTROL_CONNS)
            .map(|_| Client::connect(&path).unwrap())
            .collect();
        // Fresh ones are not idle enough: the newcomer is refused.
        let mut over = Client::connect(&path).unwrap();
        let mut line = String::new();
        over.reader.read_line(&mut line).unwrap();
        assert!(line.contains("control connections open already"), "{line}");
        std::thread::sleep(Duration::from_millis(400));
        let mut late = Client::connect(&path).unwrap();
        let r = late.call(&Request::Stats).unwrap();
        assert_eq!(r.error.as_deref(), Some("served"));
        let mut first = held.remove(0);
        let mut line = String::new();
        first.reader.read_line(&mut line).unwrap();
        assert!(
            line.contains("closed: idle while"),
            "the idlest went: {line}"
        );
        drop(held);
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
    }

    /// Requests sent ahead (100 KiB of them), each with a reply longer
    /// than the socket takes at once, are all answered, in order. Before,
    /// each round read 4 KiB more while answering one line, so the lines
    /// read ahead passed [`MAX_REQUEST`] and the connection was refused as
    /// sending a request too long.
    #[test]
    fn pipelined_requests_with_long_replies_are_all_answered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let sock = ControlSocket::bind(&path).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let big = "x".repeat(300_000);
        let server = std::thread::spawn(move || {
            sock.serve(&stop2, |_| Reply::ok(Body::Config(big.clone())).into());
        });
        let mut c = Client::connect(&path).unwrap();
        let mut asks = Vec::new();
        for _ in 0..100 {
            // 1 KiB each (JSON may carry spaces after its value).
            asks.extend(serde_json::to_vec(&Request::ConfigShow).unwrap());
            asks.extend([b' '; 1000]);
            asks.push(b'\n');
        }
        c.writer.write_all(&asks).unwrap();
        for i in 0..100 {
            let mut line = String::new();
            c.reader.read_line(&mut line).unwrap();
            let r: Reply = serde_json::from_str(&line).unwrap();
            assert!(r.ok, "reply {i}: {:?}", r.error);
        }
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
    }

    /// A reply that comes later holds up its own client only: another
    /// client is answered meanwhile, and the waiting client's next request
    /// is answered after its reply.
    #[test]
    fn a_later_reply_holds_up_only_its_client() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let sock = ControlSocket::bind(&path).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let server = std::thread::spawn(move || {
            sock.serve(&stop2, |req| match req {
                Request::TicketsRotate => {
                    let (tx, rx) = mpsc::channel();
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(500));
                        let _ = tx.send(Reply::error("slow work done"));
                    });
                    Answer::Later(rx)
                }
                // Work that ends without sending its reply.
                Request::ConfigShow => Answer::Later(mpsc::channel().1),
                _ => Reply::error("quick").into(),
            });
        });
        let mut slow = Client::connect(&path).unwrap();
        let t0 = std::time::Instant::now();
        // Two requests at once: the second waits for the first's reply.
        let mut two = serde_json::to_vec(&Request::TicketsRotate).unwrap();
        two.push(b'\n');
        two.extend(serde_json::to_vec(&Request::Stats).unwrap());
        two.push(b'\n');
        slow.writer.write_all(&two).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let mut quick = Client::connect(&path).unwrap();
        let r = quick.call(&Request::Stats).unwrap();
        assert_eq!(r.error.as_deref(), Some("quick"));
        assert!(
            t0.elapsed() < Duration::from_millis(400),
            "answered while the other waits: {:?}",
            t0.elapsed()
        );
        let mut line = String::new();
        slow.reader.read_line(&mut line).unwrap();
        let r: Reply = serde_json::from_str(&line).unwrap();
        assert_eq!(r.error.as_deref(), Some("slow work done"));
        assert!(t0.elapsed() >= Duration::from_millis(500));
        line.clear();
        slow.reader.read_line(&mut line).unwrap();
        let r: Reply = serde_json::from_str(&line).unwrap();
        assert_eq!(r.error.as_deref(), Some("quick"), "then the next request");
        let r = slow.call(&Request::ConfigShow).unwrap();
        assert!(r.error.unwrap().contains("ended without a reply"));
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
    }

    /// A path up to sun_path's 107 bytes binds (the staging path beside it
    /// is no longer for a name like `control.sock`); a longer one is
    /// refused naming the path and the limit. Before, the staging folder's
    /// long name made paths of about 90 bytes and more fail as "path must
    /// be shorter than SUN_LEN", naming nothing.
    #[test]
    fn a_socket_path_up_to_the_limit_binds_and_a_longer_one_is_named() {
        // In /tmp, not $TMPDIR: its path must leave room for the test's.
        let dir = tempfile::tempdir_in("/tmp").unwrap();
        let base = dir.path().as_os_str().len();
        let fill = MAX_SOCKET_PATH - base - "/".len() - "/control.sock".len();
        let sub = dir.path().join("d".repeat(fill));
        let path = sub.join("control.sock");
        assert_eq!(path.as_os_str().len(), MAX_SOCKET_PATH);
        let sock = ControlSocket::bind(&path).unwrap();
        assert!(UnixStream::connect(&path).is_ok());
        drop(sock);
        let longer = sub.join("control.socket");
        let e = ControlSocket::bind(&longer).unwrap_err();
        let text = e.to_string();
        assert!(text.contains(&*longer.to_string_lossy()), "{text}");
        assert!(text.contains("at most 107"), "{text}");
    }

    /// Errors name the path: a folder that cannot be made says which.
    #[test]
    fn a_bind_error_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        let path = file.join("control.sock");
        let e = ControlSocket::bind(&path).unwrap_err();
        assert!(e.to_string().starts_with(&*path.to_string_lossy()), "{e}");
    }

    #[test]
    fn stale_socket_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        drop(UnixListener::bind(&path).unwrap()); // file left, nobody listening
        assert!(path.exists());
        ControlSocket::bind(&path).unwrap();
    }

    #[test]
    fn a_file_that_is_not_a_socket_is_left_alone() {
        // `[control] socket` naming the configuration by mistake.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dpd.toml");
        std::fs::write(&path, "[eal]\n").unwrap();
        let e = ControlSocket::bind(&path).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[eal]\n");
    }
}
