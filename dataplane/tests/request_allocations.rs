//! The engine's request path allocates nothing per request: keep-alive
//! requests over TLS 1.3 and plain TCP against the load generator in
//! memory, counting the allocations made inside the server engine's polls
//! (a counting global allocator; the generator's own are not counted).
//! TLS connections used to allocate their plaintext buffers again for
//! each request (two a request); they now come from the engine's spares.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use crypto::certs::CertStore;
use crypto::client::LoadClientConfig;
use crypto::policy::TlsPolicy;
use crypto::session::TlsConfig;
use crypto::testcert::{self_signed, P256};
use dataplane::engine::{Engine, EngineConfig};
use dataplane::loadgen::{LoadConfig, LoadGen};
use dataplane::net::InterfaceConfig;
use dataplane::port::link;
use dataplane::stats::SharedCounters;
use dataplane::tcp::TcpConfig;
use dataplane::time::Instant;
use smoltcp::wire::EthernetAddress;

/// Counts this thread's allocations while `COUNTING` is set.
struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    // `try_with`: thread-local state may be gone while a thread exits.
    let _ = COUNTING.try_with(|c| {
        if c.get() {
            let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
        }
    });
}

// SAFETY: every call is passed to `System` unchanged; counting touches
// only const-initialised thread-locals (no allocation).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout` (every
        // allocation here is `System`'s).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: `ptr` came from `System` with `layout`; the caller's
        // contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const SRV: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const CLI: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);

fn iface(addr: Ipv4Addr) -> InterfaceConfig {
    InterfaceConfig {
        mac: EthernetAddress([0; 6]),
        addr,
        prefix_len: 24,
        gateway: None,
    }
}

#[test]
fn keep_alive_requests_over_tls_allocate_nothing_in_the_engine() {
    assert_eq!(allocations_a_request(true), 0.0);
}

#[test]
fn keep_alive_requests_over_plain_tcp_allocate_nothing_in_the_engine() {
    assert_eq!(allocations_a_request(false), 0.0);
}

/// Allocations inside the server engine's polls per keep-alive request,
/// after a warm-up, over 1,000 requests on 4 connections.
fn allocations_a_request(over_tls: bool) -> f64 {
    let (a, b) = link(
        EthernetAddress([2, 0, 0, 0, 1, 1]),
        EthernetAddress([2, 0, 0, 0, 1, 2]),
        8192,
        32768,
    );
    let mut server = Engine::new(EngineConfig::default(), Arc::new(SharedCounters::default()));
    server.add_port(a, iface(SRV));
    if over_tls {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CertStore::new();
        store.add(self_signed(dir.path(), "ec", P256, "tlsdp.test"));
        let tls = TlsConfig::with_policy(store, &TlsPolicy::default()).unwrap();
        server.listen_tls(SRV, 443, tls);
    } else {
        server.listen(SRV, 80);
    }
    let load = LoadConfig {
        server: SRV,
        port: if over_tls { 443 } else { 80 },
        body: 64,
        requests_per_conn: 500,
        concurrency: 4,
        total_conns: 4,
        sources: 1,
    };
    let mut client = LoadGen::new(b, iface(CLI), TcpConfig::default(), load);
    if over_tls {
        client = client.with_tls(LoadClientConfig::new(true, true));
    }
    let mut now = Instant::from_millis(1);
    let limit = now + Duration::from_secs(60);
    let server_poll = |server: &mut Engine<_>, now| {
        COUNTING.with(|c| c.set(true));
        server.poll(now);
        COUNTING.with(|c| c.set(false));
    };
    // Warm up (handshakes, buffers), then count over the next 1,000
    // requests, before any connection closes.
    let mut mark = None;
    loop {
        now = now + Duration::from_micros(20);
        assert!(now < limit, "stalled: {:?}", client.stats());
        client.poll(now);
        server_poll(&mut server, now);
        let responses = client.stats().responses;
        let allocations = ALLOCATIONS.with(Cell::get);
        match mark {
            None if responses >= 400 => mark = Some((responses, allocations)),
            Some((r0, a0)) if responses >= r0 + 1_000 => {
                let per = (allocations - a0) as f64 / (responses - r0) as f64;
                eprintln!(
                    "{} allocations in the server engine over {} requests = {per:.3} a request (TLS: {over_tls})",
                    allocations - a0,
                    responses - r0
                );
                return per;
            }
            _ => {}
        }
    }
}
