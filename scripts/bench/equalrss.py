#!/usr/bin/env python3
"""Miss ratio at equal RSS (issue 34): the demand-filled streams of
hitratio.py (get; on a miss, set; 200-byte values over 1M keys), counted over
their second half, sent over the wire to memcached -m 64 and Strata -m 64,
one worker thread each, and the RSS of each process after the run; then
Strata again with its -m lowered until its RSS after the run is at most
memcached's ("equal RSS": the largest -m whose RSS does not exceed it).

    scripts/bench/equalrss.py                       # every stream below
    scripts/bench/equalrss.py --streams 6m,6m-scan  # some of them
    scripts/bench/equalrss.py --dump-dir /tmp/eq    # also write each stream (one key a line)

A dumped stream replays in process, to the server's digit, in seconds:

    cargo run --release -p strata-store --example lab -- hitreplay /tmp/eq/6m.keys 3000000 MEM_MB

Streams (total requests; the first half is warm-up, not counted):

    6m          zipf 0.99, 6M requests
    6m-scan     the same with 20% one-time scan keys
    2m          zipf 0.99, 2M requests (a shorter warm-up)
    2m-scan     the same with 20% scan
    6m-a0.9     zipf 0.9, 6M
    6m-a1.1     zipf 1.1, 6M
    6m-moving   zipf 0.99, 6M, the working set moves: every 500,000
                requests the ranks rotate by 50,000 keys

Each line printed is one server run: its -m, misses, miss ratio, items,
RSS after the run, and /proc/loadavg beside it (the miss counts do not
depend on load; the stream is seeded).
"""

import argparse
import os
import types

from common import Server, loadavg, strata_bin
from hitratio import demand_batch, stream

STREAMS = {
    "6m": dict(alpha=0.99, half=3_000_000),
    "6m-scan": dict(alpha=0.99, half=3_000_000, scan=0.2),
    "2m": dict(alpha=0.99, half=1_000_000),
    "2m-scan": dict(alpha=0.99, half=1_000_000, scan=0.2),
    "6m-a0.9": dict(alpha=0.9, half=3_000_000),
    "6m-a1.1": dict(alpha=1.1, half=3_000_000),
    "6m-moving": dict(alpha=0.99, half=3_000_000, shift_every=500_000, shift_by=50_000),
}


def keys_of(spec, seed):
    a = types.SimpleNamespace(keys=1_000_000, alpha=spec["alpha"], scan=spec.get("scan", 0.0), seed=seed,
                              warmup=spec["half"], requests=spec["half"],
                              shift_every=spec.get("shift_every", 0), shift_by=spec.get("shift_by", 0))
    return stream(a)


def run(template, mem_mb, keys, counted_from, value_size=200, batch=100):
    """One server run over the wire: (misses, curr_items, rss bytes after)."""
    value = b"x" * value_size
    server = Server(template.replace("MEM", str(mem_mb)))
    misses = 0
    try:
        for start in range(0, len(keys), batch):
            missed = demand_batch(server, keys[start:start + batch], value, template.split()[0])
            if start >= counted_from:
                misses += missed
        items = int(server.stats().get("curr_items", 0))
        rss = server.rss_bytes()
        if "memcached" not in template.split()[0]:
            print("  stats memory (MiB):", " ".join(f"{k}={v / 2**20:.1f}" for k, v in memory(server).items()), flush=True)
    finally:
        server.stop()
    return misses, items, rss


def memory(server):
    """Strata's `stats memory`, its nonzero lines."""
    server.sock.sendall(b"stats memory\r\n")
    out = {}
    while (line := server.readline()) != b"END":
        _, name, value = line.decode().split(" ", 2)
        if int(value) != 0:
            out[name.removesuffix("_bytes")] = int(value)
    return out


def report(name, server, mem_mb, result, counted):
    misses, items, rss = result
    print(f"{name:10s} {server:9s} -m {mem_mb:3d}: misses={misses} miss_ratio={misses / counted:.4f} "
          f"items={items} rss={rss / 2**20:.1f} MiB (load {loadavg()})", flush=True)


def equal_rss(name, strata, keys, half, target, first, counted):
    """Lower Strata's -m until its RSS after the run is at most `target`;
    returns (mem_mb, result) of the largest such -m among those run."""
    runs = {64: first}
    slope = 1.15  # RSS MiB per -m MiB: segments plus the index of their items
    mem = 64 - max(1, round((first[2] - target) / 2**20 / slope))
    for _ in range(5):
        if mem in runs or mem < 2:
            break
        runs[mem] = run(strata, mem, keys, half)
        report(name, "strata", mem, runs[mem], counted)
        fits = [m for m in runs if runs[m][2] <= target]
        over = [m for m in runs if runs[m][2] > target]
        if fits and over and max(fits) + 1 >= min(over):
            break
        near = sorted(runs, key=lambda m: abs(runs[m][2] - target))[:2]
        if len(near) == 2 and near[0] != near[1]:
            slope = max(0.5, (runs[near[0]][2] - runs[near[1]][2]) / 2**20 / (near[0] - near[1]))
        step = (runs[mem][2] - target) / 2**20 / slope
        nxt = mem - (int(step) + 1 if step > 0 else int(step))
        if nxt == mem:
            nxt = mem - 1 if runs[mem][2] > target else mem + 1
        mem = nxt
    fits = [m for m in runs if runs[m][2] <= target]
    best = max(fits) if fits else min(runs)
    return best, runs[best]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", default=",".join(STREAMS), help="comma-separated names (see above)")
    p.add_argument("--strata", default=f"{strata_bin()} -p {{port}} -t 1 -m MEM")
    p.add_argument("--memcached", default="memcached -p {port} -t 1 -U 0 -m MEM")
    p.add_argument("--memory-mb", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dump-dir", help="write each stream to DIR/NAME.keys")
    p.add_argument("--no-equal", action="store_true", help="skip the equal-RSS search")
    args = p.parse_args()
    rows = []
    for name in args.streams.split(","):
        spec = STREAMS[name]
        keys = keys_of(spec, args.seed)
        half = spec["half"]
        counted = len(keys) - half
        if args.dump_dir:
            os.makedirs(args.dump_dir, exist_ok=True)
            with open(os.path.join(args.dump_dir, f"{name}.keys"), "wb") as f:
                f.write(b"\n".join(keys) + b"\n")
        mem = args.memory_mb
        mc = run(args.memcached, mem, keys, half)
        report(name, "memcached", mem, mc, counted)
        st = run(args.strata, mem, keys, half)
        report(name, "strata", mem, st, counted)
        eq = (None, None) if args.no_equal else equal_rss(name, args.strata, keys, half, mc[2], st, counted)
        rows.append((name, mc, st, eq))
    print()
    print("| stream | memcached -m 64 | Strata -m 64 | Strata / memcached | RSS MiB Strata / memcached | Strata at equal RSS: -m, miss ratio, x memcached, RSS MiB |")
    print("|---|---|---|---|---|---|")
    for name, mc, st, (eq_mem, eq) in rows:
        counted = STREAMS[name]["half"]
        m, s = mc[0] / counted, st[0] / counted
        cell = "" if eq is None else f"-m {eq_mem}: {eq[0] / counted:.4f}, **{eq[0] / mc[0]:.3f}x**, {eq[2] / 2**20:.1f}"
        print(f"| {name} | {m:.4f} | {s:.4f} | {st[0] / mc[0]:.3f}x | {st[2] / 2**20:.1f} / {mc[2] / 2**20:.1f} | {cell} |")


if __name__ == "__main__":
    main()
