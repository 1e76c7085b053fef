#!/usr/bin/env bash
# npm ci when node_modules is missing or older than package-lock.json (npm's own cache, ~/.npm,
# keeps a fresh clone from downloading again).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund --loglevel=error >&2
fi
