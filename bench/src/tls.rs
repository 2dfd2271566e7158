//! The TLS client side of the load generator: rustls 0.23 on aws-lc-rs.
//!
//! Session reuse is off unless asked for. Certificate checking is on unless
//! the caller takes [`danger::NoVerify`], which exists only so that the load
//! generator spends as little CPU per handshake as possible.

use std::sync::Arc;

use rustls::client::Resumption;
use rustls::crypto::aws_lc_rs as provider;
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore, SupportedCipherSuite};

/// TLS protocol version offered.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
pub enum TlsVersion {
    #[value(name = "1.2")]
    #[serde(rename = "1.2")]
    Tls12,
    #[value(name = "1.3")]
    #[serde(rename = "1.3")]
    Tls13,
}

/// Key exchange group offered (only one, so the handshake cost is known).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
pub enum Group {
    #[value(name = "x25519")]
    X25519,
    #[value(name = "p256")]
    P256,
    #[value(name = "p384")]
    P384,
    #[value(name = "x25519mlkem768")]
    X25519MlKem768,
}

/// Error building the client configuration.
#[derive(Debug)]
pub enum TlsSetupError {
    /// The CA file could not be read or held no certificate.
    CaFile(String),
    /// rustls refused the combination (e.g. TLS 1.2 with X25519MLKEM768).
    Config(String),
}

impl std::fmt::Display for TlsSetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CaFile(m) => write!(f, "CA file: {m}"),
            Self::Config(m) => write!(f, "TLS configuration: {m}"),
        }
    }
}
impl std::error::Error for TlsSetupError {}

/// What the client offers.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TlsOptions {
    pub version: TlsVersion,
    pub group: Group,
    /// Groups offered after `group`. TLS 1.2 uses the supported-groups list
    /// also for the curve of an ECDSA certificate, so an ECDSA P-256 server
    /// refuses a TLS 1.2 client that offers only X25519: the run adds the
    /// certificate's curve here (and reports the group actually negotiated).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_groups: Vec<Group>,
    /// Offer session resumption (tickets and IDs). Off for CPS.
    pub reuse: bool,
    /// Skip certificate-chain and signature verification (load generation only).
    pub dangerous_no_verify: bool,
    /// CA certificate (PEM) used when verifying.
    pub ca_file: Option<String>,
    /// Server name sent in SNI and checked against the certificate.
    pub server_name: String,
}

fn suites(version: TlsVersion) -> Vec<SupportedCipherSuite> {
    // AES-128-GCM only, as in BENCH.md; CBC and RSA key exchange are not offered.
    match version {
        TlsVersion::Tls13 => vec![provider::cipher_suite::TLS13_AES_128_GCM_SHA256],
        TlsVersion::Tls12 => vec![
            provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            provider::cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        ],
    }
}

fn group(g: Group) -> &'static dyn rustls::crypto::SupportedKxGroup {
    match g {
        Group::X25519 => provider::kx_group::X25519,
        Group::P256 => provider::kx_group::SECP256R1,
        Group::P384 => provider::kx_group::SECP384R1,
        Group::X25519MlKem768 => provider::kx_group::X25519MLKEM768,
    }
}

/// Builds the shared client configuration (one per run, shared by all
/// connections of all workers, so that with `reuse` sessions are reused).
///
/// # Errors
/// [`TlsSetupError`] when the CA file is unusable or rustls refuses the options.
pub fn client_config(o: &TlsOptions) -> Result<Arc<ClientConfig>, TlsSetupError> {
    let provider = Arc::new(CryptoProvider {
        cipher_suites: suites(o.version),
        kx_groups: std::iter::once(o.group)
            .chain(o.extra_groups.iter().copied().filter(|&g| g != o.group))
            .map(group)
            .collect(),
        ..provider::default_provider()
    });
    let versions: &[&rustls::SupportedProtocolVersion] = match o.version {
        TlsVersion::Tls12 => &[&rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| TlsSetupError::Config(e.to_string()))?;
    let mut cfg = if o.dangerous_no_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(danger::NoVerify(provider)))
            .with_no_client_auth()
    } else {
        let path = o.ca_file.as_deref().ok_or_else(|| {
            TlsSetupError::CaFile("verification needs --ca (or --dangerous-no-verify)".into())
        })?;
        let pem = std::fs::read(path).map_err(|e| TlsSetupError::CaFile(format!("{path}: {e}")))?;
        let mut roots = RootCertStore::empty();
        for c in rustls_pemfile::certs(&mut pem.as_slice()) {
            let c = c.map_err(|e| TlsSetupError::CaFile(format!("{path}: {e}")))?;
            roots
                .add(c)
                .map_err(|e| TlsSetupError::CaFile(format!("{path}: {e}")))?;
        }
        if roots.is_empty() {
            return Err(TlsSetupError::CaFile(format!("{path}: no certificate")));
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    cfg.resumption = if o.reuse {
        Resumption::in_memory_sessions(4096)
    } else {
        Resumption::disabled()
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Dangerous: a certificate verifier that accepts everything.
pub mod danger {
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, Error, SignatureScheme};

    /// Accepts any certificate chain and any handshake signature without
    /// checking either. For load generation only: the client then spends on a
    /// handshake only its key exchange, so the device under test saturates
    /// first. Never use it to talk to anything you need to trust.
    #[derive(Debug)]
    pub struct NoVerify(pub Arc<CryptoProvider>);

    impl ServerCertVerifier for NoVerify {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, Error> {
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _message: &[u8],
            _cert: &CertificateDer<'_>,
            _dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _message: &[u8],
            _cert: &CertificateDer<'_>,
            _dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(version: TlsVersion, group: Group) -> TlsOptions {
        TlsOptions {
            version,
            group,
            extra_groups: Vec::new(),
            reuse: false,
            dangerous_no_verify: true,
            ca_file: None,
            server_name: "bench.test".into(),
        }
    }

    #[test]
    fn builds_for_every_offered_combination() {
        for v in [TlsVersion::Tls12, TlsVersion::Tls13] {
            for g in [Group::X25519, Group::P256, Group::P384] {
                client_config(&opts(v, g)).unwrap();
            }
        }
        client_config(&opts(TlsVersion::Tls13, Group::X25519MlKem768)).unwrap();
    }

    #[test]
    fn verify_needs_ca() {
        let mut o = opts(TlsVersion::Tls13, Group::X25519);
        o.dangerous_no_verify = false;
        assert!(matches!(client_config(&o), Err(TlsSetupError::CaFile(_))));
    }

    #[test]
    fn tls12_offers_gcm_only() {
        assert!(suites(TlsVersion::Tls12)
            .iter()
            .all(|s| format!("{:?}", s.suite()).contains("AES_128_GCM")));
    }
}
