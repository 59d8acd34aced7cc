"""ckptdb.torch: torch.distributed.checkpoint (DCP) saving to and loading
from a ckptdb store.

One 2-rank job (torchrun, gloo on 127.0.0.1) saves an FSDP2 model's and
optimizer's state dict (DTensors Shard(0)), an uneven DTensor, a plain tensor
and a step counter with dcp.save through ckptdb's StorageWriter, with DCP's
own FileSystemWriter, and with dcp.async_save through ckptdb, and loads each
back on 2 ranks; a 3-rank job and this process (1 rank) load the ckptdb
step again, and ckptdb.load reads it without DCP.
"""

from __future__ import annotations

import io

import pytest

torch = pytest.importorskip("torch")
from conftest import run_ranks, torch_version  # noqa: E402

if torch_version() < (2, 2):
    pytest.skip(f"ckptdb.torch needs torch >= 2.2 (this is {torch.__version__})", allow_module_level=True)
dcp = pytest.importorskip("torch.distributed.checkpoint")

import ckptdb  # noqa: E402
import ckptdb.torch  # noqa: E402

needs_fsdp2 = pytest.mark.skipif(torch_version() < (2, 4), reason="DTensor and FSDP2 need torch >= 2.4")
# DCP warns that it saves or loads in one process when no process group is up.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is:UserWarning")

# Both jobs: argv = mode, working directory. Prints "rank R NAME ok" per
# state dict loaded equal, "rank R NAME differs: ..." otherwise; the save
# job then makes a save fail on rank 1 only and prints what each rank got.
SCRIPT = """
import os, sys, warnings
import torch, torch.nn as nn, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor
try:
    from torch.distributed.fsdp import fully_shard
except ImportError:
    from torch.distributed._composable.fsdp import fully_shard
import ckptdb, ckptdb.torch

warnings.filterwarnings("ignore")
mode, base = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (w,))

def make(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    for m in model:
        if isinstance(m, nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(3, 8)).sum().backward()
    opt.step()  # the optimizer has state: exp_avg DTensors, 0-d step tensors
    return model, opt

def state(seed, fill):
    model, opt = make(seed)
    msd, osd = get_state_dict(model, opt)
    big = torch.randn(13, 7, generator=torch.Generator().manual_seed(1))
    return {"model": msd, "optim": osd,
            "extra": {"dt": distribute_tensor(big if fill else torch.zeros(13, 7), mesh, [Shard(0)]),
                      "plain": torch.arange(6.0) if fill else torch.zeros(6),
                      "counter": 7 if fill else 0}}

def full(sd, prefix=""):
    out = {}
    for k, v in sd.items():
        if isinstance(v, dict):
            out.update(full(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v.full_tensor() if isinstance(v, DTensor) else v
    return out

def check(name, target, expected):
    got = full(target)
    bad = sorted(k for k in expected if k not in got or type(got[k]) is not type(expected[k]) or
                 (torch.equal(got[k], expected[k]) if isinstance(got[k], torch.Tensor) else got[k] == expected[k])
                 is False)
    bad += sorted(set(got) - set(expected))
    print(f"rank {r} {name} " + (f"differs: {bad}" if bad else "ok"), flush=True)

store, fs, later = f"{base}/store", f"{base}/fs", f"{base}/async"
if mode == "save":
    sd = state(0, True)
    expected = full(sd)
    dcp.save(sd, storage_writer=ckptdb.torch.StorageWriter(store, step=5))
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(fs))
    fut = dcp.async_save(sd, storage_writer=ckptdb.torch.StorageWriter(later, step=6))
    fut.result()
    if r == 0:
        torch.save(expected, f"{base}/expected.pt")
    for name, reader in [("ckptdb", ckptdb.torch.StorageReader(store)), ("fs", dcp.FileSystemReader(fs)),
                         ("async", ckptdb.torch.StorageReader(later, step=6))]:
        target = state(1, False)
        dcp.load(target, storage_reader=reader)
        check(name, target, expected)
    # A dtype ckptdb lacks, on rank 1 only: every rank gets rank 1's error
    # (DCP wraps it), nothing is committed, and no rank waits for the other.
    from torch.distributed.checkpoint.api import CheckpointException
    # (Each rank's own FQN: DCP would write a shared one from one rank only.)
    bad = {f"x{r}": torch.zeros(2, dtype=torch.complex64 if r == 1 else torch.float32)}
    try:
        dcp.save(bad, storage_writer=ckptdb.torch.StorageWriter(store, step=9))
        print(f"rank {r} failure none", flush=True)
    except CheckpointException as e:
        cause = e.failures[r][0]
        print(f"rank {r} failure {type(cause).__name__} {sorted(cause.rank_failures)}", flush=True)
else:  # load on this world size what 2 ranks saved
    target = state(1, False)
    dcp.load(target, storage_reader=ckptdb.torch.StorageReader(store))
    check(f"world{w}", target, torch.load(f"{base}/expected.pt", weights_only=False))
dist.destroy_process_group()
# Everything the tests check is printed above: an abort at interpreter exit
# after this line is the harness's known exit-time case (conftest.py).
print(f"rank {r} finished ok", flush=True)
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The 2-rank job's directory (store, fs, async, expected.pt) and output."""
    base = tmp_path_factory.mktemp("dcp")
    out = run_ranks(base, SCRIPT, 2, "save", str(base), timeout=180)
    return base, out


def _lines(out, name: str) -> list[str]:
    return sorted(line for line in out.stdout.splitlines() if line.startswith("rank ") and f" {name} " in line + " ")


@needs_fsdp2
def test_fsdp_state_dict_through_ckptdb_and_filesystem_loads_equal(saved):
    base, out = saved
    assert out.returncode == 0, out.stdout
    # Each rank compared what it loaded with the saved values (full tensors).
    assert _lines(out, "ckptdb") == ["rank 0 ckptdb ok", "rank 1 ckptdb ok"], out.stdout
    assert _lines(out, "fs") == ["rank 0 fs ok", "rank 1 fs ok"], out.stdout
    entries = {e.fqn: e for e in ckptdb.Store(base / "store").entries(5)}
    assert entries["model.0.weight"].kind == "sharded_tensor" and entries["model.0.weight"].shape == (16, 8)
    assert entries["extra.dt"].shape == (13, 7) and entries["extra.counter"].kind == "bytes"
    assert entries["optim.state.0.weight.step"].shape == ()  # Adam's 0-d step
    # The entries in the state dict's order (the coordinator's).
    assert list(entries)[:2] == ["model.0.weight", "model.0.bias"]


@needs_fsdp2
def test_one_ranks_failure_reaches_every_rank(saved):
    base, out = saved
    assert out.returncode == 0, out.stdout
    assert _lines(out, "failure") == ["rank 0 failure InvalidArgumentError [1]",
                                      "rank 1 failure InvalidArgumentError [1]"], out.stdout


@needs_fsdp2
def test_a_dcp_save_is_one_ckptdb_step_that_ckptdb_load_reads(saved):
    base, out = saved
    assert out.returncode == 0, out.stdout
    s = ckptdb.Store(base / "store")
    steps = s.steps()
    assert [(i.step, i.world_size, i.damaged) for i in steps] == [(5, 2, False)]
    expected = torch.load(base / "expected.pt", weights_only=False)
    tensors = {k: v for k, v in expected.items() if isinstance(v, torch.Tensor)}
    target = {k: torch.zeros_like(v) for k, v in tensors.items()}
    target["extra.counter"] = b""  # a DCP bytes entry (torch.save's bytes): the object comes back
    assert ckptdb.load(target, s) == 5
    for k, v in tensors.items():
        assert torch.equal(target[k], v), k
    assert target["extra.counter"] == 7 and s.read(5, "extra.counter") == 7
    assert torch.load(io.BytesIO(s.read_bytes(5, "extra.counter")), weights_only=False) == 7
    assert s.read(5, "extra.dt", (slice(2, 4),)).equal(tensors["extra.dt"][2:4])
    s.close()


@needs_fsdp2
def test_the_2_rank_steps_dcp_metadata_equals_filesystem_writers(saved):
    # DCP's Metadata (how the FQNs nest, the tensors' properties and chunks)
    # as the ranks' plans gave it, merged by the coordinator.
    base, out = saved
    assert out.returncode == 0, out.stdout
    want = dcp.FileSystemReader(str(base / "fs")).read_metadata()
    got = ckptdb.torch.StorageReader(str(base / "store")).read_metadata()
    assert got.planner_data == want.planner_data
    assert got.planner_data["model.0.weight"] == ("model", "0.weight")
    assert got.state_dict_metadata == want.state_dict_metadata
    ckptdb.Store(base / "store").close()


@needs_fsdp2
def test_async_save_through_ckptdb_then_load(saved):
    base, out = saved
    assert out.returncode == 0, out.stdout
    assert _lines(out, "async") == ["rank 0 async ok", "rank 1 async ok"], out.stdout
    assert [i.step for i in ckptdb.Store(base / "async").steps()] == [6]


@needs_fsdp2
def test_load_on_3_ranks(saved, tmp_path):
    base, out = saved
    assert out.returncode == 0, out.stdout
    # On 3 ranks FSDP2 shards 16 rows 6/6/4 and 4 rows 2/2/0 (an empty shard).
    loaded = run_ranks(tmp_path, SCRIPT, 3, "load", str(base), timeout=180)
    assert loaded.returncode == 0, loaded.stdout
    assert _lines(loaded, "world3") == [f"rank {r} world3 ok" for r in range(3)], loaded.stdout


@needs_fsdp2
def test_load_in_one_process_into_plain_tensors(saved):
    base, out = saved
    assert out.returncode == 0, out.stdout
    expected = torch.load(base / "expected.pt", weights_only=False)
    expected = {k: v for k, v in expected.items() if isinstance(v, torch.Tensor) or k == "extra.counter"}
    target = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else None for k, v in expected.items()}
    target["extra.dt"] = torch.zeros(7, 13).t()            # not contiguous: filled through a copy
    target["extra.plain"] = torch.zeros(6, dtype=torch.float64)  # converted like DCP's copy_
    reader = ckptdb.torch.StorageReader(str(base / "store"))
    dcp.load(target, storage_reader=reader)  # no process group: DCP loads in this process alone
    assert reader.step_loaded == 5
    for k, v in expected.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(target[k], v.to(target[k].dtype)), k
        else:
            assert target[k] == v, k
    assert not target["extra.dt"].is_contiguous() and target["extra.plain"].dtype == torch.float64


def test_single_process_save_errors_and_ckptdb_saved_steps(tmp_path):
    store = str(tmp_path / "store")
    sd = {"w": torch.arange(12.0).reshape(3, 4), "zero_d": torch.tensor(3), "meta": {"epoch": 2}}
    dcp.save(sd, storage_writer=ckptdb.torch.StorageWriter(store, step=1))
    # A step that exists: ckptdb's error, inside DCP's CheckpointException.
    # (DCP's CheckpointException is a BaseException.)
    from torch.distributed.checkpoint.api import CheckpointException
    with pytest.raises(CheckpointException) as info:
        dcp.save(sd, storage_writer=ckptdb.torch.StorageWriter(store, step=1))
    (cause, _), = info.value.failures.values()
    assert isinstance(cause, ckptdb.AlreadyExistsError), repr(cause)
    assert [i.step for i in ckptdb.Store(store).steps()] == [1]
    # A step saved by ckptdb.save (pickled objects) loads through DCP too;
    # checkpoint_id names the store.
    ckptdb.save({"w": sd["w"] * 2, "zero_d": torch.tensor(4), "meta": {"epoch": 9}}, store, 2)
    target = {"w": torch.zeros(3, 4), "zero_d": torch.tensor(0), "meta": {"epoch": None}}
    dcp.load(target, checkpoint_id=store, storage_reader=ckptdb.torch.StorageReader("/nonexistent"))
    assert torch.equal(target["w"], sd["w"] * 2) and target["zero_d"].item() == 4
    assert target["meta"] == {"epoch": 9}
    assert ckptdb.torch.StorageReader.validate_checkpoint_id(store)
    assert not ckptdb.torch.StorageReader.validate_checkpoint_id(str(tmp_path))
    ckptdb.Store(store).close()


# Argv = working directory. Saves 40 DTensors sharded over every rank, then
# a second step; prints what rank 1 received through ckptdb's connection
# during the second save.
TRAFFIC = """
import sys, warnings
import torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
import ckptdb, ckptdb.torch

warnings.filterwarnings("ignore")
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (w,))
sd = {f"layers.{i}.weight": distribute_tensor(torch.full((12, 4), float(i)), mesh, [Shard(0)]) for i in range(40)}
store = sys.argv[1] + "/store"
dcp.save(sd, storage_writer=ckptdb.torch.StorageWriter(store, step=1))
before = ckptdb.torch._dcp_communicator().stats()
dcp.save(sd, storage_writer=ckptdb.torch.StorageWriter(store, step=2))
after = ckptdb.torch._dcp_communicator().stats()
print(f"rank {r} received {after['bytes_received'] - before['bytes_received']} "
      f"messages {after['messages_received'] - before['messages_received']}", flush=True)
dist.destroy_process_group()
print(f"rank {r} finished ok", flush=True)
"""


@needs_fsdp2
def test_what_a_rank_receives_in_a_dcp_save_does_not_grow_with_the_world(tmp_path):
    # Every rank's entries go to the coordinator, which sends each rank the
    # merged entries once: before, every rank received every rank's list
    # (an all-gather), W - 1 of them.
    received = {}
    for world in (2, 6):
        base = tmp_path / f"w{world}"
        base.mkdir()
        out = run_ranks(base, TRAFFIC, world, str(base), timeout=240)
        assert out.returncode == 0, out.stdout
        line = next(x for x in out.stdout.splitlines() if x.startswith("rank 1 received"))
        received[world] = int(line.split()[3])
    assert 0 < received[6] <= 1.2 * received[2], received
