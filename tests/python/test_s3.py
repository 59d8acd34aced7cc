"""Stores in an S3 bucket (s3://BUCKET/PREFIX) from Python, against a real
SeaweedFS server (conftest's `bucket`): DTensors saved on 4 ranks load on 3
in another sharding and in one process, bit for bit; dcp.save/dcp.load
through ckptdb.torch; async saves under ckptdb-launch; a step equal to the
one before stores almost nothing; a missing bucket is an error naming it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import ckptdb
from conftest import _child_env, run_ranks, torch_version

needs_dtensor = pytest.mark.skipif(torch_version() < (2, 4), reason="DTensor needs torch >= 2.4 "
                                   f"(this is {torch.__version__})")


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as integers: equal values that differ in their bits
    (-0.0 and 0.0, NaN payloads) compare unequal."""
    return t.contiguous().view(torch.int32)


DTENSOR_SCRIPT = """
import sys, torch, torch.distributed as dist, ckptdb
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import distribute_tensor, Shard, Replicate
mode, url = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (w,))
g = torch.Generator().manual_seed(0)
full = torch.randn(301, 67, generator=g)          # uneven shards on 3 and 4 ranks, either way
emb = torch.randn(1000, 256, generator=g)         # 1 MiB: several chunks with chunk_bytes=64 KiB
rep = torch.arange(5.0)
store = ckptdb.Store(url, chunk_bytes=64 << 10)
if mode == "save":
    sd = {"model": {"w": distribute_tensor(full, mesh, [Shard(0)]),
                    "emb": distribute_tensor(emb, mesh, [Shard(0)]),
                    "rep": distribute_tensor(rep, mesh, [Replicate()])},
          "step": 7}
    ckptdb.save(sd, store, 1)
else:
    sd = {"model": {"w": distribute_tensor(torch.zeros(301, 67), mesh, [Shard(1)]),
                    "emb": distribute_tensor(torch.zeros(1000, 256), mesh, [Shard(1)]),
                    "rep": distribute_tensor(torch.zeros(5), mesh, [Replicate()])},
          "step": None}
    assert ckptdb.load(sd, store) == 1
    for name, want in (("w", full), ("emb", emb)):
        got = sd["model"][name]
        assert got.placements[0] == Shard(1), name
        assert torch.equal(got.full_tensor().view(torch.int32), want.view(torch.int32)), name
    assert torch.equal(sd["model"]["rep"].to_local(), rep) and sd["step"] == 7
store.close()
print(f"rank {r} ok", flush=True)
dist.destroy_process_group()
"""


@needs_dtensor
def test_dtensors_saved_on_4_ranks_load_by_columns_on_3_and_in_one_process(tmp_path, bucket):
    url = f"s3://{bucket}/run1"
    saved = run_ranks(tmp_path, DTENSOR_SCRIPT, 4, "save", url)
    assert saved.returncode == 0, saved.stdout
    loaded = run_ranks(tmp_path, DTENSOR_SCRIPT, 3, "load", url)
    assert loaded.returncode == 0, loaded.stdout
    assert loaded.stdout.count(" ok") == 3

    g = torch.Generator().manual_seed(0)
    full, emb = torch.randn(301, 67, generator=g), torch.randn(1000, 256, generator=g)
    target = {"model": {"w": torch.zeros(301, 67), "emb": torch.zeros(1000, 256), "rep": torch.zeros(5)},
              "step": None}
    with ckptdb.Store(url) as s:
        assert ckptdb.load(target, s, "latest") == 1
        assert torch.equal(bits(target["model"]["w"]), bits(full))
        assert torch.equal(bits(target["model"]["emb"]), bits(emb))
        assert torch.equal(target["model"]["rep"], torch.arange(5.0)) and target["step"] == 7
        [info] = s.steps()
        assert info.step == 1 and info.world_size == 4
        entries = {e.fqn: e for e in s.entries(1)}
        assert entries["model.emb"].kind == "sharded_tensor" and entries["model.emb"].shape == (1000, 256)
        # A slice reads from the bucket too.
        assert torch.equal(s.read(1, "model.emb", (slice(10, 20), 3)), emb[10:20, 3])


DCP_SCRIPT = """
import sys, warnings, torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import distribute_tensor, Shard
import ckptdb, ckptdb.torch
warnings.filterwarnings("ignore")
mode, url = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (w,))
g = torch.Generator().manual_seed(1)
full = torch.randn(64, 48, generator=g)
bias = torch.randn(48, generator=g)
if mode == "save":
    sd = {"w": distribute_tensor(full, mesh, [Shard(0)]), "b": bias, "extra": {"epoch": 3}}
    dcp.save(sd, storage_writer=ckptdb.torch.StorageWriter(url, step=5))
else:
    sd = {"w": distribute_tensor(torch.zeros(64, 48), mesh, [Shard(1)]), "b": torch.zeros(48),
          "extra": {"epoch": 0}}
    reader = ckptdb.torch.StorageReader(url)
    dcp.load(sd, storage_reader=reader)
    assert reader.step_loaded == 5
    assert torch.equal(sd["w"].full_tensor().view(torch.int32), full.view(torch.int32))
    assert torch.equal(sd["b"].view(torch.int32), bias.view(torch.int32)) and sd["extra"] == {"epoch": 3}
print(f"rank {r} ok", flush=True)
dist.destroy_process_group()
"""


@needs_dtensor
def test_dcp_save_and_load_through_ckptdb_torch_into_a_bucket(tmp_path, bucket):
    url = f"s3://{bucket}/dcp"
    saved = run_ranks(tmp_path, DCP_SCRIPT, 2, "save", url)
    assert saved.returncode == 0, saved.stdout
    loaded = run_ranks(tmp_path, DCP_SCRIPT, 3, "load", url)
    assert loaded.returncode == 0, loaded.stdout
    assert loaded.stdout.count(" ok") == 3
    # ckptdb reads the DCP step without DCP.
    with ckptdb.Store(url) as s:
        assert [i.step for i in s.steps()] == [5]
        g = torch.Generator().manual_seed(1)
        full = torch.randn(64, 48, generator=g)
        assert torch.equal(s.read(5, "w"), full)


def torchrun(tmp_path, script: str, nproc: int, *args: str) -> subprocess.CompletedProcess:
    """`script` on nproc ranks under torchrun itself (torch.distributed.run,
    its rendezvous on 127.0.0.1), the bucket's AWS_* variables inherited.
    A job whose every rank printed its "ok" line and one of which was then
    aborted as the process exited (PyTorch's gloo threads releasing DCP's
    tensors during interpreter teardown, pytorch/pytorch#190489; see
    conftest's _torchrun_aborted_after_the_work) counts as succeeded, with a
    warning."""
    from conftest import _torchrun_aborted_after_the_work, free_port
    path = tmp_path / f"torchrun_{abs(hash(script))}.py"
    path.write_text(textwrap.dedent(script))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                          "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--max-restarts", "0",
                          str(path), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=180, env=_child_env(), cwd=tmp_path)
    if _torchrun_aborted_after_the_work(out.stdout, out.returncode, nproc):
        warnings.warn(f"a rank aborted at exit after its work was done: {out.stdout[-300:]}")
        out.returncode = 0
    return out


TORCHRUN_PLAIN_SCRIPT = """
import os, sys, torch, ckptdb
url = sys.argv[1]
r = int(os.environ["RANK"])
# No process group: the ranks meet in torchrun's own store.
assert ckptdb.load(t := {"w": torch.zeros(64, 48)}, url) == 5
ckptdb.save({"w": t["w"] * 2, "rank0": r == 0}, url, 6)
back = {"w": torch.zeros(64, 48), "rank0": None}
assert ckptdb.load(back, url) == 6 and back["rank0"] is True
assert torch.equal(back["w"], t["w"] * 2)
print(f"rank {r} ok", flush=True)
"""


@needs_dtensor
def test_jobs_under_torchrun_save_and_load_a_bucket(tmp_path, bucket):
    url = f"s3://{bucket}/torchrun"
    saved = torchrun(tmp_path, DCP_SCRIPT, 2, "save", url)
    assert saved.returncode == 0 and saved.stdout.count(" ok") == 2, saved.stdout
    loaded = torchrun(tmp_path, DCP_SCRIPT, 3, "load", url)
    assert loaded.returncode == 0 and loaded.stdout.count(" ok") == 3, loaded.stdout
    plain = torchrun(tmp_path, TORCHRUN_PLAIN_SCRIPT, 2, url)
    assert plain.returncode == 0 and plain.stdout.count(" ok") == 2, plain.stdout
    with ckptdb.Store(url) as s:
        assert [(i.step, i.world_size) for i in s.steps()] == [(5, 2), (6, 2)]


ASYNC_SCRIPT = """
import os, sys, torch, ckptdb
url = sys.argv[1]
r = int(os.environ["CKPTDB_RANK"])
g = torch.Generator().manual_seed(10)
sd = {"a": torch.randn(256, 1024, generator=g), "b": torch.randn(4096, generator=g)}  # the same on every rank
first = {n: t.clone() for n, t in sd.items()}
fut = ckptdb.async_save(sd, url, step=1)
for t in sd.values():
    t.add_(1.0)  # changed at once: the save has its own copy
fut.result()
# Step 2: the same values as step 1, bit for bit.
for n, t in sd.items():
    t.copy_(first[n])
ckptdb.async_save(sd, url, step=2).result()
ckptdb.Store(url).close()
back = {"a": torch.zeros(256, 1024), "b": torch.zeros(4096)}
assert ckptdb.load(back, url, step=1) == 1
for n, t in back.items():
    assert torch.equal(t.view(torch.int32), first[n].view(torch.int32)), n
print(f"rank {r} ok", flush=True)
"""


def launcher() -> str:
    launch = os.environ.get("CKPTDB_LAUNCH")
    if not launch:
        pytest.skip("CKPTDB_LAUNCH is not set (ctest sets it to ckptdb-launch)")
    return launch


def test_async_saves_under_ckptdb_launch_and_an_unchanged_step_stores_almost_nothing(tmp_path, bucket):
    url = f"s3://{bucket}/async"
    script = tmp_path / "async_script.py"
    script.write_text(textwrap.dedent(ASYNC_SCRIPT))
    env = _child_env()
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    job = subprocess.run([launcher(), "-n", "2", "--", sys.executable, str(script), url], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.stdout.count(" ok") == 2, job.stdout
    with ckptdb.Store(url) as s:
        one, two = s.steps()
        assert (one.step, two.step) == (1, 2) and one.world_size == 2
        logical = (256 * 1024 + 4096) * 4
        assert one.logical_bytes == two.logical_bytes == logical
        assert one.stored_bytes >= logical  # random floats, stored uncompressed
        # Every chunk of step 2 is step 1's: stored once, shared.
        assert two.stored_bytes < logical // 100, (one, two)


def test_raw_chunks_land_in_the_target_through_the_python_reader(bucket):
    """A load from a bucket writes each raw chunk straight into its target
    as the GET delivers it: a 1-d tensor's byte ranges (which the Python
    reader watches chunk by chunk, to stop on an interrupt) as well as a
    2-d tensor's tiles. (The object's cached tail, its last 64 KiB, holds a
    chunk or two read from it without landing.)"""
    from ckptdb import _ckptdb
    from ckptdb._state import region
    g = torch.Generator().manual_seed(3)
    want = {"v": torch.randn(1 << 20, generator=g), "m": torch.randn(1024, 1024, generator=g)}
    with ckptdb.Store(f"s3://{bucket}/landing", chunk_bytes=64 << 10) as s:
        ckptdb.save(want, s, 1)
        for fqn, w in want.items():
            out = torch.empty_like(w)
            r = region(fqn, out, for_load=True)
            sd = _ckptdb.StateDict()
            shape = list(w.shape)
            sd.add_sharded(fqn, s._entry_info(1, fqn)["dtype"], shape, [([0] * len(shape), shape, r.data, r.nbytes, -1)])
            stats = _ckptdb.load(sd, s._reader(), 1, None, 0, [], False, False)
            assert torch.equal(bits(out), bits(w)), fqn
            assert stats["chunks_read"] == 64, (fqn, stats)
            assert stats["chunks_landed"] >= 62, (fqn, stats)


def test_a_missing_bucket_is_an_error_naming_it(bucket):
    missing = f"{bucket}-missing"
    with pytest.raises(ckptdb.CheckpointError, match=missing):
        ckptdb.save({"x": torch.ones(4)}, f"s3://{missing}/run", step=1)
    with pytest.raises(ckptdb.CheckpointError, match=missing):
        ckptdb.load({"x": torch.zeros(4)}, f"s3://{missing}/run")
    with pytest.raises(ckptdb.CheckpointError, match=missing):
        ckptdb.Store(f"s3://{missing}/run").steps()


def test_a_bucket_url_stays_a_url_and_a_collapsed_one_or_coordinator_only_is_refused():
    assert ckptdb.Store("s3://some-bucket/a/b").path == "s3://some-bucket/a/b"
    with pytest.raises(ValueError, match="s3:/some-bucket/a"):
        ckptdb.Store(pathlib.Path("s3://some-bucket/a"))
    with pytest.raises(ValueError, match="coordinator_only"):
        ckptdb.Store("s3://some-bucket/a", access="coordinator_only")


def test_copy_directory_to_bucket_and_back_keeps_steps_tags_and_metrics(tmp_path, bucket):
    src, back = str(tmp_path / "src"), str(tmp_path / "back")
    url = f"s3://{bucket}/copied"
    for step in (1, 2):
        ckptdb.save({"w": torch.arange(4096, dtype=torch.float32) * step, "cfg": f"lr={step}"}, src,
                    step=step, metrics={"loss": 1.0 / step}, note=f"step {step}")
    ckptdb.Store(src).tag(2, "best")
    copied = ckptdb.copy(src, url, tags=True)
    assert [(c["step"], c["outcome"], c["tags"]) for c in copied] == [(1, "copied", []), (2, "copied", ["best"])]
    ckptdb.copy(url, back)
    for store in (url, back):
        info = {s.step: s for s in ckptdb.Store(store).steps()}
        assert sorted(info) == [1, 2]
        assert info[2].metrics == {"loss": 0.5} and info[2].note == "step 2"
        target = {"w": torch.zeros(4096), "cfg": None}
        ckptdb.load(target, store, step=2)
        assert torch.equal(target["w"], torch.arange(4096, dtype=torch.float32) * 2)
        assert target["cfg"] == "lr=2"
    assert ckptdb.Store(url).resolve("best") == 2
    # Again: nothing to do; onto other content: refused, naming the step.
    assert [c["outcome"] for c in ckptdb.copy(url, back)] == ["present", "present"]
    other = str(tmp_path / "other")
    ckptdb.save({"w": torch.ones(3)}, other, step=1)
    with pytest.raises(ckptdb.AlreadyExistsError, match="step 1 is already in store"):
        ckptdb.copy(url, other, steps=[1])


def test_gc_gives_back_the_dead_chunks_of_a_shared_object_in_a_bucket(bucket):
    """Fine-tuning into a bucket: step 1's object holds the frozen weights the
    kept steps share beside its own dead adapter; Store.gc rewrites it with
    the used chunks alone, and every kept step still loads bit for bit."""
    url = f"s3://{bucket}/finetune"
    frozen = torch.randn(768, 1024, generator=torch.Generator().manual_seed(0))
    adapters = {s: torch.randn(256, 1024, generator=torch.Generator().manual_seed(s)) for s in range(1, 5)}
    store = ckptdb.Store(url, keep_last=2)
    for s, adapter in adapters.items():
        ckptdb.save({"frozen": frozen, "adapter": adapter}, store, step=s)
    assert [i.step for i in store.steps()] == [3, 4]
    got = store.gc()
    assert got["rewritten_files"] == 1 and got["saves_running"] == 0, got
    assert got["rewritten_bytes_after"] < got["rewritten_bytes_before"], got
    for s in (3, 4):
        target = {"frozen": torch.zeros(768, 1024), "adapter": torch.zeros(256, 1024)}
        ckptdb.load(target, url, step=s)
        assert torch.equal(bits(target["frozen"]), bits(frozen)) and torch.equal(bits(target["adapter"]),
                                                                                 bits(adapters[s]))
    assert store.gc()["rewritten_files"] == 0  # nothing more to give back
    store.close()


def test_a_server_that_never_answers_ends_a_listing_and_a_save_within_the_stall_limit(tmp_path, monkeypatch):
    """A server that accepts connections and never says a word (a hung
    process, a load balancer holding the connection): Store(...,
    s3_stall_timeout=1) ends each call with an error naming the server and
    "no answer for 1 s" after two silent tries, not a hang."""
    import socket
    import threading
    import time
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                held.append(conn)  # read nothing, answer nothing
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "silent")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "silent")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    try:
        with pytest.raises(ValueError, match="s3_stall_timeout"):
            ckptdb.Store("s3://silent/x", s3_stall_timeout=0)
        store = ckptdb.Store(f"s3://silent/{tmp_path.name}", s3_stall_timeout=1)
        for call in (store.steps, lambda: ckptdb.save({"t": torch.zeros(4)}, store, 1)):
            start = time.monotonic()
            with pytest.raises(ckptdb.CheckpointError) as err:
                call()
            took = time.monotonic() - start
            assert "no answer for 1 s" in str(err.value), err.value
            assert endpoint in str(err.value), err.value
            assert took < 8, f"took {took:.1f} s"
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        listener.close()
