#!/usr/bin/env bash
# dpbench's tests: unit tests, then the end-to-end trust tests against a real
# nginx in lab namespaces (root; nginx, h2load and friends from setup.sh).
# Short runs: well under four minutes. Fails loudly when a tool is missing.
#
#   scripts/bench-test.sh          (CARGO_TARGET_DIR defaults to target/)
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "bench-test: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "must run as root (network namespaces)"
for t in ip nginx haproxy stunnel4 h2load openssl taskset; do
    command -v "$t" >/dev/null 2>&1 || fail "$t is not installed: run scripts/setup.sh"
done
# Release profile for everything: one build of aws-lc serves tests and runs.
# dpd and dpctl too: the trust tests run dpd as the benchmarks do.
cargo build --release -p dataplane -p control --bins
# Unit tests and the integration tests that need no lab (ceiling_file,
# pause); the trust tests are #[ignore]d there and run next.
cargo test --release -p bench
cargo test --release -p bench --test trust -- --ignored --test-threads=1
echo "bench-test: all passed"
