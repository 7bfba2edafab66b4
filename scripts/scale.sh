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
# masters of redlock://, a nats-server with JetStream (2.11 or later), and
# for the object stores (s3, azblob, gs) a versitygw, an Azurite and a
# fake-gcs-server, which scripts/services.sh installs; the others are the
# servers scripts/services.sh starts (Redis 6379, ZooKeeper 21810, etcd
# 23790, PostgreSQL 5432, MariaDB 3306). The object stores are in the
# BENCH=1 table by default and in the sweeps only when named: a sweep
# over thousands of new names waits up to a second for each one's first
# acquisition there.
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

# az_create_container ENDPOINT ACCOUNT KEY CONTAINER: the Blob service's
# Create Container, signed with the account's shared key.
az_create_container() {
  local endpoint=$1 account=$2 key=$3 container=$4 version=2021-08-06 date sts hexkey sig
  date=$(LC_ALL=C TZ=GMT date '+%a, %d %b %Y %H:%M:%S GMT')
  sts=$(printf 'PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:%s\nx-ms-version:%s\n/%s/%s/%s\nrestype:container' \
    "$date" "$version" "$account" "${endpoint#*://*/}" "$container")
  hexkey=$(printf '%s' "$key" | base64 -d | od -An -tx1 | tr -d ' \n')
  sig=$(printf '%s' "$sts" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$hexkey" -binary | base64 -w0)
  curl -s -o /dev/null -X PUT -H "x-ms-date: $date" -H "x-ms-version: $version" -H 'Content-Length: 0' \
    -H "Authorization: SharedKey $account:$sig" "$endpoint/$container?restype=container"
}

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
mkdir -p "$tmp/s3/dlock" "$tmp/az" "$tmp/gcs"
export AWS_ACCESS_KEY_ID=dlockbench AWS_SECRET_ACCESS_KEY=dlockbench-secret AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
versitygw --port 127.0.0.1:27070 --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --quiet posix "$tmp/s3" >"$tmp/s3.log" 2>&1 &
pids+=($!)
# Azurite's development account and its published key.
export AZURE_STORAGE_ACCOUNT=devstoreaccount1
export AZURE_STORAGE_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
azurite-blob --blobHost 127.0.0.1 --blobPort 27071 --location "$tmp/az" --silent --skipApiVersionCheck >"$tmp/az.log" 2>&1 &
pids+=($!)
export STORAGE_EMULATOR_HOST=127.0.0.1:27072
fake-gcs-server -scheme http -host 127.0.0.1 -port 27072 -public-host "$STORAGE_EMULATOR_HOST" \
  -backend filesystem -filesystem-root "$tmp/gcs" -log-level error >"$tmp/gcs.log" 2>&1 &
pids+=($!)
for port in 26391 26392 26393 26394 26395; do
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:27071/ && break; sleep 0.1; done
az_create_container http://127.0.0.1:27071/devstoreaccount1 "$AZURE_STORAGE_ACCOUNT" "$AZURE_STORAGE_KEY" dlock
curl -s -o /dev/null -X POST -d '{"name":"dlock"}' -H 'Content-Type: application/json' \
  "http://$STORAGE_EMULATOR_HOST/storage/v1/b?project=dlock-bench"
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
  [s3]="s3://dlock/bench?endpoint=http://127.0.0.1:27070&path_style=true"
  [azblob]="azblob://dlock/bench?endpoint=http://127.0.0.1:27071/devstoreaccount1"
  [gs]="gs://dlock/bench"
)
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  names=(file redis redlock zk etcd postgres mysql nats)
  [ -z "${BENCH:-}" ] || names+=(s3 azblob gs)
fi
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
