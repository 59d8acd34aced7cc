"""A storage backend for ``torch.distributed.checkpoint`` (DCP).

    import torch.distributed.checkpoint as dcp
    import ckptdb.torch

    dcp.save(state_dict, storage_writer=ckptdb.torch.StorageWriter("/ckpt/run1", step=100))
    fut = dcp.async_save(state_dict, storage_writer=ckptdb.torch.StorageWriter("/ckpt/run1", step=200))
    dcp.load(state_dict, storage_reader=ckptdb.torch.StorageReader("/ckpt/run1"))  # "latest"

One DCP save is one ckptdb step: ``ckptdb ls``/``ckptdb verify`` list and
check it, and ``ckptdb.load`` (or ``ckptdb.Store.read``) reads it back into
a state dict of the same FQNs, at any world size. Conversely a step saved by
``ckptdb.save`` can be loaded through :class:`StorageReader`.

How DCP's items map onto the step
---------------------------------
* A tensor item (a plain tensor, a DTensor's or ShardedTensor's local shard,
  or a chunk of either) is one stored piece of a *sharded* entry: the entry's
  FQN is the item's ``index.fqn``, its global shape ``tensor_data.size``, the
  piece's offsets ``tensor_data.chunk.offsets``. DCP's planner gives each
  chunk to one rank (a replicated tensor is written once), so the pieces of
  all ranks cover every tensor exactly once, which the save checks.
* A bytes item (any non-tensor value: DCP ``torch.save``s it) is a bytes
  entry holding those bytes as they are, recorded as encoded by torch.save:
  ``ckptdb.load`` and ``Store.read`` give back the object itself
  (``Store.read_bytes`` the bytes). ckptdb saves the coordinator's bytes
  entries, so the ranks' bytes items are gathered to it over ckptdb's own
  connection first.
* What DCP's ``Metadata`` carries besides the entries is stored with the
  step (a step annotation, proto/FORMAT.md "Annotations"): ``planner_data``
  (how each flattened FQN nests in the state dict), each tensor's
  ``TensorProperties`` (requires_grad, strides, ...), DCP's format version
  and the save id. ``read_metadata`` gives them back, so that planners which
  rebuild a state dict from the metadata alone (``_EmptyStateDictLoadPlanner``,
  ``_load_state_dict_from_keys``, ``format_utils.dcp_to_torch_save``) get the
  nested structure, as from ``FileSystemReader``.
* Metadata for a load is built from the step's entries: each sharded or
  plain tensor entry becomes a ``TensorStorageMetadata`` whose chunks are the
  stored pieces, each bytes entry a ``BytesStorageMetadata``. A step saved
  by ``ckptdb.save``, or by a DCP save before ckptdb stored DCP's metadata,
  has none: every FQN is then a top-level key (``planner_data={fqn: (fqn,)}``).

Commit: every rank's ``write_data`` runs one ckptdb collective save of the
whole step (SPMD, like ``ckptdb.save``, through a connection of its own, made
on the first save of a process): the step is committed there, all or
nothing, before ``write_data`` returns; a failure on any rank raises the
same ``ckptdb.CheckpointError`` on every rank and commits nothing (DCP reports
it inside its own ``CheckpointException``). ``finish`` has nothing left to
do. A rank whose plan holds no items still takes part in that save.

Loads read locally (no collectives): each rank reads exactly the regions of
its ``ReadItem``s (any saved sharding, any world size), one engine load per
``read_data``. The step is resolved ("latest", a tag) by every rank's
``read_metadata``; the coordinator's number is then handed to every rank
through DCP's global plan, so all ranks read the same step.

Process-based async saves (``AsyncCheckpointerType.PROCESS``) work: the
writer is pickled into DCP's daemon process (as the store's path and
options), which connects on its own and gives the store back after each
save. The training process's own saves keep the store open for writing, as
``ckptdb.save`` does: call ``ckptdb.Store(path).close()`` there before a
process-based save to the same store follows them.

The exchange before the save sends each rank's list of entries (FQN, dtype,
shape) to the coordinator, with what the coordinator needs for DCP's
metadata when its planner keeps none (``DefaultSavePlanner`` keeps it in
``planner.metadata``): the rank's planner_data and tensor properties, and
its bytes entries. The coordinator merges them and sends every rank the
step's entries (or the error every rank raises), like the engine's own plan
exchange: what a rank receives does not grow with the world size.

Limitations: a planner's ``planner_data`` is stored as JSON when it maps
FQNs to paths of str and int keys (what DCP's planners make), and pickled
otherwise; ``storage_data`` is ckptdb's own (the step number). Tensors must
have one of ckptdb's dtypes (f64, f32, f16, bf16, f8e4m3, f8e5m2, i64, i32,
i16, i8, u8, bool). ``use_collectives=False`` saves are
refused (a step is one save by every rank). DCP's ``process_group`` must
hold the same ranks as ckptdb's connection (the whole job), unless a
``communicator`` is given.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import gc
import io
import json
import os
import pickle
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,
                                                   MetadataIndex, TensorProperties, TensorStorageMetadata)
from torch.distributed.checkpoint.planner import (LoadItemType, LoadPlan, LoadPlanner, ReadItem, SavePlan,
                                                  SavePlanner, WriteItemType)
from torch.distributed.checkpoint.storage import StorageReader as _DcpStorageReader
from torch.distributed.checkpoint.storage import StorageWriter as _DcpStorageWriter
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from . import _ckptdb, _dist, _state
from ._checkpoint import _check_metrics, _check_step, _store
from ._errors import CheckpointError, InvalidArgumentError, NotFoundError
from .store import _TORCH_NAMES, Store, StepRef, store_path

try:  # torch >= 2.4
    from torch.distributed.checkpoint.metadata import StorageMeta
except ImportError:  # pragma: no cover - older torch
    StorageMeta = None  # type: ignore[assignment,misc]

__all__ = ["StorageWriter", "StorageReader"]

# The job id of the connection DCP saves use (one per process, made by every
# rank on its first distributed DCP save; see _dist.connect).
_JOB_ID = "ckptdb-dcp"
# The step annotation that holds what DCP's Metadata carries besides the
# entries (proto/FORMAT.md, "Annotations").
_ANNOTATION = "torch.distributed.checkpoint"
_comm_lock = threading.Lock()
_comm: Any = None
_comm_made = False
# Serializes this process's DCP saves on that connection: one save's
# exchange and collective save run back to back.
_save_lock = threading.Lock()


def _dcp_communicator() -> Any:
    global _comm, _comm_made
    with _comm_lock:
        if not _comm_made:
            _comm = _dist.connect(job_id=_JOB_ID)
            _comm_made = True
        return _comm


def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, _TORCH_NAMES[name])


def _storage_meta(path: str, save_id: str | None = None, load_id: str | None = None) -> Any:
    if StorageMeta is None:
        return None
    return StorageMeta(checkpoint_id=path, save_id=save_id, load_id=load_id)


def _dist_rank() -> int:
    import torch.distributed as dist
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


@dataclass(frozen=True)
class _SaveInfo:
    """What the coordinator's prepare_global_plan tells every rank (in
    SavePlan.storage_data): how many ranks DCP saves with, and which one
    coordinates."""
    world_size: int
    coordinator: int


@dataclass(frozen=True)
class _LoadInfo:
    """The step a load reads (Metadata.storage_data, then LoadPlan.storage_data
    as the coordinator resolved it)."""
    step: int


# --- saves -------------------------------------------------------------------------


def _refuse_coordinator_only(store: Store, what: str, instead: str) -> None:
    if store.access == "coordinator_only":
        raise ValueError(f"ckptdb.torch.{what} needs a store every rank sees; store '{store.path}' has "
                         f"access='coordinator_only': use {instead}")


class StorageWriter(_DcpStorageWriter):
    """Writes a DCP save as step `step` of a ckptdb store.

    Args:
        store: the store's path (created by the first save), a bucket URL
            "s3://BUCKET/PREFIX", or a ckptdb.Store
            (for its options: chunk_bytes, compression, retention).
        step: the step number to commit (>= 0; a step already committed is
            an AlreadyExistsError). One writer saves one step; set
            ``writer.step`` (or make a new writer) for the next save.
        communicator: ckptdb's connection to DCP's ranks (default: one made
            for DCP saves as ckptdb._dist describes, None in one process).
        metrics, note: committed with the step, as ckptdb.save's (set
            ``writer.metrics`` / ``writer.note`` for the next save; the
            coordinator's are stored).

    ``dcp.save(..., checkpoint_id=path)`` with this writer saves to `path`.
    """

    def __init__(self, store: Any, step: int, *, communicator: Any = None,
                 metrics: dict[str, float] | None = None, note: str | None = None) -> None:
        super().__init__()
        _check_metrics(metrics, note)
        self.metrics = metrics
        self.note = note
        self._store: Store = _store(store)
        _refuse_coordinator_only(self._store, "StorageWriter", "ckptdb.save")
        self.step = _check_step(step)
        self._communicator = communicator
        self._is_coordinator = True
        self._rank: int | None = None
        self._save_id = uuid.uuid4().hex
        self._release_after_save = False

    # A writer is pickled by DCP's process-based async save: it travels as
    # its store's path and options (the connection is made again there).
    # That daemon process then gives the store back after each save, so the
    # training process (or the next daemon save) can open it for writing.
    def __getstate__(self) -> dict:
        if self._communicator is not None:
            raise TypeError("a ckptdb.torch.StorageWriter with an explicit communicator cannot be pickled")
        d = self.__dict__.copy()
        d["_store"] = (self._store.path, dict(self._store._options))
        return d

    def __setstate__(self, d: dict) -> None:
        path, options = d.pop("_store")
        self.__dict__.update(d)
        self._store = Store(path, **options)
        self._release_after_save = True

    @property
    def checkpoint_id(self) -> str:
        """The store's path."""
        return self._store.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        """A path that is a ckptdb store or could become one; any bucket URL
        (s3://BUCKET/PREFIX: whether it holds a store is found by the save)."""
        if not isinstance(checkpoint_id, (str, os.PathLike)):
            return False
        path = os.fspath(checkpoint_id)
        if isinstance(path, str) and path.startswith("s3://"):
            return True
        if os.path.isdir(path):
            return os.path.exists(os.path.join(path, "CKPTDB")) or not os.listdir(path)
        return not os.path.exists(path)

    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        if checkpoint_id:
            if store_path(checkpoint_id) != self._store.path:
                self._store = _store(checkpoint_id)
        self._save_id = uuid.uuid4().hex

    def storage_meta(self) -> Any:
        return _storage_meta(self._store.path, save_id=self._save_id)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self._is_coordinator = is_coordinator
        self._rank = kwargs.get("rank")
        if not kwargs.get("use_collectives", True):
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                raise InvalidArgumentError("ckptdb.torch.StorageWriter saves one step with every rank "
                                           "together: dcp.save(..., use_collectives=False) is not supported",
                                           code="InvalidArgument")

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        if len(plans) == 1:  # saving alone (no_dist, or a 1-rank job)
            coordinator = 0
        else:
            coordinator = self._rank if self._rank is not None else _dist_rank()
        info = _SaveInfo(world_size=len(plans), coordinator=coordinator)
        return [dataclasses.replace(p, storage_data=info) for p in plans]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        info = plan.storage_data
        if not isinstance(info, _SaveInfo):
            # A planner that dropped storage_data: assume DCP saves with the
            # whole job and rank 0 coordinates (dcp.save's defaults).
            import torch.distributed as dist
            world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
            info = _SaveInfo(world_size=world, coordinator=0)
        step = _check_step(self.step)
        comm = self._comm_for(info)
        rank = comm.rank if comm is not None else 0
        with _save_lock:
            try:
                mine = _LocalWrite(step, rank == info.coordinator, plan, planner, self._save_id)
                entries, everyone = _agree(comm, mine.message(), info.coordinator, step)
                sd = _state_dict_for(entries, everyone, rank, info.coordinator, mine)
                annotations = {}
                if rank == info.coordinator:  # only the coordinator's are stored
                    annotations[_ANNOTATION] = mine.record or _dcp_record(everyone, info.coordinator, None,
                                                                          self._save_id)
                metrics, note = _check_metrics(self.metrics, self.note)
                with self._store._writing() as writer:
                    _ckptdb.save(sd, writer, step, comm, info.coordinator, annotations, metrics=metrics, note=note)
            finally:
                if self._release_after_save:
                    self._store.close()
        fut: Future[list[WriteResult]] = Future()
        fut.set_result(mine.results)
        return fut

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        # Nothing to do: write_data committed the step on every rank.
        pass

    def _comm_for(self, info: _SaveInfo) -> Any:
        """ckptdb's connection to the ranks DCP saves with (None: alone)."""
        if info.world_size == 1:
            return None
        comm = self._communicator if self._communicator is not None else _dcp_communicator()
        world = 1 if comm is None else comm.world_size
        if world != info.world_size:
            raise InvalidArgumentError(f"DCP saves with {info.world_size} ranks, ckptdb's connection has "
                                       f"{world}: use the default process group, or pass "
                                       "StorageWriter(communicator=...) connecting exactly DCP's ranks",
                                       code="InvalidArgument")
        if self._rank is not None and comm.rank != self._rank:
            raise InvalidArgumentError(f"this process is rank {self._rank} in DCP's process group and "
                                       f"rank {comm.rank} in ckptdb's connection: they must agree",
                                       code="InvalidArgument")
        return comm


class _LocalWrite:
    """One rank's WriteItems as engine regions (tensors) and bytes, with the
    WriteResults DCP expects. Preparation errors are recorded, not raised,
    so that every rank still reaches the exchange."""

    def __init__(self, step: int, is_coordinator: bool, plan: SavePlan, planner: SavePlanner, save_id: str) -> None:
        self.step = step
        self.is_coordinator = is_coordinator
        self.tensors: dict[str, tuple[str, list[int], list]] = {}   # fqn -> (dtype, shape, [shard spec])
        self.bytes: dict[str, bytes] = {}
        self.keep: list = []          # what must stay alive until the save returns
        self.results: list[WriteResult] = []
        self.error: str | None = None
        self.error_kind = "InvalidArgument"
        # The coordinator's flattened state dict order (DefaultSavePlanner's
        # planner_data), to list the step's entries in that order.
        self.order = None
        if is_coordinator and isinstance(plan.planner_data, dict):
            self.order = list(plan.planner_data)
        # DCP's global Metadata, as the coordinator's planner made it
        # (DefaultSavePlanner keeps it); for a planner that keeps none, what
        # DCP's Metadata takes from the plans: planner_data (merged over the
        # ranks, as DefaultSavePlanner does) and each tensor's properties.
        metadata = getattr(planner, "metadata", None) if is_coordinator else None
        self.record: bytes | None = None   # the annotation, made from that Metadata
        self.planner_data = plan.planner_data if isinstance(plan.planner_data, dict) else None
        self.planner_data_pickle: bytes | None = None   # another kind of planner_data (the coordinator's)
        self.properties: dict[str, dict] = {}            # fqn -> _properties_record
        try:
            if isinstance(metadata, Metadata):
                self.record = _dcp_record([], 0, metadata, save_id)
            if is_coordinator and plan.planner_data is not None and self.planner_data is None:
                self.planner_data_pickle = pickle.dumps(plan.planner_data, protocol=pickle.HIGHEST_PROTOCOL)
            for item in plan.items:
                self._add(item, planner)
        except Exception as e:  # noqa: BLE001 - reported to every rank by the exchange
            self.error = f"{type(e).__name__}: {e}"
            if not isinstance(e, (TypeError, ValueError, KeyError)):
                self.error_kind = "Internal"

    def _add(self, item: Any, planner: SavePlanner) -> None:
        fqn = item.index.fqn
        data = planner.resolve_data(item)
        if item.type == WriteItemType.BYTE_IO:
            raw = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data.read())
            if fqn in self.bytes:
                raise ValueError(f"entry '{fqn}': two bytes items on one rank")
            self.bytes[fqn] = raw
            self.results.append(WriteResult(index=item.index, size_in_bytes=len(raw), storage_data=self.step))
            return
        td = item.tensor_data
        tensor = data.detach()
        if tensor.dtype != td.properties.dtype:
            tensor = tensor.to(td.properties.dtype)
        if tensor.device.type not in ("cpu", "cuda"):
            tensor = tensor.cpu()
        sizes = [int(s) for s in td.chunk.sizes]
        if list(tensor.shape) != sizes:
            raise ValueError(f"entry '{fqn}': the planner resolved a tensor of shape {list(tensor.shape)} "
                             f"for a chunk of shape {sizes}")
        dtype = _state.dtype_name(fqn, tensor)
        shape = [int(s) for s in td.size]
        r = _state.region(fqn, tensor, for_load=False)
        self.keep.append(r.keep)
        entry = self.tensors.setdefault(fqn, (dtype, shape, []))
        if entry[0] != dtype or entry[1] != shape:
            raise ValueError(f"entry '{fqn}': chunks of dtypes/shapes {entry[0]}{entry[1]} and {dtype}{shape}")
        entry[2].append(([int(o) for o in td.chunk.offsets], r.shape, r.data, r.nbytes, r.device))
        if fqn not in self.properties:
            self.properties[fqn] = _properties_record(td.properties)
        self.results.append(WriteResult(index=item.index, size_in_bytes=r.nbytes, storage_data=self.step))

    def message(self) -> dict:
        """What the coordinator needs: the entries (every rank must save the
        same FQNs) and the bytes, which it stores (it keeps its own)."""
        return {"step": self.step, "error": self.error, "error_kind": self.error_kind, "order": self.order,
                "tensors": [(fqn, d, s) for fqn, (d, s, _) in self.tensors.items()],
                "bytes": {fqn: None if self.is_coordinator else b for fqn, b in self.bytes.items()},
                "planner_data": self.planner_data, "planner_data_pickle": self.planner_data_pickle,
                "properties": self.properties}


def _agree(comm: Any, message: dict, coordinator: int, step: int) -> tuple[list[tuple], list[dict] | None]:
    """The save's entries as the coordinator merged every rank's message
    (_merged_entries), the same on every rank, or the same error raised on
    every rank. Each rank sends its message to the coordinator alone and
    receives the merged entries: what a rank other than the coordinator
    receives grows with the state dict, not with the world size (an
    all-gather of every rank's message made it grow with both). Also
    returns every rank's message on the coordinator (None elsewhere). DCP's
    ranks trust each other's pickles, as its own gather_object does."""
    if comm is None:
        return _merged_entries(step, [message], 0), [message]
    everyone = None

    def decide(parts: list, missing: dict) -> bytes:
        nonlocal everyone
        try:
            if missing:
                failures = {r: f"its plan did not reach the coordinator: {why}" for r, why in missing.items()}
                text = "; ".join(f"rank {r}: {e}" for r, e in sorted(failures.items()))
                raise CheckpointError(f"failed to prepare the DCP save of step {step} ({text})", code="Internal",
                                      rank_failures=failures)
            everyone = [pickle.loads(p) for p in parts]
            outcome: dict[str, Any] = {"entries": _merged_entries(step, everyone, coordinator)}
        except CheckpointError as e:
            outcome = {"error": (type(e).__name__, str(e), e.code, e.rank_failures)}
        except Exception as e:  # noqa: BLE001 - every rank must still hear of it
            outcome = {"error": ("CheckpointError", f"failed to prepare the DCP save of step {step} "
                                 f"(rank {coordinator}: {type(e).__name__}: {e})", "Internal", {coordinator: str(e)})}
        return pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)

    got = pickle.loads(_dist.decided_by(comm, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL), coordinator,
                                        decide))
    if "error" in got:
        name, text, code, failures = got["error"]
        cls = {"InvalidArgumentError": InvalidArgumentError, "NotFoundError": NotFoundError}.get(name, CheckpointError)
        raise cls(text, code=code, rank_failures=failures)
    return got["entries"], everyone


def _merged_entries(step: int, everyone: list[dict], coordinator: int) -> list[tuple]:
    """On the coordinator: the step's entries from every rank's message, in
    the coordinator's state dict order: (fqn, "t", dtype, shape) for a
    tensor, (fqn, "b", rank holding the bytes) for bytes. Raises the error
    every rank then raises when any rank failed or the ranks disagree."""
    failures = {r: m["error"] for r, m in enumerate(everyone) if m["error"] is not None}
    if failures:
        kinds = {everyone[r]["error_kind"] for r in failures}
        cls = InvalidArgumentError if kinds == {"InvalidArgument"} else CheckpointError
        text = "; ".join(f"rank {r}: {e}" for r, e in sorted(failures.items()))
        raise cls(f"failed to prepare the DCP save of step {step} ({text})",
                  code="InvalidArgument" if cls is InvalidArgumentError else "Internal",
                  rank_failures=failures)
    steps = {m["step"] for m in everyone}
    if len(steps) != 1:
        raise InvalidArgumentError(f"the ranks save different steps at once: {sorted(steps)} (each rank's "
                                   "StorageWriter must have the same step, and DCP saves must not overlap)",
                                   code="InvalidArgument")
    # fqn -> ("t", dtype, shape) or ("b", rank holding the bytes), first seen
    # scanning the ranks in order.
    kinds: dict[str, tuple] = {}
    seen = 0
    first: dict[str, int] = {}
    for r, m in enumerate(everyone):
        for fqn, dtype, shape in m["tensors"]:
            prev = kinds.setdefault(fqn, ("t", dtype, shape))
            if prev != ("t", dtype, shape):
                what = "a bytes entry" if prev[0] == "b" else f"{prev[1]} {prev[2]}"
                raise InvalidArgumentError(f"entry '{fqn}': rank {r} saves a {dtype} tensor of shape {shape}, "
                                           f"another rank {what}", code="InvalidArgument")
            first.setdefault(fqn, seen)
            seen += 1
        for fqn in m["bytes"]:
            prev = kinds.setdefault(fqn, ("b", r))
            if prev[0] != "b":
                raise InvalidArgumentError(f"entry '{fqn}': rank {r} saves bytes, another rank a tensor",
                                           code="InvalidArgument")
            first.setdefault(fqn, seen)
            seen += 1
    order = everyone[coordinator]["order"] or []
    position = {fqn: i for i, fqn in enumerate(order)}
    return [(fqn, *kinds[fqn]) for fqn in sorted(kinds, key=lambda f: (position.get(f, len(order)), first[f]))]


def _state_dict_for(entries: list[tuple], everyone: list[dict] | None, rank: int, coordinator: int,
                    mine: _LocalWrite) -> Any:
    """The engine state dict this rank saves: every entry (the same on every
    rank), this rank's shards, and on the coordinator every rank's bytes
    (from `everyone`, the ranks' messages it gathered)."""
    sd = _ckptdb.StateDict()
    for fqn, kind, *rest in entries:
        if kind == "t":
            dtype, shape = rest
            shards = mine.tensors[fqn][2] if fqn in mine.tensors else []
            sd.add_sharded(fqn, dtype, shape, shards)
        elif rank == coordinator:  # only the coordinator's bytes entries are stored
            holder = rest[0]
            data = mine.bytes[fqn] if fqn in mine.bytes else everyone[holder]["bytes"][fqn]  # type: ignore[index]
            sd.add_bytes(fqn, data, _state.TORCH_SAVE)
        else:
            sd.add_bytes(fqn, b"", _state.TORCH_SAVE)
    return sd


# --- DCP's metadata, kept with the step ------------------------------------------------
# A JSON object (proto/FORMAT.md, "Annotations"): "format" (1), "version"
# (DCP's format version, as FileSystemWriter records it), "save_id" (the
# StorageWriter's), "planner_data" ({fqn: [key, ...]} or null) or
# "planner_data_pickle" (base64 of a pickle, for planner_data of another
# kind), "properties" ({fqn: {field: value}}: the TensorProperties fields
# other than dtype that differ from their defaults).
_RECORD_FORMAT = 1

try:
    from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION as _DCP_VERSION
except ImportError:  # pragma: no cover - torch before DCP versioned its metadata
    _DCP_VERSION = None


def _json_value(value: Any) -> Any:
    """A TensorProperties field as JSON (layouts and memory formats by their
    names, sequences as lists); None when it has no JSON form."""
    if isinstance(value, (torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [int(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return None


def _properties_record(props: Any) -> dict:
    out: dict[str, Any] = {}
    if not dataclasses.is_dataclass(props):
        return out
    for f in dataclasses.fields(props):
        if f.name == "dtype":
            continue  # the entry's own
        value = getattr(props, f.name, None)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = dataclasses.MISSING
        if value == default:
            continue
        encoded = _json_value(value)
        if encoded is not None or value is None:
            out[f.name] = encoded
    return out


def _properties_from(dtype: torch.dtype, record: dict) -> TensorProperties:
    known = {f.name for f in dataclasses.fields(TensorProperties)}
    kwargs: dict[str, Any] = {"dtype": dtype}
    for name, value in record.items():
        if name not in known or name == "dtype":
            continue  # a field of another torch version
        if name in ("layout", "memory_format") and isinstance(value, str):
            value = getattr(torch, value.removeprefix("torch."))
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return TensorProperties(**kwargs)


def _is_paths_map(planner_data: Any) -> bool:
    """planner_data as DCP's planners make it: {fqn: (str or int key, ...)}."""
    return isinstance(planner_data, dict) and all(
        isinstance(fqn, str) and isinstance(path, (tuple, list)) and
        all(isinstance(k, str) or (isinstance(k, int) and not isinstance(k, bool)) for k in path)
        for fqn, path in planner_data.items())


def _dcp_record(everyone: list[dict], coordinator: int, metadata: Metadata | None, save_id: str) -> bytes:
    """The annotation the coordinator stores: from DCP's global Metadata when
    its planner kept it, else planner_data merged over the ranks (the first
    rank naming an FQN wins, as in DefaultSavePlanner's ChainMap) and each
    tensor's properties as the first rank holding a chunk of it has them."""
    record: dict[str, Any] = {"format": _RECORD_FORMAT, "version": _DCP_VERSION, "save_id": save_id}
    other: bytes | None = None        # planner_data that is not a map of paths, pickled
    if metadata is not None:
        planner_data = metadata.planner_data
        properties = {fqn: _properties_record(m.properties) for fqn, m in metadata.state_dict_metadata.items()
                      if isinstance(m, TensorStorageMetadata)}
    else:
        planner_data = None
        properties = {}
        for m in everyone:
            for fqn, p in m["properties"].items():
                properties.setdefault(fqn, p)
            if m["planner_data"] is not None:
                planner_data = {} if planner_data is None else planner_data
                for fqn, path in m["planner_data"].items():
                    planner_data.setdefault(fqn, path)
        other = everyone[coordinator]["planner_data_pickle"]
    record["properties"] = {fqn: p for fqn, p in properties.items() if p}
    if other is None and planner_data is not None and not _is_paths_map(planner_data):
        other = pickle.dumps(planner_data, protocol=pickle.HIGHEST_PROTOCOL)
    if other is not None:
        record["planner_data_pickle"] = base64.b64encode(other).decode("ascii")
    else:
        record["planner_data"] = None if planner_data is None else {k: list(v) for k, v in planner_data.items()}
    return json.dumps(record, separators=(",", ":")).encode()


def _read_dcp_record(store: Store, n: int) -> dict | None:
    """The DCP metadata stored with step n; None for a step that has none
    (saved by ckptdb.save, or by a DCP save before ckptdb stored it)."""
    blob = store._reader().annotations(n).get(_ANNOTATION)
    if blob is None:
        return None
    try:
        record = json.loads(blob)
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        raise ValueError(f"step {n}: the DCP metadata stored with it (annotation '{_ANNOTATION}') does not "
                         f"decode: {e}") from e
    if record.get("format") != _RECORD_FORMAT:
        raise ValueError(f"step {n}: its DCP metadata has format {record.get('format')!r}; this ckptdb reads "
                         f"format {_RECORD_FORMAT} (a newer ckptdb wrote it)")
    return record


def _planner_data(record: dict | None, fqns: Any) -> Any:
    if record is None:
        return {fqn: (fqn,) for fqn in fqns}  # every FQN a top-level key
    if "planner_data_pickle" in record:
        return pickle.loads(base64.b64decode(record["planner_data_pickle"]))
    if record.get("planner_data") is None:
        return None
    return {fqn: tuple(path) for fqn, path in record["planner_data"].items()}


# --- loads -------------------------------------------------------------------------


class StorageReader(_DcpStorageReader):
    """Reads a ckptdb step for dcp.load.

    Args:
        store: the store's path, a bucket URL "s3://BUCKET/PREFIX", or a
            ckptdb.Store.
        step: a step number, "latest" (default) or a tag name; resolved when
            DCP reads the metadata, the coordinator's answer used by every
            rank. ``reader.step_loaded`` is the number read.

    ``dcp.load(..., checkpoint_id=path)`` with this reader loads from `path`.
    """

    def __init__(self, store: Any, step: StepRef = "latest") -> None:
        super().__init__()
        self._store: Store = _store(store)
        _refuse_coordinator_only(self._store, "StorageReader", "ckptdb.load")
        if isinstance(step, bool) or not isinstance(step, (int, str)):
            raise TypeError(f"step must be an int, 'latest' or a tag name, not {type(step).__name__}")
        self.step = _check_step(step) if isinstance(step, int) else step
        self.step_loaded: int | None = None
        self._load_id = uuid.uuid4().hex
        # What read_metadata read on this rank (the step, its entries by FQN
        # without their pieces), for read_data: a rank reads the step's
        # pieces once per load.
        self._read: tuple[int, dict] | None = None

    def __getstate__(self) -> dict:
        d = self.__dict__.copy()
        d["_store"] = (self._store.path, dict(self._store._options))
        d["_read"] = None
        return d

    def __setstate__(self, d: dict) -> None:
        path, options = d.pop("_store")
        self.__dict__.update(d)
        self._store = Store(path, **options)

    @property
    def checkpoint_id(self) -> str:
        return self._store.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        """A path that holds a ckptdb store; any bucket URL
        (s3://BUCKET/PREFIX: whether it holds a store is found by the load)."""
        if not isinstance(checkpoint_id, (str, os.PathLike)):
            return False
        if isinstance(checkpoint_id, str) and checkpoint_id.startswith("s3://"):
            return True
        return os.path.isfile(os.path.join(os.fspath(checkpoint_id), "CKPTDB"))

    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        if checkpoint_id:
            if store_path(checkpoint_id) != self._store.path:
                self._store = _store(checkpoint_id)
        self.step_loaded = None
        self._load_id = uuid.uuid4().hex
        self._read = None

    def read_metadata(self, *args: Any) -> Metadata:
        """DCP's Metadata of the step (see the module's docstring)."""
        n = self._store.resolve(self.step)
        self.step_loaded = n
        entries = self._store._reader(refresh=True).entries(n)
        record = _read_dcp_record(self._store, n)
        properties = record.get("properties", {}) if record is not None else {}
        md: dict[str, Any] = {}
        with _collector_paused():
            for e in entries:
                if e["kind"] == "bytes":
                    md[e["fqn"]] = BytesStorageMetadata()
                    continue
                sizes: dict[tuple, torch.Size] = {}  # (the pieces of an entry mostly have one shape)
                md[e["fqn"]] = TensorStorageMetadata(
                    properties=_properties_from(_torch_dtype(e["dtype"]), properties.get(e["fqn"], {})),
                    size=torch.Size(e["shape"]),
                    chunks=[ChunkStorageMetadata(offsets=torch.Size(o), sizes=_size_of(sizes, s))
                            for o, s in e.pop("pieces")])
            self._read = (n, {e["fqn"]: e for e in entries})
        kwargs: dict[str, Any] = {}
        fields = {f.name for f in dataclasses.fields(Metadata)}
        if "storage_meta" in fields:
            save_id = record.get("save_id") if record is not None else None
            kwargs["storage_meta"] = _storage_meta(self._store.path, save_id=save_id, load_id=self._load_id)
        if "version" in fields and record is not None:
            kwargs["version"] = record.get("version")
        return Metadata(state_dict_metadata=md, planner_data=_planner_data(record, md),
                        storage_data=_LoadInfo(n), **kwargs)

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        if isinstance(metadata.storage_data, _LoadInfo):
            self.step_loaded = metadata.storage_data.step

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        # Every rank reads the step the coordinator resolved.
        if self.step_loaded is None:
            return plans
        return [dataclasses.replace(p, storage_data=_LoadInfo(self.step_loaded)) for p in plans]

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        if isinstance(plan.storage_data, _LoadInfo):
            self.step_loaded = plan.storage_data.step
        if self.step_loaded is None:
            self.step_loaded = self._store.resolve(self.step)
        n = self.step_loaded
        # The entries read_metadata read on this rank, when it read this step
        # (else, as when DCP hands a rank its plan without, the step's
        # summary: the load reads the pieces it needs).
        read, self._read = self._read, None
        reader = self._store._reader(refresh=read is None or read[0] != n)
        if read is not None and read[0] == n:
            saved = read[1]
        else:
            saved = {e["fqn"]: e for e in reader.entries(n, pieces=False)}

        tensor_items = [i for i in plan.items if i.type != LoadItemType.BYTE_IO]
        byte_items = [i for i in plan.items if i.type == LoadItemType.BYTE_IO]
        data = _read_bytes(reader, n, saved, {i.storage_index.fqn for i in byte_items})
        for rnd in _rounds(tensor_items):
            _read_tensors(reader, n, saved, rnd, planner)
        for item in byte_items:
            fqn = item.storage_index.fqn
            planner.load_bytes(item, io.BytesIO(_as_torch_save(fqn, data[fqn], saved[fqn]["bytes_encoding"])))
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut


@contextlib.contextmanager
def _collector_paused() -> Any:
    """Python's cyclic garbage collector off meanwhile: a step of many ranks
    makes an object or more per piece (hundreds of thousands), none of them
    in a cycle, and the collector went through them all again and again."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _size_of(cache: dict, sizes: list) -> torch.Size:
    key = tuple(sizes)
    got = cache.get(key)
    if got is None:
        got = cache[key] = torch.Size(key)
    return got


def _entry(saved: dict, fqn: str, n: int) -> dict:
    e = saved.get(fqn)
    if e is None:
        raise NotFoundError(f"entry '{fqn}' is not in step {n}", code="NotFound")
    return e


def _region_of(item: ReadItem) -> tuple[list[int], list[int]]:
    """The global region a tensor ReadItem reads: its storage chunk's offset
    plus the offset within that chunk, and the lengths."""
    base = item.storage_index.offset or torch.Size([0] * len(item.lengths))
    return [int(b) + int(o) for b, o in zip(base, item.storage_offsets)], [int(n) for n in item.lengths]


def _rounds(items: list[ReadItem]) -> list[list[ReadItem]]:
    """The items split into groups whose regions of one FQN do not overlap
    (an engine entry's shards must not). Items of different saved chunks
    never overlap (the pieces of a step are disjoint), so only items of the
    same chunk are compared; normally everything is one group."""
    rounds: list[list[ReadItem]] = []
    placed: list[dict[MetadataIndex, list[tuple]]] = []  # per round: chunk -> regions
    for item in items:
        off, size = _region_of(item)
        key = MetadataIndex(item.storage_index.fqn, item.storage_index.offset)
        for i, taken in enumerate(placed):
            if not any(_overlap(off, size, o, s) for o, s in taken.get(key, ())):
                break
        else:
            i = len(rounds)
            rounds.append([])
            placed.append({})
        rounds[i].append(item)
        placed[i].setdefault(key, []).append((off, size))
    return rounds


def _overlap(a_off: list[int], a_size: list[int], b_off: list[int], b_size: list[int]) -> bool:
    if any(s == 0 for s in a_size) or any(s == 0 for s in b_size):
        return False
    return all(ao < bo + bs and bo < ao + as_ for ao, as_, bo, bs in zip(a_off, a_size, b_off, b_size))


def _read_tensors(reader: Any, n: int, saved: dict, items: list[ReadItem], planner: LoadPlanner) -> None:
    """One engine load (local) of every item's region, straight into the
    planner's target where it has the saved dtype and sits on the CPU or a
    CUDA device, else through a CPU tensor copied over afterwards."""
    shards: dict[str, list] = {}
    keep: list = []
    after: list = []              # callables run after the load (copy-backs)
    commits: list[tuple[ReadItem, torch.Tensor]] = []
    for item in items:
        fqn = item.storage_index.fqn
        e = _entry(saved, fqn, n)
        if e["kind"] == "bytes":
            raise InvalidArgumentError(f"entry '{fqn}' of step {n} is a bytes entry, not a tensor",
                                       code="InvalidArgument")
        off, size = _region_of(item)
        target = planner.resolve_tensor(item).detach()
        if list(target.shape) != size:
            raise ValueError(f"entry '{fqn}': the planner's target has shape {list(target.shape)}, "
                             f"the read {size}")
        dtype = _torch_dtype(e["dtype"])
        if target.dtype == dtype and target.device.type in ("cpu", "cuda"):
            buf = target
        else:
            buf = torch.empty(size, dtype=dtype)
            after.append(lambda t=target, b=buf: t.copy_(b))
        r = _state.region(fqn, buf, for_load=True)
        keep.append(r.keep)
        if r.copy_back is not None:
            after.insert(0, r.copy_back)  # stand-ins first: a staged copy reads `buf`
        shards.setdefault(fqn, []).append((off, r.shape, r.data, r.nbytes, r.device))
        commits.append((item, target))
    if not shards:
        return
    sd = _ckptdb.StateDict()
    for fqn, specs in shards.items():
        e = saved[fqn]
        sd.add_sharded(fqn, e["dtype"], list(e["shape"]), specs)
    _ckptdb.load(sd, reader, n, None, 0, [], False, False)
    for f in after:
        f()
    for item, target in commits:
        planner.commit_tensor(item, target)


def _read_bytes(reader: Any, n: int, saved: dict, fqns: set[str]) -> dict[str, bytes]:
    if not fqns:
        return {}
    sd = _ckptdb.StateDict()
    for fqn in sorted(fqns):
        if _entry(saved, fqn, n)["kind"] != "bytes":
            raise InvalidArgumentError(f"entry '{fqn}' of step {n} is a tensor, not a bytes entry",
                                       code="InvalidArgument")
        sd.add_bytes(fqn, b"")
    _ckptdb.load(sd, reader, n, None, 0, [], False, False)
    return {fqn: sd.get_bytes(fqn) for fqn in fqns}


def _as_torch_save(fqn: str, data: bytes, encoding: str) -> bytes:
    """The bytes DCP's load_bytes expects (torch.save's) for a bytes entry
    of the encoding the step recorded: a DCP save's as they are, ckptdb.save's
    (bytes, or a pickled object) turned into torch.save's form. Steps written
    before encodings were recorded are told apart by their bytes."""
    if encoding == _state.TORCH_SAVE:
        return data
    if encoding == _state.UNRECORDED:
        if data[:4] == b"PK\x03\x04":   # torch.save's zip format
            return data
        try:
            obj = pickle.loads(data)
        except Exception:  # noqa: BLE001 - bytes saved as they are
            obj = data
    else:
        obj = _state.decode_object(fqn, data, encoding, None)
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()
