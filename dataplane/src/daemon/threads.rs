//! The daemon's helper threads beside the control thread: the metrics
//! endpoint and the health-news relay between engines (SIGTERM's drain is
//! the controller's tick). None of them touches an engine's state: they read published
//! counters and use the engines' rings.

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use control::api::CoreStats;
use control::config::Config;
use crossbeam_queue::ArrayQueue;

use super::StartError;
use crate::snapshot::{ControlLink, HealthNews, HealthRelay};

/// The running helper threads.
#[derive(Debug)]
pub(super) struct Helpers {
    metrics: Option<JoinHandle<()>>,
    relay: JoinHandle<()>,
    /// Stops the metrics endpoint and the relay.
    quit: Arc<AtomicBool>,
}

/// The metrics endpoint's listener, where `[control] metrics` asks for
/// one (bound at start, before anything else: see `super::run`).
///
/// # Errors
/// When the metrics address cannot be bound (in use, not ours).
pub(super) fn bind_metrics(cfg: &Config) -> Result<Option<TcpListener>, StartError> {
    let Ok(Some(addr)) = cfg.control.metrics_addr() else {
        return Ok(None);
    };
    TcpListener::bind(addr).map(Some).map_err(|e| {
        StartError::Control(std::io::Error::new(
            e.kind(),
            format!("metrics endpoint {addr} ([control] metrics): {e}"),
        ))
    })
}

impl Helpers {
    /// Starts the metrics endpoint (on `metrics`, if bound) and the
    /// health relay.
    pub(super) fn start(
        metrics: Option<TcpListener>,
        metrics_text: impl Fn() -> String + Send + 'static,
        links: &[ControlLink],
        news: &Arc<ArrayQueue<HealthNews>>,
    ) -> Self {
        let quit = Arc::new(AtomicBool::new(false));
        let metrics = metrics.map(|listener| {
            // The port bound, where the configuration says 0.
            if let Ok(bound) = listener.local_addr() {
                log::info!("metrics on http://{bound}/metrics");
            }
            let quit = quit.clone();
            std::thread::spawn(move || {
                serve_metrics(listener, &quit, metrics_text);
            })
        });
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
        Self {
            metrics,
            relay,
            quit,
        }
    }

    /// Stops and joins them.
    pub(super) fn stop(self) {
        self.quit.store(true, Ordering::Relaxed);
        if let Some(m) = self.metrics {
            let _ = m.join();
        }
        let _ = self.relay.join();
    }
}

/// Client connections open (TIME-WAIT is not open; our own to backends
/// and health checks are not waited for: a check of a member that never
/// answers is open almost all the time).
pub(crate) fn open_connections(total: &CoreStats) -> u64 {
    total.tcp_client_connections
}

/// Serves `GET /metrics` (Prometheus text format) on `listener` until
/// `stop` ([`super::metrics_http`]: several scrapers at once, none able to
/// hold it).
fn serve_metrics(listener: TcpListener, stop: &AtomicBool, text: impl Fn() -> String) {
    let mut http = match super::metrics_http::MetricsHttp::new(listener) {
        Ok(h) => h,
        Err(e) => {
            log::error!("metrics endpoint: {e}");
            return;
        }
    };
    let mut body = text;
    while !stop.load(Ordering::Relaxed) {
        if !http.step(std::time::Instant::now(), &mut body) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
