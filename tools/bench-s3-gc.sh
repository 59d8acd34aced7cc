#!/usr/bin/env bash
# What `ckptdb gc` gives back in a bucket, and what it costs: the fine-tuning
# case of issue 35 (a frozen bf16 tensor saved once, an adapter that changes
# every step, --steps steps under keep_last=2, deduplicated) saved into two
# fresh stores per round on ONE SeaweedFS server (tools/seaweedfs.sh) started
# here, then gc on each, interleaved (which runs first alternates):
#   rewrite   gc as it is: partly used objects rewritten (--min-unused 0.05)
#   drop      gc with --min-unused 1: objects are only deleted whole, what
#             gc did in a bucket before the rewrite existed
# Both run with --abandoned-after 0, so that what a rewrite replaced is
# deleted by the same gc (with the default, a gc an hour later deletes it).
# Prints, as medians (min-max) over the rounds: the bucket's data bytes over
# one step's logical bytes before and after gc (the kept steps use 1.25x),
# gc's wall and CPU seconds (the CLI's and the server's, from /proc), and
# gc's requests (counted by a proxy). Every kept step is verified after gc.
#   tools/bench-s3-gc.sh [--rounds R] [--steps N] [--frozen-mib F] [--changing-mib C]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds=3; steps=12; frozen=24; changing=8
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --frozen-mib) frozen="$2"; shift 2 ;;
    --changing-mib) changing="$2"; shift 2 ;;
    *) echo "bench-s3-gc.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

venv="$("$root/tools/python-env.sh")"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DCKPTDB_PYTHON=ON \
  -DPython_EXECUTABLE="$venv/bin/python" >/dev/null
cmake --build "$root/build" -j "$(nproc)" --target _ckptdb ckptdb_python_files ckptdb_cli >/dev/null

work="$(mktemp -d "${TMPDIR:-/tmp}/bench-s3-gc-XXXXXX")"
server="$work/server"
trap '"$root/tools/seaweedfs.sh" stop "$server"; rm -rf "$work"' EXIT
bucket=bench
# shellcheck source=tools/bench/s3_server.sh
. "$root/tools/bench/s3_server.sh"
bench_s3_server "$server" "$bucket"
BENCH_S3_GC_TOOLS="$root/tools/bench" PYTHONPATH="$root/build/python" OMP_NUM_THREADS=1 "$venv/bin/python" - "$root/build/ckptdb" "$bucket" \
  "$rounds" "$steps" "$frozen" "$changing" <<'EOF'
import json, os, statistics, subprocess, sys, time
import ckptdb, torch
sys.path.insert(0, os.environ["BENCH_S3_GC_TOOLS"])
from bench_s3 import CountingProxy, measured  # noqa: E402

cli, bucket, rounds, steps, frozen_mib, changing_mib = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
cols = 1024
row = cols * 2  # bf16
frozen = torch.randn((frozen_mib << 20) // row, cols).to(torch.bfloat16)
step_bytes = (frozen_mib + changing_mib) << 20
endpoint = os.environ["AWS_ENDPOINT_URL"]
host, port = endpoint.split("//")[1].split(":")
port = int(port)
proxy = CountingProxy(host, port, ("GET", "HEAD", "PUT", "POST", "DELETE"))

def save_case(url: str) -> None:
    store = ckptdb.Store(url, keep_last=2)
    for step in range(1, steps + 1):
        g = torch.Generator().manual_seed(step)
        adapter = torch.randn((changing_mib << 20) // row, cols, generator=g).to(torch.bfloat16)
        ckptdb.save({"frozen": frozen, "adapter": adapter}, store, step=step)

def data_bytes(url: str) -> int:
    out = subprocess.run([cli, "info", url, "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["sst_bytes"]

def gc(url: str, min_unused: str) -> dict:
    env = dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{proxy.port}",
               AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{proxy.port}")
    before = proxy.requests
    m = measured(lambda: subprocess.run([cli, "gc", url, "--abandoned-after", "0", "--min-unused", min_unused],
                                        check=True, capture_output=True, env=env), children=True)
    time.sleep(0.2)  # the proxy's last bytes
    return {"wall": m["seconds"], "cpu": m["client_cpu"], "server_cpu": m["server_cpu"],
            "requests": proxy.requests - before}

res = {"rewrite": [], "drop": []}
for r in range(1, rounds + 1):
    urls = {m: f"s3://{bucket}/gc-{m}-{r}" for m in res}
    for m in res:
        save_case(urls[m])
    order = ["rewrite", "drop"] if r % 2 else ["drop", "rewrite"]
    for m in order:
        before = data_bytes(urls[m])
        g = gc(urls[m], "0.05" if m == "rewrite" else "1")
        subprocess.run([cli, "verify", urls[m], "--all"], check=True, capture_output=True)
        g.update(before=before / step_bytes, after=data_bytes(urls[m]) / step_bytes)
        res[m].append(g)
    print(f"round {r}: " + ", ".join(f"{m} {res[m][-1]['before']:.3f}x -> {res[m][-1]['after']:.3f}x"
                                     for m in res), file=sys.stderr)

def spread(m: str, k: str, f: str) -> str:
    v = [x[k] for x in res[m]]
    return f"{statistics.median(v):{f}} ({min(v):{f}}-{max(v):{f}})"

print(f"{steps} steps of {frozen_mib} MiB frozen + {changing_mib} MiB changing (bf16), keep_last=2, "
      f"{rounds} rounds; data bytes over one step's {step_bytes >> 20} MiB (the kept steps use "
      f"{(frozen_mib + 2 * changing_mib) / (frozen_mib + changing_mib):.3f}x)")
print("| gc | data before | data after | gc wall s | gc CLI CPU s | server CPU s | requests |")
print("|---|---|---|---|---|---|---|")
for m, label in (("drop", "objects deleted whole only (--min-unused 1)"), ("rewrite", "partly used objects rewritten")):
    print(f"| {label} | {spread(m, 'before', '.3f')} | {spread(m, 'after', '.3f')} | {spread(m, 'wall', '.2f')} | "
          f"{spread(m, 'cpu', '.2f')} | {spread(m, 'server_cpu', '.2f')} | {spread(m, 'requests', '.0f')} |")
EOF
