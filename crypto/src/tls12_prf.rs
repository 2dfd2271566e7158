//! TLS 1.2's PRF, with the key block derived once per handshake
//! (docs/architecture.md, "TLS"; docs/profile.md).
//!
//! rustls computes a TLS 1.2 connection's key block (RFC 5246 §6.3,
//! `PRF(master_secret, "key expansion", server_random + client_random)`)
//! when it installs the record keys, and again when
//! `dangerous_into_kernel_connection` hands the secrets over: the same
//! PRF run twice, about half a microsecond each with SHA-256. The PRF
//! here is AWS-LC's (rustls' aws-lc-rs provider), and the key block it
//! computes is kept in the session's [`crate::secret_cache`] for the
//! second time. Everything else goes to AWS-LC unchanged.

use crate::secret_cache;
use rustls::crypto::aws_lc_rs::cipher_suite as cs;
use rustls::crypto::tls12::Prf;
use rustls::crypto::ActiveKeyExchange;
use rustls::{CipherSuiteCommon, Error, SupportedCipherSuite, Tls12CipherSuite};

/// RFC 5246 §6.3's label of the key block.
pub(crate) const KEY_EXPANSION: &[u8] = b"key expansion";

/// A suite's PRF, its key blocks kept in the lent secret cache.
pub(crate) struct KeptKeyBlock(&'static dyn Prf);

impl Prf for KeptKeyBlock {
    fn for_key_exchange(
        &self,
        output: &mut [u8; 48],
        kx: Box<dyn ActiveKeyExchange>,
        peer_pub_key: &[u8],
        label: &[u8],
        seed: &[u8],
    ) -> Result<(), Error> {
        self.0
            .for_key_exchange(output, kx, peer_pub_key, label, seed)
    }

    fn for_secret(&self, output: &mut [u8], secret: &[u8], label: &[u8], seed: &[u8]) {
        if label != KEY_EXPANSION {
            return self.0.for_secret(output, secret, label, seed);
        }
        if !secret_cache::recall_key_block(secret, seed, output) {
            #[cfg(test)]
            KEY_BLOCKS_COMPUTED.with(|n| n.set(n.get() + 1));
            self.0.for_secret(output, secret, label, seed);
            secret_cache::keep_key_block(secret, seed, output);
        }
    }

    fn fips(&self) -> bool {
        self.0.fips()
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

/// `base` with `prf`.
const fn with_prf(base: SupportedCipherSuite, prf: &'static KeptKeyBlock) -> Tls12CipherSuite {
    let s = tls12_of(base);
    Tls12CipherSuite {
        common: CipherSuiteCommon {
            suite: s.common.suite,
            hash_provider: s.common.hash_provider,
            confidentiality_limit: s.common.confidentiality_limit,
        },
        prf_provider: prf,
        kx: s.kx,
        sign: s.sign,
        aead_alg: s.aead_alg,
    }
}

static PRF_SHA256: KeptKeyBlock =
    KeptKeyBlock(tls12_of(cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256).prf_provider);
static PRF_SHA384: KeptKeyBlock =
    KeptKeyBlock(tls12_of(cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384).prf_provider);

static ECDSA_AES_128_GCM: Tls12CipherSuite =
    with_prf(cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, &PRF_SHA256);
static ECDSA_AES_256_GCM: Tls12CipherSuite =
    with_prf(cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, &PRF_SHA384);
static ECDSA_CHACHA20: Tls12CipherSuite = with_prf(
    cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    &PRF_SHA256,
);
static RSA_AES_128_GCM: Tls12CipherSuite =
    with_prf(cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, &PRF_SHA256);
static RSA_AES_256_GCM: Tls12CipherSuite =
    with_prf(cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, &PRF_SHA384);
static RSA_CHACHA20: Tls12CipherSuite =
    with_prf(cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, &PRF_SHA256);

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
