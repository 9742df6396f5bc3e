#!/usr/bin/env python3
"""The Python SDK's per-action overhead: N `move_mouse` through the SDK vs the same raw
http.client POST on a kept-alive connection (and vs http.client sending headers and body in one
write, as the SDK does), interleaved in rounds so drift hits all alike.

    python3 bench/sdk/sdk_overhead.py [--server URL] [-n 300]

Without --server it starts its own deskboxd ($DESKBOXD, default build/server/deskboxd) on a
free port with a temp state dir, and stops it at the end. Bounded: at most --max-seconds.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import time
import urllib.parse
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
sys.path.insert(0, os.path.join(REPO, "sdk", "python", "tests"))

from deskbox import Sandbox  # noqa: E402
from deskbox._http import _Connection  # noqa: E402  (http.client, headers+body in one send)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", help="a running deskboxd (default: start one)")
    ap.add_argument("-n", type=int, default=300, help="actions per side (default 300)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=60.0)
    args = ap.parse_args()

    own = None
    if not args.server:
        from support import DeskboxdProcess

        own = DeskboxdProcess()
        args.server = own.url
    try:
        with Sandbox.create(template="minimal", runtime="container", network=False,
                            server=args.server) as sb:
            u = urllib.parse.urlsplit(args.server)
            raw = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=30)
            raw.connect()
            one = _Connection(u.hostname, u.port or 80, timeout=30)
            one.connect()
            path = f"/v1/sandboxes/{sb.id}/actions"
            headers = {"Content-Type": "application/json"}
            key = os.environ.get("DESKBOX_API_KEY")
            if key:
                headers["Authorization"] = "Bearer " + key

            def raw_move(x: int, y: int, conn: http.client.HTTPConnection = raw) -> None:
                body = json.dumps({"type": "move", "x": x, "y": y}).encode()
                conn.request("POST", path, body, headers)
                r = conn.getresponse()
                r.read()
                if r.status != 200:
                    raise RuntimeError(f"raw POST: HTTP {r.status}")

            per_round = max(1, args.n // args.rounds)
            sdk_ms: List[float] = []
            raw_ms: List[float] = []
            one_ms: List[float] = []
            deadline = time.monotonic() + args.max_seconds
            for i in range(20):  # warm up both paths
                sb.move_mouse(i, i)
                raw_move(i, i)
                raw_move(i, i, one)
            for r in range(args.rounds):
                if time.monotonic() > deadline:
                    print(f"stopped after {r} rounds (--max-seconds)")
                    break
                t0 = time.perf_counter()
                for i in range(per_round):
                    raw_move(i % 1000, (i * 7) % 700)
                t1 = time.perf_counter()
                for i in range(per_round):
                    sb.move_mouse(i % 1000, (i * 7) % 700)
                t2 = time.perf_counter()
                for i in range(per_round):
                    raw_move(i % 1000, (i * 7) % 700, one)
                t3 = time.perf_counter()
                raw_ms.append((t1 - t0) * 1000 / per_round)
                sdk_ms.append((t2 - t1) * 1000 / per_round)
                one_ms.append((t3 - t2) * 1000 / per_round)
            raw.close()
            one.close()
    finally:
        if own is not None:
            own.stop()

    n = per_round * len(sdk_ms)
    s, w, o = statistics.median(sdk_ms), statistics.median(raw_ms), statistics.median(one_ms)
    print(f"move_mouse x{n} ({len(sdk_ms)} rounds of {per_round}, median of rounds)")
    print(f"  raw http.client keep-alive POST: {w:.3f} ms/action")
    print(f"  same, headers+body in one send:  {o:.3f} ms/action (the SDK's transport)")
    print(f"  deskbox SDK sandbox.move_mouse:  {s:.3f} ms/action")
    print(f"  SDK overhead vs raw POST:        {s - w:+.3f} ms/action (goal < 0.3 ms)")
    print(f"  SDK layers alone (vs one-send):  {s - o:+.3f} ms/action")
    return 0


if __name__ == "__main__":
    sys.exit(main())
