//! TIME-WAIT (RFC 9293 §3.6) kept apart from live connections: once a
//! connection enters it and the application has read what the peer sent,
//! its control block is freed and a compact entry (the 4-tuple, the two
//! sequence numbers, the timestamp to echo) waits out 2 MSL here.
//!
//! This module is the arrival-order queue of those entries; the flow
//! table ([`super::flow_table`]) finds them by 4-tuple and bounds them.
//! Every wait is the same 2 MSL and a restart requeues, so the front is
//! the first due, and expiry looks only there.

use std::collections::VecDeque;

use super::{FlowKey, Seq};
use crate::time::Instant;

/// What TIME-WAIT remembers of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TimeWait {
    pub key: FlowKey,
    /// Our next sequence number (after our FIN).
    pub snd_nxt: Seq,
    /// The peer's next sequence number (after its FIN).
    pub rcv_nxt: Seq,
    /// The peer's last TSval, when the connection used timestamps.
    pub ts_recent: Option<u32>,
    /// The window field our ACKs carry.
    pub window: u16,
    pub entered: Instant,
    pub until: Instant,
}

/// A slot of the queue: an entry, or the hole left by one taken out
/// early (reopened by a SYN, reused by a connect, restarted).
#[derive(Debug, Clone, Copy)]
struct Slot {
    tw: TimeWait,
    live: bool,
}

/// TIME-WAIT entries in the order they (re)started their wait, each at a
/// position: a number counted from the first slot ever queued, modulo
/// 2^32 (the queue never holds 2^31 slots: the bound is 16 M).
#[derive(Debug, Default)]
pub(super) struct TimeWaitQueue {
    queue: VecDeque<Slot>,
    /// Position of `queue[0]`.
    base: u32,
}

impl TimeWaitQueue {
    /// Slots held, live and holes.
    pub fn slots(&self) -> usize {
        self.queue.len()
    }

    /// Bytes held (capacity).
    pub fn bytes(&self) -> usize {
        self.queue.capacity() * std::mem::size_of::<Slot>()
    }

    /// Queues `tw` last; returns its position.
    pub fn push(&mut self, tw: TimeWait) -> u32 {
        let at = self.base.wrapping_add(self.queue.len() as u32);
        self.queue.push_back(Slot { tw, live: true });
        at
    }

    /// The live entry at `at`.
    pub fn get(&self, at: u32) -> Option<TimeWait> {
        let slot = self.queue.get(at.wrapping_sub(self.base) as usize)?;
        slot.live.then_some(slot.tw)
    }

    /// Takes the entry at `at` out, leaving a hole (holes at the front
    /// go at once, others when they reach it).
    pub fn take(&mut self, at: u32) -> Option<TimeWait> {
        let slot = self.queue.get_mut(at.wrapping_sub(self.base) as usize)?;
        if !slot.live {
            return None;
        }
        slot.live = false;
        let tw = slot.tw;
        self.drop_front_holes();
        Some(tw)
    }

    /// Takes the oldest live entry out (dropping holes before it); with
    /// `due`, only if its 2 MSL are over by then.
    pub fn pop_front(&mut self, due: Option<Instant>) -> Option<TimeWait> {
        self.drop_front_holes();
        let front = self.queue.front()?;
        if due.is_some_and(|now| front.tw.until > now) {
            return None;
        }
        let slot = self.queue.pop_front()?;
        self.base = self.base.wrapping_add(1);
        self.drop_front_holes();
        Some(slot.tw)
    }

    fn drop_front_holes(&mut self) {
        while self.queue.front().is_some_and(|s| !s.live) {
            self.queue.pop_front();
            self.base = self.base.wrapping_add(1);
        }
    }

    /// Drops every hole and renumbers the live entries from 0, telling
    /// `moved` each one's new position (O(slots)).
    pub fn compact(&mut self, mut moved: impl FnMut(&FlowKey, u32)) {
        self.queue.retain(|s| s.live);
        self.base = 0;
        for (i, slot) in self.queue.iter().enumerate() {
            moved(&slot.tw.key, i as u32);
        }
    }
}
