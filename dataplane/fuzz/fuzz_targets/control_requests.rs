//! Control requests, one JSON object per line, applied in turn to a
//! configuration; then the whole input as a configuration file. Nothing
//! may panic, and every accepted configuration saves and loads back equal.
//! Run: `cd dataplane/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run control_requests corpus/control_requests`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    control::fuzzing::requests(data);
});
