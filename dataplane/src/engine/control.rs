//! The engine's side of the control plane: configuration snapshots
//! switched between packets, and the control thread's other messages
//! (pool views, health news, captures), read at every tick.

use std::net::IpAddr;
use std::sync::Arc;

use super::Engine;
use crate::app::Application;
use crate::net::PrefixSet;
use crate::port::Port;
use crate::snapshot::{FromEngine, Snapshot, ToEngine};
use crate::tcp::ListenLimits;
use crate::time::Instant;

impl<P: Port, A: Application> Engine<P, A> {
    /// Switches to `snap` between packets. Listeners, VIP addresses and
    /// pools follow it; open connections keep what they started with (their
    /// TLS configuration; their pool and member, which stay in the engine
    /// marked retired or removed while used).
    pub fn apply(&mut self, snap: &Snapshot) {
        self.app.apply(snap);
        self.tcp
            .replace_deny(Arc::clone(&snap.deny), snap.deny_added);
        self.tcp.keep_ended(snap.conn_log.is_some());
        let vips = self.app.vips();
        self.tcp
            .retain_listeners(|a, p| vips.iter().any(|v| v.enabled && v.addr == a && v.port == p));
        // A removed VIP's address stays while the control thread has it
        // lingering: connections to it may be open on any engine, and
        // their segments, ARP and ND still reach us ("open connections go
        // on"); it goes once no engine serves it.
        let keep = |a: IpAddr| vips.iter().any(|v| v.addr == a) || snap.lingering.contains(&a);
        for iface in self.ports.iter_mut().flat_map(|ep| ep.ifaces_mut()) {
            iface.retain_addresses(|a| keep(IpAddr::V4(*a)));
            iface.retain_addresses6(|a| keep(IpAddr::V6(*a)));
        }
        type Wanted = (IpAddr, u16, bool, ListenLimits, u16, Option<Arc<PrefixSet>>);
        let wanted: Vec<Wanted> = vips
            .iter()
            .map(|v| (v.addr, v.port, v.enabled, v.limits, v.slot, v.allow.clone()))
            .collect();
        for (addr, port, enabled, limits, slot, allow) in wanted {
            // Disabled VIPs keep their address (ARP, ICMP) and reset SYNs.
            self.claim_address(addr);
            if enabled {
                self.tcp.listen_with(addr, port, limits, Some(slot));
                self.tcp.set_allow(addr, port, allow);
            }
        }
    }

    /// Makes `addr` an extra address of the network (a port's untagged
    /// one, or a VLAN) whose subnet holds it; an address on none (a VIP
    /// routed to us, `[routing]`) becomes one of every network of its
    /// family, since routers may send it through any.
    pub(super) fn claim_address(&mut self, addr: IpAddr) {
        // A wildcard VIP takes connections to the addresses we have; it
        // adds none (`0.0.0.0` is no destination of ours).
        if addr.is_unspecified() || self.ports.iter().any(|ep| ep.owns(addr)) {
            return;
        }
        let on_link = {
            let mut ifaces = self.ports.iter_mut().flat_map(|ep| ep.ifaces_mut());
            match addr {
                IpAddr::V4(a) => match ifaces.find(|i| i.next_hop(a) == Some(a)) {
                    Some(iface) => {
                        iface.add_address(a);
                        true
                    }
                    None => false,
                },
                IpAddr::V6(a) => ifaces.any(|iface| iface.add_address6(a)),
            }
        };
        if !on_link {
            for iface in self.ports.iter_mut().flat_map(|ep| ep.ifaces_mut()) {
                iface.add_routed_address(addr);
            }
        }
        if self.ports.iter().any(|ep| ep.mtu.is_some()) {
            self.refresh_links();
        }
    }

    /// Handles the control thread's messages (at a tick, between packets).
    pub(super) fn control_messages(&mut self, now: Instant) {
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
                ToEngine::Prepare(snap) => {
                    let version = snap.version;
                    self.staged = Some(snap);
                    FromEngine::Prepared {
                        engine: link.engine,
                        version,
                    }
                }
                ToEngine::Commit(version) => {
                    let Some(snap) = self.staged.take_if(|s| s.version == version) else {
                        continue;
                    };
                    self.apply(&snap);
                    self.publish();
                    FromEngine::Applied {
                        engine: link.engine,
                        version,
                    }
                }
                ToEngine::Abort(version) => {
                    self.staged.take_if(|s| s.version == version);
                    continue;
                }
                ToEngine::Pools { ask } => FromEngine::Pools {
                    engine: link.engine,
                    ask,
                    pools: self.app.pool_views(),
                },
                ToEngine::Sources { ask, local, max } => FromEngine::Sources {
                    engine: link.engine,
                    ask,
                    sources: self.tcp.sources(local, max),
                },
                ToEngine::Conns { ask, filter, max } => FromEngine::Conns {
                    engine: link.engine,
                    ask,
                    conns: (self.tcp.connections(filter, max, now).into_iter())
                        .map(|c| (c, self.app.describe(c.id)))
                        .collect(),
                },
                ToEngine::Refused { ask, vip, max } => FromEngine::Refused {
                    engine: link.engine,
                    ask,
                    sources: self.tcp.refused_sources(vip, max, now),
                },
                ToEngine::Serving { ask, mut addrs } => {
                    addrs.retain(|a| self.tcp.serves_address(*a));
                    FromEngine::Serving {
                        engine: link.engine,
                        ask,
                        serving: addrs,
                    }
                }
                ToEngine::ConnsReset { ask, filter } => FromEngine::ConnsReset {
                    engine: link.engine,
                    ask,
                    reset: self.tcp.reset_accepted_by(filter, now),
                },
                ToEngine::Capture { port, capture } => {
                    if let Some(ep) = self.ports.get_mut(port) {
                        ep.capture = Some(capture);
                        ep.tx_captured = 0;
                    }
                    continue;
                }
                ToEngine::Health(news) => {
                    self.app.health_news(&news);
                    continue;
                }
                ToEngine::Pause { port, paused, ask } => {
                    if let Some(ep) = self.ports.get_mut(port) {
                        ep.port.set_paused(paused);
                    }
                    FromEngine::Paused {
                        engine: link.engine,
                        port,
                        paused,
                        ask,
                    }
                }
            };
            // The control thread waits for replies one request at a time:
            // the ring has room.
            let _ = link.from_engines.push(reply);
        }
        self.control = Some(link);
    }
}
