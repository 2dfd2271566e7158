//! TLS 1.3's key schedule on HMAC keys prepared once per secret
//! (docs/architecture.md, "TLS"; docs/profile.md).
//!
//! rustls' aws-lc-rs provider runs every HKDF-Expand through AWS-LC's
//! `HKDF_expand`, which sets up the HMAC key (its inner and outer pads,
//! two SHA compressions) again on each call; a TLS 1.3 handshake expands
//! each secret several times (traffic secrets, keys, IVs, finished keys).
//! Here the pads are hashed once when a secret becomes an expander, into
//! two chaining values (RFC 2104's `H(K ^ ipad)` and `H(K ^ opad)`), and
//! each tag continues copies of them: half the compressions per expand,
//! and no digest state allocated, copied through AWS-LC or wiped per tag
//! ([`crate::hashing`]). The suites' transcript hash runs on the same
//! states, so its forks are copies too. Same algorithms, same outputs
//! (tested against AWS-LC's HKDF and HMAC, and RFC 5869), same AEADs:
//! only the TLS 1.3 suites' `hkdf_provider` and `hash_provider` change.
//! [`provider`] is rustls' aws-lc-rs provider with those suites.

use crate::hashing::{Hasher, Sha2, Sha256, Sha384, TranscriptHash, MAX_BLOCK};
use rustls::crypto::aws_lc_rs::cipher_suite as cs;
use rustls::crypto::hash::Hash;
use rustls::crypto::hmac::{Hmac, Key, Tag};
use rustls::crypto::tls13::HkdfUsingHmac;
use rustls::crypto::CryptoProvider;
use rustls::{CipherSuiteCommon, SupportedCipherSuite, Tls13CipherSuite};
use zeroize::Zeroize;

/// HMAC (RFC 2104) on `H` with the key's pads hashed once, in
/// [`Hmac::with_key`].
struct PreparedHmac<H: Sha2>(std::marker::PhantomData<H>);

/// An HMAC key as the chaining values after its inner and outer pads
/// (one block each); each tag continues copies of them. Dropping it
/// wipes both.
struct PreparedKey<H: Sha2> {
    inner: H,
    outer: H,
}

impl<H: Sha2> Drop for PreparedKey<H> {
    fn drop(&mut self) {
        self.inner.zeroize();
        self.outer.zeroize();
    }
}

impl<H: Sha2> Hmac for PreparedHmac<H> {
    fn with_key(&self, key: &[u8]) -> Box<dyn Key> {
        let block = H::BLOCK;
        // RFC 2104 §2: a key longer than the block is hashed first; the
        // key is then padded with zeros to the block.
        let mut pad = [0u8; MAX_BLOCK];
        if key.len() > block {
            let mut h = Hasher::<H>::new();
            h.update(key);
            h.finish_into(&mut pad);
        } else {
            pad[..key.len()].copy_from_slice(key);
        }
        let pad = &mut pad[..block];
        pad.iter_mut().for_each(|b| *b ^= 0x36);
        let mut inner = H::initial();
        inner.compress(pad);
        pad.iter_mut().for_each(|b| *b ^= 0x36 ^ 0x5c);
        let mut outer = H::initial();
        outer.compress(pad);
        pad.zeroize();
        Box::new(PreparedKey { inner, outer })
    }

    fn hash_output_len(&self) -> usize {
        H::OUTPUT
    }
}

impl<H: Sha2> Key for PreparedKey<H> {
    fn sign_concat(&self, first: &[u8], middle: &[&[u8]], last: &[u8]) -> Tag {
        let block = H::BLOCK as u64;
        let mut inner = Hasher::resume(self.inner, block);
        inner.update(first);
        for m in middle {
            inner.update(m);
        }
        inner.update(last);
        let mut digest = [0u8; MAX_BLOCK / 2];
        inner.finish_into(&mut digest);
        let mut outer = Hasher::resume(self.outer, block);
        outer.update(&digest[..H::OUTPUT]);
        // Plain stores kept by `black_box`, as in `Hasher`'s drop.
        digest.fill(0);
        std::hint::black_box(&mut digest);
        let mut tag = [0u8; MAX_BLOCK / 2];
        outer.finish_into(&mut tag);
        Tag::new(&tag[..H::OUTPUT])
    }

    fn tag_len(&self) -> usize {
        H::OUTPUT
    }
}

static HMAC_SHA256: PreparedHmac<Sha256> = PreparedHmac(std::marker::PhantomData);
static HMAC_SHA384: PreparedHmac<Sha384> = PreparedHmac(std::marker::PhantomData);
static HASH_SHA256: TranscriptHash<Sha256> = TranscriptHash::new();
static HASH_SHA384: TranscriptHash<Sha384> = TranscriptHash::new();
static HKDF_SHA256: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA256);
static HKDF_SHA384: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA384);

/// `base` (one of rustls' aws-lc-rs TLS 1.3 suites) with `hash` and
/// `hkdf`, built at compile time (a suite that is not TLS 1.3 fails the
/// build).
const fn with_key_schedule(
    base: SupportedCipherSuite,
    hash: &'static dyn Hash,
    hkdf: &'static HkdfUsingHmac<'static>,
) -> Tls13CipherSuite {
    let Some(s) = base.tls13() else {
        panic!("a TLS 1.3 suite")
    };
    Tls13CipherSuite {
        common: CipherSuiteCommon {
            suite: s.common.suite,
            hash_provider: hash,
            confidentiality_limit: s.common.confidentiality_limit,
        },
        hkdf_provider: hkdf,
        aead_alg: s.aead_alg,
        quic: s.quic,
    }
}

static AES_128_GCM_SHA256: Tls13CipherSuite =
    with_key_schedule(cs::TLS13_AES_128_GCM_SHA256, &HASH_SHA256, &HKDF_SHA256);
static AES_256_GCM_SHA384: Tls13CipherSuite =
    with_key_schedule(cs::TLS13_AES_256_GCM_SHA384, &HASH_SHA384, &HKDF_SHA384);
static CHACHA20_POLY1305_SHA256: Tls13CipherSuite = with_key_schedule(
    cs::TLS13_CHACHA20_POLY1305_SHA256,
    &HASH_SHA256,
    &HKDF_SHA256,
);

/// `TLS_AES_128_GCM_SHA256` on the prepared-key HKDF.
pub const TLS13_AES_128_GCM_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls13(&AES_128_GCM_SHA256);
/// `TLS_AES_256_GCM_SHA384` on the prepared-key HKDF.
pub const TLS13_AES_256_GCM_SHA384: SupportedCipherSuite =
    SupportedCipherSuite::Tls13(&AES_256_GCM_SHA384);
/// `TLS_CHACHA20_POLY1305_SHA256` on the prepared-key HKDF.
pub const TLS13_CHACHA20_POLY1305_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls13(&CHACHA20_POLY1305_SHA256);

/// The TLS 1.3 suites on the prepared-key HKDF, in rustls' order.
pub const TLS13_SUITES: [SupportedCipherSuite; 3] = [
    TLS13_AES_128_GCM_SHA256,
    TLS13_AES_256_GCM_SHA384,
    TLS13_CHACHA20_POLY1305_SHA256,
];

/// The suite to use for `suite`: its prepared-key twin for a TLS 1.3
/// suite, `suite` itself otherwise (TLS 1.2's PRF already reuses its
/// HMAC key inside AWS-LC).
pub fn prepared(suite: SupportedCipherSuite) -> SupportedCipherSuite {
    TLS13_SUITES
        .into_iter()
        .find(|s| s.suite() == suite.suite())
        .unwrap_or(suite)
}

/// rustls' aws-lc-rs provider with its TLS 1.3 suites on the prepared-key
/// HKDF.
pub fn provider() -> CryptoProvider {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    for s in &mut p.cipher_suites {
        *s = prepared(*s);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::{hkdf, hmac};
    use rustls::crypto::tls13::Hkdf;

    struct Len(usize);
    impl hkdf::KeyType for Len {
        fn len(&self) -> usize {
            self.0
        }
    }

    /// AWS-LC's own HKDF: extract, then expand `info` to `len` bytes.
    fn reference(
        alg: hkdf::Algorithm,
        salt: &[u8],
        ikm: &[u8],
        info: &[&[u8]],
        len: usize,
    ) -> Vec<u8> {
        let mut out = vec![0; len];
        hkdf::Salt::new(alg, salt)
            .extract(ikm)
            .expand(info, Len(len))
            .unwrap()
            .fill(&mut out)
            .unwrap();
        out
    }

    fn ours(h: &HkdfUsingHmac<'_>, salt: &[u8], ikm: &[u8], info: &[&[u8]], len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        h.extract_from_secret(Some(salt), ikm)
            .expand_slice(info, &mut out)
            .unwrap();
        out
    }

    #[test]
    fn rfc5869_test_case_1() {
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let ikm = [0x0b; 22];
        let salt = hex("000102030405060708090a0b0c");
        let info = hex("f0f1f2f3f4f5f6f7f8f9");
        let okm = hex(
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
        );
        assert_eq!(ours(&HKDF_SHA256, &salt, &ikm, &[&info], 42), okm);
    }

    #[test]
    fn agrees_with_aws_lc_hkdf_for_every_length_and_split() {
        // A small deterministic generator: inputs differ per case.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for case in 0..400 {
            let mut bytes = |n: usize| (0..n).map(|_| next() as u8).collect::<Vec<u8>>();
            let salt = bytes(case % 70);
            let ikm = bytes(case % 97);
            let info = bytes(case % 130);
            let cut = info.len() / 3;
            let parts: [&[u8]; 3] = [&info[..cut], &info[cut..2 * cut], &info[2 * cut..]];
            let len = 1 + case % 200;
            for (alg, h) in [
                (hkdf::HKDF_SHA256, &HKDF_SHA256),
                (hkdf::HKDF_SHA384, &HKDF_SHA384),
            ] {
                assert_eq!(
                    ours(h, &salt, &ikm, &parts, len),
                    reference(alg, &salt, &ikm, &[&info], len),
                    "case {case}"
                );
            }
        }
    }

    #[test]
    fn hmac_sign_and_blocks_agree_with_aws_lc() {
        let key = rustls::crypto::tls13::OkmBlock::new(&[7; 32]);
        let tag = HKDF_SHA256.hmac_sign(&key, b"transcript hash");
        let theirs = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, &[7; 32]),
            b"transcript hash",
        );
        assert_eq!(tag.as_ref(), theirs.as_ref());
        let block = HKDF_SHA384
            .expander_for_okm(&rustls::crypto::tls13::OkmBlock::new(&[9; 48]))
            .expand_block(&[b"label"]);
        let mut want = vec![0; 48];
        hkdf::Prk::new_less_safe(hkdf::HKDF_SHA384, &[9; 48])
            .expand(&[b"label"], Len(48))
            .unwrap()
            .fill(&mut want)
            .unwrap();
        assert_eq!(block.as_ref(), &want[..]);
    }

    /// Keys of every length up to past SHA-384's block (hashed first
    /// when longer than the block, RFC 2104 §2), messages in three parts.
    #[test]
    fn hmac_agrees_with_aws_lc_for_every_key_length() {
        for (ours, theirs) in [
            (&HMAC_SHA256 as &dyn Hmac, hmac::HMAC_SHA256),
            (&HMAC_SHA384, hmac::HMAC_SHA384),
        ] {
            for len in 0..300 {
                let key: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
                let msg: Vec<u8> = (0..len % 150).map(|i| (i ^ len) as u8).collect();
                let cut = msg.len() / 3;
                let tag = ours.with_key(&key).sign_concat(
                    &msg[..cut],
                    &[&msg[cut..2 * cut]],
                    &msg[2 * cut..],
                );
                let want = hmac::sign(&hmac::Key::new(theirs, &key), &msg);
                assert_eq!(tag.as_ref(), want.as_ref(), "key length {len}");
            }
        }
    }

    #[test]
    fn the_provider_offers_the_same_suites_in_the_same_order() {
        let theirs = rustls::crypto::aws_lc_rs::default_provider();
        let ours = provider();
        let names = |p: &CryptoProvider| {
            p.cipher_suites
                .iter()
                .map(|s| s.suite())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&ours), names(&theirs));
        for s in ours.cipher_suites {
            if let SupportedCipherSuite::Tls13(t) = s {
                let h: *const () = (t.hkdf_provider as *const dyn Hkdf).cast();
                assert!(
                    std::ptr::eq(h, (&HKDF_SHA256 as *const HkdfUsingHmac<'_>).cast())
                        || std::ptr::eq(h, (&HKDF_SHA384 as *const HkdfUsingHmac<'_>).cast()),
                    "{:?} keeps AWS-LC's HKDF",
                    s.suite()
                );
            }
        }
    }
}
