//! DPDK's own log lines (EAL, drivers, telemetry) through the `log` crate:
//! target `dpdk`, at the level DPDK gave each message, so dpd's whole
//! output has one format (`[log] format`, text or JSON) and one filter
//! (`[log] level`).

use std::ffi::{c_char, c_void};

use super::DpdkError;

/// Sends DPDK's log stream to the `log` crate from now on. Call it before
/// [`super::Eal::init`] so the EAL's start-up lines go there too.
///
/// # Errors
/// When the stream cannot be made or DPDK refuses it.
pub fn route_to_log() -> Result<(), DpdkError> {
    let io = CookieIo {
        read: None,
        write: Some(write),
        seek: None,
        close: None,
    };
    // SAFETY: a write-only stream without a cookie; `write` is a plain
    // function that lives as long as the process.
    let stream = unsafe { fopencookie(std::ptr::null_mut(), c"w".as_ptr(), io) };
    if stream.is_null() {
        return Err(DpdkError::new(
            "fopencookie",
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOMEM),
        ));
    }
    // SAFETY: `stream` is open and never closed: DPDK keeps it for the life
    // of the process. The FILE types of libc and of the bindings are the
    // same C type.
    let rc = unsafe { dpdk_sys::rte_openlog_stream(stream.cast()) };
    if rc != 0 {
        return Err(DpdkError::new("rte_openlog_stream", rc));
    }
    Ok(())
}

/// glibc's `cookie_io_functions_t` (the `libc` crate does not have it):
/// the stream's functions, only `write` used here.
#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn()>,
    write: Option<extern "C" fn(*mut c_void, *const c_char, usize) -> isize>,
    seek: Option<unsafe extern "C" fn()>,
    close: Option<unsafe extern "C" fn()>,
}

extern "C" {
    /// glibc (`_GNU_SOURCE`): a `FILE` whose output goes to `io.write`.
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut libc::FILE;
}

/// The stream's write function: DPDK flushes after each message, so a call
/// holds whole lines of one message, whose level is this thread's current
/// one.
extern "C" fn write(_cookie: *mut c_void, buf: *const c_char, size: usize) -> isize {
    if buf.is_null() || size == 0 {
        return 0;
    }
    // SAFETY: libc passes `size` readable bytes at `buf`.
    let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), size) };
    // SAFETY: reads the calling thread's current message level; no
    // preconditions.
    let level = level_of(unsafe { dpdk_sys::rte_log_cur_msg_loglevel() });
    for line in String::from_utf8_lossy(bytes).lines() {
        let line = line.trim_end();
        if !line.is_empty() {
            log::log!(target: "dpdk", level, "{line}");
        }
    }
    isize::try_from(size).unwrap_or(isize::MAX)
}

/// DPDK's levels (`RTE_LOG_EMERG` 1 ... `RTE_LOG_DEBUG` 8) as `log`'s.
fn level_of(rte_level: i32) -> log::Level {
    match rte_level {
        ..=4 => log::Level::Error,
        5 => log::Level::Warn,
        6 | 7 => log::Level::Info,
        _ => log::Level::Debug,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_map_onto_logs() {
        assert_eq!(level_of(1), log::Level::Error); // EMERG
        assert_eq!(level_of(4), log::Level::Error); // ERR
        assert_eq!(level_of(5), log::Level::Warn); // WARNING
        assert_eq!(level_of(6), log::Level::Info); // NOTICE
        assert_eq!(level_of(7), log::Level::Info); // INFO
        assert_eq!(level_of(8), log::Level::Debug); // DEBUG
    }
}
