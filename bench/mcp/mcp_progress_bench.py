#!/usr/bin/env python3
"""MCP progress latency: the time from a line printed in the guest to its
notifications/progress at the client (a run_command with _meta.progressToken, answered as
server-sent events), beside the usual alternative without streaming: a background command
writing to a file the client reads every 100 ms (GET /files), as SDKs without output streams
do. Each line carries the guest's clock (CLOCK_REALTIME, which a container shares with the
host), so the latency of every line is measured, not a round trip.

    python3 bench/mcp/mcp_progress_bench.py [-n 100] [--server URL]  (default: its own deskboxd)
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcp_bench import Connection, open_session, run_on_a_sandbox  # noqa: E402

# Prints n lines 50 ms apart, each with the guest's time in ns.
GUEST_LOOP = "for i in $(seq 1 {n}); do echo \"line $i $(date +%s%N)\"; sleep 0.05; done"


def percentiles(samples):
    ordered = sorted(samples)
    return (statistics.median(ordered), ordered[int(len(ordered) * 0.95) - 1], ordered[-1])


def mcp_latencies(url, sid, n):
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    headers.update(open_session(Connection(url), sid))
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "run_command", "_meta": {"progressToken": "bench"},
                       "arguments": {"command": GUEST_LOOP.format(n=n), "timeout_s": 600}}}
    conn.request("POST", "/mcp?sandbox=" + sid, body=json.dumps(body).encode(), headers=headers)
    resp = conn.getresponse()
    assert resp.getheader("Content-Type", "").startswith("text/event-stream"), resp.getheaders()
    latencies = []
    while True:
        line = resp.fp.readline()
        if not line:
            break
        if not line.startswith(b"data: "):
            continue
        now = time.time_ns()
        message = json.loads(line[6:])
        if message.get("method") == "notifications/progress":
            text = message["params"].get("message", "")
            if text.startswith("line "):
                latencies.append((now - int(text.split()[2])) / 1e6)
        elif "result" in message or "error" in message:
            break
    conn.close()
    return latencies


def polling_latencies(url, sid, n):
    rest = Connection(url)
    rest.post(f"/v1/sandboxes/{sid}/commands",
              {"cmd": "rm -f /tmp/bench.out; (" + GUEST_LOOP.format(n=n) + ") > /tmp/bench.out",
               "background": True})
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    seen, latencies = 0, []
    deadline = time.monotonic() + n * 0.05 + 60
    while seen < n and time.monotonic() < deadline:
        conn.request("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/bench.out")
        resp = conn.getresponse()
        data = resp.read()
        now = time.time_ns()
        if resp.status == 200:
            lines = data.decode().splitlines()
            for text in lines[seen:]:
                if text.count(" ") == 2:
                    latencies.append((now - int(text.split()[2])) / 1e6)
                    seen += 1
        time.sleep(0.1)
    conn.close()
    return latencies


def progress_latencies(url, rest, sid, n):
    mcp = mcp_latencies(url, sid, n)
    poll = polling_latencies(url, sid, n)
    m, p = percentiles(mcp), percentiles(poll)
    print(f"lines: {len(mcp)} (MCP progress), {len(poll)} (polling a file every 100 ms)")
    print(f"MCP progress  latency ms: p50 {m[0]:.2f}  p95 {m[1]:.2f}  max {m[2]:.2f}")
    print(f"file polling  latency ms: p50 {p[0]:.2f}  p95 {p[1]:.2f}  max {p[2]:.2f}")
    print(f"ratio (polling / MCP progress), p50: {p[0] / m[0]:.1f}x")


if __name__ == "__main__":
    run_on_a_sandbox(progress_latencies)
