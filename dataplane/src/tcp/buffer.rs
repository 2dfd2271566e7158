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

/// Rings of one size, recycled.
#[derive(Debug)]
pub struct BufferPool {
    size: usize,
    free: Vec<RingBuf>,
    in_use: usize,
    /// Most idle rings kept; more are freed.
    keep: usize,
}

impl BufferPool {
    pub fn new(size: usize) -> Self {
        Self {
            size,
            free: Vec::new(),
            in_use: 0,
            keep: 1024,
        }
    }

    /// Rings held by connections now.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// Rings idle in the pool.
    pub fn idle(&self) -> usize {
        self.free.len()
    }

    pub fn take(&mut self) -> RingBuf {
        self.in_use += 1;
        self.free.pop().unwrap_or_else(|| RingBuf::new(self.size))
    }

    pub fn give(&mut self, mut ring: RingBuf) {
        self.in_use -= 1;
        ring.consume(ring.len());
        ring.head = 0;
        if self.free.len() < self.keep {
            self.free.push(ring);
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
        let mut p = BufferPool::new(16);
        let mut a = p.take();
        a.push(b"xyz");
        p.give(a);
        assert_eq!((p.in_use(), p.idle()), (0, 1));
        let b = p.take();
        assert!(b.is_empty(), "recycled rings come back empty");
        assert_eq!(b.capacity(), 16);
    }
}
