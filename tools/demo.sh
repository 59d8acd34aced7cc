#!/usr/bin/env bash
# The main job, end to end: installs what is missing, builds Release into
# build/, trains a small model-like state dict for a few steps saving each one
# into STORE (default ./demo.ckptdb), loads the latest step back and checks
# it bit for bit, then lists the store.
#   tools/demo.sh [STORE] [--steps N]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
store="demo.ckptdb"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --steps) args+=("$1" "${2:?--steps needs a number}"); shift 2 ;;
    -*) echo "demo.sh: unknown option $1" >&2; exit 2 ;;
    *) store="$1"; shift ;;
  esac
done

"$root/tools/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j "$(nproc 2>/dev/null || echo 2)" --target ckptdb_cli ckptdb-demo

echo "== training and checkpointing into $store"
"$root/build/ckptdb-demo" "$store" "${args[@]}"
echo
echo "== ckptdb ls $store"
"$root/build/ckptdb" ls "$store"
echo
echo "== ckptdb ls $store latest"
"$root/build/ckptdb" ls "$store" latest
