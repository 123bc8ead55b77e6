#!/usr/bin/env bash
# The test command. On a fresh machine it first sets up everything (scripts/bootstrap.sh),
# then runs the whole suite: config rules, template assertions, snapshots, policy gates,
# the training entrypoint on CPU, the operator scripts and the emulator lifecycle.
#
#   scripts/test.sh                  # everything
#   scripts/test.sh -m "not slow"    # quick loop
#   scripts/test.sh tests/unit -k cluster
#
# Two pytest workers (pytest-xdist) where the machine has two cores or more, each running whole
# groups of tests (a module, or the folders tests/conftest.py keeps together); PYTEST_WORKERS=N
# sets the number, PYTEST_WORKERS=1 runs everything in this one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION=1
cores=$(nproc 2>/dev/null || echo 1)
workers=${PYTEST_WORKERS:-$(( cores >= 2 ? 2 : 1 ))}
if (( workers > 1 )); then
  exec .venv/bin/python -m pytest -n "$workers" "$@"
fi
exec .venv/bin/python -m pytest "$@"
