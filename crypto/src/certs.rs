//! Certificates: PEM chains and keys (RSA 2048–4096, ECDSA P-256 and P-384),
//! checked when loaded (key matches certificate, dates, key strength), and a
//! store that picks one per handshake by SNI (exact name, then wildcard,
//! then the default) and by the client's signature algorithms (RSA and
//! ECDSA may serve the same name).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::aws_lc_rs::sign::any_supported_type;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::NamedGroup;
use rustls::{SignatureAlgorithm, SignatureScheme};
use x509_parser::extensions::GeneralName;
use x509_parser::public_key::PublicKey;
use zeroize::Zeroizing;

/// A certificate's key type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyType {
    Rsa { bits: u32 },
    EcdsaP256,
    EcdsaP384,
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rsa { bits } => write!(f, "RSA-{bits}"),
            Self::EcdsaP256 => f.write_str("ECDSA P-256"),
            Self::EcdsaP384 => f.write_str("ECDSA P-384"),
        }
    }
}

/// Why a certificate and key were refused.
#[derive(Debug)]
pub enum CertErrorKind {
    Read(io::Error),
    /// No `CERTIFICATE` block in the file.
    NoCertificate,
    /// No private key block in the file.
    NoKey,
    /// A block is not valid PEM/DER.
    Malformed(String),
    /// The key type or size is not one we serve.
    Unsupported(String),
    /// The private key does not belong to the certificate.
    KeyMismatch,
    /// Past `notAfter` (Unix seconds).
    Expired {
        not_after: i64,
    },
    /// Before `notBefore` (Unix seconds).
    NotYetValid {
        not_before: i64,
    },
}

/// A refused certificate: which file and why.
#[derive(Debug)]
pub struct CertError {
    pub file: PathBuf,
    pub kind: CertErrorKind,
}

impl fmt::Display for CertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        match &self.kind {
            CertErrorKind::Read(e) => write!(f, "{file}: cannot read: {e}"),
            CertErrorKind::NoCertificate => write!(f, "{file}: no PEM CERTIFICATE block"),
            CertErrorKind::NoKey => write!(f, "{file}: no PEM private key block"),
            CertErrorKind::Malformed(m) => write!(f, "{file}: malformed: {m}"),
            CertErrorKind::Unsupported(m) => write!(f, "{file}: unsupported: {m}"),
            CertErrorKind::KeyMismatch => {
                write!(f, "{file}: the private key does not match the certificate")
            }
            CertErrorKind::Expired { not_after } => write!(
                f,
                "{file}: certificate expired (notAfter {not_after}, Unix seconds)"
            ),
            CertErrorKind::NotYetValid { not_before } => {
                write!(
                    f,
                    "{file}: certificate not valid yet (notBefore {not_before}, Unix seconds)"
                )
            }
        }
    }
}

impl std::error::Error for CertError {}

/// A loaded certificate chain with its key, ready to serve.
#[derive(Debug, Clone)]
pub struct Cert {
    /// DNS names it serves (subjectAltName, else the subject CN), lowercase.
    pub names: Vec<String>,
    pub key_type: KeyType,
    pub not_before: i64,
    pub not_after: i64,
    /// Certificates in the chain (leaf first).
    pub chain_len: usize,
    /// Permission bits of the key file when it was read (see
    /// [`crate::files::exposed`]).
    pub key_mode: u32,
    certified: Arc<CertifiedKey>,
    /// The private key as loaded, for [`Cert::own_copy`] (wiped when the
    /// last copy goes).
    key: Arc<Zeroizing<PrivateKeyDer<'static>>>,
}

impl Cert {
    /// Loads a PEM chain (leaf first) and its PEM private key, and checks
    /// them at time `now` (Unix seconds).
    ///
    /// # Errors
    /// A [`CertError`] naming the file at fault.
    pub fn load(cert_file: &Path, key_file: &Path, now: i64) -> Result<Self, CertError> {
        let cert_err = |kind| CertError {
            file: cert_file.to_path_buf(),
            kind,
        };
        let key_err = |kind| CertError {
            file: key_file.to_path_buf(),
            kind,
        };
        let read = |f: &Path| crate::files::read_capped(f, crate::files::MAX_PEM_FILE);
        let cert_pem = read(cert_file)
            .map_err(|e| cert_err(CertErrorKind::Read(e)))?
            .bytes;
        let key_file_read = read(key_file).map_err(|e| key_err(CertErrorKind::Read(e)))?;
        let (key_pem, key_mode) = (key_file_read.bytes, key_file_read.mode);

        let chain: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &cert_pem[..])
            .collect::<Result<_, _>>()
            .map_err(|e| cert_err(CertErrorKind::Malformed(e.to_string())))?;
        if chain.is_empty() {
            return Err(cert_err(CertErrorKind::NoCertificate));
        }
        let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut &key_pem[..])
            .map_err(|e| key_err(CertErrorKind::Malformed(e.to_string())))?
            .ok_or_else(|| key_err(CertErrorKind::NoKey))?;

        let (_, x509) = x509_parser::parse_x509_certificate(&chain[0])
            .map_err(|e| cert_err(CertErrorKind::Malformed(e.to_string())))?;
        let key_type = match x509.public_key().parsed() {
            Ok(PublicKey::RSA(rsa)) => {
                let bits = rsa.key_size() as u32;
                if !(2048..=4096).contains(&bits) {
                    return Err(cert_err(CertErrorKind::Unsupported(format!(
                        "RSA-{bits} (2048 to 4096 bits are served)"
                    ))));
                }
                KeyType::Rsa { bits }
            }
            Ok(PublicKey::EC(point)) => match point.key_size() {
                256 => KeyType::EcdsaP256,
                384 => KeyType::EcdsaP384,
                n => {
                    return Err(cert_err(CertErrorKind::Unsupported(format!(
                        "EC key of {n} bits (P-256 and P-384 are served)"
                    ))))
                }
            },
            Ok(_) => {
                return Err(cert_err(CertErrorKind::Unsupported(
                    "key type (RSA and ECDSA are served)".into(),
                )))
            }
            Err(e) => return Err(cert_err(CertErrorKind::Malformed(e.to_string()))),
        };
        let validity = x509.validity();
        let (not_before, not_after) = (
            validity.not_before.timestamp(),
            validity.not_after.timestamp(),
        );
        if now < not_before {
            return Err(cert_err(CertErrorKind::NotYetValid { not_before }));
        }
        if now > not_after {
            return Err(cert_err(CertErrorKind::Expired { not_after }));
        }
        let mut names: Vec<String> = match x509.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::DNSName(d) => Some(d.to_ascii_lowercase()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        if names.is_empty() {
            names.extend(
                x509.subject()
                    .iter_common_name()
                    .filter_map(|cn| cn.as_str().ok())
                    .map(str::to_ascii_lowercase),
            );
        }

        let key = Zeroizing::new(key);
        let signing = any_supported_type(&key)
            .map_err(|e| key_err(CertErrorKind::Unsupported(e.to_string())))?;
        let chain_len = chain.len();
        let certified = CertifiedKey::new(chain, signing);
        match certified.keys_match() {
            Ok(()) => {}
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
                return Err(key_err(CertErrorKind::KeyMismatch))
            }
            Err(e) => return Err(key_err(CertErrorKind::Malformed(e.to_string()))),
        }
        Ok(Self {
            names,
            key_type,
            not_before,
            not_after,
            chain_len,
            key_mode,
            certified: Arc::new(certified),
            key: Arc::new(key),
        })
    }

    /// An equal certificate with its own `CertifiedKey` (each handshake
    /// takes a reference to the one it serves) and, with `new_key`, its
    /// own signing key parsed again from the one loaded (each handshake
    /// takes a reference to the key pair, and AWS-LC one to the key for
    /// each signature). One per engine keeps those reference counts off
    /// cache lines that all cores write. Without `new_key`, or should
    /// parsing fail now where it passed at load (not expected), the copy
    /// shares the key.
    pub fn own_copy(&self, new_key: bool) -> Self {
        let shared = || self.certified.key.clone();
        let key = if new_key {
            any_supported_type(&self.key).unwrap_or_else(|_| shared())
        } else {
            shared()
        };
        Self {
            certified: Arc::new(CertifiedKey::new(self.certified.cert.clone(), key)),
            ..self.clone()
        }
    }

    /// Whether `other` holds the same chain and private key (files read
    /// again after a reload, say). Comparing the key's bytes takes time
    /// that depends on where they differ: both sides are keys this process
    /// read itself, not anything a peer sent.
    pub fn same_as(&self, other: &Cert) -> bool {
        self.certified.cert == other.certified.cert
            && self.key.secret_der() == other.key.secret_der()
    }

    /// SHA-256 of the leaf certificate (DER), lowercase hex: what
    /// `openssl x509 -fingerprint -sha256` prints, without colons.
    pub fn sha256_hex(&self) -> String {
        let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &self.certified.cert[0]);
        d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        self.certified.key.algorithm()
    }

    /// Whether the client's signature schemes let this key sign.
    fn signable(&self, schemes: &[SignatureScheme]) -> bool {
        self.certified.key.choose_scheme(schemes).is_some()
    }
}

impl Cert {
    /// Address and strong count of each reference-counted part a
    /// handshake takes a reference to: the served `CertifiedKey`, and its
    /// signing key.
    pub(crate) fn counted_parts(&self) -> [(usize, usize); 2] {
        let key = &self.certified.key;
        [
            (
                Arc::as_ptr(&self.certified) as usize,
                Arc::strong_count(&self.certified),
            ),
            (
                Arc::as_ptr(key).cast::<()>() as usize,
                Arc::strong_count(key),
            ),
        ]
    }
}

/// Keys [`CertStore::own_copy`] parses again at most, per store (a VIP
/// serving thousands of names shares the rest: a copy for each engine
/// would take seconds on the control thread).
pub const OWN_KEYS_PER_STORE: usize = 64;

/// Certificates of one VIP, chosen per handshake.
#[derive(Debug, Default)]
pub struct CertStore {
    exact: HashMap<String, Vec<Cert>>,
    /// Keyed by the parent domain of `*.parent`.
    wildcard: HashMap<String, Vec<Cert>>,
    /// The certificates of the first name added (RSA and ECDSA, if both
    /// were given): for clients that send no SNI or a name none carries.
    default: Vec<Cert>,
    default_name: Option<String>,
    /// TLS 1.2 only on this VIP: every ECDSA certificate's curve must be
    /// one of the client's groups (in TLS 1.3 the signature scheme names
    /// the curve instead).
    tls12_only: bool,
    /// Every certificate in the order added (for [`CertStore::own_copy`]).
    added: Vec<Cert>,
}

impl CertStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a certificate under every name it carries.
    pub fn add(&mut self, cert: Cert) {
        for name in &cert.names {
            match name.strip_prefix("*.") {
                Some(parent) => self
                    .wildcard
                    .entry(parent.to_string())
                    .or_default()
                    .push(cert.clone()),
                None => self
                    .exact
                    .entry(name.clone())
                    .or_default()
                    .push(cert.clone()),
            }
        }
        let first = self
            .default_name
            .get_or_insert_with(|| cert.names.first().cloned().unwrap_or_default());
        if cert.names.first() == Some(first) {
            self.default.push(cert.clone());
        }
        self.added.push(cert);
    }

    /// Every certificate, in the order added.
    pub(crate) fn certs(&self) -> &[Cert] {
        &self.added
    }

    /// SHA-256 over the leaf certificates served, in a fixed order: what
    /// ties a VIP's session tickets to the certificates its handshakes
    /// prove (`TicketKeys`'s scope). Equal for stores of the same
    /// certificates, whatever the order they were added in.
    pub fn identity(&self) -> [u8; 32] {
        let mut leaves: Vec<&[u8]> = (self.added.iter())
            .filter_map(|c| c.certified.cert.first().map(AsRef::as_ref))
            .collect();
        leaves.sort_unstable();
        let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        for leaf in leaves {
            ctx.update(&(leaf.len() as u64).to_be_bytes());
            ctx.update(leaf);
        }
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        out
    }

    /// An equal store whose certificates are [`Cert::own_copy`]s: what
    /// one engine serves from. Keys are parsed again for the first
    /// [`OWN_KEYS_PER_STORE`] ECDSA P-256 certificates; RSA and P-384 keys
    /// are shared. A P-256 key takes about 23 µs to parse and its
    /// handshake about 50 µs of a core, so shared counts weigh most there;
    /// an RSA-2048 or P-384 key takes about 200 µs to parse, for each
    /// engine on the control thread, and its handshakes cost three to
    /// eight times a P-256 one.
    pub fn own_copy(&self) -> Self {
        let mut copy = Self::new();
        let mut keys = 0;
        for cert in &self.added {
            let new_key = cert.key_type == KeyType::EcdsaP256 && keys < OWN_KEYS_PER_STORE;
            keys += usize::from(new_key);
            copy.add(cert.own_copy(new_key));
        }
        copy.tls12_only = self.tls12_only;
        copy
    }

    /// Whether the VIP offers only TLS 1.2 (set from its policy).
    pub fn set_tls12_only(&mut self, only: bool) {
        self.tls12_only = only;
    }

    /// The certificates for `sni`: its exact name, else its one-label
    /// wildcard, else the default.
    fn candidates(&self, sni: Option<&str>) -> &[Cert] {
        let name = sni.map(|n| without_root_dot(n).to_ascii_lowercase());
        name.as_deref()
            .and_then(|n| {
                self.exact.get(n).or_else(|| {
                    n.split_once('.')
                        .and_then(|(_, parent)| self.wildcard.get(parent))
                })
            })
            .unwrap_or(&self.default)
    }

    /// The first certificate for `sni`, whatever its key.
    fn first_for(&self, sni: Option<&str>) -> Option<&Cert> {
        self.candidates(sni).first()
    }

    /// The certificate for a handshake: by name (exact, then one-label
    /// wildcard, then default), then the first one whose key can sign with
    /// one of the client's schemes (ECDSA is preferred when both can).
    /// `tls12_groups`: when the handshake will be TLS 1.2, the client's
    /// supported groups; an ECDSA certificate on a curve not among them is
    /// passed over (RFC 8422 §5.1) unless nothing else is left.
    pub fn select(
        &self,
        sni: Option<&str>,
        schemes: &[SignatureScheme],
        tls12_groups: Option<&[NamedGroup]>,
    ) -> Option<&Cert> {
        let candidates = self.candidates(sni);
        let pick = |alg, curve_ok: &dyn Fn(&Cert) -> bool| {
            candidates
                .iter()
                .find(|c| c.algorithm() == alg && c.signable(schemes) && curve_ok(c))
        };
        let client_has_curve = |c: &Cert| match (tls12_groups, c.key_type.curve()) {
            (Some(groups), Some(curve)) => groups.contains(&curve),
            _ => true,
        };
        pick(SignatureAlgorithm::ECDSA, &client_has_curve)
            .or_else(|| pick(SignatureAlgorithm::RSA, &|_| true))
            .or_else(|| pick(SignatureAlgorithm::ECDSA, &|_| true))
    }
}

thread_local! {
    /// The key type of the certificate this thread's last handshake chose.
    /// rustls resolves certificates inside the session's processing call,
    /// on the engine's own thread; the session reads this right after
    /// ([`take_last_selected`]) to count handshakes by key type.
    static LAST_SELECTED: std::cell::Cell<Option<Selected>> = const { std::cell::Cell::new(None) };
}

/// What [`CertStore`] chose for a handshake, and the name asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    pub key: KeyType,
    /// The client's SNI, when it sent one.
    pub sni: Option<Box<str>>,
}

/// What [`CertStore`] chose last on this thread, if anything since the
/// previous call.
pub fn take_last_selected() -> Option<Selected> {
    LAST_SELECTED.with(std::cell::Cell::take)
}

impl KeyType {
    /// The curve of an ECDSA key.
    pub fn curve(self) -> Option<NamedGroup> {
        match self {
            Self::Rsa { .. } => None,
            Self::EcdsaP256 => Some(NamedGroup::secp256r1),
            Self::EcdsaP384 => Some(NamedGroup::secp384r1),
        }
    }

    /// The name handshakes are counted under.
    pub fn counter_name(self) -> &'static str {
        match self {
            Self::Rsa { bits: 2048 } => "RSA-2048",
            Self::Rsa { bits: 3072 } => "RSA-3072",
            Self::Rsa { bits: 4096 } => "RSA-4096",
            Self::Rsa { .. } => "other",
            Self::EcdsaP256 => "ECDSA-P256",
            Self::EcdsaP384 => "ECDSA-P384",
        }
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // TLS 1.2 when the client offers no TLS 1.3 suite or the VIP
        // offers only 1.2 (TLS 1.3 suites are 0x13xx).
        let client_tls13 = hello
            .cipher_suites()
            .iter()
            .any(|s| u16::from(*s) >> 8 == 0x13);
        let tls12_groups = if self.tls12_only || !client_tls13 {
            hello.named_groups()
        } else {
            None
        };
        // No certificate suits the client's signature schemes: hand rustls
        // the name's first one anyway, so the handshake fails as RFC 8446
        // §4.4.2.2 / RFC 5246 §7.4.2 name it (handshake_failure, no scheme
        // in common) rather than with access_denied, which scanners read
        // as a policy refusal.
        let cert = self
            .select(hello.server_name(), hello.signature_schemes(), tls12_groups)
            .or_else(|| self.first_for(hello.server_name()))?;
        // As the name is matched, so it is kept (routes, the log).
        let sni = hello.server_name().map(|n| Box::from(without_root_dot(n)));
        LAST_SELECTED.with(|c| {
            c.set(Some(Selected {
                key: cert.key_type,
                sni,
            }))
        });
        Some(cert.certified.clone())
    }
}

/// `name` without the root's dot: RFC 6066 §3 sends a host name without
/// it, but some clients send `www.example.com.`, which names the same host
/// (rustls takes it as given).
fn without_root_dot(name: &str) -> &str {
    name.strip_suffix('.').unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{make, now, P256, P384, RSA};

    const NOW: i64 = 1_700_000_000 + 10 * 365 * 86_400; // well inside the test certificates' life

    #[test]
    fn loads_rsa_and_ecdsa() {
        let dir = tempfile::tempdir().unwrap();
        for (args, want) in [
            (RSA, KeyType::Rsa { bits: 2048 }),
            (P256, KeyType::EcdsaP256),
            (P384, KeyType::EcdsaP384),
        ] {
            let (c, k) = make(dir.path(), "a", args, "DNS:a.test,DNS:*.b.test");
            let cert = Cert::load(&c, &k, now()).unwrap();
            assert_eq!(cert.key_type, want);
            assert_eq!(cert.names, ["a.test", "*.b.test"]);
            assert_eq!(cert.chain_len, 2, "leaf and CA");
        }
    }

    /// A store's identity (what its VIP's tickets are scoped to) follows
    /// the certificates it serves, not the order they were added in.
    #[test]
    fn a_stores_identity_is_its_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let (c1, k1) = make(dir.path(), "one", P256, "DNS:one.test");
        let (c2, k2) = make(dir.path(), "two", P256, "DNS:two.test");
        let load = |c: &Path, k: &Path| Cert::load(c, k, now()).unwrap();
        let store = |certs: &[(&Path, &Path)]| {
            let mut s = CertStore::new();
            for (c, k) in certs {
                s.add(load(c, k));
            }
            s.identity()
        };
        let both = store(&[(&c1, &k1), (&c2, &k2)]);
        assert_eq!(both, store(&[(&c2, &k2), (&c1, &k1)]));
        assert_ne!(both, store(&[(&c1, &k1)]));
        assert_ne!(store(&[(&c1, &k1)]), store(&[(&c2, &k2)]));
        assert_eq!(store(&[(&c1, &k1)]), store(&[(&c1, &k1)]), "read again");
    }

    #[test]
    fn the_same_files_read_twice_are_the_same_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = make(dir.path(), "a", P256, "DNS:a.test");
        let first = Cert::load(&c, &k, now()).unwrap();
        assert!(first.same_as(&Cert::load(&c, &k, now()).unwrap()));
        assert!(first.same_as(&first.own_copy(true)));
        // Renewed in place: a new key and certificate under the same names.
        let (c, k) = make(dir.path(), "a", P256, "DNS:a.test");
        assert!(!first.same_as(&Cert::load(&c, &k, now()).unwrap()));
    }

    #[test]
    fn refusals_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (c1, k1) = make(dir.path(), "one", P256, "DNS:one.test");
        let (_c2, k2) = make(dir.path(), "two", P256, "DNS:two.test");
        let e = Cert::load(&c1, &k2, now()).unwrap_err();
        assert!(matches!(e.kind, CertErrorKind::KeyMismatch), "{e}");
        assert_eq!(e.file, k2);
        assert!(e.to_string().contains("two.key"), "{e}");

        let e = Cert::load(&c1, &k1, NOW * 10).unwrap_err();
        assert!(matches!(e.kind, CertErrorKind::Expired { .. }), "{e}");
        assert!(
            e.to_string().contains("one.pem") && e.to_string().contains("expired"),
            "{e}"
        );
        let e = Cert::load(&c1, &k1, 0).unwrap_err();
        assert!(matches!(e.kind, CertErrorKind::NotYetValid { .. }), "{e}");

        let garbage = dir.path().join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = Cert::load(&garbage, &k1, now()).unwrap_err();
        assert!(matches!(e.kind, CertErrorKind::Malformed(_)), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "nothing here\n").unwrap();
        assert!(matches!(
            Cert::load(&empty, &k1, now()).unwrap_err().kind,
            CertErrorKind::NoCertificate
        ));
        assert!(matches!(
            Cert::load(&c1, &empty, now()).unwrap_err().kind,
            CertErrorKind::NoKey
        ));
        let e = Cert::load(&dir.path().join("missing.pem"), &k1, now()).unwrap_err();
        assert!(
            matches!(e.kind, CertErrorKind::Read(_)) && e.to_string().contains("missing.pem"),
            "{e}"
        );

        let (c, k) = make(
            dir.path(),
            "weak",
            &["-newkey", "rsa:1024"],
            "DNS:weak.test",
        );
        let e = Cert::load(&c, &k, now()).unwrap_err();
        assert!(
            matches!(e.kind, CertErrorKind::Unsupported(_)) && e.to_string().contains("RSA-1024"),
            "{e}"
        );
    }

    #[test]
    fn selection_by_sni_and_signature_schemes() {
        let dir = tempfile::tempdir().unwrap();
        let load = |name: &str, args, sans: &str| {
            let (c, k) = make(dir.path(), name, args, sans);
            Cert::load(&c, &k, now()).unwrap()
        };
        let mut store = CertStore::new();
        store.add(load("default-rsa", RSA, "DNS:default.test"));
        store.add(load("www-rsa", RSA, "DNS:www.example.test"));
        store.add(load("www-ec", P256, "DNS:www.example.test"));
        store.add(load("wild", P384, "DNS:*.example.test"));

        let all = [
            SignatureScheme::ECDSA_NISTP256_SHA256,
            SignatureScheme::ECDSA_NISTP384_SHA384,
            SignatureScheme::RSA_PSS_SHA256,
        ];
        let rsa_only = [
            SignatureScheme::RSA_PSS_SHA256,
            SignatureScheme::RSA_PKCS1_SHA256,
        ];
        let pick = |sni, schemes: &[SignatureScheme]| {
            store.select(sni, schemes, None).map(|c| c.names.clone())
        };

        // Exact name; ECDSA preferred, RSA for RSA-only clients.
        let c = store.select(Some("WWW.Example.Test"), &all, None).unwrap();
        assert_eq!(c.key_type, KeyType::EcdsaP256);
        // A name with the root's dot is the same host's (before, it got the
        // default certificate).
        let c = store.select(Some("www.example.test."), &all, None).unwrap();
        assert_eq!(c.key_type, KeyType::EcdsaP256);
        let c = store.select(Some("api.example.test."), &all, None).unwrap();
        assert_eq!(c.key_type, KeyType::EcdsaP384, "the wildcard's");
        assert_eq!(
            store
                .select(Some("www.example.test"), &rsa_only, None)
                .unwrap()
                .key_type,
            KeyType::Rsa { bits: 2048 }
        );
        // TLS 1.2 without P-256 among the client's groups: RSA (RFC 8422
        // §5.1); with it, ECDSA; with no RSA left, the ECDSA one anyway.
        let x25519 = [rustls::NamedGroup::X25519];
        let tls12 = |sni, groups: &[rustls::NamedGroup]| {
            store
                .select(Some(sni), &all, Some(groups))
                .unwrap()
                .key_type
        };
        assert_eq!(
            tls12("www.example.test", &x25519),
            KeyType::Rsa { bits: 2048 }
        );
        assert_eq!(
            tls12(
                "www.example.test",
                &[rustls::NamedGroup::X25519, rustls::NamedGroup::secp256r1]
            ),
            KeyType::EcdsaP256
        );
        assert_eq!(tls12("api.example.test", &x25519), KeyType::EcdsaP384);
        // One-label wildcard only.
        assert_eq!(
            pick(Some("api.example.test"), &all),
            Some(vec!["*.example.test".to_string()])
        );
        assert_eq!(
            pick(Some("a.b.example.test"), &all),
            Some(vec!["default.test".to_string()]),
            "two labels: default"
        );
        // The wildcard is P-384 only: an RSA-only client gets nothing there.
        assert_eq!(pick(Some("api.example.test"), &rsa_only), None);
        // No SNI or an unknown name: the default.
        assert_eq!(pick(None, &all), Some(vec!["default.test".to_string()]));
        assert_eq!(
            pick(Some("unknown.test"), &rsa_only),
            Some(vec!["default.test".to_string()])
        );
    }

    /// A real rustls handshake (buffered API, in memory) with the store as
    /// the server's certificate resolver: the client, trusting only the
    /// expected certificate, must get it for each SNI.
    #[test]
    fn rustls_handshakes_get_the_selected_certificate() {
        use rustls::{
            ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection,
        };

        let dir = tempfile::tempdir().unwrap();
        let (c_rsa, k_rsa) = make(dir.path(), "rsa", RSA, "DNS:rsa.test");
        let (c_ec, k_ec) = make(dir.path(), "ec", P256, "DNS:ec.test");
        let mut store = CertStore::new();
        store.add(Cert::load(&c_rsa, &k_rsa, now()).unwrap());
        store.add(Cert::load(&c_ec, &k_ec, now()).unwrap());
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let server = Arc::new(
            ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_cert_resolver(Arc::new(store)),
        );
        let ca_der =
            rustls_pemfile::certs(&mut &std::fs::read(dir.path().join("ca.pem")).unwrap()[..])
                .next()
                .unwrap()
                .unwrap();
        for (sni, pem) in [("rsa.test", &c_rsa), ("ec.test", &c_ec)] {
            let der = rustls_pemfile::certs(&mut &std::fs::read(pem).unwrap()[..])
                .next()
                .unwrap()
                .unwrap();
            let mut roots = RootCertStore::empty();
            roots.add(ca_der.clone()).unwrap();
            let client = Arc::new(
                ClientConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()
                    .unwrap()
                    .with_root_certificates(roots)
                    .with_no_client_auth(),
            );
            let mut c = ClientConnection::new(client, sni.to_string().try_into().unwrap()).unwrap();
            let mut s = ServerConnection::new(server.clone()).unwrap();
            for _ in 0..10 {
                let mut buf = Vec::new();
                c.write_tls(&mut buf).unwrap();
                s.read_tls(&mut &buf[..]).unwrap();
                s.process_new_packets().unwrap();
                let mut buf = Vec::new();
                s.write_tls(&mut buf).unwrap();
                c.read_tls(&mut &buf[..]).unwrap();
                c.process_new_packets()
                    .unwrap_or_else(|e| panic!("{sni}: {e}"));
            }
            assert!(!c.is_handshaking() && !s.is_handshaking(), "{sni}");
            assert_eq!(c.peer_certificates().unwrap()[0], der, "{sni}");
            assert_eq!(
                c.peer_certificates().unwrap().len(),
                2,
                "the chain is sent whole"
            );
        }
    }
}
