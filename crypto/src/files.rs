//! The files an operator names (certificate chains, private keys, ticket
//! keys), read so that a wrong name cannot hang or exhaust the control
//! thread: regular files only (a FIFO, a device such as `/dev/zero` or a
//! directory is refused at once, never read), of bounded size; and whether
//! a secret is readable by anyone but its owner.

use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Largest certificate chain or private key file read (a chain of a dozen
/// certificates is ~20 KiB).
pub const MAX_PEM_FILE: u64 = 1 << 20;
/// Largest ticket key file read.
pub const MAX_TICKET_KEY_FILE: u64 = 64 * 1024;

/// A file's bytes and its permission bits.
#[derive(Debug)]
pub struct FileBytes {
    pub bytes: Vec<u8>,
    pub mode: u32,
}

/// Reads `path` whole if it is a regular file of at most `max` bytes.
///
/// # Errors
/// The open or read error, or an error saying what the file is instead
/// (`InvalidInput`: "not a regular file", "larger than N bytes").
pub fn read_capped(path: &Path, max: u64) -> io::Result<FileBytes> {
    // Non-blocking: opening a FIFO for reading would otherwise wait for a
    // writer. Regular files ignore the flag.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", kind(&meta)),
        ));
    }
    if meta.len() > max {
        return Err(too_large(max));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // It may grow while read: never past the cap.
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large(max));
    }
    Ok(FileBytes {
        bytes,
        mode: meta.permissions().mode() & 0o7777,
    })
}

fn too_large(max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("larger than {max} bytes"),
    )
}

fn kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// Whether a secret file with permission bits `mode` can be read (or
/// written) by its group or others.
pub fn exposed(mode: u32) -> bool {
    mode & 0o077 != 0
}

/// The permission bits of the file at `path` (following links), for a
/// secret's check before it is used.
///
/// # Errors
/// The `stat` error.
pub fn mode_of(path: &Path) -> io::Result<u32> {
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_directories_are_refused_without_reading() {
        for (path, what) in [("/dev/zero", "character device"), ("/tmp", "directory")] {
            let e = read_capped(Path::new(path), MAX_PEM_FILE).unwrap_err();
            assert!(e.to_string().contains(what), "{path}: {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let ok = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(ok.success());
        // No writer: a blocking open would never return.
        let e = read_capped(&fifo, MAX_PEM_FILE).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
    }

    #[test]
    fn files_over_the_cap_are_refused_and_modes_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.pem");
        std::fs::write(&big, vec![b'a'; 2000]).unwrap();
        let e = read_capped(&big, 1000).unwrap_err();
        assert!(e.to_string().contains("larger than 1000 bytes"), "{e}");
        std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o640)).unwrap();
        let r = read_capped(&big, 4000).unwrap();
        assert_eq!((r.bytes.len(), r.mode), (2000, 0o640));
        assert!(exposed(r.mode));
        assert!(!exposed(0o600) && !exposed(0o400));
        assert_eq!(mode_of(&big).unwrap(), 0o640);
    }
}
