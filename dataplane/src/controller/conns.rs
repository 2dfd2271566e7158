//! `dpctl conn list` and `conn reset`: client connections as the engines
//! hold them, asked over their rings (docs/control-api.md).

use std::net::SocketAddr;

use control::api::{ConnInfo, ResetInfo, MAX_CONNS};

use super::*;
use crate::app::ConnUse;
use crate::tcp::{ConnFilter, ConnView, State};

/// What a `conn list` or `conn reset` request picks, as it came.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Select<'a> {
    pub vip: Option<&'a str>,
    pub source: Option<&'a str>,
    pub state: Option<&'a str>,
    pub idle_over_s: Option<u64>,
}

impl<'a> Select<'a> {
    pub(super) fn of(
        vip: &'a Option<String>,
        source: &'a Option<String>,
        state: &'a Option<String>,
        idle_over_s: Option<u64>,
    ) -> Self {
        Self {
            vip: vip.as_deref(),
            source: source.as_deref(),
            state: state.as_deref(),
            idle_over_s,
        }
    }

    fn is_empty(&self) -> bool {
        let Select {
            vip,
            source,
            state,
            idle_over_s,
        } = self;
        vip.is_none() && source.is_none() && state.is_none() && idle_over_s.is_none()
    }

    /// As the log says it: ` of VIP web from 198.51.100.0/24 ...`.
    fn text(&self) -> String {
        let mut s = String::new();
        if let Some(v) = self.vip {
            s.push_str(&format!(" of VIP {v}"));
        }
        if let Some(n) = self.source {
            s.push_str(&format!(" from {n}"));
        }
        if let Some(st) = self.state {
            s.push_str(&format!(" in {st}"));
        }
        if let Some(i) = self.idle_over_s {
            s.push_str(&format!(" idle {i} s or more"));
        }
        s
    }
}

impl Controller {
    /// The address and port VIP `name` listens on.
    pub(super) fn vip_local(&self, name: &str) -> Result<(IpAddr, u16), String> {
        let v = self.cfg.vips.iter().find(|v| v.name == name);
        let v = v.ok_or_else(|| format!("no VIP is named {name:?}"))?;
        let a: SocketAddr = v.listen.parse().map_err(|e| format!("VIP {name}: {e}"))?;
        Ok((a.ip(), a.port()))
    }

    /// The connections `select` picks: refused when a VIP is unknown, or
    /// a network or a state does not read.
    fn conn_filter(&self, select: &Select<'_>) -> Result<ConnFilter, String> {
        let state = |s: &str| {
            State::from_name(s).ok_or_else(|| {
                format!("state {s:?}: a TCP state as RFC 9293 names it (ESTABLISHED, SYN-RECEIVED, CLOSE-WAIT, ...)")
            })
        };
        Ok(ConnFilter {
            local: select.vip.map(|v| self.vip_local(v)).transpose()?,
            source: (select.source)
                .map(|s| parse_prefix(s).map_err(|why| format!("source {s:?}: {why}")))
                .transpose()?,
            state: select.state.map(state).transpose()?,
            idle_over: select.idle_over_s.map(Duration::from_secs),
        })
    }

    /// The `count` oldest client connections `select` picks,
    /// over every engine (each sends its own `count` oldest).
    pub(super) fn conn_list(&self, select: &Select<'_>, count: u32) -> Reply {
        if !(1..=MAX_CONNS).contains(&count) {
            return Reply::error(format!("count {count}: must be 1 to {MAX_CONNS}"));
        }
        let filter = match self.conn_filter(select) {
            Ok(f) => f,
            Err(e) => return Reply::error(e),
        };
        let max = count as usize;
        let parts = self.ask_engines(
            |ask| ToEngine::Conns { ask, filter, max },
            |msg| match msg {
                FromEngine::Conns { engine, ask, conns } => Some((engine, ask, conns)),
                _ => None,
            },
        );
        let mut all: Vec<(usize, ConnView, ConnUse)> = match parts {
            Ok(parts) => parts
                .into_iter()
                .flat_map(|(engine, conns)| conns.into_iter().map(move |(c, u)| (engine, c, u)))
                .collect(),
            Err(e) => return Reply::error(e),
        };
        all.sort_unstable_by_key(|(engine, c, _)| {
            (std::cmp::Reverse(c.tcp.age), c.client, *engine)
        });
        all.truncate(max);
        let shown = (all.into_iter()).map(|(engine, c, u)| self.conn_info(engine, &c, &u));
        Reply::ok(Body::Conns(shown.collect()))
    }

    fn conn_info(&self, engine: usize, c: &ConnView, u: &ConnUse) -> ConnInfo {
        let local = c.local.to_string();
        let vip = (self.cfg.vips.iter()).find(|v| {
            v.listen
                .parse::<SocketAddr>()
                .is_ok_and(|a| a == c.listener)
        });
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        ConnInfo {
            client: c.client.to_string(),
            local,
            vip: vip.map_or_else(String::new, |v| v.name.clone()),
            engine,
            state: c.state.name().to_string(),
            role: u.role.to_string(),
            waits_for: u.waits_for.to_string(),
            backend: u.backend.map(|a| a.to_string()),
            to_backend: u.to_backend,
            to_client: u.to_client,
            age_ms: ms(c.tcp.age),
            idle_ms: ms(c.tcp.idle),
            send_queue: c.tcp.send_queue,
            recv_queue: c.tcp.recv_queue,
            peer_window: c.tcp.peer_window,
            rtt_us: c
                .tcp
                .srtt
                .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            cwnd: c.tcp.cwnd,
            retries: c.tcp.retries,
        }
    }

    /// Resets the client connections `select` picks (something at least
    /// given), on every engine; how many.
    pub(super) fn conn_reset(&self, select: &Select<'_>) -> Reply {
        if select.is_empty() {
            return Reply::error(
                "conn reset: give a VIP, a source network, a state or an idle time (or several)",
            );
        }
        let filter = match self.conn_filter(select) {
            Ok(f) => f,
            Err(e) => return Reply::error(e),
        };
        // Why an earlier wait gave up says nothing of this one.
        self.stood_still.set(None);
        let mut asked = vec![false; self.links.len()];
        let ask = self.next_ask();
        for (i, l) in self.links.iter().enumerate() {
            asked[i] = l
                .to_engine
                .push(ToEngine::ConnsReset { ask, filter })
                .is_ok();
        }
        let mut answered = vec![false; self.links.len()];
        let mut reset = 0;
        let done = asked.iter().any(|a| *a)
            && self.await_engines(ENGINE_REPLY, |msg| match msg {
                FromEngine::ConnsReset {
                    engine,
                    ask: a,
                    reset: n,
                } if a == ask => {
                    if let Some(seen) = answered.get_mut(engine).filter(|seen| !**seen) {
                        *seen = true;
                        reset += n;
                    }
                    answered.iter().zip(&asked).all(|(a, asked)| *a || !asked)
                }
                _ => false,
            });
        let missing: Vec<String> = (0..self.links.len())
            .filter(|&i| !answered[i])
            .map(|i| self.links[i].engine.to_string())
            .collect();
        if !done || !missing.is_empty() {
            return Reply::error(format!(
                "engine(s) {} did not reset theirs (ring full, or {}); the others reset {reset}",
                missing.join(", "),
                self.no_answer()
            ));
        }
        log::info!(
            "reset {reset} client connection(s){} at an operator's request",
            select.text()
        );
        Reply::ok(Body::Reset(ResetInfo { connections: reset }))
    }
}
