"""The `Sandbox` class: one disposable desktop on a deskboxd server."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from types import TracebackType
from typing import (
    Any,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

from ._http import HttpClient
from .live import CommandStream, LiveStream, wait_for_window
from .errors import ConflictError, DeskboxError, NotFoundError
from .snapshot import SnapshotInfo
from .vision import (
    CompareResult,
    ImageInput,
    Match,
    Matches,
    OcrResult,
    RegionLike,
    Target,
    WaitResult,
    WaitTimeoutError,
    encode_image,
    region_json,
    search_body,
)

Action = Dict[str, Any]
Point = Tuple[int, int]

_KEEP: Any = object()  # set_network: a part not given stays as it is
_CREATE_TIMEOUT = 600.0  # a microVM's first boot (no template snapshot yet) can take a while


# ---------------------------------------------------------------------------------------------
# Result types
# ---------------------------------------------------------------------------------------------
@dataclass
class SandboxInfo:
    """What inspect/list report about a sandbox. ``raw`` holds the whole JSON object."""

    id: str
    state: str
    runtime: str
    template: str
    resolution: Tuple[int, int]
    created_at: str
    expires_at: str
    metadata: Dict[str, Any]
    view_token: Optional[str]
    control_token: Optional[str]
    raw: Dict[str, Any] = field(repr=False)
    auto_resume: bool = False
    paused_reason: Optional[str] = None  # while paused: "request" or "timeout"
    snapshot_name: Optional[str] = None  # the snapshot it was started from

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "SandboxInfo":
        """Builds it from the API's JSON object."""
        res = j.get("resolution") or [0, 0]
        return cls(
            id=j["id"],
            state=j.get("state", ""),
            runtime=j.get("runtime", ""),
            template=j.get("template", ""),
            resolution=(int(res[0]), int(res[1])),
            created_at=j.get("created_at", ""),
            expires_at=j.get("expires_at", ""),
            metadata=j.get("metadata") or {},
            view_token=j.get("view_token"),
            control_token=j.get("control_token"),
            raw=j,
            auto_resume=bool(j.get("auto_resume", False)),
            paused_reason=j.get("paused_reason"),
            # A string: the named snapshot it came from (an object is a paused microVM's save).
            snapshot_name=j.get("from_snapshot"),
        )


@dataclass
class CommandResult:
    """A finished foreground command.

    ``stdout``/``stderr`` are text (invalid UTF-8 replaced by U+FFFD); ``stdout_bytes`` and
    ``stderr_bytes`` are the exact bytes.
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_ms: int = 0
    signal: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def stdout_bytes(self) -> bytes:
        """The exact bytes the command wrote to stdout."""
        return _exact(self.raw, "stdout")

    @property
    def stderr_bytes(self) -> bytes:
        """The exact bytes the command wrote to stderr."""
        return _exact(self.raw, "stderr")


def _exact(raw: Dict[str, Any], name: str) -> bytes:
    import base64

    if raw.get(name + "_b64") is not None:
        return base64.b64decode(raw[name + "_b64"])
    return str(raw.get(name, "")).encode("utf-8")


@dataclass
class BackgroundCommand:
    """A command started with ``background=True``: it runs on, its output is discarded."""

    pid: int


class CommandExitError(DeskboxError):
    """Raised by ``commands.run(..., check=True)`` when the command exits non-zero."""

    def __init__(self, result: CommandResult, cmd: Union[str, Sequence[str]]) -> None:
        self.result = result
        super().__init__(
            f"command {cmd!r} exited with {result.exit_code}: {result.stderr.strip()[:300]}",
            code="command_failed",
        )


@dataclass
class FileEntry:
    """One entry of a directory listing."""

    name: str
    type: str  # file | dir | symlink | other
    size: int
    mode: int
    mtime: float
    target: Optional[str] = None


@dataclass
class Window:
    """A top-level application window; x/y/width/height are its client area on the screen."""

    id: int
    title: str
    wm_class: str
    instance: str
    x: int
    y: int
    width: int
    height: int
    active: bool
    visible: bool
    pid: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "Window":
        """Builds it from the API's JSON object."""
        return cls(
            id=int(j.get("id", 0)),
            title=j.get("title", ""),
            wm_class=j.get("class", ""),
            instance=j.get("instance", ""),
            x=int(j.get("x", 0)),
            y=int(j.get("y", 0)),
            width=int(j.get("width", 0)),
            height=int(j.get("height", 0)),
            active=bool(j.get("active", False)),
            visible=bool(j.get("visible", False)),
            pid=j.get("pid"),
            raw=j,
        )


# ---------------------------------------------------------------------------------------------
# Sub-APIs
# ---------------------------------------------------------------------------------------------
def _command_body(cmd: Union[str, Sequence[str]], timeout: Optional[float],
                  env: Optional[Mapping[str, str]], cwd: Optional[str],
                  stdin: Optional[str]) -> Dict[str, Any]:
    """The POST /commands fields every form shares."""
    body: Dict[str, Any] = {}
    if isinstance(cmd, str):
        body["cmd"] = cmd
    else:
        body["argv"] = list(cmd)
    if timeout is not None:
        body["timeout_s"] = timeout
    if env:
        body["env"] = dict(env)
    if cwd is not None:
        body["cwd"] = cwd
    if stdin is not None:
        body["stdin"] = stdin
    return body


class Commands:
    """``sandbox.commands``: run programs inside the sandbox (as its user, with DISPLAY set)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def run(
        self,
        cmd: Union[str, Sequence[str]],
        background: bool = False,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Optional[str] = None,
        check: bool = False,
    ) -> Any:
        """Runs a command and returns a `CommandResult` (or a `BackgroundCommand`).

        Args:
            cmd: a shell line (run by ``/bin/sh -c``) or an argv list.
            background: start it and return at once with its pid (its output is discarded).
            timeout: seconds before it is killed (default 60 in the foreground, none in the
                background).
            env: extra environment variables.
            cwd: working directory (must exist).
            stdin: text given to the command's standard input.
            check: raise `CommandExitError` when the exit code is not 0.
        """
        body = _command_body(cmd, timeout, env, cwd, stdin)
        if background:
            body["background"] = True
        wait = 30.0 if background else (60.0 if timeout is None else float(timeout)) + 30.0
        j = self._sb._http.json(
            "POST", self._sb._path("/commands"), json_body=body, timeout=wait
        )
        if background:
            return BackgroundCommand(pid=int(j["pid"]))
        result = CommandResult(
            exit_code=int(j.get("exit_code", -1)),
            stdout=j.get("stdout", ""),
            stderr=j.get("stderr", ""),
            timed_out=bool(j.get("timed_out", False)),
            duration_ms=int(j.get("duration_ms", 0)),
            signal=j.get("signal"),
            raw=j,
        )
        if check and result.exit_code != 0:
            raise CommandExitError(result, cmd)
        return result

    def stream(
        self,
        cmd: Union[str, Sequence[str]],
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Optional[str] = None,
        stdin_open: bool = False,
        read_timeout: Optional[float] = 60.0,
    ) -> CommandStream:
        """Starts a command and returns a `CommandStream`: iterate it for its output as it is
        printed (``for out in sb.commands.stream("make"): print(out.text, end="")``), then
        ``.exit``. ``stdin_open`` keeps stdin open for ``.write_stdin``. The server sends a
        keep-alive every 15 s, so ``read_timeout`` only expires on a dead link."""
        body = _command_body(cmd, timeout, env, cwd, stdin)
        body["stream"] = True
        if stdin_open:
            body["stdin_open"] = True
        return CommandStream(self._sb, body, read_timeout)

    def write_stdin(self, pid: int, data: Union[bytes, str], eof: bool = False) -> None:
        """Writes to the stdin of a running background or stream command (started with
        ``stdin_open``). NotFoundError once it has ended."""
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        self._sb._http.json("POST", self._sb._path(f"/commands/{int(pid)}/stdin"),
                            query={"eof": True} if eof else None, body=payload)

    def kill(self, pid: int, signal: Union[str, int] = "KILL") -> None:
        """Signals a running command (its process group) by pid. NotFoundError once it has
        ended."""
        self._sb._http.json("POST", self._sb._path(f"/commands/{int(pid)}/kill"),
                            json_body={"signal": signal})

    def list(self) -> List[Dict[str, Any]]:
        """The commands deskbox started that still run: ``{"pid", "command", "background",
        "stream", "elapsed_ms"}`` each."""
        return list(self._sb._http.json("GET", self._sb._path("/commands"))["processes"])


class Files:
    """``sandbox.files``: the sandbox's file system (absolute paths)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def read(self, path: str) -> bytes:
        """The file's bytes. Raises NotFoundError, or ConflictError for a directory."""
        r = self._sb._http.request("GET", self._sb._path("/files"), query={"path": path},
                                   timeout=300)
        if r.headers.get("content-type", "").startswith("application/json"):
            raise ConflictError(f"{path} is a directory", status=409, code="is_a_directory",
                                field="path")
        return r.body

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The file decoded as text."""
        return self.read(path).decode(encoding)

    def write(self, path: str, data: Union[bytes, str], mode: Optional[Union[int, str]] = None) -> int:
        """Writes (replaces atomically) a file, creating missing parent directories.

        Args:
            data: bytes, or text written as UTF-8.
            mode: permission bits, e.g. ``0o755`` or ``"0755"`` (default: kept, else 0644).
        Returns the file's size afterwards.
        """
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        query: Dict[str, Any] = {"path": path}
        if mode is not None:
            query["mode"] = format(mode, "04o") if isinstance(mode, int) else mode
        j = self._sb._http.json("PUT", self._sb._path("/files"), query=query, body=payload,
                                timeout=300)
        return int(j.get("size", len(payload)))

    def list(self, path: str) -> List[FileEntry]:
        """The entries of a directory, sorted by name. ConflictError if it is not one."""
        r = self._sb._http.request("GET", self._sb._path("/files/list"), query={"path": path},
                                   timeout=300)
        return [
            FileEntry(
                name=e["name"], type=e.get("type", ""), size=int(e.get("size", 0)),
                mode=int(e.get("mode", 0)), mtime=float(e.get("mtime", 0)), target=e.get("target"),
            )
            for e in r.json().get("entries", [])
        ]

    def exists(self, path: str) -> bool:
        """Whether the path exists (a file or a directory)."""
        parent, _, name = path.rstrip("/").rpartition("/")
        if not name:
            return True
        try:
            return any(e.name == name for e in self.list(parent or "/"))
        except (NotFoundError, ConflictError):
            return False

    def mkdir(self, path: str, parents: bool = False) -> None:
        """Makes a directory; ``parents`` also makes missing parents and accepts an existing
        directory (ConflictError without it)."""
        self._sb._http.json("POST", self._sb._path("/files/mkdir"),
                            query={"path": path, "parents": parents})

    def remove(self, path: str, recursive: bool = False) -> None:
        """Removes a file, or a directory (non-empty ones need ``recursive=True``)."""
        self._sb._http.json("DELETE", self._sb._path("/files"),
                            query={"path": path, "recursive": recursive})


class Clipboard:
    """``sandbox.clipboard``: the X CLIPBOARD selection (set also sets PRIMARY)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def get(self) -> str:
        """The clipboard's text ("" when empty)."""
        return str(self._sb._http.json("GET", self._sb._path("/clipboard")).get("text", ""))

    def set(self, text: str) -> None:
        """Puts text on the clipboard (and PRIMARY, so middle click pastes it too)."""
        self._sb._http.json("PUT", self._sb._path("/clipboard"), json_body={"text": text})


class Recording:
    """``sandbox.recording``: an MP4 of the screen (and optionally a track of the actions)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def start(self, actions: bool = False, fps: Optional[int] = None) -> Dict[str, Any]:
        """Starts recording; returns ``{"recording": id, "state", "actions", "fps"}``."""
        body: Dict[str, Any] = {"actions": actions}
        if fps is not None:
            body["fps"] = fps
        return dict(self._sb._http.json("POST", self._sb._path("/recording"), json_body=body))

    def stop(self) -> Dict[str, Any]:
        """Stops it; returns ``{"recording", "state": "finished", "bytes", "frames", ...}``."""
        return dict(self._sb._http.json("DELETE", self._sb._path("/recording")))

    def status(self) -> Dict[str, Any]:
        """The running (or last) recording's state."""
        return dict(self._sb._http.json("GET", self._sb._path("/recording")))

    def download(self, recording_id: str, events: bool = False) -> bytes:
        """A recording's MP4 bytes (or its events track, JSON lines, with ``events=True``)."""
        path = "/v1/recordings/" + urllib.parse.quote(recording_id, safe="")
        return self._sb._http.request("GET", path + ("/events" if events else ""),
                                      timeout=300).body


# ---------------------------------------------------------------------------------------------
# Sandbox
# ---------------------------------------------------------------------------------------------
class Sandbox:
    """A disposable Linux desktop on a deskboxd server.

    Create one with `Sandbox.create`, attach to an existing one with `Sandbox.connect`. Used as
    a context manager it is killed on exit. One persistent HTTP connection is kept per Sandbox
    object; a Sandbox may be shared between threads (calls are serialised on it).
    """

    def __init__(self, info: SandboxInfo, http: HttpClient) -> None:
        self._http = http
        self._info = info
        self.id: str = info.id
        self._prefix = "/v1/sandboxes/" + urllib.parse.quote(info.id, safe="")
        self.commands = Commands(self)
        self.files = Files(self)
        self.clipboard = Clipboard(self)
        self.recording = Recording(self)

    # -- lifecycle --------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        template: Optional[str] = None,
        runtime: Optional[str] = None,
        resolution: Optional[Tuple[int, int]] = None,
        timeout: Optional[int] = None,
        network: Union[bool, Mapping[str, Any], None] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        env: Optional[Mapping[str, str]] = None,
        server: Optional[str] = None,
        api_key: Optional[str] = None,
        snapshot: Optional[str] = None,
        auto_resume: Optional[bool] = None,
        **options: Any,
    ) -> "Sandbox":
        """Creates a sandbox and returns once its desktop is ready (by default: the template's
        autostart windows are mapped and drawn, so input lands in them).

        Args:
            template: e.g. ``"minimal"`` or ``"desktop"`` (server default: minimal).
            runtime: ``"container"`` or ``"microvm"`` (server default: container).
            resolution: ``(width, height)`` of the screen.
            timeout: seconds until it is killed (or paused), see `set_timeout`.
            network: True (the internet), False (loopback only) or
                ``{"allow": [...], "deny": [...]}``.
            metadata: free JSON object kept with the sandbox.
            env: environment variables for commands in it.
            server: deskboxd URL (default ``$DESKBOX_SERVER`` or http://127.0.0.1:8700).
            api_key: API key (default ``$DESKBOX_API_KEY``).
            snapshot: start from this snapshot (`Sandbox.snapshot`): its template, runtime,
                resolution, dpi and limits are the snapshot's (asking for others is a
                BadRequestError).
            auto_resume: a sandbox its timeout paused resumes on the next request that needs
                it (implies ``on_timeout="pause"``).
            **options: other create fields passed as they are: ``dpi``, ``api_resolution``,
                ``on_timeout`` ("kill"/"pause"), ``limits``, ``record``, ``vnc``, ``fast_start``,
                ``ready`` (False: return after the first frame; or a condition such as
                ``{"window_title": "Mousepad", "timeout_s": 30}`` instead of the template's),
                ``volumes`` (``[Volume.mount("work", "/data")]``: volumes to mount).
        """
        body: Dict[str, Any] = {}
        if template is not None:
            body["template"] = template
        if runtime is not None:
            body["runtime"] = runtime
        if resolution is not None:
            body["resolution"] = [int(resolution[0]), int(resolution[1])]
        if timeout is not None:
            body["timeout_s"] = int(timeout)
        if network is not None:
            body["network"] = network if isinstance(network, bool) else dict(network)
        if metadata is not None:
            body["metadata"] = dict(metadata)
        if env is not None:
            body["env"] = dict(env)
        if snapshot is not None:
            body["snapshot"] = snapshot
        if auto_resume is not None:
            body["auto_resume"] = bool(auto_resume)
        for key, value in options.items():
            if value is not None:
                body[key] = list(value) if isinstance(value, tuple) else value
        http = HttpClient(server, api_key)
        try:
            j = http.json("POST", "/v1/sandboxes", json_body=body, timeout=_CREATE_TIMEOUT)
        except BaseException:
            http.close()
            raise
        return cls(SandboxInfo.from_json(j), http)

    @classmethod
    def connect(cls, sandbox_id: str, server: Optional[str] = None,
                api_key: Optional[str] = None) -> "Sandbox":
        """Attaches to an existing sandbox (NotFoundError if there is none with that id)."""
        http = HttpClient(server, api_key)
        path = "/v1/sandboxes/" + urllib.parse.quote(sandbox_id, safe="")
        try:
            j = http.json("GET", path)
        except BaseException:
            http.close()
            raise
        return cls(SandboxInfo.from_json(j), http)

    @staticmethod
    def list(server: Optional[str] = None, api_key: Optional[str] = None) -> List[SandboxInfo]:
        """The server's sandboxes (without their tokens)."""
        http = HttpClient(server, api_key)
        try:
            j = http.json("GET", "/v1/sandboxes")
        finally:
            http.close()
        return [SandboxInfo.from_json(s) for s in j.get("sandboxes", [])]

    def info(self) -> SandboxInfo:
        """Inspects the sandbox (state, expiry, tokens, network, ports...)."""
        self._info = SandboxInfo.from_json(self._http.json("GET", self._prefix))
        return self._info

    def metrics(self, from_: Union[str, int, None] = None, to: Union[str, int, None] = None,
                step: Optional[int] = None) -> Dict[str, Any]:
        """Its samples (CPU %, memory, disk, network; see `deskbox.metrics`)."""
        query = {"from": None if from_ is None else str(from_),
                 "to": None if to is None else str(to), "step": step}
        return self._http.json("GET", self._prefix + "/metrics", query=query)

    def kill(self) -> Optional[SandboxInfo]:
        """Kills the sandbox and returns it as it ended (state ``"killed"``), as pause and resume
        return it; None if it was already gone."""
        try:
            return SandboxInfo.from_json(self._http.json("DELETE", self._prefix))
        except NotFoundError:
            return None
        finally:
            self._http.close()

    def pause(self, snapshot: bool = False) -> SandboxInfo:
        """Pauses it (frozen in memory; ``snapshot=True`` saves a microVM to disk)."""
        body = {"snapshot": True} if snapshot else None
        return SandboxInfo.from_json(self._http.json("POST", self._path("/pause"), json_body=body))

    def resume(self) -> SandboxInfo:
        """Resumes a paused sandbox."""
        return SandboxInfo.from_json(self._http.json("POST", self._path("/resume")))

    def set_network(self, *, allow: Any = _KEEP, deny: Any = _KEEP, rules: Any = _KEEP,
                    egress_kbps: Optional[int] = None) -> Dict[str, Any]:
        """Changes the network policy while the sandbox runs (``PATCH .../network``). Each part
        given replaces that part of the policy in force; ``None`` removes it (``allow=None``: the
        internet minus ``deny``); parts not given stay. Open connections the new policy forbids
        are cut at once. ``egress_kbps`` 0 lifts the limit. Returns the network as inspect
        shows it (``policy``, ``egress``, ``egress_kbps``)."""
        body: Dict[str, Any] = {}
        for name, value in (("allow", allow), ("deny", deny), ("rules", rules)):
            if value is not _KEEP:
                body[name] = value
        if egress_kbps is not None:
            body["egress_kbps"] = int(egress_kbps)
        return self._http.json("PATCH", self._path("/network"), json_body=body)

    def set_timeout(self, seconds: int) -> SandboxInfo:
        """Sets the sandbox to expire ``seconds`` from now."""
        return SandboxInfo.from_json(
            self._http.json("POST", self._path("/timeout"), json_body={"timeout_s": int(seconds)})
        )

    def snapshot(self, name: str, metadata: Optional[Mapping[str, str]] = None) -> SnapshotInfo:
        """Saves the sandbox as the snapshot ``name`` (``[a-z0-9][a-z0-9_.-]{0,62}``), to start
        sandboxes from with ``Sandbox.create(snapshot=name)``; the sandbox goes on.
        ConflictError if the name is taken; DeskboxError (507) if the host's disk cannot hold
        it."""
        body: Dict[str, Any] = {"name": name}
        if metadata is not None:
            body["metadata"] = dict(metadata)
        return SnapshotInfo.from_json(self._http.json("POST", self._path("/snapshots"),
                                                      json_body=body, timeout=_CREATE_TIMEOUT))

    def fork(self, count: int = 1, metadata: Optional[Mapping[str, Any]] = None,
             timeout_s: Optional[int] = None) -> List["Sandbox"]:
        """Starts ``count`` (1..16) copies of this sandbox as it is now and returns them (each
        with its own connection; kill them as any sandbox). A microVM's copies go on where it
        is; a container's have its files, with processes started fresh. ConflictError when
        the server has no room for ``count`` more sandboxes."""
        body: Dict[str, Any] = {"count": int(count)}
        if metadata is not None:
            body["metadata"] = dict(metadata)
        if timeout_s is not None:
            body["timeout_s"] = int(timeout_s)
        j = self._http.json("POST", self._path("/fork"), json_body=body, timeout=_CREATE_TIMEOUT)
        forks: List[Sandbox] = []
        for raw in j.get("sandboxes", []):
            forks.append(Sandbox(SandboxInfo.from_json(raw),
                                 HttpClient(self._http.server, self._http.api_key)))
        return forks

    def close(self) -> None:
        """Closes this object's HTTP connection (the sandbox keeps running)."""
        self._http.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.kill()

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, server={self._http.server!r})"

    # -- screen -----------------------------------------------------------------------------
    def screenshot(
        self,
        format: str = "png",
        scale: Optional[float] = None,
        width: Optional[int] = None,
        height: Optional[int] = None,
        quality: Optional[int] = None,
        cursor: Optional[bool] = None,
    ) -> bytes:
        """The screen as image bytes (taken after every earlier action has landed).

        Args:
            format: ``"png"``, ``"jpeg"`` or ``"webp"``.
            scale: shrink both sides by this factor (e.g. 0.5), or give width/height.
            quality: JPEG/WebP quality 1..100.
            cursor: draw the mouse pointer into the image.
        """
        if scale is not None:
            w, h = self.screen_size()
            width, height = max(1, round(w * scale)), max(1, round(h * scale))
        query = {"format": format, "width": width, "height": height, "quality": quality,
                 "cursor": cursor}
        return self._http.request("GET", self._path("/screenshot"), query=query).body

    def screen_size(self) -> Tuple[int, int]:
        """``(width, height)`` of the screen in pixels."""
        return self._info.resolution

    def cursor(self) -> Point:
        """The mouse pointer's position ``(x, y)``, in API pixels like every coordinate."""
        j = self._http.json("GET", self._path("/cursor"))
        return int(j["x"]), int(j["y"])

    def windows(self) -> List[Window]:
        """The desktop's top-level application windows (boxes in API pixels)."""
        j = self._http.json("GET", self._path("/windows"))
        return [Window.from_json(w) for w in j.get("windows", [])]

    # -- accessibility --------------------------------------------------------------------
    def accessibility_tree(self, scope: str = "focused", app: Optional[str] = None,
                           max_depth: Optional[int] = None, max_nodes: Optional[int] = None,
                           visible_only: Optional[bool] = None) -> Dict[str, Any]:
        """The desktop's AT-SPI tree: ``{"windows": [node], "node_count", "truncated"}``.

        Each node has ``ref`` (for `act_on_element`), ``role``, ``name``, ``states``,
        ``bounds`` (``{x, y, width, height}`` in the same pixels as screenshots and actions),
        ``actions``, ``text``/``value`` where it has them, and ``children``. ``scope`` is
        ``"focused"`` (the active window) or ``"all"``; ``app`` keeps one application's."""
        query = {"scope": scope, "app": app, "max_depth": max_depth, "max_nodes": max_nodes,
                 "visible_only": visible_only}
        return self._http.json("GET", self._path("/accessibility"), query=query)

    def find_elements(self, role: Optional[str] = None, name: Optional[str] = None, *,
                      name_match: str = "exact", states: Optional[Iterable[str]] = None,
                      app: Optional[str] = None, scope: str = "all",
                      max_results: Optional[int] = None) -> List[Dict[str, Any]]:
        """Accessible elements by role (``"push button"``), name (``name_match``: ``"exact"``,
        ``"substring"`` or ``"regex"``) and states (``["focused"]``), in tree order: nodes as
        in `accessibility_tree`, without children. An empty list when none matches."""
        body: Dict[str, Any] = {"name_match": name_match, "scope": scope}
        for key, value in (("role", role), ("name", name), ("app", app),
                           ("max_results", max_results)):
            if value is not None:
                body[key] = value
        if states is not None:
            body["states"] = list(states)
        j = self._http.json("POST", self._path("/accessibility/find"), json_body=body)
        return list(j.get("matches", []))

    def act_on_element(self, ref: str, action: str = "press",
                       value: Optional[Union[str, float]] = None) -> Dict[str, Any]:
        """Invokes ``action`` on the element ``ref`` names: ``"press"``/``"click"``,
        ``"focus"``, ``"set_value"`` (``value``: a text field's text or a number) or
        ``"select"``. Returns ``{"ref", "action", "node"}`` (the element afterwards)."""
        body: Dict[str, Any] = {"ref": ref, "action": action}
        if value is not None:
            body["value"] = value
        return self._http.json("POST", self._path("/accessibility/act"), json_body=body)

    def kill_processes(self) -> Dict[str, int]:
        """Ends every process but the desktop session (agent, X server, window manager): the
        way back from a `SandboxExhaustedError` (409 ``sandbox_exhausted``) without a re-create.
        Returns ``{"killed", "refused", "rounds"}``."""
        return self._http.json("POST", self._path("/processes/kill"), json_body={})

    def stream_url(self, view_only: bool = True) -> str:
        """The web viewer's URL: watch only, or (``view_only=False``) take control too."""
        token = self._info.view_token if view_only else self._info.control_token
        if token is None:
            token = (self.info().view_token if view_only else self._info.control_token)
        return self._http.url("/view/" + urllib.parse.quote(self.id, safe=""), {"token": token})

    def live(self, codec: str = "jpeg", fps: Optional[int] = None, width: Optional[int] = None,
             height: Optional[int] = None, quality: Optional[int] = None,
             read_timeout: Optional[float] = 60.0) -> LiveStream:
        """The screen stream (WebSocket): iterate for frames and the server's events, e.g. to
        record an agent's run. Frames come when the screen changes."""
        return LiveStream(self, codec=codec, fps=fps, width=width, height=height,
                          quality=quality, read_timeout=read_timeout)

    def wait_for_window(self, title: Any, timeout: float = 30.0) -> "Window":
        """The first window whose title contains ``title`` (or for which it, a function, is
        true), looking again each time the screen changes. deskbox.TimeoutError after
        ``timeout`` seconds."""
        return wait_for_window(self, title, timeout)

    # -- input ------------------------------------------------------------------------------
    def act(self, actions: Union[Action, Iterable[Action]],
            dialect: str = "native") -> List[Dict[str, Any]]:
        """Runs one action or a batch, in order, and returns the per-action results.

        Args:
            actions: one action object or a list of them, in the dialect's own shape:
                native ``{"type": "click", "x": 10, "y": 20}``, anthropic (a computer tool_use
                ``input``: ``{"action": "left_click", "coordinate": [10, 20]}``) or openai (a
                computer_call ``action``: ``{"type": "click", "button": "left", ...}``).
            dialect: ``"native"``, ``"anthropic"`` or ``"openai"``.
        Returns one result per action: ``{}`` for most, ``{"x","y"}`` for a cursor position,
        ``{"type": "screenshot", "base64_image", "width", "height", "format"}`` for a screenshot.
        Raises InvalidActionError (``field`` names the bad field) before anything runs.

        An action's ``target`` may be a `Target` (it is turned into the API's object); an
        action that aims at one carries the match in its result (``{"target": {...}}``) and a
        target that does not appear raises `TargetNotFoundError` (the actions before it ran).
        """
        if isinstance(actions, Mapping):
            body: Any = _with_target(actions)
        else:
            body = {"actions": [_with_target(a) for a in actions]}
        query = None if dialect == "native" else {"dialect": dialect}
        j = self._http.json("POST", self._path("/actions"), query=query, json_body=body)
        return list(j.get("results", []))

    def run_tool_uses(self, blocks: Iterable[Any],
                      screenshot: bool = False) -> List[Dict[str, Any]]:
        """Runs one Claude turn's computer ``tool_use`` blocks and returns their ``tool_result``s.

        Args:
            blocks: the assistant message's ``content`` (or just its tool_use blocks), as dicts
                or the Anthropic SDK's objects (``model_dump()`` is used). Of them, the computer
                toolset's (``toolset_name == "computer"``, computer_toolset_20260801) or the
                computer tool's (``input`` with ``action``) tool_use blocks run, in order; text,
                thinking and other tools' blocks are left for you.
            screenshot: also end the last tool_result with the screen after them.
        Returns one ``tool_result`` per block run, in order, by ``tool_use_id``: send them back
        as the next user message's content. Raises InvalidActionError (``field`` names the
        block, ``"[2].input.coordinate"``) before anything runs.
        """
        turn = []
        for block in blocks:
            b = block.model_dump() if hasattr(block, "model_dump") else dict(block)
            ours = b.get("toolset_name") == "computer" or (
                b.get("toolset_name") is None and isinstance(b.get("input"), Mapping)
                and "action" in b["input"])
            if b.get("type") == "tool_use" and ours:
                turn.append(b)
        if not turn:
            return []
        query = {"dialect": "anthropic"}
        if screenshot:
            query["screenshot"] = "true"
        j = self._http.json("POST", self._path("/actions"), query=query, json_body=turn)
        return list(j.get("tool_results", []))

    def _aimed(self, a: Action, x: Optional[int], y: Optional[int],
               target: Optional[Target]) -> Optional[Match]:
        if target is not None:
            a["target"] = target.to_json()
        elif x is not None or y is not None:
            a["x"], a["y"] = x, y
        results = self.act(a)
        hit = results[0].get("target") if results else None
        return Match.from_json(hit) if isinstance(hit, dict) else None

    def _click(self, button: str, count: int, x: Optional[int], y: Optional[int],
               target: Optional[Target] = None) -> Optional[Match]:
        a: Action = {"type": "click", "button": button}
        if count != 1:
            a["count"] = count
        return self._aimed(a, x, y, target)

    def left_click(self, x: Optional[int] = None, y: Optional[int] = None, *,
                   target: Optional[Target] = None) -> Optional[Match]:
        """Left click at (x, y), at a `Target` on the screen, or where the pointer is.

        With ``target`` it returns the `Match` clicked (raises `TargetNotFoundError` when it
        does not appear in time); else None. The same holds for every click, move, scroll and
        mouse press/release helper.
        """
        return self._click("left", 1, x, y, target)

    def right_click(self, x: Optional[int] = None, y: Optional[int] = None, *,
                    target: Optional[Target] = None) -> Optional[Match]:
        """Right click at (x, y), at ``target``, or where the pointer is."""
        return self._click("right", 1, x, y, target)

    def middle_click(self, x: Optional[int] = None, y: Optional[int] = None, *,
                     target: Optional[Target] = None) -> Optional[Match]:
        """Middle click at (x, y), at ``target``, or where the pointer is."""
        return self._click("middle", 1, x, y, target)

    def double_click(self, x: Optional[int] = None, y: Optional[int] = None, *,
                     target: Optional[Target] = None) -> Optional[Match]:
        """Left double click at (x, y), at ``target``, or where the pointer is."""
        return self._click("left", 2, x, y, target)

    def triple_click(self, x: Optional[int] = None, y: Optional[int] = None, *,
                     target: Optional[Target] = None) -> Optional[Match]:
        """Left triple click at (x, y), at ``target``, or where the pointer is."""
        return self._click("left", 3, x, y, target)

    def click_text(self, text: str, *, button: str = "left", count: int = 1,
                   index: Optional[int] = None, offset: Optional[Tuple[int, int]] = None,
                   region: Optional[RegionLike] = None, exact: Optional[bool] = None,
                   lang: Optional[str] = None, timeout_ms: Optional[int] = None) -> Match:
        """Clicks on a text on the screen (waiting up to ``timeout_ms``, default 5000, for it
        to appear) and returns where. ``count=2`` double-clicks. Raises `TargetNotFoundError`.
        """
        t = Target(text=text, index=index, offset=offset, region=region, exact=exact,
                   lang=lang, timeout_ms=timeout_ms)
        return _found(self._click(button, count, None, None, t))

    def click_image(self, image: ImageInput, *, button: str = "left", count: int = 1,
                    index: Optional[int] = None, offset: Optional[Tuple[int, int]] = None,
                    region: Optional[RegionLike] = None, threshold: Optional[float] = None,
                    grayscale: Optional[bool] = None, scales: Optional[Sequence[float]] = None,
                    timeout_ms: Optional[int] = None) -> Match:
        """Clicks on an image (PNG bytes or path) found on the screen, as `click_text` does."""
        t = Target(image=image, index=index, offset=offset, region=region,
                   threshold=threshold, grayscale=grayscale, scales=scales,
                   timeout_ms=timeout_ms)
        return _found(self._click(button, count, None, None, t))

    def move_mouse(self, x: Optional[int] = None, y: Optional[int] = None, *,
                   target: Optional[Target] = None) -> Optional[Match]:
        """Moves the pointer to (x, y), or to ``target`` (then returns its `Match`)."""
        return self._aimed({"type": "move"}, x, y, target)

    def mouse_press(self, button: str = "left", *,
                    target: Optional[Target] = None) -> Optional[Match]:
        """Presses a mouse button where the pointer is, or at ``target`` (and keeps it down)."""
        return self._aimed({"type": "mouse_down", "button": button}, None, None, target)

    def mouse_release(self, button: str = "left", *,
                      target: Optional[Target] = None) -> Optional[Match]:
        """Releases a mouse button where the pointer is, or at ``target``."""
        return self._aimed({"type": "mouse_up", "button": button}, None, None, target)

    def drag(self, path: Sequence[Point], button: str = "left") -> None:
        """Presses at the first point, moves through the others, releases at the last."""
        self.act({"type": "drag", "button": button, "path": [[int(x), int(y)] for x, y in path]})

    def scroll(self, dx: int = 0, dy: int = 1, x: Optional[int] = None,
               y: Optional[int] = None, *, target: Optional[Target] = None) -> Optional[Match]:
        """Scrolls by wheel notches (+dy is down, +dx is right), at (x, y) or ``target`` if
        given."""
        return self._aimed({"type": "scroll", "dx": dx, "dy": dy}, x, y, target)

    def write(self, text: str) -> None:
        """Types text exactly (any Unicode; ``\\n`` is Return, ``\\t`` is Tab)."""
        self.act({"type": "type", "text": text})

    def press(self, keys: Union[str, Sequence[str]]) -> None:
        """Presses a key chord: ``"ctrl+c"``, ``"Return"``, ``["ctrl", "shift", "t"]``.

        A string may hold a sequence separated by spaces (``"ctrl+a Delete"``).
        """
        self.act({"type": "key", "keys": keys if isinstance(keys, str) else "+".join(keys)})

    def wait(self, ms: int) -> None:
        """Waits in the sandbox's input queue (between actions of the same sandbox)."""
        self.act({"type": "wait", "duration_ms": int(ms)})

    # -- seeing the screen -----------------------------------------------------------------
    def locate(
        self,
        image: Optional[ImageInput] = None,
        text: Optional[str] = None,
        *,
        region: Optional[RegionLike] = None,
        threshold: Optional[float] = None,
        max_results: Optional[int] = None,
        scales: Optional[Sequence[float]] = None,
        grayscale: Optional[bool] = None,
        exact: Optional[bool] = None,
        lang: Optional[str] = None,
    ) -> Matches:
        """Finds an image (a PNG: bytes or a path) or a text on the screen, now.

        Args:
            image: the template; pixels with alpha < 128 are left out of the match.
            text: found by OCR: a case-insensitive substring of a line, or with ``exact``
                whole words, case-sensitive.
            region: ``(x, y, width, height)`` (or a `Window`, a `Match`...) to look in.
            threshold: 0..1 the score an image match needs (default 0.9).
            max_results: 1..100 (default 10).
            scales: sizes the template is tried at (0.25..4, at most 8; default ``[1.0]``).
            grayscale: compare luminance only.
            lang: the OCR language(s), e.g. ``"eng"`` or ``"eng+deu"``.
        Returns the `Match` list (best score first for an image, reading order for a text),
        empty when nothing matched; ``.frame_version`` is the frame it looked at.
        """
        body = search_body(image=image, text=text, region=region, threshold=threshold,
                           scales=scales, grayscale=grayscale, exact=exact, lang=lang)
        if max_results is not None:
            body["max_results"] = int(max_results)
        j = self._http.json("POST", self._path("/locate"), json_body=body)
        return Matches([Match.from_json(m) for m in j.get("matches", [])],
                       frame_version=int(j.get("frame_version", 0)),
                       elapsed_ms=j.get("elapsed_ms", 0))

    def ocr(self, region: Optional[RegionLike] = None, lang: Optional[str] = None,
            min_confidence: Optional[float] = None) -> OcrResult:
        """Reads the text on the screen (or in ``region``): ``text``, ``lines`` and ``words``
        with their boxes and confidences (0..100; words below ``min_confidence`` are dropped).
        """
        body: Dict[str, Any] = {}
        if region is not None:
            body["region"] = region_json(region)
        if lang is not None:
            body["lang"] = lang
        if min_confidence is not None:
            body["min_confidence"] = min_confidence
        return OcrResult.from_json(self._http.json("POST", self._path("/ocr"), json_body=body))

    def compare(
        self,
        baseline: ImageInput,
        *,
        region: Optional[RegionLike] = None,
        mask: Optional[Iterable[RegionLike]] = None,
        tolerance: Optional[int] = None,
        diff: bool = False,
    ) -> CompareResult:
        """Compares the screen (or ``region`` of it) with a baseline PNG of the same size.

        Args:
            mask: areas (screen coordinates) left out.
            tolerance: 0..255: a pixel has changed when a channel differs by more (default 0).
            diff: also return ``diff_image`` (PNG bytes).
        Returns ``identical``, ``ssim``, ``psnr``, ``changed_pixels``/``changed_ratio`` and
        ``changed``, the boxes of the changed areas in screen coordinates.
        """
        body: Dict[str, Any] = {"baseline": encode_image(baseline)}
        if region is not None:
            body["region"] = region_json(region)
        if mask is not None:
            body["mask"] = [region_json(m) for m in mask]
        if tolerance is not None:
            body["tolerance"] = int(tolerance)
        if diff:
            body["diff"] = True
        return CompareResult.from_json(
            self._http.json("POST", self._path("/compare"), json_body=body))

    def wait_for(
        self,
        until: str,
        *,
        region: Optional[RegionLike] = None,
        timeout_ms: Optional[int] = None,
        stable_ms: Optional[int] = None,
        since: Optional[int] = None,
        image: Optional[ImageInput] = None,
        text: Optional[str] = None,
        threshold: Optional[float] = None,
        scales: Optional[Sequence[float]] = None,
        grayscale: Optional[bool] = None,
        exact: Optional[bool] = None,
        lang: Optional[str] = None,
        check: bool = False,
    ) -> WaitResult:
        """Waits on the server until the screen (or ``region``) shows something.

        Args:
            until: ``"change"`` (after frame ``since``, default the frame when the wait starts),
                ``"stable"`` (nothing changed for ``stable_ms``, default 300), ``"image"`` /
                ``"text"`` (it appears) or ``"gone"`` (the ``image`` or ``text`` is not there).
            timeout_ms: 0..120000 (default 10000).
            image, text, threshold, scales, grayscale, exact, lang: as for `locate`.
            check: raise `WaitTimeoutError` instead of returning an unmatched result.
        Returns a `WaitResult`: ``matched`` is False when it timed out (it is truthy exactly
        when it matched); ``match`` for image/text, ``changed`` boxes for change.

        Not to be confused with `wait`, a pause in the input queue.
        """
        body = search_body(image=image, text=text, region=region, threshold=threshold,
                           scales=scales, grayscale=grayscale, exact=exact, lang=lang)
        body["until"] = until
        if timeout_ms is not None:
            body["timeout_ms"] = int(timeout_ms)
        if stable_ms is not None:
            body["stable_ms"] = int(stable_ms)
        if since is not None:
            body["since"] = int(since)
        wait_s = (10.0 if timeout_ms is None else timeout_ms / 1000.0) + 30.0
        result = WaitResult.from_json(
            self._http.json("POST", self._path("/wait"), json_body=body, timeout=wait_s))
        if check and not result.matched:
            what = until
            if text is not None:
                what += f" {text!r}"
            elif image is not None:
                what += " (image)"
            raise WaitTimeoutError(result, what)
        return result

    def wait_for_text(self, text: str, *, timeout_ms: Optional[int] = None,
                      region: Optional[RegionLike] = None, exact: Optional[bool] = None,
                      lang: Optional[str] = None, check: bool = False) -> WaitResult:
        """Waits until ``text`` is on the screen (``match`` says where)."""
        return self.wait_for("text", text=text, timeout_ms=timeout_ms, region=region,
                             exact=exact, lang=lang, check=check)

    def wait_for_image(self, image: ImageInput, *, timeout_ms: Optional[int] = None,
                       region: Optional[RegionLike] = None, threshold: Optional[float] = None,
                       scales: Optional[Sequence[float]] = None,
                       grayscale: Optional[bool] = None, check: bool = False) -> WaitResult:
        """Waits until the image (PNG bytes or path) is on the screen (``match`` says where)."""
        return self.wait_for("image", image=image, timeout_ms=timeout_ms, region=region,
                             threshold=threshold, scales=scales, grayscale=grayscale,
                             check=check)

    def wait_for_change(self, *, since: Optional[int] = None, region: Optional[RegionLike] = None,
                        timeout_ms: Optional[int] = None, check: bool = False) -> WaitResult:
        """Waits until the screen (or ``region``) changes after frame ``since`` (a
        ``frame_version`` from an earlier answer; default: the frame when the wait starts, so
        pass one taken before the action whose effect you wait for)."""
        return self.wait_for("change", since=since, region=region, timeout_ms=timeout_ms,
                             check=check)

    def wait_until_stable(self, stable_ms: Optional[int] = None, *,
                          region: Optional[RegionLike] = None, timeout_ms: Optional[int] = None,
                          check: bool = False) -> WaitResult:
        """Waits until nothing on the screen (or ``region``) changed for ``stable_ms``
        (default 300)."""
        return self.wait_for("stable", stable_ms=stable_ms, region=region,
                             timeout_ms=timeout_ms, check=check)

    def wait_until_gone(self, text: Optional[str] = None, image: Optional[ImageInput] = None, *,
                        timeout_ms: Optional[int] = None, region: Optional[RegionLike] = None,
                        threshold: Optional[float] = None,
                        scales: Optional[Sequence[float]] = None,
                        grayscale: Optional[bool] = None, exact: Optional[bool] = None,
                        lang: Optional[str] = None, check: bool = False) -> WaitResult:
        """Waits until a text (or, with ``image=``, an image) is no longer on the screen."""
        return self.wait_for("gone", text=text, image=image, timeout_ms=timeout_ms,
                             region=region, threshold=threshold, scales=scales,
                             grayscale=grayscale, exact=exact, lang=lang, check=check)

    # -- helpers ----------------------------------------------------------------------------
    def _path(self, suffix: str) -> str:
        return self._prefix + suffix


def _with_target(action: Mapping[str, Any]) -> Any:
    target = action.get("target") if isinstance(action, Mapping) else None
    if isinstance(target, Target):
        return {**action, "target": target.to_json()}
    return action


def _found(match: Optional[Match]) -> Match:
    if match is None:  # a server that ran the action but did not say where
        raise DeskboxError("the action's result carries no target match", code="bad_response")
    return match
