"""deskbox: Python SDK for disposable Linux desktops served by deskboxd.

    from deskbox import Sandbox

    with Sandbox.create(template="minimal") as sb:
        sb.left_click(400, 300)
        sb.write("hello")
        png = sb.screenshot()
        sb.click_text("OK")                     # or sb.left_click(target=Target(image="ok.png"))
        print(sb.ocr().text, sb.wait_for_text("Saved", timeout_ms=5000).matched)

    build = Template.build("my-app", context="./app", on_log=print)   # FROM deskbox/minimal ...
    sb = Sandbox.create(template=build.template)                      # "my-app:latest"

    Volume.create("work", size_mb=2048)                               # outlives sandboxes
    sb = Sandbox.create(volumes=[Volume.mount("work", "/data")])

    sb.snapshot("warm")                                               # then start from it
    sb = Sandbox.create(snapshot="warm", auto_resume=True)
    copies = sb.fork(count=4)                                         # 4 sandboxes as sb is now

    for event in events(types=["killed", "error"]):                   # lifecycle, live
        print(event.id, event.type, event.sandbox_id)
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
    SandboxExhaustedError,
    SandboxPausedError,
    TargetNotFoundError,
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
from .events import Event, events
from .live import (
    CommandExit,
    CommandOutput,
    CommandStream,
    Frame,
    LiveMessage,
    LiveStream,
    WebSocketClosed,
)
from .secret import Secret, SecretInfo
from .snapshot import Snapshot, SnapshotInfo
from .usage import metrics, usage, usage_csv
from .template import Template, TemplateBuild, TemplateBuildError, TemplateInfo
from .volume import Volume, VolumeInfo, VolumeMount
from .vision import (
    CompareResult,
    Match,
    Matches,
    OcrLine,
    OcrResult,
    OcrWord,
    Target,
    WaitResult,
    WaitTimeoutError,
)

__version__ = "0.2.0"

__all__ = [
    "Event",
    "events",
    "CommandExit",
    "CommandOutput",
    "CommandStream",
    "Frame",
    "LiveMessage",
    "LiveStream",
    "WebSocketClosed",
    "AuthenticationError",
    "BackgroundCommand",
    "BadRequestError",
    "CommandExitError",
    "CommandResult",
    "CompareResult",
    "ConflictError",
    "ConnectionFailedError",
    "DeskboxError",
    "FileEntry",
    "InvalidActionError",
    "InvalidArgumentError",
    "Match",
    "Matches",
    "NotFoundError",
    "OcrLine",
    "OcrResult",
    "OcrWord",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "Sandbox",
    "SandboxError",
    "SandboxInfo",
    "Secret",
    "SecretInfo",
    "SandboxPausedError",
    "SandboxExhaustedError",
    "Snapshot",
    "SnapshotInfo",
    "Target",
    "TargetNotFoundError",
    "Template",
    "TemplateBuild",
    "TemplateBuildError",
    "TemplateInfo",
    "TimeoutError",
    "Volume",
    "VolumeInfo",
    "VolumeMount",
    "WaitResult",
    "WaitTimeoutError",
    "Window",
    "__version__",
    "metrics",
    "usage",
    "usage_csv",
]
