//! Health checks of pool members, run by each engine through its own TCP
//! stack: a TCP connect, or `GET path` answered with a status it expects,
//! every interval; `rise` successes in a row bring a member back, `fall`
//! failures in a row take it out of the choice. Each member is checked by
//! one engine (`HealthShare`); its state changes go to the others as
//! `HealthNews`, relayed by the control thread.

use std::time::Duration;

pub use control::config::{HealthKind, StatusRange};

use std::net::SocketAddr;
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use super::proxy::OpenError;
use super::role::Role;
use super::{Cx, Services};
use crate::tcp::{AnyFlowKey, ConnId, Event};
use crate::time::Instant;

/// A pool's check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    pub kind: HealthKind,
    /// The HTTP request sent (HTTP checks).
    pub request: Vec<u8>,
    /// HTTP: the statuses that pass.
    pub expect: StatusRange,
    pub interval: Duration,
    pub timeout: Duration,
    pub rise: u32,
    pub fall: u32,
}

impl HealthCheck {
    /// The check of a pool whose `health` is `h`; with `proxy_protocol`,
    /// an HTTP check's request follows a PROXY v2 LOCAL header, as the
    /// members then require one (HAProxy's `check-send-proxy`).
    pub fn from_config(h: &control::config::Health, proxy_protocol: bool) -> Self {
        let mut request = Vec::new();
        if proxy_protocol && h.kind == HealthKind::Http {
            super::proxy_protocol::local_v2(&mut request);
        }
        request.extend_from_slice(
            match &h.host {
                None => format!(
                    "GET {} HTTP/1.0\r\nUser-Agent: tlsdp-health\r\nConnection: close\r\n\r\n",
                    h.path
                ),
                Some(host) => format!(
                    "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: tlsdp-health\r\nConnection: close\r\n\r\n",
                    h.path
                ),
            }
            .as_bytes(),
        );
        Self {
            kind: h.kind,
            request,
            expect: h.expect,
            interval: Duration::from_millis(u64::from(h.interval_ms)),
            timeout: Duration::from_millis(u64::from(h.timeout_ms)),
            rise: h.rise,
            fall: h.fall,
        }
    }
}

/// A member's health as this engine sees it.
#[derive(Debug, Clone)]
pub struct MemberHealth {
    /// Taken into the choice (members start healthy).
    pub healthy: bool,
    /// A check has passed (here or, by news, on another engine) since the
    /// member was added: route announcement waits for it.
    pub proven: bool,
    ok_streak: u32,
    fail_streak: u32,
    /// When the next check starts.
    pub next_at: Instant,
    /// The check in flight: its connection and when it fails.
    pub probe: Option<(ConnId, AnyFlowKey, Instant)>,
    pub checks: u64,
    pub failures: u64,
    /// Why the last check this engine ran failed (none yet: `None`).
    pub last_failure: Option<HealthFailure>,
}

impl Default for MemberHealth {
    fn default() -> Self {
        Self {
            healthy: true,
            proven: false,
            ok_streak: 0,
            fail_streak: 0,
            next_at: Instant::ZERO,
            probe: None,
            checks: 0,
            failures: 0,
            last_failure: None,
        }
    }
}

impl MemberHealth {
    /// Its pool no longer checks it: taken into the choice again, its
    /// streaks and last failure forgotten (a probe in flight is aborted at
    /// the next tick).
    pub fn unchecked(&mut self) {
        self.healthy = true;
        self.ok_streak = 0;
        self.fail_streak = 0;
        self.last_failure = None;
    }

    /// Counts one check's result; `Some(healthy)` when the member's state
    /// changed.
    pub fn record(&mut self, ok: bool, check: &HealthCheck) -> Option<bool> {
        self.checks += 1;
        self.probe = None;
        if ok {
            self.proven = true;
            self.ok_streak += 1;
            self.fail_streak = 0;
            if !self.healthy && self.ok_streak >= check.rise {
                self.healthy = true;
                return Some(true);
            }
        } else {
            self.failures += 1;
            self.fail_streak += 1;
            self.ok_streak = 0;
            if self.healthy && self.fail_streak >= check.fall {
                self.healthy = false;
                return Some(false);
            }
        }
        None
    }
}

/// Why a check failed (the last one is kept with the member, for
/// `dpctl pool show` and the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthFailure {
    /// Not done within the check's timeout (no handshake, or no status
    /// line).
    TimedOut,
    /// Answered with another status than expected.
    Status(u16),
    /// Answered with something that is not an HTTP status line.
    NotHttp,
    /// Closed (FIN) before a status line came.
    ClosedBeforeStatus,
    /// Refused (a reset to our SYN) or reset before a verdict.
    ConnectionFailed,
    /// No port's network reaches the member.
    NoRoute,
}

impl std::fmt::Display for HealthFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TimedOut => f.write_str("timed out"),
            Self::Status(s) => write!(f, "status {s}"),
            Self::NotHttp => f.write_str("not an HTTP status line"),
            Self::ClosedBeforeStatus => f.write_str("closed before a status line"),
            Self::ConnectionFailed => f.write_str("connection refused or reset"),
            Self::NoRoute => f.write_str("no route to it"),
        }
    }
}

/// A health-check connection's app state.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    pub pool: u16,
    pub member: u16,
}

/// The most of an interim (1xx) response head a check waits for: a
/// longer one fails the check (its timeout would too, later).
const MAX_INTERIM_HEAD: usize = 4096;

/// The length of the response head at the front of `a` then `b` (up to
/// and with the empty line that ends it: CRLF CRLF, or bare LFs), once it
/// is whole; looked for in the first [`MAX_INTERIM_HEAD`] bytes.
fn head_len(a: &[u8], b: &[u8]) -> Option<usize> {
    let mut line_ends = 0;
    for (i, &c) in a.iter().chain(b).take(MAX_INTERIM_HEAD).enumerate() {
        match c {
            b'\n' => {
                line_ends += 1;
                if line_ends == 2 {
                    return Some(i + 1);
                }
            }
            b'\r' => {}
            _ => line_ends = 0,
        }
    }
    None
}

/// The status of an HTTP response head's first line (RFC 9112 §4:
/// `HTTP/1.x SP ddd SP reason`), once its first 13 bytes or its end came;
/// 0 for a line that is not one. Read as bytes: the reason phrase may
/// hold any (obs-text), and a long one is cut where the head buffer ends.
pub fn status(head: &[u8]) -> Option<u16> {
    let end = head.iter().position(|&b| b == b'\n');
    if end.is_none() && head.len() < 13 {
        return None; // not all of it yet
    }
    let line = &head[..end.unwrap_or(head.len())];
    let code = match line {
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', _, b' ', d @ ..] if d.len() >= 3 => &d[..3],
        _ => return Some(0),
    };
    let after = line.get(12).copied();
    if !code.iter().all(u8::is_ascii_digit) || !matches!(after, None | Some(b' ' | b'\r')) {
        return Some(0);
    }
    Some(code.iter().fold(0, |n, d| n * 10 + u16::from(d - b'0')))
}

/// A member's health as found by the one engine that checks it: sent when
/// it changes, and again while it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthNews {
    pub pool: String,
    pub addr: SocketAddr,
    pub up: bool,
}

/// A member's verdict while it stays up goes to the other engines again
/// every this many checks (one down: at each check).
const REPEAT_UP_EVERY: u64 = 8;

/// Keeps `news` for a later try: the latest per member only, so what
/// waits is bounded by the members.
fn keep_unsent(unsent: &mut std::collections::VecDeque<HealthNews>, news: HealthNews) {
    match unsent
        .iter_mut()
        .find(|n| n.pool == news.pool && n.addr == news.addr)
    {
        Some(n) => n.up = news.up,
        None => unsent.push_back(news),
    }
}

/// How engines split the health checks: each member is checked by one
/// engine, which tells the others (through the control thread's relay)
/// when it goes up or down. N engines send one check per interval, not N.
#[derive(Debug, Clone)]
pub struct HealthShare {
    pub engine: u16,
    pub engines: u16,
    /// News for the relay (shared by all engines).
    pub news: Arc<ArrayQueue<HealthNews>>,
}

impl HealthShare {
    /// Shares for `engines` engines and the queue the relay reads.
    pub fn new_set(engines: u16) -> (Vec<HealthShare>, Arc<ArrayQueue<HealthNews>>) {
        Self::with_queue(engines, 1024)
    }

    /// As [`Self::new_set`], with a queue of `capacity`.
    pub fn with_queue(
        engines: u16,
        capacity: usize,
    ) -> (Vec<HealthShare>, Arc<ArrayQueue<HealthNews>>) {
        let news = Arc::new(ArrayQueue::new(capacity.max(1)));
        let shares = (0..engines)
            .map(|engine| HealthShare {
                engine,
                engines,
                news: news.clone(),
            })
            .collect();
        (shares, news)
    }

    /// Whether this engine checks `addr` of pool `pool` (FNV-1a of both,
    /// modulo the engines: the same answer on every engine).
    pub fn checks(&self, pool: &str, addr: SocketAddr) -> bool {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let port = addr.port().to_be_bytes();
        let (v4, v6);
        let ip: &[u8] = match addr.ip() {
            std::net::IpAddr::V4(a) => {
                v4 = a.octets();
                &v4
            }
            std::net::IpAddr::V6(a) => {
                v6 = a.octets();
                &v6
            }
        };
        for b in pool.bytes().chain(ip.iter().copied()).chain(port) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        (h % u64::from(self.engines.max(1))) as u16 == self.engine
    }
}

/// Relays health news from the engine that found it to every other engine
/// (the control thread's side; [`HealthRelay::relay`] every few
/// milliseconds). News an engine's ring has no room for waits here, only
/// the latest per member, so an engine that was busy still learns every
/// member's last state; the ring's last [`RING_RESERVE`] places are left
/// to the control thread's own requests.
#[derive(Debug)]
pub struct HealthRelay {
    /// Per engine, news not yet in its ring (at most one per member).
    waiting: Vec<Vec<HealthNews>>,
}

/// Where the relay hands an engine its news (its control ring).
pub trait HealthSink {
    /// Free places in the ring now.
    fn room(&self) -> usize;
    /// Queues `news`; false when the ring is full.
    fn push_news(&self, news: HealthNews) -> bool;
}

/// Places of an engine's ring health news leaves free.
pub const RING_RESERVE: usize = 16;

impl HealthRelay {
    pub fn new(engines: usize) -> Self {
        Self {
            waiting: vec![Vec::new(); engines],
        }
    }

    /// Takes the engines' news and hands each engine what its ring has
    /// room for.
    pub fn relay(&mut self, news: &ArrayQueue<HealthNews>, links: &[impl HealthSink]) {
        while let Some(n) = news.pop() {
            for waiting in &mut self.waiting {
                // An older state of the same member is stale now.
                waiting.retain(|w| w.pool != n.pool || w.addr != n.addr);
                waiting.push(n.clone());
            }
        }
        for (l, waiting) in links.iter().zip(&mut self.waiting) {
            let mut sent = 0;
            for n in waiting.iter() {
                if l.room() <= RING_RESERVE || !l.push_news(n.clone()) {
                    break;
                }
                sent += 1;
            }
            waiting.drain(..sent);
        }
    }

    /// News waiting for engine `engine`'s ring.
    pub fn waiting(&self, engine: usize) -> usize {
        self.waiting.get(engine).map_or(0, Vec::len)
    }
}

impl Services {
    /// Starts due health checks and fails those past their timeout.
    pub(super) fn run_health(&mut self, cx: &mut Cx<'_>) {
        if let Some(share) = &self.health_share {
            while let Some(news) = self.health_unsent.pop_front() {
                if let Err(news) = share.news.push(news) {
                    self.health_unsent.push_front(news);
                    break;
                }
            }
        }
        let now = cx.now;
        for p in 0..self.pools.len() {
            // Probes with nothing to report to any more (their member
            // removed, their pool retired or its check taken away) end now,
            // not at TCP's idle timeout.
            let pool = &mut self.pools[p];
            let unchecked = pool.retired || pool.check.is_none();
            for member in &mut pool.members {
                let orphan = unchecked || member.removed;
                if let Some((id, key, _)) = member.health.probe.filter(|_| orphan) {
                    member.health.probe = None;
                    if cx.tcp.key(id) == Some(key) {
                        cx.tcp.abort(id);
                    }
                }
            }
            if self.pools[p].retired {
                continue;
            }
            let Some(check) = self.pools[p].check.as_ref() else {
                continue;
            };
            let (interval, timeout) = (check.interval, check.timeout);
            for m in 0..self.pools[p].members.len() {
                let member = &self.pools[p].members[m];
                match member.health.probe {
                    Some((id, key, deadline)) if now >= deadline => {
                        self.health_result(cx, p, m, Err(HealthFailure::TimedOut));
                        if cx.tcp.key(id) == Some(key) {
                            cx.tcp.abort(id);
                        }
                    }
                    Some(_) => {}
                    None if now >= member.health.next_at
                        && !member.removed
                        && self
                            .health_share
                            .as_ref()
                            .is_none_or(|s| s.checks(&self.pools[p].name, member.addr)) =>
                    {
                        let addr = member.addr;
                        self.pools[p].members[m].health.next_at = now + interval;
                        let (Ok(pool), Ok(member)) = (u16::try_from(p), u16::try_from(m)) else {
                            continue; // past 65,535 pools (never expected)
                        };
                        match self.open_to(cx, addr) {
                            Ok((id, key)) => {
                                let probe = Probe { pool, member };
                                self.roles.insert(id, None, Role::Probe(probe));
                                self.pools[p].members[m].health.probe =
                                    Some((id, key, now + timeout));
                            }
                            Err(OpenError::NoRoute) => {
                                self.health_result(cx, p, m, Err(HealthFailure::NoRoute));
                            }
                            // This engine's own want (a full connection
                            // table, every source port in use) says
                            // nothing of the member: no verdict, tried
                            // again at the next interval.
                            Err(OpenError::TableFull | OpenError::NoSourcePort) => {
                                cx.counters.health_checks_skipped += 1;
                            }
                        }
                    }
                    None => {}
                }
            }
        }
    }

    /// A health-check connection's event.
    pub(super) fn on_probe(&mut self, cx: &mut Cx<'_>, id: ConnId, probe: Probe, ev: Event) {
        let (p, m) = (usize::from(probe.pool), usize::from(probe.member));
        let pool = self.pools.get(p);
        let check = pool.and_then(|pool| pool.check.as_ref());
        let current = pool
            .and_then(|pool| pool.members.get(m))
            .is_some_and(|member| {
                member
                    .health
                    .probe
                    .is_some_and(|(pid, key, _)| pid == id && cx.tcp.key(id) == Some(key))
            });
        let Some((kind, expect)) = check.filter(|_| current).map(|c| (c.kind, c.expect)) else {
            // Left over from a check its member no longer waits for.
            if cx.tcp.key(id).is_some() {
                cx.tcp.abort(id);
            }
            return;
        };
        match (kind, ev) {
            (HealthKind::Tcp, Event::Connected(_)) => {
                self.health_result(cx, p, m, Ok(()));
                // A reset, as an HTTP check's: a FIN would leave the check
                // in FIN-WAIT-2 for its timeout wherever the member's
                // kernel took the connection but nobody accepted it.
                cx.tcp.abort(id);
            }
            (HealthKind::Http, Event::Connected(_)) => {
                let Some(check) = &self.pools[p].check else {
                    return;
                };
                if cx.tcp.send(id, &check.request) < check.request.len() {
                    // No send ring for the request (the buffer cap is
                    // reached): that says nothing of the member, so the
                    // check is dropped, not failed (a client holding the
                    // engine at the cap would take healthy members down
                    // with it), and runs again at its next interval.
                    cx.counters.health_checks_skipped += 1;
                    if let Some(member) = self.pools[p].members.get_mut(m) {
                        member.health.probe = None;
                    }
                    cx.tcp.abort(id);
                }
            }
            (HealthKind::Http, Event::Readable(_) | Event::PeerClosed(_)) => loop {
                let closed = matches!(ev, Event::PeerClosed(_));
                let (a, b) = cx.tcp.peek(id);
                let mut head = [0u8; 64];
                let n = (a.len() + b.len()).min(head.len());
                let first = a.len().min(n);
                head[..first].copy_from_slice(&a[..first]);
                head[first..n].copy_from_slice(&b[..n - first]);
                match status(&head[..n]) {
                    // An interim response (RFC 9110 §15.2: 103 Early Hints,
                    // 100 Continue) before the final one: passed over once
                    // its head is whole. 101 would switch protocols, which
                    // the check never asks for: a final answer.
                    Some(s @ 100..=199) if s != 101 && !expect.contains(s) => {
                        match head_len(a, b) {
                            Some(len) => {
                                cx.tcp.consume(id, len);
                                continue;
                            }
                            None if closed || a.len() + b.len() >= MAX_INTERIM_HEAD => {
                                self.health_result(cx, p, m, Err(HealthFailure::Status(s)));
                                cx.tcp.abort(id);
                            }
                            None => {}
                        }
                    }
                    Some(s) => {
                        let verdict = match s {
                            _ if expect.contains(s) => Ok(()),
                            0 => Err(HealthFailure::NotHttp),
                            s => Err(HealthFailure::Status(s)),
                        };
                        self.health_result(cx, p, m, verdict);
                        cx.tcp.abort(id);
                    }
                    None if closed => {
                        self.health_result(cx, p, m, Err(HealthFailure::ClosedBeforeStatus));
                        cx.tcp.abort(id);
                    }
                    None => {}
                }
                break;
            },
            _ => {}
        }
    }

    /// A health check's connection is gone: a failure, unless its result
    /// was already counted.
    pub(super) fn probe_closed(&mut self, cx: &mut Cx<'_>, id: ConnId, probe: Probe) {
        let (p, m) = (usize::from(probe.pool), usize::from(probe.member));
        let open = self
            .pools
            .get(p)
            .and_then(|pool| pool.members.get(m))
            .is_some_and(|member| member.health.probe.is_some_and(|(pid, _, _)| pid == id));
        if open {
            self.health_result(cx, p, m, Err(HealthFailure::ConnectionFailed));
        }
    }

    /// Counts a check's result; logs and counts a member's state change,
    /// and tells the other engines of it.
    fn health_result(
        &mut self,
        cx: &mut Cx<'_>,
        p: usize,
        m: usize,
        verdict: Result<(), HealthFailure>,
    ) {
        let ok = verdict.is_ok();
        let Some(pool) = self.pools.get_mut(p) else {
            return;
        };
        let Some(check) = &pool.check else { return };
        let Some(member) = pool.members.get_mut(m) else {
            return;
        };
        cx.counters.health_checks += 1;
        if let Err(why) = verdict {
            cx.counters.health_failures += 1;
            member.health.last_failure = Some(why);
        }
        let changed = member.health.record(ok, check);
        // The verdict goes to the other engines when it changes, and
        // again while it stands (each check of a member down, every
        // [`REPEAT_UP_EVERY`]th of one up): an engine that placed the
        // member after the change (a pool full there, a removed member's
        // place reused) took it as healthy and had not heard.
        let repeat = changed.is_none()
            && (!member.health.healthy || member.health.checks % REPEAT_UP_EVERY == 0);
        let Some(up) = changed.or(repeat.then_some(member.health.healthy)) else {
            return;
        };
        if let Some(share) = &self.health_share {
            // Once a check at most (a change, or a verdict repeated), never
            // per packet: the allocation is fine.
            let news = HealthNews {
                pool: pool.name.clone(),
                addr: member.addr,
                up,
            };
            // Behind news still waiting (so the relay never hears a
            // member's older state after its newer one), or when the
            // queue is full: sent at the next checks' turn. The other
            // engines hear of it late, never not at all.
            if !self.health_unsent.is_empty() {
                keep_unsent(&mut self.health_unsent, news);
            } else if let Err(news) = share.news.push(news) {
                if changed.is_some() {
                    log::warn!("health news queue full: other engines hear of a change late");
                }
                keep_unsent(&mut self.health_unsent, news);
            }
        }
        if changed.is_none() {
            return;
        }
        cx.counters.health_changes += 1;
        // Rare (a state change), never per packet.
        if up {
            log::info!(
                "pool {}: member {} is up (health checks pass)",
                pool.name,
                member.addr
            );
        } else {
            let why = member.health.last_failure.map(|f| f.to_string());
            log::warn!(
                "pool {}: member {} is down (health checks fail: {})",
                pool.name,
                member.addr,
                why.as_deref().unwrap_or("?")
            );
            if !pool.any_usable() {
                log::error!(
                    "pool {}: no member is up: its VIPs' new clients are turned away",
                    pool.name
                );
            }
        }
    }

    /// Another engine found a member up or down.
    pub(super) fn take_news(&mut self, news: &HealthNews) {
        let member = self
            .pools
            .iter_mut()
            .filter(|p| !p.retired && p.name == news.pool)
            .flat_map(|p| p.members.iter_mut())
            .find(|m| !m.removed && m.addr == news.addr);
        if let Some(m) = member {
            m.health.healthy = news.up;
            m.health.proven |= news.up;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(rise: u32, fall: u32) -> HealthCheck {
        HealthCheck {
            kind: HealthKind::Tcp,
            request: Vec::new(),
            expect: StatusRange::exact(200),
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            rise,
            fall,
        }
    }

    #[test]
    fn fall_and_rise_need_streaks() {
        let c = check(2, 3);
        let mut h = MemberHealth::default();
        assert_eq!(h.record(false, &c), None);
        assert_eq!(h.record(false, &c), None);
        assert_eq!(h.record(true, &c), None, "a success breaks the streak");
        assert_eq!(h.record(false, &c), None);
        assert_eq!(h.record(false, &c), None);
        assert_eq!(h.record(false, &c), Some(false));
        assert!(!h.healthy);
        assert_eq!(h.record(true, &c), None);
        assert_eq!(h.record(true, &c), Some(true));
        assert_eq!((h.checks, h.failures), (8, 5));
    }

    /// A check with `host` asks for that name over HTTP/1.1 (members that
    /// serve by name answer their default site to a request without
    /// one); without, HTTP/1.0 as before.
    #[test]
    fn a_host_is_asked_for_by_name_over_http_1_1() {
        let mut h = control::config::Health {
            kind: HealthKind::Http,
            path: "/health".into(),
            host: Some("app.example:8080".into()),
            expect: StatusRange::exact(200),
            interval_ms: 1000,
            timeout_ms: 500,
            rise: 2,
            fall: 3,
        };
        let by_name = HealthCheck::from_config(&h, false).request;
        assert_eq!(
            String::from_utf8(by_name).unwrap(),
            "GET /health HTTP/1.1\r\nHost: app.example:8080\r\nUser-Agent: tlsdp-health\r\nConnection: close\r\n\r\n"
        );
        h.host = None;
        let plain = String::from_utf8(HealthCheck::from_config(&h, false).request).unwrap();
        assert!(plain.starts_with("GET /health HTTP/1.0\r\n") && !plain.contains("Host"));
        // A pool that sends PROXY headers: a LOCAL one first.
        let proxied = HealthCheck::from_config(&h, true).request;
        assert_eq!(&proxied[12..16], &[0x20, 0, 0, 0]);
        assert_eq!(proxied[16..], *plain.as_bytes());
        h.kind = HealthKind::Tcp;
        assert_eq!(HealthCheck::from_config(&h, true).request, plain.as_bytes());
    }

    #[test]
    fn interim_heads_end_at_their_empty_line_in_either_half() {
        let head = b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\n";
        let end = 44;
        assert_eq!(&head[end - 4..end], b"\r\n\r\n");
        for cut in 0..head.len() {
            let (a, b) = head.split_at(cut);
            assert_eq!(head_len(a, b), Some(end), "cut at {cut}");
        }
        assert_eq!(head_len(b"HTTP/1.1 100 Continue\n\n", b""), Some(23));
        assert_eq!(
            head_len(b"HTTP/1.1 103 Early Hints\r\nLink: x\r\n", b""),
            None
        );
        let long = [b'x'; MAX_INTERIM_HEAD];
        assert_eq!(head_len(&long, b"\n\n"), None, "past the bound");
    }

    #[test]
    fn status_lines() {
        assert_eq!(status(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(status(b"HTTP/1.1 404 Not Found\r\n"), Some(404));
        assert_eq!(status(b"HTTP/1.0 503 Service Unavailable\r\n"), Some(503));
        assert_eq!(status(b"HTTP/1.1 2"), None);
        assert_eq!(status(b"SSH-2.0-OpenSSH\r\n"), Some(0));
        // Any bytes in the reason phrase (obs-text), and a line cut where
        // the 64-byte head buffer ends mid-character: before, neither was
        // read (not UTF-8), and a healthy member was marked down.
        assert_eq!(status(b"HTTP/1.1 200 \xe9t\xe9\r\n"), Some(200));
        let mut cut = b"HTTP/1.1 204 ".to_vec();
        cut.extend("é".repeat(30).as_bytes());
        assert_eq!(status(&cut[..64]), Some(204));
        assert_eq!(status(b"HTTP/1.1 200\r\n"), Some(200));
        assert_eq!(status(b"HTTP/1.1 2000 OK\r\n"), Some(0));
        assert_eq!(status(b"HTTP/1.1 2x0 OK\r\n"), Some(0));
    }
}
