"""TLS (-Z) with real TLS clients: pymemcache with an ssl tls_context,
Python's ssl module (client certificates, session resumption) and
`openssl s_client`. Certificates are made per run with `openssl req` in a
temporary directory. STRATA_IO_ENGINE is passed through, so scripts/test
runs this for each engine.
"""

import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile

import pytest
from pymemcache.client.base import Client

from strata_process import StrataProcess


pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")


def openssl(cwd, *args):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki():
    d = tempfile.mkdtemp(prefix="strata-tls-py-")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(d, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=strata py CA")
    for name, cn, ext in [("srv", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"),
                          ("alice", "alice", "extendedKeyUsage=clientAuth\n")]:
        openssl(d, "req", *ec, "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn)
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext)
        openssl(d, "x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", name + ".crt", "-days", "2", "-extfile", name + ".ext")
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Strata(StrataProcess):
    """strata -Z on ephemeral ports, addresses read from its -v log."""

    def __init__(self, pki, options="", listen=None, count=1):
        opts = f"ssl_chain_cert={pki}/srv.crt,ssl_key={pki}/srv.key"
        if options:
            opts += "," + options
        args = ["-p", "-1", "-U", "0", "-v", "-t", "2", "-Z", "-o", opts]
        if listen:
            args += ["-l", listen]
        super().__init__(args, count)


def context(pki, cert=None):
    ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
    if cert:
        ctx.load_cert_chain(os.path.join(pki, cert + ".crt"), os.path.join(pki, cert + ".key"))
    return ctx


def request(sock, data, end=b"\r\n"):
    sock.sendall(data)
    reply = b""
    while not reply.endswith(end):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        reply += chunk
    return reply


def test_pymemcache_over_tls(pki):
    s = Strata(pki)
    try:
        host, port = s.addrs[0]
        client = Client((host, port), tls_context=context(pki), connect_timeout=5, timeout=5)
        assert client.set("k", b"v" * 100000) is True
        assert client.get("k") == b"v" * 100000
        assert client.set("n", b"10") is True
        assert client.incr("n", 5) == 15
        assert client.get_many(["k", "n", "missing"]) == {"k": b"v" * 100000, "n": b"15"}
        assert client.delete("k") is True
        stats = client.stats()
        assert stats[b"ssl_handshake_errors"] == 0
        settings = client.stats("settings")
        assert settings[b"ssl_enabled"] in (b"yes", "yes", True)
        client.close()
    finally:
        s.stop()


def test_ssl_module_client_certificate_and_resumption(pki):
    s = Strata(pki, f"ssl_verify_mode=2,ssl_ca_cert={pki}/ca.crt,ssl_session_cache")
    try:
        host, port = s.addrs[0]
        # Without a certificate: refused (the alert arrives at the first read
        # with TLS 1.3).
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            with socket.create_connection((host, port), timeout=5) as raw:
                with context(pki).wrap_socket(raw, server_hostname="localhost") as tls:
                    request(tls, b"version\r\n")
        # With alice's: served; a second connection resumes the session.
        ctx = context(pki, "alice")
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2  # session reuse is simplest to see on 1.2
        with socket.create_connection((host, port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                assert request(tls, b"version\r\n").startswith(b"VERSION ")
                session = tls.session
        with socket.create_connection((host, port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost", session=session) as tls:
                assert tls.session_reused
                reply = request(tls, b"stats\r\n", b"END\r\n").decode()
                assert int(re.search(r"STAT ssl_new_sessions (\d+)", reply).group(1)) >= 1
                assert int(re.search(r"STAT ssl_handshake_errors (\d+)", reply).group(1)) >= 1
    finally:
        s.stop()


def test_openssl_s_client(pki):
    s = Strata(pki, listen="127.0.0.1:0,notls:127.0.0.2:0", count=2)
    try:
        host, port = s.addrs[0]
        out = subprocess.run(
            ["openssl", "s_client", "-quiet", "-connect", f"{host}:{port}", "-CAfile", f"{pki}/ca.crt",
             "-verify_return_error"],
            input=b"set s 0 0 2\r\nhi\r\nget s\r\nquit\r\n", capture_output=True, timeout=20)
        assert b"STORED\r\nVALUE s 0 2\r\nhi\r\nEND\r\n" in out.stdout, out.stderr
        # TLS 1.2 with an OpenSSL cipher name.
        out = subprocess.run(
            ["openssl", "s_client", "-quiet", "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256",
             "-connect", f"{host}:{port}", "-CAfile", f"{pki}/ca.crt"],
            input=b"get s\r\nquit\r\n", capture_output=True, timeout=20)
        assert b"VALUE s 0 2\r\nhi\r\nEND\r\n" in out.stdout, out.stderr
        # The notls: listener speaks plain text; refresh_certs works there.
        host2, port2 = s.addrs[1]
        with socket.create_connection((host2, port2), timeout=5) as plain:
            assert request(plain, b"get s\r\n", b"END\r\n") == b"VALUE s 0 2\r\nhi\r\nEND\r\n"
            assert request(plain, b"refresh_certs\r\n") == b"OK\r\n"
    finally:
        s.stop()
