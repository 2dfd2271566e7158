//! What a TLS 1.3 handshake derives from each traffic secret, kept for
//! the next time rustls asks (docs/architecture.md, "TLS"; docs/profile.md).
//!
//! rustls makes a secret into an HKDF expander each time it uses it: a
//! handshake traffic secret once for its record key and IV and again for
//! its Finished key, an application traffic secret once for the record
//! key and IV it installs and again when it hands the secrets over
//! (`dangerous_into_kernel_connection`), where it derives the same key
//! and IV a second time. Each expander prepares the secret's HMAC key
//! (two SHA compressions, [`crate::kdf`]) and each key or IV is an
//! expansion (two more): 16 of a P-256 handshake's ~100 compressions
//! were repeats.
//!
//! A server session keeps a [`SecretCache`] while its handshake runs and
//! lends it to this thread for each call into rustls ([`lend`]). The key
//! schedule looks there first ([`prepared_key`], [`recall`]) and leaves
//! what it computed ([`keep`]): per secret its prepared HMAC key and its
//! first short expansions (the record key and IV). TLS 1.2's key block,
//! computed by rustls for the same two reasons, is kept the same way
//! ([`crate::tls12_prf`], [`recall_key_block`]). Nothing is kept while
//! no cache is lent, so no secret outlives its session here; secrets are
//! compared in constant time, and everything kept is wiped when the
//! cache drops (at the hand-over, or when the handshake fails).

use crate::hashing::{Sha2, Sha256, Sha384};
use crate::kdf::{equal_in_constant_time, PreparedKey};
use std::cell::RefCell;

/// The longest secret kept (SHA-384's output), in bytes.
const MAX_SECRET: usize = 48;
/// The longest HKDF info whose output is kept: "key" and "iv"'s
/// `HkdfLabel`s (RFC 8446 §7.1) are 13 and 12 bytes.
const MAX_INFO: usize = 16;
/// The longest output kept (an AEAD key: rustls asks for 32 bytes).
const MAX_OUT: usize = 32;
/// Outputs kept per secret (its key and its IV).
const OUTPUTS: usize = 2;
/// Secrets kept per hash function: a handshake has four traffic secrets.
const SECRETS: usize = 4;

/// A handshake's kept derivations, per hash function (its suite's), and
/// a TLS 1.2 connection's key block.
#[derive(Default)]
pub(crate) struct SecretCache {
    sha256: Vec<Entry<Sha256>>,
    sha384: Vec<Entry<Sha384>>,
    key_block: Option<Box<KeyBlock>>,
}

/// The longest TLS 1.2 master secret and key block kept: 48 bytes, and
/// two keys and IVs of ChaCha20-Poly1305 (2 × (32 + 12)).
const MASTER_SECRET: usize = 48;
const MAX_KEY_BLOCK: usize = 88;
/// A key block's seed: the two randoms (RFC 5246 §6.3).
const RANDOMS: usize = 64;

/// A TLS 1.2 key block (RFC 5246 §6.3) and what it was made of.
struct KeyBlock {
    secret: [u8; MASTER_SECRET],
    seed: [u8; RANDOMS],
    bytes: [u8; MAX_KEY_BLOCK],
    len: usize,
}

impl Drop for KeyBlock {
    fn drop(&mut self) {
        self.secret.fill(0);
        self.bytes.fill(0);
        std::hint::black_box(&mut self.secret);
        std::hint::black_box(&mut self.bytes);
    }
}

/// One secret, its prepared HMAC key and the expansions kept of it.
pub(crate) struct Entry<H: Sha2> {
    /// The secret: its first `H::OUTPUT` bytes are in use.
    secret: [u8; MAX_SECRET],
    key: PreparedKey<H>,
    outputs: [Output; OUTPUTS],
    /// Entries of `outputs` in use.
    kept: usize,
}

/// An expansion: HKDF-Expand's output is a function of the key, the info
/// and the length alone.
#[derive(Default)]
struct Output {
    /// The info and its length, joined ([`joined`]).
    info: ([u8; MAX_INFO], usize),
    bytes: [u8; MAX_OUT],
    len: usize,
}

impl<H: Sha2> Drop for Entry<H> {
    fn drop(&mut self) {
        // Plain stores kept by `black_box`, as in `Hasher`'s drop; the
        // prepared key wipes itself.
        self.secret.fill(0);
        for o in &mut self.outputs {
            o.bytes.fill(0);
        }
        std::hint::black_box(&mut self.secret);
        std::hint::black_box(&mut self.outputs);
    }
}

impl<H: Sha2> Entry<H> {
    fn is_for(&self, secret: &[u8]) -> bool {
        equal_in_constant_time(&self.secret[..H::OUTPUT], secret)
    }
}

/// An HKDF info joined into one buffer (zeros after it) with its length,
/// if it is short enough to be kept: compared whole, with no call per
/// part.
fn joined(info: &[&[u8]]) -> Option<([u8; MAX_INFO], usize)> {
    let mut buf = [0u8; MAX_INFO];
    let mut at = 0;
    for part in info {
        buf.get_mut(at..at + part.len())?.copy_from_slice(part);
        at += part.len();
    }
    Some((buf, at))
}

/// The hash functions whose derivations a [`SecretCache`] keeps.
pub(crate) trait Cached: Sha2 {
    /// This function's entries in `cache`.
    fn entries(cache: &mut SecretCache) -> &mut Vec<Entry<Self>>;
}

impl Cached for Sha256 {
    fn entries(cache: &mut SecretCache) -> &mut Vec<Entry<Self>> {
        &mut cache.sha256
    }
}

impl Cached for Sha384 {
    fn entries(cache: &mut SecretCache) -> &mut Vec<Entry<Self>> {
        &mut cache.sha384
    }
}

thread_local! {
    /// The cache lent to this thread's key schedule, while a session's
    /// call into rustls runs.
    static LENT: RefCell<Option<SecretCache>> = const { RefCell::new(None) };
}

/// Runs `f` with `cache` lent to this thread's key schedule, and takes it
/// back (with what `f`'s key schedule kept) when `f` returns.
pub(crate) fn lend<T>(cache: &mut SecretCache, f: impl FnOnce() -> T) -> T {
    let before = LENT.with(|l| l.replace(Some(std::mem::take(cache))));
    let out = f();
    if let Some(back) = LENT.with(|l| l.replace(before)) {
        *cache = back;
    }
    out
}

/// Runs `f` on the entries of `H` in the lent cache; `None` when no cache
/// is lent.
fn with_entries<H: Cached, T>(f: impl FnOnce(&mut Vec<Entry<H>>) -> T) -> Option<T> {
    LENT.with(|l| l.borrow_mut().as_mut().map(|c| f(H::entries(c))))
}

/// `secret`'s prepared HMAC key: kept in the lent cache, or `make`'s
/// (then kept, while the cache has room).
pub(crate) fn prepared_key<H: Cached>(
    secret: &[u8],
    make: impl FnOnce() -> PreparedKey<H>,
) -> PreparedKey<H> {
    let found = with_entries::<H, _>(|entries| {
        entries
            .iter()
            .find(|e| e.is_for(secret))
            .map(|e| e.key.clone())
    });
    if let Some(Some(key)) = found {
        return key;
    }
    let key = make();
    if found.is_some() && secret.len() == H::OUTPUT {
        with_entries::<H, _>(|entries| {
            if entries.len() < SECRETS {
                entries.reserve_exact(SECRETS - entries.len());
                let mut s = [0u8; MAX_SECRET];
                s[..secret.len()].copy_from_slice(secret);
                entries.push(Entry {
                    secret: s,
                    key: key.clone(),
                    outputs: Default::default(),
                    kept: 0,
                });
            }
        });
    }
    key
}

/// Copies the kept expansion of `secret` for `info` into `out` (all of
/// it): whether one was kept.
pub(crate) fn recall<H: Cached>(secret: &[u8], info: &[&[u8]], out: &mut [u8]) -> bool {
    let Some(info) = joined(info) else {
        return false;
    };
    with_entries::<H, _>(|entries| {
        let Some(e) = entries.iter().find(|e| e.is_for(secret)) else {
            return false;
        };
        match e.outputs[..e.kept]
            .iter()
            .find(|o| o.len == out.len() && o.info == info)
        {
            Some(o) => {
                out.copy_from_slice(&o.bytes[..o.len]);
                true
            }
            None => false,
        }
    })
    .unwrap_or(false)
}

/// Keeps `out`, the expansion of `secret` for `info`, if the secret is
/// kept, both are short and its entry has room.
pub(crate) fn keep<H: Cached>(secret: &[u8], info: &[&[u8]], out: &[u8]) {
    let Some(info) = joined(info) else {
        return;
    };
    if out.len() > MAX_OUT {
        return;
    }
    with_entries::<H, _>(|entries| {
        let Some(e) = entries.iter_mut().find(|e| e.is_for(secret)) else {
            return;
        };
        let Some(o) = e.outputs.get_mut(e.kept) else {
            return;
        };
        o.info = info;
        o.bytes[..out.len()].copy_from_slice(out);
        o.len = out.len();
        e.kept += 1;
    });
}

/// Copies the kept key block of `secret` and `seed` into `out` (all of
/// it): whether one of that length was kept.
pub(crate) fn recall_key_block(secret: &[u8], seed: &[u8], out: &mut [u8]) -> bool {
    LENT.with(|l| {
        let lent = l.borrow();
        let Some(kb) = lent.as_ref().and_then(|c| c.key_block.as_deref()) else {
            return false;
        };
        let found = kb.len == out.len()
            && secret.len() == MASTER_SECRET
            && equal_in_constant_time(&kb.secret, secret)
            && kb.seed[..] == *seed;
        if found {
            out.copy_from_slice(&kb.bytes[..kb.len]);
        }
        found
    })
}

/// Keeps `out`, the key block of `secret` and `seed`, in the lent cache
/// (if one is, and all are of the sizes TLS 1.2 has).
pub(crate) fn keep_key_block(secret: &[u8], seed: &[u8], out: &[u8]) {
    if secret.len() != MASTER_SECRET || seed.len() != RANDOMS || out.len() > MAX_KEY_BLOCK {
        return;
    }
    LENT.with(|l| {
        if let Some(c) = l.borrow_mut().as_mut() {
            let mut kb = Box::new(KeyBlock {
                secret: [0; MASTER_SECRET],
                seed: [0; RANDOMS],
                bytes: [0; MAX_KEY_BLOCK],
                len: out.len(),
            });
            kb.secret.copy_from_slice(secret);
            kb.seed.copy_from_slice(seed);
            kb.bytes[..out.len()].copy_from_slice(out);
            c.key_block = Some(kb);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(secret: &[u8]) -> PreparedKey<Sha256> {
        PreparedKey::new(secret)
    }

    fn tag(k: &PreparedKey<Sha256>) -> [u8; 32] {
        let mut out = [0u8; 64];
        k.tag_into(b"m", &[], &[], &mut out);
        out[..32].try_into().unwrap()
    }

    #[test]
    fn a_secret_is_prepared_once_while_a_cache_is_lent() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let mut cache = SecretCache::default();
        let mut made = 0;
        lend(&mut cache, || {
            for s in [&a, &b, &a, &b, &a] {
                let k = prepared_key::<Sha256>(s, || {
                    made += 1;
                    key_of(s)
                });
                assert_eq!(tag(&k), tag(&key_of(s)));
            }
        });
        assert_eq!(made, 2);
        // Lent again: still there.
        lend(&mut cache, || {
            prepared_key::<Sha256>(&a, || unreachable!("kept"));
        });
        // Not lent: nothing is found or kept.
        let mut made = 0;
        for _ in 0..2 {
            prepared_key::<Sha256>(&a, || {
                made += 1;
                key_of(&a)
            });
        }
        assert_eq!(made, 2);
        // The other function's entries are its own.
        lend(&mut cache, || {
            let mut made = false;
            prepared_key::<Sha384>(&[1u8; 48], || {
                made = true;
                PreparedKey::new(&[1u8; 48])
            });
            assert!(made);
        });
    }

    #[test]
    fn expansions_are_found_for_the_same_secret_info_and_length_only() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let info: [&[u8]; 3] = [&[0, 16, 9], b"tls13 key", &[0]];
        let other: [&[u8]; 3] = [&[0, 12, 8], b"tls13 iv", &[0]];
        let mut cache = SecretCache::default();
        lend(&mut cache, || {
            let mut out = [0u8; 32];
            // Not kept before its secret is.
            keep::<Sha256>(&a, &info, &[7; 32]);
            assert!(!recall::<Sha256>(&a, &info, &mut out));
            prepared_key::<Sha256>(&a, || key_of(&a));
            prepared_key::<Sha256>(&b, || key_of(&b));
            keep::<Sha256>(&a, &info, &[7; 32]);
            keep::<Sha256>(&a, &other, &[8; 12]);
            assert!(recall::<Sha256>(&a, &info, &mut out));
            assert_eq!(out, [7; 32]);
            let mut iv = [0u8; 12];
            assert!(recall::<Sha256>(&a, &other, &mut iv));
            assert_eq!(iv, [8; 12]);
            // Another secret, length or info (split differently is the same).
            assert!(!recall::<Sha256>(&b, &info, &mut out));
            assert!(!recall::<Sha256>(&a, &info, &mut [0u8; 16]));
            let joined: [&[u8]; 1] = [b"\x00\x10\x09tls13 key\x00"];
            assert!(recall::<Sha256>(&a, &joined, &mut out));
            let changed: [&[u8]; 1] = [b"\x00\x10\x09tls13 kez\x00"];
            assert!(!recall::<Sha256>(&a, &changed, &mut out));
            let longer: [&[u8]; 2] = [b"\x00\x10\x09tls13 key\x00", &[0]];
            assert!(!recall::<Sha256>(&a, &longer, &mut out));
            // Two outputs per secret; long infos are not kept.
            keep::<Sha256>(&a, &changed, &[9; 32]);
            assert!(!recall::<Sha256>(&a, &changed, &mut out));
            let long: [&[u8]; 1] = [&[0; MAX_INFO + 1]];
            keep::<Sha256>(&b, &long, &[9; 32]);
            assert!(!recall::<Sha256>(&b, &long, &mut out));
        });
        assert_eq!(cache.sha256.len(), 2);
    }

    #[test]
    fn a_cache_keeps_four_secrets() {
        let mut cache = SecretCache::default();
        lend(&mut cache, || {
            for i in 0..6u8 {
                prepared_key::<Sha256>(&[i; 32], || key_of(&[i; 32]));
            }
        });
        assert_eq!(cache.sha256.len(), SECRETS);
    }

    #[test]
    fn lending_nests() {
        let (mut outer, mut inner) = (SecretCache::default(), SecretCache::default());
        lend(&mut outer, || {
            prepared_key::<Sha256>(&[1; 32], || key_of(&[1; 32]));
            lend(&mut inner, || {
                prepared_key::<Sha256>(&[2; 32], || key_of(&[2; 32]));
            });
            prepared_key::<Sha256>(&[3; 32], || key_of(&[3; 32]));
        });
        assert_eq!(outer.sha256.len(), 2);
        assert_eq!(inner.sha256.len(), 1);
    }
}
