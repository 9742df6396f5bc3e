"""A small keep-alive HTTP/1.1 client for deskboxd (standard library only)."""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import threading
import urllib.parse
from typing import Any, Dict, Mapping, Optional

from .errors import ConnectionFailedError, DeskboxError, error_from_response

DEFAULT_SERVER = "http://127.0.0.1:8700"
DEFAULT_TIMEOUT = 120.0
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})
_RETRYABLE = (
    http.client.RemoteDisconnected,
    http.client.BadStatusLine,
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
)


def resolve_server(server: Optional[str]) -> str:
    """The server URL: the argument, else ``$DESKBOX_SERVER``, else http://127.0.0.1:8700."""
    url = server or os.environ.get("DESKBOX_SERVER") or DEFAULT_SERVER
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")


def resolve_api_key(api_key: Optional[str]) -> Optional[str]:
    """The API key: the argument, else ``$DESKBOX_API_KEY``, else none."""
    return api_key if api_key is not None else (os.environ.get("DESKBOX_API_KEY") or None)


class _Connection(http.client.HTTPConnection):
    """HTTPConnection that sends a small request's headers and body in one write (one packet,
    one wake-up of the server instead of two)."""

    def _send_output(self, message_body: Any = None, encode_chunked: bool = False) -> None:
        if isinstance(message_body, bytes) and len(message_body) <= 65536 and not encode_chunked:
            self._buffer.extend((b"", b""))  # type: ignore[attr-defined]
            msg = b"\r\n".join(self._buffer)  # type: ignore[attr-defined]
            del self._buffer[:]  # type: ignore[attr-defined]
            self.send(msg + message_body)
            return
        super()._send_output(message_body, encode_chunked)


class Response:
    """A finished response: status, headers (lower-case names) and the whole body."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body) if self.body else None


class HttpClient:
    """One persistent connection to deskboxd, reused across calls (thread-safe by a lock).

    A connection the server has closed while idle is noticed before sending and replaced. A
    connection that drops during a request is retried once on a fresh connection, but only
    for idempotent methods (GET, HEAD, PUT, DELETE); a POST is never sent twice.
    """

    def __init__(
        self, server: Optional[str] = None, api_key: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.server = resolve_server(server)
        self.api_key = resolve_api_key(api_key)
        self.timeout = timeout
        parsed = urllib.parse.urlsplit(self.server)
        if parsed.scheme != "http":
            raise ValueError(f"server URL {self.server!r}: only http:// is supported")
        if not parsed.hostname:
            raise ValueError(f"server URL {self.server!r}: no host")
        self._host = parsed.hostname
        self._port = parsed.port or 80
        self._base = parsed.path.rstrip("/")
        self._conn: Optional[http.client.HTTPConnection] = None
        self._lock = threading.Lock()
        self._headers: Dict[str, str] = {"Accept": "application/json", "User-Agent": "deskbox-python"}
        if self.api_key:
            self._headers["Authorization"] = "Bearer " + self.api_key

    # -- connection management -------------------------------------------------------------
    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        conn = _Connection(self._host, self._port, timeout=timeout)
        try:
            conn.connect()
        except OSError as e:
            conn.close()
            raise ConnectionFailedError(
                f"cannot connect to deskboxd at {self.server}: {e}", code="connection_failed"
            ) from None
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _usable(self, conn: http.client.HTTPConnection) -> bool:
        # An idle keep-alive socket that is readable has been closed by the server (or holds
        # junk): either way it cannot carry the next request.
        sock = conn.sock
        if sock is None:
            return False
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def close(self) -> None:
        """Closes the kept-alive connection (the next call opens a new one)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- requests ---------------------------------------------------------------------------
    def url(self, path: str, query: Optional[Mapping[str, Any]] = None) -> str:
        """The absolute URL of an API path (for links such as viewer URLs)."""
        return self.server + self._target(path, query)

    def _target(self, path: str, query: Optional[Mapping[str, Any]]) -> str:
        target = self._base + path
        if query:
            items = [(k, _query_value(v)) for k, v in query.items() if v is not None]
            if items:
                target += "?" + urllib.parse.urlencode(items)
        return target

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        json_body: Any = None,
        body: Optional[bytes] = None,
        content_type: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Response:
        """Sends one request and returns the response; raises a typed DeskboxError on 4xx/5xx."""
        headers = dict(self._headers)
        if json_body is not None:
            body = json.dumps(json_body, separators=(",", ":"), ensure_ascii=False).encode()
            headers["Content-Type"] = "application/json"
        elif body is not None:
            headers["Content-Type"] = content_type or "application/octet-stream"
        if body is not None or method in ("POST", "PUT"):
            headers["Content-Length"] = str(len(body or b""))
        target = self._target(path, query)
        t = self.timeout if timeout is None else timeout
        attempts = 2 if method in _IDEMPOTENT else 1
        with self._lock:
            for attempt in range(attempts):
                conn = self._conn
                if conn is None or not self._usable(conn):
                    if conn is not None:
                        conn.close()
                    conn = self._conn = self._connect(t)
                elif conn.sock is not None and conn.timeout != t:
                    conn.sock.settimeout(t)
                    conn.timeout = t
                try:
                    conn.request(method, target, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                except _RETRYABLE as e:
                    conn.close()
                    self._conn = None
                    if attempt + 1 < attempts:
                        continue
                    raise ConnectionFailedError(
                        f"connection to deskboxd at {self.server} dropped during "
                        f"{method} {path}: {e!r}", code="connection_failed",
                    ) from None
                except socket.timeout:
                    conn.close()
                    self._conn = None
                    raise ConnectionFailedError(
                        f"deskboxd at {self.server} did not answer {method} {path} within {t} s",
                        code="timeout",
                    ) from None
                except OSError as e:
                    conn.close()
                    self._conn = None
                    raise ConnectionFailedError(
                        f"cannot talk to deskboxd at {self.server}: {e}", code="connection_failed"
                    ) from None
                if resp.will_close:
                    conn.close()
                    self._conn = None
                break
        response = Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        if resp.status >= 400:
            raise error_from_response(resp.status, data, resp.reason)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """A request whose answer is JSON; returns it parsed."""
        response = self.request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise DeskboxError(
                f"{method} {path}: the answer is not JSON", status=response.status, code="bad_response"
            ) from None


def json_once(server: Optional[str], api_key: Optional[str], method: str, path: str,
              **kwargs: Any) -> Any:
    """One JSON request on a connection of its own, closed after it (the calls on a server's
    named things: volumes, snapshots)."""
    http = HttpClient(server, api_key)
    try:
        return http.json(method, path, **kwargs)
    finally:
        http.close()


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)

