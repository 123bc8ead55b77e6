#!/usr/bin/env bash
# Boot sequence of a GPU training node. cloud-init runs it on every boot (the user data that
# stacks/components/node_user_data.py renders); the node's settings are in node.env beside it.
#
#   1. arm the maximum-lifetime shutdown (cost guard; counted from the node's first boot)
#   2. start the CloudWatch agent: GPU utilization for the idle alarm, logs to the log group
#      (installed, when the AMI lacks it, at the pinned CW_AGENT_VERSION and only after its
#      signature verified against AWS's key, CW_AGENT_KEY_FINGERPRINT)
#   3. GPU health check, signalled to CloudFormation (health_check.sh); unhealthy: stop here
#   4. pull the training image from ECR (after the signal: a missing image does not fail the
#      deploy of healthy hardware; it is logged and training is not started)
#   5. START_TRAINING=true: start the training container with all GPUs and the host list;
#      with CODE_S3_URI and ENTRY_POINT, the container runs that user script (script mode)
#
#   bootstrap.sh                   the boot sequence
#   bootstrap.sh sync-checkpoints [DIR S3_URI]
#                                  copy /opt/ml/checkpoints (DIR) to CHECKPOINT_S3_URI (S3_URI) (the
#                                  systemd unit, every 5 minutes; a failure is logged and retried, it
#                                  never changes the node's health, which is decided at boot)
#   bootstrap.sh start-training    (re)start the training container on a healthy node;
#                                  GPUTRAIN_CODE_S3_URI / GPUTRAIN_ENTRY_POINT override the code
#
# GPUTRAIN_* variables move the node's paths (tests run the sequence in a sandbox).
set -Eeuo pipefail

NODE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
set -a
# shellcheck source=/dev/null
. "${GPUTRAIN_ENV_FILE:-$NODE_DIR/node.env}"
CODE_S3_URI=${GPUTRAIN_CODE_S3_URI:-${CODE_S3_URI:-}}
ENTRY_POINT=${GPUTRAIN_ENTRY_POINT:-${ENTRY_POINT:-}}
TF_USE_LEGACY_KERAS=${TF_USE_LEGACY_KERAS:-0}
set +a
LOG_DIR=${GPUTRAIN_LOG_DIR:-/var/log/gputrain}
STATE_DIR=${GPUTRAIN_STATE_DIR:-/var/lib/gputrain}
SYSTEMD_DIR=${GPUTRAIN_SYSTEMD_DIR:-/etc/systemd/system}
ML_DIR=${GPUTRAIN_ML_DIR:-/opt/ml}
CW_AGENT_CTL=${GPUTRAIN_CW_AGENT_CTL:-/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl}
export HEALTH_REPORT=${HEALTH_REPORT:-$LOG_DIR/health.env}
LIFETIME_GRACE_MINUTES=15
CONTAINER=gputrain-training

log() { printf '%s boot %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$NODE_NAME" "$*"; }

imds() {
  local token
  token=$(curl -fsS --max-time 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' \
    http://169.254.169.254/latest/api/token)
  curl -fsS --max-time 5 -H "X-aws-ec2-metadata-token: $token" "http://169.254.169.254/latest/meta-data/$1"
}

# Any unexpected error of the boot sequence before the health signal fails the node with the
# failing line, rather than leaving CloudFormation to wait for the signal timeout. Only boot()
# sets this trap: sync-checkpoints runs later, from systemd, and must never report the node.
signalled=false
on_error() {
  log "ERROR at line $1"
  if [[ $signalled == false ]]; then
    signalled=true
    bash "$NODE_DIR/health_check.sh" report-failure "boot-error-line-$1" "bootstrap.sh failed at line $1" || true
  fi
}

arm_max_lifetime() {
  if ((MAX_LIFETIME_HOURS == 0)); then
    log "maximum lifetime: off"
    return 0
  fi
  local stamp=$STATE_DIR/first-boot-epoch now minutes
  now=$(date +%s)
  [[ -s $stamp ]] || echo "$now" >"$stamp"
  minutes=$((($(<"$stamp") + MAX_LIFETIME_HOURS * 3600 - now) / 60))
  # A node restarted after its deadline gets a short grace period for inspection.
  ((minutes >= LIFETIME_GRACE_MINUTES)) || minutes=$LIFETIME_GRACE_MINUTES
  shutdown --poweroff "+$minutes" "gputrain: maximum lifetime of ${MAX_LIFETIME_HOURS}h reached"
  log "maximum lifetime: powering off in $minutes minutes (the instance stops)"
}

# The agent package, its detached signature and AWS's public key come from the regional
# bucket (the VPC reaches it through the S3 gateway endpoint). The key is trusted only if its
# fingerprint is the one AWS documents, and the package only if that key signed it.
install_cloudwatch_agent() {
  local dir base package="amazon-cloudwatch-agent.deb" status
  dir=$(mktemp -d)
  base="https://amazoncloudwatch-agent-$AWS_REGION.s3.$AWS_REGION.amazonaws.com"
  fetch() { curl -fsS --retry 3 --max-time 300 -o "$dir/$1" "$2"; }
  if ! { fetch "$package" "$base/ubuntu/amd64/$CW_AGENT_VERSION/$package" &&
    fetch "$package.sig" "$base/ubuntu/amd64/$CW_AGENT_VERSION/$package.sig" &&
    fetch agent.gpg "$base/assets/amazon-cloudwatch-agent.gpg"; }; then
    log "could not download CloudWatch agent $CW_AGENT_VERSION"
    rm -rf "$dir"
    return 1
  fi
  mkdir -m 0700 "$dir/gnupg"
  status=$(gpg --homedir "$dir/gnupg" --batch --quiet --import "$dir/agent.gpg" 2>&1 &&
    gpg --homedir "$dir/gnupg" --batch --status-fd 1 --verify "$dir/$package.sig" "$dir/$package" 2>/dev/null) || true
  if ! grep -Eq "^\[GNUPG:\] VALIDSIG .*\b$CW_AGENT_KEY_FINGERPRINT\b" <<<"$status"; then
    log "CloudWatch agent $CW_AGENT_VERSION NOT installed: no valid signature by key $CW_AGENT_KEY_FINGERPRINT"
    rm -rf "$dir"
    return 1
  fi
  dpkg -i -E "$dir/$package" >/dev/null || return 1
  rm -rf "$dir"
  log "installed CloudWatch agent $CW_AGENT_VERSION (signature verified)"
}

start_cloudwatch_agent() {
  if [[ ! -x $CW_AGENT_CTL ]]; then
    install_cloudwatch_agent || return 1
  fi
  "$CW_AGENT_CTL" -a fetch-config -m ec2 -s -c "file:$NODE_DIR/cloudwatch-agent.json" >/dev/null || return 1
  log "CloudWatch agent running: GPU metrics and logs to $LOG_GROUP"
}

pull_image() {
  local attempt
  for attempt in 1 2 3; do
    if aws ecr get-login-password --region "$AWS_REGION" |
      docker login --username AWS --password-stdin "${IMAGE_URI%%/*}" >/dev/null &&
      docker pull --quiet "$IMAGE_URI"; then
      log "pulled $IMAGE_URI"
      return 0
    fi
    sleep $((attempt * 30))
  done
  return 1
}

# $1 $2: the checkpoints and where they go (default: boot training's; a cluster job's are its own).
sync_checkpoints() {
  local dir=${1:-$ML_DIR/checkpoints} uri=${2:-$CHECKPOINT_S3_URI}
  mkdir -p "$dir"
  if ! aws s3 sync "$dir" "$uri" --region "$AWS_REGION" --only-show-errors; then
    log "WARNING: checkpoint sync to $uri failed; the next sync retries"
    return 1
  fi
}

# The unit $1 that syncs $3 to $4 every 5 minutes and, when it stops (at shutdown: the maximum
# lifetime, an idle stop), stops container $2 (120 s for a last checkpoint) and syncs once more.
# Boot training's by default; cluster_job.sh writes one per run. The caller starts it.
install_checkpoint_sync() {
  local unit=${1:-gputrain-checkpoint-sync} container=${2:-$CONTAINER} dir=${3:-$ML_DIR/checkpoints}
  local uri=${4:-$CHECKPOINT_S3_URI}
  cat >"$SYSTEMD_DIR/$unit.service" <<EOF
[Unit]
Description=gputrain: copy $dir to $uri every 5 minutes and at shutdown
Wants=network-online.target
After=network-online.target docker.service

[Service]
ExecStart=/bin/bash -c 'while sleep 300; do $NODE_DIR/bootstrap.sh sync-checkpoints $dir $uri; done'
ExecStop=-/usr/bin/docker stop --time 120 $container
ExecStop=$NODE_DIR/bootstrap.sh sync-checkpoints $dir $uri
TimeoutStopSec=900

[Install]
WantedBy=multi-user.target
EOF
  systemctl daemon-reload
}

# Script mode: the user's sourcedir.tar.gz becomes the container's code channel, and
# hyperparameters.json carries what the SageMaker SDK would set, so the image runs the script
# (after its GPU check) instead of a built-in model; several nodes get MultiWorkerMirroredStrategy.
prepare_user_code() {
  local code_dir=$ML_DIR/input/data/code config_dir=$ML_DIR/input/config multi_worker=false
  if [[ -z $CODE_S3_URI && -z $ENTRY_POINT ]]; then
    return 0
  fi
  if [[ -z $CODE_S3_URI || -z $ENTRY_POINT ]]; then
    log "ERROR: script mode needs both CODE_S3_URI and ENTRY_POINT (got '$CODE_S3_URI', '$ENTRY_POINT')"
    return 1
  fi
  mkdir -p "$code_dir" "$config_dir" || return 1
  aws s3 cp "$CODE_S3_URI" "$code_dir/sourcedir.tar.gz" --region "$AWS_REGION" --only-show-errors || return 1
  if [[ $TRAINING_HOSTS == *,* ]]; then multi_worker=true; fi
  printf '{"sagemaker_program": "%s", "sagemaker_submit_directory": "/opt/ml/input/data/code/sourcedir.tar.gz", "sagemaker_multi_worker_mirrored_strategy_enabled": "%s"}\n' \
    "$ENTRY_POINT" "$multi_worker" >"$config_dir/hyperparameters.json" || return 1
  log "script mode: $ENTRY_POINT from $CODE_S3_URI (multi-worker: $multi_worker)"
}

# The training container's docker options, shared with the cluster jobs (cluster_job.sh): every
# GPU, host networking (workers reach each other at the node addresses in TRAINING_HOSTS), the
# EFA devices, the container contract's variables, ML_DIR as /opt/ml and the output in the log
# group. $1: the container's name, $2: its log stream after the instance id.
container_options() {
  local dev
  EFA_DEVICES=()
  for dev in /dev/infiniband/uverbs*; do
    if [[ -e $dev ]]; then EFA_DEVICES+=(--device "$dev"); fi
  done
  CONTAINER_OPTIONS=(--name "$1" --gpus all --network host --ipc host
    --ulimit memlock=-1 --ulimit stack=67108864 "${EFA_DEVICES[@]}"
    --env EXPECTED_GPU_COUNT --env TRAINING_HOSTS --env TRAINING_CURRENT_HOST
    --env TRAINING_WORKER_PORT --env TRAINING_INSTANCE_TYPE --env SAGEMAKER_BASE_DIR=/opt/ml
    --env TF_USE_LEGACY_KERAS
    --volume "$ML_DIR:/opt/ml"
    --log-driver awslogs --log-opt "awslogs-region=$AWS_REGION"
    --log-opt "awslogs-group=$LOG_GROUP" --log-opt "awslogs-stream=$INSTANCE_ID/$2")
}

start_training() {
  mkdir -p "$ML_DIR/checkpoints" "$ML_DIR/model" "$ML_DIR/output"
  if ! prepare_user_code; then
    log "ERROR: could not prepare the user's code; training not started"
    return 1
  fi
  aws s3 sync "$CHECKPOINT_S3_URI" "$ML_DIR/checkpoints" --region "$AWS_REGION" --only-show-errors ||
    log "no checkpoints restored from $CHECKPOINT_S3_URI"
  docker rm -f "$CONTAINER" >/dev/null 2>&1 || true
  container_options "$CONTAINER" training
  docker run --detach "${CONTAINER_OPTIONS[@]}" "$IMAGE_URI" >/dev/null
  install_checkpoint_sync
  systemctl enable --now gputrain-checkpoint-sync.service
  log "training started: $TRAINING_CURRENT_HOST of $TRAINING_HOSTS, ${#EFA_DEVICES[@]} EFA device option(s)"
}

boot() {
  trap 'on_error $LINENO' ERR
  mkdir -p "$LOG_DIR" "$STATE_DIR"
  exec > >(tee -a "$LOG_DIR/boot.log") 2>&1
  INSTANCE_ID=$(imds instance-id)
  export INSTANCE_ID
  log "boot of $INSTANCE_ID ($NODE_NAME, $TRAINING_CURRENT_HOST)"
  arm_max_lifetime
  start_cloudwatch_agent || log "WARNING: CloudWatch agent not running: no idle stop for this boot"

  signalled=true
  if ! bash "$NODE_DIR/health_check.sh"; then
    log "node unhealthy: not pulling the image, not starting training"
    exit 1
  fi
  if ! pull_image; then
    log "ERROR: could not pull $IMAGE_URI (pushed yet?); training not started"
    exit 1
  fi
  if [[ $START_TRAINING == true ]]; then
    start_training || exit 1
  else
    log "ready; start_training_on_boot is off"
  fi
}

# cluster_job.sh sources this file for its functions and settings; only a run dispatches.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  case ${1:-boot} in
    boot) boot ;;
    sync-checkpoints) sync_checkpoints "${@:2}" ;;
    start-training)
      mkdir -p "$LOG_DIR"
      INSTANCE_ID=$(imds instance-id)
      start_training
      ;;
    *)
      echo "usage: $0 [boot | sync-checkpoints [DIR S3_URI] | start-training]" >&2
      exit 2
      ;;
  esac
fi
