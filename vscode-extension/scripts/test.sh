#!/usr/bin/env bash
# The extension's whole test: type check, unit tests on real profiler output, then the
# end-to-end test in code-server (scripts/e2e.sh). PYTHON: the project's venv by default.
# E2E=0 skips the end-to-end part (it needs the cached tools, installed on first use).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$HERE"
export PYTHON="${PYTHON:-$HERE/../.venv/bin/python}"
started=$SECONDS
scripts/deps.sh
npx tsc -p .  # on separate lines: set -e ignores a failure on the left of &&
npx tsc -p ui
node build.mjs --tests
scripts/fixtures.sh
node --test --test-reporter=spec out/test/
echo "extension: types and unit tests passed in $((SECONDS - started)) s" >&2
if [ "${E2E:-1}" != 0 ]; then
    scripts/e2e.sh
fi
echo "extension: all tests passed in $((SECONDS - started)) s" >&2
