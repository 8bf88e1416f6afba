#!/usr/bin/env python3
"""Restartable cache, side by side: N items (20-byte keys, 32-byte values)
loaded into a server that keeps them in a memory file on tmpfs (-e), then:

  graceful  Strata and Debian's memcached 1.6 are stopped with SIGUSR1 and
            started again on the same file; printed: time from the new
            process's start to its first answer, and how many items came
            back intact.
  crash     Strata only (memcached loses its cache without a graceful stop):
            after the load, writes of fresh keys go on until `kill -9`; then
            the restart, the time to serve, the share of items acknowledged
            at least a second before the kill that came back, and every value
            read back checked against what was written.

    scripts/bench/restart.py [--items 1000000] [--memory-mb 2048] [--dir /dev/shm]
"""

import argparse
import os
import shlex
import signal
import subprocess
import threading
import time

from common import Reader, free_port, strata_bin
from density import key, load, value, verify

KEY_SIZE, VALUE_SIZE = 20, 32


class Proc(Reader):
    """A server on `file`; records how long it took to answer."""

    def __init__(self, template, file, memory_mb, port=None):
        # The same port across a restart: memcached's restart checks its settings.
        self.port = port or free_port()
        cmd = template.format(port=self.port, file=file, mem=memory_mb)
        if os.geteuid() == 0 and cmd.split()[0].endswith("memcached"):
            cmd += " -u root"
        self.proc = subprocess.Popen(["taskset", "-c", "0"] + shlex.split(cmd),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.seconds_to_serve = self.await_serving(cmd)

    def stop(self, sig):
        self.proc.send_signal(sig)
        self.proc.wait(timeout=120)
        self.sock.close()


def remove(file):
    for f in (file, file + ".meta"):
        if os.path.exists(f):
            os.remove(f)


def graceful(name, template, args):
    file = os.path.join(args.dir, f"restart-bench-{name}.mem")
    remove(file)
    server = Proc(template, file, args.memory_mb)
    t = time.monotonic()
    load(server, args.items, KEY_SIZE, VALUE_SIZE)
    load_s = time.monotonic() - t
    server.stop(signal.SIGUSR1)
    # memcached refuses a restart within the second it stopped (its
    # metadata check on stop_time); both servers wait the same.
    time.sleep(1.1)
    server = Proc(template, file, args.memory_mb, server.port)
    missing, wrong = verify(server, args.items, KEY_SIZE, VALUE_SIZE)
    stats = server.stats()
    server.stop(signal.SIGTERM)
    remove(file)
    back = args.items - missing
    print(f"{name:10s} graceful: loaded {args.items} in {load_s:.1f} s; serving {server.seconds_to_serve:.3f} s after start; "
          f"back {back}/{args.items} ({100 * back / args.items:.2f}%), wrong {wrong}, curr_items {stats.get('curr_items')}")
    return server.seconds_to_serve


def crash(template, args):
    file = os.path.join(args.dir, "restart-bench-crash.mem")
    remove(file)
    server = Proc(template, file, args.memory_mb)
    load(server, args.items, KEY_SIZE, VALUE_SIZE)
    # Then fresh keys in batches of 1000, each batch's acknowledgement time kept.
    acked = []  # (time, first, end)
    kill_at = time.monotonic() + args.write_seconds
    killer = threading.Thread(target=lambda: (time.sleep(max(0, kill_at - time.monotonic())), server.proc.kill()))
    killer.start()
    start = args.items
    batch = 1000
    try:
        while True:
            end = start + batch
            req = b"".join(b"ms %s %d q\r\n%s\r\n" % (key(i, KEY_SIZE), VALUE_SIZE, value(i, VALUE_SIZE))
                           for i in range(start, end))
            server.sock.sendall(req + b"mn\r\n")
            if server.readline() != b"MN":
                break
            acked.append((time.monotonic(), start, end))
            start = end
    except OSError:
        pass
    killer.join()
    server.proc.wait()
    killed = kill_at
    server = Proc(template, file, args.memory_mb, server.port)
    # Everything acknowledged a second before the kill: the load and the early batches.
    early_end = max([e for (t, s, e) in acked if t <= killed - 1.0], default=args.items)
    missing, wrong = verify(server, early_end, KEY_SIZE, VALUE_SIZE)
    late_missing, late_wrong = verify(server, start, KEY_SIZE, VALUE_SIZE, first=early_end)
    stats = server.stats()
    server.stop(signal.SIGTERM)
    remove(file)
    back = early_end - missing
    print(f"strata     crash: {early_end} items acknowledged >= 1 s before kill -9, back {back} "
          f"({100 * back / early_end:.3f}%), wrong {wrong}; last second: {start - early_end} written, "
          f"{start - early_end - late_missing} back, wrong {late_wrong}; serving {server.seconds_to_serve:.3f} s after start; "
          f"restart_damaged {stats.get('restart_damaged')}")
    return server.seconds_to_serve


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=1_000_000)
    p.add_argument("--memory-mb", type=int, default=2048)
    p.add_argument("--dir", default="/dev/shm")
    p.add_argument("--write-seconds", type=float, default=3.0, help="writes after the load, before kill -9")
    p.add_argument("--strata", default=f"{strata_bin()} -p {{port}} -U 0 -t 1 -m {{mem}} -e {{file}}")
    p.add_argument("--memcached", default="memcached -p {port} -U 0 -t 1 -m {mem} -e {file}")
    p.add_argument("--skip-memcached", action="store_true")
    args = p.parse_args()
    mc = None if args.skip_memcached else graceful("memcached", args.memcached, args)
    st = graceful("strata", args.strata, args)
    crash(args.strata, args)
    if mc:
        print(f"ratio strata/memcached time to serve after a graceful stop: {st / mc:.3f}")


if __name__ == "__main__":
    main()
