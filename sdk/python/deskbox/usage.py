"""What sandboxes used, from deskboxd's usage ledger (kept after they are gone)::

    from deskbox import metrics, usage

    report = usage(from_="2026-12-01T00:00:00Z", group_by="metadata.customer")
    for group in report["groups"]:
        print(group["key"], group["cpu_seconds"], group.get("cost"))
    samples = metrics(sandbox_id, step=60)["samples"]   # cpu_percent, memory, disk, network

Times are RFC 3339 strings or Unix seconds. The answers are the API's JSON (see the OpenAPI
document's UsageReport and SandboxMetrics); a bad parameter is a BadRequestError naming it.
"""

from __future__ import annotations

import urllib.parse
from typing import Any, Dict, Optional, Union

from ._http import HttpClient, json_once

Time = Union[str, int, float]


def _time(value: Optional[Time]) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    return str(int(value))


def usage(from_: Optional[Time] = None, to: Optional[Time] = None,
          group_by: Optional[str] = None, server: Optional[str] = None,
          api_key: Optional[str] = None) -> Dict[str, Any]:
    """Usage summed over the period (default: everything recorded, up to now), grouped by
    ``"template"``, ``"day"`` or ``"metadata.KEY"``: ``{"groups": [...], "total": {...}}``."""
    query = {"from": _time(from_), "to": _time(to), "group_by": group_by}
    return json_once(server, api_key, "GET", "/v1/usage", query=query)


def usage_csv(from_: Optional[Time] = None, to: Optional[Time] = None,
              group_by: Optional[str] = None, server: Optional[str] = None,
              api_key: Optional[str] = None) -> str:
    """The same as `usage`, as CSV text (a header row and a row per group)."""
    query = {"from": _time(from_), "to": _time(to), "group_by": group_by, "format": "csv"}
    http = HttpClient(server, api_key)
    try:
        return http.request("GET", "/v1/usage", query=query).body.decode()
    finally:
        http.close()


def metrics(sandbox_id: str, from_: Optional[Time] = None, to: Optional[Time] = None,
            step: Optional[int] = None, server: Optional[str] = None,
            api_key: Optional[str] = None) -> Dict[str, Any]:
    """A sandbox's samples, also after it ended (within the server's --metrics-keep-h):
    ``{"state": "running"|"ended", "samples": [{"at", "cpu_percent", ...}]}``."""
    query = {"from": _time(from_), "to": _time(to), "step": step}
    path = "/v1/sandboxes/" + urllib.parse.quote(sandbox_id, safe="") + "/metrics"
    return json_once(server, api_key, "GET", path, query=query)
