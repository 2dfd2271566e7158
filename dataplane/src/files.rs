//! Files the control thread writes for operators (`dpctl config save`,
//! `dpctl capture`): written whole or not at all, never through a link.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

/// Writes `bytes` to `path` atomically: into a new temporary file in the
/// same directory (created exclusively, so an existing file or link of
/// that name is never followed nor reused), synced, then renamed over
/// `path`. A link at `path` is replaced, not written through. A reader
/// sees the old file or the new one, never half of one.
///
/// # Errors
/// Creating, writing or renaming; the temporary file is removed then.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_atomically_or_check(path, Some(bytes), mode)
}

/// Whether [`write_atomically`] could write `path` now: its temporary
/// file is made and removed, and `path` is no folder. For work that ends
/// in a write (a capture), refused before the work rather than after.
///
/// # Errors
/// Why it could not.
pub fn check_writable(path: &Path) -> io::Result<()> {
    if path.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "it is a folder",
        ));
    }
    write_atomically_or_check(path, None, 0o600)
}

/// [`write_atomically`] of `bytes`; with none, its temporary file only,
/// made and removed.
fn write_atomically_or_check(path: &Path, bytes: Option<&[u8]>, mode: u32) -> io::Result<()> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let tmp_name = format!(
        ".{}.{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let tmp = dir.map_or_else(|| tmp_name.clone().into(), |d| d.join(&tmp_name));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut f| match bytes {
            Some(bytes) => {
                f.write_all(bytes)?;
                f.sync_all()
            }
            None => Ok(()),
        })
        .and_then(|()| match bytes {
            Some(_) => std::fs::rename(&tmp, path),
            None => std::fs::remove_file(&tmp),
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_at_the_target_is_replaced_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep me").unwrap();
        let target = dir.path().join("dpd.toml");
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        write_atomically(&target, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert!(!target.symlink_metadata().unwrap().file_type().is_symlink());
        // Nothing else is left in the directory.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sub");
        std::fs::create_dir(&target).unwrap();
        // Renaming a file over a directory fails.
        assert!(write_atomically(&target, b"x", 0o600).is_err());
        assert!(target.is_dir());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
