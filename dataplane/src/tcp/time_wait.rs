//! TIME-WAIT (RFC 9293 §3.6) kept apart from live connections: once a
//! connection enters it and the application has read what the peer sent,
//! its control block is freed and a compact entry (the 4-tuple, the two
//! sequence numbers, the timestamp to echo) waits out 2 MSL here.
//!
//! The table is built for a server that closes first at a high connection
//! rate, where every new connection adds an entry and, with the table
//! full, recycles the oldest. Two parts:
//!
//! - **A ring of entries in arrival order.** Each entry has a *position*,
//!   a `u32` counted up from the first entry ever pushed; the live window
//!   is `[head, tail)`. Every wait is the same 2 MSL and a restart
//!   requeues, so the front is the first due: expiry and recycling only
//!   move `head` forward. An entry taken out early (a SYN reopening its
//!   4-tuple, a `connect` reusing it, a restart) leaves a hole that goes
//!   when it reaches the front.
//! - **An index by 4-tuple**: buckets of one cache line, each with eight
//!   ways holding a 16-bit tag of the key's hash and the entry's position.
//!   A way whose position lies outside the live window is free, so
//!   entries leaving at the front (expired, recycled) need no index work
//!   at all: their ways become free as `head` passes them. A new SYN's
//!   lookup reads one bucket line; entering TIME-WAIT writes one.
//!
//! A full bucket sends a new entry on to the next one and records the
//! entry's position as the bucket's *overflow mark*; lookups go on to the
//! next bucket only while that mark is inside the live window.
//!
//! Positions wrap after 2^32 pushes. A way left over from that long ago
//! could look live again; every hit is therefore checked against the
//! entry's own key in the ring, so such a way can only cost an extra
//! probe, never a wrong answer.

use super::{FlowAddr, FlowHashing, FlowKey, Seq};
use crate::time::Instant;
use std::hash::BuildHasher;
use std::net::Ipv4Addr;

/// What TIME-WAIT remembers of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TimeWait<I = Ipv4Addr> {
    pub key: FlowKey<I>,
    /// Our next sequence number (after our FIN).
    pub snd_nxt: Seq,
    /// The peer's next sequence number (after its FIN).
    pub rcv_nxt: Seq,
    /// The peer's last TSval, when the connection used timestamps.
    pub ts_recent: Option<u32>,
    /// The window field our ACKs carry.
    pub window: u16,
    /// When its 2 MSL are over (the wait started one `time_wait` before).
    pub until: Instant,
}

/// A ring slot: an entry, or the hole one taken out early left. Laid
/// out by hand (40 bytes; a `TimeWait` and a flag would take 48).
#[derive(Debug, Clone, Copy)]
struct Slot<I> {
    until: Instant,
    key: FlowKey<I>,
    window: u16,
    live: bool,
    has_ts: bool,
    snd_nxt: Seq,
    rcv_nxt: Seq,
    ts_recent: u32,
}

impl<I: FlowAddr> Slot<I> {
    const EMPTY: Self = Slot {
        until: Instant::ZERO,
        key: FlowKey {
            local: I::UNSPECIFIED,
            local_port: 0,
            remote: I::UNSPECIFIED,
            remote_port: 0,
        },
        window: 0,
        live: false,
        has_ts: false,
        snd_nxt: Seq(0),
        rcv_nxt: Seq(0),
        ts_recent: 0,
    };

    fn new(tw: &TimeWait<I>) -> Self {
        Slot {
            until: tw.until,
            key: tw.key,
            window: tw.window,
            live: true,
            has_ts: tw.ts_recent.is_some(),
            snd_nxt: tw.snd_nxt,
            rcv_nxt: tw.rcv_nxt,
            ts_recent: tw.ts_recent.unwrap_or(0),
        }
    }

    fn entry(&self) -> TimeWait<I> {
        TimeWait {
            key: self.key,
            snd_nxt: self.snd_nxt,
            rcv_nxt: self.rcv_nxt,
            ts_recent: self.has_ts.then_some(self.ts_recent),
            window: self.window,
            until: self.until,
        }
    }
}

const WAYS: usize = 8;

/// One cache line of the index.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Bucket {
    pos: [u32; WAYS],
    tags: [u16; WAYS],
    /// Position of the newest entry sent on past this bucket.
    overflow: u32,
}

/// Where a key's way is: bucket and way.
#[derive(Debug, Clone, Copy)]
struct Way {
    bucket: usize,
    way: usize,
}

/// Fewest ring slots and buckets kept once anything is stored.
const MIN_SLOTS: usize = 64;
const MIN_BUCKETS: usize = 8;

/// TIME-WAIT entries by 4-tuple, at most `max` of them (the oldest
/// recycled past that).
#[derive(Debug)]
pub(super) struct TimeWaitTable<I = Ipv4Addr> {
    /// The ring: a power of two long (or empty), slot of position `p` at
    /// `p & (len - 1)`.
    ring: Vec<Slot<I>>,
    head: u32,
    tail: u32,
    /// Live entries (the window's slots less its holes).
    live: usize,
    buckets: Vec<Bucket>,
    hashing: FlowHashing,
    max: usize,
    /// Entries recycled before their time because the table was full.
    pub recycled: u64,
}

impl<I: FlowAddr> TimeWaitTable<I> {
    /// A table keeping at most `max` entries, hashed under `hashing` (the
    /// engine's seed). It grows as entries come, up to ring slots for
    /// 1.5 × `max` (room for holes) and a bucket per four entries.
    pub fn new(max: usize, hashing: FlowHashing) -> Self {
        Self {
            ring: Vec::new(),
            head: 0,
            tail: 0,
            live: 0,
            buckets: Vec::new(),
            hashing,
            max,
            recycled: 0,
        }
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Ring slots in the window, live and holes.
    pub fn slots(&self) -> usize {
        self.tail.wrapping_sub(self.head) as usize
    }

    /// Bytes held (ring and index).
    pub fn bytes(&self) -> usize {
        self.ring.capacity() * std::mem::size_of::<Slot<I>>()
            + self.buckets.capacity() * std::mem::size_of::<Bucket>()
    }

    /// The entry of `key`.
    pub fn get(&self, key: &FlowKey<I>) -> Option<TimeWait<I>> {
        let w = self.find(key)?;
        let pos = self.buckets[w.bucket].pos[w.way];
        Some(self.slot(pos).entry())
    }

    /// Starts TIME-WAIT for `tw.key` (an entry it had is replaced),
    /// recycling the oldest entry when the table is full. With a bound
    /// of 0 nothing is kept.
    pub fn insert(&mut self, tw: TimeWait<I>) {
        if self.max == 0 {
            return;
        }
        self.make_room();
        // One hash for both: the old entry's way and the new one's.
        let (home, tag) = self.hash(&tw.key);
        if let Some(w) = self.find_from(&tw.key, home, tag) {
            self.take(w);
        }
        let pos = self.tail;
        let len = self.ring.len();
        self.ring[pos as usize & (len - 1)] = Slot::new(&tw);
        self.tail = pos.wrapping_add(1);
        self.live += 1;
        self.index_from(home, tag, pos);
        while self.live > self.max {
            if self.pop_front(None).is_none() {
                break;
            }
            self.recycled += 1;
        }
    }

    /// Takes `key`'s entry out early (reopened by a SYN, reused by a
    /// connect).
    pub fn remove(&mut self, key: &FlowKey<I>) -> Option<TimeWait<I>> {
        let w = self.find(key)?;
        Some(self.take(w))
    }

    /// Frees way `w` and leaves a hole in its ring slot.
    fn take(&mut self, w: Way) -> TimeWait<I> {
        let head = self.head;
        let b = &mut self.buckets[w.bucket];
        let pos = b.pos[w.way];
        // Outside the window: free.
        b.pos[w.way] = head.wrapping_sub(1);
        let mask = self.ring.len() - 1;
        let slot = &mut self.ring[pos as usize & mask];
        slot.live = false;
        self.live -= 1;
        slot.entry()
    }

    /// Restarts `key`'s 2 MSL (a retransmitted FIN came): it moves to the
    /// back of the ring, which stays in deadline order.
    pub fn restart(&mut self, key: &FlowKey<I>, until: Instant) {
        if let Some(mut tw) = self.remove(key) {
            tw.until = until;
            self.insert(tw);
        }
    }

    /// Ends the entries whose 2 MSL are over by `now`.
    pub fn expire(&mut self, now: Instant) {
        while self.pop_front(Some(now)).is_some() {}
    }

    /// Takes the oldest live entry out (holes before it go too); with
    /// `due`, only if its 2 MSL are over by then. Its way needs no
    /// change: `head` has passed its position.
    fn pop_front(&mut self, due: Option<Instant>) -> Option<TimeWait<I>> {
        while self.head != self.tail {
            let slot = *self.slot(self.head);
            if slot.live && due.is_some_and(|now| slot.until > now) {
                return None;
            }
            self.head = self.head.wrapping_add(1);
            if slot.live {
                self.live -= 1;
                return Some(slot.entry());
            }
        }
        None
    }

    fn slot(&self, pos: u32) -> &Slot<I> {
        &self.ring[pos as usize & (self.ring.len() - 1)]
    }

    fn in_window(&self, pos: u32) -> bool {
        pos.wrapping_sub(self.head) < self.tail.wrapping_sub(self.head)
    }

    /// `key`'s home bucket (the hash's low bits) and tag (its top 16);
    /// only while there are buckets (`find` with entries, or after
    /// `make_room`).
    fn hash(&self, key: &FlowKey<I>) -> (usize, u16) {
        let h = self.hashing.hash_one(key);
        ((h as usize) & (self.buckets.len() - 1), (h >> 48) as u16)
    }

    /// The way holding `key`'s live entry.
    fn find(&self, key: &FlowKey<I>) -> Option<Way> {
        if self.live == 0 {
            return None;
        }
        let (home, tag) = self.hash(key);
        self.find_from(key, home, tag)
    }

    /// [`Self::find`] from `key`'s home bucket and tag.
    fn find_from(&self, key: &FlowKey<I>, mut bucket: usize, tag: u16) -> Option<Way> {
        let mask = self.buckets.len() - 1;
        for _ in 0..self.buckets.len() {
            let b = &self.buckets[bucket];
            for way in 0..WAYS {
                if b.tags[way] == tag && self.in_window(b.pos[way]) {
                    let slot = self.slot(b.pos[way]);
                    if slot.live && slot.key == *key {
                        return Some(Way { bucket, way });
                    }
                }
            }
            if !self.in_window(b.overflow) {
                return None;
            }
            bucket = (bucket + 1) & mask;
        }
        None
    }

    /// Records `key` at `pos` in the first free way from its bucket on,
    /// marking the full buckets it passes.
    fn index(&mut self, key: &FlowKey<I>, pos: u32) {
        let (home, tag) = self.hash(key);
        self.index_from(home, tag, pos);
    }

    /// [`Self::index`] from the key's home bucket and tag.
    fn index_from(&mut self, mut bucket: usize, tag: u16, pos: u32) {
        let mask = self.buckets.len() - 1;
        // Ways outnumber live entries (see `make_room`), so a free one
        // exists; the bound only keeps a broken invariant from looping.
        for _ in 0..self.buckets.len() {
            let free = (0..WAYS).find(|&w| !self.in_window(self.buckets[bucket].pos[w]));
            let b = &mut self.buckets[bucket];
            if let Some(way) = free {
                b.pos[way] = pos;
                b.tags[way] = tag;
                return;
            }
            b.overflow = pos;
            bucket = (bucket + 1) & mask;
        }
        debug_assert!(false, "no free way from bucket {bucket}");
    }

    /// Makes room for one more slot at the tail and one more entry in the
    /// index: grows the ring (or, at its largest, drops its holes) and the
    /// index (a bucket per four entries, half its ways free).
    fn make_room(&mut self) {
        let want_buckets = (self.live + 1)
            .min(self.max)
            .div_ceil(WAYS / 2)
            .next_power_of_two();
        if self.buckets.len() < want_buckets.max(MIN_BUCKETS) {
            self.reindex(want_buckets.max(MIN_BUCKETS));
        }
        if self.slots() < self.ring.len() {
            return;
        }
        let most = (self.max + self.max / 2).next_power_of_two().max(MIN_SLOTS);
        if self.ring.len() < most {
            self.regrow((self.ring.len() * 2).max(MIN_SLOTS));
        } else {
            self.compact();
        }
    }

    /// Moves the window into a ring of `len` slots; positions stay.
    fn regrow(&mut self, len: usize) {
        let mut ring = vec![Slot::EMPTY; len];
        let mut pos = self.head;
        while pos != self.tail {
            ring[pos as usize & (len - 1)] = *self.slot(pos);
            pos = pos.wrapping_add(1);
        }
        self.ring = ring;
    }

    /// Drops the window's holes: the live entries get new positions from
    /// `tail` on (so every old way falls outside the new window) and are
    /// indexed again. O(ring), after at least a third of the ring became
    /// holes.
    fn compact(&mut self) {
        let entries: Vec<Slot<I>> = (0..self.slots() as u32)
            .map(|i| *self.slot(self.head.wrapping_add(i)))
            .filter(|s| s.live)
            .collect();
        self.head = self.tail;
        let len = self.ring.len();
        for slot in entries {
            self.ring[self.tail as usize & (len - 1)] = slot;
            self.tail = self.tail.wrapping_add(1);
        }
        self.reindex(self.buckets.len());
    }

    /// Builds an index of `buckets` buckets over the window's entries.
    fn reindex(&mut self, buckets: usize) {
        let free = self.head.wrapping_sub(1);
        self.buckets = vec![
            Bucket {
                pos: [free; WAYS],
                tags: [0; WAYS],
                overflow: free,
            };
            buckets
        ];
        let mut pos = self.head;
        while pos != self.tail {
            let slot = *self.slot(pos);
            if slot.live {
                self.index(&slot.key, pos);
            }
            pos = pos.wrapping_add(1);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    /// An entry for 10.0.0.1:80 from 10.0.0.2:`port`, due 30 s after `at` ms.
    pub(in crate::tcp) fn tw(port: u16, at: u64) -> TimeWait {
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
            until: Instant::from_millis(at) + Duration::from_secs(30),
        }
    }

    fn wide(i: u32) -> TimeWait {
        let mut t = tw((i & 0xffff) as u16, 0);
        t.key.remote = Ipv4Addr::from(0x0a00_0000 + (i >> 16));
        t
    }

    #[test]
    fn full_table_recycles_the_oldest_and_expiry_follows_arrival() {
        let mut t = TimeWaitTable::new(3, FlowHashing::default());
        for p in 1..=5 {
            t.insert(tw(p, u64::from(p)));
        }
        assert_eq!((t.len(), t.recycled), (3, 2));
        assert!(t.get(&tw(1, 0).key).is_none() && t.get(&tw(2, 0).key).is_none());
        assert_eq!(t.get(&tw(5, 0).key), Some(tw(5, 5)));
        // A restarted entry outlives the ones after it.
        t.restart(&tw(3, 0).key, Instant::from_millis(100_000));
        t.remove(&tw(4, 0).key);
        t.expire(Instant::from_millis(40_000));
        assert_eq!(t.len(), 1);
        assert!(t.get(&tw(3, 0).key).is_some());
        t.expire(Instant::from_millis(100_000));
        assert_eq!((t.len(), t.slots()), (0, 0));
    }

    #[test]
    fn a_bound_of_zero_keeps_nothing() {
        let mut t = TimeWaitTable::new(0, FlowHashing::default());
        t.insert(tw(1, 0));
        assert_eq!((t.len(), t.bytes()), (0, 0));
        assert!(t.get(&tw(1, 0).key).is_none());
    }

    #[test]
    fn entries_that_share_buckets_overflow_and_are_all_found() {
        // Four entries a bucket on average: some buckets fill and send
        // entries on to the next.
        let mut t = TimeWaitTable::new(1 << 14, FlowHashing::default());
        for i in 0..8192 {
            t.insert(wide(i));
        }
        assert!(t.buckets.iter().any(|b| t.in_window(b.overflow)));
        for i in 0..8192 {
            assert_eq!(t.get(&wide(i).key), Some(wide(i)), "entry {i}");
        }
        assert!(t.get(&wide(8192).key).is_none());
        // Recycling at the bound leaves exactly the newest entries.
        let mut t = TimeWaitTable::new(1000, FlowHashing::default());
        for i in 0..50_000 {
            t.insert(wide(i));
        }
        assert_eq!((t.len(), t.recycled), (1000, 49_000));
        assert_eq!(
            (0..50_000)
                .filter(|&i| t.get(&wide(i).key).is_some())
                .count(),
            1000
        );
        assert!((49_000..50_000).all(|i| t.get(&wide(i).key).is_some()));
        // Memory: a ring of at most 1.5 × the bound (a power of two) and
        // a bucket per four entries, no more however many came.
        assert!(t.ring.len() <= 2048);
        assert_eq!(t.buckets.len(), 256);
        assert_eq!(std::mem::size_of::<Slot<std::net::Ipv4Addr>>(), 40);
    }

    #[test]
    fn holes_are_compacted_and_positions_may_wrap() {
        let mut t = TimeWaitTable::new(100, FlowHashing::default());
        // Start just below the wrap of positions.
        t.head = u32::MAX - 500;
        t.tail = t.head;
        for i in 0..100 {
            t.insert(wide(i));
        }
        // A peer restarting its entries over and over: each leaves a hole.
        for round in 0..50u64 {
            for i in 0..100 {
                t.restart(&wide(i).key, Instant::from_millis(round));
            }
        }
        assert_eq!(t.len(), 100);
        assert!(t.slots() <= t.ring.len() && t.ring.len() <= 256);
        for i in 0..100 {
            assert_eq!(
                t.get(&wide(i).key).map(|e| e.until),
                Some(Instant::from_millis(49))
            );
        }
        assert!(t.head < 1 << 20, "positions wrapped");
    }

    #[test]
    fn agrees_with_a_plain_model() {
        // Random inserts, removals, restarts and expiries against a list.
        let mut t = TimeWaitTable::new(50, FlowHashing::default());
        let mut model: Vec<TimeWait> = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut now = 0u64;
        for _ in 0..50_000 {
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
            assert!(t.slots() <= 128);
        }
        for m in &model {
            assert_eq!(t.get(&m.key), Some(*m));
        }
    }
}
