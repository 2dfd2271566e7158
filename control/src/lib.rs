//! tlsdp's control plane: the configuration model (`dpd.toml`, validated as a
//! whole) and the control API spoken over `dpd`'s Unix socket, with `dpctl`
//! as its client.
#![forbid(unsafe_code)]

pub mod api;
pub mod config;
