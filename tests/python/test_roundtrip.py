"""Single-process saves and loads: every dtype, layouts, objects, partial
loads, argument errors, async saves. Runs under PyTorch 1.13 and 2.x."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import ckptdb

TORCH_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                torch.int16, torch.int8, torch.uint8, torch.bool]
TORCH_DTYPES += [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)]
NUMPY_DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="no CUDA device here"))]


def sample(dtype: torch.dtype, shape, device="cpu", seed=0) -> torch.Tensor:
    """Values that use every bit pattern the dtype can hold (raw bytes)."""
    g = torch.Generator().manual_seed(seed)
    n = int(np.prod(shape)) * torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        return (raw % 2 == 1).reshape(shape).to(device)
    return raw.view(dtype).reshape(shape).to(device)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bytes (NaN payloads included)."""
    a, b = a.cpu().contiguous().reshape(-1), b.cpu().contiguous().reshape(-1)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("device", DEVICES)
def test_every_torch_dtype_round_trips_bit_for_bit(store, device):
    sd = {str(d).removeprefix("torch."): sample(d, (7, 33), device, i) for i, d in enumerate(TORCH_DTYPES)}
    sd["scalar"] = torch.tensor(3.5, device=device)
    sd["empty"] = torch.zeros(0, 4, device=device)
    ckptdb.save(sd, store, 1)
    target = {k: torch.zeros_like(v) for k, v in sd.items()}
    assert ckptdb.load(target, store, 1) == 1
    for k in sd:
        assert same_bits(target[k], sd[k]), k
        assert target[k].device == sd[k].device


def test_every_numpy_dtype_round_trips(store):
    rng = np.random.default_rng(0)
    sd = {np.dtype(d).name: (rng.integers(0, 255, (5, 6)).astype(d)) for d in NUMPY_DTYPES}
    ckptdb.save(sd, store, 0)
    target = {k: np.zeros_like(v) for k, v in sd.items()}
    ckptdb.load(target, store, 0)
    for k in sd:
        assert target[k].dtype == sd[k].dtype and (target[k] == sd[k]).all(), k


def test_non_contiguous_sources_and_targets(store):
    base = torch.arange(600, dtype=torch.float32).reshape(20, 30)
    arr = np.arange(600, dtype=np.int32).reshape(20, 30)
    sd = {"t": base.t(), "slice": base[::2, 5:9], "np_t": arr.T, "np_slice": arr[3:, ::3]}
    ckptdb.save(sd, store, 5)
    big = torch.full((20, 30), -1.0)
    big_np = np.full((20, 30), -1, dtype=np.int32)
    target = {"t": big.t(), "slice": torch.zeros(10, 8)[:, ::2], "np_t": big_np.T,
              "np_slice": np.zeros((17, 20), dtype=np.int32)[:, ::2]}
    ckptdb.load(target, store, 5)
    # The caller's views were filled, so their bases hold the saved values.
    assert torch.equal(target["t"], base.t()) and torch.equal(big, base)
    assert torch.equal(target["slice"], base[::2, 5:9])
    assert (target["np_t"] == arr.T).all() and (big_np == arr).all()
    assert (target["np_slice"] == arr[3:, ::3]).all()


def test_objects_round_trip_to_equal_values(store):
    torch.manual_seed(123)
    random.seed(5)
    sd = {
        "step": 42, "lr": 3e-4, "name": "run-7", "none": None,
        "optim": {"param_groups": [{"lr": 1e-3, "betas": (0.9, 0.95), "params": [0, 1, 2]}]},
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                "numpy": np.random.get_state()},
        "loader": {"epoch": 2, "position": 1234, "order": list(range(10))},
        "raw": b"\x00\x01 raw bytes", "complex": torch.tensor([1 + 2j]), "nested": {"w": torch.ones(3), "meta": {"k": [1, 2]}},
    }
    ckptdb.save(sd, store, 3)
    target = {k: None for k in ("step", "lr", "name", "none")}
    target["optim"] = {"param_groups": None}  # the same structure, leaves to be replaced
    target["loader"] = {"epoch": None, "position": None, "order": None}
    target.update({"rng": {"torch": torch.zeros_like(sd["rng"]["torch"]), "python": None, "numpy": None},
                   "raw": b"", "nested": {"w": torch.zeros(3), "meta": {"k": None}}})
    ckptdb.load(target, store, 3)
    target["complex"] = torch.zeros(1, dtype=torch.complex64)
    ckptdb.load(target, store, 3)
    assert torch.equal(target["complex"], sd["complex"])  # pickled, replaced
    for k in ("step", "lr", "name", "none", "optim", "loader", "raw"):
        assert target[k] == sd[k], k
    assert torch.equal(target["rng"]["torch"], sd["rng"]["torch"])
    assert target["rng"]["python"] == sd["rng"]["python"]
    assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
               for a, b in zip(target["rng"]["numpy"], sd["rng"]["numpy"]))
    assert target["nested"]["meta"] == {"k": [1, 2]}
    names = [e.fqn for e in ckptdb.Store(store).entries(3)]
    assert "optim.param_groups" in names and "nested.w" in names and "rng.torch" in names


def test_lists_of_tensors_are_walked_with_dotted_indices(store):
    sd = {"layers": [{"w": torch.full((2,), float(i))} for i in range(3)], "hp": [0.9, 0.99]}
    ckptdb.save(sd, store, 1)
    names = [e.fqn for e in ckptdb.Store(store).entries(1)]
    assert names == ["layers.0.w", "layers.1.w", "layers.2.w", "hp"]
    target = {"layers": [{"w": torch.zeros(2)} for _ in range(3)], "hp": None}
    ckptdb.load(target, store)
    assert [float(x["w"][0]) for x in target["layers"]] == [0.0, 1.0, 2.0] and target["hp"] == [0.9, 0.99]


def test_wrong_shape_target_names_the_fqn_and_changes_nothing(store):
    ckptdb.save({"a": torch.ones(4), "b": {"w": torch.ones(3, 3)}, "n": 1}, store, 1)
    target = {"a": torch.zeros(4), "b": {"w": torch.zeros(3, 2)}, "n": None}
    with pytest.raises(ckptdb.CheckpointError) as e:
        ckptdb.load(target, store, 1)
    assert isinstance(e.value, ValueError)
    assert "'b.w'" in str(e.value) and "shape" in str(e.value)
    assert e.value.rank_failures and "'b.w'" in e.value.rank_failures[0]
    assert torch.equal(target["a"], torch.zeros(4)) and target["n"] is None  # nothing was read


def test_missing_entries_strict_and_not(store):
    ckptdb.save({"a": torch.ones(2)}, store, 1)
    with pytest.raises(ckptdb.NotFoundError, match="'b'"):
        ckptdb.load({"a": torch.zeros(2), "b": torch.zeros(2)}, store, 1)
    target = {"a": torch.zeros(2), "b": torch.full((2,), 7.0)}
    ckptdb.load(target, store, 1, strict=False)
    assert torch.equal(target["a"], torch.ones(2)) and torch.equal(target["b"], torch.full((2,), 7.0))


def test_keys_load_only_the_named_entries(store):
    ckptdb.save({"a": torch.ones(2), "b": torch.ones(2), "o": "x"}, store, 1)
    target = {"a": torch.zeros(2), "b": torch.zeros(2), "o": None}
    ckptdb.load(target, store, 1, keys=["b"])
    assert torch.equal(target["a"], torch.zeros(2)) and torch.equal(target["b"], torch.ones(2))
    assert target["o"] is None
    with pytest.raises(ValueError, match="'zz'"):
        ckptdb.load(target, store, 1, keys=["zz"])


def test_convert_dtype(store):
    ckptdb.save({"w": torch.tensor([1.5, -2.25, 3.0])}, store, 1)
    target = {"w": torch.zeros(3, dtype=torch.bfloat16)}
    with pytest.raises(ckptdb.CheckpointError, match="dtype"):
        ckptdb.load(target, store, 1)
    ckptdb.load(target, store, 1, convert_dtype=True)
    assert target["w"].tolist() == [1.5, -2.25, 3.0]


def test_steps_tags_and_errors(store):
    with pytest.raises(ckptdb.NotFoundError):
        ckptdb.load({"a": torch.zeros(1)}, store)  # no store yet
    for s in (1, 5, 9):
        ckptdb.save({"a": torch.full((1,), float(s))}, store, s)
    with pytest.raises(ckptdb.AlreadyExistsError, match="step 5 already exists"):
        ckptdb.save({"a": torch.ones(1)}, store, 5)
    with pytest.raises(ValueError, match="negative"):
        ckptdb.save({"a": torch.ones(1)}, store, -1)
    with pytest.raises(TypeError, match="step must be an int"):
        ckptdb.save({"a": torch.ones(1)}, store, "7")
    with pytest.raises(TypeError, match="state_dict must be a dict"):
        ckptdb.save([torch.ones(1)], store, 10)
    with pytest.raises(ValueError, match="'c'.*meta"):
        ckptdb.save({"c": torch.ones(2, device="meta")}, store, 11)
    s = ckptdb.Store(store)
    assert [i.step for i in s.steps()] == [1, 5, 9] and s.latest() == 9
    assert s.tag(5, "best") is None and s.tags() == {"best": 5}
    t = {"a": torch.zeros(1)}
    assert ckptdb.load(t, store, "best") == 5 and float(t["a"]) == 5.0
    assert ckptdb.load(t, store) == 9 and float(t["a"]) == 9.0
    with pytest.raises(ckptdb.NotFoundError):
        ckptdb.load(t, store, "nosuchtag")
    s.delete(1)
    assert [i.step for i in s.steps()] == [5, 9]
    assert s.gc(keep_last=1)["pruned"] == []  # the tagged step 5 is kept
    assert s.gc(keep_last=1, keep_tagged=False)["pruned"] == [5]
    assert [i.step for i in s.steps()] == [9]
    s.close()


def test_gc_rewrites_a_file_whose_chunks_later_steps_only_partly_share(store):
    frozen = torch.arange(512 * 1024, dtype=torch.float32).reshape(512, 1024)  # 2 MiB, never changes
    for s in (1, 2):
        ckptdb.save({"frozen": frozen, "trained": torch.full((512, 1024), float(s))}, store, s)
    st = ckptdb.Store(store)
    r = st.gc(keep_last=1)
    # Step 1's file keeps the frozen chunks step 2 shares; its trained
    # chunks, half of it, are rewritten away.
    assert r["pruned"] == [1] and r["rewritten_files"] == 1, r
    assert r["rewritten_bytes_after"] < 0.6 * r["rewritten_bytes_before"], r
    assert st.gc()["rewritten_files"] == 0
    t = {"frozen": torch.zeros(512, 1024), "trained": torch.zeros(512, 1024)}
    assert ckptdb.load(t, store) == 2
    assert torch.equal(t["frozen"], frozen) and bool((t["trained"] == 2.0).all())
    st.close()


def test_store_read_returns_slices_reading_what_they_touch(store):
    w = torch.arange(64 * 1024, dtype=torch.float32).reshape(1024, 64)
    ckptdb.save({"w": w, "b": b"blob", "o": {"x": 1}}, ckptdb.Store(store, chunk_bytes=4096), 2)
    s = ckptdb.Store(store)
    assert torch.equal(s.read(2, "w"), w)
    assert torch.equal(s.read("latest", "w", (slice(10, 20), 3)), w[10:20, 3])
    assert torch.equal(s.read(2, "w", (-1,)), w[-1])
    assert s.read(2, "b") == b"blob" and s.read_object(2, "o.x") == 1
    a = s.read(2, "w", (slice(0, 2),), like="numpy")
    assert isinstance(a, np.ndarray) and (a == w[:2].numpy()).all()
    e = {x.fqn: x for x in s.entries(2)}
    assert e["w"].shape == (1024, 64) and e["w"].dtype == "f32" and e["w"].logical_bytes == w.numel() * 4
    with pytest.raises(ckptdb.NotFoundError, match="'nope'"):
        s.read(2, "nope")
    with pytest.raises(IndexError):
        s.read(2, "w", (2000,))


def test_async_save_keeps_the_values_at_call_time(store):
    w = torch.arange(1 << 20, dtype=torch.float32)
    sd = {"w": w, "step": 1}
    fut = ckptdb.async_save(sd, store, 1)
    w.add_(1.0)  # the caller changes its tensors at once
    sd["step"] = 2
    fut.result()
    assert fut.done() and fut.step == 1 and fut.blocked_seconds >= 0
    t = {"w": torch.zeros_like(w), "step": None}
    ckptdb.load(t, store, 1)
    assert torch.equal(t["w"], torch.arange(1 << 20, dtype=torch.float32)) and t["step"] == 1
    bad = ckptdb.async_save({"w": w}, store, 1)  # step 1 exists: the error comes through the future
    with pytest.raises(ckptdb.AlreadyExistsError):
        bad.result()
    ckptdb.Store(store).close()


def test_unchanged_tensors_are_stored_once_unless_deduplication_is_off(tmp_path):
    frozen = sample(torch.bfloat16, (512, 1024), seed=1)  # 1 MiB
    def step(s):
        return {"frozen": frozen, "lr": torch.tensor(float(s))}
    shared = ckptdb.Store(tmp_path / "shared")
    for s in (1, 2):
        ckptdb.save(step(s), shared, s)
    added = {i.step: i.stored_bytes for i in shared.steps()}
    nbytes = frozen.numel() * frozen.element_size()
    assert added[1] > nbytes and added[2] < 1024, added
    t = {"frozen": torch.zeros_like(frozen), "lr": torch.tensor(0.0)}
    assert ckptdb.load(t, shared, 2) == 2 and same_bits(t["frozen"], frozen) and float(t["lr"]) == 2.0
    shared.delete(1)
    t["frozen"].zero_()
    ckptdb.load(t, shared, 2)
    assert same_bits(t["frozen"], frozen)
    shared.close()
    apart = ckptdb.Store(tmp_path / "apart", deduplicate=False)
    for s in (1, 2):
        ckptdb.save(step(s), apart, s)
    assert all(i.stored_bytes > nbytes for i in apart.steps())
    apart.close()


def test_tensors_are_cut_into_boxes_unless_rows_are_asked_for(tmp_path):
    import json
    import os
    import subprocess
    w = torch.arange(256 * 512, dtype=torch.float32).reshape(256, 512)  # 512 KiB
    for layout, want in (("boxes", [128, 128]), ("rows", [])):
        path = str(tmp_path / layout)
        s = ckptdb.Store(path, chunk_bytes=64 << 10, chunk_layout=layout)
        ckptdb.save({"w": w}, s, 1)
        listed = subprocess.run([os.environ["CKPTDB_CLI"], "ls", path, "1", "--shards", "--json"],
                                capture_output=True, text=True, check=True)
        piece = json.loads(listed.stdout)[0]["pieces"][0]
        assert piece["chunk_shape"] == want and piece["chunks"] == 8, piece
        assert torch.equal(s.read(1, "w", (slice(None), slice(100, 300))), w[:, 100:300])
        t = {"w": torch.zeros_like(w)}
        assert ckptdb.load(t, s, 1) == 1 and torch.equal(t["w"], w)
        s.close()
    with pytest.raises(ValueError, match="chunk_layout 'cubes'"):
        ckptdb.Store(tmp_path / "x", chunk_layout="cubes")


PLAIN_PROCESS_SCRIPT = """
import sys, torch, ckptdb
before = set(sys.modules)
ckptdb.save({"w": torch.arange(6.0), "epoch": 3}, sys.argv[1], 1)
t = {"w": torch.zeros(6), "epoch": None}
ckptdb.load(t, sys.argv[1])
assert torch.equal(t["w"], torch.arange(6.0)) and t["epoch"] == 3, t
print(sorted(m for m in set(sys.modules) - before
             if m.startswith(("torch.distributed.tensor", "torch.distributed._tensor", "torch.distributed._shard",
                              "sympy"))))
"""


def test_plain_tensors_save_and_load_without_importing_the_sharded_tensor_modules(tmp_path, store):
    """A script of plain tensors pays for no DTensor or ShardedTensor import
    (torch.distributed.tensor brings sympy: a second or more per process);
    a DTensor cannot exist unless its module was imported already."""
    import subprocess
    import sys
    from conftest import _child_env
    out = subprocess.run([sys.executable, "-c", PLAIN_PROCESS_SCRIPT, store], capture_output=True, text=True,
                         timeout=120, env=_child_env(), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
