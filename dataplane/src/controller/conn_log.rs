//! The connection log's writer (docs/architecture.md, "The connection
//! log"): a thread of its own takes the records the engines queue
//! ([`crate::app::conn_log`]) every [`DRAIN_EVERY`], names their VIPs and
//! appends one JSON line each to the file of `[log] connections`, so
//! neither the engines nor the control socket ever wait on the disk. The
//! control thread opens the file (a reload that cannot open it is refused
//! with nothing changed) and hands it over.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Mutex;
use std::thread::JoinHandle;

use super::*;
use crate::app::conn_log::{ConnLogQueues, LineClock};

/// How often the writer takes the engines' records.
pub const DRAIN_EVERY: Duration = Duration::from_millis(20);

/// How long dpd's stop waits for the writer's last lines: a FIFO whose
/// reader stopped reading would otherwise hold the stop forever.
pub const STOP_WAIT: Duration = Duration::from_secs(5);

/// What the control thread tells the writer.
#[derive(Debug)]
enum Command {
    /// Write to this file from now on (the one before is flushed first).
    Write(PathBuf, File),
    /// Stop writing (after what is queued).
    Off,
}

/// What the writer did, for `status` and the metrics.
#[derive(Debug, Default)]
struct WriterState {
    written: AtomicU64,
    write_failed: AtomicU64,
    error: Mutex<Option<String>>,
}

/// The connection log: the engines' queues, the writer thread, and the
/// file it writes now.
#[derive(Debug)]
pub(super) struct ConnLog {
    queues: Arc<ConnLogQueues>,
    commands: Option<mpsc::Sender<Command>>,
    thread: Option<JoinHandle<()>>,
    /// Closed by the writer thread as it ends.
    ended: mpsc::Receiver<()>,
    /// How long `drop` waits for it ([`STOP_WAIT`]).
    stop_wait: Duration,
    state: Arc<WriterState>,
    file: Option<PathBuf>,
}

/// Opens `path` to append to, made with mode 0640 when new. Never waits:
/// the control thread calls it, and opening a FIFO for writing waits for a
/// reader, so a FIFO with no reader is refused. Anything but a regular file
/// then has `O_NONBLOCK` cleared on the descriptor opened, so the writer
/// thread's writes wait as they would on a file rather than fail (a second
/// `open` would wait for good on a FIFO whose reader left meanwhile).
pub(super) fn open(path: &Path) -> Result<File, ConfigError> {
    let refuse = |e: std::io::Error| {
        let reason = match e.raw_os_error() {
            Some(libc::ENXIO) => "a FIFO with no reader (start its reader first)".to_string(),
            _ => e.to_string(),
        };
        ConfigError::new("log.connections", path.display(), reason)
    };
    let mut options = OpenOptions::new();
    options.append(true).create(true).mode(0o640);
    let first = options
        .clone()
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(refuse)?;
    if first.metadata().map_err(refuse)?.is_file() {
        // O_NONBLOCK means nothing to a regular file.
        return Ok(first);
    }
    // `set_nonblocking` is `ioctl(FIONBIO)`, which the kernel applies to
    // any descriptor (fs/ioctl.c): the one safe way std offers to clear
    // the flag on this one.
    let fd = std::os::fd::OwnedFd::from(first);
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(false).map_err(refuse)?;
    Ok(File::from(std::os::fd::OwnedFd::from(stream)))
}

impl ConnLog {
    /// Queues for `engines` engines and the writer thread, naming VIPs by
    /// `names`, counting into `config_state`.
    pub(super) fn start(
        engines: usize,
        names: SlotNames,
        config_state: SharedConfigState,
    ) -> std::io::Result<Self> {
        let queues = Arc::new(ConnLogQueues::new(engines));
        let state = Arc::new(WriterState::default());
        let (tx, rx) = mpsc::channel();
        let (ends, ended) = mpsc::channel::<()>();
        let (q, st) = (queues.clone(), state.clone());
        let thread = std::thread::Builder::new()
            .name("conn-log".into())
            .spawn(move || {
                write_loop(&rx, &q, &names, &st, &config_state);
                drop(ends);
            })?;
        Ok(Self {
            queues,
            commands: Some(tx),
            thread: Some(thread),
            ended,
            stop_wait: STOP_WAIT,
            state,
            file: None,
        })
    }

    /// The queues engines push into (for snapshots while the log is on).
    pub(super) fn queues(&self) -> Arc<ConnLogQueues> {
        self.queues.clone()
    }

    /// The file written now.
    pub(super) fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Writes to `file` (opened at `path`) from now on.
    pub(super) fn write_to(&mut self, path: PathBuf, file: File) {
        self.file = Some(path.clone());
        self.send(Command::Write(path, file));
    }

    /// Stops writing, once what the engines queued is written.
    pub(super) fn off(&mut self) {
        if self.file.take().is_some() {
            self.send(Command::Off);
        }
    }

    fn send(&self, c: Command) {
        if let Some(tx) = &self.commands {
            if tx.send(c).is_err() {
                log::error!("connection log: its writer thread is gone");
            }
        }
    }

    /// `status`'s view, given the engines' count of records dropped and
    /// the ends logged (`None`: all).
    pub(super) fn status(
        &self,
        dropped: u64,
        ends: Option<Vec<control::config::ConnEnd>>,
    ) -> Option<control::api::ConnLogStatus> {
        Some(control::api::ConnLogStatus {
            file: self.file.clone()?,
            written: self.state.written.load(Ordering::Relaxed),
            dropped,
            write_failed: self.state.write_failed.load(Ordering::Relaxed),
            error: self.state.error.lock().ok().and_then(|e| e.clone()),
            ends,
        })
    }
}

impl Drop for ConnLog {
    /// The writer writes what is queued and ends, within
    /// [`STOP_WAIT`]; a writer still blocked then (a FIFO nobody reads)
    /// is left behind, its lines lost, and said so.
    fn drop(&mut self) {
        self.commands = None;
        let Some(t) = self.thread.take() else {
            return;
        };
        match self.ended.recv_timeout(self.stop_wait) {
            Err(RecvTimeoutError::Timeout) => {
                let file = self.file.as_deref().unwrap_or(Path::new("?"));
                log::warn!(
                    "connection log: still writing to {} after {:?}: its last lines are lost",
                    file.display(),
                    self.stop_wait
                );
            }
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                let _ = t.join();
            }
        }
    }
}

/// The writer thread: commands, then every engine's records, every
/// [`DRAIN_EVERY`], until the control thread lets go of it.
fn write_loop(
    commands: &mpsc::Receiver<Command>,
    queues: &ConnLogQueues,
    names: &SlotNames,
    state: &WriterState,
    config_state: &SharedConfigState,
) {
    let mut out: Option<(PathBuf, File)> = None;
    let mut lines = Vec::with_capacity(256 * 1024);
    let mut clock = LineClock::default();
    loop {
        let command = commands.recv_timeout(DRAIN_EVERY);
        // Records queued before a switch go to the file they were meant
        // for. With no file (not on yet, or just turned off) they wait in
        // the queues for the next one: a record is lost only to a full
        // queue (counted) or a failed write (counted).
        if let Some(out) = out.as_mut() {
            write_queued(queues, names, out, &mut lines, &mut clock, state);
        }
        match command {
            Ok(Command::Write(path, file)) => out = Some((path, file)),
            Ok(Command::Off) => out = None,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if let Ok(mut s) = config_state.write() {
            s.conn_log_written = state.written.load(Ordering::Relaxed);
            s.conn_log_write_failed = state.write_failed.load(Ordering::Relaxed);
        }
    }
}

/// Writes every record queued now to `out`, in one write (`lines` is
/// its reused buffer).
fn write_queued(
    queues: &ConnLogQueues,
    names: &SlotNames,
    out: &mut (PathBuf, File),
    lines: &mut Vec<u8>,
    clock: &mut LineClock,
    state: &WriterState,
) {
    let names = names.read().map(|n| n.clone()).unwrap_or_default();
    let mut records = 0;
    lines.clear();
    queues.drain(|r| {
        let vip = names.get(usize::from(r.vip)).map_or("", String::as_str);
        r.write_json_line(vip, clock, lines);
        records += 1;
    });
    let (path, file) = out;
    if records == 0 {
        return;
    }
    // Written before the error's lock is taken: a write blocked on a
    // reader that stopped reading must not hold `status` (the control
    // thread) with it.
    let written = file.write_all(lines);
    let Ok(mut last) = state.error.lock() else {
        return;
    };
    match written {
        Ok(()) => {
            state.written.fetch_add(records, Ordering::Relaxed);
            if last.take().is_some() {
                log::info!("connection log: writing {} again", path.display());
            }
        }
        Err(e) => {
            // Part of the lines may be in the file: all are counted lost.
            state.write_failed.fetch_add(records, Ordering::Relaxed);
            let e = format!("{}: {e}", path.display());
            if last.as_deref() != Some(e.as_str()) {
                log::warn!("connection log: cannot write {e}; records are lost until it can");
            }
            *last = Some(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;

    fn mkfifo(path: &Path) {
        let made = std::process::Command::new("mkfifo").arg(path).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", path.display());
    }

    /// Runs `open` on its own thread: a call that waits fails the test
    /// instead of hanging it.
    fn open_within(path: &Path, limit: Duration) -> Result<File, ConfigError> {
        let (tx, rx) = mpsc::channel();
        let path = path.to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(open(&path));
        });
        match rx.recv_timeout(limit) {
            Ok(opened) => opened,
            Err(_) => panic!("open() still waiting after {limit:?}"),
        }
    }

    #[test]
    fn a_fifo_without_a_reader_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("conn.fifo");
        mkfifo(&fifo);
        let e = open_within(&fifo, Duration::from_secs(10)).unwrap_err();
        assert_eq!(e.field, "log.connections");
        assert!(e.reason.contains("no reader"), "{e}");
    }

    #[test]
    fn a_fifo_with_a_reader_is_written_and_a_file_is_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("conn.fifo");
        mkfifo(&fifo);
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        let mut reader = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let mut writer = open_within(&fifo, Duration::from_secs(10)).unwrap();
        // Opened once, its O_NONBLOCK (0o4000) cleared: the writer's writes
        // wait as on a file.
        let fd = std::os::fd::AsRawFd::as_raw_fd(&writer);
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
            .unwrap();
        assert_eq!(flags & 0o4000, 0, "blocking: {info}");
        writer.write_all(b"{\"end\":\"closed\"}\n").unwrap();
        let mut got = [0u8; 64];
        let n = reader.read(&mut got).unwrap();
        assert_eq!(&got[..n], b"{\"end\":\"closed\"}\n");

        let file = dir.path().join("conn.log");
        std::fs::write(&file, "old\n").unwrap();
        open_within(&file, Duration::from_secs(10))
            .unwrap()
            .write_all(b"new\n")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "old\nnew\n");
    }

    /// A record of a plain connection from `port`.
    fn record(port: u16) -> crate::app::conn_log::ConnRecord {
        crate::app::conn_log::ConnRecord {
            unix_ns: 1_796_612_400_000_000_000,
            duration: Duration::from_millis(3),
            engine: 0,
            vip: 0,
            local: "10.77.0.1:80".parse().unwrap(),
            client: std::net::SocketAddr::from(([10, 77, 0, 2], port)),
            end: crate::app::conn_log::End::Closed,
            role: "http",
            requests: Some(1),
            bytes_in: 80,
            bytes_out: 1_000,
            bytes_unacked: 0,
            tls: None,
            backend: None,
            to_backend: 0,
        }
    }

    /// Records engines queued before the writer had its first file (the
    /// log just turned on: engines apply the snapshot as the control
    /// thread hands the writer the file) go into that file, not away.
    #[test]
    fn records_queued_before_the_writer_has_a_file_are_written_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conn.log");
        let names: SlotNames = Arc::new(std::sync::RwLock::new(vec!["web".into()]));
        let mut log = ConnLog::start(1, names, SharedConfigState::default()).unwrap();
        let queues = log.queues();
        for port in 0..10 {
            assert!(queues.of(0).unwrap().push(record(port)).is_ok());
        }
        // More than a writer's round later, with no file yet: still queued.
        std::thread::sleep(DRAIN_EVERY * 3);
        assert_eq!(queues.of(0).unwrap().len(), 10);
        log.write_to(path.clone(), open(&path).unwrap());
        drop(log); // the writer writes what is queued, then ends
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 10, "{text}");
        assert!(
            text.lines().all(|l| l.contains("\"vip\":\"web\"")),
            "{text}"
        );
    }

    #[test]
    fn status_answers_and_a_stop_waits_no_longer_than_its_bound_while_a_reader_stopped_reading() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("conn.fifo");
        mkfifo(&fifo);
        // A reader that never reads: the pipe (64 KiB) fills.
        let reader = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let names: SlotNames = Arc::new(std::sync::RwLock::new(vec!["web".into()]));
        let mut log = ConnLog::start(1, names, SharedConfigState::default()).unwrap();
        log.stop_wait = Duration::from_millis(300);
        log.write_to(fifo.clone(), open(&fifo).unwrap());
        let queues = log.queues();
        let queue = queues.of(0).unwrap();
        for port in 0..4_000 {
            assert!(queue.push(record(port)).is_ok());
        }
        // The writer took them all and is blocked writing them.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !queue.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(queue.is_empty(), "the writer took the records");
        // `status` (the control thread's) answers meanwhile. Before, the
        // writer held the lock of its last error across the write.
        let (tx, rx) = mpsc::channel();
        let (status_tx, status_rx) = mpsc::channel();
        let t0 = std::time::Instant::now();
        std::thread::spawn(move || {
            let _ = status_tx.send(log.status(0, None).map(|s| s.written));
            drop(log);
            let _ = tx.send(());
        });
        let status = status_rx.recv_timeout(Duration::from_secs(5));
        assert_eq!(status, Ok(Some(0)), "status while the writer is blocked");
        let stopped = rx.recv_timeout(Duration::from_secs(10));
        assert!(stopped.is_ok(), "the stop still waits after 10 s");
        assert!(
            t0.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t0.elapsed()
        );
        // The writer left behind ends once the pipe breaks.
        drop(reader);
    }
}
