//! Devices under test. A target is an address with a port per certificate
//! key type (TLS) and a cleartext HTTP port, plus where its busy time comes
//! from. Kernel peers name pidfiles; tlsdp's `dpd` will name a `busy=cmd:` or
//! `busy=file:` source, so adding it needs no change here.

use std::net::IpAddr;
use std::path::PathBuf;

use crate::dut::BusySource;

/// Certificate key type of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, clap::ValueEnum)]
pub enum KeyType {
    #[value(name = "rsa2048")]
    #[serde(rename = "rsa2048")]
    Rsa2048,
    #[value(name = "p256")]
    #[serde(rename = "p256")]
    P256,
    #[value(name = "p384")]
    #[serde(rename = "p384")]
    P384,
}

impl KeyType {
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            KeyType::Rsa2048 => "RSA-2048",
            KeyType::P256 => "ECDSA P-256",
            KeyType::P384 => "ECDSA P-384",
        }
    }
}

/// One device under test.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Target {
    pub name: String,
    pub host: IpAddr,
    pub rsa2048: Option<u16>,
    pub p256: Option<u16>,
    pub p384: Option<u16>,
    pub http: Option<u16>,
    pub busy: BusySource,
    /// The core the DUT is pinned to (its busy fraction is sampled).
    pub core: Option<usize>,
    /// Processes that poll the DUT core even when idle (`dpd`): stopped
    /// while other targets are measured ([`crate::alone`]).
    pub pause: Vec<PathBuf>,
}

/// A bad `--target` specification.
#[derive(Debug, PartialEq, Eq)]
pub struct TargetSpecError(pub String);

impl std::fmt::Display for TargetSpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--target: {}", self.0)
    }
}
impl std::error::Error for TargetSpecError {}

impl Target {
    /// TLS port for a key type.
    #[must_use]
    pub fn tls_port(&self, k: KeyType) -> Option<u16> {
        match k {
            KeyType::Rsa2048 => self.rsa2048,
            KeyType::P256 => self.p256,
            KeyType::P384 => self.p384,
        }
    }

    /// Parses `name=N,host=IP,rsa2048=PORT,p256=PORT,p384=PORT,http=PORT,
    /// pidfile=A[+B],core=C,pause=A[+B],busy=cmd:...|file:...`.
    ///
    /// # Errors
    /// [`TargetSpecError`] naming the bad field and value.
    pub fn parse(spec: &str) -> Result<Self, TargetSpecError> {
        let mut t = Target {
            name: String::new(),
            host: IpAddr::from([127, 0, 0, 1]),
            rsa2048: None,
            p256: None,
            p384: None,
            http: None,
            busy: BusySource::None,
            core: None,
            pause: Vec::new(),
        };
        let mut pidfiles: Vec<PathBuf> = Vec::new();
        // `busy=cmd:...` may contain commas: it must come last.
        let (head, busy) = match spec.find("busy=") {
            Some(i) => (&spec[..i], Some(&spec[i + 5..])),
            None => (spec, None),
        };
        for kv in head.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| TargetSpecError(format!("`{kv}` is not key=value")))?;
            let port = || {
                v.parse::<u16>()
                    .map_err(|_| TargetSpecError(format!("{k}: bad port `{v}`")))
            };
            match k {
                "name" => t.name = v.to_string(),
                "host" => {
                    t.host = v
                        .parse()
                        .map_err(|_| TargetSpecError(format!("host: bad address `{v}`")))?
                }
                "rsa2048" => t.rsa2048 = Some(port()?),
                "p256" => t.p256 = Some(port()?),
                "p384" => t.p384 = Some(port()?),
                "http" => t.http = Some(port()?),
                "pidfile" => pidfiles.extend(v.split('+').map(PathBuf::from)),
                "pause" => t.pause.extend(v.split('+').map(PathBuf::from)),
                "core" => {
                    t.core = Some(
                        v.parse()
                            .map_err(|_| TargetSpecError(format!("core: bad core `{v}`")))?,
                    )
                }
                _ => return Err(TargetSpecError(format!("unknown field `{k}`"))),
            }
        }
        if let Some(b) = busy {
            t.busy = BusySource::parse(b).map_err(TargetSpecError)?;
        } else if !pidfiles.is_empty() {
            t.busy = BusySource::Procs {
                pidfiles,
                core: t.core,
            };
        }
        if t.name.is_empty() {
            return Err(TargetSpecError("name= is required".into()));
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_kernel_peer() {
        let t = Target::parse(
            "name=nginx,host=10.77.0.1,rsa2048=4431,p256=4432,http=8081,pidfile=/a+/b,core=1",
        )
        .unwrap();
        assert_eq!(t.tls_port(KeyType::Rsa2048), Some(4431));
        assert_eq!(t.tls_port(KeyType::P384), None);
        assert!(
            matches!(t.busy, BusySource::Procs { ref pidfiles, core: Some(1) } if pidfiles.len() == 2)
        );
    }

    #[test]
    fn parse_dpd_like_target_with_busy_command() {
        let t = Target::parse(
            "name=tlsdp,host=10.77.0.1,rsa2048=443,pause=/run/dpd.pid,busy=cmd:dpctl stats --busy-seconds,x",
        )
        .unwrap();
        assert!(
            matches!(t.busy, BusySource::Command(ref c) if c == "dpctl stats --busy-seconds,x")
        );
        assert_eq!(t.pause, [PathBuf::from("/run/dpd.pid")]);
    }

    #[test]
    fn parse_errors_name_the_field() {
        assert_eq!(
            Target::parse("name=a,rsa2048=x").unwrap_err(),
            TargetSpecError("rsa2048: bad port `x`".into())
        );
        assert!(Target::parse("host=1.2.3.4").is_err());
        assert!(Target::parse("name=a,color=red").is_err());
    }
}
