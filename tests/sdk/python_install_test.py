"""`pip install ./sdk/python` offline, from a clean virtual environment of each Python >= 3.9
this machine has (Debian's python3 always; pyenv's and other python3.X on PATH when present),
with no build isolation and no index: the SDK's in-tree backend must build it with nothing
else installed (no setuptools, no wheel). The installed copy then talks to a real deskboxd.

Run by ctest as sdk.python_install (DESKBOXD names the server binary).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SDK_DIR = os.path.join(REPO, "sdk", "python")
sys.path.insert(0, os.path.join(SDK_DIR, "tests"))
from support import DeskboxdProcess  # noqa: E402

DEBIAN_PYTHON = "/usr/bin/python3"
MINIMUM = (3, 9)

# What the installed SDK runs: its version, where it was imported from, a call to the server.
PROBE = """
import json, sys, deskbox
from deskbox import Sandbox
print(json.dumps({"version": deskbox.__version__, "file": deskbox.__file__,
                  "sandboxes": [s.id for s in Sandbox.list(server=sys.argv[1])]}))
"""


def identify(python: str) -> Tuple[tuple, str]:
    """Its (major, minor) and the interpreter it really is (a pyenv shim names another)."""
    out = subprocess.run(
        [python, "-c", "import os, sys; print(*sys.version_info[:2], "
                       "os.path.realpath(sys.executable))"],
        capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return (), ""
    major, minor, executable = out.stdout.split(maxsplit=2)
    return (int(major), int(minor)), executable.strip()


def pythons() -> Dict[str, str]:
    """Each distinct interpreter >= 3.9 found, by its real path, labelled."""
    found: Dict[str, str] = {}
    candidates: List[str] = [DEBIAN_PYTHON]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/*/bin/python3")))
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidates += sorted(glob.glob(os.path.join(directory, "python3.[0-9]*")))
    for candidate in candidates:
        if candidate.endswith("-config") or not os.access(candidate, os.X_OK):
            continue
        version, real = identify(candidate)
        if version and version >= MINIMUM and real not in found:
            found[real] = candidate
    return found


def the_project_version() -> str:
    with open(os.path.join(SDK_DIR, "deskbox", "__init__.py"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split('"')[1]
    raise AssertionError("no __version__ in deskbox/__init__.py")


def tree_files(root: str) -> List[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root)
                  for d, _, names in os.walk(root) for n in names if "__pycache__" not in d)


class OfflineInstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.server = DeskboxdProcess()
        cls.version = the_project_version()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def setUp(self) -> None:
        self.work = tempfile.mkdtemp(prefix="deskbox-sdk-install-")
        self.addCleanup(shutil.rmtree, self.work)

    def venv(self, python: str) -> str:
        """A fresh virtual environment (with pip, as `python -m venv` makes it); its python."""
        env_dir = os.path.join(self.work, "venv-" + str(len(os.listdir(self.work))))
        made = subprocess.run([python, "-m", "venv", env_dir], capture_output=True, text=True,
                              timeout=300)
        self.assertEqual(made.returncode, 0, f"{python} -m venv: {made.stderr}")
        return os.path.join(env_dir, "bin", "python")

    def pip_install(self, venv_python: str, what: str) -> None:
        installed = subprocess.run(
            [venv_python, "-m", "pip", "install", "--no-index", "--no-build-isolation",
             "--disable-pip-version-check", "--no-cache-dir", what],
            capture_output=True, text=True, timeout=300, cwd=self.work)
        self.assertEqual(installed.returncode, 0,
                         f"pip install {what}:\n{installed.stdout}\n{installed.stderr}")

    def probe(self, venv_python: str) -> dict:
        import json

        ran = subprocess.run([venv_python, "-c", PROBE, self.server.url], capture_output=True,
                             text=True, timeout=120, cwd=self.work)
        self.assertEqual(ran.returncode, 0, ran.stderr)
        return json.loads(ran.stdout)

    def test_debian_python_is_among_those_tried(self) -> None:
        self.assertIn(DEBIAN_PYTHON, pythons().values(),
                      "Debian's python3 (>= 3.9) is what CI has everywhere")

    def test_every_python_installs_the_sdk_offline_and_it_reaches_the_server(self) -> None:
        found = pythons()
        print(f"pythons tried: {sorted(found.values())}", file=sys.stderr)
        before = tree_files(SDK_DIR)
        for python in found.values():
            with self.subTest(python=python):
                venv_python = self.venv(python)
                self.pip_install(venv_python, SDK_DIR)
                answer = self.probe(venv_python)
                self.assertEqual(answer["version"], self.version)
                # The installed copy, not the checkout (the probe runs outside it).
                self.assertTrue(answer["file"].startswith(os.path.dirname(
                    os.path.dirname(venv_python))), answer["file"])
                self.assertEqual(answer["sandboxes"], [])
        # Building wrote nothing into the checkout (no build/, no *.egg-info).
        self.assertEqual(tree_files(SDK_DIR), before)

    def build(self, hook: str) -> str:
        """Runs the backend's PEP 517 `hook` into the work dir; the file it wrote."""
        built = subprocess.run(
            [DEBIAN_PYTHON, "-c",
             "import sys; sys.path.insert(0, sys.argv[1]); import deskbox_build; "
             f"print(deskbox_build.{hook}(sys.argv[2]))",
             os.path.join(SDK_DIR, "_build_backend"), self.work],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(built.returncode, 0, built.stderr)
        return built.stdout.strip()

    def test_the_sdist_carries_its_backend_and_installs_offline(self) -> None:
        sdist = os.path.join(self.work, self.build("build_sdist"))
        with tarfile.open(sdist) as archive:
            names = archive.getnames()
        base = f"deskbox-{self.version}/"
        for needed in ("pyproject.toml", "PKG-INFO", "deskbox/__init__.py", "deskbox/py.typed",
                       "_build_backend/deskbox_build.py"):
            self.assertIn(base + needed, names)
        venv_python = self.venv(DEBIAN_PYTHON)
        self.pip_install(venv_python, sdist)
        self.assertEqual(self.probe(venv_python)["version"], self.version)

    def test_the_wheel_records_every_file_it_holds(self) -> None:
        import zipfile

        name = self.build("build_wheel")
        self.assertEqual(name, f"deskbox-{self.version}-py3-none-any.whl")
        with zipfile.ZipFile(os.path.join(self.work, name)) as wheel:
            names = set(wheel.namelist())
            record = wheel.read(f"deskbox-{self.version}.dist-info/RECORD").decode()
        recorded = {line.split(",")[0] for line in record.splitlines() if line}
        self.assertEqual(recorded, names)
        self.assertIn("deskbox/py.typed", names)


if __name__ == "__main__":
    unittest.main(verbosity=2)
