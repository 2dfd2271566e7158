//! `dpctl`: the operator's CLI for a running `dpd`, over its control socket.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use control::api::{Body, Client, CoreStats, Request};

#[derive(Parser, Debug)]
#[command(
    name = "dpctl",
    version,
    about = "Control a running tlsdp dataplane (dpd)"
)]
struct Cli {
    /// dpd's control socket.
    #[arg(
        long,
        global = true,
        default_value = "/run/tlsdp/control.sock",
        env = "DPCTL_SOCKET"
    )]
    socket: PathBuf,
    /// Print the raw JSON reply.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Version, uptime, cores, ports and hugepages.
    Status,
    /// Packet counters per core and in total.
    Stats {
        /// Show every core, not only the total.
        #[arg(long)]
        per_core: bool,
        /// Print only the engines' busy core-seconds since start (for
        /// benchmark harnesses: dpbench's `busy=cmd:` source).
        #[arg(long, conflicts_with = "per_core")]
        busy_seconds: bool,
    },
    /// Stop taking new connections on every VIP; existing ones go on (then
    /// stop dpd with SIGTERM or SIGINT).
    Drain,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let req = match cli.cmd {
        Cmd::Status => Request::Status,
        Cmd::Stats { .. } => Request::Stats,
        Cmd::Drain => Request::Drain,
    };
    let reply = Client::connect(&cli.socket).and_then(|mut c| c.call(&req));
    let reply = match reply {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "dpctl: cannot talk to dpd at {}: {e} (is dpd running? are you root?)",
                cli.socket.display()
            );
            return ExitCode::from(2);
        }
    };
    if cli.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&reply).expect("serialisable")
        );
        return if reply.ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if !reply.ok {
        eprintln!("dpctl: dpd refused: {}", reply.error.unwrap_or_default());
        return ExitCode::FAILURE;
    }
    match (reply.body, cli.cmd) {
        (Some(Body::Drain(d)), _) => {
            println!(
                "draining: no new connections; {} still open",
                d.open_connections
            );
        }
        (Some(Body::Status(s)), _) => {
            println!(
                "dpd {} (DPDK {}), pid {}, up {:.0} s",
                s.version, s.dpdk, s.pid, s.uptime_s
            );
            println!("dataplane cores: {:?}", s.lcores);
            println!(
                "hugepages: {} ({})",
                if s.hugepages_in_use {
                    "in use"
                } else {
                    "not in use"
                },
                s.hugepages.join("; ")
            );
            println!(
                "{:<8} {:<16} {:<18} {:<18} {:<6} {:>6} {:>4}",
                "PORT", "ADDRESS", "MAC", "DRIVER", "LINK", "QUEUES", "RSS"
            );
            for p in s.ports {
                println!(
                    "{:<8} {:<16} {:<18} {:<18} {:<6} {:>6} {:>4}",
                    p.name,
                    p.address,
                    p.mac,
                    p.driver,
                    if p.link_up { "up" } else { "down" },
                    p.queues,
                    if p.rss { "yes" } else { "no" }
                );
            }
        }
        (
            Some(Body::Stats(s)),
            Cmd::Stats {
                busy_seconds: true, ..
            },
        ) => {
            println!("{:.6}", s.busy_seconds());
        }
        (Some(Body::Stats(s)), Cmd::Stats { per_core, .. }) => {
            if per_core {
                for c in &s.cores {
                    print_stats(c);
                }
            }
            print_stats(&s.total);
        }
        _ => {
            eprintln!("dpctl: unexpected reply from dpd");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn print_stats(c: &CoreStats) {
    match c.lcore {
        Some(l) => println!("core {l}:"),
        None => println!("total:"),
    }
    println!(
        "  rx {} packets {} bytes, tx {} packets {} bytes",
        c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes
    );
    println!(
        "  arp replies {}, arp requests {}, icmp echo replies {}, busy {:.1} %",
        c.arp_replies,
        c.arp_requests,
        c.icmp_echo_replies,
        100.0 * c.busy()
    );
    println!(
        "  tcp accepted {}, active {}, retransmits {}, resets sent {}, timeouts {}; http requests {}",
        c.tcp_accepted, c.tcp_active, c.tcp_retransmits, c.tcp_resets_sent, c.tcp_timeouts, c.http_requests
    );
    if c.tls_handshakes + c.tls_failures > 0 {
        println!(
            "  tls handshakes {} (resumed {}), failures {}, key updates {}, renegotiations refused {}, deferred {}",
            c.tls_handshakes,
            c.tls_resumed,
            c.tls_failures,
            c.tls_key_updates,
            c.tls_renegotiations_refused,
            c.tls_handshakes_deferred
        );
        for (what, counts) in [
            ("versions", &c.tls_versions),
            ("suites", &c.tls_suites),
            ("groups", &c.tls_groups),
            ("key types", &c.tls_key_types),
            ("failures", &c.tls_failure_reasons),
        ] {
            if !counts.is_empty() {
                let list: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
                println!("    tls {what}: {}", list.join(", "));
            }
        }
    }
    if c.proxy_backend_connects + c.proxy_no_member > 0 {
        println!(
            "  proxy backend connects {}, failed {}, clients without a member {}",
            c.proxy_backend_connects, c.proxy_backend_failures, c.proxy_no_member
        );
    }
    if c.health_checks > 0 {
        println!(
            "  health checks {}, failed {}, member state changes {}",
            c.health_checks, c.health_failures, c.health_changes
        );
    }
    if c.tcp_syn_cookies_sent > 0 {
        println!(
            "  syn cookies sent {}, accepted {}",
            c.tcp_syn_cookies_sent, c.tcp_syn_cookies_accepted
        );
    }
    let drops: Vec<String> = c
        .drops
        .iter()
        .filter(|(_, &n)| n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!(
        "  drops: {}",
        if drops.is_empty() {
            "none".to_string()
        } else {
            drops.join(", ")
        }
    );
}
