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
cargo build --workspace --bins

echo "== tests"
cargo test --workspace --no-fail-fast

if [ -x scripts/bench-test.sh ]; then
    echo "== dpbench trust tests"
    scripts/bench-test.sh
fi
