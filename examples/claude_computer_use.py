#!/usr/bin/env python3
"""Claude computer use on a deskbox sandbox: a complete agent loop on the Python SDK.

With ANTHROPIC_API_KEY set it talks to the real Anthropic Messages API (tool
``computer_20250124``, beta ``computer-use-2025-01-24``) over urllib. Without a key, or with
``--replay FILE``, it replays a recorded conversation (the model's answers) from
``examples/recordings/claude_computer_use.json`` against a real sandbox. Either way the tool
calls run through ``sandbox.act(tool_use.input, dialect="anthropic")`` and every tool result
carries a fresh PNG screenshot; at the end the sandbox is checked (the typed command must have
written its file) and the exit status says whether it did.

    python3 examples/claude_computer_use.py [--server URL] [--replay FILE] [--task TEXT]
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
    import deskbox
except ImportError:  # running from a checkout without `pip install ./sdk/python`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))
    import deskbox

from deskbox import DeskboxError, Sandbox
from example_support import run_example

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_RECORDING = os.path.join(HERE, "recordings", "claude_computer_use.json")
DEFAULT_TASK = (
    "Click into the terminal window and run: echo hello from claude > /tmp/claude.txt"
)
DEFAULT_EXPECT = {"file": "/tmp/claude.txt", "text": "hello from claude\n"}
API_URL = "https://api.anthropic.com/v1/messages"
MODEL = os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-5")


class AnthropicModel:
    """The real Messages API with the computer-use tool."""

    def __init__(self, api_key: str, width: int, height: int) -> None:
        self.api_key = api_key
        self.tools = [{
            "type": "computer_20250124",
            "name": "computer",
            "display_width_px": width,
            "display_height_px": height,
            "display_number": 1,
        }]

    def next(self, messages: List[Dict[str, Any]]) -> Dict[str, Any]:
        body = {
            "model": MODEL,
            "max_tokens": 1024,
            "system": "You operate a Linux desktop (openbox, xterm). Be brief.",
            "tools": self.tools,
            "messages": messages,
        }
        request = urllib.request.Request(
            API_URL,
            data=json.dumps(body).encode(),
            headers={
                "content-type": "application/json",
                "x-api-key": self.api_key,
                "anthropic-version": "2023-06-01",
                "anthropic-beta": "computer-use-2025-01-24",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            raise SystemExit(f"Anthropic API: HTTP {e.code}: {e.read().decode(errors='replace')}")


class ReplayModel:
    """Answers with the recorded assistant turns, in order."""

    def __init__(self, turns: List[Dict[str, Any]]) -> None:
        self.turns = list(turns)

    def next(self, messages: List[Dict[str, Any]]) -> Dict[str, Any]:
        # The conversation must alternate and answer every tool_use of the last turn.
        last = messages[-1]
        assert last["role"] == "user", "the model is asked after a user turn"
        if len(messages) > 1:
            asked = {c["id"] for c in messages[-2]["content"] if c["type"] == "tool_use"}
            answered = {c["tool_use_id"] for c in last["content"] if c["type"] == "tool_result"}
            assert asked == answered, (asked, answered)
        if not self.turns:
            return {"role": "assistant", "content": [], "stop_reason": "end_turn"}
        return self.turns.pop(0)


def screenshot_block(png_b64: str) -> Dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png_b64}}


def run_tool(sandbox: Sandbox, tool_input: Dict[str, Any]) -> Dict[str, Any]:
    """One computer tool_use → the content of its tool_result (text and/or a screenshot)."""
    try:
        results = sandbox.act(tool_input, dialect="anthropic")
    except DeskboxError as e:
        # The model sees what was wrong (e.g. "coordinate[0]: x=1400 is outside ...").
        return {"content": [{"type": "text", "text": f"Error: {e.message}"}], "is_error": True}
    result = results[0] if results else {}
    content: List[Dict[str, Any]] = []
    if tool_input.get("action") == "cursor_position":
        content.append({"type": "text", "text": f"X={result['x']},Y={result['y']}"})
    if "base64_image" in result:
        content.append(screenshot_block(result["base64_image"]))
    else:
        # Like the reference implementation: show the effect of every action.
        content.append(screenshot_block(base64.b64encode(sandbox.screenshot()).decode()))
    return {"content": content}


def agent_loop(sandbox: Sandbox, model: Any, task: str, max_steps: int) -> int:
    """Runs the conversation until the model stops calling tools; returns how many tool calls
    the sandbox rejected (the model was told each time)."""
    messages: List[Dict[str, Any]] = [{"role": "user", "content": task}]
    failures = 0
    for step in range(max_steps):
        response = model.next(messages)
        content = response.get("content", [])
        messages.append({"role": "assistant", "content": content})
        for block in content:
            if block.get("type") == "text":
                print(f"[{step}] claude: {block['text']}")
        tool_uses = [b for b in content if b.get("type") == "tool_use"]
        if not tool_uses:
            break
        results = []
        for block in tool_uses:
            print(f"[{step}] tool_use {json.dumps(block['input'], ensure_ascii=False)}")
            result = run_tool(sandbox, block["input"])
            if result.get("is_error"):
                failures += 1
                print(f"[{step}] tool error: {result['content'][0]['text']}")
            results.append({"type": "tool_result", "tool_use_id": block["id"], **result})
        messages.append({"role": "user", "content": results})
    return failures


def main() -> int:
    return run_example(
        description="Claude computer use on a deskbox sandbox", key_variable="ANTHROPIC_API_KEY", model_name=MODEL,
        default_recording=DEFAULT_RECORDING, default_task=DEFAULT_TASK,
        default_expect=DEFAULT_EXPECT, max_steps=20, recorded="turns",
        replay_model=ReplayModel, live_model=AnthropicModel, agent_loop=agent_loop)


if __name__ == "__main__":
    sys.exit(main())
