//! Files the control thread reads and writes for operators: a certificate
//! or key that is not a regular file (`--cert /dev/zero`, a FIFO) or is
//! too large is refused at once and the control thread goes on; a key
//! others can read is used with a warning, or refused under
//! `strict_key_permissions`; `config save` never writes through a link.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use control::api::{Answer, Reply, Request};
use control::config::{Config, NamedCert};
use crypto::testcert::{self_signed, P256};
use dataplane::controller::Controller;

fn config(strict: bool) -> Config {
    let text = format!(
        "[eal]\nlcores = [1]\n[[port]]\nname = \"p0\"\ndevice = \"net_ring0\"\naddress = \"10.78.0.1/24\"\n\
         [[vip]]\nname = \"web\"\nlisten = \"10.78.0.1:80\"\nrespond = \"builtin\"\n\
         [control]\nstrict_key_permissions = {strict}\n"
    );
    Config::parse(&text).unwrap()
}

/// A controller with no engines (changes apply to none; what is tested
/// here happens before).
fn controller(strict: bool, path: Option<&Path>) -> Controller {
    let (c, _) = Controller::start(
        config(strict),
        path.map(Path::to_path_buf),
        Vec::new(),
        Vec::new(),
        1_000_000_000,
    )
    .unwrap();
    c
}

fn reply(a: Answer) -> Reply {
    match a {
        Answer::Now(r) => r,
        Answer::Later(rx) => rx.recv().unwrap(),
    }
}

fn add(c: &mut Controller, cert: &Path, key: &Path) -> Reply {
    let req = Request::CertAdd {
        cert: NamedCert {
            name: "site".into(),
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            origin: None,
        },
    };
    reply(c.handle(&req))
}

#[test]
fn certificates_that_are_not_regular_files_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    self_signed(dir.path(), "ok", P256, "site.test");
    let (cert, key) = (dir.path().join("ok.pem"), dir.path().join("ok.key"));
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let big = dir.path().join("big.pem");
    std::fs::write(&big, vec![b'-'; 2 << 20]).unwrap();
    let mut c = controller(false, None);
    for (cert_file, key_file, says) in [
        (
            Path::new("/dev/zero"),
            key.as_path(),
            "not a regular file (a character device)",
        ),
        (
            cert.as_path(),
            Path::new("/dev/zero"),
            "not a regular file (a character device)",
        ),
        (fifo.as_path(), key.as_path(), "not a regular file (a FIFO)"),
        (big.as_path(), key.as_path(), "larger than 1048576 bytes"),
    ] {
        let start = Instant::now();
        let r = add(&mut c, cert_file, key_file);
        assert!(start.elapsed() < Duration::from_secs(1), "answered at once");
        let e = r.error.unwrap_or_default();
        assert!(!r.ok && e.contains(says), "{cert_file:?} {key_file:?}: {e}");
    }
    // The control thread goes on: the real files are taken.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = add(&mut c, &cert, &key);
    assert!(r.ok, "{r:?}");
}

#[test]
fn a_key_others_can_read_is_refused_only_when_strict() {
    let dir = tempfile::tempdir().unwrap();
    self_signed(dir.path(), "c", P256, "site.test");
    let (cert, key) = (dir.path().join("c.pem"), dir.path().join("c.key"));
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = add(&mut controller(false, None), &cert, &key);
    assert!(r.ok, "a warning only: {r:?}");
    let r = add(&mut controller(true, None), &cert, &key);
    let e = r.error.unwrap_or_default();
    assert!(
        !r.ok && e.contains("readable by group or others (mode 0644)") && e.contains("c.key"),
        "{e}"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(add(&mut controller(true, None), &cert, &key).ok);
}

#[test]
fn config_save_replaces_a_link_instead_of_writing_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("shadow");
    std::fs::write(&victim, b"root:x:0:0\n").unwrap();
    let target = dir.path().join("dpd.toml");
    std::os::unix::fs::symlink(&victim, &target).unwrap();
    // A planted temporary name is not followed either.
    std::os::unix::fs::symlink(&victim, dir.path().join("dpd.toml.tmp")).unwrap();
    let mut c = controller(false, Some(&target));
    let r = reply(c.handle(&Request::ConfigSave { path: None }));
    assert!(r.ok, "{r:?}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"root:x:0:0\n");
    let saved = std::fs::read_to_string(&target).unwrap();
    assert!(Config::parse(&saved).is_ok(), "{saved}");
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}
