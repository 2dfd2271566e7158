//! Self-signed certificates made with the openssl command, for tests,
//! benchmarks and fuzz targets of every crate (not for production use).

use std::path::Path;
use std::process::Command;

use crate::certs::Cert;

/// RSA-2048 key arguments for [`self_signed`].
pub const RSA2048: &[&str] = &["-newkey", "rsa:2048"];
/// ECDSA P-256 key arguments for [`self_signed`].
pub const P256: &[&str] = &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"];
/// ECDSA P-384 key arguments for [`self_signed`].
pub const P384: &[&str] = &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"];

/// Makes `dir/NAME.pem` and `dir/NAME.key`: a certificate for the DNS name
/// `dns`, valid 30 days, with a key from `key_args`; loads and returns it.
///
/// # Panics
/// When openssl is missing or fails (test setup).
pub fn self_signed(dir: &Path, name: &str, key_args: &[&str], dns: &str) -> Cert {
    let (crt, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    let subject = format!("/CN={dns}");
    let san = format!("subjectAltName=DNS:{dns}");
    let out = Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-days", "30", "-subj", &subject])
        .args(key_args)
        .args([
            "-addext",
            &san,
            "-addext",
            "basicConstraints=critical,CA:FALSE",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .expect("openssl (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64;
    Cert::load(&crt, &key, now).expect("a fresh certificate loads")
}

/// One TLS configuration with a self-signed P-256 certificate for
/// `fuzz.test`, made once per process (the fuzz targets').
///
/// # Panics
/// When openssl is missing or the certificate does not load.
pub fn fuzz_config() -> &'static crate::session::TlsConfig {
    static CFG: std::sync::OnceLock<crate::session::TlsConfig> = std::sync::OnceLock::new();
    CFG.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tlsdp-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let mut store = crate::certs::CertStore::new();
        store.add(self_signed(&dir, "c", P256, "fuzz.test"));
        crate::session::TlsConfig::new(store).expect("a TLS configuration")
    })
}
