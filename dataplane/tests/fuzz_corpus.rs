//! Replays the fuzz corpus (`dataplane/fuzz/corpus/*`) through the fuzz
//! entry points: what the fuzzer found once stays fixed. `make_seeds`
//! (ignored) regenerates the recorded seed traces.

use std::fs;
use std::path::Path;
use std::time::Duration;

use crypto::certs::CertStore;
use crypto::session::TlsConfig;
use dataplane::fuzzing::{
    encode_records, engine_input, engine_script, fuzz_engine, tcp_header, FUZZ_ADDR, SAME_BURST,
};
use dataplane::loadgen::{LoadConfig, LoadGen};
use dataplane::net::InterfaceConfig;
use dataplane::port::{link, MemBuf, MemPort, PacketBuf, Port};
use dataplane::stats::DropReason;
use dataplane::tcp::TcpConfig;
use dataplane::time::Instant;
use smoltcp::wire::EthernetAddress;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| (p.display().to_string(), fs::read(&p).unwrap()))
        .collect()
}

#[test]
fn engine_input_corpus_replays() {
    let files = corpus("engine_input");
    for seed in [
        "http10-close",
        "keepalive-3",
        "bulk-200k",
        "regress-tiny-mss",
        "ipv6-nd-echo",
        "ipv6-tcp-http10",
    ] {
        assert!(
            files.iter().any(|(n, _)| n.ends_with(seed)),
            "seed {seed} missing from the corpus"
        );
    }
    for (name, data) in files {
        // A panic here names the file to reproduce with.
        eprintln!("replaying {name}");
        let c = engine_input(&data);
        // Recorded seeds replay deterministically: the handshake completes
        // and the requests are answered, so mutations start deep.
        // `ipv6-tcp-http10`: the same over TCP/IPv6 (a solicitation, the
        // handshake, the request and FIN in one burst, the last ACK).
        for (seed, requests) in [
            ("http10-close", 1),
            ("keepalive-3", 3),
            ("bulk-200k", 1),
            ("ipv6-tcp-http10", 1),
        ] {
            if name.ends_with(seed) {
                assert_eq!(
                    (c.tcp_accepted, c.http_requests),
                    (1, requests),
                    "{name}: {c:?}"
                );
            }
        }
        // IPv6 in one burst: a solicitation and a duplicate address check
        // answered, three echoes (one through a hop-by-hop header, one
        // from a link-local neighbour whose advertisement comes after it),
        // a fragment dropped.
        if name.ends_with("ipv6-nd-echo") {
            assert_eq!(
                (
                    c.nd_advertisements,
                    c.icmpv6_echo_replies,
                    c.drops[DropReason::Fragment as usize]
                ),
                (2, 3, 1),
                "{name}: {c:?}"
            );
        }
    }
}

/// A recorded exchange delivered as one burst (records joined with
/// `SAME_BURST`): every frame is taken, over several receive bursts of
/// the engine at one instant.
#[test]
fn tcp_header_corpus_replays() {
    let files = corpus("tcp_header");
    assert!(files.len() >= 4, "the seeds are there");
    for (name, data) in files {
        eprintln!("replaying {name}");
        tcp_header(&data);
    }
}

#[test]
fn raw_frames_in_one_burst() {
    let corpus = corpus("engine_input");
    let (_, trace) = corpus
        .iter()
        .find(|(n, _)| n.ends_with("http10-close"))
        .expect("seed");
    // The same trace with every frame after the first joined to the
    // previous one's burst: one poll for the whole exchange.
    let mut joined = trace.clone();
    let (mut i, mut records) = (0, 0);
    let mut first = true;
    while i + 3 <= joined.len() {
        records += 1;
        let len = usize::from(u16::from_be_bytes([joined[i], joined[i + 1]]));
        if !first {
            joined[i] |= (SAME_BURST >> 8) as u8;
        }
        first = false;
        i += 3 + len;
    }
    let c = engine_input(&joined);
    assert!(records > 1);
    assert_eq!(c.rx_packets, records, "every frame of the burst received");
}

fn script_tls() -> TlsConfig {
    let dir = tempfile::tempdir().unwrap();
    let mut store = CertStore::new();
    store.add(crypto::testcert::self_signed(
        dir.path(),
        "c",
        crypto::testcert::P256,
        "fuzz.test",
    ));
    TlsConfig::new(store).unwrap()
}

#[test]
fn engine_script_corpus_replays() {
    let tls = script_tls();
    let files = corpus("engine_script");
    assert!(
        files
            .iter()
            .any(|(n, _)| n.ends_with("regress-ack-rst-burst")),
        "the regression seed is in the corpus"
    );
    for (name, data) in files {
        eprintln!("replaying {name}");
        let c = engine_script(&data, Some(&tls));
        if name.ends_with("regress-ack-rst-burst") {
            assert!(
                c.tcp_accepted >= 8,
                "{name}: the handshakes complete: {c:?}"
            );
        }
        if name.ends_with("conn-reset") {
            assert!(c.tcp_operator_resets >= 1, "{name}: {c:?}");
        }
        if name.ends_with("backend-and-check-bursts") {
            assert!(c.proxy_backend_connects >= 2, "{name}: {c:?}");
            assert!(c.health_checks >= 1, "{name}: {c:?}");
        }
        engine_script(&data, None);
    }
}

/// A port that records what the load generator sends, with the time.
struct Recorder {
    inner: MemPort,
    frames: Vec<(Instant, Vec<u8>)>,
}

impl Port for Recorder {
    type Buf = MemBuf;
    fn mac(&self) -> EthernetAddress {
        self.inner.mac()
    }
    fn rx_burst(&mut self, now: Instant, out: &mut Vec<MemBuf>, max: usize) -> usize {
        self.inner.rx_burst(now, out, max)
    }
    fn tx_burst(&mut self, now: Instant, batch: &mut Vec<MemBuf>) -> usize {
        for b in batch.iter() {
            self.frames.push((now, b.data().to_vec()));
        }
        self.inner.tx_burst(now, batch)
    }
    fn alloc(&mut self) -> Option<MemBuf> {
        self.inner.alloc()
    }
}

/// Records real client traces against the fuzz engine and writes them as
/// seeds: `cargo test -p dataplane --test fuzz_corpus -- --ignored`.
#[test]
#[ignore]
fn make_seeds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/engine_input");
    fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("http10-close", 1024u64, 1u32),
        ("keepalive-3", 3000, 3),
        ("bulk-200k", 200_000, 1),
    ];
    for (name, body, requests) in cases {
        let (dut, cli) = link(
            dataplane::fuzzing::FUZZ_MAC,
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            1024,
            4096,
        );
        let mut engine = fuzz_engine(dut);
        let load = LoadConfig {
            server: FUZZ_ADDR,
            port: 80,
            body,
            requests_per_conn: requests,
            concurrency: 1,
            total_conns: 1,
            sources: 1,
        };
        let iface = InterfaceConfig {
            mac: EthernetAddress([0; 6]),
            addr: "10.0.0.2".parse().unwrap(),
            prefix_len: 24,
            gateway: None,
        };
        let mut client = LoadGen::new(
            Recorder {
                inner: cli,
                frames: Vec::new(),
            },
            iface,
            TcpConfig::default(),
            load,
        );
        let mut now = Instant::from_millis(1);
        for _ in 0..2000 {
            client.poll(now);
            engine.poll(now);
            now = now + Duration::from_millis(1);
        }
        assert!(client.done(), "{name}: {:?}", client.stats());
        let frames = client.port_mut().frames.clone();
        let mut prev = Instant::from_millis(1);
        let records: Vec<(u8, Vec<u8>)> = frames
            .into_iter()
            .map(|(t, f)| {
                let d = ((t - prev).as_millis()).min(255) as u8;
                prev = t;
                (d, f)
            })
            .collect();
        fs::write(dir.join(name), encode_records(&records)).unwrap();
    }
}
