//! TLS 1.2's suites with the PRF on a prepared HMAC key, the key block
//! derived once per handshake, and the transcript hash on
//! [`crate::hashing`]'s states (docs/architecture.md, "TLS";
//! docs/profile.md).
//!
//! RFC 5246 §5's `P_hash` tags with one HMAC key again and again: here
//! the key's pads are hashed once per PRF call ([`crate::kdf`]'s
//! `PreparedKey`) and each tag continues copies of them, with nothing
//! allocated (AWS-LC's PRF through aws-lc-rs copies the secret into a
//! heap buffer and returns the output in another). And rustls computes a
//! connection's key block (RFC 5246 §6.3) when it installs the record
//! keys and again when `dangerous_into_kernel_connection` hands the
//! secrets over: the block is kept in the session's
//! [`crate::secret_cache`] the first time and found the second. The
//! transcript hash is the TLS 1.3 suites' (forks are copies of a plain
//! state, not `EVP_MD_CTX`s allocated inside AWS-LC). Same
//! output as AWS-LC's PRF (tested for SHA-256 and SHA-384, every output
//! length to three blocks, short and long secrets).

use crate::hashing::{Sha2, Sha256, Sha384};
use crate::kdf::{PreparedKey, HASH_SHA256, HASH_SHA384};
use crate::secret_cache;
use rustls::crypto::aws_lc_rs::cipher_suite as cs;
use rustls::crypto::hash::Hash;
use rustls::crypto::tls12::Prf;
use rustls::crypto::ActiveKeyExchange;
use rustls::{CipherSuiteCommon, Error, SupportedCipherSuite, Tls12CipherSuite};

/// RFC 5246 §6.3's label of the key block.
pub(crate) const KEY_EXPANSION: &[u8] = b"key expansion";

/// The longest output of the hash functions here (SHA-384's), in bytes.
const MAX_OUTPUT: usize = 48;

/// `PRF(secret, label, seed)` (RFC 5246 §5) into `out`: `P_hash` on
/// `secret` as an HMAC key, `A(0) = label + seed`, `A(i) = HMAC(A(i-1))`,
/// each block `HMAC(A(i) + label + seed)`.
fn prf<H: Sha2>(out: &mut [u8], secret: &[u8], label: &[u8], seed: &[u8]) {
    let key = PreparedKey::<H>::new(secret);
    let mut a = [0u8; MAX_OUTPUT];
    key.tag_into(label, &[], seed, &mut a);
    let mut chunks = out.chunks_mut(H::OUTPUT).peekable();
    while let Some(chunk) = chunks.next() {
        let mut block = [0u8; MAX_OUTPUT];
        key.tag_into(&a[..H::OUTPUT], &[label], seed, &mut block);
        chunk.copy_from_slice(&block[..chunk.len()]);
        block.fill(0);
        std::hint::black_box(&mut block);
        if chunks.peek().is_some() {
            let mut next = [0u8; MAX_OUTPUT];
            key.tag_into(&a[..H::OUTPUT], &[], &[], &mut next);
            a = next;
            next.fill(0);
            std::hint::black_box(&mut next);
        }
    }
    a.fill(0);
    std::hint::black_box(&mut a);
}

/// TLS 1.2's PRF on `H` ([`prf`]), its key blocks kept in the lent
/// secret cache.
pub(crate) struct PreparedPrf<H: Sha2>(std::marker::PhantomData<H>);

impl<H: Sha2> Prf for PreparedPrf<H> {
    fn for_key_exchange(
        &self,
        output: &mut [u8; 48],
        kx: Box<dyn ActiveKeyExchange>,
        peer_pub_key: &[u8],
        label: &[u8],
        seed: &[u8],
    ) -> Result<(), Error> {
        let shared = kx.complete_for_tls_version(peer_pub_key, &rustls::version::TLS12)?;
        prf::<H>(output, shared.secret_bytes(), label, seed);
        Ok(())
    }

    fn for_secret(&self, output: &mut [u8], secret: &[u8], label: &[u8], seed: &[u8]) {
        if label != KEY_EXPANSION {
            return prf::<H>(output, secret, label, seed);
        }
        if !secret_cache::recall_key_block(secret, seed, output) {
            #[cfg(test)]
            KEY_BLOCKS_COMPUTED.with(|n| n.set(n.get() + 1));
            prf::<H>(output, secret, label, seed);
            secret_cache::keep_key_block(secret, seed, output);
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Key blocks this thread's PRF computed (not found kept).
    static KEY_BLOCKS_COMPUTED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Key blocks this thread's PRF computed so far.
#[cfg(test)]
pub(crate) fn key_blocks_computed() -> u64 {
    KEY_BLOCKS_COMPUTED.with(std::cell::Cell::get)
}

/// `base`'s TLS 1.2 suite (a suite that is not TLS 1.2 fails the build).
const fn tls12_of(base: SupportedCipherSuite) -> &'static Tls12CipherSuite {
    match base {
        SupportedCipherSuite::Tls12(s) => s,
        // Evaluated at compile time (the statics below): never at run time.
        SupportedCipherSuite::Tls13(_) => panic!("a TLS 1.2 suite"),
    }
}

/// `base` with `prf` and `hash` (the transcript's).
const fn with_prf(
    base: SupportedCipherSuite,
    hash: &'static dyn Hash,
    prf: &'static dyn Prf,
) -> Tls12CipherSuite {
    let s = tls12_of(base);
    Tls12CipherSuite {
        common: CipherSuiteCommon {
            suite: s.common.suite,
            hash_provider: hash,
            confidentiality_limit: s.common.confidentiality_limit,
        },
        prf_provider: prf,
        kx: s.kx,
        sign: s.sign,
        aead_alg: s.aead_alg,
    }
}

static PRF_SHA256: PreparedPrf<Sha256> = PreparedPrf(std::marker::PhantomData);
static PRF_SHA384: PreparedPrf<Sha384> = PreparedPrf(std::marker::PhantomData);

static ECDSA_AES_128_GCM: Tls12CipherSuite = with_prf(
    cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    &HASH_SHA256,
    &PRF_SHA256,
);
static ECDSA_AES_256_GCM: Tls12CipherSuite = with_prf(
    cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    &HASH_SHA384,
    &PRF_SHA384,
);
static ECDSA_CHACHA20: Tls12CipherSuite = with_prf(
    cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    &HASH_SHA256,
    &PRF_SHA256,
);
static RSA_AES_128_GCM: Tls12CipherSuite = with_prf(
    cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    &HASH_SHA256,
    &PRF_SHA256,
);
static RSA_AES_256_GCM: Tls12CipherSuite = with_prf(
    cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    &HASH_SHA384,
    &PRF_SHA384,
);
static RSA_CHACHA20: Tls12CipherSuite = with_prf(
    cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    &HASH_SHA256,
    &PRF_SHA256,
);

/// `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`, its key block derived once.
pub(crate) const ECDHE_ECDSA_AES_128_GCM_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls12(&ECDSA_AES_128_GCM);
/// `TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384`, likewise.
pub(crate) const ECDHE_ECDSA_AES_256_GCM_SHA384: SupportedCipherSuite =
    SupportedCipherSuite::Tls12(&ECDSA_AES_256_GCM);
/// `TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256`, likewise.
pub(crate) const ECDHE_ECDSA_CHACHA20_POLY1305_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls12(&ECDSA_CHACHA20);
/// `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`, likewise.
pub(crate) const ECDHE_RSA_AES_128_GCM_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls12(&RSA_AES_128_GCM);
/// `TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384`, likewise.
pub(crate) const ECDHE_RSA_AES_256_GCM_SHA384: SupportedCipherSuite =
    SupportedCipherSuite::Tls12(&RSA_AES_256_GCM);
/// `TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256`, likewise.
pub(crate) const ECDHE_RSA_CHACHA20_POLY1305_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls12(&RSA_CHACHA20);

/// The TLS 1.2 suites with the key block derived once.
pub(crate) const TLS12_SUITES: [SupportedCipherSuite; 6] = [
    ECDHE_ECDSA_AES_128_GCM_SHA256,
    ECDHE_ECDSA_AES_256_GCM_SHA384,
    ECDHE_ECDSA_CHACHA20_POLY1305_SHA256,
    ECDHE_RSA_AES_128_GCM_SHA256,
    ECDHE_RSA_AES_256_GCM_SHA384,
    ECDHE_RSA_CHACHA20_POLY1305_SHA256,
];

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::tls_prf;

    fn aws_lc(
        alg: &'static tls_prf::Algorithm,
        secret: &[u8],
        label: &[u8],
        seed: &[u8],
        len: usize,
    ) -> Vec<u8> {
        tls_prf::Secret::new(alg, secret)
            .unwrap()
            .derive(label, seed, len)
            .unwrap()
            .as_ref()
            .to_vec()
    }

    /// Every output length over three blocks, secrets shorter and longer
    /// than the block (a long one is hashed first), labels and seeds of
    /// TLS's sizes and across a block.
    #[test]
    fn agrees_with_aws_lc() {
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8).collect();
        for (secret_len, label, seed_len) in [
            (48, &b"key expansion"[..], 64),
            (32, &b"extended master secret"[..], 32),
            (48, &b"server finished"[..], 48),
            (200, &b"x"[..], 100),
            (1, &b"test label"[..], 1),
        ] {
            let (secret, seed) = (&bytes[..secret_len], &bytes[100..100 + seed_len]);
            for len in 1..=3 * 48 {
                let mut ours = vec![0u8; len];
                prf::<Sha256>(&mut ours, secret, label, seed);
                assert_eq!(
                    ours,
                    aws_lc(&tls_prf::P_SHA256, secret, label, seed, len),
                    "SHA-256 {secret_len} {len}"
                );
                prf::<Sha384>(&mut ours, secret, label, seed);
                assert_eq!(
                    ours,
                    aws_lc(&tls_prf::P_SHA384, secret, label, seed, len),
                    "SHA-384 {secret_len} {len}"
                );
            }
        }
    }

    #[test]
    fn every_tls12_suite_has_its_hash_s_prf() {
        for s in TLS12_SUITES {
            let SupportedCipherSuite::Tls12(ours) = s else {
                panic!("TLS 1.2")
            };
            let stock = rustls::crypto::aws_lc_rs::default_provider()
                .cipher_suites
                .into_iter()
                .find(|b| b.suite() == s.suite())
                .unwrap();
            let SupportedCipherSuite::Tls12(stock) = stock else {
                panic!("TLS 1.2")
            };
            let (mut a, mut b) = ([0u8; 100], [0u8; 100]);
            ours.prf_provider
                .for_secret(&mut a, b"secret", b"label", b"seed");
            stock
                .prf_provider
                .for_secret(&mut b, b"secret", b"label", b"seed");
            assert_eq!(a, b, "{:?}", s.suite());
            assert_eq!(
                ours.common.hash_provider.algorithm(),
                stock.common.hash_provider.algorithm()
            );
        }
    }
}
