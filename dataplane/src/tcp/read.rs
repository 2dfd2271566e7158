//! The application's read side: received bytes of live connections and,
//! until the application has had their `Closed` event, of connections
//! that ended with bytes unread. A reset that arrives in the same burst
//! as data (data then RST, request then FIN then RST) therefore loses
//! nothing the burst boundary would otherwise have let through: the
//! application reads those bytes while it handles that burst's events
//! (docs/architecture.md, "TCP").

use super::buffer::RingBuf;
use super::*;

/// Receive rings of released connections: `pending` since the last
/// `drain_events`, `batch` those whose `Closed` event it returned. A
/// ring is given back to the pool one drain after its batch.
#[derive(Debug, Default)]
pub(super) struct Remains {
    pending: Vec<Remain>,
    batch: Vec<Remain>,
}

/// A released connection's unread bytes, with its flow key (the
/// application may learn of the connection only in this batch).
#[derive(Debug)]
struct Remain {
    id: ConnId,
    key: AnyFlowKey,
    ring: RingBuf,
}

impl Remains {
    /// Keeps `ring`, the unread bytes of `id`, which was just released.
    pub(super) fn keep(&mut self, id: ConnId, key: AnyFlowKey, ring: RingBuf) {
        self.pending.push(Remain { id, key, ring });
    }

    /// At `drain_events`: the last batch's rings go back to `pool`, and
    /// those pending become the batch the application now reads.
    pub(super) fn next_batch(&mut self, pool: &mut BufferPool) {
        self.release_batch(pool);
        std::mem::swap(&mut self.batch, &mut self.pending);
    }

    /// The application has handled the batch: its rings go back now.
    pub(super) fn release_batch(&mut self, pool: &mut BufferPool) {
        for r in self.batch.drain(..) {
            pool.give(r.ring);
        }
    }

    /// Takes `id`'s ring out (see [`TcpEngine::take_unread`]).
    fn take(&mut self, id: ConnId) -> Option<RingBuf> {
        for list in [&mut self.batch, &mut self.pending] {
            if let Some(i) = list.iter().position(|r| r.id == id) {
                return Some(list.swap_remove(i).ring);
            }
        }
        None
    }

    fn find(&self, id: ConnId) -> Option<&Remain> {
        self.batch.iter().chain(&self.pending).find(|r| r.id == id)
    }

    fn ring(&self, id: ConnId) -> Option<&RingBuf> {
        self.find(id).map(|r| &r.ring)
    }

    fn ring_mut(&mut self, id: ConnId) -> Option<&mut RingBuf> {
        self.batch
            .iter_mut()
            .chain(&mut self.pending)
            .find(|r| r.id == id)
            .map(|r| &mut r.ring)
    }
}

/// The unread bytes of a connection that ended, taken to be moved on
/// later ([`TcpEngine::take_unread`]): a proxy whose client reset while
/// its backend's send ring was full. The ring stays counted in the
/// buffer pool until [`TcpEngine::give_unread`] takes it back; dropping
/// an `Unread` instead leaves its bytes counted as in use.
#[derive(Debug)]
pub struct Unread(RingBuf);

impl Unread {
    /// Bytes not moved on yet.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The bytes, in order (up to two slices).
    pub fn as_slices(&self) -> (&[u8], &[u8]) {
        self.0.as_slices()
    }

    /// Drops the first `n` bytes (they were moved on).
    pub fn consume(&mut self, n: usize) {
        self.0.consume(n.min(self.0.len()));
    }
}

/// Where spliced bytes come from: a live connection's receive buffer or
/// the unread ring of one that ended.
trait Source {
    /// The next contiguous received bytes.
    fn chunk(&self) -> &[u8];
    fn consume(&mut self, n: usize, pool: &mut BufferPool);
}

impl<A: Default> Source for Conn<A> {
    fn chunk(&self) -> &[u8] {
        let (a, b) = self.peek();
        if a.is_empty() {
            b
        } else {
            a
        }
    }
    fn consume(&mut self, n: usize, pool: &mut BufferPool) {
        Conn::consume(self, n, pool);
    }
}

impl Source for RingBuf {
    fn chunk(&self) -> &[u8] {
        let (a, b) = self.as_slices();
        if a.is_empty() {
            b
        } else {
            a
        }
    }
    fn consume(&mut self, n: usize, _: &mut BufferPool) {
        RingBuf::consume(self, n);
    }
}

/// Moves up to `max` bytes from `src` into `dst`'s send buffer (rings
/// from `pool`); returns how many.
fn splice_into<A: Default>(
    src: &mut impl Source,
    dst: &mut Conn<A>,
    max: usize,
    pool: &mut BufferPool,
) -> usize {
    let mut moved = 0;
    loop {
        let chunk = src.chunk();
        let want = chunk.len().min(max - moved);
        if want == 0 {
            return moved;
        }
        let n = dst.send(&chunk[..want], pool);
        if n == 0 {
            return moved;
        }
        src.consume(n, pool);
        moved += n;
    }
}

impl<A: Default> TcpEngine<A> {
    /// Copies received bytes into `buf`; returns how many.
    pub fn recv(&mut self, id: ConnId, buf: &mut [u8]) -> usize {
        let Some(c) = live_mut(&mut self.conns, id) else {
            return self.remains.ring_mut(id).map_or(0, |r| r.pop_into(buf));
        };
        let n = c.recv(buf, &mut self.buffers);
        // Opening the window may need an update to the peer; a connection
        // in TIME-WAIT read to the end can leave its slot.
        if n > 0 && (c.window_update_due(&self.cfg) || c.acks_now() || c.state == State::TimeWait) {
            mark_dirty(&mut self.dirty, c, id);
        }
        n
    }

    /// Received bytes, without consuming them (up to two slices).
    pub fn peek(&self, id: ConnId) -> (&[u8], &[u8]) {
        match live(&self.conns, id) {
            Some(c) => c.peek(),
            None => self.remains.ring(id).map_or((&[], &[]), RingBuf::as_slices),
        }
    }

    /// Consumes `n` received bytes (after [`TcpEngine::peek`]).
    pub fn consume(&mut self, id: ConnId, n: usize) {
        let Some(c) = live_mut(&mut self.conns, id) else {
            if let Some(r) = self.remains.ring_mut(id) {
                r.consume(n);
            }
            return;
        };
        c.consume(n, &mut self.buffers);
        if c.window_update_due(&self.cfg) || c.acks_now() || c.state == State::TimeWait {
            mark_dirty(&mut self.dirty, c, id);
        }
    }

    /// Holds the ACK owed for the short data just received until the
    /// application takes it, and at most `[tcp] delayed_ack`
    /// ([`Conn::hold_ack`]): for an application that answers it soon but
    /// not in this iteration (a TLS handshake put off by the handshake
    /// budget), so the answer carries the ACK instead of a segment of its
    /// own.
    pub fn hold_ack(&mut self, id: ConnId, now: Instant) {
        let Some(c) = live_mut(&mut self.conns, id) else {
            return;
        };
        if c.hold_ack(now, &self.cfg) {
            self.rearm(id, now);
        }
    }

    /// Moves up to `max` received bytes of `from` into the send buffer of
    /// `to` (ring to ring, no other copy) and consumes them; returns how
    /// many. A proxy's data path. `from` may have ended with bytes unread
    /// (see the module doc); `to` must be live.
    pub fn splice(&mut self, from: ConnId, to: ConnId, max: usize) -> usize {
        if live(&self.conns, to).is_none() {
            return 0;
        }
        if live(&self.conns, from).is_none() {
            return self.splice_remains(from, to, max);
        }
        let (f, t) = (from.slot(), to.slot());
        if f == t {
            return 0;
        }
        let (src, dst) = if f < t {
            let (lo, hi) = self.conns.split_at_mut(t);
            (&mut lo[f], &mut hi[0])
        } else {
            let (lo, hi) = self.conns.split_at_mut(f);
            (&mut hi[0], &mut lo[t])
        };
        let (Some(src), Some(dst)) = (src.as_mut(), dst.as_mut()) else {
            return 0;
        };
        let moved = splice_into(src, dst, max, &mut self.buffers);
        if moved > 0 {
            mark_dirty(&mut self.dirty, dst, to);
            if src.window_update_due(&self.cfg) || src.state == State::TimeWait {
                mark_dirty(&mut self.dirty, src, from);
            }
        }
        moved
    }

    /// The flow key of `id`, released in this batch with bytes unread (the
    /// module doc): an application that learns of a connection only in
    /// the batch that ends it (the handshake's ACK, data and an RST in one
    /// burst) can still pass those bytes on. None for a live connection.
    pub fn released_key(&self, id: ConnId) -> Option<AnyFlowKey> {
        if live(&self.conns, id).is_some() {
            return None;
        }
        self.remains.find(id).map(|r| r.key)
    }

    /// Takes the bytes `id` left unread when it ended (the module doc), if
    /// it has any and its `Closed` event is being handled: they no longer
    /// go back to the pool with the next batch.
    pub fn take_unread(&mut self, id: ConnId) -> Option<Unread> {
        if live(&self.conns, id).is_some() {
            return None;
        }
        let ring = self.remains.take(id)?;
        if ring.is_empty() {
            self.buffers.give(ring);
            return None;
        }
        Some(Unread(ring))
    }

    /// Moves as much of `from` into `to`'s send buffer as it takes now;
    /// returns how many bytes. `to` must be live.
    pub fn send_unread(&mut self, from: &mut Unread, to: ConnId) -> usize {
        let Some(dst) = live_mut(&mut self.conns, to) else {
            return 0;
        };
        let moved = splice_into(&mut from.0, dst, usize::MAX, &mut self.buffers);
        if moved > 0 {
            mark_dirty(&mut self.dirty, dst, to);
        }
        moved
    }

    /// Gives an [`Unread`]'s ring back to the pool.
    pub fn give_unread(&mut self, unread: Unread) {
        self.buffers.give(unread.0);
    }

    /// [`TcpEngine::splice`] from the unread bytes of a connection that
    /// ended.
    fn splice_remains(&mut self, from: ConnId, to: ConnId, max: usize) -> usize {
        let (Some(src), Some(dst)) = (self.remains.ring_mut(from), live_mut(&mut self.conns, to))
        else {
            return 0;
        };
        let moved = splice_into(src, dst, max, &mut self.buffers);
        if moved > 0 {
            mark_dirty(&mut self.dirty, dst, to);
        }
        moved
    }
}
