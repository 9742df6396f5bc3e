#!/usr/bin/env bash
# Builds the `minimal` template for real (mmdebstrap, as root; slow only when the cache is cold)
# and checks what the runtime relies on: the desktop binaries run, the session user, the agent
# mount point, fonts, the recorded session defaults. Then: a second build is a cache hit on the
# same path, and failing builds (a setup command, a package that does not exist) say why and
# leave nothing in the cache. Exit 77 (skipped) without root or mmdebstrap.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=("${PYTHON:-python3}" "$repo/images/build.py")
cache=${DESKBOX_CACHE:-/var/cache/deskbox}
export DESKBOX_CACHE=$cache

if [[ $(id -u) -ne 0 ]] || ! command -v mmdebstrap >/dev/null; then
  echo "SKIP: needs root and mmdebstrap"
  exit 77
fi

failures=0
passes=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@" >/dev/null 2>&1; then
    passes=$((passes + 1))
  else
    echo "FAIL: $what"
    failures=$((failures + 1))
  fi
}

work=$(mktemp -d)
cleanup() {
  rm -rf "$work"
  rm -f "$cache/templates/.lock-deskbox-test-"*
}
trap cleanup EXIT

echo "== build minimal (cache: $cache)"
"${build[@]}" minimal >"$work/out1" 2>"$work/err1"
rc=$?
if [[ $rc -ne 0 ]]; then
  tail -30 "$work/err1"
  echo "FAIL: build of minimal exited $rc"
  exit 1
fi
rootfs=$(tail -1 "$work/out1")
expected=$("${build[@]}" minimal --print-path)
check "last stdout line is the --print-path path" test "$rootfs" = "$expected"
check "rootfs exists" test -d "$rootfs"
check "build dir readable by all" test "$(stat -c %a "$(dirname "$rootfs")")" = 755
check "build metadata beside the rootfs" python3 -c "import json,sys; m=json.load(open(sys.argv[1])); assert m['rootfs_bytes'] > 0 and m['name'] == 'minimal'" "$(dirname "$rootfs")/build.json"
echo "rootfs: $rootfs"

echo "== rootfs contents"
in_root() { chroot "$rootfs" "$@"; }
check "Xvfb installed" test -x "$rootfs/usr/bin/Xvfb"
check "openbox runs" in_root /usr/bin/openbox --version
check "xterm runs" in_root /usr/bin/xterm -version
check "user uid 1000" grep -q '^user:x:1000:1000:[^:]*:/home/user:/bin/bash$' "$rootfs/etc/passwd"
check "group user gid 1000" grep -q '^user:x:1000:' "$rootfs/etc/group"
check "user resolves inside the image" test "$(in_root id -u user)" = 1000
check "home owned by the user" test "$(stat -c %u:%g "$rootfs/home/user")" = 1000:1000
check "template file owned by the user" test "$(stat -c %u:%a "$rootfs/home/user/.Xdefaults")" = 1000:644
check "/opt/deskbox is an empty mount point" test -d "$rootfs/opt/deskbox" -a -z "$(ls -A "$rootfs/opt/deskbox")"
check "/tmp is 1777" test "$(stat -c %a "$rootfs/tmp")" = 1777
check "machine-id exists and is empty" test -f "$rootfs/etc/machine-id" -a ! -s "$rootfs/etc/machine-id"
check "no apt cache left in the image" test -z "$(ls "$rootfs/var/cache/apt/archives/"*.deb 2>/dev/null)"
fonts=$(in_root fc-list : family 2>/dev/null)
check "DejaVu font" grep -q "DejaVu Sans" <<<"$fonts"
check "CJK font" grep -q "WenQuanYi Micro Hei" <<<"$fonts"
check "emoji font" grep -q "Noto Color Emoji" <<<"$fonts"
for lib in libX11.so.6 libXext.so.6 libXtst.so.6 libXdamage.so.1 libXfixes.so.3 libxkbcommon.so.0 libstdc++.so.6; do
  check "agent runtime library $lib" grep -q "$lib" <(in_root ldconfig -p)
done
check "session defaults recorded for the agent" python3 - "$rootfs/etc/deskbox/template.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
assert t["name"] == "minimal" and len(t["hash"]) == 64
assert t["session"]["window_manager"] == ["openbox"]
assert t["session"]["resolution"] == [1280, 800] and t["session"]["dpi"] == 96
assert t["user"] == {"name": "user", "uid": 1000, "gid": 1000, "home": "/home/user"}
assert t["agent"] == "/opt/deskbox/bin/deskbox-agent"
assert t["env"]["LANG"] == "C.UTF-8"
EOF

echo "== the image runs a desktop"
# As a container runtime will: an overlay over the cached rootfs (which stays untouched), in a
# private mount and network namespace, so the X socket cannot meet any other X server.
mkdir -p "$work/run"
unshare --mount --net --propagation private bash "$here/run_in_overlay.sh" "$rootfs" "$work/run" \
  >"$work/run.log" 2>&1
check "Xvfb from the image starts and xterm connects as the user" grep -q "^xterm connected$" "$work/run.log"
check "the run left the cached rootfs untouched" test -z "$(ls -A "$rootfs/tmp")"

echo "== second build is a cache hit"
"${build[@]}" minimal >"$work/out2" 2>"$work/err2"
check "second build succeeds" test $? -eq 0
check "second build prints the same path" test "$(tail -1 "$work/out2")" = "$rootfs"
check "second build reports a cache hit" grep -q "cache hit" "$work/err2"
check "second build ran no mmdebstrap" bash -c "! grep -q 'I: running apt-get update' '$work/err2'"

# Failing builds use the shared apt cache that the build above filled, so they are quick.
leftovers() { ls -a "$cache/templates" | grep -E "^(\.tmp-$1\.|$1-)" || true; }

echo "== a failing setup command"
mkdir -p "$work/deskbox-test-failing-setup"
cat >"$work/deskbox-test-failing-setup/template.json" <<'EOF'
{
  "name": "deskbox-test-failing-setup",
  "description": "test: the second setup command fails",
  "base": { "suite": "bookworm", "variant": "essential" },
  "packages": [],
  "setup": ["true", "echo about to fail; exit 3"],
  "session": { "window_manager": ["true"], "autostart": [], "resolution": [640, 480], "dpi": 96 }
}
EOF
"${build[@]}" "$work/deskbox-test-failing-setup" >"$work/out3" 2>"$work/err3"
rc=$?
check "failing setup exits 1" test $rc -eq 1
check "failing setup names the command" grep -q "setup\[1\]: command failed with exit 3: echo about to fail; exit 3" "$work/err3"
check "failing setup names the file" grep -q "deskbox-test-failing-setup/template.json" "$work/err3"
check "failing setup prints no path" test ! -s "$work/out3"
check "failing setup leaves nothing in the cache" test -z "$(leftovers deskbox-test-failing-setup)"

echo "== a package that does not exist"
mkdir -p "$work/deskbox-test-missing-package"
sed -e 's/failing-setup/missing-package/' -e 's/"packages": \[\]/"packages": ["deskbox-no-such-package"]/' \
  -e 's/"setup": \[[^]]*\]/"setup": []/' \
  "$work/deskbox-test-failing-setup/template.json" >"$work/deskbox-test-missing-package/template.json"
"${build[@]}" "$work/deskbox-test-missing-package" >"$work/out4" 2>"$work/err4"
rc=$?
check "missing package exits 1" test $rc -eq 1
check "missing package is named" grep -q "packages\[0\]: package 'deskbox-no-such-package' is not available in bookworm" "$work/err4"
check "missing package leaves nothing in the cache" test -z "$(leftovers deskbox-test-missing-package)"
echo "== two concurrent builds of one template"
mkdir -p "$work/deskbox-test-lock"
sed -e 's/failing-setup/lock/' -e 's/"setup": \[[^]]*\]/"setup": ["touch \/built-once"]/' \
  "$work/deskbox-test-failing-setup/template.json" >"$work/deskbox-test-lock/template.json"
"${build[@]}" "$work/deskbox-test-lock" >"$work/out5" 2>"$work/err5" &
first=$!
"${build[@]}" "$work/deskbox-test-lock" >"$work/out6" 2>"$work/err6" &
second=$!
wait $first
rc1=$?
wait $second
rc2=$?
lock_path=$(tail -1 "$work/out5")
check "both concurrent builds succeed" test $rc1 -eq 0 -a $rc2 -eq 0
check "both print the same path" test -n "$lock_path" -a "$lock_path" = "$(tail -1 "$work/out6")"
check "exactly one of them built, the other waited for it and hit the cache" \
  test "$(cat "$work/err5" "$work/err6" | grep -c 'I: running apt-get update')" = 1 -a \
  "$(cat "$work/err5" "$work/err6" | grep -c 'cache hit')" = 1
check "the concurrent build's setup ran" test -f "$lock_path/built-once"
check "no temp dir left by the concurrent builds" test -z "$(ls -a "$cache/templates" | grep -F ".tmp-deskbox-test-lock.")"
[[ -n $lock_path ]] && rm -rf --one-file-system "$(dirname "$lock_path")"

if ((failures)); then
  for f in err3 err4 err5 err6; do echo "--- $f"; tail -8 "$work/$f"; done
fi

echo "$passes passed, $failures failed"
((failures == 0))
