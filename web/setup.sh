#!/usr/bin/env bash
# The browser lane's set-up, idempotent: Debian's chromium when missing, and the page's npm packages
# (pinned by package-lock.json) into web/node_modules. Install scripts are skipped: the nested
# onnxruntime-node's would fetch a binary from outside the package registry, and the page needs none.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$HERE"
log() { printf '[gatehouse web] %s\n' "$*" >&2; }

if ! command -v chromium >/dev/null 2>&1; then
  log "installing Debian's chromium"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends chromium >/dev/null
fi

stamp() { cat package.json package-lock.json 2>/dev/null | sha256sum | cut -d' ' -f1; }
if [ "$(stamp)" != "$(cat node_modules/.gatehouse-installed 2>/dev/null || true)" ]; then
  if [ -f package-lock.json ]; then
    log "npm ci (onnxruntime-web, @huggingface/transformers, @wllama/wllama, pinned by package-lock.json)"
    npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
  else
    log "npm install (no lockfile yet: writes package-lock.json)"
    npm install --ignore-scripts --no-audit --no-fund --loglevel=error
  fi
  stamp > node_modules/.gatehouse-installed
fi

# The Python driver for the browser (Playwright drives Debian's chromium; it never downloads one).
# GATEHOUSE_WEB_SKIP_PIP: bin/gatehouse runs this beside its own pip, which installs Playwright with requirements.txt.
PY=${GATEHOUSE_VENV:-$HERE/../.venv}/bin/python
if [ -z "${GATEHOUSE_WEB_SKIP_PIP:-}" ] && [ -x "$PY" ] && ! "$PY" -c "import playwright" >/dev/null 2>&1; then
  log "installing playwright into the virtual environment"
  "$PY" -m pip install -q --disable-pip-version-check "$(grep -E '^playwright==' ../requirements.txt)"
fi
