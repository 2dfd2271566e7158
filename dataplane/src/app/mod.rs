//! Applications the engine's loop drives on top of TCP, and the small
//! interface between them (docs/architecture.md, "Loop and roles"): the
//! loop hands each iteration's TCP events to an [`Application`] with a
//! [`Cx`] (the TCP engine, the clock, counters, the ports' addresses), and
//! calls it at every tick. It knows nothing else of what runs above.
//!
//! [`Services`] is dpd's application: VIPs served by the built-in
//! responder, TLS termination, proxying to pools and health checks, one
//! [`role::Role`] per connection.

pub mod budget;
pub mod config;
pub mod conn_log;
pub mod deadlines;
pub mod health;
pub mod pool;
pub mod proxy;
pub mod proxy_protocol;
pub mod responder;
pub mod role;
mod services;
pub mod tls;

use std::net::IpAddr;

pub use services::{Services, VipEntry};

use crate::net::toeplitz::RssSteering;
use crate::net::{InterfaceConfig, Ipv6Config};
use crate::stats::{Counters, VipCounters};
use crate::tcp::{Event, TcpEngine};
use crate::time::Instant;
use config::{PoolView, Snapshot};
use health::HealthNews;

/// The TCP engine as applications see it: application state lives in the
/// application's own tables, by handle, not in the TCP engine.
pub type Tcp = TcpEngine<()>;

/// What an application may use while it handles events or a tick.
#[derive(Debug)]
pub struct Cx<'a> {
    pub now: Instant,
    pub tcp: &'a mut Tcp,
    pub counters: &'a mut Counters,
    /// The ports' addresses, for connections the application opens.
    pub uplinks: &'a [Uplink],
}

/// A port's addresses, as connections opened from this engine see them.
#[derive(Debug, Clone)]
pub struct Uplink {
    pub iface: InterfaceConfig,
    /// Its IPv6 addresses and gateway, when it has IPv6.
    pub ipv6: Option<Ipv6Config>,
    /// The 802.1Q VLAN of these addresses (`None`: untagged).
    pub vlan: Option<u16>,
    /// The engine port it is on (index).
    pub port: usize,
    /// How the port spreads received flows over the engines' queues (a
    /// connection's source port must bring its replies to this engine).
    pub steering: Option<RssSteering>,
}

impl Uplink {
    /// The source address towards `dst` and the steering of the uplink
    /// that reaches it: one whose subnet holds it (a port's own network
    /// or a VLAN's), else the first with a gateway of its family.
    pub fn route(uplinks: &[Uplink], dst: IpAddr) -> Option<(IpAddr, Option<RssSteering>)> {
        let source = |u: &Uplink, on_link: bool| -> Option<IpAddr> {
            match dst {
                IpAddr::V4(d) => {
                    let hop = u.iface.next_hop(d)?;
                    (!on_link || hop == d).then_some(IpAddr::V4(u.iface.addr))
                }
                IpAddr::V6(d) => {
                    let v6 = u.ipv6.as_ref()?;
                    let hop = v6.next_hop(d)?;
                    if on_link && hop != d {
                        return None;
                    }
                    v6.source_for(d).map(IpAddr::V6)
                }
            }
        };
        [true, false].into_iter().find_map(|on_link| {
            uplinks
                .iter()
                .find_map(|u| Some((source(u, on_link)?, u.steering)))
        })
    }
}

/// An application driven by the engine's loop.
pub trait Application {
    /// Called once per iteration before its events: starts the
    /// iteration's budget of costly work and continues what earlier
    /// iterations put off.
    fn resume(&mut self, cx: &mut Cx<'_>);
    /// Work put off to later iterations (it keeps the loop busy).
    fn pending(&self) -> usize;
    /// One iteration's TCP events, in the order they happened.
    fn on_event(&mut self, cx: &mut Cx<'_>, event: Event);
    /// At every tick (1 ms): deadlines of the application's own.
    fn on_tick(&mut self, cx: &mut Cx<'_>);

    // The control plane's side (an application without one keeps the
    // defaults).

    /// Switches to a configuration snapshot (between packets).
    fn apply(&mut self, _snap: &Snapshot) {}
    /// The VIPs served: the loop listens on the enabled ones and answers
    /// ARP and ICMP for every one's address.
    fn vips(&self) -> &[VipEntry] {
        &[]
    }
    /// The pools as this engine sees them (for `dpctl pool show`).
    fn pool_views(&self) -> Vec<PoolView> {
        Vec::new()
    }
    /// Another engine found a pool member up or down.
    fn health_news(&mut self, _news: &HealthNews) {}
    /// Fills the application's own counters before they are published.
    fn count(&self, _counters: &mut Counters) {}
    /// Per-VIP counters to publish, by slot.
    fn vip_counters(&self) -> &[VipCounters] {
        &[]
    }
    /// Takes TCP's counts of SYNs refused by each VIP's limits (`refused`
    /// of a VIP slot) into the per-VIP counters.
    fn count_refusals(&mut self, _refused: &dyn Fn(u16) -> crate::tcp::Refusals) {}
    /// What it does with connection `id` (`dpctl conn list`).
    fn describe(&self, _id: crate::tcp::ConnId) -> ConnUse {
        ConnUse::default()
    }
}

/// What an application does with a connection, as `dpctl conn list`
/// shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnUse {
    /// What serves it: `http` (the built-in responder), `tls` (TLS, then
    /// the responder), `proxy` (to a pool), `tls-proxy`; empty: unknown.
    pub role: &'static str,
    /// What it waits for of the client: `handshake`, `request`; empty:
    /// nothing (an answer or the backend is on its way).
    pub waits_for: &'static str,
    /// Proxied: the backend connection's address, once one is opened.
    pub backend: Option<std::net::SocketAddr>,
    /// Proxied: bytes passed from the client to the backend, and back.
    pub to_backend: u64,
    pub to_client: u64,
}
