//! The TLS record layer on AWS-LC's AEADs, for established connections
//! (after rustls hands over the traffic secrets): sealing in place in the
//! caller's buffer and opening either out of place (one pass from the
//! receive buffer into the plaintext buffer) or in place.
//!
//! Covers the AEAD suites rustls negotiates: TLS 1.3 (nonce = IV ⊕ seq,
//! the record header as AAD, the real content type inside) and TLS 1.2
//! (AES-GCM with the 8-byte explicit nonce; ChaCha20-Poly1305 with
//! IV ⊕ seq; the 13-byte pseudo-header as AAD). No allocation.

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::ConnectionTrafficSecrets;

/// Record header: type, legacy version, length.
pub const HEADER_LEN: usize = 5;
/// AEAD tag of every suite we offer.
pub const TAG_LEN: usize = 16;
/// Largest plaintext in one record (RFC 8446 §5.1).
pub const MAX_PLAINTEXT: usize = 16 * 1024;
/// Largest ciphertext body accepted (TLS 1.3's 2^14 + 256; TLS 1.2's is
/// 2^14 + 2048 but no AEAD suite needs more than 24 bytes of it).
pub const MAX_CIPHERTEXT: usize = MAX_PLAINTEXT + 256;

/// Record content types.
pub mod content {
    pub const CHANGE_CIPHER_SPEC: u8 = 20;
    pub const ALERT: u8 = 21;
    pub const HANDSHAKE: u8 = 22;
    pub const APPLICATION_DATA: u8 = 23;
}

/// The protocol a key protects records of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tls12,
    Tls13,
}

/// Why a record could not be opened; each maps to the alert to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// Authentication failed (`bad_record_mac`).
    BadRecordMac,
    /// Longer than the protocol allows (`record_overflow`).
    Overflow,
    /// A TLS 1.3 record with no content type, or a record type not allowed
    /// here (`unexpected_message`).
    Unexpected,
}

impl RecordError {
    /// The TLS alert description for this error.
    pub fn alert(self) -> u8 {
        match self {
            Self::BadRecordMac => 20,
            Self::Overflow => 22,
            Self::Unexpected => 10,
        }
    }
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::BadRecordMac => "record authentication failed",
            Self::Overflow => "record too long",
            Self::Unexpected => "unexpected record",
        })
    }
}

/// One direction's record protection: key, IV and sequence number.
pub struct RecordKey {
    key: LessSafeKey,
    iv: [u8; aead::NONCE_LEN],
    seq: u64,
    protocol: Protocol,
    /// TLS 1.2 AES-GCM: the record carries 8 bytes of explicit nonce.
    explicit_nonce: bool,
}

impl std::fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordKey")
            .field("algorithm", self.key.algorithm())
            .field("seq", &self.seq)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

impl RecordKey {
    /// A key from the secrets rustls extracted, starting at sequence `seq`.
    ///
    /// # Panics
    /// Never for secrets rustls produced (their key lengths match).
    pub fn new(protocol: Protocol, secrets: &ConnectionTrafficSecrets, seq: u64) -> Self {
        let (alg, key, iv, gcm) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv, true),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv, true),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv, false)
            }
            // rustls only extracts AEAD secrets; anything new is a bug here.
            _ => unreachable!("unknown AEAD secrets"),
        };
        let mut nonce = [0u8; aead::NONCE_LEN];
        nonce.copy_from_slice(iv.as_ref());
        Self {
            key: LessSafeKey::new(UnboundKey::new(alg, key.as_ref()).expect("key length")),
            iv: nonce,
            seq,
            protocol,
            explicit_nonce: gcm && protocol == Protocol::Tls12,
        }
    }

    /// Records protected so far (the next record's sequence number).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Bytes of a sealed record before its plaintext: header and explicit
    /// nonce.
    pub fn prefix_len(&self) -> usize {
        HEADER_LEN + if self.explicit_nonce { 8 } else { 0 }
    }

    /// Bytes of a sealed record after its plaintext: TLS 1.3's content
    /// type and the tag.
    pub fn suffix_len(&self) -> usize {
        TAG_LEN + usize::from(self.protocol == Protocol::Tls13)
    }

    /// Total bytes a record adds to its plaintext.
    pub fn overhead(&self) -> usize {
        self.prefix_len() + self.suffix_len()
    }

    fn nonce(&self, seq: u64) -> [u8; aead::NONCE_LEN] {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(seq.to_be_bytes()) {
            *b ^= s;
        }
        n
    }

    /// Seals one record of content type `typ` in place. `record` holds the
    /// plaintext at `record[prefix_len()..prefix_len() + plain_len]` and
    /// has room for [`RecordKey::suffix_len`] bytes after it; the header,
    /// nonce, content type and tag are written around it. Returns the
    /// record's length.
    ///
    /// # Panics
    /// When `plain_len` exceeds [`MAX_PLAINTEXT`] or `record` is too short.
    pub fn seal_in_place(&mut self, typ: u8, record: &mut [u8], plain_len: usize) -> usize {
        assert!(plain_len <= MAX_PLAINTEXT, "record plaintext too long");
        let prefix = self.prefix_len();
        let total = prefix + plain_len + self.suffix_len();
        let record = &mut record[..total];
        let body_len = (total - HEADER_LEN) as u16;
        let nonce = self.nonce(self.seq);
        let (sealed_len, outer_type, aad, aad_len) = match self.protocol {
            Protocol::Tls13 => {
                record[prefix + plain_len] = typ;
                let mut aad = [0u8; 13];
                aad[..5].copy_from_slice(&header(content::APPLICATION_DATA, body_len));
                (plain_len + 1, content::APPLICATION_DATA, aad, 5)
            }
            Protocol::Tls12 => {
                if self.explicit_nonce {
                    record[HEADER_LEN..prefix].copy_from_slice(&nonce[4..]);
                }
                (plain_len, typ, tls12_aad(self.seq, typ, plain_len), 13)
            }
        };
        record[..HEADER_LEN].copy_from_slice(&header(outer_type, body_len));
        let (body, tag_out) = record[prefix..].split_at_mut(sealed_len);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad[..aad_len]),
                body,
            )
            .expect("AEAD seal");
        tag_out.copy_from_slice(tag.as_ref());
        self.seq += 1;
        total
    }

    /// Seals `plain` (at most [`MAX_PLAINTEXT`] bytes) as one record of
    /// content type `typ` into `record` (at least `plain.len()` +
    /// [`RecordKey::overhead`] bytes), reading `plain` once: the same bytes
    /// as [`RecordKey::seal_in_place`] without first copying the plaintext
    /// into place. Returns the record's length.
    ///
    /// # Panics
    /// When `plain` is too long or `record` too short.
    pub fn seal_from(&mut self, typ: u8, plain: &[u8], record: &mut [u8]) -> usize {
        assert!(plain.len() <= MAX_PLAINTEXT, "record plaintext too long");
        let prefix = self.prefix_len();
        let total = prefix + plain.len() + self.suffix_len();
        // Within `record` by the contract above; under 2^16 with the
        // assertion (at most 2^14 + 8 + 17 bytes after the header).
        let record = &mut record[..total];
        let body_len = (total - HEADER_LEN) as u16;
        let nonce = self.nonce(self.seq);
        // TLS 1.3's inner content type is encrypted after the data, ahead
        // of the tag.
        let inner = [typ];
        let (outer_type, extra_in, aad, aad_len): (u8, &[u8], [u8; 13], usize) = match self.protocol
        {
            Protocol::Tls13 => {
                let mut aad = [0u8; 13];
                aad[..5].copy_from_slice(&header(content::APPLICATION_DATA, body_len));
                (content::APPLICATION_DATA, &inner, aad, 5)
            }
            Protocol::Tls12 => {
                if self.explicit_nonce {
                    record[HEADER_LEN..prefix].copy_from_slice(&nonce[4..]);
                }
                (typ, &[], tls12_aad(self.seq, typ, plain.len()), 13)
            }
        };
        record[..HEADER_LEN].copy_from_slice(&header(outer_type, body_len));
        let (body, extra_out_and_tag) = record[prefix..].split_at_mut(plain.len());
        self.key
            .seal_out_of_place_scatter(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad[..aad_len]),
                plain,
                body,
                extra_in,
                extra_out_and_tag,
            )
            // Fails only on lengths, which match by construction (as in
            // seal_in_place).
            .expect("AEAD seal");
        self.seq += 1;
        total
    }

    /// Where the ciphertext, explicit nonce and tag sit in a body of `len`.
    fn layout(&self, len: usize) -> Result<(usize, usize), RecordError> {
        let explicit = if self.explicit_nonce { 8 } else { 0 };
        // Too short to hold its nonce and tag: it cannot decrypt, and an
        // undecryptable record is bad_record_mac (RFC 8446 §5.2, RFC 5246
        // §6.2.3.3), as rustls answers it too.
        if len < explicit + TAG_LEN {
            return Err(RecordError::BadRecordMac);
        }
        Ok((explicit, len - TAG_LEN))
    }

    fn open_nonce_aad(
        &self,
        header: &[u8; HEADER_LEN],
        body: &[u8],
        plain_len: usize,
    ) -> Result<([u8; aead::NONCE_LEN], [u8; 13], usize), RecordError> {
        match self.protocol {
            Protocol::Tls13 => {
                if header[0] != content::APPLICATION_DATA {
                    return Err(RecordError::Unexpected);
                }
                let mut aad = [0u8; 13];
                aad[..5].copy_from_slice(header);
                Ok((self.nonce(self.seq), aad, 5))
            }
            Protocol::Tls12 => {
                let nonce = if self.explicit_nonce {
                    let mut n = self.iv;
                    n[4..].copy_from_slice(&body[..8]);
                    n
                } else {
                    self.nonce(self.seq)
                };
                Ok((nonce, tls12_aad(self.seq, header[0], plain_len), 13))
            }
        }
    }

    /// Opens the record with `header` and `body` into `out` (at least
    /// `body.len()` bytes; one pass, `body` untouched). Returns the content
    /// type and the plaintext length at the start of `out`.
    ///
    /// # Errors
    /// A [`RecordError`]: the connection must end with its alert.
    pub fn open(
        &mut self,
        header: &[u8; HEADER_LEN],
        body: &[u8],
        out: &mut [u8],
    ) -> Result<(u8, usize), RecordError> {
        let (start, tag_at) = self.layout(body.len())?;
        let sealed = tag_at - start;
        let (nonce, aad, aad_len) = self.open_nonce_aad(header, body, sealed)?;
        self.key
            .open_separate_gather(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad[..aad_len]),
                &body[start..tag_at],
                &body[tag_at..],
                &mut out[..sealed],
            )
            .map_err(|_| RecordError::BadRecordMac)?;
        self.finish_open(header[0], &out[..sealed])
    }

    /// Opens the record in place: `body` holds the ciphertext on input
    /// and the plaintext at `body[range]` on return, with its content type.
    ///
    /// # Errors
    /// A [`RecordError`]: the connection must end with its alert.
    pub fn open_in_place(
        &mut self,
        header: &[u8; HEADER_LEN],
        body: &mut [u8],
    ) -> Result<(u8, std::ops::Range<usize>), RecordError> {
        let (start, tag_at) = self.layout(body.len())?;
        let sealed = tag_at - start;
        let (nonce, aad, aad_len) = self.open_nonce_aad(header, body, sealed)?;
        let (text, tag) = body.split_at_mut(tag_at);
        self.key
            .open_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad[..aad_len]),
                tag,
                &mut text[start..],
            )
            .map_err(|_| RecordError::BadRecordMac)?;
        let (typ, len) = self.finish_open(header[0], &text[start..])?;
        Ok((typ, start..start + len))
    }

    /// After a successful open: the sequence number moves on; TLS 1.3's
    /// padding and inner content type come off.
    fn finish_open(&mut self, outer: u8, plain: &[u8]) -> Result<(u8, usize), RecordError> {
        self.seq += 1;
        match self.protocol {
            Protocol::Tls12 => {
                if plain.len() > MAX_PLAINTEXT {
                    return Err(RecordError::Overflow);
                }
                Ok((outer, plain.len()))
            }
            Protocol::Tls13 => {
                // RFC 8446 §5.4: the whole TLSInnerPlaintext (content,
                // type, padding) is at most 2^14 + 1 bytes.
                if plain.len() > MAX_PLAINTEXT + 1 {
                    return Err(RecordError::Overflow);
                }
                let Some(at) = plain.iter().rposition(|&b| b != 0) else {
                    return Err(RecordError::Unexpected);
                };
                if at > MAX_PLAINTEXT {
                    return Err(RecordError::Overflow);
                }
                Ok((plain[at], at))
            }
        }
    }
}

fn header(typ: u8, len: u16) -> [u8; HEADER_LEN] {
    let l = len.to_be_bytes();
    [typ, 3, 3, l[0], l[1]]
}

fn tls12_aad(seq: u64, typ: u8, len: usize) -> [u8; 13] {
    let mut aad = [0u8; 13];
    aad[..8].copy_from_slice(&seq.to_be_bytes());
    aad[8] = typ;
    aad[9] = 3;
    aad[10] = 3;
    aad[11..].copy_from_slice(&(len as u16).to_be_bytes());
    aad
}

/// Splits a record at the start of `buf`: header and the whole record's
/// length, once all of it is there.
///
/// # Errors
/// [`RecordError::Overflow`] for a length no record may have.
pub fn split_header(buf: &[u8]) -> Result<Option<([u8; HEADER_LEN], usize)>, RecordError> {
    let Some(h) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let h: [u8; HEADER_LEN] = h.try_into().expect("5 bytes");
    let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
    if len > MAX_CIPHERTEXT {
        return Err(RecordError::Overflow);
    }
    Ok(Some((h, HEADER_LEN + len)))
}

#[cfg(test)]
mod tests {
    //! Differential tests against rustls' own record layer, with keys from
    //! real handshakes for every suite we offer.
    use super::*;
    use crate::testutil::{client_config, test_store};
    use rustls::crypto::aws_lc_rs::cipher_suite as cs;
    use rustls::crypto::cipher::{
        InboundOpaqueMessage, MessageDecrypter, MessageEncrypter, OutboundChunks,
        OutboundPlainMessage,
    };
    use rustls::pki_types::ServerName;
    use rustls::{
        ClientConnection, ContentType, ProtocolVersion, ServerConfig, ServerConnection,
        SupportedCipherSuite,
    };
    use std::sync::Arc;

    const SUITES: [SupportedCipherSuite; 6] = [
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS13_AES_256_GCM_SHA384,
        cs::TLS13_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ];

    struct Pair {
        protocol: Protocol,
        /// Ours, sealing with the server's send key.
        seal: RecordKey,
        /// Ours, opening with the same key (as the client would).
        open: RecordKey,
        /// rustls, encrypting with that key.
        theirs_enc: Box<dyn MessageEncrypter>,
        /// rustls, decrypting with that key.
        theirs_dec: Box<dyn MessageDecrypter>,
    }

    /// A real handshake restricted to `suite`; the server's send key
    /// (= the client's receive key) four times over.
    #[allow(deprecated)] // dangerous_extract_secrets: the test wants raw keys
    fn pair(dir: &std::path::Path, suite: SupportedCipherSuite) -> Pair {
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        provider.cipher_suites = vec![suite];
        let version = suite.version();
        let mut scfg = ServerConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[version])
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(test_store(dir)));
        scfg.enable_secret_extraction = true;
        // AWS-LC's TLS 1.3 GCM sealer (rustls' side) wants its first record
        // at sequence 0: no tickets before the application data.
        scfg.send_tls13_tickets = 0;
        let mut ccfg = (*client_config(dir, &[version])).clone();
        ccfg.enable_secret_extraction = true;
        let mut s = ServerConnection::new(Arc::new(scfg)).unwrap();
        let mut c =
            ClientConnection::new(Arc::new(ccfg), ServerName::try_from("p256.test").unwrap())
                .unwrap();
        while s.is_handshaking() || c.is_handshaking() {
            let mut buf = Vec::new();
            c.write_tls(&mut buf).unwrap();
            s.read_tls(&mut &buf[..]).unwrap();
            s.process_new_packets().unwrap();
            buf.clear();
            s.write_tls(&mut buf).unwrap();
            c.read_tls(&mut &buf[..]).unwrap();
            c.process_new_packets().unwrap();
        }
        let protocol = if version == &rustls::version::TLS13 {
            Protocol::Tls13
        } else {
            Protocol::Tls12
        };
        let server_tx = s.dangerous_extract_secrets().unwrap().tx;
        let client_rx = c.dangerous_extract_secrets().unwrap().rx;
        assert_eq!(server_tx.0, client_rx.0);
        let seal = RecordKey::new(protocol, &server_tx.1, server_tx.0);
        let open = RecordKey::new(protocol, &client_rx.1, client_rx.0);
        let mut theirs_enc = rustls_side(suite, client_rx.1, true).0.unwrap();
        if protocol == Protocol::Tls12 {
            // AWS-LC's TLS 1.2 GCM sealer (rustls' side) counts from its
            // first record, the Finished message at sequence 0; ours starts
            // where the handshake left off.
            let finished = OutboundPlainMessage {
                typ: ContentType::Handshake,
                version: ProtocolVersion::TLSv1_2,
                payload: OutboundChunks::Single(b"finished"),
            };
            theirs_enc.encrypt(finished, 0).unwrap();
        }
        let theirs_dec = rustls_side(suite, server_tx.1, false).1.unwrap();
        Pair {
            protocol,
            seal,
            open,
            theirs_enc,
            theirs_dec,
        }
    }

    type Sides = (
        Option<Box<dyn MessageEncrypter>>,
        Option<Box<dyn MessageDecrypter>>,
    );

    fn rustls_side(
        suite: SupportedCipherSuite,
        secrets: ConnectionTrafficSecrets,
        enc: bool,
    ) -> Sides {
        let (key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv }
            | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
            | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (key, iv),
            _ => unreachable!(),
        };
        match suite {
            SupportedCipherSuite::Tls13(s) => {
                if enc {
                    (Some(s.aead_alg.encrypter(key, iv)), None)
                } else {
                    (None, Some(s.aead_alg.decrypter(key, iv)))
                }
            }
            SupportedCipherSuite::Tls12(s) => {
                let iv = iv.as_ref();
                let fixed = s.aead_alg.key_block_shape().fixed_iv_len;
                if enc {
                    (
                        Some(s.aead_alg.encrypter(key, &iv[..fixed], &iv[fixed..])),
                        None,
                    )
                } else {
                    (None, Some(s.aead_alg.decrypter(key, &iv[..fixed])))
                }
            }
        }
    }

    fn lengths() -> Vec<usize> {
        let mut v = vec![
            0,
            1,
            2,
            15,
            16,
            17,
            255,
            1000,
            4096,
            MAX_PLAINTEXT - 1,
            MAX_PLAINTEXT,
        ];
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..40 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            v.push(x as usize % (MAX_PLAINTEXT + 1));
        }
        v
    }

    #[test]
    fn sealing_matches_rustls_byte_for_byte_and_each_opens_the_other() {
        let dir = tempfile::tempdir().unwrap();
        for suite in SUITES {
            let mut p = pair(dir.path(), suite);
            let name = format!("{:?}", suite.suite());
            for (i, len) in lengths().into_iter().enumerate() {
                let plain: Vec<u8> = (0..len).map(|j| (i * 31 + j * 7) as u8).collect();
                let typ = if i % 5 == 4 {
                    content::ALERT
                } else {
                    content::APPLICATION_DATA
                };
                let seq = p.seal.seq();

                // Ours, in place, or from the plaintext where it is (every
                // third record).
                let mut ours = vec![0u8; len + p.seal.overhead()];
                let n = if i % 3 == 1 {
                    p.seal.seal_from(typ, &plain, &mut ours)
                } else {
                    let pre = p.seal.prefix_len();
                    ours[pre..pre + len].copy_from_slice(&plain);
                    p.seal.seal_in_place(typ, &mut ours, len)
                };
                assert_eq!(n, ours.len(), "{name}");

                // rustls', same key, same sequence number.
                let theirs = p
                    .theirs_enc
                    .encrypt(
                        OutboundPlainMessage {
                            typ: ContentType::from(typ),
                            version: ProtocolVersion::TLSv1_2,
                            payload: OutboundChunks::Single(&plain),
                        },
                        seq,
                    )
                    .unwrap_or_else(|e| panic!("{name} len {len} seq {seq}: {e:?}"))
                    .encode();
                assert_eq!(ours, theirs, "{name} len {len}: sealed records differ");

                // rustls opens ours.
                let mut body = ours[HEADER_LEN..].to_vec();
                let msg = p
                    .theirs_dec
                    .decrypt(
                        InboundOpaqueMessage::new(
                            ContentType::from(ours[0]),
                            ProtocolVersion::TLSv1_2,
                            &mut body,
                        ),
                        seq,
                    )
                    .unwrap();
                assert_eq!(msg.payload, &plain[..], "{name}");
                assert_eq!(u8::from(msg.typ), typ, "{name}");

                // Ours opens rustls', out of place on even records and in
                // place on odd ones.
                let header: [u8; HEADER_LEN] = theirs[..HEADER_LEN].try_into().unwrap();
                let (t, got) = if i % 2 == 0 {
                    let mut out = vec![0u8; theirs.len()];
                    let (t, n) = p
                        .open
                        .open(&header, &theirs[HEADER_LEN..], &mut out)
                        .unwrap();
                    out.truncate(n);
                    (t, out)
                } else {
                    let mut body = theirs[HEADER_LEN..].to_vec();
                    let (t, r) = p.open.open_in_place(&header, &mut body).unwrap();
                    (t, body[r].to_vec())
                };
                assert_eq!((t, &got), (typ, &plain), "{name} len {len}");
            }
            assert_eq!(p.seal.seq(), p.open.seq());
        }
    }

    #[test]
    fn tampering_is_bad_record_mac_and_tls13_padding_comes_off() {
        let dir = tempfile::tempdir().unwrap();
        for suite in SUITES {
            let mut p = pair(dir.path(), suite);
            let pre = p.seal.prefix_len();
            let mut rec = vec![0u8; 100 + p.seal.overhead()];
            rec[pre..pre + 100].fill(b'a');
            let n = p
                .seal
                .seal_in_place(content::APPLICATION_DATA, &mut rec, 100);
            for at in [HEADER_LEN, pre, n / 2, n - 1] {
                let mut bad = rec.clone();
                bad[at] ^= 1;
                // A failed open leaves the sequence number alone.
                let h: [u8; HEADER_LEN] = bad[..HEADER_LEN].try_into().unwrap();
                let mut out = vec![0u8; n];
                assert_eq!(
                    p.open.open(&h, &bad[HEADER_LEN..], &mut out),
                    Err(RecordError::BadRecordMac)
                );
            }
            let h: [u8; HEADER_LEN] = rec[..HEADER_LEN].try_into().unwrap();
            let mut out = vec![0u8; n];
            assert_eq!(
                p.open.open(&h, &rec[HEADER_LEN..], &mut out),
                Ok((content::APPLICATION_DATA, 100))
            );
            // A replayed record (old sequence number) fails too.
            assert_eq!(
                p.open.open(&h, &rec[HEADER_LEN..], &mut out),
                Err(RecordError::BadRecordMac)
            );
            if p.protocol == Protocol::Tls13 {
                // Inner plaintext "hi" 23 0 0 0: padding stripped, type 23.
                let mut rec = vec![0u8; 6 + p.seal.overhead()];
                rec[pre..pre + 5].copy_from_slice(&[b'h', b'i', 23, 0, 0]);
                let n = p.seal.seal_in_place(0, &mut rec, 5);
                let h: [u8; HEADER_LEN] = rec[..HEADER_LEN].try_into().unwrap();
                let (t, r) = p.open.open_in_place(&h, &mut rec[HEADER_LEN..n]).unwrap();
                assert_eq!((t, r.len()), (23, 2));
                // All padding, no type: unexpected_message.
                let mut rec = vec![0u8; 3 + p.seal.overhead()];
                let n = p.seal.seal_in_place(0, &mut rec, 3);
                let h: [u8; HEADER_LEN] = rec[..HEADER_LEN].try_into().unwrap();
                assert_eq!(
                    p.open.open_in_place(&h, &mut rec[HEADER_LEN..n]),
                    Err(RecordError::Unexpected)
                );
            }
        }
    }

    /// RFC 8446 §5.4: a TLSInnerPlaintext (content, type, padding) over
    /// 2^14 + 1 bytes is record_overflow, even where its content alone is
    /// within 2^14. Before, only the content was measured.
    #[test]
    fn a_tls13_inner_plaintext_over_its_bound_is_overflow() {
        let dir = tempfile::tempdir().unwrap();
        for suite in &SUITES[..3] {
            let mut p = pair(dir.path(), *suite);
            assert_eq!(p.protocol, Protocol::Tls13);
            for padding in [0, 1] {
                // 2^14 bytes of content, its type, then `padding` zeros.
                let mut inner = vec![b'a'; MAX_PLAINTEXT + 1 + padding];
                inner[MAX_PLAINTEXT] = content::APPLICATION_DATA;
                inner[MAX_PLAINTEXT + 1..].fill(0);
                let tag_len = p.seal.key.algorithm().tag_len();
                let hdr = header(content::APPLICATION_DATA, (inner.len() + tag_len) as u16);
                let tag = p
                    .seal
                    .key
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(p.seal.nonce(p.seal.seq)),
                        Aad::from(&hdr[..]),
                        &mut inner,
                    )
                    .unwrap();
                p.seal.seq += 1;
                inner.extend_from_slice(tag.as_ref());
                let mut out = vec![0u8; inner.len()];
                let opened = p.open.open(&hdr, &inner, &mut out);
                if padding == 0 {
                    assert_eq!(opened, Ok((content::APPLICATION_DATA, MAX_PLAINTEXT)));
                } else {
                    assert_eq!(opened, Err(RecordError::Overflow), "{suite:?}");
                }
            }
        }
    }

    #[test]
    fn headers_split_only_when_whole_and_sane() {
        assert_eq!(split_header(&[23, 3, 3]), Ok(None));
        assert_eq!(
            split_header(&[23, 3, 3, 0, 20]),
            Ok(Some(([23, 3, 3, 0, 20], 25)))
        );
        assert_eq!(
            split_header(&[23, 3, 3, 0xff, 0xff]),
            Err(RecordError::Overflow)
        );
    }
}
