"""What both example agent loops share: the command line, the sandbox, waiting for the
desktop, and checking the task's outcome at the end (a replay must reproduce it)."""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, Callable, Dict, Optional

from deskbox import Sandbox


def wait_for_desktop(sandbox: Sandbox, timeout: float = 20.0) -> None:
    """Until the template's autostarted window is mapped (what the model's first screenshot shows)."""
    deadline = time.monotonic() + timeout
    while not sandbox.windows():
        if time.monotonic() > deadline:
            raise SystemExit("the desktop showed no window in time")
        time.sleep(0.1)


def check(sandbox: Sandbox, expect: Dict[str, str]) -> bool:
    """Whether the expected file holds the expected text (the typed command ran)."""
    deadline = time.monotonic() + 5
    got: Optional[str] = None
    while time.monotonic() < deadline:
        r = sandbox.commands.run(["cat", expect["file"]])
        if r.exit_code == 0:
            got = r.stdout
            if got == expect["text"]:
                break
        time.sleep(0.1)
    ok = got == expect["text"]
    print(f"check {expect['file']}: {got!r} {'==' if ok else '!='} {expect['text']!r}")
    return ok


def run_example(*, description: str, key_variable: str, model_name: str, default_recording: str,
                default_task: str, default_expect: Dict[str, str], max_steps: int,
                recorded: str, replay_model: Callable[[Any], Any],
                live_model: Callable[[str, int, int], Any],
                agent_loop: Callable[[Sandbox, Any, str, int], int]) -> int:
    """Runs one agent loop: the real model API when `key_variable` is set, else (or with
    --replay) the recorded conversation; 0 only if the outcome is the expected one."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--server", help="deskboxd URL (default $DESKBOX_SERVER or 127.0.0.1:8700)")
    ap.add_argument("--replay", help="replay this recorded conversation instead of the API")
    ap.add_argument("--task", help="the instruction (real API only)")
    ap.add_argument("--template", default="minimal")
    ap.add_argument("--max-steps", type=int, default=max_steps)
    args = ap.parse_args()

    key = os.environ.get(key_variable)
    replay = args.replay or (None if key else default_recording)
    recording: Dict[str, Any] = {}
    if replay:
        with open(replay) as f:
            recording = json.load(f)
    task = recording.get("task") or args.task or default_task
    # A task of your own has no known outcome to check; the default task (and a replay) has.
    expect: Optional[Dict[str, str]] = recording.get("expect") or (
        None if args.task else default_expect)

    with Sandbox.create(template=args.template, resolution=(1280, 800), network=False,
                        timeout=900, server=args.server) as sandbox:
        print(f"sandbox {sandbox.id}; watch: {sandbox.stream_url()}")
        wait_for_desktop(sandbox)
        width, height = sandbox.screen_size()
        model = replay_model(recording[recorded]) if replay else live_model(key or "", width, height)
        print(("replaying " + replay) if replay else f"model {model_name}")
        failures = agent_loop(sandbox, model, task, args.max_steps)
        ok = expect is None or check(sandbox, expect)
        if replay and failures:
            print(f"{failures} recorded action(s) were rejected by the sandbox")
            ok = False
        return 0 if ok else 1
