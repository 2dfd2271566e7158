#!/usr/bin/env bash
# The lab network: two network namespaces joined by one veth link.
#
#   NAME-cli  veth-cli  10.77.0.2/24   kernel clients (ping, curl, dpbench)
#   NAME-dut  veth-dut  (no address)   the device under test: `dpd` attaches to
#                                      veth-dut through net_af_packet/net_af_xdp
#                                      and owns 10.77.0.1 in userspace
#
#   scripts/lab.sh up   [NAME]   create (NAME defaults to "tlsdp")
#   scripts/lab.sh down [NAME]   remove
#   scripts/lab.sh peer on|off [NAME]
#        give veth-dut the kernel address 10.77.0.1/24 (for kernel peers such
#        as nginx); must be off while `dpd` owns the link, or the kernel answers
#        ARP and ICMP too
#
#   scripts/lab.sh tap on|off [NAME]
#        a persistent tap `tap-cli` with virtio-net headers in NAME-cli, with
#        the kernel address $LAB_TAP_NET.2/24: the kernel side of dpd's
#        offloading port (device = "vnet_tap,iface=tap-cli,netns=NAME-cli",
#        address $LAB_TAP_NET.1/24). It has no carrier until dpd attaches.
#
#   LAB_NET=10.77.0      the /24 used (tests pass their own to stay apart)
#   LAB_TAP_NET=10.78.0  the /24 of the tap link
#   LAB_TX_CSUM=off      checksum offload on the client side's veth. With "off"
#                        the kernel sends full checksums (we turn offload off so
#                        frames leaving the client carry complete TCP checksums);
#                        "on" keeps Linux's partial checksums.
set -euo pipefail

cmd=${1:-}
case "$cmd" in
    peer|tap) mode=${2:?usage: lab.sh $cmd on|off [NAME]}; name=${3:-tlsdp} ;;
    *) name=${2:-tlsdp} ;;
esac
net=${LAB_NET:-10.77.0}
cli="$name-cli"
dut="$name-dut"

up() {
    down 2>/dev/null || true
    ip netns add "$cli"
    ip netns add "$dut"
    ip link add name veth-cli netns "$cli" type veth peer name veth-dut netns "$dut"
    ip -n "$cli" link set lo up
    ip -n "$dut" link set lo up
    ip -n "$cli" addr add "$net.2/24" dev veth-cli
    ip -n "$cli" link set veth-cli up
    ip -n "$dut" link set veth-dut up
    # The DUT side carries no kernel address and no IPv6 (no kernel chatter).
    ip netns exec "$dut" sysctl -qw net.ipv6.conf.veth-dut.disable_ipv6=1
    ip netns exec "$cli" sysctl -qw net.ipv6.conf.veth-cli.disable_ipv6=1
    if [ "${LAB_TX_CSUM:-off}" = off ]; then
        ip netns exec "$cli" ethtool -K veth-cli tx off >/dev/null
    fi
    # veth carrier comes up asynchronously; wait so callers can send at once.
    for _ in $(seq 50); do
        ip -n "$cli" link show veth-cli | grep -q LOWER_UP && break
        sleep 0.1
    done
    echo "lab $name up: $cli/veth-cli $net.2/24 <-> $dut/veth-dut (DUT $net.1)"
}

tap() {
    local tap_net=${LAB_TAP_NET:-10.78.0}
    case "$mode" in
        on)
            ip -n "$cli" link del tap-cli 2>/dev/null || true
            ip -n "$cli" tuntap add dev tap-cli mode tap vnet_hdr
            ip netns exec "$cli" sysctl -qw net.ipv6.conf.tap-cli.disable_ipv6=1
            ip -n "$cli" addr add "$tap_net.2/24" dev tap-cli
            ip -n "$cli" link set tap-cli up
            echo "tap-cli in $cli: $tap_net.2/24 (dpd: vnet_tap,iface=tap-cli,netns=$cli at $tap_net.1)" ;;
        off) ip -n "$cli" link del tap-cli 2>/dev/null || true ;;
        *) echo "usage: lab.sh tap on|off [NAME]" >&2; exit 2 ;;
    esac
}

down() {
    ip netns del "$cli" 2>/dev/null || true
    ip netns del "$dut" 2>/dev/null || true
}

case "$cmd" in
    up) up ;;
    down) down; echo "lab $name down" ;;
    peer)
        case "$mode" in
            on) ip -n "$dut" addr replace "$net.1/24" dev veth-dut ;;
            off) ip -n "$dut" addr flush dev veth-dut ;;
            *) echo "usage: lab.sh peer on|off [NAME]" >&2; exit 2 ;;
        esac ;;
    tap) tap ;;
    *) echo "usage: lab.sh up|down|peer on|off|tap on|off [NAME]" >&2; exit 2 ;;
esac
