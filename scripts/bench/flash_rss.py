#!/usr/bin/env python3
"""Where a flash-tier server's RSS goes (issue 16): load --keys values of
--value-size (flash.py's keys and values) into `strata -t 1 -m MEM` with a
2 GiB ext_path, wait 3 s, then print the RSS, the flash counters (items on
flash, the index's bytes in -m) and the resident bytes grouped by mapping,
and check a sample of 200 keys.

    BENCH_PORTS=22100-22199 scripts/bench/flash_rss.py --flash-dir /work/tmp
    scripts/bench/flash_rss.py --extra ,io_engine=epoll
"""
import argparse
import collections
import os

import flash
from common import Server, strata_bin


def by_mapping(pid):
    """Resident KiB and mapping count per (name, size class)."""
    groups, counts, name, size = collections.Counter(), collections.Counter(), None, 0
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            p = line.split()
            if "-" in p[0] and not p[0].endswith(":"):
                name = " ".join(p[5:]) or "[anon]"
                a, b = [int(x, 16) for x in p[0].split("-")]
                size = (b - a) // 1024
            elif p[0] == "Rss:":
                bucket = f"{name} of ~{size // 1024} MiB" if size >= 1024 else f"{name} under 1 MiB"
                groups[bucket] += int(p[1])
                counts[bucket] += 1
    return groups, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--key-size", type=int, default=16)
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--memory-mb", type=int, default=64)
    ap.add_argument("--flash-mb", type=int, default=2048)
    ap.add_argument("--flash-dir", default="/tmp")
    ap.add_argument("--extra", default="", help="appended to -o, e.g. ,io_engine=epoll")
    args = ap.parse_args()
    path = os.path.join(args.flash_dir, f"flashrss-{os.getpid()}.dat")
    server = Server(f"{strata_bin()} -p {{port}} -t 1 -m {args.memory_mb} -o ext_path={path}:{args.flash_mb}m{args.extra}", cpu=0)
    try:
        empty = server.rss_bytes()
        stored, errors = flash.load(server, args)
        flash.time.sleep(3)
        st = server.stats()
        rss = server.rss_bytes()
        bound = args.memory_mb * 2**20 + 16 * args.keys
        print(f"RSS {rss / 2**20:.1f} MiB (bound {bound / 2**20:.1f}; empty {empty / 2**20:.1f}); {stored} stored, "
              f"{errors} SERVER_ERROR")
        for k in ("curr_items", "extstore_objects_used", "extstore_index_bytes", "extstore_memory_pressure", "evictions",
                  "extstore_write_fallbacks"):
            print(f"  {k} {st.get(k)}")
        groups, counts = by_mapping(server.proc.pid)
        for k, v in groups.most_common(10):
            print(f"  {v / 1024:6.1f} MiB in {counts[k]:3d} mappings: {k}")
        misses = 0
        for k in range(0, args.keys, max(1, args.keys // 200)):
            server.sock.sendall(b"get %s\r\n" % flash.key(k, args.key_size))
            if server.readline() == b"END":
                misses += 1
                continue
            server.read_exact(args.value_size + 2)
            assert server.readline() == b"END"
        print(f"  sample: {misses} misses of 200")
    finally:
        server.stop()
        if os.path.exists(path):
            os.unlink(path)


if __name__ == "__main__":
    main()
