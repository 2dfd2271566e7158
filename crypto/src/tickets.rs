//! Stateless session tickets (RFC 5077 / RFC 8446 §4.6.1) whose keys
//! rotate on a schedule without shared mutable state: the key for epoch
//! `e = unix_time / rotate_s` is derived from a master secret with
//! HKDF-SHA256. Every core (and every node given the same key file)
//! computes the same keys, so tickets made on one are accepted by the
//! others; no lock, no rotation thread. A ticket is accepted during its
//! epoch and the next one (and the epoch before, for clocks slightly
//! ahead), so it lives between `rotate_s` and `2 × rotate_s`.
//!
//! Ticket: key name (16 bytes) ‖ nonce (12) ‖ AES-256-GCM(ticket, tag).

use std::cell::RefCell;
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::hkdf::{Salt, HKDF_SHA256};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;

const NAME_LEN: usize = 16;
const KEY_LEN: usize = 32;
const TAG_LEN: usize = 16;
/// Fewest key-file bytes accepted (a 256-bit secret).
pub const MIN_KEY_FILE: usize = 32;

/// The ticket keys of one VIP (or several sharing a key file).
pub struct TicketKeys {
    master: [u8; 32],
    rotate_s: u64,
    /// Seconds since the Unix epoch (a clock for tests).
    clock: fn() -> u64,
    /// Which keys these are in each thread's [`EPOCH_KEYS`] (not secret).
    id: u64,
}

/// The master secret is wiped when the keys go (as the certificates'
/// keys and the TLS secrets are).
impl Drop for TicketKeys {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.master);
    }
}

/// Numbers [`TicketKeys`] instances.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Epoch keys a thread keeps (three per VIP with tickets are in use).
const CACHED_EPOCH_KEYS: usize = 24;

/// One epoch's ticket key name and key, derived for [`TicketKeys`] `id`.
struct EpochKey {
    id: u64,
    epoch: u64,
    name: [u8; NAME_LEN],
    key: LessSafeKey,
}

thread_local! {
    /// The epoch keys this thread derived lately: each is derived once per
    /// engine, not for every ticket made or tried. A ClientHello may offer
    /// hundreds of PSK identities, each tried against three epochs: with a
    /// derivation (HKDF and an AES key set-up) for each, one hello cost
    /// many handshakes' work. No lock: each engine has its own.
    static EPOCH_KEYS: RefCell<Vec<EpochKey>> = const { RefCell::new(Vec::new()) };
}

impl fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TicketKeys")
            .field("rotate_s", &self.rotate_s)
            .finish_non_exhaustive()
    }
}

/// Why ticket keys could not be set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketKeyError(pub String);

impl fmt::Display for TicketKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TicketKeyError {}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// HKDF-SHA256 of `ikm` (no salt) to 32 bytes for `info`.
fn derive(ikm: &[u8], info: &[u8], out: &mut [u8]) {
    let prk = Salt::new(HKDF_SHA256, b"tlsdp session tickets").extract(ikm);
    let info = [info];
    prk.expand(&info, Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .expect("HKDF output length is valid");
}

/// A ticket key file's secret: the whole file, at least [`MIN_KEY_FILE`]
/// bytes.
fn read_key_file(path: &Path) -> Result<zeroize::Zeroizing<Vec<u8>>, TicketKeyError> {
    let bytes = zeroize::Zeroizing::new(
        crate::files::read_capped(path, crate::files::MAX_TICKET_KEY_FILE)
            .map_err(|e| TicketKeyError(format!("ticket key file {}: {e}", path.display())))?
            .bytes,
    );
    if bytes.len() < MIN_KEY_FILE {
        return Err(TicketKeyError(format!(
            "ticket key file {}: {} bytes, at least {MIN_KEY_FILE} needed (openssl rand 80 > FILE)",
            path.display(),
            bytes.len()
        )));
    }
    Ok(bytes)
}

struct Len(usize);

impl aws_lc_rs::hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

impl TicketKeys {
    /// Keys from a fresh random master secret: tickets work within this
    /// process only.
    ///
    /// # Errors
    /// When the system random source fails, or `rotate_s` is 0.
    pub fn random(rotate_s: u64) -> Result<Self, TicketKeyError> {
        let mut master = zeroize::Zeroizing::new([0u8; 32]);
        SystemRandom::new()
            .fill(&mut master[..])
            .map_err(|_| TicketKeyError("no system randomness for ticket keys".into()))?;
        Self::from_secret(&master[..], rotate_s, &[])
    }

    /// Keys from a key file: at least [`MIN_KEY_FILE`] bytes of secret
    /// (e.g. `openssl rand 80 > ticket.key`, the size nginx uses); the
    /// whole file is the master secret, taken for `scope` (the identity of
    /// the certificates the VIP serves, [`crate::certs::CertStore::identity`]).
    /// Nodes given the same file accept each other's tickets for the same
    /// certificates; a ticket from a VIP of other certificates sharing the
    /// file does not resume (it would skip proving a name that VIP may not
    /// serve: virtual host confusion).
    ///
    /// # Errors
    /// Unreadable or too short, naming the file.
    pub fn from_file(path: &Path, rotate_s: u64, scope: &[u8]) -> Result<Self, TicketKeyError> {
        Self::from_secret(&read_key_file(path)?, rotate_s, scope)
    }

    /// What the key file at `path` holds now, as a value that changes when
    /// its secret does and tells nothing of it (HKDF-SHA256 of the secret
    /// for its own label): how `dpd` knows on a reload whether the file
    /// was rewritten.
    ///
    /// # Errors
    /// As [`TicketKeys::from_file`].
    pub fn key_file_id(path: &Path) -> Result<[u8; 32], TicketKeyError> {
        let mut id = [0u8; 32];
        derive(&read_key_file(path)?, b"key file id", &mut id);
        Ok(id)
    }

    fn from_secret(secret: &[u8], rotate_s: u64, scope: &[u8]) -> Result<Self, TicketKeyError> {
        if rotate_s == 0 {
            return Err(TicketKeyError("ticket rotate_s must be at least 1".into()));
        }
        let mut master = [0u8; 32];
        let info: Vec<u8> = b"master".iter().chain(scope).copied().collect();
        derive(secret, &info, &mut master);
        Ok(Self {
            master,
            rotate_s,
            clock: unix_now,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// The same keys, on another clock (tests).
    #[doc(hidden)]
    pub fn with_clock(mut self, clock: fn() -> u64) -> Self {
        self.clock = clock;
        self
    }

    fn epoch(&self) -> u64 {
        (self.clock)() / self.rotate_s
    }

    /// `f` of the name and key of `epoch`, from this thread's cache
    /// ([`EPOCH_KEYS`]), derived on a miss (the oldest entry then goes).
    fn with_key<T>(&self, epoch: u64, f: impl FnOnce(&[u8; NAME_LEN], &LessSafeKey) -> T) -> T {
        EPOCH_KEYS.with(|cache| {
            let mut cache = cache.borrow_mut();
            let found = cache
                .iter()
                .position(|k| k.id == self.id && k.epoch == epoch);
            let at = match found {
                Some(at) => at,
                None => {
                    let (name, key) = self.key(epoch);
                    if cache.len() >= CACHED_EPOCH_KEYS {
                        cache.remove(0);
                    }
                    cache.push(EpochKey {
                        id: self.id,
                        epoch,
                        name,
                        key,
                    });
                    cache.len() - 1
                }
            };
            let k = &cache[at];
            f(&k.name, &k.key)
        })
    }

    /// Name and key of `epoch`, derived.
    fn key(&self, epoch: u64) -> ([u8; NAME_LEN], LessSafeKey) {
        #[cfg(test)]
        tests::DERIVED.with(|d| d.set(d.get() + 1));
        let mut okm = [0u8; NAME_LEN + KEY_LEN];
        let mut info = *b"epoch\0\0\0\0\0\0\0\0";
        info[5..].copy_from_slice(&epoch.to_be_bytes());
        derive(&self.master, &info, &mut okm);
        let mut name = [0u8; NAME_LEN];
        name.copy_from_slice(&okm[..NAME_LEN]);
        let key = UnboundKey::new(&AES_256_GCM, &okm[NAME_LEN..]).expect("32-byte key");
        (name, LessSafeKey::new(key))
    }
}

impl ProducesTickets for TicketKeys {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.rotate_s).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).ok()?;
        self.with_key(self.epoch(), |name, key| {
            let mut out = Vec::with_capacity(NAME_LEN + NONCE_LEN + plain.len() + TAG_LEN);
            out.extend_from_slice(name);
            out.extend_from_slice(&nonce);
            out.extend_from_slice(plain);
            let tag = key
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(name),
                    &mut out[NAME_LEN + NONCE_LEN..],
                )
                .ok()?;
            out.extend_from_slice(tag.as_ref());
            Some(out)
        })
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() < NAME_LEN + NONCE_LEN + TAG_LEN {
            return None;
        }
        let (name, rest) = cipher.split_at(NAME_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let now = self.epoch();
        // This epoch, the one before (a ticket from the previous key) and
        // the next (a node whose clock is a little ahead).
        [now, now.wrapping_sub(1), now.wrapping_add(1)]
            .into_iter()
            .find_map(|e| {
                self.with_key(e, |n, key| {
                    if n[..] != *name {
                        return None;
                    }
                    let mut buf = sealed.to_vec();
                    let plain_len = key
                        .open_in_place(
                            Nonce::try_assume_unique_for_key(nonce).ok()?,
                            Aad::from(name),
                            &mut buf,
                        )
                        .ok()?
                        .len();
                    buf.truncate(plain_len);
                    Some(Some(buf))
                })
            })?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Epoch keys derived on this thread.
        pub(super) static DERIVED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// A ClientHello may offer hundreds of PSK identities, each tried
    /// against three epochs: the keys are derived once per thread, not
    /// for every identity tried or ticket made. Before, each try derived
    /// up to three (HKDF and an AES key set-up each): 300 for these 100.
    #[test]
    fn epoch_keys_are_derived_once_per_thread_not_per_ticket() {
        let keys = TicketKeys::from_secret(&[7; 32], 3600, &[])
            .unwrap()
            .with_clock(at(1000));
        let before = DERIVED.with(std::cell::Cell::get);
        for i in 0..100u8 {
            let garbage = [i; NAME_LEN + NONCE_LEN + TAG_LEN + 40];
            assert!(keys.decrypt(&garbage).is_none());
        }
        let made: Vec<Vec<u8>> = (0..100u8)
            .map(|i| keys.encrypt(&[i; 50]).unwrap())
            .collect();
        for (i, t) in made.iter().enumerate() {
            assert_eq!(keys.decrypt(t).unwrap(), [i as u8; 50]);
        }
        assert_eq!(DERIVED.with(std::cell::Cell::get) - before, 3);
        // Another instance (even from the same secret) has its own.
        let other = TicketKeys::from_secret(&[7; 32], 3600, &[])
            .unwrap()
            .with_clock(at(1000));
        assert_eq!(other.decrypt(&made[0]).unwrap(), [0u8; 50]);
        assert_eq!(DERIVED.with(std::cell::Cell::get) - before, 4);
    }

    fn at(t: u64) -> fn() -> u64 {
        // Function pointers cannot capture: a few fixed clocks.
        match t {
            1000 => || 1000,
            1100 => || 1100,
            1700 => || 1700,
            _ => || 2500,
        }
    }

    #[test]
    fn tickets_round_trip_across_instances_sharing_a_file_and_expire() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ticket.key");
        std::fs::write(&file, [7u8; 80]).unwrap();
        let a = TicketKeys::from_file(&file, 600, b"certs")
            .unwrap()
            .with_clock(at(1000));
        let b = TicketKeys::from_file(&file, 600, b"certs")
            .unwrap()
            .with_clock(at(1100));
        let t = a.encrypt(b"session state").unwrap();
        assert_ne!(&t[NAME_LEN + NONCE_LEN..][..13], b"session state");
        // Another node (same file) in the same epoch accepts it.
        assert_eq!(b.decrypt(&t).unwrap(), b"session state");
        // The next epoch still accepts it; two epochs later it is gone.
        let later = TicketKeys::from_file(&file, 600, b"certs")
            .unwrap()
            .with_clock(at(1700));
        assert_eq!(later.decrypt(&t).unwrap(), b"session state");
        let gone = TicketKeys::from_file(&file, 600, b"certs")
            .unwrap()
            .with_clock(at(2500));
        assert_eq!(gone.decrypt(&t), None);
        // Another secret never accepts it; nor a tampered ticket.
        let other = TicketKeys::random(600).unwrap().with_clock(at(1000));
        assert_eq!(other.decrypt(&t), None);
        // Nor the same file for other certificates (a VIP sharing it that
        // serves other names: resuming would skip proving the name).
        let elsewhere = TicketKeys::from_file(&file, 600, b"other certs")
            .unwrap()
            .with_clock(at(1000));
        assert_eq!(elsewhere.decrypt(&t), None);
        for i in [0, NAME_LEN, NAME_LEN + NONCE_LEN, t.len() - 1] {
            let mut bad = t.clone();
            bad[i] ^= 1;
            assert_eq!(a.decrypt(&bad), None, "byte {i}");
        }
        assert_eq!(a.decrypt(&t[..20]), None);
        assert_eq!(a.decrypt(&[]), None);
    }

    #[test]
    fn bad_key_files_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("short.key");
        std::fs::write(&file, [1u8; 16]).unwrap();
        let e = TicketKeys::from_file(&file, 600, b"certs").unwrap_err();
        assert!(
            e.0.contains("short.key") && e.0.contains("at least 32"),
            "{e}"
        );
        let e = TicketKeys::from_file(&dir.path().join("missing.key"), 600, b"certs").unwrap_err();
        assert!(e.0.contains("missing.key"), "{e}");
        assert!(TicketKeys::random(0).is_err());
    }
}
