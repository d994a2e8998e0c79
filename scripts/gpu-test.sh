#!/usr/bin/env bash
# GPU tests and bench for the CUDA scanner.
#
#   scripts/gpu-test.sh build        # here (no GPU needed): build, strip, copy into .gpu/
#   scripts/gpu-test.sh test [FILTER] # on the GPU machine: parity, epoch and shard tests (PIRQ_GPU_TESTS=1)
#   scripts/gpu-test.sh bench [ARGS] # on the GPU machine: pirq-gpu-bench ARGS
#
# The GPU machine has no cargo: `build` puts the test and bench binaries in .gpu/ (git-ignored),
# which travels with the working tree (`carry: [".gpu"]`). Logs go to $OUT when it is set.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-.gpu/out}"

find_nvrtc() {
    # cudarc loads libnvrtc / libcuda at run time; point it at the toolkit if the loader can't.
    local lib
    lib=$(ldconfig -p 2>/dev/null | grep -m1 -o '/.*libnvrtc\.so[.0-9]*' || true)
    if [[ -z "$lib" ]]; then
        lib=$(find /usr/local/cuda*/ /usr/lib /opt -name 'libnvrtc.so*' 2>/dev/null | head -1 || true)
    fi
    if [[ -n "$lib" ]]; then
        export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        echo "nvrtc: $lib"
    else
        echo "nvrtc: not found (cudarc will search its default paths)"
    fi
}

case "${1:-}" in
build)
    cargo build --release --features cuda -p pirq-scan --bin pirq-gpu-bench
    mkdir -p .gpu
    . scripts/lib/gpu-bundle.sh
    copy_tests .gpu "" --features cuda -p pirq-scan --test gpu_parity --test gpu_epochs --test gpu_shards --test gpu_rotation
    strip .gpu/gpu_parity .gpu/gpu_epochs .gpu/gpu_shards .gpu/gpu_rotation
    cp target/release/pirq-gpu-bench .gpu/pirq-gpu-bench
    strip .gpu/pirq-gpu-bench
    ls -la .gpu
    ;;
test)
    mkdir -p "$out"
    find_nvrtc
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader || true
    shift
    : >"$out/gpu-test.log"
    for t in gpu_parity gpu_epochs gpu_shards gpu_rotation; do
        PIRQ_GPU_TESTS=1 RUST_BACKTRACE=1 ".gpu/$t" --test-threads=1 "$@" 2>&1 | tee -a "$out/gpu-test.log"
    done
    ;;
bench)
    shift
    mkdir -p "$out"
    find_nvrtc
    .gpu/pirq-gpu-bench "$@" 2>&1 | tee "$out/gpu-bench.log"
    ;;
*)
    echo "usage: $0 build | test | bench [pirq-gpu-bench args]" >&2
    exit 2
    ;;
esac
