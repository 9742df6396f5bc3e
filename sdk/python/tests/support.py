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
        os.chmod(self.dir, 0o711)  # sandboxes' user-namespace roots pass through to the state dir
        self.stdout_path = os.path.join(self.dir, "stdout")
        self.log_path = os.path.join(self.dir, "deskboxd.log")
        argv = [DESKBOXD, "--listen", "127.0.0.1:0", "--state-dir", os.path.join(self.dir, "state"),
                "--on-exit", "kill"]  # the temp state dir goes with the server
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


class Picture:
    """A decoded 8-bit RGB/RGBA PNG (what deskboxd's screenshots are) for tests that cut,
    paint and re-encode screenshots; standard library only."""

    def __init__(self, width: int, height: int, channels: int, pixels: bytearray) -> None:
        self.width, self.height, self.channels, self.pixels = width, height, channels, pixels

    @classmethod
    def from_png(cls, data: bytes) -> "Picture":
        import struct
        import zlib

        assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
        pos, idat, ihdr = 8, b"", b""
        while pos < len(data):
            (length,) = struct.unpack(">I", data[pos:pos + 4])
            kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
            if kind == b"IHDR":
                ihdr = body
            elif kind == b"IDAT":
                idat += body
            pos += 12 + length
        width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", ihdr)
        channels = {2: 3, 6: 4, 0: 1, 4: 2}[colour]
        assert depth == 8 and interlace == 0, (depth, interlace)
        raw = zlib.decompress(idat)
        stride = width * channels
        out = bytearray(stride * height)
        prev = bytearray(stride)
        for row in range(height):
            f = raw[row * (stride + 1)]
            line = bytearray(raw[row * (stride + 1) + 1:(row + 1) * (stride + 1)])
            if f == 2:  # "up", what deskboxd writes: the fast path
                line = bytearray((v + u) & 255 for v, u in zip(line, prev))
                f = 0
            for i in range(stride if f else 0):
                a = line[i - channels] if i >= channels else 0
                b = prev[i]
                c = prev[i - channels] if i >= channels else 0
                if f == 1:
                    line[i] = (line[i] + a) & 255
                elif f == 2:
                    line[i] = (line[i] + b) & 255
                elif f == 3:
                    line[i] = (line[i] + (a + b) // 2) & 255
                elif f == 4:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            out[row * stride:(row + 1) * stride] = line
            prev = line
        return cls(width, height, channels, out)

    def to_png(self) -> bytes:
        import struct
        import zlib

        def chunk(kind: bytes, body: bytes) -> bytes:
            return (struct.pack(">I", len(body)) + kind + body
                    + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

        colour = {3: 2, 4: 6, 1: 0, 2: 4}[self.channels]
        stride = self.width * self.channels
        raw = b"".join(b"\x00" + bytes(self.pixels[r * stride:(r + 1) * stride])
                       for r in range(self.height))
        return (b"\x89PNG\r\n\x1a\n"
                + chunk(b"IHDR", struct.pack(">IIBBBBB", self.width, self.height, 8, colour, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))

    def crop(self, x: int, y: int, w: int, h: int) -> "Picture":
        c = self.channels
        out = bytearray()
        for row in range(y, y + h):
            start = (row * self.width + x) * c
            out += self.pixels[start:start + w * c]
        return Picture(w, h, c, out)

    def with_alpha(self) -> "Picture":
        """The same picture with an opaque alpha channel."""
        if self.channels == 4:
            return Picture(self.width, self.height, 4, bytearray(self.pixels))
        assert self.channels == 3
        out = bytearray()
        for i in range(0, len(self.pixels), 3):
            out += self.pixels[i:i + 3] + b"\xff"
        return Picture(self.width, self.height, 4, out)

    def paint(self, x: int, y: int, w: int, h: int, fn) -> "Picture":  # type: ignore[no-untyped-def]
        """A copy with fn(list of the pixel's channel values) -> new values applied to a box."""
        c = self.channels
        out = Picture(self.width, self.height, c, bytearray(self.pixels))
        for row in range(y, y + h):
            for col in range(x, x + w):
                i = (row * self.width + col) * c
                out.pixels[i:i + c] = bytes(fn(list(out.pixels[i:i + c])))
        return out

    def invert(self, x: int, y: int, w: int, h: int) -> "Picture":
        """A copy with the box's colours inverted (alpha kept): every pixel in it differs."""
        return self.paint(x, y, w, h, lambda p: [255 - v for v in p[:3]] + p[3:])

    def scale_down(self, factor: int) -> "Picture":
        """Every factor-th pixel of every factor-th row (nearest neighbour)."""
        c = self.channels
        w, h = self.width // factor, self.height // factor
        out = bytearray()
        for row in range(h):
            for col in range(w):
                i = (row * factor * self.width + col * factor) * c
                out += self.pixels[i:i + c]
        return Picture(w, h, c, out)
