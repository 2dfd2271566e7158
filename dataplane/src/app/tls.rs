//! TLS VIPs: the responder behind a [`ServerSession`] on each connection.
//! TCP carries ciphertext; the session turns it into plaintext for the
//! responder and encrypts what the responder writes.
//!
//! This first version copies: ciphertext out of the TCP receive ring into
//! the session's input buffer, plaintext through per-connection vectors. The in-place
//! record layer on AWS-LC (DESIGN.md) replaces those copies.

use crypto::session::{ServerSession, TlsConfig};

use super::responder::{HasHttp, Responder, Session, Stream};
use crate::tcp::{ConnId, TcpEngine};

/// Plaintext queued for encryption, at most (the responder's window).
const PLAIN_OUT_MAX: usize = 64 * 1024;
/// Ciphertext waiting for TCP send-buffer room, at most, before encrypting
/// more.
const CIPHER_OUT_MAX: usize = 64 * 1024;
/// Largest plaintext per TLS record.
const RECORD: usize = 16 * 1024;

/// A connection's application state: the responder's, and the TLS
/// session's when the VIP terminates TLS.
#[derive(Debug, Default)]
pub struct ConnApp {
    pub http: Session,
    pub tls: Option<Box<TlsConn>>,
}

impl HasHttp for ConnApp {
    fn http(&mut self) -> &mut Session {
        &mut self.http
    }
}

/// One connection's TLS state and buffers.
#[derive(Debug)]
pub struct TlsConn {
    session: ServerSession,
    plain_in: Vec<u8>,
    plain_out: Vec<u8>,
    cipher_out: Vec<u8>,
    /// The responder asked to close: close_notify after the last data.
    closing: bool,
    close_sent: bool,
    failed: bool,
}

impl TlsConn {
    /// # Errors
    /// When the configuration cannot start a session.
    pub fn new(config: &TlsConfig) -> Result<Self, crypto::session::TlsError> {
        Ok(Self {
            session: ServerSession::new(config)?,
            plain_in: Vec::new(),
            plain_out: Vec::new(),
            cipher_out: Vec::new(),
            closing: false,
            close_sent: false,
            failed: false,
        })
    }
}

/// The plaintext side of a TLS connection as the responder's [`Stream`].
struct TlsStream<'a> {
    http: &'a mut Session,
    tls: &'a mut TlsConn,
}

impl Stream for TlsStream<'_> {
    fn http(&mut self) -> Option<&mut Session> {
        Some(self.http)
    }
    fn peek(&self) -> (&[u8], &[u8]) {
        (&self.tls.plain_in, &[])
    }
    fn consume(&mut self, n: usize) {
        self.tls.plain_in.drain(..n.min(self.tls.plain_in.len()));
    }
    fn send_space(&self) -> usize {
        PLAIN_OUT_MAX.saturating_sub(self.tls.plain_out.len())
    }
    fn send(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.send_space());
        self.tls.plain_out.extend_from_slice(&data[..n]);
        n
    }
    fn send_with(&mut self, max: usize, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> usize {
        let room = max.min(self.send_space());
        let start = self.tls.plain_out.len();
        self.tls.plain_out.resize(start + room, 0);
        let n = fill(&mut self.tls.plain_out[start..]).min(room);
        self.tls.plain_out.truncate(start + n);
        n
    }
    fn close(&mut self) {
        self.tls.closing = true;
    }
}

/// What [`drive`] saw, for the engine's counters.
#[derive(Debug, Default, Clone, Copy)]
pub struct TlsOutcome {
    pub handshake_done: bool,
    pub failed: bool,
    /// What the handshake negotiated, when it completed in this call.
    pub negotiated: Option<crypto::session::Negotiated>,
}

/// Moves a TLS connection forward: ciphertext in, responder, ciphertext out,
/// close_notify and TCP close at the end.
pub fn drive(
    tcp: &mut TcpEngine<ConnApp>,
    id: ConnId,
    responder: &mut Responder,
    peer_closed: bool,
) -> TlsOutcome {
    let mut outcome = TlsOutcome::default();
    let Some(app) = tcp.app(id) else {
        return outcome;
    };
    let Some(mut tls) = app.tls.take() else {
        return outcome;
    };
    let mut http = std::mem::take(&mut app.http);
    if peer_closed {
        http.peer_closed = true;
    }
    for _ in 0..8 {
        if tls.failed {
            break;
        }
        // Ciphertext from TCP: the session takes all of it (a partial
        // record waits inside the session).
        let (a, b) = tcp.peek(id);
        let taken = a.len() + b.len();
        let mut progressed = false;
        if taken > 0 {
            let result = tls
                .session
                .process(a, &mut tls.cipher_out, &mut tls.plain_in)
                .and_then(|p1| {
                    let p2 = tls
                        .session
                        .process(b, &mut tls.cipher_out, &mut tls.plain_in)?;
                    Ok((
                        p1.handshake_done || p2.handshake_done,
                        p1.peer_closed || p2.peer_closed,
                    ))
                });
            tcp.consume(id, taken);
            progressed = true;
            match result {
                Ok((handshake_done, closed)) => {
                    outcome.handshake_done |= handshake_done;
                    if closed {
                        http.peer_closed = true;
                    }
                }
                Err(_) => {
                    // The alert (if any) goes out, then the connection ends.
                    tls.failed = true;
                    outcome.failed = true;
                    tcp.send(id, &tls.cipher_out);
                    tcp.close(id);
                    break;
                }
            }
        }
        // The application, once the handshake is done.
        if !tls.session.is_handshaking() && !tls.close_sent {
            responder.pump(&mut TlsStream {
                http: &mut http,
                tls: &mut tls,
            });
        }
        // Encrypt what it wrote, as TCP room allows.
        let mut at = 0;
        while at < tls.plain_out.len() && tls.cipher_out.len() < CIPHER_OUT_MAX {
            let n = (tls.plain_out.len() - at).min(RECORD);
            let (plain, cipher) = (&tls.plain_out[at..at + n], &mut tls.cipher_out);
            if tls.session.encrypt(plain, cipher).is_err() {
                tls.failed = true;
                break;
            }
            at += n;
        }
        tls.plain_out.drain(..at);
        progressed |= at > 0;
        if tls.closing && tls.plain_out.is_empty() && !tls.close_sent {
            let _ = tls.session.close_notify(&mut tls.cipher_out);
            tls.close_sent = true;
        }
        let sent = tcp.send(id, &tls.cipher_out);
        tls.cipher_out.drain(..sent);
        progressed |= sent > 0;
        if tls.close_sent && tls.cipher_out.is_empty() {
            tcp.close(id);
            break;
        }
        if http.peer_closed && tls.plain_in.is_empty() && tls.plain_out.is_empty() && !tls.closing {
            // The client is done and nothing is in progress: close too.
            tls.closing = true;
            continue;
        }
        if !progressed {
            break;
        }
    }
    if outcome.handshake_done {
        outcome.negotiated = tls.session.negotiated();
    }
    if let Some(app) = tcp.app(id) {
        app.http = http;
        app.tls = Some(tls);
    }
    outcome
}
