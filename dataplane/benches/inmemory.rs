//! In-memory engine benchmark (not a test): the kernel-bypass load
//! generator and the engine's responder on one thread over the in-memory
//! link, real time. The engine's own busy time is measured apart from the
//! generator's, so the figures are the server engine's cost per core.
//!
//!   cargo bench -p dataplane --bench inmemory [-- CONNS]
//!   cargo bench -p dataplane --bench inmemory -- --tls [CONNS]
//!   cargo bench -p dataplane --bench inmemory -- --tls --rps
//!   cargo bench -p dataplane --bench inmemory -- --tls --cps [CONNS]
//!   cargo bench -p dataplane --bench inmemory -- --hold [--tls] CONNS
//!   cargo bench -p dataplane --bench inmemory -- --scale [--tls] [MAX_ENGINES]
//!   cargo bench -p dataplane --bench inmemory -- --steer
//!   cargo bench -p dataplane --bench inmemory -- --defaults [--split] [--reuse] [CONNS]
//!
//! `--deny N` (with any of these) gives the server an `[access] deny` list
//! of N networks, none of them the generator's, of three prefix lengths
//! (/32, /24, /16): what each SYN's look-up costs.
//!
//! `--conn-log` (with any of these) turns the connection log on in the
//! server (`[log] connections`) and reports what formatting its lines
//! costs the writer thread.
//!
//! `--offload` (with any of these) joins engine and generator by a link
//! that fills and checks IPv4 and TCP checksums as a NIC does, so the
//! engine leaves them to the port as `dpd` does on such a NIC.
//! `--split` runs the generator on CPU 0 and the server on CPU 1
//! (`perf record` of the server alone). `--defaults` also reports the
//! server's longest poll (a stall of the engine loop); `--no-thp` turns
//! transparent huge pages off for the process, so that first touches of
//! heap memory do not add 2 MiB page zeroing to those stalls.
//!
//! `--scale` runs 1, 2, 4 ... engines at once, each on its own thread with
//! its own generator and in-memory link (share-nothing, as in `dpd`: each
//! engine its own copy of the TLS configuration, or with `--shared-tls` one
//! for all), and reports connections/s per engine and the scaling
//! efficiency.

use std::net::Ipv4Addr;
use std::sync::Arc;

use crypto::client::LoadClientConfig;
use crypto::session::TlsConfig;
use crypto::testcert::{self_signed, P256, RSA2048};
use dataplane::dpdk::TscClock;
use dataplane::engine::{Engine, EngineConfig};
use dataplane::loadgen::{LoadConfig, LoadGen};
use dataplane::net::InterfaceConfig;
use dataplane::port::{link, link_with_offload, MemPort};
use dataplane::stats::SharedCounters;
use dataplane::tcp::TcpConfig;
use smoltcp::wire::EthernetAddress;

/// The allocator `dpd` runs with.
#[global_allocator]
static ALLOCATOR: dataplane::Allocator = dataplane::Allocator;

const SRV: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const CLI: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);

struct Result {
    conns: u64,
    responses: u64,
    bytes: u64,
    server_s: f64,
    client_s: f64,
    wall_s: f64,
    /// After the server's TIME-WAIT table first reached its bound (when
    /// it did): connections it accepted since, and its busy seconds.
    steady: Option<(u64, f64)>,
    /// The server's polls: the longest one, and how many took over 100 µs
    /// (a stall that long overflows a NIC's receive ring at line rate).
    stalls: Stalls,
}

/// The longest of the server engine's polls, and how many were long.
#[derive(Default, Clone, Copy)]
struct Stalls {
    longest_ticks: u64,
    over_100us: u64,
    /// Ticks in 100 µs.
    limit: u64,
    hz: f64,
}

impl Stalls {
    fn new(hz: u64) -> Self {
        Self {
            limit: hz / 10_000,
            hz: hz as f64,
            ..Self::default()
        }
    }

    fn note(&mut self, ticks: u64) {
        self.longest_ticks = self.longest_ticks.max(ticks);
        self.over_100us += u64::from(ticks > self.limit);
    }

    fn longest_us(&self) -> f64 {
        self.longest_ticks as f64 * 1e6 / self.hz
    }
}

/// Watches the server for its steady state and notes its accepted count
/// and busy ticks when it begins: its TIME-WAIT table at its bound (full
/// and recycling) and its timer wheel past its first turn (each slot's
/// vector grown to what the rate needs), so its memory is all touched.
/// Before that, first touches of fresh memory (page faults, vectors
/// growing) are a fifth of the server's time.
struct SteadyMark {
    bound: u64,
    /// Clock ticks at which the wheel has turned once (and a second more).
    warm_at: u64,
    at: Option<(u64, u64)>,
    polls: u32,
}

impl SteadyMark {
    fn new(tcp: &TcpConfig, clock: &TscClock, start: u64) -> Self {
        let warm = dataplane::tcp::TIMER_TURN + std::time::Duration::from_secs(1);
        Self {
            bound: tcp.max_time_wait as u64,
            warm_at: start + (warm.as_secs_f64() * clock.hz() as f64) as u64,
            at: None,
            polls: 0,
        }
    }

    /// Looks every 1,024 calls (outside the timed polls).
    fn check(&mut self, server: &Engine<MemPort>, srv_ticks: u64, now_ticks: u64) {
        self.polls = self.polls.wrapping_add(1);
        if self.at.is_some() || !self.polls.is_multiple_of(1024) {
            return;
        }
        let t = server.tcp().counters();
        if t.time_wait >= self.bound && now_ticks >= self.warm_at {
            self.at = Some((t.accepted, srv_ticks));
        }
    }

    fn steady(&self, server: &Engine<MemPort>, srv_ticks: u64, hz: f64) -> Option<(u64, f64)> {
        let (accepted, ticks) = self.at?;
        let conns = server.tcp().counters().accepted - accepted;
        (conns > 0).then(|| (conns, (srv_ticks - ticks) as f64 / hz))
    }
}

/// RSA-2048 and ECDSA P-256 certificates, default policy: this engine's
/// own copy of the one configuration, as each of dpd's engines has
/// (`app::config::TlsCopies`), or with `--shared-tls` that configuration
/// itself, shared by every engine (as dpd's engines were before).
fn tls_config() -> TlsConfig {
    let one = SHARED_TLS.get_or_init(make_tls_config);
    if std::env::args().any(|a| a == "--shared-tls") {
        one.clone()
    } else {
        one.own_copy()
    }
}

/// The one TLS configuration the engines' copies are made from.
static SHARED_TLS: std::sync::OnceLock<TlsConfig> = std::sync::OnceLock::new();

fn make_tls_config() -> TlsConfig {
    let dir = tempfile::tempdir().unwrap();
    let mut store = crypto::certs::CertStore::new();
    store.add(self_signed(dir.path(), "rsa", RSA2048, "tlsdp.test"));
    store.add(self_signed(dir.path(), "ec", P256, "tlsdp.test"));
    TlsConfig::new(store).unwrap()
}

/// The engine (responder on SRV:80) and the load generator over one
/// in-memory link; both allow `max_conns` connections. A /8 subnet leaves
/// room for many generator source addresses. With `tls`, SRV:443 is a TLS
/// VIP and the generator speaks TLS with these settings.
fn setup_with(
    load: LoadConfig,
    max_conns: usize,
    tls: Option<LoadClientConfig>,
) -> (Engine<MemPort>, LoadGen<MemPort>) {
    let tcp = TcpConfig {
        max_conns,
        ..TcpConfig::default()
    };
    setup_tcp(load, tcp, tls)
}

/// [`setup_with`] with the server's whole `[tcp]` configuration.
fn setup_tcp(
    load: LoadConfig,
    tcp: TcpConfig,
    tls: Option<LoadClientConfig>,
) -> (Engine<MemPort>, LoadGen<MemPort>) {
    let iface = |addr| InterfaceConfig {
        mac: EthernetAddress([0; 6]),
        addr,
        prefix_len: 8,
        gateway: None,
    };
    // With `--offload` the link fills and checks checksums as a NIC does.
    let make = if std::env::args().any(|a| a == "--offload") {
        link_with_offload
    } else {
        link
    };
    let (a, b) = make(
        EthernetAddress([2, 0, 0, 0, 1, 1]),
        EthernetAddress([2, 0, 0, 0, 1, 2]),
        8192,
        65536,
    );
    let mut server = Engine::new(
        EngineConfig {
            tcp,
            ..EngineConfig::default()
        },
        Arc::new(SharedCounters::default()),
    );
    server.add_port(a, iface(SRV));
    server.listen(SRV, 80);
    if let Some(n) = arg_after("--deny") {
        // Spread over the address space, but never the generator's 10/8.
        let nets = (0..n).map(|i: u32| {
            let len = [32u8, 24, 16][(i % 3) as usize];
            let mut a = i.wrapping_mul(0x9e37_79b9) & (u32::MAX << (32 - u32::from(len)));
            if a >> 24 == 10 {
                a ^= 1 << 24;
            }
            (std::net::IpAddr::V4(Ipv4Addr::from(a)), len)
        });
        server.set_deny(Arc::new(dataplane::net::PrefixSet::new(nets)));
    }
    // The generator closes second: it holds no TIME-WAIT, and its own
    // limit never gets in the way of the server's.
    let client_tcp = TcpConfig {
        max_conns: 1 << 20,
        ..tcp
    };
    let mut client = LoadGen::new(b, iface(CLI), client_tcp, load);
    if let Some(t) = tls {
        server.listen_tls(SRV, 443, tls_config());
        client = client.with_tls(t);
    }
    (server, client)
}

fn run(load: LoadConfig) -> Result {
    run_with(load, None)
}

fn run_with(load: LoadConfig, tls: Option<LoadClientConfig>) -> Result {
    let tcp = TcpConfig {
        max_conns: 1 << 20,
        ..TcpConfig::default()
    };
    run_tcp(load, tcp, tls).0
}

/// [`run_with`] with the server's `[tcp]` settings; also returns the
/// server engine at the end.
fn run_tcp(
    load: LoadConfig,
    tcp: TcpConfig,
    tls: Option<LoadClientConfig>,
) -> (Result, Engine<MemPort>) {
    let tcp_cfg = tcp;
    let (mut server, mut client) = setup_tcp(load, tcp, tls);
    let clock = TscClock::new();
    let mut conn_log = ConnLogSink::new(&mut server);
    let (mut srv_ticks, mut cli_ticks) = (0u64, 0u64);
    let start = clock.ticks();
    let mut mark = SteadyMark::new(&tcp_cfg, &clock, start);
    let debug = std::env::var_os("INMEMORY_DEBUG").is_some();
    let (mut idle, mut polls, mut last) = (0u64, 0u64, 0u64);
    let mut stalls = Stalls::new(clock.hz());
    while !client.done() {
        let t0 = clock.ticks();
        let a = client.poll(clock.at(t0));
        let t1 = clock.ticks();
        let b = server.poll(clock.at(t1));
        let t2 = clock.ticks();
        // Busy time only, as dpd counts it (`busy_cycles`): a poll that
        // found nothing to do is idle time (waiting on the generator, an
        // ARP reply, a retransmission timer), not the cost of connections.
        if a > 0 {
            cli_ticks += t1 - t0;
        }
        if b > 0 {
            srv_ticks += t2 - t1;
        }
        stalls.note(t2 - t1);
        if debug && t2 - t1 > stalls.limit {
            let c = server.tcp().counters();
            eprintln!(
                "stall {:.0} µs: TIME-WAIT {}, accepted {}",
                (t2 - t1) as f64 * 1e6 / stalls.hz,
                c.time_wait,
                c.accepted
            );
        }
        mark.check(&server, srv_ticks, t2);
        if let Some(log) = &mut conn_log {
            log.take(&clock);
        }
        polls += 1;
        if a + b == 0 {
            idle += 1;
        }
        if debug && client.stats().responses != last {
            last = client.stats().responses;
            if last % 50 == 0 {
                eprintln!(
                    "{last} responses at {:?}, polls {polls} idle {idle}",
                    clock.at(t2).as_nanos() / 1000
                );
            }
        }
    }
    let hz = clock.hz() as f64;
    if std::env::var_os("INMEMORY_DEBUG").is_some() {
        eprintln!(
            "server tcp {:?}\nserver engine {:?}\nclient tcp {:?}",
            server.tcp().counters(),
            server.counters(),
            client.tcp().counters()
        );
    }
    let wall = clock.ticks() - start;
    if let Some(log) = &mut conn_log {
        log.take(&clock);
        log.report(&server, hz);
    }
    let mut r = result(&client, srv_ticks, cli_ticks, wall, hz);
    r.steady = mark.steady(&server, srv_ticks, hz);
    r.stalls = stalls;
    (r, server)
}

/// With `--conn-log`: the server records each connection's end
/// (`[log] connections`), and the bench takes the records as dpd's writer
/// thread does (one JSON line each, into a buffer that stands for the
/// file), outside the server's time, timing that work apart.
struct ConnLogSink {
    queues: Arc<dataplane::app::conn_log::ConnLogQueues>,
    lines: Vec<u8>,
    clock: dataplane::app::conn_log::LineClock,
    records: u64,
    bytes: u64,
    ticks: u64,
}

impl ConnLogSink {
    fn new(server: &mut Engine<MemPort>) -> Option<Self> {
        if !std::env::args().any(|a| a == "--conn-log") {
            return None;
        }
        let queues = Arc::new(dataplane::app::conn_log::ConnLogQueues::new(1));
        server.log_connections(Some(queues.clone()));
        Some(Self {
            queues,
            lines: Vec::with_capacity(1 << 20),
            clock: dataplane::app::conn_log::LineClock::default(),
            records: 0,
            bytes: 0,
            ticks: 0,
        })
    }

    /// Formats what is queued, once a batch has gathered.
    fn take(&mut self, clock: &TscClock) {
        let Some(q) = self.queues.of(0) else { return };
        if q.len() < 1024 && !q.is_empty() && self.records > 0 {
            return;
        }
        let t0 = clock.ticks();
        self.lines.clear();
        let (lines, records, line_clock) = (&mut self.lines, &mut self.records, &mut self.clock);
        self.queues.drain(|r| {
            r.write_json_line("plain", line_clock, lines);
            *records += 1;
        });
        self.bytes += self.lines.len() as u64;
        self.ticks += clock.ticks() - t0;
    }

    fn report(&self, server: &Engine<MemPort>, hz: f64) {
        let c = server.counters();
        println!(
            "      connection log: {} records ({} dropped), {:.0} bytes a line; the writer's formatting {:.0} ns a line = {:.0} lines/s on one core",
            self.records,
            c.conn_log_dropped,
            self.bytes as f64 / self.records.max(1) as f64,
            self.ticks as f64 * 1e9 / hz / self.records.max(1) as f64,
            self.records as f64 * hz / self.ticks.max(1) as f64
        );
    }
}

/// A finished run's figures from the generator's count and the ticks
/// each side was busy; no connection may have failed.
fn result(client: &LoadGen<MemPort>, srv_ticks: u64, cli_ticks: u64, wall: u64, hz: f64) -> Result {
    let s = client.stats();
    assert_eq!(s.failed, 0, "{s:?}");
    Result {
        conns: s.completed,
        responses: s.responses,
        bytes: s.body_bytes,
        server_s: srv_ticks as f64 / hz,
        client_s: cli_ticks as f64 / hz,
        wall_s: wall as f64 / hz,
        steady: None,
        stalls: Stalls::default(),
    }
}

/// CPS with the default `[tcp]` settings (65,536 connections, 262,144
/// TIME-WAIT entries) and more connections than TIME-WAIT holds: the
/// server closes first, so its TIME-WAIT table fills and recycles, and no
/// SYN may be refused.
/// With `sources` client addresses: 64 by default; 4 (`--reuse`) give
/// about as many 4-tuples as TIME-WAIT holds, so clients' ports come
/// round while their entries are there and each new SYN reopens one (a
/// hole in the table's ring, with the table near its bound).
fn cps_defaults(conns: u64, split: bool, sources: u16) {
    let load = LoadConfig {
        server: SRV,
        port: 80,
        body: 64,
        requests_per_conn: 1,
        concurrency: 256,
        total_conns: conns,
        sources,
    };
    let (r, server) = if split {
        run_split(load, TcpConfig::default())
    } else {
        run_tcp(load, TcpConfig::default(), None)
    };
    let t = server.tcp().counters();
    println!(
        "CPS   {} connections from {} addresses, default [tcp]: server engine {:.0} ns/connection = {:.0} connections/s per core; TIME-WAIT {} (bound {}), {} recycled, {} SYNs refused; server state {} MiB; wall {:.2} s",
        r.conns,
        sources,
        r.server_s * 1e9 / r.conns as f64,
        r.conns as f64 / r.server_s,
        t.time_wait,
        TcpConfig::default().max_time_wait,
        t.time_wait_recycled,
        t.syn_dropped,
        server.state_bytes() >> 20,
        r.wall_s
    );
    match r.steady {
        Some((n, secs)) => println!(
            "      steady, TIME-WAIT at its bound and the timer wheel past its first turn (the last {n} connections, memory all touched): server engine {:.0} ns/connection = {:.0} connections/s per core",
            secs * 1e9 / n as f64,
            n as f64 / secs
        ),
        None => println!(
            "      no steady state (TIME-WAIT at its bound, the timer wheel past its first turn, 5.1 s): run more connections"
        ),
    }
    println!(
        "      server polls: longest {:.0} µs, {} over 100 µs",
        r.stalls.longest_us(),
        r.stalls.over_100us
    );
    assert_eq!(t.syn_dropped, 0, "TIME-WAIT refused connections");
}

/// [`run_tcp`] with the generator on its own thread (CPU 0) and the
/// server on this one (CPU 1), as a server and its clients run apart:
/// `perf record -C 1` then profiles the server alone, and the generator's
/// work no longer shares the server's caches. Frames cross cores.
fn run_split(load: LoadConfig, tcp: TcpConfig) -> (Result, Engine<MemPort>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let tcp_cfg = tcp;
    let (mut server, client) = setup_tcp(load, tcp, None);
    let done = AtomicBool::new(false);
    let clock = TscClock::new();
    let pin = |cpu: usize| {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and
        // sched_setaffinity only read and write that set.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    };
    let start = clock.ticks();
    let mut mark = SteadyMark::new(&tcp_cfg, &clock, start);
    let (mut srv_ticks, mut cli_ticks) = (0u64, 0u64);
    let mut stalls = Stalls::new(clock.hz());
    let client = std::thread::scope(|s| {
        let gen = s.spawn(|| {
            pin(0);
            let mut client = client;
            let mut ticks = 0u64;
            while !client.done() {
                let t0 = clock.ticks();
                if client.poll(clock.at(t0)) > 0 {
                    ticks += clock.ticks() - t0;
                }
            }
            done.store(true, Ordering::Release);
            (client, ticks)
        });
        pin(1);
        while !done.load(Ordering::Acquire) {
            let t1 = clock.ticks();
            let n = server.poll(clock.at(t1));
            let t2 = clock.ticks();
            if n > 0 {
                srv_ticks += t2 - t1;
            }
            stalls.note(t2 - t1);
            mark.check(&server, srv_ticks, t2);
        }
        let (client, ticks) = gen.join().expect("generator thread");
        cli_ticks = ticks;
        client
    });
    let hz = clock.hz() as f64;
    let wall = clock.ticks() - start;
    let mut r = result(&client, srv_ticks, cli_ticks, wall, hz);
    r.steady = mark.steady(&server, srv_ticks, hz);
    r.stalls = stalls;
    (r, server)
}

/// Opens `conns` connections and holds them idle; reports the server
/// engine's connection state per connection.
/// Bytes malloc has handed out and not taken back (Rust and C: AWS-LC
/// allocates its key contexts with malloc).
fn malloc_in_use() -> usize {
    // SAFETY: mallinfo2 has no preconditions; it reads allocator totals.
    unsafe { libc::mallinfo2() }.uordblks
}

fn hold(conns: u64, tls: bool) {
    let sources = conns.div_ceil(50_000).max(1) as u16;
    let load = LoadConfig {
        server: SRV,
        port: if tls { 443 } else { 80 },
        body: 0,
        requests_per_conn: 0,
        concurrency: 512,
        total_conns: conns,
        sources,
    };
    let client_tls = tls.then(|| LoadClientConfig::new(true, true));
    let (mut server, mut client) = setup_with(load, conns as usize + 1024, client_tls);
    let clock = TscClock::new();
    let start = clock.ticks();
    // Heap growth during the server's polls only: its own state.
    let mut server_heap: isize = 0;
    let mut stalls = Stalls::new(clock.hz());
    let mut server_poll = |server: &mut Engine<MemPort>, now| {
        let before = malloc_in_use() as isize;
        let t0 = clock.ticks();
        server.poll(now);
        stalls.note(clock.ticks() - t0);
        server_heap += malloc_in_use() as isize - before;
    };
    while !client.done() || (tls && server.counters().tls_handshakes < conns) {
        client.poll(clock.now());
        server_poll(&mut server, clock.now());
    }
    for _ in 0..100 {
        client.poll(clock.now());
        server_poll(&mut server, clock.now());
    }
    let wall = (clock.ticks() - start) as f64 / clock.hz() as f64;
    // Held idle for a while: the server's busy time is its timers' (each
    // idle connection's next entry, at most `HORIZON` ahead).
    let idle_start = clock.ticks();
    let idle_ticks = HOLD_IDLE_S * clock.hz();
    let mut busy_ticks = 0;
    while clock.ticks() - idle_start < idle_ticks {
        client.poll(clock.now());
        let t0 = clock.ticks();
        if server.poll(clock.at(t0)) > 0 {
            busy_ticks += clock.ticks() - t0;
        }
    }
    let t = server.tcp().counters();
    let bytes = server.state_bytes();
    println!(
        "HOLD  {} connections established and held idle ({} source addresses) in {:.1} s: server state {} MiB = {} bytes per connection, {} data buffers in use",
        t.active,
        sources,
        wall,
        bytes >> 20,
        bytes / t.active.max(1) as usize,
        server.tcp().buffers().in_use()
    );
    let (tls_conns, tls_buffered) = server.tls_buffers();
    println!(
        "HOLD  server heap grew {} MiB while holding = {} bytes per connection (malloc, Rust and AWS-LC); {} TLS connections with {} bytes in buffers",
        server_heap >> 20,
        server_heap / t.active.max(1) as isize,
        tls_conns,
        tls_buffered
    );
    println!(
        "      server polls: longest {:.0} µs, {} over 100 µs",
        stalls.longest_us(),
        stalls.over_100us
    );
    println!(
        "HOLD  held idle {HOLD_IDLE_S} s: server busy {:.3} % of a core = {:.0} ns per held connection per second",
        100.0 * busy_ticks as f64 / idle_ticks as f64,
        busy_ticks as f64 * 1e9 / clock.hz() as f64 / HOLD_IDLE_S as f64 / t.active.max(1) as f64
    );
}

/// Seconds `--hold` keeps its connections idle after opening them.
const HOLD_IDLE_S: u64 = 10;

fn main() {
    // As in dpd: freed memory is kept (no purge, no refault).
    dataplane::dpdk::keep_freed_memory();
    if std::env::args().any(|a| a == "--no-thp") {
        // First touches of heap memory then fault 4 KiB pages, not 2 MiB
        // ones: a poll's stall is the engine's own work (on this VM
        // zeroing one transparent huge page took ~7 ms).
        // SAFETY: PR_SET_THP_DISABLE takes integer arguments and sets a
        // flag of this process.
        if unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0 {
            eprintln!(
                "--no-thp: prctl failed: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    // The first number that is not `--deny`'s.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let conns: u64 = args
        .iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || args[i - 1] != "--deny")
        .find_map(|(_, a)| a.parse().ok())
        .unwrap_or(200_000);
    let tls = std::env::args().any(|a| a == "--tls");
    if std::env::args().any(|a| a == "--steer") {
        steer_cost();
        return;
    }
    if std::env::args().any(|a| a == "--scale") {
        let max = std::env::args()
            .skip(1)
            .find_map(|a| a.parse().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        scale(max, tls);
        return;
    }
    println!("in-memory engine benchmark (one thread; server engine time measured apart from the generator)\n");
    if std::env::args().any(|a| a == "--hold") {
        // cargo bench -p dataplane --bench inmemory -- --hold 1000000
        hold(conns, tls);
        return;
    }
    if tls && std::env::args().any(|a| a == "--rps") {
        // cargo bench -p dataplane --bench inmemory -- --tls --rps
        tls_rps();
        return;
    }
    if tls {
        // cargo bench -p dataplane --bench inmemory -- --tls --cps 2000
        let handshakes_only = std::env::args().any(|a| a == "--cps");
        tls_runs(conns, handshakes_only);
        if handshakes_only {
            return;
        }
        tls_rps();
        return;
    }
    if std::env::args().any(|a| a == "--defaults") {
        // cargo bench -p dataplane --bench inmemory -- --defaults 3000000
        let sources = if std::env::args().any(|a| a == "--reuse") {
            4
        } else {
            64
        };
        cps_defaults(conns, std::env::args().any(|a| a == "--split"), sources);
        return;
    }
    let r = run(LoadConfig {
        server: SRV,
        port: 80,
        body: 64,
        requests_per_conn: 1,
        concurrency: 256,
        total_conns: conns,
        sources: 1,
    });
    println!(
        "CPS   {} connections (open, GET 64 B, close): server engine {:.0} ns/connection = {:.0} connections/s per core; generator {:.0} ns/connection; wall {:.2} s",
        r.conns,
        r.server_s * 1e9 / r.conns as f64,
        r.conns as f64 / r.server_s,
        r.client_s * 1e9 / r.conns as f64,
        r.wall_s
    );
    // One client address: its ports come round again, so SYNs reopen
    // TIME-WAIT entries and leave holes in the table's ring.
    println!(
        "      server polls: longest {:.0} µs, {} over 100 µs",
        r.stalls.longest_us(),
        r.stalls.over_100us
    );
    let r = run(LoadConfig {
        server: SRV,
        port: 80,
        body: 1 << 20,
        requests_per_conn: 50,
        concurrency: 16,
        total_conns: 16,
        sources: 1,
    });
    let mb = r.bytes as f64 / (1 << 20) as f64;
    println!(
        "BULK  {} x 1 MiB responses over keep-alive: server engine {:.0} µs/MiB = {:.2} Gbit/s per core; generator {:.0} µs/MiB; wall {:.2} s",
        r.responses,
        r.server_s * 1e6 / mb,
        r.bytes as f64 * 8.0 / r.server_s / 1e9,
        r.client_s * 1e6 / mb,
        r.wall_s
    );
}

/// TLS through the engine: full handshakes (HTTP/1.0-style, 1 KB, close)
/// per key type and version, then 1 MiB responses over keep-alive unless
/// `handshakes_only` (`--tls --cps`, the run to count instructions per
/// handshake under callgrind).
fn tls_runs(conns: u64, handshakes_only: bool) {
    let conns = conns.min(20_000);
    for (name, tls13, ecdsa) in [
        ("ECDSA-P256 TLS1.3", true, true),
        ("ECDSA-P256 TLS1.2", false, true),
        ("RSA-2048   TLS1.3", true, false),
        ("RSA-2048   TLS1.2", false, false),
    ] {
        let n = if ecdsa { conns } else { conns / 4 };
        let r = run_with(
            LoadConfig {
                server: SRV,
                port: 443,
                body: 1024,
                requests_per_conn: 1,
                concurrency: 64,
                total_conns: n,
                sources: 1,
            },
            Some(LoadClientConfig::new(tls13, ecdsa)),
        );
        println!(
            "TLS CPS  {name} {} connections (handshake, GET 1 KB, close): server engine {:.1} µs/connection = {:.0} connections/s per core; generator {:.1} µs/connection",
            r.conns,
            r.server_s * 1e6 / r.conns as f64,
            r.conns as f64 / r.server_s,
            r.client_s * 1e6 / r.conns as f64,
        );
    }
    if handshakes_only {
        return;
    }
    let r = run_with(
        LoadConfig {
            server: SRV,
            port: 443,
            body: 1 << 20,
            requests_per_conn: 50,
            concurrency: 16,
            total_conns: 16,
            sources: 1,
        },
        Some(LoadClientConfig::new(true, true)),
    );
    let mb = r.bytes as f64 / (1 << 20) as f64;
    println!(
        "TLS BULK {} x 1 MiB responses over keep-alive (TLS 1.3, AES-128-GCM): server engine {:.0} µs/MiB = {:.2} Gbit/s per core; generator {:.0} µs/MiB",
        r.responses,
        r.server_s * 1e6 / mb,
        r.bytes as f64 * 8.0 / r.server_s / 1e9,
        r.client_s * 1e6 / mb,
    );
}

/// Small requests over TLS keep-alive connections: the per-request path
/// (records in and out, the responder, buffers), no handshakes to speak of.
fn tls_rps() {
    let r = run_with(
        LoadConfig {
            server: SRV,
            port: 443,
            body: 64,
            requests_per_conn: 2_000,
            concurrency: 16,
            total_conns: 16,
            sources: 1,
        },
        Some(LoadClientConfig::new(true, true)),
    );
    println!(
        "TLS RPS  {} requests (GET 64 B) over 16 keep-alive connections (TLS 1.3, AES-128-GCM): server engine {:.2} µs/request = {:.0} requests/s per core; generator {:.2} µs/request",
        r.responses,
        r.server_s * 1e6 / r.responses as f64,
        r.responses as f64 / r.server_s,
        r.client_s * 1e6 / r.responses as f64,
    );
}

/// Engines side by side, each with its own generator and link on its own
/// thread: connections/s per engine and scaling efficiency against one.
fn scale(max_engines: usize, tls: bool) {
    let load = LoadConfig {
        server: SRV,
        port: if tls { 443 } else { 80 },
        body: if tls { 1024 } else { 64 },
        requests_per_conn: 1,
        concurrency: if tls { 64 } else { 256 },
        total_conns: if tls { 4_000 } else { 100_000 },
        sources: 1,
    };
    let what = if tls {
        "TLS 1.3 ECDSA-P256 handshake + GET 1 KB + close"
    } else {
        "TCP open + GET 64 B + close"
    };
    println!(
        "scaling: {what}, {} connections per engine; each engine on its own thread with its own generator\n",
        load.total_conns
    );
    println!(
        "{:>7} {:>22} {:>22} {:>18} {:>11}",
        "engines", "engine conn/s (each)", "engine conn/s (sum)", "wall conn/s (sum)", "efficiency"
    );
    let mut base: Option<f64> = None;
    let mut n = 1;
    while n <= max_engines {
        let results: Vec<Result> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    s.spawn(move || run_with(load, tls.then(|| LoadClientConfig::new(true, true))))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let per_engine: Vec<f64> = results
            .iter()
            .map(|r| r.conns as f64 / r.server_s)
            .collect();
        let sum: f64 = per_engine.iter().sum();
        let wall = results.iter().map(|r| r.wall_s).fold(0.0, f64::max);
        let wall_rate = results.iter().map(|r| r.conns).sum::<u64>() as f64 / wall;
        let one = *base.get_or_insert(wall_rate);
        println!(
            "{n:>7} {:>22.0} {sum:>22.0} {wall_rate:>18.0} {:>10.0}%",
            sum / n as f64,
            100.0 * wall_rate / (one * n as f64)
        );
        n *= 2;
    }
    println!("\nengine conn/s: connections over the engines' own busy time (server side only);");
    println!("wall conn/s: all connections over the longest run's wall time (engine and generator share each thread);");
    println!("efficiency: wall conn/s against n times one engine's.");
}

/// The per-frame cost of software RSS: classifying and hashing a TCP frame
/// (every received frame on a steered port), and handing a frame to another
/// engine's inbox and taking it out there (frames of other engines' flows).
fn steer_cost() {
    use dataplane::net::toeplitz::{classify, FrameClass, Toeplitz};
    use dataplane::steer::{SteerLink, Steered};
    let table = Toeplitz::new(&dataplane::dpdk::SYMMETRIC_RSS_KEY);
    // 4096 distinct TCP/IPv4 frames.
    let frames: Vec<Vec<u8>> = (0..4096u32)
        .map(|i| {
            let mut f = vec![0u8; 64];
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x45;
            f[14 + 9] = 6;
            f[26..30].copy_from_slice(&(0x0a00_0000 | i).to_be_bytes());
            f[30..34].copy_from_slice(&[10, 1, 0, 1]);
            f[34..36].copy_from_slice(&(32768 + i as u16).to_be_bytes());
            f[36..38].copy_from_slice(&443u16.to_be_bytes());
            f
        })
        .collect();
    let rounds = 2_000u32;
    let t0 = std::time::Instant::now();
    let mut acc = 0u32;
    for _ in 0..rounds {
        for f in &frames {
            if let FrameClass::Tcp(h) = classify(std::hint::black_box(f), &table) {
                acc ^= h;
            }
        }
    }
    let n = f64::from(rounds) * frames.len() as f64;
    let classify_ns = t0.elapsed().as_secs_f64() * 1e9 / n;
    std::hint::black_box(acc);
    // Hand-off through an inbox: one thread sends, another receives (the
    // frames are integers standing in for mbuf pointers).
    let links = SteerLink::<u64>::new_set(2, &dataplane::dpdk::SYMMETRIC_RSS_KEY);
    let count = 4_000_000u64;
    let (tx, rx) = (links[0].clone(), links[1].clone());
    let t0 = std::time::Instant::now();
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut got = 0;
            while got < count {
                if rx.recv().is_some() {
                    got += 1;
                }
            }
        });
        let mut i = 0;
        while i < count {
            if tx.send(1, Steered::Rx { port: 0, buf: i }).is_ok() {
                i += 1;
            }
        }
    });
    let handoff_ns = t0.elapsed().as_secs_f64() * 1e9 / count as f64;
    println!("software RSS: classify + Toeplitz (table) {classify_ns:.1} ns/frame; hand-off to another engine's inbox and out {handoff_ns:.1} ns/frame (two threads, one each way)");
}

/// The number after `flag` on the command line, if any.
fn arg_after(flag: &str) -> Option<u32> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1)?.parse().ok()
}
