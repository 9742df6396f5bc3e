#!/usr/bin/env python3
"""Builds the microVM boot files of a deskbox template, content-addressed and cached.

Usage:
  images/build_microvm.py TEMPLATE              build if missing; last stdout line is the dir
  images/build_microvm.py TEMPLATE --print-path print the dir without building
  images/build_microvm.py TEMPLATE --force      rebuild even if cached (fetches the newest kernel)

From the template's rootfs (built by images/build.py, which must have run first) it makes,
in <cache>/templates/<name>-<hash>/microvm/:
  vmlinuz        Debian's linux-image-cloud-amd64 kernel, taken from its .deb (never installed
                 into the rootfs, so the template's hash does not change)
  initramfs.img  busybox-static, the virtio and network modules of that kernel, and
                 images/microvm/init, which mounts the root and starts the agent as PID 1
  rootfs.ext4    the rootfs as a sparse ext4 image (mkfs.ext4 -d), opened read-only by QEMU;
                 each sandbox writes to its own qcow2 layer over it
  build.json     what was built from what, sizes and times

The content address (build.json "key") covers this script, images/microvm/init and the
template's hash; like build.py it does not pin the kernel version (--force picks up the
mirror's newest). Packages are fetched with `apt-get download` into the shared
<cache>/apt-archives/, so a rebuild needs no network. Python 3 standard library only.
"""

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import build as template_build  # the rootfs builder beside this script: resolution, hash, locks

IMAGES_DIR = os.path.dirname(os.path.abspath(__file__))

INIT_SCRIPT = os.path.join(IMAGES_DIR, "microvm", "init")
KERNEL_META_PACKAGE = "linux-image-cloud-amd64"
BUSYBOX_PACKAGE = "busybox-static"
# Modules the init loads, by module name; their dependencies are added in load order.
# virtio_mmio finds the devices of QEMU's microvm machine (described in its ACPI tables);
# virtio_net only matters for sandboxes with network, but costs nothing when no NIC exists.
GUEST_MODULES = ("virtio_mmio", "virtio_blk", "virtio_console", "virtio_net", "virtio_rng")
# Free space in the root filesystem on top of the rootfs (sparse: costs no host disk until
# a sandbox writes, and then only in that sandbox's qcow2 layer).
ROOT_HEADROOM_BYTES = 2 << 30
OUTPUT_FILES = ("vmlinuz", "initramfs.img", "rootfs.ext4", "build.json")

log = template_build.log
Interrupted = template_build.Interrupted


# ---------------------------------------------------------------------------------------------
# Debian packages


def run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise template_build.BuildError(
            f"{' '.join(cmd)} failed (exit {result.returncode}): {result.stderr.strip() or result.stdout.strip()}"
        )
    return result.stdout


def candidate(package):
    """(package, version) apt would install, from the local package lists (no network)."""
    out = run(["apt-cache", "policy", package])
    m = re.search(r"Candidate:\s*(\S+)", out)
    if not m or m.group(1) == "(none)":
        raise template_build.BuildError(
            f"package {package} has no installation candidate (run apt-get update?)"
        )
    return package, m.group(1)


def kernel_package():
    """The versioned kernel package the linux-image-cloud-amd64 metapackage points at."""
    out = run(["apt-cache", "depends", KERNEL_META_PACKAGE])
    m = re.search(r"Depends:\s*(linux-image-[0-9][^\s]*-cloud-amd64)\b", out)
    if not m:
        raise template_build.BuildError(f"cannot tell which kernel {KERNEL_META_PACKAGE} depends on:\n{out}")
    return candidate(m.group(1))


def fetch_deb(package, version, apt_cache):
    """Path of package_version's .deb in the shared archive cache, downloading it if missing."""
    quoted = version.replace(":", "%3a")
    name = f"{package}_{quoted}_amd64.deb"
    path = os.path.join(apt_cache, name)
    if os.path.isfile(path):
        return path
    log(f"downloading {package} {version}")
    with tempfile.TemporaryDirectory(prefix=".download.", dir=apt_cache) as tmp:
        # Sandbox user root: _apt could not write into a root-owned temp dir.
        run(["apt-get", "download", "-o", "APT::Sandbox::User=root", f"{package}={version}"], cwd=tmp)
        got = [f for f in os.listdir(tmp) if f.endswith(".deb")]
        if len(got) != 1:
            raise template_build.BuildError(f"apt-get download {package}={version} gave {got}")
        os.rename(os.path.join(tmp, got[0]), path)
    return path


def extract_deb(deb, dest):
    os.makedirs(dest, exist_ok=True)
    run(["dpkg-deb", "-x", deb, dest])


# ---------------------------------------------------------------------------------------------
# Kernel modules


def module_name(path):
    return os.path.basename(path)[: -len(".ko")].replace("-", "_")


def module_depends(path):
    """The `depends=` field of a .ko's .modinfo section (NUL-separated key=value strings)."""
    with open(path, "rb") as f:
        data = f.read()
    m = re.search(rb"(?:^|\x00)depends=([^\x00]*)\x00", data)
    if not m or not m.group(1):
        return []
    return [d.decode().replace("-", "_") for d in m.group(1).split(b",") if d]


def modules_in_load_order(modules_dir, wanted):
    """Relative paths of `wanted` and their dependencies, every module after what it needs."""
    by_name = {}
    for dirpath, _, files in os.walk(modules_dir):
        for f in files:
            if f.endswith(".ko"):
                full = os.path.join(dirpath, f)
                by_name[module_name(full)] = full
    builtin = set()
    builtin_file = os.path.join(modules_dir, "modules.builtin")
    if os.path.isfile(builtin_file):
        with open(builtin_file) as f:
            builtin = {module_name(line.strip()) for line in f if line.strip()}
    order, visiting = [], set()

    def visit(name):
        if name in builtin or any(module_name(p) == name for p in order):
            return
        if name not in by_name:
            raise template_build.BuildError(f"kernel module {name} is neither built in nor in {modules_dir}")
        if name in visiting:
            raise template_build.BuildError(f"kernel module dependency cycle at {name}")
        visiting.add(name)
        for dep in module_depends(by_name[name]):
            visit(dep)
        visiting.discard(name)
        order.append(by_name[name])

    for name in wanted:
        visit(name)
    return [os.path.relpath(p, modules_dir) for p in order]


# ---------------------------------------------------------------------------------------------
# initramfs: a newc cpio written here, so device nodes need no root and the bytes are
# reproducible (sorted entries, zero timestamps)


class Cpio:
    def __init__(self):
        self.entries = {}  # path -> (mode, data, rdev major, rdev minor)

    def dir(self, path, mode=0o755):
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self.entries.setdefault("/".join(parts[:i]), (stat.S_IFDIR | mode, b"", 0, 0))

    def _add(self, path, entry):
        parent = os.path.dirname(path.strip("/"))
        if parent:
            self.dir(parent)  # the kernel does not create missing parents
        self.entries[path.strip("/")] = entry

    def file(self, path, data, mode):
        self._add(path, (stat.S_IFREG | mode, data, 0, 0))

    def symlink(self, path, target):
        self._add(path, (stat.S_IFLNK | 0o777, target.encode(), 0, 0))

    def char_device(self, path, major, minor, mode):
        self._add(path, (stat.S_IFCHR | mode, b"", major, minor))

    def bytes(self):
        out = io.BytesIO()

        def pad4():
            out.write(b"\0" * (-out.tell() % 4))

        def header(ino, name, mode, data, rmaj, rmin):
            encoded = name.encode() + b"\0"
            fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rmaj, rmin, len(encoded), 0)
            out.write(b"070701" + b"".join(b"%08X" % v for v in fields))
            out.write(encoded)
            pad4()
            out.write(data)
            pad4()

        for ino, name in enumerate(sorted(self.entries), start=1):
            mode, data, rmaj, rmin = self.entries[name]
            header(ino, name, mode, data, rmaj, rmin)
        header(0, "TRAILER!!!", 0, b"", 0, 0)
        return out.getvalue()


def busybox_applets(busybox):
    out = run([busybox, "--list"])
    return sorted(a for a in out.split() if re.match(r"^[a-z0-9_.\[-]+$", a) and a != "busybox")


def make_initramfs(kernel_root, busybox, release, dest):
    modules_dir = os.path.join(kernel_root, "lib", "modules", release)
    order = modules_in_load_order(modules_dir, GUEST_MODULES)
    cpio = Cpio()
    for d in ("bin", "dev", "proc", "sys", "tmp", "newroot", f"lib/modules/{release}"):
        cpio.dir(d)
    # The kernel opens /dev/console for init's stdio before init runs.
    cpio.char_device("dev/console", 5, 1, 0o600)
    cpio.char_device("dev/null", 1, 3, 0o666)
    with open(busybox, "rb") as f:
        cpio.file("bin/busybox", f.read(), 0o755)
    for applet in busybox_applets(busybox):
        cpio.symlink(f"bin/{applet}", "busybox")
    with open(INIT_SCRIPT, "rb") as f:
        cpio.file("init", f.read(), 0o755)
    for rel in order:
        with open(os.path.join(modules_dir, rel), "rb") as f:
            cpio.file(f"lib/modules/{release}/{rel}", f.read(), 0o644)
    cpio.file(f"lib/modules/{release}/load-order", ("\n".join(order) + "\n").encode(), 0o644)
    data = cpio.bytes()
    # Uncompressed: under TCG, decompressing costs more boot time than QEMU reading a few
    # extra MiB from the page cache.
    with open(dest, "wb") as f:
        f.write(data)
    return [module_name(p) for p in order]


# ---------------------------------------------------------------------------------------------
# Root image


def make_root_image(rootfs, dest):
    used = template_build.dir_size(rootfs)
    # ext4 metadata (inode tables, bitmaps) takes a few % on top of the data.
    size = (int(used * 1.15) + ROOT_HEADROOM_BYTES + (1 << 20) - 1) // (1 << 20) * (1 << 20)
    with open(dest, "wb") as f:
        f.truncate(size)  # sparse
    run([
        "mkfs.ext4", "-q", "-F",
        "-L", "deskbox-root",
        "-b", "4096",
        "-m", "0",  # the session user may use every block
        # No journal: a sandbox is disposable, and a crashed one is never fsck'ed. It also
        # keeps every write single (no journal copy) in the sandbox's qcow2 layer.
        "-O", "^has_journal",
        # Inode tables zeroed now, so no guest ever runs ext4lazyinit against its own layer;
        # on a sparse file discarding first makes that free.
        "-E", "lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0",
        "-d", rootfs,
        dest,
    ])
    keep_directory_nanoseconds(rootfs, dest)
    return size, used


def keep_directory_nanoseconds(rootfs, image):
    """Copies the sub-second part of every directory's mtime into the image.

    mkfs.ext4 -d keeps whole seconds only, and fontconfig's caches record their font
    directories' mtimes to the nanosecond: with them off, every X client in the guest
    rescans all fonts (half a minute under TCG for the first xterm)."""
    commands = []
    for dirpath, _, _ in os.walk(rootfs):
        rel = "/" + os.path.relpath(dirpath, rootfs) if dirpath != rootfs else "/"
        if '"' in rel or "\\" in rel or "\n" in rel:
            continue  # debugfs cannot quote these; such names are not font directories
        nanos = os.lstat(dirpath).st_mtime_ns % 1_000_000_000
        # ext4's *_extra field: nanoseconds << 2, low bits are epoch extensions (0 before 2038).
        commands.append(f'set_inode_field "{rel}" mtime_extra {nanos << 2}')
    with tempfile.NamedTemporaryFile("w", suffix=".debugfs") as script:
        script.write("\n".join(commands) + "\n")
        script.flush()
        result = subprocess.run(["debugfs", "-w", "-f", script.name, image], capture_output=True, text=True)
    errors = [l for l in result.stderr.splitlines() if l.strip() and not l.startswith("debugfs ")]
    if result.returncode != 0 or errors:
        raise template_build.BuildError(f"debugfs on {image} failed: {' '.join(errors[:5]) or result.returncode}")


# ---------------------------------------------------------------------------------------------
# Build


def microvm_key(template_digest):
    h = hashlib.sha256()
    for label, path in (("build_microvm.py", os.path.abspath(__file__)), ("init", INIT_SCRIPT)):
        with open(path, "rb") as f:
            data = f.read()
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)
    h.update(f"template\0{template_digest}".encode())
    return h.hexdigest()


def read_build_json(out_dir):
    try:
        with open(os.path.join(out_dir, "build.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def complete(out_dir, key):
    meta = read_build_json(out_dir)
    return (
        meta is not None
        and meta.get("key") == key
        and all(os.path.isfile(os.path.join(out_dir, f)) for f in OUTPUT_FILES)
    )


def build(name, template_dir, rootfs, template_digest, cache, force):
    key = microvm_key(template_digest)
    out_dir = os.path.join(template_dir, "microvm")
    templates = os.path.dirname(template_dir)
    apt_cache = os.path.join(cache, "apt-archives")
    os.makedirs(apt_cache, exist_ok=True)
    def require_rootfs():
        if not os.path.isdir(rootfs):
            raise template_build.BuildError(
                f"template {name} is not built ({rootfs} is missing): run sudo images/build.py {name} first"
            )

    require_rootfs()
    # The rootfs builder's lock: a `build.py --force` never swaps the rootfs under us.
    with template_build.file_lock(os.path.join(templates, f".lock-{name}"), name):
        require_rootfs()
        for entry in os.listdir(template_dir):
            if entry.startswith(".tmp-microvm."):
                log(f"removing stale {entry}")
                template_build.remove_tree(os.path.join(template_dir, entry))
        if complete(out_dir, key) and not force:
            log(f"cache hit: {out_dir}")
            return out_dir
        for tool in ("apt-get", "apt-cache", "dpkg-deb", "mkfs.ext4", "debugfs"):
            if shutil.which(tool) is None:
                raise template_build.BuildError(f"{tool} is not installed")

        started = time.monotonic()
        tmp = tempfile.mkdtemp(prefix=".tmp-microvm.", dir=template_dir)
        try:
            kernel_pkg, kernel_version = kernel_package()
            busybox_pkg, busybox_version = candidate(BUSYBOX_PACKAGE)
            kernel_deb = fetch_deb(kernel_pkg, kernel_version, apt_cache)
            busybox_deb = fetch_deb(busybox_pkg, busybox_version, apt_cache)
            scratch = os.path.join(tmp, "scratch")
            extract_deb(kernel_deb, os.path.join(scratch, "kernel"))
            extract_deb(busybox_deb, os.path.join(scratch, "busybox"))
            kernel_root = os.path.join(scratch, "kernel")
            images = [f for f in os.listdir(os.path.join(kernel_root, "boot")) if f.startswith("vmlinuz-")]
            if len(images) != 1:
                raise template_build.BuildError(f"{kernel_deb}: expected one vmlinuz, found {images}")
            release = images[0][len("vmlinuz-"):]
            shutil.copyfile(os.path.join(kernel_root, "boot", images[0]), os.path.join(tmp, "vmlinuz"))
            busybox = os.path.join(scratch, "busybox", "bin", "busybox")
            if not os.path.isfile(busybox):
                busybox = os.path.join(scratch, "busybox", "usr", "bin", "busybox")
            modules = make_initramfs(kernel_root, busybox, release, os.path.join(tmp, "initramfs.img"))
            t_root = time.monotonic()
            log(f"making rootfs.ext4 from {rootfs}")
            image_size, rootfs_bytes = make_root_image(rootfs, os.path.join(tmp, "rootfs.ext4"))
            root_seconds = time.monotonic() - t_root
            shutil.rmtree(scratch)
            for f in ("vmlinuz", "initramfs.img", "rootfs.ext4"):
                os.chmod(os.path.join(tmp, f), 0o644)
            seconds = time.monotonic() - started
            meta = {
                "name": name,
                "key": key,
                "template_hash": template_digest,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "build_seconds": round(seconds, 1),
                "rootfs_image_seconds": round(root_seconds, 1),
                "kernel": {"package": kernel_pkg, "version": kernel_version, "release": release},
                "busybox": {"package": busybox_pkg, "version": busybox_version},
                "modules": modules,
                "rootfs_bytes": rootfs_bytes,
                "rootfs_image_bytes": image_size,
                "initramfs_bytes": os.path.getsize(os.path.join(tmp, "initramfs.img")),
                "vmlinuz_bytes": os.path.getsize(os.path.join(tmp, "vmlinuz")),
            }
            with open(os.path.join(tmp, "build.json"), "w") as f:
                json.dump(meta, f, indent=2)
                f.write("\n")
            os.chmod(tmp, 0o755)
            if os.path.isdir(out_dir):
                # Running VMs keep their open files; only new sandboxes see the new build.
                old = tempfile.mkdtemp(prefix=".tmp-microvm.old.", dir=template_dir)
                os.rename(out_dir, os.path.join(old, "microvm"))
                os.rename(tmp, out_dir)
                template_build.remove_tree(old)
            else:
                os.rename(tmp, out_dir)
            log(f"built {name} microVM files in {seconds:.0f} s (rootfs.ext4 {root_seconds:.0f} s, "
                f"kernel {release})")
            return out_dir
        finally:
            template_build.remove_tree(tmp)


def main(argv):
    parser = argparse.ArgumentParser(prog="images/build_microvm.py", description=__doc__.split("\n")[0])
    parser.add_argument("template", help="template folder name under images/templates/, or a path")
    parser.add_argument("--print-path", action="store_true", help="print the microvm dir without building")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    _, definition, _, digest, cache, template_dir, rootfs = template_build.resolve_cached(args.template)
    if args.print_path:
        print(os.path.join(template_dir, "microvm"))
        return 0
    out_dir = build(definition["name"], template_dir, rootfs, digest, cache, args.force)
    print(out_dir, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(template_build.run_main(main, sys.argv[1:]))
