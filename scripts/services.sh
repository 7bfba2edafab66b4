#!/usr/bin/env bash
# Installs and starts, on loopback only, every server dlock's tests need.
# Safe to run again: it starts only what is not running.
#
#   ZooKeeper  standalone 127.0.0.1:21810 and an ensemble on 21811-21813
#              (scripts/zookeeper.sh)
#   etcd       the binary (tests start their own clusters) and one member on
#              127.0.0.1:23790 (scripts/etcd.sh)
#   NATS       nats-server 2.11 or later (per-key TTL) in /usr/local/bin, for
#              the servers the natslock tests start themselves; Debian's
#              older one, if the machine runs it, is left alone
#   PostgreSQL 127.0.0.1:5432, trust auth, database test (DLOCK_PG_URL)
#   MariaDB    127.0.0.1:3306, root with an empty password, database test
#              (DLOCK_MYSQL_DSN)
#   Redis      127.0.0.1:6379 (DLOCK_REDIS_ADDR), no persistence. Tests that
#              need servers of their own (Redlock's 5 masters, restarts, a
#              Sentinel-managed primary with replicas and sentinels, a
#              Redis Cluster) start redis-server, redis-sentinel and
#              redis-cli --cluster themselves on free loopback ports.
#   S3         versitygw (an S3 gateway over a directory) in /usr/local/bin,
#              for the servers the s3lock tests start themselves
#   Azure Blob Azurite (Microsoft's Blob service emulator, on the machine's
#              Node.js) in /opt/azurite, azurite-blob linked into
#              /usr/local/bin, for the servers the azurelock tests start
#              themselves
#   GCS        fake-gcs-server (a Google Cloud Storage emulator) in
#              /usr/local/bin, for the servers the gcslock tests start
#              themselves
#   Test networks  iproute2 and nftables: the safety suite's partitions
#              run servers in network namespaces of its own (10.213.N.0/24
#              on a bridge dlkbrN it makes and removes), as root; gcc
#              builds the clock shim its clock faults preload.
#   Peers      the lock libraries the interop tests run beside dlock
#              (interop/, docs/INTEROP.md): Apache Curator on the JVM
#              (libcurator-recipes-java), kazoo (python3-kazoo, for
#              Debian's /usr/bin/python3), etcdctl (etcd-client); redsync
#              and bsm/redislock come from the Go module proxy.
set -euo pipefail

need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
command -v redis-sentinel >/dev/null || need_apt+=(redis-sentinel)
command -v pg_ctlcluster >/dev/null || need_apt+=(postgresql)
command -v mariadbd >/dev/null || need_apt+=(mariadb-server)
command -v flock >/dev/null || need_apt+=(util-linux)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v gcc >/dev/null || need_apt+=(gcc)
command -v nft >/dev/null || need_apt+=(nftables)
[ -f /usr/share/java/curator-recipes.jar ] || need_apt+=(libcurator-recipes-java)
command -v javac >/dev/null || need_apt+=(default-jdk-headless)
/usr/bin/python3 -c 'import kazoo' 2>/dev/null || need_apt+=(python3-kazoo)
command -v etcdctl >/dev/null || need_apt+=(etcd-client)
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

# PostgreSQL: start the machine's cluster if it is down; make sure loopback
# connections are trusted and the database test exists.
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  ver=$(ls /etc/postgresql | sort -V | tail -1)
  hba=/etc/postgresql/$ver/main/pg_hba.conf
  if ! grep -qE '^host +all +all +127\.0\.0\.1/32 +trust' "$hba"; then
    sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  fi
  echo "services: starting PostgreSQL $ver"
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start
  for _ in $(seq 100); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.1; done
fi
psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" postgres | grep -q 1 ||
  psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test" postgres >/dev/null
echo "services: PostgreSQL 127.0.0.1:5432 up"

# MariaDB: start it if it is down; root may log in over loopback with an
# empty password; the database test exists.
if ! mariadb-admin -h 127.0.0.1 -uroot ping >/dev/null 2>&1; then
  echo "services: starting MariaDB"
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  for _ in $(seq 100); do
    mariadb-admin --protocol=socket -uroot ping >/dev/null 2>&1 && break
    sleep 0.2
  done
  if ! mariadb-admin -h 127.0.0.1 -uroot ping >/dev/null 2>&1; then
    mariadb --protocol=socket -uroot -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
      GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
      ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('');"
  fi
fi
mariadb -h 127.0.0.1 -uroot -e "CREATE DATABASE IF NOT EXISTS test"
echo "services: MariaDB 127.0.0.1:3306 up"

# ZooKeeper: a standalone server and a 3-node ensemble (scripts/zookeeper.sh).
bash "$(dirname "$0")/zookeeper.sh" start all

# etcd: the tests start clusters of their own from the etcd binary
# (internal/testenv/etcd.go); install it, and start the shared member on
# 127.0.0.1:23790 for manual runs and benchmarks (scripts/etcd.sh).
bash "$(dirname "$0")/etcd.sh" install
bash "$(dirname "$0")/etcd.sh" start

# NATS: the natslock tests start JetStream servers of their own
# (internal/testenv/nats.go) from a nats-server with per-key TTL, which
# came in 2.11. Debian's nats-server (2.9) is older: leave it be, and
# install a pinned release in /usr/local/bin, which the tests look at first.
nats_version=v2.15.2
nats_ok() {
  local v
  v=$(/usr/local/bin/nats-server --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+' | head -1) || return 1
  [ -n "$v" ] || return 1
  local major=${v%%.*} minor=${v#*.}
  [ "$major" -gt 2 ] || { [ "$major" -eq 2 ] && [ "$minor" -ge 11 ]; }
}
if ! nats_ok; then
  echo "services: installing nats-server $nats_version in /usr/local/bin"
  GOBIN=/usr/local/bin go install "github.com/nats-io/nats-server/v2@$nats_version"
fi
nats_ok || { echo "services: /usr/local/bin/nats-server is not 2.11 or later" >&2; exit 1; }
echo "services: $(/usr/local/bin/nats-server --version)"

# S3: the s3lock tests start versitygw gateways of their own
# (internal/testenv/s3.go), each over a temporary directory.
versitygw_version=v1.8.0
versitygw_ok() {
  go version -m /usr/local/bin/versitygw 2>/dev/null | grep -qE "^\s+mod\s+github.com/versity/versitygw\s+$versitygw_version\s"
}
if ! versitygw_ok; then
  echo "services: installing versitygw $versitygw_version in /usr/local/bin"
  GOBIN=/usr/local/bin go install "github.com/versity/versitygw/cmd/versitygw@$versitygw_version"
fi
versitygw_ok || { echo "services: /usr/local/bin/versitygw is not $versitygw_version" >&2; exit 1; }
echo "services: versitygw $versitygw_version"

# Azure Blob: the azurelock tests start Azurite blob services of their own
# (internal/testenv/azure.go), each over a temporary directory.
azurite_version=3.37.0
azurite_ok() {
  [ "$(/usr/local/bin/azurite-blob --version 2>/dev/null)" = "$azurite_version" ]
}
if ! azurite_ok; then
  command -v npm >/dev/null || { apt-get install -y -q nodejs npm >/dev/null; }
  echo "services: installing Azurite $azurite_version in /opt/azurite"
  npm install --prefix /opt/azurite --no-audit --no-fund --loglevel=error "azurite@$azurite_version"
  ln -sf /opt/azurite/node_modules/.bin/azurite-blob /usr/local/bin/azurite-blob
fi
azurite_ok || { echo "services: /usr/local/bin/azurite-blob is not $azurite_version" >&2; exit 1; }
echo "services: Azurite $azurite_version"

# Google Cloud Storage: the gcslock tests start fake-gcs-servers of their
# own (internal/testenv/gcs.go), each over a temporary directory. The
# driver needs no conditional delete or patch, which this version does
# not check.
fakegcs_version=v1.56.1
fakegcs_ok() {
  go version -m /usr/local/bin/fake-gcs-server 2>/dev/null | grep -qE "^\s+mod\s+github.com/fsouza/fake-gcs-server\s+$fakegcs_version\s"
}
if ! fakegcs_ok; then
  echo "services: installing fake-gcs-server $fakegcs_version in /usr/local/bin"
  GOBIN=/usr/local/bin go install "github.com/fsouza/fake-gcs-server@$fakegcs_version"
fi
fakegcs_ok || { echo "services: /usr/local/bin/fake-gcs-server is not $fakegcs_version" >&2; exit 1; }
echo "services: fake-gcs-server $fakegcs_version"
