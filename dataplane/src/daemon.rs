//! `dpd`'s start-up and shutdown: checks the configuration against the
//! machine, builds EAL arguments, brings up mempools, ports and one engine
//! per dataplane core, serves the control socket, and stops cleanly.

use std::fmt;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant as WallClock};

use control::api::{
    Body, ControlSocket, CoreStats, DrainState, PortStatus, Reply, Request, Status,
};
use control::config::{Config, ConfigError, DeviceKind, HugepagePolicy, SynCookieMode};
use smoltcp::wire::EthernetAddress;

use crate::controller::{collect_stats, Controller};
use crate::dpdk::TscClock;
use crate::dpdk::{self, Eal, EthPort, EthPortConfig, LcoreId, Mempool, QueueId};
use crate::engine::{Engine, EngineConfig};
use crate::net::InterfaceConfig;
use crate::snapshot::{ControlLink, HealthShare};
use crate::stats::SharedCounters;
use crate::steer::{PortShare, SteerLink};
use crate::tcp::SynCookies;

/// Why `dpd` could not start.
#[derive(Debug)]
pub enum StartError {
    /// The configuration does not fit this machine (names field and value).
    Config(ConfigError),
    /// DPDK refused (EAL, mempool, port).
    Dpdk(dpdk::DpdkError),
    /// The control socket could not be made.
    Control(std::io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "config error: {e}"),
            Self::Dpdk(e) => write!(f, "DPDK error: {e}"),
            Self::Control(e) => write!(f, "control socket error: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

impl From<ConfigError> for StartError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

impl From<dpdk::DpdkError> for StartError {
    fn from(e: dpdk::DpdkError) -> Self {
        Self::Dpdk(e)
    }
}

/// Parses a sysfs CPU list (`0-3,8,10-11`).
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// What the machine offers, as `dpd` needs it.
#[derive(Debug, Clone)]
pub struct Machine {
    pub online_cpus: Vec<u32>,
    pub free_hugepage_bytes: u64,
    pub hugepages: Vec<String>,
}

impl Machine {
    pub fn probe() -> Self {
        let online_cpus = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|t| parse_cpu_list(&t))
            .unwrap_or_else(|| {
                (0..std::thread::available_parallelism().map_or(1, |n| n.get() as u32)).collect()
            });
        let (free_hugepage_bytes, hugepages) = match hugepages::discover() {
            Ok(inv) => {
                let mut lines: Vec<String> = inv.sizes.iter().map(|p| p.to_string()).collect();
                lines.extend(inv.nodes.iter().map(|p| p.to_string()));
                (inv.free_bytes(), lines)
            }
            Err(e) => (0, vec![format!("unreadable: {e}")]),
        };
        Self {
            online_cpus,
            free_hugepage_bytes,
            hugepages,
        }
    }
}

/// The start-up plan: EAL arguments and the main lcore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub main_lcore: u32,
    /// The control thread shares a CPU with an engine (`eal.cpus` left
    /// none free).
    pub control_shares_cpu: bool,
    pub use_hugepages: bool,
    pub eal_args: Vec<String>,
}

/// Checks `cfg` against `machine` and builds the EAL arguments.
///
/// # Errors
/// A core that does not exist, no core left for the control thread, an
/// interface that does not exist, or no hugepages when they are required.
pub fn plan(
    cfg: &Config,
    machine: &Machine,
    iface_exists: impl Fn(&str) -> bool,
) -> Result<Plan, ConfigError> {
    let mapped = !cfg.eal.cpus.is_empty();
    let (field, cpus) = if mapped {
        ("eal.cpus", &cfg.eal.cpus)
    } else {
        ("eal.lcores", &cfg.eal.lcores)
    };
    for (i, core) in cpus.iter().enumerate() {
        if !machine.online_cpus.contains(core) {
            return Err(ConfigError::new(
                format!("{field}[{i}]"),
                core,
                format!("no such core (online: {:?})", machine.online_cpus),
            ));
        }
    }
    let free_cpu = machine
        .online_cpus
        .iter()
        .copied()
        .find(|c| !cpus.contains(c));
    let (main_lcore, main_cpu) = if mapped {
        let id = (0..128)
            .find(|id| !cfg.eal.lcores.contains(id))
            .expect("fewer than 128 engines");
        (id, free_cpu.unwrap_or(cpus[0]))
    } else {
        let c = free_cpu.ok_or_else(|| {
            ConfigError::new(
                "eal.lcores",
                format!("{:?}", cfg.eal.lcores),
                "leave one core for the control thread",
            )
        })?;
        (c, c)
    };
    for (i, port) in cfg.ports.iter().enumerate() {
        if let Some(iface) = port.kernel_iface() {
            if !iface_exists(iface) {
                return Err(ConfigError::new(
                    format!("port[{i}].device"),
                    &port.device,
                    format!(
                        "network interface {iface:?} does not exist (in this network namespace)"
                    ),
                ));
            }
        }
    }
    let use_hugepages = match cfg.eal.hugepages {
        HugepagePolicy::Off => false,
        HugepagePolicy::Preferred => machine.free_hugepage_bytes > 0,
        HugepagePolicy::Required if machine.free_hugepage_bytes == 0 => {
            return Err(ConfigError::new(
                "eal.hugepages",
                "required",
                "no free hugepages on this machine (reserve some: scripts/setup.sh, or /proc/sys/vm/nr_hugepages)",
            ))
        }
        HugepagePolicy::Required => true,
    };

    let mut args = if mapped {
        let mut map = vec![format!("{main_lcore}@{main_cpu}")];
        map.extend(
            cfg.eal
                .lcores
                .iter()
                .zip(cpus)
                .map(|(l, c)| format!("{l}@{c}")),
        );
        vec![format!("--lcores={}", map.join(","))]
    } else {
        let mut cores = vec![main_lcore];
        cores.extend(&cfg.eal.lcores);
        vec![
            "-l".to_string(),
            cores
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ]
    };
    args.push(format!("--main-lcore={main_lcore}"));
    if !cfg.has_pci_port() {
        args.push("--no-pci".into());
    }
    for port in &cfg.ports {
        match port
            .device_kind()
            .map_err(|r| ConfigError::new("port.device", &port.device, r))?
        {
            DeviceKind::Pci(addr) => args.push(format!("--allow={addr}")),
            DeviceKind::Virtual { spec, .. } => args.push(format!("--vdev={spec}")),
        }
    }
    // Memory: never leave shared files behind, so several dpd (and tests)
    // can run side by side. `--in-memory` needs hugepages; without them,
    // `--no-huge` (which implies legacy memory) pairs with `--no-shconf`.
    let user_args = cfg
        .eal
        .args
        .iter()
        .filter(|a| use_hugepages || a.as_str() != "--in-memory");
    let user_has = |p: &str| cfg.eal.args.iter().any(|a| a.starts_with(p));
    if use_hugepages {
        if !user_has("--file-prefix") && !user_has("--in-memory") {
            args.push("--in-memory".into());
        }
    } else {
        args.extend(["--no-huge".to_string(), "--no-shconf".to_string()]);
        if !user_has("-m") && !user_has("--socket-mem") {
            args.extend(["-m".to_string(), "512".to_string()]);
        }
    }
    args.extend(user_args.cloned());
    Ok(Plan {
        main_lcore,
        control_shares_cpu: mapped && free_cpu.is_none(),
        use_hugepages,
        eal_args: args,
    })
}

fn mac_string(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Runs `dpd` until `stop` is set: the whole life of the daemon.
///
/// # Errors
/// When anything fails to start; everything started is stopped again.
///
/// `stop` ends it at once; `term` drains first: listeners stop taking new
/// connections, and it stops when the open ones have finished (TIME-WAIT
/// aside) or after `[control] drain_timeout_s`.
pub fn run(
    cfg: &Config,
    config_path: Option<&Path>,
    stop: Arc<AtomicBool>,
    term: Arc<AtomicBool>,
) -> Result<(), StartError> {
    let started = WallClock::now();
    let machine = Machine::probe();
    log::info!("hugepages: {}", machine.hugepages.join("; "));
    let plan = plan(cfg, &machine, |iface| {
        Path::new("/sys/class/net").join(iface).exists()
    })?;
    if !plan.use_hugepages {
        match cfg.eal.hugepages {
            HugepagePolicy::Off => log::info!("hugepages off by configuration"),
            _ => log::warn!("no free hugepages: DPDK runs on normal pages (--no-huge); reserve hugepages for production"),
        }
    }
    log::info!("EAL arguments: {}", plan.eal_args.join(" "));
    // Certificates load before DPDK starts, so a bad file fails fast.
    let links = ControlLink::new_set(cfg.eal.lcores.len());
    let shared: Vec<(u32, Arc<SharedCounters>)> = cfg
        .eal
        .lcores
        .iter()
        .map(|&l| (l, Arc::new(SharedCounters::default())))
        .collect();
    let (mut controller, first) = Controller::start(
        cfg.clone(),
        config_path.map(Path::to_path_buf),
        links.clone(),
        shared.clone(),
        dpdk::tsc_hz(),
    )?;
    let slot_names = controller.slot_names();
    // DPDK's lines (EAL, drivers) in dpd's log format, at their level.
    if let Err(e) = dpdk::route_to_log() {
        log::warn!("DPDK's log lines stay on stderr as they are: {e}");
    }
    let eal = Eal::init(&plan.eal_args)?;
    log::info!(
        "DPDK {} up; control thread on core {}",
        dpdk::version(),
        plan.main_lcore
    );

    let engines = u16::try_from(cfg.eal.lcores.len()).expect("few cores");
    if plan.control_shares_cpu {
        log::warn!("the control thread shares a CPU with an engine (eal.cpus leaves none free)");
    }
    // Per port: queue pairs, and whether flows are steered in software.
    let mut shapes: Vec<(u16, bool)> = Vec::new();
    let mut pools: Vec<(i32, Mempool)> = Vec::new();
    let mut ports = Vec::new();
    for (i, pc) in cfg.ports.iter().enumerate() {
        let name = match pc
            .device_kind()
            .map_err(|r| ConfigError::new(format!("port[{i}].device"), &pc.device, r))?
        {
            DeviceKind::Pci(addr) => addr,
            DeviceKind::Virtual { name, .. } => name,
        };
        let id = dpdk::port_id_by_name(&name).map_err(|e| {
            ConfigError::new(
                format!("port[{i}].device"),
                &pc.device,
                format!("DPDK did not probe this device ({e})"),
            )
        })?;
        let info = EthPort::info(id)?;
        let socket = info.socket.max(0);
        let pool = match pools.iter().find(|(s, _)| *s == socket) {
            Some((_, p)) => *p,
            None => {
                let p = Mempool::create(
                    &format!("mbufs-s{socket}"),
                    cfg.eal.mbufs,
                    256,
                    dpdk_sys::consts::RTE_MBUF_DEFAULT_BUF_SIZE as u16,
                    socket,
                )?;
                pools.push((socket, p));
                p
            }
        };
        // One queue pair per engine where the device has them; engines
        // beyond its queues send through the engine that has one.
        let queues = engines
            .min(info.max_rx_queues)
            .min(info.max_tx_queues)
            .max(1);
        let port = EthPort::start(
            id,
            EthPortConfig {
                queues,
                rx_desc: pc.rx_desc,
                tx_desc: pc.tx_desc,
                mempool: pool,
            },
        )
        .map_err(|e| e.context(format!("port {} ({})", pc.name, pc.device)))?;
        let link = port.link();
        log::info!(
            "port {} ({}): driver {}, MAC {}, {} queue(s), RSS {} (key {} B, table {}), checksum offload rx {} tx {}, link {}",
            pc.name,
            pc.device,
            info.driver,
            mac_string(port.mac()),
            queues,
            if port.rss() { "on" } else { "off" },
            info.hash_key_size,
            info.reta_size,
            port.offloads().rx_ipv4_cksum,
            port.offloads().tx_ipv4_cksum,
            if link.up { "up" } else { "down" }
        );
        let steered = engines > 1 && !(port.rss() && queues == engines);
        if steered {
            log::warn!(
                "port {}: {}; the {engines} engines spread flows among themselves by the Toeplitz hash in software (a frame crosses cores at most once)",
                pc.name,
                if queues < engines {
                    format!("{queues} queue pair(s) for {engines} engines")
                } else {
                    "no hardware RSS".to_string()
                }
            );
        }
        shapes.push((queues, steered));
        ports.push(port);
    }

    let engine_stop = Arc::new(AtomicBool::new(false));
    let drain = Arc::new(AtomicBool::new(false));
    // Each member is health-checked by one engine, which tells the others.
    let (health_shares, health_news) = HealthShare::new_set(engines);
    let steer_links = shapes
        .iter()
        .any(|&(_, steered)| steered)
        .then(|| SteerLink::new_set(engines, &dpdk::SYMMETRIC_RSS_KEY));
    let mut launched = Vec::new();
    for (q, &lcore) in cfg.eal.lcores.iter().enumerate() {
        let counters = shared[q].1.clone();
        let mut engine_cfg = EngineConfig {
            idle_sleep: (cfg.eal.idle_sleep_us > 0)
                .then(|| Duration::from_micros(u64::from(cfg.eal.idle_sleep_us))),
            ..EngineConfig::default()
        };
        engine_cfg.tcp.time_wait = Duration::from_secs(u64::from(cfg.tcp.time_wait_s));
        engine_cfg.tcp.idle_timeout = Duration::from_secs(u64::from(cfg.tcp.idle_timeout_s));
        engine_cfg.tcp.handshake_timeout =
            Duration::from_secs(u64::from(cfg.tcp.handshake_timeout_s));
        engine_cfg.tcp.keepalive =
            (cfg.tcp.keepalive_s > 0).then(|| Duration::from_secs(u64::from(cfg.tcp.keepalive_s)));
        engine_cfg.tcp.max_conns = cfg.tcp.max_connections as usize;
        engine_cfg.tcp.max_half_open = cfg.tcp.max_half_open as usize;
        engine_cfg.tcp.syn_cookies = match cfg.tcp.syn_cookies {
            SynCookieMode::WhenFull => SynCookies::WhenFull,
            SynCookieMode::Always => SynCookies::Always,
            SynCookieMode::Off => SynCookies::Off,
        };
        let mut engine = Engine::new(engine_cfg, counters);
        let mut shares = Vec::new();
        for ((port, pc), &(queues, steered)) in ports.iter().zip(&cfg.ports).zip(&shapes) {
            let own = (q as u16) < queues;
            shares.push(PortShare {
                steer: steered,
                rx: own,
                tx_via: (!own).then_some(q as u16 % queues),
            });
            let cidr = pc
                .cidr()
                .map_err(|r| ConfigError::new("port.address", &pc.address, r))?;
            let gateway = pc
                .gateway
                .as_deref()
                .and_then(|g| g.parse::<Ipv4Addr>().ok());
            engine.add_port(
                port.queue(QueueId(q as u16 % queues)),
                InterfaceConfig {
                    mac: EthernetAddress(port.mac()),
                    addr: cidr.addr,
                    prefix_len: cidr.prefix_len,
                    gateway,
                },
            );
        }
        if let Some(links) = &steer_links {
            engine.set_steering(links[q].clone(), &shares);
        }
        if engines > 1 {
            engine.set_health_share(health_shares[q].clone());
        }
        engine.apply(&first);
        engine.set_control(links[q].clone());
        let stop = engine_stop.clone();
        let engine_drain = drain.clone();
        let handle = eal.launch(LcoreId(lcore), move || {
            let clock = TscClock::new();
            engine.run(&clock, &stop, &engine_drain);
            0
        })?;
        log::info!("engine {q} running on core {lcore}");
        if q == 0 {
            for vip in &cfg.vips {
                let tls = if vip.certs.is_empty() { "" } else { "TLS, " };
                match &vip.pool {
                    Some(p) => log::info!("vip {}: {} → {tls}pool {p}", vip.name, vip.listen),
                    None => {
                        log::info!("vip {}: {} → {tls}built-in responder", vip.name, vip.listen)
                    }
                }
            }
            for p in &cfg.pools {
                let members: Vec<String> = p
                    .members
                    .iter()
                    .map(|m| format!("{} (weight {}, {:?})", m.addr, m.weight, m.state))
                    .collect();
                log::info!("pool {}: {:?}, {}", p.name, p.balance, members.join(", "));
            }
        }
        launched.push(handle);
    }

    let tsc_hz = dpdk::tsc_hz();
    let metrics_stop = Arc::new(AtomicBool::new(false));
    let metrics = match cfg.control.metrics_addr() {
        Ok(Some(addr)) => {
            let listener = std::net::TcpListener::bind(addr).map_err(|e| {
                StartError::Control(std::io::Error::new(
                    e.kind(),
                    format!("metrics endpoint {addr} ([control] metrics): {e}"),
                ))
            });
            match listener {
                Ok(l) => {
                    log::info!("metrics on http://{addr}/metrics");
                    let (shared, slot_names) = (shared.clone(), slot_names.clone());
                    let stop = metrics_stop.clone();
                    Some(std::thread::spawn(move || {
                        serve_metrics(&l, &stop, || collect_stats(&shared, &slot_names, tsc_hz));
                    }))
                }
                Err(e) => {
                    engine_stop.store(true, Ordering::Relaxed);
                    for h in launched {
                        h.wait();
                    }
                    return Err(e);
                }
            }
        }
        _ => None,
    };
    let relay = {
        let (stop, links, news) = (engine_stop.clone(), links.clone(), health_news.clone());
        std::thread::spawn(move || {
            let mut relay = crate::snapshot::HealthRelay::new(links.len());
            while !stop.load(Ordering::Relaxed) {
                relay.relay(&news, &links);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    // SIGTERM: drain, then stop once the open connections are done.
    let drainer = {
        let (shared, stop, drain) = (shared.clone(), stop.clone(), drain.clone());
        let slot_names = slot_names.clone();
        let deadline = std::time::Duration::from_secs(u64::from(cfg.control.drain_timeout_s));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) && !term.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            if stop.load(Ordering::Relaxed) {
                return;
            }
            log::info!("SIGTERM: draining (no new connections; at most {deadline:?})");
            drain.store(true, Ordering::Relaxed);
            let t0 = std::time::Instant::now();
            // Let every engine see the flag and publish once.
            std::thread::sleep(std::time::Duration::from_millis(20));
            loop {
                let open = open_connections(&collect_stats(&shared, &slot_names, tsc_hz).total);
                if open == 0 || t0.elapsed() >= deadline || stop.load(Ordering::Relaxed) {
                    log::info!("drained ({open} connections still open)");
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            stop.store(true, Ordering::Relaxed);
        })
    };
    let socket = ControlSocket::bind(&cfg.control.socket).map_err(StartError::Control);
    let result = match socket {
        Ok(socket) => {
            log::info!("control socket {}", socket.path().display());
            let status_ports: Vec<PortStatus> = ports
                .iter()
                .zip(&cfg.ports)
                .zip(&shapes)
                .map(|((p, pc), &(queues, steered))| PortStatus {
                    name: pc.name.clone(),
                    device: pc.device.clone(),
                    driver: p.port_info().driver.clone(),
                    mac: mac_string(p.mac()),
                    address: pc.address.clone(),
                    link_up: false,
                    speed_mbps: 0,
                    queues,
                    rss: p.rss(),
                    steered,
                })
                .collect();
            socket.serve(&stop, |req| match req {
                Request::Status => {
                    let mut ports_now = status_ports.clone();
                    for (ps, p) in ports_now.iter_mut().zip(&ports) {
                        let link = p.link();
                        ps.link_up = link.up;
                        ps.speed_mbps = link.speed_mbps;
                    }
                    Reply::ok(Body::Status(Status {
                        version: env!("CARGO_PKG_VERSION").to_string(),
                        dpdk: dpdk::version(),
                        pid: std::process::id(),
                        uptime_s: started.elapsed().as_secs_f64(),
                        lcores: cfg.eal.lcores.clone(),
                        ports: ports_now,
                        hugepages: machine.hugepages.clone(),
                        hugepages_in_use: plan.use_hugepages,
                        config_version: controller.stats().total.config_version,
                    }))
                    .into()
                }
                Request::Drain => {
                    if !drain.swap(true, Ordering::Relaxed) {
                        log::info!("drain requested: no new connections on any VIP");
                    }
                    Reply::ok(Body::Drain(DrainState {
                        open_connections: open_connections(&controller.stats().total),
                    }))
                    .into()
                }
                other => controller.handle(&other),
            });
            Ok(())
        }
        Err(e) => Err(e),
    };

    stop.store(true, Ordering::Relaxed);
    let _ = drainer.join();
    log::info!("stopping engines");
    metrics_stop.store(true, Ordering::Relaxed);
    if let Some(m) = metrics {
        let _ = m.join();
    }
    engine_stop.store(true, Ordering::Relaxed);
    for h in launched {
        h.wait();
    }
    let _ = relay.join();
    let total = collect_stats(&shared, &slot_names, tsc_hz).total;
    log::info!(
        "final counters: rx {} tx {} arp replies {} icmp echo replies {} drops {}",
        total.rx_packets,
        total.tx_packets,
        total.arp_replies,
        total.icmp_echo_replies,
        total.drops.values().sum::<u64>()
    );
    drop(ports);
    drop(eal);
    log::info!("stopped");
    result
}

/// Connections open (TIME-WAIT is not open).
fn open_connections(total: &CoreStats) -> u64 {
    total.tcp_active
}

/// Serves `GET /metrics` (Prometheus text format) on `listener` until
/// `stop`; one short request at a time (scrapes are seconds apart).
fn serve_metrics(
    listener: &std::net::TcpListener,
    stop: &AtomicBool,
    stats: impl Fn() -> control::api::Stats,
) {
    use std::io::{Read, Write};
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        let mut conn = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
            Err(_) => continue,
        };
        let _ = conn.set_nonblocking(false);
        let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(2)));
        let mut head = Vec::with_capacity(1024);
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
        let (status, body) = if line.starts_with(b"GET /metrics ") || line == b"GET /metrics" {
            ("200 OK", control::metrics::render(&stats()))
        } else {
            ("404 Not Found", "try GET /metrics\n".to_string())
        };
        let _ = write!(
            conn,
            "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(free: u64) -> Machine {
        Machine {
            online_cpus: vec![0, 1],
            free_hugepage_bytes: free,
            hugepages: vec![],
        }
    }

    fn config(extra: &str) -> Config {
        Config::parse(&format!(
            "[eal]\nlcores = [1]\n{extra}\n[[port]]\nname = \"p0\"\ndevice = \"net_af_packet0,iface=veth-dut\"\naddress = \"10.77.0.1/24\"\n"
        ))
        .unwrap()
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn eal_arguments() {
        let p = plan(&config(""), &machine(1 << 30), |_| true).unwrap();
        assert_eq!(p.main_lcore, 0);
        assert_eq!(
            p.eal_args,
            [
                "-l",
                "0,1",
                "--main-lcore=0",
                "--no-pci",
                "--vdev=net_af_packet0,iface=veth-dut",
                "--in-memory"
            ]
        );
        let p = plan(
            &config("args = [\"--file-prefix=x\"]"),
            &machine(1 << 30),
            |_| true,
        )
        .unwrap();
        assert!(!p.eal_args.contains(&"--in-memory".to_string()));
        assert!(p.eal_args.contains(&"--file-prefix=x".to_string()));
        // Without hugepages --in-memory cannot work: --no-huge --no-shconf.
        let p = plan(&config("args = [\"--in-memory\"]"), &machine(0), |_| true).unwrap();
        assert_eq!(&p.eal_args[5..], ["--no-huge", "--no-shconf", "-m", "512"]);
    }

    #[test]
    fn engines_mapped_onto_cpus() {
        let mut c = config("");
        c.eal.lcores = vec![1, 2];
        c.eal.cpus = vec![0, 1];
        let p = plan(&c, &machine(0), |_| true).unwrap();
        assert_eq!(&p.eal_args[..2], ["--lcores=0@0,1@0,2@1", "--main-lcore=0"]);
        assert!(p.control_shares_cpu);
        let big = Machine {
            online_cpus: vec![0, 1, 2, 3],
            ..machine(0)
        };
        c.eal.cpus = vec![2, 3];
        let p = plan(&c, &big, |_| true).unwrap();
        assert_eq!(p.eal_args[0], "--lcores=0@0,1@2,2@3");
        assert!(!p.control_shares_cpu);
        c.eal.cpus = vec![2, 9];
        let e = plan(&c, &big, |_| true).unwrap_err();
        assert_eq!(e.field, "eal.cpus[1]");
    }

    #[test]
    fn machine_checks_name_the_field() {
        let mut c = config("");
        c.eal.lcores = vec![5];
        assert_eq!(
            plan(&c, &machine(0), |_| true).unwrap_err().field,
            "eal.lcores[0]"
        );
        c.eal.lcores = vec![0, 1];
        let e = plan(&c, &machine(0), |_| true).unwrap_err();
        assert!(e.reason.contains("control thread"), "{e}");
        let e = plan(&config(""), &machine(0), |_| false).unwrap_err();
        assert_eq!(e.field, "port[0].device");
        assert!(e.reason.contains("\"veth-dut\" does not exist"), "{e}");
        let e = plan(&config("hugepages = \"required\""), &machine(0), |_| true).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.value.as_str()),
            ("eal.hugepages", "required")
        );
        assert!(
            plan(
                &config("hugepages = \"required\""),
                &machine(2 << 20),
                |_| true
            )
            .unwrap()
            .use_hugepages
        );
        assert!(
            !plan(&config("hugepages = \"off\""), &machine(2 << 20), |_| true)
                .unwrap()
                .use_hugepages
        );
    }
}
