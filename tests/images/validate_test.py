#!/usr/bin/env python3
"""Fast checks of images/build.py that need no network and no root: the template schema
(every bad/*.json fails with the message in bad/*.expect, naming its file), the shipped
templates pass, and the content address (--print-path) is stable and sensitive to content."""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(REPO, "images", "build.py")
TEMPLATES = os.path.join(REPO, "images", "templates")


def run(*args, cache=None):
    env = dict(os.environ)
    if cache is not None:
        env["DESKBOX_CACHE"] = cache
    return subprocess.run([sys.executable, BUILD, *args], capture_output=True, text=True, env=env, timeout=60)


def print_path(test, template, cache):
    """The rootfs path `build.py TEMPLATE --print-path` gives with this cache."""
    result = run(template, "--print-path", cache=cache)
    test.assertEqual(result.returncode, 0, result.stderr)
    return result.stdout.strip().splitlines()[-1]


class ShippedTemplates(unittest.TestCase):
    def test_every_shipped_template_validates(self):
        paths = sorted(glob.glob(os.path.join(TEMPLATES, "*", "template.json")))
        names = [os.path.basename(os.path.dirname(p)) for p in paths]
        self.assertIn("minimal", names)
        self.assertIn("desktop", names)
        result = run("--check", *paths)
        self.assertEqual(result.returncode, 0, result.stderr)
        for path in paths:
            self.assertIn(f"{path}: ok", result.stdout)

    def test_desktop_keeps_screen_lockers_out(self):
        with open(os.path.join(TEMPLATES, "desktop", "template.json")) as f:
            desktop = json.load(f)
        for pkg in ("xfce4-screensaver", "light-locker", "xscreensaver", "xfce4-power-manager"):
            self.assertNotIn(pkg, desktop["packages"])
        for pkg in ("xfce4", "xfce4-terminal", "mousepad", "thunar", "firefox-esr", "fonts-wqy-microhei"):
            self.assertIn(pkg, desktop["packages"])


class BadDefinitions(unittest.TestCase):
    def test_each_bad_definition_fails_with_its_message(self):
        bad = sorted(glob.glob(os.path.join(HERE, "bad", "*.json")))
        self.assertGreaterEqual(len(bad), 20)
        for path in bad:
            with self.subTest(definition=os.path.basename(path)):
                with open(path[: -len(".json")] + ".expect") as f:
                    expected = f.read().strip()
                result = run("--check", path)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn(expected, result.stderr)
                self.assertIn(path, result.stderr, "the message must name the file")
                self.assertNotIn("Traceback", result.stderr)

    def test_building_a_bad_definition_touches_no_cache(self):
        with tempfile.TemporaryDirectory() as work:
            folder = os.path.join(work, "t")
            os.mkdir(folder)
            shutil.copy(os.path.join(HERE, "bad", "unknown-top-field.json"), os.path.join(folder, "template.json"))
            cache = os.path.join(work, "cache")
            result = run(folder, cache=cache)
            self.assertEqual(result.returncode, 2)
            self.assertIn("pakages: unknown field", result.stderr)
            self.assertFalse(os.path.exists(cache), "a rejected definition must leave nothing behind")

    def test_name_must_match_folder(self):
        with tempfile.TemporaryDirectory() as work:
            folder = os.path.join(work, "other-name")
            shutil.copytree(os.path.join(TEMPLATES, "minimal"), folder)
            result = run("--check", os.path.join(folder, "template.json"))
            self.assertEqual(result.returncode, 2)
            self.assertIn("name: 'minimal' must match its folder name 'other-name'", result.stderr)

    def test_unknown_template_lists_the_known_ones(self):
        result = run("no-such-template", "--print-path")
        self.assertEqual(result.returncode, 1)
        self.assertIn("no template 'no-such-template'", result.stderr)
        self.assertIn("minimal", result.stderr)


class ReadyField(unittest.TestCase):
    """`ready` (when a sandbox counts as ready) is checked by images/template_ready.py, whose
    calls in build.py are left out of build.py's hash: templates without `ready` keep their
    address."""

    def test_a_full_ready_object_validates_and_changes_only_its_own_templates_address(self):
        with tempfile.TemporaryDirectory() as work:
            cache = os.path.join(work, "cache")
            original = print_path(self, "minimal", cache)
            copy = os.path.join(work, "minimal")
            shutil.copytree(os.path.join(TEMPLATES, "minimal"), copy)
            with open(os.path.join(copy, "template.json")) as f:
                definition = json.load(f)
            for ready in ({"windows": "autostart"}, {"windows": 2, "window_title": "xterm", "port": 8000,
                          "command": ["pgrep", "xterm"], "timeout_s": 600, "settle_ms": 0}, {}):
                definition["ready"] = ready
                with open(os.path.join(copy, "template.json"), "w") as f:
                    json.dump(definition, f)
                result = run("--check", os.path.join(copy, "template.json"))
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertNotEqual(print_path(self, copy, cache), original)
            self.assertEqual(print_path(self, "minimal", cache), original)

    def test_only_calls_into_template_ready_are_left_out_of_the_hash(self):
        sys.path.insert(0, os.path.join(REPO, "images"))
        try:
            import template_ready
        finally:
            sys.path.pop(0)
        with open(BUILD, "rb") as f:
            lines = f.read().decode().splitlines()
        marked = [line for line in lines if line.rstrip().endswith(template_ready.UNHASHED_MARK)]
        self.assertEqual(len(marked), 4, marked)
        for line in marked:
            code = line[: line.index("#")].strip()
            self.assertRegex(code, r"^(import template_ready|\S+ = template_ready\.\w+\([\w, ]*\))$")
        with open(BUILD, "rb") as f:
            hashed = template_ready.hashed_source(f).read().decode()
        self.assertNotIn("template_ready", hashed)
        self.assertEqual(len(hashed.splitlines()), len(lines) - len(marked))


class ContentAddress(unittest.TestCase):
    def print_path(self, template, cache):
        return print_path(self, template, cache)

    def test_path_layout_and_stability(self):
        with tempfile.TemporaryDirectory() as cache:
            path = self.print_path("minimal", cache)
            self.assertRegex(path, r"^" + cache + r"/templates/minimal-[0-9a-f]{16}/rootfs$")
            self.assertEqual(path, self.print_path("minimal", cache))
            self.assertFalse(os.path.exists(os.path.dirname(path)), "--print-path must not build")

    def test_same_content_elsewhere_gives_same_hash_and_any_change_a_new_one(self):
        with tempfile.TemporaryDirectory() as work:
            cache = os.path.join(work, "cache")
            original = self.print_path("minimal", cache)
            copy = os.path.join(work, "minimal")
            shutil.copytree(os.path.join(TEMPLATES, "minimal"), copy)
            self.assertEqual(original, self.print_path(copy, cache))

            # A copied-in file is part of the address, not just the definition.
            with open(os.path.join(copy, "files", "Xdefaults"), "a") as f:
                f.write("XTerm*faceSize: 12\n")
            changed_file = self.print_path(copy, cache)
            self.assertNotEqual(original, changed_file)

            with open(os.path.join(copy, "template.json")) as f:
                definition = json.load(f)
            definition["session"]["dpi"] = 120
            with open(os.path.join(copy, "template.json"), "w") as f:
                json.dump(definition, f)
            self.assertNotIn(self.print_path(copy, cache), (original, changed_file))


if __name__ == "__main__":
    unittest.main(verbosity=2)
