//! A server-side TLS session, sans-IO: the caller owns the buffers. The
//! handshake runs on rustls' unbuffered API; once it completes, rustls hands
//! over the traffic secrets (`dangerous_into_kernel_connection`) and the
//! record layer runs on AWS-LC directly ([`crate::record`]): records are
//! opened from the caller's receive buffer into its plaintext buffer in one
//! pass and sealed in place in its send buffer. Post-handshake messages are
//! handled here: TLS 1.3 KeyUpdate both ways, alerts, close_notify;
//! TLS 1.2 renegotiation is refused; keys are updated (TLS 1.3) or the
//! connection closed (TLS 1.2) before AES-GCM's record limit.

use std::fmt;

use rustls::kernel::KernelConnection;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, UnbufferedStatus};
use rustls::SupportedCipherSuite;

use crate::record::{self, content, Protocol, RecordError, RecordKey, HEADER_LEN};
use crate::secret_cache::{self, SecretCache};

pub use crate::policy::TlsConfig;

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
/// [`SUITES`] by the names OpenSSL gives them, which backends that read a
/// PROXY header's SSL TLV expect (HAProxy and nginx send these).
pub const SUITES_OPENSSL: [&str; 10] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-RSA-CHACHA20-POLY1305",
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
/// Certificate key types counted, by [`Negotiated::key`].
pub const KEY_TYPES: [&str; 6] = [
    "RSA-2048",
    "RSA-3072",
    "RSA-4096",
    "ECDSA-P256",
    "ECDSA-P384",
    "other",
];

fn index_of(list: &[&str], name: &str) -> usize {
    list.iter()
        .position(|n| *n == name)
        .unwrap_or(list.len() - 1)
}

/// What a completed handshake negotiated, as indices into [`VERSIONS`],
/// [`SUITES`], [`GROUPS`] and [`KEY_TYPES`] (counters stay fixed arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    pub version: usize,
    pub suite: usize,
    pub group: usize,
    pub key: usize,
    /// The handshake resumed a session (ticket).
    pub resumed: bool,
}

/// Why a TLS connection failed, by [`Failure::index`] into [`FAILURES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The client offered only versions we refuse (SSLv3, TLS 1.0/1.1).
    ProtocolVersion,
    /// No cipher suite, group or signature scheme in common.
    NoSharedParameters,
    /// No certificate for the name asked, and no default.
    NoCertificate,
    /// ALPN offered, none of ours in it.
    NoApplicationProtocol,
    /// Bytes that are not TLS, or a malformed message.
    DecodeError,
    /// A message or record not allowed at this point.
    UnexpectedMessage,
    /// A record failed authentication.
    BadRecordMac,
    RecordOverflow,
    /// The client sent a fatal alert (e.g. it rejected our certificate).
    PeerAlert,
    /// TLS 1.2 reached the cipher's record limit (it cannot rekey).
    RecordLimit,
    Other,
    /// A field with a value the protocol does not allow (a KeyUpdate's
    /// request_update other than 0 or 1).
    IllegalParameter,
    /// The client's handshake input held past [`HANDSHAKE_HELD_MAX`]
    /// without a whole message: one too long, or cut too fine.
    HandshakeTooLarge,
}

/// The fixed part of a ClientHello body: client_version (2), random
/// (32), session_id length (1), cipher_suites length (2) and one suite
/// (2), compression_methods length (1) and one method (1).
const MIN_CLIENT_HELLO: usize = 41;
/// Bytes of our own output (alerts, KeyUpdates) waiting in the caller's
/// buffer past which no more records are opened.
pub const OUTGOING_MAX: usize = 64 * 1024;
/// Bytes of the client's handshake input held at most while they do not
/// yet make a whole message: a 16 KiB ClientHello (BoringSSL's limit for
/// a server's handshake messages) in two records, or any one record
/// (2^14 + 2048 + 5), fits; record headers count, so a message cut into
/// tiny records (six bytes held per byte sent) cannot make a session hold
/// more. Past it the handshake fails (`handshake_too_large`).
pub const HANDSHAKE_HELD_MAX: usize = 20 * 1024;
/// Longest post-handshake message taken in, as in the handshake (a TLS 1.2
/// renegotiation ClientHello is the largest a client may send; it is
/// refused anyway): past it, `handshake_too_large`.
const MAX_POST_HANDSHAKE_MESSAGE: usize = 16 * 1024;

/// Failure reasons counted, by [`Failure::index`].
pub const FAILURES: [&str; 13] = [
    "protocol_version",
    "no_shared_parameters",
    "no_certificate",
    "no_application_protocol",
    "decode_error",
    "unexpected_message",
    "bad_record_mac",
    "record_overflow",
    "peer_alert",
    "record_limit",
    "other",
    "illegal_parameter",
    "handshake_too_large",
];

impl Failure {
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        FAILURES[self.index()]
    }

    fn of(e: &rustls::Error) -> Self {
        use rustls::{Error as E, PeerIncompatible as P};
        match e {
            E::PeerIncompatible(
                P::SupportedVersionsExtensionRequired
                | P::Tls12NotOffered
                | P::Tls12NotOfferedOrEnabled
                | P::ServerDoesNotSupportTls12Or13,
            ) => Self::ProtocolVersion,
            E::PeerIncompatible(_) => Self::NoSharedParameters,
            E::NoApplicationProtocol => Self::NoApplicationProtocol,
            E::InvalidMessage(_) => Self::DecodeError,
            E::InappropriateMessage { .. } | E::InappropriateHandshakeMessage { .. } => {
                Self::UnexpectedMessage
            }
            E::DecryptError => Self::BadRecordMac,
            E::AlertReceived(_) => Self::PeerAlert,
            E::General(m) if m.contains("certificate") => Self::NoCertificate,
            _ => Self::Other,
        }
    }

    fn of_record(e: RecordError) -> Self {
        match e {
            RecordError::BadRecordMac => Self::BadRecordMac,
            RecordError::Overflow => Self::RecordOverflow,
            RecordError::Unexpected => Self::UnexpectedMessage,
        }
    }
}

/// A TLS failure: the connection must be closed (any alert to send is
/// already in the outgoing bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct TlsError {
    pub reason: Failure,
    pub detail: String,
}

impl TlsError {
    fn new(reason: Failure, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
        }
    }

    pub(crate) fn other(detail: impl Into<String>) -> Self {
        Self::new(Failure::Other, detail)
    }

    fn rustls(e: rustls::Error) -> Self {
        Self::new(Failure::of(&e), e.to_string())
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TLS: {} ({})", self.detail, self.reason.name())
    }
}

impl std::error::Error for TlsError {}

/// What one [`ServerSession::read`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Input bytes taken (whole records once established; everything
    /// during the handshake).
    pub consumed: usize,
    /// The handshake completed during this call.
    pub handshake_done: bool,
    /// The peer sent close_notify.
    pub peer_closed: bool,
    /// TLS 1.3 KeyUpdates received and sent.
    pub key_updates_received: u32,
    pub key_updates_sent: u32,
    /// TLS 1.2 renegotiation attempts refused.
    pub renegotiations_refused: u32,
}

thread_local! {
    /// [`set_tls12_record_limit_for_tests`].
    static TLS12_LIMIT_FOR_TESTS: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Test hook: TLS 1.2 sessions whose handshake completes on this thread
/// from now on may send `records` records (`None`: the suite's limit),
/// so tests reach what happens at the limit (2^24 records for AES-GCM).
#[doc(hidden)]
pub fn set_tls12_record_limit_for_tests(records: Option<u64>) {
    TLS12_LIMIT_FOR_TESTS.with(|l| l.set(records));
}

/// Fraction of a suite's confidentiality limit after which TLS 1.3 keys
/// are updated (TLS 1.2 closes at the limit less a margin).
const REKEY_FRACTION: u64 = 2;
const TLS12_LIMIT_MARGIN: u64 = 1 << 16;

struct Handshake {
    conn: UnbufferedServerConnection,
    /// Received TLS bytes not yet discarded by rustls: the unbuffered API
    /// must see them again on every call.
    incoming: Vec<u8>,
    /// How much of `incoming` rustls has been handed: whole records, one
    /// more each time it asks for more, so it never reads past the
    /// client's Finished (what follows is our record layer's: rustls would
    /// answer a KeyUpdate there into a queue the handover drops).
    handed: usize,
    /// The client's record headers, judged as its bytes arrive.
    headers: HeaderJudge,
    /// Our first flight went out: from then on rustls judges the records
    /// (its alerts are encrypted where they must be).
    answered: bool,
    /// What rustls' key schedule derived from the traffic secrets, lent
    /// to it for each call so nothing is derived twice; wiped when the
    /// handshake ends.
    secrets: SecretCache,
}

/// Follows the record framing of the client's byte stream in the
/// handshake (apart from `incoming`, which rustls rewrites as it joins
/// fragments) to judge each header as it completes: [`HeaderJudge::feed`].
#[derive(Default)]
struct HeaderJudge {
    /// Body bytes of the current record still to come.
    skip: usize,
    header: [u8; HEADER_LEN],
    have: usize,
    /// ChangeCipherSpec records the client sent (0 or 1; its records after
    /// one are encrypted).
    ccs: u8,
    /// The body length of the record being skipped.
    body: usize,
}

struct Established {
    kernel: KernelConnection<ServerConnectionData>,
    tx: RecordKey,
    rx: RecordKey,
    /// Bytes taken but not yet opened (left over from the handshake, or a
    /// partial record given to [`ServerSession::process`]); empty, with no
    /// capacity, in the steady state.
    leftover: Vec<u8>,
    /// Sequence number at which the send key must change (TLS 1.3) or the
    /// connection close (TLS 1.2).
    tx_limit: u64,
    /// A post-handshake message being read (RFC 8446 §5.1: it may span
    /// records, and no other record type may come between).
    message: PostHandshake,
    /// What a peer may repeat without sending data, counted since its
    /// last non-empty application data record ([`Tempers`]).
    tempers: Tempers,
    /// Our close_notify went: no record of ours follows it (RFC 8446
    /// §6.1), not a KeyUpdate's answer nor a renegotiation's warning.
    close_sent: bool,
}

/// A post-handshake handshake message from the client, read as its bytes
/// come: its 4-byte header, judged as soon as it is whole (only what a
/// client may send is let in: RFC 8446 §4.6.3, a TLS 1.3 KeyUpdate; RFC
/// 5246 §7.4.1.1, a TLS 1.2 ClientHello asking to renegotiate), then its
/// body, of which only a KeyUpdate's one byte is kept: a hello's is
/// counted off, never held.
#[derive(Debug, Default)]
struct PostHandshake {
    header: [u8; 4],
    /// Header bytes read (0 between messages).
    have: usize,
    /// Body bytes still to come, once the header is whole.
    body_left: usize,
}

impl PostHandshake {
    fn in_progress(&self) -> bool {
        self.have > 0
    }
}

/// What a peer may repeat without sending application data, each
/// bounded as rustls and BoringSSL bound them before the handover (their
/// counters do not follow the session to our record layer): warning
/// alerts, empty records and KeyUpdates since the last non-empty
/// application data record, and renegotiation requests ever. Past a
/// bound: unexpected_message.
#[derive(Debug, Default)]
struct Tempers {
    warnings: u8,
    empty_records: u8,
    key_updates: u8,
    renegotiations: u8,
    /// Our send key's sequence number right after our last KeyUpdate
    /// answering the peer's request: another request before we sent a
    /// record since is covered by it (RFC 8446 §4.6.3: a receiver silent
    /// meanwhile answers several with one).
    answered_at: Option<u64>,
}

/// Warning alerts (TLS 1.2 other than close_notify, TLS 1.3
/// user_canceled) in a row taken (BoringSSL's kMaxWarningAlerts).
const MAX_WARNINGS: u8 = 4;
/// Empty records in a row taken (BoringSSL's kMaxEmptyRecords; rustls'
/// ALLOWED_CONSECUTIVE_EMPTY_FRAGMENTS_MAX).
const MAX_EMPTY_RECORDS: u8 = 32;
/// KeyUpdates taken between two application data records (BoringSSL's
/// kMaxKeyUpdates).
const MAX_KEY_UPDATES: u8 = 32;
/// TLS 1.2 renegotiation requests refused with a warning; the next one
/// ends the session (rustls' rule).
const MAX_RENEGOTIATIONS: u8 = 1;

impl Tempers {
    /// Application data came: the in-a-row counts start again.
    fn data(&mut self) {
        self.warnings = 0;
        self.empty_records = 0;
        self.key_updates = 0;
    }

    /// One more of `count`, within `max`.
    fn one_more(count: &mut u8, max: u8, what: &str) -> Result<(), TlsError> {
        if *count >= max {
            return Err(TlsError::new(
                Failure::UnexpectedMessage,
                format!("more than {max} {what}"),
            ));
        }
        *count += 1;
        Ok(())
    }
}

enum State {
    Handshake(Box<Handshake>),
    Established(Box<Established>),
    Failed,
}

/// One server-side TLS connection.
pub struct ServerSession {
    state: State,
    /// The key type of the certificate chosen for this handshake.
    key: Option<crate::certs::KeyType>,
    /// The name the client asked for (SNI).
    sni: Option<Box<str>>,
    negotiated: Option<Negotiated>,
    peer_closed: bool,
}

impl fmt::Debug for ServerSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerSession")
            .field("handshaking", &self.is_handshaking())
            .field("negotiated", &self.negotiated)
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

/// Seals a short control record (alert, KeyUpdate) onto `out`.
fn seal_small(tx: &mut RecordKey, typ: u8, body: &[u8], out: &mut Vec<u8>) {
    let mut rec = [0u8; 64];
    let pre = tx.prefix_len();
    rec[pre..pre + body.len()].copy_from_slice(body);
    let n = tx.seal_in_place(typ, &mut rec, body.len());
    out.extend_from_slice(&rec[..n]);
}

/// The `n`th byte of the concatenation of `a` and `b`.
fn byte_at(a: &[u8], b: &[u8], n: usize) -> u8 {
    if n < a.len() {
        a[n]
    } else {
        b[n - a.len()]
    }
}

/// A contiguous view of `a ++ b` over `range`, when it has one.
fn contiguous<'a>(a: &'a [u8], b: &'a [u8], r: std::ops::Range<usize>) -> Option<&'a [u8]> {
    if r.end <= a.len() {
        Some(&a[r])
    } else if r.start >= a.len() {
        Some(&b[r.start - a.len()..r.end - a.len()])
    } else {
        None
    }
}

impl Established {
    fn new(conn: UnbufferedServerConnection, leftover: Vec<u8>) -> Result<Self, TlsError> {
        let (secrets, kernel) = conn
            .dangerous_into_kernel_connection()
            .map_err(TlsError::rustls)?;
        let protocol = match kernel.protocol_version() {
            rustls::ProtocolVersion::TLSv1_3 => Protocol::Tls13,
            _ => Protocol::Tls12,
        };
        let limit = match kernel.negotiated_cipher_suite() {
            SupportedCipherSuite::Tls12(s) => s
                .common
                .confidentiality_limit
                .saturating_sub(TLS12_LIMIT_MARGIN),
            SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit / REKEY_FRACTION,
        };
        let limit = match TLS12_LIMIT_FOR_TESTS.with(std::cell::Cell::get) {
            Some(records) if protocol == Protocol::Tls12 => records,
            _ => limit,
        };
        Ok(Self {
            tx: RecordKey::new(protocol, &secrets.tx.1, secrets.tx.0),
            rx: RecordKey::new(protocol, &secrets.rx.1, secrets.rx.0),
            kernel,
            leftover,
            tx_limit: limit,
            message: PostHandshake::default(),
            tempers: Tempers::default(),
            close_sent: false,
        })
    }

    /// Sends a TLS 1.3 KeyUpdate (not requesting one back) with the
    /// current key, then switches to the next send key.
    fn update_tx(&mut self, out: &mut Vec<u8>) -> Result<(), TlsError> {
        seal_small(&mut self.tx, content::HANDSHAKE, &[24, 0, 0, 1, 0], out);
        let (seq, secrets) = self.kernel.update_tx_secret().map_err(TlsError::rustls)?;
        self.tx = RecordKey::new(Protocol::Tls13, &secrets, seq);
        self.tx_limit = self.tx.seq() + self.tx_limit.max(1);
        // Our key moved: a request from now on gets an answer of its own
        // (the new key's sequence numbers start again, and would match
        // the old answer's); an answer sets this again after.
        self.tempers.answered_at = None;
        Ok(())
    }

    /// A fatal alert.
    fn alert(&mut self, description: u8, out: &mut Vec<u8>) {
        seal_small(&mut self.tx, content::ALERT, &[2, description], out);
    }

    /// Acts on one opened non-application record (`body` is its
    /// plaintext).
    fn control(
        &mut self,
        typ: u8,
        body: &[u8],
        out: &mut Vec<u8>,
        progress: &mut Progress,
    ) -> Result<(), TlsError> {
        if typ != content::HANDSHAKE && self.message.in_progress() {
            return Err(TlsError::new(
                Failure::UnexpectedMessage,
                "a record between the fragments of a handshake message",
            ));
        }
        match typ {
            content::ALERT => match body {
                [_, 0] => {
                    progress.peer_closed = true;
                    Ok(())
                }
                // TLS 1.2 warnings other than close_notify are ignored;
                // TLS 1.3 ignores user_canceled; anything else is fatal.
                [1, d] if self.rx.protocol() == Protocol::Tls12 || *d == 90 => Tempers::one_more(
                    &mut self.tempers.warnings,
                    MAX_WARNINGS,
                    "warning alerts in a row",
                ),
                [_, d] => Err(TlsError::new(
                    Failure::PeerAlert,
                    format!("alert {d} received"),
                )),
                _ => Err(TlsError::new(Failure::DecodeError, "malformed alert")),
            },
            content::HANDSHAKE => {
                // RFC 8446 §5.1, RFC 5246 §6.2.1: never a zero-length
                // fragment of a handshake message.
                if body.is_empty() {
                    return Err(TlsError::new(
                        Failure::UnexpectedMessage,
                        "zero-length handshake record",
                    ));
                }
                let mut rest = body;
                while !rest.is_empty() {
                    let m = &mut self.message;
                    if m.have < m.header.len() {
                        let n = (m.header.len() - m.have).min(rest.len());
                        m.header[m.have..m.have + n].copy_from_slice(&rest[..n]);
                        m.have += n;
                        rest = &rest[n..];
                        if m.have == m.header.len() {
                            let len = self.judge_message()?;
                            self.message.body_left = len;
                        }
                        continue;
                    }
                    let n = m.body_left.min(rest.len());
                    let body_byte = rest[0];
                    m.body_left -= n;
                    rest = &rest[n..];
                    if m.body_left == 0 {
                        self.message = PostHandshake::default();
                        self.message_done(body_byte, rest.is_empty(), out, progress)?;
                    }
                }
                Ok(())
            }
            t => Err(TlsError::new(
                Failure::UnexpectedMessage,
                format!("record type {t} after the handshake"),
            )),
        }
    }

    /// Judges a post-handshake message's header, just whole: the length
    /// of its body, or why it may not come.
    fn judge_message(&self) -> Result<usize, TlsError> {
        let [t, a, b, c] = self.message.header;
        let len = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
        match (self.rx.protocol(), t) {
            (Protocol::Tls13, 24) if len == 1 => Ok(len),
            (Protocol::Tls13, 24) => Err(TlsError::new(
                Failure::DecodeError,
                format!("KeyUpdate of {len} bytes"),
            )),
            // A ClientHello shorter than its fixed fields (version,
            // random, session id, suites, methods).
            (Protocol::Tls12, 1) if len < MIN_CLIENT_HELLO => {
                Err(TlsError::new(Failure::DecodeError, "truncated ClientHello"))
            }
            (Protocol::Tls12, 1) if len > MAX_POST_HANDSHAKE_MESSAGE => Err(TlsError::new(
                Failure::HandshakeTooLarge,
                format!("post-handshake message of {len} bytes"),
            )),
            (Protocol::Tls12, 1) => Ok(len),
            (_, t) => Err(TlsError::new(
                Failure::UnexpectedMessage,
                format!("handshake message {t} after the handshake"),
            )),
        }
    }

    /// Acts on a post-handshake message just read whole (`last` its body's
    /// last byte; `record_ends`: nothing follows it in its record).
    fn message_done(
        &mut self,
        last: u8,
        record_ends: bool,
        out: &mut Vec<u8>,
        progress: &mut Progress,
    ) -> Result<(), TlsError> {
        if self.rx.protocol() == Protocol::Tls12 {
            // A ClientHello: renegotiation, refused with a warning (RFC
            // 5246 §7.2.2) once; the connection goes on.
            Tempers::one_more(
                &mut self.tempers.renegotiations,
                MAX_RENEGOTIATIONS,
                "renegotiation requests",
            )?;
            if !self.close_sent {
                self.alert_warning(100, out);
            }
            progress.renegotiations_refused += 1;
            return Ok(());
        }
        // KeyUpdate: the peer's next records use its next key;
        // update_requested asks us to move ours too.
        let request = match last {
            0 => false,
            1 => true,
            // RFC 8446 §4.6.3: request_update is 0 or 1.
            _ => {
                return Err(TlsError::new(
                    Failure::IllegalParameter,
                    "KeyUpdate request_update not 0 or 1",
                ))
            }
        };
        // RFC 8446 §5.1: a key change ends its record.
        if !record_ends {
            return Err(TlsError::new(
                Failure::UnexpectedMessage,
                "KeyUpdate not at the end of its record",
            ));
        }
        Tempers::one_more(
            &mut self.tempers.key_updates,
            MAX_KEY_UPDATES,
            "KeyUpdates without application data",
        )?;
        let (seq, secrets) = self.kernel.update_rx_secret().map_err(TlsError::rustls)?;
        self.rx = RecordKey::new(Protocol::Tls13, &secrets, seq);
        progress.key_updates_received += 1;
        if request && !self.close_sent && self.tempers.answered_at != Some(self.tx.seq()) {
            self.update_tx(out)?;
            self.tempers.answered_at = Some(self.tx.seq());
            progress.key_updates_sent += 1;
        }
        Ok(())
    }

    /// Whether a record of outer type `typ` may come after the handshake:
    /// in TLS 1.3 only application_data (everything is encrypted; a
    /// ChangeCipherSpec after the handshake is unexpected_message, RFC
    /// 8446 §5), in TLS 1.2 alert, handshake and application data.
    fn expect_record_type(&self, typ: u8) -> Result<(), TlsError> {
        let ok = match self.rx.protocol() {
            Protocol::Tls13 => typ == content::APPLICATION_DATA,
            Protocol::Tls12 => matches!(
                typ,
                content::ALERT | content::HANDSHAKE | content::APPLICATION_DATA
            ),
        };
        if ok {
            Ok(())
        } else {
            Err(TlsError::new(
                Failure::UnexpectedMessage,
                format!("record type {typ} after the handshake"),
            ))
        }
    }

    /// A warning-level alert (close_notify, no_renegotiation).
    fn alert_warning(&mut self, description: u8, out: &mut Vec<u8>) {
        seal_small(&mut self.tx, content::ALERT, &[1, description], out);
    }

    /// Opens whole records of `a ++ b` from the start, appending
    /// application data to `plaintext` until it holds `plain_limit` bytes,
    /// and stopping once [`OUTGOING_MAX`] bytes of our own (alerts,
    /// KeyUpdates) wait in `out`: a peer that sends requests for them and
    /// never reads cannot make them pile up. Returns the bytes of the
    /// records opened.
    fn open_records(
        &mut self,
        a: &[u8],
        b: &[u8],
        out: &mut Vec<u8>,
        plaintext: &mut Vec<u8>,
        plain_limit: usize,
        progress: &mut Progress,
    ) -> Result<usize, TlsError> {
        let total = a.len() + b.len();
        let mut at = 0;
        while total - at >= HEADER_LEN
            && plaintext.len() < plain_limit
            && out.len() < OUTGOING_MAX
            && !progress.peer_closed
        {
            let mut header = [0u8; HEADER_LEN];
            for (i, h) in header.iter_mut().enumerate() {
                *h = byte_at(a, b, at + i);
            }
            // The header is judged at once: bytes that are not TLS (or a
            // record type that cannot come now) end the connection without
            // waiting for the length they seem to announce.
            if let Err(e) = self.expect_record_type(header[0]) {
                self.alert(10, out);
                return Err(e);
            }
            let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
            if len > record::MAX_CIPHERTEXT {
                self.alert(22, out);
                return Err(TlsError::new(Failure::RecordOverflow, "record too long"));
            }
            if total - at < HEADER_LEN + len {
                break;
            }
            let body = at + HEADER_LEN..at + HEADER_LEN + len;
            let start = plaintext.len();
            plaintext.resize(start + len, 0);
            let opened = match contiguous(a, b, body.clone()) {
                // One pass: from the receive buffer into the plaintext.
                Some(ct) => self.rx.open(&header, ct, &mut plaintext[start..]),
                // The record wraps around the ring: gather, open in place.
                None => {
                    let split = a.len() - body.start;
                    plaintext[start..start + split].copy_from_slice(&a[body.start..]);
                    plaintext[start + split..].copy_from_slice(&b[..len - split]);
                    self.rx
                        .open_in_place(&header, &mut plaintext[start..])
                        .map(|(t, r)| {
                            plaintext.copy_within(start + r.start..start + r.end, start);
                            (t, r.len())
                        })
                }
            };
            let (typ, n) = match opened {
                Ok(x) => x,
                Err(e) => {
                    plaintext.truncate(start);
                    self.alert(e.alert(), out);
                    return Err(TlsError::new(Failure::of_record(e), e.to_string()));
                }
            };
            at = body.end;
            if typ == content::APPLICATION_DATA && !self.message.in_progress() {
                plaintext.truncate(start + n);
                if n > 0 {
                    self.tempers.data();
                    continue;
                }
                // RFC 8446 §5.4 allows empty application data; a peer
                // sending nothing else is bounded.
                let more = Tempers::one_more(
                    &mut self.tempers.empty_records,
                    MAX_EMPTY_RECORDS,
                    "empty records in a row",
                );
                match more {
                    Ok(()) => continue,
                    Err(e) => {
                        self.alert(10, out);
                        return Err(e);
                    }
                }
            }
            let result = self.control(typ, &plaintext[start..start + n], out, progress);
            plaintext.truncate(start);
            if let Err(e) = result {
                let alert = match e.reason {
                    Failure::DecodeError => 50,
                    Failure::IllegalParameter | Failure::HandshakeTooLarge => 47,
                    Failure::PeerAlert => 0,
                    _ => 10,
                };
                if alert != 0 {
                    self.alert(alert, out);
                }
                return Err(e);
            }
        }
        Ok(at)
    }
}

impl ServerSession {
    /// A new session for a VIP's configuration.
    ///
    /// # Errors
    /// When rustls refuses the configuration.
    pub fn new(config: &TlsConfig) -> Result<Self, TlsError> {
        Ok(Self {
            state: State::Handshake(Box::new(Handshake {
                conn: UnbufferedServerConnection::new(config.rustls().clone())
                    .map_err(TlsError::rustls)?,
                incoming: Vec::new(),
                handed: 0,
                headers: HeaderJudge::default(),
                answered: false,
                secrets: SecretCache::default(),
            })),
            key: None,
            sni: None,
            negotiated: None,
            peer_closed: false,
        })
    }

    pub fn is_handshaking(&self) -> bool {
        matches!(self.state, State::Handshake(_))
    }

    /// Input the session holds that [`ServerSession::read`] has not opened
    /// yet (what came with the handshake's last flight): read again even
    /// with nothing new from the peer. None after the peer's close_notify:
    /// what followed it is never read.
    pub fn has_pending_input(&self) -> bool {
        !self.peer_closed && matches!(&self.state, State::Established(e) if !e.leftover.is_empty())
    }

    /// The server name the client sent (SNI), once the handshake is done.
    pub fn server_name(&self) -> Option<&str> {
        self.sni.as_deref()
    }

    /// The client sent close_notify.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// Takes the server name the client sent (for a record of the
    /// connection as it ends).
    pub fn take_server_name(&mut self) -> Option<Box<str>> {
        self.sni.take()
    }

    /// What the handshake negotiated, once it completed.
    pub fn negotiated(&self) -> Option<Negotiated> {
        self.negotiated
    }

    /// Bytes of received data the session holds (partial input), for
    /// memory accounting.
    pub fn buffered(&self) -> usize {
        match &self.state {
            State::Handshake(h) => h.incoming.capacity(),
            State::Established(e) => e.leftover.capacity(),
            State::Failed => 0,
        }
    }

    /// Takes received TLS bytes (`input`: the receive buffer's two slices,
    /// in order) and processes them: appends TLS bytes to send to
    /// `outgoing` and decrypted application data to `plaintext`, stopping
    /// once `plaintext` holds `plain_limit` bytes or `outgoing`
    /// [`OUTGOING_MAX`]. During the handshake input is taken while the
    /// session holds less than [`HANDSHAKE_HELD_MAX`] of it; afterwards only
    /// whole records are; the rest stays in the caller's buffer.
    /// [`Progress::consumed`] says how much.
    ///
    /// # Errors
    /// A fatal TLS error; an alert for the peer may have been appended to
    /// `outgoing` and should still be sent before closing. Input is then
    /// taken whole.
    pub fn read(
        &mut self,
        input: (&[u8], &[u8]),
        outgoing: &mut Vec<u8>,
        plaintext: &mut Vec<u8>,
        plain_limit: usize,
    ) -> Result<Progress, TlsError> {
        let (a, b) = input;
        let mut progress = Progress::default();
        let result = self.read_inner(a, b, outgoing, plaintext, plain_limit, &mut progress);
        if progress.peer_closed {
            self.peer_closed = true;
        }
        match result {
            Ok(()) => Ok(progress),
            Err(e) => {
                self.state = State::Failed;
                Err(e)
            }
        }
    }

    fn read_inner(
        &mut self,
        a: &[u8],
        b: &[u8],
        outgoing: &mut Vec<u8>,
        plaintext: &mut Vec<u8>,
        plain_limit: usize,
        progress: &mut Progress,
    ) -> Result<(), TlsError> {
        if self.peer_closed {
            // Nothing after close_notify counts.
            progress.consumed = a.len() + b.len();
            return Ok(());
        }
        match &mut self.state {
            State::Failed => Err(TlsError::new(Failure::Other, "session already failed")),
            State::Handshake(h) => {
                // Taken up to what may be held; the rest waits with the
                // caller.
                let room = HANDSHAKE_HELD_MAX.saturating_sub(h.incoming.len());
                let a = &a[..a.len().min(room)];
                let b = &b[..b.len().min(room - a.len())];
                // The start of a record the last call left unfinished,
                // at the end of what rustls holds.
                let partial_held = h.headers.partial_len();
                let judged = h
                    .headers
                    .feed(a, h.answered)
                    .and_then(|()| h.headers.feed(b, h.answered));
                progress.consumed = a.len() + b.len();
                if let Err((alert, e)) = judged {
                    // What came with the refused header is not read.
                    let sealed = h.answered
                        && alert_through_rustls(h, alert, partial_held, outgoing, plaintext);
                    if !sealed {
                        // Before our first flight nothing is encrypted.
                        outgoing.extend_from_slice(&[content::ALERT, 3, 3, 0, 2, 2, alert]);
                    }
                    return Err(e);
                }
                hold(&mut h.incoming, a, b);
                let before = outgoing.len();
                let mut secrets = std::mem::take(&mut h.secrets);
                let done = secret_cache::lend(&mut secrets, || {
                    handshake(h, outgoing, plaintext, progress)
                });
                h.secrets = secrets;
                h.answered |= outgoing.len() > before;
                // rustls resolved the certificate (if it did) inside this
                // call, on this thread: note its key type now, before
                // another session's handshake runs.
                if let Some(sel) = crate::certs::take_last_selected() {
                    self.key = Some(sel.key);
                    self.sni = sel.sni;
                }
                if !done? {
                    if h.incoming.len() >= HANDSHAKE_HELD_MAX {
                        return Err(refuse_held_input(h, outgoing));
                    }
                    return Ok(());
                }
                // Done: rustls hands over the secrets; input it has not
                // read yet is opened by our record layer.
                let State::Handshake(h) = std::mem::replace(&mut self.state, State::Failed) else {
                    unreachable!()
                };
                let Handshake {
                    conn,
                    incoming,
                    handed,
                    mut secrets,
                    ..
                } = *h;
                // rustls still holds bytes of a handshake message begun in
                // the record of the client's Finished: a message spanning
                // the key change (RFC 8446 §5.1).
                if handed > 0 {
                    return Err(TlsError::new(
                        Failure::UnexpectedMessage,
                        "a handshake message spans the end of the handshake",
                    ));
                }
                self.negotiated = Some(negotiated(&conn, self.key));
                // rustls derives the application keys and IVs again from
                // the secrets it hands over: found in what it kept.
                let mut est =
                    secret_cache::lend(&mut secrets, || Established::new(conn, incoming))?;
                progress.handshake_done = true;
                let leftover = std::mem::take(&mut est.leftover);
                let n =
                    est.open_records(&leftover, &[], outgoing, plaintext, plain_limit, progress);
                if let Ok(n) = n {
                    est.leftover = keep_rest(leftover, n);
                }
                self.state = State::Established(Box::new(est));
                n.map(|_| ())
            }
            State::Established(est) => {
                if est.leftover.is_empty() {
                    progress.consumed =
                        est.open_records(a, b, outgoing, plaintext, plain_limit, progress)?;
                    return Ok(());
                }
                // Bytes that came with the handshake's last flight are
                // opened first, joined to the caller's so a record may span
                // both; the caller's bytes are taken only as far as whole
                // records used them. The leftover never grows: taking all
                // the caller's bytes into it would let a peer fill memory
                // past `plain_limit` while the reader of `plaintext` is
                // slow, and leave them unread once no more arrive.
                // Only the caller's bytes that complete the leftover's first
                // record are joined to it, once they are all there: a
                // record trickled in a byte at a time is copied once, not
                // with the whole window at every byte.
                let mut buf = std::mem::take(&mut est.leftover);
                let lead = buf.len();
                let theirs = a.len() + b.len();
                let at = |i: usize| {
                    let (l, a2) = (buf.get(i), i.checked_sub(lead));
                    l.or_else(|| a2.and_then(|j| a.get(j).or_else(|| b.get(j - a.len()))))
                        .copied()
                };
                let first = match (at(3), at(4)) {
                    (Some(hi), Some(lo)) => {
                        Some(HEADER_LEN + usize::from(u16::from_be_bytes([hi, lo])))
                    }
                    _ => None,
                };
                let take = match first {
                    // Whole in the leftover already.
                    Some(len) if len <= lead => 0,
                    // Too long to be a record: its header is enough for
                    // `open_records` to refuse it.
                    Some(len) if len > HEADER_LEN + record::MAX_CIPHERTEXT => {
                        HEADER_LEN.saturating_sub(lead).min(theirs)
                    }
                    Some(len) if len - lead <= theirs => len - lead,
                    // Not all there yet (or not even its header).
                    _ => {
                        est.leftover = buf;
                        progress.consumed = 0;
                        return Ok(());
                    }
                };
                let from_a = take.min(a.len());
                buf.extend_from_slice(&a[..from_a]);
                buf.extend_from_slice(&b[..take - from_a]);
                #[cfg(test)]
                tests::JOINED.with(|j| j.set(j.get() + buf.len()));
                let n = est.open_records(&buf, &[], outgoing, plaintext, plain_limit, progress)?;
                if n < lead {
                    progress.consumed = 0;
                    buf.truncate(lead);
                    est.leftover = keep_rest(buf, n);
                    return Ok(());
                }
                progress.consumed = n - lead;
                if n == buf.len() && take < theirs {
                    // The leftover is gone: the caller's next records are
                    // opened where they lie.
                    let (ra, rb) = if take <= a.len() {
                        (&a[take..], b)
                    } else {
                        (&b[take - a.len()..], &[][..])
                    };
                    progress.consumed +=
                        est.open_records(ra, rb, outgoing, plaintext, plain_limit, progress)?;
                }
                Ok(())
            }
        }
    }

    /// Like [`ServerSession::read`] with no plaintext limit, taking all of
    /// `data` (a partial record waits inside the session).
    ///
    /// # Errors
    /// As [`ServerSession::read`].
    pub fn process(
        &mut self,
        data: &[u8],
        outgoing: &mut Vec<u8>,
        plaintext: &mut Vec<u8>,
    ) -> Result<Progress, TlsError> {
        let mut p = self.read((data, &[]), outgoing, plaintext, usize::MAX)?;
        if p.consumed < data.len() {
            if let State::Established(est) = &mut self.state {
                est.leftover.extend_from_slice(&data[p.consumed..]);
            }
            p.consumed = data.len();
        }
        Ok(p)
    }

    fn established(&mut self) -> Result<&mut Established, TlsError> {
        match &mut self.state {
            State::Established(e) => Ok(e),
            _ => Err(TlsError::new(
                Failure::Other,
                "not ready to write application data",
            )),
        }
    }

    /// Bytes a record puts before its plaintext (header, explicit nonce)
    /// and in all; `None` before the handshake completes.
    pub fn record_layout(&self) -> Option<(usize, usize)> {
        match &self.state {
            State::Established(e) => Some((e.tx.prefix_len(), e.tx.overhead())),
            _ => None,
        }
    }

    /// Seals one application-data record in place: `record` holds the
    /// plaintext after the prefix of [`ServerSession::record_layout`] and
    /// room for the rest. Returns the record's length. Call
    /// [`ServerSession::maintain`] first.
    ///
    /// # Errors
    /// Before the handshake completes or after a failure.
    pub fn seal_in_place(
        &mut self,
        record: &mut [u8],
        plain_len: usize,
    ) -> Result<usize, TlsError> {
        let est = self.established()?;
        Ok(est
            .tx
            .seal_in_place(content::APPLICATION_DATA, record, plain_len))
    }

    /// Seals `plain` as one application-data record into `record` (room
    /// for `plain` and [`ServerSession::record_layout`]'s overhead),
    /// reading it where it is. Returns the record's length. Call
    /// [`ServerSession::maintain`] first.
    ///
    /// # Errors
    /// Before the handshake completes or after a failure.
    pub fn seal_from(&mut self, plain: &[u8], record: &mut [u8]) -> Result<usize, TlsError> {
        let est = self.established()?;
        Ok(est.tx.seal_from(content::APPLICATION_DATA, plain, record))
    }

    /// Keeps the send key within its limit: at the limit a TLS 1.3 session
    /// appends a KeyUpdate to `outgoing` (true when it did); TLS 1.2 cannot
    /// rekey and fails, to be closed.
    ///
    /// # Errors
    /// TLS 1.2 at the record limit, or no established session.
    pub fn maintain(&mut self, outgoing: &mut Vec<u8>) -> Result<bool, TlsError> {
        let est = self.established()?;
        if est.tx.seq() < est.tx_limit {
            return Ok(false);
        }
        if est.tx.protocol() == Protocol::Tls12 {
            est.alert_warning(0, outgoing);
            return Err(TlsError::new(Failure::RecordLimit, "record limit reached"));
        }
        est.update_tx(outgoing)?;
        Ok(true)
    }

    /// Test hook: the send key changes after `records` more records.
    #[doc(hidden)]
    pub fn set_tx_record_limit(&mut self, records: u64) {
        if let State::Established(e) = &mut self.state {
            e.tx_limit = e.tx.seq() + records;
        }
    }

    /// Encrypts application data into TLS records appended to `outgoing`.
    ///
    /// # Errors
    /// Before the handshake completes, or after a failure.
    pub fn encrypt(&mut self, data: &[u8], outgoing: &mut Vec<u8>) -> Result<(), TlsError> {
        for chunk in data.chunks(record::MAX_PLAINTEXT) {
            self.maintain(outgoing)?;
            let est = self.established()?;
            let (pre, over) = (est.tx.prefix_len(), est.tx.overhead());
            let start = outgoing.len();
            outgoing.resize(start + chunk.len() + over, 0);
            outgoing[start + pre..start + pre + chunk.len()].copy_from_slice(chunk);
            est.tx.seal_in_place(
                content::APPLICATION_DATA,
                &mut outgoing[start..],
                chunk.len(),
            );
        }
        Ok(())
    }

    /// Appends a fatal internal_error alert to `outgoing` and ends the
    /// session (the service behind it failed). Before the handshake
    /// completes there are no keys: nothing is appended.
    pub fn abort_with_alert(&mut self, outgoing: &mut Vec<u8>) {
        if let State::Established(e) = &mut self.state {
            e.alert(80, outgoing);
        }
        self.state = State::Failed;
    }

    /// Appends a close_notify alert to `outgoing`.
    ///
    /// # Errors
    /// Before the handshake completes, or after a failure.
    pub fn close_notify(&mut self, outgoing: &mut Vec<u8>) -> Result<(), TlsError> {
        let e = self.established()?;
        e.alert_warning(0, outgoing); // close_notify is a warning
        e.close_sent = true;
        Ok(())
    }
}

/// What remains of `buf` after its first `n` bytes; no allocation kept
/// when nothing does.
fn keep_rest(mut buf: Vec<u8>, n: usize) -> Vec<u8> {
    if n >= buf.len() {
        return Vec::new();
    }
    buf.drain(..n);
    buf
}

fn negotiated(conn: &UnbufferedServerConnection, key: Option<crate::certs::KeyType>) -> Negotiated {
    let version = match conn.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => 1,
        _ => 0,
    };
    let suite = conn
        .negotiated_cipher_suite()
        .and_then(|s| s.suite().as_str())
        .unwrap_or("other");
    let group = conn
        .negotiated_key_exchange_group()
        .and_then(|g| g.name().as_str())
        .unwrap_or("other");
    let key = key.map_or("other", crate::certs::KeyType::counter_name);
    Negotiated {
        version,
        suite: index_of(&SUITES, suite),
        group: index_of(&GROUPS, group),
        key: index_of(&KEY_TYPES, key),
        resumed: conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
    }
}

/// Appends `a` and `b` to the held handshake input, its vector grown by
/// doubling but never past [`HANDSHAKE_HELD_MAX`] (which the caller keeps
/// `a` and `b` within).
fn hold(held: &mut Vec<u8>, a: &[u8], b: &[u8]) {
    let need = held.len() + a.len() + b.len();
    if need > held.capacity() {
        let grown = (held.capacity() * 2).clamp(need, HANDSHAKE_HELD_MAX.max(need));
        held.reserve_exact(grown - held.len());
    }
    held.extend_from_slice(a);
    held.extend_from_slice(b);
}

/// Ends a handshake whose held input reached [`HANDSHAKE_HELD_MAX`]
/// without a whole message, with illegal_parameter (what OpenSSL and
/// BoringSSL answer to a handshake message over their limit) in
/// plaintext. rustls holds that message's fragments and would refuse any
/// record handed to it then without an alert of its own, so after a TLS
/// 1.3 ServerHello the client reads this one as a bad record: it fails
/// either way.
fn refuse_held_input(h: &Handshake, outgoing: &mut Vec<u8>) -> TlsError {
    const ILLEGAL_PARAMETER: u8 = 47;
    outgoing.extend_from_slice(&[content::ALERT, 3, 3, 0, 2, 2, ILLEGAL_PARAMETER]);
    let why = format!(
        "{} bytes of handshake input without a whole message",
        h.incoming.len()
    );
    TlsError::new(Failure::HandshakeTooLarge, why)
}

/// Has rustls send an alert for a record [`HeaderJudge`] refused after our
/// first flight, when rustls may be encrypting (TLS 1.3 from its
/// ServerHello on, RFC 8446 §5.1; TLS 1.2 after its ChangeCipherSpec in a
/// resumption), so the alert goes out under the keys the client expects.
/// rustls is handed, after the whole records it holds (the fragments of a
/// message, if any: its place in them must stay valid) and without the
/// unfinished record after them (its last `partial` bytes, which rustls
/// has not read), a record it refuses itself:
/// - for `unexpected_message` (a second ChangeCipherSpec, a record type
///   that is not TLS's, an empty one), a ChangeCipherSpec it refuses with
///   that alert (TLS 1.3: one whose body is not 1, RFC 8446 §5; TLS 1.2:
///   any, its Finished being due);
/// - for `record_overflow`, a header announcing 2^16 - 1 bytes, which
///   rustls refuses at once, naming every bad header `decode_error` (the
///   one alert here that is not the RFC's: only rustls holds the keys).
///
/// False, with nothing sent, where rustls sent no alert: amid a message's
/// fragments it refuses a ChangeCipherSpec without one.
fn alert_through_rustls(
    h: &mut Handshake,
    alert: u8,
    partial: usize,
    outgoing: &mut Vec<u8>,
    plaintext: &mut Vec<u8>,
) -> bool {
    const UNEXPECTED_MESSAGE: u8 = 10;
    const RECORD_OVERFLOW: u8 = 22;
    let body = match h.conn.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => 0,
        Some(rustls::ProtocolVersion::TLSv1_2) => 1,
        _ => return false,
    };
    let Some(whole) = h.incoming.len().checked_sub(partial) else {
        return false;
    };
    match alert {
        UNEXPECTED_MESSAGE => {
            h.incoming.truncate(whole);
            h.incoming
                .extend_from_slice(&[content::CHANGE_CIPHER_SPEC, 3, 3, 0, 1, body]);
        }
        RECORD_OVERFLOW => {
            // TLS 1.2 before our ChangeCipherSpec (a full handshake): our
            // own plaintext alert, the RFC's, is read.
            if body == 1 && h.conn.handshake_kind() != Some(rustls::HandshakeKind::Resumed) {
                return false;
            }
            h.incoming.truncate(whole);
            h.incoming
                .extend_from_slice(&[content::APPLICATION_DATA, 3, 3, 0xff, 0xff]);
            // Only a header: rustls is handed it as it is, not as a whole
            // record.
            h.handed = h.incoming.len();
        }
        _ => return false,
    }
    let before = outgoing.len();
    let refused = handshake(h, outgoing, plaintext, &mut Progress::default()).is_err();
    if refused && outgoing.len() > before {
        return true;
    }
    outgoing.truncate(before);
    false
}

/// Runs rustls over the buffered handshake input. True once the handshake
/// is complete (rustls reached `WriteTraffic`).
fn handshake(
    h: &mut Handshake,
    outgoing: &mut Vec<u8>,
    plaintext: &mut Vec<u8>,
    progress: &mut Progress,
) -> Result<bool, TlsError> {
    loop {
        let handed = h.handed.min(h.incoming.len());
        let UnbufferedStatus { discard, state } =
            h.conn.process_tls_records(&mut h.incoming[..handed]);
        let mut extra = 0;
        let mut failure = None;
        let mut result = None;
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
            Ok(ConnectionState::BlockedHandshake) => result = Some(Step::Blocked),
            Ok(ConnectionState::WriteTraffic(_)) => result = Some(Step::Done),
            Ok(ConnectionState::PeerClosed) => progress.peer_closed = true,
            Ok(ConnectionState::Closed) => result = Some(Step::Stop),
            // 0-RTT is not enabled; anything new in rustls: stop here.
            Ok(_) => result = Some(Step::Stop),
        }
        let drained = (discard + extra).min(handed);
        h.incoming.drain(..drained);
        h.handed = handed - drained;
        if let Some(e) = failure {
            // The alert rustls queued comes out; then the session is dead.
            let UnbufferedStatus { state, .. } =
                h.conn.process_tls_records(&mut h.incoming[..h.handed]);
            if let Ok(ConnectionState::EncodeTlsData(mut enc)) = state {
                let _ = append(outgoing, |b| enc.encode(b), encode_room);
            }
            return Err(TlsError::rustls(e));
        }
        match result {
            // Blocked on input: the next whole record, if there is one.
            Some(Step::Blocked) => match record_end(&h.incoming, h.handed) {
                Some(end) => h.handed = end,
                None => return Ok(false),
            },
            Some(Step::Done) => return Ok(true),
            Some(Step::Stop) => return Ok(false),
            None => {}
        }
    }
}

/// Where one turn of rustls' state machine left the handshake.
enum Step {
    /// Waiting for the client's next record.
    Blocked,
    /// Complete: application data may flow.
    Done,
    /// Nothing more to do now (closed, or a state we do not use).
    Stop,
}

/// The end of the whole record starting at `at` in `buf`, if it is all
/// there.
fn record_end(buf: &[u8], at: usize) -> Option<usize> {
    let header = buf.get(at..at + HEADER_LEN)?;
    let end = at + HEADER_LEN + usize::from(u16::from_be_bytes([header[3], header[4]]));
    (end <= buf.len()).then_some(end)
}

impl HeaderJudge {
    /// Judges the record headers completed by `bytes`, the client's next
    /// bytes in the handshake, as RFC 8446 §5 and §5.1 name it, before
    /// rustls sees them: a record type that is not TLS's (non-TLS bytes,
    /// an SSLv2-format hello) is unexpected_message; any record over
    /// 2^14 + 2048 bytes, and while the client is on its first flight (not
    /// `answered`) a plaintext one (handshake or alert, before any
    /// ChangeCipherSpec) over 2^14, is record_overflow at once, without
    /// waiting for the body it announces; a zero-length handshake, alert
    /// or ChangeCipherSpec record is unexpected_message; a second
    /// ChangeCipherSpec is unexpected_message (RFC 8446 D.4 allows one;
    /// rustls drops any number). Returns the alert to send.
    fn feed(&mut self, bytes: &[u8], answered: bool) -> Result<(), (u8, TlsError)> {
        let mut i = 0;
        while i < bytes.len() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len() - i);
                self.skip -= n;
                i += n;
                continue;
            }
            self.header[self.have] = bytes[i];
            self.have += 1;
            i += 1;
            if self.have == HEADER_LEN {
                self.have = 0;
                self.skip = self.judge(answered)?;
                self.body = self.skip;
            }
        }
        Ok(())
    }

    /// Bytes of the record begun and not finished (its header so far, or
    /// its header and the body so far); 0 between records.
    fn partial_len(&self) -> usize {
        if self.have > 0 {
            self.have
        } else if self.skip > 0 {
            HEADER_LEN + self.body - self.skip
        } else {
            0
        }
    }

    /// Judges the header just completed; the length of its body.
    fn judge(&mut self, answered: bool) -> Result<usize, (u8, TlsError)> {
        const PLAINTEXT_MAX: usize = record::MAX_PLAINTEXT;
        const ANY_MAX: usize = record::MAX_PLAINTEXT + 2048;
        let typ = self.header[0];
        let len = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
        let unexpected = |why: String| (10, TlsError::new(Failure::UnexpectedMessage, why));
        let overflow = |why: String| (22, TlsError::new(Failure::RecordOverflow, why));
        if typ == content::CHANGE_CIPHER_SPEC {
            if self.ccs > 0 {
                return Err(unexpected("a second ChangeCipherSpec".into()));
            }
            self.ccs = 1;
        }
        match typ {
            content::CHANGE_CIPHER_SPEC
            | content::ALERT
            | content::HANDSHAKE
            | content::APPLICATION_DATA => {}
            _ => return Err(unexpected(format!("record type {typ}: not TLS"))),
        }
        // Before our first flight, a plaintext record over 2^14 (RFC 8446
        // §5.1); after it the client may encrypt (TLS 1.3 without its
        // compatibility ChangeCipherSpec), so only the limit of any.
        let plaintext = !answered && self.ccs == 0 && typ != content::APPLICATION_DATA;
        if len > ANY_MAX || (plaintext && len > PLAINTEXT_MAX) {
            return Err(overflow(format!("a record of {len} bytes")));
        }
        if len == 0 && typ != content::APPLICATION_DATA {
            return Err(unexpected(format!("a zero-length record of type {typ}")));
        }
        Ok(len)
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

/// Fuzz entry point for the established record path: completes a real
/// handshake (TLS 1.3 when `data[0]` is even, else 1.2) with a rustls
/// client, then reads the rest of `data` as records `[type, len_hi,
/// len_lo, payload...]`, sealed with the client's real key (a type with
/// the top bit set goes in raw, unsealed), fed to the server in chunks of
/// `data[1]` bytes. Reaches alerts, KeyUpdate, renegotiation, padding,
/// framing and authentication failures. Must never panic.
#[allow(deprecated)] // dangerous_extract_secrets: the fuzzer forges client records
pub fn fuzz_established_input(config: &TlsConfig, data: &[u8]) {
    let [version, chunk, rest @ ..] = data else {
        return;
    };
    let versions: &[&'static rustls::SupportedProtocolVersion] = if version % 2 == 0 {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS12]
    };
    let mut ccfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(versions)
    .expect("versions")
    .dangerous()
    .with_custom_certificate_verifier(crate::client::accept_anything())
    .with_no_client_auth();
    ccfg.enable_secret_extraction = true;
    let Ok(mut c) = rustls::ClientConnection::new(
        std::sync::Arc::new(ccfg),
        rustls::pki_types::ServerName::try_from("fuzz.test").expect("name"),
    ) else {
        return;
    };
    let Ok(mut s) = ServerSession::new(config) else {
        return;
    };
    let (mut wire, mut out, mut plain) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..10 {
        wire.clear();
        let _ = c.write_tls(&mut wire);
        out.clear();
        if s.process(&wire, &mut out, &mut plain).is_err() {
            return;
        }
        let mut rd = &out[..];
        while !rd.is_empty() {
            if c.read_tls(&mut rd).is_err() || c.process_new_packets().is_err() {
                return;
            }
        }
    }
    if s.is_handshaking() {
        return;
    }
    let Ok(secrets) = c.dangerous_extract_secrets() else {
        return;
    };
    let protocol = if version % 2 == 0 {
        Protocol::Tls13
    } else {
        Protocol::Tls12
    };
    let mut key = RecordKey::new(protocol, &secrets.tx.1, secrets.tx.0);
    let mut stream = Vec::new();
    let mut msgs = rest;
    while let [typ, hi, lo, more @ ..] = msgs {
        let len = (usize::from(*hi) << 8 | usize::from(*lo)).min(more.len());
        let (payload, next) = more.split_at(len);
        msgs = next;
        if typ & 0x80 != 0 {
            stream.extend_from_slice(payload);
        } else if payload.len() <= record::MAX_PLAINTEXT {
            let start = stream.len();
            stream.resize(start + payload.len() + key.overhead(), 0);
            let pre = key.prefix_len();
            stream[start + pre..start + pre + payload.len()].copy_from_slice(payload);
            key.seal_in_place(*typ, &mut stream[start..], payload.len());
        }
    }
    let chunk = usize::from(*chunk).max(1) * 7;
    let mut at = 0;
    while at < stream.len() {
        let end = (at + chunk).min(stream.len());
        let mid = at + (end - at) / 2;
        out.clear();
        match s.read(
            (&stream[at..mid], &stream[mid..end]),
            &mut out,
            &mut plain,
            1 << 16,
        ) {
            Ok(p) if p.consumed > 0 => at += p.consumed,
            Ok(_) if end == stream.len() => break,
            Ok(_) => {
                // A record longer than the window: offer everything.
                match s.read((&stream[at..], &[]), &mut out, &mut plain, usize::MAX) {
                    Ok(p) if p.consumed > 0 => at += p.consumed,
                    _ => break,
                }
            }
            Err(_) => return,
        }
        plain.clear();
        let _ = s.encrypt(b"response", &mut out);
        let _ = s.maintain(&mut out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Resumption, TlsPolicy};
    use crate::record::RecordKey;
    use crate::testutil::{client_config, test_store};
    use rustls::pki_types::ServerName;
    use rustls::{ClientConfig, ClientConnection};
    use std::io::{Read, Write};
    use std::sync::Arc;

    thread_local! {
        /// Bytes joined to a session's leftover ([`ServerSession::read`]).
        pub(super) static JOINED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// Each suite's OpenSSL name is the same suite as its IANA one.
    #[test]
    fn openssl_suite_names_line_up_with_the_iana_ones() {
        for (iana, openssl) in SUITES.iter().zip(SUITES_OPENSSL) {
            let parts = |name: &str| {
                let n = name.replace('-', "_");
                (
                    ["AES_128", "AES128"].iter().any(|p| n.contains(p)),
                    ["AES_256", "AES256"].iter().any(|p| n.contains(p)),
                    n.contains("CHACHA20"),
                    n.contains("ECDSA"),
                    n.contains("RSA") && !n.contains("ECDSA"),
                )
            };
            assert_eq!(parts(iana), parts(openssl), "{iana} / {openssl}");
            assert_eq!(iana.starts_with("TLS13"), openssl.starts_with("TLS_"));
        }
    }

    /// The client's Finished comes with the start of a 10,000-byte record
    /// (held by the session past the handshake), the rest a byte at a time
    /// as the caller's ring fills: the record opens whole, and only the
    /// bytes that complete it are joined to what the session held, once.
    /// Before, every byte joined the held part to all the caller had: 50 MB
    /// copied for this one record.
    #[test]
    fn a_record_trickled_after_the_handshake_is_joined_once() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        let mut c = client_with(client_config(dir.path(), TLS13), "p256.test");
        let mut s = ServerSession::new(&cfg).unwrap();
        first_flights(&mut c, &mut s);
        let mut bytes = Vec::new();
        c.write_tls(&mut bytes).unwrap();
        let finished = bytes.len();
        c.writer().write_all(&[b'x'; 10_000]).unwrap();
        while c.wants_write() {
            c.write_tls(&mut bytes).unwrap();
        }
        let mut pending = bytes[..finished + 100].to_vec();
        let (mut out, mut plain) = (Vec::new(), Vec::new());
        JOINED.with(|j| j.set(0));
        for next in bytes[finished + 100..].iter().map(Some).chain([None]) {
            let p = s
                .read((&pending, &[]), &mut out, &mut plain, usize::MAX)
                .unwrap();
            pending.drain(..p.consumed);
            if let Some(&b) = next {
                pending.push(b);
            }
        }
        assert_eq!(plain, vec![b'x'; 10_000]);
        assert!(pending.is_empty());
        let joined = JOINED.with(std::cell::Cell::get);
        assert!(joined < 2 * bytes.len(), "{joined} bytes joined");
    }

    pub(super) type Versions = &'static [&'static rustls::SupportedProtocolVersion];
    pub(super) const TLS13: Versions = &[&rustls::version::TLS13];
    pub(super) const TLS12: Versions = &[&rustls::version::TLS12];

    fn server(dir: &std::path::Path, f: impl FnOnce(&mut TlsPolicy)) -> TlsConfig {
        let mut p = TlsPolicy::default();
        f(&mut p);
        TlsConfig::with_policy(test_store(dir), &p).unwrap()
    }

    /// `test_store`'s names and the key type each is served with.
    const TEST_NAMES: [(&str, &str); 3] = [
        ("rsa.test", "RSA-2048"),
        ("p256.test", "ECDSA-P256"),
        ("p384.test", "ECDSA-P384"),
    ];

    fn client_with(cfg: Arc<ClientConfig>, sni: &str) -> ClientConnection {
        ClientConnection::new(cfg, ServerName::try_from(sni.to_string()).unwrap()).unwrap()
    }

    pub(super) fn client(dir: &std::path::Path, sni: &str, versions: Versions) -> ClientConnection {
        client_with(client_config(dir, versions), sni)
    }

    /// Hands `c`'s ClientHello to `s` and the server's answer back to `c`.
    pub(super) fn first_flights(c: &mut ClientConnection, s: &mut ServerSession) {
        let mut hello = Vec::new();
        c.write_tls(&mut hello).unwrap();
        let mut out = Vec::new();
        s.process(&hello, &mut out, &mut Vec::new()).unwrap();
        c.read_tls(&mut &out[..]).unwrap();
        c.process_new_packets().unwrap();
    }

    /// `c`'s first flights with `s`, then two ChangeCipherSpecs from the
    /// client: the second is refused with unexpected_message; what the
    /// server sent since (its alert).
    pub(super) fn second_ccs_refused(c: &mut ClientConnection, s: &mut ServerSession) -> Vec<u8> {
        first_flights(c, s);
        let ccs = [20, 3, 3, 0, 1, 1];
        let mut out = Vec::new();
        s.process(&ccs, &mut out, &mut Vec::new()).unwrap();
        let e = s.process(&ccs, &mut out, &mut Vec::new()).unwrap_err();
        assert_eq!(e.reason, Failure::UnexpectedMessage, "{e}");
        out
    }

    /// The alert `c` reads in the server's `out` (it must end `c`).
    pub(super) fn alert_read_by(c: &mut ClientConnection, out: &[u8]) -> rustls::AlertDescription {
        c.read_tls(&mut &out[..]).unwrap();
        match c.process_new_packets() {
            Err(rustls::Error::AlertReceived(a)) => a,
            other => panic!("no alert read: {other:?}"),
        }
    }

    /// Moves bytes both ways until quiet; the server reads through
    /// `read` (whole records, partial ones stay in `wire`).
    fn pump(
        c: &mut ClientConnection,
        s: &mut ServerSession,
        wire: &mut Vec<u8>,
        plain: &mut Vec<u8>,
    ) {
        for _ in 0..10 {
            c.write_tls(wire).unwrap();
            let mut out = Vec::new();
            let p = s.read((wire, &[]), &mut out, plain, usize::MAX).unwrap();
            wire.drain(..p.consumed);
            c.read_tls(&mut &out[..]).unwrap();
            c.process_new_packets().unwrap();
        }
    }

    fn read_all(c: &mut ClientConnection, n: usize) -> Vec<u8> {
        let mut got = vec![0u8; n];
        c.reader().read_exact(&mut got).unwrap();
        got
    }

    /// Drives `s`'s handshake with `c` through [`handshake`] and hands
    /// the secrets over as [`ServerSession::read`] does, the session's
    /// [`SecretCache`] lent to both when `lent`; the SHA compressions the
    /// server did in the handshake and in the hand-over.
    fn handshake_counting(
        c: &mut ClientConnection,
        s: ServerSession,
        lent: bool,
    ) -> (Established, u64, u64) {
        let State::Handshake(mut h) = s.state else {
            panic!("not handshaking")
        };
        let mut secrets = SecretCache::default();
        let mut run = |f: &mut dyn FnMut() -> bool| match lent {
            true => secret_cache::lend(&mut secrets, f),
            false => f(),
        };
        let mut in_handshake = 0;
        for _ in 0..10 {
            c.write_tls(&mut h.incoming).unwrap();
            let (mut out, mut plain, mut progress) = (Vec::new(), Vec::new(), Progress::default());
            let before = crate::hashing::compressions();
            let done = run(&mut || handshake(&mut h, &mut out, &mut plain, &mut progress).unwrap());
            in_handshake += crate::hashing::compressions() - before;
            c.read_tls(&mut &out[..]).unwrap();
            c.process_new_packets().unwrap();
            if done {
                let before = crate::hashing::compressions();
                let mut parts = Some((h.conn, h.incoming));
                let mut est = None;
                run(&mut || {
                    let (conn, incoming) = parts.take().unwrap();
                    est = Some(Established::new(conn, incoming).unwrap());
                    true
                });
                let in_hand_over = crate::hashing::compressions() - before;
                return (est.unwrap(), in_handshake, in_hand_over);
            }
        }
        panic!("the handshake did not complete");
    }

    #[test]
    fn the_key_schedule_derives_nothing_twice_with_the_secret_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = server(dir.path(), |_| {});
        // RSA: a signature of fixed length, so every handshake hashes the
        // same transcript (an ECDSA signature's DER length varies).
        let mut counts = Vec::new();
        // A first handshake makes the key schedule's per-process
        // constants; the next ones are counted.
        for (i, lent) in [true, true, false].into_iter().enumerate() {
            let mut c = client(dir.path(), "rsa.test", TLS13);
            let s = ServerSession::new(&cfg).unwrap();
            let (mut est, in_handshake, in_hand_over) = handshake_counting(&mut c, s, lent);
            if i > 0 {
                counts.push((in_handshake, in_hand_over));
            }
            // The record layer's keys are the client's, both ways.
            let mut rec = [0u8; 64];
            let pre = est.tx.prefix_len();
            rec[pre..pre + 5].copy_from_slice(b"hello");
            let n = est.tx.seal_in_place(content::APPLICATION_DATA, &mut rec, 5);
            c.read_tls(&mut &rec[..n]).unwrap();
            c.process_new_packets().unwrap();
            assert_eq!(read_all(&mut c, 5), b"hello");
            let mut wire = Vec::new();
            c.writer().write_all(b"world").unwrap();
            c.write_tls(&mut wire).unwrap();
            let mut plain = Vec::new();
            let mut progress = Progress::default();
            est.open_records(
                &wire,
                &[],
                &mut Vec::new(),
                &mut plain,
                usize::MAX,
                &mut progress,
            )
            .unwrap();
            assert_eq!(plain, b"world");
        }
        let [(with, with_hand_over), (without, without_hand_over)] = counts[..] else {
            unreachable!()
        };
        // `read` lends the session's cache: its handshake and hand-over
        // together cost what the lent run's did.
        let mut c = client(dir.path(), "rsa.test", TLS13);
        let mut s = ServerSession::new(&cfg).unwrap();
        let mut through_read = 0;
        let (mut wire, mut plain) = (Vec::new(), Vec::new());
        while s.is_handshaking() {
            c.write_tls(&mut wire).unwrap();
            let mut out = Vec::new();
            let before = crate::hashing::compressions();
            let p = s
                .read((&wire, &[]), &mut out, &mut plain, usize::MAX)
                .unwrap();
            through_read += crate::hashing::compressions() - before;
            wire.drain(..p.consumed);
            c.read_tls(&mut &out[..]).unwrap();
            c.process_new_packets().unwrap();
        }
        assert_eq!(through_read, with);
        // The hand-over re-derives both application secrets' HMAC keys,
        // keys and IVs (two compressions each); the handshake prepares
        // each handshake secret's HMAC key again for its Finished key.
        assert_eq!((with_hand_over, without_hand_over), (0, 12));
        assert_eq!(without - with, 4);
    }

    #[test]
    fn a_tls12_key_block_is_derived_once() {
        // rustls derives it when it installs the record keys and again
        // when it hands the secrets over; the second comes from the
        // session's cache.
        let dir = tempfile::tempdir().unwrap();
        let cfg = server(dir.path(), |_| {});
        for sni in ["p256.test", "rsa.test"] {
            let mut c = client(dir.path(), sni, TLS12);
            let mut s = ServerSession::new(&cfg).unwrap();
            let before = crate::tls12_prf::key_blocks_computed();
            let (mut wire, mut plain) = (Vec::new(), Vec::new());
            pump(&mut c, &mut s, &mut wire, &mut plain);
            assert!(!s.is_handshaking() && !c.is_handshaking(), "{sni}");
            assert_eq!(crate::tls12_prf::key_blocks_computed() - before, 1, "{sni}");
            // Both directions' keys are the client's.
            c.writer().write_all(b"request").unwrap();
            pump(&mut c, &mut s, &mut wire, &mut plain);
            assert_eq!(plain, b"request");
            let mut out = Vec::new();
            s.encrypt(b"response", &mut out).unwrap();
            assert_eq!(deliver(&mut c, &out), b"response");
        }
    }

    #[test]
    fn handshake_and_data_both_ways_for_each_key_and_version() {
        let dir = tempfile::tempdir().unwrap();
        for versions in [TLS13, TLS12] {
            let cfg = server(dir.path(), |p| p.versions = vec![]);
            for (sni, key) in TEST_NAMES {
                let mut c = client(dir.path(), sni, versions);
                let mut s = ServerSession::new(&cfg).unwrap();
                let (mut wire, mut plain) = (Vec::new(), Vec::new());
                pump(&mut c, &mut s, &mut wire, &mut plain);
                assert!(!s.is_handshaking() && !c.is_handshaking(), "{sni}");
                let n = s.negotiated().unwrap();
                let tls13 = c.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3);
                assert_eq!(n.version, usize::from(tls13));
                assert_eq!(
                    SUITES[n.suite],
                    c.negotiated_cipher_suite()
                        .unwrap()
                        .suite()
                        .as_str()
                        .unwrap()
                );
                assert_ne!(GROUPS[n.group], "other", "{sni}");
                assert_eq!(KEY_TYPES[n.key], key, "{sni}");
                assert!(!n.resumed);

                // Client → server, across several records.
                let request: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
                c.writer().write_all(&request).unwrap();
                pump(&mut c, &mut s, &mut wire, &mut plain);
                assert_eq!(plain, request, "{sni}");

                // Server → client, with our record layer.
                let response: Vec<u8> = (0..50_000u32).map(|i| (i * 7) as u8).collect();
                let mut out = Vec::new();
                s.encrypt(&response, &mut out).unwrap();
                assert_eq!(deliver(&mut c, &out), response);

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

    /// Each engine serves from its own copy of a VIP's configuration
    /// (`TlsConfig::own_copy`). Handshakes through a copy, every key and
    /// version, serve what the original serves, and leave every reference
    /// count of the original as it was (the configuration, each
    /// certificate, each signing key): with one configuration shared by
    /// all engines, each handshake wrote those counts from every core.
    #[test]
    fn handshakes_through_an_own_copy_leave_the_original_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let original = server(dir.path(), |p| p.versions = vec![]);
        let copy = original.own_copy();
        let before = original.counted_parts();
        let copied = copy.counted_parts();
        assert_eq!(before.len(), copied.len());
        // The configuration, then each certificate's CertifiedKey and
        // key (RSA-2048, P-256, P-384): only the RSA and P-384 keys are
        // shared.
        let shared: Vec<bool> = before
            .iter()
            .zip(&copied)
            .map(|(o, c)| o.0 == c.0)
            .collect();
        assert_eq!(
            shared,
            [false, false, true, false, false, false, true],
            "{before:?} {copied:?}"
        );
        let mut live = Vec::new();
        for versions in [TLS13, TLS12] {
            for (sni, key) in TEST_NAMES {
                let mut c = client(dir.path(), sni, versions);
                let mut s = ServerSession::new(&copy).unwrap();
                let (mut wire, mut plain) = (Vec::new(), Vec::new());
                pump(&mut c, &mut s, &mut wire, &mut plain);
                assert!(!s.is_handshaking() && !c.is_handshaking(), "{sni}");
                assert_eq!(KEY_TYPES[s.negotiated().unwrap().key], key, "{sni}");
                let leaf = c.peer_certificates().unwrap()[0].clone();
                assert!(leaf
                    .as_ref()
                    .windows(sni.len())
                    .any(|w| w == sni.as_bytes()));
                assert_eq!(original.counted_parts(), before, "{sni} {versions:?}");
                live.push(s);
            }
        }
        // A session just begun holds its engine's configuration.
        live.push(ServerSession::new(&copy).unwrap());
        assert_eq!(original.counted_parts(), before);
        assert!(copy.counted_parts()[0].1 > copied[0].1);
    }

    /// A configuration whose keys are all P-256 shares nothing with its
    /// copies; a store's keys are parsed again up to
    /// `OWN_KEYS_PER_STORE`, and the rest shared (a copy per engine of
    /// thousands of keys would hold the control thread for seconds).
    #[test]
    fn own_copies_of_p256_keys_are_bounded_per_store() {
        let dir = tempfile::tempdir().unwrap();
        test_store(dir.path());
        let p = |ext: &str| dir.path().join(format!("p256.{ext}"));
        let cert = crate::certs::Cert::load(&p("pem"), &p("key"), crate::testutil::now()).unwrap();
        let config = |n: usize| {
            let mut store = crate::certs::CertStore::new();
            for _ in 0..n {
                store.add(cert.clone());
            }
            TlsConfig::new(store).unwrap()
        };
        let one = config(1);
        assert!(!one.own_copy().shares_with(&one) && one.shares_with(&one.clone()));
        let many = config(crate::certs::OWN_KEYS_PER_STORE + 1);
        let copy = many.own_copy();
        let (before, copied) = (many.counted_parts(), copy.counted_parts());
        let shared = before
            .iter()
            .zip(&copied)
            .filter(|(o, c)| o.0 == c.0)
            .count();
        assert_eq!(shared, 1, "the last key only");
        assert_eq!(before.last().map(|b| b.0), copied.last().map(|c| c.0));
    }

    #[test]
    fn byte_at_a_time_input_works() {
        // TCP may deliver a record in pieces: the session must wait for
        // the rest and consume nothing it cannot use.
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        let mut c = client(dir.path(), "p256.test", TLS13);
        let mut s = ServerSession::new(&cfg).unwrap();
        let mut plain = Vec::new();
        c.writer().write_all(b"early-ish request").unwrap();
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
        assert_eq!(plain, b"early-ish request");
        assert_eq!(s.buffered(), 0, "nothing held once the records are whole");
    }

    #[test]
    fn records_are_read_from_two_slices_and_partial_ones_left_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        for versions in [TLS13, TLS12] {
            let mut c = client(dir.path(), "p256.test", versions);
            let mut s = ServerSession::new(&cfg).unwrap();
            let (mut wire, mut plain) = (Vec::new(), Vec::new());
            pump(&mut c, &mut s, &mut wire, &mut plain);
            let data: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
            c.writer().write_all(&data).unwrap();
            let mut wire = Vec::new();
            c.write_tls(&mut wire).unwrap();
            // Split everywhere a ring might wrap, and feed a little at a
            // time: whole records are taken, the rest stays.
            let mut got = Vec::new();
            let mut at = 0;
            let mut step = 1;
            while at < wire.len() {
                let end = (at + 7000 + step * 13).min(wire.len());
                let mid = at + (end - at) * step % 97 / 97;
                let p = s
                    .read(
                        (&wire[at..mid], &wire[mid..end]),
                        &mut Vec::new(),
                        &mut got,
                        usize::MAX,
                    )
                    .unwrap();
                at += p.consumed;
                if p.consumed == 0 {
                    // A record longer than this window: widen it.
                    let p = s
                        .read((&wire[at..], &[]), &mut Vec::new(), &mut got, usize::MAX)
                        .unwrap();
                    at += p.consumed;
                }
                step += 1;
            }
            assert_eq!(got, data);
            // The plaintext limit stops reading at a record boundary.
            c.writer().write_all(&data).unwrap();
            let mut wire = Vec::new();
            c.write_tls(&mut wire).unwrap();
            let mut got = Vec::new();
            let p = s.read((&wire, &[]), &mut Vec::new(), &mut got, 10).unwrap();
            assert!(
                got.len() >= 10 && got.len() <= record::MAX_PLAINTEXT,
                "{}",
                got.len()
            );
            assert!(p.consumed < wire.len());
            let p2 = s
                .read(
                    (&wire[p.consumed..], &[]),
                    &mut Vec::new(),
                    &mut got,
                    usize::MAX,
                )
                .unwrap();
            assert_eq!(p.consumed + p2.consumed, wire.len());
            assert_eq!(got, data);
        }
    }

    #[test]
    fn a_record_split_after_the_finished_never_pulls_in_more_than_it_needs() {
        // The read that ends the handshake stops inside an application
        // record; the session keeps that part. The next read joins it to
        // the caller's bytes but takes of those only what completes whole
        // records within the plaintext limit. (It took them all into its
        // own buffer, unbounded while the reader was slow, and once the
        // peer went quiet nothing opened them: a 100 MB upload through the
        // proxy stalled with its bytes taken and not passed on.)
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        let mut c = client(dir.path(), "p256.test", TLS13);
        let mut s = ServerSession::new(&cfg).unwrap();
        let (mut wire, mut out, mut plain) = (Vec::new(), Vec::new(), Vec::new());
        c.write_tls(&mut wire).unwrap();
        let p = s
            .read((&wire, &[]), &mut out, &mut plain, usize::MAX)
            .unwrap();
        wire.drain(..p.consumed);
        c.read_tls(&mut &out[..]).unwrap();
        c.process_new_packets().unwrap();
        // One record of data after the Finished (the handshake takes in
        // no more than HANDSHAKE_HELD_MAX).
        let data: Vec<u8> = (0..12_000u32).map(|i| (i % 251) as u8).collect();
        c.writer().write_all(&data).unwrap();
        c.write_tls(&mut wire).unwrap();
        assert!(wire.len() < HANDSHAKE_HELD_MAX);
        // Finished and most of the data; the record cut short.
        let cut = wire.len() - 3000;
        let p = s
            .read((&wire[..cut], &[]), &mut Vec::new(), &mut plain, 1000)
            .unwrap();
        assert!(p.handshake_done);
        assert_eq!(p.consumed, cut);
        assert!(s.has_pending_input(), "the split record is kept");
        // The rest of that record, then more from the client.
        c.writer().write_all(b"more").unwrap();
        let mut tail = wire[cut..].to_vec();
        c.write_tls(&mut tail).unwrap();
        let mut got = std::mem::take(&mut plain);
        let p = s
            .read((&tail, &[]), &mut Vec::new(), &mut plain, 1000)
            .unwrap();
        assert_eq!(p.consumed, 3000, "only what completes the split record");
        assert!(!s.has_pending_input());
        got.append(&mut plain);
        assert_eq!(got, data);
        let p = s
            .read((&tail[3000..], &[]), &mut Vec::new(), &mut plain, 1000)
            .unwrap();
        assert_eq!((p.consumed, &plain[..]), (tail.len() - 3000, &b"more"[..]));
    }

    #[test]
    fn key_updates_both_ways_and_before_the_record_limit() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        let mut c = client(dir.path(), "p256.test", TLS13);
        let mut s = ServerSession::new(&cfg).unwrap();
        let (mut wire, mut plain) = (Vec::new(), Vec::new());
        pump(&mut c, &mut s, &mut wire, &mut plain);
        // The client updates its keys and asks us to update ours.
        c.refresh_traffic_keys().unwrap();
        c.writer().write_all(b"after the client's update").unwrap();
        let mut w = Vec::new();
        c.write_tls(&mut w).unwrap();
        let mut out = Vec::new();
        let p = s.process(&w, &mut out, &mut plain).unwrap();
        assert_eq!((p.key_updates_received, p.key_updates_sent), (1, 1));
        assert_eq!(plain, b"after the client's update");
        s.encrypt(b"after ours", &mut out).unwrap();
        c.read_tls(&mut &out[..]).unwrap();
        c.process_new_packets().unwrap();
        assert_eq!(read_all(&mut c, 10), b"after ours");

        // Our own update at the record limit, transparently to the client.
        s.set_tx_record_limit(3);
        let mut out = Vec::new();
        let big = vec![b'z'; 10 * record::MAX_PLAINTEXT];
        s.encrypt(&big, &mut out).unwrap();
        assert_eq!(deliver(&mut c, &out), big);
    }

    /// Several KeyUpdates asking for ours while we send nothing are
    /// answered with one (RFC 8446 §4.6.3), which the client takes; after
    /// our next record, the next request gets its own answer. Before,
    /// each got one: two key derivations of ours per request.
    #[test]
    fn update_requests_while_we_are_silent_get_one_answer() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        let mut c = client(dir.path(), "p256.test", TLS13);
        let mut s = ServerSession::new(&cfg).unwrap();
        pump(&mut c, &mut s, &mut Vec::new(), &mut Vec::new());
        let requests = |c: &mut ClientConnection, n| {
            for _ in 0..n {
                c.refresh_traffic_keys().unwrap();
            }
            c.writer().write_all(b"q").unwrap();
            let mut w = Vec::new();
            c.write_tls(&mut w).unwrap();
            w
        };
        let (mut out, mut plain) = (Vec::new(), Vec::new());
        let p = s
            .process(&requests(&mut c, 5), &mut out, &mut plain)
            .unwrap();
        assert_eq!((p.key_updates_received, p.key_updates_sent), (5, 1));
        s.encrypt(b"x", &mut out).unwrap();
        assert_eq!(deliver(&mut c, &out), b"x");
        out.clear();
        let p = s
            .process(&requests(&mut c, 1), &mut out, &mut plain)
            .unwrap();
        assert_eq!((p.key_updates_received, p.key_updates_sent), (1, 1));
        s.encrypt(b"y", &mut out).unwrap();
        assert_eq!(deliver(&mut c, &out), b"y");
        assert_eq!(plain, b"qq");
    }

    /// A request that comes after our own update at the record limit is
    /// answered, though we sent no record since the last one we answered
    /// (the new key's sequence number is 0 again). Before, it looked
    /// answered already, and our next data went out without the
    /// KeyUpdate RFC 8446 §4.6.3 requires before it.
    #[test]
    fn a_request_after_our_update_at_the_record_limit_is_answered() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        let mut c = client(dir.path(), "p256.test", TLS13);
        let mut s = ServerSession::new(&cfg).unwrap();
        pump(&mut c, &mut s, &mut Vec::new(), &mut Vec::new());
        let request = |c: &mut ClientConnection| {
            c.refresh_traffic_keys().unwrap();
            c.writer().write_all(b"q").unwrap();
            let mut w = Vec::new();
            c.write_tls(&mut w).unwrap();
            w
        };
        let (mut out, mut plain) = (Vec::new(), Vec::new());
        let p = s.process(&request(&mut c), &mut out, &mut plain).unwrap();
        assert_eq!(p.key_updates_sent, 1);
        s.set_tx_record_limit(0);
        assert!(s.maintain(&mut out).unwrap(), "our own update");
        let p = s.process(&request(&mut c), &mut out, &mut plain).unwrap();
        assert_eq!(p.key_updates_sent, 1, "the second request answered");
        s.encrypt(b"x", &mut out).unwrap();
        assert_eq!(deliver(&mut c, &out), b"x");
    }

    /// KeyUpdates without application data between them are bounded as
    /// BoringSSL bounds them (32, its kMaxKeyUpdates; rustls' counter
    /// stays behind at the handover): the 33rd is unexpected_message.
    /// Data between them starts the count again.
    #[test]
    fn key_updates_without_data_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        let mut c = client(dir.path(), "p256.test", TLS13);
        let mut s = ServerSession::new(&cfg).unwrap();
        pump(&mut c, &mut s, &mut Vec::new(), &mut Vec::new());
        let updates = |c: &mut ClientConnection, n, data: &[u8]| {
            for _ in 0..n {
                c.refresh_traffic_keys().unwrap();
            }
            c.writer().write_all(data).unwrap();
            let mut w = Vec::new();
            c.write_tls(&mut w).unwrap();
            w
        };
        let (mut out, mut plain) = (Vec::new(), Vec::new());
        s.process(&updates(&mut c, 32, b"d"), &mut out, &mut plain)
            .unwrap();
        s.process(&updates(&mut c, 32, b""), &mut out, &mut plain)
            .unwrap();
        assert_eq!(plain, b"d");
        let e = s
            .process(&updates(&mut c, 1, b""), &mut out, &mut plain)
            .unwrap_err();
        assert_eq!(e.reason, Failure::UnexpectedMessage, "{e}");
    }

    /// A TLS 1.3 client that asks for a key update right behind its
    /// Finished, in the same read: rustls finishes the handshake, and
    /// the update (and the data after it) is ours to answer. Before,
    /// rustls read on past the Finished, answered the update into a queue
    /// the handover dropped and moved its send key: the client never got
    /// our KeyUpdate and failed on our first record.
    #[test]
    fn a_key_update_behind_the_clients_finished_is_answered() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        let mut c = client(dir.path(), "p256.test", TLS13);
        let mut s = ServerSession::new(&cfg).unwrap();
        first_flights(&mut c, &mut s);
        c.refresh_traffic_keys().unwrap();
        c.writer().write_all(b"behind the update").unwrap();
        let mut finished_and_more = Vec::new();
        c.write_tls(&mut finished_and_more).unwrap();
        let (mut out, mut plain) = (Vec::new(), Vec::new());
        let p = s.process(&finished_and_more, &mut out, &mut plain).unwrap();
        assert!(p.handshake_done);
        assert_eq!((p.key_updates_received, p.key_updates_sent), (1, 1));
        assert_eq!(plain, b"behind the update");
        s.encrypt(b"answered", &mut out).unwrap();
        assert_eq!(deliver(&mut c, &out), b"answered");
    }

    /// Feeds all of `tls` to the client; returns the plaintext it yields.
    fn deliver(c: &mut ClientConnection, tls: &[u8]) -> Vec<u8> {
        let mut rd = tls;
        let mut got = Vec::new();
        while !rd.is_empty() {
            c.read_tls(&mut rd).unwrap();
            c.process_new_packets().unwrap();
            let _ = c.reader().read_to_end(&mut got);
        }
        got
    }

    #[test]
    fn tls12_stops_at_the_record_limit() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        let mut c = client(dir.path(), "p256.test", TLS12);
        let mut s = ServerSession::new(&cfg).unwrap();
        pump(&mut c, &mut s, &mut Vec::new(), &mut Vec::new());
        s.set_tx_record_limit(2);
        let mut out = Vec::new();
        let e = s
            .encrypt(&[0u8; 3 * record::MAX_PLAINTEXT], &mut out)
            .unwrap_err();
        assert_eq!(e.reason, Failure::RecordLimit);
    }

    /// A session past a real handshake with `versions`, the client's
    /// record key (to forge its records) and its receive key (to read
    /// ours).
    #[allow(deprecated)] // dangerous_extract_secrets: to forge client records
    pub(super) fn established_forger(
        dir: &std::path::Path,
        versions: Versions,
    ) -> (ServerSession, RecordKey, RecordKey) {
        let cfg = TlsConfig::new(test_store(dir)).unwrap();
        let mut ccfg = (*client_config(dir, versions)).clone();
        ccfg.enable_secret_extraction = true;
        let mut c = client_with(Arc::new(ccfg), "p256.test");
        let mut s = ServerSession::new(&cfg).unwrap();
        pump(&mut c, &mut s, &mut Vec::new(), &mut Vec::new());
        let protocol = if versions == TLS13 {
            crate::record::Protocol::Tls13
        } else {
            crate::record::Protocol::Tls12
        };
        let secrets = c.dangerous_extract_secrets().unwrap();
        let tx = RecordKey::new(protocol, &secrets.tx.1, secrets.tx.0);
        let rx = RecordKey::new(protocol, &secrets.rx.1, secrets.rx.0);
        (s, tx, rx)
    }

    /// One record of `typ` around `payload`, sealed with `key`.
    pub(super) fn sealed(key: &mut RecordKey, typ: u8, payload: &[u8]) -> Vec<u8> {
        let mut rec = vec![0u8; payload.len() + key.overhead()];
        let pre = key.prefix_len();
        rec[pre..pre + payload.len()].copy_from_slice(payload);
        let n = key.seal_in_place(typ, &mut rec, payload.len());
        rec.truncate(n);
        rec
    }

    /// The alerts (level, description) among our records in `out`.
    pub(super) fn alerts_in(key: &mut RecordKey, mut out: &[u8]) -> Vec<(u8, u8)> {
        let mut found = Vec::new();
        while out.len() >= HEADER_LEN {
            let mut header = [0u8; HEADER_LEN];
            header.copy_from_slice(&out[..HEADER_LEN]);
            let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
            let body = &out[HEADER_LEN..HEADER_LEN + len];
            let mut plain = vec![0u8; len];
            let (typ, n) = key.open(&header, body, &mut plain).unwrap();
            if typ == content::ALERT && n == 2 {
                found.push((plain[0], plain[1]));
            }
            out = &out[HEADER_LEN + len..];
        }
        found
    }

    /// A ClientHello handshake message with just its fixed fields.
    pub(super) fn client_hello_message() -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[0x11; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x00, 0x2f, 1, 0]);
        let mut m = vec![1, 0, 0, body.len() as u8];
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn no_signature_scheme_in_common_is_a_handshake_failure() {
        // A client that can verify only RSA-PSS asks for p256.test, whose
        // certificate is ECDSA: RFC 8446 §4.1.1 names handshake_failure
        // (40); it used to be access_denied (49), which scanners take for
        // a policy refusal. The same for TLS 1.2.
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        for versions in [TLS13, TLS12] {
            let verifier = Arc::new(crate::client::NoVerification(vec![
                rustls::SignatureScheme::RSA_PSS_SHA256,
            ]));
            let ccfg = ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .with_protocol_versions(versions)
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
            let mut c = client_with(Arc::new(ccfg), "p256.test");
            let mut s = ServerSession::new(&cfg).unwrap();
            let mut failure = None;
            for _ in 0..5 {
                let mut wire = Vec::new();
                c.write_tls(&mut wire).unwrap();
                let mut out = Vec::new();
                if let Err(e) = s.process(&wire, &mut out, &mut Vec::new()) {
                    failure.get_or_insert(e.reason);
                }
                c.read_tls(&mut &out[..]).unwrap();
                if let Err(e) = c.process_new_packets() {
                    assert_eq!(
                        e,
                        rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure),
                        "{versions:?}"
                    );
                    break;
                }
            }
            assert_eq!(failure, Some(Failure::NoSharedParameters), "{versions:?}");
        }
    }

    #[test]
    fn a_key_update_ends_its_record_and_a_bad_request_is_illegal_parameter() {
        let dir = tempfile::tempdir().unwrap();
        // A record packed with KeyUpdate(update_requested): RFC 8446 §5.1
        // wants a key change at the end of its record, so it is refused
        // with unexpected_message before any update (there used to be one
        // reply per message: thousands per record).
        let (mut s, mut tx, mut rx) = established_forger(dir.path(), TLS13);
        let packed: Vec<u8> = [24u8, 0, 0, 1, 1].repeat(3000);
        let rec = sealed(&mut tx, content::HANDSHAKE, &packed);
        let mut out = Vec::new();
        let e = s.process(&rec, &mut out, &mut Vec::new()).unwrap_err();
        assert_eq!(e.reason, Failure::UnexpectedMessage, "{e}");
        assert_eq!(
            alerts_in(&mut rx, &out),
            [(2, 10)],
            "one fatal alert, no update"
        );
        // request_update = 2 (RFC 8446 §4.6.3): illegal_parameter.
        let (mut s, mut tx, mut rx) = established_forger(dir.path(), TLS13);
        let rec = sealed(&mut tx, content::HANDSHAKE, &[24, 0, 0, 1, 2]);
        let mut out = Vec::new();
        let e = s.process(&rec, &mut out, &mut Vec::new()).unwrap_err();
        assert_eq!(e.reason, Failure::IllegalParameter, "{e}");
        assert_eq!(alerts_in(&mut rx, &out), [(2, 47)]);
        // A well-formed one at the end of its record still works.
        let (mut s, mut tx, _) = established_forger(dir.path(), TLS13);
        let rec = sealed(&mut tx, content::HANDSHAKE, &[24, 0, 0, 1, 0]);
        let p = s.process(&rec, &mut Vec::new(), &mut Vec::new()).unwrap();
        assert_eq!(p.key_updates_received, 1);
    }

    #[test]
    fn tls12_hellos_packed_in_a_record_are_refused_not_answered_each() {
        let dir = tempfile::tempdir().unwrap();
        // Empty ClientHellos (a 4-byte header each): decode_error.
        let (mut s, mut tx, mut rx) = established_forger(dir.path(), TLS12);
        let rec = sealed(&mut tx, content::HANDSHAKE, &[1u8, 0, 0, 0].repeat(4000));
        let mut out = Vec::new();
        let e = s.process(&rec, &mut out, &mut Vec::new()).unwrap_err();
        assert_eq!(e.reason, Failure::DecodeError, "{e}");
        assert_eq!(alerts_in(&mut rx, &out), [(2, 50)]);
        // Well-formed ones: the first gets its no_renegotiation warning,
        // the second ends the connection.
        let (mut s, mut tx, mut rx) = established_forger(dir.path(), TLS12);
        let rec = sealed(
            &mut tx,
            content::HANDSHAKE,
            &client_hello_message().repeat(100),
        );
        let mut out = Vec::new();
        let e = s.process(&rec, &mut out, &mut Vec::new()).unwrap_err();
        assert_eq!(e.reason, Failure::UnexpectedMessage, "{e}");
        assert_eq!(alerts_in(&mut rx, &out), [(1, 100), (2, 10)]);
    }

    /// A TLS 1.2 client that tries to renegotiate gets a no_renegotiation
    /// warning and the connection carries on.
    #[test]
    #[allow(deprecated)] // dangerous_extract_secrets: to forge client records
    fn tls12_renegotiation_is_refused_and_the_connection_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        let mut ccfg = (*client_config(dir.path(), TLS12)).clone();
        ccfg.enable_secret_extraction = true;
        let mut c = client_with(Arc::new(ccfg), "p256.test");
        let mut s = ServerSession::new(&cfg).unwrap();
        pump(&mut c, &mut s, &mut Vec::new(), &mut Vec::new());
        let tx = c.dangerous_extract_secrets().unwrap().tx;
        let mut forge = RecordKey::new(crate::record::Protocol::Tls12, &tx.1, tx.0);
        let mut rec = vec![0u8; 128];
        let pre = forge.prefix_len();
        // A ClientHello handshake message with its fixed fields.
        let hello = client_hello_message();
        rec[pre..pre + hello.len()].copy_from_slice(&hello);
        let n = forge.seal_in_place(content::HANDSHAKE, &mut rec, hello.len());
        rec.truncate(n);
        let mut rec2 = vec![0u8; 64];
        rec2[pre..pre + 5].copy_from_slice(b"hello");
        let n2 = forge.seal_in_place(content::APPLICATION_DATA, &mut rec2, 5);
        rec.extend_from_slice(&rec2[..n2]);
        let (mut out, mut plain) = (Vec::new(), Vec::new());
        let p = s.process(&rec, &mut out, &mut plain).unwrap();
        assert_eq!(p.renegotiations_refused, 1);
        assert_eq!(plain, b"hello", "the connection goes on");
        assert!(!out.is_empty(), "a warning alert went out");
    }

    #[test]
    fn tickets_resume_when_on_and_never_when_off() {
        let dir = tempfile::tempdir().unwrap();
        let on = server(dir.path(), |p| {
            p.resumption = Resumption::Tickets {
                rotate_s: 3600,
                key_file: None,
            }
        });
        let off = server(dir.path(), |_| {});
        for versions in [TLS13, TLS12] {
            for (cfg, want) in [(&on, true), (&off, false)] {
                let ccfg = client_config(dir.path(), versions);
                let mut resumed = Vec::new();
                for _ in 0..2 {
                    let mut c = client_with(ccfg.clone(), "p256.test");
                    let mut s = ServerSession::new(cfg).unwrap();
                    c.writer().write_all(b"x").unwrap();
                    pump(&mut c, &mut s, &mut Vec::new(), &mut Vec::new());
                    resumed.push(s.negotiated().unwrap().resumed);
                }
                assert_eq!(resumed, [false, want], "{versions:?}");
            }
        }
    }

    #[test]
    fn a_second_change_cipher_spec_in_a_tls12_resumption_is_refused_sealed() {
        // Resuming, the server sends its ChangeCipherSpec and Finished
        // first: its alert to the client's second ChangeCipherSpec must go
        // out under its new key (RFC 5246 §7.1), which the client opens.
        let dir = tempfile::tempdir().unwrap();
        let cfg = server(dir.path(), |p| {
            p.resumption = Resumption::Tickets {
                rotate_s: 3600,
                key_file: None,
            }
        });
        let ccfg = client_config(dir.path(), TLS12);
        let mut c = client_with(ccfg.clone(), "p256.test");
        let mut s = ServerSession::new(&cfg).unwrap();
        c.writer().write_all(b"x").unwrap();
        pump(&mut c, &mut s, &mut Vec::new(), &mut Vec::new());
        let mut c = client_with(ccfg, "p256.test");
        let mut s = ServerSession::new(&cfg).unwrap();
        let out = second_ccs_refused(&mut c, &mut s);
        assert!(
            out.len() > 7 && out[0] == 21,
            "an alert record, sealed: {out:?}"
        );
        assert_eq!(
            alert_read_by(&mut c, &out),
            rustls::AlertDescription::UnexpectedMessage
        );
        assert_eq!(c.handshake_kind(), Some(rustls::HandshakeKind::Resumed));
    }

    #[test]
    fn groups_follow_the_policy_and_alpn_is_enforced() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        for (group, name) in [
            (
                rustls::crypto::aws_lc_rs::kx_group::X25519MLKEM768,
                "X25519MLKEM768",
            ),
            (rustls::crypto::aws_lc_rs::kx_group::X25519, "X25519"),
            (rustls::crypto::aws_lc_rs::kx_group::SECP256R1, "secp256r1"),
            (rustls::crypto::aws_lc_rs::kx_group::SECP384R1, "secp384r1"),
        ] {
            let ccfg = (*client_config(dir.path(), TLS13)).clone();
            let mut provider = (**ccfg.crypto_provider()).clone();
            provider.kx_groups = vec![group];
            let ccfg = ClientConfig::builder_with_provider(Arc::new(provider))
                .with_protocol_versions(TLS13)
                .unwrap()
                .with_root_certificates(ccfg_roots(dir.path()))
                .with_no_client_auth();
            let mut c = client_with(Arc::new(ccfg), "p256.test");
            let mut s = ServerSession::new(&cfg).unwrap();
            pump(&mut c, &mut s, &mut Vec::new(), &mut Vec::new());
            assert_eq!(GROUPS[s.negotiated().unwrap().group], name);
        }
        // The policy's list decides which groups may be used (rustls takes
        // the client's order among them); a group the client sent no share
        // for costs a HelloRetryRequest.
        for (order, want) in [
            (vec![], "X25519MLKEM768"),
            (
                vec!["X25519".to_string(), "secp256r1".to_string()],
                "X25519",
            ),
            (vec!["P-384".to_string()], "secp384r1"),
        ] {
            let server_cfg = server(dir.path(), |p| p.groups = order.clone());
            let mut provider = rustls::crypto::aws_lc_rs::default_provider();
            provider.kx_groups = vec![
                rustls::crypto::aws_lc_rs::kx_group::X25519MLKEM768,
                rustls::crypto::aws_lc_rs::kx_group::X25519,
                rustls::crypto::aws_lc_rs::kx_group::SECP384R1,
            ];
            let ccfg = ClientConfig::builder_with_provider(Arc::new(provider))
                .with_protocol_versions(TLS13)
                .unwrap()
                .with_root_certificates(ccfg_roots(dir.path()))
                .with_no_client_auth();
            let mut c = client_with(Arc::new(ccfg), "p256.test");
            let mut s = ServerSession::new(&server_cfg).unwrap();
            pump(&mut c, &mut s, &mut Vec::new(), &mut Vec::new());
            assert_eq!(GROUPS[s.negotiated().unwrap().group], want, "{order:?}");
        }

        // ALPN: http/1.1 chosen; an h2-only client is refused.
        let mut ccfg = (*client_config(dir.path(), TLS13)).clone();
        ccfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let mut c = client_with(Arc::new(ccfg.clone()), "p256.test");
        let mut s = ServerSession::new(&cfg).unwrap();
        pump(&mut c, &mut s, &mut Vec::new(), &mut Vec::new());
        assert_eq!(c.alpn_protocol(), Some(&b"http/1.1"[..]));
        ccfg.alpn_protocols = vec![b"h2".to_vec()];
        let mut c = client_with(Arc::new(ccfg), "p256.test");
        let mut s = ServerSession::new(&cfg).unwrap();
        let mut w = Vec::new();
        c.write_tls(&mut w).unwrap();
        let e = s.process(&w, &mut Vec::new(), &mut Vec::new()).unwrap_err();
        assert_eq!(e.reason, Failure::NoApplicationProtocol);
    }

    fn ccfg_roots(dir: &std::path::Path) -> rustls::RootCertStore {
        let ca = rustls_pemfile::certs(&mut &std::fs::read(dir.join("ca.pem")).unwrap()[..])
            .next()
            .unwrap()
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        roots
    }

    #[test]
    fn garbage_is_a_clean_error_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TlsConfig::new(test_store(dir.path())).unwrap();
        let mut s = ServerSession::new(&cfg).unwrap();
        let junk = b"GET / HTTP/1.1\r\nHost: plain-http-to-a-tls-port\r\n\r\n".to_vec();
        let mut out = Vec::new();
        let err = s.process(&junk, &mut out, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().starts_with("TLS: "), "{err}");
        assert_eq!(err.reason, Failure::UnexpectedMessage, "{err}");
        assert!(!out.is_empty(), "an alert is sent before closing");
        assert!(
            s.encrypt(b"x", &mut Vec::new()).is_err(),
            "no data after a failed handshake"
        );

        // A record that fails authentication after the handshake.
        let mut c = client(dir.path(), "p256.test", TLS13);
        let mut s = ServerSession::new(&cfg).unwrap();
        pump(&mut c, &mut s, &mut Vec::new(), &mut Vec::new());
        c.writer().write_all(b"data").unwrap();
        let mut w = Vec::new();
        c.write_tls(&mut w).unwrap();
        let last = w.len() - 1;
        w[last] ^= 1;
        let mut out = Vec::new();
        let err = s.process(&w, &mut out, &mut Vec::new()).unwrap_err();
        assert_eq!(err.reason, Failure::BadRecordMac);
        c.read_tls(&mut &out[..]).unwrap();
        assert!(
            c.process_new_packets().is_err(),
            "the client got a fatal alert"
        );
    }
}

#[cfg(test)]
#[path = "session_rfc_tests.rs"]
mod rfc_tests;
