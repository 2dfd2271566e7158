//! The daemon's helper threads beside the control thread: the metrics
//! endpoint, the health-news relay between engines, and the SIGTERM
//! drain. None of them touches an engine's state: they read published
//! counters and use the engines' rings.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use control::api::{CoreStats, Stats};
use control::config::Config;
use crossbeam_queue::ArrayQueue;

use super::StartError;
use crate::snapshot::{ControlLink, HealthNews, HealthRelay};

/// The flags SIGTERM's drain works with.
#[derive(Debug)]
pub(super) struct DrainOrder {
    /// Set to stop the daemon (by the drain once done, or by SIGINT).
    pub stop: Arc<AtomicBool>,
    /// Set by SIGTERM.
    pub term: Arc<AtomicBool>,
    /// Set to stop new connections on every VIP.
    pub drain: Arc<AtomicBool>,
}

/// The running helper threads.
#[derive(Debug)]
pub(super) struct Helpers {
    metrics: Option<JoinHandle<()>>,
    relay: JoinHandle<()>,
    drainer: JoinHandle<()>,
    /// Stops the metrics endpoint and the relay.
    quit: Arc<AtomicBool>,
    /// The daemon's stop flag (the drainer waits on it).
    stop: Arc<AtomicBool>,
}

impl Helpers {
    /// Starts the metrics endpoint (if configured), the health relay and
    /// the drain watcher.
    ///
    /// # Errors
    /// When the metrics address cannot be bound.
    pub(super) fn start(
        cfg: &Config,
        stats: impl Fn() -> Stats + Send + Clone + 'static,
        links: &[ControlLink],
        news: &Arc<ArrayQueue<HealthNews>>,
        order: DrainOrder,
    ) -> Result<Self, StartError> {
        let quit = Arc::new(AtomicBool::new(false));
        let metrics = match cfg.control.metrics_addr() {
            Ok(Some(addr)) => {
                let listener = std::net::TcpListener::bind(addr).map_err(|e| {
                    StartError::Control(std::io::Error::new(
                        e.kind(),
                        format!("metrics endpoint {addr} ([control] metrics): {e}"),
                    ))
                })?;
                log::info!("metrics on http://{addr}/metrics");
                let (quit, stats) = (quit.clone(), stats.clone());
                Some(std::thread::spawn(move || {
                    serve_metrics(listener, &quit, stats);
                }))
            }
            _ => None,
        };
        let relay = {
            let (quit, links, news) = (quit.clone(), links.to_vec(), news.clone());
            std::thread::spawn(move || {
                // Health changes are rare; a few milliseconds of delay
                // before other engines hear of one is nothing.
                let mut relay = HealthRelay::new(links.len());
                while !quit.load(Ordering::Relaxed) {
                    relay.relay(&news, &links);
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        let stop = order.stop.clone();
        let deadline = Duration::from_secs(u64::from(cfg.control.drain_timeout_s));
        let drainer = std::thread::spawn(move || drain_on_term(order, deadline, stats));
        Ok(Self {
            metrics,
            relay,
            drainer,
            quit,
            stop,
        })
    }

    /// Stops and joins them (the daemon's stop flag is set first).
    pub(super) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.drainer.join();
        self.quit.store(true, Ordering::Relaxed);
        if let Some(m) = self.metrics {
            let _ = m.join();
        }
        let _ = self.relay.join();
    }
}

/// SIGTERM: drain, then stop once the open connections are done (or the
/// deadline passed).
fn drain_on_term(order: DrainOrder, deadline: Duration, stats: impl Fn() -> Stats) {
    let DrainOrder { stop, term, drain } = order;
    while !stop.load(Ordering::Relaxed) && !term.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if stop.load(Ordering::Relaxed) {
        return;
    }
    log::info!("SIGTERM: draining (no new connections; at most {deadline:?})");
    drain.store(true, Ordering::Relaxed);
    let t0 = std::time::Instant::now();
    // Let every engine see the flag and publish once.
    std::thread::sleep(Duration::from_millis(20));
    loop {
        let open = open_connections(&stats().total);
        if open == 0 || t0.elapsed() >= deadline || stop.load(Ordering::Relaxed) {
            log::info!("drained ({open} connections still open)");
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
}

/// Connections open (TIME-WAIT is not open).
pub(crate) fn open_connections(total: &CoreStats) -> u64 {
    total.tcp_active
}

/// Serves `GET /metrics` (Prometheus text format) on `listener` until
/// `stop` ([`super::metrics_http`]: several scrapers at once, none able to
/// hold it).
fn serve_metrics(listener: std::net::TcpListener, stop: &AtomicBool, stats: impl Fn() -> Stats) {
    let mut http = match super::metrics_http::MetricsHttp::new(listener) {
        Ok(h) => h,
        Err(e) => {
            log::error!("metrics endpoint: {e}");
            return;
        }
    };
    let mut body = || control::metrics::render(&stats());
    while !stop.load(Ordering::Relaxed) {
        if !http.step(std::time::Instant::now(), &mut body) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
