//! An in-memory link: two ports joined back to back in one process, for
//! tests and simulation. Each direction is a bounded lock-free queue, so the
//! two ends may be driven from one thread or from two. Buffers come from a
//! pool shared by both ends and go back to it when dropped.
//!
//! It behaves as a DPDK port does where that changes what the engine
//! costs: a buffer freed goes to a small cache of the freeing thread and
//! is the next one that thread takes (DPDK's per-lcore mempool cache), so
//! frames are built in buffers still in the core's cache, not in the
//! coldest of the pool. And a link may offload checksums as a NIC does
//! ([`link_with_offload`]), and TCP segmentation too
//! ([`link_with_segmentation`]).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crossbeam_queue::ArrayQueue;
use smoltcp::wire::EthernetAddress;

use super::{Check, ChecksumOffload, PacketBuf, Port, RxChecks};
use crate::time::Instant;

/// Frame room of each buffer (a 1500-byte MTU frame plus slack).
pub const MEM_BUF_SIZE: usize = 2048;

/// Frame room of a large buffer, for a link that cuts TCP segments
/// ([`Port::alloc_large`]): a 64 KiB IPv4 packet and its Ethernet header.
pub const MEM_LARGE_BUF_SIZE: usize = 65536 + 14;

/// Most buffers a thread keeps for one pool (DPDK's default cache is
/// 512 a lcore at most; `dpd` uses 256).
const CACHE_SIZE: usize = 256;

#[derive(Debug)]
struct Pool {
    free: ArrayQueue<Box<[u8]>>,
    limit: usize,
    /// Bytes of each buffer.
    size: usize,
    made: AtomicU64,
}

/// A thread's cache of one pool's free buffers, last in first out.
struct Cache {
    pool: Weak<Pool>,
    free: Vec<Box<[u8]>>,
}

thread_local! {
    /// This thread's buffer caches, one for each pool it used lately.
    static CACHES: RefCell<Vec<Cache>> = const { RefCell::new(Vec::new()) };
}

impl Pool {
    fn new(limit: usize, size: usize) -> Arc<Self> {
        Arc::new(Pool {
            free: ArrayQueue::new(limit.max(1)),
            limit,
            size,
            made: AtomicU64::new(0),
        })
    }

    /// A buffer: a free one, else a new one while fewer than `limit`
    /// exist.
    fn alloc(self: &Arc<Self>) -> Option<MemBuf> {
        let bytes = match self.take() {
            Some(b) => b,
            None => {
                let made = self.made.fetch_add(1, Ordering::Relaxed);
                if made as usize >= self.limit {
                    self.made.fetch_sub(1, Ordering::Relaxed);
                    return None;
                }
                vec![0u8; self.size].into_boxed_slice()
            }
        };
        Some(MemBuf {
            bytes,
            len: 0,
            pool: self.clone(),
            fill: None,
            cut: None,
            rx: RxChecks::default(),
            chained: false,
        })
    }
    /// A free buffer: this thread's latest freed, else the pool's.
    fn take(self: &Arc<Self>) -> Option<Box<[u8]>> {
        let cached = CACHES.with(|c| {
            let mut caches = c.borrow_mut();
            let cache = caches
                .iter_mut()
                .find(|k| std::ptr::eq(k.pool.as_ptr(), Arc::as_ptr(self)))?;
            cache.free.pop()
        });
        cached.or_else(|| self.free.pop())
    }

    /// Gives `bytes` back: to this thread's cache, or the pool's list
    /// when the cache is full.
    fn give(self: &Arc<Self>, bytes: Box<[u8]>) {
        let overflow = CACHES.with(|c| {
            let mut caches = c.borrow_mut();
            let me = Arc::as_ptr(self);
            let at = match caches
                .iter()
                .position(|k| std::ptr::eq(k.pool.as_ptr(), me))
            {
                Some(i) => i,
                None => {
                    // Caches of links that are gone give their memory back.
                    caches.retain(|k| k.pool.strong_count() > 0);
                    caches.push(Cache {
                        pool: Arc::downgrade(self),
                        free: Vec::with_capacity(CACHE_SIZE),
                    });
                    caches.len() - 1
                }
            };
            let free = &mut caches[at].free;
            if free.len() < CACHE_SIZE {
                free.push(bytes);
                None
            } else {
                Some(bytes)
            }
        });
        if let Some(bytes) = overflow {
            // A full free list means the pool is over its size: let it go.
            let _ = self.free.push(bytes);
        }
    }
}

/// A buffer of the in-memory link; returns to its pool on drop.
#[derive(Debug)]
pub struct MemBuf {
    bytes: Box<[u8]>,
    len: usize,
    pool: Arc<Pool>,
    /// Checksums the sender's port is to fill (Ethernet and IPv4 header
    /// lengths), on a link that offloads them.
    fill: Option<(u8, u8)>,
    /// Segments the sender's port is to cut this frame into, on a link
    /// that does.
    cut: Option<Cut>,
    rx: RxChecks,
    /// Reads as a chained frame ([`MemBuf::mark_chained`]).
    chained: bool,
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
    fn rx_checks(&self) -> RxChecks {
        self.rx
    }
    fn chained(&self) -> bool {
        self.chained
    }
    fn request_tx_checksums(&mut self, l2_len: u8, l3_len: u8) {
        self.fill = Some((l2_len, l3_len));
    }
    fn request_segmentation(&mut self, l2_len: u8, l3_len: u8, l4_len: u8, mss: u16) {
        self.fill = Some((l2_len, l3_len));
        self.cut = Some(Cut { l4: l4_len, mss });
    }
    fn copy_offload_from(&mut self, other: &Self) {
        self.fill = other.fill;
        self.cut = other.cut;
    }
    fn grow_l2(&mut self, n: u8) {
        if let Some((l2, _)) = &mut self.fill {
            *l2 += n;
        }
    }
}

/// A segmentation request: the TCP header's length and the payload
/// bytes of each segment.
#[derive(Debug, Clone, Copy)]
struct Cut {
    l4: u8,
    mss: u16,
}

impl MemBuf {
    /// Test hook: the frame reads as the first of several chained
    /// segments, as a DPDK driver's scattered receive leaves a frame
    /// longer than one buffer ([`PacketBuf::chained`]).
    #[doc(hidden)]
    pub fn mark_chained(&mut self) {
        self.chained = true;
    }

    /// What a NIC does on the way: fills the checksums the sender asked
    /// for, or, on a receiving port that checks them, judges them. The
    /// receiving end calls it, so a sender's cost stays a NIC's (none).
    fn arrive(&mut self, checks: bool) {
        match (self.fill.take(), checks) {
            // Filled by the sending NIC: right by construction.
            (Some(_), true) => {
                self.rx = RxChecks {
                    ipv4: Check::Good,
                    l4: Check::Good,
                }
            }
            (Some((l2, l3)), false) => fill_checksums(self.data_mut(), l2.into(), l3.into()),
            (None, true) => self.rx = judge_checksums(self.data()),
            (None, false) => {}
        }
    }
}

/// Cuts `frame` (Ethernet header of `l2` bytes, IPv4 of `l3`, TCP of
/// `cut.l4`, then payload) into frames of at most `cut.mss` payload
/// bytes as a NIC's TSO does: each gets the headers with its IPv4 total
/// length, an identification one above the previous, its sequence
/// number, FIN and PSH only on the last and CWR only on the first, and
/// checksums filled. `piece` gives an empty buffer for each (none: the
/// rest is dropped, as a NIC out of descriptors drops).
fn cut_segments(
    frame: &[u8],
    l2: usize,
    l3: usize,
    cut: Cut,
    mut piece: impl FnMut() -> Option<MemBuf>,
    mut out: impl FnMut(MemBuf),
) {
    let headers = l2 + l3 + usize::from(cut.l4);
    let mss = usize::from(cut.mss.max(1));
    let (Some(head), Some(payload)) = (frame.get(..headers), frame.get(headers..)) else {
        return;
    };
    if head.len() < l2 + l3 + 20 || l3 < 20 {
        return;
    }
    let ipv6 = head[l2] >> 4 == 6;
    if ipv6 && l3 < 40 {
        return;
    }
    let ident = u16::from_be_bytes([head[l2 + 4], head[l2 + 5]]);
    let seq = u32::from_be_bytes([
        head[l2 + l3 + 4],
        head[l2 + l3 + 5],
        head[l2 + l3 + 6],
        head[l2 + l3 + 7],
    ]);
    let flags = head[l2 + l3 + 13];
    let count = payload.len().div_ceil(mss).max(1);
    for (i, at) in (0..count).map(|i| (i, i * mss)) {
        let Some(mut b) = piece() else { return };
        let data = &payload[at..(at + mss).min(payload.len())];
        b.set_len(headers + data.len());
        let f = b.data_mut();
        f[..headers].copy_from_slice(head);
        f[headers..].copy_from_slice(data);
        let tcp_len = usize::from(cut.l4) + data.len();
        if ipv6 {
            // IPv6: the payload length; no identification (RFC 8200).
            let plen = (l3 - 40 + tcp_len) as u16; // < 64 KiB: cut from one
            f[l2 + 4..l2 + 6].copy_from_slice(&plen.to_be_bytes());
        } else {
            let total = (l3 + tcp_len) as u16; // < 64 KiB: cut from one
            f[l2 + 2..l2 + 4].copy_from_slice(&total.to_be_bytes());
            f[l2 + 4..l2 + 6].copy_from_slice(&ident.wrapping_add(i as u16).to_be_bytes());
        }
        let tcp = l2 + l3;
        f[tcp + 4..tcp + 8].copy_from_slice(&seq.wrapping_add(at as u32).to_be_bytes());
        let (fin, psh, cwr) = (0x01, 0x08, 0x80);
        let mut fl = flags;
        if i + 1 < count {
            fl &= !(fin | psh);
        }
        if i > 0 {
            fl &= !cwr;
        }
        f[tcp + 13] = fl;
        fill_checksums(f, l2, l3);
        out(b);
    }
}

/// Fills the IPv4 header and TCP checksums of a frame whose TCP checksum
/// field holds the pseudo-header sum (the TCP checksum alone over IPv6).
fn fill_checksums(frame: &mut [u8], l2: usize, l3: usize) {
    let Some(ip) = frame.get_mut(l2..l2 + l3) else {
        return;
    };
    if ip.first().is_some_and(|v| v >> 4 == 6) {
        return fill_checksum6(frame, l2, l3);
    }
    if ip.len() < 20 {
        return;
    }
    ip[10..12].fill(0);
    let sum = crate::checksum::ipv4_header(ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let (src, dst) = (
        [ip[12], ip[13], ip[14], ip[15]],
        [ip[16], ip[17], ip[18], ip[19]],
    );
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let Some(tcp) = frame.get_mut(l2 + l3..l2 + total) else {
        return;
    };
    if tcp.len() < 20 {
        return;
    }
    tcp[16..18].fill(0);
    let sum = crate::checksum::tcp(src, dst, tcp);
    tcp[16..18].copy_from_slice(&sum.to_be_bytes());
}

/// [`fill_checksums`] for a TCP segment over IPv6 (no extension headers:
/// `l3` is 40).
fn fill_checksum6(frame: &mut [u8], l2: usize, l3: usize) {
    let Some(ip) = frame.get(l2..l2 + l3).filter(|ip| ip.len() >= 40) else {
        return;
    };
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&ip[8..24]);
    dst.copy_from_slice(&ip[24..40]);
    let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let Some(tcp) = frame.get_mut(l2 + 40..l2 + 40 + plen) else {
        return;
    };
    if tcp.len() < 20 {
        return;
    }
    tcp[16..18].fill(0);
    let sum = crate::checksum::tcp6(src, dst, tcp);
    tcp[16..18].copy_from_slice(&sum.to_be_bytes());
}

/// A NIC's receive checks of an IPv4 frame with a 14-byte Ethernet
/// header: the header checksum, and the TCP checksum of an unfragmented
/// TCP segment; anything else is left to software.
fn judge_checksums(frame: &[u8]) -> RxChecks {
    let mut checks = RxChecks::default();
    let Some(ip) = frame.get(14..) else {
        return checks;
    };
    if frame[12..14] != [0x08, 0x00] || ip.len() < 20 || ip[0] >> 4 != 4 {
        return checks;
    }
    let ihl = usize::from(ip[0] & 0xf) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let (Some(header), Some(packet)) = (ip.get(..ihl), ip.get(..total)) else {
        return checks;
    };
    if ihl < 20 || total < ihl {
        return checks;
    }
    let good = |ok| if ok { Check::Good } else { Check::Bad };
    checks.ipv4 = good(crate::checksum::ipv4_header_ok(header));
    let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0;
    if ip[9] == 6 && !fragment {
        let (src, dst) = (
            [ip[12], ip[13], ip[14], ip[15]],
            [ip[16], ip[17], ip[18], ip[19]],
        );
        if let Some(segment) = packet.get(ihl..) {
            checks.l4 = good(crate::checksum::tcp_ok(src, dst, segment));
        }
    }
    checks
}

impl Drop for MemBuf {
    fn drop(&mut self) {
        let bytes = std::mem::take(&mut self.bytes);
        self.pool.give(bytes);
    }
}

/// One end of an in-memory link.
#[derive(Debug)]
pub struct MemPort {
    mac: EthernetAddress,
    rx: Arc<ArrayQueue<MemBuf>>,
    tx: Arc<ArrayQueue<MemBuf>>,
    pool: Arc<Pool>,
    offload: bool,
    /// Large buffers, where the link cuts TCP segments.
    large: Option<Arc<Pool>>,
    /// Segments cut from a received frame that the last burst had no
    /// room for.
    cut_pending: VecDeque<MemBuf>,
    /// Bursts move nothing ([`Port::set_paused`], as a DPDK port being
    /// restarted).
    paused: bool,
    /// How a NIC's RSS would spread flows over queues, one of which this
    /// is ([`MemPort::set_rss`]).
    rss: Option<super::RssSteering>,
}

/// Makes a link of two ports with the given MACs; each direction holds at
/// most `depth` frames in flight, and at most `buffers` buffers exist.
pub fn link(
    mac_a: EthernetAddress,
    mac_b: EthernetAddress,
    depth: usize,
    buffers: usize,
) -> (MemPort, MemPort) {
    link_with(mac_a, mac_b, depth, buffers, false, false)
}

/// [`link`] whose ports offload IPv4 and TCP checksums as a NIC does:
/// frames whose sender asked for them arrive filled (and judged good),
/// and other frames arrive with the receiving port's verdict on their
/// checksums. The work is done as frames arrive, outside the sender's
/// cost and charged to no engine's handling of the frame as software.
pub fn link_with_offload(
    mac_a: EthernetAddress,
    mac_b: EthernetAddress,
    depth: usize,
    buffers: usize,
) -> (MemPort, MemPort) {
    link_with(mac_a, mac_b, depth, buffers, true, false)
}

/// [`link_with_offload`] whose ports also cut TCP segments (TSO): a
/// frame of up to [`MEM_LARGE_BUF_SIZE`] bytes the sender asked to be
/// segmented arrives as segments of the size asked, with their checksums
/// judged good. Large buffers come from a pool of their own (an eighth
/// of `buffers`, at least 4).
pub fn link_with_segmentation(
    mac_a: EthernetAddress,
    mac_b: EthernetAddress,
    depth: usize,
    buffers: usize,
) -> (MemPort, MemPort) {
    link_with(mac_a, mac_b, depth, buffers, true, true)
}

fn link_with(
    mac_a: EthernetAddress,
    mac_b: EthernetAddress,
    depth: usize,
    buffers: usize,
    offload: bool,
    segmentation: bool,
) -> (MemPort, MemPort) {
    let ab = Arc::new(ArrayQueue::new(depth));
    let ba = Arc::new(ArrayQueue::new(depth));
    let pool = Pool::new(buffers, MEM_BUF_SIZE);
    let large = segmentation.then(|| Pool::new((buffers / 8).max(4), MEM_LARGE_BUF_SIZE));
    (
        MemPort {
            mac: mac_a,
            rx: ba.clone(),
            tx: ab.clone(),
            pool: pool.clone(),
            offload,
            large: large.clone(),
            cut_pending: VecDeque::new(),
            paused: false,
            rss: None,
        },
        MemPort {
            mac: mac_b,
            rx: ab,
            tx: ba,
            pool,
            offload,
            large,
            cut_pending: VecDeque::new(),
            paused: false,
            rss: None,
        },
    )
}

impl MemPort {
    /// Buffers of the link's pool not currently in use (free list plus
    /// never-made ones).
    /// (This thread's cache counts; other threads' caches do not.)
    pub fn buffers_free(&self) -> usize {
        let cached = CACHES.with(|c| {
            c.borrow()
                .iter()
                .find(|k| std::ptr::eq(k.pool.as_ptr(), Arc::as_ptr(&self.pool)))
                .map_or(0, |k| k.free.len())
        });
        cached + self.pool.free.len() + self.pool.limit
            - self.pool.made.load(Ordering::Relaxed) as usize
    }

    /// Frames waiting to be received on this end.
    pub fn rx_pending(&self) -> usize {
        self.rx.len()
    }

    /// Makes this end one queue of a NIC whose RSS spreads flows as `rss`
    /// says (the test delivers each frame to the queue it names).
    pub fn set_rss(&mut self, rss: super::RssSteering) {
        self.rss = Some(rss);
    }
}

impl Port for MemPort {
    type Buf = MemBuf;

    fn rss_steering(&self) -> Option<super::RssSteering> {
        self.rss
    }

    fn mac(&self) -> EthernetAddress {
        self.mac
    }

    fn rx_burst(&mut self, _now: Instant, out: &mut Vec<MemBuf>, max: usize) -> usize {
        let mut n = 0;
        while n < max && !self.paused {
            if let Some(b) = self.cut_pending.pop_front() {
                out.push(b);
                n += 1;
                continue;
            }
            match self.rx.pop() {
                Some(mut b) => {
                    if let (Some(cut), Some((l2, l3))) = (b.cut.take(), b.fill) {
                        // Cut by the sending NIC, each segment filled by it.
                        let pool = &self.pool;
                        let pending = &mut self.cut_pending;
                        let good = RxChecks {
                            ipv4: Check::Good,
                            l4: Check::Good,
                        };
                        let piece = || pool.alloc();
                        cut_segments(b.data(), l2.into(), l3.into(), cut, piece, |mut p| {
                            p.rx = good;
                            pending.push_back(p);
                        });
                        continue;
                    }
                    b.arrive(self.offload);
                    out.push(b);
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    fn tx_burst(&mut self, _now: Instant, batch: &mut Vec<MemBuf>) -> usize {
        if self.paused {
            return 0;
        }
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
        self.pool.alloc()
    }

    fn alloc_large(&mut self) -> Option<MemBuf> {
        match &self.large {
            Some(large) => large.alloc(),
            None => self.pool.alloc(),
        }
    }

    fn segmentation(&self) -> Option<usize> {
        self.large.is_some().then_some(MEM_LARGE_BUF_SIZE)
    }

    fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    fn checksum_offload(&self) -> ChecksumOffload {
        ChecksumOffload {
            rx_ipv4: self.offload,
            rx_tcp: self.offload,
            tx_ipv4: self.offload,
            tx_tcp: self.offload,
        }
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

    #[test]
    fn a_freed_buffer_is_the_next_one_taken() {
        let (mut a, _b) = link(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            4,
            64,
        );
        let held: Vec<MemBuf> = (0..8).map(|_| a.alloc().unwrap()).collect();
        let last = held[7].bytes.as_ptr();
        drop(held);
        // Last in, first out, as a DPDK lcore's mempool cache.
        assert_eq!(a.alloc().unwrap().bytes.as_ptr(), last);
        assert_eq!(a.buffers_free(), 64);
    }

    /// An Ethernet/IPv4/TCP frame from 10.0.0.1:1 to 10.0.0.2:2 with 4
    /// bytes of payload, its checksums right.
    fn tcp_frame(port: &mut MemPort) -> MemBuf {
        let mut b = port.alloc().unwrap();
        b.set_len(14 + 20 + 20 + 4);
        let f = b.data_mut();
        f.fill(0);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14..34].copy_from_slice(&[
            0x45, 0, 0, 44, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        f[34..38].copy_from_slice(&[0, 1, 0, 2]);
        f[46] = 5 << 4;
        f[54..58].copy_from_slice(b"abcd");
        fill_checksums(f, 14, 20);
        b
    }

    fn send(from: &mut MemPort, to: &mut MemPort, frame: MemBuf) -> MemBuf {
        assert_eq!(from.tx_burst(Instant::ZERO, &mut vec![frame]), 1);
        let mut got = Vec::new();
        assert_eq!(to.rx_burst(Instant::ZERO, &mut got, 1), 1);
        got.pop().unwrap()
    }

    #[test]
    fn a_segmenting_link_cuts_a_large_frame_as_a_nic_does() {
        let macs = (
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
        );
        let (mut a, mut b) = link_with_segmentation(macs.0, macs.1, 8, 64);
        assert_eq!(a.segmentation(), Some(MEM_LARGE_BUF_SIZE));
        assert!(link(macs.0, macs.1, 8, 8).0.segmentation().is_none());
        // 3,500 payload bytes, PSH and FIN, IPv4 id 7, seq 1000, cut at 1,000.
        let mut big = a.alloc_large().unwrap();
        assert_eq!(big.capacity(), MEM_LARGE_BUF_SIZE);
        let payload: Vec<u8> = (0..3500u32).map(|i| i as u8).collect();
        big.set_len(54 + payload.len());
        let f = big.data_mut();
        f.fill(0);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let total = (40 + payload.len()) as u16;
        f[14..34].copy_from_slice(&[
            0x45, 0, 0, 0, 0, 7, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[34..38].copy_from_slice(&[0, 1, 0, 2]);
        f[38..42].copy_from_slice(&1000u32.to_be_bytes());
        f[46] = 5 << 4;
        f[47] = 0x10 | 0x08 | 0x01; // ACK PSH FIN
        f[54..].copy_from_slice(&payload);
        let pseudo = crate::checksum::tcp_pseudo_header([10, 0, 0, 1], [10, 0, 0, 2], 20 + 3500);
        f[50..52].copy_from_slice(&pseudo.to_be_bytes());
        big.request_segmentation(14, 20, 20, 1000);
        assert_eq!(a.tx_burst(Instant::ZERO, &mut vec![big]), 1);
        // Fewer than the four pieces fit this burst; the rest come next.
        let mut got = Vec::new();
        assert_eq!(b.rx_burst(Instant::ZERO, &mut got, 3), 3);
        assert_eq!(b.rx_burst(Instant::ZERO, &mut got, 8), 1);
        let mut joined = Vec::new();
        for (i, seg) in got.iter().enumerate() {
            let d = seg.data();
            let len = if i < 3 { 1000 } else { 500 };
            assert_eq!(d.len(), 54 + len);
            assert_eq!(u16::from_be_bytes([d[16], d[17]]) as usize, 40 + len);
            assert_eq!(u16::from_be_bytes([d[18], d[19]]), 7 + i as u16);
            let seq = u32::from_be_bytes([d[38], d[39], d[40], d[41]]);
            assert_eq!(seq, 1000 + 1000 * i as u32);
            let flags = if i < 3 { 0x10 } else { 0x19 };
            assert_eq!(d[47], flags, "segment {i}");
            // Filled right, and so judged.
            assert_eq!(judge_checksums(d), seg.rx_checks());
            assert_eq!(seg.rx_checks().l4, Check::Good);
            joined.extend_from_slice(&d[54..]);
        }
        assert_eq!(joined, payload);
    }

    #[test]
    fn an_offloading_link_fills_asked_checksums_and_judges_the_rest() {
        let macs = (
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
        );
        let good = RxChecks {
            ipv4: Check::Good,
            l4: Check::Good,
        };
        let (mut a, mut b) = link_with_offload(macs.0, macs.1, 8, 16);
        assert!(a.checksum_offload().tx() && b.checksum_offload().rx_tcp);
        // Right checksums, no request: judged good.
        let right = tcp_frame(&mut a);
        let bytes = right.data().to_vec();
        assert_eq!(send(&mut a, &mut b, right).rx_checks(), good);
        // A TCP checksum off by one: judged bad, the IPv4 header good.
        let mut wrong = tcp_frame(&mut a);
        wrong.data_mut()[50] ^= 1;
        let got = send(&mut a, &mut b, wrong).rx_checks();
        assert_eq!((got.ipv4, got.l4), (Check::Good, Check::Bad));
        // Asked to fill: good without looking, as the sending NIC filled
        // them; a port without offload gets them filled in the bytes.
        let mut asked = tcp_frame(&mut a);
        asked.data_mut()[24..26].fill(0);
        asked.request_tx_checksums(14, 20);
        assert_eq!(send(&mut a, &mut b, asked).rx_checks(), good);
        let (mut c, mut d) = link(macs.0, macs.1, 8, 16);
        let mut asked = tcp_frame(&mut c);
        asked.data_mut()[24..26].fill(0);
        asked.data_mut()[50..52].fill(0);
        asked.request_tx_checksums(14, 20);
        let got = send(&mut c, &mut d, asked);
        assert_eq!(got.rx_checks(), RxChecks::default());
        assert_eq!(got.data(), &bytes[..]);
        // Not IPv4, or cut short: left to software.
        let mut short = tcp_frame(&mut a);
        short.set_len(30);
        assert_eq!(send(&mut a, &mut b, short).rx_checks(), RxChecks::default());
        // A total length shorter than the header: judged by no one.
        let mut liar = tcp_frame(&mut a);
        liar.data_mut()[16..18].copy_from_slice(&10u16.to_be_bytes());
        assert_eq!(send(&mut a, &mut b, liar).rx_checks(), RxChecks::default());
    }
}
