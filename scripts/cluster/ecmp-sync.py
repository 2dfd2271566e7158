#!/usr/bin/env python3
"""Mirror a kernel routing table into resilient next-hop groups.

The cluster lab's router (scripts/lab.sh cluster up, LAB_ECMP=resilient) has
BIRD write its multipath routes to kernel table 100, where nothing forwards by
them. This agent, run in the router's namespace, polls that table and keeps
the main table in step through nexthop objects:

  * one nexthop object per gateway: id 10+i for "via 10.82.i.2 dev rdata$i",
    50+i for its IPv6 gateway (another device gets an id from 100 up);
  * one resilient group per prefix (id 1000 up): its members are the prefix's
    gateways in table 100; replacing the member list keeps the buckets of the
    members that stay, so their flows stay where they are, and only the
    flows of a gateway that left (or, once idle, buckets given to one that
    joined) move;
  * "PREFIX nhid GROUP" in main.

IPv4 and IPv6 routes alike (a group holds one family).

A prefix that leaves table 100 loses its main route, then its group; a
gateway no prefix uses any more loses its object. Every change is logged
with a timestamp. State is read back from the kernel on each pass, so a
restart adopts what an earlier run left (its groups keep their buckets).
SIGTERM or SIGINT stops it and leaves the kernel as it is.

    ecmp-sync.py [--table 100] [--interval 0.1] [--pidfile F] [--log F]
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

GROUP_BASE = 1000
GROUP_LAST = 999_999
NH_BASE = 10          # rdata$i -> 10+i
NH_BASE6 = 50         # rdata$i's IPv6 gateway -> 50+i
NH_OTHER = 100        # other devices: 100..999
NH_LAST = 999

log_file = sys.stderr


def log(msg):
    t = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    log_file.write(f"{stamp}.{int(t * 1000) % 1000:03d} {msg}\n")
    log_file.flush()


class IpError(Exception):
    pass


def ip_json(*args):
    r = subprocess.run(["ip", "-j", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise IpError(f"ip -j {' '.join(args)}: {r.stderr.strip()}")
    return json.loads(r.stdout) if r.stdout.strip() else []


def ip(*args):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise IpError(f"ip {' '.join(args)}: {r.stderr.strip()}")


def prefix_of(route):
    dst = route.get("dst", "")
    if dst == "default":
        return "0.0.0.0/0"
    if "/" not in dst:
        dst += "/128" if ":" in dst else "/32"
    return dst


def routes_of(table):
    """Every IPv4 and IPv6 route of `table` (none while it does not exist)."""
    routes = []
    for family in ("-4", "-6"):
        try:
            routes += ip_json(family, "route", "show", "table", str(table))
        except IpError as e:
            # A table springs into being with its first route; before BIRD
            # has written one there is nothing to mirror.
            if "does not exist" not in str(e):
                raise
    return routes


def read_wanted(table):
    """prefix -> frozenset of (gateway, dev) from the source table."""
    routes = routes_of(table)
    wanted = {}
    for r in routes:
        if r.get("type", "unicast") != "unicast":
            continue
        hops = r.get("nexthops") or [r]
        gws = frozenset((h["gateway"], h["dev"]) for h in hops
                        if h.get("gateway") and h.get("dev"))
        if gws:
            wanted[prefix_of(r)] = gws
    return wanted


class Sync:
    def __init__(self, table, buckets, idle_timer, unbalanced_timer):
        self.table = table
        self.buckets = buckets
        self.idle_timer = idle_timer
        self.unbalanced_timer = unbalanced_timer
        self.failing = None  # last error text, logged once until it changes

    def gateway_id(self, gw, dev, taken):
        m = re.fullmatch(r"rdata(\d+)", dev)
        base = NH_BASE6 if ":" in gw else NH_BASE
        if m and int(m.group(1)) < NH_BASE6 - NH_BASE:
            return base + int(m.group(1))
        for nid in range(NH_OTHER, NH_LAST + 1):
            if nid not in taken:
                return nid
        raise IpError("out of nexthop ids")

    def run_once(self):
        wanted = read_wanted(self.table)
        objs = {o["id"]: o for o in ip_json("nexthop", "show")}
        main = {}
        for r in routes_of("main"):
            nhid = r.get("nhid")
            if nhid is not None and GROUP_BASE <= nhid <= GROUP_LAST:
                main[prefix_of(r)] = nhid

        # Gateways: one object each, reusing any object that already says so.
        singles = {(o["gateway"], o["dev"]): i for i, o in objs.items()
                   if "gateway" in o and "dev" in o and i < GROUP_BASE}
        gw_id = {}
        for gw, dev in sorted(set().union(*wanted.values()) if wanted else ()):
            nid = singles.get((gw, dev))
            if nid is None:
                nid = self.gateway_id(gw, dev, objs)
                ip("nexthop", "replace", "id", str(nid), "via", gw, "dev", dev)
                objs[nid] = {"id": nid, "gateway": gw, "dev": dev}
                log(f"nexthop {nid}: via {gw} dev {dev}")
            gw_id[(gw, dev)] = nid

        # Prefixes: a resilient group each, then the route in main.
        groups = {i: o for i, o in objs.items() if "group" in o and i >= GROUP_BASE}
        used = set(main.values())
        for prefix in sorted(wanted):
            members = sorted(gw_id[g] for g in wanted[prefix])
            gid = main.get(prefix)
            if gid is None or gid not in groups:
                gid = next(i for i in range(GROUP_BASE, GROUP_LAST + 1)
                           if i not in objs and i not in used)
                used.add(gid)
            have = groups.get(gid)
            have_members = sorted(m["id"] for m in have["group"]) if have else None
            if have is not None and have.get("type") != "resilient":
                ip("route", "del", prefix, "table", "main")
                ip("nexthop", "del", "id", str(gid))
                log(f"{prefix}: group {gid} was not resilient; recreated")
                have = have_members = None
                main.pop(prefix, None)
            if have_members != members:
                ip("nexthop", "replace", "id", str(gid), "group",
                   "/".join(map(str, members)), "type", "resilient",
                   "buckets", str(self.buckets), "idle_timer", str(self.idle_timer),
                   "unbalanced_timer", str(self.unbalanced_timer))
                objs[gid] = groups[gid] = {"id": gid, "type": "resilient",
                                           "group": [{"id": m} for m in members]}
                if have_members is None:
                    log(f"{prefix}: group {gid} = {describe(members, objs)}")
                else:
                    gone = [m for m in have_members if m not in members]
                    new = [m for m in members if m not in have_members]
                    log(f"{prefix}: group {gid} = {describe(members, objs)}"
                        f" (left: {describe(gone, objs) or '-'};"
                        f" joined: {describe(new, objs) or '-'})")
            if main.get(prefix) != gid:
                ip("route", "replace", prefix, "table", "main", "nhid", str(gid))
                main[prefix] = gid
                log(f"{prefix}: route in main via group {gid}")

        # Prefixes gone from the source table: route first, then its group.
        for prefix, gid in sorted(main.items()):
            if prefix in wanted:
                continue
            ip("route", "del", prefix, "table", "main", "nhid", str(gid))
            log(f"{prefix}: withdrawn; route removed from main")
            if gid in groups and gid not in (main[p] for p in wanted if p in main):
                ip("nexthop", "del", "id", str(gid))
                del groups[gid]
                objs.pop(gid, None)
                log(f"group {gid} removed")
        # Groups of ours that no route uses (left by a crash between steps).
        in_use = {main[p] for p in wanted if p in main}
        for gid in sorted(groups):
            if gid not in in_use:
                ip("nexthop", "del", "id", str(gid))
                objs.pop(gid, None)
                log(f"group {gid} removed (unused)")
        # Gateway objects of ours no group needs any more.
        needed = set(gw_id.values())
        for nid, o in sorted(objs.items()):
            if nid < GROUP_BASE and nid >= NH_BASE and "gateway" in o and nid not in needed:
                ip("nexthop", "del", "id", str(nid))
                log(f"nexthop {nid} removed (via {o['gateway']} dev {o['dev']}: no prefix uses it)")


def describe(ids, objs):
    out = []
    for i in ids:
        o = objs.get(i, {})
        out.append(f"{i}({o.get('gateway', '?')})")
    return "/".join(out)


def main():
    global log_file
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", type=int, default=100)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--buckets", type=int, default=64)
    ap.add_argument("--idle-timer", type=int, default=60,
                    help="seconds a bucket must be idle before it may move")
    ap.add_argument("--unbalanced-timer", type=int, default=0,
                    help="seconds the group may stay unbalanced before busy buckets "
                         "move too (0: never; only harmless where flows are pinned)")
    ap.add_argument("--pidfile")
    ap.add_argument("--log")
    a = ap.parse_args()

    if a.log:
        log_file = open(a.log, "a", buffering=1)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    if a.pidfile:
        with open(a.pidfile + ".tmp", "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(a.pidfile + ".tmp", a.pidfile)

    log(f"ecmp-sync {os.getpid()}: table {a.table} -> main, resilient groups of "
        f"{a.buckets} buckets, idle timer {a.idle_timer} s, every {a.interval} s")
    sync = Sync(a.table, a.buckets, a.idle_timer, a.unbalanced_timer)
    while not stop:
        try:
            sync.run_once()
            if sync.failing:
                log("recovered")
                sync.failing = None
        except (IpError, ValueError, KeyError) as e:
            # Routes can change under us between reading and writing; the
            # next pass starts from what the kernel has then.
            if str(e) != sync.failing:
                log(f"error: {e}")
                sync.failing = str(e)
        time.sleep(a.interval)
    log("stopping (SIGTERM); kernel state left as it is")
    if a.pidfile:
        try:
            os.unlink(a.pidfile)
        except FileNotFoundError:
            pass


if __name__ == "__main__":
    main()
