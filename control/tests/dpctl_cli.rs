//! The `dpctl` binary against sockets that misbehave: what an operator
//! reads when dpd does not answer.

use std::os::unix::net::UnixListener;
use std::process::Command;
use std::time::{Duration, Instant};

/// Runs dpctl with `args` against a socket that accepts and never
/// answers (dpd busy, or an engine stalled), `--reply-timeout 1`: its exit
/// code, stderr, and how long it took.
fn against_a_silent_dpd(args: &[&str]) -> (Option<i32>, String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("control.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let held = std::thread::spawn(move || {
        // Holds the connection open, reading nothing back, until dpctl
        // has given up.
        let (conn, _) = listener.accept().unwrap();
        let _ = finished.recv();
        drop(conn);
    });
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_dpctl"))
        .arg("--socket")
        .arg(&path)
        .args(["--reply-timeout", "1"])
        .args(args)
        .output()
        .unwrap();
    let waited = start.elapsed();
    done.send(()).unwrap();
    held.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), err, waited)
}

/// dpd took the request and said nothing: dpctl says so, that the
/// request may still apply, and exits 3, not with "is dpd running?"
/// (which sent operators to retry changes that had gone through). The
/// same for `drain --wait` and `stats --watch`.
#[test]
fn a_request_with_no_reply_in_time_says_it_may_still_apply() {
    for args in [
        &["vip", "disable", "web"][..],
        &["drain", "--wait"],
        &["stats", "--watch", "1"],
    ] {
        let (code, err, waited) = against_a_silent_dpd(args);
        assert_eq!(code, Some(3), "{args:?}: {err}");
        assert!(
            err.contains("no reply") || err.contains("no stats"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("is dpd running"), "{args:?}: {err}");
        assert!(
            waited < Duration::from_secs(3),
            "{args:?}: gave up at the timeout: {waited:?}"
        );
    }
    let (_, err, _) = against_a_silent_dpd(&["vip", "disable", "web"]);
    assert!(err.contains("may still apply"), "{err}");
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
