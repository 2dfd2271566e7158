//! Records after a real handshake: alerts, KeyUpdate, renegotiation,
//! padding, framing and authentication failures (see
//! `crypto::session::fuzz_established_input`).
//! Run: `cd dataplane/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run tls_records corpus/tls_records`.
#![no_main]

use std::sync::OnceLock;

use crypto::certs::{Cert, CertStore};
use crypto::session::{fuzz_established_input, TlsConfig};

fn config() -> &'static TlsConfig {
    static CFG: OnceLock<TlsConfig> = OnceLock::new();
    CFG.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tlsdp-fuzz-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("c.pem"), dir.join("k.pem"));
        let ok = std::process::Command::new("openssl")
            .args(["req", "-x509", "-nodes", "-days", "30", "-subj", "/CN=fuzz.test", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"])
            .args(["-addext", "subjectAltName=DNS:fuzz.test"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .status()
            .expect("openssl")
            .success();
        assert!(ok);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let mut store = CertStore::new();
        store.add(Cert::load(&cert, &key, now).unwrap());
        TlsConfig::new(store).unwrap()
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_established_input(config(), data);
});
