#!/usr/bin/env python3
"""Memory density, side by side: RSS growth per item after loading N items
(20-byte keys, 32-byte values by default) through the wire, into Strata and
into Debian's memcached, each with the same -m and one worker thread pinned
to CPU 0. Every item is then read back and checked.

    scripts/bench/density.py [--items 2000000] [--memory-mb 1024]
"""

import argparse

from common import Server, add_server_args, server_commands

BATCH = 1000


def key(i, key_size):
    return f"k{i:0{key_size - 1}d}".encode()


def value(i, value_size):
    return f"v{i:0{value_size - 1}d}".encode()


def load(server, n, key_size, value_size):
    for start in range(0, n, BATCH):
        end = min(n, start + BATCH)
        req = b"".join(b"ms %s %d q\r\n%s\r\n" % (key(i, key_size), value_size, value(i, value_size))
                       for i in range(start, end))
        server.sock.sendall(req + b"mn\r\n")
        line = server.readline()
        if line != b"MN":
            raise RuntimeError(f"store failed near item {start}: {line!r}")


def verify(server, n, key_size, value_size, first=0):
    """(missing, wrong) among items first..n."""
    missing = wrong = 0
    for start in range(first, n, BATCH):
        end = min(n, start + BATCH)
        server.sock.sendall(b"".join(b"mg %s v k q\r\n" % key(i, key_size) for i in range(start, end)) + b"mn\r\n")
        seen = set()
        while True:
            line = server.readline()
            if line == b"MN":
                break
            parts = line.split()
            size = int(parts[1])
            k = parts[2][1:]
            data = server.read_exact(size + 2)[:-2]
            i = int(k[1:])
            seen.add(i)
            if data != value(i, value_size):
                wrong += 1
        missing += (end - start) - len(seen)
    return missing, wrong


def measure(name, template, args):
    server = Server(template)
    try:
        before = server.rss_bytes()
        load(server, args.items, args.key_size, args.value_size)
        after = server.rss_bytes()
        missing, wrong = verify(server, args.items, args.key_size, args.value_size)
        stats = server.stats()
    finally:
        server.stop()
    per_item = (after - before) / args.items
    print(f"{name:10s} rss_before={before / 2**20:8.1f} MiB rss_after={after / 2**20:8.1f} MiB "
          f"per_item={per_item:6.1f} B curr_items={stats.get('curr_items')} evictions={stats.get('evictions')} "
          f"missing={missing} wrong={wrong}")
    return per_item, missing, wrong


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=2_000_000)
    p.add_argument("--key-size", type=int, default=20)
    p.add_argument("--value-size", type=int, default=32)
    add_server_args(p, memory_mb=1024)
    args = p.parse_args()
    memcached_cmd, strata_cmd = server_commands(args)
    mc, mc_missing, mc_wrong = measure("memcached", memcached_cmd, args)
    st, st_missing, st_wrong = measure("strata", strata_cmd, args)
    print(f"ratio strata/memcached bytes per item: {st / mc:.3f}")
    if st_missing or st_wrong:
        raise SystemExit("strata lost or corrupted items")


if __name__ == "__main__":
    main()
