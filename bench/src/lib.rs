//! dpbench: tlsdp's lab benchmarking harness — a software Ixia for TLS
//! offload. A non-blocking rustls (aws-lc-rs) load generator on kernel
//! sockets (or, `--bypass`, on tlsdp's own stack over a DPDK port), the tests of BENCH.md (CPS, TPS, throughput, concurrency, L4 CPS,
//! RPS, latency, crypto ceiling) with their method (phases, repeats, best and
//! median, the 0.1 % error rule), side-by-side runs against peer terminators,
//! and reports (Markdown, CSV, JSON, SVG).
#![forbid(unsafe_code)]

pub mod alone;
pub mod bypass;
pub mod ceiling;
pub mod dut;
pub mod http;
pub mod loadgen;
pub mod report;
pub mod run;
pub mod scenario;
pub mod svg;
pub mod target;
pub mod tls;
