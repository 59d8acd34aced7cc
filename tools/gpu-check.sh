#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU (a few minutes on one):
# builds with the CUDA path into build-cuda/, runs the CUDA tests (which must
# run, not skip), then ckptdb-gpu-bench: device-to-host staging throughput
# against a plain pinned cudaMemcpy of the same bytes, 1 to 8 GiB of bf16.
#   tools/gpu-check.sh [GiB...]      (default: 1 2 4 8)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/install-deps.sh"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
cmake -S "$root" -B "$root/build-cuda" -DCMAKE_BUILD_TYPE=Release -DCKPTDB_CUDA=ON -DCKPTDB_WERROR=ON >/dev/null
cmake --build "$root/build-cuda" -j "$(nproc)" --target ckptdb_tests ckptdb-gpu-bench
echo "== CUDA tests"
out=$("$root/build-cuda/tests/ckptdb_tests" --gtest_filter='Cuda.*:DeviceStaging*' 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -E '^\[ +(OK|SKIPPED|FAILED) +\]|PASSED|FAILED'
if echo "$out" | grep -q 'SKIPPED.*Cuda\.\(Every\|Cpu\|Sharded\|Resharded\)'; then
  echo "gpu-check: the device tests were skipped: no usable CUDA device" >&2
  exit 1
fi
echo "== staging throughput"
"$root/build-cuda/ckptdb-gpu-bench" "$@"
