//! The Prometheus text exposition (format 0.0.4) of dpd's counters: one
//! sample per engine core (label `core`), names after Prometheus'
//! conventions (`tlsdp_` prefix, `_total` for counters, base units).
//! Totals are the sums over `core`.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::api::{CoreStats, Stats, VipCounters};

/// Counters and gauges with one value per core.
type Scalar = (&'static str, &'static str, bool, fn(&CoreStats) -> u64);

/// (name, help, is_counter, value)
const SCALARS: &[Scalar] = &[
    ("tlsdp_rx_packets_total", "Frames received.", true, |c| {
        c.rx_packets
    }),
    ("tlsdp_rx_bytes_total", "Bytes received.", true, |c| {
        c.rx_bytes
    }),
    ("tlsdp_tx_packets_total", "Frames sent.", true, |c| {
        c.tx_packets
    }),
    ("tlsdp_tx_bytes_total", "Bytes sent.", true, |c| c.tx_bytes),
    ("tlsdp_arp_replies_total", "ARP replies sent.", true, |c| {
        c.arp_replies
    }),
    (
        "tlsdp_arp_requests_total",
        "ARP requests sent.",
        true,
        |c| c.arp_requests,
    ),
    (
        "tlsdp_icmp_echo_replies_total",
        "ICMP echo replies sent.",
        true,
        |c| c.icmp_echo_replies,
    ),
    (
        "tlsdp_tcp_accepted_total",
        "TCP connections accepted.",
        true,
        |c| c.tcp_accepted,
    ),
    (
        "tlsdp_tcp_connections",
        "TCP connections open now (every state but TIME-WAIT).",
        false,
        |c| c.tcp_active,
    ),
    (
        "tlsdp_tcp_time_wait",
        "TCP connections in TIME-WAIT now.",
        false,
        |c| c.tcp_time_wait,
    ),
    (
        "tlsdp_tcp_retransmits_total",
        "TCP segments retransmitted.",
        true,
        |c| c.tcp_retransmits,
    ),
    (
        "tlsdp_tcp_resets_sent_total",
        "TCP resets sent.",
        true,
        |c| c.tcp_resets_sent,
    ),
    (
        "tlsdp_tcp_timeouts_total",
        "TCP connections ended by a timeout.",
        true,
        |c| c.tcp_timeouts,
    ),
    (
        "tlsdp_tcp_syn_cookies_sent_total",
        "SYN cookies sent.",
        true,
        |c| c.tcp_syn_cookies_sent,
    ),
    (
        "tlsdp_tcp_syn_cookies_accepted_total",
        "Connections opened by a SYN cookie.",
        true,
        |c| c.tcp_syn_cookies_accepted,
    ),
    (
        "tlsdp_http_requests_total",
        "Requests answered by the built-in responder.",
        true,
        |c| c.http_requests,
    ),
    (
        "tlsdp_tls_handshakes_total",
        "TLS handshakes completed.",
        true,
        |c| c.tls_handshakes,
    ),
    (
        "tlsdp_tls_failures_total",
        "TLS connections failed.",
        true,
        |c| c.tls_failures,
    ),
    (
        "tlsdp_tls_abandoned_total",
        "TLS connections the client left before the handshake finished (not failures).",
        true,
        |c| c.tls_abandoned,
    ),
    (
        "tlsdp_tls_resumed_total",
        "TLS handshakes that resumed a session.",
        true,
        |c| c.tls_resumed,
    ),
    (
        "tlsdp_tls_key_updates_total",
        "TLS 1.3 KeyUpdates received.",
        true,
        |c| c.tls_key_updates,
    ),
    (
        "tlsdp_tls_renegotiations_refused_total",
        "TLS 1.2 renegotiations refused.",
        true,
        |c| c.tls_renegotiations_refused,
    ),
    (
        "tlsdp_tls_handshakes_deferred_total",
        "Times handshake work waited for the next loop iteration.",
        true,
        |c| c.tls_handshakes_deferred,
    ),
    (
        "tlsdp_proxy_backend_connects_total",
        "Backend connections opened.",
        true,
        |c| c.proxy_backend_connects,
    ),
    (
        "tlsdp_proxy_backend_failures_total",
        "Backend connects that failed (retried on another member).",
        true,
        |c| c.proxy_backend_failures,
    ),
    (
        "tlsdp_proxy_no_member_total",
        "Client connections ended for want of a pool member.",
        true,
        |c| c.proxy_no_member,
    ),
    (
        "tlsdp_health_checks_total",
        "Health checks run.",
        true,
        |c| c.health_checks,
    ),
    (
        "tlsdp_health_check_failures_total",
        "Health checks failed.",
        true,
        |c| c.health_failures,
    ),
    (
        "tlsdp_health_state_changes_total",
        "Pool members going down or up.",
        true,
        |c| c.health_changes,
    ),
    (
        "tlsdp_frames_steered_total",
        "Frames received by the engine and handed to the engine owning their flow (software RSS).",
        true,
        |c| c.frames_steered,
    ),
    (
        "tlsdp_config_version",
        "Version of the configuration the engine uses (1 at start, one up per change).",
        false,
        |c| c.config_version,
    ),
];

/// Per-VIP families: (name, help, is_counter, value).
type PerVip = (&'static str, &'static str, bool, fn(&VipCounters) -> u64);

const PER_VIP: &[PerVip] = &[
    (
        "tlsdp_vip_connections_total",
        "Connections accepted on the VIP.",
        true,
        |v| v.connections,
    ),
    (
        "tlsdp_vip_connections",
        "Connections of the VIP open now.",
        false,
        |v| v.active,
    ),
    (
        "tlsdp_vip_tls_handshakes_total",
        "TLS handshakes completed on the VIP.",
        true,
        |v| v.tls_handshakes,
    ),
    (
        "tlsdp_vip_tls_failures_total",
        "TLS connections of the VIP failed.",
        true,
        |v| v.tls_failures,
    ),
    (
        "tlsdp_vip_no_member_total",
        "Clients of the VIP ended for want of a pool member.",
        true,
        |v| v.proxy_no_member,
    ),
];

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

/// The exposition of `stats` (per core).
pub fn render(stats: &Stats) -> String {
    let mut out = String::with_capacity(16 * 1024);
    for &(name, help, counter, value) in SCALARS {
        let kind = if counter { "counter" } else { "gauge" };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for c in &stats.cores {
            let _ = writeln!(out, "{name}{{core=\"{}\"}} {}", core_label(c), value(c));
        }
    }
    let hz = stats.tsc_hz.max(1) as f64;
    for (name, help, value) in [
        (
            "tlsdp_busy_seconds_total",
            "Time the engine loop spent in iterations that did work.",
            (|c: &CoreStats| c.busy_cycles) as fn(&CoreStats) -> u64,
        ),
        (
            "tlsdp_idle_seconds_total",
            "Time the engine loop spent finding nothing to do.",
            |c: &CoreStats| c.idle_cycles,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for c in &stats.cores {
            let _ = writeln!(
                out,
                "{name}{{core=\"{}\"}} {}",
                core_label(c),
                value(c) as f64 / hz
            );
        }
    }
    for &(name, help, counter, value) in PER_VIP {
        let kind = if counter { "counter" } else { "gauge" };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for c in &stats.cores {
            for (vip, v) in &c.vips {
                let _ = writeln!(
                    out,
                    "{name}{{core=\"{}\",vip=\"{}\"}} {}",
                    core_label(c),
                    escape(vip),
                    value(v)
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
    out
}

/// Label values: backslash, quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let text = render(&stats);
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
}
