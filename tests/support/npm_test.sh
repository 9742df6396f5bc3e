#!/usr/bin/env bash
# npm_test.sh DIR: in DIR, installs the dev dependencies from package-lock.json (npm ci; again
# only when the lock changed), builds (npm run build, if there is one) and runs npm test.
set -euo pipefail
cd "$1"
stamp=node_modules/.deskbox-lock-hash
hash=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$hash" ]]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$hash" >"$stamp"
fi
npm run --silent --if-present build
npm test
