//! Fuzz entry point for the control plane, shared by the cargo-fuzz target
//! `control_requests` (`dataplane/fuzz/`) and the corpus replay in the
//! normal test run (`control/tests/fuzz_corpus.rs`).
//!
//! What a control request can reach in `dpd` must never panic: a panic
//! there aborts the daemon and every connection it holds. And what
//! `dpctl config save` writes after any change `dpd` accepted must load
//! again as the same configuration, or the next restart fails at 3 a.m.

use crate::api::Request;
use crate::change;
use crate::config::Config;

/// The configuration the requests start from: TLS and plain VIPs, named
/// and in-place certificates, two pools, tickets, routing and a VLAN, so
/// that every kind of change has something to act on.
pub const BASE: &str = r#"
[eal]
lcores = [1, 2]
[[port]]
name = "p0"
device = "net_af_packet0,iface=veth-dut"
address = "10.77.0.1/24"
addresses = ["fd00:77::1/64"]
[[port.vlan]]
id = 100
address = "10.78.0.1/24"
[routing]
withdraw_quiet_ms = 500
[[cert]]
name = "web-rsa"
cert = "/etc/tlsdp/web.pem"
key = "/etc/tlsdp/web.key"
[[cert]]
name = "web-ec"
cert = "/etc/tlsdp/web-ec.pem"
key = "/etc/tlsdp/web-ec.key"
[[pool]]
name = "web"
members = [{ addr = "10.77.0.2:8080" }, { addr = "10.77.0.3:8080", weight = 2 }]
[[pool]]
name = "spare"
members = [{ addr = "10.78.0.4:8080" }]
[[vip]]
name = "https"
listen = "10.77.0.1:443"
pool = "web"
certs = ["web-rsa", "web-ec"]
tls = { versions = ["TLSv1.3"], tickets = { rotate_s = 600 } }
[[vip]]
name = "inplace"
listen = "10.77.0.1:8443"
certs = [{ cert = "/etc/tlsdp/other.pem", key = "/etc/tlsdp/other.key" }]
respond = "builtin"
[[vip]]
name = "plain"
listen = "10.77.0.1:80"
pool = "spare"
"#;

/// Each line of `data` as a control request against [`BASE`], the
/// accepted changes applied in turn; then all of `data` as a
/// configuration file. Panics (the fuzzer's finding) where a change or
/// a file is accepted whose saved form does not load back equal. Returns
/// how many changes were accepted.
pub fn requests(data: &[u8]) -> usize {
    let Ok(mut cfg) = Config::parse(BASE) else {
        panic!("fuzzing::BASE is not a valid configuration");
    };
    let mut accepted = 0;
    let mut now = jiff::Timestamp::UNIX_EPOCH;
    for line in data.split(|&b| b == b'\n') {
        let Ok(req) = serde_json::from_slice::<Request>(line) else {
            continue;
        };
        // What `dpctl` would send for it parses back the same.
        let Ok(sent) = serde_json::to_string(&req) else {
            panic!("request {req:?} does not serialise");
        };
        let again = serde_json::from_str::<Request>(&sent);
        assert!(
            again.as_ref().is_ok_and(|a| a == &req),
            "request {sent} parses back as {again:?}"
        );
        // A second a request, from a fixed time, so timed denies are
        // made, renewed and taken off as `dpd` would.
        now = now
            .checked_add(jiff::SignedDuration::from_secs(1))
            .unwrap_or(now);
        cfg.access.take_expired(now);
        if let Some(Ok(next)) = change::apply_at(&cfg, &req, now) {
            saves_and_loads_back(&next);
            cfg = next;
            accepted += 1;
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(file) = Config::parse(text) {
            saves_and_loads_back(&file);
        }
    }
    accepted
}

/// `dpctl config save`'s text of `cfg` loads as `cfg` (where in-place
/// certificates came from is kept for messages only, not saved).
fn saves_and_loads_back(cfg: &Config) {
    let text = cfg.to_toml();
    let back = match Config::parse(&text) {
        Ok(back) => back,
        Err(e) => panic!("the saved configuration does not load: {e}\n{text}"),
    };
    let mut want = cfg.clone();
    for c in &mut want.certs {
        c.origin = None;
    }
    assert!(
        back == want,
        "the saved configuration loads as another one:\n{text}\n{back:?}\n{want:?}"
    );
}
