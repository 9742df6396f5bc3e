"""Secrets through the Python SDK against a real deskboxd: set, list (names only), replace,
delete; bad input is a BadRequestError."""

from __future__ import annotations

import unittest
from typing import Optional

import support  # noqa: F401  (puts sdk/python on sys.path)
from support import DeskboxdProcess

from deskbox import BadRequestError, NotFoundError, Secret

server: Optional[DeskboxdProcess] = None


def setUpModule() -> None:
    global server
    server = DeskboxdProcess()


def tearDownModule() -> None:
    if server is not None:
        server.stop()


class SecretTest(unittest.TestCase):
    def test_write_only(self) -> None:
        assert server is not None
        url = server.url
        info = Secret.set("sdk-gh", "Bearer py-value-123", server=url)
        self.assertEqual(info.name, "sdk-gh")
        self.assertNotIn("py-value-123", repr(info.raw))
        Secret.set("sdk-gh", "Bearer py-value-456", server=url)
        listed = Secret.list(server=url)
        self.assertEqual([s.name for s in listed], ["sdk-gh"])
        self.assertNotIn("py-value", repr([s.raw for s in listed]))
        Secret.delete("sdk-gh", server=url)
        with self.assertRaises(NotFoundError):
            Secret.delete("sdk-gh", server=url)

    def test_bad_input(self) -> None:
        assert server is not None
        with self.assertRaises(BadRequestError):
            Secret.set("no/slash", "v", server=server.url)
        with self.assertRaises(BadRequestError):
            Secret.set("ok", "a\nb", server=server.url)
        with self.assertRaises(BadRequestError):
            Secret.set("ok", "v" * 9000, server=server.url)


if __name__ == "__main__":
    unittest.main()
