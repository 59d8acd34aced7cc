"""python/examples/train.py end to end: a run of 2 ranks killed mid-run and
resumed on 3 ranks continues the loss curve of an uninterrupted run.

Three torchrun jobs (CPU, gloo, 127.0.0.1) on one store layout:
  (a) 2 ranks, STEPS steps, uninterrupted (its own store);
  (b) 2 ranks, rank 1 exits (os._exit(1)) right after step KILL_AT: torchrun
      fails the job;
  (c) 3 ranks on (b)'s store, resumed from its latest step S to STEPS.

Tolerance. Runs on the same world size are bitwise identical (CPU, one
thread, gloo), so (b) must print exactly (a)'s losses up to KILL_AT. Runs on
2 and 3 ranks compute the same global mean loss and gradient over the same
global batch, but sum in another order (each rank's slice is 6 or 4
sequences, gradients are reduce-scattered over 2 or 3 ranks, the gradient
norm and the loss are all-reduced over 2 or 3 parts), so fp32 rounding
differs. Measured: the 3-rank continuation differs from (a) by at most
1e-6 (the printed resolution) over 20 steps. A resume that loses any state
differs by far more: with the AdamW state dropped the loss differs by
0.06 at the next step and up to 0.48 later; a wrong data position or lr
step changes the batch or the update outright. LOSS_ATOL = 1e-3 is ~1000x
the rounding noise and ~50x below the smallest such error.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import ckptdb  # noqa: E402
from conftest import _child_env, free_port, torch_version  # noqa: E402

LOSS_ATOL = 1e-3
STEPS, CKPT_EVERY, KILL_AT = 20, 5, 12
BATCH, VOCAB = 12, 256  # a global batch that 2 and 3 ranks split evenly
RUN_TIMEOUT_S = 150

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "python" / "examples" / "train.py"


def _why_unsupported() -> str | None:
    if torch_version() < (2, 4):
        return f"torch {torch.__version__} < 2.4: no FSDP2 (fully_shard) on CPU"
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        return "torch.distributed with gloo is not available"
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
        from torch.distributed.tensor import DTensor  # noqa: F401
        from torch.distributed.checkpoint.state_dict import get_state_dict  # noqa: F401
    except ImportError as e:
        return f"torch {torch.__version__} lacks FSDP2/DTensor/get_state_dict: {e}"
    return None


def _env() -> dict:
    env = _child_env()
    # torchrun sets these for its ranks; the caller's must not leak in.
    for k in list(env):
        if k.startswith("TORCHELASTIC_") or k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                                   "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                                                   "CKPTDB_RANK", "CKPTDB_WORLD_SIZE", "CKPTDB_LAUNCH_ID"):
            del env[k]
    return env


def _torchrun(nproc: int, store: Path, log: Path, *extra: str) -> tuple[int, str, float]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--max-restarts", "0",
           str(EXAMPLE), "--store", str(store), "--steps", str(STEPS), "--ckpt-every", str(CKPT_EVERY),
           "--batch", str(BATCH), "--vocab", str(VOCAB), "--log-file", str(log), *extra]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
                            cwd=str(REPO), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and the ranks it started
        out, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} ran past {RUN_TIMEOUT_S} s:\n{out[-4000:]}")
    return proc.returncode, out, time.monotonic() - t0


def _losses(log: Path) -> dict[int, float]:
    found = {}
    for line in log.read_text().splitlines():
        m = re.fullmatch(r"step (\d+) loss (\S+)", line)
        if m:
            step = int(m.group(1))
            assert step not in found, f"{log}: step {step} logged twice"
            found[step] = float(m.group(2))
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    why = _why_unsupported()
    if why:
        pytest.skip(why)
    d = tmp_path_factory.mktemp("train_example")
    r = {"dir": d, "times": {}}
    rc, out, t = _torchrun(2, d / "store_a", d / "a.log")
    assert rc == 0, f"uninterrupted run failed (rc {rc}):\n{out[-4000:]}"
    r["times"]["a"] = t
    rc, out, t = _torchrun(2, d / "store_b", d / "b.log", "--kill-at", str(KILL_AT))
    assert rc != 0, f"the run with --kill-at {KILL_AT} exited 0:\n{out[-4000:]}"
    r["times"]["b"] = t
    r["latest_after_kill"] = ckptdb.Store(d / "store_b").latest()
    rc, out, t = _torchrun(3, d / "store_b", d / "c.log")
    assert rc == 0, f"the resumed run on 3 ranks failed (rc {rc}):\n{out[-4000:]}"
    r["times"]["c"] = t
    r["out_c"] = out
    print(f"torchrun times: {r['times']}")
    return r


def test_uninterrupted_run_learns(runs):
    a = _losses(runs["dir"] / "a.log")
    assert sorted(a) == list(range(1, STEPS + 1))
    assert a[STEPS] < a[1] - 1.0, f"the loss does not fall: {a}"


def test_killed_run_matches_on_the_same_world_size(runs):
    a, b = _losses(runs["dir"] / "a.log"), _losses(runs["dir"] / "b.log")
    assert sorted(b) == list(range(1, KILL_AT + 1)), "the killed run should log exactly steps 1..KILL_AT"
    assert {s: a[s] for s in b} == b, "2 ranks and 2 ranks: the losses must be identical"


def test_store_after_kill_holds_a_checkpoint_step(runs):
    s = runs["latest_after_kill"]
    assert s is not None, "no step committed before the kill"
    assert s % CKPT_EVERY == 0, f"latest step {s} is not a multiple of --ckpt-every {CKPT_EVERY}"
    # Step KILL_AT // CKPT_EVERY * CKPT_EVERY may still have been in flight
    # when rank 1 died; the one before it was committed (async_save waits for
    # the previous save before starting the next).
    last = KILL_AT // CKPT_EVERY * CKPT_EVERY
    assert last - CKPT_EVERY <= s <= last


def test_resumed_on_3_ranks_continues_the_curve(runs):
    s = runs["latest_after_kill"]
    log_c = (runs["dir"] / "c.log").read_text()
    assert re.search(rf"^resumed from step {s} .* on 3 ranks", log_c, re.M), log_c
    assert f"resumed from step {s} " in runs["out_c"]
    a, c = _losses(runs["dir"] / "a.log"), _losses(runs["dir"] / "c.log")
    assert sorted(c) == list(range(s + 1, STEPS + 1)), "the resumed run must start at the step after S"
    diffs = {step: abs(c[step] - a[step]) for step in c}
    worst = max(diffs, key=diffs.get)
    assert diffs[worst] < LOSS_ATOL, (
        f"step {worst}: 3-rank resumed loss {c[worst]} vs uninterrupted {a[worst]} "
        f"(tolerance {LOSS_ATOL}); all: {diffs}")


def test_store_history(runs):
    steps = ckptdb.Store(runs["dir"] / "store_b").steps()
    s = runs["latest_after_kill"]
    assert steps[-1].step == STEPS
    assert all(i.step % CKPT_EVERY == 0 for i in steps)
    assert [i.world_size for i in steps if i.step <= s] == [2] * (s // CKPT_EVERY)
    assert [i.world_size for i in steps if i.step > s] == [3] * ((STEPS - s) // CKPT_EVERY)
    # The final state, read without torch.distributed: every entry whole.
    tok = ckptdb.Store(runs["dir"] / "store_b").read("latest", "model.tok.weight")
    assert tok.shape[0] == VOCAB and bool(torch.isfinite(tok).all())
    assert ckptdb.Store(runs["dir"] / "store_b").read_object("latest", "data.position") == STEPS * BATCH
