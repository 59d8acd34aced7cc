#!/usr/bin/env bash
# ckptdb against what people use today, on the same shapes and bytes, in one run:
#   ckptdb-bench           ckptdb's save / load / resharded load / async, plus the
#                          raw write+fsync and raw read of the same bytes
#   torch (PyPI)           torch.distributed.checkpoint save/load (DTensors, gloo,
#                          FileSystemWriter with sync_files) and torch.save per rank
#   ckptdb from Python     ckptdb.save/load/async_save of the same DTensors, and
#                          dcp.save/load through ckptdb.torch's StorageWriter/Reader
#   torch 1.13 (Debian)    ShardedTensor save_state_dict/load_state_dict, the API
#                          ckptdb's protocol comes from
# and prints every ckptdb phase as a ratio to each baseline.
#   tools/bench-peers.sh [--size BYTES] [--world N] [--data fp32|bf16|adam|bytes]
#                        [--compression none|zstd|auto] [--repeat R] [--cols 1024]
# (--cols: columns of every tensor, the same for every system.)
# Installs what it needs: Debian's python3-torch (apt) and torch from PyPI into a
# virtual environment under ${CKPTDB_BENCH_VENV:-~/.cache/ckptdb-bench/venv}.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
size=$((1 << 30)); world=2; data=fp32; compression=none; repeat=3; cols=1024
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --size) size="$2"; shift 2 ;;
    --world) world="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --compression) compression="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --cols) cols="$2"; shift 2 ;;
    *) echo "bench-peers.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

"$root/tools/install-deps.sh"
venv="$("$root/tools/python-env.sh")"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DCKPTDB_PYTHON=ON \
  -DPython_EXECUTABLE="$venv/bin/python" >/dev/null
cmake --build "$root/build" -j "$(nproc)" --target ckptdb-bench _ckptdb ckptdb_python_files >/dev/null

work="$(mktemp -d ./bench-peers-XXXXXX)"
trap 'rm -rf "$work"' EXIT
echo "bench-peers: $((size >> 20)) MiB of $data over $world ranks ($cols columns), $repeat interleaved rounds, compression $compression" >&2
# Round after round, each system once: the machine's drift (disk write-back,
# burst credits) falls on every system alike.
for round in $(seq 1 "$repeat"); do
  echo "bench-peers: round $round of $repeat" >&2
  "$root/build/ckptdb-bench" --size "$size" --world "$world" --data "$data" --compression "$compression" \
    --cols "$cols" --repeat 1 --json > "$work/ckptdb.$round.json"
  PYTHONPATH="$root/build/python" "$venv/bin/python" "$root/tools/bench/bench_torch.py" --size "$size" \
    --world "$world" --data "$data" --cols "$cols" --repeat 1 --round "$round" > "$work/torch.$round.json"
  /usr/bin/python3 "$root/tools/bench/bench_torch.py" --legacy --size "$size" --world "$world" --data "$data" \
    --cols "$cols" --repeat 1 > "$work/torch113.$round.json"
done
python3 "$root/tools/bench/bench_report.py" "$work"
