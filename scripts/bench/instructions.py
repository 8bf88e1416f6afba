#!/usr/bin/env python3
"""User-space instructions per request: each server alone under a strata-bench
preset (as solo.py: server pinned to CPU 0, load on CPU 1, a warm-up that
sets every key, then the measured run), run under valgrind's callgrind,
whose counters are zeroed after the warm-up and dumped after the run.
Instruction counts do not move with the machine's noise, unlike time; the
VM this was written on has no hardware counters (`perf stat -e
instructions` says "not supported"), hence callgrind. Kernel work is not
counted. Under callgrind a server runs ~50x slower, so throughput means
nothing here. Valgrind does not know io_uring: run strata with
`-o io_engine=epoll`.

    scripts/bench/instructions.py --preset memaslap --duration 4s --rounds 3 \\
        "/tmp/strata-old -p {port} -t 1 -o io_engine=epoll" \\
        "target/release/strata -p {port} -t 1 -o io_engine=epoll"
"""
import argparse, glob, json, os, subprocess, sys

sys.path.insert(0, os.path.dirname(__file__))
from common import Server, strata_bin  # noqa: E402

BENCH = os.path.join(os.path.dirname(strata_bin()), "strata-bench")


def measure(command, args):
    server = Server(f"valgrind --tool=callgrind --callgrind-out-file={args.out}.%p {command}", cpu=0)
    try:
        server.sock.sendall(b"version\r\n")
        server.readline()
        load = [BENCH, "run", "--server", f"127.0.0.1:{server.port}", "--preset", args.preset, "--load-cpu", "1", "--quiet"]
        load += args.bench_arg
        subprocess.run(load + ["--duration", args.warmup], stdout=subprocess.DEVNULL, check=True)
        if args.pause_clock:
            server.sock.sendall(b"debugtime p\r\n")
            reply = server.readline()
            assert reply.startswith(b"OK"), f"debugtime p: {reply!r} (strata with STRATA_DEBUGTIME=1 only)"
        ctl = ["callgrind_control"]
        subprocess.run(ctl + ["-z", str(server.proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        run = subprocess.run(load + ["--duration", args.duration, "--no-prefill", "--json", "-"], capture_output=True, text=True, check=True)
        subprocess.run(ctl + ["-d", str(server.proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    finally:
        server.stop()
    # Part 1 is the dump after the run (part 2, at exit, is the stop).
    out = f"{args.out}.{server.proc.pid}.1"
    ir = next(int(l.split()[1]) for l in open(out) if l.startswith("summary:"))
    for f in glob.glob(f"{args.out}.{server.proc.pid}*"):
        if args.keep and f == out:
            print(f"profile kept: {out} (callgrind_annotate --inclusive=yes {out})", flush=True)
            continue
        os.remove(f)
    report = json.loads(run.stdout)
    return report["throughput_rps"], ir / report["requests"], report["requests"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="memaslap")
    ap.add_argument("--duration", default="4s")
    ap.add_argument("--warmup", default="3s",
                    help="the warm-up run (prefill, then the preset's load), not counted; a read-heavy preset "
                         "over many keys needs long enough for every item to be read a few times (under "
                         "callgrind a 48-key get preset reads each of 100k keys ~1.5 times a second)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="/tmp/instructions.callgrind")
    ap.add_argument("--keep", action="store_true", help="keep each measured run's callgrind profile")
    ap.add_argument("--bench-arg", action="append", default=[],
                    help="one more strata-bench argument after the preset (repeat), e.g. --bench-arg=--get-ratio=0")
    ap.add_argument("--pause-clock", action="store_true",
                    help="stop the server's clock after the warm-up (strata's `debugtime p`, set here with "
                         "STRATA_DEBUGTIME=1): under callgrind a second holds ~50x fewer requests, so reads "
                         "that write an item's access time once a second are ~50x as frequent as at full speed "
                         "(the 48-key multi-gets' bumps); a paused clock counts none of them")
    ap.add_argument("commands", nargs="+")
    args = ap.parse_args()
    if args.pause_clock:
        os.environ["STRATA_DEBUGTIME"] = "1"
    for r in range(args.rounds):
        for command in args.commands:
            _, per_request, n = measure(command, args)
            print(f"round {r + 1}  {per_request:7.0f} user instructions/request ({n} requests)  {command}", flush=True)


if __name__ == "__main__":
    main()
