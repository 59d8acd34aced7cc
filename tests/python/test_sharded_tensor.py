"""PyTorch 1.13's ShardedTensor, the API ckptdb's protocol comes from: a
state dict of ShardedTensors saved by ckptdb and by
torch.distributed._shard.checkpoint.save_state_dict loads to equal tensors,
each through its own loader, and ckptdb's step loads into another sharding.
Runs where the ShardedTensor API imports (Debian's 1.13, after the patch of
tools/bench/torch113_compat.py)."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from conftest import run_ranks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import os, sys
sys.path.insert(0, os.path.join(sys.argv[3], "tools", "bench"))
from torch113_compat import patch_torch113_dataclass
patch_torch113_dataclass()
import torch, torch.distributed as dist, ckptdb
from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards
from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.checkpoint import (FileSystemReader, FileSystemWriter, load_state_dict,
                                                 save_state_dict)
store, fsdir = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
full = torch.randn(12, 6, generator=torch.Generator().manual_seed(1))

def rows(t):  # this rank's row shard of a [12, 6] tensor
    md = ShardMetadata(shard_offsets=[r * 6, 0], shard_sizes=[6, 6], placement=f"rank:{r}/cpu")
    return init_from_local_shards([Shard(t, md)], [12, 6])

def cols(t):  # this rank's column shard
    md = ShardMetadata(shard_offsets=[0, r * 3], shard_sizes=[12, 3], placement=f"rank:{r}/cpu")
    return init_from_local_shards([Shard(t, md)], [12, 6])

sd = {"st": rows(full[r * 6:(r + 1) * 6].clone()), "bias": torch.arange(4.0)}
ckptdb.save(sd, store, 1)
save_state_dict(sd, FileSystemWriter(fsdir))

by_ckptdb = {"st": rows(torch.zeros(6, 6)), "bias": torch.zeros(4)}
ckptdb.load(by_ckptdb, store, 1)
by_torch = {"st": rows(torch.zeros(6, 6)), "bias": torch.zeros(4)}
load_state_dict(by_torch, FileSystemReader(fsdir))
a, b = by_ckptdb["st"].local_shards()[0].tensor, by_torch["st"].local_shards()[0].tensor
assert torch.equal(a, b) and torch.equal(a, full[r * 6:(r + 1) * 6]), "row shards differ"
assert torch.equal(by_ckptdb["bias"], by_torch["bias"])
resharded = {"st": cols(torch.zeros(12, 3)), "bias": torch.zeros(4)}
ckptdb.load(resharded, store, 1)
assert torch.equal(resharded["st"].local_shards()[0].tensor, full[:, r * 3:(r + 1) * 3]), "column shard differs"
print(f"rank {r} ok", flush=True)
dist.destroy_process_group()
"""


def _sharded_tensor_api() -> bool:
    sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
    try:
        from torch113_compat import patch_torch113_dataclass
        patch_torch113_dataclass()
        import torch.distributed._shard.checkpoint  # noqa: F401
        from torch.distributed._shard.sharded_tensor import init_from_local_shards  # noqa: F401
        return True
    except Exception:  # noqa: BLE001
        return False
    finally:
        sys.path.pop(0)


@pytest.mark.skipif(torch.__version__ >= "2" , reason="the ShardedTensor API is tested with PyTorch 1.13 "
                    f"(this is {torch.__version__}; PyTorch 2 deprecates it for DTensor)")
def test_sharded_tensors_saved_by_ckptdb_and_by_save_state_dict_load_equal(tmp_path, store):
    if not _sharded_tensor_api():
        pytest.skip("torch.distributed._shard does not import here")
    out = run_ranks(tmp_path, SCRIPT, 2, store, str(tmp_path / "fs"), ROOT)
    assert out.returncode == 0, out.stdout
    assert out.stdout.count(" ok") == 2, out.stdout
