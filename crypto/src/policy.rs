//! A VIP's TLS policy (versions, cipher suites, key-exchange groups in
//! preference order, ALPN, session resumption) and the rustls server
//! configuration built from it.

use std::fmt;
use std::sync::Arc;

use rustls::crypto::aws_lc_rs::kx_group;
use rustls::crypto::SupportedKxGroup;
use rustls::server::NoServerSessionStorage;
use rustls::{ServerConfig, SupportedCipherSuite};

use crate::certs::CertStore;
use crate::kdf;
use crate::tickets::TicketKeys;
use crate::tls12_prf;

/// TLS versions a VIP may offer (older ones are refused by design).
pub const VERSION_NAMES: [&str; 2] = ["TLSv1.3", "TLSv1.2"];

/// Cipher suites a VIP may offer, in the default order (AEAD only; TLS
/// 1.3's on the prepared-key HKDF, [`crate::kdf`]; TLS 1.2's deriving
/// the key block once, [`crate::tls12_prf`]).
const ALL_SUITES: [SupportedCipherSuite; 9] = [
    kdf::TLS13_AES_128_GCM_SHA256,
    kdf::TLS13_AES_256_GCM_SHA384,
    kdf::TLS13_CHACHA20_POLY1305_SHA256,
    tls12_prf::ECDHE_ECDSA_AES_128_GCM_SHA256,
    tls12_prf::ECDHE_ECDSA_AES_256_GCM_SHA384,
    tls12_prf::ECDHE_ECDSA_CHACHA20_POLY1305_SHA256,
    tls12_prf::ECDHE_RSA_AES_128_GCM_SHA256,
    tls12_prf::ECDHE_RSA_AES_256_GCM_SHA384,
    tls12_prf::ECDHE_RSA_CHACHA20_POLY1305_SHA256,
];

/// Key-exchange groups a VIP may offer, in the default preference order.
const ALL_GROUPS: [&dyn SupportedKxGroup; 4] = [
    kx_group::X25519MLKEM768,
    kx_group::X25519,
    kx_group::SECP256R1,
    kx_group::SECP384R1,
];

/// Session resumption.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Resumption {
    /// Every handshake is a full one.
    #[default]
    Off,
    /// Stateless tickets; keys rotate every `rotate_s` seconds, derived
    /// from `key_file` (shared by nodes) or from a random secret.
    Tickets {
        rotate_s: u64,
        key_file: Option<std::path::PathBuf>,
    },
}

/// A VIP's TLS policy, by names as operators write them. Empty lists mean
/// the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPolicy {
    /// `"TLSv1.3"`, `"TLSv1.2"`.
    pub versions: Vec<String>,
    /// IANA names as in [`crate::session::SUITES`].
    pub suites: Vec<String>,
    /// Groups enabled, of `"X25519MLKEM768"`, `"X25519"`, `"secp256r1"`,
    /// `"secp384r1"` (also `"P-256"`, `"P-384"`). rustls 0.23 picks the
    /// first group in the client's list that is enabled here: the order
    /// given is kept but is not a server preference.
    pub groups: Vec<String>,
    /// ALPN protocols, in preference order.
    pub alpn: Vec<String>,
    pub resumption: Resumption,
    /// Choose cipher suites in the client's order instead of ours (off by
    /// default, as in HAProxy: our order puts AES-128-GCM first, whose
    /// SHA-256 schedule and cipher are the cheapest on AES-NI/SHA-NI
    /// cores, while OpenSSL clients list AES-256-GCM-SHA384 first).
    pub prefer_client_order: bool,
}

impl Default for TlsPolicy {
    fn default() -> Self {
        Self {
            versions: Vec::new(),
            suites: Vec::new(),
            groups: Vec::new(),
            alpn: vec!["http/1.1".into()],
            resumption: Resumption::Off,
            prefer_client_order: false,
        }
    }
}

/// A policy that cannot be built, with the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError(pub String);

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PolicyError {}

fn group_name(g: &dyn SupportedKxGroup) -> &'static str {
    g.name().as_str().unwrap_or("?")
}

/// Picks `wanted` from `all` by name, in `wanted`'s order; no duplicates.
fn pick<T: Copy>(
    what: &str,
    wanted: &[String],
    all: &[T],
    name_of: impl Fn(T) -> &'static str,
    alias: impl Fn(&str) -> &str,
) -> Result<Vec<T>, PolicyError> {
    if wanted.is_empty() {
        return Ok(all.to_vec());
    }
    let mut out: Vec<T> = Vec::new();
    for w in wanted {
        let w = alias(w);
        let Some(&item) = all.iter().find(|&&x| name_of(x) == w) else {
            let known: Vec<&str> = all.iter().map(|&x| name_of(x)).collect();
            return Err(PolicyError(format!(
                "unknown or refused {what} {w:?} (supported: {})",
                known.join(", ")
            )));
        };
        if out.iter().any(|&x| name_of(x) == w) {
            return Err(PolicyError(format!("{what} {w:?} listed twice")));
        }
        out.push(item);
    }
    Ok(out)
}

/// A VIP's TLS configuration: certificates and policy, as rustls runs it.
/// Cheap to clone (shared); [`TlsConfig::own_copy`] makes one that shares
/// nothing a handshake writes to, for each engine.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    rustls: Arc<ServerConfig>,
    /// Its certificates (rustls' resolver), kept to copy.
    store: Arc<CertStore>,
}

impl TlsConfig {
    /// The default policy: TLS 1.3 and 1.2, all AEAD suites, groups
    /// X25519MLKEM768 > X25519 > P-256 > P-384, ALPN http/1.1, no
    /// resumption.
    ///
    /// # Errors
    /// When rustls refuses the settings.
    pub fn new(store: CertStore) -> Result<Self, PolicyError> {
        Self::with_policy(store, &TlsPolicy::default())
    }

    /// A configuration for `policy`.
    ///
    /// # Errors
    /// An unknown, refused or duplicate name; a policy whose versions and
    /// suites have nothing in common; a bad ticket key file.
    pub fn with_policy(mut store: CertStore, policy: &TlsPolicy) -> Result<Self, PolicyError> {
        let versions = pick(
            "TLS version",
            &policy.versions,
            &[&rustls::version::TLS13, &rustls::version::TLS12],
            |v: &'static rustls::SupportedProtocolVersion| match v.version {
                rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
                _ => "TLSv1.2",
            },
            |n| match n {
                "TLS1.3" | "TLSv1_3" | "1.3" => "TLSv1.3",
                "TLS1.2" | "TLSv1_2" | "1.2" => "TLSv1.2",
                n => n,
            },
        )?;
        let suites = pick(
            "cipher suite",
            &policy.suites,
            &ALL_SUITES,
            |s| s.suite().as_str().unwrap_or("?"),
            |n| n,
        )?;
        let groups = pick(
            "group",
            &policy.groups,
            &ALL_GROUPS,
            group_name,
            |n| match n {
                "P-256" | "prime256v1" => "secp256r1",
                "P-384" => "secp384r1",
                n => n,
            },
        )?;
        let suites: Vec<SupportedCipherSuite> = suites
            .into_iter()
            .filter(|s| versions.contains(&s.version()))
            .collect();
        for v in &versions {
            if !suites.iter().any(|s| s.version() == *v) {
                return Err(PolicyError(format!(
                    "no cipher suite listed for {:?}",
                    v.version
                )));
            }
        }
        if policy.alpn.iter().any(|p| p.is_empty() || p.len() > 255) {
            return Err(PolicyError(
                "ALPN protocol names must be 1 to 255 bytes".into(),
            ));
        }
        store.set_tls12_only(!versions.contains(&&rustls::version::TLS13));
        let provider = rustls::crypto::CryptoProvider {
            cipher_suites: suites,
            kx_groups: groups,
            secure_random: &crate::random::PUBLIC_RANDOM,
            ..kdf::provider()
        };
        let store = Arc::new(store);
        let mut cfg = ServerConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&versions)
            .map_err(|e| PolicyError(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(store.clone());
        // The record layer runs on AWS-LC after the handshake.
        cfg.enable_secret_extraction = true;
        cfg.session_storage = Arc::new(NoServerSessionStorage {});
        cfg.alpn_protocols = policy.alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
        cfg.ignore_client_order = !policy.prefer_client_order;
        match &policy.resumption {
            Resumption::Off => cfg.send_tls13_tickets = 0,
            Resumption::Tickets { rotate_s, key_file } => {
                let keys = match key_file {
                    Some(f) => TicketKeys::from_file(f, *rotate_s, &store.identity()),
                    None => TicketKeys::random(*rotate_s),
                }
                .map_err(|e| PolicyError(e.to_string()))?;
                cfg.ticketer = Arc::new(keys);
                cfg.send_tls13_tickets = 1;
            }
        }
        Ok(Self {
            rustls: Arc::new(cfg),
            store,
        })
    }

    /// An equal configuration for one engine: its own rustls
    /// `ServerConfig` and certificates ([`CertStore::own_copy`]: P-256
    /// keys parsed again, others shared). A handshake takes references to
    /// the configuration, to the certificate it serves and to that
    /// certificate's key; with one shared by all engines, each of those
    /// reference counts is a cache line every core writes, and the
    /// configuration's fields beside it are read through that contention.
    /// Ticket keys and the crypto provider stay shared: handshakes only
    /// read them.
    pub fn own_copy(&self) -> Self {
        let store = Arc::new(self.store.own_copy());
        let mut cfg = ServerConfig::clone(&self.rustls);
        cfg.cert_resolver = store.clone();
        Self {
            rustls: Arc::new(cfg),
            store,
        }
    }

    pub(crate) fn rustls(&self) -> &Arc<ServerConfig> {
        &self.rustls
    }

    /// Whether this is `other` (the same copy, not one built again from
    /// the same inputs, whose ticket keys may differ).
    pub fn is(&self, other: &TlsConfig) -> bool {
        Arc::ptr_eq(&self.rustls, &other.rustls)
    }

    /// Whether a handshake on this configuration writes a reference count
    /// that one on `other` writes too (they are one configuration, or
    /// share a certificate or key): false between [`TlsConfig::own_copy`]s
    /// of a configuration whose keys are all P-256.
    pub fn shares_with(&self, other: &TlsConfig) -> bool {
        let theirs = other.counted_parts();
        self.counted_parts()
            .iter()
            .any(|(at, _)| theirs.iter().any(|(t, _)| t == at))
    }

    /// Address and strong count of each reference-counted part a
    /// handshake takes a reference to: the configuration, then each
    /// certificate's [`crate::certs::Cert::counted_parts`].
    pub(crate) fn counted_parts(&self) -> Vec<(usize, usize)> {
        let mut parts = vec![(
            Arc::as_ptr(&self.rustls) as usize,
            Arc::strong_count(&self.rustls),
        )];
        for c in self.store.certs() {
            parts.extend(c.counted_parts());
        }
        parts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(f: impl FnOnce(&mut TlsPolicy)) -> Result<TlsConfig, PolicyError> {
        let mut p = TlsPolicy::default();
        f(&mut p);
        TlsConfig::with_policy(CertStore::new(), &p)
    }

    #[test]
    fn names_are_checked_with_clear_errors() {
        assert!(policy(|_| {}).is_ok());
        let e = policy(|p| p.versions = vec!["TLSv1.1".into()]).unwrap_err();
        assert!(
            e.0.contains("TLSv1.1") && e.0.contains("supported: TLSv1.3, TLSv1.2"),
            "{e}"
        );
        let e = policy(|p| p.suites = vec!["TLS_RSA_WITH_RC4_128_SHA".into()]).unwrap_err();
        assert!(e.0.contains("RC4"), "{e}");
        let e = policy(|p| p.groups = vec!["X25519".into(), "X25519".into()]).unwrap_err();
        assert!(e.0.contains("twice"), "{e}");
        let e = policy(|p| {
            p.versions = vec!["TLSv1.2".into()];
            p.suites = vec!["TLS13_AES_128_GCM_SHA256".into()];
        })
        .unwrap_err();
        assert!(e.0.contains("no cipher suite"), "{e}");
        assert!(policy(|p| p.alpn = vec![String::new()]).is_err());
        let e = policy(|p| {
            p.resumption = Resumption::Tickets {
                rotate_s: 600,
                key_file: Some("/nonexistent/t.key".into()),
            }
        })
        .unwrap_err();
        assert!(e.0.contains("/nonexistent/t.key"), "{e}");
        // Aliases operators use.
        let c = policy(|p| p.groups = vec!["P-384".into(), "X25519".into()]).unwrap();
        let names: Vec<_> = c
            .rustls
            .crypto_provider()
            .kx_groups
            .iter()
            .map(|g| group_name(*g))
            .collect();
        assert_eq!(names, ["secp384r1", "X25519"]);
    }
}
