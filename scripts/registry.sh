#!/usr/bin/env bash
# A real local OCI registry (Debian's docker-registry, the CNCF distribution registry) on
# loopback, for `make publish`, the image tests and the cluster tests (docs/images.md).
#   scripts/registry.sh start STATE_DIR [PORT]   start one (free port when PORT is omitted
#                                               or 0) storing blobs in STATE_DIR/data;
#                                               prints HOST:PORT; a registry already
#                                               running from STATE_DIR is reused
#   scripts/registry.sh address STATE_DIR        print HOST:PORT of the running one
#   scripts/registry.sh stop STATE_DIR           stop it (the data stays in STATE_DIR/data)
# Files in STATE_DIR: config.yml, registry.pid, registry.log, address, data/.
# Plain HTTP on 127.0.0.1: Docker and Helm (--plain-http) accept it for loopback only.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

usage() { echo "usage: $0 start STATE_DIR [PORT] | address STATE_DIR | stop STATE_DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1
STATE=$(mkdir -p "$2" && cd "$2" && pwd)
PIDFILE="$STATE/registry.pid"

running() {
  [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null \
    && [ "$(cat "/proc/$(cat "$PIDFILE")/comm" 2>/dev/null)" = docker-registry ]
}
answers() { curl -fsS -o /dev/null "http://$1/v2/" 2>/dev/null; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  local port=${1:-0}
  if running && [ -s "$STATE/address" ] && answers "$(cat "$STATE/address")"; then
    cat "$STATE/address"
    return 0
  fi
  [ -x /usr/bin/docker-registry ] || "$ROOT/scripts/images/dockerd.sh" >/dev/null
  [ "$port" != 0 ] || port=$(free_port)
  local addr="127.0.0.1:$port"
  mkdir -p "$STATE/data"
  cat >"$STATE/config.yml" <<YAML
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $STATE/data
  delete:
    enabled: true
http:
  addr: $addr
  headers:
    X-Content-Type-Options: [nosniff]
YAML
  setsid /usr/bin/docker-registry serve "$STATE/config.yml" >>"$STATE/registry.log" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  local i
  for i in $(seq 1 100); do
    answers "$addr" && break
    running || { echo "registry.sh: docker-registry exited:" >&2; tail -n 20 "$STATE/registry.log" >&2; exit 1; }
    sleep 0.1
  done
  answers "$addr" || { echo "registry.sh: no answer on $addr within 10 s" >&2; exit 1; }
  echo "$addr" >"$STATE/address"
  echo "$addr"
}

stop() {
  if running; then
    local pid i
    pid=$(cat "$PIDFILE")
    kill -TERM "$pid"
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  rm -f "$PIDFILE" "$STATE/address"
}

case "$cmd" in
  start) start "${3:-0}" ;;
  address) running && cat "$STATE/address" || { echo "registry.sh: none running in $STATE" >&2; exit 1; } ;;
  stop) stop ;;
  *) usage ;;
esac
