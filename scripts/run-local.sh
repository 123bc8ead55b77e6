#!/usr/bin/env bash
# The main job: deploy -> train -> destroy the whole platform on a local AWS emulator, with no
# AWS account. On a fresh machine it first sets everything up (scripts/bootstrap.sh), then runs
# python -m scripts.emulator: moto on loopback, `cdk bootstrap` + `cdk deploy --all` with the
# real CDK CLI, a synthetic dataset in the datasets bucket, a job from the launch script (through
# the deployed training workflow, whose JSONata a local Step Functions executor runs), trained on
# CPU by a local runner playing SageMaker, a summary, `cdk destroy --all` and a teardown audit of
# everything tagged Project=gputrain.
#
#   scripts/run-local.sh                 # the whole flow (under a minute on 2 cores once set up)
#   scripts/run-local.sh --keep          # stop after the summary; explore until Ctrl-C
#   scripts/run-local.sh --sandbox       # delete_data_on_destroy=true: buckets/key/repo go too
#   scripts/run-local.sh --real-account  # same flow on your AWS credentials' account (costs money)
#   scripts/run-local.sh --pipeline      # raw CSV -> pipeline: process -> train, serve, then
#                                        # process -> train -> promote onto the endpoint
#   scripts/run-local.sh --help          # every option
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION=1
exec .venv/bin/python -m scripts.emulator "$@"
