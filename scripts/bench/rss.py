#!/usr/bin/env python3
"""RSS idle and filled, side by side (issue 34): each server started with
the same flags (-m 64 -t 4 by default), its RSS read 1 s after start
(idle), then 4 connections set --keys distinct keys of 200-byte values in
pipelined batches (twice what -m holds, so both evict), and the RSS read
again (filled). Every round is printed, with /proc/loadavg, and for Strata
its `stats memory` lines.

    scripts/bench/rss.py [--rounds 3] [--memory-mb 64] [--threads 4]
    scripts/bench/rss.py --only strata --strata "target/release/strata -p {port} -t 4 -m 64 -o journal_size=524288"
"""

import argparse
import socket
import time

from common import Server, loadavg, strata_bin
from equalrss import memory


def fill(server, keys, value, conns=4, batch=200):
    socks = [server.sock] + [socket.create_connection(("127.0.0.1", server.port)) for _ in range(conns - 1)]
    try:
        for start in range(0, keys, batch * conns):
            for c, s in enumerate(socks):
                lo = start + c * batch
                hi = min(lo + batch, keys)
                if lo < hi:
                    s.sendall(b"".join(b"ms key:%d %d q\r\n%s\r\n" % (k, len(value), value) for k in range(lo, hi)) + b"mn\r\n")
            for c, s in enumerate(socks):
                if start + c * batch >= keys:
                    continue
                buf = b""
                while not buf.endswith(b"MN\r\n"):
                    chunk = s.recv(1 << 16)
                    if not chunk:
                        raise ConnectionError("server closed the connection")
                    buf += chunk
                if buf != b"MN\r\n" and not all(l.startswith(b"SERVER_ERROR") or l == b"MN" for l in buf.split(b"\r\n") if l):
                    raise RuntimeError(f"unexpected reply {buf[:200]!r}")
    finally:
        for s in socks[1:]:
            s.close()


def one(name, template, args):
    server = Server(template)
    try:
        time.sleep(1)
        idle = server.rss_bytes()
        fill(server, args.keys, b"x" * 200)
        time.sleep(1)
        filled = server.rss_bytes()
        s = server.stats()
        mem = memory(server) if name == "strata" else None
    finally:
        server.stop()
    print(f"{name:10s} idle={idle / 1e6:.1f} MB filled={filled / 1e6:.1f} MB items={s.get('curr_items')} "
          f"evictions={s.get('evictions')} (load {loadavg()})", flush=True)
    if mem:
        print("  stats memory (MB):", " ".join(f"{k}={v / 1e6:.1f}" for k, v in mem.items()), flush=True)
    return idle, filled


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--memory-mb", type=int, default=64)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--keys", type=int, default=600_000)
    p.add_argument("--strata", default=f"{strata_bin()} -p {{port}} -t THREADS -m MEM")
    p.add_argument("--memcached", default="memcached -p {port} -t THREADS -U 0 -m MEM")
    p.add_argument("--only", choices=["strata", "memcached"])
    args = p.parse_args()
    for r in range(args.rounds):
        for name, t in (("memcached", args.memcached), ("strata", args.strata)):
            if args.only and args.only != name:
                continue
            print(f"round {r + 1} ", end="")
            one(name, t.replace("MEM", str(args.memory_mb)).replace("THREADS", str(args.threads)), args)


if __name__ == "__main__":
    main()
