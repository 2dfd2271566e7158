//! Random bytes for what a server's handshake sends in clear, drawn from
//! AWS-LC a kilobyte at a time (docs/architecture.md, "TLS";
//! docs/profile.md).
//!
//! rustls asks its provider's `SecureRandom` for public values only on a
//! server: the ServerHello random, TLS 1.2 session IDs, TLS 1.3 ticket
//! nonces and ages. Key shares, signature nonces and ticket keys come
//! from AWS-LC directly. AWS-LC's `RAND_bytes` costs about half a
//! microsecond per call whatever the length: a lock for fork safety, fresh
//! RDRAND input for prediction resistance and a new AES key schedule for
//! its CTR-DRBG. [`PublicRandom`] takes [`POOL`] bytes from it per refill,
//! per thread, and hands them out in order, wiping each byte as it leaves,
//! so no byte is given twice and none stays behind once given.
//!
//! The pool is per thread (nothing shared between engines) and is not
//! fork-safe: a forked child would hand out its parent's remaining bytes.
//! `dpd` forks only to run another program at once.

use std::cell::RefCell;

use rustls::crypto::{GetRandomFailed, SecureRandom};
use zeroize::Zeroize;

/// Bytes drawn from AWS-LC per refill.
const POOL: usize = 1024;

/// Requests longer than this go to AWS-LC directly.
const LARGEST_FROM_POOL: usize = POOL / 8;

/// rustls' `SecureRandom` on a per-thread pool (see the module's doc).
#[derive(Debug)]
pub(crate) struct PublicRandom;

/// One thread's pool: `bytes[at..]` not handed out yet, `bytes[..at]`
/// zero.
struct Pool {
    bytes: [u8; POOL],
    at: usize,
}

thread_local! {
    static THREAD_POOL: RefCell<Pool> = const {
        RefCell::new(Pool { bytes: [0; POOL], at: POOL })
    };
}

impl Pool {
    fn fill(&mut self, out: &mut [u8]) -> Result<(), GetRandomFailed> {
        if self.at + out.len() > POOL {
            aws_lc_rs::rand::fill(&mut self.bytes).map_err(|_| GetRandomFailed)?;
            self.at = 0;
        }
        let taken = &mut self.bytes[self.at..self.at + out.len()];
        out.copy_from_slice(taken);
        taken.zeroize();
        self.at += out.len();
        Ok(())
    }
}

impl SecureRandom for PublicRandom {
    fn fill(&self, out: &mut [u8]) -> Result<(), GetRandomFailed> {
        if out.len() > LARGEST_FROM_POOL {
            return aws_lc_rs::rand::fill(out).map_err(|_| GetRandomFailed);
        }
        THREAD_POOL.with_borrow_mut(|pool| pool.fill(out))
    }

    fn fips(&self) -> bool {
        false
    }
}

/// The server provider's randomness.
pub(crate) static PUBLIC_RANDOM: PublicRandom = PublicRandom;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Many 32-byte draws (ServerHello randoms) across several refills
    /// are all different, interleaved with draws of other lengths, and
    /// longer draws bypass the pool.
    #[test]
    fn draws_never_repeat_across_refills() {
        let mut seen = HashSet::new();
        for i in 0..4096 {
            let mut random = [0u8; 32];
            PUBLIC_RANDOM.fill(&mut random).unwrap();
            assert!(seen.insert(random), "draw {i} repeated");
            let mut odd = vec![0u8; i % 7];
            PUBLIC_RANDOM.fill(&mut odd).unwrap();
        }
        let mut long = vec![0u8; POOL * 2];
        PUBLIC_RANDOM.fill(&mut long).unwrap();
        assert!(long.iter().any(|&b| b != 0));
        let mut nothing = [];
        PUBLIC_RANDOM.fill(&mut nothing).unwrap();
    }

    /// What a draw hands out is zero in the pool afterwards, and the rest
    /// of the pool is what the next draws get.
    #[test]
    fn bytes_handed_out_are_wiped_from_the_pool() {
        let mut pool = Pool {
            bytes: [0; POOL],
            at: POOL,
        };
        let mut first = [0u8; 32];
        pool.fill(&mut first).unwrap();
        assert_eq!(pool.at, 32);
        assert!(pool.bytes[..32].iter().all(|&b| b == 0));
        let ahead = pool.bytes[32..64].to_vec();
        assert!(ahead.iter().any(|&b| b != 0));
        let mut second = [0u8; 32];
        pool.fill(&mut second).unwrap();
        assert_eq!(&second[..], &ahead[..]);
        assert!(pool.bytes[..64].iter().all(|&b| b == 0));
        // A draw that does not fit in what is left refills first.
        pool.at = POOL - 8;
        let mut third = [0u8; 32];
        pool.fill(&mut third).unwrap();
        assert_eq!(pool.at, 32);
    }
}
