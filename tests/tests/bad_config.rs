//! `dpd` refuses bad configurations with a message naming the field and the
//! value, and a non-zero exit: 2 for configuration errors, 1 when DPDK
//! itself fails. None of these touch a network.

use e2e::dpd_refuses;

const GOOD: &str = r#"
[eal]
lcores = [1]

[[port]]
name = "p0"
device = "net_ring0"
address = "10.99.0.1/24"

[control]
socket = "/tmp/tlsdp-e2e-never-bound.sock"
"#;

/// Runs dpd on `config` and checks its exit code and message. Errors dpd
/// finds only once it starts DPDK come after it binds its control socket
/// and metrics endpoint: each run gets a socket of its own and no metrics,
/// so tests running at once never find each other's.
fn refused(config: &str, code: i32, needles: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("dpd.sock");
    let config = config.replace(
        "socket = \"/tmp/tlsdp-e2e-never-bound.sock\"",
        &format!("socket = \"{}\"\nmetrics = \"\"", socket.display()),
    );
    let (status, stderr) = dpd_refuses(&config);
    assert_eq!(status.code(), Some(code), "exit code; stderr:\n{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "stderr lacks {n:?}:\n{stderr}");
    }
}

#[test]
fn unknown_key() {
    refused(
        &GOOD.replace("address =", "adress ="),
        2,
        &["config error", "unknown field `adress`"],
    );
}

#[test]
fn bad_address() {
    refused(
        &GOOD.replace("10.99.0.1/24", "10.99.0.1/40"),
        2,
        &["port[0].address", "\"10.99.0.1/40\"", "prefix length"],
    );
    refused(
        &GOOD.replace("10.99.0.1/24", "fe80::1/64"),
        2,
        &["port[0].address", "not an IPv4 address"],
    );
}

/// A bond's member on an interface that does not exist is named (DPDK's
/// bonding driver alone answered "rte_eth_dev_configure failed:
/// Operation not permitted").
#[test]
fn missing_bond_member() {
    refused(
        &GOOD.replace(
            "device = \"net_ring0\"",
            "device = \"net_bonding0\"\n\
             bond_members = [\"net_af_packet0,iface=no-such-veth\"]",
        ),
        2,
        &["port[0].bond_members[0]", "\"no-such-veth\" does not exist"],
    );
}

#[test]
fn missing_device() {
    refused(
        &GOOD.replace("net_ring0", "net_af_packet0,iface=no-such-veth"),
        2,
        &["port[0].device", "\"no-such-veth\" does not exist"],
    );
    refused(
        &GOOD.replace("net_ring0", "eth7"),
        2,
        &["port[0].device", "\"eth7\"", "PCI address"],
    );
}

/// A zero-copy memif client shares dpd's hugepage memory with its server:
/// without hugepages it is refused before DPDK starts, naming the port.
#[test]
fn zero_copy_memif_without_hugepages() {
    refused(
        &GOOD
            .replace("lcores = [1]", "lcores = [1]\nhugepages = \"off\"")
            .replace(
                "net_ring0",
                "net_memif0,role=client,socket=/tmp/tlsdp-e2e-none.sock,socket-abstract=no,zero-copy=yes",
            ),
        2,
        &["port[0].device", "zero-copy memif client needs hugepages"],
    );
}

#[test]
fn core_that_does_not_exist() {
    refused(
        &GOOD.replace("lcores = [1]", "lcores = [4000]"),
        2,
        &["eal.lcores[0]", "4000", "no such core"],
    );
}

#[test]
fn eal_failure_is_reported() {
    refused(
        &GOOD.replace(
            "lcores = [1]",
            "lcores = [1]\nargs = [\"--no-such-eal-flag\"]",
        ),
        1,
        &["rte_eal_init failed", "--no-such-eal-flag"],
    );
}

#[test]
fn missing_file_and_garbage() {
    let (status, stderr) = e2e::dpd_refuses("this is = = not toml");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid config"), "{stderr}");
    let out = e2e::run(
        std::process::Command::new(e2e::bin("dpd")).args(["--config", "/nonexistent/dpd.toml"]),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot read config /nonexistent/dpd.toml")
    );
}

/// `dpd --check --config PATH`.
fn dpd_check(path: &std::path::Path) -> std::process::Output {
    e2e::run(
        std::process::Command::new(e2e::bin("dpd"))
            .arg("--check")
            .arg("--config")
            .arg(path),
    )
}

#[test]
fn check_mode_validates_without_starting() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dpd.toml");
    std::fs::write(&path, GOOD).unwrap();
    let out = dpd_check(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for example in [
        "examples/dpd.toml",
        "examples/dpd-af-xdp.toml",
        "examples/dpd-cluster-node.toml",
        "examples/dpd-memif-client.toml",
    ] {
        let out = dpd_check(&e2e::repo_root().join(example));
        assert!(
            out.status.success(),
            "{example}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `dpd --check` with a connection log writes nothing: the file is not
/// made (before, the check made it and started its writer), and a log in
/// a folder that does not exist fails the check, naming it.
#[test]
fn check_mode_writes_no_connection_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("connections.log");
    let path = dir.path().join("dpd.toml");
    let with_log =
        |log: &std::path::Path| format!("{GOOD}\n[log]\nconnections = \"{}\"\n", log.display());
    std::fs::write(&path, with_log(&log)).unwrap();
    let out = dpd_check(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!log.exists(), "the check made the log file");
    std::fs::write(&path, with_log(&dir.path().join("nowhere/c.log"))).unwrap();
    let out = dpd_check(&path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("log.connections") && err.contains("folder does not exist"),
        "{err}"
    );
}

/// `dpd --check` loads what `dpd` would load at start: a missing
/// certificate, a key others can read under `strict_key_permissions`, or a
/// TLS policy that cannot be built fail the check as they would fail the
/// start (exit 2, naming the field), where it used to say "ok".
#[test]
fn check_mode_loads_certificates_and_tls_policies() {
    let dir = tempfile::tempdir().unwrap();
    e2e::make_certs(dir.path());
    let d = dir.path().display();
    let tls = format!(
        "{GOOD}[[vip]]\nname = \"web\"\nlisten = \"10.99.0.1:443\"\nrespond = \"builtin\"\n\
         certs = [{{ cert = \"{d}/rsa.pem\", key = \"{d}/rsa.key\" }}, \"ec\"]\n\
         [[cert]]\nname = \"ec\"\ncert = \"{d}/p256.pem\"\nkey = \"{d}/p256.key\"\n"
    );
    let check = |config: &str| {
        let path = dir.path().join("dpd.toml");
        std::fs::write(&path, config).unwrap();
        let out = dpd_check(&path);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = check(&tls);
    assert_eq!(code, Some(0), "{stderr}");
    for (config, needles) in [
        (
            tls.replace("rsa.pem", "missing.pem"),
            vec!["vip[0].certs[0]", "missing.pem", "No such file"],
        ),
        (
            tls.replace("respond = ", "tls = { versions = [\"SSLv3\"] }\nrespond = "),
            vec!["vip[0].tls", "SSLv3"],
        ),
        (
            tls.replace("[control]", "[control]\nstrict_key_permissions = true"),
            vec!["cert[0] (ec)", "p256.key", "mode 0644"],
        ),
    ] {
        if needles.contains(&"mode 0644") {
            use std::os::unix::fs::PermissionsExt;
            let key = dir.path().join("p256.key");
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let (code, stderr) = check(&config);
        assert_eq!(code, Some(2), "{config}\n{stderr}");
        for n in needles {
            assert!(stderr.contains(n), "stderr lacks {n:?}:\n{stderr}");
        }
    }
}

#[test]
fn mtu_out_of_range() {
    for mtu in ["9199", "576"] {
        refused(
            &GOOD.replace("address = ", &format!("mtu = {mtu}\naddress = ")),
            2,
            &["port[0].mtu", mtu, "1280", "9198"],
        );
    }
}

/// dpd started on fewer CPUs than the machine has (`taskset`, a cpuset,
/// systemd's `CPUAffinity=`): a core outside them is refused before DPDK
/// starts, naming it. Before, the plan read only the CPUs online, and EAL
/// failed later ("Cannot set affinity") or pinned the control thread
/// where it may not run.
#[test]
fn a_core_outside_dpds_affinity() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dpd.toml");
    std::fs::write(&path, GOOD).unwrap();
    let out = e2e::run(
        std::process::Command::new("timeout")
            .args(["20", "taskset", "-c", "0"])
            .arg(e2e::bin("dpd"))
            .arg("--config")
            .arg(&path),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("eal.lcores[0]") && stderr.contains("not one dpd may run on"),
        "{stderr}"
    );
}
