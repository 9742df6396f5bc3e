#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test (real Xvfb and processes).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
# The sandbox tests run the `minimal` template; built once, then cached by content hash.
images/build.py minimal >/dev/null
ctest --test-dir build --output-on-failure -j2 "$@"
