#!/usr/bin/env python3
"""Writes the seed corpus of http_api_fuzz into corpus/: one raw HTTP/1.1 request per file,
for every route, with good bodies and the bad ones users send (wrong types, unknown fields,
invalid UTF-8, deep nesting, truncated JSON). "sb-fuzz" stands for the fuzzer's sandbox,
"tok-fuzz" for its control token, "mcp-fuzz" for an open MCP session."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
SB = "/v1/sandboxes/sb-fuzz"
MCP = ("Mcp-Session-Id: mcp-fuzz", "MCP-Protocol-Version: 2025-06-18",
       "Accept: application/json, text/event-stream")


def request(method, target, body=None, headers=()):
    head = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1"]
    head += list(headers)
    data = b""
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        head += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("utf-8", "surrogateescape") + data


SEEDS = {
    "health": request("GET", "/healthz"),
    "metrics": request("GET", "/metrics"),
    "openapi": request("GET", "/v1/openapi.json"),
    "templates": request("GET", "/v1/templates"),
    "list": request("GET", "/v1/sandboxes"),
    "inspect": request("GET", SB),
    "dashboard": request("GET", "/"),
    "create-full": request("POST", "/v1/sandboxes", {
        "template": "fake", "resolution": [800, 600], "timeout_s": 60, "metadata": {"a": "b"},
        "env": {"K": "v"}, "limits": {"memory_mb": 512, "pids": 128},
        "network": {"allow": ["example.test", "*.example.test", "10.0.0.0/8"]}}),
    "create-wrong-types": request("POST", "/v1/sandboxes", {
        "template": 3, "resolution": "big", "timeout_s": -1, "vnc": "yes"}),
    "create-unknown-field": request("POST", "/v1/sandboxes", {"colour": "blue"}),
    "create-truncated": request("POST", "/v1/sandboxes", b'{"template":"fa'),
    "create-bad-utf8": request("POST", "/v1/sandboxes", b'{"template":"f\xffke"}'),
    # Found by the fuzzer: a number beyond a double made nlohmann throw out_of_range (a 500).
    "create-huge-number": request("POST", "/v1/sandboxes", b'{"resolution":[8e22262222,600]}'),
    "create-deep": request("POST", "/v1/sandboxes", b"[" * 80 + b"]" * 80),
    "actions-native": request("POST", SB + "/actions", {"actions": [
        {"type": "move", "x": 10, "y": 10}, {"type": "click", "x": 5, "y": 5, "button": "left"},
        {"type": "type", "text": "hello \u65e5\u672c"}, {"type": "key", "keys": ["ctrl", "c"]},
        {"type": "drag", "path": [[0, 0], [10, 10]]}, {"type": "scroll", "x": 1, "y": 1, "dy": 3}]}),
    "actions-anthropic": request("POST", SB + "/actions?dialect=anthropic",
                                 {"action": "left_click", "coordinate": [400, 300]}),
    "actions-openai": request("POST", SB + "/actions?dialect=openai",
                              {"type": "click", "x": 1, "y": 2, "button": "left"}),
    "actions-offscreen": request("POST", SB + "/actions", {"type": "move", "x": 99999, "y": -4}),
    "actions-bad-utf8": request("POST", SB + "/actions",
                                b'{"actions":[{"type":"type","text":"a\xc3("}]}'),
    "commands": request("POST", SB + "/commands", {"cmd": "echo hi", "timeout_s": 5}),
    "commands-bad-utf8": request("POST", SB + "/commands", b'{"cmd":"echo \xff"}'),
    "timeout": request("POST", SB + "/timeout", {"timeout_s": 120}),
    "timeout-bad-key": request("POST", SB + "/timeout", b'{"timeout_s":1,"\xfe":2}'),
    "screenshot": request("GET", SB + "/screenshot?format=jpeg&quality=50&width=160"),
    "screenshot-unknown-query": request("GET", SB + "/screenshot?scale=0.5"),
    "screenshot-bad-query": request("GET", SB + "/screenshot?format=%FF"),
    "cursor": request("GET", SB + "/cursor"),
    "clipboard-get": request("GET", SB + "/clipboard"),
    "clipboard-set": request("POST", SB + "/clipboard", {"text": "copied"}),
    "files-read": request("GET", SB + "/files?path=/etc/hostname"),
    "files-write": request("PUT", SB + "/files?path=/tmp/a.txt", b"raw bytes \xff"),
    "windows": request("GET", SB + "/windows"),
    "locate-text": request("POST", SB + "/locate", {"text": "Save", "threshold": 0.8}),
    "locate-bad-image": request("POST", SB + "/locate", {"image": "not-base64!!"}),
    "ocr": request("POST", SB + "/ocr", {"region": [0, 0, 100, 50], "lang": "eng"}),
    "compare": request("POST", SB + "/compare", {"baseline": "iVBORw0KGgo=", "mask": [[0, 0, 1, 1]]}),
    "pause": request("POST", SB + "/pause", {}),
    "resume": request("POST", SB + "/resume", {}),
    "processes-kill": request("POST", SB + "/processes/kill", {}),
    "recording": request("POST", SB + "/recording", {"fps": 5}),
    "recordings": request("GET", "/v1/recordings"),
    "ports": request("GET", SB + "/ports"),
    "port-forward": request("GET", SB + "/ports/8080/index.html",
                            headers=("Authorization: Bearer tok-fuzz",)),
    "port-token-redirect": request("GET", SB + "/ports/8080/?token=tok-fuzz"),
    "port-wrong-token": request("GET", SB + "/ports/8080/?token=nope"),
    "stream-no-upgrade": request("GET", SB + "/stream?codec=jpeg&token=tok-fuzz"),
    "stream-bad-fps": request("GET", SB + "/stream?fps=0&token=tok-fuzz"),
    "vnc-upgrade": request("GET", SB + "/vnc?token=tok-fuzz", headers=(
        "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")),
    "stream-upgrade": request("GET", SB + "/stream?token=tok-fuzz", headers=(
        "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")),
    "view": request("GET", "/view/sb-fuzz?token=tok-fuzz"),
    "view-wrong-token": request("GET", "/view/sb-fuzz?token=nope"),
    "header-bad-utf8": request("GET", "/v1/sandboxes", headers=("X-Client: caf\udce9",)),
    "path-bad-utf8": request("GET", "/v1/sandboxes/sb-%FF"),
    "method-not-allowed": request("PATCH", "/v1/sandboxes"),
    "kill": request("DELETE", SB),
    "mcp-initialize": request("POST", "/mcp", {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "fuzz", "version": "1"}}}),
    "mcp-no-session": request("POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    "mcp-tools-list": request("POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                              headers=MCP),
    "mcp-computer": request("POST", "/mcp", {
        "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "computer", "arguments": {"sandbox_id": "sb-fuzz",
                                                      "action": "left_click",
                                                      "coordinate": [10, 10]}}}, headers=MCP),
    "mcp-screenshot": request("POST", "/mcp", {
        "jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "screenshot", "arguments": {"sandbox_id": "sb-fuzz"}}}, headers=MCP),
    "mcp-run-command": request("POST", "/mcp", {
        "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "run_command", "arguments": {"sandbox_id": "sb-fuzz", "command": 7}}},
                               headers=MCP),
    "mcp-create": request("POST", "/mcp", {
        "jsonrpc": "2.0", "id": 6, "method": "tools/call",
        "params": {"name": "create_sandbox", "arguments": {"resolution": [1, 1]}}}, headers=MCP),
    "mcp-unknown-tool": request("POST", "/mcp", {
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "launch_missiles", "arguments": {}}}, headers=MCP),
    "mcp-resources": request("POST", "/mcp", {"jsonrpc": "2.0", "id": 8,
                                              "method": "resources/list"}, headers=MCP),
    # Found by the fuzzer: a header refused before MCP ran got a REST error, not JSON-RPC.
    "mcp-header-bad-utf8": request("POST", "/mcp", {"jsonrpc": "2.0", "id": 9, "method": "ping"},
                                   headers=("Mcp-Session-Id: mcp-fuzz",
                                            "MCP-Protocol-Version: 202\udcff-06-18")),
    "mcp-put": request("PUT", "/mcp", {}),
    "mcp-bad-utf8": request("POST", "/mcp", b'{"jsonrpc":"2.0","id":1,"method":"\xff"}'),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name + ".http"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
