//! Hugepage pools as the kernel reports them in sysfs:
//! `/sys/kernel/mm/hugepages/hugepages-<size>kB/` for the whole machine and
//! `/sys/devices/system/node/node<N>/hugepages/hugepages-<size>kB/` per NUMA
//! node.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// One pool of hugepages of one size, machine-wide (`node == None`) or on one
/// NUMA node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HugepagePool {
    /// Page size in KiB (2048 for 2 MiB, 1048576 for 1 GiB).
    pub size_kib: u64,
    /// NUMA node, or `None` for the machine-wide totals.
    pub node: Option<u32>,
    /// Pages reserved (`nr_hugepages`).
    pub total: u64,
    /// Pages reserved and not in use (`free_hugepages`).
    pub free: u64,
}

impl HugepagePool {
    /// Free bytes in this pool.
    pub fn free_bytes(&self) -> u64 {
        self.free * self.size_kib * 1024
    }
}

impl fmt::Display for HugepagePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = if self.size_kib >= 1024 * 1024 {
            format!("{}G", self.size_kib / (1024 * 1024))
        } else {
            format!("{}M", self.size_kib / 1024)
        };
        match self.node {
            Some(n) => write!(f, "{size} node{n}: {} free of {}", self.free, self.total),
            None => write!(f, "{size}: {} free of {}", self.free, self.total),
        }
    }
}

/// Everything sysfs says about hugepages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Machine-wide pools, one per page size, smallest size first.
    pub sizes: Vec<HugepagePool>,
    /// Per-NUMA-node pools (empty on kernels without NUMA sysfs).
    pub nodes: Vec<HugepagePool>,
}

impl Inventory {
    /// Free bytes over all page sizes, machine-wide.
    pub fn free_bytes(&self) -> u64 {
        self.sizes.iter().map(HugepagePool::free_bytes).sum()
    }

    /// The machine-wide pool of one page size.
    pub fn size(&self, size_kib: u64) -> Option<&HugepagePool> {
        self.sizes.iter().find(|p| p.size_kib == size_kib)
    }
}

/// Reading sysfs failed.
#[derive(Debug)]
pub struct SysfsError {
    /// The file or folder that could not be read or parsed.
    pub path: PathBuf,
    /// What went wrong.
    pub source: io::Error,
}

impl fmt::Display for SysfsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for SysfsError {}

/// Reads the hugepage inventory from the real sysfs.
///
/// # Errors
/// When `/sys/kernel/mm/hugepages` cannot be read (a kernel without
/// hugepage support gives an empty inventory instead).
pub fn discover() -> Result<Inventory, SysfsError> {
    discover_in(Path::new("/sys"))
}

/// Reads the hugepage inventory from a sysfs tree rooted at `sys` (tests use
/// a fake tree).
///
/// # Errors
/// When a pool folder exists but its counters cannot be read or parsed.
pub fn discover_in(sys: &Path) -> Result<Inventory, SysfsError> {
    let mut inv = Inventory {
        sizes: read_pools(&sys.join("kernel/mm/hugepages"), None)?,
        nodes: Vec::new(),
    };
    let nodes_dir = sys.join("devices/system/node");
    if let Ok(entries) = fs::read_dir(&nodes_dir) {
        let mut nodes: Vec<(u32, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let n = name.strip_prefix("node")?.parse().ok()?;
                Some((n, e.path()))
            })
            .collect();
        nodes.sort();
        for (n, path) in nodes {
            inv.nodes
                .extend(read_pools(&path.join("hugepages"), Some(n))?);
        }
    }
    Ok(inv)
}

fn read_pools(dir: &Path, node: Option<u32>) -> Result<Vec<HugepagePool>, SysfsError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(SysfsError {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut pools = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let Some(size_kib) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("hugepages-"))
            .and_then(|n| n.strip_suffix("kB"))
            .and_then(|n| n.parse().ok())
        else {
            continue;
        };
        let path = entry.path();
        pools.push(HugepagePool {
            size_kib,
            node,
            total: read_counter(&path.join("nr_hugepages"))?,
            free: read_counter(&path.join("free_hugepages"))?,
        });
    }
    pools.sort_by_key(|p| p.size_kib);
    Ok(pools)
}

fn read_counter(path: &Path) -> Result<u64, SysfsError> {
    let text = fs::read_to_string(path).map_err(|source| SysfsError {
        path: path.to_path_buf(),
        source,
    })?;
    text.trim().parse().map_err(|_| SysfsError {
        path: path.to_path_buf(),
        source: io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a number: {text:?}"),
        ),
    })
}

/// Reserving hugepages failed.
#[derive(Debug)]
pub enum ReserveError {
    /// The page size has no pool on this machine (or node).
    NoSuchPool { size_kib: u64, node: Option<u32> },
    /// Writing `nr_hugepages` failed (not root, or the kernel refused).
    Write(SysfsError),
}

impl fmt::Display for ReserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSuchPool { size_kib, node } => match node {
                Some(n) => write!(f, "no {size_kib} kB hugepage pool on NUMA node {n}"),
                None => write!(f, "no {size_kib} kB hugepage pool on this machine"),
            },
            Self::Write(e) => write!(f, "cannot reserve hugepages: {e}"),
        }
    }
}

impl std::error::Error for ReserveError {}

/// Asks the kernel to keep `count` hugepages of `size_kib` reserved,
/// machine-wide or on one NUMA node, and returns how many it then holds (the
/// kernel may give fewer when memory is fragmented). Needs root.
///
/// # Errors
/// [`ReserveError::NoSuchPool`] for an unknown size or node,
/// [`ReserveError::Write`] when the kernel refuses the write.
pub fn reserve(size_kib: u64, node: Option<u32>, count: u64) -> Result<u64, ReserveError> {
    reserve_in(Path::new("/sys"), size_kib, node, count)
}

/// [`reserve`] on a sysfs tree rooted at `sys`.
///
/// # Errors
/// As [`reserve`].
pub fn reserve_in(
    sys: &Path,
    size_kib: u64,
    node: Option<u32>,
    count: u64,
) -> Result<u64, ReserveError> {
    let pool = match node {
        Some(n) => sys.join(format!(
            "devices/system/node/node{n}/hugepages/hugepages-{size_kib}kB"
        )),
        None => sys.join(format!("kernel/mm/hugepages/hugepages-{size_kib}kB")),
    };
    if !pool.is_dir() {
        return Err(ReserveError::NoSuchPool { size_kib, node });
    }
    let file = pool.join("nr_hugepages");
    fs::write(&file, format!("{count}\n")).map_err(|source| {
        ReserveError::Write(SysfsError {
            path: file.clone(),
            source,
        })
    })?;
    read_counter(&file).map_err(ReserveError::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(dir: &Path, size: u64, total: u64, free: u64) {
        let p = dir.join(format!("hugepages-{size}kB"));
        fs::create_dir_all(&p).unwrap();
        fs::write(p.join("nr_hugepages"), format!("{total}\n")).unwrap();
        fs::write(p.join("free_hugepages"), format!("{free}\n")).unwrap();
    }

    #[test]
    fn reads_sizes_and_nodes() {
        let sys = tempfile::tempdir().unwrap();
        let global = sys.path().join("kernel/mm/hugepages");
        pool(&global, 1048576, 2, 1);
        pool(&global, 2048, 512, 500);
        let node0 = sys.path().join("devices/system/node/node0/hugepages");
        pool(&node0, 2048, 256, 250);
        let node1 = sys.path().join("devices/system/node/node1/hugepages");
        pool(&node1, 2048, 256, 250);
        fs::create_dir_all(sys.path().join("devices/system/node/possible")).unwrap();

        let inv = discover_in(sys.path()).unwrap();
        assert_eq!(inv.sizes.len(), 2);
        assert_eq!(inv.sizes[0].size_kib, 2048, "smallest size first");
        assert_eq!(inv.size(2048).unwrap().free, 500);
        assert_eq!(inv.nodes.len(), 2);
        assert_eq!(inv.nodes[1].node, Some(1));
        assert_eq!(inv.free_bytes(), 500 * 2 * 1024 * 1024 + 1024 * 1024 * 1024);
        assert_eq!(inv.sizes[0].to_string(), "2M: 500 free of 512");
    }

    #[test]
    fn no_hugepage_support_is_empty_not_an_error() {
        let sys = tempfile::tempdir().unwrap();
        let inv = discover_in(sys.path()).unwrap();
        assert_eq!(inv, Inventory::default());
        assert_eq!(inv.free_bytes(), 0);
    }

    #[test]
    fn garbage_counter_names_the_file() {
        let sys = tempfile::tempdir().unwrap();
        let global = sys.path().join("kernel/mm/hugepages");
        pool(&global, 2048, 1, 1);
        fs::write(global.join("hugepages-2048kB/free_hugepages"), "lots").unwrap();
        let err = discover_in(sys.path()).unwrap_err();
        assert!(err.to_string().contains("free_hugepages"), "{err}");
    }

    #[test]
    fn reserve_writes_the_count_and_reads_it_back() {
        let sys = tempfile::tempdir().unwrap();
        pool(&sys.path().join("kernel/mm/hugepages"), 2048, 0, 0);
        assert_eq!(reserve_in(sys.path(), 2048, None, 64).unwrap(), 64);
        assert!(matches!(
            reserve_in(sys.path(), 4096, None, 1),
            Err(ReserveError::NoSuchPool { size_kib: 4096, .. })
        ));
        assert!(matches!(
            reserve_in(sys.path(), 2048, Some(3), 1),
            Err(ReserveError::NoSuchPool { node: Some(3), .. })
        ));
    }

    #[test]
    fn real_sysfs_is_readable() {
        // Whatever this machine has, discovery must not fail.
        discover().unwrap();
    }
}
