//! An in-memory link: two ports joined back to back in one process, for
//! tests and simulation. Each direction is a bounded lock-free queue, so the
//! two ends may be driven from one thread or from two. Buffers come from a
//! pool shared by both ends and go back to it when dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use smoltcp::wire::EthernetAddress;

use super::{PacketBuf, Port};
use crate::time::Instant;

/// Frame room of each buffer (a 1500-byte MTU frame plus slack).
pub const MEM_BUF_SIZE: usize = 2048;

#[derive(Debug)]
struct Pool {
    free: ArrayQueue<Box<[u8]>>,
    limit: usize,
    made: AtomicU64,
}

/// A buffer of the in-memory link; returns to its pool on drop.
#[derive(Debug)]
pub struct MemBuf {
    bytes: Box<[u8]>,
    len: usize,
    pool: Arc<Pool>,
}

impl PacketBuf for MemBuf {
    fn data(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.len]
    }
    fn capacity(&self) -> usize {
        self.bytes.len()
    }
    fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.bytes.len(),
            "length {len} > capacity {}",
            self.bytes.len()
        );
        self.len = len;
    }
}

impl Drop for MemBuf {
    fn drop(&mut self) {
        let bytes = std::mem::take(&mut self.bytes);
        // A full free list means the pool is over its size: let it go.
        let _ = self.pool.free.push(bytes);
    }
}

/// One end of an in-memory link.
#[derive(Debug)]
pub struct MemPort {
    mac: EthernetAddress,
    rx: Arc<ArrayQueue<MemBuf>>,
    tx: Arc<ArrayQueue<MemBuf>>,
    pool: Arc<Pool>,
}

/// Makes a link of two ports with the given MACs; each direction holds at
/// most `depth` frames in flight, and at most `buffers` buffers exist.
pub fn link(
    mac_a: EthernetAddress,
    mac_b: EthernetAddress,
    depth: usize,
    buffers: usize,
) -> (MemPort, MemPort) {
    let ab = Arc::new(ArrayQueue::new(depth));
    let ba = Arc::new(ArrayQueue::new(depth));
    let pool = Arc::new(Pool {
        free: ArrayQueue::new(buffers),
        limit: buffers,
        made: AtomicU64::new(0),
    });
    (
        MemPort {
            mac: mac_a,
            rx: ba.clone(),
            tx: ab.clone(),
            pool: pool.clone(),
        },
        MemPort {
            mac: mac_b,
            rx: ab,
            tx: ba,
            pool,
        },
    )
}

impl MemPort {
    /// Buffers of the link's pool not currently in use (free list plus
    /// never-made ones).
    pub fn buffers_free(&self) -> usize {
        self.pool.free.len() + self.pool.limit - self.pool.made.load(Ordering::Relaxed) as usize
    }

    /// Frames waiting to be received on this end.
    pub fn rx_pending(&self) -> usize {
        self.rx.len()
    }
}

impl Port for MemPort {
    type Buf = MemBuf;

    fn mac(&self) -> EthernetAddress {
        self.mac
    }

    fn rx_burst(&mut self, _now: Instant, out: &mut Vec<MemBuf>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            match self.rx.pop() {
                Some(b) => {
                    out.push(b);
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    fn tx_burst(&mut self, _now: Instant, batch: &mut Vec<MemBuf>) -> usize {
        let room = self.tx.capacity() - self.tx.len();
        let n = room.min(batch.len());
        for b in batch.drain(..n) {
            // Only this end pushes, so the room measured above stays.
            let pushed = self.tx.push(b);
            debug_assert!(pushed.is_ok(), "link queue shrank under its only producer");
        }
        n
    }

    fn alloc(&mut self) -> Option<MemBuf> {
        let bytes = match self.pool.free.pop() {
            Some(b) => b,
            None => {
                let made = self.pool.made.fetch_add(1, Ordering::Relaxed);
                if made as usize >= self.pool.limit {
                    self.pool.made.fetch_sub(1, Ordering::Relaxed);
                    return None;
                }
                vec![0u8; MEM_BUF_SIZE].into_boxed_slice()
            }
        };
        Some(MemBuf {
            bytes,
            len: 0,
            pool: self.pool.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(port: &mut MemPort, byte: u8) -> MemBuf {
        let mut b = port.alloc().unwrap();
        b.set_len(60);
        b.data_mut().fill(byte);
        b
    }

    #[test]
    fn frames_cross_in_order_and_buffers_return() {
        let (mut a, mut b) = link(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            8,
            16,
        );
        let mut batch: Vec<MemBuf> = (0..5).map(|i| frame(&mut a, i)).collect();
        assert_eq!(a.tx_burst(Instant::ZERO, &mut batch), 5);
        assert!(batch.is_empty());
        let mut got = Vec::new();
        assert_eq!(b.rx_burst(Instant::ZERO, &mut got, 32), 5);
        assert_eq!(
            got.iter().map(|f| f.data()[0]).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
        drop(got);
        assert_eq!(a.buffers_free(), 16);
    }

    #[test]
    fn full_link_leaves_unsent_with_caller() {
        let (mut a, b) = link(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            4,
            16,
        );
        let mut batch: Vec<MemBuf> = (0..6).map(|i| frame(&mut a, i)).collect();
        assert_eq!(a.tx_burst(Instant::ZERO, &mut batch), 4);
        assert_eq!(batch.len(), 2, "unsent frames stay with the caller");
        assert_eq!(batch[0].data()[0], 4, "unsent are the tail, in order");
        assert_eq!(b.rx_pending(), 4);
        drop(batch);
        assert_eq!(a.buffers_free(), 12, "4 in flight, the rest free");
    }

    #[test]
    fn pool_exhaustion_is_none_not_growth() {
        let (mut a, _b) = link(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            4,
            3,
        );
        let held: Vec<MemBuf> = (0..3).map(|_| a.alloc().unwrap()).collect();
        assert!(a.alloc().is_none());
        drop(held);
        assert!(a.alloc().is_some());
    }
}
