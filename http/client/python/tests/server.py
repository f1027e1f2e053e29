"""A real `wts serve` for the tests: the one $WTS_URL and $WTS_API_KEY name
(with $WTS_MODEL, default "tiny"), else one started here on 127.0.0.1 from
$WTS_BIN (default: built with `go build` from this repository) with a
generated tiny model, stopped at the end."""

import os
import re
import shutil
import subprocess
import tempfile
import threading

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


class Server:
    def __init__(self):
        self.proc, self.tmp = None, None
        if os.environ.get("WTS_URL") and os.environ.get("WTS_API_KEY"):
            self.url, self.key, self.model = os.environ["WTS_URL"], os.environ["WTS_API_KEY"], os.environ.get("WTS_MODEL", "tiny")
            return
        self.tmp = tempfile.mkdtemp(prefix="wts-py-")
        wts = os.environ.get("WTS_BIN")
        if not wts:
            wts = os.path.join(self.tmp, "wts")
            subprocess.run(["go", "build", "-o", wts, "./cmd/wts"], cwd=ROOT, check=True)
        data, model = os.path.join(self.tmp, "data"), os.path.join(self.tmp, "tiny")
        run = lambda *a: subprocess.run([wts, *a], check=True, capture_output=True, text=True, timeout=120).stdout
        run("model", "init", "--preset", "tiny", "--seed", "1", "--out", model)
        self.key = run("keys", "create", "--org", "py", "--data", data).strip()
        run("orgs", "credit", "--org", "py", "--microusd", "1000000000000", "--data", data)
        self.proc = subprocess.Popen([wts, "serve", "--data", data, "--addr", "127.0.0.1:0", "--model", "tiny=" + model, "--log-level", "warn"],
                                     stderr=subprocess.PIPE, text=True)
        found = threading.Event()
        self.url, self.model, self.log = None, "tiny", []

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"listening on (http://\S+)", line)
                if m and not found.is_set():
                    self.url = m.group(1)
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(60) or not self.url:
            self.stop()
            raise RuntimeError("wts serve did not start:\n" + "".join(self.log))

    def stop(self):
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc.stderr.close()
            self.proc = None
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
