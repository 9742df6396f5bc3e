"""examples/claude_computer_use.py and examples/openai_cua.py in replay mode, against a real
deskboxd: each replays its recorded model answers in a fresh sandbox and checks the result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest
from typing import List, Optional

import support
from support import DeskboxdProcess

import deskbox

EXAMPLES = os.path.join(support.REPO, "examples")
server: Optional[DeskboxdProcess] = None


def setUpModule() -> None:
    global server
    server = DeskboxdProcess()


def tearDownModule() -> None:
    if server is not None:
        server.stop()


def run_example(name: str, extra: List[str]) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    assert server is not None
    env = dict(os.environ)
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):  # never call a real model from a test
        env.pop(key, None)
    env["PYTHONPATH"] = support.SDK_DIR
    return subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, name), "--server", server.url, *extra],
        capture_output=True, text=True, timeout=180, env=env,
    )


class ExamplesTest(unittest.TestCase):
    def assert_replay(self, name: str, recording: str, expect_line: str) -> None:
        r = run_example(name, ["--replay", os.path.join(EXAMPLES, "recordings", recording)])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(expect_line, r.stdout)
        self.assertNotIn("rejected", r.stdout)

    def test_claude_replay(self) -> None:
        self.assert_replay("claude_computer_use.py", "claude_computer_use.json",
                           "check /tmp/claude.txt: 'hello from claude\\n' == ")

    def test_openai_replay(self) -> None:
        self.assert_replay("openai_cua.py", "openai_cua.json",
                           "check /tmp/cua.txt: 'hello from cua\\n' == ")

    def test_replay_without_key_is_the_default(self) -> None:
        # No API key and no --replay: the bundled recording is replayed.
        r = run_example("openai_cua.py", [])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("replaying", r.stdout)

    def test_wrong_outcome_fails(self) -> None:
        # The final check is real: a recording that types something else exits 1, and an
        # action the server rejects is counted.
        with open(os.path.join(EXAMPLES, "recordings", "claude_computer_use.json")) as f:
            rec = json.load(f)
        for turn in rec["turns"]:
            for block in turn["content"]:
                if block.get("type") == "tool_use" and block["input"].get("action") == "type":
                    block["input"]["text"] = block["input"]["text"].replace("claude", "someone")
        rec["turns"].insert(1, {"role": "assistant", "type": "message", "stop_reason": "tool_use",
                                "content": [{"type": "tool_use", "id": "toolu_bad",
                                             "name": "computer", "input": {
                                                 "action": "left_click",
                                                 "coordinate": [5000, 10]}}]})
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(rec, f)
        try:
            r = run_example("claude_computer_use.py", ["--replay", f.name])
        finally:
            os.unlink(f.name)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("!= 'hello from claude\\n'", r.stdout)
        self.assertIn("tool error: Error: coordinate[0]", r.stdout)
        self.assertIn("1 recorded action(s) were rejected", r.stdout)

    def test_examples_leave_no_sandbox(self) -> None:
        assert server is not None
        run_example("claude_computer_use.py", [])
        self.assertEqual(deskbox.Sandbox.list(server=server.url), [])


if __name__ == "__main__":
    unittest.main()
