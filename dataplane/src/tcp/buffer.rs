//! Per-connection byte rings and the per-core pool they come from. A
//! connection takes a ring when bytes arrive or are queued and gives it back
//! when it drains, so idle connections hold no buffers.

/// A fixed-capacity ring of bytes.
#[derive(Debug)]
pub struct RingBuf {
    bytes: Box<[u8]>,
    head: usize,
    len: usize,
}

impl RingBuf {
    fn new(size: usize) -> Self {
        Self {
            bytes: vec![0; size].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.bytes.len()
    }

    pub fn free(&self) -> usize {
        self.bytes.len() - self.len
    }

    /// Appends as much of `data` as fits; returns how much.
    pub fn push(&mut self, data: &[u8]) -> usize {
        let mut done = 0;
        while done < data.len() {
            let n = self.push_with(data.len() - done, |room| {
                let n = room.len();
                room.copy_from_slice(&data[done..done + n]);
                n
            });
            if n == 0 {
                break;
            }
            done += n;
        }
        done
    }

    /// Lets `fill` write into the contiguous free space (at most `max`
    /// bytes); `fill` returns how many it wrote.
    pub fn push_with(&mut self, max: usize, fill: impl FnOnce(&mut [u8]) -> usize) -> usize {
        let cap = self.bytes.len();
        let tail = (self.head + self.len) % cap;
        let contiguous = if tail >= self.head && self.len < cap {
            cap - tail
        } else {
            self.head - tail
        };
        let room = contiguous.min(max).min(self.free());
        if room == 0 {
            return 0;
        }
        let n = fill(&mut self.bytes[tail..tail + room]).min(room);
        self.len += n;
        n
    }

    /// The bytes, oldest first, as up to two slices.
    pub fn as_slices(&self) -> (&[u8], &[u8]) {
        let cap = self.bytes.len();
        let end = self.head + self.len;
        if end <= cap {
            (&self.bytes[self.head..end], &[])
        } else {
            (&self.bytes[self.head..], &self.bytes[..end - cap])
        }
    }

    /// Up to `max` contiguous bytes starting `offset` bytes in.
    pub fn slice_at(&self, offset: usize, max: usize) -> &[u8] {
        if offset >= self.len {
            return &[];
        }
        let cap = self.bytes.len();
        let start = (self.head + offset) % cap;
        let avail = self.len - offset;
        let contiguous = (cap - start).min(avail);
        &self.bytes[start..start + contiguous.min(max)]
    }

    /// Drops the oldest `n` bytes.
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        self.head = (self.head + n) % self.bytes.len();
        self.len -= n;
    }

    /// Writes `data` into the free space, `offset` bytes past the end of
    /// the stored bytes, without storing it (out-of-order data waiting for
    /// the gap before it). Returns false if it does not fit.
    pub fn write_ahead(&mut self, offset: usize, data: &[u8]) -> bool {
        if offset + data.len() > self.free() {
            return false;
        }
        let cap = self.bytes.len();
        let start = (self.head + self.len + offset) % cap;
        let first = (cap - start).min(data.len());
        self.bytes[start..start + first].copy_from_slice(&data[..first]);
        self.bytes[..data.len() - first].copy_from_slice(&data[first..]);
        true
    }

    /// Stores `n` bytes already written by [`RingBuf::write_ahead`] right
    /// after the stored ones.
    pub fn commit(&mut self, n: usize) {
        assert!(n <= self.free(), "commit past the free space");
        self.len += n;
    }

    /// Moves the bytes (and any written ahead of them) into the empty,
    /// larger `dst`, which then reads the same.
    fn move_into(&self, dst: &mut RingBuf) {
        debug_assert!(dst.is_empty() && dst.capacity() >= self.capacity());
        let cap = self.bytes.len();
        let first = cap - self.head;
        dst.bytes[..first].copy_from_slice(&self.bytes[self.head..]);
        dst.bytes[first..cap].copy_from_slice(&self.bytes[..self.head]);
        dst.head = 0;
        dst.len = self.len;
    }

    /// Copies out and consumes up to `buf.len()` bytes.
    pub fn pop_into(&mut self, buf: &mut [u8]) -> usize {
        let (a, b) = self.as_slices();
        let n1 = a.len().min(buf.len());
        buf[..n1].copy_from_slice(&a[..n1]);
        let n2 = b.len().min(buf.len() - n1);
        buf[n1..n1 + n2].copy_from_slice(&b[..n2]);
        self.consume(n1 + n2);
        n1 + n2
    }
}

/// The smallest ring: what a connection takes first. A peer that sends
/// one byte (or a response of a few hundred) holds this much, not the
/// full size.
pub const SMALLEST_RING: usize = 4096;
/// Ring sizes grow by this factor, up to the full size.
const GROWTH: usize = 8;
/// Most ring sizes of a pool (4 KiB × 8⁴ = 16 MiB covers any full size).
const MAX_CLASSES: usize = 5;

/// Rings of a few sizes (4 KiB, ×8 up to the full size), recycled, under
/// one cap on the bytes they hold. A connection takes the smallest ring
/// its bytes fit in and moves to a larger one as they outgrow it (the
/// bytes are copied once per step); at the cap a ring or a larger one is
/// refused (counted) and the caller keeps what it has. Received bytes
/// (and new connections) may use seven eighths of the cap: the last
/// eighth is for sending, so what was received can still be answered and
/// its rings freed. Bytes the application holds for connections outside
/// the rings (TLS sessions' buffers) are charged to the same cap
/// ([`BufferPool::charge`]): past it, no ring is given for received bytes
/// or a new connection, so what clients make the application hold is
/// bounded by the cap too.
#[derive(Debug)]
pub struct BufferPool {
    /// Ring sizes, smallest first; `sizes[classes - 1]` is the full size.
    sizes: [usize; MAX_CLASSES],
    classes: usize,
    idle: [Vec<RingBuf>; MAX_CLASSES],
    in_use: usize,
    in_use_bytes: usize,
    idle_bytes: usize,
    /// Bytes the application holds outside the rings, charged here.
    outside: usize,
    /// Most bytes held, in use and idle together.
    cap: usize,
    /// Rings (or larger rings) refused at the cap.
    denied: u64,
    /// A connection with no send ring was offered no room, or refused
    /// one, at the cap: nothing it has in flight will bring an ACK to
    /// wake it, so it is woken once memory comes back
    /// ([`BufferPool::relieved`]).
    starved: std::cell::Cell<bool>,
    /// Spare SACK scoreboards (`conn/sack.rs`), for connections whose
    /// peers leave more holes than fit in the slot.
    pub(in crate::tcp) boards: super::conn::BoardSpares,
}

impl BufferPool {
    /// Rings up to `full` bytes, at most `cap` bytes in all (at least one
    /// full ring's worth).
    pub fn new(full: usize, cap: usize) -> Self {
        let full = full.max(1);
        let mut sizes = [full; MAX_CLASSES];
        let mut classes = 0;
        let mut size = SMALLEST_RING;
        while size < full && classes < MAX_CLASSES - 1 {
            sizes[classes] = size;
            classes += 1;
            size *= GROWTH;
        }
        sizes[classes] = full;
        Self {
            sizes,
            classes: classes + 1,
            idle: Default::default(),
            in_use: 0,
            in_use_bytes: 0,
            idle_bytes: 0,
            outside: 0,
            cap: cap.max(full),
            denied: 0,
            starved: std::cell::Cell::new(false),
            boards: Default::default(),
        }
    }

    /// The largest ring: what a connection may buffer per direction.
    pub fn full_size(&self) -> usize {
        self.sizes[self.classes - 1]
    }

    /// Rings held by connections now.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// Bytes in the rings held by connections now.
    pub fn bytes_in_use(&self) -> usize {
        self.in_use_bytes
    }

    /// Bytes held, in use and idle: the pool's memory.
    pub fn bytes_held(&self) -> usize {
        self.in_use_bytes + self.idle_bytes
    }

    /// Bytes the application holds outside the rings, charged to the cap.
    pub fn bytes_outside(&self) -> usize {
        self.outside
    }

    /// Charges `bytes` the application now holds for a connection outside
    /// the rings (already allocated: never refused; they count against
    /// the cap from now on).
    pub fn charge(&mut self, bytes: usize) {
        self.outside += bytes;
    }

    /// Gives back `bytes` charged by [`BufferPool::charge`].
    pub fn refund(&mut self, bytes: usize) {
        debug_assert!(bytes <= self.outside, "{bytes} > {}", self.outside);
        self.outside = self.outside.saturating_sub(bytes);
    }

    /// Bytes counted against the cap: rings in use and what is charged.
    fn counted(&self) -> usize {
        self.in_use_bytes + self.outside
    }

    /// Rings idle in the pool.
    pub fn idle(&self) -> usize {
        self.idle[..self.classes].iter().map(Vec::len).sum()
    }

    /// Rings (or larger rings) refused at the cap so far.
    pub fn denied(&self) -> u64 {
        self.denied
    }

    /// Whether a new connection's first ring could be had now.
    pub fn can_take(&self) -> bool {
        self.counted() + SMALLEST_RING.min(self.full_size()) <= self.receive_cap()
    }

    /// What received bytes may use of the cap.
    fn receive_cap(&self) -> usize {
        self.cap - self.cap / 8
    }

    /// The class of the smallest ring holding `bytes` (the full size when
    /// none does).
    fn class_for(&self, bytes: usize) -> usize {
        self.sizes[..self.classes]
            .iter()
            .position(|&s| s >= bytes)
            .unwrap_or(self.classes - 1)
    }

    fn class_of(&self, ring: &RingBuf) -> usize {
        self.class_for(ring.capacity())
    }

    /// A ring of class `class`, if `limit` allows one besides those in
    /// use less `returning` bytes (a ring about to come back).
    fn take_class(&mut self, class: usize, returning: usize, limit: usize) -> Option<RingBuf> {
        let size = self.sizes[class];
        if self.counted() - returning + size > limit {
            self.denied += 1;
            return None;
        }
        let ring = match self.idle[class].pop() {
            Some(r) => {
                self.idle_bytes -= size;
                r
            }
            None => {
                // Idle rings of other sizes make room first.
                let mut c = 0;
                while self.bytes_held() + self.outside + size > self.cap && c < self.classes {
                    match self.idle[c].pop() {
                        Some(r) => self.idle_bytes -= r.capacity(),
                        None => c += 1,
                    }
                }
                RingBuf::new(size)
            }
        };
        self.in_use += 1;
        self.in_use_bytes += size;
        Some(ring)
    }

    /// The smallest ring, if the cap allows.
    pub fn take(&mut self) -> Option<RingBuf> {
        self.take_class(0, 0, self.cap)
    }

    /// Makes `slot` a send ring with room for `need` more bytes: a new one
    /// of the smallest size that holds them, or the ring there moved into
    /// a larger one (bytes, and any written ahead of them, kept in place).
    /// At the cap, or past the full size, it is the ring there (with less
    /// room than asked); `None` only when there is none and none can be
    /// had.
    pub fn reserve<'a>(
        &mut self,
        slot: &'a mut Option<RingBuf>,
        need: usize,
    ) -> Option<&'a mut RingBuf> {
        self.reserve_within(slot, need, self.cap)
    }

    /// [`BufferPool::reserve`] for received bytes: within seven eighths
    /// of the cap.
    pub fn reserve_receive<'a>(
        &mut self,
        slot: &'a mut Option<RingBuf>,
        need: usize,
    ) -> Option<&'a mut RingBuf> {
        self.reserve_within(slot, need, self.receive_cap())
    }

    fn reserve_within<'a>(
        &mut self,
        slot: &'a mut Option<RingBuf>,
        need: usize,
        limit: usize,
    ) -> Option<&'a mut RingBuf> {
        match slot {
            None => {
                let class = self.class_for(need);
                *slot = self.take_class(class, 0, limit);
                if slot.is_none() && limit == self.cap {
                    self.starved.set(true);
                }
            }
            Some(ring) if ring.free() < need && ring.capacity() < self.full_size() => {
                let want = self.class_for(ring.capacity() - ring.free() + need);
                let old = ring.capacity();
                if let Some(mut bigger) =
                    self.take_class(want.max(self.class_of(ring) + 1), old, limit)
                {
                    ring.move_into(&mut bigger);
                    let old = std::mem::replace(ring, bigger);
                    self.give(old);
                }
            }
            Some(_) => {}
        }
        slot.as_mut()
    }

    /// Whether senders were starved at the cap ([`BufferPool::room`] or a
    /// send's first ring refused) and memory has come back since: below
    /// what received bytes may use (seven eighths of the cap), so each
    /// woken sender can have a ring. Answers true once per such episode.
    pub fn relieved(&self) -> bool {
        if self.starved.get() && self.counted() <= self.receive_cap() {
            self.starved.set(false);
            return true;
        }
        false
    }

    /// Room a ring could be given now for `ring`'s connection: the full
    /// size less what it holds, when the cap allows the full size, else
    /// the room it has.
    pub fn room(&self, ring: Option<&RingBuf>) -> usize {
        let (cap, len) = ring.map_or((0, 0), |r| (r.capacity(), r.len()));
        let full = self.full_size();
        if cap == full || self.counted() - cap + full <= self.cap {
            full - len
        } else if cap == 0 {
            // Not even the full size: the smallest, if it can be had.
            if self.counted() + SMALLEST_RING.min(full) <= self.cap {
                SMALLEST_RING.min(full)
            } else {
                self.starved.set(true);
                0
            }
        } else {
            cap - len
        }
    }

    pub fn give(&mut self, mut ring: RingBuf) {
        let size = ring.capacity();
        self.in_use -= 1;
        self.in_use_bytes -= size;
        ring.consume(ring.len());
        ring.head = 0;
        // Idle rings: at most a quarter of the cap, and within it.
        let class = self.class_of(&ring);
        if ring.capacity() == self.sizes[class]
            && self.idle_bytes + size <= self.cap / 4
            && self.bytes_held() + self.outside + size <= self.cap
        {
            self.idle_bytes += size;
            self.idle[class].push(ring);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_wraps_and_keeps_order() {
        let mut r = RingBuf::new(8);
        assert_eq!(r.push(b"abcdef"), 6);
        r.consume(4);
        assert_eq!(r.push(b"ghijklmn"), 6, "only 6 fit");
        assert_eq!(r.as_slices(), (&b"efgh"[..], &b"ijkl"[..]));
        assert_eq!(r.slice_at(1, 10), b"fgh");
        assert_eq!(r.slice_at(4, 2), b"ij");
        let mut out = [0u8; 8];
        assert_eq!(r.pop_into(&mut out), 8);
        assert_eq!(&out, b"efghijkl");
        assert!(r.is_empty());
    }

    #[test]
    fn write_ahead_then_fill_the_gap() {
        let mut r = RingBuf::new(8);
        r.push(b"abcdef");
        r.consume(5); // head near the end: writes wrap
        assert!(r.write_ahead(2, b"xyz"));
        assert!(!r.write_ahead(6, b"toolong"), "beyond the free space");
        assert_eq!(r.push(b"-+"), 2);
        r.commit(3);
        let mut out = [0u8; 6];
        assert_eq!(r.pop_into(&mut out), 6);
        assert_eq!(&out, b"f-+xyz");
    }

    #[test]
    fn pool_recycles() {
        let mut p = BufferPool::new(16, 1 << 20);
        let mut slot = None;
        p.reserve(&mut slot, 3).map(|r| r.push(b"xyz"));
        p.give(slot.take().unwrap());
        assert_eq!((p.in_use(), p.idle()), (0, 1));
        let b = p.take().unwrap();
        assert!(b.is_empty(), "recycled rings come back empty");
        assert_eq!(b.capacity(), 16, "a full size under 4 KiB is the only size");
    }

    #[test]
    fn rings_start_small_and_grow_keeping_their_bytes() {
        let full = 256 * 1024;
        let mut p = BufferPool::new(full, 64 << 20);
        let mut slot = None;
        let r = p.reserve(&mut slot, 1).unwrap();
        assert_eq!(
            r.capacity(),
            SMALLEST_RING,
            "one byte takes the smallest ring"
        );
        let pattern: Vec<u8> = (0..SMALLEST_RING).map(|i| i as u8).collect();
        assert_eq!(r.push(&pattern), SMALLEST_RING);
        r.consume(100); // the head is not at 0
        assert_eq!(r.push(&pattern[..100]), 100); // and the bytes wrap
        assert!(!r.write_ahead(10, b"ahead"), "no room ahead yet");
        let r = p.reserve(&mut slot, 40).unwrap();
        assert_eq!(r.capacity(), 32 * 1024, "the next size");
        assert!(r.write_ahead(10, b"ahead"));
        r.commit(15);
        let mut out = vec![0; r.len()];
        r.pop_into(&mut out);
        let mut want = pattern[100..].to_vec();
        want.extend_from_slice(&pattern[..100]);
        want.extend_from_slice(&[0; 10]);
        want.extend_from_slice(b"ahead");
        assert_eq!(&out[..want.len() - 15], &want[..want.len() - 15]);
        assert_eq!(
            &out[out.len() - 5..],
            b"ahead",
            "bytes written ahead moved too"
        );
        assert_eq!(p.in_use(), 1, "the small ring went back");
        assert_eq!(p.bytes_in_use(), 32 * 1024);
        // A large need goes straight to the full size.
        let mut big = None;
        assert_eq!(p.reserve(&mut big, 100_000).unwrap().capacity(), full);
    }

    #[test]
    fn the_cap_refuses_rings_and_growth_and_counts() {
        let mut p = BufferPool::new(32 * 1024, 40 * 1024);
        let mut a = None;
        assert_eq!(p.reserve(&mut a, 20_000).unwrap().capacity(), 32 * 1024);
        assert_eq!(p.room(a.as_ref()), 32 * 1024);
        let mut b = None;
        let r = p.reserve(&mut b, 1).unwrap();
        assert_eq!(r.capacity(), 4096);
        r.push(&[1; 4096]);
        assert_eq!(p.room(b.as_ref()), 0, "no room to grow into");
        let r = p.reserve(&mut b, 1).unwrap();
        assert_eq!(r.capacity(), 4096, "growth refused: the ring stays");
        assert_eq!(p.denied(), 1);
        let mut c = None;
        assert!(p.reserve(&mut c, 1).is_some(), "36 KiB of 40 in use");
        let mut d = None;
        assert!(p.reserve(&mut d, 1).is_none(), "40 KiB in use");
        assert!(!p.can_take());
        assert_eq!(p.denied(), 2);
        p.give(a.take().unwrap());
        assert!(p.can_take());
        assert!(p.bytes_held() <= 40 * 1024, "{}", p.bytes_held());
        // The room given back lets b grow.
        assert_eq!(p.reserve(&mut b, 8000).unwrap().capacity(), 32 * 1024);
        assert!(p.bytes_held() <= 40 * 1024, "{}", p.bytes_held());
    }

    #[test]
    fn received_bytes_leave_the_last_eighth_for_sending() {
        let mut p = BufferPool::new(4096, 64 * 1024);
        let mut rx: Vec<Option<RingBuf>> = (0..16).map(|_| None).collect();
        let mut took = 0;
        for slot in &mut rx {
            took += usize::from(p.reserve_receive(slot, 1).is_some());
        }
        assert_eq!(took, 14, "56 of 64 KiB");
        assert!(!p.can_take(), "no new connection either");
        let mut tx: Vec<Option<RingBuf>> = (0..4).map(|_| None).collect();
        let mut sent = 0;
        for slot in &mut tx {
            sent += usize::from(p.reserve(slot, 1).is_some());
        }
        assert_eq!(sent, 2, "the last 8 KiB are for sends");
        assert_eq!(p.denied(), 2 + 2);
    }
}
