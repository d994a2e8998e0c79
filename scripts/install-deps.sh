#!/usr/bin/env bash
# Installs what pirq's demo and tests need beyond the Rust toolchain: redis-server (>= 7.0).
# Safe to run repeatedly; does nothing when everything is there.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
echo "install-deps: redis-server not found, installing Debian's redis-server" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root or sudo to apt-get install redis-server" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq redis-server >/dev/null
# Debian's package starts a system-wide server on port 6379; pirq's scripts start their own.
$sudo service redis-server stop >/dev/null 2>&1 || true
redis-server --version
