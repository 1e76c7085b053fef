#!/usr/bin/env bash
# The extension's benchmark: a 50,000-function .prof (< 1 s) and a 100 MB trace summary (< 5 s),
# each beside a baseline. Inputs are generated once into out/bench (PYTHON, default the repo's .venv).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$HERE"
export PYTHON="${PYTHON:-$HERE/../.venv/bin/python}"
scripts/deps.sh
node build.mjs --tests
"$PYTHON" bench/make_inputs.py out/bench-inputs 2>/dev/null
node out/bench/bench.js out/bench-inputs
