//! Hand-built records after the handshake, each answered as the RFC
//! names it (RFC 8446 §5, §5.1, §5.4; RFC 5246 §6.2.1): the session's
//! alert, read back with the client's keys.

use super::tests::{
    alert_read_by, alerts_in, established_forger, first_flights, sealed, second_ccs_refused,
    Versions, TLS12, TLS13,
};
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

/// After our close_notify no record of ours follows (RFC 8446 §6.1): a
/// KeyUpdate(update_requested) the client sends then is taken (its key
/// moves) but not answered, and a TLS 1.2 renegotiation request gets no
/// warning. Before, each was answered after the close_notify.
#[test]
fn nothing_of_ours_follows_our_close_notify() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, mut tx, _rx) = established_forger(dir.path(), TLS13);
    let mut out = Vec::new();
    s.close_notify(&mut out).unwrap();
    out.clear();
    let update = sealed(&mut tx, content::HANDSHAKE, &[24, 0, 0, 1, 1]);
    let p = s.process(&update, &mut out, &mut Vec::new()).unwrap();
    assert_eq!((p.key_updates_received, p.key_updates_sent), (1, 0));
    assert!(out.is_empty(), "{out:?}");
    let (mut s, mut tx, _rx) = established_forger(dir.path(), TLS12);
    s.close_notify(&mut out).unwrap();
    out.clear();
    let hello = super::tests::client_hello_message();
    let p = s
        .process(
            &sealed(&mut tx, content::HANDSHAKE, &hello),
            &mut out,
            &mut Vec::new(),
        )
        .unwrap();
    assert_eq!(p.renegotiations_refused, 1);
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn a_post_handshake_message_over_16_kib_is_refused_as_it_is_announced() {
    let dir = tempfile::tempdir().unwrap();
    // TLS 1.2: a renegotiation ClientHello of 16 KiB announced is read
    // (its body counted off, not kept) ...
    let (mut s, mut tx, _) = established_forger(dir.path(), TLS12);
    let rec = sealed(&mut tx, content::HANDSHAKE, &[1, 0, 0x40, 0, 3, 3]);
    let mut out = Vec::new();
    s.process(&rec, &mut out, &mut Vec::new()).unwrap();
    assert!(out.is_empty(), "waits for the rest");
    // ... one byte more is refused at once, with illegal_parameter.
    let (mut s, mut tx, mut rx) = established_forger(dir.path(), TLS12);
    let rec = sealed(&mut tx, content::HANDSHAKE, &[1, 0, 0x40, 1, 3, 3]);
    let e = s.process(&rec, &mut out, &mut Vec::new()).unwrap_err();
    assert_eq!(e.reason, Failure::HandshakeTooLarge, "{e}");
    assert_eq!(alerts_in(&mut rx, &out), fatal(47));
}

/// RFC 8446 §4.6.3: after the handshake a TLS 1.3 client sends only
/// KeyUpdate, whose body is one byte: any other message, or a KeyUpdate
/// of another length, is refused as its header completes (four bytes,
/// here over two records), without waiting for the body it announces.
/// Before, any type was held up to 16 KiB, rebuilt at every record.
#[test]
fn tls13_post_handshake_messages_are_judged_by_their_header() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[u8], Failure, u8); 3] = [
        (&[1, 0, 0x3f, 0xff], Failure::UnexpectedMessage, 10),
        (&[4, 0, 0, 8], Failure::UnexpectedMessage, 10),
        (&[24, 0, 0, 2], Failure::DecodeError, 50),
    ];
    for (header, reason, alert) in cases {
        let (mut s, mut tx, mut rx) = established_forger(dir.path(), TLS13);
        let mut out = Vec::new();
        let first = sealed(&mut tx, content::HANDSHAKE, &header[..2]);
        s.process(&first, &mut out, &mut Vec::new()).unwrap();
        let second = sealed(&mut tx, content::HANDSHAKE, &header[2..]);
        let e = s.process(&second, &mut out, &mut Vec::new()).unwrap_err();
        assert_eq!(e.reason, reason, "{header:?}: {e}");
        assert_eq!(alerts_in(&mut rx, &out), fatal(alert), "{header:?}");
    }
}

/// A TLS 1.2 renegotiation ClientHello sent a byte per record is read
/// with nothing of it held (its body counted off) and refused with one
/// warning; a second request ends the session (rustls' rule: one is
/// refused, the next is fatal).
#[test]
fn renegotiation_is_refused_once_then_ends_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, mut tx, mut rx) = established_forger(dir.path(), TLS12);
    let hello = super::tests::client_hello_message();
    let mut out = Vec::new();
    for b in &hello {
        let p = s
            .process(
                &sealed(&mut tx, content::HANDSHAKE, &[*b]),
                &mut out,
                &mut Vec::new(),
            )
            .unwrap();
        assert_eq!(s.buffered(), 0, "nothing of the hello is kept");
        assert_eq!(p.consumed, HEADER_LEN + 1 + tx.overhead() - HEADER_LEN);
    }
    assert_eq!(alerts_in(&mut rx, &out), [(1, 100)], "no_renegotiation");
    out.clear();
    let again = sealed(&mut tx, content::HANDSHAKE, &hello);
    let e = s.process(&again, &mut out, &mut Vec::new()).unwrap_err();
    assert_eq!(e.reason, Failure::UnexpectedMessage, "{e}");
    assert_eq!(alerts_in(&mut rx, &out), fatal(10));
}

/// What a client may repeat without sending data is bounded as rustls
/// and BoringSSL bound it during the handshake (their counters stay
/// behind at the handover): 4 warning alerts and 32 empty records in a
/// row (KeyUpdates: `session::tests`); one more is unexpected_message. Application data
/// between them starts the count again. Before, each was taken without
/// end: a 256 KiB ring of empty records was opened in one call.
#[test]
fn repeats_without_data_are_bounded_and_data_resets_the_count() {
    let dir = tempfile::tempdir().unwrap();
    let warning12: (Versions, u8, &[u8], usize) = (TLS12, content::ALERT, &[1, 112], 4);
    let canceled13: (Versions, u8, &[u8], usize) = (TLS13, content::ALERT, &[1, 90], 4);
    let empty13: (Versions, u8, &[u8], usize) = (TLS13, content::APPLICATION_DATA, &[], 32);
    let empty12: (Versions, u8, &[u8], usize) = (TLS12, content::APPLICATION_DATA, &[], 32);
    for (versions, typ, body, max) in [warning12, canceled13, empty13, empty12] {
        let what = format!("{versions:?} type {typ} {body:?}");
        let (mut s, mut tx, mut rx) = established_forger(dir.path(), versions);
        let (mut out, mut plain) = (Vec::new(), Vec::new());
        let run = |s: &mut ServerSession,
                   tx: &mut RecordKey,
                   n,
                   out: &mut Vec<u8>,
                   plain: &mut Vec<u8>| {
            let wire: Vec<u8> = (0..n).flat_map(|_| sealed(tx, typ, body)).collect();
            s.process(&wire, out, plain)
        };
        run(&mut s, &mut tx, max, &mut out, &mut plain).unwrap();
        // Data, then as many again: taken.
        let data = sealed(&mut tx, content::APPLICATION_DATA, b"data");
        s.process(&data, &mut out, &mut plain).unwrap();
        run(&mut s, &mut tx, max, &mut out, &mut plain).unwrap();
        assert_eq!(plain, b"data", "{what}");
        // One more in the same row: refused.
        out.clear();
        let e = run(&mut s, &mut tx, 1, &mut out, &mut plain).unwrap_err();
        assert_eq!(e.reason, Failure::UnexpectedMessage, "{what}: {e}");
        assert_eq!(alerts_in(&mut rx, &out), fatal(10), "{what}");
    }
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

/// A record too short to hold its tag (TLS 1.3) or its explicit nonce and
/// tag (TLS 1.2) cannot decrypt: bad_record_mac (RFC 8446 §5.2, RFC 5246
/// §6.2.3.3), as rustls answers. Before, decode_error.
#[test]
fn a_record_shorter_than_its_tag_is_bad_record_mac() {
    let dir = tempfile::tempdir().unwrap();
    for (versions, body_len) in [(TLS13, 15usize), (TLS13, 0), (TLS12, 23), (TLS12, 8)] {
        let (mut s, _tx, mut rx) = established_forger(dir.path(), versions);
        let mut rec = vec![content::APPLICATION_DATA, 3, 3, 0, body_len as u8];
        rec.resize(HEADER_LEN + body_len, 0x42);
        let mut out = Vec::new();
        let e = s.process(&rec, &mut out, &mut Vec::new()).unwrap_err();
        assert_eq!(
            e.reason,
            Failure::BadRecordMac,
            "{versions:?} {body_len}: {e}"
        );
        assert_eq!(
            alerts_in(&mut rx, &out),
            fatal(20),
            "{versions:?} {body_len}"
        );
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
    let out = second_ccs_refused(&mut c, &mut s);
    // The server encrypts since its first flight (RFC 8446 §5.1): the
    // alert is sealed under its handshake key, so the client, which has
    // opened that flight and takes no plaintext since, reads the alert.
    assert!(!out.is_empty(), "no alert sent");
    assert_eq!(out[0], 23, "the alert goes out sealed: {out:?}");
    assert_eq!(
        alert_read_by(&mut c, &out),
        rustls::AlertDescription::UnexpectedMessage
    );
}

#[test]
fn a_second_change_cipher_spec_in_a_tls12_handshake_is_unexpected() {
    // TLS 1.2, full handshake: the server sends its own ChangeCipherSpec
    // only after the client's Finished, so its alert before then is
    // plaintext, and the client reads it.
    let dir = tempfile::tempdir().unwrap();
    let cfg = TlsConfig::new(crate::testutil::test_store(dir.path())).unwrap();
    let mut c = super::tests::client(dir.path(), "p256.test", TLS12);
    let mut s = ServerSession::new(&cfg).unwrap();
    // The client's flight: ClientKeyExchange, ChangeCipherSpec, Finished.
    let records = second_flight(&mut c, &mut s);
    assert_eq!(
        records.iter().map(|r| r[0]).collect::<Vec<_>>(),
        [22, 20, 22]
    );
    let mut out = Vec::new();
    let cke_ccs = [&records[0][..], &records[1][..]].concat();
    s.process(&cke_ccs, &mut out, &mut Vec::new()).unwrap();
    let e = s
        .process(&records[1], &mut out, &mut Vec::new())
        .unwrap_err();
    assert_eq!(e.reason, Failure::UnexpectedMessage, "{e}");
    assert_eq!(out, [21, 3, 3, 0, 2, 2, 10], "the alert, in plaintext");
    assert_eq!(
        alert_read_by(&mut c, &out),
        rustls::AlertDescription::UnexpectedMessage
    );
}

/// `bytes` cut into whole TLS records (header and body).
fn split_records(mut bytes: &[u8]) -> Vec<&[u8]> {
    let mut records = Vec::new();
    while bytes.len() >= 5 {
        let len = 5 + usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
        let (record, rest) = bytes.split_at(len.min(bytes.len()));
        records.push(record);
        bytes = rest;
    }
    records
}

/// A hand-built ClientHello, field by field.
struct Hello {
    legacy_version: u16,
    suites: Vec<u16>,
    /// `supported_versions`, when sent.
    versions: Option<Vec<u16>>,
    groups: Vec<u16>,
    /// `(group, key_exchange)`.
    shares: Vec<(u16, Vec<u8>)>,
}

impl Hello {
    /// A TLS 1.3 ClientHello with GREASE-like unknown values (RFC 8701)
    /// among the valid ones: suites, versions, groups and a key share.
    fn tls13() -> Self {
        Self {
            legacy_version: 0x0303,
            suites: vec![0x0a0a, 0x1301, 0xc02b],
            versions: Some(vec![0x7a7a, 0x0304]),
            groups: vec![0x1a1a, 0x001d],
            shares: vec![(0x1a1a, vec![0]), (0x001d, vec![9; 32])],
        }
    }

    fn record(&self) -> Vec<u8> {
        self.record_padded(0)
    }

    /// With a padding extension (RFC 7685) of `pad` bytes when not 0: the
    /// whole message in one "record", whatever its length.
    fn record_padded(&self, pad: usize) -> Vec<u8> {
        fn ext(out: &mut Vec<u8>, typ: u16, body: &[u8]) {
            out.extend_from_slice(&typ.to_be_bytes());
            out.extend_from_slice(&(body.len() as u16).to_be_bytes());
            out.extend_from_slice(body);
        }
        fn list16(items: &[u16]) -> Vec<u8> {
            let mut v = ((items.len() * 2) as u16).to_be_bytes().to_vec();
            items
                .iter()
                .for_each(|i| v.extend_from_slice(&i.to_be_bytes()));
            v
        }
        let mut exts = Vec::new();
        let name = b"p256.test";
        let mut sni = ((name.len() + 3) as u16).to_be_bytes().to_vec();
        sni.push(0);
        sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
        sni.extend_from_slice(name);
        ext(&mut exts, 0, &sni);
        if let Some(v) = &self.versions {
            let mut body = vec![(v.len() * 2) as u8];
            v.iter()
                .for_each(|x| body.extend_from_slice(&x.to_be_bytes()));
            ext(&mut exts, 43, &body);
        }
        ext(&mut exts, 10, &list16(&self.groups));
        ext(&mut exts, 11, &[1, 0]); // ec_point_formats: uncompressed
        ext(&mut exts, 13, &list16(&[0x0403, 0x0804, 0x0401]));
        ext(&mut exts, 23, &[]); // extended_master_secret
        ext(&mut exts, 0xff01, &[0]); // renegotiation_info
        let mut shares = Vec::new();
        for (g, k) in &self.shares {
            shares.extend_from_slice(&g.to_be_bytes());
            shares.extend_from_slice(&(k.len() as u16).to_be_bytes());
            shares.extend_from_slice(k);
        }
        let mut ks = (shares.len() as u16).to_be_bytes().to_vec();
        ks.extend_from_slice(&shares);
        ext(&mut exts, 51, &ks);
        ext(&mut exts, 45, &[1, 1]); // psk_key_exchange_modes: psk_dhe_ke
        if pad > 0 {
            ext(&mut exts, 21, &vec![0; pad]);
        }
        let mut body = self.legacy_version.to_be_bytes().to_vec();
        body.extend_from_slice(&[7; 32]);
        body.push(32);
        body.extend_from_slice(&[5; 32]);
        body.extend_from_slice(&list16(&self.suites));
        body.extend_from_slice(&[1, 0]);
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut msg = vec![
            1,
            (body.len() >> 16) as u8,
            (body.len() >> 8) as u8,
            body.len() as u8,
        ];
        msg.extend_from_slice(&body);
        let mut rec = vec![22, 3, 1, (msg.len() >> 8) as u8, msg.len() as u8];
        rec.extend_from_slice(&msg);
        rec
    }
}

/// How the server answered a ClientHello.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// A ServerHello: the version chosen (supported_versions, else
    /// legacy_version) and the suite.
    ServerHello {
        version: u16,
        suite: u16,
    },
    HelloRetryRequest {
        group: u16,
    },
    Alert(u8),
}

const HRR_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

fn answer_to(hello: &Hello) -> Answer {
    answer(&first_answer(&hello.record()).1)
}

/// The server's first answer, `out`, read.
fn answer(out: &[u8]) -> Answer {
    assert!(out.len() > HEADER_LEN, "an answer: {out:02x?}");
    let body = &out[HEADER_LEN..];
    match out[0] {
        content::ALERT => Answer::Alert(body[1]),
        content::HANDSHAKE => {
            assert_eq!(body[0], 2, "a ServerHello");
            let len = usize::from(body[1]) << 16 | usize::from(body[2]) << 8 | usize::from(body[3]);
            let sh = &body[4..4 + len];
            let legacy = u16::from_be_bytes([sh[0], sh[1]]);
            let random = &sh[2..34];
            let sid = usize::from(sh[34]);
            let at = 35 + sid;
            let suite = u16::from_be_bytes([sh[at], sh[at + 1]]);
            let mut exts = &sh[at + 5..];
            let (mut version, mut group) = (legacy, 0);
            while exts.len() >= 4 {
                let typ = u16::from_be_bytes([exts[0], exts[1]]);
                let len = usize::from(u16::from_be_bytes([exts[2], exts[3]]));
                let data = &exts[4..4 + len];
                match typ {
                    43 => version = u16::from_be_bytes([data[0], data[1]]),
                    51 => group = u16::from_be_bytes([data[0], data[1]]),
                    _ => {}
                }
                exts = &exts[4 + len..];
            }
            if random == HRR_RANDOM {
                Answer::HelloRetryRequest { group }
            } else {
                Answer::ServerHello { version, suite }
            }
        }
        t => panic!("record type {t}"),
    }
}

#[test]
fn unknown_values_in_a_client_hello_are_passed_over() {
    // RFC 8446 §4.1.2, §4.2 and RFC 8701: unknown suites, versions,
    // groups and key shares are ignored; the valid ones are negotiated.
    let tls13 = Answer::ServerHello {
        version: 0x0304,
        suite: 0x1301,
    };
    assert_eq!(answer_to(&Hello::tls13()), tls13);
    // With supported_versions, legacy_version takes no part (§4.2.1),
    // even one no version has.
    let odd_legacy = Hello {
        legacy_version: 0x0399,
        ..Hello::tls13()
    };
    assert_eq!(answer_to(&odd_legacy), tls13);
    // Without it, a legacy_version of TLS 1.3 or above (known or not)
    // negotiates TLS 1.2 (§4.2.1, RFC 5246 E.1).
    for legacy_version in [0x0304, 0x0305] {
        let hello = Hello {
            legacy_version,
            versions: None,
            ..Hello::tls13()
        };
        assert_eq!(
            answer_to(&hello),
            Answer::ServerHello {
                version: 0x0303,
                suite: 0xc02b
            },
            "{legacy_version:#06x}"
        );
    }
    // A key share only for a group it does not know, one it does listed:
    // a HelloRetryRequest for that group (§4.1.4).
    let retry = Hello {
        shares: vec![(0x1a1a, vec![0])],
        ..Hello::tls13()
    };
    assert_eq!(
        answer_to(&retry),
        Answer::HelloRetryRequest { group: 0x001d }
    );
}

#[test]
fn a_client_hello_with_nothing_usable_gets_the_alert_the_rfc_names() {
    // No suite, or no group, in common: handshake_failure (§4.1.1).
    let no_suite = Hello {
        suites: vec![0x0a0a, 0x00ff, 0x0005],
        ..Hello::tls13()
    };
    assert_eq!(answer_to(&no_suite), Answer::Alert(40));
    let no_group = Hello {
        groups: vec![0x1a1a, 0x0019],
        shares: vec![(0x1a1a, vec![0])],
        ..Hello::tls13()
    };
    assert_eq!(answer_to(&no_group), Answer::Alert(40));
    // No version in common: protocol_version (§4.2.1; RFC 5246 E.1 for a
    // TLS 1.0 client).
    let no_version = Hello {
        versions: Some(vec![0x7a7a, 0x0305]),
        ..Hello::tls13()
    };
    assert_eq!(answer_to(&no_version), Answer::Alert(70));
    let tls10 = Hello {
        legacy_version: 0x0301,
        versions: None,
        ..Hello::tls13()
    };
    assert_eq!(answer_to(&tls10), Answer::Alert(70));
}

#[test]
fn malformed_key_shares_are_illegal_parameter() {
    // RFC 8446 §4.2.8: two shares for one group; §4.2.8.2: an X25519 key
    // is 32 bytes; §7.4.2: an all-zero shared secret (a zero public key)
    // is refused.
    for (what, shares) in [
        ("short X25519 key", vec![(0x001d, vec![9; 31])]),
        (
            "two X25519 shares",
            vec![(0x001d, vec![9; 32]), (0x001d, vec![9; 32])],
        ),
        ("zero X25519 key", vec![(0x001d, vec![0; 32])]),
    ] {
        let h = Hello {
            shares,
            ..Hello::tls13()
        };
        assert_eq!(answer_to(&h), Answer::Alert(47), "{what}");
    }
}

#[test]
fn headers_are_judged_one_byte_at_a_time_and_across_fragments() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = TlsConfig::new(crate::testutil::test_store(dir.path())).unwrap();
    // The fifth byte of an oversized header ends it.
    let mut s = ServerSession::new(&cfg).unwrap();
    let mut out = Vec::new();
    for b in [22u8, 3, 1, 0x40] {
        s.process(&[b], &mut out, &mut Vec::new()).unwrap();
    }
    let e = s.process(&[0x01], &mut out, &mut Vec::new()).unwrap_err();
    assert_eq!(
        (e.reason, &out[..]),
        (Failure::RecordOverflow, &[21, 3, 3, 0, 2, 2, 22][..])
    );
    // A ClientHello split over two records, a byte at a time, is answered.
    let record = Hello::tls13().record();
    let msg = &record[HEADER_LEN..];
    let (first, second) = msg.split_at(40);
    let mut split = Vec::new();
    for part in [first, second] {
        split.extend_from_slice(&[22, 3, 1, 0, part.len() as u8]);
        split.extend_from_slice(part);
    }
    let mut s = ServerSession::new(&cfg).unwrap();
    let mut out = Vec::new();
    for b in &split {
        s.process(std::slice::from_ref(b), &mut out, &mut Vec::new())
            .unwrap();
    }
    assert_eq!(out[0], content::HANDSHAKE, "a ServerHello");
}

/// The server's first answer to `c`'s hello, read by `c`; then `c`'s
/// second flight, cut into records.
fn second_flight(c: &mut rustls::ClientConnection, s: &mut ServerSession) -> Vec<Vec<u8>> {
    first_flights(c, s);
    let mut flight = Vec::new();
    c.write_tls(&mut flight).unwrap();
    split_records(&flight)
        .into_iter()
        .map(<[u8]>::to_vec)
        .collect()
}

#[test]
fn a_second_change_cipher_spec_amid_held_input_is_refused_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = TlsConfig::new(crate::testutil::test_store(dir.path())).unwrap();
    let ccs = [20, 3, 3, 0, 1, 1];
    // TLS 1.2: the first fragment of the ClientKeyExchange is held (rustls
    // keeps its place in it), then two ChangeCipherSpecs come at once.
    // rustls, handed the refusal after that fragment, answers it; before
    // the fix that handed it a fresh buffer, it panicked on its stale
    // place in the old one.
    let mut c = super::tests::client(dir.path(), "p256.test", TLS12);
    let mut s = ServerSession::new(&cfg).unwrap();
    let records = second_flight(&mut c, &mut s);
    let (first, _) = records[0][5..].split_at(10);
    let fragment = [&[22, 3, 3, 0, 10][..], first].concat();
    let mut out = Vec::new();
    s.process(&fragment, &mut out, &mut Vec::new()).unwrap();
    assert!(out.is_empty());
    let e = s
        .process(&[ccs, ccs].concat(), &mut out, &mut Vec::new())
        .unwrap_err();
    assert_eq!(e.reason, Failure::UnexpectedMessage, "{e}");
    assert_eq!(
        alert_read_by(&mut c, &out),
        rustls::AlertDescription::UnexpectedMessage
    );
    // TLS 1.3: part of the client's (sealed) Finished record held; rustls
    // has not read it: the refusal takes its place, and the alert goes out
    // sealed, read by the client.
    let mut c = super::tests::client(dir.path(), "p256.test", TLS13);
    let mut s = ServerSession::new(&cfg).unwrap();
    let records = second_flight(&mut c, &mut s);
    assert_eq!(records[0], ccs);
    let finished = &records[1];
    let mut out = Vec::new();
    s.process(
        &[&ccs[..], &finished[..3]].concat(),
        &mut out,
        &mut Vec::new(),
    )
    .unwrap();
    let rest = [&finished[3..], &ccs[..]].concat();
    let e = s.process(&rest, &mut out, &mut Vec::new()).unwrap_err();
    assert_eq!(e.reason, Failure::UnexpectedMessage, "{e}");
    assert_eq!(out[0], 23, "sealed: {out:?}");
    assert_eq!(
        alert_read_by(&mut c, &out),
        rustls::AlertDescription::UnexpectedMessage
    );
}

/// `msg` (handshake messages) framed in handshake records of at most
/// `size` bytes each.
fn framed(msg: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in msg.chunks(size) {
        out.extend_from_slice(&[22, 3, 1]);
        out.extend_from_slice(&(piece.len() as u16).to_be_bytes());
        out.extend_from_slice(piece);
    }
    out
}

#[test]
fn a_16_kib_client_hello_in_two_records_is_answered() {
    // BoringSSL's limit for a server's handshake messages: a ClientHello
    // that long, in two records, fits what a session holds.
    let hello = Hello::tls13().record_padded(16 * 1024 - 200);
    let msg = &hello[5..];
    assert_eq!(msg.len(), 4 + 16 * 1024, "a 16 KiB body");
    let (r, out) = first_answer(&framed(msg, 9000));
    r.unwrap();
    assert!(matches!(
        answer(&out),
        Answer::ServerHello {
            version: 0x0304,
            ..
        }
    ));
}

#[test]
fn handshake_input_is_held_to_its_bound_however_it_is_cut() {
    // A ClientHello announcing 2^16 - 1 bytes (rustls' own limit), sent
    // whole, in full records, or cut into records of 1 and 16 bytes (the
    // headers held with the bytes: six bytes held for each one sent): the
    // session takes no more than HANDSHAKE_HELD_MAX, then refuses it with
    // illegal_parameter. Before the bound, 1-byte records made one session
    // hold over 512 KiB.
    let dir = tempfile::tempdir().unwrap();
    let cfg = TlsConfig::new(crate::testutil::test_store(dir.path())).unwrap();
    let mut msg = vec![1u8, 0, 0xff, 0xff];
    msg.resize(4 + 0xffff, 0);
    for (size, per_call) in [(1, 600), (16, 64), (16_384, 1), (16_384, 4)] {
        let wire = framed(&msg, size);
        let mut s = ServerSession::new(&cfg).unwrap();
        let (mut taken, mut most_held) = (0, 0);
        let mut outcome = None;
        let mut out = Vec::new();
        // The caller's buffer: what the session did not take stays in it.
        let mut pending = &wire[..];
        let mut calls = wire.len();
        while outcome.is_none() && calls > 0 {
            calls -= 1;
            let end = pending.len().min(per_call * (size + 5));
            let (x, y) = pending[..end].split_at(end / 2);
            match s.read((x, y), &mut out, &mut Vec::new(), usize::MAX) {
                Ok(p) => {
                    taken += p.consumed;
                    pending = &pending[p.consumed..];
                    assert!(out.is_empty(), "no answer to a partial hello");
                }
                Err(e) => outcome = Some(e),
            }
            if let super::State::Handshake(h) = &s.state {
                most_held = most_held.max(h.incoming.len());
            }
        }
        let e = outcome.expect("refused");
        assert_eq!(
            e.reason,
            Failure::HandshakeTooLarge,
            "records of {size}: {e}"
        );
        assert_eq!(out, [21, 3, 3, 0, 2, 2, 47], "records of {size}: the alert");
        assert!(
            most_held < HANDSHAKE_HELD_MAX,
            "records of {size}: held {most_held}"
        );
        assert!(
            taken <= HANDSHAKE_HELD_MAX,
            "records of {size}: took {taken}"
        );
    }
}

#[test]
fn a_second_flight_held_past_the_bound_is_refused() {
    // TLS 1.2, after our first flight: a ClientKeyExchange announcing
    // 2^16 - 1 bytes in 1-byte records, refused at the bound. rustls,
    // amid the message's fragments, would refuse anything handed to it
    // without an alert of its own: illegal_parameter, in plaintext, as
    // the server sends nothing sealed before its ChangeCipherSpec.
    let dir = tempfile::tempdir().unwrap();
    let cfg = TlsConfig::new(crate::testutil::test_store(dir.path())).unwrap();
    let mut c = super::tests::client(dir.path(), "p256.test", TLS12);
    let mut s = ServerSession::new(&cfg).unwrap();
    second_flight(&mut c, &mut s);
    let mut msg = vec![16u8, 0, 0xff, 0xff];
    msg.resize(4 + 0xffff, 0);
    let wire = framed(&msg, 1);
    let mut out = Vec::new();
    let mut pending = &wire[..];
    let e = loop {
        let end = pending.len().min(6 * 500);
        match s.read(
            (&pending[..end], &[]),
            &mut out,
            &mut Vec::new(),
            usize::MAX,
        ) {
            Ok(p) => pending = &pending[p.consumed..],
            Err(e) => break e,
        }
        assert!(
            wire.len() - pending.len() <= HANDSHAKE_HELD_MAX,
            "took past the bound"
        );
    };
    assert_eq!(e.reason, Failure::HandshakeTooLarge, "{e}");
    assert_eq!(out, [21, 3, 3, 0, 2, 2, 47]);
    assert_eq!(
        alert_read_by(&mut c, &out),
        rustls::AlertDescription::IllegalParameter
    );
}

/// After our first flight, a record header is judged as soon as it is
/// whole, as before it: a length past any record's or a type that is not
/// TLS's ends the handshake at its fifth byte, with an alert the client
/// reads. Before, such a header was taken as the start of a record, held
/// until 20 KiB came (then refused in plaintext, which a TLS 1.3 client
/// cannot read) or until the handshake's deadline.
#[test]
fn a_bad_header_in_the_second_flight_is_refused_at_its_fifth_byte() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = TlsConfig::new(crate::testutil::test_store(dir.path())).unwrap();
    // (version, header, reason, what the client reads, sealed)
    let cases = [
        (
            TLS13,
            [23, 3, 3, 0xff, 0xff],
            Failure::RecordOverflow,
            rustls::AlertDescription::DecodeError,
            true,
        ),
        (
            TLS13,
            [99, 3, 3, 0, 10],
            Failure::UnexpectedMessage,
            rustls::AlertDescription::UnexpectedMessage,
            true,
        ),
        (
            TLS12,
            [22, 3, 3, 0xff, 0xff],
            Failure::RecordOverflow,
            rustls::AlertDescription::RecordOverflow,
            false,
        ),
        (
            TLS12,
            [99, 3, 3, 0, 10],
            Failure::UnexpectedMessage,
            rustls::AlertDescription::UnexpectedMessage,
            false,
        ),
    ];
    for (version, header, reason, alert, sealed) in cases {
        let mut c = super::tests::client(dir.path(), "p256.test", version);
        let mut s = ServerSession::new(&cfg).unwrap();
        second_flight(&mut c, &mut s);
        let mut out = Vec::new();
        // Four bytes say nothing yet; the fifth ends it.
        s.process(&header[..4], &mut out, &mut Vec::new()).unwrap();
        assert!(out.is_empty(), "{header:?}");
        let e = s
            .process(&header[4..], &mut out, &mut Vec::new())
            .unwrap_err();
        assert_eq!(e.reason, reason, "{header:?}: {e}");
        assert_eq!(out[0] == 23, sealed, "{header:?}: {out:?}");
        assert_eq!(alert_read_by(&mut c, &out), alert, "{header:?}");
    }
}
