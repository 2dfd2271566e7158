//! The control thread and two real engines on their rings, as `dpd` runs
//! them: for tests of run-time changes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use control::api::{Answer, Reply};
use control::config::Config;
use dataplane::controller::Controller;
use dataplane::dpdk::TscClock;
use dataplane::engine::{Engine, EngineConfig};
use dataplane::net::InterfaceConfig;
use dataplane::port::{link, MemPort};
use dataplane::snapshot::{ControlLink, Snapshot};
use dataplane::stats::SharedCounters;

use super::host::{DUT_IP, DUT_MAC, HOST_MAC};

/// dpd's configuration for [`started`]: two cores, one port, a plain VIP
/// (`web`) last, so a test may add to its table.
pub const CONFIG: &str = r#"
[eal]
lcores = [1, 2]
args = ["--in-memory"]
[[port]]
name = "p0"
device = "net_ring0"
address = "10.78.0.1/24"
[[vip]]
name = "web"
listen = "10.78.0.1:80"
respond = "builtin"
"#;

/// Engine `index` of dpd's, on its control ring.
pub fn engine(control: &ControlLink, shared: Arc<SharedCounters>, index: usize) -> Engine<MemPort> {
    let (dut, _host) = link(DUT_MAC, HOST_MAC, 64, 64);
    let cfg = EngineConfig {
        index,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(cfg, shared);
    e.add_port(
        dut,
        InterfaceConfig {
            mac: DUT_MAC,
            addr: DUT_IP,
            prefix_len: 24,
            gateway: None,
        },
    );
    e.set_control(control.clone());
    e
}

/// The control thread started on `cfg` with its two engines (0 and 1),
/// both on the first configuration.
pub fn started(cfg: Config) -> (Controller, Engine<MemPort>, Engine<MemPort>) {
    started_from(cfg, None)
}

/// [`started`], as if from the file `path`.
pub fn started_from(
    cfg: Config,
    path: Option<std::path::PathBuf>,
) -> (Controller, Engine<MemPort>, Engine<MemPort>) {
    let links = ControlLink::new_set(2);
    let shared: Vec<(u32, Arc<SharedCounters>)> = (1..=2)
        .map(|l| (l, Arc::new(SharedCounters::default())))
        .collect();
    let (ctl, first) =
        Controller::start(cfg, path, links.clone(), shared.clone(), 1_000_000_000).unwrap();
    let mut e0 = engine(&links[0], shared[0].1.clone(), 0);
    let mut e1 = engine(&links[1], shared[1].1.clone(), 1);
    e0.apply(&first);
    e1.apply(&first);
    (ctl, e0, e1)
}

/// The control thread started on `extra` added to [`CONFIG`] with one
/// engine core, its engine left to the test (on the returned link): the
/// first snapshot to apply to it, and the link.
pub fn one_engine(extra: &str) -> (Controller, Arc<Snapshot>, ControlLink) {
    let (ctl, first, mut links) = engines(1, extra);
    (ctl, first, links.remove(0))
}

/// [`one_engine`] with `n` engine cores: a link for each.
pub fn engines(n: usize, extra: &str) -> (Controller, Arc<Snapshot>, Vec<ControlLink>) {
    let lcores: Vec<String> = (1..=n).map(|l| l.to_string()).collect();
    let text = CONFIG.replace(
        "lcores = [1, 2]",
        &format!("lcores = [{}]", lcores.join(", ")),
    ) + extra;
    let links = ControlLink::new_set(n);
    let shared = (1..=n as u32)
        .map(|l| (l, Arc::new(SharedCounters::default())))
        .collect();
    let (ctl, first) = Controller::start(
        Config::parse(&text).unwrap(),
        None,
        links.clone(),
        shared,
        1_000_000_000,
    )
    .unwrap();
    (ctl, first, links)
}

pub fn reply(a: Answer) -> Reply {
    match a {
        Answer::Now(r) => r,
        Answer::Later(rx) => rx.recv().expect("a reply"),
    }
}

/// The engines' clock (one for the whole test: engine time never goes
/// back).
pub static CLOCK: std::sync::LazyLock<TscClock> = std::sync::LazyLock::new(TscClock::new);

/// Runs `engines` on their own threads while `f` runs.
pub fn running<T>(engines: &mut [&mut Engine<MemPort>], f: impl FnOnce() -> T) -> T {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for e in engines.iter_mut() {
            let stop = &stop;
            s.spawn(move || {
                let clock = &*CLOCK;
                while !stop.load(Ordering::Relaxed) {
                    e.poll(clock.now());
                }
            });
        }
        let out = f();
        stop.store(true, Ordering::Relaxed);
        out
    })
}
