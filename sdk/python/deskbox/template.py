"""Templates of your own: built on the server from a Dockerfile (and a build context), or
imported from an OCI or Docker image archive; then ``Sandbox.create(template="name:tag")``.

    from deskbox import Sandbox, Template

    build = Template.build("my-app", dockerfile="FROM deskbox/minimal\\nRUN echo hi > /etc/hi\\n",
                           on_log=print)
    with Sandbox.create(template=build.template) as sb:
        ...
"""

from __future__ import annotations

import io
import os
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _context
from ._http import HttpClient
from .errors import ConnectionFailedError, DeskboxError, PayloadTooLargeError, SandboxError

PART_SIZE = 32 << 20  # an upload's parts; the server's --max-body-mb bounds one (64 MiB default)
_LOG_WAIT_S = 10  # how long one log request waits on the server for more
_FOLLOW_RETRIES = 20  # reconnections while following a log (about a minute and a half)

Command = Union[str, Sequence[str]]
LogCallback = Callable[[str], Any]
PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class TemplateInfo:
    """A template the server offers: ``kind`` "shipped" (deskbox's own) or "user" (built or
    imported here; then ``bytes``, ``created_at``, ``build_id``...). ``raw`` is the JSON."""

    template: str
    name: str
    tag: Optional[str]
    kind: str
    runtimes: List[str]
    bytes: Optional[int] = None
    created_at: Optional[str] = None
    build_id: Optional[str] = None
    image_id: Optional[str] = None
    in_use: bool = False
    # A base pulled from a registry, pinned: registry/repository@sha256:...
    base_digest: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "TemplateInfo":
        return cls(template=j.get("template", ""), name=j.get("name", ""), tag=j.get("tag"),
                   kind=j.get("kind", ""), runtimes=list(j.get("runtimes") or []),
                   bytes=j.get("bytes"), created_at=j.get("created_at"),
                   build_id=j.get("build_id"), image_id=j.get("image_id"),
                   in_use=bool(j.get("in_use", False)),
                   base_digest=j.get("base_digest") or None, raw=j)


@dataclass
class TemplateBuild:
    """A build (or import) and where it is: ``status`` queued | running | succeeded | failed |
    cancelled; ``step``/``steps`` and ``instruction`` as the engine reports them; ``error`` (a
    dict: code, message, step, instruction, exit_code, log_tail) when it did not succeed.
    ``template`` ("name:tag") is what ``Sandbox.create(template=...)`` takes."""

    build_id: str
    kind: str
    template: str
    name: str
    tag: str
    status: str
    step: int = 0
    steps: int = 0
    instruction: Optional[str] = None
    cached_steps: int = 0
    created_at: Optional[str] = None
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    seconds: Optional[float] = None
    image_id: Optional[str] = None
    log_bytes: int = 0
    error: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "TemplateBuild":
        return cls(build_id=j.get("build_id", ""), kind=j.get("kind", ""),
                   template=j.get("template", ""), name=j.get("name", ""),
                   tag=j.get("tag", ""), status=j.get("status", ""), step=int(j.get("step", 0)),
                   steps=int(j.get("steps", 0)), instruction=j.get("instruction"),
                   cached_steps=int(j.get("cached_steps", 0)), created_at=j.get("created_at"),
                   started_at=j.get("started_at"), finished_at=j.get("finished_at"),
                   seconds=j.get("seconds"), image_id=j.get("image_id"),
                   log_bytes=int(j.get("log_bytes", 0)), error=j.get("error"), raw=j)

    @property
    def finished(self) -> bool:
        return self.status in ("succeeded", "failed", "cancelled")

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"


class TemplateBuildError(DeskboxError):
    """A build or import that failed or was cancelled. ``build`` is the finished
    `TemplateBuild`; ``step``, ``instruction`` and ``exit_code`` say where it failed (``step``
    0 and ``exit_code`` None when it was not a Dockerfile step), ``log_tail`` is the log's end;
    ``code`` is the server's (step_failed, contract, timeout, cancelled, engine, ...)."""

    def __init__(self, build: TemplateBuild) -> None:
        error = build.error or {}
        self.build = build
        self.step = int(error.get("step", 0))
        self.instruction: Optional[str] = error.get("instruction")
        self.exit_code: Optional[int] = error.get("exit_code")
        self.log_tail: str = error.get("log_tail", "")
        text = f"template {build.template} {build.status}: {error.get('message', 'no reason given')}"
        if self.step:
            text += f"\n  failing step: {self.step}/{build.steps} {self.instruction or ''}".rstrip()
        if self.exit_code is not None:
            text += f"\n  exit code: {self.exit_code}"
        if self.log_tail:
            tail = "\n".join(self.log_tail.rstrip("\n").split("\n")[-15:])
            text += "\n  the log's end:\n    " + tail.replace("\n", "\n    ")
        super().__init__(text, code=str(error.get("code") or build.status))

    def _describe(self) -> str:  # the message says it all; no HTTP status to add
        return self.message


def _ref_body(name: str, tag: Optional[str]) -> Dict[str, Any]:
    if ":" in name:
        name, _, named_tag = name.partition(":")
        if tag is not None and tag != named_tag:
            raise ValueError(f"the tag is given twice: {named_tag!r} and tag={tag!r}")
        tag = named_tag
    body: Dict[str, Any] = {"name": name}
    if tag is not None:
        body["tag"] = tag
    return body


def _command(value: Command) -> Any:
    return value if isinstance(value, str) else list(value)


def _put_start_and_ready(body: Dict[str, Any], start_cmd: Optional[Command],
                         ready_cmd: Optional[Command], ready: Optional[Mapping[str, Any]],
                         timeout: Optional[int]) -> None:
    if start_cmd is not None:
        body["start_cmd"] = _command(start_cmd)
    if ready_cmd is not None:
        body["ready_cmd"] = _command(ready_cmd)
    if ready is not None:
        body["ready"] = dict(ready)
    if timeout is not None:
        body["timeout_s"] = int(timeout)


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _upload(http: HttpClient, source: IO[bytes], part_size: int) -> str:
    """Sends everything ``source`` holds as one upload, in parts; returns its id."""
    upload_id: Optional[str] = None
    sent = 0
    while True:
        part = source.read(part_size)
        if upload_id is not None and not part:
            return upload_id
        for attempt in range(6):
            try:
                if upload_id is None:
                    j = http.json("POST", "/v1/templates/uploads", body=part, timeout=600)
                else:
                    j = http.json("PUT", "/v1/templates/uploads/" + _quote(upload_id),
                                  query={"offset": sent}, body=part, timeout=600)
                break
            except SandboxError as e:  # 503: too many bodies in flight; come back shortly
                if e.status != 503 or attempt == 5:
                    raise
                time.sleep(2 ** attempt)
            except PayloadTooLargeError as e:
                if e.code == "payload_too_large":
                    raise PayloadTooLargeError(
                        e.message + ": send smaller parts (part_size=); the server's "
                        "--max-body-mb bounds one", status=e.status, code=e.code,
                        field=e.field, body=e.body) from None
                raise
        upload_id = str(j["upload_id"])
        sent += len(part)
        if int(j.get("bytes", -1)) != sent:
            raise DeskboxError(f"the server holds {j.get('bytes')} bytes of upload {upload_id}, "
                               f"not the {sent} sent", code="bad_response")
        if len(part) < part_size:
            return upload_id


def _follow(http: HttpClient, build_id: str, on_log: Optional[LogCallback]) -> TemplateBuild:
    """Reads the build's log from the start until the build has finished (calling ``on_log``
    with each piece as it arrives); a dropped connection resumes from the last byte read."""
    path = "/v1/templates/builds/" + _quote(build_id)
    offset, failures = 0, 0
    while True:
        try:
            j = http.json("GET", path + "/log", query={"offset": offset, "wait_s": _LOG_WAIT_S},
                          timeout=_LOG_WAIT_S + 60)
            failures = 0
        except ConnectionFailedError:
            failures += 1
            if failures > _FOLLOW_RETRIES:
                raise
            time.sleep(min(failures, 5))
            continue
        text = j.get("text", "")
        if text and on_log is not None:
            on_log(text)
        offset = int(j.get("next_offset", offset))
        if j.get("complete"):
            break
    for attempt in range(5):
        try:
            return TemplateBuild.from_json(http.json("GET", path))
        except ConnectionFailedError:
            if attempt == 4:
                raise
            time.sleep(attempt + 1)
    raise AssertionError("unreachable")


def _finish(http: HttpClient, started: Dict[str, Any], wait: bool,
            on_log: Optional[LogCallback]) -> TemplateBuild:
    build = TemplateBuild.from_json(started)
    if not wait:
        return build
    build = _follow(http, build.build_id, on_log)
    if not build.succeeded:
        raise TemplateBuildError(build)
    return build


class Template:
    """The server's templates: `build`, `import_archive`, `list`, `get`, `delete`, and the
    builds (`builds`, `get_build`, `wait`, `logs`, `cancel`). Every call takes ``server=`` and
    ``api_key=`` (default ``$DESKBOX_SERVER``, ``$DESKBOX_API_KEY``)."""

    @staticmethod
    def build(
        name: str,
        dockerfile: Optional[Union[str, "os.PathLike[str]"]] = None,
        context: Optional[PathLike] = None,
        tag: Optional[str] = "latest",
        *,
        dockerfile_path: Optional[str] = None,
        build_args: Optional[Mapping[str, str]] = None,
        start_cmd: Optional[Command] = None,
        ready_cmd: Optional[Command] = None,
        ready: Optional[Mapping[str, Any]] = None,
        no_cache: bool = False,
        network: Union[bool, Mapping[str, Any], None] = None,
        limits: Optional[Mapping[str, Any]] = None,
        on_log: Optional[LogCallback] = None,
        timeout: Optional[int] = None,
        wait: bool = True,
        part_size: int = PART_SIZE,
        server: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> TemplateBuild:
        """Builds a template from a Dockerfile and returns the finished build.

        Args:
            name: the template's name (lowercase letters, digits, '-'); ``"name:tag"`` also works.
            dockerfile: the Dockerfile's text (a ``str``), or a path to one (``pathlib.Path`` or
                any ``os.PathLike``): inside ``context`` it is used from there, elsewhere its
                text is sent. Default: ``Dockerfile`` in ``context``.
            context: a directory sent as the build context (what COPY reads), leaving out what
                its ``.dockerignore`` excludes; symlinks are sent as links. None: no context.
            tag: the tag (default "latest").
            dockerfile_path: the Dockerfile's path inside ``context`` (instead of ``dockerfile``).
            build_args: ARG values. no_cache: build every step afresh.
            start_cmd: what a sandbox of it starts in its desktop (a shell line or an argv
                list); default the image's ENTRYPOINT + CMD.
            ready_cmd: a command that succeeds once the started app is ready (a sandbox's
                create answers after it); ``ready``: the whole ready condition instead.
            network: the RUN steps' network (True, False or {"allow": [...], "deny": [...]});
                default the server's.
            limits: {"memory_mb", "cpus", "pids"} of each RUN step.
            on_log: called with each piece of the build's log as it arrives.
            timeout: seconds the build may take on the server (default 1800).
            wait: False returns the queued build at once (follow it with `Template.wait`).
            part_size: the upload's part size (the server's --max-body-mb bounds it).
        Raises `TemplateBuildError` (step, exit code, the log's end) when the build fails,
        `BadRequestError` naming the field or the Dockerfile line when the server refuses it.
        """
        body = _ref_body(name, tag)
        directory = os.fspath(context) if context is not None else None
        always = [".dockerignore"]
        if dockerfile_path is not None:
            if dockerfile is not None:
                raise ValueError("give dockerfile or dockerfile_path, not both")
            body["dockerfile_path"] = dockerfile_path
            always.append(dockerfile_path)
        elif isinstance(dockerfile, str):
            body["dockerfile"] = dockerfile
        else:
            if dockerfile is None:
                if directory is None:
                    raise ValueError("give the Dockerfile's text (dockerfile=) or a context "
                                     "directory that holds one")
                file = os.path.join(directory, "Dockerfile")
            else:
                file = os.fspath(dockerfile)
            if not os.path.isfile(file):
                raise ValueError(f"no Dockerfile at {file}")
            inside = _context.dockerfile_in_context(directory, file) if directory else None
            if inside is None:
                with open(file, "r", encoding="utf-8") as f:
                    body["dockerfile"] = f.read()
            else:
                always.append(inside)
                if inside != "Dockerfile":
                    body["dockerfile_path"] = inside
        if build_args:
            body["build_args"] = {str(k): str(v) for k, v in build_args.items()}
        if no_cache:
            body["no_cache"] = True
        if network is not None:
            body["network"] = network if isinstance(network, bool) else dict(network)
        if limits is not None:
            body["limits"] = dict(limits)
        _put_start_and_ready(body, start_cmd, ready_cmd, ready, timeout)
        http = HttpClient(server, api_key)
        try:
            if directory is not None:
                if not os.path.isdir(directory):
                    raise ValueError(f"context {directory!r} is not a directory")
                ignore = _context.IgnorePatterns()
                ignore_file = os.path.join(directory, ".dockerignore")
                if os.path.exists(ignore_file):
                    with open(ignore_file, "r", encoding="utf-8") as f:
                        ignore = _context.IgnorePatterns(f.read())
                entries, _, _ = _context.list_context(directory, ignore, always)
                with tempfile.SpooledTemporaryFile(max_size=part_size) as archive:
                    _context.write_context(directory, entries, archive)
                    archive.seek(0)
                    body["upload_id"] = _upload(http, archive, part_size)
            started = http.json("POST", "/v1/templates/builds", json_body=body, timeout=600)
            return _finish(http, started, wait, on_log)
        finally:
            http.close()

    @staticmethod
    def import_archive(
        name: str,
        archive: Union[PathLike, bytes, IO[bytes]],
        tag: Optional[str] = "latest",
        *,
        format: Optional[str] = None,
        start_cmd: Optional[Command] = None,
        ready_cmd: Optional[Command] = None,
        ready: Optional[Mapping[str, Any]] = None,
        on_log: Optional[LogCallback] = None,
        timeout: Optional[int] = None,
        wait: bool = True,
        part_size: int = PART_SIZE,
        server: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> TemplateBuild:
        """Imports an image archive (``docker save``, or an OCI archive) as a template.

        Args:
            archive: a path, the bytes, or a binary file object.
            format: "oci-archive" or "docker-archive" (default: told by its contents).
            The others as for `build`.
        """
        body = _ref_body(name, tag)
        if format is not None:
            body["format"] = format
        _put_start_and_ready(body, start_cmd, ready_cmd, ready, timeout)
        http = HttpClient(server, api_key)
        try:
            if isinstance(archive, (bytes, bytearray, memoryview)):
                body["upload_id"] = _upload(http, io.BytesIO(bytes(archive)), part_size)
            elif hasattr(archive, "read"):
                body["upload_id"] = _upload(http, archive, part_size)  # type: ignore[arg-type]
            else:
                with open(os.fspath(archive), "rb") as f:  # type: ignore[arg-type]
                    body["upload_id"] = _upload(http, f, part_size)
            started = http.json("POST", "/v1/templates/imports", json_body=body, timeout=600)
            return _finish(http, started, wait, on_log)
        finally:
            http.close()

    @staticmethod
    def import_image(
        name: str,
        image: str,
        tag: Optional[str] = "latest",
        *,
        start_cmd: Optional[Command] = None,
        ready_cmd: Optional[Command] = None,
        ready: Optional[Mapping[str, Any]] = None,
        on_log: Optional[LogCallback] = None,
        timeout: Optional[int] = None,
        wait: bool = True,
        server: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> TemplateBuild:
        """Imports an image the server pulls from a registry as a template.

        Args:
            image: ``HOST[:PORT]/REPOSITORY[:TAG|@sha256:DIGEST]``, the registry named in full;
                the server pulls only from registries its operator allows
                (``deskboxd --template-registry``), anonymously. The template records the
                digest pulled (``TemplateInfo.raw["base_digest"]``).
            The others as for `build`.
        """
        body = _ref_body(name, tag)
        body["image"] = image
        _put_start_and_ready(body, start_cmd, ready_cmd, ready, timeout)
        http = HttpClient(server, api_key)
        try:
            started = http.json("POST", "/v1/templates/imports", json_body=body, timeout=600)
            return _finish(http, started, wait, on_log)
        finally:
            http.close()

    @staticmethod
    def list(server: Optional[str] = None, api_key: Optional[str] = None) -> List[TemplateInfo]:
        """The templates the server offers: deskbox's own ("shipped") and yours ("user")."""
        http = HttpClient(server, api_key)
        try:
            j = http.json("GET", "/v1/templates")
        finally:
            http.close()
        return [TemplateInfo.from_json(t) for t in j.get("items", [])]

    @staticmethod
    def get(template: str, server: Optional[str] = None,
            api_key: Optional[str] = None) -> TemplateInfo:
        """A template built or imported here ("name" or "name:tag"); NotFoundError if none."""
        http = HttpClient(server, api_key)
        try:
            return TemplateInfo.from_json(http.json("GET", "/v1/templates/" + _quote(template)))
        finally:
            http.close()

    @staticmethod
    def delete(template: str, server: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes a template of yours ("name" or "name:tag"); ConflictError while a sandbox
        uses it, NotFoundError if there is none."""
        http = HttpClient(server, api_key)
        try:
            http.json("DELETE", "/v1/templates/" + _quote(template))
        finally:
            http.close()

    @staticmethod
    def builds(server: Optional[str] = None,
               api_key: Optional[str] = None) -> List[TemplateBuild]:
        """The builds and imports the server remembers, newest first."""
        http = HttpClient(server, api_key)
        try:
            j = http.json("GET", "/v1/templates/builds")
        finally:
            http.close()
        return [TemplateBuild.from_json(b) for b in j.get("builds", [])]

    @staticmethod
    def get_build(build_id: str, server: Optional[str] = None,
                  api_key: Optional[str] = None) -> TemplateBuild:
        """One build, as it is now."""
        http = HttpClient(server, api_key)
        try:
            return TemplateBuild.from_json(
                http.json("GET", "/v1/templates/builds/" + _quote(build_id)))
        finally:
            http.close()

    @staticmethod
    def wait(build_id: str, on_log: Optional[LogCallback] = None, check: bool = True,
             server: Optional[str] = None, api_key: Optional[str] = None) -> TemplateBuild:
        """Follows a build's log from its start (``on_log`` gets each piece) until it has
        finished; raises `TemplateBuildError` if it did not succeed (unless ``check=False``)."""
        http = HttpClient(server, api_key)
        try:
            build = _follow(http, build_id, on_log)
        finally:
            http.close()
        if check and not build.succeeded:
            raise TemplateBuildError(build)
        return build

    @staticmethod
    def logs(build_id: str, server: Optional[str] = None, api_key: Optional[str] = None) -> str:
        """The build's log so far."""
        http = HttpClient(server, api_key)
        path = "/v1/templates/builds/" + _quote(build_id) + "/log"
        text, offset = "", 0
        try:
            while True:
                j = http.json("GET", path, query={"offset": offset})
                text += j.get("text", "")
                next_offset = int(j.get("next_offset", offset))
                if next_offset <= offset or j.get("complete"):
                    return text
                offset = next_offset
        finally:
            http.close()

    @staticmethod
    def cancel(build_id: str, server: Optional[str] = None,
               api_key: Optional[str] = None) -> TemplateBuild:
        """Cancels a queued or running build; returns it (a finished one is left as it is)."""
        http = HttpClient(server, api_key)
        try:
            return TemplateBuild.from_json(
                http.json("POST", "/v1/templates/builds/" + _quote(build_id) + "/cancel",
                          timeout=60))
        finally:
            http.close()
