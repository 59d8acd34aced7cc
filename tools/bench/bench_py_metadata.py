"""What the Python package's metadata reads cost on a step of many pieces
(issue 33: a step that thousands of ranks saved), against the engine's own
load of the same small entry (ckptdb-metadata-bench load) in the same run.

One process saves (ckptdb-metadata-bench save) a step of --entries sharded
tensors of --pieces one-row shards each and a 16-byte tensor "step_count",
unless --dir holds one already. Then, in rounds, each operation runs in a
fresh process (torch imported first, not counted) and reports its CPU
seconds and how much its peak RSS grew:

  engine       the engine's load of "step_count" (C++, the baseline)
  entries      Store.entries(1): what the step holds
  read         Store.read(1, "step_count")
  read_row     Store.read(1, "layer.7.weight", (slice(0, 1),)): one rank's row
  dcp_metadata ckptdb.torch.StorageReader(...).read_metadata(): what every
               rank of a dcp.load reads (DCP's Metadata lists every piece)
  load_all     ckptdb.load of every entry into whole tensors in one process
               (a job's checkpoint gathered on one machine: every piece)

--compare PYTHONPATH runs every Python operation with that package too (an
older build), interleaved with this one, so that a change is measured
against the build before it in the same run. Prints medians (min-max) and
ratios to the engine's load.

  PYTHONPATH=build/python python tools/bench/bench_py_metadata.py \\
      [--entries 300] [--pieces 2048] [--repeat 3] [--dir DIR] [--compare PYTHONPATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

OPS = ["entries", "read", "read_row", "dcp_metadata", "load_all"]

# Runs in a fresh process: one operation, its CPU seconds and peak RSS growth
# as JSON on the last line.
CHILD = r"""
import json, resource, sys
import torch  # (imported before: not counted)
import ckptdb
from ckptdb.torch import StorageReader
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
op, path = sys.argv[1], sys.argv[2]
store = ckptdb.Store(path)
store.resolve(1)
if op == "load_all":  # (ckptdb-metadata-bench's state dict, made without reading the step)
    entries, pieces = int(sys.argv[3]), int(sys.argv[4])
    whole = {f"layer.{i}.weight": torch.zeros(pieces, 4) for i in range(entries)}
    whole["step_count"] = torch.zeros(4)
before, c0 = rss_mib(), cpu()
if op == "entries":
    n = len(store.entries(1))
elif op == "read":
    n = store.read(1, "step_count").numel()
elif op == "read_row":
    n = store.read(1, "layer.7.weight", (slice(0, 1),)).numel()
elif op == "dcp_metadata":
    n = len(StorageReader(path, step=1).read_metadata().state_dict_metadata)
elif op == "load_all":
    n = ckptdb.load(whole, store, 1)
print(json.dumps({"cpu": cpu() - c0, "rss": rss_mib() - before, "n": n}))
"""


def run_python(op: str, path: str, pythonpath: str, entries: int, pieces: int) -> dict:
    env = dict(os.environ, PYTHONPATH=pythonpath, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, op, path, str(entries), str(pieces)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_engine(bench: str, path: str) -> dict:
    # "load of step_count (16 bytes): 0.005 CPU-s, 0.004 s wall, peak RSS 24.7 MiB (18.8 MiB before)"
    out = subprocess.run([bench, "load", path, "--step", "1"], check=True, capture_output=True, text=True).stdout
    words = out.replace("(", " ").replace(")", " ").replace(",", " ").split()
    cpu = float(words[words.index("CPU-s") - 1])
    peak = float(words[words.index("RSS") + 1])
    before = float(words[words.index("before") - 2])
    return {"cpu": cpu, "rss": peak - before}


def summary(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, default=300)
    p.add_argument("--pieces", type=int, default=2048)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", help="the store (default: a temporary one, removed at the end)")
    p.add_argument("--compare", help="PYTHONPATH of another build of the package, run interleaved")
    p.add_argument("--bench", default=os.path.join(os.path.dirname(__file__), "..", "..", "build",
                                                   "ckptdb-metadata-bench"))
    a = p.parse_args()
    here = os.environ.get("PYTHONPATH", "")
    builds = {"this": here} if not a.compare else {"this": here, "compared": a.compare}
    tmp = None if a.dir else tempfile.mkdtemp(prefix="bench-py-metadata-")
    path = a.dir or os.path.join(tmp, "store")
    try:
        if not os.path.exists(os.path.join(path, "CKPTDB")):
            subprocess.run([a.bench, "save", path, "--entries", str(a.entries), "--pieces", str(a.pieces)],
                           check=True)
        cpu: dict[str, list[float]] = {}
        rss: dict[str, list[float]] = {}
        for r in range(a.repeat):
            names = list(builds)
            if r % 2:
                names.reverse()
            got = {"engine": run_engine(a.bench, path)}
            for op in OPS:
                for b in names:
                    got[f"{op} ({b})" if len(builds) > 1 else op] = run_python(op, path, builds[b], a.entries,
                                                                               a.pieces)
            for k, v in got.items():
                cpu.setdefault(k, []).append(v["cpu"])
                rss.setdefault(k, []).append(v["rss"])
        engine = statistics.median(cpu["engine"])
        print(f"step of {a.entries} entries x {a.pieces} pieces, {a.repeat} rounds; medians (min-max)")
        print(f"{'operation':28} {'CPU s':24} {'x engine':>9}  peak RSS growth MiB")
        for k in cpu:
            ratio = statistics.median(cpu[k]) / engine if engine > 0 else float("nan")
            print(f"{k:28} {summary(cpu[k]):24} {ratio:9.1f}  {summary(rss[k])}")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
