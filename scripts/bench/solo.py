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
"""

import argparse
import json
import os
import subprocess
import sys

from common import Server, strata_bin

BENCH = os.path.join(os.path.dirname(strata_bin()), "strata-bench")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(command, args):
    server = Server(command, cpu=0)
    try:
        load = [BENCH, "run", "--server", f"127.0.0.1:{server.port}", "--preset", args.preset, "--load-cpu", "1", "--quiet"]
        subprocess.run(load + ["--duration", "1s"] + args.extra, stdout=subprocess.DEVNULL, check=True)
        before = cpu_seconds(server.proc.pid)
        run = subprocess.run(load + ["--duration", args.duration, "--no-prefill", "--json", "-"] + args.extra,
                             capture_output=True, text=True, check=True)
        spent = cpu_seconds(server.proc.pid) - before
    finally:
        server.stop()
    report = json.loads(run.stdout)
    return report["throughput_rps"], spent / report["requests"] * 1e6, report["latency"]["p99_us"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="memaslap")
    parser.add_argument("--duration", default="4s")
    parser.add_argument("--rounds", type=int, default=4)
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
            tput, cpu, p99 = measure(command, args)
            results[command].append((tput, cpu, p99))
            print(f"round {r + 1}  {tput:9.0f} req/s  CPU {cpu:6.3f} µs/req  p99 {p99:8.1f} µs  {command}", flush=True)

    def mean(command, i):
        return sum(x[i] for x in results[command]) / len(results[command])

    base = args.commands[0]
    print("\n| server | req/s | ratio | CPU µs/req | ratio | p99 µs (mean) | ratio |")
    print("|---|---|---|---|---|---|---|")
    for command in args.commands:
        t, c, p = (mean(command, i) for i in range(3))
        print(f"| `{command}` | {t:.0f} | {t / mean(base, 0):.3f} | {c:.2f} | {c / mean(base, 1):.3f} | {p:.0f} | {p / mean(base, 2):.3f} |")


if __name__ == "__main__":
    main()
