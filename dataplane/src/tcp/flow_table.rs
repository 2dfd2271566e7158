//! The flow table: every 4-tuple the engine knows, live connections and
//! TIME-WAIT alike, and the rule that a 4-tuple is in at most one of them.
//!
//! The two are kept in separate maps on purpose. Live connections are few
//! (the open ones) and every segment of theirs looks them up, so their map
//! stays small and in cache; TIME-WAIT can hold hundreds of thousands of
//! entries, looked up only by segments that match no connection (a new
//! SYN, a late retransmission). One map for both (as Linux's established
//! hash) was measured slower: the live lookups then miss the cache too.
//! TIME-WAIT entries are in their own table ([`TimeWaitTable`]).
//!
//! TIME-WAIT is bounded (`max_time_wait`): when it is full the oldest
//! entry is recycled, as Linux does past `tcp_max_tw_buckets`, so it never
//! refuses a new connection and never counts against `max_connections`.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use super::time_wait::{TimeWait, TimeWaitTable};
use super::{ConnId, FlowAddr, FlowHashing, FlowKey};
use crate::time::Instant;

type Map<I, V> = HashMap<FlowKey<I>, V, FlowHashing>;

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found<I = Ipv4Addr> {
    Conn(ConnId),
    TimeWait(TimeWait<I>),
    Nothing,
}

/// Connections and TIME-WAIT entries of one engine by 4-tuple.
#[derive(Debug)]
pub(super) struct FlowTable<I = Ipv4Addr> {
    conns: Map<I, ConnId>,
    time_wait: TimeWaitTable<I>,
}

impl<I: FlowAddr> FlowTable<I> {
    /// A table keeping at most `max_time_wait` TIME-WAIT entries, its
    /// maps hashed under `hashing` (the engine's seed).
    pub fn new(max_time_wait: usize, hashing: FlowHashing) -> Self {
        Self {
            conns: Map::with_hasher(hashing),
            time_wait: TimeWaitTable::new(max_time_wait, hashing),
        }
    }

    /// TIME-WAIT entries recycled before their time because the table
    /// was full.
    pub fn recycled(&self) -> u64 {
        self.time_wait.recycled
    }

    /// What `key` belongs to: a connection, else TIME-WAIT.
    pub fn find(&self, key: &FlowKey<I>) -> Found<I> {
        if let Some(&id) = self.conns.get(key) {
            return Found::Conn(id);
        }
        match self.time_wait(key) {
            Some(tw) => Found::TimeWait(tw),
            None => Found::Nothing,
        }
    }

    /// Prefetches what [`Self::find`] of a `key` with no connection reads
    /// from the TIME-WAIT table (the connections' map is small and hot).
    pub fn prefetch_time_wait(&self, key: &FlowKey<I>) {
        self.time_wait.prefetch(key);
    }

    /// The connection `key` belongs to.
    pub fn conn(&self, key: &FlowKey<I>) -> Option<ConnId> {
        self.conns.get(key).copied()
    }

    /// Connections in the table (TIME-WAIT entries are not).
    pub fn conns(&self) -> usize {
        self.conns.len()
    }

    /// Entries waiting out TIME-WAIT.
    pub fn time_wait_len(&self) -> usize {
        self.time_wait.len()
    }

    /// Bytes held (capacities; hashbrown keeps one control byte per
    /// bucket besides the entry).
    pub fn bytes(&self) -> usize {
        self.conns.capacity() * (std::mem::size_of::<(FlowKey<I>, ConnId)>() + 1)
            + self.time_wait.bytes()
    }

    /// Records connection `id` for `key`, which must be free (a
    /// TIME-WAIT entry for it is ended first: [`FlowTable::end_time_wait`]).
    pub fn insert_conn(&mut self, key: FlowKey<I>, id: ConnId) {
        debug_assert!(self.time_wait(&key).is_none(), "{key:?} is in TIME-WAIT");
        let old = self.conns.insert(key, id);
        debug_assert!(old.is_none(), "{key:?} was taken");
    }

    /// Forgets connection `key`'s entry.
    pub fn remove_conn(&mut self, key: &FlowKey<I>) {
        self.conns.remove(key);
    }

    /// The TIME-WAIT entry of `key`.
    pub fn time_wait(&self, key: &FlowKey<I>) -> Option<TimeWait<I>> {
        self.time_wait.get(key)
    }

    /// Starts TIME-WAIT for `tw.key` (whose connection has left the
    /// table), recycling the oldest entry when the table is full. With a
    /// bound of 0 nothing is kept.
    pub fn enter_time_wait(&mut self, tw: TimeWait<I>) {
        debug_assert!(
            !self.conns.contains_key(&tw.key),
            "{:?} has a connection",
            tw.key
        );
        self.time_wait.insert(tw);
    }

    /// Ends TIME-WAIT for `key` early (reopened by a SYN, reused by a
    /// connect).
    pub fn end_time_wait(&mut self, key: &FlowKey<I>) -> Option<TimeWait<I>> {
        self.time_wait.remove(key)
    }

    /// Restarts the 2 MSL wait of `key` (a retransmitted FIN arrived);
    /// the order of the table's ring may give by `step`
    /// ([`TimeWaitTable::restart`]).
    pub fn restart_time_wait(&mut self, key: &FlowKey<I>, until: Instant, step: Duration) {
        self.time_wait.restart(key, until, step);
    }

    /// Ends the TIME-WAIT entries whose 2 MSL are over.
    pub fn expire(&mut self, now: Instant) {
        self.time_wait.expire(now);
    }
}

#[cfg(test)]
mod tests {
    use super::super::time_wait::tests::tw;
    use super::*;

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
        assert_eq!((t.conns(), t.time_wait_len(), t.recycled()), (1, 2, 1));
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
