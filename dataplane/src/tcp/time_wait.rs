//! TIME-WAIT (RFC 9293 §3.6) kept apart from live connections: once a
//! connection enters it and the application has read what the peer sent,
//! its control block is freed and a compact entry (the 4-tuple, the two
//! sequence numbers, the timestamp to echo) waits out 2 MSL here.
//!
//! The table is bounded (`max_time_wait`); when it is full the oldest entry
//! is recycled, as Linux does past `tcp_max_tw_buckets`, so TIME-WAIT never
//! refuses a new connection and never counts against `max_connections`.
//! Entries are queued in the order they (re)started their wait; every wait
//! is the same 2 MSL, so the front is the first due, and expiry looks only
//! there.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;

use super::{FlowKey, FxHasher, Seq};
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

/// A slot of the arrival-order queue: an entry, or the hole left by one
/// taken out early (reopened by a SYN, reused by a connect).
#[derive(Debug, Clone, Copy)]
struct Slot {
    tw: TimeWait,
    live: bool,
}

/// The TIME-WAIT table of one engine.
#[derive(Debug)]
pub(super) struct TimeWaitTable {
    queue: VecDeque<Slot>,
    /// Position (counted from the first slot ever queued) by 4-tuple.
    index: HashMap<FlowKey, u64, BuildHasherDefault<FxHasher>>,
    /// Position of `queue[0]`.
    base: u64,
    max: usize,
    /// Entries recycled before their time because the table was full.
    pub recycled: u64,
}

impl TimeWaitTable {
    pub fn new(max: usize) -> Self {
        Self {
            queue: VecDeque::new(),
            index: HashMap::default(),
            base: 0,
            max,
            recycled: 0,
        }
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Bytes held (capacities).
    pub fn bytes(&self) -> usize {
        self.queue.capacity() * std::mem::size_of::<Slot>()
            + self.index.capacity() * (std::mem::size_of::<(FlowKey, u64)>() + 1)
    }

    /// Starts TIME-WAIT for `tw.key`, recycling the oldest entry when the
    /// table is full. With a bound of 0 nothing is kept.
    pub fn insert(&mut self, tw: TimeWait) {
        if self.max == 0 {
            return;
        }
        self.remove(&tw.key);
        while self.index.len() >= self.max {
            if self.pop_front().is_some() {
                self.recycled += 1;
            }
        }
        self.push_back(tw);
    }

    fn push_back(&mut self, tw: TimeWait) {
        // Holes left by early removals and restarts are dropped when they
        // reach the front; a peer restarting one entry over and over must
        // not grow the queue past twice the bound meanwhile.
        if self.queue.len() >= 2 * self.max.max(64) {
            self.compact();
        }
        let at = self.base + self.queue.len() as u64;
        self.queue.push_back(Slot { tw, live: true });
        self.index.insert(tw.key, at);
    }

    /// Drops every hole, renumbering the live entries (O(entries), at most
    /// once per `max` pushes).
    fn compact(&mut self) {
        self.queue.retain(|s| s.live);
        self.base = 0;
        for (i, slot) in self.queue.iter().enumerate() {
            self.index.insert(slot.tw.key, i as u64);
        }
    }

    /// Takes the oldest live entry out (dropping holes before it).
    fn pop_front(&mut self) -> Option<TimeWait> {
        while let Some(slot) = self.queue.pop_front() {
            self.base += 1;
            if slot.live {
                self.index.remove(&slot.tw.key);
                return Some(slot.tw);
            }
        }
        None
    }

    pub fn get(&self, key: &FlowKey) -> Option<TimeWait> {
        let at = *self.index.get(key)?;
        let slot = self.queue.get((at - self.base) as usize)?;
        slot.live.then_some(slot.tw)
    }

    /// Restarts the 2 MSL wait of `key` (a retransmitted FIN arrived): it
    /// moves to the back of the queue, which stays in deadline order.
    pub fn restart(&mut self, key: &FlowKey, until: Instant) {
        if let Some(mut tw) = self.remove(key) {
            tw.until = until;
            self.push_back(tw);
        }
    }

    /// Ends TIME-WAIT for `key` early.
    pub fn remove(&mut self, key: &FlowKey) -> Option<TimeWait> {
        let MapEntry::Occupied(e) = self.index.entry(*key) else {
            return None;
        };
        let at = e.remove();
        let slot = self.queue.get_mut((at - self.base) as usize)?;
        slot.live = false;
        let tw = slot.tw;
        // Holes at the front go at once; others when they reach it.
        while self.queue.front().is_some_and(|s| !s.live) {
            self.queue.pop_front();
            self.base += 1;
        }
        Some(tw)
    }

    /// Ends the entries whose 2 MSL are over (the queue is in deadline
    /// order: every wait is the same length and a restart requeues).
    pub fn expire(&mut self, now: Instant) {
        while let Some(front) = self.queue.front() {
            if !front.live {
                self.queue.pop_front();
                self.base += 1;
            } else if front.tw.until <= now {
                self.pop_front();
            } else {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    fn tw(port: u16, at: u64) -> TimeWait {
        TimeWait {
            key: FlowKey {
                local: Ipv4Addr::new(10, 0, 0, 1),
                local_port: 80,
                remote: Ipv4Addr::new(10, 0, 0, 2),
                remote_port: port,
            },
            snd_nxt: Seq(1),
            rcv_nxt: Seq(2),
            ts_recent: None,
            window: 100,
            entered: Instant::from_millis(at),
            until: Instant::from_millis(at) + Duration::from_secs(30),
        }
    }

    #[test]
    fn full_table_recycles_the_oldest_and_expiry_follows_arrival() {
        let mut t = TimeWaitTable::new(3);
        for p in 1..=5 {
            t.insert(tw(p, u64::from(p)));
        }
        assert_eq!((t.len(), t.recycled), (3, 2));
        assert!(t.get(&tw(1, 0).key).is_none() && t.get(&tw(2, 0).key).is_none());
        assert!(t.get(&tw(5, 0).key).is_some());
        // A restarted entry outlives the ones after it.
        t.restart(&tw(3, 0).key, Instant::from_millis(100_000));
        t.remove(&tw(4, 0).key);
        t.expire(Instant::from_millis(40_000));
        assert_eq!(t.len(), 1);
        assert!(t.get(&tw(3, 0).key).is_some());
        t.expire(Instant::from_millis(100_000));
        assert_eq!(t.len(), 0);
        assert!(t.queue.is_empty());
    }

    #[test]
    fn agrees_with_a_plain_model() {
        // Random inserts, removals, restarts and expiries against a list.
        let mut t = TimeWaitTable::new(50);
        let mut model: Vec<TimeWait> = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut now = 0u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let port = (x % 97) as u16;
            match (x >> 8) % 5 {
                0 | 1 => {
                    let e = tw(port, now);
                    t.insert(e);
                    model.retain(|m| m.key != e.key);
                    if model.len() == 50 {
                        model.remove(0);
                    }
                    model.push(e);
                }
                2 => {
                    let k = tw(port, 0).key;
                    assert_eq!(t.remove(&k), {
                        let i = model.iter().position(|m| m.key == k);
                        i.map(|i| model.remove(i))
                    });
                }
                3 => {
                    let k = tw(port, 0).key;
                    let until = Instant::from_millis(now) + Duration::from_secs(30);
                    t.restart(&k, until);
                    if let Some(i) = model.iter().position(|m| m.key == k) {
                        let mut m = model.remove(i);
                        m.until = until;
                        model.push(m);
                    }
                }
                _ => {
                    now += (x >> 20) % 3000;
                    let at = Instant::from_millis(now);
                    t.expire(at);
                    model.retain(|m| m.until > at);
                }
            }
            assert_eq!(t.len(), model.len());
            assert!(t.queue.len() <= 2 * 64 + 1);
        }
        for m in &model {
            assert_eq!(t.get(&m.key), Some(*m));
        }
    }
}
