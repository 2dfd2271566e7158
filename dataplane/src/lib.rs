//! tlsdp's dataplane: the safe DPDK layer, ports, the network layer (ARP,
//! IPv4, ICMP) and the per-core engine.
#![deny(unsafe_code)]

pub mod app;
pub mod checksum;
pub mod controller;
pub mod daemon;
#[allow(unsafe_code)]
pub mod dpdk;
pub mod engine;
pub mod files;
pub mod fuzzing;
pub mod loadgen;
pub mod logging;
pub mod net;
pub mod port;
pub mod snapshot;
pub mod stats;
pub mod steer;
pub mod tcp;
pub mod time;

/// The global allocator `dpd`, `dpbench` and the benchmarks install
/// (`#[global_allocator] static A: dataplane::Allocator = dataplane::Allocator;`).
/// The engine loop allocates nothing per packet, but rustls allocates per
/// handshake message (encodings, transcript, key schedule): mimalloc's
/// per-thread free lists make those allocations a few instructions each,
/// where glibc's malloc costs several times that (docs/profile.md).
pub use mimalloc::MiMalloc as Allocator;
