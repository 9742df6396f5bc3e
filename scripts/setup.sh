#!/usr/bin/env bash
# Installs every Debian package deskbox needs (scripts/packages.txt). Idempotent: installs only
# what is missing, and runs apt-get update only when something is.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t wanted < <(grep -v '^\s*#' scripts/packages.txt | sed '/^\s*$/d')
missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${#missing[@]} package(s): ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian starts the packaged etcd on 127.0.0.1:2379 where systemd runs; the tests start
  # members of their own, so one installed here is left stopped (an etcd that was there before
  # is not touched).
  if [[ " ${missing[*]} " == *" etcd-server "* ]] && command -v systemctl >/dev/null &&
     [[ -d /run/systemd/system ]]; then
    $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
  fi
  # The same for the packaged registry (:5000 on every address): the template registry tests
  # run one of their own in a network namespace.
  if [[ " ${missing[*]} " == *" docker-registry "* ]] && command -v systemctl >/dev/null &&
     [[ -d /run/systemd/system ]]; then
    $SUDO systemctl disable --now docker-registry >/dev/null 2>&1 || true
  fi
fi
# npm: NodeSource's nodejs brings its own (and conflicts with Debian's npm package); Debian's
# nodejs needs the npm package beside it.
if ! command -v npm >/dev/null; then
  echo "setup: installing npm"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
fi
echo "setup: all ${#wanted[@]} packages present"
