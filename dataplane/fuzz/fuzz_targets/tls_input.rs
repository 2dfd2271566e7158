//! Arbitrary bytes into a fresh server TLS session (handshake and records).
//! Run: `cd dataplane/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run tls_input corpus/tls_input`.
//! The certificate is made once per process with openssl
//! (`crypto::testcert::fuzz_config`).
#![no_main]

use crypto::session::fuzz_server_input;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_server_input(crypto::testcert::fuzz_config(), data);
});
