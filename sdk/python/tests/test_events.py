"""Lifecycle events through the Python SDK against a real deskboxd: a sandbox's life read from
the live stream, resumed after an id, filtered by type; one sandbox's token sees its own."""

from __future__ import annotations

import unittest
from typing import List, Optional

import support  # noqa: F401  (puts sdk/python on sys.path)
from support import RUNTIME, TEMPLATE, DeskboxdProcess

from deskbox import BadRequestError, Event, Sandbox, events

server: Optional[DeskboxdProcess] = None


def setUpModule() -> None:
    global server
    server = DeskboxdProcess()


def tearDownModule() -> None:
    if server is not None:
        server.stop()


def first(n: int, stream, sandbox_id: Optional[str] = None) -> List[Event]:
    """The first n events of the stream (of that sandbox: tests share the server)."""
    out = []
    for event in stream:
        if sandbox_id is None or event.sandbox_id == sandbox_id:
            out.append(event)
        if len(out) == n:
            break
    return out


class EventsTest(unittest.TestCase):
    def test_a_sandboxs_life_resumed_and_filtered(self) -> None:
        assert server is not None
        sb = Sandbox.create(template=TEMPLATE, runtime=RUNTIME, server=server.url, network=False,
                            metadata={"customer": "acme"})
        ended = sb.kill()  # the sandbox as it ended, as pause and resume answer it
        assert ended is not None
        self.assertEqual((ended.id, ended.state, ended.metadata),
                         (sb.id, "killed", {"customer": "acme"}))
        life = first(3, events(after=0, server=server.url, read_timeout=20), sb.id)
        self.assertEqual([e.type for e in life], ["created", "ready", "killed"])
        self.assertEqual({e.sandbox_id for e in life}, {sb.id})
        self.assertEqual(life[0].metadata, {"customer": "acme"})
        self.assertEqual(life[0].template, TEMPLATE)
        rest = first(1, events(after=life[0].id, server=server.url, read_timeout=20), sb.id)
        self.assertEqual(rest[0].type, "ready")
        killed = first(1, events(after=0, types=["killed"], server=server.url, read_timeout=20),
                       sb.id)
        self.assertEqual(killed[0].id, life[2].id)
        with self.assertRaises(BadRequestError):
            next(events(types=["exploded"], server=server.url, reconnect=False))

    def test_a_sandbox_token_sees_its_own_events(self) -> None:
        assert server is not None
        sb = Sandbox.create(template=TEMPLATE, runtime=RUNTIME, server=server.url, network=False)
        try:
            token = sb.info().view_token
            own = first(1, events(after=0, sandbox_id=sb.id, token=token,
                                  server=server.url, read_timeout=20))
            self.assertEqual(own[0].sandbox_id, sb.id)
            self.assertEqual(own[0].type, "created")
        finally:
            sb.kill()


if __name__ == "__main__":
    unittest.main()
