#!/usr/bin/env python3
"""Flash you can leave running (issue 63): overwrites, restarts and the
tail of gets, Strata beside memcached's extstore, in one run.

Each server alone in turn, pinned (server on CPU 0, load on CPU 1), a new
flash file each time, the same flags for both:

  large    -m 256 -t 2 -o ext_path=F:4G; 600,000 keys (20 B) of 1,500-byte
           values prefilled, then strata-bench overwrites (--get-ratio 0,
           16 connections, closed loop) for --seconds, then every key read
           (meta `mg`): hit ratio, page evictions, objects evicted, device
           bytes written per byte of items admitted (bytes written over
           (objects written - compaction rescues) x 1,520 bytes: both
           servers the same way), compaction's rescues.
  latency  the same server then: the overwrite mix with 10% gets, closed
           loop for 20 s (its rate R), then open loop at 0.7 R for 60 s:
           the gets' p50/p99/p99.9 (strata-bench's per-kind latency).
  small    -m 128 -t 2 -o ext_path=F:4G; 20M keys (20 B) of 64-byte
           values prefilled, overwritten at --small-rate sets/s (open
           loop) for --seconds, every key read. Strata's application write
           amplification (extstore_admit_write_amp). Strata only: memcached
           keeps a RAM header per item on flash (some 1.5M items at -m 128).
  restart  Strata only (memcached refuses -e with ext_path): -m 64 -t 2
           -e /dev/shm/M -o ext_path=F:SIZE,ext_item_age=0 for SIZE in 256m,
           512m, 1g, 4g: 400,000 items of 64 bytes and 4,000 of 1,500, all
           read; SIGTERM, start again, all read; kill -9, start again, all
           read. Hits and wrong values at each step.

    sudo scripts/bench/flash_churn.py --flash-dir /work/tmp/churn [--rounds 3]
        [--seconds 120] [--only large,latency,small,restart]

Every round and server is printed; nothing is averaged away. memcached is
--memcached (default: /work/peers/memcached-1.6.45/memcached, built from
source with extstore).
"""

import argparse
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import BENCH, Reader, drop_caches, free_port, loadavg, strata_bin  # noqa: E402


def bench_key(index, size):
    """strata-bench's key for an index (keyspace.rs)."""
    digits = str(index)
    prefix = "sb:" if size >= 3 + len(digits) else ""
    return (prefix + "0" * (size - len(prefix) - len(digits)) + digits).encode()


class Proc(Reader):
    def __init__(self, argv, cpu="0", log=None):
        self.port = free_port()
        argv = [a.replace("{port}", str(self.port)) for a in argv]
        if os.geteuid() == 0 and argv[0].endswith("memcached") and "-u" not in argv:
            argv += ["-u", "root"]
        self.proc = subprocess.Popen(["taskset", "-c", cpu] + argv, stdout=subprocess.DEVNULL,
                                     stderr=log or subprocess.DEVNULL)
        self.await_serving(" ".join(argv), timeout=600)

    def stop(self, sig=signal.SIGTERM):
        self.sock.close()
        self.proc.send_signal(sig)
        self.proc.wait(timeout=120)


def read_part(job):
    port, lo, hi, ksize, key_of = job
    r = Reader()
    r.port = port
    r.proc = None
    import socket
    r.sock = socket.create_connection(("127.0.0.1", port))
    r.buf = b""
    hits = 0
    for first in range(lo, hi, 500):
        keys = [key_of(i, ksize) for i in range(first, min(first + 500, hi))]
        r.sock.sendall(b"".join(b"mg %s v\r\n" % k for k in keys))
        for _ in keys:
            line = r.readline()
            if line.startswith(b"VA "):
                r.read_exact(int(line.split()[1]) + 2)
                hits += 1
            elif line != b"EN":
                raise RuntimeError(line)
    r.sock.close()
    return hits


def read_every(port, n, ksize, key_of=bench_key):
    """Every key 0..n once: the hits (two reader processes, on CPU 1)."""
    step = max(1, n // 16)
    jobs = [(port, lo, min(lo + step, n), ksize, key_of) for lo in range(0, n, step)]
    os.sched_setaffinity(0, {1})
    with multiprocessing.Pool(2) as pool:
        return sum(pool.map(read_part, jobs))


def bench(port, keys, ksize, vsize, get_ratio, seconds, conns=16, rate=None, prefill=False):
    cmd = ["taskset", "-c", "1", BENCH, "run", "--server", f"127.0.0.1:{port}", "--keys", str(keys),
           "--key-size", str(ksize), "--value-size", str(vsize), "--get-ratio", str(get_ratio),
           "--duration", f"{seconds}s", "--conns", str(conns), "--quiet", "--json", "-"]
    cmd += ["--prefill-conns", "4"] if prefill else ["--no-prefill"]
    if rate:
        cmd += ["--rate", str(int(rate))]
    import json
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout)


def num(stats, name):
    try:
        return float(stats.get(name, 0))
    except ValueError:
        return 0.0


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


def large(name, server_bin, args, rnd):
    fresh(args.flash_dir)
    argv = [server_bin, "-p", "{port}", "-U", "0", "-l", "127.0.0.1", "-m", "256", "-t", "2",
            "-o", f"ext_path={args.flash_dir}/flash:4G"]
    s = Proc(argv)
    keys, ks, vs = 600_000, 20, 1500
    t0 = time.time()
    pre = bench(s.port, keys, ks, vs, 0, 1, conns=4, prefill=True)
    over = bench(s.port, keys, ks, vs, 0, args.seconds)
    hits = read_every(s.port, keys, ks)
    st = s.stats()
    written, objects, rescues = num(st, "extstore_bytes_written"), num(st, "extstore_objects_written"), num(st, "extstore_compact_rescues")
    admitted = (objects - rescues) * (ks + vs)
    print(f"| large | {name} | {rnd} | {100.0 * hits / keys:.3f}% | {int(num(st, 'extstore_page_evictions'))} | "
          f"{int(num(st, 'extstore_objects_evicted'))} | {written / 1e9:.1f} GB / {int(objects):,} | "
          f"{written / max(admitted, 1):.3f} | {int(rescues):,} | {over['throughput_rps']:,.0f} | "
          f"{over['errors']} | {time.time() - t0:.0f} s | {loadavg()} |", flush=True)
    if "latency" in args.only:
        latency(name, s, keys, ks, vs, rnd)
    s.stop()


def latency(name, s, keys, ks, vs, rnd):
    closed = bench(s.port, keys, ks, vs, 0.1, 20)
    rate = 0.7 * closed["throughput_rps"]
    run = bench(s.port, keys, ks, vs, 0.1, 60, rate=rate)
    g = run["latency_gets"]
    print(f"| latency | {name} | {rnd} | closed {closed['throughput_rps']:,.0f}/s, open {rate:,.0f}/s | "
          f"gets p50 {g['p50_us']:.0f} µs, p99 {g['p99_us']:.0f} µs, p99.9 {g['p999_us']:.0f} µs | "
          f"sets p99 {run['latency_sets']['p99_us']:.0f} µs | unsent {run['unsent']} | errors {run['errors']} | {loadavg()} |",
          flush=True)


def small(name, server_bin, args, rnd):
    fresh(args.flash_dir)
    argv = [server_bin, "-p", "{port}", "-U", "0", "-l", "127.0.0.1", "-m", "128", "-t", "2",
            "-o", f"ext_path={args.flash_dir}/flash:4G"]
    s = Proc(argv)
    keys, ks, vs = args.small_keys, 20, 64
    t0 = time.time()
    pre = bench(s.port, keys, ks, vs, 0, 1, conns=4, prefill=True)
    over = bench(s.port, keys, ks, vs, 0, args.seconds, rate=args.small_rate)
    hits = read_every(s.port, keys, ks)
    st = s.stats()
    print(f"| small | {name} | {rnd} | {100.0 * hits / keys:.3f}% | {int(num(st, 'evictions')):,} | "
          f"{pre['prefill_keys'] / max(pre['prefill_s'], 1e-9):,.0f} | {over['throughput_rps']:,.0f} (p99 {over['latency']['p99_us']:.0f} µs) | "
          f"{st.get('extstore_admit_write_amp', '-')} | {int(num(st, 'extstore_small_merges'))} | "
          f"{int(num(st, 'extstore_small_fallbacks')):,} | {int(num(st, 'extstore_small_dropped')):,} | {time.time() - t0:.0f} s | {loadavg()} |",
          flush=True)
    s.stop()


def restart(server_bin, args, rnd):
    for size in ["256m", "512m", "1g", "4g"]:
        fresh(args.flash_dir)
        mem = "/dev/shm/strata-churn.mem"
        for f in os.listdir("/dev/shm"):
            if f.startswith("strata-churn.mem"):
                p = os.path.join("/dev/shm", f)
                shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
        argv = [server_bin, "-p", "{port}", "-U", "0", "-l", "127.0.0.1", "-m", "64", "-t", "2", "-e", mem,
                "-o", f"ext_path={args.flash_dir}/flash:{size},ext_item_age=0"]
        n_small, n_large = 400_000, 4_000
        key_of = lambda i, _: b"r:%d" % i  # noqa: E731

        def value(i):
            return (b"%d:" % i * 400)[:64 if i < n_small else 1500]

        s = Proc(argv)
        for first in range(0, n_small + n_large, 500):
            last = min(first + 500, n_small + n_large)
            s.sock.sendall(b"".join(b"set r:%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value(i)), value(i)) for i in range(first, last)))
        s.sock.sendall(b"mn\r\n")
        assert s.readline() == b"MN"
        time.sleep(2)
        row = [size]
        for step in ["loaded", "SIGTERM", "kill -9"]:
            if step != "loaded":
                s.stop(signal.SIGTERM if step == "SIGTERM" else signal.SIGKILL)
                s = Proc(argv)
            hits = wrong = 0
            for first in range(0, n_small + n_large, 500):
                keys = range(first, min(first + 500, n_small + n_large))
                s.sock.sendall(b"".join(b"mg r:%d v\r\n" % i for i in keys))
                for i in keys:
                    line = s.readline()
                    if line.startswith(b"VA "):
                        v = s.read_exact(int(line.split()[1]) + 2)[:-2]
                        hits += v == value(i)
                        wrong += v != value(i)
            st = s.stats()
            row.append(f"{100.0 * hits / (n_small + n_large):.2f}% ({wrong} wrong; {st.get('extstore_small_items_log', '0')} log, "
                       f"{st.get('extstore_small_items_sets', '0')} sets)")
        s.stop(signal.SIGKILL)
        print(f"| restart | {rnd} | " + " | ".join(row) + f" | {loadavg()} |", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flash-dir", required=True)
    p.add_argument("--strata", default=strata_bin())
    p.add_argument("--memcached", default="/work/peers/memcached-1.6.45/memcached")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=120)
    p.add_argument("--small-keys", type=int, default=20_000_000)
    p.add_argument("--small-rate", type=int, default=115_000)
    p.add_argument("--only", default="large,latency,small,restart")
    args = p.parse_args()
    args.only = args.only.split(",")
    servers = [("strata", args.strata)]
    if os.path.exists(args.memcached):
        servers.append(("memcached", args.memcached))
    print(f"# {time.strftime('%F %T', time.gmtime())} UTC, {os.cpu_count()} CPUs, load {loadavg()}, {drop_caches()}")
    for rnd in range(1, args.rounds + 1):
        for name, binary in servers:
            if "large" in args.only:
                large(name, binary, args, rnd)
            # memcached keeps a RAM header of ~80-100 bytes per item on
            # flash: at -m 128 some 1.5M of the 20M keys; not a comparison.
            if "small" in args.only and name == "strata":
                small(name, binary, args, rnd)
        if "restart" in args.only:
            restart(args.strata, args, rnd)
    shutil.rmtree(args.flash_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
