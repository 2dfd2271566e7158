//! Run-time changes are all or nothing: the control thread and two real
//! engines on their rings, one of them stalled. A change every engine
//! cannot take changes none, and its version number is never used again.

mod common;

use common::controller::{reply, running, started, started_from, CONFIG};
use control::api::{Body, Request};
use control::config::Config;
use crypto::testcert::{self_signed, P256};
use dataplane::engine::Engine;
use dataplane::port::MemPort;

fn web_enabled(e: &Engine<MemPort>) -> bool {
    use dataplane::app::Application;
    e.app().vips().iter().any(|v| v.enabled)
}

#[test]
fn a_change_one_engine_cannot_take_changes_none_and_its_version_is_not_reused() {
    let cfg = Config::parse(CONFIG).unwrap();
    let (mut ctl, mut e0, mut e1) = started(cfg);
    let disable = Request::VipDisable { name: "web".into() };

    // Engine 1 is stalled: the change is refused and engine 0, which had
    // prepared it, never switches.
    let r = running(&mut [&mut e0], || reply(ctl.handle(&disable)));
    assert!(!r.ok, "{r:?}");
    let error = r.error.unwrap();
    assert!(
        error.contains("engine(s) 1 did not take configuration 2"),
        "{error}"
    );
    // Given up once its loop had stood still a second, not at the end of
    // the 3 s wait: the control thread has routes to withdraw and other
    // clients to serve.
    assert!(
        error.contains("engine 1 did not answer: its loop has stood still for 1s"),
        "{error}"
    );
    assert!(
        error.contains("no engine changed (configuration 1 goes on)"),
        "{error}"
    );
    assert!(web_enabled(&e0), "engine 0 kept configuration 1");
    // The stalled engine wakes: at its first tick it prepares 2 and drops
    // it (and publishes its counters). Polled until that tick has run: a
    // fixed sleep was not always long enough on a loaded machine.
    let woke = std::time::Instant::now();
    while e1.counters().config_version == 0 {
        e1.poll(common::controller::CLOCK.now());
        assert!(
            woke.elapsed() < std::time::Duration::from_secs(10),
            "no tick"
        );
    }
    assert!(web_enabled(&e1));
    assert_eq!(e0.counters().config_version, 1);
    assert_eq!(e1.counters().config_version, 1);

    // With both running, the change goes through as configuration 3.
    let r = running(&mut [&mut e0, &mut e1], || reply(ctl.handle(&disable)));
    let Some(Body::Applied(applied)) = r.body else {
        panic!("{r:?}");
    };
    assert_eq!(applied.version, 3, "2 is never used again");
    assert!(!web_enabled(&e0) && !web_enabled(&e1));
    assert_eq!(e0.counters().config_version, 3);
    assert_eq!(e1.counters().config_version, 3);
}

/// Each engine serves a TLS VIP from its own copy of the VIP's
/// configuration (`app::config::TlsCopies`): a handshake on one engine
/// writes no reference count (configuration, certificate, key) that a
/// handshake on the other writes. A change that leaves the VIP's TLS
/// inputs as they were keeps each engine's copy.
#[test]
fn engines_serve_tls_from_copies_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    self_signed(dir.path(), "web", P256, "web.test");
    let cfg = Config::parse(&format!(
        "{CONFIG}certs = [\"web\"]\n[[cert]]\nname = \"web\"\ncert = \"{d}/web.pem\"\nkey = \"{d}/web.key\"\n",
        d = dir.path().display()
    ))
    .unwrap();
    let (mut ctl, mut e0, mut e1) = started(cfg);
    let tls = |e: &Engine<MemPort>| {
        use dataplane::app::Application;
        e.app().vips()[0].tls.clone().expect("a TLS VIP")
    };
    let (t0, t1) = (tls(&e0), tls(&e1));
    assert!(!t0.shares_with(&t1), "the engines share a configuration");

    let disable = Request::VipDisable { name: "web".into() };
    let r = running(&mut [&mut e0, &mut e1], || reply(ctl.handle(&disable)));
    assert!(r.ok, "{r:?}");
    assert!(!web_enabled(&e0) && !web_enabled(&e1));
    assert!(tls(&e0).shares_with(&t0) && tls(&e1).shares_with(&t1));
    assert!(!tls(&e0).shares_with(&tls(&e1)));
}

/// A reload of the file reads every certificate again. One that reads the
/// same keeps its VIP's TLS configuration, and with it the ticket keys
/// (drawn at random per configuration without a key file: a new one would
/// stop every outstanding ticket resuming); one renewed in place gives a
/// new configuration.
#[test]
fn a_reload_keeps_tls_configurations_whose_certificates_read_the_same() {
    let dir = tempfile::tempdir().unwrap();
    self_signed(dir.path(), "web", P256, "web.test");
    let text = format!(
        "{CONFIG}certs = [\"web\"]\ntls = {{ tickets = {{ rotate_s = 600 }} }}\n\
         [[cert]]\nname = \"web\"\ncert = \"{d}/web.pem\"\nkey = \"{d}/web.key\"\n",
        d = dir.path().display()
    );
    let file = dir.path().join("dpd.toml");
    std::fs::write(&file, &text).unwrap();
    let cfg = Config::parse(&text).unwrap();
    let (mut ctl, mut e0, mut e1) = started_from(cfg, Some(file));
    let tls = |e: &Engine<MemPort>| {
        use dataplane::app::Application;
        e.app().vips()[0].tls.clone().expect("a TLS VIP")
    };
    let first = tls(&e0);
    let r = running(&mut [&mut e0, &mut e1], || ctl.reload_file());
    assert!(r.ok, "{r:?}");
    assert!(
        tls(&e0).shares_with(&first),
        "the same certificate read again gave a new configuration"
    );
    // Renewed in place: the same file names, a new key and certificate.
    self_signed(dir.path(), "web", P256, "web.test");
    let r = running(&mut [&mut e0, &mut e1], || ctl.reload_file());
    assert!(r.ok, "{r:?}");
    assert!(
        !tls(&e0).shares_with(&first),
        "the renewed certificate is not served"
    );
}

/// A certificate that expired while served, its files as they were, is
/// kept by a reload, which goes on and says so; one renewed in place
/// with an expired certificate is refused. Before, the expired one
/// refused every reload (and with it every other change).
#[test]
fn a_reload_keeps_a_served_certificate_that_expired_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    self_signed(dir.path(), "web", P256, "web.test");
    let text = format!(
        "{CONFIG}certs = [\"web\"]\n\
         [[cert]]\nname = \"web\"\ncert = \"{d}/web.pem\"\nkey = \"{d}/web.key\"\n",
        d = dir.path().display()
    );
    let file = dir.path().join("dpd.toml");
    std::fs::write(&file, &text).unwrap();
    let cfg = Config::parse(&text).unwrap();
    let (mut ctl, mut e0, mut e1) = started_from(cfg, Some(file.clone()));
    // 40 days on: the 30-day certificate has expired.
    ctl.skew_cert_clock_for_tests(40 * 86_400);
    let more = format!(
        "{text}[[vip]]\nname = \"api\"\nlisten = \"10.78.0.1:81\"\nrespond = \"builtin\"\n"
    );
    std::fs::write(&file, more).unwrap();
    let r = running(&mut [&mut e0, &mut e1], || ctl.reload_file());
    let Some(Body::Applied(applied)) = r.body else {
        panic!("{r:?}");
    };
    assert!(
        applied.change.contains("vip api added")
            && applied.change.contains("cert web:")
            && applied.change.contains("expired")
            && applied.change.contains("kept as served"),
        "{applied:?}"
    );
    // Renewed in place, but with a certificate expired too: refused.
    self_signed(dir.path(), "web", P256, "web.test");
    let r = running(&mut [&mut e0, &mut e1], || ctl.reload_file());
    assert!(!r.ok, "{r:?}");
    assert!(r.error.is_some_and(|e| e.contains("expired")));
}

/// A ticket key file is read at start, by a reload and by `tickets
/// rotate`: nodes sharing one rotate their keys by rewriting it and
/// reloading each. A reload that finds it as it was keeps the VIP's TLS
/// configuration; other changes do not read it.
#[test]
fn a_reload_reads_the_ticket_key_file_again() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    self_signed(dir.path(), "web", P256, "web.test");
    let key = dir.path().join("ticket.key");
    let write_key = |byte: u8| {
        std::fs::write(&key, [byte; 48]).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    write_key(7);
    let text = format!(
        "{CONFIG}certs = [\"web\"]\n\
         tls = {{ tickets = {{ rotate_s = 600, key_file = \"{k}\" }} }}\n\
         [[cert]]\nname = \"web\"\ncert = \"{d}/web.pem\"\nkey = \"{d}/web.key\"\n",
        d = dir.path().display(),
        k = key.display()
    );
    let file = dir.path().join("dpd.toml");
    std::fs::write(&file, &text).unwrap();
    let (mut ctl, mut e0, mut e1) = started_from(Config::parse(&text).unwrap(), Some(file));
    let tls = |e: &Engine<MemPort>| {
        use dataplane::app::Application;
        e.app().vips()[0].tls.clone().expect("a TLS VIP")
    };
    let first = tls(&e0);
    let r = running(&mut [&mut e0, &mut e1], || ctl.reload_file());
    assert!(r.ok, "{r:?}");
    assert!(tls(&e0).is(&first), "the same key file");

    write_key(9);
    let disable = Request::VipDisable { name: "web".into() };
    let r = running(&mut [&mut e0, &mut e1], || reply(ctl.handle(&disable)));
    assert!(r.ok, "{r:?}");
    assert!(tls(&e0).is(&first), "read by a reload, not by this");
    let r = running(&mut [&mut e0, &mut e1], || ctl.reload_file());
    assert!(r.ok, "{r:?}");
    let second = tls(&e0);
    assert!(!second.is(&first), "the rewritten file not read");

    // One that can no longer be read refuses the reload, naming it.
    std::fs::write(&key, [1u8; 8]).unwrap();
    let r = running(&mut [&mut e0, &mut e1], || ctl.reload_file());
    let e = r.error.unwrap_or_default();
    assert!(
        e.contains("vip[0].tls.tickets.key_file") && e.contains("at least"),
        "{e}"
    );
    assert!(tls(&e0).is(&second));
}

/// `dpctl deny add --for`: the network is denied by a change like any
/// other, and taken off by another when its time comes, once every engine
/// takes it (an engine that cannot leaves it denied, and the controller
/// tries again a second later).
#[test]
fn a_network_denied_for_a_time_is_taken_off_when_its_time_comes() {
    use jiff::{SignedDuration, Timestamp};
    let (mut ctl, mut e0, mut e1) = started(Config::parse(CONFIG).unwrap());
    let add = |prefixes: &[&str], for_s| Request::DenyAdd {
        prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
        for_s,
    };
    let start = Timestamp::now();
    for req in [
        add(&["203.0.113.7", "2001:db8::/48"], Some(60)),
        add(&["198.51.100.0/24"], None),
    ] {
        let r = running(&mut [&mut e0, &mut e1], || reply(ctl.handle(&req)));
        assert!(r.ok, "{r:?}");
    }
    let listed =
        |ctl: &mut dataplane::controller::Controller| match reply(ctl.handle(&Request::DenyList))
            .body
        {
            Some(Body::Deny(d)) => d,
            other => panic!("{other:?}"),
        };
    let d = listed(&mut ctl);
    assert_eq!(d.prefixes, ["198.51.100.0/24"]);
    let timed: Vec<&str> = d.temporary.iter().map(|t| t.prefix.as_str()).collect();
    assert_eq!(timed, ["203.0.113.7", "2001:db8::/48"]);
    let until: Timestamp = d.temporary[0].until.parse().unwrap();
    let due = start + SignedDuration::from_secs(60);
    assert!(until >= due && until <= Timestamp::now() + SignedDuration::from_secs(60));
    assert!((59..=60).contains(&d.temporary[0].left_s), "{d:?}");
    assert_eq!(e0.counters().config_version, 3);

    // Before its time, nothing; at it, with engine 1 stalled, the change
    // is refused and the networks stay denied.
    ctl.expire_denies(until - SignedDuration::from_millis(1));
    assert_eq!(listed(&mut ctl).temporary.len(), 2);
    running(&mut [&mut e0], || ctl.expire_denies(until));
    assert_eq!(listed(&mut ctl).temporary.len(), 2);
    // Not tried again within the second, then taken off.
    running(&mut [&mut e0, &mut e1], || {
        ctl.expire_denies(until + SignedDuration::from_millis(500));
    });
    assert_eq!(listed(&mut ctl).temporary.len(), 2);
    running(&mut [&mut e0, &mut e1], || {
        ctl.expire_denies(until + SignedDuration::from_secs(1));
    });
    let d = listed(&mut ctl);
    assert!(d.temporary.is_empty(), "{d:?}");
    assert_eq!(d.prefixes, ["198.51.100.0/24"], "the lasting entry stays");
    assert_eq!(e0.counters().config_version, 5, "4 was refused");
    assert_eq!(e1.counters().config_version, 5);
    let Some(Body::Config(text)) = reply(ctl.handle(&Request::ConfigShow)).body else {
        panic!("config show");
    };
    assert!(!text.contains("deny_until"), "{text}");
}

/// A reload (a renewed certificate's SIGHUP, say) keeps the timed denies
/// made at run time, and takes the file's own and its lasting list: a
/// lasting deny made at run time and not saved goes, as other run-time
/// changes do.
#[test]
fn a_reload_keeps_the_timed_denies_made_at_run_time() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{CONFIG}[access]\ndeny = [\"192.0.2.0/24\"]\n\
         deny_until = [{{ net = \"203.0.113.9\", until = \"2099-01-01T00:00:00Z\" }}]\n"
    );
    let file = dir.path().join("dpd.toml");
    std::fs::write(&file, &text).unwrap();
    let (mut ctl, mut e0, mut e1) = started_from(Config::parse(&text).unwrap(), Some(file));
    let add = |p: &str, for_s| Request::DenyAdd {
        prefixes: vec![p.into()],
        for_s,
    };
    for req in [
        add("198.51.100.7", Some(600)),
        add("198.51.100.8", None),
        add("203.0.113.9", Some(60)),
    ] {
        let r = running(&mut [&mut e0, &mut e1], || reply(ctl.handle(&req)));
        assert!(r.ok, "{r:?}");
    }
    let r = running(&mut [&mut e0, &mut e1], || ctl.reload_file());
    let Some(Body::Applied(applied)) = r.body else {
        panic!("{r:?}");
    };
    assert!(
        applied.change.contains("(1 timed denies kept)"),
        "{applied:?}"
    );
    let Some(Body::Deny(d)) = reply(ctl.handle(&Request::DenyList)).body else {
        panic!("deny list");
    };
    assert_eq!(d.prefixes, ["192.0.2.0/24"], "the file's lasting list");
    let timed: Vec<(&str, &str)> = d
        .temporary
        .iter()
        .map(|t| (t.prefix.as_str(), t.until.as_str()))
        .collect();
    assert_eq!(timed.len(), 2, "{d:?}");
    assert_eq!(
        timed[1],
        ("203.0.113.9", "2099-01-01T00:00:00Z"),
        "the file's"
    );
    assert_eq!(timed[0].0, "198.51.100.7", "kept");
    // The reply names what the reload moved: the lasting deny made at run
    // time and not saved is undone.
    assert!(
        applied.change.contains("(changed: [access])"),
        "{applied:?}"
    );
}

/// A change that leaves a VIP's `allow` list as it was hands engines the
/// same set (they see it unchanged at once: no comparison of its
/// networks, no pass over their connections); a changed list is a new
/// one. Before, every change built every list anew.
#[test]
fn an_allow_list_left_as_it_was_is_handed_on_as_it_was() {
    let text = format!("{CONFIG}allow = [\"10.0.0.0/8\", \"192.0.2.0/24\"]\n");
    let (mut ctl, mut e0, mut e1) = started_from(Config::parse(&text).unwrap(), None);
    let allow = |e: &Engine<MemPort>| {
        use dataplane::app::Application;
        e.app().vips()[0].allow.clone().expect("an allow list")
    };
    let first = allow(&e0);
    let deny = Request::DenyAdd {
        prefixes: vec!["198.51.100.0/24".into()],
        for_s: None,
    };
    let r = running(&mut [&mut e0, &mut e1], || reply(ctl.handle(&deny)));
    assert!(r.ok, "{r:?}");
    assert!(std::sync::Arc::ptr_eq(&first, &allow(&e0)));
    assert!(std::sync::Arc::ptr_eq(&first, &allow(&e1)));
    let change = Request::VipSet {
        name: "web".into(),
        change: control::api::VipChange {
            allow: Some(vec!["10.0.0.0/8".into()]),
            ..Default::default()
        },
    };
    let r = running(&mut [&mut e0, &mut e1], || reply(ctl.handle(&change)));
    assert!(r.ok, "{r:?}");
    assert!(!std::sync::Arc::ptr_eq(&first, &allow(&e0)));
    assert_eq!(allow(&e0).len(), 1);
}

/// A reload's reply names what it changed, run-time changes not saved
/// that it undoes among them; one that changes nothing says so.
#[test]
fn a_reload_says_what_it_changed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dpd.toml");
    std::fs::write(&file, CONFIG).unwrap();
    let (mut ctl, mut e0, mut e1) =
        started_from(Config::parse(CONFIG).unwrap(), Some(file.clone()));
    use dataplane::controller::Controller;
    let change = |ctl: &mut Controller, e0: &mut Engine<MemPort>, e1: &mut Engine<MemPort>| {
        let r = running(&mut [e0, e1], || ctl.reload_file());
        match r.body {
            Some(Body::Applied(a)) => a.change,
            _ => panic!("{r:?}"),
        }
    };
    let disable = Request::VipDisable { name: "web".into() };
    let level = Request::LogLevel {
        level: "debug".into(),
    };
    for req in [disable, level] {
        let r = running(&mut [&mut e0, &mut e1], || reply(ctl.handle(&req)));
        assert!(r.ok, "{r:?}");
    }
    let said = change(&mut ctl, &mut e0, &mut e1);
    assert!(
        said.ends_with("(changed: vip web changed, [log])"),
        "{said}"
    );
    assert!(web_enabled(&e0), "the file's VIP, enabled, is back");
    let said = change(&mut ctl, &mut e0, &mut e1);
    assert!(said.ends_with("(settings as they were)"), "{said}");
    let more = format!(
        "{CONFIG}[[vip]]\nname = \"api\"\nlisten = \"10.78.0.1:81\"\nrespond = \"builtin\"\n"
    );
    std::fs::write(&file, more).unwrap();
    let said = change(&mut ctl, &mut e0, &mut e1);
    assert!(said.ends_with("(changed: vip api added)"), "{said}");
}

/// An operator removes a VIP on an address of its own while a client is
/// connected to it through engine 1: the address stays dpd's on every
/// engine (the connection's segments reach it and are answered, and
/// engine 0, which answers ARP for the port and has no connection to it,
/// still answers ARP for it) until the last connection on any engine
/// ends; then the control thread takes it off every engine (a new SYN for
/// it is no longer ours, nor its ARP). Before, the address went at once
/// and the open connection's segments were dropped as not for us; then
/// each engine kept it only while its own connections lasted, so engine 0
/// stopped answering ARP for engine 1's connection.
#[test]
fn a_removed_vips_address_stays_on_every_engine_until_its_last_connection_ends() {
    use common::host::{HostConn, HostLab, HOST_IP, HOST_MAC};
    use dataplane::stats::DropReason;
    use smoltcp::wire::{ArpOperation, EthernetAddress, TcpControl};
    use std::net::Ipv4Addr;
    use std::time::{Duration, Instant};

    const EXTRA: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 10);
    let (mut ctl, first, links) = common::controller::engines(
        2,
        "[[vip]]\nname = \"extra\"\nlisten = \"10.78.0.10:80\"\nrespond = \"builtin\"\n",
    );
    let mut labs = [HostLab::new(), HostLab::new()];
    for (lab, link) in labs.iter_mut().zip(&links) {
        lab.mem.engine.set_control(link.clone());
        lab.mem.engine.apply(&first);
    }
    // Runs `f` on the control thread while both engines run.
    let with_engines = |labs: &mut [HostLab; 2], f: &mut (dyn FnMut() + Send)| {
        std::thread::scope(|s| {
            let asked = s.spawn(f);
            while !asked.is_finished() {
                for lab in labs.iter_mut() {
                    lab.advance(Duration::from_millis(1));
                }
            }
            asked.join().unwrap();
        });
    };
    // Whether engine 0 answers an ARP request for EXTRA.
    let arp_answered = |lab: &mut HostLab| {
        let request = common::arp_frame(
            ArpOperation::Request,
            HOST_MAC,
            HOST_IP,
            EthernetAddress::BROADCAST,
            EXTRA,
        );
        let sent = lab.mem.exchange(vec![request]);
        sent.iter()
            .any(|f| common::arp_reply_from(f) == Some(EXTRA))
    };
    assert!(arp_answered(&mut labs[0]));

    let mut c = HostConn::client(41_000, 80, 9_000);
    let syn = c.next(TcpControl::Syn, b"");
    c.absorb(&labs[1].exchange_to(EXTRA, &[syn]));
    let ack = c.next(TcpControl::None, b"");
    let head = c.next(TcpControl::None, b"GET /bytes/5 HTTP/1.1\r\n");
    c.absorb(&labs[1].exchange_to(EXTRA, &[ack, head]));

    // `dpctl vip remove extra`, the engines polled until it is applied.
    let remove = Request::VipRemove {
        name: "extra".into(),
    };
    let mut r = None;
    with_engines(&mut labs, &mut || r = Some(reply(ctl.handle(&remove))));
    assert!(r.as_ref().is_some_and(|r| r.ok), "{r:?}");
    assert_eq!(ctl.lingering(), [std::net::IpAddr::V4(EXTRA)]);
    // The control thread's ticks ask the engines: engine 1 still serves it.
    let t0 = Instant::now();
    for k in 1..=3 {
        with_engines(&mut labs, &mut || ctl.tick(t0 + Duration::from_secs(k)));
    }
    assert_eq!(ctl.lingering(), [std::net::IpAddr::V4(EXTRA)]);
    assert!(
        arp_answered(&mut labs[0]),
        "engine 0 answers ARP for engine 1's connection"
    );

    // The connection goes on: the rest of its request is answered.
    let rest = c.next(TcpControl::None, b"Host: t\r\n\r\n");
    c.absorb(&labs[1].exchange_to(EXTRA, &[rest]));
    let text = String::from_utf8_lossy(&c.received);
    assert!(text.starts_with("HTTP/1.1 200"), "answered: {text:?}");
    // It ends (the client resets); at the next tick the address goes.
    let rst = c.next(TcpControl::Rst, b"");
    labs[1].exchange_to(EXTRA, &[rst]);
    with_engines(&mut labs, &mut || ctl.tick(t0 + Duration::from_secs(4)));
    assert!(ctl.lingering().is_empty());
    assert!(!arp_answered(&mut labs[0]), "no longer ours");
    let before = labs[1].mem.dropped(DropReason::NotForUs);
    let mut late = HostConn::client(41_001, 80, 19_000);
    let syn = late.next(TcpControl::Syn, b"");
    let out = labs[1].exchange_to(EXTRA, &[syn]);
    assert!(
        out.is_empty(),
        "no answer for an address no longer ours: {out:?}"
    );
    assert_eq!(labs[1].mem.dropped(DropReason::NotForUs), before + 1);
}

/// A removed VIP's open connections keep its timeouts: a keep-alive
/// client of a VIP with a 3 s request timeout, removed while it is open,
/// is reset 3 s after its answer is delivered. Before, a connection whose
/// VIP was gone took the built-in defaults at its next wait (30 s for a
/// request: ten times what its VIP allowed).
#[test]
fn a_removed_vips_connections_keep_its_timeouts() {
    use common::host::{HostConn, HostLab};
    use smoltcp::wire::TcpControl;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    const EXTRA: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 10);
    let (mut ctl, first, link) = common::controller::one_engine(
        "[[vip]]\nname = \"extra\"\nlisten = \"10.78.0.10:80\"\nrespond = \"builtin\"\nrequest_timeout_ms = 3000\n",
    );
    let mut lab = HostLab::new();
    lab.mem.engine.set_control(link);
    lab.mem.engine.apply(&first);

    let mut c = HostConn::client(41_100, 80, 9_000);
    let syn = c.next(TcpControl::Syn, b"");
    c.absorb(&lab.exchange_to(EXTRA, &[syn]));
    let get = c.next(TcpControl::Psh, b"GET /bytes/5 HTTP/1.1\r\nHost: t\r\n\r\n");
    c.absorb(&lab.exchange_to(EXTRA, &[get]));
    assert!(String::from_utf8_lossy(&c.received).starts_with("HTTP/1.1 200"));

    let remove = Request::VipRemove {
        name: "extra".into(),
    };
    let r = std::thread::scope(|s| {
        let asked = s.spawn(|| reply(ctl.handle(&remove)));
        while !asked.is_finished() {
            lab.advance(Duration::from_millis(1));
        }
        asked.join().unwrap()
    });
    assert!(r.ok, "{r:?}");
    // The answer acknowledged: the wait for the next request begins.
    let ack = c.next(TcpControl::None, b"");
    c.absorb(&lab.exchange_to(EXTRA, &[ack]));
    let mut reset_after = None;
    for s in 1..=40 {
        c.absorb(&lab.advance(Duration::from_secs(1)));
        if c.reset {
            reset_after = Some(s);
            break;
        }
    }
    assert!(
        matches!(reset_after, Some(3 | 4)),
        "reset after {reset_after:?} s"
    );
}

/// Engines answer questions over one ring, in turn. An answer that comes
/// after its question's time was up (a stalled engine) is never taken for
/// the next question's: here an answer left from an earlier `sources`
/// names a client with five connections, and the next `sources` must
/// report what the engine says now (none). Before, the late answer was
/// taken, and an engine's second answer summed with its first.
#[test]
fn a_late_answer_is_never_taken_for_the_next_questions() {
    use dataplane::snapshot::{FromEngine, ToEngine};
    use dataplane::tcp::SourceCount;
    use std::sync::atomic::{AtomicBool, Ordering};

    let (mut ctl, _first, link) = common::controller::one_engine("");
    let links = [link];
    let late = SourceCount {
        source: "192.0.2.7".parse().unwrap(),
        established: 5,
        half_open: 0,
    };
    let stale = |ask| FromEngine::Sources {
        engine: 0,
        ask,
        sources: vec![late],
    };
    links[0].from_engines.push(stale(0)).unwrap();
    // The engine: answers each question (with nothing), and answers the
    // first twice, as a slow engine's duplicate would look.
    let stop = AtomicBool::new(false);
    let r = std::thread::scope(|s| {
        let link = &links[0];
        let stop = &stop;
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match link.to_engine.pop() {
                    Some(ToEngine::Sources { ask, .. }) => {
                        let _ = link.from_engines.push(stale(ask.wrapping_sub(1)));
                        let _ = link.from_engines.push(FromEngine::Sources {
                            engine: 0,
                            ask,
                            sources: Vec::new(),
                        });
                    }
                    Some(_) => {}
                    None => std::thread::yield_now(),
                }
            }
        });
        let r = reply(ctl.handle(&Request::Sources {
            vip: None,
            count: 10,
            refused: false,
        }));
        stop.store(true, Ordering::Relaxed);
        r
    });
    assert!(r.ok, "{r:?}");
    let Some(Body::Sources(sources)) = r.body else {
        panic!("{r:?}");
    };
    assert!(
        sources.is_empty(),
        "only this question's answer: {sources:?}"
    );
}

/// A capture that cannot be written is refused at once, not after its
/// whole time (up to a minute at 3 a.m.), and a timeout out of range is
/// said in the units dpctl takes.
#[test]
fn a_capture_is_refused_at_once_when_its_file_cannot_be_written() {
    let (mut ctl, _e0, _e1) = started(Config::parse(CONFIG).unwrap());
    let capture = |file: &str, timeout_ms| Request::Capture {
        port: "p0".into(),
        count: 10,
        timeout_ms,
        file: file.into(),
    };
    let started_at = std::time::Instant::now();
    let r = reply(ctl.handle(&capture("/nonexistent-folder/p0.pcap", 60_000)));
    assert!(!r.ok);
    let e = r.error.unwrap();
    assert!(e.contains("folder does not exist"), "{e}");
    assert!(
        started_at.elapsed() < std::time::Duration::from_secs(1),
        "at once"
    );
    let r = reply(ctl.handle(&capture("/tmp/p0.pcap", 120_000)));
    let e = r.error.unwrap();
    assert!(e.contains("--timeout 1 to 60"), "{e}");
    // A folder where the file would go, a name too long for its
    // temporary: refused at once too (before, after the whole capture).
    let dir = tempfile::tempdir().unwrap();
    let long = dir.path().join("x".repeat(250));
    for (file, why) in [(dir.path().to_path_buf(), "folder"), (long, "too long")] {
        let started_at = std::time::Instant::now();
        let r = reply(ctl.handle(&capture(file.to_str().unwrap(), 60_000)));
        let e = r.error.unwrap_or_default();
        assert!(e.contains("cannot write"), "{why}: {e}");
        assert!(
            started_at.elapsed() < std::time::Duration::from_secs(1),
            "{why}"
        );
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing left"
    );
    // An existing file that is not a capture (a typo naming the
    // configuration) is refused and left as it was; an old capture, or an
    // empty file, may be replaced.
    let config = dir.path().join("dpd.toml");
    std::fs::write(&config, "[eal]\n").unwrap();
    let r = reply(ctl.handle(&capture(config.to_str().unwrap(), 1_000)));
    let e = r.error.unwrap_or_default();
    assert!(e.contains("is not a pcap file"), "{e}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "[eal]\n");
    let old = dir.path().join("old.pcap");
    std::fs::write(&old, 0xa1b2_c3d4u32.to_le_bytes()).unwrap();
    let empty = dir.path().join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    for file in [old, empty] {
        let r = reply(ctl.handle(&capture(file.to_str().unwrap(), 1)));
        let e = r.error.unwrap_or_default();
        assert!(!e.contains("exists"), "{}: {e}", file.display());
    }
}

/// A member removed while its health check waits on a backend that
/// accepted and never answers: the check's connection is reset at the
/// next tick. Before, removing the member forgot the check (and its
/// timeout) but not its connection, which stayed open until TCP's idle
/// timeout (300 s); likewise for a retired pool or a check taken away.
#[test]
fn a_removed_members_health_check_is_reset_not_left_open() {
    use common::host::{HostConn, HostLab};
    use smoltcp::wire::TcpControl;
    use std::time::Duration;

    let (mut ctl, first, link) = common::controller::one_engine(
        "[[vip]]\nname = \"app\"\nlisten = \"10.78.0.1:8080\"\npool = \"web\"\n\
         [[pool]]\nname = \"web\"\nmembers = [{ addr = \"10.78.0.2:8081\" }, { addr = \"10.78.0.2:8082\" }]\n\
         health = { kind = \"http\", interval_ms = 10000, timeout_ms = 10000, rise = 1, fall = 2 }\n",
    );
    let mut lab = HostLab::new();
    lab.mem.engine.set_control(link);
    lab.mem.engine.apply(&first);
    // The checks' SYNs: 8081's is accepted, and its request never answered.
    let mut probe = None;
    for _ in 0..1000 {
        let out = lab.advance(Duration::from_millis(1));
        if let Some(syn) = out
            .iter()
            .find(|s| s.control == TcpControl::Syn && s.dst_port == 8081)
        {
            probe = Some(HostConn::accepted(syn, 5_000));
            break;
        }
    }
    let mut probe = probe.expect("a check of 8081");
    let syn_ack = probe.next(TcpControl::Syn, b"");
    probe.absorb(&lab.exchange(&[syn_ack]));
    assert!(
        String::from_utf8_lossy(&probe.received).starts_with("GET "),
        "the check's request: {:?}",
        String::from_utf8_lossy(&probe.received)
    );
    // `dpctl member remove web 10.78.0.2:8081`, the engine polled.
    let remove = Request::MemberRemove {
        pool: "web".into(),
        addr: "10.78.0.2:8081".into(),
    };
    let r = std::thread::scope(|s| {
        let asked = s.spawn(|| reply(ctl.handle(&remove)));
        while !asked.is_finished() {
            probe.absorb(&lab.advance(Duration::from_millis(1)));
        }
        asked.join().unwrap()
    });
    assert!(r.ok, "{r:?}");
    for _ in 0..5 {
        probe.absorb(&lab.advance(Duration::from_millis(2)));
    }
    assert!(probe.reset, "the check's connection is reset");
}
