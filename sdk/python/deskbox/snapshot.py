"""Named snapshots: a sandbox saved under a name, to start new sandboxes from::

    from deskbox import Sandbox, Snapshot

    with Sandbox.create(template="minimal") as sb:
        sb.commands.run("echo ready > /home/user/state")
        sb.snapshot("warm", metadata={"step": "logged-in"})
    with Sandbox.create(snapshot="warm") as sb:     # template, runtime, size: the snapshot's
        ...
    copies = sb.fork(count=4)                       # or: snapshot and start 4 at once

A microVM's snapshot (kind "memory") holds its memory and disk: processes keep running in a
sandbox started from it. A container's (kind "filesystem") holds the files it wrote: processes
start fresh.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ._http import json_once


@dataclass
class SnapshotInfo:
    """A snapshot: what it holds (``kind``), where it came from, its size and the settings a
    sandbox started from it gets (``resolution``, ``limits``)."""

    name: str
    kind: str
    runtime: str
    template: str
    source_sandbox: str
    created_at: str
    size_bytes: int
    metadata: Dict[str, str] = field(default_factory=dict)
    resolution: Tuple[int, int] = (0, 0)
    limits: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "SnapshotInfo":
        res = j.get("resolution") or [0, 0]
        return cls(name=j.get("name", ""), kind=j.get("kind", ""), runtime=j.get("runtime", ""),
                   template=j.get("template", ""), source_sandbox=j.get("source_sandbox", ""),
                   created_at=j.get("created_at", ""), size_bytes=int(j.get("size_bytes", 0)),
                   metadata=dict(j.get("metadata") or {}), resolution=(int(res[0]), int(res[1])),
                   limits=dict(j.get("limits") or {}), raw=j)


def _path(name: str) -> str:
    return "/v1/snapshots/" + urllib.parse.quote(name, safe="")


class Snapshot:
    """Snapshots on the server (``/v1/snapshots``); take one with `Sandbox.snapshot`."""

    @staticmethod
    def list(server: Optional[str] = None, api_key: Optional[str] = None) -> List[SnapshotInfo]:
        j = json_once(server, api_key, "GET", "/v1/snapshots")
        return [SnapshotInfo.from_json(s) for s in j.get("snapshots", [])]

    @staticmethod
    def get(name: str, server: Optional[str] = None,
            api_key: Optional[str] = None) -> SnapshotInfo:
        """NotFoundError if there is none."""
        return SnapshotInfo.from_json(json_once(server, api_key, "GET", _path(name)))

    @staticmethod
    def delete(name: str, server: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes it; NotFoundError if there is none."""
        json_once(server, api_key, "DELETE", _path(name))
