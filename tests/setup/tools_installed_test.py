#!/usr/bin/env python3
"""Every program the code, the tests, the benchmarks and the scripts run on the host comes from
a package scripts/setup.sh installs (scripts/packages.txt, or what those packages depend on, or
what every Debian system has). A fresh machine then runs the test command without surprises:
a tool that only happened to be installed on the machine CI ran on fails here first.

Programs are found where they are started: argv literals in C++ (run_process({"X", ...},
argv = {"X", ...}, exec({"X", ...}), runtime option defaults), shell lines given to sh -c,
subprocess calls in Python, and command positions in shell scripts.
"""
import os
import re
import shutil
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Shell words that are not programs to install.
BUILTINS = {
    "command", "echo", "cd", "exec", "test", "[", "[[", "true", "false", "printf", "read", "set",
    "export", "trap", "wait", "source", ".", "eval", "exit", "return", "shift", "local", "type",
    "unset", "if", "then", "else", "elif", "fi", "for", "while", "do", "done", "case", "esac",
    "in", "function", "declare", "mapfile", "readonly", "let", "ulimit", "umask", "getopts",
    "hash", "times", "break", "continue", "builtin", "shopt", "pushd", "popd", "alias", "time",
    "{", "}", "!", "SUDO", "sudo",
}

CPP_PATTERNS = [
    re.compile(r'run_process\(\s*\{\s*"([^"]+)"'),
    re.compile(r'\bargv\s*=\s*\{\s*"([^"]+)"'),
    re.compile(r'\.exec\(\s*\{\s*"([^"]+)"'),
    re.compile(r'run_tool\(\s*\{\s*"([^"]+)"'),
    re.compile(r'std::string\s+(?:qemu|qemu_img|mkfs_ext4|runc)\s*=\s*"([^"]+)"'),
]
SH_C = re.compile(r'"sh",\s*"-c",\s*"((?:[^"\\]|\\.)*)"')
PY_PATTERNS = [re.compile(r'\b(?:run|check_output|Popen|call|check_call)\(\s*\[\s*"([^"]+)"')]
# Lists that look like an argv: a program, then a flag ({"cpio", "-itv"} or ["cpio", "-itv"]).
ARGV_LIKE = re.compile(r'[\[{]\s*"([a-z][a-z0-9._+-]*)",\s*"-')
# Programs scripts/setup.sh installs only when the machine lacks them, by the package that
# brings them on plain Debian: npm comes with a NodeSource nodejs, which conflicts with
# Debian's npm package.
SETUP_FALLBACKS = {"npm": "npm"}
# What a fresh machine's PATH holds: only packaged programs.
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def shell_commands(line):
    """Words in command position of one shell line."""
    line = re.sub(r"#.*$", "", line)
    out = []
    for part in re.split(r"\|\||&&|[|;&()]|\$\(|`", line):
        words = part.strip().split()
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]  # VAR=value prefixes
        if not words:
            continue
        word = words[0].strip("\"'")
        if re.match(r"^[a-z][a-z0-9._+-]*$", word):
            out.append(word)
    return out


def source_files():
    for top in ("server", "guest-desktop", "streaming", "input", "protocol", "common", "tests",
                "bench", "images", "scripts", ".ci", "sdk", "examples"):
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("node_modules", "dist", "__pycache__")]
            if "/templates/" in dirpath + "/" or "/fuzz/corpus" in dirpath:
                continue  # template files run inside sandboxes, not on the host
            for name in files:
                yield os.path.join(dirpath, name)


def used_programs():
    """{program: (certain, [where it is used, ...])}. Certain: found where a program is started
    for sure (an argv); else a guess (a shell word, an argv-like list) that counts only if such
    a program exists."""
    found = {}

    def note(program, where, certain=True):
        if program in BUILTINS or "/" in program or program.startswith("$"):
            return
        was_certain, places = found.get(program, (False, []))
        found[program] = (was_certain or certain, places + [os.path.relpath(where, ROOT)])

    for path in source_files():
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        if path.endswith((".cpp", ".hpp")):
            for pattern in CPP_PATTERNS:
                for program in pattern.findall(text):
                    note(program, path)
            for script in SH_C.findall(text):
                for program in shell_commands(bytes(script, "utf-8").decode("unicode_escape")):
                    note(program, path, certain=False)
            for program in ARGV_LIKE.findall(text):
                note(program, path, certain=False)
        elif path.endswith(".py"):
            for pattern in PY_PATTERNS:
                for program in pattern.findall(text):
                    note(program, path)
            for program in ARGV_LIKE.findall(text):
                note(program, path, certain=False)
        elif path.endswith(".sh") or os.path.basename(path) == "run" and ".ci" in path:
            for line in text.splitlines():
                if line.lstrip().startswith("#"):
                    continue
                for program in shell_commands(line):
                    note(program, path, certain=False)
    return found


def listed_packages():
    path = os.path.join(ROOT, "scripts", "packages.txt")
    with open(path) as f:
        return [l.strip() for l in f if l.strip() and not l.strip().startswith("#")]


def installed_closure(packages):
    """What installing `packages` installs: their Depends and PreDepends, recursively."""
    out = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
         "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"] + packages,
        capture_output=True, text=True, check=True).stdout
    names = set(packages)
    for line in out.splitlines():
        line = line.strip()
        if line.startswith(("Depends:", "PreDepends:", "|Depends:", "|PreDepends:")):
            names.add(line.split(":", 1)[1].strip().strip("<>").split(":")[0])
        elif line and not line.startswith(" ") and ":" not in line:
            names.add(line.strip("<>"))
    return names


def base_system(package):
    """Essential and required packages are on every Debian 12 system (important ones are not:
    a minimal image lacks cpio, for one)."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${Essential} ${Priority}", package],
                         capture_output=True, text=True).stdout.split()
    return bool(out) and (out[0] == "yes" or (len(out) > 1 and out[1] == "required"))


def owning_package(path):
    candidates = [path, os.path.realpath(path)]
    for p in list(candidates):
        if p.startswith("/usr/"):
            candidates.append(p[4:])  # merged /usr: dpkg may know /bin/x for /usr/bin/x
    for p in candidates:
        r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            if r.returncode == 0 and not line.startswith("diversion by"):
                return line.split(":", 1)[0].split(",")[0].strip()
    return None


class ToolsInstalledBySetup(unittest.TestCase):
    def test_the_scan_finds_the_programs_it_must(self):
        # A scan that finds nothing passes vacuously: these are known to be started.
        found = used_programs()
        for program in ("runc", "qemu-system-x86_64", "ip", "nft", "dnsmasq", "curl", "chromium",
                        "cpio", "mmdebstrap", "npm"):
            self.assertIn(program, found, f"the scan no longer sees {program}")

    def test_every_program_used_comes_from_a_package_setup_installs(self):
        packages = listed_packages()
        closure = installed_closure(packages)
        problems = []
        for program, (certain, where) in sorted(used_programs().items()):
            path = shutil.which(program, path=SYSTEM_PATH)
            if not path:
                if certain:
                    elsewhere = shutil.which(program)
                    problems.append(f"{program} (used in {where[0]}) is not a packaged program"
                                    + (f" (here it is {elsewhere}, which a fresh machine lacks)"
                                       if elsewhere else "") +
                                    ": add its package to scripts/packages.txt")
                continue
            package = owning_package(path)
            if package is None:
                problems.append(f"{program} (used in {where[0]}) is {path}, which no Debian "
                                f"package owns: a fresh machine will not have it")
                continue
            if program in SETUP_FALLBACKS:
                with open(os.path.join(ROOT, "scripts", "setup.sh")) as f:
                    if f"command -v {program}" in f.read():
                        continue
            if package not in closure and not base_system(package):
                problems.append(f"{program} (used in {where[0]}) comes from package {package}, "
                                f"which scripts/setup.sh does not install: add it to "
                                f"scripts/packages.txt")
        self.assertEqual(problems, [], "\n" + "\n".join(problems))


if __name__ == "__main__":
    unittest.main()
