//! In-memory engine benchmark (not a test): the kernel-bypass load
//! generator and the engine's responder on one thread over the in-memory
//! link, real time. The engine's own busy time is measured apart from the
//! generator's, so the figures are the server engine's cost per core.
//!
//!   cargo bench -p dataplane --bench inmemory [-- CONNS]

use std::net::Ipv4Addr;
use std::sync::Arc;

use dataplane::engine::{Engine, EngineConfig};
use dataplane::loadgen::{LoadConfig, LoadGen};
use dataplane::net::InterfaceConfig;
use dataplane::port::{link, MemPort};
use dataplane::stats::SharedCounters;
use dataplane::tcp::TcpConfig;
use dataplane::time::TscClock;
use smoltcp::wire::EthernetAddress;

const SRV: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const CLI: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);

struct Result {
    conns: u64,
    responses: u64,
    bytes: u64,
    server_s: f64,
    client_s: f64,
    wall_s: f64,
}

/// The engine (responder on SRV:80) and the load generator over one
/// in-memory link; both allow `max_conns` connections. A /8 subnet leaves
/// room for many generator source addresses.
fn setup(load: LoadConfig, max_conns: usize) -> (Engine<MemPort>, LoadGen<MemPort>) {
    let iface = |addr| InterfaceConfig {
        mac: EthernetAddress([0; 6]),
        addr,
        prefix_len: 8,
        gateway: None,
    };
    let (a, b) = link(
        EthernetAddress([2, 0, 0, 0, 1, 1]),
        EthernetAddress([2, 0, 0, 0, 1, 2]),
        8192,
        65536,
    );
    let tcp = TcpConfig {
        max_conns,
        ..TcpConfig::default()
    };
    let mut server = Engine::new(
        EngineConfig {
            tcp,
            ..EngineConfig::default()
        },
        Arc::new(SharedCounters::default()),
    );
    server.add_port(a, iface(SRV));
    server.listen(SRV, 80);
    let client = LoadGen::new(b, iface(CLI), tcp, load);
    (server, client)
}

fn run(load: LoadConfig) -> Result {
    let (mut server, mut client) = setup(load, 1 << 20);
    let clock = TscClock::new();
    let (mut srv_ticks, mut cli_ticks) = (0u64, 0u64);
    let start = clock.ticks();
    let debug = std::env::var_os("INMEMORY_DEBUG").is_some();
    let (mut idle, mut polls, mut last) = (0u64, 0u64, 0u64);
    while !client.done() {
        let t0 = clock.ticks();
        let a = client.poll(clock.at(t0));
        let t1 = clock.ticks();
        let b = server.poll(clock.at(t1));
        let t2 = clock.ticks();
        cli_ticks += t1 - t0;
        srv_ticks += t2 - t1;
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
    let s = client.stats();
    assert_eq!(s.failed, 0, "{s:?}");
    Result {
        conns: s.completed,
        responses: s.responses,
        bytes: s.body_bytes,
        server_s: srv_ticks as f64 / hz,
        client_s: cli_ticks as f64 / hz,
        wall_s: (clock.ticks() - start) as f64 / hz,
    }
}

/// Opens `conns` connections and holds them idle; reports the server
/// engine's connection state per connection.
fn hold(conns: u64) {
    let sources = conns.div_ceil(50_000).max(1) as u16;
    let load = LoadConfig {
        server: SRV,
        port: 80,
        body: 0,
        requests_per_conn: 0,
        concurrency: 512,
        total_conns: conns,
        sources,
    };
    let (mut server, mut client) = setup(load, conns as usize + 1024);
    let clock = TscClock::new();
    let start = clock.ticks();
    while !client.done() {
        client.poll(clock.now());
        server.poll(clock.now());
    }
    for _ in 0..100 {
        client.poll(clock.now());
        server.poll(clock.now());
    }
    let wall = (clock.ticks() - start) as f64 / clock.hz() as f64;
    let t = server.tcp().counters();
    let bytes = server.tcp().state_bytes();
    println!(
        "HOLD  {} connections established and held idle ({} source addresses) in {:.1} s: server state {} MiB = {} bytes per connection, {} data buffers in use",
        t.active,
        sources,
        wall,
        bytes >> 20,
        bytes / t.active.max(1) as usize,
        server.tcp().buffers().in_use()
    );
}

fn main() {
    let conns: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200_000);
    println!("in-memory engine benchmark (one thread; server engine time measured apart from the generator)\n");
    if std::env::args().any(|a| a == "--hold") {
        // cargo bench -p dataplane --bench inmemory -- --hold 1000000
        hold(conns);
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
