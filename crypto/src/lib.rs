//! Everything TLS for tlsdp (docs/architecture.md, "TLS"): the certificate store,
//! TLS policies, the per-connection `Session` (handshake through rustls'
//! unbuffered API, record layer on AWS-LC) and ticket keys. No other crate
//! names a rustls type.
//!
//! - [`certs`]: certificates and keys, chosen by SNI and signature scheme;
//! - [`client`]: a non-verifying client for load generators and tests;
//! - [`files`]: reading operators' certificate and key files, bounded;
//! - [`kdf`]: TLS 1.3's key schedule on HMAC keys prepared once per secret;
//! - [`policy`]: a VIP's versions, suites, groups, ALPN and resumption;
//! - [`session`]: one connection, handshake on rustls' unbuffered API;
//! - [`record`]: the record layer on AWS-LC after the handshake;
//! - [`tickets`]: stateless ticket keys rotated without shared state.
#![forbid(unsafe_code)]

pub mod certs;
pub mod client;
pub mod files;
mod hashing;
pub mod kdf;
mod lazy_aead;
pub mod policy;
mod random;
pub mod record;
mod secret_cache;
pub mod session;
#[doc(hidden)]
pub mod testcert;
#[cfg(test)]
mod testutil;
pub mod tickets;
mod tls12_prf;
