#!/usr/bin/env bash
# The test command. On a fresh machine it first sets up everything (scripts/bootstrap.sh),
# then runs the whole suite: config rules, template assertions, snapshots, policy gates,
# the training entrypoint on CPU, the operator scripts and the emulator lifecycle.
#
#   scripts/test.sh                  # everything
#   scripts/test.sh -m "not slow"    # quick loop
#   scripts/test.sh tests/unit -k cluster
#
# Tests run in one pytest worker per core (pytest-xdist, at most 4; PYTEST_WORKERS=1 runs them in
# this process), a test module at a time per worker (tests/conftest.py groups them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION=1
workers=${PYTEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}
(( workers > 4 )) && workers=4
if (( workers > 1 )); then
  exec .venv/bin/python -m pytest -n "$workers" --dist loadgroup "$@"
fi
exec .venv/bin/python -m pytest "$@"
