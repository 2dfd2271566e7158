//! The files behind EAL's memory, kept for a zero-copy memif client.
//!
//! A zero-copy memif client shares dpd's hugepage memory with its server by
//! sending the server the file of each memseg list (`rte_memseg_get_fd`).
//! When it disconnects, DPDK 22.11's memif (`memif_free_regions`, still so
//! upstream) closes those descriptors, which belong to EAL: the client's
//! next connection sends numbers that name nothing, or another file, and
//! its server's `mmap` fails. [`MemsegFds`] keeps a duplicate of each and
//! puts it back under its number before the port is started again.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Duplicates of EAL's memseg list files, by the number EAL knows them by.
#[derive(Debug, Default)]
pub struct MemsegFds {
    saved: Vec<(RawFd, OwnedFd)>,
}

/// The descriptors EAL holds for its memory (one per memseg list with
/// `--single-file-segments`), each once.
fn eal_memseg_fds() -> Vec<RawFd> {
    unsafe extern "C" fn collect(
        _msl: *const dpdk_sys::rte_memseg_list,
        ms: *const dpdk_sys::rte_memseg,
        arg: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `arg` is the Vec passed below, alive for the walk.
        let fds = unsafe { &mut *arg.cast::<Vec<RawFd>>() };
        // SAFETY: `ms` is the walk's segment; the walk holds the memory
        // lock, as the thread-unsafe call needs.
        let fd = unsafe { dpdk_sys::rte_memseg_get_fd_thread_unsafe(ms) };
        if fd >= 0 && !fds.contains(&fd) {
            fds.push(fd);
        }
        0
    }
    let mut fds: Vec<RawFd> = Vec::new();
    // SAFETY: `collect` matches the callback type and only reads `ms`.
    unsafe { dpdk_sys::rte_memseg_walk(Some(collect), (&mut fds as *mut Vec<RawFd>).cast()) };
    fds
}

/// The (device, inode) a descriptor names, or `None` when it is closed.
fn identity(fd: RawFd) -> io::Result<Option<(u64, u64)>> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: a valid out pointer; any fd number may be asked about.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EBADF) {
            Ok(None)
        } else {
            Err(e)
        };
    }
    // SAFETY: filled by the successful call.
    let st = unsafe { st.assume_init() };
    Ok(Some((st.st_dev, st.st_ino)))
}

impl MemsegFds {
    /// Keeps a duplicate of every memseg file EAL has now and none is kept
    /// of yet (memory EAL added since the last call).
    ///
    /// # Errors
    /// When a descriptor cannot be duplicated.
    pub fn keep_new(&mut self) -> io::Result<()> {
        for fd in eal_memseg_fds() {
            if self.saved.iter().any(|(n, _)| *n == fd) || identity(fd)?.is_none() {
                continue;
            }
            // SAFETY: F_DUPFD_CLOEXEC on an open descriptor; the new one
            // is ours alone.
            let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
            if copy < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `copy` was just opened and nothing else owns it.
            self.saved.push((fd, unsafe { OwnedFd::from_raw_fd(copy) }));
        }
        Ok(())
    }

    /// Puts each kept file back under its number where that number was
    /// closed; returns how many. Call it with the port stopped, before it
    /// starts again.
    ///
    /// # Errors
    /// When a number now names another file (opened since by someone
    /// else): the memory cannot be shared again under it.
    pub fn restore(&mut self) -> io::Result<usize> {
        self.restore_among(&eal_memseg_fds())
    }

    /// [`MemsegFds::restore`] for the numbers EAL uses now, `current`: a
    /// number EAL gave up (it closes a memseg list's file when the list
    /// empties) is forgotten, and one EAL reopened on a new memory file
    /// of its own is kept anew.
    fn restore_among(&mut self, current: &[RawFd]) -> io::Result<usize> {
        self.saved.retain(|(fd, _)| current.contains(fd));
        let mut restored = 0;
        for (fd, copy) in &mut self.saved {
            match identity(*fd)? {
                Some(id) if Some(id) == identity(copy.as_raw_fd())? => {}
                Some(_) if is_eal_memory(*fd) => {
                    // SAFETY: F_DUPFD_CLOEXEC on an open descriptor.
                    let again = unsafe { libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 0) };
                    if again < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // SAFETY: `again` was just opened and nothing else owns it.
                    *copy = unsafe { OwnedFd::from_raw_fd(again) };
                }
                Some(_) => {
                    return Err(io::Error::other(format!(
                        "descriptor {fd} of EAL's memory ({}) was closed and now names another file ({})",
                        describe(copy.as_raw_fd()),
                        describe(*fd)
                    )))
                }
                None => {
                    // The lowest free number from `fd` on: `fd` itself,
                    // unless another thread opened a file under it since
                    // the check just above. dup2 would have closed that
                    // file under its owner and turned its writes into
                    // packet memory; this takes the number only if free.
                    // SAFETY: F_DUPFD on an open descriptor we own.
                    let got = unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_DUPFD, *fd) };
                    if got < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    if got != *fd {
                        // SAFETY: `got` was just opened and nothing else owns it.
                        drop(unsafe { OwnedFd::from_raw_fd(got) });
                        return Err(io::Error::other(format!(
                            "descriptor {fd} of EAL's memory was taken by another file ({}) as it was put back",
                            describe(*fd)
                        )));
                    }
                    restored += 1;
                }
            }
        }
        Ok(restored)
    }
}

/// What `fd` names, for messages.
fn describe(fd: RawFd) -> String {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map_or_else(|e| e.to_string(), |p| p.display().to_string())
}

/// Whether `fd` is one of EAL's memory files (`memfd_create("seg_N")`
/// with `--in-memory`).
fn is_eal_memory(fd: RawFd) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .is_ok_and(|p| p.to_string_lossy().starts_with("/memfd:seg_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without EAL: a file of our own stands for EAL's, at a number far
    /// above what the test's other threads open (they take the lowest
    /// free one), closed the way memif does, and restored.
    #[test]
    fn a_closed_descriptor_comes_back_under_its_number_and_a_reused_one_is_refused() {
        let path = std::env::temp_dir().join(format!("tlsdp-memseg-{}", std::process::id()));
        std::fs::write(&path, b"memory").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a descriptor call on a number this test owns.
        let fd = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 900) };
        assert!(fd >= 900);
        let id = identity(fd).unwrap();
        assert!(id.is_some());
        // SAFETY: as above.
        let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        let mut kept = MemsegFds {
            // SAFETY: `copy` is new and owned by nothing else.
            saved: vec![(fd, unsafe { OwnedFd::from_raw_fd(copy) })],
        };
        assert_eq!(kept.restore_among(&[fd]).unwrap(), 0, "open: left alone");
        // SAFETY: memif's close of a number it does not own.
        unsafe { libc::close(fd) };
        assert_eq!(identity(fd).unwrap(), None);
        assert_eq!(kept.restore_among(&[fd]).unwrap(), 1);
        assert_eq!(
            identity(fd).unwrap(),
            id,
            "the same file under the same number"
        );
        // The number now names another file.
        let other = std::fs::File::open("/proc/self/status").unwrap();
        // SAFETY: `fd` is this test's (restored above).
        assert!(unsafe { libc::dup2(other.as_raw_fd(), fd) } == fd);
        let e = kept.restore_among(&[fd]).unwrap_err();
        assert!(e.to_string().contains("another file"), "{e}");
        // EAL's own new memory file under that number: kept anew.
        // SAFETY: a new memfd owned by this test, put on its number.
        let memfd = unsafe { libc::memfd_create(c"seg_9".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(memfd >= 0);
        // SAFETY: as above.
        assert!(unsafe { libc::dup2(memfd, fd) } == fd);
        // SAFETY: this test's memfd.
        unsafe { libc::close(memfd) };
        let eal_new = identity(fd).unwrap();
        assert_eq!(kept.restore_among(&[fd]).unwrap(), 0);
        // SAFETY: memif's close again.
        unsafe { libc::close(fd) };
        assert_eq!(kept.restore_among(&[fd]).unwrap(), 1);
        assert_eq!(identity(fd).unwrap(), eal_new, "the new file came back");
        // A number EAL no longer uses is forgotten, never put back.
        // SAFETY: this test's number.
        unsafe { libc::close(fd) };
        assert_eq!(kept.restore_among(&[]).unwrap(), 0);
        assert!(kept.saved.is_empty());
        assert_eq!(identity(fd).unwrap(), None);
        std::fs::remove_file(&path).unwrap();
    }
}
