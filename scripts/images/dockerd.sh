#!/usr/bin/env bash
# Make sure a Docker engine answers on the default socket (docs/images.md).
#   scripts/images/dockerd.sh [ensure]   install Debian's docker.io, debootstrap and
#                                        docker-registry with apt when missing, then start
#                                        dockerd when none answers (idempotent; a running
#                                        dockerd, ours or the system's, is left alone)
#   scripts/images/dockerd.sh stop       stop the dockerd this script started (by its pid file)
# dockerd logs to $ELASTICCTR_DOCKER_STATE/dockerd.log (default ~/.cache/elasticctr/docker).
# Prints the docker client to use (Debian's /usr/bin/docker, which matches its daemon).
set -euo pipefail

STATE="${ELASTICCTR_DOCKER_STATE:-$HOME/.cache/elasticctr/docker}"
PIDFILE="$STATE/dockerd.pid"
LOG="$STATE/dockerd.log"
DOCKER=/usr/bin/docker
mkdir -p "$STATE"

apt_install() {
  # CI runs as root on Debian bookworm; anything else gets a clear message.
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "dockerd.sh: missing $*; install them (Debian: apt-get install $*) or run as root" >&2
    exit 1
  fi
  echo "dockerd.sh: apt-get install $* ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  # One apt at a time on this machine: wait for the dpkg lock instead of failing.
  if ! apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "$@" >&2; then
    apt-get -o DPkg::Lock::Timeout=300 update >&2
    apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "$@" >&2
  fi
}

ensure_packages() {
  local missing=()
  [ -x /usr/sbin/dockerd ] && [ -x "$DOCKER" ] || missing+=(docker.io)
  command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
  [ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
  if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi
}

answers() { "$DOCKER" info >/dev/null 2>&1; }

start() {
  ensure_packages
  if answers; then echo "$DOCKER"; return 0; fi
  # Two callers at once (parallel test workers, helpers): one starts, the other waits.
  exec 9>"$STATE/start.lock"
  flock 9
  if ! answers; then
    echo "dockerd.sh: starting dockerd (log: $LOG) ..." >&2
    # setsid: the daemon outlives the make/pytest process that started it. It must not
    # inherit our other descriptors: a caller's lock (build.sh holds fd 8 on its build
    # lock) would stay held by dockerd for its whole life and block the next build forever.
    (
      for fd in /proc/$BASHPID/fd/*; do
        fd=${fd##*/}
        [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-" 2>/dev/null
      done
      exec setsid /usr/sbin/dockerd >>"$LOG" 2>&1 </dev/null
    ) &
    echo $! >"$PIDFILE"
    local i
    for i in $(seq 1 120); do
      answers && break
      if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        echo "dockerd.sh: dockerd exited; last lines of $LOG:" >&2
        tail -n 20 "$LOG" >&2
        exit 1
      fi
      sleep 0.5
    done
    answers || { echo "dockerd.sh: dockerd did not answer within 60 s (see $LOG)" >&2; exit 1; }
  fi
  flock -u 9
  echo "$DOCKER"
}

stop() {
  [ -f "$PIDFILE" ] || { echo "dockerd.sh: no dockerd started by this script" >&2; return 0; }
  local pid
  pid=$(cat "$PIDFILE")
  if kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
    kill -TERM "$pid"
    local i
    for i in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f "$PIDFILE"
}

case "${1:-ensure}" in
  ensure | start) start ;;
  stop) stop ;;
  *) echo "usage: $0 [ensure|stop]" >&2; exit 2 ;;
esac
