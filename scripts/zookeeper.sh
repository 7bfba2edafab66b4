#!/usr/bin/env bash
# ZooKeeper for dlock's tests, on loopback only: installs the Debian package
# `zookeeper` when missing, then starts or stops the project's servers.
#
#   scripts/zookeeper.sh install          install ZooKeeper (and Java) if missing
#   scripts/zookeeper.sh start [what]     start what is not running; what is
#                                         standalone, ensemble or all (default)
#   scripts/zookeeper.sh stop  [what]     stop the servers this script started
#   scripts/zookeeper.sh status           show each server's mode
#
#   standalone  DLOCK_ZK_ADDR      default 127.0.0.1:21810
#   ensemble    DLOCK_ZK_ENSEMBLE  default 127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813
#               quorum ports = client port + 10, election ports = client port + 20
#
# Every server: tickTime 200ms (sessions of 400ms to 60s), admin server off,
# all four-letter words allowed, empty container znodes removed within about
# a second (the default is a minute), 256 MB heap, data and logs under
# DLOCK_ZK_STATE (default /tmp/dlock-zk). Tests that need to stop nodes
# (leader change) start private servers themselves (internal/testenv/zk.go).
set -euo pipefail

state=${DLOCK_ZK_STATE:-/tmp/dlock-zk}
standalone=${DLOCK_ZK_ADDR:-127.0.0.1:21810}
ensemble=${DLOCK_ZK_ENSEMBLE:-127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813}
jar=/usr/share/java/zookeeper.jar
tick=200

log() { echo "zookeeper: $*"; }
die() { echo "zookeeper: $*" >&2; exit 1; }

loopback() {
  case "${1%:*}" in
    127.*|localhost) ;;
    *) die "$2 must hold loopback addresses only, not ${1%:*}" ;;
  esac
}

install() {
  local need=()
  [ -f "$jar" ] || need+=(zookeeper)
  command -v java >/dev/null || need+=(default-jre-headless)
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  [ -f "$jar" ] || die "$jar missing after install"
  # The package ships a system service; the project runs its own servers.
  if command -v systemctl >/dev/null && systemctl is-active --quiet zookeeper 2>/dev/null; then
    systemctl stop zookeeper || true
  fi
}

classpath() {
  local cp=$jar
  [ -f /usr/share/java/slf4j-simple.jar ] && cp="$cp:/usr/share/java/slf4j-simple.jar"
  echo "$cp"
}

# fourletter ADDR WORD prints the server's answer (empty if it does not answer).
fourletter() {
  local host=${1%:*} port=${1##*:}
  timeout 3 bash -c "exec 3<>/dev/tcp/$host/$port && printf %s '$2' >&3 && cat <&3" 2>/dev/null || true
}

mode() { fourletter "$1" srvr | sed -n 's/^Mode: //p'; }

# ours NAME prints the pid of the server NAME this script started, if it runs
# (checked against its command line: a pid file may outlive its process).
ours() {
  local dir="$state/$1" pid
  [ -f "$dir/pid" ] || return 1
  pid=$(cat "$dir/pid")
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/zoo.cfg" || return 1
  echo "$pid"
}

# launch NAME CLIENT_ADDR MYID [SERVER_LINES] writes the config and starts the JVM.
launch() {
  local name=$1 addr=$2 myid=$3 servers=${4:-}
  local dir="$state/$name" port=${addr##*:}
  ours "$name" >/dev/null && return 0
  mkdir -p "$dir/data"
  echo "$myid" >"$dir/data/myid"
  cat >"$dir/zoo.cfg" <<EOF
tickTime=$tick
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$port
clientPortAddress=${addr%:*}
maxClientCnxns=0
minSessionTimeout=$((2 * tick))
maxSessionTimeout=60000
admin.enableServer=false
4lw.commands.whitelist=*
standaloneEnabled=true
reconfigEnabled=false
$servers
EOF
  setsid java -Xmx256m -Xms32m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true \
    -Dzookeeper.admin.enableServer=false -Dznode.container.checkIntervalMs=1000 \
    -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
    -Dorg.slf4j.simpleLogger.showDateTime=true \
    -cp "$(classpath)" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
    >>"$dir/server.log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
}

# wait_serving ADDR... waits until every server serves (standalone, leader or follower).
wait_serving() {
  local a m
  for _ in $(seq 300); do
    local ok=1
    for a in "$@"; do
      m=$(mode "$a")
      case "$m" in standalone|leader|follower) ;; *) ok=0 ;; esac
    done
    [ $ok = 1 ] && return 0
    sleep 0.2
  done
  return 1
}

start_standalone() {
  loopback "$standalone" DLOCK_ZK_ADDR
  if [ "$(mode "$standalone")" = standalone ]; then
    log "standalone $standalone already up"; return
  fi
  log "starting standalone on $standalone"
  launch standalone "$standalone" 1
  wait_serving "$standalone" || die "standalone $standalone did not start; see $state/standalone/server.log"
  log "standalone $standalone up"
}

start_ensemble() {
  local addrs a i=0 servers=""
  IFS=, read -r -a addrs <<<"$ensemble"
  [ ${#addrs[@]} -eq 3 ] || die "DLOCK_ZK_ENSEMBLE must list 3 addresses"
  for a in "${addrs[@]}"; do
    loopback "$a" DLOCK_ZK_ENSEMBLE
    i=$((i + 1))
    local p=${a##*:}
    servers+="server.$i=${a%:*}:$((p + 10)):$((p + 20))"$'\n'
  done
  if wait_serving_now "${addrs[@]}"; then
    log "ensemble $ensemble already up"; return
  fi
  log "starting ensemble on $ensemble"
  i=0
  for a in "${addrs[@]}"; do
    i=$((i + 1))
    launch "ensemble$i" "$a" "$i" "$servers"
  done
  wait_serving "${addrs[@]}" || die "ensemble $ensemble did not form; see $state/ensemble*/server.log"
  log "ensemble $ensemble up (leader: $(for a in "${addrs[@]}"; do [ "$(mode "$a")" = leader ] && echo "$a"; done))"
}

wait_serving_now() {
  local a m
  for a in "$@"; do
    m=$(mode "$a")
    case "$m" in leader|follower) ;; *) return 1 ;; esac
  done
}

stop_one() {
  local pid
  if pid=$(ours "$1"); then
    log "stopping $1 (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$state/$1/pid"
}

status() {
  local a
  echo "standalone $standalone: $(mode "$standalone" | grep . || echo down)"
  IFS=, read -r -a addrs <<<"$ensemble"
  for a in "${addrs[@]}"; do echo "ensemble   $a: $(mode "$a" | grep . || echo down)"; done
}

cmd=${1:-start}
what=${2:-all}
case "$cmd" in
  install) install ;;
  start)
    install
    case "$what" in
      standalone) start_standalone ;;
      ensemble) start_ensemble ;;
      all) start_standalone; start_ensemble ;;
      *) die "start what? standalone, ensemble or all" ;;
    esac ;;
  stop)
    case "$what" in
      standalone) stop_one standalone ;;
      ensemble) stop_one ensemble1; stop_one ensemble2; stop_one ensemble3 ;;
      all) stop_one standalone; stop_one ensemble1; stop_one ensemble2; stop_one ensemble3 ;;
      *) die "stop what? standalone, ensemble or all" ;;
    esac ;;
  status) status ;;
  *) die "usage: $0 install | start [standalone|ensemble|all] | stop [standalone|ensemble|all] | status" ;;
esac
