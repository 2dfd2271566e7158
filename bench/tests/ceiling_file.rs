//! `dpbench ceiling --json` and `--ceiling-file`: the ceiling measured
//! once with the DUT core free (scripts/bench-suite.sh) and read by the
//! run that reports against it. No network or root needed.

use std::process::Command;

fn dpbench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dpbench"))
        .args(args)
        .output()
        .expect("dpbench runs")
}

#[test]
fn ceiling_json_holds_the_ceilings_a_run_reads() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("ceiling.json");
    let out = dpbench(&[
        "ceiling",
        "--core",
        "0",
        "--ms",
        "5",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let p256 = v["ceilings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["handshake"] == "ECDHE X25519 + ECDSA P-256")
        .expect("the P-256 ceiling");
    assert!(p256["handshakes_per_s"].as_f64().unwrap() > 0.0);
    // The markdown printed is the same measurement.
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("ECDHE X25519 + ECDSA P-256"), "{md}");
}

#[test]
fn a_bad_ceiling_file_is_refused_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"not\": \"ceilings\"}").unwrap();
    // The target is unreachable: the error must come from the file, first.
    let target = "name=x,host=192.0.2.1,p256=9,core=0";
    for (file, want) in [
        (bad.to_str().unwrap(), "not `dpbench ceiling --json` output"),
        (
            "/nonexistent/ceiling.json",
            "--ceiling-file /nonexistent/ceiling.json",
        ),
    ] {
        let out = dpbench(&[
            "test",
            "cps",
            "--target",
            target,
            "--key",
            "p256",
            "--ceiling-file",
            file,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{err}");
    }
    // Measuring here and reading a file are exclusive.
    let out = dpbench(&[
        "test",
        "cps",
        "--target",
        target,
        "--ceiling-file",
        bad.to_str().unwrap(),
        "--ceiling-ms",
        "5",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}
