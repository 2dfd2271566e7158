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
pub mod net;
pub mod port;
pub mod snapshot;
pub mod stats;
pub mod steer;
pub mod tcp;
pub mod time;
