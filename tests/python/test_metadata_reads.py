"""A step that many ranks saved (entries of many pieces), read from Python
(in a directory and in a bucket):
Store.entries lists it from the step's summary with the pieces' own figures,
Store.read of one entry reads that entry's records, DCP's StorageReader
gives every piece, and Python's garbage collector (paused while hundreds of
thousands of pieces become Python objects) is left as it was.
tools/bench/bench_py_metadata.py measures what these cost."""

from __future__ import annotations

import gc

import pytest
import torch

import ckptdb
from ckptdb import _ckptdb
from ckptdb._errors import NotFoundError
from ckptdb._state import region
from conftest import torch_version

needs_dcp = pytest.mark.skipif(torch_version() < (2, 2), reason="ckptdb.torch needs torch >= 2.2")

ENTRIES, PIECES, COLS = 6, 48, 4


def rows(entry: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * seed + entry)
    return torch.randn(PIECES, COLS, generator=g)


def save_rows(store: ckptdb.Store, step: int, seeds: list[int]) -> None:
    """Entry i of `step`: a [PIECES, COLS] tensor saved as PIECES one-row
    pieces (what PIECES ranks save), from rows(i, seeds[i])."""
    sd = _ckptdb.StateDict()
    keep = []
    for i, seed in enumerate(seeds):
        t = rows(i, seed)
        keep.append(t)
        shards = []
        for r in range(PIECES):
            reg = region(f"layer.{i}", t[r:r + 1], for_load=False)
            shards.append(([r, 0], [1, COLS], reg.data, reg.nbytes, -1))
            keep.append(reg)
        sd.add_sharded(f"layer.{i}", "f32", [PIECES, COLS], shards)
    _ckptdb.save(sd, store._writer(), step, None, 0)


@pytest.fixture(params=["directory", "bucket"])
def saved(request, store):
    if request.param == "bucket":
        store = f"s3://{request.getfixturevalue('bucket')}/many-pieces"
    s = ckptdb.Store(store)
    save_rows(s, 1, list(range(ENTRIES)))
    save_rows(s, 2, [0, 1, 99] + list(range(3, ENTRIES)))  # entry 2 changed, the others stored once
    yield s
    s.close()


def test_entries_of_a_step_of_many_pieces_give_the_figures_of_its_pieces(saved):
    for n in (1, 2):
        listed = [(e.fqn, e.kind, e.dtype, e.shape, e.logical_bytes, e.stored_bytes) for e in saved.entries(n)]
        whole = saved._reader().entries(n, pieces=True)
        assert listed == [(e["fqn"], "sharded_tensor", "f32", (PIECES, COLS), e["logical_bytes"], e["stored_bytes"])
                          for e in whole]
        assert all(len(e["pieces"]) == PIECES for e in whole)
        assert all(e["pieces"] == [] for e in saved._reader().entries(n, pieces=False))
    second = {e.fqn: e.stored_bytes for e in saved.entries(2)}
    assert second["layer.2"] >= PIECES * COLS * 4 and second["layer.0"] == 0, second
    added = {i.step: i.stored_bytes for i in saved.steps()}
    assert sum(second.values()) == added[2]


def test_reading_one_entry_of_a_step_of_many_pieces(saved):
    assert torch.equal(saved.read(2, "layer.2"), rows(2, 99))
    assert torch.equal(saved.read(2, "layer.4", (slice(7, 8),)), rows(4, 4)[7:8])
    one = saved._reader().entry(1, "layer.3")
    assert one["fqn"] == "layer.3" and sorted(one["pieces"]) == [([r, 0], [1, COLS]) for r in range(PIECES)]
    assert saved._reader().entry(1, "layer.9") is None
    with pytest.raises(NotFoundError, match="entry 'layer.9' is not in step 1"):
        saved.read(1, "layer.9")


@needs_dcp
def test_dcps_metadata_lists_every_piece_and_dcp_load_loads_them(saved):
    import torch.distributed.checkpoint as dcp
    from ckptdb.torch import StorageReader
    reader = StorageReader(saved.path, step=2)
    md = reader.read_metadata()
    assert set(md.state_dict_metadata) == {f"layer.{i}" for i in range(ENTRIES)}
    chunks = md.state_dict_metadata["layer.5"].chunks
    assert sorted((list(c.offsets), list(c.sizes)) for c in chunks) == [([r, 0], [1, COLS]) for r in range(PIECES)]
    target = {f"layer.{i}": torch.zeros(PIECES, COLS) for i in range(ENTRIES)}
    dcp.load(target, storage_reader=reader)
    assert torch.equal(target["layer.2"], rows(2, 99)) and torch.equal(target["layer.5"], rows(5, 5))
    assert reader.step_loaded == 2


@pytest.mark.parametrize("enabled", [True, False])
def test_pythons_garbage_collector_is_left_as_it_was(saved, enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        saved.entries(1)
        saved._reader().entries(1, pieces=True)
        assert gc.isenabled() == enabled
        with pytest.raises(NotFoundError):
            saved._reader().entries(99, pieces=True)
        assert gc.isenabled() == enabled
        if torch_version() >= (2, 2):
            from ckptdb.torch import StorageReader
            StorageReader(saved.path, step=1).read_metadata()
            with pytest.raises(NotFoundError):
                StorageReader(saved.path, step=99).read_metadata()
            assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()
