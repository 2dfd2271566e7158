//! Reading what the device under test spent: busy core-seconds and memory.
//!
//! Kernel peers (nginx, HAProxy, stunnel) are charged their processes' CPU
//! time (user + system, all threads, all descendants of the pids in their
//! pidfiles) plus the irq and softirq time of the DUT core, where the lab
//! steers the DUT side's receive processing (RPS). tlsdp's engines count
//! their own busy cycles: for them the busy time comes from a command or a
//! file (`cmd:` / `file:`) that prints cumulative busy seconds.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

/// Linux reports /proc times in USER_HZ, which is 100 on every architecture
/// Linux supports for userspace ABI purposes.
const USER_HZ: f64 = 100.0;

/// Where busy time comes from.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BusySource {
    /// Nothing known: busy time is not reported.
    None,
    /// Kernel peer: processes (and descendants) named by pidfiles, plus the
    /// irq + softirq time of `core`.
    Procs {
        pidfiles: Vec<PathBuf>,
        core: Option<usize>,
    },
    /// A shell command printing cumulative busy seconds (e.g. a `dpctl` call).
    Command(String),
    /// A file holding cumulative busy seconds (e.g. a stats file of `dpd`).
    File(PathBuf),
}

/// Error reading the DUT's accounting.
#[derive(Debug)]
pub enum DutError {
    Pidfile(PathBuf),
    Command(String),
    File(PathBuf),
}

impl std::fmt::Display for DutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Pidfile(p) => write!(f, "pidfile {} unreadable or no such process", p.display()),
            Self::Command(c) => write!(f, "busy command `{c}` failed or printed no number"),
            Self::File(p) => write!(f, "busy file {} unreadable or not a number", p.display()),
        }
    }
}
impl std::error::Error for DutError {}

/// One reading.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct DutSample {
    /// Cumulative busy seconds (process CPU + core softirq), if known.
    pub busy_s: Option<f64>,
    /// Resident memory of the DUT's processes, bytes.
    pub rss: Option<u64>,
    /// Kernel TCP buffer memory in the DUT's network namespace, bytes.
    pub tcp_mem: Option<u64>,
}

fn read_pids(pidfiles: &[PathBuf]) -> Result<Vec<u32>, DutError> {
    let mut roots = Vec::new();
    for p in pidfiles {
        let text = std::fs::read_to_string(p).map_err(|_| DutError::Pidfile(p.clone()))?;
        let mut any = false;
        for w in text.split_whitespace() {
            if let Ok(pid) = w.parse::<u32>() {
                roots.push(pid);
                any = true;
            }
        }
        if !any {
            return Err(DutError::Pidfile(p.clone()));
        }
    }
    // Add descendants (nginx workers, stunnel children).
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(st) = proc_stat(pid) {
                children.entry(st.ppid).or_default().push(pid);
            }
        }
    }
    let mut seen = HashSet::new();
    let mut stack = roots;
    while let Some(p) = stack.pop() {
        if seen.insert(p) {
            if let Some(c) = children.get(&p) {
                stack.extend(c);
            }
        }
    }
    let mut v: Vec<u32> = seen.into_iter().collect();
    v.sort_unstable();
    Ok(v)
}

struct ProcStat {
    ppid: u32,
    ticks: u64,
}

/// Parses /proc/PID/stat (the command name may hold spaces and parens).
fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After "comm": state(0) ppid(1) ... utime(11) stime(12)
    Some(ProcStat {
        ppid: f.get(1)?.parse().ok()?,
        ticks: f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?,
    })
}

fn proc_stat(pid: u32) -> Option<ProcStat> {
    parse_proc_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn rss_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// The kernel's TCP memory as `pid`'s `sockstat` shows it: the whole
/// machine's (the `mem` field is not per network namespace), in bytes of
/// this machine's page size.
fn tcp_mem_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/net/sockstat")).ok()?;
    parse_sockstat_mem(&s).map(|pages| pages * page_size())
}

fn parse_sockstat_mem(s: &str) -> Option<u64> {
    let line = s.lines().find(|l| l.starts_with("TCP:"))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    let i = f.iter().position(|&w| w == "mem")?;
    f.get(i + 1)?.parse().ok()
}

/// CPU seconds (user + system, all threads) this process has used.
#[must_use]
pub fn own_cpu_s() -> Option<f64> {
    proc_stat(std::process::id()).map(|s| s.ticks as f64 / USER_HZ)
}

/// CPU times of one core from /proc/stat.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CoreTimes {
    /// All non-idle ticks (user, nice, system, irq, softirq, steal).
    pub busy: u64,
    /// irq + softirq ticks.
    pub irq: u64,
    pub total: u64,
}

fn parse_core_times(stat: &str, core: usize) -> Option<CoreTimes> {
    let tag = format!("cpu{core} ");
    let line = stat.lines().find(|l| l.starts_with(&tag))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal guest guest_nice
    let g = |i: usize| f.get(i).copied().unwrap_or(0);
    let busy = g(0) + g(1) + g(2) + g(5) + g(6) + g(7);
    Some(CoreTimes {
        busy,
        irq: g(5) + g(6),
        total: busy + g(3) + g(4),
    })
}

/// Reads one core's times.
#[must_use]
pub fn core_times(core: usize) -> Option<CoreTimes> {
    parse_core_times(&std::fs::read_to_string("/proc/stat").ok()?, core)
}

/// Fraction of `core` busy between two readings.
#[must_use]
pub fn busy_fraction(a: CoreTimes, b: CoreTimes) -> f64 {
    let total = b.total.saturating_sub(a.total);
    if total == 0 {
        0.0
    } else {
        b.busy.saturating_sub(a.busy) as f64 / total as f64
    }
}

impl BusySource {
    /// Parses `pidfile:A+B@CORE`, `cmd:COMMAND`, `file:PATH` or `none`.
    ///
    /// # Errors
    /// A message naming the bad value.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s == "none" || s.is_empty() {
            Ok(Self::None)
        } else if let Some(c) = s.strip_prefix("cmd:") {
            Ok(Self::Command(c.to_string()))
        } else if let Some(f) = s.strip_prefix("file:") {
            Ok(Self::File(f.into()))
        } else {
            Err(format!(
                "busy source `{s}`: expected none, cmd:COMMAND or file:PATH"
            ))
        }
    }

    /// Takes one reading.
    ///
    /// # Errors
    /// [`DutError`] when the source cannot be read.
    pub fn sample(&self) -> Result<DutSample, DutError> {
        match self {
            Self::None => Ok(DutSample::default()),
            Self::Procs { pidfiles, core } => {
                let pids = read_pids(pidfiles)?;
                let ticks: u64 = pids
                    .iter()
                    .filter_map(|&p| proc_stat(p))
                    .map(|s| s.ticks)
                    .sum();
                let irq = core.and_then(core_times).map_or(0, |c| c.irq);
                let rss = pids.iter().filter_map(|&p| rss_bytes(p)).sum();
                Ok(DutSample {
                    busy_s: Some((ticks + irq) as f64 / USER_HZ),
                    rss: Some(rss),
                    tcp_mem: pids.first().and_then(|&p| tcp_mem_bytes(p)),
                })
            }
            Self::Command(c) => {
                let out = std::process::Command::new("sh")
                    .arg("-c")
                    .arg(c)
                    .output()
                    .map_err(|_| DutError::Command(c.clone()))?;
                let v = String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse::<f64>()
                    .map_err(|_| DutError::Command(c.clone()))?;
                Ok(DutSample {
                    busy_s: Some(v),
                    ..DutSample::default()
                })
            }
            Self::File(p) => {
                let v = std::fs::read_to_string(p)
                    .ok()
                    .and_then(|s| s.trim().parse::<f64>().ok())
                    .ok_or_else(|| DutError::File(p.clone()))?;
                Ok(DutSample {
                    busy_s: Some(v),
                    ..DutSample::default()
                })
            }
        }
    }
}

/// The page size sockstat counts in (4 KiB where it cannot be read),
/// read once.
fn page_size() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        std::fs::read_to_string("/proc/self/smaps")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("KernelPageSize:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(4096, |kb| kb * 1024)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_with_odd_comm() {
        let s = "1234 (nginx: worker (x)) S 1200 1234 1234 0 -1 4194624 100 0 0 0 250 50 0 0 20 0 1 0 100 1000 200";
        let st = parse_proc_stat(s).unwrap();
        assert_eq!(st.ppid, 1200);
        assert_eq!(st.ticks, 300);
    }

    #[test]
    fn core_times_parse() {
        let s =
            "cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 10 0 20 100 5 1 2 0 0 0\ncpu1 30 0 10 50 0 3 4 1 0 0\n";
        let c = parse_core_times(s, 1).unwrap();
        assert_eq!(
            c,
            CoreTimes {
                busy: 48,
                irq: 7,
                total: 98
            }
        );
        assert!(parse_core_times(s, 2).is_none());
    }

    #[test]
    fn sockstat_mem() {
        let s = "sockets: used 5\nTCP: inuse 3 orphan 0 tw 10 alloc 4 mem 17\nUDP: inuse 0 mem 0\n";
        assert_eq!(parse_sockstat_mem(s), Some(17));
    }

    #[test]
    fn own_process_is_readable() {
        let dir = std::env::temp_dir().join(format!("dpbench-dut-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pf = dir.join("pid");
        std::fs::write(&pf, std::process::id().to_string()).unwrap();
        let src = BusySource::Procs {
            pidfiles: vec![pf],
            core: Some(0),
        };
        let s = src.sample().unwrap();
        assert!(s.busy_s.is_some() && s.rss.unwrap() > 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn busy_source_parse() {
        assert!(matches!(
            BusySource::parse("cmd:echo 1").unwrap(),
            BusySource::Command(_)
        ));
        assert!(BusySource::parse("bogus").is_err());
        let s = BusySource::Command("echo 2.5".into()).sample().unwrap();
        assert_eq!(s.busy_s, Some(2.5));
    }
}
