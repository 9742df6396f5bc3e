"""``AsyncSandbox``: the same API for asyncio code, each call run in a worker thread.

    from deskbox.aio import AsyncSandbox

    async with await AsyncSandbox.create(template="minimal") as sb:
        await sb.left_click(100, 200)
        png = await sb.screenshot()

Calls on one AsyncSandbox share its one kept-alive connection, so they run one at a time;
use several sandboxes (or several `connect`ed handles) for parallelism. ``sb.sync`` is the
underlying `Sandbox` for anything not wrapped here. `AsyncTemplate` builds and imports
templates (``await AsyncTemplate.build("app", dockerfile=..., on_log=async_or_plain_fn)``).
"""

from __future__ import annotations

import asyncio
import functools
from types import TracebackType
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Type, Union

from .live import CommandExit
from .sandbox import Action, CommandResult, FileEntry, Point, Sandbox, SandboxInfo, Window
from .snapshot import SnapshotInfo
from .template import Template, TemplateBuild, TemplateInfo
from .vision import (
    CompareResult,
    ImageInput,
    Match,
    Matches,
    OcrResult,
    RegionLike,
    Target,
    WaitResult,
)


class _AsyncCommands:
    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    async def run(self, cmd: Union[str, Sequence[str]], background: bool = False,
                  timeout: Optional[float] = None, env: Optional[Dict[str, str]] = None,
                  cwd: Optional[str] = None, stdin: Optional[str] = None,
                  check: bool = False) -> Any:
        """See `Commands.run`."""
        return await asyncio.to_thread(self._sb.commands.run, cmd, background, timeout, env,
                                       cwd, stdin, check)


    def stream(self, cmd: Union[str, Sequence[str]], **kwargs: Any) -> "AsyncCommandStream":
        """See `Commands.stream`: ``async with sb.commands.stream("make") as run:
        async for out in run: ...``, then ``run.exit``."""
        return AsyncCommandStream(functools.partial(self._sb.commands.stream, cmd, **kwargs))

    async def write_stdin(self, pid: int, data: Union[bytes, str], eof: bool = False) -> None:
        """See `Commands.write_stdin`."""
        await asyncio.to_thread(self._sb.commands.write_stdin, pid, data, eof)

    async def kill(self, pid: int, signal: Union[str, int] = "KILL") -> None:
        """See `Commands.kill`."""
        await asyncio.to_thread(self._sb.commands.kill, pid, signal)


class _ThreadedIterator:
    """An iterator of blocking reads as an async iterator: each read in a worker thread."""

    def __init__(self, opener: Any) -> None:
        self._opener = opener
        self._it: Any = None

    async def open(self) -> Any:
        if self._it is None:
            self._it = await asyncio.to_thread(self._opener)
        return self._it

    async def __aenter__(self) -> Any:
        await self.open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._it is not None:
            await asyncio.to_thread(self._it.close)

    def __aiter__(self) -> Any:
        return self

    async def __anext__(self) -> Any:
        it = await self.open()
        done = object()
        item = await asyncio.to_thread(next, it, done)
        if item is done:
            raise StopAsyncIteration
        return item


class AsyncCommandStream(_ThreadedIterator):
    """A stream command for asyncio: ``async for`` its `CommandOutput`; ``exit`` afterwards."""

    @property
    def pid(self) -> Optional[int]:
        return self._it.pid if self._it is not None else None

    @property
    def exit(self) -> Optional[CommandExit]:
        return self._it.exit if self._it is not None else None

    async def write_stdin(self, data: Union[bytes, str], eof: bool = False) -> None:
        await asyncio.to_thread((await self.open()).write_stdin, data, eof)

    async def kill(self, signal: Union[str, int] = "KILL") -> None:
        await asyncio.to_thread((await self.open()).kill, signal)


class AsyncLiveStream(_ThreadedIterator):
    """The screen stream for asyncio: ``async for`` its `LiveMessage`s."""


class _AsyncFiles:
    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    async def read(self, path: str) -> bytes:
        """See `Files.read`."""
        return await asyncio.to_thread(self._sb.files.read, path)

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """See `Files.read_text`."""
        return await asyncio.to_thread(self._sb.files.read_text, path, encoding)

    async def write(self, path: str, data: Union[bytes, str],
                    mode: Optional[Union[int, str]] = None) -> int:
        """See `Files.write`."""
        return await asyncio.to_thread(self._sb.files.write, path, data, mode)

    async def list(self, path: str) -> List[FileEntry]:
        """See `Files.list`."""
        return await asyncio.to_thread(self._sb.files.list, path)

    async def exists(self, path: str) -> bool:
        """See `Files.exists`."""
        return await asyncio.to_thread(self._sb.files.exists, path)

    async def remove(self, path: str, recursive: bool = False) -> None:
        """See `Files.remove`."""
        await asyncio.to_thread(self._sb.files.remove, path, recursive)

    async def mkdir(self, path: str, parents: bool = False) -> None:
        """See `Files.mkdir`."""
        await asyncio.to_thread(self._sb.files.mkdir, path, parents)


class _AsyncClipboard:
    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    async def get(self) -> str:
        """See `Clipboard.get`."""
        return await asyncio.to_thread(self._sb.clipboard.get)

    async def set(self, text: str) -> None:
        """See `Clipboard.set`."""
        await asyncio.to_thread(self._sb.clipboard.set, text)


class AsyncSandbox:
    """An asyncio front of `Sandbox` (same methods, awaitable)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sync = sandbox
        self.id = sandbox.id
        self.commands = _AsyncCommands(sandbox)
        self.files = _AsyncFiles(sandbox)
        self.clipboard = _AsyncClipboard(sandbox)

    @classmethod
    async def create(cls, **kwargs: Any) -> "AsyncSandbox":
        """See `Sandbox.create` (same keyword arguments)."""
        return cls(await asyncio.to_thread(lambda: Sandbox.create(**kwargs)))

    @classmethod
    async def connect(cls, sandbox_id: str, server: Optional[str] = None,
                      api_key: Optional[str] = None) -> "AsyncSandbox":
        """See `Sandbox.connect`."""
        return cls(await asyncio.to_thread(Sandbox.connect, sandbox_id, server, api_key))

    @staticmethod
    async def list(server: Optional[str] = None, api_key: Optional[str] = None) -> List[SandboxInfo]:
        """See `Sandbox.list`."""
        return await asyncio.to_thread(Sandbox.list, server, api_key)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await self.kill()

    async def info(self) -> SandboxInfo:
        """See `Sandbox.info`."""
        return await asyncio.to_thread(self.sync.info)

    async def kill(self) -> Optional[SandboxInfo]:
        """See `Sandbox.kill`."""
        return await asyncio.to_thread(self.sync.kill)

    async def pause(self, snapshot: bool = False) -> SandboxInfo:
        """See `Sandbox.pause`."""
        return await asyncio.to_thread(self.sync.pause, snapshot)

    async def resume(self) -> SandboxInfo:
        """See `Sandbox.resume`."""
        return await asyncio.to_thread(self.sync.resume)

    async def snapshot(self, name: str, metadata: Optional[Dict[str, str]] = None) -> SnapshotInfo:
        """See `Sandbox.snapshot`."""
        return await asyncio.to_thread(self.sync.snapshot, name, metadata)

    async def fork(self, count: int = 1, metadata: Optional[Dict[str, Any]] = None,
                   timeout_s: Optional[int] = None) -> List["AsyncSandbox"]:
        """See `Sandbox.fork`."""
        forks = await asyncio.to_thread(self.sync.fork, count, metadata, timeout_s)
        return [AsyncSandbox(f) for f in forks]

    async def set_network(self, **change: Any) -> Dict[str, Any]:
        """See `Sandbox.set_network`."""
        return await asyncio.to_thread(lambda: self.sync.set_network(**change))

    async def set_timeout(self, seconds: int) -> SandboxInfo:
        """See `Sandbox.set_timeout`."""
        return await asyncio.to_thread(self.sync.set_timeout, seconds)

    async def screenshot(self, format: str = "png", scale: Optional[float] = None,
                         width: Optional[int] = None, height: Optional[int] = None,
                         quality: Optional[int] = None, cursor: Optional[bool] = None) -> bytes:
        """See `Sandbox.screenshot`."""
        return await asyncio.to_thread(self.sync.screenshot, format, scale, width, height,
                                       quality, cursor)

    def screen_size(self) -> Point:
        """See `Sandbox.screen_size` (no request: not a coroutine)."""
        return self.sync.screen_size()

    def live(self, **kwargs: Any) -> AsyncLiveStream:
        """See `Sandbox.live`: ``async with sb.live() as live: async for message in live``."""
        return AsyncLiveStream(functools.partial(self.sync.live, **kwargs))

    async def wait_for_window(self, title: Any, timeout: float = 30.0) -> Window:
        """See `Sandbox.wait_for_window`."""
        return await asyncio.to_thread(self.sync.wait_for_window, title, timeout)

    def stream_url(self, view_only: bool = True) -> str:
        """See `Sandbox.stream_url`."""
        return self.sync.stream_url(view_only)

    async def cursor(self) -> Point:
        """See `Sandbox.cursor`."""
        return await asyncio.to_thread(self.sync.cursor)

    async def windows(self) -> List[Window]:
        """See `Sandbox.windows`."""
        return await asyncio.to_thread(self.sync.windows)

    async def accessibility_tree(self, scope: str = "focused", app: Optional[str] = None,
                                 max_depth: Optional[int] = None,
                                 max_nodes: Optional[int] = None,
                                 visible_only: Optional[bool] = None) -> Dict[str, Any]:
        """See `Sandbox.accessibility_tree`."""
        return await asyncio.to_thread(self.sync.accessibility_tree, scope, app, max_depth,
                                       max_nodes, visible_only)

    async def find_elements(self, role: Optional[str] = None, name: Optional[str] = None,
                            **options: Any) -> List[Dict[str, Any]]:
        """See `Sandbox.find_elements`."""
        return await asyncio.to_thread(lambda: self.sync.find_elements(role, name, **options))

    async def act_on_element(self, ref: str, action: str = "press",
                             value: Optional[Union[str, float]] = None) -> Dict[str, Any]:
        """See `Sandbox.act_on_element`."""
        return await asyncio.to_thread(self.sync.act_on_element, ref, action, value)

    async def kill_processes(self) -> Dict[str, int]:
        """See `Sandbox.kill_processes`."""
        return await asyncio.to_thread(self.sync.kill_processes)

    async def act(self, actions: Union[Action, Iterable[Action]],
                  dialect: str = "native") -> List[Dict[str, Any]]:
        """See `Sandbox.act`."""
        return await asyncio.to_thread(self.sync.act, actions, dialect)

    async def run_tool_uses(self, blocks: Iterable[Any],
                            screenshot: bool = False) -> List[Dict[str, Any]]:
        """See `Sandbox.run_tool_uses`."""
        return await asyncio.to_thread(self.sync.run_tool_uses, list(blocks), screenshot)

    async def left_click(self, x: Optional[int] = None, y: Optional[int] = None, *,
                         target: Optional[Target] = None) -> Optional[Match]:
        """See `Sandbox.left_click`."""
        return await asyncio.to_thread(self.sync.left_click, x, y, target=target)

    async def right_click(self, x: Optional[int] = None, y: Optional[int] = None, *,
                          target: Optional[Target] = None) -> Optional[Match]:
        """See `Sandbox.right_click`."""
        return await asyncio.to_thread(self.sync.right_click, x, y, target=target)

    async def middle_click(self, x: Optional[int] = None, y: Optional[int] = None, *,
                           target: Optional[Target] = None) -> Optional[Match]:
        """See `Sandbox.middle_click`."""
        return await asyncio.to_thread(self.sync.middle_click, x, y, target=target)

    async def double_click(self, x: Optional[int] = None, y: Optional[int] = None, *,
                           target: Optional[Target] = None) -> Optional[Match]:
        """See `Sandbox.double_click`."""
        return await asyncio.to_thread(self.sync.double_click, x, y, target=target)

    async def triple_click(self, x: Optional[int] = None, y: Optional[int] = None, *,
                           target: Optional[Target] = None) -> Optional[Match]:
        """See `Sandbox.triple_click`."""
        return await asyncio.to_thread(self.sync.triple_click, x, y, target=target)

    async def click_text(self, text: str, *, button: str = "left", count: int = 1,
                         index: Optional[int] = None, offset: Optional[Tuple[int, int]] = None,
                         region: Optional[RegionLike] = None, exact: Optional[bool] = None,
                         lang: Optional[str] = None, timeout_ms: Optional[int] = None) -> Match:
        """See `Sandbox.click_text`."""
        return await asyncio.to_thread(functools.partial(
            self.sync.click_text, text, button=button, count=count, index=index, offset=offset,
            region=region, exact=exact, lang=lang, timeout_ms=timeout_ms))

    async def click_image(self, image: ImageInput, *, button: str = "left", count: int = 1,
                          index: Optional[int] = None, offset: Optional[Tuple[int, int]] = None,
                          region: Optional[RegionLike] = None, threshold: Optional[float] = None,
                          grayscale: Optional[bool] = None,
                          scales: Optional[Sequence[float]] = None,
                          timeout_ms: Optional[int] = None) -> Match:
        """See `Sandbox.click_image`."""
        return await asyncio.to_thread(functools.partial(
            self.sync.click_image, image, button=button, count=count, index=index,
            offset=offset, region=region, threshold=threshold, grayscale=grayscale,
            scales=scales, timeout_ms=timeout_ms))

    async def move_mouse(self, x: Optional[int] = None, y: Optional[int] = None, *,
                         target: Optional[Target] = None) -> Optional[Match]:
        """See `Sandbox.move_mouse`."""
        return await asyncio.to_thread(self.sync.move_mouse, x, y, target=target)

    async def mouse_press(self, button: str = "left", *,
                          target: Optional[Target] = None) -> Optional[Match]:
        """See `Sandbox.mouse_press`."""
        return await asyncio.to_thread(self.sync.mouse_press, button, target=target)

    async def mouse_release(self, button: str = "left", *,
                            target: Optional[Target] = None) -> Optional[Match]:
        """See `Sandbox.mouse_release`."""
        return await asyncio.to_thread(self.sync.mouse_release, button, target=target)

    async def drag(self, path: Sequence[Point], button: str = "left") -> None:
        """See `Sandbox.drag`."""
        await asyncio.to_thread(self.sync.drag, path, button)

    async def scroll(self, dx: int = 0, dy: int = 1, x: Optional[int] = None,
                     y: Optional[int] = None, *,
                     target: Optional[Target] = None) -> Optional[Match]:
        """See `Sandbox.scroll`."""
        return await asyncio.to_thread(self.sync.scroll, dx, dy, x, y, target=target)

    async def write(self, text: str) -> None:
        """See `Sandbox.write`."""
        await asyncio.to_thread(self.sync.write, text)

    async def press(self, keys: Union[str, Sequence[str]]) -> None:
        """See `Sandbox.press`."""
        await asyncio.to_thread(self.sync.press, keys)

    async def wait(self, ms: int) -> None:
        """See `Sandbox.wait`."""
        await asyncio.to_thread(self.sync.wait, ms)

    # -- seeing the screen -----------------------------------------------------------------
    async def locate(self, image: Optional[ImageInput] = None, text: Optional[str] = None, *,
                     region: Optional[RegionLike] = None, threshold: Optional[float] = None,
                     max_results: Optional[int] = None, scales: Optional[Sequence[float]] = None,
                     grayscale: Optional[bool] = None, exact: Optional[bool] = None,
                     lang: Optional[str] = None) -> Matches:
        """See `Sandbox.locate`."""
        return await asyncio.to_thread(functools.partial(
            self.sync.locate, image, text, region=region, threshold=threshold,
            max_results=max_results, scales=scales, grayscale=grayscale, exact=exact,
            lang=lang))

    async def ocr(self, region: Optional[RegionLike] = None, lang: Optional[str] = None,
                  min_confidence: Optional[float] = None) -> OcrResult:
        """See `Sandbox.ocr`."""
        return await asyncio.to_thread(self.sync.ocr, region, lang, min_confidence)

    async def compare(self, baseline: ImageInput, *, region: Optional[RegionLike] = None,
                      mask: Optional[Iterable[RegionLike]] = None,
                      tolerance: Optional[int] = None, diff: bool = False) -> CompareResult:
        """See `Sandbox.compare`."""
        return await asyncio.to_thread(functools.partial(
            self.sync.compare, baseline, region=region, mask=mask, tolerance=tolerance,
            diff=diff))

    async def wait_for(self, until: str, *, region: Optional[RegionLike] = None,
                       timeout_ms: Optional[int] = None, stable_ms: Optional[int] = None,
                       since: Optional[int] = None, image: Optional[ImageInput] = None,
                       text: Optional[str] = None, threshold: Optional[float] = None,
                       scales: Optional[Sequence[float]] = None,
                       grayscale: Optional[bool] = None, exact: Optional[bool] = None,
                       lang: Optional[str] = None, check: bool = False) -> WaitResult:
        """See `Sandbox.wait_for`."""
        return await asyncio.to_thread(functools.partial(
            self.sync.wait_for, until, region=region, timeout_ms=timeout_ms,
            stable_ms=stable_ms, since=since, image=image, text=text, threshold=threshold,
            scales=scales, grayscale=grayscale, exact=exact, lang=lang, check=check))

    async def wait_for_text(self, text: str, *, timeout_ms: Optional[int] = None,
                            region: Optional[RegionLike] = None, exact: Optional[bool] = None,
                            lang: Optional[str] = None, check: bool = False) -> WaitResult:
        """See `Sandbox.wait_for_text`."""
        return await self.wait_for("text", text=text, timeout_ms=timeout_ms, region=region,
                                   exact=exact, lang=lang, check=check)

    async def wait_for_image(self, image: ImageInput, *, timeout_ms: Optional[int] = None,
                             region: Optional[RegionLike] = None,
                             threshold: Optional[float] = None,
                             scales: Optional[Sequence[float]] = None,
                             grayscale: Optional[bool] = None,
                             check: bool = False) -> WaitResult:
        """See `Sandbox.wait_for_image`."""
        return await self.wait_for("image", image=image, timeout_ms=timeout_ms, region=region,
                                   threshold=threshold, scales=scales, grayscale=grayscale,
                                   check=check)

    async def wait_for_change(self, *, since: Optional[int] = None,
                              region: Optional[RegionLike] = None,
                              timeout_ms: Optional[int] = None,
                              check: bool = False) -> WaitResult:
        """See `Sandbox.wait_for_change`."""
        return await self.wait_for("change", since=since, region=region,
                                   timeout_ms=timeout_ms, check=check)

    async def wait_until_stable(self, stable_ms: Optional[int] = None, *,
                                region: Optional[RegionLike] = None,
                                timeout_ms: Optional[int] = None,
                                check: bool = False) -> WaitResult:
        """See `Sandbox.wait_until_stable`."""
        return await self.wait_for("stable", stable_ms=stable_ms, region=region,
                                   timeout_ms=timeout_ms, check=check)

    async def wait_until_gone(self, text: Optional[str] = None,
                              image: Optional[ImageInput] = None, *,
                              timeout_ms: Optional[int] = None,
                              region: Optional[RegionLike] = None,
                              threshold: Optional[float] = None,
                              scales: Optional[Sequence[float]] = None,
                              grayscale: Optional[bool] = None, exact: Optional[bool] = None,
                              lang: Optional[str] = None, check: bool = False) -> WaitResult:
        """See `Sandbox.wait_until_gone`."""
        return await self.wait_for("gone", text=text, image=image, timeout_ms=timeout_ms,
                                   region=region, threshold=threshold, scales=scales,
                                   grayscale=grayscale, exact=exact, lang=lang, check=check)


def _log_bridge(on_log: Any, loop: asyncio.AbstractEventLoop) -> Any:
    """``on_log`` for the worker thread: a coroutine function runs on the caller's loop (the
    build waits for it), a plain function is called in the worker thread."""
    if on_log is None or not asyncio.iscoroutinefunction(on_log):
        return on_log

    def call(text: str) -> None:
        asyncio.run_coroutine_threadsafe(on_log(text), loop).result()

    return call


class AsyncTemplate:
    """`Template` for asyncio code: the same static methods as coroutines (each runs in a worker
    thread). ``on_log`` may be a plain function or a coroutine function."""

    @staticmethod
    async def build(name: str, *args: Any, on_log: Any = None, **kwargs: Any) -> TemplateBuild:
        """See `Template.build`."""
        bridge = _log_bridge(on_log, asyncio.get_running_loop())
        return await asyncio.to_thread(
            functools.partial(Template.build, name, *args, on_log=bridge, **kwargs))

    @staticmethod
    async def import_archive(name: str, archive: Any, *args: Any, on_log: Any = None,
                             **kwargs: Any) -> TemplateBuild:
        """See `Template.import_archive`."""
        bridge = _log_bridge(on_log, asyncio.get_running_loop())
        return await asyncio.to_thread(functools.partial(
            Template.import_archive, name, archive, *args, on_log=bridge, **kwargs))

    @staticmethod
    async def import_image(name: str, image: str, *args: Any, on_log: Any = None,
                           **kwargs: Any) -> TemplateBuild:
        """See `Template.import_image`."""
        bridge = _log_bridge(on_log, asyncio.get_running_loop())
        return await asyncio.to_thread(functools.partial(
            Template.import_image, name, image, *args, on_log=bridge, **kwargs))

    @staticmethod
    async def wait(build_id: str, on_log: Any = None, check: bool = True,
                   server: Optional[str] = None, api_key: Optional[str] = None) -> TemplateBuild:
        """See `Template.wait`."""
        bridge = _log_bridge(on_log, asyncio.get_running_loop())
        return await asyncio.to_thread(Template.wait, build_id, bridge, check, server, api_key)

    @staticmethod
    async def list(server: Optional[str] = None,
                   api_key: Optional[str] = None) -> List[TemplateInfo]:
        """See `Template.list`."""
        return await asyncio.to_thread(Template.list, server, api_key)

    @staticmethod
    async def get(template: str, server: Optional[str] = None,
                  api_key: Optional[str] = None) -> TemplateInfo:
        """See `Template.get`."""
        return await asyncio.to_thread(Template.get, template, server, api_key)

    @staticmethod
    async def delete(template: str, server: Optional[str] = None,
                     api_key: Optional[str] = None) -> None:
        """See `Template.delete`."""
        await asyncio.to_thread(Template.delete, template, server, api_key)

    @staticmethod
    async def builds(server: Optional[str] = None,
                     api_key: Optional[str] = None) -> List[TemplateBuild]:
        """See `Template.builds`."""
        return await asyncio.to_thread(Template.builds, server, api_key)

    @staticmethod
    async def get_build(build_id: str, server: Optional[str] = None,
                        api_key: Optional[str] = None) -> TemplateBuild:
        """See `Template.get_build`."""
        return await asyncio.to_thread(Template.get_build, build_id, server, api_key)

    @staticmethod
    async def logs(build_id: str, server: Optional[str] = None,
                   api_key: Optional[str] = None) -> str:
        """See `Template.logs`."""
        return await asyncio.to_thread(Template.logs, build_id, server, api_key)

    @staticmethod
    async def cancel(build_id: str, server: Optional[str] = None,
                     api_key: Optional[str] = None) -> TemplateBuild:
        """See `Template.cancel`."""
        return await asyncio.to_thread(Template.cancel, build_id, server, api_key)


__all__ = ["AsyncSandbox", "AsyncTemplate", "CommandResult", "Target"]
