//! The safe layer over DPDK: EAL, mempools, mbufs, ethdev ports and queues
//! (and the other C underneath: the vnet tap, the VIP interface, the
//! allocator's settings, the CPU's prefetch hint).
//!
//! This module and its children are the only unsafe code of the dataplane
//! (STYLE.md §2): every DPDK return code or null pointer becomes a
//! [`DpdkError`] here, ids become newtypes, an [`Mbuf`] frees itself on drop,
//! and [`EthQueue`]'s `tx_burst` leaves unsent mbufs with the caller.

mod affinity;
mod allocator;
mod clock;
mod eal;
mod ethdev;
mod logs;
mod mbuf;
mod memseg_fds;
mod prefetch;
mod vip_iface;
mod vnet_tap;

pub use affinity::allowed_cpus;
pub use allocator::{keep_freed_memory, purge_delay_ms};
pub use clock::TscClock;
pub use eal::{register_thread, tsc_hz, tsc_now, Eal, LaunchedLcore, LcoreId};
pub use ethdev::{
    bond_active_members, device_counters, link_status, port_id_by_name, restart as restart_port,
    DeviceCounters, EthPort, EthPortConfig, EthQueue, LinkStatus, Offloads, PortId, PortInfo,
    QueueId, FRAME_OVERHEAD, SYMMETRIC_RSS_KEY,
};
pub use logs::route_to_log;
pub use mbuf::{Mbuf, Mempool};
pub use memseg_fds::MemsegFds;
pub use prefetch::prefetch;
pub use vip_iface::VipIface;
pub use vnet_tap::{VnetTap, VnetTapConfig, VnetTapStats};

use std::ffi::CStr;
use std::fmt;

/// DPDK's software Toeplitz hash (`rte_softrss`) of `words` (host order)
/// under `key`: the reference our own hash is tested against.
///
/// # Panics
/// When `key` is shorter than the hash reads (`4 * words.len() + 4`).
pub fn softrss(words: &[u32], key: &[u8]) -> u32 {
    assert!(key.len() >= 4 * words.len() + 4, "key too short");
    let len = u32::try_from(words.len()).expect("few words");
    // SAFETY: rte_softrss reads `len` words and 4 * len + 4 key bytes,
    // both in bounds (checked above); it writes nothing.
    unsafe { dpdk_sys::tlsdp_softrss(words.as_ptr(), len, key.as_ptr()) }
}

/// The calling thread's last OS error number (`EIO` if there is none),
/// for the OS calls of this layer (taps, netlink, namespaces).
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// An `ifreq` naming interface `name` (shorter than `IFNAMSIZ`, checked
/// by the caller), everything else zero.
pub(crate) fn ifreq(name: &std::ffi::CStr) -> libc::ifreq {
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.to_bytes()) {
        *d = *s as libc::c_char;
    }
    req
}

/// A DPDK call failed: which call, and DPDK's error number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkError {
    /// The DPDK function (or our operation) that failed.
    pub op: &'static str,
    /// Positive errno value (`rte_errno` or the negated return code).
    pub errno: i32,
    /// Extra context (device name, arguments).
    pub context: String,
}

impl DpdkError {
    pub(crate) fn new(op: &'static str, errno: i32) -> Self {
        Self {
            op,
            errno: errno.abs(),
            context: String::new(),
        }
    }

    /// An error from `rte_errno` after a failed call.
    pub(crate) fn from_rte_errno(op: &'static str) -> Self {
        // SAFETY: reads the calling thread's rte_errno; no preconditions.
        Self::new(op, unsafe { dpdk_sys::tlsdp_errno() })
    }

    /// Adds what the caller knows (outermost first: `port p0: MTU 9000 …`).
    pub(crate) fn context(mut self, ctx: impl Into<String>) -> Self {
        let ctx = ctx.into();
        self.context = if self.context.is_empty() {
            ctx
        } else {
            format!("{ctx}: {}", self.context)
        };
        self
    }
}

impl fmt::Display for DpdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: rte_strerror returns a pointer to a static or thread-local
        // NUL-terminated string, valid until the next call on this thread; we
        // copy it at once.
        let msg = unsafe { CStr::from_ptr(dpdk_sys::rte_strerror(self.errno)) }.to_string_lossy();
        write!(f, "{} failed: {} (errno {})", self.op, msg, self.errno)?;
        if !self.context.is_empty() {
            write!(f, " [{}]", self.context)?;
        }
        Ok(())
    }
}

impl std::error::Error for DpdkError {}

/// Turns a DPDK `int` return code (negative errno on failure) into a Result.
pub(crate) fn check(op: &'static str, rc: i32) -> Result<i32, DpdkError> {
    if rc < 0 {
        Err(DpdkError::new(op, rc))
    } else {
        Ok(rc)
    }
}

/// The version of the DPDK library linked at run time (`22.11.11`).
pub fn version() -> String {
    // SAFETY: rte_version returns a pointer to a static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(dpdk_sys::rte_version()) }.to_string_lossy();
    v.trim_start_matches("DPDK ").to_string()
}
