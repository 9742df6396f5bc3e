"""deskbox: Python SDK for disposable Linux desktops served by deskboxd.

    from deskbox import Sandbox

    with Sandbox.create(template="minimal") as sb:
        sb.left_click(400, 300)
        sb.write("hello")
        png = sb.screenshot()
"""

from .errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ConnectionFailedError,
    DeskboxError,
    InvalidActionError,
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    SandboxError,
    SandboxPausedError,
    TimeoutError,
)
from .sandbox import (
    BackgroundCommand,
    CommandExitError,
    CommandResult,
    FileEntry,
    Sandbox,
    SandboxInfo,
    Window,
)

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "BackgroundCommand",
    "BadRequestError",
    "CommandExitError",
    "CommandResult",
    "ConflictError",
    "ConnectionFailedError",
    "DeskboxError",
    "FileEntry",
    "InvalidActionError",
    "InvalidArgumentError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "Sandbox",
    "SandboxError",
    "SandboxInfo",
    "SandboxPausedError",
    "TimeoutError",
    "Window",
    "__version__",
]
