//! Forwarding a VIP's connections to pool members: each client connection
//! (plaintext, or the decrypted side of TLS) is paired with a backend
//! connection the same engine opened. Bytes move ring to ring with TCP's
//! own back-pressure (a full send buffer leaves bytes in the other side's
//! receive buffer, whose window then closes); a FIN is passed on once
//! everything before it has been; resets and timeouts end the pair.

use super::pool::Tried;
use super::tls::{ConnApp, TlsConn};
use crate::tcp::{ConnId, FlowKey, TcpEngine};

/// Which end of a pair a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Backend,
}

/// A proxied connection's link to its pair.
#[derive(Debug, Clone)]
pub struct ProxyLink {
    pub side: Side,
    /// Index of the pool in the engine.
    pub pool: u16,
    /// The member this pair goes to (client side: once chosen).
    pub member: Option<u16>,
    /// The other connection, with its flow key to tell a reused slot.
    pub peer: Option<(ConnId, FlowKey)>,
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
        }
    }
}

/// The live peer of `id`, if it still exists.
pub fn peer(tcp: &mut TcpEngine<ConnApp>, id: ConnId) -> Option<ConnId> {
    let (pid, key) = tcp.app(id)?.proxy.as_ref()?.peer?;
    (tcp.key(pid) == Some(key)).then_some(pid)
}

fn link(tcp: &mut TcpEngine<ConnApp>, id: ConnId) -> Option<&mut ProxyLink> {
    tcp.app(id)?.proxy.as_deref_mut()
}

/// Whether the backend of a client is connected.
fn connected(tcp: &mut TcpEngine<ConnApp>, client: ConnId) -> bool {
    link(tcp, client).is_some_and(|l| l.connected)
}

/// Moves bytes both ways between a plaintext connection and its peer and
/// passes FINs on. `id` is either side.
pub fn pump_plain(tcp: &mut TcpEngine<ConnApp>, id: ConnId) {
    let Some(other) = peer(tcp, id) else { return };
    let client_side = link(tcp, id).is_some_and(|l| l.side == Side::Client);
    let client = if client_side { id } else { other };
    if !connected(tcp, client) {
        return; // client bytes wait in its receive buffer
    }
    for (from, to) in [(id, other), (other, id)] {
        let n = tcp.splice(from, to, usize::MAX);
        if let Some(l) = link(tcp, from) {
            l.forwarded += n as u64;
        }
        pass_fin(tcp, from, to);
    }
}

/// Once `from` sent FIN and all its bytes went on, closes `to`'s sending
/// side (FIN).
fn pass_fin(tcp: &mut TcpEngine<ConnApp>, from: ConnId, to: ConnId) {
    let (a, b) = tcp.peek(from);
    let drained = a.is_empty() && b.is_empty();
    let Some(l) = link(tcp, from) else { return };
    if l.fin_received && !l.fin_passed && drained {
        l.fin_passed = true;
        tcp.close(to);
    }
}

/// The TLS client's side of a pair: decrypted client bytes to the
/// backend, backend bytes sealed into records to the client (through
/// `scratch`, one record at a time), FINs passed on (close_notify and FIN
/// towards the client).
///
/// `can_send`: records may still go to the client (not after our
/// close_notify).
pub fn pump_tls(
    tcp: &mut TcpEngine<ConnApp>,
    client: ConnId,
    tls: &mut TlsConn,
    scratch: &mut [u8],
    can_send: bool,
) {
    let Some(backend) = peer(tcp, client) else {
        return;
    };
    if !connected(tcp, client) {
        return;
    }
    // Client → backend.
    if !tls.plain_in.is_empty() {
        let n = tcp.send(backend, &tls.plain_in);
        tls.plain_in.drain(..n);
        if let Some(l) = link(tcp, client) {
            l.forwarded += n as u64;
        }
    }
    if tls.plain_in.is_empty() {
        pass_fin(tcp, client, backend);
    }
    if !can_send {
        return;
    }
    // Backend → client, a record at a time while there is room.
    loop {
        let (a, b) = tcp.peek(backend);
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
        tcp.consume(backend, sealed);
        if let Some(l) = link(tcp, backend) {
            l.forwarded += sealed as u64;
        }
    }
    let (a, b) = tcp.peek(backend);
    let drained = a.is_empty() && b.is_empty();
    if let Some(l) = link(tcp, backend) {
        if l.fin_received && !l.fin_passed && drained {
            l.fin_passed = true;
            tls.closing = true;
        }
    }
}
