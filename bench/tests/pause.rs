//! A target's `pause=` processes are stopped while another target is
//! measured, and an interrupted dpbench continues them before it ends. No
//! network or root needed: the targets are closed local ports.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bench::alone::is_stopped;

/// Waits (bounded) for `cond`; false if it never held.
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// Ends a child of this test (continued first, in case it is stopped).
fn end(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-CONT", &child.id().to_string()])
        .stderr(Stdio::null())
        .status();
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn an_interrupted_run_continues_the_processes_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    // Stands in for dpd: a process of ours whose state /proc shows.
    let mut peer = Command::new("sleep").arg("120").spawn().unwrap();
    let pidfile = dir.path().join("dpd.pid");
    std::fs::write(&pidfile, format!("{}\n", peer.id())).unwrap();
    // The first target is measured first, for 60 s: a closed local port
    // (its connections are refused; the run goes on).
    let mut dpbench = Command::new(env!("CARGO_BIN_EXE_dpbench"))
        .args([
            "test",
            "l4cps",
            "--target",
            "name=nginx,host=127.0.0.1,http=9,core=0",
            "--target",
            &format!(
                "name=dpd,host=127.0.0.1,http=9,core=0,pause={}",
                pidfile.display()
            ),
            "--cores",
            "0",
            "--ramp-up",
            "0",
            "--sustain",
            "60",
            "--ramp-down",
            "0",
            "--repeat",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stopped = eventually(Duration::from_secs(10), || {
        is_stopped(peer.id()) == Some(true)
    });
    let still_running = dpbench.try_wait().unwrap().is_none();
    if !(stopped && still_running) {
        end(&mut dpbench);
        end(&mut peer);
        panic!("the peer was not stopped while the other target ran (stopped {stopped}, dpbench running {still_running})");
    }
    Command::new("kill")
        .args(["-INT", &dpbench.id().to_string()])
        .status()
        .unwrap();
    let exited = eventually(Duration::from_secs(10), || {
        dpbench.try_wait().unwrap().is_some()
    });
    let continued = is_stopped(peer.id()) == Some(false);
    let status = dpbench.try_wait().unwrap();
    end(&mut dpbench);
    end(&mut peer);
    assert!(exited, "dpbench did not end on SIGINT");
    assert_eq!(
        status.and_then(|s| s.signal()),
        Some(2),
        "dpbench ends as SIGINT would"
    );
    assert!(continued, "the peer was left stopped");
}
