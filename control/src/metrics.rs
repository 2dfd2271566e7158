//! The Prometheus text exposition (format 0.0.4) of dpd's counters: one
//! sample per engine core (label `core`), names after Prometheus'
//! conventions (`tlsdp_` prefix, `_total` for counters, base units).
//! Totals are the sums over `core`.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::api::{CoreStats, DeviceCounts, Stats};
use crate::counters::{self, Kind};

/// Counters with one value per core and label value.
type Labeled = (
    &'static str,
    &'static str,
    &'static str,
    fn(&CoreStats) -> &BTreeMap<String, u64>,
);

const LABELED: &[Labeled] = &[
    (
        "tlsdp_drops_total",
        "Frames dropped, by reason.",
        "reason",
        |c| &c.drops,
    ),
    (
        "tlsdp_tls_handshakes_by_version_total",
        "TLS handshakes by protocol version.",
        "version",
        |c| &c.tls_versions,
    ),
    (
        "tlsdp_tls_handshakes_by_suite_total",
        "TLS handshakes by cipher suite.",
        "suite",
        |c| &c.tls_suites,
    ),
    (
        "tlsdp_tls_handshakes_by_group_total",
        "TLS handshakes by key-exchange group.",
        "group",
        |c| &c.tls_groups,
    ),
    (
        "tlsdp_tls_handshakes_by_key_type_total",
        "TLS handshakes by certificate key type.",
        "key_type",
        |c| &c.tls_key_types,
    ),
    (
        "tlsdp_tls_failures_by_reason_total",
        "TLS failures by reason.",
        "reason",
        |c| &c.tls_failure_reasons,
    ),
];

fn core_label(c: &CoreStats) -> String {
    c.lcore
        .map_or_else(|| "total".to_string(), |l| l.to_string())
}

/// What the control thread knows beyond the engines' counters, for the
/// gauges alerts are written on: certificates expiring, reloads failing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigState {
    /// Each `[[cert]]` loaded: its name and its leaf's notAfter (Unix
    /// seconds).
    pub certs: Vec<(String, i64)>,
    /// Whether the last reload of the file (SIGHUP, `config reload`)
    /// applied; `None` before the first.
    pub last_reload_ok: Option<bool>,
    /// Networks on `[access] deny` and on `deny_until` now.
    pub denied: u64,
    pub denied_for_a_time: u64,
    /// Sources `[access] auto_deny` denied since start.
    pub auto_denied: u64,
    /// Connection log lines written, and records lost to write errors,
    /// since start.
    pub conn_log_written: u64,
    pub conn_log_write_failed: u64,
    /// Each pool's members ([`PoolHealth`]), as the engines last said
    /// (asked every second by the control thread); empty before.
    pub pools: Vec<PoolHealth>,
    /// Each DPDK port's device counts by port name, as last read (every
    /// second by the control thread); empty before.
    pub devices: Vec<(String, DeviceCounts)>,
    /// The node's drain phase (`serving`, `withdrawn`, `draining`,
    /// `drained`); empty before the control thread's first tick.
    pub phase: &'static str,
    /// With `[routing]`: addresses on the announce interface, and VIPs
    /// withheld.
    pub routing: Option<(u64, u64)>,
}

/// The drain phases, as `tlsdp_drain_phase` labels them.
pub const PHASES: [&str; 4] = ["serving", "withdrawn", "draining", "drained"];

/// A pool's members for the metrics: what to alert on before clients
/// fail (`tlsdp_pool_members_usable == 0`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolHealth {
    pub name: String,
    /// Members in the configuration.
    pub members: u64,
    /// Members that take new connections on every engine: up (not
    /// drained or down by the operator) and passing their health checks
    /// (all up ones, in a pool without checks).
    pub usable: u64,
}

/// The exposition of `stats` (per core) and of `config`.
pub fn render(stats: &Stats, config: &ConfigState) -> String {
    let mut out = String::with_capacity(16 * 1024);
    // The declared counters (crate::counters), one sample per core.
    let hz = stats.tsc_hz.max(1) as f64;
    let values: Vec<_> = stats.cores.iter().map(|c| c.scalars()).collect();
    for (i, info) in counters::SCALARS.iter().enumerate() {
        let name = info.metric;
        let _ = writeln!(
            out,
            "# HELP {name} {}\n# TYPE {name} {}",
            info.help,
            info.kind.metric_type()
        );
        for (c, v) in stats.cores.iter().zip(&values) {
            let v = v[i];
            let _ = match info.kind {
                Kind::Cycles => writeln!(
                    out,
                    "{name}{{core=\"{}\"}} {}",
                    core_label(c),
                    v as f64 / hz
                ),
                _ => writeln!(out, "{name}{{core=\"{}\"}} {v}", core_label(c)),
            };
        }
    }
    // The declared per-VIP counters (crate::counters), per core and VIP.
    for (i, info) in counters::VIP_SCALARS.iter().enumerate() {
        let name = info.metric;
        let _ = writeln!(
            out,
            "# HELP {name} {}\n# TYPE {name} {}",
            info.help,
            info.kind.metric_type()
        );
        for c in &stats.cores {
            for (vip, v) in &c.vips {
                let _ = writeln!(
                    out,
                    "{name}{{core=\"{}\",vip=\"{}\"}} {}",
                    core_label(c),
                    escape(vip),
                    v.scalars()[i]
                );
            }
        }
    }
    for &(name, help, label, values) in LABELED {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for c in &stats.cores {
            for (k, v) in values(c) {
                let _ = writeln!(
                    out,
                    "{name}{{core=\"{}\",{label}=\"{}\"}} {v}",
                    core_label(c),
                    escape(k)
                );
            }
        }
    }
    render_config(&mut out, config);
    out
}

fn render_config(out: &mut String, config: &ConfigState) {
    let _ = writeln!(
        out,
        "# HELP tlsdp_config_last_reload_successful Whether the last reload of the configuration file (SIGHUP, dpctl config reload) applied (1 before any).\n\
         # TYPE tlsdp_config_last_reload_successful gauge\ntlsdp_config_last_reload_successful {}",
        u8::from(config.last_reload_ok.unwrap_or(true))
    );
    let _ = writeln!(
        out,
        "# HELP tlsdp_access_denied_networks Client networks refused on every VIP: on [access] deny (lasting) and on deny_until (timed).\n\
         # TYPE tlsdp_access_denied_networks gauge\n\
         tlsdp_access_denied_networks{{kind=\"lasting\"}} {}\n\
         tlsdp_access_denied_networks{{kind=\"timed\"}} {}",
        config.denied, config.denied_for_a_time
    );
    let _ = writeln!(
        out,
        "# HELP tlsdp_access_auto_denied_total Sources [access] auto_deny put on deny_until.\n\
         # TYPE tlsdp_access_auto_denied_total counter\ntlsdp_access_auto_denied_total {}",
        config.auto_denied
    );
    let _ = writeln!(
        out,
        "# HELP tlsdp_conn_log_written_total Connection log lines written ([log] connections).\n\
         # TYPE tlsdp_conn_log_written_total counter\ntlsdp_conn_log_written_total {}\n\
         # HELP tlsdp_conn_log_write_failed_total Connection log records lost to errors writing the file.\n\
         # TYPE tlsdp_conn_log_write_failed_total counter\ntlsdp_conn_log_write_failed_total {}",
        config.conn_log_written, config.conn_log_write_failed
    );
    let _ = writeln!(
        out,
        "# HELP tlsdp_cert_not_after_seconds When each certificate expires: its leaf's notAfter, Unix seconds.\n\
         # TYPE tlsdp_cert_not_after_seconds gauge"
    );
    for (name, not_after) in &config.certs {
        let _ = writeln!(
            out,
            "tlsdp_cert_not_after_seconds{{cert=\"{}\"}} {not_after}",
            escape(name)
        );
    }
    let pool_gauges: [PoolGauge; 2] = [
        (
            "tlsdp_pool_members",
            "Members of each pool in the configuration.",
            |p| p.members,
        ),
        (
            "tlsdp_pool_members_usable",
            "Members of each pool that take new connections on every engine: up and passing their health checks (0: the pool's VIPs turn new clients away).",
            |p| p.usable,
        ),
    ];
    for (name, help, value) in pool_gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for p in &config.pools {
            let _ = writeln!(out, "{name}{{pool=\"{}\"}} {}", escape(&p.name), value(p));
        }
    }
    render_devices(out, &config.devices);
    if !config.phase.is_empty() {
        let _ = writeln!(
            out,
            "# HELP tlsdp_drain_phase The node's drain phase: 1 for the one it is in (serving: in service).\n\
             # TYPE tlsdp_drain_phase gauge"
        );
        for phase in PHASES {
            let _ = writeln!(
                out,
                "tlsdp_drain_phase{{phase=\"{phase}\"}} {}",
                u8::from(phase == config.phase)
            );
        }
    }
    if let Some((announced, withheld)) = config.routing {
        let _ = writeln!(
            out,
            "# HELP tlsdp_routing_announced_addresses VIP addresses on the announce interface ([routing]).\n\
             # TYPE tlsdp_routing_announced_addresses gauge\ntlsdp_routing_announced_addresses {announced}\n\
             # HELP tlsdp_routing_withheld_vips VIPs not announced ([routing]): disabled, draining, no usable member, no link, an engine stopped.\n\
             # TYPE tlsdp_routing_withheld_vips gauge\ntlsdp_routing_withheld_vips {withheld}"
        );
    }
}

/// A per-port device counter: its name, its help and its value.
type DeviceCounter = (&'static str, &'static str, fn(&DeviceCounts) -> u64);

const DEVICE_COUNTERS: [DeviceCounter; 8] = [
    (
        "tlsdp_port_rx_frames_total",
        "Frames the port's device received.",
        |d| d.rx_packets,
    ),
    (
        "tlsdp_port_rx_bytes_total",
        "Bytes the port's device received.",
        |d| d.rx_bytes,
    ),
    (
        "tlsdp_port_rx_missed_total",
        "Frames the port's device dropped because its receive queues were full (engines behind); no engine counter sees them.",
        |d| d.rx_missed,
    ),
    (
        "tlsdp_port_rx_errors_total",
        "Frames the port's device received with errors.",
        |d| d.rx_errors,
    ),
    (
        "tlsdp_port_rx_no_mbuf_total",
        "Frames the port's device dropped for want of a receive buffer (mbuf).",
        |d| d.rx_no_mbuf,
    ),
    (
        "tlsdp_port_tx_frames_total",
        "Frames the port's device sent.",
        |d| d.tx_packets,
    ),
    (
        "tlsdp_port_tx_bytes_total",
        "Bytes the port's device sent.",
        |d| d.tx_bytes,
    ),
    (
        "tlsdp_port_tx_errors_total",
        "Frames the port's device failed to send.",
        |d| d.tx_errors,
    ),
];

/// The device counters of every DPDK port (none without DPDK ports).
fn render_devices(out: &mut String, devices: &[(String, DeviceCounts)]) {
    if devices.is_empty() {
        return;
    }
    for (name, help, value) in DEVICE_COUNTERS {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (port, d) in devices {
            let _ = writeln!(out, "{name}{{port=\"{}\"}} {}", escape(port), value(d));
        }
    }
}

/// A per-pool gauge: its name, its help and its value for a pool.
type PoolGauge = (&'static str, &'static str, fn(&PoolHealth) -> u64);

/// Label values: backslash, quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::VipCounters;

    #[test]
    fn families_are_typed_once_and_samples_labelled_by_core() {
        let mut c = CoreStats {
            lcore: Some(1),
            rx_packets: 7,
            tls_handshakes: 3,
            busy_cycles: 2_000_000_000,
            ..CoreStats::default()
        };
        c.tls_versions.insert("TLSv1.3".into(), 3);
        c.drops.insert("malformed".into(), 2);
        c.vips.insert(
            "web".into(),
            VipCounters {
                connections: 5,
                active: 1,
                ..VipCounters::default()
            },
        );
        let stats = Stats {
            cores: vec![
                c.clone(),
                CoreStats {
                    lcore: Some(2),
                    ..c
                },
            ],
            total: CoreStats::default(),
            tsc_hz: 1_000_000_000,
        };
        let text = render(&stats, &ConfigState::default());
        assert!(text.contains("tlsdp_rx_packets_total{core=\"1\"} 7\n"));
        assert!(text.contains("tlsdp_rx_packets_total{core=\"2\"} 7\n"));
        assert!(text
            .contains("tlsdp_tls_handshakes_by_version_total{core=\"1\",version=\"TLSv1.3\"} 3\n"));
        assert!(text.contains("tlsdp_drops_total{core=\"2\",reason=\"malformed\"} 2\n"));
        assert!(text.contains("tlsdp_busy_seconds_total{core=\"1\"} 2\n"));
        assert!(text.contains("# TYPE tlsdp_tcp_connections gauge\n"));
        assert!(text.contains("# TYPE tlsdp_tcp_time_wait gauge\n"));
        assert!(text.contains("tlsdp_vip_connections_total{core=\"2\",vip=\"web\"} 5\n"));
        assert!(text.contains("tlsdp_vip_connections{core=\"1\",vip=\"web\"} 1\n"));
        assert_eq!(text.matches("# TYPE tlsdp_rx_packets_total ").count(), 1);
        assert_eq!(escape("a\"b\\c"), "a\\\"b\\\\c");
    }

    #[test]
    fn certificates_expiry_and_reloads_are_gauges() {
        let stats = Stats {
            cores: Vec::new(),
            total: CoreStats::default(),
            tsc_hz: 1,
        };
        let mut state = ConfigState {
            certs: vec![("web".into(), 1_790_000_000), ("a\"b".into(), 5)],
            last_reload_ok: None,
            denied: 3,
            denied_for_a_time: 2,
            auto_denied: 7,
            conn_log_written: 11,
            conn_log_write_failed: 2,
            pools: vec![
                PoolHealth {
                    name: "web".into(),
                    members: 3,
                    usable: 2,
                },
                PoolHealth {
                    name: "dead".into(),
                    members: 1,
                    usable: 0,
                },
            ],
            devices: Vec::new(),
            phase: "",
            routing: None,
        };
        let text = render(&stats, &state);
        assert!(
            text.contains("# TYPE tlsdp_pool_members gauge\ntlsdp_pool_members{pool=\"web\"} 3\n")
        );
        assert!(text.contains("# TYPE tlsdp_pool_members_usable gauge\n"));
        assert!(text.contains("tlsdp_pool_members_usable{pool=\"web\"} 2\n"));
        assert!(text.contains("tlsdp_pool_members_usable{pool=\"dead\"} 0\n"));
        assert!(text.contains("# TYPE tlsdp_cert_not_after_seconds gauge\n"));
        assert!(text.contains("tlsdp_cert_not_after_seconds{cert=\"web\"} 1790000000\n"));
        assert!(text.contains("tlsdp_cert_not_after_seconds{cert=\"a\\\"b\"} 5\n"));
        assert!(text.contains("tlsdp_config_last_reload_successful 1\n"));
        assert!(text.contains("# TYPE tlsdp_access_denied_networks gauge\n"));
        assert!(text.contains("tlsdp_access_denied_networks{kind=\"lasting\"} 3\n"));
        assert!(text.contains("tlsdp_access_denied_networks{kind=\"timed\"} 2\n"));
        assert!(text.contains(
            "# TYPE tlsdp_access_auto_denied_total counter\ntlsdp_access_auto_denied_total 7\n"
        ));
        assert!(text.contains("\ntlsdp_conn_log_written_total 11\n"));
        assert!(text.contains("\ntlsdp_conn_log_write_failed_total 2\n"));
        state.last_reload_ok = Some(false);
        let text = render(&stats, &state);
        assert!(text.contains("tlsdp_config_last_reload_successful 0\n"));
    }

    /// The drain phase is a gauge per phase, 1 for the one the node is in;
    /// with `[routing]`, what is announced and withheld. Neither before
    /// the control thread's first tick, nor the routing gauges without
    /// `[routing]`.
    #[test]
    fn the_drain_phase_and_the_routes_are_gauges() {
        let stats = Stats {
            cores: Vec::new(),
            total: CoreStats::default(),
            tsc_hz: 1,
        };
        let mut state = ConfigState::default();
        let text = render(&stats, &state);
        assert!(!text.contains("tlsdp_drain_phase") && !text.contains("tlsdp_routing"));
        state.phase = "draining";
        let text = render(&stats, &state);
        assert!(text.contains("# TYPE tlsdp_drain_phase gauge\n"));
        assert!(
            text.contains("\ntlsdp_drain_phase{phase=\"draining\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("\ntlsdp_drain_phase{phase=\"serving\"} 0\n"),
            "{text}"
        );
        assert!(!text.contains("tlsdp_routing"));
        state.routing = Some((2, 1));
        let text = render(&stats, &state);
        assert!(
            text.contains("\ntlsdp_routing_announced_addresses 2\n"),
            "{text}"
        );
        assert!(text.contains("\ntlsdp_routing_withheld_vips 1\n"), "{text}");
    }

    /// Each DPDK port's device counts are counters labelled by port, every
    /// family typed once; a dpd without DPDK ports shows none.
    #[test]
    fn device_counts_are_counters_by_port() {
        let stats = Stats {
            cores: Vec::new(),
            total: CoreStats::default(),
            tsc_hz: 1,
        };
        let mut state = ConfigState::default();
        assert!(!render(&stats, &state).contains("tlsdp_port_"));
        let count = |n| DeviceCounts {
            rx_packets: n,
            rx_bytes: n * 100,
            rx_missed: n + 1,
            rx_errors: n + 2,
            rx_no_mbuf: n + 3,
            tx_packets: n + 4,
            tx_bytes: n + 5,
            tx_errors: n + 6,
        };
        state.devices = vec![("p0".into(), count(10)), ("p1".into(), count(20))];
        let text = render(&stats, &state);
        for (name, p0, p1) in [
            ("rx_frames", 10, 20),
            ("rx_bytes", 1000, 2000),
            ("rx_missed", 11, 21),
            ("rx_errors", 12, 22),
            ("rx_no_mbuf", 13, 23),
            ("tx_frames", 14, 24),
            ("tx_bytes", 15, 25),
            ("tx_errors", 16, 26),
        ] {
            let family = format!("tlsdp_port_{name}_total");
            assert_eq!(
                text.matches(&format!("# TYPE {family} counter\n")).count(),
                1,
                "{family}"
            );
            assert!(
                text.contains(&format!("\n{family}{{port=\"p0\"}} {p0}\n")),
                "{family}"
            );
            assert!(
                text.contains(&format!("\n{family}{{port=\"p1\"}} {p1}\n")),
                "{family}"
            );
        }
    }
}
