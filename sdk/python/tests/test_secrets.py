"""Secrets through the Python SDK against a real deskboxd: set, list (names only), replace,
delete; bad input is a BadRequestError. A sandbox's network policy changed live
(``Sandbox.set_network``)."""

from __future__ import annotations

import unittest
from typing import Optional

import support  # noqa: F401  (puts sdk/python on sys.path)
from support import RUNTIME, TEMPLATE, DeskboxdProcess

from deskbox import BadRequestError, NotFoundError, Sandbox, Secret

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

    def test_set_network_live(self) -> None:
        assert server is not None
        sb = Sandbox.create(template=TEMPLATE, runtime=RUNTIME, network={"allow": ["a.test"]},
                            timeout=600, server=server.url)
        try:
            net = sb.set_network(allow=["b.test"], deny=["c.test"], egress_kbps=800)
            self.assertEqual(net["policy"]["allow"], ["b.test"])
            self.assertEqual(net["policy"]["deny"], ["c.test"])
            self.assertEqual(net["egress_kbps"], 800)
            # None takes a part away; the parts not given stay.
            net = sb.set_network(allow=None)
            self.assertEqual(net["policy"]["allow"], "all public addresses")
            self.assertEqual(net["policy"]["deny"], ["c.test"])
            self.assertEqual(sb.info().raw["network"]["policy"]["deny"], ["c.test"])
            with self.assertRaises(BadRequestError) as caught:
                sb.set_network(allow="b.test")
            self.assertEqual(caught.exception.field, "allow")
        finally:
            sb.kill()


if __name__ == "__main__":
    unittest.main()
