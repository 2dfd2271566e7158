//! Health checks of pool members, run by each engine through its own TCP
//! stack: a TCP connect, or `GET path` answered with the expected status,
//! every interval; `rise` successes in a row bring a member back, `fall`
//! failures in a row take it out of the choice.

use std::time::Duration;

pub use control::config::HealthKind;

use crate::tcp::{ConnId, FlowKey};
use crate::time::Instant;

/// A pool's check.
#[derive(Debug, Clone)]
pub struct HealthCheck {
    pub kind: HealthKind,
    /// The HTTP request sent (HTTP checks).
    pub request: Vec<u8>,
    pub expect: u16,
    pub interval: Duration,
    pub timeout: Duration,
    pub rise: u32,
    pub fall: u32,
}

impl HealthCheck {
    pub fn from_config(h: &control::config::Health) -> Self {
        Self {
            kind: h.kind,
            request: format!(
                "GET {} HTTP/1.0\r\nUser-Agent: tlsdp-health\r\nConnection: close\r\n\r\n",
                h.path
            )
            .into_bytes(),
            expect: h.expect,
            interval: Duration::from_millis(u64::from(h.interval_ms)),
            timeout: Duration::from_millis(u64::from(h.timeout_ms)),
            rise: h.rise,
            fall: h.fall,
        }
    }
}

/// A member's health as this engine sees it.
#[derive(Debug, Clone)]
pub struct MemberHealth {
    /// Taken into the choice (members start healthy).
    pub healthy: bool,
    ok_streak: u32,
    fail_streak: u32,
    /// When the next check starts.
    pub next_at: Instant,
    /// The check in flight: its connection and when it fails.
    pub probe: Option<(ConnId, FlowKey, Instant)>,
    pub checks: u64,
    pub failures: u64,
}

impl Default for MemberHealth {
    fn default() -> Self {
        Self {
            healthy: true,
            ok_streak: 0,
            fail_streak: 0,
            next_at: Instant::ZERO,
            probe: None,
            checks: 0,
            failures: 0,
        }
    }
}

impl MemberHealth {
    /// Counts one check's result; `Some(healthy)` when the member's state
    /// changed.
    pub fn record(&mut self, ok: bool, check: &HealthCheck) -> Option<bool> {
        self.checks += 1;
        self.probe = None;
        if ok {
            self.ok_streak += 1;
            self.fail_streak = 0;
            if !self.healthy && self.ok_streak >= check.rise {
                self.healthy = true;
                return Some(true);
            }
        } else {
            self.failures += 1;
            self.fail_streak += 1;
            self.ok_streak = 0;
            if self.healthy && self.fail_streak >= check.fall {
                self.healthy = false;
                return Some(false);
            }
        }
        None
    }
}

/// A health-check connection's app state.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    pub pool: u16,
    pub member: u16,
}

/// The status of an HTTP response head's first line, once it is whole.
pub fn status(head: &[u8]) -> Option<u16> {
    let line = head.split(|&b| b == b'\n').next()?;
    if line.len() == head.len() && head.len() < 13 {
        return None; // not all of it yet
    }
    let text = std::str::from_utf8(line).ok()?;
    let mut parts = text.split_ascii_whitespace();
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return Some(0);
    }
    Some(parts.next().and_then(|s| s.parse().ok()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(rise: u32, fall: u32) -> HealthCheck {
        HealthCheck {
            kind: HealthKind::Tcp,
            request: Vec::new(),
            expect: 200,
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            rise,
            fall,
        }
    }

    #[test]
    fn fall_and_rise_need_streaks() {
        let c = check(2, 3);
        let mut h = MemberHealth::default();
        assert_eq!(h.record(false, &c), None);
        assert_eq!(h.record(false, &c), None);
        assert_eq!(h.record(true, &c), None, "a success breaks the streak");
        assert_eq!(h.record(false, &c), None);
        assert_eq!(h.record(false, &c), None);
        assert_eq!(h.record(false, &c), Some(false));
        assert!(!h.healthy);
        assert_eq!(h.record(true, &c), None);
        assert_eq!(h.record(true, &c), Some(true));
        assert_eq!((h.checks, h.failures), (8, 5));
    }

    #[test]
    fn status_lines() {
        assert_eq!(status(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(status(b"HTTP/1.0 503 Service Unavailable\r\n"), Some(503));
        assert_eq!(status(b"HTTP/1.1 2"), None);
        assert_eq!(status(b"SSH-2.0-OpenSSH\r\n"), Some(0));
    }
}
