//! Applications run by the engine on top of TCP: for now the built-in
//! HTTP/1.x responder used by benchmarks and tests.

pub mod responder;
