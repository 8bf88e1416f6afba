#!/usr/bin/env python3
"""A long run of Strata under load and faults (`scripts/bench/soak.sh [MINUTES]`).

The server runs with the flash tier and a memory file. Against it, at the
same time:
- the ledger (soak_ledger.py): clients over the three protocols that know
  every write they had acknowledged, their gets checked as they come, at
  --ledger-share (10%) of the rate strata-bench reaches closed loop alone
  (the three protocols at once);
- strata-bench over text, meta and binary, open loop at the rest of
  --load (70% - 10%) of the rate each protocol reaches closed loop beside
  the ledger and the rough clients, 90% gets, values checked;
- rough clients (soak_chaos.py): connection storms up to `-c`, requests
  stalled mid-way, damaged requests.
Every --interval seconds (180) the server is stopped, by SIGTERM and by
`kill -9` in turn, and started again on its files; the ledger then reads
every key back. At the end: wrong values, stale values, acknowledged
writes lost (after graceful stops: must be 0; after kill -9: counted),
RSS over time, errors by kind. A benchmark, not a CI test."""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

from common import BENCH, Reader, free_port, strata_bin
from soak_chaos import Chaos
from soak_ledger import Conn, Gone, Ledger

PROTOCOLS = ("text", "meta", "binary")


class Node(Reader):
    def __init__(self, args, port):
        self.port = port
        cmd = [args.strata, "-p", str(port), "-m", str(args.memory_mb), "-t", str(args.threads), "-c",
               str(args.maxconns), "-e", args.mem_file, "-o", f"ext_path={args.dir}/soak.dat:{args.flash_gb}G"]
        with open(os.path.join(args.dir, "server.log"), "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        self.seconds_to_serve = self.await_serving(" ".join(cmd), timeout=300)
        self.sock.close()

    def rss(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None

    def stats(self):
        self.await_serving("stats", timeout=5)
        s = super().stats()
        self.sock.close()
        return s

    def stop(self, how):
        """SIGTERM or SIGKILL; the seconds until the process was gone."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM if how == "term" else signal.SIGKILL)
        self.proc.wait(timeout=600)
        return time.monotonic() - t0


def bench(args, port, proto, seconds, rate=None, prefill=False):
    """One strata-bench process over `proto` (its own key range): Popen."""
    k = PROTOCOLS.index(proto)
    cmd = [BENCH, "run", "--server", f"127.0.0.1:{port}", "--protocol", proto, "--keys", str(args.bench_keys),
           "--key-offset", str(k * args.bench_keys), "--key-size", "32", "--value-size", args.value_size,
           "--get-ratio", "0.9", "--conns", str(args.bench_conns), "--duration", f"{seconds}s", "--seed",
           str(k + 1), "--quiet", "--json", "-"]
    if rate:
        cmd += ["--rate", str(int(rate))]
    cmd += ["--prefill-conns", "4"] if prefill else ["--no-prefill"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p):
    out, err = p.communicate()
    if p.returncode != 0:
        return {"failed": f"exit {p.returncode}: {err.strip()[-500:]}"}
    return json.loads(out)


def wrong(r):
    e = r.get("errors", {})
    return sum(e.get(k, 0) for k in ("value_mismatch", "unexpected_reply", "bad_reply"))


class Sampler(threading.Thread):
    """The server's RSS every 5 s: (seconds since the start, bytes)."""

    def __init__(self, soak):
        super().__init__(daemon=True)
        self.soak, self.samples = soak, []

    def run(self):
        while not self.soak.ledger.done.is_set():
            rss = self.soak.node.rss() if self.soak.node else None
            if rss:
                self.samples.append((time.monotonic() - self.soak.t0, rss))
            time.sleep(5)


class Probe(threading.Thread):
    """A `mn` every 100 ms on a connection of its own: how long the server
    takes to answer one request, whatever the rest are doing (its worst
    answers show stalls that rates and percentiles of the load hide)."""

    def __init__(self, ledger):
        super().__init__(daemon=True)
        self.ledger, self.times = ledger, []

    def run(self):
        while not self.ledger.done.is_set():
            self.ledger.up.wait()
            gen = self.ledger.generation
            try:
                c = Conn(self.ledger.port)
                while not self.ledger.done.is_set() and gen == self.ledger.generation and self.ledger.up.is_set():
                    t0 = time.monotonic()
                    c.send(b"mn\r\n")
                    if c.line() != b"MN":
                        break
                    self.times.append((t0, time.monotonic() - t0))
                    time.sleep(0.1)
                c.close()
            except (OSError, Gone):
                pass
            self.ledger.await_restart(gen)


class Soak:
    def __init__(self, args):
        self.args = args
        self.port = free_port()
        self.node = None
        self.ledger = Ledger(self.port, args.ledger_clients, args.ledger_keys)
        self.chaos = Chaos(self.ledger, args.maxconns)
        self.rows, self.bench = [], {p: [] for p in PROTOCOLS}
        self.restarts = []

    def run(self):
        a = self.args
        self.t0 = time.monotonic()
        self.node = Node(a, self.port)
        self.sampler = Sampler(self)
        self.sampler.start()
        print(f"server: {' '.join(self.node.proc.args)}", flush=True)
        procs = [bench(a, self.port, p, 1, prefill=True) for p in PROTOCOLS]
        for p in procs:
            r = finish(p)
            if "failed" in r:
                sys.exit(f"prefill: {r['failed']}")
        print(f"prefilled {3 * a.bench_keys:,} keys in {time.monotonic() - self.t0:.0f} s", flush=True)
        def closed_loop():
            procs = [bench(a, self.port, p, a.capacity_seconds) for p in PROTOCOLS]
            return {p: finish(q)["throughput_rps"] for p, q in zip(PROTOCOLS, procs)}
        alone = closed_loop()
        # The ledger's share of the load: of what strata-bench reached alone.
        self.ledger.rate = a.ledger_share * sum(alone.values())
        self.ledger.start()
        if not a.no_chaos:
            self.chaos.start()
        # strata-bench's: of what it reaches beside the ledger and the rough clients.
        beside = closed_loop()
        self.rates = {p: (a.load - a.ledger_share) * c for p, c in beside.items()}
        print("capacity (strata-bench closed loop, the three at once): alone " +
              ", ".join(f"{p} {c:,.0f}/s" for p, c in alone.items()) + "; beside the ledger and the rough clients " +
              ", ".join(f"{p} {c:,.0f}/s" for p, c in beside.items()) +
              f"\nload: the ledger {self.ledger.rate:,.0f}/s ({a.ledger_share:.0%} of alone), strata-bench open loop "
              f"at {a.load - a.ledger_share:.0%} of beside: " + ", ".join(f"{p} {r:,.0f}/s" for p, r in self.rates.items()),
              flush=True)
        self.probe = Probe(self.ledger)
        self.probe.start()
        end = self.t0 + a.minutes * 60
        k = 0
        while time.monotonic() < end - 30:
            seconds = int(min(a.interval, end - time.monotonic()))
            procs = [bench(a, self.port, p, seconds - 3, rate=self.rates[p]) for p in PROTOCOLS]
            for p, q in zip(PROTOCOLS, procs):
                r = finish(q)
                self.bench[p].append(r)
            how = "term" if k % 2 == 0 else "kill"
            self.restart(how, time.monotonic() >= end - 30)
            k += 1
        if not self.restarts or self.restarts[-1]["how"] != "term":
            self.restart("term", True)
        self.ledger.done.set()
        self.node.stop("term")
        return self.report()

    def restart(self, how, last):
        a = self.args
        s = self.node.stats()
        self.ledger.pause()
        time.sleep(0.2)  # the ledger's writers in the middle of batches
        down = self.node.stop(how)
        parked = self.ledger.all_parked()
        self.node = Node(a, self.port)
        check = self.ledger.check(self.port)
        after = self.node.stats()
        row = dict(how=how, at=time.monotonic() - self.t0, stop_s=down, serve_s=self.node.seconds_to_serve,
                   parked=parked, items_before=int(s.get("curr_items", 0)), items_after=int(after.get("curr_items", 0)),
                   evictions=int(s.get("evictions", 0)), **check)
        self.restarts.append(row)
        print(f"{row['at'] / 60:5.1f} min  {how:4}  down {down:.2f} s, serving after {row['serve_s']:.2f} s; items "
              f"{row['items_before']:,} -> {row['items_after']:,} (evictions since its start {row['evictions']:,}); ledger: ok "
              f"{check['ok']:,}, wrong {check['wrong']}, stale {check['stale']}, lost {check['lost']}", flush=True)
        if not last:
            self.ledger.resume(self.port)

    def report(self):
        a, failed = self.args, []
        print(f"\n== soak: {a.minutes} min, a restart every {a.interval} s ==")
        o = self.ledger.outcomes
        print(f"ledger: {self.ledger.counts()}")
        print(f"ledger outcomes: {o}")
        lost_term = sum(r["lost"] for r in self.restarts if r["how"] == "term")
        lost_kill = sum(r["lost"] for r in self.restarts if r["how"] == "kill")
        print(f"acknowledged writes lost: {lost_term} after SIGTERM restarts, {lost_kill} after kill -9 "
              f"({sum(1 for r in self.restarts if r['how'] == 'term')} / "
              f"{sum(1 for r in self.restarts if r['how'] == 'kill')} restarts)")
        for p in PROTOCOLS:
            runs = self.bench[p]
            ok = [r for r in runs if "failed" not in r]
            print(f"bench {p}: {len(ok)}/{len(runs)} runs; requests {sum(r['requests'] for r in ok):,}; rate "
                  + " ".join(f"{r['throughput_rps']:,.0f}" for r in ok) + "; hits "
                  + " ".join(f"{100 * r['hits'] / max(1, r['keys_requested']):.1f}%" for r in ok)
                  + f"; wrong {sum(wrong(r) for r in ok)}; p99 µs "
                  + " ".join(f"{r['latency']['p99_us']:.0f}" for r in ok if 'p99_us' in r.get('latency', {}))
                  + f"; errors {merge(r['errors'] for r in ok)}")
            failed += [r["failed"] for r in runs if "failed" in r]
        times = sorted(t for _, t in self.probe.times)
        if times:
            worst = sorted(self.probe.times, key=lambda x: -x[1])[:5]
            print(f"probe (mn every 100 ms): {len(times):,} answers, p50 {1e3 * times[len(times) // 2]:.2f} ms, p99 "
                  f"{1e3 * times[int(len(times) * 0.99)]:.2f} ms, worst " +
                  ", ".join(f"{1e3 * d:.0f} ms at {(t - self.t0) / 60:.1f} min" for t, d in worst))
        print(f"chaos counts: {dict(sorted(self.chaos.counts.items()))}")
        print(f"chaos failures: {self.chaos.failures or 'none'}; storms reached {self.chaos.storm_sizes[-5:]} of "
              f"-c {a.maxconns}")
        print(f"ledger errors: {self.ledger.errors or 'none'}")
        for e in (self.ledger.examples + self.chaos.examples + failed)[:20]:
            print(f"  example: {e}")
        rss = self.rss_summary()
        bad = o["wrong"] + o["stale"] + lost_term + sum(wrong(r) for p in PROTOCOLS for r in self.bench[p]
                                                         if "failed" not in r)
        bad += sum(self.chaos.failures.values()) + len(failed)
        verdict = bad == 0 and rss
        print(f"verdict: {'PASS' if verdict else 'FAIL'}")
        return 0 if verdict else 1

    def rss_summary(self):
        s = [(t, b) for t, b in self.sampler.samples if t >= 300]
        if not s:
            print("RSS: no samples after minute 5")
            return True
        mean = sum(b for _, b in s) / len(s)
        lo, hi = min(b for _, b in s), max(b for _, b in s)
        within = max(hi - mean, mean - lo) / mean
        by_min = {}
        for t, b in self.sampler.samples:
            by_min.setdefault(int(t // 60), []).append(b)
        print(f"RSS after minute 5: mean {mean / 2**20:.1f} MiB, {lo / 2**20:.1f}-{hi / 2**20:.1f} "
              f"({100 * within:.1f}% from the mean; ≤ 5% asked)")
        print("RSS by minute (MiB, max): " + " ".join(f"{m}:{max(v) / 2**20:.0f}" for m, v in sorted(by_min.items())))
        return within <= 0.05


def merge(dicts):
    out = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--interval", type=int, default=180, help="seconds between restarts")
    p.add_argument("--strata", default=strata_bin())
    p.add_argument("--dir", default="/var/tmp/strata-soak", help="the flash file and the server's log")
    p.add_argument("--mem-file", default="/dev/shm/strata-soak.mem")
    p.add_argument("--memory-mb", type=int, default=256)
    p.add_argument("--flash-gb", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--maxconns", type=int, default=1024)
    p.add_argument("--bench-keys", type=int, default=200_000, help="keys per protocol")
    p.add_argument("--bench-conns", type=int, default=8, help="connections per protocol")
    p.add_argument("--value-size", default="32-3000")
    p.add_argument("--load", type=float, default=0.7, help="of the capacity strata-bench measures, all clients")
    p.add_argument("--ledger-share", type=float, default=0.1, help="of that capacity, the ledger's operations")
    p.add_argument("--capacity-seconds", type=int, default=10)
    p.add_argument("--ledger-clients", type=int, default=2, help="per protocol")
    p.add_argument("--ledger-keys", type=int, default=20_000, help="per client")
    p.add_argument("--no-chaos", action="store_true", help="no storms, stalls or damaged requests")
    p.add_argument("--keep", action="store_true", help="keep the files at the end")
    args = p.parse_args()
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.maxconns + 256)), hard))
    def remove():
        shutil.rmtree(args.dir, ignore_errors=True)
        # The memory file, its journal and the flash tier's files beside it.
        shutil.rmtree(args.mem_file + ".flash", ignore_errors=True)
        for f in (args.mem_file, args.mem_file + ".journal"):
            if os.path.exists(f):
                os.unlink(f)
    remove()
    os.makedirs(args.dir)
    try:
        code = Soak(args).run()
    finally:
        if not args.keep:
            remove()
    sys.exit(code)


if __name__ == "__main__":
    main()
