//! Tuning of the TCP engine (`[tcp]` in dpd.toml).

use std::time::Duration;

/// When listeners answer SYNs with cookies instead of keeping state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynCookies {
    /// When the half-open budget (`max_half_open`) is spent.
    WhenFull,
    /// For every SYN (tests, or under known attack).
    Always,
    /// Never: SYNs beyond the budget are dropped.
    Off,
}

/// Tuning of the TCP engine.
#[derive(Debug, Clone, Copy)]
pub struct TcpConfig {
    /// Our MSS (MTU 1500 − 40).
    pub mss: u16,
    /// Our window scale shift.
    pub window_scale: u8,
    /// Most bytes buffered per connection and direction (rings start at
    /// 4 KiB and grow to this as bytes come).
    pub buffer_size: usize,
    /// Most bytes in all rings of the engine; past it rings are refused
    /// (data dropped for the peer to resend, sends wait) and SYNs dropped.
    pub buffer_memory: usize,
    /// Most connections (slots) per engine.
    pub max_conns: usize,
    /// Most connections in SYN-RECEIVED.
    pub max_half_open: usize,
    pub syn_cookies: SynCookies,
    pub initial_rto: Duration,
    pub min_rto: Duration,
    pub max_rto: Duration,
    /// Retransmissions of one segment before the connection is dropped.
    pub max_retransmits: u8,
    pub delayed_ack: Duration,
    pub handshake_timeout: Duration,
    pub idle_timeout: Duration,
    /// How long FIN-WAIT-2 waits for the peer's FIN after the ACK of ours
    /// or the peer's last data (its ACKs alone do not extend it).
    pub fin_wait2_timeout: Duration,
    pub time_wait: Duration,
    /// Most 4-tuples kept in TIME-WAIT; past it the oldest is recycled
    /// (a compact entry each, apart from `max_conns`; 0: no TIME-WAIT).
    pub max_time_wait: usize,
    /// Keepalive (RFC 9293 §3.8.4): probe an idle established connection
    /// after this long (`None`: off), every `keepalive_interval`, and give up
    /// after `keepalive_probes` unanswered probes.
    pub keepalive: Option<Duration>,
    pub keepalive_interval: Duration,
    pub keepalive_probes: u8,
    /// Most payload bytes in one segment handed to the port. Above the
    /// connection's segment size only where the port cuts segments itself
    /// (TCP segmentation offload; the engine sets it from the port); 0:
    /// one segment size.
    pub segmentation_max: u32,
    /// HyStart++ in the first slow start (RFC 9406; `hystart.rs`). On by
    /// default; off only to measure what it does.
    pub hystart: bool,
}

impl TcpConfig {
    /// Our MSS over IPv6: its header is 20 bytes longer (RFC 8200), with
    /// IPv6's minimum MTU of 1,280 as the floor (1,220).
    pub fn mss6(&self) -> u16 {
        self.mss.saturating_sub(20).max(1220)
    }
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            mss: 1460,
            window_scale: 7,
            buffer_size: 256 * 1024,
            buffer_memory: 1 << 30,
            max_conns: 65536,
            max_half_open: 4096,
            syn_cookies: SynCookies::WhenFull,
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(60),
            max_retransmits: 8,
            delayed_ack: Duration::from_millis(10),
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            fin_wait2_timeout: Duration::from_secs(60),
            time_wait: Duration::from_secs(30),
            max_time_wait: 262_144,
            keepalive: None,
            keepalive_interval: Duration::from_secs(75),
            keepalive_probes: 9,
            segmentation_max: 0,
            hystart: true,
        }
    }
}
