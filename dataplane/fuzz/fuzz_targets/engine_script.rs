//! Scripts of segments from a peer with many connections, in bursts of up
//! to 64 frames, against an engine serving plain, TLS and proxied VIPs with
//! a health-checked pool (see `dataplane::fuzzing::engine_script`).
//! Run: `cd dataplane/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run engine_script corpus/engine_script`.
//! The certificate is made once per process with openssl
//! (`crypto::testcert::fuzz_config`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    dataplane::fuzzing::engine_script(data, Some(crypto::testcert::fuzz_config()));
});
