"""Snapshots, fork and auto-resume through the Python SDK against a real deskboxd: a sandbox
started from a snapshot has the files its source wrote and the source's settings; a fork's
copies too; a sandbox its timeout paused resumes for the next command."""

from __future__ import annotations

import time
import unittest
from typing import List, Optional

import support  # noqa: F401  (puts sdk/python on sys.path)
from support import RUNTIME, TEMPLATE, DeskboxdProcess

from deskbox import BadRequestError, ConflictError, NotFoundError, Sandbox, Snapshot

server: Optional[DeskboxdProcess] = None


def setUpModule() -> None:
    global server
    server = DeskboxdProcess()


def tearDownModule() -> None:
    if server is not None:
        server.stop()


def create(**options: object) -> Sandbox:
    assert server is not None
    return Sandbox.create(network=False, ready=False, server=server.url, **options)


class SnapshotTest(unittest.TestCase):
    def test_a_sandbox_starts_from_a_snapshot(self) -> None:
        assert server is not None
        url = server.url
        with create(template=TEMPLATE, runtime=RUNTIME, resolution=(1024, 768)) as source:
            source.commands.run("echo from-python > /home/user/note", check=True)
            info = source.snapshot("sdk-snap", metadata={"suite": "sdk"})
            self.assertEqual((info.name, info.kind, info.runtime, info.template,
                              info.source_sandbox, info.metadata, info.resolution),
                             ("sdk-snap", "filesystem", RUNTIME, TEMPLATE, source.id,
                              {"suite": "sdk"}, (1024, 768)))
            self.assertTrue(info.created_at.endswith("Z"))
            with self.assertRaises(ConflictError):
                source.snapshot("sdk-snap")
        self.assertEqual(Snapshot.get("sdk-snap", server=url).source_sandbox, info.source_sandbox)
        self.assertIn("sdk-snap", [s.name for s in Snapshot.list(server=url)])
        with create(snapshot="sdk-snap") as copy:
            self.assertEqual(copy.commands.run("cat /home/user/note").stdout, "from-python\n")
            described = copy.info()
            self.assertEqual((described.snapshot_name, described.template, described.resolution),
                             ("sdk-snap", TEMPLATE, (1024, 768)))
        with self.assertRaises(BadRequestError):
            create(snapshot="sdk-snap", resolution=(800, 600))
        Snapshot.delete("sdk-snap", server=url)
        with self.assertRaises(NotFoundError):
            Snapshot.get("sdk-snap", server=url)
        with self.assertRaises(NotFoundError):
            Snapshot.delete("sdk-snap", server=url)

    def test_fork_starts_copies(self) -> None:
        with create(template=TEMPLATE, runtime=RUNTIME) as source:
            source.commands.run("echo before-fork > /home/user/note", check=True)
            forks: List[Sandbox] = []
            try:
                forks = source.fork(count=2, metadata={"role": "fork"})
                self.assertEqual(len(forks), 2)
                self.assertEqual(len({f.id for f in forks} | {source.id}), 3)
                for f in forks:
                    self.assertEqual(f.commands.run("cat /home/user/note").stdout, "before-fork\n")
                    self.assertEqual(f.info().metadata, {"role": "fork"})
                # Each copy is its own: a write in one is not in the other nor in the source.
                forks[0].commands.run("echo changed > /home/user/note", check=True)
                self.assertEqual(forks[1].commands.run("cat /home/user/note").stdout,
                                 "before-fork\n")
                self.assertEqual(source.commands.run("cat /home/user/note").stdout,
                                 "before-fork\n")
            finally:
                for f in forks:
                    f.kill()
            with self.assertRaises(BadRequestError):
                source.fork(count=0)
            with self.assertRaises(BadRequestError):
                source.fork(count=17)

    def test_auto_resume_after_the_timeout(self) -> None:
        assert server is not None
        with create(template=TEMPLATE, runtime=RUNTIME, timeout=1, auto_resume=True) as sb:
            described = sb.info()
            self.assertEqual((described.raw["on_timeout"], described.auto_resume), ("pause", True))
            # Sandbox.list never resumes one: wait there for the timeout's pause.
            deadline = time.monotonic() + 30
            listed = None
            while time.monotonic() < deadline:
                listed = next(s for s in Sandbox.list(server=server.url) if s.id == sb.id)
                if listed.state == "paused":
                    break
                time.sleep(0.2)
            assert listed is not None
            self.assertEqual((listed.state, listed.paused_reason), ("paused", "timeout"))
            self.assertEqual(sb.commands.run("echo awake").stdout, "awake\n")

    def test_bad_input(self) -> None:
        with self.assertRaises(NotFoundError):
            create(snapshot="never-made")
        with self.assertRaises(BadRequestError):
            create(template=TEMPLATE, runtime=RUNTIME, auto_resume=True, on_timeout="kill")
        with create(template=TEMPLATE, runtime=RUNTIME) as sb:
            with self.assertRaises(BadRequestError):
                sb.snapshot("Not Valid")


if __name__ == "__main__":
    unittest.main()
