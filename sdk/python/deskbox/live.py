"""Live streams of a sandbox: a stream command's output as it is produced, and the screen's
frames and viewer events over the stream WebSocket (a small RFC 6455 client on the standard
library). Both are plain iterators; `deskbox.aio` wraps them as async iterators."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Union

from ._http import _Connection
from .errors import ConnectionFailedError, DeskboxError, error_from_response

if TYPE_CHECKING:
    from .sandbox import Sandbox


# ---------------------------------------------------------------------------------------------
# Stream commands
# ---------------------------------------------------------------------------------------------
@dataclass
class CommandOutput:
    """One piece of output: ``stream`` is "stdout" or "stderr"; ``text`` is UTF-8 (invalid bytes
    replaced), ``data`` the exact bytes."""

    stream: str
    text: str
    data: bytes


@dataclass
class CommandExit:
    """How a stream command ended: ``signal`` is set when a signal ended it."""

    exit_code: int
    signal: Optional[int] = None
    duration_ms: int = 0


class CommandStream:
    """A running stream command (``sandbox.commands.stream(...)``). Iterate it for its
    `CommandOutput` as the command prints; afterwards ``exit`` says how it ended. Write to its
    stdin (started with ``stdin_open=True``) and kill it while it runs. Closing the stream (or
    leaving a ``with`` block) before it ends kills the command."""

    def __init__(self, sandbox: "Sandbox", body: Dict[str, Any], read_timeout: Optional[float]):
        self._sb = sandbox
        http = sandbox._http
        parsed = urllib.parse.urlsplit(http.server)
        self._conn = _Connection(parsed.hostname or "127.0.0.1", parsed.port or 80,
                                 timeout=read_timeout)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                   "User-Agent": "deskbox-python"}
        if http.api_key:
            headers["Authorization"] = "Bearer " + http.api_key
        payload = json.dumps(body).encode()
        try:
            self._conn.request("POST", http._target(sandbox._path("/commands"), None),
                               body=payload, headers=headers)
            self._resp = self._conn.getresponse()
        except OSError as e:
            self._conn.close()
            raise ConnectionFailedError(f"cannot reach deskboxd at {http.server}: {e}",
                                        code="connection_failed") from None
        if self._resp.status != 200:
            data = self._resp.read()
            self._conn.close()
            raise error_from_response(self._resp.status, data, self._resp.reason)
        self.exit: Optional[CommandExit] = None
        first = self._next_event()
        if first is None or first[0] != "start":
            self._conn.close()
            raise DeskboxError("the stream command's answer did not start with its pid")
        self.pid: int = int(first[1]["pid"])

    def _next_event(self) -> Optional[tuple]:
        name, data = "message", ""
        while True:
            line = self._resp.fp.readline()
            if not line:
                return None
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if text.startswith("event: "):
                name = text[7:]
            elif text.startswith("data: "):
                data = text[6:]
            elif text == "" and data:
                return name, json.loads(data)

    def __iter__(self) -> Iterator[CommandOutput]:
        return self

    def __next__(self) -> CommandOutput:
        while True:
            if self.exit is not None:
                raise StopIteration
            try:
                event = self._next_event()
            except OSError as e:
                raise ConnectionFailedError(f"the command's stream broke: {e}",
                                            code="connection_failed") from None
            if event is None:
                raise ConnectionFailedError("the command's stream ended before its exit",
                                            code="connection_failed")
            name, data = event
            if name in ("stdout", "stderr"):
                raw = (base64.b64decode(data["data_b64"]) if data.get("data_b64") is not None
                       else str(data.get("data", "")).encode())
                return CommandOutput(stream=name, text=str(data.get("data", "")), data=raw)
            if name == "exit":
                self.exit = CommandExit(exit_code=int(data.get("exit_code", -1)),
                                        signal=data.get("signal"),
                                        duration_ms=int(data.get("duration_ms", 0)))
                self._conn.close()
                raise StopIteration
            if name == "error":
                self._conn.close()
                raise DeskboxError(str(data.get("message", "the command's stream failed")),
                                   code=str(data.get("code") or "stream_failed"))

    def wait(self) -> CommandExit:
        """Reads (and drops) the rest of its output; how it ended."""
        for _ in self:
            pass
        assert self.exit is not None
        return self.exit

    def write_stdin(self, data: Union[bytes, str], eof: bool = False) -> None:
        """Sends bytes (text as UTF-8) to its stdin; ``eof`` closes stdin after them."""
        self._sb.commands.write_stdin(self.pid, data, eof=eof)

    def kill(self, signal: Union[str, int] = "KILL") -> None:
        """Signals it (its process group); its exit then ends the iteration."""
        self._sb.commands.kill(self.pid, signal)

    def close(self) -> None:
        """Stops reading; a command still running is killed by the server."""
        self._conn.close()

    def __enter__(self) -> "CommandStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# The screen stream (WebSocket)
# ---------------------------------------------------------------------------------------------
@dataclass
class Frame:
    """An encoded picture of the screen (``codec`` "jpeg": a rectangle at x, y of a
    full_width x full_height screen; "h264": an access unit of the whole screen)."""

    codec: str
    keyframe: bool
    x: int
    y: int
    width: int
    height: int
    full_width: int
    full_height: int
    capture_us: int
    data: bytes


@dataclass
class LiveMessage:
    """One message of the screen stream: ``kind`` "frame" (``frame`` set) or "event" (``event``:
    the server's JSON, e.g. {"type": "hello"}, {"type": "cursor_position"})."""

    kind: str
    frame: Optional[Frame] = None
    event: Dict[str, Any] = field(default_factory=dict)


class WebSocketClosed(ConnectionFailedError):
    """The server closed the WebSocket (``close_code``, ``close_reason``)."""

    def __init__(self, message: str, close_code: int = 0, close_reason: str = "") -> None:
        super().__init__(message, code="websocket_closed")
        self.close_code = close_code
        self.close_reason = close_reason


class _WebSocket:
    """The client side of RFC 6455 over one socket: text and binary messages, pings
    answered, fragments joined, every frame sent masked."""

    def __init__(self, host: str, port: int, target: str, headers: Dict[str, str],
                 timeout: Optional[float]) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {target} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self._sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self._buffer = b""
        head = self._read_until(b"\r\n\r\n")
        status_line, _, rest = head.partition(b"\r\n")
        parts = status_line.split(b" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        if status != 101:
            # The refusal's body (a JSON error) follows its header.
            length = 0
            for line in rest.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip() or 0)
            body = self._read_exact(length) if length else b""
            self._sock.close()
            raise error_from_response(status, body, parts[2].decode() if len(parts) > 2 else "")

    def _read_until(self, mark: bytes) -> bytes:
        while mark not in self._buffer:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise WebSocketClosed("the connection closed during the WebSocket handshake")
            self._buffer += chunk
        head, _, self._buffer = self._buffer.partition(mark)
        return head

    def _read_exact(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self._sock.recv(max(65536, n - len(self._buffer)))
            if not chunk:
                raise WebSocketClosed("the server closed the connection")
            self._buffer += chunk
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def send(self, opcode: int, payload: bytes) -> None:
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self._sock.sendall(header + mask + masked)

    def receive(self) -> tuple:
        """The next whole message: (opcode 1 text or 2 binary, payload)."""
        message_opcode, parts = 0, []
        while True:
            b0, b1 = self._read_exact(2)
            fin, opcode, n = b0 & 0x80, b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read_exact(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read_exact(8))[0]
            mask = self._read_exact(4) if b1 & 0x80 else b""
            payload = self._read_exact(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x9:  # ping: pong with its payload
                self.send(0xA, payload)
                continue
            if opcode == 0xA:
                continue
            if opcode == 0x8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                reason = payload[2:].decode("utf-8", "replace")
                try:
                    self.send(0x8, payload[:2])
                except OSError:
                    pass
                self.close()
                raise WebSocketClosed(f"the server closed the stream ({code} {reason})".strip(),
                                      code, reason)
            if opcode in (0x1, 0x2):
                message_opcode = opcode
            parts.append(payload)
            if fin:
                return message_opcode, b"".join(parts)

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


_CODECS = {1: "h264", 2: "jpeg"}


def _frame(payload: bytes) -> Optional[Frame]:
    if len(payload) < 24:
        return None
    kind, flags, x, y, w, h, full_w, full_h, _, capture_us = struct.unpack(
        "<BBHHHHHHHQ", payload[:24])
    return Frame(codec=_CODECS.get(kind, str(kind)), keyframe=bool(flags & 1), x=x, y=y,
                 width=w, height=h, full_width=full_w, full_height=full_h,
                 capture_us=capture_us, data=payload[24:])


class LiveStream:
    """The screen stream of a sandbox (``sandbox.live()``): iterate it for `LiveMessage`s (the
    first is the server's hello event), frames only when the screen changes. Close it (or leave
    the ``with`` block) when done."""

    def __init__(self, sandbox: "Sandbox", codec: str = "jpeg", fps: Optional[int] = None,
                 width: Optional[int] = None, height: Optional[int] = None,
                 quality: Optional[int] = None, read_timeout: Optional[float] = 60.0) -> None:
        http = sandbox._http
        parsed = urllib.parse.urlsplit(http.server)
        query: Dict[str, Any] = {"codec": codec}
        for name, value in (("fps", fps), ("width", width), ("height", height),
                            ("quality", quality)):
            if value is not None:
                query[name] = value
        headers = {"User-Agent": "deskbox-python"}
        if http.api_key:
            headers["Authorization"] = "Bearer " + http.api_key
        else:
            token = sandbox._info.view_token or sandbox.info().view_token
            if token:
                query["token"] = token
        target = http._target(sandbox._path("/stream"), query)
        try:
            self._ws = _WebSocket(parsed.hostname or "127.0.0.1", parsed.port or 80, target,
                                  headers, read_timeout)
        except OSError as e:
            raise ConnectionFailedError(f"cannot open the stream of {sandbox.id}: {e}",
                                        code="connection_failed") from None

    def __iter__(self) -> Iterator[LiveMessage]:
        return self

    def __next__(self) -> LiveMessage:
        while True:
            try:
                opcode, payload = self._ws.receive()
            except WebSocketClosed as e:
                if e.close_code in (1000, 1001):
                    raise StopIteration from None
                raise
            except OSError as e:
                raise ConnectionFailedError(f"the stream broke: {e}",
                                            code="connection_failed") from None
            if opcode == 0x1:
                return LiveMessage(kind="event", event=json.loads(payload.decode("utf-8")))
            frame = _frame(payload)
            if frame is not None:
                return LiveMessage(kind="frame", frame=frame)

    def frames(self) -> Iterator[Frame]:
        """Only the frames."""
        for message in self:
            if message.frame is not None:
                yield message.frame

    def keyframe(self) -> None:
        """Asks the encoder for a keyframe (a whole picture) next."""
        self._ws.send(0x1, b'{"type":"keyframe"}')

    def close(self) -> None:
        try:
            self._ws.send(0x8, struct.pack("!H", 1000))
        except OSError:
            pass
        self._ws.close()

    def __enter__(self) -> "LiveStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def wait_for_window(sandbox: "Sandbox", title: Union[str, Callable[[str], bool]],
                    timeout: float = 30.0) -> Any:
    """The first window whose title contains ``title`` (or satisfies it, a function), waiting
    for the screen to change between looks (the live stream's frames come only on changes).
    Raises deskbox.TimeoutError after ``timeout`` seconds."""
    from .errors import TimeoutError as DeskboxTimeout

    matches = title if callable(title) else (lambda t: title in t)
    deadline = time.monotonic() + timeout

    def found() -> Any:
        for window in sandbox.windows():
            if matches(window.title):
                return window
        return None

    window = found()
    if window is not None:
        return window
    with LiveStream(sandbox, fps=5, width=320, height=200,
                    read_timeout=max(1.0, timeout)) as live:
        live._ws._sock.settimeout(1.0)
        while time.monotonic() < deadline:
            try:
                message = next(live)
            except (ConnectionFailedError, StopIteration):
                message = None
            except socket.timeout:
                message = None
            if message is None or message.frame is not None:
                window = found()
                if window is not None:
                    return window
    raise DeskboxTimeout(f"no window titled {title!r} within {timeout} s", code="timeout")


__all__: List[str] = ["CommandOutput", "CommandExit", "CommandStream", "Frame", "LiveMessage",
                      "LiveStream", "WebSocketClosed", "wait_for_window"]
