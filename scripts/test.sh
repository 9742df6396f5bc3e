#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test (real Xvfb and processes).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The sandbox tests run the `minimal` and `desktop` templates; built once, then cached by
# content hash. Downloading and unpacking packages is mostly I/O, so it runs beside the compile.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
(images/build.py minimal && images/build_microvm.py minimal && images/build.py desktop) >"$log" 2>&1 &
templates=$!
scripts/build.sh build
if ! wait "$templates"; then
  cat "$log" >&2
  echo "test.sh: building the templates failed" >&2
  exit 1
fi
# No retries: a test that fails once fails the run (a flake is a bug to find, not to hide).
ctest --test-dir build --output-on-failure -j2 "$@"
