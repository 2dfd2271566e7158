//! `dpd`'s logger: one line per record on stderr, as text or JSON
//! (`[log] format`), behind a filter that can be replaced while `dpd` runs
//! (`dpctl log level`, or a reload of a file whose `[log] level` changed),
//! so that an operator can turn on `debug` for one module and off again
//! without a restart dropping every connection. The format changes with a
//! reload too: both are built at start, and an atomic picks one.
//!
//! The filter is read under a lock only for a record that passes `log`'s
//! global maximum (an atomic), and engines never log per packet
//! ([architecture.md](../../docs/architecture.md), "Crates", the controller).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{PoisonError, RwLock};

use control::config::{Log as LogConfig, LogFormat};
use log::{LevelFilter, Log, Metadata, Record};

/// The filter in effect and the text it was read from; `None` until
/// [`init`] installs the logger.
static LEVEL: RwLock<Option<Level>> = RwLock::new(None);

struct Level {
    spec: String,
    filter: env_filter::Filter,
}

/// Lines are JSON (`[log] format = "json"`), else text.
static JSON: AtomicBool = AtomicBool::new(false);

/// Installs the logger. `RUST_LOG`, when set, is the filter instead of
/// `cfg.level` (read as env_logger reads it: a directive it cannot read is
/// ignored with a warning); `RUST_LOG_STYLE` is honoured.
///
/// # Errors
/// A logger is already installed.
pub fn init(cfg: &LogConfig) -> Result<(), log::SetLoggerError> {
    use std::io::Write;
    let spec = match std::env::var("RUST_LOG") {
        Ok(s) if !s.trim().is_empty() => s,
        _ => cfg.level.clone(),
    };
    let filter = env_filter::Builder::new().parse(&spec).build();
    let max = filter.filter();
    let builder = || {
        let mut out = env_logger::Builder::new();
        out.filter_level(LevelFilter::Trace);
        if let Ok(style) = std::env::var("RUST_LOG_STYLE") {
            out.parse_write_style(&style);
        }
        out
    };
    let mut text = builder();
    text.format(|f, r| {
        writeln!(
            f,
            "{} {:<5} {}: {}",
            f.timestamp_millis(),
            r.level(),
            r.target(),
            r.args()
        )
    });
    let mut json = builder();
    json.format(|f, r| {
        let line = serde_json::json!({
            "ts": f.timestamp_millis().to_string(),
            "level": r.level().as_str(),
            "target": r.target(),
            "msg": r.args().to_string(),
        });
        writeln!(f, "{line}")
    });
    set_format(cfg.format);
    log::set_boxed_logger(Box::new(Switched {
        text: text.build(),
        json: json.build(),
    }))?;
    *LEVEL.write().unwrap_or_else(PoisonError::into_inner) = Some(Level { spec, filter });
    log::set_max_level(max);
    Ok(())
}

/// Replaces the filter (a level, or directives as `[log] level` takes
/// them) from the next record on. Without the logger installed (tests,
/// tools linking the controller) it only checks `spec`.
///
/// # Errors
/// `spec` is not a filter.
pub fn set_level(spec: &str) -> Result<(), String> {
    let filter = env_filter::Builder::new()
        .try_parse(spec)
        .map_err(|e| e.to_string())?
        .build();
    let mut level = LEVEL.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(level) = level.as_mut() {
        let max = filter.filter();
        *level = Level {
            spec: spec.to_string(),
            filter,
        };
        log::set_max_level(max);
    }
    Ok(())
}

/// Writes lines in `format` from the next record on.
pub fn set_format(format: LogFormat) {
    JSON.store(format == LogFormat::Json, Ordering::Relaxed);
}

/// The format lines are written in.
pub fn format() -> LogFormat {
    if JSON.load(Ordering::Relaxed) {
        LogFormat::Json
    } else {
        LogFormat::Text
    }
}

/// The filter in effect, as given; `None` without the logger installed.
pub fn level() -> Option<String> {
    LEVEL
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .map(|l| l.spec.clone())
}

/// env_logger's writer with each format, behind [`LEVEL`]'s filter.
struct Switched {
    text: env_logger::Logger,
    json: env_logger::Logger,
}

impl Switched {
    fn out(&self) -> &env_logger::Logger {
        match format() {
            LogFormat::Json => &self.json,
            LogFormat::Text => &self.text,
        }
    }
}

impl Log for Switched {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        LEVEL
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|l| l.filter.enabled(metadata))
    }

    fn log(&self, record: &Record<'_>) {
        let passes = LEVEL
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|l| l.filter.matches(record));
        // The lock is let go before the line is written.
        if passes {
            self.out().log(record);
        }
    }

    fn flush(&self) {
        self.text.flush();
        self.json.flush();
    }
}
