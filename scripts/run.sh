#!/usr/bin/env bash
# Quick start: installs dependencies, builds, builds the `minimal` template, starts deskboxd,
# creates a demo sandbox (a terminal typed into, a screenshot saved) and prints its viewer URL.
# The server keeps running in the foreground; Ctrl-C stops it and its sandboxes.
#   scripts/run.sh [--detach] [--listen 127.0.0.1:8700]
set -euo pipefail
cd "$(dirname "$0")/.."
detach=0
listen=127.0.0.1:8700
while (($#)); do
  case $1 in
    --detach) detach=1 ;;
    --listen) listen=$2; shift ;;
    *) echo "usage: scripts/run.sh [--detach] [--listen ADDR:PORT]" >&2; exit 2 ;;
  esac
  shift
done
scripts/setup.sh
# Only what the quick start runs (deskboxd, the agent it puts in sandboxes, the CLI); the
# template's packages download and unpack beside the compile (mostly I/O).
echo "building the minimal template beside the compile (first time: a few minutes; then cached)..."
template_log=$(mktemp)
images/build.py minimal >"$template_log" 2>&1 &
template=$!
DESKBOX_BUILD_TARGETS="deskboxd deskbox" scripts/build.sh build
if ! wait "$template"; then
  cat "$template_log" >&2
  echo "run.sh: building the minimal template failed" >&2
  exit 1
fi
rm -f "$template_log"

state=${DESKBOX_STATE:-/var/lib/deskbox}
mkdir -p "$state"
log="$state/deskboxd.log"
build/server/deskboxd --listen "$listen" --state-dir "$state" >"$log.out" 2>"$log" &
server=$!
if ((!detach)); then trap 'kill -INT $server 2>/dev/null; wait $server 2>/dev/null' EXIT INT TERM; fi
url="http://$listen"
for _ in $(seq 100); do
  curl -fsS "$url/healthz" >/dev/null 2>&1 && break
  kill -0 $server 2>/dev/null || { echo "deskboxd failed to start:"; cat "$log"; exit 1; }
  sleep 0.1
done
echo "deskboxd is up at $url (log: $log)"
build/server/deskbox --server "$url" demo --keep -o "$PWD/demo.png"
if ((detach)); then
  echo "deskboxd runs in the background (pid $server). kill $server stops it and keeps its"
  echo "sandboxes for the next start (it adopts them); kill -INT $server stops them too."
else
  echo "Ctrl-C stops deskboxd and its sandboxes."
  wait $server
fi
