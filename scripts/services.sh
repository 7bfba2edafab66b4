#!/usr/bin/env bash
# Installs and starts, on loopback only, every server dlock's tests need.
# Safe to run again: it starts only what is not running.
#
#   ZooKeeper  standalone 127.0.0.1:21810 and an ensemble on 21811-21813
#              (scripts/zookeeper.sh)
#   etcd       the binary (tests start their own clusters) and one member on
#              127.0.0.1:23790 (scripts/etcd.sh)
#   Redis      127.0.0.1:6379 (DLOCK_REDIS_ADDR), no persistence. Tests that
#              need servers of their own (Redlock's 5 masters, restarts)
#              start redis-server processes themselves on free ports.
set -euo pipefail

need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "services: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

redis_addr=${DLOCK_REDIS_ADDR:-127.0.0.1:6379}
redis_host=${redis_addr%:*}
redis_port=${redis_addr##*:}
case "$redis_host" in
  127.*|localhost|::1|\[::1\]) ;;
  *) echo "services: DLOCK_REDIS_ADDR must be a loopback address, not $redis_host" >&2; exit 1 ;;
esac
if ! redis-cli -h "$redis_host" -p "$redis_port" ping >/dev/null 2>&1; then
  echo "services: starting Redis on $redis_addr"
  mkdir -p /tmp/dlock-redis
  redis-server --daemonize yes --bind "$redis_host" --port "$redis_port" --save "" --appendonly no \
    --dir /tmp/dlock-redis --logfile /tmp/dlock-redis/redis.log
  for _ in $(seq 50); do
    redis-cli -h "$redis_host" -p "$redis_port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
fi
redis-cli -h "$redis_host" -p "$redis_port" ping >/dev/null || { echo "services: Redis on $redis_addr does not answer" >&2; exit 1; }
echo "services: Redis $redis_addr up"

# ZooKeeper: a standalone server and a 3-node ensemble (scripts/zookeeper.sh).
bash "$(dirname "$0")/zookeeper.sh" start all

# etcd: the tests start clusters of their own from the etcd binary
# (internal/testenv/etcd.go); install it, and start the shared member on
# 127.0.0.1:23790 for manual runs and benchmarks (scripts/etcd.sh).
bash "$(dirname "$0")/etcd.sh" install
bash "$(dirname "$0")/etcd.sh" start
