//! Every scalar counter of an engine, declared once. The declaration is a
//! macro that hands the list to another macro, so the per-core struct
//! (`dataplane::stats::Counters`), its publication to the control thread,
//! the API type ([`crate::api::CoreStats`]), the Prometheus names and help
//! ([`crate::metrics`]) and dpctl's fields all come from it: a counter
//! added here reaches every view, with no index to keep in step.
//!
//! Counters with a label (drops by reason, handshakes by version, ...) are
//! arrays beside these, named by the tables they index.

/// How a counter reads, and how it adds up over cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only grows; summed over cores (Prometheus `counter`).
    Counter,
    /// A level now; summed over cores (Prometheus `gauge`).
    Gauge,
    /// A version; over cores the newest (callers that need the oldest
    /// take it themselves). A gauge to Prometheus.
    Version,
    /// TSC cycles; summed; seconds to Prometheus (a counter).
    Cycles,
}

impl Kind {
    /// `a` and `b` of two cores, combined.
    pub fn combine(self, a: u64, b: u64) -> u64 {
        match self {
            Kind::Version => a.max(b),
            Kind::Counter | Kind::Gauge | Kind::Cycles => a.saturating_add(b),
        }
    }

    /// Prometheus' type for it.
    pub fn metric_type(self) -> &'static str {
        match self {
            Kind::Counter | Kind::Cycles => "counter",
            Kind::Gauge | Kind::Version => "gauge",
        }
    }
}

/// One declared counter.
#[derive(Debug, Clone, Copy)]
pub struct Scalar {
    /// Its field name in every struct (and JSON, and dpctl).
    pub field: &'static str,
    pub kind: Kind,
    /// Its Prometheus name.
    pub metric: &'static str,
    /// What it counts (Prometheus help; doc comment of the fields).
    pub help: &'static str,
}

/// Calls `$m! { field: Kind, "metric", "help"; ... }` with every scalar
/// counter, in declaration order.
#[macro_export]
macro_rules! with_counters {
    ($m:ident) => {
        $m! {
            rx_packets: Counter, "tlsdp_rx_packets_total", "Frames received.";
            rx_bytes: Counter, "tlsdp_rx_bytes_total", "Bytes received.";
            tx_packets: Counter, "tlsdp_tx_packets_total", "Frames sent.";
            tx_bytes: Counter, "tlsdp_tx_bytes_total", "Bytes sent.";
            tx_blocked: Counter, "tlsdp_tx_blocked_total", "Times TCP stopped sending for a full transmit buffer (it sends the rest later; nothing is lost).";
            arp_replies: Counter, "tlsdp_arp_replies_total", "ARP replies sent.";
            arp_requests: Counter, "tlsdp_arp_requests_total", "ARP requests sent.";
            icmp_echo_replies: Counter, "tlsdp_icmp_echo_replies_total", "ICMP echo replies sent.";
            icmpv6_echo_replies: Counter, "tlsdp_icmpv6_echo_replies_total", "ICMPv6 echo replies sent.";
            icmpv6_errors: Counter, "tlsdp_icmpv6_errors_total", "ICMPv6 Parameter Problems sent for refused IPv6 packets (RFC 8200, RFC 4443).";
            icmpv6_errors_limited: Counter, "tlsdp_icmpv6_errors_limited_total", "ICMPv6 errors not sent: over the rate limit (100 a second, bursts of 10, per port).";
            icmp_frag_needed: Counter, "tlsdp_icmp_frag_needed_total", "ICMP 'fragmentation needed' messages taken for our TCP segments (RFC 1191).";
            icmpv6_too_big: Counter, "tlsdp_icmpv6_too_big_total", "ICMPv6 Packet Too Big messages taken for our TCP segments (RFC 8201).";
            nd_solicitations: Counter, "tlsdp_nd_solicitations_total", "IPv6 Neighbor Solicitations sent.";
            nd_advertisements: Counter, "tlsdp_nd_advertisements_total", "IPv6 Neighbor Advertisements sent (answers to solicitations).";
            mld_reports: Counter, "tlsdp_mld_reports_total", "IPv6 Multicast Listener Reports sent (our solicited-node groups, for switches that snoop MLD).";
            nd_conflicts: Counter, "tlsdp_nd_conflicts_total", "IPv6 Neighbor Advertisements from another node for one of our addresses.";
            tcp_accepted: Counter, "tlsdp_tcp_accepted_total", "TCP connections that completed the handshake.";
            tcp_active: Gauge, "tlsdp_tcp_connections", "TCP connections open now (every state but TIME-WAIT).";
            tcp_client_connections: Gauge, "tlsdp_tcp_client_connections", "Client connections open now: those the VIPs took, half-open ones too (not ours to backends or health checks; what a drain waits for).";
            tcp_time_wait: Gauge, "tlsdp_tcp_time_wait", "TCP connections in TIME-WAIT now.";
            tcp_time_wait_recycled: Counter, "tlsdp_tcp_time_wait_recycled_total", "TIME-WAIT entries ended early because tcp.max_time_wait was reached (oldest first).";
            tcp_retransmits: Counter, "tlsdp_tcp_retransmits_total", "TCP segments retransmitted.";
            tcp_segmentation_offloads: Counter, "tlsdp_tcp_segmentation_offloads_total", "TCP segments of several segment sizes handed to a port that cuts them (TSO).";
            tcp_large_segments_in: Counter, "tlsdp_tcp_large_segments_in_total", "TCP segments received longer than one segment size (the port's LRO or GRO).";
            tcp_ooo_beyond_reach: Counter, "tlsdp_tcp_ooo_beyond_reach_total", "Out-of-order TCP segments dropped because they lay further past the gap than the connection may hold (twice the bytes it received in order, at least 16 KiB): one byte far ahead no longer pins a full-size ring. The peer sends them again.";
            tcp_resets_sent: Counter, "tlsdp_tcp_resets_sent_total", "TCP resets sent.";
            tcp_timeouts: Counter, "tlsdp_tcp_timeouts_total", "TCP connections ended by a timeout.";
            tcp_syn_cookies_sent: Counter, "tlsdp_tcp_syn_cookies_sent_total", "SYN cookies sent.";
            tcp_syn_cookies_accepted: Counter, "tlsdp_tcp_syn_cookies_accepted_total", "Connections opened by a SYN cookie.";
            tcp_challenge_acks: Counter, "tlsdp_tcp_challenge_acks_total", "Challenge ACKs sent for suspect RSTs, SYNs and ACKs (RFC 5961).";
            tcp_challenge_acks_limited: Counter, "tlsdp_tcp_challenge_acks_limited_total", "Challenge ACKs not sent: the connection's 10 per second were spent (RFC 5961 section 7).";
            tcp_paws_rejected: Counter, "tlsdp_tcp_paws_rejected_total", "Segments dropped for a timestamp older than the connection's (PAWS, RFC 7323).";
            tcp_timestamp_missing: Counter, "tlsdp_tcp_timestamp_missing_total", "Segments dropped for lacking the timestamp option on a connection that uses it (RFC 7323 section 3.2).";
            tcp_path_mtu_lowered: Counter, "tlsdp_tcp_path_mtu_lowered_total", "Connections whose segment size a Packet Too Big lowered (the quoted segment in flight, RFC 5927).";
            tcp_window_probes: Counter, "tlsdp_tcp_window_probes_total", "Zero-window (persist) probes sent.";
            tcp_denied_resets: Counter, "tlsdp_tcp_denied_resets_total", "Open client connections reset when their source was denied ([access] deny).";
            tcp_operator_resets: Counter, "tlsdp_tcp_operator_resets_total", "Open client connections reset at an operator's request (dpctl conn reset).";
            tcp_fin_wait2_timeouts: Counter, "tlsdp_tcp_fin_wait2_timeouts_total", "Connections we closed first reset in FIN-WAIT-2: no FIN from the peer within tcp.fin_wait2_timeout_s of the ACK of ours or its last data.";
            tcp_rto_expiries: Counter, "tlsdp_tcp_rto_expiries_total", "Retransmission timeouts (RFC 6298): losses nothing else repaired.";
            tcp_tail_loss_probes: Counter, "tlsdp_tcp_tail_loss_probes_total", "Tail loss probes sent (RFC 8985 section 7).";
            tcp_tlp_repairs: Counter, "tlsdp_tcp_tlp_repairs_total", "Tail loss probes that repaired a loss, answered with a congestion window cut (RFC 8985 section 7.4.2).";
            tcp_rack_losses: Counter, "tlsdp_tcp_rack_losses_total", "Times RACK's time rule found sent data lost (RFC 8985 section 6.2).";
            tcp_lost_retransmits: Counter, "tlsdp_tcp_lost_retransmits_total", "Retransmissions found lost again by RACK's time rule.";
            tcp_hystart_exits: Counter, "tlsdp_tcp_hystart_exits_total", "First slow starts that HyStart++ slowed on a growing round trip, before any loss (RFC 9406).";
            tcp_spurious_timeouts: Counter, "tlsdp_tcp_spurious_timeouts_total", "Retransmission timeouts that timestamps showed needless (the original was delayed, not lost; RFC 3522): go-back-N stopped and the window cut undone (RFC 4015).";
            tcp_spurious_recoveries: Counter, "tlsdp_tcp_spurious_recoveries_total", "Fast recoveries that timestamps showed needless (the path reordered; RFC 3522): the window cut undone and the reordering window widened.";
            tcp_buffer_bytes: Gauge, "tlsdp_tcp_buffer_bytes", "Bytes of the engine's TCP byte rings (in use and idle), at most tcp.buffer_memory_mib.";
            tcp_buffer_outside_bytes: Gauge, "tlsdp_tcp_buffer_outside_bytes", "Bytes TLS connections hold in buffers of their own (handshake input, decrypted data waiting, small writes), counted with the byte rings against tcp.buffer_memory_mib.";
            tcp_buffer_denied: Counter, "tlsdp_tcp_buffer_denied_total", "Byte rings (or larger ones) refused at tcp.buffer_memory_mib: received data dropped for the peer to send again, or a send that waits.";
            tcp_syn_no_memory: Counter, "tlsdp_tcp_syn_no_memory_total", "SYNs dropped because tcp.buffer_memory_mib was reached.";
            tcp_state_bytes: Gauge, "tlsdp_tcp_state_bytes", "Bytes of the engine's TCP connection state: connection slots, flow and TIME-WAIT tables, timer wheel, SACK scoreboard boards (byte rings are tlsdp_tcp_buffer_bytes). TIME-WAIT's ring and the wheel give back what a burst took; the slots and the flow table keep their peak.";
            http_requests: Counter, "tlsdp_http_requests_total", "Requests answered by the built-in responder.";
            tls_handshakes: Counter, "tlsdp_tls_handshakes_total", "TLS handshakes completed.";
            tls_failures: Counter, "tlsdp_tls_failures_total", "TLS connections failed.";
            tls_abandoned: Counter, "tlsdp_tls_abandoned_total", "TLS connections the client left before the handshake finished, with no TLS error of ours (not failures).";
            tls_resumed: Counter, "tlsdp_tls_resumed_total", "TLS handshakes that resumed a session.";
            tls_key_updates: Counter, "tlsdp_tls_key_updates_total", "TLS 1.3 KeyUpdates received.";
            tls_renegotiations_refused: Counter, "tlsdp_tls_renegotiations_refused_total", "TLS 1.2 renegotiations refused.";
            tls_handshake_timeouts: Counter, "tlsdp_tls_handshake_timeouts_total", "TLS connections reset because their handshake had not finished within the VIP's handshake_timeout_ms of the SYN.";
            request_timeouts: Counter, "tlsdp_request_timeouts_total", "Connections reset because no request head (responder) or first bytes (proxy) came within the VIP's request_timeout_ms.";
            send_timeouts: Counter, "tlsdp_send_timeouts_total", "Client connections reset because the client acknowledged none of the data waiting for it within the VIP's send_timeout_ms (it stopped reading).";
            conn_log_records: Counter, "tlsdp_conn_log_records_total", "Client connections that ended and were queued for the connection log ([log] connections).";
            conn_log_dropped: Counter, "tlsdp_conn_log_dropped_total", "Client connections that ended with the connection log's queue full: not logged.";
            tls_handshakes_deferred: Counter, "tlsdp_tls_handshakes_deferred_total", "Times handshake work waited for the next loop iteration (the per-iteration budget was spent).";
            proxy_backend_connects: Counter, "tlsdp_proxy_backend_connects_total", "Backend connections opened.";
            proxy_backend_failures: Counter, "tlsdp_proxy_backend_failures_total", "Backend connects that failed (retried on another member).";
            proxy_no_member: Counter, "tlsdp_proxy_no_member_total", "Client connections ended for want of a pool member.";
            proxy_header_no_room: Counter, "tlsdp_proxy_header_no_room_total", "Proxied pairs ended as their backend came up because its PROXY protocol header found no send ring (tcp.buffer_memory_mib reached): the client's bytes never go without it.";
            health_checks: Counter, "tlsdp_health_checks_total", "Health checks run.";
            health_failures: Counter, "tlsdp_health_check_failures_total", "Health checks failed.";
            health_checks_skipped: Counter, "tlsdp_health_checks_skipped_total", "Health checks dropped without a verdict for want of the engine's own (a full connection table, every source port in use, or, for HTTP, no send ring for the request at tcp.buffer_memory_mib): run again at their next interval.";
            health_changes: Counter, "tlsdp_health_state_changes_total", "Pool members going down or up.";
            frames_steered: Counter, "tlsdp_frames_steered_total", "Frames received by the engine and handed to the engine owning their flow (software RSS; on a port the NIC spreads, ICMP errors quoting another engine's flow).";
            neighbor_frames_shared: Counter, "tlsdp_neighbor_frames_shared_total", "Copies of ARP and Neighbor Discovery frames handed to the other engines to learn neighbours from (one per other engine; only frames to us, and ND with hop limit 255).";
            config_version: Version, "tlsdp_config_version", "Version of the configuration the engine uses (1 at start, one up per change).";
            busy_cycles: Cycles, "tlsdp_busy_seconds_total", "Time the engine loop spent in iterations that did work.";
            idle_cycles: Cycles, "tlsdp_idle_seconds_total", "Time the engine loop spent finding nothing to do, its idle sleeps included.";
            loops: Counter, "tlsdp_loop_iterations_total", "Iterations of the engine loop.";
            loop_stalls: Counter, "tlsdp_loop_stalls_total", "Iterations of the engine loop that took over a millisecond: frames waited that long (at 100GE a NIC's 4,096-descriptor receive ring fills in half of one).";
            clock_steps_back: Counter, "tlsdp_clock_steps_back_total", "Times the engine read its clock (the TSC) earlier than before: engine time was held still instead, so timers and TCP timestamps never go back.";
        }
    };
}

/// Calls `$m! { field: Kind, "metric", "help"; ... }` with every per-VIP
/// counter (labels `core` and `vip` in Prometheus), in declaration order.
#[macro_export]
macro_rules! with_vip_counters {
    ($m:ident) => {
        $m! {
            connections: Counter, "tlsdp_vip_connections_total", "Connections accepted on the VIP.";
            active: Gauge, "tlsdp_vip_connections", "Connections of the VIP open now (TIME-WAIT not counted).";
            tls_handshakes: Counter, "tlsdp_vip_tls_handshakes_total", "TLS handshakes completed on the VIP.";
            tls_failures: Counter, "tlsdp_vip_tls_failures_total", "TLS connections of the VIP failed.";
            proxy_no_member: Counter, "tlsdp_vip_no_member_total", "Clients of the VIP ended for want of a pool member.";
            handshake_timeouts: Counter, "tlsdp_vip_tls_handshake_timeouts_total", "Connections of the VIP reset at their TLS handshake deadline.";
            request_timeouts: Counter, "tlsdp_vip_request_timeouts_total", "Connections of the VIP reset at their request deadline.";
            send_timeouts: Counter, "tlsdp_vip_send_timeouts_total", "Connections of the VIP reset at their send timeout (the client stopped reading).";
            refused_conn_limit: Counter, "tlsdp_vip_refused_connection_limit_total", "SYNs to the VIP reset because its max_connections were open.";
            refused_source_rate: Counter, "tlsdp_vip_refused_source_rate_total", "SYNs to the VIP reset because their source was over max_new_per_source.";
            refused_source_conns: Counter, "tlsdp_vip_refused_source_connections_total", "SYNs to the VIP reset because their source had max_connections_per_source established.";
            refused_denied: Counter, "tlsdp_vip_refused_denied_total", "SYNs to the VIP dropped because their source is denied ([access] deny) or not on its allow list.";
        }
    };
}

macro_rules! scalar_table {
    ($($f:ident: $kind:ident, $metric:literal, $help:literal;)*) => {
        /// Every scalar counter, in declaration order.
        pub const SCALARS: &[Scalar] = &[$(Scalar {
            field: stringify!($f),
            kind: Kind::$kind,
            metric: $metric,
            help: $help,
        }),*];
    };
}
with_counters!(scalar_table);

/// How many scalar counters there are.
pub const COUNT: usize = SCALARS.len();

macro_rules! vip_table {
    ($($f:ident: $kind:ident, $metric:literal, $help:literal;)*) => {
        /// Every per-VIP counter, in declaration order.
        pub const VIP_SCALARS: &[Scalar] = &[$(Scalar {
            field: stringify!($f),
            kind: Kind::$kind,
            metric: $metric,
            help: $help,
        }),*];
    };
}
with_vip_counters!(vip_table);

/// How many per-VIP counters there are.
pub const VIP_COUNT: usize = VIP_SCALARS.len();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_follow_prometheus() {
        let mut fields: Vec<_> = SCALARS.iter().map(|s| s.field).collect();
        let mut metrics: Vec<_> = SCALARS.iter().map(|s| s.metric).collect();
        fields.sort_unstable();
        fields.dedup();
        metrics.sort_unstable();
        metrics.dedup();
        assert_eq!((fields.len(), metrics.len()), (COUNT, COUNT));
        for s in SCALARS {
            assert!(s.metric.starts_with("tlsdp_"), "{}", s.metric);
            let total = s.metric.ends_with("_total");
            assert_eq!(total, s.kind.metric_type() == "counter", "{}", s.metric);
            assert!(s.help.ends_with('.'), "{}", s.field);
        }
    }
}
