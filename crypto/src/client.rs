//! A TLS client session for load generation and tests (the in-memory
//! benchmarks' generator): rustls' buffered client behind a small sans-IO
//! surface, so no other crate names rustls types. It skips certificate
//! and signature verification (load generators measure the server, not
//! the client's PKI checks): never use it to talk to anything real.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme};

use crate::session::TlsError;

#[derive(Debug)]
pub(crate) struct NoVerification(pub(crate) Vec<SignatureScheme>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.clone()
    }
}

/// A verifier that accepts any certificate and signature offering every
/// scheme the provider has (fuzzing and tests).
pub(crate) fn accept_anything() -> Arc<dyn ServerCertVerifier> {
    Arc::new(NoVerification(
        rustls::crypto::aws_lc_rs::default_provider()
            .signature_verification_algorithms
            .supported_schemes(),
    ))
}

/// Client settings for load generation. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LoadClientConfig(Arc<ClientConfig>);

impl LoadClientConfig {
    /// TLS 1.3 only when `tls13_only`, else 1.2 only; `ecdsa` offers only
    /// ECDSA signature schemes (so the server picks its ECDSA
    /// certificate), else only RSA ones. No resumption, no verification.
    pub fn new(tls13: bool, ecdsa: bool) -> Self {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let version: &[&'static rustls::SupportedProtocolVersion] = if tls13 {
            &[&rustls::version::TLS13]
        } else {
            &[&rustls::version::TLS12]
        };
        let schemes = if ecdsa {
            vec![
                SignatureScheme::ECDSA_NISTP256_SHA256,
                SignatureScheme::ECDSA_NISTP384_SHA384,
            ]
        } else {
            vec![
                SignatureScheme::RSA_PSS_SHA256,
                SignatureScheme::RSA_PKCS1_SHA256,
            ]
        };
        let mut cfg = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(version)
            .expect("TLS 1.2 and 1.3 are supported")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(schemes)))
            .with_no_client_auth();
        cfg.resumption = rustls::client::Resumption::disabled();
        Self(Arc::new(cfg))
    }

    /// Client settings made elsewhere (dpbench's: its version, groups,
    /// verification and resumption choices).
    pub fn from_rustls(cfg: Arc<ClientConfig>) -> Self {
        Self(cfg)
    }
}

/// One client connection.
#[derive(Debug)]
pub struct LoadClientSession(ClientConnection);

impl LoadClientSession {
    /// # Errors
    /// A name rustls refuses.
    pub fn new(cfg: &LoadClientConfig, sni: &str) -> Result<Self, TlsError> {
        let name = ServerName::try_from(sni.to_string())
            .map_err(|e| TlsError::other(format!("server name {sni:?}: {e}")))?;
        ClientConnection::new(cfg.0.clone(), name)
            .map(Self)
            .map_err(|e| TlsError::other(e.to_string()))
    }

    pub fn is_handshaking(&self) -> bool {
        self.0.is_handshaking()
    }

    /// Takes received TLS bytes; returns how many it took (it may stop
    /// early when its buffer is full: process, then offer the rest).
    ///
    /// # Errors
    /// A TLS failure.
    pub fn receive(&mut self, mut data: &[u8]) -> Result<usize, TlsError> {
        let n = self
            .0
            .read_tls(&mut data)
            .map_err(|e| TlsError::other(e.to_string()))?;
        self.0
            .process_new_packets()
            .map_err(|e| TlsError::other(e.to_string()))?;
        Ok(n)
    }

    /// Decrypted bytes into `buf`; 0 when none are waiting.
    pub fn read_plain(&mut self, buf: &mut [u8]) -> usize {
        use std::io::Read;
        self.0.reader().read(buf).unwrap_or(0)
    }

    /// Queues application data (sent once the handshake completes).
    pub fn write_plain(&mut self, data: &[u8]) {
        use std::io::Write;
        let _ = self.0.writer().write_all(data);
    }

    /// The server's close_notify came (no more application data follows).
    pub fn peer_closed(&mut self) -> bool {
        self.0
            .process_new_packets()
            .is_ok_and(|state| state.peer_has_closed())
    }

    /// Queues a close_notify alert (sent with the next [`Self::take_tls`]).
    pub fn close_notify(&mut self) {
        self.0.send_close_notify();
    }

    /// TLS bytes to send, appended to `out`.
    pub fn take_tls(&mut self, out: &mut Vec<u8>) {
        while self.0.wants_write() {
            if self.0.write_tls(out).unwrap_or(0) == 0 {
                break;
            }
        }
    }
}
