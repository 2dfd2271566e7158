//! The flow table: every 4-tuple the engine knows, live connections and
//! TIME-WAIT alike, and the rule that a 4-tuple is in at most one of them.
//!
//! The two are kept in separate maps on purpose. Live connections are few
//! (the open ones) and every segment of theirs looks them up, so their map
//! stays small and in cache; TIME-WAIT can hold hundreds of thousands of
//! entries, looked up only by segments that match no connection (a new
//! SYN, a late retransmission). One map for both (as Linux's established
//! hash) was measured slower: the live lookups then miss the cache too.
//! TIME-WAIT entries wait in the arrival-order [`TimeWaitQueue`]; their
//! map holds their positions.
//!
//! TIME-WAIT is bounded (`max_time_wait`): when it is full the oldest
//! entry is recycled, as Linux does past `tcp_max_tw_buckets`, so it never
//! refuses a new connection and never counts against `max_connections`.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use super::time_wait::{TimeWait, TimeWaitQueue};
use super::{ConnId, FlowHashing, FlowKey};
use crate::time::Instant;

type Map<V> = HashMap<FlowKey, V, FlowHashing>;

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    Conn(ConnId),
    TimeWait(TimeWait),
    Nothing,
}

/// Connections and TIME-WAIT entries of one engine by 4-tuple.
#[derive(Debug)]
pub(super) struct FlowTable {
    conns: Map<ConnId>,
    /// Position of each TIME-WAIT entry in `time_wait`.
    waiting: Map<u32>,
    time_wait: TimeWaitQueue,
    max_time_wait: usize,
    /// TIME-WAIT entries recycled before their time because the table
    /// was full.
    pub recycled: u64,
}

impl FlowTable {
    /// A table keeping at most `max_time_wait` TIME-WAIT entries, its
    /// maps hashed under `hashing` (the engine's seed).
    pub fn new(max_time_wait: usize, hashing: FlowHashing) -> Self {
        Self {
            conns: Map::with_hasher(hashing),
            waiting: Map::with_hasher(hashing),
            time_wait: TimeWaitQueue::default(),
            max_time_wait,
            recycled: 0,
        }
    }

    /// What `key` belongs to: a connection, else TIME-WAIT.
    pub fn find(&self, key: &FlowKey) -> Found {
        if let Some(&id) = self.conns.get(key) {
            return Found::Conn(id);
        }
        match self.time_wait(key) {
            Some(tw) => Found::TimeWait(tw),
            None => Found::Nothing,
        }
    }

    /// The connection `key` belongs to.
    pub fn conn(&self, key: &FlowKey) -> Option<ConnId> {
        self.conns.get(key).copied()
    }

    /// Connections in the table (TIME-WAIT entries are not).
    pub fn conns(&self) -> usize {
        self.conns.len()
    }

    /// Entries waiting out TIME-WAIT.
    pub fn time_wait_len(&self) -> usize {
        self.waiting.len()
    }

    /// Bytes held (capacities; hashbrown keeps one control byte per
    /// bucket besides the entry).
    pub fn bytes(&self) -> usize {
        self.conns.capacity() * (std::mem::size_of::<(FlowKey, ConnId)>() + 1)
            + self.waiting.capacity() * (std::mem::size_of::<(FlowKey, u32)>() + 1)
            + self.time_wait.bytes()
    }

    /// Records connection `id` for `key`, which must be free (a
    /// TIME-WAIT entry for it is ended first: [`FlowTable::end_time_wait`]).
    pub fn insert_conn(&mut self, key: FlowKey, id: ConnId) {
        debug_assert!(!self.waiting.contains_key(&key), "{key:?} is in TIME-WAIT");
        let old = self.conns.insert(key, id);
        debug_assert!(old.is_none(), "{key:?} was taken");
    }

    /// Forgets connection `key`'s entry.
    pub fn remove_conn(&mut self, key: &FlowKey) {
        self.conns.remove(key);
    }

    /// The TIME-WAIT entry of `key`.
    pub fn time_wait(&self, key: &FlowKey) -> Option<TimeWait> {
        let tw = self.time_wait.get(*self.waiting.get(key)?);
        // Never expected: a hole's key leaves the map with it.
        debug_assert!(tw.is_some(), "{key:?} maps to a TIME-WAIT hole");
        tw
    }

    /// Starts TIME-WAIT for `tw.key` (whose connection has left the
    /// table), recycling the oldest entry when the table is full. With a
    /// bound of 0 nothing is kept.
    pub fn enter_time_wait(&mut self, tw: TimeWait) {
        if self.max_time_wait == 0 {
            return;
        }
        debug_assert!(
            !self.conns.contains_key(&tw.key),
            "{:?} has a connection",
            tw.key
        );
        // Pushed first: a key already waiting is replaced, not counted
        // twice, and the bound is kept without a lookup beforehand.
        self.push(tw);
        while self.waiting.len() > self.max_time_wait {
            let Some(old) = self.time_wait.pop_front(None) else {
                break;
            };
            self.waiting.remove(&old.key);
            self.recycled += 1;
        }
    }

    /// Queues `tw` last and records its position (replacing any entry of
    /// its key: the caller has taken that one out of the queue).
    fn push(&mut self, tw: TimeWait) {
        // Holes left by early removals and restarts are dropped when they
        // reach the front; a peer restarting one entry over and over must
        // not grow the queue past twice the bound meanwhile.
        if self.time_wait.slots() >= 2 * self.max_time_wait.max(64) {
            let waiting = &mut self.waiting;
            self.time_wait.compact(|key, at| {
                if let Some(pos) = waiting.get_mut(key) {
                    *pos = at;
                }
            });
        }
        let at = self.time_wait.push(tw);
        if let Some(old) = self.waiting.insert(tw.key, at) {
            // A key entering twice without leaving: keep the queue right.
            self.time_wait.take(old);
        }
    }

    /// Ends TIME-WAIT for `key` early (reopened by a SYN, reused by a
    /// connect).
    pub fn end_time_wait(&mut self, key: &FlowKey) -> Option<TimeWait> {
        let at = self.waiting.remove(key)?;
        self.time_wait.take(at)
    }

    /// Restarts the 2 MSL wait of `key` (a retransmitted FIN arrived): it
    /// moves to the back of the queue, which stays in deadline order.
    pub fn restart_time_wait(&mut self, key: &FlowKey, until: Instant) {
        let Entry::Occupied(e) = self.waiting.entry(*key) else {
            return;
        };
        let at = e.remove();
        if let Some(mut tw) = self.time_wait.take(at) {
            tw.until = until;
            self.push(tw);
        }
    }

    /// Ends the TIME-WAIT entries whose 2 MSL are over.
    pub fn expire(&mut self, now: Instant) {
        while let Some(tw) = self.time_wait.pop_front(Some(now)) {
            self.waiting.remove(&tw.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::Seq;
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
        let mut t = FlowTable::new(3, FlowHashing::default());
        for p in 1..=5 {
            t.enter_time_wait(tw(p, u64::from(p)));
        }
        assert_eq!((t.time_wait_len(), t.recycled), (3, 2));
        assert!(t.time_wait(&tw(1, 0).key).is_none() && t.time_wait(&tw(2, 0).key).is_none());
        assert!(t.time_wait(&tw(5, 0).key).is_some());
        // A restarted entry outlives the ones after it.
        t.restart_time_wait(&tw(3, 0).key, Instant::from_millis(100_000));
        t.end_time_wait(&tw(4, 0).key);
        t.expire(Instant::from_millis(40_000));
        assert_eq!(t.time_wait_len(), 1);
        assert!(t.time_wait(&tw(3, 0).key).is_some());
        t.expire(Instant::from_millis(100_000));
        assert_eq!(t.time_wait_len(), 0);
        assert!(t.time_wait.slots() == 0);
    }

    #[test]
    fn agrees_with_a_plain_model() {
        // Random inserts, removals, restarts and expiries against a list.
        let mut t = FlowTable::new(50, FlowHashing::default());
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
                    t.enter_time_wait(e);
                    model.retain(|m| m.key != e.key);
                    if model.len() == 50 {
                        model.remove(0);
                    }
                    model.push(e);
                }
                2 => {
                    let k = tw(port, 0).key;
                    assert_eq!(t.end_time_wait(&k), {
                        let i = model.iter().position(|m| m.key == k);
                        i.map(|i| model.remove(i))
                    });
                }
                3 => {
                    let k = tw(port, 0).key;
                    let until = Instant::from_millis(now) + Duration::from_secs(30);
                    t.restart_time_wait(&k, until);
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
            assert_eq!(t.time_wait_len(), model.len());
            assert!(t.time_wait.slots() <= 2 * 64 + 1);
        }
        for m in &model {
            assert_eq!(t.time_wait(&m.key), Some(*m));
        }
    }

    #[test]
    fn one_lookup_finds_connections_and_time_wait_apart() {
        let mut t = FlowTable::new(2, FlowHashing::default());
        let (a, b, c) = (tw(1, 0), tw(2, 0), tw(3, 0));
        t.insert_conn(a.key, ConnId::new(7, 0));
        t.insert_conn(b.key, ConnId::new(8, 0));
        assert_eq!(t.find(&a.key), Found::Conn(ConnId::new(7, 0)));
        // b's connection leaves for TIME-WAIT.
        t.remove_conn(&b.key);
        t.enter_time_wait(b);
        assert_eq!((t.conns(), t.time_wait_len()), (1, 1));
        assert_eq!(t.find(&b.key), Found::TimeWait(b));
        assert_eq!(t.conn(&b.key), None);
        assert_eq!(t.find(&c.key), Found::Nothing);
        // Full TIME-WAIT recycles only TIME-WAIT entries.
        t.enter_time_wait(c);
        t.enter_time_wait(tw(4, 0));
        assert_eq!((t.conns(), t.time_wait_len(), t.recycled), (1, 2, 1));
        assert_eq!(t.find(&b.key), Found::Nothing);
        assert_eq!(t.find(&a.key), Found::Conn(ConnId::new(7, 0)));
        // A SYN reopening c: its entry becomes a connection again.
        assert_eq!(t.end_time_wait(&c.key), Some(c));
        t.insert_conn(c.key, ConnId::new(9, 0));
        assert_eq!((t.conns(), t.time_wait_len()), (2, 1));
        t.expire(Instant::from_millis(31_000));
        assert_eq!((t.conns(), t.time_wait_len()), (2, 0));
        assert_eq!(t.find(&c.key), Found::Conn(ConnId::new(9, 0)));
    }

    #[test]
    fn the_seed_moves_every_key() {
        use std::hash::BuildHasher;
        let (a, b) = (
            crate::tcp::Secret::from_seed(1).flow_hashing(),
            crate::tcp::Secret::from_seed(2).flow_hashing(),
        );
        for port in 1..200 {
            let key = tw(port, 0).key;
            assert_ne!(a.hash_one(key), b.hash_one(key), "port {port}");
            assert_ne!(a.hash_one(key), FlowHashing::default().hash_one(key));
        }
        // A seeded table works as an unseeded one.
        let mut t = FlowTable::new(4, a);
        t.insert_conn(tw(1, 0).key, ConnId::new(1, 0));
        t.enter_time_wait(tw(2, 0));
        assert_eq!(t.find(&tw(1, 0).key), Found::Conn(ConnId::new(1, 0)));
        assert_eq!(t.find(&tw(2, 0).key), Found::TimeWait(tw(2, 0)));
    }
}
