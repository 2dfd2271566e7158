//! `dpctl capture`: engines copy a port's frames while a capture runs;
//! a thread of its own gathers them and writes the pcap file, so the
//! control socket goes on answering meanwhile.

use super::*;

impl Controller {
    /// Captures up to `count` frames of port `port` on every engine into a
    /// pcap file, within `timeout_ms`. The frames are gathered and written
    /// on a thread of their own: the reply comes when the file is written,
    /// and other requests are answered meanwhile. One capture at a time.
    pub(super) fn capture(&self, port: &str, count: u32, timeout_ms: u32, file: &Path) -> Answer {
        let Some(index) = self.cfg.ports.iter().position(|p| p.name == port) else {
            let names: Vec<&str> = self.cfg.ports.iter().map(|p| p.name.as_str()).collect();
            return Reply::error(format!(
                "no port is named {port:?} (ports: {})",
                names.join(", ")
            ))
            .into();
        };
        if !(1..=100_000).contains(&count) {
            return Reply::error("count must be 1 to 100000").into();
        }
        if !(1..=60_000).contains(&timeout_ms) {
            return Reply::error(format!(
                "the capture's timeout must be 1 ms to 60 s (dpctl capture --timeout 1 to 60), not {timeout_ms} ms"
            ))
            .into();
        }
        if !file.is_absolute() {
            return Reply::error("the file must be an absolute path").into();
        }
        // Known now rather than after the capture's whole time: its
        // folder, a folder where the file would go, a name too long.
        match file.parent().map(std::fs::metadata) {
            Some(Ok(m)) if m.is_dir() => {}
            _ => {
                return Reply::error(format!(
                    "cannot write {}: its folder does not exist",
                    file.display()
                ))
                .into()
            }
        }
        // A typo must not replace a configuration or a key: an existing
        // file is replaced only when it is a capture already.
        if let Some(why) = not_a_capture(file) {
            return Reply::error(format!(
                "{} exists and {why}: remove it or name another file",
                file.display()
            ))
            .into();
        }
        if let Err(e) = crate::files::check_writable(file) {
            return Reply::error(format!("cannot write {}: {e}", file.display())).into();
        }
        if self.capturing.swap(true, Ordering::AcqRel) {
            return Reply::error("a capture is already running: try again when it ends").into();
        }
        let capture = Capture::new(count);
        for l in &self.links {
            let msg = ToEngine::Capture {
                port: index,
                capture: capture.clone(),
            };
            if l.to_engine.push(msg).is_err() {
                capture.stop();
                self.capturing.store(false, Ordering::Release);
                return Reply::error(format!("engine {}'s ring is full", l.engine)).into();
            }
        }
        let (tx, rx) = mpsc::channel();
        let (capturing, file) = (self.capturing.clone(), file.to_path_buf());
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        let spawned = std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || {
                let reply = gather_and_write(&capture, count, deadline, &file);
                capturing.store(false, Ordering::Release);
                let _ = tx.send(reply);
            });
        if let Err(e) = spawned {
            self.capturing.store(false, Ordering::Release);
            return Reply::error(format!("cannot start the capture thread: {e}")).into();
        }
        Answer::Later(rx)
    }
}

/// Why an existing `file` may not be replaced by a capture (not a pcap
/// file by its magic number, or not a file); `None` when it may, or is
/// not there.
fn not_a_capture(file: &Path) -> Option<&'static str> {
    use std::io::Read;
    let meta = std::fs::symlink_metadata(file).ok()?;
    if meta.is_dir() {
        return None; // said by the writability check
    }
    if !meta.is_file() {
        return Some("is not a file");
    }
    let mut magic = [0u8; 4];
    let read = std::fs::File::open(file).and_then(|mut f| f.read_exact(&mut magic));
    // pcap's magic numbers, either byte order, micro- or nanoseconds.
    let pcap = [0xa1b2_c3d4u32, 0xa1b2_3c4d]
        .iter()
        .any(|m| magic == m.to_le_bytes() || magic == m.to_be_bytes());
    match read {
        Ok(()) if pcap => None,
        Ok(()) => Some("is not a pcap file"),
        // Empty or shorter than a header: nothing is lost.
        Err(_) if meta.len() < 4 => None,
        Err(_) => Some("cannot be read"),
    }
}

/// Takes a running capture's frames until `count` or `deadline`, stops it
/// and writes the pcap file.
fn gather_and_write(capture: &Capture, count: u32, deadline: Instant, file: &Path) -> Reply {
    let mut frames = Vec::with_capacity(count as usize);
    while frames.len() < count as usize && Instant::now() < deadline {
        match capture.frames.pop() {
            Some(f) => frames.push(f),
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    capture.stop();
    // Engines see the stop at their next tick: what they copied before.
    std::thread::sleep(Duration::from_millis(5));
    while let Some(f) = capture.frames.pop() {
        frames.push(f);
    }
    frames.sort_by_key(|f| f.unix_ns);
    frames.truncate(count as usize);
    match write_pcap(file, &frames) {
        Ok(()) => Reply::ok(Body::Captured(Captured {
            file: file.to_path_buf(),
            packets: frames.len() as u32,
        })),
        Err(e) => Reply::error(format!("cannot write {}: {e}", file.display())),
    }
}
