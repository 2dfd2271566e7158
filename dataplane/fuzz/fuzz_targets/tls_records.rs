//! Records after a real handshake: alerts, KeyUpdate, renegotiation,
//! padding, framing and authentication failures (see
//! `crypto::session::fuzz_established_input`).
//! Run: `cd dataplane/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run tls_records corpus/tls_records`.
#![no_main]

use std::sync::OnceLock;

use crypto::certs::CertStore;
use crypto::session::{fuzz_established_input, TlsConfig};

fn config() -> &'static TlsConfig {
    static CFG: OnceLock<TlsConfig> = OnceLock::new();
    CFG.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tlsdp-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut store = CertStore::new();
        store.add(crypto::testcert::self_signed(&dir, "c", crypto::testcert::P256, "fuzz.test"));
        TlsConfig::new(store).unwrap()
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_established_input(config(), data);
});
