#!/usr/bin/env bash
# What a slowloris costs dpd: for each kind of stalled client
# (tests/clients/slow_clients.py: silent or trickling, TLS or plain), a
# fresh dpd, COUNT such connections from the lab's client namespace, and
# dpd's resident memory before and while they are held; then how long dpd
# held them (its deadlines end them). Run as root; prints one line a kind.
#
#   scripts/slowloris-memory.sh [DPD] [COUNT] [LIMIT_S]
#
#   DPD       the dpd binary (default target/release/dpd: build it first)
#   COUNT     connections per kind (default 10000)
#   LIMIT_S   how long to wait for dpd to end them (default 40)
#   KINDS     the kinds to run (default: silent-tls trickle-tls after-hello
#             silent-plain trickle-plain)
set -euo pipefail
cd "$(dirname "$0")/.."

DPD=$(realpath "${1:-target/release/dpd}")
COUNT=${2:-10000}
LIMIT=${3:-40}
LAB=tlsdp-slowl
NET=10.79.0
WORK=$(mktemp -d /tmp/tlsdp-slowloris.XXXXXX)
DPD_PID=

stop_dpd() {
    if [ -n "$DPD_PID" ] && kill -0 "$DPD_PID" 2>/dev/null; then
        kill -TERM "$DPD_PID" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$DPD_PID" 2>/dev/null || break; sleep 0.1; done
    fi
    DPD_PID=
}
cleanup() {
    stop_dpd
    scripts/lab.sh down "$LAB" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

openssl req -x509 -nodes -days 2 -subj /CN=slowloris.test -newkey ec \
    -pkeyopt ec_paramgen_curve:P-256 -keyout "$WORK/k.pem" -out "$WORK/c.pem" 2>/dev/null
cat > "$WORK/dpd.toml" <<TOML
[eal]
lcores = [1]
args = ["--in-memory"]

[[port]]
name = "p0"
device = "net_af_packet0,iface=veth-dut"
address = "$NET.1/24"

[[vip]]
name = "plain"
listen = "$NET.1:80"
respond = "builtin"

[[vip]]
name = "tls"
listen = "$NET.1:443"
respond = "builtin"
certs = [{ cert = "$WORK/c.pem", key = "$WORK/k.pem" }]

[control]
socket = "$WORK/control.sock"
TOML

LAB_NET=$NET scripts/lab.sh up "$LAB" >/dev/null
ulimit -n $((COUNT + 1024))
rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }

echo "dpd $DPD, $COUNT connections a kind"
for kind in ${KINDS:-silent-tls trickle-tls after-hello silent-plain trickle-plain}; do
    rm -f "$WORK/control.sock"
    ip netns exec "$LAB-dut" "$DPD" --config "$WORK/dpd.toml" >"$WORK/dpd.log" 2>&1 &
    DPD_PID=$!
    for _ in $(seq 100); do [ -S "$WORK/control.sock" ] && break; sleep 0.1; done
    [ -S "$WORK/control.sock" ] || { cat "$WORK/dpd.log"; echo "dpd did not come up" >&2; exit 1; }
    before=$(rss_kib "$DPD_PID")
    ip netns exec "$LAB-cli" python3 tests/clients/slow_clients.py --dut "$NET.1" \
        --kinds "$kind" --count "$COUNT" --interval 1 --limit "$LIMIT" >"$WORK/out" 2>&1 &
    client=$!
    # Every connection open and its first byte sent, then a second for
    # the bytes to land.
    for _ in $(seq 600); do grep -q '^ready' "$WORK/out" && break; sleep 0.1; done
    sleep 1
    held=$(rss_kib "$DPD_PID")
    wait "$client" || true
    per=$(( (held - before) * 1024 / COUNT ))
    printf '%-14s RSS %6d -> %6d KiB (+%d bytes a connection); %s\n' \
        "$kind" "$before" "$held" "$per" "$(grep "^$kind" "$WORK/out" || tail -1 "$WORK/out")"
    stop_dpd
done
