"""Sharded tensors of PyTorch as ckptdb sharded entries: DTensor (torch 2.x)
and ShardedTensor (torch 1.13's torch.distributed._shard).

A DTensor's local shard is placed at its global offset. With Replicate()
placements several ranks hold the same shard: for a save only the replica at
coordinate 0 of every replicated mesh dimension contributes it (the data is
written once); for a load every rank's shard is filled.
"""

from __future__ import annotations

import sys
from typing import Any


def _loaded_class(modules: tuple[str, ...], name: str):
    """The class `name` of the first of `modules` already imported, else None.
    Never imports: an object of a class whose module nobody imported cannot
    exist, and importing torch.distributed.tensor (sympy with it) costs a
    plain-tensor save or load a second or more."""
    for mod in modules:
        cls = getattr(sys.modules.get(mod), name, None)
        if cls is not None:
            return cls
    return None


def _dtensor_class():
    return _loaded_class(("torch.distributed.tensor", "torch.distributed._tensor", "torch.distributed.tensor._api",
                          "torch.distributed._tensor.api"), "DTensor")


def _sharded_tensor_class():
    return _loaded_class(("torch.distributed._shard.sharded_tensor", "torch.distributed._shard.sharded_tensor.api"),
                         "ShardedTensor")


def local_shards(fqn: str, value: Any, for_load: bool):
    """(dtype, global shape, [(offsets, local tensor)]) for a DTensor or a
    ShardedTensor, None for anything else."""
    from ._state import dtype_name
    dt = _dtensor_class()
    if dt is not None and isinstance(value, dt):
        return _dtensor_shards(fqn, value, for_load, dtype_name)
    st = _sharded_tensor_class()
    if st is not None and isinstance(value, st):
        shards = []
        for s in value.local_shards():
            shards.append((list(s.metadata.shard_offsets), s.tensor))
        dtype = value.metadata().tensor_properties.dtype
        import torch
        probe = torch.empty(0, dtype=dtype)
        return dtype_name(fqn, probe), list(value.size()), shards
    return None


def _dtensor_shards(fqn, value, for_load, dtype_name):
    from torch.distributed.tensor.placement_types import Replicate, Shard
    mesh = value.device_mesh
    placements = value.placements
    local = value.to_local()
    coord = mesh.get_coordinate()
    if coord is None:  # this rank is not in the mesh: it holds nothing
        return dtype_name(fqn, local), list(value.shape), []
    for p in placements:
        if not isinstance(p, (Shard, Replicate)) or type(p).__name__ not in ("Shard", "Replicate"):
            raise ValueError(f"entry '{fqn}': DTensor placement {p} is not supported "
                             "(Shard(d) and Replicate() are)")
    offsets = _global_offset(value, mesh, placements)
    if not for_load:
        for dim, p in enumerate(placements):
            if isinstance(p, Replicate) and coord[dim] != 0:
                return dtype_name(fqn, local), list(value.shape), []
    return dtype_name(fqn, local), list(value.shape), [(offsets, local)]


def _global_offset(value, mesh, placements) -> list[int]:
    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:
        from torch.distributed._tensor._utils import compute_local_shape_and_global_offset
    _, offset = compute_local_shape_and_global_offset(value.shape, mesh, placements)
    return [int(o) for o in offset]
