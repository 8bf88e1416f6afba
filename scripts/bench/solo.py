#!/usr/bin/env python3
"""Servers one at a time under the same strata-bench load: throughput, p99
and server CPU per request (utime+stime of every thread, from /proc).

`strata-bench compare` keeps both servers up for the whole run, which is
right for servers that sleep when idle, but a server that polls (io_uring
SQPOLL, a spinning loop) takes the shared core from the other one. This
runs each command alone, round robin: each server pinned to CPU 0, the load
to CPU 1, a 1-s warm-up run (which also sets every key), then the measured
run. The first command is the baseline for the ratios.

    scripts/bench/solo.py --preset memaslap --duration 4s --rounds 4 \\
        "memcached -p {port} -U 0 -u root -t 1" "target/release/strata -p {port} -t 1"

Extra strata-bench options go after `--`, e.g. `-- --rate 80000`.

`--preset memcaslap` runs libmemcached's memaslap (`memcaslap -c 64 -T 1`,
its default 90/10 mix of 64-byte keys and 1 KiB values, pinned to the load
CPU like the others) instead of strata-bench: the issue-17 depth-1 figure
asks for both side by side. It prints no latency percentile (p99 shows 0);
extra memcaslap options go after `--`.

`--server-cpus 0,1 --load-cpu none` lets a multi-threaded server and the
load share both cores (the issue-17 `-t 2` multi-get figure). `--perf`
also counts the server's system calls, io_uring submissions and futex
calls per request with `perf stat -p` over the measured run (counts that a
busy machine moves far less than time; this VM exposes no hardware
counters, so instructions and cycles are not available).
"""

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

from common import Server, strata_bin

BENCH = os.environ.get("STRATA_BENCH", os.path.join(os.path.dirname(strata_bin()), "strata-bench"))


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


PERF_EVENTS = ["raw_syscalls:sys_enter", "io_uring:io_uring_submit_req", "syscalls:sys_enter_futex"]
PERF_NAMES = ["syscalls", "uring_sqes", "futex"]


def perf_start(pid):
    out = tempfile.NamedTemporaryFile(prefix="solo-perf-", suffix=".txt", delete=False)
    proc = subprocess.Popen(["perf", "stat", "-x,", "-e", ",".join(PERF_EVENTS), "-p", str(pid), "-o", out.name],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, out.name


def perf_stop(perf):
    proc, path = perf
    proc.send_signal(signal.SIGINT)
    proc.wait()
    counts = {}
    for line in open(path):
        fields = line.strip().split(",")
        if len(fields) > 2 and fields[2] in PERF_EVENTS and fields[0].replace(".", "").isdigit():
            counts[PERF_NAMES[PERF_EVENTS.index(fields[2])]] = float(fields[0])
    os.unlink(path)
    return counts


def measure(command, args):
    server = Server(command, cpu=args.server_cpus)
    try:
        if args.preset == "memcaslap":
            # libmemcached's memaslap: its default 90/10 mix of 64-byte keys
            # and 1 KiB values, 64 connections, one request in flight each.
            load = ["memcaslap", "-s", f"127.0.0.1:{server.port}", "-c", "64", "-T", "1"] + args.extra
            if args.load_cpu != "none":
                load = ["taskset", "-c", args.load_cpu] + load
            warm, measured = load + ["-t", "1s"], load + ["-t", args.duration]
        else:
            load = [BENCH, "run", "--server", f"127.0.0.1:{server.port}", "--preset", args.preset, "--quiet"]
            if args.load_cpu != "none":
                load += ["--load-cpu", args.load_cpu]
            warm = load + ["--duration", "1s"] + args.extra
            measured = load + ["--duration", args.duration, "--no-prefill", "--json", "-"] + args.extra
        subprocess.run(warm, stdout=subprocess.DEVNULL, check=True)
        perf = perf_start(server.proc.pid) if args.perf else None
        before = cpu_seconds(server.proc.pid)
        load_before, wall_before = children_cpu(), time.monotonic()
        run = subprocess.run(measured, capture_output=True, text=True, check=True)
        load_spent, wall = children_cpu() - load_before, time.monotonic() - wall_before
        spent = cpu_seconds(server.proc.pid) - before
        counts = perf_stop(perf) if perf else {}
    finally:
        server.stop()
    report = memcaslap_report(run.stdout) if args.preset == "memcaslap" else json.loads(run.stdout)
    n = report["requests"]
    per = {k: v / n for k, v in counts.items()}
    # How busy each side was over the measured run (1.0 = a whole core):
    # the side near 1.0 is the limit.
    busy = (spent / wall, load_spent / wall)
    if "mix" in report:
        print(f"         {report['mix']}", flush=True)
    return report["throughput_rps"], spent / n * 1e6, report["latency"]["p99_us"], per, busy


def memcaslap_report(text):
    """memcaslap's closing line, `Run time: 4.0s Ops: 551426 TPS: 137856 ...`,
    in strata-bench's JSON shape (memcaslap reports no latency percentile)."""
    line = next((l for l in text.splitlines() if l.startswith("Run time:")), None)
    if line is None:
        raise subprocess.CalledProcessError(3, "memcaslap", output="no summary")
    fields = line.split()
    ops, tps = int(fields[fields.index("Ops:") + 1]), float(fields[fields.index("TPS:") + 1])
    count = {l.split(":")[0]: int(l.split()[1]) for l in text.splitlines() if l.split(":")[0] in ("cmd_get", "cmd_set", "get_misses")}
    if ops == 0:
        raise subprocess.CalledProcessError(3, "memcaslap", output="no operations")
    # memcaslap sets each key before it gets it, and decides from the
    # replies: a server it never sees as stored gets a load of sets only
    # (Pogocache: cmd_get 0), which is not the 90/10 mix; the round line
    # shows the mix memcaslap ran.
    gets, sets = count.get("cmd_get", 0), count.get("cmd_set", 0)
    mix = f"memcaslap: {gets} gets, {sets} sets ({100 * gets / max(gets + sets, 1):.0f}% gets), {count.get('get_misses', 0)} misses"
    return {"requests": ops, "throughput_rps": tps, "latency": {"p99_us": 0.0}, "mix": mix}


def children_cpu():
    """utime+stime of the finished children (the load runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="memaslap")
    parser.add_argument("--duration", default="4s")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--server-cpus", default="0", help="taskset CPU list for the server")
    parser.add_argument("--load-cpu", default="1", help="CPU for the load, or none")
    parser.add_argument("--perf", action="store_true", help="count server syscalls, io_uring submissions, futex calls per request")
    parser.add_argument("commands", nargs="+", help="server commands with {port}")
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    args = parser.parse_args(argv)
    args.extra = extra
    results = {c: [] for c in args.commands}
    for r in range(args.rounds):
        for command in args.commands:
            try:
                tput, cpu, p99, per, busy = measure(command, args)
            except subprocess.CalledProcessError as e:
                # An overloaded machine can make the load generator give up
                # (exit 3: the server did not answer its first probe in time).
                print(f"round {r + 1}  failed (load exit {e.returncode}), not counted  {command}", flush=True)
                continue
            results[command].append((tput, cpu, p99) + tuple(per.get(n, 0.0) for n in PERF_NAMES))
            counted = "".join(f"  {per.get(n, 0.0):6.3f} {n}/req" for n in PERF_NAMES) if args.perf else ""
            print(f"round {r + 1}  {tput:9.0f} req/s  CPU {cpu:6.3f} µs/req  p99 {p99:8.1f} µs{counted}"
                  f"  busy: server {busy[0]:4.2f} load {busy[1]:4.2f}  {command}", flush=True)

    def mean(command, i):
        return sum(x[i] for x in results[command]) / max(len(results[command]), 1)

    base = args.commands[0]
    extra_head = "".join(f" {n}/req |" for n in PERF_NAMES) if args.perf else ""
    print(f"\n| server | req/s | ratio | CPU µs/req | ratio | p99 µs (mean) | ratio |{extra_head}")
    print("|---|---|---|---|---|---|---|" + ("---|" * len(PERF_NAMES) if args.perf else ""))
    for command in args.commands:
        t, c, p = (mean(command, k) for k in range(3))
        p_ratio = f"{p / mean(base, 2):.3f}" if mean(base, 2) else "-"
        row = f"| `{command}` | {t:.0f} | {t / mean(base, 0):.3f} | {c:.2f} | {c / mean(base, 1):.3f} | {p:.0f} | {p_ratio} |"
        if args.perf:
            row += "".join(f" {mean(command, 3 + k):.3f} |" for k in range(len(PERF_NAMES)))
        print(row)


if __name__ == "__main__":
    main()
