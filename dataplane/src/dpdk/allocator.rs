//! The process allocator ([`crate::Allocator`], mimalloc) set for a
//! dataplane (docs/architecture.md, "Allocator").
//!
//! mimalloc returns freed memory to the kernel a few milliseconds after it
//! empties (`madvise`), and takes it back with page faults: in a loaded
//! `dpd` the engine thread made those syscalls itself and faulted 130
//! times a second, some of them on transparent huge pages that the
//! kernel zeroes 2 MiB at a time, inside the engine loop. A dataplane
//! keeps its high-water mark instead: what it holds is bounded by its
//! configured limits.

/// mimalloc's `mi_option_purge_delay`: the same index in its v2 and v3
/// headers (`mimalloc.h`, `mi_option_e`).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Tells mimalloc never to return freed memory to the kernel (purge delay
/// -1). Call once at start, before the engines run; it holds for every
/// thread.
pub fn keep_freed_memory() {
    // SAFETY: mi_option_set takes any option index and value; it writes
    // one word of mimalloc's option table (a relaxed store, safe from any
    // thread).
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) };
}

/// mimalloc's purge delay now, in milliseconds (-1: never).
pub fn purge_delay_ms() -> std::ffi::c_long {
    // SAFETY: mi_option_get reads (and on first use initialises from the
    // environment) one entry of mimalloc's option table.
    unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_memory_is_kept() {
        // mimalloc purges by default (after 1 s in this build), unless
        // the environment said otherwise.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert!(purge_delay_ms() >= 0);
        }
        keep_freed_memory();
        assert_eq!(purge_delay_ms(), -1);
    }
}
