//! A server-side TLS session, sans-IO, on rustls' unbuffered API: the caller
//! owns every buffer. Fed the TLS bytes TCP received, it returns how many it
//! consumed, appends the TLS bytes to send and the application data it
//! decrypted; it encrypts application data on request.
//!
//! This first version runs both the handshake and the record layer in
//! rustls. Moving the record layer onto AWS-LC directly (after
//! `dangerous_into_kernel_connection`) is the next step (DESIGN.md).

use std::fmt;
use std::sync::Arc;

use rustls::server::{NoServerSessionStorage, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use rustls::ServerConfig;

/// A VIP's TLS configuration: its certificates and protocol settings. Cheap
/// to clone (shared).
#[derive(Debug, Clone)]
pub struct TlsConfig(Arc<ServerConfig>);

impl TlsConfig {
    /// TLS 1.2 and 1.3 with aws-lc-rs's default (AEAD-only) suites and
    /// groups, certificates from `store`, no session resumption (no cache,
    /// no tickets): each handshake is a full one.
    ///
    /// # Errors
    /// When rustls refuses the protocol settings.
    pub fn new(store: crate::certs::CertStore) -> Result<Self, TlsError> {
        let mut cfg = ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(store));
        cfg.session_storage = Arc::new(NoServerSessionStorage {});
        cfg.send_tls13_tickets = 0;
        Ok(Self(Arc::new(cfg)))
    }
}

/// TLS versions counted, by [`Negotiated::version`].
pub const VERSIONS: [&str; 2] = ["TLSv1.2", "TLSv1.3"];
/// Cipher suites counted, by [`Negotiated::suite`] (the last: anything else).
pub const SUITES: [&str; 10] = [
    "TLS13_AES_128_GCM_SHA256",
    "TLS13_AES_256_GCM_SHA384",
    "TLS13_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "other",
];
/// Key-exchange groups counted, by [`Negotiated::group`].
pub const GROUPS: [&str; 5] = [
    "X25519MLKEM768",
    "X25519",
    "secp256r1",
    "secp384r1",
    "other",
];

fn index_of(list: &[&str], name: &str) -> usize {
    list.iter()
        .position(|n| *n == name)
        .unwrap_or(list.len() - 1)
}

/// What a completed handshake negotiated, as indices into [`VERSIONS`],
/// [`SUITES`] and [`GROUPS`] (counters stay fixed arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    pub version: usize,
    pub suite: usize,
    pub group: usize,
}

/// A TLS failure: the connection must be closed (any alert to send is
/// already in the outgoing bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct TlsError(pub rustls::Error);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TLS: {}", self.0)
    }
}

impl std::error::Error for TlsError {}

/// What one [`ServerSession::process`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// The handshake completed during this call.
    pub handshake_done: bool,
    /// The peer sent close_notify.
    pub peer_closed: bool,
}

/// One server-side TLS connection.
pub struct ServerSession {
    conn: UnbufferedServerConnection,
    /// Received TLS bytes not yet discarded by rustls. The unbuffered API
    /// requires every call to see them again (it may have processed part of
    /// a handshake message spanning records), so the session keeps them.
    incoming: Vec<u8>,
    /// A fatal error happened: the session takes no more input or output.
    failed: bool,
    handshaking: bool,
    peer_closed: bool,
}

impl fmt::Debug for ServerSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerSession")
            .field("handshaking", &self.handshaking)
            .field("peer_closed", &self.peer_closed)
            .finish_non_exhaustive()
    }
}

fn encode_room(err: &EncodeError) -> Option<usize> {
    match err {
        EncodeError::InsufficientSize(s) => Some(s.required_size),
        _ => None,
    }
}

/// Appends what `write` produces to `out`, growing it as asked.
fn append<E>(
    out: &mut Vec<u8>,
    mut write: impl FnMut(&mut [u8]) -> Result<usize, E>,
    required: impl Fn(&E) -> Option<usize>,
) -> Result<(), E> {
    let start = out.len();
    let mut room = 2048;
    loop {
        out.resize(start + room, 0);
        match write(&mut out[start..]) {
            Ok(n) => {
                out.truncate(start + n);
                return Ok(());
            }
            Err(e) => match required(&e) {
                Some(size) if size > room => room = size,
                _ => {
                    out.truncate(start);
                    return Err(e);
                }
            },
        }
    }
}

impl ServerSession {
    /// A new session for a VIP's configuration.
    ///
    /// # Errors
    /// When rustls refuses the configuration.
    pub fn new(config: &TlsConfig) -> Result<Self, TlsError> {
        Ok(Self {
            conn: UnbufferedServerConnection::new(config.0.clone()).map_err(TlsError)?,
            incoming: Vec::new(),
            failed: false,
            handshaking: true,
            peer_closed: false,
        })
    }

    pub fn is_handshaking(&self) -> bool {
        self.handshaking
    }

    /// The negotiated protocol version and cipher suite, once known.
    pub fn negotiated(&self) -> Option<Negotiated> {
        let version = match self.conn.protocol_version()? {
            rustls::ProtocolVersion::TLSv1_3 => 1,
            _ => 0,
        };
        let suite = self
            .conn
            .negotiated_cipher_suite()?
            .suite()
            .as_str()
            .unwrap_or("other");
        let group = self
            .conn
            .negotiated_key_exchange_group()
            .and_then(|g| g.name().as_str())
            .unwrap_or("other");
        Some(Negotiated {
            version,
            suite: index_of(&SUITES, suite),
            group: index_of(&GROUPS, group),
        })
    }

    /// Takes received TLS bytes (`data`, in order; any split) and processes
    /// all complete records. Appends TLS bytes to send to `outgoing` and
    /// decrypted application data to `plaintext`. Every byte of `data` is
    /// taken (a partial record waits inside the session).
    ///
    /// # Errors
    /// A fatal TLS error; an alert for the peer may have been appended to
    /// `outgoing` and should still be sent before closing.
    pub fn process(
        &mut self,
        data: &[u8],
        outgoing: &mut Vec<u8>,
        plaintext: &mut Vec<u8>,
    ) -> Result<Progress, TlsError> {
        if self.failed {
            return Err(TlsError(rustls::Error::General(
                "session already failed".into(),
            )));
        }
        self.incoming.extend_from_slice(data);
        let mut progress = Progress::default();
        let was_handshaking = self.handshaking;
        loop {
            let UnbufferedStatus { discard, state } =
                self.conn.process_tls_records(&mut self.incoming);
            let mut extra = 0;
            let mut stop = false;
            let mut failure = None;
            match state {
                Err(e) => failure = Some(e),
                Ok(ConnectionState::ReadTraffic(mut r)) => {
                    while let Some(rec) = r.next_record() {
                        match rec {
                            Ok(rec) => {
                                extra += rec.discard;
                                plaintext.extend_from_slice(rec.payload);
                            }
                            Err(e) => {
                                failure = Some(e);
                                break;
                            }
                        }
                    }
                }
                Ok(ConnectionState::EncodeTlsData(mut e)) => {
                    if let Err(err) = append(outgoing, |b| e.encode(b), encode_room) {
                        failure = Some(rustls::Error::General(err.to_string()));
                    }
                }
                // The bytes are in `outgoing`; the caller sends them.
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                Ok(ConnectionState::BlockedHandshake) => stop = true,
                Ok(ConnectionState::WriteTraffic(_)) => {
                    self.handshaking = false;
                    stop = true;
                }
                Ok(ConnectionState::PeerClosed) => {
                    self.peer_closed = true;
                    progress.peer_closed = true;
                }
                Ok(ConnectionState::Closed) => stop = true,
                // 0-RTT is not enabled; anything new in rustls: stop here.
                Ok(_) => stop = true,
            }
            self.incoming
                .drain(..(discard + extra).min(self.incoming.len()));
            if let Some(e) = failure {
                // The alert rustls queued comes out before any more input is
                // looked at; then the session is dead.
                self.drain_alert(outgoing);
                self.failed = true;
                self.incoming.clear();
                return Err(TlsError(e));
            }
            if stop {
                break;
            }
        }
        progress.handshake_done = was_handshaking && !self.handshaking;
        Ok(progress)
    }

    fn drain_alert(&mut self, outgoing: &mut Vec<u8>) {
        let UnbufferedStatus { discard, state } = self.conn.process_tls_records(&mut self.incoming);
        if let Ok(ConnectionState::EncodeTlsData(mut e)) = state {
            let _ = append(outgoing, |b| e.encode(b), encode_room);
        }
        self.incoming.drain(..discard.min(self.incoming.len()));
    }

    /// Encrypts application data into TLS records appended to `outgoing`.
    ///
    /// # Errors
    /// Before the handshake completes, or when the connection is closed.
    pub fn encrypt(&mut self, data: &[u8], outgoing: &mut Vec<u8>) -> Result<(), TlsError> {
        self.with_write(outgoing, |w, b| w.encrypt(data, b))
    }

    /// Appends a close_notify alert to `outgoing`.
    ///
    /// # Errors
    /// Before the handshake completes, or when already closed.
    pub fn close_notify(&mut self, outgoing: &mut Vec<u8>) -> Result<(), TlsError> {
        self.with_write(outgoing, |w, b| w.queue_close_notify(b))
    }

    fn with_write(
        &mut self,
        outgoing: &mut Vec<u8>,
        mut op: impl FnMut(
            &mut rustls::unbuffered::WriteTraffic<'_, rustls::server::ServerConnectionData>,
            &mut [u8],
        ) -> Result<usize, EncryptError>,
    ) -> Result<(), TlsError> {
        if self.failed {
            return Err(TlsError(rustls::Error::General(
                "session already failed".into(),
            )));
        }
        // The retained input goes along: rustls must see it on every call.
        let UnbufferedStatus { discard, state } = self.conn.process_tls_records(&mut self.incoming);
        let result = match state {
            Ok(ConnectionState::WriteTraffic(mut w)) => append(
                outgoing,
                |b| op(&mut w, b),
                |err| match err {
                    EncryptError::InsufficientSize(s) => Some(s.required_size),
                    _ => None,
                },
            )
            .map_err(|e| TlsError(rustls::Error::General(e.to_string()))),
            Ok(_) => Err(TlsError(rustls::Error::General(
                "not ready to write application data".into(),
            ))),
            Err(e) => Err(TlsError(e)),
        };
        self.incoming.drain(..discard.min(self.incoming.len()));
        result
    }
}

/// Fuzz entry point for the TLS input path (handshake and records): feeds
/// `data` to a fresh session in chunks whose sizes come from the data
/// itself. Must never panic; errors are fine.
pub fn fuzz_server_input(config: &TlsConfig, data: &[u8]) {
    let Some((&chunk, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk).max(1);
    let Ok(mut session) = ServerSession::new(config) else {
        return;
    };
    let (mut out, mut plain) = (Vec::new(), Vec::new());
    for piece in rest.chunks(chunk) {
        if session.process(piece, &mut out, &mut plain).is_err() {
            return;
        }
        if !session.is_handshaking() {
            let _ = session.encrypt(b"x", &mut out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::{Cert, CertStore};
    use crate::testutil::{make, now, P256, P384, RSA};
    use rustls::pki_types::ServerName;
    use rustls::{ClientConfig, ClientConnection, RootCertStore};
    use std::io::{Read, Write};

    fn server_config(
        dir: &std::path::Path,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> TlsConfig {
        let mut store = CertStore::new();
        for (name, args) in [("rsa", RSA), ("p256", P256), ("p384", P384)] {
            let (c, k) = make(dir, name, args, &format!("DNS:{name}.test"));
            store.add(Cert::load(&c, &k, now()).unwrap());
        }
        TlsConfig(Arc::new(
            ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .with_protocol_versions(versions)
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(store)),
        ))
    }

    fn client(
        dir: &std::path::Path,
        sni: &str,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> ClientConnection {
        let ca = rustls_pemfile::certs(&mut &std::fs::read(dir.join("ca.pem")).unwrap()[..])
            .next()
            .unwrap()
            .unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(ca).unwrap();
        let cfg = ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        ClientConnection::new(
            Arc::new(cfg),
            ServerName::try_from(sni.to_string()).unwrap(),
        )
        .unwrap()
    }

    /// Moves bytes both ways: client → `wire_in` (the server's TCP receive
    /// buffer, consumed as the session reports) and server → client.
    fn pump(
        c: &mut ClientConnection,
        s: &mut ServerSession,
        wire_in: &mut Vec<u8>,
        plain: &mut Vec<u8>,
    ) {
        for _ in 0..10 {
            c.write_tls(wire_in).unwrap();
            let mut out = Vec::new();
            s.process(wire_in, &mut out, plain).unwrap();
            wire_in.clear();
            c.read_tls(&mut &out[..]).unwrap();
            c.process_new_packets().unwrap();
        }
    }

    #[test]
    fn handshake_and_data_both_ways_for_each_key_and_version() {
        let dir = tempfile::tempdir().unwrap();
        for versions in [
            &[&rustls::version::TLS13][..],
            &[&rustls::version::TLS12][..],
        ] {
            let cfg = server_config(dir.path(), versions);
            for sni in ["rsa.test", "p256.test", "p384.test"] {
                let mut c = client(dir.path(), sni, versions);
                let mut s = ServerSession::new(&cfg).unwrap();
                let (mut wire, mut plain) = (Vec::new(), Vec::new());
                pump(&mut c, &mut s, &mut wire, &mut plain);
                assert!(!s.is_handshaking() && !c.is_handshaking(), "{sni}");
                let n = s.negotiated().unwrap();
                let want = if c.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3) {
                    1
                } else {
                    0
                };
                assert_eq!(n.version, want);
                assert_eq!(
                    SUITES[n.suite],
                    c.negotiated_cipher_suite()
                        .unwrap()
                        .suite()
                        .as_str()
                        .unwrap()
                );
                assert_ne!(GROUPS[n.group], "other", "{sni}");

                // Client → server, across several records.
                let request: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
                c.writer().write_all(&request).unwrap();
                pump(&mut c, &mut s, &mut wire, &mut plain);
                assert_eq!(plain, request, "{sni}");

                // Server → client.
                let response = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec();
                let mut out = Vec::new();
                s.encrypt(&response, &mut out).unwrap();
                c.read_tls(&mut &out[..]).unwrap();
                c.process_new_packets().unwrap();
                let mut got = vec![0u8; response.len()];
                c.reader().read_exact(&mut got).unwrap();
                assert_eq!(got, response);

                // close_notify both ways.
                c.send_close_notify();
                let mut w = Vec::new();
                c.write_tls(&mut w).unwrap();
                let p = s.process(&w, &mut Vec::new(), &mut plain).unwrap();
                assert!(p.peer_closed, "{sni}");
                let mut out = Vec::new();
                s.close_notify(&mut out).unwrap();
                c.read_tls(&mut &out[..]).unwrap();
                let state = c.process_new_packets().unwrap();
                assert!(state.peer_has_closed());
            }
        }
    }

    #[test]
    fn byte_at_a_time_input_works() {
        // TCP may deliver a record in pieces: the session must wait for
        // the rest and consume nothing it cannot use.
        let dir = tempfile::tempdir().unwrap();
        // The configuration dpd uses (TLS 1.2 and 1.3, no resumption).
        let mut store = CertStore::new();
        let (cert, key) = make(dir.path(), "p256", P256, "DNS:p256.test");
        store.add(Cert::load(&cert, &key, now()).unwrap());
        let cfg = TlsConfig::new(store).unwrap();
        let mut c = client(dir.path(), "p256.test", &[&rustls::version::TLS13]);
        let mut s = ServerSession::new(&cfg).unwrap();
        let mut plain = Vec::new();
        for _ in 0..10 {
            let mut from_client = Vec::new();
            c.write_tls(&mut from_client).unwrap();
            let mut out = Vec::new();
            for b in from_client {
                s.process(&[b], &mut out, &mut plain).unwrap();
            }
            c.read_tls(&mut &out[..]).unwrap();
            c.process_new_packets().unwrap();
        }
        assert!(!s.is_handshaking());
    }

    #[test]
    fn garbage_is_a_clean_error() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = server_config(dir.path(), &[&rustls::version::TLS13]);
        let mut s = ServerSession::new(&cfg).unwrap();
        let junk = b"GET / HTTP/1.1\r\nHost: plain-http-to-a-tls-port\r\n\r\n".to_vec();
        let mut out = Vec::new();
        let err = s.process(&junk, &mut out, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().starts_with("TLS: "), "{err}");
        assert!(!out.is_empty(), "an alert is sent before closing");
        assert!(
            s.encrypt(b"x", &mut Vec::new()).is_err(),
            "no data after a failed handshake"
        );
    }
}
