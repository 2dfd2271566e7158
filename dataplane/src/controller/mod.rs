//! The control thread's side of run-time changes (docs/architecture.md,
//! `controller`): the running configuration, the certificates and TLS
//! configurations built from it, and the engines' rings.
//!
//! A change is applied to a copy of the configuration
//! ([`control::change::apply`]), validated as a whole, turned into a new
//! [`Snapshot`] (certificates loaded, TLS configurations built) and pushed to
//! every engine; it becomes the running configuration only once every engine
//! has switched to it. Anything refused on the way leaves everything as it
//! was. Certificates and TLS configurations that did not change are reused,
//! so a change elsewhere does not reload files or draw new ticket keys.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, RwLock};
use std::time::{Duration, Instant};

use control::api::{
    Answer, Applied, Body, Captured, CertInfo, DenyInfo, DrainState, MemberInfo, PoolInfo,
    PortStatus, RefusedInfo, ReloadStatus, Reply, Request, SourceInfo, Stats, Status,
    TemporaryDeny, VipCounters, VipInfo, VipLimits, MAX_SOURCES,
};
use control::config::{parse_prefix, Config, ConfigError, MAX_DENIED};
use crypto::certs::{Cert, CertStore};
use crypto::session::TlsConfig;
use crypto::tickets::TicketKeys;

use crate::app::config::TlsCopies;
use crate::app::conn_log::EndSet;
use crate::app::deadlines::Timeouts;
use crate::app::pool as dataplane_pool;
use crate::net::PrefixSet;
use crate::snapshot::{
    write_pcap, Capture, ControlLink, FromEngine, PoolView, Snapshot, ToEngine, VipSpec, MAX_VIPS,
};
use crate::stats::{Counters, SharedCounters};
use crate::tcp::ListenLimits;

mod capture;
mod conn_log;
mod conns;
mod deny;
mod lingering;
mod reconnect;
pub mod service;
mod tick;

pub use reconnect::PeerPort;
mod views;

/// How long engines may take to switch to a snapshot or answer a query
/// (they read their ring every millisecond).
const ENGINE_REPLY: Duration = Duration::from_secs(3);

/// A certificate as loaded, with the files it came from.
#[derive(Debug, Clone)]
struct LoadedCert {
    cert_file: PathBuf,
    key_file: PathBuf,
    cert: Cert,
    /// Bumped on every load: TLS configurations built on an older one are
    /// rebuilt.
    generation: u64,
}

/// What a VIP's TLS configuration was built from.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TlsInputs {
    certs: Vec<(String, u64)>,
    policy: String,
    tickets_epoch: u64,
    /// What the ticket key file held when last read
    /// ([`crypto::tickets::TicketKeys::key_file_id`]).
    ticket_key_file: Option<[u8; 32]>,
}

/// Everything a snapshot was built from, committed once engines use it.
#[derive(Debug)]
struct Built {
    snapshot: Arc<Snapshot>,
    certs: HashMap<String, LoadedCert>,
    tls: HashMap<String, (TlsInputs, TlsCopies)>,
    slots: HashMap<String, u16>,
    tickets_epoch: u64,
    generation: u64,
    conn_log: LogChange,
    lingering: Vec<IpAddr>,
    /// Said with the change: certificates kept though expired.
    notes: Vec<String>,
}

/// What a change does to the connection log's file.
#[derive(Debug)]
enum LogChange {
    /// Go on with the file written now.
    Keep,
    /// Write to this file (opened) from now on.
    Open(PathBuf, std::fs::File),
    Off,
}

/// Whether `e` refused certificate files only for having expired, and they
/// read as `served` was loaded from them.
fn expired_as_served(served: &LoadedCert, e: &crypto::certs::CertError) -> bool {
    let crypto::certs::CertErrorKind::Expired { not_after } = e.kind else {
        return false;
    };
    Cert::load(&served.cert_file, &served.key_file, not_after)
        .is_ok_and(|again| served.cert.same_as(&again))
}

/// Names of the VIP counter slots (index: slot), shared with the metrics
/// thread.
pub type SlotNames = Arc<RwLock<Vec<String>>>;

/// The configuration's gauges for the metrics endpoint (its own thread),
/// written by the control thread.
pub type SharedConfigState = Arc<RwLock<control::metrics::ConfigState>>;

/// The control thread's state.
#[derive(Debug)]
pub struct Controller {
    cfg: Config,
    config_path: Option<PathBuf>,
    version: u64,
    /// The last version number handed to the engines (committed or not):
    /// the next change takes the one after, so no number means two
    /// configurations.
    issued: u64,
    /// The last question's number ([`Controller::next_ask`]).
    asks: std::cell::Cell<u64>,
    /// The engine whose loop stood still when the last wait for engines
    /// gave up on it early ([`Controller::await_engines`]).
    stood_still: std::cell::Cell<Option<usize>>,
    slots: HashMap<String, u16>,
    slot_names: SlotNames,
    config_state: SharedConfigState,
    /// When pools' health was last put in `config_state` for the metrics.
    pools_published: Option<Instant>,
    /// When the ports' device counts were last put in `config_state`.
    devices_published: Option<Instant>,
    /// The last reload of the file: when, whether it applied, and what it
    /// did or why not.
    last_reload: Option<(Instant, bool, String)>,
    /// Seconds added to the clock certificates are judged by (tests).
    cert_clock_skew_s: i64,
    certs: HashMap<String, LoadedCert>,
    tls: HashMap<String, (TlsInputs, TlsCopies)>,
    tickets_epoch: u64,
    generation: u64,
    links: Vec<ControlLink>,
    shared: Vec<(u32, Arc<SharedCounters>)>,
    tsc_hz: u64,
    /// A capture is running (one at a time).
    capturing: Arc<AtomicBool>,
    /// What `status` and `drain` need of the running daemon (absent when
    /// the controller runs without one, as in tests).
    daemon: Option<DaemonInfo>,
    /// Drain phases and route announcement, with the daemon attached.
    service: Option<tick::Service>,
    /// `[access] deny` as the engines have it (the same one is handed on
    /// while the list is unchanged, so engines look at their connections
    /// only when it changes).
    deny: Arc<PrefixSet>,
    /// Each VIP `allow` list as the engines have it, by its text.
    allow_sets: HashMap<Vec<String>, Arc<PrefixSet>>,
    /// Set when taking off a network whose deny time came failed: when to
    /// try again.
    deny_retry_at: Option<jiff::Timestamp>,
    /// When `[access] auto_deny` looks at the sources refused next.
    auto_deny_at: Option<Instant>,
    /// Networks an operator took off the deny lists, and when: not
    /// denied again by `auto_deny` while the refusals that earned their
    /// deny may still be counted.
    pardoned: Vec<((IpAddr, u8), Instant)>,
    /// The connection log (`[log] connections`), once it was first on.
    conn_log: Option<conn_log::ConnLog>,
    /// Addresses of removed VIPs the engines keep while any serves them
    /// ([`lingering`]), and when they were last asked about them.
    lingering: Vec<IpAddr>,
    linger_asked: Option<Instant>,
}

/// The running daemon, as `status` and `drain` requests see it.
#[derive(Debug)]
pub struct DaemonInfo {
    pub started: Instant,
    pub lcores: Vec<u32>,
    /// Each port's status (link state asked for at each request) and id.
    /// Each port, with its DPDK port id (`None`: a tap of our own, up
    /// while attached).
    pub ports: Vec<(PortStatus, Option<crate::dpdk::PortId>)>,
    pub hugepages: Vec<String>,
    pub hugepages_in_use: bool,
    /// Set to stop new connections on every VIP (by the drain phases).
    pub drain: Arc<AtomicBool>,
    /// Set by SIGTERM (taken back by the tick, which counts them): drain,
    /// then set `stop`; a second sets `stop` at once.
    pub term: Arc<AtomicBool>,
    /// Set by SIGHUP: reload the configuration file (taken back by the
    /// tick that does it).
    pub reload: Arc<AtomicBool>,
    /// Set by SIGUSR1: open the connection log's file again.
    pub reopen: Arc<AtomicBool>,
    pub stop: Arc<AtomicBool>,
    /// The announce interface, with `[routing]`.
    pub announce: Option<crate::dpdk::VipIface>,
    /// The ports that connect to their peer (memif clients), restarted
    /// while their link is down.
    pub peers: Vec<PeerPort>,
    /// EAL's memory files, kept for zero-copy memif clients to share again.
    pub memseg_fds: crate::dpdk::MemsegFds,
}

impl Controller {
    /// The controller for `cfg` and its first snapshot (version 1), which
    /// the engines take before they start.
    ///
    /// # Errors
    /// A certificate or TLS policy that cannot be loaded, naming its field.
    pub fn start(
        cfg: Config,
        config_path: Option<PathBuf>,
        links: Vec<ControlLink>,
        shared: Vec<(u32, Arc<SharedCounters>)>,
        tsc_hz: u64,
    ) -> Result<(Self, Arc<Snapshot>), ConfigError> {
        let mut c = Self {
            cfg: cfg.clone(),
            config_path,
            version: 0,
            issued: 0,
            asks: std::cell::Cell::new(0),
            stood_still: std::cell::Cell::new(None),
            slots: HashMap::new(),
            slot_names: Arc::new(RwLock::new(Vec::new())),
            config_state: Arc::default(),
            pools_published: None,
            devices_published: None,
            last_reload: None,
            cert_clock_skew_s: 0,
            certs: HashMap::new(),
            tls: HashMap::new(),
            tickets_epoch: 0,
            generation: 0,
            links,
            shared,
            tsc_hz,
            capturing: Arc::new(AtomicBool::new(false)),
            daemon: None,
            service: None,
            deny: Arc::default(),
            allow_sets: HashMap::new(),
            deny_retry_at: None,
            auto_deny_at: None,
            pardoned: Vec::new(),
            conn_log: None,
            lingering: Vec::new(),
            linger_asked: None,
        };
        let mut cfg = cfg;
        let expired = cfg.access.take_expired(jiff::Timestamp::now());
        if !expired.is_empty() {
            log::info!("deny of {} past its time: not applied", expired.join(" "));
        }
        let built = c.build(&cfg, Reload::Nothing, false)?;
        let snap = built.snapshot.clone();
        for w in tick::routing_warnings(&cfg) {
            log::warn!("{w}");
        }
        c.commit(cfg, built);
        Ok((c, snap))
    }

    /// Lets `status` and `drain` requests reach the running daemon.
    pub fn set_daemon(&mut self, mut info: DaemonInfo) {
        self.service = Some(tick::Service::new(&self.cfg, info.announce.take()));
        self.daemon = Some(info);
    }

    /// Slot names, for a thread that renders stats.
    pub fn slot_names(&self) -> SlotNames {
        self.slot_names.clone()
    }

    /// The gauges the metrics endpoint shows beside the counters.
    pub fn config_state(&self) -> SharedConfigState {
        self.config_state.clone()
    }

    /// Counters of every engine, per VIP too.
    pub fn stats(&self) -> Stats {
        collect_stats(&self.shared, &self.slot_names, self.tsc_hz)
    }

    /// Answers everything but `status` and `drain` (which need the ports
    /// and the drain flag: `daemon`). A capture's reply comes later, from
    /// its own thread.
    pub fn handle(&mut self, req: &Request) -> Answer {
        match req {
            Request::Capture {
                port,
                count,
                timeout_ms,
                file,
            } => self.capture(port, *count, *timeout_ms, file),
            other => self.reply(other).into(),
        }
    }

    fn reply(&mut self, req: &Request) -> Reply {
        if let Request::LogLevel { level } = req {
            return self.set_log_level(level);
        }
        if let Some(next) = control::change::apply(&self.cfg, req) {
            return match next {
                Ok(next) => self.change(next, req),
                Err(e) => Reply::error(format!("refused: {e}")),
            };
        }
        match req {
            Request::Stats => Reply::ok(Body::Stats(Box::new(self.stats()))),
            Request::VipList => Reply::ok(Body::Vips(self.vip_infos(None))),
            Request::VipShow { name } => match self.vip_infos(Some(name)) {
                v if v.is_empty() => Reply::error(format!("no VIP is named {name:?}")),
                v => Reply::ok(Body::Vips(v)),
            },
            Request::CertList => Reply::ok(Body::Certs(self.cert_infos(None))),
            Request::CertShow { name } => match self.cert_infos(Some(name)) {
                c if c.is_empty() => Reply::error(format!("no certificate is named {name:?}")),
                c => Reply::ok(Body::Certs(c)),
            },
            Request::PoolList => self.pool_infos(None),
            Request::PoolShow { name } => {
                if self.cfg.pools.iter().any(|p| &p.name == name) {
                    self.pool_infos(Some(name))
                } else {
                    Reply::error(format!("no pool is named {name:?}"))
                }
            }
            Request::TicketsRotate => {
                let cfg = self.cfg.clone();
                self.push_change(cfg, Reload::Nothing, true, "ticket keys rotated".into())
            }
            Request::ConfigReload => self.reload_file(),
            Request::LogReopen => self.reopen_conn_log(),
            Request::ConfigShow => Reply::ok(Body::Config(self.cfg.to_toml())),
            Request::Sources {
                vip,
                count,
                refused: false,
            } => self.sources(vip.as_deref(), *count),
            Request::Sources {
                vip,
                count,
                refused: true,
            } => self.refused_sources(vip.as_deref(), *count),
            Request::ConnList {
                vip,
                source,
                state,
                idle_over_s,
                count,
            } => self.conn_list(&conns::Select::of(vip, source, state, *idle_over_s), *count),
            Request::ConnReset {
                vip,
                source,
                state,
                idle_over_s,
            } => self.conn_reset(&conns::Select::of(vip, source, state, *idle_over_s)),
            Request::DenyList => {
                let total = self.stats().total;
                Reply::ok(Body::Deny(DenyInfo {
                    prefixes: self.cfg.access.deny.clone(),
                    temporary: self.temporary_denies(jiff::Timestamp::now()),
                    refused: total.vips.values().map(|v| v.refused_denied).sum(),
                    reset: total.tcp_denied_resets,
                }))
            }
            Request::ConfigSave { path } => self.save(path.as_deref()),
            Request::Status => self.status(),
            Request::Drain => self.drain(),
            Request::Undrain => self.undrain(),
            _ => Reply::error("not handled here"),
        }
    }

    fn change(&mut self, next: Config, req: &Request) -> Reply {
        let (cert, what) = match req {
            Request::VipAdd { vip } => (None, format!("VIP {} added", vip.name)),
            Request::VipSet { name, .. } => (None, format!("VIP {name} changed")),
            Request::VipRemove { name } => (None, format!("VIP {name} removed")),
            Request::VipEnable { name } => (None, format!("VIP {name} enabled")),
            Request::VipDisable { name } => (None, format!("VIP {name} disabled")),
            Request::CertAdd { cert } => (
                Some(cert.name.clone()),
                format!("certificate {} added", cert.name),
            ),
            Request::CertRotate { cert } => (
                Some(cert.name.clone()),
                format!("certificate {} rotated", cert.name),
            ),
            Request::CertRemove { name } => (None, format!("certificate {name} removed")),
            Request::PoolAdd { pool } => (None, format!("pool {} added", pool.name)),
            Request::PoolRemove { name } => (None, format!("pool {name} removed")),
            Request::MemberAdd { pool, member } => {
                (None, format!("pool {pool}: member {} added", member.addr))
            }
            Request::MemberRemove { pool, addr } => {
                (None, format!("pool {pool}: member {addr} removed"))
            }
            Request::MemberWeight { pool, addr, weight } => {
                (None, format!("pool {pool}: member {addr} weight {weight}"))
            }
            Request::MemberDrain { pool, addr } => {
                (None, format!("pool {pool}: member {addr} draining"))
            }
            Request::MemberEnable { pool, addr } => {
                (None, format!("pool {pool}: member {addr} enabled"))
            }
            Request::DenyAdd {
                prefixes,
                for_s: None,
            } => (None, format!("denied {}", prefixes.join(" "))),
            Request::DenyAdd {
                prefixes,
                for_s: Some(s),
            } => (None, format!("denied {} for {s} s", prefixes.join(" "))),
            Request::DenyRemove { prefixes } => {
                (None, format!("no longer denied {}", prefixes.join(" ")))
            }
            _ => (None, "changed".into()),
        };
        let reload = cert.as_deref().map_or(Reload::Nothing, Reload::Cert);
        let reply = self.push_change(next, reload, false, what);
        if let (true, Request::DenyRemove { prefixes }) = (reply.ok, req) {
            self.pardon(prefixes, Instant::now());
        }
        reply
    }

    /// `log level`: the logger's filter replaced at once, here on the
    /// control thread (no engine takes part, so a stuck one cannot stop
    /// it: that is when more logging is wanted), even when the running
    /// configuration names that level already (the filter in effect may
    /// be `RUST_LOG`'s). The running configuration keeps it, for `config
    /// save`; its version stays.
    fn set_log_level(&mut self, level: &str) -> Reply {
        let checked =
            control::config::check_log_level(level).and_then(|()| crate::logging::set_level(level));
        if let Err(why) = checked {
            return Reply::error(format!(
                "refused: {}",
                ConfigError::new("log.level", level, why)
            ));
        }
        self.cfg.log.level = level.to_string();
        let change = format!("log level {level}");
        log::info!("configuration {}: {change}", self.version);
        Reply::ok(Body::Applied(Applied {
            version: self.version,
            change,
        }))
    }

    /// Builds, pushes and commits `next`; the reply says applied or why not.
    fn push_change(
        &mut self,
        next: Config,
        reload: Reload<'_>,
        rotate_tickets: bool,
        what: String,
    ) -> Reply {
        let built = match self.build(&next, reload, rotate_tickets) {
            Ok(b) => b,
            Err(e) => return Reply::error(format!("refused: {e}")),
        };
        let version = built.snapshot.version;
        self.issued = version;
        if let Err(e) = self.push(&built.snapshot) {
            log::warn!("configuration {version} ({what}) not applied: {e}");
            return Reply::error(format!(
                "not applied: {e}; no engine changed (configuration {} goes on)",
                self.version
            ));
        }
        let mut what = what;
        for note in &built.notes {
            what.push_str(&format!(" ({note})"));
        }
        self.commit(next, built);
        log::info!("configuration {version}: {what}");
        Reply::ok(Body::Applied(Applied {
            version,
            change: what,
        }))
    }

    /// The snapshot for `next`, reusing what did not change. `reload`
    /// says which certificates to load again even if their files are named
    /// as before.
    fn build(
        &mut self,
        next: &Config,
        reload: Reload<'_>,
        rotate_tickets: bool,
    ) -> Result<Built, ConfigError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
            .saturating_add(self.cert_clock_skew_s);
        let mut generation = self.generation;
        // A VIP's limits are shared out among the engines (RSS spreads its
        // clients, and each client's connections), each share rounded up.
        let engines = u32::try_from(self.links.len().max(1)).unwrap_or(u32::MAX);
        let share = |n: u32| n.div_ceil(engines).max(1);
        let mut certs = HashMap::new();
        let mut notes = Vec::new();
        for (k, c) in next.certs.iter().enumerate() {
            let known = self
                .certs
                .get(&c.name)
                .filter(|l| l.cert_file == c.cert && l.key_file == c.key);
            let loaded = match known {
                Some(l) if !reload.wants(&c.name) => l.clone(),
                _ => {
                    let field = c
                        .origin
                        .clone()
                        .unwrap_or_else(|| format!("cert[{k}] ({})", c.name));
                    let cert = match Cert::load(&c.cert, &c.key, now) {
                        Ok(cert) => cert,
                        // Served already and read as it was: kept, and
                        // said. Refusing the reload would not stop it being
                        // served, only every other change with it.
                        Err(e) if known.is_some_and(|l| expired_as_served(l, &e)) => {
                            let note = format!("cert {}: {e}; kept as served: renew it", c.name);
                            log::warn!("{note}");
                            notes.push(note);
                            if let Some(l) = known {
                                certs.insert(c.name.clone(), l.clone());
                            }
                            continue;
                        }
                        Err(e) => {
                            return Err(ConfigError::new(field, e.file.display(), e.to_string()))
                        }
                    };
                    secret_permissions(next, &field, &c.key, cert.key_mode)?;
                    match known {
                        // Read again and unchanged: kept as it was, so the
                        // VIPs serving it keep their TLS configurations
                        // (and with them their ticket keys).
                        Some(l) if l.cert.same_as(&cert) => l.clone(),
                        _ => {
                            generation += 1;
                            LoadedCert {
                                cert_file: c.cert.clone(),
                                key_file: c.key.clone(),
                                cert,
                                generation,
                            }
                        }
                    }
                }
            };
            certs.insert(c.name.clone(), loaded);
        }
        let tickets_epoch = self.tickets_epoch + u64::from(rotate_tickets);
        let mut tls = HashMap::new();
        let mut slots = self.slots.clone();
        let mut vips = Vec::new();
        for (i, vip) in next.vips.iter().enumerate() {
            let addr = vip
                .listen_addr()
                .map_err(|r| ConfigError::new(format!("vip[{i}].listen"), &vip.listen, r))?;
            let tls_config = if vip.certs.is_empty() {
                None
            } else {
                let names: Vec<&str> = vip.certs.iter().filter_map(|c| c.name()).collect();
                let with_tickets = vip.tls.as_ref().is_some_and(|t| t.tickets.is_some());
                let policy = serde_json::to_string(&vip.tls).expect("serialisable");
                let ticket_file = vip.tls.as_ref().and_then(|t| t.tickets.as_ref());
                let ticket_file = ticket_file.and_then(|t| t.key_file.as_deref());
                let before = self.tls.get(&vip.name).map(|(k, _)| k);
                let ticket_key_file = match (ticket_file, before) {
                    (None, _) => None,
                    // Read at start, by a reload and by `tickets rotate`;
                    // other changes keep what the last read found.
                    (Some(_), Some(k))
                        if k.policy == policy && !rotate_tickets && !reload.wants_all() =>
                    {
                        k.ticket_key_file
                    }
                    (Some(f), _) => Some(TicketKeys::key_file_id(f).map_err(|e| {
                        ConfigError::new(
                            format!("vip[{i}].tls.tickets.key_file"),
                            f.display(),
                            e.to_string(),
                        )
                    })?),
                };
                let inputs = TlsInputs {
                    certs: names
                        .iter()
                        .map(|n| (n.to_string(), certs[*n].generation))
                        .collect(),
                    policy,
                    tickets_epoch: if with_tickets { tickets_epoch } else { 0 },
                    ticket_key_file,
                };
                let config = match self.tls.get(&vip.name).filter(|(k, _)| *k == inputs) {
                    Some((_, t)) => t.clone(),
                    None => {
                        let mut store = CertStore::new();
                        for n in &names {
                            let l = &certs[*n];
                            log::info!(
                                "vip {}: certificate {n} from {} ({}, names {})",
                                vip.name,
                                l.cert_file.display(),
                                l.cert.key_type,
                                l.cert.names.join(", ")
                            );
                            store.add(l.cert.clone());
                        }
                        if let Some(f) = ticket_file {
                            if let Ok(mode) = crypto::files::mode_of(f) {
                                let field = format!("vip[{i}].tls.tickets.key_file");
                                secret_permissions(next, &field, f, mode)?;
                            }
                        }
                        let config = TlsConfig::with_policy(store, &tls_policy(vip.tls.as_ref()))
                            .map_err(|e| {
                            ConfigError::new(format!("vip[{i}].tls"), "", e.to_string())
                        })?;
                        TlsCopies::new(config, engines as usize)
                    }
                };
                tls.insert(vip.name.clone(), (inputs, config.clone()));
                Some(config)
            };
            let slot = match slots.get(&vip.name) {
                Some(&s) => s,
                None if slots.len() < MAX_VIPS => {
                    let s = slots.len() as u16;
                    slots.insert(vip.name.clone(), s);
                    s
                }
                None => {
                    return Err(ConfigError::new(
                        format!("vip[{i}].name"),
                        &vip.name,
                        format!("{MAX_VIPS} VIP names were used since dpd started; restart it to add new ones"),
                    ))
                }
            };
            vips.push(VipSpec {
                name: vip.name.clone(),
                slot,
                addr: addr.ip(),
                port: addr.port(),
                enabled: vip.enabled,
                tls: tls_config,
                pool: vip.pool.clone(),
                routes: vip
                    .routes
                    .iter()
                    .map(|r| (r.sni.clone(), r.pool.clone()))
                    .collect(),
                // Validated with the rest (`parse_prefix`), so each reads.
                // The same list as before keeps its set: engines then see
                // it unchanged at a glance (no comparison, no pass).
                allow: (!vip.allow.is_empty()).then(|| match self.allow_sets.get(&vip.allow) {
                    Some(set) => Arc::clone(set),
                    None => {
                        let nets = vip.allow.iter().filter_map(|a| parse_prefix(a).ok());
                        Arc::new(PrefixSet::new(nets))
                    }
                }),
                timeouts: Timeouts {
                    handshake: Duration::from_millis(u64::from(vip.handshake_timeout_ms)),
                    request: Duration::from_millis(u64::from(vip.request_timeout_ms)),
                    send: Duration::from_millis(u64::from(vip.send_timeout_ms)),
                    idle: vip
                        .idle_timeout_s
                        .map(|s| Duration::from_secs(u64::from(s))),
                },
                limits: ListenLimits {
                    max_conns: vip.max_connections.map(share),
                    per_source_rate: vip.max_new_per_source.map(share),
                    per_source_conns: vip.max_connections_per_source.map(share),
                },
            });
        }
        let pools = next.pools.iter().map(engine_pool).collect();
        let (deny, deny_added) = if self.version > 0 && next.access == self.cfg.access {
            (Arc::clone(&self.deny), false)
        } else {
            // Validated with the rest (`parse_prefix`), so each reads.
            let nets = next.access.denied();
            let set = Arc::new(PrefixSet::new(nets.filter_map(|d| parse_prefix(d).ok())));
            // Compared as written: one written anew counts as added (a
            // pass the engines did not need, never one they missed).
            let before: HashSet<&str> = self.cfg.access.denied().collect();
            let added = self.version == 0 || next.access.denied().any(|d| !before.contains(d));
            (set, added)
        };
        let (log_queues, log_change) = self.plan_conn_log(next, matches!(reload, Reload::All))?;
        let lingering = lingering::after_change(&self.lingering, &self.cfg, next);
        Ok(Built {
            snapshot: Arc::new(Snapshot {
                version: self.issued + 1,
                vips,
                pools,
                deny,
                deny_added,
                conn_log: log_queues,
                conn_log_ends: (next.log.connection_ends.as_deref())
                    .map_or(EndSet::ALL, EndSet::of),
                lingering: lingering.clone(),
            }),
            notes,
            certs,
            tls,
            slots,
            tickets_epoch,
            generation,
            conn_log: log_change,
            lingering,
        })
    }

    /// The connection log of `next`: the queues engines push into while it
    /// is on, and what becomes of its file (opened again by a reload of
    /// the file, `reopen`, for logrotate).
    fn plan_conn_log(
        &mut self,
        next: &Config,
        reopen: bool,
    ) -> Result<(Option<Arc<crate::app::conn_log::ConnLogQueues>>, LogChange), ConfigError> {
        let Some(path) = &next.log.connections else {
            return Ok((None, LogChange::Off));
        };
        let log = match &mut self.conn_log {
            Some(log) => log,
            None => {
                let started = conn_log::ConnLog::start(
                    self.links.len(),
                    self.slot_names.clone(),
                    self.config_state.clone(),
                );
                let log = started.map_err(|e| {
                    let why = format!("cannot start its writer thread: {e}");
                    ConfigError::new("log.connections", path.display(), why)
                })?;
                self.conn_log.insert(log)
            }
        };
        let change = if reopen || log.file() != Some(path.as_path()) {
            LogChange::Open(path.clone(), conn_log::open(path)?)
        } else {
            LogChange::Keep
        };
        Ok((Some(log.queues()), change))
    }

    fn commit(&mut self, next: Config, built: Built) {
        let before = tick::routing_warnings(&self.cfg);
        for w in tick::routing_warnings(&next) {
            if !before.contains(&w) {
                log::warn!("{w}");
            }
        }
        if next.log.level != self.cfg.log.level {
            // Validated with the rest (`check_log_level`), so it reads.
            if let Err(e) = crate::logging::set_level(&next.log.level) {
                log::warn!("log level {:?} not taken: {e}", next.log.level);
            }
        }
        if next.log.format != self.cfg.log.format {
            crate::logging::set_format(next.log.format);
            let name = match next.log.format {
                control::config::LogFormat::Json => "json",
                control::config::LogFormat::Text => "text",
            };
            log::info!("log format {name}");
        }
        if let Some(log) = &mut self.conn_log {
            match built.conn_log {
                LogChange::Keep => {}
                LogChange::Open(path, file) => {
                    if log.file() != Some(path.as_path()) {
                        log::info!("connection log: writing {}", path.display());
                    }
                    log.write_to(path, file);
                }
                LogChange::Off => {
                    if let Some(path) = log.file() {
                        log::info!("connection log: no longer writing {}", path.display());
                    }
                    log.off();
                }
            }
        }
        self.cfg = next;
        self.deny = Arc::clone(&built.snapshot.deny);
        self.allow_sets = (self.cfg.vips.iter().zip(&built.snapshot.vips))
            .filter_map(|(v, spec)| Some((v.allow.clone(), Arc::clone(spec.allow.as_ref()?))))
            .collect();
        self.version = built.snapshot.version;
        self.issued = self.issued.max(self.version);
        self.certs = built.certs;
        self.tls = built.tls;
        self.tickets_epoch = built.tickets_epoch;
        self.generation = built.generation;
        self.lingering = built.lingering;
        let mut names = vec![String::new(); built.slots.len()];
        for (name, &slot) in &built.slots {
            names[usize::from(slot)].clone_from(name);
        }
        self.slots = built.slots;
        *self.slot_names.write().expect("not poisoned") = names;
        let mut certs: Vec<(String, i64)> = self
            .certs
            .iter()
            .map(|(name, l)| (name.clone(), l.cert.not_after))
            .collect();
        certs.sort();
        let mut state = self.config_state.write().expect("not poisoned");
        state.certs = certs;
        state.denied = self.cfg.access.deny.len() as u64;
        state.denied_for_a_time = self.cfg.access.deny_until.len() as u64;
    }

    /// Switches every engine to `snap`, or none: each is sent the
    /// snapshot to prepare, and only once all have it ready are they told
    /// to commit it (a commit cannot fail: the snapshot is there and the
    /// ring had room a moment ago). An engine whose ring is full or that
    /// does not answer in time makes the others drop it (`Abort`); a late
    /// engine drops it when it gets there, since the abort follows the
    /// prepare in its ring and versions are never reused.
    fn push(&self, snap: &Arc<Snapshot>) -> Result<(), String> {
        let version = snap.version;
        let abort = |upto: usize| {
            for l in &self.links[..upto] {
                let _ = l.to_engine.push(ToEngine::Abort(version));
            }
        };
        for (i, l) in self.links.iter().enumerate() {
            if l.to_engine.push(ToEngine::Prepare(snap.clone())).is_err() {
                abort(i);
                return Err(format!("engine {}'s ring is full", l.engine));
            }
        }
        let late = self.await_all(|m| match m {
            FromEngine::Prepared { engine, version: v } if v == version => Some(engine),
            _ => None,
        });
        if !late.is_empty() {
            abort(self.links.len());
            return Err(format!(
                "engine(s) {late} did not take configuration {version}: {}",
                self.no_answer()
            ));
        }
        let deadline = Instant::now() + ENGINE_REPLY;
        for l in &self.links {
            while l.to_engine.push(ToEngine::Commit(version)).is_err() {
                if Instant::now() > deadline {
                    // Never expected (the engine emptied its ring to
                    // prepare): it keeps the old one until it is restarted.
                    log::error!(
                        "engine {}: no room to commit configuration {version}",
                        l.engine
                    );
                    break;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let late = self.await_all(|m| match m {
            FromEngine::Applied { engine, version: v } if v == version => Some(engine),
            _ => None,
        });
        if !late.is_empty() {
            // Committed: it switches when it next runs.
            log::warn!(
                "engine(s) {late} had not switched to configuration {version}: {}",
                self.no_answer()
            );
        }
        Ok(())
    }

    /// Waits until every engine has sent the reply `of` picks (its engine
    /// index), or the time is up; the engines that had not, as a list.
    fn await_all(&self, of: impl Fn(FromEngine) -> Option<usize>) -> String {
        let mut done = vec![false; self.links.len()];
        self.await_engines(ENGINE_REPLY, |msg| {
            if let Some(e) = of(msg).and_then(|e| done.get_mut(e)) {
                *e = true;
            }
            done.iter().all(|d| *d)
        });
        done.iter()
            .enumerate()
            .filter(|(_, d)| !**d)
            .map(|(i, _)| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Sends every engine the question `ask` makes, and gathers the
    /// parts `take` draws from their answers (each with its engine's
    /// index) once every engine has answered; or why not (a ring full, no
    /// answer within [`ENGINE_REPLY`]).
    ///
    /// `ask` makes the question with its number; `take` gives an answer's
    /// engine, number and part. Answers to earlier questions (an engine
    /// that answered one after its time was up) and a second answer from
    /// one engine are passed over.
    fn ask_engines<T>(
        &self,
        ask: impl Fn(u64) -> ToEngine,
        mut take: impl FnMut(FromEngine) -> Option<(usize, u64, T)>,
    ) -> Result<Vec<(usize, T)>, String> {
        let number = self.next_ask();
        for l in &self.links {
            if l.to_engine.push(ask(number)).is_err() {
                return Err(format!("engine {}'s ring is full", l.engine));
            }
        }
        let mut answered = vec![false; self.links.len()];
        let mut parts = Vec::new();
        let done = self.await_engines(ENGINE_REPLY, |msg| {
            if let Some((engine, n, part)) = take(msg) {
                if let Some(a) = answered.get_mut(engine).filter(|a| n == number && !**a) {
                    *a = true;
                    parts.push((engine, part));
                }
            }
            answered.iter().all(|a| *a)
        });
        if done {
            Ok(parts)
        } else {
            Err(self.no_answer())
        }
    }

    /// Why the last wait for engines gave up.
    fn no_answer(&self) -> String {
        match self.stood_still.get() {
            Some(e) => format!(
                "engine {e} did not answer: its loop has stood still for {:?}",
                service::ENGINE_STALL
            ),
            None => format!("engines did not answer within {ENGINE_REPLY:?}"),
        }
    }

    /// The next question's number (see [`ToEngine::Pools`]).
    fn next_ask(&self) -> u64 {
        let n = self.asks.get() + 1;
        self.asks.set(n);
        n
    }

    /// Reads engines' replies until `done` says so or the time is up, or
    /// until an engine's loop has stood still for
    /// [`service::ENGINE_STALL`] (noted in `stood_still`): a stuck engine
    /// never answers, and the control thread has routes to withdraw and
    /// other clients to serve.
    fn await_engines(&self, timeout: Duration, mut done: impl FnMut(FromEngine) -> bool) -> bool {
        /// How often the engines' loop counters are looked at.
        const LOOK_EVERY: Duration = Duration::from_millis(50);
        self.stood_still.set(None);
        if self.links.is_empty() {
            return true;
        }
        let from = &self.links[0].from_engines;
        let start = Instant::now();
        let deadline = start + timeout;
        let loops = |i: usize| self.shared.get(i).map(|(_, s)| s.read().loops);
        let mut seen: Vec<(Option<u64>, Instant)> =
            (0..self.shared.len()).map(|i| (loops(i), start)).collect();
        let mut look_at = start + LOOK_EVERY;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            if now >= look_at {
                look_at = now + LOOK_EVERY;
                for (i, (last, moved)) in seen.iter_mut().enumerate() {
                    let l = loops(i);
                    if l != *last {
                        *last = l;
                        *moved = now;
                    } else if now.duration_since(*moved) >= service::ENGINE_STALL {
                        self.stood_still.set(Some(i));
                        return false;
                    }
                }
            }
            match from.pop() {
                Some(msg) => {
                    if done(msg) {
                        return true;
                    }
                }
                None => std::thread::sleep(Duration::from_micros(200)),
            }
        }
    }

    /// Writes the running configuration as TOML, atomically
    /// ([`crate::files::write_atomically`]).
    /// `config reload` and SIGHUP: the file `dpd` was started with, read
    /// and validated again, applied as one change with every certificate
    /// loaded again from its files (renewed in place by an ACME client, say).
    /// Refused with nothing changed when the file is bad, or differs in a
    /// section only a restart applies.
    pub fn reload_file(&mut self) -> Reply {
        let reply = self.try_reload_file();
        self.config_state
            .write()
            .expect("not poisoned")
            .last_reload_ok = Some(reply.ok);
        let message = match (&reply.error, &reply.body) {
            (Some(e), _) => e.clone(),
            (None, Some(Body::Applied(a))) => {
                format!("{} (configuration {})", a.change, a.version)
            }
            (None, _) => String::new(),
        };
        self.last_reload = Some((Instant::now(), reply.ok, message));
        reply
    }

    /// Judges certificates from now on as if the clock were `secs` ahead
    /// (tests of expiry).
    #[doc(hidden)]
    pub fn skew_cert_clock_for_tests(&mut self, secs: i64) {
        self.cert_clock_skew_s = secs;
    }

    /// `log reopen` and SIGUSR1: the connection log's file opened again by
    /// its name (logrotate moved the old one away). Refused, the log
    /// going on where it was, when there is no log or the file cannot be
    /// opened.
    pub fn reopen_conn_log(&mut self) -> Reply {
        let Some(log) = &mut self.conn_log else {
            return Reply::error("no connection log ([log] connections) to open again");
        };
        let Some(path) = log.file().map(Path::to_path_buf) else {
            return Reply::error("no connection log ([log] connections) to open again");
        };
        match conn_log::open(&path) {
            Ok(file) => {
                log::info!("connection log: {} opened again", path.display());
                log.write_to(path.clone(), file);
                Reply::ok(Body::Reopened(path))
            }
            Err(e) => Reply::error(format!(
                "not opened again: {e}; the log goes on where it was"
            )),
        }
    }

    fn try_reload_file(&mut self) -> Reply {
        let Some(path) = self.config_path.clone() else {
            return Reply::error("dpd was not started from a file: nothing to reload");
        };
        let next = match Config::load(&path) {
            Ok(next) => next,
            Err(e) => return Reply::error(format!("not reloaded: {e}")),
        };
        let restart = control::change::restart_sections(&self.cfg, &next);
        if !restart.is_empty() {
            return Reply::error(format!(
                "not reloaded: {} changed in {}, which only a restart applies; nothing changed",
                restart.join(", "),
                path.display()
            ));
        }
        let mut next = next;
        let kept = next.access.keep_timed(&self.cfg.access, MAX_DENIED);
        let expired = next.access.take_expired(jiff::Timestamp::now());
        let mut what = format!("reloaded from {}", path.display());
        if kept > 0 {
            what.push_str(&format!(" ({kept} timed denies kept)"));
        }
        if !expired.is_empty() {
            what.push_str(&format!(" (deny of {} past its time)", expired.join(" ")));
        }
        // Run-time changes not saved are undone: the reply says what moved.
        let changed = control::change::changed_parts(&self.cfg, &next);
        if changed.is_empty() {
            what.push_str(" (settings as they were)");
        } else {
            what.push_str(&format!(" (changed: {})", changed.join(", ")));
        }
        self.push_change(next, Reload::All, false, what)
    }

    fn save(&self, path: Option<&Path>) -> Reply {
        let Some(path) = path.or(self.config_path.as_deref()) else {
            return Reply::error("no file given and dpd was not started from one");
        };
        let text = format!(
            "# tlsdp dpd configuration, written by `dpctl config save` (configuration {}).\n{}",
            self.version,
            self.cfg.to_toml()
        );
        // Mode 0600: it names key files.
        match crate::files::write_atomically(path, text.as_bytes(), 0o600) {
            Ok(()) => {
                log::info!("configuration {} saved to {}", self.version, path.display());
                Reply::ok(Body::Saved(path.to_path_buf()))
            }
            Err(e) => Reply::error(format!("cannot write {}: {e}", path.display())),
        }
    }
}

/// Which certificates a new snapshot loads again from files named as
/// before.
#[derive(Debug, Clone, Copy)]
enum Reload<'a> {
    Nothing,
    /// `cert add` and `cert rotate`: the one named (kept as it was if it
    /// reads the same).
    Cert(&'a str),
    /// `config reload`: every one (one whose chain and key read the same
    /// as before is kept as it was), and every ticket key file.
    All,
}

impl Reload<'_> {
    /// A reload of the file: ticket key files are read again too.
    fn wants_all(self) -> bool {
        matches!(self, Self::All)
    }

    fn wants(self, name: &str) -> bool {
        match self {
            Self::Nothing => false,
            Self::Cert(n) => n == name,
            Self::All => true,
        }
    }
}

/// A private key or ticket key file (`field`, at `path`) with permission
/// bits `mode`: one its group or others can read is refused under `[control]
/// strict_key_permissions`, else used with a warning naming it.
fn secret_permissions(
    cfg: &Config,
    field: &str,
    path: &Path,
    mode: u32,
) -> Result<(), ConfigError> {
    if !crypto::files::exposed(mode) {
        return Ok(());
    }
    let what = format!("readable by group or others (mode {mode:04o}); chmod 600 it");
    if cfg.control.strict_key_permissions {
        return Err(ConfigError::new(
            field,
            path.display(),
            format!("{what}: [control] strict_key_permissions refuses it"),
        ));
    }
    log::warn!("{field}: {} is {what}", path.display());
    Ok(())
}

/// Counters of every engine and their total, per VIP too.
pub fn collect_stats(
    shared: &[(u32, Arc<SharedCounters>)],
    names: &SlotNames,
    tsc_hz: u64,
) -> Stats {
    let names = names.read().expect("not poisoned").clone();
    let mut total = Counters::default();
    let mut total_vips = vec![VipCounters::default(); names.len()];
    let mut cores = Vec::new();
    for (lcore, s) in shared {
        let c = s.read();
        total.add(&c);
        let mut core = c.to_api(Some(*lcore));
        for (slot, v) in s.read_vips().iter().enumerate().take(names.len()) {
            total_vips[slot].add(v);
            core.vips.insert(names[slot].clone(), *v);
        }
        cores.push(core);
    }
    let mut total = total.to_api(None);
    total.vips = names.into_iter().zip(total_vips).collect();
    // The version every engine uses (or a newer one).
    total.config_version = cores.iter().map(|c| c.config_version).min().unwrap_or(0);
    Stats {
        cores,
        total,
        tsc_hz,
    }
}

/// An engine's copy of a configured pool.
fn engine_pool(p: &control::config::Pool) -> dataplane_pool::Pool {
    let members = p
        .members
        .iter()
        .filter_map(|m| {
            let addr = m.socket_addr().ok()?;
            Some(dataplane_pool::Member::new(addr, m.weight, m.state))
        })
        .collect();
    let mut pool = dataplane_pool::Pool::new(p.name.clone(), p.balance, members);
    pool.check = p
        .health
        .as_ref()
        .map(|h| crate::app::health::HealthCheck::from_config(h, p.proxy_protocol));
    pool.proxy_protocol = p.proxy_protocol;
    pool.connect_timeout = Duration::from_millis(u64::from(p.connect_timeout_ms));
    pool.fail_timeout = Duration::from_millis(u64::from(p.fail_timeout_ms));
    pool.connect_tries = p.connect_tries;
    pool
}

/// The crypto policy for a VIP's `[vip.tls]` settings.
fn tls_policy(t: Option<&control::config::TlsSettings>) -> crypto::policy::TlsPolicy {
    let mut p = crypto::policy::TlsPolicy::default();
    let Some(t) = t else { return p };
    p.versions.clone_from(&t.versions);
    p.suites.clone_from(&t.suites);
    p.groups.clone_from(&t.groups);
    if let Some(alpn) = &t.alpn {
        p.alpn.clone_from(alpn);
    }
    p.prefer_client_order = t.prefer_client_order;
    if let Some(tk) = &t.tickets {
        p.resumption = crypto::policy::Resumption::Tickets {
            rotate_s: tk.rotate_s,
            key_file: tk.key_file.clone(),
        };
    }
    p
}
