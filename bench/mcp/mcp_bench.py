#!/usr/bin/env python3
"""MCP `computer` click + screenshot round trip vs the same over REST
(POST /actions?dialect=anthropic&screenshot=true), on one kept-alive connection each, against
one container sandbox. Prints ms per round trip for both and the ratio.

    python3 bench/mcp/mcp_bench.py [-n 100] [--server URL]   (default: starts its own deskboxd)
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_server():
    binary = os.environ.get("DESKBOXD", os.path.join(ROOT, "build", "server", "deskboxd"))
    state = tempfile.mkdtemp(prefix="deskbox-mcp-bench-")
    os.chmod(state, 0o711)  # sandboxes' user-namespace roots pass through to the state dir
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--state-dir", state + "/state",
                             "--on-exit", "kill"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    return proc, state, "http://127.0.0.1:" + line.strip().rsplit(":", 1)[1]


class Connection:
    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.http = http.client.HTTPConnection(u.hostname, u.port, timeout=60)

    def post(self, path, body, headers=None):
        data = json.dumps(body).encode()
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        h.update(headers or {})
        self.http.request("POST", path, body=data, headers=h)
        r = self.http.getresponse()
        payload = r.read()
        if r.status >= 300:
            raise SystemExit(f"POST {path}: {r.status} {payload[:200]!r}")
        return r, json.loads(payload) if payload else None


def open_session(mcp, sid):
    """Initializes an MCP session for sandbox `sid`; the headers its requests carry."""
    r, _ = mcp.post("/mcp?sandbox=" + sid, {
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}})
    session = {"Mcp-Session-Id": r.getheader("Mcp-Session-Id"),
               "MCP-Protocol-Version": "2025-11-25"}
    mcp.post("/mcp?sandbox=" + sid, {"jsonrpc": "2.0", "method": "notifications/initialized"},
             session)
    return session


def run_on_a_sandbox(bench):
    """Parses -n and --server, starts a deskboxd unless one is given, makes a container
    sandbox, runs bench(url, rest Connection, sandbox id, n) and cleans up."""
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("--server")
    args = ap.parse_args()
    proc = state = None
    url = args.server
    if not url:
        proc, state, url = start_server()
    try:
        rest = Connection(url)
        _, created = rest.post("/v1/sandboxes", {"network": False})
        sid = created["id"]
        bench(url, rest, sid, args.n)
        rest.http.request("DELETE", f"/v1/sandboxes/{sid}")
        rest.http.getresponse().read()
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            shutil.rmtree(state, ignore_errors=True)


def click_round_trips(url, rest, sid, n):
    mcp = Connection(url)
    session = open_session(mcp, sid)

    def via_rest(i):
        _, a = rest.post(f"/v1/sandboxes/{sid}/actions?dialect=anthropic&screenshot=true",
                         {"action": "left_click", "coordinate": [10 + i % 50, 10]})
        assert a["tool_result"]["content"][0]["source"]["data"]

    def via_mcp(i):
        _, a = mcp.post("/mcp?sandbox=" + sid, {
            "jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
            "params": {"name": "computer",
                       "arguments": {"action": "left_click", "coordinate": [10 + i % 50, 10]}}},
            session)
        assert a["result"]["content"][0]["type"] == "image", a

    times = {"rest": [], "mcp": []}
    deadline = time.monotonic() + 120
    for i in range(n):  # interleaved, so drift hits both alike
        for name, fn in (("rest", via_rest), ("mcp", via_mcp)):
            t = time.perf_counter()
            fn(i)
            times[name].append((time.perf_counter() - t) * 1000)
        if time.monotonic() > deadline:
            break
    rest_ms, mcp_ms = statistics.median(times["rest"]), statistics.median(times["mcp"])
    print(f"click + screenshot round trip, median of {len(times['rest'])}:")
    print(f"  REST /actions?dialect=anthropic&screenshot=true: {rest_ms:7.2f} ms")
    print(f"  MCP tools/call computer left_click:               {mcp_ms:7.2f} ms")
    print(f"  MCP / REST: {mcp_ms / rest_ms:.2f}x ({mcp_ms - rest_ms:+.2f} ms)")


if __name__ == "__main__":
    sys.exit(run_on_a_sandbox(click_round_trips))
