#!/usr/bin/env python3
"""Builds a deskbox template's root filesystem with mmdebstrap, content-addressed and cached.

Usage:
  images/build.py TEMPLATE              build if missing; last stdout line is the rootfs path
  images/build.py TEMPLATE --print-path print the rootfs path without building
  images/build.py TEMPLATE --force      rebuild even if the cached rootfs exists
  images/build.py TEMPLATE --prune      also delete older builds of the same template
  images/build.py --check FILE...       validate template definitions only (no root, no network)

TEMPLATE is a folder name under images/templates/ or a path to a folder holding template.json.
The cache is ${DESKBOX_CACHE:-/var/cache/deskbox}: templates/<name>-<hash>/rootfs, where hash
covers the definition, every file it copies in, and this script. Debian packages are kept in
apt-archives/ and hard-linked into each build, so a rebuild downloads only what changed.
Python 3 standard library only: the build machine is a plain Debian 12 with mmdebstrap.
"""

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import template_ready  # unhashed: template_ready.py
IMAGES_DIR = os.path.dirname(os.path.abspath(__file__))
TEMPLATES_DIR = os.path.join(IMAGES_DIR, "templates")
DEFAULT_CACHE = "/var/cache/deskbox"
DEFAULT_SOURCES = "/etc/apt/sources.list.d/debian.sources"
HASH_CHARS = 16

# The runtime contract shared with the agent and the sandbox runtimes (docs/ARCHITECTURE.md).
SESSION_USER = "user"
SESSION_UID = 1000
SESSION_HOME = "/home/user"
AGENT_MOUNT_POINT = "/opt/deskbox"
AGENT_BINARY = "/opt/deskbox/bin/deskbox-agent"
TEMPLATE_RECORD = "/etc/deskbox/template.json"

SUPPORTED_SUITES = ("bookworm",)
SUPPORTED_VARIANTS = ("essential", "apt", "required", "minbase", "important", "standard")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MODE_RE = re.compile(r"^0?[0-7]{3}$")
ENV_SET_BY_AGENT = ("DISPLAY", "HOME", "USER", "LOGNAME")


class TemplateError(Exception):
    """A definition problem: names the file and the field."""

    def __init__(self, file, field, reason):
        self.file, self.field, self.reason = file, field, reason
        where = f"{file}: {field}: " if field else f"{file}: "
        super().__init__(where + reason)


class BuildError(Exception):
    pass


class Interrupted(BaseException):
    pass


# ---------------------------------------------------------------------------------------------
# Schema


def _type_name(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


class _Checker:
    def __init__(self, file):
        self.file = file

    def fail(self, field, reason):
        raise TemplateError(self.file, field, reason)

    def expect(self, value, field, kind):
        # bool is an int in Python; JSON true is never a number here.
        ok = {
            "string": isinstance(value, str),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "array": isinstance(value, list),
            "object": isinstance(value, dict),
            "boolean": isinstance(value, bool),
        }[kind]
        if not ok:
            self.fail(field, f"expected {'an' if kind[0] in 'aeiou' else 'a'} {kind}, got {_type_name(value)}")
        return value

    def string(self, value, field, pattern=None, what=None):
        self.expect(value, field, "string")
        if not value.strip():
            self.fail(field, "must not be empty")
        if pattern is not None and not pattern.match(value):
            self.fail(field, f"{value!r} is not {what}")
        return value

    def integer(self, value, field, low, high):
        self.expect(value, field, "integer")
        if not low <= value <= high:
            self.fail(field, f"{value} is out of range [{low}, {high}]")
        return value

    def fields(self, obj, field, required, optional=()):
        self.expect(obj, field or "(top level)", "object")
        prefix = f"{field}." if field else ""
        allowed = list(required) + list(optional)
        for key in obj:
            if key not in allowed:
                self.fail(prefix + key, f"unknown field (allowed: {', '.join(allowed)})")
        for key in required:
            if key not in obj:
                self.fail(prefix + key, "required field is missing")

    def argv(self, value, field):
        self.expect(value, field, "array")
        if not value:
            self.fail(field, "must not be empty")
        for i, arg in enumerate(value):
            self.expect(arg, f"{field}[{i}]", "string")
        if not value[0]:
            self.fail(f"{field}[0]", "program must not be empty")
        return value


def _reject_duplicate_keys(file):
    def hook(pairs):
        seen = {}
        for key, value in pairs:
            if key in seen:
                raise TemplateError(file, key, "duplicate key")
            seen[key] = value
        return seen

    return hook


def load_template(path):
    """Reads and validates one definition. Returns (definition, folder holding its files)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise TemplateError(path, None, f"cannot read: {e.strerror}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TemplateError(path, None, f"not UTF-8 (byte {e.start})")
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicate_keys(path))
    except json.JSONDecodeError as e:
        raise TemplateError(path, None, f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}")
    folder = os.path.dirname(os.path.abspath(path))
    validate(data, path, folder)
    return data, folder


def validate(t, file, folder):
    c = _Checker(file)
    t = template_ready.without_ready(c, t)  # unhashed: template_ready.py
    c.fields(t, "", ("name", "description", "base", "packages", "session"), ("files", "env", "setup", "security"))

    c.string(t["name"], "name", NAME_RE, "a template name ([a-z0-9-], at most 63 characters)")
    if os.path.basename(file) == "template.json" and t["name"] != os.path.basename(folder):
        c.fail("name", f"{t['name']!r} must match its folder name {os.path.basename(folder)!r}")
    c.string(t["description"], "description")

    c.fields(t["base"], "base", ("suite", "variant"))
    if c.string(t["base"]["suite"], "base.suite") not in SUPPORTED_SUITES:
        c.fail("base.suite", f"{t['base']['suite']!r} is not supported (supported: {', '.join(SUPPORTED_SUITES)})")
    if c.string(t["base"]["variant"], "base.variant") not in SUPPORTED_VARIANTS:
        c.fail("base.variant", f"{t['base']['variant']!r} is not one of {', '.join(SUPPORTED_VARIANTS)}")

    c.expect(t["packages"], "packages", "array")
    seen = set()
    for i, pkg in enumerate(t["packages"]):
        c.string(pkg, f"packages[{i}]", PACKAGE_RE, "a Debian package name")
        if pkg in seen:
            c.fail(f"packages[{i}]", f"{pkg!r} is listed twice")
        seen.add(pkg)

    files = t.get("files", {})
    c.expect(files, "files", "object")
    for dest, spec in files.items():
        field = f"files[{dest!r}]"
        if not dest.startswith("/") or dest.endswith("/") or ".." in dest.split("/") or "//" in dest:
            c.fail(field, "in-image path must be absolute, normalised and name a file")
        if dest.startswith(AGENT_MOUNT_POINT + "/") or dest == AGENT_MOUNT_POINT:
            c.fail(field, f"{AGENT_MOUNT_POINT} is the agent's mount point and must stay empty")
        c.fields(spec, field, ("source", "mode"), ("owner",))
        src = c.string(spec["source"], field + ".source")
        if os.path.isabs(src) or ".." in src.split("/"):
            c.fail(field + ".source", f"{src!r} must be relative to the template folder and stay inside it")
        full = os.path.join(folder, src)
        real_folder = os.path.realpath(folder)
        if not os.path.realpath(full).startswith(real_folder + os.sep):
            c.fail(field + ".source", f"{src!r} resolves outside the template folder")
        if not os.path.isfile(full):
            c.fail(field + ".source", f"{src!r} does not exist (looked for {full})")
        c.string(spec["mode"], field + ".mode", MODE_RE, "an octal mode string such as \"0644\"")
        if "owner" in spec and c.string(spec["owner"], field + ".owner") not in ("root", SESSION_USER):
            c.fail(field + ".owner", f"{spec['owner']!r} is not 'root' or '{SESSION_USER}'")

    env = t.get("env", {})
    c.expect(env, "env", "object")
    for key, value in env.items():
        if not ENV_KEY_RE.match(key):
            c.fail(f"env.{key}", "not a valid environment variable name")
        if key in ENV_SET_BY_AGENT:
            c.fail(f"env.{key}", "is set by the agent for the session and cannot be overridden")
        c.expect(value, f"env.{key}", "string")

    setup = t.get("setup", [])
    c.expect(setup, "setup", "array")
    for i, cmd in enumerate(setup):
        c.string(cmd, f"setup[{i}]")

    s = t["session"]
    s = template_ready.without_session_glx(c, s)  # unhashed: template_ready.py
    c.fields(s, "session", ("window_manager", "autostart", "resolution", "dpi"))
    c.argv(s["window_manager"], "session.window_manager")
    c.expect(s["autostart"], "session.autostart", "array")
    for i, argv in enumerate(s["autostart"]):
        c.argv(argv, f"session.autostart[{i}]")
    res = c.expect(s["resolution"], "session.resolution", "array")
    if len(res) != 2:
        c.fail("session.resolution", f"expected [width, height], got {len(res)} element(s)")
    c.integer(res[0], "session.resolution[0]", 64, 8192)
    c.integer(res[1], "session.resolution[1]", 64, 8192)
    c.integer(s["dpi"], "session.dpi", 24, 480)
    if "security" in t:
        # How the sandbox is confined, read by deskboxd at create (not part of the rootfs).
        c.fields(t["security"], "security", (), ("nested_user_namespaces",))
        if "nested_user_namespaces" in t["security"]:
            c.expect(t["security"]["nested_user_namespaces"], "security.nested_user_namespaces", "boolean")


# ---------------------------------------------------------------------------------------------
# Content address


def template_hash(definition_path, definition, folder):
    h = hashlib.sha256()

    def add(label, data):
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)

    with open(os.path.abspath(__file__), "rb") as f:
        f = template_ready.hashed_source(f)  # unhashed: template_ready.py
        add("build.py", f.read())
    with open(definition_path, "rb") as f:
        add("template.json", f.read())
    for dest in sorted(definition.get("files", {})):
        src = definition["files"][dest]["source"]
        with open(os.path.join(folder, src), "rb") as f:
            add("file:" + src, f.read())
    return h.hexdigest()


def resolve_template(arg):
    if os.sep in arg or arg in (".", ".."):
        path = arg
    else:
        path = os.path.join(TEMPLATES_DIR, arg)
    if os.path.isdir(path):
        path = os.path.join(path, "template.json")
    if not os.path.isfile(path):
        known = sorted(d for d in os.listdir(TEMPLATES_DIR) if os.path.isfile(os.path.join(TEMPLATES_DIR, d, "template.json")))
        raise BuildError(f"no template {arg!r} (known: {', '.join(known)}; or pass a folder holding template.json)")
    return path


# ---------------------------------------------------------------------------------------------
# Filesystem helpers


def log(msg):
    print(f"deskbox-build: {msg}", file=sys.stderr, flush=True)


def mounts_under(path):
    """Mount points at or below path, deepest first (mmdebstrap leaves /proc etc if killed)."""
    real = os.path.realpath(path)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mount_point = line.split()[4].encode().decode("unicode_escape")
            if mount_point == real or mount_point.startswith(real + "/"):
                found.append(mount_point)
    return sorted(found, key=len, reverse=True)


def remove_tree(path):
    """Deletes a build dir without ever descending into something still mounted inside it."""
    if not os.path.lexists(path):
        return
    for mount_point in mounts_under(path):
        subprocess.run(["umount", "--lazy", mount_point], check=False)
    subprocess.run(["rm", "-rf", "--one-file-system", "--", path], check=True)


def dir_size(path):
    out = subprocess.run(["du", "-sx", "--block-size=1", path], check=True, capture_output=True, text=True)
    return int(out.stdout.split()[0])


@contextlib.contextmanager
def file_lock(path, what):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another build of {what} ({path})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# Inside-the-rootfs preparation (run by mmdebstrap as a customize hook, before setup commands)


def _append_line(path, line, mode):
    existing = ""
    if os.path.exists(path):
        with open(path) as f:
            existing = f.read()
    if any(l.split(":", 1)[0] == line.split(":", 1)[0] for l in existing.splitlines()):
        return
    with open(path, "w") as f:
        f.write(existing + ("" if existing.endswith("\n") or not existing else "\n") + line + "\n")
    os.chmod(path, mode)


def prepare_root(root, definition_path, digest):
    """Creates what every sandbox runtime relies on, then copies the template's files in."""
    definition, folder = load_template(definition_path)
    r = lambda p: os.path.join(root, p.lstrip("/"))

    # The session user, written directly so the image needs no passwd package.
    _append_line(r("/etc/group"), f"{SESSION_USER}:x:{SESSION_UID}:", 0o644)
    _append_line(r("/etc/passwd"), f"{SESSION_USER}:x:{SESSION_UID}:{SESSION_UID}:deskbox session:{SESSION_HOME}:/bin/bash", 0o644)
    if os.path.exists(r("/etc/shadow")):
        _append_line(r("/etc/shadow"), f"{SESSION_USER}:*:19000:0:99999:7:::", 0o640)
    if os.path.exists(r("/etc/gshadow")):
        _append_line(r("/etc/gshadow"), f"{SESSION_USER}:!::", 0o640)
    home = r(SESSION_HOME)
    if not os.path.isdir(home):
        shutil.copytree(r("/etc/skel"), home, symlinks=True) if os.path.isdir(r("/etc/skel")) else os.makedirs(home)
    for dirpath, dirnames, filenames in os.walk(home):
        for name in [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]:
            os.lchown(name, SESSION_UID, SESSION_UID)
    os.chmod(home, 0o755)

    os.makedirs(r(AGENT_MOUNT_POINT), exist_ok=True)
    os.chmod(r(AGENT_MOUNT_POINT), 0o755)
    os.makedirs(r("/tmp"), exist_ok=True)
    os.chmod(r("/tmp"), 0o1777)

    for dest, spec in sorted(definition.get("files", {}).items()):
        target = r(dest)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(folder, spec["source"]), target)
        os.chmod(target, int(spec["mode"], 8))
        owner = SESSION_UID if spec.get("owner") == SESSION_USER else 0
        os.chown(target, owner, owner)
        # Parent folders created inside the home belong to the user too.
        parent = os.path.dirname(dest)
        while owner and parent.startswith(SESSION_HOME + "/"):
            os.chown(r(parent), owner, owner)
            parent = os.path.dirname(parent)

    record = {
        "name": definition["name"],
        "description": definition["description"],
        "hash": digest,
        "base": definition["base"],
        "user": {"name": SESSION_USER, "uid": SESSION_UID, "gid": SESSION_UID, "home": SESSION_HOME},
        "agent": AGENT_BINARY,
        "env": definition.get("env", {}),
        "session": definition["session"],
    }
    os.makedirs(r(os.path.dirname(TEMPLATE_RECORD)), exist_ok=True)
    with open(r(TEMPLATE_RECORD), "w") as f:
        json.dump(record, f, indent=2, sort_keys=True)
        f.write("\n")
    os.chmod(r(TEMPLATE_RECORD), 0o644)


# ---------------------------------------------------------------------------------------------
# Build


def temp_prefix(name):
    # "." cannot occur in a name, so ".tmp-desktop." never matches template "desktop-x"'s dirs.
    return f".tmp-{name}."


def cache_paths(cache, name, digest):
    templates = os.path.join(cache, "templates")
    final = os.path.join(templates, f"{name}-{digest[:HASH_CHARS]}")
    return templates, final, os.path.join(final, "rootfs")


def apt_sources():
    path = os.environ.get("DESKBOX_APT_SOURCES", DEFAULT_SOURCES)
    if not os.path.isfile(path):
        raise BuildError(f"apt sources {path} not found (set DESKBOX_APT_SOURCES to a sources file)")
    return path


def mmdebstrap_command(definition, definition_path, digest, tmp_root, apt_cache, scratch):
    q = shlex.quote
    archives = '"$1"/var/cache/apt/archives'
    cmd = [
        "mmdebstrap",
        "--mode=root",
        "--format=directory",
        f"--variant={definition['base']['variant']}",
        "--aptopt=Apt::Install-Recommends \"false\"",
        "--aptopt=Acquire::Languages \"none\"",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/info/*",
        # Sessions run with LANG=C.UTF-8; message catalogs are dead weight in a sandbox.
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        "--dpkgopt=path-include=/usr/share/locale/locale.alias",
        # A template is rebuilt, never repaired: fsync per unpacked file only costs time.
        "--dpkgopt=force-unsafe-io",
        # Directory-symlink merged /usr as debootstrap does it; else apt picks usrmerge + perl.
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        # Keep downloaded .debs around so the customize hook can hand them to the shared cache.
        "--skip=essential/unlink",
        # Hard links: the shared cache and the build dir live on the same filesystem.
        f"--setup-hook=mkdir -p {archives} && find {q(apt_cache)} -maxdepth 1 -name '*.deb' "
        f"-exec cp -al -t {archives}/ {{}} + 2>/dev/null || find {q(apt_cache)} -maxdepth 1 "
        f"-name '*.deb' -exec cp -a -t {archives}/ {{}} +",
        f"--customize-hook=flock {q(apt_cache)} find {archives} -maxdepth 1 -name '*.deb' "
        f"-exec cp -aln -t {q(apt_cache)}/ {{}} + 2>/dev/null || flock {q(apt_cache)} find {archives} "
        f"-maxdepth 1 -name '*.deb' -exec cp -an -t {q(apt_cache)}/ {{}} +",
        f"--customize-hook={q(sys.executable)} {q(os.path.abspath(__file__))} --prepare-root \"$1\" "
        f"{q(os.path.abspath(definition_path))} {q(digest)}",
    ]
    if definition["packages"]:
        cmd.append("--include=" + ",".join(definition["packages"]))
    for i, command in enumerate(definition.get("setup", [])):
        script = os.path.join(scratch, f"setup-{i}.sh")
        with open(script, "w") as f:
            f.write(command + "\n")
        env = (
            "env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "
            f"LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive DESKBOX_USER={SESSION_USER} "
            f"DESKBOX_UID={SESSION_UID} DESKBOX_HOME={SESSION_HOME}"
        )
        marker = f"deskbox-build: setup[{i}] failed"
        cmd.append(
            f"--customize-hook={env} chroot \"$1\" /bin/sh -e < {q(script)} "
            f"|| {{ rc=$?; echo {q(marker)} \"(exit $rc)\" >&2; exit $rc; }}"
        )
    cmd += [definition["base"]["suite"], tmp_root, apt_sources()]
    return cmd


def explain_failure(definition, definition_path, lines):
    for line in lines:
        m = re.search(r"deskbox-build: setup\[(\d+)\] failed \(exit (\d+)\)", line)
        if m:
            i = int(m.group(1))
            return f"{definition_path}: setup[{i}]: command failed with exit {m.group(2)}: {definition['setup'][i]}"
    for line in lines:
        m = re.search(r"E: (?:Unable to locate package\s+|Package '?)([^\s']+)", line)
        if m:
            pkg = m.group(1)
            field = f"packages[{definition['packages'].index(pkg)}]" if pkg in definition["packages"] else "packages"
            return f"{definition_path}: {field}: package {pkg!r} is not available in {definition['base']['suite']}"
    for line in lines:
        if "E: Couldn't find any package by" in line or "has no installation candidate" in line:
            return f"{definition_path}: packages: {line.strip()}"
    tail = "\n  ".join(lines[-15:])
    return f"mmdebstrap failed; last output:\n  {tail}"


def run_logged(cmd):
    """Runs cmd with its output echoed to stderr; returns (exit code, output lines).

    cmd gets its own process group, so an interrupt stops it and everything it started
    (hooks, processes in the chroot) rather than orphaning them."""
    lines = []
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        text=True, errors="replace", start_new_session=True,
    )
    try:
        for line in proc.stdout:
            sys.stderr.write(f"[{time.monotonic() - started:6.1f}s] {line}")
            lines.append(line.rstrip("\n"))
            del lines[:-400]
        return proc.wait(), lines
    finally:
        if proc.poll() is None:
            stop_group(proc)


def stop_group(proc):
    # SIGTERM first so mmdebstrap unmounts what it mounted; SIGKILL what is still there later.
    for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    # The leader may be gone while hooks in its group still run.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def build(definition_path, definition, folder, digest, cache, force):
    name = definition["name"]
    templates, final, rootfs = cache_paths(cache, name, digest)
    apt_cache = os.path.join(cache, "apt-archives")
    os.makedirs(templates, exist_ok=True)
    os.makedirs(apt_cache, exist_ok=True)

    with file_lock(os.path.join(templates, f".lock-{name}"), name):
        # Anything temporary for this name is stale: its builder held this lock and is gone.
        for entry in os.listdir(templates):
            if entry.startswith(temp_prefix(name)):
                log(f"removing stale {entry}")
                remove_tree(os.path.join(templates, entry))
        if os.path.isdir(rootfs) and not force:
            log(f"cache hit: {final}")
            return rootfs
        if shutil.which("mmdebstrap") is None:
            raise BuildError("mmdebstrap is not installed (apt-get install mmdebstrap)")

        tmp = tempfile.mkdtemp(prefix=f"{temp_prefix(name)}{digest[:HASH_CHARS]}.", dir=templates)
        try:
            scratch = os.path.join(tmp, "scratch")
            os.mkdir(scratch)
            tmp_root = os.path.join(tmp, "rootfs")
            cmd = mmdebstrap_command(definition, definition_path, digest, tmp_root, apt_cache, scratch)
            log(f"building {name}-{digest[:HASH_CHARS]} ({len(definition['packages'])} packages)")
            started = time.monotonic()
            rc, lines = run_logged(cmd)
            if rc != 0:
                raise BuildError(explain_failure(definition, definition_path, lines))
            os.chmod(os.path.join(tmp_root, "tmp"), 0o1777)
            with open(os.path.join(tmp_root, "etc/machine-id"), "w"):
                pass  # empty: each sandbox gets its own at start
            shutil.rmtree(scratch)
            seconds = time.monotonic() - started
            size = dir_size(tmp_root)
            meta = {
                "name": name,
                "hash": digest,
                "definition": os.path.abspath(definition_path),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "build_seconds": round(seconds, 1),
                "rootfs_bytes": size,
                "mmdebstrap": subprocess.run(["mmdebstrap", "--version"], capture_output=True, text=True).stdout.strip(),
            }
            os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the rootfs from rootless runtimes
            with open(os.path.join(tmp, "build.json"), "w") as f:
                json.dump(meta, f, indent=2)
                f.write("\n")
            if os.path.isdir(final):  # --force: swap the old one out first, then delete it
                old = tempfile.mkdtemp(prefix=f"{temp_prefix(name)}old.", dir=templates)
                os.rename(final, os.path.join(old, "build"))
                os.rename(tmp, final)
                remove_tree(old)
            else:
                os.rename(tmp, final)
            log(f"built {name} in {seconds:.0f} s, rootfs {size / 2**20:.0f} MiB")
            return rootfs
        finally:
            remove_tree(tmp)


def prune(cache, name, keep_final):
    templates = os.path.join(cache, "templates")
    if not os.path.isdir(templates):
        return
    with file_lock(os.path.join(templates, f".lock-{name}"), name):
        pattern = re.compile(rf"^{re.escape(name)}-[0-9a-f]{{{HASH_CHARS}}}$")
        for entry in sorted(os.listdir(templates)):
            path = os.path.join(templates, entry)
            if pattern.match(entry) and path != keep_final:
                # Renamed first so a half-deleted build never looks complete.
                doomed = tempfile.mkdtemp(prefix=f"{temp_prefix(name)}prune.", dir=templates)
                os.rename(path, os.path.join(doomed, "build"))
                remove_tree(doomed)
                log(f"pruned {entry}")


def resolve_cached(template_arg):
    """A template named on the command line, checked, and where its build lives in the cache:
    (definition_path, definition, folder, digest, cache, final_dir, rootfs)."""
    definition_path = resolve_template(template_arg)
    definition, folder = load_template(definition_path)
    digest = template_hash(definition_path, definition, folder)
    cache = os.path.abspath(os.environ.get("DESKBOX_CACHE", DEFAULT_CACHE))
    _, final, rootfs = cache_paths(cache, definition["name"], digest)
    return definition_path, definition, folder, digest, cache, final, rootfs


def main(argv):
    parser = argparse.ArgumentParser(prog="images/build.py", description=__doc__.split("\n")[0])
    parser.add_argument("template", nargs="?", help="template folder name under images/templates/, or a path")
    parser.add_argument("--print-path", action="store_true", help="print the rootfs path without building")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--prune", action="store_true", help="delete other builds of this template")
    parser.add_argument("--check", nargs="+", metavar="FILE", help="validate definition files and exit")
    parser.add_argument("--prepare-root", nargs=3, metavar=("ROOT", "DEFINITION", "HASH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.prepare_root:
        prepare_root(*args.prepare_root)
        return 0
    if args.check:
        for path in args.check:
            load_template(path)
            print(f"{path}: ok")
        return 0
    if not args.template:
        parser.error("a template is required")
    definition_path, definition, folder, digest, cache, final, rootfs = resolve_cached(args.template)
    if args.print_path:
        if args.prune:
            prune(cache, definition["name"], final)
        print(rootfs)
        return 0
    if os.geteuid() != 0:
        raise BuildError("building needs root (mmdebstrap --mode=root)")
    rootfs = build(definition_path, definition, folder, digest, cache, args.force)
    if args.prune:
        prune(cache, definition["name"], final)
    print(rootfs, flush=True)
    return 0


def _interrupt(signum, frame):
    raise Interrupted()


def run_main(main_function, argv):
    """Runs a builder's main(argv) as a command (this script's and build_microvm.py's): SIGTERM,
    SIGINT and SIGHUP interrupt it cleanly; a bad template exits 2, a failed build 1, an
    interruption 130, each with its message on stderr."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        return main_function(argv)
    except TemplateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Interrupted:
        print("error: interrupted; nothing was left in the cache", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1:]))
