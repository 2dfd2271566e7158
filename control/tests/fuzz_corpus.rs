//! Replays the control fuzz corpus (`dataplane/fuzz/corpus/control_requests`)
//! through `control::fuzzing::requests`: what the fuzzer found once stays
//! fixed.

use std::fs;
use std::path::Path;

use control::config::Config;

#[test]
fn the_base_configuration_is_valid() {
    Config::parse(control::fuzzing::BASE).unwrap();
}

#[test]
fn control_requests_corpus_replays() {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../dataplane/fuzz/corpus/control_requests");
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for f in files {
        // A panic here names the file to reproduce with.
        eprintln!("replaying {}", f.display());
        let accepted = control::fuzzing::requests(&fs::read(&f).unwrap());
        // The seed of every request kind changes what it names, so
        // mutations of it start from accepted changes.
        if f.ends_with("every-request") {
            assert_eq!(accepted, 22, "changes accepted from {}", f.display());
        }
    }
}
