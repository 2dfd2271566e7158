//! TLS VIPs in the engine against the load generator's TLS client over
//! the in-memory link, in simulated time: every version and key type,
//! loss and reordering, the per-iteration handshake budget, and idle
//! connections holding no buffers.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use crypto::certs::CertStore;
use crypto::client::LoadClientConfig;
use crypto::policy::TlsPolicy;
use crypto::session::TlsConfig;
use crypto::testcert::{self_signed, P256, RSA2048};
use dataplane::engine::{Engine, EngineConfig};
use dataplane::loadgen::{LoadConfig, LoadGen};
use dataplane::net::InterfaceConfig;
use dataplane::port::{link, ImpairConfig, Impaired, MemPort};
use dataplane::stats::SharedCounters;
use dataplane::tcp::TcpConfig;
use dataplane::time::Instant;
use smoltcp::wire::EthernetAddress;

const SRV: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const CLI: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);

type Server = Engine<Impaired<MemPort>>;
type Client = LoadGen<Impaired<MemPort>>;

fn iface(addr: Ipv4Addr) -> InterfaceConfig {
    InterfaceConfig {
        mac: EthernetAddress([0; 6]),
        addr,
        prefix_len: 24,
        gateway: None,
    }
}

/// A TLS configuration with an RSA-2048 and a P-256 certificate.
fn tls_config() -> TlsConfig {
    let dir = tempfile::tempdir().unwrap();
    let mut store = CertStore::new();
    store.add(self_signed(dir.path(), "rsa", RSA2048, "tlsdp.test"));
    store.add(self_signed(dir.path(), "ec", P256, "tlsdp.test"));
    TlsConfig::with_policy(store, &TlsPolicy::default()).unwrap()
}

fn setup(
    engine: EngineConfig,
    load: LoadConfig,
    client: LoadClientConfig,
    impair: ImpairConfig,
) -> (Server, Client) {
    let (a, b) = link(
        EthernetAddress([2, 0, 0, 0, 1, 1]),
        EthernetAddress([2, 0, 0, 0, 1, 2]),
        8192,
        32768,
    );
    let mut server = Engine::new(engine, Arc::new(SharedCounters::default()));
    let server_impair = ImpairConfig {
        seed: impair.seed + 1,
        ..impair
    };
    server.add_port(Impaired::new(a, server_impair), iface(SRV));
    server.listen_tls(SRV, 443, tls_config());
    let gen = LoadGen::new(
        Impaired::new(b, impair),
        iface(CLI),
        TcpConfig::default(),
        load,
    )
    .with_tls(client);
    (server, gen)
}

fn run(server: &mut Server, client: &mut Client) {
    let mut now = Instant::from_millis(1);
    let limit = now + Duration::from_secs(600);
    while !client.done() {
        now = now + Duration::from_micros(20);
        assert!(now < limit, "stalled: {:?}", client.stats());
        client.poll(now);
        server.poll(now);
    }
    for _ in 0..1000 {
        now = now + Duration::from_micros(20);
        client.poll(now);
        server.poll(now);
    }
}

fn load(body: u64, requests: u32, conns: u64, concurrency: usize) -> LoadConfig {
    LoadConfig {
        server: SRV,
        port: 443,
        body,
        requests_per_conn: requests,
        concurrency,
        total_conns: conns,
        sources: 1,
    }
}

#[test]
fn every_version_and_key_type_serves_byte_counts_exactly() {
    for (tls13, ecdsa, key) in [
        (true, true, "ECDSA-P256"),
        (true, false, "RSA-2048"),
        (false, true, "ECDSA-P256"),
        (false, false, "RSA-2048"),
    ] {
        let (mut server, mut client) = setup(
            EngineConfig::default(),
            load(20_000, 2, 20, 4),
            LoadClientConfig::new(tls13, ecdsa),
            ImpairConfig::default(),
        );
        run(&mut server, &mut client);
        let s = client.stats();
        assert_eq!((s.completed, s.failed, s.responses), (20, 0, 40), "{s:?}");
        assert_eq!(s.body_bytes, 40 * 20_000);
        let c = server.counters();
        assert_eq!((c.tls_handshakes, c.tls_failures), (20, 0), "{c:?}");
        assert_eq!(c.tls_versions[usize::from(tls13)], 20);
        let k = crypto::session::KEY_TYPES
            .iter()
            .position(|n| *n == key)
            .unwrap();
        assert_eq!(c.tls_key_types[k], 20, "{key}");
    }
}

#[test]
fn megabytes_through_loss_and_reordering() {
    let impair = ImpairConfig {
        seed: 7,
        loss: 0.02,
        reorder: 0.02,
        ..ImpairConfig::default()
    };
    let (mut server, mut client) = setup(
        EngineConfig::default(),
        load(3 << 20, 3, 4, 4),
        LoadClientConfig::new(true, true),
        impair,
    );
    run(&mut server, &mut client);
    let s = client.stats();
    assert_eq!((s.completed, s.failed, s.responses), (4, 0, 12), "{s:?}");
    assert_eq!(s.body_bytes, 12 * (3 << 20));
    assert!(server.tcp().counters().retransmits > 0, "loss happened");
    assert_eq!(server.counters().tls_failures, 0);
}

/// Handshakes beyond the per-iteration budget wait for a later one, and
/// the ACK of a message that waits rides on the answer (the server's
/// flight, the response): the server sends as many segments as when
/// nothing waits, not a pure ACK besides for each message put off.
#[test]
fn handshake_work_waits_when_the_budget_is_spent() {
    let run_with = |handshake_budget: Duration| {
        let cfg = EngineConfig {
            handshake_budget,
            ..EngineConfig::default()
        };
        let (mut server, mut client) = setup(
            cfg,
            load(100, 1, 64, 32),
            LoadClientConfig::new(true, true),
            ImpairConfig::default(),
        );
        run(&mut server, &mut client);
        let s = client.stats();
        assert_eq!((s.completed, s.failed), (64, 0), "{s:?}");
        let c = server.counters();
        assert_eq!(c.tls_handshakes, 64);
        (
            c.tls_handshakes_deferred,
            server.tcp().counters().segments_out,
        )
    };
    // No time: one step per iteration.
    let (deferred, tight_segments) = run_with(Duration::ZERO);
    assert!(deferred > 0);
    // With room for all of them, nothing waits.
    let (deferred, roomy_segments) = run_with(Duration::from_secs(5));
    assert_eq!(deferred, 0);
    assert_eq!(tight_segments, roomy_segments);
}

/// A poll that did something says so (`Engine::run` counts only those
/// as busy, which dpd's busy share and dpbench's µs per connection come
/// from): one that only went on with handshakes put off earlier, or only
/// sent what a retransmission timer queued, is not idle time. Polled twice
/// per step of the client, the second poll finds no new frame.
#[test]
fn every_poll_that_does_work_says_so() {
    let cfg = EngineConfig {
        handshake_budget: Duration::ZERO,
        ..EngineConfig::default()
    };
    let impair = ImpairConfig {
        seed: 11,
        loss: 0.03,
        ..ImpairConfig::default()
    };
    let (mut server, mut client) = setup(
        cfg,
        load(2_000, 1, 48, 16),
        LoadClientConfig::new(true, true),
        impair,
    );
    let mut now = Instant::from_millis(1);
    let limit = now + Duration::from_secs(600);
    let (mut silent, mut resumed_alone, mut timers_alone) = (0, 0, 0);
    while !client.done() {
        now = now + Duration::from_micros(20);
        assert!(now < limit, "stalled: {:?}", client.stats());
        client.poll(now);
        for _ in 0..2 {
            let (c, t) = (server.counters(), server.tcp().counters());
            let before = (c.rx_packets, c.tx_packets, c.tls_handshakes_deferred);
            let (retransmits, handshakes) = (t.retransmits, c.tls_handshakes);
            let work = server.poll(now);
            let (c, t) = (server.counters(), server.tcp().counters());
            let after = (c.rx_packets, c.tx_packets, c.tls_handshakes_deferred);
            let no_frame_in = after.0 == before.0;
            if after != before || c.tls_handshakes != handshakes {
                if work == 0 {
                    silent += 1;
                }
                if no_frame_in && after.1 > before.1 {
                    if t.retransmits > retransmits {
                        timers_alone += 1;
                    } else {
                        resumed_alone += 1;
                    }
                }
            }
        }
    }
    let s = client.stats();
    assert_eq!((s.completed, s.failed), (48, 0), "{s:?}");
    // Both kinds of poll happened, and none of them said it did nothing.
    assert!(
        resumed_alone > 0,
        "no poll went on with put-off handshakes alone"
    );
    assert!(timers_alone > 0, "no poll only retransmitted");
    assert_eq!(silent, 0, "polls that did work but returned 0");
}

#[test]
fn idle_tls_connections_hold_no_buffers() {
    // Hold mode: handshake, then nothing. Then requests on keep-alive,
    // after which the connections are idle again.
    let (mut server, mut client) = setup(
        EngineConfig::default(),
        load(0, 0, 50, 50),
        LoadClientConfig::new(true, true),
        ImpairConfig::default(),
    );
    run(&mut server, &mut client);
    assert_eq!(server.counters().tls_handshakes, 50);
    assert_eq!(server.tls_buffers(), (50, 0), "buffers given back");
    let pool = server.tcp().buffers();
    assert_eq!(pool.bytes_outside(), 0, "nothing left charged to the pool");
    assert_eq!(server.tcp().buffers().in_use(), 0, "TCP rings given back");
}
