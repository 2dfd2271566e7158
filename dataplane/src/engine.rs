//! The per-core engine: one run-to-completion loop over the queues it owns
//! (docs/architecture.md, "dataplane"), shaped like DPDK's l3fwd: burst receive, process
//! each frame to completion, buffer transmissions and drain them in bursts,
//! periodic timers, counters published for the control thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, SocketAddrV4};

use crate::app::health::{HealthKind, Probe};
use crate::app::pool::Pool;
use crate::app::proxy::{self, ProxyLink, Side};
use crate::app::proxy_protocol;
use crate::app::responder::Responder;
use crate::app::tls::{self, ConnApp, TlsConn};
use crate::net::toeplitz::{classify, FrameClass, RssSteering};
use crate::net::{set_destination, Interface, InterfaceConfig, Verdict};
use crate::port::{PacketBuf, Port};
use crate::snapshot::{
    Capture, ControlLink, FromEngine, HealthNews, HealthShare, MemberView, PoolView, Snapshot,
    ToEngine, MAX_VIPS,
};
use crate::stats::{Counters, DropReason, SharedCounters, VipCounters};
use crate::steer::{PortShare, SteerLink, Steered};
use crate::tcp::{CloseReason, ConnId, Event, FlowKey, TcpConfig, TcpEngine};
use crate::time::{Instant, TscClock};
use crypto::session::TlsConfig;

/// Tuning of the loop.
#[derive(Debug, Clone, Copy)]
pub struct EngineConfig {
    /// Most frames taken from a queue per receive call (l3fwd uses 32: big
    /// enough to amortise the driver call, small enough to stay in L1).
    pub burst: usize,
    /// Longest a frame waits in the transmit buffer while more replies are
    /// being batched with it.
    pub tx_drain: Duration,
    /// How often counters are published and timers run.
    pub tick: Duration,
    pub tcp: TcpConfig,
    /// Key of the TCP initial-sequence-number hash; `None` draws a random
    /// one (always, outside tests and fuzzing: predictable ISNs are an
    /// attack surface).
    pub isn_key: Option<u64>,
    /// Pause after 256 idle iterations in a row (`None`: never; the
    /// production setting — a dataplane core polls).
    pub idle_sleep: Option<Duration>,
    /// TLS handshake steps (each may cost a signature and a key exchange)
    /// per loop iteration; connections beyond it wait for the next one, so
    /// a burst of handshakes cannot starve established traffic.
    pub handshakes_per_poll: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            burst: 32,
            tx_drain: Duration::from_micros(100),
            tick: Duration::from_millis(1),
            tcp: TcpConfig::default(),
            isn_key: None,
            idle_sleep: None,
            handshakes_per_poll: 8,
        }
    }
}

#[derive(Debug)]
struct EnginePort<P: Port> {
    port: P,
    iface: Interface,
    tx: Vec<P::Buf>,
    /// When the oldest frame in `tx` was queued.
    tx_since: Option<Instant>,
    /// Frames waiting for a next hop's MAC: (next hop, frame, given up at).
    unresolved: Vec<(Ipv4Addr, P::Buf, Instant)>,
    /// The last receive burst came back short: the queue is drained.
    rx_drained: bool,
    /// A capture asked for by the control thread (`dpctl capture`).
    capture: Option<Capture>,
    /// Frames at the head of `tx` already captured (left by a short burst).
    tx_captured: usize,
    /// How this engine uses the port when engines share it.
    share: PortShare,
    /// With no TX queue of our own: the engine that sends for us.
    tx_via: Option<(TxVia<P::Buf>, u8)>,
    /// How received flows spread over the engines (source-port choice).
    steering: Option<RssSteering>,
}

/// The inbox of the engine that transmits for another.
#[derive(Debug)]
struct TxVia<B> {
    link: SteerLink<B>,
    to: u16,
}

impl<B> TxVia<B> {
    fn send_tx(&self, port: u8, buf: B) -> Result<(), Steered<B>> {
        self.link.send(self.to, Steered::Tx { port, buf })
    }
}

/// Most frames held per port while their next hop is resolved (Linux keeps
/// a few per neighbour too: `unres_qlen`).
const MAX_UNRESOLVED: usize = 16;
/// How long a frame waits for ARP before it is dropped.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);
/// Most frames waiting for the TX queue per port. Beyond it, TCP stops
/// producing (back-pressure, no self-inflicted loss) and other frames are
/// dropped as `tx_full`.
const MAX_TX_PENDING: usize = 256;

/// The connection an event is about.
fn ev_id(ev: Event) -> ConnId {
    match ev {
        Event::Accepted(id)
        | Event::Connected(id)
        | Event::Readable(id)
        | Event::Writable(id)
        | Event::PeerClosed(id)
        | Event::Closed(id, _) => id,
    }
}

/// Source ports of backend connections (Linux's default ephemeral range).
const EPHEMERAL: std::ops::Range<u16> = 32_768..61_000;

/// A VIP as the engine serves it (from the current snapshot).
#[derive(Debug)]
struct VipEntry {
    /// Index of its counters.
    slot: u16,
    addr: Ipv4Addr,
    port: u16,
    enabled: bool,
    tls: Option<TlsConfig>,
    /// Index in the engine's pools; `None`: the built-in responder.
    pool: Option<u16>,
}

/// One core's engine over its queues.
#[derive(Debug)]
pub struct Engine<P: Port> {
    cfg: EngineConfig,
    ports: Vec<EnginePort<P>>,
    rx: Vec<P::Buf>,
    counters: Counters,
    shared: Arc<SharedCounters>,
    next_tick: Instant,
    tcp: TcpEngine<ConnApp>,
    responder: Responder,
    /// The VIPs served.
    vips: Vec<VipEntry>,
    /// Counters per VIP slot (published with the others).
    vip_counters: Vec<VipCounters>,
    /// Rings to and from the control thread.
    control: Option<ControlLink>,
    /// Rings to the other engines, for ports steered in software.
    steer: Option<SteerLink<P::Buf>>,
    /// Which members this engine health-checks (all without one).
    health_share: Option<HealthShare>,
    /// Version of the snapshot in use (0: set up by calls, not snapshots).
    snapshot_version: u64,
    /// VIP counter slots ever used (all are published: a removed VIP's
    /// open connections still count).
    vip_slots_used: usize,
    /// Backend pools (this engine's view: its own counts).
    pools: Vec<Pool>,
    /// Next source port tried for a backend connection.
    next_port: u16,
    /// Backend bytes on their way into a TLS record.
    proxy_scratch: Vec<u8>,
    /// Backend connects in progress and when each is given up.
    connecting: Vec<(ConnId, FlowKey, Instant)>,
    events: Vec<Event>,
    /// Connections that just entered TIME-WAIT.
    time_wait: Vec<ConnId>,
    /// TLS connections whose handshake input waits for the next iteration
    /// (and the list being worked through).
    deferred: Vec<ConnId>,
    deferred_scratch: Vec<ConnId>,
}

impl<P: Port> Engine<P> {
    pub fn new(cfg: EngineConfig, shared: Arc<SharedCounters>) -> Self {
        Self {
            cfg,
            ports: Vec::new(),
            rx: Vec::with_capacity(cfg.burst),
            counters: Counters::default(),
            shared,
            next_tick: Instant::ZERO,
            tcp: TcpEngine::new(
                cfg.tcp,
                Instant::ZERO,
                cfg.isn_key
                    .unwrap_or_else(|| RandomState::new().build_hasher().finish()),
            ),
            responder: Responder::new(),
            vips: Vec::new(),
            vip_counters: vec![VipCounters::default(); MAX_VIPS],
            control: None,
            steer: None,
            health_share: None,
            snapshot_version: 0,
            vip_slots_used: 0,
            pools: Vec::new(),
            next_port: EPHEMERAL.start,
            proxy_scratch: vec![0; crypto::record::MAX_PLAINTEXT],
            connecting: Vec::with_capacity(256),
            events: Vec::with_capacity(256),
            time_wait: Vec::with_capacity(256),
            deferred: Vec::with_capacity(256),
            deferred_scratch: Vec::with_capacity(256),
        }
    }

    /// Serves the built-in HTTP responder on `addr:port` (a VIP). An
    /// address that is not a port's own becomes an extra address of the port
    /// whose subnet holds it (answered in ARP and ICMP).
    pub fn listen(&mut self, addr: Ipv4Addr, port: u16) {
        self.add_vip(addr, port, None, None);
    }

    fn add_vip(&mut self, addr: Ipv4Addr, port: u16, tls: Option<TlsConfig>, pool: Option<u16>) {
        self.claim_address(addr);
        self.tcp.listen(addr, port);
        let slot = self.vips.len().min(MAX_VIPS - 1) as u16;
        self.vip_slots_used = self.vip_slots_used.max(usize::from(slot) + 1);
        self.vips.push(VipEntry {
            slot,
            addr,
            port,
            enabled: true,
            tls,
            pool,
        });
    }

    /// Makes `addr` an extra address of the port whose subnet holds it.
    fn claim_address(&mut self, addr: Ipv4Addr) {
        if !self.ports.iter().any(|ep| ep.iface.is_local(addr)) {
            if let Some(ep) = self
                .ports
                .iter_mut()
                .find(|ep| ep.iface.next_hop(addr) == Some(addr))
            {
                ep.iface.add_address(addr);
            }
        }
    }

    /// Serves the responder behind TLS on `addr:port`.
    pub fn listen_tls(&mut self, addr: Ipv4Addr, port: u16, config: TlsConfig) {
        self.add_vip(addr, port, Some(config), None);
    }

    /// Adds a backend pool; returns its index for [`Engine::listen_pool`].
    pub fn add_pool(&mut self, pool: Pool) -> usize {
        self.pools.push(pool);
        self.pools.len() - 1
    }

    /// Forwards connections to `addr:port` (decrypted first when `tls`) to
    /// members of pool `pool`.
    pub fn listen_pool(&mut self, addr: Ipv4Addr, port: u16, tls: Option<TlsConfig>, pool: usize) {
        self.add_vip(addr, port, tls, Some(pool as u16));
    }

    /// Software RSS: how this engine shares each port (by index) with the
    /// others, and the rings between them (see [`crate::steer`]).
    ///
    /// # Panics
    /// When `shares` does not cover every port.
    pub fn set_steering(&mut self, link: SteerLink<P::Buf>, shares: &[PortShare]) {
        assert_eq!(shares.len(), self.ports.len(), "one share per port");
        for (ep, share) in self.ports.iter_mut().zip(shares) {
            ep.share = *share;
            if share.steer {
                ep.steering = Some(link.steering());
            }
            ep.tx_via = share.tx_via.map(|to| {
                (
                    TxVia {
                        link: link.clone(),
                        to,
                    },
                    0,
                )
            });
        }
        for (i, ep) in self.ports.iter_mut().enumerate() {
            if let Some((_, port)) = &mut ep.tx_via {
                *port = i as u8;
            }
        }
        self.steer = Some(link);
    }

    /// Splits health checks with the other engines: this one checks only
    /// its share of members and reports their changes; the others' reach it
    /// as [`ToEngine::Health`].
    pub fn set_health_share(&mut self, share: HealthShare) {
        self.health_share = Some(share);
    }

    /// Rings to the control thread, read at every tick.
    pub fn set_control(&mut self, link: ControlLink) {
        self.control = Some(link);
    }

    /// Counters of VIP slot `slot`.
    pub fn vip_counters(&self, slot: u16) -> VipCounters {
        self.vip_counters[usize::from(slot)]
    }

    /// Switches to `snap` between packets. Listeners, VIP addresses and
    /// pools follow it; open connections keep what they started with (their
    /// TLS configuration; their pool and member, which stay in the engine
    /// marked retired or removed while used).
    pub fn apply(&mut self, snap: &Snapshot) {
        for p in &mut self.pools {
            p.retired = true;
        }
        for next in &snap.pools {
            match self.pools.iter().position(|p| p.name == next.name) {
                Some(i) => {
                    if !self.pools[i].update_from(next) {
                        log::warn!(
                            "pool {}: 64 members with open connections; a new member waits",
                            next.name
                        );
                    }
                }
                None => self.pools.push(next.clone()),
            }
        }
        self.vips = snap
            .vips
            .iter()
            .map(|v| VipEntry {
                slot: v.slot.min(MAX_VIPS as u16 - 1),
                addr: v.addr,
                port: v.port,
                enabled: v.enabled,
                tls: v.tls.clone(),
                pool: v.pool.as_ref().and_then(|name| {
                    self.pools
                        .iter()
                        .position(|p| !p.retired && &p.name == name)
                        .map(|i| i as u16)
                }),
            })
            .collect();
        let vips = &self.vips;
        self.tcp
            .retain_listeners(|a, p| vips.iter().any(|v| v.enabled && v.addr == a && v.port == p));
        for ep in &mut self.ports {
            ep.iface
                .retain_addresses(|a| vips.iter().any(|v| v.addr == *a));
        }
        for i in 0..self.vips.len() {
            let (addr, port, enabled) =
                (self.vips[i].addr, self.vips[i].port, self.vips[i].enabled);
            // Disabled VIPs keep their address (ARP, ICMP) and reset SYNs.
            self.claim_address(addr);
            if enabled {
                self.tcp.listen(addr, port);
            }
        }
        let used = self.vips.iter().map(|v| usize::from(v.slot) + 1).max();
        self.vip_slots_used = self.vip_slots_used.max(used.unwrap_or(0));
        self.snapshot_version = snap.version;
    }

    /// Handles the control thread's messages (at a tick, between packets).
    fn control_messages(&mut self) {
        // Taken out and put back (a clone would touch the shared `Arc`
        // counts every tick).
        let Some(link) = self.control.take() else {
            return;
        };
        while let Some(msg) = link.to_engine.pop() {
            let reply = match msg {
                ToEngine::Apply(snap) => {
                    self.apply(&snap);
                    // The version is visible in the counters before the
                    // control thread hears of it.
                    self.publish();
                    FromEngine::Applied {
                        engine: link.engine,
                        version: snap.version,
                    }
                }
                ToEngine::Pools => FromEngine::Pools {
                    engine: link.engine,
                    pools: self.pool_views(),
                },
                ToEngine::Capture { port, capture } => {
                    if let Some(ep) = self.ports.get_mut(port) {
                        ep.capture = Some(capture);
                        ep.tx_captured = 0;
                    }
                    continue;
                }
                ToEngine::Health(news) => {
                    self.health_news(&news);
                    continue;
                }
            };
            // The control thread waits for replies one request at a time:
            // the ring has room.
            let _ = link.from_engines.push(reply);
        }
        self.control = Some(link);
    }

    /// Another engine found a member up or down.
    fn health_news(&mut self, news: &HealthNews) {
        let member = self
            .pools
            .iter_mut()
            .filter(|p| !p.retired && p.name == news.pool)
            .flat_map(|p| p.members.iter_mut())
            .find(|m| !m.removed && m.addr == news.addr);
        if let Some(m) = member {
            m.health.healthy = news.up;
        }
    }

    /// The pools as this engine sees them.
    pub fn pool_views(&self) -> Vec<PoolView> {
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
                        active: m.active,
                    })
                    .collect(),
            })
            .collect()
    }

    /// The pools, with this engine's counts.
    pub fn pools(&self) -> &[Pool] {
        &self.pools
    }

    pub fn tcp(&self) -> &TcpEngine<ConnApp> {
        &self.tcp
    }

    /// TLS connections, and the bytes their buffers hold now (0 when all
    /// are idle: buffers are given back as they empty).
    pub fn tls_buffers(&self) -> (usize, usize) {
        self.tcp
            .apps()
            .filter_map(|a| a.tls.as_ref())
            .fold((0, 0), |(n, b), t| (n + 1, b + t.buffered()))
    }

    /// The responder's counters.
    pub fn responder(&self) -> &Responder {
        &self.responder
    }

    /// Adds a port (one queue pair) with its interface addresses. The
    /// interface MAC is the port's.
    pub fn add_port(&mut self, port: P, mut iface: InterfaceConfig) {
        iface.mac = port.mac();
        self.ports.push(EnginePort {
            port,
            iface: Interface::new(iface),
            tx: Vec::with_capacity(2 * self.cfg.burst),
            tx_since: None,
            unresolved: Vec::with_capacity(MAX_UNRESOLVED),
            rx_drained: true,
            capture: None,
            tx_captured: 0,
            share: PortShare::OWN,
            tx_via: None,
            steering: None,
        });
        let ep = self.ports.last_mut().expect("just added");
        ep.steering = ep.port.rss_steering();
    }

    /// This engine's counters (up to date, unlike the published copy).
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The interface of port `i`.
    pub fn interface(&self, i: usize) -> &Interface {
        &self.ports[i].iface
    }

    /// The port `i`.
    pub fn port(&self, i: usize) -> &P {
        &self.ports[i].port
    }

    /// One loop iteration at time `now`; returns the frames it received.
    pub fn poll(&mut self, now: Instant) -> usize {
        let mut work = 0;
        let burst = self.cfg.burst;
        // Timers first, so what they queue (ARP probes) leaves with this
        // iteration's transmissions.
        if now >= self.next_tick {
            self.next_tick = now + self.cfg.tick;
            for ep in &mut self.ports {
                ep.iface.on_timer(now);
            }
            self.control_messages();
            self.run_health(now);
            self.expire_connects(now);
            self.publish();
        }
        for (i, ep) in self.ports.iter_mut().enumerate() {
            let n = if ep.share.rx {
                ep.port.rx_burst(now, &mut self.rx, burst)
            } else {
                0
            };
            work += n;
            ep.rx_drained = n < burst;
            for buf in self.rx.drain(..) {
                if let Some(c) = &ep.capture {
                    if !c.take(buf.data()) {
                        ep.capture = None;
                    }
                }
                let buf = match (&self.steer, ep.share.steer) {
                    (Some(link), true) => match steer(link, ep, i, buf, &mut self.counters) {
                        Some(b) => b,
                        None => continue, // another engine's flow
                    },
                    _ => buf,
                };
                receive(ep, buf, now, burst, &mut self.tcp, &mut self.counters);
            }
        }
        // Frames other engines passed on: their flows received elsewhere,
        // and transmissions for engines without a queue of their own.
        if let Some(link) = &self.steer {
            for _ in 0..crate::steer::INBOX_FRAMES {
                let Some(msg) = link.recv() else { break };
                work += 1;
                match msg {
                    Steered::Rx { port, buf } => {
                        let ep = &mut self.ports[usize::from(port)];
                        receive(ep, buf, now, burst, &mut self.tcp, &mut self.counters);
                    }
                    Steered::Tx { port, buf } => {
                        let ep = &mut self.ports[usize::from(port)];
                        queue(ep, buf, Verdict::Transmit, now, burst, &mut self.counters);
                    }
                }
            }
        }
        for ep in &mut self.ports {
            if !ep.unresolved.is_empty() {
                release_resolved(ep, now, &mut self.counters);
            }
        }

        // Transport and application: timers, events, then what they send.
        // Handshakes put off last time go first.
        self.tcp.poll_timers(now);
        let mut budget = self.cfg.handshakes_per_poll;
        std::mem::swap(&mut self.deferred, &mut self.deferred_scratch);
        for i in 0..self.deferred_scratch.len() {
            let id = self.deferred_scratch[i];
            if budget == 0 {
                // Still no room: the rest keep their place in the queue.
                self.deferred.push(id);
                continue;
            }
            if let Some(t) = self.tcp.app(id).and_then(|a| a.tls.as_mut()) {
                t.queued = false;
                self.drive_tls(now, id, false, &mut budget);
            }
        }
        self.deferred_scratch.clear();
        self.tcp.drain_events(&mut self.events);
        self.tcp.drain_time_wait(&mut self.time_wait);
        for i in 0..self.time_wait.len() {
            self.entered_time_wait(self.time_wait[i]);
        }
        self.time_wait.clear();
        let mut events = std::mem::take(&mut self.events);
        for ev in events.drain(..) {
            let id = match ev {
                Event::Accepted(id)
                | Event::Readable(id)
                | Event::Writable(id)
                | Event::PeerClosed(id)
                | Event::Connected(id) => id,
                Event::Closed(_, reason) => {
                    // One app per Closed event, in order.
                    if let Some(app) = self.tcp.take_closed_app() {
                        if app
                            .tls
                            .as_deref()
                            .is_some_and(|t| t.is_handshaking() && !t.failed())
                        {
                            self.counters.tls_abandoned += 1;
                        }
                        if let Some(slot) = app.vip {
                            let vc = &mut self.vip_counters[usize::from(slot)];
                            vc.active = vc.active.saturating_sub(1);
                        }
                        if let Some(link) = app.proxy {
                            self.proxy_closed(now, &link, reason);
                        }
                        if let Some(probe) = app.probe {
                            let (p, m) = (usize::from(probe.pool), usize::from(probe.member));
                            let open = self.pools[p].members[m]
                                .health
                                .probe
                                .is_some_and(|(pid, _, _)| pid == ev_id(ev));
                            if open {
                                self.health_result(p, m, false, "connection failed");
                            }
                        }
                    }
                    continue;
                }
            };
            if let Event::Accepted(id) = ev {
                if !self.accept(now, id) {
                    continue;
                }
            }
            let Some(app) = self.tcp.app(id) else {
                continue;
            };
            if let Some(probe) = app.probe {
                self.on_probe(id, probe, ev);
                continue;
            }
            let peer_closed = matches!(ev, Event::PeerClosed(_));
            match (app.tls.is_some(), app.proxy.as_deref_mut()) {
                (true, _) => self.drive_tls(now, id, peer_closed, &mut budget),
                (false, Some(link)) => {
                    if peer_closed {
                        link.fin_received = true;
                    }
                    if matches!(ev, Event::Connected(_)) {
                        link.connected = true;
                    }
                    let backend_of_tls = link.side == Side::Backend;
                    if let Event::Connected(b) = ev {
                        self.backend_connected(b);
                    }
                    // A backend whose client speaks TLS: the client's side
                    // does the moving.
                    let tls_client = backend_of_tls
                        .then(|| proxy::peer(&mut self.tcp, id))
                        .flatten()
                        .filter(|&c| self.tcp.app(c).is_some_and(|a| a.tls.is_some()));
                    match tls_client {
                        Some(c) => self.drive_tls(now, c, false, &mut budget),
                        None => proxy::pump_plain(&mut self.tcp, id),
                    }
                }
                (false, None) => self.responder.on_event(&mut self.tcp, ev),
            }
        }
        self.events = events;
        // Deferred handshakes keep the loop busy until they are done.
        work += self.deferred.len();
        let (ports, counters) = (&mut self.ports, &mut self.counters);
        self.tcp.transmit(now, |seg| {
            let Some(ep) = ports.iter_mut().find(|ep| ep.iface.is_local(seg.src)) else {
                counters.drop(DropReason::NoRoute);
                return true;
            };
            let Some(mut buf) = ep.port.alloc() else {
                counters.drop(DropReason::NoBuffer);
                return false;
            };
            let verdict = ep.iface.write_tcp(now, seg, &mut buf);
            queue(ep, buf, verdict, now, burst, counters);
            true
        });

        for ep in &mut self.ports {
            while let Some(ip) = ep.iface.take_probe() {
                match ep.port.alloc() {
                    Some(mut buf) => {
                        ep.iface.write_arp_request(ip, &mut buf);
                        self.counters.arp_requests += 1;
                        ep.tx.push(buf);
                        ep.tx_since.get_or_insert(now);
                    }
                    None => self.counters.drop(DropReason::NoBuffer),
                }
            }
            // A short burst means the queue is drained: nothing more is coming
            // to batch with, so send now rather than wait for the deadline.
            let due = ep
                .tx_since
                .is_some_and(|t| now.saturating_since(t) >= self.cfg.tx_drain);
            if !ep.tx.is_empty() && (ep.rx_drained || due) {
                flush(ep, now, &mut self.counters);
            }
        }
        work
    }

    /// Drives one TLS connection and counts what happened.
    fn drive_tls(&mut self, now: Instant, id: ConnId, peer_closed: bool, budget: &mut u32) {
        let slot = self.tcp.app(id).and_then(|a| a.vip);
        let o = tls::drive(
            &mut self.tcp,
            id,
            &mut self.responder,
            peer_closed,
            budget,
            &mut self.proxy_scratch,
        );
        // A TLS VIP with a pool: its backend connection opens once the
        // handshake is done.
        if o.negotiated.is_some()
            && self
                .tcp
                .app(id)
                .is_some_and(|a| a.proxy.as_ref().is_some_and(|l| l.peer.is_none()))
        {
            self.connect_backend(now, id);
        }
        if let Some(slot) = slot {
            let vc = &mut self.vip_counters[usize::from(slot)];
            vc.tls_handshakes += u64::from(o.negotiated.is_some());
            vc.tls_failures += u64::from(o.failure.is_some());
        }
        let c = &mut self.counters;
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
            self.count_failure(f);
        }
        if o.deferred {
            self.counters.tls_handshakes_deferred += 1;
            if let Some(t) = self.tcp.app(id).and_then(|a| a.tls.as_mut()) {
                if !t.queued {
                    t.queued = true;
                    self.deferred.push(id);
                }
            }
        }
    }

    /// Sets up an accepted connection for its VIP; false when it was
    /// refused.
    fn accept(&mut self, now: Instant, id: ConnId) -> bool {
        let Some(key) = self.tcp.key(id) else {
            // Accepted and released in one burst (the handshake's ACK, then
            // an RST or a FIN-driven abort): nothing to set up, and its
            // `Closed` event follows in the same batch.
            return false;
        };
        let Some(vip) = self
            .vips
            .iter()
            .find(|v| v.addr == key.local && v.port == key.local_port)
        else {
            // Its VIP went away between the SYN and the handshake's end.
            self.tcp.abort(id);
            return false;
        };
        let (tls, pool, slot) = (vip.tls.clone(), vip.pool, vip.slot);
        let vc = &mut self.vip_counters[usize::from(slot)];
        vc.connections += 1;
        vc.active += 1;
        let Some(app) = self.tcp.app(id) else {
            return false;
        };
        app.vip = Some(slot);
        if let Some(cfg) = tls {
            match TlsConn::new(&cfg) {
                Ok(t) => app.tls = Some(Box::new(t)),
                Err(_) => {
                    self.vip_counters[usize::from(slot)].tls_failures += 1;
                    self.count_failure(crypto::session::Failure::Other);
                    self.tcp.abort(id);
                    return false;
                }
            }
        }
        if let Some(p) = pool {
            let Some(app) = self.tcp.app(id) else {
                return false;
            };
            let tls = app.tls.is_some();
            app.proxy = Some(Box::new(ProxyLink::new(Side::Client, p)));
            if !tls {
                self.connect_backend(now, id);
            }
        }
        true
    }

    /// Opens a backend connection for `client` to a member of its pool not
    /// tried yet; with none left, ends the client connection.
    fn connect_backend(&mut self, now: Instant, client: ConnId) {
        let Some(ckey) = self.tcp.key(client) else {
            return;
        };
        let Some(link) = self.tcp.app(client).and_then(|a| a.proxy.as_deref()) else {
            return;
        };
        let (p, tried) = (usize::from(link.pool), link.tried);
        let Some(m) = self.pools[p].pick(ckey.remote, tried) else {
            self.no_member(client);
            return;
        };
        let addr = self.pools[p].members[m].addr;
        let Some((b, bkey)) = self.open_to(now, addr) else {
            self.no_member(client);
            return;
        };
        self.counters.proxy_backend_connects += 1;
        self.pools[p].members[m].active += 1;
        self.connecting
            .push((b, bkey, now + self.pools[p].connect_timeout));
        let mut blink = ProxyLink::new(Side::Backend, p as u16);
        blink.member = Some(m as u16);
        blink.peer = Some((client, ckey));
        self.tcp.app(b).expect("just opened").proxy = Some(Box::new(blink));
        if let Some(l) = self.tcp.app(client).and_then(|a| a.proxy.as_deref_mut()) {
            l.member = Some(m as u16);
            l.peer = Some((b, bkey));
            l.tried |= 1 << m;
            l.connected = false;
        }
    }

    /// A backend connection is up: its client learns it, and the PROXY
    /// protocol header goes first when the pool asks for it.
    fn backend_connected(&mut self, b: ConnId) {
        let Some(c) = proxy::peer(&mut self.tcp, b) else {
            return;
        };
        let pool = self
            .tcp
            .app(c)
            .and_then(|a| a.proxy.as_deref_mut())
            .map(|l| {
                l.connected = true;
                usize::from(l.pool)
            });
        if !pool.is_some_and(|p| self.pools[p].proxy_protocol) {
            return;
        }
        let Some(key) = self.tcp.key(c) else { return };
        let client = SocketAddrV4::new(key.remote, key.remote_port);
        let vip = SocketAddrV4::new(key.local, key.local_port);
        let mut header = Vec::with_capacity(128);
        let app = self.tcp.app(c).expect("live");
        let tls = app.tls.as_deref().and_then(|t| {
            let n = t.session().negotiated()?;
            Some(proxy_protocol::TlsFacts {
                version: crypto::session::VERSIONS[n.version],
                cipher: crypto::session::SUITES[n.suite],
                sni: t.session().server_name(),
            })
        });
        proxy_protocol::header_v2(client, vip, tls, &mut header);
        self.tcp.send(b, &header);
    }

    /// Opens a connection to `addr` from the address of the port that
    /// reaches it and a free source port (4-tuples in use are skipped).
    ///
    /// With RSS over several queues, only source ports whose replies hash
    /// (software Toeplitz, the NIC's key and table) to this engine's queue
    /// are used; without, any.
    fn open_to(&mut self, now: Instant, addr: SocketAddrV4) -> Option<(ConnId, FlowKey)> {
        let (src, steering) = self
            .ports
            .iter()
            .find(|ep| ep.iface.next_hop(*addr.ip()).is_some())
            .map(|ep| (ep.iface.config().addr, ep.steering))?;
        let tries = 64 * steering.map_or(1, |s| usize::from(s.queues));
        for _ in 0..tries {
            let port = self.next_port;
            self.next_port = if port + 1 >= EPHEMERAL.end {
                EPHEMERAL.start
            } else {
                port + 1
            };
            if let Some(s) = steering {
                let h = crate::net::toeplitz::tcp4(s.key, *addr.ip(), src, addr.port(), port);
                if s.queue_of(h) != s.queue {
                    continue; // the replies would reach another engine
                }
            }
            let key = FlowKey {
                local: src,
                local_port: port,
                remote: *addr.ip(),
                remote_port: addr.port(),
            };
            if let Ok(id) = self.tcp.connect(now, key) {
                return Some((id, key));
            }
        }
        None
    }

    /// Gives up backend connects past their pool's timeout: the connection
    /// is dropped and its client tries the next member (see
    /// [`Engine::proxy_closed`]). Established ones leave the list.
    fn expire_connects(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.connecting.len() {
            let (id, key, deadline) = self.connecting[i];
            let live = self.tcp.key(id) == Some(key);
            let established = live
                && self
                    .tcp
                    .app(id)
                    .and_then(|a| a.proxy.as_deref())
                    .is_some_and(|l| l.connected);
            if !live || established {
                self.connecting.swap_remove(i);
            } else if now >= deadline {
                self.connecting.swap_remove(i);
                self.tcp.abort(id);
            } else {
                i += 1;
            }
        }
    }

    /// Starts due health checks and fails those past their timeout.
    fn run_health(&mut self, now: Instant) {
        for p in 0..self.pools.len() {
            if self.pools[p].retired {
                continue;
            }
            let Some(check) = self.pools[p].check.as_ref() else {
                continue;
            };
            let (interval, timeout) = (check.interval, check.timeout);
            for m in 0..self.pools[p].members.len() {
                let h = &self.pools[p].members[m].health;
                match h.probe {
                    Some((id, key, deadline)) if now >= deadline => {
                        self.health_result(p, m, false, "timed out");
                        if self.tcp.key(id) == Some(key) {
                            self.tcp.abort(id);
                        }
                    }
                    Some(_) => {}
                    None if now >= h.next_at
                        && !self.pools[p].members[m].removed
                        && self.health_share.as_ref().is_none_or(|s| {
                            s.checks(&self.pools[p].name, self.pools[p].members[m].addr)
                        }) =>
                    {
                        let addr = self.pools[p].members[m].addr;
                        self.pools[p].members[m].health.next_at = now + interval;
                        match self.open_to(now, addr) {
                            Some((id, key)) => {
                                self.tcp.app(id).expect("just opened").probe = Some(Probe {
                                    pool: p as u16,
                                    member: m as u16,
                                });
                                self.pools[p].members[m].health.probe =
                                    Some((id, key, now + timeout));
                            }
                            None => self.health_result(p, m, false, "no source port"),
                        }
                    }
                    None => {}
                }
            }
        }
    }

    /// A health-check connection's event.
    fn on_probe(&mut self, id: ConnId, probe: Probe, ev: Event) {
        let (p, m) = (usize::from(probe.pool), usize::from(probe.member));
        let Some(pool) = self.pools.get(p) else {
            return;
        };
        let Some(check) = &pool.check else { return };
        let (kind, expect) = (check.kind, check.expect);
        let current = pool.members[m]
            .health
            .probe
            .is_some_and(|(pid, key, _)| pid == id && self.tcp.key(id) == Some(key));
        if !current {
            return;
        }
        match (kind, ev) {
            (HealthKind::Tcp, Event::Connected(_)) => {
                self.health_result(p, m, true, "");
                self.tcp.close(id);
            }
            (HealthKind::Http, Event::Connected(_)) => {
                if let Some(check) = &self.pools[p].check {
                    self.tcp.send(id, &check.request);
                }
            }
            (HealthKind::Http, Event::Readable(_) | Event::PeerClosed(_)) => {
                let (a, b) = self.tcp.peek(id);
                let mut head = [0u8; 64];
                let n = (a.len() + b.len()).min(head.len());
                let first = a.len().min(n);
                head[..first].copy_from_slice(&a[..first]);
                head[first..n].copy_from_slice(&b[..n - first]);
                match crate::app::health::status(&head[..n]) {
                    Some(s) => {
                        let why = if s == expect {
                            String::new()
                        } else {
                            format!("status {s}")
                        };
                        self.health_result(p, m, s == expect, &why);
                        self.tcp.abort(id);
                    }
                    None if matches!(ev, Event::PeerClosed(_)) => {
                        self.health_result(p, m, false, "closed before a status line");
                        self.tcp.abort(id);
                    }
                    None => {}
                }
            }
            _ => {}
        }
    }

    /// Counts a check's result; logs and counts a member's state change.
    fn health_result(&mut self, p: usize, m: usize, ok: bool, why: &str) {
        let pool = &mut self.pools[p];
        let Some(check) = &pool.check else { return };
        self.counters.health_checks += 1;
        if !ok {
            self.counters.health_failures += 1;
        }
        let member = &mut pool.members[m];
        if let Some(up) = member.health.record(ok, check) {
            self.counters.health_changes += 1;
            if let Some(share) = &self.health_share {
                // Rare (a state change): the allocation is fine.
                let news = HealthNews {
                    pool: pool.name.clone(),
                    addr: member.addr,
                    up,
                };
                if share.news.push(news).is_err() {
                    log::warn!("health news queue full: other engines miss a change");
                }
            }
            // Rare (a state change), never per packet.
            if up {
                log::info!(
                    "pool {}: member {} is up (health checks pass)",
                    pool.name,
                    member.addr
                );
            } else {
                log::warn!(
                    "pool {}: member {} is down (health checks fail: {why})",
                    pool.name,
                    member.addr
                );
            }
        }
    }

    /// A connection is done but for its TIME-WAIT: it no longer counts as
    /// open on its VIP, nor (a backend connection) on its member, so least
    /// connections balances by the connections really open.
    fn entered_time_wait(&mut self, id: ConnId) {
        let Some(app) = self.tcp.app(id) else { return };
        let slot = app.vip.take();
        let member = app
            .proxy
            .as_deref_mut()
            .filter(|l| l.side == Side::Backend)
            .and_then(|l| Some((usize::from(l.pool), usize::from(l.member.take()?))));
        if let Some(slot) = slot {
            let vc = &mut self.vip_counters[usize::from(slot)];
            vc.active = vc.active.saturating_sub(1);
        }
        if let Some((p, m)) = member {
            let member = &mut self.pools[p].members[m];
            member.active = member.active.saturating_sub(1);
        }
    }

    /// No member can take `client`: counted, and the client ended.
    fn no_member(&mut self, client: ConnId) {
        self.counters.proxy_no_member += 1;
        if let Some(slot) = self.tcp.app(client).and_then(|a| a.vip) {
            self.vip_counters[usize::from(slot)].proxy_no_member += 1;
        }
        self.fail_client(client);
    }

    /// No backend for this client: a TLS alert (internal_error) or a reset.
    fn fail_client(&mut self, client: ConnId) {
        if let Some(mut t) = self.tcp.app(client).and_then(|a| a.tls.take()) {
            t.abort_with_alert();
            t.flush_alert(&mut self.tcp, client);
            if let Some(a) = self.tcp.app(client) {
                a.tls = Some(t);
            }
            self.tcp.close(client);
        } else {
            self.tcp.abort(client);
        }
    }

    /// A proxied connection is gone: the member's count, a retry when a
    /// backend could not be reached, or the end of the other side.
    fn proxy_closed(&mut self, now: Instant, link: &ProxyLink, reason: CloseReason) {
        let other = link
            .peer
            .and_then(|(id, key)| (self.tcp.key(id) == Some(key)).then_some(id));
        match link.side {
            Side::Backend => {
                if let (Some(m), Some(pool)) =
                    (link.member, self.pools.get_mut(usize::from(link.pool)))
                {
                    let member = &mut pool.members[usize::from(m)];
                    member.active = member.active.saturating_sub(1);
                    if !link.connected {
                        member.failed += 1;
                    }
                }
                let Some(client) = other else { return };
                if !link.connected {
                    // Nothing was sent to it yet: another member.
                    self.counters.proxy_backend_failures += 1;
                    self.connect_backend(now, client);
                } else if reason != CloseReason::Normal {
                    self.tcp.abort(client);
                }
            }
            Side::Client => {
                let Some(b) = other else { return };
                let backend_done = self
                    .tcp
                    .app(b)
                    .and_then(|a| a.proxy.as_deref())
                    .is_some_and(|l| l.fin_passed);
                if link.fin_passed && backend_done {
                    // Both directions finished: the backend connection is
                    // closing (or in TIME-WAIT) on its own.
                } else if reason != CloseReason::Normal || !link.connected {
                    self.tcp.abort(b);
                } else {
                    self.tcp.close(b);
                }
            }
        }
    }

    fn count_failure(&mut self, f: crypto::session::Failure) {
        self.counters.tls_failures += 1;
        self.counters.tls_failure_reasons[f.index()] += 1;
    }

    /// Publishes the counters for the control thread.
    pub fn publish(&mut self) {
        let t = self.tcp.counters();
        let c = &mut self.counters;
        c.tcp_accepted = t.accepted;
        // Open connections and TIME-WAIT apart: what an operator counts as
        // open is what still talks, not what waits out 2 MSL.
        c.tcp_time_wait = t.time_wait;
        c.tcp_active = t.active.saturating_sub(t.time_wait);
        c.tcp_retransmits = t.retransmits;
        c.tcp_resets_sent = t.resets_sent;
        c.tcp_timeouts = t.timeouts;
        c.tcp_syn_cookies_sent = t.syn_cookies_sent;
        c.tcp_syn_cookies_accepted = t.syn_cookies_accepted;
        c.http_requests = self.responder.counters.requests;
        c.snapshot_version = self.snapshot_version;
        self.shared.publish(&self.counters);
        self.shared
            .publish_vips(&self.vip_counters[..self.vip_slots_used]);
    }

    /// Runs the loop until `stop` is set (checked once per tick), counting
    /// busy and idle TSC cycles. Transmits what is buffered before returning.
    ///
    /// While `drain` is set, listeners take no new connections (SYNs get a
    /// reset); existing connections go on.
    pub fn run(&mut self, clock: &TscClock, stop: &AtomicBool, drain: &AtomicBool) {
        let mut draining = false;
        let mut next_stop_check = Instant::ZERO;
        let mut idle_streak = 0u32;
        loop {
            let start = clock.ticks();
            let now = clock.at(start);
            let work = self.poll(now);
            let spent = clock.ticks().wrapping_sub(start);
            if work > 0 {
                self.counters.busy_cycles += spent;
                idle_streak = 0;
            } else {
                self.counters.idle_cycles += spent;
                idle_streak += 1;
                if let Some(pause) = self.cfg.idle_sleep.filter(|_| idle_streak >= 256) {
                    // Only when configured and idle: never on a busy path.
                    std::thread::sleep(pause);
                }
            }
            self.counters.loops += 1;
            if now >= next_stop_check {
                next_stop_check = now + self.cfg.tick;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let d = drain.load(Ordering::Relaxed);
                if d != draining {
                    draining = d;
                    self.tcp.set_accepting(!d);
                }
            }
        }
        let now = clock.now();
        for ep in &mut self.ports {
            flush(ep, now, &mut self.counters);
            for _ in ep.tx.drain(..) {
                self.counters.drop(DropReason::TxFull);
            }
        }
        self.publish();
    }
}

/// Processes one received frame: TCP to the stack, the rest answered or
/// dropped by the interface.
fn receive<P: Port>(
    ep: &mut EnginePort<P>,
    mut buf: P::Buf,
    now: Instant,
    burst: usize,
    tcp: &mut TcpEngine<ConnApp>,
    counters: &mut Counters,
) {
    counters.rx_packets += 1;
    counters.rx_bytes += buf.data().len() as u64;
    match ep.iface.process(now, &mut buf, counters) {
        Verdict::Tcp {
            src,
            dst,
            start,
            end,
        } => {
            if let Err(reason) = tcp.input(now, src, dst, &buf.data()[start..end]) {
                counters.drop(reason);
            }
        }
        other => queue(ep, buf, other, now, burst, counters),
    }
}

/// Software RSS on a received frame: another engine's TCP flow goes to
/// its inbox (`None`); an ARP frame is copied to every other engine and
/// kept; anything else is kept.
fn steer<P: Port>(
    link: &SteerLink<P::Buf>,
    ep: &mut EnginePort<P>,
    port: usize,
    buf: P::Buf,
    counters: &mut Counters,
) -> Option<P::Buf> {
    match classify(buf.data(), &link.table) {
        FrameClass::Tcp(h) => {
            let owner = link.owner(h);
            if owner == link.engine {
                return Some(buf);
            }
            counters.frames_steered += 1;
            if link
                .send(
                    owner,
                    Steered::Rx {
                        port: port as u8,
                        buf,
                    },
                )
                .is_err()
            {
                counters.drop(DropReason::SteerFull);
            }
            None
        }
        FrameClass::Arp => {
            for other in (0..link.engines).filter(|&e| e != link.engine) {
                let Some(mut copy) = ep.port.alloc() else {
                    counters.drop(DropReason::NoBuffer);
                    continue;
                };
                copy.set_len(buf.data().len());
                copy.data_mut().copy_from_slice(buf.data());
                if link
                    .send(
                        other,
                        Steered::Rx {
                            port: port as u8,
                            buf: copy,
                        },
                    )
                    .is_err()
                {
                    counters.drop(DropReason::SteerFull);
                }
            }
            Some(buf)
        }
        FrameClass::Other => Some(buf),
    }
}

/// Acts on a frame's verdict: transmit (flushing full bursts), hold for ARP,
/// or count the drop.
fn queue<P: Port>(
    ep: &mut EnginePort<P>,
    buf: P::Buf,
    verdict: Verdict,
    now: Instant,
    burst: usize,
    counters: &mut Counters,
) {
    match verdict {
        Verdict::Transmit => {
            if ep.tx.len() >= MAX_TX_PENDING {
                counters.drop(DropReason::TxFull);
                return;
            }
            ep.tx.push(buf);
            ep.tx_since.get_or_insert(now);
            if ep.tx.len() >= burst {
                flush(ep, now, counters);
            }
        }
        Verdict::Consumed | Verdict::Tcp { .. } => {}
        Verdict::Drop(reason) => counters.drop(reason),
        Verdict::AwaitNeighbor(hop) => {
            if ep.unresolved.len() == MAX_UNRESOLVED {
                ep.unresolved.remove(0);
                counters.drop(DropReason::NeighborMiss);
            }
            ep.unresolved.push((hop, buf, now + RESOLVE_TIMEOUT));
        }
    }
}

/// Moves held frames whose next hop is now known to the transmit buffer, in
/// arrival order, drops those that waited too long, and repeats the ARP
/// request (paced) for the rest.
fn release_resolved<P: Port>(ep: &mut EnginePort<P>, now: Instant, counters: &mut Counters) {
    let mut i = 0;
    while i < ep.unresolved.len() {
        let (hop, _, deadline) = ep.unresolved[i];
        if let Some(mac) = ep.iface.resolve(hop, now) {
            let (_, mut buf, _) = ep.unresolved.remove(i);
            set_destination(buf.data_mut(), mac);
            ep.tx.push(buf);
            ep.tx_since.get_or_insert(now);
        } else if now >= deadline {
            ep.unresolved.remove(i);
            counters.drop(DropReason::NeighborMiss);
        } else {
            i += 1;
        }
    }
}

/// Sends a port's buffered frames. Frames the queue does not take stay
/// buffered for the next iteration (bounded by [`MAX_TX_PENDING`]).
fn flush<P: Port>(ep: &mut EnginePort<P>, now: Instant, counters: &mut Counters) {
    if let Some((via, port)) = &ep.tx_via {
        // No TX queue of our own here: the engine that has it sends.
        // Counted as sent by the engine that sends them.
        for buf in ep.tx.drain(..) {
            if via.send_tx(*port, buf).is_err() {
                counters.drop(DropReason::SteerFull);
            }
        }
        ep.tx_since = None;
        return;
    }
    if let Some(c) = &ep.capture {
        let mut on = true;
        for b in ep.tx.iter().skip(ep.tx_captured) {
            on = on && c.take(b.data());
        }
        if !on {
            ep.capture = None;
        }
    }
    let offered: u64 = ep.tx.iter().map(|b| b.data().len() as u64).sum();
    let mut sent = 0;
    while !ep.tx.is_empty() {
        let n = ep.port.tx_burst(now, &mut ep.tx);
        if n == 0 {
            break;
        }
        sent += n;
    }
    let unsent: u64 = ep.tx.iter().map(|b| b.data().len() as u64).sum();
    counters.tx_packets += sent as u64;
    counters.tx_bytes += offered - unsent;
    ep.tx_captured = ep.tx.len();
    ep.tx_since = if ep.tx.is_empty() { None } else { Some(now) };
}
