"""Secrets: values deskboxd keeps and never shows again, put into a sandbox's requests by the
egress proxy (credential rules), so the sandbox uses a credential without holding it::

    from deskbox import Sandbox, Secret

    Secret.set("gh", "Bearer ghp_...")
    sb = Sandbox.create(network={"allow": ["api.github.com"], "rules": [
        {"domain": "api.github.com", "headers": {"Authorization": "secret:gh"}}]})

``Secret.list()`` gives names and times only: no call returns a value.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ._http import json_once


@dataclass
class SecretInfo:
    """A secret's name and times (never its value)."""

    name: str
    created_at: str = ""
    updated_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "SecretInfo":
        return cls(name=j.get("name", ""), created_at=j.get("created_at", ""),
                   updated_at=j.get("updated_at", ""), raw=j)


class Secret:
    """Secrets on the server (``/v1/secrets``), write-only."""

    @staticmethod
    def set(name: str, value: str, server: Optional[str] = None,
            api_key: Optional[str] = None) -> SecretInfo:
        """Stores ``value`` under ``name`` (replacing one there). BadRequestError for a bad
        name or a value with control characters or over 8192 bytes."""
        return SecretInfo.from_json(json_once(server, api_key, "POST", "/v1/secrets",
                                              json_body={"name": name, "value": value}))

    @staticmethod
    def list(server: Optional[str] = None, api_key: Optional[str] = None) -> List[SecretInfo]:
        j = json_once(server, api_key, "GET", "/v1/secrets")
        return [SecretInfo.from_json(s) for s in j.get("secrets", [])]

    @staticmethod
    def delete(name: str, server: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """NotFoundError if there is none."""
        json_once(server, api_key, "DELETE", "/v1/secrets/" + urllib.parse.quote(name, safe=""))
