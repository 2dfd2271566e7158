//! The controller's periodic work on the control thread (docs/cluster.md):
//! releasing removed VIPs' addresses once unused ([`super::lingering`]),
//! moving a drain through its phases, SIGTERM's drain and stop, and with
//! `[routing]` keeping the announce interface's addresses to the VIPs
//! this node can serve ([`super::service`] decides; this applies).

use std::collections::BTreeSet;
use std::net::IpAddr;

use control::api::RoutingStatus;

pub(super) use super::service::routing_warnings;
use super::service::{self, DrainTimes, Liveness, Phase};
use super::*;
use crate::dpdk::VipIface;

/// How often the tick looks at the engines.
const TICK: Duration = Duration::from_millis(100);
/// How long a pool-health question to the engines may take before the
/// VIPs that need it are withdrawn.
const HEALTH_REPLY: Duration = Duration::from_millis(500);
/// How often pools' health and the devices' counts are put in the
/// metrics.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// The node's service state, with the daemon attached.
#[derive(Debug)]
pub(super) struct Service {
    phase: Phase,
    times: DrainTimes,
    liveness: Liveness,
    /// Every engine turned within [`service::ENGINE_STALL`] at the last
    /// look.
    alive: bool,
    next: Instant,
    routes: Option<Announcer>,
    /// SIGTERMs seen: the first drains and then stops, a second stops at
    /// once (as SIGINT).
    terms: u8,
}

/// The announce interface and what is on it.
#[derive(Debug)]
struct Announcer {
    iface: VipIface,
    announced: BTreeSet<IpAddr>,
    withheld: Vec<String>,
    error: Option<String>,
    /// The engines' last pool-health answer, and when
    /// ([`service::health_or_last`]).
    last_health: Option<(Vec<Vec<PoolView>>, Instant)>,
    /// When the interface and its addresses were last put back as they
    /// should be ([`REASSERT_EVERY`]).
    reasserted: Instant,
}

/// How often the announce interface is set up and its addresses put on
/// again: something else (`ip addr flush`, a network manager's catch-all
/// profile, `ip link set down`) may have taken them, and BIRD withdrawn
/// the routes, while dpd still counted them announced.
const REASSERT_EVERY: Duration = Duration::from_secs(2);

impl Announcer {
    /// Sets the interface up and puts every announced address on it
    /// again, logging what had gone.
    fn reassert(&mut self) -> Result<(), crate::dpdk::DpdkError> {
        if self.iface.ensure_up()? {
            log::warn!("routing: {} was down: set up again", self.iface.name());
        }
        for &ip in &self.announced {
            if self.iface.put(ip)? {
                log::warn!(
                    "routing: {ip} was gone from {}: put back",
                    self.iface.name()
                );
            }
        }
        Ok(())
    }
}

impl Service {
    pub(super) fn new(cfg: &Config, iface: Option<VipIface>) -> Self {
        let routing = cfg.routing.clone().unwrap_or_default();
        Self {
            phase: Phase::Serving,
            times: DrainTimes {
                quiet: Duration::from_millis(u64::from(routing.withdraw_quiet_ms)),
                withdraw_wait: Duration::from_secs(u64::from(routing.withdraw_wait_s)),
                drain_timeout: Duration::from_secs(u64::from(cfg.control.drain_timeout_s)),
            },
            liveness: Liveness::default(),
            alive: true,
            next: Instant::now(),
            terms: 0,
            routes: iface.map(|iface| Announcer {
                iface,
                announced: BTreeSet::new(),
                withheld: Vec::new(),
                error: None,
                last_health: None,
                reasserted: Instant::now(),
            }),
        }
    }
}

impl Controller {
    /// Called often by the control thread (between requests); works every
    /// [`TICK`].
    pub fn tick(&mut self, now: Instant) {
        // The node's service first: a stuck engine's VIPs are withdrawn
        // before anything else waits on the engines.
        self.serve(now);
        self.reconnect_peers(now);
        // The devices' counts need no engine: they matter most when one
        // stands still (its queue overflows).
        self.publish_device_counts(now);
        // Questions to the engines wait for every answer: not while one
        // stands still (asked again once it moves).
        if self.service.as_ref().is_none_or(|s| s.alive) {
            self.release_lingering(now);
            self.publish_pool_health(now);
            self.expire_denies(jiff::Timestamp::now());
            self.auto_deny(now, jiff::Timestamp::now());
        }
        // A signal's flag, taken back.
        let signalled = |flag: fn(&DaemonInfo) -> &std::sync::atomic::AtomicBool,
                         d: &Option<DaemonInfo>| {
            d.as_ref()
                .is_some_and(|d| flag(d).swap(false, Ordering::Relaxed))
        };
        if signalled(|d| &d.reload, &self.daemon) {
            // What went in is logged by the change; what did not, here.
            let r = self.reload_file();
            if let Some(e) = r.error.filter(|_| !r.ok) {
                log::error!("SIGHUP: {e}; configuration {} goes on", self.version);
            }
        }
        if signalled(|d| &d.reopen, &self.daemon) {
            let r = self.reopen_conn_log();
            if let Some(e) = r.error.filter(|_| !r.ok) {
                log::error!("SIGUSR1: {e}");
            }
        }
    }

    /// Every [`TICK`], with the daemon attached: whether the engines turn,
    /// the drain's phase (SIGTERM's too), and with `[routing]` the VIPs
    /// announced.
    fn serve(&mut self, now: Instant) {
        let (Some(d), Some(svc)) = (&self.daemon, &self.service) else {
            return;
        };
        if now < svc.next {
            return;
        }
        let signalled = d.term.swap(false, Ordering::Relaxed);
        let stats = self.stats();
        let (Some(d), Some(svc)) = (&self.daemon, &mut self.service) else {
            return;
        };
        svc.next = now + TICK;
        if signalled {
            svc.terms = svc.terms.saturating_add(1);
            if svc.terms > 1 {
                // A drain that takes too long for the one waiting on it
                // (an operator, systemd's stop timeout): stop now.
                log::warn!("SIGTERM again: stopping now, without waiting for the drain");
                d.stop.store(true, Ordering::Relaxed);
            }
        }
        let term = svc.terms > 0;
        let alive = svc.liveness.update(&stats, now);
        svc.alive = alive;
        let total = &stats.total;
        let open = crate::daemon::open_connections(total);
        if term && svc.phase == Phase::Serving {
            log::info!(
                "SIGTERM: draining (at most {:?} for open connections)",
                svc.times.drain_timeout
            );
            svc.phase = service::begin(now, svc.routes.is_some(), total.tcp_accepted);
        }
        let before = svc.phase;
        svc.phase = service::advance(before, now, total.tcp_accepted, open, &svc.times);
        let phase = svc.phase;
        if phase.name() != before.name() {
            log::info!("drain: {} ({open} connections open)", phase.name());
        }
        d.drain
            .store(phase.refuses_connections(), Ordering::Relaxed);
        if term && matches!(phase, Phase::Drained { .. }) {
            log::info!("drained ({open} connections still open): stopping");
            d.stop.store(true, Ordering::Relaxed);
        }
        if svc.routes.is_some() {
            self.announce(phase, alive);
        }
        self.publish_service_state();
    }

    /// The drain phase, and with `[routing]` what is announced and
    /// withheld, for the metrics (`tlsdp_drain_phase`,
    /// `tlsdp_routing_*`).
    fn publish_service_state(&self) {
        let Some(svc) = &self.service else {
            return;
        };
        let phase = svc.phase.name();
        let routing =
            (svc.routes.as_ref()).map(|a| (a.announced.len() as u64, a.withheld.len() as u64));
        if let Ok(mut state) = self.config_state.write() {
            state.phase = phase;
            state.routing = routing;
        }
    }

    /// Once a second, with the daemon attached: each pool's members and
    /// those usable, as the engines see them, for the metrics
    /// (`tlsdp_pool_members_usable`). Engines that do not answer in time
    /// leave the last figures as they were.
    fn publish_pool_health(&mut self, now: Instant) {
        if self.daemon.is_none()
            || self
                .pools_published
                .is_some_and(|t| now < t + PUBLISH_EVERY)
        {
            return;
        }
        self.pools_published = Some(now);
        let pools = if self.cfg.pools.is_empty() {
            Vec::new()
        } else {
            match self.engine_pools(HEALTH_REPLY) {
                Ok(views) => self.pool_health(&views),
                Err(_) => return,
            }
        };
        if let Ok(mut state) = self.config_state.write() {
            state.pools = pools;
        }
    }

    /// Once a second, with the daemon attached: each DPDK port's device
    /// counts, for the metrics (`tlsdp_port_*_total`).
    fn publish_device_counts(&mut self, now: Instant) {
        let Some(d) = &self.daemon else {
            return;
        };
        if self
            .devices_published
            .is_some_and(|t| now < t + PUBLISH_EVERY)
        {
            return;
        }
        self.devices_published = Some(now);
        let devices = d
            .ports
            .iter()
            .filter_map(|(p, id)| {
                let counts = crate::dpdk::device_counters((*id)?)?;
                Some((p.name.clone(), super::views::device_counts(counts)))
            })
            .collect();
        if let Ok(mut state) = self.config_state.write() {
            state.devices = devices;
        }
    }

    /// Puts on the announce interface the addresses of the VIPs that can
    /// be served now, and takes off the others.
    fn announce(&mut self, phase: Phase, alive: bool) {
        let needs_health = phase == Phase::Serving
            && alive
            && self.cfg.vips.iter().any(|v| v.enabled && v.pool.is_some());
        let views = needs_health.then(|| self.engine_pools(HEALTH_REPLY));
        let links_up = self.any_link_up();
        let Some(a) = self.service.as_mut().and_then(|s| s.routes.as_mut()) else {
            return;
        };
        // Only an answer the engines gave is kept as the last one.
        let health = match views {
            Some(views) => service::health_or_last(views, &mut a.last_health, Instant::now()),
            None => Ok(&[][..]),
        };
        let health = match &health {
            Ok(v) => Ok(*v),
            Err(e) => Err(e.as_str()),
        };
        let cannot_serve = if !alive {
            Some("an engine has stopped")
        } else if !links_up {
            Some(service::NO_LINK)
        } else {
            None
        };
        let (want, withheld) = service::wanted(&self.cfg, phase, cannot_serve, health);
        a.withheld = withheld;
        let mut error = None;
        let gone: Vec<IpAddr> = a.announced.difference(&want).copied().collect();
        for ip in gone {
            match a.iface.remove(ip) {
                Ok(()) => {
                    a.announced.remove(&ip);
                    log::info!("routing: withdrew {ip} ({})", a.iface.name());
                }
                Err(e) => error = Some(e.to_string()),
            }
        }
        for &ip in want.difference(&a.announced.clone()) {
            match a.iface.add(ip) {
                Ok(()) => {
                    a.announced.insert(ip);
                    log::info!("routing: announcing {ip} ({})", a.iface.name());
                }
                Err(e) => error = Some(e.to_string()),
            }
        }
        let now = Instant::now();
        if now >= a.reasserted + REASSERT_EVERY {
            a.reasserted = now;
            if let Err(e) = a.reassert() {
                error = Some(e.to_string());
            }
        }
        if error.is_some() && error != a.error {
            log::warn!("routing: {}", error.as_deref().unwrap_or_default());
        }
        a.error = error;
    }

    /// Whether some port's link is up ([`DaemonInfo::link_up`]): with
    /// none, nothing this node announces could reach it.
    fn any_link_up(&self) -> bool {
        let Some(d) = &self.daemon else {
            return true;
        };
        (0..d.ports.len()).any(|i| d.link_up(i))
    }

    /// At stop, before the engines: the announce interface goes, and with
    /// it every route (a stop without a drain, SIGINT, would otherwise
    /// leave the VIPs announced while the engines, ports and DPDK are
    /// taken down, traffic still sent here and nothing to answer it).
    pub fn withdraw_routes(&mut self) {
        let Some(a) = self.service.as_mut().and_then(|s| s.routes.take()) else {
            return;
        };
        log::info!(
            "routing: {} taken down, {} address(es) withdrawn: stopping",
            a.iface.name(),
            a.announced.len()
        );
    }

    /// `dpctl drain`: begins a drain (or reports the one under way).
    pub(super) fn drain(&mut self) -> Reply {
        let stats = self.stats();
        let (Some(d), Some(svc)) = (&self.daemon, &mut self.service) else {
            return Reply::error("drain: no daemon attached");
        };
        let now = Instant::now();
        if svc.phase == Phase::Serving {
            let routed = svc.routes.is_some();
            svc.phase = service::begin(now, routed, stats.total.tcp_accepted);
            d.drain
                .store(svc.phase.refuses_connections(), Ordering::Relaxed);
            svc.next = now;
            log::info!(
                "drain requested: {}",
                if routed {
                    "VIPs withdrawn; no new connections once new flows stop"
                } else {
                    "no new connections on any VIP"
                }
            );
        }
        self.tick(now);
        Reply::ok(Body::Drain(self.drain_state()))
    }

    /// `dpctl undrain`: back in service, announced again.
    pub(super) fn undrain(&mut self) -> Reply {
        let (Some(d), Some(svc)) = (&self.daemon, &mut self.service) else {
            return Reply::error("undrain: no daemon attached");
        };
        if svc.terms > 0 || d.term.load(Ordering::Relaxed) {
            return Reply::error("undrain: dpd is stopping (SIGTERM)");
        }
        if svc.phase != Phase::Serving {
            log::info!("undrain: taking connections and announcing again");
        }
        svc.phase = Phase::Serving;
        d.drain.store(false, Ordering::Relaxed);
        let now = Instant::now();
        svc.next = now;
        self.tick(now);
        Reply::ok(Body::Drain(self.drain_state()))
    }

    /// Where the drain stands now.
    pub(super) fn drain_state(&self) -> DrainState {
        let phase = self.service.as_ref().map_or(Phase::Serving, |s| s.phase);
        DrainState {
            open_connections: crate::daemon::open_connections(&self.stats().total),
            phase: phase.name().to_string(),
            for_s: phase.began().map_or(0.0, |b| b.elapsed().as_secs_f64()),
        }
    }

    /// The announce interface as `status` shows it.
    pub(super) fn routing_status(&self) -> Option<RoutingStatus> {
        let a = self.service.as_ref()?.routes.as_ref()?;
        Some(RoutingStatus {
            interface: a.iface.name().to_string(),
            announced: a.announced.iter().map(ToString::to_string).collect(),
            withheld: a.withheld.clone(),
            error: a.error.clone(),
        })
    }
}
