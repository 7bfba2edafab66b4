#!/usr/bin/env bash
# Installs etcd (Debian package etcd-server) and runs etcd servers for
# dlock on loopback, on the project's own ports. The Go tests need only the
# etcd binary: they start clusters of their own on free ports
# (internal/testenv). The servers this script starts are for manual runs,
# benchmarks and anything pointed at DLOCK_ETCD_ENDPOINTS.
#
#   scripts/etcd.sh [up]         install if missing, then start the single member
#   scripts/etcd.sh install      install etcd-server if etcd is not on PATH
#   scripts/etcd.sh start        one member:  client 127.0.0.1:23790, peer 23800
#   scripts/etcd.sh start-cluster
#                                three members: clients 127.0.0.1:23791-23793,
#                                peers 23801-23803
#   scripts/etcd.sh stop         stop every member this script started
#   scripts/etcd.sh status       health of each member
#   scripts/etcd.sh env          print the DLOCK_ETCD_ENDPOINTS line to export
#
# Data and logs live in $DLOCK_ETCD_DIR (default /tmp/dlock-etcd), one
# directory per member; stop removes them. Timings are short for tests
# (heartbeat 50ms, election 500ms: etcd's shortest lease is then 1s).
# etcd 3.4 has no --unsafe-no-fsync; put DLOCK_ETCD_DIR on tmpfs
# (/dev/shm) to make its syncs free. Starting is idempotent: a member that
# answers is left alone.
set -euo pipefail

dir=${DLOCK_ETCD_DIR:-/tmp/dlock-etcd}
host=127.0.0.1
heartbeat=50
election=500

install() {
  if command -v etcd >/dev/null; then
    return
  fi
  echo "etcd: installing etcd-server"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq etcd-server >/dev/null
  command -v etcd >/dev/null || { echo "etcd: etcd-server installed no etcd binary on PATH" >&2; exit 1; }
}

healthy() { # client port
  local out
  if command -v curl >/dev/null; then
    out=$(curl -fsS --max-time 1 "http://$host:$1/health" 2>/dev/null) || return 1
  else
    out=$(exec 3<>"/dev/tcp/$host/$1" && printf 'GET /health HTTP/1.0\r\nHost: %s\r\n\r\n' "$host" >&3 && timeout 1 cat <&3) || return 1
  fi
  [[ $out == *'"health":"true"'* ]]
}

# start_member name client_port peer_port initial_cluster cluster_token
start_member() {
  local name=$1 cport=$2 pport=$3 initial=$4 token=$5
  if healthy "$cport"; then
    echo "etcd: $name already up on $host:$cport"
    return
  fi
  mkdir -p "$dir/$name"
  nohup etcd --name "$name" --data-dir "$dir/$name/data" \
    --listen-client-urls "http://$host:$cport" --advertise-client-urls "http://$host:$cport" \
    --listen-peer-urls "http://$host:$pport" --initial-advertise-peer-urls "http://$host:$pport" \
    --initial-cluster "$initial" --initial-cluster-state new --initial-cluster-token "$token" \
    --heartbeat-interval "$heartbeat" --election-timeout "$election" \
    --logger zap --log-outputs stderr --log-level warn \
    >"$dir/$name/etcd.log" 2>&1 </dev/null &
  echo $! >"$dir/$name/pid"
}

wait_healthy() { # name client_port
  for _ in $(seq 100); do
    healthy "$2" && { echo "etcd: $1 up on $host:$2"; return; }
    if ! kill -0 "$(cat "$dir/$1/pid")" 2>/dev/null; then
      echo "etcd: $1 exited; its log:" >&2
      tail -n 20 "$dir/$1/etcd.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "etcd: $1 on $host:$2 not healthy after 10s; see $dir/$1/etcd.log" >&2
  exit 1
}

start() {
  install
  start_member single 23790 23800 "single=http://$host:23800" dlock-single
  wait_healthy single 23790
}

start_cluster() {
  install
  local initial="c1=http://$host:23801,c2=http://$host:23802,c3=http://$host:23803"
  for i in 1 2 3; do
    start_member "c$i" "2379$i" "2380$i" "$initial" dlock-cluster
  done
  for i in 1 2 3; do
    wait_healthy "c$i" "2379$i"
  done
}

stop() {
  local pidfile name pid
  for pidfile in "$dir"/*/pid; do
    [ -e "$pidfile" ] || continue
    name=$(basename "$(dirname "$pidfile")")
    pid=$(cat "$pidfile")
    # Only a process that is an etcd this script started, by its pid file.
    if kill -0 "$pid" 2>/dev/null && grep -q "etcd" "/proc/$pid/cmdline" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
      echo "etcd: stopped $name"
    fi
    rm -rf "${dir:?}/$name"
  done
}

status() {
  local name port
  for pair in single:23790 c1:23791 c2:23792 c3:23793; do
    name=${pair%:*} port=${pair#*:}
    if healthy "$port"; then echo "etcd: $name $host:$port healthy"; else echo "etcd: $name $host:$port down"; fi
  done
}

case "${1:-up}" in
  up) start ;;
  install) install ;;
  start) start ;;
  start-cluster) start_cluster ;;
  stop) stop ;;
  status) status ;;
  env) echo "export DLOCK_ETCD_ENDPOINTS=$host:23790" ;;
  *) echo "usage: $0 [up|install|start|start-cluster|stop|status|env]" >&2; exit 2 ;;
esac
