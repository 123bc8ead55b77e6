#!/usr/bin/env bash
# One cluster job on one node, as the <project>-cluster-train SSM Command document runs it
# (stacks/components/cluster_job_document.py renders this file into the document). SSM Run
# Command starts it on every node at once; the document's parameters arrive as SSM_* variables
# (interpolationType ENV_VAR: data, never shell), already checked against its allowedPattern.
#
#   SSM_Action=run   refuse if a training container runs here; the node's GPU check (no
#                    CloudFormation signal); the image the node pulled at boot, or with
#                    SSM_ImageTag <repository>:<ImageTag>, pulled now (one try, at most
#                    PULL_SECONDS; a failure is one line with docker's reason); the job laid out
#                    as SageMaker lays it out under $JOBS_DIR/<job>/ml (= /opt/ml in the
#                    container): input/config/{hyperparameters,resourceconfig,inputdataconfig}.json
#                    with the fixed host list, the channels synced from S3 first, the chief's
#                    (node-0's) checkpoints restored; the container waited for, up to the maximum
#                    runtime, its checkpoints synced to <CHECKPOINT_S3_URI><job>/ every 5 minutes and
#                    at shutdown (bootstrap.sh's checkpoint unit, one per run); then the model and
#                    outputs to <OUTPUT_S3_URI><job>/<node>/ and the checkpoints once more. Refused
#                    first (exit 1) where the node's scheduled power-off (its maximum lifetime) comes
#                    before the maximum runtime and the stop are over. The exit code is the container's
#                    (143: stopped, as SageMaker's SIGTERM), so SSM reports each node truthfully;
#                    UPLOAD_FAILED_EXIT (75) when the container exited 0 but its checkpoints,
#                    model or outputs did not reach S3 (one line names which).
#   SSM_Action=stop  SIGTERM into the job's container on this node (120 s to write a checkpoint);
#                    the run's script then uploads and exits 143 by itself. The stop action ends
#                    only when the run's uploads are done (its guard has ended: see below), at
#                    most STOP_ACTION_WAIT s, so a stop that returned is one whose checkpoint
#                    is in S3, even where a cancel handed the uploads to the guard.
#
# A cancel is a SIGKILL. Run Command's CancelCommand and its execution timeout SIGKILL the whole
# process group of the command's shell (amazon-ssm-agent's executers: no SIGTERM, so no trap of
# this script ever runs). The container runs under dockerd, outside that group, and would run on
# with no one to stop it or upload what it wrote. So, once the container starts, a guard in a
# session of its own (setsid: outside the group) waits for this script to end; if the script is
# gone while the container still runs, the guard does what the script would have done after a
# stop: SIGTERM (120 s for a checkpoint), then the uploads, its lines in the node's log
# ($LOG_DIR/boot.log, stream <instance id>/boot). The script leaves the guard a done file once
# its own uploads are over: a script killed after the container ended but before its uploads
# were done (a slow upload outliving the stop's bound) has its uploads done by the guard too.
# Until it is done the guard holds a mark that makes the node refuse a new run. `scripts.cluster_job stop` therefore never cancels first: it sends
# the stop action and waits for the run to end (cancelling only a run that outlives the bound).
#
# The settings and the shared steps (pull_image, prepare_user_code, container_options) are
# bootstrap.sh's, sourced from beside this file on the node (GPUTRAIN_NODE_DIR in tests).
# shellcheck disable=SC2154  # the SSM_* variables are Run Command's (the document's parameters)
set -Eeuo pipefail

# The document's copy of this file removes itself (bash holds it open).
[[ $0 != /tmp/gputrain-job.* ]] || rm -f -- "$0"
# shellcheck source=/dev/null
. "${GPUTRAIN_NODE_DIR:-/opt/gputrain}/bootstrap.sh"
JOBS_DIR=${GPUTRAIN_JOBS_DIR:-/var/lib/gputrain/jobs}
JOB_PREFIX=gputrain-job-
STOP_SECONDS=120
MAX_RUNTIME_LIMIT=169200
PULL_SECONDS=900
UPLOAD_FAILED_EXIT=75
GUARD_POLL_SECONDS=${GPUTRAIN_GUARD_POLL_SECONDS:-5}
STOP_ACTION_WAIT=${GPUTRAIN_STOP_ACTION_WAIT:-840}
JOB_SYNC_UNIT=gputrain-job-checkpoint-sync
# Where systemd keeps a scheduled shutdown (bootstrap.sh's arm_max_lifetime: shutdown --poweroff +N):
# its USEC= line is the power-off time, in microseconds since the epoch.
SHUTDOWN_SCHEDULE=${GPUTRAIN_SHUTDOWN_SCHEDULE:-/run/systemd/shutdown/scheduled}

log() { printf '%s job %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$NODE_NAME" "$*"; }
die() {
  log "ERROR: $*"
  exit 1
}

running_jobs() {
  docker ps --filter "name=^$JOB_PREFIX" --filter "name=^$CONTAINER\$" | awk 'NR > 1 { print $NF }'
}

stop_job() {
  local guard deadline=$((SECONDS + STOP_ACTION_WAIT))
  guard=$(cat "$JOBS_DIR/$JOB_NAME/guard.watch" 2>/dev/null || true)
  # The run's guard by its pid, if that pid is still a guard (a pid left from before a reboot may
  # have been reused by another process).
  [[ $guard =~ ^[0-9]+$ ]] && grep -qs guard_job "/proc/$guard/cmdline" || guard=""
  if [[ " $(running_jobs | tr '\n' ' ') " == *" $JOB_CONTAINER "* ]]; then
    log "stopping $JOB_CONTAINER (SIGTERM, $STOP_SECONDS s to write a checkpoint)"
    docker stop --time "$STOP_SECONDS" "$JOB_CONTAINER" >/dev/null
  elif [[ -z $guard ]]; then
    log "job $JOB_NAME is not running on this node"
    return 0
  fi
  [[ -n $guard ]] || return 0
  # The run's guard outlives its script: it ends once the script's uploads, or its own after a
  # cancel, are done. At most STOP_ACTION_WAIT s from this action's start, the bound that
  # scripts.cluster_job waits for it.
  log "waiting for job $JOB_NAME's uploads on this node (at most $STOP_ACTION_WAIT s from the stop)"
  while kill -0 "$guard" 2>/dev/null; do
    ((SECONDS < deadline)) ||
      die "job $JOB_NAME is still uploading $STOP_ACTION_WAIT s after the stop (guard $guard): see this node's boot log"
    sleep 0.1
  done
  log "job $JOB_NAME has ended on this node, its uploads done"
}

# SageMaker's hyperparameters.json: the job's (a flat JSON object of strings, the document's
# pattern) with script mode's sagemaker_* entries, which prepare_user_code wrote, appended.
write_config() {
  local config=$ML_DIR/input/config hosts="" host channel channels="" script iface open='{' close='}'
  mkdir -p "$config"
  script=$(cat "$config/hyperparameters.json" 2>/dev/null || true)
  if [[ -n $script && $SSM_Hyperparameters != "{}" ]]; then
    printf '%s, %s\n' "${SSM_Hyperparameters%"$close"}" "${script#"$open"}" >"$config/hyperparameters.json"
  elif [[ -z $script ]]; then
    printf '%s\n' "$SSM_Hyperparameters" >"$config/hyperparameters.json"
  fi
  for host in ${TRAINING_HOSTS//,/ }; do hosts+="${hosts:+, }\"$host\""; done
  iface=$(ip route show default 2>/dev/null | awk '{ print $5; exit }' || true)
  printf '{"current_host": "%s", "hosts": [%s], "network_interface_name": "%s", "current_instance_type": "%s"}\n' \
    "$TRAINING_CURRENT_HOST" "$hosts" "${iface:-eth0}" "$TRAINING_INSTANCE_TYPE" >"$config/resourceconfig.json"
  for channel in ${SSM_Channels//,/ }; do
    channels+="${channels:+, }\"${channel%%=*}\": {\"TrainingInputMode\": \"File\", \"S3DistributionType\": \"FullyReplicated\", \"RecordWrapperType\": \"None\"}"
  done
  printf '{%s}\n' "$channels" >"$config/inputdataconfig.json"
}

download_channels() {
  local channel name prefix
  for channel in ${SSM_Channels//,/ }; do
    name=${channel%%=*} prefix=${channel#*=}
    aws s3 sync "$JOB_DATASETS_S3_URI$prefix" "$ML_DIR/input/data/$name" --region "$AWS_REGION" --only-show-errors ||
      die "could not download channel $name from $JOB_DATASETS_S3_URI$prefix"
    log "channel $name: $JOB_DATASETS_S3_URI$prefix"
  done
}

# Every upload is tried; UPLOAD_FAILURES names those that failed (empty: all reached S3).
upload_results() {
  local where=$OUTPUT_S3_URI$JOB_NAME/$NODE_NAME local_dir
  UPLOAD_FAILURES=""
  aws s3 sync "$ML_DIR/checkpoints" "$JOB_CHECKPOINTS" --region "$AWS_REGION" --only-show-errors ||
    UPLOAD_FAILURES+="${UPLOAD_FAILURES:+, }checkpoints to $JOB_CHECKPOINTS"
  for local_dir in model output; do
    aws s3 sync "$ML_DIR/$local_dir" "$where/$local_dir" --region "$AWS_REGION" --only-show-errors ||
      UPLOAD_FAILURES+="${UPLOAD_FAILURES:+, }$local_dir to $where/$local_dir"
  done
}

# The job's own tag of the node's repository (the node role pulls any tag of it): one try, bounded,
# so a tag never pushed fails every node at once in one line, with what docker said.
pull_job_image() {
  local said status=0
  IMAGE_URI=${IMAGE_URI%:*}:$SSM_ImageTag
  said=$({ aws ecr get-login-password --region "$AWS_REGION" |
    docker login --username AWS --password-stdin "${IMAGE_URI%%/*}" >/dev/null &&
    timeout "$PULL_SECONDS" docker pull --quiet "$IMAGE_URI"; } 2>&1) || status=$?
  if ((status == 124)); then
    die "could not pull image tag $SSM_ImageTag ($IMAGE_URI): no pull within $PULL_SECONDS s"
  elif ((status != 0)); then
    said=${said##*$'\n'}
    die "could not pull image tag $SSM_ImageTag ($IMAGE_URI): ${said:-docker said nothing (exit $status)}"
  fi
  log "pulled $IMAGE_URI (this job's ImageTag)"
}

stop_container() { docker stop --time "$STOP_SECONDS" "$JOB_CONTAINER" >/dev/null 2>&1 || true; }

# The node powers itself off at its maximum lifetime (bootstrap.sh), wherever a job is: a run that could
# not reach its maximum runtime and stop before then is refused here, before anything starts, rather than
# killed on the way (a node started again after that lifetime powers off within 15 minutes).
check_lifetime() {
  local usec poweroff left fix="raise cluster.max_lifetime_hours (0: off) and redeploy the cluster"
  usec=$(sed -n 's/^USEC=\([0-9][0-9]*\)$/\1/p' "$SHUTDOWN_SCHEDULE" 2>/dev/null || true)
  [[ -n $usec ]] || return 0
  poweroff=$((usec / 1000000))
  left=$((poweroff - $(date +%s)))
  ((left < SSM_MaxRuntimeSeconds + STOP_SECONDS)) || return 0
  if ((left > STOP_SECONDS)); then fix="run with --max-runtime $((left - STOP_SECONDS)) or less, or $fix"; fi
  die "refused: this node powers off at $(date -u -d "@$poweroff" +%Y-%m-%dT%H:%M:%SZ), $((left / 60)) min from now" \
    "(its maximum lifetime: cluster.max_lifetime_hours=$MAX_LIFETIME_HOURS after its first boot), before MaxRuntimeSeconds" \
    "$SSM_MaxRuntimeSeconds (+$STOP_SECONDS s to stop) is over: $fix"
}

# This run's checkpoints to S3 every 5 minutes and at shutdown, as boot training's are (bootstrap.sh's
# unit, with this run's container, directory and prefix): a power-off mid-run (the maximum lifetime, an
# idle stop) stops the container (a last checkpoint) and uploads it, and a rerun restores from there.
# Not enabled: it never starts at boot; the run (or its guard) stops it when the run ends.
start_checkpoint_sync() {
  install_checkpoint_sync "$JOB_SYNC_UNIT" "$JOB_CONTAINER" "$ML_DIR/checkpoints" "$JOB_CHECKPOINTS" &&
    systemctl start "$JOB_SYNC_UNIT.service" &&
    log "checkpoints to $JOB_CHECKPOINTS every 5 minutes and at shutdown ($JOB_SYNC_UNIT)"
}

# Its stop syncs once more (the unit's ExecStop; the container has ended by now, so its docker stop is
# nothing), and no later sync of this directory can race a rerun's restore.
stop_checkpoint_sync() { systemctl stop "$JOB_SYNC_UNIT.service" >/dev/null 2>&1 || true; }

# The guard (see the header), run by setsid with this script's functions exported: $1 the
# script's pid, $2 the container's id (not its name, which a rerun reuses). Its mark, a file
# holding its pid, is what run_job refuses a new run on.
guard_job() {
  local script=$1 container_id=$2 mark code done_file=$JOBS_DIR/$JOB_NAME/done.$2
  # The stop action waits on this guard's pid; a later run's guard writes its own.
  trap '[[ $(cat "$JOBS_DIR/$JOB_NAME/guard.watch" 2>/dev/null) != "$$" ]] || rm -f "$JOBS_DIR/$JOB_NAME/guard.watch"' EXIT
  while kill -0 "$script" 2>/dev/null; do sleep "$GUARD_POLL_SECONDS"; done
  if [[ -e $done_file ]]; then
    rm -f "$done_file"
    return 0
  fi
  mark=$JOBS_DIR/$JOB_NAME/guard.pid
  echo "$$" >"$mark"
  log "the job's script was killed (Run Command's cancel or execution timeout): stopping $JOB_CONTAINER" \
    "(SIGTERM, $STOP_SECONDS s to write a checkpoint), then its uploads"
  docker stop --time "$STOP_SECONDS" "$container_id" >/dev/null 2>&1 || true
  code=$(docker wait "$container_id" 2>/dev/null) || code="?"
  stop_checkpoint_sync
  upload_results
  log "job $JOB_NAME: the container exited $code after the cancel"
  if [[ -n $UPLOAD_FAILURES ]]; then log "ERROR: upload failed: $UPLOAD_FAILURES"; fi
  rm -f "$mark"
}

start_guard() {
  local container_id=$1
  export -f guard_job log upload_results stop_checkpoint_sync
  export JOBS_DIR JOB_NAME JOB_CONTAINER JOB_CHECKPOINTS ML_DIR STOP_SECONDS GUARD_POLL_SECONDS JOB_SYNC_UNIT
  mkdir -p "$LOG_DIR"
  setsid bash -c 'guard_job "$@"' guard "$$" "$container_id" </dev/null >>"$LOG_DIR/boot.log" 2>&1 &
  # What the stop action waits for (setsid in the background does not fork again: $! is the guard).
  echo "$!" >"$JOBS_DIR/$JOB_NAME/guard.watch"
}

# A guard still stopping or uploading a cancelled job on this node, by its mark: "<job>" or nothing.
guarded_job() {
  local mark
  for mark in "$JOBS_DIR"/*/guard.pid; do
    if [[ -e $mark ]] && kill -0 "$(<"$mark")" 2>/dev/null; then
      basename "$(dirname "$mark")"
      return 0
    fi
  done
}

# The container runs detached and this script waits for it (at most the maximum runtime, then
# SIGTERM). A cancel SIGKILLs this script and its waiter at once (timeout --foreground stays in
# the command's process group; plain timeout would move to a group of its own and outlive it):
# the guard takes over.
wait_for_container() {
  local exit_file=$ML_DIR/../container-exit-code waiter status=0
  timeout --foreground "$SSM_MaxRuntimeSeconds" docker wait "$JOB_CONTAINER" >"$exit_file" &
  waiter=$!
  wait "$waiter" || status=$?
  while kill -0 "$waiter" 2>/dev/null; do wait "$waiter" || status=$?; done
  if ((status == 124)); then
    log "maximum runtime of $SSM_MaxRuntimeSeconds s reached: stopping $JOB_CONTAINER"
    stop_container
    docker wait "$JOB_CONTAINER" >"$exit_file"
  fi
  CONTAINER_EXIT=$(<"$exit_file")
}

run_job() {
  local running guarded container_id
  running=$(running_jobs)
  [[ -z $running ]] || die "refused: $running is running on this node (one job at a time; stop it first)"
  guarded=$(guarded_job)
  [[ -z $guarded ]] || die "refused: cancelled job $guarded is still stopping and uploading on this node" \
    "(see its <instance id>/boot log); run again in a few minutes"
  check_lifetime
  INSTANCE_ID=$(imds instance-id)
  export INSTANCE_ID
  log "job $JOB_NAME on $INSTANCE_ID ($TRAINING_CURRENT_HOST of $TRAINING_HOSTS)"
  env -u STACK_NAME bash "$NODE_DIR/health_check.sh" || die "GPU check failed: the job does not start on this node"
  if [[ -n $SSM_ImageTag ]]; then
    pull_job_image
  else
    pull_image || die "could not pull $IMAGE_URI"
  fi

  ML_DIR=$JOBS_DIR/$JOB_NAME/ml
  # A sync unit still active from an earlier run (none should be) is stopped with its own definition
  # (its container, its directory) before this run's replaces it and before the restore below.
  stop_checkpoint_sync
  # Checkpoints too: every node restores exactly the chief's S3 snapshot below. A local epoch newer
  # than it (a stop's, never uploaded by a worker) would make the nodes restore different epochs.
  rm -rf "$ML_DIR/input" "$ML_DIR/model" "$ML_DIR/output" "$ML_DIR/checkpoints"
  mkdir -p "$ML_DIR/input/data" "$ML_DIR/model" "$ML_DIR/output" "$ML_DIR/checkpoints"
  # shellcheck disable=SC2034  # prepare_user_code's inputs
  CODE_S3_URI=${SSM_CodeKey:+$JOB_ARTIFACTS_S3_URI$SSM_CodeKey} ENTRY_POINT=$SSM_EntryPoint
  prepare_user_code || die "could not prepare the user's code"
  write_config
  download_channels
  aws s3 sync "$CHIEF_CHECKPOINTS" "$ML_DIR/checkpoints" --region "$AWS_REGION" --only-show-errors ||
    log "no checkpoints restored from $CHIEF_CHECKPOINTS"
  # Again, now that the GPU check, the pull (up to PULL_SECONDS) and the downloads have taken their time:
  # the runtime starts only with the container.
  check_lifetime

  docker rm -f "$JOB_CONTAINER" >/dev/null 2>&1 || true
  container_options "$JOB_CONTAINER" "job/$JOB_NAME"
  # A TERM or INT from anything but Run Command (which only SIGKILLs) stops the container first.
  trap 'log "signal: stopping $JOB_CONTAINER"; stop_container' TERM INT
  container_id=$(docker run --detach "${CONTAINER_OPTIONS[@]}" "$IMAGE_URI")
  start_guard "${container_id:-$JOB_CONTAINER}"
  log "started $JOB_CONTAINER from $IMAGE_URI: ${#EFA_DEVICES[@]} EFA device option(s), at most $SSM_MaxRuntimeSeconds s"
  # Without it the run still uploads at its end: a warning, not a reason to stop a started job.
  start_checkpoint_sync || log "WARNING: no periodic checkpoint sync for this run ($JOB_SYNC_UNIT did not start)"
  wait_for_container
  stop_checkpoint_sync
  upload_results
  # (Best effort: without it the guard uploads again, which is harmless.)
  : >"$JOBS_DIR/$JOB_NAME/done.${container_id:-$JOB_CONTAINER}" 2>/dev/null || true
  log "job $JOB_NAME: the container exited $CONTAINER_EXIT"
  if [[ -n $UPLOAD_FAILURES ]]; then
    log "ERROR: upload failed: $UPLOAD_FAILURES"
    # The container's own failure stays the exit code; a success whose results are not in S3 is none.
    ((CONTAINER_EXIT != 0)) || exit "$UPLOAD_FAILED_EXIT"
  fi
  exit "$CONTAINER_EXIT"
}

# The document's patterns already held; checked again here because these values become paths,
# numbers, an image reference and a container's name on the node.
check_parameters() {
  local channel
  [[ $JOB_NAME =~ ^[a-z0-9](-?[a-z0-9]){0,62}$ ]] || die "invalid job name '$JOB_NAME'"
  if ! [[ $SSM_ImageTag =~ ^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$ ]] || [[ ${SSM_ImageTag,,} == latest ]]; then
    die "invalid image tag '$SSM_ImageTag' (never latest)"
  fi
  if ! [[ $SSM_MaxRuntimeSeconds =~ ^[1-9][0-9]{0,5}$ ]] || ((SSM_MaxRuntimeSeconds > MAX_RUNTIME_LIMIT)); then
    die "MaxRuntimeSeconds '$SSM_MaxRuntimeSeconds' is not 1-$MAX_RUNTIME_LIMIT"
  fi
  for channel in ${SSM_Channels//,/ }; do
    # The document's CHANNEL_NAME (SageMaker's names less a leading dot: the name is a directory here).
    [[ $channel =~ ^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}=[A-Za-z0-9_./-]*$ && $channel != *..* ]] ||
      die "invalid channel '$channel'"
  done
}

JOB_NAME=${SSM_JobName:-}
[[ -n ${SSM_Action+set} ]] || die "SSM Agent sets no SSM_* variables: it predates ENV_VAR interpolation (3.3.2746.0); update it"
JOB_CONTAINER=$JOB_PREFIX$JOB_NAME JOB_CHECKPOINTS=$CHECKPOINT_S3_URI$JOB_NAME/
# Every node restores the chief's checkpoints: only the chief keeps its copy (the other workers'
# are temporary), and the trainer refuses workers that restored different epochs.
CHIEF_CHECKPOINTS=${CHECKPOINT_S3_URI%/node-*/}/node-0/$JOB_NAME/
case $SSM_Action in
  stop)
    [[ $JOB_NAME =~ ^[a-z0-9](-?[a-z0-9]){0,62}$ ]] || die "invalid job name '$JOB_NAME'"
    stop_job
    ;;
  run)
    check_parameters
    run_job
    ;;
  *) die "unknown action '$SSM_Action'" ;;
esac
