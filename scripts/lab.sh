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
#   scripts/lab.sh cluster up|down [NAME]   (NAME defaults to "tlsc")
#        a routed lab: N dpd nodes announce their VIPs over BGP (BIRD) to a
#        router that spreads the clients' traffic over them with ECMP.
#
#          NAME-cli  cli0   10.80.0.2/24 + 10.80.0.10-73 (client sources),
#                           fd00:80::2/64; default via 10.80.0.1, fd00:80::1
#          NAME-rtr  rcli   10.80.0.1/24, fd00:80::1/64
#                    rbgp$i 10.81.$i.1/24  BGP + BFD with node i (IPv4 and
#                                          IPv6 routes over one session)
#                    rdata$i 10.82.$i.1/24, fd00:82:$i::1/64: data link to node i
#                    BIRD AS 65000 (rtr.conf, rtr.ctl); kernel ECMP, L4 hash
#          NAME-n$i  bgp0   10.81.$i.2/24  BIRD AS 65001 (n$i.conf, n$i.ctl)
#                    dp0    (no address)   dpd attaches here (af_packet) and
#                                          owns 10.82.$i.2 and fd00:82:$i::2
#                                          in userspace
#
#        dpd creates the tap `tlsdp-vips` in its node's namespace and puts each
#        VIP it serves on it as a /32 or /128; the node's BIRD announces those
#        with next hop 10.82.$i.2. The tap dies with dpd, and so do its routes.
#        Configs, control sockets, pid files and logs: /run/tlsdp-lab/NAME/.
#        Look with: birdc -s /run/tlsdp-lab/NAME/rtr.ctl show route
#                   ip -n NAME-rtr route
#
#   LAB_NODES=3          cluster: how many nodes (1-8)
#   LAB_ECMP=hash        cluster: "hash" puts BIRD's multipath routes in the
#                        router's main table (plain hash-threshold ECMP: a node
#                        leaving or joining also moves flows between nodes
#                        that stay). "resilient" has BIRD write table 100 and
#                        scripts/cluster/ecmp-sync.py mirror it into resilient
#                        next-hop groups in main (flows of the nodes that stay
#                        keep their node).
#   LAB_PIN=off          cluster: "on" makes the router keep each established
#                        flow on the node that took its SYN (conntrack marks
#                        and a routing table per node), as an L4 load-balancing
#                        tier or a flow-aware router does: a withdrawn node
#                        then keeps its open connections while new flows go
#                        elsewhere. Plain routers do not (docs/cluster.md).
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
    cluster) mode=${2:?usage: lab.sh cluster up|down [NAME]}; name=${3:-tlsc} ;;
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

# ---- cluster ---------------------------------------------------------------

run_root=/run/tlsdp-lab

has_carrier() { # NS IFACE
    [[ $(ip -n "$1" link show dev "$2") == *LOWER_UP* ]]
}

wait_carrier() { # NS IFACE
    for _ in $(seq 50); do
        has_carrier "$1" "$2" && return 0
        sleep 0.1
    done
    echo "lab.sh: $2 in $1 has no carrier" >&2
}

# Running, not a zombie (a daemonised BIRD's parent is PID 1, which may take
# its time to reap it).
alive() { # PID
    local state
    state=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

# Stops the process a pid file names, if it is still ours: its command line
# must mention this lab's run directory (a stale pid file never kills some
# unrelated process that got the pid since). TERM, up to 5 s, then KILL.
stop_pidfile() { # PIDFILE RUNDIR
    local pid cmdline=""
    [ -s "$1" ] || { rm -f "$1"; return 0; }
    pid=$(tr -dc 0-9 <"$1")
    [ -n "$pid" ] && cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" || true)
    if [ -n "$pid" ] && [[ $cmdline == *"$2/"* ]]; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do
            alive "$pid" || break
            sleep 0.1
        done
        if alive "$pid"; then
            echo "lab.sh: pid $pid ($1) ignored TERM; killing it" >&2
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.1
        fi
    fi
    rm -f "$1"
}

# The router's BIRD: one eBGP session (+ BFD) per node; every route learnt
# goes to the kernel, equal ones merged into one multipath route.
cluster_rtr_conf() { # NODES RUNDIR ECMP
    local nodes=$1 run=$2 ecmp=$3 i table=""
    if [ "$ecmp" = resilient ]; then
        table="
    kernel table 100;       # scripts/cluster/ecmp-sync.py mirrors it into main"
    fi
    cat <<EOF
# Generated by scripts/lab.sh cluster up $name: the router (AS 65000).
log "$run/rtr.log" all;
debug protocols { states };   # session ups and downs in the log
router id 10.81.0.1;

protocol device {
    scan time 1;
}

protocol bfd {
    interface "rbgp*" {
        interval 100 ms;
        multiplier 3;
    };
}

template bgp node {
    local as 65000;
    bfd on;
    hold time 3;
    connect delay time 1;
    connect retry time 1;
    error wait time 1, 5;
    ipv4 {
        import all;
        export none;
    };
    ipv6 {                  # IPv6 VIPs over the same session (MP-BGP)
        import all;
        export none;
    };
}
EOF
    for i in $(seq "$nodes"); do
        cat <<EOF

protocol bgp node$i from node {
    local 10.81.$i.1 as 65000;
    neighbor 10.81.$i.2 as 65001;
}
EOF
    done
    cat <<EOF

protocol kernel {
    merge paths on;         # equal routes from several nodes: one ECMP route$table
    ipv4 {
        import none;
        export where source = RTS_BGP;
    };
}

protocol kernel kernel6 {   # IPv6 the same way
    merge paths on;$table
    ipv6 {
        import none;
        export where source = RTS_BGP;
    };
}
EOF
}

# A node's BIRD: what dpd puts on tlsdp-vips goes to the router, with the
# node's data address (dpd's, on dp0) as next hop.
cluster_node_conf() { # I RUNDIR
    local i=$1 run=$2
    cat <<EOF
# Generated by scripts/lab.sh cluster up $name: node $i (AS 65001).
log "$run/n$i.log" all;
debug protocols { states };   # session ups and downs in the log
router id 10.81.$i.2;

protocol device {
    scan time 1;
}

# dpd's tap: each VIP it can serve as a /32 or /128. The tap and its
# addresses go away with dpd, and so do these routes.
protocol direct vips {
    ipv4;
    ipv6;
    interface "tlsdp-vips";
}

protocol bfd {
    interface "bgp0" {
        interval 100 ms;
        multiplier 3;
    };
}

protocol bgp rtr {       # "router" is a keyword in BIRD
    local 10.81.$i.2 as 65001;
    neighbor 10.81.$i.1 as 65000;
    bfd on;
    hold time 3;
    connect delay time 1;
    connect retry time 1;
    error wait time 1, 5;
    ipv4 {
        import none;
        export where proto = "vips";
        # A direct route has no gateway, so BIRD announces its own address
        # as next hop: this one, dpd's, instead of bgp0's.
        next hop address 10.82.$i.2;
    };
    ipv6 {
        import none;
        export where proto = "vips";
        next hop address fd00:82:$i::2;   # dpd's IPv6 address on dp0
    };
}
EOF
}

start_bird() { # NS NAME RUNDIR
    local ns=$1 n=$2 run=$3
    bird -p -c "$run/$n.conf"
    ip netns exec "$ns" bird -c "$run/$n.conf" -s "$run/$n.ctl" -P "$run/$n.pid"
    for _ in $(seq 50); do
        [ -s "$run/$n.pid" ] && [ -S "$run/$n.ctl" ] && return 0
        sleep 0.1
    done
    echo "lab.sh: BIRD $n in $ns did not start (see $run/$n.log)" >&2
    return 1
}

# LAB_PIN=on: the router remembers which node each flow's SYN went to (the
# conntrack mark, set from the output interface) and sends the flow's later
# packets from the clients there (fwmark -> table 200+i), whatever the
# routes say by then.
cluster_pin() { # NODES
    local nodes=$1 i elements=""
    for i in $(seq "$nodes"); do
        elements+="\"rdata$i\" : $i, "
        ip -n "$rtr" route add default via "10.82.$i.2" dev "rdata$i" table $((200 + i))
        ip -n "$rtr" rule add fwmark "$i" lookup $((200 + i)) pref 100
    done
    ip netns exec "$rtr" nft -f - <<EOF
table ip tlsdp_pin {
    map node_of_oif { type ifname : mark; elements = { ${elements%, } } }
    chain pre {
        type filter hook prerouting priority mangle; policy accept;
        iifname "rcli" ct state established ct mark != 0 meta mark set ct mark
    }
    chain post {
        type filter hook postrouting priority mangle; policy accept;
        ct state new ct mark 0 ct mark set oifname map @node_of_oif
    }
}
EOF
}

cluster_up() {
    local nodes=${LAB_NODES:-3} ecmp=${LAB_ECMP:-hash}
    local run=$run_root/$name rtr=$name-rtr ccli=$name-cli here i ns a up=0
    here=$(cd "$(dirname "$0")" && pwd)
    case "$nodes" in
        [1-8]) ;;
        *) echo "lab.sh: LAB_NODES must be 1-8 (got $nodes)" >&2; exit 2 ;;
    esac
    case "$ecmp" in
        hash|resilient) ;;
        *) echo "lab.sh: LAB_ECMP must be hash or resilient (got $ecmp)" >&2; exit 2 ;;
    esac
    command -v bird >/dev/null || { echo "lab.sh: bird (BIRD 2) is not installed" >&2; exit 1; }
    cluster_down 2>/dev/null || true
    mkdir -p "$run"

    ip netns add "$ccli"
    ip netns add "$rtr"
    ip -n "$ccli" link set lo up
    ip -n "$rtr" link set lo up
    # Before any interface exists, so that each inherits "default".
    ip netns exec "$rtr" sysctl -qw net.ipv4.ip_forward=1 \
        net.ipv4.fib_multipath_hash_policy=1 \
        net.ipv6.conf.all.forwarding=1 net.ipv6.conf.default.forwarding=1 \
        net.ipv6.fib_multipath_hash_policy=1 \
        net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0

    # Clients: 65 IPv4 source addresses and one IPv6, full checksums.
    ip link add name cli0 netns "$ccli" type veth peer name rcli netns "$rtr"
    ip -n "$ccli" addr add 10.80.0.2/24 dev cli0
    ip -n "$ccli" addr add fd00:80::2/64 dev cli0 nodad
    for a in $(seq 10 73); do echo "addr add 10.80.0.$a/24 dev cli0"; done |
        ip -n "$ccli" -batch -
    ip netns exec "$ccli" ethtool -K cli0 tx off >/dev/null
    ip -n "$ccli" link set cli0 up
    ip -n "$rtr" addr add 10.80.0.1/24 dev rcli
    ip -n "$rtr" addr add fd00:80::1/64 dev rcli nodad
    ip netns exec "$rtr" ethtool -K rcli tx off gro off >/dev/null
    ip -n "$rtr" link set rcli up
    ip -n "$ccli" route add default via 10.80.0.1
    ip -n "$ccli" -6 route add default via fd00:80::1

    # Nodes: a BGP link and a data link each.
    for i in $(seq "$nodes"); do
        ns=$name-n$i
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip link add name "rbgp$i" netns "$rtr" type veth peer name bgp0 netns "$ns"
        ip link add name "rdata$i" netns "$rtr" type veth peer name dp0 netns "$ns"
        ip -n "$rtr" addr add "10.81.$i.1/24" dev "rbgp$i"
        ip -n "$ns" addr add "10.81.$i.2/24" dev bgp0
        # dp0 is dpd's: no kernel address on the node's side.
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.dp0.disable_ipv6=1
        ip -n "$rtr" addr add "10.82.$i.1/24" dev "rdata$i"
        ip -n "$rtr" addr add "fd00:82:$i::1/64" dev "rdata$i" nodad
        ip netns exec "$rtr" ethtool -K "rbgp$i" tx off >/dev/null
        ip netns exec "$rtr" ethtool -K "rdata$i" tx off gro off >/dev/null
        ip netns exec "$rtr" sysctl -qw "net.ipv4.conf.rbgp$i.rp_filter=0" \
            "net.ipv4.conf.rdata$i.rp_filter=0"
        ip -n "$ns" link set bgp0 up
        ip -n "$ns" link set dp0 up
        ip -n "$rtr" link set "rbgp$i" up
        ip -n "$rtr" link set "rdata$i" up
    done
    ip netns exec "$rtr" sysctl -qw net.ipv4.conf.rcli.rp_filter=0 net.ipv4.conf.lo.rp_filter=0

    # veth carrier comes up asynchronously.
    wait_carrier "$ccli" cli0
    for i in $(seq "$nodes"); do
        wait_carrier "$rtr" "rbgp$i"
        wait_carrier "$rtr" "rdata$i"
    done

    cluster_rtr_conf "$nodes" "$run" "$ecmp" >"$run/rtr.conf"
    for i in $(seq "$nodes"); do
        cluster_node_conf "$i" "$run" >"$run/n$i.conf"
    done

    if [ "${LAB_PIN:-off}" = on ]; then
        cluster_pin "$nodes"
    fi

    if [ "$ecmp" = resilient ]; then
        # Pinned flows do not care which bucket they hash to: buckets may
        # move at once to rebalance (a node back from a drain gets its share).
        local timers=()
        [ "${LAB_PIN:-off}" = on ] && timers=(--idle-timer 1 --unbalanced-timer 2)
        ip netns exec "$rtr" setsid python3 "$here/cluster/ecmp-sync.py" "${timers[@]}" \
            --table 100 --pidfile "$run/ecmp-sync.pid" --log "$run/ecmp-sync.log" \
            </dev/null >/dev/null 2>>"$run/ecmp-sync.log" &
        for _ in $(seq 30); do
            [ -s "$run/ecmp-sync.pid" ] && break
            sleep 0.1
        done
        if [ ! -s "$run/ecmp-sync.pid" ]; then
            echo "lab.sh: ecmp-sync did not start (see $run/ecmp-sync.log)" >&2
            exit 1
        fi
    fi

    start_bird "$rtr" rtr "$run"
    for i in $(seq "$nodes"); do
        start_bird "$name-n$i" "n$i" "$run"
    done

    # Sessions come up within a second or two (connect delay 1 s).
    for _ in $(seq 100); do
        up=$(birdc -s "$run/rtr.ctl" show protocols 2>/dev/null | grep -c '^node[0-9].*Established' || true)
        [ "$up" -eq "$nodes" ] && break
        sleep 0.1
    done
    [ "$up" -eq "$nodes" ] || echo "lab.sh: only $up of $nodes BGP sessions are up yet (see $run/*.log)" >&2

    echo "cluster $name up: $nodes nodes, ECMP $ecmp, BGP sessions established $up/$nodes"
    echo "  $ccli  cli0 10.80.0.2/24 (+ .10-.73), default via 10.80.0.1"
    echo "  $rtr  rcli 10.80.0.1/24, rbgp\$i 10.81.\$i.1/24, rdata\$i 10.82.\$i.1/24, BIRD AS 65000"
    for i in $(seq "$nodes"); do
        echo "  $name-n$i   bgp0 10.81.$i.2/24, dp0 for dpd (10.82.$i.2/24 via 10.82.$i.1), BIRD AS 65001"
    done
    echo "  dpd on node i: attach to dp0 in $name-n\$i, announce VIPs on the tap tlsdp-vips"
    echo "  $run: rtr|n\$i .conf .ctl .pid .log"
    echo "  birdc -s $run/rtr.ctl show protocols   (n\$i.ctl: node i)"
    echo "  birdc -s $run/rtr.ctl show route; ip -n $rtr route"
    if [ "$ecmp" = resilient ]; then
        echo "  BIRD -> table 100 -> ecmp-sync ($run/ecmp-sync.log) -> main: ip -n $rtr nexthop"
    fi
}

cluster_down() {
    local run=$run_root/$name ns f
    stop_pidfile "$run/ecmp-sync.pid" "$run"
    if [ -d "$run" ]; then
        for f in "$run"/*.pid; do
            [ -e "$f" ] && stop_pidfile "$f" "$run"
        done
    fi
    for ns in $(ip netns list | awk '{print $1}'); do
        case "$ns" in
            "$name-cli"|"$name-rtr"|"$name"-n[1-8]) ip netns del "$ns" ;;
        esac
    done
    rm -rf "$run"
    rmdir "$run_root" 2>/dev/null || true
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
    cluster)
        case "$mode" in
            up) cluster_up ;;
            down) cluster_down; echo "cluster $name down" ;;
            *) echo "usage: lab.sh cluster up|down [NAME]" >&2; exit 2 ;;
        esac ;;
    *) echo "usage: lab.sh up|down|peer on|off|tap on|off|cluster up|down [NAME]" >&2; exit 2 ;;
esac
