#!/usr/bin/env bash
# Redraws docs/grafana/dlock.svg, the picture of the Grafana dashboard
# docs/grafana/dlock.json, from a real run of about three minutes: see
# internal/tools/dashpic. It installs Debian's Prometheus if it is missing
# (the package's service is left alone: the program runs a Prometheus of
# its own, on a free loopback port, with its data in a temporary folder)
# and needs redis-server, which scripts/services.sh installs.
#
#   bash scripts/dashboard-picture.sh                  # into docs/grafana/dlock.svg
#   bash scripts/dashboard-picture.sh -out /tmp/d.svg -duration 60s
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
if ! command -v prometheus >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
fi
command -v redis-server >/dev/null || { echo "redis-server not found: bash scripts/services.sh installs it" >&2; exit 1; }
exec go run ./internal/tools/dashpic "$@"
