#!/usr/bin/env python3
"""Fast checks of images/build_microvm.py that need no network and no root: the initramfs's
cpio writer (read back by an independent reader, busybox or GNU cpio), kernel module load
order from .modinfo dependencies, the content address, and --print-path. The boot itself is
tested by tests/server/microvm_test.cpp against real QEMU."""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(REPO, "images", "build_microvm.py")

# Run as a script, build_microvm.py finds build.py beside it on sys.path; imported, it needs
# the same.
sys.path.insert(0, os.path.dirname(SCRIPT))
spec = importlib.util.spec_from_file_location("build_microvm", SCRIPT)
build_microvm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_microvm)


def cpio_lister():
    # GNU cpio (scripts/setup.sh installs it): busybox's listing has no device numbers.
    return ["cpio", "-itv", "--quiet"] if shutil.which("cpio") else None


class CpioWriter(unittest.TestCase):
    def test_an_independent_cpio_reads_what_we_write(self):
        archive = build_microvm.Cpio()
        archive.file("bin/busybox", b"\x7fELF" + b"x" * 1001, 0o755)  # odd size: padding
        archive.symlink("bin/sh", "busybox")
        archive.char_device("dev/console", 5, 1, 0o600)
        archive.file("lib/modules/6.1.0/kernel/drivers/virtio/virtio.ko", b"ko", 0o644)
        data = archive.bytes()
        self.assertEqual(len(data) % 4, 0)
        self.assertTrue(data.startswith(b"070701"))
        lister = cpio_lister()
        if lister is None:
            self.fail("GNU cpio is not installed: scripts/setup.sh installs it (package cpio)")
        out = subprocess.run(lister, input=data, capture_output=True, check=True).stdout.decode()
        lines = out.splitlines()
        names = [line.split()[-1] if "->" not in line else line.split()[-3] for line in lines]
        # Parent directories come first, created on the way.
        for expected in ("bin", "bin/busybox", "bin/sh", "dev", "dev/console", "lib/modules/6.1.0/kernel/drivers/virtio/virtio.ko"):
            self.assertIn(expected, names, out)
        console = next(line for line in lines if line.endswith("dev/console"))
        self.assertTrue(console.startswith("crw-------"), console)
        self.assertIn("5,", console.replace(" ", ""), console)
        link = next(line for line in lines if "bin/sh" in line)
        self.assertIn("-> busybox", link)
        busybox = next(line for line in lines if line.endswith("bin/busybox"))
        self.assertIn(" 1005 ", busybox, busybox)

    def test_output_is_reproducible(self):
        def make():
            archive = build_microvm.Cpio()
            archive.file("init", b"#!/bin/sh\n", 0o755)
            archive.dir("proc")
            return archive.bytes()

        self.assertEqual(make(), make())


def fake_module(root, relpath, depends):
    path = os.path.join(root, relpath)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"\x7fELF junk\x00license=GPL\x00depends=" + ",".join(depends).encode() + b"\x00name=x\x00")


class ModuleOrder(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="deskbox-modules-")
        self.addCleanup(shutil.rmtree, self.root)
        fake_module(self.root, "kernel/drivers/virtio/virtio_ring.ko", [])
        fake_module(self.root, "kernel/drivers/virtio/virtio.ko", ["virtio_ring"])
        fake_module(self.root, "kernel/drivers/virtio/virtio_mmio.ko", ["virtio", "virtio_ring"])
        fake_module(self.root, "kernel/drivers/char/hw_random/virtio-rng.ko", ["virtio", "rng_core"])
        with open(os.path.join(self.root, "modules.builtin"), "w") as f:
            f.write("kernel/drivers/char/hw_random/rng-core.ko\n")

    def test_every_module_comes_after_what_it_needs(self):
        order = build_microvm.modules_in_load_order(self.root, ("virtio_mmio", "virtio_rng"))
        names = [build_microvm.module_name(p) for p in order]
        self.assertEqual(names, ["virtio_ring", "virtio", "virtio_mmio", "virtio_rng"])
        self.assertIn("kernel/drivers/char/hw_random/virtio-rng.ko", order)

    def test_a_missing_module_is_named(self):
        with self.assertRaises(build_microvm.template_build.BuildError) as caught:
            build_microvm.modules_in_load_order(self.root, ("virtio_blk",))
        self.assertIn("virtio_blk", str(caught.exception))


class ContentAddress(unittest.TestCase):
    def test_key_covers_template_and_init(self):
        base = build_microvm.microvm_key("a" * 64)
        self.assertEqual(base, build_microvm.microvm_key("a" * 64))
        self.assertNotEqual(base, build_microvm.microvm_key("b" * 64))
        with tempfile.NamedTemporaryFile("wb", suffix="-init") as other:
            other.write(b"#!/bin/busybox sh\necho different\n")
            other.flush()
            saved = build_microvm.INIT_SCRIPT
            build_microvm.INIT_SCRIPT = other.name
            try:
                self.assertNotEqual(base, build_microvm.microvm_key("a" * 64))
            finally:
                build_microvm.INIT_SCRIPT = saved

    def test_print_path_is_next_to_the_rootfs(self):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, DESKBOX_CACHE=cache)
            result = subprocess.run([sys.executable, SCRIPT, "minimal", "--print-path"], capture_output=True, text=True, env=env, timeout=60)
            rootfs = subprocess.run([sys.executable, os.path.join(REPO, "images", "build.py"), "minimal", "--print-path"], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), os.path.join(os.path.dirname(rootfs.stdout.strip()), "microvm"))

    def test_unbuilt_template_names_the_rootfs_build(self):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, DESKBOX_CACHE=cache)
            result = subprocess.run([sys.executable, SCRIPT, "minimal"], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(result.returncode, 1)
        self.assertIn("run sudo images/build.py minimal first", result.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
