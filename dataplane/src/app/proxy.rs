//! Forwarding a VIP's connections to pool members: each client connection
//! (plaintext, or the decrypted side of TLS) is paired with a backend
//! connection the same engine opened. Bytes move ring to ring with TCP's
//! own back-pressure (a full send buffer leaves bytes in the other side's
//! receive buffer, whose window then closes); a FIN is passed on once
//! everything before it has been; resets and timeouts end the pair.

use std::net::{IpAddr, SocketAddr};

use super::pool::Tried;
use super::proxy_protocol;
use super::role::Role;
use super::services::EPHEMERAL;
use super::tls::TlsConn;
use super::{Cx, Services, Tcp, Uplink};
use crate::tcp::{AnyFlowKey, CloseReason, ConnId, ConnectError, Unread};

/// Why [`Services::open_to`] opened no connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpenError {
    /// No port's network reaches the address (or its family).
    NoRoute,
    /// TCP's connection table is full (`max_connections`).
    TableFull,
    /// Every source port tried is in use towards it.
    NoSourcePort,
}

/// Which end of a pair a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Backend,
}

/// A proxied connection's link to its pair.
#[derive(Debug)]
pub struct ProxyLink {
    pub side: Side,
    /// Index of the pool in the engine.
    pub pool: u16,
    /// The member this pair goes to (client side: once chosen).
    pub member: Option<u16>,
    /// The other connection, with its flow key to tell a reused slot.
    pub peer: Option<(ConnId, AnyFlowKey)>,
    /// Members already tried for this client (connect failures).
    pub tried: Tried,
    /// The backend connection is established.
    pub connected: bool,
    /// This connection's peer sent FIN (or close_notify).
    pub fin_received: bool,
    /// We passed that FIN on to the other connection.
    pub fin_passed: bool,
    /// Bytes moved from this connection to the other.
    pub forwarded: u64,
    /// A backend's: what its client sent before its reset, still to go.
    pub carry: Option<Box<Carry>>,
    /// A client's: what its backend sent before it ended, still to go.
    pub rest: Option<Box<BackendRest>>,
    /// A client's: what its backend did to end it, for the connection
    /// log (none: it ended otherwise).
    pub backend_trouble: Option<BackendTrouble>,
}

/// Why a proxied client was ended by its backend's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendTrouble {
    /// No member could take it (all down, refusing, or not answering
    /// within the pool's connect timeout).
    NoMember,
    /// Its backend reset (or timed out) before its answer was whole: the
    /// client got what it had sent, then a reset.
    Reset,
}

impl ProxyLink {
    pub fn new(side: Side, pool: u16) -> Self {
        Self {
            side,
            pool,
            member: None,
            peer: None,
            tried: 0,
            connected: false,
            fin_received: false,
            fin_passed: false,
            forwarded: 0,
            carry: None,
            rest: None,
            backend_trouble: None,
        }
    }
}

/// What a client sent before its reset that its backend connection's
/// send ring could not take yet, kept on the backend's link: moved on as
/// the backend acknowledges ([`Services::carry_on`]), then the backend is
/// reset (or, when it had finished its answer, closed). The bytes stay
/// where they were: the client's receive ring, counted in the buffer
/// pool, and a TLS client's decrypted plaintext.
#[derive(Debug)]
pub struct Carry {
    /// The PROXY protocol header, where the client reset before its
    /// backend was up (and so before the header went): sent first.
    header: Vec<u8>,
    bytes: Carried,
    end: BackendEnd,
}

#[derive(Debug)]
enum Carried {
    /// A plain client's receive ring.
    Unread(Unread),
    /// A TLS client's session (its decrypted bytes) and receive ring (its
    /// records not decrypted yet: a [`TlsConn::carry_rest`] at a time, so
    /// that the plaintext held stays as bounded as a live connection's).
    Tls(Box<TlsConn>, Option<Unread>),
}

/// How a backend connection ends once its client's last bytes are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BackendEnd {
    /// It had not finished its answer: a reset once they are delivered.
    Reset,
    /// It had (its FIN passed on): a FIN after them.
    Close,
}

impl BackendEnd {
    fn apply(self, tcp: &mut Tcp, backend: ConnId) {
        match self {
            Self::Reset => tcp.abort_after_send(backend),
            Self::Close => tcp.close(backend),
        }
    }
}

/// What a backend sent before it ended (its FIN acknowledged, its reset,
/// a timeout) that its client's send ring could not take yet, kept on the
/// client's link: moved on as the client acknowledges
/// ([`deliver_rest`]), then the client ends as the backend did. The
/// bytes stay in the backend's receive ring, counted in the buffer pool.
#[derive(Debug)]
pub struct BackendRest {
    /// The backend's unread bytes (none: only its end is left to pass on).
    unread: Option<Unread>,
    end: ClientEnd,
}

/// How a client ends once its backend's last bytes are on their way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientEnd {
    /// The backend finished its answer (FIN): a FIN (TLS: close_notify
    /// first).
    Fin,
    /// It was cut (a reset or a timeout): a reset once they are
    /// delivered, so the answer never looks complete.
    Reset,
}

/// A backend connect in progress and when it is given up; ordered so that
/// a [`std::collections::BinaryHeap`] of them gives the soonest first.
#[derive(Debug, Clone, Copy)]
pub struct ConnectDeadline {
    pub at: crate::time::Instant,
    pub id: ConnId,
    pub key: AnyFlowKey,
}

impl PartialEq for ConnectDeadline {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for ConnectDeadline {}

impl PartialOrd for ConnectDeadline {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ConnectDeadline {
    /// Reversed: the soonest is the greatest.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.at.cmp(&self.at)
    }
}

/// The live peer of a connection whose link is `link`.
pub fn peer(tcp: &Tcp, link: &ProxyLink) -> Option<ConnId> {
    let (pid, key) = link.peer?;
    (tcp.key(pid) == Some(key)).then_some(pid)
}

/// A proxied pair's client side as a byte stream: the connection's own
/// bytes (a plain VIP), or the decrypted side of its TLS session.
#[derive(Debug)]
pub enum ClientStream<'a> {
    Plain,
    Tls {
        tls: &'a mut TlsConn,
        /// Records may still go to the client (not after our close_notify).
        can_send: bool,
    },
}

/// Moves bytes both ways between a client connection and its backend,
/// under TCP's back-pressure, and passes each side's FIN on once
/// everything before it went: towards the backend a FIN, towards a TLS
/// client close_notify then FIN. Plain bytes move ring to ring
/// ([`Tcp::splice`]); a TLS client's are sealed into records in the
/// client's send ring (through `scratch`, a record at a time).
pub fn pump(
    tcp: &mut Tcp,
    (client, clink): (ConnId, &mut ProxyLink),
    mut stream: ClientStream<'_>,
    (backend, blink): (ConnId, &mut ProxyLink),
    scratch: &mut [u8],
) {
    if !clink.connected {
        return; // client bytes wait until the backend is there
    }
    // Client → backend.
    let (moved, drained) = match &mut stream {
        ClientStream::Plain => (tcp.splice(client, backend, usize::MAX), true),
        ClientStream::Tls { tls, .. } => {
            let n = tcp.send(backend, &tls.plain_in);
            tls.plain_in.drain(..n);
            // Input the session holds (what came with the Finished) is
            // still to come, or the start of a record the FIN cut.
            (n, tls.plain_in.is_empty() && !tls.holds_input())
        }
    };
    clink.forwarded += moved as u64;
    if drained {
        pass_fin(tcp, client, clink, backend);
    }
    // Backend → client.
    let moved = match &mut stream {
        ClientStream::Plain => tcp.splice(backend, client, usize::MAX),
        ClientStream::Tls {
            tls,
            can_send: true,
        } => seal_from(tcp, SealSource::Backend(backend), client, tls, scratch),
        ClientStream::Tls {
            can_send: false, ..
        } => 0,
    };
    blink.forwarded += moved as u64;
    let (a, b) = tcp.peek(backend);
    if blink.fin_received && !blink.fin_passed && a.is_empty() && b.is_empty() {
        blink.fin_passed = true;
        match stream {
            ClientStream::Plain => tcp.close(client),
            ClientStream::Tls { tls, .. } => tls.closing = true,
        }
    }
}

/// Once `from` (whose link is `link`) sent FIN and all its bytes went on,
/// closes `to`'s sending side (FIN).
fn pass_fin(tcp: &mut Tcp, from: ConnId, link: &mut ProxyLink, to: ConnId) {
    let (a, b) = tcp.peek(from);
    if link.fin_received && !link.fin_passed && a.is_empty() && b.is_empty() {
        link.fin_passed = true;
        tcp.close(to);
    }
}

/// Where the bytes sealed for a TLS client come from.
enum SealSource<'a> {
    /// Its live backend's receive ring.
    Backend(ConnId),
    /// What its backend left when it ended.
    Rest(&'a mut Unread),
}

/// Seals the backend's bytes into records to the TLS client, a record at
/// a time while the client's send ring has room; returns the bytes taken.
fn seal_from(
    tcp: &mut Tcp,
    mut from: SealSource<'_>,
    client: ConnId,
    tls: &mut TlsConn,
    scratch: &mut [u8],
) -> usize {
    let mut taken = 0;
    loop {
        let (a, b) = match &from {
            SealSource::Backend(backend) => tcp.peek(*backend),
            SealSource::Rest(unread) => unread.as_slices(),
        };
        let n = (a.len() + b.len()).min(scratch.len());
        if n == 0 {
            break;
        }
        let first = a.len().min(n);
        scratch[..first].copy_from_slice(&a[..first]);
        scratch[first..n].copy_from_slice(&b[..n - first]);
        let sealed = tls.seal_record(tcp, client, n, &mut |room| {
            let k = room.len().min(n);
            room[..k].copy_from_slice(&scratch[..k]);
            k
        });
        if sealed == 0 {
            break;
        }
        match &mut from {
            SealSource::Backend(backend) => tcp.consume(*backend, sealed),
            SealSource::Rest(unread) => unread.consume(sealed),
        }
        taken += sealed;
    }
    taken
}

/// Moves on what `client`'s backend left when it ended ([`BackendRest`]),
/// as the client's send ring takes it; once all of it is on its way, the
/// client ends as the backend did: a FIN (for TLS, close_notify then FIN)
/// after a whole answer, a reset once the bytes are delivered after a cut
/// one.
pub fn deliver_rest(
    tcp: &mut Tcp,
    (client, clink): (ConnId, &mut ProxyLink),
    mut stream: ClientStream<'_>,
    scratch: &mut [u8],
) {
    let Some(rest) = clink.rest.as_mut() else {
        return;
    };
    if let Some(unread) = rest.unread.as_mut() {
        match &mut stream {
            ClientStream::Plain => {
                tcp.send_unread(unread, client);
            }
            ClientStream::Tls {
                tls,
                can_send: true,
            } => {
                seal_from(tcp, SealSource::Rest(unread), client, tls, scratch);
            }
            // Our close_notify went: nothing more can reach the client.
            ClientStream::Tls {
                can_send: false, ..
            } => unread.consume(unread.len()),
        }
        if !unread.is_empty() {
            return;
        }
    }
    let Some(rest) = clink.rest.take() else {
        return;
    };
    if let Some(unread) = rest.unread {
        tcp.give_unread(unread);
    }
    match (rest.end, stream) {
        (ClientEnd::Fin, ClientStream::Plain) => tcp.close(client),
        (ClientEnd::Fin, ClientStream::Tls { tls, .. }) => tls.closing = true,
        (ClientEnd::Reset, ClientStream::Plain) => tcp.abort_after_send(client),
        (ClientEnd::Reset, ClientStream::Tls { tls, .. }) => {
            tls.flush_alert(tcp, client);
            tcp.abort_after_send(client);
        }
    }
}

impl Services {
    /// Opens a backend connection for `client` to a member of its pool not
    /// tried yet; with none left, ends the client connection.
    pub(super) fn connect_backend(&mut self, cx: &mut Cx<'_>, client: ConnId) {
        // A client released in this batch with bytes unread is connected
        // for too (see `Services::accept`): they go once the backend is up.
        let Some(ckey) = cx.tcp.key(client).or_else(|| cx.tcp.released_key(client)) else {
            return;
        };
        let Some(link) = self.roles.get(client).and_then(|e| e.role.link()) else {
            return;
        };
        let (link_pool, tried) = (link.pool, link.tried);
        let p = usize::from(link_pool);
        // Each client is tried on `connect_tries` members at most: in an
        // outage it waits that many connect timeouts, not one a member.
        let Some(m) = self
            .pools
            .get_mut(p)
            .filter(|pool| tried.count_ones() < pool.connect_tries)
            .and_then(|pool| pool.pick_at(cx.now, ckey.remote_addr().ip(), tried))
        else {
            self.no_member(cx, client);
            return;
        };
        let addr = self.pools[p].members[m].addr;
        let Ok((b, bkey)) = self.open_to(cx, addr) else {
            self.no_member(cx, client);
            return;
        };
        cx.counters.proxy_backend_connects += 1;
        // The client's VIP's send timeout holds for the backend too (as
        // nginx's proxy_send_timeout): one that keeps its window closed
        // while it acknowledges our probes would otherwise hold the pair,
        // and what a departed client left for it, for ever.
        if let Some(slot) = self.roles.get(client).and_then(|e| e.vip) {
            let send = self.timeouts_of(Some(slot)).send;
            cx.tcp.set_send_timeout(b, send, cx.now);
        }
        self.pools[p].members[m].active += 1;
        self.connecting.push(ConnectDeadline {
            at: cx.now + self.pools[p].connect_timeout,
            id: b,
            key: bkey,
        });
        // `p` came from a u16 and pools have at most 64 members.
        let (pool, member) = (link_pool, m as u16);
        let mut blink = ProxyLink::new(Side::Backend, pool);
        blink.member = Some(member);
        blink.peer = Some((client, ckey));
        self.roles.insert(b, None, Role::Backend(Box::new(blink)));
        if let Some(l) = self.roles.get_mut(client).and_then(|e| e.role.link_mut()) {
            l.member = Some(member);
            l.peer = Some((b, bkey));
            l.tried |= 1 << m;
            l.connected = false;
        }
    }

    /// A backend connection is up: its client learns it, and the PROXY
    /// protocol header goes first when the pool asks for it.
    pub(super) fn backend_connected(&mut self, cx: &mut Cx<'_>, b: ConnId) {
        let Some(c) = self
            .roles
            .get(b)
            .and_then(|e| e.role.link())
            .and_then(|l| peer(cx.tcp, l))
        else {
            return;
        };
        let Some(client) = self.roles.get_mut(c) else {
            return;
        };
        let Some(link) = client.role.link_mut() else {
            return;
        };
        let pool = usize::from(link.pool);
        if !self.pools.get(pool).is_some_and(|p| p.proxy_protocol) {
            link.connected = true;
            return;
        }
        let Some(key) = cx.tcp.key(c) else { return };
        let header = proxy_header(key, client.role.tls());
        if cx.tcp.send(b, &header) == header.len() {
            if let Some(link) = client.role.link_mut() {
                link.connected = true;
            }
            return;
        }
        // No send ring for it (the buffer cap): the client's bytes must
        // never reach the backend without it (they could carry a header
        // of the client's own making). The pair ends, counted.
        cx.counters.proxy_header_no_room += 1;
        if let Some(blink) = self.roles.get_mut(b).and_then(|e| e.role.link_mut()) {
            blink.peer = None;
        }
        cx.tcp.abort(b);
        self.fail_client(cx, c);
    }

    /// Opens a connection to `addr` from the address of the port that
    /// reaches it and a free source port (4-tuples in use are skipped).
    ///
    /// With RSS over several queues, only source ports whose replies hash
    /// (software Toeplitz, the NIC's key and table) to this engine's queue
    /// are used; without, any.
    pub(super) fn open_to(
        &mut self,
        cx: &mut Cx<'_>,
        addr: SocketAddr,
    ) -> Result<(ConnId, AnyFlowKey), OpenError> {
        let (src, steering) = Uplink::route(cx.uplinks, addr.ip()).ok_or(OpenError::NoRoute)?;
        let tries = 64 * steering.map_or(1, |s| usize::from(s.queues));
        for _ in 0..tries {
            self.port_counter = self.port_counter.wrapping_add(1);
            let port = source_port(&self.port_secret, src, addr, self.port_counter);
            if let Some(s) = steering {
                let h = match (addr.ip(), src) {
                    (IpAddr::V4(dst), IpAddr::V4(src)) => {
                        crate::net::toeplitz::tcp4(s.key, dst, src, addr.port(), port)
                    }
                    (IpAddr::V6(dst), IpAddr::V6(src)) => {
                        crate::net::toeplitz::tcp6(s.key, dst, src, addr.port(), port)
                    }
                    _ => return Err(OpenError::NoRoute),
                };
                if s.queue_of(h) != s.queue {
                    continue; // the replies would reach another engine
                }
            }
            let key =
                AnyFlowKey::new(SocketAddr::new(src, port), addr).ok_or(OpenError::NoRoute)?;
            match cx.tcp.connect(cx.now, key) {
                Ok(id) => return Ok((id, key)),
                Err(ConnectError::TooMany) => return Err(OpenError::TableFull),
                Err(ConnectError::InUse) => {}
            }
        }
        Err(OpenError::NoSourcePort)
    }

    /// Gives up backend connects past their pool's timeout: the connection
    /// is dropped and its client tries the next member (see
    /// [`Services::proxy_closed`]). Only those due are looked at: ones
    /// established (or gone) by then are passed over.
    pub(super) fn expire_connects(&mut self, cx: &mut Cx<'_>) {
        while let Some(due) = self.connecting.peek().filter(|d| d.at <= cx.now) {
            let (id, key) = (due.id, due.key);
            self.connecting.pop();
            let still_connecting = cx.tcp.key(id) == Some(key)
                && self
                    .roles
                    .get(id)
                    .and_then(|e| e.role.link())
                    .is_some_and(|l| !l.connected);
            if still_connecting {
                let link = self.roles.get(id).and_then(|e| e.role.link());
                if let Some((p, Some(m))) = link.map(|l| (usize::from(l.pool), l.member)) {
                    if let Some(pool) = self.pools.get_mut(p) {
                        pool.connect_failed(usize::from(m), cx.now);
                    }
                }
                cx.tcp.abort(id);
            }
        }
    }

    /// No member can take `client`: counted, and the client ended.
    fn no_member(&mut self, cx: &mut Cx<'_>, client: ConnId) {
        cx.counters.proxy_no_member += 1;
        self.note_trouble(client, BackendTrouble::NoMember);
        if let Some(slot) = self.roles.get(client).and_then(|e| e.vip) {
            if let Some(vc) = self.vip_counters.get_mut(usize::from(slot)) {
                vc.proxy_no_member += 1;
            }
        }
        self.fail_client(cx, client);
    }

    /// Notes on `client`'s link what its backend did to end it.
    fn note_trouble(&mut self, client: ConnId, trouble: BackendTrouble) {
        let link = self.roles.get_mut(client).and_then(|e| e.role.link_mut());
        if let Some(link) = link {
            link.backend_trouble = Some(trouble);
        }
    }

    /// No backend for this client: a TLS alert (internal_error) or a reset.
    fn fail_client(&mut self, cx: &mut Cx<'_>, client: ConnId) {
        match self.roles.get_mut(client).map(|e| &mut e.role) {
            Some(Role::Tls(t)) => {
                t.conn.abort_with_alert();
                t.conn.flush_alert(cx.tcp, client);
                cx.tcp.close(client);
            }
            _ => cx.tcp.abort(client),
        }
    }

    /// A proxied connection (`id`) is gone: the member's count, a retry
    /// when a backend could not be reached, or the end of the other side.
    /// `tls`: a TLS client's session (its decrypted bytes not passed on
    /// yet).
    pub(super) fn proxy_closed(
        &mut self,
        cx: &mut Cx<'_>,
        id: ConnId,
        link: &ProxyLink,
        reason: CloseReason,
        tls: Option<TlsConn>,
    ) {
        let other = peer(cx.tcp, link);
        match link.side {
            Side::Backend => {
                let pool = self.pools.get_mut(usize::from(link.pool));
                if let (Some(pool), Some(m)) = (pool, link.member.map(usize::from)) {
                    if let Some(member) = pool.members.get_mut(m) {
                        member.active = member.active.saturating_sub(1);
                    }
                    // Refused, or no answer to our SYNs: the member's
                    // doing. (A connect timeout counts where it aborts
                    // the connection; other aborts are ours.)
                    let failed = matches!(
                        reason,
                        CloseReason::Refused | CloseReason::Reset | CloseReason::TimedOut
                    );
                    if !link.connected && failed {
                        pool.connect_failed(m, cx.now);
                    }
                }
                let Some(client) = other else { return };
                if !link.connected {
                    // Nothing was sent to it yet: another member.
                    cx.counters.proxy_backend_failures += 1;
                    self.connect_backend(cx, client);
                    return;
                }
                // What the backend sent before its end (a FIN acknowledged,
                // a reset, a timeout) that its client could not take yet
                // was left unread: the client gets all of it, then the
                // backend's end (a reset, not a FIN, when the answer was
                // cut). A backend that sent its FIN had said all it had:
                // a reset after it (its answer to the client's later
                // bytes, or a timeout) cuts nothing, so a FIN.
                let unread = cx.tcp.take_unread(id);
                let end = if reason == CloseReason::Normal || link.fin_received {
                    ClientEnd::Fin
                } else {
                    self.note_trouble(client, BackendTrouble::Reset);
                    ClientEnd::Reset
                };
                if end == ClientEnd::Fin && link.fin_passed && unread.is_none() {
                    return; // all of it went, its FIN too
                }
                let Some(clink) = self.roles.get_mut(client).and_then(|e| e.role.link_mut()) else {
                    if let Some(u) = unread {
                        cx.tcp.give_unread(u);
                    }
                    return;
                };
                clink.rest = Some(Box::new(BackendRest { unread, end }));
                self.deliver_rest_now(cx, client);
            }
            Side::Client => {
                let Some(b) = other else { return };
                let backend_done = self
                    .roles
                    .get(b)
                    .and_then(|e| e.role.link())
                    .is_some_and(|l| l.fin_passed);
                // A TLS client whose records failed: what it sent was cut.
                let failed = tls.as_ref().is_some_and(TlsConn::failed);
                if link.fin_passed && backend_done {
                    // Both directions finished: the backend connection is
                    // closing (or in TIME-WAIT) on its own.
                } else if !link.connected && reason == CloseReason::Reset {
                    // The backend is still connecting: what the client
                    // sent before its reset waits for it, then the reset.
                    self.hold_for_connect(cx, (id, link), b, tls);
                } else if !link.connected {
                    // The backend's answer has nowhere to go.
                    cx.tcp.abort(b);
                } else if reason == CloseReason::Reset
                    || (reason == CloseReason::Normal && !failed && !link.fin_passed)
                {
                    // Everything the client sent before its reset (or its
                    // FIN, where its bytes waited behind the backend's
                    // full send ring) goes to the backend, then the reset
                    // (a FIN if the backend had finished, or the client
                    // did: nothing was cut).
                    let end = if backend_done || reason == CloseReason::Normal {
                        BackendEnd::Close
                    } else {
                        BackendEnd::Reset
                    };
                    self.hand_over(cx, id, b, tls, end);
                } else if failed || (reason != CloseReason::Normal && !backend_done) {
                    // The answer has nowhere to go, or the request was cut
                    // by a bad record: a reset, so it never looks complete.
                    cx.tcp.abort(b);
                } else {
                    // A clean end, or a client that ended once the backend
                    // had said all it had: nothing is lost, so a FIN.
                    cx.tcp.close(b);
                }
            }
        }
    }

    /// Moves on what `client`'s backend left ([`deliver_rest`]) at once:
    /// a TLS client's through its drive.
    fn deliver_rest_now(&mut self, cx: &mut Cx<'_>, client: ConnId) {
        match self.roles.get_mut(client).map(|e| &mut e.role) {
            Some(Role::Client(link)) => deliver_rest(
                cx.tcp,
                (client, link),
                ClientStream::Plain,
                &mut self.proxy_scratch,
            ),
            Some(Role::Tls(_)) => self.drive_tls(cx, client, false),
            _ => {}
        }
    }
}

impl Services {
    /// The client `client` reset: what it sent that is still here (its
    /// unread bytes; for a TLS client, `tls`'s decrypted bytes and the
    /// records after them) goes to `backend` as its send ring takes it,
    /// then `end`.
    fn hand_over(
        &mut self,
        cx: &mut Cx<'_>,
        client: ConnId,
        backend: ConnId,
        tls: Option<TlsConn>,
        end: BackendEnd,
    ) {
        let unread = cx.tcp.take_unread(client);
        let mut bytes = match tls {
            Some(conn) => Carried::Tls(Box::new(conn), unread),
            None => match unread {
                Some(u) => Carried::Unread(u),
                None => return end.apply(cx.tcp, backend),
            },
        };
        charge_carried(cx.tcp, &mut bytes);
        if move_carried(cx.tcp, &mut bytes, backend) {
            give_carried(cx.tcp, bytes);
            return end.apply(cx.tcp, backend);
        }
        match self.roles.get_mut(backend).and_then(|e| e.role.link_mut()) {
            Some(link) => {
                link.carry = Some(Box::new(Carry {
                    header: Vec::new(),
                    bytes,
                    end,
                }))
            }
            None => {
                // Not expected: `backend` is a live proxied connection.
                give_carried(cx.tcp, bytes);
                end.apply(cx.tcp, backend);
            }
        }
    }

    /// The client `client` (its link `clink`) reset while `backend` was
    /// still connecting: what it sent (its unread bytes; for a TLS client,
    /// `tls`'s decrypted bytes and the whole records after them) is kept
    /// on the backend's link, with the PROXY protocol header where the
    /// pool asks for one, and goes once the backend is up
    /// ([`Services::carry_on`]), then a reset. A client that sent nothing
    /// resets the backend at once; a backend that cannot be reached drops
    /// what was kept (the client is gone: no other member is tried).
    fn hold_for_connect(
        &mut self,
        cx: &mut Cx<'_>,
        (client, clink): (ConnId, &ProxyLink),
        backend: ConnId,
        tls: Option<TlsConn>,
    ) {
        let unread = cx.tcp.take_unread(client);
        let mut bytes = match (tls, unread) {
            (Some(conn), unread)
                if conn.has_plaintext() || (unread.is_some() && conn.can_read()) =>
            {
                Carried::Tls(Box::new(conn), unread)
            }
            (None, Some(u)) => Carried::Unread(u),
            (_, unread) => {
                if let Some(u) = unread {
                    cx.tcp.give_unread(u);
                }
                return cx.tcp.abort(backend);
            }
        };
        charge_carried(cx.tcp, &mut bytes);
        let Some(blink) = self.roles.get_mut(backend).and_then(|e| e.role.link_mut()) else {
            // Not expected: `backend` is a live proxied connection.
            give_carried(cx.tcp, bytes);
            return cx.tcp.abort(backend);
        };
        let with_header = self
            .pools
            .get(usize::from(clink.pool))
            .is_some_and(|p| p.proxy_protocol);
        // The client's key, kept on the backend's link (the client's own
        // slot is gone).
        let header = match (with_header, blink.peer) {
            (true, Some((_, key))) => {
                let tls = match &bytes {
                    Carried::Tls(conn, _) => Some(&**conn),
                    Carried::Unread(_) => None,
                };
                proxy_header(key, tls)
            }
            _ => Vec::new(),
        };
        blink.carry = Some(Box::new(Carry {
            header,
            bytes,
            end: BackendEnd::Reset,
        }));
        // Its SYN-ACK came in the burst with the client's reset, before
        // it: up already, so no later event of its own need come.
        if blink.connected {
            self.carry_on(cx, backend);
        }
    }

    /// Moves on what `backend`'s client left, as its send ring takes it;
    /// once all of it is queued, the backend's end follows.
    pub(super) fn carry_on(&mut self, cx: &mut Cx<'_>, backend: ConnId) {
        let Some(link) = self.roles.get_mut(backend).and_then(|e| e.role.link_mut()) else {
            return;
        };
        if !link.connected {
            return; // kept until the backend is up
        }
        let Some(carry) = link.carry.as_mut() else {
            return;
        };
        if !carry.header.is_empty() {
            // The backend's empty send ring takes a header whole.
            let sent = cx.tcp.send(backend, &carry.header);
            carry.header.drain(..sent);
            if !carry.header.is_empty() {
                return;
            }
        }
        // Its answer has nowhere to go: taken, so that a backend that
        // waits to write before it reads on still reads the rest.
        let (a, b) = cx.tcp.peek(backend);
        let answer = a.len() + b.len();
        cx.tcp.consume(backend, answer);
        if move_carried(cx.tcp, &mut carry.bytes, backend) {
            if let Some(carry) = link.carry.take() {
                carry.end.apply(cx.tcp, backend);
                give_carried(cx.tcp, carry.bytes);
            }
        }
    }
}

/// The PROXY protocol v2 header for a client whose connection's key is
/// `client_key`, with its TLS session's facts where it speaks TLS.
fn proxy_header(client_key: AnyFlowKey, tls: Option<&TlsConn>) -> Vec<u8> {
    let (from, vip) = (client_key.remote_addr(), client_key.local_addr());
    let facts = tls.and_then(|t| {
        let n = t.session().negotiated()?;
        Some(proxy_protocol::TlsFacts {
            version: crypto::session::VERSIONS[n.version],
            cipher: crypto::session::SUITES_OPENSSL[n.suite],
            sni: t.session().server_name(),
        })
    });
    let mut header = Vec::with_capacity(128);
    proxy_protocol::header_v2(from, vip, facts, &mut header);
    header
}

/// A TLS client's buffers carried for its backend count against the
/// buffer cap as they did while it was open (its own charge ended with
/// it); settled again as they empty, refunded by [`give_carried`].
fn charge_carried(tcp: &mut Tcp, bytes: &mut Carried) {
    if let Carried::Tls(conn, _) = bytes {
        conn.settle_charge(tcp.buffers_mut());
    }
}

/// Moves as much of `bytes` into `to`'s send ring as it takes; true once
/// all of it is there.
fn move_carried(tcp: &mut Tcp, bytes: &mut Carried, to: ConnId) -> bool {
    match bytes {
        Carried::Unread(u) => {
            tcp.send_unread(u, to);
            u.is_empty()
        }
        Carried::Tls(conn, unread) => {
            let done = conn.carry_rest(tcp, unread.as_mut(), to);
            conn.settle_charge(tcp.buffers_mut());
            done
        }
    }
}

/// A proxied connection is gone: what it still had to pass on goes too
/// (a backend's carry, a client's rest).
pub fn drop_carry(tcp: &mut Tcp, link: &mut ProxyLink) {
    if let Some(carry) = link.carry.take() {
        give_carried(tcp, carry.bytes);
    }
    if let Some(unread) = link.rest.take().and_then(|r| r.unread) {
        tcp.give_unread(unread);
    }
}

/// Gives a carry's ring, and what its TLS buffers were charged, back to
/// the buffer pool.
fn give_carried(tcp: &mut Tcp, bytes: Carried) {
    match bytes {
        Carried::Unread(u) => tcp.give_unread(u),
        Carried::Tls(mut conn, unread) => {
            tcp.buffers_mut().refund(conn.take_charge());
            if let Some(u) = unread {
                tcp.give_unread(u);
            }
        }
    }
}

/// RFC 6056 §3.3.3 (algorithm 3): the `counter`-th source port towards
/// `dst` from `src`, over [`EPHEMERAL`] from an offset the secret keyed
/// hash of the addresses gives (so it cannot be guessed off-path, and each
/// destination walks the whole range on its own).
fn source_port(
    secret: &siphasher::sip::SipHasher24,
    src: IpAddr,
    dst: SocketAddr,
    counter: u32,
) -> u16 {
    use std::hash::{Hash, Hasher};
    let mut h = *secret;
    src.hash(&mut h);
    dst.ip().hash(&mut h);
    h.write_u16(dst.port());
    let offset = h.finish() as u32;
    let range = u32::from(*EPHEMERAL.end() - *EPHEMERAL.start()) + 1;
    *EPHEMERAL.start() + (offset.wrapping_add(counter) % range) as u16
}

#[cfg(test)]
mod port_tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    #[test]
    fn source_ports_walk_the_whole_range_from_a_secret_offset_per_destination() {
        let key = siphasher::sip::SipHasher24::new_with_keys(1, 2);
        let src = Ipv4Addr::new(10, 0, 0, 1).into();
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 20), 80).into();
        let b = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 21), 80).into();
        let range = u32::from(*EPHEMERAL.end() - *EPHEMERAL.start()) + 1;
        let mut seen = std::collections::HashSet::new();
        for n in 0..range {
            let p = source_port(&key, src, a, n);
            assert!(EPHEMERAL.contains(&p));
            assert!(seen.insert(p), "port {p} twice");
        }
        assert_eq!(seen.len(), 64_512, "every port of 1024-65535");
        // Another destination, or another secret, starts elsewhere.
        assert_ne!(source_port(&key, src, a, 0), source_port(&key, src, b, 0));
        let other = siphasher::sip::SipHasher24::new_with_keys(3, 4);
        assert_ne!(source_port(&key, src, a, 0), source_port(&other, src, a, 0));
    }
}
