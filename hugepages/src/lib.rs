//! Hugepages for tlsdp: what the machine has (sysfs, per page size and NUMA
//! node), reserving pages and mounting hugetlbfs when asked, and memory
//! regions backed by hugepages with a fallback to normal pages.
//!
//! Unsafe code here is limited to `mmap`/`munmap`/`mount` calls in
//! [`region`] and [`mount`], each with its reason.

pub mod mount;
pub mod region;
pub mod sysfs;

pub use mount::{hugetlbfs_mounts, mount_hugetlbfs, MountError};
pub use region::{Backing, Region, RegionError};
pub use sysfs::{discover, reserve, HugepagePool, Inventory, ReserveError, SysfsError};
