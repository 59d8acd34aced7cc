#!/usr/bin/env bash
# `pip install ./python` as a user would: into a fresh virtual environment
# of Debian's python3 (which sees Debian's numpy and PyTorch 1.13), building
# the extension with the project's CMake through scikit-build-core (its build
# requirements come from PyPI); then, from another directory, the installed
# package saves and loads a step, ships its type stubs, and the `ckptdb`
# command of the same tree lists the step.
#   tests/python_install_test.sh SOURCE_DIR
set -euo pipefail
src="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "$src/python" 2>&1 | tail -20
cd "$work"
"$work/venv/bin/python" - <<'PY'
import os, ckptdb, numpy as np
import ckptdb._ckptdb as ext
assert "site-packages" in ckptdb.__file__, ckptdb.__file__
pkg = os.path.dirname(ckptdb.__file__)
for f in ("_ckptdb.pyi", "py.typed"):
    assert os.path.exists(os.path.join(pkg, f)), f"{f} is not installed"
a = np.arange(1000, dtype=np.float32).reshape(10, 100)
ckptdb.save({"a": a, "meta": {"epoch": 3}}, "store", 7)
b = {"a": np.zeros_like(a), "meta": {"epoch": None}}
assert ckptdb.load(b, "store") == 7
assert (b["a"] == a).all() and b["meta"] == {"epoch": 3}
assert [s.step for s in ckptdb.Store("store").steps()] == [7]
print("python_install_test: pip install ./python, save, load: ok")
PY
