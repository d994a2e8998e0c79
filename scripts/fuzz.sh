#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time (default 30 s each) and fails on any crash.
#   scripts/fuzz.sh [SECONDS]
# cargo-fuzz needs nightly-only flags; the machine has one stable toolchain, so we let stable
# accept them with RUSTC_BOOTSTRAP=1 and build without a sanitizer (-s none): libFuzzer's
# coverage guidance still works, and Rust's own checks (bounds, overflow in debug-assertions)
# turn bugs into the panics we look for.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi
export RUSTC_BOOTSTRAP=1
for target in $(cargo fuzz list); do
  echo "fuzz: $target for ${seconds}s"
  mkdir -p "fuzz/corpus/$target"
  log="fuzz/$target.log"
  if ! cargo fuzz run -s none --debug-assertions "$target" "fuzz/corpus/$target" -- \
      -max_total_time="$seconds" -max_len=4200 -print_final_stats=1 >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz: $target failed; crash inputs are in fuzz/artifacts/$target" >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units" "$log" | sed "s/^/fuzz: $target /"
done
echo "fuzz: all targets clean"
