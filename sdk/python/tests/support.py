"""A real deskboxd child process for the SDK tests (like tests/support/deskboxd_process.hpp).

Started with ``--listen 127.0.0.1:0 --state-dir <temp dir>``; the port is read from its first
stdout line (``deskboxd listening on http://127.0.0.1:PORT``). Stopped with SIGTERM (then
SIGKILL after 30 s), and its temp dir removed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
SDK_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(SDK_DIR))
if SDK_DIR not in sys.path:
    sys.path.insert(0, SDK_DIR)

DESKBOXD = os.environ.get("DESKBOXD", os.path.join(REPO, "build", "server", "deskboxd"))
TEMPLATE = "minimal"
RUNTIME = "container"


class DeskboxdProcess:
    """One deskboxd on a free loopback port, in its own temp state dir."""

    def __init__(self, extra: Optional[List[str]] = None, start_timeout: float = 30.0) -> None:
        self.dir = tempfile.mkdtemp(prefix="deskbox-sdk-test-")
        self.stdout_path = os.path.join(self.dir, "stdout")
        self.log_path = os.path.join(self.dir, "deskboxd.log")
        argv = [DESKBOXD, "--listen", "127.0.0.1:0", "--state-dir", os.path.join(self.dir, "state")]
        argv += extra or []
        try:
            with open(self.stdout_path, "wb") as out, open(self.log_path, "wb") as err:
                self.process = subprocess.Popen(argv, stdout=out, stderr=err,
                                                stdin=subprocess.DEVNULL)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        deadline = time.monotonic() + start_timeout
        line = ""
        while time.monotonic() < deadline:
            with open(self.stdout_path, "r", errors="replace") as f:
                line = f.readline()
            if line.endswith("\n") and "listening" in line:
                break
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        colon = line.rstrip().rfind(":")
        if "listening" not in line or colon < 0:
            log = self.log()
            self.stop()
            raise RuntimeError(f"deskboxd did not start: {line!r}\n{log}")
        self.port = int(line.rstrip()[colon + 1:])
        self.url = f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        """deskboxd's stderr so far."""
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM, wait for it (it kills its sandboxes), then remove the temp dir."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for _ in range(50):
            try:
                shutil.rmtree(self.dir)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)  # a sandbox's mounts may go a moment after the server
        else:
            shutil.rmtree(self.dir)  # raise: a test must not leave its temp dir behind


def wait_until(predicate, timeout: float = 15.0, interval: float = 0.1):  # type: ignore[no-untyped-def]
    """Polls ``predicate`` until it returns something truthy; returns that, or None."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
