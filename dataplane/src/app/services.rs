//! dpd's application: the VIPs, each connection's role, and the dispatch
//! of TCP events to the role's code (responder, TLS, proxy, health
//! checks; those live in their own modules as `impl Services` blocks).

use std::net::IpAddr;
use std::time::Duration;

use crypto::session::TlsConfig;

use super::budget::HandshakeBudget;
use super::config::{MemberView, PoolView, Snapshot, MAX_VIPS};
use super::deadlines::{Timeouts, Wait};
use super::health::HealthShare;
use super::pool::Pool;
use super::proxy::{self, ClientStream, ProxyLink, Side};
use super::responder::{Responder, Session};
use super::role::{Entry, Inner, Role, Roles, TlsRole};
use super::tls::{self, TlsConn};
use super::{Application, Cx};
use crate::stats::VipCounters;
use crate::tcp::{CloseReason, ConnId, Event};

/// Source ports of backend connections: RFC 6056 §3.2's whole range.
pub(super) const EPHEMERAL: std::ops::RangeInclusive<u16> = 1024..=65535;

/// The VIP that takes connections to `local`: the one on its address and
/// port, else its family's wildcard on the port (`0.0.0.0:P`, `[::]:P`),
/// as TCP's listeners choose.
pub(super) fn vip_taking(vips: &[VipEntry], local: std::net::SocketAddr) -> Option<&VipEntry> {
    let on = |ip: IpAddr| (vips.iter()).find(|v| v.addr == ip && v.port == local.port());
    on(local.ip()).or_else(|| {
        on(match local.ip() {
            IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
            IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
        })
    })
}

/// A VIP as the engine serves it (from the current snapshot).
#[derive(Debug)]
pub struct VipEntry {
    /// Index of its counters.
    pub slot: u16,
    pub addr: IpAddr,
    pub port: u16,
    pub enabled: bool,
    pub tls: Option<TlsConfig>,
    /// Index in the engine's pools; `None`: the built-in responder.
    pub pool: Option<u16>,
    /// `(SNI, pool index)`: a TLS client asking for the name goes to that
    /// pool instead (`*.domain`: one label more).
    pub routes: Vec<(Box<str>, u16)>,
    /// The only client networks its listener takes (`None`: any).
    pub allow: Option<std::sync::Arc<crate::net::PrefixSet>>,
    pub timeouts: Timeouts,
    /// What its listener admits on this engine.
    pub limits: crate::tcp::ListenLimits,
}

/// The VIPs of one engine and the connections they have.
#[derive(Debug)]
pub struct Services {
    pub(super) vips: Vec<VipEntry>,
    /// Counters per VIP slot (published with the others).
    pub(super) vip_counters: Vec<VipCounters>,
    /// VIP counter slots ever used (all are published: a removed VIP's
    /// open connections still count).
    pub(super) vip_slots_used: usize,
    /// The timeouts per VIP slot: the VIP's in effect, or for a removed
    /// VIP its last, which its open connections keep.
    pub(super) slot_timeouts: Vec<Timeouts>,
    /// Backend pools (this engine's view: its own counts).
    pub(super) pools: Vec<Pool>,
    /// Pool definitions whose new members found no place yet (all 64
    /// held by members still serving): taken again at each tick
    /// ([`Pool::place_waiting`]).
    waiting_pools: Vec<Pool>,
    pub(super) roles: Roles,
    pub(super) responder: Responder,
    /// Next source port tried for a backend connection.
    /// RFC 6056 §3.3.3 (algorithm 3): a backend connection's source port
    /// is `F(addresses, secret) + counter` over [`EPHEMERAL`], so each
    /// destination walks the whole range from its own, secret offset.
    pub(super) port_counter: u32,
    pub(super) port_secret: siphasher::sip::SipHasher24,
    /// Backend bytes on their way into a TLS record.
    pub(super) proxy_scratch: Vec<u8>,
    /// Plaintext buffers TLS connections gave back, for the next request.
    pub(super) tls_spare: super::tls::SpareBuffers,
    /// Backend connects in progress, soonest given up first (a connect
    /// that completed stays until its time comes, and is passed over then:
    /// each tick looks only at those due).
    pub(super) connecting: std::collections::BinaryHeap<super::proxy::ConnectDeadline>,
    /// TLS connections whose handshake input waits for the next iteration
    /// (and the list being worked through).
    deferred: Vec<ConnId>,
    deferred_scratch: Vec<ConnId>,
    /// TLS handshake time per iteration, and what is left of it.
    budget: HandshakeBudget,
    /// Which members this engine health-checks (all without a share).
    pub(super) health_share: Option<HealthShare>,
    /// Health news the relay's queue had no room for: sent at the next
    /// checks' turn (the latest per member).
    pub(super) health_unsent: std::collections::VecDeque<crate::app::health::HealthNews>,
    /// This engine's index: which copy of each VIP's TLS configuration
    /// it serves from.
    pub(super) engine_index: usize,
    /// Version of the snapshot in use (0: set up by calls, not snapshots).
    pub(super) snapshot_version: u64,
    /// Where ended client connections are recorded (`[log] connections`).
    pub(super) conn_log: Option<std::sync::Arc<super::conn_log::ConnLogQueues>>,
    /// The ends it takes (`[log] connection_ends`).
    pub(super) conn_log_ends: super::conn_log::EndSet,
    /// Dates those records.
    pub(super) wall: super::conn_log::WallClock,
}

impl Services {
    /// `handshake_budget`: TLS handshake work (signatures, key
    /// exchanges) per loop iteration ([`HandshakeBudget`]).
    pub fn new(handshake_budget: Duration) -> Self {
        Self {
            vips: Vec::new(),
            vip_counters: vec![VipCounters::default(); MAX_VIPS],
            vip_slots_used: 0,
            slot_timeouts: vec![Timeouts::default(); MAX_VIPS],
            pools: Vec::new(),
            waiting_pools: Vec::new(),
            roles: Roles::default(),
            responder: Responder::new(),
            port_counter: 0,
            port_secret: {
                use std::hash::{BuildHasher, Hasher};
                let seed = std::collections::hash_map::RandomState::new();
                let (k0, k1) = (seed.build_hasher().finish(), seed.hash_one(1u8));
                siphasher::sip::SipHasher24::new_with_keys(k0, k1)
            },
            proxy_scratch: vec![0; crypto::record::MAX_PLAINTEXT],
            tls_spare: super::tls::SpareBuffers::default(),
            connecting: std::collections::BinaryHeap::with_capacity(256),
            deferred: Vec::with_capacity(256),
            deferred_scratch: Vec::with_capacity(256),
            budget: HandshakeBudget::new(handshake_budget),
            health_share: None,
            health_unsent: std::collections::VecDeque::new(),
            engine_index: 0,
            snapshot_version: 0,
            conn_log: None,
            conn_log_ends: super::conn_log::EndSet::ALL,
            wall: super::conn_log::WallClock::default(),
        }
    }

    /// Reserves the roles table for an engine of at most `max_conns`
    /// connections, so that it never grows inside the engine loop.
    pub fn reserve_connections(&mut self, max_conns: usize) {
        self.roles.reserve(crate::tcp::slots_for(max_conns));
    }

    /// Adds a VIP on `addr:port`: the responder, behind TLS with `tls`,
    /// or forwarded to pool `pool`.
    pub fn add_vip(&mut self, addr: IpAddr, port: u16, tls: Option<TlsConfig>, pool: Option<u16>) {
        let slot = self.vips.len().min(MAX_VIPS - 1) as u16;
        self.vip_slots_used = self.vip_slots_used.max(usize::from(slot) + 1);
        self.vips.push(VipEntry {
            slot,
            addr,
            port,
            enabled: true,
            tls,
            pool,
            routes: Vec::new(),
            allow: None,
            timeouts: Timeouts::default(),
            limits: crate::tcp::ListenLimits::default(),
        });
    }

    /// Routes TLS clients of VIP `addr:port` asking for a name to a pool
    /// (`(SNI, pool index)`), as a snapshot's VIP routes do.
    pub fn set_vip_routes(&mut self, addr: impl Into<IpAddr>, port: u16, routes: &[(&str, u16)]) {
        let addr = addr.into();
        for v in self
            .vips
            .iter_mut()
            .filter(|v| v.addr == addr && v.port == port)
        {
            v.routes = routes.iter().map(|&(n, p)| (n.into(), p)).collect();
        }
    }

    /// Sets how long clients of VIP `addr:port` may take.
    pub fn set_vip_timeouts(&mut self, addr: impl Into<IpAddr>, port: u16, timeouts: Timeouts) {
        let addr = addr.into();
        for v in self
            .vips
            .iter_mut()
            .filter(|v| v.addr == addr && v.port == port)
        {
            v.timeouts = timeouts;
            if let Some(t) = self.slot_timeouts.get_mut(usize::from(v.slot)) {
                *t = timeouts;
            }
        }
    }

    /// Sets what VIP `addr:port` admits; returns its counter slot (`None`
    /// when no VIP is there).
    pub fn set_vip_limits(
        &mut self,
        addr: IpAddr,
        port: u16,
        limits: crate::tcp::ListenLimits,
    ) -> Option<u16> {
        let v = self
            .vips
            .iter_mut()
            .find(|v| v.addr == addr && v.port == port)?;
        v.limits = limits;
        Some(v.slot)
    }

    /// Adds a backend pool; returns its index.
    pub fn add_pool(&mut self, pool: Pool) -> usize {
        self.pools.push(pool);
        self.pools.len() - 1
    }

    /// Which of dpd's engines this is (its copy of each VIP's TLS
    /// configuration, [`crate::app::config::TlsCopies`]).
    pub fn set_engine_index(&mut self, index: usize) {
        self.engine_index = index;
    }

    /// Where ended client connections are recorded (`None`: nowhere).
    pub fn set_conn_log(&mut self, queues: Option<std::sync::Arc<super::conn_log::ConnLogQueues>>) {
        self.conn_log = queues;
    }

    /// Which ends are recorded (the rest are not built at all).
    pub fn set_conn_log_ends(&mut self, ends: super::conn_log::EndSet) {
        self.conn_log_ends = ends;
    }

    /// Splits health checks with the other engines: this one checks only
    /// its share of members and reports their changes; the others' reach
    /// it as health news.
    pub fn set_health_share(&mut self, share: HealthShare) {
        self.health_share = Some(share);
    }

    /// Counters of VIP slot `slot`.
    pub fn slot_counters(&self, slot: u16) -> VipCounters {
        self.vip_counters
            .get(usize::from(slot))
            .copied()
            .unwrap_or_default()
    }

    pub fn snapshot_version(&self) -> u64 {
        self.snapshot_version
    }

    /// The pools, with this engine's counts.
    pub fn pools(&self) -> &[Pool] {
        &self.pools
    }

    /// Every connection's role.
    pub fn roles(&self) -> &Roles {
        &self.roles
    }

    /// TLS connections, and the bytes their buffers hold now (0 when all
    /// are idle: buffers are given back as they empty).
    pub fn tls_buffers(&self) -> (usize, usize) {
        self.roles
            .iter()
            .filter_map(|e| e.role.tls())
            .fold((0, 0), |(n, b), t| (n + 1, b + t.buffered()))
    }

    /// The responder's counters.
    pub fn responder(&self) -> &Responder {
        &self.responder
    }

    /// Gives an accepted connection its role for its VIP; false when it
    /// was refused (or is already gone).
    fn accept(&mut self, cx: &mut Cx<'_>, id: ConnId) -> bool {
        // Accepted and released in one burst (the handshake's ACK, then an
        // RST; its `Closed` event follows in this batch): set up only where
        // it left bytes for a backend, a plain proxied VIP's client.
        let (key, live) = match cx.tcp.key(id) {
            Some(key) => (key, true),
            None => match cx.tcp.released_key(id) {
                Some(key) => (key, false),
                None => return false,
            },
        };
        let Some(vip) = vip_taking(&self.vips, key.local_addr()) else {
            // Its VIP went away between the SYN and the handshake's end.
            cx.tcp.abort(id);
            return false;
        };
        if !live && (vip.tls.is_some() || vip.pool.is_none()) {
            return false; // no TLS handshake or request it could answer
        }
        let (tls, pool, slot, timeouts) = (vip.tls.clone(), vip.pool, vip.slot, vip.timeouts);
        let role = match (tls, pool) {
            (None, None) => Role::Responder(Session::default()),
            (None, Some(p)) => Role::Client(Box::new(ProxyLink::new(Side::Client, p))),
            (Some(cfg), pool) => match TlsConn::new(&cfg) {
                Ok(conn) => Role::Tls(Box::new(TlsRole {
                    conn,
                    inner: match pool {
                        None => Inner::Responder(Session::default()),
                        Some(p) => Inner::Proxy(ProxyLink::new(Side::Client, p)),
                    },
                })),
                Err(_) => {
                    self.vip_counters[usize::from(slot)].tls_failures += 1;
                    count_failure(cx, crypto::session::Failure::Other);
                    cx.tcp.abort(id);
                    return false;
                }
            },
        };
        let vc = &mut self.vip_counters[usize::from(slot)];
        vc.connections += 1;
        vc.active += 1;
        let plain_proxy = matches!(role, Role::Client(_));
        self.roles.insert(id, Some(slot), role);
        // Its first deadline is set once the event is handled (on_event).
        if let (Some(idle), true) = (timeouts.idle, live) {
            cx.tcp.set_idle_timeout(id, idle, cx.now);
        }
        if live {
            cx.tcp.set_send_timeout(id, timeouts.send, cx.now);
        }
        if plain_proxy {
            self.connect_backend(cx, id);
        }
        true
    }

    /// A connection is gone: its counts, and what its role leaves behind
    /// (the other side of a proxied pair, a health check's result).
    fn closed(&mut self, cx: &mut Cx<'_>, mut entry: Entry, reason: CloseReason) {
        if self.conn_log.is_some() && entry.vip.is_some() {
            self.log_end(cx, &mut entry, reason);
        }
        match reason {
            CloseReason::Deadline => self.count_deadline(cx, entry.vip, entry.wait),
            // A backend's (it has no VIP) is no client's: not counted as
            // one (its client ends as after a backend's reset).
            CloseReason::SendTimeout if entry.vip.is_some() => {
                self.count_send_timeout(cx, entry.vip);
            }
            _ => {}
        }
        if let Some(slot) = entry.vip {
            let vc = &mut self.vip_counters[usize::from(slot)];
            vc.active = vc.active.saturating_sub(1);
        }
        match entry.role {
            Role::Responder(_) => {}
            Role::Tls(mut t) => {
                // A proxied client's decrypted bytes may still go to its
                // backend: a carry charges them again (`proxy.rs`).
                cx.tcp.buffers_mut().refund(t.conn.take_charge());
                let ours = reason.is_ours()
                    || matches!(reason, CloseReason::Deadline | CloseReason::SendTimeout);
                if t.conn.is_handshaking() && !t.conn.failed() && !ours {
                    cx.counters.tls_abandoned += 1;
                }
                let TlsRole { conn, mut inner } = *t;
                if let Inner::Proxy(link) = &mut inner {
                    proxy::drop_carry(cx.tcp, link);
                    self.proxy_closed(cx, entry.id, link, reason, Some(conn));
                }
            }
            Role::Client(mut link) | Role::Backend(mut link) => {
                proxy::drop_carry(cx.tcp, &mut link);
                self.proxy_closed(cx, entry.id, &link, reason, None);
            }
            // A check cut by dpd's stop says nothing of its member.
            Role::Probe(_) if reason == CloseReason::Stopped => {}
            Role::Probe(probe) => self.probe_closed(cx, entry.id, probe),
        }
    }

    /// Drives one TLS connection (with its backend, when proxied) and
    /// counts what happened.
    pub(super) fn drive_tls(&mut self, cx: &mut Cx<'_>, id: ConnId, peer_closed: bool) {
        let backend = self
            .roles
            .get(id)
            .and_then(|e| e.role.link())
            .and_then(|l| proxy::peer(cx.tcp, l));
        let (entry, backend) = match backend {
            Some(b) => match self.roles.pair_mut(id, b) {
                Some((e, be)) => (e, be.role.link_mut().map(|l| (b, l))),
                None => return,
            },
            None => match self.roles.get_mut(id) {
                Some(e) => (e, None),
                None => return,
            },
        };
        let Role::Tls(t) = &mut entry.role else {
            return;
        };
        let o = tls::drive(
            cx.tcp,
            id,
            t,
            backend,
            &mut self.responder,
            peer_closed,
            &mut self.budget,
            &mut self.proxy_scratch,
            &mut self.tls_spare,
        );
        t.conn.settle_charge(cx.tcp.buffers_mut());
        let slot = entry.vip;
        if o.negotiated.is_some() {
            t.conn.handshake_done = Some(cx.now);
        }
        // A TLS VIP with a pool: its backend connection opens once the
        // handshake is done.
        let wants_backend =
            o.negotiated.is_some() && matches!(&t.inner, Inner::Proxy(l) if l.peer.is_none());
        if o.deferred && !t.conn.queued {
            t.conn.queued = true;
            self.deferred.push(id);
        }
        if o.deferred {
            // Its answer (the server's flight, or the response after the
            // client's Finished) carries the ACK when its turn comes.
            cx.tcp.hold_ack(id, cx.now);
        }
        if wants_backend {
            let sni = t.conn.session().server_name();
            if let Some(pool) = slot.and_then(|s| routed_pool(&self.vips, s, sni?)) {
                if let Inner::Proxy(link) = &mut t.inner {
                    link.pool = pool;
                }
            }
            self.connect_backend(cx, id);
        }
        if let Some(vc) = slot.and_then(|s| self.vip_counters.get_mut(usize::from(s))) {
            vc.tls_handshakes += u64::from(o.negotiated.is_some());
            vc.tls_failures += u64::from(o.failure.is_some());
        }
        let c = &mut *cx.counters;
        if let Some(n) = o.negotiated {
            c.tls_handshakes += 1;
            c.tls_versions[n.version] += 1;
            c.tls_suites[n.suite] += 1;
            c.tls_groups[n.group] += 1;
            c.tls_key_types[n.key] += 1;
            c.tls_resumed += u64::from(n.resumed);
        }
        c.tls_key_updates += u64::from(o.key_updates);
        c.tls_renegotiations_refused += u64::from(o.renegotiations_refused);
        if let Some(f) = o.failure {
            count_failure(cx, f);
        }
        if o.deferred {
            cx.counters.tls_handshakes_deferred += 1;
        }
    }

    /// What the connection of `entry` is (`dpctl conn list`, the
    /// connection log).
    pub(super) fn describe_entry(&self, entry: &Entry) -> super::ConnUse {
        let waits_for = match entry.wait {
            Wait::Handshake => "handshake",
            Wait::Request(_) => "request",
            Wait::Linger => "close",
            Wait::Nothing => "",
        };
        let (role, link) = match &entry.role {
            Role::Responder(_) => ("http", None),
            Role::Client(link) => ("proxy", Some(&**link)),
            Role::Tls(t) => match &t.inner {
                Inner::Responder(_) => ("tls", None),
                Inner::Proxy(link) => ("tls-proxy", Some(link)),
            },
            Role::Backend(_) | Role::Probe(_) => ("", None),
        };
        let mut described = super::ConnUse {
            role,
            waits_for,
            ..super::ConnUse::default()
        };
        if let Some(link) = link {
            described.to_backend = link.forwarded;
            if let Some((backend, key)) = link.peer {
                described.backend = Some(key.remote_addr());
                let back = self.roles.get(backend).and_then(|e| e.role.link());
                described.to_client = back.map_or(0, |b| b.forwarded);
            }
        }
        described
    }

    /// A plain proxied connection's event (client or backend side).
    fn on_proxied(&mut self, cx: &mut Cx<'_>, id: ConnId, ev: Event) {
        let Some(entry) = self.roles.get_mut(id) else {
            return;
        };
        let Some(link) = entry.role.link_mut() else {
            return;
        };
        if matches!(ev, Event::PeerClosed(_)) {
            link.fin_received = true;
        }
        let side = link.side;
        if let Event::Connected(b) = ev {
            link.connected = true;
            self.backend_connected(cx, b);
        }
        let Some(other) = self
            .roles
            .get(id)
            .and_then(|e| e.role.link())
            .and_then(|l| proxy::peer(cx.tcp, l))
        else {
            match side {
                Side::Backend => self.carry_on(cx, id),
                Side::Client => {
                    if let Some(link) = self.roles.get_mut(id).and_then(|e| e.role.link_mut()) {
                        proxy::deliver_rest(
                            cx.tcp,
                            (id, link),
                            ClientStream::Plain,
                            &mut self.proxy_scratch,
                        );
                    }
                }
            }
            return;
        };
        // A backend whose client speaks TLS: the client's side does the
        // moving.
        if side == Side::Backend
            && self
                .roles
                .get(other)
                .is_some_and(|e| matches!(e.role, Role::Tls(_)))
        {
            self.drive_tls(cx, other, false);
            return;
        }
        let (client, backend) = match side {
            Side::Client => (id, other),
            Side::Backend => (other, id),
        };
        if let Some((c, b)) = self.roles.pair_mut(client, backend) {
            if let (Some(lc), Some(lb)) = (c.role.link_mut(), b.role.link_mut()) {
                let (from, to) = ((client, lc), (backend, lb));
                proxy::pump(
                    cx.tcp,
                    from,
                    ClientStream::Plain,
                    to,
                    &mut self.proxy_scratch,
                );
            }
        }
    }
}

/// Counts a TLS failure by reason.
pub(super) fn count_failure(cx: &mut Cx<'_>, f: crypto::session::Failure) {
    cx.counters.tls_failures += 1;
    cx.counters.tls_failure_reasons[f.index()] += 1;
}

impl Application for Services {
    fn resume(&mut self, cx: &mut Cx<'_>) {
        self.responder
            .set_clock(self.wall.unix_ns(cx.now) / 1_000_000_000);
        // Handshakes put off last time go first.
        self.budget.refill();
        std::mem::swap(&mut self.deferred, &mut self.deferred_scratch);
        for i in 0..self.deferred_scratch.len() {
            let id = self.deferred_scratch[i];
            if !self.budget.allows() {
                // Still no room: the rest keep their place in the queue.
                self.deferred.push(id);
                continue;
            }
            let queued = match self.roles.get_mut(id).map(|e| &mut e.role) {
                Some(Role::Tls(t)) => {
                    t.conn.queued = false;
                    true
                }
                _ => false,
            };
            if queued {
                self.drive_tls(cx, id, false);
                self.settle_deadline(cx, id);
            }
        }
        self.deferred_scratch.clear();
    }

    fn pending(&self) -> usize {
        self.deferred.len()
    }

    fn on_event(&mut self, cx: &mut Cx<'_>, ev: Event) {
        let id = match ev {
            Event::Closed(id, reason) => {
                match self.roles.remove(id) {
                    Some(entry) => self.closed(cx, entry, reason),
                    // Accepted and ended in one burst, or refused at once.
                    None if self.conn_log.is_some() => self.log_unserved_end(cx, id, reason),
                    None => {}
                }
                return;
            }
            Event::Accepted(id) => {
                if !self.accept(cx, id) {
                    return;
                }
                id
            }
            Event::Readable(id)
            | Event::Writable(id)
            | Event::PeerClosed(id)
            | Event::Connected(id) => id,
        };
        let peer_closed = matches!(ev, Event::PeerClosed(_));
        let Some(entry) = self.roles.get_mut(id) else {
            return;
        };
        match &mut entry.role {
            Role::Responder(http) => self.responder.on_event(cx.tcp, http, ev),
            Role::Tls(_) => self.drive_tls(cx, id, peer_closed),
            Role::Client(_) | Role::Backend(_) => self.on_proxied(cx, id, ev),
            Role::Probe(probe) => {
                let probe = *probe;
                self.on_probe(cx, id, probe, ev);
            }
        }
        self.settle_deadline(cx, id);
    }

    fn on_tick(&mut self, cx: &mut Cx<'_>) {
        self.run_health(cx);
        self.expire_connects(cx);
        if !self.waiting_pools.is_empty() {
            Pool::place_waiting(&mut self.pools, &mut self.waiting_pools);
        }
    }

    /// Open connections keep what they started with (their TLS
    /// configuration; their pool and member, which stay marked retired or
    /// removed while used).
    fn apply(&mut self, snap: &Snapshot) {
        for p in &mut self.pools {
            p.retired = true;
        }
        // This snapshot's definitions supersede any still waiting.
        self.waiting_pools.clear();
        for next in &snap.pools {
            match self.pools.iter().position(|p| p.name == next.name) {
                Some(i) => {
                    if !self.pools[i].update_from(next) {
                        log::warn!(
                            "pool {}: 64 members with open connections; a new member waits for a removed one's last connection to end",
                            next.name
                        );
                        self.waiting_pools.push(next.clone());
                    }
                }
                None => self.pools.push(next.clone()),
            }
        }
        let pools = &self.pools;
        self.vips = snap
            .vips
            .iter()
            .map(|v| {
                let pool = v.pool.as_ref().map(|name| {
                    pools
                        .iter()
                        .position(|p| !p.retired && &p.name == name)
                        .and_then(|i| u16::try_from(i).ok())
                });
                // A pool it cannot name (never expected: validation finds
                // every VIP's pool, and 65,536 pools would be needed):
                // the VIP refuses connections rather than answer itself.
                let lost = matches!(pool, Some(None));
                if lost {
                    log::error!("vip {}: its pool cannot be used; SYNs get a reset", v.name);
                }
                let routes = v
                    .routes
                    .iter()
                    .filter_map(|(sni, name)| {
                        let i = pools.iter().position(|p| !p.retired && &p.name == name);
                        let i = i.and_then(|i| u16::try_from(i).ok());
                        if i.is_none() {
                            log::error!("vip {}: route {sni}'s pool cannot be used", v.name);
                        }
                        Some((sni.as_str().into(), i?))
                    })
                    .collect();
                VipEntry {
                    slot: v.slot.min(MAX_VIPS as u16 - 1),
                    addr: v.addr,
                    port: v.port,
                    enabled: v.enabled && !lost,
                    tls: v.tls.as_ref().map(|t| t.for_engine(self.engine_index)),
                    pool: pool.flatten(),
                    routes,
                    allow: v.allow.clone(),
                    timeouts: v.timeouts,
                    limits: v.limits,
                }
            })
            .collect();
        for v in &self.vips {
            if let Some(t) = self.slot_timeouts.get_mut(usize::from(v.slot)) {
                *t = v.timeouts;
            }
        }
        let used = self.vips.iter().map(|v| usize::from(v.slot) + 1).max();
        self.vip_slots_used = self.vip_slots_used.max(used.unwrap_or(0));
        self.snapshot_version = snap.version;
        self.conn_log.clone_from(&snap.conn_log);
        self.conn_log_ends = snap.conn_log_ends;
    }

    fn vips(&self) -> &[VipEntry] {
        &self.vips
    }

    fn pool_views(&self) -> Vec<PoolView> {
        self.pools
            .iter()
            .map(|p| PoolView {
                name: p.name.clone(),
                retired: p.retired,
                members: p
                    .members
                    .iter()
                    .map(|m| MemberView {
                        addr: m.addr,
                        removed: m.removed,
                        healthy: m.health.healthy,
                        proven: p.check.is_none() || m.health.proven,
                        active: m.active,
                        last_failure: m.health.last_failure,
                    })
                    .collect(),
            })
            .collect()
    }

    fn health_news(&mut self, news: &super::health::HealthNews) {
        self.take_news(news);
    }

    fn count(&self, c: &mut crate::stats::Counters) {
        c.http_requests = self.responder.counters.requests;
        c.config_version = self.snapshot_version;
    }

    fn vip_counters(&self) -> &[VipCounters] {
        &self.vip_counters[..self.vip_slots_used]
    }

    fn describe(&self, id: ConnId) -> super::ConnUse {
        self.roles
            .get(id)
            .map(|e| self.describe_entry(e))
            .unwrap_or_default()
    }

    fn count_refusals(&mut self, refused: &dyn Fn(u16) -> crate::tcp::Refusals) {
        for (slot, c) in (0..).zip(&mut self.vip_counters[..self.vip_slots_used]) {
            let r = refused(slot);
            c.refused_conn_limit = r.conn_limit;
            c.refused_source_rate = r.source_rate;
            c.refused_source_conns = r.source_conns;
            c.refused_denied = r.denied;
        }
    }
}

/// The pool a TLS client of VIP `slot` that asked for `sni` goes to, when
/// one of the VIP's routes names it: an exact name first, then a
/// wildcard (`*.example.com` for `api.example.com`, not for
/// `example.com` or `a.b.example.com`), without regard to case.
fn routed_pool(vips: &[VipEntry], slot: u16, sni: &str) -> Option<u16> {
    let routes = &vips.iter().find(|v| v.slot == slot)?.routes;
    let exact = routes.iter().find(|(n, _)| n.eq_ignore_ascii_case(sni));
    let wild = || {
        let (_, parent) = sni.split_once('.')?;
        routes.iter().find(|(n, _)| {
            n.strip_prefix("*.")
                .is_some_and(|d| d.eq_ignore_ascii_case(parent))
        })
    };
    exact.or_else(wild).map(|&(_, p)| p)
}

#[cfg(test)]
mod route_tests {
    use super::*;

    #[test]
    fn an_exact_route_comes_before_a_wildcard_of_one_label() {
        let mut vip = VipEntry {
            slot: 3,
            addr: IpAddr::from([10, 0, 0, 1]),
            port: 443,
            enabled: true,
            tls: None,
            pool: Some(0),
            routes: Vec::new(),
            allow: None,
            timeouts: Timeouts::default(),
            limits: crate::tcp::ListenLimits::default(),
        };
        vip.routes = vec![("*.example.com".into(), 1), ("API.example.com".into(), 2)];
        let vips = [vip];
        let route = |sni| routed_pool(&vips, 3, sni);
        assert_eq!(route("api.example.com"), Some(2));
        assert_eq!(route("www.Example.COM"), Some(1));
        assert_eq!(route("example.com"), None);
        assert_eq!(route("a.b.example.com"), None);
        assert_eq!(route("example.org"), None);
        assert_eq!(
            routed_pool(&vips, 4, "api.example.com"),
            None,
            "another VIP"
        );
    }
}
