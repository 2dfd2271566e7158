//! `dpbench`, tlsdp's lab benchmarking harness (BENCH.md). Built in its own
//! issue; nothing is exported yet.
#![forbid(unsafe_code)]
