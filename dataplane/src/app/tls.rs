//! TLS VIPs: the responder behind a [`ServerSession`] on each connection.
//!
//! Receive: the session opens whole records straight from the TCP receive
//! ring into the connection's plaintext buffer (one pass; a record that
//! wraps around the ring is gathered first) and the ring gives the bytes
//! back. Send: the responder writes its plaintext straight into the TCP
//! send ring, between room left for the record header and tag, and the
//! session seals it there in place; small writes (response heads) are
//! coalesced into the next record. Only where the ring's free space wraps
//! is a record built aside and copied in. Buffers are given back whenever
//! they empty (the plaintext ones to the engine's [`SpareBuffers`], for
//! the next request), so an idle connection holds none.

use crypto::session::{Failure, Negotiated, Progress, ServerSession, TlsConfig};

use super::budget::HandshakeBudget;
use super::proxy::{ClientStream, ProxyLink};
use super::responder::{Responder, Session, Stream};
use super::role::{Inner, TlsRole};
use super::Tcp;
use crate::tcp::{ConnId, Unread};

/// Decrypted bytes waiting for the responder, at most; beyond it records
/// stay in the TCP ring and its window closes (back-pressure).
const PLAIN_IN_MAX: usize = 32 * 1024;
/// TLS bytes of the session's own (alerts, KeyUpdates, handshake
/// flights) waiting for the TCP send ring, beyond which no more input is
/// read: a client that never reads cannot make them pile up (the TCP
/// window then closes on it). A handshake flight is well below this; the
/// session itself stops opening records at the same bound, so one read
/// adds at most one record's answer past it.
const CIPHER_OUT_MAX: usize = crypto::session::OUTGOING_MAX;
/// Small writes coalesced into the next record, at most.
const PENDING_MAX: usize = 16 * 1024;
/// Largest plaintext per record.
const RECORD: usize = crypto::record::MAX_PLAINTEXT;
/// Least contiguous ring room worth sealing a record in place (below it
/// the record is built aside and copied: the free space wraps).
const MIN_IN_PLACE: usize = 512;

/// Empty plaintext buffers of an engine's TLS connections, kept for the
/// next one that needs one: a keep-alive request takes a buffer from here
/// rather than from the allocator, and an idle connection still holds
/// none. At most [`SPARE_MAX`] buffers of at most [`SPARE_CAPACITY`].
#[derive(Debug, Default)]
pub struct SpareBuffers {
    free: Vec<Vec<u8>>,
}

/// Most spare buffers an engine keeps.
const SPARE_MAX: usize = 64;
/// Largest spare buffer kept (a record's plaintext and a little more).
const SPARE_CAPACITY: usize = 32 * 1024;

impl SpareBuffers {
    /// An empty buffer, with the capacity a spare one has.
    fn take(&mut self) -> Vec<u8> {
        self.free.pop().unwrap_or_default()
    }

    /// Keeps `v` (emptied) if there is room and it is not too large.
    fn give(&mut self, mut v: Vec<u8>) {
        if self.free.len() < SPARE_MAX && v.capacity() <= SPARE_CAPACITY {
            v.clear();
            self.free.push(v);
        }
    }
}

/// One connection's TLS state and buffers.
#[derive(Debug)]
pub struct TlsConn {
    session: ServerSession,
    /// Decrypted application data not yet consumed by the responder.
    pub(crate) plain_in: Vec<u8>,
    /// Small plaintext writes waiting to be sealed with the next record.
    pending: Vec<u8>,
    /// TLS bytes from the session (handshake flights, alerts, KeyUpdates)
    /// not yet in the TCP send ring; always sent before new records.
    cipher_out: Vec<u8>,
    /// The responder asked to close: close_notify after the last data.
    pub(crate) closing: bool,
    /// Our close_notify is made: the bytes of this connection queued to
    /// TCP before it (a client reset once they are all acknowledged
    /// refused nothing but our close: the connection log's `closed`).
    pub(crate) close_sent_at: Option<u64>,
    failed: bool,
    /// Why it failed, when a TLS error of the client's ended it.
    failure: Option<crypto::session::Failure>,
    /// It failed while sending (the TLS 1.2 record limit): counted by
    /// the next [`drive`]'s outcome.
    send_failed: bool,
    /// Failed with its alert (or close_notify) not all in the send ring
    /// yet: the FIN waits until it is ([`TlsConn::end_after_flush`]).
    fin_after_flush: bool,
    /// In the engine's queue of handshakes waiting for budget.
    pub(crate) queued: bool,
    /// When its handshake completed (engine time), for the connection log.
    pub(crate) handshake_done: Option<crate::time::Instant>,
    /// Bytes of its buffers charged to the engine's buffer pool
    /// ([`TlsConn::settle_charge`]); refunded when it ends.
    charged: usize,
}

impl TlsConn {
    /// # Errors
    /// When the configuration cannot start a session.
    pub fn new(config: &TlsConfig) -> Result<Self, crypto::session::TlsError> {
        Ok(Self {
            session: ServerSession::new(config)?,
            plain_in: Vec::new(),
            pending: Vec::new(),
            cipher_out: Vec::new(),
            closing: false,
            close_sent_at: None,
            failed: false,
            failure: None,
            send_failed: false,
            fin_after_flush: false,
            queued: false,
            handshake_done: None,
            charged: 0,
        })
    }

    /// Charges the engine's buffer pool (`[tcp] buffer_memory_mib`) what
    /// its buffers hold now, or refunds what they gave back, so that
    /// TLS's buffers count against the cap with TCP's rings.
    pub(crate) fn settle_charge(&mut self, pool: &mut crate::tcp::BufferPool) {
        let now = self.buffered();
        if now > self.charged {
            pool.charge(now - self.charged);
        } else {
            pool.refund(self.charged - now);
        }
        self.charged = now;
    }

    /// Bytes charged to the buffer pool, to refund as it ends (or as
    /// what it carries for a proxied client's backend goes); none after.
    pub(crate) fn take_charge(&mut self) -> usize {
        std::mem::take(&mut self.charged)
    }

    /// Heap bytes this connection's TLS state holds in buffers now.
    pub fn buffered(&self) -> usize {
        self.plain_in.capacity()
            + self.pending.capacity()
            + self.cipher_out.capacity()
            + self.session.buffered()
    }

    pub fn is_handshaking(&self) -> bool {
        self.session.is_handshaking()
    }

    /// The connection failed on a TLS error (counted then).
    pub fn failed(&self) -> bool {
        self.failed
    }

    /// The TLS error that ended the connection, if one did.
    pub fn failure(&self) -> Option<crypto::session::Failure> {
        self.failure
    }

    /// Takes the name the client asked for (SNI) out of the session.
    pub fn take_server_name(&mut self) -> Option<Box<str>> {
        self.session.take_server_name()
    }

    /// Decrypted bytes wait to be passed on.
    pub(crate) fn has_plaintext(&self) -> bool {
        !self.plain_in.is_empty()
    }

    /// The session holds input it has not opened yet (what came with the
    /// handshake's last flight).
    pub(crate) fn holds_input(&self) -> bool {
        self.session.has_pending_input()
    }

    /// Records after the handshake can still be decrypted (it ended and
    /// did not fail).
    pub(crate) fn can_read(&self) -> bool {
        !self.failed && !self.session.is_handshaking()
    }

    /// Whether nothing waits to be sealed or moved to TCP (a response
    /// head, ciphertext).
    pub(crate) fn all_sealed_sent(&self) -> bool {
        self.pending.is_empty() && self.cipher_out.is_empty()
    }

    /// The TLS session (what it negotiated).
    pub fn session(&self) -> &ServerSession {
        &self.session
    }

    /// Ends the session with a fatal alert (queued; see
    /// [`TlsConn::flush_alert`]).
    pub fn abort_with_alert(&mut self) {
        self.session.abort_with_alert(&mut self.cipher_out);
        self.failed = true;
    }

    /// Sends what the session queued (an alert) as TCP room allows.
    pub fn flush_alert(&mut self, tcp: &mut Tcp, id: ConnId) {
        self.flush_cipher(tcp, id);
    }

    /// After the client's reset, for its backend `to`: moves what was
    /// decrypted, then the whole records left in `unread` (the client's
    /// receive ring, a [`PLAIN_IN_MAX`] of plaintext at a time), into
    /// `to`'s send ring as far as it takes them. True once nothing is left
    /// to move; a partial record at the end, or one that fails, is dropped
    /// (the client is gone: nothing is sent back to it).
    pub(crate) fn carry_rest(
        &mut self,
        tcp: &mut Tcp,
        unread: Option<&mut Unread>,
        to: ConnId,
    ) -> bool {
        let mut unread = unread;
        loop {
            let n = tcp.send(to, &self.plain_in);
            self.plain_in.drain(..n);
            if !self.plain_in.is_empty() {
                return false;
            }
            let Some(u) = unread.as_deref_mut() else {
                return true;
            };
            if !self.can_read() {
                return true;
            }
            self.cipher_out.clear();
            let read = self.session.read(
                u.as_slices(),
                &mut self.cipher_out,
                &mut self.plain_in,
                PLAIN_IN_MAX,
            );
            match read {
                Ok(p) if p.consumed > 0 || !self.plain_in.is_empty() => u.consume(p.consumed),
                _ => return true,
            }
        }
    }

    /// Gives back buffers that emptied: the plaintext ones to `spare`.
    fn release_idle(&mut self, spare: &mut SpareBuffers) {
        for v in [&mut self.plain_in, &mut self.pending] {
            if v.is_empty() && v.capacity() > 0 {
                spare.give(std::mem::take(v));
            }
        }
        if self.cipher_out.is_empty() && self.cipher_out.capacity() > 0 {
            self.cipher_out = Vec::new();
        }
    }

    /// After a failure: what is queued (the alert) goes to the send ring,
    /// then the FIN; with the ring full, the FIN waits for the room the
    /// client's ACKs make (each [`drive`] tries again), so a client that
    /// filled its window still learns why.
    fn end_after_flush(&mut self, tcp: &mut Tcp, id: ConnId) {
        if self.flush_cipher(tcp, id) {
            self.fin_after_flush = false;
            tcp.close(id);
        } else {
            self.fin_after_flush = true;
        }
    }

    /// Moves `cipher_out` into the TCP send ring; true when it is empty.
    fn flush_cipher(&mut self, tcp: &mut Tcp, id: ConnId) -> bool {
        if !self.cipher_out.is_empty() {
            let sent = tcp.send(id, &self.cipher_out);
            self.cipher_out.drain(..sent);
        }
        self.cipher_out.is_empty()
    }

    /// Readies the send side for a record: a KeyUpdate due goes out first,
    /// and earlier ciphertext must have left for the ring. The record
    /// layout (prefix, overhead) when a record can be sealed now.
    fn record_room(&mut self, tcp: &mut Tcp, id: ConnId) -> Option<(usize, usize)> {
        if self.failed {
            return None;
        }
        if let Err(e) = self.session.maintain(&mut self.cipher_out) {
            // TLS 1.2 at its record limit (its close_notify queued: without
            // renegotiation there is no way on), or a key update that
            // failed: the session ends here, as after a read error: what
            // is queued goes, then the FIN.
            self.failure = Some(e.reason);
            self.failed = true;
            self.send_failed = true;
            self.end_after_flush(tcp, id);
            return None;
        }
        if !self.flush_cipher(tcp, id) {
            return None;
        }
        self.session.record_layout()
    }

    /// Seals one record of a prefix of `data` straight into the TCP send
    /// ring, reading `data` once (no plaintext copy). Returns the bytes of
    /// `data` taken (0: no room). With bytes pending from `send` (a
    /// response head), or free space that wraps, the record is built by
    /// [`TlsConn::seal_record`]'s copies instead.
    pub(crate) fn seal_from(&mut self, tcp: &mut Tcp, id: ConnId, data: &[u8]) -> usize {
        let mut copy = |room: &mut [u8]| {
            let n = room.len().min(data.len());
            room[..n].copy_from_slice(&data[..n]);
            n
        };
        if !self.pending.is_empty() || data.is_empty() {
            return self.seal_record(tcp, id, data.len(), &mut copy);
        }
        let Some((_, overhead)) = self.record_room(tcp, id) else {
            return 0;
        };
        let session = &mut self.session;
        let room_needed = overhead + MIN_IN_PLACE.min(data.len());
        let mut taken = 0;
        tcp.send_with(id, RECORD + overhead, |room| {
            if room.len() < room_needed {
                return 0;
            }
            let n = (room.len() - overhead).min(RECORD).min(data.len());
            match session.seal_from(&data[..n], room) {
                Ok(len) => {
                    taken = n;
                    len
                }
                Err(_) => 0,
            }
        });
        if taken == 0 {
            return self.seal_record(tcp, id, data.len(), &mut copy);
        }
        taken
    }

    /// Seals one record of pending bytes followed by what `fill` writes
    /// (at most `max`) into the TCP send ring. Returns the bytes `fill`
    /// wrote (0: no room, or nothing to fill).
    pub(crate) fn seal_record(
        &mut self,
        tcp: &mut Tcp,
        id: ConnId,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> usize {
        let Some((prefix, overhead)) = self.record_room(tcp, id) else {
            return 0;
        };
        let (session, pending) = (&mut self.session, &mut self.pending);
        let (mut filled, mut taken) = (0, 0);
        let mut seal = |room: &mut [u8]| -> usize {
            let cap = (room.len() - overhead).min(RECORD);
            taken = pending.len().min(cap);
            room[prefix..prefix + taken].copy_from_slice(&pending[..taken]);
            let want = (cap - taken).min(max);
            if want > 0 {
                filled = fill(&mut room[prefix + taken..prefix + taken + want]).min(want);
            }
            if taken + filled == 0 {
                return 0;
            }
            session.seal_in_place(room, taken + filled).unwrap_or(0)
        };
        // In place, when the ring has contiguous room.
        let room_needed = overhead + MIN_IN_PLACE.min(pending.len() + max);
        let n = tcp.send_with(id, RECORD + overhead, |room| {
            if room.len() < room_needed {
                return 0;
            }
            seal(room)
        });
        if n == 0 {
            // Free space that wraps: build the record aside, copy it in.
            let space = tcp.send_space(id);
            if space >= room_needed {
                let mut buf = std::mem::take(&mut self.cipher_out);
                buf.resize(space.min(RECORD + overhead), 0);
                let len = seal(&mut buf);
                buf.truncate(len);
                self.cipher_out = buf;
                self.flush_cipher(tcp, id);
            }
        }
        self.pending.drain(..taken);
        filled
    }
}

/// The plaintext side of a TLS connection as the responder's [`Stream`].
struct TlsStream<'a> {
    tcp: &'a mut Tcp,
    id: ConnId,
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
        let Some((_, overhead)) = self.tls.session.record_layout() else {
            return 0;
        };
        let room = self
            .tcp
            .send_space(self.id)
            .saturating_sub(self.tls.cipher_out.len() + self.tls.pending.len());
        let records = room / (RECORD + overhead) + 1;
        room.saturating_sub(records * overhead)
            .min(PENDING_MAX - self.tls.pending.len())
    }
    fn send(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.send_space());
        self.tls.pending.extend_from_slice(&data[..n]);
        n
    }
    fn send_with(&mut self, max: usize, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> usize {
        self.tls.seal_record(self.tcp, self.id, max, fill)
    }
    fn send_from(&mut self, data: &[u8]) -> usize {
        self.tls.seal_from(self.tcp, self.id, data)
    }
    fn close(&mut self) {
        self.tls.closing = true;
    }
}

/// What [`drive`] saw, for the engine's counters.
#[derive(Debug, Default, Clone, Copy)]
pub struct TlsOutcome {
    /// What the handshake negotiated, when it completed in this call.
    pub negotiated: Option<Negotiated>,
    /// Why the connection failed, when it did in this call.
    pub failure: Option<Failure>,
    pub key_updates: u32,
    pub renegotiations_refused: u32,
    /// Handshake input waits for the next iteration: the budget was spent.
    pub deferred: bool,
}

/// A proxied TLS connection's backend, when it is there: its handle and
/// link.
pub type BackendSide<'a> = Option<(ConnId, &'a mut ProxyLink)>;

/// Moves a TLS connection forward: ciphertext in, its inner role
/// (responder, or forwarding to and from `backend`), ciphertext out,
/// close_notify and TCP close at the end. Handshake work (the costly
/// part) starts only while `handshake_budget` allows, and is charged
/// the time it took.
#[allow(clippy::too_many_arguments)]
pub fn drive(
    tcp: &mut Tcp,
    id: ConnId,
    t: &mut TlsRole,
    mut backend: BackendSide<'_>,
    responder: &mut Responder,
    peer_closed: bool,
    handshake_budget: &mut HandshakeBudget,
    scratch: &mut [u8],
    spare: &mut SpareBuffers,
) -> TlsOutcome {
    let mut outcome = TlsOutcome::default();
    let TlsRole { conn: tls, inner } = t;
    // A responder's client is done once the records before its FIN are
    // read (below); a proxied one's FIN goes on after what it forwards.
    if let (true, Inner::Proxy(l)) = (peer_closed, &mut *inner) {
        l.fin_received = true;
    }
    if tls.failed {
        // Nothing is read after a TLS error: what the client still sends
        // is dropped, so it holds no buffer and the connection can leave
        // for the compact TIME-WAIT table once it closes.
        let (a, b) = tcp.peek(id);
        let unread = a.len() + b.len();
        if unread > 0 {
            tcp.consume(id, unread);
        }
        if tls.fin_after_flush {
            tls.end_after_flush(tcp, id);
        }
    }
    for _ in 0..8 {
        if tls.failed {
            break;
        }
        let mut progressed = false;
        // Input that a read with room could not take: a record begun and
        // never finished (after a FIN, it never will be).
        let mut input_stuck = false;
        let (a, b) = tcp.peek(id);
        let waiting = a.len() + b.len();
        let input = waiting > 0 || tls.session.has_pending_input();
        if input && tls.plain_in.len() < PLAIN_IN_MAX && tls.cipher_out.len() < CIPHER_OUT_MAX {
            let handshaking = tls.session.is_handshaking();
            if handshaking && !handshake_budget.allows() {
                outcome.deferred = true;
                break;
            }
            let step = handshaking.then(|| handshake_budget.start());
            if tls.plain_in.capacity() == 0 {
                tls.plain_in = spare.take();
            }
            let plain_before = tls.plain_in.len();
            let result =
                tls.session
                    .read((a, b), &mut tls.cipher_out, &mut tls.plain_in, PLAIN_IN_MAX);
            if let Some(step) = step {
                handshake_budget.charge(step);
            }
            match result {
                Ok(p) => {
                    tcp.consume(id, p.consumed);
                    progressed = p.consumed > 0 || tls.plain_in.len() != plain_before;
                    input_stuck = !progressed;
                    note(&mut outcome, &p, &tls.session);
                    if p.peer_closed {
                        match inner {
                            Inner::Responder(http) => http.peer_closed = true,
                            Inner::Proxy(l) => l.fin_received = true,
                        }
                    } else if !progressed
                        && matches!(inner, Inner::Proxy(_))
                        && tls.plain_in.is_empty()
                        && record_cut_by_fin(tcp, id, &tls.session)
                    {
                        // No byte can come to complete the record: the
                        // stream was cut. Once all before it went on, it
                        // has failed (no alert: it is no bad record), so
                        // the backend is reset, never handed a FIN that
                        // makes the cut stream look whole.
                        tcp.consume(id, waiting);
                        tls.failed = true;
                        tls.failure = Some(crypto::session::Failure::DecodeError);
                        outcome.failure = tls.failure;
                        tcp.close(id);
                        break;
                    }
                }
                Err(e) => {
                    // The alert (if any) goes out, then the connection ends.
                    tcp.consume(id, waiting);
                    tls.failed = true;
                    tls.failure = Some(e.reason);
                    outcome.failure = Some(e.reason);
                    tls.end_after_flush(tcp, id);
                    break;
                }
            }
        }
        let ready = !tls.session.is_handshaking() && !tls.failed;
        match inner {
            Inner::Proxy(link) => {
                // After our close_notify the client may still send (TLS
                // half-close): its bytes and its FIN still go on.
                if ready {
                    let before = (tcp.send_space(id), tls.plain_in.len());
                    let can_send = tls.close_sent_at.is_none();
                    let stream = ClientStream::Tls { tls, can_send };
                    match backend.as_mut() {
                        Some((b, blink)) => {
                            super::proxy::pump(tcp, (id, link), stream, (*b, blink), scratch);
                        }
                        // Its backend ended: what it left goes on.
                        None => super::proxy::deliver_rest(tcp, (id, link), stream, scratch),
                    }
                    // Bytes went either way: read again (what was
                    // decrypted went on, so more fits, or a cut record
                    // behind it is found).
                    progressed |= (tcp.send_space(id), tls.plain_in.len()) != before;
                }
            }
            Inner::Responder(http) => {
                // The client's FIN: nothing more comes once every record
                // before it is read, or what is left can never be one. The
                // responder then finishes the answers under way (however
                // long) and those to requests already read, and closes.
                if ready && !http.peer_closed && fin_came(tcp, id) {
                    let (a, b) = tcp.peek(id);
                    let left = a.len() + b.len() > 0 || tls.session.has_pending_input();
                    http.peer_closed = !left || input_stuck;
                }
                if ready && tls.close_sent_at.is_none() {
                    if tls.pending.capacity() == 0 {
                        tls.pending = spare.take();
                    }
                    let before = tcp.send_space(id);
                    responder.pump(&mut TlsStream { tcp, id, http, tls });
                    // Heads and small bodies still waiting: seal them now.
                    while !tls.pending.is_empty() && !tls.failed {
                        let left = tls.pending.len();
                        tls.seal_record(tcp, id, 0, &mut |_| 0);
                        if tls.pending.len() == left {
                            break;
                        }
                    }
                    progressed |= tcp.send_space(id) != before;
                }
            }
        }
        if tls.closing && tls.pending.is_empty() && tls.close_sent_at.is_none() {
            let before = tcp.bytes_queued(id) + tls.cipher_out.len() as u64;
            let _ = tls.session.close_notify(&mut tls.cipher_out);
            tls.close_sent_at = Some(before);
        }
        let flushed = tls.flush_cipher(tcp, id);
        if tls.close_sent_at.is_some() && flushed {
            tcp.close(id);
            break;
        }
        // A client that closes before its handshake ends has no request
        // and no backend: close too. (After it, the responder or the
        // proxy link passes the close on once all before it is done.)
        let peer_done = match inner {
            Inner::Responder(_) => fin_came(tcp, id),
            Inner::Proxy(link) => link.fin_received,
        };
        if peer_done && tls.session.is_handshaking() && !tls.closing {
            tls.closing = true;
            continue;
        }
        if !progressed {
            break;
        }
    }
    if std::mem::take(&mut tls.send_failed) {
        outcome.failure = tls.failure;
    }
    tls.release_idle(spare);
    outcome
}

/// Whether connection `id`'s client sent its FIN with the start of a
/// record, and no more, waiting (in the TCP ring, or held by the session
/// since the handshake): after its handshake, before its close_notify.
/// Asked after a read with room in `plain_in` made nothing of the input
/// (a whole record would have been opened).
fn record_cut_by_fin(tcp: &Tcp, id: ConnId, session: &ServerSession) -> bool {
    if !fin_came(tcp, id) || session.is_handshaking() {
        return false;
    }
    if session.has_pending_input() {
        // What came with the Finished, held by the session, and a read
        // with room made nothing of it: the start of a record.
        return true;
    }
    let (a, b) = tcp.peek(id);
    let byte = |i: usize| a.get(i).or_else(|| b.get(i.wrapping_sub(a.len()))).copied();
    let waiting = a.len() + b.len();
    match (byte(3), byte(4)) {
        (Some(hi), Some(lo)) => {
            waiting < crypto::record::HEADER_LEN + usize::from(u16::from_be_bytes([hi, lo]))
        }
        _ => waiting > 0,
    }
}

/// Whether connection `id`'s peer has sent its FIN.
fn fin_came(tcp: &Tcp, id: ConnId) -> bool {
    use crate::tcp::State;
    matches!(
        tcp.state(id),
        Some(State::CloseWait | State::LastAck | State::Closing | State::TimeWait)
    )
}

fn note(outcome: &mut TlsOutcome, p: &Progress, session: &ServerSession) {
    if p.handshake_done {
        outcome.negotiated = session.negotiated();
    }
    outcome.key_updates += p.key_updates_received;
    outcome.renegotiations_refused += p.renegotiations_refused;
}
