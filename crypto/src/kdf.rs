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
//! ([`crate::hashing`]). What every handshake without a PSK computes
//! alike (the early secret, its "derived" secret and that salt's key) is
//! made once per process. The suites' transcript hash runs
//! on the same states, so its forks are copies too. Same algorithms, same
//! outputs (tested against AWS-LC's HKDF and HMAC, RFC 5869 and RFC
//! 8448), same AEADs: only the TLS 1.3 suites' `hkdf_provider` and
//! `hash_provider` change. [`provider`] is rustls' aws-lc-rs provider
//! with those suites.

use crate::hashing::{
    last_block_room, pad_last_block, Hasher, Sha2, Sha256, Sha384, TranscriptHash, MAX_BLOCK,
};
use crate::lazy_aead::LazyAead;
use crate::secret_cache::{self, Cached};
use rustls::crypto::aws_lc_rs::cipher_suite as cs;
use rustls::crypto::hash::Hash;
use rustls::crypto::hmac::Tag;
use rustls::crypto::tls13::{Hkdf, HkdfExpander, OkmBlock, OutputLengthError};
use rustls::crypto::CryptoProvider;
use rustls::{CipherSuiteCommon, SupportedCipherSuite, Tls13CipherSuite};
use std::sync::OnceLock;
use zeroize::Zeroize;

/// The longest output of the functions here (SHA-384's), in bytes.
const MAX_OUTPUT: usize = MAX_BLOCK / 2;

/// An HMAC key (RFC 2104) as the chaining values after its inner and
/// outer pads (one block each); each tag continues copies of them.
/// Dropping it wipes both.
#[derive(Clone)]
pub(crate) struct PreparedKey<H: Sha2> {
    inner: H,
    outer: H,
}

impl<H: Sha2> Drop for PreparedKey<H> {
    fn drop(&mut self) {
        self.inner.zeroize();
        self.outer.zeroize();
    }
}

impl<H: Sha2> PreparedKey<H> {
    /// Hashes `key`'s pads: two compressions (three for a key longer
    /// than the block).
    pub(crate) fn new(key: &[u8]) -> Self {
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
        Self { inner, outer }
    }

    /// HMAC of `first`, the `middle` parts and `last`, concatenated,
    /// into `out[..H::OUTPUT]`. A message that fits in one block with
    /// its padding (every label, secret and hash the key schedule tags)
    /// is padded in place and compressed once, and so is the outer hash
    /// (a digest always fits); a longer one goes through [`Hasher`].
    pub(crate) fn tag_into(&self, first: &[u8], middle: &[&[u8]], last: &[u8], out: &mut [u8]) {
        let block = H::BLOCK;
        let len = first.len() + middle.iter().map(|m| m.len()).sum::<usize>() + last.len();
        let mut buf = [0u8; MAX_BLOCK];
        let mut inner = self.inner;
        if len <= last_block_room::<H>() {
            // All parts together fit before the padding, so `at + part.len()
            // <= len < H::BLOCK <= MAX_BLOCK` throughout.
            let mut at = 0;
            for part in std::iter::once(first)
                .chain(middle.iter().copied())
                .chain(std::iter::once(last))
            {
                buf[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
            pad_last_block::<H>(&mut buf[..block], Some(at), (block + len) as u64);
            inner.compress(&buf[..block]);
            inner.write_output(&mut buf);
        } else {
            let mut hasher = Hasher::resume(inner, block as u64);
            hasher.update(first);
            for m in middle {
                hasher.update(m);
            }
            hasher.update(last);
            hasher.finish_into(&mut buf);
        }
        inner.zeroize();
        // The outer hash: its pad's state, then the inner digest (now in
        // `buf[..H::OUTPUT]`) padded to one block.
        let mut outer = self.outer;
        pad_last_block::<H>(
            &mut buf[..block],
            Some(H::OUTPUT),
            (block + H::OUTPUT) as u64,
        );
        outer.compress(&buf[..block]);
        outer.write_output(out);
        outer.zeroize();
        // Plain stores kept by `black_box`, as in `Hasher`'s drop.
        buf.fill(0);
        std::hint::black_box(&mut buf);
    }

    /// HKDF-Expand (RFC 5869 §2.3) with this key as the PRK: `T(n) =
    /// HMAC(PRK, T(n-1) | info | n)` until `out` is full.
    fn expand_into(&self, info: &[&[u8]], out: &mut [u8]) {
        let mut t = [0u8; MAX_OUTPUT];
        let mut previous = 0;
        for (n, chunk) in out.chunks_mut(H::OUTPUT).enumerate() {
            let mut next = [0u8; MAX_OUTPUT];
            self.tag_into(&t[..previous], info, &[(n + 1) as u8], &mut next);
            chunk.copy_from_slice(&next[..chunk.len()]);
            t = next;
            previous = H::OUTPUT;
            next.fill(0);
            std::hint::black_box(&mut next);
        }
        t.fill(0);
        std::hint::black_box(&mut t);
    }

    /// HKDF-Expand to one hash length, as rustls takes it.
    fn expand_block(&self, info: &[&[u8]]) -> OkmBlock {
        let mut out = [0u8; MAX_OUTPUT];
        self.expand_into(info, &mut out[..H::OUTPUT]);
        let block = OkmBlock::new(&out[..H::OUTPUT]);
        out.zeroize();
        block
    }
}

/// What every TLS 1.3 key schedule without a PSK computes first, the
/// same in every handshake (RFC 8446 §7.1): the early secret
/// `HKDF-Extract(0, 0)`, its `Derive-Secret(., "derived", "")` and that
/// value as the next extract's HMAC key, and the all-zero salt's key. Made
/// once per process on first use; nothing in it depends on a secret.
struct Constants<H: Sha2> {
    /// The early secret as an HMAC key.
    early: PreparedKey<H>,
    /// The `HkdfLabel` of `Derive-Secret(., "derived", "")`.
    derived_info: [u8; 2 + 1 + 13 + 1 + MAX_OUTPUT],
    /// Bytes of `derived_info` in use.
    derived_info_len: usize,
    /// `Derive-Secret(early secret, "derived", "")`.
    derived: [u8; MAX_OUTPUT],
    /// `derived` as an HMAC key: the salt of the handshake secret.
    derived_key: PreparedKey<H>,
    /// The all-zero salt (`Hash.length` zeros) as an HMAC key.
    zero_salt: PreparedKey<H>,
}

impl<H: Sha2> Constants<H> {
    fn compute() -> Self {
        let zeros = [0u8; MAX_OUTPUT];
        let zero_salt = PreparedKey::<H>::new(&zeros[..H::OUTPUT]);
        let mut early_secret = [0u8; MAX_OUTPUT];
        zero_salt.tag_into(&zeros[..H::OUTPUT], &[], &[], &mut early_secret);
        let early = PreparedKey::<H>::new(&early_secret[..H::OUTPUT]);

        let label = b"tls13 derived";
        // Fixed sizes: 2 + 1 + 13 + 1 + H::OUTPUT (32 or 48) bytes fill at
        // most the whole buffer; both casts hold 32 and 48.
        let mut derived_info = [0u8; 2 + 1 + 13 + 1 + MAX_OUTPUT];
        let mut at = 0;
        for part in [
            &(H::OUTPUT as u16).to_be_bytes()[..],
            &[label.len() as u8],
            label,
            &[H::OUTPUT as u8],
            H::EMPTY,
        ] {
            derived_info[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        let mut derived = [0u8; MAX_OUTPUT];
        early.expand_into(&[&derived_info[..at]], &mut derived[..H::OUTPUT]);
        let derived_key = PreparedKey::new(&derived[..H::OUTPUT]);
        Self {
            early,
            derived_info,
            derived_info_len: at,
            derived,
            derived_key,
            zero_salt,
        }
    }

    /// Whether `info`, concatenated, is the "derived" label's.
    fn is_derived_info(&self, info: &[&[u8]]) -> bool {
        let mut rest = &self.derived_info[..self.derived_info_len];
        for part in info {
            match rest.split_at_checked(part.len()) {
                Some((head, tail)) if head == *part => rest = tail,
                _ => return false,
            }
        }
        rest.is_empty()
    }

    /// The HMAC key for `salt` (`None`: the zero salt), prepared here
    /// unless it is one of the constant salts.
    fn salt_key(&self, salt: Option<&[u8]>) -> std::borrow::Cow<'_, PreparedKey<H>> {
        use std::borrow::Cow;
        match salt {
            None => Cow::Borrowed(&self.zero_salt),
            Some(s) if equal_in_constant_time(s, &self.derived[..H::OUTPUT]) => {
                Cow::Borrowed(&self.derived_key)
            }
            Some(s) => Cow::Owned(PreparedKey::new(s)),
        }
    }
}

/// `a == b` in time that depends only on the lengths: a salt is secret
/// (the "derived" secret of the handshake secret) when it is not the
/// constant it is compared with.
pub(crate) fn equal_in_constant_time(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A hash function whose key-schedule constants are made once per
/// process.
trait ScheduleHash: Cached {
    fn constants() -> &'static Constants<Self>;
}

impl ScheduleHash for Sha256 {
    fn constants() -> &'static Constants<Self> {
        static C: OnceLock<Constants<Sha256>> = OnceLock::new();
        C.get_or_init(Constants::compute)
    }
}

impl ScheduleHash for Sha384 {
    fn constants() -> &'static Constants<Self> {
        static C: OnceLock<Constants<Sha384>> = OnceLock::new();
        C.get_or_init(Constants::compute)
    }
}

/// HKDF (RFC 5869) on `H` with prepared HMAC keys: rustls' TLS 1.3 key
/// schedule calls it.
struct PreparedHkdf<H: ScheduleHash>(std::marker::PhantomData<H>);

impl<H: ScheduleHash> PreparedHkdf<H> {
    /// HKDF-Extract's PRK as an expander.
    fn extract(&self, salt: Option<&[u8]>, ikm: &[u8]) -> Box<dyn HkdfExpander> {
        let mut prk = [0u8; MAX_OUTPUT];
        H::constants()
            .salt_key(salt)
            .tag_into(ikm, &[], &[], &mut prk);
        let key = PreparedKey::<H>::new(&prk[..H::OUTPUT]);
        prk.zeroize();
        Box::new(Expander(key))
    }
}

impl<H: ScheduleHash> Hkdf for PreparedHkdf<H> {
    fn extract_from_zero_ikm(&self, salt: Option<&[u8]>) -> Box<dyn HkdfExpander> {
        match salt {
            // The early secret without a PSK: the same in every handshake.
            None => Box::new(EarlySecret::<H>(std::marker::PhantomData)),
            Some(_) => self.extract(salt, &[0u8; MAX_OUTPUT][..H::OUTPUT]),
        }
    }

    fn extract_from_secret(&self, salt: Option<&[u8]>, secret: &[u8]) -> Box<dyn HkdfExpander> {
        self.extract(salt, secret)
    }

    fn expander_for_okm(&self, okm: &OkmBlock) -> Box<dyn HkdfExpander> {
        Box::new(SecretExpander::<H>::new(okm.as_ref()))
    }

    fn hmac_sign(&self, key: &OkmBlock, message: &[u8]) -> Tag {
        let mut tag = [0u8; MAX_OUTPUT];
        PreparedKey::<H>::new(key.as_ref()).tag_into(message, &[], &[], &mut tag);
        Tag::new(&tag[..H::OUTPUT])
    }
}

/// A PRK as an HKDF expander.
struct Expander<H: Sha2>(PreparedKey<H>);

/// Checks HKDF-Expand's output bound (RFC 5869 §2.3: `L <= 255 *
/// HashLen`).
fn checked_len<H: Sha2>(out: &[u8]) -> Result<(), OutputLengthError> {
    match out.len() <= 255 * H::OUTPUT {
        true => Ok(()),
        false => Err(OutputLengthError),
    }
}

impl<H: Sha2> HkdfExpander for Expander<H> {
    fn expand_slice(&self, info: &[&[u8]], output: &mut [u8]) -> Result<(), OutputLengthError> {
        checked_len::<H>(output)?;
        self.0.expand_into(info, output);
        Ok(())
    }

    fn expand_block(&self, info: &[&[u8]]) -> OkmBlock {
        self.0.expand_block(info)
    }

    fn hash_len(&self) -> usize {
        H::OUTPUT
    }
}

/// A secret rustls holds (a traffic secret, mostly) as an HKDF expander,
/// through the session's [`crate::secret_cache`]: its prepared HMAC key
/// and its record key and IV are taken from there when a call before
/// made them, and left there when made here.
struct SecretExpander<H: Cached> {
    key: PreparedKey<H>,
    /// The secret: its first `H::OUTPUT` bytes are in use.
    secret: [u8; MAX_OUTPUT],
}

impl<H: Cached> SecretExpander<H> {
    /// `secret` is an `OkmBlock`'s bytes: `H::OUTPUT` of them.
    fn new(secret: &[u8]) -> Self {
        let mut s = [0u8; MAX_OUTPUT];
        let n = secret.len().min(MAX_OUTPUT);
        s[..n].copy_from_slice(&secret[..n]);
        Self {
            key: secret_cache::prepared_key(secret, || PreparedKey::new(secret)),
            secret: s,
        }
    }
}

impl<H: Cached> Drop for SecretExpander<H> {
    fn drop(&mut self) {
        // Plain stores kept by `black_box`, as in `Hasher`'s drop.
        self.secret.fill(0);
        std::hint::black_box(&mut self.secret);
    }
}

impl<H: Cached> HkdfExpander for SecretExpander<H> {
    fn expand_slice(&self, info: &[&[u8]], output: &mut [u8]) -> Result<(), OutputLengthError> {
        checked_len::<H>(output)?;
        let secret = &self.secret[..H::OUTPUT];
        if !secret_cache::recall::<H>(secret, info, output) {
            self.key.expand_into(info, output);
            secret_cache::keep::<H>(secret, info, output);
        }
        Ok(())
    }

    fn expand_block(&self, info: &[&[u8]]) -> OkmBlock {
        self.key.expand_block(info)
    }

    fn hash_len(&self) -> usize {
        H::OUTPUT
    }
}

/// The early secret without a PSK, from [`Constants`]: its "derived"
/// secret is a copy; any other expansion is computed.
struct EarlySecret<H: ScheduleHash>(std::marker::PhantomData<H>);

impl<H: ScheduleHash> HkdfExpander for EarlySecret<H> {
    fn expand_slice(&self, info: &[&[u8]], output: &mut [u8]) -> Result<(), OutputLengthError> {
        checked_len::<H>(output)?;
        let c = H::constants();
        if output.len() == H::OUTPUT && c.is_derived_info(info) {
            output.copy_from_slice(&c.derived[..H::OUTPUT]);
        } else {
            c.early.expand_into(info, output);
        }
        Ok(())
    }

    fn expand_block(&self, info: &[&[u8]]) -> OkmBlock {
        let c = H::constants();
        if c.is_derived_info(info) {
            return OkmBlock::new(&c.derived[..H::OUTPUT]);
        }
        c.early.expand_block(info)
    }

    fn hash_len(&self) -> usize {
        H::OUTPUT
    }
}

/// The transcript hashes on [`crate::hashing`]'s states (TLS 1.2's
/// suites use them too, [`crate::tls12_prf`]).
pub(crate) static HASH_SHA256: TranscriptHash<Sha256> = TranscriptHash::new();
pub(crate) static HASH_SHA384: TranscriptHash<Sha384> = TranscriptHash::new();
static HKDF_SHA256: PreparedHkdf<Sha256> = PreparedHkdf(std::marker::PhantomData);
static HKDF_SHA384: PreparedHkdf<Sha384> = PreparedHkdf(std::marker::PhantomData);

/// `base` (one of rustls' aws-lc-rs TLS 1.3 suites) with `hash`, `hkdf`
/// and `aead` (its AEAD with contexts built at first use), built at
/// compile time (a suite that is not TLS 1.3 fails the build).
const fn with_key_schedule(
    base: SupportedCipherSuite,
    hash: &'static dyn Hash,
    hkdf: &'static dyn Hkdf,
    aead: &'static LazyAead,
) -> Tls13CipherSuite {
    let s = tls13_of(base);
    Tls13CipherSuite {
        common: CipherSuiteCommon {
            suite: s.common.suite,
            hash_provider: hash,
            confidentiality_limit: s.common.confidentiality_limit,
        },
        hkdf_provider: hkdf,
        aead_alg: aead,
        quic: s.quic,
    }
}

/// `base`'s TLS 1.3 suite (a suite that is not TLS 1.3 fails the build).
const fn tls13_of(base: SupportedCipherSuite) -> &'static Tls13CipherSuite {
    match base.tls13() {
        Some(s) => s,
        // Evaluated at compile time (the statics below): never at run time.
        None => panic!("a TLS 1.3 suite"),
    }
}

static AES_128_GCM: LazyAead = LazyAead(tls13_of(cs::TLS13_AES_128_GCM_SHA256).aead_alg);
static AES_256_GCM: LazyAead = LazyAead(tls13_of(cs::TLS13_AES_256_GCM_SHA384).aead_alg);
static CHACHA20_POLY1305: LazyAead =
    LazyAead(tls13_of(cs::TLS13_CHACHA20_POLY1305_SHA256).aead_alg);

static AES_128_GCM_SHA256: Tls13CipherSuite = with_key_schedule(
    cs::TLS13_AES_128_GCM_SHA256,
    &HASH_SHA256,
    &HKDF_SHA256,
    &AES_128_GCM,
);
static AES_256_GCM_SHA384: Tls13CipherSuite = with_key_schedule(
    cs::TLS13_AES_256_GCM_SHA384,
    &HASH_SHA384,
    &HKDF_SHA384,
    &AES_256_GCM,
);
static CHACHA20_POLY1305_SHA256: Tls13CipherSuite = with_key_schedule(
    cs::TLS13_CHACHA20_POLY1305_SHA256,
    &HASH_SHA256,
    &HKDF_SHA256,
    &CHACHA20_POLY1305,
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
/// suite, its twin that derives the key block once for a TLS 1.2 one
/// ([`crate::tls12_prf`]), `suite` itself for any other.
pub fn prepared(suite: SupportedCipherSuite) -> SupportedCipherSuite {
    TLS13_SUITES
        .into_iter()
        .chain(crate::tls12_prf::TLS12_SUITES)
        .find(|s| s.suite() == suite.suite())
        .unwrap_or(suite)
}

/// rustls' aws-lc-rs provider with its TLS 1.3 suites on the prepared-key
/// HKDF and its TLS 1.2 suites deriving the key block once.
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

    fn ours(h: &dyn Hkdf, salt: &[u8], ikm: &[u8], info: &[&[u8]], len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        h.extract_from_secret(Some(salt), ikm)
            .expand_slice(info, &mut out)
            .unwrap();
        out
    }

    #[test]
    fn rfc5869_test_case_1() {
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
                (hkdf::HKDF_SHA256, &HKDF_SHA256 as &dyn Hkdf),
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
        fn ours<H: Sha2>(key: &[u8], a: &[u8], b: &[u8], c: &[u8]) -> Vec<u8> {
            let mut tag = [0u8; MAX_OUTPUT];
            PreparedKey::<H>::new(key).tag_into(a, &[b], c, &mut tag);
            tag[..H::OUTPUT].to_vec()
        }
        for len in 0..300 {
            let key: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let msg: Vec<u8> = (0..len % 150).map(|i| (i ^ len) as u8).collect();
            let (a, rest) = msg.split_at(msg.len() / 3);
            let (b, c) = rest.split_at(rest.len() / 2);
            for (tag, alg) in [
                (ours::<Sha256>(&key, a, b, c), hmac::HMAC_SHA256),
                (ours::<Sha384>(&key, a, b, c), hmac::HMAC_SHA384),
            ] {
                let want = hmac::sign(&hmac::Key::new(alg, &key), &msg);
                assert_eq!(tag, want.as_ref(), "key length {len}");
            }
        }
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// `HkdfLabel` (RFC 8446 §7.1) in the parts rustls passes.
    fn label_parts<'a>(
        out_len: &'a [u8; 2],
        label_len: &'a [u8; 1],
        label: &'a [u8],
        ctx_len: &'a [u8; 1],
        ctx: &'a [u8],
    ) -> [&'a [u8]; 6] {
        [out_len, label_len, b"tls13 ", label, ctx_len, ctx]
    }

    /// RFC 8448 §3 (a simple 1-RTT handshake, SHA-256): the early secret,
    /// its "derived" secret (both from the constants) and the handshake
    /// secret from the example's (EC)DHE output, with that salt's key
    /// taken from the constants too.
    #[test]
    fn the_constant_secrets_match_rfc_8448() {
        let empty_hash = hex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        let early = HKDF_SHA256.extract_from_zero_ikm(None);
        let derived = early.expand_block(&label_parts(
            &[0, 32],
            &[13],
            b"derived",
            &[32],
            &empty_hash,
        ));
        let want_derived = hex("6f2615a108c702c5678f54fc9dbab69716c076189c48250cebeac3576c3611ba");
        assert_eq!(derived.as_ref(), &want_derived[..]);
        // The same expansion as one part, and through `expand_slice`.
        let flat: Vec<u8> = label_parts(&[0, 32], &[13], b"derived", &[32], &empty_hash).concat();
        assert_eq!(early.expand_block(&[&flat]).as_ref(), &want_derived[..]);
        let mut out = [0u8; 32];
        early.expand_slice(&[&flat], &mut out).unwrap();
        assert_eq!(out[..], want_derived[..]);

        let ecdhe = hex("8bd4054fb55b9d63fdfbacf9f04b9f0d35e6d63f537563efd46272900f89492d");
        let handshake = HKDF_SHA256.extract_from_secret(Some(derived.as_ref()), &ecdhe);
        let secret = hex("1dc826e93606aa6fdc0aadc12f741b01046aa6b99f691ed221a9f0ca043fbeac");
        let info: &[&[u8]] = &[b"any label"];
        let mut want = vec![0; 32];
        hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, &secret)
            .expand(info, Len(32))
            .unwrap()
            .fill(&mut want)
            .unwrap();
        assert_eq!(handshake.expand_block(info).as_ref(), &want[..]);
    }

    /// What the constants answer is what AWS-LC's HKDF computes, for both
    /// hashes: the early secret's other expansions (binder keys, any
    /// length), extracts with the zero salt, the "derived" salt and a salt
    /// one bit off it, and from zero input keying material.
    #[test]
    fn the_constants_agree_with_aws_lc_and_other_inputs_are_computed() {
        fn check<H: ScheduleHash>(h: &dyn Hkdf, alg: hkdf::Algorithm) {
            let n = H::OUTPUT;
            let zeros = vec![0u8; n];
            let early = h.extract_from_zero_ikm(None);
            for (label, len) in [(&b"ext binder"[..], n), (b"res binder", n), (b"derived", 7)] {
                let info: &[&[u8]] = &[label, b"context"];
                let mut got = vec![0; len];
                early.expand_slice(info, &mut got).unwrap();
                assert_eq!(got, reference(alg, &zeros, &zeros, info, len));
            }
            let derived = H::constants().derived[..n].to_vec();
            let mut off = derived.clone();
            off[n - 1] ^= 1;
            let ikm = vec![0x42u8; n];
            for salt in [None, Some(&derived[..]), Some(&off[..])] {
                let info: &[&[u8]] = &[b"info"];
                let want = reference(alg, salt.unwrap_or(&zeros), &ikm, info, 2 * n + 3);
                let mut got = vec![0; 2 * n + 3];
                h.extract_from_secret(salt, &ikm)
                    .expand_slice(info, &mut got)
                    .unwrap();
                assert_eq!(got, want);
                let want = reference(alg, salt.unwrap_or(&zeros), &zeros, info, n);
                let got = h.extract_from_zero_ikm(salt).expand_block(info);
                assert_eq!(got.as_ref(), &want[..]);
            }
            let mut too_long = vec![0u8; 255 * n + 1];
            assert!(early.expand_slice(&[], &mut too_long).is_err());
            assert!(h
                .extract_from_secret(None, &ikm)
                .expand_slice(&[], &mut too_long)
                .is_err());
        }
        check::<Sha256>(&HKDF_SHA256, hkdf::HKDF_SHA256);
        check::<Sha384>(&HKDF_SHA384, hkdf::HKDF_SHA384);
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
                    std::ptr::eq(h, (&HKDF_SHA256 as *const PreparedHkdf<Sha256>).cast())
                        || std::ptr::eq(h, (&HKDF_SHA384 as *const PreparedHkdf<Sha384>).cast()),
                    "{:?} keeps AWS-LC's HKDF",
                    s.suite()
                );
            }
        }
    }
}
