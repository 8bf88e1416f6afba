#!/usr/bin/env python3
"""Big -m: start a server with a large -m, churn GiB of mixed-size sets, report
/proc/PID/maps lines and RSS along the way.

    scripts/bench/bigmem.py [--bin target/release/strata] [--mem 200g] [--gib 4] [--port 25100] [-- extra server args]

Sizes: half small (10 B-1 KiB), a third medium (1-100 KiB), the rest large
(100 KiB-1000 KiB, each its own single-item segment), over 4,000 keys so items
are replaced all the time (freed segments and single-item buffers churn).
Sets go out with noreply in pipelined batches; a `mn` after each batch keeps
the client in step. Deterministic (seeded), so runs compare.
"""
import argparse, os, random, socket, subprocess, sys, time

def maps(pid):
    with open(f"/proc/{pid}/maps") as f:
        return sum(1 for _ in f)

def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0

def huge_mib(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) / 1024
    return 0.0

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/strata")
    ap.add_argument("--mem", default="200g")
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--port", type=int, default=25100)
    ap.add_argument("--keys", type=int, default=4000)
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    mem = a.mem[:-1] if a.mem.endswith("m") else a.mem
    srv = subprocess.Popen([a.bin, "-p", str(a.port), "-U", "0", "-m", mem, "-t", "1", *a.extra],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            try:
                s = socket.create_connection(("127.0.0.1", a.port)); break
            except OSError:
                if srv.poll() is not None:
                    print("server exited:", srv.stderr.read().decode(errors="replace")); return 1
                time.sleep(0.05)
        print(f"-m {a.mem}: started; maps {maps(srv.pid)}, RSS {rss_mib(srv.pid):.1f} MiB", flush=True)
        rnd = random.Random(17)
        blob = bytes(rnd.getrandbits(8) for _ in range(1 << 20)) * 1
        total, target, batch, nb = 0, int(a.gib * (1 << 30)), [], 0
        report = 1 << 30
        t0 = time.time()
        while total < target:
            r = rnd.random()
            n = rnd.randint(10, 1024) if r < 0.5 else rnd.randint(1024, 100 << 10) if r < 0.83 else rnd.randint(100 << 10, 1000 << 10)
            off = rnd.randint(0, len(blob) - n)
            batch.append(b"set k%d 0 0 %d noreply\r\n" % (rnd.randrange(a.keys), n))
            batch.append(blob[off:off + n]); batch.append(b"\r\n")
            total += n; nb += n
            if nb > (4 << 20):
                batch.append(b"mn\r\n"); s.sendall(b"".join(batch)); batch, nb = [], 0
                buf = b""
                while not buf.endswith(b"MN\r\n"):
                    chunk = s.recv(65536)
                    if not chunk: raise SystemExit("server closed the connection")
                    buf += chunk
                if b"ERROR" in buf: raise SystemExit(buf[:200])
            if total >= report:
                print(f"  {total / (1 << 30):.1f} GiB written: maps {maps(srv.pid)}, RSS {rss_mib(srv.pid):.1f} MiB", flush=True)
                report += 1 << 30
        s.sendall(b"stats\r\n"); st = b""
        while not st.endswith(b"END\r\n"): st += s.recv(65536)
        stats = dict(l.split()[1:3] for l in st.decode().splitlines() if l.startswith("STAT "))
        print(f"after {total / (1 << 30):.2f} GiB in {time.time() - t0:.1f} s: maps {maps(srv.pid)}, RSS {rss_mib(srv.pid):.1f} MiB "
              f"({huge_mib(srv.pid):.0f} MiB in huge pages), "
              f"curr_items {stats.get('curr_items')}, bytes {int(stats.get('bytes', 0)) >> 20} MiB, evictions {stats.get('evictions')}")
    finally:
        srv.kill(); srv.wait()

if __name__ == "__main__":
    sys.exit(main())
