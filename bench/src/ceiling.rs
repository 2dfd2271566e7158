//! The per-core crypto ceiling (BENCH.md): what one core can do in server
//! handshakes, from the cost of the server's public-key operations measured
//! with aws-lc-rs on the machine at hand.
//!
//! One ECDHE handshake costs the server one signature (RSA-2048 PKCS#1/PSS or
//! ECDSA) plus one key-exchange key generation and one shared-secret
//! computation (for X25519MLKEM768 also one ML-KEM-768 encapsulation).
//! Symmetric crypto, hashing and TCP are left out: the ceiling is an upper
//! bound.

use std::time::{Duration, Instant};

use aws_lc_rs::{agreement, kem, rand, rsa, signature};

use crate::target::KeyType;
use crate::tls::Group;

/// Cost of one operation.
#[derive(Clone, Debug, serde::Serialize)]
pub struct OpCost {
    pub op: &'static str,
    pub us: f64,
}

/// Ceiling for one handshake type.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Ceiling {
    pub handshake: String,
    pub us_per_handshake: f64,
    pub handshakes_per_s: f64,
}

/// Error setting up the measurement.
#[derive(Debug)]
pub struct CeilingError(pub &'static str);

impl std::fmt::Display for CeilingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ceiling: {}", self.0)
    }
}
impl std::error::Error for CeilingError {}

fn time_op(budget: Duration, mut f: impl FnMut()) -> f64 {
    // Warm up, then run for the budget.
    for _ in 0..3 {
        f();
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        for _ in 0..8 {
            f();
        }
        n += 8;
    }
    start.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn kx_cost(
    alg: &'static agreement::Algorithm,
    budget: Duration,
) -> Result<(f64, f64), CeilingError> {
    let rng = rand::SystemRandom::new();
    let peer = agreement::EphemeralPrivateKey::generate(alg, &rng)
        .map_err(|_| CeilingError("kx keygen"))?;
    let peer_pub = peer
        .compute_public_key()
        .map_err(|_| CeilingError("kx public key"))?;
    let peer_bytes = peer_pub.as_ref().to_vec();
    let keygen = time_op(budget, || {
        let k = agreement::EphemeralPrivateKey::generate(alg, &rng);
        let _ = k.map(|k| k.compute_public_key().map(|p| p.as_ref().len()));
    });
    let agree = time_op(budget, || {
        // A fresh key each time (an ephemeral key agrees once); subtract the
        // keygen cost measured above.
        if let Ok(k) = agreement::EphemeralPrivateKey::generate(alg, &rng) {
            let _ = agreement::agree_ephemeral(
                k,
                agreement::UnparsedPublicKey::new(alg, &peer_bytes),
                (),
                |s| Ok(s.len()),
            );
        }
    });
    Ok((keygen, (agree - keygen).max(0.0)))
}

/// Measures the operations and the ceilings; `budget` per operation.
///
/// # Errors
/// [`CeilingError`] when a key cannot be generated (should not happen).
pub fn measure(budget: Duration) -> Result<(Vec<OpCost>, Vec<Ceiling>), CeilingError> {
    let rsa_pss = sign_cost(budget, KeyType::Rsa2048)?;
    let p256_sign = sign_cost(budget, KeyType::P256)?;
    let p384_sign = sign_cost(budget, KeyType::P384)?;
    let (x_gen, x_agree) = kx_cost(&agreement::X25519, budget)?;
    let (p256_gen, p256_agree) = kx_cost(&agreement::ECDH_P256, budget)?;
    let (p384_gen, p384_agree) = kx_cost(&agreement::ECDH_P384, budget)?;
    let dk = kem::DecapsulationKey::generate(&kem::ML_KEM_768)
        .map_err(|_| CeilingError("ML-KEM keygen"))?;
    let ek = dk
        .encapsulation_key()
        .map_err(|_| CeilingError("ML-KEM key"))?;
    let mlkem_encap = time_op(budget, || {
        let _ = ek.encapsulate();
    });
    let ops = vec![
        OpCost {
            op: "RSA-2048 sign (PSS-SHA256)",
            us: rsa_pss,
        },
        OpCost {
            op: "ECDSA P-256 sign",
            us: p256_sign,
        },
        OpCost {
            op: "ECDSA P-384 sign",
            us: p384_sign,
        },
        OpCost {
            op: "X25519 keygen",
            us: x_gen,
        },
        OpCost {
            op: "X25519 shared secret",
            us: x_agree,
        },
        OpCost {
            op: "P-256 ECDH keygen",
            us: p256_gen,
        },
        OpCost {
            op: "P-256 ECDH shared secret",
            us: p256_agree,
        },
        OpCost {
            op: "P-384 ECDH keygen",
            us: p384_gen,
        },
        OpCost {
            op: "P-384 ECDH shared secret",
            us: p384_agree,
        },
        OpCost {
            op: "ML-KEM-768 encapsulate",
            us: mlkem_encap,
        },
    ];
    let kx = [
        (Group::X25519, x_gen + x_agree),
        (Group::P256, p256_gen + p256_agree),
        (Group::P384, p384_gen + p384_agree),
        (Group::X25519MlKem768, x_gen + x_agree + mlkem_encap),
    ];
    let sigs = [
        ("RSA-2048", rsa_pss),
        ("ECDSA P-256", p256_sign),
        ("ECDSA P-384", p384_sign),
    ];
    let mut ceilings = Vec::new();
    for (sname, s) in sigs {
        for (group, k) in kx {
            let us = s + k;
            ceilings.push(Ceiling {
                handshake: format!("ECDHE {} + {sname}", kx_name(group)),
                us_per_handshake: us,
                handshakes_per_s: 1e6 / us,
            });
        }
    }
    Ok((ops, ceilings))
}

/// A key exchange group as the ceilings name it.
#[must_use]
pub fn kx_name(group: Group) -> &'static str {
    match group {
        Group::X25519 => "X25519",
        Group::P256 => "P-256",
        Group::P384 => "P-384",
        Group::X25519MlKem768 => "X25519MLKEM768",
    }
}

/// The ceiling (handshakes/s) of one server handshake in `group` with a
/// `key` certificate: its signature, the group's key generation and
/// shared secret (and ML-KEM's encapsulation for the hybrid), `budget`
/// each. For a ceiling measured beside each run (`--ceiling-each`).
///
/// # Errors
/// [`CeilingError`] when a key cannot be generated (should not happen).
pub fn handshake_rate(budget: Duration, group: Group, key: KeyType) -> Result<f64, CeilingError> {
    let sign = sign_cost(budget, key)?;
    let alg = match group {
        Group::X25519 | Group::X25519MlKem768 => &agreement::X25519,
        Group::P256 => &agreement::ECDH_P256,
        Group::P384 => &agreement::ECDH_P384,
    };
    let (gen, agree) = kx_cost(alg, budget)?;
    let kem = if group == Group::X25519MlKem768 {
        let dk = kem::DecapsulationKey::generate(&kem::ML_KEM_768)
            .map_err(|_| CeilingError("ML-KEM keygen"))?;
        let ek = dk
            .encapsulation_key()
            .map_err(|_| CeilingError("ML-KEM key"))?;
        time_op(budget, || {
            let _ = ek.encapsulate();
        })
    } else {
        0.0
    };
    Ok(1e6 / (sign + gen + agree + kem))
}

/// µs per signature with a fresh `key` (RSA-2048 PSS-SHA256, or ECDSA),
/// over `budget`.
fn sign_cost(budget: Duration, key: KeyType) -> Result<f64, CeilingError> {
    let rng = rand::SystemRandom::new();
    let msg = [0x5au8; 64];
    Ok(match key {
        KeyType::Rsa2048 => {
            let k = rsa::KeyPair::generate(rsa::KeySize::Rsa2048)
                .map_err(|_| CeilingError("RSA keygen"))?;
            let mut sig = vec![0u8; k.public_modulus_len()];
            time_op(budget, || {
                let _ = k.sign(&signature::RSA_PSS_SHA256, &rng, &msg, &mut sig);
            })
        }
        KeyType::P256 | KeyType::P384 => {
            let alg = if key == KeyType::P256 {
                &signature::ECDSA_P256_SHA256_ASN1_SIGNING
            } else {
                &signature::ECDSA_P384_SHA384_ASN1_SIGNING
            };
            let k =
                signature::EcdsaKeyPair::generate(alg).map_err(|_| CeilingError("ECDSA keygen"))?;
            time_op(budget, || {
                let _ = k.sign(&rng, &msg);
            })
        }
    })
}

/// Runs `f` on a thread of its own pinned to `core` (the DUT core, so a
/// ceiling is that core's); `None` if it panicked or could not be pinned
/// there (a core this process may not use, or none of that number: a
/// ceiling measured elsewhere would be another core's).
pub fn on_core<T: Send + 'static>(
    core: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    std::thread::spawn(move || {
        if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
            eprintln!("dpbench: cannot run on core {core}: no ceiling measured");
            return None;
        }
        Some(f())
    })
    .join()
    .ok()
    .flatten()
}

/// The ceiling (handshakes/s) for a handshake in `group` with a `key`
/// certificate.
#[must_use]
pub fn for_handshake(ceilings: &[Ceiling], group: Group, key: KeyType) -> Option<f64> {
    let want = format!("ECDHE {} + {}", kx_name(group), key.name());
    ceilings
        .iter()
        .find(|c| c.handshake == want)
        .map(|c| c.handshakes_per_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_something_plausible() {
        let (ops, c) = measure(Duration::from_millis(20)).unwrap();
        assert_eq!(ops.len(), 10);
        assert!(ops.iter().all(|o| o.us > 0.0 || o.op.contains("shared")));
        assert!(for_handshake(&c, Group::X25519, KeyType::Rsa2048).unwrap() > 0.0);
        // Every group with every key; the hybrid costs X25519's and more.
        for key in [KeyType::Rsa2048, KeyType::P256, KeyType::P384] {
            let x = for_handshake(&c, Group::X25519, key).unwrap();
            for g in [Group::P256, Group::P384] {
                assert!(for_handshake(&c, g, key).unwrap() > 0.0, "{g:?} {key:?}");
            }
            assert!(for_handshake(&c, Group::X25519MlKem768, key).unwrap() < x);
        }
    }

    #[test]
    fn one_handshake_rate_per_key_ranks_as_the_keys_do() {
        let budget = Duration::from_millis(30);
        let rate =
            |k| on_core(0, move || handshake_rate(budget, Group::X25519, k).unwrap()).unwrap();
        let (rsa, p256, p384) = (
            rate(KeyType::Rsa2048),
            rate(KeyType::P256),
            rate(KeyType::P384),
        );
        // An RSA-2048 signature costs several P-384 ones, and a P-384
        // one several P-256 ones, on any machine.
        assert!(
            rsa > 0.0 && rsa < p384 && p384 < p256,
            "{rsa} {p384} {p256}"
        );
    }
}
