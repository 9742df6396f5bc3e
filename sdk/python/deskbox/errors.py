"""Typed exceptions for deskbox API errors.

Every error body deskboxd sends is ``{"error": {"code", "message", "field"}}``; the SDK turns it
into one of the classes below, chosen by HTTP status (and, for a few codes, by the code).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class DeskboxError(Exception):
    """Base class of every error the SDK raises.

    Attributes:
        status: the HTTP status (0 when no answer arrived, e.g. a connection failure).
        code: the API's error code (``"invalid_action"``, ``"not_found"``...), or a client-side
            code such as ``"connection_failed"``.
        message: the API's human-readable message.
        field: the request field the error is about (``"x"``, ``"actions[2].coordinate[0]"``),
            or ``None``.
        body: the parsed error body when there was one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        code: str = "",
        field: Optional[str] = None,
        body: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.field = field or None
        self.body = body
        super().__init__(self._describe())

    def _describe(self) -> str:
        text = self.message or "request failed"
        detail = []
        if self.status:
            detail.append(f"HTTP {self.status}")
        if self.code:
            detail.append(self.code)
        if self.field:
            detail.append(f"field {self.field}")
        return f"{text} ({', '.join(detail)})" if detail else text


class ConnectionFailedError(DeskboxError):
    """The server could not be reached (refused, reset, timed out); names the server URL."""


class BadRequestError(DeskboxError):
    """HTTP 400: the request is malformed or a field is invalid (see ``field``)."""


InvalidArgumentError = BadRequestError


class InvalidActionError(BadRequestError):
    """HTTP 400 ``invalid_action``: an input action was rejected (see ``field``)."""


class AuthenticationError(DeskboxError):
    """HTTP 401: missing or wrong API key."""


class PermissionDeniedError(DeskboxError):
    """HTTP 403: e.g. a file the sandbox user may not read."""


class NotFoundError(DeskboxError):
    """HTTP 404: no such sandbox, file, recording or endpoint."""


class ConflictError(DeskboxError):
    """HTTP 409: the sandbox's state forbids it (paused, already recording, not empty...)."""


class SandboxPausedError(ConflictError):
    """HTTP 409 ``sandbox_paused``: resume the sandbox first."""


class SandboxExhaustedError(ConflictError):
    """HTTP 409 ``sandbox_exhausted``: the sandbox is at its process or memory limit (``field``
    names it, e.g. ``"limits.pids"``). `Sandbox.kill_processes` brings it back."""


class TargetNotFoundError(DeskboxError):
    """HTTP 422 ``target_not_found``: what an action aimed at (``target`` text or image) did not
    appear on the screen within its ``timeout_ms``. ``field`` names the target (``"target"`` or
    ``"actions[2].target"``); the actions before it in the batch have run."""


class PayloadTooLargeError(DeskboxError):
    """HTTP 413."""


class RateLimitError(DeskboxError):
    """HTTP 429: e.g. ``too_many_sandboxes``."""


class SandboxError(DeskboxError):
    """HTTP 5xx: the sandbox or the server failed (start failed, agent gone, internal...)."""


class TimeoutError(SandboxError):  # noqa: A001 - deliberately mirrors the API's meaning
    """HTTP 504: the agent or the command did not answer in time."""


_BY_STATUS: Dict[int, Type[DeskboxError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    429: RateLimitError,
    504: TimeoutError,
}

_BY_CODE: Dict[str, Type[DeskboxError]] = {
    "invalid_action": InvalidActionError,
    "sandbox_paused": SandboxPausedError,
    "sandbox_exhausted": SandboxExhaustedError,
    "target_not_found": TargetNotFoundError,
}


def error_from_response(status: int, payload: bytes, reason: str = "") -> DeskboxError:
    """Builds the typed exception for a non-2xx response."""
    import json

    code, message, field, body = "", "", None, None
    try:
        parsed = json.loads(payload.decode("utf-8")) if payload else None
    except (ValueError, UnicodeDecodeError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        body = parsed
        err = parsed["error"]
        code = str(err.get("code") or "")
        message = str(err.get("message") or "")
        field = err.get("field") or None
    else:
        message = payload.decode("utf-8", "replace").strip()[:500] or reason
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status)
    if cls is None:
        cls = SandboxError if status >= 500 else DeskboxError
    return cls(message, status=status, code=code, field=field, body=body)
