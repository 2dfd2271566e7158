//! The engine loop counts the iterations that took over a millisecond
//! (`loop_stalls`): every frame that came meanwhile waited that long.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dataplane::app::{Application, Cx};
use dataplane::dpdk::TscClock;
use dataplane::engine::{Engine, EngineConfig};
use dataplane::port::MemPort;
use dataplane::stats::SharedCounters;
use dataplane::tcp::Event;

/// An application whose first tick holds the loop for `hold` (a stand-in
/// for any work that runs long inside one iteration); `ticks` counts its
/// ticks.
struct SlowTick {
    hold: Duration,
    held: Arc<AtomicBool>,
    ticks: Arc<AtomicU32>,
}

impl Application for SlowTick {
    fn resume(&mut self, _cx: &mut Cx<'_>) {}

    fn pending(&self) -> usize {
        0
    }

    fn on_event(&mut self, _cx: &mut Cx<'_>, _event: Event) {}

    fn on_tick(&mut self, _cx: &mut Cx<'_>) {
        self.ticks.fetch_add(1, Ordering::Release);
        if !self.held.load(Ordering::Relaxed) {
            let start = std::time::Instant::now();
            while start.elapsed() < self.hold {
                std::hint::spin_loop();
            }
            self.held.store(true, Ordering::Release);
        }
    }
}

#[test]
fn an_iteration_over_a_millisecond_is_counted_as_a_stall() {
    let held = Arc::new(AtomicBool::new(false));
    let ticks = Arc::new(AtomicU32::new(0));
    let app = SlowTick {
        hold: Duration::from_millis(3),
        held: held.clone(),
        ticks: ticks.clone(),
    };
    let mut engine: Engine<MemPort, SlowTick> = Engine::with_app(
        EngineConfig::default(),
        Arc::new(SharedCounters::default()),
        app,
    );
    let clock = TscClock::new();
    let (stop, drain) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        let runner = s.spawn(|| engine.run(&clock, &stop, &drain));
        // Wait for the slow tick and a tick after it (so the loop went
        // on past the stall), then stop the loop.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while (!held.load(Ordering::Acquire) || ticks.load(Ordering::Acquire) < 2)
            && std::time::Instant::now() < deadline
        {
            std::thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
        runner.join().expect("engine thread");
    });
    assert!(held.load(Ordering::Acquire), "the slow tick never ran");
    let c = engine.counters();
    assert!(c.loop_stalls >= 1, "{c:?}");
    assert!(c.loop_stalls < c.loops, "{c:?}");
}
