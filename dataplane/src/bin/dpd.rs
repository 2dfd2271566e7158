//! `dpd`: the tlsdp dataplane daemon.
//!
//! `dpd --config dpd.toml` starts one engine per configured core on the
//! configured ports and serves the control socket until SIGINT (stop now) or
//! SIGTERM (drain: no new connections, stop when the open ones are done or
//! after `[control] drain_timeout_s`), then stops the engines, frees the
//! ports and exits 0. SIGHUP reads the file again and applies its VIPs,
//! certificates, pools and log level (`dpctl config reload`); SIGUSR1 opens
//! the connection log's file again (`dpctl log reopen`). A bad configuration
//! exits 2 with a message naming the field and value; a DPDK failure exits 1.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use control::config::Config;
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
    if let Err(e) = dataplane::logging::init(&cfg.log) {
        eprintln!("dpd: cannot install the logger: {e}");
        return ExitCode::FAILURE;
    }
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
    // A second SIGINT while stopping (an engine that never leaves its
    // loop holds the stop) ends the process at once: 130, as a shell
    // reports a SIGINT. Registered before the flag's own handler, so the
    // first SIGINT only sets the flag.
    if let Err(e) = signal_hook::flag::register_conditional_shutdown(
        signal_hook::consts::SIGINT,
        130,
        signals.stop.clone(),
    ) {
        eprintln!("dpd: cannot install signal handler: {e}");
        return ExitCode::FAILURE;
    }
    for (sig, flag) in [
        (signal_hook::consts::SIGINT, &signals.stop),
        (signal_hook::consts::SIGTERM, &signals.term),
        (signal_hook::consts::SIGHUP, &signals.reload),
        (signal_hook::consts::SIGUSR1, &signals.reopen),
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
