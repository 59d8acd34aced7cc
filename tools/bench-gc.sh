#!/usr/bin/env bash
# What `ckptdb gc --keep-last 1` gives back on the demo's store, and what it
# costs: saves the demo (tools/demo, 4 ranks) for N steps into one store and
# for 1 step into another (a store that only ever held one step: every demo
# step has the same shapes and stores the same bytes), then, R rounds,
# interleaved, on fresh copies of the N-step store: gc with the rewrite of
# partly used files (the default) and gc without it (--min-unused 1: files
# are only dropped whole, as before the rewrite existed). Prints each store's
# size (whole directory and SST files) as a ratio to the one-step store, and
# the medians (min-max) of gc's wall time.
#   tools/bench-gc.sh [--steps N] [--rounds R] [--dir DIR]
# Needs build/ with ckptdb_cli, ckptdb-demo and ckptdb-launch built.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
steps=4; rounds=5; dir="${TMPDIR:-/tmp}/ckptdb-bench-gc"
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --steps) steps="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "bench-gc.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
b="$root/build"
rm -rf "$dir" && mkdir -p "$dir"
"$b/ckptdb-launch" -n 4 -- "$b/ckptdb-demo" "$dir/steps.ckptdb" --steps "$steps" >/dev/null
"$b/ckptdb-launch" -n 4 -- "$b/ckptdb-demo" "$dir/one.ckptdb" --steps 1 >/dev/null
whole() { du -sb "$1" | cut -f1; }
sst() { find "$1/db" -name '*.sst' -printf '%s\n' | awk '{s += $1} END {print s}'; }
one_whole=$(whole "$dir/one.ckptdb"); one_sst=$(sst "$dir/one.ckptdb")
echo "one-step store: $one_whole bytes ($one_sst in SST files)"
echo "$steps-step store: $(whole "$dir/steps.ckptdb") bytes ($(sst "$dir/steps.ckptdb") in SST files)"
for r in $(seq "$rounds"); do
  for mode in rewrite drop; do
    s="$dir/$mode.ckptdb"
    rm -rf "$s" && cp -a "$dir/steps.ckptdb" "$s"
    extra=(); [ "$mode" = drop ] && extra=(--min-unused 1)
    t0=$(date +%s.%N)
    "$b/ckptdb" gc "$s" --keep-last 1 "${extra[@]}" >/dev/null
    t1=$(date +%s.%N)
    "$b/ckptdb" verify "$s" --all >/dev/null
    echo "$mode $(echo "$t1 - $t0" | bc) $(whole "$s") $(sst "$s")"
  done
done | python3 -c '
import statistics, sys
one_whole, one_sst = '"$one_whole"', '"$one_sst"'
runs = {}
for line in sys.stdin:
    mode, secs, whole, sst = line.split()
    runs.setdefault(mode, []).append((float(secs), int(whole), int(sst)))
for mode, label in (("drop", "gc, files dropped whole only (--min-unused 1)"), ("rewrite", "gc, partly used files rewritten")):
    r = runs[mode]
    t = [x[0] for x in r]
    print(f"{label}: store {statistics.median(x[1] for x in r) / one_whole:.3f}x the one-step store "
          f"(SST files {statistics.median(x[2] for x in r) / one_sst:.3f}x); gc {statistics.median(t):.2f} s "
          f"({min(t):.2f}-{max(t):.2f}), {len(r)} runs")
'
