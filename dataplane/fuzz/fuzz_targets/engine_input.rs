//! Arbitrary frames into a fresh engine (ARP, IPv4, ICMP, TCP, responder).
//! Run: `cd dataplane/fuzz && cargo fuzz run engine_input corpus/engine_input`
//! (nightly, or RUSTC_BOOTSTRAP=1). Crashes go into the corpus, which
//! `cargo test` replays.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    dataplane::fuzzing::engine_input(data);
});
