#!/usr/bin/env bash
# Install everything the tests need (idempotent) and run every test.
# Used by the README's test command and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
if [ ! -x "${LAB_CHROMIUM:-/usr/bin/chromium}" ]; then
  # The browser smoke tests drive Debian's Chromium (Playwright cannot download its own here).
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
exec .venv/bin/python -m pytest --durations=15 "$@"
