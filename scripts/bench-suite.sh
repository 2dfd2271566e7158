#!/usr/bin/env bash
# One command from a fresh clone to a comparison: builds dpbench, brings up
# the bench lab, starts nginx, HAProxy and stunnel (+ the cleartext pool) in
# the DUT namespace pinned to the DUT core, runs dpbench in the client
# namespace pinned to the client core, writes CSV/JSON/SVG, and tears
# everything down (also on failure or Ctrl-C). The crypto ceiling is
# measured on the DUT core before the peers start, while nothing else runs
# there (OUT/ceiling.md, OUT/ceiling.json; --ceiling-ms 0 skips it).
#
#   scripts/bench-suite.sh                          # dpbench suite, defaults
#   scripts/bench-suite.sh suite --tests cps --keys rsa2048,p256 --repeat 3
#   scripts/bench-suite.sh suite --tests cps --keys p256 --ceiling-each   # ceiling around each run
#   scripts/bench-suite.sh test latency --rate 300
#   scripts/bench-suite.sh scenario f5 --sustain 5
#
#   NAME=bench  LAB_NET=10.77.0  DUT_CORE=1  CLIENT_CORE=0
#   PEERS="nginx haproxy stunnel"   (add "backend" for the cleartext pool alone,
#                                    "dpd" for tlsdp's dataplane: plain HTTP tests)
#   OUT=/tmp/dpbench-results/<date>  WORK=/tmp/dpbench-<NAME> (certs, configs, logs)
#   BENCH_SRC_COUNT=16   client source addresses (dpbench --src NET.10-...)
#   DPD_TCP=defaults     run dpd with the default [tcp] settings (as users do)
#   DPD_STATS=1          after the run, dpd's TCP counters and memory (and its
#                        connection log's figures, with DPD_CONN_LOG=1)
#   DPD_CONN_LOG=1       dpd writes its connection log (scripts/peers/peers.sh)
#   DPD_PORT=af_packet|af_xdp|vnet_tap|memif   dpd's port (scripts/peers/peers.sh)
#   DPD_MTU=N  the memif link's MTU, both ends (jumbo frames: DPD_MTU=9000)
#   DPD_MEMIF=client  dpd the memif client, zero-copy (dpbench the server)
#   BYPASS=1   dpbench's kernel-bypass client (tlsdp's stack on DPDK, on the
#              client core): over memif with DPD_PORT=memif, else through
#              net_af_packet on veth-cli at NET.200 (closed-loop tests; the
#              kernel peers are then measured by the same client)
#   VERIFY=1   verify certificates (default: --dangerous-no-verify, the
#              cheapest client, so the DUT saturates first)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
name=${NAME:-bench}
net=${LAB_NET:-10.77.0}
cli_core=${CLIENT_CORE:-0}
dut_core=${DUT_CORE:-1}
work=${WORK:-/tmp/dpbench-$name}
out=${OUT:-/tmp/dpbench-results/$(date -u +%Y%m%d-%H%M%S)}
read -r -a peers <<< "${PEERS:-nginx haproxy stunnel}"
[ "$(id -u)" -eq 0 ] || { echo "bench-suite: must run as root (network namespaces)" >&2; exit 1; }

sub=suite
case "${1:-}" in suite|test|scenario) sub=$1; shift ;; esac

target_dir=${CARGO_TARGET_DIR:-$root/target}
if [ -z "${DPBENCH:-}" ]; then
    (cd "$root" && cargo build --release -p bench --bin dpbench)
    DPBENCH=$target_dir/release/dpbench
fi
case " ${peers[*]} " in
    *" dpd "*) (cd "$root" && cargo build --release -p dataplane -p control --bins) ;;
esac

cleanup() {
    "$root/scripts/peers/peers.sh" stop "$name" "$work" >/dev/null 2>&1 || true
    "$root/scripts/bench-lab.sh" down "$name" >/dev/null 2>&1 || true
}
trap cleanup EXIT INT TERM
"$root/scripts/bench-lab.sh" up "$name"
mkdir -p "$out"
# The crypto ceiling on the DUT core while it is free, before the peers
# start (an idle dpd still polls its core); --ceiling-ms N sets the time
# per operation, 0 skips it.
# The script's own option: taken out of what goes to dpbench (which
# would refuse it beside the --ceiling-file it is given).
ceiling_ms=300
passed=()
prev=
for a in "$@"; do
    case "$a" in
        --ceiling-ms=*) ceiling_ms=${a#--ceiling-ms=} ;;
        --ceiling-ms) ;;
        *) if [ "$prev" = --ceiling-ms ]; then ceiling_ms=$a; else passed+=("$a"); fi ;;
    esac
    prev=$a
done
set -- "${passed[@]}"
ceiling=()
if [ "$ceiling_ms" != 0 ] && [ "$sub" != scenario ]; then
    "$DPBENCH" ceiling --core "$dut_core" --ms "$ceiling_ms" --json "$out/ceiling.json" > "$out/ceiling.md"
    ceiling=(--ceiling-file "$out/ceiling.json")
fi
"$root/scripts/peers/peers.sh" start "$name" "$work" "${peers[@]}"
targets=()
while read -r t; do targets+=(--target "$t"); done < <("$root/scripts/peers/peers.sh" targets "$name" "$work" "${peers[@]}")
verify=(--dangerous-no-verify)
[ "${VERIFY:-0}" = 1 ] && verify=(--ca "$work/ca.pem")
mkdir -p "$out"
cmd=("$DPBENCH" "$sub")
[ "$sub" = suite ] || { cmd+=("$1"); shift; }
nsrc=${BENCH_SRC_COUNT:-16}
cmd+=("${targets[@]}" "${verify[@]}" --cores "$cli_core" --src "$net.10-$((10 + nsrc - 1))" --out "$out")
if [ "${BYPASS:-0}" = 1 ]; then
    if [ "${DPD_PORT:-af_packet}" = memif ]; then
        mtu=${DPD_MTU:-1500}
        bsize=; [ "$mtu" -gt 1500 ] && bsize=,bsize=16384
        # The other end of dpd's memif (DPD_MEMIF, scripts/peers/peers.sh).
        role=client; [ "${DPD_MEMIF:-server}" = client ] && role=server
        cmd+=(--bypass "net_memif0,role=$role,socket=$work/run/memif.sock,socket-abstract=no$bsize" --bypass-addr "${MEMIF_NET:-10.79.0}.2/24,sources=$nsrc,mtu=$mtu")
    else
        cmd+=(--bypass "net_af_packet0,iface=veth-cli" --bypass-addr "$net.200/24,sources=$nsrc")
    fi
fi
cmd+=("$@" "${ceiling[@]}")
echo "+ ${cmd[*]}" | tee "$out/command.txt"
ip netns exec "$name-cli" "${cmd[@]}" | tee "$out/report.md"
if [ "${DPD_STATS:-0}" = 1 ] && [ -s "$work/run/dpd.pid" ]; then
    {
        echo "dpd after the run:"
        "$target_dir/release/dpctl" --socket "$work/run/dpd.sock" stats || true
        grep -E '^(VmRSS|VmHWM)' "/proc/$(cat "$work/run/dpd.pid")/status" || true
        "$target_dir/release/dpctl" --socket "$work/run/dpd.sock" status | grep '^connection log' || true
        [ -f "$work/log/connections.log" ] && wc -l < "$work/log/connections.log" | sed 's/^/connection log lines: /'
        true
    } | tee "$out/dpd-after.txt"
fi
echo "reports in $out"
