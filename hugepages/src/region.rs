//! Memory regions backed by hugepages where the machine has them, and by
//! normal pages (with a warning) where it does not.

use std::fmt;
use std::io;
use std::ptr::NonNull;

/// What backs a [`Region`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// 2 MiB hugepages (`MAP_HUGETLB`).
    Hugepages,
    /// Normal 4 KiB pages: no free hugepages, or they were not asked for.
    NormalPages,
}

/// Mapping memory failed even with normal pages.
#[derive(Debug)]
pub struct RegionError {
    pub len: usize,
    pub source: io::Error,
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot map {} bytes: {}", self.len, self.source)
    }
}

impl std::error::Error for RegionError {}

/// Hugepage size used for regions.
pub const HUGEPAGE_SIZE: usize = 2 * 1024 * 1024;

/// A zeroed, private, read-write mapping, unmapped on drop. Its length is
/// rounded up to whole pages of its backing.
#[derive(Debug)]
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
}

// SAFETY: a Region owns its mapping exclusively; nothing else points into it.
unsafe impl Send for Region {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for Region {}

impl Region {
    /// Maps `len` bytes on hugepages, falling back to normal pages with a
    /// warning when the kernel has none free.
    ///
    /// # Errors
    /// When even a normal mapping fails (out of memory or address space).
    pub fn new(len: usize) -> Result<Self, RegionError> {
        match Self::with_backing(len, Backing::Hugepages) {
            Ok(r) => Ok(r),
            Err(e) => {
                log::warn!(
                    "no hugepages for a {len}-byte region ({}): using normal pages, expect more TLB misses",
                    e.source
                );
                Self::with_backing(len, Backing::NormalPages)
            }
        }
    }

    /// Maps `len` bytes with exactly the given backing, no fallback.
    ///
    /// # Errors
    /// When the kernel refuses the mapping (for hugepages: none free).
    pub fn with_backing(len: usize, backing: Backing) -> Result<Self, RegionError> {
        let page = match backing {
            Backing::Hugepages => HUGEPAGE_SIZE,
            Backing::NormalPages => 4096,
        };
        let len = len.max(1).div_ceil(page) * page;
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        if backing == Backing::Hugepages {
            flags |= libc::MAP_HUGETLB;
        }
        // SAFETY: an anonymous mapping at a kernel-chosen address touches no
        // existing memory; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(RegionError {
                len,
                source: io::Error::last_os_error(),
            });
        }
        Ok(Self {
            ptr: NonNull::new(ptr.cast()).expect("mmap never returns null on success"),
            len,
            backing,
        })
    }

    /// What backs this region.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes, alive as long as self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing borrows the
        // region any more (drop has `&mut self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_pages_are_zeroed_and_writable() {
        let mut r = Region::with_backing(10_000, Backing::NormalPages).unwrap();
        assert_eq!(r.len(), 12_288, "rounded up to pages");
        assert!(r.as_slice().iter().all(|&b| b == 0));
        r.as_mut_slice()[9_999] = 7;
        assert_eq!(r.as_slice()[9_999], 7);
    }

    #[test]
    fn new_always_gives_memory() {
        // With or without free hugepages: the fallback must hold.
        let mut r = Region::new(3 * 1024 * 1024).unwrap();
        assert!(r.len() >= 3 * 1024 * 1024);
        r.as_mut_slice()[0] = 1;
        let free = crate::discover().unwrap().size(2048).map_or(0, |p| p.free);
        // 3 MiB needs two 2 MiB pages.
        if free == 0 {
            assert_eq!(r.backing(), Backing::NormalPages);
        } else if free >= 4 {
            assert_eq!(r.backing(), Backing::Hugepages);
        }
    }
}
