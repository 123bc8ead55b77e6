#!/usr/bin/env bash
# The test command. On a fresh machine it first sets up everything (scripts/bootstrap.sh),
# then runs the whole suite: config rules, template assertions, snapshots, policy gates,
# the training entrypoint on CPU, the operator scripts and the emulator lifecycle.
#
#   scripts/test.sh                  # everything
#   scripts/test.sh -m "not slow"    # quick loop
#   scripts/test.sh tests/unit -k cluster
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION=1
exec .venv/bin/python -m pytest "$@"
