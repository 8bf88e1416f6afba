#!/usr/bin/env python3
"""Expiry without requests, side by side: load N items with a 2-second TTL
(20-byte keys, 32-byte values) into Strata and into Debian's memcached, wait
until they have expired, then load N new items with no TTL. No request
touches the expired items. Printed for each server: curr_items and RSS after
the first load, after the wait, and after the second load, with evictions,
reclaimed and expired_unfetched. A server that reuses expired memory by
itself ends with no evictions and an RSS close to the first load's.

    scripts/bench/expiry.py [--items 1000000] [--memory-mb 100]
"""

import argparse
import time

from common import Server, add_server_args, server_commands

BATCH = 1000


def load(server, prefix, n, ttl):
    for start in range(0, n, BATCH):
        end = min(n, start + BATCH)
        req = b"".join(b"ms %s%018d 32 T%d q\r\n%s\r\n" % (prefix, i, ttl, b"v" * 32) for i in range(start, end))
        server.sock.sendall(req + b"mn\r\n")
        line = server.readline()
        if line != b"MN":
            raise RuntimeError(f"store failed near item {start}: {line!r}")


def readable(server, prefix, n):
    found = 0
    for start in range(0, n, BATCH):
        end = min(n, start + BATCH)
        server.sock.sendall(b"".join(b"mg %s%018d q\r\n" % (prefix, i) for i in range(start, end)) + b"mn\r\n")
        while True:
            line = server.readline()
            if line == b"MN":
                break
            if line == b"HD":
                found += 1
    return found


def snapshot(name, phase, server):
    s = server.stats()
    print(f"{name:10s} {phase:22s} curr_items={s['curr_items']:>8s} rss={server.rss_bytes() / 2**20:7.1f} MiB "
          f"evictions={s['evictions']} reclaimed={s['reclaimed']} expired_unfetched={s['expired_unfetched']}")
    return s


def measure(name, template, args):
    server = Server(template)
    try:
        load(server, b"a", args.items, 2)
        snapshot(name, "after TTL-2s load", server)
        time.sleep(args.wait)
        snapshot(name, f"after {args.wait}s idle", server)
        load(server, b"b", args.items, 0)
        s = snapshot(name, "after second load", server)
        print(f"{name:10s} second load readable: {readable(server, b'b', args.items)}/{args.items}")
        return s
    finally:
        server.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=1_000_000)
    p.add_argument("--wait", type=int, default=5)
    add_server_args(p, memory_mb=100)
    args = p.parse_args()
    memcached_cmd, strata_cmd = server_commands(args)
    measure("memcached", memcached_cmd, args)
    st = measure("strata", strata_cmd, args)
    if int(st["evictions"]) != 0:
        raise SystemExit("strata evicted live items instead of reusing expired memory")


if __name__ == "__main__":
    main()
