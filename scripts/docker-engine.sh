#!/usr/bin/env bash
# A Docker engine that answers on this machine, or one line that says why there is none.
#
#   scripts/docker-engine.sh           # exit 0 once `docker info` answers; 1 with one line on stderr
#
# Where no daemon answers: as root on Debian/Ubuntu, installs Docker from the distribution's own
# packages (docker.io: dockerd, containerd, runc and a docker CLI with BuildKit built in) when
# dockerd is missing, then starts dockerd in the background, detached from this shell so it
# outlives the caller (CI, pytest). Nothing is reconfigured: the daemon's defaults (overlay2,
# the docker0 bridge) are what the image tests use. Its log: $DOCKERD_LOG (default /tmp/dockerd.log).
set -euo pipefail

log=${DOCKERD_LOG:-/tmp/dockerd.log}
wait_seconds=${DOCKERD_WAIT_SECONDS:-30}

say() { echo "docker-engine: $*"; }
fail() {
  echo "docker-engine: $*" >&2
  exit 1
}
answers() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,10s/^# \{0,1\}//p' "$0"
  exit 0
fi
(($# == 0)) || fail "takes no arguments (got: $*)"

if answers; then
  say "running (server $(docker version --format '{{.Server.Version}}' 2>/dev/null || echo unknown))"
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
  ((EUID == 0)) || fail "no Docker daemon answers and dockerd is not installed; installing it needs root (apt-get install docker.io)"
  command -v apt-get >/dev/null 2>&1 || fail "no Docker daemon answers, dockerd is not installed and this is not a Debian/Ubuntu machine (no apt-get)"
  say "installing docker.io with apt-get (log: /tmp/docker-engine-apt.log)"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker.io >/tmp/docker-engine-apt.log 2>&1; then
    # A fresh machine may have no package lists yet.
    apt-get update >>/tmp/docker-engine-apt.log 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker.io >>/tmp/docker-engine-apt.log 2>&1 \
      || fail "apt-get install docker.io failed: $(tail -n 1 /tmp/docker-engine-apt.log)"
  fi
fi

((EUID == 0)) || fail "dockerd is installed but not running, and starting it needs root (or start the docker service)"
started=0
if pgrep -x dockerd >/dev/null 2>&1; then
  say "a dockerd is already running; waiting for it to answer"
else
  say "starting dockerd (log: $log)"
  # setsid: its own session, so a CI step's or a test's process group ending does not take it along.
  setsid nohup dockerd >"$log" 2>&1 </dev/null &
  started=1
fi
for ((i = 0; i < wait_seconds; i++)); do
  if answers; then
    say "running (server $(docker version --format '{{.Server.Version}}' 2>/dev/null || echo unknown))"
    exit 0
  fi
  pgrep -x dockerd >/dev/null 2>&1 || fail "dockerd exited: $(tail -n 1 "$log" 2>/dev/null)"
  sleep 1
done
if ((started)); then
  fail "dockerd did not answer within ${wait_seconds} s: $(tail -n 1 "$log" 2>/dev/null)"
fi
fail "a dockerd runs but does not answer \`docker info\` within ${wait_seconds} s (DOCKER_HOST=${DOCKER_HOST:-its default socket})"
