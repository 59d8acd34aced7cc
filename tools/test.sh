#!/usr/bin/env bash
# Installs what is missing, builds ckptdb into build/ (warnings are errors)
# and runs every test with ctest. Exits non-zero on any failure.
#   tools/test.sh [extra ctest arguments, e.g. -R SaveLoad]
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh
# The Python package's environments (Debian's PyTorch 1.13, and PyTorch 2.x
# from PyPI in a cached virtual environment): the extension is built for the
# latter's Python and tested under both.
venv="$(tools/python-env.sh)"
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCKPTDB_WERROR=ON -DCKPTDB_PYTHON=ON \
  -DPython_EXECUTABLE="$venv/bin/python"
cmake --build build -j "$jobs"
cd build
ctest --output-on-failure -j "$jobs" --timeout 600 "$@"
