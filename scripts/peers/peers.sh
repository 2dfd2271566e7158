#!/usr/bin/env bash
# Peer terminators in the lab's DUT namespace, side by side, in front of one
# cleartext backend pool (the loadbalancer.org setup):
#
#   backend   nginx, 1 worker, pinned to the CLIENT core (it stands for other
#             machines); pool members rip-test-1..4 on 127.0.0.1:8081-8084,
#             each serving /64b /107b-ish /rip.html (107 B, "rip-test-N")
#             /1k /250k /1m /2m; rip-test-1 also on NET.1:8090 (target "backend")
#   nginx     TLS 4431 (RSA-2048) 4432 (P-256) 4433 (P-384), HTTP 8001
#   haproxy   TLS 4441 4442 4443, HTTP 8002  (nbthread 1, mode http)
#   stunnel   TLS 4451 4452 4453 -> haproxy-clear 127.0.0.1:8080 (HTTP 8003)
#   all three balance over the pool by least connections.
#
# Terminators run pinned to DUT_CORE with one worker, session caches and
# tickets off (OPENSSL_CONF sets NumTickets = 0 so TLS 1.3 sends none). nginx
# also has 4439: TLS 1.2 with a session cache, used only by the trust test to
# show that resumption is visible when it is on.
#
#   scripts/peers/peers.sh start NAME DIR [nginx haproxy stunnel]
#   scripts/peers/peers.sh stop NAME DIR
#   peer "dpd": tlsdp's own dataplane on the same veth through AF_PACKET, at
#   NET.100 (the kernel keeps NET.1 for the other peers), with the built-in
#   responder on :80 (plain HTTP) and :4461-4463 (TLS, one key type each);
#   it serves the same /64b ... /2m pages.
#   peer "dpd-proxy": the same dpd's pool VIPs, :8071 (plain) and :4471-4473
#   (TLS), forwarding the cleartext to the rip-test pool (weighted least
#   connections) served by a second backend nginx in the client namespace on
#   NET.2:8081-8084, pinned to the client core: SSL offload, as the kernel
#   peers do it (they reach their pool over the DUT's loopback).
#   DPD_BIN and DPCTL_BIN name the binaries (default target/release/).
#   DPD_PORT: dpd's port. af_packet (default) on veth-dut beside the kernel
#   peers; af_xdp on veth-dut (it takes every frame of the link: run it
#   without kernel peers); vnet_tap, tlsdp's tap with virtio-net headers
#   (checksums and TSO left to the kernel, docs/architecture.md "Ports"):
#   a tap in the client namespace on LAB_TAP_NET (10.78.0; dpd at .1 with
#   the client's .2 as gateway back to the client addresses); memif, a DPDK
#   memif server on DIR/run/memif.sock for dpbench's kernel-bypass client
#   (--bypass net_memif0,role=client,socket=DIR/run/memif.sock,socket-abstract=no
#   --bypass-addr MEMIF_NET.2/24; dpd at MEMIF_NET.1, default 10.79.0).
#   DPD_MEMIF=client: over memif, dpd is the client instead, in zero-copy
#   mode (it sends from and receives into its own mbufs; the server copies),
#   and dpbench's bypass the server (--bypass net_memif0,role=server,...):
#   dpd connects whenever a server appears, and again after it leaves.
#   DPD_OFFLOAD=off: the port's checksum (and so segmentation) offloads off.
#   DPD_CONN_LOG=1: dpd writes its connection log ([log] connections) to
#   DIR/log/connections.log, as nginx's access log with PEER_ACCESS_LOG=1.
#   DPD_MTU=N: the port's MTU (memif only: both ends are DPDK processes;
#   above 1500, memif buffers of 16 KiB so that a frame is one descriptor).
#   scripts/peers/peers.sh targets NAME DIR     print dpbench --target specs
#
# DIR holds certificates (made if missing), configs, pages, logs and pidfiles.
#   LAB_NET=10.77.0  DUT_CORE=1  CLIENT_CORE=0  PEER_ACCESS_LOG=1 (nginx logs
#   every request with $ssl_session_reused, for the trust tests)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:?usage: peers.sh start|stop|targets NAME DIR [peers...]}
name=${2:?NAME}
dir=$(mkdir -p "${3:?DIR}" && cd "$3" && pwd)
shift 3 || true
peers=("$@")
[ ${#peers[@]} -eq 0 ] && peers=(nginx haproxy stunnel)
net=${LAB_NET:-10.77.0}
vip=$net.1
dut_core=${DUT_CORE:-1}
cli_core=${CLIENT_CORE:-0}
ns=$name-dut
run=$dir/run
conf=$dir/conf
www=$dir/www
log=$dir/log

dpd_port=${DPD_PORT:-af_packet}
tap_net=${LAB_TAP_NET:-10.78.0}
# memif's buffer size for DPD_MTU: its default (2 KiB) takes a 1500 frame.
memif_bsize() { [ "${DPD_MTU:-1500}" -gt 1500 ] && echo ",bsize=16384"; true; }
if [ "${DPD_MTU:-1500}" != 1500 ] && [ "$dpd_port" != memif ]; then
    echo "peers: DPD_MTU is for DPD_PORT=memif (the kernel peers' links stay at 1500)" >&2
    exit 1
fi
case "$dpd_port" in
    af_packet) dpd_ip=$net.100; dpd_device="net_af_packet0,iface=veth-dut"; dpd_gateway= ;;
    af_xdp) dpd_ip=$net.100; dpd_device="net_af_xdp0,iface=veth-dut"; dpd_gateway= ;;
    vnet_tap) dpd_ip=$tap_net.1; dpd_device="vnet_tap,iface=tap-cli,netns=$name-cli"; dpd_gateway=$tap_net.2 ;;
    memif)
        dpd_ip=${MEMIF_NET:-10.79.0}.1; dpd_gateway=
        case "${DPD_MEMIF:-server}" in
            server) dpd_device="net_memif0,role=server,socket=$run/memif.sock,socket-abstract=no$(memif_bsize)" ;;
            client) dpd_device="net_memif0,role=client,socket=$run/memif.sock,socket-abstract=no,zero-copy=yes" ;;
            *) echo "peers: DPD_MEMIF must be server or client" >&2; exit 1 ;;
        esac ;;
    *) echo "peers: DPD_PORT must be af_packet, af_xdp, vnet_tap or memif" >&2; exit 1 ;;
esac
root=$(cd "$here/../.." && pwd)
dpd_bin=${DPD_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/dpd}
dpctl_bin=${DPCTL_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/dpctl}

die() { echo "peers: $*" >&2; exit 1; }
in_ns() { ip netns exec "$ns" "$@"; }

need() {
    for b in "$@"; do
        command -v "$b" >/dev/null 2>&1 || die "$b is not installed (run scripts/setup.sh)"
    done
}

pages() {
    for i in 1 2 3 4; do
        d=$www/rip-test-$i
        mkdir -p "$d"
        head -c 64 /dev/zero | tr '\0' 'x' > "$d/64b"
        head -c 1024 /dev/zero | tr '\0' 'x' > "$d/1k"
        head -c 256000 /dev/zero | tr '\0' 'x' > "$d/250k"
        head -c 1048576 /dev/zero | tr '\0' 'x' > "$d/1m"
        head -c 2097152 /dev/zero | tr '\0' 'x' > "$d/2m"
        # The loadbalancer.org page: 107 bytes, naming its server.
        body="<html><head><title>rip-test-$i</title></head><body>You are viewing rip-test-$i</body></html>"
        printf '%s' "$body" | head -c 107 > "$d/rip.html"
        pad=$((107 - $(wc -c < "$d/rip.html")))
        [ $pad -gt 0 ] && head -c $pad /dev/zero | tr '\0' '\n' >> "$d/rip.html"
    done
}

openssl_conf() {
    cat > "$conf/openssl.cnf" <<EOC
openssl_conf = openssl_init
[openssl_init]
ssl_conf = ssl_sect
[ssl_sect]
system_default = system_default_sect
[system_default_sect]
NumTickets = 0
EOC
}

backend_conf() {
    cat > "$conf/backend.conf" <<EOC
worker_processes 1;
pid $run/backend.pid;
error_log $log/backend.error.log warn;
worker_rlimit_nofile 20000;
events { worker_connections 9000; }
http {
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    server { listen 127.0.0.1:8081 reuseport backlog=8192; root $www/rip-test-1; }
    server { listen 127.0.0.1:8082 backlog=8192; root $www/rip-test-2; }
    server { listen 127.0.0.1:8083 backlog=8192; root $www/rip-test-3; }
    server { listen 127.0.0.1:8084 backlog=8192; root $www/rip-test-4; }
    server { listen $vip:8090 backlog=8192; root $www/rip-test-1; }
}
EOC
}

nginx_conf() {
    local alog="access_log off;"
    if [ "${PEER_ACCESS_LOG:-0}" = 1 ]; then
        alog="log_format trust '\$connection \$connection_requests \$ssl_protocol \$ssl_session_reused \$status \$body_bytes_sent \$request_uri'; access_log $log/nginx.access.log trust;"
    fi
    cat > "$conf/nginx.conf" <<EOC
worker_processes 1;
pid $run/nginx.pid;
error_log $log/nginx.error.log warn;
worker_rlimit_nofile 20000;
events { worker_connections 9000; }
http {
    $alog
    default_type application/octet-stream;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    ssl_session_cache off;
    ssl_session_tickets off;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256;
    upstream pool {
        least_conn;
        server 127.0.0.1:8081; server 127.0.0.1:8082; server 127.0.0.1:8083; server 127.0.0.1:8084;
        keepalive 64;
    }
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_buffering on;
    server { listen $vip:4431 ssl backlog=8192; ssl_certificate $dir/rsa2048.crt; ssl_certificate_key $dir/rsa2048.key; location / { proxy_pass http://pool; }
             # Rate-limited pages: the cross-check against h2load (neither client CPU-bound).
             location /slow/ { limit_rate 8m; proxy_pass http://pool/; } }
    server { listen $vip:4432 ssl backlog=8192; ssl_certificate $dir/p256.crt; ssl_certificate_key $dir/p256.key; location / { proxy_pass http://pool; } }
    server { listen $vip:4433 ssl backlog=8192; ssl_certificate $dir/p384.crt; ssl_certificate_key $dir/p384.key; location / { proxy_pass http://pool; } }
    server { listen $vip:8001 backlog=8192; location / { proxy_pass http://pool; } }
}
# Trust test only: TLS 1.2 with a session cache, so resumption shows in the log.
EOC
    # A separate nginx for 4439 would cost a second process; instead a server
    # block in the same worker with its own cache (cache settings are per server).
    sed -i '$d' "$conf/nginx.conf"
    sed -i '$d' "$conf/nginx.conf"
    cat >> "$conf/nginx.conf" <<EOC
    server { listen $vip:4439 ssl; ssl_protocols TLSv1.2; ssl_session_cache shared:reuse:1m; ssl_certificate $dir/p256.crt; ssl_certificate_key $dir/p256.key; location / { proxy_pass http://pool; } }
}
EOC
}

haproxy_conf() {
    cat > "$conf/haproxy.cfg" <<EOC
global
    nbthread 1
    maxconn 9000
    pidfile $run/haproxy.pid
    daemon
    tune.ssl.cachesize 0
    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets
    ssl-default-bind-ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
    maxconn 9000
    http-reuse safe
backend pool
    balance leastconn
    server rip-test-1 127.0.0.1:8081 weight 100
    server rip-test-2 127.0.0.1:8082 weight 100
    server rip-test-3 127.0.0.1:8083 weight 100
    server rip-test-4 127.0.0.1:8084 weight 100
frontend tls
    bind $vip:4441 ssl crt $dir/rsa2048.pem
    bind $vip:4442 ssl crt $dir/p256.pem
    bind $vip:4443 ssl crt $dir/p384.pem
    bind $vip:8002
    default_backend pool
EOC
    # stunnel's cleartext side: HAProxy balancing to the same pool.
    sed -e "s#$run/haproxy.pid#$run/haproxy-clear.pid#" \
        -e '/^frontend tls/,$d' "$conf/haproxy.cfg" > "$conf/haproxy-clear.cfg"
    cat >> "$conf/haproxy-clear.cfg" <<EOC
frontend clear
    bind 127.0.0.1:8080
    bind $vip:8003
    default_backend pool
EOC
}

stunnel_conf() {
    cat > "$conf/stunnel.conf" <<EOC
foreground = no
pid = $run/stunnel.pid
output = $log/stunnel.log
debug = 3
options = NO_TICKET
sessionCacheSize = 1
sessionCacheTimeout = 1
ciphers = ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256
sslVersionMin = TLSv1.2
[rsa2048]
accept = $vip:4451
connect = 127.0.0.1:8080
cert = $dir/rsa2048.crt
key = $dir/rsa2048.key
[p256]
accept = $vip:4452
connect = 127.0.0.1:8080
cert = $dir/p256.crt
key = $dir/p256.key
[p384]
accept = $vip:4453
connect = 127.0.0.1:8080
cert = $dir/p384.crt
key = $dir/p384.key
EOC
}

wait_pid() {
    for _ in $(seq 50); do
        [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null && return 0
        sleep 0.1
    done
    die "$2 did not start (see $log)"
}

stop_pidfile() {
    local f=$1
    [ -s "$f" ] || return 0
    local pid
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
        # A dpd that dpbench held stopped (pause=, an interrupted run)
        # takes SIGTERM only once it runs again.
        kill -CONT "$pid" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

start() {
    ip netns list | grep -qw "$ns" || die "namespace $ns missing: run scripts/bench-lab.sh up $name"
    mkdir -p "$run" "$conf" "$www" "$log"
    "$here/certs.sh" "$dir" >/dev/null
    pages
    openssl_conf
    export OPENSSL_CONF=$conf/openssl.cnf
    need nginx taskset
    backend_conf
    in_ns taskset -c "$cli_core" nginx -c "$conf/backend.conf" -g "error_log $log/backend.error.log warn;" 2>>"$log/start.log" || die "backend nginx failed (see $log)"
    wait_pid "$run/backend.pid" backend
    for p in "${peers[@]}"; do
        case $p in
        nginx)
            nginx_conf
            in_ns taskset -c "$dut_core" nginx -c "$conf/nginx.conf" 2>>"$log/start.log" || die "nginx failed (see $log)"
            wait_pid "$run/nginx.pid" nginx ;;
        haproxy)
            need haproxy
            haproxy_conf
            in_ns taskset -c "$dut_core" haproxy -f "$conf/haproxy.cfg" 2>>"$log/start.log" || die "haproxy failed (see $log)"
            wait_pid "$run/haproxy.pid" haproxy ;;
        stunnel)
            need stunnel4 haproxy
            [ -f "$conf/haproxy-clear.cfg" ] || haproxy_conf
            in_ns taskset -c "$dut_core" haproxy -f "$conf/haproxy-clear.cfg" 2>>"$log/start.log" || die "haproxy-clear failed (see $log)"
            wait_pid "$run/haproxy-clear.pid" haproxy-clear
            stunnel_conf
            in_ns taskset -c "$dut_core" stunnel4 "$conf/stunnel.conf" 2>>"$log/start.log" || die "stunnel failed (see $log)"
            wait_pid "$run/stunnel.pid" stunnel ;;
        dpd|dpd-proxy)
            if [ "$p" = dpd-proxy ]; then
                # dpd reaches its pool over the veth: a backend nginx like the
                # kernel peers' one, in the client namespace on NET.2, pinned to
                # the client core (it stands for other machines).
                sed -e "s/127.0.0.1:/$net.2:/" -e "s/ reuseport//" -e "/:8090/d" \
                    -e "s#$run/backend.pid#$run/backend-cli.pid#" "$conf/backend.conf" > "$conf/backend-cli.conf"
                ip netns exec "$name-cli" taskset -c "$cli_core" nginx -c "$conf/backend-cli.conf" 2>>"$log/start.log" \
                    || die "client-side backend nginx failed (see $log)"
                wait_pid "$run/backend-cli.pid" backend-cli
            fi
            [ -s "$run/dpd.pid" ] && continue
            [ -x "$dpd_bin" ] || die "dpd not built ($dpd_bin): cargo build --release -p dataplane -p control"
            if [ "$dpd_port" = vnet_tap ]; then
                LAB_TAP_NET=$tap_net "$root/scripts/lab.sh" tap on "$name" >/dev/null
                # The client stack's receive work on the client core (RPS), as
                # bench-lab.sh does for veth-cli.
                ip netns exec "$name-cli" sh -c "printf '%x' $((1 << cli_core)) > /sys/class/net/tap-cli/queues/rx-0/rps_cpus"
            fi
            # A memif server binds its socket afresh (a stale one fails it);
            # a client waits for its server's.
            [ "$dpd_port" = memif ] && rm -f "$run/memif.sock"
            # The pool lives on the veth: not reachable over memif.
            proxy_section=
            if [ "$dpd_port" != memif ]; then
                proxy_section=$(cat <<EOS
# Peer "dpd-proxy": the same TLS termination with the cleartext forwarded to
# the rip-test pool (SSL offload, as the kernel peers do), on 4471-4473/8071.
[[pool]]
name = "rip"
balance = "weighted_least_conn"
members = [{ addr = "$net.2:8081" }, { addr = "$net.2:8082" }, { addr = "$net.2:8083" }, { addr = "$net.2:8084" }]

[[vip]]
name = "proxy-http"
listen = "$dpd_ip:8071"
pool = "rip"

[[vip]]
name = "proxy-rsa2048"
listen = "$dpd_ip:4471"
pool = "rip"
certs = [{ cert = "$dir/rsa2048.crt", key = "$dir/rsa2048.key" }]

[[vip]]
name = "proxy-p256"
listen = "$dpd_ip:4472"
pool = "rip"
certs = [{ cert = "$dir/p256.crt", key = "$dir/p256.key" }]

[[vip]]
name = "proxy-p384"
listen = "$dpd_ip:4473"
pool = "rip"
certs = [{ cert = "$dir/p384.crt", key = "$dir/p384.key" }]
EOS
)
            fi
            cat > "$conf/dpd.toml" <<EOT
# tlsdp on the bench lab: the DUT core, the port DPD_PORT names (AF_PACKET on
# veth-dut beside the kernel peers by default), a short sleep when idle.
# That alone does not leave the core to the kernel peers (an idle dpd took
# a quarter of nginx's CPS): dpbench stops it while they are measured
# (its target's pause=).
[eal]
lcores = [$dut_core]
idle_sleep_us = 50

[[port]]
name = "lab"
device = "$dpd_device"
address = "$dpd_ip/24"
$([ -n "$dpd_gateway" ] && echo "gateway = \"$dpd_gateway\"")
$([ "${DPD_OFFLOAD:-on}" = off ] && echo "checksum_offload = false")
mtu = ${DPD_MTU:-1500}

[[vip]]
name = "http"
listen = "$dpd_ip:80"
respond = "builtin"

# One TLS VIP per key type, as the other peers have one port per key type.
[[vip]]
name = "tls-rsa2048"
listen = "$dpd_ip:4461"
respond = "builtin"
certs = [{ cert = "$dir/rsa2048.crt", key = "$dir/rsa2048.key" }]

[[vip]]
name = "tls-p256"
listen = "$dpd_ip:4462"
respond = "builtin"
certs = [{ cert = "$dir/p256.crt", key = "$dir/p256.key" }]

[[vip]]
name = "tls-p384"
listen = "$dpd_ip:4463"
respond = "builtin"
certs = [{ cert = "$dir/p384.crt", key = "$dir/p384.key" }]

$proxy_section
$(if [ "${DPD_TCP:-}" != defaults ]; then printf '[tcp]\nmax_connections = 1000000\nmax_half_open = 65536\n'; fi)

[control]
socket = "$run/dpd.sock"
$(if [ "${DPD_CONN_LOG:-}" = 1 ]; then printf '\n[log]\nconnections = "%s"\n' "$log/connections.log"; fi)
EOT
            # Not through in_ns: $! must be dpd itself (ip netns exec execs it),
            # not a subshell, so that stop can end it.
            ip netns exec "$ns" "$dpd_bin" --config "$conf/dpd.toml" >"$log/dpd.log" 2>&1 &
            echo $! > "$run/dpd.pid"
            for _ in $(seq 100); do [ -S "$run/dpd.sock" ] && break; sleep 0.1; done
            [ -S "$run/dpd.sock" ] || die "dpd did not start (see $log/dpd.log)" ;;
        *) die "unknown peer $p" ;;
        esac
    done
    echo "peers up in $ns: backend ${peers[*]}"
}

stop() {
    for f in dpd stunnel haproxy-clear haproxy nginx backend backend-cli; do
        stop_pidfile "$run/$f.pid"
    done
    echo "peers down"
}

targets() {
    for p in "${peers[@]}"; do
        case $p in
        nginx) echo "name=nginx,host=$vip,rsa2048=4431,p256=4432,p384=4433,http=8001,pidfile=$run/nginx.pid,core=$dut_core" ;;
        haproxy) echo "name=haproxy,host=$vip,rsa2048=4441,p256=4442,p384=4443,http=8002,pidfile=$run/haproxy.pid,core=$dut_core" ;;
        stunnel) echo "name=stunnel,host=$vip,rsa2048=4451,p256=4452,p384=4453,http=8003,pidfile=$run/stunnel.pid+$run/haproxy-clear.pid,core=$dut_core" ;;
        backend) echo "name=backend,host=$vip,http=8090,pidfile=$run/backend.pid,core=$cli_core" ;;
        dpd) echo "name=dpd,host=$dpd_ip,rsa2048=4461,p256=4462,p384=4463,http=80,core=$dut_core,pause=$run/dpd.pid,busy=cmd:$dpctl_bin --socket $run/dpd.sock stats --busy-seconds" ;;
        dpd-proxy) echo "name=dpd-proxy,host=$dpd_ip,rsa2048=4471,p256=4472,p384=4473,http=8071,core=$dut_core,pause=$run/dpd.pid,busy=cmd:$dpctl_bin --socket $run/dpd.sock stats --busy-seconds" ;;
        esac
    done
}

case "$cmd" in
    start) start ;;
    stop) stop ;;
    targets) targets ;;
    *) die "usage: peers.sh start|stop|targets NAME DIR [peers...]" ;;
esac
