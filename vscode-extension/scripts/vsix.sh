#!/usr/bin/env bash
# Builds tensor-dap.vsix (minified bundle) with the cached, pinned vsce. Usage: scripts/vsix.sh [OUT]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$HERE/tensor-dap.vsix}"
cd "$HERE"
scripts/deps.sh
eval "$(scripts/tools.sh vsce)"
node build.mjs --production
"$TOOLS_BIN/vsce" package --no-dependencies --no-update-package-json --out "$OUT" >&2
echo "$OUT"
