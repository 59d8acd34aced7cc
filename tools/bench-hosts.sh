#!/usr/bin/env bash
# The many-hosts benchmark (needs root): `ckptdb-bench --scenario hosts` on
# the test bed of tools/hosts.sh (HOSTS network-namespace hosts x PER_HOST
# ranks, each host with its own disk directory for the coordinator-only
# store, every rank bound to its host's address), and the same job on one
# host (every rank on 127.0.0.1), run alternately, ROUNDS times each.
# Prints each job's report (shared store against a store on the
# coordinator's host only, interleaved within the job), then the medians of
# every phase across the rounds and multi-host / one-host ratios.
#   tools/bench-hosts.sh [--size 1GiB] [--repeat 3] [--rounds 2] [--hosts 3] [--per-host 2]
#                        [--build DIR]
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
size=1GiB repeat=3 rounds=2 nhosts=3 per_host=2 build="$src/build"
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --hosts) nhosts="$2"; shift 2 ;;
    --per-host) per_host="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-hosts: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bench="$build/ckptdb-bench"
[ -x "$bench" ] || { echo "bench-hosts: no $bench (build first: tools/test.sh or cmake --build build)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "bench-hosts: needs root (network namespaces)" >&2; exit 2; }
hosts="$src/tools/hosts.sh"
name="ckb$$"
work="$(mktemp -d "$src/.bench-hosts-XXXXXX")"
world=$(( nhosts * per_host ))
cleanup() { "$hosts" down "$name" "$nhosts"; rm -rf "$work"; }
trap cleanup EXIT
"$hosts" up "$name" "$nhosts"

common=(--scenario hosts --size "$size" --repeat "$repeat")
multi_host() {  # OUT: the job on the test bed, each host with its own disk at $work/local
  local out="$1" job="bench-$RANDOM$RANDOM" pids=()
  mkdir -p "$out" "$work/rdv"
  for r in $(seq 0 $(( world - 1 ))); do
    local h=$(( r / per_host ))
    mkdir -p "$work/disk-h$h" "$work/local"
    "$hosts" exec "$name" "$h" unshare -m sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' sh \
      "$work/disk-h$h" "$work/local" env CKPTDB_RANK="$r" CKPTDB_WORLD_SIZE="$world" \
      CKPTDB_RENDEZVOUS="file://$work/rdv" CKPTDB_JOB_ID="$job" CKPTDB_LAUNCH_ID="$job" \
      CKPTDB_BIND_ADDRESS="$("$hosts" addr "$h")" CKPTDB_TIMEOUT_MS=300000 \
      "$bench" --worker "${common[@]}" --dir "$out" --local-dir "$work/local" >"$out/rank-$r.log" 2>&1 &
    pids+=($!)
  done
  local failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  [ "$failed" = 0 ] || { tail -n 5 "$out"/rank-*.log >&2; echo "bench-hosts: a rank failed" >&2; exit 1; }
  rm -rf "$work"/disk-h*/store "$work"/disk-h*/staging
}

for round in $(seq 1 "$rounds"); do
  echo "== round $round: one host, $world ranks (ckptdb-launch, 127.0.0.1)"
  mkdir -p "$work/one-$round"
  "$bench" "${common[@]}" --world "$world" --dir "$work/one-$round" | tee "$work/one-$round.txt"
  echo "== round $round: $nhosts hosts x $per_host ranks (network namespaces, a disk directory per host)"
  multi_host "$work/multi-$round"
  tee "$work/multi-$round.txt" <"$work/multi-$round/report.txt"
done

# Medians over the rounds of each job's medians, and multi-host / one-host.
python3 - "$work" "$rounds" <<'EOF'
import re, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def results(kind):
    out = {}
    for r in range(1, rounds + 1):
        line = [l for l in open(f"{work}/{kind}-{r}.txt") if l.startswith("result ")][0]
        for k, v in re.findall(r"(\w+)=([\d.]+)", line):
            out.setdefault(k, []).append(float(v))
    return {k: statistics.median(v) for k, v in out.items()}
one, multi = results("one"), results("multi")
print(f"\n== across {rounds} round(s): medians (seconds) and ratios")
print(f"{'phase':<14} {'one host':>9} {'many hosts':>11} {'one/many (throughput)':>22}")
for k in ("save_shared", "save_local", "load_shared", "load_local"):
    print(f"{k:<14} {one[k]:9.3f} {multi[k]:11.3f} {one[k] / multi[k]:22.2f}")
for name, d in (("one host", one), ("many hosts", multi)):
    print(f"{name}: coordinator-only / shared throughput: save {d['save_shared'] / d['save_local']:.2f}x "
          f"(aim >= 0.7), load {d['load_shared'] / d['load_local']:.2f}x")
EOF
