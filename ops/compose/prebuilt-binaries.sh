#!/usr/bin/env bash
# Builds pirq's three binaries on this host, exactly as docker/Dockerfile's `build` stage does
# (release, --locked, the worker's and the CLI's `cuda` feature: cudarc loads CUDA at run time),
# and puts them in docker/prebuilt/ for `BINARIES=prebuilt` image builds:
#
#   ops/compose/prebuilt-binaries.sh
#   PIRQ_BINARIES=prebuilt docker compose build
#
# Why: compiling the workspace again inside Docker, from an empty cache, takes tens of minutes on
# a small machine; the host's target/ usually has most of it built already. The images are the
# same either way. The runtime images are Debian bookworm (glibc 2.36), so the host must not have
# a newer glibc (the CUDA image's Ubuntu 24.04 has 2.39: bookworm binaries run there too).
set -euo pipefail
cd "$(dirname "$0")/../.."
glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
if [ "$(printf '%s\n2.36\n' "$glibc" | sort -V | tail -n1)" != 2.36 ]; then
    echo "prebuilt-binaries: this host's glibc $glibc is newer than the images' (2.36, Debian bookworm);" \
         "build inside Docker instead (BINARIES=build, the default)" >&2
    exit 1
fi
cargo build --release --locked --bins \
    -p pirq-gateway -p pirq-worker -p pirq-cli --features pirq-worker/cuda,pirq-cli/cuda
install -D -m 0755 -t docker/prebuilt \
    target/release/pirq-gateway target/release/pirq-worker target/release/pirq
echo "prebuilt-binaries: docker/prebuilt/ has pirq-gateway, pirq-worker, pirq ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', with uncommitted changes'))" >&2
