//! Run-time changes to the configuration (`dpctl vip add`, `cert rotate`,
//! `member weight`, ...): each one is applied to a copy of the running
//! configuration, which is then validated as a whole. `dpd` builds the new
//! engines' snapshot from the result, or refuses the change and keeps the
//! running configuration as it was.

use crate::api::{Request, TicketsChange, VipChange};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use crate::config::{
    parse_prefix, prefix_text, CertRef, Config, ConfigError, DenyUntil, MemberState, Respond,
    TlsSettings, MAX_DENY_FOR_S,
};

/// The configuration after `req`, or `None` when `req` changes nothing
/// (a query).
///
/// # Errors
/// Unknown names, duplicates, things still in use, and anything
/// [`Config::validate`] refuses in the result; the error names the field.
pub fn apply(cfg: &Config, req: &Request) -> Option<Result<Config, ConfigError>> {
    apply_at(cfg, req, jiff::Timestamp::now())
}

/// [`apply`] at time `now` (what `deny add --for` counts from).
///
/// # Errors
/// As [`apply`].
pub fn apply_at(
    cfg: &Config,
    req: &Request,
    now: jiff::Timestamp,
) -> Option<Result<Config, ConfigError>> {
    let mut next = cfg.clone();
    let result = match req {
        Request::VipAdd { vip } => {
            if cfg.vips.iter().any(|v| v.name == vip.name) {
                Err(exists("vip", &vip.name, "a VIP"))
            } else {
                next.vips.push(vip.clone());
                next.name_certs_in_place();
                Ok(())
            }
        }
        Request::VipSet { name, change } => {
            vip_index(cfg, name).and_then(|i| set_vip(&mut next, i, change))
        }
        Request::VipRemove { name } => vip_index(cfg, name).map(|i| {
            next.vips.remove(i);
        }),
        Request::VipEnable { name } => vip_index(cfg, name).map(|i| next.vips[i].enabled = true),
        Request::VipDisable { name } => vip_index(cfg, name).map(|i| next.vips[i].enabled = false),
        Request::CertAdd { cert } => {
            if cfg.cert(&cert.name).is_some() {
                Err(exists(
                    "cert",
                    &cert.name,
                    "a certificate (replace it with cert rotate)",
                ))
            } else {
                next.certs.push(cert.clone());
                Ok(())
            }
        }
        Request::LogLevel { level } => match crate::config::check_log_level(level) {
            Ok(()) => {
                next.log.level.clone_from(level);
                Ok(())
            }
            Err(why) => Err(ConfigError::new("log.level", level, why)),
        },
        Request::DenyAdd { prefixes, for_s } => deny_add(&mut next, prefixes, *for_s, now)
            .map_err(|(p, why)| ConfigError::new("access.deny", p, why)),
        Request::DenyRemove { prefixes } => deny_remove(&mut next, prefixes)
            .map_err(|(p, why)| ConfigError::new("access.deny", p, why)),
        Request::CertRotate { cert } => match next.certs.iter_mut().find(|c| c.name == cert.name) {
            Some(c) => {
                c.cert.clone_from(&cert.cert);
                c.key.clone_from(&cert.key);
                Ok(())
            }
            None => Err(unknown("cert", &cert.name, "certificate")),
        },
        Request::CertRemove { name } => {
            if cfg.cert(name).is_none() {
                Err(unknown("cert", name, "certificate"))
            } else if let Some(v) = cfg
                .vips
                .iter()
                .find(|v| v.certs.iter().any(|c| c.name() == Some(name.as_str())))
            {
                Err(ConfigError::new(
                    "cert",
                    name,
                    format!(
                        "VIP {} serves it: remove the VIP or give it another certificate first",
                        v.name
                    ),
                ))
            } else {
                next.certs.retain(|c| &c.name != name);
                Ok(())
            }
        }
        Request::PoolAdd { pool } => {
            if cfg.pools.iter().any(|p| p.name == pool.name) {
                Err(exists("pool", &pool.name, "a pool"))
            } else {
                next.pools.push(pool.clone());
                Ok(())
            }
        }
        Request::PoolRemove { name } => pool_index(cfg, name).and_then(|i| {
            let uses = |v: &&crate::config::Vip| {
                v.pool.as_deref() == Some(name) || v.routes.iter().any(|r| &r.pool == name)
            };
            match cfg.vips.iter().find(uses) {
                Some(v) => Err(ConfigError::new(
                    "pool",
                    name,
                    format!("VIP {} forwards to it: remove the VIP first", v.name),
                )),
                None => {
                    next.pools.remove(i);
                    Ok(())
                }
            }
        }),
        Request::MemberAdd { pool, member } => pool_index(cfg, pool).and_then(|i| {
            if cfg.pools[i].members.iter().any(|m| m.addr == member.addr) {
                Err(exists("member", &member.addr, "a member of this pool"))
            } else {
                next.pools[i].members.push(member.clone());
                Ok(())
            }
        }),
        Request::MemberRemove { pool, addr } => member_index(cfg, pool, addr).map(|(i, j)| {
            next.pools[i].members.remove(j);
        }),
        Request::MemberWeight { pool, addr, weight } => {
            member_index(cfg, pool, addr).map(|(i, j)| next.pools[i].members[j].weight = *weight)
        }
        Request::MemberDrain { pool, addr } => member_index(cfg, pool, addr)
            .map(|(i, j)| next.pools[i].members[j].state = MemberState::Drain),
        Request::MemberEnable { pool, addr } => member_index(cfg, pool, addr)
            .map(|(i, j)| next.pools[i].members[j].state = MemberState::Up),
        Request::Status
        | Request::Stats
        | Request::Drain
        | Request::Undrain
        | Request::VipList
        | Request::VipShow { .. }
        | Request::CertList
        | Request::CertShow { .. }
        | Request::PoolList
        | Request::PoolShow { .. }
        | Request::TicketsRotate
        | Request::ConfigShow
        | Request::ConfigSave { .. }
        | Request::ConfigReload
        | Request::LogReopen
        | Request::DenyList
        | Request::Sources { .. }
        | Request::ConnList { .. }
        | Request::ConnReset { .. }
        | Request::Capture { .. } => return None,
    };
    Some(result.and_then(|()| next.validate().map(|()| next)))
}

/// The sections of `next` that differ from `running` and that only a
/// restart applies (all but VIPs, certificates and pools), as written in
/// the file (`[eal]`, `[[port]]`, ...).
pub fn restart_sections(running: &Config, next: &Config) -> Vec<&'static str> {
    // Named one by one, so that a new section must be placed here.
    let Config {
        eal,
        ports,
        vips: _,
        pools: _,
        certs: _,
        // Applied by a reload: the level, the format and the connection
        // log's file.
        log: _,
        tcp,
        control,
        routing,
        access: _,
    } = next;
    [
        (*eal != running.eal, "[eal]"),
        (*ports != running.ports, "[[port]]"),
        (*tcp != running.tcp, "[tcp]"),
        (*control != running.control, "[control]"),
        (*routing != running.routing, "[routing]"),
    ]
    .into_iter()
    .filter_map(|(differs, name)| differs.then_some(name))
    .collect()
}

/// What going from `running` to `next` changes of what a reload applies,
/// for its reply: VIPs, pools and certificates by name (added, removed,
/// changed), `[log]`, `[access]`. A reload puts the file's settings back,
/// so run-time changes not saved show here.
pub fn changed_parts(running: &Config, next: &Config) -> Vec<String> {
    let mut out = Vec::new();
    named(&mut out, "vip", &running.vips, &next.vips, |v| &v.name);
    named(&mut out, "pool", &running.pools, &next.pools, |p| &p.name);
    named(&mut out, "cert", &running.certs, &next.certs, |c| &c.name);
    if running.log != next.log {
        out.push("[log]".into());
    }
    if running.access != next.access {
        out.push("[access]".into());
    }
    out
}

/// `kind NAME added`, `removed` or `changed` into `out`, for each item of
/// `old` and `new` that differs.
fn named<T: PartialEq>(
    out: &mut Vec<String>,
    kind: &str,
    old: &[T],
    new: &[T],
    name: impl Fn(&T) -> &String,
) {
    for n in new {
        match old.iter().find(|o| name(o) == name(n)) {
            None => out.push(format!("{kind} {} added", name(n))),
            Some(o) if o != n => out.push(format!("{kind} {} changed", name(n))),
            Some(_) => {}
        }
    }
    for o in old
        .iter()
        .filter(|o| !new.iter().any(|n| name(n) == name(o)))
    {
        out.push(format!("{kind} {} removed", name(o)));
    }
}

/// Applies `change` to VIP `i` of `next` (validated with the rest).
fn set_vip(next: &mut Config, i: usize, change: &VipChange) -> Result<(), ConfigError> {
    let vip = &mut next.vips[i];
    if change.is_empty() {
        return Err(ConfigError::new(
            format!("vip[{i}]"),
            &vip.name,
            "nothing to change (give certificates, a pool, TLS settings, timeouts or limits)",
        ));
    }
    if change.builtin && change.pool.is_some() {
        return Err(ConfigError::new(
            format!("vip[{i}].pool"),
            change.pool.as_deref().unwrap_or_default(),
            "either a pool or the built-in responder, not both",
        ));
    }
    if let Some(certs) = &change.certs {
        if certs.is_empty() && !vip.certs.is_empty() {
            // Without certificates the VIP would go on as plain TCP on
            // the same address and port.
            return Err(ConfigError::new(
                format!("vip[{i}].certs"),
                "[]",
                "a TLS VIP keeps at least one certificate (to serve plain TCP, remove the VIP and add it again)",
            ));
        }
        vip.certs = certs.iter().map(|c| CertRef::Name(c.clone())).collect();
    }
    if let Some(pool) = &change.pool {
        vip.pool = Some(pool.clone());
        vip.respond = None;
    }
    if change.builtin {
        vip.pool = None;
        vip.respond = Some(Respond::Builtin);
    }
    if let Some(routes) = &change.routes {
        vip.routes.clone_from(routes);
    }
    if let Some(allow) = &change.allow {
        vip.allow.clone_from(allow);
    }
    let tls_given = change.tls_versions.is_some()
        || change.tls_suites.is_some()
        || change.tls_groups.is_some()
        || change.alpn.is_some()
        || change.tickets.is_some()
        || change.prefer_client_order.is_some();
    if tls_given {
        let tls = vip.tls.get_or_insert_with(TlsSettings::default);
        if let Some(v) = &change.tls_versions {
            tls.versions.clone_from(v);
        }
        if let Some(v) = &change.tls_suites {
            tls.suites.clone_from(v);
        }
        if let Some(v) = &change.tls_groups {
            tls.groups.clone_from(v);
        }
        if let Some(v) = &change.alpn {
            tls.alpn = Some(v.clone());
        }
        match &change.tickets {
            Some(TicketsChange::Off) => tls.tickets = None,
            Some(TicketsChange::On(t)) => {
                // A new rotation without a key file keeps the one in use
                // (nodes sharing it go on sharing): only what is given
                // changes. `--no-tickets` first drops the file.
                let key_file = t
                    .key_file
                    .clone()
                    .or_else(|| tls.tickets.as_ref().and_then(|old| old.key_file.clone()));
                tls.tickets = Some(crate::config::TicketSettings {
                    key_file,
                    ..t.clone()
                });
            }
            None => {}
        }
        if let Some(p) = change.prefer_client_order {
            tls.prefer_client_order = p;
        }
    }
    let set = |to: &mut u32, v: Option<u32>| {
        if let Some(v) = v {
            *to = v;
        }
    };
    set(&mut vip.handshake_timeout_ms, change.handshake_timeout_ms);
    set(&mut vip.request_timeout_ms, change.request_timeout_ms);
    set(&mut vip.send_timeout_ms, change.send_timeout_ms);
    let set_or_clear = |to: &mut Option<u32>, v: Option<Option<u32>>| {
        if let Some(v) = v {
            *to = v;
        }
    };
    set_or_clear(&mut vip.idle_timeout_s, change.idle_timeout_s);
    set_or_clear(&mut vip.max_connections, change.max_connections);
    set_or_clear(&mut vip.max_new_per_source, change.max_new_per_source);
    set_or_clear(
        &mut vip.max_connections_per_source,
        change.max_connections_per_source,
    );
    Ok(())
}

/// Denies the networks of `prefixes` (written as [`prefix_text`] does):
/// until taken off, or with `for_s` until `now` and that long; the first
/// that does not read, and why.
fn deny_add(
    next: &mut Config,
    prefixes: &[String],
    for_s: Option<u64>,
    now: jiff::Timestamp,
) -> Result<(), (String, String)> {
    if prefixes.is_empty() {
        return Err((String::new(), "no network given".into()));
    }
    let until = match for_s {
        None => None,
        Some(s @ 1..=MAX_DENY_FOR_S) => {
            let span = jiff::SignedDuration::from_secs(s.cast_signed());
            Some(
                now.checked_add(span)
                    .map_err(|e| (s.to_string(), e.to_string()))?,
            )
        }
        Some(s) => {
            return Err((
                format!("{s} s"),
                format!("a time must be 1 s to {} days", MAX_DENY_FOR_S / 86_400),
            ));
        }
    };
    let access = &mut next.access;
    // Indexed once: a request of thousands against lists of tens of
    // thousands stays one pass over each.
    let mut forever: HashSet<(IpAddr, u8)> = access
        .deny
        .iter()
        .filter_map(|d| parse_prefix(d).ok())
        .collect();
    let mut timed: HashMap<(IpAddr, u8), usize> = HashMap::new();
    for (i, d) in access.deny_until.iter().enumerate() {
        if let Ok(net) = parse_prefix(&d.net) {
            timed.entry(net).or_insert(i);
        }
    }
    let mut now_forever: HashSet<(IpAddr, u8)> = HashSet::new();
    for p in prefixes {
        let net = parse_prefix(p).map_err(|why| (p.clone(), why))?;
        if forever.contains(&net) {
            continue;
        }
        match (until, timed.get(&net).copied()) {
            (Some(until), Some(i)) => access.deny_until[i].until = until,
            (Some(until), None) => {
                timed.insert(net, access.deny_until.len());
                access.deny_until.push(DenyUntil {
                    net: prefix_text(net),
                    until,
                });
            }
            (None, was_timed) => {
                if was_timed.is_some() {
                    timed.remove(&net);
                    now_forever.insert(net);
                }
                forever.insert(net);
                access.deny.push(prefix_text(net));
            }
        }
    }
    if !now_forever.is_empty() {
        (access.deny_until)
            .retain(|d| parse_prefix(&d.net).map_or(true, |n| !now_forever.contains(&n)));
    }
    Ok(())
}

/// Takes `prefixes` off the lists; each must be on one (as written, or
/// the same network written another way).
fn deny_remove(next: &mut Config, prefixes: &[String]) -> Result<(), (String, String)> {
    if prefixes.is_empty() {
        return Err((String::new(), "no network given".into()));
    }
    let nets = (prefixes.iter())
        .map(|p| {
            parse_prefix(p)
                .map(|n| (p, n))
                .map_err(|why| (p.clone(), why))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let wanted: HashSet<(IpAddr, u8)> = nets.iter().map(|&(_, n)| n).collect();
    let mut found: HashSet<(IpAddr, u8)> = HashSet::new();
    let mut take = |text: &str| match parse_prefix(text) {
        Ok(n) if wanted.contains(&n) => {
            found.insert(n);
            false
        }
        _ => true,
    };
    // (`next` is dropped when this refuses.)
    let access = &mut next.access;
    access.deny.retain(|d| take(d));
    access.deny_until.retain(|d| take(&d.net));
    if let Some((p, _)) = nets.iter().find(|(_, n)| !found.contains(n)) {
        return Err(((*p).clone(), "not denied (dpctl deny list)".into()));
    }
    Ok(())
}

fn vip_index(cfg: &Config, name: &str) -> Result<usize, ConfigError> {
    cfg.vips
        .iter()
        .position(|v| v.name == name)
        .ok_or_else(|| unknown("vip", name, "VIP"))
}

fn pool_index(cfg: &Config, name: &str) -> Result<usize, ConfigError> {
    cfg.pools
        .iter()
        .position(|p| p.name == name)
        .ok_or_else(|| unknown("pool", name, "pool"))
}

fn member_index(cfg: &Config, pool: &str, addr: &str) -> Result<(usize, usize), ConfigError> {
    let i = pool_index(cfg, pool)?;
    cfg.pools[i]
        .members
        .iter()
        .position(|m| m.addr == addr)
        .map(|j| (i, j))
        .ok_or_else(|| {
            ConfigError::new(
                "member",
                addr,
                format!("pool {pool} has no member with this address"),
            )
        })
}

fn unknown(field: &str, name: &str, what: &str) -> ConfigError {
    ConfigError::new(field, name, format!("no {what} has this name"))
}

fn exists(field: &str, name: &str, what: &str) -> ConfigError {
    ConfigError::new(field, name, format!("{what} with this name exists already"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Member, NamedCert, Vip};

    const BASE: &str = r#"
        [eal]
        lcores = [1]
        [[port]]
        name = "p0"
        device = "net_af_packet0,iface=veth-dut"
        address = "10.77.0.1/24"
        [[cert]]
        name = "web-rsa"
        cert = "/etc/tlsdp/web.pem"
        key = "/etc/tlsdp/web.key"
        [[pool]]
        name = "web"
        members = [{ addr = "10.77.0.2:8080" }, { addr = "10.77.0.3:8080", weight = 2 }]
        [[pool]]
        name = "spare"
        members = [{ addr = "10.77.0.4:8080" }]
        [[vip]]
        name = "https"
        listen = "10.77.0.1:443"
        pool = "web"
        certs = ["web-rsa"]
    "#;

    fn base() -> Config {
        Config::parse(BASE).unwrap()
    }

    fn changed(req: Request) -> Config {
        apply(&base(), &req).expect("a change").expect("accepted")
    }

    fn refused(req: Request) -> ConfigError {
        apply(&base(), &req).expect("a change").unwrap_err()
    }

    fn set(change: VipChange) -> Request {
        Request::VipSet {
            name: "https".into(),
            change,
        }
    }

    #[test]
    fn only_vips_certificates_and_pools_change_without_a_restart() {
        let running = base();
        let mut next = changed(Request::VipRemove {
            name: "https".into(),
        });
        next.pools.clear();
        next.certs.clear();
        assert!(restart_sections(&running, &next).is_empty());
        next.tcp.max_connections += 1;
        next.eal.lcores.push(2);
        next.ports[0].mtu = 9000;
        next.control.strict_key_permissions = !next.control.strict_key_permissions;
        next.routing = Some(crate::config::Routing::default());
        assert_eq!(
            restart_sections(&running, &next),
            ["[eal]", "[[port]]", "[tcp]", "[control]", "[routing]"]
        );
        // `[log]` applies while dpd runs: level, format, connection log.
        next.log.format = crate::config::LogFormat::Json;
        next.log.level = "warn".into();
        next.log.connections = Some("/var/log/tlsdp/c.log".into());
        assert_eq!(restart_sections(&running, &next).len(), 5);
    }

    #[test]
    fn the_log_level_changes_without_a_restart_and_must_read() {
        let running = base();
        let next = changed(Request::LogLevel {
            level: "warn,dataplane::app::proxy=debug".into(),
        });
        assert_eq!(next.log.level, "warn,dataplane::app::proxy=debug");
        assert!(restart_sections(&running, &next).is_empty());
        // A misspelt level would read as a target with every level on,
        // and everything else off.
        for bad in [
            "debgu",
            "",
            "info,dataplane=loud",
            "dataplane::=info",
            "info/regex",
        ] {
            let e = apply(&running, &Request::LogLevel { level: bad.into() })
                .expect("a change")
                .unwrap_err();
            assert_eq!(e.field, "log.level", "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_vip_offering_h2_cannot_turn_to_the_builtin_responder() {
        let h2 = changed(set(VipChange {
            alpn: Some(vec!["h2".into(), "http/1.1".into()]),
            ..VipChange::default()
        }));
        let e = apply(
            &h2,
            &set(VipChange {
                builtin: true,
                ..VipChange::default()
            }),
        )
        .expect("a change")
        .unwrap_err();
        assert_eq!(e.field, "vip[0].tls.alpn", "{e}");
        // Both at once: offering HTTP/1.1 only, it may.
        let c = apply(
            &h2,
            &set(VipChange {
                builtin: true,
                alpn: Some(vec!["http/1.1".into()]),
                ..VipChange::default()
            }),
        )
        .expect("a change")
        .expect("accepted");
        assert_eq!(c.vips[0].respond, Some(Respond::Builtin));
    }

    #[test]
    fn vip_set_changes_only_what_is_given() {
        let c = changed(set(VipChange {
            tls_versions: Some(vec!["TLSv1.3".into()]),
            ..VipChange::default()
        }));
        let tls = c.vips[0].tls.as_ref().expect("a policy now");
        assert_eq!(tls.versions, ["TLSv1.3"]);
        assert!(tls.suites.is_empty() && tls.tickets.is_none());
        assert_eq!(c.vips[0].certs, base().vips[0].certs);
        assert_eq!(c.vips[0].pool.as_deref(), Some("web"));
        // Then tickets on: the versions stay.
        let tickets = TicketsChange::On(crate::config::TicketSettings {
            rotate_s: 600,
            key_file: None,
        });
        let c = apply(
            &c,
            &set(VipChange {
                tickets: Some(tickets),
                ..VipChange::default()
            }),
        )
        .unwrap()
        .unwrap();
        let tls = c.vips[0].tls.as_ref().unwrap();
        assert_eq!(tls.versions, ["TLSv1.3"]);
        assert_eq!(tls.tickets.as_ref().map(|t| t.rotate_s), Some(600));
        let c = apply(
            &c,
            &set(VipChange {
                tickets: Some(TicketsChange::Off),
                ..VipChange::default()
            }),
        )
        .unwrap()
        .unwrap();
        assert!(c.vips[0].tls.as_ref().unwrap().tickets.is_none());
        // Another pool, then the built-in responder.
        let c = changed(set(VipChange {
            pool: Some("spare".into()),
            ..VipChange::default()
        }));
        assert_eq!(c.vips[0].pool.as_deref(), Some("spare"));
        let c = changed(set(VipChange {
            builtin: true,
            ..VipChange::default()
        }));
        assert_eq!(c.vips[0].pool, None);
        assert_eq!(c.vips[0].respond, Some(Respond::Builtin));
    }

    #[test]
    fn vip_set_never_leaves_a_tls_vip_without_certificates_nor_drops_a_ticket_key_file() {
        let e = refused(set(VipChange {
            certs: Some(Vec::new()),
            ..VipChange::default()
        }));
        assert_eq!(e.field, "vip[0].certs", "{e}");
        assert!(e.to_string().contains("at least one certificate"), "{e}");
        let shared = TicketsChange::On(crate::config::TicketSettings {
            rotate_s: 600,
            key_file: Some("/etc/tlsdp/tickets.key".into()),
        });
        let c = changed(set(VipChange {
            tickets: Some(shared),
            ..VipChange::default()
        }));
        let faster = TicketsChange::On(crate::config::TicketSettings {
            rotate_s: 60,
            key_file: None,
        });
        let req = set(VipChange {
            tickets: Some(faster),
            ..VipChange::default()
        });
        let c = apply(&c, &req).unwrap().unwrap();
        let t = c.vips[0].tls.as_ref().unwrap().tickets.as_ref().unwrap();
        assert_eq!(t.rotate_s, 60);
        assert_eq!(
            t.key_file.as_deref(),
            Some("/etc/tlsdp/tickets.key".as_ref())
        );
    }

    #[test]
    fn vip_set_changes_timeouts_and_limits_and_takes_them_away() {
        let c = changed(set(VipChange {
            send_timeout_ms: Some(5_000),
            idle_timeout_s: Some(Some(45)),
            max_connections: Some(Some(1_000)),
            max_connections_per_source: Some(Some(8)),
            ..VipChange::default()
        }));
        let v = &c.vips[0];
        assert_eq!(v.send_timeout_ms, 5_000);
        assert_eq!(v.idle_timeout_s, Some(45));
        assert_eq!(v.max_connections, Some(1_000));
        assert_eq!(v.max_connections_per_source, Some(8));
        // Untouched: the other timeouts, the rate limit, TLS.
        let b = &base().vips[0];
        assert_eq!(v.handshake_timeout_ms, b.handshake_timeout_ms);
        assert_eq!(v.request_timeout_ms, b.request_timeout_ms);
        assert_eq!(v.max_new_per_source, None);
        assert_eq!(v.tls, b.tls);
        // `null` takes a limit away and the idle timeout back to [tcp]'s;
        // what is absent stays.
        let change: VipChange = serde_json::from_str(
            r#"{"max_connections": null, "idle_timeout_s": null, "max_new_per_source": 50}"#,
        )
        .unwrap();
        assert_eq!(change.max_connections, Some(None));
        assert_eq!(change.max_connections_per_source, None);
        let c = apply(&c, &set(change.clone())).unwrap().unwrap();
        let v = &c.vips[0];
        assert_eq!(v.max_connections, None);
        assert_eq!(v.idle_timeout_s, None);
        assert_eq!(v.max_new_per_source, Some(50));
        assert_eq!(v.max_connections_per_source, Some(8));
        assert_eq!(v.send_timeout_ms, 5_000);
        // It goes over the wire as it came.
        let wire = serde_json::to_string(&change).unwrap();
        assert_eq!(serde_json::from_str::<VipChange>(&wire).unwrap(), change);
        // Out of range: refused, naming the field.
        for (change, field) in [
            (
                VipChange {
                    send_timeout_ms: Some(10),
                    ..VipChange::default()
                },
                "vip[0].send_timeout_ms",
            ),
            (
                VipChange {
                    max_connections_per_source: Some(Some(0)),
                    ..VipChange::default()
                },
                "vip[0].max_connections_per_source",
            ),
            (
                VipChange {
                    idle_timeout_s: Some(Some(0)),
                    ..VipChange::default()
                },
                "vip[0].idle_timeout_s",
            ),
        ] {
            assert_eq!(refused(set(change)).field, field);
        }
    }

    #[test]
    fn deny_add_keeps_one_entry_per_network_and_remove_wants_it_there() {
        let deny = |c: &Config| c.access.deny.clone();
        let add = |p: &[&str]| Request::DenyAdd {
            prefixes: p.iter().map(|s| s.to_string()).collect(),
            for_s: None,
        };
        let remove = |p: &[&str]| Request::DenyRemove {
            prefixes: p.iter().map(|s| s.to_string()).collect(),
        };
        let c = changed(add(&["198.51.100.0/24", "203.0.113.7", "2001:db8:0::/32"]));
        assert_eq!(
            deny(&c),
            ["198.51.100.0/24", "203.0.113.7", "2001:db8::/32"]
        );
        // Again, written another way: nothing new.
        let c2 = apply(&c, &add(&["203.0.113.7/32", "2001:DB8::/32"]))
            .unwrap()
            .unwrap();
        assert_eq!(deny(&c2), deny(&c));
        // Removed as written or written another way.
        let c3 = apply(&c, &remove(&["203.0.113.7/32", "198.51.100.0/24"]))
            .unwrap()
            .unwrap();
        assert_eq!(deny(&c3), ["2001:db8::/32"]);
        // Not on the list, host bits, not an address, nothing: refused,
        // naming the entry.
        for (req, value, why) in [
            (remove(&["192.0.2.0/24"]), "192.0.2.0/24", "not denied"),
            (
                add(&["198.51.100.1/24"]),
                "198.51.100.1/24",
                "the network is 198.51.100.0/24",
            ),
            (add(&["10.0.0.0/33"]), "10.0.0.0/33", "0 to 32"),
            (add(&["example.com"]), "example.com", "not an address"),
            (add(&[]), "", "no network given"),
        ] {
            let e = apply(&c, &req).unwrap().unwrap_err();
            assert_eq!((e.field.as_str(), e.value.as_str()), ("access.deny", value));
            assert!(e.to_string().contains(why), "{e}");
        }
        // The file's list is checked too.
        let mut bad = c.clone();
        bad.access.deny.push("10.1.2.3/8".into());
        let e = bad.validate().unwrap_err();
        assert_eq!(e.field, "access.deny[3]", "{e}");
        // And a reload takes it without a restart.
        assert!(restart_sections(&base(), &c).is_empty());
        let back = Config::parse(&c.to_toml()).unwrap();
        assert_eq!(back.access, c.access);
    }

    #[test]
    fn deny_for_a_time_ends_then_and_stays_apart_from_the_lasting_list() {
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        let now = at("2026-12-07T01:00:00Z");
        let add = |p: &[&str], for_s| Request::DenyAdd {
            prefixes: p.iter().map(|s| s.to_string()).collect(),
            for_s,
        };
        let step = |c: &Config, req: Request, now| apply_at(c, &req, now).unwrap();
        let timed = |c: &Config| {
            let d = &c.access.deny_until;
            d.iter()
                .map(|d| (d.net.clone(), d.until.to_string()))
                .collect::<Vec<_>>()
        };
        let c = step(
            &base(),
            add(&["203.0.113.7/32", "2001:db8::/48"], Some(600)),
            now,
        )
        .unwrap();
        assert!(c.access.deny.is_empty());
        assert_eq!(
            timed(&c),
            [
                (
                    "203.0.113.7".to_string(),
                    "2026-12-07T01:10:00Z".to_string()
                ),
                (
                    "2001:db8::/48".to_string(),
                    "2026-12-07T01:10:00Z".to_string()
                )
            ]
        );
        let denied: Vec<&str> = c.access.denied().collect();
        assert_eq!(denied, ["203.0.113.7", "2001:db8::/48"]);
        // Denied again for a time: the new time, shorter or longer.
        let later = at("2026-12-07T01:05:00Z");
        let c = step(&c, add(&["203.0.113.7"], Some(60)), later).unwrap();
        assert_eq!(timed(&c)[0].1, "2026-12-07T01:06:00Z");
        assert_eq!(c.access.next_expiry(), Some(at("2026-12-07T01:06:00Z")));
        // For good: off the timed list, onto the lasting one; denied for a
        // time after that, it stays for good.
        let c = step(&c, add(&["2001:db8::/48"], None), later).unwrap();
        assert_eq!(c.access.deny, ["2001:db8::/48"]);
        assert_eq!(timed(&c).len(), 1);
        let c2 = step(&c, add(&["2001:db8::/48"], Some(60)), later).unwrap();
        assert_eq!(c2.access, c.access);
        // Its time comes: taken off, the lasting entry kept.
        let mut gone = c.clone();
        assert!(gone
            .access
            .take_expired(at("2026-12-07T01:05:59Z"))
            .is_empty());
        let expired = gone.access.take_expired(at("2026-12-07T01:06:00Z"));
        assert_eq!(expired, ["203.0.113.7"]);
        assert!(gone.access.deny_until.is_empty());
        assert_eq!(gone.access.next_expiry(), None);
        // Removed like a lasting one.
        let remove = Request::DenyRemove {
            prefixes: vec!["203.0.113.7/32".into()],
        };
        let c3 = step(&c, remove, later).unwrap();
        assert!(c3.access.deny_until.is_empty());
        // No time, or more than a year: refused, nothing changed.
        for for_s in [0, MAX_DENY_FOR_S + 1] {
            let e = step(&c, add(&["192.0.2.1"], Some(for_s)), later).unwrap_err();
            assert!(e.to_string().contains("1 s to 365 days"), "{e}");
        }
        // Saved and read back the same; a file naming a network on both
        // lists, or a time that does not read, is refused.
        let back = Config::parse(&c.to_toml()).unwrap();
        assert_eq!(back.access, c.access);
        assert!(
            c.to_toml().contains("until = \"2026-12-07T01:06:00Z\""),
            "{}",
            c.to_toml()
        );
        let mut both = c.clone();
        both.access.deny.push("203.0.113.7".into());
        let e = both.validate().unwrap_err();
        assert_eq!(e.field, "access.deny_until[0].net", "{e}");
        let text = c.to_toml().replace("2026-12-07T01:06:00Z", "tomorrow");
        assert!(Config::parse(&text).is_err());
    }

    #[test]
    fn auto_deny_needs_a_count_and_two_minutes_at_least_and_reloads() {
        use crate::config::AutoDeny;
        let with = |refused, for_s| {
            let mut c = base();
            c.access.auto_deny = Some(AutoDeny { refused, for_s });
            c
        };
        let good = with(1_000, 600);
        good.validate().unwrap();
        let back = Config::parse(&good.to_toml()).unwrap();
        assert_eq!(back.access, good.access);
        assert!(
            restart_sections(&base(), &good).is_empty(),
            "a reload takes it"
        );
        for (c, field) in [
            (with(0, 600), "access.auto_deny.refused"),
            (with(1_000, 119), "access.auto_deny.for_s"),
            (with(1_000, MAX_DENY_FOR_S + 1), "access.auto_deny.for_s"),
        ] {
            assert_eq!(c.validate().unwrap_err().field, field);
        }
    }

    #[test]
    fn routes_need_tls_a_pool_dns_names_and_pools_that_exist() {
        use crate::config::Route;
        let route = |sni: &str, pool: &str| Route {
            sni: sni.into(),
            pool: pool.into(),
        };
        let with = |routes: Vec<Route>| {
            set(VipChange {
                routes: Some(routes),
                ..VipChange::default()
            })
        };
        let c = changed(with(vec![
            route("api.example.com", "spare"),
            route("*.static.example.com", "spare"),
        ]));
        assert_eq!(c.vips[0].routes.len(), 2);
        assert_eq!(
            Config::parse(&c.to_toml()).unwrap().vips[0].routes,
            c.vips[0].routes
        );
        // A pool a route forwards to stays.
        let e = apply(
            &c,
            &Request::PoolRemove {
                name: "spare".into(),
            },
        )
        .unwrap()
        .unwrap_err();
        assert!(e.to_string().contains("forwards to it"), "{e}");
        // `[]` takes them away.
        let none = apply(&c, &with(Vec::new())).unwrap().unwrap();
        assert!(none.vips[0].routes.is_empty());
        for (routes, field, why) in [
            (
                vec![route("api.example.com", "nope")],
                "vip[0].routes[0].pool",
                "no [[pool]]",
            ),
            (
                vec![route("10.0.0.1", "spare")],
                "vip[0].routes[0].sni",
                "an address",
            ),
            (
                vec![route("bad_name.example", "spare")],
                "vip[0].routes[0].sni",
                "a DNS name",
            ),
            (
                vec![route("a.*.example", "spare")],
                "vip[0].routes[0].sni",
                "a DNS name",
            ),
            (
                vec![
                    route("Api.example.com", "web"),
                    route("api.EXAMPLE.com", "spare"),
                ],
                "vip[0].routes[1].sni",
                "another route",
            ),
        ] {
            let e = refused(with(routes));
            assert_eq!(e.field, field, "{e}");
            assert!(e.to_string().contains(why), "{e}");
        }
        // A plain VIP has no SNI to route by.
        let mut plain = base();
        plain.vips[0].certs.clear();
        plain.vips[0].routes = vec![route("api.example.com", "spare")];
        let e = plain.validate().unwrap_err();
        assert_eq!(e.field, "vip[0].routes", "{e}");
    }

    #[test]
    fn vip_set_allow_replaces_the_list_and_refuses_a_network_that_does_not_read() {
        let allow = |nets: &[&str]| {
            set(VipChange {
                allow: Some(nets.iter().map(|n| n.to_string()).collect()),
                ..VipChange::default()
            })
        };
        let c = changed(allow(&["10.0.0.0/8", "2001:db8::/32"]));
        assert_eq!(c.vips[0].allow, ["10.0.0.0/8", "2001:db8::/32"]);
        assert_eq!(
            Config::parse(&c.to_toml()).unwrap().vips[0].allow,
            c.vips[0].allow
        );
        let any = apply(&c, &allow(&[])).unwrap().unwrap();
        assert!(any.vips[0].allow.is_empty());
        let e = refused(allow(&["10.0.0.0/8", "10.1.2.3/8"]));
        assert_eq!(e.field, "vip[0].allow[1]", "{e}");
        assert!(e.to_string().contains("host bits set"), "{e}");
    }

    #[test]
    fn vip_set_refusals_name_the_field() {
        let e = refused(set(VipChange::default()));
        assert!(e.to_string().contains("nothing to change"), "{e}");
        let e = refused(set(VipChange {
            pool: Some("spare".into()),
            builtin: true,
            ..VipChange::default()
        }));
        assert!(e.to_string().contains("not both"), "{e}");
        let e = refused(set(VipChange {
            pool: Some("nope".into()),
            ..VipChange::default()
        }));
        assert!(e.field.starts_with("vip[0]"), "{e}");
        let e = refused(set(VipChange {
            certs: Some(vec!["nope".into()]),
            ..VipChange::default()
        }));
        assert!(e.to_string().contains("no [[cert]] has this name"), "{e}");
        let e = apply(
            &base(),
            &Request::VipSet {
                name: "ghost".into(),
                change: VipChange {
                    builtin: true,
                    ..VipChange::default()
                },
            },
        )
        .unwrap()
        .unwrap_err();
        assert!(e.to_string().contains("no VIP has this name"), "{e}");
    }

    fn vip(name: &str, listen: &str) -> Vip {
        Vip {
            name: name.into(),
            listen: listen.into(),
            respond: None,
            pool: Some("web".into()),
            certs: vec![CertRef::Name("web-rsa".into())],
            tls: None,
            enabled: true,
            handshake_timeout_ms: crate::config::DEFAULT_HANDSHAKE_TIMEOUT_MS,
            request_timeout_ms: crate::config::DEFAULT_REQUEST_TIMEOUT_MS,
            send_timeout_ms: crate::config::DEFAULT_SEND_TIMEOUT_MS,
            idle_timeout_s: None,
            max_connections: None,
            max_new_per_source: None,
            max_connections_per_source: None,
            routes: Vec::new(),
            allow: Vec::new(),
        }
    }

    #[test]
    fn queries_change_nothing() {
        assert!(apply(&base(), &Request::VipList).is_none());
        assert!(apply(&base(), &Request::TicketsRotate).is_none());
    }

    #[test]
    fn vips_are_added_disabled_and_removed() {
        let c = changed(Request::VipAdd {
            vip: vip("second", "10.77.0.9:443"),
        });
        assert_eq!(c.vips.len(), 2);
        let c = changed(Request::VipDisable {
            name: "https".into(),
        });
        assert!(!c.vips[0].enabled);
        assert!(c.to_toml().contains("enabled = false"));
        let c = changed(Request::VipRemove {
            name: "https".into(),
        });
        assert!(c.vips.is_empty());
        // Refusals name what is wrong.
        let e = refused(Request::VipAdd {
            vip: vip("https", "10.77.0.9:443"),
        });
        assert!(e.to_string().contains("exists already"), "{e}");
        let e = refused(Request::VipAdd {
            vip: vip("other", "10.77.0.1:443"),
        });
        assert!(e.to_string().contains("another VIP listens here"), "{e}");
        let e = refused(Request::VipAdd {
            vip: vip("other", "10.99.0.1:443"),
        });
        assert!(e.to_string().contains("ports' subnets"), "{e}");
        let mut v = vip("other", "10.77.0.9:443");
        v.certs = vec![CertRef::Name("nope".into())];
        let e = refused(Request::VipAdd { vip: v });
        assert!(e.to_string().contains("no [[cert]] has this name"), "{e}");
        let e = refused(Request::VipRemove {
            name: "nope".into(),
        });
        assert!(e.to_string().contains("no VIP has this name"), "{e}");
    }

    #[test]
    fn certs_in_use_stay() {
        let cert = NamedCert {
            name: "web-rsa".into(),
            cert: "/new.pem".into(),
            key: "/new.key".into(),
            origin: None,
        };
        let c = changed(Request::CertRotate { cert: cert.clone() });
        assert_eq!(c.cert("web-rsa").unwrap().cert.to_str(), Some("/new.pem"));
        let e = refused(Request::CertAdd { cert: cert.clone() });
        assert!(e.to_string().contains("cert rotate"), "{e}");
        let e = refused(Request::CertRemove {
            name: "web-rsa".into(),
        });
        assert!(e.to_string().contains("VIP https serves it"), "{e}");
        let mut other = cert;
        other.name = "spare".into();
        let c = changed(Request::CertAdd { cert: other });
        assert!(c.cert("spare").is_some());
        let e = refused(Request::CertRotate {
            cert: NamedCert {
                name: "x".into(),
                cert: "a".into(),
                key: "b".into(),
                origin: None,
            },
        });
        assert!(e.to_string().contains("no certificate"), "{e}");
    }

    #[test]
    fn pools_and_members() {
        let e = refused(Request::PoolRemove { name: "web".into() });
        assert!(e.to_string().contains("VIP https forwards to it"), "{e}");
        assert_eq!(
            changed(Request::PoolRemove {
                name: "spare".into()
            })
            .pools
            .len(),
            1
        );
        let c = changed(Request::MemberAdd {
            pool: "web".into(),
            member: Member {
                addr: "10.77.0.5:8080".into(),
                weight: 3,
                state: MemberState::Up,
            },
        });
        assert_eq!(c.pools[0].members.len(), 3);
        let c = changed(Request::MemberWeight {
            pool: "web".into(),
            addr: "10.77.0.2:8080".into(),
            weight: 256,
        });
        assert_eq!(c.pools[0].members[0].weight, 256);
        let e = refused(Request::MemberWeight {
            pool: "web".into(),
            addr: "10.77.0.2:8080".into(),
            weight: 257,
        });
        assert_eq!(e.field, "pool[0].members[0].weight");
        let c = changed(Request::MemberDrain {
            pool: "web".into(),
            addr: "10.77.0.3:8080".into(),
        });
        assert_eq!(c.pools[0].members[1].state, MemberState::Drain);
        let e = refused(Request::MemberRemove {
            pool: "spare".into(),
            addr: "10.77.0.4:8080".into(),
        });
        assert!(e.to_string().contains("1 to 64 members"), "{e}");
        let e = refused(Request::MemberEnable {
            pool: "web".into(),
            addr: "10.77.0.9:1".into(),
        });
        assert!(e.to_string().contains("no member"), "{e}");
        let e = refused(Request::MemberAdd {
            pool: "web".into(),
            member: Member {
                addr: "10.77.0.2:8080".into(),
                weight: 1,
                state: MemberState::Up,
            },
        });
        assert!(e.to_string().contains("exists already"), "{e}");
    }

    #[test]
    fn saved_configuration_parses_back() {
        let c = changed(Request::VipAdd {
            vip: Vip {
                certs: vec![CertRef::Files(crate::config::CertFiles {
                    cert: "/a.pem".into(),
                    key: "/a.key".into(),
                })],
                ..vip("inline", "10.77.0.9:443")
            },
        });
        // Files given in place became a named [[cert]].
        assert_eq!(c.vips[1].certs, [CertRef::Name("inline-0".into())]);
        let text = c.to_toml();
        let back = Config::parse(&text).unwrap();
        assert_eq!(back.to_toml(), text);
        assert_eq!(back.certs.len(), 2);
    }
}
