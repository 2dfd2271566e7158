//! tlsdp's control plane: the configuration model (`dpd.toml`, validated as a
//! whole) and the control API spoken over `dpd`'s Unix socket, with `dpctl`
//! as its client, and the Prometheus exposition of the counters.
#![forbid(unsafe_code)]

pub mod api;
pub mod change;
pub mod config;
pub mod counters;
pub mod fuzzing;
pub mod metrics;
