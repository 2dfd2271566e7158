//! What an engine's applications are configured with (an immutable
//! snapshot of VIPs and pools, pushed by the control thread) and what they
//! report back (pools as one engine sees them). The rings that carry them
//! are the `snapshot` module's.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crypto::session::TlsConfig;

use super::deadlines::Timeouts;
use super::pool::Pool;
use crate::net::PrefixSet;
pub use crate::stats::MAX_VIPS;

/// An immutable configuration of what the engines serve. Connections keep
/// what they started with: a TLS session its certificates, a proxied
/// connection its pool (a removed pool or member stays in the engine,
/// taking nothing new, while connections use it).
#[derive(Debug)]
pub struct Snapshot {
    /// 1 for the configuration `dpd` started with, then one up per change.
    pub version: u64,
    pub vips: Vec<VipSpec>,
    /// Pools with fresh state; engines carry their own state (connection
    /// counts, health, cursors) over by pool name and member address.
    pub pools: Vec<Pool>,
    /// Client networks refused on every VIP (`[access] deny`).
    pub deny: Arc<PrefixSet>,
    /// `deny` holds a network the last snapshot's did not: engines reset
    /// their connections from it. A list that only lost networks (a
    /// timed deny's end) has none to reset, and engines skip the pass.
    pub deny_added: bool,
    /// Where engines queue a record of each client connection as it ends
    /// (`[log] connections`; `None`: not logged).
    pub conn_log: Option<Arc<super::conn_log::ConnLogQueues>>,
    /// The ends it takes (`[log] connection_ends`; all when absent).
    pub conn_log_ends: super::conn_log::EndSet,
    /// Addresses of removed VIPs that engines keep (ARP, ND, their
    /// segments) while connections to them may be open on any engine: the
    /// control thread takes one off once no engine serves it
    /// ([`crate::snapshot::ToEngine::Serving`]).
    pub lingering: Vec<IpAddr>,
}

/// One VIP of a snapshot.
#[derive(Debug, Clone)]
pub struct VipSpec {
    pub name: String,
    /// Index of its counters (below [`MAX_VIPS`]); stable for a name.
    pub slot: u16,
    pub addr: IpAddr,
    pub port: u16,
    /// Disabled VIPs answer SYNs with a reset; their open connections go on.
    pub enabled: bool,
    pub tls: Option<TlsCopies>,
    /// The pool's name, or `None` for the built-in responder.
    pub pool: Option<String>,
    /// `(SNI, pool name)`: TLS clients asking for the name go to that
    /// pool instead (`*.domain`: one label more).
    pub routes: Vec<(String, String)>,
    /// The only client networks it takes (`None`: any).
    pub allow: Option<Arc<PrefixSet>>,
    /// How long its clients may take (handshake, request, silence).
    pub timeouts: Timeouts,
    /// What its listener admits on each engine (its share of the VIP's).
    pub limits: crate::tcp::ListenLimits,
}

/// A VIP's TLS configuration, a copy for each engine
/// ([`TlsConfig::own_copy`]): a handshake takes references to its
/// configuration, certificate and key, and with one copy for all engines
/// those reference counts were cache lines every core wrote. Each engine
/// serves from [`TlsCopies::for_engine`] with its index
/// ([`crate::engine::EngineConfig::index`]).
#[derive(Debug, Clone)]
pub struct TlsCopies(Arc<[TlsConfig]>);

impl TlsCopies {
    /// `config` for engine 0 and a copy of it for each of the other
    /// `engines - 1`.
    pub fn new(config: TlsConfig, engines: usize) -> Self {
        let copies: Vec<TlsConfig> = (1..engines).map(|_| config.own_copy()).collect();
        Self(std::iter::once(config).chain(copies).collect())
    }

    /// Engine `index`'s copy (an index past the copies shares one).
    pub fn for_engine(&self, index: usize) -> TlsConfig {
        self.0[index % self.0.len()].clone()
    }
}

/// A pool as one engine sees it.
#[derive(Debug, Clone)]
pub struct PoolView {
    pub name: String,
    /// No longer configured (kept while connections use it).
    pub retired: bool,
    pub members: Vec<MemberView>,
}

/// A member as one engine sees it.
#[derive(Debug, Clone, Copy)]
pub struct MemberView {
    pub addr: SocketAddr,
    pub removed: bool,
    pub healthy: bool,
    /// Healthy by a passed check (always, in a pool without checks).
    pub proven: bool,
    pub active: u32,
    /// Why the last check this engine ran of it failed.
    pub last_failure: Option<crate::app::health::HealthFailure>,
}
