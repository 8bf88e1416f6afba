"""Real memcached clients against a Strata server started by the tests:
pymemcache's Client and HashClient (noreply on and off) and libmemcached's
memccp/memccat.

STRATA_BIN names the server binary (default: target/release/strata);
STRATA_IO_ENGINE is passed through, so scripts/test runs this for each engine.
"""

import os
import subprocess

import pytest
from pymemcache.client.base import Client
from pymemcache.client.hash import HashClient

from strata_process import StrataProcess



class Strata(StrataProcess):
    """A strata process on an ephemeral port."""

    def __init__(self):
        super().__init__(["-p", "-1", "-v", "-t", "2"])
        self.host, self.port = self.addrs[0]


@pytest.fixture
def server():
    s = Strata()
    yield s
    s.stop()


@pytest.fixture
def servers():
    group = [Strata() for _ in range(3)]
    yield group
    for s in group:
        s.stop()


def exercise(client, noreply):
    """The operations the issue names, with results checked."""
    assert client.set("k1", b"v1", noreply=noreply) is True
    assert client.get("k1") == b"v1"
    assert client.set("k2", b"v2", expire=100, noreply=noreply) is True
    assert client.get_many(["k1", "k2", "missing"]) == {"k1": b"v1", "k2": b"v2"}
    value, cas = client.gets("k1")
    assert value == b"v1" and cas is not None
    assert client.cas("k1", b"v1b", cas) is True
    assert client.cas("k1", b"stale", cas) is False
    assert client.get("k1") == b"v1b"
    assert client.set("n", b"10", noreply=noreply) is True
    assert client.incr("n", 5) == 15
    assert client.decr("n", 20) == 0, "decr stops at zero"
    assert client.incr("nothere", 1) is None
    assert client.touch("k2", 10, noreply=noreply) is True
    assert client.delete("k1", noreply=noreply) is True
    assert client.get("k1") is None
    if not noreply:
        assert client.add("k2", b"x") is False
        assert client.replace("nothere", b"x") is False
        assert client.touch("nothere", 10) is False
        assert client.delete("nothere") is False


@pytest.mark.parametrize("noreply", [False, True])
def test_pymemcache_client(server, noreply):
    client = Client((server.host, server.port), default_noreply=noreply)
    exercise(client, noreply)
    assert client.version() == b"1.6.45"  # digits only: the memcached release whose protocol Strata speaks
    stats = client.stats()
    assert stats[b"cmd_get"] > 0 and b"curr_items" in stats
    client.close()


@pytest.mark.parametrize("noreply", [False, True])
def test_pymemcache_hash_client(servers, noreply):
    client = HashClient([(s.host, s.port) for s in servers], default_noreply=noreply)
    exercise(client, noreply)
    keys = {f"key-{i}": f"value-{i}".encode() for i in range(300)}
    client.set_many(keys, noreply=noreply)
    assert client.get_many(list(keys)) == keys
    # Consistent hashing spread the keys over all three servers.
    per_server = [Client((s.host, s.port)).stats()[b"curr_items"] for s in servers]
    assert all(n > 0 for n in per_server), per_server
    client.close()


def test_libmemcached_memccp_memccat(server, tmp_path):
    source = tmp_path / "payload.bin"
    data = os.urandom(50_000)
    source.write_bytes(data)
    spec = f"--servers={server.host}:{server.port}"
    subprocess.run(["memccp", spec, str(source)], check=True, cwd=tmp_path)
    out = subprocess.run(["memccat", spec, "payload.bin"], check=True, capture_output=True)
    assert out.stdout == data + b"\n", "memccat prints the value and a newline"
