#!/usr/bin/env bash
# Redraws docs/scaling/: dlock bench --scale on every backend, each on a
# loopback server of this machine, with the sweeps of docs/SCALING.md.
#
#   bash scripts/scale.sh            # all backends, into docs/scaling/
#   OUT=/tmp/s bash scripts/scale.sh redis postgres   # some, elsewhere
#   SCALE_ARGS="--held 1,1000" bash scripts/scale.sh  # other sweeps
#   BENCH=1 bash scripts/scale.sh    # dlock bench (no --scale): every backend
#                                    # side by side, the table on stdout
#
# It starts, on ports of its own and only for the run, the 5 Redis
# masters of redlock:// and a nats-server with JetStream (2.11 or later,
# which scripts/services.sh installs); the others are the servers
# scripts/services.sh starts (Redis 6379, ZooKeeper 21810, etcd 23790,
# PostgreSQL 5432, MariaDB 3306).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
out=${OUT:-docs/scaling}
bash scripts/services.sh >/dev/null

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

redlock=()
for port in 26391 26392 26393 26394 26395; do
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" \
    --dbfilename "r$port.rdb" --loglevel warning >"$tmp/redis-$port.log" 2>&1 &
  pids+=($!)
  redlock+=("127.0.0.1:$port")
done
mkdir -p "$tmp/nats"
/usr/local/bin/nats-server -a 127.0.0.1 -p 24222 -js -sd "$tmp/nats" >"$tmp/nats.log" 2>&1 &
pids+=($!)
for port in 26391 26392 26393 26394 26395; do
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
sleep 1

declare -A url=(
  [file]="file://$tmp/locks"
  [redis]="redis://127.0.0.1:6379"
  [redlock]="redlock://$(IFS=,; echo "${redlock[*]}")"
  [zk]="zk://127.0.0.1:21810"
  [etcd]="etcd://127.0.0.1:23790"
  [postgres]="postgres://postgres@127.0.0.1:5432/test"
  [mysql]="mysql://root@127.0.0.1:3306/test"
  [nats]="nats://127.0.0.1:24222/dlockscale"
)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(file redis redlock zk etcd postgres mysql nats)
args=()
for n in "${names[@]}"; do
  [ -n "${url[$n]:-}" ] || { echo "scale: unknown backend $n; known: ${!url[*]}" >&2; exit 64; }
  args+=(--backend "${url[$n]}")
done
if [ -n "${BENCH:-}" ]; then
  go run ./cmd/dlock bench ${BENCH_ARGS:-} "${args[@]}"
else
  mkdir -p "$out"
  go run ./cmd/dlock bench --scale --out "$out" ${SCALE_ARGS:-} "${args[@]}" | tee "$out/summary.txt"
fi
# The sweeps leave a fence counter per name on the machine's Redis (kept
# for days, as dlock keeps them): remove them, so that they do not slow
# what scans its keyspace (dlock status, the tests).
redis-cli -p 6379 --scan --pattern 'dlock:{dlock-bench/*' | xargs -r -n 1000 redis-cli -p 6379 unlink >/dev/null
