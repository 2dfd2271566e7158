#!/usr/bin/env bash
# Installs what tlsdp's build, tests and demo need on Debian 12 and reserves
# hugepages. Idempotent: safe to run again. Run as root.
#
#   TLSDP_HUGEPAGES=N   2 MiB hugepages to keep reserved (default 512 = 1 GiB)
#   TLSDP_SKIP_APT=1    do not touch packages (only hugepages)
set -euo pipefail

log() { printf 'setup: %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
    echo "setup: must run as root (it installs packages and reserves hugepages)" >&2
    exit 1
fi

PACKAGES=(
    # build: DPDK headers and libraries, bindgen's libclang, the C shim
    build-essential pkg-config libdpdk-dev dpdk libclang-dev clang libbpf-dev libxdp-dev libpcap-dev
    # lab and end-to-end tests: namespaces, veth, ARP/ICMP clients, drops
    iproute2 iputils-ping iputils-arping ethtool nftables tcpdump procps psmisc
    # TCP and TLS tests: a SYN flooder, a second TLS client, a TLS scanner
    # (curl, openssl and ab come with dpbench's list below)
    hping3 gnutls-bin testssl.sh python3-prometheus-client
    # cluster lab (scripts/lab.sh cluster): BGP routers announcing VIPs
    bird2
    # TCP conformance suite (tests/conformance/tcp_conformance.py): hand-built
    # segments, sent and parsed with scapy
    python3-scapy
    # the example service unit (examples/tlsdp.service), checked by
    # systemd-analyze verify
    systemd
    # dpbench: peer terminators, cleartext backend, cross-check clients, certificates
    nginx haproxy stunnel4 nghttp2-client apache2-utils wrk openssl curl util-linux
)

if [ "${TLSDP_SKIP_APT:-0}" != 1 ]; then
    missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        log "installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        log "packages present"
    fi
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found: install a Rust toolchain (rustup) first" >&2
    exit 1
fi

# Hugepages: DPDK works with --in-memory on hugepages; the hugetlbfs mount is
# what `dpd` and the hugepages crate use for named mappings.
want=${TLSDP_HUGEPAGES:-512}
have=$(cat /proc/sys/vm/nr_hugepages)
if [ "$have" -lt "$want" ]; then
    echo "$want" > /proc/sys/vm/nr_hugepages
    have=$(cat /proc/sys/vm/nr_hugepages)
    log "reserved $have 2 MiB hugepages (asked for $want)"
else
    log "$have 2 MiB hugepages reserved"
fi
if ! grep -qs ' /dev/hugepages hugetlbfs ' /proc/mounts; then
    mkdir -p /dev/hugepages
    mount -t hugetlbfs nodev /dev/hugepages
    log "mounted hugetlbfs on /dev/hugepages"
fi
