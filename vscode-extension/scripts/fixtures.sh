#!/usr/bin/env bash
# Generates the unit tests' fixtures into out/fixtures by running the real profilers and
# tensor_dap on test/fixtures/train_small.py. Skipped when the generator and the Python have not
# changed since the last run. PYTHON defaults to the repository's .venv.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$HERE/../.venv/bin/python}"
OUT="$HERE/out/fixtures"
if [ ! -x "$PYTHON" ] && ! command -v "$PYTHON" >/dev/null; then
    echo "fixtures: no Python at $PYTHON (run 'make test' at the top level, or set PYTHON)" >&2
    exit 1
fi
# the whole package is hashed: a report's wording comes from triggers/, a summary line from summary/...
stamp="$( (cat "$HERE/test/fixtures/make_fixtures.py" "$HERE/test/fixtures/profile_runs.py" "$HERE/test/fixtures/train_small.py";
    find "$HERE/../tensor_dap" -name '*.py' -print0 | LC_ALL=C sort -z | xargs -0 cat) | sha256sum | cut -c1-16)-$("$PYTHON" -c 'import sys; print(sys.version_info[:2])' | tr -dc 0-9)"
if [ -f "$OUT/.stamp" ] && [ "$(cat "$OUT/.stamp")" = "$stamp" ]; then
    exit 0
fi
tmp="$(mktemp -d "$HERE/out/.fixtures-XXXXXX" 2>/dev/null || (mkdir -p "$HERE/out" && mktemp -d "$HERE/out/.fixtures-XXXXXX"))"
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" "$HERE/test/fixtures/make_fixtures.py" "$tmp" >"$tmp.log" 2>&1 || { cat "$tmp.log" >&2; rm -f "$tmp.log"; exit 1; }
rm -f "$tmp.log"
echo "$stamp" >"$tmp/.stamp"
rm -rf "$OUT"
mv -T "$tmp" "$OUT"
