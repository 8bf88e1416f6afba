#!/usr/bin/env python3
"""The node-scale figure of issue 33: N small items (default 100,000,000 of
20-byte keys and 64-byte values) on one Strata with a memory file (-e) and a
flash tier, and default flags beyond those.

1. load: strata-bench's prefill (one connection, pipelined sets of 256, every
   reply read), timed; the server and the loader run under `nice -n 10` (the
   load takes both cores for minutes; the server is back at niceness 0 for
   the gets);
2. after --settle seconds: `curr_items`, RSS (VmRSS and smaps_rollup), RSS per
   item, the flash counters (items on flash, index bytes, fallbacks);
3. fio, 4 KiB random reads (O_DIRECT, io_uring, queue depth 16) over the
   flash file, for the device's rate beside the gets;
4. `sync; echo 3 > /proc/sys/vm/drop_caches` (root), then --duration of
   uniform gets from --conns connections (strata-bench, every value checked):
   hits, gets/s, p50/p99 (`--mget N`: N-key multi-gets, `--pipeline N`: N
   gets in flight a connection; and the reads sent ahead with the read a
   request waits for);
5. graceful restart (SIGUSR1, memcached's), the memory file and the flash
   file kept: time to stop, time from the new process's start to its first
   answer, `curr_items` after, and gets again (page cache dropped first).

    sudo scripts/bench/scale.py --flash-dir /work/tmp-scale [--items 100000000] [--memory-mb 3000]

The read path alone, smaller (no -e, no restart; fio and the gets as above):

    sudo scripts/bench/scale.py --no-memory-file --flash-dir /work/tmp-scale --items 1000000 \
        --key-size 16 --value-size 1024 --memory-mb 64 --flash-gb 2 --duration 10s --extra "-o io_engine=epoll"

`--memory-mb`: the flash index (12-byte entries, 80-90% full: ~14 B an item)
is counted in -m and may take half of it, so -m must be at least ~2 x 14 B x
items for every item to get an entry; RSS is -m plus the process (~10 MiB).
Files are deleted at the end unless --keep.
"""

import argparse
import json
import os
import shlex
import signal
import subprocess
import time

from common import Reader, drop_caches, free_port, loadavg, run_bench, strata_bin



class Proc(Reader):
    """A server started from `cmd` (a list); records the time to its first answer."""

    def __init__(self, cmd, port):
        self.port = port
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.seconds_to_serve = self.await_serving(shlex.join(cmd))

    def rss(self):
        out = {}
        with open(f"/proc/{self.proc.pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1]) * 1024
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out["VmRSS"] = int(line.split()[1]) * 1024
        return out

    def renice(self, n):
        """Every thread of the server to niceness `n` (niceness is a thread's:
        the workers kept the `nice -n 10` they were started under)."""
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            os.setpriority(os.PRIO_PROCESS, int(tid), n)

    def stop(self):
        """Graceful stop that keeps the memory file (SIGUSR1); seconds taken."""
        self.sock.close()
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGUSR1)
        self.proc.wait(timeout=600)
        return time.monotonic() - t0


def bench(port, args, duration, prefill, nice):
    prefix = ["nice", "-n", str(nice)] if nice else []
    extra = [] if prefill else ["--no-prefill", "--mget", str(args.mget), "--pipeline", str(args.pipeline)]
    return run_bench(port, args, 1.0, duration, extra=extra, prefix=prefix)


class Device:
    """The block device under a file, as the kernel counts it
    (/sys/dev/block/MAJ:MIN/stat): reads completed, the milliseconds they
    took from their start in the block layer to completion, and the
    milliseconds weighted by requests in flight. Over an interval these give
    the device's read rate, its mean read latency and its mean queue (Little's
    law), for fio and for the server alike, whatever either reports."""

    def __init__(self, path):
        st = os.stat(path)
        self.path = f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat"

    def sample(self):
        with open(self.path) as f:
            v = [int(x) for x in f.read().split()]
        return time.monotonic(), v[0], v[3], v[10]

    @staticmethod
    def between(a, b):
        """(reads/s, mean read latency µs, mean queue) from two samples."""
        secs, reads = b[0] - a[0], b[1] - a[1]
        return reads / secs, (b[2] - a[2]) * 1000 / max(1, reads), (b[3] - a[3]) / 1000 / secs


def fio(path, size, seconds, depth):
    """4 KiB random reads over the first `size` bytes of `path` (the pages the
    tier has written, from the file's start: unwritten extents read as zeros
    without touching the device)."""
    cmd = ["fio", "--name=rr", f"--filename={path}", f"--size={size}", "--readonly", "--direct=1", "--rw=randread", "--bs=4k",
           "--ioengine=io_uring", f"--iodepth={depth}", f"--runtime={seconds}", "--time_based",
           "--output-format=json"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    job = json.loads(done.stdout)["jobs"][0]["read"]
    pct = job["clat_ns"]["percentile"]
    return job["iops"], pct["50.000000"] / 1000, pct["99.000000"] / 1000


def gets(server, port, args, label):
    # The file's allocated bytes, not `extstore_bytes_written`: that counts
    # from the process's start, so after a restart fio would read extents
    # never written (zeros, without the device).
    written = os.stat(args.flash_file).st_blocks * 512 & ~((1 << 20) - 1)
    device = Device(args.flash_file)
    cache = drop_caches()
    d0 = device.sample()
    fio_iops, fio_p50, fio_p99 = fio(args.flash_file, written, args.fio_seconds, 16)
    fio_dev = Device.between(d0, device.sample())
    cache = drop_caches()
    server.renice(0)
    load = loadavg()
    before = server.stats()
    d0 = device.sample()
    r = bench(port, args, args.duration, False, 0)
    gets_dev = Device.between(d0, device.sample())
    after = server.stats()
    flash = int(after.get("get_extstore", 0)) - int(before.get("get_extstore", 0))
    ahead = int(after.get("extstore_reads_ahead", 0)) - int(before.get("extstore_reads_ahead", 0))
    print(f"| {label} | {r['hits'] / max(1, r['keys_requested']) * 100:.2f}% | {r['error_total']} | "
          f"{r['throughput_rps']:,.0f} | {r['latency']['p50_us']:,.0f} / {r['latency']['p99_us']:,.0f} | "
          f"{flash:,} | {fio_iops:,.0f} | {fio_p50:,.0f} / {fio_p99:,.0f} | {load} |", flush=True)
    if args.mget > 1 or args.pipeline > 1:
        print(f"  {args.mget}-key gets, {args.pipeline} a connection: {r['keys_requested'] / r['elapsed_s']:,.0f} keys/s; "
              f"flash reads sent ahead with the one a request waited for: {ahead:,}", flush=True)
    for who, (rate, lat, queue) in (("fio", fio_dev), ("gets", gets_dev)):
        print(f"  the device under {who}: {rate:,.0f} reads/s, {lat:,.0f} µs a read, {queue:.2f} in flight on average",
              flush=True)
    return cache


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000_000)
    parser.add_argument("--key-size", type=int, default=20)
    parser.add_argument("--value-size", type=int, default=64)
    parser.add_argument("--memory-mb", type=int, default=3000)
    parser.add_argument("--flash-gb", type=int, default=16)
    parser.add_argument("--flash-dir", required=True)
    parser.add_argument("--memory-file-dir", default="/dev/shm")
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument("--duration", default="20s")
    parser.add_argument("--mget", type=int, default=1, help="keys per get in the gets phases (a multi-get when > 1)")
    parser.add_argument("--pipeline", type=int, default=1, help="gets in flight a connection in the gets phases")
    parser.add_argument("--fio-seconds", type=int, default=10)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--extra", default="", help="more server flags, e.g. '-o io_engine=epoll'")
    parser.add_argument("--keep", action="store_true", help="keep the memory and flash files")
    parser.add_argument("--no-memory-file", action="store_true", help="no -e, and no restart (the read path alone)")
    parser.add_argument("--strata", default=strata_bin(), help="the server binary (copy it if you build meanwhile)")
    args = parser.parse_args()
    os.makedirs(args.flash_dir, exist_ok=True)
    tag = f"scale-{os.getpid()}"
    args.flash_file = os.path.join(args.flash_dir, f"{tag}.dat")
    mem_file = os.path.join(args.memory_file_dir, f"{tag}.mem")
    port = free_port()
    cmd = ["nice", "-n", "10", args.strata, "-p", str(port), "-m", str(args.memory_mb)]
    cmd += [] if args.no_memory_file else ["-e", mem_file]
    cmd += ["-o", f"ext_path={args.flash_file}:{args.flash_gb}g"] + shlex.split(args.extra)
    print(f"server: {shlex.join(cmd)}")
    server = Proc(cmd, port)
    try:
        t0 = time.monotonic()
        load_at = loadavg()
        bench(port, args, "100ms", True, 10)
        load_s = time.monotonic() - t0
        print(f"load: {args.items:,} sets in {load_s:.0f} s ({args.items / load_s:,.0f}/s); loadavg at start "
              f"{load_at}, at end {loadavg()}", flush=True)
        time.sleep(args.settle)
        s = server.stats()
        rss = server.rss()
        items = int(s["curr_items"])
        print(f"curr_items {items:,}; on flash {int(s.get('extstore_objects_used', 0)):,}; flash index "
              f"{int(s.get('extstore_index_bytes', 0)) / 2**20:,.0f} MiB; write fallbacks "
              f"{s.get('extstore_write_fallbacks')}; evictions {s.get('evictions')}; flash written "
              f"{int(s.get('extstore_bytes_written', 0)) / 2**30:.2f} GiB; pages used {s.get('extstore_pages_used')} "
              f"free {s.get('extstore_pages_free')}; page evictions {s.get('extstore_page_evictions')}")
        print(f"RSS {rss['VmRSS'] / 2**20:,.0f} MiB = {rss['VmRSS'] / args.items:.1f} B per item loaded "
              f"(anon {rss.get('Anonymous', 0) / 2**20:,.0f} MiB, shmem/file "
              f"{(rss['Rss'] - rss.get('Anonymous', 0)) / 2**20:,.0f} MiB)", flush=True)
        print("\n| phase | hits | wrong | gets/s | p50 / p99 µs | gets from flash | fio IOPS (qd 16) "
              "| fio p50 / p99 µs | loadavg |")
        print("|---|---|---|---|---|---|---|---|---|")
        gets(server, port, args, "after the load")
        if args.no_memory_file:
            return
        stop_s = server.stop()
        server = Proc(cmd, port)
        s = server.stats()
        print(f"\nrestart: stopped in {stop_s:.2f} s, serving {server.seconds_to_serve:.2f} s after start, "
              f"curr_items {int(s['curr_items']):,}; loadavg {loadavg()}", flush=True)
        gets(server, port, args, "after the restart")
        rss = server.rss()
        print(f"RSS after the restart and gets {rss['VmRSS'] / 2**20:,.0f} MiB = "
              f"{rss['VmRSS'] / args.items:.1f} B per item")
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()
        if not args.keep:
            for f in (args.flash_file, mem_file, mem_file + ".journal"):
                if os.path.exists(f):
                    os.unlink(f)
            idx = mem_file + ".flash"
            if os.path.isdir(idx):
                for name in os.listdir(idx):
                    os.unlink(os.path.join(idx, name))
                os.rmdir(idx)


if __name__ == "__main__":
    main()
