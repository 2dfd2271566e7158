//! `dpbench`: see `docs/bench.md`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bench::alone::Pausable;
use bench::loadgen::{Load, Phases};
use bench::run::{self, TestKind, TestSpec};
use bench::target::{KeyType, Target};
use bench::tls::{Group, TlsVersion};
use bench::{ceiling, report, scenario};
use clap::{Args, Parser, Subcommand};

/// dpd's allocator: the kernel-bypass client runs the same stack.
#[global_allocator]
static ALLOCATOR: dataplane::Allocator = dataplane::Allocator;

#[derive(Parser, Debug)]
#[command(
    name = "dpbench",
    version,
    about = "tlsdp's lab benchmarking harness (software Ixia for TLS offload)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run one test against one or more targets.
    Test {
        #[arg(value_enum)]
        kind: TestKind,
        #[command(flatten)]
        common: Common,
    },
    /// Run a set of tests on each target in turn and print one comparison table.
    Suite {
        /// Tests to run, comma separated.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "cps,throughput,l4cps,rps,latency"
        )]
        tests: Vec<TestKind>,
        /// Key types for the TLS tests, comma separated.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "rsa2048,p256"
        )]
        keys: Vec<KeyType>,
        #[command(flatten)]
        common: Common,
    },
    /// Measure the per-core crypto ceiling with aws-lc-rs.
    Ceiling {
        /// Milliseconds spent timing each operation.
        #[arg(long, default_value_t = 500)]
        ms: u64,
        /// Core to pin to (the DUT core, so the ceiling is that core's).
        #[arg(long, default_value_t = 1)]
        core: usize,
        /// Also write the operations and ceilings as JSON here, for a
        /// later run's --ceiling-file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Reproduce a reference report's table: f5, lbo, abs, sp.
    Scenario {
        #[arg(value_enum)]
        name: scenario::Name,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Args, Debug, Clone)]
struct Common {
    /// Target: name=N,host=IP,rsa2048=PORT,p256=PORT,p384=PORT,http=PORT,pidfile=A[+B],core=C[,pause=A[+B]][,busy=cmd:..|file:..]. Repeatable.
    /// `pause=`: processes stopped while other targets (or the ceiling) are measured.
    #[arg(long = "target", required = true)]
    targets: Vec<String>,
    /// Certificate key type (selects the target's port).
    #[arg(long, value_enum)]
    key: Option<KeyType>,
    #[arg(long = "tls", value_enum, default_value = "1.3")]
    tls_version: TlsVersion,
    #[arg(long, value_enum, default_value = "x25519")]
    group: Group,
    /// Offer session resumption (off by default: every handshake is full).
    #[arg(long)]
    reuse: bool,
    /// DANGEROUS, load generation only: skip certificate-chain and signature verification.
    #[arg(long)]
    dangerous_no_verify: bool,
    /// CA certificate (PEM) for verification.
    #[arg(long)]
    ca: Option<String>,
    /// Server name (SNI and certificate check).
    #[arg(long, default_value = "bench.test")]
    sni: String,
    /// Connections in flight (closed-loop tests).
    #[arg(short = 'c', long)]
    concurrency: Option<u32>,
    /// Offered connections/s (latency, concurrency).
    #[arg(long)]
    rate: Option<f64>,
    /// Connections to open and hold (concurrency).
    #[arg(long)]
    conns: Option<u64>,
    /// Path to GET (overrides the test's page).
    #[arg(long)]
    path: Option<String>,
    /// Body size every response must have (with --path).
    #[arg(long)]
    size: Option<u64>,
    /// Requests per connection (0 = until the run ends).
    #[arg(long)]
    reqs_per_conn: Option<u32>,
    #[arg(long)]
    ramp_up: Option<u64>,
    #[arg(long)]
    sustain: Option<u64>,
    #[arg(long)]
    ramp_down: Option<u64>,
    /// Runs per test (best and median are reported).
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Seconds without progress that count as a timeout.
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Cores for the workers (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    cores: Vec<usize>,
    /// Source addresses (comma separated; A.B.C.D-E for a range).
    #[arg(long, default_value = "")]
    src: String,
    /// Error fraction above which a run is rejected.
    #[arg(long, default_value_t = 0.001)]
    tolerance: f64,
    /// Directory for CSV, JSON and SVG reports.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Crypto ceiling measurement time per operation (ms), 0 to skip.
    #[arg(long, default_value_t = 300)]
    ceiling_ms: u64,
    /// Take the ceilings from this file (`dpbench ceiling --json`),
    /// measured with the DUT core free, instead of measuring them here
    /// on the targets' core while the targets are up (their `pause=`
    /// processes stopped; scripts/bench-suite.sh measures it before
    /// starting the peers).
    #[arg(long, conflicts_with = "ceiling_ms")]
    ceiling_file: Option<PathBuf>,
    /// Also measure the ceiling of each TLS cps and tps run's handshake
    /// (its signature, X25519; MS per operation, 300 if not given) on the
    /// DUT core right before and right after the run, all `pause=`
    /// processes stopped meanwhile (the measured target's too), and report
    /// each run's per-core rate over the mean of the two: a VM whose speed
    /// drifts moves both alike.
    #[arg(long, value_name = "MS", num_args = 0..=1, default_missing_value = "300")]
    ceiling_each: Option<u64>,
    /// Kernel-bypass client: run on tlsdp's own stack over this DPDK
    /// virtual device (net_memif0,role=client,socket=PATH;
    /// net_af_packet0,iface=IFACE), on the first of --cores. Closed-loop
    /// tests only.
    #[arg(long, requires = "bypass_addr")]
    bypass: Option<String>,
    /// The bypass client's address: ADDR/LEN[,gw=GATEWAY][,sources=N][,mtu=N].
    #[arg(long)]
    bypass_addr: Option<String>,
}

fn parse_sources(s: &str) -> Result<Vec<IpAddr>> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let base: std::net::Ipv4Addr = a.parse().with_context(|| format!("--src {part}"))?;
            let o = base.octets();
            let last: u8 = b.parse().with_context(|| format!("--src {part}"))?;
            if last < o[3] {
                bail!("--src {part}: the range ends before it begins");
            }
            for x in o[3]..=last {
                v.push(IpAddr::from([o[0], o[1], o[2], x]));
            }
        } else {
            v.push(part.parse().with_context(|| format!("--src {part}"))?);
        }
    }
    Ok(v)
}

impl Common {
    fn spec(&self, kind: TestKind, key: Option<KeyType>) -> Result<TestSpec> {
        let mut s = TestSpec::defaults(kind);
        if let Some(k) = key.or(self.key) {
            s.key = k;
        }
        s.tls.version = self.tls_version;
        s.tls.group = self.group;
        s.tls.reuse = self.reuse;
        s.tls.dangerous_no_verify = self.dangerous_no_verify;
        s.tls.ca_file.clone_from(&self.ca);
        s.tls.server_name.clone_from(&self.sni);
        if let Some(c) = self.concurrency {
            match &mut s.load {
                Load::Closed { concurrency } => *concurrency = c,
                Load::Open { max_inflight, .. } => *max_inflight = c,
            }
        }
        if let Some(r) = self.rate.filter(|r| !(r.is_finite() && *r > 0.0)) {
            bail!("--rate {r}: connections a second must be a number above 0");
        }
        if !(self.timeout.is_finite() && self.timeout > 0.0 && self.timeout <= 3600.0) {
            bail!(
                "--timeout {}: seconds without progress must be above 0 and at most 3600",
                self.timeout
            );
        }
        if let Some(r) = self.rate {
            match &mut s.load {
                Load::Open { rate, .. } => *rate = r,
                Load::Closed { .. } => {
                    bail!("--rate applies to latency and concurrency (open-loop) tests")
                }
            }
        }
        if let Some(n) = self.conns {
            s.max_conns = Some(n);
            if let Load::Open { max_inflight, .. } = &mut s.load {
                *max_inflight = (*max_inflight).max(u32::try_from(n).unwrap_or(u32::MAX));
            }
        }
        if let Some(p) = &self.path {
            s.path.clone_from(p);
            s.expect_body = self.size;
        } else if self.size.is_some() {
            s.expect_body = self.size;
        }
        if let Some(n) = self.reqs_per_conn {
            s.reqs_per_conn = n;
        }
        s.phases = Phases {
            ramp_up: self.ramp_up.unwrap_or(s.phases.ramp_up),
            sustain: self.sustain.unwrap_or(s.phases.sustain).max(1),
            ramp_down: self.ramp_down.unwrap_or(s.phases.ramp_down),
        };
        if kind == TestKind::Concurrency {
            // Ramp long enough to open them all at the offered rate (the
            // ramp's average rate is half the offered one).
            if let (Load::Open { rate, .. }, Some(n)) = (s.load, s.max_conns) {
                let need = ((n as f64 / rate) * 2.0).ceil() as u64 + 1;
                s.phases.ramp_up = s.phases.ramp_up.max(need);
            }
        }
        s.repeat = self.repeat;
        s.timeout_s = self.timeout;
        s.threads = self.threads;
        s.cores.clone_from(&self.cores);
        s.sources = parse_sources(&self.src)?;
        s.tolerance = self.tolerance;
        if let Some(ms) = self.ceiling_each {
            if ms == 0 {
                bail!("--ceiling-each 0: the ceiling needs some time per operation");
            }
            s.ceiling_each = Some(run::CeilingEach {
                core: dut_core(&self.targets()?),
                budget: Duration::from_millis(ms),
            });
        }
        if let (Some(dev), Some(addr)) = (&self.bypass, &self.bypass_addr) {
            let core = self.cores.first().copied().unwrap_or(0);
            s.bypass =
                Some(bench::bypass::Bypass::parse(dev, addr, core).map_err(anyhow::Error::msg)?);
            if !matches!(s.load, Load::Closed { .. }) {
                bail!("--bypass runs closed-loop tests (cps, tps, l4cps, rps, throughput)");
            }
        }
        Ok(s)
    }

    fn targets(&self) -> Result<Vec<Target>> {
        self.targets.iter().map(|t| Ok(Target::parse(t)?)).collect()
    }

    /// The ceilings from `--ceiling-file`, or measured on the DUT core
    /// ([`dut_core`]) with the targets' `pause=` processes stopped.
    fn ceilings(&self, targets: &[Target], others: &Pausable) -> Result<Vec<ceiling::Ceiling>> {
        if let Some(path) = &self.ceiling_file {
            #[derive(serde::Deserialize)]
            struct File {
                ceilings: Vec<ceiling::Ceiling>,
            }
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--ceiling-file {}", path.display()))?;
            let f: File = serde_json::from_str(&text).with_context(|| {
                format!(
                    "--ceiling-file {}: not `dpbench ceiling --json` output",
                    path.display()
                )
            })?;
            return Ok(f.ceilings);
        }
        if self.ceiling_ms == 0 {
            return Ok(Vec::new());
        }
        let _alone = others.alone(None);
        Ok(ceiling_on(dut_core(targets), self.ceiling_ms)
            .map(|c| c.1)
            .unwrap_or_default())
    }
}

/// The core the ceiling is measured on: the first target's `core=`, else 1
/// (the lab's DUT core).
fn dut_core(targets: &[Target]) -> usize {
    targets.iter().find_map(|t| t.core).unwrap_or(1)
}

fn ceiling_on(core: usize, ms: u64) -> Result<(Vec<ceiling::OpCost>, Vec<ceiling::Ceiling>)> {
    Ok(
        ceiling::on_core(core, move || ceiling::measure(Duration::from_millis(ms)))
            .ok_or_else(|| {
                anyhow::anyhow!("no ceiling measured on core {core} (not a core this process can run on, or the measurement panicked)")
            })??,
    )
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    // A peer dpbench holds stopped (a target's pause=) must not stay so.
    if let Err(e) = bench::alone::continue_on_signal() {
        eprintln!("dpbench: no signal handling ({e}): an interrupted run may leave pause= processes stopped");
    }
    // As in dpd: the bypass client's engine keeps its freed memory.
    dataplane::dpdk::keep_freed_memory();
    match cli.cmd {
        Cmd::Test { kind, common } => {
            let targets = common.targets()?;
            let others = Pausable::new(&targets);
            let spec = common.spec(kind, None)?;
            let ceilings = if kind.uses_tls() {
                common.ceilings(&targets, &others)?
            } else {
                Vec::new()
            };
            let mut results = Vec::new();
            for t in &targets {
                results.push(run::run_repeated(&spec, t, &others));
            }
            print!("{}", report::runs_markdown(&results));
            print!(
                "{}",
                report::comparison_markdown(&results, &targets, &ceilings)
            );
            print!("{}", report::ceiling_each_markdown(&results));
            if let Some(dir) = &common.out {
                report::write_files(dir, &results, &ceilings)?;
                eprintln!("reports written to {}", dir.display());
            }
        }
        Cmd::Suite {
            tests,
            keys,
            common,
        } => {
            let targets = common.targets()?;
            // Every test's settings first: one the options do not fit
            // (`--bypass` with an open-loop test, `--rate` with a
            // closed-loop one) stops the suite before any run, not after
            // minutes of them with nothing reported.
            let mut specs = Vec::new();
            for &kind in &tests {
                let ks: Vec<Option<KeyType>> = if kind.uses_tls() {
                    keys.iter().copied().map(Some).collect()
                } else {
                    vec![None]
                };
                for k in ks {
                    specs.push(
                        common
                            .spec(kind, k)
                            .with_context(|| format!("test {}", kind.name()))?,
                    );
                }
            }
            let others = Pausable::new(&targets);
            let ceilings = common.ceilings(&targets, &others)?;
            // Each test on every target in turn: the targets of one
            // comparison row are measured minutes apart at most, not a
            // whole suite apart (the machine drifts: BENCH.md).
            let mut results = Vec::new();
            for spec in &specs {
                for t in &targets {
                    results.push(run::run_repeated(spec, t, &others));
                }
            }
            print!("{}", report::runs_markdown(&results));
            print!(
                "{}",
                report::comparison_markdown(&results, &targets, &ceilings)
            );
            print!("{}", report::ceiling_each_markdown(&results));
            if let Some(dir) = &common.out {
                report::write_files(dir, &results, &ceilings)?;
                eprintln!("reports written to {}", dir.display());
            }
        }
        Cmd::Ceiling { ms, core, json } => {
            let (ops, c) = ceiling_on(core, ms)?;
            print!("{}", report::ceiling_markdown(&ops, &c, core));
            if let Some(path) = json {
                let v = serde_json::json!({ "core": core, "ops": ops, "ceilings": c });
                std::fs::write(&path, serde_json::to_string_pretty(&v)?)
                    .with_context(|| format!("--json {}", path.display()))?;
            }
        }
        Cmd::Scenario { name, common } => {
            let targets = common.targets()?;
            let out = scenario::run(name, &targets, &|kind, key| {
                common.spec(kind, key).map_err(|e| format!("{e:#}"))
            })?;
            let (mut md, results) = out;
            md.push_str(&report::ceiling_each_markdown(&results));
            print!("{md}");
            if let Some(dir) = &common.out {
                report::write_files(dir, &results, &[])?;
                std::fs::write(dir.join("scenario.md"), &md)?;
                eprintln!("reports written to {}", dir.display());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values that would panic a worker mid-suite (a rate of 0, a timeout
    /// that is no duration) or measure nothing (a reversed source range)
    /// are refused before any run. Before, `--rate 0` panicked inside the
    /// load generator with the other targets' processes left stopped.
    #[test]
    fn options_that_cannot_run_are_refused_up_front() {
        let spec_of = |args: &[&str]| {
            let mut all = vec![
                "dpbench",
                "test",
                "latency",
                "--target",
                "name=dpd,host=127.0.0.1,p256=443",
            ];
            all.extend_from_slice(args);
            match Cli::try_parse_from(all).expect("parses").cmd {
                Cmd::Test { kind, common } => common.spec(kind, None).map(|_| ()),
                _ => unreachable!("a test"),
            }
        };
        assert!(spec_of(&["--rate", "100"]).is_ok());
        for bad in [
            &["--rate", "0"][..],
            &["--rate", "NaN"],
            &["--rate=-5"],
            &["--timeout=-1"],
            &["--timeout", "1e30"],
            &["--src", "10.0.0.25-10"],
        ] {
            let e = spec_of(bad).expect_err("refused");
            assert!(
                e.to_string().starts_with(bad[0].split('=').next().unwrap()),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn the_ceiling_is_measured_on_the_targets_core() {
        let on = |specs: &[&str]| {
            let targets: Vec<Target> = specs.iter().map(|s| Target::parse(s).unwrap()).collect();
            dut_core(&targets)
        };
        assert_eq!(on(&["name=a,core=3", "name=b,core=1"]), 3);
        assert_eq!(on(&["name=a", "name=b,core=5"]), 5);
        assert_eq!(on(&["name=a"]), 1, "the lab's DUT core when none is named");
    }
}
