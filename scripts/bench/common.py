"""Shared helpers for the store benchmarks: start a server pinned to a CPU,
read its RSS, and talk the meta protocol in pipelined batches."""

import json
import os
import shlex
import socket
import subprocess
import time


def free_port():
    """A free loopback port: from `BENCH_PORTS=lo-hi` when set (machines
    shared by several runs give each its own range), else the kernel's."""
    lo, _, hi = os.environ.get("BENCH_PORTS", "0-0").partition("-")
    for port in range(int(lo), int(hi or lo) + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError(f"no free port in BENCH_PORTS={lo}-{hi}")


class Reader:
    """Reply reading over `self.sock`, buffered in `self.buf`."""

    def await_serving(self, what, timeout=None, probe=True):
        """Connect to `self.port` until the server answers `mn` (so it serves,
        not just listens; `probe=False`: until it accepts, for servers without
        meta commands), raising if `self.proc` exits first or `timeout`
        seconds pass; the seconds it took."""
        start = time.monotonic()
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", self.port))
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.buf = b""
                if not probe:
                    return time.monotonic() - start
                self.sock.sendall(b"mn\r\n")
                if self.readline() == b"MN":
                    return time.monotonic() - start
            except OSError:
                if self.proc.poll() is not None:
                    err = self.proc.stderr.read().decode()[-2000:] if self.proc.stderr else ""
                    raise RuntimeError(f"{what}: exited with {self.proc.returncode} {err}".rstrip())
                if timeout is not None and time.monotonic() - start > timeout:
                    raise
                time.sleep(0.002)

    def stats(self):
        self.sock.sendall(b"stats\r\n")
        out = {}
        while True:
            line = self.readline()
            if line == b"END":
                return out
            _, name, value = line.decode().split(" ", 2)
            out[name] = value

    def readline(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def read_exact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data


class Server(Reader):
    """A server process started from a command template with {port}."""

    def __init__(self, template, cpu=0):
        self.port = free_port()
        cmd = template.format(port=self.port)
        if os.geteuid() == 0 and cmd.split()[0].endswith("memcached") and " -u " not in f" {cmd} ":
            cmd += " -u root"
        self.proc = subprocess.Popen(["taskset", "-c", str(cpu)] + shlex.split(cmd),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.await_serving(cmd, timeout=10, probe=False)

    def rss_bytes(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def stop(self):
        self.sock.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)


def strata_bin():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "target", "release", "strata")


BENCH = os.path.join(os.path.dirname(strata_bin()), "strata-bench")


def run_bench(port, args, get_ratio, duration, extra=(), prefix=()):
    """One strata-bench run of uniform keys (`args.items` or `args.keys`,
    `args.key_size`, `args.value_size`, `args.conns`) against `port`: its
    JSON report. `extra` goes after the options, `prefix` before the
    command (e.g. `nice -n 10`)."""
    keys = getattr(args, "items", None) or args.keys
    cmd = list(prefix) + [BENCH, "run", "--server", f"127.0.0.1:{port}", "--keys", str(keys), "--key-size",
                          str(args.key_size), "--value-size", str(args.value_size), "--get-ratio", str(get_ratio),
                          "--duration", duration, "--conns", str(args.conns), "--quiet", "--json", "-"] + list(extra)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"strata-bench failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def drop_caches():
    """Drop the page cache (root only); says whether it did."""
    if os.geteuid() != 0:
        return "not root: page cache NOT dropped"
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    return "page cache dropped"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def add_server_args(parser, memory_mb):
    """--memory-mb and the two server command templates (MEM stands for it)."""
    parser.add_argument("--memory-mb", type=int, default=memory_mb)
    parser.add_argument("--strata", default=f"{strata_bin()} -p {{port}} -t 1 -m MEM")
    parser.add_argument("--memcached", default="memcached -p {port} -t 1 -U 0 -m MEM")


def server_commands(args):
    """(memcached, strata) commands with -m filled in."""
    mem = str(args.memory_mb)
    return args.memcached.replace("MEM", mem), args.strata.replace("MEM", mem)
