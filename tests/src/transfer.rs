//! Large transfers through dpd checked whole: a page a kernel backend
//! serves, the responder's pattern, and no frame dropped on the way.

use crate::{verify_pattern_file, Dpd, Lab};

/// A 3 MB page for a backend to serve: letters, not a repeating pattern.
pub fn page() -> String {
    (0..3_000_000u32)
        .map(|i| char::from(b'a' + (i.wrapping_mul(2_654_435_761) >> 27) as u8 % 26))
        .collect()
}

/// curl `url` from the client namespace; panics unless it answers `page`.
pub fn fetch_page(lab: &Lab, url: &str, page: &str) {
    let got = lab.client(&["curl", "-sS", "--max-time", "60", url]);
    assert!(
        got.status.success(),
        "{url}: {}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert!(
        got.stdout == page.as_bytes(),
        "{url}: the page came back altered"
    );
}

/// `bytes` from dpd's responder at `ip`, checked byte for byte.
pub fn responder_download(lab: &Lab, ip: &str, bytes: u64) {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    let out = lab.client(&[
        "curl",
        "-sS",
        "--max-time",
        "60",
        "-o",
        body.to_str().unwrap(),
        &format!("http://{ip}/bytes/{bytes}"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    verify_pattern_file(&body, bytes);
}

/// dpd dropped no frame as too large, unreadable or unbufferable (frames
/// not for it, such as the kernel's IPv6 router solicitations, may be).
pub fn no_frame_dropped_for_its_size(dpd: &Dpd) {
    let stats = dpd.stats();
    for why in [
        "oversize",
        "malformed",
        "multi_segment",
        "no_buffer",
        "port_error",
        "bad_tcp_checksum",
        "bad_ip_checksum",
    ] {
        assert_eq!(stats.drops[why], 0, "{why}: {stats:?}");
    }
}
