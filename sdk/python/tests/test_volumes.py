"""Volumes through the Python SDK against a real deskboxd: data one sandbox writes is read by
the next; one writer at a time; deleting a mounted volume is refused."""

from __future__ import annotations

import unittest
from typing import Optional

import support  # noqa: F401  (puts sdk/python on sys.path)
from support import RUNTIME, TEMPLATE, DeskboxdProcess

from deskbox import BadRequestError, ConflictError, NotFoundError, Sandbox, Volume

server: Optional[DeskboxdProcess] = None


def setUpModule() -> None:
    global server
    server = DeskboxdProcess()


def tearDownModule() -> None:
    if server is not None:
        server.stop()


class VolumeTest(unittest.TestCase):
    def test_data_outlives_the_sandbox_with_one_writer(self) -> None:
        assert server is not None
        url = server.url
        info = Volume.create("sdk-work", size_mb=32, labels={"suite": "sdk"}, server=url)
        self.assertEqual((info.name, info.size_mb, info.labels), ("sdk-work", 32, {"suite": "sdk"}))
        with self.assertRaises(ConflictError):
            Volume.create("sdk-work", server=url)
        with Sandbox.create(template=TEMPLATE, runtime=RUNTIME, network=False, ready=False,
                            volumes=[Volume.mount("sdk-work", "/data")], server=url) as writer:
            writer.commands.run("echo from-python > /data/note", check=True)
            mounted = Volume.get("sdk-work", server=url).mounts
            self.assertEqual([(m.sandbox_id, m.path, m.read_only) for m in mounted],
                             [(writer.id, "/data", False)])
            with self.assertRaises(ConflictError):
                Sandbox.create(template=TEMPLATE, runtime=RUNTIME, network=False, ready=False,
                               volumes=[Volume.mount("sdk-work", "/data")], server=url)
            with self.assertRaises(ConflictError):
                Volume.delete("sdk-work", server=url)
        with Sandbox.create(template=TEMPLATE, runtime=RUNTIME, network=False, ready=False,
                            volumes=[Volume.mount("sdk-work", "/srv/in", read_only=True)],
                            server=url) as reader:
            self.assertEqual(reader.commands.run("cat /srv/in/note").stdout, "from-python\n")
        self.assertIn("sdk-work", [v.name for v in Volume.list(server=url)])
        Volume.delete("sdk-work", server=url)
        with self.assertRaises(NotFoundError):
            Volume.get("sdk-work", server=url)

    def test_bad_input(self) -> None:
        assert server is not None
        with self.assertRaises(BadRequestError):
            Volume.create("Not Valid", server=server.url)
        with self.assertRaises(NotFoundError):
            Sandbox.create(template=TEMPLATE, runtime=RUNTIME, network=False,
                           volumes=[Volume.mount("never-made", "/data")], server=server.url)


if __name__ == "__main__":
    unittest.main()
