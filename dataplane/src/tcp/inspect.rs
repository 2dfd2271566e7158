//! What `dpctl conn list` sees of the connections listeners accepted,
//! `conn reset`'s resets (docs/control-api.md) and the resets of a stop.
//! Each runs in one pass over the slab, on the engine's tick (a stop's
//! after the loop), as `sources` does.

use std::collections::BinaryHeap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::conn::{Conn, ConnTcpView, State};
use super::{AnyFlowKey, CloseReason, ConnId, TcpEngine};
use crate::time::Instant;

/// Which accepted connections a request is about; empty: all (but
/// TIME-WAIT, which no request is about).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnFilter {
    /// To this address and port only (a VIP's).
    pub local: Option<(IpAddr, u16)>,
    /// From this network only (its address has no host bits set).
    pub source: Option<(IpAddr, u8)>,
    /// In this state only.
    pub state: Option<State>,
    /// Only those whose client has sent nothing for this long at least.
    pub idle_over: Option<Duration>,
}

impl ConnFilter {
    fn picks<A: Default>(&self, key: AnyFlowKey, c: &Conn<A>, now: Instant) -> bool {
        if c.state == State::TimeWait
            || self
                .local
                .is_some_and(|l| l != super::listen::listened_at(c, key))
            || self.state.is_some_and(|s| s != c.state)
            || self.idle_over.is_some_and(|d| c.idle(now) < d)
        {
            return false;
        }
        self.source.is_none_or(|(net, len)| {
            let ip = key.remote_addr().ip();
            ip.is_ipv4() == net.is_ipv4() && control::config::mask_to(ip, len) == net
        })
    }
}

/// One accepted connection as `dpctl conn list` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnView {
    pub id: ConnId,
    pub client: SocketAddr,
    pub local: SocketAddr,
    /// The listener that took it (a wildcard VIP's `0.0.0.0:P` for the
    /// connections it took; `local` otherwise).
    pub listener: SocketAddr,
    pub state: State,
    pub tcp: ConnTcpView,
}

impl<A: Default> TcpEngine<A> {
    /// The `max` oldest connections listeners accepted that `filter`
    /// picks (half-open ones too, TIME-WAIT not), oldest first.
    pub fn connections(&self, filter: ConnFilter, max: usize, now: Instant) -> Vec<ConnView> {
        // The youngest of the oldest `max` on top, to go when one older
        // comes.
        let mut oldest: BinaryHeap<(Instant, u32)> = BinaryHeap::new();
        for (slot, c) in self.conns.iter().enumerate() {
            let Some(c) = c.as_ref().filter(|c| c.listener.is_some()) else {
                continue;
            };
            let picked = self
                .key(ConnId::new(slot as u32, c.gen))
                .is_some_and(|k| filter.picks(k, c, now));
            if !picked || max == 0 {
                continue;
            }
            if oldest.len() < max {
                oldest.push((c.opened, slot as u32));
            } else if oldest.peek().is_some_and(|&(t, _)| c.opened < t) {
                oldest.pop();
                oldest.push((c.opened, slot as u32));
            }
        }
        let mut views: Vec<ConnView> = oldest
            .into_iter()
            .filter_map(|(_, slot)| {
                let c = self.conns.get(slot as usize)?.as_ref()?;
                let id = ConnId::new(slot, c.gen);
                let key = self.key(id)?;
                Some(ConnView {
                    id,
                    client: key.remote_addr(),
                    local: key.local_addr(),
                    listener: super::listen::listened_at(c, key).into(),
                    state: c.state,
                    tcp: c.view(now),
                })
            })
            .collect();
        views.sort_unstable_by_key(|v| (std::cmp::Reverse(v.tcp.age), v.client));
        views
    }

    /// Resets the connections listeners accepted that `filter` picks
    /// (half-open ones too), and returns how many (counted,
    /// `operator_resets`). Backend connections are not looked at.
    pub fn reset_accepted_by(&mut self, filter: ConnFilter, now: Instant) -> u64 {
        let n = self.reset_accepted(CloseReason::Operator, |_, key, c| filter.picks(key, c, now));
        self.counters.operator_resets += n;
        n
    }

    /// dpd is stopping: resets the connections listeners accepted
    /// (half-open ones too) when `clients_only`, else every connection left
    /// (backends, health checks), each closed with
    /// [`CloseReason::Stopped`]. One that closed already and waits out
    /// TIME-WAIT in its slot ends as closed, with no reset. The resets go
    /// out with the next [`TcpEngine::transmit`].
    pub fn reset_at_stop(&mut self, clients_only: bool) {
        for slot in 0..self.conns.len() {
            let Some(c) = self.conns[slot].as_ref() else {
                continue;
            };
            if clients_only && c.listener.is_none() {
                continue;
            }
            let id = ConnId::new(slot as u32, c.gen);
            if c.state == State::TimeWait {
                self.release(id, CloseReason::Normal);
            } else {
                self.abort_for(id, CloseReason::Stopped);
            }
        }
    }
}
