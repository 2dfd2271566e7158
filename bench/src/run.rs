//! One test on one target: phases, per-second series, repeats, best and
//! median, and the 0.1 % error rule (BENCH.md).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rustls::pki_types::ServerName;

use crate::alone::Pausable;
use crate::dut::{self, DutSample};
use crate::loadgen::{
    Counter, Counters, Latencies, Load, Negotiated, Phases, Snapshot, Worker, Workload,
};
use crate::target::{KeyType, Target};
use crate::tls::{self, TlsOptions};

/// The tests dpbench runs (BENCH.md).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum TestKind {
    /// New TLS connection, full handshake, one HTTP/1.0 GET of 1 KB, close.
    Cps,
    /// Like CPS with the 107 B rip-test page from the backend pool.
    Tps,
    /// HTTP/1.1 keep-alive GETs of 1 MB over TLS.
    Throughput,
    /// Open and hold N TLS connections.
    Concurrency,
    /// New plain TCP connections with a 64 B HTTP/1.0 exchange.
    L4cps,
    /// Plain HTTP/1.1 requests, 20 per connection, 64 B.
    Rps,
    /// Handshake time and time to first byte at a fixed offered rate.
    Latency,
}

impl TestKind {
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            TestKind::Cps => "cps",
            TestKind::Tps => "tps",
            TestKind::Throughput => "throughput",
            TestKind::Concurrency => "concurrency",
            TestKind::L4cps => "l4cps",
            TestKind::Rps => "rps",
            TestKind::Latency => "latency",
        }
    }
    #[must_use]
    pub fn uses_tls(self) -> bool {
        !matches!(self, TestKind::L4cps | TestKind::Rps)
    }
    /// Unit of the headline figure.
    #[must_use]
    pub fn unit(self) -> &'static str {
        match self {
            TestKind::Cps | TestKind::L4cps => "conn/s",
            TestKind::Tps => "trans/s",
            TestKind::Throughput => "Gbit/s",
            TestKind::Concurrency => "conns held",
            TestKind::Rps => "req/s",
            TestKind::Latency => "ms p99 handshake",
        }
    }
    /// Whether a higher headline figure is better.
    #[must_use]
    pub fn higher_is_better(self) -> bool {
        self != TestKind::Latency
    }
}

/// Everything that defines one test.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TestSpec {
    pub kind: TestKind,
    /// Speak TLS (the test's default; scenarios may run a TLS test in clear).
    pub use_tls: bool,
    pub key: KeyType,
    pub tls: TlsOptions,
    pub path: String,
    pub expect_body: Option<u64>,
    pub http11: bool,
    pub reqs_per_conn: u32,
    pub load: Load,
    pub phases: Phases,
    pub timeout_s: f64,
    pub hold: bool,
    pub max_conns: Option<u64>,
    pub threads: usize,
    pub cores: Vec<usize>,
    pub sources: Vec<IpAddr>,
    pub repeat: u32,
    /// Highest error fraction a run may have and still count (0.001).
    pub tolerance: f64,
    /// Run the client on tlsdp's own stack over this DPDK port (one
    /// worker, on `bypass.core`) instead of kernel sockets.
    pub bypass: Option<crate::bypass::Bypass>,
    /// Measure the crypto ceiling of the test's handshake around each run
    /// (`--ceiling-each`; TLS cps and tps only).
    pub ceiling_each: Option<CeilingEach>,
}

/// Where and how long the crypto ceiling is measured around each run: on
/// the DUT core, with the measured target's `pause=` processes stopped
/// too, `budget` per operation ([`crate::ceiling::handshake_rate`]).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct CeilingEach {
    pub core: usize,
    pub budget: Duration,
}

impl TestSpec {
    /// BENCH.md's defaults for a test; callers override fields.
    #[must_use]
    pub fn defaults(kind: TestKind) -> Self {
        let tls = TlsOptions {
            version: tls::TlsVersion::Tls13,
            group: tls::Group::X25519,
            extra_groups: Vec::new(),
            reuse: false,
            dangerous_no_verify: false,
            ca_file: None,
            server_name: "bench.test".into(),
        };
        let phases = Phases {
            ramp_up: 2,
            sustain: 10,
            ramp_down: 1,
        };
        let mut s = TestSpec {
            kind,
            use_tls: kind.uses_tls(),
            key: KeyType::Rsa2048,
            tls,
            path: "/1k".into(),
            expect_body: Some(1024),
            http11: false,
            reqs_per_conn: 1,
            load: Load::Closed { concurrency: 32 },
            phases,
            timeout_s: 5.0,
            hold: false,
            max_conns: None,
            threads: 1,
            cores: vec![0],
            sources: Vec::new(),
            repeat: 3,
            tolerance: 0.001,
            bypass: None,
            ceiling_each: None,
        };
        match kind {
            TestKind::Cps => {}
            TestKind::Tps => {
                s.path = "/rip.html".into();
                s.expect_body = Some(107);
            }
            TestKind::Throughput => {
                s.path = "/1m".into();
                s.expect_body = Some(1 << 20);
                s.http11 = true;
                s.reqs_per_conn = 0;
                s.load = Load::Closed { concurrency: 8 };
            }
            TestKind::Concurrency => {
                s.path = "/64b".into();
                s.expect_body = Some(64);
                s.http11 = true;
                s.hold = true;
                s.max_conns = Some(5000);
                s.load = Load::Open {
                    rate: 1000.0,
                    max_inflight: 5000,
                };
                s.phases = Phases {
                    ramp_up: 5,
                    sustain: 3,
                    ramp_down: 1,
                };
            }
            TestKind::L4cps => {
                s.path = "/64b".into();
                s.expect_body = Some(64);
            }
            TestKind::Rps => {
                s.path = "/64b".into();
                s.expect_body = Some(64);
                s.http11 = true;
                s.reqs_per_conn = 20;
            }
            TestKind::Latency => {
                s.load = Load::Open {
                    rate: 200.0,
                    max_inflight: 2000,
                };
            }
        }
        s
    }

    /// One-line description for reports.
    #[must_use]
    pub fn describe(&self) -> String {
        let load = match self.load {
            Load::Closed { concurrency } => format!("{concurrency} in flight"),
            Load::Open { rate, .. } => format!("{rate}/s offered"),
        };
        let tls = if self.use_tls {
            format!(
                "TLS {} {} {}, session reuse {}, ",
                match self.tls.version {
                    tls::TlsVersion::Tls12 => "1.2",
                    tls::TlsVersion::Tls13 => "1.3",
                },
                match self.tls.group {
                    tls::Group::X25519 => "X25519",
                    tls::Group::P256 => "P-256",
                    tls::Group::P384 => "P-384",
                    tls::Group::X25519MlKem768 => "X25519MLKEM768",
                },
                self.key.name(),
                if self.tls.reuse { "on" } else { "off" }
            )
        } else {
            "plain TCP, ".into()
        };
        format!(
            "{tls}GET {} HTTP/1.{} x{}, {load}, {}+{}+{} s",
            self.path,
            u8::from(self.http11),
            if self.reqs_per_conn == 0 {
                "∞".to_string()
            } else {
                self.reqs_per_conn.to_string()
            },
            self.phases.ramp_up,
            self.phases.sustain,
            self.phases.ramp_down
        )
    }
}

/// Percentiles of one histogram, in microseconds.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Pcts {
    pub count: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Pcts {
    fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Pcts {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// Latency summary of the sustain phase.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct LatencySummary {
    pub connect: Pcts,
    pub handshake: Pcts,
    pub ttfb: Pcts,
    pub response: Pcts,
}

/// One second of a run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SeriesPoint {
    pub t: u64,
    pub phase: &'static str,
    pub conns_per_s: u64,
    pub handshakes_per_s: u64,
    pub requests_per_s: u64,
    pub gbit_per_s: f64,
    pub errors: u64,
    pub held: u64,
    pub client_busy: f64,
    pub dut_busy: Option<f64>,
}

/// One run of a test.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunResult {
    pub run: u32,
    pub sustain_s: f64,
    pub transactions_per_s: f64,
    pub handshakes_per_s: f64,
    pub requests_per_s: f64,
    pub gbit_per_s: f64,
    pub max_held: u64,
    pub totals: BTreeMap<&'static str, u64>,
    pub errors: u64,
    pub error_rate: f64,
    pub rejected: Option<String>,
    pub latency: LatencySummary,
    /// DUT busy core-seconds in the sustain phase.
    pub dut_busy_s: Option<f64>,
    /// DUT busy core-microseconds per transaction in the sustain phase (per
    /// request for `rps` and `throughput`).
    pub dut_us_per_conn: Option<f64>,
    pub client_core_busy: f64,
    /// dpbench's own CPU (all threads) per transaction in the sustain phase, µs.
    pub client_us_per_conn: Option<f64>,
    pub dut_core_busy: Option<f64>,
    pub saturated: &'static str,
    /// DUT memory growth at the most connections held: its processes' RSS
    /// plus the kernel's TCP memory, which is the whole machine's (the
    /// client's sockets too: `sockstat`'s `mem` is not per namespace).
    pub dut_mem_bytes: Option<i64>,
    pub negotiated: Negotiated,
    pub series: Vec<SeriesPoint>,
    /// The crypto ceiling (handshakes/s) measured on the DUT core right
    /// before and right after this run, `(before, after)`
    /// (`--ceiling-each`).
    pub ceiling: Option<(f64, f64)>,
}

impl RunResult {
    /// The DUT's per-core handshake rate (10^6 ÷ its busy µs per
    /// connection) over the mean of the ceilings measured around the run.
    #[must_use]
    pub fn per_core_of_ceiling(&self) -> Option<f64> {
        let (before, after) = self.ceiling?;
        let us = self.dut_us_per_conn.filter(|&u| u > 0.0)?;
        Some(1e6 / us / ((before + after) / 2.0))
    }

    /// The headline figure for this test.
    #[must_use]
    pub fn headline(&self, kind: TestKind) -> f64 {
        match kind {
            TestKind::Cps | TestKind::Tps | TestKind::L4cps => self.transactions_per_s,
            TestKind::Rps => self.requests_per_s,
            TestKind::Throughput => self.gbit_per_s,
            TestKind::Concurrency => self.max_held as f64,
            TestKind::Latency => self.latency.handshake.p99 as f64 / 1000.0,
        }
    }
}

/// All runs of one test on one target.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TestResult {
    pub test: TestKind,
    pub target: String,
    pub spec: String,
    /// Certificate key type, for TLS tests.
    pub key: Option<KeyType>,
    /// The key exchange group offered, for TLS tests (what the ceiling is
    /// looked up by).
    pub group: tls::Group,
    pub runs: Vec<RunResult>,
    /// Index into `runs` of the best accepted run.
    pub best: Option<usize>,
    pub best_value: Option<f64>,
    pub median_value: Option<f64>,
    pub unit: &'static str,
    /// Set when the test could not run at all (no port, setup failure).
    pub skipped: Option<String>,
}

impl TestResult {
    #[must_use]
    pub fn best_run(&self) -> Option<&RunResult> {
        self.best.map(|i| &self.runs[i])
    }
}

/// Which side's core was saturated (busy 90 % or more): `dut`,
/// `client`, `both`, or `neither` (then the network, the loop, or
/// something else limited the run).
#[must_use]
pub fn saturated_side(dut_busy: Option<f64>, client_busy: f64) -> &'static str {
    let dut = dut_busy.is_some_and(|d| d >= 0.9);
    match (dut, client_busy >= 0.9) {
        (true, true) => "both",
        (true, false) => "dut",
        (false, true) => "client",
        (false, false) => "neither",
    }
}

/// Why a test could not start.
#[derive(Debug)]
pub enum RunError {
    NoPort(String),
    Tls(tls::TlsSetupError),
    Thread(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoPort(m) => write!(f, "not applicable: {m}"),
            Self::Tls(e) => write!(f, "{e}"),
            Self::Thread(m) => write!(f, "worker: {m}"),
        }
    }
}
impl std::error::Error for RunError {}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

fn avg_busy(cores: &[usize], a: &[Option<dut::CoreTimes>], b: &[Option<dut::CoreTimes>]) -> f64 {
    let mut sum = 0.0;
    let mut n = 0.0;
    for i in 0..cores.len() {
        if let (Some(x), Some(y)) = (a[i], b[i]) {
            sum += dut::busy_fraction(x, y);
            n += 1.0;
        }
    }
    if n > 0.0 {
        sum / n
    } else {
        0.0
    }
}

fn mem_of(s: &DutSample) -> Option<i64> {
    match (s.rss, s.tcp_mem) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) as i64 + b.unwrap_or(0) as i64),
    }
}

/// Runs the test once.
///
/// # Errors
/// [`RunError`] when the test cannot start on this target.
pub fn run_once(
    spec: &TestSpec,
    target: &Target,
    run: u32,
    label: &str,
) -> Result<RunResult, RunError> {
    let port = if spec.use_tls {
        target.tls_port(spec.key).ok_or_else(|| {
            RunError::NoPort(format!(
                "{} has no {} TLS port",
                target.name,
                spec.key.name()
            ))
        })?
    } else {
        target.http.ok_or_else(|| {
            RunError::NoPort(format!("{} has no cleartext HTTP port", target.name))
        })?
    };
    let tls = if spec.use_tls {
        let mut opts = spec.tls.clone();
        if opts.version == tls::TlsVersion::Tls12 {
            match spec.key {
                KeyType::P256 => opts.extra_groups.push(tls::Group::P256),
                KeyType::P384 => opts.extra_groups.push(tls::Group::P384),
                KeyType::Rsa2048 => {}
            }
        }
        let cfg = tls::client_config(&opts).map_err(RunError::Tls)?;
        let name = ServerName::try_from(spec.tls.server_name.clone())
            .map_err(|_| RunError::Tls(tls::TlsSetupError::Config("bad server name".into())))?;
        Some((cfg, name))
    } else {
        None
    };
    let workload = Workload {
        addr: SocketAddr::new(target.host, port),
        sources: spec.sources.clone(),
        tls,
        host: spec.tls.server_name.clone(),
        path: spec.path.clone(),
        http11: spec.http11,
        reqs_per_conn: spec.reqs_per_conn,
        expect_body: spec.expect_body,
        timeout: Duration::from_secs_f64(spec.timeout_s),
        hold: spec.hold,
        max_conns: spec.max_conns,
        load: spec.load,
        phases: spec.phases,
    };
    let threads = if spec.bypass.is_some() {
        1
    } else {
        spec.threads.max(1)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let counters: Vec<Arc<Counters>> = (0..threads)
        .map(|_| Arc::new(Counters::default()))
        .collect();
    let mem0 = target.busy.sample().ok();
    let own_start = dut::own_cpu_s().unwrap_or(0.0);
    // Give workers a moment to start before second 0.
    let start = Instant::now() + Duration::from_millis(50);
    let mut handles = Vec::new();
    if let Some(b) = &spec.bypass {
        let (b, w, c, stop) = (
            b.clone(),
            workload.clone(),
            counters[0].clone(),
            stop.clone(),
        );
        let h = std::thread::Builder::new()
            .name("dpbench-bypass-run".into())
            .spawn(move || crate::bypass::run(&b, w, c, stop, start))
            .map_err(|e| RunError::Thread(e.to_string()))?;
        handles.push(h);
    }
    for (i, c) in counters
        .iter()
        .enumerate()
        .filter(|_| spec.bypass.is_none())
    {
        let core = spec.cores.get(i % spec.cores.len().max(1)).copied();
        let worker = Worker::new(workload.clone(), i, threads, c.clone(), stop.clone(), start);
        let h = std::thread::Builder::new()
            .name(format!("dpbench-w{i}"))
            .spawn(move || {
                if let Some(id) = core {
                    if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
                        eprintln!("dpbench: worker {i} cannot run on core {id}: unpinned");
                    }
                }
                sleep_until(start);
                worker.run()
            })
            .map_err(|e| RunError::Thread(e.to_string()))?;
        handles.push(h);
    }
    let p = spec.phases;
    let client_cores: Vec<usize> = spec.cores.iter().copied().take(threads).collect();
    let read_cores = |cs: &[usize]| cs.iter().map(|&c| dut::core_times(c)).collect::<Vec<_>>();
    sleep_until(start);
    let mut prev = Snapshot::default();
    let mut prev_client = read_cores(&client_cores);
    let mut prev_dut = target.core.and_then(dut::core_times);
    let mut series = Vec::new();
    let (mut snap_sustain0, mut snap_sustain1) = (Snapshot::default(), Snapshot::default());
    let (mut busy0, mut busy1): (Option<f64>, Option<f64>) = (None, None);
    let (mut cl0, mut cl1) = (prev_client.clone(), prev_client.clone());
    let (mut dc0, mut dc1) = (prev_dut, prev_dut);
    let mut mem_peak: Option<i64> = None;
    let mut max_held = 0;
    let tty = std::io::stderr().is_terminal();
    let (mut own0, mut own1) = (None, None);
    let sample_busy = |s: &mut Option<f64>| {
        *s = target.busy.sample().ok().and_then(|x| x.busy_s);
    };
    if p.ramp_up == 0 {
        sample_busy(&mut busy0);
        own0 = dut::own_cpu_s();
    }
    let mut t = 0u64;
    let sustain_start = start + Duration::from_secs(p.ramp_up);
    let mut sustain_secs = p.sustain.max(1) as f64;
    loop {
        t += 1;
        // Wake each second, or as soon as every worker is done (a
        // count-bounded run may end before its phases do).
        let tick = start + Duration::from_secs(t);
        let mut early = false;
        while Instant::now() < tick {
            if handles.iter().all(std::thread::JoinHandle::is_finished) {
                early = true;
                break;
            }
            std::thread::sleep((tick - Instant::now()).min(Duration::from_millis(20)));
        }
        let snap = Snapshot::sum(&counters);
        let d = snap.since(&prev);
        let cl = read_cores(&client_cores);
        let du = target.core.and_then(dut::core_times);
        let client_busy = avg_busy(&client_cores, &prev_client, &cl);
        let dut_busy = match (prev_dut, du) {
            (Some(a), Some(b)) => Some(dut::busy_fraction(a, b)),
            _ => None,
        };
        max_held = max_held.max(snap.get(Counter::Held));
        let phase = p.name(t - 1);
        series.push(SeriesPoint {
            t,
            phase,
            conns_per_s: d.get(Counter::Transactions),
            handshakes_per_s: d.get(Counter::Handshakes),
            requests_per_s: d.get(Counter::Requests),
            gbit_per_s: d.get(Counter::BodyBytes) as f64 * 8.0 / 1e9,
            errors: d.errors(),
            held: d.get(Counter::Held),
            client_busy,
            dut_busy,
        });
        if tty {
            let _ = write!(
                std::io::stderr(),
                "\r\x1b[K{label} run {run} t={t:>3}s {phase:<9} {:>7} conn/s {:>7} req/s {:>6.2} Gbit/s held {:>6} err {:>4} client {:>3.0}% dut {}",
                d.get(Counter::Transactions),
                d.get(Counter::Requests),
                d.get(Counter::BodyBytes) as f64 * 8.0 / 1e9,
                snap.get(Counter::Held),
                snap.errors(),
                client_busy * 100.0,
                dut_busy.map_or("-".into(), |b| format!("{:.0}%", b * 100.0)),
            );
        }
        if t == p.ramp_up {
            snap_sustain0 = snap;
            sample_busy(&mut busy0);
            own0 = dut::own_cpu_s();
            cl0.clone_from(&cl);
            dc0 = du;
        }
        if t == p.ramp_up + p.sustain {
            snap_sustain1 = snap;
            sample_busy(&mut busy1);
            own1 = dut::own_cpu_s();
            cl1.clone_from(&cl);
            dc1 = du;
        }
        // The most memory while connections are held, sampled each second
        // of the sustain phase: at its end alone, the workers were already
        // letting them go.
        if spec.hold && t > p.ramp_up && t <= p.ramp_up + p.sustain {
            let now = target.busy.sample().ok().as_ref().and_then(mem_of);
            mem_peak = mem_peak.max(now);
        }
        if early && t <= p.ramp_up + p.sustain {
            // Ended inside the sustain phase: it ends here.
            let now = Instant::now();
            sustain_secs = now
                .saturating_duration_since(sustain_start)
                .as_secs_f64()
                .max(1e-3);
            if t <= p.ramp_up {
                snap_sustain0 = Snapshot::default();
                own0 = Some(own_start);
                sustain_secs = now.saturating_duration_since(start).as_secs_f64().max(1e-3);
            }
            snap_sustain1 = snap;
            sample_busy(&mut busy1);
            own1 = dut::own_cpu_s();
            cl1.clone_from(&cl);
            dc1 = du;
        }
        prev = snap;
        prev_client = cl;
        prev_dut = du;
        let done = handles.iter().all(std::thread::JoinHandle::is_finished);
        if (t >= p.total() || early) && done {
            break;
        }
        if t > p.total() + spec.timeout_s as u64 + 10 {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    if tty {
        let _ = writeln!(std::io::stderr());
    }
    let mut lat = Latencies::new();
    let mut negotiated = Negotiated::default();
    for h in handles {
        let r = h
            .join()
            .map_err(|_| RunError::Thread("panicked".into()))?
            .map_err(|e| RunError::Thread(e.to_string()))?;
        lat.merge(&r.lat);
        if negotiated.version.is_empty() {
            negotiated.version = r.negotiated.version;
            negotiated.suite = r.negotiated.suite;
            negotiated.group = r.negotiated.group;
        }
        negotiated.resumed_seen += r.negotiated.resumed_seen;
    }
    let total = Snapshot::sum(&counters);
    let sus = snap_sustain1.since(&snap_sustain0);
    let secs = sustain_secs;
    let errors = total.errors();
    let attempts = total.get(Counter::Transactions) + errors;
    let error_rate = if attempts == 0 {
        0.0
    } else {
        errors as f64 / attempts as f64
    };
    let kinds: Vec<String> = Counter::ERRORS
        .iter()
        .filter(|&&c| total.get(c) > 0)
        .map(|&c| format!("{} {}", total.get(c), c.name()))
        .collect();
    let rejected = if total.get(Counter::Transactions) == 0 {
        Some(format!("no transaction completed; {}", kinds.join(", ")))
    } else if error_rate > spec.tolerance {
        Some(format!(
            "errors {:.3} % > {:.1} %: {}",
            error_rate * 100.0,
            spec.tolerance * 100.0,
            kinds.join(", ")
        ))
    } else {
        None
    };
    let dut_busy_s = match (busy0, busy1) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    // Per connection for connection tests, per request where connections
    // carry many requests.
    let per = match spec.kind {
        TestKind::Rps | TestKind::Throughput => sus.get(Counter::Requests),
        _ => sus.get(Counter::Transactions),
    }
    .max(1) as f64;
    let client_core_busy = avg_busy(&client_cores, &cl0, &cl1);
    let dut_core_busy = match (dc0, dc1) {
        (Some(a), Some(b)) => Some(dut::busy_fraction(a, b)),
        _ => None,
    };
    let saturated = saturated_side(dut_core_busy, client_core_busy);
    let totals = Counter::ALL
        .iter()
        .filter(|&&c| c != Counter::Held)
        .map(|&c| (c.name(), total.get(c)))
        .collect();
    Ok(RunResult {
        run,
        sustain_s: secs,
        transactions_per_s: sus.get(Counter::Transactions) as f64 / secs,
        handshakes_per_s: sus.get(Counter::Handshakes) as f64 / secs,
        requests_per_s: sus.get(Counter::Requests) as f64 / secs,
        gbit_per_s: sus.get(Counter::BodyBytes) as f64 * 8.0 / 1e9 / secs,
        max_held,
        totals,
        errors,
        error_rate,
        rejected,
        latency: LatencySummary {
            connect: Pcts::of(&lat.connect),
            handshake: Pcts::of(&lat.handshake),
            ttfb: Pcts::of(&lat.ttfb),
            response: Pcts::of(&lat.response),
        },
        dut_busy_s,
        // Holding connections has no per-connection rate in the sustain phase.
        dut_us_per_conn: dut_busy_s.filter(|_| !spec.hold).map(|b| b * 1e6 / per),
        client_core_busy,
        client_us_per_conn: match (own0, own1) {
            (Some(a), Some(b)) if !spec.hold => Some((b - a) * 1e6 / per),
            _ => None,
        },
        dut_core_busy,
        saturated,
        dut_mem_bytes: match (mem_peak, mem0.as_ref().and_then(mem_of)) {
            (Some(a), Some(b)) => Some(a - b),
            _ => None,
        },
        negotiated,
        series,
        ceiling: None,
    })
}

/// Runs the test `spec.repeat` times and picks the best and the median of
/// the accepted runs; the other targets' `pause=` processes are stopped
/// meanwhile ([`crate::alone`]).
#[must_use]
pub fn run_repeated(spec: &TestSpec, target: &Target, others: &Pausable) -> TestResult {
    let _alone = others.alone(Some(&target.name));
    let label = format!("{} {}", spec.kind.name(), target.name);
    // The ceiling around each run: before the first, after each.
    let each = spec
        .ceiling_each
        .filter(|_| spec.use_tls && matches!(spec.kind, TestKind::Cps | TestKind::Tps));
    let (key, group) = (spec.key, spec.tls.group);
    let ceiling = |each: CeilingEach| {
        let _own = others.own(&target.name);
        crate::ceiling::on_core(each.core, move || {
            crate::ceiling::handshake_rate(each.budget, group, key).ok()
        })
        .flatten()
    };
    let mut ceilings = Vec::new();
    if let Some(e) = each {
        ceilings.push(ceiling(e));
    }
    let mut res = TestResult {
        test: spec.kind,
        target: target.name.clone(),
        spec: spec.describe(),
        key: spec.use_tls.then_some(spec.key),
        group: spec.tls.group,
        runs: Vec::new(),
        best: None,
        best_value: None,
        median_value: None,
        unit: spec.kind.unit(),
        skipped: None,
    };
    for run in 1..=spec.repeat.max(1) {
        match run_once(spec, target, run, &label) {
            Ok(r) => {
                if let Some(why) = &r.rejected {
                    eprintln!("{label} run {run}: REJECTED: {why}");
                }
                res.runs.push(r);
            }
            Err(e) => {
                res.skipped = Some(e.to_string());
                return res;
            }
        }
        if let Some(e) = each {
            ceilings.push(ceiling(e));
            bracket(&ceilings, &mut res.runs);
        }
        // Let TIME-WAIT and the DUT settle between runs.
        std::thread::sleep(Duration::from_millis(500));
    }
    pick(&mut res);
    res
}

/// Gives run `i` the ceilings measured before and after it:
/// `ceilings[i]` and `ceilings[i + 1]` (a failed measurement, none).
fn bracket(ceilings: &[Option<f64>], runs: &mut [RunResult]) {
    for (i, r) in runs.iter_mut().enumerate() {
        if let (Some(Some(b)), Some(Some(a))) = (ceilings.get(i), ceilings.get(i + 1)) {
            r.ceiling = Some((*b, *a));
        }
    }
}

/// Chooses best and median among accepted runs.
pub fn pick(res: &mut TestResult) {
    let kind = res.test;
    let mut ok: Vec<(usize, f64)> = res
        .runs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.rejected.is_none())
        .map(|(i, r)| (i, r.headline(kind)))
        .collect();
    if ok.is_empty() {
        return;
    }
    ok.sort_by(|a, b| a.1.total_cmp(&b.1));
    if kind.higher_is_better() {
        ok.reverse();
    }
    res.best = Some(ok[0].0);
    res.best_value = Some(ok[0].1);
    let values: Vec<f64> = ok.iter().map(|&(_, v)| v).collect();
    res.median_value = median(&values);
}

/// The median of `sorted` (either order); `None` when it is empty.
#[must_use]
pub fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Both cores at 90 % or more is `both`, not whichever is higher by a
    /// point (BENCH.md: say which side saturated). Before, a DUT at 95 %
    /// beside a client at 96 % read `client`.
    #[test]
    fn both_saturated_sides_are_named() {
        assert_eq!(saturated_side(Some(0.95), 0.96), "both");
        assert_eq!(saturated_side(Some(0.99), 0.5), "dut");
        assert_eq!(saturated_side(Some(0.5), 0.93), "client");
        assert_eq!(saturated_side(None, 0.93), "client");
        assert_eq!(saturated_side(Some(0.5), 0.5), "neither");
    }

    pub(crate) fn fake_run(v: f64, rejected: bool) -> RunResult {
        RunResult {
            run: 0,
            sustain_s: 1.0,
            transactions_per_s: v,
            handshakes_per_s: v,
            requests_per_s: v,
            gbit_per_s: 0.0,
            max_held: 0,
            totals: BTreeMap::new(),
            errors: 0,
            error_rate: 0.0,
            rejected: rejected.then(|| "x".to_string()),
            latency: LatencySummary::default(),
            dut_busy_s: None,
            dut_us_per_conn: None,
            client_core_busy: 0.0,
            client_us_per_conn: None,
            dut_core_busy: None,
            saturated: "neither",
            dut_mem_bytes: None,
            negotiated: Negotiated::default(),
            series: vec![],
            ceiling: None,
        }
    }

    #[test]
    fn the_report_lists_each_runs_ratio_and_their_median() {
        let mut r = TestResult {
            test: TestKind::Cps,
            target: "dpd".into(),
            spec: String::new(),
            key: Some(KeyType::P256),
            group: tls::Group::X25519,
            runs: vec![
                fake_run(1.0, false),
                fake_run(2.0, false),
                fake_run(3.0, true),
            ],
            best: None,
            best_value: None,
            median_value: None,
            unit: "conn/s",
            skipped: None,
        };
        assert_eq!(crate::report::ceiling_each_markdown(&[r.clone()]), "");
        for (i, (run, us)) in r.runs.iter_mut().zip([60.0, 62.5, 50.0]).enumerate() {
            run.run = i as u32 + 1;
            run.dut_us_per_conn = Some(us);
        }
        bracket(
            &[
                Some(22_000.0),
                Some(22_000.0),
                Some(22_000.0),
                Some(22_000.0),
            ],
            &mut r.runs,
        );
        let md = crate::report::ceiling_each_markdown(&[r]);
        // 10^6 / 60 / 22,000 = 0.758; 10^6 / 62.5 / 22,000 = 0.727; the
        // rejected run is listed but not in the median.
        assert!(
            md.contains("| cps ECDSA P-256 | dpd | 1 | 60.0 | 22000 | 22000 | 0.758 | ok |"),
            "{md}"
        );
        assert!(
            md.contains("| 2 | 62.5 | 22000 | 22000 | 0.727 | ok |"),
            "{md}"
        );
        assert!(
            md.contains("| 3 | 50.0 | 22000 | 22000 | 0.909 | rejected |"),
            "{md}"
        );
        assert!(md.contains("| median of 2 | | | | **0.742** |"), "{md}");
    }

    #[test]
    fn each_run_gets_the_ceilings_measured_on_either_side() {
        let mut runs = vec![
            fake_run(1.0, false),
            fake_run(2.0, false),
            fake_run(3.0, false),
        ];
        for (r, us) in runs.iter_mut().zip([50.0, 60.0, 40.0]) {
            r.dut_us_per_conn = Some(us);
        }
        // The third run's "after" failed; a fourth ceiling for no run.
        bracket(
            &[Some(20_000.0), Some(22_000.0), Some(18_000.0)],
            &mut runs[..2],
        );
        bracket(
            &[Some(20_000.0), Some(22_000.0), Some(18_000.0), None],
            &mut runs,
        );
        assert_eq!(runs[0].ceiling, Some((20_000.0, 22_000.0)));
        assert_eq!(runs[1].ceiling, Some((22_000.0, 18_000.0)));
        assert_eq!(runs[2].ceiling, None);
        // 10^6 / 50 µs = 20,000/s over a mean ceiling of 21,000/s.
        let ratio = runs[0].per_core_of_ceiling().unwrap();
        assert!((ratio - 20_000.0 / 21_000.0).abs() < 1e-9);
        assert_eq!(runs[1].per_core_of_ceiling(), Some(1e6 / 60.0 / 20_000.0));
        assert_eq!(runs[2].per_core_of_ceiling(), None);
        // No DUT figure: no ratio.
        runs[0].dut_us_per_conn = None;
        assert_eq!(runs[0].per_core_of_ceiling(), None);
    }

    #[test]
    fn best_and_median_skip_rejected_runs() {
        let mut r = TestResult {
            test: TestKind::Cps,
            target: "t".into(),
            spec: String::new(),
            key: None,
            group: tls::Group::X25519,
            runs: vec![
                fake_run(100.0, false),
                fake_run(900.0, true),
                fake_run(120.0, false),
                fake_run(110.0, false),
            ],
            best: None,
            best_value: None,
            median_value: None,
            unit: "",
            skipped: None,
        };
        pick(&mut r);
        assert_eq!(r.best, Some(2));
        assert_eq!(r.best_value, Some(120.0));
        assert_eq!(r.median_value, Some(110.0));
    }

    #[test]
    fn every_row_of_the_runs_table_has_the_header_s_columns() {
        let r = TestResult {
            test: TestKind::Throughput,
            target: "t".into(),
            spec: String::new(),
            key: None,
            group: tls::Group::X25519,
            runs: vec![fake_run(10.0, false), fake_run(12.0, true)],
            best: None,
            best_value: None,
            median_value: None,
            unit: "Gbit/s",
            skipped: None,
        };
        let md = crate::report::runs_markdown(&[r]);
        let rows: Vec<usize> = md
            .lines()
            .filter(|l| l.starts_with('|'))
            .map(|l| l.split('|').count())
            .collect();
        assert_eq!(rows.len(), 4, "{md}");
        assert!(rows.iter().all(|&n| n == rows[0]), "{rows:?}\n{md}");
        assert!(md.contains("| client µs/conn |"), "{md}");
    }

    #[test]
    fn phases_levels() {
        let p = Phases {
            ramp_up: 2,
            sustain: 3,
            ramp_down: 2,
        };
        assert_eq!(p.level(1.0), 0.5);
        assert_eq!(p.level(3.0), 1.0);
        assert_eq!(p.level(6.0), 0.5);
        assert_eq!(p.level(8.0), 0.0);
        assert_eq!(p.name(2), "sustain");
    }
}
