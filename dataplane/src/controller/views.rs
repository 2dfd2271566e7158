//! What the controller answers from what it knows: the daemon's status,
//! drain, and VIPs, certificates and pools as configured and as the
//! engines see them.

use super::*;

/// Refusals by source and VIP slot: connection cap, source rate, source
/// cap, denied.
pub(super) type RefusedSums = HashMap<(IpAddr, Option<u16>), [u64; 4]>;

impl Controller {
    /// `dpctl status`: the daemon, its ports (link state now) and the
    /// configuration version every engine uses.
    pub(super) fn status(&self) -> Reply {
        let Some(d) = &self.daemon else {
            return Reply::error("status: no daemon attached");
        };
        let ports = d
            .ports
            .iter()
            .enumerate()
            .map(|(i, (p, id))| {
                let Some(id) = id else {
                    return PortStatus {
                        link_up: true,
                        ..p.clone()
                    };
                };
                let link = crate::dpdk::link_status(*id);
                PortStatus {
                    link_up: d.link_up(i),
                    speed_mbps: link.speed_mbps,
                    active_members: crate::dpdk::bond_active_members(*id),
                    memif_client: d
                        .peers
                        .iter()
                        .find(|peer| peer.index() == i)
                        .map(|peer| peer.status()),
                    device_counts: crate::dpdk::device_counters(*id).map(device_counts),
                    ..p.clone()
                }
            })
            .collect();
        Reply::ok(Body::Status(Box::new(Status {
            version: env!("CARGO_PKG_VERSION").to_string(),
            dpdk: crate::dpdk::version(),
            pid: std::process::id(),
            uptime_s: d.started.elapsed().as_secs_f64(),
            lcores: d.lcores.clone(),
            ports,
            hugepages: d.hugepages.clone(),
            hugepages_in_use: d.hugepages_in_use,
            config_version: self.stats().total.config_version,
            drain: Some(self.drain_state()),
            routing: self.routing_status(),
            last_reload: self
                .last_reload
                .as_ref()
                .map(|(at, ok, message)| ReloadStatus {
                    ok: *ok,
                    ago_s: at.elapsed().as_secs_f64(),
                    message: message.clone(),
                }),
            log_level: crate::logging::level().unwrap_or_default(),
            conn_log: (self.conn_log.as_ref()).and_then(|l| {
                let ends = self.cfg.log.connection_ends.clone();
                l.status(self.stats().total.conn_log_dropped, ends)
            }),
            lingering: self.lingering.iter().map(ToString::to_string).collect(),
        })))
    }

    pub(super) fn vip_infos(&self, only: Option<&str>) -> Vec<VipInfo> {
        let stats = self.stats();
        self.cfg
            .vips
            .iter()
            .filter(|v| only.is_none_or(|n| n == v.name))
            .map(|v| VipInfo {
                name: v.name.clone(),
                listen: v.listen.clone(),
                enabled: v.enabled,
                certs: v
                    .certs
                    .iter()
                    .filter_map(|c| c.name().map(str::to_string))
                    .collect(),
                pool: v.pool.clone(),
                tls: v.tls.clone(),
                routes: v.routes.clone(),
                allow: v.allow.clone(),
                limits: VipLimits {
                    handshake_timeout_ms: v.handshake_timeout_ms,
                    request_timeout_ms: v.request_timeout_ms,
                    send_timeout_ms: v.send_timeout_ms,
                    idle_timeout_s: v.idle_timeout_s.unwrap_or(self.cfg.tcp.idle_timeout_s),
                    max_connections: v.max_connections,
                    max_new_per_source: v.max_new_per_source,
                    max_connections_per_source: v.max_connections_per_source,
                },
                counters: stats.total.vips.get(&v.name).copied().unwrap_or_default(),
            })
            .collect()
    }

    pub(super) fn cert_infos(&self, only: Option<&str>) -> Vec<CertInfo> {
        self.cfg
            .certs
            .iter()
            .filter(|c| only.is_none_or(|n| n == c.name))
            .filter_map(|c| {
                let l = self.certs.get(&c.name)?;
                Some(CertInfo {
                    name: c.name.clone(),
                    cert: c.cert.clone(),
                    key: c.key.clone(),
                    key_type: l.cert.key_type.counter_name().to_string(),
                    names: l.cert.names.clone(),
                    not_before: l.cert.not_before,
                    not_after: l.cert.not_after,
                    chain_len: l.cert.chain_len,
                    sha256: l.cert.sha256_hex(),
                    used_by: self
                        .cfg
                        .vips
                        .iter()
                        .filter(|v| v.certs.iter().any(|r| r.name() == Some(c.name.as_str())))
                        .map(|v| v.name.clone())
                        .collect(),
                })
            })
            .collect()
    }

    /// Every engine's view of the pools (asked over their rings), or why
    /// not within `timeout`.
    pub(super) fn engine_pools(&self, timeout: Duration) -> Result<Vec<Vec<PoolView>>, String> {
        let ask = self.next_ask();
        for l in &self.links {
            if l.to_engine.push(ToEngine::Pools { ask }).is_err() {
                return Err(format!("engine {}'s ring is full", l.engine));
            }
        }
        let mut views: Vec<Option<Vec<PoolView>>> = vec![None; self.links.len()];
        let answered = self.await_engines(timeout, |msg| match msg {
            FromEngine::Pools {
                engine,
                ask: a,
                pools,
            } if a == ask => {
                if let Some(v) = views.get_mut(engine) {
                    *v = Some(pools);
                }
                views.iter().all(Option::is_some)
            }
            FromEngine::Pools { .. }
            | FromEngine::Applied { .. }
            | FromEngine::Prepared { .. }
            | FromEngine::Paused { .. }
            | FromEngine::Sources { .. }
            | FromEngine::Conns { .. }
            | FromEngine::ConnsReset { .. }
            | FromEngine::Serving { .. }
            | FromEngine::Refused { .. } => false,
        });
        if !answered {
            return Err(match self.stood_still.get() {
                Some(_) => self.no_answer(),
                None => format!("engines did not answer within {timeout:?}"),
            });
        }
        Ok(views.into_iter().flatten().collect())
    }

    /// The `count` client addresses with the most connections open (on
    /// VIP `vip` only, when given), summed over the engines, each of
    /// which counts its own (asked over their rings).
    pub(super) fn sources(&self, vip: Option<&str>, count: u32) -> Reply {
        if !(1..=MAX_SOURCES).contains(&count) {
            return Reply::error(format!("count {count}: must be 1 to {MAX_SOURCES}"));
        }
        let local = match vip.map(|v| self.vip_local(v)).transpose() {
            Ok(l) => l,
            Err(e) => return Reply::error(e),
        };
        // Each engine's largest MAX_SOURCES: the sum's first `count` are
        // right unless a source is past that on some engine.
        let max = MAX_SOURCES as usize;
        let parts = self.ask_engines(
            |ask| ToEngine::Sources { ask, local, max },
            |msg| match msg {
                FromEngine::Sources {
                    engine,
                    ask,
                    sources,
                } => Some((engine, ask, sources)),
                _ => None,
            },
        );
        let mut sum: HashMap<IpAddr, (u64, u64)> = HashMap::new();
        match parts {
            Ok(parts) => {
                for s in parts.into_iter().flat_map(|(_, sources)| sources) {
                    let n = sum.entry(s.source).or_default();
                    n.0 += u64::from(s.established);
                    n.1 += u64::from(s.half_open);
                }
            }
            Err(e) => return Reply::error(e),
        }
        let mut all: Vec<(IpAddr, (u64, u64))> = sum.into_iter().collect();
        all.sort_unstable_by(|(a, (ae, ah)), (b, (be, bh))| {
            (be + bh, be, a).cmp(&(ae + ah, ae, b))
        });
        let shown = all
            .into_iter()
            .take(count as usize)
            .map(|(ip, (established, half_open))| SourceInfo {
                source: match ip {
                    IpAddr::V6(a) => format!("{a}/64"),
                    v4 => v4.to_string(),
                },
                established,
                half_open,
            });
        Reply::ok(Body::Sources(shown.collect()))
    }

    /// The `count` client addresses the VIPs refused most in the last one
    /// to two minutes (at VIP `vip` only, when given), summed over the
    /// engines, each of which keeps its own table (asked over their
    /// rings).
    pub(super) fn refused_sources(&self, vip: Option<&str>, count: u32) -> Reply {
        if !(1..=MAX_SOURCES).contains(&count) {
            return Reply::error(format!("count {count}: must be 1 to {MAX_SOURCES}"));
        }
        let slot = match vip {
            None => None,
            Some(name) => match self.slots.get(name) {
                Some(&slot) if self.cfg.vips.iter().any(|v| v.name == name) => Some(slot),
                _ => return Reply::error(format!("no VIP is named {name:?}")),
            },
        };
        let sum = match self.gather_refused(slot) {
            Ok(sum) => sum,
            Err(e) => return Reply::error(e),
        };
        let name = |slot: Option<u16>| {
            let named = self.slots.iter().find(|(_, &s)| Some(s) == slot);
            named.map_or_else(String::new, |(n, _)| n.clone())
        };
        let mut all: Vec<RefusedInfo> = sum
            .into_iter()
            .map(|((ip, slot), c)| RefusedInfo {
                source: match ip {
                    IpAddr::V6(a) => format!("{a}/64"),
                    v4 => v4.to_string(),
                },
                vip: name(slot),
                refused: c.iter().sum(),
                conn_limit: c[0],
                source_rate: c[1],
                source_conns: c[2],
                denied: c[3],
            })
            .collect();
        all.sort_unstable_by(|a, b| {
            (b.refused, &a.source, &a.vip).cmp(&(a.refused, &b.source, &b.vip))
        });
        all.truncate(count as usize);
        Reply::ok(Body::Refused(all))
    }

    /// Each source the engines refused lately (at VIP slot `slot` only,
    /// when given), by VIP, with its refusals by limit (connection cap,
    /// source rate, source cap, denied) summed over the engines, each of
    /// which sends its [`MAX_SOURCES`] largest.
    pub(super) fn gather_refused(&self, slot: Option<u16>) -> Result<RefusedSums, String> {
        let max = MAX_SOURCES as usize;
        let parts = self.ask_engines(
            |ask| ToEngine::Refused {
                ask,
                vip: slot,
                max,
            },
            |msg| match msg {
                FromEngine::Refused {
                    engine,
                    ask,
                    sources,
                } => Some((engine, ask, sources)),
                _ => None,
            },
        )?;
        let mut sum = RefusedSums::new();
        for s in parts.into_iter().flat_map(|(_, sources)| sources) {
            let n = sum.entry((s.source, s.vip)).or_default();
            let counts = [s.conn_limit, s.source_rate, s.source_conns, s.denied];
            for (n, c) in n.iter_mut().zip(counts) {
                *n += c;
            }
        }
        Ok(sum)
    }

    /// Each configured pool's members, and those usable on every engine
    /// (`views`, one per engine): for the metrics.
    pub(super) fn pool_health(&self, views: &[Vec<PoolView>]) -> Vec<control::metrics::PoolHealth> {
        self.cfg
            .pools
            .iter()
            .map(|p| {
                let usable = p
                    .members
                    .iter()
                    .filter(|m| m.state == control::config::MemberState::Up)
                    .filter(|m| {
                        let addr = m.socket_addr().ok();
                        !views.is_empty()
                            && views.iter().all(|v| {
                                v.iter()
                                    .find(|pv| pv.name == p.name && !pv.retired)
                                    .and_then(|pv| {
                                        pv.members.iter().find(|mv| Some(mv.addr) == addr)
                                    })
                                    .is_some_and(|mv| mv.healthy)
                            })
                    })
                    .count();
                control::metrics::PoolHealth {
                    name: p.name.clone(),
                    members: p.members.len() as u64,
                    usable: usable as u64,
                }
            })
            .collect()
    }

    /// Pools with their members' health and connections as the engines see
    /// them (asked over their rings).
    pub(super) fn pool_infos(&self, only: Option<&str>) -> Reply {
        let views = match self.engine_pools(ENGINE_REPLY) {
            Ok(v) => v,
            Err(e) => return Reply::error(e),
        };
        let pools = self
            .cfg
            .pools
            .iter()
            .filter(|p| only.is_none_or(|n| n == p.name))
            .map(|p| PoolInfo {
                name: p.name.clone(),
                balance: serde_json::to_value(p.balance)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                health: p.health.as_ref().map(|h| match h.kind {
                    control::config::HealthKind::Tcp => {
                        format!("tcp connect every {} ms", h.interval_ms)
                    }
                    control::config::HealthKind::Http => format!(
                        "http GET {}{} expects {} every {} ms",
                        h.path,
                        h.host
                            .as_ref()
                            .map_or(String::new(), |n| format!(" (Host: {n})")),
                        h.expect,
                        h.interval_ms
                    ),
                }),
                proxy_protocol: p.proxy_protocol,
                members: p
                    .members
                    .iter()
                    .map(|m| {
                        let addr = m.socket_addr().ok();
                        let seen: Vec<_> = views
                            .iter()
                            .filter_map(|v| {
                                v.iter()
                                    .find(|pv| pv.name == p.name && !pv.retired)?
                                    .members
                                    .iter()
                                    .find(|mv| Some(mv.addr) == addr)
                                    .copied()
                            })
                            .collect();
                        MemberInfo {
                            addr: m.addr.clone(),
                            weight: m.weight,
                            state: serde_json::to_value(m.state)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_string))
                                .unwrap_or_default(),
                            healthy_engines: seen.iter().filter(|v| v.healthy).count() as u32,
                            engines: views.len() as u32,
                            active: seen.iter().map(|v| u64::from(v.active)).sum(),
                            last_failure: seen
                                .iter()
                                .find_map(|v| v.last_failure)
                                .map(|f| f.to_string()),
                        }
                    })
                    .collect(),
                used_by: self
                    .cfg
                    .vips
                    .iter()
                    .filter(|v| v.pool.as_deref() == Some(&p.name))
                    .map(|v| v.name.clone())
                    .collect(),
            })
            .collect();
        Reply::ok(Body::Pools(pools))
    }
}

/// The API's form of a device's counts.
pub(super) fn device_counts(c: crate::dpdk::DeviceCounters) -> control::api::DeviceCounts {
    control::api::DeviceCounts {
        rx_packets: c.rx_packets,
        rx_bytes: c.rx_bytes,
        rx_missed: c.rx_missed,
        rx_errors: c.rx_errors,
        rx_no_mbuf: c.rx_no_mbuf,
        tx_packets: c.tx_packets,
        tx_bytes: c.tx_bytes,
        tx_errors: c.tx_errors,
    }
}

impl DaemonInfo {
    /// Whether port `i`'s link is up: as its device reports it, for a
    /// memif client only while connected (a port left stopped reports no
    /// link of its own), and for af_packet and af_xdp, whose drivers say
    /// up from their start whatever the interface does, as the kernel
    /// interface's operational state says. A tap of our own (no DPDK id)
    /// is up while attached.
    pub(super) fn link_up(&self, i: usize) -> bool {
        let Some((p, id)) = self.ports.get(i) else {
            return false;
        };
        let Some(id) = id else {
            return true;
        };
        let peer = self.peers.iter().find(|peer| peer.index() == i);
        crate::dpdk::link_status(*id).up
            && peer.is_none_or(|peer| peer.started())
            && kernel_link_up(&p.device)
    }
}

/// For a device DPDK attaches to a kernel interface without following its
/// state (`net_af_packet`, `net_af_xdp`, with `iface=`): whether that
/// interface is operationally up (`/sys/class/net/IFACE/operstate`, in
/// dpd's namespace; `unknown`, as some virtual interfaces say, counts as
/// up). True for any other device, or when it cannot be read.
fn kernel_link_up(device: &str) -> bool {
    let mut args = device.split(',');
    let driver = args.next().unwrap_or_default();
    if !(driver.starts_with("net_af_packet") || driver.starts_with("net_af_xdp")) {
        return true;
    }
    let Some(iface) = args.find_map(|kv| kv.strip_prefix("iface=")) else {
        return true;
    };
    if iface.is_empty() || iface.contains('/') || iface.starts_with('.') {
        return true;
    }
    match std::fs::read_to_string(format!("/sys/class/net/{iface}/operstate")) {
        Ok(state) => matches!(state.trim(), "up" | "unknown"),
        Err(_) => true,
    }
}
