#!/usr/bin/env bash
# Builds the training image from the real training_image/Dockerfile, with BuildKit.
#
#   scripts/build-image.sh                      # -> gputrain-trainer:local
#   scripts/build-image.sh --tag trainer:dev    # another tag
#   scripts/build-image.sh --standin            # skip the CUDA base even where it can be pulled
#   scripts/build-image.sh --production         # the image GPU nodes run: CUDA base, WITH_EFA=1, or a one-line refusal
#
# --production builds only the image that ships: the Dockerfile's CUDA base and its EFA stage
# (WITH_EFA=1: AWS's EFA installer, its checksum verified, installed without --minimal). Before it
# touches Docker it checks that the base's registry (registry-1.docker.io) and AWS's download host
# (efa-installer.amazonaws.com) answer, and where either does not it refuses in one line: it never
# falls back to the stand-in. (PyPI must answer too, as for every build.)
#
# The base is the Dockerfile's own (nvidia/cuda:12.5.1-base-ubuntu24.04) when it can be pulled.
# Where no container registry answers, a Debian bookworm base made with mmdebstrap from Debian's
# archive stands in (tagged gputrain-base:debian-bookworm-standin, made once, then reused): it has
# Python 3.11 and no CUDA libraries outside TensorFlow's pip wheels, and the EFA stage (a download
# from AWS) is off (WITH_EFA=0). Every line printed then names the stand-in: such an
# image trains, serves and processes on CPU, and is for tests, never for a GPU node or a registry.
#
# The machine's CA bundle (PIP_CERT, REQUESTS_CA_BUNDLE, SSL_CERT_FILE, or the system bundle) goes
# to pip as the BuildKit secret "ca": mounted for pip's steps only, in no layer.
# Docker itself comes from scripts/docker-engine.sh (installed and started where it can be).
# The build's full log: $BUILD_IMAGE_LOG (default /tmp/build-image.log). Exit 0 with the image's
# size and build time as the last lines; non-zero with the build's last lines otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

CUDA_BASE=$(sed -n 's/^ARG CUDA_BASE_IMAGE=//p' training_image/Dockerfile)
STANDIN_BASE=gputrain-base:debian-bookworm-standin
tag=gputrain-trainer:local
standin_only=0
production=0
log=${BUILD_IMAGE_LOG:-/tmp/build-image.log}
pull_seconds=${PULL_TIMEOUT_SECONDS:-30}

prefix="build-image"
say() { echo "$prefix: $*"; }
fail() {
  echo "$prefix: $*" >&2
  exit 1
}

while (($#)); do
  case $1 in
    --tag)
      (($# >= 2)) || fail "--tag needs a value"
      tag=$2
      shift 2
      ;;
    --standin)
      standin_only=1
      shift
      ;;
    --production)
      production=1
      shift
      ;;
    -h | --help)
      # The comment block at the top of this file.
      awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
      exit 0
      ;;
    *) fail "unknown option $1 (see --help)" ;;
  esac
done

# The hosts the production build downloads from, checked before anything touches Docker.
production_hosts_answer() {
  local efa_version efa_url said
  command -v curl >/dev/null 2>&1 || fail "--production checks its download hosts with curl, which is not installed"
  efa_version=$(sed -n 's/^ARG EFA_INSTALLER_VERSION=//p' training_image/Dockerfile)
  efa_url="https://efa-installer.amazonaws.com/aws-efa-installer-${efa_version}.tar.gz"
  # Any HTTP answer from the registry will do (401 without a token); the installer must exist (2xx).
  if ! said=$(curl --silent --show-error --output /dev/null --max-time "$pull_seconds" https://registry-1.docker.io/v2/ 2>&1); then
    fail "--production refused: registry-1.docker.io (the registry of $CUDA_BASE) did not answer ($(tail -n 1 <<<"$said" | cut -c1-160)); the production image (CUDA base, WITH_EFA=1) can only be built where it and efa-installer.amazonaws.com answer"
  fi
  if ! said=$(curl --fail --silent --show-error --head --output /dev/null --max-time "$pull_seconds" "$efa_url" 2>&1); then
    fail "--production refused: efa-installer.amazonaws.com did not answer for $efa_url ($(tail -n 1 <<<"$said" | cut -c1-160)); the production image (CUDA base, WITH_EFA=1) can only be built where it answers"
  fi
}

if ((production)); then
  ((standin_only == 0)) || fail "--production and --standin exclude each other: the stand-in is never the production image"
  production_hosts_answer
fi

bash scripts/docker-engine.sh >&2 || fail "no Docker engine (the line above says why)"

# A docker CLI that builds with BuildKit: one with the buildx plugin, or a CLI from before 23.0,
# whose BuildKit client is built in (Debian's docker.io). A 23+ CLI without buildx cannot.
build_cmd=()
while read -r cli; do
  if "$cli" buildx version >/dev/null 2>&1; then
    build_cmd=("$cli" buildx build --load)
    break
  fi
  major=$("$cli" version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1 || true)
  if [[ $major =~ ^[0-9]+$ ]] && ((major < 23)); then
    build_cmd=(env DOCKER_BUILDKIT=1 "$cli" build)
    break
  fi
done < <(type -ap docker)
((${#build_cmd[@]})) || fail "no docker CLI here builds with BuildKit: install the buildx plugin, or Debian's docker.io CLI"

ca_bundle=""
for candidate in "${PIP_CERT:-}" "${REQUESTS_CA_BUNDLE:-}" "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
  if [[ -n $candidate && -s $candidate ]]; then
    ca_bundle=$candidate
    break
  fi
done

dockerfile=training_image/Dockerfile
build_args=()
reason="--standin"
if ((standin_only == 0)); then
  if docker image inspect "$CUDA_BASE" >/dev/null 2>&1; then
    reason=""
  elif pulled=$(timeout "$pull_seconds" docker pull --quiet "$CUDA_BASE" 2>&1); then
    reason=""
  elif ((production)); then
    fail "--production: docker pull $CUDA_BASE failed: $(tail -n 1 <<<"${pulled:-docker pull ran past ${pull_seconds} s}" | cut -c1-200)"
  else
    # The pull's own last line (no such host, timeout, ...) says why the stand-in is used.
    reason="nvidia/cuda unreachable: $(tail -n 1 <<<"${pulled:-docker pull ran past ${pull_seconds} s}" | cut -c1-200)"
  fi
fi
if [[ -z $reason ]]; then
  base_name=$CUDA_BASE
  prefix="build-image [$CUDA_BASE]"
  say "base: $CUDA_BASE"
  if ((production)); then
    prefix="build-image [production: $CUDA_BASE, WITH_EFA=1]"
    build_args+=(--build-arg WITH_EFA=1)
  fi
else
  base_name=debian-bookworm-standin
  prefix="build-image [debian-bookworm stand-in]"
  say "base: debian-bookworm stand-in ($reason): GPU libraries absent, EFA stage off; for tests on CPU only"
  if docker image inspect "$STANDIN_BASE" >/dev/null 2>&1; then
    say "stand-in base $STANDIN_BASE: already made, reused"
  else
    if ! command -v mmdebstrap >/dev/null 2>&1; then
      if ((EUID != 0)) || ! command -v apt-get >/dev/null 2>&1; then
        fail "making the stand-in base needs mmdebstrap (apt-get install mmdebstrap, as root)"
      fi
      say "installing mmdebstrap with apt-get"
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mmdebstrap >>"$log.apt" 2>&1 \
        || fail "apt-get install mmdebstrap failed: $(tail -n 1 "$log.apt")"
    fi
    say "making the stand-in base $STANDIN_BASE with mmdebstrap (Debian's archive, ~1 min)"
    mmdebstrap --quiet --variant=minbase --include=ca-certificates bookworm - 2>"$log.mmdebstrap" \
      | docker import --message "debian bookworm minbase: stand-in for $CUDA_BASE" - "$STANDIN_BASE" >/dev/null \
      || fail "mmdebstrap | docker import failed: $(tail -n 1 "$log.mmdebstrap")"
  fi
  build_args+=(--build-arg "CUDA_BASE_IMAGE=$STANDIN_BASE" --build-arg WITH_EFA=0)
  # The syntax directive names a frontend image on Docker Hub, unreachable like the CUDA base: the
  # daemon's built-in Dockerfile frontend builds the same file (RUN --mount included) without it.
  tmp_dockerfile=$(mktemp)
  trap 'rm -f "$tmp_dockerfile"' EXIT
  sed '1s|^# syntax=.*|# (syntax directive dropped by scripts/build-image.sh: registry unreachable)|' "$dockerfile" >"$tmp_dockerfile"
  dockerfile=$tmp_dockerfile
fi

if [[ -n $ca_bundle ]]; then
  build_args+=(--secret "id=ca,src=$ca_bundle")
  say "CA bundle $ca_bundle: given to pip as a BuildKit secret (in no layer)"
fi
build_args+=(--label "gputrain.base=$base_name")

say "building $tag with ${build_cmd[*]:0:3}... (full log: $log)"
start=$SECONDS
set +e
"${build_cmd[@]}" --progress=plain "${build_args[@]}" -f "$dockerfile" -t "$tag" training_image >"$log" 2>&1 &
build_pid=$!
# Progress: each build step once, as it starts, with the seconds since the build began.
declare -A seen=()
step_pattern='^#[0-9]+ (\[.*)'
while IFS= read -r line; do
  [[ $line =~ $step_pattern ]] || continue
  step=${BASH_REMATCH[1]}
  [[ -z ${seen[$step]:-} ]] || continue
  seen[$step]=1
  say "$(printf '%4d s' $((SECONDS - start))) ${step:0:110}"
done < <(tail -n +1 -F --pid="$build_pid" "$log" 2>/dev/null)
wait "$build_pid"
status=$?
set -e
elapsed=$((SECONDS - start))
if ((status != 0)); then
  tail -n 30 "$log" >&2
  fail "build FAILED after ${elapsed} s (exit $status; full log: $log)"
fi

size=$(docker image inspect --format '{{.Size}}' "$tag")
say "largest layers:"
docker history --no-trunc --format '{{.Size}}\t{{.CreatedBy}}' "$tag" \
  | sort -h -r | head -n 3 | while IFS=$'\t' read -r layer_size created_by; do
    say "  $layer_size  $(cut -c1-90 <<<"${created_by:-(the base image)}")"
  done
say "image $tag: $(awk -v b="$size" 'BEGIN { printf "%.2f GB", b / 1e9 }') ($size bytes), built in ${elapsed} s"
