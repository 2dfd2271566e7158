//! Hugepage policy, end to end. These tests change the machine's hugepage
//! reservation, so they live in their own test binary (cargo runs test
//! binaries one at a time) and run one after another under a lock; the
//! reservation is restored afterwards.

use std::sync::Mutex;

use e2e::{dpd_refuses, Dpd, Lab};

static SERIAL: Mutex<()> = Mutex::new(());

/// Sets the 2 MiB hugepage reservation for the life of the guard.
struct Reservation {
    before: String,
}

const NR: &str = "/proc/sys/vm/nr_hugepages";

impl Reservation {
    fn set(pages: u32) -> Self {
        e2e::require_root();
        let before = std::fs::read_to_string(NR).unwrap();
        std::fs::write(NR, pages.to_string()).unwrap();
        Self { before }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let _ = std::fs::write(NR, self.before.trim());
    }
}

#[test]
fn required_hugepages_missing_is_refused() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _r = Reservation::set(0);
    let config = r#"
[eal]
lcores = [1]
hugepages = "required"

[[port]]
name = "p0"
device = "net_ring0"
address = "10.98.0.1/24"
"#;
    let (status, stderr) = dpd_refuses(config);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("eal.hugepages = \"required\""), "{stderr}");
    assert!(stderr.contains("0 MiB of hugepages free"), "{stderr}");
    assert!(stderr.contains("dpd needs about"), "{stderr}");
}

#[test]
fn preferred_falls_back_to_normal_pages_and_works() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _r = Reservation::set(0);
    let lab = Lab::up("h");
    // The example's --in-memory cannot work without hugepages: dpd must
    // switch to --no-huge --no-shconf by itself.
    let dpd = Dpd::start(&lab, |sock| {
        lab.config("net_af_packet", sock, "args = [\"--in-memory\"]")
    });
    let log = dpd.log_text();
    assert!(
        log.contains("0 MiB of hugepages free, fewer than dpd needs")
            && log.contains("DPDK runs on normal pages"),
        "{log}"
    );
    assert!(log.contains("--no-huge --no-shconf"), "{log}");
    let out = lab.client(&["ping", "-c", "2", "-i", "0.2", "-W", "2", &lab.dut_ip()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn hugepages_used_when_reserved() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _r = Reservation::set(256);
    let lab = Lab::up("g");
    let dpd = Dpd::start(&lab, |sock| {
        lab.config("net_af_packet", sock, "hugepages = \"required\"")
    });
    let log = dpd.log_text();
    assert!(log.contains("--in-memory"), "{log}");
    assert!(!log.contains("--no-huge"), "{log}");
    let out = lab.client(&["ping", "-c", "2", "-i", "0.2", "-W", "2", &lab.dut_ip()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
