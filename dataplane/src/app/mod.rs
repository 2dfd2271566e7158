//! Applications run by the engine on top of TCP: the built-in HTTP/1.x
//! responder, in clear or behind TLS.

pub mod health;
pub mod pool;
pub mod proxy;
pub mod proxy_protocol;
pub mod responder;
pub mod tls;
