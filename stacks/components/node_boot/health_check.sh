#!/usr/bin/env bash
# GPU health check of a training node, reported to CloudFormation.
#
# Stops at the first failure:
#   1. the NVIDIA driver answers (nvidia-smi is installed and lists GPUs)
#   2. the GPU count equals EXPECTED_GPU_COUNT (the instance type's count)
#   3. a small CUDA computation gives the right answer on every GPU
#   4. NVIDIA's own diagnostics pass: `dcgmi diag -r 1` (DCGM ships on the DLAMI)
#   5. with several GPUs and a floor: the NCCL all-reduce bus bandwidth across all of them
#      (nccl-tests all_reduce_perf) reaches ALLREDUCE_BUSBW_FLOOR_GBPS, the GPU table's floor for
#      the instance type; below it the failure signal carries the measured figure
# Driver and CUDA versions go to the report. The result is signalled to the node's instance
# resource (CreationPolicy) with `aws cloudformation signal-resource`: SUCCESS with the
# instance id, or FAILURE with "<instance id>:<node>:<reason>" as the signal's unique id, so
# the failed deploy names the node and the reason. The reason also goes to the node's log
# group (stream <instance id>/health) and to stderr (boot.log and the console).
#
#   health_check.sh                        run the checks
#   health_check.sh report-failure CODE MSG  report a failure found elsewhere (bootstrap.sh)
#
# Environment (node.env on a node):
#   EXPECTED_GPU_COUNT  required
#   NODE_NAME           default: the host name
#   INSTANCE_ID         signal unique id; default: unknown-instance
#   STACK_NAME, LOGICAL_RESOURCE_ID, AWS_REGION  where to signal; no STACK_NAME: no signal
#   LOG_GROUP           also write the result there
#   GPU_COMPUTE_CMD     runs the computation on the GPU in CUDA_VISIBLE_DEVICES; default:
#                       gpu_compute_check.cu (next to this script) built with the newest CUDA
#                       toolkit on the AMI that both the driver and the GPU support and that holds
#                       nvcc, cuda_runtime.h and a cudart (the next one where a build fails), for the
#                       GPU's own architecture (not whichever toolkit /usr/local/cuda points at)
#   CUDA_TOOLKITS       where toolkits are looked for; default: /usr/local/cuda-* /usr/local/cuda and
#                       the CUDA wheels of python3's site-packages (nvidia/cu13, nvidia/cuda_nvcc: pip's nvcc)
#   HEALTH_REPORT       report file; default /var/log/gputrain/health.env
#   DCGMI_CMD           dcgmi to run; default: dcgmi on PATH
#   ALLREDUCE_BUSBW_FLOOR_GBPS  all-reduce floor in GB/s; empty: no bandwidth test (one GPU)
#   ALLREDUCE_PERF_CMD  nccl-tests' all_reduce_perf; default: on PATH, /opt/nccl-tests/build,
#                       or the DLAMI's /usr/local/cuda*/efa/test-cuda-*/
#   DIAG_TIMEOUT_SECONDS  bound on dcgmi diag and on the all-reduce test each; default 600
# Exit status: 0 healthy, 1 unhealthy, 2 usage error.
set -uo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NODE_NAME=${NODE_NAME:-$(hostname)}
INSTANCE_ID=${INSTANCE_ID:-unknown-instance}
REPORT=${HEALTH_REPORT:-/var/log/gputrain/health.env}
AWS_REGION=${AWS_REGION:-}
mkdir -p "$(dirname "$REPORT")"

log() { printf '%s health %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$NODE_NAME" "$*" >&2; }
record() { printf '%s=%q\n' "$1" "$2" >>"$REPORT"; }

json_string() {
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$(tr '\n\t\r' '   ' <<<"$s")"
}

to_log_group() {
  [[ -n ${LOG_GROUP:-} && -n $AWS_REGION ]] || return 0
  local stream="$INSTANCE_ID/health" now
  now=$(($(date +%s) * 1000))
  aws logs create-log-stream --region "$AWS_REGION" --log-group-name "$LOG_GROUP" \
    --log-stream-name "$stream" >/dev/null 2>&1 || true
  aws logs put-log-events --region "$AWS_REGION" --log-group-name "$LOG_GROUP" \
    --log-stream-name "$stream" --log-events "[{\"timestamp\":$now,\"message\":$(json_string "$1")}]" \
    >/dev/null || log "could not write to log group $LOG_GROUP"
}

signal() { # STATUS UNIQUE_ID
  if [[ -z ${STACK_NAME:-} ]]; then
    log "STACK_NAME not set: not signalling CloudFormation ($1)"
    return 0
  fi
  local attempt out
  for attempt in 1 2 3 4 5; do
    if out=$(aws cloudformation signal-resource --region "$AWS_REGION" --stack-name "$STACK_NAME" \
      --logical-resource-id "$LOGICAL_RESOURCE_ID" --unique-id "$2" --status "$1" 2>&1); then
      log "signalled $1 to $STACK_NAME/$LOGICAL_RESOURCE_ID as $2"
      return 0
    fi
    # A ValidationError will not go away: the resource is not being created (a later boot).
    if [[ $out == *ValidationError* ]]; then
      log "CloudFormation expects no signal now ($out)"
      return 0
    fi
    log "signal attempt $attempt failed: $out"
    sleep $((attempt * 5))
  done
  return 1
}

fail() { # CODE DETAIL
  local unique
  unique=$(printf '%s' "$INSTANCE_ID:$NODE_NAME:$1" | tr -c 'A-Za-z0-9:._-' '_' | cut -c1-64)
  record HEALTH FAILURE
  record REASON "$1: $2"
  log "UNHEALTHY $1: $2"
  to_log_group "$NODE_NAME $INSTANCE_ID FAILURE $1: $2"
  signal FAILURE "$unique"
  exit 1
}

version_le() { # A B: A <= B as versions
  [[ $(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1) == "$1" ]]
}

# The lowest compute capability a CUDA release still compiles for (CUDA 13 dropped everything
# below Turing, 7.5; CUDA 12 below Maxwell, 5.0; CUDA 11 below Kepler, 3.5).
min_compute_capability() {
  local major=${1%%.*}
  if ((major >= 13)); then echo 7.5; elif ((major >= 12)); then echo 5.0; else echo 3.5; fi
}

# The toolkit roots of pip's CUDA wheels (nvcc in nvidia/cu13/bin for CUDA 13, nvidia/cuda_nvcc/bin for
# CUDA 12) in python3's site-packages, where an image has nvcc only from a wheel; none without python3.
pip_cuda_toolkits() {
  local site
  command -v python3 >/dev/null 2>&1 || return 0
  while IFS= read -r site; do
    [[ -n $site ]] && printf '%s/cu13 %s/cuda_nvcc ' "$site" "$site"
  done < <(timeout 20 python3 -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null)
}

# A toolkit root whose nvcc can build the computation: bin/nvcc, include/cuda_runtime.h and a cudart
# in lib64/ or lib/ (pip's wheels may hold an nvcc, or only ptxas, without them). Prints "static LIB"
# for libcudart_static.a (nvcc's default), "shared LIB" for libcudart.so* only (built with -cudart shared).
cuda_toolkit_cudart() { # TOOLKIT
  local lib kind=static name found
  [[ -x $1/bin/nvcc && -f $1/include/cuda_runtime.h ]] || return 1
  for name in libcudart_static.a 'libcudart.so*'; do
    for lib in "$1/lib64" "$1/lib"; do
      for found in "$lib"/$name; do
        [[ -f $found ]] && printf '%s %s' "$kind" "$lib" && return 0
      done
    done
    kind=shared
  done
  return 1
}

# Prints "<nvcc> <toolkit version> <static|shared> <cudart dir>", one line per toolkit that the driver
# runs, that still compiles for the GPU's compute capability and that holds what a build needs, best
# first: the newest CUDA major version, at one major /usr/local's toolkits before pip's wheels
# (nvidia/cu13, nvidia/cuda_nvcc), then the newest. The driver runs a toolkit of its own CUDA major
# version or older (CUDA's minor version compatibility: code built with 13.1 runs on a 13.0 driver),
# and the computation is built for the GPU's own architecture, never JIT-compiled.
cuda_toolkits() { # DRIVER_CUDA COMPUTE_CAPABILITY
  local toolkit real cudart version from seen=" "
  # shellcheck disable=SC2086 # CUDA_TOOLKITS is a list of globs
  for toolkit in ${CUDA_TOOLKITS:-/usr/local/cuda-* /usr/local/cuda $(pip_cuda_toolkits)}; do
    cudart=$(cuda_toolkit_cudart "$toolkit") || continue
    real=$(cd "$toolkit" && pwd -P) || continue
    [[ $seen == *" $real "* ]] && continue # /usr/local/cuda is a link to one of /usr/local/cuda-*
    seen+="$real "
    version=$("$toolkit/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n1)
    [[ -n $version ]] || continue
    ((${version%%.*} <= ${1%%.*})) || continue
    version_le "$(min_compute_capability "$version")" "$2" || continue
    from=1
    [[ $toolkit =~ /nvidia/(cu[0-9]+|cuda_nvcc)/?$ ]] && from=0
    printf '%s %s %s %s %s\n' "${version%%.*}" "$from" "$version" "$toolkit/bin/nvcc" "$cudart"
  done | sort -s -k1,1nr -k2,2nr -k3,3Vr | cut -d' ' -f3-
}

# Builds the computation with the first of TOOLKITS (cuda_toolkits' lines) that can, and prints its
# path; where none can, prints the toolkits tried ("13.1 (/path/bin/nvcc), ...") and fails.
build_compute_check() { # COMPUTE_CAPABILITY TOOLKITS
  local nvcc version cudart lib arch=${1//./} out tried="" link
  out=$(mktemp -d)/gpu_compute_check
  while read -r version nvcc cudart lib; do
    [[ -n $nvcc ]] || continue
    tried+="${tried:+, }$version ($nvcc)"
    link=()
    [[ $cudart == shared ]] && link=(-cudart shared -L"$lib" -Xlinker "-rpath=$lib")
    log "building the GPU computation with CUDA $version ($nvcc, $cudart cudart) for sm_$arch"
    if "$nvcc" -O2 -gencode "arch=compute_$arch,code=sm_$arch" "${link[@]}" -o "$out" "$SCRIPT_DIR/gpu_compute_check.cu" </dev/null >&2; then
      record CUDA_TOOLKIT "$version"
      printf '%s' "$out"
      return 0
    fi
    log "CUDA $version ($nvcc) could not build the GPU computation"
  done <<<"$2"
  printf '%s' "$tried"
  return 1
}

# NVIDIA's own quick deployment diagnostics (software, PCIe/NVLink state, memory, ...).
dcgm_diag() {
  local dcgmi=${DCGMI_CMD:-dcgmi} out failed
  command -v "$dcgmi" >/dev/null 2>&1 ||
    fail dcgm-missing "dcgmi not found: install NVIDIA DCGM (datacenter-gpu-manager; the DLAMI ships it) or set DCGMI_CMD"
  if ! out=$(timeout "${DIAG_TIMEOUT_SECONDS:-600}" "$dcgmi" diag -r 1 2>&1) || grep -qE '\| *Fail' <<<"$out"; then
    failed=$(grep -E '\| *(Fail|Error)|[Ee]rror' <<<"$out" | head -n 3 | tr -s ' |' ' ' | tr '\n' ';')
    fail dcgm-diag-failed "dcgmi diag -r 1 failed: ${failed:-$(tail -n 2 <<<"$out" | tr '\n' ' ')}"
  fi
  record DCGM_DIAG pass
  log "dcgmi diag -r 1 passed"
}

find_allreduce_perf() {
  local candidate
  for candidate in "$(command -v all_reduce_perf 2>/dev/null)" /opt/nccl-tests/build/all_reduce_perf \
    /usr/local/cuda*/efa/test-cuda-*/all_reduce_perf; do
    if [[ -n $candidate && -x $candidate ]]; then
      printf '%s' "$candidate"
      return 0
    fi
  done
  return 1
}

# NCCL all-reduce of 256 MiB across every GPU of the node, one process (nccl-tests -g N): its
# average bus bandwidth is compared with the instance type's floor from the GPU table.
allreduce_bandwidth() { # GPU_COUNT
  local floor=${ALLREDUCE_BUSBW_FLOOR_GBPS:-} perf out busbw
  if (($1 < 2)) || [[ -z $floor ]]; then
    record ALLREDUCE_BUSBW_GBPS none
    return 0
  fi
  perf=${ALLREDUCE_PERF_CMD:-$(find_allreduce_perf)} ||
    fail allreduce-test-missing "nccl-tests all_reduce_perf not found (PATH, /opt/nccl-tests/build, /usr/local/cuda*/efa): set ALLREDUCE_PERF_CMD"
  out=$(timeout "${DIAG_TIMEOUT_SECONDS:-600}" "$perf" -b 256M -e 256M -f 2 -g "$1" -w 5 -n 20 -c 1 2>&1) ||
    fail allreduce-test-failed "all_reduce_perf across $1 GPUs failed: $(tail -n 2 <<<"$out" | tr '\n' ' ' | head -c 300)"
  busbw=$(sed -n 's/^# *Avg bus bandwidth *: *\([0-9][0-9.]*\).*/\1/p' <<<"$out" | head -n 1)
  [[ -n $busbw ]] || fail allreduce-no-figure "all_reduce_perf printed no average bus bandwidth: $(tail -n 2 <<<"$out" | tr '\n' ' ')"
  record ALLREDUCE_BUSBW_GBPS "$busbw"
  record ALLREDUCE_BUSBW_FLOOR_GBPS "$floor"
  if awk -v measured="$busbw" -v floor="$floor" 'BEGIN { exit !(measured < floor) }'; then
    fail "allreduce-busbw-$busbw-below-$floor" \
      "all-reduce bus bandwidth across the $1 GPUs is $busbw GB/s, below the floor of $floor GB/s for ${TRAINING_INSTANCE_TYPE:-this instance type} (gpu_instances.json): a GPU link is down or degraded"
  fi
  log "all-reduce bus bandwidth across $1 GPUs: $busbw GB/s (floor $floor GB/s)"
}

main() {
  if [[ ! ${EXPECTED_GPU_COUNT:-} =~ ^[1-9][0-9]*$ ]]; then
    log "EXPECTED_GPU_COUNT must be a positive number, got '${EXPECTED_GPU_COUNT:-}'"
    exit 2
  fi
  : >"$REPORT"
  record NODE_NAME "$NODE_NAME"
  record INSTANCE_ID "$INSTANCE_ID"
  record EXPECTED_GPU_COUNT "$EXPECTED_GPU_COUNT"

  command -v nvidia-smi >/dev/null 2>&1 ||
    fail driver-missing "nvidia-smi not found: the NVIDIA driver is not installed"
  local gpus
  gpus=$(nvidia-smi --query-gpu=index,uuid,name,driver_version --format=csv,noheader 2>&1) ||
    fail driver-not-responding "nvidia-smi failed: $(head -c 300 <<<"$gpus")"

  local count driver cuda names
  count=$(grep -c . <<<"$gpus")
  driver=$(head -n1 <<<"$gpus" | cut -d, -f4 | tr -d ' ')
  cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n1)
  names=$(cut -d, -f3 <<<"$gpus" | sed 's/^ *//' | sort | uniq -c | sed 's/^ *//' | tr '\n' ';')
  names=${names%;}
  record GPU_COUNT "$count"
  record GPU_MODELS "$names"
  record DRIVER_VERSION "${driver:-unknown}"
  record CUDA_VERSION "${cuda:-unknown}"
  log "driver ${driver:-unknown}, CUDA ${cuda:-unknown}, $count GPU(s): $names"

  ((count == EXPECTED_GPU_COUNT)) ||
    fail "gpu-count-$count-of-$EXPECTED_GPU_COUNT" \
      "nvidia-smi lists $count GPU(s); this instance type has $EXPECTED_GPU_COUNT"

  local compute=${GPU_COMPUTE_CMD:-} index uuid capability toolkits
  if [[ -z $compute ]]; then
    capability=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | sort -V | head -n1 | tr -d ' ')
    [[ $capability =~ ^[0-9]+\.[0-9]+$ ]] ||
      fail compute-capability-unknown "nvidia-smi does not report the GPUs' compute capability ('$capability')"
    record COMPUTE_CAPABILITY "$capability"
    [[ -n $cuda ]] || fail driver-cuda-unknown "nvidia-smi does not report the driver's CUDA version"
    toolkits=$(cuda_toolkits "$cuda" "$capability")
    [[ -n $toolkits ]] ||
      fail no-cuda-toolkit "no CUDA toolkit on this AMI runs on driver $driver (CUDA $cuda) and compiles for compute capability $capability"
    compute=$(build_compute_check "$capability" "$toolkits") ||
      fail cuda-build-failed "nvcc could not build the GPU computation for compute capability $capability (tried: $compute)"
  fi
  while IFS=', ' read -r index uuid _; do
    CUDA_VISIBLE_DEVICES=$uuid "$compute" "gpu$index" </dev/null >&2 ||
      fail "gpu$index-compute-failed" "the test computation failed on GPU $index ($uuid)"
  done <<<"$gpus"
  dcgm_diag
  allreduce_bandwidth "$count"

  record HEALTH SUCCESS
  log "healthy: $count GPU(s) computed correctly, dcgmi diag -r 1 passed"
  to_log_group "$NODE_NAME $INSTANCE_ID SUCCESS driver ${driver:-unknown} CUDA ${cuda:-unknown} $count GPU(s): $names"
  signal SUCCESS "$INSTANCE_ID" || log "WARNING: the success signal did not reach CloudFormation"
}

case ${1:-check} in
  check) main ;;
  report-failure) fail "${2:?code}" "${3:?detail}" ;;
  *)
    echo "usage: $0 [check | report-failure CODE DETAIL]" >&2
    exit 2
    ;;
esac
