//! Everything TLS for tlsdp (DESIGN.md, `crypto/`): the certificate store,
//! TLS policies, the per-connection `Session` (handshake through rustls'
//! unbuffered API, record layer on AWS-LC) and ticket keys.
//!
//! Empty until the TLS termination issue fills it: no other crate may name a
//! rustls type, so nothing here is exported yet.
#![forbid(unsafe_code)]
