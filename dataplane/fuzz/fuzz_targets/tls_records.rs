//! Records after a real handshake: alerts, KeyUpdate, renegotiation,
//! padding, framing and authentication failures (see
//! `crypto::session::fuzz_established_input`).
//! Run: `cd dataplane/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run tls_records corpus/tls_records`.
#![no_main]

use crypto::session::fuzz_established_input;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_established_input(crypto::testcert::fuzz_config(), data);
});
