//! Fuzz entry points, shared by the cargo-fuzz targets (`dataplane/fuzz/`)
//! and the corpus replay in the normal test run
//! (`dataplane/tests/fuzz_corpus.rs`). Each takes arbitrary bytes and must
//! never panic; malformed input ends as counted drops.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use smoltcp::wire::EthernetAddress;

use crate::engine::{Engine, EngineConfig};
use crate::net::InterfaceConfig;
use crate::port::{link, PacketBuf, Port};
use crate::stats::{Counters, SharedCounters};
use crate::time::Instant;

/// The fuzzed engine's address and listener (`10.0.0.1:80`, MAC
/// 02:00:00:00:00:01); frames in the corpus are addressed to it.
pub const FUZZ_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const FUZZ_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);

/// Feeds frames to a fresh engine (with a responder VIP on port 80).
///
/// Input format: a sequence of records `[len_hi, len_lo, delay_ms,
/// frame...]`; each frame is received `delay_ms` after the previous one.
pub fn engine_input(data: &[u8]) -> Counters {
    let (dut, mut peer) = link(FUZZ_MAC, EthernetAddress([2, 0, 0, 0, 0, 2]), 1024, 4096);
    let mut engine = fuzz_engine(dut);
    let mut now = Instant::from_millis(1);
    let mut rest = data;
    let mut sink = Vec::new();
    let mut fed = 0u64;
    while rest.len() >= 3 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]))
            .min(rest.len() - 3)
            .min(2000);
        now = now + Duration::from_millis(u64::from(rest[2]));
        let frame = &rest[3..3 + len];
        rest = &rest[3 + len..];
        let Some(mut buf) = peer.alloc() else { break };
        buf.set_len(frame.len());
        buf.data_mut().copy_from_slice(frame);
        let mut batch = vec![buf];
        peer.tx_burst(now, &mut batch);
        fed += 1;
        engine.poll(now);
        sink.clear();
        while peer.rx_burst(now, &mut sink, 64) > 0 {
            sink.clear();
        }
    }
    // Let timers run: retransmissions, TIME-WAIT, timeouts.
    for step in [10, 300, 2_000, 40_000, 400_000] {
        engine.poll(now + Duration::from_millis(step));
    }
    engine.publish();
    let c = *engine.counters();
    assert_eq!(c.rx_packets, fed, "every frame is counted");
    c
}

/// The engine every fuzz run starts from: deterministic (fixed ISN key), a
/// responder VIP on `FUZZ_ADDR:80`.
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
    engine.listen(FUZZ_ADDR, 80);
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
