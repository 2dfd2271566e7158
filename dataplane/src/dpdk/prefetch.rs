//! A hint that memory is about to be read, as DPDK's `rte_prefetch0`: the
//! engine asks for the cache lines a burst's lookups will read before it
//! processes the burst, so that their misses overlap with other work.

/// Asks the CPU to bring the cache line holding `*value` into its caches.
/// Only a hint: it cannot fault and changes nothing any read returns.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 reads nothing architecturally and never faults,
    // whatever the address; this one is a live reference besides.
    unsafe {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(value).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
