"""The Python SDK against a real deskboxd (container runtime, template `minimal`)."""

from __future__ import annotations

import socket
import struct
import time
import unittest
import zlib
from typing import Any, Dict, Optional, Tuple

import support  # noqa: F401  (puts sdk/python on sys.path)
from support import RUNTIME, TEMPLATE, DeskboxdProcess, wait_until

import deskbox
from deskbox import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ConnectionFailedError,
    DeskboxError,
    InvalidActionError,
    NotFoundError,
    Sandbox,
    SandboxPausedError,
)

server: Optional[DeskboxdProcess] = None


def setUpModule() -> None:
    global server
    server = DeskboxdProcess()


def tearDownModule() -> None:
    if server is not None:
        server.stop()


def png_size(data: bytes) -> Tuple[int, int]:
    """Width and height from a PNG's IHDR, after checking the signature and the IHDR's CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    ihdr = data[16:29]
    (crc,) = struct.unpack(">I", data[29:33])
    assert zlib.crc32(b"IHDR" + ihdr) == crc
    assert data[-8:-4] == b"IEND"
    return struct.unpack(">II", ihdr[:8])


class SandboxTest(unittest.TestCase):
    """One sandbox shared by every test of this class."""

    sb: Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        assert server is not None
        cls.sb = Sandbox.create(
            template=TEMPLATE, runtime=RUNTIME, network=False, timeout=600,
            metadata={"suite": "sdk"}, env={"DESKBOX_SDK_TEST": "yes"}, server=server.url,
        )
        # The template autostarts an xterm; wait for its window.
        if not wait_until(lambda: [w for w in cls.sb.windows() if w.wm_class == "XTerm"], 20):
            raise RuntimeError("the xterm window did not appear")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sb.kill()

    # -- create / list / connect / inspect ------------------------------------------------
    def test_create_info(self) -> None:
        info = self.sb.info()
        self.assertTrue(self.sb.id.startswith("sb-"))
        self.assertEqual(info.id, self.sb.id)
        self.assertEqual(info.state, "running")
        self.assertEqual(info.runtime, RUNTIME)
        self.assertEqual(info.template, TEMPLATE)
        self.assertEqual(info.resolution, (1280, 800))
        self.assertEqual(info.metadata, {"suite": "sdk"})
        self.assertRegex(info.view_token or "", "^[0-9a-f]{32}$")
        self.assertRegex(info.control_token or "", "^[0-9a-f]{32}$")
        self.assertNotEqual(info.view_token, info.control_token)
        self.assertEqual(self.sb.screen_size(), (1280, 800))

    def test_env_reaches_commands(self) -> None:
        r = self.sb.commands.run("echo $DESKBOX_SDK_TEST")
        self.assertEqual(r.stdout, "yes\n")

    def test_list_and_connect(self) -> None:
        assert server is not None
        ids = [s.id for s in Sandbox.list(server=server.url)]
        self.assertIn(self.sb.id, ids)
        other = Sandbox.connect(self.sb.id, server=server.url)
        try:
            self.assertEqual(other.id, self.sb.id)
            self.assertEqual(other.info().control_token, self.sb.info().control_token)
            # A second handle drives the same desktop.
            other.move_mouse(17, 23)
            self.assertEqual(self.sb.cursor(), (17, 23))
        finally:
            other.close()  # not kill: the sandbox is shared

    def test_server_from_environment(self) -> None:
        assert server is not None
        import os

        old = os.environ.get("DESKBOX_SERVER")
        os.environ["DESKBOX_SERVER"] = server.url
        try:
            self.assertIn(self.sb.id, [s.id for s in Sandbox.list()])
        finally:
            if old is None:
                del os.environ["DESKBOX_SERVER"]
            else:
                os.environ["DESKBOX_SERVER"] = old

    def test_stream_url(self) -> None:
        assert server is not None
        info = self.sb.info()
        self.assertEqual(self.sb.stream_url(),
                         f"{server.url}/view/{self.sb.id}?token={info.view_token}")
        self.assertEqual(self.sb.stream_url(view_only=False),
                         f"{server.url}/view/{self.sb.id}?token={info.control_token}")
        # The page is served for that token (and refused without it).
        import urllib.error
        import urllib.request

        with urllib.request.urlopen(self.sb.stream_url(), timeout=10) as page:
            self.assertEqual(page.status, 200)
            self.assertIn(b"<", page.read(200))
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen(f"{server.url}/view/{self.sb.id}?token=wrong", timeout=10)
        self.assertIn(cm.exception.code, (401, 403, 404))

    # -- screen -------------------------------------------------------------------------------
    def test_screenshot_png(self) -> None:
        png = self.sb.screenshot()
        self.assertEqual(png_size(png), (1280, 800))
        self.assertEqual(png_size(self.sb.screenshot(scale=0.5)), (640, 400))
        self.assertEqual(png_size(self.sb.screenshot(width=320, height=200)), (320, 200))
        jpeg = self.sb.screenshot(format="jpeg", quality=50)
        self.assertEqual(jpeg[:3], b"\xff\xd8\xff")
        with self.assertRaises(BadRequestError) as cm:
            self.sb.screenshot(format="gif")
        self.assertEqual((cm.exception.status, cm.exception.field), (400, "format"))

    def test_accessibility_on_minimal_says_why_and_names_bad_fields(self) -> None:
        with self.assertRaises(DeskboxError) as refused:
            self.sb.accessibility_tree(scope="all")
        self.assertEqual(refused.exception.status, 422)
        self.assertEqual(refused.exception.code, "accessibility_unavailable")
        self.assertIn("libatspi not installed", str(refused.exception))
        with self.assertRaises(BadRequestError) as bad:
            self.sb.find_elements(name="(", name_match="regex")
        self.assertEqual(bad.exception.field, "name")
        with self.assertRaises(BadRequestError) as bad:
            self.sb.act_on_element(":1.2/x", "press", value=3)
        self.assertEqual(bad.exception.field, "value")
        # A click aimed at {role, name}: the server looks for it until timeout_ms, and says why
        # it found nothing.
        with self.assertRaises(deskbox.TargetNotFoundError) as missing:
            self.sb.left_click(target=deskbox.Target(role="push button", name="Save",
                                                     timeout_ms=300))
        self.assertEqual(missing.exception.field, "target")
        self.assertIn("libatspi not installed", str(missing.exception))

    def test_windows_and_cursor(self) -> None:
        windows = self.sb.windows()
        xterm = [w for w in windows if w.wm_class == "XTerm"]
        self.assertEqual(len(xterm), 1, windows)
        w = xterm[0]
        self.assertTrue(w.visible)
        self.assertGreater(w.width, 100)
        self.assertGreater(w.height, 100)
        self.assertIn(self.sb.id, w.title)  # "user@<hostname>: /", the hostname is the id
        self.sb.move_mouse(101, 202)
        self.assertEqual(self.sb.cursor(), (101, 202))
        results = self.sb.act([{"type": "move", "x": 5, "y": 6}, {"type": "cursor_position"}])
        self.assertEqual(results, [{}, {"x": 5, "y": 6}])

    def _xterm(self) -> deskbox.Window:
        return [w for w in self.sb.windows() if w.wm_class == "XTerm"][0]

    def _type_into_xterm(self, line: str) -> None:
        w = self._xterm()
        self.sb.left_click(w.x + w.width // 2, w.y + w.height // 2)
        self.sb.write(line + "\n")

    def test_click_and_type_into_xterm(self) -> None:
        before = self.sb.screenshot()
        text = "deskbox-typed ÄÖü 日本"
        self._type_into_xterm(f"echo '{text}' > /tmp/typed.txt")
        got = wait_until(lambda: self.sb.files.exists("/tmp/typed.txt")
                         and self.sb.files.read_text("/tmp/typed.txt"), 10)
        self.assertEqual(got, text + "\n")
        # The shell wrote the file; xterm paints the echoed line on its own time (the pty
        # hands it the echo after the shell read it), so the screen changes soon, not at once.
        self.assertTrue(wait_until(lambda: self.sb.screenshot() != before, 10),
                        "the screen never showed the typed line")

    def test_press_keys(self) -> None:
        # ctrl+u clears the line typed so far; only the second command runs.
        w = self._xterm()
        self.sb.left_click(w.x + 20, w.y + 20)
        self.sb.write("echo wrong > /tmp/keys.txt")
        self.sb.press("ctrl+u")
        self.sb.write("echo right > /tmp/keys.txt")
        self.sb.press(["Return"])
        got = wait_until(lambda: self.sb.files.exists("/tmp/keys.txt")
                         and self.sb.files.read_text("/tmp/keys.txt"), 10)
        self.assertEqual(got, "right\n")

    def test_mouse_actions_are_accepted(self) -> None:
        # Every helper reaches the server as a valid action; the pointer ends where asked.
        self.sb.double_click(300, 300)
        self.sb.triple_click(301, 301)
        self.sb.middle_click(302, 302)
        self.sb.scroll(dy=2, x=303, y=303)
        self.sb.scroll(dx=-1, dy=0)
        self.sb.mouse_press()
        self.sb.mouse_release()
        self.sb.drag([(310, 310), (320, 330), (340, 350)])
        self.assertEqual(self.sb.cursor(), (340, 350))
        self.sb.right_click(400, 410)
        self.assertEqual(self.sb.cursor(), (400, 410))
        self.sb.press("Escape")  # close the xterm's menu if one opened
        self.sb.left_click()
        self.sb.wait(10)

    def test_act_dialects(self) -> None:
        r = self.sb.act({"action": "mouse_move", "coordinate": [50, 60]}, dialect="anthropic")
        self.assertEqual(r, [{}])
        self.assertEqual(self.sb.cursor(), (50, 60))
        r = self.sb.act([{"type": "move", "x": 70, "y": 80}, {"type": "screenshot"}],
                        dialect="openai")
        self.assertEqual(r[0], {})
        self.assertEqual(r[1]["type"], "screenshot")
        import base64

        self.assertEqual(png_size(base64.b64decode(r[1]["base64_image"])), (1280, 800))
        self.assertEqual(self.sb.cursor(), (70, 80))

    def test_run_tool_uses(self) -> None:
        # An assistant message's content: text, then computer toolset members.
        def member(i: int, name: str, **inp: Any) -> Dict[str, Any]:
            return {"type": "tool_use", "id": f"toolu_{i}", "name": name,
                    "toolset_name": "computer", "input": inp}
        content = [{"type": "text", "text": "Moving, then looking."},
                   member(1, "mouse_move", coordinate=[90, 95]),
                   member(2, "cursor_position"),
                   member(3, "zoom", region=[960, 600, 1280, 800])]
        results = self.sb.run_tool_uses(content)
        self.assertEqual([r["tool_use_id"] for r in results], ["toolu_1", "toolu_2", "toolu_3"])
        self.assertEqual(results[1]["content"], [{"type": "text", "text": "X=90,Y=95"}])
        import base64

        zoom = base64.b64decode(results[2]["content"][0]["source"]["data"])
        self.assertEqual(png_size(zoom), (320, 200))
        legacy = self.sb.run_tool_uses(
            [{"type": "tool_use", "id": "toolu_9", "name": "computer",
              "input": {"action": "left_click_drag", "coordinate": [120, 130]}}],
            screenshot=True)
        self.assertEqual(legacy[0]["tool_use_id"], "toolu_9")
        self.assertEqual(legacy[0]["content"][-1]["type"], "image")
        self.assertEqual(self.sb.cursor(), (120, 130))
        self.assertEqual(self.sb.run_tool_uses([{"type": "text", "text": "done"}]), [])
        with self.assertRaises(InvalidActionError) as cm:
            self.sb.run_tool_uses([member(1, "mouse_move", coordinate=[1, 1]),
                                   member(2, "left_click", coordinate=[1, 900])])
        self.assertEqual(cm.exception.field, "[1].input.coordinate[1]")

    # -- typed errors -----------------------------------------------------------------------
    def test_bad_action_errors(self) -> None:
        with self.assertRaises(InvalidActionError) as cm:
            self.sb.left_click(5000, 10)
        e = cm.exception
        self.assertEqual((e.status, e.code, e.field), (400, "invalid_action", "x"))
        self.assertIn("1280x800", e.message)
        self.assertIsInstance(e, BadRequestError)
        self.assertIsInstance(e, DeskboxError)
        with self.assertRaises(InvalidActionError) as cm:
            self.sb.act([{"action": "mouse_move", "coordinate": [1, 1]},
                         {"action": "left_click", "coordinate": [1, 900]}], dialect="anthropic")
        self.assertEqual(cm.exception.field, "actions[1].coordinate[1]")
        with self.assertRaises(InvalidActionError) as cm:
            self.sb.act({"type": "teleport"})
        self.assertEqual(cm.exception.field, "type")
        with self.assertRaises(BadRequestError) as cm:
            self.sb.act({"type": "move", "x": 1, "y": 1}, dialect="klingon")
        self.assertEqual(cm.exception.field, "dialect")

    def test_unknown_sandbox(self) -> None:
        assert server is not None
        with self.assertRaises(NotFoundError) as cm:
            Sandbox.connect("sb-000000000000", server=server.url)
        self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.field),
                         (404, "not_found", "id"))

    def test_bad_create_fields(self) -> None:
        assert server is not None
        with self.assertRaises(BadRequestError) as cm:
            Sandbox.create(template="no-such-template", server=server.url)
        self.assertEqual(cm.exception.field, "template")
        with self.assertRaises(BadRequestError) as cm:
            Sandbox.create(template=TEMPLATE, bogus=1, server=server.url)
        self.assertEqual(cm.exception.field, "bogus")
        with self.assertRaises(BadRequestError) as cm:
            Sandbox.create(resolution=(10, 10), server=server.url)
        self.assertEqual(cm.exception.field, "resolution")

    def test_connection_failure_names_server(self) -> None:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        with self.assertRaises(ConnectionFailedError) as cm:
            Sandbox.list(server=f"http://127.0.0.1:{port}")
        self.assertIn(f"127.0.0.1:{port}", str(cm.exception))
        self.assertEqual(cm.exception.code, "connection_failed")

    # -- commands -----------------------------------------------------------------------------
    def test_commands(self) -> None:
        r = self.sb.commands.run("echo out; echo err >&2; exit 3")
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.timed_out), (3, "out\n", "err\n", False))
        r = self.sb.commands.run(["printf", "%s|", "a b", "c"])
        self.assertEqual(r.stdout, "a b|c|")
        r = self.sb.commands.run("cat; pwd; echo $X", stdin="from stdin\n", cwd="/tmp",
                                 env={"X": "42"})
        self.assertEqual(r.stdout, "from stdin\n/tmp\n42\n")
        r = self.sb.commands.run("sleep 5", timeout=0.5)
        self.assertTrue(r.timed_out)
        self.assertLess(r.duration_ms, 4000)
        with self.assertRaises(deskbox.CommandExitError) as cm:
            self.sb.commands.run("exit 7", check=True)
        self.assertEqual(cm.exception.result.exit_code, 7)
        r = self.sb.commands.run(r"printf '\377\376'")
        self.assertEqual(r.stdout_bytes, b"\xff\xfe")

    def test_exhausted_sandbox_comes_back_with_kill_processes(self) -> None:
        # A sandbox of its own: a fork bomb fills limits.pids, commands are refused with the
        # typed error naming the limit, and kill_processes brings it back.
        if RUNTIME != "container":
            self.skipTest("limits.pids is a container's cgroup limit")
        assert server is not None
        sb = Sandbox.create(template=TEMPLATE, runtime=RUNTIME, network=False,
                            limits={"pids": 64}, server=server.url)
        try:
            sb.commands.run(["bash", "-c", "bomb() { bomb & bomb & wait; }; bomb"],
                            background=True)

            def refused() -> Optional[deskbox.SandboxExhaustedError]:
                try:
                    sb.commands.run("true", timeout=5)
                except deskbox.SandboxExhaustedError as e:
                    return e
                return None

            error = wait_until(refused, 20)
            self.assertIsNotNone(error)
            self.assertEqual(error.field, "limits.pids")
            self.assertIsInstance(error, deskbox.ConflictError)
            swept = sb.kill_processes()
            self.assertGreater(swept["killed"], 5)
            self.assertEqual(sb.commands.run("echo back").stdout, "back\n")
        finally:
            sb.kill()

    def test_background_command(self) -> None:
        bg = self.sb.commands.run("sleep 0.3; echo done > /tmp/bg.txt", background=True)
        self.assertIsInstance(bg, deskbox.BackgroundCommand)
        self.assertGreater(bg.pid, 1)
        self.assertFalse(self.sb.files.exists("/tmp/bg.txt"))
        got = wait_until(lambda: self.sb.files.exists("/tmp/bg.txt")
                         and self.sb.files.read_text("/tmp/bg.txt"), 10)
        self.assertEqual(got, "done\n")

    # -- files ----------------------------------------------------------------------------------
    def test_files_round_trip(self) -> None:
        blob = bytes(range(256)) * 100
        self.assertEqual(self.sb.files.write("/tmp/sdk/dir/blob.bin", blob), len(blob))
        self.assertEqual(self.sb.files.read("/tmp/sdk/dir/blob.bin"), blob)
        self.sb.files.write("/tmp/sdk/hello.txt", "héllo\n", mode=0o600)
        self.assertEqual(self.sb.files.read_text("/tmp/sdk/hello.txt"), "héllo\n")
        entries = {e.name: e for e in self.sb.files.list("/tmp/sdk")}
        self.assertEqual(sorted(entries), ["dir", "hello.txt"])
        self.assertEqual(entries["dir"].type, "dir")
        self.assertEqual((entries["hello.txt"].type, entries["hello.txt"].size,
                          entries["hello.txt"].mode & 0o777), ("file", 7, 0o600))
        r = self.sb.commands.run("cat /tmp/sdk/hello.txt")
        self.assertEqual(r.stdout, "héllo\n")
        with self.assertRaises(ConflictError) as cm:
            self.sb.files.read("/tmp/sdk")
        self.assertEqual(cm.exception.code, "is_a_directory")
        with self.assertRaises(ConflictError) as cm:
            self.sb.files.remove("/tmp/sdk")
        self.assertEqual(cm.exception.code, "not_empty")
        self.sb.files.remove("/tmp/sdk/hello.txt")
        self.assertFalse(self.sb.files.exists("/tmp/sdk/hello.txt"))
        self.sb.files.remove("/tmp/sdk", recursive=True)
        self.assertFalse(self.sb.files.exists("/tmp/sdk"))
        with self.assertRaises(NotFoundError) as cm:
            self.sb.files.read("/tmp/sdk/dir/blob.bin")
        self.assertEqual(cm.exception.field, "path")

    # -- clipboard ----------------------------------------------------------------------------
    def test_clipboard_round_trip(self) -> None:
        self.sb.clipboard.set("clip ✓ 123")
        self.assertEqual(self.sb.clipboard.get(), "clip ✓ 123")
        # Another X client sees it: xterm-independent check through the selection owner.
        self.sb.clipboard.set("second")
        self.assertEqual(self.sb.clipboard.get(), "second")

    # -- lifecycle ------------------------------------------------------------------------------
    def test_pause_resume(self) -> None:
        self.assertEqual(self.sb.pause().state, "paused")
        try:
            self.assertEqual(self.sb.info().state, "paused")
            with self.assertRaises(SandboxPausedError) as cm:
                self.sb.cursor()
            self.assertEqual((cm.exception.status, cm.exception.code), (409, "sandbox_paused"))
            with self.assertRaises(ConflictError) as cm:
                self.sb.pause(snapshot=True)  # containers cannot snapshot
            self.assertEqual(cm.exception.code, "snapshot_unsupported")
        finally:
            self.assertEqual(self.sb.resume().state, "running")
        self.assertEqual(self.sb.commands.run("echo back").stdout, "back\n")

    def test_set_timeout(self) -> None:
        before = self.sb.info().expires_at
        info = self.sb.set_timeout(3600)
        self.assertGreater(info.expires_at, before)
        self.assertEqual(self.sb.info().expires_at, info.expires_at)
        with self.assertRaises(BadRequestError) as cm:
            self.sb.set_timeout(0)
        self.assertEqual(cm.exception.field, "timeout_s")
        self.sb.set_timeout(600)

    def test_recording(self) -> None:
        started = self.sb.recording.start(actions=True, fps=10)
        rec_id = started["recording"]
        self.assertEqual(started["state"], "recording")
        try:
            with self.assertRaises(ConflictError) as cm:
                self.sb.recording.start()
            self.assertEqual(cm.exception.code, "already_recording")
            self.sb.move_mouse(10, 10)
            self.sb.left_click(20, 20)
            time.sleep(0.3)
        finally:
            stopped = self.sb.recording.stop()
        self.assertEqual((stopped["recording"], stopped["state"]), (rec_id, "finished"))
        self.assertGreaterEqual(stopped["frames"], 1)
        video = self.sb.recording.download(rec_id)
        self.assertEqual(video[4:8], b"ftyp")
        self.assertEqual(len(video), stopped["bytes"])
        events = self.sb.recording.download(rec_id, events=True).decode()
        self.assertIn("click", events)

    def test_async_sandbox(self) -> None:
        import asyncio

        from deskbox.aio import AsyncSandbox

        assert server is not None
        url = server.url

        async def main() -> tuple:  # type: ignore[type-arg]
            a = await AsyncSandbox.connect(self.sb.id, server=url)
            try:
                await a.move_mouse(33, 44)
                return await asyncio.gather(a.cursor(), a.commands.run("echo async"),
                                            a.screenshot(scale=0.25), a.files.exists("/etc"))
            finally:
                a.sync.close()

        cursor, result, png, exists = asyncio.run(main())
        self.assertEqual(cursor, (33, 44))
        self.assertEqual(result.stdout, "async\n")
        self.assertEqual(png_size(png), (320, 200))
        self.assertTrue(exists)

    # -- connection reuse -----------------------------------------------------------------------
    def test_keep_alive_and_reconnect(self) -> None:
        self.sb.cursor()
        sock = self.sb._http._conn.sock  # type: ignore[union-attr]
        for _ in range(5):
            self.sb.move_mouse(1, 2)
            self.sb.cursor()
        self.assertIs(self.sb._http._conn.sock, sock)  # type: ignore[union-attr]
        # The connection dies while idle: the next call (a POST too) uses a fresh one.
        sock.shutdown(socket.SHUT_RDWR)
        self.sb.move_mouse(3, 4)
        self.assertEqual(self.sb.cursor(), (3, 4))
        self.assertIsNot(self.sb._http._conn.sock, sock)  # type: ignore[union-attr]


class KillTest(unittest.TestCase):
    def test_context_manager_kills(self) -> None:
        assert server is not None
        with Sandbox.create(template=TEMPLATE, runtime=RUNTIME, network=False,
                            server=server.url) as sb:
            sandbox_id = sb.id
            self.assertEqual(sb.commands.run("echo alive").stdout, "alive\n")
        self.assertNotIn(sandbox_id, [s.id for s in Sandbox.list(server=server.url)])
        with self.assertRaises(NotFoundError):
            Sandbox.connect(sandbox_id, server=server.url)
        with self.assertRaises(NotFoundError):
            sb.cursor()
        self.assertIsNone(sb.kill())  # killing again is fine: nothing to answer


class AuthTest(unittest.TestCase):
    """A second deskboxd with --api-key (no sandbox needed)."""

    keyed: DeskboxdProcess

    @classmethod
    def setUpClass(cls) -> None:
        cls.keyed = DeskboxdProcess(["--api-key", "s3cret-key"])

    @classmethod
    def tearDownClass(cls) -> None:
        cls.keyed.stop()

    def test_wrong_key(self) -> None:
        for key in ("wrong", ""):
            with self.assertRaises(AuthenticationError) as cm:
                Sandbox.list(server=self.keyed.url, api_key=key)
            self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthorized"))
        with self.assertRaises(AuthenticationError):
            Sandbox.connect("sb-000000000000", server=self.keyed.url, api_key="wrong")

    def test_right_key(self) -> None:
        self.assertEqual(Sandbox.list(server=self.keyed.url, api_key="s3cret-key"), [])
        with self.assertRaises(NotFoundError):
            Sandbox.connect("sb-000000000000", server=self.keyed.url, api_key="s3cret-key")

    def test_key_from_environment(self) -> None:
        import os

        os.environ["DESKBOX_API_KEY"] = "s3cret-key"
        try:
            self.assertEqual(Sandbox.list(server=self.keyed.url), [])
        finally:
            del os.environ["DESKBOX_API_KEY"]


if __name__ == "__main__":
    unittest.main()
