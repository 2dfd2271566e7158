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
//!   requeues (or, repeated within a step, changes the deadline in
//!   place), so the front is the first due: expiry and recycling only
//!   move `head` forward. An entry taken out early (a SYN reopening its
//!   4-tuple, a `connect` reusing it, a restart) leaves a hole that goes
//!   when it reaches the front; with every slot of the ring in use, the
//!   oldest slot goes (holes are never compacted).
//! - **An index by 4-tuple**: buckets of one cache line, each with eight
//!   ways holding a 16-bit tag of the key's hash (never 0: a zero tag is a
//!   free way) and the entry's position. A way whose position lies
//!   outside the live window is free, so entries leaving at the front
//!   (expired, recycled) need no index work at all: their ways become
//!   free as `head` passes them. A new SYN's lookup reads one bucket
//!   line; entering TIME-WAIT writes one.
//!
//! A full bucket sends a new entry on to the next one and counts it as
//! *passed*; lookups go on to the next bucket only while that count is not
//! 0, and never past `MAX_PROBES` buckets. An entry so placed records how
//! many buckets it passed, and counts itself out of them when it leaves
//! (early, expired or recycled: the one case where leaving at the front
//! touches the index), so the counts are exact and a lookup reads no
//! bucket it does not need.
//!
//! Every operation is O(1), and nothing grows by copying: the index is
//! made at its final size (in zeroed memory, its pages supplied as first
//! written) and the ring's slots come in chunks as the tail reaches them,
//! so the table never stalls the engine loop the way doubling a 20 MiB
//! ring, rehashing a 4 MiB index or compacting holes did (docs/tcp.md).
//!
//! Positions wrap after 2^32 pushes. A way left over from that long ago
//! could look live again; every hit is therefore checked against
//! the entry's own key in the ring, so such a way can only cost an extra
//! probe, never a wrong answer.

use super::{FlowAddr, FlowHashing, FlowKey, Seq};
use crate::time::Instant;
use std::hash::BuildHasher;
use std::net::Ipv4Addr;
use std::time::Duration;

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
    /// Full buckets its way is past its home bucket (< `MAX_PROBES`).
    passed: u8,
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
        passed: 0,
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
            passed: 0,
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
/// `u32` words in an index bucket: one cache line.
const BUCKET_WORDS: usize = 16;
/// Where a bucket's tags start: two to a word after the eight positions.
const TAG_WORD: usize = WAYS;
/// The word counting the live entries placed past a bucket (it was full
/// when they came): lookups go on to the next bucket only while it is
/// not 0.
const PASSED_WORD: usize = WAYS + WAYS / 2;

/// Where a key's way is: bucket and way.
#[derive(Debug, Clone, Copy)]
struct Way {
    bucket: usize,
    way: usize,
}

/// Fewest ring slots and buckets.
const MIN_SLOTS: usize = 64;
const MIN_BUCKETS: usize = 8;
/// Ring slots per chunk (40 KiB).
const CHUNK: usize = 1024;
/// Buckets an entry may be placed in from its home on: at most the
/// buckets a lookup reads. With the index at most half full, eight full
/// buckets in a row are too rare to matter (under a keyed hash); an
/// entry that finds no way within them is dropped.
const MAX_PROBES: usize = 8;

/// A ring chunk's slots.
type Chunk<I> = Box<[Slot<I>]>;

/// TIME-WAIT entries by 4-tuple, at most `max` of them (the oldest
/// recycled past that).
///
/// Every operation is O(1): nothing is moved or rebuilt as the table
/// fills, so no insert stalls the engine loop. The index has its final
/// size from the first entry on, in zeroed memory (every way free; the
/// kernel supplies its pages as buckets are first written), and the
/// ring's slots come in chunks taken as the tail reaches them and handed
/// back as the head leaves them. Holes are not compacted: with every
/// slot of the ring in use (a third of them holes at least) the oldest
/// slot goes, so an entry leaves before its 2 MSL only when `max` newer
/// entries are live or a ring's length of newer ones (at least 1.5 ×
/// `max`) were pushed since.
#[derive(Debug)]
pub(super) struct TimeWaitTable<I = Ipv4Addr> {
    /// The ring's chunks (none before the first entry): the slot of
    /// position `p` is `p & (ring_len - 1)`, in chunk `that / CHUNK`.
    chunks: Vec<Option<Chunk<I>>>,
    /// A chunk the head left, kept for the next one the tail needs.
    spare: Option<Chunk<I>>,
    /// Chunks allocated: those in `chunks` and the spare (kept as they
    /// come and go, so [`TimeWaitTable::bytes`] walks nothing).
    held_chunks: usize,
    /// Ring slots: room for 1.5 × `max` (holes), a power of two.
    ring_len: usize,
    /// Slots per chunk: `CHUNK`, or `ring_len` when smaller.
    chunk_len: usize,
    head: u32,
    tail: u32,
    /// Live entries (the window's slots less its holes).
    live: usize,
    /// The index: `bucket_mask + 1` buckets of `BUCKET_WORDS` words from
    /// `base` (the first cache-line boundary), zeroed when made. A way
    /// is free when its tag is 0 (tags are never 0) or its position lies
    /// outside the window.
    index: Vec<u32>,
    base: usize,
    bucket_mask: usize,
    hashing: FlowHashing,
    max: usize,
    /// Entries recycled before their time because the table was full.
    pub recycled: u64,
}

impl<I: FlowAddr> TimeWaitTable<I> {
    /// A table keeping at most `max` entries, hashed under `hashing` (the
    /// engine's seed). Its index (a bucket per four entries) is made at
    /// the first entry; its ring holds slots for 1.5 × `max`.
    pub fn new(max: usize, hashing: FlowHashing) -> Self {
        let ring_len = (max + max / 2).next_power_of_two().max(MIN_SLOTS);
        Self {
            chunks: Vec::new(),
            spare: None,
            held_chunks: 0,
            ring_len,
            chunk_len: CHUNK.min(ring_len),
            // From 1: a zeroed overflow mark (position 0) is outside the
            // window until positions wrap.
            head: 1,
            tail: 1,
            live: 0,
            index: Vec::new(),
            base: 0,
            bucket_mask: 0,
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

    /// Bytes held (ring chunks and index).
    pub fn bytes(&self) -> usize {
        self.held_chunks * self.chunk_len * std::mem::size_of::<Slot<I>>()
            + self.index.capacity() * std::mem::size_of::<u32>()
    }

    /// Asks for the index bucket a lookup of `key` reads first (a cache
    /// miss once the table outgrows the caches), ahead of the lookup.
    pub fn prefetch(&self, key: &FlowKey<I>) {
        if self.live == 0 {
            return;
        }
        let (home, _) = self.hash(key);
        if let Some(word) = self.index.get(self.base + home * BUCKET_WORDS) {
            crate::dpdk::prefetch(word);
        }
    }

    /// The entry of `key`.
    pub fn get(&self, key: &FlowKey<I>) -> Option<TimeWait<I>> {
        let w = self.find(key)?;
        let pos = self.bucket(w.bucket)[w.way];
        self.slot(pos).map(Slot::entry)
    }

    /// Starts TIME-WAIT for `tw.key` (an entry it had is replaced),
    /// recycling the oldest entry when the table is full. With a bound
    /// of 0 nothing is kept.
    pub fn insert(&mut self, tw: TimeWait<I>) {
        if self.max == 0 {
            return;
        }
        if self.index.is_empty() {
            self.make_index();
            self.chunks = (0..self.ring_len / self.chunk_len).map(|_| None).collect();
        }
        if self.slots() >= self.ring_len && self.drop_front_slot() {
            // Every slot in use, at least a third of them holes (live
            // entries are at most `max`, two thirds of the ring): the
            // oldest goes, a hole for nothing, a live entry early.
            self.recycled += 1;
        }
        // One hash for both: the old entry's way and the new one's.
        let (home, tag) = self.hash(&tw.key);
        if let Some(w) = self.find_from(&tw.key, home, tag) {
            self.take(w);
        }
        let pos = self.tail;
        let Some(slot) = self.slot_for_tail() else {
            return;
        };
        *slot = Slot::new(&tw);
        self.tail = pos.wrapping_add(1);
        self.live += 1;
        let placed = self.index_from(home, tag, pos);
        if let Some(slot) = self.slot_mut(pos) {
            match placed {
                Some(passed) => slot.passed = passed,
                None => {
                    // No free way near its home: dropped (a hole).
                    slot.live = false;
                    self.live -= 1;
                }
            }
        }
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
        self.take(w)
    }

    /// Frees way `w` and leaves a hole in its ring slot.
    fn take(&mut self, w: Way) -> Option<TimeWait<I>> {
        let b = self.bucket_mut(w.bucket);
        let pos = b[w.way];
        set_tag(b, w.way, 0);
        let slot = self.slot_mut(pos)?;
        slot.live = false;
        let (entry, passed) = (slot.entry(), slot.passed);
        self.live -= 1;
        self.unpass(&entry.key, passed);
        Some(entry)
    }

    /// An entry placed `passed` buckets past its home leaves: those
    /// buckets count one entry fewer past them.
    fn unpass(&mut self, key: &FlowKey<I>, passed: u8) {
        if passed == 0 {
            return;
        }
        let (home, _) = self.hash(key);
        for k in 0..usize::from(passed) {
            let b = self.bucket_mut(home + k);
            b[PASSED_WORD] = b[PASSED_WORD].saturating_sub(1);
        }
    }

    /// Restarts `key`'s 2 MSL (a retransmitted FIN came) to end at
    /// `until`. The entry moves to the back of the ring, which stays in
    /// deadline order, unless it is the newest there or its new deadline
    /// is at most `step` past that of the slot after it: then only its
    /// deadline changes, so a peer repeating its FIN leaves at most a
    /// hole per `step` (each hole holds a ring slot until the head passes),
    /// and the entries behind it may end up to `step` late.
    pub fn restart(&mut self, key: &FlowKey<I>, until: Instant, step: Duration) {
        let Some(w) = self.find(key) else {
            return;
        };
        let pos = self.bucket(w.bucket)[w.way];
        let next = pos.wrapping_add(1);
        let in_place = step > Duration::ZERO
            && (next == self.tail
                || self
                    .slot(next)
                    .is_some_and(|s| until.saturating_since(s.until) <= step));
        if in_place {
            if let Some(slot) = self.slot_mut(pos) {
                slot.until = slot.until.max(until);
                return;
            }
        }
        if let Some(mut tw) = self.take(w) {
            tw.until = until;
            self.insert(tw);
        }
    }

    /// Ends the entries whose 2 MSL are over by `now`.
    pub fn expire(&mut self, now: Instant) {
        while self.pop_front(Some(now)).is_some() {}
    }

    /// Moves `head` past the oldest slot; whether it held a live entry.
    fn drop_front_slot(&mut self) -> bool {
        let Some(slot) = self.slot(self.head).copied() else {
            return false;
        };
        if self.head == self.tail {
            return false;
        }
        self.head = self.head.wrapping_add(1);
        self.release_behind_head();
        if slot.live {
            self.live -= 1;
            self.unpass(&slot.key, slot.passed);
        }
        slot.live
    }

    /// Takes the oldest live entry out (holes before it go too); with
    /// `due`, only if its 2 MSL are over by then. Its way needs no
    /// change (`head` has passed its position); only an entry placed past
    /// full buckets touches the index, to count itself out of them.
    fn pop_front(&mut self, due: Option<Instant>) -> Option<TimeWait<I>> {
        while self.head != self.tail {
            let slot = *self.slot(self.head)?;
            if slot.live && due.is_some_and(|now| slot.until > now) {
                return None;
            }
            if self.drop_front_slot() {
                return Some(slot.entry());
            }
        }
        None
    }

    /// The chunk and slot index of position `pos`.
    fn place(&self, pos: u32) -> (usize, usize) {
        let i = pos as usize & (self.ring_len - 1);
        (i / self.chunk_len, i % self.chunk_len)
    }

    /// Position `pos`'s slot, when its chunk is there (every position in
    /// the window has one).
    fn slot(&self, pos: u32) -> Option<&Slot<I>> {
        let (c, i) = self.place(pos);
        self.chunks.get(c)?.as_ref()?.get(i)
    }

    fn slot_mut(&mut self, pos: u32) -> Option<&mut Slot<I>> {
        let (c, i) = self.place(pos);
        self.chunks.get_mut(c)?.as_mut()?.get_mut(i)
    }

    /// The tail's slot, its chunk taken (the spare, or a new one) if the
    /// tail has just reached it.
    fn slot_for_tail(&mut self) -> Option<&mut Slot<I>> {
        let (c, i) = self.place(self.tail);
        let chunk = self.chunks.get_mut(c)?;
        if chunk.is_none() {
            *chunk = Some(match self.spare.take() {
                Some(spare) => spare,
                None => {
                    self.held_chunks += 1;
                    vec![Slot::EMPTY; self.chunk_len].into_boxed_slice()
                }
            });
        }
        chunk.as_mut()?.get_mut(i)
    }

    /// After `head` moved one on: when it crossed into the next chunk,
    /// the one it left goes (kept as the spare if there is none), unless
    /// the window has wrapped round into it.
    fn release_behind_head(&mut self) {
        let (c, i) = self.place(self.head);
        if i != 0 || self.slots() > self.ring_len - self.chunk_len {
            return;
        }
        let behind = c
            .checked_sub(1)
            .unwrap_or(self.chunks.len().saturating_sub(1));
        if let Some(chunk) = self.chunks.get_mut(behind).and_then(Option::take) {
            if self.spare.is_none() {
                self.spare = Some(chunk);
            } else {
                self.held_chunks -= 1;
            }
        }
    }

    fn in_window(&self, pos: u32) -> bool {
        pos.wrapping_sub(self.head) < self.tail.wrapping_sub(self.head)
    }

    /// The index, zeroed: a bucket per four entries at the bound, each
    /// on its own cache line.
    fn make_index(&mut self) {
        let buckets = self
            .max
            .div_ceil(WAYS / 2)
            .next_power_of_two()
            .max(MIN_BUCKETS);
        // Zeroed words come from calloc: untouched pages cost nothing.
        self.index = vec![0u32; (buckets + 1) * BUCKET_WORDS];
        let misalign = self.index.as_ptr() as usize % 64;
        self.base = (64 - misalign) % 64 / std::mem::size_of::<u32>();
        self.bucket_mask = buckets - 1;
    }

    /// Bucket `b`'s words (`b` taken modulo the bucket count). In bounds
    /// once the index is made: `base` < 16 and the index holds one
    /// bucket more than `bucket_mask + 1`, so the last bucket ends within
    /// it.
    fn bucket(&self, b: usize) -> &[u32] {
        let start = self.base + (b & self.bucket_mask) * BUCKET_WORDS;
        &self.index[start..start + BUCKET_WORDS]
    }

    fn bucket_mut(&mut self, b: usize) -> &mut [u32] {
        let start = self.base + (b & self.bucket_mask) * BUCKET_WORDS;
        &mut self.index[start..start + BUCKET_WORDS]
    }

    /// `key`'s home bucket (the hash's low bits) and tag (its top 16, never
    /// 0); only once the index is made.
    fn hash(&self, key: &FlowKey<I>) -> (usize, u16) {
        let h = self.hashing.hash_one(key);
        ((h as usize) & self.bucket_mask, (h >> 48) as u16 | 1)
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
        for _ in 0..MAX_PROBES {
            let b = self.bucket(bucket);
            for way in 0..WAYS {
                if tag_of(b, way) == tag && self.in_window(b[way]) {
                    if let Some(slot) = self.slot(b[way]) {
                        if slot.live && slot.key == *key {
                            return Some(Way { bucket, way });
                        }
                    }
                }
            }
            if b[PASSED_WORD] == 0 {
                return None;
            }
            bucket = (bucket + 1) & self.bucket_mask;
        }
        None
    }

    /// Records an entry at `pos` in the first free way from its home
    /// bucket `home` on, counting it past the full buckets before; how
    /// many those were, or `None` (and no count changed) if there was no
    /// free way within `MAX_PROBES` buckets.
    fn index_from(&mut self, home: usize, tag: u16, pos: u32) -> Option<u8> {
        for k in 0..MAX_PROBES {
            let b = self.bucket(home + k);
            let free = (0..WAYS).find(|&w| tag_of(b, w) == 0 || !self.in_window(b[w]));
            if let Some(way) = free {
                let b = self.bucket_mut(home + k);
                b[way] = pos;
                set_tag(b, way, tag);
                for j in 0..k {
                    let b = self.bucket_mut(home + j);
                    b[PASSED_WORD] = b[PASSED_WORD].saturating_add(1);
                }
                return Some(k as u8);
            }
        }
        None
    }
}

/// Way `way`'s tag in bucket words `b`.
fn tag_of(b: &[u32], way: usize) -> u16 {
    (b[TAG_WORD + way / 2] >> (16 * (way % 2))) as u16
}

fn set_tag(b: &mut [u32], way: usize, tag: u16) {
    let shift = 16 * (way % 2);
    let w = &mut b[TAG_WORD + way / 2];
    *w = (*w & !(0xffff << shift)) | (u32::from(tag) << shift);
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
        t.restart(&tw(3, 0).key, Instant::from_millis(100_000), Duration::ZERO);
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
        assert!((0..=t.bucket_mask).any(|b| t.bucket(b)[PASSED_WORD] > 0));
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
        assert_eq!(t.ring_len, 2048);
        assert_eq!(t.bucket_mask + 1, 256);
        assert!(t.bytes() <= 2048 * 40 + 257 * 64);
        assert_eq!(std::mem::size_of::<Slot<std::net::Ipv4Addr>>(), 40);
        // Entries leaving (taken out, expired) count themselves out of the
        // buckets they passed.
        let passed = |t: &TimeWaitTable| {
            (0..=t.bucket_mask)
                .map(|b| t.bucket(b)[PASSED_WORD])
                .sum::<u32>()
        };
        let mut t = TimeWaitTable::new(1 << 14, FlowHashing::default());
        for i in 0..16_384 {
            t.insert(wide(i));
        }
        assert!(passed(&t) > 0);
        for i in (0..16_384).step_by(3) {
            t.remove(&wide(i).key);
        }
        for i in 16_384..20_000 {
            t.insert(wide(i));
        }
        assert!((0..20_000).all(|i| t.get(&wide(i).key).is_some() == (i % 3 != 0 || i >= 16_384)));
        t.expire(Instant::from_millis(1 << 40));
        assert_eq!((t.len(), passed(&t)), (0, 0));
    }

    #[test]
    fn holes_leave_at_the_front_and_positions_may_wrap() {
        let mut t = TimeWaitTable::new(100, FlowHashing::default());
        // Start just below the wrap of positions: the first entries wrap.
        t.head = u32::MAX - 50;
        t.tail = t.head;
        for i in 0..100 {
            t.insert(wide(i));
        }
        assert!(t.tail < 100, "positions wrapped");
        // A peer restarting its entries over and over: each leaves a hole.
        for round in 0..50u64 {
            for i in 0..100 {
                t.restart(&wide(i).key, Instant::from_millis(round), Duration::ZERO);
            }
        }
        assert_eq!(t.len(), 100);
        assert!(t.slots() <= t.ring_len && t.ring_len <= 256);
        for i in 0..100 {
            assert_eq!(
                t.get(&wide(i).key).map(|e| e.until),
                Some(Instant::from_millis(49))
            );
        }
        // New entries recycle the old ones; the head wraps too.
        for i in 100..200 {
            t.insert(wide(i));
        }
        assert_eq!((t.len(), t.recycled), (100, 100));
        assert!(t.head < 1 << 20);
        assert!((0..100).all(|i| t.get(&wide(i).key).is_none()));
        assert!((100..200).all(|i| t.get(&wide(i).key) == Some(wide(i))));
    }

    /// A peer repeating its FIN restarts its entry's 2 MSL each time: the
    /// deadline changes where the entry is unless that would put it more
    /// than a step past the slot after it, so the flood leaves a hole a
    /// step at most, and the entries behind end at most a step late.
    #[test]
    fn a_repeated_fin_restarts_in_place_within_a_step() {
        let step = Duration::from_millis(900);
        let wait = Duration::from_secs(30);
        let mut t = TimeWaitTable::new(5000, FlowHashing::default());
        let at = |i: u32, ms: u64| {
            let mut e = wide(i);
            e.until = Instant::from_millis(ms) + wait;
            e
        };
        t.insert(at(0, 0));
        for i in 1..=100 {
            t.insert(at(i, u64::from(i)));
        }
        // A FIN every millisecond for 10 s, other entries arriving
        // every 10 ms.
        let mut next = 101;
        for ms in 0..10_000u64 {
            t.restart(&wide(0).key, Instant::from_millis(ms) + wait, step);
            if ms % 10 == 0 {
                t.insert(at(next, ms));
                next += 1;
            }
        }
        assert_eq!(t.len(), next as usize);
        // One move (a hole) per step at most, not one per FIN.
        let holes = t.slots() - t.len();
        assert!(holes <= 12, "{holes} holes");
        assert_eq!(
            t.get(&wide(0).key).map(|e| e.until),
            Some(Instant::from_millis(9_999) + wait)
        );
        // Expiry: every other entry ends by its deadline plus a step.
        for ms in (0..10_000u64).step_by(250) {
            let now = Instant::from_millis(ms) + wait + step;
            t.expire(now);
            for i in 1..next {
                if let Some(e) = t.get(&wide(i).key) {
                    assert!(
                        e.until + step > now,
                        "entry {i} held past its deadline and a step"
                    );
                }
            }
        }
        // Exact restarts (no step) move the entry every time.
        let mut t = TimeWaitTable::new(1000, FlowHashing::default());
        t.insert(at(0, 0));
        t.insert(at(1, 0));
        for ms in 0..100u64 {
            t.restart(
                &wide(0).key,
                Instant::from_millis(ms) + wait,
                Duration::ZERO,
            );
            t.restart(
                &wide(1).key,
                Instant::from_millis(ms) + wait,
                Duration::ZERO,
            );
        }
        assert_eq!((t.len(), t.slots()), (2, 202));
    }

    /// The ring's memory follows the entries: chunks come as the tail
    /// reaches them and go as the head leaves them; the index is made
    /// once, at its final size, on cache-line boundaries.
    #[test]
    fn ring_memory_follows_the_window_and_the_index_never_moves() {
        let mut t = TimeWaitTable::new(100_000, FlowHashing::default());
        t.insert(wide(0));
        let index = (t.index.as_ptr(), t.index.len());
        assert_eq!((t.index.as_ptr() as usize + t.base * 4) % 64, 0);
        assert_eq!(t.bytes(), CHUNK * 40 + t.index.capacity() * 4);
        for i in 1..100_000 {
            t.insert(wide(i));
        }
        assert_eq!((t.index.as_ptr(), t.index.len()), index);
        let chunks = |t: &TimeWaitTable| t.chunks.iter().flatten().count();
        assert_eq!(chunks(&t), 100_000usize.div_ceil(CHUNK));
        // What `bytes` keeps count of, walked.
        let walked = |t: &TimeWaitTable| {
            (chunks(t) + usize::from(t.spare.is_some())) * CHUNK * 40 + t.index.capacity() * 4
        };
        assert_eq!(t.bytes(), walked(&t));
        // All but the last 1,000 expire (each 1 ms after the one before).
        let mut t2 = TimeWaitTable::new(100_000, FlowHashing::default());
        for i in 0..100_000u32 {
            let mut e = wide(i);
            e.until = Instant::from_millis(u64::from(i));
            t2.insert(e);
        }
        t2.expire(Instant::from_millis(98_999));
        assert_eq!(t2.len(), 1000);
        assert!(chunks(&t2) <= 2, "{} chunks for 1,000 entries", chunks(&t2));
        let ring = |t: &TimeWaitTable| t.bytes() - t.index.capacity() * 4;
        assert!(ring(&t2) <= 3 * CHUNK * 40 && ring(&t) > 90 * CHUNK * 40);
        assert_eq!(t2.bytes(), walked(&t2));
        assert!((99_000..100_000).all(|i| t2.get(&wide(i).key).is_some()));
        // The next entries reuse the spare: still the same memory.
        let before = t2.bytes();
        for i in 100_000..100_000 + CHUNK as u32 {
            let mut e = wide(i);
            e.until = Instant::from_millis(u64::from(i));
            t2.insert(e);
        }
        assert!(t2.bytes() <= before + CHUNK * 40);
        // Expiring everything leaves the index and at most a chunk and the spare.
        t2.expire(Instant::from_millis(1 << 40));
        assert_eq!(t2.len(), 0);
        assert!(t2.bytes() <= 2 * CHUNK * 40 + t2.index.capacity() * 4);
        assert_eq!(t2.bytes(), walked(&t2));
    }

    /// An index whose ways around a key's home are all taken keeps it out
    /// (a hole) rather than looking further than a lookup reads.
    #[test]
    fn an_entry_without_a_way_near_home_is_dropped() {
        let mut t = TimeWaitTable::new(1 << 14, FlowHashing::default());
        t.insert(wide(0));
        let (home, _) = t.hash(&wide(1).key);
        let pos = t.head;
        for k in 0..MAX_PROBES {
            let b = t.bucket_mut(home + k);
            for w in 0..WAYS {
                b[w] = pos;
                set_tag(b, w, 0xffff);
            }
        }
        t.insert(wide(1));
        assert_eq!(t.len(), 1);
        assert!(t.get(&wide(1).key).is_none());
        assert_eq!(t.get(&wide(0).key), Some(wide(0)));
    }

    #[test]
    fn agrees_with_a_plain_model() {
        // Random inserts, removals, restarts and expiries against a plain
        // ring: entries in arrival order, `None` for a hole.
        let mut t = TimeWaitTable::new(50, FlowHashing::default());
        let ring_len = 128; // 1.5 × 50, a power of two
        let mut model: std::collections::VecDeque<Option<TimeWait>> = Default::default();
        let live = |m: &std::collections::VecDeque<Option<TimeWait>>| m.iter().flatten().count();
        let take = |m: &mut std::collections::VecDeque<Option<TimeWait>>, k: &FlowKey| {
            m.iter_mut()
                .find(|e| e.is_some_and(|e| e.key == *k))
                .and_then(Option::take)
        };
        // Whether the ring was full of slots (its oldest dropped).
        let push = |m: &mut std::collections::VecDeque<Option<TimeWait>>, e: TimeWait| {
            let full = m.len() == ring_len;
            if full {
                m.pop_front();
            }
            take(m, &e.key);
            m.push_back(Some(e));
            while live(m) > 50 {
                while m.pop_front().is_some_and(|e| e.is_none()) {}
            }
            full
        };
        let mut full = 0;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut now = 0u64;
        for round in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let port = (x % 97) as u16;
            // The second half restarts instead of expiring or inserting
            // anew: holes pile up until the ring is full of slots.
            let op = match (x >> 8) % 5 {
                1 | 4 if round >= 25_000 => 3,
                op => op,
            };
            match op {
                0 | 1 => {
                    let e = tw(port, now);
                    t.insert(e);
                    full += usize::from(push(&mut model, e));
                }
                2 => {
                    let k = tw(port, 0).key;
                    assert_eq!(t.remove(&k), take(&mut model, &k));
                }
                3 => {
                    let k = tw(port, 0).key;
                    let until = Instant::from_millis(now) + Duration::from_secs(30);
                    t.restart(&k, until, Duration::ZERO);
                    if let Some(mut m) = take(&mut model, &k) {
                        m.until = until;
                        full += usize::from(push(&mut model, m));
                    }
                }
                _ => {
                    now += (x >> 20) % 3000;
                    let at = Instant::from_millis(now);
                    t.expire(at);
                    while model
                        .front()
                        .is_some_and(|e| e.is_none_or(|e| e.until <= at))
                    {
                        model.pop_front();
                    }
                }
            }
            assert_eq!((t.len(), t.slots()), (live(&model), model.len()));
            assert!(t.slots() <= ring_len);
        }
        for m in model.iter().flatten() {
            assert_eq!(t.get(&m.key), Some(*m));
        }
        assert!(full > 100, "the ring was full of slots {full} times");
    }
}
