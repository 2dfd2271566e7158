//! SHA-256 and SHA-384 as plain values: a state that copies without
//! allocating (docs/architecture.md, "TLS"; docs/profile.md).
//!
//! TLS 1.3's handshake copies digest states all the time: the transcript
//! hash is forked for every secret and signature, and each HMAC tag of
//! the key schedule continues copies of a key's two prepared states
//! ([`crate::kdf`]). AWS-LC's `EVP_MD_CTX` is heap-allocated: every copy
//! is a `malloc`, every drop a wipe and a `free`. Here a state is the
//! eight words of the chaining value, a partial block and a length, on
//! the stack or inside its owner; the compression functions are the
//! `sha2` crate's (SHA-NI where the CPU has it). Outputs are checked
//! against AWS-LC's digests in the tests.

use rustls::crypto::hash::{Context, Hash, HashAlgorithm, Output};
use sha2::digest::generic_array::GenericArray;
use zeroize::Zeroize;

/// The longest block of the functions here (SHA-384's), in bytes.
pub(crate) const MAX_BLOCK: usize = 128;

/// A SHA-2 function's chaining value and what HMAC and the padding need
/// to know of it.
pub(crate) trait Sha2: Copy + Zeroize + Send + Sync + 'static {
    /// Bytes per block.
    const BLOCK: usize;
    /// Bytes of output.
    const OUTPUT: usize;
    /// Bytes of the length field that ends the padding.
    const LENGTH_FIELD: usize;
    /// rustls' name for the function.
    const ALGORITHM: HashAlgorithm;
    /// The digest of the empty message (FIPS 180-4): TLS 1.3's key
    /// schedule asks for it twice per handshake ("derived").
    const EMPTY: &'static [u8];
    /// The chaining value before any input.
    fn initial() -> Self;
    /// Compresses `blocks`, a whole number of blocks, into the state.
    fn compress(&mut self, blocks: &[u8]);
    /// Writes the first [`Self::OUTPUT`] bytes of the state, big-endian,
    /// into `out[..Self::OUTPUT]`.
    fn write_output(&self, out: &mut [u8]);
}

#[cfg(test)]
thread_local! {
    /// Blocks compressed on this thread, both functions together (tests
    /// count the work a step does).
    static COMPRESSIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Blocks compressed on this thread so far.
#[cfg(test)]
pub(crate) fn compressions() -> u64 {
    COMPRESSIONS.with(std::cell::Cell::get)
}

#[cfg(test)]
fn count_compressions(blocks: usize) {
    COMPRESSIONS.with(|c| c.set(c.get() + blocks as u64));
}

/// SHA-256's chaining value (FIPS 180-4 §5.3.3).
#[derive(Clone, Copy)]
pub(crate) struct Sha256([u32; 8]);

/// SHA-384's chaining value (FIPS 180-4 §5.3.4).
#[derive(Clone, Copy)]
pub(crate) struct Sha384([u64; 8]);

impl Zeroize for Sha256 {
    fn zeroize(&mut self) {
        self.0.zeroize();
    }
}

impl Zeroize for Sha384 {
    fn zeroize(&mut self) {
        self.0.zeroize();
    }
}

impl Sha2 for Sha256 {
    const BLOCK: usize = 64;
    const OUTPUT: usize = 32;
    const LENGTH_FIELD: usize = 8;
    const ALGORITHM: HashAlgorithm = HashAlgorithm::SHA256;
    const EMPTY: &'static [u8] = &[
        0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9,
        0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52,
        0xb8, 0x55,
    ];

    fn initial() -> Self {
        Self([
            0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
            0x5be0cd19,
        ])
    }

    fn compress(&mut self, blocks: &[u8]) {
        debug_assert_eq!(blocks.len() % Self::BLOCK, 0);
        #[cfg(test)]
        count_compressions(blocks.len() / Self::BLOCK);
        for block in blocks.chunks_exact(Self::BLOCK) {
            sha2::compress256(
                &mut self.0,
                std::slice::from_ref(GenericArray::from_slice(block)),
            );
        }
    }

    fn write_output(&self, out: &mut [u8]) {
        for (chunk, word) in out[..Self::OUTPUT].chunks_exact_mut(4).zip(self.0) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
    }
}

impl Sha2 for Sha384 {
    const BLOCK: usize = 128;
    const OUTPUT: usize = 48;
    const LENGTH_FIELD: usize = 16;
    const ALGORITHM: HashAlgorithm = HashAlgorithm::SHA384;
    const EMPTY: &'static [u8] = &[
        0x38, 0xb0, 0x60, 0xa7, 0x51, 0xac, 0x96, 0x38, 0x4c, 0xd9, 0x32, 0x7e, 0xb1, 0xb1, 0xe3,
        0x6a, 0x21, 0xfd, 0xb7, 0x11, 0x14, 0xbe, 0x07, 0x43, 0x4c, 0x0c, 0xc7, 0xbf, 0x63, 0xf6,
        0xe1, 0xda, 0x27, 0x4e, 0xde, 0xbf, 0xe7, 0x6f, 0x65, 0xfb, 0xd5, 0x1a, 0xd2, 0xf1, 0x48,
        0x98, 0xb9, 0x5b,
    ];

    fn initial() -> Self {
        Self([
            0xcbbb9d5dc1059ed8,
            0x629a292a367cd507,
            0x9159015a3070dd17,
            0x152fecd8f70e5939,
            0x67332667ffc00b31,
            0x8eb44a8768581511,
            0xdb0c2e0d64f98fa7,
            0x47b5481dbefa4fa4,
        ])
    }

    fn compress(&mut self, blocks: &[u8]) {
        debug_assert_eq!(blocks.len() % Self::BLOCK, 0);
        #[cfg(test)]
        count_compressions(blocks.len() / Self::BLOCK);
        for block in blocks.chunks_exact(Self::BLOCK) {
            sha2::compress512(
                &mut self.0,
                std::slice::from_ref(GenericArray::from_slice(block)),
            );
        }
    }

    fn write_output(&self, out: &mut [u8]) {
        for (chunk, word) in out[..Self::OUTPUT].chunks_exact_mut(8).zip(self.0) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
    }
}

/// Bytes of message that fit in a hash's last block before its padding
/// (the `0x80` byte and the length field, FIPS 180-4 §5.1).
pub(crate) const fn last_block_room<H: Sha2>() -> usize {
    H::BLOCK - 1 - H::LENGTH_FIELD
}

/// Makes `block` (one block) the last of a message of `taken` bytes in
/// all: after the message's `tail` bytes already in it (`Some(n)`, `n <=
/// last_block_room`), or alone after a block that took the `0x80`
/// (`None`), zeros and then the length in bits.
///
/// `block` is exactly one block: every caller passes `&mut buf[..H::BLOCK]`
/// of a `MAX_BLOCK` buffer, and `n <= last_block_room < field`, so no index
/// here leaves it; the length field is 8 or 16 of the 16 bytes of `bits`.
pub(crate) fn pad_last_block<H: Sha2>(block: &mut [u8], tail: Option<usize>, taken: u64) {
    let field = H::BLOCK - H::LENGTH_FIELD;
    if let Some(n) = tail {
        block[n] = 0x80;
        block[n + 1..field].fill(0);
    }
    let bits = u128::from(taken) * 8;
    block[field..H::BLOCK].copy_from_slice(&bits.to_be_bytes()[16 - H::LENGTH_FIELD..]);
}

/// A hash in progress: the chaining value, the bytes of a block not yet
/// compressed and the count of bytes taken. Copying it is a `memcpy`;
/// dropping it wipes the state and the partial block.
#[derive(Clone)]
pub(crate) struct Hasher<H: Sha2> {
    state: H,
    partial: [u8; MAX_BLOCK],
    /// Bytes of `partial` in use (less than `H::BLOCK`).
    used: usize,
    /// Bytes taken in all, compressed or not.
    taken: u64,
}

impl<H: Sha2> Hasher<H> {
    /// A hash of nothing yet.
    pub(crate) fn new() -> Self {
        Self::resume(H::initial(), 0)
    }

    /// Continues from `state`, the chaining value after `taken` bytes (a
    /// whole number of blocks).
    pub(crate) fn resume(state: H, taken: u64) -> Self {
        debug_assert_eq!(taken % H::BLOCK as u64, 0);
        Self {
            state,
            partial: [0; MAX_BLOCK],
            used: 0,
            taken,
        }
    }

    pub(crate) fn update(&mut self, mut data: &[u8]) {
        self.taken += data.len() as u64;
        if self.used > 0 {
            let n = data.len().min(H::BLOCK - self.used);
            self.partial[self.used..self.used + n].copy_from_slice(&data[..n]);
            self.used += n;
            data = &data[n..];
            if self.used < H::BLOCK {
                return;
            }
            self.state.compress(&self.partial[..H::BLOCK]);
            self.used = 0;
        }
        let whole = data.len() - data.len() % H::BLOCK;
        self.state.compress(&data[..whole]);
        let rest = &data[whole..];
        self.partial[..rest.len()].copy_from_slice(rest);
        self.used = rest.len();
    }

    /// Pads (FIPS 180-4 §5.1) and writes the digest into
    /// `out[..H::OUTPUT]`; the hasher is spent.
    pub(crate) fn finish_into(&mut self, out: &mut [u8]) {
        let block = H::BLOCK;
        if self.used > last_block_room::<H>() {
            self.partial[self.used] = 0x80;
            self.partial[self.used + 1..block].fill(0);
            self.state.compress(&self.partial[..block]);
            self.partial[..block].fill(0);
            self.used = 0;
            pad_last_block::<H>(&mut self.partial[..block], None, self.taken);
        } else {
            pad_last_block::<H>(&mut self.partial[..block], Some(self.used), self.taken);
        }
        self.state.compress(&self.partial[..block]);
        self.used = 0;
        self.state.write_output(out);
    }

    /// The digest of what was taken, leaving this hasher as it was (of
    /// nothing: the constant, no compression).
    pub(crate) fn peek(&self) -> Output {
        if self.taken == 0 {
            return Output::new(H::EMPTY);
        }
        let mut out = [0u8; MAX_BLOCK / 2];
        self.clone().finish_into(&mut out);
        Output::new(&out[..H::OUTPUT])
    }
}

impl<H: Sha2> Drop for Hasher<H> {
    fn drop(&mut self) {
        self.state.zeroize();
        // Plain stores, kept by `black_box`: `zeroize`'s volatile byte
        // stores cost more than the hash for a short input.
        self.partial.fill(0);
        std::hint::black_box(&mut self.partial);
    }
}

/// rustls' [`Hash`] (the transcript hash of a TLS 1.3 suite) on
/// [`Hasher`]: forks are copies, not allocations inside AWS-LC.
pub(crate) struct TranscriptHash<H: Sha2>(std::marker::PhantomData<H>);

impl<H: Sha2> TranscriptHash<H> {
    pub(crate) const fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<H: Sha2> Hash for TranscriptHash<H> {
    fn start(&self) -> Box<dyn Context> {
        Box::new(Hasher::<H>::new())
    }

    fn hash(&self, data: &[u8]) -> Output {
        let mut h = Hasher::<H>::new();
        h.update(data);
        h.peek()
    }

    fn output_len(&self) -> usize {
        H::OUTPUT
    }

    fn algorithm(&self) -> HashAlgorithm {
        H::ALGORITHM
    }
}

impl<H: Sha2> Context for Hasher<H> {
    fn fork_finish(&self) -> Output {
        self.peek()
    }

    fn fork(&self) -> Box<dyn Context> {
        Box::new(self.clone())
    }

    fn finish(self: Box<Self>) -> Output {
        self.peek()
    }

    fn update(&mut self, data: &[u8]) {
        Hasher::update(self, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::digest;

    fn ours<H: Sha2>(parts: &[&[u8]]) -> Vec<u8> {
        let mut h = Hasher::<H>::new();
        for p in parts {
            h.update(p);
        }
        h.peek().as_ref().to_vec()
    }

    /// Every length across three blocks of either function, fed whole
    /// and in three uneven parts: the padding's edge cases (a length
    /// field that no longer fits, an exact block) all come up.
    #[test]
    fn agrees_with_aws_lc_for_every_length_and_split() {
        let data: Vec<u8> = (0..3 * MAX_BLOCK + 7).map(|i| (i * 31 + 7) as u8).collect();
        for len in 0..data.len() {
            let msg = &data[..len];
            let (a, b) = (len / 3, len * 3 / 4);
            for (got, alg) in [
                (ours::<Sha256>(&[msg]), &digest::SHA256),
                (ours::<Sha384>(&[msg]), &digest::SHA384),
                (
                    ours::<Sha256>(&[&msg[..a], &msg[a..b], &msg[b..]]),
                    &digest::SHA256,
                ),
                (
                    ours::<Sha384>(&[&msg[..a], &msg[a..b], &msg[b..]]),
                    &digest::SHA384,
                ),
            ] {
                assert_eq!(got, digest::digest(alg, msg).as_ref(), "length {len}");
            }
        }
    }

    #[test]
    fn the_empty_digest_is_a_constant() {
        // TLS 1.3's key schedule asks for it twice per handshake: no
        // compression for it, and the constant is what the padding gives.
        fn check<H: Sha2>(alg: &'static digest::Algorithm) {
            let before = compressions();
            let got = TranscriptHash::<H>::new().start().finish();
            assert_eq!(compressions(), before);
            let mut padded = [0u8; MAX_BLOCK];
            Hasher::<H>::new().finish_into(&mut padded);
            assert_eq!(compressions(), before + 1);
            assert_eq!(got.as_ref(), &padded[..H::OUTPUT]);
            assert_eq!(got.as_ref(), digest::digest(alg, b"").as_ref());
        }
        check::<Sha256>(&digest::SHA256);
        check::<Sha384>(&digest::SHA384);
    }

    /// FIPS 180-4's "abc" examples, independent of AWS-LC.
    #[test]
    fn fips_examples() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(
            hex(&ours::<Sha256>(&[b"abc"])),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(&ours::<Sha384>(&[b"abc"])),
            "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed\
             8086072ba1e7cc2358baeca134c825a7"
        );
    }

    /// A fork continues independently of its parent; `fork_finish` leaves
    /// the parent as it was.
    #[test]
    fn transcript_forks_are_independent() {
        let t = TranscriptHash::<Sha256>::new();
        let mut parent = t.start();
        parent.update(b"client hello");
        let mut child = parent.fork();
        child.update(b" server hello");
        assert_eq!(
            parent.fork_finish().as_ref(),
            digest::digest(&digest::SHA256, b"client hello").as_ref()
        );
        assert_eq!(
            child.finish().as_ref(),
            digest::digest(&digest::SHA256, b"client hello server hello").as_ref()
        );
        parent.update(b"!");
        assert_eq!(
            parent.finish().as_ref(),
            digest::digest(&digest::SHA256, b"client hello!").as_ref()
        );
        assert_eq!(
            t.hash(b"x").as_ref(),
            digest::digest(&digest::SHA256, b"x").as_ref()
        );
        assert_eq!(t.output_len(), 32);
    }
}
