//! What each client connection is waiting for, and the deadline that
//! goes with it, so no client holds a connection by sending nothing or
//! trickling: a TLS handshake must end within the VIP's
//! `handshake_timeout` of the SYN; a request head (the responder) or the
//! first bytes (the proxy, which does not parse requests) must come within
//! `request_timeout` of the connection being ready for it (accepted,
//! handshake done, previous response delivered: all acknowledged). A deadline that passes resets
//! the connection (`CloseReason::Deadline`) and is counted by what it
//! waited for. Silence past the VIP's `idle_timeout` ends any connection
//! (TCP's own timer), and so does a client that acknowledges none of what
//! waits for it for the VIP's `send_timeout` (TCP's send timeout: a client
//! that stopped reading, counted as `send_timeouts`). See
//! docs/architecture.md, "Roles".

use std::time::Duration;

use super::role::{Inner, Role};
use super::{Cx, Services};
use crate::tcp::ConnId;

/// A VIP's limits on how long a client may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From the SYN to the end of the TLS handshake.
    pub handshake: Duration,
    /// From being ready for a request to its complete head (responder) or
    /// its first bytes (proxy).
    pub request: Duration,
    /// Silence from the client, at most (`None`: `[tcp] idle_timeout`).
    pub idle: Option<Duration>,
    /// How long data may wait for the client with none of it
    /// acknowledged (`TcpEngine::set_send_timeout`).
    pub send: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            handshake: Duration::from_secs(10),
            request: Duration::from_secs(30),
            idle: None,
            send: Duration::from_secs(60),
        }
    }
}

/// What a client connection waits for (its deadline's kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wait {
    /// Nothing of the client (a response in progress, a backend's turn,
    /// a connection of ours).
    #[default]
    Nothing,
    Handshake,
    /// A request head after `n` answered (a new wait with each answer).
    Request(u32),
    /// The client's end, after our last answer was delivered and our
    /// side closed (the responder's lingering close): a client that
    /// trickles bytes, each dropped, would otherwise keep the connection,
    /// since data in FIN-WAIT-2 restarts TCP's wait for its FIN.
    Linger,
}

impl Wait {
    /// What the connection in `role` waits for now; `unread` is whether
    /// TCP holds bytes of it not read yet, `delivered` whether all it was
    /// sent was acknowledged. A responder waits for the next request only
    /// once its last response is delivered: a slow reader is the send
    /// timeout's to judge, not the request deadline's.
    fn of(role: &Role, unread: bool, delivered: bool) -> Wait {
        match role {
            Role::Responder(http) if http.awaiting_head() && delivered => {
                Wait::Request(http.answered())
            }
            Role::Responder(http) if http.lingering() && delivered => Wait::Linger,
            Role::Client(link) if link.forwarded == 0 && !unread && !link.fin_received => {
                Wait::Request(0)
            }
            Role::Tls(t) if t.conn.is_handshaking() => Wait::Handshake,
            Role::Tls(t) => match &t.inner {
                Inner::Responder(http)
                    if http.awaiting_head() && delivered && t.conn.all_sealed_sent() =>
                {
                    Wait::Request(http.answered())
                }
                Inner::Responder(http)
                    if http.lingering() && delivered && t.conn.all_sealed_sent() =>
                {
                    Wait::Linger
                }
                Inner::Proxy(link)
                    if link.forwarded == 0 && t.conn.plain_in.is_empty() && !link.fin_received =>
                {
                    Wait::Request(0)
                }
                _ => Wait::Nothing,
            },
            _ => Wait::Nothing,
        }
    }
}

impl Services {
    /// Gives connection `id` the deadline of what it now waits for (none,
    /// when it waits for nothing); unchanged while that stays the same.
    pub(super) fn settle_deadline(&mut self, cx: &mut Cx<'_>, id: ConnId) {
        let Some(entry) = self.roles.get(id) else {
            return;
        };
        let (a, b) = cx.tcp.peek(id);
        let wait = Wait::of(&entry.role, a.len() + b.len() > 0, cx.tcp.all_acked(id));
        if wait == entry.wait {
            return;
        }
        let timeouts = self.timeouts_of(entry.vip);
        if let Some(entry) = self.roles.get_mut(id) {
            entry.wait = wait;
        }
        let at = match wait {
            Wait::Nothing => None,
            Wait::Handshake => cx.tcp.opened_at(id).map(|t| t + timeouts.handshake),
            Wait::Request(_) | Wait::Linger => Some(cx.now + timeouts.request),
        };
        cx.tcp.set_deadline(id, at, cx.now);
    }

    /// The timeouts of the VIP with counter slot `slot`: those in effect,
    /// or a removed VIP's last (its open connections keep them); the
    /// defaults for a connection of no VIP.
    pub(super) fn timeouts_of(&self, slot: Option<u16>) -> Timeouts {
        slot.and_then(|s| self.slot_timeouts.get(usize::from(s)))
            .copied()
            .unwrap_or_default()
    }

    /// A client reset at its send timeout.
    pub(super) fn count_send_timeout(&mut self, cx: &mut Cx<'_>, slot: Option<u16>) {
        cx.counters.send_timeouts += 1;
        if let Some(vc) = slot.and_then(|s| self.vip_counters.get_mut(usize::from(s))) {
            vc.send_timeouts += 1;
        }
    }

    /// A connection reset at its deadline: counted by what it waited for.
    pub(super) fn count_deadline(&mut self, cx: &mut Cx<'_>, slot: Option<u16>, wait: Wait) {
        let vc = slot.and_then(|s| self.vip_counters.get_mut(usize::from(s)));
        match wait {
            Wait::Handshake => {
                cx.counters.tls_handshake_timeouts += 1;
                if let Some(vc) = vc {
                    vc.handshake_timeouts += 1;
                }
            }
            Wait::Request(_) => {
                cx.counters.request_timeouts += 1;
                if let Some(vc) = vc {
                    vc.request_timeouts += 1;
                }
            }
            // Ended like a FIN-WAIT-2 that timed out (the log says
            // `tcp_timeout`); not a deadline the client owed a request for.
            Wait::Linger | Wait::Nothing => {}
        }
    }
}
