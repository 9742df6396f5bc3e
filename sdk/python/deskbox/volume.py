"""Volumes: data that outlives sandboxes and server restarts. Create one, then mount it::

    from deskbox import Sandbox, Volume

    Volume.create("work", size_mb=2048)
    with Sandbox.create(volumes=[{"name": "work", "path": "/data"}]) as sb:
        sb.commands.run("echo kept > /data/note")
    with Sandbox.create(volumes=[Volume.mount("work", "/data", read_only=True)]) as sb:
        ...

One sandbox may mount a volume read-write at a time (a second is a ConflictError); any number
read-only. Its size is a hard quota (writes past it fail with ENOSPC in the sandbox).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from ._http import json_once


@dataclass
class VolumeMount:
    """A sandbox that mounts the volume now."""

    sandbox_id: str
    path: str
    read_only: bool


@dataclass
class VolumeInfo:
    """A volume: its size (MiB, the quota), bytes used, labels, and who mounts it."""

    name: str
    size_mb: int
    used_bytes: int
    created_at: str
    labels: Dict[str, str] = field(default_factory=dict)
    mounts: List[VolumeMount] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "VolumeInfo":
        return cls(name=j.get("name", ""), size_mb=int(j.get("size_mb", 0)),
                   used_bytes=int(j.get("used_bytes", 0)), created_at=j.get("created_at", ""),
                   labels=dict(j.get("labels") or {}),
                   mounts=[VolumeMount(m.get("sandbox_id", ""), m.get("path", ""),
                                       bool(m.get("read_only", False)))
                           for m in j.get("mounts") or []],
                   raw=j)


def _path(name: str) -> str:
    return "/v1/volumes/" + urllib.parse.quote(name, safe="")


class Volume:
    """Volumes on the server (``/v1/volumes``)."""

    @staticmethod
    def mount(name: str, path: str, read_only: bool = False) -> Dict[str, Any]:
        """An entry of ``Sandbox.create(volumes=[...])``."""
        return {"name": name, "path": path, "read_only": read_only}

    @staticmethod
    def create(name: str, size_mb: int = 1024, labels: Optional[Mapping[str, str]] = None,
               server: Optional[str] = None, api_key: Optional[str] = None) -> VolumeInfo:
        """Creates a volume of ``size_mb`` MiB. ConflictError if the name is taken;
        DeskboxError (507) if the host's disk cannot hold it."""
        body: Dict[str, Any] = {"name": name, "size_mb": int(size_mb)}
        if labels:
            body["labels"] = dict(labels)
        return VolumeInfo.from_json(json_once(server, api_key, "POST", "/v1/volumes",
                                              json_body=body))

    @staticmethod
    def list(server: Optional[str] = None, api_key: Optional[str] = None) -> List[VolumeInfo]:
        j = json_once(server, api_key, "GET", "/v1/volumes")
        return [VolumeInfo.from_json(v) for v in j.get("volumes", [])]

    @staticmethod
    def get(name: str, server: Optional[str] = None,
            api_key: Optional[str] = None) -> VolumeInfo:
        """NotFoundError if there is none."""
        return VolumeInfo.from_json(json_once(server, api_key, "GET", _path(name)))

    @staticmethod
    def delete(name: str, server: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes it and its data; ConflictError while a sandbox mounts it."""
        json_once(server, api_key, "DELETE", _path(name))
