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

/// A dpd that takes no connection (its control thread stuck, its backlog
/// full): dpctl gives up after `--reply-timeout` and says why (exit 2).
/// Before, its connect waited for good.
#[test]
fn a_dpd_that_takes_no_connection_is_given_up_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("control.sock");
    // A backlog of one: a connection or two, nobody accepting, fill it.
    let listener =
        socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None).unwrap();
    listener
        .bind(&socket2::SockAddr::unix(&path).unwrap())
        .unwrap();
    listener.listen(1).unwrap();
    let mut held = Vec::new();
    let full = (0..20).any(|_| {
        match control::api::Client::connect_within(&path, Duration::from_millis(500)) {
            Ok(c) => {
                held.push(c);
                false
            }
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
                true
            }
        }
    });
    assert!(full, "the backlog never filled");
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_dpctl"))
        .arg("--socket")
        .arg(&path)
        .args(["--reply-timeout", "1", "status"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("did not take the connection"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// Output its reader stops taking (`dpctl config show | head -1`):
/// dpctl ends quietly with 141, as a tool SIGPIPE ends. Before, it
/// reported a panic (and aborted, in release builds).
#[test]
fn output_cut_short_by_its_reader_ends_quietly() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("control.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(&conn).read_line(&mut line).unwrap();
        let text = "line\n".repeat(200_000);
        let reply = control::api::Reply::ok(control::api::Body::Config(text));
        let mut out = serde_json::to_vec(&reply).unwrap();
        out.push(b'\n');
        let _ = (&conn).write_all(&out);
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_dpctl"))
        .arg("--socket")
        .arg(&path)
        .args(["config", "show"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader is gone
    let out = child.wait_with_output().unwrap();
    server.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A file name that is not UTF-8 cannot go in a JSON request: dpctl says
/// so (exit 2). Before: "the request is 18446744073709551615 bytes".
#[test]
fn a_path_that_is_not_utf8_is_named_as_the_reason() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dpctl"))
        .arg("--socket")
        .arg(dir.path().join("none.sock"))
        .args(["config", "save"])
        .arg(std::ffi::OsStr::from_bytes(b"/tmp/\xff.toml"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("UTF-8"), "{err}");
    assert!(!err.contains("18446744073709551615"), "{err}");
}

/// `drain --wait` asks for the drain once, then watches `status`: an
/// `undrain` meanwhile ends the wait (exit 1, saying so), and is not
/// undone. Before, it sent `drain` every 200 ms, and each one began a new
/// drain once the node served again: the VIPs withdrawn again within
/// 200 ms of the undrain, for as long as the waiter ran.
#[test]
fn drain_wait_watches_and_an_undrain_ends_it() {
    use control::api::{Body, DrainState, Reply, Request, Status};
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("control.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        let mut lines = std::io::BufReader::new(&conn).lines();
        let mut asked = Vec::new();
        let state = |phase: &str| DrainState {
            open_connections: 3,
            phase: phase.into(),
            for_s: 0.5,
        };
        while let Some(Ok(line)) = lines.next() {
            let req: Request = serde_json::from_str(&line).unwrap();
            asked.push(req.clone());
            // The node: drained at the first question, undrained (by
            // another operator) before the second; a dpctl asking for the
            // drain again would start it again (and be told so here).
            let reply = match (req, asked.len()) {
                (Request::Drain, 1) => Reply::ok(Body::Drain(state("withdrawn"))),
                (Request::Drain, n) if n < 20 => Reply::ok(Body::Drain(state("withdrawn"))),
                (Request::Drain, _) => Reply::ok(Body::Drain(state("drained"))),
                (Request::Status, _) => {
                    let mut s: Status = serde_json::from_str(
                        r#"{"version":"0","dpdk":"-","pid":1,"uptime_s":1,"lcores":[1],"ports":[],"hugepages":[],"hugepages_in_use":false}"#,
                    )
                    .unwrap();
                    s.drain = Some(state("serving"));
                    Reply::ok(Body::Status(Box::new(s)))
                }
                (other, _) => Reply::error(format!("not here: {other:?}")),
            };
            let mut out = serde_json::to_vec(&reply).unwrap();
            out.push(b'\n');
            if (&conn).write_all(&out).is_err() {
                break;
            }
        }
        asked
    });
    let out = Command::new(env!("CARGO_BIN_EXE_dpctl"))
        .arg("--socket")
        .arg(&path)
        .args(["drain", "--wait"])
        .output()
        .unwrap();
    let asked = server.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let drains = asked.iter().filter(|r| **r == Request::Drain).count();
    assert_eq!(drains, 1, "the drain asked for once: {asked:?}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("undrained"), "{err}");
}
