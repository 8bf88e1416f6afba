"""The soak's rough clients: connection storms up to `-c`, clients that
stall in the middle of a request, and damaged requests.

Each runs in its own thread while the server is up (`Ledger.up`), counts
what it saw by kind, and never touches the ledger's keys. What counts as a
failure: a connection refused or not answered while fewer than `-c` are
open, a stalled request answered wrongly (or its value not kept) once it
is finished, and a server that stops answering other clients after a
damaged request. The replies to damaged requests are counted by kind
(memcached's error lines, a close, or an answer: damage that left a
request well formed)."""

import random
import socket
import struct
import threading
import time

from soak_ledger import Conn, Gone

TIMEOUT = 10


class Chaos:
    def __init__(self, ledger, maxconns, seed=7):
        self.ledger, self.maxconns = ledger, maxconns
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = {}
        self.examples = []
        self.storm_sizes = []

    def count(self, kind, n=1):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + n

    def fail(self, kind, example, gen):
        """A failure, unless the server was stopped on purpose meanwhile."""
        if not self.ledger.up.is_set() or gen != self.ledger.generation:
            self.count("cut by a restart")
            return
        with self.lock:
            self.failures[kind] = self.failures.get(kind, 0) + 1
            if len(self.examples) < 20:
                self.examples.append(f"{kind}: {example}")

    def start(self):
        for f in (self.storms, self.stalls, self.damage):
            threading.Thread(target=self.loop, args=(f,), daemon=True).start()

    def loop(self, f):
        while not self.ledger.done.is_set():
            self.ledger.up.wait()
            gen = self.ledger.generation
            try:
                f(gen)
            except (OSError, Gone) as e:
                self.fail(f"{f.__name__}: connection failed", repr(e), gen)
                time.sleep(0.5)

    # -- storms ---------------------------------------------------------
    def storms(self, gen):
        """Every ~20 s: open connections until `-c` less a margin are open
        (`curr_connections`), each must answer `version`; then close all."""
        time.sleep(self.rng.uniform(10, 30))
        c = Conn(self.ledger.port)
        c.send(b"stats\r\n")
        curr = 0
        while True:
            line = c.line()
            if line == b"END":
                break
            if line.startswith(b"STAT curr_connections "):
                curr = int(line.split()[2])
        want = self.maxconns - curr - 32
        socks = []
        try:
            for _ in range(max(0, want)):
                try:
                    s = socket.create_connection(("127.0.0.1", self.ledger.port), timeout=TIMEOUT)
                except OSError as e:
                    self.fail("storm: connect refused below -c", f"{len(socks)} open of {want}: {e!r}", gen)
                    break
                socks.append(s)
            for s in socks:
                s.sendall(b"version\r\n")
            for s in socks:
                try:
                    reply = s.recv(256)
                except OSError as e:
                    reply = repr(e).encode()
                if not reply.startswith(b"VERSION "):
                    self.fail("storm: no answer below -c", f"{reply[:80]!r} with {len(socks)} open", gen)
            self.count("storm connections", len(socks))
            self.storm_sizes.append(curr + len(socks))
        finally:
            for s in socks:
                s.close()
            c.close()

    # -- stalls ---------------------------------------------------------
    def stalls(self, gen):
        """A request cut at a random byte, the rest sent 1-15 s later (or
        never: the client goes away); then the value must read back."""
        n = self.rng.randrange(1 << 30)
        key = b"stall:%d" % n
        value = bytes([97 + n % 26]) * self.rng.choice([10, 300, 3000, 60000])
        kind = self.rng.choice(["text", "meta", "binary"])
        if kind == "text":
            req, ok = b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value), b"STORED\r\n"
        elif kind == "meta":
            req, ok = b"ms %s %d\r\n%s\r\n" % (key, len(value), value), b"HD\r\n"
        else:
            body = struct.pack(">II", 0, 0) + key + value
            req = struct.pack(">BBHBBHIIQ", 0x80, 0x01, len(key), 8, 0, 0, len(body), 0, 0) + body
            ok = None
        cut = self.rng.randrange(1, len(req))
        s = socket.create_connection(("127.0.0.1", self.ledger.port), timeout=TIMEOUT + 20)
        try:
            s.sendall(req[:cut])
            time.sleep(self.rng.uniform(1, 15))
            if self.rng.random() < 0.3:
                self.count("stalls abandoned")
                return
            s.sendall(req[cut:])
            reply = read_reply(s, binary=ok is None)
            good = reply == ok if ok is not None else reply[:2] == b"\x81\x01" and reply[6:8] == b"\0\0"
            if not good:
                self.fail(f"stall ({kind}): bad reply", f"{reply[:80]!r}", gen)
                return
        finally:
            s.close()
        c = Conn(self.ledger.port)
        c.send(b"get %s\r\n" % key)
        line = c.line()
        data = c.exact(len(value) + 2)[:-2] if line.startswith(b"VALUE ") else None
        if data != value:
            self.fail(f"stall ({kind}): value not kept", f"{line[:80]!r}", gen)
        else:
            self.count("stalls finished and read back")
        c.close()

    # -- damaged requests ------------------------------------------------
    def damage(self, gen):
        """One damaged request on a fresh connection: the server answers
        with an error line or closes it, and goes on serving others."""
        kind, req = damaged(self.rng)
        s = socket.create_connection(("127.0.0.1", self.ledger.port), timeout=3)
        try:
            s.sendall(req)
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            reply = b""
            try:
                while len(reply) < 4096:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    reply += chunk
            except socket.timeout:
                pass
            except OSError:
                pass
        finally:
            s.close()
        first = reply.split(b"\r\n", 1)[0]
        self.count(f"damaged {kind}: {classify(first, reply)}")
        probe = Conn(self.ledger.port)
        probe.send(b"version\r\n")
        if not probe.line().startswith(b"VERSION "):
            self.fail("damaged: the server stopped answering", f"after {req[:80]!r}", gen)
        probe.close()
        time.sleep(0.02)


def read_reply(s, binary):
    out = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            return out
        out += chunk
        if binary and len(out) >= 24 and len(out) >= 24 + struct.unpack(">I", out[8:12])[0]:
            return out
        if not binary and out.endswith(b"\r\n"):
            return out


ERRORS = (b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR")


def classify(first, reply):
    if not reply:
        return "closed"
    if first.startswith(ERRORS):
        return first.split(b" ", 1)[0].decode()
    if reply[:1] == b"\x81":
        return f"binary status {struct.unpack('>H', reply[6:8])[0] if len(reply) >= 8 else '?'}"
    return "answered"  # a request the damage left well formed


def damaged(rng):
    """(kind, bytes): a request broken in one of several ways."""
    key = b"dmg:%d" % rng.randrange(1000)
    good = rng.choice([
        b"set %s 0 0 5\r\nhello\r\n" % key, b"get %s\r\n" % key, b"ms %s 5 T0 F3\r\nhello\r\n" % key,
        b"mg %s v f t c\r\n" % key, b"incr %s 1\r\n" % key, b"gat 10 %s\r\n" % key,
        struct.pack(">BBHBBHIIQ", 0x80, 0x01, len(key), 8, 0, 0, len(key) + 13, 0, 0) + b"\0" * 8 + key + b"hello",
    ])
    k = rng.randrange(5)
    if k == 0:
        b = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return "flipped", bytes(b)
    if k == 1:
        return "truncated", good[:rng.randrange(1, len(good))]
    if k == 2:
        return "garbage", bytes(rng.randrange(256) for _ in range(rng.randrange(1, 3000)))
    if k == 3:
        return "huge length", rng.choice([
            b"set %s 0 0 4294967295\r\nxx\r\n" % key, b"ms %s 99999999999\r\n" % key,
            b"set %s 0 0 -1\r\n" % key, b"get " + b"k" * 100000 + b"\r\n",
            struct.pack(">BBHBBHIIQ", 0x80, 0x01, 0xffff, 0xff, 0, 0, 0xffffffff, 0, 0) + b"x" * 100,
        ])
    return "spliced", good + good[rng.randrange(len(good)):] + b"\r\n" * rng.randrange(3)
