#!/usr/bin/env bash
# End-to-end test of the extension in code-server + headless Chromium (see e2e/run.mjs).
#
#   scripts/e2e.sh [--screenshots DIR]
#
# Installs the tools once into ~/.cache/tensor_dap/e2e (scripts/tools.sh), builds the .vsix,
# copies e2e/workspace afresh, fills it with real profiler output (PYTHON, default the repo's
# .venv), installs the extension and a test-only debugpy stand-in into a throw-away code-server
# profile, runs the test, and stops everything it started. With --screenshots the screenshots
# it took replace DIR's (the README's media/screenshots).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$HERE"
SCREENSHOTS=""
if [ "${1:-}" = "--screenshots" ]; then
    SCREENSHOTS="$(mkdir -p "$2" && cd "$2" && pwd)"
fi
PYTHON="${PYTHON:-$HERE/../.venv/bin/python}"
PYTHON="$(command -v "$PYTHON")"
started=$SECONDS

eval "$(scripts/tools.sh e2e)"
RUN="$(mktemp -d "${TMPDIR:-/tmp}/tensor-dap-e2e.XXXXXX")"
CS_PID=""
PREPARE_PID=""
cleanup() {
    if [ -n "$PREPARE_PID" ]; then kill "$PREPARE_PID" 2>/dev/null || true; fi
    if [ -n "$CS_PID" ]; then
        kill -TERM -- "-$CS_PID" 2>/dev/null || true   # code-server and the helpers it started
        sleep 0.5
        kill -KILL -- "-$CS_PID" 2>/dev/null || true
    fi
    if [ "${E2E_KEEP:-}" = "" ]; then rm -rf "$RUN"; else echo "e2e: kept $RUN" >&2; fi
}
trap cleanup EXIT
mkdir -p "$RUN"/{user/User,ext,xdg/config,xdg/data,xdg/cache,tmp,shots}

cp -r e2e/workspace "$RUN/ws"
# Real profiler output for the workspace, made while the extension is built and installed.
"$PYTHON" e2e/prepare_workspace.py "$RUN/ws" >"$RUN/prepare.log" 2>&1 &
PREPARE_PID=$!
scripts/vsix.sh "$RUN/tensor-dap.vsix" >/dev/null 2>"$RUN/vsix.log" || { cat "$RUN/vsix.log" >&2; exit 1; }
(cd e2e/debugpy-standin && "$TOOLS_BIN/vsce" package --no-dependencies --out "$RUN/standin.vsix" >>"$RUN/vsix.log" 2>&1) \
    || { cat "$RUN/vsix.log" >&2; exit 1; }
cat >"$RUN/user/User/settings.json" <<JSON
{
    "tensorDap.pythonPath": "$PYTHON",
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": false,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "workbench.welcomePage.walkthroughs.openOnInstall": false,
    "chat.disableAIFeatures": true,
    "telemetry.telemetryLevel": "off",
    "extensions.autoCheckUpdates": false,
    "extensions.autoUpdate": false,
    "update.mode": "none",
    "security.workspace.trust.enabled": false,
    "window.commandCenter": false,
    "editor.minimap.enabled": false,
    "debug.toolBarLocation": "docked"
}
JSON

export PATH="$NODE24:$PATH" TMPDIR="$RUN/tmp" XDG_CONFIG_HOME="$RUN/xdg/config" XDG_DATA_HOME="$RUN/xdg/data" XDG_CACHE_HOME="$RUN/xdg/cache"
export TENSOR_DAP_E2E_PYTHON="$PYTHON"   # read by the debugpy stand-in
CS=("$CODE_SERVER" --config /dev/null --user-data-dir "$RUN/user" --extensions-dir "$RUN/ext")
"${CS[@]}" --install-extension "$RUN/standin.vsix" --install-extension "$RUN/tensor-dap.vsix" >"$RUN/install.log" 2>&1 \
    || { cat "$RUN/install.log" >&2; exit 1; }
PORT="$(node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")"
setsid "${CS[@]}" --auth none --bind-addr "127.0.0.1:$PORT" --disable-telemetry --disable-update-check \
    --disable-workspace-trust --disable-getting-started-override >"$RUN/code-server.log" 2>&1 &
CS_PID=$!
for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break
    sleep 0.5
done
wait "$PREPARE_PID" || { PREPARE_PID=""; cat "$RUN/prepare.log" >&2; exit 1; }
PREPARE_PID=""
echo "e2e: set-up took $((SECONDS - started)) s" >&2

status=0
E2E_URL="http://127.0.0.1:$PORT" E2E_WORKSPACE="$RUN/ws" E2E_SHOTS="$RUN/shots" TOOLS_NODE_PATH="$TOOLS_NODE_PATH" CHROMIUM="$CHROMIUM" \
    node e2e/run.mjs || status=$?
if [ $status -ne 0 ]; then
    mkdir -p "$HERE/out/e2e-failure"
    cp "$RUN"/shots/*.png "$RUN"/*.log "$HERE/out/e2e-failure/" 2>/dev/null || true
    echo "e2e: FAILED; screenshots and logs in out/e2e-failure/" >&2
    exit $status
fi
if [ -n "$SCREENSHOTS" ]; then
    rm -f "$SCREENSHOTS"/*.png
    cp "$RUN"/shots/*.png "$SCREENSHOTS/"
    echo "e2e: screenshots written to $SCREENSHOTS" >&2
fi
echo "e2e: passed in $((SECONDS - started)) s" >&2
