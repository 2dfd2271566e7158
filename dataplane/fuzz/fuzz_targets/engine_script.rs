//! Scripts of segments from a peer with many connections, in bursts of up
//! to 64 frames, against an engine serving plain, TLS and proxied VIPs with
//! a health-checked pool (see `dataplane::fuzzing::engine_script`).
//! Run: `cd dataplane/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run engine_script corpus/engine_script`.
//! The certificate is made once per process with openssl.
#![no_main]

use std::sync::OnceLock;

use crypto::certs::CertStore;
use crypto::session::TlsConfig;

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
    dataplane::fuzzing::engine_script(data, Some(config()));
});
