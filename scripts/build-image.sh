#!/usr/bin/env bash
# Builds the training image from the real training_image/Dockerfile, with BuildKit.
#
#   scripts/build-image.sh                      # -> gputrain-trainer:local
#   scripts/build-image.sh --tag trainer:dev    # another tag
#   scripts/build-image.sh --standin            # skip the CUDA base even where it can be pulled
#
# The base is the Dockerfile's own (nvidia/cuda:12.5.1-base-ubuntu24.04) when it can be pulled.
# Where no container registry answers, a Debian bookworm base made with mmdebstrap from Debian's
# archive stands in (tagged gputrain-base:debian-bookworm-standin, made once, then reused): it has
# Python 3.11 and no CUDA libraries outside TensorFlow's pip wheels, and the EFA stage (downloads
# from AWS and GitHub) is off (WITH_EFA=0). Every line printed then names the stand-in: such an
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
    -h | --help)
      sed -n '2,19s/^# \{0,1\}//p' "$0"
      exit 0
      ;;
    *) fail "unknown option $1 (see --help)" ;;
  esac
done

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
  else
    # The pull's own last line (no such host, timeout, ...) says why the stand-in is used.
    reason="nvidia/cuda unreachable: $(tail -n 1 <<<"${pulled:-docker pull ran past ${pull_seconds} s}" | cut -c1-200)"
  fi
fi
if [[ -z $reason ]]; then
  base_name=$CUDA_BASE
  prefix="build-image [$CUDA_BASE]"
  say "base: $CUDA_BASE"
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
