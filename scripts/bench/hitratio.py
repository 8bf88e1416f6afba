#!/usr/bin/env python3
"""Hit ratio, side by side: the same demand-filled request stream (get; on a
miss, set) sent to Strata and to Debian's memcached, both with -m 64 and one
worker thread. Keys follow a zipf distribution (alpha 0.99 over 1M keys by
default), values are 200 bytes. With --scan 0.2, a fifth of the requests are
replaced by a one-time scan of fresh keys (each read once, then filled), the
pattern that flushes an LRU. With --shift-every N --shift-by S the working
set moves: every N requests the popularity ranks rotate by S keys, so the S
hottest keys go cold and S cold ones become the hottest.

Requests go in pipelined batches of --batch gets, then the misses of that
batch are filled, so both servers see exactly the same stream.

    scripts/bench/hitratio.py [--requests 3000000] [--scan 0.2] [--warmup 3000000]

With --mrc, Strata's run is reset (`stats reset`) where counting starts and
its `stats mrc` curve (the miss ratio it estimates at 0.25x..8x of -m) is
printed after it, to compare with runs at those -m:

    scripts/bench/hitratio.py --only strata --warmup 3000000 --mrc --memory-mb 64

With --dump FILE it writes the stream (one key a line) and exits, for the
in-process replay of the same stream (seconds, no sockets; the figure is the
server's to the last digit):

    scripts/bench/hitratio.py --warmup 3000000 --scan 0.2 --dump /tmp/scan.keys
    cargo run --release -p strata-store --example lab -- hitreplay /tmp/scan.keys 3000000

It also prints the compulsory miss ratio: the share of counted requests that
are the first request of their key, which no cache can hit.
"""

import argparse
import bisect
import random

from common import Server, add_server_args, server_commands


def zipf_cdf(n, alpha):
    total = 0.0
    cdf = []
    for rank in range(1, n + 1):
        total += 1.0 / rank ** alpha
        cdf.append(total)
    return [c / total for c in cdf]


def stream(args):
    rng = random.Random(args.seed)
    cdf = zipf_cdf(args.keys, args.alpha)
    # A fixed random permutation so popular keys are spread over the key space.
    perm = list(range(args.keys))
    rng.shuffle(perm)
    scan_next = 0
    shift_every, shift_by = getattr(args, "shift_every", 0), getattr(args, "shift_by", 0)
    out = []
    for n in range(args.warmup + args.requests):
        if args.scan and rng.random() < args.scan:
            out.append(b"scan:%d" % scan_next)
            scan_next += 1
        else:
            rank = min(bisect.bisect_left(cdf, rng.random()), args.keys - 1)
            # A moving working set: every shift_every requests, rank r is
            # the key rank r + shift_by was (the hottest keys go cold).
            offset = n // shift_every * shift_by if shift_every else 0
            out.append(b"key:%d" % perm[(rank + offset) % args.keys])
    return out


def demand_batch(server, keys, value, name):
    """One batch of a demand-filled stream over meta commands, pipelined: a
    get of each key, then a set of each key that missed. How many missed."""
    server.sock.sendall(b"".join(b"mg %s\r\n" % k for k in keys))
    missed = []
    for k in keys:
        line = server.readline()
        if line == b"EN":
            missed.append(k)
        elif line != b"HD":
            raise RuntimeError(f"{name}: unexpected reply {line!r}")
    if missed:
        server.sock.sendall(b"".join(b"ms %s %d q\r\n%s\r\n" % (k, len(value), value) for k in missed) + b"mn\r\n")
        line = server.readline()
        while line != b"MN":
            if not line.startswith(b"SERVER_ERROR"):
                raise RuntimeError(f"{name}: unexpected reply {line!r}")
            line = server.readline()
    return len(missed)


def run(name, template, keys, args):
    value = b"x" * args.value_size
    server = Server(template)
    misses = 0
    counted_from = args.warmup
    try:
        for start in range(0, len(keys), args.batch):
            if args.mrc and name == "strata" and start == counted_from:
                server.sock.sendall(b"stats reset\r\n")
                assert server.readline() == b"RESET"
            missed = demand_batch(server, keys[start:start + args.batch], value, name)
            if start >= counted_from:
                misses += missed
        stats = server.stats()
        if args.mrc and name == "strata":
            server.sock.sendall(b"stats mrc\r\n")
            line = server.readline()
            while line != b"END":
                print(f"{name:10s} {line.decode()}")
                line = server.readline()
    finally:
        server.stop()
    ratio = misses / args.requests
    print(f"{name:10s} requests={args.requests} (after {args.warmup} warm-up) misses={misses} miss_ratio={ratio:.4f} "
          f"evictions={stats.get('evictions')} curr_items={stats.get('curr_items')}")
    return ratio


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=3_000_000)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--alpha", type=float, default=0.99)
    p.add_argument("--value-size", type=int, default=200)
    p.add_argument("--scan", type=float, default=0.0)
    p.add_argument("--warmup", type=int, default=0, help="requests sent first and not counted (a warm cache)")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--shift-every", type=int, default=0, help="move the working set every N requests (0: never)")
    p.add_argument("--shift-by", type=int, default=0, help="ranks it moves by each time")
    add_server_args(p, memory_mb=64)
    p.add_argument("--only", choices=["strata", "memcached"], help="run one server (tuning)")
    p.add_argument("--mrc", action="store_true", help="print Strata's stats mrc for the counted part")
    p.add_argument("--dump", metavar="FILE", help="write the stream to FILE (one key a line) and exit")
    args = p.parse_args()
    keys = stream(args)
    if args.dump:
        with open(args.dump, "wb") as f:
            f.write(b"\n".join(keys) + b"\n")
        return
    first = keys[args.warmup:]
    floor = len(set(first) - set(keys[:args.warmup])) / len(first)
    print(f"compulsory misses (first requests of keys, counted part): {floor:.4f}")
    memcached_cmd, strata_cmd = server_commands(args)
    if args.only != "strata":
        mc = run("memcached", memcached_cmd, keys, args)
    if args.only != "memcached":
        st = run("strata", strata_cmd, keys, args)
    if not args.only:
        print(f"ratio strata/memcached miss ratio: {st / mc:.3f}")


if __name__ == "__main__":
    main()
