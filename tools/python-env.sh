#!/usr/bin/env bash
# Makes the Python environments the Python package is built and tested with,
# once, and prints the virtual environment's directory:
#   - Debian's python3 with python3-torch (PyTorch 1.13: ShardedTensor),
#     numpy, pytest and the headers (python3-dev), from apt;
#   - a virtual environment with torch 2.x from PyPI (DTensor, DCP), numpy,
#     pytest, nanobind and scikit-build-core, under
#     ${CKPTDB_BENCH_VENV:-~/.cache/ckptdb-bench/venv} (a few GiB the first
#     time; reused after). tools/bench-peers.sh uses the same one.
#   tools/python-env.sh            # prints the venv directory
set -euo pipefail

need=()
for p in python3-dev python3-venv python3-pip python3-torch python3-numpy python3-pytest; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then need+=("$p"); fi
done
if [ ${#need[@]} -gt 0 ]; then
  echo "python-env: installing ${need[*]} (apt)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

venv="${CKPTDB_BENCH_VENV:-$HOME/.cache/ckptdb-bench/venv}"
if ! "$venv/bin/python" -c 'import torch.distributed.checkpoint, numpy' 2>/dev/null; then
  echo "python-env: installing torch from PyPI into $venv (a few GiB, once)" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q torch numpy >&2
fi
if ! "$venv/bin/python" -c 'import nanobind, scikit_build_core, pytest' 2>/dev/null; then
  echo "python-env: installing nanobind, scikit-build-core and pytest into $venv" >&2
  "$venv/bin/pip" install -q nanobind scikit-build-core pytest >&2
fi
echo "$venv"
