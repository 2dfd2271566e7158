//! hugetlbfs mounts: finding them and making one.

use std::ffi::CString;
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A hugetlbfs mount point and its page size option, from `/proc/mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HugetlbfsMount {
    pub path: PathBuf,
    /// `pagesize=` option as written by the kernel (e.g. "2M"), if any.
    pub pagesize: Option<String>,
}

/// The hugetlbfs mounts listed in `/proc/mounts`.
///
/// # Errors
/// When `/proc/mounts` cannot be read.
pub fn hugetlbfs_mounts() -> io::Result<Vec<HugetlbfsMount>> {
    Ok(parse_mounts(&fs::read_to_string("/proc/mounts")?))
}

fn parse_mounts(text: &str) -> Vec<HugetlbfsMount> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (_src, path, kind, opts) = (f.next()?, f.next()?, f.next()?, f.next()?);
            (kind == "hugetlbfs").then(|| HugetlbfsMount {
                path: PathBuf::from(path),
                pagesize: opts
                    .split(',')
                    .find_map(|o| o.strip_prefix("pagesize="))
                    .map(str::to_string),
            })
        })
        .collect()
}

/// Mounting hugetlbfs failed.
#[derive(Debug)]
pub struct MountError {
    pub path: PathBuf,
    pub source: io::Error,
}

impl fmt::Display for MountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot mount hugetlbfs on {}: {}",
            self.path.display(),
            self.source
        )
    }
}

impl std::error::Error for MountError {}

/// Mounts hugetlbfs on `path` (created if missing) unless it is mounted there
/// already; `pagesize_kib` picks the page size (`None`: the kernel default).
/// Needs root.
///
/// # Errors
/// When the folder cannot be made or the kernel refuses the mount.
pub fn mount_hugetlbfs(path: &Path, pagesize_kib: Option<u64>) -> Result<(), MountError> {
    let err = |source| MountError {
        path: path.to_path_buf(),
        source,
    };
    if hugetlbfs_mounts()
        .map_err(err)?
        .iter()
        .any(|m| m.path == path)
    {
        return Ok(());
    }
    fs::create_dir_all(path).map_err(err)?;
    let target = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| err(io::Error::new(io::ErrorKind::InvalidInput, "NUL in path")))?;
    let opts = pagesize_kib.map(|k| CString::new(format!("pagesize={k}K")).expect("no NUL"));
    let data = opts
        .as_ref()
        .map_or(std::ptr::null(), |o| o.as_ptr().cast::<libc::c_void>());
    // SAFETY: every pointer is a NUL-terminated string that outlives the call
    // (or null for no options); mount(2) does not keep them.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"hugetlbfs".as_ptr(),
            0,
            data,
        )
    };
    if rc != 0 {
        return Err(err(io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_hugetlbfs_lines_only() {
        let text = "proc /proc proc rw,nosuid 0 0\n\
                    hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n\
                    nodev /mnt/huge1g hugetlbfs rw,relatime,pagesize=1024M 0 0\n";
        let m = parse_mounts(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].path, Path::new("/dev/hugepages"));
        assert_eq!(m[0].pagesize.as_deref(), Some("2M"));
        assert_eq!(m[1].pagesize.as_deref(), Some("1024M"));
    }
}
