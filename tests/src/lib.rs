//! Helpers for tlsdp's end-to-end tests: a lab (two network namespaces and a
//! veth link, made by `scripts/lab.sh`) and a running `dpd` in it.
//!
//! Tests need root (namespaces, DPDK) and the binaries built
//! (`cargo build --workspace --bins`; `scripts/test.sh` does both). Every
//! lab has its own name and subnet, so tests can run in parallel; every
//! process is stopped by PID when its handle drops.
#![forbid(unsafe_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use control::api::{Body, Client, CoreStats, Request};

pub mod capture;
pub mod cluster;
pub mod transfer;

/// The workspace root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A workspace binary (`dpd`, `dpctl`) from the same target folder as the
/// running test.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/..");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not built: run `cargo build --workspace --bins` first (scripts/test.sh does)",
        path.display()
    );
    path
}

/// Fails the test with a clear message unless running as root.
pub fn require_root() {
    let uid = Command::new("id").arg("-u").output().expect("id -u");
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "end-to-end tests need root (network namespaces, DPDK): run scripts/test.sh as root"
    );
}

/// Runs a command, returning its output; panics if it cannot start.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

static NEXT_LAB: AtomicU32 = AtomicU32::new(0);

/// Two namespaces joined by a veth link: `<name>-cli` (veth-cli, .2) and
/// `<name>-dut` (veth-dut, no address). Removed on drop.
#[derive(Debug)]
pub struct Lab {
    pub name: String,
    /// The /24 prefix, e.g. `10.77.13`.
    pub net: String,
}

impl Lab {
    /// Makes a lab with a name and subnet unique to this process and test.
    pub fn up(tag: &str) -> Self {
        require_root();
        let n = NEXT_LAB.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // Names stay short (namespace names become file names) and unique.
        let name = format!("e2e{}{}{}", tag, pid % 100_000, n);
        let net = format!(
            "10.{}.{}",
            100 + (pid % 100),
            1 + (pid / 100 % 25) * 10 + n % 10
        );
        let out = run(Command::new(repo_root().join("scripts/lab.sh"))
            .args(["up", &name])
            .env("LAB_NET", &net));
        assert!(
            out.status.success(),
            "lab.sh up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { name, net }
    }

    /// The DUT's address.
    pub fn dut_ip(&self) -> String {
        format!("{}.1", self.net)
    }

    /// Runs a command inside the client namespace.
    pub fn client(&self, args: &[&str]) -> Output {
        run(&mut self.client_command(args))
    }

    /// A command that runs inside the client namespace, for callers that set
    /// up its stdio themselves (interactive clients, background processes).
    pub fn client_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &format!("{}-cli", self.name)])
            .args(args);
        cmd
    }

    /// A client that sends half a request head to the DUT's port 80 and
    /// waits for an answer (for up to `secs`): a connection dpd holds
    /// open, for tests of what a stop does to it ([`assert_reset`]).
    pub fn half_request_client(&self, secs: u32) -> std::process::Child {
        let script = format!(
            "exec 3<>/dev/tcp/{}/80 && printf 'GET / HT' >&3 && cat <&3; echo \"rc=$?\"",
            self.dut_ip()
        );
        self.client_command(&["timeout", &secs.to_string(), "bash", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bash in the client namespace")
    }

    /// A dpd configuration for this lab's DUT side on the given device kind
    /// (`net_af_packet` or `net_af_xdp`). Its engine pauses 50 µs after 256
    /// idle iterations (`idle_sleep_us`): a test binary's tests run at once,
    /// each with a dpd on core 1, and busy-polling engines that never yield
    /// starved the one moving 100 MB through 2 % loss (RTOs backing off
    /// until curl gave up).
    pub fn config(&self, driver: &str, socket: &Path, extra_eal: &str) -> String {
        format!(
            "[eal]\nlcores = [1]\nidle_sleep_us = 50\n{extra_eal}\n\n[[port]]\nname = \"p0\"\ndevice = \"{driver}0,iface=veth-dut\"\naddress = \"{}/24\"\n\n[control]\nsocket = \"{}\"\n",
            self.dut_ip(),
            socket.display()
        )
    }

    /// Like [`Lab::config`], plus a plain-TCP VIP on port 80 answered by the
    /// built-in HTTP responder.
    pub fn config_with_vip(&self, driver: &str, socket: &Path) -> String {
        format!(
            "{}\n[[vip]]\nname = \"plain\"\nlisten = \"{}:80\"\nrespond = \"builtin\"\n",
            self.config(driver, socket, ""),
            self.dut_ip()
        )
    }

    /// [`Lab::config_with_vip`] plus a `[tcp]` section.
    pub fn config_with_vip_tcp(&self, driver: &str, socket: &Path, tcp: &str) -> String {
        format!("{}\n[tcp]\n{tcp}\n", self.config_with_vip(driver, socket))
    }

    /// Drops `percent` % of TCP segments to and from port 80 in the client
    /// namespace, both directions (nftables `numgen random`).
    pub fn drop_tcp(&self, percent: u32) {
        self.drop_tcp_port(80, percent);
    }

    /// Like [`Lab::drop_tcp`], for the VIP port `port`.
    pub fn drop_tcp_port(&self, port: u16, percent: u32) {
        let rules = format!(
            "table inet tlsdp_loss {{\n chain in {{ type filter hook input priority 0; policy accept; tcp sport {port} numgen random mod 100 < {percent} drop; }}\n chain out {{ type filter hook output priority 0; policy accept; tcp dport {port} numgen random mod 100 < {percent} drop; }}\n}}\n"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("loss.nft");
        fs::write(&file, rules).expect("write rules");
        let out = self.client(&["nft", "-f", file.to_str().expect("utf-8 path")]);
        assert!(
            out.status.success(),
            "nft failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Lab {
    /// Makes the persistent tap `tap-cli` with virtio-net headers in the
    /// client namespace, with `NET.2/24` (`scripts/lab.sh tap on`): the
    /// kernel side of a `vnet_tap` port (`vnet_tap,iface=tap-cli,
    /// netns=<name>-cli`, at `NET.1`). Goes with the namespace.
    pub fn add_vnet_tap(&self, net: &str) {
        let out = run(Command::new(repo_root().join("scripts/lab.sh"))
            .args(["tap", "on", &self.name])
            .env("LAB_TAP_NET", net));
        assert!(
            out.status.success(),
            "lab.sh tap on failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// An IPv6 /64 prefix of this lab's own, `fd00:A:B` for its IPv4
    /// /24 `10.A.B` (unique among the tests).
    pub fn prefix6(&self) -> String {
        let mut octets = self.net.split('.').skip(1);
        let (a, b) = (
            octets.next().expect("10.A.B"),
            octets.next().expect("10.A.B"),
        );
        format!("fd00:{a}:{b}")
    }

    /// Turns IPv6 on for `dev` in the client namespace and adds `cidr`
    /// there, usable at once (no duplicate address detection).
    pub fn add_client_ipv6(&self, dev: &str, cidr: &str) {
        let enable = format!("net.ipv6.conf.{dev}.disable_ipv6=0");
        for args in [
            vec!["sysctl", "-qw", &enable],
            vec!["ip", "-6", "addr", "add", cidr, "dev", dev, "nodad"],
        ] {
            let out = self.client(&args);
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// Adds `NET.last_octet/24` to the client namespace's veth (for
    /// backends); returns the address.
    pub fn add_client_address(&self, last_octet: u8) -> String {
        let addr = format!("{}.{last_octet}", self.net);
        let out = self.client(&[
            "ip",
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "veth-cli",
        ]);
        assert!(
            out.status.success(),
            "ip addr add {addr}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        addr
    }
}

/// A Python HTTP server (`/usr/bin/python3 -m http.server`) in the client
/// namespace on `addr:port`, serving a folder whose `index.html` is `page`;
/// killed (by PID) on drop.
#[derive(Debug)]
pub struct HttpBackend {
    child: Child,
    _dir: tempfile::TempDir,
}

impl HttpBackend {
    /// Starts it and waits (up to 10 s) until it answers.
    pub fn start(lab: &Lab, addr: &str, port: u16, page: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("index.html"), page).expect("write page");
        let child = lab
            .client_command(&[
                "/usr/bin/python3",
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                addr,
                "--directory",
                dir.path().to_str().expect("utf-8 path"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 -m http.server");
        let url = format!("http://{addr}:{port}/");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if lab
                .client(&["curl", "-s", "--max-time", "1", &url])
                .status
                .success()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { child, _dir: dir }
    }
}

impl Drop for HttpBackend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/lab.sh"))
            .args(["down", &self.name])
            .stdout(Stdio::null())
            .status();
    }
}

/// nginx in the lab's client namespace with the `server { ... }` blocks
/// `servers` (temporary files in `dir`), waited for until `probe` (a
/// URL) answers (up to 5 s). Stopped on drop.
#[derive(Debug)]
pub struct Nginx(Child);

impl Nginx {
    pub fn start(lab: &Lab, dir: &Path, servers: &str, probe: &str) -> Self {
        let d = dir.display();
        let conf = format!(
            "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/nginx.err;\n\
             events {{ worker_connections 1024; }}\n\
             http {{ access_log off; client_body_temp_path {d}/b; proxy_temp_path {d}/p; fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;\n{servers}\n}}\n"
        );
        fs::write(dir.join("nginx.conf"), conf).expect("write nginx.conf");
        let child = lab
            .client_command(&[
                "nginx",
                "-p",
                &d.to_string(),
                "-c",
                &format!("{d}/nginx.conf"),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx (scripts/setup.sh installs it)");
        for _ in 0..100 {
            if lab.client(&["curl", "-s", probe]).status.success() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Self(child)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `dpd`, stopped (SIGTERM, then SIGKILL) on drop.
#[derive(Debug)]
pub struct Dpd {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Dpd {
    /// Starts `dpd` with `config` inside the lab's DUT namespace and waits
    /// until its control socket answers.
    pub fn start(lab: &Lab, config_for: impl FnOnce(&Path) -> String) -> Self {
        Self::start_in(&format!("{}-dut", lab.name), config_for)
    }

    /// Starts `dpd` with `config` inside network namespace `netns` and
    /// waits until its control socket answers.
    pub fn start_in(netns: &str, config_for: impl FnOnce(&Path) -> String) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("control.sock");
        let cfg = dir.path().join("dpd.toml");
        fs::write(&cfg, config_for(&socket)).expect("write config");
        let log = dir.path().join("dpd.log");
        let logf = fs::File::create(&log).expect("log file");
        let child = Command::new("ip")
            .args(["netns", "exec", netns])
            .arg(bin("dpd"))
            .arg("--config")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().expect("dup"))
            .stderr(logf)
            .spawn()
            .expect("spawn dpd");
        let mut dpd = Self {
            child: Some(child),
            dir,
            socket,
            log,
        };
        dpd.wait_ready(Duration::from_secs(30));
        dpd
    }

    fn wait_ready(&mut self, limit: Duration) {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if let Some(status) = self
                .child
                .as_mut()
                .expect("running")
                .try_wait()
                .expect("try_wait")
            {
                panic!("dpd exited early ({status}):\n{}", self.log_text());
            }
            if Client::connect(&self.socket)
                .and_then(|mut c| c.call(&Request::Status))
                .is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("dpd not ready after {limit:?}:\n{}", self.log_text());
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Runs `dpctl ARGS...` against it.
    pub fn dpctl(&self, args: &[&str]) -> Output {
        run(Command::new(bin("dpctl"))
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null()))
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The total counters over all engines.
    pub fn stats(&self) -> CoreStats {
        self.try_stats().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Dpd::stats`], or why there are none.
    fn try_stats(&self) -> Result<CoreStats, String> {
        let reply = Client::connect(&self.socket)
            .and_then(|mut c| c.call(&Request::Stats))
            .map_err(|e| format!("stats: {e}"))?;
        match reply.body {
            Some(Body::Stats(s)) => Ok(s.total),
            other => Err(format!("unexpected stats reply {other:?}")),
        }
    }

    /// The total counters once `ready` holds for them (engines publish their
    /// counters a moment after the event), or after `limit`: the caller's
    /// assertions then report what was seen.
    pub fn stats_when(&self, limit: Duration, ready: impl Fn(&CoreStats) -> bool) -> CoreStats {
        let t0 = Instant::now();
        loop {
            let stats = self.stats();
            if ready(&stats) || t0.elapsed() > limit {
                return stats;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` and waits for exit.
    pub fn stop_with(&mut self, signal: i32, limit: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let pid = child.id();
        let out = run(Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string()));
        assert!(out.status.success(), "kill failed");
        let t0 = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status;
            }
            if t0.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "dpd did not stop within {limit:?} of signal {signal}:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What a failed test leaves to read: whether `dpd` had exited (and
    /// how), its counters if it still answers, the end of its log.
    fn post_mortem(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        match child.try_wait() {
            Ok(Some(status)) => eprintln!("dpd had exited: {status}"),
            _ => match self.try_stats() {
                Ok(total) => eprintln!("dpd still running; its counters: {total:?}"),
                Err(e) => eprintln!("dpd still running; {e}"),
            },
        }
        let log = self.log_text();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        eprintln!("dpd log, last {} lines:", tail.len());
        for line in tail.iter().rev() {
            eprintln!("  {line}");
        }
    }
}

impl Drop for Dpd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.post_mortem();
        }
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Test certificates made with openssl in `dir`: a CA (`ca.pem`, `ca.key`)
/// and leaf chains (`NAME.pem`, leaf then CA) with keys (`NAME.key`) for
/// `rsa.test` (RSA-2048), `p256.test` and `p384.test` (ECDSA). More leaves
/// from the same CA: [`make_cert`].
pub fn make_certs(dir: &Path) {
    let sh = format!(
        "set -e; cd {}\nopenssl req -x509 -nodes -days 365 -subj /CN=tlsdp-test-ca -newkey ec -pkeyopt ec_paramgen_curve:P-256 -keyout ca.key -out ca.pem",
        dir.display()
    );
    let out = run(Command::new("sh").arg("-c").arg(sh));
    assert!(
        out.status.success(),
        "making the CA: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    make_cert(dir, "rsa", KeySpec::Rsa2048, &["rsa.test"]);
    make_cert(dir, "p256", KeySpec::P256, &["p256.test"]);
    make_cert(dir, "p384", KeySpec::P384, &["p384.test"]);
}

/// A test certificate's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySpec {
    Rsa2048,
    P256,
    P384,
}

/// One more leaf from the CA [`make_certs`] made in `dir`: `FILE.pem` (leaf
/// then CA) and `FILE.key`, for the DNS names `names` (subjectAltName; the
/// subject CN is the first name, so `*.x.test` works too).
pub fn make_cert(dir: &Path, file: &str, key: KeySpec, names: &[&str]) {
    let newkey = match key {
        KeySpec::Rsa2048 => "-newkey rsa:2048",
        KeySpec::P256 => "-newkey ec -pkeyopt ec_paramgen_curve:P-256",
        KeySpec::P384 => "-newkey ec -pkeyopt ec_paramgen_curve:P-384",
    };
    let cn = names.first().expect("at least one name");
    let san: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
    // The file names and DNS names are the tests' own (no shell quoting
    // beyond single quotes is needed for `*`).
    let sh = format!(
        r#"set -e; cd {dir}
openssl req -new -nodes -subj '/CN={cn}' {newkey} -keyout {file}.key -out {file}.csr
printf 'subjectAltName=%s\nbasicConstraints=critical,CA:FALSE\n' '{san}' > {file}.ext
openssl x509 -req -in {file}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 -extfile {file}.ext -out {file}.crt
cat {file}.crt ca.pem > {file}.pem"#,
        dir = dir.display(),
        san = san.join(",")
    );
    let out = run(Command::new("sh").arg("-c").arg(sh));
    assert!(
        out.status.success(),
        "making certificate {file}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Checks that `path` holds exactly `len` bytes of the responder's pattern.
pub fn verify_pattern_file(path: &Path, len: u64) {
    use std::io::Read;
    let mut f = fs::File::open(path).expect("downloaded file");
    let mut got = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    loop {
        let n = f.read(&mut got).expect("read");
        if n == 0 {
            break;
        }
        verify_pattern_at(&got[..n], pos);
        pos += n as u64;
    }
    assert_eq!(pos, len, "length");
}

/// Checks that `data` is exactly `len` bytes of the responder's pattern.
pub fn verify_pattern(data: &[u8], len: u64) {
    assert_eq!(data.len() as u64, len, "length");
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        verify_pattern_at(chunk, (i as u64) << 20);
    }
}

/// Checks that `data` is the responder's pattern from body offset `pos`.
fn verify_pattern_at(data: &[u8], pos: u64) {
    let mut want = vec![0u8; data.len()];
    dataplane::app::responder::fill_pattern(&mut want, pos);
    if let Some(i) = data.iter().zip(&want).position(|(a, b)| a != b) {
        let at = pos + i as u64;
        let end = (i + 32).min(data.len());
        panic!(
            "content differs at byte {at}: {:?}",
            String::from_utf8_lossy(&data[i..end])
        );
    }
}

/// Runs `dpd --config` with `config` (outside any namespace) and returns its
/// exit status and stderr: for configurations that must be refused.
pub fn dpd_refuses(config: &str) -> (ExitStatus, String) {
    refuses(Command::new(bin("dpd")), config)
}

/// [`dpd_refuses`] inside `lab`'s DUT namespace, for devices that live
/// there.
pub fn dpd_refuses_in(lab: &Lab, config: &str) -> (ExitStatus, String) {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &format!("{}-dut", lab.name)])
        .arg(bin("dpd"));
    refuses(cmd, config)
}

fn refuses(mut cmd: Command, config: &str) -> (ExitStatus, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("dpd.toml");
    fs::write(&cfg, config).expect("write config");
    let mut child = cmd
        .arg("--config")
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dpd");
    let t0 = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            break;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "dpd kept running on a bad config:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An upload sink in the client namespace on `ip:port`: answers each POST
/// with the body's length and SHA-256. Stopped on drop.
#[derive(Debug)]
pub struct UploadSink(Child);

impl UploadSink {
    pub fn start(lab: &Lab, ip: &str, port: u16) -> Self {
        let script = r#"
import hashlib, http.server, sys

class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers['Content-Length'])
        h = hashlib.sha256()
        left = n
        while left > 0:
            b = self.rfile.read(min(left, 1 << 20))
            if not b:
                break
            h.update(b)
            left -= len(b)
        body = ('%d %s\n' % (n - left, h.hexdigest())).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass

http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"#;
        let child = lab
            .client_command(&["python3", "-c", script, ip, &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        for _ in 0..100 {
            if lab
                .client(&["sh", "-c", &format!("exec 3<>/dev/tcp/{ip}/{port}")])
                .status
                .success()
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Self(child)
    }
}

impl Drop for UploadSink {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl UploadSink {
    /// POSTs `file` from the client namespace to `url` (curl, TLS checked
    /// against `ca`, the name resolved as `resolve` says) and returns what
    /// the sink answered: the length and SHA-256 it got.
    pub fn upload(lab: &Lab, ca: &str, resolve: &str, url: &str, file: &Path) -> String {
        let o = lab.client(&[
            "curl",
            "-sS",
            "--max-time",
            "240",
            "--cacert",
            ca,
            "--resolve",
            resolve,
            "-H",
            "Expect:",
            "--data-binary",
            &format!("@{}", file.display()),
            url,
        ]);
        assert!(
            o.status.success(),
            "upload to {url}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// What the sink answers for `file` ("LENGTH SHA256\n").
    pub fn expected(file: &Path) -> String {
        let len = fs::metadata(file).expect("file").len();
        let sum = run(Command::new("sha256sum").arg(file));
        let hex = String::from_utf8_lossy(&sum.stdout)
            .split_whitespace()
            .next()
            .expect("sha256sum output")
            .to_string();
        format!("{len} {hex}\n")
    }
}

/// Connections and errors of a finished dpbench run.
pub fn dpbench_result(mut child: Child, out: &Path) -> (u64, u64) {
    let status = child.wait().unwrap();
    let text = std::fs::read_to_string(out.join("results.json"))
        .unwrap_or_else(|e| panic!("dpbench ({status}) wrote no results: {e}"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let run = &v["results"][0]["runs"][0];
    let series = run["series"].as_array().expect("series");
    let conns = series
        .iter()
        .map(|p| p["conns_per_s"].as_u64().unwrap())
        .sum();
    let errors = series.iter().map(|p| p["errors"].as_u64().unwrap()).sum();
    (conns, errors)
}

/// dpbench's command line for one short closed-loop run of `kind` against
/// the P-256 TLS port `host:port` (8 clients, certificates not checked, no
/// ramps, no crypto ceiling), results in `out`, then `extra`.
pub fn dpbench_args(
    kind: &str,
    host: &str,
    port: u16,
    secs: u32,
    out: &Path,
    extra: &[&str],
) -> Vec<String> {
    let mut args: Vec<String> = [
        bin("dpbench").to_str().expect("utf-8 path"),
        "test",
        kind,
        "--target",
        &format!("name=dpd,host={host},p256={port}"),
        "--key",
        "p256",
        "--dangerous-no-verify",
        "--sni",
        "p256.test",
        "-c",
        "8",
        "--repeat",
        "1",
        "--ramp-up",
        "0",
        "--sustain",
        &secs.to_string(),
        "--ramp-down",
        "0",
        "--ceiling-ms",
        "0",
        "--out",
        out.to_str().expect("utf-8 path"),
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    args.extend(extra.iter().map(ToString::to_string));
    args
}

/// Waits for a [`Lab::half_request_client`] and asserts dpd reset it (its
/// read failed with ECONNRESET), rather than leave it waiting.
pub fn assert_reset(client: std::process::Child) {
    let out = client.wait_with_output().expect("the client's output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        stdout.contains("rc=1") && stderr.contains("reset by peer"),
        "the client was reset: {stdout} {stderr}"
    );
}
