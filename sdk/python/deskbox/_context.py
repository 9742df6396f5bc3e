"""A template's build context: the files of a directory its ``.dockerignore`` does not exclude
(as Docker selects them), written as a tar by `tarfile` (symlinks are stored as links, never
followed, so nothing outside the directory is read). The same rules as the CLI's
(server/cli/build_context.cpp)."""

from __future__ import annotations

import os
import re
import stat
import tarfile
from typing import IO, Iterable, List, Optional, Pattern, Set, Tuple


def _clean(path: str) -> str:
    """Go's filepath.Clean on a '/'-separated path, as Docker cleans a pattern."""
    rooted = path.startswith("/")
    parts: List[str] = []
    for part in path.split("/"):
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not rooted:
                parts.append(part)
        elif part and part != ".":
            parts.append(part)
    out = ("/" if rooted else "") + "/".join(parts)
    return out or "."


def _to_regex(pattern: str) -> str:
    """The regular expression Docker (moby/patternmatcher) makes of a cleaned pattern."""
    out = "^"
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if in_class:
            if c == "]":
                in_class = False
            if c == "\\" and i + 1 < len(pattern):
                out += "\\" + pattern[i + 1]
                i += 2
                continue
            out += c
        elif c == "*":
            if i + 1 < len(pattern) and pattern[i + 1] == "*":
                i += 1
                if i + 1 < len(pattern) and pattern[i + 1] == "/":
                    i += 1  # "**/" is "**"
                out += ".*" if i + 1 == len(pattern) else "(.*/)?"
            else:
                out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "\\":
            if i + 1 < len(pattern):
                out += re.escape(pattern[i + 1])
                i += 1
            else:
                out += "\\\\"
        elif c == "[":
            in_class = True
            out += c
        else:
            out += re.escape(c)
        i += 1
    return out + "$"


class IgnorePatterns:
    """The patterns of a ``.dockerignore`` with Docker's meaning: '#' lines are comments, '!'
    makes an exception, a pattern is cleaned and matched against the whole relative path
    ('*', '?', '[...]', '**'); a path is also excluded when a pattern matches one of its parent
    directories; the last pattern that matches decides."""

    def __init__(self, text: str = "") -> None:
        self.patterns: List[Tuple[Pattern[str], bool]] = []
        if text.startswith("\ufeff"):
            text = text[1:]
        for number, line in enumerate(text.split("\n"), 1):
            if line.startswith("#"):
                continue
            line = line.strip()
            if not line:
                continue
            exception = line.startswith("!")
            if exception:
                line = line[1:].strip()
            if line:
                line = _clean(line)
                if len(line) > 1 and line.startswith("/"):
                    line = line[1:]
            try:
                self.patterns.append((re.compile(_to_regex(line)), exception))
            except re.error:
                raise ValueError(f".dockerignore line {number}: the pattern {line!r} is malformed") from None
        self.has_exceptions = any(exception for _, exception in self.patterns)

    def excluded(self, path: str) -> bool:
        """Whether ``path`` (relative, '/'-separated, no leading "./") is left out."""
        parts = path.split("/")
        parents = ["/".join(parts[:i]) for i in range(1, len(parts))]
        matched = False
        for regex, exception in self.patterns:
            if exception != matched:
                continue
            if regex.match(path) or any(regex.match(p) for p in parents):
                matched = not exception
        return matched


def list_context(directory: str, ignore: IgnorePatterns, always: Iterable[str]) -> Tuple[List[str], int, int]:
    """The relative paths of what is sent (directories, files, links; sorted), how many regular
    files and their bytes. ``always`` (the Dockerfile, .dockerignore) is kept whatever the
    patterns say."""
    kept: Set[str] = set(always)
    entries: List[str] = []
    files = size = 0

    def add(relative: str, full: str) -> None:
        nonlocal files, size
        st = os.lstat(full)
        if stat.S_ISREG(st.st_mode):
            files += 1
            size += st.st_size
        elif not (stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            return  # a socket, FIFO or device
        entries.append(relative)

    def walk_error(error: OSError) -> None:
        raise error

    for root, dirs, names in os.walk(directory, onerror=walk_error):  # links to dirs: not followed
        base = os.path.relpath(root, directory)
        base = "" if base == "." else base.replace(os.sep, "/") + "/"
        for name in list(dirs):
            relative = base + name
            if relative not in kept and ignore.excluded(relative):
                if not ignore.has_exceptions:
                    dirs.remove(name)  # nothing below it can be kept
                continue
            add(relative, os.path.join(root, name))
        for name in names:
            relative = base + name
            if relative in kept or not ignore.excluded(relative):
                add(relative, os.path.join(root, name))
    for relative in kept:
        full = os.path.join(directory, relative)
        if relative not in entries and os.path.lexists(full):
            add(relative, full)
    entries.sort()
    return entries, files, size


def write_context(directory: str, entries: Iterable[str], out: IO[bytes]) -> None:
    """Writes the entries as a tar (relative names "./...", owners as numbers, links as links)."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for relative in entries:
            tar.add(os.path.join(directory, relative), arcname="./" + relative, recursive=False)


def dockerfile_in_context(directory: str, dockerfile: str) -> Optional[str]:
    """The Dockerfile's path inside the context ('/'-separated), or None when it lies outside
    (or is reached through a link): then its text is sent instead."""
    lexical = os.path.relpath(os.path.abspath(dockerfile), os.path.abspath(directory))
    real = os.path.relpath(os.path.realpath(dockerfile), os.path.realpath(directory))
    if lexical != real or lexical == "." or lexical.startswith(".." + os.sep) or lexical == "..":
        return None
    if os.path.islink(dockerfile):
        return None
    return lexical.replace(os.sep, "/")
