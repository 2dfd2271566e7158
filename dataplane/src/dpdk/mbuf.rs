//! Mempools and mbufs.

use std::ffi::CString;
use std::ptr::NonNull;

use dpdk_sys::{rte_mbuf, rte_mempool};

use super::DpdkError;

/// A pool of packet buffers on one NUMA socket.
///
/// Pools are never freed: mbufs may outlive any owner we could give the pool
/// (they sit in NIC rings and other cores' batches), and freeing a pool with
/// mbufs out is a use-after-free. A process makes a few pools at start and
/// keeps them, as DPDK applications do. The handle is `Copy`.
#[derive(Debug, Clone, Copy)]
pub struct Mempool {
    ptr: NonNull<rte_mempool>,
    size: u32,
    data_room: u16,
}

// SAFETY: DPDK mempools are designed for concurrent use from many lcores
// (lock-free ring plus per-lcore caches).
unsafe impl Send for Mempool {}
// SAFETY: as above.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// Creates a packet-buffer pool of `n` mbufs with `data_room` bytes each
    /// (headroom included) and a per-lcore cache of `cache` mbufs.
    ///
    /// # Errors
    /// When DPDK cannot allocate it (no memory on `socket`, name taken).
    pub fn create(
        name: &str,
        n: u32,
        cache: u32,
        data_room: u16,
        socket: i32,
    ) -> Result<Self, DpdkError> {
        let cname = CString::new(name)
            .map_err(|_| DpdkError::new("rte_pktmbuf_pool_create", libc::EINVAL))?;
        // SAFETY: cname is a valid NUL-terminated string; DPDK copies it.
        let ptr = unsafe {
            dpdk_sys::rte_pktmbuf_pool_create(cname.as_ptr(), n, cache, 0, data_room, socket)
        };
        NonNull::new(ptr)
            .map(|ptr| Self {
                ptr,
                size: n,
                data_room,
            })
            .ok_or_else(|| {
                DpdkError::from_rte_errno("rte_pktmbuf_pool_create").context(format!(
                    "pool {name}: {n} mbufs of {data_room} bytes on socket {socket}"
                ))
            })
    }

    /// Takes one mbuf (reset, empty); `None` when the pool is exhausted.
    #[inline]
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: the pool pointer is valid for the life of the process.
        let m = unsafe { dpdk_sys::tlsdp_pktmbuf_alloc(self.ptr.as_ptr()) };
        NonNull::new(m).map(Mbuf)
    }

    /// Mbufs currently in the pool (not handed out). Counts per-lcore caches
    /// too, so it is exact only when no lcore is allocating.
    pub fn available(&self) -> u32 {
        // SAFETY: the pool pointer is valid for the life of the process.
        unsafe { dpdk_sys::tlsdp_mempool_avail_count(self.ptr.as_ptr()) }
    }

    /// Mbufs the pool was created with.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Frame room of each mbuf (its data room less the headroom).
    pub fn frame_room(&self) -> usize {
        usize::from(self.data_room).saturating_sub(dpdk_sys::consts::RTE_PKTMBUF_HEADROOM as usize)
    }

    pub(crate) fn as_ptr(&self) -> *mut rte_mempool {
        self.ptr.as_ptr()
    }
}

/// One single-segment packet buffer, returned to its pool on drop.
#[derive(Debug)]
pub struct Mbuf(NonNull<rte_mbuf>);

// SAFETY: an Mbuf is owned exclusively; DPDK allows freeing an mbuf from any
// thread (registered lcores use their cache, others the shared ring).
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `ptr` must be a valid mbuf that nothing else owns or frees.
    #[inline]
    pub(crate) unsafe fn from_raw(ptr: NonNull<rte_mbuf>) -> Self {
        Self(ptr)
    }

    /// Gives up ownership; the caller must free or transmit the mbuf.
    #[inline]
    pub(crate) fn into_raw(self) -> *mut rte_mbuf {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }

    #[inline]
    pub(crate) fn as_ptr(&self) -> *mut rte_mbuf {
        self.0.as_ptr()
    }

    /// Packet bytes in this (first) segment.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: mtod points at data_len initialised bytes inside the mbuf's
        // buffer, alive while we own the mbuf.
        unsafe {
            let m = self.0.as_ptr();
            std::slice::from_raw_parts(
                dpdk_sys::tlsdp_pktmbuf_data(m),
                usize::from(dpdk_sys::tlsdp_pktmbuf_data_len(m)),
            )
        }
    }

    /// Packet bytes, mutable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in data(); `&mut self` makes the access exclusive.
        unsafe {
            let m = self.0.as_ptr();
            std::slice::from_raw_parts_mut(
                dpdk_sys::tlsdp_pktmbuf_data(m),
                usize::from(dpdk_sys::tlsdp_pktmbuf_data_len(m)),
            )
        }
    }

    /// Bytes from the data start to the end of the buffer.
    #[inline]
    pub fn capacity(&self) -> usize {
        // SAFETY: reads two fields of a valid mbuf.
        usize::from(unsafe { dpdk_sys::tlsdp_pktmbuf_capacity(self.0.as_ptr()) })
    }

    /// Sets the packet length. Bytes beyond the old length are whatever the
    /// buffer held (callers write them before reading).
    ///
    /// # Panics
    /// When `len` exceeds [`Mbuf::capacity`].
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.capacity(),
            "mbuf length {len} > capacity {}",
            self.capacity()
        );
        // SAFETY: len fits the buffer (checked) and u16 (capacity is u16).
        unsafe { dpdk_sys::tlsdp_pktmbuf_set_len(self.0.as_ptr(), len as u16) }
    }

    /// Test hook: sets the length past any bound, as a zero-copy memif
    /// peer can (the receive path must drop such an mbuf unread).
    ///
    /// # Safety
    /// Nothing may read the mbuf's bytes ([`Mbuf::data`]) afterwards.
    #[doc(hidden)]
    pub unsafe fn set_len_unchecked(&mut self, len: u16) {
        // SAFETY: writes two fields of a valid mbuf; the caller keeps its
        // bytes unread.
        unsafe { dpdk_sys::tlsdp_pktmbuf_set_len(self.0.as_ptr(), len) }
    }

    /// Total packet length over all segments.
    #[inline]
    pub fn pkt_len(&self) -> usize {
        // SAFETY: reads a field of a valid mbuf.
        unsafe { dpdk_sys::tlsdp_pktmbuf_pkt_len(self.0.as_ptr()) as usize }
    }

    /// Number of segments (1 unless the driver chained buffers).
    #[inline]
    pub fn segments(&self) -> u16 {
        // SAFETY: reads a field of a valid mbuf.
        unsafe { dpdk_sys::tlsdp_pktmbuf_nb_segs(self.0.as_ptr()) }
    }

    /// Appends `tail`'s segments to this frame (`rte_pktmbuf_chain`), as
    /// a driver's scattered receive does with a frame longer than one
    /// buffer; `tail` back when the chain would be too long. For tests:
    /// the engine takes one segment per frame.
    #[doc(hidden)]
    pub fn chain(&mut self, tail: Mbuf) -> Result<(), Mbuf> {
        // SAFETY: both are valid mbufs we own; on success the head owns
        // the tail (freed with it), so the tail's handle is forgotten.
        let rc = unsafe { dpdk_sys::tlsdp_pktmbuf_chain(self.0.as_ptr(), tail.0.as_ptr()) };
        if rc == 0 {
            std::mem::forget(tail);
            Ok(())
        } else {
            Err(tail)
        }
    }

    /// Receive offload flags (`RTE_MBUF_F_RX_*`).
    #[inline]
    pub fn ol_flags(&self) -> u64 {
        // SAFETY: reads a field of a valid mbuf.
        unsafe { dpdk_sys::tlsdp_pktmbuf_ol_flags(self.0.as_ptr()) }
    }

    /// Replaces the offload flags with the transmit requests `flags`
    /// (`RTE_MBUF_F_TX_*`) and records the header lengths they need.
    #[inline]
    pub fn set_tx_offload(&mut self, flags: u64, l2_len: u8, l3_len: u16) {
        // SAFETY: writes fields of a valid mbuf we own.
        unsafe { dpdk_sys::tlsdp_pktmbuf_set_tx_offload(self.0.as_ptr(), flags, l2_len, l3_len) }
    }

    /// Asks for TCP segmentation (`RTE_MBUF_F_TX_TCP_SEG` in `flags`) in
    /// segments of `tso_segsz` payload bytes, with the header lengths it
    /// needs.
    #[inline]
    pub fn set_tso(&mut self, flags: u64, l2_len: u8, l3_len: u16, l4_len: u8, tso_segsz: u16) {
        // SAFETY: writes fields of a valid mbuf we own.
        unsafe {
            dpdk_sys::tlsdp_pktmbuf_set_tso(
                self.0.as_ptr(),
                flags,
                l2_len,
                l3_len,
                l4_len,
                tso_segsz,
            )
        }
    }

    /// The header lengths and segment size of the transmit requests:
    /// (l2, l3, l4, tso_segsz).
    #[inline]
    pub fn tx_lens(&self) -> (u8, u16, u8, u16) {
        let (mut l2, mut l3, mut l4, mut seg) = (0, 0, 0, 0);
        // SAFETY: reads fields of a valid mbuf into four locals.
        unsafe {
            dpdk_sys::tlsdp_pktmbuf_tx_lens(self.0.as_ptr(), &mut l2, &mut l3, &mut l4, &mut seg)
        };
        (l2, l3, l4, seg)
    }

    /// Replaces the offload flags (a port that is not an ethdev marks
    /// what it checked of a received frame, `RTE_MBUF_F_RX_*`).
    #[inline]
    pub fn set_ol_flags(&mut self, flags: u64) {
        // SAFETY: writes a field of a valid mbuf we own.
        unsafe { dpdk_sys::tlsdp_pktmbuf_set_ol_flags(self.0.as_ptr(), flags) }
    }

    /// Gives this mbuf `other`'s offload flags and header lengths (a copy
    /// of a frame transmits as the original would).
    #[inline]
    pub fn copy_offload_from(&mut self, other: &Mbuf) {
        // SAFETY: both are valid mbufs; `self` is ours to write.
        unsafe { dpdk_sys::tlsdp_pktmbuf_copy_offload(self.0.as_ptr(), other.0.as_ptr()) }
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own the mbuf; it is not used after this.
        unsafe { dpdk_sys::tlsdp_pktmbuf_free(self.0.as_ptr()) }
    }
}
