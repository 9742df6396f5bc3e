"""The SDK's own PEP 517 build backend: builds its wheel and sdist with the standard library.

Why not setuptools: ``pip install ./sdk/python`` offline needs the backend already installed,
and a Python without the ``wheel`` package (pyenv's builds, minimal images) fails with
``invalid command 'bdist_wheel'``. The SDK is pure Python with no dependencies, so its wheel is a
zip of ``deskbox/`` plus three metadata files: this module writes them (PEP 427, 491, 566, 643,
660) for any Python >= 3.9, with nothing to download or install first.

It reads only the simple ``key = "string"`` and ``key = ["a", "b"]`` lines of pyproject.toml's
``[project]`` table (Python 3.9 and 3.10 have no tomllib): a richer form there is an error, not
a guess.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Dict, List, Optional, Tuple, Union

SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "deskbox"
WHEEL_TAG = "py3-none-any"
# Reproducible archives: every entry gets this time (zip cannot go before 1980).
FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
FIXED_TAR_TIME = 315532800

Value = Union[str, List[str]]


class BuildError(Exception):
    """The SDK's tree cannot be built as it is; the message says what to fix."""


def _parse_value(text: str, where: str) -> Value:
    text = text.strip()
    string = re.fullmatch(r'"((?:[^"\\]|\\.)*)"', text)
    if string:
        return string.group(1).encode().decode("unicode_escape")
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip().rstrip(",")
        if not inner:
            return []
        items = [item.strip() for item in inner.split(",")]
        if all(re.fullmatch(r'"[^"\\]*"', item) for item in items):
            return [item[1:-1] for item in items]
    raise BuildError(f"pyproject.toml: {where} = {text}: this backend reads only strings and "
                     "one-line lists of strings in [project]")


def read_project(sdk_dir: str = SDK_DIR) -> Dict[str, Value]:
    """pyproject.toml's [project] table (its simple keys), checked for what a wheel needs."""
    project: Dict[str, Value] = {}
    table = None
    with open(os.path.join(sdk_dir, "pyproject.toml"), encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            header = re.fullmatch(r"\[([^\]]+)\]", line)
            if header:
                table = header.group(1).strip()
                continue
            if table != "project":
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise BuildError(f"pyproject.toml line {number}: expected key = value")
            project[key.strip()] = _parse_value(value, key.strip())
    for key in ("name", "version", "description", "requires-python"):
        if not isinstance(project.get(key), str) or not project[key]:
            raise BuildError(f"pyproject.toml: [project] needs a string '{key}'")
    if project["name"] != PACKAGE:
        raise BuildError(f"pyproject.toml: this backend builds '{PACKAGE}', not {project['name']}")
    init = os.path.join(sdk_dir, PACKAGE, "__init__.py")
    with open(init, encoding="utf-8") as f:
        found = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not found or found.group(1) != project["version"]:
        raise BuildError(f"{PACKAGE}/__init__.py's __version__ "
                         f"({found.group(1) if found else 'missing'}) differs from "
                         f"pyproject.toml's version ({project['version']})")
    return project


def _metadata(project: Dict[str, Value], sdk_dir: str) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"Requires-Python: {project['requires-python']}",
    ]
    dependencies = project.get("dependencies", [])
    for requirement in dependencies if isinstance(dependencies, list) else [dependencies]:
        lines.append(f"Requires-Dist: {requirement}")
    readme = project.get("readme")
    body = ""
    if isinstance(readme, str) and readme:
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(sdk_dir, readme), encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _package_files(sdk_dir: str) -> List[Tuple[str, str]]:
    """(path in the archive, path on disk) of the package's files, sorted; no caches."""
    files = []
    root = os.path.join(sdk_dir, PACKAGE)
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(directory, name)
            files.append((os.path.relpath(path, sdk_dir).replace(os.sep, "/"), path))
    return files


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def _write_wheel(directory: str, contents: List[Tuple[str, bytes]], sdk_dir: str) -> str:
    project = read_project(sdk_dir)
    dist_info = f"{PACKAGE}-{project['version']}.dist-info"
    wheel_meta = ("Wheel-Version: 1.0\nGenerator: deskbox_build\nRoot-Is-Purelib: true\n"
                  f"Tag: {WHEEL_TAG}\n")
    entries = list(contents) + [
        (f"{dist_info}/METADATA", _metadata(project, sdk_dir).encode("utf-8")),
        (f"{dist_info}/WHEEL", wheel_meta.encode()),
    ]
    record = [_record_line(name, data) for name, data in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    filename = f"{PACKAGE}-{project['version']}-{WHEEL_TAG}.whl"
    path = os.path.join(directory, filename)
    with zipfile.ZipFile(path + ".part", "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, FIXED_ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    os.replace(path + ".part", path)
    return filename


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ---- PEP 517 / PEP 660 hooks ----

def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[dict] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    contents = [(arcname, _read(path)) for arcname, path in _package_files(SDK_DIR)]
    return _write_wheel(wheel_directory, contents, SDK_DIR)


def build_editable(wheel_directory: str, config_settings: Optional[dict] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """A wheel whose .pth file puts this checkout on sys.path (``pip install -e``)."""
    pth = (SDK_DIR + "\n").encode()
    return _write_wheel(wheel_directory, [(f"__editable__.{PACKAGE}.pth", pth)], SDK_DIR)


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    project = read_project(SDK_DIR)
    base = f"{PACKAGE}-{project['version']}"
    members = [("pyproject.toml", os.path.join(SDK_DIR, "pyproject.toml")),
               ("README.md", os.path.join(SDK_DIR, "README.md"))]
    members += _package_files(SDK_DIR)
    backend = os.path.abspath(__file__)
    members.append((f"_build_backend/{os.path.basename(backend)}", backend))
    pkg_info = _metadata(project, SDK_DIR).encode("utf-8")
    filename = f"{base}.tar.gz"
    path = os.path.join(sdist_directory, filename)

    def add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(f"{base}/{name}")
        info.size = len(data)
        info.mtime = FIXED_TAR_TIME
        info.mode = 0o644
        archive.addfile(info, io.BytesIO(data))

    with tarfile.open(path + ".part", "w:gz", format=tarfile.PAX_FORMAT) as archive:
        for name, source in members:
            add(archive, name, _read(source))
        add(archive, "PKG-INFO", pkg_info)
    os.replace(path + ".part", path)
    return filename
