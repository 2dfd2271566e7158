#!/usr/bin/env bash
# dpbench's lab: scripts/lab.sh's two namespaces, with the DUT side given its
# kernel address (kernel peers), extra client source addresses, sysctls so
# TIME-WAIT never limits a run, and receive steering (RPS) so that softirq
# work of the DUT side lands on the DUT core.
#
#   scripts/bench-lab.sh up|down [NAME]      (NAME defaults to "bench")
#   LAB_NET=10.77.0   DUT_CORE=1   CLIENT_CORE=0   BENCH_SRC_COUNT=16
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:?usage: bench-lab.sh up|down [NAME]}
name=${2:-bench}
net=${LAB_NET:-10.77.0}
dut_core=${DUT_CORE:-1}
cli_core=${CLIENT_CORE:-0}
nsrc=${BENCH_SRC_COUNT:-16}
mask() { printf '%x' $((1 << $1)); }
case "$cmd" in
up)
    "$here/lab.sh" up "$name" >/dev/null
    "$here/lab.sh" peer on "$name"
    # Client source addresses .10 .. .10+N-1 (dpbench --src NET.10-LAST).
    for i in $(seq 10 $((10 + nsrc - 1))); do
        ip -n "$name-cli" addr add "$net.$i/24" dev veth-cli
    done
    for ns in "$name-cli" "$name-dut"; do
        ip netns exec "$ns" sysctl -qw net.ipv4.ip_local_port_range="1024 65000" \
            net.ipv4.tcp_tw_reuse=1 net.core.somaxconn=8192 net.ipv4.tcp_max_syn_backlog=8192
    done
    # Receive steering: the DUT side's veth and loopback (terminator <->
    # backend) on the DUT core, the client side's on the client core.
    ip netns exec "$name-dut" sh -c "echo $(mask "$dut_core") > /sys/class/net/veth-dut/queues/rx-0/rps_cpus; echo $(mask "$dut_core") > /sys/class/net/lo/queues/rx-0/rps_cpus"
    ip netns exec "$name-cli" sh -c "echo $(mask "$cli_core") > /sys/class/net/veth-cli/queues/rx-0/rps_cpus"
    echo "bench lab $name up: clients $net.2 and $net.10-$((10 + nsrc - 1)), DUT $net.1 (core $dut_core)"
    ;;
down)
    "$here/lab.sh" down "$name" >/dev/null
    echo "bench lab $name down"
    ;;
*) echo "usage: bench-lab.sh up|down [NAME]" >&2; exit 2 ;;
esac
