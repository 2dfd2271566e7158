//! `dpd`: the tlsdp dataplane daemon.
//!
//! `dpd --config dpd.toml` starts one engine per configured core on the
//! configured ports and serves the control socket until SIGINT (stop now) or
//! SIGTERM (drain: no new connections, stop when the open ones are done or
//! after `[control] drain_timeout_s`), then stops the engines, frees the
//! ports and exits 0. A bad configuration
//! exits 2 with a message naming the field and value; a DPDK failure exits 1.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Parser;
use control::config::Config;
use dataplane::daemon::{self, StartError};

#[derive(Parser, Debug)]
#[command(name = "dpd", version, about = "tlsdp dataplane daemon")]
struct Args {
    /// Configuration file (TOML).
    #[arg(long, short)]
    config: PathBuf,
    /// Check the configuration file and exit.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = Args::parse();
    let cfg = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dpd: config error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check {
        println!("{}: ok", args.config.display());
        return ExitCode::SUCCESS;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let term = Arc::new(AtomicBool::new(false));
    for (sig, flag) in [
        (signal_hook::consts::SIGINT, &stop),
        (signal_hook::consts::SIGTERM, &term),
    ] {
        if let Err(e) = signal_hook::flag::register(sig, flag.clone()) {
            eprintln!("dpd: cannot install signal handler: {e}");
            return ExitCode::FAILURE;
        }
    }
    match daemon::run(&cfg, stop, term) {
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
