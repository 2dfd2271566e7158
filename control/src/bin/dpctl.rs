//! `dpctl`: the operator's CLI for a running `dpd`, over its control socket.
//!
//! Every command prints a human table, or with `--json` the raw reply.
//! Exit status: 0 done, 1 refused by dpd (the reason on stderr), 2 dpd not
//! reachable or bad arguments.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser, Subcommand};
use control::api::{
    Body, CertInfo, Client, CoreStats, DrainState, PoolInfo, Reply, Request, Stats, TicketsChange,
    VipChange, VipInfo,
};
use control::config::{CertRef, Member, MemberState, NamedCert, TicketSettings, Vip};
use control::counters::{self, Kind};
use serde_json::json;

#[derive(Parser, Debug)]
#[command(
    name = "dpctl",
    version,
    about = "Control a running tlsdp dataplane (dpd)"
)]
struct Cli {
    /// dpd's control socket.
    #[arg(
        long,
        global = true,
        default_value = "/run/tlsdp/control.sock",
        env = "DPCTL_SOCKET"
    )]
    socket: PathBuf,
    /// Print the raw JSON reply.
    #[arg(long, global = true)]
    json: bool,
    /// Seconds to wait for dpd's reply (a change waits for every engine:
    /// up to about 10 s, more behind other clients' requests).
    #[arg(long, global = true, value_name = "SECS", default_value = "30",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    reply_timeout: u64,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Version, uptime, configuration version, cores, ports and hugepages.
    Status,
    /// Counters: connections, handshakes, failures, bytes, drops, busy.
    Stats {
        /// Show every core, not only the total.
        #[arg(long)]
        per_core: bool,
        /// Print rates every SECS seconds (one line each) until interrupted.
        #[arg(
            long,
            value_name = "SECS",
            num_args = 0..=1,
            default_missing_value = "1",
            value_parser = parse_interval_s
        )]
        watch: Option<f64>,
        /// With --watch: stop after this many lines.
        #[arg(long, requires = "watch")]
        count: Option<u64>,
        /// Print only the engines' busy core-seconds since start (for
        /// benchmark harnesses: dpbench's `busy=cmd:` source).
        #[arg(long, conflicts_with_all = ["per_core", "watch"])]
        busy_seconds: bool,
    },
    /// Take this node out of service: with `[routing]` its VIPs are
    /// withdrawn first, and listeners stop taking connections once the
    /// routers stop sending new flows; without, at once. Existing
    /// connections go on. Asked again, it reports where the drain stands.
    Drain {
        /// Wait until drained (none open, or `drain_timeout_s` passed),
        /// printing each phase as it comes.
        #[arg(long)]
        wait: bool,
    },
    /// Back in service: take connections and announce the VIPs again.
    Undrain,
    /// Virtual IPs.
    #[command(subcommand)]
    Vip(VipCmd),
    /// Named certificates.
    #[command(subcommand)]
    Cert(CertCmd),
    /// Backend pools.
    #[command(subcommand)]
    Pool(PoolCmd),
    /// Members of a backend pool.
    #[command(subcommand)]
    Member(MemberCmd),
    /// Session-ticket keys.
    #[command(subcommand)]
    Tickets(TicketsCmd),
    /// The running configuration.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// dpd's log filter, shown or set while it runs.
    #[command(subcommand)]
    Log(LogCmd),
    /// Client networks refused on every VIP (`[access] deny`).
    #[command(subcommand)]
    Deny(DenyCmd),
    /// The client addresses (IPv6: /64s) with the most connections open,
    /// most first: who holds the VIPs (then `deny add` or limits).
    Sources {
        /// Only connections to this VIP.
        #[arg(long)]
        vip: Option<String>,
        /// How many (1 to 10000).
        #[arg(long, default_value_t = control::api::DEFAULT_SOURCES)]
        count: u32,
        /// The ones the VIPs' limits (and deny lists) refused most in the
        /// last one to two minutes instead, by limit.
        #[arg(long)]
        refused: bool,
    },
    /// Client connections open now: list them (oldest first, with their
    /// TCP state), or reset them.
    #[command(subcommand)]
    Conn(ConnCmd),
    /// Write frames received and sent on a dataplane port to a pcap file.
    Capture {
        /// Port name (`[[port]] name`).
        #[arg(long)]
        port: String,
        /// Frames to capture.
        #[arg(long, default_value_t = 100)]
        count: u32,
        /// Output file (pcap; written by dpd).
        #[arg(long)]
        file: PathBuf,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 10)]
        timeout: u32,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish,
    /// powershell).
    Completions { shell: clap_complete::Shell },
}

#[derive(Subcommand, Debug)]
enum VipCmd {
    List,
    Show {
        name: String,
    },
    /// Add a VIP: TLS when certificates are given.
    Add {
        name: String,
        /// address:port.
        #[arg(long)]
        listen: String,
        /// Forward to this pool ...
        #[arg(long, conflicts_with = "builtin", required_unless_present = "builtin")]
        pool: Option<String>,
        /// ... or answer with the built-in HTTP responder.
        #[arg(long)]
        builtin: bool,
        /// Certificate name (repeat for several; the first is the default).
        #[arg(long = "cert")]
        certs: Vec<String>,
        /// Configure it, but take no connections yet.
        #[arg(long)]
        disabled: bool,
        /// TLS clients asking for SNI go to POOL instead (repeat;
        /// `*.example.com` takes one label more).
        #[arg(long = "route", value_name = "SNI=POOL", value_parser = parse_route)]
        routes: Vec<control::config::Route>,
        /// Take connections only from this network (repeat; default: any).
        #[arg(long = "allow", value_name = "NET")]
        allow: Vec<String>,
        #[command(flatten)]
        tls: Box<TlsArgs>,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Change a VIP in place: certificates, pool, TLS policy, timeouts and
    /// limits (only what is given). New connections get the change; open
    /// ones keep theirs, but the limits count them.
    Set {
        name: String,
        /// Certificate names, replacing the VIP's (repeat; the first is
        /// the default).
        #[arg(long = "cert")]
        certs: Vec<String>,
        /// Forward new connections to this pool ...
        #[arg(long, conflicts_with = "builtin")]
        pool: Option<String>,
        /// ... or answer them with the built-in HTTP responder.
        #[arg(long)]
        builtin: bool,
        #[command(flatten)]
        tls: Box<TlsArgs>,
        /// Turn session tickets off.
        #[arg(long, conflicts_with = "tickets")]
        no_tickets: bool,
        /// Routes by SNI, replacing the VIP's (repeat).
        #[arg(long = "route", value_name = "SNI=POOL", value_parser = parse_route)]
        routes: Vec<control::config::Route>,
        /// Take every route away.
        #[arg(long, conflicts_with = "routes")]
        no_routes: bool,
        /// Take connections only from these networks (repeat), replacing
        /// the VIP's list; connections open from others are reset.
        #[arg(long = "allow", value_name = "NET")]
        allow: Vec<String>,
        /// Take connections from any client again.
        #[arg(long, conflicts_with = "allow")]
        allow_all: bool,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Remove a VIP: no new connections; open ones go on.
    Remove {
        name: String,
    },
    Enable {
        name: String,
    },
    /// Take no new connections (SYNs get a reset); open ones go on.
    Disable {
        name: String,
    },
}

#[derive(Subcommand, Debug)]
enum CertCmd {
    List,
    Show {
        name: String,
    },
    /// Add a named certificate.
    Add {
        name: String,
        #[command(flatten)]
        files: CertFileArgs,
    },
    /// New chain and key for a name: new handshakes get them, none fails.
    Rotate {
        name: String,
        #[command(flatten)]
        files: CertFileArgs,
    },
    /// Remove a certificate no VIP serves.
    Remove {
        name: String,
    },
}

/// A new VIP's TLS policy (`[vip.tls]`); defaults where not given.
#[derive(clap::Args, Debug)]
struct TlsArgs {
    /// Protocol versions, e.g. TLSv1.3 (repeat or comma-separate).
    #[arg(long = "tls-version", value_delimiter = ',')]
    versions: Vec<String>,
    /// Cipher suites (IANA names).
    #[arg(long = "tls-suite", value_delimiter = ',')]
    suites: Vec<String>,
    /// Key-exchange groups (X25519MLKEM768, X25519, secp256r1, secp384r1).
    #[arg(long = "tls-group", value_delimiter = ',')]
    groups: Vec<String>,
    /// ALPN protocols (default http/1.1; "none" turns ALPN off).
    #[arg(long, value_delimiter = ',')]
    alpn: Vec<String>,
    /// Session tickets, rotated every this many seconds.
    #[arg(long, value_name = "ROTATE_S")]
    tickets: Option<u64>,
    /// Ticket key file shared between nodes (with --tickets).
    #[arg(long, requires = "tickets")]
    ticket_key_file: Option<PathBuf>,
}

impl TlsArgs {
    /// The `[vip.tls]` table, or `None` when nothing was given.
    fn settings(&self) -> Result<Option<control::config::TlsSettings>, String> {
        let given = !(self.versions.is_empty()
            && self.suites.is_empty()
            && self.groups.is_empty()
            && self.alpn.is_empty()
            && self.tickets.is_none());
        if !given {
            return Ok(None);
        }
        let mut t = json!({
            "versions": self.versions,
            "suites": self.suites,
            "groups": self.groups,
        });
        if !self.alpn.is_empty() {
            let alpn: Vec<&String> = self.alpn.iter().filter(|a| *a != "none").collect();
            t["alpn"] = json!(alpn);
        }
        if let Some(rotate_s) = self.tickets {
            t["tickets"] = json!({ "rotate_s": rotate_s });
            if let Some(f) = &self.ticket_key_file {
                t["tickets"]["key_file"] = json!(absolute(f));
            }
        }
        serde_json::from_value(t)
            .map(Some)
            .map_err(|e| format!("TLS policy: {e}"))
    }
}

impl TlsArgs {
    /// A `vip set` change: only what was given.
    fn change(
        &self,
        certs: &[String],
        pool: &Option<String>,
        builtin: bool,
        no_tickets: bool,
    ) -> VipChange {
        let given = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        let tickets = match (self.tickets, no_tickets) {
            (_, true) => Some(TicketsChange::Off),
            (Some(rotate_s), false) => Some(TicketsChange::On(TicketSettings {
                rotate_s,
                key_file: self.ticket_key_file.as_deref().map(absolute),
            })),
            (None, false) => None,
        };
        VipChange {
            certs: (!certs.is_empty()).then(|| certs.to_vec()),
            pool: pool.clone(),
            builtin,
            tls_versions: given(&self.versions),
            tls_suites: given(&self.suites),
            tls_groups: given(&self.groups),
            alpn: given(&self.alpn).map(|a| a.into_iter().filter(|p| p != "none").collect()),
            tickets,
            ..VipChange::default()
        }
    }
}

/// A VIP's deadlines and limits (`[[vip]]`'s fields of the same names);
/// what is not given stays (`vip set`) or takes its default (`vip add`).
#[derive(clap::Args, Debug)]
struct LimitArgs {
    /// Reset a TLS handshake not done this long after the SYN.
    #[arg(long, value_name = "MS")]
    handshake_timeout_ms: Option<u32>,
    /// Reset a connection whose request (or first bytes) is not there
    /// this long after it is ready for one.
    #[arg(long, value_name = "MS")]
    request_timeout_ms: Option<u32>,
    /// Reset a client that acknowledges nothing waiting for it this long.
    #[arg(long, value_name = "MS")]
    send_timeout_ms: Option<u32>,
    /// Reset a client silent this long ("default": [tcp] idle_timeout_s).
    #[arg(long, value_name = "S|default")]
    idle_timeout_s: Option<Limit>,
    /// Most connections open at once ("none": no cap).
    #[arg(long, value_name = "N|none")]
    max_connections: Option<Limit>,
    /// Most new connections per second from one address ("none").
    #[arg(long, value_name = "N|none")]
    max_new_per_source: Option<Limit>,
    /// Most established connections from one address ("none").
    #[arg(long, value_name = "N|none")]
    max_connections_per_source: Option<Limit>,
}

/// `--watch`'s interval: 0.1 to 3600 seconds (NaN and infinities, which
/// no interval is, refused rather than clamped).
fn parse_interval_s(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.1..=3600.0).contains(&s) => Ok(s),
        _ => Err(format!("{text:?} is not 0.1 to 3600 seconds")),
    }
}

/// `SNI=POOL`.
fn parse_route(s: &str) -> Result<control::config::Route, String> {
    match s.split_once('=') {
        Some((sni, pool)) if !sni.is_empty() && !pool.is_empty() => Ok(control::config::Route {
            sni: sni.to_string(),
            pool: pool.to_string(),
        }),
        _ => Err(format!("{s:?}: SNI=POOL, as api.example.com=api")),
    }
}

/// `conn list`'s table.
fn conns_text(list: &[control::api::ConnInfo]) -> String {
    let row = |cols: [&str; 14]| {
        format!(
            "{:<28} {:<10} {:>3} {:<12} {:<9} {:<9} {:<21} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>3}\n",
            cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7], cols[8],
            cols[9], cols[10], cols[11], cols[12], cols[13]
        )
    };
    let mut out = row([
        "CLIENT", "VIP", "ENG", "STATE", "ROLE", "WAITS", "BACKEND", "AGE", "IDLE", "SEND-Q",
        "RECV-Q", "WINDOW", "RTT-MS", "RTO",
    ]);
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.to_string()
        }
    };
    for c in list {
        let rtt = c.rtt_us.map_or_else(
            || "-".to_string(),
            |us| format!("{:.1}", us as f64 / 1000.0),
        );
        let vip = if c.vip.is_empty() { &c.local } else { &c.vip };
        out.push_str(&row([
            &c.client,
            vip,
            &c.engine.to_string(),
            &c.state,
            &or_dash(&c.role),
            &or_dash(&c.waits_for),
            c.backend.as_deref().unwrap_or("-"),
            &duration_text(c.age_ms / 1000),
            &duration_text(c.idle_ms / 1000),
            &c.send_queue.to_string(),
            &c.recv_queue.to_string(),
            &c.peer_window.to_string(),
            &rtt,
            &c.retries.to_string(),
        ]));
    }
    out
}

/// Seconds from `90`, `90s`, `10m`, `2h` or `7d`.
fn parse_duration_s(s: &str) -> Result<u64, String> {
    let bad = || format!("{s:?}: a number and a unit, as 90s, 10m, 2h or 7d");
    let (digits, scale) = match s.char_indices().last() {
        Some((i, 's')) => (&s[..i], 1),
        Some((i, 'm')) => (&s[..i], 60),
        Some((i, 'h')) => (&s[..i], 3_600),
        Some((i, 'd')) => (&s[..i], 86_400),
        _ => (s, 1),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(scale).ok_or_else(bad)
}

/// `left` seconds as the two largest units that are not zero: `9m 58s`,
/// `2d 3h`, `45s`.
fn duration_text(left: u64) -> String {
    let units = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];
    let mut parts = Vec::new();
    let mut rest = left;
    for (size, unit) in units {
        if rest >= size || (parts.is_empty() && size == 1) {
            parts.push(format!("{}{unit}", rest / size));
            rest %= size;
        }
        if parts.len() == 2 {
            break;
        }
    }
    parts.join(" ")
}

/// A number, or none: `none` (a limit) or `default` (a timeout).
#[derive(Debug, Clone, Copy)]
struct Limit(Option<u32>);

impl std::str::FromStr for Limit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" | "default" => Ok(Self(None)),
            _ => s
                .parse()
                .map(|n| Self(Some(n)))
                .map_err(|_| format!("{s:?}: a number, or none (default for a timeout)")),
        }
    }
}

impl LimitArgs {
    /// Sets what was given on `change`.
    fn change(&self, change: &mut VipChange) {
        let limit = |l: Option<Limit>| l.map(|Limit(n)| n);
        change.handshake_timeout_ms = self.handshake_timeout_ms;
        change.request_timeout_ms = self.request_timeout_ms;
        change.send_timeout_ms = self.send_timeout_ms;
        change.idle_timeout_s = limit(self.idle_timeout_s);
        change.max_connections = limit(self.max_connections);
        change.max_new_per_source = limit(self.max_new_per_source);
        change.max_connections_per_source = limit(self.max_connections_per_source);
    }

    /// Sets what was given on a new VIP.
    fn apply(&self, vip: &mut Vip) {
        let limit = |l: Option<Limit>, to: &mut Option<u32>| {
            if let Some(Limit(n)) = l {
                *to = n;
            }
        };
        if let Some(ms) = self.handshake_timeout_ms {
            vip.handshake_timeout_ms = ms;
        }
        if let Some(ms) = self.request_timeout_ms {
            vip.request_timeout_ms = ms;
        }
        if let Some(ms) = self.send_timeout_ms {
            vip.send_timeout_ms = ms;
        }
        limit(self.idle_timeout_s, &mut vip.idle_timeout_s);
        limit(self.max_connections, &mut vip.max_connections);
        limit(self.max_new_per_source, &mut vip.max_new_per_source);
        limit(
            self.max_connections_per_source,
            &mut vip.max_connections_per_source,
        );
    }
}

/// A certificate's files (read by dpd: absolute paths are sent).
#[derive(clap::Args, Debug)]
struct CertFileArgs {
    /// PEM chain, leaf first.
    #[arg(long)]
    cert: PathBuf,
    /// PEM private key.
    #[arg(long)]
    key: PathBuf,
}

#[derive(Subcommand, Debug)]
enum PoolCmd {
    List,
    Show {
        name: String,
    },
    /// Add a pool.
    Add {
        name: String,
        /// Member `address:port` or `address:port@weight` (repeat).
        #[arg(long = "member", required = true)]
        members: Vec<String>,
        /// round_robin, weighted_round_robin, least_conn,
        /// weighted_least_conn or source_hash.
        #[arg(long, default_value = "round_robin")]
        balance: String,
        /// Health check: tcp or http.
        #[arg(long)]
        health: Option<String>,
        /// HTTP health check: path asked.
        #[arg(long, default_value = "/")]
        health_path: String,
        /// HTTP health check: statuses that mean up: 200, 200-299 or 2xx.
        #[arg(long, default_value = "200-399")]
        health_expect: String,
        /// Milliseconds between checks.
        #[arg(long, default_value_t = 1000)]
        health_interval_ms: u32,
        /// Send a PROXY protocol v2 header to members.
        #[arg(long)]
        proxy_protocol: bool,
    },
    /// Remove a pool no VIP forwards to.
    Remove {
        name: String,
    },
}

#[derive(Subcommand, Debug)]
enum MemberCmd {
    Add {
        pool: String,
        /// address:port.
        addr: String,
        #[arg(long, default_value_t = 1)]
        weight: u32,
    },
    /// Take a member out; connections to it go on.
    Remove { pool: String, addr: String },
    /// Set a member's weight (1 to 256).
    Weight {
        pool: String,
        addr: String,
        weight: u32,
    },
    /// No new connections to the member; open ones go on.
    Drain { pool: String, addr: String },
    /// Back in service.
    Enable { pool: String, addr: String },
}

#[derive(Subcommand, Debug)]
enum TicketsCmd {
    /// Ticket keys built again on every VIP with tickets, from its key file
    /// read again (if rewritten, earlier tickets stop resuming) or from a
    /// new random secret (earlier tickets stop resuming).
    Rotate,
}

#[derive(Subcommand, Debug)]
enum ConfigCmd {
    /// Print the running configuration (TOML).
    Show,
    /// Write the running configuration as TOML (default: the file dpd was
    /// started with).
    Save { file: Option<PathBuf> },
    /// Read the file dpd was started with again and apply it (VIPs,
    /// certificates and ticket key files read again, pools, log level), as
    /// SIGHUP does.
    Reload,
}

#[derive(Subcommand, Debug)]
enum LogCmd {
    /// Print the filter in effect, or set one: a level (error, warn, info,
    /// debug, trace, off) or directives such as
    /// `info,dataplane::app::proxy=debug`. It applies at once and is kept
    /// in the running configuration (`config save` writes it).
    Level { filter: Option<String> },
    /// Open the connection log's file again by its name (after logrotate
    /// moved it away; as SIGUSR1 does). Nothing else changes.
    Reopen,
}

#[derive(Subcommand, Debug)]
enum ConnCmd {
    /// The oldest client connections open now (TIME-WAIT not), with
    /// what serves them and their TCP state: queues, the client's window,
    /// RTT, retries.
    List {
        #[command(flatten)]
        select: ConnSelect,
        /// How many (1 to 10000).
        #[arg(long, default_value_t = control::api::DEFAULT_CONNS)]
        count: u32,
    },
    /// Reset the client connections open now that the options pick (one
    /// at least; nothing is refused after: `deny add` for that).
    Reset {
        #[command(flatten)]
        select: ConnSelect,
    },
}

/// Which client connections `conn list` and `conn reset` are about.
#[derive(clap::Args, Debug)]
struct ConnSelect {
    /// To this VIP.
    #[arg(long)]
    vip: Option<String>,
    /// From this network (an address, or 198.51.100.0/24).
    #[arg(long)]
    source: Option<String>,
    /// In this TCP state (ESTABLISHED, SYN-RECEIVED, CLOSE-WAIT, ...).
    #[arg(long)]
    state: Option<String>,
    /// Whose client has sent nothing for this long at least (90s, 10m).
    #[arg(long = "idle-over", value_name = "TIME", value_parser = parse_duration_s)]
    idle_over_s: Option<u64>,
}

#[derive(Subcommand, Debug)]
enum DenyCmd {
    /// The networks denied, and what they were refused.
    List,
    /// Refuse networks (198.51.100.0/24, 2001:db8::/32, or an address)
    /// at once: their SYNs are dropped unanswered and their open
    /// connections reset. Kept in the running configuration.
    Add {
        #[arg(required = true)]
        prefixes: Vec<String>,
        /// For this long only (90s, 10m, 2h, 7d; at most 365d), then
        /// taken off by dpd. Given again, the new time replaces the old.
        #[arg(long = "for", value_name = "TIME", value_parser = parse_duration_s)]
        for_s: Option<u64>,
    },
    /// Take networks off the lists (each must be on one).
    Remove {
        #[arg(required = true)]
        prefixes: Vec<String>,
    },
}

/// Paths go to dpd, whose working folder is not ours.
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn request(cmd: &Cmd) -> Result<Request, String> {
    Ok(match cmd {
        Cmd::Status => Request::Status,
        Cmd::Stats { .. } => Request::Stats,
        Cmd::Drain { .. } => Request::Drain,
        Cmd::Undrain => Request::Undrain,
        Cmd::Vip(v) => match v {
            VipCmd::List => Request::VipList,
            VipCmd::Show { name } => Request::VipShow { name: name.clone() },
            VipCmd::Add {
                name,
                listen,
                pool,
                builtin,
                certs,
                disabled,
                tls,
                limits,
                routes,
                allow,
            } => Request::VipAdd {
                vip: {
                    let mut vip = Vip {
                        name: name.clone(),
                        listen: listen.clone(),
                        respond: builtin.then_some(control::config::Respond::Builtin),
                        pool: pool.clone(),
                        certs: certs.iter().map(|c| CertRef::Name(c.clone())).collect(),
                        tls: tls.settings()?,
                        enabled: !disabled,
                        handshake_timeout_ms: control::config::DEFAULT_HANDSHAKE_TIMEOUT_MS,
                        request_timeout_ms: control::config::DEFAULT_REQUEST_TIMEOUT_MS,
                        send_timeout_ms: control::config::DEFAULT_SEND_TIMEOUT_MS,
                        idle_timeout_s: None,
                        max_connections: None,
                        max_new_per_source: None,
                        max_connections_per_source: None,
                        routes: routes.clone(),
                        allow: allow.clone(),
                    };
                    limits.apply(&mut vip);
                    vip
                },
            },
            VipCmd::Set {
                name,
                certs,
                pool,
                builtin,
                tls,
                no_tickets,
                limits,
                routes,
                no_routes,
                allow,
                allow_all,
            } => Request::VipSet {
                name: name.clone(),
                change: {
                    let mut change = tls.change(certs, pool, *builtin, *no_tickets);
                    limits.change(&mut change);
                    if *no_routes || !routes.is_empty() {
                        change.routes = Some(routes.clone());
                    }
                    if *allow_all || !allow.is_empty() {
                        change.allow = Some(allow.clone());
                    }
                    change
                },
            },
            VipCmd::Remove { name } => Request::VipRemove { name: name.clone() },
            VipCmd::Enable { name } => Request::VipEnable { name: name.clone() },
            VipCmd::Disable { name } => Request::VipDisable { name: name.clone() },
        },
        Cmd::Cert(c) => match c {
            CertCmd::List => Request::CertList,
            CertCmd::Show { name } => Request::CertShow { name: name.clone() },
            CertCmd::Add { name, files } | CertCmd::Rotate { name, files } => {
                let cert = NamedCert {
                    name: name.clone(),
                    cert: absolute(&files.cert),
                    key: absolute(&files.key),
                    origin: None,
                };
                if matches!(c, CertCmd::Add { .. }) {
                    Request::CertAdd { cert }
                } else {
                    Request::CertRotate { cert }
                }
            }
            CertCmd::Remove { name } => Request::CertRemove { name: name.clone() },
        },
        Cmd::Pool(p) => match p {
            PoolCmd::List => Request::PoolList,
            PoolCmd::Show { name } => Request::PoolShow { name: name.clone() },
            PoolCmd::Add {
                name,
                members,
                balance,
                health,
                health_path,
                health_expect,
                health_interval_ms,
                proxy_protocol,
            } => {
                let members: Vec<serde_json::Value> = members
                    .iter()
                    .map(|m| match m.split_once('@') {
                        Some((addr, w)) => w
                            .parse::<u32>()
                            .map(|w| json!({"addr": addr, "weight": w}))
                            .map_err(|_| format!("member {m:?}: weight after @ is a number")),
                        None => Ok(json!({ "addr": m })),
                    })
                    .collect::<Result<_, _>>()?;
                let mut pool = json!({
                    "name": name,
                    "balance": balance,
                    "members": members,
                    "proxy_protocol": proxy_protocol,
                });
                if let Some(kind) = health {
                    pool["health"] = json!({
                        "kind": kind,
                        "path": health_path,
                        "expect": health_expect,
                        "interval_ms": health_interval_ms,
                        "timeout_ms": (*health_interval_ms / 2).max(1),
                    });
                }
                // serde fills in the defaults and checks the names.
                let pool = serde_json::from_value(pool).map_err(|e| format!("pool: {e}"))?;
                Request::PoolAdd { pool }
            }
            PoolCmd::Remove { name } => Request::PoolRemove { name: name.clone() },
        },
        Cmd::Member(m) => match m {
            MemberCmd::Add { pool, addr, weight } => Request::MemberAdd {
                pool: pool.clone(),
                member: Member {
                    addr: addr.clone(),
                    weight: *weight,
                    state: MemberState::Up,
                },
            },
            MemberCmd::Remove { pool, addr } => Request::MemberRemove {
                pool: pool.clone(),
                addr: addr.clone(),
            },
            MemberCmd::Weight { pool, addr, weight } => Request::MemberWeight {
                pool: pool.clone(),
                addr: addr.clone(),
                weight: *weight,
            },
            MemberCmd::Drain { pool, addr } => Request::MemberDrain {
                pool: pool.clone(),
                addr: addr.clone(),
            },
            MemberCmd::Enable { pool, addr } => Request::MemberEnable {
                pool: pool.clone(),
                addr: addr.clone(),
            },
        },
        Cmd::Tickets(TicketsCmd::Rotate) => Request::TicketsRotate,
        Cmd::Config(ConfigCmd::Show) => Request::ConfigShow,
        Cmd::Config(ConfigCmd::Reload) => Request::ConfigReload,
        Cmd::Log(LogCmd::Level { filter: None }) => Request::Status,
        Cmd::Log(LogCmd::Reopen) => Request::LogReopen,
        Cmd::Log(LogCmd::Level {
            filter: Some(level),
        }) => Request::LogLevel {
            level: level.clone(),
        },
        Cmd::Conn(ConnCmd::List { select, count }) => Request::ConnList {
            vip: select.vip.clone(),
            source: select.source.clone(),
            state: select.state.clone(),
            idle_over_s: select.idle_over_s,
            count: *count,
        },
        Cmd::Conn(ConnCmd::Reset { select }) => Request::ConnReset {
            vip: select.vip.clone(),
            source: select.source.clone(),
            state: select.state.clone(),
            idle_over_s: select.idle_over_s,
        },
        Cmd::Sources {
            vip,
            count,
            refused,
        } => Request::Sources {
            refused: *refused,
            vip: vip.clone(),
            count: *count,
        },
        Cmd::Deny(DenyCmd::List) => Request::DenyList,
        Cmd::Deny(DenyCmd::Add { prefixes, for_s }) => Request::DenyAdd {
            prefixes: prefixes.clone(),
            for_s: *for_s,
        },
        Cmd::Deny(DenyCmd::Remove { prefixes }) => Request::DenyRemove {
            prefixes: prefixes.clone(),
        },
        Cmd::Config(ConfigCmd::Save { file }) => Request::ConfigSave {
            path: file.as_deref().map(absolute),
        },
        Cmd::Capture {
            port,
            count,
            file,
            timeout,
        } => Request::Capture {
            port: port.clone(),
            count: *count,
            timeout_ms: timeout.saturating_mul(1000),
            file: absolute(file),
        },
        Cmd::Completions { .. } => unreachable!("answered without dpd"),
    })
}

/// `req` as requests dpd takes ([`control::api::MAX_REQUEST`] bytes a
/// line): a `deny add` or `deny remove` of more prefixes than one line
/// holds in several, each prefix checked first so that none is sent when
/// one does not read; any other request whole, or refused here.
fn fitted(req: Request) -> Result<Vec<Request>, String> {
    let size = |r: &Request| serde_json::to_vec(r).map_or(usize::MAX, |v| v.len() + 1);
    // Room for the request's other fields around its prefixes.
    let limit = control::api::MAX_REQUEST - 256;
    let split = |prefixes: Vec<String>, make: &dyn Fn(Vec<String>) -> Request| {
        if let Some((p, why)) = (prefixes.iter())
            .find_map(|p| control::config::parse_prefix(p).err().map(|why| (p, why)))
        {
            return Err(format!("{p:?}: {why}"));
        }
        let mut out = Vec::new();
        let (mut part, mut bytes) = (Vec::new(), 0);
        for p in prefixes {
            // Quoted, with a comma: what it adds to the line.
            let adds = p.len() + 3;
            if !part.is_empty() && bytes + adds > limit {
                out.push(make(std::mem::take(&mut part)));
                bytes = 0;
            }
            bytes += adds;
            part.push(p);
        }
        out.push(make(part));
        Ok(out)
    };
    let batches = match req {
        Request::DenyAdd { prefixes, for_s } => {
            split(prefixes, &|prefixes| Request::DenyAdd { prefixes, for_s })?
        }
        Request::DenyRemove { prefixes } => {
            split(prefixes, &|prefixes| Request::DenyRemove { prefixes })?
        }
        other => vec![other],
    };
    // A path that is not UTF-8 (JSON cannot carry it), say.
    if let Some(e) = batches.iter().find_map(|r| serde_json::to_vec(r).err()) {
        return Err(format!("the request cannot be sent: {e}"));
    }
    match batches.iter().map(size).max() {
        Some(n) if n > control::api::MAX_REQUEST => Err(format!(
            "the request is {n} bytes; dpd takes at most {} a request",
            control::api::MAX_REQUEST
        )),
        _ => Ok(batches),
    }
}

fn main() -> ExitCode {
    // Output cut short by its reader (`dpctl conn list | head`): end
    // quietly, as a tool killed by SIGPIPE does, rather than report a
    // panic (and abort, in release builds).
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if text.starts_with("failed printing to stdout") && text.contains("Broken pipe") {
            std::process::exit(141);
        }
        default_hook(info);
    }));
    let cli = Cli::parse();
    if let Cmd::Completions { shell } = cli.cmd {
        clap_complete::generate(shell, &mut Cli::command(), "dpctl", &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    let req = match request(&cli.cmd) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("dpctl: {e}");
            return ExitCode::from(2);
        }
    };
    // Refused here, before dpd is reached, when it cannot be sent.
    let batches = match fitted(req.clone()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("dpctl: {e}");
            return ExitCode::from(2);
        }
    };
    let connect_limit = std::time::Duration::from_secs(cli.reply_timeout);
    let mut client = match Client::connect_within(&cli.socket, connect_limit) {
        Ok(c) => c,
        Err(e) => return unreachable_dpd(&cli.socket, &e),
    };
    let mut wait = std::time::Duration::from_secs(cli.reply_timeout);
    if let Request::Capture { timeout_ms, .. } = &req {
        // dpd answers once the capture ends: wait that long, and then some.
        wait += std::time::Duration::from_millis(u64::from(*timeout_ms));
    }
    if let Err(e) = client.set_reply_timeout(wait) {
        return unreachable_dpd(&cli.socket, &e);
    }
    if let Cmd::Stats {
        watch: Some(secs),
        count,
        per_core,
        ..
    } = cli.cmd
    {
        return watch(&mut client, &cli.socket, secs, count, per_core, cli.json);
    }
    if let Cmd::Drain { wait: true } = cli.cmd {
        return drain_and_wait(&mut client, &cli.socket, cli.json, wait);
    }
    let (mut reply, total) = (None, batches.len());
    for (done, req) in batches.iter().enumerate() {
        let r = match client.call(req) {
            Ok(r) => r,
            Err(e) if is_timeout(&e) => return no_reply(&cli.socket, wait),
            Err(e) => return unreachable_dpd(&cli.socket, &e),
        };
        if !r.ok && done > 0 {
            // Those before it were applied: say so.
            let e = r.error.unwrap_or_default();
            eprintln!(
                "dpctl: dpd refused part {} of {total} ({done} applied): {e}",
                done + 1
            );
            return ExitCode::FAILURE;
        }
        let ok = r.ok;
        if total > 1 && ok && !cli.json {
            if let Some(Body::Applied(a)) = &r.body {
                println!(
                    "part {} of {total}: configuration {}: {}",
                    done + 1,
                    a.version,
                    a.change
                );
            }
        }
        reply = Some(r);
        if !ok {
            break;
        }
    }
    let Some(reply) = reply else {
        return ExitCode::SUCCESS;
    };
    if cli.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&reply).expect("serialisable")
        );
        return if reply.ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if !reply.ok {
        eprintln!("dpctl: dpd refused: {}", reply.error.unwrap_or_default());
        return ExitCode::FAILURE;
    }
    print_reply(reply, &cli.cmd)
}

/// One line on a drain: its phase, how long, what is open.
fn drain_line(d: &DrainState) -> String {
    match d.phase.as_str() {
        "serving" => format!("serving ({} connections open)", d.open_connections),
        // A dpd from before drain phases: its drain refuses at once.
        "" => format!(
            "draining: no new connections; {} still open",
            d.open_connections
        ),
        "withdrawn" => format!(
            "withdrawn {:.1} s ago: VIPs no longer announced, waiting for new flows to stop; {} open",
            d.for_s, d.open_connections
        ),
        "draining" => format!(
            "draining for {:.1} s: no new connections; {} still open",
            d.for_s, d.open_connections
        ),
        phase => format!(
            "{phase} after {:.1} s ({} still open)",
            d.for_s, d.open_connections
        ),
    }
}

/// `drain --wait`: asks for the drain, then watches its phase in
/// `status` every 200 ms, printing each new one, until drained (each
/// reply within `wait`). Watching never asks for a drain again: an
/// `undrain` meanwhile ends the wait (exit 1), it is not undone.
fn drain_and_wait(
    client: &mut Client,
    socket: &Path,
    json: bool,
    wait: std::time::Duration,
) -> ExitCode {
    let mut last = String::new();
    let mut request = Request::Drain;
    loop {
        let reply = match client.call(&request) {
            Ok(r) => r,
            Err(e) if is_timeout(&e) => return no_reply(socket, wait),
            Err(e) => return unreachable_dpd(socket, &e),
        };
        let d = match (reply.ok, reply.body) {
            (true, Some(Body::Drain(d))) => d,
            (true, Some(Body::Status(s))) => match s.drain {
                Some(d) => d,
                // A dpd from before drain phases.
                None => return ExitCode::SUCCESS,
            },
            _ => {
                eprintln!("dpctl: dpd refused: {}", reply.error.unwrap_or_default());
                return ExitCode::FAILURE;
            }
        };
        if request == Request::Status && d.phase == "serving" {
            eprintln!("dpctl: undrained while waiting: dpd serves again");
            return ExitCode::FAILURE;
        }
        request = Request::Status;
        if d.phase != last {
            if json {
                println!("{}", serde_json::to_string(&d).expect("serialisable"));
            } else {
                println!("{}", drain_line(&d));
            }
            last = d.phase.clone();
        }
        // Empty: a dpd from before drain phases, with nothing to wait for.
        if d.phase == "drained" || d.phase.is_empty() {
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A read that ran out of time (the reply timeout), not a broken socket.
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// dpd took the request but sent no reply in time: it may still act on
/// it, so the operator is told to look rather than to try again.
fn no_reply(socket: &Path, waited: std::time::Duration) -> ExitCode {
    eprintln!(
        "dpctl: no reply from dpd at {} within {} s: the request was sent and may still apply \
         (dpd busy, or an engine stalled); see `dpctl status` before trying again, \
         or wait longer with --reply-timeout",
        socket.display(),
        waited.as_secs()
    );
    ExitCode::from(3)
}

fn unreachable_dpd(socket: &Path, e: &std::io::Error) -> ExitCode {
    let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
        "the control socket is root's only: run dpctl as root"
    } else {
        "is dpd running? is --socket (or DPCTL_SOCKET) right?"
    };
    eprintln!(
        "dpctl: cannot talk to dpd at {}: {e} ({hint})",
        socket.display()
    );
    ExitCode::from(2)
}

fn print_reply(reply: Reply, cmd: &Cmd) -> ExitCode {
    match (reply.body, cmd) {
        (Some(Body::Drain(d)), _) => println!("{}", drain_line(&d)),
        (Some(Body::Status(s)), Cmd::Log(_)) => println!("{}", s.log_level),
        (Some(Body::Status(s)), _) => {
            println!(
                "dpd {} (DPDK {}), pid {}, up {:.0} s, configuration {}",
                s.version, s.dpdk, s.pid, s.uptime_s, s.config_version
            );
            if !s.log_level.is_empty() {
                println!("log level: {}", s.log_level);
            }
            if let Some(r) = &s.last_reload {
                println!(
                    "last reload {:.0} s ago: {}{}",
                    r.ago_s,
                    if r.ok { "" } else { "REFUSED: " },
                    r.message
                );
            }
            if let Some(l) = &s.conn_log {
                let only = (l.ends.as_ref()).map(|ends| {
                    let names: Vec<&str> = ends.iter().map(|e| e.name()).collect();
                    format!(", only {}", names.join(" "))
                });
                println!(
                    "connection log: {} ({} written, {} dropped, {} lost to write errors{}){}",
                    l.file.display(),
                    l.written,
                    l.dropped,
                    l.write_failed,
                    only.unwrap_or_default(),
                    l.error
                        .as_ref()
                        .map(|e| format!(": FAILING: {e}"))
                        .unwrap_or_default()
                );
            }
            if !s.lingering.is_empty() {
                println!(
                    "kept for open connections of removed VIPs: {}",
                    s.lingering.join(" ")
                );
            }
            println!("dataplane cores: {:?}", s.lcores);
            println!(
                "hugepages: {} ({})",
                if s.hugepages_in_use {
                    "in use"
                } else {
                    "not in use"
                },
                s.hugepages.join("; ")
            );
            println!(
                "{:<8} {:<16} {:<18} {:<18} {:<6} {:>5} {:>6} {:>4} {:<8} OFFLOADS",
                "PORT", "ADDRESS", "MAC", "DRIVER", "LINK", "MTU", "QUEUES", "RSS", "SPREAD"
            );
            for p in s.ports {
                let spread = match (p.steered, s.lcores.len()) {
                    (true, _) => "software",
                    (false, 1) => "-",
                    (false, _) => "NIC",
                };
                println!(
                    "{:<8} {:<16} {:<18} {:<18} {:<6} {:>5} {:>6} {:>4} {:<8} {}{}",
                    p.name,
                    p.address,
                    p.mac,
                    p.driver,
                    if p.link_up { "up" } else { "down" },
                    match p.mtu {
                        0 => "-".to_string(),
                        n => n.to_string(),
                    },
                    p.queues,
                    if p.rss { "yes" } else { "no" },
                    spread,
                    p.checksum_offload.summary(),
                    match p.segmentation_max_frame {
                        0 => String::new(),
                        n => format!(", tso {n} B"),
                    }
                );
                for a in &p.ipv6 {
                    println!("{:<8} {a}", "");
                }
                if let Some(m) = &p.memif_client {
                    println!("{:<8} {}", "", memif_client_line(m, p.link_up));
                }
                if let Some(d) = &p.device_counts {
                    println!("{:<8} {}", "", device_line(d));
                }
                if !p.bond_members.is_empty() {
                    println!(
                        "{:<8} bond 802.3ad: {} of {} members aggregated ({})",
                        "",
                        p.active_members.unwrap_or(0),
                        p.bond_members.len(),
                        p.bond_members.join(", ")
                    );
                }
                for v in &p.vlans {
                    println!("{:<8} vlan {:<4} {}", "", v.id, v.address);
                    for a in &v.ipv6 {
                        println!("{:<8} {:<9} {a}", "", "");
                    }
                }
            }
            if let Some(d) = &s.drain {
                println!("service: {}", drain_line(d));
            }
            if let Some(r) = &s.routing {
                println!(
                    "routing: {} announces {}",
                    r.interface,
                    if r.announced.is_empty() {
                        "nothing".to_string()
                    } else {
                        r.announced.join(", ")
                    }
                );
                for w in &r.withheld {
                    println!("{:<8} withheld: {w}", "");
                }
                if let Some(e) = &r.error {
                    println!("{:<8} error: {e}", "");
                }
            }
        }
        (
            Some(Body::Stats(s)),
            Cmd::Stats {
                busy_seconds: true, ..
            },
        ) => {
            println!("{:.6}", s.busy_seconds());
        }
        (Some(Body::Stats(s)), Cmd::Stats { per_core, .. }) => {
            if *per_core {
                for c in &s.cores {
                    print_stats(c);
                }
            }
            print_stats(&s.total);
        }
        (Some(Body::Applied(a)), _) => {
            println!("applied: {} (configuration {})", a.change, a.version);
        }
        (Some(Body::Vips(v)), Cmd::Vip(VipCmd::Show { .. })) => v.iter().for_each(print_vip),
        (Some(Body::Vips(v)), _) => print_vips(&v),
        (Some(Body::Certs(c)), Cmd::Cert(CertCmd::Show { .. })) => c.iter().for_each(print_cert),
        (Some(Body::Certs(c)), _) => print_certs(&c),
        (Some(Body::Pools(p)), _) => p.iter().for_each(print_pool),
        (Some(Body::Config(text)), _) => print!("{text}"),
        (Some(Body::Sources(list)), _) => {
            println!("{:<44} {:>11} {:>9}", "SOURCE", "ESTABLISHED", "HALF-OPEN");
            for s in &list {
                println!("{:<44} {:>11} {:>9}", s.source, s.established, s.half_open);
            }
        }
        (Some(Body::Conns(list)), _) => print!("{}", conns_text(&list)),
        (Some(Body::Refused(list)), _) => {
            println!(
                "{:<44} {:<12} {:>9} {:>10} {:>11} {:>12} {:>8}",
                "SOURCE", "VIP", "REFUSED", "CONN-LIMIT", "SOURCE-RATE", "SOURCE-CONNS", "DENIED"
            );
            for r in &list {
                println!(
                    "{:<44} {:<12} {:>9} {:>10} {:>11} {:>12} {:>8}",
                    r.source,
                    if r.vip.is_empty() { "-" } else { &r.vip },
                    r.refused,
                    r.conn_limit,
                    r.source_rate,
                    r.source_conns,
                    r.denied
                );
            }
        }
        (Some(Body::Reset(r)), _) => println!("{} connections reset", r.connections),
        (Some(Body::Deny(d)), _) => {
            d.prefixes.iter().for_each(|p| println!("{p}"));
            for t in &d.temporary {
                let left = duration_text(t.left_s);
                println!("{:<43} until {} ({left} left)", t.prefix, t.until);
            }
            println!(
                "{} networks denied ({} for a time); {} SYNs dropped, {} open connections reset since start",
                d.prefixes.len() + d.temporary.len(),
                d.temporary.len(),
                d.refused,
                d.reset
            );
        }
        (Some(Body::Saved(path)), _) => println!("saved to {}", path.display()),
        (Some(Body::Reopened(path)), _) => {
            println!("connection log: {} opened again", path.display());
        }
        (Some(Body::Captured(c)), _) => {
            println!("{} frames written to {}", c.packets, c.file.display());
        }
        _ => {
            eprintln!("dpctl: unexpected reply from dpd");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn print_vips(vips: &[VipInfo]) {
    println!(
        "{:<16} {:<22} {:<8} {:<24} {:<12} {:>10} {:>8} {:>10} {:>8}",
        "VIP", "LISTEN", "STATE", "CERTS", "POOL", "CONNS", "ACTIVE", "HANDSHAKES", "FAILED"
    );
    for v in vips {
        let c = &v.counters;
        println!(
            "{:<16} {:<22} {:<8} {:<24} {:<12} {:>10} {:>8} {:>10} {:>8}",
            v.name,
            v.listen,
            if v.enabled { "enabled" } else { "disabled" },
            if v.certs.is_empty() {
                "-".to_string()
            } else {
                v.certs.join(",")
            },
            v.pool.as_deref().unwrap_or("(builtin)"),
            c.connections,
            c.active,
            c.tls_handshakes,
            c.tls_failures
        );
    }
}

fn print_vip(v: &VipInfo) {
    let c = &v.counters;
    println!("vip {}", v.name);
    println!("  listen       {}", v.listen);
    println!(
        "  state        {}",
        if v.enabled { "enabled" } else { "disabled" }
    );
    println!(
        "  tls          {}",
        if v.certs.is_empty() {
            "no (plain TCP)".to_string()
        } else {
            format!("certificates {}", v.certs.join(", "))
        }
    );
    if let Some(t) = &v.tls {
        let list = |l: &[String]| {
            if l.is_empty() {
                "default".to_string()
            } else {
                l.join(", ")
            }
        };
        println!(
            "  tls policy   versions {}; suites {}; groups {}; alpn {}; tickets {}",
            list(&t.versions),
            list(&t.suites),
            list(&t.groups),
            t.alpn.as_deref().map_or("default".to_string(), list),
            t.tickets.as_ref().map_or("off".to_string(), |k| format!(
                "rotated every {} s",
                k.rotate_s
            ))
        );
    }
    println!(
        "  serves       {}",
        v.pool
            .as_ref()
            .map_or("built-in responder".to_string(), |p| format!("pool {p}"))
    );
    for r in &v.routes {
        println!("  route        SNI {} to pool {}", r.sni, r.pool);
    }
    println!(
        "  allow        {}",
        if v.allow.is_empty() {
            "any client".to_string()
        } else {
            v.allow.join(", ")
        }
    );
    let l = &v.limits;
    println!(
        "  timeouts     handshake {} ms, request {} ms, send {} ms, idle {} s",
        l.handshake_timeout_ms, l.request_timeout_ms, l.send_timeout_ms, l.idle_timeout_s
    );
    let cap = |n: Option<u32>| n.map_or("none".to_string(), |n| n.to_string());
    println!(
        "  limits       connections {}; per source: {} new a second, {} established",
        cap(l.max_connections),
        cap(l.max_new_per_source),
        cap(l.max_connections_per_source)
    );
    println!(
        "  connections  {} accepted, {} open",
        c.connections, c.active
    );
    println!(
        "  refused      {} over max_connections, {} over max_new_per_source, {} over max_connections_per_source, {} denied",
        c.refused_conn_limit, c.refused_source_rate, c.refused_source_conns, c.refused_denied
    );
    println!(
        "  timed out    {} handshakes, {} requests, {} sends",
        c.handshake_timeouts, c.request_timeouts, c.send_timeouts
    );
    println!(
        "  tls          {} handshakes, {} failures; {} clients without a member",
        c.tls_handshakes, c.tls_failures, c.proxy_no_member
    );
}

fn days_left(not_after: i64) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    (not_after - now) / 86_400
}

fn print_certs(certs: &[CertInfo]) {
    println!(
        "{:<16} {:<11} {:<32} {:>9} {:<20}",
        "CERT", "KEY", "NAMES", "DAYS LEFT", "USED BY"
    );
    for c in certs {
        println!(
            "{:<16} {:<11} {:<32} {:>9} {:<20}",
            c.name,
            c.key_type,
            c.names.join(","),
            days_left(c.not_after),
            if c.used_by.is_empty() {
                "-".to_string()
            } else {
                c.used_by.join(",")
            }
        );
    }
}

fn print_cert(c: &CertInfo) {
    println!("cert {}", c.name);
    println!(
        "  chain        {} ({} certificates)",
        c.cert.display(),
        c.chain_len
    );
    println!("  key          {} ({})", c.key.display(), c.key_type);
    println!("  names        {}", c.names.join(", "));
    println!(
        "  valid        {} to {} (Unix seconds; {} days left)",
        c.not_before,
        c.not_after,
        days_left(c.not_after)
    );
    println!("  sha256       {}", c.sha256);
    println!(
        "  used by      {}",
        if c.used_by.is_empty() {
            "no VIP".to_string()
        } else {
            c.used_by.join(", ")
        }
    );
}

fn print_pool(p: &PoolInfo) {
    println!(
        "pool {} ({}{}){}",
        p.name,
        p.balance,
        if p.proxy_protocol {
            ", PROXY protocol v2"
        } else {
            ""
        },
        if p.used_by.is_empty() {
            String::new()
        } else {
            format!(" for {}", p.used_by.join(", "))
        }
    );
    println!(
        "  health: {}",
        p.health.as_deref().unwrap_or("none (members taken as up)")
    );
    println!(
        "  {:<22} {:>6} {:<6} {:<16} {:>8}",
        "MEMBER", "WEIGHT", "STATE", "HEALTH", "ACTIVE"
    );
    for m in &p.members {
        let health = if m.healthy_engines == m.engines {
            "up".to_string()
        } else if m.healthy_engines == 0 {
            "down".to_string()
        } else {
            format!("up on {}/{} cores", m.healthy_engines, m.engines)
        };
        // Why it is down, or why its last check failed while it stayed up.
        let why = m
            .last_failure
            .as_ref()
            .map_or(String::new(), |w| format!("  last check failed: {w}"));
        println!(
            "  {:<22} {:>6} {:<6} {:<16} {:>8}{why}",
            m.addr, m.weight, m.state, health, m.active
        );
    }
}

fn print_stats(c: &CoreStats) {
    print!("{}", stats_text(c));
}

/// `dpctl stats`' text for one core or the total.
fn stats_text(c: &CoreStats) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = match c.lcore {
        Some(l) => writeln!(
            out,
            "core {l} (configuration {}), busy {:.1} %:",
            c.config_version,
            100.0 * c.busy()
        ),
        None => writeln!(out, "total, busy {:.1} %:", 100.0 * c.busy()),
    };
    // Every declared counter (control::counters) by its field name, one
    // line per prefix (in the order prefixes first appear; counters of one
    // prefix need not be declared together); a line whose counters are
    // all zero is left out, but for rx, tx and tcp.
    let mut lines: Vec<(&str, Vec<String>, bool)> = Vec::new();
    for (info, v) in counters::SCALARS.iter().zip(c.scalars()) {
        if matches!(info.kind, Kind::Cycles | Kind::Version) || info.field == "loops" {
            continue; // in the header
        }
        let (group, name) = info.field.split_once('_').unwrap_or((info.field, ""));
        match lines.iter_mut().find(|(g, _, _)| *g == group) {
            Some((_, items, any)) => {
                items.push(format!("{name} {v}"));
                *any |= v > 0;
            }
            _ => lines.push((group, vec![format!("{name} {v}")], v > 0)),
        }
    }
    for (group, items, any) in lines {
        if any || matches!(group, "rx" | "tx" | "tcp") {
            let _ = writeln!(out, "  {group}: {}", items.join(", "));
        }
        if group == "tls" {
            for (what, counts) in [
                ("versions", &c.tls_versions),
                ("suites", &c.tls_suites),
                ("groups", &c.tls_groups),
                ("key types", &c.tls_key_types),
                ("failures", &c.tls_failure_reasons),
            ] {
                if !counts.is_empty() {
                    let list: Vec<String> =
                        counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
                    let _ = writeln!(out, "    tls {what}: {}", list.join(", "));
                }
            }
        }
    }
    for (name, v) in &c.vips {
        if v.connections > 0 {
            let items: Vec<String> = counters::VIP_SCALARS
                .iter()
                .zip(v.scalars())
                .map(|(info, n)| format!("{} {n}", info.field))
                .collect();
            let _ = writeln!(out, "  vip {name}: {}", items.join(", "));
        }
    }
    let drops: Vec<String> = c
        .drops
        .iter()
        .filter(|(_, &n)| n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let _ = writeln!(
        out,
        "  drops: {}",
        if drops.is_empty() {
            "none".to_string()
        } else {
            drops.join(", ")
        }
    );
    out
}

/// `stats --watch`: a line of rates per interval.
fn watch(
    client: &mut Client,
    socket: &Path,
    secs: f64,
    count: Option<u64>,
    per_core: bool,
    json: bool,
) -> ExitCode {
    let interval = Duration::from_secs_f64(secs.clamp(0.1, 3600.0));
    let fetch = |c: &mut Client| -> Result<Stats, std::io::Error> {
        match c.call(&Request::Stats) {
            Ok(Reply {
                body: Some(Body::Stats(s)),
                ..
            }) => Ok(*s),
            Ok(r) => Err(std::io::Error::other(
                r.error.unwrap_or_else(|| "unexpected reply".into()),
            )),
            Err(e) => Err(e),
        }
    };
    // A stats reply that does not come in time: dpd is stalled, not gone.
    let failed = |e: std::io::Error| {
        if is_timeout(&e) {
            eprintln!(
                "dpctl: no stats from dpd at {} within the reply timeout: is it stalled?",
                socket.display()
            );
            ExitCode::from(3)
        } else {
            unreachable_dpd(socket, &e)
        }
    };
    let mut prev = match fetch(client) {
        Ok(s) => s,
        Err(e) => return failed(e),
    };
    let mut at = Instant::now();
    let mut lines = 0u64;
    if !json {
        println!(
            "{:<8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10} {:>10} {:>8} {:>6}",
            "TIME",
            "CORE",
            "CONN/S",
            "ACTIVE",
            "TIME-WAIT",
            "HS/S",
            "FAIL/S",
            "RX MBIT/S",
            "TX MBIT/S",
            "DROP/S",
            "BUSY%"
        );
    }
    while count.is_none_or(|n| lines < n) {
        std::thread::sleep(interval.saturating_sub(at.elapsed()));
        let now = match fetch(client) {
            Ok(s) => s,
            Err(e) => return failed(e),
        };
        let dt = at.elapsed().as_secs_f64();
        at = Instant::now();
        let clock = clock_now();
        let mut rows: Vec<(&CoreStats, &CoreStats)> = vec![(&now.total, &prev.total)];
        if per_core {
            rows.extend(now.cores.iter().zip(&prev.cores));
        }
        for (n, p) in rows {
            let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
            let busy = {
                let (b, i) = (
                    n.busy_cycles.saturating_sub(p.busy_cycles),
                    n.idle_cycles.saturating_sub(p.idle_cycles),
                );
                if b + i == 0 {
                    0.0
                } else {
                    100.0 * b as f64 / (b + i) as f64
                }
            };
            let drops = |c: &CoreStats| c.drops.values().sum::<u64>();
            let core = n.lcore.map_or("all".to_string(), |l| l.to_string());
            let row = json!({
                "time": clock,
                "core": core,
                "connections_per_s": rate(n.tcp_accepted, p.tcp_accepted),
                "active": n.tcp_active,
                "time_wait": n.tcp_time_wait,
                "handshakes_per_s": rate(n.tls_handshakes, p.tls_handshakes),
                "tls_failures_per_s": rate(n.tls_failures, p.tls_failures),
                "rx_mbit_per_s": rate(n.rx_bytes, p.rx_bytes) * 8e-6,
                "tx_mbit_per_s": rate(n.tx_bytes, p.tx_bytes) * 8e-6,
                "drops_per_s": rate(drops(n), drops(p)),
                "busy_percent": busy,
            });
            if json {
                println!("{row}");
            } else {
                println!(
                    "{:<8} {:>6} {:>9.0} {:>9} {:>9} {:>9.0} {:>8.0} {:>10.1} {:>10.1} {:>8.0} {:>6.1}",
                    clock,
                    core,
                    row["connections_per_s"].as_f64().unwrap_or(0.0),
                    n.tcp_active,
                    n.tcp_time_wait,
                    row["handshakes_per_s"].as_f64().unwrap_or(0.0),
                    row["tls_failures_per_s"].as_f64().unwrap_or(0.0),
                    row["rx_mbit_per_s"].as_f64().unwrap_or(0.0),
                    row["tx_mbit_per_s"].as_f64().unwrap_or(0.0),
                    row["drops_per_s"].as_f64().unwrap_or(0.0),
                    busy
                );
            }
        }
        let _ = std::io::stdout().flush();
        prev = now;
        lines += 1;
    }
    ExitCode::SUCCESS
}

/// UTC time of day, `HH:MM:SS`.
fn clock_now() -> String {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{:02}:{:02}:{:02}", s / 3600 % 24, s / 60 % 60, s % 60)
}

/// One line on a memif client port's connection, for `dpctl status`.
fn memif_client_line(m: &control::api::MemifClientStatus, up: bool) -> String {
    let mode = if m.zero_copy { ", zero-copy" } else { "" };
    let state = if up {
        format!("connected ({} time(s) so far)", m.connections)
    } else {
        let mut s = format!(
            "connecting ({} tries since it was up, {} connection(s) so far)",
            m.tries, m.connections
        );
        if let Some(e) = &m.last_error {
            s.push_str(&format!("; last: {e}"));
        }
        s
    };
    format!("memif client of {}{mode}: {state}", m.socket)
}

/// One line on what a port's device counted, for `dpctl status`: its
/// frames each way and the drops no engine saw.
fn device_line(d: &control::api::DeviceCounts) -> String {
    format!(
        "device: rx {} frames {} B, missed {}, errors {}, no mbuf {}; tx {} frames {} B, errors {}",
        d.rx_packets,
        d.rx_bytes,
        d.rx_missed,
        d.rx_errors,
        d.rx_no_mbuf,
        d.tx_packets,
        d.tx_bytes,
        d.tx_errors
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `deny add` of 20,000 prefixes (a block list pasted at 3 a.m.)
    /// goes as several requests each within dpd's limit, every prefix in
    /// one of them, in order; a prefix that does not read sends none.
    /// Another request too long for dpd is refused here, naming the limit.
    /// Before, the one line over the limit broke the pipe and dpctl said
    /// dpd was not running.
    #[test]
    fn a_long_deny_goes_in_parts_dpd_takes() {
        let prefixes: Vec<String> = (0..20_000u32)
            .map(|i| std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string())
            .collect();
        let parts = fitted(Request::DenyAdd {
            prefixes: prefixes.clone(),
            for_s: Some(60),
        })
        .unwrap();
        assert!(parts.len() > 1);
        let mut all = Vec::new();
        for p in &parts {
            assert!(serde_json::to_vec(p).unwrap().len() < control::api::MAX_REQUEST);
            match p {
                Request::DenyAdd { prefixes, for_s } => {
                    assert_eq!(*for_s, Some(60));
                    all.extend(prefixes.iter().cloned());
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(all, prefixes);
        let mut bad = prefixes;
        bad.push("10.0.0.1/8".into());
        let e = fitted(Request::DenyRemove { prefixes: bad }).unwrap_err();
        assert!(e.contains("10.0.0.1/8") && e.contains("host bits"), "{e}");
        let one = fitted(Request::DenyRemove {
            prefixes: vec!["192.0.2.1".into()],
        });
        assert_eq!(one.map(|p| p.len()), Ok(1));
        let long = Request::LogLevel {
            level: "x".repeat(control::api::MAX_REQUEST),
        };
        let e = fitted(long).unwrap_err();
        assert!(e.contains("at most 65536"), "{e}");
    }

    #[test]
    fn the_command_line_is_sound_and_a_capture_keeps_its_own_timeout() {
        // clap checks the whole tree here (at run time it checks only
        // the subcommand used): a global option named like a
        // subcommand's own made `dpctl capture` panic.
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "dpctl",
            "capture",
            "--port",
            "p0",
            "--file",
            "/tmp/p0.pcap",
            "--timeout",
            "5",
        ])
        .unwrap();
        assert!(
            matches!(cli.cmd, Cmd::Capture { timeout: 5, .. }),
            "{cli:?}"
        );
        assert_eq!(cli.reply_timeout, 30);
    }

    #[test]
    fn a_watch_interval_is_a_number_of_seconds_in_range() {
        for good in ["0.1", "1", "2.5", "3600"] {
            assert!(parse_interval_s(good).is_ok(), "{good}");
        }
        // NaN went through the clamp and made dpctl panic.
        for bad in ["nan", "NaN", "inf", "-1", "0", "0.01", "3601", "x"] {
            assert!(parse_interval_s(bad).is_err(), "{bad}");
        }
        let cli = Cli::try_parse_from(["dpctl", "stats", "--watch", "nan"]);
        assert!(cli.is_err(), "refused before any use");
    }

    #[test]
    fn a_memif_client_says_where_its_connection_stands() {
        let mut m = control::api::MemifClientStatus {
            socket: "/run/vpp/memif.sock".into(),
            zero_copy: true,
            connections: 2,
            tries: 0,
            last_error: None,
        };
        assert_eq!(
            memif_client_line(&m, true),
            "memif client of /run/vpp/memif.sock, zero-copy: connected (2 time(s) so far)"
        );
        m.tries = 3;
        m.last_error = Some("rte_eth_dev_start failed".into());
        let down = memif_client_line(&m, false);
        assert!(down.contains("connecting (3 tries"), "{down}");
        assert!(down.ends_with("last: rte_eth_dev_start failed"), "{down}");
    }

    #[test]
    fn deny_times_read_with_their_units_and_print_as_two() {
        assert_eq!(parse_duration_s("90"), Ok(90));
        assert_eq!(parse_duration_s("90s"), Ok(90));
        assert_eq!(parse_duration_s("10m"), Ok(600));
        assert_eq!(parse_duration_s("2h"), Ok(7_200));
        assert_eq!(parse_duration_s("7d"), Ok(604_800));
        for bad in ["", "m", "10x", "-5m", "1.5h", "99999999999999999999d", "ß"] {
            assert!(parse_duration_s(bad).is_err(), "{bad:?}");
        }
        assert_eq!(duration_text(0), "0s");
        assert_eq!(duration_text(45), "45s");
        assert_eq!(duration_text(598), "9m 58s");
        assert_eq!(duration_text(3_600), "1h");
        assert_eq!(duration_text(3_660), "1h 1m");
        assert_eq!(duration_text(183_845), "2d 3h");
    }

    #[test]
    fn stats_print_each_prefix_once_with_its_labelled_counts() {
        let mut c = CoreStats {
            tls_handshakes: 5,
            tls_handshakes_deferred: 2,
            request_timeouts: 1,
            ..CoreStats::default()
        };
        c.tls_versions.insert("TLSv1.3".into(), 5);
        let text = stats_text(&c);
        let tls: Vec<&str> = text.lines().filter(|l| l.starts_with("  tls:")).collect();
        assert_eq!(tls.len(), 1, "{text}");
        assert!(
            tls[0].contains("handshakes 5") && tls[0].contains("handshakes_deferred 2"),
            "{text}"
        );
        assert_eq!(text.matches("tls versions: TLSv1.3 5").count(), 1, "{text}");
        assert!(text.contains("  request: timeouts 1"), "{text}");
    }
}
