//! `dpd`: the tlsdp dataplane daemon.
//!
//! `dpd --config dpd.toml` starts one engine per configured core on the
//! configured ports and serves the control socket until SIGINT (stop now) or
//! SIGTERM (drain: no new connections, stop when the open ones are done or
//! after `[control] drain_timeout_s`), then stops the engines, frees the
//! ports and exits 0. SIGHUP reads the file again and applies its VIPs,
//! certificates and pools (`dpctl config reload`). A bad configuration
//! exits 2 with a message naming the field and value; a DPDK failure exits 1.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use control::config::{Config, LogFormat};
use dataplane::daemon::{self, StartError};

#[global_allocator]
static ALLOCATOR: dataplane::Allocator = dataplane::Allocator;

#[derive(Parser, Debug)]
#[command(name = "dpd", version, about = "tlsdp dataplane daemon")]
struct Args {
    /// Configuration file (TOML).
    #[arg(long, short)]
    config: PathBuf,
    /// Check the configuration file, its certificates, keys and TLS
    /// policies, and exit (0 if dpd would take them, 2 if not).
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dpd: config error: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&cfg.log);
    if args.check {
        // Certificates, keys and TLS policies too: what would stop `dpd`
        // at start, short of the machine (cores, devices, hugepages).
        if let Err(e) = daemon::check(&cfg) {
            eprintln!("dpd: config error: {e}");
            return ExitCode::from(2);
        }
        println!(
            "{}: ok (certificates, keys and TLS policies loaded; cores, devices and hugepages are checked at start)",
            args.config.display()
        );
        return ExitCode::SUCCESS;
    }
    let signals = daemon::Signals::default();
    for (sig, flag) in [
        (signal_hook::consts::SIGINT, &signals.stop),
        (signal_hook::consts::SIGTERM, &signals.term),
        (signal_hook::consts::SIGHUP, &signals.reload),
    ] {
        if let Err(e) = signal_hook::flag::register(sig, flag.clone()) {
            eprintln!("dpd: cannot install signal handler: {e}");
            return ExitCode::FAILURE;
        }
    }
    match daemon::run(&cfg, Some(&args.config), signals) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ StartError::Config(_)) => {
            eprintln!("dpd: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("dpd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Logs on stderr: the level from `RUST_LOG` or `[log] level`, one line per
/// record as text (`2026-11-30T18:01:10.123Z INFO dataplane::daemon: ...`)
/// or JSON (`{"ts":..., "level":..., "target":..., "msg":...}`).
fn init_logging(cfg: &control::config::Log) {
    use std::io::Write;
    let env = env_logger::Env::default().default_filter_or(cfg.level.as_str());
    let mut b = env_logger::Builder::from_env(env);
    match cfg.format {
        LogFormat::Text => {
            b.format(|f, r| {
                writeln!(
                    f,
                    "{} {:<5} {}: {}",
                    f.timestamp_millis(),
                    r.level(),
                    r.target(),
                    r.args()
                )
            });
        }
        LogFormat::Json => {
            b.format(|f, r| {
                let line = serde_json::json!({
                    "ts": f.timestamp_millis().to_string(),
                    "level": r.level().as_str(),
                    "target": r.target(),
                    "msg": r.args().to_string(),
                });
                writeln!(f, "{line}")
            });
        }
    }
    b.init();
}
