#!/usr/bin/env python3
"""The small store's figures (issue 45): N small items (default 300,000,000
of 20-byte keys and 64-byte values) on one Strata with -m 1024 -t 2 and a
flash tier (`-o ext_path=FILE:45G`), plus -e on a memory file (for the
restarts; --no-memory-file drops it and the restart phases). Phases
(--phases, in this order; default all):

  load     strata-bench's prefill over --conns connections (each its own
           share of the keys, every reply read) and --bench-threads
           threads, timed (sets/s); the server and the loader run under
           `nice -n --nice`. Then, once the flash writes settle: the stats
           (curr_items, every extstore_small_* line, bytes written and
           admitted, evictions, fallbacks), RSS (VmRSS and smaps_rollup),
           and a uniform sample of --sample loaded keys (strata-bench
           --requests with a fixed seed: the same keys every time; every
           value checked). Writes: the device's sectors written over the
           load (/sys/dev/block/MAJ:MIN/stat of the device holding the flash
           file, then again after an fsync of the server's files) against
           the store's extstore_bytes_written, and device bytes /
           extstore_bytes_admitted. The device counts everyone's writes:
           before the load, `sync` and --background-seconds of the device's
           writes without the server estimate the others' share (when it
           passes 5% of the store's writes the comparison says
           "inconclusive"), and the server's own /proc/PID/io write_bytes
           (its O_DIRECT writes and the pages it dirtied in its mapped files
           under `<FILE>.flash` beside the memory file, listed with their dirty bytes) is shown
           beside it.
  reads    fio (4 KiB random reads, O_DIRECT, io_uring, queue depth 16) over
           the flash file's written part, before and after the gets (the gets
           held to the mean of the two: this VM's device drifts); page cache
           dropped; --duration of uniform gets of loaded keys from --conns
           connections: gets/s, p50/p99, device reads per hit from the extstore_small_set_reads +
           extstore_small_log_reads deltas (and the device's own reads);
           then --misses gets of keys never set (strata-bench --key-offset):
           reads per miss, the extstore_small_false_positives delta.
  restart  the sample, SIGTERM (graceful, the memory file kept), page cache
           dropped, start again: time from the start to the first answer,
           curr_items, the same sample again (hits, and hits against those
           before the stop).
  crash    --crash-keys keys of their own (`ck:` keys, 20 B, values of
           --value-size naming key and version) set once, then sets (75%)
           and deletes (25%) of random ones over --crash-conns pipelined
           connections, every reply read and the ledger of acknowledged and
           unacknowledged operations kept, until `kill -9` after
           --crash-seconds; start again and read every key: stale (an older
           state than the last acknowledged one), corrupt (a value no write
           made), lost, and the share at its last acknowledged state (of the
           keys whose last acknowledged operation was a set, as
           tests/e2e/flash_overwrite.rs counts, and of all keys); then the
           sample of loaded keys again.

Each phase prints one markdown table (figure, value, target). Without
`load` in --phases the server starts on the files a run with --keep left
(the same --flash-dir, --memory-file-dir and --items); the files are
deleted at the end unless --keep. Full scale (20-30 minutes of load,
75 GB of disk free for the 45 GB file):

    sudo scripts/bench/small.py --flash-dir /work/bigbench-small

Phases apart (the load kept for later runs; the server is stopped by SIGTERM
between runs, so the next one starts warm):

    sudo scripts/bench/small.py --flash-dir /work/bigbench-small --phases load --keep
    sudo scripts/bench/small.py --flash-dir /work/bigbench-small --phases reads --keep
    sudo scripts/bench/small.py --flash-dir /work/bigbench-small --phases restart,crash

A run of about a minute and a half at small scale (on a machine others use
too, everything niced: --nice for the load, --measure-nice for the server
while measuring, `nice` for the rest):

    sudo nice -n 19 scripts/bench/small.py --flash-dir /work/tmp-small --items 3000000 --flash-gb 2 \\
        --memory-mb 64 --sample 200000 --misses 200000 --duration 10s --fio-seconds 5 --crash-keys 300000 \\
        --crash-seconds 10 --nice 19 --measure-nice 19
"""

import argparse
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from common import BENCH, Reader, drop_caches, free_port, loadavg, strata_bin
from scale import Device, Proc, fio


def fmt(n):
    return f"{n:,.0f}" if isinstance(n, float) else f"{n:,}"


def verdict(ok):
    if ok is None or isinstance(ok, str):
        return ok or ""
    return "yes" if ok else "**NO**"


class Table:
    """One phase's markdown table: figure, value, target, met."""

    def __init__(self, title):
        self.title, self.rows = title, []

    def add(self, figure, value, target="", ok=None):
        self.rows.append((figure, value, target, verdict(ok)))

    def print(self):
        print(f"\n### {self.title}\n\n| figure | value | target | met |\n|---|---|---|---|")
        for row in self.rows:
            print("| " + " | ".join(str(c) for c in row) + " |")
        sys.stdout.flush()


class Disk(Device):
    """scale.py's Device, with the sectors the device wrote and read."""

    def counters(self):
        with open(self.path) as f:
            v = [int(x) for x in f.read().split()]
        return {"reads": v[0], "read_bytes": v[2] * 512, "writes": v[4], "written_bytes": v[6] * 512}


SMAPS_FIELDS = {"Size:": 0, "Rss:": 1, "Shared_Dirty:": 2, "Private_Dirty:": 2}


class Node(Proc):
    """The server (scale.py's Proc: RSS, renice, stats), its stderr to a log
    file instead of a pipe nobody reads during a long load."""

    def __init__(self, cmd, port, log):
        self.port, self.log, self.cmd = port, log, cmd
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        try:
            self.seconds_to_serve = self.await_serving(shlex.join(cmd))
        except RuntimeError as e:
            with open(log, "rb") as f:
                raise RuntimeError(f"{e}; log: {f.read()[-2000:].decode(errors='replace')}") from None

    def term(self):
        """SIGTERM (a clean stop, the memory file kept); seconds taken."""
        self.sock.close()
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=1200)
        return time.monotonic() - t0

    def alive(self):
        return self.proc.poll() is None

    def mappings(self, under):
        """The process's mappings of files under `under` from
        /proc/PID/smaps, by file name without a trailing `.N`: {name: [Size,
        Rss, dirty (shared and private)]} in bytes."""
        out, current = {}, None
        with open(f"/proc/{self.proc.pid}/smaps") as f:
            for line in f:
                parts = line.split()
                if "-" in parts[0] and len(parts) >= 5 and ":" in parts[3]:
                    path = parts[5] if len(parts) > 5 else ""
                    current = None
                    if path.startswith(under):
                        name = os.path.basename(path)
                        base, _, n = name.rpartition(".")
                        current = out.setdefault(f"{base}.N" if n.isdigit() and base else name, [0, 0, 0])
                elif current is not None and parts[0] in SMAPS_FIELDS:
                    current[SMAPS_FIELDS[parts[0]]] += int(parts[1]) * 1024
        return out

    def io(self):
        """/proc/PID/io: what the process sent to the storage layer
        (write_bytes: its O_DIRECT writes and the pages it dirtied, e.g. of
        its mapped files, counted once each), whatever else the device does."""
        with open(f"/proc/{self.proc.pid}/io") as f:
            return {k: int(v) for k, v in (line.split(": ") for line in f)}


def stat(s, name):
    return int(float(s.get(name, 0)))


def delta(a, b, *names):
    return sum(stat(b, n) - stat(a, n) for n in names)


def bench(port, args, extra, nice=0):
    """strata-bench run of gets (every value checked) under `nice -n
    nice`, else at this script's niceness: its JSON report."""
    cmd = (["nice", "-n", str(nice)] if nice else []) + [
        BENCH, "run", "--server", f"127.0.0.1:{port}", "--key-size", str(args.key_size), "--value-size",
        str(args.value_size), "--get-ratio", "1", "--conns", str(args.conns), "--threads", str(args.bench_threads),
        "--quiet", "--json", "-"] + [str(x) for x in extra]
    done = subprocess.run(cmd, capture_output=True, text=True)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        raise RuntimeError(f"strata-bench failed ({done.returncode}): {shlex.join(cmd)}: "
                           f"{done.stderr.strip()[-2000:]}") from None
    report["exit"] = done.returncode
    return report


def wrong(r):
    """Replies that failed validation (a value not the one written, a key
    not asked for, a broken reply)."""
    e = r["errors"]
    return sum(e.get(k, 0) for k in ("value_mismatch", "unexpected_reply", "bad_reply"))


def sample(port, args):
    """The uniform sample of loaded keys (the same keys every run: fixed seed)."""
    return bench(port, args, ["--keys", args.items, "--no-prefill", "--requests", args.sample, "--seed",
                              args.seed, "--duration", "120m"])


def pct(part, whole):
    return 100.0 * part / max(1, whole)


def settle(node, args):
    """Wait until the flash writes stop (extstore_bytes_written unchanged
    for 3 s), at most --settle seconds; seconds waited."""
    t0 = time.monotonic()
    last, quiet = None, 0
    while time.monotonic() - t0 < args.settle:
        w = stat(node.stats(), "extstore_bytes_written")
        quiet = quiet + 1 if w == last else 0
        if quiet >= 3:
            break
        last = w
        time.sleep(1)
    return time.monotonic() - t0


STATS = ["curr_items", "evictions", "extstore_write_fallbacks", "extstore_bytes_written", "extstore_bytes_admitted",
         "extstore_admit_write_amp", "extstore_objects_used", "extstore_index_bytes", "extstore_pages_used",
         "extstore_pages_free", "extstore_page_evictions"]


def state_dir(args):
    """Where the flash tier keeps its mapped state with -e: `<FILE>.flash`
    beside the memory file (on /dev/shm by default: never written to the
    flash device)."""
    return args.mem_file + ".flash"


def server_files(args):
    idx = state_dir(args)
    return [args.flash_file] + ([os.path.join(idx, f) for f in sorted(os.listdir(idx))] if os.path.isdir(idx) else [])


def fsync_server_files(args):
    """fsync the flash file and the flash tier's mapped files (`<FILE>.flash`
    beside the memory file: with -e the write buffers and indexes), so the
    device has what they dirtied, and nobody else's pages (a global `sync`
    would flush those too); the files."""
    files = server_files(args)
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return files


def load(node, args, disk):
    t = Table(f"load and density: {fmt(args.items)} items of {args.key_size} B keys, {args.value_size} B values")
    w = Table("writes over the load")
    subprocess.run(["sync"], check=True)
    d0 = disk.counters()
    time.sleep(args.background_seconds)
    d1 = disk.counters()
    background = (d1["written_bytes"] - d0["written_bytes"]) / args.background_seconds
    load_at = loadavg()
    t0 = time.monotonic()
    r = bench(node.port, args, ["--keys", args.items, "--prefill-conns", args.conns, "--requests", 1, "--duration",
                                "10s", "--seed", args.seed], args.nice)
    took = time.monotonic() - t0
    if r["prefill_keys"] != args.items or r["exit"] != 0:
        raise RuntimeError(f"the load stored {r['prefill_keys']} of {args.items} keys: {r}")
    settled = settle(node, args)
    d2 = disk.counters()
    maps = node.mappings(state_dir(args))
    flushed = fsync_server_files(args)
    d3 = disk.counters()
    io = node.io()
    s = node.stats()
    rss = node.rss()
    rate = args.items / r["prefill_s"]
    t.add("server", f"`{shlex.join(node.cmd)}`")
    t.add("load", f"{fmt(args.items)} sets over {args.conns} connections, {args.bench_threads} loader threads, "
          f"nice {args.nice}; loadavg at start {load_at}, at end {loadavg()}")
    t.add("load duration", f"{r['prefill_s']:,.1f} s (strata-bench's prefill; {took:,.1f} s with its start)")
    t.add("sets/s", fmt(rate), "≥ 250,000", rate >= 250_000)
    t.add("writes settled after the load", f"{settled:.0f} s")
    items = stat(s, "curr_items")
    for name in STATS + sorted(k for k in s if k.startswith("extstore_small_")):
        t.add(f"stats {name}", s.get(name, "(absent)"))
    vm = rss["VmRSS"]
    t.add("VmRSS", f"{vm / 2**20:,.0f} MiB ({vm / 1e9:.3f} GB)", "≤ 1.2 GB", vm <= 1.2e9)
    t.add("smaps_rollup", ", ".join(f"{k} {rss[k] / 2**20:,.0f} MiB" for k in
                                    ("Rss", "Anonymous", "Pss_Anon", "Pss_File", "Pss_Shmem", "Shared_Dirty",
                                     "Private_Dirty") if k in rss))
    t.add("RSS per item loaded", f"{vm / args.items:.2f} B (per item in curr_items: {vm / max(1, items):.2f} B)")
    mapped = server_files(args)[1:]
    if mapped:
        size = sum(os.stat(f).st_blocks * 512 for f in mapped)
        t.add("<FILE>.flash files (mapped, beside the memory file)", f"{len(mapped)} files, {size / 2**20:,.1f} MiB "
              "allocated")
        for name, (size, res, dirty) in sorted(maps.items()):
            t.add(f"… mappings of {name} (before the fsync below)", f"{size / 2**20:,.1f} MiB mapped, "
                  f"{res / 2**20:,.1f} MiB resident, {dirty / 2**20:,.1f} MiB dirty")
    cache = drop_caches()
    node.renice(args.measure_nice)
    r = sample(node.port, args)
    hits = pct(r["hits"], r["keys_requested"])
    args.sample_hits = r["hits"]
    t.add(f"sample of {fmt(args.sample)} loaded keys ({cache})", f"{hits:.2f}% hit ({fmt(r['hits'])})", "≥ 95%",
          hits >= 95)
    t.add("sample: wrong values", fmt(wrong(r)), "0", wrong(r) == 0)
    t.add("sample: errors", r["errors"] or "none")
    t.print()

    store = stat(s, "extstore_bytes_written")
    admitted = stat(s, "extstore_bytes_admitted")
    dev = d2["written_bytes"] - d1["written_bytes"]
    dev_sync = d3["written_bytes"] - d1["written_bytes"]
    secs = took + settled
    w.add("device", f"{disk.path} (holds {args.flash_file})")
    w.add("device bytes written over the load and settling", f"{fmt(dev)} ({dev / 2**30:,.2f} GiB in {secs:,.0f} s)")
    w.add("… with an fsync of the server's files after it", f"{fmt(dev_sync)} ({dev_sync / 2**30:,.2f} GiB; "
          f"{', '.join(os.path.basename(f) for f in flushed)})")
    w.add("background before the load (others, page cache writeback)",
          f"{background / 2**20:,.2f} MiB/s, ~{background * secs / 2**30:,.2f} GiB over the load")
    w.add("server process: write_bytes of /proc/PID/io (its own share of the device's writes)",
          f"{fmt(io['write_bytes'])} ({io['write_bytes'] / 2**30:,.2f} GiB; cancelled "
          f"{fmt(io['cancelled_write_bytes'])}; {io['write_bytes'] / max(1, store):.4f}x extstore_bytes_written)")
    w.add("store: extstore_bytes_written", f"{fmt(store)} ({store / 2**30:,.2f} GiB)")
    w.add("store: extstore_bytes_admitted", f"{fmt(admitted)} ({admitted / 2**30:,.2f} GiB)")
    agree = dev_sync / max(1, store)
    # Others' writes to the device (the estimate from before the load) over
    # 5% of the store's make the device's count say nothing either way.
    noisy = background * secs > 0.05 * store
    w.add("device / extstore_bytes_written (with the fsync)", f"{agree:.4f}", "within 5%",
          "inconclusive (others wrote)" if noisy else abs(agree - 1) <= 0.05)
    net = (dev_sync - background * secs) / max(1, store)
    w.add("… less the background estimate", f"{net:.4f}")
    amp = dev_sync / max(1, admitted)
    w.add("write amplification: device bytes / extstore_bytes_admitted", f"{amp:.2f}x", "≤ 12x",
          "inconclusive (others wrote)" if noisy and amp > 12 else amp <= 12)
    w.add("… the server process's write_bytes / extstore_bytes_admitted", f"{io['write_bytes'] / max(1, admitted):.2f}x")
    w.add("store's own extstore_admit_write_amp", s.get("extstore_admit_write_amp"))
    w.print()


def reads(node, args, disk):
    t = Table("reads")
    node.renice(args.measure_nice)
    # The file's allocated bytes (as scale.py): what was written, from its start.
    written = os.stat(args.flash_file).st_blocks * 512 & ~((1 << 20) - 1)

    def fio_run():
        drop_caches()
        f0 = disk.sample()
        out = fio(args.flash_file, written, args.fio_seconds, 16)
        return out, Device.between(f0, disk.sample())

    # fio before and after the gets (this VM's device drifts by tens of
    # percent over minutes): the gets are held to the mean of the two.
    (fio1, fio_dev) = fio_run()
    cache = drop_caches()
    load_at = loadavg()
    s0, c0, g0 = node.stats(), disk.counters(), disk.sample()
    r = bench(node.port, args, ["--keys", args.items, "--no-prefill", "--duration", args.duration, "--seed",
                                args.seed + 1])
    s1, c1, g1 = node.stats(), disk.counters(), disk.sample()
    gets_dev = Device.between(g0, g1)
    (fio2, _) = fio_run()
    fio_iops, fio_p50, fio_p99 = ((a + b) / 2 for a, b in zip(fio1, fio2))
    hits = r["hits"]
    small_reads = delta(s0, s1, "extstore_small_set_reads", "extstore_small_log_reads")
    flash_hits = delta(s0, s1, "get_extstore")
    for when, (iops, p50, p99) in (("before", fio1), ("after", fio2)):
        t.add(f"fio {when} the gets, 4 KiB random reads, queue depth 16", f"{iops:,.0f} IOPS, p50 {p50:,.0f} µs, "
              f"p99 {p99:,.0f} µs over the flash file's first {written / 2**20:,.0f} MiB (written)")
    t.add("fio: the mean of the two", f"{fio_iops:,.0f} IOPS, p99 {fio_p99:,.0f} µs")
    t.add("gets", f"{args.duration} of uniform gets of loaded keys, {args.conns} connections, "
          f"{args.bench_threads} threads ({cache}; loadavg {load_at})")
    t.add("gets: hits", f"{pct(hits, r['keys_requested']):.2f}% of {fmt(r['keys_requested'])}")
    t.add("gets: wrong values", fmt(wrong(r)), "0", wrong(r) == 0)
    rps = r["throughput_rps"]
    t.add("gets/s", f"{rps:,.0f} ({rps / max(1, fio_iops):.2f}x fio's IOPS)", "≥ 0.6x fio",
          rps >= 0.6 * fio_iops)
    p99 = r["latency"]["p99_us"]
    t.add("gets p50 / p99", f"{r['latency']['p50_us']:,.0f} / {p99:,.0f} µs ({p99 / max(1, fio_p99):.2f}x fio's p99)",
          "p99 ≤ 2.5x fio's", p99 <= 2.5 * fio_p99)
    per_hit = small_reads / max(1, hits)
    t.add("small store reads (set + log) per hit", f"{per_hit:.4f} ({fmt(small_reads)} reads, {fmt(hits)} hits)",
          "≤ 1.05", per_hit <= 1.05)
    t.add("… per hit from flash (get_extstore)", f"{small_reads / max(1, flash_hits):.4f} ({fmt(flash_hits)} "
          f"answered from flash, {pct(flash_hits, hits):.1f}% of hits)")
    t.add("device reads per hit (its own counters)", f"{(c1['reads'] - c0['reads']) / max(1, hits):.4f}")
    for who, (rate, lat, queue) in (("fio (before)", fio_dev), ("gets", gets_dev)):
        t.add(f"the device under {who}", f"{rate:,.0f} reads/s, {lat:,.0f} µs a read, {queue:.2f} in flight")
    for name in ("extstore_small_set_reads", "extstore_small_set_hits", "extstore_small_log_reads",
                 "extstore_small_log_hits", "extstore_small_false_positives", "get_extstore", "miss_from_extstore"):
        t.add(f"Δ {name} (gets of loaded keys)", fmt(delta(s0, s1, name)))

    s0, c0 = node.stats(), disk.counters()
    r = bench(node.port, args, ["--keys", args.misses, "--key-offset", args.items, "--no-prefill", "--requests",
                                args.misses, "--seed", args.seed + 2, "--duration", "120m"])
    s1, c1 = node.stats(), disk.counters()
    misses = r["misses"]
    small_reads = delta(s0, s1, "extstore_small_set_reads", "extstore_small_log_reads")
    fp = delta(s0, s1, "extstore_small_false_positives")
    t.add(f"gets of {fmt(args.misses)} keys never set", f"{fmt(misses)} misses, {fmt(r['hits'])} hits "
          f"({r['throughput_rps']:,.0f}/s, p99 {r['latency']['p99_us']:,.0f} µs)", "every one a miss",
          r["hits"] == 0 and wrong(r) == 0)
    per_miss = small_reads / max(1, misses)
    t.add("small store reads (set + log) per miss", f"{per_miss:.4f} ({fmt(small_reads)} reads)", "≤ 0.02",
          per_miss <= 0.02)
    t.add("Δ extstore_small_false_positives (misses)", f"{fmt(fp)} ({fp / max(1, misses):.4f} a miss)")
    t.add("device reads per miss (its own counters)", f"{(c1['reads'] - c0['reads']) / max(1, misses):.4f}")
    t.print()


def start(args):
    node = Node(args.cmd, args.port, args.log)
    node.renice(args.measure_nice)
    return node


def restart(node, args):
    t = Table("restart (SIGTERM, then the same command)")
    node.renice(args.measure_nice)
    before = sample(node.port, args)
    items = stat(node.stats(), "curr_items")
    stop_s = node.term()
    cache = drop_caches()
    node = start(args)
    s = node.stats()
    after = sample(node.port, args)
    t.add("stopped by SIGTERM in", f"{stop_s:.2f} s")
    t.add(f"start to first answer ({cache})", f"{node.seconds_to_serve:.2f} s", "≤ 30 s", node.seconds_to_serve <= 30)
    t.add("curr_items before / after", f"{fmt(items)} / {fmt(stat(s, 'curr_items'))}")
    hb, ha = pct(before["hits"], args.sample), pct(after["hits"], args.sample)
    t.add("sample hits before the stop", f"{hb:.2f}%")
    kept = pct(after["hits"], before["hits"])
    t.add("sample hits after the restart", f"{ha:.2f}% ({kept:.2f}% of the hits before)", "≥ 99% of those before",
          kept >= 99)
    t.add("sample: wrong values after", fmt(wrong(after)), "0", wrong(after) == 0)
    t.print()
    return node


# The crash phase's keys and values: `ck:` keys of --key-size bytes, values
# naming (key, version), padded with a letter of their own.

def ck(i, size):
    digits = str(i)
    return ("ck:" + "0" * (size - 3 - len(digits)) + digits).encode()


def ck_value(i, version, size):
    head = b"%d:%d:" % (i, version)
    return head + bytes([97 + (i * 31 + version) % 26]) * (size - len(head))


def parse_ck_value(i, data, size):
    """The version a value names, or None if no write made it."""
    parts = data.split(b":", 2)
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit() or int(parts[0]) != i:
        return None
    version = int(parts[1])
    return version if data == ck_value(i, version, size) else None


class Writer(Reader):
    """A connection of the crash load; its keys are those i % conns == n."""

    def __init__(self, port):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""


class Ledger:
    """Every key's last acknowledged state (a version; 0: deleted) and the
    operations sent after it and not acknowledged (when the server died)."""

    def __init__(self, keys):
        self.acked = [None] * keys   # None: never acknowledged
        self.version = [0] * keys    # the last version sent
        self.unacked = {}            # key -> [states sent, not acknowledged]
        self.sent = self.acked_ops = 0


def send_batches(conns, batches, ledger, args):
    """Write one batch of (key, set?) a connection, then read each one's
    replies in order, the ledger kept: an operation is in flight from before
    it is written until its reply is read."""
    size, vsize = args.key_size, args.value_size
    for c, ops in zip(conns, batches):
        out = []
        for i, is_set in ops:
            if is_set:
                ledger.version[i] += 1
                v = ledger.version[i]
                out.append(b"set %s 0 0 %d\r\n%s\r\n" % (ck(i, size), vsize, ck_value(i, v, vsize)))
            else:
                v = 0
                out.append(b"delete %s\r\n" % ck(i, size))
            ledger.unacked.setdefault(i, []).append(v)
        c.sock.sendall(b"".join(out))
        ledger.sent += len(ops)
    for c, ops in zip(conns, batches):
        for i, _ in ops:
            line = c.readline()
            if line not in (b"STORED", b"DELETED", b"NOT_FOUND"):
                raise RuntimeError(f"crash load: {ck(i, size)} answered {line!r}")
            states = ledger.unacked[i]
            ledger.acked[i] = states.pop(0)
            if not states:
                del ledger.unacked[i]
            ledger.acked_ops += 1


def crash_load(node, args, ledger):
    """Set every key once; then sets and deletes of random keys until the
    server is killed, --crash-seconds later (the stats read just before).
    Returns (fill seconds, load seconds, stats at the fill's end, stats at
    the kill)."""
    conns = [Writer(node.port) for _ in range(args.crash_conns)]
    n, batch = len(conns), args.crash_batch
    t0 = time.monotonic()
    mine = [list(range(c, args.crash_keys, n)) for c in range(n)]
    for at in range(0, max(len(m) for m in mine), batch):
        send_batches(conns, [[(i, True) for i in m[at:at + batch]] for m in mine], ledger, args)
    filled = time.monotonic()
    s_fill = node.stats()
    at_kill = {}
    killed = threading.Event()

    def killer():
        time.sleep(max(0.0, args.crash_seconds - 0.2))
        r = Reader()
        r.port, r.proc = node.port, node.proc
        r.await_serving("stats before the kill", timeout=5)
        at_kill.update(r.stats())
        killed.set()
        node.proc.kill()
    thread = threading.Thread(target=killer)
    thread.start()
    rng = random.Random(args.seed)
    try:
        while True:
            batches = [[(rng.randrange(c, args.crash_keys, n), rng.random() < 0.75) for _ in range(batch)]
                       for c in range(n)]
            send_batches(conns, batches, ledger, args)
    except OSError:  # ConnectionError too: the server is gone
        if not killed.is_set():
            raise
    thread.join()
    node.proc.wait()
    return filled - t0, time.monotonic() - filled, s_fill, at_kill


def check_ledger(node, args, ledger):
    """Read every crash key back: counts by outcome."""
    c = Writer(node.port)
    size, vsize = args.key_size, args.value_size
    out = dict(ok=0, lost=0, stale=0, corrupt=0, resurrected=0, set_expected=0, set_served=0, acked_keys=0,
               unacked_keys=0)
    per = 100
    for first in range(0, args.crash_keys, per):
        idx = list(range(first, min(first + per, args.crash_keys)))
        c.sock.sendall(b"get " + b" ".join(ck(i, size) for i in idx) + b"\r\n")
        got = {}
        while True:
            line = c.readline()
            if line == b"END":
                break
            _, k, _, n = line.split()
            got[int(k[3:])] = c.read_exact(int(n) + 2)[:-2]
        for i in idx:
            acked = ledger.acked[i]
            later = ledger.unacked.get(i, [])
            ok_states = ([acked] if acked is not None else []) + later
            data = got.get(i)
            if later:
                out["unacked_keys"] += 1
            else:
                out["acked_keys"] += 1
            if data is None:
                # A miss is right after a delete (acknowledged or in flight).
                if 0 in ok_states:
                    out["ok"] += 1
                else:
                    out["lost"] += 1
            else:
                v = parse_ck_value(i, data, vsize)
                if v is None or v == 0 or v > ledger.version[i]:
                    out["corrupt"] += 1
                elif v in ok_states:
                    out["ok"] += 1
                elif acked == 0:
                    out["resurrected"] += 1
                else:
                    out["stale"] += 1
            if acked and not later:
                out["set_expected"] += 1
                out["set_served"] += int(data is not None and parse_ck_value(i, data, vsize) == acked)
    c.sock.close()
    return out


def crash(node, args):
    t = Table(f"kill -9 under sets and deletes of {fmt(args.crash_keys)} small keys")
    node.renice(args.measure_nice)
    s0 = node.stats()
    ledger = Ledger(args.crash_keys)
    fill_s, load_s, s1, s2 = crash_load(node, args, ledger)
    sent, acked = ledger.sent, ledger.acked_ops
    node = start(args)
    s3 = node.stats()
    out = check_ledger(node, args, ledger)
    t.add("load", f"{fmt(args.crash_keys)} keys set once ({fill_s:.1f} s), then 75% sets / 25% deletes of random "
          f"ones over {args.crash_conns} connections in batches of {args.crash_batch} for {load_s:.1f} s until kill "
          f"-9: {fmt(sent)} sent, {fmt(acked)} acknowledged ({acked / max(1e-9, fill_s + load_s):,.0f}/s)")
    for name in ("extstore_small_items_admitted", "extstore_small_tombstones_written", "extstore_small_merges",
                 "extstore_small_log_blocks_written", "evictions"):
        t.add(f"Δ {name}: fill / sets and deletes", f"{fmt(delta(s0, s1, name))} / {fmt(delta(s1, s2, name))}")
    t.add("start to first answer after kill -9", f"{node.seconds_to_serve:.2f} s", "≤ 30 s",
          node.seconds_to_serve <= 30)
    t.add("restart_damaged after", s3.get("restart_damaged", "(absent)"))
    stale = out["stale"] + out["resurrected"]
    t.add("stale (an older state than the last acknowledged)", fmt(stale), "0", stale == 0)
    t.add("… of which deleted keys back", fmt(out["resurrected"]))
    t.add("corrupt (a value no write made)", fmt(out["corrupt"]), "0", out["corrupt"] == 0)
    t.add("lost (a miss where a set was acknowledged last)", fmt(out["lost"]))
    t.add("keys with operations in flight at the kill", fmt(out["unacked_keys"]))
    served = pct(out["set_served"], out["set_expected"])
    t.add("at their last acknowledged set's version", f"{served:.3f}% of {fmt(out['set_expected'])}", "≥ 99%",
          served >= 99)
    t.add("at their last acknowledged (or an in-flight) state, all keys", f"{pct(out['ok'], args.crash_keys):.3f}%",
          "≥ 99%", pct(out["ok"], args.crash_keys) >= 99)
    t.add("curr_items before the crash load / after the restart", f"{fmt(stat(s0, 'curr_items'))} / "
          f"{fmt(stat(s3, 'curr_items'))}")
    r = sample(node.port, args)
    t.add("sample of loaded keys after: hits", f"{pct(r['hits'], r['keys_requested']):.2f}%")
    t.add("sample of loaded keys after: wrong values", fmt(wrong(r)), "0", wrong(r) == 0)
    t.print()
    return node


def remove_files(args):
    for f in (args.flash_file, args.mem_file, args.mem_file + ".journal", args.log):
        if os.path.exists(f):
            os.unlink(f)
    if os.path.isdir(state_dir(args)):
        shutil.rmtree(state_dir(args))


PHASES = ("load", "reads", "restart", "crash")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, of {','.join(PHASES)}")
    p.add_argument("--items", type=int, default=300_000_000)
    p.add_argument("--key-size", type=int, default=20)
    p.add_argument("--value-size", type=int, default=64)
    p.add_argument("--memory-mb", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2, help="server -t")
    p.add_argument("--flash-gb", type=int, default=45)
    p.add_argument("--flash-dir", required=True)
    p.add_argument("--memory-file-dir", default="/dev/shm")
    p.add_argument("--no-memory-file", action="store_true", help="no -e (and no restart or crash phase)")
    p.add_argument("--conns", type=int, default=16, help="connections of the load and of the gets")
    p.add_argument("--bench-threads", type=int, default=2, help="strata-bench threads")
    p.add_argument("--sample", type=int, default=1_000_000, help="loaded keys in the sample")
    p.add_argument("--misses", type=int, default=1_000_000, help="gets of keys never set")
    p.add_argument("--duration", default="30s", help="gets of loaded keys in the reads phase")
    p.add_argument("--fio-seconds", type=int, default=20)
    p.add_argument("--settle", type=float, default=120, help="at most this long for the flash writes to stop")
    p.add_argument("--background-seconds", type=float, default=5)
    p.add_argument("--crash-keys", type=int, default=4_000_000,
                   help="more than RAM's small queue holds, so versions leave RAM for flash between rewrites")
    p.add_argument("--crash-seconds", type=float, default=60, help="sets and deletes after the fill, then kill -9")
    p.add_argument("--crash-conns", type=int, default=4)
    p.add_argument("--crash-batch", type=int, default=500)
    p.add_argument("--seed", type=int, default=45)
    p.add_argument("--nice", type=int, default=10, help="the load's niceness (server and loader)")
    p.add_argument("--measure-nice", type=int, default=0,
                   help="the server's niceness in the measured phases (strata-bench and fio run at this script's)")
    p.add_argument("--extra", default="", help="more server flags")
    p.add_argument("--keep", action="store_true", help="keep the flash and memory files (a later run may skip load)")
    p.add_argument("--strata", default=strata_bin(), help="the server binary (copy it if you build meanwhile)")
    args = p.parse_args()
    phases = [x for x in args.phases.split(",") if x]
    if any(x not in PHASES for x in phases):
        p.error(f"--phases: of {','.join(PHASES)}")
    if args.no_memory_file and ("restart" in phases or "crash" in phases):
        p.error("restart and crash need the memory file (-e)")
    if args.no_memory_file and "load" not in phases:
        p.error("without -e nothing survives for a later run: include load")
    os.makedirs(args.flash_dir, exist_ok=True)
    args.flash_file = os.path.join(args.flash_dir, "small.dat")
    args.mem_file = os.path.join(args.memory_file_dir, "small-bench.mem")
    args.log = os.path.join(args.flash_dir, "small.log")
    args.port = free_port()
    cmd = (["nice", "-n", str(args.nice)] if args.nice else []) + [
        args.strata, "-p", str(args.port), "-m", str(args.memory_mb), "-t", str(args.threads)]
    cmd += [] if args.no_memory_file else ["-e", args.mem_file]
    cmd += ["-o", f"ext_path={args.flash_file}:{args.flash_gb}G"] + shlex.split(args.extra)
    args.cmd = cmd
    print(f"command: {shlex.join(sys.argv)}")
    print(f"server:  {shlex.join(cmd)}")
    print(f"phases:  {','.join(phases)}; {os.cpu_count()} CPUs, loadavg {loadavg()}", flush=True)
    if "load" in phases:
        remove_files(args)
    elif not os.path.exists(args.flash_file) or not os.path.exists(args.mem_file):
        sys.exit(f"{args.flash_file} or {args.mem_file} missing: run --phases load --keep first")
    disk = Disk(args.flash_dir)
    node = None
    try:
        node = Node(cmd, args.port, args.log)
        if "load" not in phases:
            node.renice(args.measure_nice)
            print(f"started on the kept files: serving after {node.seconds_to_serve:.2f} s, curr_items "
                  f"{stat(node.stats(), 'curr_items'):,}", flush=True)
        for phase in PHASES:
            if phase not in phases:
                continue
            if phase == "load":
                load(node, args, disk)
            elif phase == "reads":
                reads(node, args, disk)
            elif phase == "restart":
                node = restart(node, args)
            else:
                node = crash(node, args)
    finally:
        if node is not None and node.alive():
            if args.keep and not args.no_memory_file:
                node.term()
            else:
                node.proc.kill()
                node.proc.wait()
        if not args.keep:
            remove_files(args)


if __name__ == "__main__":
    main()
