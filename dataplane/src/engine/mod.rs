//! The per-core engine: one run-to-completion loop over the queues it owns
//! (docs/architecture.md, "Loop and roles"), shaped like DPDK's l3fwd:
//! burst receive, process each frame to completion, buffer transmissions
//! and drain them in bursts, periodic timers, counters published for the
//! control thread. The loop knows ports, the interface, TCP, steering and
//! timers; what runs above TCP is an [`Application`] it hands events to
//! (`dpd`'s: [`Services`]). Its control-plane side (snapshots, control
//! messages) is in `control`, the port side of a frame in `io`.

mod control;
mod io;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crypto::session::TlsConfig;

use crate::app::pool::Pool;
use crate::app::responder::Responder;
use crate::app::role::Roles;
use crate::app::{Application, Cx, Services, Tcp, Uplink};
use crate::dpdk::TscClock;
use crate::net::toeplitz::is_neighbor_frame;
use crate::net::{Interface, InterfaceConfig, Verdict};
use crate::port::{PacketBuf, Port, RssSteering};
use crate::snapshot::{Capture, ControlLink, HealthShare, PoolView};
use crate::stats::{Counters, DropReason, SharedCounters, VipCounters};
use crate::steer::{PortShare, SteerLink, Steered};
use crate::tcp::{Event, LinkLimits, ListenLimits, Secret, TcpConfig, TcpEngine};
use crate::time::{Instant, MonotonicTime};
use io::{flush, queue, receive, release_resolved, steer};

#[derive(Debug, Clone, Copy)]
pub struct EngineConfig {
    /// Most frames taken from a queue per receive call (l3fwd uses 32: big
    /// enough to amortise the driver call, small enough to stay in L1).
    pub burst: usize,
    /// Receive calls per port and iteration while they come back full (1
    /// in dpd: work per iteration stays bounded; a load generator takes
    /// more).
    pub rx_bursts: usize,
    /// Longest a frame waits in the transmit buffer while more replies are
    /// being batched with it.
    pub tx_drain: Duration,
    /// How often counters are published and timers run.
    pub tick: Duration,
    pub tcp: TcpConfig,
    /// Seed of TCP's secret (ISNs, SYN cookies), for reproducible runs;
    /// `None` draws a random one (always, outside tests and fuzzing:
    /// predictable ISNs and cookies are an attack surface).
    pub isn_key: Option<u64>,
    /// Pause after 256 idle iterations in a row (`None`: never; the
    /// production setting — a dataplane core polls).
    pub idle_sleep: Option<Duration>,
    /// TLS handshake work (signatures, key exchanges) per loop
    /// iteration, timed: steps start while some is left (the first always
    /// does) and connections beyond it wait for the next iteration, so a
    /// burst of handshakes cannot hold the loop (`app::budget`).
    pub handshake_budget: Duration,
    /// Which of `dpd`'s engines this is (0 up): it serves from that copy
    /// of each VIP's TLS configuration (`app::config::TlsCopies`).
    pub index: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            burst: 32,
            rx_bursts: 1,
            tx_drain: Duration::from_micros(100),
            tick: Duration::from_millis(1),
            tcp: TcpConfig::default(),
            isn_key: None,
            idle_sleep: None,
            handshake_budget: Duration::from_micros(500),
            index: 0,
        }
    }
}

#[derive(Debug)]
struct EnginePort<P: Port> {
    port: P,
    /// The port's untagged network.
    iface: Interface,
    /// Its 802.1Q VLANs, an interface each (docs/vlan.md).
    vlans: Vec<Interface>,
    tx: Vec<P::Buf>,
    /// When the oldest frame in `tx` was queued.
    tx_since: Option<Instant>,
    /// Frames (tagged already) waiting for a next hop's MAC.
    unresolved: std::collections::VecDeque<Held<P::Buf>>,
    /// The neighbour tables' `learned` count when `unresolved` was last looked
    /// over: until it moves, only the tick looks again (for deadlines and
    /// paced requests), not every iteration.
    unresolved_seen: u64,
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
    /// The link's MTU, where set ([`Engine::set_port_mtu`]); else what
    /// `TcpConfig::mss` implies.
    mtu: Option<u16>,
    /// How the port's NIC spreads flows over the engines' queues, when it
    /// does.
    rss: Option<RssSteering>,
}

/// A frame waiting for its next hop's MAC.
#[derive(Debug)]
struct Held<B> {
    /// The VLAN whose interface resolves the hop.
    vlan: Option<u16>,
    hop: IpAddr,
    buf: B,
    /// When it is given up.
    until: Instant,
}

impl<P: Port> EnginePort<P> {
    /// The interface of VLAN `vlan` (`None`: the untagged one).
    fn iface_on(&mut self, vlan: Option<u16>) -> Option<&mut Interface> {
        match vlan {
            None => Some(&mut self.iface),
            Some(v) => self.vlans.iter_mut().find(|i| i.vlan() == Some(v)),
        }
    }

    /// Its interfaces, the untagged one first.
    fn ifaces(&self) -> impl Iterator<Item = &Interface> {
        std::iter::once(&self.iface).chain(&self.vlans)
    }

    /// Its interfaces, the untagged one first.
    fn ifaces_mut(&mut self) -> impl Iterator<Item = &mut Interface> {
        std::iter::once(&mut self.iface).chain(&mut self.vlans)
    }

    /// Which of its interfaces has address `ip`: 0 the untagged one,
    /// `k` the VLAN at `vlans[k - 1]`.
    #[inline]
    fn owner_of(&self, ip: IpAddr) -> Option<usize> {
        if self.iface.owns(ip) {
            return Some(0);
        }
        self.vlans.iter().position(|i| i.owns(ip)).map(|k| k + 1)
    }

    /// Whether `ip` is an address of one of its interfaces.
    fn owns(&self, ip: IpAddr) -> bool {
        self.owner_of(ip).is_some()
    }

    /// Interface `k` as [`EnginePort::owner_of`] numbers them.
    #[inline]
    fn iface_at(&mut self, k: usize) -> &mut Interface {
        match k.checked_sub(1) {
            Some(v) if v < self.vlans.len() => &mut self.vlans[v],
            _ => &mut self.iface,
        }
    }
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

/// Most frames held per port while their next hop is resolved (Linux
/// holds up to `unres_qlen`, 101, per neighbour): enough for the SYN-ACKs
/// of a burst of new on-link clients, each waiting for its ARP reply.
const MAX_UNRESOLVED: usize = 256;
/// How long a frame waits for ARP before it is dropped.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a stopping engine goes on passing frames between engines
/// ([`Engine::hand_over_at_stop`]) for one that does not finish.
const STOP_HAND_OVER: Duration = Duration::from_secs(1);
/// Most frames waiting for the TX queue per port. Beyond it, TCP stops
/// producing (back-pressure, no self-inflicted loss) and other frames are
/// dropped as `tx_full`.
const MAX_TX_PENDING: usize = 256;

/// One core's engine over its queues, running application `A` (dpd's
/// [`Services`] unless told otherwise).
#[derive(Debug)]
pub struct Engine<P: Port, A: Application = Services> {
    cfg: EngineConfig,
    ports: Vec<EnginePort<P>>,
    /// The ports' addresses as connections the application opens see them
    /// (one per port, in order).
    uplinks: Vec<Uplink>,
    rx: Vec<P::Buf>,
    counters: Counters,
    shared: Arc<SharedCounters>,
    next_tick: Instant,
    tcp: Tcp,
    /// What runs above TCP.
    app: A,
    /// Rings to and from the control thread.
    control: Option<ControlLink>,
    /// A snapshot prepared and waiting for its commit (two-phase apply).
    staged: Option<Arc<crate::snapshot::Snapshot>>,
    /// Rings to the other engines, for ports steered in software.
    steer: Option<SteerLink<P::Buf>>,
    events: Vec<Event>,
}

impl<P: Port> Engine<P> {
    /// An engine running dpd's services (VIPs added by calls or snapshots).
    pub fn new(cfg: EngineConfig, shared: Arc<SharedCounters>) -> Self {
        let mut services = Services::new(cfg.handshake_budget);
        services.reserve_connections(cfg.tcp.max_conns);
        services.set_engine_index(cfg.index);
        Self::with_app(cfg, shared, services)
    }

    /// Serves the built-in HTTP responder on `addr:port` (a VIP). An
    /// address that is not a port's own becomes an extra address of the port
    /// whose subnet holds it (answered in ARP and ICMP).
    pub fn listen(&mut self, addr: impl Into<IpAddr>, port: u16) {
        self.add_vip(addr.into(), port, None, None);
    }

    /// Serves the responder behind TLS on `addr:port`.
    pub fn listen_tls(&mut self, addr: impl Into<IpAddr>, port: u16, config: TlsConfig) {
        self.add_vip(addr.into(), port, Some(config), None);
    }

    /// Records each client connection as it ends in this engine's queue of
    /// `queues`, as a snapshot with `[log] connections` does (`None`:
    /// stops).
    pub fn log_connections(&mut self, queues: Option<Arc<crate::app::conn_log::ConnLogQueues>>) {
        self.tcp.keep_ended(queues.is_some());
        self.app.set_conn_log(queues);
    }

    /// Records only the connections that end one of `ends` ways, as a
    /// snapshot with `[log] connection_ends` does.
    pub fn log_connection_ends(&mut self, ends: crate::app::conn_log::EndSet) {
        self.app.set_conn_log_ends(ends);
    }

    /// Adds a backend pool; returns its index for [`Engine::listen_pool`].
    pub fn add_pool(&mut self, pool: Pool) -> usize {
        self.app.add_pool(pool)
    }

    /// Forwards connections to `addr:port` (decrypted first when `tls`) to
    /// members of pool `pool`.
    pub fn listen_pool(
        &mut self,
        addr: impl Into<IpAddr>,
        port: u16,
        tls: Option<TlsConfig>,
        pool: usize,
    ) {
        self.add_vip(addr.into(), port, tls, u16::try_from(pool).ok());
    }

    fn add_vip(&mut self, addr: IpAddr, port: u16, tls: Option<TlsConfig>, pool: Option<u16>) {
        self.claim_address(addr);
        self.tcp.listen(addr, port);
        self.app.add_vip(addr, port, tls, pool);
    }

    /// Sets what VIP `addr:port`'s listener admits on this engine (as a
    /// snapshot's VIP limits do).
    pub fn set_vip_limits(&mut self, addr: impl Into<IpAddr>, port: u16, limits: ListenLimits) {
        let addr = addr.into();
        if let Some(slot) = self.app.set_vip_limits(addr, port, limits) {
            self.tcp.listen_with(addr, port, limits, Some(slot));
        }
    }

    /// The `max` client addresses with the most connections open (to
    /// `local` only, when given), as [`crate::snapshot::ToEngine::Sources`]
    /// answers.
    pub fn sources(
        &self,
        local: Option<(IpAddr, u16)>,
        max: usize,
    ) -> Vec<crate::tcp::SourceCount> {
        self.tcp.sources(local, max)
    }

    /// The `max` oldest accepted connections `filter` picks, with what
    /// the application does with each, as
    /// [`crate::snapshot::ToEngine::Conns`] answers.
    pub fn connections(
        &self,
        filter: crate::tcp::ConnFilter,
        max: usize,
        now: Instant,
    ) -> Vec<(crate::tcp::ConnView, crate::app::ConnUse)> {
        let conns = self.tcp.connections(filter, max, now).into_iter();
        conns.map(|c| (c, self.app.describe(c.id))).collect()
    }

    /// The `max` sources refused most lately (at VIP slot `vip` only,
    /// when given), as [`crate::snapshot::ToEngine::Refused`] answers.
    pub fn refused_sources(
        &mut self,
        vip: Option<u16>,
        max: usize,
        now: Instant,
    ) -> Vec<crate::tcp::RefusedSource> {
        self.tcp.refused_sources(vip, max, now)
    }

    /// Resets the accepted connections `filter` picks, as
    /// [`crate::snapshot::ToEngine::ConnsReset`] does; how many.
    pub fn reset_connections(&mut self, filter: crate::tcp::ConnFilter, now: Instant) -> u64 {
        self.tcp.reset_accepted_by(filter, now)
    }

    /// Takes connections to VIP `addr:port` only from the networks of
    /// `allow` (`None`: any) from now on, resetting its others (as a
    /// snapshot's VIP `allow` does).
    pub fn set_vip_allow(
        &mut self,
        addr: impl Into<IpAddr>,
        port: u16,
        allow: Option<std::sync::Arc<crate::net::PrefixSet>>,
    ) {
        self.tcp.set_allow(addr.into(), port, allow);
    }

    /// Refuses client networks `deny` from now on, resetting their open
    /// connections (as a snapshot's `deny` does).
    pub fn set_deny(&mut self, deny: std::sync::Arc<crate::net::PrefixSet>) {
        self.tcp.set_deny(deny);
    }

    /// Splits health checks with the other engines: this one checks only
    /// its share of members and reports their changes; the others' reach it
    /// as [`crate::snapshot::ToEngine::Health`].
    pub fn set_health_share(&mut self, share: HealthShare) {
        self.app.set_health_share(share);
    }

    /// Counters of VIP slot `slot`.
    pub fn vip_counters(&self, slot: u16) -> VipCounters {
        self.app.slot_counters(slot)
    }

    /// The pools as this engine sees them.
    pub fn pool_views(&self) -> Vec<PoolView> {
        self.app.pool_views()
    }

    /// The pools, with this engine's counts.
    pub fn pools(&self) -> &[Pool] {
        self.app.pools()
    }

    /// Every connection's role.
    pub fn roles(&self) -> &Roles {
        self.app.roles()
    }

    /// Bytes of connection state held: TCP's (slab, flow table, timer
    /// wheel, rings in use) and the roles table (capacities).
    pub fn state_bytes(&self) -> usize {
        self.tcp.state_bytes() + self.app.roles().state_bytes()
    }

    /// TLS connections, and the bytes their buffers hold now (0 when all
    /// are idle: buffers are given back as they empty).
    pub fn tls_buffers(&self) -> (usize, usize) {
        self.app.tls_buffers()
    }

    /// The responder's counters.
    pub fn responder(&self) -> &Responder {
        self.app.responder()
    }
}

impl<P: Port, A: Application> Engine<P, A> {
    /// The application.
    pub fn app(&self) -> &A {
        &self.app
    }

    pub fn app_mut(&mut self) -> &mut A {
        &mut self.app
    }

    /// Adds `addr` to the port whose subnet holds it (answered in ARP and
    /// ICMP, usable as a source address).
    pub fn add_address(&mut self, addr: impl Into<IpAddr>) {
        self.claim_address(addr.into());
    }

    /// Announces every address of every port (gratuitous ARP, RFC 5227
    /// §2.3) with the next transmit: neighbours that knew one of them at
    /// another MAC (a host restarted with a new one) take ours.
    pub fn announce(&mut self, now: Instant) {
        for ep in &mut self.ports {
            for k in 0..=ep.vlans.len() {
                let iface = if k == 0 { &ep.iface } else { &ep.vlans[k - 1] };
                for addr in iface.addresses() {
                    match ep.port.alloc() {
                        Some(mut buf) => {
                            iface.write_arp_announcement(addr, &mut buf);
                            io::push_tagged(&mut ep.tx, &mut ep.tx_since, buf, iface.vlan(), now);
                        }
                        None => self.counters.drop(DropReason::NoBuffer),
                    }
                }
            }
        }
    }

    /// Whether the next hop towards `dst` is resolved; on a miss an ARP
    /// request goes out with this iteration's frames.
    pub fn resolve(&mut self, dst: Ipv4Addr, now: Instant) -> bool {
        let Some(iface) = self
            .ports
            .iter_mut()
            .flat_map(|ep| ep.ifaces_mut())
            .find(|i| i.next_hop(dst).is_some())
        else {
            return false;
        };
        iface
            .next_hop(dst)
            .is_some_and(|hop| iface.resolve(hop, now).is_some())
    }

    /// The port `i`, mutably (tests wrap ports to record traffic).
    pub fn port_mut(&mut self, i: usize) -> &mut P {
        &mut self.ports[i].port
    }

    /// An engine running `app` above its TCP.
    pub fn with_app(cfg: EngineConfig, shared: Arc<SharedCounters>, app: A) -> Self {
        Self {
            cfg,
            ports: Vec::new(),
            uplinks: Vec::new(),
            rx: Vec::with_capacity(cfg.burst),
            counters: Counters::default(),
            shared,
            next_tick: Instant::ZERO,
            tcp: TcpEngine::new(
                cfg.tcp,
                Instant::ZERO,
                cfg.isn_key.map_or_else(Secret::random, Secret::from_seed),
            ),
            app,
            control: None,
            staged: None,
            steer: None,
            events: Vec::with_capacity(256),
        }
    }

    /// Software RSS: how this engine shares each port (by index) with the
    /// others, and the rings between them (see [`crate::steer`]).
    ///
    /// # Panics
    /// When `shares` does not cover every port.
    pub fn set_steering(&mut self, link: SteerLink<P::Buf>, shares: &[PortShare]) {
        assert_eq!(shares.len(), self.ports.len(), "one share per port");
        for uplink in &mut self.uplinks {
            if shares[uplink.port].steer {
                uplink.steering = Some(link.steering());
            }
        }
        for (ep, share) in self.ports.iter_mut().zip(shares) {
            ep.share = *share;
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

    /// Rings to the control thread, read at every tick.
    pub fn set_control(&mut self, link: ControlLink) {
        self.control = Some(link);
    }

    pub fn tcp(&self) -> &Tcp {
        &self.tcp
    }

    /// Adds a port (one queue pair) with its interface addresses. The
    /// interface MAC is the port's.
    pub fn add_port(&mut self, port: P, mut iface: InterfaceConfig) {
        iface.mac = port.mac();
        let steering = port.rss_steering();
        self.uplinks.push(Uplink {
            iface,
            ipv6: None,
            vlan: None,
            port: self.ports.len(),
            steering,
        });
        let mut interface = Interface::new(iface);
        interface.set_checksum_offload(port.checksum_offload());
        let segmentation = io::segmentation_max(&port);
        self.ports.push(EnginePort {
            port,
            iface: interface,
            vlans: Vec::new(),
            tx: Vec::with_capacity(2 * self.cfg.burst),
            tx_since: None,
            unresolved: std::collections::VecDeque::with_capacity(MAX_UNRESOLVED),
            unresolved_seen: 0,
            rx_drained: true,
            capture: None,
            tx_captured: 0,
            share: PortShare::OWN,
            tx_via: None,
            mtu: None,
            rss: steering,
        });
        // Large segments on an address no port claims only when every
        // port cuts them; each port's own addresses get its own limit.
        let max = if self.ports.len() == 1 {
            segmentation
        } else {
            segmentation.min(self.tcp.config().segmentation_max)
        };
        self.tcp.set_segmentation_max(max);
        self.refresh_links();
    }

    /// Sets port `i`'s MTU: connections on its addresses (and on VIP
    /// addresses it takes later) offer its MSS where that is more than
    /// `TcpConfig::mss`, the smallest link's (docs/architecture.md,
    /// "Ports").
    pub fn set_port_mtu(&mut self, i: usize, mtu: u16) {
        if let Some(ep) = self.ports.get_mut(i) {
            ep.mtu = Some(mtu);
        }
        self.refresh_links();
    }

    /// Tells TCP the local addresses whose links take more than its
    /// defaults (a larger MTU; TSO where another port has none), each with
    /// the least of its ports' limits when several own it (a routed VIP).
    /// At set-up and when addresses are added, never per packet.
    fn refresh_links(&mut self) {
        let base_mtu = self.tcp.config().mss.saturating_add(40);
        let base_segmentation = self.tcp.config().segmentation_max;
        let limits_of = |ep: &EnginePort<P>| LinkLimits {
            mtu: ep.mtu.unwrap_or(base_mtu),
            segmentation_max: io::segmentation_max(&ep.port),
        };
        let above_base =
            |l: &LinkLimits| l.mtu > base_mtu || l.segmentation_max > base_segmentation;
        let mut links: Vec<(IpAddr, LinkLimits)> = Vec::new();
        for ep in self.ports.iter().filter(|ep| above_base(&limits_of(ep))) {
            for iface in ep.ifaces() {
                let v4 = iface.addresses().map(IpAddr::V4);
                let v6 = iface
                    .ipv6()
                    .into_iter()
                    .flat_map(|h| h.unicast().map(IpAddr::V6));
                for addr in v4.chain(v6) {
                    let least = self
                        .ports
                        .iter()
                        .filter(|o| o.owns(addr))
                        .map(limits_of)
                        .reduce(|a, b| LinkLimits {
                            mtu: a.mtu.min(b.mtu),
                            segmentation_max: a.segmentation_max.min(b.segmentation_max),
                        });
                    if let Some(l) = least.filter(above_base) {
                        if !links.iter().any(|(a, _)| *a == addr) {
                            links.push((addr, l));
                        }
                    }
                }
            }
        }
        self.tcp.set_links(links);
    }

    /// Turns IPv6 on for port `i` (added last by [`Engine::add_port`]
    /// when `i` is the last index): its link-local address and `cfg`'s.
    pub fn enable_ipv6(&mut self, i: usize, cfg: crate::net::Ipv6Config) {
        if let Some(u) = self
            .uplinks
            .iter_mut()
            .find(|u| u.port == i && u.vlan.is_none())
        {
            u.ipv6 = Some(cfg.clone());
        }
        if let Some(ep) = self.ports.get_mut(i) {
            ep.iface.enable_ipv6(cfg);
        }
        self.refresh_links();
    }

    /// Adds 802.1Q VLAN `vid` to port `i` with its own addresses (`iface`;
    /// the MAC is the port's) and, when given, IPv6 ones: frames tagged
    /// `vid` go to its interface, and what it sends is tagged `vid`.
    /// Connections may be opened from its addresses (it is an uplink).
    pub fn add_vlan(
        &mut self,
        i: usize,
        vid: u16,
        mut iface: InterfaceConfig,
        ipv6: Option<crate::net::Ipv6Config>,
    ) {
        let Some(ep) = self.ports.get_mut(i) else {
            return;
        };
        iface.mac = ep.port.mac();
        let mut interface = Interface::new(iface).on_vlan(vid);
        interface.set_checksum_offload(ep.port.checksum_offload());
        if let Some(v6) = &ipv6 {
            interface.enable_ipv6(v6.clone());
        }
        ep.vlans.push(interface);
        let steering = self
            .uplinks
            .iter()
            .find(|u| u.port == i)
            .and_then(|u| u.steering);
        self.uplinks.push(Uplink {
            iface,
            ipv6,
            vlan: Some(vid),
            port: i,
            steering,
        });
        self.refresh_links();
    }

    /// Makes port `i` report its IPv6 multicast groups at the next
    /// transmit and a second later (one engine per port does it; every
    /// engine answers the queries it receives), on each of its networks.
    pub fn join_ipv6_groups(&mut self, i: usize) {
        if let Some(ep) = self.ports.get_mut(i) {
            for iface in ep.ifaces_mut() {
                iface.join_groups();
            }
        }
    }

    /// This engine's counters (up to date, unlike the published copy).
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The interface of port `i` (its untagged network).
    pub fn interface(&self, i: usize) -> &Interface {
        &self.ports[i].iface
    }

    /// The interfaces of port `i`'s VLANs.
    pub fn vlan_interfaces(&self, i: usize) -> &[Interface] {
        &self.ports[i].vlans
    }

    /// The port `i`.
    pub fn port(&self, i: usize) -> &P {
        &self.ports[i].port
    }

    /// One loop iteration at time `now`; returns the work it did: frames
    /// received and sent, connection timers fired, TCP events handled,
    /// handshakes put off (those it went on with, and those still
    /// waiting: they keep the loop busy). 0 only for an iteration that
    /// found nothing to do; [`Engine::run`] counts the others' time as
    /// busy, so an iteration that only goes on with put-off handshakes
    /// or sends what a timer queued is not idle time.
    ///
    /// Phases, in order: timers (every tick), receive bursts, frames other
    /// engines passed on, frames whose next hop resolved, TCP timers and
    /// the application's events, TCP's segments out, transmit.
    pub fn poll(&mut self, now: Instant) -> usize {
        // An iteration (the control thread sees the engine turning by it).
        self.counters.loops += 1;
        // Timers first, so what they queue (ARP probes) leaves with this
        // iteration's transmissions.
        let ticked = now >= self.next_tick;
        if ticked {
            self.next_tick = now + self.cfg.tick;
            self.tick(now);
        }
        let sent_before = self.counters.tx_packets;
        let mut work = self.receive_bursts(now);
        work += self.receive_inbox(now);
        for ep in &mut self.ports {
            let learned = ep.ifaces().map(Interface::neighbors_learned).sum();
            if !ep.unresolved.is_empty() && (ticked || learned != ep.unresolved_seen) {
                ep.unresolved_seen = learned;
                release_resolved(ep, now, &mut self.counters);
            }
        }
        work += self.transport(now);
        self.transmit_segments(now);
        self.drain_tx(now);
        let sent = self.counters.tx_packets.wrapping_sub(sent_before);
        work.saturating_add(usize::try_from(sent).unwrap_or(usize::MAX))
    }

    /// The tick's work: interface timers, control messages, the
    /// application's deadlines, counters published.
    fn tick(&mut self, now: Instant) {
        for ep in &mut self.ports {
            for iface in ep.ifaces_mut() {
                iface.on_timer(now);
            }
            if ep.tx_via.is_none() {
                ep.port.on_tick();
            }
        }
        self.control_messages(now);
        let mut cx = Cx {
            now,
            tcp: &mut self.tcp,
            counters: &mut self.counters,
            uplinks: &self.uplinks,
        };
        self.app.on_tick(&mut cx);
        self.publish();
    }

    /// One receive burst per port, each frame processed to completion (or
    /// handed to the engine owning its flow); returns the frames received.
    fn receive_bursts(&mut self, now: Instant) -> usize {
        let mut work = 0;
        let burst = self.cfg.burst;
        for (i, ep) in self.ports.iter_mut().enumerate() {
            let (mut n, mut drained) = (0, true);
            if ep.share.rx {
                for _ in 0..self.cfg.rx_bursts.max(1) {
                    let got = ep.port.rx_burst(now, &mut self.rx, burst);
                    n += got;
                    drained = got < burst;
                    if drained {
                        break;
                    }
                }
            }
            work += n;
            ep.rx_drained = drained;
            io::prefetch_syns(&self.rx, &self.tcp);
            for buf in self.rx.drain(..) {
                if buf.chained() {
                    self.counters.rx_packets += 1;
                    self.counters.drop(DropReason::MultiSegment);
                    continue;
                }
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
                    (Some(link), false) => {
                        // The NIC spreads flows, and leaves ARP and ND on
                        // one queue: the other engines learn from a copy.
                        if is_neighbor_frame(buf.data()) {
                            io::share_neighbor_frame(link, ep, i, &buf, &mut self.counters);
                        }
                        // It hashes an ICMP error, and an IPv6 segment
                        // behind extension headers, on its addresses
                        // alone: one of another engine's flow goes there.
                        match io::address_hashed_owner(link, ep.rss, &buf) {
                            Some(owner) => {
                                io::pass_on(link, owner, i, buf, &mut self.counters);
                                continue;
                            }
                            None => buf,
                        }
                    }
                    _ => buf,
                };
                receive(ep, buf, now, burst, &mut self.tcp, &mut self.counters);
            }
        }
        work
    }

    /// Frames other engines passed on: their flows received elsewhere, and
    /// transmissions for engines without a queue of their own.
    fn receive_inbox(&mut self, now: Instant) -> usize {
        let Some(link) = &self.steer else {
            return 0;
        };
        let burst = self.cfg.burst;
        let mut work = 0;
        for _ in 0..crate::steer::INBOX_FRAMES {
            let Some(msg) = link.recv() else { break };
            work += 1;
            let (Steered::Rx { port, .. } | Steered::Tx { port, .. } | Steered::Learn { port, .. }) =
                msg;
            let Some(ep) = self.ports.get_mut(usize::from(port)) else {
                continue; // not a port of ours: the frame is freed
            };
            match msg {
                Steered::Rx { buf, .. } => {
                    receive(ep, buf, now, burst, &mut self.tcp, &mut self.counters);
                }
                Steered::Tx { buf, .. } => {
                    // Tagged already by the engine that built it.
                    queue(
                        ep,
                        buf,
                        Verdict::Transmit,
                        None,
                        now,
                        burst,
                        &mut self.counters,
                    );
                }
                Steered::Learn { buf, .. } => io::learn(ep, buf, now),
            }
        }
        work
    }

    /// TCP's timers, then the application: work put off earlier, then
    /// this iteration's events.
    /// Returns the work done and still put off: timers fired, put-off
    /// work before and after, events handled.
    fn transport(&mut self, now: Instant) -> usize {
        let fired = self.tcp.poll_timers(now);
        let mut cx = Cx {
            now,
            tcp: &mut self.tcp,
            counters: &mut self.counters,
            uplinks: &self.uplinks,
        };
        // Work put off earlier: `resume` goes on with at least one.
        let put_off = self.app.pending();
        self.app.resume(&mut cx);
        cx.tcp.drain_events(&mut self.events);
        let events = self.events.len();
        for ev in self.events.drain(..) {
            self.app.on_event(&mut cx, ev);
        }
        cx.tcp.events_handled();
        fired + put_off + events + self.app.pending()
    }

    /// With engines that send through one another (software steering),
    /// after [`Engine::reset_at_stop`]: each engine goes on passing its
    /// frames to the engines that send them, and sending what it is
    /// handed, until every engine has handed over all it had and its own
    /// inbox is empty, or [`STOP_HAND_OVER`] passes (an engine stuck).
    /// Before, an engine that sends for others could leave its loop first,
    /// and their resets stayed in its inbox, never sent.
    fn hand_over_at_stop(&mut self, clock: &TscClock, time: &mut MonotonicTime) {
        let Some(link) = &self.steer else {
            return;
        };
        let (stopped, engines) = (link.stopped.clone(), usize::from(link.engines));
        let until = time.at(clock.now()) + STOP_HAND_OVER;
        let mut handed_over = false;
        loop {
            let now = time.at(clock.now());
            // Read before the inbox is: once every engine had handed over
            // by then, an empty inbox is the last word (read after, an
            // engine's last frames could land between the two).
            let all = stopped.load(Ordering::Acquire) >= engines;
            let work = self.receive_inbox(now);
            for ep in &mut self.ports {
                flush(ep, now, &mut self.counters);
            }
            let holding = self.ports.iter().any(|ep| !ep.tx.is_empty());
            if !handed_over && (!holding || now >= until) {
                handed_over = true;
                stopped.fetch_add(1, Ordering::AcqRel);
            }
            if (all && work == 0 && !holding) || now >= until {
                return;
            }
            if work == 0 {
                std::thread::yield_now();
            }
        }
    }

    /// dpd is stopping: every connection still open is reset, client
    /// connections first (so a proxy resets their backends rather than try
    /// another member), then what is left (backends, health checks). The
    /// application hears of each (`CloseReason::Stopped`, logged as
    /// `stopped`), and the resets go out in as many rounds as the transmit
    /// queues take, until a round sends nothing. Returns how many were
    /// open (TIME-WAIT is not). [`Engine::run`] calls it once its loop has
    /// ended; nothing is received after it.
    pub fn reset_at_stop(&mut self, now: Instant) -> u64 {
        let open = self.tcp.counters().active;
        self.tcp.reset_at_stop(true);
        self.transport(now);
        self.tcp.reset_at_stop(false);
        self.transport(now);
        loop {
            let sent = self.counters.tx_packets;
            self.transmit_segments(now);
            for ep in &mut self.ports {
                flush(ep, now, &mut self.counters);
            }
            if self.counters.tx_packets == sent {
                return open;
            }
        }
    }

    /// Builds frames for what TCP transmits.
    fn transmit_segments(&mut self, now: Instant) {
        let burst = self.cfg.burst;
        let (ports, counters) = (&mut self.ports, &mut self.counters);
        // A segment TCP could not hand over (no buffer, the transmit buffer
        // full) stops it: TCP keeps what it did not send and sends it on a
        // later iteration, nothing is counted as sent that was dropped.
        self.tcp.transmit(now, |seg| {
            let owner = ports
                .iter_mut()
                .find_map(|ep| ep.owner_of(seg.src).map(|k| (ep, k)));
            let Some((ep, k)) = owner else {
                counters.drop(DropReason::NoRoute);
                return true;
            };
            if !io::tx_room(ep, now, counters) {
                counters.tx_blocked += 1;
                return false;
            }
            let buf = if seg.segment_size > 0 {
                ep.port.alloc_large()
            } else {
                ep.port.alloc()
            };
            let Some(mut buf) = buf else {
                counters.drop(DropReason::NoBuffer);
                return false;
            };
            let iface = ep.iface_at(k);
            let (verdict, vlan) = (iface.write_tcp(now, seg, &mut buf), iface.vlan());
            queue(ep, buf, verdict, vlan, now, burst, counters)
        });
    }

    /// ARP probes out, then each port's buffered frames when its receive
    /// queue is drained or the oldest waited `tx_drain`.
    fn drain_tx(&mut self, now: Instant) {
        for ep in &mut self.ports {
            for k in 0..=ep.vlans.len() {
                let iface = if k == 0 {
                    &mut ep.iface
                } else {
                    &mut ep.vlans[k - 1]
                };
                let (port, tx, since) = (&mut ep.port, &mut ep.tx, &mut ep.tx_since);
                io::send_own_frames(iface, port, tx, since, now, &mut self.counters);
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
    }

    /// Publishes the counters for the control thread.
    pub fn publish(&mut self) {
        let t = self.tcp.counters();
        let c = &mut self.counters;
        c.drops[DropReason::PortError as usize] =
            self.ports.iter().map(|ep| ep.port.errors()).sum();
        c.tcp_accepted = t.accepted;
        // Open connections and TIME-WAIT apart: what an operator counts as
        // open is what still talks, not what waits out 2 MSL.
        c.tcp_time_wait = t.time_wait;
        c.tcp_active = t.active;
        c.tcp_client_connections = t.accepted_open;
        c.tcp_time_wait_recycled = t.time_wait_recycled;
        c.tcp_retransmits = t.retransmits;
        c.tcp_segmentation_offloads = t.offload_segments;
        c.tcp_large_segments_in = t.large_segments_in;
        c.tcp_ooo_beyond_reach = t.ooo_beyond_reach;
        c.tcp_resets_sent = t.resets_sent;
        c.tcp_timeouts = t.timeouts;
        c.tcp_syn_cookies_sent = t.syn_cookies_sent;
        c.tcp_syn_cookies_accepted = t.syn_cookies_accepted;
        c.tcp_challenge_acks = t.challenge_acks;
        c.tcp_challenge_acks_limited = t.challenge_acks_limited;
        c.tcp_paws_rejected = t.paws_rejected;
        c.tcp_timestamp_missing = t.timestamp_missing;
        c.tcp_window_probes = t.window_probes;
        c.tcp_fin_wait2_timeouts = t.fin_wait2_timeouts;
        c.tcp_denied_resets = t.denied_resets;
        c.tcp_operator_resets = t.operator_resets;
        c.tcp_path_mtu_lowered = t.path_mtu_lowered;
        c.tcp_rto_expiries = t.rto_expiries;
        c.tcp_tail_loss_probes = t.tail_loss_probes;
        c.tcp_tlp_repairs = t.tlp_repairs;
        c.tcp_rack_losses = t.rack_losses;
        c.tcp_lost_retransmits = t.lost_retransmits;
        c.tcp_hystart_exits = t.hystart_exits;
        c.tcp_spurious_timeouts = t.spurious_timeouts;
        c.tcp_spurious_recoveries = t.spurious_recoveries;
        c.tcp_buffer_bytes = t.buffer_bytes;
        c.tcp_buffer_outside_bytes = t.buffer_outside_bytes;
        c.tcp_buffer_denied = t.buffer_denied;
        c.tcp_syn_no_memory = t.syn_no_memory;
        c.tcp_state_bytes = self.tcp.table_bytes() as u64;
        self.app.count(c);
        let tcp = &self.tcp;
        self.app.count_refusals(&|slot| tcp.refusals(slot));
        self.shared.publish(&self.counters);
        self.shared.publish_vips(self.app.vip_counters());
    }

    /// Runs the loop until `stop` is set (checked once per tick), counting
    /// busy TSC cycles (iterations whose [`Engine::poll`] did work), idle
    /// ones (the other iterations and the `idle_sleep` after them) and the
    /// iterations that took over a millisecond (`loop_stalls`). Engine
    /// time never goes back ([`MonotonicTime`], `clock_steps_back`).
    /// Transmits what is buffered before returning.
    ///
    /// While `drain` is set, listeners take no new connections (SYNs get a
    /// reset); existing connections go on.
    pub fn run(&mut self, clock: &TscClock, stop: &AtomicBool, drain: &AtomicBool) {
        let mut draining = false;
        let mut next_stop_check = Instant::ZERO;
        let mut idle_streak = 0u32;
        let stall = clock.hz() / 1000; // a millisecond
        let mut time = MonotonicTime::default();
        loop {
            let start = clock.ticks();
            let now = time.at(clock.at(start));
            self.counters.clock_steps_back = time.steps_back();
            let work = self.poll(now);
            let spent = clock.ticks().saturating_sub(start);
            if spent > stall {
                self.counters.loop_stalls += 1;
            }
            if work > 0 {
                self.counters.busy_cycles += spent;
                idle_streak = 0;
            } else {
                self.counters.idle_cycles += spent;
                idle_streak = idle_streak.saturating_add(1);
                if let Some(pause) = self.cfg.idle_sleep.filter(|_| idle_streak >= 256) {
                    // Only when configured and idle: never on a busy path.
                    // The sleep is idle time too, so busy and idle add up to
                    // the loop's wall time and the busy share is the core's.
                    let before = clock.ticks();
                    std::thread::sleep(pause);
                    self.counters.idle_cycles += clock.ticks().saturating_sub(before);
                }
            }
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
        let reset = self.reset_at_stop(time.at(clock.now()));
        if reset > 0 {
            log::info!(
                "engine {}: reset {reset} connections still open at stop",
                self.cfg.index
            );
        }
        self.hand_over_at_stop(clock, &mut time);
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
