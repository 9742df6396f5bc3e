"""Stream clients of the Python SDK against a real deskboxd: a stream command's output read
while it runs (sync and async), its stdin and kill by pid; the screen stream's hello and
frames over the SDK's own WebSocket client; a window waited for by its title; mkdir and
directory listing."""

from __future__ import annotations

import asyncio
import unittest
from typing import Optional

import support  # noqa: F401  (puts sdk/python on sys.path)
from support import RUNTIME, TEMPLATE, DeskboxdProcess

from deskbox import ConflictError, NotFoundError, Sandbox
from deskbox.aio import AsyncSandbox

server: Optional[DeskboxdProcess] = None
sandbox: Optional[Sandbox] = None


def setUpModule() -> None:
    global server, sandbox
    server = DeskboxdProcess()
    sandbox = Sandbox.create(template=TEMPLATE, runtime=RUNTIME, server=server.url,
                             network=False)


def tearDownModule() -> None:
    if sandbox is not None:
        sandbox.kill()
    if server is not None:
        server.stop()


class LiveTest(unittest.TestCase):
    def test_stream_output_arrives_while_the_command_runs(self) -> None:
        assert sandbox is not None
        with sandbox.commands.stream(
                "echo first; while [ ! -e /tmp/go-py ]; do sleep 0.05; done; echo second") as run:
            first = next(run)
            # It cannot end before /tmp/go-py exists: the first line came while it ran.
            self.assertEqual((first.stream, first.text), ("stdout", "first\n"))
            self.assertIn(run.pid, [p["pid"] for p in sandbox.commands.list()])
            sandbox.files.write("/tmp/go-py", "x")
            rest = "".join(out.text for out in run)
        self.assertEqual(rest, "second\n")
        assert run.exit is not None
        self.assertEqual(run.exit.exit_code, 0)

    def test_stdin_and_kill_by_pid(self) -> None:
        assert sandbox is not None
        run = sandbox.commands.stream("cat", stdin_open=True)
        run.write_stdin("echo me\n")
        self.assertEqual(next(run).text, "echo me\n")
        run.kill("TERM")
        self.assertEqual(list(run), [])
        assert run.exit is not None
        self.assertEqual(run.exit.signal, 15)
        with self.assertRaises(NotFoundError):
            sandbox.commands.write_stdin(run.pid, "late\n")
        with self.assertRaises(NotFoundError):
            sandbox.commands.kill(run.pid)

    def test_async_iterator_over_command_output(self) -> None:
        assert sandbox is not None

        async def lines() -> list:
            sb = AsyncSandbox(sandbox)  # type: ignore[arg-type]
            async with sb.commands.stream("for i in 1 2 3; do echo $i; done") as run:
                texts = [out.text async for out in run]
            return ["".join(texts), run.exit.exit_code]

        self.assertEqual(asyncio.run(lines()), ["1\n2\n3\n", 0])

    def test_screen_stream_and_a_window_by_title(self) -> None:
        assert sandbox is not None
        with sandbox.live(codec="jpeg", fps=5) as live:
            hello = next(live)
            self.assertEqual(hello.kind, "event")
            self.assertEqual(hello.event["type"], "hello")
            self.assertEqual(hello.event["codec"], "jpeg")
            frame = next(live.frames())
            self.assertTrue(frame.data.startswith(b"\xff\xd8"), "a JPEG")
            self.assertGreater(frame.full_width, 0)
        sandbox.commands.run("xterm -T deskbox-sdk-window -e sleep 60", background=True)
        window = sandbox.wait_for_window("deskbox-sdk-window", timeout=30)
        self.assertEqual(window.title, "deskbox-sdk-window")

    def test_mkdir_and_list(self) -> None:
        assert sandbox is not None
        sandbox.files.mkdir("/tmp/py-made/inner", parents=True)
        sandbox.files.write("/tmp/py-made/inner/a.txt", "a")
        self.assertEqual([e.name for e in sandbox.files.list("/tmp/py-made/inner")], ["a.txt"])
        with self.assertRaises(ConflictError):
            sandbox.files.mkdir("/tmp/py-made")
        with self.assertRaises(ConflictError):
            sandbox.files.list("/tmp/py-made/inner/a.txt")


if __name__ == "__main__":
    unittest.main()
