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
