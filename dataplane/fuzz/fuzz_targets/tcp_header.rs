//! Arbitrary TCP segments through the engine's header parser and writer,
//! checked against smoltcp's (`dataplane::fuzzing::tcp_header`).
//! Run: `cd dataplane/fuzz && cargo fuzz run tcp_header corpus/tcp_header`
//! (nightly, or RUSTC_BOOTSTRAP=1). `cargo test` replays the corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    dataplane::fuzzing::tcp_header(data);
});
