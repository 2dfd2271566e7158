//! TLS 1.3 record protection contexts built at their first record
//! (docs/architecture.md, "TLS"; docs/profile.md).
//!
//! rustls installs an encrypter for the server's application traffic
//! secret when it sends its Finished, and a decrypter for the client's
//! when it reads the client's; each is an AEAD context (an AES key
//! schedule and GHASH tables for AES-GCM). `dpd` takes the traffic
//! secrets out once the handshake is done and protects application data
//! with its own record layer ([`crate::record`]), so those two contexts
//! were built in every handshake and never used. [`LazyAead`] keeps the
//! key and IV instead, and builds the context from them at the first
//! record it protects or opens (the handshake traffic keys, at once).

use rustls::crypto::cipher::{
    AeadKey, InboundOpaqueMessage, InboundPlainMessage, Iv, MessageDecrypter, MessageEncrypter,
    OutboundOpaqueMessage, OutboundPlainMessage, Tls13AeadAlgorithm, UnsupportedOperationError,
};
use rustls::{ConnectionTrafficSecrets, Error};

/// Bytes a TLS 1.3 record adds to its plaintext: the inner content type
/// (RFC 8446 §5.2) and the tag of every TLS 1.3 AEAD (AES-GCM, AES-CCM,
/// ChaCha20-Poly1305: 16 bytes).
const TLS13_OVERHEAD: usize = 1 + 16;

/// `inner`, with contexts built at first use.
pub(crate) struct LazyAead(pub(crate) &'static dyn Tls13AeadAlgorithm);

impl Tls13AeadAlgorithm for LazyAead {
    fn encrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageEncrypter> {
        Box::new(Lazy::<dyn MessageEncrypter> {
            alg: self.0,
            state: State::Keys(key, iv),
        })
    }

    fn decrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageDecrypter> {
        Box::new(Lazy::<dyn MessageDecrypter> {
            alg: self.0,
            state: State::Keys(key, iv),
        })
    }

    fn key_len(&self) -> usize {
        self.0.key_len()
    }

    fn extract_keys(
        &self,
        key: AeadKey,
        iv: Iv,
    ) -> Result<ConnectionTrafficSecrets, UnsupportedOperationError> {
        self.0.extract_keys(key, iv)
    }

    fn fips(&self) -> bool {
        self.0.fips()
    }
}

/// A context not built yet (its key and IV), or built.
enum State<T: ?Sized> {
    Keys(AeadKey, Iv),
    Built(Box<T>),
    /// Only while the keys move into the context being built.
    Moving,
}

struct Lazy<T: ?Sized> {
    alg: &'static dyn Tls13AeadAlgorithm,
    state: State<T>,
}

impl<T: ?Sized> Lazy<T> {
    /// The context, built from the keys on first use.
    fn get(&mut self, build: impl FnOnce(AeadKey, Iv) -> Box<T>) -> Option<&mut T> {
        if let State::Keys(..) = self.state {
            if let State::Keys(key, iv) = std::mem::replace(&mut self.state, State::Moving) {
                self.state = State::Built(build(key, iv));
            }
        }
        match &mut self.state {
            State::Built(context) => Some(context),
            State::Keys(..) | State::Moving => None,
        }
    }
}

impl MessageEncrypter for Lazy<dyn MessageEncrypter> {
    fn encrypt(
        &mut self,
        msg: OutboundPlainMessage<'_>,
        seq: u64,
    ) -> Result<OutboundOpaqueMessage, Error> {
        let alg = self.alg;
        match self.get(|key, iv| alg.encrypter(key, iv)) {
            Some(context) => context.encrypt(msg, seq),
            None => Err(Error::EncryptError),
        }
    }

    fn encrypted_payload_len(&self, payload_len: usize) -> usize {
        match &self.state {
            State::Built(context) => context.encrypted_payload_len(payload_len),
            State::Keys(..) | State::Moving => payload_len + TLS13_OVERHEAD,
        }
    }
}

impl MessageDecrypter for Lazy<dyn MessageDecrypter> {
    fn decrypt<'a>(
        &mut self,
        msg: InboundOpaqueMessage<'a>,
        seq: u64,
    ) -> Result<InboundPlainMessage<'a>, Error> {
        let alg = self.alg;
        match self.get(|key, iv| alg.decrypter(key, iv)) {
            Some(context) => context.decrypt(msg, seq),
            None => Err(Error::DecryptError),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::cipher::OutboundChunks;
    use rustls::{ContentType, ProtocolVersion};

    /// A key of the suite's length and an IV, from `seed` through the
    /// key schedule (`AeadKey` is made only there).
    fn keys(s: &rustls::Tls13CipherSuite, seed: u8) -> (AeadKey, Iv) {
        let secret = rustls::crypto::tls13::OkmBlock::new(&[seed; 32]);
        let expander = s.hkdf_provider.expander_for_okm(&secret);
        (
            rustls::internal::derive_traffic_key(expander.as_ref(), s.aead_alg),
            rustls::internal::derive_traffic_iv(expander.as_ref()),
        )
    }

    /// For every TLS 1.3 suite: records sealed through the lazy contexts
    /// equal the eager ones' byte for byte, open in either, a length
    /// asked before the first record equals the built context's, and a
    /// forged record is refused as by the eager context.
    #[test]
    fn lazy_contexts_protect_records_as_the_eager_ones() {
        for suite in rustls::crypto::aws_lc_rs::DEFAULT_CIPHER_SUITES {
            let Some(s) = suite.tls13() else { continue };
            let lazy = LazyAead(s.aead_alg);
            let (k1, iv1) = keys(s, 7);
            let (k2, iv2) = keys(s, 7);
            let mut theirs = s.aead_alg.encrypter(k1, iv1);
            let mut ours = lazy.encrypter(k2, iv2);
            for len in [0usize, 1, 100, 16384] {
                assert_eq!(
                    ours.encrypted_payload_len(len),
                    theirs.encrypted_payload_len(len),
                    "{:?} before the first record",
                    suite.suite()
                );
            }
            let mut sealed = Vec::new();
            for (seq, len) in [(0u64, 0usize), (1, 5), (2, 1000)] {
                let payload = vec![seq as u8; len];
                let msg = || OutboundPlainMessage {
                    typ: ContentType::ApplicationData,
                    version: ProtocolVersion::TLSv1_2,
                    payload: OutboundChunks::Single(&payload),
                };
                let a = ours.encrypt(msg(), seq).unwrap().encode();
                let b = theirs.encrypt(msg(), seq).unwrap().encode();
                assert_eq!(a, b, "{:?} record {seq}", suite.suite());
                assert_eq!(
                    ours.encrypted_payload_len(len),
                    theirs.encrypted_payload_len(len)
                );
                sealed.push(a);
            }
            let (k3, iv3) = keys(s, 7);
            let mut opener = lazy.decrypter(k3, iv3);
            for (seq, record) in sealed.iter().enumerate() {
                let mut buf = record.clone();
                let msg = InboundOpaqueMessage::new(
                    ContentType::ApplicationData,
                    ProtocolVersion::TLSv1_2,
                    &mut buf[5..],
                );
                let plain = opener.decrypt(msg, seq as u64).unwrap();
                assert_eq!(plain.typ, ContentType::ApplicationData);
            }
            let mut forged = sealed[2].clone();
            forged[9] ^= 1;
            let (k4, iv4) = keys(s, 7);
            let mut opener = lazy.decrypter(k4, iv4);
            let msg = InboundOpaqueMessage::new(
                ContentType::ApplicationData,
                ProtocolVersion::TLSv1_2,
                &mut forged[5..],
            );
            assert!(opener.decrypt(msg, 0).is_err());
        }
    }
}
