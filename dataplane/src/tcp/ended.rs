//! What an accepted connection leaves when it ends, for an application
//! that logs each one (the connection log, docs/architecture.md, "The
//! connection log"): its flow key, when it began and the bytes it carried,
//! readable while the application handles its `Closed` event. Kept only
//! while [`TcpEngine::keep_ended`] is on, so an engine that logs nothing
//! does no work for it.

use std::collections::VecDeque;

use super::*;

/// An accepted connection's figures at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub id: ConnId,
    pub key: AnyFlowKey,
    /// When it began (the peer's SYN, or a cookie's ACK).
    pub opened: Instant,
    /// Payload bytes taken in order from the peer.
    pub bytes_received: u64,
    /// Payload bytes the application queued to send to it.
    pub bytes_queued: u64,
    /// Of those, the ones it had not acknowledged (lost with a reset).
    pub bytes_unacked: u32,
}

/// Ends in the order of their `Closed` events: `pending` since the last
/// `drain_events`, `batch` those whose events it returned.
#[derive(Debug, Default)]
pub(super) struct EndedConns {
    pub(super) keep: bool,
    pending: VecDeque<Ended>,
    batch: VecDeque<Ended>,
}

impl EndedConns {
    /// Notes `e` if ends are kept.
    pub(super) fn note(&mut self, e: impl FnOnce() -> Ended) {
        if self.keep {
            self.pending.push_back(e());
        }
    }

    /// At `drain_events`: the pending ends become the batch.
    pub(super) fn next_batch(&mut self) {
        self.batch.clear();
        std::mem::swap(&mut self.batch, &mut self.pending);
    }

    /// The end of `id`, in this batch. Asked in the order of the events
    /// (each at most once), so the ends before it were not asked for.
    pub(super) fn take(&mut self, id: ConnId) -> Option<Ended> {
        while let Some(e) = self.batch.pop_front() {
            if e.id == id {
                return Some(e);
            }
        }
        None
    }
}

impl<A: Default> TcpEngine<A> {
    /// Keeps, or stops keeping, what accepted connections leave when they
    /// end ([`TcpEngine::take_ended`]).
    pub fn keep_ended(&mut self, keep: bool) {
        self.ended.keep = keep;
        if !keep {
            self.ended.pending.clear();
            self.ended.batch.clear();
        }
    }

    /// What accepted connection `id` left when it ended, while its
    /// `Closed` event (from the last [`TcpEngine::drain_events`]) is
    /// handled and ends are kept. Asked in the order of those events.
    pub fn take_ended(&mut self, id: ConnId) -> Option<Ended> {
        self.ended.take(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(slot: u32) -> Ended {
        let key = AnyFlowKey::V4(FlowKey {
            local: std::net::Ipv4Addr::new(10, 0, 0, 1),
            remote: std::net::Ipv4Addr::new(10, 0, 0, 2),
            local_port: 443,
            remote_port: 40_000 + slot as u16,
        });
        Ended {
            id: ConnId::new(slot, 0),
            key,
            opened: Instant::ZERO,
            bytes_received: u64::from(slot),
            bytes_queued: 0,
            bytes_unacked: 0,
        }
    }

    #[test]
    fn ends_are_taken_in_event_order_and_only_while_kept() {
        let mut ends = EndedConns::default();
        ends.note(|| ended(1));
        assert!(ends.pending.is_empty(), "not kept: nothing noted");
        ends.keep = true;
        for slot in 1..=3 {
            ends.note(|| ended(slot));
        }
        assert_eq!(ends.take(ConnId::new(1, 0)), None, "not in a batch yet");
        ends.next_batch();
        // The second is not asked for: asking for the third skips it.
        assert_eq!(ends.take(ConnId::new(1, 0)), Some(ended(1)));
        assert_eq!(ends.take(ConnId::new(3, 0)), Some(ended(3)));
        assert_eq!(ends.take(ConnId::new(2, 0)), None);
        ends.note(|| ended(4));
        ends.next_batch();
        ends.next_batch();
        assert_eq!(ends.take(ConnId::new(4, 0)), None, "its batch is over");
    }
}
