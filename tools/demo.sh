#!/usr/bin/env bash
# The main job, end to end: installs what is missing, builds Release into
# build/, runs a small training loop as 4 ranks (ckptdb-launch) that saves
# a step per training step into STORE (default ./demo.ckptdb) with its bf16
# weights sharded across the ranks, loads the latest step back on 4 ranks
# and then on 3 (another sharding), checking every byte, then shows the
# store: ckptdb ls, ckptdb verify --all and ckptdb diff of the last two steps.
#   tools/demo.sh [STORE] [--steps N] [--ranks N]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
store="demo.ckptdb"
ranks=4
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --steps) args+=("$1" "${2:?--steps needs a number}"); shift 2 ;;
    --ranks) ranks="${2:?--ranks needs a number}"; shift 2 ;;
    -*) echo "demo.sh: unknown option $1" >&2; exit 2 ;;
    *) store="$1"; shift ;;
  esac
done
verify_ranks=$(( ranks > 1 ? ranks - 1 : 2 ))

"$root/tools/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j "$(nproc 2>/dev/null || echo 2)" --target ckptdb_cli ckptdb-demo ckptdb-launch

b="$root/build"
echo "== training on $ranks ranks, checkpointing into $store"
"$b/ckptdb-launch" -n "$ranks" -- "$b/ckptdb-demo" "$store" "${args[@]}"
echo
echo "== loading the latest step on $verify_ranks ranks (another sharding) and checking it"
"$b/ckptdb-launch" -n "$verify_ranks" -- "$b/ckptdb-demo" "$store" --verify-only
echo
echo "== ckptdb ls $store"
"$b/ckptdb" ls "$store"
echo
echo "== ckptdb verify $store --all"
"$b/ckptdb" verify "$store" --all
last=$("$b/ckptdb" ls "$store" --json | python3 -c 'import json,sys; s=[r["step"] for r in json.load(sys.stdin)]; print(*s[-2:])')
set -- $last
if [ $# -eq 2 ]; then
  echo
  echo "== ckptdb diff $store $1 $2"
  "$b/ckptdb" diff "$store" "$1" "$2"
fi
