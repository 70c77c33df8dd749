#!/usr/bin/env bash
# Install everything the tests need (idempotent) and run every test.
# Used by the README's test command and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
# The browser smoke tests drive Debian's Chromium (Playwright cannot download its own here); torch.compile builds
# the fused optimisers' CPU kernels with a C++ compiler.
NEED=""
[ -x "${LAB_CHROMIUM:-/usr/bin/chromium}" ] || NEED="$NEED chromium"
command -v g++ >/dev/null || NEED="$NEED g++"
if [ -n "$NEED" ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $NEED >/dev/null
fi
# Three test workers on two cores: a browser journey or a job spends much of its time waiting on another process,
# and a worker that waits leaves the core to the others. Four were slower with both cores busy (40 minutes of
# tests against 28) and starved a compiling worker past its heartbeat. The browser journeys share one worker
# (xdist_group "browser") and so do the tests that start a Ray cluster ("ray"): one browser and one cluster at
# a time.
exec .venv/bin/python -m pytest -n 3 --dist loadgroup --durations=15 "$@"
