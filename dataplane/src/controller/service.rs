//! Whether this node is in service (docs/cluster.md): the drain phases
//! that `dpctl drain` / `undrain` and SIGTERM move through, and, with
//! `[routing]`, which VIP addresses are on the announce interface for the
//! routing daemon to announce.
//!
//! The decisions are pure functions of the configuration, the engines'
//! counters and pool health ([`advance`], [`wanted`]), tested here; the
//! controller's tick feeds them and sets the interface's addresses.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use control::api::Stats;
use control::config::{Config, MemberState};

use crate::app::config::PoolView;

/// Where a drain stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Announced (with `[routing]`) and taking connections.
    Serving,
    /// VIPs withdrawn; still taking connections until none has come for
    /// the quiet time (the routers no longer send new flows here).
    Withdrawn {
        began: Instant,
        /// `tcp_accepted` when last seen to change, and when.
        accepted: u64,
        last_new: Instant,
    },
    /// Listeners refuse new connections; open ones finish.
    Draining { began: Instant, since: Instant },
    /// None open (or the drain timeout passed).
    Drained { began: Instant },
}

impl Phase {
    /// The name `dpctl` shows.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Serving => "serving",
            Phase::Withdrawn { .. } => "withdrawn",
            Phase::Draining { .. } => "draining",
            Phase::Drained { .. } => "drained",
        }
    }

    /// When the drain began (`None` while serving).
    pub fn began(self) -> Option<Instant> {
        match self {
            Phase::Serving => None,
            Phase::Withdrawn { began, .. }
            | Phase::Draining { began, .. }
            | Phase::Drained { began } => Some(began),
        }
    }

    /// Whether listeners should refuse new connections.
    pub fn refuses_connections(self) -> bool {
        matches!(self, Phase::Draining { .. } | Phase::Drained { .. })
    }
}

/// The drain's waits.
#[derive(Debug, Clone, Copy)]
pub struct DrainTimes {
    /// With routing: no new connection for this long ends the withdrawal
    /// wait.
    pub quiet: Duration,
    /// With routing: the longest withdrawal wait.
    pub withdraw_wait: Duration,
    /// The longest wait for open connections to finish.
    pub drain_timeout: Duration,
}

/// A drain asked for at `now`: with routes to withdraw it waits for new
/// flows to stop first, without it refuses new connections at once.
pub fn begin(now: Instant, routed: bool, accepted: u64) -> Phase {
    if routed {
        Phase::Withdrawn {
            began: now,
            accepted,
            last_new: now,
        }
    } else {
        Phase::Draining {
            began: now,
            since: now,
        }
    }
}

/// The phase after `phase`, given the engines' `tcp_accepted` total and
/// open connections now.
pub fn advance(phase: Phase, now: Instant, accepted: u64, open: u64, t: &DrainTimes) -> Phase {
    match phase {
        Phase::Withdrawn {
            began,
            accepted: seen,
            last_new,
        } => {
            let last_new = if accepted == seen { last_new } else { now };
            if now.duration_since(last_new) >= t.quiet
                || now.duration_since(began) >= t.withdraw_wait
            {
                Phase::Draining { began, since: now }
            } else {
                Phase::Withdrawn {
                    began,
                    accepted,
                    last_new,
                }
            }
        }
        Phase::Draining { began, since } => {
            if open == 0 || now.duration_since(since) >= t.drain_timeout {
                Phase::Drained { began }
            } else {
                phase
            }
        }
        Phase::Serving | Phase::Drained { .. } => phase,
    }
}

/// Whether every engine's loop has run recently: each one's `loops`
/// counter and when it last moved.
#[derive(Debug, Default)]
pub struct Liveness {
    seen: Vec<(u64, Instant)>,
}

/// How long an engine's loop may stand still before its VIPs are
/// withdrawn (an engine publishes every tick, a millisecond).
pub const ENGINE_STALL: Duration = Duration::from_secs(1);

impl Liveness {
    /// Takes the engines' counters at `now`; true when every engine moved
    /// within [`ENGINE_STALL`].
    pub fn update(&mut self, stats: &Stats, now: Instant) -> bool {
        if self.seen.len() != stats.cores.len() {
            self.seen = stats.cores.iter().map(|c| (c.loops, now)).collect();
        }
        let mut alive = !stats.cores.is_empty();
        for (seen, core) in self.seen.iter_mut().zip(&stats.cores) {
            if core.loops != seen.0 {
                *seen = (core.loops, now);
            }
            alive &= now.duration_since(seen.1) < ENGINE_STALL;
        }
        alive
    }
}

/// Pool health as the engines report it: each engine's pool views, or
/// why they could not be had.
pub type PoolHealth<'a> = Result<&'a [Vec<PoolView>], &'a str>;

/// What an operator should hear of a configuration under `[routing]`:
/// each enabled VIP whose pool has no health check, so is announced
/// whatever its members do (a node whose backends are all unreachable
/// goes on drawing its share, and every connection fails).
pub fn routing_warnings(cfg: &Config) -> Vec<String> {
    if cfg.routing.is_none() {
        return Vec::new();
    }
    cfg.vips
        .iter()
        .filter(|v| v.enabled)
        .filter_map(|v| {
            let name = v.pool.as_deref()?;
            let pool = cfg.pools.iter().find(|p| p.name == name)?;
            pool.health.is_none().then(|| {
                format!(
                    "vip {}: pool {name} has no health check: under [routing] it is announced whatever its members do",
                    v.name
                )
            })
        })
        .collect()
}

/// Why nothing is announced while no port's link is up.
pub const NO_LINK: &str = "no port's link is up";

/// How long the engines' last pool-health answer stands in for one that
/// did not come in time (an engine busy for a moment, its ring full): a
/// stuck engine is [`Liveness`]'s to find (1 s), and a member going down
/// is in the next answer that comes.
pub const HEALTH_GRACE: Duration = Duration::from_secs(3);

/// The pool health to announce by: `fresh` when the engines answered (kept
/// in `last` with the time), else `last` while it is younger than
/// [`HEALTH_GRACE`], else why there is none. One answer late withdrew
/// every pool VIP for a tick before (a route flap on every router).
pub fn health_or_last(
    fresh: Result<Vec<Vec<PoolView>>, String>,
    last: &mut Option<(Vec<Vec<PoolView>>, Instant)>,
    now: Instant,
) -> Result<&[Vec<PoolView>], String> {
    match fresh {
        Ok(views) => Ok(&last.insert((views, now)).0),
        Err(e) => match last {
            Some((views, at)) if now.saturating_duration_since(*at) < HEALTH_GRACE => Ok(views),
            _ => Err(e),
        },
    }
}

/// The VIP addresses to announce, and the VIPs withheld with why. An
/// address is announced when some VIP on it is enabled and can answer:
/// it has the built-in responder, or a pool with a member that is `up`
/// and healthy on at least one engine. Nothing is announced while a
/// drain is under way or the node cannot serve (`cannot_serve` says why:
/// an engine has stopped, no port's link is up).
pub fn wanted(
    cfg: &Config,
    phase: Phase,
    cannot_serve: Option<&str>,
    health: PoolHealth<'_>,
) -> (BTreeSet<IpAddr>, Vec<String>) {
    let mut announce = BTreeSet::new();
    let mut withheld = Vec::new();
    for vip in &cfg.vips {
        let why = if phase != Phase::Serving {
            Some(format!("node {}", phase.name()))
        } else if let Some(why) = cannot_serve {
            Some(why.to_string())
        } else if !vip.enabled {
            Some("disabled".to_string())
        } else {
            match &vip.pool {
                None => None,
                Some(pool) => match health {
                    Err(e) => Some(format!("pool {pool}: {e}")),
                    Ok(views) if pool_can_serve(cfg, pool, views) => None,
                    Ok(_) => Some(format!("no healthy member in pool {pool}")),
                },
            }
        };
        match (why, vip.listen_addr()) {
            (_, Err(e)) => withheld.push(format!("{}: {e}", vip.name)),
            (_, Ok(a)) if a.ip().is_unspecified() => {
                withheld.push(format!("{}: listens on an unspecified address", vip.name));
            }
            (None, Ok(a)) => {
                announce.insert(a.ip());
            }
            (Some(why), Ok(_)) => withheld.push(format!("{}: {why}", vip.name)),
        }
    }
    (announce, withheld)
}

/// Whether pool `name` has a member administratively up that some engine
/// finds healthy, by a check that passed where the pool has checks (a
/// member starts healthy, but a node should not draw traffic to a backend
/// no check has reached yet).
fn pool_can_serve(cfg: &Config, name: &str, views: &[Vec<PoolView>]) -> bool {
    let Some(pool) = cfg.pools.iter().find(|p| p.name == name) else {
        return false;
    };
    pool.members
        .iter()
        .filter(|m| m.state == MemberState::Up)
        .filter_map(|m| m.socket_addr().ok())
        .any(|addr| {
            views.iter().any(|engine| {
                engine
                    .iter()
                    .filter(|p| p.name == name && !p.retired)
                    .flat_map(|p| &p.members)
                    .any(|m| m.addr == addr && m.healthy && m.proven && !m.removed)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::config::MemberView;

    /// A late answer is stood in for by the last one for HEALTH_GRACE, no
    /// longer; a fresh one always wins.
    #[test]
    fn a_late_health_answer_is_covered_by_the_last_for_a_while() {
        let t0 = Instant::now();
        let pool = PoolView {
            name: "web".into(),
            retired: false,
            members: Vec::new(),
        };
        let view = |n: usize| vec![vec![pool.clone(); n]];
        let mut last = None;
        let late = || Err::<Vec<Vec<PoolView>>, _>("engine 1 did not answer".to_string());
        assert_eq!(
            health_or_last(late(), &mut last, t0).unwrap_err(),
            "engine 1 did not answer"
        );
        assert_eq!(
            health_or_last(Ok(view(2)), &mut last, t0).unwrap()[0].len(),
            2
        );
        let then = t0 + HEALTH_GRACE - Duration::from_millis(1);
        assert_eq!(health_or_last(late(), &mut last, then).unwrap()[0].len(), 2);
        assert!(health_or_last(late(), &mut last, t0 + HEALTH_GRACE).is_err());
        let later = t0 + HEALTH_GRACE * 2;
        assert_eq!(
            health_or_last(Ok(view(3)), &mut last, later).unwrap()[0].len(),
            3
        );
        assert_eq!(
            health_or_last(late(), &mut last, later).unwrap()[0].len(),
            3
        );
    }

    fn times() -> DrainTimes {
        DrainTimes {
            quiet: Duration::from_secs(2),
            withdraw_wait: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_routed_drain_waits_for_new_flows_to_stop_then_for_open_ones() {
        let t0 = Instant::now();
        let s = |n| t0 + Duration::from_millis(n);
        let mut p = begin(t0, true, 100);
        assert_eq!(p.name(), "withdrawn");
        assert!(!p.refuses_connections());
        // New connections keep arriving for 3 s: still withdrawn.
        for ms in (500..=3000).step_by(500) {
            p = advance(p, s(ms), 100 + ms, 5, &times());
            assert_eq!(p.name(), "withdrawn", "at {ms} ms");
        }
        // Quiet from 3 s: at 4.9 s still waiting, at 5 s draining.
        p = advance(p, s(4900), 3100, 5, &times());
        assert_eq!(p.name(), "withdrawn");
        p = advance(p, s(5000), 3100, 5, &times());
        assert_eq!(p.name(), "draining");
        assert!(p.refuses_connections());
        p = advance(p, s(6000), 3100, 1, &times());
        assert_eq!(p.name(), "draining");
        p = advance(p, s(7000), 3100, 0, &times());
        assert_eq!(p, Phase::Drained { began: t0 });
        assert_eq!(p.began(), Some(t0));
    }

    #[test]
    fn endless_new_flows_and_endless_connections_are_bounded_by_the_waits() {
        let t0 = Instant::now();
        let mut p = begin(t0, true, 0);
        p = advance(p, t0 + Duration::from_secs(29), 1, 9, &times());
        assert_eq!(p.name(), "withdrawn");
        p = advance(p, t0 + Duration::from_secs(30), 2, 9, &times());
        assert_eq!(p.name(), "draining");
        p = advance(p, t0 + Duration::from_secs(89), 3, 9, &times());
        assert_eq!(p.name(), "draining");
        p = advance(p, t0 + Duration::from_secs(90), 3, 9, &times());
        assert_eq!(p.name(), "drained");
    }

    #[test]
    fn without_routing_a_drain_refuses_connections_at_once() {
        let t0 = Instant::now();
        let p = begin(t0, false, 7);
        assert!(p.refuses_connections());
        assert_eq!(advance(p, t0, 7, 0, &times()).name(), "drained");
        assert_eq!(advance(Phase::Serving, t0, 9, 9, &times()), Phase::Serving);
    }

    fn config() -> Config {
        Config::parse(
            r#"
            [eal]
            lcores = [1]
            [[port]]
            name = "p0"
            device = "net_ring0"
            addresses = ["10.82.1.2/24", "2001:db8:82:1::2/64"]
            gateway = "10.82.1.1"
            [routing]
            [[vip]]
            name = "web"
            listen = "10.90.0.1:80"
            respond = "builtin"
            [[vip]]
            name = "web6"
            listen = "[2001:db8:90::1]:80"
            respond = "builtin"
            [[vip]]
            name = "off"
            listen = "10.90.0.2:80"
            respond = "builtin"
            enabled = false
            [[vip]]
            name = "app"
            listen = "10.90.0.3:443"
            pool = "app"
            [[pool]]
            name = "app"
            members = [{ addr = "10.80.0.9:80" }, { addr = "10.80.0.8:80", state = "drain" }]
            "#,
        )
        .unwrap()
    }

    fn views(healthy: bool, drained_healthy: bool) -> Vec<Vec<PoolView>> {
        let member = |addr: &str, healthy| MemberView {
            addr: addr.parse().unwrap(),
            removed: false,
            healthy,
            proven: healthy,
            active: 0,
            last_failure: None,
        };
        vec![vec![PoolView {
            name: "app".into(),
            retired: false,
            members: vec![
                member("10.80.0.9:80", healthy),
                member("10.80.0.8:80", drained_healthy),
            ],
        }]]
    }

    fn ips(list: &[&str]) -> BTreeSet<IpAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn enabled_vips_that_can_answer_are_announced_the_others_withheld_with_why() {
        let cfg = config();
        let v = views(true, false);
        let (on, off) = wanted(&cfg, Phase::Serving, None, Ok(&v));
        assert_eq!(on, ips(&["10.90.0.1", "2001:db8:90::1", "10.90.0.3"]));
        assert_eq!(off, vec!["off: disabled"]);
        // Only a member in drain is healthy: the pool cannot take new
        // connections, so its VIP is withheld.
        let v = views(false, true);
        let (on, off) = wanted(&cfg, Phase::Serving, None, Ok(&v));
        assert!(!on.contains(&"10.90.0.3".parse().unwrap()));
        assert!(off.contains(&"app: no healthy member in pool app".to_string()));
        // Healthy as members start, but no check has passed yet.
        let mut v = views(true, false);
        v[0][0].members[0].proven = false;
        let (on, _) = wanted(&cfg, Phase::Serving, None, Ok(&v));
        assert!(!on.contains(&"10.90.0.3".parse().unwrap()));
        let (on, off) = wanted(&cfg, Phase::Serving, None, Err("engines did not answer"));
        assert_eq!(on, ips(&["10.90.0.1", "2001:db8:90::1"]));
        assert!(off.contains(&"app: pool app: engines did not answer".to_string()));
    }

    const STOPPED: &str = "an engine has stopped";

    /// Under `[routing]`, a VIP whose pool has no check is named; with a
    /// check, disabled, or without `[routing]`, none is.
    #[test]
    fn a_pool_vip_without_checks_under_routing_is_warned_of() {
        let mut cfg = config();
        assert!(cfg.pools[0].health.is_none());
        let w = routing_warnings(&cfg);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("vip app: pool app has no health check"),
            "{w:?}"
        );
        let text = cfg.to_toml().replace(
            "[[pool]]\nname = \"app\"\n",
            "[[pool]]\nname = \"app\"\nhealth = { kind = \"tcp\" }\n",
        );
        let checked = Config::parse(&text).unwrap();
        assert!(checked.pools[0].health.is_some(), "{text}");
        assert!(routing_warnings(&checked).is_empty(), "with a check");
        cfg.routing = None;
        assert!(routing_warnings(&cfg).is_empty());
    }

    /// No port with its link up (a cable, a switch port, a memif server
    /// gone): nothing is announced, each VIP saying why. Before, link
    /// state was not looked at: the routers kept sending this node its
    /// share, behind a link that carried nothing.
    #[test]
    fn nothing_is_announced_without_a_link_up() {
        let cfg = config();
        let v = views(true, true);
        let (on, off) = wanted(&cfg, Phase::Serving, Some(NO_LINK), Ok(&v));
        assert!(on.is_empty());
        assert_eq!(off.len(), 4);
        assert!(off.iter().all(|w| w.ends_with(NO_LINK)), "{off:?}");
    }

    #[test]
    fn nothing_is_announced_while_draining_or_with_an_engine_stopped() {
        let cfg = config();
        let v = views(true, true);
        let t0 = Instant::now();
        for phase in [
            begin(t0, true, 0),
            begin(t0, false, 0),
            Phase::Drained { began: t0 },
        ] {
            let (on, off) = wanted(&cfg, phase, None, Ok(&v));
            assert!(on.is_empty(), "{phase:?}");
            assert_eq!(off.len(), 4);
        }
        let (on, off) = wanted(&cfg, Phase::Serving, Some(STOPPED), Ok(&v));
        assert!(on.is_empty());
        assert!(off[0].ends_with("an engine has stopped"), "{off:?}");
    }

    #[test]
    fn an_engine_whose_loop_stands_still_is_found_stopped() {
        let mut stats = Stats {
            cores: vec![Default::default(), Default::default()],
            total: Default::default(),
            tsc_hz: 1,
        };
        let t0 = Instant::now();
        let mut live = Liveness::default();
        assert!(live.update(&stats, t0));
        stats.cores[0].loops = 10;
        stats.cores[1].loops = 10;
        assert!(live.update(&stats, t0 + Duration::from_millis(900)));
        stats.cores[0].loops = 20;
        assert!(live.update(&stats, t0 + Duration::from_millis(1800)));
        stats.cores[0].loops = 30;
        assert!(!live.update(&stats, t0 + Duration::from_millis(1900)));
        stats.cores[1].loops = 11;
        assert!(live.update(&stats, t0 + Duration::from_millis(2000)));
    }
}
