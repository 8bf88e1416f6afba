"""A strata process for the client tests: started on ephemeral ports with
-v, its listening addresses read from that log (which is then drained in
the background, so the server never blocks on it), stopped by SIGTERM.

STRATA_BIN names the binary (default: target/release/strata).
"""

import os
import re
import subprocess
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("STRATA_BIN", os.path.join(ROOT, "target", "release", "strata"))


class StrataProcess:
    def __init__(self, args, count=1):
        """Run BIN with `args` (which include -v) until `count` listeners
        are logged; their (host, port) pairs are in `addrs`."""
        self.proc = subprocess.Popen([BIN, *args], stderr=subprocess.PIPE, text=True)
        self.addrs = []
        for line in self.proc.stderr:
            match = re.match(r"strata: listening on (\S+):(\d+)", line)
            if match:
                self.addrs.append((match.group(1), int(match.group(2))))
                if len(self.addrs) == count:
                    break
        else:
            raise RuntimeError("strata exited before listening")
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def stop(self):
        self.proc.terminate()
        assert self.proc.wait(timeout=10) == 0, "SIGTERM exits 0"
