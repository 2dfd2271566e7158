//! Addresses of removed VIPs kept while connections to them are open
//! (docs/control-api.md, `vip remove`; docs/architecture.md,
//! `controller`). Each engine serves its own connections, but only one
//! of them may answer ARP and ND for the address (NICs leave those on one
//! queue): so the control thread keeps the address on every engine
//! (`Snapshot::lingering`) until none reports a connection to it, then
//! takes it off in a change of its own.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use control::config::{Config, Port};

use super::{Controller, Reload};
use crate::snapshot::{FromEngine, ToEngine};

/// How often the engines are asked whether they still serve a lingering
/// address (only while there is one).
const ASK_EVERY: Duration = Duration::from_millis(100);

/// The addresses to keep after a change from `cur` to `next`, `kept`
/// before it: those kept, and those of `cur`'s VIPs, that no VIP of
/// `next` has and that are not a port's own (which stay anyway).
pub(super) fn after_change(kept: &[IpAddr], cur: &Config, next: &Config) -> Vec<IpAddr> {
    let vip_addrs = |c: &Config| -> Vec<IpAddr> {
        c.vips
            .iter()
            .filter_map(|v| v.listen_addr().ok())
            .map(|a| a.ip())
            .collect()
    };
    let wanted = vip_addrs(next);
    let mut out: Vec<IpAddr> = Vec::new();
    for a in kept.iter().copied().chain(vip_addrs(cur)) {
        if !wanted.contains(&a) && !is_port_address(next, a) && !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// Whether `ip` is one of a port's (or VLAN's) own addresses.
fn is_port_address(cfg: &Config, ip: IpAddr) -> bool {
    cfg.ports.iter().flat_map(Port::networks).any(|n| match ip {
        IpAddr::V4(a) => n.cidr().is_ok_and(|c| c.addr == a),
        IpAddr::V6(a) => n
            .ipv6_cidrs()
            .is_ok_and(|cs| cs.iter().any(|c| c.addr == a)),
    })
}

impl Controller {
    /// Asks the engines (every [`ASK_EVERY`], while addresses linger)
    /// which lingering addresses their connections still use, and takes
    /// off every engine the ones none uses. An engine that does not
    /// answer keeps them all (asked again next time).
    pub(super) fn release_lingering(&mut self, now: Instant) {
        if self.lingering.is_empty() || self.linger_asked.is_some_and(|t| now < t + ASK_EVERY) {
            return;
        }
        self.linger_asked = Some(now);
        let addrs = self.lingering.clone();
        let answers = self.ask_engines(
            |ask| ToEngine::Serving {
                ask,
                addrs: addrs.clone(),
            },
            |m| match m {
                FromEngine::Serving {
                    engine,
                    ask,
                    serving,
                } => Some((engine, ask, serving)),
                _ => None,
            },
        );
        let Ok(answers) = answers else {
            return;
        };
        let unused: Vec<IpAddr> = addrs
            .iter()
            .copied()
            .filter(|a| !answers.iter().any(|(_, s)| s.contains(a)))
            .collect();
        if unused.is_empty() {
            return;
        }
        let kept = std::mem::take(&mut self.lingering);
        self.lingering = kept
            .iter()
            .copied()
            .filter(|a| !unused.contains(a))
            .collect();
        let names: Vec<String> = unused.iter().map(ToString::to_string).collect();
        let what = format!(
            "address {} released (its removed VIP's last connection ended)",
            names.join(" ")
        );
        let reply = self.push_change(self.cfg.clone(), Reload::Nothing, false, what);
        if !reply.ok {
            // Kept, and asked about again.
            self.lingering = kept;
        }
    }

    /// Addresses of removed VIPs still kept for their open connections.
    pub fn lingering(&self) -> &[IpAddr] {
        &self.lingering
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vips: &[&str]) -> Config {
        let mut text = String::from(
            "[eal]\nlcores = [1]\n[[port]]\nname = \"p0\"\ndevice = \"net_ring0\"\n\
             addresses = [\"10.78.0.1/24\", \"2001:db8:78::1/64\"]\n",
        );
        for (i, listen) in vips.iter().enumerate() {
            text += &format!(
                "[[vip]]\nname = \"v{i}\"\nlisten = \"{listen}\"\nrespond = \"builtin\"\n"
            );
        }
        Config::parse(&text).unwrap()
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn a_removed_vips_own_address_lingers_a_shared_or_ports_does_not() {
        let cur = config(&[
            "10.78.0.10:80",
            "10.78.0.11:80",
            "10.78.0.11:443",
            "10.78.0.1:8080",
            "[2001:db8:78::10]:443",
        ]);
        // .10 and the IPv6 VIP removed; one of .11's two removed (the
        // other keeps the address); the port's own address stays anyway.
        let next = config(&["10.78.0.11:443"]);
        assert_eq!(
            after_change(&[], &cur, &next),
            ips(&["10.78.0.10", "2001:db8:78::10"])
        );
        // Kept ones stay kept, without repeats; one taken by a new VIP goes.
        let again = config(&["10.78.0.11:443", "10.78.0.12:80"]);
        assert_eq!(
            after_change(&ips(&["10.78.0.10", "10.78.0.12"]), &next, &again),
            ips(&["10.78.0.10"])
        );
        assert_eq!(
            after_change(&ips(&["10.78.0.10"]), &next, &next),
            ips(&["10.78.0.10"])
        );
    }
}
