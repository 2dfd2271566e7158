#!/usr/bin/env bash
# The tlsdp demo: builds dpd, makes the lab network (two namespaces and a
# veth link), starts dpd on the DUT side through DPDK's AF_PACKET device,
# pings (IPv4 and IPv6) and ARPs it from the client namespace, downloads from its built-in
# HTTP responder over dpd's own TCP stack with curl, then over HTTPS (dpd
# terminates TLS with a throwaway certificate made here), then SSL offload:
# HTTPS to a VIP whose cleartext dpd forwards to a pool of three nginx
# backends ("You are viewing rip-test-N"), health-checked; a short dpbench
# run prints CPS and throughput through it; dpd's counters with dpctl; then
# it stops dpd and tears the lab down. Last, scale-out (scripts/cluster-demo.sh):
# three dpd nodes announce a VIP through BIRD to an ECMP router, are spread
# over, drained and killed. Run as root.
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
BACKEND_PID=

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

cleanup() {
    if [ -n "$BACKEND_PID" ]; then kill "$BACKEND_PID" 2>/dev/null || true; fi
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
cargo build --release -p dataplane -p control -p bench --bins
DPD=target/release/dpd
DPCTL=target/release/dpctl
DPBENCH=target/release/dpbench

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
addresses = ["$NET.1/24", "fd00:77::1/64"]   # IPv4 and IPv6 (docs/ipv6.md)

[[vip]]
name = "plain"
listen = "$NET.1:80"
respond = "builtin"

[[cert]]
name = "demo"
cert = "$WORK/demo.pem"
key = "$WORK/demo.key"

[[vip]]
name = "https"
listen = "$NET.1:443"
respond = "builtin"
certs = ["demo"]

[[vip]]
name = "https6"
listen = "[fd00:77::1]:443"
respond = "builtin"
certs = ["demo"]

# SSL offload: TLS from clients, cleartext to the pool.
[[vip]]
name = "offload"
listen = "$NET.1:8443"
pool = "web"
certs = ["demo"]

[[pool]]
name = "web"
balance = "weighted_least_conn"
members = [{ addr = "$NET.11:80", weight = 2 }, { addr = "$NET.12:80" }, { addr = "$NET.13:80" }]
health = { kind = "http", path = "/", interval_ms = 500, timeout_ms = 300, rise = 2, fall = 2 }

[control]
socket = "$SOCK"
TOML

step "three backends (nginx) in the client namespace: $NET.11-13, pages 'You are viewing rip-test-N'"
for n in 1 2 3; do
    ip -n "$LAB-cli" addr add "$NET.1$n/24" dev veth-cli
    mkdir -p "$WORK/www$n" && printf 'You are viewing rip-test-%s\n' "$n" > "$WORK/www$n/index.html"
    head -c 1048576 /dev/zero > "$WORK/www$n/1m"
    printf '%s\n' "$(head -c 1000 /dev/zero | tr '\0' x)" > "$WORK/www$n/1k"
done
cat > "$WORK/backend.conf" <<EOC
daemon off; master_process off; worker_processes 1; pid $WORK/backend.pid; error_log $WORK/backend.err;
events { worker_connections 4096; }
http { access_log off; default_type text/plain; client_body_temp_path $WORK/b; proxy_temp_path $WORK/p;
  fastcgi_temp_path $WORK/f; uwsgi_temp_path $WORK/u; scgi_temp_path $WORK/s; keepalive_requests 100000;
  server { listen $NET.11:80; root $WORK/www1; } server { listen $NET.12:80; root $WORK/www2; } server { listen $NET.13:80; root $WORK/www3; } }
EOC
ip netns exec "$LAB-cli" nginx -p "$WORK" -c "$WORK/backend.conf" &
BACKEND_PID=$!

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

step "IPv6: ping -6 fd00:77::1 (Neighbor Discovery, ICMPv6 echo), then HTTPS to the IPv6 VIP"
ip netns exec "$LAB-cli" sysctl -qw net.ipv6.conf.veth-cli.disable_ipv6=0
ip netns exec "$LAB-cli" ip -6 addr add fd00:77::2/64 dev veth-cli nodad
ip netns exec "$LAB-cli" ping -6 -c 3 -i 0.2 -W 2 fd00:77::1
ip netns exec "$LAB-cli" ip -6 neigh show fd00:77::1 dev veth-cli
ip netns exec "$LAB-cli" curl -6 -sS --max-time 10 --cacert "$WORK/ca.pem" --resolve "demo.tlsdp:443:[fd00:77::1]" \
    -o /dev/null -w '  HTTPS over IPv6: %{http_code}, %{size_download} bytes, %{ssl_verify_result} (0: certificate verified)\n' \
    "https://demo.tlsdp/bytes/1000"

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

step "SSL offload: HTTPS to $NET.1:8443, cleartext to the pool (weighted least connections; one request at a time, so each member in turn)"
sleep 1.5   # two health checks
for _ in $(seq 8); do
    ip netns exec "$LAB-cli" curl -sS --max-time 10 --cacert "$WORK/ca.pem" --resolve "demo.tlsdp:8443:$NET.1" \
        "https://demo.tlsdp:8443/"
done

step "dpbench through the pool: new TLS connections/s (1 KB) and 1 MB keep-alive throughput, 3 s each"
for t in cps throughput; do
    path=/1k; size=1001; [ "$t" = throughput ] && { path=/1m; size=1048576; }
    ip netns exec "$LAB-cli" "$DPBENCH" test "$t" --target "name=dpd,host=$NET.1,p256=8443" --key p256 \
        --dangerous-no-verify --path "$path" --size "$size" --repeat 1 --ramp-up 0 --sustain 3 --ramp-down 0 \
        --ceiling-ms 0 --out "$WORK/bench-$t" 2>/dev/null | grep -E '^(best|negotiated)' || true
done

step "run-time changes with dpctl: drain a member, rotate the certificate, look at the VIPs"
"$DPCTL" --socket "$SOCK" pool show web
"$DPCTL" --socket "$SOCK" member drain web "$NET.11:80"
for _ in $(seq 4); do
    ip netns exec "$LAB-cli" curl -sS --max-time 10 --cacert "$WORK/ca.pem" --resolve "demo.tlsdp:8443:$NET.1" \
        "https://demo.tlsdp:8443/"
done
"$DPCTL" --socket "$SOCK" member enable web "$NET.11:80"
"$DPCTL" --socket "$SOCK" cert rotate demo --cert "$WORK/demo.pem" --key "$WORK/demo.key"
"$DPCTL" --socket "$SOCK" cert list
"$DPCTL" --socket "$SOCK" vip list

step "dpd's counters"
sleep 0.1
"$DPCTL" --socket "$SOCK" stats

step "stop dpd (SIGTERM)"
kill -TERM "$DPD_PID"
wait "$DPD_PID" && echo "dpd exited 0"
DPD_PID=
tail -n 3 "$WORK/dpd.log"

step "scale-out: three dpd nodes announce a VIP over BGP (BIRD) to an ECMP router"
scripts/cluster-demo.sh
