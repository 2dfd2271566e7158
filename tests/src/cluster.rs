//! The routed lab of `scripts/lab.sh cluster` (docs/cluster.md): a client
//! namespace behind a router namespace running BIRD and Linux ECMP, and
//! dpd nodes each announcing its VIPs to the router over BGP through its
//! own BIRD. Removed on drop.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::{repo_root, require_root, run, Dpd};

static NEXT_CLUSTER: AtomicU32 = AtomicU32::new(0);

/// A cluster lab: namespaces `<name>-cli`, `<name>-rtr`, `<name>-n1`...
#[derive(Debug)]
pub struct Cluster {
    pub name: String,
    pub nodes: u32,
}

impl Cluster {
    /// Makes a cluster of `nodes` nodes; `ecmp` is `hash` (BIRD programs
    /// multipath routes) or `resilient` (next-hop groups mirrored from
    /// BIRD's table by `scripts/cluster/ecmp-sync.py`), either with
    /// `+pin` for a router that keeps established flows on their node
    /// (`LAB_PIN=on`).
    pub fn up(tag: &str, nodes: u32, ecmp: &str) -> Self {
        let (ecmp, pin) = match ecmp.strip_suffix("+pin") {
            Some(e) => (e, "on"),
            None => (ecmp, "off"),
        };
        require_root();
        let n = NEXT_CLUSTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("c{tag}{}{n}", std::process::id() % 10_000);
        let out = run(Command::new(repo_root().join("scripts/lab.sh"))
            .args(["cluster", "up", &name])
            .env("LAB_NODES", nodes.to_string())
            .env("LAB_ECMP", ecmp)
            .env("LAB_PIN", pin));
        assert!(
            out.status.success(),
            "lab.sh cluster up failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Self { name, nodes }
    }

    /// The namespace of `who`: `cli`, `rtr`, `n1`, ...
    pub fn ns(&self, who: &str) -> String {
        format!("{}-{who}", self.name)
    }

    /// A command run inside `who`'s namespace.
    pub fn command(&self, who: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(who)]).args(args);
        cmd
    }

    pub fn exec(&self, who: &str, args: &[&str]) -> Output {
        run(&mut self.command(who, args))
    }

    /// `birdc` on `who`'s BIRD (`rtr`, `n1`, ...): its output.
    pub fn birdc(&self, who: &str, args: &[&str]) -> String {
        let sock = format!("/run/tlsdp-lab/{}/{who}.ctl", self.name);
        let out = run(Command::new("birdc").args(["-s", &sock]).args(args));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The gateways the router's kernel forwards `prefix` to (empty: no
    /// route), from a multipath route or a next-hop group alike.
    pub fn next_hops(&self, prefix: &str) -> Vec<String> {
        let family = if prefix.contains(':') { "-6" } else { "-4" };
        let out = self.exec("rtr", &["ip", family, "-j", "route", "show", prefix]);
        let routes: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        let Some(route) = routes.as_array().and_then(|r| r.first()) else {
            return Vec::new();
        };
        let mut hops: Vec<String> = if let Some(nhs) = route["nexthops"].as_array() {
            nhs.iter()
                .filter_map(|h| h["gateway"].as_str().map(str::to_string))
                .collect()
        } else if let Some(gw) = route["gateway"].as_str() {
            vec![gw.to_string()]
        } else if let Some(id) = route["nhid"].as_u64() {
            self.group_gateways(id)
        } else {
            Vec::new()
        };
        hops.sort();
        hops
    }

    /// The gateways of next-hop group `id` (each member's).
    fn group_gateways(&self, id: u64) -> Vec<String> {
        let out = self.exec(
            "rtr",
            &["ip", "-j", "nexthop", "show", "id", &id.to_string()],
        );
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        let group = v.as_array().and_then(|a| a.first()).cloned();
        let members: Vec<u64> = group
            .as_ref()
            .and_then(|g| g["group"].as_array())
            .map(|m| m.iter().filter_map(|e| e["id"].as_u64()).collect())
            .unwrap_or_default();
        members
            .into_iter()
            .filter_map(|m| {
                let out = self.exec(
                    "rtr",
                    &["ip", "-j", "nexthop", "show", "id", &m.to_string()],
                );
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
                v.as_array()?.first()?["gateway"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect()
    }

    /// Node `i`'s dataplane address (the router's next hop for it).
    pub fn node_ip(&self, i: u32) -> String {
        format!("10.82.{i}.2")
    }

    /// Node `i`'s IPv6 dataplane address.
    pub fn node_ip6(&self, i: u32) -> String {
        format!("fd00:82:{i}::2")
    }

    /// Waits until the router forwards `prefix` to exactly `want` (sorted
    /// gateways); how long it took. Panics after `limit`, showing the
    /// router's BIRD and kernel tables.
    pub fn await_next_hops(&self, prefix: &str, want: &[String], limit: Duration) -> Duration {
        let t0 = Instant::now();
        loop {
            if self.next_hops(prefix) == want {
                return t0.elapsed();
            }
            if t0.elapsed() > limit {
                panic!(
                    "router: {prefix} via {:?}, not {want:?} after {limit:?}\nbirdc:\n{}\nip route:\n{}",
                    self.next_hops(prefix),
                    self.birdc("rtr", &["show", "route", "all"]),
                    String::from_utf8_lossy(&self.exec("rtr", &["ip", "route"]).stdout)
                        + String::from_utf8_lossy(&self.exec("rtr", &["ip", "-6", "route"]).stdout)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts dpd on node `i` with the built-in responder on `vips`
    /// (`ADDR:PORT`), `[routing]` (quiet time `quiet_ms`) and `extra`
    /// configuration appended.
    pub fn start_node(&self, i: u32, quiet_ms: u32, extra: &str) -> Dpd {
        let ip = self.node_ip(i);
        Dpd::start_in(&self.ns(&format!("n{i}")), |socket: &Path| {
            format!(
                "[eal]\nlcores = [1]\nidle_sleep_us = 50\n\n[[port]]\nname = \"p0\"\n\
                 device = \"net_af_packet0,iface=dp0\"\n\
                 addresses = [\"{ip}/24\", \"fd00:82:{i}::2/64\"]\n\
                 gateway = \"10.82.{i}.1\"\ngateway6 = \"fd00:82:{i}::1\"\n\n[control]\nsocket = \"{}\"\nmetrics = \"\"\n\n\
                 [routing]\nwithdraw_quiet_ms = {quiet_ms}\n\n{extra}\n",
                socket.display()
            )
        })
    }

    /// Runs `script` (sh) in the client namespace.
    pub fn client_sh(&self, script: &str) -> Output {
        self.exec("cli", &["sh", "-c", script])
    }

    /// `dpctl` against a node.
    pub fn dpctl(dpd: &Dpd, args: &[&str]) -> Output {
        dpd.dpctl(args)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/lab.sh"))
            .args(["cluster", "down", &self.name])
            .stdout(Stdio::null())
            .status();
    }
}
