#!/usr/bin/env bash
# The whole test suite: setup if needed, format and lint checks, then every
# test (unit, DPDK on net_ring, in-memory engine, end-to-end over veth with
# real kernel clients). Run as root on Debian 12.
#
#   scripts/test.sh            everything
#   TLSDP_SKIP_LINT=1          skip cargo fmt/clippy
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
    echo "test.sh: run as root (network namespaces, DPDK, hugepages)" >&2
    exit 1
fi

scripts/setup.sh

if [ "${TLSDP_SKIP_LINT:-0}" != 1 ]; then
    echo "== cargo fmt --check"
    cargo fmt --all -- --check
    echo "== cargo clippy"
    cargo clippy --workspace --all-targets -- -D warnings
fi

echo "== build"
# dpbench too: the control tests put load on dpd while they change it.
cargo build --workspace --bins

echo "== tests"
log=$(mktemp /tmp/tlsdp-test.XXXXXX)
trap 'rm -f "$log"' EXIT
rc=0
set +e
# dpbench's tests run in release (one aws-lc build) from bench-test.sh.
cargo test --workspace --exclude bench --no-fail-fast 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
if [ -x scripts/bench-test.sh ]; then
    echo "== dpbench tests"
    scripts/bench-test.sh 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
set -e
# One closing line over every test binary of the run.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$rc"
