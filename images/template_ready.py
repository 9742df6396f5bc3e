"""The `ready` field of a template definition, checked for images/build.py.

A template's optional `ready` object says when a sandbox of it is ready, i.e. when deskboxd
answers its create (docs/ARCHITECTURE.md, "Ready"); deskboxd reads it again with the same rules
(server/sandbox/readiness.cpp). It changes nothing in the root filesystem.

This lives outside build.py for one reason: build.py's own bytes are part of every template's
content hash, so a new line in it would give every template a new address and a rebuild. The
lines build.py needed to call this module end in UNHASHED_MARK, and hashed_source() drops
exactly those lines before build.py hashes itself: the address of a template without `ready`
is what it was before `ready` existed. Only calls into this module may carry the mark
(tests/images/validate_test.py checks it): a marked line that changed how a rootfs is built
would change rootfs without changing its address.
"""

import io

UNHASHED_MARK = "# unhashed: template_ready.py"

FIELDS = ("windows", "window_title", "port", "command", "timeout_s", "settle_ms")
MAX_WINDOWS = 64
MAX_TIMEOUT_S = 600
MAX_SETTLE_MS = 5000


def hashed_source(f):
    """build.py's bytes as its content hash sees them (file object in, file object out): without
    the lines that end in UNHASHED_MARK."""
    mark = UNHASHED_MARK.encode()
    kept = [line for line in f.read().splitlines(keepends=True) if not line.rstrip().endswith(mark)]
    return io.BytesIO(b"".join(kept))


def without_ready(c, t):
    """Checks t["ready"] with build.py's checker `c` (strict: unknown fields and wrong types are
    errors naming the field) and returns the definition without it, for the rest of the checks.
    Anything but an object is returned as it is (build.py says what is wrong with it)."""
    if not isinstance(t, dict) or "ready" not in t:
        return t
    check(c, t["ready"])
    return {k: v for k, v in t.items() if k != "ready"}


def without_session_glx(c, session):
    """Checks session["glx"] (optional bool: false starts Xvfb without GLX, so without Mesa:
    deskboxd passes the agent --no-glx) and returns the session without it. It changes nothing
    in the root filesystem either, and lives here for the same reason as `ready`."""
    if not isinstance(session, dict) or "glx" not in session:
        return session
    c.expect(session["glx"], "session.glx", "boolean")
    return {k: v for k, v in session.items() if k != "glx"}


def check(c, ready):
    c.fields(ready, "ready", (), FIELDS)
    if "windows" in ready:
        windows = ready["windows"]
        if windows != "autostart":
            if isinstance(windows, str):
                c.fail("ready.windows", f"{windows!r} is not \"autostart\" or an integer")
            c.integer(windows, "ready.windows", 0, MAX_WINDOWS)
    if "window_title" in ready:
        c.string(ready["window_title"], "ready.window_title")
    if "port" in ready:
        c.integer(ready["port"], "ready.port", 1, 65535)
    if "command" in ready:
        c.argv(ready["command"], "ready.command")
    if "timeout_s" in ready:
        c.integer(ready["timeout_s"], "ready.timeout_s", 1, MAX_TIMEOUT_S)
    if "settle_ms" in ready:
        c.integer(ready["settle_ms"], "ready.settle_ms", 0, MAX_SETTLE_MS)
