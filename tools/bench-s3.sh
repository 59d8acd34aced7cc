#!/usr/bin/env bash
# ckptdb's bucket stores against AWS's s3torchconnector and the server's own
# throughput, on ONE SeaweedFS server (tools/seaweedfs.sh) started here, in
# interleaved rounds (every system once per round, the order rotated), on the
# same bytes (--size of fp32 in --tensors tensors of --cols columns):
#   ckptdb       ckptdb.save / ckptdb.load of s3://BUCKET/ckptdb-rN; after each
#                load, the step's own objects GET whole by one curl into
#                fresh memory (the same bytes: the load's second baseline)
#   ckptdb_dcp   dcp.save / dcp.load through ckptdb.torch's StorageWriter/Reader
#   s3tc         dcp.save / dcp.load through s3torchconnector's S3StorageWriter/
#                S3StorageReader (path style; --s3tc-threads writer threads)
#   raw          --raw-objects objects of the same bytes PUT, then GET, over as
#                many parallel connections by one curl: the server's rate (and
#                from a thread each by s3torchconnector's client); GET twice:
#                into /dev/null and into fresh files on /dev/shm (memory
#                allocated as the bytes land, as a load into fresh tensors)
# Every save and every load runs in a fresh process into fresh tensors (cold
# for the process; the server's files may be in the page cache). Prints
# medians (min-max), ratios and the CPU seconds the client and the server
# used (the two share this machine's cores); then, once, a resharded read
# (each tensor's left column half, Store.read): its time and CPU seconds,
# then its bytes fetched over bytes needed, counted by a proxy, and a whole
# load's bytes and requests.
#   tools/bench-s3.sh [--size BYTES] [--tensors N] [--cols C] [--repeat R]
#                     [--raw-objects N] [--s3tc-threads N] [--systems LIST]
#   --systems: a comma-separated subset of raw,ckptdb,ckptdb_dcp,s3tc (all)
# Installs s3torchconnector and boto3 into the bench venv when missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
systems=(raw ckptdb ckptdb_dcp s3tc)
size=$((512 << 20)); tensors=8; cols=4096; repeat=5; raw_objects=16; s3tc_threads=8
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --size) size="$2"; shift 2 ;;
    --tensors) tensors="$2"; shift 2 ;;
    --cols) cols="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --raw-objects) raw_objects="$2"; shift 2 ;;
    --s3tc-threads) s3tc_threads="$2"; shift 2 ;;
    --systems) IFS=, read -r -a systems <<< "$2"; shift 2 ;;
    *) echo "bench-s3.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

venv="$("$root/tools/python-env.sh")"
if ! "$venv/bin/python" -c "import s3torchconnector.dcp" 2>/dev/null; then
  "$venv/bin/pip" install -q "s3torchconnector[dcp]" >&2
fi
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DCKPTDB_PYTHON=ON \
  -DPython_EXECUTABLE="$venv/bin/python" >/dev/null
cmake --build "$root/build" -j "$(nproc)" --target _ckptdb ckptdb_python_files >/dev/null

work="$(mktemp -d "${TMPDIR:-/tmp}/bench-s3-XXXXXX")"
server="$work/server"
trap '"$root/tools/seaweedfs.sh" stop "$server"; rm -rf "$work"' EXIT
bucket=bench
# shellcheck source=tools/bench/s3_server.sh
. "$root/tools/bench/s3_server.sh"
bench_s3_server "$server" "$bucket"

mkdir -p "$work/out"
run() {  # run NAME ARGS...: one phase in a fresh process
  local name="$1"; shift
  PYTHONPATH="$root/build/python" OMP_NUM_THREADS=1 "$venv/bin/python" "$root/tools/bench/bench_s3.py" \
    --bucket "$bucket" --size "$size" --tensors "$tensors" --cols "$cols" --raw-objects "$raw_objects" \
    --s3tc-threads "$s3tc_threads" "$@" > "$work/out/$name.json"
}
for s in "${systems[@]}"; do
  case "$s" in raw|ckptdb|ckptdb_dcp|s3tc) ;; *) echo "bench-s3.sh: unknown system $s (raw, ckptdb, ckptdb_dcp, s3tc)" >&2; exit 2 ;; esac
done
# Untimed: the server's first writes allocate its volumes.
run warmup --phase raw --round 0 && rm "$work/out/warmup.json"
echo "bench-s3: $((size >> 20)) MiB fp32 in $tensors tensors of $cols columns, $repeat interleaved rounds," \
  "one SeaweedFS on 127.0.0.1" >&2
for round in $(seq 1 "$repeat"); do
  echo "bench-s3: round $round of $repeat" >&2
  n=${#systems[@]}
  for i in $(seq 0 $((n - 1))); do
    s="${systems[$(((i + round - 1) % n))]}"
    if [ "$s" = raw ]; then
      run "raw.$round" --phase raw --round "$round"
    else
      run "save-$s.$round" --phase save --system "$s" --round "$round"
      run "load-$s.$round" --phase load --system "$s" --round "$round"
    fi
  done
done
run "reshard.1" --phase reshard --round 1
"$venv/bin/python" "$root/tools/bench/bench_s3.py" --report "$work/out"
