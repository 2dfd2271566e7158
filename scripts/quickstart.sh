#!/usr/bin/env bash
# The tlsdp demo: builds dpd, makes the lab network (two namespaces and a
# veth link), starts dpd on the DUT side through DPDK's AF_PACKET device,
# pings and ARPs it from the client namespace, downloads from its built-in
# HTTP responder over dpd's own TCP stack with curl, then over HTTPS (dpd
# terminates TLS with a throwaway certificate made here), shows dpd's
# counters with dpctl, then stops dpd and tears the lab down. Run as root.
#
#   QUICKSTART_DRIVER=net_af_xdp scripts/quickstart.sh   use AF_XDP instead
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
    echo "quickstart.sh: run as root (network namespaces, DPDK)" >&2
    exit 1
fi

LAB=tlsdp-demo
NET=10.77.0
DRIVER=${QUICKSTART_DRIVER:-net_af_packet}
WORK=$(mktemp -d /tmp/tlsdp-quickstart.XXXXXX)
SOCK=$WORK/control.sock
DPD_PID=

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

cleanup() {
    if [ -n "$DPD_PID" ] && kill -0 "$DPD_PID" 2>/dev/null; then
        kill -TERM "$DPD_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$DPD_PID" 2>/dev/null || break; sleep 0.1; done
    fi
    scripts/lab.sh down "$LAB" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

step "setup (packages, hugepages)"
scripts/setup.sh

step "build"
cargo build --release -p dataplane -p control --bins
DPD=target/release/dpd
DPCTL=target/release/dpctl

step "lab: $LAB-cli ($NET.2) <-> $LAB-dut (dpd owns $NET.1)"
LAB_NET=$NET scripts/lab.sh up "$LAB"

step "a throwaway CA and certificate for demo.tlsdp (keys stay in $WORK)"
(
    cd "$WORK"
    openssl req -x509 -nodes -days 2 -subj /CN=tlsdp-demo-ca -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
        -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -new -nodes -subj /CN=demo.tlsdp -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
        -keyout demo.key -out demo.csr 2>/dev/null
    printf 'subjectAltName=DNS:demo.tlsdp\nbasicConstraints=critical,CA:FALSE\n' > demo.ext
    openssl x509 -req -in demo.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile demo.ext \
        -out demo.crt 2>/dev/null
    cat demo.crt ca.pem > demo.pem
)

cat > "$WORK/dpd.toml" <<TOML
[eal]
lcores = [1]
args = ["--in-memory"]

[[port]]
name = "p0"
device = "${DRIVER}0,iface=veth-dut"
address = "$NET.1/24"

[[vip]]
name = "plain"
listen = "$NET.1:80"
respond = "builtin"

[[vip]]
name = "https"
listen = "$NET.1:443"
respond = "builtin"
certs = [{ cert = "$WORK/demo.pem", key = "$WORK/demo.key" }]

[control]
socket = "$SOCK"
TOML

step "start dpd ($DRIVER)"
ip netns exec "$LAB-dut" "$DPD" --config "$WORK/dpd.toml" >"$WORK/dpd.log" 2>&1 &
DPD_PID=$!
for _ in $(seq 100); do
    [ -S "$SOCK" ] && break
    kill -0 "$DPD_PID" 2>/dev/null || { cat "$WORK/dpd.log"; echo "dpd failed to start" >&2; exit 1; }
    sleep 0.1
done
[ -S "$SOCK" ] || { cat "$WORK/dpd.log"; echo "dpd did not come up" >&2; exit 1; }
grep -E 'EAL arguments|port p0|engine' "$WORK/dpd.log" || true
"$DPCTL" --socket "$SOCK" status

step "ping $NET.1 from the client namespace"
ip netns exec "$LAB-cli" ping -c 5 -i 0.2 "$NET.1"

step "arping $NET.1"
ip netns exec "$LAB-cli" arping -c 3 -w 5 -I veth-cli "$NET.1"

step "HTTP over dpd's TCP stack: GET /bytes/64 and a 100 MB download"
ip netns exec "$LAB-cli" curl -sS --max-time 10 -i "http://$NET.1/bytes/64"
echo
ip netns exec "$LAB-cli" curl -sS --max-time 60 -o /dev/null \
    -w 'GET /bytes/100000000: HTTP %{http_code}, %{size_download} bytes in %{time_total} s (%{speed_download} bytes/s)\n' \
    "http://$NET.1/bytes/100000000"

step "HTTPS: dpd terminates TLS (certificate verified against the demo CA)"
ip netns exec "$LAB-cli" curl -sS --max-time 10 --cacert "$WORK/ca.pem" --resolve "demo.tlsdp:443:$NET.1" \
    -w '\n%{http_version} %{http_code}, TLS verify result %{ssl_verify_result}\n' "https://demo.tlsdp/bytes/64"
ip netns exec "$LAB-cli" curl -sS --max-time 60 --cacert "$WORK/ca.pem" --resolve "demo.tlsdp:443:$NET.1" -o /dev/null \
    -w 'GET https://demo.tlsdp/bytes/100000000: HTTP %{http_code}, %{size_download} bytes in %{time_total} s\n' \
    "https://demo.tlsdp/bytes/100000000"

step "dpd's counters"
sleep 0.1
"$DPCTL" --socket "$SOCK" stats

step "stop dpd (SIGTERM)"
kill -TERM "$DPD_PID"
wait "$DPD_PID" && echo "dpd exited 0"
DPD_PID=
tail -n 3 "$WORK/dpd.log"
