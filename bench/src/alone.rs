//! One target on the DUT core at a time.
//!
//! The peers of one comparison share the DUT core (BENCH.md: "tlsdp /
//! nginx on the same core"), and dpbench measures them one after the
//! other. A kernel peer waiting for connections costs nothing, but tlsdp's
//! `dpd` polls its port even when idle (a run-to-completion loop that
//! sleeps only briefly), so while nginx is measured beside an idle `dpd`
//! the two share the core. Measured on the lab VM: nginx's P-256 CPS fell
//! from 2,641 to 1,952 conn/s and its DUT µs per connection rose from 534
//! to 599 (docs/bench.md, "Each peer alone on the DUT core").
//!
//! A target names such processes with `pause=PIDFILE[+PIDFILE]`: they are
//! stopped (`SIGSTOP`) while any other target is measured or the crypto
//! ceiling is, and continued (`SIGCONT`) when that ends. A process named
//! by the measured target itself is never stopped (`dpd` and `dpd-proxy`
//! are one process). If dpbench is interrupted meanwhile (SIGINT, SIGTERM,
//! SIGHUP), [`continue_on_signal`] continues them before it ends: a `dpd`
//! left stopped would not even answer `dpctl`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::target::Target;

/// How long a stopped process may take to show as stopped in /proc.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// Every process some [`Stopped`] holds (entered before it is stopped,
/// left after it is continued), for [`continue_on_signal`].
static HELD: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn held() -> MutexGuard<'static, Vec<u32>> {
    HELD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts a thread that, when dpbench gets SIGINT, SIGTERM or SIGHUP,
/// continues every process held stopped and then ends dpbench as that
/// signal would have.
///
/// # Errors
/// When the handlers or the thread cannot be set up.
pub fn continue_on_signal() -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("dpbench-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                continue_held();
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                std::process::exit(128 + sig);
            }
        })?;
    Ok(())
}

/// Continues every process held stopped (they stay in [`HELD`] until their
/// guards drop; a second `SIGCONT` does nothing).
pub fn continue_held() {
    for &pid in held().iter() {
        signal(pid, "-CONT");
    }
}

/// The processes each target wants stopped while the others are measured.
#[derive(Debug, Default)]
pub struct Pausable {
    targets: Vec<(String, Vec<PathBuf>)>,
}

impl Pausable {
    /// From the targets' `pause=` pidfiles.
    #[must_use]
    pub fn new(targets: &[Target]) -> Self {
        Self {
            targets: targets
                .iter()
                .filter(|t| !t.pause.is_empty())
                .map(|t| (t.name.clone(), t.pause.clone()))
                .collect(),
        }
    }

    /// Stops the `pause=` processes of every target other than `measured`
    /// (of all of them for `None`), except those `measured` names itself;
    /// they run again when the returned guard drops. A pidfile that cannot
    /// be read or a process that does not stop is reported on stderr and
    /// left as it is: the measurement goes on.
    pub fn alone(&self, measured: Option<&str>) -> Stopped {
        let own: Vec<u32> = self
            .targets
            .iter()
            .filter(|(name, _)| Some(name.as_str()) == measured)
            .flat_map(|(_, files)| files.iter().filter_map(|f| read_pid(f)))
            .collect();
        let mut stopped = Stopped { pids: Vec::new() };
        for (name, files) in &self.targets {
            if Some(name.as_str()) == measured {
                continue;
            }
            stopped.stop(name, files, &own);
        }
        stopped
    }

    /// Stops `measured`'s own `pause=` processes as well, while [`alone`]'s
    /// guard for it holds the others: for a crypto ceiling measured between
    /// its runs (`--ceiling-each`). They run again when the returned guard
    /// drops.
    ///
    /// [`alone`]: Pausable::alone
    pub fn own(&self, measured: &str) -> Stopped {
        let mut stopped = Stopped { pids: Vec::new() };
        for (name, files) in self.targets.iter().filter(|(n, _)| n == measured) {
            stopped.stop(name, files, &[]);
        }
        stopped
    }
}

/// Processes stopped for a measurement; continued on drop.
#[derive(Debug)]
#[must_use = "the processes run again as soon as this drops"]
pub struct Stopped {
    pids: Vec<u32>,
}

impl Stopped {
    /// Stops the processes in `files` (target `name`'s pidfiles) but those
    /// in `except` and those already stopped here.
    fn stop(&mut self, name: &str, files: &[PathBuf], except: &[u32]) {
        for file in files {
            let Some(pid) = read_pid(file) else {
                eprintln!(
                    "dpbench: pause={}: no process to stop ({name})",
                    file.display()
                );
                continue;
            };
            if except.contains(&pid) || self.pids.contains(&pid) {
                continue;
            }
            // Held before it stops, under the lock: an interrupt's
            // continue comes after the stop, never before.
            let mut held = held();
            held.push(pid);
            if signal(pid, "-STOP") && wait_state(pid, true) {
                self.pids.push(pid);
            } else {
                eprintln!("dpbench: pause: process {pid} ({name}) did not stop");
                signal(pid, "-CONT");
                held.pop();
            }
        }
    }

    /// The processes held stopped.
    #[must_use]
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for &pid in &self.pids {
            if !(signal(pid, "-CONT") && wait_state(pid, false)) {
                eprintln!("dpbench: pause: process {pid} did not continue");
            }
            release(pid);
        }
    }
}

/// Takes one entry of `pid` out of [`HELD`].
fn release(pid: u32) {
    let mut held = held();
    if let Some(i) = held.iter().position(|&p| p == pid) {
        held.swap_remove(i);
    }
}

/// The first pid in a pidfile, if that process exists.
fn read_pid(file: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(file).ok()?;
    let pid = text.split_whitespace().next()?.parse::<u32>().ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

/// Sends `sig` (`-STOP`, `-CONT`) with kill(1) (dpbench has no unsafe
/// code); true when it was delivered.
fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether /proc says every thread of `pid` is stopped (state `T`; a
/// stop reaches a process's threads one by one); `None` when it is gone.
#[must_use]
pub fn is_stopped(pid: u32) -> Option<bool> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut any = false;
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // a thread that just ended
        };
        let state = text
            .rfind(')')
            .and_then(|i| text.get(i + 2..))
            .and_then(|rest| rest.chars().next());
        if state != Some('T') {
            return Some(false);
        }
        any = true;
    }
    any.then_some(true)
}

/// Waits (bounded) until `pid` shows as stopped or running as wanted; a
/// process that is gone counts as neither.
fn wait_state(pid: u32, stopped: bool) -> bool {
    let start = Instant::now();
    loop {
        match is_stopped(pid) {
            Some(s) if s == stopped => return true,
            None => return false,
            Some(_) if start.elapsed() > STOP_WAIT => return false,
            Some(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process of our own (ended on drop) and a pidfile naming it.
    struct Child {
        child: std::process::Child,
        _dir: tempfile::TempDir,
        pidfile: PathBuf,
    }

    impl Child {
        fn start() -> Self {
            let child = Command::new("sleep").arg("60").spawn().unwrap();
            let dir = tempfile::tempdir().unwrap();
            let pidfile = dir.path().join("peer.pid");
            std::fs::write(&pidfile, format!("{}\n", child.id())).unwrap();
            Self {
                child,
                _dir: dir,
                pidfile,
            }
        }

        fn stopped(&self) -> bool {
            is_stopped(self.child.id()).unwrap()
        }
    }

    impl Drop for Child {
        fn drop(&mut self) {
            let _ = signal(self.child.id(), "-CONT");
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn target(spec: &str) -> Target {
        Target::parse(spec).unwrap()
    }

    #[test]
    fn a_polling_peer_is_stopped_while_another_is_measured() {
        let dpd = Child::start();
        let pause = dpd.pidfile.display();
        let targets = [
            target("name=nginx,host=10.0.0.1,p256=1"),
            target(&format!("name=dpd,host=10.0.0.2,p256=2,pause={pause}")),
            target(&format!(
                "name=dpd-proxy,host=10.0.0.2,p256=3,pause={pause}"
            )),
        ];
        let others = Pausable::new(&targets);
        assert!(!dpd.stopped());
        {
            let held = others.alone(Some("nginx"));
            assert!(dpd.stopped(), "dpd runs while nginx is measured");
            assert_eq!(held.pids(), [dpd.child.id()], "stopped once");
        }
        assert!(!dpd.stopped(), "dpd continues after nginx's runs");
        // Its own runs, and those of a target served by the same process.
        for name in ["dpd", "dpd-proxy"] {
            let held = others.alone(Some(name));
            assert!(held.pids().is_empty());
            assert!(!dpd.stopped(), "dpd stopped for {name}'s runs");
        }
        // The crypto ceiling: every pause= process stopped.
        let held = others.alone(None);
        assert!(dpd.stopped());
        drop(held);
        assert!(!dpd.stopped());
    }

    #[test]
    fn a_target_is_stopped_for_a_ceiling_between_its_runs_and_the_others_stay_stopped() {
        let (dpd, nginx) = (Child::start(), Child::start());
        let targets = [
            target(&format!(
                "name=nginx,host=10.0.0.1,p256=1,pause={}",
                nginx.pidfile.display()
            )),
            target(&format!(
                "name=dpd,host=10.0.0.2,p256=2,pause={}",
                dpd.pidfile.display()
            )),
        ];
        let others = Pausable::new(&targets);
        let runs = others.alone(Some("dpd"));
        assert!(nginx.stopped() && !dpd.stopped());
        {
            let ceiling = others.own("dpd");
            assert_eq!(ceiling.pids(), [dpd.child.id()]);
            assert!(dpd.stopped() && nginx.stopped());
        }
        // After the ceiling: dpd runs again, nginx stays stopped for the
        // rest of dpd's runs.
        assert!(!dpd.stopped() && nginx.stopped());
        drop(runs);
        assert!(!dpd.stopped() && !nginx.stopped());
        // A target without pause= has nothing to stop.
        assert!(Pausable::new(&targets[..1]).own("dpd").pids().is_empty());
    }

    #[test]
    fn a_pidfile_without_a_process_stops_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.pid");
        let stale = dir.path().join("stale.pid");
        // A pid far above any pid_max default: no such process.
        std::fs::write(&stale, "2147483600\n").unwrap();
        let targets = [
            target("name=nginx,host=10.0.0.1,p256=1"),
            target(&format!(
                "name=dpd,host=10.0.0.2,p256=2,pause={}+{}",
                missing.display(),
                stale.display()
            )),
        ];
        let held = Pausable::new(&targets).alone(Some("nginx"));
        assert!(held.pids().is_empty());
    }
}
