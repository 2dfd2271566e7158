#!/usr/bin/env bash
# Where dpd's busy time goes per TLS connection: dpd on memif driven by
# dpbench's kernel-bypass client (docs/bench.md), `perf record -e cpu-clock`
# of dpd's engine during the sustain phase, a flame graph, and the samples
# split into buckets (public-key crypto, symmetric crypto and hashing,
# rustls, our record layer, TCP, the engine and the responder, port I/O,
# allocation, kernel).
#
#   scripts/profile-dpd.sh [TEST] [KEY] [OUT]
#       TEST cps (default) | throughput;  KEY p256 (default) | rsa2048 | p384
#       OUT  directory for perf.data, folded stacks, SVG and buckets.txt
#            (default /tmp/dpd-profile-TEST-KEY)
#   PROFILE_SECONDS=5  C=128 (connections in flight)  TLS=1.3 (or 1.2)
#   DPD_MTU=1500 (the memif link's MTU, both ends: 9000 for jumbo frames)
#   DPD_MEMIF=server (dpd's memif role; client: zero-copy, dpbench the server)
#   INFERNO=/opt/inferno/bin (inferno-collapse-perf, inferno-flamegraph:
#            `cargo install inferno --root /opt/inferno`; without them only
#            the buckets are written)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
test=${1:-cps}
key=${2:-p256}
out=${3:-/tmp/dpd-profile-$test-$key}
secs=${PROFILE_SECONDS:-5}
inflight=${C:-128}
tls=${TLS:-1.3}
inferno=${INFERNO:-/opt/inferno/bin}
mtu=${DPD_MTU:-1500}
bsize=; [ "$mtu" -gt 1500 ] && bsize=,bsize=16384
export DPD_MTU=$mtu
# dpbench's end of the memif: the other role than dpd's.
role=client; [ "${DPD_MEMIF:-server}" = client ] && role=server
name=prof
work=/tmp/dpbench-$name
[ "$(id -u)" -eq 0 ] || { echo "profile-dpd: must run as root" >&2; exit 1; }
command -v perf >/dev/null || { echo "profile-dpd: perf is not installed (scripts/setup.sh)" >&2; exit 1; }
target_dir=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build --release -p dataplane -p control --bins && cargo build --release -p bench --bin dpbench)
mkdir -p "$out"
cleanup() {
    DPD_PORT=memif "$root/scripts/peers/peers.sh" stop "$name" "$work" >/dev/null 2>&1 || true
    "$root/scripts/bench-lab.sh" down "$name" >/dev/null 2>&1 || true
}
trap cleanup EXIT INT TERM
"$root/scripts/bench-lab.sh" up "$name" >/dev/null
DPD_PORT=memif "$root/scripts/peers/peers.sh" start "$name" "$work" dpd >/dev/null
t=$(DPD_PORT=memif "$root/scripts/peers/peers.sh" targets "$name" "$work" dpd)
pid=$(cat "$work/run/dpd.pid")
ramp=2
"$target_dir/release/dpbench" test "$test" --target "$t" --key "$key" --tls "$tls" --dangerous-no-verify \
    -c "$inflight" --ramp-up "$ramp" --sustain $((secs + 2)) --ramp-down 1 --repeat 1 --ceiling-ms 0 \
    --cores 0 --bypass "net_memif0,role=$role,socket=$work/run/memif.sock,socket-abstract=no$bsize" \
    --bypass-addr "10.79.0.2/24,sources=16,mtu=$mtu" --out "$out/run" > "$out/run.md" 2>&1 &
bench=$!
sleep $((ramp + 1))
perf record -e cpu-clock -F 2000 -g --call-graph dwarf,16384 -p "$pid" -o "$out/perf.data" -- sleep "$secs" 2> "$out/perf.log"
wait "$bench" || true
perf script -i "$out/perf.data" 2>/dev/null > "$out/perf.script"
if [ -x "$inferno/inferno-collapse-perf" ]; then
    "$inferno/inferno-collapse-perf" < "$out/perf.script" > "$out/folded.txt"
    "$inferno/inferno-flamegraph" --title "dpd: $test $key (bypass client over memif)" < "$out/folded.txt" > "$out/flame.svg"
fi
python3 "$root/scripts/profile-buckets.py" "$out/perf.script" "$out/run/results.json" | tee "$out/buckets.txt"
echo "profile in $out"
