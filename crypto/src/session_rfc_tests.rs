//! Hand-built records after the handshake, each answered as the RFC
//! names it (RFC 8446 §5, §5.1, §5.4; RFC 5246 §6.2.1): the session's
//! alert, read back with the client's keys.

use super::tests::{alerts_in, established_forger, sealed, TLS12, TLS13};
use super::*;

/// Fatal alert `description`, and only it, in `out`.
fn fatal(description: u8) -> Vec<(u8, u8)> {
    vec![(2, description)]
}

#[test]
fn a_key_update_split_across_records_is_reassembled() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, mut tx, mut rx) = established_forger(dir.path(), TLS13);
    let first = sealed(&mut tx, content::HANDSHAKE, &[24, 0]);
    let second = sealed(&mut tx, content::HANDSHAKE, &[0, 1, 1]);
    let mut out = Vec::new();
    let p = s.process(&first, &mut out, &mut Vec::new()).unwrap();
    assert_eq!(
        (p.key_updates_received, out.len()),
        (0, 0),
        "waits for the rest"
    );
    let p = s.process(&second, &mut out, &mut Vec::new()).unwrap();
    assert_eq!(p.key_updates_received, 1);
    assert_eq!(p.key_updates_sent, 1, "update_requested answered");
    // Our KeyUpdate, under the old key: a handshake record.
    let mut header = [0u8; HEADER_LEN];
    header.copy_from_slice(&out[..HEADER_LEN]);
    let mut plain = vec![0u8; out.len()];
    let (typ, n) = rx.open(&header, &out[HEADER_LEN..], &mut plain).unwrap();
    assert_eq!(
        (typ, &plain[..n]),
        (content::HANDSHAKE, &[24, 0, 0, 1, 0][..])
    );
}

#[test]
fn another_record_between_the_fragments_of_a_message_is_unexpected() {
    let dir = tempfile::tempdir().unwrap();
    for between in [content::APPLICATION_DATA, content::ALERT] {
        let (mut s, mut tx, mut rx) = established_forger(dir.path(), TLS13);
        let mut wire = sealed(&mut tx, content::HANDSHAKE, &[24, 0, 0]);
        let payload: &[u8] = if between == content::ALERT {
            &[1, 90]
        } else {
            b"hello"
        };
        wire.extend(sealed(&mut tx, between, payload));
        let mut plain = Vec::new();
        let mut out = Vec::new();
        let e = s.process(&wire, &mut out, &mut plain).unwrap_err();
        assert_eq!(e.reason, Failure::UnexpectedMessage, "{between}: {e}");
        assert_eq!(alerts_in(&mut rx, &out), fatal(10), "{between}");
        assert!(plain.is_empty(), "nothing of it delivered");
    }
}

#[test]
fn zero_length_handshake_records_are_unexpected() {
    let dir = tempfile::tempdir().unwrap();
    for versions in [TLS13, TLS12] {
        let (mut s, mut tx, mut rx) = established_forger(dir.path(), versions);
        let rec = sealed(&mut tx, content::HANDSHAKE, &[]);
        let mut out = Vec::new();
        let e = s.process(&rec, &mut out, &mut Vec::new()).unwrap_err();
        assert_eq!(e.reason, Failure::UnexpectedMessage, "{e}");
        assert_eq!(alerts_in(&mut rx, &out), fatal(10));
    }
}

#[test]
fn change_cipher_spec_and_non_tls_bytes_after_the_handshake_end_it_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let inputs: [(&str, &[u8]); 3] = [
        ("ChangeCipherSpec", &[20, 3, 3, 0, 1, 1]),
        // Seen as a header announcing 8,239 bytes: not waited for.
        ("HTTP", b"GET / HTTP/1.1\r\n"),
        ("unknown type", &[99, 3, 3, 0, 40]),
    ];
    for versions in [TLS13, TLS12] {
        for (what, bytes) in inputs {
            let (mut s, _, mut rx) = established_forger(dir.path(), versions);
            let mut out = Vec::new();
            let e = s.process(bytes, &mut out, &mut Vec::new()).unwrap_err();
            assert_eq!(e.reason, Failure::UnexpectedMessage, "{what}: {e}");
            assert_eq!(alerts_in(&mut rx, &out), fatal(10), "{what}");
        }
    }
}

#[test]
fn a_record_too_long_gets_record_overflow_before_its_body() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, _, mut rx) = established_forger(dir.path(), TLS13);
    let len = (record::MAX_CIPHERTEXT + 1) as u16;
    let header = [23, 3, 3, (len >> 8) as u8, len as u8];
    let mut out = Vec::new();
    let e = s.process(&header, &mut out, &mut Vec::new()).unwrap_err();
    assert_eq!(e.reason, Failure::RecordOverflow, "{e}");
    assert_eq!(alerts_in(&mut rx, &out), fatal(22));
}

/// What a fresh session answers to `input`, its client's first bytes.
fn first_answer(input: &[u8]) -> (Result<Progress, TlsError>, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = TlsConfig::new(crate::testutil::test_store(dir.path())).unwrap();
    let mut s = ServerSession::new(&cfg).unwrap();
    let mut out = Vec::new();
    let r = s.process(input, &mut out, &mut Vec::new());
    (r, out)
}

#[test]
fn first_records_are_judged_by_their_header_at_once() {
    let sslv2_hello: &[u8] = &[0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15, 0, 0, 0, 0x10];
    let cases: [(&str, &[u8], Failure, u8); 6] = [
        // 2^14 + 1 bytes announced: refused before they come.
        (
            "plaintext over 2^14",
            &[22, 3, 1, 0x40, 0x01],
            Failure::RecordOverflow,
            22,
        ),
        (
            "any over 2^14 + 2048",
            &[23, 3, 3, 0x48, 0x01],
            Failure::RecordOverflow,
            22,
        ),
        (
            "HTTP",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            Failure::UnexpectedMessage,
            10,
        ),
        ("SSLv2 hello", sslv2_hello, Failure::UnexpectedMessage, 10),
        (
            "zero-length handshake",
            &[22, 3, 1, 0, 0],
            Failure::UnexpectedMessage,
            10,
        ),
        (
            "zero-length alert",
            &[21, 3, 3, 0, 0],
            Failure::UnexpectedMessage,
            10,
        ),
    ];
    for (what, input, reason, alert) in cases {
        let (r, out) = first_answer(input);
        let e = r.expect_err(what);
        assert_eq!(e.reason, reason, "{what}: {e}");
        assert_eq!(
            out,
            [21, 3, 3, 0, 2, 2, alert],
            "{what}: the alert, in plaintext"
        );
    }
}

#[test]
fn a_second_change_cipher_spec_in_the_handshake_is_unexpected() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = TlsConfig::new(crate::testutil::test_store(dir.path())).unwrap();
    let mut c = super::tests::client(dir.path(), "p256.test", TLS13);
    let mut s = ServerSession::new(&cfg).unwrap();
    let mut hello = Vec::new();
    c.write_tls(&mut hello).unwrap();
    let mut out = Vec::new();
    s.process(&hello, &mut out, &mut Vec::new()).unwrap();
    c.read_tls(&mut &out[..]).unwrap();
    c.process_new_packets().unwrap();
    let ccs = [20, 3, 3, 0, 1, 1];
    let mut out = Vec::new();
    s.process(&ccs, &mut out, &mut Vec::new()).unwrap();
    let e = s.process(&ccs, &mut out, &mut Vec::new()).unwrap_err();
    assert_eq!(e.reason, Failure::UnexpectedMessage, "{e}");
}
