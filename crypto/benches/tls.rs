//! `crypto::session` alone, on one core (not a test): full handshakes per
//! second by key type and version with the server's time measured apart
//! from the (non-verifying) client's, and the AWS-LC record layer's
//! sealing rate for 16 KiB records, and the TLS 1.3 key schedule's HKDF
//! on rustls' stock aws-lc-rs provider against `crypto::kdf`'s, side by
//! side in one run; and a P-256 handshake's server time against its
//! public-key work alone (`dpbench ceiling`'s measure), in alternating
//! slices so both see the same minute of a VM whose speed drifts.
//!
//!   cargo bench -p crypto --bench tls [-- SECONDS]

use std::time::{Duration, Instant};

use rustls::crypto::tls13::Hkdf;

use crypto::certs::CertStore;
use crypto::client::{LoadClientConfig, LoadClientSession};
use crypto::kdf;
use crypto::session::{ServerSession, TlsConfig};
use crypto::testcert::{self_signed, P256, P384, RSA2048};

/// Feeds all of `tls` to the client.
fn to_client(c: &mut LoadClientSession, tls: &[u8]) {
    let mut at = 0;
    while at < tls.len() {
        at += c.receive(&tls[at..]).unwrap();
    }
}

/// Handshakes for `secs`; returns (count, server seconds, client seconds).
fn handshakes(cfg: &TlsConfig, client: &LoadClientConfig, secs: f64) -> (u64, f64, f64) {
    let (mut n, mut server, mut client_t) = (0u64, Duration::ZERO, Duration::ZERO);
    let start = Instant::now();
    let (mut c_out, mut s_out, mut plain) = (Vec::new(), Vec::new(), Vec::new());
    while start.elapsed().as_secs_f64() < secs {
        let t = Instant::now();
        let mut c = LoadClientSession::new(client, "tlsdp.test").unwrap();
        c.take_tls(&mut c_out);
        client_t += t.elapsed();
        let t = Instant::now();
        let mut s = ServerSession::new(cfg).unwrap();
        server += t.elapsed();
        while s.is_handshaking() {
            let t = Instant::now();
            s.process(&c_out, &mut s_out, &mut plain).unwrap();
            server += t.elapsed();
            c_out.clear();
            let t = Instant::now();
            to_client(&mut c, &s_out);
            c.take_tls(&mut c_out);
            client_t += t.elapsed();
            s_out.clear();
        }
        assert!(!c.is_handshaking());
        n += 1;
        drop(s);
    }
    (n, server.as_secs_f64(), client_t.as_secs_f64())
}

/// Nanoseconds per round of one TLS 1.3 secret's life on `hkdf`: extract,
/// then four expansions (key, IV, finished key, the next secret), as the
/// key schedule does for each traffic secret; the best of `rounds` runs of
/// `n`.
fn key_schedule_ns(hkdf: &dyn Hkdf, n: u32) -> f64 {
    let ikm = [0x5au8; 32];
    let salt = [0xa5u8; 32];
    let labels: [&[u8]; 4] = [
        b"tls13 key",
        b"tls13 iv",
        b"tls13 finished",
        b"tls13 derived",
    ];
    let t = Instant::now();
    let mut sink = 0u8;
    for _ in 0..n {
        let e = hkdf.extract_from_secret(Some(&salt), &ikm);
        for l in labels {
            sink ^= e.expand_block(&[l]).as_ref()[0];
        }
    }
    std::hint::black_box(sink);
    t.elapsed().as_secs_f64() * 1e9 / n as f64
}

/// µs per handshake's worth of the server's public-key work with an
/// X25519 key exchange and a P-256 signature, as `dpbench ceiling`
/// counts it (key generation, shared secret, signing the 130 bytes a
/// TLS 1.3 CertificateVerify signs), timed for `secs`.
fn p256_public_key_us(secs: f64) -> f64 {
    use aws_lc_rs::{agreement, rand, signature};
    let rng = rand::SystemRandom::new();
    let key =
        signature::EcdsaKeyPair::generate(&signature::ECDSA_P256_SHA256_ASN1_SIGNING).unwrap();
    let peer = agreement::EphemeralPrivateKey::generate(&agreement::X25519, &rng)
        .unwrap()
        .compute_public_key()
        .unwrap();
    let msg = [0x5au8; 130];
    let (start, mut n) = (Instant::now(), 0u64);
    while start.elapsed().as_secs_f64() < secs {
        let k = agreement::EphemeralPrivateKey::generate(&agreement::X25519, &rng).unwrap();
        std::hint::black_box(k.compute_public_key().unwrap());
        let peer = agreement::UnparsedPublicKey::new(&agreement::X25519, peer.as_ref());
        agreement::agree_ephemeral(k, peer, (), |s| {
            std::hint::black_box(s);
            Ok(())
        })
        .unwrap();
        std::hint::black_box(key.sign(&rng, &msg).unwrap());
        n += 1;
    }
    start.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn main() {
    let secs: f64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2.0);
    let dir = tempfile::tempdir().unwrap();
    let keys: [(&str, &[&str]); 3] = [
        ("RSA-2048", RSA2048),
        ("ECDSA-P256", P256),
        ("ECDSA-P384", P384),
    ];
    println!("crypto::session alone, one core; server time measured apart from the client's\n");
    for (name, args) in keys {
        let mut store = CertStore::new();
        store.add(self_signed(dir.path(), name, args, "tlsdp.test"));
        let cfg = TlsConfig::new(store).unwrap();
        for tls13 in [true, false] {
            let client = LoadClientConfig::new(tls13, !name.starts_with("RSA"));
            let (n, s, c) = handshakes(&cfg, &client, secs);
            println!(
                "HANDSHAKE {name:<10} {}  {n:>6} handshakes: server {:>7.1} µs = {:>6.0} handshakes/s per core; client {:>6.1} µs",
                if tls13 { "TLS1.3" } else { "TLS1.2" },
                s * 1e6 / n as f64,
                n as f64 / s,
                c * 1e6 / n as f64,
            );
        }
    }

    let mut store = CertStore::new();
    store.add(self_signed(dir.path(), "p256", P256, "tlsdp.test"));
    let cfg = TlsConfig::new(store).unwrap();

    // P-256 handshakes against their public-key work, 20 ms of each in
    // turn: the ratio of each pair, so a drifting VM moves both alike.
    for tls13 in [true, false] {
        let client = LoadClientConfig::new(tls13, true);
        let mut ratios = Vec::new();
        let start = Instant::now();
        while start.elapsed().as_secs_f64() < secs {
            let (n, server, _) = handshakes(&cfg, &client, 0.02);
            let public_key = p256_public_key_us(0.02);
            ratios.push(public_key / (server * 1e6 / n as f64));
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "CEILING   ECDSA-P256 {}  public-key work ÷ server handshake, {} pairs of 20 ms slices: median {:.3} (range {:.3}-{:.3})",
            if tls13 { "TLS1.3" } else { "TLS1.2" },
            ratios.len(),
            ratios[ratios.len() / 2],
            ratios[0],
            ratios[ratios.len() - 1],
        );
    }

    // The record layer: seal 16 KiB records in place.
    for tls13 in [true, false] {
        let client = LoadClientConfig::new(tls13, true);
        let mut c = LoadClientSession::new(&client, "tlsdp.test").unwrap();
        let mut s = ServerSession::new(&cfg).unwrap();
        let (mut c_out, mut s_out, mut plain) = (Vec::new(), Vec::new(), Vec::new());
        c.take_tls(&mut c_out);
        while s.is_handshaking() {
            s.process(&c_out, &mut s_out, &mut plain).unwrap();
            c_out.clear();
            to_client(&mut c, &s_out);
            s_out.clear();
            c.take_tls(&mut c_out);
        }
        let (prefix, overhead) = s.record_layout().unwrap();
        let mut rec = vec![7u8; 16384 + overhead];
        let n = 100_000;
        let t = Instant::now();
        for _ in 0..n {
            s.seal_in_place(&mut rec, 16384).unwrap();
            rec[prefix] ^= 1;
        }
        let e = t.elapsed().as_secs_f64();
        println!(
            "RECORD    {} AES-128-GCM 16 KiB records sealed in place: {:.2} µs each = {:.1} Gbit/s per core",
            if tls13 { "TLS1.3" } else { "TLS1.2" },
            e * 1e6 / n as f64,
            n as f64 * 16384.0 * 8.0 / e / 1e9
        );
    }

    // The key schedule's HKDF, stock and prepared alternately; best of 5.
    let stock = rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256;
    let [(s_name, stock), (p_name, prepared)] =
        [("stock", stock), ("kdf", kdf::TLS13_AES_128_GCM_SHA256)]
            .map(|(name, suite)| (name, suite.tls13().unwrap().hkdf_provider));
    let (mut best_s, mut best_p) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        best_s = best_s.min(key_schedule_ns(stock, 100_000));
        best_p = best_p.min(key_schedule_ns(prepared, 100_000));
    }
    println!(
        "HKDF      SHA-256 extract + 4 expands, best of 5: {s_name} {best_s:.0} ns, {p_name} {best_p:.0} ns ({:.2}x)",
        best_s / best_p
    );
}
