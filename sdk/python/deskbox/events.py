"""Lifecycle events from deskboxd's live stream (``GET /v1/events``, server-sent events).

    from deskbox import events

    for event in events(types=["killed", "error"]):        # from now on, until you break
        print(event.id, event.type, event.sandbox_id, event.data)

    for event in events(after="node-a:120"):                 # resume after an id you saw
        ...

A dropped connection is reopened after the last id seen (``reconnect``), so no event is missed
while the server's durable log still has it. With ``sandbox_id`` and that sandbox's ``token``
only its events come (no API key needed).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, Optional, Union

from ._http import _Connection, resolve_api_key, resolve_server
from .errors import ConnectionFailedError, error_from_response


@dataclass
class Event:
    """One lifecycle event: ``created``, ``ready``, ``paused``, ``resumed``, ``timeout``,
    ``killed``, ``error`` (``data["reason"]``) or ``snapshot_created``. ``id`` is the dedup key,
    unique across a cluster: ``"<node>:<n>"`` in a cluster, ``"<n>"`` on a single server, where
    n grows by one with each event of that node."""

    id: str
    type: str
    time: str
    sandbox_id: str
    template: str
    metadata: Dict[str, str] = field(default_factory=dict)
    data: Dict[str, Any] = field(default_factory=dict)


def events(
    *,
    after: Optional[Union[int, str]] = None,
    types: Optional[Iterable[str]] = None,
    sandbox_id: Optional[str] = None,
    token: Optional[str] = None,
    server: Optional[str] = None,
    api_key: Optional[str] = None,
    reconnect: bool = True,
    read_timeout: Optional[float] = 60.0,
) -> Iterator[Event]:
    """Yields events as they happen (after ``after`` when given: an event's id, or a number of
    the node's log, 0 for everything it kept; else from now on). In a cluster each node streams
    its own events, and only that node resumes after its ids. The server sends a comment every
    15 s, so ``read_timeout`` (seconds) only expires on a dead link."""
    base = resolve_server(server)
    parsed = urllib.parse.urlsplit(base)
    if parsed.scheme != "http" or not parsed.hostname:
        raise ValueError(f"server URL {base!r}: expected http://host:port")
    path = parsed.path.rstrip("/") + (
        f"/v1/sandboxes/{urllib.parse.quote(sandbox_id)}/events" if sandbox_id else "/v1/events")
    query: Dict[str, str] = {}
    if types:
        query["types"] = ",".join(types)
    if token:
        query["token"] = token
    headers = {"Accept": "text/event-stream", "User-Agent": "deskbox-python"}
    key = resolve_api_key(api_key)
    if key:
        headers["Authorization"] = "Bearer " + key
    last = after
    while True:
        q = dict(query)
        if last is not None:
            q["after"] = str(last)
        target = path + ("?" + urllib.parse.urlencode(q) if q else "")
        conn = _Connection(parsed.hostname, parsed.port or 80, timeout=read_timeout)
        try:
            try:
                conn.request("GET", target, headers=headers)
                resp = conn.getresponse()
            except OSError as e:
                if not reconnect or last is None:
                    raise ConnectionFailedError(f"cannot reach deskboxd at {base}: {e}",
                                                code="connection_failed") from None
                time.sleep(1)
                continue
            if resp.status != 200:
                raise error_from_response(resp.status, resp.read(), resp.reason)
            for event in _read_events(resp):
                last = event.id
                yield event
        except OSError:
            pass  # the link broke mid-stream: reopen after the last id
        finally:
            conn.close()
        if not reconnect:
            return


def _read_events(resp: Any) -> Iterator[Event]:
    data = ""
    while True:
        line = resp.fp.readline()
        if not line:
            return
        text = line.decode("utf-8", "replace").rstrip("\r\n")
        if text.startswith("data: "):
            data = text[6:]
        elif text == "" and data:
            j = json.loads(data)
            data = ""
            yield Event(id=str(j["id"]), type=j["type"], time=j["time"], sandbox_id=j["sandbox_id"],
                        template=j["template"], metadata=j.get("metadata") or {},
                        data=j.get("data") or {})
