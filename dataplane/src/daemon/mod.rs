//! `dpd`'s start-up and shutdown: checks the configuration against the
//! machine, builds EAL arguments, brings up mempools, ports and one engine
//! per dataplane core, serves the control socket, and stops cleanly (the plan in `plan`, the
//! helper threads in `threads`).

mod metrics_http;
mod plan;
mod threads;

use std::fmt;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use control::api::{ControlSocket, PortStatus};
use control::config::{Config, ConfigError, DeviceKind, SynCookieMode, DEFAULT_MTU};
use smoltcp::wire::EthernetAddress;

pub use plan::{parse_cpu_list, plan, Machine, Plan};
pub(crate) use threads::open_connections;

use crate::controller::{collect_stats, Controller, DaemonInfo, PeerPort};
use crate::dpdk::TscClock;
use crate::dpdk::{
    self, Eal, EthPort, EthPortConfig, LaunchedLcore, LcoreId, Mempool, QueueId, VipIface, VnetTap,
    VnetTapConfig,
};
use crate::engine::{Engine, EngineConfig};
use crate::net::InterfaceConfig;
use crate::port::{DeviceQueue, Port};
use crate::snapshot::{ControlLink, HealthNews, HealthShare, Snapshot};
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
            Self::Control(e) => write!(f, "control socket (control.socket) {e}"),
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

fn mac_string(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A started port and how the engines share it.
struct StartedPort {
    device: Device,
    /// Queue pairs (one per engine where the device has them).
    queues: u16,
    /// Flows spread over the engines in software.
    steered: bool,
}

/// The device under a port.
enum Device {
    /// A DPDK ethdev.
    Eth(EthPort),
    /// tlsdp's tap with virtio-net headers (one queue).
    Tap(VnetTap),
}

impl Device {
    fn mac(&self) -> [u8; 6] {
        match self {
            Device::Eth(p) => p.mac(),
            Device::Tap(t) => t.mac(),
        }
    }

    /// Engine `q`'s queue: the device's queue `q % queues`.
    fn queue(&self, q: u16, queues: u16) -> DeviceQueue {
        match self {
            Device::Eth(p) => DeviceQueue::Eth(p.queue(QueueId(q % queues))),
            Device::Tap(t) => DeviceQueue::Tap(t.handle()),
        }
    }
}

/// The engines, launched on their lcores.
struct Engines {
    launched: Vec<LaunchedLcore>,
    /// Set to stop them.
    stop: Arc<AtomicBool>,
    /// Health news from the engines, for the relay.
    health_news: Arc<crossbeam_queue::ArrayQueue<HealthNews>>,
}

/// The flags `dpd`'s signal handlers set.
#[derive(Debug, Default, Clone)]
pub struct Signals {
    /// SIGINT: stop now.
    pub stop: Arc<AtomicBool>,
    /// SIGTERM: drain, then stop.
    pub term: Arc<AtomicBool>,
    /// SIGHUP: reload the configuration file.
    pub reload: Arc<AtomicBool>,
    /// SIGUSR1: open the connection log's file again (logrotate).
    pub reopen: Arc<AtomicBool>,
}

/// What `dpd --check` looks at beyond the file itself ([`Config::load`]):
/// every certificate and key loads, key permissions are judged, and every
/// VIP's TLS policy builds, exactly as [`run`] does before DPDK starts.
/// The machine (cores, devices, hugepages) is not looked at: that is
/// checked at start, where it runs.
///
/// # Errors
/// The first certificate, key or policy that cannot be used, naming its
/// field (`vip[0].certs[1]`, `cert[2] (web)`, `vip[0].tls`).
pub fn check(cfg: &Config) -> Result<(), ConfigError> {
    // The connection log is looked at, not opened: a check writes nothing
    // (it made the file, and started its writer).
    let mut cfg = cfg.clone();
    if let Some(path) = cfg.log.connections.take() {
        check_conn_log_path(&path)?;
    }
    let engines = cfg.eal.lcores.len();
    let shared = cfg
        .eal
        .lcores
        .iter()
        .map(|&l| (l, Arc::new(SharedCounters::default())))
        .collect();
    Controller::start(
        cfg,
        None,
        ControlLink::new_set(engines),
        shared,
        dpdk::tsc_hz(),
    )
    .map(drop)
}

/// Whether the connection log at `path` could be written, without
/// writing it: an existing file must open for appending, else its folder
/// must exist.
fn check_conn_log_path(path: &Path) -> Result<(), ConfigError> {
    let refuse = |why: String| ConfigError::new("log.connections", path.display(), why);
    if std::fs::symlink_metadata(path).is_ok() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(drop)
            .map_err(|e| refuse(format!("cannot be written: {e}")))
    } else {
        match path.parent().map(std::fs::metadata) {
            Some(Ok(m)) if m.is_dir() => Ok(()),
            _ => Err(refuse("its folder does not exist".into())),
        }
    }
}

/// Runs `dpd` until `stop` is set: the whole life of the daemon, in three
/// parts: bring-up (plan, controller, EAL, ports, engines), serving (the
/// control socket on this thread; metrics, health relay and SIGTERM drain
/// on their own), and an ordered shutdown.
///
/// # Errors
/// When anything fails to start; everything started is stopped again.
///
/// `signals.stop` ends it at once; `term` drains first: listeners stop
/// taking new connections, and it stops when the open ones have finished
/// (TIME-WAIT aside) or after `[control] drain_timeout_s`; `reload` reads
/// `config_path` again and applies it (`Controller::reload_file`).
pub fn run(cfg: &Config, config_path: Option<&Path>, signals: Signals) -> Result<(), StartError> {
    let Signals {
        stop,
        term,
        reload,
        reopen,
    } = signals;
    let started = std::time::Instant::now();
    let machine = Machine::probe();
    log::info!("hugepages: {}", machine.hugepages.join("; "));
    let plan = plan(cfg, &machine, |iface| {
        Path::new("/sys/class/net").join(iface).exists()
    })?;
    if !plan.use_hugepages {
        match cfg.eal.hugepages {
            control::config::HugepagePolicy::Off => log::info!("hugepages off by configuration"),
            _ => log::warn!(
                "{} MiB of hugepages free, fewer than dpd needs (about {} MiB): DPDK runs on normal pages (--no-huge); reserve hugepages for production",
                machine.free_hugepage_bytes >> 20,
                plan::hugepage_need(cfg).div_ceil(1 << 20)
            ),
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
    // The control socket and the metrics endpoint are bound once the
    // configuration is known good (its errors named first), before DPDK:
    // a second dpd given the same configuration stops here, before its
    // EAL, ports and engines could take (and reset) the running one's
    // traffic.
    let socket = ControlSocket::bind(&cfg.control.socket).map_err(StartError::Control)?;
    let metrics = threads::bind_metrics(cfg)?;
    // The announce interface exists only while dpd runs (it goes with the
    // process, however that ends), so routes never outlive the dataplane.
    // Made before DPDK, as the sockets are bound: a second dpd naming the
    // same interface stops here, before its EAL and ports start.
    let announce = match &cfg.routing {
        Some(r) => {
            let iface = VipIface::create(&r.interface)
                .map_err(|e| ConfigError::new("routing.interface", &r.interface, e.to_string()))?;
            log::info!("routing: VIPs this node can serve go on {}", r.interface);
            Some(iface)
        }
        None => None,
    };
    // DPDK's lines (EAL, drivers) in dpd's log format, at their level.
    if let Err(e) = dpdk::route_to_log() {
        log::warn!("DPDK's log lines stay on stderr as they are: {e}");
    }
    // Freed memory stays in the process: no madvise or page fault in the
    // engine loop once the high-water mark is reached.
    dpdk::keep_freed_memory();
    let eal = Eal::init(&plan.eal_args)?;
    log::info!(
        "DPDK {} up; control thread on core {}",
        dpdk::version(),
        plan.main_lcore
    );
    if plan.control_shares_cpu {
        log::warn!("the control thread shares a CPU with an engine (eal.cpus leaves none free)");
    }
    let mut memseg_fds = dpdk::MemsegFds::default();
    let ports = start_ports(cfg, &mut memseg_fds)?;
    let drain = Arc::new(AtomicBool::new(false));
    let engines = launch_engines(&eal, cfg, &ports, &links, &shared, &first, &drain)?;
    log_services(cfg);
    controller.set_daemon(DaemonInfo {
        started,
        lcores: cfg.eal.lcores.clone(),
        ports: ports
            .iter()
            .zip(&cfg.ports)
            .map(|(p, pc)| {
                let id = match &p.device {
                    Device::Eth(e) => Some(e.id()),
                    Device::Tap(_) => None,
                };
                (port_status(p, pc), id)
            })
            .collect(),
        hugepages: machine.hugepages.clone(),
        hugepages_in_use: plan.use_hugepages,
        drain,
        term,
        reload,
        reopen,
        stop: stop.clone(),
        announce,
        peers: peer_ports(cfg, &ports),
        memseg_fds,
    });

    let tsc_hz = dpdk::tsc_hz();
    let slot_names = controller.slot_names();
    let metrics_text = {
        let (shared, slot_names) = (shared.clone(), slot_names.clone());
        let state = controller.config_state();
        move || {
            let stats = collect_stats(&shared, &slot_names, tsc_hz);
            let state = state.read().expect("not poisoned").clone();
            control::metrics::render(&stats, &state)
        }
    };
    let helpers = threads::Helpers::start(metrics, metrics_text, &links, &engines.health_news);
    serve(&socket, &mut controller, &stop);
    stop.store(true, Ordering::Relaxed);
    controller.withdraw_routes();
    helpers.stop();
    shut_down(engines, ports, eal, &shared, &slot_names, tsc_hz);
    Ok(())
}

/// Serves the control socket on this thread until `stop`: every request
/// goes to the controller, and between requests its tick runs (drain
/// phases, SIGTERM, route announcement).
fn serve(socket: &ControlSocket, controller: &mut Controller, stop: &AtomicBool) {
    log::info!("control socket {}", socket.path().display());
    let controller = std::cell::RefCell::new(controller);
    socket.serve_ticking(
        stop,
        |req| controller.borrow_mut().handle(&req),
        || controller.borrow_mut().tick(std::time::Instant::now()),
    );
}

/// Stops what `run` started, in order: engines (they publish their last
/// counters), ports, DPDK.
fn shut_down(
    engines: Engines,
    ports: Vec<StartedPort>,
    eal: Eal,
    shared: &[(u32, Arc<SharedCounters>)],
    slot_names: &crate::controller::SlotNames,
    tsc_hz: u64,
) {
    log::info!("stopping engines");
    engines.stop.store(true, Ordering::Relaxed);
    for h in engines.launched {
        h.wait();
    }
    let total = collect_stats(shared, slot_names, tsc_hz).total;
    log::info!(
        "final counters: rx {} tx {} arp replies {} icmp echo replies {} icmpv6 echo replies {} drops {}",
        total.rx_packets,
        total.tx_packets,
        total.arp_replies,
        total.icmp_echo_replies,
        total.icmpv6_echo_replies,
        total.drops.values().sum::<u64>()
    );
    drop(ports);
    drop(eal);
    log::info!("stopped");
}

/// A bond hands its MTU to every member when it is configured, and DPDK's
/// bonding driver only learns its members' limits then (its own device
/// info reports a jumbo frame before): a member that cannot take the MTU
/// fails the bond's configure with a bare `EINVAL`. Checked here first, so
/// the operator is told which member and what it takes.
fn check_bond_members_take_the_mtu(i: usize, pc: &control::config::Port) -> Result<(), StartError> {
    for m in pc.members() {
        let Ok(DeviceKind::Virtual { name, .. } | DeviceKind::Pci(name)) = m.device_kind() else {
            continue;
        };
        let Ok(id) = dpdk::port_id_by_name(&name) else {
            continue; // the bond's own configure names it
        };
        let info = EthPort::info(id)?;
        let limit = info.mtu_limit();
        if pc.mtu > limit {
            return Err(ConfigError::new(
                format!("port[{i}].mtu"),
                pc.mtu.to_string(),
                format!(
                    "bond member {} (driver {}) takes an MTU of {limit} at most, and a bond's members carry its MTU",
                    m.device, info.driver
                ),
            )
            .into());
        }
    }
    Ok(())
}

/// Starts every configured port with a queue pair per engine (as many
/// as the device has), its mbufs from a mempool of its NUMA socket.
/// Starts every port; a zero-copy memif client's shared memory files are
/// kept in `memseg_fds` before it first connects.
fn start_ports(
    cfg: &Config,
    memseg_fds: &mut dpdk::MemsegFds,
) -> Result<Vec<StartedPort>, StartError> {
    let engines = engine_count(cfg);
    let mut pools = Pools::default();
    let mut ports = Vec::new();
    for (i, pc) in cfg.ports.iter().enumerate() {
        let kind = pc
            .device_kind()
            .map_err(|r| ConfigError::new(format!("port[{i}].device"), &pc.device, r))?;
        let name = match kind {
            DeviceKind::Pci(addr) => addr,
            DeviceKind::Virtual { name, .. } => name,
            DeviceKind::VnetTap { iface, netns } => {
                ports.push(start_vnet_tap(cfg, pc, iface, netns, &mut pools, engines)?);
                continue;
            }
        };
        let id = dpdk::port_id_by_name(&name).map_err(|e| {
            ConfigError::new(
                format!("port[{i}].device"),
                &pc.device,
                format!("DPDK did not probe this device ({e})"),
            )
        })?;
        let info = EthPort::info(id)?;
        check_bond_members_take_the_mtu(i, pc)?;
        let socket = info.socket.max(0);
        let pool = pools.for_mtu(cfg, socket, pc.mtu)?;
        // DPDK 22.11's net_tap offers TSO but cuts in software inside the
        // PMD and refuses a segment whose MSS plus headers exceeds the MTU
        // (so every full-size one): no gain, only loss. Not used there.
        let offered = info.tx_offload_capa & dpdk_sys::consts::RTE_ETH_TX_OFFLOAD_TCP_TSO != 0;
        let unfit = (offered && info.driver == "net_tap")
            .then_some("off (net_tap's TSO refuses full-size segments)");
        let tso = offered && unfit.is_none() && pc.checksum_offload && pc.segmentation_offload;
        let segmentation = if tso {
            Some(pools.large(socket)?)
        } else {
            None
        };
        // One queue pair per engine where the device has them; engines
        // beyond its queues send through the engine that has one.
        let queues = engines
            .min(info.max_rx_queues)
            .min(info.max_tx_queues)
            .max(1);
        if pc.memif_client().is_some_and(|m| m.zero_copy) {
            memseg_fds.keep_new().map_err(|e| {
                ConfigError::new(
                    format!("port[{i}].device"),
                    &pc.device,
                    format!("zero-copy: EAL's memory files cannot be kept ({e})"),
                )
            })?;
        }
        let port = EthPort::start(
            id,
            EthPortConfig {
                queues,
                rx_desc: pc.rx_desc,
                tx_desc: pc.tx_desc,
                mempool: pool,
                checksum_offload: pc.checksum_offload,
                segmentation,
                mtu: pc.mtu,
                start_later: pc.memif_client().is_some(),
            },
        )
        .map_err(|e| e.context(format!("port {} ({})", pc.name, pc.device)))?;
        let link = port.link();
        log::info!(
            "port {} ({}): driver {}, MAC {}, MTU {}, {} queue(s), RSS {} (key {} B, table {}), checksum offload {}, segmentation offload {}, link {}",
            pc.name,
            pc.device,
            info.driver,
            mac_string(port.mac()),
            pc.mtu,
            queues,
            if port.rss() { "on" } else { "off" },
            info.hash_key_size,
            info.reta_size,
            offload_summary(port.offloads(), pc.checksum_offload),
            unfit.map_or_else(|| segmentation_summary(port.segmentation(), pc), str::to_string),
            if link.up {
                "up"
            } else if !port.started() {
                "down (a memif client: it connects once dpd is up, and again whenever its server comes back)"
            } else {
                "down"
            }
        );
        let steered = engines > 1 && !(port.rss() && queues == engines);
        if steered {
            warn_steered(pc, queues, engines);
        }
        ports.push(StartedPort {
            device: Device::Eth(port),
            queues,
            steered,
        });
    }
    Ok(ports)
}

/// Attaches a `vnet_tap` port: one queue, flows spread in software when
/// there are several engines.
fn start_vnet_tap(
    cfg: &Config,
    pc: &control::config::Port,
    iface: String,
    netns: Option<String>,
    pools: &mut Pools,
    engines: u16,
) -> Result<StartedPort, StartError> {
    let socket = 0;
    let segmentation = pc.checksum_offload && pc.segmentation_offload;
    let tap = VnetTap::open(&VnetTapConfig {
        iface,
        netns,
        checksum_offload: pc.checksum_offload,
        segmentation,
        mempool: pools.ordinary(cfg, socket)?,
        large: if segmentation {
            Some(pools.large(socket)?)
        } else {
            None
        },
    })
    .map_err(|e| e.context(format!("port {} ({})", pc.name, pc.device)))?;
    let offloads = Port::checksum_offload(&tap);
    log::info!(
        "port {} ({}): tlsdp vnet_tap, MAC {}, 1 queue, checksum offload {}, segmentation offload {}",
        pc.name,
        pc.device,
        mac_string(tap.mac()),
        if pc.checksum_offload {
            api_offloads(offloads).summary()
        } else {
            "off (checksum_offload = false)".to_string()
        },
        segmentation_summary(tap.segmentation(), pc)
    );
    let steered = engines > 1;
    if steered {
        warn_steered(pc, 1, engines);
    }
    Ok(StartedPort {
        device: Device::Tap(tap),
        queues: 1,
        steered,
    })
}

/// The log's words for a port's TCP segmentation offload.
fn segmentation_summary(frame: Option<usize>, pc: &control::config::Port) -> String {
    match frame {
        Some(frame) => format!("on (up to {frame} B)"),
        None if !pc.segmentation_offload => "off (segmentation_offload = false)".to_string(),
        None if !pc.checksum_offload => "off (checksum_offload = false)".to_string(),
        None => "off (not offered by the device)".to_string(),
    }
}

fn warn_steered(pc: &control::config::Port, queues: u16, engines: u16) {
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

/// The mempools, made as ports need them: one of ordinary mbufs per NUMA
/// socket, one per socket and jumbo MTU for ports whose frames do not fit
/// them, and one of large mbufs (a 64 KiB data room) per socket for
/// ports that cut TCP segments.
#[derive(Default)]
struct Pools {
    ordinary: Vec<(i32, Mempool)>,
    jumbo: Vec<((i32, u16), Mempool)>,
    large: Vec<(i32, Mempool)>,
}

/// Large mbufs per socket: segments of many MSS live from the engine's
/// transmit to the device's write, or a few ms waiting for ARP.
const LARGE_MBUFS: u32 = 511;

impl Pools {
    fn ordinary(&mut self, cfg: &Config, socket: i32) -> Result<Mempool, StartError> {
        if let Some((_, p)) = self.ordinary.iter().find(|(s, _)| *s == socket) {
            return Ok(*p);
        }
        let p = Mempool::create(
            &format!("mbufs-s{socket}"),
            cfg.eal.mbufs,
            256,
            dpdk_sys::consts::RTE_MBUF_DEFAULT_BUF_SIZE as u16,
            socket,
        )?;
        self.ordinary.push((socket, p));
        Ok(p)
    }

    /// Mbufs that hold a frame of `mtu` (with an 802.1Q tag): the ordinary
    /// ones where it fits them, else `eal.mbufs` of a data room to fit.
    fn for_mtu(&mut self, cfg: &Config, socket: i32, mtu: u16) -> Result<Mempool, StartError> {
        let frame = usize::from(mtu) + dpdk::FRAME_OVERHEAD;
        let headroom = dpdk_sys::consts::RTE_PKTMBUF_HEADROOM as usize;
        if frame + headroom <= dpdk_sys::consts::RTE_MBUF_DEFAULT_BUF_SIZE as usize {
            return self.ordinary(cfg, socket);
        }
        if let Some((_, p)) = self.jumbo.iter().find(|(k, _)| *k == (socket, mtu)) {
            return Ok(*p);
        }
        // With 256 bytes to spare, rounded up to a KiB: room for what a
        // driver adds before the frame in its own buffers (af_packet's
        // ring frame header: `framesz` up to the room less 32).
        let room = (frame + headroom + 256).next_multiple_of(1024);
        let p = Mempool::create(
            &format!("mbufs-s{socket}-mtu{mtu}"),
            cfg.eal.mbufs,
            256,
            u16::try_from(room).unwrap_or(u16::MAX),
            socket,
        )?;
        self.jumbo.push(((socket, mtu), p));
        Ok(p)
    }

    fn large(&mut self, socket: i32) -> Result<Mempool, StartError> {
        if let Some((_, p)) = self.large.iter().find(|(s, _)| *s == socket) {
            return Ok(*p);
        }
        let p = Mempool::create(
            &format!("mbufs-large-s{socket}"),
            LARGE_MBUFS,
            32,
            u16::MAX,
            socket,
        )?;
        self.large.push((socket, p));
        Ok(p)
    }
}

/// Engines: one per configured lcore (validated: a few hundred at most).
fn engine_count(cfg: &Config) -> u16 {
    u16::try_from(cfg.eal.lcores.len()).unwrap_or(u16::MAX)
}

/// A port as `dpctl status` shows it (link state filled in when asked).
/// The log's words for a port's checksum offloads.
fn offload_summary(o: crate::dpdk::Offloads, wanted: bool) -> String {
    if !wanted {
        return "off (checksum_offload = false)".to_string();
    }
    let used = control::api::ChecksumOffloads {
        rx_ipv4: o.rx_ipv4_cksum,
        rx_tcp: o.rx_tcp_cksum,
        tx_ipv4: o.tx_ipv4_cksum,
        tx_tcp: o.tx_tcp_cksum,
    };
    let mut s = used.summary();
    if !(o.tx_ipv4_cksum && o.tx_tcp_cksum) {
        s.push_str(" (transmit checksums in software)");
    }
    s
}

/// The ports that connect to their peer (memif clients), for the
/// controller to restart while their link is down.
fn peer_ports(cfg: &Config, ports: &[StartedPort]) -> Vec<PeerPort> {
    ports
        .iter()
        .zip(&cfg.ports)
        .enumerate()
        .filter_map(|(i, (p, pc))| match (&p.device, pc.memif_client()) {
            (Device::Eth(e), Some(client)) => {
                Some(PeerPort::new(i, &pc.name, e.id(), client, e.started()))
            }
            _ => None,
        })
        .collect()
}

fn port_status(p: &StartedPort, pc: &control::config::Port) -> PortStatus {
    let (driver, rss, checksum_offload, segmentation) = match &p.device {
        Device::Eth(e) => {
            let o = e.offloads();
            let used = control::api::ChecksumOffloads {
                rx_ipv4: o.rx_ipv4_cksum,
                rx_tcp: o.rx_tcp_cksum,
                tx_ipv4: o.tx_ipv4_cksum,
                tx_tcp: o.tx_tcp_cksum,
            };
            (
                e.port_info().driver.clone(),
                e.rss(),
                used,
                e.segmentation(),
            )
        }
        Device::Tap(t) => (
            "vnet_tap".to_string(),
            false,
            api_offloads(Port::checksum_offload(t)),
            t.segmentation(),
        ),
    };
    let ipv6 = |net: &control::config::Port| {
        ipv6_config(net).map_or_else(Vec::new, |v6| {
            let link_local = crate::net::ipv6::link_local(EthernetAddress(p.device.mac()));
            std::iter::once(format!("{link_local}/64"))
                .chain(v6.addresses.iter().map(|(a, l)| format!("{a}/{l}")))
                .collect()
        })
    };
    PortStatus {
        name: pc.name.clone(),
        device: pc.device.clone(),
        driver,
        mac: mac_string(p.device.mac()),
        address: pc.cidr().map(|c| c.to_string()).unwrap_or_default(),
        ipv6: ipv6(pc),
        vlans: pc
            .vlans
            .iter()
            .map(|v| {
                let net = pc.vlan_network(v);
                control::api::VlanStatus {
                    id: v.id,
                    address: net.cidr().map(|c| c.to_string()).unwrap_or_default(),
                    ipv6: ipv6(&net),
                }
            })
            .collect(),
        bond_members: pc.bond_members.clone(),
        active_members: None,
        link_up: false,
        speed_mbps: 0,
        queues: p.queues,
        rss,
        steered: p.steered,
        checksum_offload,
        segmentation_max_frame: segmentation.map_or(0, |f| u32::try_from(f).unwrap_or(u32::MAX)),
        mtu: pc.mtu,
        // Filled from the controller's reconnection state at each request.
        memif_client: None,
        // Read from the device at each request.
        device_counts: None,
    }
}

/// A port's IPv6 configuration, when it has IPv6 addresses (checked by
/// the configuration's validation).
fn ipv6_config(pc: &control::config::Port) -> Option<crate::net::Ipv6Config> {
    let addresses: Vec<_> = pc
        .ipv6_cidrs()
        .ok()?
        .into_iter()
        .map(|c| (c.addr, c.prefix_len))
        .collect();
    if addresses.is_empty() {
        return None;
    }
    let gateway = pc.gateway6.as_deref().and_then(|g| g.parse().ok());
    Some(crate::net::Ipv6Config { addresses, gateway })
}

/// A port's checksum offloads as the API shows them.
fn api_offloads(o: crate::port::ChecksumOffload) -> control::api::ChecksumOffloads {
    control::api::ChecksumOffloads {
        rx_ipv4: o.rx_ipv4,
        rx_tcp: o.rx_tcp,
        tx_ipv4: o.tx_ipv4,
        tx_tcp: o.tx_tcp,
    }
}

/// The engines' settings from `[eal]` and `[tcp]`.
fn engine_config(cfg: &Config) -> EngineConfig {
    let secs = |s: u32| Duration::from_secs(u64::from(s));
    let mut e = EngineConfig {
        idle_sleep: (cfg.eal.idle_sleep_us > 0)
            .then(|| Duration::from_micros(u64::from(cfg.eal.idle_sleep_us))),
        ..EngineConfig::default()
    };
    e.tcp.time_wait = secs(cfg.tcp.time_wait_s);
    e.tcp.max_time_wait = cfg.tcp.max_time_wait as usize;
    e.tcp.idle_timeout = secs(cfg.tcp.idle_timeout_s);
    e.tcp.fin_wait2_timeout = secs(cfg.tcp.fin_wait2_timeout_s);
    e.tcp.handshake_timeout = secs(cfg.tcp.handshake_timeout_s);
    e.tcp.keepalive = (cfg.tcp.keepalive_s > 0).then(|| secs(cfg.tcp.keepalive_s));
    e.tcp.max_conns = cfg.tcp.max_connections as usize;
    e.tcp.max_half_open = cfg.tcp.max_half_open as usize;
    e.tcp.buffer_memory = (cfg.tcp.buffer_memory_mib as usize) << 20;
    // The smallest link's MSS (IPv4 and TCP headers, 40 bytes; IPv6 has 20
    // more): TCP's own, for addresses on no larger link (each port's MTU
    // raises it on its addresses: `Engine::set_port_mtu`).
    let mtu = cfg.ports.iter().map(|p| p.mtu).min().unwrap_or(DEFAULT_MTU);
    e.tcp.mss = mtu - 40;
    e.tcp.syn_cookies = match cfg.tcp.syn_cookies {
        SynCookieMode::WhenFull => SynCookies::WhenFull,
        SynCookieMode::Always => SynCookies::Always,
        SynCookieMode::Off => SynCookies::Off,
    };
    e
}

/// Builds one engine per lcore over the ports' queues, gives it the first
/// snapshot and its rings, and launches it. On a failure, the engines
/// already running are stopped.
fn launch_engines(
    eal: &Eal,
    cfg: &Config,
    ports: &[StartedPort],
    links: &[ControlLink],
    shared: &[(u32, Arc<SharedCounters>)],
    first: &Snapshot,
    drain: &Arc<AtomicBool>,
) -> Result<Engines, StartError> {
    let count = engine_count(cfg);
    let stop = Arc::new(AtomicBool::new(false));
    // Each member is health-checked by one engine, which tells the others.
    let (health_shares, health_news) = HealthShare::new_set(count);
    // With several engines they are linked even when every port's NIC
    // spreads the flows: ARP and ND land on one queue, and the other
    // engines learn their neighbours from copies.
    let steer_links = (count > 1).then(|| SteerLink::new_set(count, &dpdk::SYMMETRIC_RSS_KEY));
    let mut engines = Engines {
        launched: Vec::new(),
        stop,
        health_news,
    };
    for (q, &lcore) in cfg.eal.lcores.iter().enumerate() {
        let q16 = u16::try_from(q).unwrap_or(u16::MAX);
        let engine_cfg = EngineConfig {
            index: q,
            ..engine_config(cfg)
        };
        let mut engine = Engine::new(engine_cfg, shared[q].1.clone());
        let mut shares = Vec::new();
        for (p, pc) in ports.iter().zip(&cfg.ports) {
            let own = q16 < p.queues;
            shares.push(PortShare {
                steer: p.steered,
                rx: own,
                tx_via: (!own).then_some(q16 % p.queues),
            });
            let cidr = pc
                .cidr()
                .map_err(|r| ConfigError::new("port.address", &pc.address, r))?;
            let gateway = pc
                .gateway
                .as_deref()
                .and_then(|g| g.parse::<Ipv4Addr>().ok());
            engine.add_port(
                p.device.queue(q16, p.queues),
                InterfaceConfig {
                    mac: EthernetAddress(p.device.mac()),
                    addr: cidr.addr,
                    prefix_len: cidr.prefix_len,
                    gateway,
                },
            );
            let i = shares.len() - 1;
            if let Some(v6) = ipv6_config(pc) {
                engine.enable_ipv6(i, v6);
            }
            for v in &pc.vlans {
                let net = pc.vlan_network(v);
                let Ok(cidr) = net.cidr() else { continue };
                let gateway = net.gateway.as_deref().and_then(|g| g.parse().ok());
                let iface = InterfaceConfig {
                    mac: EthernetAddress(p.device.mac()),
                    addr: cidr.addr,
                    prefix_len: cidr.prefix_len,
                    gateway,
                };
                engine.add_vlan(i, v.id, iface, ipv6_config(&net));
            }
            engine.set_port_mtu(i, pc.mtu);
            if q == 0 {
                engine.join_ipv6_groups(i);
            }
        }
        if let Some(links) = &steer_links {
            engine.set_steering(links[q].clone(), &shares);
        }
        if count > 1 {
            engine.set_health_share(health_shares[q].clone());
        }
        engine.apply(first);
        engine.set_control(links[q].clone());
        let (stop, drain) = (engines.stop.clone(), drain.clone());
        let launched = eal.launch(LcoreId(lcore), move || {
            let clock = TscClock::new();
            engine.run(&clock, &stop, &drain);
            0
        });
        match launched {
            Ok(handle) => engines.launched.push(handle),
            Err(e) => {
                engines.stop.store(true, Ordering::Relaxed);
                for h in engines.launched {
                    h.wait();
                }
                return Err(e.into());
            }
        }
        log::info!("engine {q} running on core {lcore}");
    }
    Ok(engines)
}

/// Logs the VIPs and pools being served (once, at start).
fn log_services(cfg: &Config) {
    for vip in &cfg.vips {
        let tls = if vip.certs.is_empty() { "" } else { "TLS, " };
        match &vip.pool {
            Some(p) => log::info!("vip {}: {} → {tls}pool {p}", vip.name, vip.listen),
            None => log::info!("vip {}: {} → {tls}built-in responder", vip.name, vip.listen),
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
