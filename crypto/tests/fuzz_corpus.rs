//! Replays the TLS fuzz corpora (`dataplane/fuzz/corpus/tls_input` through
//! `fuzz_server_input`, `tls_records` through `fuzz_established_input`), and (ignored) records seeds from real rustls
//! clients: `cargo test -p crypto --test fuzz_corpus -- --ignored`.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crypto::certs::CertStore;
use crypto::session::{fuzz_established_input, fuzz_server_input, ServerSession, TlsConfig};

fn corpus_dir() -> PathBuf {
    corpus("tls_input")
}

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../dataplane/fuzz/corpus")
        .join(target)
}

/// A TLS configuration with a fresh P-256 certificate (openssl), for the
/// name `fuzz.test`.
pub fn config(dir: &Path) -> TlsConfig {
    let mut store = CertStore::new();
    store.add(crypto::testcert::self_signed(
        dir,
        "c",
        crypto::testcert::P256,
        "fuzz.test",
    ));
    TlsConfig::new(store).unwrap()
}

#[test]
fn tls_input_corpus_replays() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let mut files: Vec<PathBuf> = fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("client-hello-tls13")),
        "seed missing"
    );
    for f in files {
        eprintln!("replaying {}", f.display());
        fuzz_server_input(&cfg, &fs::read(&f).unwrap());
    }
}

#[test]
fn tls_records_corpus_replays() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let mut files: Vec<PathBuf> = fs::read_dir(corpus("tls_records"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for seed in [
        "key-update-requested-tls13",
        "renegotiation-tls12",
        "padded-tls13",
    ] {
        assert!(
            files.iter().any(|f| f.ends_with(seed)),
            "seed {seed} missing"
        );
    }
    for f in files {
        eprintln!("replaying {}", f.display());
        fuzz_established_input(&cfg, &fs::read(&f).unwrap());
    }
}

/// Records the first flights of real rustls clients (TLS 1.3 and 1.2) as
/// seeds: a chunk-size byte, then the client's bytes.
#[test]
#[ignore]
fn make_seeds() {
    use rustls::{ClientConfig, ClientConnection, RootCertStore};
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    fs::create_dir_all(corpus_dir()).unwrap();
    let roots = RootCertStore::empty();
    for (name, versions) in [
        ("client-hello-tls13", &[&rustls::version::TLS13][..]),
        ("client-hello-tls12", &[&rustls::version::TLS12][..]),
    ] {
        let client = ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
        let mut c =
            ClientConnection::new(Arc::new(client), "fuzz.test".try_into().unwrap()).unwrap();
        let mut seed = vec![200u8];
        c.write_tls(&mut seed).unwrap();
        // Sanity: the server session accepts it.
        let mut s = ServerSession::new(&cfg).unwrap();
        s.process(&seed[1..], &mut Vec::new(), &mut Vec::new())
            .unwrap();
        fs::write(corpus_dir().join(name), seed).unwrap();
    }
}
