//! Ports that connect to their peer (a memif client): started again while
//! their link is down. DPDK 22.11's memif client connects to its server
//! only in `rte_eth_dev_start`, and never again once the server has gone
//! (docs/architecture.md, "Ports"). Restarting a port swaps its burst
//! functions, so the engines pause their queues on it first.

use std::path::Path;
use std::time::{Duration, Instant};

use control::api::MemifClientStatus;
use control::config::MemifClient;

use super::Controller;
use crate::dpdk::{self, PortId};
use crate::snapshot::{FromEngine, ToEngine};

/// How long a link stays down before its port is started again.
const DOWN_FOR: Duration = Duration::from_secs(1);
/// How often a port whose server's socket file is absent looks again.
const LOOK_AGAIN: Duration = Duration::from_millis(100);
/// The longest wait between tries at a server that does not answer (a
/// new socket file is tried at once).
const MAX_BACKOFF: Duration = Duration::from_secs(8);
/// How often a port's link is looked at.
const CHECK: Duration = Duration::from_millis(50);

/// A port that connects to its peer, and where its connection stands.
#[derive(Debug)]
pub struct PeerPort {
    /// The port's index in the configuration (and the engines' ports).
    index: usize,
    name: String,
    id: PortId,
    client: MemifClient,
    /// `rte_eth_dev_start` succeeded last time it was called.
    started: bool,
    /// Since when the link has been down (`None`: up).
    down_since: Option<Instant>,
    /// No try before this.
    next_try: Instant,
    /// Tries since the link was last up.
    tries: u32,
    /// When the link was last looked at.
    checked: Option<Instant>,
    /// The server's socket file (device, inode) at the last try.
    tried_socket: Option<(u64, u64)>,
    /// Times the link came up.
    connections: u64,
    /// Why the last start failed.
    last_error: Option<String>,
}

impl PeerPort {
    /// Port `index` (`name`, DPDK port `id`), a memif client, started or
    /// not by [`dpdk::EthPort::start`].
    pub fn new(index: usize, name: &str, id: PortId, client: MemifClient, started: bool) -> Self {
        Self {
            index,
            name: name.to_string(),
            id,
            client,
            started,
            down_since: None,
            next_try: Instant::now(),
            tries: 0,
            checked: None,
            tried_socket: None,
            connections: 0,
            last_error: None,
        }
    }

    /// The port's index in the configuration.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Whether the port is started (its link can be up).
    pub fn started(&self) -> bool {
        self.started
    }

    /// Where its connection stands, for `dpctl status`.
    pub fn status(&self) -> MemifClientStatus {
        MemifClientStatus {
            socket: self.client.socket.clone(),
            zero_copy: self.client.zero_copy,
            connections: self.connections,
            tries: self.tries,
            last_error: self.last_error.clone(),
        }
    }

    /// Whether its link is to be looked at now.
    fn check_now(&mut self, now: Instant) -> bool {
        if self.checked.is_some_and(|t| now < t + CHECK) {
            return false;
        }
        self.checked = Some(now);
        true
    }

    /// The server's socket file, when it is there (device, inode); an
    /// abstract socket cannot be looked for: always "there".
    fn server_socket(&self) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        if self.client.abstract_socket {
            return Some((0, 0));
        }
        std::fs::metadata(Path::new(&self.client.socket))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    }

    /// What to do at `now` with the link `up`: true to restart the port.
    fn due(&mut self, now: Instant, up: bool) -> bool {
        if up {
            if self.down_since.is_some() || self.connections == 0 {
                self.connections += 1;
                self.last_error = None;
            }
            if self.tries > 0 {
                log::info!(
                    "port {}: connected to its memif server at {}",
                    self.name,
                    self.client.socket
                );
            }
            self.down_since = None;
            self.tries = 0;
            return false;
        }
        let since = *self.down_since.get_or_insert(now);
        let socket = self.server_socket();
        if socket.is_some() && socket != self.tried_socket {
            // A server (again): no backoff from tries at an earlier one.
            self.next_try = now;
            self.tries = self.tries.min(1);
        }
        if now < self.next_try || (self.started && now < since + DOWN_FOR) {
            return false;
        }
        if socket.is_none() {
            self.next_try = now + LOOK_AGAIN;
            return false;
        }
        self.tried_socket = socket;
        // 1 s, 2 s, 4 s … between tries at a server that does not answer.
        let backoff = DOWN_FOR * 2u32.saturating_pow(self.tries.min(3));
        self.next_try = now + backoff.min(MAX_BACKOFF);
        if self.tries == 0 {
            log::warn!(
                "port {}: link down; connecting to its memif server at {} (and again while it stays down)",
                self.name,
                self.client.socket
            );
        }
        self.tries += 1;
        true
    }
}

impl Controller {
    /// Restarts the ports that connect to their peer and whose link is
    /// down, at most once per [`DOWN_FOR`] each (called from the tick).
    pub(super) fn reconnect_peers(&mut self, now: Instant) {
        let Some(d) = self.daemon.as_mut() else {
            return;
        };
        // Stopping: the engines answer no more.
        if d.stop.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let mut due = Vec::new();
        for (i, p) in d.peers.iter_mut().enumerate() {
            if !p.check_now(now) {
                continue;
            }
            let up = p.started && dpdk::link_status(p.id).up;
            if !up && p.client.zero_copy {
                // Put EAL's memory files back as soon as the disconnection
                // closed them, before another file takes their numbers.
                if let Err(e) = d.memseg_fds.restore() {
                    log::debug!("port {}: {e}", p.name);
                }
            }
            if p.due(now, up) {
                due.push(i);
            }
        }
        for i in due {
            self.restart_peer(i);
        }
    }

    /// Pauses port `peers[i]` on every engine, restarts it, and resumes
    /// it where it started; a port left stopped stays paused.
    fn restart_peer(&mut self, i: usize) {
        let Some(p) = self.daemon.as_ref().and_then(|d| d.peers.get(i)) else {
            return;
        };
        let (index, id, was_started) = (p.index, p.id, p.started);
        if let Err(late) = self.pause_port(index, true) {
            log::warn!("port {index}: engine(s) {late} did not pause it; not restarted");
            // Those that did use a started port again (a late one answers
            // when it runs); a stopped one stays paused.
            if was_started {
                let _ = self.pause_port(index, false);
            }
            return;
        }
        let Some(d) = self.daemon.as_mut() else {
            return;
        };
        let Some(p) = d.peers.get_mut(i) else {
            return;
        };
        let memory = p.client.zero_copy.then_some(&mut d.memseg_fds);
        let started = dpdk::restart_port(id, was_started, memory);
        p.started = started.is_ok();
        match &started {
            Err(e) if e.op == "rte_eth_dev_start" => {
                log::debug!("port {}: not connected ({e})", p.name);
            }
            Err(e) => log::error!("port {}: not started again: {e}", p.name),
            Ok(()) => {}
        }
        p.last_error = started.as_ref().err().map(ToString::to_string);
        if started.is_ok() {
            if let Err(late) = self.pause_port(index, false) {
                log::error!("port {index}: engine(s) {late} did not resume it");
            }
        }
    }

    /// Tells every engine to pause (or resume) port `index` and waits
    /// for all of them; the engines that had not answered, as a list.
    fn pause_port(&self, index: usize, paused: bool) -> Result<(), String> {
        let deadline = Instant::now() + super::ENGINE_REPLY;
        let ask = self.next_ask();
        for l in &self.links {
            while l
                .to_engine
                .push(ToEngine::Pause {
                    port: index,
                    paused,
                    ask,
                })
                .is_err()
            {
                if Instant::now() > deadline {
                    return Err(l.engine.to_string());
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let late = self.await_all(|m| answers_pause(&m, index, paused, ask));
        if late.is_empty() {
            Ok(())
        } else {
            Err(late)
        }
    }
}

/// The engine `m` is the answer of, when it answers pause question `ask`
/// (port `index`, `paused`). An answer to an earlier pause (an engine that
/// answered it late) is no answer to this one.
fn answers_pause(m: &FromEngine, index: usize, paused: bool, ask: u64) -> Option<usize> {
    match *m {
        FromEngine::Paused {
            engine,
            port,
            paused: p,
            ask: a,
        } if port == index && p == paused && a == ask => Some(engine),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A late answer to an earlier pause of the same port, paused the
    /// same way, is not taken for this one's: before, pauses carried no
    /// number, and an engine stalled past two waits could have its old
    /// "paused" counted while it went on using the port being restarted.
    #[test]
    fn only_the_answer_to_this_pause_counts() {
        let paused = |ask| FromEngine::Paused {
            engine: 1,
            port: 0,
            paused: true,
            ask,
        };
        assert_eq!(answers_pause(&paused(8), 0, true, 8), Some(1));
        assert_eq!(
            answers_pause(&paused(5), 0, true, 8),
            None,
            "an earlier one"
        );
        assert_eq!(answers_pause(&paused(8), 1, true, 8), None, "another port");
        assert_eq!(answers_pause(&paused(8), 0, false, 8), None);
    }

    fn peer(socket: &str, abstract_socket: bool, started: bool) -> PeerPort {
        PeerPort::new(
            0,
            "p",
            PortId(0),
            MemifClient {
                socket: socket.into(),
                abstract_socket,
                zero_copy: true,
            },
            started,
        )
    }

    #[test]
    fn a_link_down_for_a_second_is_restarted_then_tried_with_backoff() {
        let t0 = Instant::now();
        let mut p = peer("/", false, true);
        assert!(!p.due(t0, true));
        // Down: not before a second (a connection being made is down too).
        assert!(!p.due(t0, false));
        assert!(!p.due(t0 + Duration::from_millis(999), false));
        let mut tries = vec![];
        let mut t = t0;
        while t < t0 + Duration::from_secs(40) {
            if p.due(t, false) {
                tries.push((t - t0).as_millis() / 100);
            }
            t += Duration::from_millis(100);
        }
        // 1 s after it went down, then 1, 2, 4, 8, 8 … seconds apart.
        assert_eq!(tries, [10, 20, 40, 80, 160, 240, 320]);
        // Up again: the next loss waits its second again.
        assert!(!p.due(t, true));
        assert!(!p.due(t, true));
        assert_eq!(p.status().connections, 2, "once at first, once now");
        assert_eq!(p.status().tries, 0);
        assert!(!p.due(t + Duration::from_secs(9), false));
        assert!(p.due(t + Duration::from_secs(10), false));
    }

    #[test]
    fn a_port_never_started_tries_at_once_when_its_server_socket_appears() {
        let dir = std::env::temp_dir().join(format!("tlsdp-reconnect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("memif.sock");
        let _ = std::fs::remove_file(&socket);
        let mut p = peer(socket.to_str().unwrap(), false, false);
        let t0 = Instant::now();
        assert!(!p.due(t0, false), "no socket file: no try");
        assert!(!p.due(t0 + LOOK_AGAIN, false));
        std::fs::write(&socket, b"").unwrap();
        assert!(
            p.due(t0 + LOOK_AGAIN * 2, false),
            "tried as soon as it is there"
        );
        // Tries at a server that does not answer back off …
        let t1 = t0 + LOOK_AGAIN * 2 + DOWN_FOR;
        assert!(p.due(t1, false));
        assert!(!p.due(t1 + Duration::from_millis(1500), false));
        // … but a new server's socket (another file) is tried at once.
        let next = dir.join("next.sock");
        std::fs::write(&next, b"").unwrap();
        std::fs::rename(&next, &socket).unwrap();
        assert!(p.due(t1 + Duration::from_millis(1600), false));
        // An abstract socket cannot be looked for: tried at once.
        let mut a = peer("m", true, false);
        assert!(a.due(Instant::now(), false));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
