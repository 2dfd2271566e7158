//! The per-core engine: one run-to-completion loop over the queues it owns
//! (DESIGN.md "data path"), shaped like DPDK's l3fwd: burst receive, process
//! each frame to completion, buffer transmissions and drain them in bursts,
//! periodic timers, counters published for the control thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::net::Ipv4Addr;

use crate::net::{set_destination, Interface, InterfaceConfig, Verdict};
use crate::port::{PacketBuf, Port};
use crate::stats::{Counters, DropReason, SharedCounters};
use crate::time::{Instant, TscClock};

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
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            burst: 32,
            tx_drain: Duration::from_micros(100),
            tick: Duration::from_millis(1),
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
}

/// Most frames held per port while their next hop is resolved (Linux keeps
/// a few per neighbour too: `unres_qlen`).
const MAX_UNRESOLVED: usize = 16;
/// How long a frame waits for ARP before it is dropped.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// One core's engine over its queues.
#[derive(Debug)]
pub struct Engine<P: Port> {
    cfg: EngineConfig,
    ports: Vec<EnginePort<P>>,
    rx: Vec<P::Buf>,
    counters: Counters,
    shared: Arc<SharedCounters>,
    next_tick: Instant,
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
        }
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
        });
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
            self.publish();
        }
        for ep in &mut self.ports {
            let n = ep.port.rx_burst(now, &mut self.rx, burst);
            work += n;
            for mut buf in self.rx.drain(..) {
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += buf.data().len() as u64;
                match ep.iface.process(now, &mut buf, &mut self.counters) {
                    Verdict::Transmit => {
                        ep.tx.push(buf);
                        ep.tx_since.get_or_insert(now);
                        if ep.tx.len() >= burst {
                            flush(ep, now, &mut self.counters);
                        }
                    }
                    Verdict::Consumed => {}
                    Verdict::Drop(reason) => self.counters.drop(reason),
                    Verdict::AwaitNeighbor(hop) => {
                        if ep.unresolved.len() == MAX_UNRESOLVED {
                            ep.unresolved.remove(0);
                            self.counters.drop(DropReason::NeighborMiss);
                        }
                        ep.unresolved.push((hop, buf, now + RESOLVE_TIMEOUT));
                    }
                }
            }
            if !ep.unresolved.is_empty() {
                release_resolved(ep, now, &mut self.counters);
            }
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
            let drained = n < burst;
            let due = ep
                .tx_since
                .is_some_and(|t| now.saturating_since(t) >= self.cfg.tx_drain);
            if !ep.tx.is_empty() && (drained || due) {
                flush(ep, now, &mut self.counters);
            }
        }
        work
    }

    /// Publishes the counters for the control thread.
    pub fn publish(&self) {
        self.shared.publish(&self.counters);
    }

    /// Runs the loop until `stop` is set (checked once per tick), counting
    /// busy and idle TSC cycles. Transmits what is buffered before returning.
    pub fn run(&mut self, clock: &TscClock, stop: &AtomicBool) {
        let mut next_stop_check = Instant::ZERO;
        loop {
            let start = clock.ticks();
            let now = clock.at(start);
            let work = self.poll(now);
            let spent = clock.ticks().wrapping_sub(start);
            if work > 0 {
                self.counters.busy_cycles += spent;
            } else {
                self.counters.idle_cycles += spent;
            }
            self.counters.loops += 1;
            if now >= next_stop_check {
                next_stop_check = now + self.cfg.tick;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
        }
        let now = clock.now();
        for ep in &mut self.ports {
            flush(ep, now, &mut self.counters);
        }
        self.publish();
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

/// Sends a port's buffered frames; frames the queue does not take are freed
/// and counted (l3fwd's policy: a full TX ring means we are over capacity,
/// and holding frames would only add latency).
fn flush<P: Port>(ep: &mut EnginePort<P>, now: Instant, counters: &mut Counters) {
    let offered: u64 = ep.tx.iter().map(|b| b.data().len() as u64).sum();
    let sent = ep.port.tx_burst(now, &mut ep.tx);
    let unsent: u64 = ep.tx.iter().map(|b| b.data().len() as u64).sum();
    counters.tx_packets += sent as u64;
    counters.tx_bytes += offered - unsent;
    for _ in ep.tx.drain(..) {
        counters.drop(DropReason::TxFull);
    }
    ep.tx_since = None;
}
