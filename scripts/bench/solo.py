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
import signal
import subprocess
import sys
import tempfile

from common import Server, strata_bin

BENCH = os.path.join(os.path.dirname(strata_bin()), "strata-bench")


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
        load = [BENCH, "run", "--server", f"127.0.0.1:{server.port}", "--preset", args.preset, "--quiet"]
        if args.load_cpu != "none":
            load += ["--load-cpu", args.load_cpu]
        subprocess.run(load + ["--duration", "1s"] + args.extra, stdout=subprocess.DEVNULL, check=True)
        perf = perf_start(server.proc.pid) if args.perf else None
        before = cpu_seconds(server.proc.pid)
        run = subprocess.run(load + ["--duration", args.duration, "--no-prefill", "--json", "-"] + args.extra,
                             capture_output=True, text=True, check=True)
        spent = cpu_seconds(server.proc.pid) - before
        counts = perf_stop(perf) if perf else {}
    finally:
        server.stop()
    report = json.loads(run.stdout)
    n = report["requests"]
    per = {k: v / n for k, v in counts.items()}
    return report["throughput_rps"], spent / n * 1e6, report["latency"]["p99_us"], per


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
                tput, cpu, p99, per = measure(command, args)
            except subprocess.CalledProcessError as e:
                # An overloaded machine can make the load generator give up
                # (exit 3: the server did not answer its first probe in time).
                print(f"round {r + 1}  failed (strata-bench exit {e.returncode}), not counted  {command}", flush=True)
                continue
            results[command].append((tput, cpu, p99) + tuple(per.get(n, 0.0) for n in PERF_NAMES))
            counted = "".join(f"  {per.get(n, 0.0):6.3f} {n}/req" for n in PERF_NAMES) if args.perf else ""
            print(f"round {r + 1}  {tput:9.0f} req/s  CPU {cpu:6.3f} µs/req  p99 {p99:8.1f} µs{counted}  {command}", flush=True)

    def mean(command, i):
        return sum(x[i] for x in results[command]) / max(len(results[command]), 1)

    base = args.commands[0]
    extra_head = "".join(f" {n}/req |" for n in PERF_NAMES) if args.perf else ""
    print(f"\n| server | req/s | ratio | CPU µs/req | ratio | p99 µs (mean) | ratio |{extra_head}")
    print("|---|---|---|---|---|---|---|" + ("---|" * len(PERF_NAMES) if args.perf else ""))
    for command in args.commands:
        t, c, p = (mean(command, k) for k in range(3))
        row = f"| `{command}` | {t:.0f} | {t / mean(base, 0):.3f} | {c:.2f} | {c / mean(base, 1):.3f} | {p:.0f} | {p / mean(base, 2):.3f} |"
        if args.perf:
            row += "".join(f" {mean(command, 3 + k):.3f} |" for k in range(len(PERF_NAMES)))
        print(row)


if __name__ == "__main__":
    main()
