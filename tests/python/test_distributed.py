"""Multi-rank saves and loads in real processes over gloo on 127.0.0.1:
torchrun-launched ranks that meet in torch's own store, and plain processes
that meet through ckptdb's CKPTDB_RENDEZVOUS; DTensors across world sizes;
one rank's failure reaching every rank; Ctrl-C during a save."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import ckptdb
from conftest import _child_env, run_env_ranks, run_ranks, torch_version

needs_dtensor = pytest.mark.skipif(torch_version() < (2, 4), reason="DTensor needs torch >= 2.4 "
                                   f"(this is {torch.__version__})")

DTENSOR_SCRIPT = """
import sys, torch, torch.distributed as dist, ckptdb
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import distribute_tensor, Shard, Replicate
mode, store = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (w,))
g = torch.Generator().manual_seed(0)
full = torch.randn(13, 7, generator=g)           # 13 rows: uneven shards on 2 and 3 ranks
rep = torch.arange(5.0)
if mode == "save":
    sd = {"model": {"w": distribute_tensor(full, mesh, [Shard(0)]),
                    "rep": distribute_tensor(rep, mesh, [Replicate()])},
          "plain": full * 2, "meta": {"world": w}}
    ckptdb.save(sd, store, 1)
    ckptdb.save(sd, store, 2)
else:
    sd = {"model": {"w": distribute_tensor(torch.zeros(13, 7), mesh, [Shard(1)]),
                    "rep": distribute_tensor(torch.zeros(5), mesh, [Replicate()])},
          "plain": torch.zeros(13, 7), "meta": {"world": None}}
    n = ckptdb.load(sd, store)
    assert n == 2, n
    assert torch.equal(sd["model"]["w"].full_tensor(), full)
    assert torch.equal(sd["model"]["rep"].to_local(), rep)
    assert torch.equal(sd["plain"], full * 2) and sd["meta"] == {"world": 2}
print(f"rank {r} ok", flush=True)
dist.destroy_process_group()
"""


@needs_dtensor
def test_dtensor_saved_on_2_ranks_loads_on_3_and_into_a_plain_tensor(tmp_path, store):
    saved = run_ranks(tmp_path, DTENSOR_SCRIPT, 2, "save", store)
    assert saved.returncode == 0, saved.stdout
    loaded = run_ranks(tmp_path, DTENSOR_SCRIPT, 3, "load", store)
    assert loaded.returncode == 0, loaded.stdout
    assert loaded.stdout.count(" ok") == 3
    s = ckptdb.Store(store)
    assert [i.step for i in s.steps()] == [1, 2] and s.steps()[0].world_size == 2
    w = {e.fqn: e for e in s.entries(1)}["model.w"]
    assert w.kind == "sharded_tensor" and w.shape == (13, 7)
    # Into a plain tensor, in this one process.
    target = {"model": {"w": torch.zeros(13, 7), "rep": torch.zeros(5)}}
    ckptdb.load(target, store, 1, strict=False)
    full = torch.randn(13, 7, generator=torch.Generator().manual_seed(0))
    assert torch.equal(target["model"]["w"], full) and torch.equal(target["model"]["rep"], torch.arange(5.0))
    s.close()


FAILING_WRITE_SCRIPT = """
import resource, signal, sys, torch, torch.distributed as dist, ckptdb
store = sys.argv[1]
dist.init_process_group("gloo")
r = dist.get_rank()
if r == 1:
    # Rank 1 writes the (replicated) tensor as the coordinator, and its files
    # may not grow past 64 KiB: the SST file of its 4 MiB tensor cannot be
    # written (EFBIG).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, resource.RLIM_INFINITY))
try:
    ckptdb.save({"w": torch.ones(1 << 20), "step": 4}, store, 4, coordinator=1)
    result = "saved"
except ckptdb.CheckpointError as e:
    result = f"error {type(e).__name__} failures={sorted(e.rank_failures)} text={str(e)!r}"
with open(f"{store}.rank{r}", "w") as f:
    f.write(result)
dist.destroy_process_group()
"""


def test_one_ranks_write_error_reaches_every_rank_as_the_same_error(tmp_path, store):
    out = run_ranks(tmp_path, FAILING_WRITE_SCRIPT, 2, store)
    assert out.returncode == 0, out.stdout
    lines = [open(f"{store}.rank{r}").read() for r in range(2)]
    assert all(l.startswith("error CheckpointError failures=[1] ") for l in lines), lines
    texts = {l.split(" text=")[1] for l in lines}
    assert len(texts) == 1, lines  # the same text on every rank
    assert "Failed to write data" in lines[0] and "rank 1" in lines[0], lines[0]
    assert not ckptdb.Store(store).steps()  # nothing committed
    ckptdb.Store(store).close()


ENV_SCRIPT = """
import os, sys, numpy as np, ckptdb
store, mode = sys.argv[1], sys.argv[2]
r = int(os.environ["CKPTDB_RANK"])
a = np.arange(1000, dtype=np.float64)
if mode == "save":
    ckptdb.save({"a": a, "info": {"note": "numpy only"}}, store, 3)
    ckptdb.async_save({"a": a * 2, "info": {"note": "async"}}, store, 4).result()  # a second connection
else:
    t = {"a": np.zeros(1000), "info": {"note": None}}
    assert ckptdb.load(t, store, 3) == 3 and (t["a"] == a).all() and t["info"]["note"] == "numpy only"
    assert ckptdb.load(t, store) == 4 and (t["a"] == a * 2).all() and t["info"]["note"] == "async"
print(f"rank {r} {mode} ok", flush=True)
"""


def test_ranks_meet_through_ckptdbs_own_rendezvous_without_torch_distributed(tmp_path, store):
    for mode, n in (("save", 2), ("load", 3)):
        outs = run_env_ranks(tmp_path, ENV_SCRIPT, n, store, mode)
        for r, o in enumerate(outs):
            assert o.returncode == 0 and f"rank {r} {mode} ok" in o.stdout, o.stdout
    assert [i.world_size for i in ckptdb.Store(store).steps()] == [2, 2]
    ckptdb.Store(store).close()


INTERRUPT_SCRIPT = """
import sys, time, torch, ckptdb
store = sys.argv[1]
sd = {f"w{i}": torch.ones(32 << 20, dtype=torch.uint8) for i in range(64)}  # 2 GiB
print("saving", flush=True)
t0 = time.monotonic()
try:
    ckptdb.save(sd, ckptdb.Store(store, threads=1), 1)
    print("saved", flush=True)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - t0:.2f} s", flush=True)
"""


def test_ctrl_c_during_a_save_raises_keyboard_interrupt_and_commits_nothing(tmp_path, store):
    path = tmp_path / "interrupt.py"
    path.write_text(textwrap.dedent(INTERRUPT_SCRIPT))
    p = subprocess.Popen([sys.executable, str(path), store], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, cwd=tmp_path, env=_child_env())
    assert p.stdout.readline().strip() == "saving"
    # Inside the engine's save: its staging directory exists once storage is
    # prepared (a fixed sleep missed it on a loaded machine, interrupting the
    # Python side before the store existed); the 2 GiB take seconds after.
    deadline = time.monotonic() + 60
    while not os.path.isdir(os.path.join(store, "staging")) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    assert "interrupted after" in out, out
    assert time.monotonic() - sent < 10, "the interrupt took too long to stop the save"
    s = ckptdb.Store(store)
    assert s.steps() == []
    assert s.gc()["staging_dirs"] >= 0  # the store opens for writing and sweeps cleanly
    s.close()


MESH_2D_SCRIPT = """
import sys, torch, torch.distributed as dist, ckptdb
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import distribute_tensor, Shard, Replicate
mode, store = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
full = torch.randn(8, 6, generator=torch.Generator().manual_seed(3))
bias = torch.arange(6.0)
if mode == "save":  # a 2 x 2 mesh: rows over one dimension, columns over the other; bias replicated on one
    mesh = init_device_mesh("cpu", (2, 2))
    sd = {"w": distribute_tensor(full, mesh, [Shard(0), Shard(1)]),
          "b": distribute_tensor(bias, mesh, [Replicate(), Shard(0)])}
    ckptdb.save(sd, store, 1)
else:  # 3 ranks, 1-d mesh, columns
    mesh = init_device_mesh("cpu", (w,))
    sd = {"w": distribute_tensor(torch.zeros(8, 6), mesh, [Shard(1)]),
          "b": distribute_tensor(torch.zeros(6), mesh, [Replicate()])}
    ckptdb.load(sd, store, 1)
    assert torch.equal(sd["w"].full_tensor(), full) and torch.equal(sd["b"].to_local(), bias)
print(f"rank {r} ok", flush=True)
dist.destroy_process_group()
"""


@needs_dtensor
def test_dtensors_of_a_2d_mesh_load_on_a_1d_mesh_of_another_size(tmp_path, store):
    saved = run_ranks(tmp_path, MESH_2D_SCRIPT, 4, "save", store)
    assert saved.returncode == 0, saved.stdout
    loaded = run_ranks(tmp_path, MESH_2D_SCRIPT, 3, "load", store)
    assert loaded.returncode == 0 and loaded.stdout.count(" ok") == 3, loaded.stdout
    # Replicated data is written once: the stored bytes are the logical ones.
    info = ckptdb.Store(store).steps()[0]
    assert info.logical_bytes == (8 * 6 + 6) * 4, info
    ckptdb.Store(store).close()


TORCHRUN_SCRIPT = """
import os, sys, torch, ckptdb
store = sys.argv[1]
r = int(os.environ["RANK"])
# torch.distributed is never initialized: the ranks meet in torchrun's own store.
ckptdb.save({"w": torch.full((4,), float(r == 0)), "r": r}, store, 1)
t = {"w": torch.zeros(4), "r": None}
ckptdb.load(t, store)
assert torch.equal(t["w"], torch.ones(4)) and t["r"] == 0, t
print(f"rank {r} ok", flush=True)
"""


@needs_dtensor
def test_under_torchrun_ranks_need_nothing_but_torchruns_variables(tmp_path, store):
    from conftest import free_port
    path = tmp_path / "torchrun_script.py"
    path.write_text(textwrap.dedent(TORCHRUN_SCRIPT))
    env = _child_env()
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--max-restarts", "0",
                          str(path), store], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout
    assert out.stdout.count(" ok") == 2, out.stdout


BAD_VALUE_SCRIPT = """
import sys, time, torch, torch.distributed as dist, ckptdb
store = sys.argv[1]
dist.init_process_group("gloo")
r = dist.get_rank()
sd = {"w": torch.ones(4), "hook": (lambda x: x) if r == 1 else None}  # rank 1's cannot be pickled
t0 = time.monotonic()
try:
    ckptdb.save(sd, store, 1)
    result = "saved"
except ValueError as e:
    result = f"ValueError {type(e).__name__} failures={sorted(e.rank_failures)} text={str(e)!r}"
except Exception as e:
    result = f"other {type(e).__name__}: {e}"
with open(f"{store}.rank{r}", "w") as f:
    f.write(f"{time.monotonic() - t0:.3f} {result}")
dist.destroy_process_group()
"""


def test_a_value_one_rank_cannot_save_fails_every_rank_at_once(tmp_path, store):
    out = run_ranks(tmp_path, BAD_VALUE_SCRIPT, 2, store)
    assert out.returncode == 0, out.stdout
    results = [open(f"{store}.rank{r}").read().split(" ", 1) for r in range(2)]
    for seconds, result in results:
        assert result.startswith("ValueError InvalidArgumentError failures=[1] "), result
        assert "rank 1: " in result and "pickle" in result, result
        assert float(seconds) < 10, "the ranks waited for a timeout instead of failing at once"
    assert results[0][1] == results[1][1]  # the same text on every rank
    assert not os.path.exists(store)  # failed before anything was written


COORDINATOR_ONLY_SCRIPT = """
import os, sys, torch, torch.distributed as dist, ckptdb
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import distribute_tensor, Shard
mode, base = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (w,))
# Only the coordinator's path is the store: the others name a path that
# must never appear (as on a host without the store).
path = os.path.join(base, "store") if r == 0 else os.path.join(base, f"elsewhere-{r}", "store")
s = ckptdb.Store(path, access="coordinator_only", local_staging_dir=os.path.join(base, f"local-{r}"),
                 chunk_bytes=64 << 10)
full = torch.arange(256 * 512, dtype=torch.float32).reshape(256, 512)
if mode == "save":
    ckptdb.save({"w": distribute_tensor(full, mesh, [Shard(0)]), "n": 7}, s, 1)
    ckptdb.async_save({"w": distribute_tensor(full * 2, mesh, [Shard(0)]), "n": 8}, s, 2).result()
else:
    sd = {"w": distribute_tensor(torch.zeros(256, 512), mesh, [Shard(1)]), "n": None}
    assert ckptdb.load(sd, s, 1) == 1 and sd["n"] == 7
    assert torch.equal(sd["w"].full_tensor(), full)
    assert ckptdb.load(sd, s) == 2 and sd["n"] == 8
    assert torch.equal(sd["w"].full_tensor(), full * 2)
print(f"rank {r} {mode} ok", flush=True)
dist.destroy_process_group()
"""


@needs_dtensor
def test_a_store_on_the_coordinators_host_only_saves_and_loads_from_every_rank(tmp_path):
    base = str(tmp_path)
    saved = run_ranks(tmp_path, COORDINATOR_ONLY_SCRIPT, 2, "save", base)
    assert saved.returncode == 0 and saved.stdout.count(" ok") == 2, saved.stdout
    loaded = run_ranks(tmp_path, COORDINATOR_ONLY_SCRIPT, 3, "load", base)
    assert loaded.returncode == 0 and loaded.stdout.count(" ok") == 3, loaded.stdout
    for r in (1, 2):
        assert not os.path.exists(os.path.join(base, f"elsewhere-{r}")), f"rank {r} touched the store's path"
    local = os.path.join(base, "local-1")
    assert not os.path.exists(local) or not any(os.scandir(local)), os.listdir(local)
    s = ckptdb.Store(os.path.join(base, "store"))
    assert [(i.step, i.world_size) for i in s.steps()] == [(1, 2), (2, 2)]
    s.close()
    with pytest.raises(ValueError, match="access 'nfs'"):
        ckptdb.Store(os.path.join(base, "x"), access="nfs")
    from ckptdb.torch import StorageReader
    with pytest.raises(ValueError, match="access='coordinator_only'"):
        StorageReader(ckptdb.Store(os.path.join(base, "store"), access="coordinator_only"))


def test_only_an_abort_at_exit_after_a_ranks_work_is_tolerated():
    from conftest import EXIT_ABORT, _aborted_after_its_work
    abrt = -signal.SIGABRT
    assert _aborted_after_its_work(f"rank 0 world3 ok\n{EXIT_ABORT}\n", abrt)
    assert not _aborted_after_its_work(f"rank 0 loading\n{EXIT_ABORT}\n", abrt)  # before its work was done
    assert not _aborted_after_its_work(f"rank 0 ok\n{EXIT_ABORT}\n", -signal.SIGSEGV)
    assert not _aborted_after_its_work("rank 0 ok\n", abrt)
    assert not _aborted_after_its_work(f"Traceback ...\nAssertionError\n{EXIT_ABORT}\n", abrt)
    # Under torchrun, whose output merges the ranks': a rank's abort may come
    # before another's "ok" (seen in CI), but every rank must have printed it.
    from conftest import _torchrun_aborted_after_the_work as torchrun_ok
    torchrun = ("  exitcode  : -15 (pid: 2)  (SIGTERM)\n"
                "  exitcode  : -6 (pid: 1)  (SIGABRT)\n")
    assert torchrun_ok(f"rank 2 ok\nrank 0 ok\n{EXIT_ABORT}\nrank 1 ok\n{torchrun}", 1, 3)
    # Two ranks' lines run together (seen in CI).
    assert torchrun_ok(f"rank 2 okrank 0 ok\n\n{EXIT_ABORT}\nrank 1 ok\n{torchrun}", 1, 3)
    assert not torchrun_ok(f"rank 2 okrank 0 ok\n\n{EXIT_ABORT}\n{torchrun}", 1, 3)  # rank 1 never finished
    assert not torchrun_ok(f"rank 2 ok\nrank 0 ok\n{EXIT_ABORT}\n{torchrun}", 1, 3)  # rank 1 never finished
    assert not torchrun_ok(f"rank 2 ok\nrank 0 ok\nrank 1 ok\n{torchrun}", 1, 3)  # no abort
    assert not torchrun_ok(f"rank 2 ok\nrank 0 ok\n{EXIT_ABORT}\nrank 1 ok\n{torchrun}"
                           "  exitcode  : 1 (pid: 3)\n", 1, 3)  # a rank failed besides
    assert not torchrun_ok(f"rank 0 ok\n{EXIT_ABORT}\nrank 1 ok\n  exitcode  : -11 (pid: 1)\n", 1, 2)


TRAFFIC_SCRIPT = """
import os, sys, numpy as np, ckptdb
from ckptdb import _dist
store = sys.argv[1]
r, w = int(os.environ["CKPTDB_RANK"]), int(os.environ["CKPTDB_WORLD_SIZE"])
sd = {f"layer.{i}": np.full(64, i, dtype=np.float32) for i in range(40)}
ckptdb.save(sd, store, 1, coordinator=1)
comm = _dist.default_communicator()
before = comm.stats()
ckptdb.save(sd, store, 2, coordinator=1)
target = {k: np.zeros(64, dtype=np.float32) for k in sd}
assert ckptdb.load(target, store, coordinator=1) == 2 and all((target[k] == sd[k]).all() for k in sd)
after = comm.stats()
print(f"rank {r} received {after['bytes_received'] - before['bytes_received']} peers {after['peers']}", flush=True)
for call in (lambda: ckptdb.save(sd, store, 3, coordinator=w), lambda: ckptdb.load(target, store, coordinator=w),
             lambda: ckptdb.load(target, store, coordinator=-1)):
    try:
        call()
        print(f"rank {r} bad coordinator accepted", flush=True)
    except ValueError as e:
        print(f"rank {r} bad coordinator: {e}", flush=True)
"""


def test_what_a_rank_receives_does_not_grow_with_the_world_and_a_bad_coordinator_is_named(tmp_path, store):
    # Each rank tells the coordinator alone whether its state dict could be
    # prepared, and hears the outcome once (it was an all-gather). A
    # coordinator outside the job is named on every rank, for a load too
    # (which resolved "latest" through it first: "broadcast root 6").
    received = {}
    for n in (2, 6):
        path = f"{store}-{n}"
        outs = run_env_ranks(tmp_path, TRAFFIC_SCRIPT, n, path)
        for r, o in enumerate(outs):
            assert o.returncode == 0, o.stdout
            for bad, calls in ((n, 2), (-1, 1)):  # a save and a load, a load
                want = f"rank {r} bad coordinator: coordinator rank {bad} is not in the world of size {n}"
                assert o.stdout.count(want) == calls, o.stdout
        line = next(x for x in outs[0].stdout.splitlines() if x.startswith("rank 0 received"))
        received[n] = int(line.split()[3])  # (a rank other than the coordinator, rank 1)
        assert [i.step for i in ckptdb.Store(path).steps()] == [1, 2]
        ckptdb.Store(path).close()
    assert 0 < received[6] <= 1.2 * received[2], received
