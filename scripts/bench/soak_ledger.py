"""The soak's checker: clients that know every write they had acknowledged.

Each `Writer` owns its keys (`ledger:<name>:<i>`, no other client touches
them) and sends pipelined batches of sets, deletes and gets over one
protocol (text, meta or binary). Because a key has one writer and a
connection answers in order, the state a get must see is the last one the
writer sent before it; every reply is checked against it as it arrives.
When the server goes away mid-batch, the operations not answered are kept
as in flight (either outcome is right for them) until `Ledger.check` reads
every key back after the restart.

A value names its key and version and is padded to a length of its own
(20 B to 4 KiB), so a value of another key, an older version or a torn
write is told apart from the right one."""

import random
import socket
import struct
import threading
import time
import zlib


def key_of(name, i):
    return b"ledger:%s:%d" % (name.encode(), i)


def value_len(key, version):
    h = zlib.crc32(b"%s/%d" % (key, version))
    r = h % 10
    if r < 4:
        return 20 + h % 80          # small: the small store on flash
    if r < 8:
        return 100 + h % 900
    return 1000 + h % 3000


def value_of(key, version):
    head = b"%s:%d:" % (key, version)
    n = max(value_len(key, version), len(head))
    return head + bytes([97 + version % 26]) * (n - len(head))


def version_in(key, data):
    """The version a value names if it is exactly that version's value,
    else None (a value no write of this key made)."""
    head, sep, rest = data.rpartition(b":")
    if not sep:
        return None
    k, sep, v = head.rpartition(b":")
    if not sep or k != key or not v.isdigit():
        return None
    version = int(v)
    return version if data == value_of(key, version) else None


class Gone(Exception):
    """The connection failed: the server stopped or restarts."""


class Conn:
    """One connection's buffered reads."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def fill(self):
        try:
            chunk = self.sock.recv(1 << 20)
        except OSError as e:
            raise Gone(str(e)) from None
        if not chunk:
            raise Gone("closed")
        self.buf += chunk

    def line(self):
        while True:
            at = self.buf.find(b"\r\n")
            if at >= 0:
                line, self.buf = self.buf[:at], self.buf[at + 2:]
                return line
            self.fill()

    def exact(self, n):
        while len(self.buf) < n:
            self.fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def send(self, data):
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise Gone(str(e)) from None

    def close(self):
        self.sock.close()


# Each protocol: the bytes of an operation, and the reading of its reply
# (None: a miss or a delete's NOT_FOUND; bytes: a get's value; True: done).

class Text:
    def request(self, op, key, value):
        if op == "set":
            return b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value)
        if op == "delete":
            return b"delete %s\r\n" % key
        return b"get %s\r\n" % key

    def reply(self, c, op, key):
        line = c.line()
        if op == "set":
            return expect(line == b"STORED", op, line)
        if op == "delete":
            return expect(line in (b"DELETED", b"NOT_FOUND"), op, line)
        if line == b"END":
            return None
        parts = line.split()
        expect(len(parts) == 4 and parts[0] == b"VALUE" and parts[1] == key, op, line)
        data = c.exact(int(parts[3]) + 2)[:-2]
        expect(c.line() == b"END", op, b"no END")
        return data


class Meta:
    def request(self, op, key, value):
        if op == "set":
            return b"ms %s %d T0\r\n%s\r\n" % (key, len(value), value)
        if op == "delete":
            return b"md %s\r\n" % key
        return b"mg %s v k\r\n" % key

    def reply(self, c, op, key):
        line = c.line()
        if op == "set":
            return expect(line == b"HD", op, line)
        if op == "delete":
            return expect(line in (b"HD", b"NF"), op, line)
        if line == b"EN" or line.startswith(b"EN "):
            return None
        parts = line.split()
        expect(len(parts) >= 3 and parts[0] == b"VA" and b"k" + key in parts[2:], op, line)
        return c.exact(int(parts[1]) + 2)[:-2]


class Binary:
    OPS = {"get": 0x00, "set": 0x01, "delete": 0x04}

    def request(self, op, key, value):
        extras = struct.pack(">II", 0, 0) if op == "set" else b""
        body = extras + key + (value if op == "set" else b"")
        return struct.pack(">BBHBBHIIQ", 0x80, self.OPS[op], len(key), len(extras), 0, 0, len(body), 0, 0) + body

    def reply(self, c, op, key):
        magic, opcode, _, extlen, _, status, bodylen, _, _ = struct.unpack(">BBHBBHIIQ", c.exact(24))
        body = c.exact(bodylen)
        expect(magic == 0x81 and opcode == self.OPS[op], op, b"header %x %x" % (magic, opcode))
        if op == "set":
            return expect(status == 0, op, b"status %d" % status)
        if op == "delete":
            return expect(status in (0, 1), op, b"status %d" % status)
        if status == 1:
            return None
        expect(status == 0, op, b"status %d" % status)
        return body[extlen:]


PROTOCOLS = {"text": Text, "meta": Meta, "binary": Binary}


class BadReply(Exception):
    pass


def expect(ok, op, line):
    if not ok:
        raise BadReply(f"{op}: {line[:200]!r}")
    return True


class Writer(threading.Thread):
    """One client over `protocol` that owns `keys` keys; see the module doc."""

    def __init__(self, ledger, name, protocol, keys, seed):
        super().__init__(daemon=True)
        self.ledger, self.name, self.proto = ledger, name, PROTOCOLS[protocol]()
        self.keys = [key_of(name, i) for i in range(keys)]
        self.acked = [0] * keys       # last acknowledged state: a version, 0 absent
        self.sent = [0] * keys        # the last version sent
        self.unacked = {}             # i -> states sent in this batch, not answered yet
        self.limbo = {}               # i -> states sent on a connection that failed first
        self.rng = random.Random(seed)
        self.counts = dict(ops=0, sets=0, deletes=0, gets=0, hits=0)
        self.parked = threading.Event()
        self.next_at = None

    def run(self):
        while not self.ledger.done.is_set():
            self.ledger.up.wait()
            gen = self.ledger.generation
            try:
                c = Conn(self.ledger.port)
            except OSError:
                self.park(gen)
                continue
            try:
                while not self.ledger.done.is_set() and gen == self.ledger.generation:
                    self.batch(c)
            except Gone as e:
                self.unanswered()
                if self.ledger.up.is_set() and gen == self.ledger.generation:
                    self.ledger.error("ledger connection dropped", f"{self.name}: {e}")
                    c.close()
                    continue
            except BadReply as e:
                self.unanswered()
                self.ledger.error("ledger bad reply", f"{self.name}: {e}")
                c.close()
                continue
            c.close()
            self.park(gen)

    def unanswered(self):
        """The connection failed: what it had not answered may or may not
        have happened."""
        for i, states in self.unacked.items():
            self.limbo.setdefault(i, []).extend(states)
        self.unacked.clear()

    def park(self, gen):
        """Wait until the server is back (a new generation) or the end."""
        self.parked.set()
        self.ledger.await_restart(gen)
        self.parked.clear()

    def pace(self):
        """Hold this writer to its share of the ledger's rate."""
        rate = self.ledger.rate / len(self.ledger.writers)
        if rate <= 0:
            return
        now = time.monotonic()
        if self.next_at is None or now - self.next_at > 1:
            self.next_at = now
        if self.next_at > now:
            time.sleep(self.next_at - now)
        self.next_at += 64 / rate

    def batch(self, c):
        self.pace()
        ops = []
        for _ in range(64):
            i = self.rng.randrange(len(self.keys))
            r = self.rng.random()
            op = "set" if r < 0.5 else "delete" if r < 0.6 else "get"
            ops.append((op, i))
        out = []
        for op, i in ops:
            value = b""
            if op == "set":
                self.sent[i] += 1
                value = value_of(self.keys[i], self.sent[i])
            if op != "get":
                self.unacked.setdefault(i, []).append(self.sent[i] if op == "set" else 0)
            out.append(self.proto.request(op, self.keys[i], value))
        c.send(b"".join(out))
        for op, i in ops:
            got = self.proto.reply(c, op, self.keys[i])
            self.counts["ops"] += 1
            if op == "get":
                self.counts["gets"] += 1
                self.counts["hits"] += got is not None
                self.ledger.judge(self.keys[i], got, [self.acked[i]] + self.limbo.get(i, []), self.sent[i], live=True)
                continue
            self.counts["sets" if op == "set" else "deletes"] += 1
            self.acked[i] = self.unacked[i].pop(0)
            self.limbo.pop(i, None)
            if not self.unacked[i]:
                del self.unacked[i]


class Ledger:
    """The writers, and the checks of every key after a restart."""

    def __init__(self, port, clients, keys, seed=1):
        self.port, self.generation = port, 0
        self.rate = 0  # operations a second for all writers (0: as fast as they go)
        self.up, self.done = threading.Event(), threading.Event()
        self.lock = threading.Lock()
        self.outcomes = dict(ok=0, wrong=0, stale=0, lost=0, live_lost=0)
        self.errors = {}
        self.examples = []
        self.writers = [Writer(self, f"{p[0]}{n}", p, keys, seed * 1000 + k)
                        for k, (p, n) in enumerate((p, n) for p in ("text", "meta", "binary") for n in range(clients))]

    def start(self):
        self.up.set()
        for w in self.writers:
            w.start()

    def error(self, kind, example):
        with self.lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1
            if len(self.examples) < 20:
                self.examples.append(example)

    def judge(self, key, got, ok_states, newest, live=False):
        """Count a read of `key` that may see any of `ok_states` (versions;
        0: absent), `newest` the last version sent. Returns the state seen
        (None if it is not one of them)."""
        if got is None:
            if 0 in ok_states:
                return 0
            with self.lock:
                self.outcomes["live_lost" if live else "lost"] += 1
            return 0
        v = version_in(key, got)
        if v in ok_states and v:
            return v
        kind = "wrong" if v is None or v > newest else "stale"
        with self.lock:
            self.outcomes[kind] += 1
            if len(self.examples) < 20:
                self.examples.append(f"{kind}: {key!r} gave {got[:60]!r}, expected one of {ok_states}")
        return None

    def await_restart(self, gen):
        """Wait until the server of generation `gen` was replaced (`resume`)
        or the soak ends."""
        while not self.done.is_set() and gen == self.generation:
            time.sleep(0.05)

    def pause(self):
        """The server is about to stop: the writers park when it goes."""
        self.up.clear()

    def all_parked(self, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if all(w.parked.is_set() or not w.is_alive() for w in self.writers):
                return True
            time.sleep(0.05)
        return False

    def check(self, port):
        """Read every key back over text (the writers parked): counts of
        this check; every key's state settled to what was read."""
        before = dict(self.outcomes)
        c = Conn(port)
        for w in self.writers:
            for first in range(0, len(w.keys), 100):
                idx = range(first, min(first + 100, len(w.keys)))
                c.send(b"get " + b" ".join(w.keys[i] for i in idx) + b"\r\n")
                got = {}
                while True:
                    line = c.line()
                    if line == b"END":
                        break
                    _, k, _, n = line.split()
                    got[k] = c.exact(int(n) + 2)[:-2]
                for i in idx:
                    ok_states = [w.acked[i]] + w.limbo.pop(i, [])
                    seen = self.judge(w.keys[i], got.get(w.keys[i]), ok_states, w.sent[i])
                    if seen is not None and seen in ok_states:
                        self.outcomes["ok"] += 1
                    w.acked[i] = seen or 0
        c.close()
        return {k: self.outcomes[k] - before[k] for k in self.outcomes}

    def resume(self, port):
        self.port = port
        self.generation += 1
        self.up.set()

    def counts(self):
        out = {}
        for w in self.writers:
            proto = w.name.rstrip("0123456789")
            d = out.setdefault(proto, dict(ops=0, sets=0, deletes=0, gets=0, hits=0))
            for k, v in w.counts.items():
                d[k] += v
        return out
