//! The four kinds of VIP on one engine, as the burst and deadline tests
//! play them: plain (the responder), TLS, proxied and proxied TLS, their
//! pool one member on the test's host.

use std::net::SocketAddrV4;

use crypto::certs::CertStore;
use crypto::policy::TlsPolicy;
use crypto::session::TlsConfig;
use crypto::testcert::{self_signed, P256};
use dataplane::app::pool::{Balance, Member, MemberState, Pool};

use super::host::{HostLab, DUT_IP, HOST_IP};

pub const PLAIN: u16 = 80;
pub const TLS: u16 = 443;
pub const PROXY: u16 = 8080;
pub const PROXY_TLS: u16 = 8443;
/// The pool member's port on the host.
pub const BACKEND: u16 = 8081;
/// VIPs in the order [`lab`] adds them: their counter slots.
pub const VIPS: [u16; 4] = [PLAIN, TLS, PROXY, PROXY_TLS];

/// A TLS configuration with a self-signed P-256 certificate for
/// `tlsdp.test`.
pub fn tls_config() -> TlsConfig {
    let dir = tempfile::tempdir().unwrap();
    let mut store = CertStore::new();
    store.add(self_signed(dir.path(), "ec", P256, "tlsdp.test"));
    TlsConfig::with_policy(store, &TlsPolicy::default()).unwrap()
}

/// The engine with the four VIPs (default timeouts).
pub fn lab() -> HostLab {
    let mut lab = HostLab::new();
    let tls = tls_config();
    let e = &mut lab.mem.engine;
    e.listen(DUT_IP, PLAIN);
    e.listen_tls(DUT_IP, TLS, tls.clone());
    let member = Member::new(SocketAddrV4::new(HOST_IP, BACKEND), 1, MemberState::Up);
    let pool = e.add_pool(Pool::new("web".into(), Balance::RoundRobin, vec![member]));
    e.listen_pool(DUT_IP, PROXY, None, pool);
    e.listen_pool(DUT_IP, PROXY_TLS, Some(tls), pool);
    lab
}

/// A pool of one member, `port` on the host, that is up, with a TCP check
/// every `interval` (`timeout` each) taking it down at the first failure
/// and back at the first pass.
pub fn checked_pool(
    name: &str,
    port: u16,
    interval: std::time::Duration,
    timeout: std::time::Duration,
) -> Pool {
    use dataplane::app::health::{HealthCheck, HealthKind};
    let member = Member::new(SocketAddrV4::new(HOST_IP, port), 1, MemberState::Up);
    let mut pool = Pool::new(name.into(), Balance::RoundRobin, vec![member]);
    pool.check = Some(HealthCheck {
        kind: HealthKind::Tcp,
        request: Vec::new(),
        expect: control::config::StatusRange::exact(200),
        interval,
        timeout,
        rise: 1,
        fall: 1,
    });
    pool
}
