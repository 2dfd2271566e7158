//! Everything TLS for tlsdp (DESIGN.md, `crypto/`): the certificate store,
//! TLS policies, the per-connection `Session` (handshake through rustls'
//! unbuffered API, record layer on AWS-LC) and ticket keys. No other crate
//! names a rustls type.
//!
//! Built so far: the certificate store ([`certs`]) and a first server
//! session on rustls' unbuffered API ([`session`]).
#![forbid(unsafe_code)]

pub mod certs;
pub mod record;
pub mod session;
#[cfg(test)]
mod testutil;
