//! The engine loop counts the iterations that took over a millisecond
//! (`loop_stalls`): every frame that came meanwhile waited that long. Its
//! busy and idle time add up to its wall time, sleeps included.

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

/// Runs `engine`'s loop on a thread of its own until `done` (or 10 s),
/// then stops it.
fn run_until(engine: &mut Engine<MemPort, SlowTick>, clock: &TscClock, done: impl Fn() -> bool) {
    let (stop, drain) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        let runner = s.spawn(|| engine.run(clock, &stop, &drain));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
        runner.join().expect("engine thread");
    });
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
    // Until the slow tick and a tick after it (so the loop went on past
    // the stall).
    run_until(&mut engine, &clock, || {
        held.load(Ordering::Acquire) && ticks.load(Ordering::Acquire) >= 2
    });
    assert!(held.load(Ordering::Acquire), "the slow tick never ran");
    let c = engine.counters();
    assert!(c.loop_stalls >= 1, "{c:?}");
    assert!(c.loop_stalls < c.loops, "{c:?}");
}

/// An engine with nothing to do that sleeps `idle_sleep` between polls:
/// the sleeps count as idle time, so busy and idle add up to the loop's
/// wall time and the busy share `dpctl stats` shows is the core's (with
/// the sleeps left out, a core two-thirds busy showed 98 %).
#[test]
fn sleeping_while_idle_counts_as_idle_time() {
    let ticks = Arc::new(AtomicU32::new(0));
    let app = SlowTick {
        hold: Duration::ZERO,
        held: Arc::new(AtomicBool::new(false)),
        ticks: ticks.clone(),
    };
    let cfg = EngineConfig {
        idle_sleep: Some(Duration::from_micros(200)),
        ..EngineConfig::default()
    };
    let mut engine: Engine<MemPort, SlowTick> =
        Engine::with_app(cfg, Arc::new(SharedCounters::default()), app);
    let clock = TscClock::new();
    let start = clock.ticks();
    // 100 ticks (1 ms each): most of it asleep.
    run_until(&mut engine, &clock, || ticks.load(Ordering::Acquire) >= 100);
    let wall = clock.ticks().wrapping_sub(start);
    let c = engine.counters();
    let counted = c.busy_cycles + c.idle_cycles;
    assert!(
        counted as f64 >= 0.8 * wall as f64 && counted <= wall,
        "busy {} + idle {} cycles of {wall}",
        c.busy_cycles,
        c.idle_cycles
    );
    assert!(
        (c.busy_cycles as f64) < 0.2 * wall as f64,
        "an idle engine is not busy: {} of {wall}",
        c.busy_cycles
    );
}
