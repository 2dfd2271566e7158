//! The `dpd` configuration file (TOML) and its validation.
//!
//! Parsing rejects unknown keys; [`Config::validate`] checks the file as a
//! whole. Every error names the field (`port[0].address`) and the value.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The whole `dpd.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub eal: Eal,
    #[serde(rename = "port")]
    pub ports: Vec<Port>,
    /// Virtual IPs served.
    #[serde(default, rename = "vip", skip_serializing_if = "Vec::is_empty")]
    pub vips: Vec<Vip>,
    /// Backend pools VIPs forward to.
    #[serde(default, rename = "pool", skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<Pool>,
    /// Named certificates VIPs list by name (`[[cert]]`).
    #[serde(default, rename = "cert", skip_serializing_if = "Vec::is_empty")]
    pub certs: Vec<NamedCert>,
    #[serde(default)]
    pub log: Log,
    #[serde(default)]
    pub tcp: Tcp,
    #[serde(default)]
    pub control: Control,
    /// Announcing VIPs to a routing daemon (docs/cluster.md); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<Routing>,
    /// Client addresses refused on every VIP.
    #[serde(default, skip_serializing_if = "Access::is_empty")]
    pub access: Access,
}

/// `[access]`: client networks refused everywhere. A SYN from one is
/// dropped unanswered (counted per VIP, `refused_denied`), and the
/// connections one has open when it is denied are reset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Access {
    /// Networks (`198.51.100.0/24`, `2001:db8::/32`) or single addresses,
    /// denied until taken off. With `deny_until`, at most [`MAX_DENIED`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// Networks denied until a time (`dpctl deny add --for`); `dpd` takes
    /// each off when its time comes (and drops ones past it as it reads
    /// the file). A network is on one list at most.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_until: Vec<DenyUntil>,
    /// Denies for a time, by itself, a source its per-source limits keep
    /// refusing (absent: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_deny: Option<AutoDeny>,
}

/// `[access] auto_deny`: a client address (IPv6: its /64) refused at
/// least `refused` times in the last one to two minutes by the VIPs'
/// `max_new_per_source` and `max_connections_per_source`, summed over
/// VIPs, goes on `deny_until` for `for_s` seconds. `dpd` looks every
/// [`AUTO_DENY_EVERY_S`] seconds. Refusals by a VIP's `max_connections`
/// (a full VIP is no one client's doing) and by deny lists do not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AutoDeny {
    /// Refusals that earn a source its deny: 1 to 1,000,000,000.
    pub refused: u64,
    /// How long it is denied: two minutes (the refusals that earned it
    /// are counted that long, so a shorter deny would be earned again at
    /// once) to a year.
    pub for_s: u64,
}

/// How often `dpd` looks for sources that earned an `auto_deny`.
pub const AUTO_DENY_EVERY_S: u64 = 5;
/// The shortest `auto_deny` `for_s`.
pub const MIN_AUTO_DENY_S: u64 = 120;

/// One entry of `[access] deny_until`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DenyUntil {
    /// A network, as `deny` writes it.
    pub net: String,
    /// When it is taken off (RFC 3339, UTC: `"2026-12-07T03:00:00Z"`).
    pub until: jiff::Timestamp,
}

impl Access {
    pub fn is_empty(&self) -> bool {
        self.deny.is_empty() && self.deny_until.is_empty() && self.auto_deny.is_none()
    }

    /// Takes off `deny_until` the entries whose time is `now` or past,
    /// and returns their networks.
    pub fn take_expired(&mut self, now: jiff::Timestamp) -> Vec<String> {
        let mut gone = Vec::new();
        self.deny_until.retain(|d| {
            let keep = d.until > now;
            if !keep {
                gone.push(d.net.clone());
            }
            keep
        });
        gone
    }

    /// Adds `running`'s `deny_until` entries whose networks this does not
    /// name (on either list), while both lists hold fewer than `max`;
    /// how many. A reload does this: timed denies are run-time state
    /// (`deny add --for`, `auto_deny`) that a file seldom has, and a
    /// reload (a renewed certificate's SIGHUP, say) would otherwise lift
    /// them all. The file's lasting list is taken as it is.
    pub fn keep_timed(&mut self, running: &Access, max: usize) -> usize {
        let named: HashSet<(IpAddr, u8)> = self
            .deny
            .iter()
            .chain(self.deny_until.iter().map(|d| &d.net))
            .filter_map(|d| parse_prefix(d).ok())
            .collect();
        let mut kept = 0;
        for d in &running.deny_until {
            if self.deny.len() + self.deny_until.len() >= max {
                break;
            }
            if parse_prefix(&d.net).is_ok_and(|net| !named.contains(&net)) {
                self.deny_until.push(d.clone());
                kept += 1;
            }
        }
        kept
    }

    /// The earliest time an entry of `deny_until` is due.
    pub fn next_expiry(&self) -> Option<jiff::Timestamp> {
        self.deny_until.iter().map(|d| d.until).min()
    }

    /// Every network denied now, on either list (unparsed: validation
    /// checked each).
    pub fn denied(&self) -> impl Iterator<Item = &str> {
        let until = self.deny_until.iter().map(|d| d.net.as_str());
        self.deny.iter().map(String::as_str).chain(until)
    }
}

impl Access {
    fn validate(&self) -> Result<(), ConfigError> {
        let entries = self.deny.len() + self.deny_until.len();
        if entries > MAX_DENIED {
            return Err(ConfigError::new(
                "access.deny",
                entries,
                format!("at most {MAX_DENIED} networks (deny and deny_until together)"),
            ));
        }
        let mut seen = HashSet::new();
        for (i, d) in self.deny.iter().enumerate() {
            match parse_prefix(d) {
                Ok(net) => seen.insert(net),
                Err(why) => return Err(ConfigError::new(format!("access.deny[{i}]"), d, why)),
            };
        }
        for (i, d) in self.deny_until.iter().enumerate() {
            let at = format!("access.deny_until[{i}].net");
            let net = parse_prefix(&d.net).map_err(|why| ConfigError::new(&at, &d.net, why))?;
            if !seen.insert(net) {
                return Err(ConfigError::new(
                    at,
                    &d.net,
                    "denied already (in deny, or earlier in deny_until)",
                ));
            }
        }
        if let Some(a) = self.auto_deny {
            if !(1..=1_000_000_000).contains(&a.refused) {
                return Err(ConfigError::new(
                    "access.auto_deny.refused",
                    a.refused,
                    "must be 1 to 1000000000",
                ));
            }
            if !(MIN_AUTO_DENY_S..=MAX_DENY_FOR_S).contains(&a.for_s) {
                return Err(ConfigError::new(
                    "access.auto_deny.for_s",
                    a.for_s,
                    format!(
                        "must be {MIN_AUTO_DENY_S} (the refusals that earned it count for up to two minutes) to {MAX_DENY_FOR_S}"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The longest `dpctl deny add --for` takes: a year.
pub const MAX_DENY_FOR_S: u64 = 365 * 86_400;

/// Most entries of `[access] deny`, and of a VIP's `allow`.
pub const MAX_DENIED: usize = 100_000;

/// A network as `[access] deny` takes it: `ADDRESS/LEN`, or an address
/// alone (all its bits). Host bits must be clear, so that what is written
/// is what is refused.
pub fn parse_prefix(s: &str) -> Result<(IpAddr, u8), String> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| "not an address, or ADDRESS/LENGTH".to_string())?;
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => bits,
        Some(l) => match l.parse::<u8>() {
            Ok(n) if n <= bits => n,
            _ => return Err(format!("the length must be 0 to {bits}")),
        },
    };
    let network = mask_to(addr, len);
    if network != addr {
        return Err(format!(
            "host bits set: the network is {network}/{len}, or give the address alone"
        ));
    }
    Ok((addr, len))
}

/// `addr` with all but its first `len` bits cleared.
pub fn mask_to(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & mask).into())
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & mask).into())
        }
    }
}

/// `[access] deny`'s way of writing a network (an address alone for all
/// its bits), so that the same network is always written the same.
pub fn prefix_text((addr, len): (IpAddr, u8)) -> String {
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    if len == bits {
        addr.to_string()
    } else {
        format!("{addr}/{len}")
    }
}

/// `[routing]`: the VIPs this node can serve are put, as /32 and /128
/// addresses, on a tap interface `dpd` holds open (a routing daemon such
/// as BIRD announces them from there), and `dpctl drain` withdraws them
/// before it stops taking connections.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Routing {
    /// The interface `dpd` creates; it must not exist beforehand.
    #[serde(default = "default_announce_interface")]
    pub interface: String,
    /// Drain: after the withdrawal, how long no new connection may have
    /// arrived before the routers are taken to have stopped sending new
    /// flows (milliseconds).
    #[serde(default = "default_withdraw_quiet_ms")]
    pub withdraw_quiet_ms: u32,
    /// Drain: the longest wait for that quiet before listeners stop
    /// taking connections anyway (seconds).
    #[serde(default = "default_withdraw_wait_s")]
    pub withdraw_wait_s: u32,
}

fn default_announce_interface() -> String {
    "tlsdp-vips".into()
}

fn default_withdraw_quiet_ms() -> u32 {
    2_000
}

fn default_withdraw_wait_s() -> u32 {
    30
}

impl Default for Routing {
    fn default() -> Self {
        Self {
            interface: default_announce_interface(),
            withdraw_quiet_ms: default_withdraw_quiet_ms(),
            withdraw_wait_s: default_withdraw_wait_s(),
        }
    }
}

/// TCP limits of each engine.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tcp {
    /// Most connections per engine (every state but TIME-WAIT).
    pub max_connections: u32,
    /// Most half-open (SYN-RECEIVED) connections per engine.
    pub max_half_open: u32,
    /// `"when_full"` (answer SYNs with cookies once `max_half_open` is
    /// reached), `"always"` or `"off"` (drop SYNs over the limit).
    pub syn_cookies: SynCookieMode,
    /// Seconds a connection we closed first stays in TIME-WAIT (2 MSL).
    pub time_wait_s: u32,
    /// Most 4-tuples in TIME-WAIT per engine (a compact entry each, apart
    /// from `max_connections`); past it the oldest is recycled, so
    /// TIME-WAIT never refuses a connection. 0: no TIME-WAIT.
    pub max_time_wait: u32,
    /// Seconds without a segment before a connection is reset.
    pub idle_timeout_s: u32,
    /// Seconds a connection we closed first waits in FIN-WAIT-2 for the
    /// peer's FIN, counted from the ACK of ours or the peer's last data;
    /// its ACKs alone do not extend it (Linux's `tcp_fin_timeout`). Then
    /// it is reset.
    pub fin_wait2_timeout_s: u32,
    /// Seconds a handshake may take.
    pub handshake_timeout_s: u32,
    /// Seconds of idleness before keepalive probes (0: off); then every
    /// 75 s, 9 probes (Linux's defaults). Below `idle_timeout_s` (else
    /// refused: no probe would go); a VIP whose own `idle_timeout_s` is at
    /// or below it resets its idle connections before any probe.
    pub keepalive_s: u32,
    /// MiB of byte rings per engine (16 to 1048576), TLS connections'
    /// own buffers counted with them. A connection's rings start at 4 KiB
    /// and grow to 256 KiB as bytes come; at this cap received data is
    /// dropped for the peer to send again, sends wait and new SYNs are
    /// dropped (`tcp_buffer_denied`, `tcp_syn_no_memory`).
    pub buffer_memory_mib: u32,
}

impl Default for Tcp {
    fn default() -> Self {
        Self {
            max_connections: 65536,
            max_half_open: 4096,
            syn_cookies: SynCookieMode::WhenFull,
            time_wait_s: 30,
            max_time_wait: 262_144,
            idle_timeout_s: 300,
            fin_wait2_timeout_s: 60,
            handshake_timeout_s: 10,
            keepalive_s: 0,
            buffer_memory_mib: 1024,
        }
    }
}

/// When SYN cookies are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SynCookieMode {
    WhenFull,
    Always,
    Off,
}

/// A virtual IP: an address and port where clients connect.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Vip {
    pub name: String,
    /// `address:port`; the address is a port's own or another address on a
    /// port's subnet (dpd then answers ARP and ICMP for it too).
    pub listen: String,
    /// What answers: `"builtin"`, the HTTP/1.x responder (`GET /bytes/N`).
    /// Either this or `pool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub respond: Option<Respond>,
    /// The backend pool each connection's (decrypted) bytes go to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// A TLS VIP with a pool: clients whose SNI names a route go to its
    /// pool instead (an exact name first, then `*.domain` for one label
    /// more, as certificates are picked); others, and clients without
    /// SNI, to `pool`. At most [`MAX_ROUTES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// The only client networks it takes connections from (as `[access]
    /// deny` writes them); others' SYNs go unanswered. Empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Certificates, by `[[cert]]` name or as `{ cert, key }` files in
    /// place: when given, the VIP terminates TLS (1.2 and 1.3) and picks one
    /// per handshake by SNI and the client's signature algorithms; the
    /// first is the default. [`Config::parse`] turns files in place into
    /// `[[cert]]` entries named `VIP-N`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certs: Vec<CertRef>,
    /// Whether the VIP takes new connections (`dpctl vip disable` clears
    /// it; existing connections go on).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
    /// TLS policy of a VIP with certificates; defaults when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSettings>,
    /// A TLS handshake not finished this long after the client's SYN is
    /// reset (100 to 300000; default 10000).
    #[serde(
        default = "default_handshake_timeout",
        skip_serializing_if = "is_default_handshake_timeout"
    )]
    pub handshake_timeout_ms: u32,
    /// A request head (built-in responder) or a client's first bytes
    /// (pool) not there this long after the connection is ready for one
    /// (accepted, handshake done, last response sent) is reset (100 to
    /// 3600000; default 30000). Keep-alive connections wait this long for
    /// their next request.
    #[serde(
        default = "default_request_timeout",
        skip_serializing_if = "is_default_request_timeout"
    )]
    pub request_timeout_ms: u32,
    /// A client that has acknowledged none of the data waiting for it for
    /// this long (one that stopped reading, holding its TCP window closed
    /// while it answers every probe) is reset, as nginx's `send_timeout`
    /// does; so is a backend connection of the VIP's pool, as nginx's
    /// `proxy_send_timeout` (1000 to 3600000; default 60000).
    #[serde(
        default = "default_send_timeout",
        skip_serializing_if = "is_default_send_timeout"
    )]
    pub send_timeout_ms: u32,
    /// A client silent this long is reset (1 to 86400; default:
    /// `[tcp] idle_timeout_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_s: Option<u32>,
    /// Most connections open at once (TIME-WAIT not counted); a SYN over
    /// it gets a reset (`refused_conn_limit`). Shared out among engines,
    /// each taking its share rounded up. Default: no cap but
    /// `[tcp] max_connections`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Most new connections per second from one client address, with
    /// bursts of one second's worth; a SYN over it gets a reset
    /// (`refused_source_rate`). Only connections that completed their
    /// handshake count, so SYNs spoofed from a client's address cannot
    /// spend its rate; a burst of SYNs admitted while it had some left
    /// is cut at the handshakes' end. Shared out among engines like
    /// `max_connections` (RSS spreads a client's connections). Default: no
    /// limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_per_source: Option<u32>,
    /// Most established connections from one client address (an IPv6
    /// client's /64) at once; a SYN over it gets a reset
    /// (`refused_source_conns`). Only connections that completed their
    /// handshake count, so SYNs spoofed from a client's address cannot
    /// spend its share. Shared out among engines like `max_connections`:
    /// each engine takes its share rounded up of the connections RSS gives
    /// it. Default: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections_per_source: Option<u32>,
}

/// A VIP's route: clients asking for `sni` go to `pool`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// A DNS name (`api.example.com`) or a wildcard of one label
    /// (`*.example.com`); matched without regard to case.
    pub sni: String,
    pub pool: String,
}

/// Most routes of one VIP.
pub const MAX_ROUTES: usize = 256;

/// Why `name` cannot be a route's SNI, if it cannot: a DNS name of
/// letters, digits, hyphens and dots (labels of 1 to 63, 253 at most), or
/// `*.` and such a name.
pub fn check_route_name(name: &str) -> Result<(), String> {
    let host = name.strip_prefix("*.").unwrap_or(name);
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
        return Err("a DNS name (api.example.com) or a one-label wildcard (*.example.com)".into());
    }
    if host.parse::<IpAddr>().is_ok() || host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err("an address: clients send no SNI for one (RFC 6066 section 3)".into());
    }
    Ok(())
}

/// Largest configuration file read.
pub const MAX_CONFIG_FILE: u64 = 16 << 20;

/// [`Vip::handshake_timeout_ms`]'s default.
pub const DEFAULT_HANDSHAKE_TIMEOUT_MS: u32 = 10_000;
/// [`Vip::request_timeout_ms`]'s default.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u32 = 30_000;
/// [`Vip::send_timeout_ms`]'s default.
pub const DEFAULT_SEND_TIMEOUT_MS: u32 = 60_000;

fn default_handshake_timeout() -> u32 {
    DEFAULT_HANDSHAKE_TIMEOUT_MS
}

fn default_request_timeout() -> u32 {
    DEFAULT_REQUEST_TIMEOUT_MS
}

fn default_send_timeout() -> u32 {
    DEFAULT_SEND_TIMEOUT_MS
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if
fn is_default_handshake_timeout(v: &u32) -> bool {
    *v == DEFAULT_HANDSHAKE_TIMEOUT_MS
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if
fn is_default_request_timeout(v: &u32) -> bool {
    *v == DEFAULT_REQUEST_TIMEOUT_MS
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if
fn is_default_send_timeout(v: &u32) -> bool {
    *v == DEFAULT_SEND_TIMEOUT_MS
}

/// A pool of backend servers (`[[pool]]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    pub name: String,
    #[serde(default)]
    pub balance: Balance,
    pub members: Vec<Member>,
    /// Health checks of every member (none: members are taken as up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    /// Send a PROXY protocol v2 header first on each backend connection
    /// (client address; TLS version, cipher and SNI for TLS VIPs).
    #[serde(default)]
    pub proxy_protocol: bool,
    /// A backend connection not established after this long is given up
    /// and the next member tried (1 to 60000; default 3000).
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_ms: u32,
    /// A member a backend connect failed to (refused, or not established
    /// within `connect_timeout_ms`) is passed over by each engine's new
    /// connections for this long, unless no other member is left (as
    /// nginx's `max_fails=1 fail_timeout=10s`); 0: never (0 to 3600000;
    /// default 10000).
    #[serde(default = "default_fail_timeout")]
    pub fail_timeout_ms: u32,
    /// Members one client's backend connection is tried on before the
    /// client is given up (1 to 64; default 4: HAProxy's `retries 3`), so
    /// an outage holds each client at most this many connect timeouts.
    #[serde(default = "default_connect_tries")]
    pub connect_tries: u32,
}

fn default_connect_timeout() -> u32 {
    3000
}

fn default_connect_tries() -> u32 {
    4
}

fn default_fail_timeout() -> u32 {
    10_000
}

/// `health = { kind = "http", path = "/", expect = 200, interval_ms = 1000,
/// timeout_ms = 500, rise = 2, fall = 3 }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    pub kind: HealthKind,
    /// HTTP: the path asked (`GET path HTTP/1.0`).
    #[serde(default = "default_health_path")]
    pub path: String,
    /// HTTP: the name asked for (`GET path HTTP/1.1` with `Host: host`),
    /// for members that serve by name; absent: HTTP/1.0 without Host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// HTTP: the statuses that mean healthy (default 200 to 399).
    #[serde(default)]
    pub expect: StatusRange,
    #[serde(default = "default_health_interval")]
    pub interval_ms: u32,
    #[serde(default = "default_health_timeout")]
    pub timeout_ms: u32,
    /// Successes in a row that bring a down member back.
    #[serde(default = "default_rise")]
    pub rise: u32,
    /// Failures in a row that take an up member out.
    #[serde(default = "default_fall")]
    pub fall: u32,
}

/// The HTTP statuses an HTTP check takes as healthy: one
/// (`expect = 200`), a range (`expect = "200-299"`) or a class
/// (`expect = "2xx"`). The default, 200 to 399, is HAProxy's and nginx's:
/// a member that redirects its health path is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusRange {
    pub low: u16,
    pub high: u16,
}

impl StatusRange {
    /// Only `status`.
    pub const fn exact(status: u16) -> Self {
        Self {
            low: status,
            high: status,
        }
    }

    pub fn contains(self, status: u16) -> bool {
        (self.low..=self.high).contains(&status)
    }

    /// Reads `200`, `200-399` or `2xx` (bounds not yet checked: see
    /// [`Config::validate`]).
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || {
            format!("{text:?}: expected a status (200), a range (\"200-399\") or a class (\"2xx\")")
        };
        let number = |t: &str| {
            if t.is_empty() || t.len() > 3 || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            t.parse::<u16>().map_err(|_| bad())
        };
        let t = text.trim();
        if let Some(class) = t.strip_suffix("xx").or_else(|| t.strip_suffix("XX")) {
            let c = number(class)
                .ok()
                .filter(|c| class.len() == 1 && *c > 0)
                .ok_or_else(bad)?;
            return Ok(Self {
                low: c * 100,
                high: c * 100 + 99,
            });
        }
        match t.split_once('-') {
            Some((low, high)) => Ok(Self {
                low: number(low.trim())?,
                high: number(high.trim())?,
            }),
            None => number(t).map(Self::exact),
        }
    }
}

impl Default for StatusRange {
    fn default() -> Self {
        Self {
            low: 200,
            high: 399,
        }
    }
}

impl fmt::Display for StatusRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.low == self.high {
            write!(f, "{}", self.low)
        } else {
            write!(f, "{}-{}", self.low, self.high)
        }
    }
}

impl Serialize for StatusRange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.low == self.high {
            s.serialize_u16(self.low)
        } else {
            s.collect_str(self)
        }
    }
}

impl<'de> Deserialize<'de> for StatusRange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = StatusRange;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a status (200), a range (\"200-399\") or a class (\"2xx\")")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<StatusRange, E> {
                u16::try_from(v)
                    .map(StatusRange::exact)
                    .map_err(|_| E::custom(format!("{v}: not an HTTP status")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<StatusRange, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("{v}: not an HTTP status")))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<StatusRange, E> {
                StatusRange::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// What a health check does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthKind {
    /// The TCP handshake completes.
    Tcp,
    /// `GET path` answers the expected status.
    Http,
}

fn default_health_path() -> String {
    "/".into()
}
fn default_health_interval() -> u32 {
    1000
}
fn default_health_timeout() -> u32 {
    500
}
fn default_rise() -> u32 {
    2
}
fn default_fall() -> u32 {
    3
}

/// How a pool picks a member for a new connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    #[default]
    RoundRobin,
    WeightedRoundRobin,
    LeastConn,
    WeightedLeastConn,
    /// Consistent (rendezvous) hashing on the client's address.
    SourceHash,
}

/// A pool member: `{ addr = "10.77.1.2:80", weight = 2, state = "up" }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub addr: String,
    /// 1 to 256 (default 1).
    #[serde(default = "default_weight")]
    pub weight: u32,
    #[serde(default)]
    pub state: MemberState,
}

fn default_weight() -> u32 {
    1
}

/// A member's administrative state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberState {
    #[default]
    Up,
    /// Takes no new connections; existing ones go on.
    Drain,
    Down,
}

impl Member {
    /// The member's address.
    ///
    /// # Errors
    /// When `addr` is not `a.b.c.d:port` or `[v6]:port` with a port above 0.
    pub fn socket_addr(&self) -> Result<SocketAddr, String> {
        let a: SocketAddr = self.addr.parse().map_err(|_| {
            "expected address:port, e.g. 10.77.1.11:80 or [2001:db8::11]:80".to_string()
        })?;
        if a.port() == 0 {
            return Err("port must be 1 to 65535".into());
        }
        Ok(a)
    }
}

/// A VIP's TLS policy (`[vip.tls]`). Absent lists take the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// `["TLSv1.3", "TLSv1.2"]` (default both; older ones are refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<String>,
    /// IANA suite names (default: all AEAD suites).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suites: Vec<String>,
    /// Key-exchange groups enabled (default X25519MLKEM768, X25519,
    /// secp256r1, secp384r1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// ALPN protocols (default `["http/1.1"]`; `[]` turns ALPN off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpn: Option<Vec<String>>,
    /// Session resumption with stateless tickets (default off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tickets: Option<TicketSettings>,
    /// Take cipher suites in the client's order (default: ours, AES-128-GCM
    /// first).
    #[serde(default)]
    pub prefer_client_order: bool,
}

/// Session tickets: `tickets = { rotate_s = 3600, key_file = "..." }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TicketSettings {
    /// Seconds between key rotations; a ticket lives one to two periods.
    #[serde(default = "default_ticket_rotate_s")]
    pub rotate_s: u64,
    /// Secret (32 bytes or more, e.g. `openssl rand 80`) the keys derive
    /// from; nodes with the same file accept each other's tickets. Absent:
    /// a random secret per process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

fn default_ticket_rotate_s() -> u64 {
    3600
}

/// A certificate chain and its private key, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `[[cert]]`: a certificate chain and key under a name VIPs refer to;
/// `dpctl cert rotate NAME` swaps the files behind the name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NamedCert {
    pub name: String,
    /// PEM chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// Where the entry came from when it was written in place in a VIP
    /// (`vip[0].certs[1]`), for error messages.
    #[serde(skip)]
    pub origin: Option<String>,
}

/// A VIP's certificate: a `[[cert]]` name, or files written in place.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum CertRef {
    Name(String),
    Files(CertFiles),
}

impl CertRef {
    /// The `[[cert]]` name (after [`Config::parse`], always there).
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::Name(n) => Some(n),
            Self::Files(_) => None,
        }
    }
}

/// `[log]`: what `dpd` logs on stderr.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    /// `error`, `warn`, `info`, `debug` or `trace`, or a filter such as
    /// `info,dataplane::engine=debug` ([`check_log_level`]); `RUST_LOG`
    /// overrides it at start; `dpctl log level` replaces it while `dpd` runs.
    pub level: String,
    /// `text` (`time level target: message`) or `json` (one object per
    /// line: `ts`, `level`, `target`, `msg`).
    pub format: LogFormat,
    /// The connection log: a file (absolute path) that gets one JSON line
    /// per client connection as it ends, appended to (made with mode 0640
    /// when new). A reload (`config reload`, SIGHUP) opens it again, so
    /// logrotate's `postrotate` sends SIGHUP; a reload may also turn it on,
    /// off, or to another file. Absent: no connection is logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<PathBuf>,
    /// Only connections that ended one of these ways are logged (absent:
    /// every one), e.g. all but `closed` on a busy server, as HAProxy's
    /// `option dontlog-normal`. Reloadable; needs `connections`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_ends: Option<Vec<ConnEnd>>,
}

impl Default for Log {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: LogFormat::Text,
            connections: None,
            connection_ends: None,
        }
    }
}

/// How a client connection ended, as the connection log names it
/// (docs/control-api.md, "The connection log").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnEnd {
    /// Both sides closed (FIN both ways), or a TLS client reset only our
    /// close_notify: it had acknowledged everything before it.
    Closed,
    /// The client reset it.
    ClientReset,
    /// TCP gave up: retransmissions went unanswered, or the client was
    /// silent past the idle timeout.
    TcpTimeout,
    /// No finished TLS handshake within the VIP's `handshake_timeout_ms`.
    HandshakeTimeout,
    /// No request head (or first bytes) within `request_timeout_ms`.
    RequestTimeout,
    /// The client took none of the data waiting for it within
    /// `send_timeout_ms`.
    SendTimeout,
    /// A TLS error: the alert went out, then the connection closed.
    TlsFailure,
    /// Proxied: no pool member could take it (all down, refusing, or not
    /// answering within the pool's `connect_timeout_ms`).
    NoBackend,
    /// Proxied: its backend reset (or timed out) mid-answer; the client
    /// got what the backend had sent, then a reset.
    BackendReset,
    /// Its source was denied while it was open (`[access] deny`, its
    /// VIP's `allow`).
    Denied,
    /// An operator reset it (`dpctl conn reset`).
    OperatorReset,
    /// dpd stopped with it open (`SIGINT`, or `SIGTERM`'s drain out of
    /// time): reset.
    Stopped,
    /// dpd reset it otherwise (its VIP gone, no TLS configuration).
    Reset,
}

impl ConnEnd {
    /// Every end, in the order above.
    pub const ALL: [ConnEnd; 13] = [
        ConnEnd::Closed,
        ConnEnd::ClientReset,
        ConnEnd::TcpTimeout,
        ConnEnd::HandshakeTimeout,
        ConnEnd::RequestTimeout,
        ConnEnd::SendTimeout,
        ConnEnd::TlsFailure,
        ConnEnd::NoBackend,
        ConnEnd::BackendReset,
        ConnEnd::Denied,
        ConnEnd::OperatorReset,
        ConnEnd::Stopped,
        ConnEnd::Reset,
    ];

    /// Its name in the log and in `connection_ends`.
    pub fn name(self) -> &'static str {
        match self {
            ConnEnd::Closed => "closed",
            ConnEnd::ClientReset => "client_reset",
            ConnEnd::TcpTimeout => "tcp_timeout",
            ConnEnd::HandshakeTimeout => "handshake_timeout",
            ConnEnd::RequestTimeout => "request_timeout",
            ConnEnd::SendTimeout => "send_timeout",
            ConnEnd::TlsFailure => "tls_failure",
            ConnEnd::NoBackend => "no_backend",
            ConnEnd::BackendReset => "backend_reset",
            ConnEnd::Denied => "denied",
            ConnEnd::OperatorReset => "operator_reset",
            ConnEnd::Stopped => "stopped",
            ConnEnd::Reset => "reset",
        }
    }
}

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

fn yes() -> bool {
    true
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if
fn is_true(b: &bool) -> bool {
    *b
}

/// The application behind a VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Respond {
    /// The built-in HTTP/1.x responder.
    Builtin,
}

impl Vip {
    /// Parses `listen`.
    ///
    /// # Errors
    /// A reason when it is not `a.b.c.d:port` or `[v6]:port` with a
    /// port above 0.
    pub fn listen_addr(&self) -> Result<SocketAddr, String> {
        let addr: SocketAddr = self.listen.parse().map_err(|_| {
            "expected an address and port, e.g. 10.77.0.1:80 or [2001:db8:77::1]:443".to_string()
        })?;
        if addr.port() == 0 {
            return Err("port 0 cannot be listened on".into());
        }
        Ok(addr)
    }
}

/// DPDK's Environment Abstraction Layer: cores and extra arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Eal {
    /// Dataplane cores, one engine each. The control thread runs on the
    /// lowest core not listed here.
    pub lcores: Vec<u32>,
    /// The CPU each of `lcores` runs on, when they are not the same numbers
    /// (DPDK's `--lcores` mapping); the control thread then takes a CPU no
    /// engine uses, or shares the first one. For labs with fewer CPUs than
    /// engines plus one; production gives every engine its own CPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<u32>,
    /// Extra EAL arguments. `dpd` adds `-l`, `--main-lcore`, `--vdev`/`-a`
    /// for the ports, `--no-pci` unless a PCI port is configured, and
    /// `--in-memory` unless a `--file-prefix` or `--in-memory` is given.
    #[serde(default)]
    pub args: Vec<String>,
    /// Hugepage policy.
    #[serde(default)]
    pub hugepages: HugepagePolicy,
    /// Packet buffers (mbufs) per NUMA socket in use.
    #[serde(default = "default_mbufs")]
    pub mbufs: u32,
    /// Sleep this long (µs) after an engine finds nothing to do 256 times in
    /// a row; 0 (the default) polls without pause, as a dataplane core
    /// should. For labs and machines where the dataplane shares its cores.
    #[serde(default)]
    pub idle_sleep_us: u32,
}

fn default_mbufs() -> u32 {
    8191
}

/// Whether DPDK's memory must come from hugepages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HugepagePolicy {
    /// Use hugepages when free ones exist, else normal pages with a warning.
    #[default]
    Preferred,
    /// Refuse to start without free hugepages.
    Required,
    /// Never use hugepages (`--no-huge`): for tests and laptops.
    Off,
}

/// One network port: a NIC (PCI address) or a DPDK virtual device.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Port {
    pub name: String,
    /// `0000:01:00.0` (PCI), a DPDK virtual device with its arguments,
    /// e.g. `net_af_packet0,iface=veth-dut`, or tlsdp's own tap port with
    /// virtio-net headers, `vnet_tap,iface=TAP[,netns=NAMESPACE]` (a
    /// persistent tap made beforehand, in that namespace if given).
    pub device: String,
    /// The port's IPv4 address with prefix length, e.g. `10.77.0.1/24`
    /// (or give it in `addresses`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// The port's addresses with prefix lengths, IPv4 and IPv6, e.g.
    /// `["10.77.0.1/24", "2001:db8:77::1/64"]`: one IPv4 address (unless
    /// `address` gives it), any number of IPv6 ones. A port with an IPv6
    /// address also has a link-local one made from its MAC.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// Next hop for destinations outside the port's subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// IPv6 next hop for destinations outside the port's prefixes:
    /// link-local (`fe80::1`) or on one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway6: Option<String>,
    /// Receive descriptors per queue.
    #[serde(default = "default_desc")]
    pub rx_desc: u16,
    /// Transmit descriptors per queue.
    #[serde(default = "default_desc")]
    pub tx_desc: u16,
    /// Leave IPv4 and TCP checksums to the device where it can do them
    /// (found at start, shown by `dpctl status`); `false`: all in software.
    #[serde(default = "yes")]
    pub checksum_offload: bool,
    /// Hand the device TCP segments of many MSS to cut (TSO) where it can
    /// (and checksums are offloaded); `false`: one MSS per frame.
    #[serde(default = "yes")]
    pub segmentation_offload: bool,
    /// The link's MTU: the largest IP packet a frame of the port carries,
    /// [`MIN_MTU`] to [`MAX_MTU`] (jumbo frames above 1500; the device and
    /// every host on the link must take them). TCP offers an MSS of the
    /// port's MTU less 40 (60 over IPv6) on connections to and from its
    /// addresses; a VIP routed to every port, the smallest port's.
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// The devices of an 802.3ad (LACP) bond: with these, `device` names
    /// the bond (`net_bondingN`) that DPDK's bonding driver makes of them
    /// in mode 4, and traffic goes over every member the partner
    /// aggregates (docs/lacp.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bond_members: Vec<String>,
    /// 802.1Q VLANs on this port (`[[port.vlan]]`), each a network of its
    /// own: frames tagged with its id carry its addresses.
    #[serde(default, rename = "vlan", skip_serializing_if = "Vec::is_empty")]
    pub vlans: Vec<Vlan>,
}

/// An 802.1Q VLAN of a port (`[[port.vlan]]` after its `[[port]]`): the
/// addresses of frames tagged `id`, given as a port's are.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Vlan {
    /// The VLAN id, 1 to 4094.
    pub id: u16,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway6: Option<String>,
}

fn default_desc() -> u16 {
    1024
}

/// An af_packet device's ring frames against the port's MTU: DPDK's
/// af_packet hands the kernel `framesz` and `blocksz` as given and reads
/// frames at `framesz` strides, so a block must hold whole frames; above
/// 1500 a frame must hold the largest one after the kernel's ring header
/// (DPDK's 2048 default does not).
fn check_af_packet_frames(spec: &str, mtu: u16) -> Result<(), String> {
    let arg = |key: &str| {
        spec.split(',')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| {
                v.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("{key}={v} is not a number"))
            })
            .transpose()
    };
    let (framesz, blocksz) = (arg("framesz")?, arg("blocksz")?);
    let need = u32::from(mtu) + 128;
    if mtu > DEFAULT_MTU && framesz.unwrap_or(2048) < need {
        return Err(format!(
            "af_packet carries frames up to its framesz: MTU {mtu} needs framesz={need} or more, with blocksz a multiple of it (e.g. framesz=9216,blocksz=36864 for 9000)"
        ));
    }
    if let (Some(f), Some(b)) = (framesz, blocksz) {
        if f == 0 || b % f != 0 {
            return Err(format!(
                "blocksz={b} must be a multiple of framesz={f} (af_packet reads the ring at framesz strides)"
            ));
        }
    }
    Ok(())
}

/// Ethernet's MTU, the default.
pub const DEFAULT_MTU: u16 = 1500;

/// The ALPN protocols a VIP answered by the built-in responder may offer.
const BUILTIN_ALPN: [&str; 2] = ["http/1.1", "http/1.0"];
/// The smallest MTU a port may have: IPv6's minimum link MTU (RFC 8200 §5).
pub const MIN_MTU: u16 = 1280;
/// The largest MTU a port may have: the jumbo frames of most 10-100GE NICs
/// and switches (9,216-byte frames less the Ethernet header and FCS).
pub const MAX_MTU: u16 = 9198;

fn default_mtu() -> u16 {
    DEFAULT_MTU
}

/// The control socket.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Control {
    /// Unix socket path, created with mode 0600.
    #[serde(default = "default_socket")]
    pub socket: PathBuf,
    /// `address:port` of the Prometheus endpoint (`GET /metrics`); `""`
    /// turns it off. Local by default: expose it further on purpose.
    #[serde(default = "default_metrics")]
    pub metrics: String,
    /// On SIGTERM, how long open connections may take to finish before
    /// dpd stops anyway (seconds).
    #[serde(default = "default_drain_timeout")]
    pub drain_timeout_s: u32,
    /// Refuse a private key or ticket key file that its group or others
    /// can read (by default such a file is used, with a warning naming it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict_key_permissions: bool,
}

fn default_drain_timeout() -> u32 {
    30
}

fn default_metrics() -> String {
    "127.0.0.1:9464".into()
}

impl Default for Control {
    fn default() -> Self {
        Self {
            socket: default_socket(),
            metrics: default_metrics(),
            drain_timeout_s: default_drain_timeout(),
            strict_key_permissions: false,
        }
    }
}

impl Control {
    /// The metrics address, or `None` when turned off.
    ///
    /// # Errors
    /// When `metrics` is not `address:port`.
    pub fn metrics_addr(&self) -> Result<Option<std::net::SocketAddr>, String> {
        if self.metrics.is_empty() {
            return Ok(None);
        }
        self.metrics
            .parse()
            .map(Some)
            .map_err(|_| "expected address:port, e.g. 127.0.0.1:9464, or \"\" for none".into())
    }
}

fn default_socket() -> PathBuf {
    PathBuf::from("/run/tlsdp/control.sock")
}

/// What kind of device a port names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceKind {
    /// A PCI address in full form (`0000:01:00.0`).
    Pci(String),
    /// A virtual device: its name (`net_af_packet0`) and the whole string.
    Virtual { name: String, spec: String },
    /// tlsdp's tap port with virtio-net headers: the tap, and the network
    /// namespace it is in (`None`: dpd's).
    VnetTap {
        iface: String,
        netns: Option<String>,
    },
}

/// A memif client port's connection ([`Port::memif_client`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemifClient {
    /// The server's socket: a path, or a name in the abstract namespace.
    pub socket: String,
    pub abstract_socket: bool,
    /// Frames sent from and received into dpd's own mbufs (`zero-copy=yes`:
    /// the server copies; DPDK needs `--single-file-segments` for it).
    pub zero_copy: bool,
}

impl DeviceKind {
    /// The kernel interface the device attaches to (`iface=` of a DPDK
    /// virtual device such as af_packet, af_xdp or tap, or a `vnet_tap`'s),
    /// with its namespace: two ports on one interface would each get every
    /// frame.
    /// For af_xdp, the queue it takes (`start_queue`): af_xdp ports on
    /// one NIC's separate queues see separate frames.
    pub fn kernel_iface(&self) -> Option<(String, Option<String>)> {
        match self {
            DeviceKind::Pci(_) => None,
            DeviceKind::Virtual { name, spec } => {
                let arg = |key: &str| {
                    spec.split(',')
                        .skip(1)
                        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
                };
                let iface = arg("iface")?;
                let queue = name
                    .starts_with("net_af_xdp")
                    .then(|| arg("start_queue").unwrap_or("0").to_string());
                Some((format!(":{iface}"), queue))
            }
            DeviceKind::VnetTap { iface, netns } => {
                Some((format!("{}:{iface}", netns.as_deref().unwrap_or("")), None))
            }
        }
    }

    /// Whether this device and one attached as `other` ([`Self::kernel_iface`])
    /// would take the same frames: one interface, and not two separate
    /// af_xdp queues.
    fn shares_frames_with(&self, other: &(String, Option<String>)) -> bool {
        self.kernel_iface().is_some_and(|(iface, queue)| {
            iface == other.0
                && match (&queue, &other.1) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                }
        })
    }

    /// What names the device uniquely among the ports.
    pub fn key(&self) -> String {
        match self {
            DeviceKind::Pci(a) => a.clone(),
            DeviceKind::Virtual { name, .. } => name.clone(),
            DeviceKind::VnetTap { iface, netns } => {
                format!("vnet_tap:{}:{iface}", netns.as_deref().unwrap_or(""))
            }
        }
    }
}

/// An IPv4 address with its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Cidr {
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
}

impl Ipv4Cidr {
    /// The netmask as a number.
    pub fn mask(&self) -> u32 {
        if self.prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix_len))
        }
    }

    /// Whether `ip` is on this subnet.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        (u32::from(ip) ^ u32::from(self.addr)) & self.mask() == 0
    }
    /// Whether this subnet and `other` share addresses.
    pub fn overlaps(&self, other: &Ipv4Cidr) -> bool {
        let mask = self.mask() & other.mask();
        (u32::from(self.addr) ^ u32::from(other.addr)) & mask == 0
    }
}

/// An IPv6 address with its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Cidr {
    pub addr: Ipv6Addr,
    pub prefix_len: u8,
}

impl Ipv6Cidr {
    /// Whether `ip` is on this prefix.
    pub fn contains(&self, ip: Ipv6Addr) -> bool {
        let mask = if self.prefix_len == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(self.prefix_len))
        };
        (u128::from(ip) ^ u128::from(self.addr)) & mask == 0
    }
}

impl fmt::Display for Ipv6Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// A configuration error: the field, its value and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted path of the field, e.g. `port[0].address`; empty for errors of
    /// the file as a whole.
    pub field: String,
    /// The offending value as written (may be empty).
    pub value: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(
        field: impl Into<String>,
        value: impl fmt::Display,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.field.is_empty(), self.value.is_empty()) {
            (true, _) => write!(f, "{}", self.reason),
            (false, true) => write!(f, "{}: {}", self.field, self.reason),
            (false, false) => write!(f, "{} = {:?}: {}", self.field, self.value, self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Reads, parses and validates a configuration file.
    ///
    /// # Errors
    /// When the file cannot be read, is not valid TOML of this shape (unknown
    /// keys included), or fails [`Config::validate`].
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        // A FIFO or device named by mistake would block or never end.
        let cannot = |why: String| {
            ConfigError::new(
                "",
                "",
                format!("cannot read config {}: {why}", path.display()),
            )
        };
        let meta = std::fs::metadata(path).map_err(|e| cannot(e.to_string()))?;
        if !meta.is_file() {
            return Err(cannot("not a regular file".into()));
        }
        if meta.len() > MAX_CONFIG_FILE {
            return Err(cannot(format!("larger than {MAX_CONFIG_FILE} bytes")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(
                "",
                "",
                format!("cannot read config {}: {e}", path.display()),
            )
        })?;
        let mut cfg = Self::parse(&text).map_err(|mut e| {
            if e.field.is_empty() {
                e.reason = format!("{}: {}", path.display(), e.reason);
            }
            e
        })?;
        if let Some(dir) = path.parent() {
            cfg.rebase_files(dir);
        }
        Ok(cfg)
    }

    /// Makes relative certificate, key and ticket key file paths relative
    /// to `dir` (the configuration file's folder), as nginx and HAProxy
    /// read theirs: the same file then loads the same files from any
    /// working directory (`dpd --check` from /etc/tlsdp, the service from
    /// /, a SIGHUP's reload).
    pub fn rebase_files(&mut self, dir: &Path) {
        let rebase = |p: &mut PathBuf| {
            if p.is_relative() && !p.as_os_str().is_empty() {
                *p = dir.join(&*p);
            }
        };
        for c in &mut self.certs {
            rebase(&mut c.cert);
            rebase(&mut c.key);
        }
        for v in &mut self.vips {
            let key_file = (v.tls.as_mut())
                .and_then(|t| t.tickets.as_mut())
                .and_then(|t| t.key_file.as_mut());
            if let Some(f) = key_file {
                rebase(f);
            }
        }
    }

    /// Parses and validates configuration text.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let config: Self = toml::from_str(text).map_err(|e| {
            ConfigError::new(
                "",
                "",
                format!("invalid config: {}", e.to_string().trim_end()),
            )
        })?;
        let mut config = config;
        config.name_certs_in_place();
        config.validate()?;
        Ok(config)
    }

    /// Turns certificate files written in place in a VIP into `[[cert]]`
    /// entries named `VIP-N` (N from 0), so every certificate has a name.
    pub fn name_certs_in_place(&mut self) {
        for i in 0..self.vips.len() {
            for j in 0..self.vips[i].certs.len() {
                let CertRef::Files(files) = &self.vips[i].certs[j] else {
                    continue;
                };
                let base = format!("{}-{j}", self.vips[i].name);
                let mut name = base.clone();
                let mut n = 1;
                while self.certs.iter().any(|c| c.name == name) {
                    name = format!("{base}.{n}");
                    n += 1;
                }
                self.certs.push(NamedCert {
                    name: name.clone(),
                    cert: files.cert.clone(),
                    key: files.key.clone(),
                    origin: Some(format!("vip[{i}].certs[{j}]")),
                });
                self.vips[i].certs[j] = CertRef::Name(name);
            }
        }
    }

    /// The `[[cert]]` entry named `name`.
    pub fn cert(&self, name: &str) -> Option<&NamedCert> {
        self.certs.iter().find(|c| c.name == name)
    }

    /// Why `ip` cannot be a VIP's address, if it cannot. dpd answers ARP
    /// and Neighbor Discovery for a VIP's address as its own, so one that
    /// is a neighbour's (a port's gateway, a pool member) would take that
    /// neighbour's traffic, the router's for the whole link; a subnet's
    /// network or broadcast address, loopback, multicast or broadcast is
    /// no host's. The unspecified address stays: a VIP on every address.
    fn vip_address_problem(&self, ip: IpAddr) -> Option<String> {
        let special = match ip {
            IpAddr::V4(a) => a.is_multicast() || a.is_broadcast() || a.is_loopback(),
            IpAddr::V6(a) => a.is_multicast() || a.is_loopback(),
        };
        if special {
            return Some(format!(
                "{ip} is a loopback, multicast or broadcast address, no host's"
            ));
        }
        // Announced ([routing]) on no port of ours, routers would send it
        // where nothing takes it.
        let has_v6 = || {
            self.ports
                .iter()
                .flat_map(Port::networks)
                .any(|n| n.ipv6_cidrs().is_ok_and(|c| !c.is_empty()))
        };
        if ip.is_ipv6() && !has_v6() {
            return Some("no port has an IPv6 address to take it".into());
        }
        for n in self.ports.iter().flat_map(Port::networks) {
            for (field, gw) in [("gateway", &n.gateway), ("gateway6", &n.gateway6)] {
                if gw.as_deref().and_then(|g| g.parse::<IpAddr>().ok()) == Some(ip) {
                    return Some(format!(
                        "is port {}'s {field}: dpd would answer ARP/ND for it and take the router's traffic",
                        n.name
                    ));
                }
            }
            if let (IpAddr::V4(a), Ok(c)) = (ip, n.cidr()) {
                let host = u32::from(a) & !c.mask();
                if c.prefix_len <= 30 && c.contains(a) && (host == 0 || host == !c.mask()) {
                    return Some(format!(
                        "is the network or broadcast address of port {}'s subnet",
                        n.name
                    ));
                }
            }
        }
        for pool in &self.pools {
            for m in &pool.members {
                if m.socket_addr().is_ok_and(|a| a.ip() == ip) {
                    return Some(format!(
                        "is the address of pool {}'s member {}: dpd would take its traffic",
                        pool.name, m.addr
                    ));
                }
            }
        }
        None
    }

    /// Checks the configuration as a whole (addresses, names, cores,
    /// devices). Does not look at the machine: `dpd` checks cores and
    /// interfaces exist when it starts.
    ///
    /// # Errors
    /// The first problem found, naming its field and value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.eal.lcores.is_empty() {
            return Err(ConfigError::new(
                "eal.lcores",
                "[]",
                "at least one dataplane core is needed",
            ));
        }
        if !self.eal.cpus.is_empty() && self.eal.cpus.len() != self.eal.lcores.len() {
            return Err(ConfigError::new(
                "eal.cpus",
                format!("{:?}", self.eal.cpus),
                "one CPU per entry of eal.lcores",
            ));
        }
        // With `cpus`, lcores are ids of DPDK's choosing (without, they are
        // CPUs, checked against the machine at start).
        if !self.eal.cpus.is_empty() {
            if let Some(i) = self.eal.lcores.iter().position(|&l| l >= 128) {
                return Err(ConfigError::new(
                    format!("eal.lcores[{i}]"),
                    self.eal.lcores[i],
                    "lcore ids are below 128 (DPDK's RTE_MAX_LCORE)",
                ));
            }
            if self.eal.lcores.len() >= 128 {
                return Err(ConfigError::new(
                    "eal.lcores",
                    self.eal.lcores.len(),
                    "at most 127 dataplane cores: one lcore id below 128 is the control thread's",
                ));
            }
        }
        if let Some(r) = &self.routing {
            let name = &r.interface;
            if name.is_empty()
                || name.len() >= 16
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
            {
                return Err(ConfigError::new(
                    "routing.interface",
                    name,
                    "an interface name: 1 to 15 letters, digits, '-', '_' or '.'",
                ));
            }
            if r.withdraw_quiet_ms == 0 || r.withdraw_quiet_ms > 600_000 {
                return Err(ConfigError::new(
                    "routing.withdraw_quiet_ms",
                    r.withdraw_quiet_ms,
                    "must be 1 to 600000 milliseconds",
                ));
            }
            if r.withdraw_wait_s == 0 || r.withdraw_wait_s > 3_600 {
                return Err(ConfigError::new(
                    "routing.withdraw_wait_s",
                    r.withdraw_wait_s,
                    "must be 1 to 3600 seconds",
                ));
            }
        }
        let mut seen = HashSet::new();
        for (i, core) in self.eal.lcores.iter().enumerate() {
            if !seen.insert(core) {
                return Err(ConfigError::new(
                    format!("eal.lcores[{i}]"),
                    core,
                    "core listed twice",
                ));
            }
        }
        for (i, arg) in self.eal.args.iter().enumerate() {
            let flag = arg.split('=').next().unwrap_or(arg);
            if matches!(
                flag,
                "-l" | "--lcores"
                    | "-c"
                    | "--main-lcore"
                    | "--vdev"
                    | "-a"
                    | "--allow"
                    | "-b"
                    | "--block"
            ) || ["-l", "-c", "-a", "-b"]
                .iter()
                .any(|short| arg.starts_with(short))
            {
                return Err(ConfigError::new(
                    format!("eal.args[{i}]"),
                    arg,
                    "cores and devices come from eal.lcores and [[port]]; do not pass them as EAL arguments",
                ));
            }
        }
        if self.eal.mbufs < 1024 {
            return Err(ConfigError::new(
                "eal.mbufs",
                self.eal.mbufs,
                "at least 1024 packet buffers are needed",
            ));
        }
        if self.ports.is_empty() {
            return Err(ConfigError::new(
                "port",
                "",
                "at least one [[port]] is needed",
            ));
        }
        let mut names = HashSet::new();
        let mut devices = HashSet::new();
        let mut ifaces: Vec<(String, Option<String>)> = Vec::new();
        for (i, port) in self.ports.iter().enumerate() {
            let at = |f: &str| format!("port[{i}].{f}");
            if port.name.is_empty()
                || !port
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(ConfigError::new(
                    at("name"),
                    &port.name,
                    "use letters, digits, '-' and '_'",
                ));
            }
            if !names.insert(port.name.as_str()) {
                return Err(ConfigError::new(
                    at("name"),
                    &port.name,
                    "another port has this name",
                ));
            }
            let kind = port
                .device_kind()
                .map_err(|reason| ConfigError::new(at("device"), &port.device, reason))?;
            if !devices.insert(kind.key()) {
                return Err(ConfigError::new(
                    at("device"),
                    &port.device,
                    "another port uses this device",
                ));
            }
            if ifaces.iter().any(|i| kind.shares_frames_with(i)) {
                return Err(ConfigError::new(
                    at("device"),
                    &port.device,
                    "another port uses this kernel interface (each would get every frame)",
                ));
            }
            ifaces.extend(kind.kernel_iface());
            let is_bond = matches!(&kind, DeviceKind::Virtual { name, .. } if name.starts_with("net_bonding"));
            if is_bond && port.bond_members.is_empty() {
                return Err(ConfigError::new(
                    at("device"),
                    &port.device,
                    "a bond needs its members: bond_members = [\"DEVICE\", ...] (DPDK would not make it)",
                ));
            }
            if !port.bond_members.is_empty() {
                let bond_name = matches!(&kind, DeviceKind::Virtual { name, spec } if name.starts_with("net_bonding") && spec == name);
                if !bond_name {
                    return Err(ConfigError::new(
                        at("device"),
                        &port.device,
                        "a port with bond_members names its bond: net_bonding0, net_bonding1, ... (no arguments)",
                    ));
                }
                for (j, m) in port.members().enumerate() {
                    let at = |f: &str| format!("port[{i}].bond_members[{j}]{f}");
                    let kind = m
                        .device_kind()
                        .map_err(|reason| ConfigError::new(at(""), &m.device, reason))?;
                    if matches!(kind, DeviceKind::VnetTap { .. })
                        || matches!(&kind, DeviceKind::Virtual { name, .. } if name.starts_with("net_bonding"))
                    {
                        return Err(ConfigError::new(
                            at(""),
                            &m.device,
                            "a bond's member is a NIC or a DPDK virtual device",
                        ));
                    }
                    if !devices.insert(kind.key())
                        || ifaces.iter().any(|i| kind.shares_frames_with(i))
                    {
                        return Err(ConfigError::new(
                            at(""),
                            &m.device,
                            "another port or member uses this device",
                        ));
                    }
                    ifaces.extend(kind.kernel_iface());
                }
            }
            check_addressing(port, &at)?;
            let mut ids = HashSet::new();
            let mut subnets = vec![port
                .cidr()
                .map_err(|r| ConfigError::new(at("address"), &port.address, r))?];
            for (j, v) in port.vlans.iter().enumerate() {
                let at = |f: &str| format!("port[{i}].vlan[{j}].{f}");
                if !(1..=4094).contains(&v.id) {
                    return Err(ConfigError::new(at("id"), v.id, "a VLAN id is 1 to 4094"));
                }
                if !ids.insert(v.id) {
                    return Err(ConfigError::new(
                        at("id"),
                        v.id,
                        "another VLAN of this port has this id",
                    ));
                }
                let net = port.vlan_network(v);
                check_addressing(&net, &at)?;
                let cidr = net
                    .cidr()
                    .map_err(|r| ConfigError::new(at("address"), &v.address, r))?;
                if let Some(other) = subnets.iter().find(|c| c.overlaps(&cidr)) {
                    return Err(ConfigError::new(
                        at("address"),
                        cidr.to_string(),
                        format!("overlaps {other}, another network of this port"),
                    ));
                }
                subnets.push(cidr);
            }
            if !(MIN_MTU..=MAX_MTU).contains(&port.mtu) {
                return Err(ConfigError::new(
                    at("mtu"),
                    port.mtu,
                    format!(
                        "must be {MIN_MTU} (IPv6's minimum) to {MAX_MTU} (9,216-byte jumbo frames)"
                    ),
                ));
            }
            if port.mtu > DEFAULT_MTU && matches!(kind, DeviceKind::VnetTap { .. }) {
                return Err(ConfigError::new(
                    at("mtu"),
                    port.mtu,
                    "a vnet_tap port carries frames of 1500 at most (its large segments come by TSO)",
                ));
            }
            if let DeviceKind::Virtual { name, spec } = &kind {
                if name.starts_with("net_af_packet") {
                    check_af_packet_frames(spec, port.mtu)
                        .map_err(|r| ConfigError::new(at("device"), &port.device, r))?;
                }
            }
            for (field, n) in [("rx_desc", port.rx_desc), ("tx_desc", port.tx_desc)] {
                if !(64..=16384).contains(&n) || !n.is_power_of_two() {
                    return Err(ConfigError::new(
                        at(field),
                        n,
                        "must be a power of two from 64 to 16384",
                    ));
                }
            }
        }
        let mut vip_names = HashSet::new();
        let mut listens = HashSet::new();
        self.control
            .metrics_addr()
            .map_err(|r| ConfigError::new("control.metrics", &self.control.metrics, r))?;
        let mut cert_names = HashSet::new();
        for (k, c) in self.certs.iter().enumerate() {
            let at = c.origin.clone().unwrap_or_else(|| format!("cert[{k}]"));
            check_name(&format!("{at}.name"), &c.name)?;
            if !cert_names.insert(c.name.as_str()) {
                return Err(ConfigError::new(
                    format!("{at}.name"),
                    &c.name,
                    "another [[cert]] has this name",
                ));
            }
            check_cert_paths(
                &at,
                &CertFiles {
                    cert: c.cert.clone(),
                    key: c.key.clone(),
                },
            )?;
        }
        check_log_level(&self.log.level)
            .map_err(|why| ConfigError::new("log.level", &self.log.level, why))?;
        if let Some(file) = &self.log.connections {
            let shown = file.display().to_string();
            if !file.is_absolute() {
                let why = "must be an absolute path";
                return Err(ConfigError::new("log.connections", &shown, why));
            }
            if file.file_name().is_none() || shown.ends_with('/') {
                let why = "must name a file";
                return Err(ConfigError::new("log.connections", &shown, why));
            }
        }
        if let Some(ends) = &self.log.connection_ends {
            let shown = ends.iter().map(|e| e.name()).collect::<Vec<_>>().join(", ");
            if self.log.connections.is_none() {
                let why = "needs log.connections (the file to log to)";
                return Err(ConfigError::new("log.connection_ends", &shown, why));
            }
            if ends.is_empty() {
                let why = "an empty list logs nothing: leave log.connections out instead";
                return Err(ConfigError::new("log.connection_ends", &shown, why));
            }
        }
        let mut pool_names = HashSet::new();
        for (i, pool) in self.pools.iter().enumerate() {
            let at = |f: &str| format!("pool[{i}].{f}");
            check_name(&at("name"), &pool.name)?;
            if !pool_names.insert(pool.name.as_str()) {
                return Err(ConfigError::new(
                    at("name"),
                    &pool.name,
                    "another pool has this name",
                ));
            }
            if pool.members.is_empty() || pool.members.len() > 64 {
                return Err(ConfigError::new(
                    at("members"),
                    pool.members.len(),
                    "a pool has 1 to 64 members",
                ));
            }
            if !(1..=60_000).contains(&pool.connect_timeout_ms) {
                return Err(ConfigError::new(
                    at("connect_timeout_ms"),
                    pool.connect_timeout_ms,
                    "must be 1 to 60000",
                ));
            }
            if pool.fail_timeout_ms > 3_600_000 {
                return Err(ConfigError::new(
                    at("fail_timeout_ms"),
                    pool.fail_timeout_ms,
                    "must be 0 (never) to 3600000",
                ));
            }
            if !(1..=64).contains(&pool.connect_tries) {
                return Err(ConfigError::new(
                    at("connect_tries"),
                    pool.connect_tries,
                    "must be 1 to 64",
                ));
            }
            if let Some(h) = &pool.health {
                if !(10..=3_600_000).contains(&h.interval_ms) {
                    return Err(ConfigError::new(
                        at("health.interval_ms"),
                        h.interval_ms,
                        "must be 10 to 3600000",
                    ));
                }
                if h.timeout_ms == 0 || h.timeout_ms > h.interval_ms {
                    return Err(ConfigError::new(
                        at("health.timeout_ms"),
                        h.timeout_ms,
                        "must be 1 to interval_ms",
                    ));
                }
                if !(1..=100).contains(&h.rise) || !(1..=100).contains(&h.fall) {
                    return Err(ConfigError::new(
                        at("health.rise"),
                        format!("{}/{}", h.rise, h.fall),
                        "rise and fall must be 1 to 100",
                    ));
                }
                if !h.path.starts_with('/')
                    || h.path.len() > 1024
                    || h.path.bytes().any(|b| b <= b' ' || b == 0x7f)
                {
                    return Err(ConfigError::new(
                        at("health.path"),
                        &h.path,
                        "an absolute path without spaces or control bytes",
                    ));
                }
                // RFC 3986's host and port: no byte that could end the
                // field or the head.
                let authority = |b: u8| b.is_ascii_alphanumeric() || b"-._~:[]".contains(&b);
                if let Some(host) = &h.host {
                    if host.is_empty() || host.len() > 255 || !host.bytes().all(authority) {
                        return Err(ConfigError::new(
                            at("health.host"),
                            host,
                            "a host name or address, with a port if wanted (app.example, app.example:8080)",
                        ));
                    }
                }
                let e = h.expect;
                if !(100..=599).contains(&e.low) || !(e.low..=599).contains(&e.high) {
                    return Err(ConfigError::new(
                        at("health.expect"),
                        e,
                        "HTTP statuses from 100 to 599, the lower first (200, \"200-399\", \"2xx\")",
                    ));
                }
            }
            let mut addrs = HashSet::new();
            for (j, m) in pool.members.iter().enumerate() {
                let at = |f: &str| format!("pool[{i}].members[{j}].{f}");
                let a = m
                    .socket_addr()
                    .map_err(|r| ConfigError::new(at("addr"), &m.addr, r))?;
                if !addrs.insert(a) {
                    return Err(ConfigError::new(at("addr"), &m.addr, "listed twice"));
                }
                let no_host = match a.ip() {
                    IpAddr::V4(ip) => {
                        ip.is_unspecified()
                            || ip.is_loopback()
                            || ip.is_multicast()
                            || ip.is_broadcast()
                    }
                    IpAddr::V6(ip) => ip.is_unspecified() || ip.is_loopback() || ip.is_multicast(),
                };
                if no_host {
                    // Accepted, it was only ever shown down.
                    return Err(ConfigError::new(
                        at("addr"),
                        &m.addr,
                        "an unspecified, loopback, multicast or broadcast address is no backend's",
                    ));
                }
                if !self.ports.iter().any(|p| p.reaches(a.ip())) {
                    return Err(ConfigError::new(
                        at("addr"),
                        &m.addr,
                        "not on a port's subnet, and no port has a gateway for its family",
                    ));
                }
                if !(1..=256).contains(&m.weight) {
                    return Err(ConfigError::new(at("weight"), m.weight, "must be 1 to 256"));
                }
            }
        }
        for (i, vip) in self.vips.iter().enumerate() {
            let at = |f: &str| format!("vip[{i}].{f}");
            if !(100..=300_000).contains(&vip.handshake_timeout_ms) {
                return Err(ConfigError::new(
                    at("handshake_timeout_ms"),
                    vip.handshake_timeout_ms,
                    "must be 100 to 300000",
                ));
            }
            if !(100..=3_600_000).contains(&vip.request_timeout_ms) {
                return Err(ConfigError::new(
                    at("request_timeout_ms"),
                    vip.request_timeout_ms,
                    "must be 100 to 3600000",
                ));
            }
            if !(1_000..=3_600_000).contains(&vip.send_timeout_ms) {
                return Err(ConfigError::new(
                    at("send_timeout_ms"),
                    vip.send_timeout_ms,
                    "must be 1000 to 3600000",
                ));
            }
            if let Some(idle) = vip.idle_timeout_s.filter(|s| !(1..=86_400).contains(s)) {
                return Err(ConfigError::new(
                    at("idle_timeout_s"),
                    idle,
                    "must be 1 to 86400",
                ));
            }
            if let Some(n) = vip
                .max_connections
                .filter(|n| !(1..=16_000_000).contains(n))
            {
                return Err(ConfigError::new(
                    at("max_connections"),
                    n,
                    "must be 1 to 16000000",
                ));
            }
            if let Some(n) = vip
                .max_new_per_source
                .filter(|n| !(1..=1_000_000).contains(n))
            {
                return Err(ConfigError::new(
                    at("max_new_per_source"),
                    n,
                    "must be 1 to 1000000 a second",
                ));
            }
            if let Some(n) = vip
                .max_connections_per_source
                .filter(|n| !(1..=16_000_000).contains(n))
            {
                return Err(ConfigError::new(
                    at("max_connections_per_source"),
                    n,
                    "must be 1 to 16000000",
                ));
            }
            match (&vip.respond, &vip.pool) {
                (Some(_), None) => {}
                (None, Some(p)) if pool_names.contains(p.as_str()) => {}
                (None, Some(p)) => {
                    return Err(ConfigError::new(at("pool"), p, "no [[pool]] has this name"))
                }
                _ => {
                    return Err(ConfigError::new(
                        at("respond"),
                        "",
                        "give either respond = \"builtin\" or pool = \"NAME\"",
                    ))
                }
            }
            if !vip.routes.is_empty() && (vip.pool.is_none() || vip.certs.is_empty()) {
                return Err(ConfigError::new(
                    at("routes"),
                    "",
                    "routes pick a pool by the TLS client's SNI: they need certs and a pool (for clients no route takes)",
                ));
            }
            if vip.routes.len() > MAX_ROUTES {
                return Err(ConfigError::new(
                    at("routes"),
                    vip.routes.len(),
                    format!("at most {MAX_ROUTES}"),
                ));
            }
            if vip.allow.len() > MAX_DENIED {
                return Err(ConfigError::new(
                    at("allow"),
                    vip.allow.len(),
                    format!("at most {MAX_DENIED} networks"),
                ));
            }
            for (j, a) in vip.allow.iter().enumerate() {
                parse_prefix(a)
                    .map_err(|why| ConfigError::new(format!("vip[{i}].allow[{j}]"), a, why))?;
            }
            let mut snis = HashSet::new();
            for (j, r) in vip.routes.iter().enumerate() {
                let at = |f: &str| format!("vip[{i}].routes[{j}].{f}");
                check_route_name(&r.sni).map_err(|why| ConfigError::new(at("sni"), &r.sni, why))?;
                if !snis.insert(r.sni.to_ascii_lowercase()) {
                    return Err(ConfigError::new(
                        at("sni"),
                        &r.sni,
                        "another route has this name",
                    ));
                }
                if !pool_names.contains(r.pool.as_str()) {
                    return Err(ConfigError::new(
                        at("pool"),
                        &r.pool,
                        "no [[pool]] has this name",
                    ));
                }
            }
            check_name(&at("name"), &vip.name)?;
            if !vip_names.insert(vip.name.as_str()) {
                return Err(ConfigError::new(
                    at("name"),
                    &vip.name,
                    "another VIP has this name",
                ));
            }
            let addr = vip
                .listen_addr()
                .map_err(|r| ConfigError::new(at("listen"), &vip.listen, r))?;
            if let Some(why) = self.vip_address_problem(addr.ip()) {
                return Err(ConfigError::new(at("listen"), &vip.listen, why));
            }
            // With [routing] a VIP is routed to this node's addresses, so
            // it may be on no subnet of ours.
            if self.routing.is_none() && !self.ports.iter().any(|p| p.on_subnet(addr.ip())) {
                return Err(ConfigError::new(
                    at("listen"),
                    &vip.listen,
                    "the address must be on one of the ports' subnets (or announced: [routing])",
                ));
            }
            for (j, c) in vip.certs.iter().enumerate() {
                match c {
                    CertRef::Name(n) if cert_names.contains(n.as_str()) => {}
                    CertRef::Name(n) => {
                        return Err(ConfigError::new(
                            format!("vip[{i}].certs[{j}]"),
                            n,
                            "no [[cert]] has this name",
                        ))
                    }
                    CertRef::Files(f) => check_cert_paths(&format!("vip[{i}].certs[{j}]"), f)?,
                }
            }
            if vip.tls.is_some() && vip.certs.is_empty() {
                return Err(ConfigError::new(
                    at("tls"),
                    "",
                    "a TLS policy needs certificates (certs = [...])",
                ));
            }
            if let Some(t) = vip.tls.as_ref().and_then(|t| t.tickets.as_ref()) {
                if t.rotate_s == 0 || t.rotate_s > 7 * 86_400 {
                    return Err(ConfigError::new(
                        at("tls.tickets.rotate_s"),
                        t.rotate_s,
                        "must be 1 to 604800 seconds (tickets live at most 7 days, RFC 8446)",
                    ));
                }
            }
            // The built-in responder speaks HTTP/1.x: a client that
            // negotiated another protocol (h2) would get no answer at all.
            let alpn = vip.tls.as_ref().and_then(|t| t.alpn.as_deref());
            if let Some(p) = alpn
                .filter(|_| vip.respond.is_some())
                .and_then(|ps| ps.iter().find(|p| !BUILTIN_ALPN.contains(&p.as_str())))
            {
                return Err(ConfigError::new(
                    at("tls.alpn"),
                    p,
                    "the built-in responder speaks HTTP/1.x only: offer \"http/1.1\" and \"http/1.0\" at most",
                ));
            }
            if !listens.insert(addr) {
                return Err(ConfigError::new(
                    at("listen"),
                    &vip.listen,
                    "another VIP listens here",
                ));
            }
        }
        self.access.validate()?;
        if self.tcp.max_connections == 0 || self.tcp.max_connections > 16_000_000 {
            return Err(ConfigError::new(
                "tcp.max_connections",
                self.tcp.max_connections,
                "must be 1 to 16000000",
            ));
        }
        if !(16..=1_048_576).contains(&self.tcp.buffer_memory_mib) {
            return Err(ConfigError::new(
                "tcp.buffer_memory_mib",
                self.tcp.buffer_memory_mib,
                "must be 16 to 1048576 MiB",
            ));
        }
        if !(1..=86_400).contains(&self.tcp.idle_timeout_s) {
            return Err(ConfigError::new(
                "tcp.idle_timeout_s",
                self.tcp.idle_timeout_s,
                "must be 1 to 86400 seconds",
            ));
        }
        if !(1..=86_400).contains(&self.tcp.fin_wait2_timeout_s) {
            return Err(ConfigError::new(
                "tcp.fin_wait2_timeout_s",
                self.tcp.fin_wait2_timeout_s,
                "must be 1 to 86400 seconds",
            ));
        }
        if !(1..=120).contains(&self.tcp.handshake_timeout_s) {
            return Err(ConfigError::new(
                "tcp.handshake_timeout_s",
                self.tcp.handshake_timeout_s,
                "must be 1 to 120 seconds",
            ));
        }
        if !(1..=240).contains(&self.tcp.time_wait_s) {
            return Err(ConfigError::new(
                "tcp.time_wait_s",
                self.tcp.time_wait_s,
                "must be 1 to 240 seconds",
            ));
        }
        if self.eal.idle_sleep_us > 100_000 {
            return Err(ConfigError::new(
                "eal.idle_sleep_us",
                self.eal.idle_sleep_us,
                "at most 100000 (0.1 s)",
            ));
        }
        if self.tcp.max_time_wait > 16_000_000 {
            return Err(ConfigError::new(
                "tcp.max_time_wait",
                self.tcp.max_time_wait,
                "at most 16000000",
            ));
        }
        if self.tcp.max_half_open > self.tcp.max_connections {
            return Err(ConfigError::new(
                "tcp.max_half_open",
                self.tcp.max_half_open,
                "cannot exceed tcp.max_connections",
            ));
        }
        if self.tcp.max_half_open == 0 && self.tcp.syn_cookies == SynCookieMode::Off {
            return Err(ConfigError::new(
                "tcp.max_half_open",
                0,
                "with syn_cookies = \"off\" every SYN would be dropped: at least 1",
            ));
        }
        if self.control.socket.as_os_str().is_empty() {
            return Err(ConfigError::new("control.socket", "", "must be a path"));
        }
        if self.control.drain_timeout_s > 86_400 {
            return Err(ConfigError::new(
                "control.drain_timeout_s",
                self.control.drain_timeout_s,
                "must be 0 (SIGTERM resets open connections at once) to 86400 seconds",
            ));
        }
        // A connection idle that long is reset before its first probe.
        if self.tcp.keepalive_s != 0 && self.tcp.keepalive_s >= self.tcp.idle_timeout_s {
            return Err(ConfigError::new(
                "tcp.keepalive_s",
                self.tcp.keepalive_s,
                format!(
                    "keepalive probes would never go: the idle timeout (tcp.idle_timeout_s = {}) resets the connection first; set it below that, or 0 for none",
                    self.tcp.idle_timeout_s
                ),
            ));
        }
        Ok(())
    }

    /// The configuration as TOML (what `dpctl config save` writes); it
    /// parses back to an equal configuration.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("the configuration serialises")
    }

    /// Whether any port (or bond member) is a PCI device (else EAL gets
    /// `--no-pci`).
    pub fn has_pci_port(&self) -> bool {
        self.ports.iter().any(|p| {
            matches!(p.device_kind(), Ok(DeviceKind::Pci(_)))
                || p.members()
                    .any(|m| matches!(m.device_kind(), Ok(DeviceKind::Pci(_))))
        })
    }
}

/// Checks one network's addresses and gateways (a port's untagged one, or
/// a VLAN's as [`Port::vlan_network`] gives it); `at` names a field.
fn check_addressing(port: &Port, at: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    let cidr = port.cidr().map_err(|reason| {
        if port.address.is_empty() {
            ConfigError::new(at("addresses"), port.addresses.join(", "), reason)
        } else {
            ConfigError::new(at("address"), &port.address, reason)
        }
    })?;
    let v6 = port
        .ipv6_cidrs()
        .map_err(|(value, reason)| ConfigError::new(at("addresses"), value, reason))?;
    if let Some(gw) = &port.gateway6 {
        let ip: Ipv6Addr = gw
            .parse()
            .map_err(|_| ConfigError::new(at("gateway6"), gw, "not an IPv6 address"))?;
        if v6.is_empty() {
            return Err(ConfigError::new(
                at("gateway6"),
                gw,
                "the port has no IPv6 address",
            ));
        }
        let link_local = ip.segments()[0] & 0xffc0 == 0xfe80;
        if !link_local && !v6.iter().any(|c| c.contains(ip)) {
            return Err(ConfigError::new(
                at("gateway6"),
                gw,
                "neither link-local nor on one of the port's prefixes",
            ));
        }
        if v6.iter().any(|c| c.addr == ip) || ip.is_multicast() {
            return Err(ConfigError::new(
                at("gateway6"),
                gw,
                "is not a neighbour's unicast address",
            ));
        }
    }
    if let Some(gw) = &port.gateway {
        let ip: Ipv4Addr = gw
            .parse()
            .map_err(|_| ConfigError::new(at("gateway"), gw, "not an IPv4 address"))?;
        if !cidr.contains(ip) {
            return Err(ConfigError::new(
                at("gateway"),
                gw,
                format!("not on the port's subnet {cidr}"),
            ));
        }
        if ip == cidr.addr {
            return Err(ConfigError::new(
                at("gateway"),
                gw,
                "is the port's own address",
            ));
        }
    }
    Ok(())
}

impl Port {
    /// The networks of the port: its untagged one, then one per VLAN,
    /// each as a port with that network's addresses (named `PORT.ID`).
    pub fn networks(&self) -> impl Iterator<Item = Port> + '_ {
        std::iter::once(Port {
            vlans: Vec::new(),
            ..self.clone()
        })
        .chain(self.vlans.iter().map(|v| self.vlan_network(v)))
    }

    /// VLAN `v` of this port as a port with its addresses.
    pub fn vlan_network(&self, v: &Vlan) -> Port {
        Port {
            name: format!("{}.{}", self.name, v.id),
            address: v.address.clone(),
            addresses: v.addresses.clone(),
            gateway: v.gateway.clone(),
            gateway6: v.gateway6.clone(),
            vlans: Vec::new(),
            ..self.clone()
        }
    }

    /// Whether `ip` is on one of the port's subnets (IPv4 or IPv6, its
    /// VLANs' included).
    pub fn on_subnet(&self, ip: IpAddr) -> bool {
        self.networks().any(|n| n.on_own_subnet(ip))
    }

    fn on_own_subnet(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => self.cidr().is_ok_and(|c| c.contains(a)),
            IpAddr::V6(a) => self
                .ipv6_cidrs()
                .is_ok_and(|cs| cs.iter().any(|c| c.contains(a))),
        }
    }

    /// Whether the port reaches `ip`: on one of its subnets, or through
    /// a gateway of that family (its own or a VLAN's).
    pub fn reaches(&self, ip: IpAddr) -> bool {
        self.networks().any(|n| {
            let gateway = match ip {
                IpAddr::V4(_) => n.gateway.is_some(),
                IpAddr::V6(_) => {
                    n.gateway6.is_some() && n.ipv6_cidrs().is_ok_and(|cs| !cs.is_empty())
                }
            };
            gateway || n.on_own_subnet(ip)
        })
    }

    /// The port's IPv4 address: `address`, or the one IPv4 entry of
    /// `addresses`.
    ///
    /// # Errors
    /// A reason when there is none, more than one, or it is not
    /// `a.b.c.d/len` with a usable host address.
    pub fn cidr(&self) -> Result<Ipv4Cidr, String> {
        let mut v4 = self
            .addresses
            .iter()
            .filter(|a| a.split('/').next().is_some_and(|ip| !ip.contains(':')));
        let text = match (self.address.as_str(), v4.next(), v4.next()) {
            ("", None, _) => {
                return Err(
                    "a port needs an IPv4 address (`address` or in `addresses`), e.g. 10.77.0.1/24"
                        .into(),
                )
            }
            ("", Some(a), None) => a.as_str(),
            ("", Some(_), Some(_)) => {
                return Err(
                    "one IPv4 address per port (further ones are VIPs' listen addresses)".into(),
                )
            }
            (a, None, _) => a,
            (_, Some(_), _) => {
                return Err("the IPv4 address is given both in `address` and in `addresses`".into())
            }
        };
        Self::parse_cidr(text)
    }

    fn parse_cidr(text: &str) -> Result<Ipv4Cidr, String> {
        let (ip, len) = text
            .split_once('/')
            .ok_or("expected an IPv4 address with prefix length, e.g. 10.77.0.1/24")?;
        let addr: Ipv4Addr = ip
            .parse()
            .map_err(|_| format!("{ip:?} is not an IPv4 address"))?;
        let prefix_len: u8 = len
            .parse()
            .ok()
            .filter(|l| (1..=32).contains(l))
            .ok_or_else(|| format!("prefix length {len:?} is not 1 to 32"))?;
        if addr.is_unspecified() || addr.is_multicast() || addr.is_broadcast() || addr.is_loopback()
        {
            return Err(format!("{addr} cannot be a port's address"));
        }
        let cidr = Ipv4Cidr { addr, prefix_len };
        if prefix_len <= 30 {
            let host = u32::from(addr) & !cidr.mask();
            if host == 0 || host == !cidr.mask() {
                return Err(format!(
                    "{addr} is the network or broadcast address of /{prefix_len}"
                ));
            }
        }
        Ok(cidr)
    }

    /// The port's IPv6 addresses from `addresses`, in order.
    ///
    /// # Errors
    /// The entry and a reason when one is not `addr/len` with a usable
    /// global or unique local address, or is given twice.
    pub fn ipv6_cidrs(&self) -> Result<Vec<Ipv6Cidr>, (String, String)> {
        let mut out: Vec<Ipv6Cidr> = Vec::new();
        for entry in &self.addresses {
            let bad = |reason: String| (entry.clone(), reason);
            let Some((ip, len)) = entry.split_once('/') else {
                if entry.parse::<IpAddr>().is_ok() {
                    return Err(bad(
                        "expected a prefix length, e.g. 2001:db8:77::1/64".into()
                    ));
                }
                return Err(bad("expected an address with prefix length".into()));
            };
            if !ip.contains(':') {
                continue; // IPv4: `cidr`'s
            }
            let addr: Ipv6Addr = ip
                .parse()
                .map_err(|_| bad(format!("{ip:?} is not an IPv6 address")))?;
            let prefix_len: u8 = len
                .parse()
                .ok()
                .filter(|l| (1..=128).contains(l))
                .ok_or_else(|| bad(format!("prefix length {len:?} is not 1 to 128")))?;
            if addr.is_unspecified() || addr.is_multicast() || addr.is_loopback() {
                return Err(bad(format!("{addr} cannot be a port's address")));
            }
            if addr.segments()[0] & 0xffc0 == 0xfe80 {
                return Err(bad(
                    "link-local: a port with IPv6 has its own, made from its MAC".into(),
                ));
            }
            if addr.to_ipv4_mapped().is_some() {
                return Err(bad(format!("{addr} is an IPv4-mapped address")));
            }
            if out.iter().any(|c| c.addr == addr) {
                return Err(bad("given twice".into()));
            }
            out.push(Ipv6Cidr { addr, prefix_len });
        }
        Ok(out)
    }

    /// Classifies `device`.
    ///
    /// # Errors
    /// A reason when it is neither a PCI address nor a `net_*` virtual device.
    pub fn device_kind(&self) -> Result<DeviceKind, String> {
        let spec = self.device.trim();
        if let Some(pci) = parse_pci(spec) {
            return Ok(DeviceKind::Pci(pci));
        }
        let name = spec.split(',').next().unwrap_or_default();
        if name == "vnet_tap" {
            return parse_vnet_tap(spec);
        }
        if name.starts_with("net_")
            && name.len() > 4
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Ok(DeviceKind::Virtual {
                name: name.to_string(),
                spec: spec.to_string(),
            });
        }
        Err("expected a PCI address (0000:01:00.0), a DPDK virtual device (net_af_packet0,iface=IFACE) or vnet_tap,iface=TAP[,netns=NAMESPACE]".into())
    }

    /// This port's memif client settings, when its device is DPDK's memif
    /// in the client role (`net_memifN,role=client,...`): a client
    /// connects to its server when started, and DPDK 22.11 never connects
    /// it again by itself (dpd does: docs/architecture.md, "Ports").
    pub fn memif_client(&self) -> Option<MemifClient> {
        let spec = self.device.trim();
        let mut args = spec.split(',');
        if !args.next()?.starts_with("net_memif") {
            return None;
        }
        // DPDK's defaults, and its way of reading yes/no (a substring).
        let (mut client, mut socket, mut abstract_socket, mut zero_copy) =
            (false, "/run/memif.sock", true, false);
        for kv in args {
            match kv.split_once('=') {
                Some(("role", v)) => client = v == "client" || v == "slave",
                Some(("socket", v)) => socket = v,
                Some(("socket-abstract", v)) if v.contains("yes") => abstract_socket = true,
                Some(("socket-abstract", v)) if v.contains("no") => abstract_socket = false,
                Some(("zero-copy", v)) => zero_copy = v.contains("yes"),
                _ => {}
            }
        }
        client.then(|| MemifClient {
            socket: socket.to_string(),
            abstract_socket,
            zero_copy,
        })
    }

    /// The members of a bond, each as a port with that device (no
    /// addresses: the bond has them).
    pub fn members(&self) -> impl Iterator<Item = Port> + '_ {
        self.bond_members.iter().map(|d| Port {
            device: d.clone(),
            bond_members: Vec::new(),
            vlans: Vec::new(),
            ..self.clone()
        })
    }

    /// The EAL device argument of a bond in mode 4 (802.3ad) over its
    /// members, or `None` for a port that is not a bond.
    pub fn bond_devargs(&self) -> Option<String> {
        if self.bond_members.is_empty() {
            return None;
        }
        let mut spec = format!("{},mode=4", self.device.trim());
        for m in self.members() {
            let name = match m.device_kind() {
                Ok(DeviceKind::Pci(addr)) => addr,
                Ok(DeviceKind::Virtual { name, .. }) => name,
                _ => continue,
            };
            // DPDK 22.11's name for a member (`member` from 23.11 on).
            spec.push_str(&format!(",slave={name}"));
        }
        Some(spec)
    }

    /// The existing kernel interface a virtual device attaches to
    /// (`iface=` of `net_af_packet` and `net_af_xdp`), if any. `net_tap`
    /// makes the interface it names, so it need not exist.
    pub fn kernel_iface(&self) -> Option<&str> {
        if self.device.starts_with("net_tap") {
            return None;
        }
        if self.device.starts_with("vnet_tap") && self.device.contains("netns=") {
            return None; // in another namespace: the attach says
        }
        self.device
            .split(',')
            .skip(1)
            .find_map(|kv| kv.strip_prefix("iface="))
    }
}

/// `vnet_tap,iface=TAP[,netns=NAMESPACE]`.
fn parse_vnet_tap(spec: &str) -> Result<DeviceKind, String> {
    let (mut iface, mut netns) = (None, None);
    for kv in spec.split(',').skip(1) {
        match kv.split_once('=') {
            Some(("iface", v)) => iface = Some(v),
            Some(("netns", v)) => netns = Some(v),
            _ => {
                return Err(format!(
                    "vnet_tap: unknown argument {kv:?} (iface=, netns=)"
                ))
            }
        }
    }
    let name_ok = |s: &str, max: usize| {
        !s.is_empty()
            && s.len() <= max
            && !s.starts_with('.')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    let iface = iface.ok_or("vnet_tap: iface=TAP is required")?;
    if !name_ok(iface, 15) {
        return Err(format!("vnet_tap: {iface:?} is not an interface name (15 characters of letters, digits, '-', '_', '.')"));
    }
    if let Some(ns) = netns {
        if !name_ok(ns, 64) {
            return Err(format!("vnet_tap: {ns:?} is not a network namespace name"));
        }
    }
    Ok(DeviceKind::VnetTap {
        iface: iface.to_string(),
        netns: netns.map(str::to_string),
    })
}

/// `0000:01:00.0` or `01:00.0` → full form; anything else → None.
fn parse_pci(s: &str) -> Option<String> {
    let (rest, func) = s.rsplit_once('.')?;
    let parts: Vec<&str> = rest.split(':').collect();
    let (domain, bus, dev) = match parts.as_slice() {
        [d, b, v] => (*d, *b, *v),
        [b, v] => ("0000", *b, *v),
        _ => return None,
    };
    let hex = |t: &str, n: usize| t.len() == n && t.chars().all(|c| c.is_ascii_hexdigit());
    let func_ok = func.len() == 1 && matches!(func.as_bytes()[0], b'0'..=b'7');
    (hex(domain, 4) && hex(bus, 2) && hex(dev, 2) && func_ok).then(|| {
        format!(
            "{}:{}:{}.{}",
            domain.to_lowercase(),
            bus.to_lowercase(),
            dev.to_lowercase(),
            func
        )
    })
}

/// Names of VIPs, pools and certificates: what an operator types.
fn check_name(field: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(
            field,
            name,
            "1 to 64 letters, digits, '-', '_' or '.'",
        ))
    }
}

/// The levels a `[log] level` directive may name.
pub const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// Checks a `[log] level` filter: comma-separated directives, each a
/// level (the default for every target) or `target=level`, where target
/// is a module path (`dataplane::engine`, `rustls`, `dpdk`). Stricter than
/// `RUST_LOG`: a bare word that is not a level would read as "every level
/// of a target of that name", and a misspelt `level = "debgu"` would then
/// silence every other line.
///
/// # Errors
/// What is wrong, in words.
pub fn check_log_level(spec: &str) -> Result<(), String> {
    let is_level = |w: &str| LOG_LEVELS.iter().any(|l| l.eq_ignore_ascii_case(w));
    let levels = LOG_LEVELS.join(", ");
    if spec.trim().is_empty() {
        return Err(format!(
            "a level ({levels}) or a filter such as \"info,dataplane::engine=debug\""
        ));
    }
    if spec.len() > 1024 {
        return Err("at most 1,024 characters".into());
    }
    for directive in spec.split(',').map(str::trim) {
        match directive.split_once('=') {
            None if is_level(directive) => {}
            None => {
                return Err(format!(
                    "{directive:?} is not a level ({levels}); a target takes one: \"{directive}=debug\""
                ))
            }
            Some((target, level)) => {
                let target_ok = !target.is_empty()
                    && target
                        .split("::")
                        .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
                if !target_ok {
                    return Err(format!(
                        "{target:?} is not a target (a module path such as dataplane::engine)"
                    ));
                }
                if !is_level(level) {
                    return Err(format!("{level:?} (for {target}) is not a level ({levels})"));
                }
            }
        }
    }
    Ok(())
}

fn check_cert_paths(at: &str, f: &CertFiles) -> Result<(), ConfigError> {
    for (what, path) in [("cert", &f.cert), ("key", &f.key)] {
        if path.as_os_str().is_empty() {
            return Err(ConfigError::new(
                format!("{at}.{what}"),
                "",
                "must be a file path",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        [eal]
        lcores = [1]
        args = ["--in-memory"]
        [[port]]
        name = "p0"
        device = "net_af_packet0,iface=veth-dut"
        address = "10.77.0.1/24"
        gateway = "10.77.0.254"
        [control]
        socket = "/run/tlsdp/control.sock"
    "#;

    fn err_of(text: &str) -> ConfigError {
        Config::parse(text).expect_err("config should be refused")
    }

    #[test]
    fn a_log_level_is_levels_and_targets_given_levels() {
        for good in [
            "info",
            "WARN",
            "off",
            "info,dataplane::engine=debug",
            " warn , rustls=off, dpdk=info ",
            "dataplane::app::proxy=trace",
        ] {
            assert_eq!(check_log_level(good), Ok(()), "{good:?}");
        }
        for (bad, says) in [
            ("debgu", "not a level"),
            ("info,dataplane", "dataplane=debug"),
            ("dataplane=loud", "\"loud\" (for dataplane) is not a level"),
            ("=info", "not a target"),
            ("data-plane=info", "not a target"),
            ("a::::b=info", "not a target"),
            ("info/handshake", "not a level"),
            ("", "a level"),
            ("info,", "not a level"),
        ] {
            let e = check_log_level(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        let long = format!("info{}", ",dataplane=debug".repeat(100));
        assert!(check_log_level(&long).is_err());
        // In the file too, naming the field.
        let e = err_of(&format!("{GOOD}[log]\nlevel = \"infoo\"\n"));
        assert_eq!(e.field, "log.level", "{e}");
    }

    #[test]
    fn the_connection_log_is_an_absolute_file_and_is_saved() {
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(c.log.connections, None, "off by default");
        assert!(!c.to_toml().contains("\nconnections"));
        let on = format!("{GOOD}[log]\nconnections = \"/var/log/tlsdp/conn.log\"\n");
        let c = Config::parse(&on).unwrap();
        let want = Some(PathBuf::from("/var/log/tlsdp/conn.log"));
        assert_eq!(c.log.connections, want);
        assert_eq!(Config::parse(&c.to_toml()).unwrap().log, c.log);
        for (bad, says) in [
            ("conn.log", "absolute"),
            ("/var/log/", "a file"),
            ("/", "a file"),
        ] {
            let e = err_of(&format!("{GOOD}[log]\nconnections = \"{bad}\"\n"));
            assert_eq!(e.field, "log.connections", "{bad}: {e}");
            assert!(e.to_string().contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_connection_log_takes_a_list_of_ends_by_their_names() {
        let file = "[log]\nconnections = \"/var/log/tlsdp/conn.log\"\n";
        assert_eq!(
            Config::parse(&format!("{GOOD}{file}"))
                .unwrap()
                .log
                .connection_ends,
            None
        );
        let names: Vec<String> = ConnEnd::ALL
            .iter()
            .map(|e| format!("\"{}\"", e.name()))
            .collect();
        let all = format!("{GOOD}{file}connection_ends = [{}]\n", names.join(", "));
        let c = Config::parse(&all).unwrap();
        assert_eq!(c.log.connection_ends.as_deref(), Some(&ConnEnd::ALL[..]));
        assert_eq!(
            Config::parse(&c.to_toml()).unwrap().log,
            c.log,
            "saved as read"
        );
        let e = err_of(&format!("{GOOD}{file}connection_ends = []\n"));
        assert_eq!(e.field, "log.connection_ends", "{e}");
        let e = err_of(&format!("{GOOD}[log]\nconnection_ends = [\"closed\"]\n"));
        assert_eq!(e.field, "log.connection_ends", "{e}");
        assert!(e.to_string().contains("log.connections"), "{e}");
        // An unknown name is refused, the known ones listed.
        let e = Config::parse(&format!("{GOOD}{file}connection_ends = [\"closedd\"]\n"));
        let e = e.unwrap_err().to_string();
        assert!(e.contains("closedd") && e.contains("tls_failure"), "{e}");
    }

    #[test]
    fn routing_announces_vips_off_our_subnets_and_checks_its_fields() {
        let vip = "[[vip]]\nname = \"web\"\nlisten = \"10.90.0.1:80\"\nrespond = \"builtin\"\n";
        let e = err_of(&format!("{GOOD}{vip}"));
        assert_eq!(e.field, "vip[0].listen", "{e}");
        assert!(e.to_string().contains("[routing]"), "{e}");
        let c = Config::parse(&format!("{GOOD}[routing]\n{vip}")).unwrap();
        let r = c.routing.as_ref().unwrap();
        assert_eq!(r.interface, "tlsdp-vips");
        assert_eq!((r.withdraw_quiet_ms, r.withdraw_wait_s), (2_000, 30));
        // Written back as it was read.
        assert_eq!(Config::parse(&c.to_toml()).unwrap().routing, c.routing);
        for (bad, field) in [
            ("interface = \"a/b\"", "routing.interface"),
            ("interface = \"sixteen-chars-xx\"", "routing.interface"),
            ("withdraw_quiet_ms = 0", "routing.withdraw_quiet_ms"),
            ("withdraw_wait_s = 3601", "routing.withdraw_wait_s"),
        ] {
            let e = err_of(&format!("{GOOD}[routing]\n{bad}\n{vip}"));
            assert_eq!(e.field, field, "{bad}: {e}");
        }
    }

    #[test]
    fn a_vip_never_takes_a_neighbours_address_or_one_no_host_has() {
        // dpd answers ARP for a VIP's address: on the gateway's it would
        // take the router's traffic for the whole link, on a member's
        // the backend's.
        let pool = "[[pool]]\nname = \"app\"\nmembers = [{ addr = \"10.77.0.12:80\" }]\n";
        let vip = |listen: &str| {
            format!("{GOOD}{pool}[[vip]]\nname = \"web\"\nlisten = \"{listen}\"\npool = \"app\"\n")
        };
        for (listen, says) in [
            ("10.77.0.254:443", "port p0's gateway"),
            ("10.77.0.12:443", "pool app's member 10.77.0.12:80"),
            ("10.77.0.0:443", "network or broadcast"),
            ("10.77.0.255:443", "network or broadcast"),
            ("127.0.0.1:443", "loopback"),
            ("224.0.0.5:443", "multicast"),
            ("255.255.255.255:443", "broadcast"),
        ] {
            let e = err_of(&vip(listen));
            assert_eq!(e.field, "vip[0].listen", "{listen}: {e}");
            assert!(e.to_string().contains(says), "{listen}: {e}");
        }
        // Announced ones too ([routing]: no subnet needed).
        let routed = vip("10.77.0.254:443").replace("[[pool]]", "[routing]\n[[pool]]");
        assert!(err_of(&routed).to_string().contains("gateway"));
        // An IPv6 VIP announced from a node with no IPv6 port.
        let routed = vip("[2001:db8:99::10]:443").replace("[[pool]]", "[routing]\n[[pool]]");
        assert!(err_of(&routed)
            .to_string()
            .contains("no port has an IPv6 address"));
        // The port's own address and others on its subnet are fine.
        for listen in ["10.77.0.1:443", "10.77.0.10:443"] {
            Config::parse(&vip(listen)).unwrap();
        }
    }

    #[test]
    fn a_member_is_a_hosts_address_and_lcores_leave_one_for_the_control_thread() {
        for addr in [
            "127.0.0.1:80",
            "224.0.0.1:80",
            "0.0.0.0:80",
            "255.255.255.255:80",
            "[::1]:80",
        ] {
            let pool = format!("[[pool]]\nname = \"app\"\nmembers = [{{ addr = \"{addr}\" }}]\n");
            let e = err_of(&format!("{GOOD}{pool}"));
            assert_eq!(e.field, "pool[0].members[0].addr", "{addr}: {e}");
        }
        // 128 mapped lcores leave no id below 128 for the control thread
        // (dpd aborted as it planned its cores).
        let ids: Vec<String> = (0..128).map(|i| i.to_string()).collect();
        let cpus: Vec<String> = (0..128).map(|i| (i + 1).to_string()).collect();
        let text = GOOD.replace(
            "lcores = [1]",
            &format!(
                "lcores = [{}]\ncpus = [{}]",
                ids.join(", "),
                cpus.join(", ")
            ),
        );
        let e = err_of(&text);
        assert_eq!(e.field, "eal.lcores", "{e}");
        assert!(e.to_string().contains("at most 127"), "{e}");
    }

    #[test]
    fn good_config_parses_with_defaults() {
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(c.eal.lcores, vec![1]);
        assert_eq!(c.eal.hugepages, HugepagePolicy::Preferred);
        assert_eq!(c.ports[0].rx_desc, 1024);
        assert_eq!(c.ports[0].kernel_iface(), Some("veth-dut"));
        assert!(!c.has_pci_port());
        let cidr = c.ports[0].cidr().unwrap();
        assert!(cidr.contains("10.77.0.200".parse().unwrap()));
        assert!(!cidr.contains("10.77.1.1".parse().unwrap()));
        assert_eq!(
            c.ports[0].device_kind().unwrap(),
            DeviceKind::Virtual {
                name: "net_af_packet0".into(),
                spec: "net_af_packet0,iface=veth-dut".into()
            }
        );
    }

    #[test]
    fn memif_clients_are_told_from_servers_with_dpdks_defaults() {
        let port = |device: &str| Port {
            device: device.into(),
            ..Config::parse(GOOD).unwrap().ports[0].clone()
        };
        assert_eq!(
            port("net_memif0,role=client,socket=/tmp/m.sock,socket-abstract=no,zero-copy=yes")
                .memif_client(),
            Some(MemifClient {
                socket: "/tmp/m.sock".into(),
                abstract_socket: false,
                zero_copy: true
            })
        );
        assert_eq!(
            port("net_memif1,role=slave").memif_client(),
            Some(MemifClient {
                socket: "/run/memif.sock".into(),
                abstract_socket: true,
                zero_copy: false
            })
        );
        for not_client in [
            "net_memif0",
            "net_memif0,role=server,zero-copy=yes",
            "net_af_packet0,iface=veth0,role=client",
            "0000:01:00.0",
        ] {
            assert_eq!(port(not_client).memif_client(), None, "{not_client}");
        }
    }

    #[test]
    fn vnet_tap_devices_parse_and_bad_ones_are_named() {
        let port = |device: &str| Port {
            name: "p".into(),
            device: device.into(),
            address: "10.0.0.1/24".into(),
            addresses: Vec::new(),
            vlans: Vec::new(),
            bond_members: Vec::new(),
            gateway: None,
            gateway6: None,
            rx_desc: 1024,
            tx_desc: 1024,
            checksum_offload: true,
            segmentation_offload: true,
            mtu: DEFAULT_MTU,
        };
        assert_eq!(
            port("vnet_tap,iface=tap0,netns=lab-cli")
                .device_kind()
                .unwrap(),
            DeviceKind::VnetTap {
                iface: "tap0".into(),
                netns: Some("lab-cli".into())
            }
        );
        assert_eq!(
            port("vnet_tap,iface=tap0,netns=lab-cli").kernel_iface(),
            None
        );
        assert_eq!(port("vnet_tap,iface=tap0").kernel_iface(), Some("tap0"));
        for (bad, says) in [
            ("vnet_tap", "iface=TAP is required"),
            ("vnet_tap,iface=", "not an interface name"),
            ("vnet_tap,iface=a-very-long-name-x", "not an interface name"),
            ("vnet_tap,iface=t,netns=../x", "not a network namespace"),
            ("vnet_tap,iface=t,queues=2", "unknown argument"),
        ] {
            let e = port(bad).device_kind().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn vip_timeouts_default_and_are_checked() {
        let vip = |extra: &str| {
            format!("{GOOD}\n[[vip]]\nname = \"w\"\nlisten = \"10.77.0.1:80\"\nrespond = \"builtin\"\n{extra}\n")
        };
        let c = Config::parse(&vip("")).unwrap();
        let v = &c.vips[0];
        assert_eq!(
            (
                v.handshake_timeout_ms,
                v.request_timeout_ms,
                v.send_timeout_ms,
                v.idle_timeout_s
            ),
            (10_000, 30_000, 60_000, None)
        );
        // Defaults are not written back; others are, and parse again.
        assert!(!c.to_toml().contains("timeout_ms"));
        let set =
            vip("handshake_timeout_ms = 5000\nrequest_timeout_ms = 2000\nsend_timeout_ms = 9000\nidle_timeout_s = 60");
        let c = Config::parse(&set).unwrap();
        let again = Config::parse(&c.to_toml()).unwrap();
        assert_eq!(again.vips, c.vips);
        assert_eq!(c.vips[0].idle_timeout_s, Some(60));
        assert_eq!(c.vips[0].send_timeout_ms, 9_000);
        for (extra, field) in [
            ("handshake_timeout_ms = 50", "vip[0].handshake_timeout_ms"),
            ("request_timeout_ms = 0", "vip[0].request_timeout_ms"),
            ("send_timeout_ms = 999", "vip[0].send_timeout_ms"),
            ("idle_timeout_s = 0", "vip[0].idle_timeout_s"),
        ] {
            assert_eq!(err_of(&vip(extra)).field, field);
        }
    }

    #[test]
    fn vip_limits_and_buffer_memory_default_and_are_checked() {
        let vip = |extra: &str| {
            format!("{GOOD}\n[[vip]]\nname = \"w\"\nlisten = \"10.77.0.1:80\"\nrespond = \"builtin\"\n{extra}\n")
        };
        let c = Config::parse(&vip("")).unwrap();
        assert_eq!(
            (c.vips[0].max_connections, c.vips[0].max_new_per_source),
            (None, None)
        );
        assert_eq!(c.tcp.buffer_memory_mib, 1024);
        assert_eq!(c.vips[0].max_connections_per_source, None);
        let c = Config::parse(&vip(
            "max_connections = 1000\nmax_new_per_source = 20\nmax_connections_per_source = 50",
        ))
        .unwrap();
        assert_eq!(
            (c.vips[0].max_connections, c.vips[0].max_new_per_source),
            (Some(1000), Some(20))
        );
        assert_eq!(c.vips[0].max_connections_per_source, Some(50));
        assert_eq!(Config::parse(&c.to_toml()).unwrap().vips, c.vips);
        for (extra, field) in [
            ("max_connections = 0", "vip[0].max_connections"),
            ("max_new_per_source = 0", "vip[0].max_new_per_source"),
            (
                "max_connections_per_source = 0",
                "vip[0].max_connections_per_source",
            ),
        ] {
            assert_eq!(err_of(&vip(extra)).field, field);
        }
        let small = format!("{GOOD}\n[tcp]\nbuffer_memory_mib = 8\n");
        assert_eq!(err_of(&small).field, "tcp.buffer_memory_mib");
        // No half-open connection and no cookies: every SYN dropped.
        let none = format!("{GOOD}\n[tcp]\nmax_half_open = 0\nsyn_cookies = \"off\"\n");
        assert_eq!(err_of(&none).field, "tcp.max_half_open");
        let cookies = format!("{GOOD}\n[tcp]\nmax_half_open = 0\nsyn_cookies = \"always\"\n");
        assert!(Config::parse(&cookies).is_ok(), "cookies answer them all");
    }

    #[test]
    fn shipped_examples_are_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                n += 1;
            }
        }
        assert!(n > 0, "no examples in {}", dir.display());
    }

    #[test]
    fn tls_settings_parse_and_are_checked() {
        let vip = r#"
        [[vip]]
        name = "web"
        listen = "10.77.0.1:443"
        respond = "builtin"
        certs = [{ cert = "a.pem", key = "a.key" }]
        [vip.tls]
        versions = ["TLSv1.3"]
        groups = ["X25519MLKEM768", "X25519"]
        alpn = ["http/1.1"]
        tickets = { rotate_s = 600, key_file = "/etc/tlsdp/ticket.key" }
        "#;
        let c = Config::parse(&format!("{GOOD}{vip}")).unwrap();
        let t = c.vips[0].tls.as_ref().unwrap();
        assert_eq!(t.versions, ["TLSv1.3"]);
        assert_eq!(t.tickets.as_ref().unwrap().rotate_s, 600);
        assert!(t.suites.is_empty());
        let e = err_of(&format!("{GOOD}{}", vip.replace("alpn", "alpnn")));
        assert!(e.to_string().contains("unknown field `alpnn`"), "{e}");
        let e = err_of(&format!(
            "{GOOD}{}",
            vip.replace("rotate_s = 600", "rotate_s = 0")
        ));
        assert_eq!(e.field, "vip[0].tls.tickets.rotate_s", "{e}");
        let e = err_of(&format!(
            "{GOOD}{}",
            vip.replace(r#"certs = [{ cert = "a.pem", key = "a.key" }]"#, "")
        ));
        assert_eq!(e.field, "vip[0].tls", "{e}");
    }

    #[test]
    fn a_builtin_responder_offers_http_1_only() {
        let vip = |alpn: &str, serves: &str| {
            format!(
                "{GOOD}[[vip]]\nname = \"web\"\nlisten = \"10.77.0.1:443\"\n{serves}\n\
                 certs = [{{ cert = \"a.pem\", key = \"a.key\" }}]\ntls = {{ alpn = {alpn} }}\n\
                 [[pool]]\nname = \"web\"\nmembers = [{{ addr = \"10.77.0.12:80\" }}]\n"
            )
        };
        let builtin = "respond = \"builtin\"";
        for ok in [r#"["http/1.1"]"#, r#"["http/1.1", "http/1.0"]"#, "[]"] {
            Config::parse(&vip(ok, builtin)).unwrap();
        }
        let e = err_of(&vip(r#"["h2", "http/1.1"]"#, builtin));
        assert_eq!(
            (e.field.as_str(), e.value.as_str()),
            ("vip[0].tls.alpn", "h2"),
            "{e}"
        );
        assert!(e.to_string().contains("HTTP/1.x only"), "{e}");
        // A pool's backends may speak what the operator offers for them.
        Config::parse(&vip(r#"["h2", "http/1.1"]"#, "pool = \"web\"")).unwrap();
    }

    #[test]
    fn pools_parse_and_are_checked() {
        let text = r#"
        [[vip]]
        name = "web"
        listen = "10.77.0.1:443"
        pool = "web"
        [[pool]]
        name = "web"
        balance = "weighted_least_conn"
        members = [{ addr = "10.77.0.12:80", weight = 2 }, { addr = "10.77.0.13:80", state = "drain" }]
        "#;
        let c = Config::parse(&format!("{GOOD}{text}")).unwrap();
        assert_eq!(c.pools[0].balance, Balance::WeightedLeastConn);
        assert_eq!(c.pools[0].members[1].weight, 1);
        assert_eq!(c.pools[0].members[1].state, MemberState::Drain);
        let bad = |from: &str, to: &str| err_of(&format!("{GOOD}{}", text.replace(from, to)));
        assert_eq!(
            bad("pool = \"web\"", "pool = \"nope\"").field,
            "vip[0].pool"
        );
        assert_eq!(
            bad("weight = 2", "weight = 0").field,
            "pool[0].members[0].weight"
        );
        assert_eq!(
            bad("weight = 2", "weight = 257").field,
            "pool[0].members[0].weight"
        );
        assert_eq!(
            bad("10.77.0.12:80", "10.77.0.12").field,
            "pool[0].members[0].addr"
        );
        assert_eq!(
            bad("10.77.0.13:80", "10.77.0.12:80").field,
            "pool[0].members[1].addr"
        );
        let e = bad("balance = \"weighted_least_conn\"", "balance = \"random\"");
        assert!(e.to_string().contains("random"), "{e}");
        let e = bad("pool = \"web\"", "pool = \"web\"\nrespond = \"builtin\"");
        assert_eq!(e.field, "vip[0].respond", "{e}");
        // Health checks.
        let hc = "members = [{ addr = \"10.77.0.12:80\", weight = 2 }";
        let with = |h: &str| {
            Config::parse(&format!(
                "{GOOD}{}",
                text.replace(hc, &format!("health = {h}\n{hc}"))
            ))
        };
        let c = with("{ kind = \"http\", path = \"/health\" }").unwrap();
        let h = c.pools[0].health.as_ref().unwrap();
        assert_eq!(
            (h.interval_ms, h.timeout_ms, h.rise, h.fall, h.expect),
            (
                1000,
                500,
                2,
                3,
                StatusRange {
                    low: 200,
                    high: 399
                }
            )
        );
        // One status, a range or a class; each written back as read.
        for (text, low, high) in [
            ("204", 204, 204),
            ("\"200-299\"", 200, 299),
            ("\"3xx\"", 300, 399),
            ("\" 200 - 204 \"", 200, 204),
        ] {
            let c = with(&format!("{{ kind = \"http\", expect = {text} }}")).unwrap();
            let h = c.pools[0].health.as_ref().unwrap();
            assert_eq!(h.expect, StatusRange { low, high }, "{text}");
            let again = Config::parse(&c.to_toml()).unwrap();
            assert_eq!(again.pools[0].health.as_ref().unwrap().expect, h.expect);
        }
        for bad in [
            "\"1xx-9\"",
            "\"2xx-3xx\"",
            "\"xx\"",
            "\"0xx\"",
            "\"20x\"",
            "\"-\"",
            "-1",
            "70000",
            "\"+200\"",
        ] {
            assert!(
                with(&format!("{{ kind = \"http\", expect = {bad} }}")).is_err(),
                "{bad} taken"
            );
        }
        let field = |h: &str| with(h).unwrap_err().field;
        assert_eq!(
            field("{ kind = \"tcp\", timeout_ms = 2000 }"),
            "pool[0].health.timeout_ms"
        );
        assert_eq!(
            field("{ kind = \"tcp\", interval_ms = 1 }"),
            "pool[0].health.interval_ms"
        );
        assert_eq!(
            field("{ kind = \"http\", path = \"no slash\" }"),
            "pool[0].health.path"
        );
        for bad in ["99", "\"600\"", "\"399-200\"", "\"6xx\""] {
            assert_eq!(
                field(&format!("{{ kind = \"http\", expect = {bad} }}")),
                "pool[0].health.expect",
                "{bad}"
            );
        }
        assert_eq!(field("{ kind = \"tcp\", fall = 0 }"), "pool[0].health.rise");
        // A Host for members that serve by name; nothing that could end
        // the field or the head.
        for bad in ["", "a b", "a\\r\\nX: y", "a/b", "user@a"] {
            let h = format!("{{ kind = \"http\", host = \"{bad}\" }}");
            assert_eq!(field(&h), "pool[0].health.host", "{bad:?}");
        }
        let c = with("{ kind = \"http\", host = \"app.example:8080\" }").unwrap();
        assert_eq!(
            c.pools[0].health.as_ref().unwrap().host.as_deref(),
            Some("app.example:8080")
        );
        assert_eq!(Config::parse(&c.to_toml()).unwrap(), c);
        assert!(with("{ kind = \"icmp\" }")
            .unwrap_err()
            .to_string()
            .contains("icmp"));
        let e = bad(
            "balance = \"weighted_least_conn\"",
            "connect_timeout_ms = 0",
        );
        assert_eq!(e.field, "pool[0].connect_timeout_ms", "{e}");
        let e = bad(
            "balance = \"weighted_least_conn\"",
            "fail_timeout_ms = 3600001",
        );
        assert_eq!(e.field, "pool[0].fail_timeout_ms", "{e}");
        for tries in ["connect_tries = 0", "connect_tries = 65"] {
            let e = bad("balance = \"weighted_least_conn\"", tries);
            assert_eq!(e.field, "pool[0].connect_tries", "{e}");
        }
        // A member off every subnet, with no gateway to reach it.
        let no_gw = GOOD.replace("gateway = \"10.77.0.254\"", "");
        let e = err_of(&format!(
            "{no_gw}{}",
            text.replace("10.77.0.12:80", "10.99.0.12:80")
        ));
        assert_eq!(e.field, "pool[0].members[0].addr", "{e}");
    }

    #[test]
    fn metrics_address_is_checked() {
        assert_eq!(
            Config::parse(GOOD).unwrap().control.metrics_addr(),
            Ok(Some("127.0.0.1:9464".parse().unwrap()))
        );
        let off = GOOD.replace("socket = ", "metrics = \"\"\nsocket = ");
        assert_eq!(
            Config::parse(&off).unwrap().control.metrics_addr(),
            Ok(None)
        );
        let bad = GOOD.replace("socket = ", "metrics = \"localhost\"\nsocket = ");
        assert_eq!(err_of(&bad).field, "control.metrics");
    }

    /// A drain that could never end, and keepalive the idle timeout
    /// always beats, are refused naming the field; keepalive below the
    /// idle timeout, and a drain of 0, are taken.
    #[test]
    fn a_drain_without_end_and_keepalive_that_never_runs_are_refused() {
        let with = |control: &str, tcp: &str| {
            GOOD.replace("socket = ", &format!("{control}\nsocket = "))
                + &format!("\n[tcp]\n{tcp}\n")
        };
        assert_eq!(
            err_of(&with("drain_timeout_s = 4294967295", "")).field,
            "control.drain_timeout_s"
        );
        assert!(Config::parse(&with("drain_timeout_s = 0", "")).is_ok());
        let e = err_of(&with("", "keepalive_s = 7200"));
        assert_eq!(e.field, "tcp.keepalive_s");
        assert!(e.reason.contains("idle_timeout_s = 300"), "{e}");
        assert!(
            err_of(&with("", "keepalive_s = 60\nidle_timeout_s = 60")).field == "tcp.keepalive_s"
        );
        assert!(Config::parse(&with("", "keepalive_s = 60\nidle_timeout_s = 300")).is_ok());
    }

    /// Relative certificate, key and ticket key file paths are read
    /// against the configuration file's folder, whatever the working
    /// directory; absolute ones are left as they are. Before, against the
    /// working directory: `dpd --check` run beside the files passed, and
    /// the service (working directory /) failed to start.
    #[test]
    fn relative_files_are_read_beside_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "{GOOD}\n[[cert]]\nname = \"web\"\ncert = \"certs/chain.pem\"\nkey = \"/abs/key.pem\"\n\n\
             [[vip]]\nname = \"tls\"\nlisten = \"10.77.0.1:443\"\nrespond = \"builtin\"\n\
             certs = [\"web\", {{ cert = \"c2.pem\", key = \"k2.pem\" }}]\n\
             tls = {{ tickets = {{ key_file = \"ticket.key\" }} }}\n"
        );
        let file = dir.path().join("dpd.toml");
        std::fs::write(&file, text).unwrap();
        let cfg = Config::load(&file).unwrap();
        let web = cfg.cert("web").unwrap();
        assert_eq!(web.cert, dir.path().join("certs/chain.pem"));
        assert_eq!(web.key, Path::new("/abs/key.pem"));
        let inline = cfg.certs.iter().find(|c| c.name != "web").unwrap();
        assert_eq!(inline.cert, dir.path().join("c2.pem"));
        assert_eq!(inline.key, dir.path().join("k2.pem"));
        let tickets = cfg.vips[0].tls.as_ref().unwrap().tickets.as_ref().unwrap();
        assert_eq!(
            tickets.key_file.as_deref(),
            Some(&*dir.path().join("ticket.key"))
        );
    }

    #[test]
    fn unknown_key_is_named() {
        let e = err_of(&GOOD.replace("gateway =", "gatewy ="));
        assert!(e.to_string().contains("unknown field `gatewy`"), "{e}");
    }

    #[test]
    fn bad_address_names_field_and_value() {
        let e = err_of(&GOOD.replace("10.77.0.1/24", "10.77.0.300/24"));
        assert_eq!(e.field, "port[0].address");
        assert_eq!(e.value, "10.77.0.300/24");
        assert!(
            e.to_string()
                .contains("port[0].address = \"10.77.0.300/24\""),
            "{e}"
        );
        for bad in [
            "10.77.0.1",
            "10.77.0.1/33",
            "10.77.0.0/24",
            "10.77.0.255/24",
            "127.0.0.1/8",
        ] {
            let e = err_of(&GOOD.replace("10.77.0.1/24", bad));
            assert_eq!(e.field, "port[0].address", "{bad}: {e}");
        }
    }

    #[test]
    fn addresses_take_one_ipv4_and_any_ipv6() {
        let both = GOOD.replace(
            "address = \"10.77.0.1/24\"",
            "addresses = [\"10.77.0.1/24\", \"2001:db8:77::1/64\", \"fd00:77::1/48\"]\n        gateway6 = \"fe80::1\"",
        );
        let c = Config::parse(&both).unwrap();
        let p = &c.ports[0];
        assert_eq!(p.cidr().unwrap().to_string(), "10.77.0.1/24");
        let v6: Vec<String> = p
            .ipv6_cidrs()
            .unwrap()
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(v6, ["2001:db8:77::1/64", "fd00:77::1/48"]);
        // Written back as given, and read again alike.
        assert_eq!(Config::parse(&c.to_toml()).unwrap(), c);
        // `address` with IPv6 in `addresses`.
        let mixed = GOOD.replace(
            "gateway = ",
            "addresses = [\"2001:db8:77::1/64\"]\n        gateway6 = \"2001:db8:77::fe\"\n        gateway = ",
        );
        assert_eq!(
            Config::parse(&mixed).unwrap().ports[0]
                .ipv6_cidrs()
                .unwrap()
                .len(),
            1
        );
        let addresses = |list: &str| {
            GOOD.replace(
                "address = \"10.77.0.1/24\"",
                &format!("addresses = [{list}]"),
            )
        };
        for (list, field, what) in [
            ("", "port[0].addresses", "needs an IPv4 address"),
            (
                "\"2001:db8::1/64\"",
                "port[0].addresses",
                "needs an IPv4 address",
            ),
            (
                "\"10.77.0.1/24\", \"10.77.0.2/24\"",
                "port[0].addresses",
                "one IPv4 address",
            ),
            (
                "\"10.77.0.1/24\", \"2001:db8::1\"",
                "port[0].addresses",
                "prefix length",
            ),
            (
                "\"10.77.0.1/24\", \"2001:db8::1/129\"",
                "port[0].addresses",
                "1 to 128",
            ),
            (
                "\"10.77.0.1/24\", \"2001:db8::zz/64\"",
                "port[0].addresses",
                "not an IPv6",
            ),
            (
                "\"10.77.0.1/24\", \"fe80::1/64\"",
                "port[0].addresses",
                "link-local",
            ),
            (
                "\"10.77.0.1/24\", \"ff02::1/64\"",
                "port[0].addresses",
                "cannot be",
            ),
            (
                "\"10.77.0.1/24\", \"::ffff:10.0.0.1/96\"",
                "port[0].addresses",
                "IPv4-mapped",
            ),
            (
                "\"10.77.0.1/24\", \"2001:db8::1/64\", \"2001:db8::1/64\"",
                "port[0].addresses",
                "twice",
            ),
        ] {
            let e = err_of(&addresses(list));
            assert_eq!(e.field, field, "{list}: {e}");
            assert!(e.reason.contains(what), "{list}: {e}");
        }
        let e = err_of(&GOOD.replace(
            "gateway = ",
            "addresses = [\"10.77.0.1/24\"]\n        gateway = ",
        ));
        assert!(e.reason.contains("both"), "{e}");
        let gw6 = |gw: &str| {
            GOOD.replace(
                "gateway = ",
                &format!("addresses = [\"2001:db8:77::1/64\"]\n        gateway6 = \"{gw}\"\n        gateway = "),
            )
        };
        for (gw, what) in [
            ("2001:db8:99::1", "neither link-local"),
            ("2001:db8:77::1", "not a neighbour"),
            ("10.77.0.254", "not an IPv6"),
        ] {
            let e = err_of(&gw6(gw));
            assert_eq!(e.field, "port[0].gateway6", "{gw}: {e}");
            assert!(e.reason.contains(what), "{gw}: {e}");
        }
        let e = err_of(&GOOD.replace("gateway = ", "gateway6 = \"fe80::1\"\n        gateway = "));
        assert!(e.reason.contains("no IPv6 address"), "{e}");
    }

    #[test]
    fn gateway_must_be_on_subnet() {
        let e = err_of(&GOOD.replace("10.77.0.254", "10.78.0.1"));
        assert_eq!(e.field, "port[0].gateway");
        assert!(e.reason.contains("10.77.0.1/24"), "{e}");
        let e = err_of(&GOOD.replace("10.77.0.254", "ten"));
        assert_eq!(e.field, "port[0].gateway");
    }

    #[test]
    fn devices_are_classified() {
        let port = |d: &str| Port {
            name: "p".into(),
            device: d.into(),
            address: "10.0.0.1/24".into(),
            addresses: Vec::new(),
            vlans: Vec::new(),
            bond_members: Vec::new(),
            gateway: None,
            gateway6: None,
            rx_desc: 1024,
            tx_desc: 1024,
            checksum_offload: true,
            segmentation_offload: true,
            mtu: DEFAULT_MTU,
        };
        assert_eq!(
            port("0000:3B:00.1").device_kind().unwrap(),
            DeviceKind::Pci("0000:3b:00.1".into())
        );
        assert_eq!(
            port("01:00.0").device_kind().unwrap(),
            DeviceKind::Pci("0000:01:00.0".into())
        );
        assert!(port("eth0").device_kind().is_err());
        assert!(port("net_").device_kind().is_err());
        assert!(port("01:00.9").device_kind().is_err());
        let e = err_of(&GOOD.replace("net_af_packet0,iface=veth-dut", "veth-dut"));
        assert_eq!(e.field, "port[0].device");
    }

    #[test]
    fn cores_and_names_checked() {
        assert_eq!(
            err_of(&GOOD.replace("lcores = [1]", "lcores = []")).field,
            "eal.lcores"
        );
        assert_eq!(
            err_of(&GOOD.replace("lcores = [1]", "lcores = [1, 1]")).field,
            "eal.lcores[1]"
        );
        let e = err_of(&GOOD.replace(r#"args = ["--in-memory"]"#, r#"args = ["-l", "0-3"]"#));
        assert_eq!(e.field, "eal.args[0]");
        // Short flags with their value attached too (a device allowed or
        // blocked behind [[port]]'s back).
        for arg in ["-a0000:01:00.0", "-b0000:01:00.1", "-l0-3", "-c0xf"] {
            let e =
                err_of(&GOOD.replace(r#"args = ["--in-memory"]"#, &format!(r#"args = ["{arg}"]"#)));
            assert_eq!(e.field, "eal.args[0]", "{arg}");
        }
        let two = format!(
            "{GOOD}\n[[port]]\nname = \"p0\"\ndevice = \"net_af_packet1,iface=x\"\naddress = \"10.1.0.1/24\"\n"
        );
        let e = err_of(&two);
        assert_eq!((e.field.as_str(), e.value.as_str()), ("port[1].name", "p0"));
        let e = err_of(
            &GOOD
                .replace("rx_desc", "x")
                .replace("gateway = \"10.77.0.254\"", "rx_desc = 1000"),
        );
        assert_eq!(e.field, "port[0].rx_desc");
    }

    /// Two ports on one kernel interface (two af_packet devices, or an
    /// af_packet device and a vnet_tap in dpd's namespace) are refused:
    /// each would get every frame. Before, only the DPDK device name was
    /// compared. The same name in another namespace is another interface,
    /// and af_xdp ports on one NIC's separate queues see separate frames.
    #[test]
    fn two_ports_on_one_kernel_interface_are_refused() {
        let xdp = |q: u32| format!("net_af_xdp{q},iface=eth9,start_queue={q}");
        let pair = |a: &str, b: &str| {
            format!(
                "{}\n[[port]]\nname = \"p1\"\ndevice = \"{b}\"\naddress = \"10.1.0.1/24\"\n",
                GOOD.replace("net_af_packet0,iface=veth-dut", a)
            )
        };
        assert!(Config::parse(&pair(&xdp(0), &xdp(1))).is_ok());
        let same_queue = pair(&xdp(1), "net_af_xdp0,iface=eth9,start_queue=1");
        assert_eq!(err_of(&same_queue).field, "port[1].device");
        let beside_packet = pair("net_af_packet0,iface=eth9", &xdp(1));
        assert_eq!(err_of(&beside_packet).field, "port[1].device");
        let second = |device: &str| {
            format!(
                "{GOOD}\n[[port]]\nname = \"p1\"\ndevice = \"{device}\"\naddress = \"10.1.0.1/24\"\n"
            )
        };
        for device in [
            "net_af_packet1,iface=veth-dut",
            "net_af_xdp0,iface=veth-dut,start_queue=0",
            "vnet_tap,iface=veth-dut",
        ] {
            let e = err_of(&second(device));
            assert_eq!(e.field, "port[1].device", "{device}");
            assert!(e.reason.contains("kernel interface"), "{device}: {e}");
        }
        for device in [
            "net_af_packet1,iface=veth-two",
            "vnet_tap,iface=veth-dut,netns=other",
        ] {
            assert!(Config::parse(&second(device)).is_ok(), "{device}");
        }
    }

    #[test]
    fn port_mtu_defaults_to_ethernet_and_is_bounded() {
        let cfg = Config::parse(GOOD).unwrap();
        assert_eq!(cfg.ports[0].mtu, DEFAULT_MTU);
        // af_packet's ring frames sized for the largest MTU asked here.
        let with = |mtu: &str| {
            GOOD.replace("gateway = \"10.77.0.254\"", &format!("mtu = {mtu}"))
                .replace(
                    "iface=veth-dut",
                    "iface=veth-dut,framesz=9344,blocksz=37376",
                )
        };
        let jumbo = Config::parse(&with("9000")).unwrap();
        assert_eq!(jumbo.ports[0].mtu, 9000);
        // What a port shows is what it parses back to.
        let again = Config::parse(&toml::to_string(&jumbo).unwrap()).unwrap();
        assert_eq!(again.ports[0].mtu, 9000);
        for bad in ["1279", "9199", "0"] {
            let e = err_of(&with(bad));
            assert_eq!((e.field.as_str(), e.value.as_str()), ("port[0].mtu", bad));
            assert!(e.to_string().contains("1280"), "{e}");
        }
        let tap = with("9000").replace(
            "net_af_packet0,iface=veth-dut,framesz=9344,blocksz=37376",
            "vnet_tap,iface=tap-cli",
        );
        let e = err_of(&tap);
        assert_eq!(e.field, "port[0].mtu");
        assert!(e.to_string().contains("vnet_tap"), "{e}");
        assert_eq!(
            Config::parse(&tap.replace("9000", "1400")).unwrap().ports[0].mtu,
            1400
        );
    }

    #[test]
    fn af_packet_ring_frames_must_hold_the_mtu_and_fill_their_blocks() {
        let port = |args: &str, mtu: u16| {
            GOOD.replace("iface=veth-dut", &format!("iface=veth-dut{args}"))
                .replace("gateway = \"10.77.0.254\"", &format!("mtu = {mtu}"))
        };
        assert!(Config::parse(&port(",framesz=9216,blocksz=36864", 9000)).is_ok());
        assert!(Config::parse(&port("", 1500)).is_ok());
        for (args, mtu, says) in [
            ("", 9000, "framesz=9128 or more"),
            (",framesz=4096", 4000, "framesz=4128 or more"),
            (
                ",framesz=9216,blocksz=12288",
                9000,
                "multiple of framesz=9216",
            ),
            (",framesz=2048,blocksz=3000", 1500, "multiple"),
            (",framesz=big", 9000, "not a number"),
        ] {
            let e = err_of(&port(args, mtu));
            assert_eq!(e.field, "port[0].device", "{args}");
            assert!(e.to_string().contains(says), "{args}: {e}");
        }
    }

    #[test]
    fn missing_sections_and_bad_types() {
        let e = err_of("[eal]\nlcores = [1]\n");
        assert!(e.to_string().contains("missing field `port`"), "{e}");
        let e = err_of(&GOOD.replace("lcores = [1]", "lcores = \"one\""));
        assert!(e.to_string().contains("lcores"), "{e}");
        let e = err_of(&GOOD.replace("[eal]", "[eal]\nhugepages = \"maybe\""));
        assert!(e.to_string().contains("maybe"), "{e}");
    }

    #[test]
    fn ipv6_vips_and_members_need_a_port_with_ipv6() {
        let text = r#"
        [[vip]]
        name = "web6"
        listen = "[2001:db8:77::80]:443"
        pool = "mixed"
        [[pool]]
        name = "mixed"
        members = [{ addr = "[2001:db8:77::11]:80" }, { addr = "10.77.0.12:80" }]
        "#;
        let dual = GOOD.replace(
            "address = \"10.77.0.1/24\"",
            "addresses = [\"10.77.0.1/24\", \"2001:db8:77::1/64\"]",
        );
        let c = Config::parse(&format!("{dual}{text}")).unwrap();
        let listen = c.vips[0].listen_addr().unwrap();
        assert_eq!(listen.to_string(), "[2001:db8:77::80]:443");
        assert!(c.pools[0].members[0].socket_addr().unwrap().is_ipv6());
        // Without IPv6 on a port, neither the VIP nor the member fits.
        let e = err_of(&format!("{GOOD}{text}"));
        assert_eq!(e.field, "pool[0].members[0].addr", "{e}");
        let e = err_of(&format!(
            "{GOOD}{}",
            text.replace("[2001:db8:77::11]:80", "10.77.0.11:80")
        ));
        assert_eq!(e.field, "vip[0].listen", "{e}");
        // Off the port's prefixes: a VIP is refused; a member needs the
        // IPv6 gateway.
        let far = format!(
            "{dual}{}",
            text.replace("2001:db8:77::11", "2001:db8:99::11")
        );
        assert_eq!(err_of(&far).field, "pool[0].members[0].addr");
        let routed = far.replace(
            "addresses = [",
            "gateway6 = \"fe80::1\"\n        addresses = [",
        );
        Config::parse(&routed).unwrap();
        let e = err_of(&format!(
            "{dual}{}",
            text.replace("2001:db8:77::80", "2001:db8:99::80")
        ));
        assert_eq!(e.field, "vip[0].listen", "{e}");
        // Bracketless IPv6 is not an address and port.
        let e = err_of(&format!(
            "{dual}{}",
            text.replace("[2001:db8:77::80]:443", "2001:db8:77::80:443")
        ));
        assert_eq!(e.field, "vip[0].listen", "{e}");
    }

    #[test]
    fn a_bond_names_its_members() {
        let bond = GOOD
            .replace("net_af_packet0,iface=veth-dut", "net_bonding0")
            .replace(
                "gateway = ",
                "bond_members = [\"net_tap0,iface=a1\", \"0000:3b:00.1\"]\n        gateway = ",
            );
        let c = Config::parse(&bond).unwrap();
        assert_eq!(
            c.ports[0].bond_devargs().as_deref(),
            Some("net_bonding0,mode=4,slave=net_tap0,slave=0000:3b:00.1")
        );
        assert!(c.has_pci_port(), "a PCI member is allowed in");
        assert_eq!(Config::parse(&c.to_toml()).unwrap(), c);
        for (from, to, what) in [
            ("net_bonding0", "net_bonding0,mode=1", "no arguments"),
            ("net_bonding0", "net_af_packet0,iface=x", "names its bond"),
            (
                "\"0000:3b:00.1\"",
                "\"net_tap0,iface=a2\"",
                "another port or member",
            ),
            (
                "\"0000:3b:00.1\"",
                "\"vnet_tap,iface=t\"",
                "NIC or a DPDK virtual device",
            ),
            ("\"0000:3b:00.1\"", "\"nonsense\"", "expected a PCI address"),
            (
                "bond_members = [\"net_tap0,iface=a1\", \"0000:3b:00.1\"]",
                "",
                "a bond needs its members",
            ),
        ] {
            let e = err_of(&bond.replacen(from, to, 1));
            assert!(e.to_string().contains(what), "{to}: {e}");
        }
    }

    #[test]
    fn vlans_are_networks_of_their_port() {
        let with = |vlans: &str| GOOD.replace("[control]", &format!("{vlans}\n        [control]"));
        let two = r#"
        [[port.vlan]]
        id = 100
        address = "10.100.0.1/24"
        [[port.vlan]]
        id = 200
        addresses = ["10.200.0.1/24", "2001:db8:200::1/64"]
        gateway = "10.200.0.254"
        "#;
        let c = Config::parse(&with(two)).unwrap();
        let p = &c.ports[0];
        assert_eq!(p.vlans.len(), 2);
        let nets: Vec<String> = p.networks().map(|n| n.name).collect();
        assert_eq!(nets, ["p0", "p0.100", "p0.200"]);
        assert!(p.on_subnet("10.100.0.80".parse().unwrap()));
        assert!(p.on_subnet("2001:db8:200::80".parse().unwrap()));
        assert!(!p.on_subnet("10.150.0.1".parse().unwrap()));
        // Written back as given, and read again alike.
        assert_eq!(Config::parse(&c.to_toml()).unwrap(), c);
        // A VIP and a member on VLANs.
        let vip = format!(
            "{}\n[[vip]]\nname = \"v\"\nlisten = \"10.100.0.80:443\"\npool = \"b\"\n[[pool]]\nname = \"b\"\nmembers = [{{ addr = \"10.200.0.11:80\" }}, {{ addr = \"[2001:db8:200::11]:80\" }}]\n",
            with(two)
        );
        Config::parse(&vip).unwrap();
        for (vlans, field, what) in [
            ("[[port.vlan]]\nid = 0\naddress = \"10.100.0.1/24\"", "port[0].vlan[0].id", "1 to 4094"),
            ("[[port.vlan]]\nid = 4095\naddress = \"10.100.0.1/24\"", "port[0].vlan[0].id", "1 to 4094"),
            (
                "[[port.vlan]]\nid = 7\naddress = \"10.100.0.1/24\"\n[[port.vlan]]\nid = 7\naddress = \"10.101.0.1/24\"",
                "port[0].vlan[1].id",
                "another VLAN",
            ),
            ("[[port.vlan]]\nid = 7\naddress = \"10.77.0.9/24\"", "port[0].vlan[0].address", "overlaps"),
            ("[[port.vlan]]\nid = 7", "port[0].vlan[0].addresses", "IPv4"),
            (
                "[[port.vlan]]\nid = 7\naddress = \"10.100.0.1/24\"\ngateway = \"10.9.9.9\"",
                "port[0].vlan[0].gateway",
                "subnet",
            ),
            ("[[port.vlan]]\nid = 7\naddress = \"10.100.0.1/24\"\ncolour = 3", "", "unknown field"),
        ] {
            let e = err_of(&with(vlans));
            assert!(e.to_string().contains(what), "{vlans}: {e}");
            if !field.is_empty() {
                assert_eq!(e.field, field, "{vlans}: {e}");
            }
        }
    }

    #[test]
    fn vips_are_checked() {
        let with = |v: &str| format!("{GOOD}\n[[vip]]\n{v}\n");
        let c = Config::parse(&with(
            "name = \"plain\"\nlisten = \"10.77.0.1:80\"\nrespond = \"builtin\"",
        ))
        .unwrap();
        assert_eq!(c.vips[0].listen_addr().unwrap().port(), 80);
        // Another address on the port's subnet is fine; off-subnet is not.
        Config::parse(&with(
            "name = \"plain\"\nlisten = \"10.77.0.9:80\"\nrespond = \"builtin\"",
        ))
        .unwrap();
        let e = err_of(&with(
            "name = \"plain\"\nlisten = \"10.78.0.9:80\"\nrespond = \"builtin\"",
        ));
        assert_eq!(
            (e.field.as_str(), e.value.as_str()),
            ("vip[0].listen", "10.78.0.9:80")
        );
        let e = err_of(&with(
            "name = \"plain\"\nlisten = \"10.77.0.1\"\nrespond = \"builtin\"",
        ));
        assert_eq!(e.field, "vip[0].listen");
        let e = err_of(&with(
            "name = \"plain\"\nlisten = \"10.77.0.1:80\"\nrespond = \"magic\"",
        ));
        assert!(e.to_string().contains("magic"), "{e}");
        let two = format!(
            "{}\n[[vip]]\nname = \"b\"\nlisten = \"10.77.0.1:80\"\nrespond = \"builtin\"\n",
            with("name = \"a\"\nlisten = \"10.77.0.1:80\"\nrespond = \"builtin\"")
        );
        assert_eq!(err_of(&two).field, "vip[1].listen");
    }

    #[test]
    fn load_names_the_file() {
        let e = Config::load(Path::new("/nonexistent/dpd.toml")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/dpd.toml"), "{e}");
        // A device or FIFO is refused without reading (it would never end
        // or block).
        let e = Config::load(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}
