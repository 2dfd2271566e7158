//! The `dpctl` binary against sockets that misbehave: what an operator
//! reads when dpd does not answer.

use std::os::unix::net::UnixListener;
use std::process::Command;
use std::time::{Duration, Instant};

/// dpd took the request and said nothing (busy, or an engine stalled):
/// dpctl says so, that the request may still apply, and exits 3, not with
/// "is dpd running?" (which sent operators to retry changes that had
/// gone through).
#[test]
fn a_request_with_no_reply_in_time_says_it_may_still_apply() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("control.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let held = std::thread::spawn(move || {
        // Accepts and answers nothing: holds the connection open until
        // dpctl has given up.
        let (conn, _) = listener.accept().unwrap();
        let _ = finished.recv();
        drop(conn);
    });
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_dpctl"))
        .args(["--socket"])
        .arg(&path)
        .args(["--reply-timeout", "1", "vip", "disable", "web"])
        .output()
        .unwrap();
    let waited = start.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("no reply from dpd"), "{err}");
    assert!(err.contains("may still apply"), "{err}");
    assert!(!err.contains("is dpd running"), "{err}");
    assert!(
        waited < Duration::from_secs(3),
        "gave up at --reply-timeout: {waited:?}"
    );
    done.send(()).unwrap();
    held.join().unwrap();
}

/// Nothing listens at the socket: that is what dpctl says (exit 2).
#[test]
fn no_dpd_at_the_socket_is_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dpctl"))
        .arg("--socket")
        .arg(dir.path().join("none.sock"))
        .arg("status")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is dpd running?"), "{err}");
}
