#!/usr/bin/env bash
# A guided tour of scale-out (docs/cluster.md) on the routed lab of
# `scripts/lab.sh cluster`: three dpd nodes announce the VIP 10.90.0.1 over
# BGP (BIRD) to a router that spreads the clients' flows over them with
# resilient ECMP next-hop groups (LAB_ECMP=resilient) and keeps each open
# flow on its node (LAB_PIN=on).
#
#   scripts/cluster-demo.sh [NAME]      (run as root; NAME defaults to "tlsdemo")
#
# Stages, each under a "== stage" heading with the real commands' output:
#   announce  the router's BIRD has three paths for 10.90.0.1/32, its kernel
#             one resilient next-hop group over 10.82.{1,2,3}.2
#   spread    60 curl requests from NAME-cli: all 200, every node takes some
#             (each node's tcp_accepted from `dpctl --json stats`)
#   drain     `dpctl drain --wait` on node 1: the router is left with two
#             next hops, 30 more requests all 200 and none reaches node 1;
#             `dpctl undrain`: three next hops again
#   failure   SIGKILL node 3's dpd: how long until the router's kernel stops
#             forwarding to 10.82.3.2; 30 more requests all 200
#
# Uses the binaries in target/release (it never builds them: run
# `cargo build --release --workspace --bins` first). Everything lives in the
# lab's namespaces NAME-cli, NAME-rtr, NAME-n1..3; configs, control sockets
# and logs in /run/tlsdp-lab/NAME/. On exit, however it ends, it stops the
# dpds it started (SIGTERM by PID, then SIGKILL after 10 s) and runs
# `scripts/lab.sh cluster down NAME`. It refuses to start if namespaces of a
# cluster NAME exist already (`scripts/lab.sh cluster down NAME` removes a
# leftover one). Exits non-zero, naming the stage, if an expectation fails.
# Takes about 10 s.
set -euo pipefail

name=${1:-tlsdemo}
root=$(cd "$(dirname "$0")/.." && pwd)
dpd_bin=$root/target/release/dpd
dpctl_bin=$root/target/release/dpctl
lab=$root/scripts/lab.sh
run=/run/tlsdp-lab/$name
cli=$name-cli
rtr=$name-rtr
vip=10.90.0.1
nodes=3

if [ ! -x "$dpd_bin" ] || [ ! -x "$dpctl_bin" ]; then
    echo "cluster-demo: $dpd_bin or $dpctl_bin is missing:" \
        "run cargo build --release --workspace --bins first" >&2
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "cluster-demo: run as root (it creates network namespaces)" >&2
    exit 1
fi
for tool in bird birdc curl python3 ip nft timeout; do
    command -v "$tool" >/dev/null || { echo "cluster-demo: $tool is not installed" >&2; exit 1; }
done
case "$name" in
    *[!A-Za-z0-9_-]* | "") echo "cluster-demo: NAME must be letters, digits, - or _" >&2; exit 2 ;;
esac
if ip netns list | awk '{print $1}' | grep -Eqx "$name-(cli|rtr|n[1-8])"; then
    echo "cluster-demo: a cluster $name exists already (scripts/lab.sh cluster down $name)" >&2
    exit 1
fi

declare -A dpd_pid=()   # node -> PID of the dpd this script started
stage=setup
cluster_made=no
failed=no
t_start=$(date +%s%N)

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# Running, not a zombie.
alive() { # PID
    local state
    state=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

cleanup() {
    local rc=$? i pid t lab_pids left
    trap - EXIT INT TERM
    set +e
    if [ "$failed" = yes ] && [ -d "$run" ]; then
        for i in $(seq "$nodes"); do
            [ -s "$run/dpd-n$i.log" ] || continue
            echo "--- last lines of $run/dpd-n$i.log" >&2
            tail -n 8 "$run/dpd-n$i.log" >&2
        done
    fi
    echo
    echo "== cleanup"
    for i in "${!dpd_pid[@]}"; do
        pid=${dpd_pid[$i]}
        alive "$pid" && kill -TERM "$pid" 2>/dev/null
    done
    for i in "${!dpd_pid[@]}"; do
        pid=${dpd_pid[$i]}
        for t in $(seq 100); do
            alive "$pid" || break
            sleep 0.1
        done
        if alive "$pid"; then
            echo "dpd on node $i (pid $pid) ignored SIGTERM for 10 s: SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null
        fi
        wait "$pid" 2>/dev/null
        echo "dpd on node $i (pid $pid) stopped"
    done
    if [ "$cluster_made" = yes ]; then
        # The lab's daemons (BIRD, ecmp-sync) are not this shell's children:
        # once lab.sh has stopped them, wait (up to 5 s) for init to reap them
        # too, so that nothing of this cluster is left when the demo returns.
        lab_pids=$(cat "$run"/*.pid 2>/dev/null | tr -dc '0-9\n')
        timeout 60 "$lab" cluster down "$name"
        for t in $(seq 50); do
            left=no
            for pid in $lab_pids; do
                [ -e "/proc/$pid" ] && left=yes
            done
            [ "$left" = no ] && break
            sleep 0.1
        done
    fi
    exit "$rc"
}

fail() {
    echo "cluster-demo: FAILED in stage '$stage': $*" >&2
    failed=yes
    exit 1
}

heading() {
    stage=$1
    printf '\n== %s\n' "$*"
}

# Prints the command, then runs it (bounded).
show() {
    echo "\$ $*"
    timeout 10 "$@" || fail "'$*' failed (exit $?)"
}

sock() { echo "$run/dpd-n$1.sock"; }

dpctl() { # NODE ARGS...
    local i=$1
    shift
    timeout 10 "$dpctl_bin" --socket "$(sock "$i")" "$@"
}

accepted() { # NODE
    dpctl "$1" --json stats | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d.get("stats", d)["total"]["tcp_accepted"])'
}

# BGP paths for the VIP in the router's BIRD (one line per node).
bird_paths() {
    timeout 5 birdc -s "$run/rtr.ctl" show route for "$vip/32" | grep -c '\[node' || true
}

# The gateways the router's kernel forwards the VIP to (sorted, one line),
# from a multipath route, one gateway or a next-hop group alike.
hops() {
    local route
    route=$(ip -n "$rtr" -4 route show "$vip" 2>/dev/null) || true
    if [[ $route =~ nhid\ ([0-9]+) ]]; then
        ip -n "$rtr" nexthop show 2>/dev/null | awk -v g="${BASH_REMATCH[1]}" '
            $1 == "id" {
                for (k = 3; k <= NF; k++) {
                    if ($k == "via") via[$2] = $(k + 1)
                    if ($k == "group") grp[$2] = $(k + 1)
                }
            }
            END {
                n = split(grp[g], m, "/")
                for (j = 1; j <= n; j++) {
                    sub(/,.*/, "", m[j])
                    if (m[j] in via) print via[m[j]]
                }
            }'
    else
        grep -o 'via [0-9.]*' <<<"$route" | awk '{print $2}'
    fi | sort | paste -sd ' ' -
}

node_hops() { # NODE...
    local i
    for i in "$@"; do echo "10.82.$i.2"; done | sort | paste -sd ' ' -
}

# Waits (polling every 10 ms, up to LIMIT s) until the router forwards the VIP
# to exactly WANT; fails the stage otherwise.
await_hops() { # LIMIT_S WANT
    local limit_ms=$(($1 * 1000)) want=$2 t0
    t0=$(now_ms)
    while [ "$(hops)" != "$want" ]; do
        if [ $(($(now_ms) - t0)) -gt "$limit_ms" ]; then
            fail "the router forwards $vip to [$(hops)], not [$want], after $1 s"
        fi
        sleep 0.01
    done
}

# N requests from the client, one after the other; prints the status codes
# seen and sets $ok to how many were 200.
requests() { # N
    local n=$1 i code codes=()
    ok=0
    for i in $(seq "$n"); do
        code=$(ip netns exec "$cli" curl -s -o /dev/null -m 3 --connect-timeout 2 \
            -w '%{http_code}' "http://$vip/") || true
        codes+=("${code:-none}")
        [ "$code" = 200 ] && ok=$((ok + 1))
    done
    echo "$n requests (ip netns exec $cli curl -s -o /dev/null -w '%{http_code}' http://$vip/):" \
        "$ok got 200"
    if [ "$ok" -ne "$n" ]; then
        printf '%s\n' "${codes[@]}" | sort | uniq -c | sed 's/^/  status /'
    fi
}

show_router() {
    show ip -n "$rtr" route show "$vip"
    show ip -n "$rtr" nexthop show
}

trap cleanup EXIT
trap 'echo "cluster-demo: interrupted in stage $stage" >&2; exit 130' INT
trap 'echo "cluster-demo: terminated in stage $stage" >&2; exit 143' TERM

# ---- setup -----------------------------------------------------------------
heading setup
cluster_made=yes
echo "\$ LAB_NODES=$nodes LAB_ECMP=resilient LAB_PIN=on scripts/lab.sh cluster up $name"
LAB_NODES=$nodes LAB_ECMP=resilient LAB_PIN=on timeout 60 "$lab" cluster up "$name" |
    sed -n '1p' || fail "scripts/lab.sh cluster up $name failed"
[ -d "$run" ] || fail "no $run after scripts/lab.sh cluster up"

for i in $(seq "$nodes"); do
    cat >"$run/dpd-n$i.toml" <<EOF
[eal]
lcores = [1]
idle_sleep_us = 50

[[port]]
name = "p0"
device = "net_af_packet0,iface=dp0"
address = "10.82.$i.2/24"
gateway = "10.82.$i.1"

[control]
socket = "$(sock "$i")"
metrics = ""

[routing]
withdraw_quiet_ms = 500

[[vip]]
name = "web"
listen = "$vip:80"
respond = "builtin"
EOF
    # `ip netns exec` execs dpd: $! is dpd's PID.
    ip netns exec "$name-n$i" "$dpd_bin" --config "$run/dpd-n$i.toml" \
        </dev/null >"$run/dpd-n$i.log" 2>&1 &
    dpd_pid[$i]=$!
done
for i in $(seq "$nodes"); do
    t0=$(now_ms)
    until dpctl "$i" status >/dev/null 2>&1; do
        alive "${dpd_pid[$i]}" || fail "dpd on node $i exited at start (see the log below)"
        [ $(($(now_ms) - t0)) -lt 30000 ] || fail "dpd on node $i not answering dpctl status after 30 s"
        sleep 0.1
    done
    echo "dpd on node $i: pid ${dpd_pid[$i]} ($(cat "/proc/${dpd_pid[$i]}/comm")), $(sock "$i"), log $run/dpd-n$i.log"
done
await_hops 20 "$(node_hops 1 2 3)"

# ---- announce --------------------------------------------------------------
heading announce
for i in $(seq "$nodes"); do
    echo "\$ dpctl --socket $(sock "$i") status   (service and routing lines)"
    dpctl "$i" status | grep -E '^(service|routing):' || fail "dpctl status on node $i"
done
show birdc -s "$run/rtr.ctl" show route for "$vip/32"
paths=$(bird_paths)
[ "$paths" -eq 3 ] || fail "the router's BIRD has $paths paths for $vip/32, not 3"
show_router
[[ $(ip -n "$rtr" nexthop show) == *"type resilient"* ]] ||
    fail "no resilient next-hop group on the router"
echo "-> 3 BGP paths; the kernel forwards $vip to: $(hops)"

# ---- spread ----------------------------------------------------------------
heading spread
requests 60
[ "$ok" -eq 60 ] || fail "$ok of 60 requests got 200"
total=0
for i in $(seq "$nodes"); do
    n=$(accepted "$i") || fail "dpctl --json stats on node $i"
    echo "node $i: tcp_accepted $n"
    total=$((total + n))
    [ "$n" -gt 0 ] || fail "node $i took none of the 60 connections"
done
echo "-> $total connections over $nodes nodes, every node took a share"

# ---- drain -----------------------------------------------------------------
heading drain
echo "\$ dpctl --socket $(sock 1) drain --wait"
drain_out=$(timeout 30 "$dpctl_bin" --socket "$(sock 1)" drain --wait) ||
    fail "dpctl drain --wait on node 1 failed or took over 30 s: $drain_out"
echo "$drain_out"
[[ $drain_out == *withdrawn* && $drain_out == *drained* ]] ||
    fail "dpctl drain --wait did not report withdrawn and drained"
await_hops 5 "$(node_hops 2 3)"
show birdc -s "$run/rtr.ctl" show route for "$vip/32"
paths=$(bird_paths)
[ "$paths" -eq 2 ] || fail "the router's BIRD has $paths paths for $vip/32 after the drain, not 2"
show_router
echo "-> node 1 withdrawn; the kernel forwards $vip to: $(hops)"
before=$(accepted 1)
requests 30
[ "$ok" -eq 30 ] || fail "$ok of 30 requests got 200 with node 1 drained"
after=$(accepted 1)
echo "node 1: tcp_accepted $before before, $after after"
[ "$after" -eq "$before" ] || fail "node 1 took $((after - before)) connections while drained"
for i in 2 3; do echo "node $i: tcp_accepted $(accepted "$i")"; done
echo "\$ dpctl --socket $(sock 1) undrain"
dpctl 1 undrain || fail "dpctl undrain on node 1"
await_hops 10 "$(node_hops 1 2 3)"
show_router
echo "-> node 1 announced again; the kernel forwards $vip to: $(hops)"

# ---- failure ---------------------------------------------------------------
heading failure
pid=${dpd_pid[3]}
echo "\$ kill -KILL $pid   (dpd on node 3)"
t0=$(now_ms)
kill -KILL "$pid"
# Reaped at once (dpd is this shell's child): no "Killed" job notice.
wait "$pid" 2>/dev/null || true
unset "dpd_pid[3]"
while [[ " $(hops) " == *" 10.82.3.2 "* ]]; do
    [ $(($(now_ms) - t0)) -lt 5000 ] || fail "the router still forwards $vip to 10.82.3.2 5 s after node 3's dpd died"
    sleep 0.01
done
took=$(($(now_ms) - t0))
echo "-> 10.82.3.2 gone from the router's kernel ${took} ms after SIGKILL"
show_router
paths=$(bird_paths)
[ "$paths" -eq 2 ] || fail "the router's BIRD has $paths paths for $vip/32 after node 3 died, not 2"
[ "$(hops)" = "$(node_hops 1 2)" ] || fail "the router forwards $vip to [$(hops)], not to nodes 1 and 2"
requests 30
[ "$ok" -eq 30 ] || fail "$ok of 30 requests got 200 after node 3 died"
for i in 1 2; do echo "node $i: tcp_accepted $(accepted "$i")"; done

stage=done
echo
echo "== all stages passed in $((($(date +%s%N) - t_start) / 1000000)) ms"
