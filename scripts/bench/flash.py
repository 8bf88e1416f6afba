#!/usr/bin/env python3
"""The flash tier beside memcached's extstore (issue 16), on the wire.

Per round and per server (each pinned to CPU 0, the load to CPU 1, a fresh
flash file each time, the same size for both):

1. load: every key of --keys (default 1,000,000) set once with a --value-size
   (1 KiB) value, pipelined, in strata-bench's key/value format so its gets
   validate every byte; SERVER_ERROR replies are counted, not fatal;
2. `sync; echo 3 > /proc/sys/vm/drop_caches` (root only; said when skipped);
3. uniform gets (strata-bench, --get-ratio 1.0, every value checked): hit
   ratio, throughput, p50/p99, wrong values; the server's VmRSS against the
   issue's bound, 64 MiB + 16 B x items;
4. the 90/10 get/set mix: throughput, p99;
5. steady overwrites (--get-ratio 0): write amplification, bytes written to
   flash (`extstore_bytes_written`) per value byte stored by clients
   (`cmd_set` x value size), over the overwrite phase only.

    sudo scripts/bench/flash.py --rounds 3 --flash-dir /work/tmp

A server's RSS breakdown (`/proc/PID/smaps_rollup` and the largest
mappings) is printed after the read phase.
"""

import argparse
import os
import time

from common import Server, drop_caches, run_bench, strata_bin

MASK = (1 << 64) - 1
# keyspace.rs filler_words: word w is the seed rotated left 16 w bits, xor MIX[w].
MIX = (0, 0x5BD1E9955BD1E995, 0x27D4EB2F165667C5, 0x85EBCA6BC2B2AE35)


def splitmix(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def key(index, size):
    digits = str(index)
    prefix = "sb:" if size >= 3 + len(digits) else ""
    return (prefix + "0" * (size - len(prefix) - len(digits)) + digits).encode()


def value(index, length):
    """strata-bench's value for (index, generation 0, length), length >= 12."""
    seed = splitmix((index << 32) ^ (length << 17))
    block = bytearray()
    for w, mix in enumerate(MIX):
        r = 16 * w
        word = (((seed << r) | (seed >> (64 - r))) & MASK if r else seed) ^ mix
        block += bytes(97 + (((word >> (i * 8)) & 0xFF) * 26 >> 8) for i in range(8))
    out = bytearray(b"00000000")
    at = 8
    while at < length:
        take = min(length - at, 32 - at % 32)
        out += block[at % 32:at % 32 + take]
        at += take
    return bytes(out)


def load(server, args):
    stored = errors = 0
    batch = 500
    for first in range(0, args.keys, batch):
        last = min(first + batch, args.keys)
        out = []
        for k in range(first, last):
            out.append(b"set %s %d 0 %d\r\n%s\r\n" % (key(k, args.key_size), splitmix(k) & 0xFFFFFFFF, args.value_size,
                                                      value(k, args.value_size)))
        server.sock.sendall(b"".join(out))
        for _ in range(last - first):
            line = server.readline()
            if line == b"STORED":
                stored += 1
            elif line.startswith(b"SERVER_ERROR"):
                errors += 1
            else:
                raise RuntimeError(f"set answered {line!r}")
    return stored, errors


def bench(server, args, get_ratio, duration):
    return run_bench(server.port, args, get_ratio, duration, extra=["--load-cpu", "1", "--no-prefill"])


def rss_breakdown(pid):
    rollup = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                rollup[parts[0].rstrip(":")] = int(parts[1])
    maps, name = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and not parts[0].endswith(":"):
                name = " ".join(parts[5:]) or "[anon]"
                span = [int(x, 16) for x in parts[0].split("-")]
                size = (span[1] - span[0]) // 1024
            elif parts[0] == "Rss:":
                maps.append((int(parts[1]), size, name))
    maps.sort(reverse=True)
    top = ", ".join(f"{rss // 1024} MiB of {size // 1024} MiB {n}" for rss, size, n in maps[:4])
    keys = ("Rss", "Anonymous", "Shared_Clean", "Shared_Dirty", "Private_Clean", "Private_Dirty")
    return " ".join(f"{k} {rollup.get(k, 0) // 1024} MiB" for k in keys) + f"; largest: {top}"


def stat(stats, name):
    return int(stats.get(name, 0))


def run(name, template, args, path):
    if os.path.exists(path):
        os.unlink(path)
    server = Server(template.format(port="{port}", path=path, mem=args.memory_mb, size=args.flash_mb), cpu=0)
    try:
        t0 = time.time()
        stored, errors = load(server, args)
        load_s = time.time() - t0
        time.sleep(args.settle)
        dropped = drop_caches()
        before = server.stats()
        reads = bench(server, args, 1.0, args.duration)
        after = server.stats()
        rss = server.rss_bytes()
        breakdown = rss_breakdown(server.proc.pid)
        items = stat(after, "curr_items")
        mix = bench(server, args, 0.9, args.duration)
        ow_before = server.stats()
        overwrite = bench(server, args, 0.0, args.overwrite)
        ow_after = server.stats()
    finally:
        server.stop()
        if os.path.exists(path):
            os.unlink(path)
    written = stat(ow_after, "extstore_bytes_written") - stat(ow_before, "extstore_bytes_written")
    sets = stat(ow_after, "cmd_set") - stat(ow_before, "cmd_set")
    bound = args.memory_mb * 2**20 + 16 * args.keys
    row = {
        "server": name,
        "load": f"{stored} stored, {errors} SERVER_ERROR, {load_s:.0f} s",
        "cache": dropped,
        "hits": reads["hits"] / max(1, reads["keys_requested"]),
        "wrong": reads["error_total"],
        "get_rps": reads["throughput_rps"],
        "get_p50": reads["latency"]["p50_us"],
        "get_p99": reads["latency"]["p99_us"],
        "get_extstore": stat(after, "get_extstore") - stat(before, "get_extstore"),
        "rss_mib": rss / 2**20,
        "bound_mib": bound / 2**20,
        "items": items,
        "mix_rps": mix["throughput_rps"],
        "mix_p99": mix["latency"]["p99_us"],
        "mix_hits": mix["hits"] / max(1, mix["keys_requested"]),
        "mix_wrong": mix["error_total"],
        "write_amp": written / max(1, sets * args.value_size),
        "overwrite_sets": sets,
        "breakdown": breakdown,
        "errors": {**reads["errors"], **{f"mix {k}": v for k, v in mix["errors"].items()}},
        "overwrite_errors": overwrite["error_total"],
    }
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--key-size", type=int, default=16)
    parser.add_argument("--value-size", type=int, default=1024)
    parser.add_argument("--memory-mb", type=int, default=64)
    parser.add_argument("--flash-mb", type=int, default=2048)
    parser.add_argument("--flash-dir", default="/tmp")
    parser.add_argument("--conns", type=int, default=32)
    parser.add_argument("--duration", default="10s")
    parser.add_argument("--overwrite", default="10s")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after the load for flushes to end")
    parser.add_argument("--memcached", default="memcached -p {port} -t 1 -U 0 -m {mem} -o ext_path={path}:{size}m")
    parser.add_argument("--strata", default=f"{strata_bin()} -p {{port}} -t 1 -m {{mem}} -o ext_path={{path}}:{{size}}m")
    parser.add_argument("--only", choices=["memcached", "strata"])
    args = parser.parse_args()
    path = os.path.join(args.flash_dir, f"flashbench-{os.getpid()}.dat")
    servers = [("memcached", args.memcached), ("strata", args.strata)]
    if args.only:
        servers = [s for s in servers if s[0] == args.only]
    print("| round | server | hits | wrong | get req/s | get p50 / p99 µs | reads from flash | RSS MiB (bound) "
          "| 90/10 req/s | 90/10 p99 µs | write amp. |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    notes = []
    for r in range(1, args.rounds + 1):
        for name, template in servers:
            x = run(name, template, args, path)
            print(f"| {r} | {name} | {x['hits'] * 100:.1f}% | {x['wrong'] + x['mix_wrong']} | {x['get_rps']:,.0f} | "
                  f"{x['get_p50']:,.0f} / {x['get_p99']:,.0f} | {x['get_extstore']:,} | {x['rss_mib']:.1f} "
                  f"({x['bound_mib']:.1f}) | {x['mix_rps']:,.0f} | {x['mix_p99']:,.0f} | {x['write_amp']:.3f} |",
                  flush=True)
            notes.append(f"round {r} {name}: load {x['load']}; {x['cache']}; curr_items {x['items']:,}; "
                         f"90/10 hits {x['mix_hits'] * 100:.1f}%; {x['overwrite_sets']:,} overwrites; "
                         f"errors {x['errors'] or 'none'} (overwrites: {x['overwrite_errors']}); RSS: {x['breakdown']}")
    print()
    for n in notes:
        print(f"- {n}")


if __name__ == "__main__":
    main()
