#!/usr/bin/env bash
# The GPU checks: the CUDA tests (which must run, not skip) and
# ckptdb-gpu-bench (SaveAsync's device-to-host staging against a plain pinned
# cudaMemcpy of the same bytes, 1 to 8 GiB of bf16, and a sync save from
# device against host tensors). A few minutes on one GPU.
#
#   tools/gpu-check.sh [GiB...]
#       On a GPU machine that can build: installs the Debian packages,
#       builds build-cuda/ with CKPTDB_CUDA=ON, runs the checks.
#   tools/gpu-check.sh --bundle DIR
#       On a machine that can build but has no GPU (the development
#       machines): builds build-cuda/ and packs the two programs with every
#       shared library they load, the C library and its loader included,
#       into DIR (about 30 MiB), for a GPU machine that cannot install
#       packages or build (the lent H200 machines: nothing can be fetched
#       there, and their image has none of ckptdb's Debian libraries).
#   tools/gpu-check.sh --from-bundle DIR [GiB...]
#       On that GPU machine: runs the checks from DIR, through the bundled
#       loader, so the machine's own C library and packages do not matter
#       (only its NVIDIA driver, libcuda, is taken from the system).
#
# The device tool of these workplaces: once here, `tools/gpu-check.sh
# --bundle .gpu-bundle` (ignored by git), then one run with carry
# [".gpu-bundle"] and the command `tools/gpu-check.sh --from-bundle
# .gpu-bundle`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
programs=(tests/ckptdb_tests ckptdb-gpu-bench)

build() {
  "$root/tools/install-deps.sh"
  cmake -S "$root" -B "$root/build-cuda" -DCMAKE_BUILD_TYPE=Release -DCKPTDB_CUDA=ON -DCKPTDB_WERROR=ON >/dev/null
  cmake --build "$root/build-cuda" -j "$(nproc)" --target ckptdb_tests ckptdb-gpu-bench
}

# check TESTS_COMMAND... -- BENCH_COMMAND... : runs both, fails when the
# device tests did not run.
check() {
  local tests=() bench=()
  while [ "$1" != "--" ]; do tests+=("$1"); shift; done
  shift
  bench=("$@")
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  echo "== CUDA tests"
  local out
  out=$("${tests[@]}" --gtest_filter='Cuda.*:DeviceStaging*' 2>&1) || { echo "$out"; exit 1; }
  grep -E '^\[ +(OK|SKIPPED|FAILED) +\]|PASSED|FAILED' <<<"$out"
  # The device tests must have run and passed, not skipped (nor be missing,
  # as in a build without CKPTDB_TEST_CUDA).
  local t
  for t in EveryDTypeRoundTripsOnTheDevice CpuSavedLoadsIntoGpuAndBack ReshardedLoadIntoGpuShards \
           ShardedGpuTensorsAcrossRanksAndAsyncSave; do
    if ! grep -q "^\[       OK \] Cuda\.$t " <<<"$out"; then
      echo "gpu-check: Cuda.$t did not run and pass (no usable CUDA device?)" >&2
      exit 1
    fi
  done
  echo "== staging throughput"
  "${bench[@]}"
}

case "${1:-}" in
  --bundle)
    dir="${2:?usage: tools/gpu-check.sh --bundle DIR}"
    build
    rm -rf "$dir"
    mkdir -p "$dir/bin" "$dir/lib"
    for p in "${programs[@]}"; do
      cp "$root/build-cuda/$p" "$dir/bin/"
      if ldd "$root/build-cuda/$p" | grep -q 'not found'; then
        ldd "$root/build-cuda/$p" | grep 'not found' >&2
        echo "gpu-check: $p needs libraries this machine lacks" >&2
        exit 1
      fi
      # Every library the dynamic loader resolves.
      ldd "$root/build-cuda/$p" | awk '/=> \//{print $3}' | while read -r lib; do cp -L "$lib" "$dir/lib/"; done
    done
    # All of this machine's C library beside libc.so.6, since the driver's
    # libcuda (loaded at run time) needs libdl and librt, which must come
    # from the same glibc as the bundled libc and loader.
    libc_dir="$(dirname "$(ldd "$root/build-cuda/ckptdb-gpu-bench" | awk '/libc\.so\.6 => /{print $3}')")"
    for l in libdl.so.2 librt.so.1 libpthread.so.0 libresolv.so.2 libutil.so.1 libm.so.6; do
      if [ -e "$libc_dir/$l" ]; then cp -L "$libc_dir/$l" "$dir/lib/"; fi
    done
    cp -L "$(ldd "$root/build-cuda/ckptdb-gpu-bench" | awk '/ld-linux/{print ($3 ~ /^\//) ? $3 : $1}' | head -1)" \
      "$dir/lib/ld-linux-x86-64.so.2"
    chmod +x "$dir/lib/ld-linux-x86-64.so.2" "$dir/bin/"*
    echo "gpu-check: bundle in $dir ($(du -sh "$dir" | cut -f1)); on the GPU machine: tools/gpu-check.sh --from-bundle $dir"
    ;;
  --from-bundle)
    dir="$(cd "${2:?usage: tools/gpu-check.sh --from-bundle DIR [GiB...]}" && pwd)"
    shift 2
    # The bundle's libraries first; then where the driver's libcuda may be
    # (the system's ld.so.cache is searched after these).
    libpath="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/nvidia/lib64:/usr/local/nvidia/lib:/usr/lib/x86_64-linux-gnu"
    run() { "$dir/lib/ld-linux-x86-64.so.2" --library-path "$libpath" "$dir/bin/$1" "${@:2}"; }
    check run ckptdb_tests -- run ckptdb-gpu-bench "$@"
    ;;
  *)
    build
    check "$root/build-cuda/tests/ckptdb_tests" -- "$root/build-cuda/ckptdb-gpu-bench" "$@"
    ;;
esac
