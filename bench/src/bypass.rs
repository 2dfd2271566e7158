//! The kernel-bypass client: dpbench's closed-loop tests (cps, tps, l4cps,
//! rps, throughput) on tlsdp's own stack ([`dataplane::loadgen`]) over a
//! DPDK port instead of kernel sockets, so one client core can drive a
//! dpd core past what the kernel client reaches (docs/bench.md,
//! "Kernel-bypass client").
//!
//! DPDK's EAL starts once per process, on a thread of its own pinned to
//! the first client core; that thread then runs every bypass run in turn
//! (a run is a job sent to it). Each run is a fresh load generator (its
//! own TCP state; source ports start past the previous run's) on the one
//! queue of the port. TLS uses dpbench's rustls client configuration, so
//! `--dangerous-no-verify`, `--tls`, `--group` and `--reuse` mean what
//! they mean for the kernel client. The loop sleeps 20 µs after 256 idle
//! iterations, so the client core's busy share in the report is its work,
//! not its polling.

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crypto::client::LoadClientConfig;
use dataplane::dpdk::{self, Eal, EthPort, EthPortConfig, Mempool, QueueId, TscClock};
use dataplane::loadgen::{LoadConfig, LoadGen, LoadStats};
use dataplane::net::InterfaceConfig;
use dataplane::tcp::TcpConfig;
use smoltcp::wire::EthernetAddress;

use crate::loadgen::{Counter, Counters, Latencies, Load, Negotiated, WorkerResult, Workload};

/// Where the bypass client runs: a DPDK device and our address on it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Bypass {
    /// A DPDK virtual device (`net_memif0,role=client,socket=PATH`,
    /// `net_af_packet0,iface=IFACE`, `net_af_xdp0,iface=IFACE`).
    pub device: String,
    /// The client's first address, its prefix length; the next
    /// `sources - 1` addresses are the client's too.
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    pub sources: u16,
    /// Next hop for a server outside the prefix.
    pub gateway: Option<Ipv4Addr>,
    /// The link's MTU (1500 unless `mtu=` says): TCP offers 40 bytes less.
    pub mtu: u16,
    /// The client core (EAL's lcore).
    pub core: usize,
}

impl Bypass {
    /// `DEVICE` and `ADDR/LEN[,gw=GATEWAY][,sources=N][,mtu=N]` as given on the
    /// command line.
    ///
    /// # Errors
    /// A device that is not a DPDK virtual device, or a bad address.
    pub fn parse(device: &str, addr: &str, core: usize) -> Result<Self, String> {
        let name = device.split(',').next().unwrap_or_default();
        if !name.starts_with("net_") || name.len() <= 4 {
            return Err(format!(
                "--bypass {device:?}: a DPDK virtual device (net_memif0,role=client,socket=PATH or net_af_packet0,iface=IFACE)"
            ));
        }
        let mut parts = addr.split(',');
        let cidr = parts.next().unwrap_or_default();
        let (a, len) = cidr
            .split_once('/')
            .ok_or_else(|| format!("--bypass-addr {addr:?}: ADDR/LEN"))?;
        let addr_v4: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("--bypass-addr {addr:?}: {a:?} is not an IPv4 address"))?;
        let prefix_len: u8 = len
            .parse()
            .ok()
            .filter(|l| (1..=32).contains(l))
            .ok_or_else(|| format!("--bypass-addr {addr:?}: prefix length 1 to 32"))?;
        let mut b = Self {
            device: device.to_string(),
            addr: addr_v4,
            prefix_len,
            sources: 1,
            gateway: None,
            mtu: control::config::DEFAULT_MTU,
            core,
        };
        for p in parts {
            match p.split_once('=') {
                Some(("gw", g)) => {
                    b.gateway = Some(
                        g.parse()
                            .map_err(|_| format!("--bypass-addr: gateway {g:?}"))?,
                    );
                }
                Some(("sources", n)) => {
                    b.sources = n
                        .parse()
                        .ok()
                        .filter(|&n| n >= 1)
                        .ok_or_else(|| format!("--bypass-addr: sources {n:?}"))?;
                }
                Some(("mtu", n)) => {
                    use control::config::{MAX_MTU, MIN_MTU};
                    b.mtu = n
                        .parse()
                        .ok()
                        .filter(|m| (MIN_MTU..=MAX_MTU).contains(m))
                        .ok_or_else(|| {
                            format!("--bypass-addr: mtu {n:?} ({MIN_MTU} to {MAX_MTU})")
                        })?;
                }
                _ => {
                    return Err(format!(
                        "--bypass-addr: unknown {p:?} (gw=, sources=, mtu=)"
                    ))
                }
            }
        }
        Ok(b)
    }
}

/// One run for the bypass thread.
struct Job {
    workload: Workload,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    start: Instant,
    done: mpsc::Sender<io::Result<WorkerResult>>,
}

/// The bypass thread: its device, and where jobs go.
struct Host {
    bypass: Bypass,
    jobs: Mutex<mpsc::Sender<Job>>,
}

static HOST: OnceLock<Result<Host, String>> = OnceLock::new();

/// Runs one closed-loop run of `workload` on the bypass client (starting
/// DPDK and the port on first use) and returns its result, as a kernel
/// worker's [`crate::loadgen::Worker::run`] does.
///
/// # Errors
/// DPDK or the port failed to start, the bypass device differs from the
/// one started, or the test is not one the bypass client runs.
pub fn run(
    bypass: &Bypass,
    workload: Workload,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    start: Instant,
) -> io::Result<WorkerResult> {
    let host = HOST
        .get_or_init(|| start_host(bypass.clone()))
        .as_ref()
        .map_err(|e| io::Error::other(e.clone()))?;
    if host.bypass != *bypass {
        return Err(io::Error::other(
            "one bypass device per dpbench process (DPDK starts once)",
        ));
    }
    let (done, result) = mpsc::channel();
    host.jobs
        .lock()
        .map_err(|_| io::Error::other("bypass thread lost"))?
        .send(Job {
            workload,
            counters,
            stop,
            start,
            done,
        })
        .map_err(|_| io::Error::other("bypass thread ended"))?;
    result
        .recv()
        .map_err(|_| io::Error::other("bypass thread ended"))?
}

/// Starts the bypass thread: EAL (on the client core), the port, then
/// jobs until the process ends.
fn start_host(bypass: Bypass) -> Result<Host, String> {
    let (jobs, inbox) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let b = bypass.clone();
    std::thread::Builder::new()
        .name("dpbench-bypass".into())
        .spawn(move || {
            let (eal, port) = match start_dpdk(&b) {
                Ok(x) => x,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(()));
            for (n, job) in inbox.iter().enumerate() {
                let result = run_job(&b, &port, n, &job);
                let _ = job.done.send(result);
            }
            drop(port);
            drop(eal);
        })
        .map_err(|e| format!("bypass thread: {e}"))?;
    ready_rx
        .recv()
        .map_err(|_| "bypass thread ended at start".to_string())??;
    Ok(Host {
        bypass,
        jobs: Mutex::new(jobs),
    })
}

/// The socket file a memif server in `device` binds, when it names one
/// (`role=server,socket=PATH,socket-abstract=no`).
fn memif_server_socket(device: &str) -> Option<&str> {
    let mut args = device.split(',');
    if !args.next()?.starts_with("net_memif") {
        return None;
    }
    let (mut server, mut socket, mut file) = (true, "/run/memif.sock", false);
    for kv in args {
        match kv.split_once('=') {
            Some(("role", v)) => server = v == "server" || v == "master",
            Some(("socket", v)) => socket = v,
            Some(("socket-abstract", v)) => file = v.contains("no"),
            _ => {}
        }
    }
    (server && file).then_some(socket)
}

/// Removes a memif server's socket file that nothing listens on any more
/// (left by an earlier run: DPDK refuses to bind over it). One in use is
/// left for DPDK to refuse.
fn remove_stale_socket(path: &str) {
    // memif listens with SOCK_SEQPACKET: a stream connect to a live one
    // fails with EPROTOTYPE, to a file with no listener with ECONNREFUSED.
    if let Err(e) = std::os::unix::net::UnixStream::connect(path) {
        if e.kind() == io::ErrorKind::ConnectionRefused {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn start_dpdk(b: &Bypass) -> Result<(Eal, EthPort), String> {
    if let Some(path) = memif_server_socket(&b.device) {
        remove_stale_socket(path);
    }
    let hugepages =
        std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0);
    let mut args = vec![
        "-l".to_string(),
        b.core.to_string(),
        "--no-pci".to_string(),
        format!("--vdev={}", b.device),
        "--log-level=lib.eal:warning".to_string(),
    ];
    if hugepages >= 128 {
        args.push("--in-memory".to_string());
    } else {
        args.extend(["--no-huge", "--no-shconf", "-m", "512"].map(String::from));
    }
    let eal = Eal::init(&args).map_err(|e| format!("bypass: EAL: {e}"))?;
    let name = b.device.split(',').next().unwrap_or_default();
    let id = dpdk::port_id_by_name(name).map_err(|e| format!("bypass: {name}: {e}"))?;
    // Mbufs that hold a whole frame of the link's MTU (DPDK's default
    // data room where it fits).
    let room = (usize::from(b.mtu) + dpdk::FRAME_OVERHEAD + 128 + 256).next_multiple_of(1024);
    let room = u16::try_from(room.max(2176)).unwrap_or(u16::MAX);
    let pool = Mempool::create("dpbench-mbufs", 32767, 256, room, -1)
        .map_err(|e| format!("bypass: mempool: {e}"))?;
    let port = EthPort::start(
        id,
        EthPortConfig {
            queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            mempool: pool,
            checksum_offload: true,
            segmentation: None,
            mtu: b.mtu,
            start_later: false,
        },
    )
    .map_err(|e| format!("bypass: {}: {e}", b.device))?;
    // A memif link comes up once both ends have connected: frames sent
    // before are lost, and the first run's connections would pay for it.
    let t0 = Instant::now();
    while !port.link().up {
        if t0.elapsed() > Duration::from_secs(10) {
            return Err(format!("bypass: {}: link still down after 10 s", b.device));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((eal, port))
}

/// One run: a load generator on the port's queue, the phases' ramp on its
/// concurrency, its counts published into `job.counters` every
/// millisecond or so.
fn run_job(b: &Bypass, port: &EthPort, n: usize, job: &Job) -> io::Result<WorkerResult> {
    let w = &job.workload;
    let IpAddr::V4(server) = w.addr.ip() else {
        return Err(io::Error::other("bypass: IPv4 targets only"));
    };
    let Load::Closed { concurrency } = w.load else {
        return Err(io::Error::other(
            "bypass: closed-loop tests only (cps, tps, l4cps, rps, throughput)",
        ));
    };
    let load = LoadConfig {
        server,
        port: w.addr.port(),
        body: w.expect_body.unwrap_or(0),
        // dpbench's 0: requests until the run ends.
        requests_per_conn: if w.reqs_per_conn == 0 {
            u32::MAX
        } else {
            w.reqs_per_conn
        },
        concurrency: 0,
        total_conns: w.max_conns.unwrap_or(u64::MAX),
        sources: b.sources,
    };
    let tcp = TcpConfig {
        mss: b.mtu - 40,
        max_conns: 1 << 20,
        max_half_open: 1 << 16,
        ..TcpConfig::default()
    };
    let iface = InterfaceConfig {
        mac: EthernetAddress([0; 6]), // the port's
        addr: b.addr,
        prefix_len: b.prefix_len,
        gateway: b.gateway,
    };
    // The engine's clock reads wall-clock time, so TCP timestamps and ISNs
    // rise from one run (and one dpbench process) to the next: a SYN on a
    // 4-tuple the server still holds in TIME-WAIT is then a new connection
    // to it (RFC 6191), as a kernel client's would be.
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let epoch_ns = u64::try_from(epoch.as_nanos()).unwrap_or(0);
    // Source ports start at a place of the clock's choosing, and each run
    // 6,007 past the last one.
    let first_port = 10_000 + ((epoch.as_millis() as u64 / 7 + n as u64 * 6_007) % 50_000) as u16;
    let mut gen = LoadGen::new(port.queue(QueueId(0)), iface, tcp, load)
        .with_target(&w.path, &w.host)
        .with_first_port(first_port);
    if let Some((cfg, _)) = &w.tls {
        gen = gen.with_tls(LoadClientConfig::from_rustls(cfg.clone()));
    }
    let clock = TscClock::new();
    // Engine time never goes back (its TCP timestamps with it).
    let mut engine_time = dataplane::time::MonotonicTime::default();
    let p = w.phases;
    let end = job.start + Duration::from_secs(p.total());
    let grace = end + w.timeout + Duration::from_secs(1);
    let mut published = LoadStats::default();
    let mut last_publish = Instant::now();
    let mut idle = 0u32;
    loop {
        let now = Instant::now();
        let t = now.saturating_duration_since(job.start).as_secs_f64();
        let over = now >= end || job.stop.load(Ordering::Relaxed);
        if over {
            gen.stop_opening();
            if gen.in_flight() == 0 || now >= grace {
                break;
            }
        } else {
            let level = p.level(t);
            gen.set_concurrency((f64::from(concurrency) * level).ceil() as usize);
        }
        let work = gen.poll(engine_time.at(dataplane::time::Instant::from_nanos(
            epoch_ns.saturating_add(clock.now().as_nanos()),
        )));
        if work == 0 {
            idle += 1;
            if idle >= 256 {
                idle = 0;
                std::thread::sleep(Duration::from_micros(20));
            }
        } else {
            idle = 0;
        }
        if now.duration_since(last_publish) >= Duration::from_millis(1) {
            publish(&job.counters, &mut published, gen.stats());
            last_publish = now;
        }
    }
    publish(&job.counters, &mut published, gen.stats());
    // Connections cut off at the end of the run are not errors of the
    // server's (the kernel worker counts none either).
    Ok(WorkerResult {
        lat: Latencies::new(),
        negotiated: Negotiated {
            version: "(bypass client)".into(),
            ..Negotiated::default()
        },
    })
}

/// Adds what `now` has over `published` to the counters dpbench samples.
fn publish(c: &Counters, published: &mut LoadStats, now: LoadStats) {
    let add = |k: Counter, new: u64, old: u64| c.add(k, new.saturating_sub(old));
    add(Counter::Started, now.opened, published.opened);
    add(Counter::Connected, now.handshakes, published.handshakes);
    add(Counter::Handshakes, now.handshakes, published.handshakes);
    add(Counter::Transactions, now.completed, published.completed);
    add(Counter::Requests, now.responses, published.responses);
    add(Counter::BodyBytes, now.body_bytes, published.body_bytes);
    add(Counter::ErrReset, now.failed, published.failed);
    add(Counter::ErrHttp, now.bad_responses, published.bad_responses);
    *published = now;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memif_servers_stale_socket_is_removed_and_a_live_one_kept() {
        assert_eq!(
            memif_server_socket("net_memif0,role=server,socket=/tmp/m.sock,socket-abstract=no"),
            Some("/tmp/m.sock")
        );
        assert_eq!(
            memif_server_socket("net_memif0,socket-abstract=no"),
            Some("/run/memif.sock")
        );
        for none in [
            "net_memif0,role=client,socket=/tmp/m.sock,socket-abstract=no",
            "net_memif0,role=server,socket=m",
            "net_af_packet0,iface=veth0",
        ] {
            assert_eq!(memif_server_socket(none), None, "{none}");
        }
        let dir = std::env::temp_dir().join(format!("dpbench-memif-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let live = dir.join("live.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&live).unwrap();
        remove_stale_socket(live.to_str().unwrap());
        assert!(live.exists(), "a socket someone listens on stays");
        let stale = dir.join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        assert!(stale.exists());
        remove_stale_socket(stale.to_str().unwrap());
        assert!(!stale.exists(), "a socket nothing listens on goes");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bypass_arguments_parse_and_bad_ones_are_named() {
        let b = Bypass::parse(
            "net_memif0,role=client,socket=/tmp/m.sock",
            "10.79.0.2/24,gw=10.79.0.254,sources=8",
            0,
        )
        .unwrap();
        assert_eq!(b.addr, Ipv4Addr::new(10, 79, 0, 2));
        assert_eq!((b.prefix_len, b.sources, b.mtu), (24, 8, 1500));
        let jumbo = Bypass::parse("net_memif0", "10.79.0.2/24,mtu=9000", 0).unwrap();
        assert_eq!(jumbo.mtu, 9000);
        assert_eq!(b.gateway, Some(Ipv4Addr::new(10, 79, 0, 254)));
        for (dev, addr, says) in [
            ("eth0", "10.0.0.2/24", "DPDK virtual device"),
            ("net_memif0", "10.0.0.2", "ADDR/LEN"),
            ("net_memif0", "10.0.0.300/24", "not an IPv4"),
            ("net_memif0", "10.0.0.2/33", "prefix length"),
            (
                "net_memif0",
                "10.0.0.2/24,mtu=9999",
                "mtu \"9999\" (1280 to 9198)",
            ),
            ("net_memif0", "10.0.0.2/24,mss=9000", "unknown"),
        ] {
            let e = Bypass::parse(dev, addr, 0).unwrap_err();
            assert!(e.contains(says), "{dev} {addr}: {e}");
        }
    }
}
