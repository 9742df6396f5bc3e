#!/usr/bin/env bash
# Configures and builds deskbox. Usage: scripts/build.sh [build-dir] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}; shift || true
# shellcheck source=scripts/ccache_env.sh
source scripts/ccache_env.sh
cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
# DESKBOX_BUILD_TARGETS="a b" builds only those targets (a helper or a quick check).
read -r -a targets <<<"${DESKBOX_BUILD_TARGETS:-}"
cmake --build "$dir" -j"$(nproc)" ${targets[@]+--target "${targets[@]}"}
