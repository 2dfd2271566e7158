//! Test helpers: certificates made with the openssl command, as operators
//! make them.
#![cfg(test)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test CA in `dir` (made once): `ca.pem`, `ca.key`.
pub fn ca(dir: &Path) -> PathBuf {
    let ca = dir.join("ca.pem");
    if !ca.exists() {
        let key = dir.join("ca.key");
        openssl(&[
            "req",
            "-x509",
            "-nodes",
            "-days",
            "36500",
            "-subj",
            "/CN=tlsdp test CA",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            ca.to_str().unwrap(),
        ]);
    }
    ca
}

/// Makes a leaf certificate signed by the test CA with openssl (the
/// tool operators use); the PEM holds leaf then CA. Returns (chain, key).
pub fn make(dir: &Path, name: &str, key_args: &[&str], sans: &str) -> (PathBuf, PathBuf) {
    let ca = ca(dir);
    let p = |ext: &str| dir.join(format!("{name}.{ext}"));
    let (key, csr, leaf, ext, chain) = (p("key"), p("csr"), p("leaf"), p("ext"), p("pem"));
    let mut req = vec!["req", "-new", "-nodes", "-subj"];
    let subj = format!("/CN={name}");
    req.push(&subj);
    req.extend_from_slice(key_args);
    req.extend_from_slice(&[
        "-keyout",
        key.to_str().unwrap(),
        "-out",
        csr.to_str().unwrap(),
    ]);
    openssl(&req);
    fs::write(
        &ext,
        format!("subjectAltName={sans}\nbasicConstraints=critical,CA:FALSE\n"),
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        csr.to_str().unwrap(),
        "-CA",
        ca.to_str().unwrap(),
        "-CAkey",
        dir.join("ca.key").to_str().unwrap(),
        "-CAcreateserial",
        "-days",
        "36500",
        "-extfile",
        ext.to_str().unwrap(),
        "-out",
        leaf.to_str().unwrap(),
    ]);
    let mut pem = fs::read(&leaf).unwrap();
    pem.extend(fs::read(&ca).unwrap());
    fs::write(&chain, pem).unwrap();
    (chain, key)
}

pub const RSA: &[&str] = &["-newkey", "rsa:2048"];
pub const P256: &[&str] = &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"];
pub const P384: &[&str] = &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"];

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A store with RSA-2048, P-256 and P-384 certificates for `rsa.test`,
/// `p256.test` and `p384.test` (made in `dir` on first use).
pub fn test_store(dir: &Path) -> crate::certs::CertStore {
    let mut store = crate::certs::CertStore::new();
    for (name, args) in [("rsa", RSA), ("p256", P256), ("p384", P384)] {
        let (c, k) = if dir.join(format!("{name}.key")).exists() {
            (
                dir.join(format!("{name}.pem")),
                dir.join(format!("{name}.key")),
            )
        } else {
            make(dir, name, args, &format!("DNS:{name}.test"))
        };
        store.add(crate::certs::Cert::load(&c, &k, now()).unwrap());
    }
    store
}

/// A rustls client trusting the test CA in `dir`.
pub fn client_config(
    dir: &Path,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> std::sync::Arc<rustls::ClientConfig> {
    let ca = rustls_pemfile::certs(&mut &fs::read(dir.join("ca.pem")).unwrap()[..])
        .next()
        .unwrap()
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    std::sync::Arc::new(
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}
