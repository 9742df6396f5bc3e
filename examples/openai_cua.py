#!/usr/bin/env python3
"""OpenAI computer-using agent (CUA) on a deskbox sandbox: a complete loop on the Python SDK.

With OPENAI_API_KEY set it talks to the real OpenAI Responses API (tool
``computer_use_preview``, model ``computer-use-preview``) over urllib. Without a key, or with
``--replay FILE``, it replays a recorded session (the model's responses) from
``examples/recordings/openai_cua.json`` against a real sandbox. Either way every
``computer_call`` runs through ``sandbox.act(call.action, dialect="openai")`` and is answered
with a ``computer_call_output`` holding a fresh PNG screenshot; at the end the sandbox is
checked (the typed command must have written its file) and the exit status says whether it did.

    python3 examples/openai_cua.py [--server URL] [--replay FILE] [--task TEXT]
"""

from __future__ import annotations

import base64
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional

try:
    import deskbox  # noqa: F401
except ImportError:  # running from a checkout without `pip install ./sdk/python`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))

from deskbox import DeskboxError, Sandbox
from example_support import run_example

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_RECORDING = os.path.join(HERE, "recordings", "openai_cua.json")
DEFAULT_TASK = "Click into the terminal window and run: echo hello from cua > /tmp/cua.txt"
DEFAULT_EXPECT = {"file": "/tmp/cua.txt", "text": "hello from cua\n"}
API_URL = "https://api.openai.com/v1/responses"
MODEL = os.environ.get("OPENAI_MODEL", "computer-use-preview")


class OpenAIModel:
    """The real Responses API with the computer_use_preview tool (chained by response id)."""

    def __init__(self, api_key: str, width: int, height: int) -> None:
        self.api_key = api_key
        self.tools = [{"type": "computer_use_preview", "display_width": width,
                       "display_height": height, "environment": "linux"}]

    def next(self, previous_id: Optional[str], items: List[Dict[str, Any]]) -> Dict[str, Any]:
        body: Dict[str, Any] = {"model": MODEL, "tools": self.tools, "input": items,
                                "truncation": "auto", "reasoning": {"summary": "concise"}}
        if previous_id:
            body["previous_response_id"] = previous_id
        request = urllib.request.Request(
            API_URL, data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json",
                     "Authorization": "Bearer " + self.api_key},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            raise SystemExit(f"OpenAI API: HTTP {e.code}: {e.read().decode(errors='replace')}")


class ReplayModel:
    """Answers with the recorded responses, in order."""

    def __init__(self, responses: List[Dict[str, Any]]) -> None:
        self.responses = list(responses)
        self.last: Optional[Dict[str, Any]] = None

    def next(self, previous_id: Optional[str], items: List[Dict[str, Any]]) -> Dict[str, Any]:
        # Every computer_call of the previous response must be answered, in a well-formed item.
        if self.last is not None:
            assert previous_id == self.last["id"], (previous_id, self.last["id"])
            calls = {o["call_id"] for o in self.last["output"] if o["type"] == "computer_call"}
            answered = {i["call_id"] for i in items if i["type"] == "computer_call_output"}
            assert calls == answered, (calls, answered)
            for i in items:
                assert i["output"]["type"] == "computer_screenshot"
                assert i["output"]["image_url"].startswith("data:image/png;base64,")
        if not self.responses:
            return {"id": "resp_end", "output": [], "status": "completed"}
        self.last = self.responses.pop(0)
        return self.last


def agent_loop(sandbox: Sandbox, model: Any, task: str, max_steps: int) -> int:
    """Runs the session until a response holds no computer_call; returns how many actions the
    sandbox rejected."""
    items: List[Dict[str, Any]] = [{"role": "user", "content": task}]
    previous_id: Optional[str] = None
    failures = 0
    for step in range(max_steps):
        response = model.next(previous_id, items)
        previous_id = response["id"]
        items = []
        for out in response.get("output", []):
            kind = out.get("type")
            if kind == "reasoning":
                for s in out.get("summary", []):
                    print(f"[{step}] reasoning: {s.get('text', '')}")
            elif kind == "message":
                for c in out.get("content", []):
                    if c.get("type") == "output_text":
                        print(f"[{step}] cua: {c['text']}")
            elif kind == "computer_call":
                action = out["action"]
                print(f"[{step}] computer_call {json.dumps(action)}")
                image = None
                try:
                    results = sandbox.act(action, dialect="openai")
                    if results and "base64_image" in results[0]:
                        image = results[0]["base64_image"]
                except DeskboxError as e:
                    # computer_call_output carries only a screenshot: log and show the screen.
                    failures += 1
                    print(f"[{step}] action failed: {e}")
                if image is None:
                    image = base64.b64encode(sandbox.screenshot()).decode()
                output: Dict[str, Any] = {
                    "type": "computer_call_output",
                    "call_id": out["call_id"],
                    "output": {"type": "computer_screenshot",
                               "image_url": "data:image/png;base64," + image},
                }
                # A real harness would ask a person; this example acknowledges and logs them.
                checks = out.get("pending_safety_checks") or []
                if checks:
                    print(f"[{step}] acknowledging safety checks: {[c.get('code') for c in checks]}")
                    output["acknowledged_safety_checks"] = checks
                items.append(output)
        if not items:
            break
    return failures


def main() -> int:
    return run_example(
        description="OpenAI CUA on a deskbox sandbox", key_variable="OPENAI_API_KEY", model_name=MODEL,
        default_recording=DEFAULT_RECORDING, default_task=DEFAULT_TASK,
        default_expect=DEFAULT_EXPECT, max_steps=30, recorded="responses",
        replay_model=ReplayModel, live_model=OpenAIModel, agent_loop=agent_loop)


if __name__ == "__main__":
    sys.exit(main())
