#!/usr/bin/env python3
"""Build the container image (scripts/package/image.sh) and check it.

    scripts/package/image-check.py

The image's config and files: user and group 11211, entrypoint and command,
ports 11211 and 9150, SIGTERM, no shell nor any program but Strata's, at
most 20 MB uncompressed, the docker-archive carrying the same config. Then
the image runs under runc (Debian's runc, the OCI runtime podman and Docker
use) from the bundle `umoci unpack` makes of it, so the process, user,
environment and working directory are the ones its config says; each
container has its own network namespace and a read-only root:

- the default command serves on 11211, on every interface of the
  container (the time from `runc run` to the first reply is printed, not
  checked: it is mostly the start of the checking client in the
  container's namespace, and a loaded machine stretches it past any
  bound; the start's speed is a benchmark's question);
- `-V`, `strata -V` and an unknown program behave as the official
  memcached image's entrypoint makes them (strata put in front of flags);
- with a host tmpfs directory mounted on /run/strata and `-e
  /run/strata/strata.mem`, an item set in one container is served by the
  next one after a SIGTERM stop.

Any deviation fails the check (exit 1). Needs root, umoci, skopeo and runc
(apt-get install umoci skopeo runc) and the release binaries.
"""

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from checks import check, finish  # noqa: E402

MAX_BYTES = 20 * 1000 * 1000


def blob(layout, digest):
    return layout / "blobs" / digest.replace(":", "/")


def read_image(layout, tag):
    index = json.loads((layout / "index.json").read_text())
    [desc] = [m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
    manifest = json.loads(blob(layout, desc["digest"]).read_bytes())
    config = json.loads(blob(layout, manifest["config"]["digest"]).read_bytes())
    return manifest, config


def check_config(config, version):
    print("image config:")
    c = config["config"]
    check(config.get("os") == "linux" and config.get("architecture") == "amd64", f"linux/amd64 ({config.get('os')}/{config.get('architecture')})")
    check(c.get("User") == "11211:11211", f"user 11211:11211 ({c.get('User')})")
    check(c.get("Entrypoint") == ["/usr/bin/strata-entrypoint"], f"entrypoint strata-entrypoint ({c.get('Entrypoint')})")
    check(c.get("Cmd") == ["strata"], f"command strata ({c.get('Cmd')})")
    check(sorted(c.get("ExposedPorts", {})) == ["11211/tcp", "9150/tcp"], f"ports 11211/tcp 9150/tcp ({sorted(c.get('ExposedPorts', {}))})")
    check(c.get("StopSignal") == "SIGTERM", f"stop signal SIGTERM ({c.get('StopSignal')})")
    check(c.get("Labels", {}).get("org.opencontainers.image.version") == version, f"version label {version}")
    env_names = sorted(e.split("=", 1)[0] for e in c.get("Env", []))
    check(env_names == ["PATH"], f"no environment but PATH ({env_names})")


def check_files(layout, manifest):
    print("image files:")
    files, total, passwd_text = {}, 0, ""
    for layer in manifest["layers"]:
        data = blob(layout, layer["digest"]).read_bytes()
        raw = gzip.decompress(data) if layer["mediaType"].endswith("+gzip") else data
        total += len(raw)
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            for m in tar.getmembers():
                files["/" + m.name.lstrip("./")] = m
                if m.name.lstrip("./") == "etc/passwd":
                    passwd_text = tar.extractfile(m).read().decode()
    # Every executable file but the shared libraries (libc, the loader).
    programs = sorted(p for p, m in files.items() if m.isfile() and m.mode & 0o111 and ".so" not in Path(p).name)
    check(programs == ["/usr/bin/strata", "/usr/bin/strata-entrypoint"], f"no shell, no program but Strata's ({programs})")
    check(total <= MAX_BYTES, f"{total / 1e6:.1f} MB uncompressed (at most {MAX_BYTES / 1e6:.0f} MB)")
    passwd = files.get("/etc/passwd")
    run_strata = files.get("/run/strata")
    check(run_strata is not None and (run_strata.uid, run_strata.gid) == (11211, 11211), "/run/strata owned by 11211:11211")
    check(passwd is not None and passwd.uid == 0 and "\nmemcache:x:11211:11211:" in passwd_text, "/etc/passwd names memcache 11211:11211")
    return total


def check_archive(archive, config):
    print("docker-archive:")
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        archived = json.load(tar.extractfile(manifest[0]["Config"]))
    tags = manifest[0].get("RepoTags", [])
    check(any(t.endswith(f"strata:{config['config']['Labels']['org.opencontainers.image.version']}") for t in tags), f"tagged strata:VERSION ({tags})")
    check(archived["config"] == config["config"], "the same config as the OCI image")


class Container:
    """One `runc run` of the unpacked bundle, with the image's process and
    `args` after the entrypoint (as `docker run IMAGE ARGS...`)."""

    count = 0

    def __init__(self, bundle, args=None, mounts=()):
        Container.count += 1
        self.id = f"strata-image-check-{os.getpid()}-{Container.count}"
        self.bundle = bundle
        spec = json.loads((bundle / "config.json.image").read_text())
        proc = spec["process"]
        proc["terminal"] = False
        if args is not None:
            proc["args"] = proc["args"][:1] + list(args)
        spec["root"]["readonly"] = True
        spec["mounts"] += [{"destination": dst, "type": "bind", "source": str(src), "options": ["rbind", "rw"]} for src, dst in mounts]
        (bundle / "config.json").write_text(json.dumps(spec))
        self.started = time.monotonic()
        self.proc = subprocess.Popen(["runc", "run", self.id], cwd=bundle, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def pid(self):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            state = subprocess.run(["runc", "state", self.id], capture_output=True, text=True)
            if state.returncode == 0 and json.loads(state.stdout).get("status") == "running":
                return json.loads(state.stdout)["pid"]
            time.sleep(0.01)
        raise RuntimeError(f"container {self.id} not running: {self.finish()}")

    def talk(self, request, reply_end, port=11211, wait_s=5.0):
        """Send `request` to the container's own loopback and read up to
        `reply_end`, retrying the connection for `wait_s` (a client run in
        the container's network namespace with nsenter)."""
        client = (
            "import socket,sys,time\n"
            f"end=time.monotonic()+{wait_s}\n"
            "while True:\n"
            "    try: s=socket.create_connection(('127.0.0.1',%d),timeout=5); break\n"
            "    except OSError:\n"
            "        if time.monotonic()>end: raise\n"
            "        time.sleep(0.005)\n"
            "s.sendall(%r); buf=b''\n"
            "while not buf.endswith(%r): buf+=s.recv(65536) or sys.exit('closed: %%r'%%buf)\n"
            "sys.stdout.write(buf.decode())\n"
        ) % (port, request, reply_end)
        out = subprocess.run(["nsenter", f"--net=/proc/{self.pid()}/ns/net", sys.executable, "-c", client], capture_output=True, timeout=30)
        if out.returncode != 0:
            raise RuntimeError(f"client: {out.stderr.decode().strip()}")
        return out.stdout.decode()

    def stop(self):
        subprocess.run(["runc", "kill", self.id, "TERM"], check=True)
        return self.finish()

    def finish(self, timeout=30):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            subprocess.run(["runc", "kill", self.id, "KILL"])
            out, err = self.proc.communicate()
        subprocess.run(["runc", "delete", "-f", self.id], capture_output=True)
        return self.proc.returncode, out.decode(), err.decode()


def check_runs(layout, tag, work):
    bundle = work / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:{tag}", str(bundle)], check=True, stdout=subprocess.DEVNULL)
    shutil.copy(bundle / "config.json", bundle / "config.json.image")

    print("runs (runc, the bundle umoci unpacked; own network namespace, read-only root):")
    c = Container(bundle)
    reply = c.talk(b"version\r\n", b"\r\n")
    elapsed = time.monotonic() - c.started
    listening = subprocess.run(["nsenter", f"--net=/proc/{c.pid()}/ns/net", "ss", "-Hltn"], capture_output=True, text=True).stdout.split()
    code, _, err = c.stop()
    check(reply.startswith("VERSION "), f"the default command answers on 11211 ({reply.strip()})")
    check("0.0.0.0:11211" in listening, f"on every interface of the container, as memcached's default ({' '.join(listening)})")
    print(f"  info the first reply came {elapsed * 1000:.0f} ms after runc run")
    check(code == 0, f"SIGTERM: exit {code}")

    for args, want_code, want in [
        (["-V"], 0, "strata "),
        (["strata", "-V"], 0, "strata "),
        (["no-such-program"], 127, "cannot run no-such-program"),
    ]:
        code, out, err = Container(bundle, args).finish()
        check(code == want_code and want in out + err, f"docker run IMAGE {' '.join(args)}: exit {code}, {(out + err).strip()[:80]}")

    mem = Path(tempfile.mkdtemp(prefix="strata-image-check-", dir="/dev/shm"))
    try:
        os.chown(mem, 11211, 11211)
        args = ["-m", "64", "-e", "/run/strata/strata.mem"]
        c = Container(bundle, args, mounts=[(mem, "/run/strata")])
        stored = c.talk(b"set kept 7 0 5\r\nhello\r\n", b"\r\n")
        code, _, err = c.stop()
        check(stored == "STORED\r\n" and code == 0, f"with -e on a tmpfs: set, then SIGTERM exit {code}")
        files = sorted(p.name for p in mem.iterdir())
        check(files and all(p.stat().st_uid == 11211 for p in mem.iterdir()), f"memory file written as 11211 ({files})")
        c = Container(bundle, args, mounts=[(mem, "/run/strata")])
        got = c.talk(b"get kept\r\n", b"END\r\n")
        code, _, err = c.stop()
        check(got == "VALUE kept 7 5\r\nhello\r\nEND\r\n", f"the next container serves the item ({got!r})")
    finally:
        shutil.rmtree(mem, ignore_errors=True)


def main():
    if os.geteuid() != 0:
        sys.exit("image-check: needs root (runc, and the image's owners)")
    version = next(line.split('"')[1] for line in (ROOT / "Cargo.toml").read_text().splitlines() if line.startswith("version = "))
    work = Path(tempfile.mkdtemp(prefix="strata-image-check-"))
    try:
        archive = subprocess.run([ROOT / "scripts/package/image.sh", work], check=True, capture_output=True, text=True).stdout.split()[-1]
        layout = work / "oci"
        manifest, config = read_image(layout, version)
        check_config(config, version)
        check_files(layout, manifest)
        check_archive(archive, config)
        check_runs(layout, version, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("image-check")


if __name__ == "__main__":
    main()
