//! Fuzz entry points, shared by the cargo-fuzz targets (`dataplane/fuzz/`)
//! and the corpus replay in the normal test run
//! (`dataplane/tests/fuzz_corpus.rs`). Each takes arbitrary bytes and must
//! never panic; malformed input ends as counted drops.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use smoltcp::wire::EthernetAddress;

mod script;

pub use script::{PEER_ADDR, PEER_MAC};

use std::net::SocketAddrV4;

use crypto::session::TlsConfig;

use crate::app::health::{HealthCheck, HealthKind};
use crate::app::pool::{Balance, Member, MemberState, Pool};
use crate::engine::{Engine, EngineConfig};
use crate::net::InterfaceConfig;
use crate::port::{link, PacketBuf, Port};
use crate::stats::{Counters, SharedCounters};
use crate::time::Instant;

/// The fuzzed engine's address and listener (`10.0.0.1:80`, MAC
/// 02:00:00:00:00:01); frames in the corpus are addressed to it.
pub const FUZZ_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const FUZZ_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
/// The fuzzed engine's IPv6 address (a /64; its gateway is `fe80::1`).
pub const FUZZ_ADDR6: std::net::Ipv6Addr = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

/// Most frames the fuzz harnesses put in one receive burst.
pub const MAX_BURST: usize = 64;
/// Set in a record's length word: the frame joins the previous one's
/// burst (no poll between them).
pub const SAME_BURST: u16 = 0x8000;

/// One TCP segment (header, options, payload) through the engine's
/// header code, checked against smoltcp's: the same verdict and fields
/// on parse, and for what parses, the same bytes written back (where
/// the options fit the 60-byte header smoltcp can write). Panics on any
/// difference.
pub fn tcp_header(data: &[u8]) {
    use smoltcp::phy::{Checksum, ChecksumCapabilities};
    use smoltcp::wire::{IpAddress, TcpPacket, TcpRepr};
    let mut caps = ChecksumCapabilities::default();
    caps.tcp = Checksum::None;
    let addr = IpAddress::Ipv4(FUZZ_ADDR);
    let theirs = TcpPacket::new_checked(data)
        .ok()
        .and_then(|p| TcpRepr::parse(&p, &addr, &addr, &caps).ok());
    let ours = crate::tcp::wire::parse(data);
    assert_eq!(ours, theirs, "parse");
    assert_eq!(
        crate::tcp::wire::well_sized(data),
        TcpPacket::new_checked(data).is_ok()
    );
    let Some(repr) = ours else {
        return;
    };
    // smoltcp writes SACK blocks only on an ACK without SACK-permitted
    // (but counts them in its length); compare where both agree.
    let sack = repr.sack_ranges.iter().any(Option::is_some);
    if repr.header_len() > 60 || (sack && (repr.sack_permitted || repr.ack_number.is_none())) {
        return;
    }
    let mut want = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut TcpPacket::new_unchecked(&mut want[..]),
        &addr,
        &addr,
        &caps,
    );
    let mut got = vec![0xa5u8; want.len()];
    assert_eq!(crate::tcp::wire::header_len(&repr), repr.header_len());
    assert_eq!(crate::tcp::wire::emit(&repr, &mut got), want.len());
    assert_eq!(got, want, "emit");
}

/// Feeds frames to a fresh engine (with a responder VIP on port 80).
///
/// Input format: a sequence of records `[len_hi, len_lo, delay_ms,
/// frame...]`. A record whose length word has [`SAME_BURST`] set joins
/// the previous record's receive burst (up to [`MAX_BURST`] frames, the
/// engine polled once for all of them: several segments of several
/// connections in one burst); otherwise the engine is polled first and
/// the frame is received `delay_ms` after the previous burst.
pub fn engine_input(data: &[u8]) -> Counters {
    let (dut, mut peer) = link(FUZZ_MAC, EthernetAddress([2, 0, 0, 0, 0, 2]), 1024, 4096);
    let mut engine = fuzz_engine(dut);
    let mut now = Instant::from_millis(1);
    let mut rest = data;
    let mut sink = Vec::new();
    let mut fed = 0u64;
    let mut burst = Vec::with_capacity(MAX_BURST);
    while rest.len() >= 3 {
        let word = u16::from_be_bytes([rest[0], rest[1]]);
        let len = usize::from(word & !SAME_BURST)
            .min(rest.len() - 3)
            .min(2000);
        let joins = word & SAME_BURST != 0 && burst.len() < MAX_BURST;
        if !joins {
            deliver(&mut engine, &mut peer, &mut burst, now, &mut sink);
            now = now + Duration::from_millis(u64::from(rest[2]));
        }
        let frame = &rest[3..3 + len];
        rest = &rest[3 + len..];
        let Some(mut buf) = peer.alloc() else { break };
        buf.set_len(frame.len());
        buf.data_mut().copy_from_slice(frame);
        burst.push(buf);
        fed += 1;
    }
    deliver(&mut engine, &mut peer, &mut burst, now, &mut sink);
    // Let timers run: retransmissions, TIME-WAIT, timeouts.
    for step in [10, 300, 2_000, 40_000, 400_000] {
        engine.poll(now + Duration::from_millis(step));
    }
    engine.publish();
    let c = *engine.counters();
    assert_eq!(c.rx_packets, fed, "every frame is counted");
    c
}

/// Sends `burst` (if any) to the engine, polls it until it is idle (a
/// burst over the engine's own receive burst takes two or more polls at
/// the same instant), and throws away what it sent.
fn deliver<P: Port>(
    engine: &mut Engine<P>,
    peer: &mut P,
    burst: &mut Vec<P::Buf>,
    now: Instant,
    sink: &mut Vec<P::Buf>,
) {
    if burst.is_empty() {
        return;
    }
    peer.tx_burst(now, burst);
    burst.clear(); // frames the link did not take are dropped
    for _ in 0..8 {
        if engine.poll(now) == 0 {
            break;
        }
    }
    sink.clear();
    while peer.rx_burst(now, sink, 64) > 0 {
        sink.clear();
    }
}

/// The engine every fuzz run starts from: deterministic (fixed ISN key),
/// responder VIPs on `FUZZ_ADDR:80` and `[FUZZ_ADDR6]:80`.
pub fn fuzz_engine<P: Port>(port: P) -> Engine<P> {
    let cfg = EngineConfig {
        isn_key: Some(0x7f4a_7c15),
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(cfg, Arc::new(SharedCounters::default()));
    engine.add_port(
        port,
        InterfaceConfig {
            mac: FUZZ_MAC,
            addr: FUZZ_ADDR,
            prefix_len: 24,
            gateway: None,
        },
    );
    engine.enable_ipv6(
        0,
        crate::net::Ipv6Config {
            addresses: vec![(FUZZ_ADDR6, 64)],
            gateway: Some(std::net::Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1)),
        },
    );
    engine.listen(FUZZ_ADDR, 80);
    engine.listen(FUZZ_ADDR6, 80);
    engine
}

/// The VIP ports of [`script_engine`]: plain, TLS, proxied, proxied TLS
/// (the TLS ones only with a TLS configuration).
const SCRIPT_VIPS: [u16; 4] = [80, 8080, 443, 8443];
/// The pool's member and the health-checked target, on the peer.
pub const SCRIPT_BACKEND: u16 = 8081;
pub const SCRIPT_CHECKED: u16 = 9000;

/// Plays a script of segments (see [`script`]'s format) from a peer
/// with many connections, in bursts of up to [`MAX_BURST`] frames,
/// against an engine serving every kind of VIP ([`script_engine`]); then
/// (scripts of odd length) dpd stops with what is open
/// ([`Engine::reset_at_stop`]: nothing may be left open), and every timer
/// runs out. Checks that every frame was counted and that the VIP and
/// member counts of open connections match the connections really open.
///
/// # Panics
/// When the engine breaks one of those invariants (or panics itself).
pub fn engine_script(data: &[u8], tls: Option<&TlsConfig>) -> Counters {
    let (dut, mut peer_port) = link(FUZZ_MAC, PEER_MAC, 1024, 4096);
    let mut engine = script_engine(dut, tls);
    let log = std::sync::Arc::new(crate::app::conn_log::ConnLogQueues::with_capacity(1, 4096));
    engine.log_connections(Some(log.clone()));
    let vips: &'static [u16] = if tls.is_some() {
        &SCRIPT_VIPS
    } else {
        &SCRIPT_VIPS[..2]
    };
    let mut peer = script::Peer::new(vips, tls.map(|_| client_hello()));
    let (fed, now) = script::play(
        &mut engine,
        &mut peer_port,
        &mut peer,
        data,
        Instant::from_millis(1),
    );
    let mut sink = Vec::new();
    if data.len() % 2 == 1 {
        engine.reset_at_stop(now);
        assert_eq!(engine.tcp().counters().active, 0, "open after the stop");
        check_open_counts(&engine);
        let holders = engine.roles().iter().filter(|e| e.vip.is_some()).count();
        assert_eq!(holders, 0, "roles left after the stop");
    }
    for step in [0, 10, 300, 2_000, 40_000, 400_000] {
        engine.poll(now + Duration::from_millis(step));
        while peer_port.rx_burst(now, &mut sink, 64) > 0 {
            sink.clear();
        }
    }
    engine.publish();
    let c = *engine.counters();
    assert_eq!(c.rx_packets, fed, "every frame is counted");
    check_open_counts(&engine);
    check_conn_log(&log, &c);
    c
}

/// Each client connection that ended is in the connection log once, from
/// the peer, to a VIP, as one line of JSON.
fn check_conn_log(log: &crate::app::conn_log::ConnLogQueues, c: &Counters) {
    let mut records = 0;
    log.drain(|r| {
        records += 1;
        assert_eq!(r.client.ip(), std::net::IpAddr::V4(PEER_ADDR), "{r:?}");
        assert_eq!(r.local.ip(), std::net::IpAddr::V4(FUZZ_ADDR), "{r:?}");
        assert!(SCRIPT_VIPS.contains(&r.local.port()), "{r:?}");
        let line = r.json_line("vip");
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(&line);
        assert!(parsed.is_ok(), "{line}");
    });
    assert_eq!(records, c.conn_log_records, "every record queued is there");
    assert!(
        c.conn_log_records + c.conn_log_dropped <= c.tcp_accepted,
        "no more records than client connections: {c:?}"
    );
}

/// The VIP and member counts of open connections equal the connections
/// that hold them.
fn check_open_counts<P: Port>(engine: &Engine<P>) {
    let holders = engine.roles().iter().filter(|e| e.vip.is_some()).count() as u64;
    let counted: u64 = (0..SCRIPT_VIPS.len() as u16)
        .map(|slot| engine.vip_counters(slot).active)
        .sum();
    assert_eq!(counted, holders, "VIP open counts");
    let backends = engine
        .roles()
        .iter()
        .filter(|e| matches!(&e.role, crate::app::role::Role::Backend(l) if l.member.is_some()))
        .count() as u64;
    let members: u64 = engine
        .pools()
        .iter()
        .flat_map(|p| &p.members)
        .map(|m| u64::from(m.active))
        .sum();
    assert_eq!(members, backends, "member open counts");
}

/// A TLS 1.3 ClientHello from the load client (made once per process).
fn client_hello() -> Vec<u8> {
    static HELLO: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    HELLO
        .get_or_init(|| {
            let cfg = crypto::client::LoadClientConfig::new(true, true);
            let mut out = Vec::new();
            if let Ok(mut s) = crypto::client::LoadClientSession::new(&cfg, "fuzz.test") {
                s.take_tls(&mut out);
            }
            out
        })
        .clone()
}

/// The engine of [`engine_script`]: deterministic (fixed ISN key); VIPs
/// on `FUZZ_ADDR`: `:80` the responder, `:8080` proxied to the peer's
/// [`SCRIPT_BACKEND`], and with `tls` `:443` and `:8443` the same behind
/// TLS; a pool health-checked over HTTP at the peer's [`SCRIPT_CHECKED`]
/// every 50 ms.
pub fn script_engine<P: Port>(port: P, tls: Option<&TlsConfig>) -> Engine<P> {
    let mut engine = fuzz_engine(port);
    let member = |port| Member::new(SocketAddrV4::new(PEER_ADDR, port), 1, MemberState::Up);
    let mut web = Pool::new(
        "web".into(),
        Balance::RoundRobin,
        vec![member(SCRIPT_BACKEND)],
    );
    web.connect_timeout = Duration::from_millis(500);
    let web = engine.add_pool(web);
    let mut checked = Pool::new(
        "checked".into(),
        Balance::RoundRobin,
        vec![member(SCRIPT_CHECKED)],
    );
    checked.check = Some(HealthCheck {
        kind: HealthKind::Http,
        request: b"GET / HTTP/1.0\r\n\r\n".to_vec(),
        expect: control::config::StatusRange::exact(200),
        interval: Duration::from_millis(50),
        timeout: Duration::from_millis(20),
        rise: 1,
        fall: 1,
    });
    engine.add_pool(checked);
    engine.listen_pool(FUZZ_ADDR, SCRIPT_VIPS[1], None, web);
    if let Some(tls) = tls {
        engine.listen_tls(FUZZ_ADDR, SCRIPT_VIPS[2], tls.clone());
        engine.listen_pool(FUZZ_ADDR, SCRIPT_VIPS[3], Some(tls.clone()), web);
    }
    engine
}

/// Encodes frames in [`engine_input`]'s record format (for making seeds).
pub fn encode_records(frames: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (delay, f) in frames {
        out.extend_from_slice(&(f.len() as u16).to_be_bytes());
        out.push(*delay);
        out.extend_from_slice(f);
    }
    out
}
