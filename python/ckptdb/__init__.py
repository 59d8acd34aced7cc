"""ckptdb: a checkpoint store for distributed training.

Every rank of a job saves its state dict as one atomic, numbered step of a
store; any later job, at any world size and with any sharding, loads it
back::

    import ckptdb
    ckptdb.save(state_dict, "/ckpt/run1", step=100)       # every rank
    ckptdb.load(state_dict, "/ckpt/run1", step="latest")  # in place
    fut = ckptdb.async_save(state_dict, "/ckpt/run1", step=200)
    ...
    fut.result()

Under torchrun (or once torch.distributed is initialized) nothing else is
needed; see ckptdb._dist for how the ranks are found. The store from
Python: ckptdb.Store(path).steps(), .entries(step), .read(step, fqn), ...
A storage backend for torch.distributed.checkpoint: ckptdb.torch.
"""

from ._checkpoint import SaveFuture, async_save, load, save
from ._errors import (AlreadyExistsError, CheckpointError, DataLossError, InvalidArgumentError,
                      NotFoundError, TimeoutError_)
from .store import EntryInfo, StepInfo, Store, copy

__version__ = "0.2.0"

__all__ = [
    "save", "load", "async_save", "SaveFuture", "Store", "StepInfo", "EntryInfo", "copy",
    "CheckpointError", "InvalidArgumentError", "NotFoundError", "AlreadyExistsError",
    "DataLossError", "TimeoutError_",
]
