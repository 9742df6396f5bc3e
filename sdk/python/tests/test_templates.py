"""Templates through the Python SDK against a real deskboxd building with buildah: a small build
FROM deskbox/minimal (a COPY of a file, an ENV) whose sandbox shows both, a failing step, the
async client; and the build context's selection (.dockerignore) without a server."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import tarfile
import tempfile
import unittest
from pathlib import Path
from typing import List, Optional

import support  # noqa: F401  (puts sdk/python on sys.path)
from support import DeskboxdProcess

from deskbox import BadRequestError, NotFoundError, Sandbox, Template, TemplateBuildError
from deskbox._context import IgnorePatterns, list_context, write_context
from deskbox.aio import AsyncSandbox, AsyncTemplate

server: Optional[DeskboxdProcess] = None
HAVE_BUILDAH = shutil.which("buildah") is not None


def setUpModule() -> None:
    global server
    if HAVE_BUILDAH:
        server = DeskboxdProcess()


def tearDownModule() -> None:
    if server is not None:
        server.stop()


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


class ContextSelectionTest(unittest.TestCase):
    """What a build context sends, without a server."""

    def test_dockerignore_patterns_as_docker_reads_them(self) -> None:
        ignore = IgnorePatterns("# comment\n*.log\n/build/\nsecret\n!secret/ok.txt\n**/*.tmp\n"
                                "docs/**\n  spaced  \n./dot/\n")
        cases = {
            "a.log": True, "app/a.log": False,  # '*' does not cross '/'
            "build": True, "build/x.o": True,  # a parent directory's match counts
            "secret/key": True, "secret/ok.txt": False,  # the exception comes later
            "x.tmp": True, "deep/er/x.tmp": True,  # '**' is any number of directories
            "docs": False, "docs/a/b.md": True,  # "docs/**": what is below docs
            "spaced": True, "dot/x": True, "Dockerfile": False,
        }
        for path, excluded in cases.items():
            self.assertEqual(ignore.excluded(path), excluded, path)
        self.assertTrue(ignore.has_exceptions)
        self.assertFalse(IgnorePatterns("").excluded("anything"))

    def test_context_tar_keeps_links_as_links_and_always_sends_the_dockerfile(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            write(d / "Dockerfile", "FROM deskbox/minimal\n")
            write(d / ".dockerignore", "*.log\nbuild\nDockerfile\n")
            write(d / "app" / "main.py", "print('hi')\n")
            write(d / "x.log", "no")
            write(d / "build" / "out", "no")
            os.symlink("/etc/passwd", d / "link")
            entries, files, size = list_context(str(d), IgnorePatterns((d / ".dockerignore").read_text()),
                                                ["Dockerfile", ".dockerignore"])
            self.assertEqual(entries, [".dockerignore", "Dockerfile", "app", "app/main.py", "link"])
            self.assertEqual(files, 3)
            out = io.BytesIO()
            write_context(str(d), entries, out)
            with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
                link = tar.getmember("./link")
                self.assertTrue(link.issym())
                self.assertEqual(link.linkname, "/etc/passwd")
                self.assertEqual(tar.extractfile("./app/main.py").read(), b"print('hi')\n")


@unittest.skipUnless(HAVE_BUILDAH, "buildah is not installed")
class TemplateBuildTest(unittest.TestCase):
    def test_build_from_a_context_then_a_sandbox_of_it(self) -> None:
        assert server is not None
        with tempfile.TemporaryDirectory() as tmp:
            ctx = Path(tmp)
            write(ctx / "Dockerfile", "FROM deskbox/minimal\n"
                                      "COPY hello.txt /etc/sdk-hello.txt\n"
                                      "ENV SDK_TEMPLATE=python\n")
            write(ctx / "hello.txt", "hello from python")
            write(ctx / ".dockerignore", "*.log\n")
            write(ctx / "debug.log", "left out")
            pieces: List[str] = []
            build = Template.build("sdk-py", context=ctx, tag="v1", on_log=pieces.append,
                                   network=False, server=server.url)
        log = "".join(pieces)
        self.assertTrue(build.succeeded, build)
        self.assertEqual(build.template, "sdk-py:v1")
        self.assertEqual(build.steps, 3)
        self.assertIn("STEP 2/3: COPY hello.txt /etc/sdk-hello.txt\n", log)
        self.assertIn("deskbox: template sdk-py:v1 is ready", log)
        self.assertEqual(Template.logs(build.build_id, server=server.url), log)

        listed = {t.template: t for t in Template.list(server=server.url)}
        self.assertEqual(listed["sdk-py:v1"].kind, "user")
        self.assertEqual(listed["minimal"].kind, "shipped")
        self.assertGreater(listed["sdk-py:v1"].bytes or 0, 0)
        self.assertEqual(Template.get("sdk-py:v1", server=server.url).build_id, build.build_id)

        with Sandbox.create(template="sdk-py:v1", network=False, server=server.url) as sb:
            self.assertEqual(sb.info().template, "sdk-py:v1")
            r = sb.commands.run("cat /etc/sdk-hello.txt; echo; printenv SDK_TEMPLATE")
            self.assertEqual(r.stdout, "hello from python\npython\n", r)
        Template.delete("sdk-py:v1", server=server.url)
        with self.assertRaises(NotFoundError):
            Template.get("sdk-py:v1", server=server.url)

    def test_a_failing_step_raises_with_its_step_exit_code_and_log(self) -> None:
        assert server is not None
        with self.assertRaises(TemplateBuildError) as caught:
            Template.build("sdk-py-fail", dockerfile="FROM deskbox/minimal\nRUN echo about to fail\n"
                                                     "RUN exit 3\n",
                           network=False, server=server.url)
        e = caught.exception
        self.assertEqual(e.build.status, "failed")
        self.assertEqual(e.code, "step_failed")
        self.assertEqual((e.step, e.instruction, e.exit_code), (3, "RUN exit 3", 3))
        self.assertIn("about to fail", e.log_tail)
        self.assertIn("failing step: 3/3 RUN exit 3", str(e))
        self.assertIn("exit code: 3", str(e))

    def test_bad_input_is_refused_naming_the_field(self) -> None:
        assert server is not None
        with self.assertRaises(BadRequestError) as caught:
            Template.build("sdk-py-bad", dockerfile="FROM deskbox/minimal\nFROB x\n",
                           server=server.url)
        self.assertEqual(caught.exception.field, "dockerfile")
        self.assertIn("line 2", caught.exception.message)
        with self.assertRaises(BadRequestError) as caught:
            Template.import_archive("sdk-py-bad", b"not a tar", server=server.url)
        self.assertEqual(caught.exception.field, "upload_id")
        # This server allows no registry (deskboxd --template-registry): refused before a pull.
        with self.assertRaises(BadRequestError) as caught:
            Template.import_image("sdk-py-bad", "registry.example:5000/team/app:1",
                                  server=server.url)
        self.assertEqual(caught.exception.field, "image")
        self.assertIn("--template-registry", caught.exception.message)
        with self.assertRaises(ValueError):
            Template.build("sdk-py-bad", server=server.url)  # neither a Dockerfile nor a context

    def test_async_build_with_a_coroutine_callback(self) -> None:
        assert server is not None
        url = server.url

        async def main() -> None:
            pieces: List[str] = []

            async def on_log(text: str) -> None:
                pieces.append(text)

            build = await AsyncTemplate.build(
                "sdk-py-async", dockerfile="FROM deskbox/minimal\nENV SDK_ASYNC=yes\n",
                on_log=on_log, network=False, server=url)
            self.assertTrue(build.succeeded)
            self.assertIn("STEP 2/2: ENV SDK_ASYNC=yes", "".join(pieces))
            names = [t.template for t in await AsyncTemplate.list(server=url)]
            self.assertIn("sdk-py-async:latest", names)
            sb = await AsyncSandbox.create(template="sdk-py-async", network=False, server=url)
            async with sb:
                r = await sb.commands.run("printenv SDK_ASYNC")
                self.assertEqual(r.stdout, "yes\n")
            await AsyncTemplate.delete("sdk-py-async", server=url)

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
